#!/usr/bin/env bash
# tests/run_cuda_fp32.sh - the fp32 generic kernels on a GPU machine, from the repository root, with
# `build` (build/test_cuda) and `.devlib` present: 1. FA_TIME=1 timings of every fp32 kernel
# (block_q/block_k pick them, see fa__cu_generic_t); 2. PyTorch SDPA's efficient backend in fp32
# (no TF32) at the same shapes; 3. the fp32 tests of build/test_cuda (the kernels with several
# blocks per SM first). Logs go to $OUT (default build/cuda-logs). Under 170 s.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/cuda-logs}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas.so.13' && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  lib=$(find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -n 1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib"):$LD_LIBRARY_PATH"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
rc=0
echo "== timings (FA_TIME=1)"
FA_TIME=1 timeout 30 ./build/test_cuda 2>&1 | grep TIMING | tee "$OUT/timing_fp32.log"
echo "== PyTorch SDPA efficient, fp32"
PYTHONUNBUFFERED=1 timeout 35 python3 - <<'PY' 2>&1 | tee "$OUT/timing_torch_fp32.log"
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
def bench(fn, it=5):
    fn(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(it): fn()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) / it
for D, S, causal in ((64, 4096, 0), (64, 4096, 1), (128, 4096, 0), (128, 4096, 1), (128, 1024, 0)):
    B, H = 16384 // S, 2048 // D
    q, k, v = (torch.randn(B, H, S, D, device='cuda', dtype=torch.float32) for _ in range(3))
    fl = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    def f():
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    ms = bench(f)
    print(f"TORCH sdpa-efficient f32 D={D} S={S} causal={causal}: {ms:.3f} ms {fl / ms * 1e-9:.1f} TFLOP/s")
    del q, k, v
    torch.cuda.empty_cache()
PY
echo "== fp32 tests"
for ft in test_fp32_multiblock_kernels:40 'test_*_fp32:25' test_large_scores:15 test_fp32_other_kernels:25; do
  f=${ft%%:*}; t=${ft##*:}; n=$(echo "$f" | tr -d '*')
  FA_FILTER=$f timeout $t ./build/test_cuda > "$OUT/$n.log" 2>&1; e=$?
  [ $e -ne 0 ] && rc=1
  echo "$f: exit $e"; grep -E "FAIL|PASSED|FAILED|runs failed" "$OUT/$n.log" | head -n 30
done
echo "== run_cuda_fp32.sh exit $rc"
exit $rc
