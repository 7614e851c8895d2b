/* tests/fuzz_params.c - a libFuzzer target over fa_params and the inputs of the CPU calls.

   Build and run: `make fuzz` (FUZZ_TIME seconds, 0 for no limit; `make test` runs it for a minute
   when clang and its fuzzer runtime are present). By hand:
       clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz_params.c -lopenblas -lm -lpthread

   The input bytes are read as a request: a mode, the shape, the options, the layouts (packed,
   [B][S][H][D], nested axes with padding), the modifiers, threads and pool, the seed of the
   inputs, and in the special modes where to put NaNs, large values or a broken field. Its checks
   are the contract (API.md):
   - no crash, no sanitizer report, nothing leaked, every call's peak allocation equal to its
     workspace query (the suites' counting allocator, tests/talloc.h);
   - a refused call (fa_explain not NULL) returns FA_ERR_INVALID_ARG or FA_ERR_UNSUPPORTED, the
     same from fa_naive and fa_tiled, and writes no byte of any buffer; an accepted one returns
     FA_OK from both;
   - on N(0,1) inputs (or v those times a power of two, up to fa_tiled's documented range limit),
     fa_naive, fa_tiled and the float64 reference
     (tests/ref.h) agree within API.md's fp32 tolerance, o, lse and scores; writes stay inside the
     outputs' rows;
   - with NaNs in the inputs, o and lse are NaN exactly where the reference's are (a NaN reaches
     the rows that see it and no others, and never vanishes);
   - a row with no visible key gets exactly o = 0 and lse = -INFINITY;
   - fa_merge agrees with the reference merge (NaN where it is), in place and apart. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <pthread.h>

#include "tests/talloc.h"
#define FLASHATTN_MALLOC(n) ta_malloc(n)
#define FLASHATTN_FREE(p) ta_free(p)
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "tests/ref.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fa_pool *g_pool;      /* made once: a pool made per input would look like a leak */

#define FZ_CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "fuzz_params: check failed: %s\n  ", #cond); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } } while (0)

/* ---- the input, read as a little stream of choices (0 once it runs out) ----------------------- */
typedef struct fz { const uint8_t *p; size_t n; } fz;

static unsigned fz_byte(fz *z)
{
    unsigned b;
    if (z->n == 0) return 0;
    b = z->p[0];
    z->p++; z->n--;
    return b;
}

static int fz_int(fz *z, int lo, int hi)   /* in [lo, hi] */
{
    unsigned v = fz_byte(z) | (fz_byte(z) << 8);
    return lo + (int)(v % (unsigned)(hi - lo + 1));
}

static uint32_t fz_u32(fz *z)
{
    uint32_t v = 0;
    int i;
    for (i = 0; i < 4; i++) v = (v << 8) | fz_byte(z);
    return v;
}

/* Strides of an [n0][n1][n2][row] tensor: 0 packed, 1 [B][S][H][D], 2 the three axes nested in an
   order and with padding read from the input. */
static void fz_layout(fz *z, int64_t n0, int64_t n1, int64_t n2, int row, int64_t st[3])
{
    int kind = fz_int(z, 0, 2), perm[3] = { 0, 1, 2 }, k;
    int64_t n[3], cur;
    st[0] = st[1] = st[2] = 0;
    if (kind == 0) return;
    n[0] = n0; n[1] = n1; n[2] = n2;
    if (kind == 1) { perm[0] = 0; perm[1] = 2; perm[2] = 1; }
    else {
        int a = fz_int(z, 0, 5);
        static const int perms[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 }, { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };
        perm[0] = perms[a][0]; perm[1] = perms[a][1]; perm[2] = perms[a][2];
    }
    cur = row + (kind == 2 ? fz_int(z, 0, 3) : 0);
    for (k = 2; k >= 0; k--) {           /* perm[2] innermost */
        st[perm[k]] = cur;
        cur = cur * (n[perm[k]] > 0 ? n[perm[k]] : 1) + (kind == 2 ? fz_int(z, 0, 2) : 0);
    }
}

/* ---- checks ------------------------------------------------------------------------------------ */

/* o, lse or scores against the reference: NaN exactly where it has one; else within API.md's fp32
   tolerance; exactly 0 / -INFINITY for rows without a visible key (ref lse -INFINITY). */
