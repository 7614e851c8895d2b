#!/usr/bin/env python3
"""Ours (fa_tiled / fa_tiled_backward through bench/fa_shim.c, one or more builds of the header) beside
PyTorch's CPU SDPA in one process, alternating, for issue 16's bf16 target (>= 1.5x PyTorch at 2 and
16 threads, forward and backward). Each row: R rounds; in each round every contender (torch and each
build, in an order rotated from round to round) is timed as the median of a few calls; the table gives
the median over rounds and the spread (min-max of the round medians). Ours runs on an fa_pool of the
same thread count (PyTorch keeps its OpenMP threads too). Each row also checks each build's
output (at the last thread count) against PyTorch's fp64 SDPA on the same (bf16-rounded) inputs: relative Frobenius error.

    python3 bench/torch_same_call.py --lib new=build/fa_shim.so --lib main=/tmp/main_shim.so \\
        --threads 2 16 --rounds 5 [--max-s 4096] [--backward [--max-s-bwd 2048]] [--csv out.csv]

Rows (bench.c's): B=2, H=4, Sq=Sk=S in 512..max-s, D=64/128, non-causal, and causal S=max-s D=128;
backward S in 512..max-s-bwd, D=64/128, causal and not. GFLOP/s count 4 B H S^2 D (halved causal),
2.5x that for the backward.
"""
import argparse, ctypes, statistics, sys, time
import torch
import torch.nn.functional as F

c_int, c_void_p, c_float_p = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float)


def load(path):
    lib = ctypes.CDLL(path)
    lib.shim_fwd.restype = c_int
    lib.shim_fwd.argtypes = [c_int] + [c_void_p] * 5 + [c_int] * 6 + [c_void_p]
    lib.shim_bwd.restype = c_int
    lib.shim_bwd.argtypes = [c_int] + [c_void_p] * 9 + [c_int] * 6 + [c_void_p]
    lib.shim_pool.restype = c_void_p
    lib.shim_pool.argtypes = [c_int]
    lib.shim_pool_free.argtypes = [c_void_p]
    lib.shim_describe.restype = ctypes.c_char_p
    lib.shim_describe.argtypes = [c_int] * 8
    lib.shim_amx_ceiling.restype = ctypes.c_double
    lib.shim_amx_ceiling.argtypes = [c_int]
    return lib


