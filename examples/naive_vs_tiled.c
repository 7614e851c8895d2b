/* naive_vs_tiled.c - the experiments of the origin article, repeated with flashattn.h (`make run`).

   The article implemented FlashAttention's tiling and online softmax in PyTorch, checked it against
   naive attention, worked out the memory at real context lengths, and timed both on a CPU, where
   its tiled version was slower. This program does the same four things with this library's C
   kernels, on the machine it runs on, and prints what that machine is:

     (a) correctness at B=2, H=4, S=512, D=64, block 64, and the peak memory of each path;
     (b) the textbook O(S^2) vs O(S x block) arithmetic at S = 4,096 ... 128,192 (the article's
         figure for a 128k context) and 131,072 (Llama 3.1's real 128k = 2^17), H=64, BF16, next
         to the bytes this library's fp32 kernels would really allocate;
     (c) CPU wall-clock timing, naive vs tiled, from S=512 upwards while naive still fits;
     (d) the sequence length at which a naive S x S matrix outgrows a memory budget.

   It stays under about a minute on a 2-core machine: section (c) stops growing S when the next
   length would exceed its time or memory budget, and says which. `naive_vs_tiled --quick` (what
   `make test` runs) gives section (c) a 2 s budget instead of 40 s; every check still runs. The
   exit status is 0 only when every check passed. */
#define _POSIX_C_SOURCE 200112L
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TIME_BUDGET_S   40.0                 /* section (c) as a whole (--quick: QUICK_BUDGET_S) */
#define QUICK_BUDGET_S  2.0
#define NAIVE_MEM_CAP   (4.0 * 1073741824.0) /* largest naive workspace (c) allocates: 4 GiB ... */
#define NAIVE_MEM_FRAC  0.25                 /* ... or a quarter of physical memory if less */

#if !defined(FLASHATTN_NO_BLAS) && defined(OPENBLAS_VERSION)
#define HAVE_OPENBLAS 1
#endif

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* splitmix64, then Box-Muller: N(0,1) inputs, the same on every run */
static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static double uniform01(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static void fill_normal(float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        double u = uniform01(), v = uniform01();
        x[i] = (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
    }
}

/* decimal units, as the article prints them (1 GB = 1e9 bytes) */
static const char *human(double bytes, char *buf, size_t len)
{
    if (bytes >= 1e9) snprintf(buf, len, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1e6) snprintf(buf, len, "%.2f MB", bytes / 1e6);
    else if (bytes >= 1e3) snprintf(buf, len, "%.2f kB", bytes / 1e3);
    else snprintf(buf, len, "%.0f B", bytes);
    return buf;
}

static void shape(fa_params *p, int B, int H, int S, int D)
{
    memset(p, 0, sizeof *p);
    p->batch = B; p->heads = H; p->seq_q = S; p->seq_k = S; p->head_dim = D;
}

static double phys_mem_bytes(void)
{
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) return (double)pages * (double)page;
#endif
    return 0.0;
}

static void cpu_model(char *buf, size_t len)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(buf, len, "unknown");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            size_t n;
            c++;
            while (*c == ' ' || *c == '\t') c++;
            n = strcspn(c, "\n");
            snprintf(buf, len, "%.*s", (int)n, c);
            break;
        }
    }
    fclose(f);
}

/* Debian's OpenBLAS 0.3.21 does not know recent Xeons and falls back to its "Prescott" kernels,
   several times slower; naive attention would then be timed against a crippled GEMM. When that
   happens on a CPU with AVX-512 (or AVX2+FMA), run this program again with OPENBLAS_CORETYPE set,
   which OpenBLAS reads only when it is loaded. A user's own OPENBLAS_CORETYPE is left alone. */
#ifdef HAVE_OPENBLAS
static const char *openblas_version(void)
{
    static char buf[64];                     /* OPENBLAS_VERSION is " OpenBLAS 0.3.21 " */
    const char *s = OPENBLAS_VERSION;
    size_t n;
    while (*s == ' ') s++;
    n = strlen(s);
    while (n > 0 && s[n - 1] == ' ') n--;
    snprintf(buf, sizeof buf, "%.*s", (int)n, s);
    return buf;
}
#endif

