/* examples/cuda_quickstart.cu - the same attention on the CPU (fa_tiled) and on the GPU
   (fa_cuda_tiled), side by side in one program.

   This .cu file is the translation unit that holds the implementation: compiled by nvcc with
   FLASHATTN_IMPLEMENTATION and FLASHATTN_CUDA it provides the fa_cuda_* functions and the CPU
   ones too. Those CPU functions are weak symbols here, so a C file with its own
   FLASHATTN_IMPLEMENTATION can be linked into the same program without duplicate symbols (the
   Makefile's cuda-objs rule links this example with tests/compile/impl.c to show it):

       nvcc -O3 -DFLASHATTN_NO_BLAS -I. examples/cuda_quickstart.cu -o cuda_quickstart -lcublas

   or, with the CPU implementation in a C file built against OpenBLAS:

       cc -O2 -I. -c impl.c                     # #define FLASHATTN_IMPLEMENTATION + #include
       nvcc -O3 -I. -c examples/cuda_quickstart.cu
       nvcc impl.o cuda_quickstart.o -o cuda_quickstart -lcublas -lopenblas -lm -lpthread */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN_CUDA
#include "flashattn.h"

static float uniform(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f * 2.0f - 1.0f;
}

int main(void)
{
    fa_params p;
    size_t nq, nkv, i;
    float *q, *k, *v, *o_cpu, *o_gpu;
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
    unsigned seed = 1;
    fa_status st;
    int ok;

    memset(&p, 0, sizeof p);                          /* zero: every default */
    p.batch = 2; p.heads = 8; p.kv_heads = 2; p.seq_q = 300; p.seq_k = 500; p.head_dim = 64; p.causal = 1;
    nq = (size_t)p.batch * p.heads * p.seq_q * p.head_dim;           /* packed [B][H][S][D] fp32 */
    nkv = (size_t)p.batch * p.kv_heads * p.seq_k * p.head_dim;
    q = (float *)malloc(nq * sizeof(float)); o_cpu = (float *)malloc(nq * sizeof(float));
    o_gpu = (float *)malloc(nq * sizeof(float));
    k = (float *)malloc(nkv * sizeof(float)); v = (float *)malloc(nkv * sizeof(float));
    if (!q || !k || !v || !o_cpu || !o_gpu) return 1;
    for (i = 0; i < nq; i++) q[i] = uniform(&seed);
    for (i = 0; i < nkv; i++) { k[i] = uniform(&seed); v[i] = uniform(&seed); }

    /* CPU */
    st = fa_tiled(&p, q, k, v, o_cpu);
    printf("fa_tiled (CPU):      %s\n", fa_status_string(st));
    if (st != FA_OK) return 1;

    /* GPU: the same request on device pointers */
    if (cudaMalloc(&dq, nq * 4) != cudaSuccess || cudaMalloc(&dk, nkv * 4) != cudaSuccess ||
        cudaMalloc(&dv, nkv * 4) != cudaSuccess || cudaMalloc(&dout, nq * 4) != cudaSuccess) {
        printf("no CUDA device memory (is there a GPU?): skipping the GPU half\n");
        return 0;
    }
    cudaMemcpy(dq, q, nq * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, k, nkv * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, v, nkv * 4, cudaMemcpyHostToDevice);
    st = fa_cuda_tiled(&p, dq, dk, dv, dout);         /* p.stream = 0: the default stream */
    printf("fa_cuda_tiled (GPU): %s\n", fa_status_string(st));
    if (st != FA_OK || cudaMemcpy(o_gpu, dout, nq * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;

    ok = fa_allclose(o_gpu, o_cpu, nq, 1e-5f, 1e-5f);
    printf("max |GPU - CPU| = %.3g over %zu outputs: %s\n", fa_max_abs_diff(o_gpu, o_cpu, nq), nq,
           ok ? "allclose(1e-5)" : "NOT close");
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout);
    free(q); free(k); free(v); free(o_cpu); free(o_gpu);
    return ok ? 0 : 1;
}
