/* bench.c - naive vs tiled attention on the CPU, fp32 (`make bench`; `--csv` for machine-readable rows).

   Prints, in one run: the OpenBLAS core name (and re-executes itself with OPENBLAS_CORETYPE set when
   Debian's OpenBLAS 0.3.21 mis-detects the CPU as Prescott), the sgemm GFLOP/s of this machine as a
   ceiling, the memory read bandwidth, then naive vs tiled over S and D at B=2, H=4 (causal off/on),
   the decode shape (Sq=1, Sk=32768, B=1, H=32, Hkv=8, D=128) as K/V GB/s, and 1 -> N thread scaling.
   Times are medians of repeats; GFLOP/s count 4*B*H*Sq*Sk*D (halved for causal).

   Options: --csv, --threads N (default 2), --quick (S <= 2048, decode Sk 8192, fewer repeats),
            --few-reps (fewer repeats only), --max-s N, --naive-mem GiB (largest naive score matrix
            to allocate, default 9, and never over 60% of the memory available), --no-scaling, --no-naive,
            --pool (every call runs on one fa_pool of N threads made at the start, instead of starting
            its own threads), --no-row-sgemm (no sgemm next to each row: OpenBLAS's threads spin after
            each GEMM and would share the cores with the next row's call; %sgemm is then 0),
            --dtype f16|bf16 (issue 16: half storage against fp32, beside the vdpbf16ps, sgemm and AMX
            ceilings), with --no-decode (no decode row) and --half-only (the half calls alone, fp32 ms 0). */
#define _GNU_SOURCE
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "bench/bench_util.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if !defined(FLASHATTN_NO_BLAS) && defined(OPENBLAS_VERSION)
#define HAVE_OPENBLAS 1
#endif

static int csv = 0, quick = 0, few_reps = 0, nthreads = 2, no_scaling = 0, no_naive = 0, no_ceiling = 0;
static fa_pool *g_pool;             /* --pool: the pool every call runs on */
static double gemm_ceiling = 0.0;   /* sgemm GFLOP/s at nthreads, measured in this run */
static int max_s = 16384;
static double naive_mem_gib = 9.0;

/* the clock, the N(0,1) fill and the sort order shared with bench_backward.c (bench/bench_util.h) */
#define now_s bench_now
#define fill_normal bench_fill_normal
#define cmp_d bench_cmp_d

/* median wall time of fn over repeats: at least 3 (1 for calls over 5 s), at most 7, about 2 s
   (bench_shape: naive and tiled alternately, up to 31 rounds for calls under 50 ms) */
typedef int (*bench_fn)(void *);
static double time_median(bench_fn fn, void *arg)
{
    double t[7], t0, first;
    int n = 0, maxn = quick || few_reps ? 3 : 7;
    t0 = now_s();
    if (fn(arg) != 0) return -1.0;           /* warm-up, and the failure check */
    first = now_s() - t0;
    if (first > 5.0) return first;            /* a long call: one timing is enough (said so in RESULTS) */
    while (n < maxn) {
        t0 = now_s();
        fn(arg);
        t[n++] = now_s() - t0;
        if (n >= 3 && first * n > (quick || few_reps ? 0.5 : 2.0)) break;
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_d);
    return t[n / 2];
}

/* ---- the OpenBLAS core, and the Prescott mis-detection -------------------------------------- */
/* OpenBLAS's core name, and the re-exec with OPENBLAS_CORETYPE on a Prescott mis-detection (bench_util.h) */
#define corename bench_corename
#define fix_coretype bench_fix_coretype

/* ---- ceilings: sgemm GFLOP/s and memory read GB/s ----------------------------------------- */
#ifdef HAVE_OPENBLAS
typedef struct { int n, thr; float *a, *b, *c; } gemm_arg;
static int run_gemm(void *v)
{
    gemm_arg *g = (gemm_arg *)v;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n,
                0.0f, g->c, g->n);
    return 0;
}
/* sgemm GFLOP/s at n = 2048 on the current load, next to each row (matrices kept between calls) */
static double sgemm_now(int thr)
{
    static gemm_arg g;
    double t;
    if (!g.a) {
        g.n = 2048;
        g.a = (float *)malloc(sizeof(float) * 2048 * 2048); g.b = (float *)malloc(sizeof(float) * 2048 * 2048);
        g.c = (float *)malloc(sizeof(float) * 2048 * 2048);
        fill_normal(g.a, (size_t)2048 * 2048); fill_normal(g.b, (size_t)2048 * 2048);
    }
    openblas_set_num_threads(thr);
    {
        double best = 1e9, t0;
        int i;
        run_gemm(&g);
        for (i = 0; i < 3; i++) {
            t0 = now_s(); run_gemm(&g); t = now_s() - t0;
            if (t < best) best = t;
        }
        t = best;
    }
    openblas_set_num_threads(1);
    return 2.0 * 2048.0 * 2048.0 * 2048.0 / t * 1e-9;
}