static void fix_openblas_core(char **argv)
{
#if defined(HAVE_OPENBLAS) && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
    const char *core = NULL;
    if (getenv("OPENBLAS_CORETYPE") || strcmp(openblas_get_corename(), "Prescott") != 0) return;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        core = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        core = "Haswell";
    if (!core) return;
    printf("%s detected this CPU as \"Prescott\" (it does not know the model); running again with\n"
           "OPENBLAS_CORETYPE=%s so that the naive path gets a fair GEMM\n\n", openblas_version(), core);
    fflush(stdout);
    if (setenv("OPENBLAS_CORETYPE", core, 1) == 0) execv("/proc/self/exe", argv);
    printf("(could not run again; continuing with the Prescott kernels)\n\n");
#else
    (void)argv;
#endif
}

/* other work on the machine skews every timing below; say how busy it was */
static void print_load(void)
{
    double l1 = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l1) != 1) l1 = -1.0;
        fclose(f);
    }
    if (l1 >= 0.0)
        printf("load average (1 min) before the timings: %.2f on %ld cores%s\n", l1, sysconf(_SC_NPROCESSORS_ONLN),
               l1 >= 1.0 ? " - other programs were running, so the timings are noisy" : "");
}

static void print_machine(void)
{
    char model[200];
    double mem = phys_mem_bytes();
    cpu_model(model, sizeof model);
    printf("== machine ==\n");
    printf("CPU: %s, %ld cores online, %.1f GiB memory, no GPU used\n", model,
           sysconf(_SC_NPROCESSORS_ONLN), mem / 1073741824.0);
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    printf("SIMD: avx2 %s, fma %s, avx512f %s\n", __builtin_cpu_supports("avx2") ? "yes" : "no",
           __builtin_cpu_supports("fma") ? "yes" : "no", __builtin_cpu_supports("avx512f") ? "yes" : "no");
#endif
#ifdef HAVE_OPENBLAS
    printf("BLAS: %s, core \"%s\"%s%s\n", openblas_version(), openblas_get_corename(),
           getenv("OPENBLAS_CORETYPE") ? ", OPENBLAS_CORETYPE=" : "",
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "");
#elif defined(FLASHATTN_NO_BLAS)
    printf("BLAS: none (FLASHATTN_NO_BLAS): the naive path uses the header's own loops\n");
#else
    printf("BLAS: a CBLAS other than OpenBLAS (core name unknown)\n");
#endif
    print_load();
    {
        char info[512];
        fa_build_info(info, sizeof info);
        printf("build: %s\n", info);
    }
    printf("flashattn.h %s, fp32, threads = 0 (all online cores) in every call\n\n", fa_version());
}

static int check(fa_status st, const char *what)
{
    if (st == FA_OK) return 1;
    fprintf(stderr, "%s: %s\n", what, fa_status_string(st));
    return 0;
}

