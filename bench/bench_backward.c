/* bench_backward.c - fa_naive_backward vs fa_tiled_backward on the CPU, fp32 (`make bench` runs it
   after bench; BENCH_BWD_ARGS passes options; `--csv` for machine-readable rows).

   Per row: the forward once (fa_tiled with p.lse) for o and lse, then the forward, fa_tiled_backward
   and fa_naive_backward timed alternately in rounds (medians), so that load from other jobs falls
   on all three alike, and an OpenBLAS sgemm 2048^3 at the same thread count timed just before the
   row (the ceiling the row is held to). Rows: B=2, H=4, S = 512 ... 8192 (--max-s), D = 64 and 128,
   non-causal and causal next to each other (the causal speed-up is read from that pair of rows); a
   GQA row (H=8, Hkv=2); a sliding-window row (causal, window_left = 256, S = 4096, timed
   alternately with plain causal on its own forward's lse); the memory row (the tiled backward's
   workspace at S = 131,072, D = 128, B = H = 1, queried, not run). Then the targets of issue #12,
   met or missed per row (printed, never a failure).

   FLOPs as FlashAttention counts them: the backward is 2.5 x the forward's 4*B*H*Sq*Sk*D, halved
   for causal; the window row counts its visible (row, key) pairs only.

   Options: --block-k N, --block-q N (the tiles: keys per item, query rows per block; 0 the library's),
            --threads N (default 2), --quick (S <= 2048, fewer repeats), --few-reps (fewer repeats
            only), --max-s N, --naive-mem GiB (largest naive workspace to allocate, default 9, and
            never over 60% of the memory available at the start), --csv, --no-naive, --no-row-sgemm
            (no sgemm next to each row: OpenBLAS's threads spin after each GEMM and share the cores
            with the next row's call; %sgemm is then 0), --pool (every call on one fa_pool of N
            threads made at the start), --dtype f16|bf16 (instead of the rows: fa_tiled_backward in that storage
            type against fp32 on the same values, S = 512..4096; issue 16). */
#define _GNU_SOURCE
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "bench_util.h"

static int csv = 0, quick = 0, few_reps = 0, nthreads = 2, no_naive = 0, no_ceiling = 0;
static int max_s = 8192, opt_bk = 0, opt_bq = 0;   /* --block-k, --block-q: the tiles (0: the library's) */
static double naive_mem_gib = 9.0, avail_bytes = 0.0;
static fa_pool *g_pool;

/* largest naive workspace the bench allocates: --naive-mem, and at most 60% of what was available */
static double naive_budget(void)
{
    double b = naive_mem_gib * 1073741824.0;
    if (avail_bytes > 0 && 0.6 * avail_bytes < b) b = 0.6 * avail_bytes;
    return b;
}

typedef struct {
    const char *kind;
    int B, H, Hkv, S, D, causal, wl;
} shape;

typedef struct {
    shape s;
    double pairs;                 /* visible (row, key) pairs per head, as counted */
    double fwd_ms, naive_ms, tiled_ms, alt_ms;  /* alt: plain causal (window row only) */
    double sgemm, diff, causal_x; /* causal_x: non-causal tiled ms / this causal row's (0: none) */
    size_t naive_ws, tiled_ws;
    int naive_ran, tiled_ran;
    char note[160];
    fa_params p;                  /* the request (fa_describe says what it ran) */
} row;

static double bwd_flops(const row *r) { return 2.5 * 4.0 * r->s.B * r->s.H * r->pairs * r->s.D; }
static double fwd_flops(const row *r) { return 4.0 * r->s.B * r->s.H * r->pairs * r->s.D; }
static double gf(double flops, double ms) { return ms > 0 ? flops / ms * 1e-6 : 0.0; }

static float *alloc_normal(size_t n)
{
    float *x = (float *)malloc(n * sizeof(float));
    if (x) bench_fill_normal(x, n);
    return x;
}

