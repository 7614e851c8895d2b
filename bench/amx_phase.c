/* amx_phase.c - where the AMX bf16 forward's time goes inside fa_tiled itself (issue 16), at the
   thread counts and shapes given: the header's FA__PROF_AT hooks (defined here before the include)
   read the time stamp counter where a thread's work changes phase in fa__tiled_item, and where the
   call changes phase in fa_tiled. Per shape and thread count it prints the call's median ms, the
   share of the call's thread time (threads x the run's wall time) in each phase of the items:
       setup   the tile's start: Ot zeroed, Q packed into panels, the rule's lanes, ldtilecfg
       vt      V's words and their transpose for a key block (or finding the shared Vt)
       blk     the block's own work: the next block's prefetch set up, flushes
       qk      the scores on the tiles (fa__qk_amx_job + fa__amx_run_rr)
       online  the online step with P's rounding (and the prefetch steps)
       pv      P V on the tiles
       end     O / l out to bf16, lse, the tile state released
       idle    the rest: threads waiting for items, the pool's hand-out, the end's imbalance
   the call's own time before the items (plan, malloc, a Vt pass) and after them (free), and the
   tile products' rate inside the loop (GFLOP/s a thread, each product's 2 B H S^2 D over its phase
   time), and the share of the tiles a thread starts on another (batch, head) than its tile before
   ("cold": that head's K and Vt are not in the core's L2 from its own last tile). The output at T
   threads is checked bitwise against the first thread count's (the forward must not depend on the
   thread count). B = 2, H = 4, Sq = Sk = S, D = Dv, bf16 from N(0,1), on an
   fa_pool of T threads.
       cc -O2 -std=c99 -DFLASHATTN_NO_BLAS -I. bench/amx_phase.c -o build/amx_phase -lm -lpthread
       build/amx_phase [--threads 1,16] [--s 512,2048] [--d 64,128] [--reps N] [--bq ROWS (block_q)]
   Needs AMX-BF16 (elsewhere the phases are those of the vdpbf16ps path's hooks: none but setup/end). */
#define _GNU_SOURCE
#include <x86intrin.h>

typedef struct { unsigned long long t[8], last; int cur, key; long long tiles, cold; char pad[32]; } ph_slot;
static ph_slot ph[64] __attribute__((aligned(128)));
#define FA__PROF_AT(tid, p) do { unsigned long long n_ = __rdtsc(); ph_slot *s_ = &ph[(tid)];      \
                                 s_->t[s_->cur] += n_ - s_->last; s_->last = n_; s_->cur = (p); } while (0)
/* a tile whose (batch, head) is not the thread's tile before it: "cold" (its K and Vt not in that core's L2) */
#define FA__PROF_TILE(tid, b, h) do { ph_slot *s_ = &ph[(tid)]; int k_ = (b) * 65536 + (h) + 1;         \
                                      s_->tiles++; s_->cold += s_->key != k_; s_->key = k_; } while (0)