/* (a) ------------------------------------------------------------------------------------------- */
static int correctness(void)
{
    const int B = 2, H = 4, S = 512, D = 64, BLOCK = 64;
    size_t n = (size_t)B * H * S * D;
    float *q = (float *)malloc(4 * n * sizeof(float)), *k = q + n, *v = k + n, *on, *ot;
    double diff, score_bytes, naive_ws, tiled_ws, seed_block;
    char b1[32], b2[32], b3[32], b4[32];
    fa_params p;
    int ok;
    if (!q) return 0;
    on = (float *)malloc(2 * n * sizeof(float));
    if (!on) { free(q); return 0; }
    ot = on + n;
    fill_normal(q, 3 * n);
    shape(&p, B, H, S, D);
    p.block_q = BLOCK; p.block_k = BLOCK;
    if (!check(fa_naive(&p, q, k, v, on, NULL), "fa_naive") || !check(fa_tiled(&p, q, k, v, ot), "fa_tiled")) {
        free(q); free(on);
        return 0;
    }
    diff = fa_max_abs_diff(on, ot, n);
    ok = fa_allclose(ot, on, n, 1e-5f, 1e-5f);
    score_bytes = (double)B * H * S * S * sizeof(float);
    naive_ws = (double)fa_naive_workspace_bytes(&p);
    tiled_ws = (double)fa_tiled_workspace_bytes(&p);
    seed_block = (double)B * H * S * BLOCK * sizeof(float);
    printf("== (a) correctness (B=%d, H=%d, S=%d, D=%d, block_q = block_k = %d, N(0,1) inputs) ==\n",
           B, H, S, D, BLOCK);
    printf("max |naive - tiled| = %.3e\n", diff);
    printf("outputs match, fa_allclose(rtol 1e-5, atol 1e-5): %s\n\n", ok ? "True" : "FALSE");
    printf("naive score matrix  [%d, %d, %d, %d] fp32 = %s held at once\n", B, H, S, S,
           human(score_bytes, b1, sizeof b1));
    printf("  fa_naive_workspace_bytes = %s (%.0f bytes: that matrix + thread bookkeeping)\n",
           human(naive_ws, b2, sizeof b2), naive_ws);
    printf("  fa_tiled_workspace_bytes = %s (%.0f bytes; per worker thread: a Q tile, a %dx%d score tile, an\n"
           "                            accumulator, m and l; no [S][S] or [S][block] buffer)\n",
           human(tiled_ws, b3, sizeof b3), tiled_ws, BLOCK, BLOCK);
    printf("reduction factor: %.1fx smaller peak intermediate (naive workspace / tiled workspace)\n", naive_ws / tiled_ws);
    {   /* what each call ran (fa_describe) */
        char what[400];
        fa_describe(&p, FA_CALL_NAIVE, what, sizeof what);
        printf("  ran: %s\n", what);
        fa_describe(&p, FA_CALL_TILED, what, sizeof what);
        printf("  ran: %s\n", what);
    }
    printf("  (the article's PyTorch version held a [%d, %d, %d, %d] block for all heads at once, %s:\n"
           "   8x; a kernel that walks one query tile per thread needs far less)\n\n",
           B, H, S, BLOCK, human(seed_block, b4, sizeof b4));
    free(q); free(on);
    return ok;
}

/* (b) ------------------------------------------------------------------------------------------- */
static void memory_table(void)
{
    static const int lens[] = { 4096, 8192, 32768, 128192, 131072 };
    const int H = 64, BLOCK = 128, D = 128;
    size_t i;
    char b1[32], b2[32], b3[32], b4[32];
    printf("== (b) O(S^2) vs O(S x block) at real context lengths, H=%d heads, B=1 ==\n", H);
    printf("textbook columns: BF16 (2 bytes), the article's arithmetic: naive = H*S*S*2, tiled block = H*S*%d*2\n", BLOCK);
    printf("library columns:  what fa_naive / fa_tiled of this build would allocate for the same shape\n"
           "                  in fp32 with D=%d and threads = 0 (fa_*_workspace_bytes; no call is made)\n", D);
    printf("%9s | %20s | %20s || %22s | %22s\n", "S", "naive S x S (BF16)", "tiled block (BF16)",
           "fa_naive_workspace", "fa_tiled_workspace");
    for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        int S = lens[i];
        fa_params p;
        double nb = (double)H * S * S * 2, tb = (double)H * S * BLOCK * 2;
        shape(&p, 1, H, S, D);
        printf("S=%7d | %20s | %20s || %22s | %22s%s\n", S, human(nb, b1, sizeof b1), human(tb, b2, sizeof b2),
               human((double)fa_naive_workspace_bytes(&p), b3, sizeof b3),
               human((double)fa_tiled_workspace_bytes(&p), b4, sizeof b4),
               S == 128192 ? "  (the article's 128k)" : S == 131072 ? "  (Llama 3.1's 128k = 2^17)" : "");
    }
    printf("The library's naive column is the fp32 matrix (twice the BF16 bytes) plus a little; its tiled\n"
           "column does not grow with S at all: it is a few tiles per worker thread.\n\n");
}

/* (c) ------------------------------------------------------------------------------------------- */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median wall time of a few calls: up to 5, stopping after about 1 s; one call only when a single
   call already takes more than 3 s. A short call is warmed up once first. */
