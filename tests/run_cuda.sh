#!/usr/bin/env bash
# tests/run_cuda.sh - the CUDA suite on a GPU machine, from the repository root, with `build`
# (test_cuda, test_cuda_backward, cuda_quickstart: `make cuda-objs build/test_cuda
# build/test_cuda_backward build/cuda_quickstart` on the
# build machine) and `.devlib` (libcmocka.so.0, for machines without it) present.
#   1. build/test_cuda and build/test_cuda_backward: the whole cmocka suites;  2. build/cuda_quickstart;
#   3. timings (FA_TIME=1) and, when python3 has torch, PyTorch's naive matmul-softmax-matmul
#      and SDPA at the same shapes (tests/torch_time.py; TIMING=0 skips 3);
#   4. compute-sanitizer --tool memcheck and --tool racecheck on the reduced grid (SMALL=1), each
#      under SAN_TIMEOUT seconds (default 180: racecheck took 90-120 s on the H200 machine).
# Logs go to $OUT (default build/cuda-logs). Exit status: non-zero if 1, 2 or 4 failed.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/cuda_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
rc=0

echo "== test_cuda (full grid)"
timeout 240 ./build/test_cuda 2>&1 | tee "$OUT/test_cuda.log" || rc=1

echo "== test_cuda_backward (full grid)"
timeout 120 ./build/test_cuda_backward 2>&1 | tee "$OUT/test_cuda_backward.log" || rc=1

echo "== cuda_quickstart"
./build/cuda_quickstart 2>&1 | tee "$OUT/quickstart.log" || rc=1

if [ "${TIMING:-1}" != 0 ]; then
  echo "== timings"
  FA_TIME=1 timeout 40 ./build/test_cuda 2>&1 | grep TIMING | tee "$OUT/timing.log"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout 60 python3 tests/torch_time.py --set mixed 2>&1 | tee "$OUT/timing_torch.log"
  else
    echo "SKIPPED: python3 with torch and a GPU not found (no PyTorch comparison)"
  fi
fi
if command -v compute-sanitizer >/dev/null 2>&1; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool (SMALL=1)"
    SMALL=1 timeout ${SAN_TIMEOUT:-180} compute-sanitizer --tool "$tool" --error-exitcode 97 ./build/test_cuda \
      > "$OUT/sanitizer_$tool.log" 2>&1 || rc=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[ *(PASSED|FAILED) *\]|Error|Hazard" "$OUT/sanitizer_$tool.log" | head -n 20
    echo "== compute-sanitizer --tool $tool test_cuda_backward (SMALL=1)"
    SMALL=1 timeout ${SAN_TIMEOUT:-180} compute-sanitizer --tool "$tool" --error-exitcode 97 ./build/test_cuda_backward \
      > "$OUT/sanitizer_bwd_$tool.log" 2>&1 || rc=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[ *(PASSED|FAILED) *\]|Error|Hazard" "$OUT/sanitizer_bwd_$tool.log" | head -n 20
  done
else
  echo "SKIPPED: compute-sanitizer not found"
fi

echo "== run_cuda.sh exit $rc"
exit $rc
