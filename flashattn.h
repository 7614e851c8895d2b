/* flashattn.h - v0.1.0 - exact attention kernels in one header - MIT licence (end of file)

   A naive attention that materialises the Sq x Sk score matrix (GEMMs through OpenBLAS) and a
   tiled online-softmax attention that never does (K/V walked in blocks with a running max m, a
   running normaliser l and the rescale alpha = exp(m_old - m_new)). Both compute the same function,
   exactly, in fp32; a CUDA backend with the same API on device pointers sits behind FLASHATTN_CUDA.

   USAGE

       #include "flashattn.h"              // declarations, in as many files as you like

       #define FLASHATTN_IMPLEMENTATION     // in exactly ONE C or C++ file
       #include "flashattn.h"

       fa_params p = {0};                   // zero means "the default" everywhere
       p.batch = 2; p.heads = 8; p.seq_q = 512; p.seq_k = 512; p.head_dim = 64;
       fa_status st = fa_tiled(&p, q, k, v, o);   // q,k,v,o: packed [B][H][S][D] fp32
       if (st != FA_OK) fprintf(stderr, "%s\n", fa_status_string(st));

   Build with plain `cc -O2 ... -lopenblas -lm -lpthread` (`-lm -lpthread` under FLASHATTN_NO_BLAS).
   No -march flag is needed: the SIMD path of the running CPU is chosen at run time.

   OPTIONS (define before including)

       FLASHATTN_IMPLEMENTATION   compile the implementation into this translation unit
       FLASHATTN_STATIC           every function gets internal linkage (static)
       FLASHATTN_NO_BLAS          no OpenBLAS: the naive path uses the header's own loops; the
                                  header then needs only libc, libm and POSIX threads
       FLASHATTN_CUDA             declare the fa_cuda_* functions; see CUDA below
       FLASHATTN_MALLOC(n)        every host allocation goes through these two
       FLASHATTN_FREE(p)          (define both or neither)

   SEMANTICS (b batch, h query head, g = h / (Hq/Hkv) its kv head, i query row, j key)

       d    = i + Sk - Sq                            query i's diagonal in key space
       s_ij = scale * dot(q_i, k_j)                   scale 0 means 1/sqrt(head_dim)
       s_ij = softcap * tanh(s_ij / softcap)          if softcap > 0
       s_ij = s_ij - slope[b][h] * |d - j|            if alibi_slopes
       s_ij = s_ij + bias[b][h][i][j]                 if bias (-INFINITY hides the key)
       hidden when causal && j > d, window_left > 0 && j < d - window_left,
                   window_right > 0 && j > d + window_right
       o_i   = sum_j softmax(s_i)_j v_j over visible keys,  lse_i = log sum_j exp(s_ij)
       A row with no visible key gets o_i = 0 and lse_i = -INFINITY, never NaN.

   Layout: strides in elements for {batch, head, token}, the feature dim contiguous; all three zero
   means packed [B][H][S][D]; [B][S][H][D] is {S*H*D, D, H*D}. GQA/MQA through kv_heads.
   bias_stride is {batch, head, query, key}: all zero means packed [B][Hq][Sq][Sk], otherwise a zero
   stride broadcasts that axis ([B][Sk] key padding is {Sk, 0, 0, 1}). alibi_slopes is [Hq], or
   [B][Hq] with alibi_stride = Hq.

   MEMORY: fa_naive allocates the whole [B][Hq][Sq][Sk] fp32 score matrix, as the textbook does, and
   returns FA_ERR_NO_MEMORY when it cannot. fa_tiled allocates O(threads x tile), never O(Sq x Sk).
   fa_*_workspace_bytes return exactly what the call will allocate.

   THREADS: `threads` workers (0: all online cores) share batch x heads x query tiles; with few query
   rows (decoding) the key axis is split too and the parts merged by log-sum-exp (fa_merge's rule).
   The naive path runs its GEMMs inside its own workers with OpenBLAS single-threaded, so the call
   uses exactly `threads` threads; it sets OpenBLAS's thread count to 1 for the call and restores it.

   ERRORS: every request is validated before any output is written; on any status other than FA_OK,
   o, lse and scores are untouched. No global mutable state: concurrent calls are safe.

   CUDA: compile one .cu file with nvcc, FLASHATTN_IMPLEMENTATION and FLASHATTN_CUDA defined. It
   provides fa_cuda_* (device pointers, same meanings, stream honoured). The CPU functions it also
   carries are weak symbols, so the same program can link a C file that has its own
   FLASHATTN_IMPLEMENTATION, and call fa_tiled and fa_cuda_tiled side by side, with no duplicates.
*/
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 1
#define FLASHATTN_VERSION_PATCH 0

#ifdef FLASHATTN_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define FLASHATTN_DEF static __attribute__((unused))  /* a file that calls part of the API builds -Werror clean */
#else
#define FLASHATTN_DEF static
#endif
#else
#define FLASHATTN_DEF extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fa_status {
    FA_OK = 0,
    FA_ERR_INVALID_ARG,   /* a required pointer is NULL, a size is out of range, heads % kv_heads != 0, ... */
    FA_ERR_NO_MEMORY,     /* an allocation failed, or a byte count would overflow size_t */
    FA_ERR_UNSUPPORTED,   /* valid, but this build or backend cannot serve it (a dtype, a head_dim limit) */
    FA_ERR_DEVICE         /* the CUDA runtime reported an error */
} fa_status;

typedef enum fa_dtype { FA_F32 = 0, FA_F16 = 1, FA_BF16 = 2 } fa_dtype;

typedef struct fa_params {
    /* shape: required, except where 0 means a default */
    int batch;        /* B >= 1 */
    int heads;        /* Hq >= 1, query heads */
    int kv_heads;     /* Hkv: 0 means heads; heads % kv_heads == 0 (GQA/MQA) */
    int seq_q;        /* Sq >= 0 */
    int seq_k;        /* Sk >= 0 */
    int head_dim;     /* D >= 1, of q and k */
    int head_dim_v;   /* Dv: 0 means head_dim; of v and o */
    /* layout: strides in elements for {batch, head, token}; the feature dim is contiguous.
       All three zero means packed [B][H][S][D]. [B][S][H][D] is {S*H*D, D, H*D}. */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    fa_dtype dtype;   /* storage type of q, k, v, o; arithmetic accumulates in fp32 */
    float scale;      /* 0 means 1/sqrt(head_dim) */
    int causal;       /* nonzero: bottom-right aligned causal mask */
    float *lse;       /* optional output, packed [B][Hq][Sq] fp32 */
    int block_q, block_k; /* tile sizes of the tiled kernel; 0 means the library's choice */
    int threads;      /* CPU worker threads; 0 means all online cores */
    void *stream;     /* CUDA backend: a cudaStream_t; 0 means the default stream */
    /* score modifiers and masks; all zero means off */
    int window_left, window_right;   /* sliding window, 0 means unbounded on that side */
    float softcap;                   /* > 0: s = softcap * tanh(s / softcap) */
    const float *alibi_slopes;       /* [Hq] fp32, or [B][Hq] when alibi_stride = Hq */
    int64_t alibi_stride;            /* elements between batches of slopes; 0: one [Hq] row for all */
    const float *bias;               /* additive fp32 bias, -INFINITY hides a key */
    int64_t bias_stride[4];          /* elements for {batch, head, query, key}; all zero means packed
                                        [B][Hq][Sq][Sk]; otherwise a zero stride broadcasts that axis */
} fa_params;

/* The textbook path: scores (optional, packed [B][Hq][Sq][Sk] fp32, scaled and modified, -INFINITY
   where hidden) are materialised in full. */
FLASHATTN_DEF fa_status fa_naive(const fa_params *p, const void *q, const void *k, const void *v,
                                 void *o, float *scores);
/* The online-softmax path: O(threads x tile) memory. */
FLASHATTN_DEF fa_status fa_tiled(const fa_params *p, const void *q, const void *k, const void *v, void *o);
/* Peak bytes the call allocates for p (0 if none or p is invalid, SIZE_MAX if it overflows). */
FLASHATTN_DEF size_t fa_naive_workspace_bytes(const fa_params *p);
FLASHATTN_DEF size_t fa_tiled_workspace_bytes(const fa_params *p);
/* A fixed, non-NULL sentence for every value, unknown ones included. */
FLASHATTN_DEF const char *fa_status_string(fa_status s);
/* torch.allclose: every |a-b| <= atol + rtol*|b|; a NaN anywhere fails. */
FLASHATTN_DEF int fa_allclose(const float *a, const float *b, size_t n, float rtol, float atol);
FLASHATTN_DEF double fa_max_abs_diff(const float *a, const float *b, size_t n);
/* lse = log(sum_p exp(lse_p)), o = sum_p exp(lse_p - lse) * o_p; parts packed [rows][dv]. */
FLASHATTN_DEF fa_status fa_merge(int rows, int dv, int parts, const float *const *o_parts,
                                 const float *const *lse_parts, float *o, float *lse);

#ifdef FLASHATTN_CUDA   /* device pointers; same meanings */
FLASHATTN_DEF fa_status fa_cuda_naive(const fa_params *p, const void *q, const void *k, const void *v,
                                      void *o, float *scores);
