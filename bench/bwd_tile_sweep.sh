#!/bin/sh
# The tiled backward's tile sizes (keys per item, query rows per block: block_k, block_q) swept on
# the GPU machine's CPU at 2 and 16 threads, beside PyTorch's CPU backward at 2 threads in the same
# call (bench/RESULTS.md, "CPU backward"):   sh bench/bwd_tile_sweep.sh   (writes under $OUT)
set -u
OUT=${OUT:-/tmp/bwd_tile_sweep}
CONFIGS=${CONFIGS:-"96x64 192x64 192x32 128x64 96x32"}
mkdir -p "$OUT"
if printf '#include <cblas.h>\nint main(void){return 0;}\n' | cc -x c - -o /dev/null -lopenblas 2>/dev/null; then
    BLAS=""; LIBS="-lopenblas -lm -lpthread"
else
    BLAS="-DFLASHATTN_NO_BLAS"; LIBS="-lm -lpthread"
fi
cc -O2 -std=c99 $BLAS -I. bench/bench_backward.c -o "$OUT/bench_backward" $LIBS || exit 1
for t in 2 16; do
    for c in $CONFIGS; do
        bk=${c%x*} bq=${c#*x}
        timeout 60 "$OUT/bench_backward" --threads $t --no-naive --no-row-sgemm --few-reps --max-s 4096 --csv \
            --block-k "$bk" --block-q "$bq" > "$OUT/sweep_t${t}_$c.csv"
    done
done
PYTHONUNBUFFERED=1 timeout 120 python3 bench/torch_cpu.py --backward --threads 2 --max-s 4096 --quick --csv > "$OUT/torch_bwd_t2.csv"
python3 - "$OUT" $CONFIGS <<'PY'
import csv, sys, os
out, cfgs = sys.argv[1], sys.argv[2:]
def rows(p):
    if not os.path.exists(p): return []
    with open(p) as f: return list(csv.DictReader(l for l in f if not l.startswith("#")))
torch = {(r["kind"], r["Sq"], r["D"], r["causal"]): float(r["torch_bwd_ms"]) for r in rows(f"{out}/torch_bwd_t2.csv")}
for t in (2, 16):
    print(f"threads {t}: tiled backward ms per block_k x block_q" + ("; x = torch / best" if t == 2 else ""))
    tab = {c: {(r["kind"], r["Sq"], r["D"], r["causal"]): float(r["tiled_ms"]) for r in rows(f"{out}/sweep_t{t}_{c}.csv")} for c in cfgs}
    keys = [k for k in tab[cfgs[0]]]
    print(f"{'kind':8} {'S':>5} {'D':>3} {'c':>1} | " + " ".join(f"{c:>9}" for c in cfgs) + (" | torch ms      x" if t == 2 else ""))
    for k in keys:
        v = [tab[c].get(k, float('nan')) for c in cfgs]
        line = f"{k[0]:8} {k[1]:>5} {k[2]:>3} {k[3]:>1} | " + " ".join(f"{x:9.2f}" for x in v)
        if t == 2 and k in torch: line += f" | {torch[k]:8.2f} {torch[k] / min(v):6.2f}"
        print(line)
PY
