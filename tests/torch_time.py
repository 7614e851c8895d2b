"""PyTorch's CUDA attention timed at the shapes of the CUDA scripts, TF32 off, one line per call:
  --set mixed  (tests/run_cuda.sh): naive matmul-softmax-matmul, SDPA efficient and flash, in fp32,
               fp16 and bf16, at D=64/128, S=4096;
  --set fp32   (tests/run_cuda_fp32.sh): SDPA efficient in fp32 at the fp32 kernels' timing shapes.
Each shape is B = 16384 / S, H = 2048 / D, so every row does the same work per query row."""
import argparse
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def bench(fn, it=5):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(it):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / it


def naive(q, k, v, causal):
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float('-inf'))
    return torch.softmax(s, -1) @ v


def sdpa(be, q, k, v, causal):
    with sdpa_kernel(be):
        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))


SETS = {
    'mixed': dict(dtypes=((torch.float32, 'f32'), (torch.float16, 'f16'), (torch.bfloat16, 'bf16')),
                  shapes=((64, 4096, 0), (128, 4096, 0), (128, 4096, 1)),
                  rows=('torch-naive', 'sdpa-efficient', 'sdpa-flash')),
    'fp32': dict(dtypes=((torch.float32, 'f32'),),
                 shapes=((64, 4096, 0), (64, 4096, 1), (128, 4096, 0), (128, 4096, 1), (128, 1024, 0)),
                 rows=('sdpa-efficient',)),
}
CALLS = {
    'torch-naive': lambda q, k, v, c: naive(q, k, v, c),
    'sdpa-efficient': lambda q, k, v, c: sdpa(SDPBackend.EFFICIENT_ATTENTION, q, k, v, c),
    'sdpa-flash': lambda q, k, v, c: sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, c),
}

ap = argparse.ArgumentParser()
ap.add_argument('--set', choices=sorted(SETS), default='mixed')
cfg = SETS[ap.parse_args().set]
for dt, name in cfg['dtypes']:
    for D, S, causal in cfg['shapes']:
        B, H = 16384 // S, 2048 // D
        q, k, v = (torch.randn(B, H, S, D, device='cuda', dtype=dt) for _ in range(3))
        fl = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
        for rn in cfg['rows']:
            try:
                ms = bench(lambda: CALLS[rn](q, k, v, causal))
                print(f"TORCH {rn} {name} D={D} S={S} causal={causal}: {ms:.3f} ms {fl / ms * 1e-9:.1f} TFLOP/s")
            except Exception as e:   # a backend that does not take this dtype/shape
                print(f"TORCH {rn} {name} D={D} S={S} causal={causal}: n/a ({type(e).__name__})")
        del q, k, v
        torch.cuda.empty_cache()
