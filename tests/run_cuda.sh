#!/usr/bin/env bash
# tests/run_cuda.sh - the CUDA suite on a GPU machine, from the repository root, with `build`
# (test_cuda, cuda_quickstart: `make cuda-objs build/test_cuda build/cuda_quickstart` on the
# build machine) and `.devlib` (libcmocka.so.0, for machines without it) present.
#   1. build/test_cuda: the whole cmocka suite;  2. build/cuda_quickstart;
#   3. timings (FA_TIME=1) and, when python3 has torch, PyTorch's naive matmul-softmax-matmul
#      and SDPA at the same shapes (TIMING=0 skips 3);
#   4. compute-sanitizer --tool memcheck and --tool racecheck on the reduced grid (SMALL=1).
# Logs go to $OUT (default build/cuda-logs). Exit status: non-zero if 1, 2 or 4 failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/cuda-logs}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas.so.13' && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  lib=$(find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -n 1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib"):$LD_LIBRARY_PATH"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
rc=0

echo "== test_cuda (full grid)"
timeout 90 ./build/test_cuda 2>&1 | tee "$OUT/test_cuda.log" || rc=1

echo "== cuda_quickstart"
./build/cuda_quickstart 2>&1 | tee "$OUT/quickstart.log" || rc=1

if [ "${TIMING:-1}" != 0 ]; then
  echo "== timings"
  FA_TIME=1 timeout 40 ./build/test_cuda 2>&1 | grep TIMING | tee "$OUT/timing.log"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout 60 python3 - <<'PY' 2>&1 | tee "$OUT/timing_torch.log"
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
def naive(q, k, v, causal):
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float('-inf'))
    return torch.softmax(s, -1) @ v
for dt, name in ((torch.float32, 'f32'), (torch.float16, 'f16'), (torch.bfloat16, 'bf16')):
    for D, S, causal in ((64, 4096, 0), (128, 4096, 0), (128, 4096, 1)):
        B, H = 16384 // S, 2048 // D
        q, k, v = (torch.randn(B, H, S, D, device='cuda', dtype=dt) for _ in range(3))
        fl = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
        rows = [('torch-naive', lambda: naive(q, k, v, causal))]
        for be, bn in ((SDPBackend.EFFICIENT_ATTENTION, 'sdpa-efficient'), (SDPBackend.FLASH_ATTENTION, 'sdpa-flash')):
            def f(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
            rows.append((bn, f))
        for rn, fn in rows:
            try:
                ms = bench(fn)
                print(f"TORCH {rn} {name} D={D} S={S} causal={causal}: {ms:.3f} ms {fl / ms * 1e-9:.1f} TFLOP/s")
            except Exception as e:
                print(f"TORCH {rn} {name} D={D} S={S} causal={causal}: n/a ({type(e).__name__})")
        del q, k, v
        torch.cuda.empty_cache()
PY
  else
    echo "SKIPPED: python3 with torch and a GPU not found (no PyTorch comparison)"
  fi
fi
if command -v compute-sanitizer >/dev/null 2>&1; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool (SMALL=1)"
    SMALL=1 timeout ${SAN_TIMEOUT:-90} compute-sanitizer --tool "$tool" --error-exitcode 97 ./build/test_cuda \
      > "$OUT/sanitizer_$tool.log" 2>&1 || rc=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[ *(PASSED|FAILED) *\]|Error|Hazard" "$OUT/sanitizer_$tool.log" | head -n 20
  done
else
  echo "SKIPPED: compute-sanitizer not found"
fi

echo "== run_cuda.sh exit $rc"
exit $rc