FLASHATTN_DEF fa_status fa_cuda_tiled(const fa_params *p, const void *q, const void *k, const void *v, void *o);
FLASHATTN_DEF fa_status fa_cuda_merge(int rows, int dv, int parts, const float *const *o_parts,
                                      const float *const *lse_parts, float *o, float *lse);
#endif

#ifdef __cplusplus
}
#endif
#endif /* FLASHATTN_H */

/* ---- stop here if you only want the API ------------------------------------------------------ */

#ifdef FLASHATTN_IMPLEMENTATION
#ifndef FLASHATTN__IMPLEMENTATION_DONE
#define FLASHATTN__IMPLEMENTATION_DONE

#if defined(FLASHATTN_MALLOC) != defined(FLASHATTN_FREE)
#error "flashattn.h: define both FLASHATTN_MALLOC and FLASHATTN_FREE, or neither"
#endif
#ifndef FLASHATTN_MALLOC
#include <stdlib.h>
#define FLASHATTN_MALLOC(n) malloc(n)
#define FLASHATTN_FREE(p) free(p)
#endif

#include <math.h>
#include <string.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#ifndef FLASHATTN_NO_BLAS
#include <cblas.h>
#endif

/* The CPU functions of a CUDA translation unit are weak, so that a C file with its own
   FLASHATTN_IMPLEMENTATION can be linked into the same program without duplicate symbols. */
#if defined(__CUDACC__) && defined(FLASHATTN_CUDA) && !defined(FLASHATTN_STATIC)
#define FLASHATTN__CPU_DEF __attribute__((weak))
#else
#define FLASHATTN__CPU_DEF FLASHATTN_DEF
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================== */
/* 1. Common to every backend: statuses, comparisons, the request resolved and validated          */
/* ============================================================================================== */

FLASHATTN__CPU_DEF const char *fa_status_string(fa_status s)
{
    switch (s) {
    case FA_OK: return "success";
    case FA_ERR_INVALID_ARG: return "invalid argument: a required pointer is NULL or a size, stride or option is out of range";
    case FA_ERR_NO_MEMORY: return "out of memory: an allocation failed or a byte count would overflow size_t";
    case FA_ERR_UNSUPPORTED: return "unsupported: the request is valid but this build or backend cannot serve it";
    case FA_ERR_DEVICE: return "device error: the CUDA runtime reported an error";
    }
    return "unknown fa_status value";
}

FLASHATTN__CPU_DEF int fa_allclose(const float *a, const float *b, size_t n, float rtol, float atol)
{
    size_t i;
    if (n == 0) return 1;
    if (!a || !b) return 0;
    for (i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if (x == y) continue;                       /* equal infinities are close, as in torch */
        if (x != x || y != y) return 0;             /* NaN fails */
        /* unequal with an infinity: never close (torch needs a finite error), whatever rtol */
        if (fabs(x - y) == INFINITY || !(fabs(x - y) <= (double)atol + (double)rtol * fabs(y))) return 0;
    }
    return 1;
}

FLASHATTN__CPU_DEF double fa_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    size_t i;
    if (n == 0) return 0.0;
    if (!a || !b) return (double)NAN;
    for (i = 0; i < n; i++) {
        double x = a[i], y = b[i], d;
        if (x == y) continue;
        d = fabs(x - y);
        if (d != d) return (double)NAN;
        if (d > m) m = d;
    }
    return m;
}

/* The request with every default filled in, in one place. */
typedef struct fa__dims {
    int B, Hq, Hkv, group, Sq, Sk, D, Dv;
    int64_t qs[3], ks[3], vs[3], os[3], bs[4];
    fa_dtype dtype;
    float scale, softcap;
    int causal, wl, wr;
    const float *alibi, *bias;
    int64_t alibi_stride;
    float *lse;
    int block_q, block_k, threads;
    void *stream;
} fa__dims;

/* a*b into *r, 0 on int64 overflow (operands non-negative). */
static int fa__mul64(int64_t a, int64_t b, int64_t *r)
{
    if (a != 0 && b > INT64_MAX / a) return 0;
    *r = a * b;
    return 1;
}

/* Packed strides {n1*n2*n3, n2*n3, n3} for an [n0][n1][n2][n3] tensor; 0 on overflow. */
static int fa__packed3(int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t st[3])
{
    int64_t a, b, c;
    if (!fa__mul64(n2, n3, &a) || !fa__mul64(n1, a, &b) || !fa__mul64(n0, b, &c)) return 0;
    st[0] = b; st[1] = a; st[2] = n3;
    return 1;
}

static int fa__zero3(const int64_t s[3]) { return s[0] == 0 && s[1] == 0 && s[2] == 0; }

/* Resolves and validates everything a backend-independent check can see. Pointers to q, k, v, o
   are required only for tensors that are not empty. */
static fa_status fa__resolve(const fa_params *p, const void *q, const void *k, const void *v,
                             const void *o, fa__dims *d)
{
    int i;
    if (!p) return FA_ERR_INVALID_ARG;
    memset(d, 0, sizeof *d);
    if (p->batch < 1 || p->heads < 1 || p->kv_heads < 0 || p->seq_q < 0 || p->seq_k < 0 ||
        p->head_dim < 1 || p->head_dim_v < 0)
        return FA_ERR_INVALID_ARG;
    d->B = p->batch; d->Hq = p->heads; d->Hkv = p->kv_heads ? p->kv_heads : p->heads;
    if (d->Hkv > d->Hq || d->Hq % d->Hkv != 0) return FA_ERR_INVALID_ARG;
    d->group = d->Hq / d->Hkv;
    d->Sq = p->seq_q; d->Sk = p->seq_k; d->D = p->head_dim;
    d->Dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    if (p->dtype != FA_F32 && p->dtype != FA_F16 && p->dtype != FA_BF16) return FA_ERR_INVALID_ARG;
    d->dtype = p->dtype;
    if (p->scale != p->scale || fabsf(p->scale) > 3.0e38f) return FA_ERR_INVALID_ARG;  /* NaN, inf */
    d->scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
    if (!(p->softcap >= 0.0f) || p->softcap > 3.0e38f) return FA_ERR_INVALID_ARG;
    d->softcap = p->softcap;
    if (p->block_q < 0 || p->block_k < 0 || p->threads < 0) return FA_ERR_INVALID_ARG;
    if (p->window_left < 0 || p->window_right < 0 || p->alibi_stride < 0) return FA_ERR_INVALID_ARG;
    d->causal = p->causal != 0; d->wl = p->window_left; d->wr = p->window_right;
    d->alibi = p->alibi_slopes; d->alibi_stride = p->alibi_slopes ? p->alibi_stride : 0;
    d->bias = p->bias; d->lse = p->lse;
    d->block_q = p->block_q; d->block_k = p->block_k; d->threads = p->threads; d->stream = p->stream;

    /* strides: all zero means packed */
    if (!fa__packed3(d->B, d->Hq, d->Sq, d->D, d->qs) || !fa__packed3(d->B, d->Hkv, d->Sk, d->D, d->ks) ||
        !fa__packed3(d->B, d->Hkv, d->Sk, d->Dv, d->vs) || !fa__packed3(d->B, d->Hq, d->Sq, d->Dv, d->os))
        return FA_ERR_INVALID_ARG;
    if (!fa__zero3(p->q_stride)) memcpy(d->qs, p->q_stride, sizeof d->qs);
    if (!fa__zero3(p->k_stride)) memcpy(d->ks, p->k_stride, sizeof d->ks);
    if (!fa__zero3(p->v_stride)) memcpy(d->vs, p->v_stride, sizeof d->vs);
    if (!fa__zero3(p->o_stride)) {
        /* o is written: every axis with more than one index needs a positive stride, and a token
           row must not overlap the next one */
        const int64_t n[3] = { d->B, d->Hq, d->Sq };
        for (i = 0; i < 3; i++)
            if (p->o_stride[i] < 0 || (n[i] > 1 && p->o_stride[i] == 0)) return FA_ERR_INVALID_ARG;
        if (d->Sq > 1 && p->o_stride[2] < d->Dv) return FA_ERR_INVALID_ARG;
        memcpy(d->os, p->o_stride, sizeof d->os);
    }
    if (p->bias) {
        if (p->bias_stride[0] == 0 && p->bias_stride[1] == 0 && p->bias_stride[2] == 0 &&
            p->bias_stride[3] == 0) {
            if (!fa__packed3(d->B, d->Hq, d->Sq, d->Sk, d->bs)) return FA_ERR_INVALID_ARG;
            d->bs[3] = 1;
        } else {
            memcpy(d->bs, p->bias_stride, sizeof d->bs);
        }
    }
    if (d->Sq > 0) {
        if (!q || !o) return FA_ERR_INVALID_ARG;
        if (d->Sk > 0 && (!k || !v)) return FA_ERR_INVALID_ARG;
    }
    return FA_OK;
}

/* Keys visible to query row i by the position rules (causal, window), as [lo, hi). */
static void fa__key_range(const fa__dims *d, int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t diag = i + d->Sk - d->Sq, a = 0, b = d->Sk;
    if (d->wl > 0 && diag - d->wl > a) a = diag - d->wl;
    if (d->causal && diag + 1 < b) b = diag + 1;
    if (d->wr > 0 && diag + d->wr + 1 < b) b = diag + d->wr + 1;
    if (a > d->Sk) a = d->Sk;
    if (b < a) b = a;
    *lo = a; *hi = b;
}