static void print_header(void)
{
    if (csv)
        printf("kind,B,H,Hkv,Sq,Sk,D,causal,window_left,threads,fwd_ms,naive_ms,tiled_ms,fwd_gflops,naive_gflops,"
               "tiled_gflops,tiled_pct_sgemm,sgemm_now_gflops,speedup,causal_speedup,naive_ws_bytes,tiled_ws_bytes,"
               "max_abs_diff,note\n");
    else
        printf("%-7s %2s %2s %3s %5s %3s %3s %3s %3s | %8s | %9s %9s | %7s %7s %6s %5s | %5s %5s | %11s %8s | %7s\n",
               "kind", "B", "H", "Hkv", "S", "D", "cau", "win", "thr", "fwd ms", "naive ms", "tiled ms",
               "naiveGF", "tiledGF", "%sgemm", "sgemm", "x", "caus", "naive ws", "tiled ws", "maxdiff");
}

static void print_row(const row *r)
{
    double ngf = r->naive_ran ? gf(bwd_flops(r), r->naive_ms) : 0.0, tgf = gf(bwd_flops(r), r->tiled_ms);
    double pct = r->sgemm > 0 ? 100.0 * tgf / r->sgemm : 0.0, x = r->naive_ran ? r->naive_ms / r->tiled_ms : 0.0;
    if (csv) {
        printf("%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.1f,%.1f,%.1f,%.1f,%.1f,%.2f,%.2f,%zu,%zu,%.2e,%s\n",
               r->s.kind, r->s.B, r->s.H, r->s.Hkv, r->s.S, r->s.S, r->s.D, r->s.causal, r->s.wl, nthreads,
               r->fwd_ms, r->naive_ran ? r->naive_ms : 0.0, r->tiled_ms, gf(fwd_flops(r), r->fwd_ms), ngf, tgf, pct,
               r->sgemm, x, r->causal_x, r->naive_ws, r->tiled_ws, r->diff, r->note);
    } else {
        char nms[24], ngs[24], xs[24], cx[24], df[24];
        if (r->naive_ran) {
            snprintf(nms, sizeof nms, "%.2f", r->naive_ms); snprintf(ngs, sizeof ngs, "%.1f", ngf);
            snprintf(xs, sizeof xs, "%.2f", x); snprintf(df, sizeof df, "%.1e", r->diff);
        } else {
            strcpy(nms, "-"); strcpy(ngs, "-"); strcpy(xs, "-"); strcpy(df, "-");
        }
        if (r->causal_x > 0) snprintf(cx, sizeof cx, "%.2f", r->causal_x);
        else strcpy(cx, "-");
        printf("%-7s %2d %2d %3d %5d %3d %3d %3d %3d | %8.2f | %9s %9.2f | %7s %7.1f %5.0f%% %5.0f | %5s %5s | %11zu %8zu | "
               "%7s %s\n", r->s.kind, r->s.B, r->s.H, r->s.Hkv, r->s.S, r->s.D, r->s.causal, r->s.wl, nthreads,
               r->fwd_ms, nms, r->tiled_ms, ngs, tgf, pct, r->sgemm, xs, cx, r->naive_ws, r->tiled_ws, df, r->note);
    }
    {   /* what the tiled backward ran (fa_describe) */
        char what[400];
        fa_describe(&r->p, FA_CALL_TILED_BACKWARD, what, sizeof what);
        printf("%s  %s\n", csv ? "#" : "       ", what);
    }
    fflush(stdout);
}

/* One row: see the top of the file. alt: also time the tiled backward of plain causal (same data,
   its own forward's o and lse) in each round. */
