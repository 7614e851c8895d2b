#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention on the shapes of bench/bench.c, fp32, for a side-by-side
with fa_tiled (issue #3, target 6). Times are medians of repeats after a warm-up, in the same units as
bench.c: ms, and GFLOP/s counting 4*B*H*Sq*Sk*D (halved for causal).

    python3 bench/torch_cpu.py --threads 2 16 [--max-s 8192] [--csv]

--backward: the backward on the shapes of bench/bench_backward.c (issue #12): B=2, H=4, S = 512 ...
--max-s, D = 64 and 128, causal and not, and the GQA row (H=8, Hkv=2, S=2048, D=128). The forward
(inputs requiring grad, so autograd keeps what its backward needs) and the forward + backward
(torch.autograd.grad of the output for a fixed N(0,1) upstream gradient) are timed alternately; the
backward is median(forward + backward) - median(forward). GFLOP/s count as bench_backward does:
2.5 x 4*B*H*Sq*Sk*D, halved for causal. The grad_fn column names the kernel autograd recorded.

    python3 bench/torch_cpu.py --backward --threads 2 16 [--max-s 4096] [--csv]

--dtype fp16|bf16 (issue 16): the tensors in that type (the default is fp32). The forward then runs the
shapes of `bench --dtype`: B=2, H=4, S = 512 ... min(--max-s, 4096), D = 64 and 128, non-causal, the
causal S=4096 D=128 row, and the decode row.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def sdpa(q, k, v, causal, gqa):
    if gqa and q.shape[1] != k.shape[1]:
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        except TypeError:  # torch < 2.5: no enable_gqa; repeat the kv heads (costs a copy, said in the note)
            rep = q.shape[1] // k.shape[1]
            return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                  is_causal=causal)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def bottom_right_causal(sq, sk):
    # torch's is_causal is top-left aligned; for Sq == Sk (every prefill shape here) both agree
    assert sq == sk
    return True


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DT = torch.float32


def time_one(B, H, Hkv, Sq, Sk, D, causal, quick):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, Sq, D, generator=g, dtype=torch.float32).to(DT)
    k = torch.randn(B, Hkv, Sk, D, generator=g, dtype=torch.float32).to(DT)
    v = torch.randn(B, Hkv, Sk, D, generator=g, dtype=torch.float32).to(DT)
    if causal:
        bottom_right_causal(Sq, Sk)
    with torch.inference_mode():
        t0 = time.perf_counter()
        sdpa(q, k, v, bool(causal), Hkv != H)
        first = time.perf_counter() - t0
        if first > 5.0:
            return first * 1e3
        ts = []
        maxn = 3 if quick else 7
        while len(ts) < maxn:
            t0 = time.perf_counter()
            sdpa(q, k, v, bool(causal), Hkv != H)
            ts.append(time.perf_counter() - t0)
            if len(ts) >= 3 and first * len(ts) > (0.5 if quick else 2.0):
                break
        return statistics.median(ts) * 1e3