/* Keys visible to some row of [i0, i1) as [lo, hi), and whether every (row, key) pair of the
   rectangle rows x [k0, k1) is visible by the position rules (so no mask is needed there). */
static void fa__rows_range(const fa__dims *d, int64_t i0, int64_t i1, int64_t *lo, int64_t *hi)
{
    int64_t a0, b0, a1, b1;
    fa__key_range(d, i0, &a0, &b0);
    fa__key_range(d, i1 - 1, &a1, &b1);
    *lo = a0 < a1 ? a0 : a1;
    *hi = b0 > b1 ? b0 : b1;
    if (*hi < *lo) *hi = *lo;
}

static int fa__block_unmasked(const fa__dims *d, int64_t i0, int64_t i1, int64_t k0, int64_t k1)
{
    int64_t a0, b0, a1, b1;
    fa__key_range(d, i0, &a0, &b0);
    fa__key_range(d, i1 - 1, &a1, &b1);
    /* lo and hi are non-decreasing in i, so the first row bounds hi and the last bounds lo */
    return a1 <= k0 && k1 <= b0;
}

/* ============================================================================================== */
/* 2. CPU: the score modifiers and the mask, written once, used by every CPU path                  */
/* ============================================================================================== */

static int fa__has_modifiers(const fa__dims *d)
{
    return d->softcap > 0.0f || d->alibi != NULL || d->bias != NULL;
}

/* Steps 2-5 of the contract on the scaled scores of row i, keys j0..j0+n, held at s[t * stride]
   (stride 1 for a row-major score row, the tile width for the tiled path's transposed tile):
   softcap, ALiBi, bias, then -INFINITY where hidden. With mask == 0 the position rules are skipped
   (the caller knows every key of the block is visible). */
static void fa__modify_row(const fa__dims *d, int b, int h, int64_t i, int64_t j0, int n,
                           float *s, int64_t stride, int mask)
{
    int t;
    int64_t diag = i + d->Sk - d->Sq;
    if (d->softcap > 0.0f) {
        float c = d->softcap, ic = 1.0f / d->softcap;
        for (t = 0; t < n; t++) s[t * stride] = c * tanhf(s[t * stride] * ic);
    }
    if (d->alibi) {
        float slope = d->alibi[(int64_t)b * d->alibi_stride + h];
        for (t = 0; t < n; t++) {
            int64_t dist = diag - (j0 + t);
            s[t * stride] -= slope * (float)(dist < 0 ? -dist : dist);
        }
    }
    if (d->bias) {
        const float *br = d->bias + (int64_t)b * d->bs[0] + (int64_t)h * d->bs[1] + i * d->bs[2];
        int64_t ks = d->bs[3];
        for (t = 0; t < n; t++) {   /* -INFINITY hides the key, even where the score is NaN */
            float x = br[(j0 + t) * ks];
            s[t * stride] = x == -INFINITY ? x : s[t * stride] + x;
        }
    }
    if (mask) {
        int64_t lo, hi, a, e;
        fa__key_range(d, i, &lo, &hi);
        /* visible keys are the run [lo, hi): hide the two ends of the block around it */
        a = lo - j0 < n ? lo - j0 : n;
        e = hi - j0 > 0 ? hi - j0 : 0;
        if (e < a) e = a;
        for (t = 0; t < (int)a; t++) s[t * stride] = -INFINITY;
        for (t = (int)e; t < n; t++) s[t * stride] = -INFINITY;
    }
}

/* ============================================================================================== */
/* 3. CPU: vector math                                                                            */
/* ============================================================================================== */

/* exp(x) for x <= 0 (and -inf, giving 0), accurate to a few ulp: 2^k * p(r) with a degree-6
   polynomial on |r| <= ln2/2. Written so that compilers vectorise the loops that call it. */
static inline float fa__expf(float x)
{
    const float log2e = 1.44269504088896341f, ln2hi = 0.693359375f, ln2lo = -2.12194440e-4f;
    float kf, r, p;
    int32_t ki;
    union { int32_t i; float f; } u;
    if (x != x) return x;                  /* NaN stays NaN */
    if (x < -104.0f) x = -104.0f;          /* exp(-104) is below the smallest denormal: 0 after */
    if (x > 88.0f) x = 88.0f;
    kf = floorf(x * log2e + 0.5f);
    r = x - kf * ln2hi;
    r = r - kf * ln2lo;
    p = 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    ki = (int32_t)kf;
    /* split the exponent so that 2^k is representable down to k = -150 */
    u.i = (ki / 2 + 127) << 23; p *= u.f;
    u.i = ((ki - ki / 2) + 127) << 23; p *= u.f;
    return p;
}

/* s[t] = exp(s[t] - m); returns the sum. m must be finite. */
static float fa__exp_sum_c(float *s, int n, float m)
{
    float sum = 0.0f;
    int t;
    for (t = 0; t < n; t++) {
        float e = s[t] == -INFINITY ? 0.0f : fa__expf(s[t] - m);
        s[t] = e;
        sum += e;
    }
    return sum;
}

/* max that lets NaN through, so that a NaN row stays NaN */
static float fa__row_max_c(const float *s, int n, float m)
{
    int t;
    for (t = 0; t < n; t++)
        if (!(s[t] <= m)) m = s[t];
    return m;
}

/* SIMD. The running CPU picks the path at every call (no -march needed, no state kept):
   2 = AVX-512F, 1 = AVX2+FMA, 0 = portable C. Defining FLASHATTN_ISA to 0, 1 or 2 caps it (tests).
   The x86 kernels are functions with target attributes, so plain -O2 builds still get them. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(FLASHATTN_NO_SIMD)
#define FLASHATTN__X86 1
#ifdef __cplusplus
}
#endif
#include <immintrin.h>
#ifdef __cplusplus
extern "C" {
#endif
#define FA__AVX512 __attribute__((target("avx512f")))
#define FA__AVX2 __attribute__((target("avx2,fma")))
/* vmaxps/vminps through the zero-masked forms: g++ 12 warns on the plain intrinsics' undefined
   pass-through operand. Either returns its second operand when one is NaN. */
#define fa__max16(a, b) _mm512_maskz_max_ps((__mmask16)0xFFFF, (a), (b))
#define fa__min16(a, b) _mm512_maskz_min_ps((__mmask16)0xFFFF, (a), (b))
#endif

static int fa__isa(void)
{
    int isa = 0;
#ifdef FLASHATTN__X86
    if (__builtin_cpu_supports("avx512f")) isa = 2;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa = 1;
#endif
#ifdef FLASHATTN_ISA
    if (isa > FLASHATTN_ISA) isa = FLASHATTN_ISA;
#endif
    return isa;
}

/* The exp coefficients of fa__expf, shared by every path. */
#define FA__EXP_C6 1.3981999507e-3f
#define FA__EXP_C5 8.3334519073e-3f
#define FA__EXP_C4 4.1665795894e-2f
#define FA__EXP_C3 1.6666665459e-1f
#define FA__EXP_C2 5.0000001201e-1f
#define FA__LOG2E 1.44269504088896341f
#define FA__LN2HI 0.693359375f
#define FA__LN2LO (-2.12194440e-4f)

#ifdef FLASHATTN__X86
/* exp on 16 lanes, fa__expf's method: x clamped to [-104, 88] (NaN passes: max/min return their
   second operand on NaN), k = round(x log2e), r = x - k ln2 in two parts, 2^k by vscalefps, which
   rounds the denormal range correctly and gives exactly 0 below exp(-104). */
FA__AVX512 static inline __m512 fa__exp16(__m512 x)
{
    __m512 k, r, p;
    x = fa__max16(_mm512_set1_ps(-104.0f), x);
    x = fa__min16(_mm512_set1_ps(88.0f), x);
    k = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(x, _mm512_set1_ps(FA__LOG2E)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(FA__LN2HI), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(FA__LN2LO), r);
    p = _mm512_set1_ps(FA__EXP_C6);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FA__EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FA__EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FA__EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FA__EXP_C2));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps(0xFFFF, p, k);
}

/* The same on 8 lanes; 2^k as two halves multiplied in, as fa__expf does (no denormal exponent). */
FA__AVX2 static inline __m256 fa__exp8(__m256 x)
{
    __m256 k, r, p;
    __m256i ki, k1, k2;
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
    k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(FA__LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(FA__LN2HI), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(FA__LN2LO), r);
    p = _mm256_set1_ps(FA__EXP_C6);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FA__EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FA__EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FA__EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FA__EXP_C2));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    ki = _mm256_cvtps_epi32(k);
    k1 = _mm256_srai_epi32(ki, 1);
    k2 = _mm256_sub_epi32(ki, k1);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23)));
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23)));
}