static row run_row(shape s, int want_naive, int alt)
{
    row r;
    fa_params p, pa;
    size_t nq = (size_t)s.B * s.H * s.S * s.D, nk = (size_t)s.B * s.Hkv * s.S * s.D, nl = (size_t)s.B * s.H * s.S;
    float *q, *k, *v, *o, *d_o, *lse, *dq, *dk, *dv, *dq2 = NULL, *dk2 = NULL, *dv2 = NULL, *oa = NULL, *lsea = NULL;
    double tf[64], tt[64], tn[64], ta[64], t0, first;
    int n = 0, maxn = quick || few_reps ? 3 : 7, i;
    double budget = quick || few_reps ? 0.5 : 2.0;

    memset(&r, 0, sizeof r);
    r.s = s;
    r.diff = -1.0;   /* not compared */
    if (s.wl > 0) r.pairs = 0.5 * (double)s.wl * (s.wl + 1) + (double)(s.S - s.wl) * (s.wl + 1);
    else r.pairs = (double)s.S * s.S * (s.causal ? 0.5 : 1.0);
    memset(&p, 0, sizeof p);
    p.batch = s.B; p.heads = s.H; p.kv_heads = s.Hkv; p.seq_q = s.S; p.seq_k = s.S; p.head_dim = s.D;
    p.causal = s.causal; p.window_left = s.wl; p.threads = nthreads; p.pool = g_pool;
    p.block_k = opt_bk; p.block_q = opt_bq;
    pa = p; pa.window_left = 0; pa.causal = 1;
    r.tiled_ws = fa_tiled_backward_workspace_bytes(&p);
    r.p = p;
    r.naive_ws = fa_naive_backward_workspace_bytes(&p);

    q = alloc_normal(nq); k = alloc_normal(nk); v = alloc_normal(nk); d_o = alloc_normal(nq);
    o = (float *)malloc(nq * 4); lse = (float *)malloc(nl * 4);
    dq = (float *)malloc(nq * 4); dk = (float *)malloc(nk * 4); dv = (float *)malloc(nk * 4);
    if (!no_naive && want_naive) {
        if ((double)r.naive_ws > naive_budget()) {
            snprintf(r.note, sizeof r.note, "naive skipped: its workspace %.1f GiB exceeds the budget %.1f GiB",
                     (double)r.naive_ws / 1073741824.0, naive_budget() / 1073741824.0);
            want_naive = 0;
        } else {
            dq2 = (float *)malloc(nq * 4); dk2 = (float *)malloc(nk * 4); dv2 = (float *)malloc(nk * 4);
        }
    } else {
        want_naive = 0;
        strcpy(r.note, "naive not run");
    }
    if (alt) { oa = (float *)malloc(nq * 4); lsea = (float *)malloc(nl * 4); }
    if (!q || !k || !v || !d_o || !o || !lse || !dq || !dk || !dv || (want_naive && (!dq2 || !dk2 || !dv2)) ||
        (alt && (!oa || !lsea))) {
        strcpy(r.note, "not run: the bench's own buffers could not be allocated");
        goto done;
    }
    r.sgemm = no_ceiling ? 0.0 : bench_sgemm_now(nthreads);
    /* the forward once: o and lse (and plain causal's for the alternate) */
    p.lse = lse; pa.lse = lsea;
    if (fa_tiled(&p, q, k, v, o) != FA_OK || (alt && fa_tiled(&pa, q, k, v, oa) != FA_OK)) {
        strcpy(r.note, "forward failed");
        goto done;
    }

    /* round 0 is the warm-up and the check; calls of over 5 s together keep it as the one timing */
    t0 = bench_now(); fa_tiled(&p, q, k, v, o); tf[0] = bench_now() - t0;
    t0 = bench_now(); r.tiled_ran = fa_tiled_backward(&p, q, k, v, o, d_o, dq, dk, dv) == FA_OK; tt[0] = bench_now() - t0;
    if (!r.tiled_ran) { strcpy(r.note, "tiled backward failed"); goto done; }
    first = tf[0] + tt[0];
    if (want_naive) {
        fa_status st;
        t0 = bench_now(); st = fa_naive_backward(&p, q, k, v, o, d_o, dq2, dk2, dv2); tn[0] = bench_now() - t0;
        if (st != FA_OK) {
            snprintf(r.note, sizeof r.note, "naive failed: %s", fa_status_string(st));
            for (i = 0; r.note[i]; i++) if (r.note[i] == ',') r.note[i] = ';';
            want_naive = 0;
        } else {
            double a = fa_max_abs_diff(dq, dq2, nq), b = fa_max_abs_diff(dk, dk2, nk), c = fa_max_abs_diff(dv, dv2, nk);
            r.diff = a > b ? a : b;
            if (c > r.diff) r.diff = c;
            first += tn[0];
        }
    }
    if (alt) {
        t0 = bench_now(); fa_tiled_backward(&pa, q, k, v, oa, d_o, dq, dk, dv); ta[0] = bench_now() - t0;
        first += ta[0];
    }
    if (first < 0.05 && !(quick || few_reps)) maxn = 31;
    if (first > 5.0) n = 1;
    else
        while (n < maxn) {
            t0 = bench_now(); fa_tiled(&p, q, k, v, o); tf[n] = bench_now() - t0;
            t0 = bench_now(); fa_tiled_backward(&p, q, k, v, o, d_o, dq, dk, dv); tt[n] = bench_now() - t0;
            if (want_naive) { t0 = bench_now(); fa_naive_backward(&p, q, k, v, o, d_o, dq2, dk2, dv2); tn[n] = bench_now() - t0; }
            if (alt) { t0 = bench_now(); fa_tiled_backward(&pa, q, k, v, oa, d_o, dq, dk, dv); ta[n] = bench_now() - t0; }
            n++;
            if (n >= 3 && first * n > budget) break;
        }
    r.fwd_ms = 1e3 * bench_median(tf, n);
    r.tiled_ms = 1e3 * bench_median(tt, n);
    if (want_naive) { r.naive_ran = 1; r.naive_ms = 1e3 * bench_median(tn, n); }
    if (alt) {
        r.alt_ms = 1e3 * bench_median(ta, n);
        size_t l = strlen(r.note);
        snprintf(r.note + l, sizeof r.note - l, "%splain causal %.2f ms timed alternately", l ? "; " : "", r.alt_ms);
    }
done:
    free(q); free(k); free(v); free(d_o); free(o); free(lse); free(dq); free(dk); free(dv);
    free(dq2); free(dk2); free(dv2); free(oa); free(lsea);
    return r;
}

