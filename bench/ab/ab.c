/* bench/ab/ab.c - A/B of two flashattn.h versions in one process (bench/ab/run.sh builds it): for each
   shape, fa_tiled calls alternate A, B, A, B (the order flips every pair) on the same data, and each
   side's median time and the median of the pair ratios B/A are printed, so that the load of a
   shared machine falls on both sides alike. Decode shapes cycle through 3 copies of K/V, so that K
   and V come from memory as in a model's layer loop. Columns: GFLOP/s (4 B H Sq Sk D, halved for
   causal; the mods rows count plain causal's work, compare their times), decode rows K/V GB/s.

   Usage: ab THREADS [prefill|small|decode|mods|all] [max S]; AB_SECS (default 6) bounds the time
   of each shape (at least 5 pairs, at most 41). */
#define _GNU_SOURCE
#include "ab.h"
#include "bench_util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LAYERS 3
#define MAXN 41

typedef int (*side_fn)(const ab_req *, const float *, const float *, const float *, float *, float *);

static void run(const char *name, ab_req r, double work, int layers)
{
    size_t nq = (size_t)r.B * r.H * r.Sq * r.D, nk = (size_t)r.B * r.Hkv * r.Sk * r.D;
    float *q = (float *)malloc(nq * 4), *o = (float *)malloc(nq * 4), *kl[LAYERS], *vl[LAYERS];
    double ta[MAXN], tb[MAXN], ratio[MAXN], t0, first, budget = getenv("AB_SECS") ? atof(getenv("AB_SECS")) : 6.0;
    double ma, mb;
    int n = 0, L, cur = 0;
    bench_fill_normal(q, nq);
    for (L = 0; L < layers; L++) {
        kl[L] = (float *)malloc(nk * 4); vl[L] = (float *)malloc(nk * 4);
        bench_fill_normal(kl[L], nk); bench_fill_normal(vl[L], nk);
    }
    t0 = bench_now();
    side_a(&r, q, kl[0], vl[0], o, NULL);
    side_b(&r, q, kl[0], vl[0], o, NULL);
    first = bench_now() - t0;
    while (n < MAXN) {
        int s;
        for (s = 0; s < 2; s++) {           /* A then B on even pairs, B then A on odd ones */
            int b_side = (n & 1) ? s == 0 : s == 1;
            side_fn f = b_side ? side_b : side_a;
            cur = (cur + 1) % layers;
            t0 = bench_now();
            f(&r, q, kl[cur], vl[cur], o, NULL);
            (b_side ? tb : ta)[n] = bench_now() - t0;
        }
        ratio[n] = tb[n] / ta[n];
        n++;
        if (n >= 5 && first * n > budget) break;
    }
    ma = bench_median(ta, n); mb = bench_median(tb, n);
    printf("%-48s t=%-2d A %9.3f ms %7.1f   B %9.3f ms %7.1f   B/A %.3f  pair ratios %.3f  n=%d\n", name, r.threads,
           ma * 1e3, work / ma * 1e-9, mb * 1e3, work / mb * 1e-9, mb / ma, bench_median(ratio, n), n);
    fflush(stdout);
    free(q); free(o);
    for (L = 0; L < layers; L++) { free(kl[L]); free(vl[L]); }
}

static ab_req req(int B, int H, int Hkv, int Sq, int Sk, int D, int causal, int threads)
{
    ab_req r;
    memset(&r, 0, sizeof r);
    r.B = B; r.H = H; r.Hkv = Hkv; r.Sq = Sq; r.Sk = Sk; r.D = D; r.causal = causal; r.threads = threads;
    return r;
}

