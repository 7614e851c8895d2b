/* tests/test_backward.c - the CPU backward suite of flashattn.h (cmocka, C99).

   fa_naive_backward and fa_tiled_backward are checked against tests/ref.h's float64 gradients
   (ref_backward_d, itself checked by central differences in test_reference_gradients) with API.md's
   fp32 tolerance, fa_allclose(dx, ref, 1e-4, 1e-5) for each of dq, dk, dv, on fresh N(0,1) q, k, v
   and d_o (a new seed per case). The forward's o and lse come from fa_tiled with the same p, as a
   training step would have them. Every call gets gradient buffers poisoned with NaN and is checked
   to have written every row of dq, dk, dv and nothing else (the gaps of strided buffers), not to
   have written its inputs, to peak at exactly fa_*_backward_workspace_bytes, and to leak nothing.
   Seeds: a case counter mixed with FA_TEST_SEED (default 20261201); failures print name and seed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <pthread.h>
#include <cmocka.h>

#include "tests/talloc.h"

#define FLASHATTN_MALLOC(n) ta_malloc(n)
#define FLASHATTN_FREE(p) ta_free(p)
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "tests/ref.h"


enum { NAIVE = 0, TILED = 1 };
static const char *const path_name[2] = { "fa_naive_backward", "fa_tiled_backward" };
static uint64_t g_seed_base = 20261201u;
static uint64_t g_case_counter;

/* ---- a case: a request, its inputs, the forward's o and lse, the reference gradients --------- */

typedef struct bcase {
    char name[160];
    uint64_t seed;
    fa_params p;
    ref_rng rng;
    ref_tensors t;                   /* q, k, v, and o (from the forward) */
    float *d_o, *lse, *bias, *alibi;
    float *dq, *dk, *dv;             /* strided like q, k, v */
    float *ref_dq, *ref_dk, *ref_dv; /* packed */
    size_t n_bias, n_alibi, ndq, ndk, ndv;
    uint64_t in_hash;
} bcase;

static uint64_t bc_inputs_hash(const bcase *c)
{
    uint64_t h = 0xCBF29CE484222325ull;
    h = ref_hash(h, c->t.q, c->t.nq * sizeof(float));
    h = ref_hash(h, c->t.k, c->t.nk * sizeof(float));
    h = ref_hash(h, c->t.v, c->t.nv * sizeof(float));
    h = ref_hash(h, c->t.o, c->t.no * sizeof(float));
    h = ref_hash(h, c->d_o, c->t.no * sizeof(float));
    h = ref_hash(h, c->lse, ((size_t)c->p.batch * c->p.heads * c->p.seq_q + 1) * sizeof(float));
    if (c->bias) h = ref_hash(h, c->bias, c->n_bias * sizeof(float));
    if (c->alibi) h = ref_hash(h, c->alibi, c->n_alibi * sizeof(float));
    return h;
}

static void bc_init(bcase *c, const fa_params *p, const char *fmt, ...)
{
    va_list ap;
    memset(c, 0, sizeof *c);
    va_start(ap, fmt);
    vsnprintf(c->name, sizeof c->name, fmt, ap);
    va_end(ap);
    c->p = *p;
    c->seed = g_seed_base * 0x100000001B3ull + (++g_case_counter);
    ref_seed(&c->rng, c->seed);
    assert_true(ref_tensors_make(&c->p, &c->rng, &c->t));
    c->d_o = ref_alloc(c->t.no);
    assert_non_null(c->d_o);
    ref_fill_normal(&c->rng, c->d_o, c->t.no);
}

/* A bias with strides {s0, s1, s2, s3} (all zero: packed), N(0,1). */
static void bc_bias(bcase *c, int64_t s0, int64_t s1, int64_t s2, int64_t s3)
{
    c->p.bias_stride[0] = s0; c->p.bias_stride[1] = s1; c->p.bias_stride[2] = s2; c->p.bias_stride[3] = s3;
    c->n_bias = ref_bias_elems(&c->p);
    c->bias = ref_alloc(c->n_bias);
    assert_non_null(c->bias);
    ref_fill_normal(&c->rng, c->bias, c->n_bias);
    c->p.bias = c->bias;
}

/* ALiBi slopes 2^(-8(h+1)/Hq) (times 1 + b/4 per batch when per_batch, rows Hq apart). */
static void bc_alibi(bcase *c, int per_batch)
{
    int B = per_batch ? c->p.batch : 1, b, h, Hq = c->p.heads;
    c->n_alibi = (size_t)B * (size_t)Hq;
    c->alibi = ref_alloc(c->n_alibi);
    assert_non_null(c->alibi);
    for (b = 0; b < B; b++)
        for (h = 0; h < Hq; h++)
            c->alibi[(size_t)b * Hq + h] = (float)(pow(2.0, -8.0 * (h + 1) / Hq) * (1.0 + 0.25 * b));
    c->p.alibi_slopes = c->alibi;
    c->p.alibi_stride = per_batch ? Hq : 0;
}

/* The forward (fa_tiled, giving o and lse), the reference gradients, poisoned gradient buffers. */
static void bc_ready(bcase *c)
{
    ref_dims d;
    size_t rows;
    fa_status st;
    ref_dims_of(&c->p, &d);
    rows = (size_t)d.B * d.Hq * d.Sq;
    c->lse = ref_alloc(rows + 1);
    assert_non_null(c->lse);
    c->p.lse = c->lse;
    st = fa_tiled(&c->p, c->t.q, c->t.k, c->t.v, c->t.o);
    if (st != FA_OK) fail_msg("%s: forward %s", c->name, fa_status_string(st));
    c->ndq = (size_t)d.B * d.Hq * d.Sq * d.D;
    c->ndk = (size_t)d.B * d.Hkv * d.Sk * d.D;
    c->ndv = (size_t)d.B * d.Hkv * d.Sk * d.Dv;
    c->ref_dq = ref_alloc(c->ndq); c->ref_dk = ref_alloc(c->ndk); c->ref_dv = ref_alloc(c->ndv);
    c->dq = ref_alloc(c->t.nq); c->dk = ref_alloc(c->t.nk); c->dv = ref_alloc(c->t.nv);
    assert_true(c->ref_dq && c->ref_dk && c->ref_dv && c->dq && c->dk && c->dv);
    assert_true(ref_attention_backward(&c->p, c->t.q, c->t.k, c->t.v, c->d_o, c->ref_dq, c->ref_dk, c->ref_dv));
    c->in_hash = bc_inputs_hash(c);
}

static void bc_free(bcase *c)
{
    ref_tensors_free(&c->t);
    free(c->d_o); free(c->lse); free(c->bias); free(c->alibi);
    free(c->dq); free(c->dk); free(c->dv); free(c->ref_dq); free(c->ref_dk); free(c->ref_dv);
    memset(c, 0, sizeof *c);
}

