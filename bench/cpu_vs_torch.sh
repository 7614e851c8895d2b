#!/bin/sh
# Issue #3, target 6: fa_tiled against PyTorch's CPU scaled_dot_product_attention, fp32, same shapes,
# same thread counts (2 and 16), in one call on the GPU machine's CPU (16 cores, PyTorch installed,
# probably no OpenBLAS: then the bench is built with -DFLASHATTN_NO_BLAS and runs tiled only).
# Issue #12: the backward part, fa_tiled_backward (bench/bench_backward.c, with and without one fa_pool)
# against PyTorch's SDPA forward+backward minus forward (bench/torch_cpu.py --backward), same shapes
# (B=2, H=4, S=512..MAXS_BWD, D=64/128, causal and not, and the GQA row), 2 and 16 threads.
#   sh bench/cpu_vs_torch.sh                  (both parts, about 6 min; writes under $OUT, or /tmp/cpu_vs_torch)
#   PART=forward sh bench/cpu_vs_torch.sh     (the forward part alone, about 4 min)
#   PART=backward sh bench/cpu_vs_torch.sh    (the backward part alone, about 2-3 min at MAXS_BWD=4096)
set -u
OUT=${OUT:-/tmp/cpu_vs_torch}
MAXS=${MAXS:-8192}
MAXS_BWD=${MAXS_BWD:-4096}
PART=${PART:-all}
CC=${CC:-cc}
case "$PART" in forward|backward|all) ;; *) echo "PART must be forward, backward or all"; exit 2;; esac
mkdir -p "$OUT"
{
    echo "cores: $(nproc)"
    grep -m1 "model name" /proc/cpuinfo
    for f in avx512f avx2 fma; do grep -qw $f /proc/cpuinfo && echo "has $f"; done
    cat /proc/loadavg
} | tee "$OUT/machine.txt"
if printf '#include <cblas.h>\nint main(void){return 0;}\n' | $CC -x c - -o /dev/null -lopenblas 2>/dev/null; then
    BLAS=""; LIBS="-lopenblas -lm -lpthread"; echo "OpenBLAS found"
else
    BLAS="-DFLASHATTN_NO_BLAS"; LIBS="-lm -lpthread"; echo "no OpenBLAS: building with -DFLASHATTN_NO_BLAS, tiled only"
fi
if [ "$PART" != backward ]; then
$CC -O2 -std=c99 $BLAS -I. bench/bench.c -o "$OUT/bench" $LIBS || exit 1
for t in 2 16; do
    timeout 80 "$OUT/bench" --threads $t --no-naive --no-scaling --no-row-sgemm --few-reps --max-s "$MAXS" --csv > "$OUT/ours_t$t.csv"
    grep "^#" "$OUT/ours_t$t.csv"
    # the same calls on one fa_pool made at the start (workers parked between calls); neither run
    # times an sgemm next to each row (OpenBLAS's threads spin after it, on the cores of the next call)
    timeout 80 "$OUT/bench" --threads $t --no-naive --no-scaling --no-row-sgemm --few-reps --max-s "$MAXS" --csv --pool > "$OUT/pool_t$t.csv"
    grep "^# flashattn" "$OUT/pool_t$t.csv"
done
PYTHONUNBUFFERED=1 timeout 110 python3 bench/torch_cpu.py --threads 2 16 --max-s "$MAXS" --quick --csv > "$OUT/torch.csv"
head -1 "$OUT/torch.csv"
python3 - "$OUT" <<'PY'
import csv, sys, os
out = sys.argv[1]
def rows(path):
    if not os.path.exists(path): return []
    with open(path) as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))
def table(name):
    t = {}
    for th in (2, 16):
        for r in rows(f"{out}/{name}_t{th}.csv"):
            t[(r["kind"], r["Sq"], r["Sk"], r["D"], r["causal"], r["threads"])] = r
    return t
ours, pool = table("ours"), table("pool")
print("x = torch ms / tiled ms; 'pool' runs the same calls on one fa_pool made at the start")
print(f"{'kind':7} {'Sq':>5} {'Sk':>5} {'D':>3} {'cau':>3} {'thr':>3} | {'tiled ms':>9} {'pool ms':>9} {'torch ms':>9} | "
      f"{'tiled GF':>8} {'torch GF':>8} | {'x':>5} {'x pool':>6}")