static double sgemm_gflops(int n, int thr)
{
    gemm_arg g;
    double t;
    g.n = n; g.thr = thr;
    g.a = (float *)malloc(sizeof(float) * n * n); g.b = (float *)malloc(sizeof(float) * n * n);
    g.c = (float *)malloc(sizeof(float) * n * n);
    fill_normal(g.a, (size_t)n * n); fill_normal(g.b, (size_t)n * n);
    openblas_set_num_threads(thr);
    t = time_median(run_gemm, &g);
    openblas_set_num_threads(1);
    free(g.a); free(g.b); free(g.c);
    return 2.0 * n * n * (double)n / t * 1e-9;
}
#endif

typedef struct { uint64_t *buf; size_t n; int thr; } bw_arg;
static int run_bw(void *v)
{
    bw_arg *a = (bw_arg *)v;
    pthread_t th[64];
    bench_bw_part part[64];
    int t;
    for (t = 0; t < a->thr; t++) {
        part[t].p = a->buf + a->n / a->thr * t; part[t].n = a->n / a->thr;
        if (t > 0) pthread_create(&th[t], NULL, bench_bw_read, &part[t]);
    }
    bench_bw_read(&part[0]);
    for (t = 1; t < a->thr; t++) pthread_join(th[t], NULL);
    return part[0].sum == 42 ? 0 : 0;
}
/* read GB/s over `bytes` with thr threads */
static double mem_read_gbs(size_t bytes, int thr)
{
    bw_arg a;
    double t;
    a.n = bytes / 8; a.thr = thr > 64 ? 64 : thr;
    a.buf = (uint64_t *)malloc(a.n * 8);
    if (!a.buf) return 0.0;
    memset(a.buf, 1, a.n * 8);
    t = time_median(run_bw, &a);
    free(a.buf);
    return (double)(a.n / a.thr * a.thr * 8) / t * 1e-9;
}

/* ---- attention runs ------------------------------------------------------------------------- */
/* Decode shapes keep LAYERS copies of K/V and each call takes the next one, as a model's layers
   do: a copy was last read two calls and >= 2 x 268 MB ago, so it comes from memory, not from the
   260 MB L3 (the K/V GB/s would otherwise count cache hits). */
#define LAYERS 3
typedef struct { fa_params p; float *q, *k, *v, *o; int naive, nl, cur; float *kl[LAYERS], *vl[LAYERS]; } att_arg;
static void next_layer(att_arg *a)
{
    if (a->nl > 1) { a->cur = (a->cur + 1) % a->nl; a->k = a->kl[a->cur]; a->v = a->vl[a->cur]; }
}
static int run_att(void *v)
{
    att_arg *a = (att_arg *)v;
    next_layer(a);
    return a->naive ? (int)fa_naive(&a->p, a->q, a->k, a->v, a->o, NULL) : (int)fa_tiled(&a->p, a->q, a->k, a->v, a->o);
}
static void alloc_kv(att_arg *a, size_t nk, int layers)
{
    int i;
    a->nl = layers;
    for (i = 0; i < layers; i++) {
        a->kl[i] = (float *)malloc(nk * 4); a->vl[i] = (float *)malloc(nk * 4);
        fill_normal(a->kl[i], nk); fill_normal(a->vl[i], nk);
    }
    a->k = a->kl[0]; a->v = a->vl[0]; a->cur = 0;
}
static void free_kv(att_arg *a)
{
    int i;
    for (i = 0; i < a->nl; i++) { free(a->kl[i]); free(a->vl[i]); }
}

typedef struct { double ms, gflops, ceil; size_t ws; int ran; } res;

/* Two fa_tiled calls on the same data with different params, timed alternately (median of up
   to 7 rounds), so that load from other jobs falls on both: for the causal and thread ratios. The
   fastest of each side comes back too: a burst of other jobs on one core lands on the 2-thread run
   of a pair more than on the 1-thread run, so the median ratio reads low under load. */
