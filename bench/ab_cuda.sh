#!/bin/bash
# bench/ab_cuda.sh OLD NEW [ROUNDS] - A/B of two bench_cuda builds (`make build/bench_cuda` at two
# commits) on the GPU machine, in one call: OLD, NEW, OLD, NEW, ... ROUNDS times each (default 2),
# fa_cuda_tiled rows only (--quick --no-naive --no-check --no-tune: bf16, fp16 and fp32, D = 64 and
# 128, causal and not, S = 1k, 4k, 16k, and the window/softcap/ALiBi rows at S = 16k; every timed
# row still checked against float64 on sampled rows). Prints one table: the median TFLOP/s of each
# build per row, new / old, and each build's spread (max / min over its rounds), which is the noise
# a difference has to beat. Raw logs go to $OUT/ab_raw.log, the table to $OUT/ab_table.txt
# ($OUT: the device tool's folder; build/ when unset).
set -u
OLD=$1 NEW=$2 ROUNDS=${3:-2}
LOG=${OUT:-build}
TMP=$(mktemp -d)
mkdir -p "$LOG"
for r in $(seq 1 "$ROUNDS"); do
  for w in old new; do
    bin=$OLD; [ "$w" = new ] && bin=$NEW
    timeout "${AB_TIMEOUT:-90}" "$bin" --quick --no-naive --no-check --no-tune > "$TMP/${w}_$r.log" 2>&1
    echo "# $w round $r: exit $? ($(grep -c '^ROW' "$TMP/${w}_$r.log") rows)"
  done
done
for f in "$TMP"/*.log; do echo "==== $(basename "$f")"; cat "$f"; done > "$LOG/ab_raw.log"
python3 - "$TMP" <<'EOF' | tee "$LOG/ab_table.txt"
import glob, os, statistics, sys
rows, fails = {}, 0
for fn in sorted(glob.glob(os.path.join(sys.argv[1], '*.log'))):
    w = os.path.basename(fn).split('_')[0]
    for ln in open(fn):
        f = ln.split()
        if len(f) < 13 or f[0] != 'ROW' or f[1] != 'fa_cuda_tiled':
            continue
        if f[12] != 'OK':
            fails += 1
        if f[10] == '-':
            continue
        key = (f[2], int(f[3]), int(f[4]), int(f[5]), f[8])
        rows.setdefault(key, {}).setdefault(w, []).append(float(f[10]))
print('%-5s %4s %3s %6s %-10s %9s %9s %7s %8s %8s' % ('dtype', 'D', 'cau', 'S', 'extra', 'old', 'new', 'new/old',
                                                     'old max/min', 'new max/min'))
ratios = []
for k in sorted(rows, key=lambda k: ({'bf16': 0, 'fp16': 1, 'fp32': 2}[k[0]], k[1], k[4] != '-', k[4], k[2], k[3])):
    o, n = rows[k].get('old', []), rows[k].get('new', [])
    if not o or not n:
        continue
    mo, mn = statistics.median(o), statistics.median(n)
    ratios.append(mn / mo)
    print('%-5s %4d %3d %6d %-10s %9.1f %9.1f %7.3f %8.3f %8.3f' % (k + (mo, mn, mn / mo, max(o) / min(o), max(n) / min(n))))
if ratios:
    print('# %d rows: new/old geometric mean %.4f, min %.3f, max %.3f; %d row check(s) failed' % (
        len(ratios), statistics.geometric_mean(ratios), min(ratios), max(ratios), fails))
EOF
rm -rf "$TMP"
