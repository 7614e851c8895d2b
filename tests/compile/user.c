/* tests/compile/user.c - a user of the library in a translation unit of its own.

   It sees only the declarations (no FLASHATTN_IMPLEMENTATION here) and calls every public CPU
   function through them: the functions come from impl.c at link time. Run by `make test`, it
   also checks that the two paths agree on a small causal GQA request, so that a link that
   resolves to something wrong cannot pass. Compiles as C99 and as C++. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

#ifdef FLASHATTN__IMPLEMENTATION_DONE
#error "user.c must see the declarations only"
#endif

int fa_compile_impl_unit(void);

int main(void)
{
    enum { B = 2, H = 4, HKV = 2, SQ = 13, SK = 29, D = 8, DV = 6 };
    fa_params p;
    float *q = (float *)malloc(sizeof(float) * B * H * SQ * D);
    float *k = (float *)malloc(sizeof(float) * B * HKV * SK * D);
    float *v = (float *)malloc(sizeof(float) * B * HKV * SK * DV);
    float *o1 = (float *)malloc(sizeof(float) * B * H * SQ * DV);
    float *o2 = (float *)malloc(sizeof(float) * B * H * SQ * DV);
    float *s = (float *)malloc(sizeof(float) * B * H * SQ * SK);
    float lse1[B * H * SQ], lse2[B * H * SQ], m[B * H * SQ * DV];
    const float *op[2], *lp[2];
    unsigned x = 12345u;
    int i, bad = 0;
    if (!q || !k || !v || !o1 || !o2 || !s) return 1;
    for (i = 0; i < B * H * SQ * D; i++) { x = x * 1103515245u + 12345u; q[i] = (float)((x >> 8) & 0xFFFF) / 32768.0f - 1.0f; }
    for (i = 0; i < B * HKV * SK * D; i++) { x = x * 1103515245u + 12345u; k[i] = (float)((x >> 8) & 0xFFFF) / 32768.0f - 1.0f; }
    for (i = 0; i < B * HKV * SK * DV; i++) { x = x * 1103515245u + 12345u; v[i] = (float)((x >> 8) & 0xFFFF) / 32768.0f - 1.0f; }

    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = H; p.kv_heads = HKV; p.seq_q = SQ; p.seq_k = SK;
    p.head_dim = D; p.head_dim_v = DV; p.causal = 1; p.threads = 2; p.block_q = 4; p.block_k = 5;
    p.lse = lse1;
    if (fa_naive(&p, q, k, v, o1, s) != FA_OK) { puts("fa_naive failed"); return 1; }
    p.lse = lse2;
    if (fa_tiled(&p, q, k, v, o2) != FA_OK) { puts("fa_tiled failed"); return 1; }
    if (!fa_allclose(o2, o1, (size_t)B * H * SQ * DV, 1e-5f, 1e-5f)) bad |= 1;
    if (!fa_allclose(lse2, lse1, (size_t)B * H * SQ, 1e-5f, 1e-5f)) bad |= 2;
    if (!(fa_max_abs_diff(o1, o2, (size_t)B * H * SQ * DV) < 1e-5)) bad |= 4;
    if (s[SK - 1] != -INFINITY) bad |= 8;     /* row 0 sees keys 0..SK-SQ only */
    if (fa_naive_workspace_bytes(&p) < sizeof(float) * B * H * SQ * SK || fa_tiled_workspace_bytes(&p) == 0) bad |= 16;
    /* merging a result with an empty part gives it back */
    op[0] = o1; op[1] = o2; lp[0] = lse1; lp[1] = lse2;
    for (i = 0; i < B * H * SQ; i++) lse2[i] = -INFINITY;
    if (fa_merge(B * H * SQ, DV, 2, op, lp, m, NULL) != FA_OK || !fa_allclose(m, o1, (size_t)B * H * SQ * DV, 1e-6f, 0.0f))
        bad |= 32;
    if (!fa_status_string(FA_ERR_NO_MEMORY) || fa_naive(NULL, q, k, v, o1, NULL) != FA_ERR_INVALID_ARG) bad |= 64;
    if (fa_compile_impl_unit() != FLASHATTN_VERSION_MAJOR * 100 + FLASHATTN_VERSION_MINOR) bad |= 128;
    printf("%s: %s (flashattn.h %d.%d.%d, %s, %s)\n", __FILE__, bad ? "FAILED" : "ok", FLASHATTN_VERSION_MAJOR,
           FLASHATTN_VERSION_MINOR, FLASHATTN_VERSION_PATCH,
#ifdef __cplusplus
           "C++",
#else
           "C",
#endif
#ifdef FLASHATTN_NO_BLAS
           "FLASHATTN_NO_BLAS"
#else
           "OpenBLAS"
#endif
    );
    if (bad) printf("failure bits 0x%x\n", bad);
    free(q); free(k); free(v); free(o1); free(o2); free(s);
    return bad ? 1 : 0;
}