FA__AVX512 static float fa__exp_sum_avx512(float *s, int n, float m)
{
    __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps(), e;
    int t;
    for (t = 0; t + 16 <= n; t += 16) {
        e = fa__exp16(_mm512_sub_ps(_mm512_loadu_ps(s + t), vm));
        _mm512_storeu_ps(s + t, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (t < n) {
        __mmask16 k = (__mmask16)((1u << (n - t)) - 1u);
        e = fa__exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), vm));
        _mm512_mask_storeu_ps(s + t, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    {
        float buf[16];
        int u;
        _mm512_storeu_ps(buf, acc);
        for (u = 1; u < 16; u++) buf[0] += buf[u];
        return buf[0];
    }
}

FA__AVX2 static float fa__exp_sum_avx2(float *s, int n, float m)
{
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps(), e;
    float buf[8];
    int t, u;
    for (t = 0; t + 8 <= n; t += 8) {
        e = fa__exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
        _mm256_storeu_ps(s + t, e);
        acc = _mm256_add_ps(acc, e);
    }
    _mm256_storeu_ps(buf, acc);
    for (; t < n; t++) {
        s[t] = s[t] == -INFINITY ? 0.0f : fa__expf(s[t] - m);
        buf[0] += s[t];
    }
    for (u = 1; u < 8; u++) buf[0] += buf[u];
    return buf[0];
}
#endif

#ifdef FLASHATTN__X86
FA__AVX512 static float fa__row_max_avx512(const float *s, int n, float m)
{
    __m512 acc = _mm512_set1_ps(m);
    int t;
    for (t = 0; t + 16 <= n; t += 16) acc = fa__max16(acc, _mm512_loadu_ps(s + t));
    if (t < n) {
        __mmask16 k = (__mmask16)((1u << (n - t)) - 1u);
        acc = _mm512_mask_max_ps(acc, k, acc, _mm512_maskz_loadu_ps(k, s + t));
    }
    {
        float buf[16];
        _mm512_storeu_ps(buf, acc);
        return fa__row_max_c(buf, 16, m);
    }
}

FA__AVX512 static void fa__scale_avx512(float *s, int n, float c)
{
    __m512 vc = _mm512_set1_ps(c);
    int t;
    for (t = 0; t + 16 <= n; t += 16) _mm512_storeu_ps(s + t, _mm512_mul_ps(_mm512_loadu_ps(s + t), vc));
    for (; t < n; t++) s[t] *= c;
}

FA__AVX2 static float fa__row_max_avx2(const float *s, int n, float m)
{
    __m256 acc = _mm256_set1_ps(m);
    float buf[8];
    int t;
    for (t = 0; t + 8 <= n; t += 8) acc = _mm256_max_ps(acc, _mm256_loadu_ps(s + t));
    _mm256_storeu_ps(buf, acc);
    return fa__row_max_c(s + t, n - t, fa__row_max_c(buf, 8, m));
}

FA__AVX2 static void fa__scale_avx2(float *s, int n, float c)
{
    __m256 vc = _mm256_set1_ps(c);
    int t;
    for (t = 0; t + 8 <= n; t += 8) _mm256_storeu_ps(s + t, _mm256_mul_ps(_mm256_loadu_ps(s + t), vc));
    for (; t < n; t++) s[t] *= c;
}
#endif

/* s[t] = exp(s[t] - m) (0 for -INFINITY), returns the sum; m must be finite. */
static float fa__exp_sum(int isa, float *s, int n, float m)
{
#ifdef FLASHATTN__X86
    if (isa == 2) return fa__exp_sum_avx512(s, n, m);
    if (isa == 1) return fa__exp_sum_avx2(s, n, m);
#endif
    (void)isa;
    return fa__exp_sum_c(s, n, m);
}

/* A softmax of one score row in place; returns its lse. A row with no visible key (max -INFINITY)
   becomes zeros, lse -INFINITY; a NaN anywhere in the row makes the row NaN. */
static float fa__softmax_row(int isa, float *s, int n)
{
    float m, sum, inv;
    int t;
#ifdef FLASHATTN__X86
    if (isa == 2) m = fa__row_max_avx512(s, n, -INFINITY);
    else if (isa == 1) m = fa__row_max_avx2(s, n, -INFINITY);
    else
#endif
    m = fa__row_max_c(s, n, -INFINITY);
    if (m == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof(float));
        return -INFINITY;
    }
    sum = fa__exp_sum(isa, s, n, m);
    inv = 1.0f / sum;
#ifdef FLASHATTN__X86
    if (isa == 2) fa__scale_avx512(s, n, inv);
    else if (isa == 1) fa__scale_avx2(s, n, inv);
    else
#endif
    for (t = 0; t < n; t++) s[t] *= inv;
    return m + logf(sum);
}

/* ---- The tiled path's microkernels ---------------------------------------------------------
   The tiled path keeps its tiles transposed, with query rows along the SIMD lanes: Qt [D][ld],
   St [block_k][ld] (scores, then probabilities), Ot [Dv][ld] (the accumulator), ld a multiple of 16.
   Both products are then one shape, C[a][:] (+)= sum_x A(a, x) * B[x][:] over nv 16-lane vectors:
     scores  St[j][:]  = sum_t K[j][t] * Qt[t][:]   (A = K rows: sa = key stride, sx = 1)
     output  Ot[t][:] += sum_j V[j][t] * St[j][:]   (A = V columns: sa = 1, sx = value stride)
   acc: 0 C =, 1 C +=, 2 C += leaving lanes whose B is 0 untouched (blocks with hidden keys: a
   NaN or inf in a hidden key's V must reach no row, and 0 * NaN is NaN).
   A is read as broadcast scalars straight from the caller's K and V (any stride, no packing), B
   and C are contiguous lane vectors; a register block is 8 A-rows x 48 lanes (AVX-512) or
   6 x 16 (AVX2). The max, exp and rescale of the online softmax are vertical, one lane per row. */
#ifdef FLASHATTN__X86
#define FA__Z3(a) __m512 c##a##0 = _mm512_setzero_ps(), c##a##1 = c##a##0, c##a##2 = c##a##0
#define FA__L3(a) __m512 c##a##0 = _mm512_loadu_ps(C + ra[a] * ldc), c##a##1 = _mm512_loadu_ps(C + ra[a] * ldc + 16), \
                         c##a##2 = _mm512_loadu_ps(C + ra[a] * ldc + 32)
#define FA__F3(a) do { __m512 w_ = _mm512_set1_ps(pa[a][off]); c##a##0 = _mm512_fmadd_ps(w_, b0, c##a##0); \
                       c##a##1 = _mm512_fmadd_ps(w_, b1, c##a##1); c##a##2 = _mm512_fmadd_ps(w_, b2, c##a##2); } while (0)
