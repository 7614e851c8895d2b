/* bench_util.h - the pieces the CPU benches share: a clock, N(0,1) fills, medians of repeats, the
   OpenBLAS core name (and the Prescott re-exec), the sgemm ceiling, the load average and the memory
   available, for bench/bench.c, bench/bench_backward.c and bench/ab/ab.c (which uses only the
   clock, the fill and the median, and so needs no flashattn.h before it).

   Include it after flashattn.h with FLASHATTN_IMPLEMENTATION defined (that brings <cblas.h> unless
   FLASHATTN_NO_BLAS) and after `#define _GNU_SOURCE` (execv, setenv, sysconf). Everything is
   static: one copy per bench program. */
#ifndef FA_BENCH_UTIL_H
#define FA_BENCH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if !defined(FLASHATTN_NO_BLAS) && defined(OPENBLAS_VERSION)
#define BENCH_HAVE_OPENBLAS 1
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BENCH_FN static __attribute__((unused))   /* a bench that uses part of this builds -Werror clean */
#else
#define BENCH_FN static
#endif

BENCH_FN double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* splitmix64 and Box-Muller: fresh N(0,1) data, the same sequence every run */
static uint64_t bench_rng = 0x9E3779B97F4A7C15ULL;
BENCH_FN double bench_unif(void)
{
    uint64_t z = (bench_rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}
BENCH_FN void bench_fill_normal(float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) x[i] = (float)(sqrt(-2.0 * log(bench_unif())) * cos(6.283185307179586 * bench_unif()));
}

BENCH_FN int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* sorts t[0..n) and returns its median (the upper one for even n, as bench.c does) */
BENCH_FN double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], bench_cmp_d);
    return t[n / 2];
}

/* Median seconds of fn over repeats: a warm-up (its failure ends it: -1), then at least 3 and at
   most maxn timed calls, stopping once the warm-up's time x calls passes budget_s; a warm-up over
   5 s is the one timing. bench.c's time_median with maxn 7 (3 under --quick) and budget 2 s (0.5). */
typedef int (*bench_fn_t)(void *);
BENCH_FN double bench_time_median(bench_fn_t fn, void *arg, int maxn, double budget_s)
{
    double t[64], t0, first;
    int n = 0;
    if (maxn > 64) maxn = 64;
    if (maxn < 3) maxn = 3;
    t0 = bench_now();
    if (fn(arg) != 0) return -1.0;
    first = bench_now() - t0;
    if (first > 5.0) return first;
    while (n < maxn) {
        t0 = bench_now();
        fn(arg);
        t[n++] = bench_now() - t0;
        if (n >= 3 && first * n > budget_s) break;
    }
    return bench_median(t, n);
}

/* ---- the OpenBLAS core, and the Prescott mis-detection ------------------------------------- */
#ifdef BENCH_HAVE_OPENBLAS
BENCH_FN const char *bench_corename(void) { return openblas_get_corename(); }
#else
BENCH_FN const char *bench_corename(void) { return "none (FLASHATTN_NO_BLAS)"; }
#endif

/* Debian's OpenBLAS 0.3.21 names some recent CPUs "Prescott" and runs sgemm ~5x slow there: the
   bench then re-executes itself with OPENBLAS_CORETYPE set (SkylakeX with AVX-512F, Haswell with
   AVX2), says so on stderr, and bench_coretype_note tells the header line. Call first in main. */
BENCH_FN void bench_fix_coretype(char **argv)
{
#ifdef BENCH_HAVE_OPENBLAS
    const char *cn = bench_corename();
    if (getenv("OPENBLAS_CORETYPE") == NULL && cn && (strstr(cn, "rescott") || strstr(cn, "RESCOTT"))) {
        const char *want = NULL;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
        if (__builtin_cpu_supports("avx512f")) want = "SkylakeX";
        else if (__builtin_cpu_supports("avx2")) want = "Haswell";
#endif
        if (want) {
            fprintf(stderr, "bench: OpenBLAS detected core \"%s\" (a mis-detection of this CPU); "
                    "re-executing with OPENBLAS_CORETYPE=%s\n", cn, want);
            setenv("OPENBLAS_CORETYPE", want, 1);
            setenv("FA_BENCH_REEXEC", "1", 1);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "bench: re-exec failed; continuing with %s\n", cn);
        }
    }
