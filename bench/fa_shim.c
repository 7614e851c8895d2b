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