#define FA__S3(a) do { if (a < na - a0) { _mm512_storeu_ps(C + (a0 + a) * ldc, c##a##0); \
                       _mm512_storeu_ps(C + (a0 + a) * ldc + 16, c##a##1); _mm512_storeu_ps(C + (a0 + a) * ldc + 32, c##a##2); } } while (0)
#define FA__Z1(a) __m512 c##a##0 = _mm512_setzero_ps()
#define FA__L1(a) __m512 c##a##0 = _mm512_loadu_ps(C + ra[a] * ldc)
#define FA__F1(a) c##a##0 = _mm512_fmadd_ps(_mm512_set1_ps(pa[a][off]), b0, c##a##0)
#define FA__S1(a) do { if (a < na - a0) _mm512_storeu_ps(C + (a0 + a) * ldc, c##a##0); } while (0)
/* the same FMAs, leaving lanes whose B is 0 untouched (so a hidden key's NaN/inf V adds nothing) */
#define FA__M3(a) do { __m512 w_ = _mm512_set1_ps(pa[a][off]); c##a##0 = _mm512_mask3_fmadd_ps(w_, b0, c##a##0, k0); \
                       c##a##1 = _mm512_mask3_fmadd_ps(w_, b1, c##a##1, k1); c##a##2 = _mm512_mask3_fmadd_ps(w_, b2, c##a##2, k2); } while (0)
#define FA__M1(a) c##a##0 = _mm512_mask3_fmadd_ps(_mm512_set1_ps(pa[a][off]), b0, c##a##0, k0)
#define FA__NZ(b) _mm512_cmp_ps_mask((b), _mm512_setzero_ps(), _CMP_NEQ_UQ)
#define FA__X8(M) M(0); M(1); M(2); M(3); M(4); M(5); M(6); M(7)

FA__AVX512 static void fa__gemm_avx512(const float *A, int64_t sa, int64_t sx, int na, int nx,
                                       const float *B, int64_t ldb, float *C0, int64_t ldc, int nv, int acc)
{
    int a0, v, x, a;
    for (a0 = 0; a0 < na; a0 += 8) {
        const float *pa[8];
        int64_t ra[8];
        for (a = 0; a < 8; a++) {          /* rows past the end repeat the last one, never stored */
            ra[a] = a0 + a < na ? a0 + a : na - 1;
            pa[a] = A + ra[a] * sa;
        }
        for (v = 0; v + 3 <= nv; v += 3) {
            const float *b = B + v * 16;
            float *C = C0 + v * 16;
            int64_t off = 0;
            if (acc == 2) {
                FA__X8(FA__L3);
                for (x = 0; x < nx; x++, off += sx, b += ldb) {
                    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
                    __mmask16 k0 = FA__NZ(b0), k1 = FA__NZ(b1), k2 = FA__NZ(b2);
                    FA__X8(FA__M3);
                }
                FA__X8(FA__S3);
            } else if (acc) {
                FA__X8(FA__L3);
                for (x = 0; x < nx; x++, off += sx, b += ldb) {
                    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
                    FA__X8(FA__F3);
                }
                FA__X8(FA__S3);
            } else {
                FA__X8(FA__Z3);
                for (x = 0; x < nx; x++, off += sx, b += ldb) {
                    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
                    FA__X8(FA__F3);
                }
                FA__X8(FA__S3);
            }
        }
        for (; v < nv; v++) {
            const float *b = B + v * 16;
            float *C = C0 + v * 16;
            int64_t off = 0;
            if (acc == 2) {
                FA__X8(FA__L1);
                for (x = 0; x < nx; x++, off += sx, b += ldb) {
                    __m512 b0 = _mm512_loadu_ps(b);
                    __mmask16 k0 = FA__NZ(b0);
                    FA__X8(FA__M1);
                }
                FA__X8(FA__S1);
            } else if (acc) {
                FA__X8(FA__L1);
                for (x = 0; x < nx; x++, off += sx, b += ldb) { __m512 b0 = _mm512_loadu_ps(b); FA__X8(FA__F1); }
                FA__X8(FA__S1);
            } else {
                FA__X8(FA__Z1);
                for (x = 0; x < nx; x++, off += sx, b += ldb) { __m512 b0 = _mm512_loadu_ps(b); FA__X8(FA__F1); }
                FA__X8(FA__S1);
            }
        }
    }
}

#define FA__Y2(a) __m256 c##a##0 = acc ? _mm256_loadu_ps(C + ra[a] * ldc) : _mm256_setzero_ps(), \
                         c##a##1 = acc ? _mm256_loadu_ps(C + ra[a] * ldc + 8) : _mm256_setzero_ps()
#define FA__G2(a) do { __m256 w_ = _mm256_set1_ps(pa[a][off]); c##a##0 = _mm256_fmadd_ps(w_, b0, c##a##0); \
                       c##a##1 = _mm256_fmadd_ps(w_, b1, c##a##1); } while (0)
#define FA__N2(a) do { __m256 w_ = _mm256_set1_ps(pa[a][off]); \
                       c##a##0 = _mm256_blendv_ps(c##a##0, _mm256_fmadd_ps(w_, b0, c##a##0), n0); \
                       c##a##1 = _mm256_blendv_ps(c##a##1, _mm256_fmadd_ps(w_, b1, c##a##1), n1); } while (0)
#define FA__T2(a) do { if (a < na - a0) { _mm256_storeu_ps(C + (a0 + a) * ldc, c##a##0); \
                       _mm256_storeu_ps(C + (a0 + a) * ldc + 8, c##a##1); } } while (0)
#define FA__X6(M) M(0); M(1); M(2); M(3); M(4); M(5)

FA__AVX2 static void fa__gemm_avx2(const float *A, int64_t sa, int64_t sx, int na, int nx,
                                   const float *B, int64_t ldb, float *C0, int64_t ldc, int nv, int acc)
{
    int a0, v, x, a;
    for (a0 = 0; a0 < na; a0 += 6) {
        const float *pa[6];
        int64_t ra[6];
        for (a = 0; a < 6; a++) {
            ra[a] = a0 + a < na ? a0 + a : na - 1;
            pa[a] = A + ra[a] * sa;
        }
        for (v = 0; v < nv; v++) {
            const float *b = B + v * 16;
            float *C = C0 + v * 16;
            int64_t off = 0;
            FA__X6(FA__Y2);
            if (acc == 2)
                for (x = 0; x < nx; x++, off += sx, b += ldb) {
                    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                    __m256 n0 = _mm256_cmp_ps(b0, _mm256_setzero_ps(), _CMP_NEQ_UQ);
                    __m256 n1 = _mm256_cmp_ps(b1, _mm256_setzero_ps(), _CMP_NEQ_UQ);
                    FA__X6(FA__N2);
                }
            else
                for (x = 0; x < nx; x++, off += sx, b += ldb) {
                    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                    FA__X6(FA__G2);
                }
            FA__X6(FA__T2);
        }
    }
}
#endif

static void fa__gemm(int isa, const float *A, int64_t sa, int64_t sx, int na, int nx,
                     const float *B, int64_t ldb, float *C, int64_t ldc, int nv, int acc)
{
    int a, x, l, nl = nv * 16;
#ifdef FLASHATTN__X86
    if (isa == 2) { fa__gemm_avx512(A, sa, sx, na, nx, B, ldb, C, ldc, nv, acc); return; }
    if (isa == 1) { fa__gemm_avx2(A, sa, sx, na, nx, B, ldb, C, ldc, nv, acc); return; }
#endif
    (void)isa;
    for (a = 0; a < na; a++) {
        float *c = C + a * ldc;
        if (!acc) for (l = 0; l < nl; l++) c[l] = 0.0f;
        for (x = 0; x < nx; x++) {
            const float w = A[a * sa + x * sx], *b = B + x * ldb;
            if (acc == 2) {
                for (l = 0; l < nl; l++)
                    if (b[l] != 0.0f) c[l] += w * b[l];
            } else {
                for (l = 0; l < nl; l++) c[l] += w * b[l];
            }
        }
    }
}

/* One block of the online softmax on the transposed tile, every lane a query row:
   m_new = max(m, max_j S[j]); S[j] = exp(S[j] - m_new); l = alpha l + sum_j S[j] with
   alpha = exp(m - m_new); O *= alpha. A lane with m_new = -INFINITY (no visible key yet) subtracts
   0 instead, so its exps and alpha are exactly 0. `tmp` holds 16 * nv floats (the alphas). */
#ifdef FLASHATTN__X86
FA__AVX512 static void fa__online_avx512(float *S, int64_t lds, int nk, int nv, float *m, float *l,
                                         float *O, int64_t ldo, int Dv, float *tmp)
{
    int v, j, t, rescale = 0;
    for (v = 0; v < nv; v++) {
        float *s = S + v * 16;
        __m512 mo = _mm512_loadu_ps(m + v * 16), mx = mo, ms, al, sum = _mm512_setzero_ps();
        for (j = 0; j < nk; j++) mx = fa__max16(mx, _mm512_loadu_ps(s + j * lds));
        ms = _mm512_mask_mov_ps(mx, _mm512_cmp_ps_mask(mx, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), _mm512_setzero_ps());
        al = fa__exp16(_mm512_sub_ps(mo, ms));
        for (j = 0; j < nk; j++) {
            __m512 e = fa__exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j * lds), ms));
            _mm512_storeu_ps(s + j * lds, e);
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_storeu_ps(l + v * 16, _mm512_fmadd_ps(al, _mm512_loadu_ps(l + v * 16), sum));
        _mm512_storeu_ps(m + v * 16, mx);
        _mm512_storeu_ps(tmp + v * 16, al);
        if (_mm512_cmp_ps_mask(al, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ)) rescale = 1;
    }
    if (rescale)
        for (t = 0; t < Dv; t++)
            for (v = 0; v < nv; v++)
                _mm512_storeu_ps(O + t * ldo + v * 16, _mm512_mul_ps(_mm512_loadu_ps(O + t * ldo + v * 16),
                                                                     _mm512_loadu_ps(tmp + v * 16)));
}

FA__AVX2 static void fa__online_avx2(float *S, int64_t lds, int nk, int nv, float *m, float *l,
                                     float *O, int64_t ldo, int Dv, float *tmp)
{
    int v, j, t, rescale = 0;
    for (v = 0; v < 2 * nv; v++) {
        float *s = S + v * 8;
        __m256 mo = _mm256_loadu_ps(m + v * 8), mx = mo, ms, al, sum = _mm256_setzero_ps();
        for (j = 0; j < nk; j++) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j * lds));
        ms = _mm256_blendv_ps(mx, _mm256_setzero_ps(), _mm256_cmp_ps(mx, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
        al = fa__exp8(_mm256_sub_ps(mo, ms));
        for (j = 0; j < nk; j++) {
            __m256 e = fa__exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j * lds), ms));
            _mm256_storeu_ps(s + j * lds, e);
            sum = _mm256_add_ps(sum, e);
        }
        _mm256_storeu_ps(l + v * 8, _mm256_fmadd_ps(al, _mm256_loadu_ps(l + v * 8), sum));
        _mm256_storeu_ps(m + v * 8, mx);
        _mm256_storeu_ps(tmp + v * 8, al);
        if (_mm256_movemask_ps(_mm256_cmp_ps(al, _mm256_set1_ps(1.0f), _CMP_NEQ_UQ))) rescale = 1;
    }
    if (rescale)
        for (t = 0; t < Dv; t++)
            for (v = 0; v < 2 * nv; v++)
                _mm256_storeu_ps(O + t * ldo + v * 8, _mm256_mul_ps(_mm256_loadu_ps(O + t * ldo + v * 8),
                                                                    _mm256_loadu_ps(tmp + v * 8)));
}
#endif

