/* tests/consumer/main.c - a program built against an installed flashattn.h, the way a user of
   `make install` builds it: through pkg-config (flashattn, flashattn-noblas) or CMake
   (flashattn::flashattn, flashattn::flashattn_noblas), by tests/consumer/run.sh. It checks that
   the header it got is this version, that the run-time and compile-time versions agree, that
   FLASHATTN_NO_BLAS came through the package (or not) as expected, and that the two paths agree. */
#define FLASHATTN_IMPLEMENTATION
#include <flashattn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    enum { B = 1, H = 2, SQ = 7, SK = 19, D = 16 };
    fa_params p = FA_PARAMS_INIT;
    static float q[B * H * SQ * D], k[B * H * SK * D], v[B * H * SK * D], o1[B * H * SQ * D], o2[B * H * SQ * D];
    char info[512];
    unsigned x = 99u;
    int i, ok = 1, want_noblas = argc > 1 && strcmp(argv[1], "noblas") == 0;
    for (i = 0; i < B * H * SK * D; i++) {
        x = x * 1664525u + 1013904223u;
        k[i] = (float)(x >> 8) / 8388608.0f - 1.0f;
        v[i] = (float)((x >> 3) & 0xFFFF) / 32768.0f - 1.0f;
        if (i < B * H * SQ * D) q[i] = (float)((x >> 12) & 0xFFFF) / 32768.0f - 1.0f;
    }
    p.batch = B; p.heads = H; p.seq_q = SQ; p.seq_k = SK; p.head_dim = D; p.causal = 1;
    if (fa_tiled(&p, q, k, v, o1) != FA_OK || fa_naive(&p, q, k, v, o2, NULL) != FA_OK ||
        !fa_allclose(o1, o2, B * H * SQ * D, 1e-5f, 1e-5f)) {
        puts("consumer: the two paths disagree or failed");
        ok = 0;
    }
    if (strcmp(fa_version(), FLASHATTN_VERSION_STRING) != 0 || fa_version_number() != FLASHATTN_VERSION_NUMBER) {
        puts("consumer: run-time and compile-time versions differ");
        ok = 0;
    }
    if (argc > 2 && strcmp(argv[2], FLASHATTN_VERSION_STRING) != 0) {
        printf("consumer: built against flashattn.h %s, expected %s\n", FLASHATTN_VERSION_STRING, argv[2]);
        ok = 0;
    }
    fa_build_info(info, sizeof info);
    if ((strstr(info, "BLAS: none (FLASHATTN_NO_BLAS)") != NULL) != want_noblas) {
        printf("consumer: expected %s\n", want_noblas ? "FLASHATTN_NO_BLAS" : "OpenBLAS");
        ok = 0;
    }
    printf("consumer: %s; %s\n", ok ? "ok" : "FAILED", info);
    return ok ? 0 : 1;
}