#else
    (void)argv;
#endif
}
/* " (OPENBLAS_CORETYPE=X, set by this bench after a Prescott mis-detection)", "... from the
   environment)" or "" */
BENCH_FN const char *bench_coretype_note(void)
{
    static char buf[160];
    const char *ct = getenv("OPENBLAS_CORETYPE");
    if (!ct) return "";
    snprintf(buf, sizeof buf, " (OPENBLAS_CORETYPE=%.40s, %s)", ct,
             getenv("FA_BENCH_REEXEC") ? "set by this bench after a Prescott mis-detection" : "from the environment");
    return buf;
}

/* ---- the sgemm ceiling ---------------------------------------------------------------------- */
#ifdef BENCH_HAVE_OPENBLAS
typedef struct { int n; float *a, *b, *c; } bench_gemm;
static int bench_run_gemm(void *v)
{
    bench_gemm *g = (bench_gemm *)v;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n,
                0.0f, g->c, g->n);
    return 0;
}
#endif

/* sgemm 2048^3 GFLOP/s at thr threads on the current load, fastest of 3 after a warm-up, for a row
   of a table (the matrices are kept between calls); OpenBLAS is left at 1 thread. 0 without it. */
BENCH_FN double bench_sgemm_now(int thr)
{
#ifdef BENCH_HAVE_OPENBLAS
    static bench_gemm g;
    double best = 1e9, t0, t;
    int i;
    if (!g.a) {
        g.n = 2048;
        g.a = (float *)malloc(sizeof(float) * 2048 * 2048); g.b = (float *)malloc(sizeof(float) * 2048 * 2048);
        g.c = (float *)malloc(sizeof(float) * 2048 * 2048);
        if (!g.a || !g.b || !g.c) { free(g.a); free(g.b); free(g.c); g.a = NULL; return 0.0; }
        bench_fill_normal(g.a, (size_t)2048 * 2048); bench_fill_normal(g.b, (size_t)2048 * 2048);
    }
    openblas_set_num_threads(thr);
    bench_run_gemm(&g);
    for (i = 0; i < 3; i++) {
        t0 = bench_now(); bench_run_gemm(&g); t = bench_now() - t0;
        if (t < best) best = t;
    }
    openblas_set_num_threads(1);
    return 2.0 * 2048.0 * 2048.0 * 2048.0 / best * 1e-9;
#else
    (void)thr;
    return 0.0;
#endif
}

/* sgemm n^3 GFLOP/s at thr threads, median of bench_time_median(maxn, budget_s); 0 without OpenBLAS */
BENCH_FN double bench_sgemm_gflops(int n, int thr, int maxn, double budget_s)
{
#ifdef BENCH_HAVE_OPENBLAS
    bench_gemm g;
    double t;
    g.n = n;
    g.a = (float *)malloc(sizeof(float) * n * n); g.b = (float *)malloc(sizeof(float) * n * n);
    g.c = (float *)malloc(sizeof(float) * n * n);
    if (!g.a || !g.b || !g.c) { free(g.a); free(g.b); free(g.c); return 0.0; }
    bench_fill_normal(g.a, (size_t)n * n); bench_fill_normal(g.b, (size_t)n * n);
    openblas_set_num_threads(thr);
    t = bench_time_median(bench_run_gemm, &g, maxn, budget_s);
    openblas_set_num_threads(1);
    free(g.a); free(g.b); free(g.c);
    return 2.0 * n * n * (double)n / t * 1e-9;
#else
    (void)n; (void)thr; (void)maxn; (void)budget_s;
    return 0.0;
#endif
}

/* ---- the machine's state -------------------------------------------------------------------- */
/* /proc/loadavg without its newline into buf ("?" where there is none) */
BENCH_FN const char *bench_loadavg(char *buf, size_t n)
{
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f || !fgets(buf, (int)n, f)) snprintf(buf, n, "?");
    else buf[strcspn(buf, "\n")] = 0;
    if (f) fclose(f);
    return buf;
}

/* bytes of memory available now (free pages; 0 if unknown) */
BENCH_FN double bench_avail_bytes(void)
{
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0.0;
}