static void fa__online(int isa, float *S, int64_t lds, int nk, int nv, float *m, float *l,
                       float *O, int64_t ldo, int Dv, float *tmp)
{
    int r, j, t, nl = nv * 16, rescale = 0;
#ifdef FLASHATTN__X86
    if (isa == 2) { fa__online_avx512(S, lds, nk, nv, m, l, O, ldo, Dv, tmp); return; }
    if (isa == 1) { fa__online_avx2(S, lds, nk, nv, m, l, O, ldo, Dv, tmp); return; }
#endif
    (void)isa;
    for (r = 0; r < nl; r++) {
        float mx = m[r], ms, al, sum = 0.0f;
        for (j = 0; j < nk; j++) mx = fa__row_max_c(S + j * lds + r, 1, mx);
        ms = mx == -INFINITY ? 0.0f : mx;
        al = m[r] == -INFINITY ? 0.0f : fa__expf(m[r] - ms);
        for (j = 0; j < nk; j++) {
            float *sj = S + j * lds + r;
            *sj = *sj == -INFINITY ? 0.0f : fa__expf(*sj - ms);
            sum += *sj;
        }
        l[r] = al * l[r] + sum;
        m[r] = mx;
        tmp[r] = al;
        if (al != 1.0f) rescale = 1;
    }
    if (rescale)
        for (t = 0; t < Dv; t++)
            for (r = 0; r < nl; r++) O[t * ldo + r] *= tmp[r];
}

/* ============================================================================================== */
/* 4. CPU: threads                                                                                */
/* ============================================================================================== */

typedef struct fa__pool {
    pthread_mutex_t mu;
    int64_t next, total;
    void (*fn)(void *ctx, int64_t item, int tid);
    void *ctx;
} fa__pool;

typedef struct fa__worker { fa__pool *pool; int tid; } fa__worker;

static void *fa__worker_main(void *arg)
{
    fa__worker *w = (fa__worker *)arg;
    fa__pool *pl = w->pool;
    for (;;) {
        int64_t item;
        pthread_mutex_lock(&pl->mu);
        item = pl->next++;
        pthread_mutex_unlock(&pl->mu);
        if (item >= pl->total) break;
        pl->fn(pl->ctx, item, w->tid);
    }
    return NULL;
}

static int fa__online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 4096 ? 4096 : (int)n);
}

/* Threads a call uses for `work` independent items. */
static int fa__nthreads(const fa__dims *d, int64_t work)
{
    int64_t t = d->threads ? d->threads : fa__online_cores();
    if (t > work) t = work;
    return t < 1 ? 1 : (int)t;
}

/* Bytes of the per-call thread bookkeeping (handles and worker records), 64-byte rounded. */
static size_t fa__pool_bytes(int nthreads)
{
    size_t b = (size_t)nthreads * (sizeof(pthread_t) + sizeof(fa__worker));
    return (b + 63) & ~(size_t)63;
}

/* Runs fn over items [0, total) on nthreads threads (the caller is thread 0). `mem` holds
   fa__pool_bytes(nthreads). A thread that cannot be started leaves its share to the others. */
static void fa__run(void (*fn)(void *, int64_t, int), void *ctx, int64_t total, int nthreads, void *mem)
{
    fa__pool pl;
    pthread_t *th = (pthread_t *)mem;
    fa__worker *wk = (fa__worker *)(th + nthreads);
    int t;
    if (nthreads <= 1 || total <= 1 || pthread_mutex_init(&pl.mu, NULL) != 0) {
        int64_t it;
        for (it = 0; it < total; it++) fn(ctx, it, 0);
        return;
    }
    pl.next = 0; pl.total = total; pl.fn = fn; pl.ctx = ctx;
    for (t = 0; t < nthreads; t++) { wk[t].pool = &pl; wk[t].tid = t; }
    for (t = 1; t < nthreads; t++)
        if (pthread_create(&th[t], NULL, fa__worker_main, &wk[t]) != 0) { nthreads = t; break; }
    fa__worker_main(&wk[0]);
    for (t = 1; t < nthreads; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&pl.mu);
}

/* One allocation per call, 64-byte aligned; the bytes are counted by the workspace functions. */
static size_t fa__add_size(size_t a, size_t b) { return (a > SIZE_MAX - b) ? SIZE_MAX : a + b; }
static size_t fa__mul_size(size_t a, size_t b) { return (b != 0 && a > SIZE_MAX / b) ? SIZE_MAX : a * b; }
static void *fa__align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* ============================================================================================== */
/* 5. CPU: the naive path                                                                         */
/* ============================================================================================== */

#if !defined(FLASHATTN_NO_BLAS) && defined(OPENBLAS_VERSION)
#define FLASHATTN__OPENBLAS 1
#endif

typedef struct fa__naive_plan {
    int nthreads;
    size_t score_bytes, pool_bytes, total;
} fa__naive_plan;

static void fa__naive_plan_make(const fa__dims *d, fa__naive_plan *pl)
{
    size_t n;
    memset(pl, 0, sizeof *pl);
    pl->nthreads = fa__nthreads(d, (int64_t)d->B * d->Hq);
    if (d->Sq == 0) return;                     /* a no-op allocates nothing */
    n = fa__mul_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)d->Sq), (size_t)d->Sk);
    pl->score_bytes = fa__mul_size(n, sizeof(float));
    pl->pool_bytes = fa__pool_bytes(pl->nthreads);
    pl->total = fa__add_size(fa__add_size(pl->score_bytes, pl->pool_bytes), 64);
}

typedef struct fa__naive_ctx {
    const fa__dims *d;
    int isa;
    const float *q, *k, *v;
    float *o, *S, *scores;
} fa__naive_ctx;

#ifndef FLASHATTN_NO_BLAS
/* 1 when the rows x cols floats (rows `stride` apart) are all finite. */
static int fa__finite_rows(const float *x, int rows, int64_t stride, int cols)
{
    int i, t;
    for (i = 0; i < rows; i++)
        for (t = 0; t < cols; t++) {
            float y = x[i * stride + t];
            if (y - y != 0.0f) return 0;     /* NaN - NaN and inf - inf are NaN */
        }
    return 1;
}
#endif

/* One (batch, head): S = scale Q K^T, modifiers and mask, softmax, O = P V. */
static void fa__naive_head(void *vctx, int64_t item, int tid)
{
    const fa__naive_ctx *c = (const fa__naive_ctx *)vctx;
    const fa__dims *d = c->d;
    int b = (int)(item / d->Hq), h = (int)(item % d->Hq), g = h / d->group;
    int Sq = d->Sq, Sk = d->Sk, D = d->D, Dv = d->Dv, i, j, t;
    const float *q = c->q + (int64_t)b * d->qs[0] + (int64_t)h * d->qs[1];
    const float *k = c->k + (int64_t)b * d->ks[0] + (int64_t)g * d->ks[1];
    const float *v = c->v + (int64_t)b * d->vs[0] + (int64_t)g * d->vs[1];
    float *o = c->o + (int64_t)b * d->os[0] + (int64_t)h * d->os[1];
    float *S = c->S + (size_t)item * Sq * Sk;
    int mask = d->causal || d->wl > 0 || d->wr > 0;
    (void)tid;
    if (Sk == 0) {
        for (i = 0; i < Sq; i++) {
            memset(o + i * d->os[2], 0, (size_t)Dv * sizeof(float));
            if (d->lse) d->lse[((int64_t)b * d->Hq + h) * Sq + i] = -INFINITY;
        }
        return;
    }
#ifndef FLASHATTN_NO_BLAS
    if (d->qs[2] >= D && d->ks[2] >= D && d->qs[2] <= INT_MAX && d->ks[2] <= INT_MAX)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Sq, Sk, D, d->scale, q, (int)d->qs[2],
                    k, (int)d->ks[2], 0.0f, S, Sk);
    else
#endif
    for (i = 0; i < Sq; i++)
        for (j = 0; j < Sk; j++) {
            const float *qi = q + i * d->qs[2], *kj = k + j * d->ks[2];
            float acc = 0.0f;
            for (t = 0; t < D; t++) acc += qi[t] * kj[t];
            S[(size_t)i * Sk + j] = d->scale * acc;
        }
    for (i = 0; i < Sq; i++) {
        float *s = S + (size_t)i * Sk, lse;
        if (mask || fa__has_modifiers(d)) fa__modify_row(d, b, h, i, 0, Sk, s, 1, mask);
        if (c->scores)
            memcpy(c->scores + ((size_t)item * Sq + i) * Sk, s, (size_t)Sk * sizeof(float));
        lse = fa__softmax_row(c->isa, s, Sk);
        if (d->lse) d->lse[((int64_t)b * d->Hq + h) * Sq + i] = lse;
    }
#ifndef FLASHATTN_NO_BLAS
    /* 0 * NaN is NaN: with hidden keys (weight 0) a non-finite v would reach, through the GEMM,
       rows that never see its key; the loop below skips zero weights */
    if (d->vs[2] >= Dv && d->os[2] >= Dv && d->vs[2] <= INT_MAX && d->os[2] <= INT_MAX &&
        !((mask || d->bias) && !fa__finite_rows(v, Sk, d->vs[2], Dv)))
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Sq, Dv, Sk, 1.0f, S, Sk, v, (int)d->vs[2],
                    0.0f, o, (int)d->os[2]);
    else
