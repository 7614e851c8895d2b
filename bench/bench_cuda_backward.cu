/* bench_cuda_backward.cu - the attention backward on the GPU: TFLOP/s of fa_cuda_tiled_backward, in
   its default (atomic dq) and deterministic modes (bench/RESULTS.md, "CUDA backward (issue 13)";
   bench/torch_sdpa.py --backward times PyTorch's backends on the same shapes).

   Shapes: the FlashAttention benchmark's, batch x seqlen = 16384 tokens, hidden 2048 (H = 32 at
   D = 64, H = 16 at D = 128), S = 1024 .. 16384, causal 0/1, dtypes bf16, fp16, fp32.
   FLOPs: the backward's, 2.5 x the forward's 4 B H S^2 D, halved for causal (FlashAttention's
   convention). Timing: CUDA events around each call (its workspace allocation, stream-ordered,
   included), one warm-up, median of repeats. Inputs N(0,1) drawn on the device; o and lse from
   fa_cuda_tiled. relerr: ||g_default - g_det|| / ||g_det|| over dq, dk, dv (the two modes agree to
   fp32 rounding, over the first 4M elements of each; accuracy against float64 is tests/test_cuda_backward.cu's job).

   Options: --quick (S = 1024, 4096, 16384), --budget SEC (per timed row, default 0.08), --dtype
   bf16|fp16|fp32 (repeatable; default all three). The kernel column names what the picker chose
   (bwd_tc_* the tensor-core backward, bwd_ffma_* the FFMA one).
   Row format (shared with bench/torch_sdpa.py): ROW impl dtype D causal S B H extra ms TFLOP/s relerr status */
