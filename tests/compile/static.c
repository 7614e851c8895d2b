/* tests/compile/static.c - FLASHATTN_STATIC: every function gets internal linkage.

   A user who makes the library private to one file and calls only part of it must still build
   warning-free under -Wall -Wextra -Werror (no "defined but not used"); and two files that each
   hold a private copy link into one program without clashing (static2.c, linked alongside,
   calls another part of the API). */
#define FLASHATTN_STATIC
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <stdio.h>

int static_unit_two(void);

int main(void)
{
    fa_params p;
    float q[3 * 4] = { 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0 }, k[3 * 4] = { 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0 };
    float v[3 * 2] = { 1, 2, 3, 4, 5, 6 }, o[3 * 2];
    fa_status st;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.heads = 1; p.seq_q = 3; p.seq_k = 3; p.head_dim = 4; p.head_dim_v = 2; p.causal = 1;
    st = fa_tiled(&p, q, k, v, o);
    /* causal row 0 sees key 0 only */
    if (st != FA_OK || o[0] != 1.0f || o[1] != 2.0f) {
        printf("static.c: FAILED (%s)\n", fa_status_string(st));
        return 1;
    }
    if (static_unit_two() != 0) {
        printf("static.c: FAILED in the second unit\n");
        return 1;
    }
    printf("static.c: ok (FLASHATTN_STATIC, two private copies in one program)\n");
    return 0;
}
