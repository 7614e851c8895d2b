#!/usr/bin/env python3
"""One fp32 forward+backward of PyTorch's efficient SDPA backend (TF32 off, as bench/torch_sdpa.py --backward
runs it), for a profiler to say which pipes its kernels use:

    ncu -k regex:fmha --section ComputeWorkloadAnalysis --section InstructionStats python3 bench/torch_eff_fp32.py

B*S = 16k, H*D = 2048 as the backward's table: S = 2048, D = 128 (B = 8, H = 16). Prints the output's and the
gradients' relative error against float64 so that the precision of what ran is on record too."""
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
B, H, S, D = 8, 16, 2048, 128
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, S, D, device="cuda", generator=g) for _ in range(4))
qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
    o = F.scaled_dot_product_attention(qg, kg, vg)
    dq, dk, dv = torch.autograd.grad(o, (qg, kg, vg), do)
torch.cuda.synchronize()
qd, kd, vd = (x.double().requires_grad_(True) for x in (q, k, v))
od = F.scaled_dot_product_attention(qd, kd, vd)
gd = torch.autograd.grad(od, (qd, kd, vd), do.double())
rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()
print("torch", torch.__version__, "| efficient fp32, TF32 off | rel err o %.2e dq %.2e dk %.2e dv %.2e" %
      (rel(o, od), rel(dq, gd[0]), rel(dk, gd[1]), rel(dv, gd[2])))
