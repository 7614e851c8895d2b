/* tests/compile/static2.c - a second translation unit with its own FLASHATTN_STATIC copy of
   the library, linked with static.c: with internal linkage the two copies cannot clash. It calls
   a different subset of the API (fa_naive, fa_merge) than static.c. */
#define FLASHATTN_STATIC
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

int static_unit_two(void);

int static_unit_two(void)
{
    fa_params p;
    float q[2] = { 1, -1 }, k[2] = { 1, 1 }, v[2] = { 2, 4 }, o[2], s[4], lse[2];
    const float *op[1], *lp[1];
    float m[2];
    memset(&p, 0, sizeof p);
    p.batch = 1; p.heads = 1; p.seq_q = 2; p.seq_k = 2; p.head_dim = 1; p.lse = lse;
    if (fa_naive(&p, q, k, v, o, s) != FA_OK) return 1;
    op[0] = o; lp[0] = lse;
    if (fa_merge(2, 1, 1, op, lp, m, NULL) != FA_OK || m[0] != o[0] || m[1] != o[1]) return 2;
    /* row 0: weights e^1, e^1 -> 3; scores are the scaled dots */
    return (o[0] > 2.999f && o[0] < 3.001f && s[0] == 1.0f && s[3] == -1.0f) ? 0 : 3;
}
