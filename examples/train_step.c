/* train_step.c - train one attention layer with fa_tiled and fa_tiled_backward.

   The task: each sequence holds random tokens and one marker; from two positions after the marker
   on, the model must output the token that followed the marker. Nothing at a position says what
   that token was, so it has to be fetched by attention (chance is 1 in 15).

   The model: x_t = E[tok_t] + F[tok_{t-1}] (a token and a previous-token embedding: the key of the
   token after the marker is told "my predecessor was the marker", which one layer cannot find out
   by itself; that is what the first layer of a two-layer induction head does), Q = X Wq, K = X Wk,
   V = X Wv with 2 heads of 16, causal attention through fa_tiled (lse kept for the backward),
   logits = O Wo, softmax cross-entropy over the positions that have a target. Every gradient is
   written out: the projections' with a small matmul, the attention's by fa_tiled_backward. At the
   first step they are checked by central differences, and fa_tiled_backward against
   fa_naive_backward. Then plain gradient descent, a fresh batch each step; fixed seeds (xorshift),
   so every run prints the same numbers.

   cc -O2 -I. examples/train_step.c -o train_step -lopenblas -lm -lpthread */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 16              /* tokens 0..14, and 15 the marker */
#define MARKER (VOCAB - 1)
#define BOS VOCAB             /* the "previous token" of position 0: F has VOCAB + 1 rows */
#define SEQ 32
#define BATCH 16
#define ROWS (BATCH * SEQ)
#define DM 32                 /* model width */
#define HEADS 2
#define HD 16
#define HH (HEADS * HD)       /* Q, K, V, O rows are [HEADS][HD]: the [B][S][H][D] layout */
#define STEPS 300
#define LR 0.2f               /* plain gradient descent: w -= LR * grad */
#define EVAL_BATCHES 8