#define FLASHATTN_IMPLEMENTATION
#ifndef FLASHATTN_NO_BLAS
#define FLASHATTN_NO_BLAS
#endif
#include "flashattn.h"
#include "bench/bench_util.h"

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        out[n++] = atoi(s);
        while (*s && *s != ',') s++;
        if (*s == ',') s++;
    }
    return n;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int thr[8] = { 1, 16 }, ss[8] = { 512, 2048 }, ds[8] = { 64, 128 }, nt = 2, ns = 2, nd = 2, reps = 0, bq = 0, i, a;
    double hz, t0;
    unsigned long long c0;
    for (a = 1; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "--threads")) nt = parse_list(argv[a + 1], thr, 8);
        else if (!strcmp(argv[a], "--s")) ns = parse_list(argv[a + 1], ss, 8);
        else if (!strcmp(argv[a], "--d")) nd = parse_list(argv[a + 1], ds, 8);
        else if (!strcmp(argv[a], "--reps")) reps = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--bq")) bq = atoi(argv[a + 1]);
    }
    t0 = bench_now(); c0 = __rdtsc();
    while (bench_now() - t0 < 0.1) {}
    hz = (double)(__rdtsc() - c0) / (bench_now() - t0);
    printf("amx_phase: TSC %.3f GHz; B 2, H 4, Sq = Sk = S, D = Dv, bf16; %% of threads x the run's wall\n", hz * 1e-9);
    printf("%3s %5s %4s | %8s %7s %7s | %6s %6s %6s %6s %6s %6s %6s %6s | %7s %7s | %5s | %s\n", "thr", "S", "D", "ms", "pre ms",
           "post ms", "setup", "vt", "blk", "qk", "online", "pv", "end", "idle", "qk GF/t", "pv GF/t", "cold", "bits vs first");
    for (i = 0; i < ns; i++) {
        int di;
        for (di = 0; di < nd; di++) {
            const int B = 2, H = 4, S = ss[i], D = ds[di];
            size_t n = (size_t)B * H * S * D, e;
            uint16_t *q = (uint16_t *)malloc(n * 2), *k = (uint16_t *)malloc(n * 2), *v = (uint16_t *)malloc(n * 2);
            uint16_t *o = (uint16_t *)malloc(n * 2), *first = (uint16_t *)malloc(n * 2);
            float *f = (float *)malloc(n * 4), *lse = (float *)malloc((size_t)B * H * S * 4);
            int ti;
            bench_fill_normal(f, n); for (e = 0; e < n; e++) q[e] = fa__f32_to_bf16(f[e]);
            bench_fill_normal(f, n); for (e = 0; e < n; e++) k[e] = fa__f32_to_bf16(f[e]);
            bench_fill_normal(f, n); for (e = 0; e < n; e++) v[e] = fa__f32_to_bf16(f[e]);
            for (ti = 0; ti < nt; ti++) {
                const int T = thr[ti];
                fa_pool *pool = NULL;
                fa_params p;
                double ws[200], flops = 2.0 * B * H * S * (double)S * D, tot, run = 0, in = 0, sh[8] = { 0 }, nti = 0, nco = 0;
                int r, nr, t, x;
                if (T > 1 && fa_pool_create(T, &pool) != FA_OK) { printf("no pool\n"); return 1; }
                memset(&p, 0, sizeof p);
                p.batch = B; p.heads = H; p.seq_q = S; p.seq_k = S; p.head_dim = D; p.dtype = FA_BF16;
                p.threads = T; p.pool = pool; p.lse = lse; p.block_q = bq;
                memset(o, 0xFF, n * 2);
                for (r = 0; r < 3; r++)
                    if (fa_tiled(&p, q, k, v, o) != FA_OK) { printf("fa_tiled failed\n"); return 1; }
                if (ti == 0) memcpy(first, o, n * 2);
                t0 = bench_now();
                fa_tiled(&p, q, k, v, o);
                nr = reps > 0 ? reps : (int)(0.25 / (bench_now() - t0 + 1e-6));
                if (nr < 5) nr = 5;
                if (nr > 200) nr = 200;
                memset(ph, 0, sizeof ph);
                for (t = 0; t < 64; t++) ph[t].last = __rdtsc();
                for (r = 0; r < nr; r++) {
                    t0 = bench_now();
                    fa_tiled(&p, q, k, v, o);
                    ws[r] = bench_now() - t0;
                }
                for (t = 0; t < 64; t++) FA__PROF_AT(t, ph[t].cur);     /* close the open phase */
                qsort(ws, (size_t)nr, sizeof ws[0], cmpd);
                run = (double)ph[FA__PROF_CALL].t[1] / hz;
                for (t = 0; t < T && t < 63; t++)
                    for (x = 1; x < 8; x++) { sh[x] += (double)ph[t].t[x] / hz; in += (double)ph[t].t[x] / hz; }
                for (t = 0; t < T && t < 63; t++) { nti += (double)ph[t].tiles; nco += (double)ph[t].cold; }
                tot = run * T;
                printf("%3d %5d %4d | %8.3f %7.3f %7.3f | %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%% | %7.0f %7.0f | %4.0f%% | %s\n",
                       T, S, D, 1e3 * ws[nr / 2], 1e3 * (double)ph[FA__PROF_CALL].t[0] / hz / nr,
                       1e3 * (double)ph[FA__PROF_CALL].t[2] / hz / nr, 100 * sh[1] / tot, 100 * sh[2] / tot, 100 * sh[3] / tot,
                       100 * sh[4] / tot, 100 * sh[5] / tot, 100 * sh[6] / tot, 100 * sh[7] / tot, 100 * (tot - in) / tot,
                       sh[4] > 0 ? flops * nr / sh[4] * 1e-9 : 0.0, sh[6] > 0 ? flops * nr / sh[6] * 1e-9 : 0.0, nti > 0 ? 100 * nco / nti : 0.0,
                       ti == 0 ? "(first)" : memcmp(first, o, n * 2) ? "DIFFER" : "same");
                if (ti == nt - 1) {
                    char line[700], *w;
                    fa_describe(&p, FA_CALL_TILED, line, sizeof line);
                    w = strstr(line, "tiles of");
                    printf("    S %d D %d, %d threads: %.90s\n", S, D, T, w ? w : line);
                }
                fa_pool_destroy(pool);
            }
            free(q); free(k); free(v); free(o); free(first); free(f); free(lse);
        }
    }
    return 0;
}
