/* amx_probe.c - where the AMX bf16 forward's time goes, one thread, on one tile's worth of data in
   cache (issue 16). For D = 64, 128 and key blocks of 64 and 128 it times, per panel and key block
   (a panel: the lanes one product call serves, 32 here), each step of the tiled loop alone:
   scores on the tiles (fa__qk_amx, with its scale pass), the online softmax step (fa__online_avx512),
   P rounded to bf16 pairs (fa__ppack_bf16), P V on the tiles (fa__pv_amx), V's words and their
   transpose per block (fa__vpack_bf16 + fa__vt_pack, once per tile and block, shared by the panels),
   then the four in their real order, beside this thread's AMX tile-loop ceiling; then the fused online
   step with P's rounding (fa__online_amx, `oamx`) and the panel pipeline of fa__tiled_item with the
   jobs run before each online step (`pipe0`) or through it (`pipe`), and FA__AMX_RR's order: panels
   in chunks of 1, 2, 3 and 6, each product's 2 x 2 blocks round robin over a chunk (fa__amx_run_rr;
   the scores alone, P V alone, and the whole chunked block). Prints ns per
   panel-block and the GFLOP/s the two products' 4 x lanes x keys x D would run at.
   Needs an AMX-BF16 CPU (prints "no AMX" and exits 0 elsewhere, or under FA__AMX_EMULATE runs the
   C emulation, for checking that it runs at all).
       cc -O2 -std=c99 -I. bench/amx_probe.c -o build/amx_probe -lopenblas -lm -lpthread
   -DPROBE_OLD builds it against the previous header's kernels (panels of 48 lanes in the tile's
   layout, ld 192): cc ... -DPROBE_OLD -Iold/ ... */
#define _GNU_SOURCE
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "bench/bench_util.h"

#ifndef FA__HAVE_AMX
int main(void) { printf("amx_probe: built without the AMX kernels\n"); return 0; }
#else
#ifdef PROBE_OLD
#define LANES 48
#define NPAN 4
#define LD 192
#else
#define LANES 32
#define NPAN 6
#define LD 32
#endif

static uint16_t bf(float x) { return fa__f32_to_bf16(x); }

static double tnow(void) { return bench_now(); }

/* 64-byte aligned, as the library's workspace is (a tile row then never splits a cache line) */
static void *amalloc(size_t n)
{
    void *p = NULL;
    return posix_memalign(&p, 64, n) == 0 ? p : NULL;
}

