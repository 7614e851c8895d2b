/* tests/test_cuda_backward.cu - the CUDA backward against the float64 reference (cmocka, nvcc).

   fa_cuda_naive_backward, fa_cuda_tiled_backward and fa_cuda_tiled_backward with
   p.deterministic = 1 on the CPU backward suite's grid (tests/test_backward.c: sequence lengths,
   head dims, block sizes, GQA, causal and windows, every modifier, strides, empty calls), each case
   in fp32, fp16 and bf16, against ref_attention_backward() of tests/ref.h fed the same rounded
   inputs, at API.md's tolerances (fp32 fa_allclose(dx, ref, 1e-4, 1e-5) for each of dq, dk, dv;
   fp16 ||dx-ref||/||ref|| <= 2e-3, bf16 <= 1e-2; where ||ref|| = 0, the RMS of dx). The forward's o and lse come from fa_cuda_tiled
   with the same p, as in training. Gradient buffers are poisoned (0xFF bytes) before each call and
   checked written in every row and nowhere else. Every tiled run asserts which kernel served it
   (fa__cu_pick_backward against want_kernel, the documented rule written out: the tensor-core
   backward for fp16/bf16 at D = Dv = 64/128 with aligned rows, on an H100/H200 the Hopper backward
   where TMA takes q, k, v and d_o, its 3xTF32 form for fp32 at the same head dims with aligned
   rows, else FFMA), and test_kernels_served that each kernel served (the Hopper ones on such a
   device; the 3xTF32 ones unless FLASHATTN_CUDA_FP32_FFMA, and then none);
   test_tc_semantics runs the modifiers, masks and layouts at the tensor-core head dims (fp32 too), and
   test_tc_mma_on_hopper the same through the mma.sync kernels on a Hopper device.
   Also: deterministic mode gives the same bits in ten runs on a non-default stream; refused
   requests leave every gradient untouched; an impossible naive size is FA_ERR_NO_MEMORY.

   Environment: SMALL=1 runs a reduced grid (for compute-sanitizer); FA_DTYPES=n the grid's dtypes
   only (bits 1 f32, 2 f16, 4 bf16: racecheck on the reduced grid takes minutes per dtype);
   FA_FILTER a cmocka test-name filter. Build: the Makefile's
   build/test_cuda_backward rule; run by tests/run_cuda.sh. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
extern "C" {
#include <cmocka.h>
}

#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN__TEST_SWITCHES   /* fa__cu_bwd_mma_only (8f) */
#define FLASHATTN_CUDA
#ifndef FLASHATTN_NO_BLAS
#define FLASHATTN_NO_BLAS
#endif
#include "flashattn.h"
#include "ref.h"

static int g_small = 0;
static int g_dtypes = 7;   /* FA_DTYPES: the dtypes run_case runs, bits 1 f32, 2 f16, 4 bf16 */
static int g_served[FA__CU_BWD_KERNELS];
static int g_failed = 0;

#include "cuda_util.h"

/* ---- a case ------------------------------------------------------------------------------------ */

enum { P_NAIVE = 0, P_TILED = 1, P_DET = 2 };
static const char *const path_name[3] = { "naive", "tiled", "tiled deterministic" };

/* bias: strides (all zero with on: packed) and which keys it hides */
enum { HIDE_NONE = 0, HIDE_KEYPAD, HIDE_ROWS_TILE };
typedef struct bspec { int on; int64_t st[4]; int hide; } bspec;
static const bspec NOBIAS = { 0, { 0, 0, 0, 0 }, 0 };

static fa_params shape(int B, int Hq, int Hkv, int Sq, int Sk, int D, int Dv)
{
    fa_params p;
    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = Hq; p.kv_heads = Hkv; p.seq_q = Sq; p.seq_k = Sk; p.head_dim = D; p.head_dim_v = Dv;
    return p;
}

static void bshd(fa_params *p, int pad)
{
    int Dv = p->head_dim_v ? p->head_dim_v : p->head_dim, Hkv = p->kv_heads ? p->kv_heads : p->heads;
    int64_t rq = (int64_t)p->heads * p->head_dim + pad, rk = (int64_t)Hkv * p->head_dim + pad;
    int64_t rv = (int64_t)Hkv * Dv + pad, ro = (int64_t)p->heads * Dv + pad;
    p->q_stride[0] = rq * p->seq_q; p->q_stride[1] = p->head_dim; p->q_stride[2] = rq;
    p->k_stride[0] = rk * p->seq_k; p->k_stride[1] = p->head_dim; p->k_stride[2] = rk;
    p->v_stride[0] = rv * p->seq_k; p->v_stride[1] = Dv; p->v_stride[2] = rv;
    p->o_stride[0] = ro * p->seq_q; p->o_stride[1] = Dv; p->o_stride[2] = ro;
}

