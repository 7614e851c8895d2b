#!/usr/bin/env python3
"""torch_sdpa.py - PyTorch's attention on the shapes of bench_cuda.cu, same timing and row format.

Backends: SDPA flash (FA2 inside PyTorch), efficient (xformers-style), cuDNN, and a naive
matmul-softmax-matmul; dtypes bf16, fp16, fp32 (flash and cuDNN have no fp32: no row). Timing: CUDA
events around each call, warm-up, median of repeats (~0.08 s of repeats, 3..50). FLOPs 4*B*H*S*S*D,
halved for causal. Each timed row is checked against float64 on sampled rows (same tolerances).
Note: PyTorch's is_causal is top-left aligned, ours bottom-right; they agree for Sq == Sk (all rows here).

--backward: the backward instead, as forward+backward minus forward (torch.autograd.grad of the
output against q, k, v for an N(0,1) upstream gradient), for flash, efficient and cuDNN at
S = 1024..16384 (bench/bench_cuda_backward.cu's shapes); FLOPs 2.5 x the forward's, halved for causal;
TF32 off (matmul and cuDNN); relerr not computed ("-"; the library's gradients are checked by
tests/test_cuda_backward.cu). --dtype bf16|fp16|fp32 (repeatable): those dtypes' rows only.

Row format: ROW impl dtype D causal S B H extra ms TFLOP/s relerr status

--decode: bench_cuda --decode's rows alone (issue 14): bf16, D = 128, Hq = 32, Hkv = 8 or 1, non-causal,
flash and cuDNN backends with enable_gqa=True; a backend that refuses GQA gets K/V expanded to Hq
heads beforehand (outside the timing; "expanded" in the status). K/V GB/s counts the Hkv-head cache's
bytes either way. Same timing as bench_cuda --decode (N calls between events, median of 7, K/V copies
rotated below 256 MB). Row format: DEC impl B Sq Sk Hq Hkv ms kvGB/s frac relerr status
(frac against this script's own device-to-device copy, bytes read plus written).
"""
import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

QUICK = "--quick" in sys.argv
DTYPES = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--dtype"]   # --backward: these dtypes only
BUDGET = 0.08
TOL = {torch.bfloat16: 5e-3, torch.float16: 1e-3, torch.float32: 1e-5}
DN = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def naive(q, k, v, causal):
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v


def sdpa(backend):
    def f(q, k, v, causal):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    return f


IMPLS = [("torch_flash", sdpa(SDPBackend.FLASH_ATTENTION)),
         ("torch_efficient", sdpa(SDPBackend.EFFICIENT_ATTENTION)),
         ("torch_cudnn", sdpa(SDPBackend.CUDNN_ATTENTION)),
         ("torch_naive", naive)]


def check(q, k, v, o, causal, g):
    B, H, S, D = q.shape
    heads = torch.randint(0, B * H, (3,), generator=g).tolist()
    nr = 6 if S >= 8192 else 12
    num = den = 0.0
    for bh in heads:
        b, h = divmod(bh, H)
        rows = [0, S - 1] + torch.randint(0, S, (nr - 2,), generator=g).tolist()
        qi = q[b, h, rows].double()
        s = (qi @ k[b, h].double().T) / math.sqrt(D)
        if causal:
            j = torch.arange(S, device=q.device)
            s = s.masked_fill(j[None, :] > torch.tensor(rows, device=q.device)[:, None], float("-inf"))
        ref = torch.softmax(s, -1) @ v[b, h].double()
        got = o[b, h, rows].double()
        num += ((got - ref) ** 2).sum().item()
        den += (ref ** 2).sum().item()
    return math.sqrt(num / den)