int main(int argc, char **argv)
{
    static const int Ds[2] = { 64, 128 }, BKs[2] = { 64, 128 };
    int di, bi, reps = argc > 1 ? atoi(argv[1]) : 2000;
    if (!fa__cpu_amx() || !fa__amx_permit()) { printf("amx_probe: no AMX (or not permitted)\n"); return 0; }
    printf("amx_probe (%s kernels): one thread, panels of %d lanes, %d panels a tile; ns per panel and key block\n",
           #ifdef PROBE_OLD
           "previous",
           #else
           "current",
           #endif
           LANES, NPAN);
#ifndef FA__AMX_EMULATE
    printf("AMX tile-loop ceiling, this thread: %.0f GFLOP/s\n", bench_amx_gflops(1));
#endif
    printf("%4s %4s | %8s %8s %8s %8s %8s | %8s %8s | %6s %6s | %8s %8s %8s | %6s %6s\n", "D", "bk", "qk", "online", "ppack",
           "pv", "vpack/p", "sum", "seq", "GF sum", "GF seq", "oamx", "pipe0", "pipe", "GF p0", "GF pipe");
    for (di = 0; di < 2; di++)
        for (bi = 0; bi < 2; bi++) {
            int D = Ds[di], bk = BKs[bi], np16 = (int)fa__round16(((size_t)bk + 1) / 2), p, r, j;
            size_t i;
            uint16_t *K = (uint16_t *)amalloc((size_t)bk * D * 2), *V = (uint16_t *)amalloc((size_t)bk * D * 2);
            uint32_t *Qp = (uint32_t *)amalloc((size_t)NPAN * LD * D / 2 * 4 + (size_t)LD * D * 2);
            float *St = (float *)amalloc((size_t)bk * LD * 4 * NPAN), *Ot = (float *)amalloc((size_t)NPAN * LD * D * 4 + (size_t)LD * D * 4);
            uint32_t *Pp = (uint32_t *)amalloc((size_t)np16 * LD * NPAN * 4), *Vp = (uint32_t *)amalloc((size_t)bk * D * 4);
            uint32_t *Vt = (uint32_t *)amalloc((size_t)D * np16 * 4);
            float m[LD * NPAN], l[LD * NPAN], tmp[LD * NPAN], *f = (float *)amalloc((size_t)bk * D * 4);
            double t0, tq = 0, to = 0, tp = 0, tv = 0, tk = 0, ts = 0, flops = 4.0 * LANES * bk * D, tf = 0, tz = 0, tpp = 0;
#ifndef PROBE_OLD
            double rrq[4] = { 0 }, rrv[4] = { 0 }, rra[4] = { 0 };
#endif
            fa__pf pf;
            memset(&pf, 0, sizeof pf);
            memset(Pp, 0, (size_t)np16 * LD * NPAN * 4);
            bench_fill_normal(f, (size_t)bk * D);
            for (i = 0; i < (size_t)bk * D; i++) K[i] = bf(f[i]);
            bench_fill_normal(f, (size_t)bk * D);
            for (i = 0; i < (size_t)bk * D; i++) V[i] = bf(f[i]);
            for (i = 0; i < (size_t)NPAN * LD * D / 2; i++) Qp[i] = (uint32_t)bf(f[i % ((size_t)bk * D)]) | (uint32_t)bf(f[(i * 7) % ((size_t)bk * D)]) << 16;
            memset(Ot, 0, (size_t)NPAN * LD * D * 4);
            for (i = 0; i < (size_t)LD * NPAN; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
            fa__amx_begin();
#ifdef PROBE_OLD
#define QP(p) (Qp + (size_t)(p) * LANES)
#define SP(p) (St + (size_t)(p) * LANES)
#define OP(p) (Ot + (size_t)(p) * LANES)
#define PP(p) (Pp + (size_t)(p) * LANES)
#define QK(p) fa__qk_amx(K, D, bk, D, QP(p), LD, SP(p), LD, 3, 0.088f, &pf)
#define PV(p) fa__pv_amx(Vt, np16, D, PP(p), LD, OP(p), LD, 3, &pf)
#define NV 3
#else
#define QP(p) (Qp + (size_t)(p) * LANES * D / 2)
#define SP(p) (St + (size_t)(p) * LANES * bk)
#define OP(p) (Ot + (size_t)(p) * LANES * D)
#define PP(p) (Pp + (size_t)(p) * LANES * np16)
#define QK(p) fa__qk_amx(K, D, bk, D, QP(p), SP(p), 2, 0.088f, &pf)
#define PV(p) fa__pv_amx(Vt, np16, D, PP(p), OP(p), 2, &pf)
#define NV 2
#endif
            for (r = 0; r < 2; r++) {      /* round 0 warms up */
                int n = r ? reps : reps / 10 + 1, k;
                double a;
                t0 = tnow();
                for (k = 0; k < n; k++) for (p = 0; p < NPAN; p++) QK(p);
                a = tnow() - t0; if (r) tq = a / n / NPAN;
                t0 = tnow();
                for (k = 0; k < n; k++) for (p = 0; p < NPAN; p++) fa__online_avx512(SP(p), LD, bk, NV, m + p * LANES, l + p * LANES, OP(p), LD, D, tmp);
                a = tnow() - t0; if (r) to = a / n / NPAN;
                t0 = tnow();
                for (k = 0; k < n; k++) for (p = 0; p < NPAN; p++) fa__ppack_bf16(SP(p), LD, bk, NV, PP(p));
                a = tnow() - t0; if (r) tp = a / n / NPAN;
                t0 = tnow();
                for (k = 0; k < n; k++) for (p = 0; p < NPAN; p++) PV(p);
                a = tnow() - t0; if (r) tv = a / n / NPAN;
                t0 = tnow();
                for (k = 0; k < n; k++) { j = fa__vpack_bf16(V, D, bk, D, Vp); fa__vt_pack(Vp, (bk + 1) / 2, D, Vt, np16); (void)j; }
                a = tnow() - t0; if (r) tk = a / n / NPAN;     /* shared by the tile's panels */
                t0 = tnow();
                for (k = 0; k < n; k++) {
                    j = fa__vpack_bf16(V, D, bk, D, Vp); fa__vt_pack(Vp, (bk + 1) / 2, D, Vt, np16);
                    for (p = 0; p < NPAN; p++) {
                        QK(p);
                        fa__online_avx512(SP(p), LD, bk, NV, m + p * LANES, l + p * LANES, OP(p), LD, D, tmp);
                        fa__ppack_bf16(SP(p), LD, bk, NV, PP(p));
                        PV(p);
                    }
                }
                a = tnow() - t0; if (r) ts = a / n / NPAN;
#ifndef PROBE_OLD
                /* the fused online step with P's rounding (fa__online_amx, no jobs), then the panel
                   pipeline as fa__tiled_item runs it: jobs run before each step (pipe0) or through it */
                memset(Ot, 0, (size_t)NPAN * LD * D * 4);
                for (i = 0; i < (size_t)LD * NPAN; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
                t0 = tnow();
                for (k = 0; k < n; k++) for (p = 0; p < NPAN; p++) fa__online_amx(SP(p), 0, bk, NV, 0.088f, m + p * LANES, l + p * LANES, OP(p), D, PP(p), np16, NULL, 0);
                a = tnow() - t0; if (r) tf = a / n / NPAN;
                {
                    int pipe;
                    for (pipe = 0; pipe < 2; pipe++) {
                        t0 = tnow();
                        for (k = 0; k < n; k++) {
                            fa__amx_job jb[2], jq;
                            j = fa__vpack_bf16(V, D, bk, D, Vp); fa__vt_pack(Vp, (bk + 1) / 2, D, Vt, np16);
                            fa__qk_amx_job(K, D, bk, D, QP(0), SP(0), NV, &pf, &jq); fa__amx_run(&jq, 1);
                            for (p = 0; p < NPAN; p++) {
                                int nj = 0;
                                if (p > 0) fa__pv_amx_job(Vt, np16, D, PP(p - 1), OP(p - 1), NV, &pf, &jb[nj++]);
                                if (p + 1 < NPAN) fa__qk_amx_job(K, D, bk, D, QP(p + 1), SP(p + 1), NV, &pf, &jb[nj++]);
                                if (!pipe) { fa__amx_run(jb, nj); nj = 0; }
                                fa__online_amx(SP(p), 0, bk, NV, 0.088f, m + p * LANES, l + p * LANES, OP(p), D, PP(p), np16, jb, nj);
                            }
                            fa__pv_amx_job(Vt, np16, D, PP(NPAN - 1), OP(NPAN - 1), NV, &pf, &jq); fa__amx_run(&jq, 1);
                        }
                        a = tnow() - t0; if (r) { if (pipe) tpp = a / n / NPAN; else tz = a / n / NPAN; }
                    }
                }
                {   /* FA__AMX_RR's order: chunks of g panels, each product's 2 x 2 blocks round robin over
                       the chunk (fa__amx_run_rr), the scores alone (qk), P V alone (pv), and the whole
                       chunked block (all: scores, online steps, P V), for g = 1, 2, 3, 6 */
                    static const int gs[4] = { 1, 2, 3, 6 };
                    int gi, c0, c1;
                    for (gi = 0; gi < 4; gi++) {
                        fa__amx_job cj[NPAN];
                        int g = gs[gi];
                        t0 = tnow();
                        for (k = 0; k < n; k++)
                            for (c0 = 0; c0 < NPAN; c0 = c1) {
                                c1 = c0 + g < NPAN ? c0 + g : NPAN;
                                for (p = c0; p < c1; p++) fa__qk_amx_job(K, D, bk, D, QP(p), SP(p), NV, &pf, &cj[p - c0]);
                                fa__amx_run_rr(cj, c1 - c0);
                            }
                        a = tnow() - t0; if (r) rrq[gi] = a / n / NPAN;
                        t0 = tnow();
                        for (k = 0; k < n; k++)
                            for (c0 = 0; c0 < NPAN; c0 = c1) {
                                c1 = c0 + g < NPAN ? c0 + g : NPAN;
                                for (p = c0; p < c1; p++) fa__pv_amx_job(Vt, np16, D, PP(p), OP(p), NV, &pf, &cj[p - c0]);
                                fa__amx_run_rr(cj, c1 - c0);
                            }
                        a = tnow() - t0; if (r) rrv[gi] = a / n / NPAN;
                        t0 = tnow();
                        for (k = 0; k < n; k++) {
                            j = fa__vpack_bf16(V, D, bk, D, Vp); fa__vt_pack(Vp, (bk + 1) / 2, D, Vt, np16);
                            for (c0 = 0; c0 < NPAN; c0 = c1) {
                                c1 = c0 + g < NPAN ? c0 + g : NPAN;
                                for (p = c0; p < c1; p++) fa__qk_amx_job(K, D, bk, D, QP(p), SP(p), NV, &pf, &cj[p - c0]);
                                fa__amx_run_rr(cj, c1 - c0);
                                for (p = c0; p < c1; p++)
                                    fa__online_amx(SP(p), 0, bk, NV, 0.088f, m + p * LANES, l + p * LANES, OP(p), D, PP(p), np16, NULL, 0);
                                for (p = c0; p < c1; p++) fa__pv_amx_job(Vt, np16, D, PP(p), OP(p), NV, &pf, &cj[p - c0]);
                                fa__amx_run_rr(cj, c1 - c0);
                            }
                        }
                        a = tnow() - t0; if (r) rra[gi] = a / n / NPAN;
                    }
                }
#endif
                memset(Ot, 0, (size_t)NPAN * LD * D * 4);
                for (i = 0; i < (size_t)LD * NPAN; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
            }
            fa__amx_end();
            printf("%4d %4d | %8.0f %8.0f %8.0f %8.0f %8.0f | %8.0f %8.0f | %6.0f %6.0f | %8.0f %8.0f %8.0f | %6.0f %6.0f\n", D, bk,
                   1e9 * tq, 1e9 * to, 1e9 * tp, 1e9 * tv, 1e9 * tk, 1e9 * (tq + to + tp + tv + tk), 1e9 * ts,
                   flops / (tq + to + tp + tv + tk) * 1e-9, flops / ts * 1e-9, 1e9 * tf, 1e9 * tz, 1e9 * tpp,
                   tz > 0 ? flops / tz * 1e-9 : 0.0, tpp > 0 ? flops / tpp * 1e-9 : 0.0);
#ifndef PROBE_OLD
            printf("%4d %4d | chunks of 1/2/3/6 panels, round robin: qk %.0f/%.0f/%.0f/%.0f pv %.0f/%.0f/%.0f/%.0f all %.0f/%.0f/%.0f/%.0f"
                   " (ns per tdpbf16ps qk %.1f/%.1f/%.1f/%.1f, GF all %.0f/%.0f/%.0f/%.0f)\n", D, bk,
                   1e9 * rrq[0], 1e9 * rrq[1], 1e9 * rrq[2], 1e9 * rrq[3], 1e9 * rrv[0], 1e9 * rrv[1], 1e9 * rrv[2], 1e9 * rrv[3],
                   1e9 * rra[0], 1e9 * rra[1], 1e9 * rra[2], 1e9 * rra[3], 1e9 * rrq[0] / (bk / 16 * 2 * D / 32.0),
                   1e9 * rrq[1] / (bk / 16 * 2 * D / 32.0), 1e9 * rrq[2] / (bk / 16 * 2 * D / 32.0), 1e9 * rrq[3] / (bk / 16 * 2 * D / 32.0),
                   flops / rra[0] * 1e-9, flops / rra[1] * 1e-9, flops / rra[2] * 1e-9, flops / rra[3] * 1e-9);
#endif
            free(K); free(V); free(Qp); free(St); free(Ot); free(Pp); free(Vp); free(Vt); free(f);
        }
    {   /* one 2 x 2 block of tiles (fa__amx_group) on operands that stay in L1: 32 x 32 C over a reduction
           of D = 64, 128, 256, without and with C loaded (acc): the loop's own rate, beside the ceiling */
        static uint16_t A[32 * 256] __attribute__((aligned(64)));
        static uint32_t B[128 * 32] __attribute__((aligned(64)));
        static float C[32 * 32] __attribute__((aligned(64)));
        int kd, acc, i2, n = reps * 20;
        for (i2 = 0; i2 < 32 * 256; i2++) A[i2] = bf((float)((i2 % 13) - 6) * 0.01f);
        for (i2 = 0; i2 < 128 * 32; i2++) B[i2] = (uint32_t)bf((float)((i2 % 7) - 3) * 0.01f) * 0x10001u;
        memset(C, 0, sizeof C);
        fa__amx_begin();
        for (kd = 64; kd <= 256; kd *= 2)
            for (acc = 0; acc < 2; acc++) {
                double t0 = tnow(), t;
                int k2;
                for (k2 = 0; k2 < n; k2++) {
                    fa__amx_job jj;
                    fa__amx_job_set(&jj, A, 2 * 256, 32, kd, B, 32, C, 32, 32, acc);
                    fa__amx_group(&jj);
                }
                t = tnow() - t0;
                printf("2x2 block in L1, reduction %3d, acc %d: %6.1f ns per tdpbf16ps, %5.0f GFLOP/s\n", kd, acc,
                       1e9 * t / n / (4.0 * kd / 32), 4.0 * (kd / 32) * 16384.0 * n / t * 1e-9);
            }
        fa__amx_end();
        if (C[0] != C[0]) printf("NaN\n");
    }
    return 0;
}
#endif
