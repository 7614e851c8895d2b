/* tests/test_flashattn.c - the CPU suite of flashattn.h (cmocka, C99).

   fa_naive and fa_tiled are checked against tests/ref.h's float64 reference with
   fa_allclose(out, ref, 1e-5, 1e-5) on fresh N(0,1) inputs (a new seed per case), over the grids
   of issues #2 and #5. Every call gets outputs poisoned with NaN and is checked to have written
   all of o (and lse, scores) and nothing else: not the gaps of a strided o, not the bytes past
   the end of any buffer. The implementation is compiled here with a counting, failable
   allocator behind FLASHATTN_MALLOC/FLASHATTN_FREE, so that every call also checks that its
   peak allocation equals fa_*_workspace_bytes exactly and that nothing leaks, and so that
   injected allocation failures can be checked to give FA_ERR_NO_MEMORY with outputs untouched.

   Seeds are deterministic (a case counter mixed with FA_TEST_SEED, default 20261129), and
   every failure prints the case's name and seed. */
#define _DEFAULT_SOURCE 1   /* mmap's MAP_ANONYMOUS and MAP_NORESERVE under -std=c99 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <sys/mman.h>
#include <unistd.h>
#include <dirent.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif
#include <pthread.h>
#include <cmocka.h>

#include "tests/talloc.h"

#define FLASHATTN_MALLOC(n) ta_malloc(n)
#define FLASHATTN_FREE(p) ta_free(p)
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "tests/ref.h"


/* ---- cases: a request, its inputs and its float64 reference ------------------------------------ */

enum { NAIVE = 0, TILED = 1 };
static const char *const path_name[2] = { "fa_naive", "fa_tiled" };

static uint64_t g_seed_base = 20261129u;
static uint64_t g_case_counter;
static int g_concurrent;   /* two callers at once: the peak and leak checks are off */

typedef struct tcase {
    char name[160];
    uint64_t seed;
    fa_params p;
    ref_rng rng;
    ref_tensors t;
    float *bias, *alibi;
    size_t rows, n_o, n_scores;        /* rows = B*Hq*Sq; packed o and scores elements */
    float *ref_o, *ref_lse, *ref_scores;
    size_t n_alibi;
    uint64_t in_hash;                  /* of q, k, v, bias and slopes: the calls must not write them */
} tcase;

/* Copies p, draws the case's seed and the inputs. Attach modifiers (tc_bias, tc_alibi) next,
   then tc_ref. */
static void tc_init(tcase *c, const fa_params *p, const char *fmt, ...)
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
}

/* A bias with strides {s0, s1, s2, s3} (all zero: packed), filled with N(0,1). */
static float *tc_bias(tcase *c, int64_t s0, int64_t s1, int64_t s2, int64_t s3)
{
    size_t n;
    c->p.bias_stride[0] = s0; c->p.bias_stride[1] = s1; c->p.bias_stride[2] = s2; c->p.bias_stride[3] = s3;
    n = ref_bias_elems(&c->p);
    c->bias = ref_alloc(n);
    assert_non_null(c->bias);
    ref_fill_normal(&c->rng, c->bias, n);
    c->p.bias = c->bias;
    return c->bias;
}

/* Sets key-padding -inf on the last pad[b] keys of batch b, for a bias with strides {Sk,0,0,1}. */
static void bias_pad_keys(tcase *c, const int *pad)
{
    int b, j, Sk = c->p.seq_k;
    for (b = 0; b < c->p.batch; b++)
        for (j = Sk - pad[b]; j < Sk; j++) c->bias[(size_t)b * Sk + j] = -INFINITY;
}

/* ALiBi slopes: rows of Hq slopes 2^(-8(h+1)/Hq) (times 1 + b/4 for batch b), `stride` apart
   when per_batch, one row otherwise. */
static void tc_alibi(tcase *c, int per_batch, int64_t stride)
{
    int B = per_batch ? c->p.batch : 1, b, h, Hq = c->p.heads;
    size_t n = per_batch ? (size_t)(B - 1) * (size_t)stride + (size_t)Hq : (size_t)Hq;
    c->alibi = ref_alloc(n);
    c->n_alibi = n;
    assert_non_null(c->alibi);
    ref_poison(c->alibi, n * sizeof(float));
    for (b = 0; b < B; b++)
        for (h = 0; h < Hq; h++)
            c->alibi[(size_t)b * (size_t)(per_batch ? stride : 0) + (size_t)h] =
                (float)(pow(2.0, -8.0 * (h + 1) / Hq) * (1.0 + 0.25 * b));
    c->p.alibi_slopes = c->alibi;
    c->p.alibi_stride = per_batch ? stride : 0;
}

static uint64_t tc_inputs_hash(const tcase *c)
{
    uint64_t h = 0xCBF29CE484222325ull;
    h = ref_hash(h, c->t.q, c->t.nq * sizeof(float));
    h = ref_hash(h, c->t.k, c->t.nk * sizeof(float));
    h = ref_hash(h, c->t.v, c->t.nv * sizeof(float));
    if (c->bias) h = ref_hash(h, c->bias, ref_bias_elems(&c->p) * sizeof(float));
    if (c->alibi) h = ref_hash(h, c->alibi, c->n_alibi * sizeof(float));
    return h;
}

static void tc_ref(tcase *c)
{
    ref_dims d;
    ref_dims_of(&c->p, &d);
    c->rows = (size_t)d.B * d.Hq * d.Sq;
    c->n_o = c->rows * d.Dv;
    c->n_scores = c->rows * d.Sk;
    c->ref_o = ref_alloc(c->n_o);
    c->ref_lse = ref_alloc(c->rows);
    c->ref_scores = ref_alloc(c->n_scores);
    assert_true(c->ref_o && c->ref_lse && c->ref_scores);
    assert_true(ref_attention(&c->p, c->t.q, c->t.k, c->t.v, c->ref_o, c->ref_lse, c->ref_scores));
    c->in_hash = tc_inputs_hash(c);
}

static void tc_free(tcase *c)
{
    ref_tensors_free(&c->t);
    free(c->bias); free(c->alibi);
    free(c->ref_o); free(c->ref_lse); free(c->ref_scores);
    memset(c, 0, sizeof *c);
}

static fa_status call_path(int path, const fa_params *p, const void *q, const void *k, const void *v,
                           void *o, float *scores)
{
    return path == NAIVE ? fa_naive(p, q, k, v, o, scores) : fa_tiled(p, q, k, v, o);
}

static size_t ws_path(int path, const fa_params *p)
{
    return path == NAIVE ? fa_naive_workspace_bytes(p) : fa_tiled_workspace_bytes(p);
}

/* The largest |out-ref| / (atol + rtol |ref|) of any passing comparison, and where: printed at
   the end, it says how much room the tolerance leaves. */
static double g_worst_ratio;
static char g_worst_case[200];

static void note_margin(const tcase *c, const char *what, const float *a, const float *b, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        double x = a[i], y = b[i], ratio;
        if (x == y || x != x || y != y) continue;
        ratio = fabs(x - y) / (1e-5 + 1e-5 * fabs(y));
        if (ratio > g_worst_ratio) {
            pthread_mutex_lock(&ta_mu);
            g_worst_ratio = ratio;
            snprintf(g_worst_case, sizeof g_worst_case, "%s: %s", c->name, what);
            pthread_mutex_unlock(&ta_mu);
        }
    }
}

/* Compares out with ref (n elements, rows of `width`); prints the worst element on failure.
   skip_row: optional flags, rows a NaN reaches (in the reference): there out must be NaN exactly
   where the reference is (a NaN must not vanish, nor spread) instead of close. */
static int close_rows(const tcase *c, const char *what, const float *out, const float *ref, size_t rows,
                      size_t width, const unsigned char *skip_row)
{
    size_t r, t;
    for (r = 0; r < rows; r++) {
        const float *a = out + r * width, *b = ref + r * width;
        if (skip_row && skip_row[r]) {
            for (t = 0; t < width; t++)
                if ((a[t] != a[t]) != (b[t] != b[t])) {
                    print_error("%s [seed %llu]: %s row %zu col %zu: got %.9g, want %.9g (NaN where the reference "
                                "has one, and only there)\n", c->name, (unsigned long long)c->seed, what, r, t,
                                (double)a[t], (double)b[t]);
                    return 0;
                }
            continue;
        }
        note_margin(c, what, a, b, width);
        if (!fa_allclose(a, b, width, 1e-5f, 1e-5f)) {
            size_t w = ref_worst(a, b, width, 1e-5, 1e-5);
            if (w == (size_t)-1) w = 0;
            print_error("%s [seed %llu]: %s row %zu (b,h,i flat) col %zu: got %.9g, want %.9g\n", c->name,
                        (unsigned long long)c->seed, what, r, w, (double)a[w], (double)b[w]);
            return 0;
        }
    }
    return 1;
}

#define GUARD 32   /* poisoned elements past the end of every output buffer */

enum { WITH_LSE = 1, WITH_SCORES = 2 };

/* One call of `path` on the case with the given threads and blocks; 1 when everything holds:
   status FA_OK, o's rows (strided) allclose to the reference and nothing else of o's buffer
   written, lse and scores likewise, peak allocation == workspace bytes, nothing leaked.
   skip_row (optional) exempts rows from the comparisons (the NaN tests). Never asserts, so that
   it can run on threads other than cmocka's. */
static int tc_run(const tcase *c, int path, int threads, int bq, int bk, int flags,
                  const unsigned char *skip_row)
{
    fa_params p = c->p;
    float *o = ref_alloc(c->t.no + GUARD), *lse = ref_alloc(c->rows + GUARD);
    float *scores = ref_alloc(c->n_scores + GUARD), *packed = ref_alloc(c->n_o);
    size_t ws, base, peak, live;
    fa_status st;
    int ok = 1;
    if (!o || !lse || !scores || !packed) {
        print_error("%s: test allocation failed\n", c->name);
        free(o); free(lse); free(scores); free(packed);
        return 0;
    }
    ref_poison(o, (c->t.no + GUARD) * sizeof(float));
    ref_poison(lse, (c->rows + GUARD) * sizeof(float));
    ref_poison(scores, (c->n_scores + GUARD) * sizeof(float));
    p.threads = threads;
    p.block_q = bq;
    p.block_k = bk;
    p.lse = (flags & WITH_LSE) ? lse : NULL;
    if (path != NAIVE) flags &= ~WITH_SCORES;
    ws = ws_path(path, &p);
    base = g_concurrent ? 0 : ta_reset(-1);
    st = call_path(path, &p, c->t.q, c->t.k, c->t.v, o, (flags & WITH_SCORES) ? scores : NULL);
    if (!g_concurrent) {
        pthread_mutex_lock(&ta_mu);
        peak = ta_peak - base;
        live = ta_live - base;
        pthread_mutex_unlock(&ta_mu);
        if (peak != ws) {
            print_error("%s [seed %llu] %s threads=%d bq=%d bk=%d: peak allocation %zu != workspace_bytes %zu\n",
                        c->name, (unsigned long long)c->seed, path_name[path], threads, bq, bk, peak, ws);
            ok = 0;
        }
        if (live != 0) {
            print_error("%s: %s leaked %zu bytes\n", c->name, path_name[path], live);
            ok = 0;
        }
    }
    if (tc_inputs_hash(c) != c->in_hash) {
        print_error("%s: %s wrote into its inputs\n", c->name, path_name[path]);
        ok = 0;
    }
    if (st != FA_OK) {
        print_error("%s [seed %llu] %s threads=%d bq=%d bk=%d: status %d (%s)\n", c->name,
                    (unsigned long long)c->seed, path_name[path], threads, bq, bk, (int)st, fa_status_string(st));
        ok = 0;
    } else {
        char what[96];
        ref_gather_o(&p, o, packed);
        snprintf(what, sizeof what, "%s threads=%d bq=%d bk=%d o", path_name[path], threads, bq, bk);
        ok &= close_rows(c, what, packed, c->ref_o, c->rows, c->n_o / (c->rows ? c->rows : 1), skip_row);
        if (!ref_o_gaps_untouched(&p, o, c->t.no) || !ref_is_poison(o + c->t.no, GUARD * sizeof(float))) {
            print_error("%s: %s wrote outside o's rows\n", c->name, path_name[path]);
            ok = 0;
        }
        if (flags & WITH_LSE) {
            snprintf(what, sizeof what, "%s threads=%d bq=%d bk=%d lse", path_name[path], threads, bq, bk);
            ok &= close_rows(c, what, lse, c->ref_lse, c->rows, 1, skip_row);
        }
        if (!ref_is_poison(lse + ((flags & WITH_LSE) ? c->rows : 0),
                           ((flags & WITH_LSE) ? GUARD : c->rows + GUARD) * sizeof(float))) {
            print_error("%s: %s wrote lse past its end (or without lse)\n", c->name, path_name[path]);
            ok = 0;
        }
        if (flags & WITH_SCORES) {
            snprintf(what, sizeof what, "%s threads=%d scores", path_name[path], threads);
            ok &= close_rows(c, what, scores, c->ref_scores, c->rows, c->n_scores / (c->rows ? c->rows : 1),
                             skip_row);
        }
        if (!ref_is_poison(scores + ((flags & WITH_SCORES) ? c->n_scores : 0),
                           ((flags & WITH_SCORES) ? GUARD : c->n_scores + GUARD) * sizeof(float))) {
            print_error("%s: %s wrote scores past their end (or without scores)\n", c->name, path_name[path]);
            ok = 0;
        }
    }
    free(o); free(lse); free(scores); free(packed);
    return ok;
}

/* The standard battery: naive with 1 thread (scores, lse) and 2 threads (neither); tiled with
   1 thread at the library's blocks and 2 threads at (bq, bk), both with lse. */
static void tc_check(const tcase *c, int bq, int bk)
{
    assert_true(tc_run(c, NAIVE, 1, 0, 0, WITH_LSE | WITH_SCORES, NULL));
    assert_true(tc_run(c, NAIVE, 2, 0, 0, 0, NULL));
    assert_true(tc_run(c, TILED, 1, 0, 0, WITH_LSE, NULL));
    assert_true(tc_run(c, TILED, 2, bq, bk, WITH_LSE, NULL));
}

/* Sets up, checks and frees a case in one go. */
static void check_case(const fa_params *p, int bq, int bk, const char *name)
{
    tcase c;
    tc_init(&c, p, "%s", name);
    tc_ref(&c);
    tc_check(&c, bq, bk);
    tc_free(&c);
}

static fa_params shape(int B, int Hq, int Hkv, int Sq, int Sk, int D, int Dv, int causal)
{
    fa_params p;
    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = Hq; p.kv_heads = Hkv; p.seq_q = Sq; p.seq_k = Sk;
    p.head_dim = D; p.head_dim_v = Dv; p.causal = causal;
    return p;
}

/* [B][S][H][D] strides for q, k, v and o. */
static void set_bshd(fa_params *p)
{
    int Hkv = p->kv_heads ? p->kv_heads : p->heads, Dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    int64_t H = p->heads;
    p->q_stride[0] = (int64_t)p->seq_q * H * p->head_dim; p->q_stride[1] = p->head_dim; p->q_stride[2] = H * p->head_dim;
    p->k_stride[0] = (int64_t)p->seq_k * Hkv * p->head_dim; p->k_stride[1] = p->head_dim; p->k_stride[2] = (int64_t)Hkv * p->head_dim;
    p->v_stride[0] = (int64_t)p->seq_k * Hkv * Dv; p->v_stride[1] = Dv; p->v_stride[2] = (int64_t)Hkv * Dv;
    p->o_stride[0] = (int64_t)p->seq_q * H * Dv; p->o_stride[1] = Dv; p->o_stride[2] = H * Dv;
}

/* ============================================================================================== */
/* Issue #2: the grid                                                                             */
/* ============================================================================================== */

/* S from 1 to 1031, tile multiples and not, square, causal and not. */
static void test_seq_lengths(void **state)
{
    static const int S[] = { 1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 257, 513, 1031 };
    size_t i;
    int causal;
    (void)state;
    for (i = 0; i < sizeof S / sizeof S[0]; i++)
        for (causal = 0; causal <= 1; causal++) {
            int big = S[i] > 300;
            fa_params p = shape(1, big ? 1 : 2, 0, S[i], S[i], big ? 64 : 16, 0, causal);
            char name[64];
            snprintf(name, sizeof name, "seq S=%d causal=%d", S[i], causal);
            check_case(&p, 16, 48, name);
        }
    {   /* a long non-square one: Sq > Sk and Sq < Sk near 1031 */
        fa_params p = shape(1, 1, 0, 1031, 700, 32, 0, 1);
        check_case(&p, 64, 64, "seq Sq=1031 Sk=700 causal");
        p = shape(1, 1, 0, 300, 1031, 32, 0, 1);
        check_case(&p, 37, 100, "seq Sq=300 Sk=1031 causal");
    }
}

static void test_head_dims(void **state)
{
    static const int D[] = { 1, 3, 64, 80, 128, 256 };
    size_t i;
    int causal;
    (void)state;
    for (i = 0; i < sizeof D / sizeof D[0]; i++)
        for (causal = 0; causal <= 1; causal++) {
            fa_params p = shape(2, 2, 0, 67, 131, D[i], 0, causal);
            char name[64];
            snprintf(name, sizeof name, "head_dim D=%d causal=%d", D[i], causal);
            check_case(&p, 32, 32, name);
        }
    {   /* any head_dim works on the CPU: larger than any fast path, with Dv different */
        fa_params p = shape(1, 2, 1, 20, 37, 520, 1000, 1);
        check_case(&p, 8, 16, "head_dim D=520 Dv=1000");
        p = shape(1, 1, 0, 9, 300, 1031, 0, 0);
        check_case(&p, 0, 0, "head_dim D=1031");
    }
}

/* Block sizes 1, odd, equal to and larger than S, on a non-square causal and non-causal case. */
static void test_block_sizes(void **state)
{
    static const int blk[][2] = { { 1, 1 }, { 1, 5 }, { 3, 7 }, { 7, 3 }, { 13, 17 }, { 45, 77 }, { 46, 78 },
                                  { 100, 200 }, { 64, 64 }, { 32, 1 }, { 1, 128 }, { 5, 1000 } };
    size_t i;
    int causal;
    (void)state;
    for (causal = 0; causal <= 1; causal++) {
        tcase c;
        fa_params p = shape(1, 2, 0, 45, 77, 32, 0, causal);
        tc_init(&c, &p, "blocks causal=%d", causal);
        tc_ref(&c);
        assert_true(tc_run(&c, NAIVE, 1, 0, 0, WITH_LSE | WITH_SCORES, NULL));
        for (i = 0; i < sizeof blk / sizeof blk[0]; i++) {
            assert_true(tc_run(&c, TILED, 1, blk[i][0], blk[i][1], WITH_LSE, NULL));
            assert_true(tc_run(&c, TILED, 2, blk[i][0], blk[i][1], WITH_LSE, NULL));
            /* the block sizes of a naive request are ignored, not an error */
            assert_true(tc_run(&c, NAIVE, 2, blk[i][0], blk[i][1], WITH_LSE, NULL));
        }
        tc_free(&c);
    }
    {   /* Sq > Sk with blocks larger than either */
        fa_params p = shape(2, 1, 0, 90, 20, 8, 0, 1);
        check_case(&p, 128, 64, "blocks Sq>Sk large blocks");
        check_case(&p, 1, 1, "blocks Sq>Sk blocks of 1");
    }
}

static void test_gqa_mqa(void **state)
{
    static const int hh[][2] = { { 8, 2 }, { 6, 3 }, { 4, 1 }, { 5, 5 }, { 1, 1 }, { 7, 1 } };
    size_t i;
    int causal;
    (void)state;
    for (i = 0; i < sizeof hh / sizeof hh[0]; i++)
        for (causal = 0; causal <= 1; causal++) {
            fa_params p = shape(2, hh[i][0], hh[i][1], 33, 70, 24, 0, causal);
            char name[64];
            snprintf(name, sizeof name, "gqa Hq=%d Hkv=%d causal=%d", hh[i][0], hh[i][1], causal);
            check_case(&p, 16, 16, name);
        }
    {   /* kv_heads = 0 means heads */
        fa_params p = shape(1, 3, 0, 20, 20, 8, 0, 0);
        check_case(&p, 0, 0, "gqa kv_heads=0");
    }
}

/* Bottom-right causal with Sq < Sk (decode, chunked prefill) and Sq > Sk (leading empty rows). */
static void test_causal_shapes(void **state)
{
    static const int qk[][2] = { { 1, 1 }, { 1, 200 }, { 2, 200 }, { 37, 130 }, { 130, 37 }, { 200, 1 },
                                 { 64, 64 }, { 65, 128 }, { 128, 65 }, { 3, 300 }, { 300, 3 } };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof qk / sizeof qk[0]; i++) {
        fa_params p = shape(2, 2, 1, qk[i][0], qk[i][1], 16, 0, 1);
        tcase c;
        tc_init(&c, &p, "causal Sq=%d Sk=%d", qk[i][0], qk[i][1]);
        tc_ref(&c);
        tc_check(&c, 16, 16);
        assert_true(tc_run(&c, TILED, 2, 5, 7, WITH_LSE, NULL));
        assert_true(tc_run(&c, TILED, 1, 64, 1, WITH_LSE, NULL));
        tc_free(&c);
    }
}