typedef struct { double med_x, med_y, best_x, best_y; int n; } alt_res;
static alt_res time_alt(int B, int H, int Hkv, int Sq, int Sk, int D, int causal_x, int thr_x, int causal_y,
                        int thr_y)
{
    alt_res r;
    att_arg a;
    fa_params px, py;
    size_t nq = (size_t)B * H * Sq * D, nk = (size_t)B * Hkv * Sk * D;
    double tx[31], ty[31], t0, first;
    int n = 0, maxn = quick || few_reps ? 3 : 7;
    memset(&a, 0, sizeof a);
    a.p.batch = B; a.p.heads = H; a.p.kv_heads = Hkv; a.p.seq_q = Sq; a.p.seq_k = Sk; a.p.head_dim = D;
    a.p.pool = g_pool;
    px = a.p; px.causal = causal_x; px.threads = thr_x;
    py = a.p; py.causal = causal_y; py.threads = thr_y;
    a.q = (float *)malloc(nq * 4);
    a.o = (float *)malloc(nq * 4);
    fill_normal(a.q, nq);
    alloc_kv(&a, nk, Sq == 1 ? LAYERS : 1);
    next_layer(&a); t0 = now_s(); fa_tiled(&px, a.q, a.k, a.v, a.o); first = now_s() - t0;
    next_layer(&a); t0 = now_s(); fa_tiled(&py, a.q, a.k, a.v, a.o); first += now_s() - t0;
    while (n < maxn) {
        next_layer(&a); t0 = now_s(); fa_tiled(&px, a.q, a.k, a.v, a.o); tx[n] = now_s() - t0;
        next_layer(&a); t0 = now_s(); fa_tiled(&py, a.q, a.k, a.v, a.o); ty[n] = now_s() - t0;
        n++;
        if (n >= 3 && first * n > (quick || few_reps ? 0.5 : 2.0)) break;
    }
    qsort(tx, (size_t)n, sizeof tx[0], cmp_d);
    qsort(ty, (size_t)n, sizeof ty[0], cmp_d);
    r.med_x = 1e3 * tx[n / 2]; r.med_y = 1e3 * ty[n / 2];
    r.best_x = 1e3 * tx[0]; r.best_y = 1e3 * ty[0]; r.n = n;
    free(a.q); free_kv(&a); free(a.o);
    return r;
}

/* Issue #5's rows: the masks and score modifiers at one long causal shape, each against plain
   causal on the same data. Windows count only the visible (row, key) pairs, so a window's time
   should be about its share of the causal pairs (W/S plus the diagonal band). */
static void bench_modifiers(int S, int D)
{
    /* bias 1: [B][H][1][Sk] (one value per key, a padding mask's layout); 2: packed [B][H][S][S],
       only where it fits in 1 GiB */
    static const struct { const char *name; int wl; float cap; int alibi, bias; } v[] = {
        { "causal", 0, 0.0f, 0, 0 }, { "window256", 256, 0.0f, 0, 0 }, { "window4096", 4096, 0.0f, 0, 0 },
        { "softcap30", 0, 30.0f, 0, 0 }, { "alibi", 0, 0.0f, 1, 0 }, { "bias-key", 0, 0.0f, 0, 1 },
        { "bias-full", 0, 0.0f, 0, 2 } };
    const int B = 2, H = 4;
    const char *C = csv ? "# " : "";
    size_t nq = (size_t)B * H * S * D;
    float slopes[4];
    double base = 0.0, causal_pairs = 0.5 * (double)S * (S + 1);
    att_arg a;
    int i;
    memset(&a, 0, sizeof a);
    for (i = 0; i < H; i++) slopes[i] = 1.0f / (float)(2 << i);
    a.p.batch = B; a.p.heads = H; a.p.seq_q = S; a.p.seq_k = S; a.p.head_dim = D;
    a.p.causal = 1; a.p.threads = nthreads; a.p.pool = g_pool;
    a.q = (float *)malloc(nq * 4); a.o = (float *)malloc(nq * 4);
    fill_normal(a.q, nq);
    alloc_kv(&a, nq, 1);
    for (i = 0; i < (int)(sizeof v / sizeof v[0]); i++) {
        double ms, pairs = causal_pairs;
        int w = v[i].wl;
        size_t nb = (size_t)B * H * (v[i].bias == 2 ? (size_t)S : 1) * S;
        float *bias = NULL;
        if (w >= S || (v[i].bias == 2 && nb * sizeof(float) > ((size_t)1 << 30))) continue;
        if (v[i].bias) {
            if (!(bias = (float *)malloc(nb * sizeof(float)))) continue;
            fill_normal(bias, nb);
            a.p.bias_stride[0] = (int64_t)(nb / B); a.p.bias_stride[1] = (int64_t)(nb / B / H);
            a.p.bias_stride[2] = v[i].bias == 2 ? S : 0; a.p.bias_stride[3] = 1;
        }
        a.p.bias = bias;
        a.p.window_left = w; a.p.softcap = v[i].cap; a.p.alibi_slopes = v[i].alibi ? slopes : NULL;
        if (w > 0) pairs = 0.5 * (double)w * (w + 1) + (double)(S - w) * (w + 1);
        ms = 1e3 * time_median(run_att, &a);
        if (i == 0) base = ms;
        printf("%smodifier: B=%d H=%d S=%d D=%d causal %-10s %9.2f ms  %6.1f GFLOP/s (visible pairs)  "
               "%.3f of plain causal time, %.3f of its pairs\n", C, B, H, S, D, v[i].name, ms,
               4.0 * B * H * pairs * D / (ms * 1e-3) * 1e-9, ms / base, pairs / causal_pairs);
        a.p.bias = NULL;
        free(bias);
    }
    free(a.q); free(a.o); free_kv(&a);
}

/* Largest naive score matrix the bench allocates: --naive-mem, and at most 60% of the memory
   available when the bench starts (teammates' jobs share this machine). */
