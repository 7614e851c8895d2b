/* decode_ab.c - issue 16's decode row (B = 1, H = 32, Hkv = 8, Sq = 1, Sk = 32768, D = 128) through
   several builds of the header in one process (bench/fa_shim.c's shim_decode, dlopen'ed), bf16 and
   fp32 K/V, with the memory read ceiling of the same thread count measured before and after.
   Per thread count: R rounds; in each round every contender (build x dtype, in an order rotated from
   round to round) is timed as the median of a few calls; the table gives the median over rounds and
   the min-max of the round medians. LAYERS copies of K/V are taken in turn (3 x (K + V): 403 MB in
   bf16, 805 MB in fp32, past the L3), so K/V come from memory. Each build's bf16 output is compared
   with the first build's (max abs difference) and with its own output at the first thread count
   (bitwise: a row's result does not depend on the threads).

       cc -O2 -std=c99 -I. bench/decode_ab.c -o build/decode_ab -ldl -lm -lpthread
       build/decode_ab --threads 2 16 --rounds 7 main=shim_main.so new=shim_new.so */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LAYERS 3
#define MAXB 8
#define MAXT 4

typedef int (*decode_fn)(int, const void *, const void *, const void *, void *, int, int, int, int, int, void *);
typedef void *(*pool_fn)(int);
typedef void (*pool_free_fn)(void *);
typedef double (*bw_fn)(int, double);
typedef struct { const char *name; decode_fn dec; pool_fn pool; pool_free_fn pool_free; bw_fn bw; } build;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_d);
    return t[n / 2];
}
static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float unif(void)     /* uniform in [-2, 2): splitmix64 */
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / 16777216.0 * 4.0 - 2.0);
}
static uint16_t to_bf16(float x)   /* round to nearest even (finite inputs) */
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int main(int argc, char **argv)
{
    const int H = 32, Hkv = 8, D = 128;
    int Sk = 32768, rounds = 7, nthr = 0, thr[MAXT], nb = 0, i, l, t, b, c, rd;
    build bs[MAXB];
    size_t nq = (size_t)H * D, nkv;
    float *q32, *k32[LAYERS], *v32[LAYERS], *o32;
    uint16_t *qh, *kh[LAYERS], *vh[LAYERS], *oh[MAXB], *oh_first[MAXB];
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads")) {
            while (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9' && nthr < MAXT) thr[nthr++] = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sk") && i + 1 < argc) Sk = atoi(argv[++i]);
        else if (strchr(argv[i], '=') && nb < MAXB) {
            char *eq = strchr(argv[i], '=');
            void *h;
            *eq = 0;
            h = dlopen(eq + 1, RTLD_NOW | RTLD_LOCAL);
            if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
            bs[nb].name = argv[i];
            *(void **)&bs[nb].dec = dlsym(h, "shim_decode");
            *(void **)&bs[nb].pool = dlsym(h, "shim_pool");
            *(void **)&bs[nb].pool_free = dlsym(h, "shim_pool_free");
            *(void **)&bs[nb].bw = dlsym(h, "shim_mem_read");
            if (!bs[nb].dec || !bs[nb].pool || !bs[nb].pool_free || !bs[nb].bw) { fprintf(stderr, "%s: no shim_decode\n", argv[i]); return 1; }
            nb++;
        } else {
            fprintf(stderr, "usage: %s [--threads N ...] [--rounds R] [--sk Sk] name=shim.so ...\n", argv[0]);
            return 2;
        }
    }
    if (nb == 0 || rounds < 1) return 2;
    if (nthr == 0) { thr[0] = 2; nthr = 1; }
    nkv = (size_t)Hkv * Sk * D;
    q32 = malloc(nq * 4); o32 = malloc(nq * 4); qh = malloc(nq * 2);
    for (i = 0; i < (int)nq; i++) { qh[i] = to_bf16(unif()); q32[i] = from_bf16(qh[i]); }
    for (l = 0; l < LAYERS; l++) {
        size_t j;
        k32[l] = malloc(nkv * 4); v32[l] = malloc(nkv * 4); kh[l] = malloc(nkv * 2); vh[l] = malloc(nkv * 2);
        if (!k32[l] || !v32[l] || !kh[l] || !vh[l]) { fprintf(stderr, "out of memory\n"); return 1; }
        for (j = 0; j < nkv; j++) {
            kh[l][j] = to_bf16(unif()); k32[l][j] = from_bf16(kh[l][j]);
            vh[l][j] = to_bf16(unif()); v32[l][j] = from_bf16(vh[l][j]);
        }
    }
    for (b = 0; b < nb; b++) { oh[b] = malloc(nq * 2); oh_first[b] = malloc(nq * 2); }
    printf("decode B=1 H=%d Hkv=%d Sq=1 Sk=%d D=%d, %d K/V copies; ms: median over %d rotated rounds [min-max]\n",
           H, Hkv, Sk, D, LAYERS, rounds);
    for (t = 0; t < nthr; t++) {
        int n = 2 * nb, cur = 0, reps[2 * MAXB];
        void *pools[MAXB];
        double per[2 * MAXB][64], med[2 * MAXB], bw0, bw1, bw;
        for (b = 0; b < nb; b++) pools[b] = bs[b].pool(thr[t]);
        bw0 = bs[0].bw(thr[t], (double)(1u << 30));
        /* contender c: build c / 2, bf16 (c even) or fp32 (c odd); reps from a warm-up */
        for (c = 0; c < n; c++) {
            const build *B_ = &bs[c / 2];
            double t0;
            int r;
            for (r = 0; r < 2; r++) {
                cur = (cur + 1) % LAYERS;
                if (c % 2 == 0) B_->dec(2, qh, kh[cur], vh[cur], oh[c / 2], H, Hkv, Sk, D, thr[t], pools[c / 2]);
                else B_->dec(0, q32, k32[cur], v32[cur], o32, H, Hkv, Sk, D, thr[t], pools[c / 2]);
            }
            t0 = now_s();
            cur = (cur + 1) % LAYERS;
            if (c % 2 == 0) B_->dec(2, qh, kh[cur], vh[cur], oh[c / 2], H, Hkv, Sk, D, thr[t], pools[c / 2]);
            else B_->dec(0, q32, k32[cur], v32[cur], o32, H, Hkv, Sk, D, thr[t], pools[c / 2]);
            reps[c] = (int)(0.03 / (now_s() - t0 + 1e-6));
            reps[c] = reps[c] < 3 ? 3 : reps[c] > 25 ? 25 : reps[c];
        }
        for (rd = 0; rd < rounds && rd < 64; rd++) {
            int k;
            for (k = 0; k < n; k++) {
                int r;
                double ts[32];
                const build *B_;
                c = (k + rd) % n;
                B_ = &bs[c / 2];
                usleep(5000);
                for (r = 0; r < reps[c]; r++) {
                    double t0;
                    int st;
                    cur = (cur + 1) % LAYERS;
                    t0 = now_s();
                    if (c % 2 == 0) st = B_->dec(2, qh, kh[cur], vh[cur], oh[c / 2], H, Hkv, Sk, D, thr[t], pools[c / 2]);
                    else st = B_->dec(0, q32, k32[cur], v32[cur], o32, H, Hkv, Sk, D, thr[t], pools[c / 2]);
                    ts[r] = now_s() - t0;
                    if (st != 0) { fprintf(stderr, "%s: status %d\n", B_->name, st); return 1; }
                }
                per[c][rd] = median(ts, reps[c]);
            }
        }
        bw1 = bs[0].bw(thr[t], (double)(1u << 30));
        bw = 0.5 * (bw0 + bw1);
        printf("threads %d: memory read %.1f GB/s before, %.1f after (mean %.1f)\n", thr[t], bw0, bw1, bw);
        for (c = 0; c < n; c++) {
            double tmp[64];
            memcpy(tmp, per[c], sizeof(double) * (size_t)rounds);
            med[c] = median(tmp, rounds);
        }
        for (c = 0; c < n; c++) {
            double gbs = 2.0 * (double)nkv * (c % 2 == 0 ? 2 : 4) / med[c] * 1e-9, lo = per[c][0], hi = per[c][0];
            for (rd = 1; rd < rounds; rd++) { if (per[c][rd] < lo) lo = per[c][rd]; if (per[c][rd] > hi) hi = per[c][rd]; }
            printf("DEC thr=%-2d %-10s %-4s %8.3f ms [%.3f-%.3f] K/V %6.1f GB/s = %3.0f%% of the read",
                   thr[t], bs[c / 2].name, c % 2 ? "f32" : "bf16", 1e3 * med[c], 1e3 * lo, 1e3 * hi, gbs, 100.0 * gbs / bw);
            if (c % 2 == 0) {
                /* the same K/V copy (0) for every build and thread count: its bits */
                double dmax = 0.0;
                size_t j;
                int same = 1;
                bs[c / 2].dec(2, qh, kh[0], vh[0], oh[c / 2], H, Hkv, Sk, D, thr[t], pools[c / 2]);
                if (t == 0) memcpy(oh_first[c / 2], oh[c / 2], nq * 2);
                else same = !memcmp(oh_first[c / 2], oh[c / 2], nq * 2);
                for (j = 0; j < nq; j++) {
                    double dd = (double)from_bf16(oh[c / 2][j]) - (double)from_bf16(oh[0][j]);
                    if (dd < 0) dd = -dd;
                    if (dd > dmax) dmax = dd;
                }
                printf(" | x%.2f own f32, x%.2f %s f32 | max |o - %s o| %.1e, bits %s thr %d",
                       med[c + 1] / med[c], med[1] / med[c], bs[0].name, bs[0].name, dmax,
                       same ? "same as" : "DIFFER from", thr[0]);
            } else printf(" | x%.2f of %s f32", med[1] / med[c], bs[0].name);
            printf("\n");
        }
        fflush(stdout);
        for (b = 0; b < nb; b++) bs[b].pool_free(pools[b]);
    }
    return 0;
}
