/* quickstart.c - the smallest complete use of flashattn.h.
   cc -O2 -I. examples/quickstart.c -o quickstart -lopenblas -lm -lpthread */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include <stdio.h>
#include <stdlib.h>

static float uniform(void) { return (float)(rand() / (double)RAND_MAX) - 0.5f; }

int main(void)
{
    fa_params p = FA_PARAMS_INIT;          /* zero means the default: packed, fp32, 1/sqrt(D) */
    size_t n, i;
    float *q, *k, *v, *o_naive, *o_tiled;
    fa_status st;
    int ok;

    p.batch = 1; p.heads = 4; p.seq_q = 256; p.seq_k = 256; p.head_dim = 64;
    p.causal = 1;
    n = (size_t)p.batch * p.heads * p.seq_q * p.head_dim;   /* packed [B][H][S][D], Sq == Sk */
    q = malloc(n * sizeof *q); k = malloc(n * sizeof *k); v = malloc(n * sizeof *v);
    o_naive = malloc(n * sizeof *o_naive); o_tiled = malloc(n * sizeof *o_tiled);
    if (!q || !k || !v || !o_naive || !o_tiled) return 1;
    srand(1);
    for (i = 0; i < n; i++) { q[i] = uniform(); k[i] = uniform(); v[i] = uniform(); }
    st = fa_tiled(&p, q, k, v, o_tiled);                    /* online softmax, O(tile) memory */
    if (st == FA_OK) st = fa_naive(&p, q, k, v, o_naive, NULL);  /* textbook, O(S^2) memory */
    if (st != FA_OK) { fprintf(stderr, "flashattn: %s\n", fa_status_string(st)); return 1; }
    ok = fa_allclose(o_tiled, o_naive, n, 1e-5f, 1e-5f);
    printf("causal B=1 H=4 S=256 D=64: max |tiled - naive| = %.3g, allclose %s\n",
           fa_max_abs_diff(o_tiled, o_naive, n), ok ? "yes" : "NO");
    free(q); free(k); free(v); free(o_naive); free(o_tiled);
    return ok ? 0 : 1;
}