static fa_status bc_call(const bcase *c, const fa_params *p, int path)
{
    return path == NAIVE ? fa_naive_backward(p, c->t.q, c->t.k, c->t.v, c->t.o, c->d_o, c->dq, c->dk, c->dv)
                         : fa_tiled_backward(p, c->t.q, c->t.k, c->t.v, c->t.o, c->d_o, c->dq, c->dk, c->dv);
}

static size_t bc_ws(const fa_params *p, int path)
{
    return path == NAIVE ? fa_naive_backward_workspace_bytes(p) : fa_tiled_backward_workspace_bytes(p);
}

static void bc_poison(bcase *c)
{
    ref_poison(c->dq, c->t.nq * sizeof(float));
    ref_poison(c->dk, c->t.nk * sizeof(float));
    ref_poison(c->dv, c->t.nv * sizeof(float));
}

static void bc_check_grad(const bcase *c, int path, const char *what, const float *x, size_t n_elems, int64_t n1,
                          int64_t n2, int width, const int64_t st[3], const float *ref, size_t n)
{
    float *packed = ref_alloc(n);
    size_t w;
    assert_non_null(packed);
    ref_gather(x, c->p.batch, n1, n2, width, st, packed);
    if (!fa_allclose(packed, ref, n, 1e-4f, 1e-5f)) {
        w = ref_worst(packed, ref, n, 1e-4, 1e-5);
        fail_msg("%s [%s, seed %llu]: %s[%zu] = %.9g, reference %.9g (max |diff| %.3g)", c->name, path_name[path],
                 (unsigned long long)c->seed, what, w, (double)packed[w], (double)ref[w],
                 fa_max_abs_diff(packed, ref, n));
    }
    if (!ref_gaps_untouched(x, n_elems, c->p.batch, n1, n2, width, st))
        fail_msg("%s [%s]: %s was written outside its rows", c->name, path_name[path], what);
    free(packed);
}

/* One path on the case: status, peak == workspace, no leak, inputs untouched, every gradient
   within tolerance and nothing written outside its rows. */
static void bc_run(bcase *c, int path)
{
    ref_dims d;
    size_t ws, live;
    fa_status st;
    ref_dims_of(&c->p, &d);
    bc_poison(c);
    ws = bc_ws(&c->p, path);
    live = ta_reset(-1);
    st = bc_call(c, &c->p, path);
    if (st != FA_OK) fail_msg("%s [%s]: %s", c->name, path_name[path], fa_status_string(st));
    if (ta_peak - live != ws)
        fail_msg("%s [%s]: peak allocation %zu bytes, workspace query said %zu", c->name, path_name[path],
                 ta_peak - live, ws);
    if (ta_live != live) fail_msg("%s [%s]: %zu bytes leaked", c->name, path_name[path], ta_live - live);
    if (bc_inputs_hash(c) != c->in_hash) fail_msg("%s [%s]: an input was written", c->name, path_name[path]);
    bc_check_grad(c, path, "dq", c->dq, c->t.nq, d.Hq, d.Sq, d.D, d.qs, c->ref_dq, c->ndq);
    bc_check_grad(c, path, "dk", c->dk, c->t.nk, d.Hkv, d.Sk, d.D, d.ks, c->ref_dk, c->ndk);
    bc_check_grad(c, path, "dv", c->dv, c->t.nv, d.Hkv, d.Sk, d.Dv, d.vs, c->ref_dv, c->ndv);
}

static void bc_both(bcase *c)
{
    bc_ready(c);
    bc_run(c, NAIVE);
    bc_run(c, TILED);
    bc_free(c);
}

static fa_params shape(int B, int Hq, int Hkv, int Sq, int Sk, int D, int Dv)
{
    fa_params p;
    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = Hq; p.kv_heads = Hkv; p.seq_q = Sq; p.seq_k = Sk; p.head_dim = D; p.head_dim_v = Dv;
    p.threads = 2;
    return p;
}

/* [B][S][H][D] strides, with `pad` extra elements per token row. */
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

/* ---- the reference itself, by central differences ----------------------------------------- */

static void fd_check(const fa_params *p0, const char *name, int with_mods)
{
    bcase c;
    ref_dims d;
    double *x[3], *dod, *g[3], loss, lp, lm;
    size_t n[3], ng[3], e;
    int which, trial;
    bc_init(&c, p0, "%s", name);
    if (with_mods) {            /* ALiBi slopes and a bias: constants, with the gradients of q, k, v checked */
        bc_alibi(&c, 1);
        bc_bias(&c, 0, 0, 0, 0);
    }
    ref_dims_of(&c.p, &d);
    n[0] = c.t.nq; n[1] = c.t.nk; n[2] = c.t.nv;
    x[0] = ref_to_double(c.t.q, n[0]); x[1] = ref_to_double(c.t.k, n[1]); x[2] = ref_to_double(c.t.v, n[2]);
    dod = ref_to_double(c.d_o, c.t.no);
    ng[0] = (size_t)d.B * d.Hq * d.Sq * d.D; ng[1] = (size_t)d.B * d.Hkv * d.Sk * d.D;
    ng[2] = (size_t)d.B * d.Hkv * d.Sk * d.Dv;
    for (which = 0; which < 3; which++) g[which] = (double *)malloc((ng[which] + 1) * sizeof(double));
    assert_true(x[0] && x[1] && x[2] && dod && g[0] && g[1] && g[2]);
    assert_true(ref_backward_d(&c.p, x[0], x[1], x[2], dod, &loss, g[0], g[1], g[2]));
    for (which = 0; which < 3; which++)
        for (trial = 0; trial < 24; trial++) {
            /* a random element of the packed gradient, and the same element of the strided input */
            size_t at = (size_t)(ref_next(&c.rng) % ng[which]), row, col, off;
            int64_t n1 = which == 0 ? d.Hq : d.Hkv, n2 = which == 0 ? d.Sq : d.Sk;
            int width = which == 2 ? d.Dv : d.D;
            const int64_t *st = which == 0 ? d.qs : which == 1 ? d.ks : d.vs;
            const double h = 1e-5;
            double fd, saved;
            row = at / (size_t)width; col = at % (size_t)width;
            off = (size_t)((int64_t)(row / (size_t)(n1 * n2)) * st[0] + (int64_t)(row / (size_t)n2 % (size_t)n1) * st[1] +
                           (int64_t)(row % (size_t)n2) * st[2]) + col;
            saved = x[which][off];
            x[which][off] = saved + h;
            assert_true(ref_backward_d(&c.p, x[0], x[1], x[2], dod, &lp, NULL, NULL, NULL));
            x[which][off] = saved - h;
            assert_true(ref_backward_d(&c.p, x[0], x[1], x[2], dod, &lm, NULL, NULL, NULL));
            x[which][off] = saved;
            fd = (lp - lm) / (2.0 * h);
            if (!(fabs(fd - g[which][at]) <= 1e-6 + 1e-5 * fabs(fd)))
                fail_msg("%s: d%c[%zu]: reference %.12g, central difference %.12g", name, "qkv"[which], at,
                         g[which][at], fd);
        }
    for (e = 0; e < 3; e++) { free(x[e]); free(g[e]); }
    free(dod);
    bc_free(&c);
}