/* ---- half precision (issue 16): the vdpbf16ps ceiling, fp32 arrays as fp16/bf16 ---------------- */
#ifdef FLASHATTN_IMPLEMENTATION       /* after the header's implementation only (not for ab.c) */
#include <pthread.h>
/* x as storage type dt (2 bytes an element), by the header's own conversion (bench includes it) */
BENCH_FN uint16_t *bench_to_half(fa_dtype dt, const float *x, size_t n)
{
    uint16_t *h = (uint16_t *)malloc((n ? n : 1) * 2);
    if (h) fa__kernels_for(0)->f2h(dt, x, h, (int)n);
    return h;
}
BENCH_FN const char *bench_dtype_name(fa_dtype dt) { return dt == FA_F16 ? "fp16" : dt == FA_BF16 ? "bf16" : "fp32"; }

#ifdef FLASHATTN__X86
/* 24 independent chains of vdpbf16ps (16 lanes x 2 bf16 pairs = 32 multiply-adds each), iters times */
#define BENCH_DP4(a, b, c, d) a = _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)y); b = _mm512_dpbf16_ps(b, (__m512bh)x, (__m512bh)y); \
                             c = _mm512_dpbf16_ps(c, (__m512bh)x, (__m512bh)y); d = _mm512_dpbf16_ps(d, (__m512bh)x, (__m512bh)y)
__attribute__((target("avx512f,avx512bf16"))) static void *bench_dpbf16_chain(void *arg)
{
    long n = *(long *)arg, i;
#define BENCH_C(k) _mm512_set1_ps((float)(k))   /* distinct starts: no chain is a copy of another */
    __m512 c0 = BENCH_C(0), c1 = BENCH_C(1), c2 = BENCH_C(2), c3 = BENCH_C(3), c4 = BENCH_C(4), c5 = BENCH_C(5);
    __m512 c6 = BENCH_C(6), c7 = BENCH_C(7), c8 = BENCH_C(8), c9 = BENCH_C(9), c10 = BENCH_C(10), c11 = BENCH_C(11);
    __m512 c12 = BENCH_C(12), c13 = BENCH_C(13), c14 = BENCH_C(14), c15 = BENCH_C(15), c16 = BENCH_C(16), c17 = BENCH_C(17);
    __m512 c18 = BENCH_C(18), c19 = BENCH_C(19), c20 = BENCH_C(20), c21 = BENCH_C(21), c22 = BENCH_C(22), c23 = BENCH_C(23);
    __m512i x = _mm512_set1_epi32(0x3F803F80), y = _mm512_set1_epi32(0x3C003C00);   /* 1.0 and 2^-7 */
    float out[16];
    for (i = 0; i < n; i++) {
        BENCH_DP4(c0, c1, c2, c3); BENCH_DP4(c4, c5, c6, c7); BENCH_DP4(c8, c9, c10, c11);
        BENCH_DP4(c12, c13, c14, c15); BENCH_DP4(c16, c17, c18, c19); BENCH_DP4(c20, c21, c22, c23);
    }
    c0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)), _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    c8 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)), _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15)));
    c16 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c16, c17), _mm512_add_ps(c18, c19)), _mm512_add_ps(_mm512_add_ps(c20, c21), _mm512_add_ps(c22, c23)));
    _mm512_storeu_ps(out, _mm512_add_ps(c0, _mm512_add_ps(c8, c16)));
    *(long *)arg = out[0] > 0.0f ? n : -1;
    return NULL;
}
/* GFLOP/s of vdpbf16ps on thr threads (2 FLOPs a multiply-add), 0 when the CPU has no AVX512-BF16 */
BENCH_FN double bench_dpbf16_gflops(int thr)
{
    pthread_t th[256];
    long it[256];
    double t0, t;
    int i;
    const long n = 10000000;
    if (!fa__cpu_avx512bf16()) return 0.0;
    if (thr > 256) thr = 256;
    t0 = bench_now();
    for (i = 0; i < thr; i++) { it[i] = n; if (i) pthread_create(&th[i], NULL, bench_dpbf16_chain, &it[i]); }
    bench_dpbf16_chain(&it[0]);
    for (i = 1; i < thr; i++) pthread_join(th[i], NULL);
    t = bench_now() - t0;
    return (double)thr * (double)n * 24.0 * 32.0 * 2.0 / t * 1e-9;
}
#else
BENCH_FN double bench_dpbf16_gflops(int thr) { (void)thr; return 0.0; }
#endif
#ifdef FA__HAVE_AMX
/* 1: the tiles hold nonzero bf16 (~2^-10; bench/fa_shim.c's ceiling), 0: zeros (the benches' own
   ceiling so far; about 15% faster on the Xeon than nonzero data) */
