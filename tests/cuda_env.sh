# tests/cuda_env.sh - sourced by tests/run_cuda.sh and tests/run_cuda_fp32.sh from the repository
# root: the log folder ($OUT, default build/cuda-logs) and the library path (.devlib for a machine
# without libcmocka, the CUDA toolkit's lib64, and a libcublas.so.13 found elsewhere if needed).
OUT=${OUT:-build/cuda-logs}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas.so.13' && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  lib=$(find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -n 1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib"):$LD_LIBRARY_PATH"
fi
