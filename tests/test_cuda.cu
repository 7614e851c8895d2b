/* tests/test_cuda.cu - the CUDA backend against the float64 reference (cmocka, nvcc).

   Every case runs fa_cuda_naive and fa_cuda_tiled on the GPU and compares with ref_attention()
   of tests/ref.h at API.md's tolerances (fp32 allclose 1e-5; fp16 ||out-ref||/||ref|| <= 1e-3,
   bf16 <= 5e-3, the reference fed the same rounded inputs), with outputs poisoned (NaN bytes)
   beforehand and the gaps of strided outputs checked untouched. Also: naive `scores`, lse,
   error statuses with outputs untouched, the stream honoured, fa_cuda_merge against the whole.
   Every fa_cuda_tiled run asserts which kernel served it (fa__cu_pick against want_kernel), and
   test_kernels_served that every kernel of the picker served some run.

   Environment: SMALL=1 runs a reduced grid (for compute-sanitizer); FA_TIME=1 adds a timing
   pass that prints TFLOP/s (no assertion); FA_FILTER=TEST runs that test; FA_CASE=TEXT the cases
   whose names hold TEXT. Build: see the Makefile's test-cuda rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <float.h>
extern "C" {
#include <cmocka.h>
}

#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN_CUDA
#define FLASHATTN__TEST_SWITCHES   /* fa__cu_dec_pdl (8f): test_decode_launch runs every setting */
#ifndef FLASHATTN_NO_BLAS
#define FLASHATTN_NO_BLAS
#endif
#include "flashattn.h"
#include "ref.h"

static int g_small = 0;
static int g_block_k = 0;   /* p.block_k of the runs: 32 and 64 pick the other fp32 kernels */
static int g_block_q = 0;   /* p.block_q of the runs: 64 and 128 pick the fp32 kernels with several blocks/SM */
static int g_dec_rows = 0;  /* 16 or 32: the tensor-core decode path's block forced (run_case, nan_run); 0: as picked */
static unsigned char *g_kept_o = NULL;   /* with g_keep: run_case's o (bytes as stored) and lse, for a bitwise compare */
static float *g_kept_l = NULL;
static size_t g_kept_no = 0, g_kept_rows = 0;   /* their sizes: bytes of o, rows of lse */
static int g_keep = 0;
static int g_tiled_only = 0;   /* run_list skips fa_cuda_naive (which ignores block_q) */
static int g_served[FA__CU_KERNELS][5];   /* tiled runs served by each kernel (fa__cu_pick), by modifier variant */
static int g_wg64_rows[2][5];   /* runs of the D = 64 Hopper kernel in its 128-row [0] and 192-row [1] blocks (fa__wg_wide), by variant */
static int g_hopper = 0;   /* the device has compute capability 9.0: the Hopper kernel (8d3) serves D = 64 and 128 */
static int g_sms = 0;      /* the device's SMs */
static float g_key_ramp = 0.0f;   /* run_case: key j's k row times 1 + g_key_ramp j / Sk (test_lazy_rescale) */
static int g_lazy_rows = 0, g_lazy_far = 0, g_lazy_near = 0;   /* ... and its rows: all, max growth > 2 FA__LAZY, <= FA__LAZY */
static int g_wg_multi[2][5];   /* Hopper runs (D = 64 [0], 128 [1]) with more query tiles than SMs, by variant: its
                                  persistent blocks (8d3's PER) walk several items there */

#include "cuda_util.h"

/* ---- cases ------------------------------------------------------------------------------------- */

/* L_KVB: k and v shared by the batch (batch stride 0; TMA refuses it, so on a Hopper the fp16/bf16
   prefill runs on the mma.sync kernel: its modifier variants run there too) */
enum { L_PACKED = 0, L_BSHD = 1, L_PADDED = 2, L_KVB = 3 };
enum { BIAS_NONE = 0, BIAS_FULL, BIAS_KEYPAD, BIAS_SHARED, BIAS_HIDE_ROWS, BIAS_HIDE_TILES, BIAS_STRIDED,
       BIAS_PER_HEAD };
enum { ALIBI_NONE = 0, ALIBI_HEAD, ALIBI_BATCH };

typedef struct tcase {
    const char *name;
    int B, Hq, Hkv, Sq, Sk, D, Dv, causal, layout;
    float scale;
    int wl, wr;
    float softcap;
    int alibi, bias, small;
} tcase;