/* [B][S][H][D] layouts, Dv != D, and layouts with gaps whose bytes must stay untouched. */
static void test_strides_and_dv(void **state)
{
    static const int dd[][2] = { { 64, 64 }, { 64, 32 }, { 32, 80 }, { 3, 1 }, { 1, 7 }, { 128, 256 } };
    size_t i;
    int causal;
    (void)state;
    for (i = 0; i < sizeof dd / sizeof dd[0]; i++)
        for (causal = 0; causal <= 1; causal++) {
            fa_params p = shape(2, 4, 2, 50, 90, dd[i][0], dd[i][1], causal);
            char name[80];
            snprintf(name, sizeof name, "packed D=%d Dv=%d causal=%d", dd[i][0], dd[i][1], causal);
            check_case(&p, 16, 32, name);
            set_bshd(&p);
            snprintf(name, sizeof name, "bshd D=%d Dv=%d causal=%d", dd[i][0], dd[i][1], causal);
            check_case(&p, 16, 32, name);
        }
    {   /* every tensor its own layout, with padding: q [S][B][H][D+3], k [B][H][S][D+1],
           v [H][B][S][Dv+2], o [B][H][S][Dv+5] with 7 extra elements between heads */
        int B = 2, H = 3, Hkv = 3, Sq = 21, Sk = 40, D = 12, Dv = 10;
        fa_params p = shape(B, H, Hkv, Sq, Sk, D, Dv, 1);
        p.q_stride[0] = (int64_t)H * (D + 3); p.q_stride[1] = D + 3; p.q_stride[2] = (int64_t)B * H * (D + 3);
        p.k_stride[0] = (int64_t)Hkv * Sk * (D + 1); p.k_stride[1] = (int64_t)Sk * (D + 1); p.k_stride[2] = D + 1;
        p.v_stride[0] = (int64_t)Sk * (Dv + 2); p.v_stride[1] = (int64_t)B * Sk * (Dv + 2); p.v_stride[2] = Dv + 2;
        p.o_stride[1] = (int64_t)Sq * (Dv + 5) + 7; p.o_stride[0] = H * p.o_stride[1]; p.o_stride[2] = Dv + 5;
        check_case(&p, 8, 8, "mixed padded layouts");
        p.causal = 0;
        p.kv_heads = 1;   /* MQA with the same layouts: k and v hold one head */
        check_case(&p, 5, 9, "mixed padded layouts MQA");
    }
    {   /* inputs with zero strides: the same queries for every batch, one K shared by every kv
           head (the feature dim is all that must be contiguous) */
        fa_params p = shape(2, 4, 2, 19, 45, 16, 8, 1);
        p.q_stride[0] = 0; p.q_stride[1] = 19 * 16; p.q_stride[2] = 16;
        p.k_stride[0] = 45 * 16; p.k_stride[1] = 0; p.k_stride[2] = 16;
        check_case(&p, 8, 8, "zero input strides");
    }
    {   /* Sq = 1 with an o token stride of 0 is fine (one row per head) */
        fa_params p = shape(2, 2, 0, 1, 33, 8, 0, 0);
        p.o_stride[0] = 2 * 8 + 3; p.o_stride[1] = 8; p.o_stride[2] = 0;
        check_case(&p, 0, 0, "o token stride 0 with Sq=1");
    }
}

/* An explicit scale, and logits far beyond the range of exp (|s| > 100). For the large logits the
   inputs are N(0,1) rounded to multiples of 1/16 and the scale is a power of two, so that every
   fp32 dot product is exact: what is tested is the softmax's handling of |s| > 88, not the fp32
   rounding of a 200-sized logit (an error of 1e-5 in a logit moves a weight by 1e-5). */
static void test_scale_and_large_logits(void **state)
{
    int causal;
    (void)state;
    for (causal = 0; causal <= 1; causal++) {
        fa_params p = shape(2, 2, 0, 40, 57, 16, 0, causal);
        p.scale = 0.37f;
        check_case(&p, 16, 16, causal ? "scale 0.37 causal" : "scale 0.37");
        p.scale = -0.5f;
        check_case(&p, 7, 9, causal ? "scale -0.5 causal" : "scale -0.5");
    }
    for (causal = 0; causal <= 1; causal++) {
        tcase c;
        fa_params p = shape(1, 2, 0, 70, 130, 64, 0, causal);
        size_t i;
        float big = 0.0f;
        p.scale = 8.0f;
        tc_init(&c, &p, "large logits causal=%d", causal);
        for (i = 0; i < c.t.nq; i++) c.t.q[i] = floorf(c.t.q[i] * 16.0f + 0.5f) / 16.0f;
        for (i = 0; i < c.t.nk; i++) c.t.k[i] = floorf(c.t.k[i] * 16.0f + 0.5f) / 16.0f;
        tc_ref(&c);
        for (i = 0; i < c.n_scores; i++)
            if (c.ref_scores[i] != -INFINITY && fabsf(c.ref_scores[i]) > big) big = fabsf(c.ref_scores[i]);
        assert_true(big > 150.0f);    /* the case really has logits beyond exp's range */
        tc_check(&c, 16, 32);
        tc_free(&c);
    }
    {   /* logits near 2.9e38 (q.k of two 1.7e19 entries), tied within each row: beyond
           FLT_MAX / log2(e), so a kernel that scales s by log2(e) before subtracting the max
           overflows; the weights must still be the ties' 1/n */
        tcase c;
        fa_params p = shape(1, 2, 0, 6, 40, 4, 0, 0);
        size_t i;
        p.scale = 1.0f;
        tc_init(&c, &p, "logits near 2.9e38, tied");
        for (i = 0; i < c.t.nq; i += 4) { c.t.q[i] = 1.7e19f; c.t.q[i + 1] = c.t.q[i + 2] = c.t.q[i + 3] = 0.0f; }
        for (i = 0; i < c.t.nk; i += 4) c.t.k[i] = (i / 4) % 3 ? 1.7e19f : 1.6e19f;
        tc_ref(&c);
        tc_check(&c, 4, 8);
        tc_free(&c);
    }
    {   /* |q|, |k| near 2^63 with scale 2^-126: the logits are N(0,1)-sized, but q.k before the scale
           overflows fp32 (regression: fa_naive formed the unscaled q.k and gave NaN rows); the scale
           is a power of two, so scale * q is exact and the case is as well-conditioned as N(0,1) */
        tcase c;
        fa_params p = shape(1, 2, 0, 20, 33, 16, 0, 1);
        size_t i, j, over = 0;
        int t;
        p.scale = FLT_MIN;
        tc_init(&c, &p, "q, k near 2^63, scale 2^-126");
        for (i = 0; i < c.t.nq; i++) c.t.q[i] = ldexpf(c.t.q[i], 63);
        for (i = 0; i < c.t.nk; i++) c.t.k[i] = ldexpf(c.t.k[i], 63);
        for (i = 0; i < 20; i++)
            for (j = 0; j < 33; j++) {
                double dot = 0.0;
                for (t = 0; t < 16; t++) dot += (double)c.t.q[i * 16 + t] * (double)c.t.k[j * 16 + t];
                over += fabs(dot) > FLT_MAX;
            }
        assert_true(over > 20);           /* the unscaled products really leave fp32 */
        tc_ref(&c);
        tc_check(&c, 8, 8);
        tc_free(&c);
    }
    {   /* large finite values, against the documented limit of fa_tiled (max|v| <= FLT_MAX / (e^8 Sk)):
           the first 64 keys score 0, the later ones 7.9, the most the lazy rescale lets the weights
           grow to, with values of both signs at 0.9 of the limit (Sk = 200 and 4000, causal or not):
           both paths exact. Past the limit (v = 1e36 at Sk = 200, the issue's case) fa_naive still is;
           fa_tiled may overflow there, as documented. */
        int variant;
        for (variant = 0; variant < 4; variant++) {
            int Sk = variant == 2 ? 4000 : 200, j;
            fa_params p = shape(1, 2, 0, 3, Sk, 1, 2, variant == 1);
            tcase c;
            size_t i;
            float big = variant == 3 ? 1e36f : (float)(0.9 * FLT_MAX / (exp(8.0) * Sk) / 1.007);
            p.scale = 1.0f;
            tc_init(&c, &p, "large values: v = %g, Sk = %d, causal = %d", (double)big, Sk, variant == 1);
            for (i = 0; i < c.t.nq; i++) c.t.q[i] = 1.0f;
            for (j = 0; j < 2 * Sk; j++) c.t.k[j] = j % Sk < 64 ? 0.0f : 7.9f;
            for (i = 0; i < c.t.nv; i++) c.t.v[i] = (i % 2 ? -big : big) * (1.0f + 0.001f * (float)(i % 7));
            tc_ref(&c);
            for (i = 0; i < c.rows * 2; i++) assert_true(fabsf(c.ref_o[i]) > 0.5f * big && fabsf(c.ref_o[i]) < 2.0f * big);
            assert_true(tc_run(&c, NAIVE, 1, 0, 0, WITH_LSE | WITH_SCORES, NULL));
            assert_true(tc_run(&c, NAIVE, 2, 0, 0, WITH_LSE, NULL));
            if (variant != 3) {
                assert_true(tc_run(&c, TILED, 1, 0, 0, WITH_LSE, NULL));
                assert_true(tc_run(&c, TILED, 2, 1, 16, WITH_LSE, NULL));
                assert_true(tc_run(&c, TILED, 2, 0, 0, WITH_LSE, NULL));
            }
            tc_free(&c);
        }
    }
    {   /* every logit of a row near +120: exp(s) alone would overflow */
        tcase c;
        fa_params p = shape(1, 1, 0, 9, 50, 4, 0, 0);
        size_t i;
        p.scale = 1.0f;
        tc_init(&c, &p, "logits all near 120");
        for (i = 0; i < c.t.nq; i += 4) { c.t.q[i] = 12.0f; c.t.q[i + 1] = floorf(c.t.q[i + 1] * 8.0f) / 8.0f; }
        for (i = 0; i < c.t.nk; i += 4) { c.t.k[i] = 10.0f; c.t.k[i + 1] = floorf(c.t.k[i + 1] * 8.0f) / 8.0f; }
        for (i = 0; i < c.t.nq; i += 4) { c.t.q[i + 2] = c.t.q[i + 3] = 0.0f; }
        tc_ref(&c);
        tc_check(&c, 4, 8);
        tc_free(&c);
    }
}

/* threads 0 (all cores), 1, 2, 3 and more than the work items. */
static void test_threads(void **state)
{
    static const int T[] = { 0, 1, 2, 3, 7, 64 };
    size_t i;
    int shp;
    (void)state;
    /* shape 3: 200 causal rows, where many threads pick shorter tiles; shape 4: prefill with fewer
       tiles than two per thread at 7 and 64 threads, so the keys are split and merged */
    for (shp = 0; shp < 5; shp++) {
        tcase c;
        fa_params p = shp == 0 ? shape(1, 1, 0, 5, 40, 8, 0, 0)
                    : shp == 1 ? shape(3, 5, 0, 33, 33, 16, 0, 1)
                    : shp == 2 ? shape(1, 4, 2, 1, 900, 32, 0, 0)
                    : shp == 3 ? shape(2, 4, 0, 200, 200, 16, 0, 1) : shape(1, 2, 0, 40, 700, 16, 0, 1);
        tc_init(&c, &p, "threads shape %d", shp);
        tc_ref(&c);
        for (i = 0; i < sizeof T / sizeof T[0]; i++) {
            assert_true(tc_run(&c, NAIVE, T[i], 0, 0, WITH_LSE | WITH_SCORES, NULL));
            assert_true(tc_run(&c, TILED, T[i], 0, 0, WITH_LSE, NULL));
            assert_true(tc_run(&c, TILED, T[i], 8, 16, WITH_LSE, NULL));
        }
        tc_free(&c);
    }
}

/* Two caller threads at once, each running both paths with 2 worker threads. */
typedef struct caller_arg { const tcase *c; int ok; } caller_arg;

static void *caller_main(void *arg)
{
    caller_arg *a = (caller_arg *)arg;
    int it;
    a->ok = 1;
    for (it = 0; it < 4; it++) {
        a->ok &= tc_run(a->c, TILED, 2, 16, 16, WITH_LSE, NULL);
        a->ok &= tc_run(a->c, NAIVE, 2, 0, 0, WITH_LSE | WITH_SCORES, NULL);
        a->ok &= tc_run(a->c, TILED, 1, 0, 0, WITH_LSE, NULL);
    }
    return NULL;
}

/* Two caller threads at once on the same pair of cases, on `pool` (NULL: every call starts its
   own threads); each call checked as usual, the peak and leak checks off while both run. */
static void run_two_callers(fa_pool *pool, const char *tag)
{
    tcase c[2];
    caller_arg a[2];
    pthread_t th[2];
    fa_params p0 = shape(2, 4, 2, 100, 130, 32, 0, 1), p1 = shape(1, 3, 1, 77, 77, 64, 48, 0);
    int i;
    tc_init(&c[0], &p0, "%s caller 0", tag);
    tc_ref(&c[0]);
    tc_init(&c[1], &p1, "%s caller 1", tag);
    tc_ref(&c[1]);
    c[0].p.pool = c[1].p.pool = pool;
    g_concurrent = 1;
    for (i = 0; i < 2; i++) {
        a[i].c = &c[i];
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &a[i]), 0);
    }
    for (i = 0; i < 2; i++) pthread_join(th[i], NULL);
    g_concurrent = 0;
    assert_true(a[0].ok);
    assert_true(a[1].ok);
    tc_free(&c[0]);
    tc_free(&c[1]);
}

static void test_two_callers(void **state)
{
    size_t live;
    (void)state;
    run_two_callers(NULL, "own threads");
    pthread_mutex_lock(&ta_mu);
    live = ta_live;
    pthread_mutex_unlock(&ta_mu);
    assert_int_equal(live, 0);    /* nothing leaked by either caller */
}

/* A caller-owned pool: bad arguments, a failed allocation, every path and thread count on it
   (checked like every call: reference, untouched memory, peak == workspace bytes, no leak), more
   threads than it has, and two callers sharing one pool at once. */
static void test_pool(void **state)
{
    fa_pool *pool = NULL, *sentinel = (fa_pool *)(void *)&pool, *out;
    static const int T[] = { 0, 1, 2, 3 };
    size_t i, live;
    int shp;
    (void)state;
    out = sentinel;
    assert_int_equal(fa_pool_create(-1, &out), FA_ERR_INVALID_ARG);
    assert_ptr_equal(out, sentinel);
    assert_int_equal(fa_pool_create(2, NULL), FA_ERR_INVALID_ARG);
    fa_pool_destroy(NULL);
    ta_reset(0);                                        /* the pool's one allocation fails */
    assert_int_equal(fa_pool_create(3, &out), FA_ERR_NO_MEMORY);
    assert_ptr_equal(out, sentinel);
    assert_int_equal(ta_live, 0);
    ta_reset(-1);
    assert_int_equal(fa_pool_create(1, &pool), FA_OK);    /* no workers: calls run on the caller */
    {
        tcase c;
        fa_params p = shape(2, 3, 0, 40, 50, 16, 0, 1);
        tc_init(&c, &p, "pool of 1");
        tc_ref(&c);
        c.p.pool = pool;
        assert_true(tc_run(&c, NAIVE, 0, 0, 0, WITH_LSE | WITH_SCORES, NULL));
        assert_true(tc_run(&c, TILED, 1, 0, 0, WITH_LSE, NULL));
        tc_free(&c);
    }
    fa_pool_destroy(pool);
    assert_int_equal(fa_pool_create(3, &pool), FA_OK);
    for (shp = 0; shp < 4; shp++) {   /* 2: decoding, split keys and their merge on the pool */
        tcase c;
        fa_params p = shp == 0 ? shape(1, 1, 0, 5, 40, 8, 0, 0)
                    : shp == 1 ? shape(3, 5, 0, 33, 33, 16, 0, 1)
                    : shp == 2 ? shape(1, 4, 2, 1, 900, 32, 0, 0) : shape(2, 4, 0, 200, 200, 16, 0, 1);
        tc_init(&c, &p, "pool shape %d", shp);
        tc_ref(&c);
        c.p.pool = pool;
        for (i = 0; i < sizeof T / sizeof T[0]; i++) {
            assert_true(tc_run(&c, NAIVE, T[i], 0, 0, WITH_LSE | WITH_SCORES, NULL));
            assert_true(tc_run(&c, TILED, T[i], 0, 0, WITH_LSE, NULL));
            assert_true(tc_run(&c, TILED, T[i], 8, 16, WITH_LSE, NULL));
        }
        tc_free(&c);
    }
    {   /* more threads than the pool has: invalid, nothing written, no workspace */
        static float q[256], k[256], v[256], o[256];
        fa_params p = shape(1, 2, 0, 8, 8, 16, 0, 0);
        for (i = 0; i < 256; i++) { q[i] = 0.01f * (float)i; k[i] = 0.02f * (float)i; v[i] = 1.0f; }
        p.pool = pool;
        p.threads = 4;
        ref_poison(o, sizeof o);
        assert_int_equal(fa_tiled(&p, q, k, v, o), FA_ERR_INVALID_ARG);
        assert_int_equal(fa_naive(&p, q, k, v, o, NULL), FA_ERR_INVALID_ARG);
        assert_true(ref_is_poison(o, sizeof o));
        assert_int_equal(fa_tiled_workspace_bytes(&p), 0);
        assert_int_equal(fa_naive_workspace_bytes(&p), 0);
        p.threads = 3;
        assert_true(fa_tiled_workspace_bytes(&p) > 0);
    }
    run_two_callers(pool, "pool");   /* two callers on one pool: their calls take turns */
    fa_pool_destroy(pool);
    pthread_mutex_lock(&ta_mu);
    live = ta_live;
    pthread_mutex_unlock(&ta_mu);
    assert_int_equal(live, 0);      /* the pool and every call gave everything back */
}

#if !defined(FLASHATTN_NO_BLAS) && defined(OPENBLAS_VERSION)
/* A second thread that reads OpenBLAS's thread count as often as it can until told to stop. */
typedef struct watch_arg { int stop, want; long samples, wrong; } watch_arg;

static void *watch_main(void *arg)
{
    watch_arg *w = (watch_arg *)arg;
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        w->samples++;
        if (openblas_get_num_threads() != w->want) w->wrong++;
    }
    return NULL;
}

/* CPU time (clock ticks) of every thread of the process but the caller: OpenBLAS's own workers
   when no thread of ours is alive; -1 where /proc cannot say. */
static long other_threads_ticks(void)
{
#ifdef __linux__
    char path[96], line[1024];
    long me = (long)syscall(SYS_gettid), total = 0;
    DIR *dir = opendir("/proc/self/task");
    struct dirent *e;
    if (!dir) return -1;
    while ((e = readdir(dir)) != NULL) {
        long tid = atol(e->d_name), ut = 0, st = 0;
        const char *s;
        FILE *f;
        int field;
        if (tid <= 0 || tid == me) continue;
        snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
        if (!(f = fopen(path, "r"))) continue;           /* a thread that just ended */
        if (fgets(line, sizeof line, f) && (s = strrchr(line, ')')) != NULL) {
            /* after "pid (comm)": state is field 3, utime 14 and stime 15 */
            for (field = 3, s += 2; field < 14 && s; field++) { s = strchr(s, ' '); if (s) s++; }
            if (s && sscanf(s, "%ld %ld", &ut, &st) == 2) total += ut + st;
        }
        fclose(f);
    }
    closedir(dir);
    return total;
#else
    return -1;
#endif
}
#endif

/* fa_naive leaves OpenBLAS's thread count to the program: a second thread sees the program's count
   all through the calls (regression: the count was set to 1 for each call, process-wide), the count
   afterwards is what it was, and OpenBLAS's own worker threads do no work during the calls (the
   GEMMs run on fa_naive's workers, `threads` of them: fa__sgemm's blocks stay under OpenBLAS's
   single-thread size). A control GEMM shows that the measurement sees OpenBLAS's workers. */
static void test_openblas_threads_untouched(void **state)
{
#if !defined(FLASHATTN_NO_BLAS) && defined(OPENBLAS_VERSION)
    fa_params p = shape(1, 2, 0, 64, 64, 16, 0, 1), big = shape(1, 2, 0, 1024, 1024, 64, 0, 0);
    tcase c;
    int t, it;
    (void)state;
    tc_init(&c, &p, "openblas threads");
    tc_ref(&c);
    for (t = 1; t <= 3; t++) {
        openblas_set_num_threads(t);
        assert_true(tc_run(&c, NAIVE, 2, 0, 0, WITH_LSE, NULL));
        assert_int_equal(openblas_get_num_threads(), t);
    }
    tc_free(&c);
    openblas_set_num_threads(2);
    {   /* a watcher thread during calls whose GEMMs OpenBLAS would thread (m n k far above 2^18) */
        tcase cb;
        watch_arg w;
        pthread_t th;
        memset(&w, 0, sizeof w);
        w.want = 2;
        tc_init(&cb, &big, "openblas threads, watched");
        tc_ref(&cb);
        assert_int_equal(pthread_create(&th, NULL, watch_main, &w), 0);
        for (it = 0; it < 3; it++) assert_true(tc_run(&cb, NAIVE, 2, 0, 0, WITH_LSE, NULL));
        __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        print_message("openblas count watcher: %ld samples, %ld not the program's count\n", w.samples, w.wrong);
        assert_true(w.samples > 0);
        assert_int_equal(w.wrong, 0);
        tc_free(&cb);
    }
    {   /* OpenBLAS's workers idle during the calls; busy in a GEMM of the program's own */
        static float qa[1024 * 64 * 2], ka[1024 * 64 * 2], va[1024 * 64 * 2], oa[1024 * 64 * 2];
        float *ga, *gb, *gc;
        long t0, t1, t2;
        size_t i;
        for (i = 0; i < sizeof qa / sizeof qa[0]; i++) {
            qa[i] = (float)((i * 7) % 13) * 0.01f; ka[i] = (float)((i * 5) % 11) * 0.01f; va[i] = (float)(i % 17);
        }
        big.threads = 2;
        usleep(300000);                           /* OpenBLAS's workers stop spinning and sleep */
        t0 = other_threads_ticks();
        if (t0 < 0) {
            print_message("no per-thread CPU times here: OpenBLAS's workers not measured\n");
        } else {
            for (it = 0; it < 24; it++) assert_int_equal(fa_naive(&big, qa, ka, va, oa, NULL), FA_OK);
            t1 = other_threads_ticks();
            ga = (float *)calloc(1024 * 1024, sizeof(float)); gb = (float *)calloc(1024 * 1024, sizeof(float));
            gc = (float *)calloc(1024 * 1024, sizeof(float));
            assert_true(ga && gb && gc);
            for (it = 0; it < 12; it++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1024, 1024, 1024, 1.0f, ga, 1024, gb, 1024,
                            0.0f, gc, 1024);
            t2 = other_threads_ticks();
            free(ga); free(gb); free(gc);
            print_message("OpenBLAS's workers: %ld ticks during 24 fa_naive calls, %ld during 12 sgemm 1024^3 of "
                          "the program\n", t1 - t0, t2 - t1);
            assert_true(t2 - t1 >= 2);            /* the measurement sees them when they work */
            assert_true(t1 - t0 <= 1);            /* and fa_naive gave them nothing */
        }
    }
    openblas_set_num_threads(1);
#else
    (void)state;
    skip();
#endif
}