for r in rows(f"{out}/torch.csv"):
    key = (r["kind"], r["Sq"], r["Sk"], r["D"], r["causal"], r["threads"])
    o, q = ours.get(key), pool.get(key)
    if not o: continue
    tm, pm = float(o["tiled_ms"]), float(r["torch_ms"])
    qm = float(q["tiled_ms"]) if q else float("nan")
    print(f"{r['kind']:7} {r['Sq']:>5} {r['Sk']:>5} {r['D']:>3} {r['causal']:>3} {r['threads']:>3} | {tm:9.2f} {qm:9.2f} {pm:9.2f} | "
          f"{float(o['tiled_gflops']):8.1f} {float(r['torch_gflops']):8.1f} | {pm / tm:5.2f} {pm / qm:6.2f}")
PY
fi

# ---- the backward (issue #12) -------------------------------------------------------------------
[ "$PART" = forward ] && exit 0
$CC -O2 -std=c99 $BLAS -I. bench/bench_backward.c -o "$OUT/bench_backward" $LIBS || exit 1
for t in 2 16; do
    # no naive (its P and dS would dominate the time) and no sgemm next to each row, as above
    timeout 100 "$OUT/bench_backward" --threads $t --no-naive --no-row-sgemm --few-reps --max-s "$MAXS_BWD" --csv > "$OUT/bwd_ours_t$t.csv"
    grep "^#" "$OUT/bwd_ours_t$t.csv" | grep -v "^# *$"
    timeout 100 "$OUT/bench_backward" --threads $t --no-naive --no-row-sgemm --few-reps --max-s "$MAXS_BWD" --csv --pool > "$OUT/bwd_pool_t$t.csv"
    grep "^# flashattn\|^# load\|^# window" "$OUT/bwd_pool_t$t.csv"
done
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_cpu.py --backward --threads 2 16 --max-s "$MAXS_BWD" --quick --csv > "$OUT/torch_bwd.csv"
head -1 "$OUT/torch_bwd.csv"
python3 - "$OUT" <<'PY'
import csv, sys, os
out = sys.argv[1]
def rows(path):
    if not os.path.exists(path): return []
    with open(path) as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))
def table(name):
    t = {}
    for th in (2, 16):
        for r in rows(f"{out}/{name}_t{th}.csv"):
            t[(r["kind"], r["H"], r["Hkv"], r["Sq"], r["Sk"], r["D"], r["causal"], r["threads"])] = r
    return t
ours, pool = table("bwd_ours"), table("bwd_pool")
torch_rows = rows(f"{out}/torch_bwd.csv")
if not torch_rows:
    print("backward: no PyTorch rows (torch_bwd.csv is empty: is torch installed?)")
print("backward: x = torch backward ms / fa_tiled_backward ms (target >= 1.2); 'pool' runs the same calls on one "
      "fa_pool; GFLOP/s = 2.5 x 4*B*H*Sq*Sk*D (halved for causal) / backward time; torch's backward = "
      "median(fwd+bwd) - median(fwd)")
print(f"{'kind':7} {'H':>2} {'Hkv':>3} {'S':>5} {'D':>3} {'cau':>3} {'thr':>3} | {'tiled ms':>9} {'pool ms':>9} "
      f"{'torch ms':>9} | {'tiled GF':>8} {'pool GF':>8} {'torch GF':>8} | {'x':>5} {'x pool':>6}")
met = n = 0
for r in torch_rows:
    key = (r["kind"], r["H"], r["Hkv"], r["Sq"], r["Sk"], r["D"], r["causal"], r["threads"])
    o, q = ours.get(key), pool.get(key)
    if not o: continue
    tm, pm = float(o["tiled_ms"]), float(r["torch_bwd_ms"])
    qm = float(q["tiled_ms"]) if q else float("nan")
    qg = float(q["tiled_gflops"]) if q else float("nan")
    best = min(tm, qm) if q else tm
    n += 1; met += pm / best >= 1.2
    print(f"{r['kind']:7} {r['H']:>2} {r['Hkv']:>3} {r['Sq']:>5} {r['D']:>3} {r['causal']:>3} {r['threads']:>3} | "
          f"{tm:9.2f} {qm:9.2f} {pm:9.2f} | {float(o['tiled_gflops']):8.1f} {qg:8.1f} {float(r['torch_bwd_gflops']):8.1f} | "
          f"{pm / tm:5.2f} {pm / qm:6.2f}")
if n: print(f"backward: x >= 1.2 (the better of tiled and pool) at {met} of {n} shapes")
PY
