/* bench/ab/side.c - one side of bench/ab/ab.c: a private (FLASHATTN_STATIC) copy of a flashattn.h behind
   a wrapper named SIDE (side_a or side_b). */
#define FLASHATTN_STATIC
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "ab.h"

int SIDE(const ab_req *r, const float *q, const float *k, const float *v, float *o, float *lse)
{
    fa_params p;
    memset(&p, 0, sizeof p);
    p.batch = r->B; p.heads = r->H; p.kv_heads = r->Hkv; p.seq_q = r->Sq; p.seq_k = r->Sk;
    p.head_dim = r->D; p.causal = r->causal; p.threads = r->threads; p.window_left = r->wl;
    p.softcap = r->cap; p.alibi_slopes = r->alibi; p.bias = r->bias; p.lse = lse;
    memcpy(p.bias_stride, r->bs, sizeof p.bias_stride);
    return (int)fa_tiled(&p, q, k, v, o);
}