/* seq_q = 0: a successful no-op that allocates nothing and writes nothing. */
static void test_seq_q_zero(void **state)
{
    fa_params p = shape(2, 2, 0, 0, 10, 8, 0, 1);
    float buf[64], lse[8], scores[8];
    int path;
    (void)state;
    for (path = 0; path < 2; path++) {
        ref_poison(buf, sizeof buf);
        ref_poison(lse, sizeof lse);
        ref_poison(scores, sizeof scores);
        p.lse = lse;
        ta_reset(-1);
        assert_int_equal(call_path(path, &p, buf, buf, buf, buf, scores), FA_OK);
        assert_int_equal(ta_calls, 0);
        assert_true(ref_is_poison(lse, sizeof lse) && ref_is_poison(scores, sizeof scores));
        assert_true(ref_is_poison(buf, sizeof buf));
        /* no tensor is needed at all */
        assert_int_equal(call_path(path, &p, NULL, NULL, NULL, NULL, NULL), FA_OK);
        assert_int_equal(ws_path(path, &p), 0);
        p.seq_k = 0;
        assert_int_equal(call_path(path, &p, NULL, NULL, NULL, NULL, NULL), FA_OK);
        p.seq_k = 10;
    }
}

/* seq_k = 0: every row has no key: o = 0 and lse = -inf; k and v may be NULL. */
static void test_seq_k_zero(void **state)
{
    int causal, path;
    (void)state;
    for (causal = 0; causal <= 1; causal++) {
        tcase c;
        fa_params p = shape(2, 3, 1, 7, 0, 5, 6, causal);
        tc_init(&c, &p, "seq_k=0 causal=%d", causal);
        tc_ref(&c);
        tc_check(&c, 3, 3);
        for (path = 0; path < 2; path++) {   /* with NULL k and v */
            float o[2 * 3 * 7 * 6], lse[2 * 3 * 7];
            size_t i;
            p.lse = lse;
            ref_poison(o, sizeof o);
            ref_poison(lse, sizeof lse);
            assert_int_equal(call_path(path, &p, c.t.q, NULL, NULL, o, NULL), FA_OK);
            for (i = 0; i < sizeof o / sizeof o[0]; i++) assert_true(o[i] == 0.0f);
            for (i = 0; i < sizeof lse / sizeof lse[0]; i++) assert_true(lse[i] == -INFINITY);
            /* with k and v strides that would step away from NULL: no arithmetic on the NULL pointers
               (regression, seen by clang's UBSan) */
            p.k_stride[0] = 1000; p.k_stride[1] = 100; p.k_stride[2] = 10;
            p.v_stride[0] = 999; p.v_stride[1] = 99; p.v_stride[2] = 9;
            ref_poison(o, sizeof o);
            assert_int_equal(call_path(path, &p, c.t.q, NULL, NULL, o, NULL), FA_OK);
            for (i = 0; i < sizeof o / sizeof o[0]; i++) assert_true(o[i] == 0.0f);
            memset(p.k_stride, 0, sizeof p.k_stride);
            memset(p.v_stride, 0, sizeof p.v_stride);
        }
        tc_free(&c);
    }
}

/* A NaN in one query row reaches no other row; a NaN in a key or value reaches only the rows
   that see that key: rows the reference (on the same input) leaves finite must match it. The key
   is hidden from some rows by causal, by a window, or from every row by a -inf bias; a decode
   shape (4 query rows, 4 query heads per kv head, 600 keys) puts several heads in one tile and
   splits the keys, so the NaN must not cross heads or parts either. */
static void test_nan_isolation(void **state)
{
    static const char *const mask_name[4] = { "none", "causal", "window", "bias" };
    int which, mask, decode;
    (void)state;
    for (decode = 0; decode <= 1; decode++)
        for (which = 0; which < 3; which++)
            for (mask = 0; mask < 4; mask++) {
                int B = 2, Hq = decode ? 8 : 4, Hkv = 2, Sq = decode ? 4 : 40, Sk = decode ? 600 : 60, D = 16;
                int qi = decode ? 2 : 5, kj = Sk - 15, vj = Sk - 10, t, path;
                fa_params p = shape(B, Hq, Hkv, Sq, Sk, D, 0, mask == 1);
                unsigned char *skip;
                size_t r, nskip = 0;
                tcase c;
                if (mask == 2) { p.window_left = 5; p.window_right = 3; }
                tc_init(&c, &p, "nan in %s, mask %s, %s", which == 0 ? "q" : which == 1 ? "k" : "v", mask_name[mask],
                        decode ? "decode" : "prefill");
                if (which == 0) c.t.q[(((size_t)1 * Hq + 2) * Sq + qi) * D + 3] = NAN;   /* b=1 h=2 */
                if (which == 1) c.t.k[(((size_t)0 * Hkv + 1) * Sk + kj) * D + 7] = NAN;  /* b=0 g=1 */
                if (which == 2) c.t.v[(((size_t)1 * Hkv + 0) * Sk + vj) * D + 0] = NAN;  /* b=1 g=0 */
                if (mask == 3) {   /* key padding [B][Sk] that hides the NaN key in its batch */
                    tc_bias(&c, Sk, 0, 0, 1);
                    if (which == 1) c.bias[(size_t)0 * Sk + kj] = -INFINITY;
                    if (which == 2) c.bias[(size_t)1 * Sk + vj] = -INFINITY;
                }
                tc_ref(&c);
                skip = (unsigned char *)calloc(c.rows, 1);
                assert_non_null(skip);
                for (r = 0; r < c.rows; r++) {
                    int bad = c.ref_lse[r] != c.ref_lse[r];
                    for (t = 0; t < D; t++) bad |= c.ref_o[r * D + t] != c.ref_o[r * D + t];
                    skip[r] = (unsigned char)bad;
                    nskip += (size_t)bad;
                }
                if (which == 0) assert_int_equal(nskip, 1);
                else if (mask == 3) assert_int_equal(nskip, 0);
                else assert_true(nskip <= c.rows / 4);   /* one (batch, kv head) at most */
                for (path = 0; path < 2; path++)
                    for (t = 1; t <= 2; t++) {
                        assert_true(tc_run(&c, path, t, 0, 0, WITH_LSE | WITH_SCORES, skip));
                        assert_true(tc_run(&c, path, t, 8, 8, WITH_LSE | WITH_SCORES, skip));
                    }
                free(skip);
                tc_free(&c);
            }
}

/* The rows a NaN reaches in the reference (o or lse NaN), as skip flags for tc_run. */
static unsigned char *nan_rows(const tcase *c, size_t *count)
{
    unsigned char *skip = (unsigned char *)calloc(c->rows ? c->rows : 1, 1);
    size_t r, t, w = c->rows ? c->n_o / c->rows : 0;
    assert_non_null(skip);
    *count = 0;
    for (r = 0; r < c->rows; r++) {
        int bad = c->ref_lse[r] != c->ref_lse[r];
        for (t = 0; t < w; t++) bad |= c->ref_o[r * w + t] != c->ref_o[r * w + t];
        skip[r] = (unsigned char)bad;
        *count += (size_t)bad;
    }
    return skip;
}

/* A NaN is never turned into an empty row (regression: the max of a row kept a NaN only until the
   next element, so a NaN followed by hidden keys, or on AVX-512 by the -INFINITY lanes past a short
   row, gave o = 0 and lse = -inf; fa_merge and the tiled key split likewise). The reached rows are
   NaN where the reference is (tc_run's skip rows), the others match it. */
static void test_nan_propagates(void **state)
{
    int t, path, k;
    (void)state;
    {   /* the issue's case: B = H = 1, Sq = Sk = 2, D = 1, causal, q[0] = NaN: row 0 sees key 0 only */
        fa_params p = shape(1, 1, 0, 2, 2, 1, 0, 1);
        tcase c;
        unsigned char *skip;
        size_t n;
        tc_init(&c, &p, "nan in q[0], causal 2x2");
        c.t.q[0] = NAN;
        tc_ref(&c);
        skip = nan_rows(&c, &n);
        assert_int_equal(n, 1);
        assert_true(skip[0] && c.ref_lse[0] != c.ref_lse[0]);
        for (path = 0; path < 2; path++)
            for (t = 1; t <= 2; t++) assert_true(tc_run(&c, path, t, 0, 0, WITH_LSE | WITH_SCORES, skip));
        free(skip);
        tc_free(&c);
    }
    for (k = 0; k < 3; k++) {   /* a short row (3 and 19 keys) whose last key is NaN: lanes past it are -inf */
        fa_params p = shape(1, 2, 0, 2, k == 2 ? 19 : 3, 4, 0, 0);
        tcase c;
        unsigned char *skip;
        size_t n;
        tc_init(&c, &p, "nan in the last key of a short row, variant %d", k);
        c.t.k[(size_t)(p.seq_k - 1) * 4 + 1] = NAN;        /* head 0's last key */
        if (k == 1) c.t.v[(size_t)(p.seq_k - 1) * 4 + 2] = NAN;   /* and a NaN value element: one column */
        tc_ref(&c);
        skip = nan_rows(&c, &n);
        assert_int_equal(n, 2);                              /* both rows of head 0 */
        for (path = 0; path < 2; path++)
            for (t = 1; t <= 2; t++) assert_true(tc_run(&c, path, t, 0, 0, WITH_LSE | WITH_SCORES, skip));
        free(skip);
        tc_free(&c);
    }
    {   /* decoding with the keys split into parts (256 or 512 keys each at 1-3 threads): a NaN key in
           the last part with visible keys, every later part hidden by a key-padding bias, so that the
           merge sees a NaN part, then only -inf ones */
        static const int pad[1] = { 4096 - 300 };
        fa_params p = shape(1, 2, 1, 1, 4096, 16, 0, 0);
        tcase c;
        unsigned char *skip;
        size_t n;
        tc_init(&c, &p, "nan in the last visible part of split keys");
        tc_bias(&c, 4096, 0, 0, 1);
        bias_pad_keys(&c, pad);
        c.t.k[(size_t)290 * 16 + 3] = NAN;
        tc_ref(&c);
        skip = nan_rows(&c, &n);
        assert_int_equal(n, 2);
        for (t = 1; t <= 3; t++) assert_true(tc_run(&c, TILED, t, 0, 0, WITH_LSE, skip));
        assert_true(tc_run(&c, NAIVE, 2, 0, 0, WITH_LSE | WITH_SCORES, skip));
        free(skip);
        tc_free(&c);
    }
    {   /* fa_merge: a NaN part followed by empty ones, and an empty one followed by a NaN one */
        float o0[4] = { 1, 2, 3, 4 }, o1[4] = { 5, 6, 7, 8 }, l0[2] = { NAN, -INFINITY }, l1[2] = { -INFINITY, NAN };
        float o[4], l[2];
        const float *op[2] = { o0, o1 }, *lp[2] = { l0, l1 };
        assert_int_equal(fa_merge(2, 2, 2, op, lp, o, l), FA_OK);
        assert_true(l[0] != l[0] && l[1] != l[1] && o[0] != o[0] && o[3] != o[3]);
    }
}

/* Decoding shapes: few query rows, GQA groups of 1 to 8, long key ranges: the tiled path packs the
   heads of a group into one tile and splits the keys over the threads, merging by log-sum-exp.
   With causal, windows, ALiBi, a key-padding bias, lse, threads 1, 2 and 3. */