def med_time(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True, help="name=path of a bench/fa_shim.c build")
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 16])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-s", type=int, default=4096)
    ap.add_argument("--min-s", type=int, default=512)
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--no-forward", action="store_true")
    ap.add_argument("--max-s-bwd", type=int, default=2048)
    ap.add_argument("--budget", type=float, default=0.03, help="seconds of calls per timing (reps = budget / time)")
    ap.add_argument("--settle", type=float, default=0.06,
                    help="seconds slept before each contender's timing, so that the other side's spinning threads "
                         "(libgomp's workers spin up to ~20 ms after a parallel region) sleep first")
    ap.add_argument("--csv", default=None)
    a = ap.parse_args()
    libs = []
    for spec in a.lib:
        name, path = spec.split("=", 1)
        libs.append((name, load(path)))
    print("torch", torch.__version__, "|", torch.backends.cpu.get_cpu_capability(), "| settle %.3f s" % a.settle)
    for thr in a.threads:
        print("AMX tile-loop ceiling, %d threads: %.0f GFLOP/s on nonzero tiles, %.0f on zeros" %
              (thr, libs[0][1].shim_amx_ceiling(thr), libs[0][1].shim_amx_ceiling(-thr)))
    rows = []
    B, H = 2, 4
    Ss = [s for s in (512, 1024, 2048, 4096, 8192) if a.min_s <= s <= a.max_s]
    fwd_rows = [(S, D, 0) for S in Ss for D in (64, 128)] + [(a.max_s, 128, 1)]
    bwd_rows = [(S, D, c) for S in Ss if S <= a.max_s_bwd for D in (64, 128) for c in (0, 1)]
    out = []
    names = ["torch"] + [n for n, _ in libs]
    print("times: ms, median over %d alternating rounds [min-max of the round medians]; x = torch / ours" % a.rounds)
    for thr in a.threads:
        torch.set_num_threads(thr)
        pools = [lib.shim_pool(thr) for _, lib in libs]
        for kind, rs in (("fwd", [] if a.no_forward else fwd_rows), ("bwd", bwd_rows if a.backward else [])):
            for (S, D, causal) in rs:
                g = torch.Generator().manual_seed(S * 7 + D + causal)
                q = torch.randn(B, H, S, D, generator=g).to(torch.bfloat16).contiguous()
                k = torch.randn(B, H, S, D, generator=g).to(torch.bfloat16).contiguous()
                v = torch.randn(B, H, S, D, generator=g).to(torch.bfloat16).contiguous()
                do = torch.randn(B, H, S, D, generator=g).to(torch.bfloat16).contiguous()
                flops = 4.0 * B * H * S * S * D / (2 if causal else 1) * (2.5 if kind == "bwd" else 1)
                bufs = []
                for (_, lib), pool in zip(libs, pools):
                    o = torch.empty_like(q); lse = torch.empty(B, H, S, dtype=torch.float32)
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                    bufs.append((o, lse, dq, dk, dv))
                fns = {}
                if kind == "fwd":
                    def tf():
                        with torch.inference_mode():
                            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                    fns["torch"] = tf
                else:
                    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
                    def tfw():
                        return F.scaled_dot_product_attention(qg, kg, vg, is_causal=bool(causal))
                    def tfb():
                        out_ = F.scaled_dot_product_attention(qg, kg, vg, is_causal=bool(causal))
                        torch.autograd.grad(out_, (qg, kg, vg), do)
                    fns["torch"] = (tfw, tfb)
                for (name, lib), pool, (o, lse, dq, dk, dv) in zip(libs, pools, bufs):
                    if kind == "fwd":
                        fns[name] = (lambda lib=lib, pool=pool, o=o, lse=lse:
                                     lib.shim_fwd(2, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                                                  B, H, S, D, causal, thr, pool))
                    else:
                        assert lib.shim_fwd(2, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                                            B, H, S, D, causal, thr, pool) == 0
                        fns[name] = (lambda lib=lib, pool=pool, o=o, lse=lse, dq=dq, dk=dk, dv=dv:
                                     lib.shim_bwd(2, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr(),
                                                  dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), lse.data_ptr(),
                                                  B, H, S, D, causal, thr, pool))
                # warm-up, reps per contender
                reps = {}
                for n in names:
                    f = fns[n]
                    if isinstance(f, tuple):
                        f[1](); t = med_time(f[1], 1)
                    else:
                        r = f(); assert r is None or r == 0, (n, r); t = med_time(f, 1)
                    reps[n] = max(1, min(50, int(a.budget / max(t, 1e-6))))
                # accuracy, first thread count only
                err = {}
                if thr == a.threads[-1]:
                    with torch.inference_mode():
                        if kind == "fwd":
                            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=bool(causal))
                            for (name, _), (o, *_r) in zip(libs, bufs):
                                err[name] = ((o.double() - ref).norm() / ref.norm()).item()
                    if kind == "bwd":
                        qd, kd, vd = (x.double().requires_grad_(True) for x in (q, k, v))
                        od = F.scaled_dot_product_attention(qd, kd, vd, is_causal=bool(causal))
                        gr = torch.autograd.grad(od, (qd, kd, vd), do.double())
                        for (name, _), (o, lse, dq, dk, dv) in zip(libs, bufs):
                            err[name] = max(((x.double() - r_).norm() / r_.norm()).item() for x, r_ in zip((dq, dk, dv), gr))
                per = {n: [] for n in names}
                for rd in range(a.rounds):
                    order = names[rd % len(names):] + names[:rd % len(names)]
                    for n in order:
                        time.sleep(a.settle)   # the other side's spinning threads go to sleep first
                        f = fns[n]
                        if isinstance(f, tuple):    # torch backward: (fwd+bwd) - fwd, alternated
                            tb, tw = [], []
                            for _ in range(reps[n]):
                                tw.append(med_time(f[0], 1)); tb.append(med_time(f[1], 1))
                            per[n].append(statistics.median(tb) - statistics.median(tw))
                        else:
                            per[n].append(med_time(f, reps[n]))
                medv = {n: statistics.median(per[n]) for n in names}
                line = "%s S=%-5d D=%-3d c=%d thr=%-2d | torch %8.2f [%.2f-%.2f]" % (
                    kind, S, D, causal, thr, 1e3 * medv["torch"], 1e3 * min(per["torch"]), 1e3 * max(per["torch"]))
                for n, _ in libs:
                    line += " | %s %8.2f [%.2f-%.2f] x%.2f %4.0f GF/s" % (n, 1e3 * medv[n], 1e3 * min(per[n]), 1e3 * max(per[n]),
                                                                    medv["torch"] / medv[n], flops / medv[n] * 1e-9)
                    if n in err: line += " err %.1e" % err[n]
                print(line, flush=True)
                out.append([kind, S, D, causal, thr] + [1e3 * medv[n] for n in names] +
                           ["%.2f-%.2f" % (1e3 * min(per[n]), 1e3 * max(per[n])) for n in names])
        for (_, lib), p in zip(libs, pools): lib.shim_pool_free(p)
    for thr in a.threads:
        for n, lib in libs:
            print("%s, %d threads: %s" % (n, thr, lib.shim_describe(2, B, H, 4096, 128, 0, thr, 0).decode()))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write(",".join(["kind", "S", "D", "causal", "threads"] + names + [n + "_range" for n in names]) + "\n")
            for r in out: f.write(",".join(str(x) for x in r) + "\n")


if __name__ == "__main__":
    main()