static void test_reference_gradients(void **state)
{
    fa_params p = shape(2, 4, 2, 9, 13, 5, 3);
    (void)state;
    fd_check(&p, "fd plain GQA Dv != D", 0);
    p.causal = 1; p.window_left = 4;
    fd_check(&p, "fd causal window Sq < Sk", 0);
    p = shape(1, 2, 1, 11, 7, 4, 4);
    p.softcap = 1.5f; p.causal = 1;
    fd_check(&p, "fd softcap 1.5 causal Sq > Sk", 0);
    p = shape(2, 2, 2, 6, 8, 3, 3);
    p.window_right = 2;
    fd_check(&p, "fd alibi per batch, packed bias, window_right", 1);
}

/* ---- the grid -------------------------------------------------------------------------------- */

static void test_seq_lengths(void **state)
{
    static const int S[] = { 1, 2, 15, 16, 17, 63, 64, 65, 95, 96, 97, 130, 200, 257, 1031 };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof S / sizeof S[0]; i++) {
        bcase c;
        fa_params p = shape(1, 2, 2, S[i], S[i], 64, 64);
        bc_init(&c, &p, "S=%d", S[i]);
        bc_both(&c);
        p.causal = 1;
        bc_init(&c, &p, "S=%d causal", S[i]);
        bc_both(&c);
    }
}

static void test_head_dims(void **state)
{
    static const int D[] = { 1, 3, 64, 80, 128, 256 };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof D / sizeof D[0]; i++) {
        bcase c;
        fa_params p = shape(2, 2, 1, 70, 83, D[i], D[i]);
        bc_init(&c, &p, "D=%d", D[i]);
        bc_both(&c);
        p = shape(1, 2, 2, 33, 130, D[i], D[i] == 1 ? 5 : D[i] / 2 + 1);
        p.causal = 1;
        bc_init(&c, &p, "D=%d Dv=%d causal", D[i], p.head_dim_v);
        bc_both(&c);
    }
}

static void test_block_sizes(void **state)
{
    static const int bq[] = { 1, 7, 16, 33, 500 }, bk[] = { 1, 5, 64, 101, 500 };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof bq / sizeof bq[0]; i++) {
        bcase c;
        fa_params p = shape(1, 2, 1, 77, 150, 32, 32);
        p.block_q = bq[i]; p.block_k = bk[i]; p.causal = (int)(i & 1);
        bc_init(&c, &p, "block_q=%d block_k=%d causal=%d", bq[i], bk[i], p.causal);
        bc_both(&c);
    }
}

static void test_gqa_causal_windows(void **state)
{
    bcase c;
    fa_params p;
    (void)state;
    p = shape(2, 8, 2, 100, 100, 64, 64);
    bc_init(&c, &p, "GQA 8/2");
    bc_both(&c);
    p = shape(1, 6, 1, 90, 150, 32, 48);
    p.causal = 1;
    bc_init(&c, &p, "MQA causal Sq < Sk");
    bc_both(&c);
    p = shape(1, 2, 2, 150, 60, 32, 32);
    p.causal = 1;
    bc_init(&c, &p, "causal Sq > Sk (hidden rows)");
    bc_both(&c);
    p = shape(1, 2, 2, 300, 300, 64, 64);
    p.causal = 1; p.window_left = 40;
    bc_init(&c, &p, "causal sliding window 40");
    bc_both(&c);
    p = shape(2, 2, 1, 120, 200, 32, 32);
    p.window_left = 17; p.window_right = 9;
    bc_init(&c, &p, "window 17/9 Sq < Sk");
    bc_both(&c);
    p = shape(1, 1, 1, 1, 500, 64, 64);
    p.window_left = 30; p.causal = 1;
    bc_init(&c, &p, "decode row window (keys no row sees)");
    bc_both(&c);
    p = shape(1, 4, 2, 90, 2100, 32, 40);
    p.causal = 1;
    bc_init(&c, &p, "Sk = 2100 (the wide key tiles), causal Sq < Sk, GQA");
    bc_both(&c);
    p.causal = 0; p.window_left = 300; p.window_right = 100;
    bc_init(&c, &p, "Sk = 2100, window 300/100");
    bc_both(&c);
}

static void test_modifiers(void **state)
{
    bcase c;
    fa_params p;
    (void)state;
    p = shape(1, 2, 2, 130, 130, 64, 64);
    p.softcap = 1.5f;
    bc_init(&c, &p, "softcap 1.5");
    bc_both(&c);
    p.softcap = 30.0f; p.causal = 1;
    bc_init(&c, &p, "softcap 30 causal");
    bc_both(&c);
    p = shape(2, 4, 2, 97, 140, 32, 32);
    p.causal = 1;
    bc_init(&c, &p, "alibi per head");
    bc_alibi(&c, 0);
    bc_both(&c);
    bc_init(&c, &p, "alibi per batch");
    bc_alibi(&c, 1);
    bc_both(&c);
    p = shape(2, 2, 1, 70, 90, 32, 32);
    p.scale = 0.37f;
    bc_init(&c, &p, "bias packed, explicit scale");
    bc_bias(&c, 0, 0, 0, 0);
    bc_both(&c);
    bc_init(&c, &p, "bias [B][Sk] key padding");
    bc_bias(&c, 90, 0, 0, 1);
    {
        int j;
        for (j = 70; j < 90; j++) c.bias[j] = -INFINITY;         /* batch 0: keys 70.. hidden */
        for (j = 0; j < 90; j++) c.bias[90 + j] = -INFINITY;     /* batch 1: every key hidden */
    }
    bc_both(&c);
    bc_init(&c, &p, "bias [Sq][Sk] broadcast over batch and head, hidden rows and a hidden tile");
    bc_bias(&c, 0, 0, 90, 1);
    {
        int i, j;
        for (j = 0; j < 90; j++) c.bias[5 * 90 + j] = -INFINITY;               /* row 5 sees nothing */
        for (i = 0; i < 70; i++) for (j = 0; j < 40; j++) c.bias[i * 90 + j] = -INFINITY;   /* keys 0-39 */
    }
    bc_both(&c);
    bc_init(&c, &p, "bias per head [Hq][Sk]");
    bc_bias(&c, 0, 90, 0, 1);
    bc_both(&c);
}