static uint64_t name_seed(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* 1 when a 16-bit tensor's rows all start 16-byte aligned: the pointer, and strides in whole
   8-element units */
static int rows16(const void *x, const int64_t s[3])
{
    return ((uintptr_t)x & 15) == 0 && s[0] % 8 == 0 && s[1] % 8 == 0 && s[2] % 8 == 0;
}

/* 1 when an fp32 tensor's rows all start 16-byte aligned: the pointer, and strides in whole
   4-element units */
static int rows16f(const void *x, const int64_t s[3])
{
    return ((uintptr_t)x & 15) == 0 && s[0] % 4 == 0 && s[1] % 4 == 0 && s[2] % 4 == 0;
}

/* The kernel fa_cuda_tiled_backward must run (written out here from the documented rule, not asked
   of the picker): the tensor-core backward for fp16/bf16 at D = Dv = 64 or 128 with every tensor's
   rows 16-byte aligned on an sm_80+ device, and its fp32 (3xTF32) form for fp32 under the same
   rule (not under FLASHATTN_CUDA_FP32_FFMA); else the FFMA backward of max(D, Dv)'s class. */
/* 1 on a device of compute capability 9.0 running this build's sm_90a code: the Hopper backward's
   (8e3) devices */
static int hopper_bwd(void)
{
    int dev = 0, major = 0, minor = 0;
    CU(cudaGetDevice(&dev));
    CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CU(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
#if FA__WG
    return major == 9 && minor == 0 && fa__wg_built();
#else
    return 0;
#endif
}

static fa__cu_bwd_kernel want_kernel(const fa__dims *d, const void *q, const void *k, const void *v, const void *d_o,
                                     const void *dq, const void *dk, const void *dv)
{
    const int dc = d->D > d->Dv ? d->D : d->Dv;
    int dev = 0, major = 0;
    CU(cudaGetDevice(&dev));
    CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if ((d->dtype == FA_F16 || d->dtype == FA_BF16) && d->D == d->Dv && (d->D == 64 || d->D == 128) && major >= 8 &&
        rows16(q, d->qs) && rows16(k, d->ks) && rows16(v, d->vs) && rows16(d_o, d->os) && rows16(dq, d->qs) &&
        rows16(dk, d->ks) && rows16(dv, d->vs)) {
#if FA__WG
        if (hopper_bwd() && !fa__cu_bwd_mma_only && fa__wg_tma_ok(q, d->qs, d->Sq, d->Hq, d->B) &&
            fa__wg_tma_ok(d_o, d->os, d->Sq, d->Hq, d->B) && fa__wg_tma_ok(k, d->ks, d->Sk, d->Hkv, d->B) &&
            fa__wg_tma_ok(v, d->vs, d->Sk, d->Hkv, d->B))
            return d->D == 64 ? FA__CU_BWD_WG_D64 : FA__CU_BWD_WG_D128;
#endif
        return d->D == 64 ? FA__CU_BWD_TC_D64 : FA__CU_BWD_TC_D128;
    }
    if (FA__CU_BWD_TC32 && d->dtype == FA_F32 && d->D == d->Dv && (d->D == 64 || d->D == 128) && major >= 8 &&
        rows16f(q, d->qs) && rows16f(k, d->ks) && rows16f(v, d->vs) && rows16f(d_o, d->os) && rows16f(dq, d->qs) &&
        rows16f(dk, d->ks) && rows16f(dv, d->vs))   /* FA__CU_BWD_TC32: 0 under FLASHATTN_CUDA_FP32_FFMA */
        return d->D == 64 ? FA__CU_BWD_TC32_D64 : FA__CU_BWD_TC32_D128;
    return dc <= 64 ? FA__CU_BWD_D64 : dc <= 128 ? FA__CU_BWD_D128 : FA__CU_BWD_D256;
}

/* The gradient x (device, strided like its input, n_elems elements) against the packed reference:
   every byte outside its rows still poisoned, and the rows within the dtype's tolerance. nan_rows:
   a row (of width elements) holds a NaN exactly where the reference's row does, and the other rows
   are compared (test_nan_isolation). */
static int check_grad(const char *name, const char *what, fa_dtype dt, const void *x, size_t n_elems, int64_t n0,
                      int64_t n1, int64_t n2, int width, const int64_t st[3], const float *ref0, size_t n,
                      int nan_rows = 0)
{
    const size_t es = esize(dt);
    unsigned char *raw = (unsigned char *)malloc(n_elems * es + 1), *in_row = (unsigned char *)calloc(n_elems + 1, 1);
    float *h = ref_alloc(n_elems), *packed = ref_alloc(n), *ref = ref_alloc(n);
    int64_t a, b, c;
    size_t e;
    int ok = 1;
    assert_true(raw && in_row && h && packed && ref);
    if (n) memcpy(ref, ref0, n * sizeof(float));
    download(h, x, n_elems, dt, raw);
    for (a = 0; a < n0; a++)
        for (b = 0; b < n1; b++)
            for (c = 0; c < n2; c++) memset(in_row + a * st[0] + b * st[1] + c * st[2], 1, (size_t)width);
    for (e = 0; e < n_elems; e++)
        if (!in_row[e] && !ref_is_poison(raw + e * es, es)) {
            print_error("  FAIL %s: %s element %zu outside its rows was written\n", name, what, e);
            ok = 0;
            break;
        }
    ref_gather(h, n0, n1, n2, width, st, packed);
    if (nan_rows && width > 0) {
        size_t r, t, bad = 0;
        for (r = 0; r < n / (size_t)width; r++) {
            int want = 0, got = 0;
            for (t = 0; t < (size_t)width; t++) {
                want |= ref[r * width + t] != ref[r * width + t];
                got |= packed[r * width + t] != packed[r * width + t];
            }
            if (want != got && bad++ < 4)
                print_error("  FAIL %s: %s row %zu %s\n", name, what, r, want ? "lost its NaN" : "is NaN, unreached");
            if (want || got)
                for (t = 0; t < (size_t)width; t++) ref[r * width + t] = packed[r * width + t] = 0.0f;
        }
        if (bad) ok = 0;
    }
    if (n > 0) {
        if (dt == FA_F32) {
            if (!fa_allclose(packed, ref, n, 1e-4f, 1e-5f)) {
                size_t w = ref_worst(packed, ref, n, 1e-4, 1e-5);
                print_error("  FAIL %s: %s not allclose(1e-4, 1e-5): max |diff| %g; worst [%zu] got %.9g want %.9g\n",
                            name, what, fa_max_abs_diff(packed, ref, n), w, w == (size_t)-1 ? 0.0 : (double)packed[w],
                            w == (size_t)-1 ? 0.0 : (double)ref[w]);
                ok = 0;
            }
        } else {
            /* ||ref|| = 0 (one visible key: dS = P (dP - delta) is 0 exactly, while delta comes from
               the 16-bit o): no relative measure exists, so the RMS of dx stands in for it */
            double den = 0.0, rel, tol = dt == FA_F16 ? 2e-3 : 1e-2;
            for (e = 0; e < n; e++) den += (double)ref[e] * ref[e];
            if (den > 0.0) {
                rel = ref_rel_error(packed, ref, n);
            } else {
                rel = 0.0;
                for (e = 0; e < n; e++) rel += (double)packed[e] * packed[e];
                rel = packed[0] != packed[0] ? NAN : sqrt(rel / (double)n);
            }
            if (!(rel <= tol)) {
                print_error("  FAIL %s: %s relative error %g > %g%s\n", name, what, rel, tol, den > 0.0 ? "" : " (RMS: reference 0)");
                ok = 0;
            }
        }
    }
    free(raw); free(in_row); free(h); free(packed); free(ref);
    return ok;
}

/* One backward call on path (after the gradients were poisoned): a tiled call first asserts that the
   kernel the documented rules name serves it (want_kernel, counted in g_served). Returns 1 when the
   call succeeded; else prints, clears *ok and returns 0. */
static int call_path(const char *pname, const fa_params *pd, int path, const void *xq, const void *xk,
                     const void *xv, const void *xo, const void *xdo, void *gq, void *gk, void *gv, int *ok)
{
    fa_status st;
    if (path != P_NAIVE && pd->seq_q > 0 && pd->seq_k > 0) {
        fa__dims dd;
        fa__cu_bwd_plan plan;
        assert_int_equal(fa__cu_bwd_resolve(pd, xq, xk, xv, xo, xdo, gq, gk, gv, 1, &dd), FA_OK);
        const fa__cu_bwd_kernel want = want_kernel(&dd, xq, xk, xv, xdo, gq, gk, gv);
        assert_int_equal(fa__cu_pick_backward(&dd, xq, xk, xv, xdo, gq, gk, gv, &plan), FA_OK);
        if (plan.kernel != want) {
            print_error("  FAIL %s: served by %s, want %s\n", pname, fa__cu_bwd_kernel_name(plan.kernel),
                        fa__cu_bwd_kernel_name(want));
            *ok = 0;
        }
        if (getenv("VERBOSE")) printf("  %s: %s\n", pname, fa__cu_bwd_kernel_name(plan.kernel));
        g_served[plan.kernel]++;
    }
    st = path == P_NAIVE ? fa_cuda_naive_backward(pd, xq, xk, xv, xo, xdo, gq, gk, gv)
                         : fa_cuda_tiled_backward(pd, xq, xk, xv, xo, xdo, gq, gk, gv);
    CU(cudaDeviceSynchronize());
    if (st != FA_OK) {
        print_error("  FAIL %s: status %s\n", pname, fa_status_string(st));
        *ok = 0;
        return 0;
    }
    return 1;
}

/* One case on every dtype of dts (bits 1 f32, 2 f16, 4 bf16) and every path of paths (bits 1 naive,
   2 tiled, 4 deterministic). Failures are printed and counted; the test fails at its end. */
/* dq's buffer this many elements past a cudaMalloc'd (256-byte aligned) address in run_case: 1 puts
   it off 16-byte alignment while its strides stay as they are */
static int g_dq_shift = 0;

static void run_case(const char *name0, fa_params p0, bspec bs, int alibi, int dts, int paths)
{
    static const fa_dtype dtl[3] = { FA_F32, FA_F16, FA_BF16 };
    int di;
    for (di = 0; di < 3; di++) {
        fa_params p = p0, pd;
        ref_rng r;
        ref_tensors t;
        ref_dims rd;
        char name[256];
        float *d_o, *bias = NULL, *slopes = NULL, *rdq, *rdk, *rdv;
        void *gq, *gk, *gv, *gdo, *go, *xq, *xk, *xv, *dbias = NULL, *dslopes = NULL;
        float *dlse;
        size_t nbias = 0, nslopes = 0, rows, ndq, ndk, ndv, e;
        const fa_dtype dt = dtl[di];
        const size_t es = esize(dt);
        int path, ok = 1;
        fa_status st;
        if (!(dts & g_dtypes & (1 << di))) continue;
        p.dtype = dt;
        snprintf(name, sizeof name, "%s [%s]", name0, dt_name(dt));
        ref_seed(&r, name_seed(name));
        assert_true(ref_tensors_make(&p, &r, &t));
        d_o = ref_alloc(t.no);
        assert_non_null(d_o);
        ref_fill_normal(&r, d_o, t.no);
        ref_round_to(dt, t.q, t.nq); ref_round_to(dt, t.k, t.nk); ref_round_to(dt, t.v, t.nv); ref_round_to(dt, d_o, t.no);
        if (bs.on) {
            memcpy(p.bias_stride, bs.st, sizeof bs.st);
            nbias = ref_bias_elems(&p);
            bias = ref_alloc(nbias);
            assert_non_null(bias);
            ref_fill_normal(&r, bias, nbias);
            if (bs.hide == HIDE_KEYPAD) {          /* [B][Sk]: batch 0 hides keys from 70, batch 1 every key */
                int j;
                for (j = 70; j < p.seq_k; j++) bias[j] = -INFINITY;
                for (j = 0; j < p.seq_k && p.batch > 1; j++) bias[p.seq_k + j] = -INFINITY;
            } else if (bs.hide == HIDE_ROWS_TILE) { /* [Sq][Sk]: row 5 sees nothing, keys 0-39 hidden from rows < 70 */
                int i, j;
                for (j = 0; j < p.seq_k; j++) bias[5 * p.seq_k + j] = -INFINITY;
                for (i = 0; i < 70 && i < p.seq_q; i++) for (j = 0; j < 40 && j < p.seq_k; j++) bias[i * p.seq_k + j] = -INFINITY;
            }
            p.bias = bias;
        }
        if (alibi) {
            int B = alibi == 2 ? p.batch : 1, b, h;
            nslopes = (size_t)B * p.heads;
            slopes = ref_alloc(nslopes);
            assert_non_null(slopes);
            for (b = 0; b < B; b++)
                for (h = 0; h < p.heads; h++)
                    slopes[(size_t)b * p.heads + h] = (float)(pow(2.0, -8.0 * (h + 1) / p.heads) * (1.0 + 0.25 * b));
            p.alibi_slopes = slopes;
            p.alibi_stride = alibi == 2 ? p.heads : 0;
        }
        ref_dims_of(&p, &rd);
        rows = (size_t)rd.B * rd.Hq * rd.Sq;
        ndq = rows * rd.D; ndk = (size_t)rd.B * rd.Hkv * rd.Sk * rd.D; ndv = (size_t)rd.B * rd.Hkv * rd.Sk * rd.Dv;
        rdq = ref_alloc(ndq); rdk = ref_alloc(ndk); rdv = ref_alloc(ndv);
        assert_true(rdq && rdk && rdv);
        assert_true(ref_attention_backward(&p, t.q, t.k, t.v, d_o, rdq, rdk, rdv));

        xq = upload(t.q, t.nq, dt); xk = upload(t.k, t.nk, dt); xv = upload(t.v, t.nv, dt); gdo = upload(d_o, t.no, dt);
        go = dalloc(t.no * es);
        dlse = (float *)dalloc((rows + 1) * 4);
        if (bias) dbias = upload(bias, nbias, FA_F32);
        if (slopes) dslopes = upload(slopes, nslopes, FA_F32);
        gq = (char *)dalloc(t.nq * es + g_dq_shift * es) + g_dq_shift * es;
        gk = dalloc(t.nk * es); gv = dalloc(t.nv * es);
        pd = p;
        pd.bias = (const float *)dbias; pd.alibi_slopes = (const float *)dslopes; pd.lse = dlse;
        st = fa_cuda_tiled(&pd, xq, xk, xv, go);
        CU(cudaDeviceSynchronize());
        if (st != FA_OK) fail_msg("%s: forward: %s", name, fa_status_string(st));
        for (path = 0; path < 3; path++) {
            char pname[300];
            if (!(paths & (1 << path))) continue;
            snprintf(pname, sizeof pname, "%s %s", name, path_name[path]);
            pd.deterministic = path == P_DET;
            CU(cudaMemset(gq, 0xFF, t.nq * es)); CU(cudaMemset(gk, 0xFF, t.nk * es)); CU(cudaMemset(gv, 0xFF, t.nv * es));
            if (!call_path(pname, &pd, path, xq, xk, xv, go, gdo, gq, gk, gv, &ok)) continue;
            ok &= check_grad(pname, "dq", dt, gq, t.nq, rd.B, rd.Hq, rd.Sq, rd.D, rd.qs, rdq, ndq);
            ok &= check_grad(pname, "dk", dt, gk, t.nk, rd.B, rd.Hkv, rd.Sk, rd.D, rd.ks, rdk, ndk);
            ok &= check_grad(pname, "dv", dt, gv, t.nv, rd.B, rd.Hkv, rd.Sk, rd.Dv, rd.vs, rdv, ndv);
        }
        (void)e;
        cudaFree(xq); cudaFree(xk); cudaFree(xv); cudaFree(gdo); cudaFree(go); cudaFree(dlse);
        cudaFree((char *)gq - g_dq_shift * es); cudaFree(gk); cudaFree(gv);
        if (dbias) cudaFree(dbias);
        if (dslopes) cudaFree(dslopes);
        free(d_o); free(bias); free(slopes); free(rdq); free(rdk); free(rdv);
        ref_tensors_free(&t);
        if (!ok) g_failed++;
        else if (getenv("VERBOSE")) printf("  ok %s\n", name);
    }
}

#define ALL_DT 7
#define ALL_PATHS 7

static void end_test(void)
{
    int n = g_failed;
    g_failed = 0;
    if (n) fail_msg("%d case(s) failed", n);
}

/* ---- the grid (tests/test_backward.c's cases) --------------------------------------------------- */

static void test_seq_lengths(void **state)
{
    static const int S[] = { 1, 2, 15, 16, 17, 63, 64, 65, 95, 96, 97, 130, 200, 257, 1031 };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof S / sizeof S[0]; i++) {
        char name[64];
        fa_params p = shape(1, 2, 2, S[i], S[i], 64, 64);
        if (g_small && S[i] > 97) continue;
        snprintf(name, sizeof name, "S=%d", S[i]);
        run_case(name, p, NOBIAS, 0, ALL_DT, ALL_PATHS);
        p.causal = 1;
        snprintf(name, sizeof name, "S=%d causal", S[i]);
        run_case(name, p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    }
    end_test();
}

static void test_head_dims(void **state)
{
    static const int D[] = { 1, 3, 64, 80, 128, 256 };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof D / sizeof D[0]; i++) {
        char name[64];
        fa_params p = shape(2, 2, 1, 70, 83, D[i], D[i]);
        if (g_small && (D[i] == 80 || D[i] == 128)) continue;
        snprintf(name, sizeof name, "D=%d", D[i]);
        run_case(name, p, NOBIAS, 0, ALL_DT, ALL_PATHS);
        p = shape(1, 2, 2, 33, 130, D[i], D[i] == 1 ? 5 : D[i] / 2 + 1);
        p.causal = 1;
        snprintf(name, sizeof name, "D=%d Dv=%d causal", D[i], p.head_dim_v);
        run_case(name, p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    }
    end_test();
}

static void test_block_sizes(void **state)
{
    static const int bq[] = { 1, 7, 16, 33, 500 }, bk[] = { 1, 5, 64, 101, 500 };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof bq / sizeof bq[0]; i++) {
        char name[64];
        fa_params p = shape(1, 2, 1, 77, 150, 32, 32);
        if (g_small && i > 1) continue;
        p.block_q = bq[i]; p.block_k = bk[i]; p.causal = (int)(i & 1);
        snprintf(name, sizeof name, "block_q=%d block_k=%d causal=%d", bq[i], bk[i], p.causal);
        run_case(name, p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    }
    end_test();
}

static void test_gqa_causal_windows(void **state)
{
    fa_params p;
    (void)state;
    p = shape(2, 8, 2, 100, 100, 64, 64);
    run_case("GQA 8/2", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p = shape(1, 6, 1, 90, 150, 32, 48);
    p.causal = 1;
    run_case("MQA causal Sq < Sk", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p = shape(1, 2, 2, 150, 60, 32, 32);
    p.causal = 1;
    run_case("causal Sq > Sk (hidden rows)", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p = shape(1, 2, 2, 300, 300, 64, 64);
    p.causal = 1; p.window_left = 40;
    run_case("causal sliding window 40 (skipped blocks)", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p = shape(2, 2, 1, 120, 200, 32, 32);
    p.window_left = 17; p.window_right = 9;
    run_case("window 17/9 Sq < Sk", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p = shape(1, 1, 1, 1, 500, 64, 64);
    p.window_left = 30; p.causal = 1;
    run_case("decode row window (keys no row sees)", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    if (g_small) { end_test(); return; }
    p = shape(1, 4, 2, 90, 2100, 32, 40);
    p.causal = 1;
    run_case("Sk = 2100, causal Sq < Sk, GQA", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p.causal = 0; p.window_left = 300; p.window_right = 100;
    run_case("Sk = 2100, window 300/100", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    end_test();
}

static void test_modifiers(void **state)
{
    fa_params p;
    bspec b;
    (void)state;
    p = shape(1, 2, 2, 130, 130, 64, 64);
    p.softcap = 1.5f;
    run_case("softcap 1.5", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p.softcap = 30.0f; p.causal = 1;
    run_case("softcap 30 causal", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p = shape(2, 4, 2, 97, 140, 32, 32);
    p.causal = 1;
    run_case("alibi per head", p, NOBIAS, 1, ALL_DT, ALL_PATHS);
    run_case("alibi per batch", p, NOBIAS, 2, ALL_DT, ALL_PATHS);
    p = shape(2, 2, 1, 70, 90, 32, 32);
    p.scale = 0.37f;
    b = NOBIAS; b.on = 1;
    run_case("bias packed, explicit scale", p, b, 0, ALL_DT, ALL_PATHS);
    b.st[0] = 90; b.st[3] = 1; b.hide = HIDE_KEYPAD;
    run_case("bias [B][Sk] key padding, a batch with every key hidden", p, b, 0, ALL_DT, ALL_PATHS);
    b = NOBIAS; b.on = 1; b.st[2] = 90; b.st[3] = 1; b.hide = HIDE_ROWS_TILE;
    run_case("bias [Sq][Sk] broadcast, hidden rows and a hidden tile", p, b, 0, ALL_DT, ALL_PATHS);
    b = NOBIAS; b.on = 1; b.st[1] = 90; b.st[3] = 1;
    run_case("bias per head [Hq][Sk]", p, b, 0, ALL_DT, ALL_PATHS);
    end_test();
}

static void test_strides_and_everything(void **state)
{
    fa_params p;
    bspec b = NOBIAS;
    (void)state;
    p = shape(2, 4, 2, 81, 101, 32, 48);
    bshd(&p, 0);
    run_case("[B][S][H][D]", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p = shape(2, 4, 2, 81, 101, 32, 48);
    bshd(&p, 7);
    p.causal = 1;
    run_case("[B][S][H][D] with gaps, causal", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
    p = shape(2, 4, 2, 150, 190, 64, 32);
    bshd(&p, 3);
    p.causal = 1; p.window_left = 50; p.softcap = 20.0f; p.scale = 0.2f; p.block_q = 37; p.block_k = 29;
    b.on = 1; b.st[2] = 190; b.st[3] = 1;
    run_case("every feature at once", p, b, 2, ALL_DT, ALL_PATHS);
    if (!g_small) {
        p = shape(2, 4, 2, 600, 700, 128, 128);
        bshd(&p, 8);
        p.causal = 1;
        run_case("d128 bshd causal 600x700 GQA", p, NOBIAS, 0, ALL_DT, ALL_PATHS);
        p = shape(1, 2, 1, 300, 257, 256, 200);
        p.window_left = 64; p.window_right = 32; p.softcap = 10.0f;
        run_case("d256 Dv 200 window softcap", p, NOBIAS, 1, ALL_DT, ALL_PATHS);
    }
    end_test();
}

/* The tensor-core backwards (fp16/bf16, and fp32's 3xTF32 form: D = Dv = 64 or 128, aligned rows)
   on every semantic the grid above runs at other head dims: modifiers, biases that hide keys, rows
   and tiles, windows, causal with Sq != Sk, GQA, strided rows; and misaligned layouts that the rule
   sends to FFMA. g_tc_dts: the dtypes (test_tc_mma_on_hopper: the 16-bit ones, fp32's kernel is the
   same on every device). */
static int g_tc_dts = ALL_DT;
static void test_tc_semantics(void **state)
{
    fa_params p;
    bspec b;
    (void)state;
    p = shape(2, 4, 2, 97, 140, 64, 64);
    p.causal = 1;
    run_case("tc alibi per head, causal Sq < Sk, D=64", p, NOBIAS, 1, g_tc_dts, ALL_PATHS);
    p = shape(2, 4, 2, 97, 140, 128, 128);
    run_case("tc alibi per batch, D=128", p, NOBIAS, 2, g_tc_dts, ALL_PATHS);
    p = shape(1, 2, 2, 130, 130, 128, 128);
    p.softcap = 1.5f;
    run_case("tc softcap 1.5, D=128", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
    p = shape(2, 2, 1, 70, 90, 64, 64);
    p.scale = 0.37f;
    b = NOBIAS; b.on = 1;
    run_case("tc bias packed, explicit scale, D=64", p, b, 0, g_tc_dts, ALL_PATHS);
    b.st[0] = 90; b.st[3] = 1; b.hide = HIDE_KEYPAD;
    run_case("tc bias [B][Sk] key padding, a batch with every key hidden, D=64", p, b, 0, g_tc_dts, ALL_PATHS);
    b = NOBIAS; b.on = 1; b.st[2] = 90; b.st[3] = 1; b.hide = HIDE_ROWS_TILE;
    p = shape(2, 2, 1, 70, 90, 128, 128);
    run_case("tc bias [Sq][Sk], hidden rows and a hidden tile, D=128", p, b, 0, g_tc_dts, ALL_PATHS);
    p = shape(1, 2, 2, 150, 60, 128, 128);
    p.causal = 1;
    run_case("tc causal Sq > Sk (hidden rows), D=128", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
    p = shape(1, 2, 2, 300, 170, 64, 64);   /* the dq pass's 128-row blocks: a ragged one, hidden rows */
    p.causal = 1; p.window_left = 40;
    run_case("tc causal window 40 Sq > Sk (hidden rows), D=64", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
    p = shape(2, 2, 1, 120, 200, 64, 64);
    p.window_left = 17; p.window_right = 9;
    run_case("tc window 17/9 Sq < Sk, D=64", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
    p = shape(2, 4, 2, 150, 190, 64, 64);
    bshd(&p, 8);
    p.causal = 1; p.window_left = 50; p.softcap = 20.0f; p.scale = 0.2f;
    b = NOBIAS; b.on = 1; b.st[2] = 190; b.st[3] = 1;
    run_case("tc every feature at once, [B][S][H][D] with gaps, D=64", p, b, 2, g_tc_dts, ALL_PATHS);
    p = shape(2, 4, 2, 100, 120, 64, 64);
    bshd(&p, 4);
    p.causal = 1;
    run_case("rows not 16-byte aligned (FFMA by rule), D=64", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
    p = shape(2, 4, 2, 100, 120, 128, 128);   /* fp32 rows 8 bytes off (4 floats of padding above are aligned) */
    bshd(&p, 2);
    p.window_left = 30;
    run_case("fp32 rows not 16-byte aligned (FFMA by rule), D=128", p, NOBIAS, 0, 1, ALL_PATHS);
    /* dq's pointer off 16-byte alignment, strides as the Hopper backward takes them: FFMA by rule,
       and on an H100/H200 in the deterministic arrangement in either mode (a workspace sized by the
       dims, fa__cu_bwd_atomics, has no dq buffer) */
    p = shape(2, 4, 2, 100, 120, 64, 64);
    p.causal = 1;
    g_dq_shift = 1;
    run_case("dq 2 bytes off 16-byte alignment (FFMA by rule), D=64", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
    g_dq_shift = 0;
    if (!g_small) {
        p = shape(1, 4, 1, 300, 1100, 128, 128);
        p.causal = 1; p.window_left = 200;
        run_case("tc MQA causal window 200, Sq < Sk, D=128", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
        p = shape(1, 2, 2, 1031, 1031, 128, 128);
        p.causal = 1;
        run_case("tc S=1031 causal, D=128", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
        p = shape(2, 8, 2, 513, 700, 64, 64);
        run_case("tc GQA 8/2 513x700, D=64", p, NOBIAS, 0, g_tc_dts, ALL_PATHS);
    }
    end_test();
}

/* On a Hopper device the picker names the Hopper backward (8e3) wherever the tensor-core backward
   serves: the mma.sync kernels (its fallback elsewhere) run test_tc_semantics's cases here too,
   with the picker told to keep them (fa__cu_bwd_mma_only; want_kernel follows it). */
static void test_tc_mma_on_hopper(void **state)
{
    (void)state;
    if (!hopper_bwd()) skip();
#if FA__WG
    fa__cu_bwd_mma_only = 1;
    g_tc_dts = 6;
    test_tc_semantics(state);   /* (ends the test) */
    g_tc_dts = ALL_DT;
    fa__cu_bwd_mma_only = 0;
#endif
}

static void test_empty(void **state)
{
    (void)state;
    run_case("seq_q = 0", shape(2, 2, 1, 0, 40, 16, 8), NOBIAS, 0, ALL_DT, ALL_PATHS);
    run_case("seq_k = 0", shape(2, 2, 1, 30, 0, 16, 8), NOBIAS, 0, ALL_DT, ALL_PATHS);
    end_test();
}


/* ---- NaN isolation ------------------------------------------------------------------------------
   API.md: a NaN in the inputs may make the rows it reaches NaN, and no others; and it is never lost.
   One non-finite element in q (a NaN; a +inf in a row that sees many keys), d_o, k or v, hidden from
   some rows of its tiles by causal or by a window, at head dims that reach the FFMA kernels and (D =
   64) the tensor-core backwards (fp32's 3xTF32 one too), whose call then runs its FFMA fallback (a v
   that holds one: the tensor-core kernel itself): every path, every
   dtype. o and lse come from the float64 forward (ref_attention) on the same inputs, so that only
   the backward is under test. A row of dq, dk or dv holds a NaN exactly where the float64 reference's
   (ref_attention_backward, which leaves hidden keys out) does, and the other rows match it. The
   last spot, a NaN in q of a call with more tiles than twice the multiprocessors, makes the
   flagged kernels walk several tiles a block. */
static void test_nan_isolation(void **state)
{
    static const fa_dtype dtl[3] = { FA_F32, FA_F16, FA_BF16 };
    static const char *const spot_name[6] = { "q NaN", "q +inf", "d_o NaN", "k NaN", "v NaN", "q NaN, many tiles" };
    int di, Di, mask, spot, path;
    (void)state;
    for (di = 0; di < 3; di++)
        for (Di = 0; Di < 2; Di++)
            for (mask = 0; mask < 2; mask++)
                for (spot = 0; spot < 6; spot++) {
                    const fa_dtype dt = dtl[di];
                    const int D = Di ? 64 : 40, big = spot == 5, B = big ? 8 : 1, HQ = big ? 8 : 4, HKV = big ? 8 : 2;
                    const int S = big ? 300 : 200;
                    const size_t es = esize(dt), nq = (size_t)B * HQ * S * D, nk = (size_t)B * HKV * S * D;
                    const size_t rows = (size_t)B * HQ * S;
                    fa_params p = shape(B, HQ, HKV, S, S, D, D), pd;
                    ref_rng r;
                    char name[160];
                    float *hq = ref_alloc(nq), *hk = ref_alloc(nk), *hv = ref_alloc(nk), *hdo = ref_alloc(nq);
                    float *ho = ref_alloc(nq), *hl = ref_alloc(rows), *rdq = ref_alloc(nq), *rdk = ref_alloc(nk),
                          *rdv = ref_alloc(nk);
                    void *xq, *xk, *xv, *xdo, *xo, *gq, *gk, *gv;
                    float *xl;
                    int ok = 1;
                    if (!(g_dtypes & (1 << di)) || (big && (mask || g_small))) continue;
                    assert_true(hq && hk && hv && hdo && ho && hl && rdq && rdk && rdv);
                    p.dtype = dt;
                    if (mask == 0) p.causal = 1;
                    else { p.window_left = 30; p.window_right = 10; }
                    snprintf(name, sizeof name, "nan: %s, %s, D=%d [%s]", spot_name[spot], mask ? "window" : "causal", D,
                             dt_name(dt));
                    ref_seed(&r, name_seed(name));
                    ref_fill_normal(&r, hq, nq); ref_fill_normal(&r, hk, nk); ref_fill_normal(&r, hv, nk);
                    ref_fill_normal(&r, hdo, nq);
                    ref_round_to(dt, hq, nq); ref_round_to(dt, hk, nk); ref_round_to(dt, hv, nk); ref_round_to(dt, hdo, nq);
                    if (spot == 0) hq[((size_t)1 * S + 70) * D + 2] = NAN;        /* head 1, row 70 */
                    if (spot == 1) hq[((size_t)0 * S + 150) * D + 5] = INFINITY;  /* head 0, row 150 */
                    if (spot == 2) hdo[((size_t)2 * S + 130) * D + 1] = NAN;      /* head 2, row 130 */
                    if (spot == 3) hk[((size_t)0 * S + 150) * D + 3] = NAN;       /* kv head 0, key 150 */
                    if (spot == 4) hv[((size_t)1 * S + 100) * D + 7] = NAN;       /* kv head 1, key 100 */
                    if (spot == 5) hq[((size_t)(5 * HQ + 3) * S + 170) * D + 9] = NAN;   /* batch 5, head 3, row 170 */
                    assert_true(ref_attention(&p, hq, hk, hv, ho, hl, NULL));
                    assert_true(ref_attention_backward(&p, hq, hk, hv, hdo, rdq, rdk, rdv));
                    xq = upload(hq, nq, dt); xk = upload(hk, nk, dt); xv = upload(hv, nk, dt); xdo = upload(hdo, nq, dt);
                    xo = upload(ho, nq, dt); xl = (float *)upload(hl, rows, FA_F32);
                    gq = dalloc(nq * es); gk = dalloc(nk * es); gv = dalloc(nk * es);
                    pd = p;
                    pd.lse = xl;
                    for (path = 0; path < 3; path++) {
                        char pname[220];
                        snprintf(pname, sizeof pname, "%s %s", name, path_name[path]);
                        pd.deterministic = path == P_DET;
                        CU(cudaMemset(gq, 0xFF, nq * es)); CU(cudaMemset(gk, 0xFF, nk * es)); CU(cudaMemset(gv, 0xFF, nk * es));
                        if (!call_path(pname, &pd, path, xq, xk, xv, xo, xdo, gq, gk, gv, &ok)) continue;
                        {
                            fa__dims dd;
                            assert_int_equal(fa__cu_bwd_resolve(&pd, xq, xk, xv, xo, xdo, gq, gk, gv, 1, &dd), FA_OK);
                            ok &= check_grad(pname, "dq", dt, gq, nq, B, HQ, S, D, dd.qs, rdq, nq, 1);
                            ok &= check_grad(pname, "dk", dt, gk, nk, B, HKV, S, D, dd.ks, rdk, nk, 1);
                            ok &= check_grad(pname, "dv", dt, gv, nk, B, HKV, S, D, dd.vs, rdv, nk, 1);
                        }
                    }
                    cudaFree(xq); cudaFree(xk); cudaFree(xv); cudaFree(xdo); cudaFree(xo); cudaFree(xl);
                    cudaFree(gq); cudaFree(gk); cudaFree(gv);
                    free(hq); free(hk); free(hv); free(hdo); free(ho); free(hl); free(rdq); free(rdk); free(rdv);
                    if (!ok) g_failed++;
                    else if (getenv("VERBOSE")) printf("  ok %s\n", name);
                }
    end_test();
}

/* ---- determinism, errors, memory --------------------------------------------------------------- */

/* p.deterministic = 1: ten runs (three with SMALL) on a stream of our own give the same bytes in dq,
   dk and dv. The default (atomic dq) mode is reported, not asserted. */
static void test_determinism(void **state)
{
    fa_params ps[5];
    static const fa_dtype dts[5] = { FA_F32, FA_BF16, FA_F32, FA_F16, FA_BF16 };
    const int runs = g_small ? 3 : 10;   /* each mode's runs (SMALL: 3, for the sanitizers: racecheck ran past 60 s at 10) */
    int s;
    (void)state;
    ps[0] = shape(2, 4, 2, 333, 333, 64, 64);
    ps[0].causal = 1; ps[0].window_left = 100;
    ps[1] = shape(1, 8, 2, 70, 2500, 128, 128);   /* bf16: the tensor-core backward */
    ps[2] = shape(3, 2, 1, 200, 150, 48, 40);
    ps[2].softcap = 5.0f;
    ps[3] = ps[0];                                /* fp16: the tensor-core backward, causal window */
    ps[4] = shape(2, 4, 2, 300, 500, 64, 64);     /* bf16: the tensor-core backward with softcap */
    ps[4].softcap = 5.0f;
    for (s = 0; s < (g_small ? 1 : 5); s++) {
        const fa_dtype dt = dts[s];
        fa_params p = ps[s];
        ref_rng r;
        ref_tensors t;
        float *d_o;
        void *xq, *xk, *xv, *go, *gdo, *g[3];
        float *dlse;
        unsigned char *first[3], *cur[3];
        size_t n[3], es = esize(dt), rows;
        cudaStream_t st;
        int run, u, atomic_same = 1;
        p.dtype = dt;
        ref_seed(&r, 77 + s);
        assert_true(ref_tensors_make(&p, &r, &t));
        d_o = ref_alloc(t.no);
        ref_fill_normal(&r, d_o, t.no);
        rows = (size_t)p.batch * p.heads * p.seq_q;
        xq = upload(t.q, t.nq, dt); xk = upload(t.k, t.nk, dt); xv = upload(t.v, t.nv, dt); gdo = upload(d_o, t.no, dt);
        go = dalloc(t.no * es);
        dlse = (float *)dalloc(rows * 4);
        n[0] = t.nq * es; n[1] = t.nk * es; n[2] = t.nv * es;
        for (u = 0; u < 3; u++) {
            g[u] = dalloc(n[u]);
            first[u] = (unsigned char *)malloc(n[u]);
            cur[u] = (unsigned char *)malloc(n[u]);
            assert_true(first[u] && cur[u]);
        }
        CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        p.lse = dlse;
        p.stream = st;
        assert_int_equal(fa_cuda_tiled(&p, xq, xk, xv, go), FA_OK);
        for (run = 0; run < 2 * runs; run++) {
            p.deterministic = run < runs;
            for (u = 0; u < 3; u++) CU(cudaMemsetAsync(g[u], 0xFF, n[u], st));
            assert_int_equal(fa_cuda_tiled_backward(&p, xq, xk, xv, go, gdo, g[0], g[1], g[2]), FA_OK);
            CU(cudaStreamSynchronize(st));
            for (u = 0; u < 3; u++) {
                CU(cudaMemcpy(run == 0 ? first[u] : cur[u], g[u], n[u], cudaMemcpyDeviceToHost));
                if (run > 0 && memcmp(first[u], cur[u], n[u]) != 0) {
                    if (p.deterministic) fail_msg("shape %d: deterministic run %d: d%c differs from run 0", s, run, "qkv"[u]);
                    else atomic_same = 0;
                }
            }
        }
        printf("  shape %d (%s): %d deterministic runs bitwise equal; default (atomic dq) mode %s\n", s, dt_name(dt), runs,
               atomic_same ? "also matched them" : "differed from them in some bits (expected: atomics)");
        CU(cudaStreamDestroy(st));
        for (u = 0; u < 3; u++) { cudaFree(g[u]); free(first[u]); free(cur[u]); }
        cudaFree(xq); cudaFree(xk); cudaFree(xv); cudaFree(go); cudaFree(gdo); cudaFree(dlse);
        free(d_o);
        ref_tensors_free(&t);
    }
}

/* Refused requests: the status, and every gradient buffer untouched. */
static void test_errors(void **state)
{
    fa_params p = shape(1, 2, 2, 20, 30, 16, 16), bad;
    void *q = dalloc(20 * 2 * 16 * 4), *k = dalloc(30 * 2 * 16 * 4), *v = dalloc(30 * 2 * 16 * 4);
    void *o = dalloc(20 * 2 * 16 * 4), *d_o = dalloc(20 * 2 * 16 * 4);
    void *dq = dalloc(20 * 2 * 16 * 4), *dk = dalloc(30 * 2 * 16 * 4), *dv = dalloc(30 * 2 * 16 * 4);
    float *lse = (float *)dalloc(40 * 4);
    int path;
    (void)state;
    p.lse = lse;
    for (path = 0; path < 2; path++) {
#define EXPECT(p_, o_, do_, dq_, dk_, dv_, st_)                                                                    \
    do {                                                                                                           \
        fa_status s_ = path ? fa_cuda_tiled_backward(p_, q, k, v, o_, do_, dq_, dk_, dv_)                          \
                            : fa_cuda_naive_backward(p_, q, k, v, o_, do_, dq_, dk_, dv_);                         \
        CU(cudaDeviceSynchronize());                                                                               \
        if (s_ != (st_)) fail_msg("line %d [%s]: status %d, want %d", __LINE__, path_name[path], (int)s_, (int)(st_)); \
        if (!all_poison(dq, 20 * 2 * 16 * 4) || !all_poison(dk, 30 * 2 * 16 * 4) ||                       \
            !all_poison(dv, 30 * 2 * 16 * 4))                                                                  \
            fail_msg("line %d [%s]: a refused call wrote a gradient", __LINE__, path_name[path]);                  \
    } while (0)
        EXPECT(NULL, o, d_o, dq, dk, dv, FA_ERR_INVALID_ARG);
        EXPECT(&p, o, NULL, dq, dk, dv, FA_ERR_INVALID_ARG);
        EXPECT(&p, o, d_o, NULL, dk, dv, FA_ERR_INVALID_ARG);
        EXPECT(&p, o, d_o, dq, NULL, dv, FA_ERR_INVALID_ARG);
        EXPECT(&p, o, d_o, dq, dk, NULL, FA_ERR_INVALID_ARG);
        EXPECT(&p, NULL, d_o, dq, dk, dv, FA_ERR_INVALID_ARG);
        bad = p; bad.heads = 3;
        EXPECT(&bad, o, d_o, dq, dk, dv, FA_ERR_INVALID_ARG);
        bad = p; bad.head_dim = 300; bad.seq_q = 1; bad.seq_k = 1;
        EXPECT(&bad, o, d_o, dq, dk, dv, FA_ERR_UNSUPPORTED);
        bad = p; bad.k_stride[0] = 960; bad.k_stride[1] = 480; bad.k_stride[2] = 0;
        EXPECT(&bad, o, d_o, dq, dk, dv, FA_ERR_INVALID_ARG);
        EXPECT(&p, o, d_o, dq, dk, v, FA_ERR_INVALID_ARG);       /* dv is v */
        EXPECT(&p, o, d_o, q, dk, dv, FA_ERR_INVALID_ARG);       /* dq is q */
        EXPECT(&p, o, d_o, dq, dk, dk, FA_ERR_INVALID_ARG);      /* dk and dv overlap */
        bad = p; bad.dtype = FA_F16;                              /* 2-byte elements: dq right after q overlaps nothing */
        {
            char *two = (char *)dalloc(2 * 20 * 2 * 16 * 2);
            fa__dims dd;
            assert_int_equal(fa__cu_bwd_resolve(&bad, two, k, v, o, d_o, two + 20 * 2 * 16 * 2, dk, dv, 1, &dd), FA_OK);
            assert_int_equal(fa__cu_bwd_resolve(&bad, two, k, v, o, d_o, two + 20 * 2 * 16 * 2 - 2, dk, dv, 1, &dd),
                             FA_ERR_INVALID_ARG);
            cudaFree(two);
        }
        if (path) {                                               /* the tiled backward needs the forward's lse */
            bad = p; bad.lse = NULL;
            EXPECT(&bad, o, d_o, dq, dk, dv, FA_ERR_INVALID_ARG);
        }
#undef EXPECT
    }
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(d_o); cudaFree(dq); cudaFree(dk); cudaFree(dv);
    cudaFree(lse);
}

/* The naive backward without lse (it needs none), against the reference. */
static void test_naive_without_lse(void **state)
{
    fa_params p = shape(2, 4, 2, 70, 90, 64, 64);
    (void)state;
    p.causal = 1;
    (void)p;
    /* run_case gives the naive path the forward's lse; here the same inputs without it */
    {
        ref_rng r;
        ref_tensors t;
        float *d_o, *rdq, *rdk, *rdv;
        void *xq, *xk, *xv, *go, *gdo, *gq, *gk, *gv;
        ref_dims rd;
        size_t ndq, ndk, ndv;
        int ok = 1;
        ref_seed(&r, 99);
        assert_true(ref_tensors_make(&p, &r, &t));
        d_o = ref_alloc(t.no);
        ref_fill_normal(&r, d_o, t.no);
        ref_dims_of(&p, &rd);
        ndq = (size_t)rd.B * rd.Hq * rd.Sq * rd.D; ndk = (size_t)rd.B * rd.Hkv * rd.Sk * rd.D; ndv = ndk;
        rdq = ref_alloc(ndq); rdk = ref_alloc(ndk); rdv = ref_alloc(ndv);
        assert_true(ref_attention_backward(&p, t.q, t.k, t.v, d_o, rdq, rdk, rdv));
        xq = upload(t.q, t.nq, FA_F32); xk = upload(t.k, t.nk, FA_F32); xv = upload(t.v, t.nv, FA_F32);
        gdo = upload(d_o, t.no, FA_F32); go = dalloc(t.no * 4);
        gq = dalloc(t.nq * 4); gk = dalloc(t.nk * 4); gv = dalloc(t.nv * 4);
        assert_int_equal(fa_cuda_tiled(&p, xq, xk, xv, go), FA_OK);
        assert_int_equal(fa_cuda_naive_backward(&p, xq, xk, xv, go, gdo, gq, gk, gv), FA_OK);
        CU(cudaDeviceSynchronize());
        ok &= check_grad("naive, lse NULL", "dq", FA_F32, gq, t.nq, rd.B, rd.Hq, rd.Sq, rd.D, rd.qs, rdq, ndq);
        ok &= check_grad("naive, lse NULL", "dk", FA_F32, gk, t.nk, rd.B, rd.Hkv, rd.Sk, rd.D, rd.ks, rdk, ndk);
        ok &= check_grad("naive, lse NULL", "dv", FA_F32, gv, t.nv, rd.B, rd.Hkv, rd.Sk, rd.Dv, rd.vs, rdv, ndv);
        cudaFree(xq); cudaFree(xk); cudaFree(xv); cudaFree(gdo); cudaFree(go); cudaFree(gq); cudaFree(gk); cudaFree(gv);
        free(d_o); free(rdq); free(rdk); free(rdv);
        ref_tensors_free(&t);
        assert_true(ok);
    }
}

/* S = 2^21: the naive path's S and dP are 16 TiB each: FA_ERR_NO_MEMORY, nothing written (the
   tensors, 8 MiB each, hold a sentinel). The tiled path needs O(S D) and would run. */
static void test_no_memory(void **state)
{
    fa_params huge = shape(1, 1, 1, 1 << 21, 1 << 21, 1, 1);
    float *t[9], seven = 7.0f, got[3];
    int u;
    (void)state;
    for (u = 0; u < 9; u++) {
        t[u] = (float *)dalloc((size_t)4 << 21);
        CU(cudaMemcpy(t[u], &seven, 4, cudaMemcpyHostToDevice));
    }
    huge.lse = t[8];
    assert_int_equal(fa_cuda_naive_backward(&huge, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]), FA_ERR_NO_MEMORY);
    CU(cudaDeviceSynchronize());
    for (u = 0; u < 3; u++) CU(cudaMemcpy(got + u, t[5 + u], 4, cudaMemcpyDeviceToHost));
    assert_true(got[0] == 7.0f && got[1] == 7.0f && got[2] == 7.0f);
    for (u = 0; u < 9; u++) cudaFree(t[u]);
}

/* The workspace queries tell the truth: the default memory pool's high watermark over one call
   (every stream-ordered allocation comes from it; the tensors are cudaMalloc'd) is the reported
   size, up to the pool's allocation granularity (2 MiB allowed); exact on a shape whose size is a
   multiple of it (B Hq Sq = 2^19 rows: delta 2 MiB, dq's accumulator 128 MiB). Both modes of the
   tiled backward (tensor cores at bf16 D = 64, FFMA at fp32 D = 80 / Dv = 48) and the naive one. */
static size_t pool_used(cudaMemPool_t pool, cudaMemPoolAttr a)
{
    cuuint64_t v = 0;
    CU(cudaMemPoolGetAttribute(pool, a, &v));
    return (size_t)v;
}

static void test_workspace_query(void **state)
{
    static const struct { int B, Hq, Hkv, Sq, Sk, D, Dv; fa_dtype dt; int naive, exact; } cs[] = {
        { 4, 8, 2, 16384, 128, 64, 64, FA_BF16, 0, 1 },
        { 2, 4, 2, 333, 517, 80, 48, FA_F32, 0, 0 },
        { 2, 4, 2, 333, 517, 64, 64, FA_F32, 1, 0 },
    };
    const size_t gran = (size_t)2 << 20;
    cudaMemPool_t pool;
    fa_params bad;
    size_t c;
    int dev = 0, pools = 0;
    (void)state;
    CU(cudaGetDevice(&dev));
    CU(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev));
    if (!pools) skip();
    CU(cudaDeviceGetDefaultMemPool(&pool, dev));
    bad = shape(1, 3, 2, 8, 8, 64, 64);   /* heads not a multiple of kv_heads: invalid */
    assert_int_equal(fa_cuda_tiled_backward_workspace_bytes(&bad), 0);
    assert_int_equal(fa_cuda_naive_backward_workspace_bytes(&bad), 0);
    assert_int_equal(fa_cuda_tiled_backward_workspace_bytes(NULL), 0);
    bad = shape(1, 2, 2, 0, 8, 64, 64);   /* no query rows: nothing allocated */
    assert_int_equal(fa_cuda_tiled_backward_workspace_bytes(&bad), 0);
    for (c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        fa_params p = shape(cs[c].B, cs[c].Hq, cs[c].Hkv, cs[c].Sq, cs[c].Sk, cs[c].D, cs[c].Dv);
        const size_t rows = (size_t)cs[c].B * cs[c].Hq * cs[c].Sq, kr = (size_t)cs[c].B * cs[c].Hkv * cs[c].Sk;
        const size_t nq = rows * cs[c].D, no = rows * cs[c].Dv, nk = kr * cs[c].D, nv = kr * cs[c].Dv;
        const size_t es = esize(cs[c].dt);
        float *hq = ref_alloc(nq), *hk = ref_alloc(nk), *hv = ref_alloc(nv), *hdo = ref_alloc(no);
        void *q, *k, *v, *o, *d_o, *dq, *dk, *dv;
        ref_rng r;
        int det;
        if (g_small && cs[c].exact) { free(hq); free(hk); free(hv); free(hdo); continue; }   /* 2^19 rows: not under the sanitizers */
        assert_true(hq && hk && hv && hdo);
        ref_seed(&r, 4711 + c);
        ref_fill_normal(&r, hq, nq); ref_fill_normal(&r, hk, nk); ref_fill_normal(&r, hv, nv); ref_fill_normal(&r, hdo, no);
        p.dtype = cs[c].dt;
        q = upload(hq, nq, p.dtype); k = upload(hk, nk, p.dtype); v = upload(hv, nv, p.dtype); d_o = upload(hdo, no, p.dtype);
        o = dalloc(no * es); dq = dalloc(nq * es); dk = dalloc(nk * es); dv = dalloc(nv * es);
        p.lse = (float *)dalloc(rows * 4);
        assert_int_equal(fa_cuda_tiled(&p, q, k, v, o), FA_OK);
        for (det = 0; det < (cs[c].naive ? 1 : 2); det++) {
            size_t want, base, high;
            cuuint64_t zero = 0;
            p.deterministic = det;
            want = cs[c].naive ? fa_cuda_naive_backward_workspace_bytes(&p) : fa_cuda_tiled_backward_workspace_bytes(&p);
            CU(cudaDeviceSynchronize());
            base = pool_used(pool, cudaMemPoolAttrUsedMemCurrent);
            CU(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
            assert_int_equal(cs[c].naive ? fa_cuda_naive_backward(&p, q, k, v, o, d_o, dq, dk, dv)
                                         : fa_cuda_tiled_backward(&p, q, k, v, o, d_o, dq, dk, dv), FA_OK);
            CU(cudaDeviceSynchronize());
            high = pool_used(pool, cudaMemPoolAttrUsedMemHigh) - base;
            printf("  workspace %s%s B=%d Hq=%d Sq=%d Sk=%d D=%d: reported %zu, pool peak %zu\n",
                   cs[c].naive ? "naive" : "tiled", det ? " deterministic" : "", cs[c].B, cs[c].Hq, cs[c].Sq, cs[c].Sk,
                   cs[c].D, want, high);
            assert_true(want > 0);
            assert_true(high >= want);
            assert_true(high <= (want + gran - 1) / gran * gran);
            if (cs[c].exact) assert_int_equal(high, want);
        }
        cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(d_o); cudaFree(dq); cudaFree(dk); cudaFree(dv);
        cudaFree(p.lse);
        free(hq); free(hk); free(hv); free(hdo);
    }
}

static void test_kernels_served(void **state)
{
    int k, n = 0;
    (void)state;
    const int hop = hopper_bwd();
    if (g_small || g_dtypes != 7 || getenv("FA_FILTER")) skip();   /* a reduced run does not reach every kernel */
    for (k = 0; k < FA__CU_BWD_KERNELS; k++) {
        const int wg = k == FA__CU_BWD_WG_D64 || k == FA__CU_BWD_WG_D128;
        const int t32 = k == FA__CU_BWD_TC32_D64 || k == FA__CU_BWD_TC32_D128, t32off = t32 && !FA__CU_BWD_TC32;
        printf("  %-16s %4d tiled backward runs%s\n", fa__cu_bwd_kernel_name((fa__cu_bwd_kernel)k), g_served[k],
               wg && !hop ? " (not a Hopper device: not expected)" : t32off ? " (FLASHATTN_CUDA_FP32_FFMA: not expected)" : "");
        if (g_served[k] == 0 && (hop || !wg) && !t32off) n++;
        if (g_served[k] != 0 && t32off) n++;
    }
    if (n) fail_msg("%d backward kernel(s) served no run", n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seq_lengths),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_block_sizes),
        cmocka_unit_test(test_gqa_causal_windows),
        cmocka_unit_test(test_modifiers),
        cmocka_unit_test(test_strides_and_everything),
        cmocka_unit_test(test_tc_semantics),
        cmocka_unit_test(test_tc_mma_on_hopper),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_nan_isolation),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_naive_without_lse),
        cmocka_unit_test(test_no_memory),
        cmocka_unit_test(test_workspace_query),
        cmocka_unit_test(test_kernels_served),
    };
    g_small = getenv("SMALL") && atoi(getenv("SMALL")) != 0;
    if (getenv("FA_DTYPES")) g_dtypes = atoi(getenv("FA_DTYPES"));
    if (getenv("FA_FILTER")) cmocka_set_test_filter(getenv("FA_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