#endif
    for (i = 0; i < Sq; i++) {
        float *oi = o + i * d->os[2];
        const float *pi = S + (size_t)i * Sk;
        for (t = 0; t < Dv; t++) oi[t] = 0.0f;
        for (j = 0; j < Sk; j++) {
            const float *vj = v + j * d->vs[2];
            float pj = pi[j];
            if (pj == 0.0f) continue;
            for (t = 0; t < Dv; t++) oi[t] += pj * vj[t];
        }
    }
}

static fa_status fa__cpu_check(const fa__dims *d)
{
    if (d->dtype != FA_F32) return FA_ERR_UNSUPPORTED;   /* the CPU paths store fp32 only */
    return FA_OK;
}

FLASHATTN__CPU_DEF size_t fa_naive_workspace_bytes(const fa_params *p)
{
    fa__dims d;
    fa__naive_plan pl;
    if (!p || fa__resolve(p, p, p, p, p, &d) != FA_OK || fa__cpu_check(&d) != FA_OK) return 0;
    fa__naive_plan_make(&d, &pl);
    return pl.total;
}

FLASHATTN__CPU_DEF fa_status fa_naive(const fa_params *p, const void *q, const void *k, const void *v,
                                      void *o, float *scores)
{
    fa__dims d;
    fa__naive_plan pl;
    fa__naive_ctx c;
    void *mem;
    fa_status st = fa__resolve(p, q, k, v, o, &d);
    if (st != FA_OK) return st;
    if ((st = fa__cpu_check(&d)) != FA_OK) return st;
    if (d.Sq == 0) return FA_OK;
    fa__naive_plan_make(&d, &pl);
    if (pl.total == SIZE_MAX || pl.score_bytes == SIZE_MAX) return FA_ERR_NO_MEMORY;
    mem = FLASHATTN_MALLOC(pl.total);
    if (!mem) return FA_ERR_NO_MEMORY;
    c.d = &d; c.q = (const float *)q; c.k = (const float *)k; c.v = (const float *)v;
    c.o = (float *)o; c.scores = scores; c.isa = fa__isa();
    c.S = (float *)((char *)fa__align64(mem) + pl.pool_bytes);
    {
#ifdef FLASHATTN__OPENBLAS
        int saved = openblas_get_num_threads();
        if (saved != 1) openblas_set_num_threads(1);
#endif
        fa__run(fa__naive_head, &c, (int64_t)d.B * d.Hq, pl.nthreads, fa__align64(mem));
#ifdef FLASHATTN__OPENBLAS
        if (saved != 1) openblas_set_num_threads(saved);
#endif
    }
    FLASHATTN_FREE(mem);
    return FA_OK;
}

/* ============================================================================================== */
/* 6. CPU: the tiled online-softmax path                                                          */
/* ============================================================================================== */

/* The tiling of a call, made by one function for fa_tiled and fa_tiled_workspace_bytes alike.
   A tile is `hpt` query heads (of one kv head) x `nq` query rows of one batch: hpt = 1 and nq =
   block_q normally; with few query rows (decoding) and block_q left to the library, the heads that
   share a kv head go in one tile, so each K/V row is read once for all of them. When there are few
   tiles for the threads, the key range of each tile is split into `nsplit` parts whose partial
   results are merged by log-sum-exp (fa__merge_row, section 7). */
typedef struct fa__tiled_plan {
    int nq, bk, hpt, rows, ld, nsplit, nthreads;
    int64_t qtiles, tiles, items;
    size_t thread_floats, part_floats, pool_bytes, total;
} fa__tiled_plan;

static size_t fa__round16(size_t n) { return (n + 15) & ~(size_t)15; }

static void fa__tiled_plan_make(const fa__dims *d, fa__tiled_plan *pl)
{
    int64_t want = d->threads ? d->threads : fa__online_cores();
    size_t f, ld;
    memset(pl, 0, sizeof *pl);
    if (d->Sq == 0) return;
    pl->hpt = 1;
    if (d->block_q == 0 && d->group > 1 && d->Sq <= 16) {
        int h;
        for (h = d->group; h > 1; h--)
            if (d->group % h == 0 && (int64_t)h * d->Sq <= 64) break;
        pl->hpt = h;
    }
    if (pl->hpt > 1) pl->nq = d->Sq;
    else if (d->block_q) pl->nq = d->block_q < d->Sq ? d->block_q : d->Sq;
    else {
        /* 96 rows = two 48-lane register panels; fewer when that would leave threads idle */
        static const int cand[4] = { 96, 48, 32, 16 };
        int c;
        for (c = 0; c < 4; c++) {
            pl->nq = cand[c];
            if ((int64_t)d->B * d->Hq * ((d->Sq + cand[c] - 1) / cand[c]) >= 2 * want) break;
        }
        if (pl->nq > d->Sq) pl->nq = d->Sq;
    }
    pl->bk = d->block_k ? d->block_k : 64;
    if (pl->bk > d->Sk) pl->bk = d->Sk > 0 ? d->Sk : 1;
    pl->rows = pl->hpt * pl->nq;
    ld = fa__round16((size_t)pl->rows);
    pl->ld = (int)ld;
    pl->qtiles = (d->Sq + pl->nq - 1) / pl->nq;
    pl->tiles = pl->qtiles * d->B * (d->Hq / pl->hpt);
    pl->nsplit = 1;
    if (pl->tiles < 8 * want && d->Sk >= 8 * (int64_t)pl->bk) {
        int64_t ns = (8 * want + pl->tiles - 1) / pl->tiles, mx = d->Sk / (4 * (int64_t)pl->bk);
        if (ns > mx) ns = mx;
        if (ns > 64) ns = 64;
        if (ns > 1) pl->nsplit = (int)ns;
    }
    pl->items = pl->tiles * pl->nsplit;
    pl->nthreads = fa__nthreads(d, pl->items);
    /* per thread: Qt [D][ld], St [bk][ld], Ot [Dv][ld], m, l and the alphas [ld] */
    f = fa__mul_size(ld, (size_t)d->D);
    f = fa__add_size(f, fa__mul_size(ld, (size_t)pl->bk));
    f = fa__add_size(f, fa__mul_size(ld, (size_t)d->Dv));
    f = fa__add_size(f, 3 * ld);
    pl->thread_floats = f;
    /* split keys: each part's o [rows][Dv] and lse [rows] */
    if (pl->nsplit > 1)
        pl->part_floats = fa__round16(fa__mul_size(fa__mul_size((size_t)pl->tiles * pl->nsplit, (size_t)pl->rows),
                                                   (size_t)d->Dv + 1));
    pl->pool_bytes = fa__pool_bytes(pl->nthreads);
    pl->total = fa__add_size(fa__mul_size(fa__add_size(fa__mul_size(f, (size_t)pl->nthreads), pl->part_floats),
                                          sizeof(float)), fa__add_size(pl->pool_bytes, 64));
}

typedef struct fa__tiled_ctx {
    const fa__dims *d;
    const fa__tiled_plan *pl;
    const float *q, *k, *v;
    float *o, *ws, *parts;
    int isa;
} fa__tiled_ctx;

/* Where tile `tile` sits: batch b, first head h0, first query row i0, rows per head nqr. */
static void fa__tile_pos(const fa__dims *d, const fa__tiled_plan *pl, int64_t tile, int *b, int *h0,
                         int64_t *i0, int *nqr)
{
    int64_t hg = d->Hq / pl->hpt, per = d->B * hg;
    int64_t qt = pl->qtiles - 1 - tile / per, bh = tile % per;     /* the longest causal rows first */
    *b = (int)(bh / hg);
    *h0 = (int)(bh % hg) * pl->hpt;
    *i0 = qt * pl->nq;
    *nqr = (int)((*i0 + pl->nq < d->Sq ? *i0 + pl->nq : d->Sq) - *i0);
}

/* One tile over one part of its key range: pack Q^T, walk K/V in blocks (scores, mask and
   modifiers where needed, online softmax, P V), then write o and lse, or the part's partials. */
