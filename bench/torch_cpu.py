#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention on the shapes of bench/bench.c, fp32, for a side-by-side
with fa_tiled (issue #3, target 6). Times are medians of repeats after a warm-up, in the same units as
bench.c: ms, and GFLOP/s counting 4*B*H*Sq*Sk*D (halved for causal).

    python3 bench/torch_cpu.py --threads 2 16 [--max-s 8192] [--csv]
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


def time_one(B, H, Hkv, Sq, Sk, D, causal, quick):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, Sq, D, generator=g, dtype=torch.float32)
    k = torch.randn(B, Hkv, Sk, D, generator=g, dtype=torch.float32)
    v = torch.randn(B, Hkv, Sk, D, generator=g, dtype=torch.float32)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[2])
    ap.add_argument("--max-s", type=int, default=16384)
    ap.add_argument("--csv", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    pre = "# " if a.csv else ""
    print(f"{pre}torch {torch.__version__}, CPU SDPA fp32, {torch.get_num_threads()} threads by default; "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    if a.csv:
        print("kind,B,H,Hkv,Sq,Sk,D,causal,threads,torch_ms,torch_gflops")
    else:
        print(f"{'kind':7} {'B':>2} {'H':>2} {'Hkv':>3} {'Sq':>5} {'Sk':>5} {'D':>3} {'cau':>3} {'thr':>3} | "
              f"{'torch ms':>9} {'GF/s':>7}")
    for thr in a.threads:
        torch.set_num_threads(thr)
        shapes = []
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