static void test_decode(void **state)
{
    static const int cfg[][4] = {   /* Sq, Hq, Hkv, Sk */
        { 1, 8, 1, 3000 }, { 1, 8, 2, 777 }, { 4, 8, 2, 1500 }, { 16, 4, 1, 700 }, { 2, 6, 3, 513 }, { 1, 1, 1, 4097 },
        { 3, 16, 2, 1000 }, { 17, 4, 2, 600 }
    };
    size_t i;
    int variant, t;
    (void)state;
    for (i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
        for (variant = 0; variant < 3; variant++) {
            static const int pad[2] = { 0, 77 };
            tcase c;
            fa_params p = shape(2, cfg[i][1], cfg[i][2], cfg[i][0], cfg[i][3], 64, 0, variant != 0);
            if (variant == 2) { p.window_left = 300; p.softcap = 5.0f; }
            tc_init(&c, &p, "decode Sq=%d Hq=%d Hkv=%d Sk=%d variant %d", cfg[i][0], cfg[i][1], cfg[i][2], cfg[i][3],
                    variant);
            if (variant == 2) {
                tc_alibi(&c, 1, cfg[i][1]);
                tc_bias(&c, cfg[i][3], 0, 0, 1);
                bias_pad_keys(&c, pad);
            }
            tc_ref(&c);
            assert_true(tc_run(&c, NAIVE, 2, 0, 0, WITH_LSE | WITH_SCORES, NULL));
            for (t = 1; t <= 3; t++) {
                assert_true(tc_run(&c, TILED, t, 0, 0, WITH_LSE, NULL));
                assert_true(tc_run(&c, TILED, t, 0, 0, 0, NULL));
            }
            assert_true(tc_run(&c, TILED, 2, 0, 37, WITH_LSE, NULL));
            tc_free(&c);
        }
}

/* ============================================================================================== */
/* Issue #10: a row's o and lse depend on its inputs and p only                                   */
/* ============================================================================================== */

typedef struct det_shape {
    const char *name;
    int B, Hq, Hkv, Sq, Sk, D, causal, wl, wr, alibi, bias, bq, bk;   /* bias 1: packed, 2: key padding */
    float cap;
    int varies;    /* 1: the library's tile height differs between the calls below; 2: the keys are split */
} det_shape;

/* fa_tiled on a view of c's packed tensors: batch b, kv groups [g, g + ng) (query heads g*group ..),
   as a request of its own (1 batch, ng kv heads, explicit strides), writing o and lse at the view's
   place in packed o_full, lse_full. */
static fa_status det_view(const tcase *c, int b, int g, int ng, int threads, fa_pool *pool, float *o_full,
                          float *lse_full, float *lse_tmp)
{
    const fa_params *P = &c->p;
    fa_params p = *P;
    int Hkv = P->kv_heads ? P->kv_heads : P->heads, grp = P->heads / Hkv, Dv = P->head_dim_v ? P->head_dim_v : P->head_dim;
    int64_t qs[3], ks[3], vs[3], os[3], bs[4];
    fa_status st;
    size_t i;
    qs[2] = P->head_dim; qs[1] = (int64_t)P->seq_q * qs[2]; qs[0] = P->heads * qs[1];
    ks[2] = P->head_dim; ks[1] = (int64_t)P->seq_k * ks[2]; ks[0] = Hkv * ks[1];
    vs[2] = Dv; vs[1] = (int64_t)P->seq_k * vs[2]; vs[0] = Hkv * vs[1];
    os[2] = Dv; os[1] = (int64_t)P->seq_q * os[2]; os[0] = P->heads * os[1];
    memcpy(bs, P->bias_stride, sizeof bs);
    if (P->bias && !bs[0] && !bs[1] && !bs[2] && !bs[3]) {
        bs[3] = 1; bs[2] = P->seq_k; bs[1] = (int64_t)P->seq_q * bs[2]; bs[0] = P->heads * bs[1];
    }
    p.batch = 1; p.heads = ng * grp; p.kv_heads = ng;
    memcpy(p.q_stride, qs, sizeof qs); memcpy(p.k_stride, ks, sizeof ks);
    memcpy(p.v_stride, vs, sizeof vs); memcpy(p.o_stride, os, sizeof os);
    p.threads = threads; p.pool = pool; p.lse = lse_tmp;
    if (P->bias) { p.bias = P->bias + b * bs[0] + (int64_t)g * grp * bs[1]; memcpy(p.bias_stride, bs, sizeof bs); }
    if (P->alibi_slopes) p.alibi_slopes = P->alibi_slopes + b * P->alibi_stride + g * grp;
    st = fa_tiled(&p, c->t.q + b * qs[0] + (int64_t)g * grp * qs[1], c->t.k + b * ks[0] + g * ks[1],
                  c->t.v + b * vs[0] + g * vs[1], o_full + b * os[0] + (int64_t)g * grp * os[1]);
    for (i = 0; i < (size_t)ng * grp * P->seq_q; i++)
        lse_full[((size_t)b * P->heads + (size_t)g * grp) * P->seq_q + i] = lse_tmp[i];
    return st;
}

/* The library's tiling of a request: tile height and key chunks. */
static void det_plan(const fa_params *p, int *nq, int *nchunk)
{
    fa__dims d;
    fa__tiled_plan pl;
    assert_int_equal(fa__resolve(p, p, p, p, p, &d, NULL), FA_OK);
    fa__tiled_plan_make(&d, fa__kernels_for(fa__isa()), &pl);
    *nq = pl.nq;
    *nchunk = pl.nchunk;
}

/* Bitwise the same o and lse at threads 1, 2, 3, 5, 8, on a pool, and for a batch of 1 or a group
   of heads computed alone, over prefill, causal, windows, the modifiers, decode (Sq 1..16, Sk up to
   5000) and packed GQA heads; the threads=1 result is checked against the float64 reference too. The
   plans are checked to differ where the case says so (tile heights, split keys), so that the
   comparisons meet different tilings. */
static void test_determinism(void **state)
{
    static const det_shape S[] = {
        { "prefill", 3, 2, 2, 300, 300, 32, 0, 0, 0, 0, 0, 0, 0, 0.0f, 1 },
        { "prefill causal GQA", 3, 4, 2, 333, 333, 64, 1, 0, 0, 0, 0, 0, 0, 0.0f, 1 },
        { "causal window", 2, 2, 2, 400, 500, 32, 1, 37, 0, 0, 0, 0, 0, 0.0f, 1 },
        { "window both sides, Sq > Sk", 2, 2, 2, 350, 300, 32, 0, 50, 20, 0, 0, 0, 0, 0.0f, 1 },
        { "causal softcap alibi bias", 2, 2, 2, 200, 260, 128, 1, 0, 0, 1, 1, 0, 0, 5.0f, 1 },
        { "bias key padding, window", 2, 4, 2, 100, 400, 32, 0, 60, 0, 0, 2, 0, 0, 0.0f, 1 },
        { "user blocks", 2, 2, 2, 150, 170, 32, 1, 0, 0, 1, 0, 20, 48, 0.0f, 0 },
        { "decode GQA (issue #10's example)", 8, 8, 2, 1, 4096, 64, 0, 0, 0, 0, 0, 0, 0, 0.0f, 2 },
        { "decode Sq=3 causal", 2, 4, 4, 3, 5000, 32, 1, 0, 0, 0, 0, 0, 0, 0.0f, 2 },
        { "decode window modifiers", 2, 2, 2, 2, 1500, 32, 1, 300, 0, 1, 2, 0, 0, 5.0f, 2 },
        { "decode GQA packed modifiers", 2, 8, 2, 4, 2000, 32, 0, 0, 0, 1, 0, 0, 0, 5.0f, 2 },
        { "row-major decode modifiers", 2, 3, 3, 5, 700, 32, 0, 200, 50, 1, 1, 0, 0, 0.0f, 2 },
        { "16 rows, split keys", 2, 2, 2, 16, 3000, 32, 1, 0, 0, 0, 0, 0, 0, 0.0f, 2 }
    };
    static const int T[] = { 1, 2, 3, 5, 8 };
    size_t s, i;
    (void)state;
    for (s = 0; s < sizeof S / sizeof S[0]; s++) {
        const det_shape *x = &S[s];
        tcase c;
        fa_params p = shape(x->B, x->Hq, x->Hkv, x->Sq, x->Sk, x->D, 0, x->causal);
        fa_pool *pool;
        float *o0, *l0, *o1, *l1, *lt;
        int nq0, nq1, nch, varied = 0, split = 1, run;
        p.window_left = x->wl; p.window_right = x->wr; p.softcap = x->cap;
        p.block_q = x->bq; p.block_k = x->bk;
        tc_init(&c, &p, "determinism: %s", x->name);
        if (x->alibi) tc_alibi(&c, 1, x->Hq);
        if (x->bias == 1) tc_bias(&c, 0, 0, 0, 0);
        if (x->bias == 2) {
            static const int pad[2] = { 0, 41 };
            tc_bias(&c, x->Sk, 0, 0, 1);
            bias_pad_keys(&c, pad);
        }
        tc_ref(&c);
        o0 = ref_alloc(c.n_o); l0 = ref_alloc(c.rows); o1 = ref_alloc(c.n_o); l1 = ref_alloc(c.rows);
        lt = ref_alloc(c.rows);
        assert_true(o0 && l0 && o1 && l1 && lt);
        assert_int_equal(fa_pool_create(4, &pool), FA_OK);
        p = c.p;
        p.threads = 1; p.lse = l0;
        assert_int_equal(fa_tiled(&p, c.t.q, c.t.k, c.t.v, o0), FA_OK);
        assert_true(close_rows(&c, "threads=1 o", o0, c.ref_o, c.rows, c.n_o / c.rows, NULL));
        assert_true(close_rows(&c, "threads=1 lse", l0, c.ref_lse, c.rows, 1, NULL));
        det_plan(&p, &nq0, &nch);
        split &= nch > 1;
        /* the whole request at other thread counts and on the pool (all its threads, and 3) */
        for (run = 0; run < (int)(sizeof T / sizeof T[0]) + 1; run++) {
            p = c.p;
            p.threads = run < (int)(sizeof T / sizeof T[0]) ? T[run] : 0;
            p.pool = run < (int)(sizeof T / sizeof T[0]) ? NULL : pool;
            p.lse = l1;
            ref_poison(o1, c.n_o * sizeof(float)); ref_poison(l1, c.rows * sizeof(float));
            assert_int_equal(fa_tiled(&p, c.t.q, c.t.k, c.t.v, o1), FA_OK);
            if (memcmp(o0, o1, c.n_o * sizeof(float)) || memcmp(l0, l1, c.rows * sizeof(float)))
                fail_msg("%s: threads %d%s differ from threads 1", c.name, p.threads, p.pool ? " (pool)" : "");
            det_plan(&p, &nq1, &nch);
            varied |= nq1 != nq0;
            split &= nch > 1;
        }
        p = c.p; p.threads = 3; p.pool = pool; p.lse = l1;
        assert_int_equal(fa_tiled(&p, c.t.q, c.t.k, c.t.v, o1), FA_OK);
        if (memcmp(o0, o1, c.n_o * sizeof(float)) || memcmp(l0, l1, c.rows * sizeof(float)))
            fail_msg("%s: 3 threads of a pool differ from threads 1", c.name);
        /* every batch alone (1 thread, 3, a pool), and the last kv group of the last batch alone */
        for (i = 0; i < 3; i++) {
            int b, th = i == 1 ? 3 : 1;
            memcpy(o1, o0, c.n_o * sizeof(float)); memcpy(l1, l0, c.rows * sizeof(float));
            for (b = 0; b < x->B; b++) {
                size_t off = (size_t)b * x->Hq * x->Sq, n = (size_t)x->Hq * x->Sq;
                ref_poison(o1 + off * x->D, n * x->D * sizeof(float)); ref_poison(l1 + off, n * sizeof(float));
                assert_int_equal(det_view(&c, b, 0, x->Hkv, th, i == 2 ? pool : NULL, o1, l1, lt), FA_OK);
            }
            if (memcmp(o0, o1, c.n_o * sizeof(float)) || memcmp(l0, l1, c.rows * sizeof(float)))
                fail_msg("%s: batches computed alone (threads %d%s) differ", c.name, th, i == 2 ? ", pool" : "");
        }
        {
            int b = x->B - 1, g = x->Hkv - 1, grp = x->Hq / x->Hkv;
            size_t off = ((size_t)b * x->Hq + (size_t)g * grp) * x->Sq, n = (size_t)grp * x->Sq;
            fa_params v = c.p;
            memcpy(o1, o0, c.n_o * sizeof(float)); memcpy(l1, l0, c.rows * sizeof(float));
            ref_poison(o1 + off * x->D, n * x->D * sizeof(float)); ref_poison(l1 + off, n * sizeof(float));
            assert_int_equal(det_view(&c, b, g, 1, 2, NULL, o1, l1, lt), FA_OK);
            if (memcmp(o0, o1, c.n_o * sizeof(float)) || memcmp(l0, l1, c.rows * sizeof(float)))
                fail_msg("%s: kv group %d of batch %d computed alone differs", c.name, g, b);
            v.batch = 1; v.heads = grp; v.kv_heads = 1; v.threads = 1;
            det_plan(&v, &nq1, &nch);
            varied |= nq1 != nq0;
        }
        if (x->varies == 1 && !varied) fail_msg("%s: every call had the same tile height", c.name);
        if (x->varies == 2 && !split) fail_msg("%s: some call did not split the keys", c.name);
        fa_pool_destroy(pool);
        free(o0); free(l0); free(o1); free(l1); free(lt);
        tc_free(&c);
    }
    {   /* a key whose weight underflows to 0 in every row that sees it, with an inf in its V: whether
           a row adds 0 * inf (NaN) or leaves the key out must not depend on the tiling, here on
           whether block 0 is on the mask's edge for the tile holding the row (the tiles' heights
           differ with the threads) */
        tcase c;
        fa_params p = shape(2, 2, 0, 300, 300, 16, 0, 1);
        float *o0, *o1;
        size_t i, nan0 = 0;
        tc_init(&c, &p, "determinism: an inf in V behind a zero weight");
        for (i = 0; i < c.t.nq; i += 16) c.t.q[i] = 4.0f;
        for (i = 0; i < c.t.nk; i += (size_t)300 * 16) {
            c.t.k[i + 5 * 16] = -400.0f;                   /* key 5: a score near -400 in every row */
            c.t.v[i + 5 * 16 + 3] = INFINITY;
        }
        tc_ref(&c);
        o0 = ref_alloc(c.n_o); o1 = ref_alloc(c.n_o);
        assert_true(o0 && o1);
        p = c.p; p.threads = 1;
        assert_int_equal(fa_tiled(&p, c.t.q, c.t.k, c.t.v, o0), FA_OK);
        for (i = 0; i < c.n_o; i++) nan0 += o0[i] != o0[i];
        for (i = 1; i < sizeof T / sizeof T[0]; i++) {
            p.threads = T[i];
            assert_int_equal(fa_tiled(&p, c.t.q, c.t.k, c.t.v, o1), FA_OK);
            if (memcmp(o0, o1, c.n_o * sizeof(float)))
                fail_msg("%s: threads %d differ from threads 1 (%zu NaN at threads 1)", c.name, T[i], nan0);
        }
        free(o0); free(o1);
        tc_free(&c);
    }
    {   /* a row's bits do not depend on the other rows' data, even those sharing its SIMD vector:
           row 1 made to score far above its running max late in the keys (its rescale), every
           other row must keep its bits (and rows of other batches, heads and the same head) */
        static const int th2[] = { 1, 2 };
        tcase c;
        fa_params p = shape(2, 2, 0, 40, 900, 32, 0, 0);
        float *o0, *o1, *l0, *l1;
        size_t i, t, n = 900;
        int run;
        tc_init(&c, &p, "determinism: a row alone among others");
        tc_ref(&c);
        o0 = ref_alloc(c.n_o); o1 = ref_alloc(c.n_o); l0 = ref_alloc(c.rows); l1 = ref_alloc(c.rows);
        assert_true(o0 && o1 && l0 && l1);
        for (run = 0; run < 2; run++) {
            p = c.p; p.threads = th2[run]; p.lse = l0;
            assert_int_equal(fa_tiled(&p, c.t.q, c.t.k, c.t.v, o0), FA_OK);
            if (run == 0) for (t = 0; t < 32; t++) c.t.q[32 + t] = 4.0f * c.t.k[(n - 100) * 32 + t];
            p.lse = l1;
            assert_int_equal(fa_tiled(&p, c.t.q, c.t.k, c.t.v, o1), FA_OK);
            for (i = 0; i < c.rows; i++)
                if (i != 1 && (memcmp(o0 + i * 32, o1 + i * 32, 32 * sizeof(float)) || memcmp(l0 + i, l1 + i, sizeof(float))))
                    fail_msg("%s: row %zu changed with row 1's data (threads %d)", c.name, i, p.threads);
            if (run == 0 && !memcmp(o0 + 32, o1 + 32, 32 * sizeof(float))) fail_msg("%s: row 1 did not change", c.name);
        }
        free(o0); free(o1); free(l0); free(l1);
        tc_free(&c);
    }
}

/* ============================================================================================== */
/* Issue #2: errors, memory                                                                       */
/* ============================================================================================== */

/* fa_explain's answer for a call of `path` with these arguments equals `why` (NULL: accepted). */
static void expect_why(int path, const fa_params *p, const void *q, const void *k, const void *v, const void *o,
                       const float *scores, const char *why, const char *what)
{
    const char *got = fa_explain(p, q, k, v, o, path == NAIVE ? scores : NULL);
    if ((got == NULL) != (why == NULL) || (got && strcmp(got, why) != 0)) {
        print_error("%s: fa_explain for %s said \"%s\", expected \"%s\"\n", what, path_name[path],
                    got ? got : "(NULL)", why ? why : "(NULL)");
        fail();
    }
}

/* Calls both paths on p and checks the status, that o, lse and scores are untouched, that nothing
   was left allocated, and that fa_explain gives the reason `why` (NULL for FA_OK). */
static void expect_status(const fa_params *p0, int with_q, int with_k, int with_v, int with_o, fa_status want,
                          const char *what, const char *why)
{
    static float q[4096], k[4096], v[4096], o[4096], lse[512], scores[4096];
    int path;
    for (path = 0; path < 2; path++) {
        fa_params p;
        fa_status st;
        if (p0) p = *p0;
        else memset(&p, 0, sizeof p);
        ref_poison(o, sizeof o);
        ref_poison(lse, sizeof lse);
        ref_poison(scores, sizeof scores);
        memset(q, 0, sizeof q); memset(k, 0, sizeof k); memset(v, 0, sizeof v);
        p.lse = lse;
        ta_reset(-1);
        st = call_path(path, p0 ? &p : NULL, with_q ? q : NULL, with_k ? k : NULL, with_v ? v : NULL,
                       with_o ? o : NULL, scores);
        if (st != want) {
            print_error("%s: %s returned %d (%s), expected %d\n", what, path_name[path], (int)st,
                        fa_status_string(st), (int)want);
            fail();
        }
        if (want != FA_OK &&
            (!ref_is_poison(o, sizeof o) || !ref_is_poison(lse, sizeof lse) || !ref_is_poison(scores, sizeof scores))) {
            print_error("%s: %s wrote an output on failure\n", what, path_name[path]);
            fail();
        }
        assert_int_equal(ta_live, 0);
        expect_why(path, p0 ? &p : NULL, with_q ? q : NULL, with_k ? k : NULL, with_v ? v : NULL, with_o ? o : NULL,
                   scores, want == FA_OK ? NULL : why, what);
    }
}

/* A request whose tensors all lie in `arena` (n floats), refused with FA_ERR_INVALID_ARG and the
   reason `why` by fa_naive (with `scores`) and, unless naive_only, fa_tiled: the arena, poisoned
   before, is untouched after, and nothing stays allocated. */
static void expect_overlap(const fa_params *p, const float *q, const float *k, const float *v, float *o,
                           float *scores, float *arena, size_t n, int naive_only, const char *why, const char *what)
{
    int path;
    for (path = 0; path < (naive_only ? 1 : 2); path++) {
        fa_status st;
        ref_poison(arena, n * sizeof(float));
        ta_reset(-1);
        st = call_path(path, p, q, k, v, o, scores);
        if (st != FA_ERR_INVALID_ARG) {
            print_error("%s: %s returned %d (%s), expected FA_ERR_INVALID_ARG\n", what, path_name[path], (int)st,
                        fa_status_string(st));
            fail();
        }
        if (!ref_is_poison(arena, n * sizeof(float))) {
            print_error("%s: %s wrote memory on failure\n", what, path_name[path]);
            fail();
        }
        assert_int_equal(ta_live, 0);
        expect_why(path, p, q, k, v, o, scores, why, what);
    }
}

static void test_errors_invalid(void **state)
{
    fa_params ok = shape(2, 4, 2, 8, 8, 16, 0, 0), p;
    (void)state;
    /* the base request works with these buffers (4096 floats each are enough) */
    expect_status(&ok, 1, 1, 1, 1, FA_OK, "base request", NULL);
    expect_status(NULL, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "p NULL", "p is NULL");
    expect_status(&ok, 0, 1, 1, 1, FA_ERR_INVALID_ARG, "q NULL", "q is NULL (required when seq_q > 0)");
    expect_status(&ok, 1, 0, 1, 1, FA_ERR_INVALID_ARG, "k NULL", "k is NULL (required when seq_q > 0 and seq_k > 0)");
    expect_status(&ok, 1, 1, 0, 1, FA_ERR_INVALID_ARG, "v NULL", "v is NULL (required when seq_q > 0 and seq_k > 0)");
    expect_status(&ok, 1, 1, 1, 0, FA_ERR_INVALID_ARG, "o NULL", "o is NULL (required when seq_q > 0)");
#define BAD(field, value, msg, why) do { p = ok; p.field = value; expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, msg, why); \
        assert_int_equal(fa_naive_workspace_bytes(&p), 0); assert_int_equal(fa_tiled_workspace_bytes(&p), 0); } while (0)
    BAD(batch, 0, "batch 0", "batch must be at least 1");
    BAD(batch, -1, "batch -1", "batch must be at least 1");
    BAD(heads, 0, "heads 0", "heads must be at least 1");
    BAD(heads, -3, "heads -3", "heads must be at least 1");
    BAD(kv_heads, -1, "kv_heads -1", "kv_heads must be 0 (meaning heads) or positive");
    BAD(kv_heads, 3, "heads 4 % kv_heads 3", "heads must be a multiple of kv_heads");
    BAD(kv_heads, 8, "kv_heads 8 > heads 4", "heads must be a multiple of kv_heads");
    BAD(seq_q, -1, "seq_q -1", "seq_q must not be negative");
    BAD(seq_k, -1, "seq_k -1", "seq_k must not be negative");
    BAD(head_dim, 0, "head_dim 0", "head_dim must be at least 1");
    BAD(head_dim, -2, "head_dim -2", "head_dim must be at least 1");
    BAD(head_dim_v, -1, "head_dim_v -1", "head_dim_v must be 0 (meaning head_dim) or positive");
    BAD(window_left, -1, "window_left -1", "window_left must be 0 (unbounded) or positive");
    BAD(window_right, -5, "window_right -5", "window_right must be 0 (unbounded) or positive");
#define SCALE_WHY "scale must be finite, at most 3e38 in magnitude (0 means 1/sqrt(head_dim))"
    BAD(scale, NAN, "scale NaN", SCALE_WHY);
    BAD(scale, INFINITY, "scale inf", SCALE_WHY);
    BAD(scale, -INFINITY, "scale -inf", SCALE_WHY);
#define CAP_WHY "softcap must be 0 (off) or between FLT_MIN (1.17549435e-38) and 3e38"
    BAD(softcap, NAN, "softcap NaN", CAP_WHY);
    BAD(softcap, -1.0f, "softcap -1", CAP_WHY);
    BAD(softcap, INFINITY, "softcap inf", CAP_WHY);
    /* 1/softcap must be finite: FLT_MIN is the smallest cap (regression: 1e-39 gave NaN scores) */
    BAD(softcap, 1e-39f, "softcap 1e-39 (1/softcap infinite)", CAP_WHY);
    BAD(softcap, nextafterf(FLT_MIN, 0.0f), "softcap just below FLT_MIN", CAP_WHY);
    BAD(block_q, -1, "block_q -1", "block_q must be 0 (the library's choice) or positive");
    BAD(block_k, -8, "block_k -8", "block_k must be 0 (the library's choice) or positive");
    BAD(threads, -1, "threads -1", "threads must be 0 (all cores) or positive");
    BAD(dtype, (fa_dtype)7, "dtype 7", "dtype must be FA_F32, FA_F16 or FA_BF16");
    BAD(dtype, (fa_dtype)-1, "dtype -1", "dtype must be FA_F32, FA_F16 or FA_BF16");
    BAD(alibi_stride, -4, "alibi_stride -4", "alibi_stride must not be negative");
    {
        static const float slopes[4] = { 0.5f, 0.25f, 0.125f, 0.0625f };
        p = ok; p.alibi_slopes = slopes; p.alibi_stride = -4;
        expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "alibi_stride -4 with slopes", "alibi_stride must not be negative");
        p = ok; p.alibi_slopes = slopes; p.alibi_stride = INT64_MAX;   /* (B - 1) * stride + Hq overflows */
        expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "alibi_stride overflowing",
                      "alibi_stride: the offsets the slopes reach overflow int64");
    }
    /* o strides: a zero stride on an axis with more than one index, a negative one, token rows,
       heads or batches that overlap (o_stride[1] = Dv / 2 in [B][S][H][Dv], o_stride[0] smaller
       than a batch) */
#define OVL_WHY "o_stride: rows of o overlap (by stride, each axis of more than one index must step over the axes inside it, and a token over head_dim_v)"
    p = ok; p.o_stride[0] = 4 * 8 * 16; p.o_stride[1] = 0; p.o_stride[2] = 16;
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o head stride 0", OVL_WHY);
    p = ok; p.o_stride[0] = 4 * 8 * 16; p.o_stride[1] = 8 * 16; p.o_stride[2] = 0;
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o token stride 0", OVL_WHY);
    p = ok; p.o_stride[0] = 0; p.o_stride[1] = 8 * 16; p.o_stride[2] = 16;
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o batch stride 0 with batch 2", OVL_WHY);
    p = ok; p.o_stride[0] = -(4 * 8 * 16); p.o_stride[1] = 8 * 16; p.o_stride[2] = 16;
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o batch stride negative", "o_stride must not be negative");
    p = ok; p.o_stride[0] = 4 * 8 * 16; p.o_stride[1] = 8 * 16; p.o_stride[2] = 15;
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o token rows overlap", OVL_WHY);
    p = ok; set_bshd(&p);
    expect_status(&p, 1, 1, 1, 1, FA_OK, "o [B][S][H][Dv]", NULL);
    p.o_stride[1] = 8;       /* Dv / 2: head h's second half is head h+1's first */
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o heads overlap ([B][S][H][Dv], head stride Dv/2)", OVL_WHY);
    p = ok; set_bshd(&p); p.o_stride[0] = 64;   /* batch 1 starts inside batch 0's tokens */
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o batches overlap (batch stride 64)", OVL_WHY);
    p = ok; p.o_stride[0] = 4 * 8 * 16; p.o_stride[1] = 8 * 16 - 1; p.o_stride[2] = 16;
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o heads overlap by one element", OVL_WHY);
    p = ok; p.o_stride[0] = 4 * 8 * 16 + 3; p.o_stride[1] = 8 * 16 + 1; p.o_stride[2] = 16;
    expect_status(&p, 1, 1, 1, 1, FA_OK, "o with gaps between heads and batches", NULL);
    p = ok; p.o_stride[0] = INT64_MAX / 2; p.o_stride[1] = 8 * 16; p.o_stride[2] = 16;
    p.batch = 3;
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "o extent overflows int64", "o_stride: the offsets o's rows reach overflow int64");
    p = ok; p.k_stride[0] = INT64_MAX / 2; p.k_stride[1] = 8 * 16; p.k_stride[2] = 16;
    p.batch = 3;
    expect_status(&p, 1, 1, 1, 1, FA_ERR_INVALID_ARG, "k extent overflows int64", "k_stride: the offsets k's rows reach overflow int64");
    /* the fp16 and bf16 storage types are served (issue 16; test_half_storage checks them) */
    p = ok; p.dtype = FA_F16;
    expect_status(&p, 1, 1, 1, 1, FA_OK, "fp16 on CPU", NULL);
    p = ok; p.dtype = FA_BF16;
    expect_status(&p, 1, 1, 1, 1, FA_OK, "bf16 on CPU", NULL);
    /* validation before pointers are needed: an invalid size with NULL pointers is INVALID_ARG */
    p = ok; p.batch = 0;
    expect_status(&p, 0, 0, 0, 0, FA_ERR_INVALID_ARG, "batch 0, NULL tensors", "batch must be at least 1");
#undef BAD
    assert_int_equal(fa_naive_workspace_bytes(NULL), 0);
    assert_int_equal(fa_tiled_workspace_bytes(NULL), 0);
    /* fa_pool_create's reasons */
    {
        fa_pool *pool = NULL;
        assert_string_equal(fa_explain_pool_create(-1, &pool), "threads must be 0 (all cores) or positive");
        assert_string_equal(fa_explain_pool_create(2, NULL), "pool is NULL (where fa_pool_create stores the new pool)");
        assert_null(fa_explain_pool_create(0, &pool));
        assert_null(pool);                           /* it creates nothing */
    }
}

/* Outputs that would race: lse inside o, o inside an input, scores inside o, lse or an input, and
   the same through the bias and the slopes. Each is FA_ERR_INVALID_ARG with its reason and writes
   nothing; the same tensors laid apart are accepted. */
static void test_errors_overlap(void **state)
{
    enum { N = 8192 };
    static float arena[N];
    fa_params p = shape(2, 4, 2, 8, 8, 16, 0, 0);     /* q 1024, k 512, v 512, o 1024, lse 64, scores 512 */
    float *q = arena, *k = arena + 1024, *v = arena + 1536, *o = arena + 2048, *lse = arena + 3072;
    float *sc = arena + 3136, *bias = arena + 3648, *slopes = arena + 4160;
    (void)state;
    p.lse = lse;
    /* apart: accepted by fa_explain (the calls are run elsewhere) */
    expect_why(NAIVE, &p, q, k, v, o, sc, NULL, "apart");
    expect_why(TILED, &p, q, k, v, o, NULL, NULL, "apart");
#define IN_WHY(x) x " overlaps an input (q, k, v, bias or alibi_slopes); outputs must not share memory with inputs"
    expect_overlap(&p, q, k, v, q, sc, arena, N, 0, IN_WHY("o"), "o in place of q");
    expect_overlap(&p, q, k, v, v - 16, sc, arena, N, 0, IN_WHY("o"), "o across the end of k into v");
    expect_overlap(&p, q, k, v, o + 16, sc, arena, N, 0, "lse overlaps o", "o shifted onto lse");
    p.lse = o + 1023;                                   /* lse's first element is o's last */
    expect_overlap(&p, q, k, v, o, sc, arena, N, 0, "lse overlaps o", "lse overlaps o's last element");
    p.lse = k + 100;
    expect_overlap(&p, q, k, v, o, sc, arena, N, 0, IN_WHY("lse"), "lse inside k");
    p.lse = lse;
    expect_overlap(&p, q, k, v, o, o + 512, arena, N, 1, "scores overlaps o or lse", "scores inside o");
    expect_overlap(&p, q, k, v, o, lse - 8, arena, N, 1, "scores overlaps o or lse", "scores over lse");
    expect_overlap(&p, q, k, v, o, q + 4, arena, N, 1, IN_WHY("scores"), "scores inside q");
    p.bias = o + 200; p.bias_stride[0] = 0; p.bias_stride[1] = 0; p.bias_stride[2] = 0; p.bias_stride[3] = 1;
    expect_overlap(&p, q, k, v, o, sc, arena, N, 0, IN_WHY("o"), "bias (one row of keys) inside o");
    p.bias = bias;
    expect_why(TILED, &p, q, k, v, o, NULL, NULL, "bias apart");
    p.bias = NULL; memset(p.bias_stride, 0, sizeof p.bias_stride);
    p.alibi_slopes = lse + 2;                           /* [Hq] slopes inside lse */
    expect_overlap(&p, q, k, v, o, sc, arena, N, 0, IN_WHY("lse"), "alibi slopes inside lse");
    p.alibi_slopes = slopes;
    expect_why(NAIVE, &p, q, k, v, o, sc, NULL, "slopes apart");
    /* inputs may share memory with each other (q, k and v in one buffer) */
    expect_why(NAIVE, &p, q, q, q, o, sc, NULL, "inputs sharing memory");
    /* with Sk = 0, k and v are not read: where they point does not matter */
    p.seq_k = 0;
    expect_why(TILED, &p, q, o, o, o, NULL, NULL, "Sk = 0: k and v ignored");
#undef IN_WHY
}

/* A score matrix that cannot be allocated (Sq = Sk = 2^20, 1024 heads: 4 PiB) and one whose byte
   count overflows size_t: FA_ERR_NO_MEMORY, never a crash, outputs untouched. The tensors of such a
   request span terabytes, and outputs may not overlap inputs or each other: they are laid apart in
   a reservation of address space that cannot be touched (PROT_NONE), so that any access would crash. */