static double avail_bytes = 0.0;
static double naive_budget(void)
{
    double b = naive_mem_gib * 1073741824.0;
    if (avail_bytes > 0 && 0.6 * avail_bytes < b) b = 0.6 * avail_bytes;
    return b;
}

static void print_header(void)
{
    if (csv) printf("kind,B,H,Hkv,Sq,Sk,D,causal,threads,naive_ms,tiled_ms,naive_gflops,tiled_gflops,speedup,"
                    "naive_ws_bytes,tiled_ws_bytes,tiled_pct_sgemm,sgemm_now_gflops,max_abs_diff,note\n");
    else printf("%-7s %2s %2s %3s %5s %5s %3s %3s %3s | %9s %9s | %8s %8s %6s %5s | %6s | %11s %8s | %7s\n",
                "kind", "B", "H", "Hkv", "Sq", "Sk", "D", "cau", "thr", "naive ms", "tiled ms",
                "naive GF", "tiled GF", "%sgemm", "sgemm", "x", "naive ws", "tiled ws", "maxdiff");
}

/* Times naive and tiled on one shape; returns tiled's result (naive's in *naive_out). */
static res bench_shape(const char *kind, int B, int H, int Hkv, int Sq, int Sk, int D, int causal, int thr,
                       int want_naive, double *kv_gbs, res *naive_out)
{
    att_arg a;
    res rn, rt;
    size_t nq = (size_t)B * H * Sq * D, nk = (size_t)B * Hkv * Sk * D;
    double flops = 4.0 * B * H * (double)Sq * Sk * D * (causal ? 0.5 : 1.0), diff = -1.0;
    float *o2 = NULL;
    const char *note = "";
    memset(&a, 0, sizeof a);
    memset(&rn, 0, sizeof rn);
    memset(&rt, 0, sizeof rt);
    a.p.batch = B; a.p.heads = H; a.p.kv_heads = Hkv; a.p.seq_q = Sq; a.p.seq_k = Sk; a.p.head_dim = D;
    a.p.causal = causal; a.p.threads = thr; a.p.pool = g_pool;
    a.q = (float *)malloc(nq * 4);
    a.o = (float *)malloc(nq * 4); o2 = (float *)malloc(nq * 4);
    fill_normal(a.q, nq);
    alloc_kv(&a, nk, Sq == 1 ? LAYERS : 1);
    rt.ws = fa_tiled_workspace_bytes(&a.p);
#ifdef HAVE_OPENBLAS
    rt.ceil = no_ceiling ? 0.0 : sgemm_now(thr);
#endif
    rn.ws = fa_naive_workspace_bytes(&a.p);
    if (!want_naive) note = "naive not run";
    else if ((double)rn.ws > naive_budget()) { note = "naive skipped: its score matrix exceeds the memory budget"; want_naive = 0; }
    /* tiled and naive timed alternately, so that load from other jobs falls on both alike */
    {
        double tt[31], tn[31], t0, first;
        int n = 0, maxn = quick || few_reps ? 3 : 7, ok_n = want_naive;
        a.naive = 0;
        t0 = now_s();
        rt.ran = run_att(&a) == 0;
        first = now_s() - t0;
        tt[0] = first;
        memcpy(o2, a.o, nq * 4);
        if (ok_n) {
            a.naive = 1;
            t0 = now_s();
            ok_n = run_att(&a) == 0;
            tn[0] = now_s() - t0;
            if (!ok_n) note = "naive failed (no memory?)";
            else { if (a.nl == 1) diff = fa_max_abs_diff(o2, a.o, nq); first += tn[0]; }
        }
        if (first < 0.05 && !(quick || few_reps)) maxn = 31;   /* short calls: more rounds, bursts of load average out */
        if (first > 5.0) n = 1;          /* a long call: its one timing is kept (the warm-up) */
        else
            while (n < maxn) {
                a.naive = 0;
                t0 = now_s(); run_att(&a); tt[n] = now_s() - t0;
                if (ok_n) { a.naive = 1; t0 = now_s(); run_att(&a); tn[n] = now_s() - t0; }
                n++;
                if (n >= 3 && first * n > (quick || few_reps ? 0.5 : 2.0)) break;
            }
        qsort(tt, (size_t)n, sizeof tt[0], cmp_d);
        rt.ms = rt.ran ? 1e3 * tt[n / 2] : -1.0;
        rt.gflops = rt.ran ? flops / rt.ms * 1e-6 : 0.0;
        if (ok_n) {
            qsort(tn, (size_t)n, sizeof tn[0], cmp_d);
            rn.ran = 1;
            rn.ms = 1e3 * tn[n / 2];
            rn.gflops = flops / rn.ms * 1e-6;
        }
    }
    if (kv_gbs) *kv_gbs = rt.ran ? 2.0 * (double)nk * 4 / (rt.ms * 1e-3) * 1e-9 : 0.0;
    if (csv)
        printf("%s,%d,%d,%d,%d,%d,%d,%d,%d,%.3f,%.3f,%.1f,%.1f,%.2f,%zu,%zu,%.1f,%.1f,%.2e,%s\n", kind, B, H, Hkv, Sq, Sk, D,
               causal, thr, rn.ran ? rn.ms : 0.0, rt.ms, rn.gflops, rt.gflops, rn.ran ? rn.ms / rt.ms : 0.0,
               rn.ws, rt.ws, rt.ceil > 0 ? 100.0 * rt.gflops / rt.ceil : 0.0, rt.ceil, diff, note);
    else {
        char nms[32], ngf[32], sp[32], df[32];
        if (rn.ran) {
            snprintf(nms, sizeof nms, "%.2f", rn.ms); snprintf(ngf, sizeof ngf, "%.1f", rn.gflops);
            snprintf(sp, sizeof sp, "%.2f", rn.ms / rt.ms);
            if (diff >= 0) snprintf(df, sizeof df, "%.1e", diff);
            else strcpy(df, "-");      /* decode: the two paths read different K/V copies */
        } else {
            strcpy(nms, "-"); strcpy(ngf, "-"); strcpy(sp, "-"); strcpy(df, "-");
        }
        printf("%-7s %2d %2d %3d %5d %5d %3d %3d %3d | %9s %9.2f | %8s %8.1f %5.0f%% %5.0f | %6s | %11zu %8zu | %7s %s\n",
               kind, B, H, Hkv, Sq, Sk, D, causal, thr, nms, rt.ms, ngf, rt.gflops,
               rt.ceil > 0 ? 100.0 * rt.gflops / rt.ceil : 0.0, rt.ceil, sp, rn.ws, rt.ws, df, note);
    }
    {   /* what the tiled call ran (fa_describe) */
        char what[400];
        fa_describe(&a.p, FA_CALL_TILED, what, sizeof what);
        printf("%s  %s\n", csv ? "#" : "       ", what);
    }
    fflush(stdout);
    free(a.q); free_kv(&a); free(a.o); free(o2);
    if (naive_out) *naive_out = rn;
    return rt;
}