def time_backward(B, H, Hkv, Sq, Sk, D, causal, quick):
    """(forward ms, forward + backward ms, backward ms, grad_fn name), medians of alternating rounds
    with bench_backward.c's rules: a warm-up of both, then at least 3 and at most 7 rounds (3 with
    --quick; 31 for rounds under 50 ms) until the warm-up's time x rounds passes 2 s (0.5 s); a
    warm-up over 5 s is the one timing."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, Sq, D, generator=g, dtype=torch.float32).to(DT).requires_grad_(True)
    k = torch.randn(B, Hkv, Sk, D, generator=g, dtype=torch.float32).to(DT).requires_grad_(True)
    v = torch.randn(B, Hkv, Sk, D, generator=g, dtype=torch.float32).to(DT).requires_grad_(True)
    d_o = torch.randn(B, H, Sq, D, generator=g, dtype=torch.float32).to(DT)
    if causal:
        bottom_right_causal(Sq, Sk)
    gqa = Hkv != H

    def fwd():
        t0 = time.perf_counter()
        out = sdpa(q, k, v, bool(causal), gqa)
        t = time.perf_counter() - t0
        name = type(out.grad_fn).__name__ if out.grad_fn is not None else "none"
        del out  # frees the saved tensors outside the timed region
        return t, name

    def fwd_bwd():
        t0 = time.perf_counter()
        out = sdpa(q, k, v, bool(causal), gqa)
        grads = torch.autograd.grad(out, (q, k, v), d_o)
        t = time.perf_counter() - t0
        del out, grads
        return t

    with torch.enable_grad():
        tf0, name = fwd()
        tb0 = fwd_bwd()
        first = tf0 + tb0
        if first > 5.0:
            return tf0 * 1e3, tb0 * 1e3, (tb0 - tf0) * 1e3, name
        maxn = 3 if quick else (31 if first < 0.05 else 7)
        budget = 0.5 if quick else 2.0
        tf, tb = [], []
        while len(tf) < maxn:
            tf.append(fwd()[0])
            tb.append(fwd_bwd())
            if len(tf) >= 3 and first * len(tf) > budget:
                break
    mf, mb = statistics.median(tf), statistics.median(tb)
    return mf * 1e3, mb * 1e3, (mb - mf) * 1e3, name


def main_backward(a):
    pre = "# " if a.csv else ""
    if a.csv:
        print("kind,B,H,Hkv,Sq,Sk,D,causal,threads,torch_fwd_ms,torch_fwdbwd_ms,torch_bwd_ms,torch_bwd_gflops,grad_fn")
    else:
        print(f"{pre}backward = median(forward + backward) - median(forward); GFLOP/s = 2.5 x 4*B*H*Sq*Sk*D "
              f"(halved for causal) / backward time")
        print(f"{'kind':7} {'B':>2} {'H':>2} {'Hkv':>3} {'Sq':>5} {'Sk':>5} {'D':>3} {'cau':>3} {'thr':>3} | "
              f"{'fwd ms':>8} {'fwd+bwd':>9} {'bwd ms':>9} {'bwd GF/s':>8} | grad_fn")
    for thr in a.threads:
        torch.set_num_threads(thr)
        shapes = []
        for D in (64, 128):
            S = 512
            while S <= min(a.max_s, 8192):
                for causal in (0, 1):
                    shapes.append(("prefill", 2, 4, 4, S, S, D, causal))
                S *= 2
        sg = min(a.max_s, 2048)
        shapes.append(("gqa", 2, 8, 2, sg, sg, 128, 0))
        for kind, B, H, Hkv, Sq, Sk, D, causal in shapes:
            fm, fbm, bm, name = time_backward(B, H, Hkv, Sq, Sk, D, causal, a.quick)
            gf = 2.5 * 4.0 * B * H * Sq * Sk * D * (0.5 if causal else 1.0) / (bm * 1e-3) * 1e-9 if bm > 0 else 0.0
            if a.csv:
                print(f"{kind},{B},{H},{Hkv},{Sq},{Sk},{D},{causal},{thr},{fm:.3f},{fbm:.3f},{bm:.3f},{gf:.1f},{name}")
            else:
                print(f"{kind:7} {B:2d} {H:2d} {Hkv:3d} {Sq:5d} {Sk:5d} {D:3d} {causal:3d} {thr:3d} | "
                      f"{fm:8.2f} {fbm:9.2f} {bm:9.2f} {gf:8.1f} | {name}")
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[2])
    ap.add_argument("--max-s", type=int, default=16384)
    ap.add_argument("--csv", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--backward", action="store_true", help="time the backward (issue #12) instead of the forward")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="storage type of q, k, v (issue 16)")
    a = ap.parse_args()
    global DT
    DT = DTYPES[a.dtype]
    pre = "# " if a.csv else ""
    print(f"{pre}torch {torch.__version__}, CPU SDPA {a.dtype}, {torch.get_num_threads()} threads by default; "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    if a.backward:
        main_backward(a)
        return
    if a.csv:
        print("kind,B,H,Hkv,Sq,Sk,D,causal,threads,torch_ms,torch_gflops")
    else:
        print(f"{'kind':7} {'B':>2} {'H':>2} {'Hkv':>3} {'Sq':>5} {'Sk':>5} {'D':>3} {'cau':>3} {'thr':>3} | "
              f"{'torch ms':>9} {'GF/s':>7}")
    for thr in a.threads:
        torch.set_num_threads(thr)
        shapes = []
        if a.dtype != "fp32":   # the rows of bench.c --dtype
            for D in (64, 128):
                S = 512
                while S <= min(a.max_s, 4096):
                    shapes.append(("prefill", 2, 4, 4, S, S, D, 0))
                    S *= 2
            if a.max_s >= 4096:
                shapes.append(("prefill", 2, 4, 4, 4096, 4096, 128, 1))
        else:
            for causal in (0, 1):
                for D in (64, 128):
                    S = 128
                    while S <= a.max_s:
                        shapes.append(("prefill", 2, 4, 4, S, S, D, causal))
                        S *= 2
        shapes.append(("decode", 1, 32, 8, 1, 32768, 128, 0))
        for kind, B, H, Hkv, Sq, Sk, D, causal in shapes:
            ms = time_one(B, H, Hkv, Sq, Sk, D, causal, a.quick)
            gf = 4.0 * B * H * Sq * Sk * D * (0.5 if causal else 1.0) / (ms * 1e-3) * 1e-9
            if a.csv:
                print(f"{kind},{B},{H},{Hkv},{Sq},{Sk},{D},{causal},{thr},{ms:.3f},{gf:.1f}")
            else:
                print(f"{kind:7} {B:2d} {H:2d} {Hkv:3d} {Sq:5d} {Sk:5d} {D:3d} {causal:3d} {thr:3d} | {ms:9.2f} {gf:7.1f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