static void test_errors_no_memory(void **state)
{
    const size_t G4 = (size_t)4 << 30, R = 3 * ((size_t)4 << 30) + 4096;
    fa_params p = shape(1, 1024, 0, 1 << 20, 1 << 20, 1, 0, 0);
    size_t ws;
    char *base;
    float *in, *o, *lse, *scores;
    (void)state;
    ws = fa_naive_workspace_bytes(&p);
    assert_true(ws >= ((size_t)1 << 52));           /* at least the 4 PiB of scores */
    /* the tiled path's workspace does not grow with Sq x Sk */
    p.threads = 2;
    assert_true(fa_tiled_workspace_bytes(&p) > 0);
    assert_true(fa_tiled_workspace_bytes(&p) < ((size_t)64 << 20));
    p.threads = 0;
    base = (char *)mmap(NULL, R, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == (char *)MAP_FAILED) {
        print_message("test_errors_no_memory: no 12 GiB address reservation here; the calls are skipped\n");
        return;
    }
    in = (float *)base;                  /* q, k, v: 4 GiB each, the same bytes */
    o = (float *)(base + G4);            /* 4 GiB */
    lse = (float *)(base + 2 * G4);      /* 4 GiB */
    scores = (float *)(base + 3 * G4);   /* 4 PiB: the highest, reaching past the reservation */
    p.lse = lse;
    assert_null(fa_explain(&p, in, in, in, o, scores));
    ta_reset(-1);
    assert_int_equal(fa_naive(&p, in, in, in, o, scores), FA_ERR_NO_MEMORY);
    assert_int_equal(ta_live, 0);
    /* 2^20 heads x 2^20 rows x 2^30 keys x 4 bytes overflows size_t (inputs broadcast over heads
       and overlapping, so that they span 4 GiB; o, 4 TiB, above them) */
    p = shape(1, 1 << 20, 1, 1 << 20, 1 << 30, 1, 0, 0);
    p.q_stride[2] = p.k_stride[2] = p.v_stride[2] = 1;
    assert_true(fa_naive_workspace_bytes(&p) == SIZE_MAX);
    assert_null(fa_explain(&p, in, in, in, scores, NULL));
    ta_reset(-1);
    assert_int_equal(fa_naive(&p, in, in, in, scores, NULL), FA_ERR_NO_MEMORY);
    assert_int_equal(ta_calls, 0);     /* the overflow is seen before any allocation */
    munmap(base, R);
}

/* Sizes at the ends of int: every count in 64 bits (regressions: fa_tiled returned FA_OK and wrote
   nothing for Sq within ~480 of INT_MAX, its tile count (Sq + nq - 1) / nq overflowing int; D + Dv
   overflowed int in the workspace query for head_dim_v = INT_MAX; a huge block_q made the tile's
   lane count overflow int). Such calls need terabytes of o, so the tile plan of the call is checked
   directly: its tiles cover every row; the workspace queries run under UBSan in the _san build. */
static void test_size_limits(void **state)
{
    static const int sqs[3] = { INT_MAX - 100, INT_MAX - 479, INT_MAX };
    int i, bq;
    (void)state;
    for (i = 0; i < 3; i++)
        for (bq = 0; bq <= 1; bq++) {
            fa_params p = shape(1, 2, 1, sqs[i], 64, 16, 0, 1);
            fa__dims d;
            fa__tiled_plan pl;
            int b, h0, nqr;
            int64_t i0;
            p.block_q = bq ? INT_MAX : 0;
            p.threads = 2;
            assert_int_equal(fa__resolve(&p, &p, &p, &p, &p, &d, NULL), FA_OK);
            fa__tiled_plan_make(&d, fa__kernels_for(fa__isa()), &pl);
            assert_true(pl.nq > 0 && pl.ld >= pl.rows && pl.qtiles > 0 && pl.items >= pl.qtiles);
            /* the tiles cover the rows (the last may take a remainder of under 16 rows) */
            assert_true(pl.qtiles * pl.nq + (pl.rows - pl.nq) >= (int64_t)sqs[i] && (pl.qtiles - 1) * pl.nq < (int64_t)sqs[i]);
            fa__tile_pos(&d, &pl, 0, &b, &h0, &i0, &nqr);      /* the first tile holds the last rows */
            assert_true(nqr > 0 && i0 + nqr == (int64_t)sqs[i]);
            assert_true(fa_tiled_workspace_bytes(&p) > 0);
        }
    {
        fa_params p = shape(1, 1, 0, 8, 8, 1, INT_MAX, 0);
        assert_true(fa_tiled_workspace_bytes(&p) > 0);
        assert_true(fa_naive_workspace_bytes(&p) > 0);
        p = shape(1, 1, 0, 8, 8, INT_MAX, INT_MAX, 0);
        assert_true(fa_tiled_workspace_bytes(&p) > 0);
        assert_true(fa_naive_workspace_bytes(&p) > 0);
        p = shape(1, 1, 0, 8, INT_MAX, 16, 0, 0);
        p.block_k = INT_MAX;
        assert_true(fa_tiled_workspace_bytes(&p) > 0);
    }
}

/* Every allocation the call makes is failed in turn: each gives FA_ERR_NO_MEMORY with outputs
   untouched and nothing leaked; then the call runs clean. */
static void alloc_failures(const tcase *c, int path, int threads, int bq, int bk)
{
    fa_params p = c->p;
    float *o = ref_alloc(c->t.no), *lse = ref_alloc(c->rows), *scores = ref_alloc(c->n_scores);
    long n;
    assert_true(o && lse && scores);
    p.threads = threads; p.block_q = bq; p.block_k = bk; p.lse = lse;
    for (n = 0; n < 64; n++) {
        fa_status st;
        int failed;
        ref_poison(o, c->t.no * sizeof(float));
        ref_poison(lse, c->rows * sizeof(float));
        ref_poison(scores, c->n_scores * sizeof(float));
        ta_reset(n);
        st = call_path(path, &p, c->t.q, c->t.k, c->t.v, o, scores);
        pthread_mutex_lock(&ta_mu);
        failed = ta_failed;
        ta_fail_in = -1;
        pthread_mutex_unlock(&ta_mu);
        assert_int_equal(ta_live, 0);
        if (!failed) {   /* the call made fewer than n+1 allocations: it must have succeeded */
            assert_int_equal(st, FA_OK);
            if (n == 0) assert_int_equal(ws_path(path, &p), 0);
            break;
        }
        if (st != FA_ERR_NO_MEMORY) {
            print_error("%s: %s threads=%d, allocation %ld failed: status %d\n", c->name, path_name[path],
                        threads, n, (int)st);
            fail();
        }
        assert_true(ref_is_poison(o, c->t.no * sizeof(float)));
        assert_true(ref_is_poison(lse, c->rows * sizeof(float)));
        assert_true(ref_is_poison(scores, c->n_scores * sizeof(float)));
    }
    assert_true(n < 64);
    free(o); free(lse); free(scores);
}

static void test_alloc_failure(void **state)
{
    static const int shp[][7] = {   /* B Hq Hkv Sq Sk D causal */
        { 2, 4, 2, 50, 70, 16, 1 }, { 1, 8, 2, 1, 3000, 64, 0 }, { 1, 1, 0, 200, 200, 8, 0 }
    };
    size_t i;
    int t;
    (void)state;
    for (i = 0; i < sizeof shp / sizeof shp[0]; i++) {
        tcase c;
        fa_params p = shape(shp[i][0], shp[i][1], shp[i][2], shp[i][3], shp[i][4], shp[i][5], 0, shp[i][6]);
        tc_init(&c, &p, "alloc failure shape %zu", i);
        tc_ref(&c);
        for (t = 1; t <= 2; t++) {
            alloc_failures(&c, NAIVE, t, 0, 0);
            alloc_failures(&c, TILED, t, 0, 0);
            alloc_failures(&c, TILED, t, 16, 16);
        }
        tc_free(&c);
    }
}

/* The workspace functions: what the memory tables print. Exactness against the allocator is
   checked by every tc_run; here the shapes of the numbers. */
static void test_workspace_bytes(void **state)
{
    fa_params p = shape(2, 8, 0, 4096, 4096, 64, 0, 0), q;
    size_t n1, n2, t1, t2;
    (void)state;
    p.threads = 2;
    n1 = fa_naive_workspace_bytes(&p);
    assert_true(n1 >= (size_t)2 * 8 * 4096 * 4096 * sizeof(float));
    t1 = fa_tiled_workspace_bytes(&p);
    assert_true(t1 > 0 && t1 < ((size_t)16 << 20));
    q = p; q.seq_q = q.seq_k = 16384;
    n2 = fa_naive_workspace_bytes(&q);
    t2 = fa_tiled_workspace_bytes(&q);
    assert_true(n1 < (size_t)2 * 8 * 4096 * 4096 * sizeof(float) + ((size_t)4 << 20));   /* + 2 x [Sq][D] and threads */
    assert_true(n2 >= (size_t)2 * 8 * 16384 * 16384 * sizeof(float));   /* the score matrix: O(Sq x Sk) */
    assert_true(t2 < ((size_t)16 << 20));                /* the tiles: not O(Sq x Sk) */
    assert_true(t2 <= 2 * t1);
    /* a no-op allocates nothing */
    q = p; q.seq_q = 0;
    assert_int_equal(fa_naive_workspace_bytes(&q), 0);
    assert_int_equal(fa_tiled_workspace_bytes(&q), 0);
}

/* ============================================================================================== */
/* Issue #5: masks and score modifiers                                                             */
/* ============================================================================================== */

static void test_windows(void **state)
{
    /* wl, wr, causal, Sq, Sk */
    static const int w[][5] = {
        { 1, 0, 0, 100, 100 }, { 1, 0, 1, 100, 100 }, { 5, 0, 1, 100, 100 }, { 7, 0, 0, 60, 130 },
        { 3, 0, 1, 130, 60 }, { 110, 0, 1, 100, 100 }, { 500, 0, 0, 40, 90 }, { 0, 1, 0, 100, 100 },
        { 0, 3, 0, 70, 110 }, { 0, 105, 0, 100, 100 }, { 0, 2, 1, 50, 50 }, { 4, 2, 0, 100, 100 },
        { 1, 1, 0, 33, 77 }, { 9, 5, 0, 90, 40 }, { 16, 0, 1, 100, 100 }, { 0, 16, 0, 100, 100 }
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof w / sizeof w[0]; i++) {
        tcase c;
        fa_params p = shape(2, 2, 1, w[i][3], w[i][4], 16, 0, w[i][2]);
        p.window_left = w[i][0];
        p.window_right = w[i][1];
        tc_init(&c, &p, "window left=%d right=%d causal=%d Sq=%d Sk=%d", w[i][0], w[i][1], w[i][2], w[i][3], w[i][4]);
        tc_ref(&c);
        tc_check(&c, 8, 8);                 /* small tiles: many lie wholly outside the window */
        assert_true(tc_run(&c, TILED, 1, 1, 1, WITH_LSE, NULL));
        assert_true(tc_run(&c, TILED, 2, 7, 13, WITH_LSE, NULL));
        tc_free(&c);
    }
}

static void test_softcap(void **state)
{
    static const float cap[] = { 1.5f, 30.0f };
    size_t i;
    int causal, sc;
    (void)state;
    for (i = 0; i < 2; i++)
        for (causal = 0; causal <= 1; causal++)
            for (sc = 0; sc < 2; sc++) {
                tcase c;
                fa_params p = shape(2, 2, 0, 45, 70, 32, 0, causal);
                p.softcap = cap[i];
                p.scale = sc ? 2.0f : 0.0f;  /* with scale 2 the logits reach the cap of 30 too */
                tc_init(&c, &p, "softcap %g causal=%d scale=%g", (double)cap[i], causal, (double)p.scale);
                tc_ref(&c);
                tc_check(&c, 16, 16);
                tc_free(&c);
            }
}

static void test_alibi(void **state)
{
    int causal, mode;
    (void)state;
    for (mode = 0; mode < 3; mode++)
        for (causal = 0; causal <= 1; causal++) {
            tcase c;
            fa_params p = shape(3, 4, 2, 40, 75, 16, 0, causal);
            tc_init(&c, &p, "alibi %s causal=%d", mode == 0 ? "[Hq]" : mode == 1 ? "[B][Hq]" : "[B][Hq+3]", causal);
            tc_alibi(&c, mode > 0, mode == 2 ? 4 + 3 : 4);
            tc_ref(&c);
            tc_check(&c, 16, 16);
            tc_free(&c);
        }
    {   /* Sq > Sk, non-causal: the distance |d - j| is measured from the bottom-right diagonal */
        tcase c;
        fa_params p = shape(1, 2, 0, 50, 20, 8, 0, 0);
        tc_init(&c, &p, "alibi Sq>Sk");
        tc_alibi(&c, 0, 0);
        tc_ref(&c);
        tc_check(&c, 7, 7);
        tc_free(&c);
    }
}

static void test_bias_patterns(void **state)
{
    int B = 2, H = 3, Sq = 37, Sk = 66, causal, pat;
    (void)state;
    for (pat = 0; pat < 7; pat++)
        for (causal = 0; causal <= 1; causal++) {
            static const char *const names[] = { "packed [B][H][Sq][Sk]", "full with padding", "key padding [B][Sk]",
                                                  "shared [Sq][Sk]", "per head [H][Sk]", "key-major [B][H][Sk][Sq]",
                                                  "scalar per batch [B]" };
            tcase c;
            fa_params p = shape(B, H, 1, Sq, Sk, 16, 0, causal);
            tc_init(&c, &p, "bias %s causal=%d", names[pat], causal);
            switch (pat) {
            case 0: tc_bias(&c, 0, 0, 0, 0); break;
            case 1: tc_bias(&c, (int64_t)H * Sq * (Sk + 5) + 11, (int64_t)Sq * (Sk + 5), Sk + 5, 1); break;
            case 2: {
                static const int pad[2] = { 0, 13 };
                tc_bias(&c, Sk, 0, 0, 1);
                bias_pad_keys(&c, pad);
                break;
            }
            case 3: tc_bias(&c, 0, 0, Sk, 1); break;
            case 4: tc_bias(&c, 0, Sk, 0, 1); break;
            case 5: tc_bias(&c, (int64_t)H * Sk * Sq, (int64_t)Sk * Sq, 1, Sq); break;
            default: tc_bias(&c, 1, 0, 0, 0); break;
            }
            tc_ref(&c);
            tc_check(&c, 16, 16);
            assert_true(tc_run(&c, TILED, 2, 5, 9, WITH_LSE, NULL));
            tc_free(&c);
        }
}

/* A bias that hides whole rows, whole tiles in the middle of rows, and a whole (batch, head):
   those rows give 0 and -inf, the others are unaffected, nothing is NaN. */
static void test_bias_hides_rows_and_tiles(void **state)
{
    int B = 2, H = 2, Sq = 48, Sk = 96, causal;
    (void)state;
    for (causal = 0; causal <= 1; causal++) {
        tcase c;
        fa_params p = shape(B, H, 0, Sq, Sk, 16, 0, causal);
        float *bias;
        int b, h, i, j;
        tc_init(&c, &p, "bias hides rows and tiles causal=%d", causal);
        bias = tc_bias(&c, 0, 0, 0, 0);
        for (b = 0; b < B; b++)
            for (h = 0; h < H; h++)
                for (i = 0; i < Sq; i++)
                    for (j = 0; j < Sk; j++) {
                        float *x = bias + (((size_t)b * H + h) * Sq + i) * Sk + j;
                        if (i == 3 || i == Sq - 1) *x = -INFINITY;             /* whole rows */
                        if (j >= 16 && j < 48) *x = -INFINITY;                   /* whole tiles of 16 */
                        if (i >= 20 && i < 30 && j >= 48) *x = -INFINITY;        /* all but the first tile */
                        if (i >= 30 && i < 36 && j < 64) *x = -INFINITY;         /* all but the last two */
                        if (b == 1 && h == 0) *x = -INFINITY;                    /* a whole (batch, head) */
                    }
        tc_ref(&c);
        tc_check(&c, 16, 16);
        assert_true(tc_run(&c, TILED, 1, 8, 16, WITH_LSE, NULL));
        assert_true(tc_run(&c, TILED, 2, 16, 32, WITH_LSE, NULL));
        assert_true(tc_run(&c, TILED, 2, 3, 5, WITH_LSE, NULL));
        {   /* check directly: the hidden rows are exactly 0 and -inf */
            size_t r = ((size_t)0 * H + 1) * Sq + 3;
            assert_true(c.ref_lse[r] == -INFINITY && c.ref_o[r * 16] == 0.0f);
        }
        tc_free(&c);
    }
    {   /* a window and a bias that together hide every key of some rows */
        tcase c;
        fa_params p = shape(1, 2, 0, 40, 40, 8, 0, 1);
        int i, j;
        p.window_left = 3;
        tc_init(&c, &p, "window plus bias hide rows");
        tc_bias(&c, 0, 0, 40, 1);
        for (i = 10; i < 20; i++)
            for (j = i - 3; j <= i; j++) c.bias[(size_t)i * 40 + j] = -INFINITY;
        tc_ref(&c);
        tc_check(&c, 4, 4);
        tc_free(&c);
    }
}

/* Each modifier alone is above; here all of them at once, with causal, GQA, [B][S][H][D]
   strides and Sq != Sk both ways. */
static void test_all_modifiers(void **state)
{
    static const int qk[][2] = { { 45, 97 }, { 97, 45 }, { 1, 150 }, { 64, 64 } };
    size_t i;
    int causal;
    (void)state;
    for (i = 0; i < sizeof qk / sizeof qk[0]; i++)
        for (causal = 0; causal <= 1; causal++) {
            static const int pad[2] = { 5, 17 };
            tcase c;
            fa_params p = shape(2, 6, 2, qk[i][0], qk[i][1], 32, 24, causal);
            set_bshd(&p);
            p.window_left = 20;
            p.window_right = causal ? 0 : 9;
            p.softcap = 2.5f;
            p.scale = 0.3f;
            tc_init(&c, &p, "all modifiers Sq=%d Sk=%d causal=%d", qk[i][0], qk[i][1], causal);
            tc_alibi(&c, 1, 6);
            tc_bias(&c, qk[i][1], 0, 0, 1);
            bias_pad_keys(&c, pad);
            tc_ref(&c);
            tc_check(&c, 16, 16);
            assert_true(tc_run(&c, TILED, 2, 3, 11, WITH_LSE, NULL));
            assert_true(tc_run(&c, TILED, 1, 200, 200, WITH_LSE, NULL));
            tc_free(&c);
        }
}

/* Strides for an [n0][n1][n2][row] tensor with its three outer axes nested in a random order,
   random padding after each row and each axis: a layout with gaps, never overlapping. */
static void random_layout(ref_rng *r, int64_t n0, int64_t n1, int64_t n2, int row, int64_t st[3])
{
    int perm[3] = { 0, 1, 2 }, a, k;
    int64_t n[3], cur = row + ref_randint(r, 0, 3);
    n[0] = n0; n[1] = n1; n[2] = n2;
    for (a = 2; a > 0; a--) {
        int j = ref_randint(r, 0, a), x = perm[a];
        perm[a] = perm[j]; perm[j] = x;
    }
    for (k = 2; k >= 0; k--) {
        st[perm[k]] = cur;
        cur = cur * (n[perm[k]] > 0 ? n[perm[k]] : 1) + ref_randint(r, 0, 2);
    }
}

/* Random requests mixing every feature: shapes (Sk = 0, Sq = 1, Sq > Sk ...), GQA, head dims,
   layouts with gaps, scale, causal, windows, softcap, ALiBi, bias in every broadcast pattern with
   -inf entries, block sizes and threads. FA_TEST_RANDOM sets the count (default 150). */
static void test_random_configs(void **state)
{
    static const int Ds[] = { 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 48, 64, 80, 96, 128 };
    const char *env = getenv("FA_TEST_RANDOM");
    int n = env && *env ? atoi(env) : 150, it;
    ref_rng g;
    (void)state;
    ref_seed(&g, g_seed_base ^ 0xABCDEF);
    for (it = 0; it < n; it++) {
        tcase c;
        fa_params p;
        int Hkv = ref_randint(&g, 1, 3), grp = ref_randint(&g, 1, 4), B = ref_randint(&g, 1, 3);
        int Sq = ref_randint(&g, 0, 9) == 0 ? 1 : ref_randint(&g, 1, 160);
        int Sk = ref_randint(&g, 0, 14) == 0 ? 0 : ref_randint(&g, 1, 220);
        int D = Ds[ref_randint(&g, 0, 15)], Dv = ref_randint(&g, 0, 2) == 0 ? Ds[ref_randint(&g, 0, 15)] : 0;
        int bias_kind = ref_randint(&g, 0, 3) == 0 ? ref_randint(&g, 0, 2) : -1, thr;
        if (B * Hkv * grp > 12) grp = 1;
        p = shape(B, Hkv * grp, Hkv, Sq, Sk, D, Dv, ref_randint(&g, 0, 1));
        if (ref_randint(&g, 0, 3) == 0) p.window_left = ref_randint(&g, 1, Sk + 5);
        if (ref_randint(&g, 0, 4) == 0) p.window_right = ref_randint(&g, 1, Sk + 5);
        if (ref_randint(&g, 0, 4) == 0) p.softcap = ref_randint(&g, 0, 1) ? 1.5f : 30.0f;
        /* an explicit scale, kept to logits of N(0,1) size: API.md's accuracy is for N(0,1) inputs;
           large logits are test_scale_and_large_logits's, on inputs that make them exact */
        if (ref_randint(&g, 0, 2) == 0) p.scale = (float)((ref_uniform(&g) * 2.0 - 0.5) / sqrt((double)D));
        if (ref_randint(&g, 0, 1)) {
            int Dq = p.head_dim, Dvv = Dv ? Dv : D;
            random_layout(&g, B, p.heads, Sq, Dq, p.q_stride);
            random_layout(&g, B, Hkv, Sk, Dq, p.k_stride);
            random_layout(&g, B, Hkv, Sk, Dvv, p.v_stride);
            random_layout(&g, B, p.heads, Sq, Dvv, p.o_stride);
        }
        tc_init(&c, &p, "random config %d: B=%d Hq=%d Hkv=%d Sq=%d Sk=%d D=%d Dv=%d causal=%d wl=%d wr=%d cap=%g",
                it, B, p.heads, Hkv, Sq, Sk, D, Dv, p.causal, p.window_left, p.window_right, (double)p.softcap);
        if (ref_randint(&g, 0, 4) == 0) tc_alibi(&c, ref_randint(&g, 0, 1), p.heads + ref_randint(&g, 0, 2));
        if (bias_kind >= 0) {
            /* keys innermost, or key-major; any outer axis may broadcast */
            int64_t st[4] = { 0, 0, 0, 0 }, nn[4], cur = ref_randint(&g, 1, 2);
            int order[4] = { 0, 1, 2, 3 }, a;
            float frac = bias_kind == 0 ? 0.0f : bias_kind == 1 ? 0.1f : 0.9f;
            size_t e, ne;
            float *bias;
            nn[0] = B; nn[1] = p.heads; nn[2] = Sq; nn[3] = Sk;
            if (ref_randint(&g, 0, 3) == 0) { order[2] = 3; order[3] = 2; }
            for (a = 3; a >= 0; a--) {
                int ax = order[a];
                if (ax != 3 && ref_randint(&g, 0, 2) == 0) continue;   /* broadcast this axis */
                st[ax] = cur;
                cur = cur * (nn[ax] > 0 ? nn[ax] : 1) + ref_randint(&g, 0, 2);
            }
            bias = tc_bias(&c, st[0], st[1], st[2], st[3]);
            ne = ref_bias_elems(&c.p);
            for (e = 0; e < ne; e++)
                if (ref_uniform(&g) < frac) bias[e] = -INFINITY;
        }
        tc_ref(&c);
        thr = ref_randint(&g, 1, 3);
        if (!tc_run(&c, NAIVE, thr, 0, 0, WITH_LSE | WITH_SCORES, NULL) ||
            !tc_run(&c, TILED, thr, 0, 0, WITH_LSE, NULL) ||
            !tc_run(&c, TILED, ref_randint(&g, 1, 2), ref_randint(&g, 1, Sq + 3), ref_randint(&g, 1, Sk + 3),
                    WITH_LSE, NULL))
            fail();
        tc_free(&c);
    }
}