/* ---- --dtype f16|bf16: half-precision storage against fp32 (issue 16) ------------------------
   Each row times fa_tiled on fp32 tensors and on the same values as fp16/bf16 alternately (medians
   of up to 7 rounds), beside the same-run ceilings: vdpbf16ps (where the CPU has AVX512-BF16),
   OpenBLAS sgemm, memory read bandwidth. Decode keeps LAYERS copies of K/V in both types (so that
   they come from memory) and gives K/V GB/s at the type's own bytes. */
typedef struct { fa_params p; const void *q, *k, *v; void *o; const void *kl[LAYERS], *vl[LAYERS]; int nl, cur; } half_arg;
static int run_half(void *v)
{
    half_arg *a = (half_arg *)v;
    if (a->nl > 1) { a->cur = (a->cur + 1) % a->nl; a->k = a->kl[a->cur]; a->v = a->vl[a->cur]; }
    return (int)fa_tiled(&a->p, a->q, a->k, a->v, a->o);
}

static int half_only = 0;         /* --half-only: the --dtype rows time the half call alone (fp32 ms 0) */
static double amx_ceiling = 0.0;  /* AMX tdpbf16ps GFLOP/s at nthreads, this run (0: none) */
static void half_row(fa_dtype dt, const char *kind, int B, int H, int Hkv, int Sq, int Sk, int D, int causal,
                     double dp_ceil, double bw)
{
    size_t nq = (size_t)B * H * Sq * D, nk = (size_t)B * Hkv * Sk * D;
    int layers = Sq == 1 ? LAYERS : 1, i, n = 0, maxn = quick || few_reps ? 3 : 7;
    half_arg x, y;           /* x fp32, y half */
    float *q = (float *)malloc(nq * 4), *o = (float *)malloc(nq * 4), *kf[LAYERS], *vf[LAYERS];
    uint16_t *qh, *oh = (uint16_t *)malloc(nq * 2), *kh[LAYERS], *vh[LAYERS];
    double tx[7], ty[7], t0, first, flops = 4.0 * B * H * (double)Sq * Sk * D * (causal ? 0.5 : 1.0), mx, my;
    char what[700];
    memset(&x, 0, sizeof x);
    x.p.batch = B; x.p.heads = H; x.p.kv_heads = Hkv; x.p.seq_q = Sq; x.p.seq_k = Sk; x.p.head_dim = D;
    x.p.causal = causal; x.p.threads = nthreads; x.p.pool = g_pool;
    y = x; y.p.dtype = dt;
    fill_normal(q, nq);
    qh = bench_to_half(dt, q, nq);
    for (i = 0; i < layers; i++) {
        kf[i] = (float *)malloc(nk * 4); vf[i] = (float *)malloc(nk * 4);
        fill_normal(kf[i], nk); fill_normal(vf[i], nk);
        kh[i] = bench_to_half(dt, kf[i], nk); vh[i] = bench_to_half(dt, vf[i], nk);
        x.kl[i] = kf[i]; x.vl[i] = vf[i]; y.kl[i] = kh[i]; y.vl[i] = vh[i];
    }
    x.nl = y.nl = layers;
    x.q = q; x.k = kf[0]; x.v = vf[0]; x.o = o;
    y.q = qh; y.k = kh[0]; y.v = vh[0]; y.o = oh;
    t0 = now_s();
    if ((!half_only && run_half(&x) != 0) || run_half(&y) != 0) { printf("%s: call failed\n", kind); goto done; }
    first = now_s() - t0;
    while (n < maxn) {
        t0 = now_s(); if (!half_only) run_half(&x); tx[n] = now_s() - t0;
        t0 = now_s(); run_half(&y); ty[n] = now_s() - t0;
        n++;
        if (n >= 3 && first * n > (quick || few_reps ? 0.5 : 2.0)) break;
    }
    qsort(tx, (size_t)n, sizeof tx[0], cmp_d); qsort(ty, (size_t)n, sizeof ty[0], cmp_d);
    mx = 1e3 * tx[n / 2]; my = 1e3 * ty[n / 2];
    if (Sq == 1)
        printf("%-7s %2d %2d %3d %5d %5d %3d %d %3d | %8.3f %8.3f | %5.2fx | K/V GB/s fp32 %6.1f %s %6.1f (%3.0f%% of %.1f)\n",
               kind, B, H, Hkv, Sq, Sk, D, causal, nthreads, mx, my, mx / my, 2.0 * nk * 4 / (mx * 1e-3) * 1e-9,
               bench_dtype_name(dt), 2.0 * nk * 2 / (my * 1e-3) * 1e-9, 100.0 * 2.0 * nk * 2 / (my * 1e-3) * 1e-9 / bw, bw);
    else
        printf("%-7s %2d %2d %3d %5d %5d %3d %d %3d | %8.2f %8.2f | %5.2fx | GFLOP/s fp32 %6.1f %s %6.1f (%3.0f%% of vdpbf16ps %.0f, %3.0f%% of sgemm %.0f, %3.0f%% of AMX %.0f)\n",
               kind, B, H, Hkv, Sq, Sk, D, causal, nthreads, mx, my, mx / my, flops / mx * 1e-6, bench_dtype_name(dt),
               flops / my * 1e-6, dp_ceil > 0 ? 100.0 * flops / my * 1e-6 / dp_ceil : 0.0, dp_ceil,
               gemm_ceiling > 0 ? 100.0 * flops / my * 1e-6 / gemm_ceiling : 0.0, gemm_ceiling,
               amx_ceiling > 0 ? 100.0 * flops / my * 1e-6 / amx_ceiling : 0.0, amx_ceiling);
    fa_describe(&y.p, FA_CALL_TILED, what, sizeof what);
    printf("          %s\n", what);
    fflush(stdout);
done:
    free(q); free(o); free(qh); free(oh);
    for (i = 0; i < layers; i++) { free(kf[i]); free(vf[i]); free(kh[i]); free(vh[i]); }
}