/* ---- the targets of issue #12, judged on this run's rows ----------------------------------- */
static const char *verdict(int applies, int ok) { return !applies ? "-" : ok ? "met" : "MISSED"; }

static void target_table(const row *rows, int nr, size_t mem_ws)
{
    const char *C = csv ? "# " : "";
    int i, app[4] = { 0, 0, 0, 0 }, met[4] = { 0, 0, 0, 0 };
    printf("%s\n%stargets (issue #12; judged on this run, nothing fails): T1a tiled >= naive at S >= 512; "
           "T1b tiled >= 2x naive at S >= 4096; T2 tiled >= 60%% of the sgemm timed next to the row at S >= 2048; "
           "T3 causal >= 1.8x non-causal (the row before it) at S >= 4096\n", C, C);
    printf("%s%-7s %3s %5s %3s %3s | %-16s | %-16s | %-17s | %-16s\n", C, "kind", "Hkv", "S", "D", "cau", "T1a x>=1",
           "T1b x>=2", "T2 >=60% sgemm", "T3 causal>=1.8x");
    for (i = 0; i < nr; i++) {
        const row *r = &rows[i];
        double x = r->naive_ran && r->tiled_ran ? r->naive_ms / r->tiled_ms : 0.0;
        double pct = r->sgemm > 0 && r->tiled_ran ? 100.0 * gf(bwd_flops(r), r->tiled_ms) / r->sgemm : 0.0;
        int a[4], ok[4], t;
        char c[4][32];
        a[0] = x > 0 && r->s.S >= 512; ok[0] = x >= 1.0;
        a[1] = x > 0 && r->s.S >= 4096; ok[1] = x >= 2.0;
        a[2] = pct > 0 && r->s.S >= 2048; ok[2] = pct >= 60.0;
        a[3] = r->causal_x > 0 && r->s.S >= 4096; ok[3] = r->causal_x >= 1.8;
        for (t = 0; t < 4; t++) {
            app[t] += a[t]; met[t] += a[t] && ok[t];
            if (!a[t]) strcpy(c[t], "-");
            else snprintf(c[t], sizeof c[t], "%s (%.*f%s)", verdict(1, ok[t]), t == 2 ? 0 : 2,
                          t == 0 || t == 1 ? x : t == 2 ? pct : r->causal_x, t == 2 ? "%" : "x");
        }
        printf("%s%-7s %3d %5d %3d %3d | %-16s | %-16s | %-17s | %-16s\n", C, r->s.kind, r->s.Hkv, r->s.S, r->s.D,
               r->s.causal, c[0], c[1], c[2], c[3]);
    }
    printf("%stargets summary: T1a %d/%d met, T1b %d/%d, T2 %d/%d, T3 %d/%d (rows where the target applies and was "
           "measured); T4 memory: tiled backward workspace at S=131072 D=128 B=H=1, %d threads: %zu bytes = %.1f MB "
           "(< 64 MB: %s)\n", C, met[0], app[0], met[1], app[1], met[2], app[2], met[3], app[3], nthreads, mem_ws,
           (double)mem_ws / 1e6, mem_ws > 0 && mem_ws < 64000000u ? "met" : "MISSED");
}

