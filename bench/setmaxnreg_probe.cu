/* setmaxnreg_probe.cu - does ptxas give a warpgroup the registers that setmaxnreg asks for?
   A compile-time probe (no GPU needed), for the Hopper kernels' register budgets (flashattn.h 8a,
   fa__wg_d128 / fa__wg_d64's REG_P and REG_C):

     nvcc -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -c bench/setmaxnreg_probe.cu -o /dev/null
     nvcc -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -DNO_SETMAXNREG -c bench/setmaxnreg_probe.cu -o /dev/null

   A block of 384 threads (launch cap 65536 / 384 -> 168 registers a thread); warpgroup 0 lowers its
   registers to 40, the other two raise theirs to 232 and keep N floats live across a loop. ptxas
   -v prints "Used 168 registers" either way (the launch's count); what differs is the spill: with
   setmaxnreg, N = 200 compiles without a spill, without it 596 bytes spill (nvcc 13.0, 2026-12-01,
   bench/RESULTS.md "Hopper forward"). So the consumer code of an sm_90a kernel may hold REG_C
   registers. */
#ifdef NO_SETMAXNREG
#define FA_DEC ""
#define FA_INC ""
#else
#define FA_DEC "setmaxnreg.dec.sync.aligned.u32 40;\n"
#define FA_INC "setmaxnreg.inc.sync.aligned.u32 232;\n"
#endif

template <int N>
__global__ void __launch_bounds__(384, 1) probe(const float *__restrict__ in, float *__restrict__ out, int iters)
{
    if ((threadIdx.x >> 7) == 0) {
        asm volatile(FA_DEC);
        if (threadIdx.x == 0) out[0] = in[0];
    } else {
        asm volatile(FA_INC);
        float a[N];
#pragma unroll
        for (int i = 0; i < N; i++) a[i] = in[threadIdx.x * N + i];
        for (int t = 0; t < iters; t++) {
#pragma unroll
            for (int i = 0; i < N; i++) a[i] = fmaf(a[i], a[(i + 1) % N], a[(i + 7) % N]);
        }
#pragma unroll
        for (int i = 0; i < N; i++) out[threadIdx.x * N + i] = a[i];
    }
}
template __global__ void probe<150>(const float *, float *, int);
template __global__ void probe<200>(const float *, float *, int);