static void test_strides_and_everything(void **state)
{
    bcase c;
    fa_params p;
    (void)state;
    p = shape(2, 4, 2, 81, 101, 32, 48);
    bshd(&p, 0);
    bc_init(&c, &p, "[B][S][H][D]");
    bc_both(&c);
    p = shape(2, 4, 2, 81, 101, 32, 48);
    bshd(&p, 7);
    p.causal = 1;
    bc_init(&c, &p, "[B][S][H][D] with gaps, causal");
    bc_both(&c);
    p = shape(2, 4, 2, 150, 190, 64, 32);
    bshd(&p, 3);
    p.causal = 1; p.window_left = 50; p.softcap = 20.0f; p.scale = 0.2f; p.block_q = 37; p.block_k = 29;
    bc_init(&c, &p, "every feature at once");
    bc_alibi(&c, 1);
    bc_bias(&c, 0, 0, 190, 1);
    bc_both(&c);
}

static void test_empty(void **state)
{
    bcase c;
    fa_params p;
    int path;
    (void)state;
    for (path = 0; path < 2; path++) {
        size_t e;
        p = shape(2, 2, 1, 0, 40, 16, 8);
        bc_init(&c, &p, "seq_q = 0");
        bc_ready(&c);
        bc_poison(&c);
        assert_int_equal(bc_call(&c, &c.p, path), FA_OK);
        for (e = 0; e < c.t.nk; e++) assert_true(c.dk[e] == 0.0f);
        for (e = 0; e < c.t.nv; e++) assert_true(c.dv[e] == 0.0f);
        assert_int_equal(bc_ws(&c.p, path), 0);
        bc_free(&c);
        p = shape(2, 2, 1, 30, 0, 16, 8);
        bc_init(&c, &p, "seq_k = 0");
        bc_ready(&c);
        bc_poison(&c);
        assert_int_equal(bc_call(&c, &c.p, path), FA_OK);
        for (e = 0; e < c.t.nq; e++) assert_true(c.dq[e] == 0.0f);
        bc_free(&c);
    }
}

/* Bitwise the same gradients at 1, 2, 3, 5 and 8 threads and on a pool. */
static void test_determinism(void **state)
{
    static const int th[] = { 1, 2, 3, 5, 8 };
    fa_params shapes[3];
    int s, path;
    (void)state;
    shapes[0] = shape(2, 4, 2, 333, 333, 64, 64);
    shapes[0].causal = 1; shapes[0].window_left = 100;
    shapes[1] = shape(1, 8, 2, 70, 2500, 64, 64);
    shapes[2] = shape(3, 2, 1, 200, 150, 48, 40);
    shapes[2].softcap = 5.0f;
    for (s = 0; s < 3; s++)
        for (path = 0; path < 2; path++) {
            bcase c;
            float *g0[3];
            size_t i, n[3];
            fa_pool *pool;
            bc_init(&c, &shapes[s], "determinism shape %d", s);
            bc_ready(&c);
            n[0] = c.t.nq; n[1] = c.t.nk; n[2] = c.t.nv;
            g0[0] = ref_alloc(n[0]); g0[1] = ref_alloc(n[1]); g0[2] = ref_alloc(n[2]);
            assert_true(g0[0] && g0[1] && g0[2]);
            assert_int_equal(fa_pool_create(3, &pool), FA_OK);
            for (i = 0; i < sizeof th / sizeof th[0] + 1; i++) {
                fa_params p = c.p;
                if (i < sizeof th / sizeof th[0]) p.threads = th[i];
                else { p.threads = 0; p.pool = pool; }
                bc_poison(&c);
                assert_int_equal(bc_call(&c, &p, path), FA_OK);
                if (i == 0) {
                    memcpy(g0[0], c.dq, n[0] * sizeof(float));
                    memcpy(g0[1], c.dk, n[1] * sizeof(float));
                    memcpy(g0[2], c.dv, n[2] * sizeof(float));
                } else if (memcmp(g0[0], c.dq, n[0] * sizeof(float)) || memcmp(g0[1], c.dk, n[1] * sizeof(float)) ||
                           memcmp(g0[2], c.dv, n[2] * sizeof(float))) {
                    fail_msg("%s [%s]: threads %d%s differ from threads 1", c.name, path_name[path], p.threads,
                             p.pool ? " (pool)" : "");
                }
            }
            fa_pool_destroy(pool);
            free(g0[0]); free(g0[1]); free(g0[2]);
            bc_free(&c);
        }
}

/* Invalid requests: the status, and every gradient buffer untouched. */
static void bc_expect(bcase *c, const fa_params *p, int path, const void *o, const void *d_o, void *dq, void *dk,
                      void *dv, fa_status want, const char *why_part, int line)
{
    const char *why = fa_explain_backward(p, c->t.q, c->t.k, c->t.v, o, d_o, dq, dk, dv);
    fa_status st;
    bc_poison(c);
    st = path == NAIVE ? fa_naive_backward(p, c->t.q, c->t.k, c->t.v, o, d_o, dq, dk, dv)
                       : fa_tiled_backward(p, c->t.q, c->t.k, c->t.v, o, d_o, dq, dk, dv);
    if (st != want) fail_msg("line %d [%s]: status %d, want %d", line, path_name[path], (int)st, (int)want);
    if (!why || !strstr(why, why_part))
        fail_msg("line %d: reason \"%s\", want one containing \"%s\"", line, why ? why : "(null)", why_part);
    if (!ref_is_poison(c->dq, c->t.nq * sizeof(float)) || !ref_is_poison(c->dk, c->t.nk * sizeof(float)) ||
        !ref_is_poison(c->dv, c->t.nv * sizeof(float)))
        fail_msg("line %d [%s]: a refused call wrote a gradient", line, path_name[path]);
}

