/* tests/ref.h - the float64 reference attention of flashattn.h's test suites, and their helpers.

   Plain C99 that also compiles as C++ and under nvcc; every function is static inline (so a
   suite that uses a part gets no unused-function warnings); no test framework in here.
   Include "flashattn.h" (declarations) before this file.

   ref_attention() is the SEMANTICS block at the top of flashattn.h (the scores, the modifiers in
   their order, the position rule, softmax and lse, the rows with no visible key) written as
   directly as possible, in double, one (batch, head, row) at a time: no tiling, no online
   softmax, no shortcuts shared with the library. The helpers give every suite the same inputs:
   a seeded N(0,1) generator, tensors allocated and filled for a given fa_params (with its
   strides), NaN poisoning, and fp16/bf16 rounding for the CUDA suite. */
#ifndef FLASHATTN_TESTS_REF_H
#define FLASHATTN_TESTS_REF_H

#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers: splitmix64 seeding an xorshift64*, N(0,1) by Box-Muller -------------- */

typedef struct ref_rng {
    uint64_t s;
    int have_spare;
    double spare;
} ref_rng;

static inline uint64_t ref__splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline void ref_seed(ref_rng *r, uint64_t seed)
{
    r->s = ref__splitmix(seed);
    if (r->s == 0) r->s = 0x2545F4914F6CDD1Dull;
    r->have_spare = 0;
    r->spare = 0.0;
}