/* ---- --dtype f16|bf16: the backward in half-precision storage against fp32 (issue 16) --------
   Per row: the fp32 forward once (o, lse; o rounded into the half type), then fa_tiled_backward on
   fp32 tensors and on the same values in fp16/bf16 timed alternately (medians of up to 7 rounds). */
static void half_bwd_row(fa_dtype dt, int B, int H, int S, int D, int causal)
{
    size_t n = (size_t)B * H * S * D, rows = (size_t)B * H * S;
    float *x[5], *g[3], *lse = (float *)malloc(rows * 4);
    uint16_t *h[5], *hg[3];
    fa_params p, ph;
    double t32[7], th[7], t0, first, m32, mh, flops = 2.5 * 4.0 * B * H * (double)S * S * D * (causal ? 0.5 : 1.0);
    int i, k = 0, maxn = quick || few_reps ? 3 : 7;
    char what[700];
    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = H; p.seq_q = p.seq_k = S; p.head_dim = D; p.causal = causal; p.threads = nthreads;
    p.pool = g_pool; p.lse = lse;
    for (i = 0; i < 5; i++) x[i] = alloc_normal(n);            /* q, k, v, o, d_o */
    for (i = 0; i < 3; i++) { g[i] = (float *)malloc(n * 4); hg[i] = (uint16_t *)malloc(n * 2); }
    for (i = 0; i < 5; i++) if (i != 3) { h[i] = bench_to_half(dt, x[i], n); fa__kernels_for(0)->h2f(dt, h[i], x[i], (int)n); }
    fa_tiled(&p, x[0], x[1], x[2], x[3]);
    h[3] = bench_to_half(dt, x[3], n);
    fa__kernels_for(0)->h2f(dt, h[3], x[3], (int)n);
    ph = p; ph.dtype = dt;
    t0 = bench_now();
    fa_tiled_backward(&p, x[0], x[1], x[2], x[3], x[4], g[0], g[1], g[2]);
    fa_tiled_backward(&ph, h[0], h[1], h[2], h[3], h[4], hg[0], hg[1], hg[2]);
    first = bench_now() - t0;
    while (k < maxn) {
        t0 = bench_now(); fa_tiled_backward(&p, x[0], x[1], x[2], x[3], x[4], g[0], g[1], g[2]); t32[k] = bench_now() - t0;
        t0 = bench_now(); fa_tiled_backward(&ph, h[0], h[1], h[2], h[3], h[4], hg[0], hg[1], hg[2]); th[k] = bench_now() - t0;
        k++;
        if (k >= 3 && first * k > (quick || few_reps ? 0.5 : 2.0)) break;
    }
    m32 = 1e3 * bench_median(t32, k); mh = 1e3 * bench_median(th, k);
    printf("prefill %2d %2d %5d %3d %d %3d | %9.2f %9.2f | %5.2fx | GFLOP/s fp32 %6.1f %s %6.1f\n", B, H, S, D, causal,
           nthreads, m32, mh, m32 / mh, gf(flops, m32), bench_dtype_name(dt), gf(flops, mh));
    fa_describe(&ph, FA_CALL_TILED_BACKWARD, what, sizeof what);
    printf("          %s\n", what);
    fflush(stdout);
    for (i = 0; i < 5; i++) { free(x[i]); free(h[i]); }
    for (i = 0; i < 3; i++) { free(g[i]); free(hg[i]); }
    free(lse);
}