static void fz_compare(const char *what, const float *out, const float *ref, const float *ref_lse, size_t rows,
                       size_t width, int is_lse, int is_scores)
{
    size_t r, t;
    for (r = 0; r < rows; r++) {
        const float *a = out + r * width, *b = ref + r * width;
        int empty = ref_lse[r] == -INFINITY;
        for (t = 0; t < width; t++) {
            FZ_CHECK((a[t] != a[t]) == (b[t] != b[t]), "%s row %zu col %zu: got %.9g, want %.9g (NaN pattern)", what, r, t,
                     (double)a[t], (double)b[t]);
            if (empty && !is_scores) {
                FZ_CHECK(is_lse ? a[t] == -INFINITY : a[t] == 0.0f, "%s row %zu: empty row gave %.9g", what, r,
                         (double)a[t]);
            }
        }
        for (t = 0; t < width; t++)
            FZ_CHECK(b[t] != b[t] || fa_allclose(a + t, b + t, 1, 1e-5f, 1e-5f),
                     "%s row %zu col %zu not close to the reference: got %.9g want %.9g", what, r, t, (double)a[t],
                     (double)b[t]);
    }
}

/* One call of fa_naive (path 0) or fa_tiled (1) on a valid request; checks as above. */
static void fz_run(int path, const fa_params *p0, const ref_tensors *t, const float *ref_o, const float *ref_lse,
                   const float *ref_s, size_t rows, size_t n_scores)
{
    enum { GUARD = 16 };
    fa_params p = *p0;
    ref_dims d;
    float *o = ref_alloc(t->no + GUARD), *lse = ref_alloc(rows + GUARD), *sc = ref_alloc(n_scores + GUARD);
    float *packed;
    size_t ws, peak, base, live;
    fa_status st;
    ref_dims_of(&p, &d);
    packed = ref_alloc(rows * (size_t)d.Dv + 1);
    FZ_CHECK(o && lse && sc && packed, "test allocation");
    ref_poison(o, (t->no + GUARD) * sizeof(float));
    ref_poison(lse, (rows + GUARD) * sizeof(float));
    ref_poison(sc, (n_scores + GUARD) * sizeof(float));
    p.lse = lse;
    ws = path == 0 ? fa_naive_workspace_bytes(&p) : fa_tiled_workspace_bytes(&p);
    FZ_CHECK(fa_explain(&p, t->q, t->k, t->v, o, path == 0 ? sc : NULL) == NULL, "an accepted request explained");
    base = ta_reset(-1);                           /* the pool's bytes are live throughout */
    st = path == 0 ? fa_naive(&p, t->q, t->k, t->v, o, sc) : fa_tiled(&p, t->q, t->k, t->v, o);
    pthread_mutex_lock(&ta_mu);
    peak = ta_peak - base;
    live = ta_live - base;
    pthread_mutex_unlock(&ta_mu);
    FZ_CHECK(st == FA_OK, "path %d returned %d (%s)", path, (int)st, fa_status_string(st));
    FZ_CHECK(peak == ws && live == 0, "path %d: peak %zu, workspace %zu, live %zu", path, peak, ws, live);
    FZ_CHECK(ref_o_gaps_untouched(&p, o, t->no) && ref_is_poison(o + t->no, GUARD * sizeof(float)),
             "path %d wrote outside o's rows", path);
    FZ_CHECK(ref_is_poison(lse + rows, GUARD * sizeof(float)), "path %d wrote past lse", path);
    ref_gather_o(&p, o, packed);
    fz_compare(path == 0 ? "naive o" : "tiled o", packed, ref_o, ref_lse, rows, (size_t)d.Dv, 0, 0);
    fz_compare(path == 0 ? "naive lse" : "tiled lse", lse, ref_lse, ref_lse, rows, 1, 1, 0);
    if (path == 0) {
        fz_compare("naive scores", sc, ref_s, ref_lse, rows, (size_t)d.Sk, 0, 1);
        FZ_CHECK(ref_is_poison(sc + n_scores, GUARD * sizeof(float)), "naive wrote past scores");
    } else {
        FZ_CHECK(ref_is_poison(sc, (n_scores + GUARD) * sizeof(float)), "tiled wrote scores");
    }
    free(o); free(lse); free(sc); free(packed);
}

/* A request with one field broken (or tensors that overlap), called on a small poisoned arena that
   holds every tensor: refused by both paths with a reason, the arena untouched; or, where the
   change happens to leave it valid and small, run like any other. */
