/* fa_shim.c - fa_tiled and fa_tiled_backward behind a plain C signature, for ctypes (issue 16: ours
   beside PyTorch in one Python process, bench/torch_same_call.py). Packed [B][H][S][D] tensors of
   dtype dt (0 fp32, 1 fp16, 2 bf16), Sq = Sk = S, D = Dv.
       cc -O2 -std=c99 -fPIC -shared -DFLASHATTN_NO_BLAS -I. bench/fa_shim.c -o build/fa_shim.so -lm -lpthread */
#define _GNU_SOURCE
#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN_STATIC
#ifndef FLASHATTN_NO_BLAS
#define FLASHATTN_NO_BLAS
#endif
#include "flashattn.h"
#include "bench/bench_util.h"

#define SHIM __attribute__((visibility("default")))

static void shim_params(fa_params *p, int dt, int B, int H, int S, int D, int causal, int threads, void *pool, float *lse)
{
    memset(p, 0, sizeof *p);
    p->batch = B; p->heads = H; p->seq_q = S; p->seq_k = S; p->head_dim = D;
    p->dtype = (fa_dtype)dt; p->causal = causal; p->threads = threads; p->pool = (fa_pool *)pool; p->lse = lse;
}

SHIM int shim_fwd(int dt, const void *q, const void *k, const void *v, void *o, float *lse, int B, int H, int S, int D,
                  int causal, int threads, void *pool)
{
    fa_params p;
    shim_params(&p, dt, B, H, S, D, causal, threads, pool, lse);
    return (int)fa_tiled(&p, q, k, v, o);
}

SHIM int shim_bwd(int dt, const void *q, const void *k, const void *v, const void *o, const void *d_o, void *dq, void *dk,
                  void *dv, float *lse, int B, int H, int S, int D, int causal, int threads, void *pool)
{
    fa_params p;
    shim_params(&p, dt, B, H, S, D, causal, threads, pool, lse);
    return (int)fa_tiled_backward(&p, q, k, v, o, d_o, dq, dk, dv);
}

SHIM void *shim_pool(int threads)
{
    fa_pool *pool = NULL;
    return fa_pool_create(threads, &pool) == FA_OK ? (void *)pool : NULL;
}

SHIM void shim_pool_free(void *pool) { fa_pool_destroy((fa_pool *)pool); }

SHIM const char *shim_describe(int dt, int B, int H, int S, int D, int causal, int threads, int bwd)
{
    static char line[1024];
    fa_params p;
    float lse;
    shim_params(&p, dt, B, H, S, D, causal, threads, NULL, &lse);
    fa_describe(&p, bwd ? FA_CALL_TILED_BACKWARD : FA_CALL_TILED, line, sizeof line);
    return line;
}

/* GFLOP/s of tdpbf16ps on thr threads (0 without AMX or its permission); thr < 0: -thr threads on zeros */
SHIM double shim_amx_ceiling(int thr)
{
#ifdef FA__HAVE_AMX
    bench_amx_nonzero = thr > 0;   /* bench_util.h's tile loop, on nonzero data unless thr < 0 */
#endif
    return bench_amx_gflops(thr < 0 ? -thr : thr);
}

/* Decoding (issue 16's row: B = 1, Sq = 1, packed [1][H][1][D] q and o, [1][Hkv][Sk][D] k and v) */
SHIM int shim_decode(int dt, const void *q, const void *k, const void *v, void *o, int H, int Hkv, int Sk, int D,
                     int threads, void *pool)
{
    fa_params p;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.heads = H; p.kv_heads = Hkv; p.seq_q = 1; p.seq_k = Sk; p.head_dim = D;
    p.dtype = (fa_dtype)dt; p.threads = threads; p.pool = (fa_pool *)pool;
    return (int)fa_tiled(&p, q, k, v, o);
}

static int shim_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
/* The memory read ceiling beside it: GB/s of thr threads each summing its part of `bytes` (bench_util.h's
   bench_bw_read), the median of 5 passes */
SHIM double shim_mem_read(int thr, double bytes)
{
    size_t n = (size_t)(bytes / 8), per;
    uint64_t *buf;
    pthread_t th[64];
    bench_bw_part part[64];
    double ts[5];
    int t, rep;
    if (thr < 1) thr = 1;
    if (thr > 64) thr = 64;
    per = n / (size_t)thr / 32 * 32;
    buf = (uint64_t *)malloc(n * 8);
    if (!buf) return 0.0;
    memset(buf, 1, n * 8);
    for (rep = 0; rep < 5; rep++) {
        double t0 = bench_now();
        for (t = 0; t < thr; t++) {
            part[t].p = buf + per * (size_t)t; part[t].n = per;
            if (t > 0) pthread_create(&th[t], NULL, bench_bw_read, &part[t]);
        }
        bench_bw_read(&part[0]);
        for (t = 1; t < thr; t++) pthread_join(th[t], NULL);
        ts[rep] = bench_now() - t0;
    }
    free(buf);
    qsort(ts, 5, sizeof ts[0], shim_cmp);
    return (double)(per * (size_t)thr * 8) / ts[2] * 1e-9;
}