/* Invalid requests: the status, the reason (fa_explain_backward), and every gradient untouched. */
static void test_errors(void **state)
{
    bcase c;
    fa_params p = shape(1, 2, 2, 20, 30, 16, 16), bad;
    int path;
    (void)state;
    bc_init(&c, &p, "errors");
    bc_ready(&c);
    assert_null(fa_explain_backward(&c.p, c.t.q, c.t.k, c.t.v, c.t.o, c.d_o, c.dq, c.dk, c.dv));
    for (path = 0; path < 2; path++) {
#define EXPECT(p_, o_, do_, dq_, dk_, dv_, st_, why_) bc_expect(&c, p_, path, o_, do_, dq_, dk_, dv_, st_, why_, __LINE__)
        EXPECT(NULL, c.t.o, c.d_o, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "NULL");
        EXPECT(&c.p, c.t.o, NULL, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "d_o is NULL");
        EXPECT(&c.p, c.t.o, c.d_o, NULL, c.dk, c.dv, FA_ERR_INVALID_ARG, "dq is NULL");
        EXPECT(&c.p, c.t.o, c.d_o, c.dq, NULL, c.dv, FA_ERR_INVALID_ARG, "dk is NULL");
        EXPECT(&c.p, c.t.o, c.d_o, c.dq, c.dk, NULL, FA_ERR_INVALID_ARG, "dv is NULL");
        EXPECT(&c.p, NULL, c.d_o, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "NULL");
        bad = c.p; bad.heads = 3;
        EXPECT(&bad, c.t.o, c.d_o, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "kv_heads");
        bad = c.p; bad.dtype = (fa_dtype)3;
        EXPECT(&bad, c.t.o, c.d_o, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "dtype");
        /* a zero stride broadcasts an input, but dk is written with k's strides: rows would overlap */
        bad = c.p; bad.k_stride[0] = 960; bad.k_stride[1] = 480; bad.k_stride[2] = 0;
        EXPECT(&bad, c.t.o, c.d_o, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "rows of dk overlap");
        bad = c.p; bad.q_stride[0] = 640; bad.q_stride[1] = 0; bad.q_stride[2] = 16;
        EXPECT(&bad, c.t.o, c.d_o, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "rows of dq overlap");
        bad = c.p; bad.threads = -1;
        EXPECT(&bad, c.t.o, c.d_o, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "threads");
        /* gradients that share memory with an input, or with each other */
        EXPECT(&c.p, c.t.o, c.d_o, c.dq, c.dk, c.t.v, FA_ERR_INVALID_ARG, "dv overlaps an input");
        EXPECT(&c.p, c.t.o, c.d_o, c.t.q, c.dk, c.dv, FA_ERR_INVALID_ARG, "dq overlaps an input");
        EXPECT(&c.p, c.t.o, c.d_o, c.dq, c.d_o, c.dv, FA_ERR_INVALID_ARG, "dk overlaps an input");
        EXPECT(&c.p, c.t.o, c.d_o, c.dq, c.dk, c.dk, FA_ERR_INVALID_ARG, "overlap each other");
#undef EXPECT
    }
    /* the tiled backward needs the forward's lse; the naive one recomputes it */
    p = c.p;
    p.lse = NULL;
    bc_expect(&c, &p, TILED, c.t.o, c.d_o, c.dq, c.dk, c.dv, FA_ERR_INVALID_ARG, "lse is NULL", __LINE__);
    bc_run(&c, NAIVE);
    c.p.lse = NULL;
    bc_run(&c, NAIVE);
    c.p.lse = c.lse;
    bc_free(&c);
}

/* Injected allocation failures: FA_ERR_NO_MEMORY, outputs untouched, nothing leaked; sizes that
   cannot exist: FA_ERR_NO_MEMORY before any allocation. */
static void test_no_memory(void **state)
{
    bcase c;
    fa_params p = shape(2, 2, 1, 50, 60, 16, 16), huge;
    float one = 1.0f, lse1 = 0.0f, g[3];
    int path;
    size_t live;
    (void)state;
    bc_init(&c, &p, "alloc failure");
    bc_ready(&c);
    for (path = 0; path < 2; path++) {
        bc_poison(&c);
        live = ta_reset(0);
        assert_int_equal(bc_call(&c, &c.p, path), FA_ERR_NO_MEMORY);
        assert_true(ta_failed);
        assert_int_equal(ta_live, live);
        assert_true(ref_is_poison(c.dq, c.t.nq * sizeof(float)) && ref_is_poison(c.dk, c.t.nk * sizeof(float)));
    }
    bc_free(&c);
    /* the naive path's P and dS at S = 2^21 are 16 TiB each: refused before any allocation or write
       (the tensors, 8 MiB each, are allocated and never touched but for a sentinel) */
    huge = shape(1, 1, 1, 1 << 21, 1 << 21, 1, 1);
    {
        float *t[9];
        int u;
        for (u = 0; u < 9; u++) { t[u] = ref_alloc((size_t)1 << 21); assert_non_null(t[u]); t[u][0] = 7.0f; }
        huge.lse = t[8];
        assert_null(fa_explain_backward(&huge, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]));
        live = ta_reset(-1);
        assert_int_equal(fa_naive_backward(&huge, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]), FA_ERR_NO_MEMORY);
        assert_int_equal(ta_calls, 0);
        assert_int_equal(ta_live, live);
        assert_true(t[5][0] == 7.0f && t[6][0] == 7.0f && t[7][0] == 7.0f);
        for (u = 0; u < 9; u++) free(t[u]);
    }
    (void)one; (void)lse1; (void)g;
}

/* The memory target: S = 131,072, D = 128, B = H = 1 in less than 64 MB of workspace, on every
   thread count up to 16; and no O(Sq x Sk) term (the workspace grows linearly with S). */
static void test_workspace(void **state)
{
    fa_params p = shape(1, 1, 1, 131072, 131072, 128, 128);
    size_t w;
    int t;
    (void)state;
    for (t = 1; t <= 16; t *= 2) {
        p.threads = t;
        w = fa_tiled_backward_workspace_bytes(&p);
        if (!(w > 0 && w < ((size_t)64 << 20))) fail_msg("threads %d: %zu bytes", t, w);
    }
    p.threads = 4;
    p.seq_q = p.seq_k = 1 << 20;
    w = fa_tiled_backward_workspace_bytes(&p);
    assert_true(w < ((size_t)64 << 20));
    assert_true(fa_naive_backward_workspace_bytes(&p) == SIZE_MAX || fa_naive_backward_workspace_bytes(&p) > ((size_t)1 << 40));
}

/* fa_describe: what each backward would run, as their plans say; a refusal's reason. */
static void test_describe(void **state)
{
    fa_params p = shape(2, 4, 2, 3000, 3000, 64, 64);
    char line[400], small[8];
    size_t n;
    (void)state;
    n = fa_describe(&p, FA_CALL_TILED_BACKWARD, line, sizeof line);
    assert_true(n == strlen(line));
    assert_non_null(strstr(line, "key tiles of 192 keys, query blocks of 64 rows"));
    assert_non_null(strstr(line, "on 2 threads"));
    p.seq_k = 1000;
    fa_describe(&p, FA_CALL_TILED_BACKWARD, line, sizeof line);
    assert_non_null(strstr(line, "key tiles of 96 keys"));
    fa_describe(&p, FA_CALL_NAIVE_BACKWARD, line, sizeof line);
    assert_non_null(strstr(line, "fa_naive_backward: P and dS materialised (2 matrices"));
    p.softcap = 5.0f;
    fa_describe(&p, FA_CALL_NAIVE_BACKWARD, line, sizeof line);
    assert_non_null(strstr(line, "(3 matrices"));
    assert_true(fa_describe(&p, FA_CALL_TILED_BACKWARD, small, sizeof small) > sizeof small);
    assert_true(strlen(small) == sizeof small - 1);
    p.heads = 3;
    fa_describe(&p, FA_CALL_TILED_BACKWARD, line, sizeof line);
    assert_non_null(strstr(line, "refused: "));
    assert_non_null(strstr(line, "kv_heads"));
}