/* ============================================================================================== */
/* Issue #5: fa_merge                                                                              */
/* ============================================================================================== */

/* Keys split into parts [cut[i], cut[i+1]) (one of them empty), each attended with lse by
   alternating paths, merged, compared with the reference over all keys. */
static void test_merge_split_keys(void **state)
{
    int variant;
    (void)state;
    for (variant = 0; variant < 3; variant++) {
        static const int cuts[3][6] = { { 0, 30, 30, 64, 100, -1 }, { 0, 0, 1, 99, 100, -1 }, { 0, 50, 100, 100, -1, -1 } };
        const int *cut = cuts[variant];
        int parts = 0, P, t;
        tcase c;
        fa_params p = shape(2, 4, 2, 33, 100, 16, 12, 0);
        ref_dims d;
        float *op[8], *lp[8], *o, *lse;
        while (cut[parts + 1] >= 0) parts++;
        if (variant == 1) set_bshd(&p);
        tc_init(&c, &p, "merge split keys variant %d", variant);
        if (variant == 2) {
            static const int pad[2] = { 0, 60 };   /* batch 1 sees keys 0..39 only: part 2 is empty for it */
            tc_bias(&c, 100, 0, 0, 1);
            bias_pad_keys(&c, pad);
        }
        tc_ref(&c);
        ref_dims_of(&c.p, &d);
        for (P = 0; P < parts; P++) {
            fa_params pp = c.p;
            int j0 = cut[P], j1 = cut[P + 1];
            op[P] = ref_alloc(c.n_o);
            lp[P] = ref_alloc(c.rows);
            assert_true(op[P] && lp[P]);
            pp.seq_k = j1 - j0;
            memcpy(pp.k_stride, d.ks, sizeof d.ks);
            memcpy(pp.v_stride, d.vs, sizeof d.vs);
            memset(pp.o_stride, 0, sizeof pp.o_stride);   /* parts are packed [B][Hq][Sq][Dv] */
            if (c.p.bias) { memcpy(pp.bias_stride, d.bs, sizeof d.bs); pp.bias = c.p.bias + j0 * d.bs[3]; }
            pp.lse = lp[P];
            pp.threads = 2;
            ref_poison(op[P], c.n_o * sizeof(float));
            assert_int_equal(call_path(P % 2 ? NAIVE : TILED, &pp, c.t.q, c.t.k + j0 * d.ks[2], c.t.v + j0 * d.vs[2],
                                       op[P], NULL), FA_OK);
        }
        o = ref_alloc(c.n_o + GUARD);
        lse = ref_alloc(c.rows + GUARD);
        assert_true(o && lse);
        for (t = 0; t < 3; t++) {
            /* t = 0: separate outputs; t = 1: lse NULL; t = 2: in place into part 0 */
            float *oo = t == 2 ? op[0] : o, *ll = t == 2 ? lp[0] : (t == 1 ? NULL : lse);
            ref_poison(o, (c.n_o + GUARD) * sizeof(float));
            ref_poison(lse, (c.rows + GUARD) * sizeof(float));
            assert_int_equal(fa_merge((int)c.rows, d.Dv, parts, (const float *const *)op, (const float *const *)lp,
                                      oo, ll), FA_OK);
            assert_true(close_rows(&c, "merged o", oo, c.ref_o, c.rows, (size_t)d.Dv, NULL));
            if (ll) assert_true(close_rows(&c, "merged lse", ll, c.ref_lse, c.rows, 1, NULL));
            if (t != 2) assert_true(ref_is_poison(o + c.n_o, GUARD * sizeof(float)));
            if (t == 0) assert_true(ref_is_poison(lse + c.rows, GUARD * sizeof(float)));
            if (t == 1) assert_true(ref_is_poison(lse, (c.rows + GUARD) * sizeof(float)));
        }
        for (P = 0; P < parts; P++) { free(op[P]); free(lp[P]); }
        free(o); free(lse);
        tc_free(&c);
    }
}

/* fa_merge against ref_merge on random parts: lse values spread far beyond exp's range, some
   parts -inf, rows where every part is -inf (0 and -inf), in place into another part than 0. */
static void test_merge_random(void **state)
{
    enum { ROWS = 57, DV = 9, PARTS = 4 };
    float *op[PARTS], *lp[PARTS], *cop[PARTS], *clp[PARTS], ro[ROWS * DV], rl[ROWS], o[ROWS * DV + GUARD], l[ROWS + GUARD];
    ref_rng rng;
    int P, r, inplace;
    (void)state;
    ref_seed(&rng, g_seed_base + 977);
    for (P = 0; P < PARTS; P++) {
        op[P] = ref_alloc(ROWS * DV); lp[P] = ref_alloc(ROWS);
        cop[P] = ref_alloc(ROWS * DV); clp[P] = ref_alloc(ROWS);
        assert_true(op[P] && lp[P] && cop[P] && clp[P]);
        ref_fill_normal(&rng, op[P], ROWS * DV);
        for (r = 0; r < ROWS; r++) {
            double u = ref_uniform(&rng);
            lp[P][r] = (float)(ref_normal(&rng) * (r % 3 == 0 ? 300.0 : 3.0) + (r % 5 == 1 ? 500.0 : 0.0));
            if (u < 0.25) lp[P][r] = -INFINITY;
            if (r % 11 == 4) lp[P][r] = -INFINITY;                 /* rows empty in every part */
            if (r % 13 == 6 && P != 2) lp[P][r] = -INFINITY;       /* rows with one part only */
        }
    }
    ref_merge(ROWS, DV, PARTS, (const float *const *)op, (const float *const *)lp, ro, rl);
    for (inplace = 0; inplace < 2; inplace++) {
        float *oo = o, *ll = l;
        for (P = 0; P < PARTS; P++) {
            memcpy(cop[P], op[P], ROWS * DV * sizeof(float));
            memcpy(clp[P], lp[P], ROWS * sizeof(float));
        }
        ref_poison(o, sizeof o);
        ref_poison(l, sizeof l);
        if (inplace) { oo = cop[0]; ll = clp[0]; }
        assert_int_equal(fa_merge(ROWS, DV, PARTS, (const float *const *)cop, (const float *const *)clp, oo, ll), FA_OK);
        assert_true(fa_allclose(oo, ro, ROWS * DV, 1e-5f, 1e-5f));
        assert_true(fa_allclose(ll, rl, ROWS, 1e-5f, 1e-5f));
        for (r = 0; r < ROWS; r++)
            if (r % 11 == 4) assert_true(ll[r] == -INFINITY && oo[r * DV] == 0.0f && oo[r * DV + DV - 1] == 0.0f);
        if (!inplace) assert_true(ref_is_poison(o + ROWS * DV, GUARD * sizeof(float)) && ref_is_poison(l + ROWS, GUARD * sizeof(float)));
    }
    /* one part: a copy; rows = 0: nothing written */
    ref_poison(o, sizeof o);
    assert_int_equal(fa_merge(ROWS, DV, 1, (const float *const *)op, (const float *const *)lp, o, NULL), FA_OK);
    ref_merge(ROWS, DV, 1, (const float *const *)op, (const float *const *)lp, ro, rl);
    assert_true(fa_allclose(o, ro, ROWS * DV, 1e-6f, 0.0f));
    ref_poison(o, sizeof o);
    assert_int_equal(fa_merge(0, DV, PARTS, (const float *const *)op, (const float *const *)lp, o, l), FA_OK);
    assert_true(ref_is_poison(o, sizeof o));
    for (P = 0; P < PARTS; P++) { free(op[P]); free(lp[P]); free(cop[P]); free(clp[P]); }
}

static void test_merge_bad_args(void **state)
{
    static const char *const why[9] = {
        "rows must not be negative", "dv must be at least 1", "dv must be at least 1", "parts must be at least 1",
        "o_parts is NULL", "lse_parts is NULL", "o is NULL (required when rows > 0)", "an entry of o_parts is NULL",
        "an entry of lse_parts is NULL" };
    float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { 1, 2, 3, 4, 5, 6 }, la[3] = { 0, 1, 2 }, lb[3] = { 2, 1, 0 };
    float o[6 + GUARD], l[3 + GUARD];
    const float *op[2] = { a, b }, *lp[2] = { la, lb }, *op_null[2] = { a, NULL }, *lp_null[2] = { NULL, lb };
    int i;
    (void)state;
    for (i = 0; i < 9; i++) {
        fa_status st = FA_OK;
        const char *got = NULL;
        ref_poison(o, sizeof o);
        ref_poison(l, sizeof l);
        switch (i) {
        case 0: st = fa_merge(-1, 2, 2, op, lp, o, l); got = fa_explain_merge(-1, 2, 2, op, lp, o, l); break;
        case 1: st = fa_merge(3, 0, 2, op, lp, o, l); got = fa_explain_merge(3, 0, 2, op, lp, o, l); break;
        case 2: st = fa_merge(3, -2, 2, op, lp, o, l); got = fa_explain_merge(3, -2, 2, op, lp, o, l); break;
        case 3: st = fa_merge(3, 2, 0, op, lp, o, l); got = fa_explain_merge(3, 2, 0, op, lp, o, l); break;
        case 4: st = fa_merge(3, 2, 2, NULL, lp, o, l); got = fa_explain_merge(3, 2, 2, NULL, lp, o, l); break;
        case 5: st = fa_merge(3, 2, 2, op, NULL, o, l); got = fa_explain_merge(3, 2, 2, op, NULL, o, l); break;
        case 6: st = fa_merge(3, 2, 2, op, lp, NULL, l); got = fa_explain_merge(3, 2, 2, op, lp, NULL, l); break;
        case 7: st = fa_merge(3, 2, 2, op_null, lp, o, l); got = fa_explain_merge(3, 2, 2, op_null, lp, o, l); break;
        default: st = fa_merge(3, 2, 2, op, lp_null, o, l); got = fa_explain_merge(3, 2, 2, op, lp_null, o, l); break;
        }
        if (st != FA_ERR_INVALID_ARG) {
            print_error("fa_merge bad argument case %d: status %d\n", i, (int)st);
            fail();
        }
        assert_non_null(got);
        assert_string_equal(got, why[i]);
        assert_true(ref_is_poison(o, sizeof o) && ref_is_poison(l, sizeof l));
    }
    /* the good call works */
    assert_null(fa_explain_merge(3, 2, 2, op, lp, o, l));
    assert_int_equal(fa_merge(3, 2, 2, op, lp, o, l), FA_OK);
    assert_true(ref_is_poison(o + 6, GUARD * sizeof(float)) && ref_is_poison(l + 3, GUARD * sizeof(float)));
    assert_true(fabsf(l[1] - (1.0f + logf(2.0f))) < 1e-6f);
    assert_true(fabsf(o[2] - 3.0f) < 1e-6f && fabsf(o[3] - 4.0f) < 1e-6f);
    /* outputs that are a part (in place) are fine; outputs that overlap a part without being it, or
       each other, would read what they wrote: refused, nothing written */
    {
        enum { N = 64 };
        static float arena[N];
        float *p0 = arena, *p1 = arena + 8, *l0 = arena + 16, *l1 = arena + 20, *mo = arena + 32, *ml = arena + 40;
        const float *ops[2], *lps[2];
        static const struct { int o, l; const char *why; } cases[] = {
            { 1, 0, "o overlaps an entry of o_parts without being it (o may be one of them, or apart)" },
            { 2, 0, "o overlaps an entry of lse_parts" },
            { 0, 1, "lse overlaps an entry of lse_parts without being it (lse may be one of them, or apart)" },
            { 0, 2, "lse overlaps an entry of o_parts" },
            { 0, 3, "lse overlaps o" } };
        size_t c;
        ops[0] = p0; ops[1] = p1; lps[0] = l0; lps[1] = l1;
        for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            float *oo = cases[c].o == 1 ? p1 + 2 : cases[c].o == 2 ? l1 - 4 : mo;
            float *ll = cases[c].l == 1 ? l0 + 1 : cases[c].l == 2 ? p0 + 7 : cases[c].l == 3 ? mo + 5 : ml;
            const char *got;
            ref_poison(arena, sizeof arena);
            assert_int_equal(fa_merge(3, 2, 2, ops, lps, oo, ll), FA_ERR_INVALID_ARG);
            assert_true(ref_is_poison(arena, sizeof arena));
            got = fa_explain_merge(3, 2, 2, ops, lps, oo, ll);
            assert_non_null(got);
            assert_string_equal(got, cases[c].why);
        }
        for (c = 0; c < 6; c++) { p0[c] = a[c]; p1[c] = b[c]; }
        for (c = 0; c < 3; c++) { l0[c] = la[c]; l1[c] = lb[c]; }
        assert_null(fa_explain_merge(3, 2, 2, ops, lps, p1, l1));       /* in place into part 1 */
        assert_int_equal(fa_merge(3, 2, 2, ops, lps, p1, l1), FA_OK);
        assert_true(fabsf(l1[1] - (1.0f + logf(2.0f))) < 1e-6f && fabsf(p1[2] - 3.0f) < 1e-6f);
    }
}

/* ============================================================================================== */
/* Common: fa_status_string, fa_allclose, fa_max_abs_diff                                          */
/* ============================================================================================== */

