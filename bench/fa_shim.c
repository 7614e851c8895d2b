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

#ifdef FA__HAVE_AMX
static int shim_zero_tiles;     /* 1: the tiles hold zeros (as bench_util.h's bench_amx_gflops), for comparison */
/* the AMX tile-loop ceiling on nonzero data (bench_util.h's bench_amx_gflops multiplies zeros): 4
   tdpbf16ps a round into 2 x 2 C tiles from A and B tiles of 2^-10 loaded once */
__attribute__((target("amx-tile,amx-bf16"))) static void *shim_amx_chain(void *arg)
{
    long n = *(long *)arg, i;
    uint16_t src[16 * 32];
    float out[16 * 16];
    for (i = 0; i < 16 * 32; i++) src[i] = shim_zero_tiles ? 0 : (uint16_t)(0x3A80u + (unsigned)(i % 7));   /* ~2^-10 */
    fa__amx_begin();
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, src, 64); _tile_loadd(5, src, 64); _tile_loadd(6, src, 64);
    for (i = 0; i < n; i++) {
        _tile_dpbf16ps(0, 4, 5); _tile_dpbf16ps(1, 4, 6); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 4);
    }
    _tile_stored(0, out, 64);
    fa__amx_end();
    *(long *)arg = out[0] > 0.0f || shim_zero_tiles ? n : -1;
    return NULL;
}
#endif

/* GFLOP/s of tdpbf16ps on thr threads (0 without AMX or its permission); thr < 0: -thr threads on zeros */
SHIM double shim_amx_ceiling(int thr)
{
#ifdef FA__HAVE_AMX
    shim_zero_tiles = thr < 0;
    if (thr < 0) thr = -thr;
    pthread_t th[256];
    long it[256];
    struct timespec a, b;
    int i;
    const long n = 1000000;
    if (!fa__cpu_amx() || !fa__amx_permit()) return 0.0;
    if (thr > 256) thr = 256;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (i = 0; i < thr; i++) { it[i] = n; if (i) pthread_create(&th[i], NULL, shim_amx_chain, &it[i]); }
    shim_amx_chain(&it[0]);
    for (i = 1; i < thr; i++) pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)thr * (double)n * 4.0 * 16.0 * 16.0 * 32.0 * 2.0 / ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec)) * 1e-9;
#else
    (void)thr;
    return 0.0;
#endif
}