static void half_bwd_rows(fa_dtype dt)
{
    int S, D, causal;
    printf("%s fa_tiled_backward against fp32 fa_tiled_backward, same values, timed alternately (speed = fp32 ms / %s ms;"
           " GFLOP/s = 2.5 x 4*B*H*S^2*D, halved for causal)\n", bench_dtype_name(dt), bench_dtype_name(dt));
    printf("kind     B  H     S   D c thr |   fp32 ms   %4s ms | speed |\n", bench_dtype_name(dt));
    for (D = 64; D <= 128; D *= 2)
        for (S = 512; S <= max_s && S <= 4096; S *= 2)
            for (causal = 0; causal <= 1; causal++) half_bwd_row(dt, 2, 4, S, D, causal);
}

int main(int argc, char **argv)
{
    row rows[64];
    int nr = 0, i, D, S, causal, use_pool = 0, S_win, S_gqa;
    fa_dtype half_dt = FA_F32;     /* --dtype */
    double t_start = bench_now(), gemm0 = 0.0;
    size_t mem_ws, mem_naive, mem_fwd;
    char la[128];
    const char *C;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv")) csv = 1;
        else if (!strcmp(argv[i], "--quick")) { quick = 1; if (max_s > 2048) max_s = 2048; }
        else if (!strcmp(argv[i], "--few-reps")) few_reps = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nthreads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-s") && i + 1 < argc) max_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--naive-mem") && i + 1 < argc) naive_mem_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-naive")) no_naive = 1;
        else if (!strcmp(argv[i], "--no-row-sgemm")) no_ceiling = 1;
        else if (!strcmp(argv[i], "--pool")) use_pool = 1;
        else if (!strcmp(argv[i], "--block-k") && i + 1 < argc) opt_bk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--block-q") && i + 1 < argc) opt_bq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            ++i;
            half_dt = !strcmp(argv[i], "f16") ? FA_F16 : !strcmp(argv[i], "bf16") ? FA_BF16 : FA_F32;
            if (half_dt == FA_F32) { fprintf(stderr, "bench_backward: --dtype takes f16 or bf16\n"); return 2; }
        }
        else {
            fprintf(stderr, "usage: %s [--csv] [--threads N] [--quick] [--few-reps] [--max-s N] [--naive-mem GiB] "
                    "[--no-naive] [--no-row-sgemm] [--pool] [--block-k N] [--block-q N]\n", argv[0]);
            return 2;
        }
    }
    if (nthreads < 1) nthreads = 1;
    if (max_s < 512) max_s = 512;
    C = csv ? "# " : "";
    bench_fix_coretype(argv);
    if (use_pool && fa_pool_create(nthreads, &g_pool) != FA_OK) {
        fprintf(stderr, "bench_backward: fa_pool_create(%d) failed\n", nthreads);
        return 1;
    }
    avail_bytes = bench_avail_bytes();
    printf("%sload average before the run: %s (other jobs on this machine skew every number)\n", C,
           bench_loadavg(la, sizeof la));
#ifdef BENCH_HAVE_OPENBLAS
    openblas_set_num_threads(1);