/* ---- random numbers: xorshift64 ---------------------------------------------------------------- */
static uint64_t rng_next(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static int rng_below(uint64_t *s, int n) { return (int)((rng_next(s) >> 11) % (uint64_t)n); }
static float rng_normal(uint64_t *s)   /* Box-Muller */
{
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- the parameters: value and gradient ------------------------------------------------------- */
typedef struct { const char *name; int rows, cols; float *w, *g; } matrix;
enum { ME, MF, MQ, MK, MV, MO, NMAT };
static matrix par[NMAT];

static int matrix_init(matrix *a, const char *name, int rows, int cols, float sd, uint64_t *s)
{
    size_t n = (size_t)rows * cols, i;
    a->name = name; a->rows = rows; a->cols = cols;
    a->w = (float *)calloc(n, sizeof(float));
    a->g = (float *)calloc(n, sizeof(float));
    if (!a->w || !a->g) return 0;
    for (i = 0; i < n; i++) a->w[i] = sd * rng_normal(s);
    return 1;
}

/* ---- a batch of the task ------------------------------------------------------------------------ */
static int tok[ROWS], prev[ROWS], target[ROWS];   /* target -1: no loss at that position */

static void make_batch(uint64_t *s)
{
    int b, t;
    for (b = 0; b < BATCH; b++) {
        int m = rng_below(s, SEQ / 2);               /* the marker's position */
        for (t = 0; t < SEQ; t++) {
            int r = b * SEQ + t;
            tok[r] = t == m ? MARKER : rng_below(s, MARKER);
            prev[r] = t == 0 ? BOS : tok[r - 1];
        }
        for (t = 0; t < SEQ; t++)
            target[b * SEQ + t] = t >= m + 2 ? tok[b * SEQ + m + 1] : -1;
    }
}

/* ---- matmuls on row-major matrices -------------------------------------------------------------- */
static void mm_nn(float *c, const float *a, const float *b, int n, int k, int m)   /* c = a b */
{
    int i, l, j;
    for (i = 0; i < n; i++) {
        float *ci = c + (size_t)i * m;
        for (j = 0; j < m; j++) ci[j] = 0.0f;
        for (l = 0; l < k; l++) {
            const float ail = a[(size_t)i * k + l], *bl = b + (size_t)l * m;
            for (j = 0; j < m; j++) ci[j] += ail * bl[j];
        }
    }
}
static void mm_tn(float *c, const float *a, const float *b, int n, int k, int m)   /* c = a^T b */
{
    int i, l, j;
    memset(c, 0, (size_t)k * m * sizeof(float));
    for (i = 0; i < n; i++)
        for (l = 0; l < k; l++) {
            const float ail = a[(size_t)i * k + l], *bi = b + (size_t)i * m;
            float *cl = c + (size_t)l * m;
            for (j = 0; j < m; j++) cl[j] += ail * bi[j];
        }
}
static void mm_nt_add(float *c, const float *a, const float *b, int n, int m, int k) /* c += a b^T */
{
    int i, l, j;
    for (i = 0; i < n; i++)
        for (l = 0; l < k; l++) {
            const float *ai = a + (size_t)i * m, *bl = b + (size_t)l * m;
            float sum = 0.0f;
            for (j = 0; j < m; j++) sum += ai[j] * bl[j];
            c[(size_t)i * k + l] += sum;
        }
}

/* ---- forward and backward ----------------------------------------------------------------------- */
static float X[ROWS * DM], Q[ROWS * HH], K[ROWS * HH], V[ROWS * HH], O[ROWS * HH];
static float lse[BATCH * HEADS * SEQ], logits[ROWS * VOCAB], dlogits[ROWS * VOCAB];
static float dO[ROWS * HH], dQ[ROWS * HH], dK[ROWS * HH], dV[ROWS * HH], dX[ROWS * DM];
static fa_params p;

static void attention_params(fa_pool *pool)
{
    const int64_t st[3] = { (int64_t)SEQ * HH, HD, HH };   /* {batch, head, token} of [B][S][H][D] */
    memset(&p, 0, sizeof p);
    p.batch = BATCH; p.heads = HEADS; p.seq_q = SEQ; p.seq_k = SEQ; p.head_dim = HD;
    memcpy(p.q_stride, st, sizeof st); memcpy(p.k_stride, st, sizeof st);
    memcpy(p.v_stride, st, sizeof st); memcpy(p.o_stride, st, sizeof st);
    p.causal = 1;
    p.lse = lse;                   /* the forward writes it, the backward reads it */
    p.pool = pool; p.threads = 0;  /* all of the pool's threads */
}

/* The mean cross-entropy (accumulated in double) over the positions with a target; dlogits gets
   its gradient. *correct counts the argmax hits, *count the positions. */
static double forward(int *correct, int *count)
{
    double loss = 0.0;
    int r, c, n = 0, hits = 0;
    fa_status st;
    for (r = 0; r < ROWS; r++)
        for (c = 0; c < DM; c++)
            X[r * DM + c] = par[ME].w[tok[r] * DM + c] + par[MF].w[prev[r] * DM + c];
    mm_nn(Q, X, par[MQ].w, ROWS, DM, HH);
    mm_nn(K, X, par[MK].w, ROWS, DM, HH);
    mm_nn(V, X, par[MV].w, ROWS, DM, HH);
    st = fa_tiled(&p, Q, K, V, O);
    if (st != FA_OK) { fprintf(stderr, "fa_tiled: %s\n", fa_status_string(st)); exit(1); }
    mm_nn(logits, O, par[MO].w, ROWS, HH, VOCAB);
    for (r = 0; r < ROWS; r++) n += target[r] >= 0;
    for (r = 0; r < ROWS; r++) {
        const float *z = logits + r * VOCAB;
        float *dz = dlogits + r * VOCAB;
        double mx = z[0], sum = 0.0;
        int best = 0;
        if (target[r] < 0) { for (c = 0; c < VOCAB; c++) dz[c] = 0.0f; continue; }
        for (c = 1; c < VOCAB; c++) if (z[c] > mx) { mx = z[c]; best = c; }
        for (c = 0; c < VOCAB; c++) sum += exp(z[c] - mx);
        loss += mx + log(sum) - z[target[r]];
        for (c = 0; c < VOCAB; c++) dz[c] = (float)(exp(z[c] - mx) / sum / n);
        dz[target[r]] -= 1.0f / (float)n;
        hits += best == target[r];
    }
    if (correct) *correct = hits;
    if (count) *count = n;
    return loss / n;
}

/* The gradients of the last forward's loss into par[].g. */
static void backward(void)
{
    int r, c;
    fa_status st;
    mm_tn(par[MO].g, O, dlogits, ROWS, HH, VOCAB);                  /* dWo = O^T dlogits */
    memset(dO, 0, sizeof dO);
    mm_nt_add(dO, dlogits, par[MO].w, ROWS, VOCAB, HH);             /* dO = dlogits Wo^T */
    st = fa_tiled_backward(&p, Q, K, V, O, dO, dQ, dK, dV);
    if (st != FA_OK) { fprintf(stderr, "fa_tiled_backward: %s\n", fa_status_string(st)); exit(1); }
    mm_tn(par[MQ].g, X, dQ, ROWS, DM, HH);                          /* dWq = X^T dQ, ... */
    mm_tn(par[MK].g, X, dK, ROWS, DM, HH);
    mm_tn(par[MV].g, X, dV, ROWS, DM, HH);
    memset(dX, 0, sizeof dX);
    mm_nt_add(dX, dQ, par[MQ].w, ROWS, HH, DM);                     /* dX = dQ Wq^T + ... */
    mm_nt_add(dX, dK, par[MK].w, ROWS, HH, DM);
    mm_nt_add(dX, dV, par[MV].w, ROWS, HH, DM);
    memset(par[ME].g, 0, sizeof(float) * VOCAB * DM);
    memset(par[MF].g, 0, sizeof(float) * (VOCAB + 1) * DM);
    for (r = 0; r < ROWS; r++)
        for (c = 0; c < DM; c++) {
            par[ME].g[tok[r] * DM + c] += dX[r * DM + c];
            par[MF].g[prev[r] * DM + c] += dX[r * DM + c];
        }
}

/* ---- the checks at the first step --------------------------------------------------------------- */
static double max_abs(const float *a, size_t n)
{
    double mx = 0.0;
    size_t i;
    for (i = 0; i < n; i++) if (fabs(a[i]) > mx) mx = fabs(a[i]);
    return mx;
}

/* fa_tiled_backward against fa_naive_backward on the same inputs: the largest difference relative
   to the largest gradient. */
static int check_against_naive(void)
{
    static float nq[ROWS * HH], nk[ROWS * HH], nv[ROWS * HH];
    const float *tiled[3], *naive[3];
    const char *names[3] = { "dq", "dk", "dv" };
    double worst = 0.0;
    int i;
    fa_status st = fa_naive_backward(&p, Q, K, V, O, dO, nq, nk, nv);
    if (st != FA_OK) { fprintf(stderr, "fa_naive_backward: %s\n", fa_status_string(st)); return 0; }
    tiled[0] = dQ; tiled[1] = dK; tiled[2] = dV; naive[0] = nq; naive[1] = nk; naive[2] = nv;
    printf("fa_tiled_backward vs fa_naive_backward:");
    for (i = 0; i < 3; i++) {
        double d = fa_max_abs_diff(tiled[i], naive[i], ROWS * HH), rel = d / max_abs(naive[i], ROWS * HH);
        printf(" %s max|diff| %.2g (%.2g of max|%s|)%s", names[i], d, rel, names[i], i < 2 ? "," : "\n");
        if (rel > worst) worst = rel;
    }
    return worst <= 1e-4;
}

static int taken(const int *pick, int npick, int i)
{
    int q;
    for (q = 0; q < npick; q++) if (pick[q] == i) return 1;
    return 0;
}

/* Central differences on 8 entries of each matrix (4 at random, 4 of the largest gradients), each
   among the entries whose gradient is at least a tenth of the matrix's largest: below that the
   fp32 loss's rounding, not the gradient, would decide the error. */
static int check_gradients(void)
{
    const float h = 1e-2f;
    double worst = 0.0;
    uint64_t s = 12345;
    int a;
    for (a = 0; a < NMAT; a++) {
        matrix *x = &par[a];
        const int n = x->rows * x->cols;
        float *g = (float *)malloc((size_t)n * sizeof(float));
        double gmax, err = 0.0;
        int pick[8], npick = 0, tries, i, j;
        if (!g) return 0;
        memcpy(g, x->g, (size_t)n * sizeof(float));      /* the analytic gradient */
        gmax = max_abs(g, (size_t)n);
        while (npick < 4) {                               /* 4 of the largest, by repeated argmax */
            for (i = 0, j = -1; i < n; i++)
                if (!taken(pick, npick, i) && (j < 0 || fabsf(g[i]) > fabsf(g[j]))) j = i;
            pick[npick++] = j;
        }
        for (tries = 0; tries < 10000 && npick < 8; tries++) {
            i = rng_below(&s, n);
            if (!taken(pick, npick, i) && fabs(g[i]) >= 0.1 * gmax) pick[npick++] = i;
        }
        for (j = 0; j < npick; j++) {
            const float w0 = x->w[pick[j]], wp = w0 + h, wm = w0 - h;
            double lp, lm, num, ana = g[pick[j]], rel;
            x->w[pick[j]] = wp; lp = forward(NULL, NULL);
            x->w[pick[j]] = wm; lm = forward(NULL, NULL);
            x->w[pick[j]] = w0;
            num = (lp - lm) / ((double)wp - (double)wm);
            rel = fabs(num - ana) / fmax(fabs(num), fabs(ana));
            if (rel > err) err = rel;
        }
        printf("  %-2s [%2d x %2d]: %d entries, max|grad| %.3g, max relative error %.2g\n",
               x->name, x->rows, x->cols, npick, gmax, err);
        if (err > worst) worst = err;
        free(g);
    }
    forward(NULL, NULL);   /* leave the activations of the unperturbed model */
    printf("central differences (h = %g): max relative error %.2g (tolerance 1e-2)\n", h, worst);
    return worst < 1e-2;
}

/* ---- evaluation on fixed held-out batches -------------------------------------------------------- */
static void evaluate(double *loss, double *accuracy)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    double sum = 0.0;
    int e, hits = 0, count = 0;
    for (e = 0; e < EVAL_BATCHES; e++) {
        int c, n;
        make_batch(&s);
        sum += forward(&c, &n);
        hits += c; count += n;
    }
    *loss = sum / EVAL_BATCHES;
    *accuracy = (double)hits / count;
}

int main(void)
{
    uint64_t s = 88172645463325252ULL, data = 2463534242ULL;
    fa_pool *pool = NULL;
    double loss0, acc0, loss1, acc1, first = 0.0, last = 0.0;
    int a, step, ok = 1;
    size_t i;

    if (fa_pool_create(2, &pool) != FA_OK) { fprintf(stderr, "fa_pool_create failed\n"); return 1; }
    attention_params(pool);
    if (!matrix_init(&par[ME], "E", VOCAB, DM, 1.0f, &s) ||
        !matrix_init(&par[MF], "F", VOCAB + 1, DM, 1.0f, &s) ||
        !matrix_init(&par[MQ], "Wq", DM, HH, 1.0f / sqrtf((float)DM), &s) ||
        !matrix_init(&par[MK], "Wk", DM, HH, 1.0f / sqrtf((float)DM), &s) ||
        !matrix_init(&par[MV], "Wv", DM, HH, 1.0f / sqrtf((float)DM), &s) ||
        !matrix_init(&par[MO], "Wo", HH, VOCAB, 1.0f / sqrtf((float)HH), &s)) {
        fprintf(stderr, "out of memory\n"); return 1;
    }
    printf("one causal attention layer: vocab %d, seq %d, batch %d, width %d, %d heads of %d; "
           "gradient descent, lr %g, %d steps\n", VOCAB, SEQ, BATCH, DM, HEADS, HD, LR, STEPS);
    evaluate(&loss0, &acc0);

    for (step = 0; step < STEPS; step++) {
        double loss;
        make_batch(&data);
        loss = forward(NULL, NULL);
        backward();
        if (step == 0) {
            printf("step 0 checks:\n");
            if (!check_gradients()) { printf("FAILED: gradient check\n"); ok = 0; }
            if (!check_against_naive()) { printf("FAILED: fa_tiled_backward vs fa_naive_backward\n"); ok = 0; }
            first = loss;
        }
        last = loss;
        if (step % 25 == 0 || step == STEPS - 1) printf("step %3d  train loss %.4f\n", step, loss);
        for (a = 0; a < NMAT; a++)
            for (i = 0; i < (size_t)par[a].rows * par[a].cols; i++) par[a].w[i] -= LR * par[a].g[i];
    }

    evaluate(&loss1, &acc1);
    printf("train loss: first %.4f, last %.4f\n", first, last);
    printf("held-out (%d x %d sequences): loss %.4f -> %.4f, accuracy %.1f%% -> %.1f%% (chance %.1f%%)\n",
           EVAL_BATCHES, BATCH, loss0, loss1, 100.0 * acc0, 100.0 * acc1, 100.0 / MARKER);
    if (!(loss1 < 0.5 * loss0)) { printf("FAILED: the held-out loss did not fall below half\n"); ok = 0; }
    if (!(acc1 >= 0.9)) { printf("FAILED: held-out accuracy below 90%%\n"); ok = 0; }
    for (a = 0; a < NMAT; a++) { free(par[a].w); free(par[a].g); }
    fa_pool_destroy(pool);
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
