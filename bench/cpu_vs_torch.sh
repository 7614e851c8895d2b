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
# Issue 16: PART=half-forward / PART=half-backward: bf16 and fp16 (bench --dtype, bench_backward --dtype,
# and a bench built with -DFLASHATTN_NO_AVX512BF16 for the conversion path) against PyTorch's CPU SDPA
# in the same type (bench/torch_cpu.py --dtype), 2 and 16 threads, S <= MAXS_HALF (4096; backward
# MAXS_HALF_BWD, 2048). BIN=dir takes prebuilt bench_half, bench_half_nodp and bench_backward_half
# from dir instead of compiling (they choose their kernels at run time).
#   PART=half-forward sh bench/cpu_vs_torch.sh    (about 2 min)
#   PART=half-backward sh bench/cpu_vs_torch.sh   (about 1-2 min)
set -u
OUT=${OUT:-/tmp/cpu_vs_torch}
MAXS=${MAXS:-8192}
MAXS_BWD=${MAXS_BWD:-4096}
PART=${PART:-all}
CC=${CC:-cc}
case "$PART" in forward|backward|all|half-forward|half-backward) ;;
    *) echo "PART must be forward, backward, all, half-forward or half-backward"; exit 2;; esac
mkdir -p "$OUT"
{
    echo "cores: $(nproc)"
    grep -m1 "model name" /proc/cpuinfo
    for f in avx512f avx2 fma f16c avx512_bf16 avx512_fp16 amx_bf16 amx_tile; do grep -qw $f /proc/cpuinfo && echo "has $f"; done
    cat /proc/loadavg
} | tee "$OUT/machine.txt"
if printf '#include <cblas.h>\nint main(void){return 0;}\n' | $CC -x c - -o /dev/null -lopenblas 2>/dev/null; then
    BLAS=""; LIBS="-lopenblas -lm -lpthread"; echo "OpenBLAS found"
else
    BLAS="-DFLASHATTN_NO_BLAS"; LIBS="-lm -lpthread"; echo "no OpenBLAS: building with -DFLASHATTN_NO_BLAS, tiled only"
fi

# ---- half precision (issue 16) ------------------------------------------------------------------
case "$PART" in half-*)
    MAXS_HALF=${MAXS_HALF:-4096}
    MAXS_HALF_BWD=${MAXS_HALF_BWD:-2048}
    B=${BIN:-$OUT}
    if [ -z "${BIN:-}" ]; then
        $CC -O2 -std=c99 $BLAS -I. bench/bench.c -o "$OUT/bench_half" $LIBS || exit 1
        $CC -O2 -std=c99 $BLAS -DFLASHATTN_NO_AVX512BF16 -I. bench/bench.c -o "$OUT/bench_half_nodp" $LIBS || exit 1
        $CC -O2 -std=c99 $BLAS -I. bench/bench_backward.c -o "$OUT/bench_backward_half" $LIBS || exit 1
    fi
    if [ "$PART" = half-forward ]; then
        # PyTorch first (the comparison the targets are about); fp16 may be slow on the CPU: a shorter limit
        PYTHONUNBUFFERED=1 timeout 60 python3 bench/torch_cpu.py --dtype bf16 --threads 2 16 --max-s "$MAXS_HALF" --quick --csv > "$OUT/torch_bf16.csv"
        head -1 "$OUT/torch_bf16.csv"
        PYTHONUNBUFFERED=1 timeout 40 python3 bench/torch_cpu.py --dtype fp16 --threads 16 2 --max-s "$MAXS_HALF" --quick --csv > "$OUT/torch_fp16.csv"
        head -1 "$OUT/torch_fp16.csv"
        for t in 2 16; do
            for dt in bf16 f16; do
                timeout 60 "$B/bench_half" --dtype $dt --threads $t --few-reps --no-row-sgemm --max-s "$MAXS_HALF" > "$OUT/half_${dt}_t$t.txt"
                grep -v "^ *fa_tiled" "$OUT/half_${dt}_t$t.txt"
            done
            timeout 60 "$B/bench_half_nodp" --dtype bf16 --threads $t --few-reps --no-row-sgemm --no-decode --max-s "$MAXS_HALF" > "$OUT/half_nodp_t$t.txt"
            echo "== FLASHATTN_NO_AVX512BF16 (bf16 by conversion into the fp32 kernels), $t threads"
            grep "^prefill\|^decode" "$OUT/half_nodp_t$t.txt"
            if [ -x "$B/bench_half_noamx" ]; then     # AMX switched off: the vdpbf16ps kernels
                timeout 60 "$B/bench_half_noamx" --dtype bf16 --threads $t --few-reps --no-row-sgemm --no-decode --max-s "$MAXS_HALF" > "$OUT/half_noamx_t$t.txt"
                echo "== FLASHATTN_NO_AMX (bf16 on vdpbf16ps), $t threads"
                grep "^ceiling: vdp\|^prefill\|^decode" "$OUT/half_noamx_t$t.txt"
            fi
        done
        python3 - "$OUT" <<'PY'
