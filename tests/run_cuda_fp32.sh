#!/usr/bin/env bash
# tests/run_cuda_fp32.sh - the fp32 generic kernels on a GPU machine, from the repository root, with
# `build` (build/test_cuda) and `.devlib` present: 1. FA_TIME=1 timings of every fp32 kernel
# (block_q/block_k pick them, see fa__cu_generic_t); 2. PyTorch SDPA's efficient backend in fp32
# (no TF32) at the same shapes; 3. the fp32 tests of build/test_cuda (the kernels with several
# blocks per SM first). Logs go to $OUT (default build/cuda-logs). Under 170 s.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/cuda_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
rc=0
echo "== timings (FA_TIME=1)"
FA_TIME=1 timeout 30 ./build/test_cuda 2>&1 | grep TIMING | tee "$OUT/timing_fp32.log"
echo "== PyTorch SDPA efficient, fp32"
PYTHONUNBUFFERED=1 timeout 35 python3 tests/torch_time.py --set fp32 2>&1 | tee "$OUT/timing_torch_fp32.log"
echo "== fp32 tests"
for ft in test_fp32_multiblock_kernels:40 'test_*_fp32:25' test_large_scores:15 test_fp32_other_kernels:25; do
  f=${ft%%:*}; t=${ft##*:}; n=$(echo "$f" | tr -d '*')
  FA_FILTER=$f timeout $t ./build/test_cuda > "$OUT/$n.log" 2>&1; e=$?
  [ $e -ne 0 ] && rc=1
  echo "$f: exit $e"; grep -E "FAIL|PASSED|FAILED|runs failed" "$OUT/$n.log" | head -n 30
done
echo "== run_cuda_fp32.sh exit $rc"
exit $rc