#endif
    printf("%sflashattn.h backward bench: fp32, threads=%d%s, %ld online cores, OpenBLAS core %s%s\n", C, nthreads,
           g_pool ? " on one fa_pool" : " started by each call", sysconf(_SC_NPROCESSORS_ONLN), bench_corename(),
           bench_coretype_note());
    {
        char info[512];
        fa_build_info(info, sizeof info);
        printf("%sbuild: %s\n", C, info);
    }
    if (half_dt != FA_F32) {     /* --dtype: the half-precision rows only */
        half_bwd_rows(half_dt);
        if (g_pool) fa_pool_destroy(g_pool);
        return 0;
    }
    if (!no_ceiling) {
        gemm0 = bench_sgemm_gflops(2048, nthreads, quick || few_reps ? 3 : 7, quick || few_reps ? 0.5 : 2.0);
        printf("%sceiling: OpenBLAS sgemm 2048^3 %.1f GFLOP/s at %d threads at the start; each row is held to one "
               "timed just before it (column sgemm)\n", C, gemm0, nthreads);
    } else
        printf("%sno sgemm timed (--no-row-sgemm): %%sgemm reads 0\n", C);
    printf("%sbackward FLOPs = 2.5 x 4*B*H*Sq*Sk*D (halved for causal; the window row counts visible pairs); "
           "times are medians of rounds of forward, tiled and naive backward timed alternately; x = naive/tiled; "
           "caus = non-causal tiled ms / causal (the row before); maxdiff = max |naive - tiled| over dq, dk, dv\n", C);
    print_header();
    for (D = 64; D <= 128; D *= 2)
        for (S = 512; S <= max_s && S <= 8192; S *= 2)
            for (causal = 0; causal <= 1; causal++) {
                shape s = { "prefill", 2, 4, 4, 0, 0, 0, 0 };
                s.S = S; s.D = D; s.causal = causal;
                rows[nr] = run_row(s, 1, 0);
                if (causal && nr > 0 && rows[nr - 1].tiled_ran && rows[nr].tiled_ran)
                    rows[nr].causal_x = rows[nr - 1].tiled_ms / rows[nr].tiled_ms;
                print_row(&rows[nr]);
                nr++;
            }
    S_gqa = max_s < 2048 ? max_s : 2048;
    {
        shape s = { "gqa", 2, 8, 2, 0, 128, 0, 0 };
        s.S = S_gqa;
        rows[nr] = run_row(s, 1, 0);
        print_row(&rows[nr]);
        nr++;
    }
    S_win = max_s < 4096 ? max_s : 4096;
    {
        shape s = { "window", 2, 4, 4, 0, 64, 1, 256 };
        const row *r = &rows[nr];
        s.S = S_win;
        rows[nr] = run_row(s, 1, 1);
        print_row(&rows[nr]);
        nr++;
        if (r->tiled_ran && r->alt_ms > 0)
            printf("%swindow: B=2 H=4 S=%d D=64 causal window_left=256: tiled backward %.2f ms against plain causal "
                   "%.2f ms (timed alternately) = %.3f of its time, for %.3f of its visible pairs\n", C, S_win,
                   r->tiled_ms, r->alt_ms, r->tiled_ms / r->alt_ms, r->pairs / (0.5 * (double)S_win * (S_win + 1)));
    }
    {
        fa_params p;
        memset(&p, 0, sizeof p);
        p.batch = 1; p.heads = 1; p.seq_q = 131072; p.seq_k = 131072; p.head_dim = 128; p.threads = nthreads;
        p.pool = g_pool;
        mem_ws = fa_tiled_backward_workspace_bytes(&p);
        mem_naive = fa_naive_backward_workspace_bytes(&p);
        mem_fwd = fa_tiled_workspace_bytes(&p);
        if (csv)
            printf("memory,1,1,1,131072,131072,128,0,0,%d,0,0,0,0,0,0,0,0,0,0,%zu,%zu,0,workspace queried; not run\n",
                   nthreads, mem_naive, mem_ws);
        else
            printf("memory: S=131072 D=128 B=H=1, %d threads: tiled backward workspace %zu bytes (%.1f MB; the "
                   "forward's %zu), naive backward's %zu (%.1f GiB); queried, not run\n", nthreads, mem_ws,
                   (double)mem_ws / 1e6, mem_fwd, mem_naive, (double)mem_naive / 1073741824.0);
    }
    target_table(rows, nr, mem_ws);
    printf("%sload average after the run: %s; bench wall time: %.0f s\n", C, bench_loadavg(la, sizeof la),
           bench_now() - t_start);
    fa_pool_destroy(g_pool);
    return 0;
}