static double time_call(int naive, const fa_params *p, const float *q, const float *k, const float *v,
                        float *o, int *runs, fa_status *st)
{
    double t[5], spent = 0.0, t0;
    int r = 0;
    *st = FA_OK;
    t0 = now_s();
    *st = naive ? fa_naive(p, q, k, v, o, NULL) : fa_tiled(p, q, k, v, o);
    t[r++] = now_s() - t0;
    if (*st != FA_OK) return 0.0;
    if (t[0] < 0.2) r = 0;                     /* that one was the warm-up */
    else spent = t[0];
    if (t[0] <= 3.0) {
        while (r < 5 && (r < 3 || spent < 1.0)) {
            t0 = now_s();
            *st = naive ? fa_naive(p, q, k, v, o, NULL) : fa_tiled(p, q, k, v, o);
            t[r] = now_s() - t0;
            if (*st != FA_OK) return 0.0;
            spent += t[r++];
        }
    }
    qsort(t, (size_t)r, sizeof t[0], cmp_double);
    *runs = r;
    return r % 2 ? t[r / 2] : 0.5 * (t[r / 2 - 1] + t[r / 2]);
}

/* What time_call will spend on a call that takes t seconds. */
static double cost(double t) { return t > 3.0 ? t : (t < 0.2 ? 4.0 * t : (3.0 * t > 1.0 ? 3.0 * t : 1.0)); }

static int timing(double budget_s)
{
    const int B = 2, H = 4, D = 64;
    double mem = phys_mem_bytes(), cap = NAIVE_MEM_CAP, start = now_s(), last_n = 0.0, last_t = 0.0;
    int S, wins = 0, rows = 0;
    char b1[32], b2[32], b3[32];
    if (mem > 0.0 && NAIVE_MEM_FRAC * mem < cap) cap = NAIVE_MEM_FRAC * mem;
    printf("== (c) wall-clock timing on this CPU: B=%d, H=%d, D=%d, fp32, non-causal ==\n", B, H, D);
    printf("median wall time of `runs` calls (clock_gettime MONOTONIC), GFLOP/s counts 4*B*H*S*S*D,\n"
           "ws = fa_*_workspace_bytes; the two outputs are checked allclose at every length\n");
    printf("%7s | %10s %4s %7s | %10s %4s %7s | %-21s | %10s %10s\n", "S", "naive ms", "runs", "GFLOP/s",
           "tiled ms", "runs", "GFLOP/s", "tiled/naive time", "naive ws", "tiled ws");
    for (S = 512;; S *= 2) {
        fa_params p;
        size_t n = (size_t)B * H * S * D;
        double nws, tws, tn, tt, gf, elapsed = now_s() - start;
        int rn = 0, rt = 0;
        float *buf;
        fa_status st;
        shape(&p, B, H, S, D);
        nws = (double)fa_naive_workspace_bytes(&p);
        tws = (double)fa_tiled_workspace_bytes(&p);
        if (S > (budget_s < TIME_BUDGET_S ? 1024 : 4096)) {   /* --quick: from 2048 on */
            /* both kernels are O(S^2): a call at the next length takes about 4x the last one */
            double predicted = cost(4.0 * last_n) + cost(4.0 * last_t);
            if (nws > cap) {
                printf("stopped before S=%d: naive would allocate %s, over this example's budget of %s\n"
                       "  (min(4 GiB, a quarter of memory)); tiled would still need only %s\n",
                       S, human(nws, b1, sizeof b1), human(cap, b2, sizeof b2), human(tws, b3, sizeof b3));
                break;
            }
            if (elapsed + predicted > budget_s) {
                printf("stopped before S=%d: timing it would take about %.0f s, and this section has used\n"
                       "  %.0f s of its %.0f s budget (naive would allocate %s there, which fits in memory)\n",
                       S, predicted, elapsed, budget_s, human(nws, b1, sizeof b1));
                break;
            }
        }
        buf = (float *)malloc(5 * n * sizeof(float));
        if (!buf) { printf("stopped at S=%d: could not allocate the inputs\n", S); break; }
        fill_normal(buf, 3 * n);
        tn = time_call(1, &p, buf, buf + n, buf + 2 * n, buf + 3 * n, &rn, &st);
        if (!check(st, "fa_naive")) { free(buf); return 0; }
        tt = time_call(0, &p, buf, buf + n, buf + 2 * n, buf + 4 * n, &rt, &st);
        if (!check(st, "fa_tiled")) { free(buf); return 0; }
        if (!fa_allclose(buf + 4 * n, buf + 3 * n, n, 1e-5f, 1e-5f)) {
            printf("S=%d: naive and tiled DISAGREE (max diff %.3e)\n", S, fa_max_abs_diff(buf + 4 * n, buf + 3 * n, n));
            free(buf);
            return 0;
        }
        free(buf);
        gf = 4.0 * B * H * (double)S * S * D / 1e9;
        printf("S=%5d | %10.2f %4d %7.1f | %10.2f %4d %7.1f | %5.2fx %-13s | %10s %10s\n", S, 1e3 * tn, rn,
               gf / tn, 1e3 * tt, rt, gf / tt, tt / tn, tt < tn ? "(tiled faster)" : "(naive faster)",
               human(nws, b1, sizeof b1), human(tws, b2, sizeof b2));
        fflush(stdout);
        rows++;
        if (tt < tn) wins++;
        last_n = tn; last_t = tt;
    }
    printf("tiled was faster at %d of %d lengths (outputs allclose at 1e-5 at every length).\n", wins, rows);
    printf("The article's PyTorch loop was 1.01-1.63x slower than naive on its CPU. Both kernels here compute\n"
           "the same function; on a CPU, which one is faster depends on how well each uses the SIMD units\n"
           "and caches (bench/RESULTS.md has the history), not on a GPU's HBM-vs-SRAM gap.\n\n");
    return 1;
}