/* |q|, |k| near 2^63 with scale 2^-126: the scaled scores are ordinary, the unscaled dot products
   are not finite in fp32. Both backwards apply the scale before the dot products (as the forwards
   do), so dv (which P alone decides) and the rest stay finite and match the reference. */
static void test_large_inputs_small_scale(void **state)
{
    bcase c;
    fa_params p = shape(1, 2, 1, 40, 50, 8, 8);
    size_t e;
    (void)state;
    p.scale = ldexpf(1.0f, -126);
    p.causal = 1;
    bc_init(&c, &p, "|q|, |k| ~ 2^63, scale 2^-126");
    for (e = 0; e < c.t.nq; e++) c.t.q[e] = ldexpf(c.t.q[e], 63);
    for (e = 0; e < c.t.nk; e++) c.t.k[e] = ldexpf(c.t.k[e], 63);
    bc_both(&c);
}

/* A NaN in q reaches its row's dq and the keys it sees, not other rows. */
static void test_nan_rows(void **state)
{
    bcase c;
    fa_params p = shape(1, 1, 1, 40, 40, 8, 8);
    int path, i, t;
    (void)state;
    p.causal = 1;
    bc_init(&c, &p, "NaN in q row 30");
    bc_ready(&c);
    c.t.q[30 * 8 + 2] = NAN;
    c.in_hash = bc_inputs_hash(&c);
    for (path = 0; path < 2; path++) {
        bc_poison(&c);
        assert_int_equal(bc_call(&c, &c.p, path), FA_OK);
        for (i = 0; i < 40; i++)
            for (t = 0; t < 8; t++) {
                float x = c.dq[i * 8 + t];
                if (i == 30) continue;            /* its own row may be NaN */
                if (x != x) fail_msg("%s: dq row %d is NaN", path_name[path], i);
            }
        /* keys after 30 are seen only by rows > 30, none of which is NaN */
        for (i = 31; i < 40; i++)
            for (t = 0; t < 8; t++)
                if (c.dk[i * 8 + t] != c.dk[i * 8 + t] || c.dv[i * 8 + t] != c.dv[i * 8 + t])
                    fail_msg("%s: key %d is NaN", path_name[path], i);
    }
    bc_free(&c);
}

/* ---- half-precision storage (issue 16) ---------------------------------------------------------
   fp16 and bf16 q, k, v, o, d_o and gradients: against the float64 gradients on the rounded inputs
   by API.md's relative error (fp16 <= 2e-3, bf16 <= 1e-2) for each of dq, dk, dv; the forward's o
   as half storage holds it (fa_tiled in fp32 on the rounded inputs, rounded: bitwise what the half
   forward gives, test_flashattn's test_half_storage); fa_tiled_backward bitwise equal to the fp32
   call on the same values, rounded; both bitwise across threads 1, 2, 3; peak == workspace; nothing
   written past the buffers or in their gaps. */
static uint16_t *bh_half(fa_dtype dt, const float *x, size_t n)
{
    uint16_t *h = (uint16_t *)malloc((n + 16) * 2);
    size_t i;
    assert_non_null(h);
    for (i = 0; i < n; i++) h[i] = dt == FA_F16 ? ref_f32_to_f16(x[i]) : ref_f32_to_bf16(x[i]);
    memset(h + n, 0xFF, 32);
    return h;
}

/* a half gradient buffer back to fp32 (0xFFFF, the poison, stays the fp32 poison), its rows packed */
static void bh_gather(const bcase *c, fa_dtype dt, const uint16_t *h, size_t n_elems, int64_t n1, int64_t n2, int width,
                      const int64_t st[3], float *packed)
{
    float *f = ref_alloc(n_elems + 1);
    size_t i;
    assert_non_null(f);
    for (i = 0; i < n_elems; i++) {
        if (h[i] == 0xFFFF) ref_poison(&f[i], sizeof(float));
        else f[i] = dt == FA_F16 ? ref_f16_to_f32(h[i]) : ref_bf16_to_f32(h[i]);
    }
    if (!ref_gaps_untouched(f, n_elems, c->p.batch, n1, n2, width, st)) fail_msg("%s: a gradient written outside its rows", c->name);
    ref_gather(f, c->p.batch, n1, n2, width, st, packed);
    free(f);
}

