/* amx_rr_bits.c - fa_tiled's bf16 output on 8 shapes (GQA, causal, window, softcap, pools of 1-3
   threads, block_q 0/192/480, D 32-128), written to one file, for checking that two builds of the
   header give the same bits (issue 16: FA__AMX_RR 0, the panel pipeline, against its chunked round
   robin). Build it twice and compare:
       cc -O2 -std=c99 -I. -DFA__AMX_RR=0 bench/amx_rr_bits.c -o /tmp/b0 -lm -lpthread
       cc -O2 -std=c99 -I. bench/amx_rr_bits.c -o /tmp/b1 -lm -lpthread
       /tmp/b0 /tmp/o0 && /tmp/b1 /tmp/o1 && cmp /tmp/o0 /tmp/o1
   On a CPU without AMX add -DFA__AMX_EMULATE (the tiles in C) to both. */
#define _GNU_SOURCE
#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN_STATIC
#define FLASHATTN_NO_BLAS
#include "flashattn.h"
#include <stdio.h>
static uint16_t bf(float x) { uint32_t u; memcpy(&u, &x, 4); return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); }
static unsigned rs = 12345;
static float rnd(void) { rs = rs * 1103515245u + 12345u; return ((rs >> 8) & 0xFFFF) / 32768.0f - 1.0f; }
int main(int argc, char **argv)
{
    /* B, Hq, Hkv, Sq, Sk, D, causal, window, softcap, threads, block_q */
    static const int sh[][11] = {
        { 1, 2, 1, 300, 700, 64, 0, 0, 0, 1, 0 }, { 1, 2, 2, 520, 520, 128, 1, 0, 0, 3, 0 },
        { 2, 4, 2, 257, 400, 64, 1, 37, 0, 2, 0 }, { 1, 4, 1, 700, 300, 128, 0, 0, 1, 1, 0 },
        { 1, 2, 1, 1100, 1100, 64, 1, 0, 0, 1, 0 }, { 1, 1, 1, 1030, 1030, 128, 0, 0, 0, 1, 480 },
        { 1, 8, 2, 96, 512, 64, 0, 0, 0, 1, 0 }, { 1, 2, 1, 600, 600, 32, 0, 100, 0, 2, 192 } };
    FILE *f = argc > 1 ? fopen(argv[1], "wb") : NULL;
    if (!f) return 1;
    int s;
    for (s = 0; s < (int)(sizeof sh / sizeof sh[0]); s++) {
        const int *z = sh[s];
        size_t nq = (size_t)z[0] * z[1] * z[3] * z[5], nk = (size_t)z[0] * z[2] * z[4] * z[5], i;
        uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2), *o = malloc(nq * 2);
        fa_params p;
        char line[800];
        for (i = 0; i < nq; i++) q[i] = bf(2 * rnd());
        for (i = 0; i < nk; i++) { k[i] = bf(2 * rnd()); v[i] = bf(rnd()); }
        memset(&p, 0, sizeof p);
        p.batch = z[0]; p.heads = z[1]; p.kv_heads = z[2]; p.seq_q = z[3]; p.seq_k = z[4]; p.head_dim = z[5];
        p.dtype = FA_BF16; p.causal = z[6]; p.window_left = z[7];
        p.softcap = z[8] ? 3.0f : 0.0f; p.threads = z[9]; p.block_q = z[10];
        if (fa_tiled(&p, q, k, v, o) != FA_OK) { printf("shape %d failed\n", s); return 1; }
        if (s == 0) { fa_describe(&p, FA_CALL_TILED, line, sizeof line); printf("%s\n", line); }
        fwrite(o, 2, nq, f);
        free(q); free(k); free(v); free(o);
    }
    fclose(f);
    return 0;
}