static void test_status_string(void **state)
{
    static const int v[] = { FA_OK, FA_ERR_INVALID_ARG, FA_ERR_NO_MEMORY, FA_ERR_UNSUPPORTED, FA_ERR_DEVICE, 5, 99, -1, 1 << 30 };
    size_t i, j;
    (void)state;
    for (i = 0; i < sizeof v / sizeof v[0]; i++) {
        const char *s = fa_status_string((fa_status)v[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        assert_ptr_equal(s, fa_status_string((fa_status)v[i]));   /* a fixed sentence */
    }
    for (i = 0; i < 5; i++)   /* the known ones are distinct, and none is the unknown one */
        for (j = 0; j < sizeof v / sizeof v[0]; j++)
            if (i != j) assert_string_not_equal(fa_status_string((fa_status)v[i]), fa_status_string((fa_status)v[j]));
}

static void test_allclose(void **state)
{
    float a[4] = { 1.0f, 2.0f, -3.0f, 0.0f }, b[4] = { 1.0f, 2.0f, -3.0f, 0.0f };
    float x, y;
    (void)state;
    assert_true(fa_allclose(a, b, 4, 0.0f, 0.0f));
    assert_true(fa_allclose(a, b, 0, 0.0f, 0.0f));
    assert_true(fa_allclose(NULL, NULL, 0, 1e-5f, 1e-5f));
    /* |a-b| <= atol + rtol*|b|, with b the reference (asymmetric, as torch) */
    x = 2.0f; y = 1.0f;
    assert_true(fa_allclose(&x, &y, 1, 0.5f, 0.5f));     /* 1 <= 0.5 + 0.5 */
    assert_false(fa_allclose(&x, &y, 1, 0.5f, 0.25f));   /* 1 >  0.25 + 0.5 */
    x = 1.0f; y = 2.0f;
    assert_true(fa_allclose(&x, &y, 1, 0.25f, 0.5f));    /* 1 <= 0.5 + 0.25*2 */
    x = 2.0f; y = 1.0f;
    assert_false(fa_allclose(&x, &y, 1, 0.25f, 0.5f));   /* 1 >  0.5 + 0.25*1 */
    x = 1.0f + 1e-5f; y = 1.0f;
    assert_true(fa_allclose(&x, &y, 1, 1e-5f, 1e-5f));
    x = 1.0f + 3e-5f;
    assert_false(fa_allclose(&x, &y, 1, 1e-5f, 1e-5f));
    /* NaN anywhere fails, even against NaN and with huge tolerances */
    x = NAN; y = 1.0f;
    assert_false(fa_allclose(&x, &y, 1, 1e30f, 1e30f));
    assert_false(fa_allclose(&y, &x, 1, 1e30f, 1e30f));
    y = NAN;
    assert_false(fa_allclose(&x, &y, 1, 1e30f, 1e30f));
    b[3] = NAN;
    assert_false(fa_allclose(a, b, 4, 1.0f, 1.0f));
    /* equal infinities pass; different ones, or inf against finite, fail */
    x = INFINITY; y = INFINITY;
    assert_true(fa_allclose(&x, &y, 1, 0.0f, 0.0f));
    x = -INFINITY; y = -INFINITY;
    assert_true(fa_allclose(&x, &y, 1, 0.0f, 0.0f));
    x = INFINITY; y = -INFINITY;
    assert_false(fa_allclose(&x, &y, 1, 1e30f, 1e30f));
    x = INFINITY; y = 1e30f;
    assert_false(fa_allclose(&x, &y, 1, 1.0f, 1.0f));
    x = 1e30f; y = INFINITY;
    assert_false(fa_allclose(&x, &y, 1, 1.0f, 1.0f));
    /* fa_max_abs_diff */
    b[3] = 0.5f;
    assert_true(fa_max_abs_diff(a, b, 4) == 0.5);
    assert_true(fa_max_abs_diff(a, a, 4) == 0.0);
    x = INFINITY; y = INFINITY;
    assert_true(fa_max_abs_diff(&x, &y, 1) == 0.0);
    x = NAN;
    assert_true(fa_max_abs_diff(&x, &y, 1) != fa_max_abs_diff(&x, &y, 1));
}

/* The reference itself, against a hand-computed case, so that its mistakes cannot hide. */
static void test_reference_sanity(void **state)
{
    fa_params p = shape(1, 1, 0, 2, 3, 1, 0, 1);
    float q[2] = { 1.0f, 2.0f }, k[3] = { 1.0f, 0.0f, -1.0f }, v[3] = { 10.0f, 20.0f, 30.0f };
    float o[2], lse[2], s[6];
    double e0, e1;
    (void)state;
    p.scale = 1.0f;
    /* Sk - Sq = 1: row 0 sees keys 0..1, row 1 sees 0..2 */
    assert_true(ref_attention(&p, q, k, v, o, lse, s));
    assert_true(s[0] == 1.0f && s[1] == 0.0f && s[2] == -INFINITY);
    assert_true(s[3] == 2.0f && s[4] == 0.0f && s[5] == -2.0f);
    e0 = exp(1.0); e1 = 1.0;
    assert_true(fabs(o[0] - (10 * e0 + 20 * e1) / (e0 + e1)) < 1e-5);
    assert_true(fabs(lse[0] - log(e0 + e1)) < 1e-6);
    /* window_left = window_right = 1, no causal, Sq = Sk = 3: row i sees keys i-1..i+1 */
    p = shape(1, 1, 0, 3, 3, 1, 0, 0);
    p.window_left = 1; p.window_right = 1; p.scale = 1.0f;
    {
        float q3[3] = { 1, 1, 1 }, o3[3], l3[3], s3[9];
        assert_true(ref_attention(&p, q3, k, v, o3, l3, s3));
        assert_true(s3[2] == -INFINITY && s3[6] == -INFINITY && s3[3] == 1.0f && s3[5] == -1.0f);
    }
    /* ALiBi: s -= slope * |d - j|; softcap before it */
    {
        float slope = 0.5f, q1 = 1.0f, s1[3], o1, l1;
        p = shape(1, 1, 0, 1, 3, 1, 0, 0);
        p.scale = 1.0f; p.alibi_slopes = &slope; p.softcap = 100.0f;
        assert_true(ref_attention(&p, &q1, k, v, &o1, &l1, s1));
        assert_true(fabs(s1[0] - (100.0 * tanh(0.01) - 1.0)) < 1e-6);
        assert_true(fabs(s1[1] - (0.0 - 0.5)) < 1e-6 && fabs(s1[2] - 100.0 * tanh(-0.01)) < 1e-6);
    }
}

/* The run-time version agrees with the compile-time one, and fa_build_info says what this build
   holds (its BLAS, the SIMD paths compiled and the one this CPU runs, no CUDA) with snprintf's
   contract: the whole length returned, at most n bytes written, always terminated. */
/* fa_describe: the forward's paths, as their plans say (the ISA this build and CPU run, a decode
   shape's key split, the naive path's scores). */
static void test_describe(void **state)
{
    static const char *const isa[3] = { "portable C kernels", "avx2+fma kernels", "avx512f kernels" };
    fa_params p = shape(1, 8, 2, 1, 8192, 64, 0, 0);
    char line[400];
    (void)state;
    p.threads = 2;
    fa_describe(&p, FA_CALL_TILED, line, sizeof line);
    assert_non_null(strstr(line, isa[fa__isa()]));
    assert_non_null(strstr(line, "x 4 heads"));                 /* the GQA group packed in one tile */
    assert_non_null(strstr(line, "key split 16 chunks of 8 blocks"));
    assert_non_null(strstr(line, "on 2 threads"));
    p.seq_q = p.seq_k = 1024;
    fa_describe(&p, FA_CALL_TILED, line, sizeof line);
    assert_non_null(strstr(line, "key split 1 chunk of"));     /* prefill is not split */
    fa_describe(&p, FA_CALL_NAIVE, line, sizeof line);
    assert_non_null(strstr(line, "fa_naive: materialised [1][8][1024][1024] scores"));
    p.dtype = FA_F16;
    fa_describe(&p, FA_CALL_TILED, line, sizeof line);
    assert_non_null(strstr(line, "; fp16 storage: each K/V block and Q row converted once per tile by "));
    p.dtype = (fa_dtype)5;
    fa_describe(&p, FA_CALL_TILED, line, sizeof line);
    assert_non_null(strstr(line, "refused: "));
}

static void test_version_and_build_info(void **state)
{
    char want[64], full[1024], buf[1100], expect[256];
    size_t len, n, i;
    int isa = 0;
    static const char *const isa_name[3] = { "portable", "avx2+fma", "avx512f" };
    (void)state;
    snprintf(want, sizeof want, "%d.%d.%d", FLASHATTN_VERSION_MAJOR, FLASHATTN_VERSION_MINOR, FLASHATTN_VERSION_PATCH);
    assert_string_equal(FLASHATTN_VERSION_STRING, want);
    assert_non_null(fa_version());
    assert_string_equal(fa_version(), want);
    assert_ptr_equal(fa_version(), fa_version());
    assert_int_equal(fa_version_number(), FLASHATTN_VERSION_MAJOR * 10000 + FLASHATTN_VERSION_MINOR * 100 + FLASHATTN_VERSION_PATCH);
    assert_int_equal(fa_version_number(), FLASHATTN_VERSION_NUMBER);
    assert_int_equal(FLASHATTN_VERSION_NUMBER, 200);   /* 0.2.0: bump with the CHANGELOG */

    len = fa_build_info(NULL, 0);
    assert_true(len > 0 && len < sizeof full);
    assert_int_equal(fa_build_info(full, sizeof full), len);
    assert_int_equal(strlen(full), len);
    /* every buffer size, from none to more than enough: the same return, a prefix, nothing past n */
    for (n = 0; n <= len + 2; n++) {
        memset(buf, 'X', sizeof buf);
        assert_int_equal(fa_build_info(n ? buf : NULL, n), len);
        if (n == 0) { assert_int_equal(buf[0], 'X'); continue; }
        assert_int_equal(strlen(buf), n - 1 < len ? n - 1 : len);
        assert_memory_equal(buf, full, strlen(buf));
        for (i = n; i < n + 8; i++) assert_int_equal(buf[i], 'X');
    }
    memset(buf, 'X', sizeof buf);
    assert_int_equal(fa_build_info(buf, 0), len);      /* n = 0 with a buffer: nothing written */
    assert_int_equal(buf[0], 'X');

    /* what it says */
    print_message("fa_build_info: %s\n", full);
    assert_non_null(strstr(full, "flashattn " FLASHATTN_VERSION_STRING "; "));
    assert_ptr_equal(strstr(full, "flashattn "), full);
#ifdef FLASHATTN_NO_BLAS
    assert_non_null(strstr(full, "; BLAS: none (FLASHATTN_NO_BLAS); "));
#else
    snprintf(expect, sizeof expect, "; BLAS: %s; ", openblas_get_config());
    assert_non_null(strstr(full, expect));
#endif
#ifdef FLASHATTN__X86   /* section 3's own test for the x86 kernels */
    assert_non_null(strstr(full, "; SIMD compiled: avx512f avx2+fma portable"));
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) isa = 2;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa = 1;
#else
    assert_non_null(strstr(full, "; SIMD compiled: portable"));
#endif
#ifdef FLASHATTN_ISA
    if (isa > FLASHATTN_ISA) isa = FLASHATTN_ISA;
    assert_non_null(strstr(full, " (capped by FLASHATTN_ISA)"));
#endif
    assert_int_equal(isa, fa__isa());
    snprintf(expect, sizeof expect, "; this CPU runs: %s; ", isa_name[isa]);
    assert_non_null(strstr(full, expect));
    /* the CPU suite links no CUDA translation unit */
    assert_non_null(strstr(full, "; CUDA: not linked"));
    fa_build_info(buf, sizeof buf);
    assert_string_equal(buf, full);                      /* stateless: the same line every time */
}

/* ---- half-precision storage (issue 16) ---------------------------------------------------------
   fp16 and bf16 q, k, v, o on both paths: against the float64 reference on the rounded inputs by
   API.md's relative error (fp16 <= 1e-3, bf16 <= 5e-3); fa_tiled bitwise equal to the fp32 call on
   the rounded inputs, rounded (the conversion is the only difference), and to itself at threads
   1, 2, 3; lse equal to the fp32 call's; peak allocation == workspace bytes; nothing past o's end
   or in its gaps written. */

static int half_bits_equal(uint16_t a, uint16_t b, int f16)
{
    int an = f16 ? (a & 0x7C00u) == 0x7C00u && (a & 0x3FFu) : (a & 0x7F80u) == 0x7F80u && (a & 0x7Fu);
    int bn = f16 ? (b & 0x7C00u) == 0x7C00u && (b & 0x3FFu) : (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu);
    return an || bn ? an == bn : a == b;
}

/* The conversions: every fp16 and bf16 value to fp32 (the portable functions, this ISA's table
   and every table below it, against ref.h's), and a million fp32 patterns plus the edges to
   fp16 and bf16, rounding to nearest even, NaN kept NaN. */
static void test_half_conversions(void **state)
{
    static const float edge[] = { 0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f, INFINITY, -INFINITY,
                                  5.9604644775390625e-8f, 2.98023223876953125e-8f, 2.9802325e-8f, 8.940697e-8f,
                                  6.103515625e-5f, 6.1035156e-5f, 6.0975552e-5f, 1e-40f, -1e-45f, 3.3895314e38f,
                                  3.4028235e38f, 1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 512.0f, 1.0f + 1.0f / 2048.0f };
    ref_rng r;
    uint32_t u;
    int isa, dt, n, i;
    float *f = (float *)malloc(65536 * sizeof(float)), *g = (float *)malloc(65536 * sizeof(float));
    uint16_t *h = (uint16_t *)malloc(65536 * 2), *h2 = (uint16_t *)malloc(65536 * 2);
    (void)state;
    assert_true(f && g && h && h2);
    for (isa = 0; isa <= fa__isa(); isa++) {
        const fa__kernels *K = fa__kernels_for(isa);
        for (dt = FA_F16; dt <= FA_BF16; dt++) {
            for (u = 0; u < 65536; u++) h[u] = (uint16_t)u;
            K->h2f((fa_dtype)dt, h, f, 65536);
            for (u = 0; u < 65536; u++) {
                float want = dt == FA_F16 ? ref_f16_to_f32((uint16_t)u) : ref_bf16_to_f32((uint16_t)u);
                float got1 = dt == FA_F16 ? fa__f16_to_f32((uint16_t)u) : fa__bf16_to_f32((uint16_t)u);
                if (want != want) { assert_true(f[u] != f[u] && got1 != got1); continue; }
                assert_memory_equal(&f[u], &want, 4);
                assert_memory_equal(&got1, &want, 4);
            }
            ref_seed(&r, 16u + (uint64_t)dt);
            for (n = 0; n < 16; n++) {
                for (i = 0; i < 65536; i++) {
                    uint32_t x = (uint32_t)ref_next(&r);
                    if (i < (int)(sizeof edge / sizeof edge[0])) memcpy(&x, &edge[i], 4);
                    else if (n & 1) x = (x & 0x80000000u) | (0x33000000u + (x & 0x0FFFFFFFu) % 0x14800000u);  /* fp16's range */
                    memcpy(&g[i], &x, 4);
                }
                K->f2h((fa_dtype)dt, g, h2, 65536);
                for (i = 0; i < 65536; i++) {
                    uint16_t want = dt == FA_F16 ? ref_f32_to_f16(g[i]) : ref_f32_to_bf16(g[i]);
                    uint16_t got1 = dt == FA_F16 ? fa__f32_to_f16(g[i]) : fa__f32_to_bf16(g[i]);
                    if (!half_bits_equal(h2[i], want, dt == FA_F16) || !half_bits_equal(got1, want, dt == FA_F16)) {
                        memcpy(&u, &g[i], 4);
                        print_error("%s %s: 0x%08x -> 0x%04x (table) 0x%04x (C), want 0x%04x\n", fa__isa_name(isa),
                                    dt == FA_F16 ? "fp16" : "bf16", (unsigned)u, h2[i], got1, want);
                        fail();
                    }
                }
            }
        }
        print_message("half conversions: %s table (%s) agrees with ref.h on every fp16/bf16 value and 2M fp32 patterns\n",
                      fa__isa_name(isa), K->cvt_name);
    }
    free(f); free(g); free(h); free(h2);
}

/* The one-pass packs against the two passes they replace, bit for bit, on every ISA table that has
   them: the end's O / l straight to bf16 (unpack16_bf16 against unpack16 and then f2h: NaN, inf,
   fp32 denormals, l = 0 and NaN lanes, padding rows, even Dv with a part group, nothing written past
   a row's Dv), and V's words transposed from V as stored (amx_vt_h against vpack_bf16 and then
   amx_vt: odd key counts, Dv not a multiple of 32, strides, the finite flag). */
static void test_half_packs(void **state)
{
    static const int dvs[] = { 2, 16, 30, 32, 48, 64, 80, 128, 160 }, nks[] = { 1, 2, 17, 31, 33, 128, 200, 255, 256 };
    ref_rng r;
    int isa, a, b, i, t, n = 0;
    float *O = (float *)malloc(256 * 64 * sizeof(float)), l[32], *Oc = (float *)malloc(16 * 256 * sizeof(float));
    uint16_t *o1 = (uint16_t *)malloc(16 * (256 + GUARD) * 2), *o2 = (uint16_t *)malloc(16 * (256 + GUARD) * 2);
    uint16_t *V = (uint16_t *)malloc(260 * 200 * 2);
    uint32_t *Vp = (uint32_t *)malloc(260 * 200 * 4), *A = (uint32_t *)malloc(260 * 200 * 4), *B = (uint32_t *)malloc(260 * 200 * 4);
    (void)state;
    assert_true(O && Oc && o1 && o2 && V && Vp && A && B);
    ref_seed(&r, 77u);
    for (isa = 0; isa <= fa__isa(); isa++) {
        const fa__kernels *K = fa__kernels_for(isa);
        if (K->unpack16_bf16)
            for (a = 0; a < (int)(sizeof dvs / sizeof dvs[0]); a++)
                for (b = 0; b < 4; b++) {
                    const int Dv = dvs[a], ld = b & 1 ? 32 : 48, stride = Dv + GUARD;
                    float *op[16];
                    uint16_t *oh1[16], *oh2[16];
                    for (i = 0; i < Dv * ld; i++) {
                        uint32_t x = (uint32_t)ref_next(&r);
                        if (b >= 2 && i % 7 == 0) x &= 0x807FFFFFu;     /* fp32 denormals */
                        memcpy(&O[i], &x, 4);
                        if (i % 5 == 0) O[i] = (float)ref_normal(&r);
                    }
                    O[3] = NAN; O[ld + 4] = INFINITY; O[2 * ld + 5] = -INFINITY;
                    for (i = 0; i < 16; i++) l[i] = (float)(1.0 + 3.0 * ref_uniform(&r));
                    l[1] = 0.0f; l[2] = NAN; l[3] = 1e-30f; l[4] = 1e30f;
                    for (i = 0; i < 16 * stride; i++) o1[i] = o2[i] = 0xBEEF;
                    for (i = 0; i < 16; i++) {
                        op[i] = i == 9 && b ? NULL : Oc + (size_t)i * Dv;
                        oh1[i] = op[i] ? o1 + (size_t)i * stride : NULL;
                        oh2[i] = op[i] ? o2 + (size_t)i * stride : NULL;
                    }
                    K->unpack16(O, ld, l, Dv, op);
                    for (i = 0; i < 16; i++)
                        if (op[i]) K->f2h(FA_BF16, op[i], oh1[i], Dv);
                    K->unpack16_bf16(O, ld, l, Dv, oh2);
                    assert_memory_equal(o1, o2, 16 * (size_t)stride * 2);
                    for (i = 0; i < 16; i++)
                        for (t = Dv; t < stride; t++) assert_int_equal(o2[i * stride + t], 0xBEEF);
                    n++;
                }
        if (K->amx_vt_h)
            for (a = 0; a < (int)(sizeof dvs / sizeof dvs[0]); a++)
                for (b = 0; b < (int)(sizeof nks / sizeof nks[0]); b++)
                    for (t = 0; t < 3; t++) {
                        const int Dv = dvs[a], nk = nks[b], vs = Dv + 3 * (b & 1), np = (nk + 1) / 2, np16 = (np + 15) / 16 * 16;
                        int f1, f2;
                        for (i = 0; i < 260 * 200; i++) V[i] = (uint16_t)(ref_next(&r) & 0xBFFFu);  /* finite */
                        if (t == 1) V[(size_t)(nk - 1) * vs + Dv - 1] = 0x7F80;      /* inf, the last value */
                        if (t == 2) V[(size_t)(nk / 2) * vs + Dv / 2] = 0xFFC1;      /* NaN */
                        V[(size_t)nk * vs] = 0x7F80;          /* past the keys: not read */
                        memset(A, 0xAB, 260 * 200 * 4); memset(B, 0xAB, 260 * 200 * 4);
                        f1 = K->vpack_bf16(V, vs, nk, Dv, Vp);
                        K->amx_vt(Vp, np, Dv, A, np16);
                        f2 = K->amx_vt_h(V, vs, nk, Dv, B, np16);
                        assert_int_equal(f1, t == 0);
                        assert_int_equal(f2, f1);
                        if (f1) assert_memory_equal(A, B, (size_t)Dv * np16 * 4);
                        assert_memory_equal(A + (size_t)Dv * np16, B + (size_t)Dv * np16, 64);   /* nothing past Vt */
                        n++;
                    }
    }
    print_message("half packs: %d cases bitwise the two-pass kernels'\n", n);
    free(O); free(Oc); free(o1); free(o2); free(V); free(Vp); free(A); free(B);
}

static uint16_t *half_of(fa_dtype dt, const float *x, size_t n)
{
    uint16_t *h = (uint16_t *)malloc((n + GUARD) * 2);
    size_t i;
    assert_non_null(h);
    for (i = 0; i < n; i++) h[i] = dt == FA_F16 ? ref_f32_to_f16(x[i]) : ref_f32_to_bf16(x[i]);
    memset(h + n, 0xFF, GUARD * 2);
    return h;
}

static float half_to_f(fa_dtype dt, uint16_t h) { return dt == FA_F16 ? ref_f16_to_f32(h) : ref_bf16_to_f32(h); }

/* FA_TEST_EXPECT_AMX=1 (set where the CPU has AMX-BF16, e.g. bench/cpu_vs_torch.sh's device
   script): every bf16 tiled request with head_dim % 32 == 0 that is not a decode must plan the
   AMX tiles, and the process must be granted the tile state, so that the suite says it ran them. */
static int g_amx_seen;
static void half_expect_amx(const fa_params *p, const char *line)
{
    int want = getenv("FA_TEST_EXPECT_AMX") && atoi(getenv("FA_TEST_EXPECT_AMX")) == 1;
    int amx = strstr(line, "AMX-BF16 tiles") != NULL;
    if (p->dtype == FA_BF16 && p->head_dim % 32 == 0 && !strstr(line, "row-major") && p->seq_k > 0) {
        if (want && !amx) fail_msg("FA_TEST_EXPECT_AMX: %s", line);
#ifdef FA__HAVE_AMX
        if (amx && want) assert_int_equal(fa__amx_permit(), 1);
#endif
        g_amx_seen += amx;
    }
}

/* One half-precision case: p an fp32 request (shape, strides, modifiers). */
static void half_case(const fa_params *p0, const char *name)
{
    int dti, path, th;
    for (dti = 0; dti < 2; dti++) {
        fa_dtype dt = dti ? FA_BF16 : FA_F16;
        double tol = dt == FA_F16 ? 1e-3 : 5e-3, err;
        tcase c;
        uint16_t *hq, *hk, *hv, *ho, *first = NULL;
        float *o32, *lse32, *lse, *packed, *packed32;
        fa_params p, ph;
        size_t i, r;
        char line[700];
        int dp;
        tc_init(&c, p0, "half %s %s", dt == FA_F16 ? "fp16" : "bf16", name);
        ph = c.p; ph.dtype = dt;
        fa_describe(&ph, FA_CALL_TILED, line, sizeof line);
        dp = strstr(line, "vdpbf16ps") != NULL;    /* P rounded to bf16: not the fp32 call's bits */
        ref_round_to(dt, c.t.q, c.t.nq); ref_round_to(dt, c.t.k, c.t.nk); ref_round_to(dt, c.t.v, c.t.nv);
        tc_ref(&c);
        hq = half_of(dt, c.t.q, c.t.nq); hk = half_of(dt, c.t.k, c.t.nk); hv = half_of(dt, c.t.v, c.t.nv);
        ho = (uint16_t *)malloc((c.t.no + GUARD) * 2); first = (uint16_t *)malloc((c.t.no + 1) * 2);
        o32 = ref_alloc(c.t.no + 1); lse32 = ref_alloc(c.rows + 1); lse = ref_alloc(c.rows + 1);
        packed = ref_alloc(c.n_o + 1); packed32 = ref_alloc(c.n_o + 1);
        assert_true(ho && first && o32 && lse32 && lse && packed && packed32);
        for (path = NAIVE; path <= TILED; path++) {
            p = c.p; p.lse = lse32; p.threads = 1;
            if (c.rows) assert_int_equal(call_path(path, &p, c.t.q, c.t.k, c.t.v, o32, NULL), FA_OK);
            for (th = 1; th <= 3; th++) {
                size_t ws, base, peak, live;
                fa_status st;
                ph = c.p; ph.dtype = dt; ph.lse = lse; ph.threads = th;
                memset(ho, 0xFF, (c.t.no + GUARD) * 2);
                ref_poison(lse, (c.rows + 1) * sizeof(float));
                ws = ws_path(path, &ph);
                base = ta_reset(-1);
                st = call_path(path, &ph, hq, hk, hv, ho, NULL);
                peak = ta_peak - base; live = ta_live - base;
                if (st != FA_OK || peak != ws || live != 0) {
                    print_error("%s [seed %llu] %s threads=%d: status %d, peak %zu, workspace %zu, live %zu\n", c.name,
                                (unsigned long long)c.seed, path_name[path], th, (int)st, peak, ws, live);
                    fail();
                }
                for (i = c.t.no; i < c.t.no + GUARD; i++) assert_int_equal(ho[i], 0xFFFF);   /* nothing past o */
                {   /* o's rows out of half storage, packed; gaps of a strided o untouched */
                    fa_params pg = c.p;
                    float *of = ref_alloc(c.t.no + 1);
                    assert_non_null(of);
                    for (i = 0; i < c.t.no; i++) {
                        if (ho[i] == 0xFFFF) ref_poison(&of[i], sizeof(float));
                        else of[i] = half_to_f(dt, ho[i]);
                    }
                    assert_true(ref_o_gaps_untouched(&pg, of, c.t.no));
                    ref_gather_o(&pg, of, packed);
                    if (path == TILED && c.rows && !dp) {   /* == the fp32 call on the rounded inputs, rounded */
                        ref_gather_o(&pg, o32, packed32);
                        ref_round_to(dt, packed32, c.n_o);
                        for (i = 0; i < c.n_o; i++)
                            if (memcmp(&packed[i], &packed32[i], 4) != 0) {
                                print_error("%s [seed %llu] fa_tiled threads=%d: o[%zu] = %.9g, the fp32 call's rounded %.9g\n",
                                            c.name, (unsigned long long)c.seed, th, i, (double)packed[i], (double)packed32[i]);
                                fail();
                            }
                    }
                    free(of);
                }
                err = ref_rel_error(packed, c.ref_o, c.n_o);
                if (th == 1)
                    print_message("%s %s: relative error %.2e (limit %.0e)%s\n", c.name, path_name[path], err, tol,
                                  path == TILED && dp ? " on vdpbf16ps" : "");
                if (!(err <= tol)) {
                    print_error("%s [seed %llu] %s threads=%d: relative error %.3g > %.0e\n", c.name,
                                (unsigned long long)c.seed, path_name[path], th, err, tol);
                    fail();
                }
                for (r = 0; r < c.rows; r++)   /* lse: fp32 arithmetic on the same values */
                    if (memcmp(&lse[r], &lse32[r], 4) != 0 && !((path == NAIVE || dp) && fabsf(lse[r] - lse32[r]) <= 1e-5f * (1.0f + fabsf(lse32[r])))) {
                        print_error("%s %s threads=%d: lse[%zu] %.9g, fp32 call %.9g\n", c.name, path_name[path], th, r,
                                    (double)lse[r], (double)lse32[r]);
                        fail();
                    }
                if (path == TILED) {
                    if (th == 1) memcpy(first, ho, c.t.no * 2);
                    else assert_memory_equal(first, ho, c.t.no * 2);   /* bitwise across threads */
                }
            }
        }
        {
            ph = c.p; ph.dtype = dt; ph.threads = 2;
            fa_describe(&ph, FA_CALL_TILED, line, sizeof line);
            assert_non_null(strstr(line, dt == FA_F16 ? "fp16 storage: " : "bf16 storage: "));
            half_expect_amx(&ph, line);
            if (strstr(name, "decode") || g_case_counter % 8 == 0) print_message("%s: %s\n", c.name, line);
        }
        free(hq); free(hk); free(hv); free(ho); free(first); free(o32); free(lse32); free(lse); free(packed); free(packed32);
        tc_free(&c);
    }
}

static void test_half_storage(void **state)
{
    fa_params p;
    (void)state;
    p = shape(2, 4, 2, 70, 90, 64, 64, 1);
    half_case(&p, "B2 H4/2 Sq70 Sk90 D64 causal");
    p = shape(1, 8, 2, 1, 1500, 128, 128, 0);
    half_case(&p, "decode Sq1 Sk1500 H8/2 D128 (GQA, split keys)");
    p = shape(1, 2, 2, 4, 2000, 72, 40, 0);
    half_case(&p, "decode Sq4 Sk2000 D72 Dv40 (split keys)");
    p = shape(2, 3, 3, 33, 47, 40, 24, 0);   /* [B][S][H][D] */
    p.q_stride[0] = 33 * 3 * 40; p.q_stride[1] = 40; p.q_stride[2] = 3 * 40;
    p.k_stride[0] = 47 * 3 * 40; p.k_stride[1] = 40; p.k_stride[2] = 3 * 40;
    p.v_stride[0] = 47 * 3 * 24; p.v_stride[1] = 24; p.v_stride[2] = 3 * 24;
    p.o_stride[0] = 33 * 3 * 30; p.o_stride[1] = 30; p.o_stride[2] = 3 * 30;   /* gaps in o */
    p.softcap = 5.0f; p.window_left = 9; p.window_right = 3;
    half_case(&p, "[B][S][H][D] D40 Dv24 softcap window, o with gaps");
    p = shape(1, 2, 1, 20, 130, 16, 16, 1);
    p.block_q = 7; p.block_k = 33;
    half_case(&p, "Sq20 Sk130 D16 causal bq7 bk33");
    p = shape(1, 2, 2, 5, 0, 32, 32, 0);
    half_case(&p, "Sk0 (empty rows)");
    p = shape(1, 1, 1, 300, 300, 128, 128, 1);
    half_case(&p, "Sq300 Sk300 D128 causal");
    /* AMX's edges (fa__qk_amx): keys not a multiple of 16 or 32, features past the last 32 (Dv 48)
       and past the last 16 (Dv 40), one lane vector in a panel, the window's clipped blocks, GQA
       heads in one tile, a bias */
    p = shape(1, 2, 1, 200, 333, 64, 48, 1);
    p.window_left = 50;
    half_case(&p, "Sq200 Sk333 D64 Dv48 causal window 50");
    p = shape(2, 2, 2, 40, 77, 128, 40, 0);
    p.softcap = 20.0f;
    half_case(&p, "Sq40 Sk77 D128 Dv40 softcap");
    p = shape(1, 8, 2, 9, 260, 32, 32, 0);
    half_case(&p, "Sq9 Sk260 H8/2 D32 (heads in one tile)");
    p = shape(1, 1, 1, 129, 250, 96, 96, 0);
    p.block_k = 100;
    half_case(&p, "Sq129 Sk250 D96 bk100");
    if (getenv("FA_TEST_EXPECT_AMX")) print_message("half storage: %d bf16 cases planned on AMX-BF16 tiles\n", g_amx_seen);
}

/* bf16 on the bf16 kernels (vdpbf16ps, AMX): a row's bits do not depend on its tile. The same
   causal, windowed request with block_q 0 (the library's tiles), 16, 48, 112 and 9 (7 would be a decode), and threads
   1 and 3, and 3 on an fa_pool: o bitwise the same (the AMX products are anchored at each key block's first key). */
static void test_half_tiling(void **state)
{
    static const int bq[5] = { 0, 16, 48, 112, 9 };
    static const int dims[2][2] = { { 64, 48 }, { 128, 128 } };
    int di, i, th;
    fa_pool *pool = NULL;
    (void)state;
    assert_int_equal(fa_pool_create(3, &pool), FA_OK);
    for (di = 0; di < 2; di++) {
        fa_params p = shape(1, 2, 1, 230, 300, dims[di][0], dims[di][1], 1);
        tcase c;
        uint16_t *hq, *hk, *hv, *ho, *first;
        p.window_left = 37;
        tc_init(&c, &p, "half tiling D%d", dims[di][0]);
        ref_round_to(FA_BF16, c.t.q, c.t.nq); ref_round_to(FA_BF16, c.t.k, c.t.nk); ref_round_to(FA_BF16, c.t.v, c.t.nv);
        hq = half_of(FA_BF16, c.t.q, c.t.nq); hk = half_of(FA_BF16, c.t.k, c.t.nk); hv = half_of(FA_BF16, c.t.v, c.t.nv);
        ho = (uint16_t *)malloc(c.t.no * 2); first = (uint16_t *)malloc(c.t.no * 2);
        assert_true(ho && first);
        for (i = 0; i < 5; i++)
            for (th = 1; th <= 5; th += 2) {
                fa_params ph = c.p;
                ph.dtype = FA_BF16; ph.block_q = bq[i]; ph.threads = th < 5 ? th : 3;
                ph.pool = th == 5 ? pool : NULL;
                memset(ho, 0xFF, c.t.no * 2);
                assert_int_equal(fa_tiled(&ph, hq, hk, hv, ho), FA_OK);
                if (i == 0 && th == 1) {
                    char line[700];
                    fa_describe(&ph, FA_CALL_TILED, line, sizeof line);
                    print_message("%s: %s\n", c.name, line);
                    half_expect_amx(&ph, line);
                    memcpy(first, ho, c.t.no * 2);
                } else if (memcmp(first, ho, c.t.no * 2) != 0) {
                    fail_msg("%s: block_q %d threads %d%s differs from block_q 0", c.name, bq[i], ph.threads,
                             ph.pool ? " (pool)" : "");
                }
            }
        free(hq); free(hk); free(hv); free(ho); free(first);
        tc_free(&c);
    }
    fa_pool_destroy(pool);
}

/* bf16 at the benches' S = 512 shape (B = 2, H = 4, D = 64 and 128): threads 1 and 2 (tall tiles),
   16 on its own threads and on an fa_pool (on AMX: 64-row tiles at D = 128 with FA__AMX_TALL64, else 32), and
   block_q 32 and 64 on one thread: o and lse bitwise the same as one thread's, which is within bf16's
   rounding of the float64 reference. The tile height follows the thread count only because it does
   not change a row's bits; this is that claim at the shape where the height changes. 3 threads (tall
   tiles), and 7 of the 16-thread pool (on AMX 64-row tiles by head, a run of them a thread first, then
   the others' runs from their ends: FA__AMX_RANGES), split the items unevenly: every item runs once. */
static void test_half_threads(void **state)
{
    static const int D[2] = { 64, 128 };
    static const struct { int threads, bq, pool; } R[8] = { { 1, 0, 0 }, { 2, 0, 0 }, { 16, 0, 0 }, { 16, 0, 1 },
                                                           { 1, 32, 0 }, { 1, 64, 0 }, { 3, 0, 0 }, { 7, 0, 1 } };
    int di, i;
    fa_pool *pool = NULL;
    (void)state;
    assert_int_equal(fa_pool_create(16, &pool), FA_OK);
    for (di = 0; di < 2; di++) {
        fa_params p = shape(2, 4, 4, 512, 512, D[di], D[di], 0);
        tcase c;
        uint16_t *hq, *hk, *hv, *ho, *first;
        float *lse, *lse1;
        size_t r;
        tc_init(&c, &p, "half threads S512 D%d", D[di]);
        ref_round_to(FA_BF16, c.t.q, c.t.nq); ref_round_to(FA_BF16, c.t.k, c.t.nk); ref_round_to(FA_BF16, c.t.v, c.t.nv);
        tc_ref(&c);
        hq = half_of(FA_BF16, c.t.q, c.t.nq); hk = half_of(FA_BF16, c.t.k, c.t.nk); hv = half_of(FA_BF16, c.t.v, c.t.nv);
        ho = (uint16_t *)malloc(c.t.no * 2); first = (uint16_t *)malloc(c.t.no * 2);
        lse = (float *)malloc(c.rows * sizeof(float)); lse1 = (float *)malloc(c.rows * sizeof(float));
        assert_true(ho && first && lse && lse1);
        for (i = 0; i < 8; i++) {
            fa_params ph = c.p;
            char line[700];
            ph.dtype = FA_BF16; ph.threads = R[i].threads; ph.block_q = R[i].bq; ph.pool = R[i].pool ? pool : NULL;
            ph.lse = lse;
            memset(ho, 0xFF, c.t.no * 2);
            memset(lse, 0xFF, c.rows * sizeof(float));
            assert_int_equal(fa_tiled(&ph, hq, hk, hv, ho), FA_OK);
            fa_describe(&ph, FA_CALL_TILED, line, sizeof line);
            print_message("%s threads %d block_q %d%s: %s\n", c.name, ph.threads, ph.block_q, ph.pool ? " (pool)" : "", line);
            half_expect_amx(&ph, line);
#ifdef FA__HAVE_AMX
            if (strstr(line, "AMX-BF16 tiles") && R[i].threads == 16)   /* the case this test is about */
                assert_non_null(strstr(line, FA__AMX_TALL64 && D[di] >= 96 ? "tiles of 64 query rows" : "tiles of 32 query rows"));
#endif
            if (i == 0) {
                for (r = 0; r < c.t.no; r++) {
                    float x = half_to_f(FA_BF16, ho[r]), want = c.ref_o[r];
                    if (!(fabsf(x - want) <= 2e-2f * (1.0f + fabsf(want)))) fail_msg("%s: o[%zu] %g, want %g", c.name, r, (double)x, (double)want);
                }
                for (r = 0; r < c.rows; r++)
                    if (!(fabsf(lse[r] - c.ref_lse[r]) <= 1e-3f * (1.0f + fabsf(c.ref_lse[r]))))
                        fail_msg("%s: lse[%zu] %g, want %g", c.name, r, (double)lse[r], (double)c.ref_lse[r]);
                memcpy(first, ho, c.t.no * 2);
                memcpy(lse1, lse, c.rows * sizeof(float));
            } else if (memcmp(first, ho, c.t.no * 2) != 0 || memcmp(lse1, lse, c.rows * sizeof(float)) != 0) {
                fail_msg("%s: threads %d block_q %d%s: o or lse differs from one thread's", c.name, ph.threads, ph.block_q,
                         ph.pool ? " (pool)" : "");
            }
        }
        free(hq); free(hk); free(hv); free(ho); free(first); free(lse); free(lse1);
        tc_free(&c);
    }
    fa_pool_destroy(pool);
}

/* A NaN in a hidden key's V (bf16 and fp16): the rows that do not see the key are right (the
   vdpbf16ps path sends such a block through the fp32 kernels), the row that sees it is NaN. Two
   query heads on one kv head, Sq = Sk = 64 and 1024: on AMX both share V's transpose between the
   tiles of the kv head (fa__tiled_vt_get; a non-finite block's state says so to every tile). */
static void test_half_nan_v(void **state)
{
    static const int len[2] = { 64, 1024 };
    int dt, i, t, li;
    (void)state;
    for (li = 0; li < 2; li++)
        for (dt = FA_F16; dt <= FA_BF16; dt++) {
            fa_params p = shape(1, 2, 1, len[li], len[li], 32, 32, 1);
            int n = len[li];
            tcase c;
            uint16_t *hq, *hk, *hv, *ho;
            tc_init(&c, &p, "half NaN in V dtype %d S%d", dt, n);
            ref_round_to((fa_dtype)dt, c.t.q, c.t.nq); ref_round_to((fa_dtype)dt, c.t.k, c.t.nk); ref_round_to((fa_dtype)dt, c.t.v, c.t.nv);
            tc_ref(&c);
            hq = half_of((fa_dtype)dt, c.t.q, c.t.nq); hk = half_of((fa_dtype)dt, c.t.k, c.t.nk); hv = half_of((fa_dtype)dt, c.t.v, c.t.nv);
            ho = (uint16_t *)malloc(c.t.no * 2);
            assert_non_null(ho);
            for (t = 0; t < 32; t++) hv[(size_t)(n - 1) * 32 + t] = dt == FA_F16 ? 0x7E00u : 0x7FC0u;   /* the last key: only the last row sees it */
            c.p.dtype = (fa_dtype)dt;
            assert_int_equal(fa_tiled(&c.p, hq, hk, hv, ho), FA_OK);
            if (dt == FA_BF16 && li == 1) {
                char line[700];
                fa_describe(&c.p, FA_CALL_TILED, line, sizeof line);
                print_message("%s: %s\n", c.name, line);
            }
            for (i = 0; i < 2 * n; i++)
                for (t = 0; t < 32; t++) {
                    float x = half_to_f((fa_dtype)dt, ho[(size_t)i * 32 + t]), want = c.ref_o[(size_t)i * 32 + t];
                    if (i % n == n - 1) assert_true(x != x);
                    else if (!(fabsf(x - want) <= 2e-2f * (1.0f + fabsf(want)))) fail_msg("row %d col %d: %g, want %g", i, t, (double)x, (double)want);
                }
            free(hq); free(hk); free(hv); free(ho);
            tc_free(&c);
        }
}

/* Half storage's byte ranges: q, k, v of 2-byte elements side by side in one buffer are apart
   (4-byte ranges would overlap them), and o inside k is refused. */
static void test_half_alias(void **state)
{
    fa_params p = shape(1, 1, 1, 8, 8, 16, 16, 0);
    uint16_t *buf = (uint16_t *)calloc(4 * 128 + 8, 2);
    int dt;
    (void)state;
    assert_non_null(buf);
    for (dt = FA_F16; dt <= FA_BF16; dt++) {
        p.dtype = (fa_dtype)dt;
        assert_null(fa_explain(&p, buf, buf + 128, buf + 256, buf + 384, NULL));
        assert_int_equal(fa_tiled(&p, buf, buf + 128, buf + 256, buf + 384), FA_OK);
        assert_int_equal(fa_naive(&p, buf, buf + 128, buf + 256, buf + 384, NULL), FA_OK);
        assert_int_equal(fa_tiled(&p, buf, buf + 128, buf + 256, buf + 200), FA_ERR_INVALID_ARG);
        assert_non_null(strstr(fa_explain(&p, buf, buf + 128, buf + 256, buf + 200, NULL), "o overlaps an input"));
    }
    free(buf);
}

/* The CUDA forward kernels' block order (section 1's fa__qtile_of, fa__qtile_group), checked here
   because it is host code too: every (batch-head, query tile) is exactly one item of the grid, a
   group's blocks are one run of items, and within a group the tiles never get longer (the longest,
   causal, first), the group's heads side by side at each tile. */
/* Section 1's fa__ex2_poly (the FMA-pipe 2^x a share of the Hopper forward's exps takes) against
   exp2 in double over what the online softmax hands it: every 199th float of [-130, 2] (11 million,
   their bits walked), integers and their neighbours, -INFINITY, the most negative floats and NaN.
   2^x >= 2^-126.5: relative error <= 7.6e-5 (the polynomial's 7.48e-5 and fp32 rounding) plus 2^-149
   (a subnormal result's rounding); below: +0 exactly, as the hardware exp's flush. */
static void ex2_poly_check(float x, double *worst)
{
    const float y = fa__ex2_poly(x);
    const double r = exp2((double)x);
    if (x != x) {
        assert_true(y != y);
        return;
    }
    if (x < -126.5f) {   /* 2^j's bits are 0 here */
        if (!(y == 0.0f && !signbit(y))) print_error("fa__ex2_poly(%a) = %a, want +0\n", (double)x, (double)y);
        assert_true(y == 0.0f && !signbit(y));
        return;
    }
    if (!(fabs(y - r) <= 7.6e-5 * r + 0x1p-149)) print_error("fa__ex2_poly(%a) = %a, exp2 %a\n", (double)x, (double)y, r);
    assert_true(fabs(y - r) <= 7.6e-5 * r + 0x1p-149);
    if (x >= -126.0f && fabs(y - r) / r > *worst) *worst = fabs(y - r) / r;
}

static void test_ex2_poly(void **state)
{
    static const float special[] = { -INFINITY, -FLT_MAX, -1e30f, -1e6f, -4194304.0f, -127.0f, -126.5f, -126.0f, -125.5f,
                                     -0.0f, 0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 1.0f, 0x1p-149f, -0x1p-149f };
    double worst = 0.0;
    uint32_t u;
    float x;
    int k, i;
    (void)state;
    for (i = 0; i < (int)(sizeof special / sizeof special[0]); i++) ex2_poly_check(special[i], &worst);
    ex2_poly_check(NAN, &worst);
    ex2_poly_check(-NAN, &worst);
    for (k = -130; k <= 2; k++)   /* where round(x) steps: k - 1/2 and its neighbours, and k */
        for (i = -2; i <= 2; i++) {
            ex2_poly_check(nextafterf(k - 0.5f, (float)(k + i)), &worst);
            ex2_poly_check(nextafterf((float)k, (float)(k + i)), &worst);
        }
    for (u = 0x80000000u; u <= 0xC3020000u; u += 199) {   /* -0 down to -130 */
        memcpy(&x, &u, sizeof x);
        ex2_poly_check(x, &worst);
    }
    for (u = 0; u <= 0x40000000u; u += 199) {              /* +0 up to 2 */
        memcpy(&x, &u, sizeof x);
        ex2_poly_check(x, &worst);
    }
    assert_true(worst > 7.0e-5 && worst <= 7.6e-5);   /* the polynomial's error, not a vacuous 0 */
    assert_true(fa__ex2_poly(0.0f) > 0.9999f && fa__ex2_poly(-1.0f) > 0.4999f);
}

static void test_qtile_order(void **state)
{
    static const int64_t shapes[][3] = {   /* nbh, qtiles, kv bytes a head */
        { 1, 1, 0 }, { 1, 7, 100 }, { 5, 1, 100 }, { 64, 32, 2 << 20 }, { 16, 128, 8 << 20 },
        { 7, 5, 10 }, { 13, 9, 3 }, { 128, 32, 1 << 20 }, { 3, 4, (int64_t)1 << 40 }, { 300, 2, 0 },
    };
    size_t s;
    (void)state;
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t nbh = shapes[s][0], qt_n = shapes[s][1], budget = (int64_t)24 << 20;
        const int64_t hg = fa__qtile_group(nbh, shapes[s][2], budget), n = nbh * qt_n;
        unsigned char *seen = (unsigned char *)calloc((size_t)n, 1);
        int64_t item, pbh = -1, pqt = -1;
        assert_non_null(seen);
        assert_true(hg >= 1 && hg <= nbh);
        if (shapes[s][2] > 0 && budget / shapes[s][2] >= 1 && budget / shapes[s][2] <= nbh)
            assert_int_equal(hg, budget / shapes[s][2]);
        for (item = 0; item < n; item++) {
            int bh, qt;
            fa__qtile_of((int)nbh, (int)qt_n, (int)hg, (int)item, &bh, &qt);
            assert_true(bh >= 0 && bh < nbh && qt >= 0 && qt < qt_n);
            assert_int_equal(bh / hg, item / (hg * qt_n));   /* the group's blocks are one run */
            assert_false(seen[bh * qt_n + qt]);
            seen[bh * qt_n + qt] = 1;
            if (item > 0 && bh / hg == pbh / hg) {            /* same group: tiles never longer, heads in order */
                assert_true(qt <= pqt);
                if (qt == pqt) assert_int_equal(bh, pbh + 1);
            }
            pbh = bh;
            pqt = qt;
        }
        {   /* the persistent grids' schedule (fa__sched_item): each item exactly once, whatever the grid */
            static const int64_t grids[] = { 1, 2, 3, 7, 132, 1000 };
            size_t gi;
            for (gi = 0; gi < sizeof grids / sizeof grids[0]; gi++) {
                const int64_t grid = grids[gi] < n ? grids[gi] : n;
                int64_t blk, k, count = 0;
                memset(seen, 0, (size_t)n);
                for (blk = 0; blk < grid; blk++)
                    for (k = 0; (item = fa__sched_item(grid, blk, k)) < n; k++) {
                        assert_true(item >= 0);
                        assert_false(seen[item]);
                        seen[item] = 1;
                        count++;
                    }
                assert_int_equal(count, n);
            }
        }
        {   /* the paired order (fa__qtile_zig) and its schedule (fa__sched_pair): each tile exactly once; a
               block's two items of a pair are one head's tiles t and qtiles - 1 - t, or two middle tiles */
            static const int64_t grids[] = { 1, 2, 3, 7, 132 };
            size_t gi;
            memset(seen, 0, (size_t)n);
            for (item = 0; item < n; item++) {
                int bh, qt;
                fa__qtile_zig((int)qt_n, (int)item, &bh, &qt);
                assert_true(bh >= 0 && bh < nbh && qt >= 0 && qt < qt_n);
                assert_false(seen[bh * qt_n + qt]);
                seen[bh * qt_n + qt] = 1;
            }
            for (gi = 0; gi < sizeof grids / sizeof grids[0]; gi++) {
                const int64_t grid = grids[gi];
                int64_t blk, k, count = 0;
                memset(seen, 0, (size_t)n);
                for (blk = 0; blk < grid; blk++)
                    for (k = 0; (item = fa__sched_pair(grid, blk, k)) < n; k++) {
                        int bh, qt;
                        assert_true(item >= 0);
                        assert_false(seen[item]);
                        seen[item] = 1;
                        count++;
                        if (k & 1) {   /* the pair's second item: its first is this block's item before */
                            int bh0, qt0;
                            assert_int_equal(item, fa__sched_pair(grid, blk, k - 1) + 1);
                            fa__qtile_zig((int)qt_n, (int)item - 1, &bh0, &qt0);
                            fa__qtile_zig((int)qt_n, (int)item, &bh, &qt);
                            if (bh == bh0) {
                                assert_int_equal(qt0 + qt, qt_n - 1);
                                assert_true(qt0 >= qt);   /* the long tile first */
                            } else {
                                assert_int_equal(bh, bh0 + 1);
                                assert_true(qt_n % 2 == 1 && qt0 == (qt_n - 1) / 2 && qt == qt0);
                            }
                        }
                    }
                assert_int_equal(count, n);
            }
        }
        free(seen);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_sanity),
        cmocka_unit_test(test_status_string),
        cmocka_unit_test(test_allclose),
        cmocka_unit_test(test_qtile_order),
        cmocka_unit_test(test_ex2_poly),
        cmocka_unit_test(test_seq_lengths),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_block_sizes),
        cmocka_unit_test(test_gqa_mqa),
        cmocka_unit_test(test_causal_shapes),
        cmocka_unit_test(test_strides_and_dv),
        cmocka_unit_test(test_scale_and_large_logits),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_two_callers),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_openblas_threads_untouched),
        cmocka_unit_test(test_seq_q_zero),
        cmocka_unit_test(test_seq_k_zero),
        cmocka_unit_test(test_nan_isolation),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_errors_invalid),
        cmocka_unit_test(test_errors_overlap),
        cmocka_unit_test(test_errors_no_memory),
        cmocka_unit_test(test_size_limits),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_workspace_bytes),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_alibi),
        cmocka_unit_test(test_bias_patterns),
        cmocka_unit_test(test_bias_hides_rows_and_tiles),
        cmocka_unit_test(test_all_modifiers),
        cmocka_unit_test(test_random_configs),
        cmocka_unit_test(test_merge_split_keys),
        cmocka_unit_test(test_merge_random),
        cmocka_unit_test(test_merge_bad_args),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_version_and_build_info),
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_half_packs),
        cmocka_unit_test(test_half_storage),
        cmocka_unit_test(test_half_alias),
        cmocka_unit_test(test_half_nan_v),
        cmocka_unit_test(test_half_tiling),
        cmocka_unit_test(test_half_threads),
    };
    const char *seed = getenv("FA_TEST_SEED");
    if (seed && *seed) g_seed_base = (uint64_t)strtoull(seed, NULL, 10);
    if (getenv("FA_TEST_FILTER")) cmocka_set_test_filter(getenv("FA_TEST_FILTER"));   /* e.g. "test_half*" */
    print_message("flashattn.h CPU suite, seed base %llu%s\n", (unsigned long long)g_seed_base,
#ifdef FLASHATTN_NO_BLAS
                  " (FLASHATTN_NO_BLAS)"
#else
                  ""
#endif
    );
    {
        int failed = cmocka_run_group_tests(tests, NULL, NULL);
        print_message("largest |out - ref| / (1e-5 + 1e-5 |ref|) seen: %.3f (%s)\n", g_worst_ratio, g_worst_case);
        return failed;
    }
}