import csv, os, re, sys
out = sys.argv[1]
def ours(path):
    t = {}
    if not os.path.exists(path): return t
    for l in open(path):
        m = re.match(r"(prefill|decode)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d)\s+(\d+)\s+\|\s+([\d.]+)\s+([\d.]+)", l)
        if m: t[(m[1], m[5], m[6], m[7], m[8], m[9])] = (float(m[10]), float(m[11]))
    return t
print("x = torch ms / our ms in the same type (target >= 1.5 for bf16 prefill); fp32 = our fp32 ms on the same shape")
print("nodp: FLASHATTN_NO_AVX512BF16 (conversion into the fp32 kernels); noamx: FLASHATTN_NO_AMX (vdpbf16ps)")
print(f"{'type':5} {'kind':7} {'Sq':>5} {'Sk':>5} {'D':>3} {'c':>1} {'thr':>3} | {'fp32 ms':>8} {'ours ms':>8} {'nodp ms':>8} {'noamx ms':>8} {'torch ms':>8} | {'x':>5} {'x nodp':>6} {'x noamx':>7} {'vs fp32':>7}")
for dt, tag in (("bf16", "bf16"), ("fp16", "f16")):
    path = f"{out}/torch_{dt}.csv"
    if not os.path.exists(path): continue
    for r in csv.DictReader(l for l in open(path) if not l.startswith("#")):
        key = (r["kind"], r["Sq"], r["Sk"], r["D"], r["causal"], r["threads"])
        o = ours(f"{out}/half_{tag}_t{r['threads']}.txt").get(key)
        nd = ours(f"{out}/half_nodp_t{r['threads']}.txt").get(key) if dt == "bf16" else None
        na = ours(f"{out}/half_noamx_t{r['threads']}.txt").get(key) if dt == "bf16" else None
        if not o: continue
        tm = float(r["torch_ms"])
        ndm = nd[1] if nd else float("nan")
        nam = na[1] if na else float("nan")
        print(f"{dt:5} {r['kind']:7} {r['Sq']:>5} {r['Sk']:>5} {r['D']:>3} {r['causal']:>1} {r['threads']:>3} | {o[0]:8.2f} {o[1]:8.2f} {ndm:8.2f} {nam:8.2f} {tm:8.2f} | "
              f"{tm / o[1]:5.2f} {tm / ndm:6.2f} {tm / nam:7.2f} {o[0] / o[1]:7.2f}")
PY
    else
        for t in 2 16; do
            for dt in bf16 f16; do
                timeout 80 "$B/bench_backward_half" --dtype $dt --threads $t --few-reps --max-s "$MAXS_HALF_BWD" > "$OUT/bwd_half_${dt}_t$t.txt"
                grep -v "^ *fa_tiled" "$OUT/bwd_half_${dt}_t$t.txt"
            done
        done
        PYTHONUNBUFFERED=1 timeout 100 python3 bench/torch_cpu.py --backward --dtype bf16 --threads 2 16 --max-s "$MAXS_HALF_BWD" --quick --csv > "$OUT/torch_bwd_bf16.csv"
        cat "$OUT/torch_bwd_bf16.csv"
    fi
    exit 0;;
esac

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