/* mods: 1 ALiBi slopes per batch, 2 a packed bias, N(0,1), with every 7th entry -inf (hidden keys) */
static void bh_case_m(const fa_params *p0, const char *name, int mods)
{
    int dti, path, th, g;
    for (dti = 0; dti < 2; dti++) {
        fa_dtype dt = dti ? FA_BF16 : FA_F16;
        double tol = dt == FA_F16 ? 2e-3 : 1e-2;
        bcase c;
        ref_dims d;
        uint16_t *hq, *hk, *hv, *ho, *hdo, *hg[3], *first[3];
        float *packed[3], *p32[3];
        const float *refg[3];
        size_t ng[3], nn[3];
        fa_params ph;
        char line[700];
        int own;    /* bf16 on its own products (AMX or vdpbf16ps): not the fp32 call's bits */
        bc_init(&c, p0, "half %s %s", dt == FA_F16 ? "fp16" : "bf16", name);
        if (mods & 1) bc_alibi(&c, 1);
        if (mods & 2) {
            size_t i;
            bc_bias(&c, 0, 0, 0, 0);
            for (i = 0; i < c.n_bias; i += 7) c.bias[i] = -INFINITY;
        }
        ph = c.p; ph.dtype = dt;
        fa_describe(&ph, FA_CALL_TILED_BACKWARD, line, sizeof line);
        own = strstr(line, "products in bf16") != NULL;
        if (dt == FA_BF16 && getenv("FA_TEST_EXPECT_AMX") && atoi(getenv("FA_TEST_EXPECT_AMX")) == 1 && c.p.head_dim % 32 == 0 &&
            (c.p.head_dim_v ? c.p.head_dim_v : c.p.head_dim) % 32 == 0 && c.p.seq_q > 0 && c.p.seq_k > 0 && !strstr(line, "AMX-BF16 tiles"))
            fail_msg("FA_TEST_EXPECT_AMX: %s", line);
        ref_round_to(dt, c.t.q, c.t.nq); ref_round_to(dt, c.t.k, c.t.nk); ref_round_to(dt, c.t.v, c.t.nv);
        ref_round_to(dt, c.d_o, c.t.no);
        bc_ready(&c);
        ref_round_to(dt, c.t.o, c.t.no);        /* o as the half forward stores it */
        ref_dims_of(&c.p, &d);
        hq = bh_half(dt, c.t.q, c.t.nq); hk = bh_half(dt, c.t.k, c.t.nk); hv = bh_half(dt, c.t.v, c.t.nv);
        ho = bh_half(dt, c.t.o, c.t.no); hdo = bh_half(dt, c.d_o, c.t.no);
        ng[0] = c.t.nq; ng[1] = c.t.nk; ng[2] = c.t.nv;
        nn[0] = c.ndq; nn[1] = c.ndk; nn[2] = c.ndv;
        refg[0] = c.ref_dq; refg[1] = c.ref_dk; refg[2] = c.ref_dv;
        for (g = 0; g < 3; g++) {
            hg[g] = (uint16_t *)malloc((ng[g] + 16) * 2); first[g] = (uint16_t *)malloc((ng[g] + 1) * 2);
            packed[g] = ref_alloc(nn[g] + 1); p32[g] = ref_alloc(nn[g] + 1);
            assert_true(hg[g] && first[g] && packed[g] && p32[g]);
        }
        for (path = NAIVE; path <= TILED; path++) {
            if (path == TILED) {     /* the fp32 call on the same values, its gradients rounded */
                bc_poison(&c);
                assert_int_equal(bc_call(&c, &c.p, TILED), FA_OK);
                ref_gather(c.dq, c.p.batch, d.Hq, d.Sq, d.D, d.qs, p32[0]);
                ref_gather(c.dk, c.p.batch, d.Hkv, d.Sk, d.D, d.ks, p32[1]);
                ref_gather(c.dv, c.p.batch, d.Hkv, d.Sk, d.Dv, d.vs, p32[2]);
                for (g = 0; g < 3; g++) ref_round_to(dt, p32[g], nn[g]);
            }
            for (th = 1; th <= 3; th++) {
                size_t ws, live;
                fa_status st;
                ph = c.p; ph.dtype = dt; ph.threads = th;
                for (g = 0; g < 3; g++) memset(hg[g], 0xFF, (ng[g] + 16) * 2);
                ws = bc_ws(&ph, path);
                live = ta_reset(-1);
                st = path == NAIVE ? fa_naive_backward(&ph, hq, hk, hv, ho, hdo, hg[0], hg[1], hg[2])
                                   : fa_tiled_backward(&ph, hq, hk, hv, ho, hdo, hg[0], hg[1], hg[2]);
                if (st != FA_OK) fail_msg("%s [%s threads=%d]: %s", c.name, path_name[path], th, fa_status_string(st));
                if (ta_peak - live != ws)
                    fail_msg("%s [%s threads=%d]: peak %zu bytes, workspace query %zu", c.name, path_name[path], th, ta_peak - live, ws);
                if (ta_live != live) fail_msg("%s [%s]: leaked", c.name, path_name[path]);
                bh_gather(&c, dt, hg[0], ng[0], d.Hq, d.Sq, d.D, d.qs, packed[0]);
                bh_gather(&c, dt, hg[1], ng[1], d.Hkv, d.Sk, d.D, d.ks, packed[1]);
                bh_gather(&c, dt, hg[2], ng[2], d.Hkv, d.Sk, d.Dv, d.vs, packed[2]);
                for (g = 0; g < 3; g++) {
                    double err = ref_rel_error(packed[g], refg[g], nn[g]);
                    size_t i;
                    if (hg[g][ng[g]] != 0xFFFF) fail_msg("%s [%s]: written past the end of d%c", c.name, path_name[path], "qkv"[g]);
                    if (!(err <= tol))
                        fail_msg("%s [%s threads=%d seed %llu]: d%c relative error %.3g > %.0e", c.name, path_name[path], th,
                                 (unsigned long long)c.seed, "qkv"[g], err, tol);
                    if (path == TILED && !own)
                        for (i = 0; i < nn[g]; i++)
                            if (memcmp(&packed[g][i], &p32[g][i], 4) != 0)
                                fail_msg("%s [%s threads=%d]: d%c[%zu] = %.9g, the fp32 call's rounded %.9g", c.name,
                                         path_name[path], th, "qkv"[g], i, (double)packed[g][i], (double)p32[g][i]);
                    if (th == 1) memcpy(first[g], hg[g], ng[g] * 2);
                    else if (memcmp(first[g], hg[g], ng[g] * 2) != 0)
                        fail_msg("%s [%s]: d%c differs between threads 1 and %d", c.name, path_name[path], "qkv"[g], th);
                    if (th == 3 && g == 0) print_message("%s %s: dq rel err %.2e\n", c.name, path_name[path], err);
                }
            }
        }
        {
            ph = c.p; ph.dtype = dt;
            fa_describe(&ph, FA_CALL_TILED_BACKWARD, line, sizeof line);
            assert_non_null(strstr(line, dt == FA_F16 ? "fp16 storage: the inputs read as stored, " :
                                   own ? "bf16 storage: the five products in bf16 on " : "bf16 storage: the inputs read as stored, "));
            fa_describe(&ph, FA_CALL_NAIVE_BACKWARD, line, sizeof line);     /* the naive one keeps its copies */
            assert_non_null(strstr(line, dt == FA_F16 ? "fp16 storage: fp32 copies made by " : "bf16 storage: fp32 copies made by "));
            if ((dti == 0 && strstr(name, "causal")) || own) print_message("%s\n", line);
        }
        free(hq); free(hk); free(hv); free(ho); free(hdo);
        for (g = 0; g < 3; g++) { free(hg[g]); free(first[g]); free(packed[g]); free(p32[g]); }
        bc_free(&c);
    }
}

static void bh_case(const fa_params *p0, const char *name) { bh_case_m(p0, name, 0); }