def row(name, q, k, v, causal, fn, g):
    B, H, S, D = q.shape
    dt = q.dtype
    try:
        fn(q, k, v, causal)
        torch.cuda.synchronize()
    except Exception as e:  # unsupported backend/dtype, out of memory
        msg = str(e).split("\n")[0][:60]
        print(f"ROW {name:<16} {DN[dt]:<5} {D:4d} {causal:2d} {S:6d} {B:4d} {H:3d} {'-':<10} {'-':>9} {'-':>8} {'-':>9} n/a: {msg}")
        torch.cuda.empty_cache()
        return
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(); fn(q, k, v, causal); e1.record(); torch.cuda.synchronize()
    reps = int(min(50, max(3, BUDGET * 1e3 / max(e0.elapsed_time(e1), 1e-3))))
    ts = []
    for _ in range(reps):
        e0.record(); fn(q, k, v, causal); e1.record(); e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    ts.sort()
    ms = ts[len(ts) // 2]
    o = fn(q, k, v, causal)
    rel = check(q, k, v, o, causal, g)
    del o
    fl = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    ok = rel <= TOL[dt] and not math.isnan(rel)
    print(f"ROW {name:<16} {DN[dt]:<5} {D:4d} {causal:2d} {S:6d} {B:4d} {H:3d} {'-':<10} {ms:9.3f} {fl / ms / 1e9:8.1f} {rel:9.2e} {'OK' if ok else 'FAIL'}",
          flush=True)
    torch.cuda.empty_cache()


DEC_ROWS = [(1, 1, 4096, 8), (1, 1, 32768, 8), (1, 1, 131072, 8), (1, 1, 1048576, 8), (8, 1, 32768, 8),
            (32, 1, 8192, 8), (8, 4, 32768, 8), (1, 1, 131072, 1), (8, 1, 32768, 1)]


def copy_gbs():
    n = 2 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    b = torch.empty_like(a)
    b.copy_(a)
    ts = []
    for _ in range(7):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); b.copy_(a); e1.record(); e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    ts.sort()
    del a, b
    torch.cuda.empty_cache()
    return 2.0 * n / (ts[3] * 1e-3) / 1e9