#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN_CUDA
#ifndef FLASHATTN_NO_BLAS
#define FLASHATTN_NO_BLAS
#endif
#include "flashattn.h"

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x)                                                                                        \
    do {                                                                                             \
        cudaError_t e_ = (x);                                                                        \
        if (e_ != cudaSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

__device__ static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* N(0,1) by Box-Muller on a counter-based hash */
template <typename T> __global__ static void randn_k(T *x, size_t n, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t a = mix64(seed ^ (2 * i)), b = mix64(seed ^ (2 * i + 1));
        const float u1 = ((float)(a >> 40) + 1.0f) / 16777217.0f, u2 = (float)(b >> 40) / 16777216.0f;
        fa__st(x + i, sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
    }
}

static void randn(void *x, size_t n, fa_dtype dt, uint64_t seed)
{
    if (dt == FA_F32) randn_k<float><<<4096, 256>>>((float *)x, n, seed);
    else if (dt == FA_F16) randn_k<__half><<<4096, 256>>>((__half *)x, n, seed);
    else randn_k<__nv_bfloat16><<<4096, 256>>>((__nv_bfloat16 *)x, n, seed);
    CK(cudaGetLastError());
}

template <typename T> __global__ static void to_f32(const T *x, float *y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = fa__ld(x + i);
}

/* sum (a-b)^2 and sum b^2 of two device tensors of dt, in double on the host */
static void diff2(const void *a, const void *b, size_t n, fa_dtype dt, double *num, double *den)
{
    n = std::min(n, (size_t)1 << 22);   /* the first 4M elements: enough to see the modes agree */
    float *fa_, *fb;
    std::vector<float> ha(n), hb(n);
    CK(cudaMalloc(&fa_, n * 4));
    CK(cudaMalloc(&fb, n * 4));
    if (dt == FA_F32) { CK(cudaMemcpy(fa_, a, n * 4, cudaMemcpyDeviceToDevice)); CK(cudaMemcpy(fb, b, n * 4, cudaMemcpyDeviceToDevice)); }
    else if (dt == FA_F16) { to_f32<<<4096, 256>>>((const __half *)a, fa_, n); to_f32<<<4096, 256>>>((const __half *)b, fb, n); }
    else { to_f32<<<4096, 256>>>((const __nv_bfloat16 *)a, fa_, n); to_f32<<<4096, 256>>>((const __nv_bfloat16 *)b, fb, n); }
    CK(cudaMemcpy(ha.data(), fa_, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), fb, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        const double e = (double)ha[i] - hb[i];
        *num += e * e;
        *den += (double)hb[i] * hb[i];
    }
    cudaFree(fa_);
    cudaFree(fb);
}

static const char *dname(fa_dtype dt) { return dt == FA_F32 ? "fp32" : dt == FA_F16 ? "fp16" : "bf16"; }

static double opt_budget = 0.08;

/* median ms of fa_cuda_tiled_backward on p */
static double time_bwd(const fa_params &p, void *q, void *k, void *v, void *o, void *d_o, void *dq, void *dk, void *dv)
{
    cudaEvent_t e0, e1;
    std::vector<float> ts;
    float ms = 0.0f;
    int reps, r;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    if (fa_cuda_tiled_backward(&p, q, k, v, o, d_o, dq, dk, dv) != FA_OK) { fprintf(stderr, "backward failed\n"); exit(1); }
    CK(cudaEventRecord(e0));
    fa_cuda_tiled_backward(&p, q, k, v, o, d_o, dq, dk, dv);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
    reps = (int)std::min(20.0, std::max(2.0, opt_budget * 1e3 / std::max((double)ms, 1e-3)));
    for (r = 1; r < reps; r++) {
        CK(cudaEventRecord(e0));
        fa_cuda_tiled_backward(&p, q, k, v, o, d_o, dq, dk, dv);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ts[ts.size() / 2];
}

int main(int argc, char **argv)
{
    int quick = 0, i;
    std::vector<int> Ss;
    std::vector<fa_dtype> dts;
    cudaDeviceProp prop;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc) opt_budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc && !strcmp(argv[i + 1], "bf16")) dts.push_back(FA_BF16), i++;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc && !strcmp(argv[i + 1], "fp16")) dts.push_back(FA_F16), i++;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc && !strcmp(argv[i + 1], "fp32")) dts.push_back(FA_F32), i++;
        else { fprintf(stderr, "usage: %s [--quick] [--budget s] [--dtype bf16|fp16|fp32 ...]\n", argv[0]); return 2; }
    }
    if (dts.empty()) dts = { FA_BF16, FA_F16, FA_F32 };
    if (quick) Ss = { 1024, 4096, 16384 };
    else Ss = { 1024, 2048, 4096, 8192, 16384 };
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# bench_cuda_backward: %s, CUDA runtime %d, flashattn %s\n", prop.name, CUDART_VERSION, FLASHATTN_VERSION_STRING);
    for (int D : { 64, 128 }) {
        const int H = 2048 / D;
        for (int S : Ss) {
            const int B = 16384 / S;
            for (int causal = 0; causal < 2; causal++)
                for (fa_dtype dt : dts) {
                    const size_t n = (size_t)B * H * S * D, es = dt == FA_F32 ? 4 : 2;
                    void *q, *k, *v, *o, *d_o, *g[3], *h[3];
                    float *lse;
                    fa_params p;
                    double ms[2], num = 0.0, den = 0.0;
                    const double fl = 2.5 * 4.0 * B * H * (double)S * S * D * (causal ? 0.5 : 1.0);
                    char impl[2][32] = { "fa_tiled_bwd", "fa_tiled_bwd_det" };
                    fa__dims dd;
                    fa__cu_bwd_plan plan;
                    CK(cudaMalloc(&q, n * es)); CK(cudaMalloc(&k, n * es)); CK(cudaMalloc(&v, n * es));
                    CK(cudaMalloc(&o, n * es)); CK(cudaMalloc(&d_o, n * es));
                    CK(cudaMalloc(&lse, (size_t)B * H * S * 4));
                    for (int u = 0; u < 3; u++) { CK(cudaMalloc(&g[u], n * es)); CK(cudaMalloc(&h[u], n * es)); }
                    randn(q, n, dt, 1); randn(k, n, dt, 2); randn(v, n, dt, 3); randn(d_o, n, dt, 4);
                    memset(&p, 0, sizeof p);
                    p.batch = B; p.heads = H; p.seq_q = S; p.seq_k = S; p.head_dim = D; p.dtype = dt; p.causal = causal;
                    p.lse = lse;
                    if (fa_cuda_tiled(&p, q, k, v, o) != FA_OK) { fprintf(stderr, "forward failed\n"); return 1; }
                    for (int det = 0; det < 2; det++) {
                        p.deterministic = det;
                        ms[det] = time_bwd(p, q, k, v, o, d_o, det ? h[0] : g[0], det ? h[1] : g[1], det ? h[2] : g[2]);
                    }
                    CK(cudaDeviceSynchronize());
                    for (int u = 0; u < 3; u++) diff2(g[u], h[u], n, dt, &num, &den);
                    fa__resolve(&p, q, k, v, o, &dd, NULL);
                    fa__cu_pick_backward(&dd, q, k, v, d_o, g[0], g[1], g[2], &plan);
                    for (int det = 0; det < 2; det++)
                        printf("ROW %-16s %-5s %4d %2d %6d %4d %3d %-10s %9.3f %8.1f %9.2e %s\n", impl[det], dname(dt), D, causal,
                               S, B, H, fa__cu_bwd_kernel_name(plan.kernel), ms[det], fl / ms[det] / 1e9, sqrt(num / den),
                               sqrt(num / den) <= 1e-3 ? "OK" : "DIFF");
                    printf("# det/default time ratio %.3f\n", ms[1] / ms[0]);
                    fflush(stdout);
                    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(d_o); cudaFree(lse);
                    for (int u = 0; u < 3; u++) { cudaFree(g[u]); cudaFree(h[u]); }
                }
        }
    }
    return 0;
}
