/* tests/compile/init.c - FA_PARAMS_INIT: `fa_params p = FA_PARAMS_INIT;` compiles warning-free
   under -Wall -Wextra -Werror -Wmissing-field-initializers as C99 -pedantic and as C++ (gcc and
   clang alike, by the Makefile), gives the same request as a memset to zero, field by field, and
   with the five shape fields set is a valid request: fa_tiled agrees with fa_naive on it. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <stdio.h>
#include <string.h>

#define SAME(f) ok &= memcmp(&a.f, &z.f, sizeof a.f) == 0

int main(void)
{
    fa_params a = FA_PARAMS_INIT, z;
    float q[2 * 3 * 4], k[2 * 5 * 4], v[2 * 5 * 4], o1[2 * 3 * 4], o2[2 * 3 * 4];
    unsigned x = 7u;
    int i, ok = 1;
    memset(&z, 0, sizeof z);
    SAME(batch); SAME(heads); SAME(kv_heads); SAME(seq_q); SAME(seq_k); SAME(head_dim); SAME(head_dim_v);
    SAME(q_stride); SAME(k_stride); SAME(v_stride); SAME(o_stride); SAME(dtype); SAME(scale); SAME(causal);
    SAME(lse); SAME(block_q); SAME(block_k); SAME(threads); SAME(stream); SAME(window_left);
    SAME(window_right); SAME(softcap); SAME(alibi_slopes); SAME(alibi_stride); SAME(bias);
    SAME(bias_stride); SAME(pool); SAME(deterministic);
    for (i = 0; i < 40; i++) {
        x = x * 1103515245u + 12345u;
        if (i < 24) q[i] = (float)((x >> 9) & 0xFFF) / 2048.0f - 1.0f;
        k[i] = (float)((x >> 5) & 0xFFF) / 2048.0f - 1.0f;
        v[i] = (float)((x >> 13) & 0xFFF) / 2048.0f - 1.0f;
    }
    a.batch = 2; a.heads = 1; a.seq_q = 3; a.seq_k = 5; a.head_dim = 4; a.causal = 1;
    if (fa_tiled(&a, q, k, v, o1) != FA_OK || fa_naive(&a, q, k, v, o2, NULL) != FA_OK ||
        !fa_allclose(o1, o2, 24, 1e-5f, 1e-5f))
        ok = 0;
    printf("init.c: %s (FA_PARAMS_INIT, %s)\n", ok ? "ok" : "FAILED",
#ifdef __cplusplus
           "C++"
#else
           "C"
#endif
    );
    return ok ? 0 : 1;
}