def decode_check(q, k, v, o, g):
    B, H, Sq, D = q.shape
    grp = H // k.shape[1]
    num = den = 0.0
    for bh in torch.randint(0, B * H, (2,), generator=g).tolist():
        b, h = divmod(bh, H)
        s = (q[b, h].double() @ k[b, h // grp].double().T) / math.sqrt(D)
        ref = torch.softmax(s, -1) @ v[b, h // grp].double()
        got = o[b, h].double()
        num += ((got - ref) ** 2).sum().item()
        den += (ref ** 2).sum().item()
    return math.sqrt(num / den)


def decode(cgbs):
    g = torch.Generator().manual_seed(1)
    for B, Sq, Sk, Hkv in DEC_ROWS:
        H, D = 32, 128
        kvb = 2.0 * B * Hkv * Sk * D * 2
        copies = 1 if kvb >= 256e6 else math.ceil(256e6 / kvb)
        q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
        kv = [(torch.randn(B, Hkv, Sk, D, device="cuda", dtype=torch.bfloat16),
               torch.randn(B, Hkv, Sk, D, device="cuda", dtype=torch.bfloat16)) for _ in range(copies)]
        for name, backend in (("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)):
            note = ""
            use = kv

            def f(k, v, gqa):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
            gqa = Hkv != H
            try:
                f(*kv[0], gqa)
                torch.cuda.synchronize()
            except Exception as e:  # GQA refused: expand K/V (outside the timing)
                msg = str(e).split("\n")[0][:50]
                try:
                    use = [(k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)) for k, v in kv]
                    gqa = False
                    f(*use[0], gqa)
                    torch.cuda.synchronize()
                    note = " expanded"
                except Exception as e2:
                    msg2 = str(e2).split("\n")[0][:50]
                    print(f"DEC {name:<14} {B:3d} {Sq:2d} {Sk:8d} {H:3d} {Hkv:2d} {'-':>9} {'-':>8} {'-':>6} {'-':>9} n/a: {msg} / {msg2}", flush=True)
                    use = None
                    torch.cuda.empty_cache()
            if use is None:
                continue
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for i in range(copies):
                f(*use[i], gqa)
            e1.record(); e1.synchronize()
            ms1 = e0.elapsed_time(e1) / copies
            n = int(min(400, max(copies, 20.0 / max(ms1, 1e-3))))
            ts = []
            for _ in range(7):
                e0.record()
                for i in range(n):
                    f(*use[i % copies], gqa)
                e1.record(); e1.synchronize()
                ts.append(e0.elapsed_time(e1) / n)
            ts.sort()
            ms = ts[3]
            o = f(*use[0], gqa)
            rel = decode_check(q, kv[0][0], kv[0][1], o, g)
            gbs = kvb / (ms * 1e-3) / 1e9
            ok = rel <= TOL[torch.bfloat16] and not math.isnan(rel)
            print(f"DEC {name:<14} {B:3d} {Sq:2d} {Sk:8d} {H:3d} {Hkv:2d} {ms:9.4f} {gbs:8.1f} {gbs / cgbs:6.3f} {rel:9.2e} {'OK' if ok else 'FAIL'}{note}",
                  flush=True)
            del o
            if use is not kv:
                del use
            torch.cuda.empty_cache()
        del q, kv
        torch.cuda.empty_cache()


def median_ms(fn, budget=BUDGET):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(); fn(); e1.record(); torch.cuda.synchronize()
    reps = int(min(30, max(3, budget * 1e3 / max(e0.elapsed_time(e1), 1e-3))))
    ts = []
    for _ in range(reps):
        e0.record(); fn(); e1.record(); e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    ts.sort()
    return ts[len(ts) // 2]


def row_bwd(name, q, k, v, do, causal, fn):
    B, H, S, D = q.shape
    dt = q.dtype
    try:
        fwd = lambda: fn(q, k, v, causal)
        fb = lambda: torch.autograd.grad(fn(q, k, v, causal), (q, k, v), do)
        fb()
        torch.cuda.synchronize()
        ms = median_ms(fb) - median_ms(fwd)
    except Exception as e:  # unsupported backend/dtype, out of memory
        msg = str(e).split("\n")[0][:60]
        print(f"ROW {name + '_bwd':<16} {DN[dt]:<5} {D:4d} {causal:2d} {S:6d} {B:4d} {H:3d} {'-':<10} {'-':>9} {'-':>8} {'-':>9} n/a: {msg}")
        torch.cuda.empty_cache()
        return
    fl = 2.5 * 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    print(f"ROW {name + '_bwd':<16} {DN[dt]:<5} {D:4d} {causal:2d} {S:6d} {B:4d} {H:3d} {'fb-f':<10} {ms:9.3f} {fl / ms / 1e9:8.1f} {'-':>9} OK",
          flush=True)
    torch.cuda.empty_cache()


def main_backward():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}, backward (fwd+bwd minus fwd)", flush=True)
    Ss = [1024, 4096, 16384] if QUICK else [1024, 2048, 4096, 8192, 16384]
    for D in (64, 128):
        H = 2048 // D
        for S in Ss:
            B = 16384 // S
            for causal in (0, 1):
                for dt in (torch.bfloat16, torch.float16, torch.float32):
                    if DTYPES and DN[dt] not in DTYPES:
                        continue
                    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
                    do = torch.randn(B, H, S, D, device="cuda", dtype=dt)
                    for name, fn in IMPLS[:3]:
                        if dt == torch.float32 and name != "torch_efficient":
                            continue
                        row_bwd(name, q, k, v, do, causal, fn)
                    del q, k, v, do
                    torch.cuda.empty_cache()


def main():
    if "--backward" in sys.argv:
        main_backward()
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    if "--decode" in sys.argv:
        print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}, cuDNN {torch.backends.cudnn.version()}", flush=True)
        cg = copy_gbs()
        print(f"# device-to-device copy: {cg:.1f} GB/s (bytes read + written)", flush=True)
        decode(cg)
        return
    dev = torch.cuda.get_device_name(0)
    print(f"# torch {torch.__version__}, {dev}", flush=True)
    g = torch.Generator().manual_seed(0)
    Ss = [1024, 4096, 16384] if QUICK else [512, 1024, 2048, 4096, 8192, 16384]
    for D in (64, 128):
        H = 2048 // D
        for S in Ss:
            B = 16384 // S
            for causal in (0, 1):
                for dt in (torch.bfloat16, torch.float16, torch.float32):
                    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt) for _ in range(3))
                    for name, fn in IMPLS:
                        if name == "torch_naive" and B * H * S * S * 4 > 17.5e9:
                            continue
                        row(name, q, k, v, causal, fn, g)
                    del q, k, v
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