static void fa__tiled_item(void *vctx, int64_t item, int tid)
{
    const fa__tiled_ctx *c = (const fa__tiled_ctx *)vctx;
    const fa__dims *d = c->d;
    const fa__tiled_plan *pl = c->pl;
    int64_t tile = item / pl->nsplit, i0, klo, khi, nblk, per, blk, blk1, ld = pl->ld;
    int sp = (int)(item % pl->nsplit), b, h0, nqr, g, nr, nv, r, t, D = d->D, Dv = d->Dv, isa = c->isa;
    float *Qt = c->ws + (size_t)tid * pl->thread_floats, *St = Qt + ld * D, *Ot = St + ld * pl->bk;
    float *m = Ot + ld * Dv, *l = m + ld, *tmp = l + ld;
    const float *kb, *vb;
    int mods = fa__has_modifiers(d);

    fa__tile_pos(d, pl, tile, &b, &h0, &i0, &nqr);
    g = h0 / d->group;
    nr = pl->hpt * nqr;
    nv = (nr + 15) / 16;
    kb = c->k + (int64_t)b * d->ks[0] + (int64_t)g * d->ks[1];
    vb = c->v + (int64_t)b * d->vs[0] + (int64_t)g * d->vs[1];
    for (r = 0; r < nr; r++) {
        const float *qr = c->q + (int64_t)b * d->qs[0] + (int64_t)(h0 + r / nqr) * d->qs[1] + (i0 + r % nqr) * d->qs[2];
        for (t = 0; t < D; t++) Qt[t * ld + r] = qr[t] * d->scale;
    }
    for (t = 0; t < D; t++) for (r = nr; r < nv * 16; r++) Qt[t * ld + r] = 0.0f;
    for (t = 0; t < Dv; t++) for (r = 0; r < nv * 16; r++) Ot[t * ld + r] = 0.0f;
    for (r = 0; r < nv * 16; r++) { m[r] = -INFINITY; l[r] = 0.0f; }

    fa__rows_range(d, i0, i0 + nqr, &klo, &khi);
    nblk = (khi - klo + pl->bk - 1) / pl->bk;
    per = (nblk + pl->nsplit - 1) / pl->nsplit;
    blk1 = (sp + 1) * per < nblk ? (sp + 1) * per : nblk;
    for (blk = sp * per; blk < blk1; blk++) {
        int64_t k0 = klo + blk * pl->bk, k1 = k0 + pl->bk < khi ? k0 + pl->bk : khi;
        int nk = (int)(k1 - k0), mask = !fa__block_unmasked(d, i0, i0 + nqr, k0, k1);
        fa__gemm(isa, kb + k0 * d->ks[2], d->ks[2], 1, nk, D, Qt, ld, St, ld, nv, 0);
        if (mask || mods)
            for (r = 0; r < nr; r++)
                fa__modify_row(d, b, h0 + r / nqr, i0 + r % nqr, k0, nk, St + r, ld, mask);
        fa__online(isa, St, ld, nk, nv, m, l, Ot, ld, Dv, tmp);
        fa__gemm(isa, vb + k0 * d->vs[2], 1, d->vs[2], Dv, nk, St, ld, Ot, ld, nv, mask || d->bias ? 2 : 1);
    }

    for (r = 0; r < nr; r++) {
        int h = h0 + r / nqr;
        int64_t i = i0 + r % nqr;
        float lr = l[r], lse, *orow, *lsep;
        if (pl->nsplit == 1) {
            orow = c->o + (int64_t)b * d->os[0] + (int64_t)h * d->os[1] + i * d->os[2];
            lsep = d->lse ? d->lse + ((int64_t)b * d->Hq + h) * d->Sq + i : NULL;
        } else {
            orow = c->parts + ((size_t)item * pl->rows + r) * Dv;
            lsep = c->parts + (size_t)pl->items * pl->rows * Dv + (size_t)item * pl->rows + r;
        }
        if (lr > 0.0f || lr != lr) {             /* NaN stays NaN */
            float inv = 1.0f / lr;
            for (t = 0; t < Dv; t++) orow[t] = Ot[t * ld + r] * inv;
            lse = m[r] + logf(lr);
        } else {
            for (t = 0; t < Dv; t++) orow[t] = 0.0f;
            lse = -INFINITY;
        }
        if (lsep) *lsep = lse;
    }
}

static void fa__merge_row(int dv, int parts, const float *const *op, const float *const *lp, int64_t r,
                          float *orow, float *lse);

/* The split-key parts of one tile merged into o and lse. */
static void fa__tiled_merge(void *vctx, int64_t tile, int tid)
{
    const fa__tiled_ctx *c = (const fa__tiled_ctx *)vctx;
    const fa__dims *d = c->d;
    const fa__tiled_plan *pl = c->pl;
    const float *op[64], *lp[64];
    const float *lse0 = c->parts + (size_t)pl->items * pl->rows * d->Dv;
    int64_t i0;
    int b, h0, nqr, r, p;
    float *lse;
    (void)tid;
    fa__tile_pos(d, pl, tile, &b, &h0, &i0, &nqr);
    for (p = 0; p < pl->nsplit; p++) {
        op[p] = c->parts + (size_t)(tile * pl->nsplit + p) * pl->rows * d->Dv;
        lp[p] = lse0 + (size_t)(tile * pl->nsplit + p) * pl->rows;
    }
    /* a tile's rows are contiguous in lse: one head's rows from i0, or all rows of hpt heads */
    lse = d->lse ? d->lse + ((int64_t)b * d->Hq + h0) * d->Sq + i0 : NULL;
    for (r = 0; r < pl->hpt * nqr; r++) {
        float *orow = c->o + (int64_t)b * d->os[0] + (int64_t)(h0 + r / nqr) * d->os[1] + (i0 + r % nqr) * d->os[2];
        fa__merge_row(d->Dv, pl->nsplit, op, lp, r, orow, lse);
    }
}

FLASHATTN__CPU_DEF size_t fa_tiled_workspace_bytes(const fa_params *p)
{
    fa__dims d;
    fa__tiled_plan pl;
    if (!p || fa__resolve(p, p, p, p, p, &d) != FA_OK || fa__cpu_check(&d) != FA_OK) return 0;
    fa__tiled_plan_make(&d, &pl);
    return pl.total;
}

FLASHATTN__CPU_DEF fa_status fa_tiled(const fa_params *p, const void *q, const void *k, const void *v, void *o)
{
    fa__dims d;
    fa__tiled_plan pl;
    fa__tiled_ctx c;
    void *mem;
    fa_status st = fa__resolve(p, q, k, v, o, &d);
    if (st != FA_OK) return st;
    if ((st = fa__cpu_check(&d)) != FA_OK) return st;
    if (d.Sq == 0) return FA_OK;
    fa__tiled_plan_make(&d, &pl);
    if (pl.total == SIZE_MAX) return FA_ERR_NO_MEMORY;
    mem = FLASHATTN_MALLOC(pl.total);
    if (!mem) return FA_ERR_NO_MEMORY;
    c.d = &d; c.pl = &pl; c.q = (const float *)q; c.k = (const float *)k; c.v = (const float *)v;
    c.o = (float *)o; c.ws = (float *)fa__align64(mem); c.isa = fa__isa();
    c.parts = c.ws + pl.thread_floats * pl.nthreads;
    fa__run(fa__tiled_item, &c, pl.items, pl.nthreads, c.parts + pl.part_floats);
    if (pl.nsplit > 1) fa__run(fa__tiled_merge, &c, pl.tiles, pl.nthreads, c.parts + pl.part_floats);
    FLASHATTN_FREE(mem);
    return FA_OK;
}

/* ============================================================================================== */
/* 7. Merging partial results by log-sum-exp                                                      */
/* ============================================================================================== */

static fa_status fa__merge_check(int rows, int dv, int parts, const void *o_parts, const void *lse_parts,
                                 const void *o)
{
    if (rows < 0 || dv < 1 || parts < 1 || !o_parts || !lse_parts || (rows > 0 && !o))
        return FA_ERR_INVALID_ARG;
    return FA_OK;
}

/* One row of the merge; o may alias any o_parts[p] row (read before written, element by element). */
static void fa__merge_row(int dv, int parts, const float *const *op, const float *const *lp, int64_t r,
                          float *orow, float *lse)
{
    float mx = -INFINITY, sum = 0.0f;
    int p, t;
    for (p = 0; p < parts; p++) {
        float x = lp[p][r];
        if (!(x <= mx)) mx = x;
    }
    if (mx == -INFINITY) {
        for (t = 0; t < dv; t++) orow[t] = 0.0f;
        if (lse) lse[r] = -INFINITY;
        return;
    }
    for (p = 0; p < parts; p++) sum += lp[p][r] == -INFINITY ? 0.0f : expf(lp[p][r] - mx);
    for (t = 0; t < dv; t++) {
        float a = 0.0f;
        for (p = 0; p < parts; p++)
            if (lp[p][r] != -INFINITY) a += expf(lp[p][r] - mx) * op[p][r * (int64_t)dv + t];
        orow[t] = a / sum;
    }
    if (lse) lse[r] = mx + logf(sum);
}

FLASHATTN__CPU_DEF fa_status fa_merge(int rows, int dv, int parts, const float *const *o_parts,
                                      const float *const *lse_parts, float *o, float *lse)
{
    int64_t r;
    int p;
    fa_status st = fa__merge_check(rows, dv, parts, o_parts, lse_parts, o);
    if (st != FA_OK) return st;
    if (rows == 0) return FA_OK;
    for (p = 0; p < parts; p++)
        if (!o_parts[p] || !lse_parts[p]) return FA_ERR_INVALID_ARG;
    for (r = 0; r < rows; r++) fa__merge_row(dv, parts, o_parts, lse_parts, r, o + r * (int64_t)dv, lse);
    return FA_OK;
}

#ifdef __cplusplus
}
#endif

/* ============================================================================================== */
/* 8. CUDA backend (FLASHATTN_CUDA, compiled by nvcc)                                             */
/* ============================================================================================== */

#if defined(FLASHATTN_CUDA) && defined(__CUDACC__)
/* ---- 8a. CUDA: runtime checks, helpers, generic kernels (any dtype, any head_dim) ------------- */
/* ---- 8b. CUDA: tensor-core kernel for fp16/bf16 (mma.sync m16n8k16, ldmatrix, cp.async) ------ */
/* ---- 8c. CUDA: entry points fa_cuda_naive, fa_cuda_tiled, fa_cuda_merge ------------------------ */
#endif

#endif /* FLASHATTN__IMPLEMENTATION_DONE */
#endif /* FLASHATTN_IMPLEMENTATION */

/*
------------------------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the flashattn.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------------------------
*/
