/* bench_cuda_backward.cu - the attention backward on the GPU: TFLOP/s of fa_cuda_tiled_backward, in
   its default (atomic dq) and deterministic modes (bench/RESULTS.md, "CUDA backward (issue 13)";
   bench/torch_sdpa.py --backward times PyTorch's backends on the same shapes).

   Shapes: the FlashAttention benchmark's, batch x seqlen = 16384 tokens, hidden 2048 (H = 32 at
   D = 64, H = 16 at D = 128), S = 1024 .. 16384, causal 0/1, dtypes bf16, fp16, fp32.
   FLOPs: the backward's, 2.5 x the forward's 4 B H S^2 D, halved for causal (FlashAttention's
   convention). Timing: CUDA events around each call (its workspace allocation, stream-ordered,
   included), one warm-up, median of repeats. Inputs N(0,1) drawn on the device; o and lse from
   fa_cuda_tiled. relerr: ||g_default - g_det|| / ||g_det|| over dq, dk, dv (the two modes agree to
   fp32 rounding, over the first 4M elements of each; accuracy against float64 is tests/test_cuda_backward.cu's job).

   Options: --quick (S = 1024, 4096, 16384), --budget SEC (per timed row, default 0.08), --dtype
   bf16|fp16|fp32 (repeatable; default all three), --d D, --s S, --causal 0|1 (one row set, for
   ncu; --tune too, given before it), --mma (each 16-bit row again through the mma.sync kernels, fa__cu_bwd_mma_only: rows
   fa_tiled_bwd_mma*, relerr against the default's gradients), --queued (the mean of calls queued back to
   back instead of the median of synced ones), --keep-pool (the default memory pool's release threshold
   raised, so that the workspace is not remapped after each sync), --prefix P before --tune (the
   sweep's rows named P* only; the wg* rows are the Hopper backward's variants). The kernel column names what the
   picker chose (bwd_wg_* the Hopper backward, bwd_tc_* the mma.sync one, bwd_ffma_* the FFMA one).
   Row format (shared with bench/torch_sdpa.py): ROW impl dtype D causal S B H extra ms TFLOP/s relerr status */