static int no_decode = 0;   /* --no-decode: the --dtype rows without the decode row */
static void half_rows(fa_dtype dt, double bw)
{
    double dp = bench_dpbf16_gflops(nthreads), amx = bench_amx_gflops(nthreads);
    amx_ceiling = amx;
    int S, D;
    printf("ceiling: vdpbf16ps %.1f GFLOP/s at %d threads%s; AMX tdpbf16ps %.1f%s; OpenBLAS sgemm %.1f; memory read %.1f GB/s\n",
           dp, nthreads, dp > 0 ? "" : " (no AVX512-BF16 on this CPU)", amx, amx > 0 ? "" : " (no AMX, or not permitted)",
           gemm_ceiling, bw);
    printf("%s tiled against fp32 tiled, same values, timed alternately (ms: medians; speed = fp32 ms / %s ms)\n",
           bench_dtype_name(dt), bench_dtype_name(dt));
    printf("kind     B  H Hkv    Sq    Sk   D c thr |  fp32 ms  %4s ms | speed |\n", bench_dtype_name(dt));
    for (D = 64; D <= 128; D *= 2)
        for (S = 512; S <= max_s && S <= 4096; S *= 2) half_row(dt, "prefill", 2, 4, 4, S, S, D, 0, dp, bw);
    if (max_s >= 4096) half_row(dt, "prefill", 2, 4, 4, 4096, 4096, 128, 1, dp, bw);
    if (!no_decode) half_row(dt, "decode", 1, 32, 8, 1, quick ? 8192 : 32768, 128, 0, dp, mem_read_gbs((size_t)1 << 30, nthreads));
}