static inline uint64_t ref_next(ref_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

/* uniform in (0, 1), never 0 */
static inline double ref_uniform(ref_rng *r)
{
    return ((double)(ref_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline int ref_randint(ref_rng *r, int lo, int hi) /* in [lo, hi] */
{
    return lo + (int)(ref_next(r) % (uint64_t)(hi - lo + 1));
}

static inline double ref_normal(ref_rng *r)
{
    double u, v, rad;
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    u = ref_uniform(r);
    v = ref_uniform(r);
    rad = sqrt(-2.0 * log(u));
    r->spare = rad * sin(6.283185307179586 * v);
    r->have_spare = 1;
    return rad * cos(6.283185307179586 * v);
}

static inline void ref_fill_normal(ref_rng *r, float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) x[i] = (float)ref_normal(r);
}

/* ---- the request resolved: defaults filled in, as fa_params's comments in flashattn.h say --- */

typedef struct ref_dims {
    int B, Hq, Hkv, Sq, Sk, D, Dv;
    int64_t qs[3], ks[3], vs[3], os[3], bs[4];
    double scale;
} ref_dims;

static inline void ref__packed(int64_t n1, int64_t n2, int64_t n3, const int64_t *given, int64_t st[3])
{
    if (given[0] == 0 && given[1] == 0 && given[2] == 0) {
        st[0] = n1 * n2 * n3;
        st[1] = n2 * n3;
        st[2] = n3;
    } else {
        st[0] = given[0];
        st[1] = given[1];
        st[2] = given[2];
    }
}

static inline void ref_dims_of(const fa_params *p, ref_dims *d)
{
    memset(d, 0, sizeof *d);
    d->B = p->batch;
    d->Hq = p->heads;
    d->Hkv = p->kv_heads ? p->kv_heads : p->heads;
    d->Sq = p->seq_q;
    d->Sk = p->seq_k;
    d->D = p->head_dim;
    d->Dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    d->scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)p->head_dim);
    ref__packed(d->Hq, d->Sq, d->D, p->q_stride, d->qs);
    ref__packed(d->Hkv, d->Sk, d->D, p->k_stride, d->ks);
    ref__packed(d->Hkv, d->Sk, d->Dv, p->v_stride, d->vs);
    ref__packed(d->Hq, d->Sq, d->Dv, p->o_stride, d->os);
    if (p->bias_stride[0] == 0 && p->bias_stride[1] == 0 && p->bias_stride[2] == 0 &&
        p->bias_stride[3] == 0) {
        d->bs[0] = (int64_t)d->Hq * d->Sq * d->Sk;
        d->bs[1] = (int64_t)d->Sq * d->Sk;
        d->bs[2] = d->Sk;
        d->bs[3] = 1;
    } else {
        memcpy(d->bs, p->bias_stride, sizeof d->bs);
    }
}

/* Elements a strided [n0][n1][n2][row] tensor spans from its base pointer (non-negative strides). */
static inline size_t ref_extent(int64_t n0, int64_t n1, int64_t n2, int64_t row, const int64_t st[3])
{
    if (n0 <= 0 || n1 <= 0 || n2 <= 0 || row <= 0) return 0;
    return (size_t)((n0 - 1) * st[0] + (n1 - 1) * st[1] + (n2 - 1) * st[2] + row);
}

enum { REF_Q = 0, REF_K = 1, REF_V = 2, REF_O = 3 };

/* Elements the buffer of q, k, v or o needs for p (at least 1, so that allocating it never
   returns NULL for an empty tensor). */
static inline size_t ref_tensor_elems(const fa_params *p, int which)
{
    ref_dims d;
    size_t n = 0;
    ref_dims_of(p, &d);
    switch (which) {
    case REF_Q: n = ref_extent(d.B, d.Hq, d.Sq, d.D, d.qs); break;
    case REF_K: n = ref_extent(d.B, d.Hkv, d.Sk, d.D, d.ks); break;
    case REF_V: n = ref_extent(d.B, d.Hkv, d.Sk, d.Dv, d.vs); break;
    default: n = ref_extent(d.B, d.Hq, d.Sq, d.Dv, d.os); break;
    }
    return n ? n : 1;
}

/* Elements of a bias buffer for p's bias strides (packed when all zero). */
static inline size_t ref_bias_elems(const fa_params *p)
{
    ref_dims d;
    int64_t n[4], e = 0;
    int a;
    ref_dims_of(p, &d);
    n[0] = d.B; n[1] = d.Hq; n[2] = d.Sq; n[3] = d.Sk;
    for (a = 0; a < 4; a++) {
        if (n[a] == 0) return 1;
        e += (n[a] - 1) * d.bs[a];
    }
    return (size_t)e + 1;
}

static inline float *ref_alloc(size_t n)
{
    float *x = (float *)malloc((n ? n : 1) * sizeof(float));
    return x;
}

/* NaN in every element (bytes 0xFF: a quiet NaN with all payload bits set). */
static inline void ref_poison(void *x, size_t bytes) { memset(x, 0xFF, bytes); }

/* 1 when every byte of x[0..bytes) still holds ref_poison's pattern. */
static inline int ref_is_poison(const void *x, size_t bytes)
{
    const unsigned char *c = (const unsigned char *)x;
    size_t i;
    for (i = 0; i < bytes; i++)
        if (c[i] != 0xFF) return 0;
    return 1;
}

/* Inputs for p: q, k, v allocated with p's strides and filled with N(0,1) everywhere (the gaps
   between rows too); o allocated the same way and poisoned. Returns 0 on allocation failure. */
typedef struct ref_tensors {
    float *q, *k, *v, *o;
    size_t nq, nk, nv, no;   /* elements */
} ref_tensors;

static inline void ref_tensors_free(ref_tensors *t)
{
    free(t->q); free(t->k); free(t->v); free(t->o);
    memset(t, 0, sizeof *t);
}

static inline int ref_tensors_make(const fa_params *p, ref_rng *r, ref_tensors *t)
{
    memset(t, 0, sizeof *t);
    t->nq = ref_tensor_elems(p, REF_Q);
    t->nk = ref_tensor_elems(p, REF_K);
    t->nv = ref_tensor_elems(p, REF_V);
    t->no = ref_tensor_elems(p, REF_O);
    t->q = ref_alloc(t->nq); t->k = ref_alloc(t->nk); t->v = ref_alloc(t->nv); t->o = ref_alloc(t->no);
    if (!t->q || !t->k || !t->v || !t->o) {
        ref_tensors_free(t);
        return 0;
    }
    ref_fill_normal(r, t->q, t->nq);
    ref_fill_normal(r, t->k, t->nk);
    ref_fill_normal(r, t->v, t->nv);
    ref_poison(t->o, t->no * sizeof(float));
    return 1;
}

/* o's rows (strided, as p says) copied into packed [B][Hq][Sq][Dv]. */
static inline void ref_gather_o(const fa_params *p, const float *o, float *packed)
{
    ref_dims d;
    int b, h, i;
    ref_dims_of(p, &d);
    for (b = 0; b < d.B; b++)
        for (h = 0; h < d.Hq; h++)
            for (i = 0; i < d.Sq; i++)
                memcpy(packed + (((size_t)b * d.Hq + h) * d.Sq + i) * d.Dv,
                       o + b * d.os[0] + h * d.os[1] + i * d.os[2], (size_t)d.Dv * sizeof(float));
}

/* 1 when every element of o's buffer that is not in one of o's rows still holds the poison. */
static inline int ref_o_gaps_untouched(const fa_params *p, const float *o, size_t n_elems)
{
    ref_dims d;
    unsigned char *in_row = (unsigned char *)calloc(n_elems ? n_elems : 1, 1);
    int b, h, i, ok = 1;
    size_t e;
    if (!in_row) return 0;
    ref_dims_of(p, &d);
    for (b = 0; b < d.B; b++)
        for (h = 0; h < d.Hq; h++)
            for (i = 0; i < d.Sq; i++) {
                size_t at = (size_t)(b * d.os[0] + h * d.os[1] + i * d.os[2]);
                if (at + (size_t)d.Dv <= n_elems) memset(in_row + at, 1, (size_t)d.Dv);
            }
    for (e = 0; e < n_elems && ok; e++)
        if (!in_row[e] && !ref_is_poison(o + e, sizeof(float))) ok = 0;
    free(in_row);
    return ok;
}

/* ---- the reference ------------------------------------------------------------------------- */

/* ref_attention's rows [r0, r1) of [B][Hq][Sq] in steps of `step` rows every `stride` rows (rows
   r0 + k stride .. + step - 1): each row's values depend on that row alone, so any split of the rows
   gives the same bits. Returns 0 if out of memory. */
static inline int ref__attention_rows(const fa_params *p, const float *q, const float *k, const float *v,
                                      float *o_ref, float *lse_ref, float *scores_ref, size_t r0, size_t r1,
                                      size_t step, size_t stride)
{
    ref_dims d;
    double *s, *acc;
    unsigned char *vis;
    size_t c, row;
    int j, t;
    ref_dims_of(p, &d);
    s = (double *)malloc(((size_t)d.Sk + 1) * sizeof(double));
    acc = (double *)malloc(((size_t)d.Dv + 1) * sizeof(double));
    vis = (unsigned char *)malloc((size_t)d.Sk + 1);
    if (!s || !acc || !vis) {
        free(s); free(acc); free(vis);
        return 0;
    }
    for (c = r0; c < r1; c += stride)
        for (row = c; row < c + step && row < r1; row++) {
            const int i = (int)(row % (size_t)d.Sq), h = (int)(row / (size_t)d.Sq % (size_t)d.Hq);
            const int b = (int)(row / ((size_t)d.Sq * (size_t)d.Hq));
            const int g = h / (d.Hq / d.Hkv);
            const double slope = p->alibi_slopes ? (double)p->alibi_slopes[(int64_t)b * p->alibi_stride + h] : 0.0;
            {
                const float *qi = q + b * d.qs[0] + h * d.qs[1] + i * d.qs[2];
                int64_t diag = (int64_t)i + d.Sk - d.Sq;
                double mx = -INFINITY, sum = 0.0;
                int any = 0;
                for (j = 0; j < d.Sk; j++) {
                    const float *kj = k + b * d.ks[0] + g * d.ks[1] + j * d.ks[2];
                    double x = 0.0;
                    int hidden = 0;
                    for (t = 0; t < d.D; t++) x += (double)qi[t] * (double)kj[t];
                    x *= d.scale;                                                   /* 1 */
                    if (p->softcap > 0.0f) x = p->softcap * tanh(x / p->softcap);   /* 2 */
                    if (p->alibi_slopes) x -= slope * fabs((double)(diag - j));      /* 3 */
                    if (p->bias) {                                                  /* 4 */
                        double bij = (double)p->bias[b * d.bs[0] + h * d.bs[1] + i * d.bs[2] + j * d.bs[3]];
                        x += bij;
                        if (bij == -INFINITY) hidden = 1;   /* hides the key, even a NaN score */
                    }
                    if (p->causal && j > diag) hidden = 1;                          /* 5 */
                    if (p->window_left > 0 && j < diag - p->window_left) hidden = 1;
                    if (p->window_right > 0 && j > diag + p->window_right) hidden = 1;
                    if (x == -INFINITY) hidden = 1;
                    vis[j] = (unsigned char)!hidden;
                    s[j] = hidden ? -INFINITY : x;
                    if (scores_ref) scores_ref[row * d.Sk + j] = hidden ? -INFINITY : (float)x;
                    if (!hidden) {
                        any = 1;
                        if (x > mx || x != x) mx = x;
                    }
                }
                for (t = 0; t < d.Dv; t++) acc[t] = 0.0;
                if (!any) {
                    if (o_ref) for (t = 0; t < d.Dv; t++) o_ref[row * d.Dv + t] = 0.0f;
                    if (lse_ref) lse_ref[row] = -INFINITY;
                    goto next;
                }
                for (j = 0; j < d.Sk; j++) {
                    const float *vj = v + b * d.vs[0] + g * d.vs[1] + j * d.vs[2];
                    double e;
                    if (!vis[j]) continue;
                    e = exp(s[j] - mx);
                    sum += e;
                    for (t = 0; t < d.Dv; t++) acc[t] += e * (double)vj[t];
                }
                if (o_ref) for (t = 0; t < d.Dv; t++) o_ref[row * d.Dv + t] = (float)(acc[t] / sum);
                if (lse_ref) lse_ref[row] = (float)(mx + log(sum));
            }
        next:;
        }
    free(s); free(acc); free(vis);
    return 1;
}

typedef struct ref__job {
    const fa_params *p;
    const float *q, *k, *v;
    float *o_ref, *lse_ref, *scores_ref;
    size_t r0, r1, step, stride;
    int ok;
} ref__job;

static void *ref__job_run(void *x)
{
    ref__job *j = (ref__job *)x;
    j->ok = ref__attention_rows(j->p, j->q, j->k, j->v, j->o_ref, j->lse_ref, j->scores_ref, j->r0, j->r1,
                                j->step, j->stride);
    return NULL;
}

/* flashattn.h's SEMANTICS in double. q, k, v are p's fp32 tensors with p's strides; the modifiers
   (scale, causal, windows, softcap, ALiBi, bias) are read from p. Outputs, each optional:
   o_ref packed [B][Hq][Sq][Dv], lse_ref [B][Hq][Sq], scores_ref [B][Hq][Sq][Sk] (step 4's
   values, -INFINITY where hidden), all fp32 rounded from double. Returns 0 if out of memory.
   Large calls run on REF_THREADS threads (default: the online CPUs, at most 32), rows dealt out in
   turns of 16; the bits are the same on any number (each row is computed alone). */
static inline int ref_attention(const fa_params *p, const float *q, const float *k, const float *v,
                         float *o_ref, float *lse_ref, float *scores_ref)
{
    enum { REF_MAXT = 32, REF_STEP = 16 };
    ref__job job[REF_MAXT];
    pthread_t th[REF_MAXT];
    ref_dims d;
    size_t rows;
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned started = 0;
    int n, ok = 1, i;
    const char *env = getenv("REF_THREADS");
    ref_dims_of(p, &d);
    rows = (size_t)d.B * (size_t)d.Hq * (size_t)d.Sq;
    if (env && atoi(env) > 0) nt = atoi(env);
    n = nt < 1 ? 1 : nt > REF_MAXT ? REF_MAXT : (int)nt;
    if ((double)rows * (double)d.Sk * (double)(d.D + d.Dv) < 4e6 || rows < 2 * REF_STEP) n = 1;
    if (n == 1) return ref__attention_rows(p, q, k, v, o_ref, lse_ref, scores_ref, 0, rows, rows, rows);
    for (i = 0; i < n; i++) {
        ref__job jb;
        jb.p = p; jb.q = q; jb.k = k; jb.v = v;
        jb.o_ref = o_ref; jb.lse_ref = lse_ref; jb.scores_ref = scores_ref;
        jb.r0 = (size_t)i * REF_STEP; jb.r1 = rows; jb.step = REF_STEP; jb.stride = (size_t)n * REF_STEP;
        jb.ok = 0;
        job[i] = jb;
        if (jb.r0 >= rows) { job[i].ok = 1; continue; }
        if (pthread_create(&th[i], NULL, ref__job_run, &job[i]) != 0) { ref__job_run(&job[i]); continue; }
        started |= 1u << i;
    }
    for (i = 0; i < n; i++) {
        if (started >> i & 1) pthread_join(th[i], NULL);
        ok &= job[i].ok;
    }
    return ok;
}

/* fa_merge's rule in double, for the merge tests: parts packed [rows][dv], lse [rows]. */
static inline void ref_merge(int rows, int dv, int parts, const float *const *o_parts,
                      const float *const *lse_parts, float *o, float *lse)
{
    int r, p, t;
    for (r = 0; r < rows; r++) {
        double mx = -INFINITY, sum = 0.0;
        for (p = 0; p < parts; p++)   /* a NaN part makes the row NaN */
            if ((double)lse_parts[p][r] > mx || lse_parts[p][r] != lse_parts[p][r]) mx = lse_parts[p][r];
        if (mx == -INFINITY) {
            for (t = 0; t < dv; t++) o[(size_t)r * dv + t] = 0.0f;
            if (lse) lse[r] = -INFINITY;
            continue;
        }
        for (p = 0; p < parts; p++)
            if (lse_parts[p][r] != -INFINITY) sum += exp((double)lse_parts[p][r] - mx);
        for (t = 0; t < dv; t++) {
            double a = 0.0;
            for (p = 0; p < parts; p++)
                if (lse_parts[p][r] != -INFINITY)
                    a += exp((double)lse_parts[p][r] - mx) * (double)o_parts[p][(size_t)r * dv + t];
            o[(size_t)r * dv + t] = (float)(a / sum);
        }
        if (lse) lse[r] = (float)(mx + log(sum));
    }
}

/* ---- FNV-1a over bytes: the suites hash their inputs before and after a call (never written) */

static inline uint64_t ref_hash(uint64_t h, const void *x, size_t bytes)
{
    const unsigned char *c = (const unsigned char *)x;
    size_t i;
    for (i = 0; i < bytes; i++) h = (h ^ c[i]) * 0x100000001B3ull;
    return h;
}

/* ---- comparisons --------------------------------------------------------------------------- */

/* ||out - ref||_2 / ||ref||_2 in double (the fp16/bf16 accuracy measure); NaN if out has a NaN;
   0 when both are all zero. */
static inline double ref_rel_error(const float *out, const float *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double e = (double)out[i] - (double)ref[i];
        if (out[i] != out[i]) return NAN;
        num += e * e;
        den += (double)ref[i] * (double)ref[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

/* Index of the element that breaks |a-b| <= atol + rtol*|b| the most (or (size_t)-1 if none):
   for failure messages. */
static inline size_t ref_worst(const float *a, const float *b, size_t n, double rtol, double atol)
{
    size_t i, w = (size_t)-1;
    double worst = 0.0;
    for (i = 0; i < n; i++) {
        double x = a[i], y = b[i], ex;
        if (x == y) continue;
        if (x != x || y != y) return i;
        ex = fabs(x - y) - (atol + rtol * fabs(y));
        if (ex > worst) { worst = ex; w = i; }
    }
    return w;
}

/* ---- fp16 / bf16 storage (round to nearest even), for suites that feed half-precision data - */

static inline uint16_t ref_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);   /* NaN stays NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float ref_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t ref_f32_to_f16(float f)
{
    uint32_t u, sign, mant;
    int exp;
    memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u;
    exp = (int)((u >> 23) & 0xFF);
    mant = u & 0x7FFFFFu;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u));
    exp = exp - 127 + 15;
    if (exp >= 0x1F) return (uint16_t)(sign | 0x7C00u);                 /* overflow: inf */
    if (exp <= 0) {                                                      /* subnormal or zero */
        uint32_t m, half, rem, r;
        int shift;
        if (exp < -10) return (uint16_t)sign;
        m = mant | 0x800000u;
        shift = 14 - exp;
        r = m >> shift;
        rem = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    {
        uint32_t r = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;          /* may carry into inf */
        return (uint16_t)(sign | r);
    }
}

static inline float ref_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, u;
    float f;
    if (exp == 0x1F) u = sign | 0x7F800000u | (mant << 13);
    else if (exp == 0) {
        if (mant == 0) u = sign;
        else {
            int e = -1;
            do { mant <<= 1; e++; } while (!(mant & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
        }
    } else u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    memcpy(&f, &u, 4);
    return f;
}

/* x[i] rounded through fp16 (dtype FA_F16) or bf16 (FA_BF16) storage and back, in place: the
   values a half-precision kernel really sees, to feed the reference. */
static inline void ref_round_to(fa_dtype dt, float *x, size_t n)
{
    size_t i;
    if (dt == FA_F16)
        for (i = 0; i < n; i++) x[i] = ref_f16_to_f32(ref_f32_to_f16(x[i]));
    else if (dt == FA_BF16)
        for (i = 0; i < n; i++) x[i] = ref_bf16_to_f32(ref_f32_to_bf16(x[i]));
}


/* ---- the reference backward ---------------------------------------------------------------- */

/* flashattn.h's forward (SEMANTICS) and backward (the fa_*_backward comment) in double on double
   inputs (q, k, v with p's strides, d_o with o's strides): *loss = sum over rows of dot(o_i,
   d_o_i), and, when dq is not NULL, the gradients of that loss, packed: dq [B][Hq][Sq][D], dk
   [B][Hkv][Sk][D], dv [B][Hkv][Sk][Dv] (dk and dv summed over the query heads of a kv head).
   Written from the definitions: P by a softmax of the visible scores, dS = P (dP - delta) times
   softcap's derivative 1 - tanh^2(s / softcap) at the scaled score s. Central differences of *loss
   check the gradients (test_reference_gradients). Returns 0 if out of memory. */
static inline int ref_backward_d(const fa_params *p, const double *q, const double *k, const double *v,
                                 const double *d_o, double *loss, double *dq, double *dk, double *dv)
{
    ref_dims d;
    double *s, *raw, *pr, *o;
    unsigned char *vis;
    int b, h, i, j, t;
    ref_dims_of(p, &d);
    s = (double *)malloc(((size_t)d.Sk + 1) * sizeof(double));
    raw = (double *)malloc(((size_t)d.Sk + 1) * sizeof(double));
    pr = (double *)malloc(((size_t)d.Sk + 1) * sizeof(double));
    o = (double *)malloc(((size_t)d.Dv + 1) * sizeof(double));
    vis = (unsigned char *)malloc((size_t)d.Sk + 1);
    if (!s || !raw || !pr || !o || !vis) {
        free(s); free(raw); free(pr); free(o); free(vis);
        return 0;
    }
    *loss = 0.0;
    if (dq) {
        memset(dq, 0, ((size_t)d.B * d.Hq * d.Sq * d.D + 1) * sizeof(double));
        memset(dk, 0, ((size_t)d.B * d.Hkv * d.Sk * d.D + 1) * sizeof(double));
        memset(dv, 0, ((size_t)d.B * d.Hkv * d.Sk * d.Dv + 1) * sizeof(double));
    }
    for (b = 0; b < d.B; b++)
        for (h = 0; h < d.Hq; h++) {
            int g = h / (d.Hq / d.Hkv);
            double slope = p->alibi_slopes ? (double)p->alibi_slopes[(int64_t)b * p->alibi_stride + h] : 0.0;
            for (i = 0; i < d.Sq; i++) {
                const double *qi = q + b * d.qs[0] + h * d.qs[1] + i * d.qs[2];
                const double *doi = d_o + b * d.os[0] + h * d.os[1] + i * d.os[2];
                int64_t diag = (int64_t)i + d.Sk - d.Sq;
                double mx = -INFINITY, sum = 0.0, delta = 0.0;
                int any = 0;
                for (j = 0; j < d.Sk; j++) {
                    const double *kj = k + b * d.ks[0] + g * d.ks[1] + j * d.ks[2];
                    double x = 0.0;
                    int hidden = 0;
                    for (t = 0; t < d.D; t++) x += qi[t] * kj[t];
                    x *= d.scale;
                    raw[j] = x;
                    if (p->softcap > 0.0f) x = p->softcap * tanh(x / p->softcap);
                    if (p->alibi_slopes) x -= slope * fabs((double)(diag - j));
                    if (p->bias) {
                        double bij = (double)p->bias[b * d.bs[0] + h * d.bs[1] + i * d.bs[2] + j * d.bs[3]];
                        x += bij;
                        if (bij == -INFINITY) hidden = 1;
                    }
                    if (p->causal && j > diag) hidden = 1;
                    if (p->window_left > 0 && j < diag - p->window_left) hidden = 1;
                    if (p->window_right > 0 && j > diag + p->window_right) hidden = 1;
                    vis[j] = (unsigned char)!hidden;
                    s[j] = x;
                    if (!hidden) {
                        any = 1;
                        if (x > mx) mx = x;
                    }
                }
                if (!any) continue;            /* no visible key: o = 0, no gradient */
                for (j = 0; j < d.Sk; j++) {
                    pr[j] = vis[j] ? exp(s[j] - mx) : 0.0;
                    sum += pr[j];
                }
                for (t = 0; t < d.Dv; t++) o[t] = 0.0;
                for (j = 0; j < d.Sk; j++) {
                    const double *vj = v + b * d.vs[0] + g * d.vs[1] + j * d.vs[2];
                    pr[j] /= sum;
                    if (vis[j]) for (t = 0; t < d.Dv; t++) o[t] += pr[j] * vj[t];
                }
                for (t = 0; t < d.Dv; t++) delta += o[t] * doi[t];
                *loss += delta;
                if (!dq) continue;
                for (j = 0; j < d.Sk; j++) {
                    const double *kj = k + b * d.ks[0] + g * d.ks[1] + j * d.ks[2];
                    const double *vj = v + b * d.vs[0] + g * d.vs[1] + j * d.vs[2];
                    double dp = 0.0, ds, th;
                    double *dqi = dq + (((size_t)b * d.Hq + h) * d.Sq + i) * d.D;
                    double *dkj = dk + (((size_t)b * d.Hkv + g) * d.Sk + j) * d.D;
                    double *dvj = dv + (((size_t)b * d.Hkv + g) * d.Sk + j) * d.Dv;
                    if (!vis[j]) continue;
                    for (t = 0; t < d.Dv; t++) dp += doi[t] * vj[t];
                    ds = pr[j] * (dp - delta);
                    if (p->softcap > 0.0f) {
                        th = tanh(raw[j] / p->softcap);
                        ds *= 1.0 - th * th;
                    }
                    for (t = 0; t < d.D; t++) {
                        dqi[t] += d.scale * ds * kj[t];
                        dkj[t] += d.scale * ds * qi[t];
                    }
                    for (t = 0; t < d.Dv; t++) dvj[t] += pr[j] * doi[t];
                }
            }
        }
    free(s); free(raw); free(pr); free(o); free(vis);
    return 1;
}

static inline double *ref_to_double(const float *x, size_t n)
{
    double *y = (double *)malloc((n ? n : 1) * sizeof(double));
    size_t i;
    if (y) for (i = 0; i < n; i++) y[i] = (double)x[i];
    return y;
}

/* The gradients for fp32 inputs (q, k, v with p's strides, d_o with o's), rounded to fp32,
   packed as ref_backward_d's. Returns 0 if out of memory. */
static inline int ref_attention_backward(const fa_params *p, const float *q, const float *k, const float *v,
                                         const float *d_o, float *dq, float *dk, float *dv)
{
    ref_dims d;
    size_t nq = ref_tensor_elems(p, REF_Q), nk = ref_tensor_elems(p, REF_K), nv = ref_tensor_elems(p, REF_V);
    size_t no = ref_tensor_elems(p, REF_O), ndq, ndk, ndv, i;
    double *qd, *kd, *vd, *dod, *gq, *gk, *gv, loss;
    int ok;
    ref_dims_of(p, &d);
    ndq = (size_t)d.B * d.Hq * d.Sq * d.D; ndk = (size_t)d.B * d.Hkv * d.Sk * d.D; ndv = (size_t)d.B * d.Hkv * d.Sk * d.Dv;
    qd = ref_to_double(q, nq); kd = ref_to_double(k, nk); vd = ref_to_double(v, nv); dod = ref_to_double(d_o, no);
    gq = (double *)malloc((ndq + 1) * sizeof(double)); gk = (double *)malloc((ndk + 1) * sizeof(double));
    gv = (double *)malloc((ndv + 1) * sizeof(double));
    ok = qd && kd && vd && dod && gq && gk && gv && ref_backward_d(p, qd, kd, vd, dod, &loss, gq, gk, gv);
    if (ok) {
        for (i = 0; i < ndq; i++) dq[i] = (float)gq[i];
        for (i = 0; i < ndk; i++) dk[i] = (float)gk[i];
        for (i = 0; i < ndv; i++) dv[i] = (float)gv[i];
    }
    free(qd); free(kd); free(vd); free(dod); free(gq); free(gk); free(gv);
    return ok;
}

/* A strided [n0][n1][n2][width] tensor's rows copied into packed form. */
static inline void ref_gather(const float *x, int64_t n0, int64_t n1, int64_t n2, int width, const int64_t st[3],
                              float *packed)
{
    int64_t a, b, c;
    for (a = 0; a < n0; a++)
        for (b = 0; b < n1; b++)
            for (c = 0; c < n2; c++)
                memcpy(packed + ((a * n1 + b) * n2 + c) * width, x + a * st[0] + b * st[1] + c * st[2],
                       (size_t)width * sizeof(float));
}

/* 1 when every element of a strided tensor's buffer (n_elems) outside its rows holds the poison. */
static inline int ref_gaps_untouched(const float *x, size_t n_elems, int64_t n0, int64_t n1, int64_t n2, int width,
                                     const int64_t st[3])
{
    unsigned char *in_row = (unsigned char *)calloc(n_elems ? n_elems : 1, 1);
    int64_t a, b, c;
    size_t e;
    int ok = 1;
    if (!in_row) return 0;
    for (a = 0; a < n0; a++)
        for (b = 0; b < n1; b++)
            for (c = 0; c < n2; c++) {
                size_t at = (size_t)(a * st[0] + b * st[1] + c * st[2]);
                if (at + (size_t)width <= n_elems) memset(in_row + at, 1, (size_t)width);
            }
    for (e = 0; e < n_elems && ok; e++)
        if (!in_row[e] && !ref_is_poison(x + e, sizeof(float))) ok = 0;
    free(in_row);
    return ok;
}

#endif /* FLASHATTN_TESTS_REF_H */