/* (d) ------------------------------------------------------------------------------------------- */
static void budget(void)
{
    const double M = 40e9;                   /* an A100 40GB's HBM, as the article asks */
    const int H = 32, BYTES = 2;
    double s = sqrt(M / ((double)H * BYTES));
    size_t lo = 1, hi = (size_t)1 << 20;
    fa_params p;
    char b1[32], b2[32];
    printf("== (d) when does a naive S x S matrix outgrow a memory budget? ==\n");
    printf("one sequence (B=1), H=%d heads, BF16 (%d bytes), budget M = 40 GB = 4e10 bytes:\n", H, BYTES);
    printf("  H * S^2 * bytes > M   <=>   S > sqrt(M / (H * bytes)) = sqrt(4e10 / %d) = %.0f\n", H * BYTES, s);
    printf("  so from S = %.0f on, the scores of ONE layer's attention alone exceed 40 GB, before weights\n"
           "  or activations (with 40 GiB = 42.95e9 bytes it is S > %.0f)\n", floor(s) + 1,
           sqrt(40.0 * 1073741824.0 / ((double)H * BYTES)));
    /* the same question put to this library: the first S whose fa_naive workspace (fp32) is over M */
    shape(&p, 1, H, 1, 128);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        p.seq_q = p.seq_k = (int)mid;
        if ((double)fa_naive_workspace_bytes(&p) > M) hi = mid; else lo = mid + 1;
    }
    p.seq_q = p.seq_k = (int)lo;
    printf("  this library's fa_naive keeps fp32 scores: its workspace passes 40 GB at S = %zu (%s),\n"
           "  about sqrt(2) = 1.41x earlier; fa_tiled at that length needs %s\n\n", lo,
           human((double)fa_naive_workspace_bytes(&p), b1, sizeof b1),
           human((double)fa_tiled_workspace_bytes(&p), b2, sizeof b2));
}

int main(int argc, char **argv)
{
    double t0, budget_s = TIME_BUDGET_S;
    int ok;
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) budget_s = QUICK_BUDGET_S;
    else if (argc > 1) {
        fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
        return 2;
    }
    fix_openblas_core(argv);
    t0 = now_s();
    print_machine();
    ok = correctness();
    memory_table();
    ok = timing(budget_s) && ok;
    budget();
    printf("total %.1f s; %s\n", now_s() - t0, ok ? "all checks passed" : "A CHECK FAILED");
    return ok ? 0 : 1;
}