static void fz_broken(fz *z, fa_params p)
{
    enum { N = 1 << 16 };
    static float arena[N];
    int which = fz_int(z, 0, 15), path;
    /* inputs in the first three quarters (zeros), outputs in the last (poison): o, then lse */
    float *q = arena, *k = arena + N / 4, *v = arena + N / 2, *o = arena + 3 * N / 4, *sc = NULL;
    int32_t x = (int32_t)fz_u32(z);
    int64_t y = ((int64_t)(int32_t)fz_u32(z) << 32) | fz_u32(z);
    const char *why, *why_t;
    switch (which) {
    case 0: p.batch = x; break;
    case 1: p.heads = x; break;
    case 2: p.kv_heads = x; break;
    case 3: p.seq_q = x; break;
    case 4: p.seq_k = x; break;
    case 5: p.head_dim = x; break;
    case 6: p.head_dim_v = x; break;
    case 7: p.o_stride[fz_int(z, 0, 2)] = fz_int(z, 0, 1) ? y : x; break;
    case 8: p.q_stride[fz_int(z, 0, 2)] = y; break;
    case 9: { union { uint32_t u; float f; } u; u.u = (uint32_t)x; if (fz_int(z, 0, 1)) p.softcap = u.f; else p.scale = u.f; } break;
    case 10: p.window_left = x; p.window_right = (int32_t)fz_u32(z); break;
    case 11: p.dtype = (fa_dtype)fz_int(z, -1, 4); break;
    case 12: p.block_q = x; p.block_k = (int32_t)fz_u32(z); p.threads = fz_int(z, -2, 5); break;
    case 13: o = q + fz_int(z, 0, 4096); break;                              /* o over q */
    case 14: p.lse = o + fz_int(z, 0, 4096); break;                          /* lse over o */
    default: sc = o + fz_int(z, 0, 4096); break;                             /* scores over o */
    }
    if (which != 14) p.lse = arena + 7 * N / 8;
    if (p.alibi_slopes || p.bias) { p.alibi_slopes = NULL; p.bias = NULL; }
    why = fa_explain(&p, q, k, v, o, sc);
    why_t = fa_explain(&p, q, k, v, o, NULL);
    for (path = 0; path < 2; path++) {
        const char *w = path == 0 ? why : why_t;
        fa_status st;
        size_t before;
        if (!w) {
            /* accepted: run it only when every tensor fits the arena's quarter */
            ref_dims d;
            size_t lim = N / 8;
            if (p.seq_q == 0 || p.seq_q > 64 || p.seq_k > 64 || p.head_dim > 64 || p.batch > 4 || p.heads > 8 ||
                (p.head_dim_v ? p.head_dim_v : p.head_dim) > 64 || p.threads > 4)
                continue;
            ref_dims_of(&p, &d);
            if (ref_tensor_elems(&p, REF_Q) > lim || ref_tensor_elems(&p, REF_K) > lim || ref_tensor_elems(&p, REF_V) > lim ||
                ref_tensor_elems(&p, REF_O) > lim || (size_t)d.B * d.Hq * d.Sq > N / 16)
                continue;
        }
        memset(arena, 0, 3 * N / 4 * sizeof(float));  /* inputs: finite */
        ref_poison(arena + 3 * N / 4, N / 4 * sizeof(float));
        before = ta_live;
        st = path == 0 ? fa_naive(&p, q, k, v, o, sc) : fa_tiled(&p, q, k, v, o);
        FZ_CHECK(ta_live == before, "path %d leaked", path);
        if (w) {
            size_t e;
            FZ_CHECK(st == FA_ERR_INVALID_ARG || st == FA_ERR_UNSUPPORTED, "refused (%s) but path %d returned %d", w,
                     path, (int)st);
            for (e = 0; e < 3 * N / 4; e++) FZ_CHECK(arena[e] == 0.0f, "path %d wrote an input on failure (%s)", path, w);
            FZ_CHECK(ref_is_poison(arena + 3 * N / 4, N / 4 * sizeof(float)), "path %d wrote on failure (%s)", path, w);
            FZ_CHECK((path == 0 ? fa_naive_workspace_bytes(&p) : fa_tiled_workspace_bytes(&p)) == 0 || strstr(w, "overlaps"),
                     "a request refused by its fields (%s) has a workspace", w);
        } else {
            FZ_CHECK(st == FA_OK || st == FA_ERR_NO_MEMORY, "accepted but path %d returned %d", path, (int)st);
        }
    }
}