#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN__TEST_SWITCHES   /* fa__cu_bwd_mma_only (8f) */
#define FLASHATTN_CUDA
#ifndef FLASHATTN_NO_BLAS
#define FLASHATTN_NO_BLAS
#endif
#include "flashattn.h"

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x)                                                                                        \
    do {                                                                                             \
        cudaError_t e_ = (x);                                                                        \
        if (e_ != cudaSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

__device__ static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* N(0,1) by Box-Muller on a counter-based hash */
template <typename T> __global__ static void randn_k(T *x, size_t n, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t a = mix64(seed ^ (2 * i)), b = mix64(seed ^ (2 * i + 1));
        const float u1 = ((float)(a >> 40) + 1.0f) / 16777217.0f, u2 = (float)(b >> 40) / 16777216.0f;
        fa__st(x + i, sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
    }
}

static void randn(void *x, size_t n, fa_dtype dt, uint64_t seed)
{
    if (dt == FA_F32) randn_k<float><<<4096, 256>>>((float *)x, n, seed);
    else if (dt == FA_F16) randn_k<__half><<<4096, 256>>>((__half *)x, n, seed);
    else randn_k<__nv_bfloat16><<<4096, 256>>>((__nv_bfloat16 *)x, n, seed);
    CK(cudaGetLastError());
}

template <typename T> __global__ static void to_f32(const T *x, float *y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = fa__ld(x + i);
}

/* sum (a-b)^2 and sum b^2 of two device tensors of dt, in double on the host */
static void diff2(const void *a, const void *b, size_t n, fa_dtype dt, double *num, double *den)
{
    n = std::min(n, (size_t)1 << 22);   /* the first 4M elements: enough to see the modes agree */
    float *fa_, *fb;
    std::vector<float> ha(n), hb(n);
    CK(cudaMalloc(&fa_, n * 4));
    CK(cudaMalloc(&fb, n * 4));
    if (dt == FA_F32) { CK(cudaMemcpy(fa_, a, n * 4, cudaMemcpyDeviceToDevice)); CK(cudaMemcpy(fb, b, n * 4, cudaMemcpyDeviceToDevice)); }
    else if (dt == FA_F16) { to_f32<<<4096, 256>>>((const __half *)a, fa_, n); to_f32<<<4096, 256>>>((const __half *)b, fb, n); }
    else { to_f32<<<4096, 256>>>((const __nv_bfloat16 *)a, fa_, n); to_f32<<<4096, 256>>>((const __nv_bfloat16 *)b, fb, n); }
    CK(cudaMemcpy(ha.data(), fa_, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), fb, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        const double e = (double)ha[i] - hb[i];
        *num += e * e;
        *den += (double)hb[i] * hb[i];
    }
    cudaFree(fa_);
    cudaFree(fb);
}

static const char *dname(fa_dtype dt) { return dt == FA_F32 ? "fp32" : dt == FA_F16 ? "fp16" : "bf16"; }

static double opt_budget = 0.08;
static int only_d = 0;   /* --d: one head dim (the table and --tune) */
#ifdef FA_BENCH_TUNE
static const char *tune_prefix = "";   /* --prefix: the --tune rows whose name starts so */
#endif
static int only_s = 0, only_c = -1;    /* --s, --causal: one sequence length, one causal setting (the table and --tune) */

typedef fa_status (*bwd_fn)(const fa_params *, const void *, const void *, const void *, const void *, const void *,
                           void *, void *, void *);

static int opt_queued = 0;   /* --queued: the mean of back-to-back calls between one pair of events (no sync between) */

/* median ms of fa_cuda_tiled_backward (or fn) on p, each call between its own events after a sync (the
   host's work before the first launch and the workspace's allocation included); --queued: the mean of
   the same number of calls queued back to back (the host's work hidden under the GPU's) */
static double time_bwd(const fa_params &p, void *q, void *k, void *v, void *o, void *d_o, void *dq, void *dk, void *dv,
                       bwd_fn fn = fa_cuda_tiled_backward)
{
    cudaEvent_t e0, e1;
    std::vector<float> ts;
    float ms = 0.0f;
    int reps, r;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    if (fn(&p, q, k, v, o, d_o, dq, dk, dv) != FA_OK) { fprintf(stderr, "backward failed\n"); exit(1); }
    if (opt_queued) {
        CK(cudaEventRecord(e0));
        fn(&p, q, k, v, o, d_o, dq, dk, dv);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        reps = (int)std::min(20.0, std::max(2.0, opt_budget * 1e3 / std::max((double)ms, 1e-3)));
        CK(cudaEventRecord(e0));
        for (r = 0; r < reps; r++) fn(&p, q, k, v, o, d_o, dq, dk, dv);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        return ms / reps;
    }
    CK(cudaEventRecord(e0));
    fn(&p, q, k, v, o, d_o, dq, dk, dv);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
    reps = (int)std::min(20.0, std::max(2.0, opt_budget * 1e3 / std::max((double)ms, 1e-3)));
    for (r = 1; r < reps; r++) {
        CK(cudaEventRecord(e0));
        fn(&p, q, k, v, o, d_o, dq, dk, dv);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ts[ts.size() / 2];
}

/* One timed shape on the device: q, k, v, d_o drawn N(0,1) (seeds 1-4), o and lse from fa_cuda_tiled,
   two sets of gradient buffers (g, h) to compare two runs by diff2; p is the call's. */
struct Case {
    size_t n;
    void *q, *k, *v, *o, *d_o, *g[3], *h[3];
    float *lse;
    fa_params p;
};

static void case_make(Case &c, fa_dtype dt, int B, int H, int S, int D, int causal)
{
    const size_t es = dt == FA_F32 ? 4 : 2;
    c.n = (size_t)B * H * S * D;
    CK(cudaMalloc(&c.q, c.n * es)); CK(cudaMalloc(&c.k, c.n * es)); CK(cudaMalloc(&c.v, c.n * es));
    CK(cudaMalloc(&c.o, c.n * es)); CK(cudaMalloc(&c.d_o, c.n * es));
    CK(cudaMalloc(&c.lse, (size_t)B * H * S * 4));
    for (int u = 0; u < 3; u++) { CK(cudaMalloc(&c.g[u], c.n * es)); CK(cudaMalloc(&c.h[u], c.n * es)); }
    randn(c.q, c.n, dt, 1); randn(c.k, c.n, dt, 2); randn(c.v, c.n, dt, 3); randn(c.d_o, c.n, dt, 4);
    memset(&c.p, 0, sizeof c.p);
    c.p.batch = B; c.p.heads = H; c.p.seq_q = S; c.p.seq_k = S; c.p.head_dim = D; c.p.dtype = dt; c.p.causal = causal;
    c.p.lse = c.lse;
    if (fa_cuda_tiled(&c.p, c.q, c.k, c.v, c.o) != FA_OK) { fprintf(stderr, "forward failed\n"); exit(1); }
}

static void case_free(Case &c)
{
    cudaFree(c.q); cudaFree(c.k); cudaFree(c.v); cudaFree(c.o); cudaFree(c.d_o); cudaFree(c.lse);
    for (int u = 0; u < 3; u++) { cudaFree(c.g[u]); cudaFree(c.h[u]); }
}

#ifdef FA_BENCH_TUNE
/* The tensor-core backward's configuration sweep (--tune, bf16, no modifiers): each pair of
   traits through the library's own kernels and workspace steps (fa__cu_tbwd_run's, restated here
   so that the configuration can vary). KNW, KMT, KBK, KMB: the dK/dV kernel's warps, m16 tiles a
   warp, query tile, blocks per SM; QNW, QBK, QPF, QMB, QMT: the dq kernel's warps, key tile, PF, blocks
   per SM, m16 tiles a warp. */
template <int DD, int KNW, int KMT, int KBK, int KMB, int QNW, int QBK, int QPF, int QMB, int QMT = 1> struct Tcfg {
    struct KV { enum { D = DD, NW = KNW, MT = KMT, BK = KBK, QREG = 0, PF = 0, MINB = KMB }; };
    struct DQ { enum { D = DD, NW = QNW, MT = QMT, BK = QBK, QREG = 0, PF = QPF, MINB = QMB }; };
};

static unsigned tune_prep_blocks = FA__CU_PREP_BLOCKS;   /* the prep's grid cap (the wg.p1k row: 1024) */

/* The sweep rows' first steps, as fa__cu_tbwd_run's: the request resolved into *d, the workspace
   of mode det laid out (*w) and allocated (*mem, *pooled), its flag and dq buffer zeroed, and
   fa__cu_bwd_prep run (its lse into the workspace's lx; d->lse stays the forward's). */
static fa_status tune_ws(const fa_params *p, const void *q, const void *k, const void *v, const void *o, const void *d_o,
                         void *dq, void *dk, void *dv, int det, fa__dims *d, fa__cu_tbwd_ws *w, char **mem, int *pooled)
{
    typedef __nv_bfloat16 T;
    fa_status st = fa__cu_bwd_resolve(p, q, k, v, o, d_o, dq, dk, dv, 1, d);
    if (st != FA_OK) return st;
    fa__cu_tbwd_layout(d, det, w);
    if ((st = fa__cu_alloc((void **)mem, w->total, 0, pooled)) != FA_OK) return st;
    unsigned *flag = (unsigned *)(*mem + w->flag);
    CK(cudaMemsetAsync(flag, 0, w->total - w->flag, 0));
    CK(fa__cu_bwd_prep_launch<T>(d, q, k, o, d_o, (float *)*mem, (float *)(*mem + w->lx), (float *)(*mem + w->kbad), flag,
                                 0, tune_prep_blocks) == FA_OK ? cudaSuccess : cudaErrorUnknown);
    return FA_OK;
}

template <class CFG>
static fa_status tune_call(const fa_params *p, const void *q, const void *k, const void *v, const void *o,
                           const void *d_o, void *dq, void *dk, void *dv)
{
    typedef __nv_bfloat16 T;
    fa__dims d;
    fa__cu_bwd_plan pl;
    fa__cu_tbwd_ws w;
    char *mem = NULL;
    int pooled = 0;
    const int det = p->deterministic != 0;
#if FA__WG
    fa__cu_bwd_mma_only = 1;   /* the workspace of the mma.sync kernels (dq's buffer in the default mode) */
#endif
    fa_status st = tune_ws(p, q, k, v, o, d_o, dq, dk, dv, det, &d, &w, &mem, &pooled);
#if FA__WG
    fa__cu_bwd_mma_only = 0;
#endif
    if (st != FA_OK) return st;
    memset(&pl, 0, sizeof pl);
    fa__tcb_plan_of<CFG>(&d, &pl);
    const int64_t rows = (int64_t)d.B * d.Hq * d.Sq;
    float *delta = (float *)mem, *dqacc = det ? NULL : (float *)(mem + w.dq);
    unsigned *flag = (unsigned *)(mem + w.flag);
    fa__tcb_args a;
    a.q = q; a.k = k; a.v = v; a.d_o = d_o; a.delta = delta; a.dqacc = dqacc; a.flag = flag;
    a.dq = dq; a.dk = dk; a.dv = dv;
    a.qblocks = (int)pl.qblocks;
    a.d = d;
    a.d.lse = (float *)(mem + w.lx);
    const unsigned kgrid = (unsigned)(pl.kblocks * d.B * d.Hkv), qgrid = (unsigned)(pl.qblocks * d.B * d.Hq);
    if (det) {
        st = fa__tcb_go_dkv<T, typename CFG::KV, false, false>(a, kgrid, 0);
        if (st == FA_OK) st = fa__tcb_go_dq<T, typename CFG::DQ, false>(a, qgrid, 0);
    } else {
        st = fa__tcb_go_dkv<T, typename CFG::KV, false, true>(a, kgrid, 0);
        if (st == FA_OK)
            fa__cu_bwd_out<T><<<fa__cu_rows_grid(rows), 128>>>(dqacc, (T *)dq, d.Hq, 1, d.Sq, d.D, d.qs[0], d.qs[1], d.qs[2],
                                                              rows, d.scale, (const unsigned *)NULL, 0);
    }
    fa__cu_free(mem, 0, pooled);
    return st;
}

#if FA__WG
/* The Hopper backward (8e3) in configuration C (fa__wgb_d* or a variant), through the library's
   steps (no modifiers): fa__cu_bwd_prep, the dK/dV kernel, the dq kernel (either mode); RUN 1: the
   dK/dV kernel alone, 2: the dq kernel alone (split timings: the prep's share is k + q - both; the
   gradients of such a row are incomplete, so its relerr means nothing); 3: both, two launches (main
   4fbc773's arrangement); 4: both in one grid (fa__wgb_both, as shipped); 5: that grid in head-major order; 0: the
   prep alone (its workspace, the flag's memset and fa__cu_bwd_prep: what the call spends before its kernels);
   6: the same with the prep's grid capped at 1024 blocks (its warps walking rows in grid strides).
   Wq64: the D = 64 dq
   kernel's traits with BK, ST varied; Wc64: a D = 64 dK/dV configuration (ST varied) with dq
   kernel Q. */
template <int K_, int S_> struct Wq64 { enum { D = 64, BQ = 128, BK = K_, ST = S_, NT = 384, REG_P = 24, REG_C = 240 }; };
template <int DST, class Q> struct Wc64 {
    enum { D = 64, BKV = 128, BQ = 64, NT = 384, ST = DST, REG_P = 24, REG_C = 240 };
    typedef Q DQ;
};

template <class C, int RUN = 4>
static fa_status wg_tune_call(const fa_params *p, const void *q, const void *k, const void *v, const void *o,
                              const void *d_o, void *dq, void *dk, void *dv)
{
    typedef __nv_bfloat16 T;
    fa__dims d;
    fa__cu_bwd_plan pl;
    fa__cu_tbwd_ws w;
    fa__tcb_args a;
    char *mem = NULL;
    int pooled = 0;
    if (RUN == 6) tune_prep_blocks = 1024;
    fa_status st = tune_ws(p, q, k, v, o, d_o, dq, dk, dv, 1, &d, &w, &mem, &pooled);
    tune_prep_blocks = FA__CU_PREP_BLOCKS;
    if (st != FA_OK) return st;
    memset(&pl, 0, sizeof pl);
    fa__wgb_plan_of<C>(&d, &pl);
    d.lse = (float *)(mem + w.lx);
    a.q = q; a.k = k; a.v = v; a.d_o = d_o; a.delta = (float *)mem; a.dqacc = NULL; a.flag = (unsigned *)(mem + w.flag);
    a.dq = dq; a.dk = dk; a.dv = dv;
    a.qblocks = (int)pl.qblocks;
    a.d = d;
    if (RUN == 4 || RUN == 5)
        st = fa__wgb_go_both<T, C, false>(a, (unsigned)(pl.kblocks * d.B * d.Hkv), (unsigned)(pl.qblocks * d.B * d.Hq), 0,
                                          RUN == 5);
    if (RUN < 4 && (RUN & 1)) st = fa__wgb_go_dkv<T, C, false>(a, (unsigned)(pl.kblocks * d.B * d.Hkv), 0);
    if (st == FA_OK && RUN < 4 && (RUN & 2)) st = fa__wgq_go_dq<T, typename C::DQ, false>(a, (unsigned)(pl.qblocks * d.B * d.Hq), 0);
    fa__cu_free(mem, 0, pooled);
    return st;
}
#endif

struct TuneImpl { const char *name; int D; bwd_fn fn; };
static const TuneImpl tune_impls[] = {
    { "k8m1", 64, tune_call<Tcfg<64, 8, 1, 64, 1, 4, 64, 0, 2> > },    /* the first cut's D = 64 */
    { "k4m2", 64, tune_call<Tcfg<64, 4, 2, 32, 2, 4, 64, 0, 2> > },    /* fa__tcb_kv_d64, the first dq pass */
    { "q4m2", 64, tune_call<Tcfg<64, 4, 2, 32, 2, 4, 64, 0, 2, 2> > }, /* dq: 32 rows a warp */
    { "q4m2k32", 64, tune_call<Tcfg<64, 4, 2, 32, 2, 4, 32, 0, 2, 2> > }, /* fa__tcb_dq_d64: and key tiles of 32 */
    { "q8m2", 64, tune_call<Tcfg<64, 4, 2, 32, 2, 8, 64, 0, 1, 2> > },
    { "q4m2b1", 64, tune_call<Tcfg<64, 4, 2, 32, 2, 4, 64, 0, 1, 2> > },
    { "k4m2b1", 64, tune_call<Tcfg<64, 4, 2, 32, 1, 4, 64, 0, 2> > },
    { "k8m2", 64, tune_call<Tcfg<64, 8, 2, 32, 1, 4, 64, 0, 2> > },
    { "k8m1", 128, tune_call<Tcfg<128, 8, 1, 64, 1, 4, 64, 0, 2> > },  /* fa__tcb_kv_d128 */
    { "k8m1q8", 128, tune_call<Tcfg<128, 8, 1, 64, 1, 8, 64, 1, 1> > },
#if FA__WG
    { "wg", 64, wg_tune_call<fa__wgb_d64> },   /* the Hopper backward as shipped */
    { "wg.k", 64, wg_tune_call<fa__wgb_d64, 1> },   /* its dK/dV kernel alone */
    { "wg.q", 64, wg_tune_call<fa__wgb_d64, 2> },   /* its dq kernel alone */
    { "wg.2", 64, wg_tune_call<fa__wgb_d64, 3> },   /* both, two launches */
    { "wg.h", 64, wg_tune_call<fa__wgb_d64, 5> },   /* one grid, head-major */
    { "wg.p", 64, wg_tune_call<fa__wgb_d64, 0> },   /* the prep alone */
    { "wg.p1k", 64, wg_tune_call<fa__wgb_d64, 6> }, /* the prep alone on 1024 blocks */
    { "wgk6", 64, wg_tune_call<Wc64<6, Wq64<128, 2> > > },        /* dK/dV: 6 stages */
    { "wgq64s4", 64, wg_tune_call<Wc64<4, Wq64<64, 4> > > },      /* dq: key tiles of 64, 4 stages */
    { "wgq128s3", 64, wg_tune_call<Wc64<4, Wq64<128, 3> > > },    /* dq: 3 stages */
    { "wg", 128, wg_tune_call<fa__wgb_d128> },
    { "wg.k", 128, wg_tune_call<fa__wgb_d128, 1> },
    { "wg.q", 128, wg_tune_call<fa__wgb_d128, 2> },
    { "wg.2", 128, wg_tune_call<fa__wgb_d128, 3> },
    { "wg.h", 128, wg_tune_call<fa__wgb_d128, 5> },
#endif
};

/* TUNE name D causal S B H default_ms TFLOP/s det_ms TFLOP/s relerr (each mode against the library's deterministic
   gradients through the mma.sync kernels: fa__cu_bwd_mma_only) */
static void tune(void)
{
    const int shapes[6][2] = { { 2048, 0 }, { 2048, 1 }, { 4096, 0 }, { 4096, 1 }, { 8192, 0 }, { 16384, 0 } };
    for (int D : { 64, 128 })
        for (int c = 0; c < 6 && (!only_d || D == only_d); c++) {
            const int S = shapes[c][0], causal = shapes[c][1], H = 2048 / D, B = 16384 / S;
            if ((only_s && S != only_s) || (only_c >= 0 && causal != only_c)) continue;
            const double fl = 2.5 * 4.0 * B * H * (double)S * S * D * (causal ? 0.5 : 1.0);
            Case cs;
            case_make(cs, FA_BF16, B, H, S, D, causal);
            fa_params &p = cs.p;
            p.deterministic = 1;
#if FA__WG
            fa__cu_bwd_mma_only = 1;   /* the reference: the mma.sync kernels' deterministic gradients */
#endif
            if (fa_cuda_tiled_backward(&p, cs.q, cs.k, cs.v, cs.o, cs.d_o, cs.h[0], cs.h[1], cs.h[2]) != FA_OK) exit(1);
#if FA__WG
            fa__cu_bwd_mma_only = 0;
#endif
            for (const TuneImpl &im : tune_impls) {
                if (im.D != D || strncmp(im.name, tune_prefix, strlen(tune_prefix)) != 0) continue;
                double ms[2], num = 0.0, den = 0.0;
                for (int det = 0; det < 2; det++) {
                    p.deterministic = det;
                    ms[det] = time_bwd(p, cs.q, cs.k, cs.v, cs.o, cs.d_o, cs.g[0], cs.g[1], cs.g[2], im.fn);
                    CK(cudaDeviceSynchronize());
                    for (int u = 0; u < 3; u++) diff2(cs.g[u], cs.h[u], cs.n, FA_BF16, &num, &den);
                }
                printf("TUNE %-9s %4d %2d %6d %4d %3d %9.3f %8.1f %9.3f %8.1f %9.2e\n", im.name, D, causal, S, B, H, ms[0],
                       fl / ms[0] / 1e9, ms[1], fl / ms[1] / 1e9, sqrt(num / den));
                fflush(stdout);
            }
            case_free(cs);
        }
}
#endif

int main(int argc, char **argv)
{
    int quick = 0, i, both = 0;
    std::vector<int> Ss;
    std::vector<fa_dtype> dts;
    cudaDeviceProp prop;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc) opt_budget = atof(argv[++i]);
#ifdef FA_BENCH_TUNE
        else if (!strcmp(argv[i], "--tune")) { tune(); return 0; }   /* --d before --tune picks one head dim */
#endif
#if FA__WG
        else if (!strcmp(argv[i], "--mma")) both = 1;   /* each 16-bit row also through the mma.sync kernels */
#endif
#ifdef FA_BENCH_TUNE
        else if (!strcmp(argv[i], "--prefix") && i + 1 < argc) tune_prefix = argv[++i];   /* before --tune */
#endif
        else if (!strcmp(argv[i], "--queued")) opt_queued = 1;   /* before --tune too */
        else if (!strcmp(argv[i], "--keep-pool")) {   /* the default memory pool keeps its memory over syncs */
            cudaMemPool_t mp;
            uint64_t thr = UINT64_MAX;
            CK(cudaDeviceGetDefaultMemPool(&mp, 0));
            CK(cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &thr));
        }
        else if (!strcmp(argv[i], "--d") && i + 1 < argc) only_d = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--s") && i + 1 < argc) only_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--causal") && i + 1 < argc) only_c = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc && !strcmp(argv[i + 1], "bf16")) dts.push_back(FA_BF16), i++;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc && !strcmp(argv[i + 1], "fp16")) dts.push_back(FA_F16), i++;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc && !strcmp(argv[i + 1], "fp32")) dts.push_back(FA_F32), i++;
        else { fprintf(stderr, "usage: %s [--quick] [--budget s] [--dtype bf16|fp16|fp32 ...] [--d D] [--s S] [--causal 0|1] [--mma] [--queued] [--keep-pool]\n", argv[0]); return 2; }
    }
    (void)both;
    if (dts.empty()) dts = { FA_BF16, FA_F16, FA_F32 };
    if (quick) Ss = { 1024, 4096, 16384 };
    else Ss = { 1024, 2048, 4096, 8192, 16384 };
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# bench_cuda_backward: %s, CUDA runtime %d, flashattn %s\n", prop.name, CUDART_VERSION, FLASHATTN_VERSION_STRING);
    for (int D : { 64, 128 }) {
        const int H = 2048 / D;
        if (only_d && D != only_d) continue;
        for (int S : Ss) {
            const int B = 16384 / S;
            if (only_s && S != only_s) continue;
            for (int causal = 0; causal < 2; causal++)
                for (fa_dtype dt : dts) {
                    if (only_c >= 0 && causal != only_c) continue;
                    double ms[2], num = 0.0, den = 0.0;
                    const double fl = 2.5 * 4.0 * B * H * (double)S * S * D * (causal ? 0.5 : 1.0);
                    char impl[2][32] = { "fa_tiled_bwd", "fa_tiled_bwd_det" };
                    fa__dims dd;
                    fa__cu_bwd_plan plan;
                    Case cs;
                    case_make(cs, dt, B, H, S, D, causal);
                    fa_params &p = cs.p;
                    for (int det = 0; det < 2; det++) {
                        void *const *gr = det ? cs.h : cs.g;
                        p.deterministic = det;
                        ms[det] = time_bwd(p, cs.q, cs.k, cs.v, cs.o, cs.d_o, gr[0], gr[1], gr[2]);
                    }
                    CK(cudaDeviceSynchronize());
                    for (int u = 0; u < 3; u++) diff2(cs.g[u], cs.h[u], cs.n, dt, &num, &den);
                    fa__resolve(&p, cs.q, cs.k, cs.v, cs.o, &dd, NULL);
                    fa__cu_pick_backward(&dd, cs.q, cs.k, cs.v, cs.d_o, cs.g[0], cs.g[1], cs.g[2], &plan);
                    for (int det = 0; det < 2; det++)
                        printf("ROW %-16s %-5s %4d %2d %6d %4d %3d %-10s %9.3f %8.1f %9.2e %s\n", impl[det], dname(dt), D, causal,
                               S, B, H, fa__cu_bwd_kernel_name(plan.kernel), ms[det], fl / ms[det] / 1e9, sqrt(num / den),
                               sqrt(num / den) <= 1e-3 ? "OK" : "DIFF");
                    printf("# det/default time ratio %.3f\n", ms[1] / ms[0]);
                    fflush(stdout);
#if FA__WG
                    if (both && dt != FA_F32) {   /* the same row with the picker kept off the Hopper backward */
                        const char *mname[2] = { "fa_tiled_bwd_mma", "fa_tiled_bwd_mma_det" };
                        double mm[2];
                        fa__cu_bwd_mma_only = 1;
                        fa__cu_pick_backward(&dd, cs.q, cs.k, cs.v, cs.d_o, cs.g[0], cs.g[1], cs.g[2], &plan);
                        for (int det = 0; det < 2; det++) {
                            double n2 = 0.0, d2 = 0.0;
                            p.deterministic = det;
                            mm[det] = time_bwd(p, cs.q, cs.k, cs.v, cs.o, cs.d_o, cs.h[0], cs.h[1], cs.h[2]);
                            CK(cudaDeviceSynchronize());
                            for (int u = 0; u < 3; u++) diff2(cs.h[u], cs.g[u], cs.n, dt, &n2, &d2);   /* against the default's */
                            printf("ROW %-16s %-5s %4d %2d %6d %4d %3d %-10s %9.3f %8.1f %9.2e %s\n", mname[det], dname(dt), D,
                                   causal, S, B, H, fa__cu_bwd_kernel_name(plan.kernel), mm[det], fl / mm[det] / 1e9,
                                   sqrt(n2 / d2), sqrt(n2 / d2) <= 1e-2 ? "OK" : "DIFF");
                        }
                        printf("# default/mma time ratio %.3f, det %.3f\n", ms[0] / mm[0], ms[1] / mm[1]);
                        fflush(stdout);
                        fa__cu_bwd_mma_only = 0;
                    }
#endif
                    case_free(cs);
                }
        }
    }
    return 0;
}