int main(int argc, char **argv)
{
    int i, D, causal, S, use_pool = 0;
    fa_dtype half_dt = FA_F32;      /* --dtype */
    double gemm2 = 0, gemm1 = 0, bw = 0, bw1 = 0, t0 = now_s();
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv")) csv = 1;
        else if (!strcmp(argv[i], "--quick")) { quick = 1; if (max_s > 2048) max_s = 2048; }
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nthreads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-s") && i + 1 < argc) max_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--naive-mem") && i + 1 < argc) naive_mem_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-scaling")) no_scaling = 1;
        else if (!strcmp(argv[i], "--no-naive")) no_naive = 1;
        else if (!strcmp(argv[i], "--few-reps")) few_reps = 1;
        else if (!strcmp(argv[i], "--pool")) use_pool = 1;
        else if (!strcmp(argv[i], "--no-row-sgemm")) no_ceiling = 1;
        else if (!strcmp(argv[i], "--no-decode")) no_decode = 1;
        else if (!strcmp(argv[i], "--half-only")) half_only = 1;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            ++i;
            half_dt = !strcmp(argv[i], "f16") ? FA_F16 : !strcmp(argv[i], "bf16") ? FA_BF16 : FA_F32;
            if (half_dt == FA_F32) { fprintf(stderr, "bench: --dtype takes f16 or bf16\n"); return 2; }
        }
        else {
            fprintf(stderr, "usage: %s [--csv] [--threads N] [--quick] [--max-s N] [--naive-mem GiB] "
                    "[--no-scaling] [--no-naive] [--few-reps] [--pool] [--no-row-sgemm] [--dtype f16|bf16 [--no-decode] [--half-only]]\n", argv[0]);
            return 2;
        }
    }
    if (nthreads < 1) nthreads = 1;
    fix_coretype(argv);
    if (use_pool && fa_pool_create(nthreads, &g_pool) != FA_OK) {
        fprintf(stderr, "bench: fa_pool_create(%d) failed\n", nthreads);
        return 1;
    }
    avail_bytes = (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    {
        FILE *f = fopen("/proc/loadavg", "r");
        char buf[128];
        if (f && fgets(buf, sizeof buf, f)) {
            buf[strcspn(buf, "\n")] = 0;
            printf("%sload average before the run: %s (other jobs on this machine skew every number)\n",
                   csv ? "# " : "", buf);
        }
        if (f) fclose(f);
    }
#ifdef HAVE_OPENBLAS
    openblas_set_num_threads(1);
#endif
    {
        const char *ct = getenv("OPENBLAS_CORETYPE");
        printf("%sflashattn.h bench: fp32, threads=%d%s, %ld online cores, OpenBLAS core %s%s%s%s\n", csv ? "# " : "",
               nthreads, g_pool ? " on one fa_pool" : " started by each call", sysconf(_SC_NPROCESSORS_ONLN), corename(), ct ? " (OPENBLAS_CORETYPE=" : "", ct ? ct : "",
               ct ? (getenv("FA_BENCH_REEXEC") ? ", set by this bench after a Prescott mis-detection)" : ", from the environment)") : "");
    }
    {
        char info[512];
        fa_build_info(info, sizeof info);
        printf("%sbuild: %s\n", csv ? "# " : "", info);
    }
#ifdef HAVE_OPENBLAS
    gemm2 = sgemm_gflops(2048, nthreads);
    gemm1 = sgemm_gflops(2048, 1);
#endif
    bw = mem_read_gbs((size_t)1 << 30, nthreads);
    bw1 = mem_read_gbs((size_t)1 << 30, 1);
    gemm_ceiling = gemm2;
    printf("%sceiling: OpenBLAS sgemm 2048^3: %.1f GFLOP/s at %d threads, %.1f at 1; memory read: %.1f GB/s at "
           "%d threads, %.1f at 1 (1 GiB buffer)\n", csv ? "# " : "", gemm2, nthreads, gemm1, bw, nthreads, bw1);
    if (half_dt != FA_F32) {     /* --dtype: the half-precision rows only */
        half_rows(half_dt, bw);
        if (g_pool) fa_pool_destroy(g_pool);
        return 0;
    }
    print_header();
    {
        /* results by [causal][D index][log2(S/128)] */
        res rt[2][2][8], rn[2][2][8];
        int ns = 0, di, si, ok1 = 1, ok1b = 1, ok2 = 1, ok3 = 1, have2 = 0, have3 = 0, have1b = 0;
        double gbs = 0, scale_p = 0, scale_d = 0;
        const char *C = csv ? "# " : "";
        memset(rt, 0, sizeof rt); memset(rn, 0, sizeof rn);
        for (causal = 0; causal <= 1; causal++)
            for (D = 64, di = 0; D <= 128; D *= 2, di++)
                for (S = 128, si = 0; S <= max_s && si < 8; S *= 2, si++) {
                    rt[causal][di][si] = bench_shape("prefill", 2, 4, 4, S, S, D, causal, nthreads, !no_naive, NULL,
                                                     &rn[causal][di][si]);
                    if (si + 1 > ns) ns = si + 1;
                }
        {
            res r;
            bw = mem_read_gbs((size_t)1 << 30, nthreads);     /* again, next to the decode run */
            r = bench_shape("decode", 1, 32, 8, 1, quick ? 8192 : 32768, 128, 0, nthreads, !no_naive, &gbs, NULL);
            printf("%sdecode: K/V read %.1f GB/s = %.0f%% of the memory read bandwidth measured just before, "
                   "%.1f GB/s (%.3f ms)\n", C, gbs, 100.0 * gbs / bw, bw, r.ms);
        }
        if (!no_scaling && nthreads > 1) {
            double kv = 2.0 * 8 * (quick ? 8192.0 : 32768.0) * 128 * 4;
            int Ss = quick ? 2048 : 8192;
            alt_res t = time_alt(2, 4, 4, Ss, Ss, 128, 0, 1, 0, nthreads);
            scale_p = t.med_x / t.med_y;
            printf("%sscaling (tiled, 1 and %d threads timed alternately): prefill S=%d D=128 %.1f -> %.1f ms = %.2fx "
                   "(medians; fastest of %d each: %.1f -> %.1f ms = %.2fx)\n",
                   C, nthreads, Ss, t.med_x, t.med_y, scale_p, t.n, t.best_x, t.best_y, t.best_x / t.best_y);
            t = time_alt(1, 32, 8, 1, quick ? 8192 : 32768, 128, 0, 1, 0, nthreads);
            scale_d = t.med_x / t.med_y;
            printf("%sscaling: decode %.2f -> %.2f ms = %.2fx (K/V %.1f -> %.1f GB/s; the machine's own read "
                   "bandwidth goes %.1f -> %.1f GB/s = %.2fx from 1 to %d threads)\n", C, t.med_x, t.med_y, scale_d,
                   kv / t.med_x * 1e-6, kv / t.med_y * 1e-6, bw1, bw, bw / bw1, nthreads);
        }
        {
            /* causal against non-causal, timed alternately at the same S */
            int Sc;
            for (D = 64; D <= 128; D *= 2)
                for (Sc = quick ? 2048 : 4096; Sc <= (quick ? 2048 : 8192) && Sc <= max_s; Sc *= 2) {
                    alt_res t = time_alt(2, 4, 4, Sc, Sc, D, 0, nthreads, 1, nthreads);
                    double mn = t.med_x, mc = t.med_y;
                    printf("%scausal (timed alternately with non-causal): S=%d D=%d %.1f vs %.1f ms = %.2fx\n",
                           C, Sc, D, mc, mn, mn / mc);
                    have3 = 1;
                    if (mn / mc < 1.8) ok3 = 0;
                }
        }
        bench_modifiers(quick ? 2048 : (max_s < 16384 ? max_s : 16384), 64);
        if (!quick && max_s > 2048) bench_modifiers(2048, 64);   /* where the packed bias fits */
        /* the targets of issue #3, judged on this run's numbers */
        printf("%scausal speed-up over non-causal, from the table's rows (minutes apart):", C);
        for (di = 0; di < 2; di++)
            for (si = 0; si < ns; si++) {
                double x = rt[0][di][si].ms / rt[1][di][si].ms;
                printf(" D%d/S%d %.2fx", 64 << di, 128 << si, x);
            }
        printf("\n");
        for (causal = 0; causal <= 1; causal++)
            for (di = 0; di < 2; di++)
                for (si = 0; si < ns; si++) {
                    res *t = &rt[causal][di][si], *n = &rn[causal][di][si];
                    if (n->ran && n->ms < t->ms) ok1 = 0;
                    if (n->ran && (128 << si) >= 4096) { have1b = 1; if (n->ms < 2.0 * t->ms) ok1b = 0; }
                    if (!causal && (128 << si) >= 2048 && t->ceil > 0) {
                        have2 = 1;
                        if (t->gflops < 0.6 * t->ceil) ok2 = 0;
                    }
                }
        printf("%stargets: 1a tiled >= naive everywhere naive ran: %s; 1b >= 2x naive at S >= 4096: %s; "
               "2 >= 60%% of sgemm (measured next to each row; %.0f at the start) at S >= 2048: %s; 3 causal >= 1.8x at S >= 4096: %s; "
               "4 decode >= 50%% of bandwidth: %s; 5 1->%d threads >= 1.8x: %s\n", C,
               ok1 ? "met" : "MISSED", !have1b ? "not measured" : ok1b ? "met" : "MISSED",
               gemm_ceiling, !have2 ? "not measured" : ok2 ? "met" : "MISSED",
               !have3 ? "not measured" : ok3 ? "met" : "MISSED", gbs >= 0.5 * bw ? "met" : "MISSED", nthreads,
               no_scaling || nthreads < 2 ? "not measured" : (scale_p >= 1.8 && scale_d >= 1.8) ? "met" :
               scale_p >= 1.8 ? "met for prefill, MISSED for decode (memory-bound: see the bandwidth scaling)" :
               scale_d >= 1.8 ? "MISSED for prefill, met for decode" : "MISSED");
    }
    printf("%sbench wall time: %.0f s\n", csv ? "# " : "", now_s() - t0);
    fa_pool_destroy(g_pool);
    return 0;
}
