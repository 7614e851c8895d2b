#!/bin/bash
# bench/ab_cuda.sh ROUNDS NAME=BIN NAME=BIN ... - A/B(/C...) of bench_cuda builds (`make build/bench_cuda`
# at different commits) on the GPU machine, in one call: the builds in turn, ROUNDS times each,
# fa_cuda_tiled rows only (--quick --no-naive --no-check --no-tune: bf16, fp16 and fp32, D = 64 and
# 128, causal and not, S = 1k, 4k, 16k, and the window/softcap/ALiBi rows at S = 16k; every timed
# row still checked against float64 on sampled rows). Prints one table: the median TFLOP/s of each
# build per row, each build over the first, and each build's spread (max / min over its rounds),
# the noise a difference has to beat. Raw logs go to $OUT/ab_raw.log, the table to
# $OUT/ab_table.txt ($OUT: the device tool's folder; build/ when unset).
# AB_ARGS adds options to every run (e.g. AB_ARGS='--budget 0.03' for shorter rows); AB_TIMEOUT caps
# each run (default 90 s).
#   e.g. bench/ab_cuda.sh 2 old=/path/old/bench_cuda new=build/bench_cuda
set -u
ROUNDS=$1
shift
LOG=${OUT:-build}
TMP=$(mktemp -d)
mkdir -p "$LOG"
for r in $(seq 1 "$ROUNDS"); do
  for nb in "$@"; do
    name=${nb%%=*} bin=${nb#*=}
    timeout "${AB_TIMEOUT:-90}" "$bin" --quick --no-naive --no-check --no-tune ${AB_ARGS:-} > "$TMP/${name}_$r.log" 2>&1
    echo "# $name round $r: exit $? ($(grep -c '^ROW' "$TMP/${name}_$r.log") rows)"
  done
done
for f in "$TMP"/*.log; do echo "==== $(basename "$f")"; cat "$f"; done > "$LOG/ab_raw.log"
names=""
for nb in "$@"; do names="$names ${nb%%=*}"; done
python3 - "$TMP" $names <<'EOF' | tee "$LOG/ab_table.txt"
import glob, os, statistics, sys
tmp, names = sys.argv[1], sys.argv[2:]
rows, fails = {}, {}
for fn in glob.glob(os.path.join(tmp, '*.log')):
    w = os.path.basename(fn).rsplit('_', 1)[0]
    for ln in open(fn):
        f = ln.split()
        if len(f) < 13 or f[0] != 'ROW' or f[1] != 'fa_cuda_tiled':
            continue
        if f[12] != 'OK':
            fails[w] = fails.get(w, 0) + 1
        if f[10] == '-':
            continue
        rows.setdefault((f[2], int(f[3]), int(f[4]), int(f[5]), f[8]), {}).setdefault(w, []).append(float(f[10]))
print('%-5s %4s %3s %6s %-10s' % ('dtype', 'D', 'cau', 'S', 'extra') + ''.join('%9s' % n for n in names) +
      ''.join('%9s' % (n + '/' + names[0])[:9] for n in names[1:]) + ''.join('%9s' % ('spr_' + n)[:9] for n in names))
ratios = {n: [] for n in names[1:]}
order = {'bf16': 0, 'fp16': 1, 'fp32': 2}
for k in sorted(rows, key=lambda k: (order[k[0]], k[1], k[4] != '-', k[4], k[2], k[3])):
    r = rows[k]
    if any(n not in r for n in names):
        continue
    med = {n: statistics.median(r[n]) for n in names}
    for n in names[1:]:
        ratios[n].append(med[n] / med[names[0]])
    print('%-5s %4d %3d %6d %-10s' % k + ''.join('%9.1f' % med[n] for n in names) +
          ''.join('%9.3f' % (med[n] / med[names[0]]) for n in names[1:]) +
          ''.join('%9.3f' % (max(r[n]) / min(r[n])) for n in names))
for n in names[1:]:
    if ratios[n]:
        print('# %s/%s over %d rows: geometric mean %.4f, min %.3f, max %.3f' % (
            n, names[0], len(ratios[n]), statistics.geometric_mean(ratios[n]), min(ratios[n]), max(ratios[n])))
print('# sampled-row checks failed: %s' % (fails or 'none'))
EOF
rm -rf "$TMP"