int main(int argc, char **argv)
{
    int thr = argc > 1 ? atoi(argv[1]) : 1, S, D, c, i;
    const char *what = argc > 2 ? argv[2] : "all";
    int all = !strcmp(what, "all"), max_s = argc > 3 ? atoi(argv[3]) : 4096;
    char name[128];
    if (all || !strcmp(what, "prefill"))
        for (D = 64; D <= 128; D *= 2)
            for (S = 512; S <= max_s; S *= 2)
                for (c = 0; c < 2; c++) {
                    snprintf(name, sizeof name, "prefill B=2 H=4 S=%d D=%d%s", S, D, c ? " causal" : "");
                    run(name, req(2, 4, 4, S, S, D, c, thr), 4.0 * 2 * 4 * S * (double)S * D * (c ? 0.5 : 1.0), 1);
                }
    if (all || !strcmp(what, "small")) {
        static const int s[][6] = { { 1, 1024, 1024, 64, 0, 1 }, { 1, 2048, 2048, 128, 1, 1 }, { 1, 200, 4096, 64, 0, 1 },
                                    { 2, 40, 4096, 64, 0, 2 } };   /* H, Sq, Sk, D, causal, Hkv */
        for (i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "B=1 H=%d Sq=%d Sk=%d D=%d%s", s[i][0], s[i][1], s[i][2], s[i][3],
                     s[i][4] ? " causal" : "");
            run(name, req(1, s[i][0], s[i][5], s[i][1], s[i][2], s[i][3], s[i][4], thr),
                4.0 * s[i][0] * s[i][1] * (double)s[i][2] * s[i][3] * (s[i][4] ? 0.5 : 1.0), 1);
        }
    }
    if (all || !strcmp(what, "decode")) {
        static const int s[][6] = { { 1, 32, 8, 1, 32768, 128 }, { 1, 8, 2, 1, 4096, 64 }, { 1, 8, 2, 4, 5000, 64 },
                                    { 4, 16, 16, 1, 4096, 128 }, { 1, 16, 16, 1, 8192, 64 }, { 8, 32, 8, 1, 2048, 128 },
                                    { 1, 8, 8, 2, 4096, 128 } };   /* B, Hq, Hkv, Sq, Sk, D */
        for (i = 0; i < 7; i++) {
            snprintf(name, sizeof name, "decode B=%d Hq=%d Hkv=%d Sq=%d Sk=%d D=%d", s[i][0], s[i][1], s[i][2], s[i][3],
                     s[i][4], s[i][5]);
            run(name, req(s[i][0], s[i][1], s[i][2], s[i][3], s[i][4], s[i][5], 0, thr),
                2.0 * 4 * s[i][0] * s[i][2] * (double)s[i][4] * s[i][5], LAYERS);
        }
    }
    if (all || !strcmp(what, "mods")) {
        static const float slopes[4] = { 0.5f, 0.25f, 0.125f, 0.0625f };
        float *bias = NULL;
        const int Sm = 2048;
        for (i = 0; i < 5; i++) {
            ab_req r = req(2, 4, 4, Sm, Sm, 64, 1, thr);
            const char *what_mod = "";
            if (i == 0) { r.wl = 256; what_mod = "causal window256"; }
            if (i == 1) { r.cap = 30.0f; what_mod = "causal softcap30"; }
            if (i == 2) { r.alibi = slopes; what_mod = "causal alibi"; }
            if (i == 3) {   /* [B][H][1][Sk]: one value per key, a padding mask's layout */
                size_t nb = (size_t)2 * 4 * Sm;
                bias = (float *)malloc(nb * sizeof(float));
                bench_fill_normal(bias, nb);
                r.bias = bias; r.bs[0] = 4 * Sm; r.bs[1] = Sm; r.bs[2] = 0; r.bs[3] = 1;
                what_mod = "causal bias-key";
            }
            if (i == 4) { r.wl = 256; r.causal = 0; r.alibi = slopes; what_mod = "window256 (not causal) alibi"; }
            snprintf(name, sizeof name, "mods S=%d D=64 %s", Sm, what_mod);
            run(name, r, 4.0 * 2 * 4 * Sm * (double)Sm * 64 * 0.5, 1);
        }
        free(bias);
    }
    return 0;
}