static void test_half_storage(void **state)
{
    fa_params p;
    (void)state;
    p = shape(2, 4, 2, 70, 90, 64, 64); p.causal = 1;
    bh_case(&p, "B2 H4/2 Sq70 Sk90 D64 causal");
    p = shape(1, 3, 3, 33, 47, 40, 24); bshd(&p, 5); p.softcap = 5.0f; p.window_left = 9;
    bh_case(&p, "[B][S][H][D]+pad D40 Dv24 softcap window");
    p = shape(1, 2, 1, 130, 200, 16, 16); p.block_q = 7; p.block_k = 33;
    bh_case(&p, "Sq130 Sk200 D16 bq7 bk33");
    p = shape(1, 2, 2, 5, 0, 32, 32);
    bh_case(&p, "Sk0");
    p = shape(1, 2, 2, 0, 9, 32, 32);
    bh_case(&p, "Sq0");
    /* bf16's own products (head dims multiples of 32): row and key tails of 16 and less, a key tile
       of 96 and the GQA group in one item, a window and ALiBi-free bias-free masks; a softcap; block
       sizes of the caller's */
    p = shape(2, 4, 2, 150, 211, 64, 32); p.causal = 1; p.window_left = 40;
    bh_case(&p, "Sq150 Sk211 H4/2 D64 Dv32 causal window 40");
    p = shape(1, 2, 1, 97, 300, 128, 128); p.softcap = 8.0f;
    bh_case(&p, "Sq97 Sk300 D128 softcap");
    p = shape(1, 1, 1, 70, 90, 32, 64); p.block_q = 24; p.block_k = 40;
    bh_case(&p, "Sq70 Sk90 D32 Dv64 bq24 bk40");
    /* several key tiles at every tile rule (96, FA__BWD_KT_AMX = 256: two full and a tail), each
       query block's dq over three or more turns, causal with GQA */
    p = shape(1, 4, 2, 300, 600, 64, 64); p.causal = 1;
    bh_case(&p, "Sq300 Sk600 H4/2 D64 causal");
    /* from 1024 query rows the AMX plans' query blocks of 128 (FA__BWD_QB_AMX_LONG), the last of 76 rows;
       three key tiles, rows 0..699 seeing no key */
    p = shape(1, 2, 1, 1100, 400, 32, 32); p.causal = 1;
    bh_case(&p, "Sq1100 Sk400 H2/1 D32 causal");
    /* ALiBi (per batch) and a bias hiding every 7th key on bf16's own products and on the copies:
       GQA, Dv != D; then the 128-row query blocks with a 6-row tail, non-causal, Sq != Sk */
    p = shape(2, 4, 2, 90, 130, 64, 32);
    bh_case_m(&p, "Sq90 Sk130 H4/2 D64 Dv32 ALiBi bias", 3);
    p = shape(1, 2, 1, 1030, 260, 32, 64); p.causal = 1;
    bh_case_m(&p, "Sq1030 Sk260 H2/1 D32 Dv64 causal ALiBi bias", 3);
}

/* bf16's own products with an inf in the V of a key that one row sees: the fp32 kernels serve the
   key tile holding it (fa__tbwd_item); the other rows' dq and the other tile's dk stay finite and
   close to the reference. */
static void test_half_nonfinite(void **state)
{
    fa_params p = shape(1, 1, 1, 64, 128, 64, 64);
    bcase c;
    uint16_t *hq, *hk, *hv, *ho, *hdo, *hg[3];
    int t, g;
    (void)state;
    p.causal = 1;
    p.block_k = 64;     /* two key tiles at every default tile rule */
    bc_init(&c, &p, "half nonfinite");
    ref_round_to(FA_BF16, c.t.q, c.t.nq); ref_round_to(FA_BF16, c.t.k, c.t.nk); ref_round_to(FA_BF16, c.t.v, c.t.nv);
    ref_round_to(FA_BF16, c.d_o, c.t.no);
    bc_ready(&c);
    ref_round_to(FA_BF16, c.t.o, c.t.no);
    hq = bh_half(FA_BF16, c.t.q, c.t.nq); hk = bh_half(FA_BF16, c.t.k, c.t.nk); hv = bh_half(FA_BF16, c.t.v, c.t.nv);
    ho = bh_half(FA_BF16, c.t.o, c.t.no); hdo = bh_half(FA_BF16, c.d_o, c.t.no);
    for (t = 0; t < 64; t++) hv[127 * 64 + t] = 0x7F80u;        /* key 127: seen by the last row only */
    c.p.dtype = FA_BF16;
    for (g = 0; g < 3; g++) { hg[g] = (uint16_t *)malloc(64 * 128 * 2); assert_non_null(hg[g]); }
    assert_int_equal(fa_tiled_backward(&c.p, hq, hk, hv, ho, hdo, hg[0], hg[1], hg[2]), FA_OK);
    for (t = 0; t < 64 * 64; t++) {     /* dq rows 0..62 and dk of keys 0..63 finite and close */
        float x = ref_bf16_to_f32(hg[0][t]), want = c.ref_dq[t];
        if (t / 64 < 63 && !(fabsf(x - want) <= 3e-2f * (1.0f + fabsf(want)))) fail_msg("dq[%d] %g, want %g", t, (double)x, (double)want);
        x = ref_bf16_to_f32(hg[1][t]); want = c.ref_dk[t];
        if (!(fabsf(x - want) <= 3e-2f * (1.0f + fabsf(want)))) fail_msg("dk[%d] %g, want %g", t, (double)x, (double)want);
    }
    /* a NaN in q and an inf in d_o of row 0 (which sees keys 0..64): the query block of rows 0..63
       runs the fp32 kernels in both key tiles, on its rows converted from bf16 as stored; rows
       1..63's dq and keys 65..127's dk and dv stay finite and close */
    for (t = 0; t < 64; t++) hv[127 * 64 + t] = ref_f32_to_bf16(c.t.v[127 * 64 + t]);
    hq[3] = 0x7FC0u;
    hdo[5] = 0x7F80u;
    assert_int_equal(fa_tiled_backward(&c.p, hq, hk, hv, ho, hdo, hg[0], hg[1], hg[2]), FA_OK);
    for (t = 64; t < 64 * 64; t++) {
        float x = ref_bf16_to_f32(hg[0][t]), want = c.ref_dq[t];
        if (!(fabsf(x - want) <= 3e-2f * (1.0f + fabsf(want)))) fail_msg("block fallback: dq[%d] %g, want %g", t, (double)x, (double)want);
    }
    for (t = 65 * 64; t < 128 * 64; t++) {
        float x = ref_bf16_to_f32(hg[1][t]), want = c.ref_dk[t];
        if (!(fabsf(x - want) <= 3e-2f * (1.0f + fabsf(want)))) fail_msg("block fallback: dk[%d] %g, want %g", t, (double)x, (double)want);
        x = ref_bf16_to_f32(hg[2][t]); want = c.ref_dv[t];
        if (!(fabsf(x - want) <= 3e-2f * (1.0f + fabsf(want)))) fail_msg("block fallback: dv[%d] %g, want %g", t, (double)x, (double)want);
    }
    free(hq); free(hk); free(hv); free(ho); free(hdo);
    for (g = 0; g < 3; g++) free(hg[g]);
    bc_free(&c);
}

int main(void)
{
    const char *seed = getenv("FA_TEST_SEED");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_gradients),
        cmocka_unit_test(test_seq_lengths),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_block_sizes),
        cmocka_unit_test(test_gqa_causal_windows),
        cmocka_unit_test(test_modifiers),
        cmocka_unit_test(test_strides_and_everything),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_no_memory),
        cmocka_unit_test(test_workspace),
        cmocka_unit_test(test_nan_rows),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_large_inputs_small_scale),
        cmocka_unit_test(test_half_storage),
        cmocka_unit_test(test_half_nonfinite),
    };
    if (seed) g_seed_base = strtoull(seed, NULL, 10);
    if (getenv("FA_TEST_FILTER")) cmocka_set_test_filter(getenv("FA_TEST_FILTER"));   /* e.g. "test_half*" */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
