#!/bin/bash
# run_cuda_bench.sh - bench_cuda (ours) and torch_sdpa.py (PyTorch) in one call, then one combined
# table: TFLOP/s per row and ours / torch flash. Run from the repository root on the GPU machine:
#     bench/run_cuda_bench.sh [--quick] [bench_cuda options...]
#     bench/run_cuda_bench.sh --decode    (issue 14: the split-key decode rows alone, K/V GB/s, their
#                                          fraction of a device-to-device copy, beside PyTorch's flash
#                                          and cuDNN backends; one combined decode table)
# Uses build/bench_cuda when present (built here by `make bench-cuda-build`), else builds it.
# Logs go to $OUT (the device tool's folder) when set, else to build/.
set -u
LOG=${OUT:-build}
mkdir -p "$LOG"
T0=$(date +%s)
if [ ! -x build/bench_cuda ]; then make bench-cuda-build || exit 1; fi
# libcublas (fa_cuda_naive): the toolkit's, else the copy inside PyTorch's wheels
if ldd build/bench_cuda | grep -q "not found"; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c "import nvidia.cublas as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null); do
    if [ -e "$d/libcublas.so.13" ]; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
  done
fi
build/bench_cuda --help >/dev/null 2>&1
if [ $? -ne 2 ]; then   # built elsewhere and cannot start here (its usage exits 2)
  echo "# build/bench_cuda does not start here: rebuilding"; rm -f build/bench_cuda; make bench-cuda-build || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee "$LOG/nvidia_smi.txt"
QUICK=""
DECODE=""
for a in "$@"; do [ "$a" = "--quick" ] && QUICK="--quick"; [ "$a" = "--decode" ] && DECODE="--decode"; done
if [ -n "$DECODE" ]; then
  timeout ${BENCH_TIMEOUT:-110} build/bench_cuda --decode 2>&1 | tee "$LOG/bench_cuda_decode.log"
  echo "# bench_cuda --decode exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
  PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-90} python3 bench/torch_sdpa.py --decode 2>&1 | tee "$LOG/torch_sdpa_decode.log"
  echo "# torch_sdpa --decode exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
  python3 - "$LOG/bench_cuda_decode.log" "$LOG/torch_sdpa_decode.log" <<'EOF2' | tee "$LOG/combined_decode.txt"
import sys
rows, order = {}, []
for fn in sys.argv[1:]:
    try:
        lines = open(fn).read().splitlines()
    except OSError:
        continue
    for ln in lines:
        f = ln.split()
        if len(f) < 12 or f[0] != "DEC":
            continue
        key = tuple(int(x) for x in f[2:7])
        if key not in rows:
            rows[key] = {}
            order.append(key)
        rows[key][f[1]] = (f[8], f[9], f[11] + ("" if len(f) < 13 else " " + " ".join(f[12:])))
print("\nDecode, bf16, D = 128 (K/V GB/s, fraction of the same run's device-to-device copy; ratio = ours / best torch)")
print("%3s %2s %8s %3s %3s | %16s | %18s | %18s | %6s" % ("B", "Sq", "Sk", "Hq", "Hkv", "fa_cuda_tiled", "torch_flash", "torch_cudnn", "ratio"))
for k in order:
    r = rows[k]
    def cell(n):
        if n not in r or r[n][0] == "-":
            return "-"
        gb, fr, st = r[n]
        return "%s (%s)%s" % (gb, fr, "" if st == "OK" else " " + st)
    ours = float(r["fa_cuda_tiled"][0]) if "fa_cuda_tiled" in r and r["fa_cuda_tiled"][0] != "-" else None
    best = max([float(r[n][0]) for n in ("torch_flash", "torch_cudnn") if n in r and r[n][0] != "-"] or [0])
    ratio = "%.2f" % (ours / best) if ours and best else "-"
    print("%3d %2d %8d %3d %3d | %16s | %18s | %18s | %6s" % (k + (cell("fa_cuda_tiled"), cell("torch_flash"), cell("torch_cudnn"), ratio)))
EOF2
  echo "# total $(( $(date +%s) - T0 )) s"
  exit 0
fi
timeout ${BENCH_TIMEOUT:-110} build/bench_cuda "$@" 2>&1 | tee "$LOG/bench_cuda.log"
echo "# bench_cuda exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-90} python3 bench/torch_sdpa.py $QUICK 2>&1 | tee "$LOG/torch_sdpa.log"
echo "# torch_sdpa exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
python3 - "$LOG/bench_cuda.log" "$LOG/torch_sdpa.log" <<'EOF' | tee "$LOG/combined.txt"
import sys
rows = {}
impls = []
for fn in sys.argv[1:]:
    try:
        lines = open(fn).read().splitlines()
    except OSError:
        continue
    for ln in lines:
        f = ln.split()
        if len(f) < 13 or f[0] != "ROW" or f[8] == "tune":
            continue
        impl, dt, D, causal, S, extra, tf, status = f[1], f[2], int(f[3]), int(f[4]), int(f[5]), f[8], f[10], f[12]
        if impl not in impls:
            impls.append(impl)
        v = "-" if tf == "-" else (tf if status == "OK" else tf + "!")
        rows.setdefault((dt, D, causal, S, extra), {})[impl] = v
cols = [c for c in ("fa_cuda_tiled", "tc_tiled", "fa_cuda_naive", "torch_flash", "torch_efficient", "torch_cudnn", "torch_naive") if c in impls]
ours = "fa_cuda_tiled" if "fa_cuda_tiled" in impls else "tc_tiled"
print("\nCombined (TFLOP/s; '!' = failed its accuracy check; ratio = %s / torch_flash)" % ours)
hdr = "%-5s %4s %3s %6s %-10s" % ("dtype", "D", "cau", "S", "extra") + "".join("%16s" % c for c in cols) + "%8s" % "ratio"
print(hdr)
def key(k):
    return ({"bf16": 0, "fp16": 1, "fp32": 2}[k[0]], k[1], k[4] != "-", k[4], k[2], k[3])
for k in sorted(rows, key=key):
    r = rows[k]
    ratio = "-"
    try:
        ratio = "%.2f" % (float(r[ours].rstrip("!")) / float(r["torch_flash"].rstrip("!")))
    except (KeyError, ValueError, ZeroDivisionError):
        pass
    print("%-5s %4d %3d %6d %-10s" % k + "".join("%16s" % r.get(c, "") for c in cols) + "%8s" % ratio)
EOF
echo "# total $(( $(date +%s) - T0 )) s"
