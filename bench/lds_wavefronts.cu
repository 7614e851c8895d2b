/* lds_wavefronts.cu - a probe of the shared-memory wavefronts a warp's 16-, 8- and 4-byte load takes
   by the lanes' address pattern (bench/RESULTS.md, CUDA backward, "FFMA backward: lanes in quads of
   2 x 2"). Each kernel lds_pat<P, W> loads W floats a lane from row rowof<P>(lane) of a padded
   [64][132] array (P 7: 32 distinct contiguous words) in a loop; read the counts with
     ncu --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_cmd_read.sum,smsp__inst_executed_op_shared_ld.sum ./lds_wavefronts
   Build: nvcc -O3 -gencode arch=compute_90a,code=sm_90a bench/lds_wavefronts.cu -o lds_wavefronts */
#include <cstdio>
#include <cuda_runtime.h>
template <int P> __device__ __forceinline__ int rowof(int l)
{
    return P == 0 ? (l & 7) : P == 1 ? (l >> 3) : P == 2 ? (l >> 2) : P == 3 ? (l & 3) : P == 4 ? (l >> 4) : P == 5 ? 0
         : P == 6 ? (l & 1) : P == 8 ? (l & 15) : P == 9 ? (l >> 1) : P == 10 ? ((l >> 3) & 1) : P == 11 ? ((l >> 4) * 2 + (l & 1))
         : P == 12 ? (l & 7) * 2 : 0;
}
template <int P, int W> __global__ void __launch_bounds__(256) lds_pat(float *out, int iters)
{
    __shared__ __align__(16) float s[64 * 132 + 1024];
    for (int i = threadIdx.x; i < 64 * 132 + 1024; i += 256) s[i] = (float)(i % 7);
    __syncthreads();
    const int l = threadIdx.x & 31;
    const int base = P == 7 ? l * W : rowof<P>(l) * 132;
    float acc = 0.0f;
    for (int it = 0; it < iters; it++) {
        const int a = base + ((it * 4) & 63);
        if (W == 4) { float4 x; asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w) : "r"((unsigned)__cvta_generic_to_shared(s + a))); acc += x.x + x.y + x.z + x.w; }
        else if (W == 2) { float2 x; asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];" : "=f"(x.x), "=f"(x.y) : "r"((unsigned)__cvta_generic_to_shared(s + a))); acc += x.x + x.y; }
        else { float x; asm volatile("ld.shared.f32 %0, [%1];" : "=f"(x) : "r"((unsigned)__cvta_generic_to_shared(s + a))); acc += x; }
    }
    out[blockIdx.x * 256 + threadIdx.x] = acc;
}
template <int P> void run(float *o)
{
    lds_pat<P, 4><<<1, 256>>>(o, 1000);
    lds_pat<P, 2><<<1, 256>>>(o, 1000);
    lds_pat<P, 1><<<1, 256>>>(o, 1000);
}
int main()
{
    float *o;
    cudaMalloc(&o, 1 << 20);
    run<0>(o); run<1>(o); run<2>(o); run<3>(o); run<4>(o); run<5>(o); run<6>(o); run<7>(o); run<8>(o); run<9>(o);
    run<10>(o); run<11>(o); run<12>(o);
    printf("lds_pat: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
    return 0;
}