static int bench_amx_nonzero;
/* AMX-BF16: 4 tdpbf16ps a round (2 x 2 tiles of C, 16 x 16 fp32, from A and B tiles loaded once: 4 x
   16 x 16 x 32 multiply-adds), iters rounds; the process's tile permission asked first */
__attribute__((target("amx-tile,amx-bf16"))) static void *bench_amx_chain(void *arg)
{
    long n = *(long *)arg, i;
    uint16_t src[16 * 32];
    float out[16 * 16];
    for (i = 0; i < 16 * 32; i++) src[i] = bench_amx_nonzero ? (uint16_t)(0x3A80u + (unsigned)(i % 7)) : 0;
    fa__amx_begin();
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, src, 64); _tile_loadd(5, src, 64); _tile_loadd(6, src, 64);
    for (i = 0; i < n; i++) {
        _tile_dpbf16ps(0, 4, 5); _tile_dpbf16ps(1, 4, 6); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 4);
    }
    _tile_stored(0, out, 64);
    fa__amx_end();
    *(long *)arg = (out[0] > 0.0f) == (bench_amx_nonzero != 0) ? n : -1;
    return NULL;
}
/* GFLOP/s of tdpbf16ps on thr threads, 0 without AMX or without the permission */
BENCH_FN double bench_amx_gflops(int thr)
{
    pthread_t th[256];
    long it[256];
    double t0, t;
    int i;
    const long n = 2000000;
    if (!fa__cpu_amx() || !fa__amx_permit()) return 0.0;
    if (thr > 256) thr = 256;
    t0 = bench_now();
    for (i = 0; i < thr; i++) { it[i] = n; if (i) pthread_create(&th[i], NULL, bench_amx_chain, &it[i]); }
    bench_amx_chain(&it[0]);
    for (i = 1; i < thr; i++) pthread_join(th[i], NULL);
    t = bench_now() - t0;
    return (double)thr * (double)n * 4.0 * 16.0 * 16.0 * 32.0 * 2.0 / t * 1e-9;
}
#else
BENCH_FN double bench_amx_gflops(int thr) { (void)thr; return 0.0; }
#endif

/* ---- the memory read ceiling (bench.c's and fa_shim.c's GB/s): a thread's part of a buffer summed
   as 64-bit words, with 512-bit loads where the CPU has AVX-512 (four independent sums, so the
   loads, not the adds, set the pace), as a pthread start routine ---- */
typedef struct { const uint64_t *p; size_t n; uint64_t sum; } bench_bw_part;
#ifdef FLASHATTN__X86
__attribute__((target("avx512f"), unused)) static uint64_t bench_sum512(const uint64_t *p, size_t n)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    uint64_t buf[8], s = 0;
    size_t i;
    for (i = 0; i + 32 <= n; i += 32) {
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512((const void *)(p + i + 8)));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512((const void *)(p + i + 16)));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512((const void *)(p + i + 24)));
    }
    _mm512_storeu_si512((void *)buf, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
    for (i = 0; i < 8; i++) s += buf[i];
    return s;
}
#endif
BENCH_FN void *bench_bw_read(void *v)
{
    bench_bw_part *b = (bench_bw_part *)v;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i;
#ifdef FLASHATTN__X86
    if (__builtin_cpu_supports("avx512f")) { b->sum = bench_sum512(b->p, b->n); return NULL; }
#endif
    for (i = 0; i + 4 <= b->n; i += 4) { s0 += b->p[i]; s1 += b->p[i + 1]; s2 += b->p[i + 2]; s3 += b->p[i + 3]; }
    b->sum = s0 + s1 + s2 + s3;
    return NULL;
}
#endif /* FLASHATTN_IMPLEMENTATION */

#endif /* FA_BENCH_UTIL_H */