/* fa_merge on parts drawn from the input: lse spread far beyond exp's range, -inf and NaN parts. */
static void fz_merge(fz *z)
{
    int rows = fz_int(z, 0, 9), dv = fz_int(z, 1, 7), parts = fz_int(z, 1, 5), P, r, inplace = fz_int(z, 0, 2);
    float *op[5], *lp[5], *o, *l, *ro, *rl, *lref;
    ref_rng g;
    ref_seed(&g, fz_u32(z));
    for (P = 0; P < parts; P++) {
        op[P] = ref_alloc((size_t)rows * dv); lp[P] = ref_alloc((size_t)rows);
        FZ_CHECK(op[P] && lp[P], "alloc");
        ref_fill_normal(&g, op[P], (size_t)rows * dv);
        for (r = 0; r < rows; r++) {
            int kind = fz_int(z, 0, 7);
            lp[P][r] = kind == 0 ? -INFINITY : kind == 1 ? NAN : (float)(ref_normal(&g) * (kind == 2 ? 300.0 : 3.0));
            if (kind == 3) op[P][(size_t)r * dv] = NAN;
        }
    }
    o = ref_alloc((size_t)rows * dv); l = ref_alloc((size_t)rows); ro = ref_alloc((size_t)rows * dv);
    rl = ref_alloc((size_t)rows);
    FZ_CHECK(o && l && ro && rl, "alloc");
    ref_merge(rows, dv, parts, (const float *const *)op, (const float *const *)lp, ro, rl);
    FZ_CHECK(fa_explain_merge(rows, dv, parts, (const float *const *)op, (const float *const *)lp,
                              inplace == 1 ? op[parts - 1] : o, inplace == 1 ? lp[0] : inplace == 2 ? NULL : l) == NULL,
             "a valid merge explained");
    FZ_CHECK(fa_merge(rows, dv, parts, (const float *const *)op, (const float *const *)lp, inplace == 1 ? op[parts - 1] : o,
                      inplace == 1 ? lp[0] : inplace == 2 ? NULL : l) == FA_OK, "merge failed");
    lref = rl;
    if (rows > 0) {
        fz_compare("merged o", inplace == 1 ? op[parts - 1] : o, ro, lref, (size_t)rows, (size_t)dv, 0, 0);
        if (inplace != 2) fz_compare("merged lse", inplace == 1 ? lp[0] : l, rl, lref, (size_t)rows, 1, 1, 0);
    }
    for (P = 0; P < parts; P++) { free(op[P]); free(lp[P]); }
    free(o); free(l); free(ro); free(rl);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    if (fa_pool_create(3, &g_pool) != FA_OK) g_pool = NULL;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz z;
    fa_params p;
    int mode, Hkv, group, B, Sq, Sk, D, Dv, bias_kind, alibi_kind, path;
    ref_rng g;
    ref_tensors t;
    float *bias = NULL, *slopes = NULL, *ref_o, *ref_lse, *ref_s;
    size_t rows, n_scores, i;
    z.p = data; z.n = size;
    mode = fz_int(&z, 0, 9);           /* 0-5 N(0,1), 6 NaNs, 7 large values, 8 a broken field, 9 merge */
    if (mode == 9) { fz_merge(&z); return 0; }
    memset(&p, 0, sizeof p);
    B = fz_int(&z, 1, 3); Hkv = fz_int(&z, 1, 3); group = fz_int(&z, 1, 4);
    Sq = fz_int(&z, 0, 9) == 0 ? fz_int(&z, 0, 2) : fz_int(&z, 1, 48);
    Sk = fz_int(&z, 0, 9) == 0 ? fz_int(&z, 0, 2) : fz_int(&z, 1, 96);
    D = fz_int(&z, 1, 48); Dv = fz_int(&z, 0, 3) == 0 ? fz_int(&z, 1, 40) : 0;
    p.batch = B; p.heads = Hkv * group; p.kv_heads = fz_int(&z, 0, 1) ? Hkv : (group == 1 ? 0 : Hkv);
    p.seq_q = Sq; p.seq_k = Sk; p.head_dim = D; p.head_dim_v = Dv;
    p.causal = fz_int(&z, 0, 1);
    if (fz_int(&z, 0, 3) == 0) p.window_left = fz_int(&z, 1, Sk + 4);
    if (fz_int(&z, 0, 3) == 0) p.window_right = fz_int(&z, 1, Sk + 4);
    switch (fz_int(&z, 0, 5)) { case 1: p.softcap = 0.5f; break; case 2: p.softcap = 5.0f; break; case 3: p.softcap = 30.0f; break; default: break; }
    if (fz_int(&z, 0, 2) == 0) p.scale = (float)((fz_int(&z, 0, 200) / 100.0 - 0.5) / sqrt((double)D));
    p.block_q = fz_int(&z, 0, 3) == 0 ? fz_int(&z, 1, 70) : 0;
    p.block_k = fz_int(&z, 0, 3) == 0 ? fz_int(&z, 1, 100) : 0;
    p.threads = fz_int(&z, 1, 3);
    if (g_pool && fz_int(&z, 0, 3) == 0) p.pool = g_pool;
    {
        int Dvv = Dv ? Dv : D;
        fz_layout(&z, B, p.heads, Sq, D, p.q_stride);
        fz_layout(&z, B, Hkv, Sk, D, p.k_stride);
        fz_layout(&z, B, Hkv, Sk, Dvv, p.v_stride);
        fz_layout(&z, B, p.heads, Sq, Dvv, p.o_stride);
        if (fz_int(&z, 0, 7) == 0) { p.k_stride[0] = 0; p.k_stride[1] = 0; p.k_stride[2] = D; }   /* broadcast K */
    }
    alibi_kind = fz_int(&z, 0, 5);
    bias_kind = fz_int(&z, 0, 4);
    ref_seed(&g, fz_u32(&z));
    if (mode == 8) { fz_broken(&z, p); return 0; }
    FZ_CHECK(ref_tensors_make(&p, &g, &t), "alloc");
    if (mode == 7) {   /* large values, times a power of two so the case stays as well-conditioned,
                          up to fa_tiled's documented limit max|v| <= FLT_MAX / (e^8 Sk) */
        float vmax = 0.0f;
        int e = fz_int(&z, 0, 127), lim;
        for (i = 0; i < t.nv; i++) vmax = fabsf(t.v[i]) > vmax ? fabsf(t.v[i]) : vmax;
        lim = (int)floor(log2(FLT_MAX / (exp(8.0) * (Sk > 0 ? Sk : 1) * (vmax > 1.0f ? vmax : 1.0f))));
        if (e > lim) e = lim;
        for (i = 0; i < t.nv; i++) t.v[i] = ldexpf(t.v[i], e);
    }
    if (alibi_kind >= 4) {
        int per = alibi_kind == 5;
        size_t n = per ? (size_t)B * p.heads : (size_t)p.heads;
        slopes = ref_alloc(n);
        for (i = 0; i < n; i++) slopes[i] = (float)pow(2.0, -8.0 * (double)(i % p.heads + 1) / p.heads) * (1.0f + 0.25f * (float)(i / p.heads));
        p.alibi_slopes = slopes; p.alibi_stride = per ? p.heads : 0;
    }
    if (bias_kind >= 3) {
        static const int64_t pats[4][4] = { { 0, 0, 0, 0 }, { 1, 0, 0, 0 }, { 0, 0, 0, 1 }, { 0, 1, 0, 1 } };
        int pat = fz_int(&z, 0, 4);
        size_t n;
        float frac = (float)fz_int(&z, 0, 10) / 10.0f;
        if (pat == 1) { p.bias_stride[0] = 1; }
        else if (pat == 2) { p.bias_stride[0] = Sk; p.bias_stride[3] = 1; }                      /* key padding */
        else if (pat == 3) { p.bias_stride[1] = Sk; p.bias_stride[3] = 1; }                      /* per head */
        else if (pat == 4) { p.bias_stride[0] = (int64_t)p.heads * Sk * Sq; p.bias_stride[1] = (int64_t)Sk * Sq;
                             p.bias_stride[2] = 1; p.bias_stride[3] = Sq; }                       /* key-major */
        (void)pats;
        n = ref_bias_elems(&p);
        bias = ref_alloc(n);
        ref_fill_normal(&g, bias, n);
        for (i = 0; i < n; i++) if (ref_uniform(&g) < frac) bias[i] = -INFINITY;
        p.bias = bias;
    }
    if (mode == 6) {   /* NaNs: a few elements of q, k or v */
        int nn = fz_int(&z, 1, 3), m;
        for (m = 0; m < nn; m++) {
            int which = fz_int(&z, 0, 2);
            uint32_t at = fz_u32(&z);
            if (which == 0) t.q[at % t.nq] = NAN;
            else if (which == 1) t.k[at % t.nk] = NAN;
            else t.v[at % t.nv] = NAN;
        }
    }
    {
        ref_dims d;
        ref_dims_of(&p, &d);
        rows = (size_t)d.B * d.Hq * d.Sq;
        n_scores = rows * (size_t)d.Sk;
        ref_o = ref_alloc(rows * (size_t)d.Dv + 1); ref_lse = ref_alloc(rows + 1); ref_s = ref_alloc(n_scores + 1);
        FZ_CHECK(ref_o && ref_lse && ref_s, "alloc");
        FZ_CHECK(ref_attention(&p, t.q, t.k, t.v, ref_o, ref_lse, ref_s), "reference");
    }
    for (path = 0; path < 2; path++) fz_run(path, &p, &t, ref_o, ref_lse, ref_s, rows, n_scores);
    free(ref_o); free(ref_lse); free(ref_s); free(bias); free(slopes);
    ref_tensors_free(&t);
    return 0;
}