static uint64_t name_seed(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

static void make_params(const tcase *c, fa_params *p)
{
    int Dv = c->Dv ? c->Dv : c->D;
    memset(p, 0, sizeof *p);
    p->batch = c->B; p->heads = c->Hq; p->kv_heads = c->Hkv; p->seq_q = c->Sq; p->seq_k = c->Sk;
    p->head_dim = c->D; p->head_dim_v = c->Dv; p->scale = c->scale; p->causal = c->causal;
    p->window_left = c->wl; p->window_right = c->wr; p->softcap = c->softcap;
    if (c->layout == L_BSHD) {
        int Hkv = c->Hkv ? c->Hkv : c->Hq;
        p->q_stride[0] = (int64_t)c->Sq * c->Hq * c->D; p->q_stride[1] = c->D; p->q_stride[2] = (int64_t)c->Hq * c->D;
        p->k_stride[0] = (int64_t)c->Sk * Hkv * c->D; p->k_stride[1] = c->D; p->k_stride[2] = (int64_t)Hkv * c->D;
        p->v_stride[0] = (int64_t)c->Sk * Hkv * Dv; p->v_stride[1] = Dv; p->v_stride[2] = (int64_t)Hkv * Dv;
        p->o_stride[0] = (int64_t)c->Sq * c->Hq * Dv; p->o_stride[1] = Dv; p->o_stride[2] = (int64_t)c->Hq * Dv;
    } else if (c->layout == L_KVB) {              /* [Hkv][Sk][D] k and v for every batch */
        p->k_stride[0] = 0; p->k_stride[1] = (int64_t)c->Sk * c->D; p->k_stride[2] = c->D;
        p->v_stride[0] = 0; p->v_stride[1] = (int64_t)c->Sk * Dv; p->v_stride[2] = Dv;
    } else if (c->layout == L_PADDED) {           /* token rows with gaps after them */
        int Hkv = c->Hkv ? c->Hkv : c->Hq;
        int64_t tq = c->D + 3, tk = c->D + 1, tv = Dv + 2, to = Dv + 5;
        p->q_stride[0] = c->Hq * c->Sq * tq; p->q_stride[1] = c->Sq * tq; p->q_stride[2] = tq;
        p->k_stride[0] = Hkv * c->Sk * tk; p->k_stride[1] = c->Sk * tk; p->k_stride[2] = tk;
        p->v_stride[0] = Hkv * c->Sk * tv; p->v_stride[1] = c->Sk * tv; p->v_stride[2] = tv;
        p->o_stride[0] = c->Hq * c->Sq * to + 7; p->o_stride[1] = c->Sq * to; p->o_stride[2] = to;
    }
}

/* Host bias / slopes for the case (allocated; NULL when off); sets p's strides. */
static float *make_bias(const tcase *c, fa_params *p, ref_rng *r, size_t *n_out)
{
    int64_t B = c->B, H = c->Hq, Sq = c->Sq, Sk = c->Sk, i, j, b;
    float *x;
    size_t n;
    *n_out = 0;
    if (c->bias == BIAS_NONE) return NULL;
    switch (c->bias) {
    case BIAS_KEYPAD: p->bias_stride[0] = Sk; p->bias_stride[3] = 1; break;
    case BIAS_SHARED: case BIAS_HIDE_TILES: p->bias_stride[2] = Sk; p->bias_stride[3] = 1; break;
    case BIAS_STRIDED:                                   /* [B][Sq][H][Sk] */
        p->bias_stride[0] = Sq * H * Sk; p->bias_stride[1] = Sk; p->bias_stride[2] = H * Sk; p->bias_stride[3] = 1;
        break;
    case BIAS_PER_HEAD: p->bias_stride[1] = Sq * Sk; p->bias_stride[2] = Sk; p->bias_stride[3] = 1; break;
    default: break;                                      /* packed [B][H][Sq][Sk] */
    }
    n = ref_bias_elems(p);
    x = ref_alloc(n);
    assert_non_null(x);
    ref_fill_normal(r, x, n);
    if (c->bias == BIAS_KEYPAD)                           /* batch b pads its last 3(b+1) keys */
        for (b = 0; b < B; b++)
            for (j = 0; j < Sk; j++) x[b * Sk + j] = j >= Sk - 3 * (b + 1) ? -INFINITY : 0.0f;
    if (c->bias == BIAS_HIDE_ROWS)                        /* every 5th row sees nothing */
        for (i = 0; i < (int64_t)n; i++)
            if ((i / Sk) % 5 == 2) x[i] = -INFINITY;
    if (c->bias == BIAS_HIDE_TILES)                       /* keys 64..127 for all rows; 0..63 for rows < 40 */
        for (i = 0; i < Sq; i++)
            for (j = 0; j < Sk; j++)
                if ((j >= 64 && j < 128) || (i < 40 && j < 64)) x[i * Sk + j] = -INFINITY;
    *n_out = n;
    return x;
}

static float *make_alibi(const tcase *c, fa_params *p, size_t *n_out)
{
    int n = c->alibi == ALIBI_BATCH ? c->B * c->Hq : c->Hq, i;
    float *x;
    *n_out = 0;
    if (c->alibi == ALIBI_NONE) return NULL;
    x = ref_alloc((size_t)n);
    assert_non_null(x);
    for (i = 0; i < n; i++) x[i] = (float)pow(2.0, -8.0 * (i % c->Hq + 1) / c->Hq) * (1.0f + 0.25f * (float)(i / c->Hq));
    p->alibi_stride = c->alibi == ALIBI_BATCH ? c->Hq : 0;
    *n_out = (size_t)n;
    return x;
}

static int close_or_report(const char *what, const char *name, const float *a, const float *b, size_t n,
                           double rtol, double atol)
{
    size_t w;
    if (fa_allclose(a, b, n, (float)rtol, (float)atol)) return 1;
    w = ref_worst(a, b, n, rtol, atol);
    print_error("  FAIL %s %s: not allclose(rtol %g, atol %g): max |diff| %g; worst [%zu] got %.9g want %.9g\n",
                name, what, rtol, atol, fa_max_abs_diff(a, b, n), w, w == (size_t)-1 ? 0.0 : (double)a[w],
                w == (size_t)-1 ? 0.0 : (double)b[w]);
    return 0;
}


/* The packed rows of a tensor-core decode block that fa__cu_dec_pick takes for this shape: 32 where
   group * Sq > 16 and the grid of 16-row blocks (B Hkv row blocks chunks, the chunks from the shape,
   fa__cu_dec_chunk) would take more than one wave of the 16-row kernel's MINB blocks an SM of this
   device (2 at D = 64, 3 at D = 128), else 16;
   g_dec_rows when it forces one. */
static int want_dec_rows(int B, int Hq, int Hkv, int Sq, int Sk, int D)
{
    const int minb = D == 64 ? (int)fa__dec_d64::MINB : (int)fa__dec_d128::MINB;
    fa__dims d;
    int dev = 0, sms = 0;
    int64_t rb, chunks;
    if (g_dec_rows) return g_dec_rows;
    memset(&d, 0, sizeof d);
    d.Hkv = Hkv ? Hkv : Hq; d.group = Hq / d.Hkv; d.Sq = Sq; d.Sk = Sk;
    rb = ((int64_t)d.group * Sq + 15) / 16;
    chunks = ((int64_t)Sk + fa__cu_dec_chunk(&d) - 1) / fa__cu_dec_chunk(&d);
    CU(cudaGetDevice(&dev));
    CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return rb > 1 && (int64_t)B * d.Hkv * rb * chunks > minb * (int64_t)sms ? 32 : 16;
}

/* A tensor-core decode plan turned into the block g_dec_rows forces (nothing else changes: the
   chunks come from the shape either way). */
static void force_dec_rows(fa__cu_plan *pl)
{
    const int d64 = pl->kernel == FA__CU_DEC_TC_D64 || pl->kernel == FA__CU_DEC_TC_D64_R32;
    if (!g_dec_rows || !(d64 || pl->kernel == FA__CU_DEC_TC_D128 || pl->kernel == FA__CU_DEC_TC_D128_R32)) return;
    pl->kernel = g_dec_rows == 32 ? (d64 ? FA__CU_DEC_TC_D64_R32 : FA__CU_DEC_TC_D128_R32)
                                  : (d64 ? FA__CU_DEC_TC_D64 : FA__CU_DEC_TC_D128);
    pl->bq = g_dec_rows;
}

/* fa_cuda_tiled; with g_dec_rows, the same steps with the decode block forced (fa__cu_launch of the
   forced plan, as fa_cuda_tiled launches the picked one). */
static fa_status tiled_run(const fa_params *p, const void *q, const void *k, const void *v, void *o)
{
    fa__dims d;
    fa__cu_plan plan;
    fa_status st;
    if (!g_dec_rows) return fa_cuda_tiled(p, q, k, v, o);
    if ((st = fa__resolve(p, q, k, v, o, &d, NULL)) != FA_OK || (st = fa__cu_check(&d)) != FA_OK || d.Sq == 0) return st;
    if ((st = fa__cu_pick(&d, q, k, v, o, &plan)) != FA_OK) return st;
    force_dec_rows(&plan);
    return fa__cu_launch(&plan, &d, q, k, v, o, (cudaStream_t)d.stream);
}

/* The kernel fa_cuda_tiled must run for a case (fa__cu_pick's rules, as the header documents them),
   so that a silent fall back to another kernel fails. First the split-key decode path (8d2): Sk >= 1,
   Sq <= 16 and group * Sq <= 64 take the decode kernels, the tensor-core one for fp16/bf16 at D = Dv in
   {64, 128} with rows that are multiples of 8 elements (variant 4 with any modifier, a bias or a
   negative scale; blocks of 32 packed rows, the _r32 kernels, where want_dec_rows says), else the FFMA
   one of the head-dim class. Then: fp16/bf16 at D = Dv in {64, 128} with rows
   that are multiples of 8 elements (packed and [B][S][H][D] here; the padded layout is not) run on
   tensor cores: on a compute capability 9.0 device with Sk >= 1 the Hopper kernel (8d3,
   whose sm_90a code this build must hold), else the mma.sync kernel; fp32 with every q/k/v row a multiple of 4 floats on the aligned-fp32 kernels that
   (block_q, block_k) name, where their shared memory fits; the rest on the generic kernel of the
   head-dim class. *mods: the tensor-core kernel's modifier variant. */
static fa__cu_kernel want_kernel(const tcase *c, fa_dtype dt, int *mods)
{
    const int Dv = c->Dv ? c->Dv : c->D, dc = c->D > Dv ? c->D : Dv;
    const int bq = g_block_q == 64 || g_block_q == 128 ? g_block_q : 0;
    const int bk = g_block_k == 32 || g_block_k == 64 ? g_block_k : 0;
    const fa__cu_kernel generic = dc <= 64 ? FA__CU_GENERIC_D64 : dc <= 128 ? FA__CU_GENERIC_D128 : FA__CU_GENERIC_D256;
    int optin = 0, dev = 0;
    *mods = 0;
    if (c->Sk >= 1 && c->Sq <= 16 && (c->Hq / (c->Hkv ? c->Hkv : c->Hq)) * c->Sq <= 64) {
        if (dt != FA_F32 && c->D == Dv && (c->D == 64 || c->D == 128) && c->layout != L_PADDED) {
            const int r32 = want_dec_rows(c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D) == 32;
            *mods = c->bias != BIAS_NONE || c->scale < 0.0f || c->softcap > 0.0f || c->alibi != ALIBI_NONE ? 4 : 0;
            return c->D == 64 ? (r32 ? FA__CU_DEC_TC_D64_R32 : FA__CU_DEC_TC_D64)
                              : (r32 ? FA__CU_DEC_TC_D128_R32 : FA__CU_DEC_TC_D128);
        }
        return dc <= 64 ? FA__CU_DEC_D64 : dc <= 128 ? FA__CU_DEC_D128 : FA__CU_DEC_D256;
    }
    if (dt != FA_F32) {
        if (c->D == Dv && (c->D == 64 || c->D == 128) && c->layout != L_PADDED) {
            const int sc = c->softcap > 0.0f, al = c->alibi != ALIBI_NONE;
            *mods = c->bias != BIAS_NONE || c->scale < 0.0f || (sc && al) ? 4 : sc ? 1 : al ? 2 : 0;
            if (g_hopper && c->Sk >= 1 && c->layout != L_KVB) return c->D == 64 ? FA__CU_WG_D64 : FA__CU_WG_D128;
            return c->D == 64 ? FA__CU_TC_D64 : FA__CU_TC_D128;
        }
        return generic;
    }
    if (c->layout == L_PADDED || c->D % 4 != 0 || Dv % 4 != 0) return generic;
    if (dc <= 64) {
        if ((bq == 0 && bk == 0) || (bq == 64 && bk != 32)) return FA__CU_F32_D64;
        if (bq == 64 && bk == 32) return FA__CU_F32_D64_Q64K32;
        if (bq == 128 && bk == 32) return FA__CU_F32_D64_Q128K32;
        if (bq == 128 && bk == 0) return FA__CU_F32_D64_Q128;
        return FA__CU_GENERIC_D64;
    }
    if (dc <= 128) {
        CU(cudaGetDevice(&dev));
        CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        if ((bq == 0 && bk == 0) || (bq == 64 && bk == 64)) return FA__CU_F32_D128;
        if (bq == 64) return FA__CU_F32_D128_Q64;
        if (bq == 128 && bk == 0 && optin >= (int)fa__cu_geom<fa__cu_f32_d128_q128>::SMEM) return FA__CU_F32_D128_Q128;
        return bk == 32 ? FA__CU_F32_D128_K32 : FA__CU_GENERIC_D128;
    }
    return generic;
}

/* test_lazy_rescale's inputs: key j's k row times 1 + ramp j / Sk, so that a row's max score grows
   along its keys (q k^T is N(0, 1) at the default scale before it); then q and k on multiples of
   1/16, as the large-logit cases in run_case, so that every fp32 dot product is exact (scores up to
   ~40 would otherwise carry fp32 rounding beyond the 1e-5 tolerance on the naive path as well). */
static void key_ramp(const fa_params *p, ref_tensors *t, float ramp)
{
    ref_dims rd;
    size_t e;
    int b, g, j, c;
    ref_dims_of(p, &rd);
    for (b = 0; b < (rd.ks[0] ? rd.B : 1); b++)   /* k shared by the batch (L_KVB): once */
        for (g = 0; g < rd.Hkv; g++)
            for (j = 0; j < rd.Sk; j++)
                for (c = 0; c < rd.D; c++) t->k[b * rd.ks[0] + g * rd.ks[1] + j * rd.ks[2] + c] *= 1.0f + ramp * (float)j / (float)rd.Sk;
    for (e = 0; e < t->nq; e++) t->q[e] = floorf(t->q[e] * 16.0f + 0.5f) / 16.0f;
    for (e = 0; e < t->nk; e++) t->k[e] = floorf(t->k[e] * 16.0f + 0.5f) / 16.0f;
}

/* What the ramp did to the rows (no modifier, causal or not): how far each row's max score (natural
   log units, the rounded inputs) rose above its max over keys 0-127 (the Hopper kernel's first key
   tile): counted into g_lazy_rows / far (> 2 FA__LAZY: the lazy
   reference moves at least twice) / near (<= FA__LAZY: after its first tile it never moves). */
static void lazy_growth(const fa_params *p, const ref_tensors *t)
{
    ref_dims rd;
    int b, h, i, j, e;
    ref_dims_of(p, &rd);
    for (b = 0; b < rd.B; b++)
        for (h = 0; h < rd.Hq; h++)
            for (i = 0; i < rd.Sq; i++) {
                const int g = h / (rd.Hq / rd.Hkv), hi = p->causal ? i + rd.Sk - rd.Sq + 1 : rd.Sk;
                double first = -INFINITY, all = -INFINITY;
                for (j = 0; j < hi && j < rd.Sk; j++) {
                    double x = 0.0;
                    for (e = 0; e < rd.D; e++)
                        x += (double)t->q[b * rd.qs[0] + h * rd.qs[1] + i * rd.qs[2] + e] *
                             t->k[b * rd.ks[0] + g * rd.ks[1] + j * rd.ks[2] + e];
                    x *= rd.scale;
                    if (j < 128 && x > first) first = x;
                    if (x > all) all = x;
                }
                if (hi < 1) continue;   /* a row without keys */
                g_lazy_rows++;
                g_lazy_far += all - first > 2.0 * FA__LAZY;
                g_lazy_near += all - first <= FA__LAZY;
            }
}

/* One case on one path and dtype; 1 if it passes (failures are printed). */
static int run_case(const tcase *c, int tiled, fa_dtype dt)
{
    fa_params p, pd;
    ref_rng r;
    ref_tensors t;
    ref_dims rd;
    char name[256];
    float *oref, *lref, *sref = NULL, *og, *ob, *lo, *so = NULL, *bias, *alibi;
    void *dq, *dk, *dv, *dout, *dbias = NULL, *dalibi = NULL;
    float *dlse, *dscores = NULL;
    unsigned char *raw;
    size_t nbias, nalibi, rows, nout, es = esize(dt), e;
    int ok = 1, b, h, i;
    fa_status st;

    snprintf(name, sizeof name, "%s [%s %s block_q=%d block_k=%d]", c->name, tiled ? "tiled" : "naive",
             dt_name(dt), g_block_q, g_block_k);
    make_params(c, &p);
    p.dtype = dt;
    ref_seed(&r, name_seed(c->name));
    assert_true(ref_tensors_make(&p, &r, &t));
    if (c->scale >= 4.0f) {
        /* large logits (a power-of-two scale >= 4): q and k on multiples of 1/16, so that every
           fp32 dot product is exact and what is tested is the softmax's handling of |s| > 100,
           not the fp32 rounding of a 200-sized logit (as the CPU suite does) */
        for (e = 0; e < t.nq; e++) t.q[e] = floorf(t.q[e] * 16.0f + 0.5f) / 16.0f;
        for (e = 0; e < t.nk; e++) t.k[e] = floorf(t.k[e] * 16.0f + 0.5f) / 16.0f;
    }
    if (g_key_ramp > 0.0f) key_ramp(&p, &t, g_key_ramp);
    ref_round_to(dt, t.q, t.nq);
    ref_round_to(dt, t.k, t.nk);
    ref_round_to(dt, t.v, t.nv);
    if (g_key_ramp > 0.0f && tiled && dt == FA_F16) lazy_growth(&p, &t);   /* once a case */
    bias = make_bias(c, &p, &r, &nbias);
    alibi = make_alibi(c, &p, &nalibi);
    p.bias = bias;
    p.alibi_slopes = alibi;
    ref_dims_of(&p, &rd);
    rows = (size_t)rd.B * rd.Hq * rd.Sq;
    nout = rows * rd.Dv;
    oref = ref_alloc(nout); lref = ref_alloc(rows); og = ref_alloc(nout); ob = ref_alloc(t.no); lo = ref_alloc(rows);
    raw = (unsigned char *)malloc(t.no * es + 1);
    assert_true(oref && lref && og && ob && lo && raw);
    if (!tiled) {
        sref = ref_alloc(rows * rd.Sk);
        so = ref_alloc(rows * rd.Sk);
        assert_true(sref && so);
    }
    assert_true(ref_attention(&p, t.q, t.k, t.v, oref, lref, sref));

    dq = upload(t.q, t.nq, dt); dk = upload(t.k, t.nk, dt); dv = upload(t.v, t.nv, dt);
    dout = dalloc(t.no * es);
    dlse = (float *)dalloc(rows * 4);
    if (!tiled) dscores = (float *)dalloc(rows * rd.Sk * 4);
    if (bias) dbias = upload(bias, nbias, FA_F32);
    if (alibi) dalibi = upload(alibi, nalibi, FA_F32);
    pd = p;
    pd.lse = dlse; pd.bias = (const float *)dbias; pd.alibi_slopes = (const float *)dalibi;
    pd.block_k = g_block_k;
    pd.block_q = g_block_q;
    if (tiled && p.seq_q > 0) {   /* the kernel that serves it is the one the rules name */
        fa__dims dd;
        fa__cu_plan plan;
        int want_mods;
        const fa__cu_kernel want = want_kernel(c, dt, &want_mods);
        assert_int_equal(fa__resolve(&pd, dq, dk, dv, dout, &dd, NULL), FA_OK);
        assert_int_equal(fa__cu_pick(&dd, dq, dk, dv, dout, &plan), FA_OK);
        force_dec_rows(&plan);
        if (plan.kernel != want || plan.mods != want_mods) {
            print_error("  FAIL %s: served by %s (variant %d), want %s (variant %d)\n", name,
                        fa__cu_kernel_name(plan.kernel), plan.mods, fa__cu_kernel_name(want), want_mods);
            ok = 0;
        }
        if (want == FA__CU_WG_D64 && strstr(c->name, "(192 rows)") && !(plan.kernel == FA__CU_WG_D64 && plan.bq == 192)) {
            print_error("  FAIL %s: served by %s with %d-row tiles, want the 192-row block\n", name,
                        fa__cu_kernel_name(plan.kernel), plan.bq);
            ok = 0;
        }
        g_served[plan.kernel][plan.mods]++;
        if (plan.kernel == FA__CU_WG_D64) g_wg64_rows[plan.bq == 192][plan.mods]++;
        if ((plan.kernel == FA__CU_WG_D64 || plan.kernel == FA__CU_WG_D128) && fa__cu_qblocks(&dd, plan.bq) > g_sms)
            g_wg_multi[plan.kernel == FA__CU_WG_D128][plan.mods]++;
        {   /* the public query says the same kernel */
            char line[400], kname[64];
            const int dec = want >= FA__CU_DEC_TC_D64 && want <= FA__CU_DEC_D256;
            fa_cuda_describe(&pd, dq, dk, dv, dout, line, sizeof line);
            snprintf(kname, sizeof kname, dec ? "kernel %s (" : "kernel %s,", fa__cu_kernel_name(want));
            if (!strstr(line, kname) && !g_dec_rows) {   /* describe names the picked block, not a forced one */
                print_error("  FAIL %s: fa_cuda_describe says \"%s\", want kernel %s\n", name, line, fa__cu_kernel_name(want));
                ok = 0;
            }
            if (dec != (strstr(line, "split-key decode") != NULL) || (dec && !strstr(line, "workspace"))) {
                print_error("  FAIL %s: fa_cuda_describe says \"%s\" (decode path: %d)\n", name, line, dec);
                ok = 0;
            }
        }
    }
    st = tiled ? tiled_run(&pd, dq, dk, dv, dout) : fa_cuda_naive(&pd, dq, dk, dv, dout, dscores);
    CU(cudaDeviceSynchronize());
    if (st != FA_OK) {
        print_error("  FAIL %s: status %d (%s)\n", name, (int)st, fa_status_string(st));
        ok = 0;
        goto done;
    }
    download(ob, dout, t.no, dt, raw);
    if (g_keep) {   /* o's bytes as stored and lse, for the caller's bitwise compare */
        free(g_kept_o); free(g_kept_l);
        g_kept_o = (unsigned char *)malloc(t.no * es + 1);
        g_kept_l = ref_alloc(rows);
        assert_true(g_kept_o && g_kept_l);
        memcpy(g_kept_o, raw, t.no * es);
        download(g_kept_l, dlse, rows, FA_F32, NULL);
        g_kept_no = t.no * es;
        g_kept_rows = rows;
    }
    /* the bytes between strided rows are untouched */
    {
        unsigned char *in_row = (unsigned char *)calloc(t.no + 1, 1);
        assert_non_null(in_row);
        for (b = 0; b < rd.B; b++)
            for (h = 0; h < rd.Hq; h++)
                for (i = 0; i < rd.Sq; i++)
                    memset(in_row + b * rd.os[0] + h * rd.os[1] + i * rd.os[2], 1, (size_t)rd.Dv);
        for (e = 0; e < t.no; e++)
            if (!in_row[e] && !ref_is_poison(raw + e * es, es)) {
                print_error("  FAIL %s: element %zu outside o's rows was written\n", name, e);
                ok = 0;
                break;
            }
        free(in_row);
    }
    /* o gathered packed; ref_gather_o works on fp32 buffers with p's strides */
    ref_gather_o(&p, ob, og);
    if (dt == FA_F32) {
        /* API.md's 1e-5 is for N(0, 1) inputs; test_lazy_rescale's ramp scales the scores by up to
           1 + ramp, and the fp32 rounding of an exp's argument (s log2 e, ~50 there) with them: the
           FFMA kernels' o moved 1.6-2.1e-5 on the H200 (2026-12-03), against O(1) for a wrong
           rescale */
        const double t32 = 1e-5 * (1.0 + g_key_ramp);
        ok &= close_or_report("o", name, og, oref, nout, t32, t32);
    } else {
        double rel = ref_rel_error(og, oref, nout), tol = dt == FA_F16 ? 1e-3 : 5e-3;
        if (!(rel <= tol)) {
            print_error("  FAIL %s o: relative error %g > %g\n", name, rel, tol);
            ok = 0;
        }
    }
    download(lo, dlse, rows, FA_F32, NULL);
    ok &= close_or_report("lse", name, lo, lref, rows, dt == FA_F32 ? 1e-5 : 1e-4, dt == FA_F32 ? 1e-5 : 1e-4);
    if (!tiled) {
        download(so, dscores, rows * rd.Sk, FA_F32, NULL);
        ok &= close_or_report("scores", name, so, sref, rows * rd.Sk, dt == FA_F32 ? 1e-5 : 1e-4,
                              dt == FA_F32 ? 1e-5 : 1e-4);
    }
done:
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(dlse);
    if (dscores) cudaFree(dscores);
    if (dbias) cudaFree(dbias);
    if (dalibi) cudaFree(dalibi);
    free(oref); free(lref); free(og); free(ob); free(lo); free(raw); free(sref); free(so); free(bias); free(alibi);
    ref_tensors_free(&t);
    if (ok && getenv("VERBOSE")) printf("  ok %s\n", name);
    return ok;
}

/* name, B, Hq, Hkv, Sq, Sk, D, Dv, causal, layout, scale, wl, wr, softcap, alibi, bias, small */
static const tcase g_shapes[] = {
    { "one", 1, 1, 0, 1, 1, 1, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d3 odd sizes", 2, 3, 0, 17, 33, 3, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d64 square", 1, 2, 0, 64, 64, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d64 gqa causal sq<sk", 2, 4, 2, 100, 129, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d80 mqa causal sq>sk", 1, 4, 1, 130, 70, 80, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d128 causal 1031", 1, 2, 0, 1031, 1031, 128, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "d128 gqa 257x1031", 1, 4, 2, 257, 1031, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "d256 517x1031", 1, 1, 0, 517, 1031, 256, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "d256 causal small", 1, 2, 1, 70, 45, 256, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d1 1031", 1, 1, 0, 1031, 300, 1, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "bshd gqa causal", 2, 6, 3, 129, 200, 64, 0, 1, L_BSHD, 0, 0, 0, 0, 0, 0, 1 },
    { "bshd d128", 2, 4, 4, 65, 130, 128, 0, 0, L_BSHD, 0, 0, 0, 0, 0, 0, 0 },
    { "padded rows", 2, 2, 1, 33, 77, 40, 24, 1, L_PADDED, 0, 0, 0, 0, 0, 0, 1 },
    { "dv>d", 1, 2, 1, 77, 91, 64, 128, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "dv<d", 1, 2, 2, 77, 91, 128, 64, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "d3 dv80", 2, 2, 1, 50, 61, 3, 80, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "scale 0.3", 1, 2, 0, 90, 90, 64, 0, 1, L_PACKED, 0.3f, 0, 0, 0, 0, 0, 0 },
    { "decode sq=1", 3, 8, 2, 1, 1031, 128, 0, 1, L_BSHD, 0, 0, 0, 0, 0, 0, 0 },
    { "sk=0", 2, 2, 0, 5, 0, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "sk=0 d128", 1, 2, 0, 40, 0, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d128 gqa causal ragged", 2, 4, 2, 200, 333, 128, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d128 causal sq>sk", 1, 2, 1, 300, 130, 128, 0, 1, L_BSHD, 0, 0, 0, 0, 0, 0, 1 },
    { "d128 mqa 3 stages", 1, 3, 1, 129, 700, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d128 window 100/20", 2, 2, 2, 400, 520, 128, 0, 0, L_PACKED, 0, 100, 20, 0, 0, 0, 1 },
    { "long rows sk=13000", 1, 2, 1, 3, 13000, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "d64 rows of 1500 keys", 1, 4, 2, 450, 1500, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "d64 causal 2100 bshd", 1, 2, 0, 2100, 2100, 64, 0, 1, L_BSHD, 0, 0, 0, 0, 0, 0, 0 },
    /* causal tiles that end at row Sq (8a's QE) on the 192-row block: its first tile partial, 128 rows
       before row 0; then rows without keys (sq>sk) and a window inside that tile too. "(192 rows)":
       run_case asserts the wide block served it (fa__wg_wide) */
    { "d64 causal 2176 (192 rows)", 1, 2, 1, 2176, 2176, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d64 causal sq>sk window 1100 (192 rows)", 1, 2, 2, 2300, 2200, 64, 0, 1, L_BSHD, 0, 1100, 0, 0, 0, 0, 0 },
    { "sq=0", 2, 2, 0, 0, 9, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    /* more query tiles than an H200 has SMs (132): the Hopper kernel's persistent blocks walk several,
       some with no key at all (causal sq>sk) */
    { "d128 causal sq>sk 288 tiles", 3, 8, 2, 1500, 300, 128, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "d64 causal sq>sk 288 tiles", 3, 8, 2, 1500, 300, 64, 0, 1, L_BSHD, 0, 0, 0, 0, 0, 0, 1 },
    { "d64 1030 keys 140 tiles", 7, 20, 5, 24, 1030, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "d64 causal 1400 keys 140 tiles", 7, 20, 4, 24, 1400, 64, 0, 1, L_BSHD, 0, 0, 0, 0, 0, 0, 0 },
    { "d128 gqa 144 tiles", 1, 16, 4, 1060, 140, 128, 0, 0, L_BSHD, 0, 0, 0, 0, 0, 0, 0 },
};

/* |s| > 100: fp32 only (at half precision such scores are not what the tolerance is about) */
static const tcase g_large_scores[] = {
    { "|s|>100 d64", 1, 2, 0, 130, 140, 64, 0, 0, L_PACKED, 8.0f, 0, 0, 0, 0, 0, 1 },
    { "|s|>100 d128 causal", 1, 2, 0, 200, 300, 128, 0, 1, L_PACKED, 8.0f, 0, 0, 0, 0, 0, 0 },
    { "|s|>100 d80 gqa", 2, 4, 2, 77, 150, 80, 0, 0, L_BSHD, 16.0f, 0, 0, 0, 0, 0, 0 },
};

static const tcase g_mods[] = {
    { "window 1", 2, 4, 2, 97, 203, 64, 0, 1, L_PACKED, 0, 1, 0, 0, 0, 0, 1 },
    { "window 37 both", 2, 4, 2, 97, 203, 64, 0, 0, L_PACKED, 0, 37, 37, 0, 0, 0, 1 },
    { "window 37 causal", 1, 2, 0, 300, 300, 64, 0, 1, L_PACKED, 0, 37, 0, 0, 0, 0, 0 },
    { "window > S", 1, 2, 0, 97, 203, 64, 0, 0, L_PACKED, 0, 5000, 5000, 0, 0, 0, 1 },
    { "window right only", 1, 2, 0, 97, 203, 64, 0, 0, L_PACKED, 0, 0, 13, 0, 0, 0, 1 },
    { "window left only long", 1, 2, 1, 600, 1031, 128, 0, 0, L_PACKED, 0, 200, 0, 0, 0, 0, 0 },
    { "softcap 1.5", 2, 2, 0, 97, 150, 64, 0, 1, L_PACKED, 0, 0, 0, 1.5f, 0, 0, 1 },
    { "softcap 30", 2, 2, 0, 97, 150, 128, 0, 0, L_PACKED, 4.0f, 0, 0, 30.0f, 0, 0, 0 },
    { "alibi per head", 2, 4, 2, 97, 150, 64, 0, 1, L_PACKED, 0, 0, 0, 0, ALIBI_HEAD, 0, 1 },
    { "alibi per batch", 3, 4, 0, 60, 150, 64, 0, 0, L_PACKED, 0, 0, 0, 0, ALIBI_BATCH, 0, 0 },
    { "bias full", 2, 3, 0, 70, 150, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_FULL, 1 },
    { "bias key padding", 3, 2, 0, 70, 150, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_KEYPAD, 1 },
    { "bias shared", 2, 2, 0, 70, 150, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, BIAS_SHARED, 0 },
    { "bias strided", 2, 3, 0, 70, 150, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_STRIDED, 0 },
    { "bias per head", 2, 3, 0, 70, 150, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_PER_HEAD, 0 },
    { "bias hides rows", 2, 2, 0, 70, 150, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_HIDE_ROWS, 1 },
    { "bias hides tiles", 1, 2, 0, 150, 300, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_HIDE_TILES, 1 },
    { "bias hides tiles d128", 1, 2, 0, 150, 300, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_HIDE_TILES, 0 },
    { "all together", 2, 4, 2, 97, 203, 64, 0, 1, L_BSHD, 0, 40, 0, 10.0f, ALIBI_BATCH, BIAS_FULL, 1 },
    { "all together sq>sk", 2, 4, 1, 203, 97, 80, 48, 1, L_BSHD, 0.2f, 17, 3, 5.0f, ALIBI_HEAD, BIAS_KEYPAD, 0 },
    { "all together d128", 1, 4, 2, 300, 1031, 128, 0, 1, L_BSHD, 0, 256, 0, 30.0f, ALIBI_HEAD, BIAS_SHARED, 0 },
    { "alibi d128 causal", 1, 4, 2, 200, 333, 128, 0, 1, L_PACKED, 0, 0, 0, 0, ALIBI_HEAD, 0, 0 },
    { "softcap d64 1200 keys", 1, 2, 0, 300, 1200, 64, 0, 0, L_PACKED, 0, 0, 0, 20.0f, 0, 0, 0 },
    { "alibi d64 causal 1500 keys", 1, 4, 2, 400, 1500, 64, 0, 1, L_PACKED, 0, 0, 0, 0, ALIBI_HEAD, 0, 0 },
    /* k/v broadcast over the batch: the mma.sync kernel's variants 1, 2, 4 on a Hopper too */
    { "alibi kv-broadcast causal", 2, 4, 2, 150, 333, 64, 0, 1, L_KVB, 0, 0, 0, 0, ALIBI_HEAD, 0, 1 },
    { "alibi kv-broadcast d128", 2, 4, 2, 200, 200, 128, 0, 0, L_KVB, 0, 0, 0, 0, ALIBI_BATCH, 0, 0 },
    { "alibi kv-broadcast d128 causal", 2, 2, 1, 300, 300, 128, 0, 1, L_KVB, 0, 0, 0, 0, ALIBI_HEAD, 0, 0 },
    { "softcap kv-broadcast d128", 2, 2, 0, 97, 150, 128, 0, 1, L_KVB, 0, 0, 0, 20.0f, 0, 0, 1 },
    { "all together kv-broadcast", 2, 4, 2, 97, 203, 64, 0, 1, L_KVB, 0, 40, 0, 10.0f, ALIBI_BATCH, BIAS_FULL, 0 },
    { "all together kv-broadcast d128", 2, 4, 2, 130, 260, 128, 0, 1, L_KVB, 0, 100, 0, 15.0f, ALIBI_HEAD, BIAS_KEYPAD, 0 },
    { "softcap kv-broadcast d64", 2, 4, 1, 120, 170, 64, 0, 0, L_KVB, 0, 0, 0, 5.0f, 0, 0, 0 },
    { "plain kv-broadcast d64", 2, 4, 2, 100, 129, 64, 0, 1, L_KVB, 0, 0, 0, 0, 0, 0, 0 },
    /* more query tiles than SMs (the Hopper kernel's persistent blocks), each variant */
    { "softcap d128 144 tiles", 2, 8, 2, 1100, 200, 128, 0, 1, L_PACKED, 0, 0, 0, 20.0f, 0, 0, 1 },
    { "alibi d128 causal sq>sk 192 tiles", 3, 8, 2, 900, 400, 128, 0, 1, L_PACKED, 0, 0, 0, 0, ALIBI_HEAD, 0, 0 },
    { "bias d128 144 tiles", 2, 8, 0, 1100, 150, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_KEYPAD, 0 },
    { "softcap d64 1100 keys 140 tiles", 7, 20, 10, 24, 1100, 64, 0, 0, L_PACKED, 0, 0, 0, 15.0f, 0, 0, 0 },
    { "alibi d64 144 tiles", 2, 8, 2, 1100, 250, 64, 0, 1, L_PACKED, 0, 0, 0, 0, ALIBI_BATCH, 0, 0 },
    { "bias d64 144 tiles", 2, 8, 0, 1100, 150, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, BIAS_FULL, 1 },
    { "plain kv-broadcast d128", 2, 2, 2, 140, 140, 128, 0, 0, L_KVB, 0, 0, 0, 0, 0, 0, 0 },
};

/* The split-key decode path (8d2): few query rows per (batch, kv head), Sk from 1 to 200000 (1 to
   196 chunks, ragged ends), GQA and MQA, Sq 1..16 with causal (bottom-right; Sq > Sk gives
   empty rows), windows that leave most chunks empty, every modifier, strides, Dv != D, odd dims. */
static const tcase g_decode[] = {
    { "dec mqa sk=1", 1, 4, 1, 1, 1, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "dec sk=7 d128", 2, 8, 2, 1, 7, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "dec gqa 32/8 sk=1000", 2, 32, 8, 1, 1000, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "dec sq=4 causal sk=3001", 2, 8, 2, 4, 3001, 128, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "dec sq=8 causal mqa 4 blocks", 1, 8, 1, 8, 2049, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec sq=16 mha causal", 1, 2, 2, 16, 777, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec sk=131072 gqa", 1, 8, 2, 1, 131072, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec sk=200000 mqa group 2 (196 chunks)", 1, 2, 1, 1, 200000, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec sk=40001 sq=2 causal mqa", 1, 4, 1, 2, 40001, 128, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec sk=65536 mqa group 16", 1, 16, 1, 1, 65536, 64, 0, 0, L_BSHD, 0, 0, 0, 0, 0, 0, 0 },
    { "dec mqa group 32", 1, 32, 1, 1, 4100, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec mqa group 24 softcap alibi causal", 2, 24, 1, 1, 3000, 128, 0, 1, L_PACKED, 0, 0, 0, 20.0f, ALIBI_HEAD, 0, 1 },
    { "dec gqa 8 sq=3 bias window d64 bshd", 1, 16, 2, 3, 2500, 64, 0, 1, L_BSHD, 0, 300, 0, 0, 0, BIAS_PER_HEAD, 1 },
    { "dec causal sq>sk (empty rows)", 1, 4, 2, 8, 5, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "dec window 37 causal", 1, 8, 2, 1, 5000, 128, 0, 1, L_PACKED, 0, 37, 0, 0, 0, 0, 1 },
    { "dec window 100/50 sq=4", 1, 4, 2, 4, 3000, 64, 0, 0, L_PACKED, 0, 100, 50, 0, 0, 0, 0 },
    { "dec softcap 30", 1, 8, 2, 1, 2000, 128, 0, 0, L_PACKED, 4.0f, 0, 0, 30.0f, 0, 0, 1 },
    { "dec alibi per batch causal", 2, 8, 2, 2, 1500, 64, 0, 1, L_PACKED, 0, 0, 0, 0, ALIBI_BATCH, 0, 0 },
    { "dec bias full", 2, 4, 2, 3, 1100, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_FULL, 1 },
    { "dec bias key padding", 3, 4, 1, 1, 1100, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_KEYPAD, 0 },
    { "dec bias hides rows", 2, 4, 2, 5, 600, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_HIDE_ROWS, 1 },
    { "dec all together bshd", 2, 8, 2, 4, 2500, 128, 0, 1, L_BSHD, 0, 700, 0, 10.0f, ALIBI_HEAD, BIAS_PER_HEAD, 1 },
    { "dec padded d80 dv48 causal", 2, 4, 2, 3, 1500, 80, 48, 1, L_PADDED, 0, 0, 0, 0, 0, 0, 1 },
    { "dec d256", 1, 2, 1, 2, 1300, 256, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec d64 dv128", 1, 4, 2, 1, 900, 64, 128, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec negative scale", 1, 4, 2, 1, 700, 64, 0, 0, L_PACKED, -0.2f, 0, 0, 0, 0, 0, 1 },
    { "dec d3 dv5", 2, 3, 1, 2, 333, 3, 5, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    /* blocks of 32 packed rows (group * Sq > 16: dec_tc_*_r32): MQA/GQA groups of 17 .. 64 rows,
       padding rows, two row blocks, every mask and modifier, the bench's MQA shapes */
    { "dec r32 mqa group 32 sk=32768", 2, 32, 1, 1, 32768, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec r32 mqa group 32 sk=131073", 1, 32, 1, 1, 131073, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "dec r32 group 32 sq=2 causal d64 (two row blocks)", 2, 32, 1, 2, 5001, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "dec r32 group 20 window bshd (padding rows)", 2, 40, 2, 1, 3333, 128, 0, 1, L_BSHD, 0, 500, 0, 0, 0, 0, 1 },
    { "dec r32 group 8 sq=5 window both d128", 1, 16, 2, 5, 2100, 128, 0, 0, L_PACKED, 0, 300, 40, 0, 0, 0, 0 },
    { "dec r32 group 32 bias key padding", 2, 32, 1, 1, 1500, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, BIAS_KEYPAD, 0 },
    { "dec r32 group 16 sq=4 all together d128", 1, 32, 2, 4, 2500, 128, 0, 1, L_BSHD, 0, 700, 0, 10.0f, ALIBI_HEAD, BIAS_PER_HEAD, 1 },
    { "dec r32 group 32 negative scale d64", 1, 32, 1, 1, 900, 64, 0, 0, L_PACKED, -0.2f, 0, 0, 0, 0, 0, 0 },
    { "dec r32 group 32 alibi per batch d64 sk=1", 2, 32, 1, 1, 1, 64, 0, 0, L_PACKED, 0, 0, 0, 0, ALIBI_BATCH, 0, 1 },
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void run_list(const tcase *cs, size_t n, const fa_dtype *dts, int ndt, int block_k)
{
    size_t i;
    int f = 0, k, path, total = 0;
    const char *only = getenv("FA_CASE");   /* FA_CASE=TEXT: the cases whose names hold TEXT (sanitizer runs) */
    g_block_k = block_k;
    for (i = 0; i < n; i++) {
        if (g_small && !cs[i].small) continue;
        if (only && !strstr(cs[i].name, only)) continue;
        for (k = 0; k < ndt; k++)
            for (path = g_tiled_only; path < 2; path++) {
                total++;
                f += !run_case(&cs[i], path, dts[k]);
            }
    }
    if (f) print_error("%d of %d runs failed\n", f, total);
    assert_int_equal(f, 0);
}

static const fa_dtype k_f32[] = { FA_F32 };
static const fa_dtype k_half[] = { FA_F16, FA_BF16 };

static void test_shapes_fp32(void **state) { (void)state; run_list(g_shapes, COUNT(g_shapes), k_f32, 1, 0); }
static void test_shapes_half(void **state) { (void)state; run_list(g_shapes, COUNT(g_shapes), k_half, 2, 0); }
static void test_large_scores(void **state) { (void)state; run_list(g_large_scores, COUNT(g_large_scores), k_f32, 1, 0); }
static void test_modifiers_fp32(void **state) { (void)state; run_list(g_mods, COUNT(g_mods), k_f32, 1, 0); }
/* the fp32 kernels that are not the default for aligned rows: block_k = 64 (single-buffered
   8 x 4) and block_k = 32 (double-buffered 8 x 2 at D <= 128) */
static void test_fp32_other_kernels(void **state)
{
    int bk;
    (void)state;
    for (bk = 32; bk <= 64; bk += 32) {
        run_list(g_shapes, COUNT(g_shapes), k_f32, 1, bk);
        run_list(g_mods, COUNT(g_mods), k_f32, 1, bk);
        run_list(g_large_scores, COUNT(g_large_scores), k_f32, 1, bk);
    }
}
/* the aligned-fp32 kernels that block_q selects (fa__cu_pick): D <= 64: (64,0) (64,32)
   (128,32) (128,0); D <= 128: (64,0) (64,64) (128,0); (128,32) and (64,64) at D <= 64 fall back to
   the other kernels (covered here too) */
static void test_fp32_multiblock_kernels(void **state)
{
    static const int qk[][2] = { { 64, 0 }, { 64, 32 }, { 64, 64 }, { 128, 32 }, { 128, 0 } };
    size_t i;
    (void)state;
    g_tiled_only = 1;
    for (i = 0; i < COUNT(qk); i++) {
        if (g_small && qk[i][0] == 64 && qk[i][1] == 64) continue;   /* the defaults' kernels (sanitizers) */
        g_block_q = qk[i][0];
        run_list(g_shapes, COUNT(g_shapes), k_f32, 1, qk[i][1]);
        if (g_small) continue;                                      /* shapes only under the sanitizers */
        run_list(g_mods, COUNT(g_mods), k_f32, 1, qk[i][1]);
        run_list(g_large_scores, COUNT(g_large_scores), k_f32, 1, qk[i][1]);
    }
    g_block_q = 0;
    g_tiled_only = 0;
}
static void test_modifiers_half(void **state) { (void)state; run_list(g_mods, COUNT(g_mods), k_half, 2, 0); }

/* ---- the split-key decode path (8d2) -------------------------------------------------------------- */

static const fa_dtype k_all[] = { FA_F32, FA_F16, FA_BF16 };

static void test_decode(void **state)
{
    (void)state;
    g_tiled_only = 1;   /* the decode path is fa_cuda_tiled's */
    run_list(g_decode, COUNT(g_decode), k_all, 3, 0);
    g_tiled_only = 0;
}

/* One decode case (fp16 or bf16) in blocks of 16 and of 32 packed rows, each against float64
   (run_case), then o and lse compared bitwise; the failures (0 when all passed). */
static int dec_rows_pair(const tcase *c, fa_dtype dt)
{
    unsigned char *o16;
    float *l16;
    int f = 0;
    g_keep = 1;
    g_dec_rows = 16;
    f += !run_case(c, 1, dt);
    o16 = g_kept_o; l16 = g_kept_l;
    g_kept_o = NULL; g_kept_l = NULL;
    g_dec_rows = 32;
    f += !run_case(c, 1, dt);
    g_dec_rows = 0;
    if (!o16 || !g_kept_o || memcmp(o16, g_kept_o, g_kept_no) || memcmp(l16, g_kept_l, g_kept_rows * 4)) {
        print_error("  FAIL %s %s: o or lse differs in blocks of 16 and of 32 packed rows\n", c->name, dt_name(dt));
        f++;
    }
    free(o16); free(l16);
    free(g_kept_o); free(g_kept_l);
    g_kept_o = NULL; g_kept_l = NULL;
    g_keep = 0;
    return f;
}

/* The tensor-core decode kernel in blocks of 16 and of 32 packed rows gives bitwise the same o and
   lse (and both meet the float64 reference in run_case), on every decode shape with more than 16
   packed rows a kv head, fp16 and bf16: what lets fa__cu_dec_pick choose the block by the grid's
   waves (B and the device) without breaking batch invariance. */
static void test_decode_rows(void **state)
{
    size_t i;
    int k, f = 0, n = 0;
    (void)state;
    g_tiled_only = 1;
    for (i = 0; i < COUNT(g_decode); i++) {
        const tcase *c = &g_decode[i];
        const int Dv = c->Dv ? c->Dv : c->D, hkv = c->Hkv ? c->Hkv : c->Hq;
        if ((g_small && !c->small) || c->Hq / hkv * c->Sq <= 16 || c->D != Dv || (c->D != 64 && c->D != 128) ||
            c->layout == L_PADDED)
            continue;
        for (k = 0; k < 2; k++) {
            f += dec_rows_pair(c, k_half[k]);
            n++;
        }
    }
    g_tiled_only = 0;
    if (f) print_error("%d failures in %d shape-dtype pairs\n", f, n);
    assert_true(n >= (g_small ? 2 : 8));
    assert_int_equal(f, 0);
}

/* The lazy rescale (section 1's fa__lazy_moves in 8d's fa__tc_softmax): keys scaled up along the
   sequence (key_ramp), so that a row's max rises over its keys, by more than 2 FA__LAZY in many rows
   with ramp 12 (the reference moves several times, P reaches e^FA__LAZY between moves) and by at
   most FA__LAZY in most rows with ramp 1.5 (it stays at the first tile's max); fp32, fp16, bf16,
   D = 64 and 128, causal and not, both paths against float64. fp16/bf16 prefill runs on the Hopper
   kernel there (both D = 64 blocks), k and v broadcast (L_KVB) on the mma.sync one, the decode shape
   (32 packed rows a kv head) on the tensor-core decode kernel, also in blocks of 16 and of 32 rows
   compared bitwise (dec_rows_pair); each run_case asserts the kernel that served it. */
/* name, B, Hq, Hkv, Sq, Sk, D, Dv, causal, layout, scale, wl, wr, softcap, alibi, bias, small */
static const tcase g_lazy[] = {
    { "lazy d128 200x1500", 1, 2, 1, 200, 1500, 128, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "lazy d128 causal 900", 1, 2, 1, 900, 900, 128, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "lazy d64 200x1500 (192-row block)", 1, 2, 1, 200, 1500, 64, 0, 0, L_PACKED, 0, 0, 0, 0, 0, 0, 0 },
    { "lazy d64 causal 700", 1, 2, 1, 700, 700, 64, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 },
    { "lazy d64 causal kv broadcast", 2, 2, 1, 150, 900, 64, 0, 1, L_KVB, 0, 0, 0, 0, 0, 0, 0 },
    { "lazy d128 kv broadcast", 2, 2, 2, 100, 700, 128, 0, 0, L_KVB, 0, 0, 0, 0, 0, 0, 0 },
};
static const tcase g_lazy_dec = { "lazy dec r32 sq=4 causal", 2, 16, 2, 4, 3001, 128, 0, 1, L_PACKED, 0, 0, 0, 0, 0, 0, 1 };

static void test_lazy_rescale(void **state)
{
    static const float ramps[2] = { 12.0f, 1.5f };
    int k, i, d, path, f = 0, n = 0, far[2], near[2], rows[2];
    (void)state;
    for (k = 0; k < 2; k++) {   /* no assertion while g_key_ramp is set: the tests after this one use plain inputs */
        g_key_ramp = ramps[k];
        g_lazy_rows = g_lazy_far = g_lazy_near = 0;
        for (i = 0; i < (int)COUNT(g_lazy); i++)
            if (!g_small || g_lazy[i].small)
                for (d = 0; d < 3; d++)
                    for (path = 0; path < 2; path++, n++) f += !run_case(&g_lazy[i], path, k_all[d]);
        for (d = 0; d < 3; d++, n++) f += !run_case(&g_lazy_dec, 1, k_all[d]);
        f += dec_rows_pair(&g_lazy_dec, FA_F16) + dec_rows_pair(&g_lazy_dec, FA_BF16);
        n += 2;
        rows[k] = g_lazy_rows; far[k] = g_lazy_far; near[k] = g_lazy_near;
        g_key_ramp = 0.0f;
        printf("  ramp %g: %d rows, max rising > 2 FA__LAZY in %d, <= FA__LAZY in %d\n", (double)ramps[k], rows[k],
               far[k], near[k]);
    }
    if (f) print_error("%d of %d runs failed\n", f, n);
    assert_int_equal(f, 0);
    /* the inputs do what the cases are for */
    assert_true(far[0] * 2 > rows[0]);
    assert_true(near[1] * 10 > rows[1] * 9);
}

/* Batch invariance: one sequence decoded alone (B = 1) and as batch element 37 of B = 64 gives
   bitwise the same o and lse (memcmp), per dtype, for GQA 8/2 at Sq = 1 and Sq = 4 causal (blocks
   of 16 packed rows) and MQA 32/1 at Sq = 1 (the batch's grid takes blocks of 32, the _r32 kernels,
   and the sequence alone blocks of 16). */
static void test_decode_batch_invariance(void **state)
{
    enum { BB = 64, PICK = 37 };
    static const int shapes[3][3] = { { 8, 2, 1 }, { 8, 2, 4 }, { 32, 1, 1 } };   /* H, HKV, Sq */
    /* three and four chunks of 1024 (MQA at D = 128: 64 x 2 x 4 16-row blocks pass a wave of 3 an SM) */
    const int D = g_small ? 64 : 128, SK = g_small ? 2100 : 4001;
    int k, si;
    (void)state;
    for (k = 0; k < 3; k++)
        for (si = 0; si < 3; si++) {
            const int H = shapes[si][0], HKV = shapes[si][1], sq = shapes[si][2];
            const int r32 = want_dec_rows(BB, H, HKV, sq, SK, D) == 32;
            const int r32_1 = want_dec_rows(1, H, HKV, sq, SK, D) == 32;
            const fa_dtype dt = k_all[k];
            const size_t es = esize(dt), nq = (size_t)BB * H * sq * D, nk = (size_t)BB * HKV * SK * D;
            const size_t q1 = (size_t)H * sq * D, k1 = (size_t)HKV * SK * D, rows1 = (size_t)H * sq;
            fa_params p, p1;
            fa__dims dd;
            fa__cu_plan plan;
            ref_rng r;
            float *hq = ref_alloc(nq), *hk = ref_alloc(nk), *hv = ref_alloc(nk);
            unsigned char *oa, *ob, *la, *lb;
            void *dq, *dk, *dv, *dout, *dout1;
            float *dlse, *dlse1;
            assert_true(hq && hk && hv);
            ref_seed(&r, 4242 + 17 * (uint64_t)k + (uint64_t)sq + 1000 * (uint64_t)(si / 2));
            ref_fill_normal(&r, hq, nq); ref_fill_normal(&r, hk, nk); ref_fill_normal(&r, hv, nk);
            dq = upload(hq, nq, dt); dk = upload(hk, nk, dt); dv = upload(hv, nk, dt);
            dout = dalloc(nq * es); dout1 = dalloc(q1 * es);
            dlse = (float *)dalloc((size_t)BB * rows1 * 4); dlse1 = (float *)dalloc(rows1 * 4);
            memset(&p, 0, sizeof p);
            p.batch = BB; p.heads = H; p.kv_heads = HKV; p.seq_q = sq; p.seq_k = SK; p.head_dim = D;
            p.dtype = dt; p.causal = sq > 1; p.lse = dlse;
            p1 = p; p1.batch = 1; p1.lse = dlse1;
            assert_int_equal(fa__resolve(&p, dq, dk, dv, dout, &dd, NULL), FA_OK);
            assert_int_equal(fa__cu_pick(&dd, dq, dk, dv, dout, &plan), FA_OK);
            assert_true(plan.kernel == (dt == FA_F32 ? (D == 64 ? FA__CU_DEC_D64 : FA__CU_DEC_D128)
                                        : r32 ? (D == 64 ? FA__CU_DEC_TC_D64_R32 : FA__CU_DEC_TC_D128_R32)
                                              : (D == 64 ? FA__CU_DEC_TC_D64 : FA__CU_DEC_TC_D128)));
            assert_true(plan.chunks > 1);
            /* MQA: the batch in 32-row blocks, the sequence alone in 16-row ones (on a device of up to
               BB * 2 * chunks / MINB SMs): the bits must not depend on the block either */
            if (si == 2 && dt != FA_F32) {
                const int64_t minb = D == 64 ? (int64_t)fa__dec_d64::MINB : (int64_t)fa__dec_d128::MINB;
                int dev = 0, sms = 0;
                CU(cudaGetDevice(&dev));
                CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
                assert_true(r32_1 == 0);
                assert_true(r32 || (int64_t)BB * 2 * plan.chunks <= minb * sms);
            }
            assert_int_equal(fa_cuda_tiled(&p, dq, dk, dv, dout), FA_OK);
            assert_int_equal(fa_cuda_tiled(&p1, (char *)dq + PICK * q1 * es, (char *)dk + PICK * k1 * es,
                                           (char *)dv + PICK * k1 * es, dout1), FA_OK);
            CU(cudaDeviceSynchronize());
            oa = (unsigned char *)malloc(q1 * es); ob = (unsigned char *)malloc(q1 * es);
            la = (unsigned char *)malloc(rows1 * 4); lb = (unsigned char *)malloc(rows1 * 4);
            assert_true(oa && ob && la && lb);
            CU(cudaMemcpy(oa, (char *)dout + PICK * q1 * es, q1 * es, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(ob, dout1, q1 * es, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(la, dlse + PICK * rows1, rows1 * 4, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(lb, dlse1, rows1 * 4, cudaMemcpyDeviceToHost));
            if (memcmp(oa, ob, q1 * es) || memcmp(la, lb, rows1 * 4))
                print_error("  FAIL batch invariance %s H=%d HKV=%d sq=%d: o or lse differs alone and in a batch of %d\n",
                            dt_name(dt), H, HKV, sq, BB);
            assert_true(memcmp(oa, ob, q1 * es) == 0);
            assert_true(memcmp(la, lb, rows1 * 4) == 0);
            assert_false(ref_is_poison(ob, q1 * es));
            free(oa); free(ob); free(la); free(lb);
            cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(dout1); cudaFree(dlse); cudaFree(dlse1);
            free(hq); free(hk); free(hv);
        }
}

/* Spins ~`cycles`, then copies n bytes (a kernel that writes a call's input just before the call) */
static __global__ void spin_copy_kernel(long long cycles, unsigned char *dst, const unsigned char *src, size_t n)
{
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) dst[e] = src[e];
}

/* The decode path's launches (8f's fa__dec_run), under every FA__CU_DEC_PDL setting (fa__cu_dec_pdl:
   the merge and/or the split kernel launched with the programmatic-dependent-launch attribute on a
   compute capability 9.0+ device; 0..3 forced, then the library's choice) and per dtype (fp32 on the FFMA kernel, fp16/bf16 on the
   tensor-core one; the kernel asserted): on a stream of its own, query A written by a kernel queued
   just before the first call (after a spin), then NC calls back to back alternating queries A and
   B into NC outputs (each call's workspace is freed while the next call is queued, and the pool
   may hand the next call the same memory: its split kernel must not write it before the merge
   before it has read it). Every output of A bitwise equal to the first (o and lse), every one of B
   likewise, A against float64 (API.md's tolerances), A and B different, and every setting's bits
   the same (the settings change no arithmetic). Then a cudaDeviceReset, which forgets the
   kernels' attributes that fa__cu_kern_attrs sets once per device: the next call must set them
   again (68 KB of shared memory at D = 128) and give the same bits. */
static void test_decode_launch(void **state)
{
    enum { B = 2, H = 8, HKV = 2, D = 128, NC = 6 };
    const int SK = g_small ? 3000 : 20000;
    unsigned char *first[3] = { NULL, NULL, NULL };   /* per dtype: o of A (setting 0), for the reset */
    int k, set;
    (void)state;
    for (k = 0; k < 3; k++) {
        const fa_dtype dt = k_all[k];
        const size_t es = esize(dt), nq = (size_t)B * H * D, nk = (size_t)B * HKV * SK * D, rows = (size_t)B * H;
        fa_params p;
        fa__dims dd;
        fa__cu_plan plan;
        ref_rng r;
        ref_tensors t;
        float *qb = ref_alloc(nq), *oref = ref_alloc(nq), *lref = ref_alloc(rows), *og = ref_alloc(nq);
        unsigned char *ref_o[2] = { NULL, NULL }, *ref_l[2] = { NULL, NULL }, *ho, *hl;
        void *dqa, *dqb, *dstage, *dk, *dv, *dout[NC];
        float *dlse[NC];
        cudaStream_t s;
        int c;
        memset(&p, 0, sizeof p);
        p.batch = B; p.heads = H; p.kv_heads = HKV; p.seq_q = 1; p.seq_k = SK; p.head_dim = D; p.dtype = dt;
        ref_seed(&r, 515 + (uint64_t)k);
        assert_true(ref_tensors_make(&p, &r, &t));
        assert_true(qb && oref && lref && og);
        ref_fill_normal(&r, qb, nq);
        ref_round_to(dt, t.q, nq); ref_round_to(dt, qb, nq);
        ref_round_to(dt, t.k, nk); ref_round_to(dt, t.v, nk);
        assert_true(ref_attention(&p, t.q, t.k, t.v, oref, lref, NULL));
        dstage = upload(t.q, nq, dt); dqb = upload(qb, nq, dt);
        dk = upload(t.k, nk, dt); dv = upload(t.v, nk, dt);
        dqa = dalloc(nq * es);
        for (c = 0; c < NC; c++) { dout[c] = dalloc(nq * es); dlse[c] = (float *)dalloc(rows * 4); }
        ho = (unsigned char *)malloc(nq * es); hl = (unsigned char *)malloc(rows * 4);
        assert_true(ho && hl);
        assert_int_equal(fa__resolve(&p, dqa, dk, dv, dout[0], &dd, NULL), FA_OK);
        assert_int_equal(fa__cu_pick(&dd, dqa, dk, dv, dout[0], &plan), FA_OK);
        assert_int_equal(plan.kernel, dt == FA_F32 ? FA__CU_DEC_D128 : FA__CU_DEC_TC_D128);
        assert_true(plan.chunks > 1);
        g_served[plan.kernel][plan.mods]++;
        CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        for (set = 0; set < 5; set++) {   /* settings 0..3, then the library's (-1) */
            fa__cu_dec_pdl = set < 4 ? set : -1;
            CU(cudaMemset(dqa, 0xFF, nq * es));
            for (c = 0; c < NC; c++) CU(cudaMemset(dout[c], 0xFF, nq * es));
            CU(cudaDeviceSynchronize());
            spin_copy_kernel<<<8, 256, 0, s>>>(g_small ? 100000LL : 20000000LL, (unsigned char *)dqa,
                                                (const unsigned char *)dstage, nq * es);
            CU(cudaGetLastError());
            for (c = 0; c < NC; c++) {
                fa_params pc = p;
                pc.stream = (void *)s;
                pc.lse = dlse[c];
                assert_int_equal(fa_cuda_tiled(&pc, c % 2 ? dqb : dqa, dk, dv, dout[c]), FA_OK);
            }
            CU(cudaStreamSynchronize(s));
            for (c = 0; c < NC; c++) {
                const int w = c % 2;
                CU(cudaMemcpy(ho, dout[c], nq * es, cudaMemcpyDeviceToHost));
                CU(cudaMemcpy(hl, dlse[c], rows * 4, cudaMemcpyDeviceToHost));
                if (!ref_o[w]) {   /* setting 0's first call of each query: the bits every other call must give */
                    ref_o[w] = (unsigned char *)malloc(nq * es); ref_l[w] = (unsigned char *)malloc(rows * 4);
                    assert_true(ref_o[w] && ref_l[w]);
                    memcpy(ref_o[w], ho, nq * es); memcpy(ref_l[w], hl, rows * 4);
                    continue;
                }
                if (memcmp(ho, ref_o[w], nq * es) || memcmp(hl, ref_l[w], rows * 4))
                    print_error("  FAIL decode launch %s setting %d call %d: o or lse differs from query %c's first call\n",
                                dt_name(dt), set, c, w ? 'B' : 'A');
                assert_true(memcmp(ho, ref_o[w], nq * es) == 0);
                assert_true(memcmp(hl, ref_l[w], rows * 4) == 0);
            }
        }
        fa__cu_dec_pdl = -1;
        /* A against float64; A and B differ (each call read its own q) */
        download(og, dout[0], nq, dt, NULL);
        if (dt == FA_F32) {
            assert_true(close_or_report("o", "decode launch f32", og, oref, nq, 1e-5, 1e-5));
        } else {
            const double rel = ref_rel_error(og, oref, nq), tol = dt == FA_F16 ? 1e-3 : 5e-3;
            if (!(rel <= tol)) print_error("  FAIL decode launch %s o: relative error %g > %g\n", dt_name(dt), rel, tol);
            assert_true(rel <= tol);
        }
        download(og, dlse[0], rows, FA_F32, NULL);
        assert_true(close_or_report("lse", "decode launch", og, lref, rows, dt == FA_F32 ? 1e-5 : 1e-4, dt == FA_F32 ? 1e-5 : 1e-4));
        assert_true(memcmp(ref_o[0], ref_o[1], nq * es) != 0);
        first[k] = ref_o[0];
        free(ref_o[1]); free(ref_l[0]); free(ref_l[1]);
        CU(cudaStreamDestroy(s));
        cudaFree(dqa); cudaFree(dqb); cudaFree(dstage); cudaFree(dk); cudaFree(dv);
        for (c = 0; c < NC; c++) { cudaFree(dout[c]); cudaFree(dlse[c]); }
        free(qb); free(oref); free(lref); free(og); free(ho); free(hl);
        ref_tensors_free(&t);
    }
    /* the attributes forgotten: every dtype's call again after a reset, the same bits */
    CU(cudaDeviceReset());
    for (k = 0; k < 3; k++) {
        const fa_dtype dt = k_all[k];
        const size_t es = esize(dt), nq = (size_t)B * H * D, nk = (size_t)B * HKV * SK * D;
        fa_params p;
        ref_rng r;
        ref_tensors t;
        void *dq, *dk, *dv, *dout;
        unsigned char *ho = (unsigned char *)malloc(nq * es);
        assert_non_null(ho);
        memset(&p, 0, sizeof p);
        p.batch = B; p.heads = H; p.kv_heads = HKV; p.seq_q = 1; p.seq_k = SK; p.head_dim = D; p.dtype = dt;
        ref_seed(&r, 515 + (uint64_t)k);
        assert_true(ref_tensors_make(&p, &r, &t));
        ref_round_to(dt, t.q, nq); ref_round_to(dt, t.k, nk); ref_round_to(dt, t.v, nk);
        dq = upload(t.q, nq, dt); dk = upload(t.k, nk, dt); dv = upload(t.v, nk, dt);
        dout = dalloc(nq * es);
        assert_int_equal(fa_cuda_tiled(&p, dq, dk, dv, dout), FA_OK);
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(ho, dout, nq * es, cudaMemcpyDeviceToHost));
        if (memcmp(ho, first[k], nq * es)) print_error("  FAIL decode launch %s: o differs after cudaDeviceReset\n", dt_name(dt));
        assert_true(memcmp(ho, first[k], nq * es) == 0);
        cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout);
        free(ho); free(first[k]);
        ref_tensors_free(&t);
    }
}

/* A NaN reaches only the rows it reaches and is never lost in the merges or at the end of a row,
   in the decode kernels and in the forward kernels: a NaN in one query row
   makes that row's o and lse NaN; a NaN in one V element (kv head 0, one key in the middle of the
   keys) makes that column of the rows of kv head 0's query heads NaN, and nothing else. Then a
   workspace that cannot be allocated: FA_ERR_NO_MEMORY, nothing written. */
static void test_decode_nan(void **state)
{
    enum { D = 128, SK = 2000, NANH = 3, NANKEY = 1234, NANCOL = 7 };
    int k;
    (void)state;
    for (k = 0; k < 9; k++) {   /* Sq = 2: the decode kernels (k >= 6: MQA 32/1, 64 packed rows, blocks of 32 forced);
                                   Sq = 300: the forward kernels (tc, FFMA) */
        const fa_dtype dt = k_all[k % 3];
        const int SQ = k < 3 || k >= 6 ? 2 : 300, H = k < 6 ? 8 : 32, HKV = k < 6 ? 2 : 1;
        const size_t es = esize(dt), nq = (size_t)H * SQ * D, nk = (size_t)HKV * SK * D, rows = (size_t)H * SQ;
        fa_params p;
        ref_rng r;
        float *hq = ref_alloc(nq), *hk = ref_alloc(nk), *hv = ref_alloc(nk), *ho = ref_alloc(nq), *hl = ref_alloc(rows);
        void *dq, *dk, *dv, *dout;
        float *dlse;
        size_t i, t;
        assert_true(hq && hk && hv && ho && hl);
        ref_seed(&r, 99 + (uint64_t)k);
        ref_fill_normal(&r, hq, nq); ref_fill_normal(&r, hk, nk); ref_fill_normal(&r, hv, nk);
        hq[((size_t)NANH * SQ + 1) * D + 5] = NAN;            /* head 3, query row 1 */
        hv[(size_t)NANKEY * D + NANCOL] = NAN;               /* kv head 0 */
        dq = upload(hq, nq, dt); dk = upload(hk, nk, dt); dv = upload(hv, nk, dt);
        dout = dalloc(nq * es); dlse = (float *)dalloc(rows * 4);
        memset(&p, 0, sizeof p);
        p.batch = 1; p.heads = H; p.kv_heads = HKV; p.seq_q = SQ; p.seq_k = SK; p.head_dim = D; p.dtype = dt;
        p.causal = 1; p.lse = dlse;
        g_dec_rows = k >= 6 ? 32 : 0;   /* k >= 6: the 32-row blocks forced (this shape picks 16) */
        if (k >= 6 && dt != FA_F32) {
            fa__dims dd;
            fa__cu_plan plan;
            assert_int_equal(fa__resolve(&p, dq, dk, dv, dout, &dd, NULL), FA_OK);
            assert_int_equal(fa__cu_pick(&dd, dq, dk, dv, dout, &plan), FA_OK);
            force_dec_rows(&plan);
            assert_int_equal(plan.kernel, FA__CU_DEC_TC_D128_R32);
        }
        assert_int_equal(tiled_run(&p, dq, dk, dv, dout), FA_OK);
        g_dec_rows = 0;
        CU(cudaDeviceSynchronize());
        download(ho, dout, nq, dt, NULL);
        download(hl, dlse, rows, FA_F32, NULL);
        for (i = 0; i < rows; i++) {
            const int h = (int)(i / SQ), nanrow = h == NANH && i % SQ == 1, kv0 = h / (H / HKV) == 0;
            if (nanrow) assert_true(hl[i] != hl[i]);
            else assert_true(hl[i] == hl[i] && hl[i] > -INFINITY);
            for (t = 0; t < D; t++) {
                const float x = ho[i * D + t];
                const int want_nan = nanrow || (kv0 && t == NANCOL);
                if (want_nan != (x != x))
                    print_error("  FAIL nan %s: row %zu col %zu = %g (want %s)\n", dt_name(dt), i, t, (double)x,
                                want_nan ? "NaN" : "a number");
                assert_int_equal(want_nan, x != x);
            }
        }
        cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(dlse);
        free(hq); free(hk); free(hv); free(ho); free(hl);
    }
    if (!g_small) {   /* ~250 GB of partials (60000 sequences x 1024 rows x 4 chunks x 257 floats: the
                         chunk rule keeps a sequence near 256 blocks): the stream-ordered allocation
                         fails (not under the sanitizers) */
        fa_params p;
        void *buf = dalloc(4096), *o = dalloc(4096);
        float *lse = (float *)dalloc(4096);
        char line[400];
        memset(&p, 0, sizeof p);
        p.batch = 60000; p.heads = 64; p.seq_q = 16; p.seq_k = 1 << 20; p.head_dim = 256; p.dtype = FA_BF16;
        p.lse = lse;
        fa_cuda_describe(&p, buf, buf, buf, o, line, sizeof line);
        assert_non_null(strstr(line, "kernel dec_d256 ("));
        assert_non_null(strstr(line, "4 chunk(s)"));
        assert_int_equal(fa_cuda_tiled(&p, buf, buf, buf, o), FA_ERR_NO_MEMORY);
        CU(cudaDeviceSynchronize());
        assert_true(all_poison(o, 4096));
        assert_true(all_poison(lse, 4096));
        cudaFree(buf); cudaFree(o); cudaFree(lse);
    }
}

/* ---- a NaN or inf hidden from some rows reaches only the rows that see it (every forward kernel) --

   API.md: "A NaN in the inputs may make the rows it reaches NaN, and no others." One bad element
   (NaN in q, k or v, or +inf in v) in a key that the mask (causal, a window, a -inf bias entry)
   hides from some rows of the tiles that hold it; or no mask, where it reaches every row of its
   (batch, kv head). Prefill (several tiles) and decode (few rows, GQA packed, split keys) shapes,
   fp32/fp16/bf16, head dims and layouts that reach every forward kernel (the generic kernel at an
   odd D, the aligned fp32 kernels, the mma.sync kernel through k and v broadcast over the batch,
   which TMA refuses, the Hopper kernel, the decode kernels) and fa_cuda_naive. The rows the float64
   reference leaves finite must be finite and match it within API.md's tolerance; in the rows it
   does not, every element it makes non-finite must be non-finite (never lost; the rest of such a
   row may be NaN too). */
enum { NB_Q = 0, NB_K, NB_V, NB_VINF, NB_KINDS };
enum { NM_NONE = 0, NM_CAUSAL, NM_WINDOW, NM_BIAS, NM_MASKS };

typedef struct nan_case {
    int decode, D, mask, bad, bcast, tiled, block_q, block_k;
    fa_dtype dt;
} nan_case;

static int g_nan_served[FA__CU_KERNELS + 1][2];   /* runs, failures; [FA__CU_KERNELS]: fa_cuda_naive */

/* One case; 1 when it passes. *kern: the kernel that served (FA__CU_KERNELS for the naive path). */
static int nan_run(const nan_case *nc, fa__cu_kernel *kern)
{
    static const char *const mname[NM_MASKS] = { "none", "causal", "window", "bias" };
    static const char *const bname[NB_KINDS] = { "nan q", "nan k", "nan v", "inf v" };
    const int B = 2, Hq = nc->decode == 2 ? 32 : nc->decode ? 8 : 4, Hkv = 2;   /* decode 2: group 16 (32-row blocks) */
    const int Sq = nc->decode ? (nc->mask == NM_NONE ? nc->decode : nc->mask == NM_CAUSAL ? 4 : nc->mask == NM_WINDOW ? 2 : 3)
                              : 200;
    const int Sk = nc->decode ? 2000 : 200, D = nc->D;
    /* the bad key: causal hides it from the rows above its diagonal, the window from all but a few */
    const int kj = nc->mask == NM_WINDOW ? (nc->decode ? Sk - Sq - 300 + 1 : 150) : (nc->decode ? Sk - 2 : 150);
    fa_params p, pd;
    ref_dims rd;
    ref_rng r;
    ref_tensors t;
    char name[200];
    float *bias = NULL, *oref, *lref, *ob, *og, *lo, *fo, *fr, *fl, *flr;
    void *dq, *dk, *dv, *dout, *dbias = NULL;
    float *dlse;
    size_t rows, nbias = 0, e, nf = 0, nfinite_rows = 0, nreached = 0;
    int ok = 1, b, h, i, tt;
    fa_status st;

    snprintf(name, sizeof name, "%s %s D=%d %s mask %s%s block_q=%d block_k=%d", nc->tiled ? "tiled" : "naive",
             dt_name(nc->dt), D, nc->decode == 2 ? "decode r32" : nc->decode ? "decode" : "prefill", mname[nc->mask],
             nc->bcast ? " kv-broadcast" : "", nc->block_q, nc->block_k);
    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = Hq; p.kv_heads = Hkv; p.seq_q = Sq; p.seq_k = Sk; p.head_dim = D; p.dtype = nc->dt;
    p.causal = nc->mask == NM_CAUSAL || (nc->decode && nc->mask == NM_WINDOW);
    if (nc->mask == NM_WINDOW) {
        if (nc->decode) p.window_left = 300;
        else { p.window_left = 5; p.window_right = 3; }
    }
    if (nc->bcast) {   /* k and v shared by the batch: stride 0 (TMA refuses it, mma.sync takes it) */
        p.k_stride[0] = 0; p.k_stride[1] = (int64_t)Sk * D; p.k_stride[2] = D;
        p.v_stride[0] = 0; p.v_stride[1] = (int64_t)Sk * D; p.v_stride[2] = D;
    }
    ref_dims_of(&p, &rd);
    ref_seed(&r, name_seed(name) + 31u * (uint64_t)nc->bad);
    assert_true(ref_tensors_make(&p, &r, &t));
    ref_round_to(nc->dt, t.q, t.nq);
    ref_round_to(nc->dt, t.k, t.nk);
    ref_round_to(nc->dt, t.v, t.nv);
    if (nc->bad == NB_Q) t.q[1 * rd.qs[0] + 2 * rd.qs[1] + (int64_t)(Sq - 1 - (nc->decode ? 0 : 30)) * rd.qs[2] + 3] = NAN;
    if (nc->bad == NB_K) t.k[0 * rd.ks[0] + 1 * rd.ks[1] + (int64_t)kj * rd.ks[2] + D / 2] = NAN;
    if (nc->bad == NB_V) t.v[1 * rd.vs[0] + 0 * rd.vs[1] + (int64_t)kj * rd.vs[2] + 0] = NAN;
    if (nc->bad == NB_VINF) t.v[1 * rd.vs[0] + 0 * rd.vs[1] + (int64_t)kj * rd.vs[2] + 1] = INFINITY;
    if (nc->mask == NM_BIAS) {   /* packed [B][Hq][Sq][Sk], N(0,1), the bad key hidden from half the rows */
        nbias = (size_t)B * Hq * Sq * Sk;
        bias = ref_alloc(nbias);
        assert_non_null(bias);
        ref_fill_normal(&r, bias, nbias);
        for (b = 0; b < B; b++)
            for (h = 0; h < Hq; h++)
                for (i = 0; i < Sq; i++)
                    if ((h + i) % 2 == 0) bias[(((size_t)b * Hq + h) * Sq + i) * Sk + kj] = -INFINITY;
        p.bias = bias;
    }
    rows = (size_t)B * Hq * Sq;
    oref = ref_alloc(rows * D); lref = ref_alloc(rows); ob = ref_alloc(t.no); og = ref_alloc(rows * D);
    lo = ref_alloc(rows); fo = ref_alloc(rows * D); fr = ref_alloc(rows * D); fl = ref_alloc(rows); flr = ref_alloc(rows);
    assert_true(oref && lref && ob && og && lo && fo && fr && fl && flr);
    assert_true(ref_attention(&p, t.q, t.k, t.v, oref, lref, NULL));

    dq = upload(t.q, t.nq, nc->dt); dk = upload(t.k, t.nk, nc->dt); dv = upload(t.v, t.nv, nc->dt);
    dout = dalloc(t.no * esize(nc->dt));
    dlse = (float *)dalloc(rows * 4);
    if (bias) dbias = upload(bias, nbias, FA_F32);
    pd = p;
    pd.lse = dlse; pd.bias = (const float *)dbias; pd.block_q = nc->block_q; pd.block_k = nc->block_k;
    *kern = FA__CU_KERNELS;
    if (nc->tiled) {
        fa__dims dd;
        fa__cu_plan plan;
        assert_int_equal(fa__resolve(&pd, dq, dk, dv, dout, &dd, NULL), FA_OK);
        assert_int_equal(fa__cu_pick(&dd, dq, dk, dv, dout, &plan), FA_OK);
        force_dec_rows(&plan);
        *kern = plan.kernel;
    }
    st = nc->tiled ? tiled_run(&pd, dq, dk, dv, dout) : fa_cuda_naive(&pd, dq, dk, dv, dout, NULL);
    CU(cudaDeviceSynchronize());
    assert_int_equal(st, FA_OK);
    download(ob, dout, t.no, nc->dt, NULL);
    ref_gather_o(&p, ob, og);
    download(lo, dlse, rows, FA_F32, NULL);
    for (e = 0; e < rows; e++) {
        int reached = !isfinite(lref[e]);
        for (tt = 0; tt < D; tt++) reached |= !isfinite(oref[e * D + tt]);
        if (reached) {   /* never lost: what the reference makes non-finite stays so */
            nreached++;
            if (lref[e] != lref[e] && lo[e] == lo[e]) {
                if (ok) print_error("  FAIL %s %s: row %zu lse %g, want NaN\n", name, bname[nc->bad], e, (double)lo[e]);
                ok = 0;
            }
            for (tt = 0; tt < D; tt++)
                if (!isfinite(oref[e * D + tt]) && isfinite(og[e * D + tt])) {
                    if (ok) print_error("  FAIL %s %s: row %zu col %d = %g, want %g\n", name, bname[nc->bad], e, tt,
                                        (double)og[e * D + tt], (double)oref[e * D + tt]);
                    ok = 0;
                }
            continue;
        }
        for (tt = 0; tt < D; tt++) {
            if (!isfinite(og[e * D + tt])) {
                if (nf++ == 0)
                    print_error("  FAIL %s %s: row %zu (unreached) col %d = %g, want %g\n", name, bname[nc->bad], e, tt,
                                (double)og[e * D + tt], (double)oref[e * D + tt]);
                ok = 0;
            }
            fo[nfinite_rows * D + tt] = og[e * D + tt];
            fr[nfinite_rows * D + tt] = oref[e * D + tt];
        }
        fl[nfinite_rows] = lo[e];
        flr[nfinite_rows] = lref[e];
        nfinite_rows++;
    }
    if (nf) print_error("  FAIL %s %s: %zu non-finite elements in %zu rows the bad element does not reach\n", name,
                        bname[nc->bad], nf, nfinite_rows);
    /* the bad element reached some rows and left others; the rest matches the reference */
    assert_true(nreached > 0 && nfinite_rows > 0);
    if (nf == 0) {
        if (nc->dt == FA_F32) ok &= close_or_report("o", name, fo, fr, nfinite_rows * D, 1e-5, 1e-5);
        else {
            const double rel = ref_rel_error(fo, fr, nfinite_rows * D), tol = nc->dt == FA_F16 ? 1e-3 : 5e-3;
            if (!(rel <= tol)) {
                print_error("  FAIL %s %s o: relative error %g > %g\n", name, bname[nc->bad], rel, tol);
                ok = 0;
            }
        }
        ok &= close_or_report("lse", name, fl, flr, nfinite_rows, nc->dt == FA_F32 ? 1e-5 : 1e-4,
                              nc->dt == FA_F32 ? 1e-5 : 1e-4);
    }
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(dlse);
    if (dbias) cudaFree(dbias);
    free(bias); free(oref); free(lref); free(ob); free(og); free(lo); free(fo); free(fr); free(fl); free(flr);
    ref_tensors_free(&t);
    return ok;
}

static void test_nan_hidden(void **state)
{
    static const int dims[3] = { 64, 128, 33 };
    int dec, di, k, mask, bad, bc, tiled, n, fails = 0, runs = 0;
    (void)state;
    memset(g_nan_served, 0, sizeof g_nan_served);
    for (dec = 0; dec <= 2; dec++)
        for (di = 0; di < 3; di++)
            for (k = 0; k < 3; k++)
                for (bc = 0; bc <= 1; bc++)
                    for (tiled = 0; tiled <= 1; tiled++)
                        for (mask = 0; mask < NM_MASKS; mask++)
                            for (bad = 0; bad < NB_KINDS; bad++) {
                                nan_case nc;
                                fa__cu_kernel kern;
                                int good;
                                /* broadcast k/v: the half kernels' prefill shapes (mma.sync on a Hopper) */
                                if (bc && (dec || k_all[k] == FA_F32 || dims[di] == 33 || !tiled)) continue;
                                /* decode 2 (the 32-row blocks, forced): the tensor-core decode's dtypes and head dims */
                                if (dec == 2 && (k_all[k] == FA_F32 || dims[di] == 33 || !tiled)) continue;
                                if (g_small && (di == 1 || bad == NB_VINF || (bad == NB_Q && mask != NM_CAUSAL))) continue;
                                if (bad == NB_VINF && (mask == NM_NONE || mask == NM_WINDOW)) continue;
                                nc.decode = dec; nc.D = dims[di]; nc.mask = mask; nc.bad = bad; nc.bcast = bc;
                                nc.tiled = tiled; nc.block_q = 0; nc.block_k = 0; nc.dt = k_all[k];
                                g_dec_rows = dec == 2 ? 32 : 0;   /* the 32-row blocks forced (the shape picks 16) */
                                good = nan_run(&nc, &kern);
                                g_dec_rows = 0;
                                g_nan_served[kern][0]++;
                                g_nan_served[kern][1] += !good;
                                fails += !good;
                                runs++;
                            }
    {   /* the other fp32 kernels' pipelines (8c: PIPE 1 with BK 32, PIPE 2) */
        static const int qk[3][3] = { { 64, 64, 32 }, { 128, 128, 0 }, { 128, 0, 32 } };   /* D, block_q, block_k */
        for (k = 0; k < 3; k++)
            for (mask = NM_CAUSAL; mask < NM_MASKS; mask++) {
                nan_case nc;
                fa__cu_kernel kern;
                int good;
                if (g_small && k > 0) continue;
                nc.decode = 0; nc.D = qk[k][0]; nc.mask = mask; nc.bad = NB_V; nc.bcast = 0; nc.tiled = 1;
                nc.block_q = qk[k][1]; nc.block_k = qk[k][2]; nc.dt = FA_F32;
                good = nan_run(&nc, &kern);
                g_nan_served[kern][0]++;
                g_nan_served[kern][1] += !good;
                fails += !good;
                runs++;
            }
    }
    printf("  test_nan_hidden: %d of %d runs failed; by kernel (runs, failures):\n", fails, runs);
    for (k = 0; k <= FA__CU_KERNELS; k++)
        if (g_nan_served[k][0])
            printf("    %-16s %4d %4d\n", k == FA__CU_KERNELS ? "naive (cuBLAS)" : fa__cu_kernel_name((fa__cu_kernel)k),
                   g_nan_served[k][0], g_nan_served[k][1]);
    /* every forward kernel family was reached */
    n = g_nan_served[FA__CU_GENERIC_D64][0] && g_nan_served[FA__CU_F32_D64][0] && g_nan_served[FA__CU_TC_D64][0] &&
        g_nan_served[FA__CU_DEC_TC_D64][0] && g_nan_served[FA__CU_DEC_TC_D64_R32][0] && g_nan_served[FA__CU_DEC_D64][0] &&
        g_nan_served[FA__CU_KERNELS][0] &&
        (!g_hopper || g_nan_served[FA__CU_WG_D64][0]) &&
        (g_small || (g_nan_served[FA__CU_F32_D128][0] && g_nan_served[FA__CU_TC_D128][0] &&   /* D = 128: full grid */
                     g_nan_served[FA__CU_DEC_TC_D128][0] && g_nan_served[FA__CU_DEC_TC_D128_R32][0] &&
                     g_nan_served[FA__CU_DEC_D128][0] &&
                     g_nan_served[FA__CU_F32_D64_Q64K32][0] && g_nan_served[FA__CU_F32_D128_K32][0] &&
                     (!g_hopper || (g_nan_served[FA__CU_WG_D128][0] && g_nan_served[FA__CU_F32_D128_Q128][0]))));
    if (!n) print_error("  test_nan_hidden: a kernel family was not reached\n");
    assert_true(n);
    assert_int_equal(fails, 0);
}

/* ---- errors: statuses, and o, lse, scores untouched ------------------------------------------- */

static void test_errors(void **state)
{
    fa_params p, bad;
    void *buf = dalloc(4096);
    float *lse = (float *)dalloc(4096), *sc = (float *)dalloc(4096);
    void *o = dalloc(4096);
    (void)state;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.heads = 2; p.seq_q = 4; p.seq_k = 4; p.head_dim = 8; p.lse = lse;

#define EXPECT(expr, want)                                                                         \
    do {                                                                                           \
        fa_status s_ = (expr);                                                                     \
        if (s_ != (want)) print_error("%s: got %d want %d\n", #expr, (int)s_, (int)(want));        \
        assert_int_equal(s_, want);                                                                \
    } while (0)
#define BOTH(params, want)                                                                         \
    do {                                                                                           \
        EXPECT(fa_cuda_tiled(params, buf, buf, buf, o), want);                                     \
        EXPECT(fa_cuda_naive(params, buf, buf, buf, o, sc), want);                                 \
    } while (0)

    BOTH(NULL, FA_ERR_INVALID_ARG);
    bad = p; bad.batch = 0; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.heads = 3; bad.kv_heads = 2; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.head_dim = 0; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.seq_q = -1; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.dtype = (fa_dtype)7; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.scale = NAN; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.softcap = -1.0f; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.window_left = -2; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.o_stride[0] = 64; bad.o_stride[1] = 32; bad.o_stride[2] = 4; BOTH(&bad, FA_ERR_INVALID_ARG);
    bad = p; bad.head_dim = 257; BOTH(&bad, FA_ERR_UNSUPPORTED);
    bad = p; bad.head_dim_v = 300; BOTH(&bad, FA_ERR_UNSUPPORTED);
    EXPECT(fa_cuda_tiled(&p, NULL, buf, buf, o), FA_ERR_INVALID_ARG);
    /* the backward's own checks are tests/test_cuda_backward.cu's; here the forward's, and gradients
       that share memory with the inputs (every pointer one buffer) refused */
    EXPECT(fa_cuda_naive_backward(&p, buf, buf, buf, o, buf, buf, buf, buf), FA_ERR_INVALID_ARG);
    EXPECT(fa_cuda_tiled_backward(&p, buf, buf, buf, o, buf, buf, buf, buf), FA_ERR_INVALID_ARG);
    EXPECT(fa_cuda_naive_backward(NULL, buf, buf, buf, o, buf, buf, buf, buf), FA_ERR_INVALID_ARG);
    bad = p; bad.batch = 0;
    EXPECT(fa_cuda_tiled_backward(&bad, buf, buf, buf, o, buf, buf, buf, buf), FA_ERR_INVALID_ARG);
    EXPECT(fa_cuda_naive_backward(&p, NULL, buf, buf, o, buf, buf, buf, buf), FA_ERR_INVALID_ARG);
    EXPECT(fa_cuda_tiled(&p, buf, buf, buf, NULL), FA_ERR_INVALID_ARG);
    EXPECT(fa_cuda_naive(&p, buf, NULL, buf, o, sc), FA_ERR_INVALID_ARG);
    /* the naive score matrix cannot be allocated (256 TiB: skipped under SMALL, where
       compute-sanitizer would count the failed allocation as an error), or its size overflows */
    if (!g_small) {
        bad = p; bad.heads = 64; bad.seq_q = 1 << 20; bad.seq_k = 1 << 20;
        EXPECT(fa_cuda_naive(&bad, buf, buf, buf, o, sc), FA_ERR_NO_MEMORY);
    }
    bad = p; bad.batch = 1 << 20; bad.heads = 1 << 10; bad.seq_q = 1 << 20; bad.seq_k = 1 << 20;
    EXPECT(fa_cuda_naive(&bad, buf, buf, buf, o, sc), FA_ERR_NO_MEMORY);
    /* a later good call works (no sticky error left behind) */
    CU(cudaDeviceSynchronize());
    assert_true(all_poison(o, 4096));
    assert_true(all_poison(lse, 4096));
    assert_true(all_poison(sc, 4096));
    EXPECT(fa_cuda_tiled(&p, buf, buf, buf, o), FA_OK);
    EXPECT(fa_cuda_naive(&p, buf, buf, buf, o, sc), FA_OK);
    CU(cudaDeviceSynchronize());
    /* merge's argument checks */
    {
        const float *op[2] = { (const float *)buf, (const float *)buf }, *lp[2] = { lse, lse };
        const float *opn[2] = { (const float *)buf, NULL };
        float *mo = (float *)dalloc(4096), *ml = (float *)dalloc(4096);
        EXPECT(fa_cuda_merge(-1, 4, 2, op, lp, mo, ml), FA_ERR_INVALID_ARG);
        EXPECT(fa_cuda_merge(4, 0, 2, op, lp, mo, ml), FA_ERR_INVALID_ARG);
        EXPECT(fa_cuda_merge(4, 4, 0, op, lp, mo, ml), FA_ERR_INVALID_ARG);
        EXPECT(fa_cuda_merge(4, 4, 2, NULL, lp, mo, ml), FA_ERR_INVALID_ARG);
        EXPECT(fa_cuda_merge(4, 4, 2, op, NULL, mo, ml), FA_ERR_INVALID_ARG);
        EXPECT(fa_cuda_merge(4, 4, 2, op, lp, NULL, ml), FA_ERR_INVALID_ARG);
        EXPECT(fa_cuda_merge(4, 4, 2, opn, lp, mo, ml), FA_ERR_INVALID_ARG);
        EXPECT(fa_cuda_merge(0, 4, 2, op, lp, NULL, NULL), FA_OK);
        CU(cudaDeviceSynchronize());
        assert_true(all_poison(mo, 4096));
        assert_true(all_poison(ml, 4096));
        cudaFree(mo); cudaFree(ml);
    }
    cudaFree(buf); cudaFree(lse); cudaFree(sc); cudaFree(o);
}

/* ---- the stream: work queued behind a busy non-default stream sees that stream's order ---------- */

__global__ void spin_kernel(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}

static void stream_case(int tiled, int dec)
{
    enum { B = 2, H = 4, S = 200, D = 64 };
    fa_params p;
    ref_rng r;
    ref_tensors t;
    float *oref, *og;
    void *dq, *dk, *dv, *dout, *stage;
    cudaStream_t s;
    cudaError_t q;
    fa_status st;
    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = H; p.seq_q = S; p.seq_k = S; p.head_dim = D; p.causal = 1;
    if (dec) { p.seq_q = 2; p.seq_k = 5000; p.kv_heads = 2; }   /* the decode path: its workspace on s too */
    ref_seed(&r, 99);
    assert_true(ref_tensors_make(&p, &r, &t));
    oref = ref_alloc(t.no); og = ref_alloc(t.no);
    assert_true(ref_attention(&p, t.q, t.k, t.v, oref, NULL, NULL));
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    dq = dalloc(t.nq * 4); dk = upload(t.k, t.nk, FA_F32); dv = upload(t.v, t.nv, FA_F32);
    dout = dalloc(t.no * 4);
    stage = upload(t.q, t.nq, FA_F32);
    CU(cudaDeviceSynchronize());
    /* s: spin ~50 ms, then q arrives; the call must run after both, on s */
    spin_kernel<<<1, 1, 0, s>>>(g_small ? 1000000LL : 100000000LL);
    CU(cudaMemcpyAsync(dq, stage, t.nq * 4, cudaMemcpyDeviceToDevice, s));
    p.stream = (void *)s;
    st = tiled ? fa_cuda_tiled(&p, dq, dk, dv, dout) : fa_cuda_naive(&p, dq, dk, dv, dout, NULL);
    q = cudaStreamQuery(s);
    assert_int_equal(st, FA_OK);
    if (!g_small) {
        if (q != cudaErrorNotReady)
            print_error("  %s: the call returned after its stream had drained (it synchronised)\n",
                        tiled ? "fa_cuda_tiled" : "fa_cuda_naive");
        if (tiled) assert_int_equal(q, cudaErrorNotReady);
    }
    CU(cudaMemcpyAsync(og, dout, t.no * 4, cudaMemcpyDeviceToHost, s));
    CU(cudaStreamSynchronize(s));
    assert_true(close_or_report("o", tiled ? "stream tiled" : "stream naive", og, oref, t.no, 1e-5, 1e-5));
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(stage);
    CU(cudaStreamDestroy(s));
    free(oref); free(og);
    ref_tensors_free(&t);
}

static void test_stream(void **state)
{
    (void)state;
    stream_case(1, 0);
    stream_case(0, 0);
    stream_case(1, 1);
}

/* ---- merge: split keys, attend each part with lse, merge, compare with the whole --------------- */

static void test_merge(void **state)
{
    enum { B = 2, H = 3, SQ = 37, SK = 150, D = 32, DV = 24, MAXP = 40 };
    const int rows = B * H * SQ;
    fa_params p, pp;
    ref_rng r;
    ref_tensors t;
    float *dwo, *dwl, *dpo[MAXP], *dpl[MAXP], *mo, *ml;
    float who[B * H * SQ * DV], whl[B * H * SQ], got[B * H * SQ * DV], gotl[B * H * SQ];
    float refo[B * H * SQ * DV], refl[B * H * SQ];
    void *dq, *dk, *dv;
    int cuts_a[] = { 0, 50, 50, SK }, np, i, scheme;
    (void)state;
    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = H; p.seq_q = SQ; p.seq_k = SK; p.head_dim = D; p.head_dim_v = DV;
    ref_seed(&r, 7);
    assert_true(ref_tensors_make(&p, &r, &t));
    assert_true(ref_attention(&p, t.q, t.k, t.v, refo, refl, NULL));
    dq = upload(t.q, t.nq, FA_F32); dk = upload(t.k, t.nk, FA_F32); dv = upload(t.v, t.nv, FA_F32);
    dwo = (float *)dalloc(sizeof who); dwl = (float *)dalloc(sizeof whl);
    p.lse = dwl;
    assert_int_equal(fa_cuda_tiled(&p, dq, dk, dv, dwo), FA_OK);
    download(who, dwo, (size_t)rows * DV, FA_F32, NULL);
    download(whl, dwl, (size_t)rows, FA_F32, NULL);
    assert_true(close_or_report("whole o", "merge", who, refo, (size_t)rows * DV, 1e-5, 1e-5));
    mo = (float *)dalloc(sizeof got); ml = (float *)dalloc(sizeof gotl);
    for (scheme = 0; scheme < 2; scheme++) {
        int cuts[MAXP + 1];
        if (scheme == 0) { np = 3; memcpy(cuts, cuts_a, sizeof cuts_a); }
        else if (g_small) {     /* SMALL (sanitizers): 40 parts, all empty but the first, which is whole */
            np = MAXP;
            cuts[0] = 0;
            for (i = 1; i <= np; i++) cuts[i] = SK;
        } else {                /* 40 parts (more than one launch), empty ones among them */
            np = MAXP;
            for (i = 0; i <= np; i++) cuts[i] = i * SK / np;
            cuts[5] = cuts[4];
        }
        for (i = 0; i < np; i++) {
            pp = p;
            pp.seq_k = cuts[i + 1] - cuts[i];
            pp.k_stride[0] = (int64_t)H * SK * D; pp.k_stride[1] = (int64_t)SK * D; pp.k_stride[2] = D;
            pp.v_stride[0] = (int64_t)H * SK * DV; pp.v_stride[1] = (int64_t)SK * DV; pp.v_stride[2] = DV;
            dpo[i] = (float *)dalloc(sizeof who); dpl[i] = (float *)dalloc(sizeof whl);
            if (g_small && scheme == 1 && i > 0) {          /* empty: lse -inf, o left NaN (ignored) */
                float ninf[B * H * SQ];
                int t;
                for (t = 0; t < rows; t++) ninf[t] = -INFINITY;
                CU(cudaMemcpy(dpl[i], ninf, sizeof ninf, cudaMemcpyHostToDevice));
                continue;
            }
            pp.lse = dpl[i];
            assert_int_equal(fa_cuda_tiled(&pp, dq, (float *)dk + (size_t)cuts[i] * D,
                                           (float *)dv + (size_t)cuts[i] * DV, dpo[i]), FA_OK);
        }
        /* out of place, lse NULL too */
        assert_int_equal(fa_cuda_merge(rows, DV, np, (const float *const *)dpo, (const float *const *)dpl, mo, ml), FA_OK);
        download(got, mo, (size_t)rows * DV, FA_F32, NULL);
        download(gotl, ml, (size_t)rows, FA_F32, NULL);
        assert_true(close_or_report("merged o", "merge", got, refo, (size_t)rows * DV, 1e-5, 1e-5));
        assert_true(close_or_report("merged lse", "merge", gotl, refl, (size_t)rows, 1e-5, 1e-5));
        CU(cudaMemset(mo, 0xFF, sizeof got));
        assert_int_equal(fa_cuda_merge(rows, DV, np, (const float *const *)dpo, (const float *const *)dpl, mo, NULL), FA_OK);
        download(got, mo, (size_t)rows * DV, FA_F32, NULL);
        assert_true(close_or_report("merged o (lse NULL)", "merge", got, refo, (size_t)rows * DV, 1e-5, 1e-5));
        /* in place: o = o_parts[0], lse = lse_parts[0] */
        assert_int_equal(fa_cuda_merge(rows, DV, np, (const float *const *)dpo, (const float *const *)dpl, dpo[0], dpl[0]), FA_OK);
        download(got, dpo[0], (size_t)rows * DV, FA_F32, NULL);
        download(gotl, dpl[0], (size_t)rows, FA_F32, NULL);
        assert_true(close_or_report("in-place o", "merge", got, refo, (size_t)rows * DV, 1e-5, 1e-5));
        assert_true(close_or_report("in-place lse", "merge", gotl, refl, (size_t)rows, 1e-5, 1e-5));
        for (i = 0; i < np; i++) { cudaFree(dpo[i]); cudaFree(dpl[i]); }
    }
    /* all parts empty: 0 and -inf */
    {
        float ninf[B * H * SQ];
        for (i = 0; i < rows; i++) ninf[i] = -INFINITY;
        for (i = 0; i < 2; i++) {
            dpo[i] = (float *)upload(who, (size_t)rows * DV, FA_F32);
            dpl[i] = (float *)upload(ninf, (size_t)rows, FA_F32);
        }
        assert_int_equal(fa_cuda_merge(rows, DV, 2, (const float *const *)dpo, (const float *const *)dpl, mo, ml), FA_OK);
        download(got, mo, (size_t)rows * DV, FA_F32, NULL);
        download(gotl, ml, (size_t)rows, FA_F32, NULL);
        for (i = 0; i < rows * DV; i++) assert_true(got[i] == 0.0f);
        for (i = 0; i < rows; i++) assert_true(gotl[i] == -INFINITY);
        for (i = 0; i < 2; i++) { cudaFree(dpo[i]); cudaFree(dpl[i]); }
    }
    /* a NaN lse in the first part of row 1 (finite parts after it): that row is NaN, never a NaN
       dropped by a later part's max; the other rows are the finite merge */
    {
        float l0[B * H * SQ], l1[B * H * SQ];
        for (i = 0; i < rows; i++) { l0[i] = 0.25f * (float)(i % 7) - 1.0f; l1[i] = 0.5f - 0.125f * (float)(i % 5); }
        l0[1] = NAN;
        dpo[0] = (float *)upload(who, (size_t)rows * DV, FA_F32);
        dpo[1] = (float *)upload(who + DV, (size_t)(rows - 1) * DV, FA_F32);
        dpl[0] = (float *)upload(l0, (size_t)rows, FA_F32);
        dpl[1] = (float *)upload(l1, (size_t)rows, FA_F32);
        assert_int_equal(fa_cuda_merge(rows - 1, DV, 2, (const float *const *)dpo, (const float *const *)dpl, mo, ml), FA_OK);
        download(gotl, ml, (size_t)(rows - 1), FA_F32, NULL);
        download(got, mo, (size_t)(rows - 1) * DV, FA_F32, NULL);
        assert_true(gotl[1] != gotl[1]);
        for (i = 0; i < DV; i++) assert_true(got[DV + i] != got[DV + i]);
        for (i = 0; i < rows - 1; i++) if (i != 1) assert_true(isfinite(gotl[i]));
        for (i = 0; i < 2; i++) { cudaFree(dpo[i]); cudaFree(dpl[i]); }
    }
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dwo); cudaFree(dwl); cudaFree(mo); cudaFree(ml);
    ref_tensors_free(&t);
}

/* ---- section 1's fa__ex2_poly on the device ------------------------------------------------------
   The Hopper forward takes a share of its exps through fa__ex2_poly (8d's fa__tc_exp_pack); its
   accuracy is checked on the CPU (tests/test_flashattn.c, test_ex2_poly). Here: the device's body
   (max.NaN, the bit casts) gives the host's bits on every 4099th float of [-130, 2] and on the
   special values (+0 for -INFINITY, a NaN for a NaN). */
static __global__ void k_ex2_poly(const float *x, float *y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fa__ex2_poly(x[i]);
}

static void test_ex2_poly_device(void **state)
{
    static const float special[] = { -INFINITY, -FLT_MAX, -1e30f, -127.0f, -126.5f, -126.0f, -0.0f, 0.0f, 1.0f, NAN };
    const int ns = (int)COUNT(special);
    const int n = ns + (int)((0xC3020000u - 0x80000000u) / 4099 + 1) + (int)(0x40000000u / 4099 + 1);
    float *hx = (float *)malloc((size_t)n * 4), *hy = (float *)malloc((size_t)n * 4);
    float *dx = (float *)dalloc((size_t)n * 4), *dy = (float *)dalloc((size_t)n * 4);
    int i, k = 0, bad = 0;
    uint32_t u;
    (void)state;
    assert_non_null(hx);
    assert_non_null(hy);
    for (i = 0; i < ns; i++) hx[k++] = special[i];
    for (u = 0x80000000u; u <= 0xC3020000u; u += 4099) memcpy(&hx[k++], &u, 4);   /* -0 down to -130 */
    for (u = 0; u <= 0x40000000u; u += 4099) memcpy(&hx[k++], &u, 4);              /* +0 up to 2 */
    assert_int_equal(k, n);
    CU(cudaMemcpy(dx, hx, (size_t)n * 4, cudaMemcpyHostToDevice));
    k_ex2_poly<<<(n + 255) / 256, 256>>>(dx, dy, n);
    CU(cudaGetLastError());
    CU(cudaMemcpy(hy, dy, (size_t)n * 4, cudaMemcpyDeviceToHost));
    for (i = 0; i < n; i++) {
        const float want = fa__ex2_poly(hx[i]);
        const int same = want != want ? hy[i] != hy[i] : memcmp(&want, &hy[i], 4) == 0;
        if (!same && bad++ < 5) print_error("  fa__ex2_poly(%a): device %a, host %a\n", (double)hx[i], (double)hy[i], (double)want);
    }
    assert_int_equal(bad, 0);
    assert_true(hy[0] == 0.0f && !signbit(hy[0]) && hy[ns - 1] != hy[ns - 1]);   /* -INFINITY -> +0, NaN -> NaN */
    cudaFree(dx); cudaFree(dy);
    free(hx); free(hy);
}

/* ---- bitwise reproducible: run to run, and one sequence alone or inside a batch ----------------
   fa_cuda_tiled's kernels give a query tile to one block that walks its keys in a fixed order, so
   a row's o and lse must not depend on the run or on the batch around it. Each shape runs twice
   at B = 1 (same bits) and once at B = 5 whose batch 3 holds the B = 1 inputs (same bits there);
   every dtype, so every kernel family (tensor-core, aligned fp32, generic) is covered. */
static void test_reproducible(void **state)
{
    static const struct { int Hq, Hkv, Sq, Sk, D, causal, wl; float cap; int alibi; } sh[] = {
        { 4, 2, 200, 333, 64, 1, 0, 0.0f, 0 },
        { 2, 1, 130, 257, 128, 0, 0, 0.0f, 0 },
        { 2, 2, 77, 150, 80, 1, 40, 5.0f, 1 },
        { 8, 2, 1, 3000, 128, 1, 0, 0.0f, 0 },
        { 4, 1, 3, 1031, 64, 1, 100, 10.0f, 1 },
    };
    static const fa_dtype dts[] = { FA_F32, FA_F16, FA_BF16 };
    static const float slopes[4] = { 0.5f, 0.25f, 0.125f, 0.0625f };
    (void)state;
    for (size_t c = 0; c < COUNT(sh); c++)
        for (size_t u = 0; u < COUNT(dts); u++) {
            const fa_dtype dt = dts[u];
            const int NB = 5, AT = 3, Hq = sh[c].Hq, Hkv = sh[c].Hkv, Sq = sh[c].Sq, Sk = sh[c].Sk, D = sh[c].D;
            const size_t es = esize(dt), nq = (size_t)Hq * Sq * D, nk = (size_t)Hkv * Sk * D, nl = (size_t)Hq * Sq;
            float *hq = (float *)malloc(NB * nq * 4), *hk = (float *)malloc(NB * nk * 4), *hv = (float *)malloc(NB * nk * 4);
            unsigned char *o1 = (unsigned char *)malloc(nq * es), *o2 = (unsigned char *)malloc(nq * es);
            unsigned char *ob = (unsigned char *)malloc(NB * nq * es);
            float *l1 = (float *)malloc(nl * 4), *l2 = (float *)malloc(nl * 4), *lb = (float *)malloc(NB * nl * 4);
            float *dslopes = NULL;
            ref_rng r;
            fa_params p;
            void *q1, *k1, *v1, *qb, *kb, *vb, *do1, *dob;
            float *dl1, *dlb;
            assert_true(hq && hk && hv && o1 && o2 && ob && l1 && l2 && lb);
            ref_seed(&r, 77 + c);
            ref_fill_normal(&r, hq, NB * nq);
            ref_fill_normal(&r, hk, NB * nk);
            ref_fill_normal(&r, hv, NB * nk);
            memset(&p, 0, sizeof p);
            p.batch = 1; p.heads = Hq; p.kv_heads = Hkv; p.seq_q = Sq; p.seq_k = Sk; p.head_dim = D;
            p.causal = sh[c].causal; p.window_left = sh[c].wl; p.softcap = sh[c].cap; p.dtype = dt;
            if (sh[c].alibi) {
                CU(cudaMalloc((void **)&dslopes, sizeof slopes));
                CU(cudaMemcpy(dslopes, slopes, sizeof slopes, cudaMemcpyHostToDevice));
                p.alibi_slopes = dslopes;
            }
            q1 = upload(hq + AT * nq, nq, dt); k1 = upload(hk + AT * nk, nk, dt); v1 = upload(hv + AT * nk, nk, dt);
            qb = upload(hq, NB * nq, dt); kb = upload(hk, NB * nk, dt); vb = upload(hv, NB * nk, dt);
            do1 = dalloc(nq * es); dob = dalloc(NB * nq * es);
            dl1 = (float *)dalloc(nl * 4); dlb = (float *)dalloc(NB * nl * 4);
            p.lse = dl1;
            assert_int_equal(fa_cuda_tiled(&p, q1, k1, v1, do1), FA_OK);
            CU(cudaDeviceSynchronize());
            CU(cudaMemcpy(o1, do1, nq * es, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(l1, dl1, nl * 4, cudaMemcpyDeviceToHost));
            CU(cudaMemset(do1, 0xFF, nq * es));
            assert_int_equal(fa_cuda_tiled(&p, q1, k1, v1, do1), FA_OK);
            CU(cudaDeviceSynchronize());
            CU(cudaMemcpy(o2, do1, nq * es, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(l2, dl1, nl * 4, cudaMemcpyDeviceToHost));
            p.batch = NB; p.lse = dlb;
            assert_int_equal(fa_cuda_tiled(&p, qb, kb, vb, dob), FA_OK);
            CU(cudaDeviceSynchronize());
            CU(cudaMemcpy(ob, dob, NB * nq * es, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(lb, dlb, NB * nl * 4, cudaMemcpyDeviceToHost));
            if (memcmp(o1, o2, nq * es) || memcmp(l1, l2, nl * 4) || memcmp(o1, ob + AT * nq * es, nq * es) ||
                memcmp(l1, lb + AT * nl, nl * 4)) {
                print_error("reproducible: shape %zu %s: run 2 o %s lse %s; in batch o %s lse %s\n", c, dt_name(dt),
                            memcmp(o1, o2, nq * es) ? "differs" : "same", memcmp(l1, l2, nl * 4) ? "differs" : "same",
                            memcmp(o1, ob + AT * nq * es, nq * es) ? "differs" : "same",
                            memcmp(l1, lb + AT * nl, nl * 4) ? "differs" : "same");
                fail();
            }
            { /* not a test of zeros: the output is finite and not all equal */
                float x0, x1;
                download(&x0, do1, 1, dt, NULL);
                download(&x1, (const char *)do1 + (nq - 1) * es, 1, dt, NULL);
                assert_true(isfinite(x0) && isfinite(x1) && x0 != x1);
            }
            cudaFree(q1); cudaFree(k1); cudaFree(v1); cudaFree(qb); cudaFree(kb); cudaFree(vb);
            cudaFree(do1); cudaFree(dob); cudaFree(dl1); cudaFree(dlb); cudaFree(dslopes);
            free(hq); free(hk); free(hv); free(o1); free(o2); free(ob); free(l1); free(l2); free(lb);
        }
}

/* ---- 8a's OS and PER: the persistent Hopper kernel's staged o store and its schedule move bits, nothing else */

#if FA__WG
/* configuration C with o stored from the registers (8a's OS 0: the store before the staging) */
template <class C> struct wg_os0 : C { enum { OS = 0 }; };

template <class C, int MOD>
static fa_status wg_os0_run(const fa__dims *d, const void *q, const void *k, const void *v, void *o)
{
    return fa__wg_run<wg_os0<C> >(d, fa__wg_fwd<__nv_bfloat16, wg_os0<C>, MOD>, q, k, v, o, 0);
}

/* configuration C with its persistent blocks walking the causal tiles in schedule P (8a's PER: 1 one
   longest-first run, 3 pairs of a head) */
template <class C, int P> struct wg_per : C { enum { PER = P }; };

template <class C, int P>
static fa_status wg_per_run(const fa__dims *d, const void *q, const void *k, const void *v, void *o)
{
    return fa__wg_run<wg_per<C, P> >(d, fa__wg_fwd<__nv_bfloat16, wg_per<C, P>, 0>, q, k, v, o, 0);
}
#endif

/* A Hopper-kernel request, and the other run of the same kernel that must give its bits (the
   picked kernel's plan in pl) */
typedef struct wg_case { const char *name; int B, Hq, Hkv, Sq, Sk, D, causal; float cap; int bq, small; } wg_case;
typedef fa_status (*wg_other_fn)(const wg_case *c, const fa__dims *d, const fa__cu_plan *pl, const void *q, const void *k,
                                 const void *v, void *o);

/* bf16 o and lse of fa_cuda_tiled bit for bit those of `other` on the same fresh normal inputs (both
   outputs poisoned alike: rows a run skips compare too); o finite and not mostly 0. */
static void wg_same_bits(const char *what, const wg_case *sh, size_t n, wg_other_fn other)
{
#if FA__WG
    for (size_t c = 0; c < n; c++) {
        if (g_small && !sh[c].small) continue;
        const int B = sh[c].B, Hq = sh[c].Hq, Hkv = sh[c].Hkv, Sq = sh[c].Sq, Sk = sh[c].Sk, D = sh[c].D;
        const size_t nq = (size_t)B * Hq * Sq * D, nk = (size_t)B * Hkv * Sk * D, nl = (size_t)B * Hq * Sq;
        float *hq = (float *)malloc(nq * 4), *hk = (float *)malloc(nk * 4), *hv = (float *)malloc(nk * 4);
        unsigned char *o1 = (unsigned char *)malloc(nq * 2), *o0 = (unsigned char *)malloc(nq * 2);
        float *l1 = (float *)malloc(nl * 4), *l0 = (float *)malloc(nl * 4);
        ref_rng r;
        fa_params p;
        fa__dims d;
        fa__cu_plan pl;
        void *q, *k, *v, *do1, *do0;
        float *dl1, *dl0;
        size_t nonzero = 0, i;
        assert_true(hq && hk && hv && o1 && o0 && l1 && l0);
        ref_seed(&r, name_seed(sh[c].name));
        ref_fill_normal(&r, hq, nq);
        ref_fill_normal(&r, hk, nk);
        ref_fill_normal(&r, hv, nk);
        memset(&p, 0, sizeof p);
        p.batch = B; p.heads = Hq; p.kv_heads = Hkv; p.seq_q = Sq; p.seq_k = Sk; p.head_dim = D;
        p.causal = sh[c].causal; p.softcap = sh[c].cap; p.dtype = FA_BF16;
        q = upload(hq, nq, FA_BF16); k = upload(hk, nk, FA_BF16); v = upload(hv, nk, FA_BF16);
        do1 = dalloc(nq * 2); do0 = dalloc(nq * 2);
        dl1 = (float *)dalloc(nl * 4); dl0 = (float *)dalloc(nl * 4);
        p.lse = dl1;
        assert_int_equal(fa_cuda_tiled(&p, q, k, v, do1), FA_OK);
        p.lse = dl0;
        assert_int_equal(fa__resolve(&p, q, k, v, do0, &d, NULL), FA_OK);
        assert_int_equal(fa__cu_check(&d), FA_OK);
        assert_int_equal(fa__cu_pick(&d, q, k, v, do0, &pl), FA_OK);
        assert_int_equal(pl.kernel, D == 128 ? FA__CU_WG_D128 : FA__CU_WG_D64);
        assert_int_equal(pl.mods, sh[c].cap > 0.0f ? 1 : 0);
        assert_int_equal(pl.bq, sh[c].bq);
        assert_int_equal(other(&sh[c], &d, &pl, q, k, v, do0), FA_OK);
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(o1, do1, nq * 2, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(o0, do0, nq * 2, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(l1, dl1, nl * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(l0, dl0, nl * 4, cudaMemcpyDeviceToHost));
        if (memcmp(o1, o0, nq * 2) || memcmp(l1, l0, nl * 4)) {
            size_t first = 0;
            while (first < nq && !memcmp(o1 + 2 * first, o0 + 2 * first, 2)) first++;
            print_error("%s: %s: o %s (first element %zu), lse %s\n", what, sh[c].name,
                        memcmp(o1, o0, nq * 2) ? "differs" : "same", first, memcmp(l1, l0, nl * 4) ? "differs" : "same");
            fail();
        }
        for (i = 0; i < nq; i++) {   /* not a test of zeros or of the poison: finite, rows with keys not 0 */
            uint16_t u;
            memcpy(&u, o1 + 2 * i, 2);
            assert_true(isfinite(ref_bf16_to_f32(u)));
            nonzero += u != 0;
        }
        assert_true(nonzero > nq / 8);   /* (causal sq > sk: rows before Sq - Sk see no key, o = 0) */
        cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(do1); cudaFree(do0); cudaFree(dl1); cudaFree(dl0);
        free(hq); free(hk); free(hv); free(o1); free(o0); free(l1); free(l0);
    }
#else
    (void)what; (void)sh; (void)n; (void)other;
#endif
}

#if FA__WG
static fa_status wg_os0_other(const wg_case *c, const fa__dims *d, const fa__cu_plan *pl, const void *q, const void *k,
                              const void *v, void *o)
{
    assert_true((int)fa__wg_geom<fa__wg_d128>::OS && (int)fa__wg_geom<fa__wg_d64>::OS && (int)fa__wg_geom<fa__wg_d64x2>::OS);
    return c->D == 128 ? (pl->mods ? wg_os0_run<fa__wg_d128, 1>(d, q, k, v, o) : wg_os0_run<fa__wg_d128, 0>(d, q, k, v, o))
           : c->bq == 192 ? wg_os0_run<fa__wg_d64, 0>(d, q, k, v, o)
                          : wg_os0_run<fa__wg_d64x2, 0>(d, q, k, v, o);
}

/* the picked configuration in the schedule that it does not use (8a's PER: 1 <-> 3) */
static fa_status wg_per_other(const wg_case *c, const fa__dims *d, const fa__cu_plan *pl, const void *q, const void *k,
                              const void *v, void *o)
{
    (void)pl;
    if (c->D == 128) return fa__wg_d128::PER == 3 ? wg_per_run<fa__wg_d128, 1>(d, q, k, v, o) : wg_per_run<fa__wg_d128, 3>(d, q, k, v, o);
    if (c->bq == 192) return fa__wg_d64::PER == 3 ? wg_per_run<fa__wg_d64, 1>(d, q, k, v, o) : wg_per_run<fa__wg_d64, 3>(d, q, k, v, o);
    return fa__wg_d64x2::PER == 3 ? wg_per_run<fa__wg_d64x2, 1>(d, q, k, v, o) : wg_per_run<fa__wg_d64x2, 3>(d, q, k, v, o);
}
#endif

/* bf16 o and lse of fa_cuda_tiled (the picked Hopper kernel, OS 1: o staged in shared memory) bit
   for bit those of the same kernel with OS 0, on fresh normal inputs: every block (D = 128; D = 64's
   192- and 128-row blocks), the plain and the overlapped (softcap at D = 128) loops, partial tiles,
   QE's rows before row 0, tiles with no key (o from the registers either way), and more tiles than
   SMs with items of 1-3 key tiles (the K stage that holds o at D = 128 is the ring's next refill). */
static void test_wg_store(void **state)
{
    static const wg_case sh[] = {
        { "d128 causal sq>sk 288 tiles", 3, 8, 2, 1500, 300, 128, 1, 0.0f, 128, 1 },
        { "d128 384 tiles of 2 key tiles", 4, 16, 4, 700, 200, 128, 0, 0.0f, 128, 1 },
        { "d128 1000x1100 softcap", 1, 6, 3, 1000, 1100, 128, 0, 10.0f, 128, 0 },
        { "d128 causal 1031 softcap 160 tiles", 2, 10, 5, 1031, 1031, 128, 1, 5.0f, 128, 0 },
        { "d64 causal 2176 (192 rows)", 2, 6, 2, 2176, 2176, 64, 1, 0.0f, 192, 0 },
        { "d64 600x1500 (192 rows)", 2, 16, 4, 600, 1500, 64, 0, 0.0f, 192, 0 },
        { "d64 causal sq>sk 288 tiles (128 rows)", 3, 8, 2, 1500, 300, 64, 1, 0.0f, 128, 1 },
    };
    (void)state;
    if (!g_hopper) skip();
#if FA__WG
    wg_same_bits("wg store", sh, COUNT(sh), wg_os0_other);
#endif
}

/* The persistent blocks' schedules (8a's PER 1: causal in one longest-first run, non-causal in L2
   groups; 3: causal in pairs of a head, section 1's fa__qtile_zig, non-causal the heads one after
   another) give the same bits: a block's tile is its own work whoever walks it.
   Shapes with at least two tiles a block on a 132-SM device (PER 3's pairs in use): an even and an
   odd count of tiles a head, an odd count of heads (a pair of middle tiles across two heads, a
   lone last tile), Sq != Sk (bottom-right), GQA, and each block (D = 128; D = 64's 192 rows with
   tiles that end at row Sq; D = 64's 128-row block, where rows see fewer than 1024 keys); and two
   non-causal requests (PER 3's heads one after another against PER 1's L2 groups). */
static void test_wg_order(void **state)
{
    static const wg_case sh[] = {
        { "d128 causal 512, 66 heads (4 tiles a head)", 3, 22, 11, 512, 512, 128, 1, 0.0f, 128, 1 },
        { "d128 causal 1024 (8 tiles a head)", 4, 16, 4, 1024, 1024, 128, 1, 0.0f, 128, 0 },
        { "d128 causal 1100, 33 heads (9 tiles)", 3, 11, 1, 1100, 1100, 128, 1, 0.0f, 128, 0 },
        { "d128 causal 1500x1800", 2, 24, 6, 1500, 1800, 128, 1, 0.0f, 128, 0 },
        { "d64 causal 2112, 25 heads (11 tiles of 192)", 5, 5, 5, 2112, 2112, 64, 1, 0.0f, 192, 0 },
        { "d64 causal 2176 (12 tiles of 192)", 2, 12, 3, 2176, 2176, 64, 1, 0.0f, 192, 0 },
        { "d64 causal 900, 45 heads (128 rows)", 3, 15, 5, 900, 900, 64, 1, 0.0f, 128, 1 },
        { "d128 non-causal 700x900, 40 heads", 2, 20, 4, 700, 900, 128, 0, 0.0f, 128, 1 },
        { "d64 non-causal 2100x1300 (192 rows)", 2, 8, 8, 2100, 1300, 64, 0, 0.0f, 192, 0 },
    };
    (void)state;
    if (!g_hopper) skip();
#if FA__WG
    wg_same_bits("wg order", sh, COUNT(sh), wg_per_other);
#endif
}

/* ---- every kernel of the picker served some run of the grid (full grid, all tests run) ---------- */

static void test_kernels_served(void **state)
{
    int k, n = 0;
    (void)state;
    if (g_small || getenv("FA_FILTER")) skip();   /* the reduced grid does not reach every kernel */
    for (k = 0; k < FA__CU_KERNELS; k++) {
        int m, runs = 0;
        for (m = 0; m < 5; m++) runs += g_served[k][m];
        printf("  %-16s %4d tiled runs", fa__cu_kernel_name((fa__cu_kernel)k), runs);
        const int wg = k == FA__CU_WG_D128 || k == FA__CU_WG_D64, tc = k == FA__CU_TC_D64 || k == FA__CU_TC_D128;
        const int modded = (tc && !g_hopper) || (wg && g_hopper);   /* on a Hopper the mma.sync kernel serves Sk = 0 */
        if (tc || wg)
            printf(" (variants 0/1/2/4: %d/%d/%d/%d)", g_served[k][0], g_served[k][1], g_served[k][2], g_served[k][4]);
        printf("\n");
        if (wg && !g_hopper) continue;   /* the Hopper kernel serves compute capability 9.0 alone */
        if (runs == 0) { print_error("  no run was served by %s\n", fa__cu_kernel_name((fa__cu_kernel)k)); n++; }
        if ((k == FA__CU_DEC_TC_D64 || k == FA__CU_DEC_TC_D128 || k == FA__CU_DEC_TC_D64_R32 || k == FA__CU_DEC_TC_D128_R32) &&
            (!g_served[k][0] || !g_served[k][4])) {
            print_error("  %s: a modifier variant served no run\n", fa__cu_kernel_name((fa__cu_kernel)k));
            n++;
        }
        if ((modded || (tc && !g_small)) && (!g_served[k][0] || !g_served[k][1] || !g_served[k][2] || !g_served[k][4])) {
            print_error("  %s: a modifier variant served no run\n", fa__cu_kernel_name((fa__cu_kernel)k));
            n++;
        }
    }
    if (g_hopper) {   /* D = 64 runs in both of its blocks, variants 0-2 in the 192-row one (fa__wg_wide) */
        printf("  wg_d64 blocks: 128 rows %d/%d/%d/%d, 192 rows %d/%d/%d/%d (variants 0/1/2/4)\n", g_wg64_rows[0][0],
               g_wg64_rows[0][1], g_wg64_rows[0][2], g_wg64_rows[0][4], g_wg64_rows[1][0], g_wg64_rows[1][1],
               g_wg64_rows[1][2], g_wg64_rows[1][4]);
        if (!g_wg64_rows[0][0] || !g_wg64_rows[0][4] || !g_wg64_rows[1][0] || !g_wg64_rows[1][1] || !g_wg64_rows[1][2] ||
            g_wg64_rows[1][4]) {
            print_error("  wg_d64: a block served no run, or variant 4 ran in the 192-row block\n");
            n++;
        }
        printf("  more query tiles than SMs (%d): wg_d64 %d/%d/%d/%d, wg_d128 %d/%d/%d/%d (variants 0/1/2/4)\n", g_sms,
               g_wg_multi[0][0], g_wg_multi[0][1], g_wg_multi[0][2], g_wg_multi[0][4], g_wg_multi[1][0],
               g_wg_multi[1][1], g_wg_multi[1][2], g_wg_multi[1][4]);
        for (k = 0; k < 2; k++)
            if (!g_wg_multi[k][0] || !g_wg_multi[k][1] || !g_wg_multi[k][2] || !g_wg_multi[k][4]) {
                print_error("  %s: a modifier variant had no run with more query tiles than SMs\n", k ? "wg_d128" : "wg_d64");
                n++;
            }
    }
    assert_int_equal(n, 0);
}

/* ---- timing (FA_TIME=1): TFLOP/s, printed, not asserted ---------------------------------------- */

static double time_call(int tiled, const fa_params *p, void *q, void *k, void *v, void *o, int iters)
{
    cudaEvent_t a, b;
    float ms = 0.0f;
    int i;
    fa_status st;
    CU(cudaEventCreate(&a)); CU(cudaEventCreate(&b));
    st = tiled ? fa_cuda_tiled(p, q, k, v, o) : fa_cuda_naive(p, q, k, v, o, NULL);
    if (st != FA_OK) return -1.0;
    CU(cudaEventRecord(a, 0));
    for (i = 0; i < iters; i++) {
        if (tiled) fa_cuda_tiled(p, q, k, v, o);
        else fa_cuda_naive(p, q, k, v, o, NULL);
    }
    CU(cudaEventRecord(b, 0));
    CU(cudaEventSynchronize(b));
    CU(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a); cudaEventDestroy(b);
    return ms / iters;
}

static void test_timing(void **state)
{
    static const struct { int tiled; fa_dtype dt; int D, S, causal, bk, bq, kind; } runs[] = {   /* kind: 1 k/v broadcast, 2 decode, 3 bias */
        { 1, FA_F32, 64, 4096, 0, 0, 0, 0 }, { 1, FA_F32, 64, 4096, 1, 0, 0, 0 }, { 1, FA_F32, 64, 4096, 0, 64, 0, 0 },
        { 1, FA_F32, 128, 4096, 0, 0, 0, 0 }, { 1, FA_F32, 128, 4096, 1, 0, 0, 0 }, { 1, FA_F32, 128, 4096, 0, 32, 0, 0 },
        { 1, FA_F32, 128, 4096, 0, 64, 0, 0 }, { 1, FA_F32, 128, 4096, 1, 64, 0, 0 }, { 1, FA_F32, 64, 4096, 1, 64, 0, 0 },
        { 1, FA_F32, 128, 1024, 0, 0, 0, 0 }, { 1, FA_F32, 64, 16384, 1, 0, 0, 0 },
        { 1, FA_F16, 128, 4096, 0, 0, 0, 0 }, { 1, FA_BF16, 64, 4096, 0, 0, 0, 0 },
        { 0, FA_F32, 64, 4096, 0, 0, 0, 0 }, { 0, FA_F32, 128, 4096, 0, 0, 0, 0 }, { 0, FA_F32, 128, 4096, 1, 0, 0, 0 },
        { 0, FA_F16, 128, 4096, 0, 0, 0, 0 }, { 0, FA_BF16, 128, 4096, 0, 0, 0, 0 }, { 0, FA_F16, 64, 4096, 0, 0, 0, 0 },
        /* the fp32 kernels with several blocks per SM (block_q set) */
        { 1, FA_F32, 64, 4096, 0, 0, 64, 0 }, { 1, FA_F32, 64, 4096, 0, 32, 64, 0 }, { 1, FA_F32, 64, 4096, 0, 32, 128, 0 },
        { 1, FA_F32, 64, 4096, 1, 0, 64, 0 }, { 1, FA_F32, 64, 4096, 1, 32, 64, 0 }, { 1, FA_F32, 64, 4096, 1, 32, 128, 0 },
        { 1, FA_F32, 128, 4096, 0, 0, 64, 0 }, { 1, FA_F32, 128, 4096, 0, 64, 64, 0 },
        { 1, FA_F32, 128, 4096, 1, 0, 64, 0 }, { 1, FA_F32, 128, 4096, 1, 64, 64, 0 },
        { 1, FA_F32, 128, 1024, 0, 0, 64, 0 }, { 1, FA_F32, 64, 16384, 1, 0, 64, 0 },
        /* causal half precision (the partial tiles' check, test_nan_hidden): the Hopper kernel, then
           the mma.sync kernel (k and v broadcast over the batch: TMA refuses a zero stride), the
           generic kernel (fp16 at D = 80), the decode kernels (B = 4, Sq = 4, Sk = S, GQA 4); then a
           key-padding bias (zeros: every tile checked, none hit) */
        { 1, FA_F16, 128, 4096, 1, 0, 0, 0 }, { 1, FA_BF16, 64, 4096, 1, 0, 0, 0 }, { 1, FA_BF16, 128, 16384, 1, 0, 0, 0 },
        { 1, FA_F16, 128, 4096, 1, 0, 0, 1 }, { 1, FA_BF16, 64, 4096, 1, 0, 0, 1 }, { 1, FA_F16, 80, 4096, 1, 0, 0, 0 },
        { 1, FA_BF16, 128, 16384, 1, 0, 0, 2 }, { 1, FA_F32, 128, 16384, 1, 0, 0, 2 },
        { 1, FA_BF16, 128, 4096, 0, 0, 0, 3 }, { 1, FA_F32, 64, 4096, 0, 0, 0, 3 },
    };
    size_t i;
    void *q, *k, *v, *o;
    (void)state;
    if (!getenv("FA_TIME")) skip();
    /* 16k tokens, hidden 2048: H = 32 at D = 64, 16 at D = 128 */
    q = dalloc((size_t)16384 * 2048 * 4); k = dalloc((size_t)16384 * 2048 * 4);
    v = dalloc((size_t)16384 * 2048 * 4); o = dalloc((size_t)16384 * 2048 * 4);
    CU(cudaMemset(q, 0, (size_t)16384 * 2048 * 4)); CU(cudaMemset(k, 0, (size_t)16384 * 2048 * 4));
    CU(cudaMemset(v, 0, (size_t)16384 * 2048 * 4));
    printf("TIMING path dtype D S causal block_k block_q: ms TFLOP/s (B x S = 16k tokens, hidden 2048)\n");
    for (i = 0; i < COUNT(runs); i++) {
        fa_params p;
        double ms, fl;
        memset(&p, 0, sizeof p);
        p.batch = 16384 / runs[i].S; p.heads = 2048 / runs[i].D; p.seq_q = p.seq_k = runs[i].S;
        p.head_dim = runs[i].D; p.dtype = runs[i].dt; p.causal = runs[i].causal; p.block_k = runs[i].bk;
        p.block_q = runs[i].bq;
        if (runs[i].kind == 1) {   /* k, v [1][H][S][D] read by every batch */
            p.k_stride[0] = p.v_stride[0] = 0; p.k_stride[1] = p.v_stride[1] = (int64_t)p.seq_k * p.head_dim;
            p.k_stride[2] = p.v_stride[2] = p.head_dim;
        }
        if (runs[i].kind == 2) { p.seq_q = 4; p.kv_heads = p.heads / 4; p.batch = 4; }   /* decode: 4 rows, GQA 4 */
        if (runs[i].kind == 3) { p.bias = (const float *)q; p.bias_stride[0] = p.seq_k; p.bias_stride[3] = 1; }   /* q's zeros */
        ms = time_call(runs[i].tiled, &p, q, k, v, o, runs[i].kind == 2 ? 50 : runs[i].S >= 16384 ? 2 : 5);
        fl = 4.0 * p.batch * p.heads * (double)p.seq_q * p.seq_k * p.head_dim * (runs[i].causal && !runs[i].kind ? 0.5 : 1.0);
        printf("TIMING %s %s D=%d S=%d causal=%d bk=%d bq=%d kind=%d: %.3f ms %.1f TFLOP/s\n",
               runs[i].tiled ? "tiled" : "naive", dt_name(runs[i].dt), runs[i].D, runs[i].S, runs[i].causal, runs[i].bk,
               runs[i].bq, runs[i].kind, ms, ms > 0 ? fl / ms * 1e-9 : 0.0);
        fflush(stdout);
    }
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_shapes_fp32),
        cmocka_unit_test(test_large_scores),
        cmocka_unit_test(test_modifiers_fp32),
        cmocka_unit_test(test_fp32_other_kernels),
        cmocka_unit_test(test_fp32_multiblock_kernels),
        cmocka_unit_test(test_shapes_half),
        cmocka_unit_test(test_modifiers_half),
        cmocka_unit_test(test_lazy_rescale),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_ex2_poly_device),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_decode_rows),
        cmocka_unit_test(test_decode_batch_invariance),
        cmocka_unit_test(test_decode_nan),
        cmocka_unit_test(test_decode_launch),
        cmocka_unit_test(test_nan_hidden),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_wg_store),
        cmocka_unit_test(test_wg_order),
        cmocka_unit_test(test_kernels_served),
        cmocka_unit_test(test_timing),
    };
    int n = 0;
    g_small = getenv("SMALL") && atoi(getenv("SMALL")) != 0;
    if (getenv("FA_TIME")) cmocka_set_test_filter("test_timing");   /* the timing pass alone */
    else if (getenv("FA_FILTER")) cmocka_set_test_filter(getenv("FA_FILTER"));
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 0;
    }
    {
        int dev = 0, major = 0, minor = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
            printf("FAILED: the device cannot be queried\n");
            return 1;
        }
        g_hopper = major == 9 && minor == 0;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
