/* split_keys.c - attend a long context in chunks of keys, then merge the chunks with fa_merge.

   Each chunk call returns its output and its log-sum-exp (p.lse); fa_merge combines them into
   exactly what one call over all the keys gives. Computing (o, lse) where the keys live and merging
   the partial results is the building block of ring attention across machines.

   The chunks here are windows into one packed [B][H][Sk][D] K/V buffer, described with strides, so
   nothing is copied. The queries are the last Sq tokens of the context, causal: every chunk but the
   last is fully visible, and the last one, causal with the bottom-right alignment, masks exactly
   what the whole call masks. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define B 1
#define H 8
#define SQ 64      /* new tokens */
#define SK 16384   /* context, including the new tokens */
#define D 64
#define CHUNK 3000 /* keys per chunk; need not divide SK */
#define NCHUNK ((SK + CHUNK - 1) / CHUNK)

static uint64_t rng = 88172645463325252ULL;
static float normal01(void)   /* xorshift64 and Box-Muller */
{
    double u[2];
    int i;
    for (i = 0; i < 2; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        u[i] = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
    }
    return (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

int main(void)
{
    const size_t nq = (size_t)B * H * SQ * D, nk = (size_t)B * H * SK * D, rows = (size_t)B * H * SQ;
    float *q = (float *)malloc(nq * sizeof(float)), *k = (float *)malloc(nk * sizeof(float));
    float *v = (float *)malloc(nk * sizeof(float));
    float *o_whole = (float *)malloc(nq * sizeof(float)), *lse_whole = (float *)malloc(rows * sizeof(float));
    float *o_part = (float *)malloc(NCHUNK * nq * sizeof(float));
    float *lse_part = (float *)malloc(NCHUNK * rows * sizeof(float));
    float *o = (float *)malloc(nq * sizeof(float)), *lse = (float *)malloc(rows * sizeof(float));
    const float *o_ptrs[NCHUNK], *lse_ptrs[NCHUNK];
    fa_params p = FA_PARAMS_INIT;
    fa_status st = FA_OK;
    size_t i;
    int c, ok = 0;

    if (!q || !k || !v || !o_whole || !lse_whole || !o_part || !lse_part || !o || !lse) {
        fprintf(stderr, "split_keys: out of memory\n");
        return 1;
    }
    for (i = 0; i < nq; i++) q[i] = normal01();
    for (i = 0; i < nk; i++) { k[i] = normal01(); v[i] = normal01(); }

    /* one call over the whole context */
    p.batch = B; p.heads = H; p.seq_q = SQ; p.seq_k = SK; p.head_dim = D;
    p.causal = 1;
    p.lse = lse_whole;
    st = fa_tiled(&p, q, k, v, o_whole);

    /* the same keys in NCHUNK chunks: keys [c0, c0 + n) are k + c0 * D with the strides of the whole
       buffer; each chunk writes its own packed output and lse */
    for (c = 0; c < NCHUNK && st == FA_OK; c++) {
        int c0 = c * CHUNK, n = SK - c0 < CHUNK ? SK - c0 : CHUNK;
        fa_params pc = p;
        pc.seq_k = n;
        pc.k_stride[0] = pc.v_stride[0] = (int64_t)H * SK * D;
        pc.k_stride[1] = pc.v_stride[1] = (int64_t)SK * D;
        pc.k_stride[2] = pc.v_stride[2] = D;
        pc.causal = c == NCHUNK - 1;          /* only the last chunk reaches the diagonal */
        pc.lse = lse_part + c * rows;
        st = fa_tiled(&pc, q, k + (size_t)c0 * D, v + (size_t)c0 * D, o_part + c * nq);
        o_ptrs[c] = o_part + c * nq;
        lse_ptrs[c] = lse_part + c * rows;
    }
    /* every (batch, head, query) is one row of D values */
    if (st == FA_OK) st = fa_merge((int)rows, D, NCHUNK, o_ptrs, lse_ptrs, o, lse);
    if (st != FA_OK) {
        fprintf(stderr, "split_keys: %s\n", fa_status_string(st));
    } else {
        int ok_o = fa_allclose(o, o_whole, nq, 1e-5f, 1e-5f), ok_l = fa_allclose(lse, lse_whole, rows, 1e-5f, 1e-5f);
        printf("B=%d H=%d Sq=%d Sk=%d D=%d causal, keys in %d chunks of up to %d, merged with fa_merge\n",
               B, H, SQ, SK, D, NCHUNK, CHUNK);
        printf("output: max |merged - whole| = %.3e, allclose(1e-5, 1e-5) %s\n",
               fa_max_abs_diff(o, o_whole, nq), ok_o ? "True" : "FALSE");
        printf("lse:    max |merged - whole| = %.3e, allclose(1e-5, 1e-5) %s\n",
               fa_max_abs_diff(lse, lse_whole, rows), ok_l ? "True" : "FALSE");
        ok = ok_o && ok_l;
    }
    free(q); free(k); free(v); free(o_whole); free(lse_whole); free(o_part); free(lse_part); free(o); free(lse);
    return ok ? 0 : 1;
}
