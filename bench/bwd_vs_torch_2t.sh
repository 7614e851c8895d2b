#!/bin/sh
# The tiled backward beside PyTorch's CPU backward at one thread count (default 2), one call on the
# GPU machine's CPU: the short form of `PART=backward sh bench/cpu_vs_torch.sh` (bench/RESULTS.md,
# "CPU backward").   THREADS=2 MAXS=4096 sh bench/bwd_vs_torch_2t.sh   (writes under $OUT)
set -u
OUT=${OUT:-/tmp/bwd_vs_torch}
T=${THREADS:-2}
MAXS=${MAXS:-4096}
mkdir -p "$OUT"
cc -O2 -std=c99 -I. bench/bench_backward.c -o "$OUT/bench_backward" -lopenblas -lm -lpthread || exit 1
timeout 100 "$OUT/bench_backward" --threads "$T" --no-naive --no-row-sgemm --few-reps --max-s "$MAXS" --csv > "$OUT/ours.csv"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/torch_cpu.py --backward --threads "$T" --max-s "$MAXS" --quick --csv > "$OUT/torch.csv"
python3 - "$OUT" <<'PY'
import csv, sys
out = sys.argv[1]
def rows(p):
    with open(p) as f: return list(csv.DictReader(l for l in f if not l.startswith("#")))
torch = {(r["kind"], r["Sq"], r["D"], r["causal"]): float(r["torch_bwd_ms"]) for r in rows(f"{out}/torch.csv")}
n = met = 0
print(f"{'kind':8} {'S':>5} {'D':>3} {'c':>1} | {'ours ms':>9} {'torch ms':>9} {'x':>6}")
for r in rows(f"{out}/ours.csv"):
    k = (r["kind"], r["Sq"], r["D"], r["causal"])
    if k not in torch: continue
    ours = float(r["tiled_ms"]); x = torch[k] / ours; n += 1; met += x >= 1.2
    print(f"{k[0]:8} {k[1]:>5} {k[2]:>3} {k[3]:>1} | {ours:9.2f} {torch[k]:9.2f} {x:6.2f}")
print(f"x >= 1.2 at {met} of {n} shapes")
PY
