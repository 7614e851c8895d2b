/* flashattn.h - v0.2.0 - exact attention kernels in one header - MIT licence (end of file)

   A naive attention that materialises the Sq x Sk score matrix (GEMMs through OpenBLAS) and a
   tiled online-softmax attention that never does (K/V walked in blocks with a running max m, a
   running normaliser l and the rescale alpha = exp(m_old - m_new); the CPU path and the CUDA
   tensor-core kernels rescale lazily, only when a row's max has grown by more than 8 since the
   last rescale, so every exp stays below e^8 and O / l is unchanged). Both compute the same function,
   exactly, in fp32, on fp32, fp16 or bf16 storage (HALF PRECISION below); a CUDA backend with the same API on device pointers sits behind FLASHATTN_CUDA.

   CONTENTS (each >>tag marks its section below, in this order; make test checks that they agree)

       >>api        the public API: statuses, dtypes, fa_params, every function
       >>config     0. every default and tuning constant of the CPU paths
       >>common     1. every backend: statuses, comparisons, version and build info, the request
                       resolved and validated, the position rule and the key ranges built on it
       >>rule       2. CPU: the score rule (softcap, ALiBi, bias, mask), one score and one row at a time
       >>simd       3. CPU: vector math, the tiled microkernels per ISA, the kernel table
       >>threads    4. CPU: threads and fa_pool; GEMMs on the calling thread
       >>naive      5. CPU: the naive path
       >>merge      6. merging partial results by log-sum-exp (fa_merge; the tiled path's chunks)
       >>tiled      7. CPU: the tiled online-softmax path (tile plan, key split, merge of chunks)
       >>backward   7b. CPU: the backward, naive and tiled; fa_describe
       >>cuda       8. CUDA: 8a kernels and tile traits, 8b device pieces, the modifier and merge rules,
                       8c generic kernel, 8d tensor-core kernel, 8d2 split-key decode kernels,
                       8d3 the Hopper kernel (sm_90a: wgmma, TMA), 8e naive and merge kernels,
                       8e2 the backward, 8e3 the Hopper backward (sm_90a: wgmma, TMA), 8f the
                       kernel pickers, 8g entry points
       >>license    the MIT licence

   USAGE

       #include "flashattn.h"              // declarations, in as many files as you like

       #define FLASHATTN_IMPLEMENTATION     // in exactly ONE C or C++ file
       #include "flashattn.h"

       fa_params p = FA_PARAMS_INIT;        // all zero: "the default" everywhere; C and C++
       p.batch = 2; p.heads = 8; p.seq_q = 512; p.seq_k = 512; p.head_dim = 64;
       fa_status st = fa_tiled(&p, q, k, v, o);   // q,k,v,o: packed [B][H][S][D] fp32
       if (st != FA_OK) fprintf(stderr, "%s\n", fa_status_string(st));

   Build with plain `cc -O2 ... -lopenblas -lm -lpthread` (`-lm -lpthread` under FLASHATTN_NO_BLAS).
   No -march flag is needed: the SIMD path of the running CPU is chosen at run time.
   FA_PARAMS_INIT is {0} in C and {} in C++ (where {0} trips -Wmissing-field-initializers);
   memset(&p, 0, sizeof p) is the same. `make install PREFIX=...` installs the header with a
   pkg-config file (flashattn, flashattn-noblas) and a CMake package (find_package(flashattn)
   gives flashattn::flashattn and flashattn::flashattn_noblas).

   VERSION: FLASHATTN_VERSION_MAJOR/MINOR/PATCH, FLASHATTN_VERSION_STRING ("0.2.0") and
   FLASHATTN_VERSION_NUMBER (major*10000 + minor*100 + patch) at compile time; fa_version() and
   fa_version_number() at run time, from the implementation that was linked. fa_build_info(buf, n)
   writes one line saying what the build holds: the BLAS (OpenBLAS's own config string), the SIMD
   paths compiled in and the one this CPU runs, and whether CUDA is linked.

   OPTIONS (define before including)

       FLASHATTN_IMPLEMENTATION   compile the implementation into this translation unit
       FLASHATTN_STATIC           every function gets internal linkage (static)
       FLASHATTN_NO_BLAS          no OpenBLAS: the naive path uses the header's own loops; the
                                  header then needs only libc, libm and POSIX threads
       FLASHATTN_CUDA             declare the fa_cuda_* functions; see CUDA below
       FLASHATTN_MALLOC(n)        every host allocation goes through these two
       FLASHATTN_FREE(p)          (define both or neither)
       FLASHATTN_ISA              0, 1 or 2: cap the CPU SIMD path picked at run time (portable C,
                                  AVX2+FMA, AVX-512F); for tests. FLASHATTN_NO_SIMD: no intrinsics
       FLASHATTN_NO_AVX512BF16    no vdpbf16ps (nor AMX) kernels: bf16 by conversion (see HALF PRECISION)
       FLASHATTN_NO_AMX           no AMX-BF16 tile kernels (bf16 on vdpbf16ps where the CPU has it)
       FLASHATTN_STACK            bytes of each CPU worker's stack (default 1 MiB: glibc's stack
                                  cache then keeps a call's stacks; see section 4)
       FLASHATTN_SPIN             pause instructions a pool worker and a pool's caller spin before
                                  they sleep (default 2000, ~10-100 us)
       FLASHATTN_OPENBLAS_1T_MNK  the largest GEMM (m n k) OpenBLAS runs on the calling thread
                                  (default 262144: 65536 x its GEMM_MULTITHREAD_THRESHOLD of 4)
       FLASHATTN_CUDA_FP32_FFMA   fa_cuda_tiled_backward keeps fp32 on its exact-fp32 FFMA kernel
                                  (default: fp32 at head_dim = head_dim_v = 64 or 128 with aligned
                                  rows runs on the tensor cores as three TF32 products, 3xTF32,
                                  about 1e-6 relative error; see CUDA below)

   SEMANTICS (b batch, h query head, g = h / (Hq/Hkv) its kv head, i query row, j key)

       d    = i + Sk - Sq                            query i's diagonal in key space
       s_ij = scale * dot(q_i, k_j)                   scale 0 means 1/sqrt(head_dim)
       s_ij = softcap * tanh(s_ij / softcap)          if softcap > 0
       s_ij = s_ij - slope[b][h] * |d - j|            if alibi_slopes
       s_ij = s_ij + bias[b][h][i][j]                 if bias (-INFINITY hides the key)
       hidden when causal && j > d, window_left > 0 && j < d - window_left,
                   window_right > 0 && j > d + window_right
       o_i   = sum_j softmax(s_i)_j v_j over visible keys,  lse_i = log sum_j exp(s_ij)
       A row with no visible key gets o_i = 0 and lse_i = -INFINITY, never NaN. A NaN in q, k or
       v makes NaN the rows (and, for v, the columns) it reaches, and no others; it never turns a
       row into an empty one (fa_merge and the key split likewise keep a NaN part's NaN). The
       CUDA forward kernels make the whole row NaN (not only its columns) when the v they reach
       holds an inf or NaN in a tile where some row hides some key.

   WINDOW vs flash-attn's window_size = (left, right): there -1 means unbounded and 0 means no key
   on that side; here 0 means unbounded, and a positive W means the same as there (W keys on that
   side of the diagonal, plus the diagonal). So (-1, -1) is window_left = window_right = 0; (L, -1)
   is window_left = L; (-1, R) is window_right = R; (L, 0) is window_left = L with causal = 1, and
   (-1, 0) is causal = 1 alone. A left side of 0 ((0, R): no key before the diagonal) has no window
   equivalent here; hide those keys with a bias.

   Layout: strides in elements for {batch, head, token}, the feature dim contiguous; all three zero
   means packed [B][H][S][D]; [B][S][H][D] is {S*H*D, D, H*D}. GQA/MQA through kv_heads.
   Inputs (q, k, v) take their strides as given, any int64 values: a zero stride broadcasts that
   axis, and only all three zero means packed. k_stride = {0, 0, D} is one [Sk][D] K shared by every
   batch and kv head; q_stride = {0, Sq*D, D} is the same [H][Sq][D] queries for every batch.
   Outputs are written by many workers at once, so o's strides must be >= 0 and its rows must not
   overlap: the axes of more than one index, taken by increasing stride, must nest (each stride at
   least the extent of the axes inside it, a token's at least head_dim_v). Every nested layout with
   or without padding passes ([B][H][S][Dv], [B][S][H][Dv], heads Dv + 5 apart, ...); o_stride[1] =
   Dv / 2 in [B][S][H][Dv] (heads overlapping) or a zero stride over batches of two fails. And no
   output (o, lse, fa_naive's scores) may share a byte with an input (q, k, v, bias, alibi_slopes)
   or with another output, each tensor counted from its first to its last element: no in-place
   attention. A layout that breaks these rules is FA_ERR_INVALID_ARG, nothing written; fa_explain
   says which rule. bias_stride is {batch, head, query, key}: all zero means packed [B][Hq][Sq][Sk],
   otherwise a zero stride broadcasts that axis ([B][Sk] key padding is {Sk, 0, 0, 1}). alibi_slopes
   is [Hq], or [B][Hq] with alibi_stride = Hq. softcap is 0 (off) or in [FLT_MIN, 3e38] (1/softcap
   must be finite).

   HALF PRECISION (dtype FA_F16, FA_BF16; issue 16): q, k, v, o (and d_o, dq, dk, dv) are stored in
   that type, 2 bytes an element; accumulation, softmax, lse and scores are fp32. The conversions
   round to nearest even and keep a NaN a NaN, fp16's subnormals and infinities exact (section 3).
   fa_tiled picks by the CPU at run time, as for fp32:
   - AMX-BF16 (Sapphire Rapids and later): bf16 with head_dim % 32 == 0 runs both products on the
     tile unit (tdpbf16ps). Linux lends a process the tile state only when it asks
     (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); fa_tiled asks at each call that would
     use the tiles. The permission is the process's, kept by the kernel for all its threads (not
     state of this library); where it is refused the call runs the vdpbf16ps kernels. Where a kv
     head has more than one query tile, V is transposed into the tiles' layout once per call for
     all of them (O(Sk Dv) more workspace, in the count). Its online step rounds P straight into
     the tiles' layout, its exps a degree-4 fit of 2^f (2.7e-6 relative, far under bf16's rounding
     of P), so its o is not the vdpbf16ps path's bits.
   - AVX512-BF16 (AMD Zen 4 and later, Cooper Lake): bf16 with an even head_dim runs both products
     on vdpbf16ps. Both bf16 paths read K as stored, pack Q and V into pairs once per tile and round
     P to bf16 for P V (as FlashAttention does on GPUs), so o differs from the fp32 call's on the
     same values by about bf16's rounding (relative error ~2e-3, API.md allows 5e-3). On the
     Sapphire Rapids Xeon we measured, vdpbf16ps runs slower than fp32 FMAs (0.6-0.75x our fp32
     forward); there AMX serves bf16, and FLASHATTN_NO_AVX512BF16 would serve a refusal faster.
   - Otherwise (fp16 everywhere, bf16 on other CPUs or odd head dims), each K/V block is converted
     to fp32 once per tile (vcvtph2ps by AVX-512F or F16C, bf16 by a shift, or C) into the fp32
     kernels, and Q once per tile: o is then bitwise the fp32 call's on the rounded inputs, rounded.
   - Decoding (tiles of at most 8 rows on AVX-512) reads half-precision K and V as stored, widened
     in registers: half the bytes of fp32.
   fa_naive and fa_naive_backward convert their inputs once into packed fp32 copies, run the fp32
   path on them and convert the outputs back (they must: their GEMMs are OpenBLAS's, and Debian's
   OpenBLAS 0.3.21 has no bf16 or fp16 GEMM). The copies are O((Sq + Sk) D) floats, never
   O(Sq x Sk), and are in the workspace counts; these paths run at about their fp32 speed.
   fa_tiled_backward makes no copies: it reads the inputs as stored, computes delta from each row's
   o and d_o converted, converts each key tile's K and V and each query block's Q and dO to fp32
   rows where its fp32 kernels need them, writes dk and dv in the storage type by their tile and dq
   from an fp32 accumulator (the only large buffer, [B][Hq][Sq][D]). On fp16, and on bf16 where the
   next case does not apply, its gradients are bitwise the fp32 call's on the rounded inputs,
   rounded. On bf16 with head_dim and head_dim_v multiples of 32, on a CPU with AVX512-BF16, it
   runs its five products in bf16 on the bf16 inputs (AMX tiles where the CPU has them and the
   process may, else vdpbf16ps), fp32 sums, P and dS rounded to bf16 as FlashAttention does on GPUs
   (gradients within API.md's 1e-2, not the fp32 call's bits), fp32 rows converted only for a key
   tile or query block holding an inf or NaN (bench/RESULTS.md, "CPU half precision", "Backward
   without the fp32 copies": that backward beside PyTorch's bf16 SDPA on the Xeon; "fp16 backward
   without the fp32 copies"). fa_describe and fa_build_info say which of these a call runs.
   Determinism holds on every path: a row's bits never depend on threads, pool or batch.

   ERRORS, EXPLAINED: fa_explain(p, q, k, v, o, scores) returns NULL when fa_naive (with scores) or
   fa_tiled (scores NULL) accepts the arguments, else the sentence of the first check that fails,
   e.g. "heads must be a multiple of kv_heads" or "lse overlaps o": every FA_ERR_INVALID_ARG and
   FA_ERR_UNSUPPORTED of the CPU calls has one. fa_explain_merge and fa_explain_pool_create do the
   same for fa_merge and fa_pool_create. They keep nothing and allocate nothing: the calls and they
   run the same checks, which say why as they fail.

   RANGE: both paths fold the scale into q before the products (s = (scale q) . k), so a logit in
   fp32 range is formed even when |q|, |k| are near 1e20. fa_naive normalises before P V, so its o
   is in range for any finite v. fa_tiled on the CPU accumulates O = sum_j e^(s_j - m) v_j before it
   divides by l, with e^(s_j - m) <= e^8 (the lazy rescale): its o is exact while
   Sk e^8 max|v| <= FLT_MAX, that is max|v| <= 1.14e35 / Sk (Sk the keys of a row); past that a row
   may come out +-inf or NaN where fa_naive is right (v = 1e36 at Sk = 200, or 3e32 at Sk = 4000,
   with the row's scores rising by almost 8 after its first block). Finding such rows would cost a
   pass over o (2.5-5% at S = 128-256), and fp32 activations are far below that limit.

   MEMORY: fa_naive allocates the whole [B][Hq][Sq][Sk] fp32 score matrix, as the textbook does
   (and per thread one [Sq][D] scale * Q), and
   returns FA_ERR_NO_MEMORY when it cannot, or when it is larger than the machine's physical memory
   (refused before asking the allocator, which might overcommit and fail only at first touch). fa_tiled allocates O(threads x tile), never O(Sq x Sk)
   (half storage adds per thread the block's K and V in fp32, 16 rows of Q and o, and for the bf16
   products the packed P and V; fa_naive and fa_naive_backward add the fp32 copies,
   fa_tiled_backward only dq's fp32 accumulator and per thread a block's Q and dO rows in fp32:
   HALF PRECISION).
   fa_*_workspace_bytes return exactly what the call will allocate.

   BACKWARD: fa_naive_backward and fa_tiled_backward take the forward's p (and, for the tiled one,
   the forward's lse in p->lse) with o and d_o, and overwrite dq, dk, dv (laid out as q, k, v; so
   their strides must be writable). dS = P (dP - delta) with delta = rowsum(d_o * o) and softcap's
   derivative 1 - tanh^2; ALiBi and bias are constants; GQA sums dk, dv over the group. Both are
   deterministic: every output element is made by one work item in an order fixed by the shape
   (section 7b says how), so the bits do not depend on threads or the pool.

   THREADS: `threads` workers (0: all online cores) share batch x heads x query tiles; with few query
   rows (decoding: at most 16 per head, or the heads of a GQA group in one tile) the key axis is
   split too, in chunks of at least 512 keys fixed by seq_k, and the chunks merged by log-sum-exp
   (fa_merge's rule). On the CPU a row's o and lse are bitwise the same for any `threads`, with or
   without a pool, and whatever batch or group of heads it is computed in: the tiling may follow
   the thread count, the arithmetic of a row does not (see fa__tiled_plan_make).
   The naive path runs its GEMMs inside its own workers, each on the worker's thread, so the call
   uses exactly `threads` threads, and it leaves OpenBLAS's thread count (the program's, shared by
   all its threads) alone: where OpenBLAS could thread a GEMM (its count above 1, or an OpenMP
   build) the GEMM is issued in blocks of at most FLASHATTN_OPENBLAS_1T_MNK = 262144 multiply-adds
   (m n k), which OpenBLAS 0.3.21-0.3.28 runs on the calling thread (65536 x its build option
   GEMM_MULTITHREAD_THRESHOLD, 4 by default and in Debian; define the macro lower for a build with
   a lower threshold). Blocked, the score GEMM is ~25-35% slower than whole; with OpenBLAS's count
   at 1 (bench sets it) the GEMMs are whole. OpenBLAS has no per-thread count to use instead:
   openblas_set_num_threads_local (0.3.27+) sets the same process-wide one in pthreads builds.
   Each call starts its workers (1 MiB stacks; the caller is one of them) and joins them before it
   returns: nothing outlives the call, which costs ~10-15 us per extra thread. The stacks come from
   the threads library, not from FLASHATTN_MALLOC, and are not part of the workspace counts.
   For many short calls (a layer loop, small shapes on many cores) create an fa_pool once and set
   p.pool: its workers stay parked between calls (they spin for 10-100 us after each call, then
   sleep on a condition variable), so a call pays a wake-up instead of thread starts. Nothing is global:
   the pool is the caller's, made by fa_pool_create and ended by fa_pool_destroy.

   ERRORS: every request is validated before any output is written; on any status other than FA_OK,
   o, lse and scores are untouched. No global mutable state (only caches of fixed facts of the CPU
   and the GPUs, filled once): concurrent calls are safe.

   CUDA: compile one .cu file with nvcc, FLASHATTN_IMPLEMENTATION and FLASHATTN_CUDA defined. It
   provides fa_cuda_* (device pointers, same meanings, stream honoured). The CPU functions it also
   carries are weak symbols, so the same program can link a C file that has its own
   FLASHATTN_IMPLEMENTATION, and call fa_tiled and fa_cuda_tiled side by side, with no duplicates.

       nvcc -O3 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
            -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
            -c fa_cuda.cu                                              (link with -lcublas)

   fp16/bf16 run on tensor cores (mma.sync, sm_80+) at head_dim = head_dim_v = 64 or 128 with
   16-byte aligned rows, on an exact-fp32 FFMA kernel otherwise; on a compute capability 9.0 GPU
   (H100, H200) at head_dim = head_dim_v = 64 or 128 with seq_k >= 1 and q/k/v strides that TMA takes
   (positive multiples of 8 elements, 16-byte aligned bases) on a Hopper kernel (wgmma, TMA,
   warp-specialised; every mask and modifier), which needs the sm_90a code above in the build
   (without it, mma.sync serves); the forward's fp32 is FFMA only (no TF32). One
   function picks the kernel of each fa_cuda_tiled call from the request (dtype, head dims,
   alignment, strides, block_q/block_k, modifiers), before anything is launched.
   DECODE: with few query rows per (batch, kv head) (Sq <= 16 and (heads / kv_heads) * Sq <= 64,
   seq_k >= 1, batch and kv_heads <= 65535) fa_cuda_tiled takes the split-key decode path
   (flash-decoding): the query heads of a GQA group packed in one block so K/V are read once per
   group (tensor cores for fp16/bf16 at D = Dv in {64, 128} with 16-byte aligned q/k/v rows, exact
   FFMA otherwise), the keys cut into chunks of max(1024, S/256 rounded up to 256) keys, S =
   seq_k * kv_heads * ceil(heads / kv_heads * seq_q / 16) (about 256 blocks a sequence), a function
   of one sequence's shape and never of batch, so a sequence's o and lse are bitwise the same
   decoded alone or in any batch (a group of more than 16 rows may run in blocks of 16 or 32 by
   the grid's size; both give a row the same bits); each
   chunk's partial o and lse (fp32) go to a workspace of batch * heads * seq_q * chunks * (Dv + 1)
   floats, merged by the log-sum-exp rule of fa_cuda_merge. That workspace is allocated
   stream-ordered on p->stream (cudaMallocAsync; cudaMalloc where the device has no memory pools)
   and freed behind the merge on the same stream: no host synchronisation, FA_ERR_NO_MEMORY with
   nothing written when it cannot be had; fa_cuda_describe names the decode kernel and says the
   workspace's bytes. Every other fa_cuda_tiled call allocates nothing.
   head_dim or head_dim_v above 256: FA_ERR_UNSUPPORTED. alibi_slopes, bias and lse are device
   pointers. fa_cuda_naive returns with its work done (its per-call cuBLAS handle is destroyed, which
   synchronises); fa_cuda_tiled only queues on `stream`. fa_cuda_merge takes host arrays of device
   pointers and runs on the default stream. fa_cuda_tiled forms exp(s - m) as 2^(s log2 e - m log2 e),
   so a scaled logit beyond FLT_MAX / log2(e) (about 2.4e38) in magnitude is outside its range (the
   CPU paths subtract first and take any finite logit). The CUDA backward: fa_cuda_naive_backward
   (cuBLAS GEMMs in exact fp32 over packed fp32 copies and materialised S, dP; it returns with its
   work done and needs no lse) and fa_cuda_tiled_backward (every feature; the forward's lse
   required; O(Sq D) workspace allocated stream-ordered, only queued on `stream`; dq accumulated
   by fp32 atomics, or with p->deterministic in a fixed order (atomics in key-block turns, or a
   second dq pass): bitwise the same gradients every run). fp16/bf16 at head_dim = head_dim_v = 64 or 128 with 16-byte aligned rows
   of q, k, v, d_o, dq, dk, dv (sm_80+) run on a tensor-core backward (mma.sync, the
   FlashAttention-2 arrangement; deterministic mode 0.8-1.25x the default's time; on an H100/H200
   the wgmma/TMA kernels of section 8e3 where TMA takes q, k, v, d_o, with the second dq pass in
   both modes and, for such dims and strides, no fp32 dq buffer in the workspace); fp32 under the
   same rule (4-element strides) on its 3xTF32 form: each fp32 operand split into a TF32 value and
   a TF32 remainder, three tensor-core products for each product (as PyTorch's efficient backward
   does, whatever allow_tf32 says), fp32 accumulation: about 1e-6 relative error, within API.md's
   fp32 backward tolerance, and 1.35-1.67x PyTorch's efficient fp32 backward on an H100
   (deterministic: dq's atomics in key-block turns, 1.15-1.21x the default's time);
   FLASHATTN_CUDA_FP32_FFMA keeps fp32 on FFMA; everything else
   on an exact-fp32 FFMA kernel (head_dim <= 256; deterministic: dq's atomics in key-block turns
   inside the dK/dV kernel, 1.06-1.10x the default's time on the H200). A NaN or inf reaches
   only the gradients it reaches, as on the CPU: the first pass (delta) also reads q and k, and a
   call whose q, d_o or k holds a non-finite value runs the FFMA kernel's variant for it instead.
   fa_cuda_naive_backward_workspace_bytes and fa_cuda_tiled_backward_workspace_bytes give the
   bytes of the one stream-ordered allocation each backward makes for the same p (its
   deterministic flag included; 0 for an invalid p or an empty call; SIZE_MAX on overflow), as
   the CPU queries do; the CUDA backward suite checks them against the memory pool's high
   watermark.
*/
#ifndef FLASHATTN_H
#define FLASHATTN_H
/* >>api */

#include <stddef.h>
#include <stdint.h>

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 2
#define FLASHATTN_VERSION_PATCH 0
#define FLASHATTN_VERSION_STRING "0.2.0"
/* major * 10000 + minor * 100 + patch: 200 for 0.2.0; compare with fa_version_number() */
#define FLASHATTN_VERSION_NUMBER \
    (FLASHATTN_VERSION_MAJOR * 10000 + FLASHATTN_VERSION_MINOR * 100 + FLASHATTN_VERSION_PATCH)

#ifdef FLASHATTN_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define FLASHATTN_DEF static __attribute__((unused))  /* a file that calls part of the API builds -Werror clean */
#else
#define FLASHATTN_DEF static
#endif
#else
#define FLASHATTN_DEF extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fa_status {
    FA_OK = 0,
    FA_ERR_INVALID_ARG,   /* a required pointer is NULL, a size is out of range, heads % kv_heads != 0, ... */
    FA_ERR_NO_MEMORY,     /* an allocation failed, or a byte count would overflow size_t */
    FA_ERR_UNSUPPORTED,   /* valid, but this build or backend cannot serve it (a dtype, a head_dim limit) */
    FA_ERR_DEVICE         /* the CUDA runtime reported an error */
} fa_status;

typedef enum fa_dtype { FA_F32 = 0, FA_F16 = 1, FA_BF16 = 2 } fa_dtype;

/* A caller-owned set of parked CPU worker threads (THREADS above): fa_pool_create, fa_pool_destroy. */
typedef struct fa_pool fa_pool;

typedef struct fa_params {
    /* shape: required, except where 0 means a default */
    int batch;        /* B >= 1 */
    int heads;        /* Hq >= 1, query heads */
    int kv_heads;     /* Hkv: 0 means heads; heads % kv_heads == 0 (GQA/MQA) */
    int seq_q;        /* Sq >= 0 */
    int seq_k;        /* Sk >= 0 */
    int head_dim;     /* D >= 1, of q and k */
    int head_dim_v;   /* Dv: 0 means head_dim; of v and o */
    /* layout: strides in elements for {batch, head, token}; the feature dim is contiguous.
       All three zero means packed [B][H][S][D]. [B][S][H][D] is {S*H*D, D, H*D}. */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    fa_dtype dtype;   /* storage type of q, k, v, o; arithmetic accumulates in fp32 */
    float scale;      /* 0 means 1/sqrt(head_dim) */
    int causal;       /* nonzero: bottom-right aligned causal mask */
    float *lse;       /* optional output, packed [B][Hq][Sq] fp32 */
    int block_q, block_k; /* tile sizes of the tiled kernel; 0 means the library's choice */
    int threads;      /* CPU worker threads; 0 means all online cores */
    void *stream;     /* CUDA backend: a cudaStream_t; 0 means the default stream */
    /* score modifiers and masks; all zero means off */
    int window_left, window_right;   /* sliding window: W > 0 keeps the W keys on that side of the
                                        diagonal; 0 means unbounded on that side (flash-attn's -1;
                                        its 0, no key on that side, is causal = 1 on the right and
                                        has no window form on the left: WINDOW above) */
    float softcap;                   /* > 0: s = softcap * tanh(s / softcap) */
    const float *alibi_slopes;       /* [Hq] fp32, or [B][Hq] when alibi_stride = Hq */
    int64_t alibi_stride;            /* elements between batches of slopes; 0: one [Hq] row for all */
    const float *bias;               /* additive fp32 bias, -INFINITY hides a key */
    int64_t bias_stride[4];          /* elements for {batch, head, query, key}; all zero means packed
                                        [B][Hq][Sq][Sk]; otherwise a zero stride broadcasts that axis */
    fa_pool *pool;    /* CPU: NULL, the call starts and joins its own threads; else it runs on this
                         pool's threads (threads 0 means all of them; more than it has is invalid) */
    int deterministic; /* CUDA backward: nonzero gives bitwise the same gradients on every run
                          (it may be slower); the CPU paths are always deterministic */
} fa_params;

/* The all-zero fa_params (every field "the default"; set the five required shape fields next):
       fa_params p = FA_PARAMS_INIT;
   warning-free under -Wall -Wextra -Werror in C (gcc, clang) and in C++ (g++, clang++), where
   `= {0}` trips -Wmissing-field-initializers. memset(&p, 0, sizeof p) is the same request. */
#ifdef __cplusplus
#define FA_PARAMS_INIT {}
#else
#define FA_PARAMS_INIT {0}
#endif

/* The textbook path: scores (optional, packed [B][Hq][Sq][Sk] fp32, scaled and modified, -INFINITY
   where hidden) are materialised in full. */
FLASHATTN_DEF fa_status fa_naive(const fa_params *p, const void *q, const void *k, const void *v,
                                 void *o, float *scores);
/* The online-softmax path: O(threads x tile) memory. */
FLASHATTN_DEF fa_status fa_tiled(const fa_params *p, const void *q, const void *k, const void *v, void *o);
/* Peak bytes the call allocates for p (0 if none or p is invalid, SIZE_MAX if it overflows). */
FLASHATTN_DEF size_t fa_naive_workspace_bytes(const fa_params *p);
FLASHATTN_DEF size_t fa_tiled_workspace_bytes(const fa_params *p);
/* A fixed, non-NULL sentence for every value, unknown ones included. */
FLASHATTN_DEF const char *fa_status_string(fa_status s);
/* Why fa_naive (scores: its last argument) or fa_tiled (scores NULL) would refuse these arguments:
   NULL when the CPU paths accept them, else a fixed sentence that names the field and the rule it
   breaks, for every FA_ERR_INVALID_ARG and FA_ERR_UNSUPPORTED those calls return. Stateless (no
   allocation, no buffer kept); an accepted request may still fail with FA_ERR_NO_MEMORY. */
FLASHATTN_DEF const char *fa_explain(const fa_params *p, const void *q, const void *k, const void *v,
                                     const void *o, const float *scores);
/* The same for fa_merge's arguments, and for fa_pool_create's. */
FLASHATTN_DEF const char *fa_explain_merge(int rows, int dv, int parts, const float *const *o_parts,
                                           const float *const *lse_parts, const float *o, const float *lse);
FLASHATTN_DEF const char *fa_explain_pool_create(int threads, fa_pool **pool);
/* torch.allclose: every |a-b| <= atol + rtol*|b|; a NaN anywhere fails. */
FLASHATTN_DEF int fa_allclose(const float *a, const float *b, size_t n, float rtol, float atol);
FLASHATTN_DEF double fa_max_abs_diff(const float *a, const float *b, size_t n);
/* The version of the implementation linked in, at run time: fa_version() is "0.2.0"
   (FLASHATTN_VERSION_STRING), fa_version_number() is 200 (FLASHATTN_VERSION_NUMBER). A program
   whose declarations came from another copy of the header can compare them with the macros. */
FLASHATTN_DEF const char *fa_version(void);
FLASHATTN_DEF int fa_version_number(void);
/* What this build holds, as one line written into buf (snprintf semantics: at most n bytes with
   the terminating NUL, buf may be NULL when n is 0; returns the length of the whole line, so a
   return >= n means it was cut short; 256 bytes are always enough). No allocation, no state:
       flashattn 0.2.0; BLAS: OpenBLAS <openblas_get_config()> | none (FLASHATTN_NO_BLAS);
       SIMD compiled: avx512f avx2+fma portable; this CPU runs: avx512f | avx2+fma | portable;
       CUDA: in this translation unit | linked | not linked
   "this CPU runs" is the path fa_tiled and fa_naive's own loops take here (FLASHATTN_ISA caps it). */
FLASHATTN_DEF size_t fa_build_info(char *buf, size_t n);
/* lse = log(sum_p exp(lse_p)), o = sum_p exp(lse_p - lse) * o_p; parts packed [rows][dv]. */
FLASHATTN_DEF fa_status fa_merge(int rows, int dv, int parts, const float *const *o_parts,
                                 const float *const *lse_parts, float *o, float *lse);
/* A pool of `threads` threads for the CPU calls (0: all online cores): threads - 1 workers are
   started and parked here, and the caller of each call is the last one. *pool is set on FA_OK and
   untouched otherwise (FA_ERR_NO_MEMORY when memory or a thread cannot be had). One call runs on a
   pool at a time (others wait for it); destroy it only when no call is using it. */
FLASHATTN_DEF fa_status fa_pool_create(int threads, fa_pool **pool);
/* Stops and joins the workers and frees the pool; NULL is a no-op. */
FLASHATTN_DEF void fa_pool_destroy(fa_pool *pool);

/* Backward: the gradients of o with respect to q, k and v for an upstream gradient d_o (laid out as
   o), into dq, dk, dv (laid out as q, k, v; overwritten). Call with the p of the forward that made
   o; p->lse is an input there (the forward's lse): required by fa_tiled_backward, recomputed by
   fa_naive_backward when NULL. Bitwise the same gradients for any threads, pool or none. */
FLASHATTN_DEF fa_status fa_naive_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                          const void *o, const void *d_o, void *dq, void *dk, void *dv);
FLASHATTN_DEF fa_status fa_tiled_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                          const void *o, const void *d_o, void *dq, void *dk, void *dv);
FLASHATTN_DEF size_t fa_naive_backward_workspace_bytes(const fa_params *p);
/* What a CPU call would run for p, written into buf as one line (snprintf's rules: at most n bytes,
   terminated when n > 0; returns the length of the whole line): the path, the SIMD kernels, the
   tiles and the key split, the threads and the workspace bytes; or why the call would refuse p.
   Stateless; the plans are the calls' own (bench and make run print it; the tests assert it). */
typedef enum fa_call { FA_CALL_NAIVE = 0, FA_CALL_TILED, FA_CALL_NAIVE_BACKWARD, FA_CALL_TILED_BACKWARD } fa_call;
FLASHATTN_DEF size_t fa_describe(const fa_params *p, fa_call call, char *buf, size_t n);
/* Why fa_tiled_backward would refuse these arguments (NULL: accepted), as fa_explain does for the
   forward; fa_naive_backward accepts the same requests and a NULL p->lse besides. */
FLASHATTN_DEF const char *fa_explain_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                              const void *o, const void *d_o, const void *dq, const void *dk,
                                              const void *dv);
FLASHATTN_DEF size_t fa_tiled_backward_workspace_bytes(const fa_params *p);

#ifdef FLASHATTN_CUDA   /* device pointers; same meanings */
FLASHATTN_DEF fa_status fa_cuda_naive(const fa_params *p, const void *q, const void *k, const void *v,
                                      void *o, float *scores);
FLASHATTN_DEF fa_status fa_cuda_tiled(const fa_params *p, const void *q, const void *k, const void *v, void *o);
/* o_parts and lse_parts are HOST arrays of `parts` DEVICE pointers; o and lse are device pointers.
   Runs on the default stream. */
FLASHATTN_DEF fa_status fa_cuda_merge(int rows, int dv, int parts, const float *const *o_parts,
                                      const float *const *lse_parts, float *o, float *lse);
FLASHATTN_DEF fa_status fa_cuda_naive_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                               const void *o, const void *d_o, void *dq, void *dk, void *dv);
FLASHATTN_DEF fa_status fa_cuda_tiled_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                               const void *o, const void *d_o, void *dq, void *dk, void *dv);
/* The bytes of device memory the backward allocates (stream-ordered) for the same p. */
FLASHATTN_DEF size_t fa_cuda_naive_backward_workspace_bytes(const fa_params *p);
FLASHATTN_DEF size_t fa_cuda_tiled_backward_workspace_bytes(const fa_params *p);
/* What fa_cuda_tiled would run for these arguments (the kernel fa__cu_pick chooses, its tiles),
   as fa_describe does for the CPU; the pointers count because alignment picks the kernel. */
FLASHATTN_DEF size_t fa_cuda_describe(const fa_params *p, const void *q, const void *k, const void *v,
                                      const void *o, char *buf, size_t n);
#endif

#ifdef __cplusplus
}
#endif
#endif /* FLASHATTN_H */

/* ---- stop here if you only want the API ------------------------------------------------------ */

#ifdef FLASHATTN_IMPLEMENTATION
#ifndef FLASHATTN__IMPLEMENTATION_DONE
#define FLASHATTN__IMPLEMENTATION_DONE

#if defined(FLASHATTN_MALLOC) != defined(FLASHATTN_FREE)
#error "flashattn.h: define both FLASHATTN_MALLOC and FLASHATTN_FREE, or neither"
#endif
#ifndef FLASHATTN_MALLOC
#include <stdlib.h>
#define FLASHATTN_MALLOC(n) malloc(n)
#define FLASHATTN_FREE(p) free(p)
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <float.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#ifndef FLASHATTN_NO_BLAS
#include <cblas.h>
#endif

/* The CPU functions of a CUDA translation unit are weak, so that a C file with its own
   FLASHATTN_IMPLEMENTATION can be linked into the same program without duplicate symbols. */
#if defined(__CUDACC__) && defined(FLASHATTN_CUDA) && !defined(FLASHATTN_STATIC)
#define FLASHATTN__CPU_DEF __attribute__((weak))
#else
#define FLASHATTN__CPU_DEF FLASHATTN_DEF
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================== */
/* 0. Configuration: every default and tuning constant of the CPU paths                  >>config */
/* ============================================================================================== */
/* Each is measured, not guessed: bench/RESULTS.md has the version rows that set it (ids in
   brackets). The CUDA kernels' tile traits and constants are named in section 8a. */

/* Worker stacks, for a call's own threads and a pool's (FLASHATTN_STACK): 1 MiB, so that glibc's
   40 MiB stack cache keeps a call's stacks between calls (8 MiB defaults for 15 workers overflowed
   it and every call mapped fresh ones) [cpu-v13]. */
#ifdef FLASHATTN_STACK
#define FA__STACK ((size_t)(FLASHATTN_STACK))
#else
#define FA__STACK ((size_t)1 << 20)
#endif

/* Pause instructions a pool's worker spins on the next job, and its caller on the workers, before
   they sleep (FLASHATTN_SPIN): ~10-100 us by CPU; 0, 200 and 2000 measured alike [RESULTS, what did
   not work]. Compilers without GNU atomics never spin. */
#ifdef FLASHATTN_SPIN
#define FA__SPIN_PAUSES (FLASHATTN_SPIN)
#else
#define FA__SPIN_PAUSES 2000
#endif

/* The largest GEMM (m n k) that OpenBLAS 0.3.21-0.3.28 runs on the calling thread: 65536 x its
   build option GEMM_MULTITHREAD_THRESHOLD, 4 by default and in Debian (section 5, fa__sgemm). */
#ifndef FLASHATTN_OPENBLAS_1T_MNK
#define FLASHATTN_OPENBLAS_1T_MNK 262144
#endif

/* The tiled forward's lazy rescale: a row's reference max moves only when a score passes it by
   more than this, so every exp stays below e^8 (section 3, the online step) [cpu-v8]. */
#define FA__LAZY 8.0f

/* The tiled forward's query-tile heights, tallest first (multiples of the 48-lane register panel
   and of 16 rows; fa__tiled_plan_make says which it takes) [cpu-v6, v14, v16], and its key block
   when block_k is 0. */
#define FA__TILE_ROWS { 480, 384, 288, 192, 96, 48, 32, 16 }
/* ... on AMX-BF16 tiles, multiples of its 32-lane panels (64 for 48: no half-empty panel) */
#ifndef FA__AMX_TILE_ROWS
#define FA__AMX_TILE_ROWS { 480, 384, 288, 192, 96, 64, 32, 16 }
#endif
#define FA__BLOCK_K 64
/* ... and its key block on AMX-BF16 tiles (bf16, section 3) when block_k is 0 (on the Xeon 128 ran
   0.89-1.46x as fast as 64 at 2 threads, 0.97-1.25x at 16 [RESULTS, CPU half precision, "AMX
   forward restructured"]; 256 with FA__AMX_RR 32, 0.91-1.57x as fast as 128 with the panel pipeline
   at 2 threads (geometric mean 1.13), 1.06-1.36x at 16 (1.13) ["AMX forward, round 4"]) */
#ifndef FA__AMX_BLOCK_K
#define FA__AMX_BLOCK_K 256
#endif
/* ... FA__AMX_PIPE 1: a panel's online step runs the neighbouring panels' tile products along
   its vector work (fa__online_amx); 0: before it (on the Xeon 1.15x faster at 2 and 16 threads in
   one call, 1.12x and 0.96x in the next, geometric means of the bf16 rows) [RESULTS, CPU half
   precision, "AMX forward, round 3"] */
#ifndef FA__AMX_PIPE
#define FA__AMX_PIPE 0
#endif
/* ... FA__AMX_SWP 1: a 2 x 2 block's operand tiles for the next reduction step loaded as soon as the
   step's last product on them has issued, not after all four (fa__amx_group; on the Xeon 1.04-1.07x
   the forward's geometric mean, 10-15% faster on one block in L1) [RESULTS, CPU half precision,
   "AMX forward, round 3"] */
#ifndef FA__AMX_SWP
#define FA__AMX_SWP 1
#endif
/* ... and FA__AMX_VT_ALL 1: V transposed once per call for all the tiles of a kv head (fa__tiled_vt_get),
   not once per tile and block, when a kv head has more than one tile */
#ifndef FA__AMX_VT_ALL
#define FA__AMX_VT_ALL 1
#endif
/* ... FA__AMX_VT_LAZY 1: that Vt made by the first tile that needs a block (a claim per block; a tile
   that finds the block being made makes its own copy, the same words), at every size where a kv head
   has more than one tile, instead of a pass of its own before the tiles from Sq Sk >= 2^20 (0). On the
   Xeon at 16 threads main's V took 23-27% of the threads' time at S = 512 (one transpose per 32-row
   tile) and its pass 0.2-0.4 ms a call at S = 2048 at any thread count; with FA__AMX_VT_PF 2 the forward
   ran 1.13-1.17x main's geometric mean at 16 threads, 1.01-1.17x at 2 [RESULTS, CPU half precision,
   "AMX forward, round 5"] */
#ifndef FA__AMX_VT_LAZY
#define FA__AMX_VT_LAZY 1
#endif
/* ... FA__AMX_VT_PF 1: with the shared Vt, the next block's Vt prefetched toward L2 during a block's
   products where it is made (0: V's rows, which the tiles do not read then; 1 ran 1.02-1.05x as fast as
   0 at 16 threads); 2: also a block's own Vt at its start when another thread made it and the block
   before did not prefetch it (1.00-1.01x 1 at 16 threads, 1.03-1.15x at 2, within that call's noise) */
#ifndef FA__AMX_VT_PF
#define FA__AMX_VT_PF 2
#endif
/* ... FA__AMX_BLKPF 1: the next key block's K rows and Vt (or V's rows) prefetched toward L2 in steps
   spread over a block's panels (fa__pf_step, as the fp32 kernels do; FA__AMX_VT_PF 1's prefetch is one
   of those steps); 0: not, the hardware's prefetchers alone (FA__AMX_VT_PF 2's whole-block prefetch
   stays). On the Xeon 0 ran 1.01-1.37x as fast as 1 at 16 threads in all 10 rows of one call (B = 2,
   H = 4, S = 512/1024, two orders), and 1.02-1.09x at 1 and 2 threads on the development machine's
   AMX, where the prefetch instructions themselves stalled (perf: 3% of S = 512 D = 128) [RESULTS, CPU
   half precision, "The AMX forward's fixed costs"] */
#ifndef FA__AMX_BLKPF
#define FA__AMX_BLKPF 0
#endif
/* ... FA__AMX_TPT: query tiles a thread wants on AMX beyond 4 threads (as fp32: 8; 4 ran S = 512 D = 128
   1.11-1.18x as fast at 16 threads and S = 4096 D = 128 0.78-0.85x: 480-row tiles, 72 on 16 threads) */
#ifndef FA__AMX_TPT
#define FA__AMX_TPT 8
#endif
/* ... FA__AMX_TALL64 1: beyond 4 threads, where that want would take 32-row tiles (8 a thread), 64-row
   tiles at 4 a thread instead when D + Dv >= 192 (each block's K and Vt tiles loaded once per 64 rows,
   not per 32). On the Xeon at S = 512, 16 threads (bitwise the same output, as every tiling): D = 128
   1.14-1.28x as fast in three runs, D = 64 0.67-1.22x, not taken there [RESULTS, CPU half precision,
   "64-row AMX tiles above 4 threads"] */
#ifndef FA__AMX_TALL64
#define FA__AMX_TALL64 1
#endif
/* ... and FA__AMX_RR > 0: a block's panels in chunks whose Qp and Pp take at most FA__AMX_RR KiB
   each (64 D and 128 np16 bytes a panel; at least one panel): the chunk's scores, each panel's online
   step, the chunk's P V, each product's 2 x 2 blocks round robin over the chunk's panels
   (fa__amx_run_rr), so that a block's K and Vt tiles are read from L2 once per chunk rather than once
   per panel (the same blocks in the same order: the bits of FA__AMX_RR 0, the panel pipeline). On
   the Xeon at key blocks of 128, 16 (2 panels) and 32 (4) ran 1.05x / 0.96x as fast as 0 at 2
   threads (geometric means; within the noise), 1.06x / 1.08x at 16; 32 ships with blocks of 256 (2
   panels a chunk there), the pair measured [RESULTS, CPU half precision, "AMX forward, round 4"] */
#ifndef FA__AMX_RR
#define FA__AMX_RR 32
#endif
/* ... and FA__AMX_RANGES 1: where every tile costs the same (no causal or window rule, no key split) and
   the tiles are short (at most FA__AMX_RANGES_ROWS rows, the plans of more than 4 threads), a head's
   tiles are consecutive items and each thread starts on its own run of them (fa__run_ranges), so that
   its tiles mostly find the head's K and Vt in its own L2 (on the Xeon at 16 threads 10-28% of the
   tiles started on another head than the thread's tile before, against 80-88% with the shared counter;
   1.00-1.25x as fast in 28 rows of S = 512-2048, geometric mean 1.10) [RESULTS, CPU half precision,
   "The AMX forward's tiles by head"];
   0: one tile at a time from a shared counter, the heads round robin (the longest causal rows first,
   which the rule keeps); 2 (measurement only): the runs over the round-robin order */
#ifndef FA__AMX_RANGES
#define FA__AMX_RANGES 1
#endif
#ifndef FA__AMX_RANGES_ROWS
#define FA__AMX_RANGES_ROWS 96
#endif

/* FA__PROF_AT(tid, phase): a bench's hook (bench/amx_phase.c defines it before including the header)
   marking where thread tid's time starts to count to `phase` in the tiled forward; nothing here. */
#ifndef FA__PROF_AT
#define FA__PROF_AT(tid, ph) ((void)0)
#endif
#define FA__PROF_CALL 63     /* ... the call's own phases, on the caller's thread */
/* FA__PROF_TILE(tid, b, h0): ... and the batch and first head of the tile thread tid starts */
#ifndef FA__PROF_TILE
#define FA__PROF_TILE(tid, b, h0) ((void)0)
#endif

/* Decoding: the key axis is split for tiles of at most FA__SPLIT_ROWS rows per head (or packed
   GQA heads), in chunks of at least FA__CHUNK_KEYS keys and at most FA__MAX_CHUNKS of them, fixed
   by the shape [cpu-v17, issue 10]; the row-major decode kernels prefetch K/V FA__AHEAD keys
   ahead [cpu-v4]. */
#define FA__SPLIT_ROWS 16
#define FA__CHUNK_KEYS 512
#define FA__MAX_CHUNKS 32
#ifndef FA__AHEAD
#define FA__AHEAD 8
#endif
/* ... and the half-precision decode kernels FA__AHEAD_HALF keys ahead (8 KB of a D = 128 row
   stream; RESULTS, "CPU half precision", decode prefetch: on the development machine bf16 decode
   ran 5.0-5.2 ms at 8 keys ahead, 4.4-4.7 at 16, 3.9-4.6 at 32, 4.0-4.4 at 64), into the cache
   level FA__HPREF_HINT names; FA__AHEAD_HALF 0: no prefetch instructions */
#ifndef FA__AHEAD_HALF
#define FA__AHEAD_HALF 32
#endif
#ifndef FA__HPREF_HINT
#define FA__HPREF_HINT _MM_HINT_T0
#endif
/* ... and the bf16 decode kernels of the AVX512-BF16 and AMX tables also FA__AHEAD_HALF2 keys ahead
   into the L2 (prefetcht2; 0: not; RESULTS, issue 16, "Xeon bf16 decode at 2 threads (cpuh)") */
#ifndef FA__AHEAD_HALF2
#define FA__AHEAD_HALF2 128
#endif
/* ... and a chunk's first FA__HSTART keys before its first block (fa__tiled_item); 0: not */
#ifndef FA__HSTART
#define FA__HSTART 32
#endif

/* The tiled backward: keys per item (two 48-lane register panels) below FA__BWD_WIDE keys, and
   from it FA__BWD_KT_WIDE (Q, dO and dq then stream half as often), in blocks of FA__BWD_QB query
   rows (the grid of dq's turns) [bwd-v3, the tile sweep]. */
#define FA__BWD_KT 96
#define FA__BWD_KT_WIDE 192
#define FA__BWD_WIDE 2048
#define FA__BWD_QB 64
/* ... and on AMX tiles key tiles of FA__BWD_KT_AMX keys at every Sk (0: the rule above). RESULTS,
   "Backward key tiles of 192 on AMX": 192 against the rule's 96 below 2048 keys, Xeon, bf16, same
   call: 0.96-1.51x per row (geometric mean 1.17x) at 2 threads, 0.89-1.16x (1.02x) at 16; 256 was
   faster at 2 threads but 3.2x slower at S = 512, D = 128, 16 threads (two tiles a head) */
#ifndef FA__BWD_KT_AMX
#define FA__BWD_KT_AMX 192
#endif
/* ... and on bf16 inputs (head dims multiples of 32, AVX512-BF16) its five products in bf16 with fp32
   sums, on AMX tiles where the CPU has them (1), or the fp32 kernels on fp32 copies (0) */
#ifndef FA__BWD_BF16
#define FA__BWD_BF16 1
#endif
/* ... and on AMX query blocks of FA__BWD_QB_AMX rows (the dk and dv products reduce over them), from
   FA__BWD_QB_AMX_FROM query rows FA__BWD_QB_AMX_LONG (each C tile of dk, dv loaded and stored half as
   often). RESULTS, "Backward without the fp32 copies": 128 against 64 in the same call, Xeon, bf16, 2
   threads, 1.05-1.60x at S = 1024 (4 rows), 0.82-1.18x at 2048, 0.77-1.01x at 512; 16 threads 0.98-1.06x.
   On the tiles a row's dq and every dk, dv sum are the same for 64 and 128 (sums in 32-row steps, C
   stored exactly between blocks); only a block holding an inf or NaN (run by the fp32 kernels) spans
   more rows. */
#ifndef FA__BWD_QB_AMX
#define FA__BWD_QB_AMX 64
#endif
#ifndef FA__BWD_QB_AMX_LONG
#define FA__BWD_QB_AMX_LONG 128
#endif
#ifndef FA__BWD_QB_AMX_FROM
#define FA__BWD_QB_AMX_FROM 1024
#endif

/* ============================================================================================== */
/* 1. Common to every backend: statuses, comparisons, the request resolved and validated >>common */
/* ============================================================================================== */

FLASHATTN__CPU_DEF const char *fa_status_string(fa_status s)
{
    switch (s) {
    case FA_OK: return "success";
    case FA_ERR_INVALID_ARG: return "invalid argument: a required pointer is NULL or a size, stride or option is out of range";
    case FA_ERR_NO_MEMORY: return "out of memory: an allocation failed or a byte count would overflow size_t";
    case FA_ERR_UNSUPPORTED: return "unsupported: the request is valid but this build or backend cannot serve it";
    case FA_ERR_DEVICE: return "device error: the CUDA runtime reported an error";
    }
    return "unknown fa_status value";
}

FLASHATTN__CPU_DEF int fa_allclose(const float *a, const float *b, size_t n, float rtol, float atol)
{
    size_t i;
    if (n == 0) return 1;
    if (!a || !b) return 0;
    for (i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if (x == y) continue;                       /* equal infinities are close, as in torch */
        if (x != x || y != y) return 0;             /* NaN fails */
        /* unequal with an infinity: never close (torch needs a finite error), whatever rtol */
        if (fabs(x - y) == INFINITY || !(fabs(x - y) <= (double)atol + (double)rtol * fabs(y))) return 0;
    }
    return 1;
}

FLASHATTN__CPU_DEF double fa_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    size_t i;
    if (n == 0) return 0.0;
    if (!a || !b) return (double)NAN;
    for (i = 0; i < n; i++) {
        double x = a[i], y = b[i], d;
        if (x == y) continue;
        d = fabs(x - y);
        if (d != d) return (double)NAN;
        if (d > m) m = d;
    }
    return m;
}

/* ---- version and build information (fa_version, fa_version_number, fa_build_info) ------------ */

FLASHATTN__CPU_DEF const char *fa_version(void) { return FLASHATTN_VERSION_STRING; }
FLASHATTN__CPU_DEF int fa_version_number(void) { return FLASHATTN_VERSION_NUMBER; }

static int fa__isa(void);
static const char *fa__half_name(int isa);

/* Whether the x86 kernels are compiled: the same test as section 3's FLASHATTN__X86, which is
   defined further down (the suite checks that the two agree). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(FLASHATTN_NO_SIMD)
#define FA__INFO_X86 1
#else
#define FA__INFO_X86 0
#endif

/* CUDA outside this translation unit: a weak reference to fa_cuda_tiled's symbol is non-NULL when
   a CUDA translation unit (FLASHATTN_IMPLEMENTATION and FLASHATTN_CUDA under nvcc) is linked in. */
#if !defined(__CUDACC__) && defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
#define FA__INFO_CUDA_PROBE 1
extern char fa__cuda_probe __asm__("fa_cuda_tiled") __attribute__((weak));
#endif

/* snprintf's rules for a line made in a local buffer: at most n bytes of it into buf, terminated
   when n > 0; returns its whole length (len, from snprintf; 0 if that failed). */
static size_t fa__line_out(char *buf, size_t n, const char *line, int len)
{
    size_t L = len > 0 ? (size_t)len : 0, c;
    if (n > 0 && buf) {
        c = L < n - 1 ? L : n - 1;
        memcpy(buf, line, c);
        buf[c] = '\0';
    }
    return L;
}

/* Appends the text to buf[*len...] as far as n allows, counting the whole length in *len. */
static void fa__info_put(char *buf, size_t n, size_t *len, const char *text)
{
    size_t t = strlen(text);
    if (*len + 1 < n) {
        size_t room = n - 1 - *len;
        memcpy(buf + *len, text, t < room ? t : room);
    }
    *len += t;
}

FLASHATTN__CPU_DEF size_t fa_build_info(char *buf, size_t n)
{
    static const char *const isa_name[3] = { "portable", "avx2+fma", "avx512f" };
    size_t len = 0;
    int isa = fa__isa();
    if (!buf) n = 0;
    fa__info_put(buf, n, &len, "flashattn " FLASHATTN_VERSION_STRING "; BLAS: ");
#ifdef FLASHATTN_NO_BLAS
    fa__info_put(buf, n, &len, "none (FLASHATTN_NO_BLAS)");
#else
    {
        const char *cfg = openblas_get_config();
        fa__info_put(buf, n, &len, cfg ? cfg : "OpenBLAS");
    }
#endif
    fa__info_put(buf, n, &len, FA__INFO_X86 ? "; SIMD compiled: avx512f avx2+fma portable" : "; SIMD compiled: portable");
#ifdef FLASHATTN_ISA
    fa__info_put(buf, n, &len, " (capped by FLASHATTN_ISA)");
#endif
    fa__info_put(buf, n, &len, "; this CPU runs: ");
    fa__info_put(buf, n, &len, isa_name[isa >= 0 && isa <= 2 ? isa : 0]);
    fa__info_put(buf, n, &len, "; fp16/bf16 storage: ");
    fa__info_put(buf, n, &len, fa__half_name(isa));
    fa__info_put(buf, n, &len, "; CUDA: ");
#if defined(__CUDACC__) && defined(FLASHATTN_CUDA)
    fa__info_put(buf, n, &len, "in this translation unit");
#elif defined(FA__INFO_CUDA_PROBE)
    fa__info_put(buf, n, &len, &fa__cuda_probe != NULL ? "linked" : "not linked");
#else
    fa__info_put(buf, n, &len, "not in this translation unit");
#endif
    if (n > 0) buf[len < n ? len : n - 1] = '\0';
    return len;
}

/* The request with every default filled in, in one place. Every kernel receives it: the CUDA ones
   as a kernel parameter, whose field offsets shape the compiled schedule (so new fields go at the
   end and the order stays). */
typedef struct fa__dims {
    int64_t qs[3], ks[3], vs[3], os[3], bs[4];
    const float *alibi, *bias;
    float *lse;
    int64_t alibi_stride;
    int Hq, group, Sq, Sk, causal, wl, wr;
    float scale, softcap;
    int B, Hkv, D, Dv;
    fa_dtype dtype;
    int block_q, block_k, threads;
    void *stream;
    fa_pool *pool;
} fa__dims;

static int fa__pool_size(const fa_pool *pool);

/* a*b into *r, 0 on int64 overflow (operands non-negative). */
static int fa__mul64(int64_t a, int64_t b, int64_t *r)
{
    if (a != 0 && b > INT64_MAX / a) return 0;
    *r = a * b;
    return 1;
}

/* Packed strides {n1*n2*n3, n2*n3, n3} for an [n0][n1][n2][n3] tensor; 0 on overflow. */
static int fa__packed3(int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t st[3])
{
    int64_t a, b, c;
    if (!fa__mul64(n2, n3, &a) || !fa__mul64(n1, a, &b) || !fa__mul64(n0, b, &c)) return 0;
    st[0] = b; st[1] = a; st[2] = n3;
    return 1;
}

static int fa__zero3(const int64_t s[3]) { return s[0] == 0 && s[1] == 0 && s[2] == 0; }

/* Sets *why (when not NULL) to the sentence that explains st; returns st. Every failing check of
   the validation says why through this, so that a check and its sentence are one line. */
static fa_status fa__why(const char **why, fa_status st, const char *sentence)
{
    if (why) *why = sentence;
    return st;
}

/* The offsets [lo, hi) (in elements, from the base pointer) that a strided tensor reaches: `axes`
   axes of n[a] indices at st[a] elements apart (any sign), each index holding a run of w
   contiguous elements. 0 when a count overflows int64; an empty tensor reaches nothing (0, 0). */
static int fa__extent(int axes, const int64_t *n, const int64_t *st, int64_t w, int64_t *lo, int64_t *hi)
{
    int64_t a = 0, b = w;
    int i;
    *lo = *hi = 0;
    for (i = 0; i < axes; i++) {
        int64_t m = n[i] - 1, s = st[i], x;
        if (n[i] <= 0) return 1;
        if (m == 0 || s == 0) continue;
        if (s < -INT64_MAX || (s < 0 ? -s : s) > INT64_MAX / m) return 0;
        x = m * s;
        if (x < 0) { if (a < INT64_MIN - x) return 0; a += x; }
        else { if (b > INT64_MAX - x) return 0; b += x; }
    }
    *lo = a; *hi = b;
    return 1;
}

/* 1 when the runs of w elements of a strided output (axes as for fa__extent, strides >= 0) are
   pairwise disjoint, by a rule that is cheap and sufficient: the axes with more than one index,
   taken by increasing stride, nest, each stride at least the extent of the axes inside it (w for
   the innermost). Every layout made by nesting the axes in some order, with or without padding
   between them, passes; a zero stride on an axis of more than one index, or two axes interleaved,
   fails. Used for o here and for the backward's dq, dk, dv. */
static int fa__rows_disjoint(int axes, const int64_t *n, const int64_t *st, int64_t w)
{
    int idx[4], m = 0, a, b;
    int64_t inner = w;
    for (a = 0; a < axes && a < 4; a++) {
        if (n[a] <= 0) return 1;                  /* nothing is written */
        if (st[a] < 0) return 0;
        if (n[a] > 1) idx[m++] = a;
    }
    for (a = 1; a < m; a++)                        /* by stride, at most 4 axes */
        for (b = a; b > 0 && st[idx[b]] < st[idx[b - 1]]; b--) { int t = idx[b]; idx[b] = idx[b - 1]; idx[b - 1] = t; }
    for (a = 0; a < m; a++) {
        int64_t s = st[idx[a]], x;
        if (s < inner) return 0;
        if (s > INT64_MAX / (n[idx[a]] - 1)) return 0;
        x = s * (n[idx[a]] - 1);
        if (inner > INT64_MAX - x) return 0;
        inner += x;
    }
    return 1;
}

/* The byte range [*a, *b) that a tensor reaching offsets [lo, hi) from base covers (empty when
   lo == hi), for the overlap checks; computed as integers, saturating at the address space's end. */
static void fa__range_es(uintptr_t base, int64_t lo, int64_t hi, size_t es, uintptr_t *a, uintptr_t *b)
{
    uint64_t n = (uint64_t)hi - (uint64_t)lo;          /* elements (hi - lo < 2^64) */
    uintptr_t p = base + (uintptr_t)((uint64_t)lo * es);
    *a = *b = p;
    if (hi > lo) *b = n > (UINTPTR_MAX - p) / es ? UINTPTR_MAX : p + (uintptr_t)(n * es);
}

/* fp32 tensors (lse, scores, bias, slopes, fa_merge's parts); fa__range_es takes the element size
   of the storage dtype (fa__esize: 2 bytes for FA_F16 and FA_BF16). */
static void fa__range(uintptr_t base, int64_t lo, int64_t hi, uintptr_t *a, uintptr_t *b)
{
    fa__range_es(base, lo, hi, sizeof(float), a, b);
}

static size_t fa__esize(fa_dtype dt) { return dt == FA_F32 ? sizeof(float) : 2; }

static int fa__overlap(uintptr_t a0, uintptr_t b0, uintptr_t a1, uintptr_t b1)
{
    return a0 < b0 && a1 < b1 && a0 < b1 && a1 < b0;
}

/* Resolves and validates everything a backend-independent check can see: the shape, the options,
   the layouts (extents that fit int64, o's rows disjoint) and the pointers q, k, v, o, required
   only for tensors that are not empty. On failure *why (when why is not NULL) names the field
   and the rule it breaks; fa_explain returns that sentence. */
static fa_status fa__resolve(const fa_params *p, const void *q, const void *k, const void *v,
                             const void *o, fa__dims *d, const char **why)
{
    const fa_status bad = FA_ERR_INVALID_ARG;
    int64_t lo, hi;
    if (!p) return fa__why(why, bad, "p is NULL");
    memset(d, 0, sizeof *d);
    if (p->batch < 1) return fa__why(why, bad, "batch must be at least 1");
    if (p->heads < 1) return fa__why(why, bad, "heads must be at least 1");
    if (p->kv_heads < 0) return fa__why(why, bad, "kv_heads must be 0 (meaning heads) or positive");
    if (p->seq_q < 0) return fa__why(why, bad, "seq_q must not be negative");
    if (p->seq_k < 0) return fa__why(why, bad, "seq_k must not be negative");
    if (p->head_dim < 1) return fa__why(why, bad, "head_dim must be at least 1");
    if (p->head_dim_v < 0) return fa__why(why, bad, "head_dim_v must be 0 (meaning head_dim) or positive");
    d->B = p->batch; d->Hq = p->heads; d->Hkv = p->kv_heads ? p->kv_heads : p->heads;
    if (d->Hq % d->Hkv != 0) return fa__why(why, bad, "heads must be a multiple of kv_heads");
    d->group = d->Hq / d->Hkv;
    d->Sq = p->seq_q; d->Sk = p->seq_k; d->D = p->head_dim;
    d->Dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    if (p->dtype != FA_F32 && p->dtype != FA_F16 && p->dtype != FA_BF16)
        return fa__why(why, bad, "dtype must be FA_F32, FA_F16 or FA_BF16");
    d->dtype = p->dtype;
    if (p->scale != p->scale || fabsf(p->scale) > 3.0e38f)
        return fa__why(why, bad, "scale must be finite, at most 3e38 in magnitude (0 means 1/sqrt(head_dim))");
    d->scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
    /* softcap's 1/softcap must be finite: FLT_MIN (2^-126) is the smallest cap taken */
    if (!(p->softcap == 0.0f || (p->softcap >= FLT_MIN && p->softcap <= 3.0e38f)))
        return fa__why(why, bad, "softcap must be 0 (off) or between FLT_MIN (1.17549435e-38) and 3e38");
    d->softcap = p->softcap;
    if (p->block_q < 0) return fa__why(why, bad, "block_q must be 0 (the library's choice) or positive");
    if (p->block_k < 0) return fa__why(why, bad, "block_k must be 0 (the library's choice) or positive");
    if (p->threads < 0) return fa__why(why, bad, "threads must be 0 (all cores) or positive");
    if (p->window_left < 0) return fa__why(why, bad, "window_left must be 0 (unbounded) or positive");
    if (p->window_right < 0) return fa__why(why, bad, "window_right must be 0 (unbounded) or positive");
    if (p->alibi_stride < 0) return fa__why(why, bad, "alibi_stride must not be negative");
    d->causal = p->causal != 0; d->wl = p->window_left; d->wr = p->window_right;
    d->alibi = p->alibi_slopes; d->alibi_stride = p->alibi_slopes ? p->alibi_stride : 0;
    d->bias = p->bias; d->lse = p->lse;
    d->block_q = p->block_q; d->block_k = p->block_k; d->threads = p->threads; d->stream = p->stream;
    d->pool = p->pool;
    if (p->pool && p->threads > fa__pool_size(p->pool))
        return fa__why(why, bad, "threads must not exceed the size of pool");

    /* strides: all three zero means packed; otherwise taken as given (a zero stride broadcasts) */
    if (!fa__packed3(d->B, d->Hq, d->Sq, d->D, d->qs))
        return fa__why(why, bad, "q's element count (batch x heads x seq_q x head_dim) overflows int64");
    if (!fa__packed3(d->B, d->Hkv, d->Sk, d->D, d->ks))
        return fa__why(why, bad, "k's element count (batch x kv_heads x seq_k x head_dim) overflows int64");
    if (!fa__packed3(d->B, d->Hkv, d->Sk, d->Dv, d->vs))
        return fa__why(why, bad, "v's element count (batch x kv_heads x seq_k x head_dim_v) overflows int64");
    if (!fa__packed3(d->B, d->Hq, d->Sq, d->Dv, d->os))
        return fa__why(why, bad, "o's element count (batch x heads x seq_q x head_dim_v) overflows int64");
    if (!fa__zero3(p->q_stride)) memcpy(d->qs, p->q_stride, sizeof d->qs);
    if (!fa__zero3(p->k_stride)) memcpy(d->ks, p->k_stride, sizeof d->ks);
    if (!fa__zero3(p->v_stride)) memcpy(d->vs, p->v_stride, sizeof d->vs);
    if (!fa__zero3(p->o_stride)) memcpy(d->os, p->o_stride, sizeof d->os);
    {
        const int64_t nq[3] = { d->B, d->Hq, d->Sq }, nk[3] = { d->B, d->Hkv, d->Sk };
        if (!fa__extent(3, nq, d->qs, d->D, &lo, &hi))
            return fa__why(why, bad, "q_stride: the offsets q's rows reach overflow int64");
        if (!fa__extent(3, nk, d->ks, d->D, &lo, &hi))
            return fa__why(why, bad, "k_stride: the offsets k's rows reach overflow int64");
        if (!fa__extent(3, nk, d->vs, d->Dv, &lo, &hi))
            return fa__why(why, bad, "v_stride: the offsets v's rows reach overflow int64");
        /* o is written by many workers: its rows must not overlap (o_stride in the doc block) */
        if (d->os[0] < 0 || d->os[1] < 0 || d->os[2] < 0)
            return fa__why(why, bad, "o_stride must not be negative");
        if (!fa__extent(3, nq, d->os, d->Dv, &lo, &hi))
            return fa__why(why, bad, "o_stride: the offsets o's rows reach overflow int64");
        if (!fa__rows_disjoint(3, nq, d->os, d->Dv))
            return fa__why(why, bad, "o_stride: rows of o overlap (by stride, each axis of more than one "
                                     "index must step over the axes inside it, and a token over head_dim_v)");
    }
    if (p->bias) {
        const int64_t nb[4] = { d->B, d->Hq, d->Sq, d->Sk };
        if (p->bias_stride[0] == 0 && p->bias_stride[1] == 0 && p->bias_stride[2] == 0 &&
            p->bias_stride[3] == 0) {
            if (!fa__packed3(d->B, d->Hq, d->Sq, d->Sk, d->bs))
                return fa__why(why, bad, "bias's element count (batch x heads x seq_q x seq_k) overflows int64");
            d->bs[3] = 1;
        } else {
            memcpy(d->bs, p->bias_stride, sizeof d->bs);
        }
        if (!fa__extent(4, nb, d->bs, 1, &lo, &hi))
            return fa__why(why, bad, "bias_stride: the offsets the bias reaches overflow int64");
    }
    if (p->alibi_slopes) {
        const int64_t nb = d->B;
        if (!fa__extent(1, &nb, &d->alibi_stride, d->Hq, &lo, &hi))
            return fa__why(why, bad, "alibi_stride: the offsets the slopes reach overflow int64");
    }
    if (d->Sq > 0) {
        if (!q) return fa__why(why, bad, "q is NULL (required when seq_q > 0)");
        if (!o) return fa__why(why, bad, "o is NULL (required when seq_q > 0)");
        if (d->Sk > 0 && !k) return fa__why(why, bad, "k is NULL (required when seq_q > 0 and seq_k > 0)");
        if (d->Sk > 0 && !v) return fa__why(why, bad, "v is NULL (required when seq_q > 0 and seq_k > 0)");
    }
    return FA_OK;
}

#ifdef __CUDACC__
#define FA__HD __host__ __device__
#else
#define FA__HD
#endif

/* ---- The position rule (causal, window) and the key ranges built on it ----------------------
   fa__visible_keys is the rule, written once for the CPU and both CUDA kernels; everything below
   only calls it. A row's visible range [lo, hi) never moves left as the row goes down (lo and hi
   are non-decreasing in i), which the range functions rely on. */

/* The position rule, written once for the CPU and both CUDA kernels: key j is visible to the query
   whose diagonal in key space is diag (causal, window_left, window_right) when lo <= j < hi (none
   when hi <= lo). In int, free of overflow for a row's diag (Sk - (Sq - i), in [-Sq, Sk)), so
   that the GPU kernels mask with it per row in 32-bit registers. */
static FA__HD inline void fa__visible_keys(int diag, int Sk, int causal, int wl, int wr, int *lo, int *hi)
{
    int a = 0, b = Sk;
    if (wl > 0 && diag > wl) a = diag - wl;                             /* diag - wl > 0 */
    if (causal) b = diag + 1 < b ? diag + 1 : b;
    if (wr > 0 && diag < Sk - 1 - wr) b = diag + wr + 1 < b ? diag + wr + 1 : b;   /* diag + wr + 1 < Sk */
    *lo = a; *hi = b;
}

/* The same keys as a range to walk: [lo, hi) with lo <= hi <= Sk. */
static FA__HD inline void fa__visible(int diag, int Sk, int causal, int wl, int wr, int *lo, int *hi)
{
    int a, b;
    fa__visible_keys(diag, Sk, causal, wl, wr, &a, &b);
    if (a > Sk) a = Sk;
    if (b < a) b = a;
    *lo = a; *hi = b;
}

/* The keys visible to query row i (0 <= i < Sq) as [lo, hi). */
static FA__HD inline void fa__key_range(const fa__dims *d, int64_t i, int64_t *lo, int64_t *hi)
{
    int a, b;
    fa__visible((int)(d->Sk - (d->Sq - i)), d->Sk, d->causal, d->wl, d->wr, &a, &b);
    *lo = a; *hi = b;
}

/* Whether the position rule can hide a key at all. */
static FA__HD inline int fa__has_mask(const fa__dims *d) { return d->causal || d->wl > 0 || d->wr > 0; }

/* The keys some row of [i0, i1) sees, as the hull [lo, hi) of its first and last rows' ranges. */
static FA__HD inline void fa__rows_range(const fa__dims *d, int64_t i0, int64_t i1, int64_t *lo, int64_t *hi)
{
    int64_t a0, b0, a1, b1;
    fa__key_range(d, i0, &a0, &b0);
    fa__key_range(d, i1 - 1, &a1, &b1);
    *lo = a0 < a1 ? a0 : a1;
    *hi = b0 > b1 ? b0 : b1;
    if (*hi < *lo) *hi = *lo;
}

/* The key blocks a query tile [i0, i1) visits. Keys are cut into blocks of bk at absolute multiples
   of bk (block kb holds keys [kb bk, kb bk + bk) of [0, Sk)), one cut for every tile: a row meets the
   same block boundaries in whatever tile it is computed (the CPU's results do not depend on the
   tiling). [kb0, kb1) are the blocks holding a key of the tile's hull [lo, hi) (fa__rows_range;
   lo, hi may be NULL); a block clipped to the hull loses only keys that no row of the tile sees. */
static FA__HD inline void fa__tile_blocks(const fa__dims *d, int64_t i0, int64_t i1, int64_t bk, int64_t *kb0,
                                          int64_t *kb1, int64_t *lo, int64_t *hi)
{
    int64_t a, b;
    fa__rows_range(d, i0, i1, &a, &b);
    *kb0 = a / bk;
    *kb1 = b > a ? (b + bk - 1) / bk : *kb0;
    if (lo) *lo = a;
    if (hi) *hi = b;
}

/* The inverse: the query rows [r0, r1) that see some key of [k0, k1) (0 <= k0 < k1 <= Sk), a
   contiguous run, found by bisection on the rule: the first row whose range ends after k0, and
   the first one after it whose range starts at or after k1. (An empty range, lo = hi = 0 or Sk,
   falls outside either way.) The backward's key tiles walk these rows. */
static FA__HD inline void fa__key_rows(const fa__dims *d, int64_t k0, int64_t k1, int64_t *r0, int64_t *r1)
{
    int64_t a = 0, b = d->Sq, m, l, h;
    while (a < b) {
        m = a + (b - a) / 2;
        fa__key_range(d, m, &l, &h);
        if (h > k0) b = m; else a = m + 1;
    }
    *r0 = a;
    b = d->Sq;
    while (a < b) {
        m = a + (b - a) / 2;
        fa__key_range(d, m, &l, &h);
        if (l >= k1) b = m; else a = m + 1;
    }
    *r1 = a;
}

/* The keys of a tile of query rows [i0, i1) (i0 < i1), for both CUDA tiled kernels: it visits
   keys [lo, hi) (visible to some row) and needs no mask on a key block inside [flo, fhi) (visible
   to every row). lo and hi are non-decreasing in i: the first row gives lo and fhi, the last hi
   and flo. */
typedef struct fa__keys { int64_t lo, hi, flo, fhi; } fa__keys;

static FA__HD inline fa__keys fa__tile_keys(const fa__dims *d, int64_t i0, int64_t i1)
{
    fa__keys r;
    fa__key_range(d, i0, &r.lo, &r.fhi);
    fa__key_range(d, i1 - 1, &r.flo, &r.hi);
    return r;
}

/* Whether keys [k0, k1) of that tile are visible to every row (the block needs no mask). */
static FA__HD inline int fa__keys_full(const fa__keys *r, int64_t k0, int64_t k1)
{
    return r->flo <= k0 && k1 <= r->fhi;
}

/* The same test on the CPU's arguments: every (row, key) pair of rows [i0, i1) x keys [k0, k1)
   visible, so that no mask is needed there. */
static FA__HD inline int fa__block_unmasked(const fa__dims *d, int64_t i0, int64_t i1, int64_t k0, int64_t k1)
{
    fa__keys r = fa__tile_keys(d, i0, i1);
    return fa__keys_full(&r, k0, k1);
}

/* ---- The CUDA forward kernels' block order (8c, 8d, 8d3) --------------------------------------
   Block `item` of a 1-D grid of nbh qtiles blocks takes query tile *qt of (batch, head) *bh. The
   (batch, head)s go in groups of hg (the last group may be smaller), a group's blocks one after
   another; within a group the longest tiles first (under causal, the last: they see the most
   keys), the group's heads side by side at each tile. With hg from fa__qtile_group, a group's K
   and V fit in a budget of bytes (the L2's share), so that the blocks in flight at once read the
   K/V of a few heads, which stay in L2, rather than one tile of every head. Every (bh, qt) is
   exactly one item (tests/test_flashattn.c, test_qtile_order); the order changes no result, as a
   block's work is its own. */
static FA__HD inline int64_t fa__qtile_group(int64_t nbh, int64_t kv_bytes, int64_t budget)
{
    const int64_t hg = kv_bytes > 0 ? budget / kv_bytes : nbh;
    return hg < 1 ? 1 : hg > nbh ? nbh : hg;
}

/* (32-bit: the CUDA grids keep B Hq qtiles <= INT_MAX, fa__cu_qblocks; 64-bit divisions cost a
   kernel a subroutine per item) */
static FA__HD inline void fa__qtile_of(int nbh, int qtiles, int hg, int item, int *bh, int *qt)
{
    const int first = item / (hg * qtiles) * hg, gs = nbh - first < hg ? nbh - first : hg;
    const int r = item - first * qtiles;
    *qt = qtiles - 1 - r / gs;
    *bh = first + r % gs;
}

/* A persistent grid of `grid` blocks over `items` items in that order (8d3's PER): block `blk`
   takes, in its round k, item k grid + blk in even rounds and k grid + grid - 1 - blk in odd ones
   (a snake, so that a block with the longer tiles of one round has the shorter of the next: under
   causal the rounds' tiles shrink along the order); its work ends at the first item >= items. Each
   item is exactly one block's (test_qtile_order). From the shape alone: the same on every run. */
static FA__HD inline int64_t fa__sched_item(int64_t grid, int64_t blk, int64_t k)
{
    return k * grid + (k & 1 ? grid - 1 - blk : blk);
}

/* The paired order (8d3's PER 3, causal requests with at least two tiles a block): item `pos` of
   nbh qtiles is query tile *qt of (batch, head) *bh, the heads one after another, each head's tiles
   as pairs of a long and a short one (qtiles - 1 with 0, qtiles - 2 with 1, ...), so that a pair
   sees as many keys as any other (a causal tile's keys grow linearly with its index). Where qtiles
   is odd the middle tile is an even head's last item and the next (odd) head's first, a pair of
   its own. fa__sched_pair hands block blk of a persistent grid the two items of one pair after the
   other, the pairs in fa__sched_item's order: every block walks pairs of equal work (balance), and
   the blocks in flight at once hold the pairs of a few heads, whose K/V stay in L2 (the
   longest-first run over every head of fa__qtile_of with hg = nbh reads one tile of each head at
   a time: at S = 2k and B S = 16k, 128 heads' K/V, more than the L2 holds). Each item exactly once
   (test_qtile_order). */
static FA__HD inline void fa__qtile_zig(int qtiles, int pos, int *bh, int *qt)
{
    const int h = pos / qtiles, mid = (qtiles - 1) / 2;
    int r = pos - h * qtiles;
    *bh = h;
    if (qtiles & 1) {
        if (h & 1 ? r == 0 : r == qtiles - 1) {
            *qt = mid;
            return;
        }
        if (h & 1) r--;
    }
    *qt = r & 1 ? r / 2 : qtiles - 1 - r / 2;
}

static FA__HD inline int64_t fa__sched_pair(int64_t grid, int64_t blk, int64_t k)
{
    return 2 * fa__sched_item(grid, blk, k >> 1) + (k & 1);
}

/* ---- The score modifiers, the online step's frame and the log-sum-exp merge, host and device ---
   SEMANTICS steps 2-4 on one score, and the two places where softmax meets -INFINITY, written
   once for every kernel: the CPU's row form (section 2) and lane passes (section 3, the same
   operations in the same order on 16 lanes), the CUDA kernels (8b's fa__cu_modify, the generic and
   tensor-core online steps, fa__cu_merge) and the backwards. A kernel may carry its scores in a
   unit u (log2 e) and fold the scale into the constants it hands in; the formulas stay these. */

/* softcap: cap * tanh(s / cap), from th = tanh(s / cap) (each side has its own tanh: fa__tanhf on
   the CPU, tanhf or tanh.approx on the device). Its derivative is 1 - th^2 (the backward). */
static FA__HD inline float fa__softcap_of(float th, float cap) { return cap * th; }

/* ALiBi: s - slope |i + Sk - Sq - j|; adist is that distance, |d - j| as a float. */
static FA__HD inline float fa__alibi1(float s, float slope, float adist) { return s - slope * adist; }
static FA__HD inline float fa__adist(int64_t dist) { return (float)(dist < 0 ? -dist : dist); }

/* bias: s + x, where x = -INFINITY hides the key, even a NaN score. */
static FA__HD inline float fa__bias1(float s, float x) { return x == -INFINITY ? x : s + x; }

/* The online step's frame: a row's exps are taken against its reference m (its running max, or
   with the lazy rule below a value at most FA__LAZY under it), or against 0 while
   m is -INFINITY (no visible key yet), so that a hidden row's exps and its alpha = exp(m_old -
   m_new) are exactly 0 and never NaN. */
static FA__HD inline float fa__online_ref(float m) { return m == -INFINITY ? 0.0f : m; }

/* The lazy rescale's rule (FA__LAZY): a row's reference mo moves to its running max mx only when
   mx passes it by more than FA__LAZY, both in natural-log units of the scores (a kernel whose
   scores are in another unit multiplies both by that unit first), or when the row had no visible
   key yet (mo = -INFINITY, mx finite). Then its exps stay below e^FA__LAZY, far from fp32 overflow
   (and from fp16's 65504 in a 16-bit P), and O / l and ref + log l are the same as with the exact
   max; O's rescale runs a handful of times a row instead of at every block. A row that stays
   takes alpha = 1 exactly. Section 3's lane passes (fa__lazy_ref16, the AVX2 step) are this
   comparison on 16 or 8 lanes; fa__online_c and 8d's fa__tc_softmax call it. */
static FA__HD inline int fa__lazy_moves(float mo, float mx) { return mx > mo + FA__LAZY; }

/* The log-sum-exp merge of parts (m_p, l_p, o_p): M = max m_p, where a NaN m_p sticks (the merged
   row is NaN, never a NaN lost to a later part); w_p = exp(m_p - M) l_p, 0 for a part with m_p =
   -INFINITY; o = sum w_p o_p / sum w_p; lse = M + log sum w_p, -INFINITY when every part is. */
static FA__HD inline float fa__lse_max(float mx, float m) { return (m > mx || m != m) ? m : mx; }
static FA__HD inline float fa__lse_weight(float m, float mx, float l) { return m == -INFINITY ? 0.0f : expf(m - mx) * l; }
static FA__HD inline float fa__lse_of(float mx, float sum) { return mx == -INFINITY ? -INFINITY : mx + logf(sum); }

/* 2^x on the FMA pipe, for kernels whose exps outrun the special-function unit (the Hopper
   forward, 8d3, can take a share of its exps here: 8a's XP0-XP2, 0 as shipped). A Cody-Waite
   split: j = round(x) read from the low mantissa bits of x + 1.5 2^23 (exact for |x| < 2^22),
   f = x - j in [-1/2, 1/2] (exact), 2^f by the degree-3 minimax polynomial of the least relative
   error on that interval (Remez, error 7.48e-5, below an fp16 P's rounding, 2^-12), times 2^j
   built as a float's exponent field. x is first raised to -127 (a max that keeps a NaN): there
   2^j's bits are 0, so -INFINITY and every x < -126.5 give +0 exactly (as the hardware exp's
   flush does), and a NaN stays NaN through p. Below 2^-126 + 2^-127 the result may be a
   subnormal or 0 where 2^x is not (absolute error below 2^-125). For x <= 127 (the online
   softmax hands in x <= ~0). tests/test_flashattn.c (test_ex2_poly) checks it against exp2 on
   [-130, 2] and at -INFINITY and NaN; tests/test_cuda.cu (test_ex2_poly_device) the device's bits. */
#define FA__EX2_C0 0.999928073535f
#define FA__EX2_C1 0.693260985454f
#define FA__EX2_C2 0.242611122224f
#define FA__EX2_C3 0.0551716690926f
static FA__HD inline float fa__ex2_poly(float x)
{
    const float magic = 12582912.0f;   /* 1.5 2^23 */
    float t, f, p, e;
    uint32_t u;
#ifdef __CUDA_ARCH__
    asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(x) : "f"(x), "f"(-127.0f));
    t = __fadd_rn(x, magic);
    f = __fsub_rn(x, __fsub_rn(t, magic));
    u = (__float_as_uint(t) << 23) + 0x3F800000u;   /* (j + 127) << 23: t's mantissa field is 2^22 + j */
    e = __uint_as_float(u);
#else
    x = x < -127.0f ? -127.0f : x;   /* a NaN fails the test and stays */
    t = x + magic;
    f = x - (t - magic);
    memcpy(&u, &t, sizeof u);
    u = (u << 23) + 0x3F800000u;
    memcpy(&e, &u, sizeof e);
#endif
    p = fmaf(fmaf(fmaf(FA__EX2_C3, f, FA__EX2_C2), f, FA__EX2_C1), f, FA__EX2_C0);
    return p * e;
}

/* ============================================================================================== */
/* 2. CPU: the score rule (contract steps 2-5), written once, used by every CPU path        >>rule */
/* ============================================================================================== */

/* Whether the call has a score modifier (softcap, ALiBi, bias), and whether a key can be hidden at
   all (by the position rule or by a bias's -INFINITY): calls that can hide a key accumulate P V
   leaving zero weights out, so that a hidden key's NaN or inf in V reaches no row. */
static int fa__has_modifiers(const fa__dims *d)
{
    return d->softcap > 0.0f || d->alibi != NULL || d->bias != NULL;
}

static int fa__hides_keys(const fa__dims *d) { return fa__has_mask(d) || d->bias != NULL; }

/* The rule's inputs for row i of batch b, head h: its diagonal (section 1), its ALiBi slope, its
   bias row at key 0 (key j at [j * d->bs[3]]). */
static int64_t fa__diag(const fa__dims *d, int64_t i)
{
    return i + d->Sk - d->Sq;
}

static float fa__alibi_slope(const fa__dims *d, int b, int h) { return d->alibi[(int64_t)b * d->alibi_stride + h]; }

static const float *fa__bias_row(const fa__dims *d, int b, int h, int64_t i)
{
    return d->bias + (int64_t)b * d->bs[0] + (int64_t)h * d->bs[1] + i * d->bs[2];
}

/* Steps 2-4 on one score: section 1's formulas (fa__softcap_of, fa__alibi1, fa__bias1) with the
   CPU's tanh. The lane passes of section 3 compute these with the same operations in the same
   order on 16 lanes (ALiBi and the bias then agree bitwise with the row form, unless a compiler
   contracts ALiBi's multiply and subtract into an FMA); softcap's tanh is fa__tanhf, or
   fa__tanh16 on lanes (one method, one set of constants). */
static float fa__tanhf(float x);
static float fa__softcap1(float s, float cap, float inv_cap) { return fa__softcap_of(fa__tanhf(s * inv_cap), cap); }

/* Step 5 on the scores of keys j0..j0+n at s[t * stride]: -INFINITY outside the row's visible keys
   [lo, hi) (fa__key_range), which is one run, so only the block's two ends are touched. */
static void fa__mask_run(float *s, int64_t stride, int n, int64_t j0, int64_t lo, int64_t hi)
{
    int64_t a = lo - j0 < n ? lo - j0 : n, e = hi - j0 > 0 ? hi - j0 : 0, t;
    if (a < 0) a = 0;
    if (e < a) e = a;
    for (t = 0; t < a; t++) s[t * stride] = -INFINITY;
    for (t = e; t < n; t++) s[t * stride] = -INFINITY;
}

/* Steps 2-5 on the scaled scores of row i, keys j0..j0+n, held at s[t * stride] (stride 1 for a
   row-major score row, the tile width for a transposed tile): softcap, ALiBi, bias, then -INFINITY
   where hidden. With mask == 0 the position rule is skipped (the caller knows every key of the
   block is visible). The row form, for the naive paths and the backward; the tiled forward runs
   the same steps on lanes (fa__modify_tile, section 3). */
static void fa__softcap_run(int isa, float *s, int n, float cap);

static void fa__modify_row(const fa__dims *d, int b, int h, int64_t i, int64_t j0, int n,
                           float *s, int64_t stride, int mask, int isa)
{
    int t;
    if (d->softcap > 0.0f) {
        float c = d->softcap, ic = 1.0f / d->softcap;
        if (stride == 1) fa__softcap_run(isa, s, n, c);
        else for (t = 0; t < n; t++) s[t * stride] = fa__softcap1(s[t * stride], c, ic);
    }
    if (d->alibi) {
        float slope = fa__alibi_slope(d, b, h);
        int64_t diag = fa__diag(d, i);
        for (t = 0; t < n; t++) s[t * stride] = fa__alibi1(s[t * stride], slope, fa__adist(j0 + t - diag));
    }
    if (d->bias) {
        const float *br = fa__bias_row(d, b, h, i);
        for (t = 0; t < n; t++) s[t * stride] = fa__bias1(s[t * stride], br[(j0 + t) * d->bs[3]]);
    }
    if (mask) {
        int64_t lo, hi;
        fa__key_range(d, i, &lo, &hi);
        fa__mask_run(s, stride, n, j0, lo, hi);
    }
}

/* The rule's inputs for the rows on the lanes of a transposed score tile (lane r holds a query
   row; lanes past the tile's rows repeat its last row), filled once per tile by fa__lanes_fill
   from the functions above and read by the lane passes (fa__modify_tile): a pass vectorises a step
   of the rule, it does not restate it. */
typedef struct fa__rule_lanes {
    float cap;              /* softcap, 0: none */
    int mods;               /* any of softcap, ALiBi, bias */
    int *lo, *hi;           /* the row's visible keys [lo, hi) (fa__key_range); NULL: no position rule */
    int *diag;              /* the row's diagonal (ALiBi's |d - j|); NULL: no ALiBi */
    float *slope;           /* the row's ALiBi slope */
    const float **bias;     /* the row's bias at key 0 (fa__bias_row); NULL: no bias */
    int64_t bias_ks;        /* the bias's key stride */
} fa__rule_lanes;

/* The lane arrays' size, in floats per lane: a pointer, three ints and a float (pointers first). */
#define FA__LANE_FLOATS ((sizeof(const float *) + 3 * sizeof(int) + 2 * sizeof(float) - 1) / sizeof(float))

/* The lanes of a tile of batch b: nr rows, lane r being head h0 + r / nqr, row i0 + r % nqr, and
   nl lanes in all; `mem` holds nl * FA__LANE_FLOATS floats, pointer-aligned. Lo, hi and diag fit
   an int: 0 <= lo <= hi <= Sk and Sk - Sq <= diag < Sk. */
static void fa__lanes_fill(const fa__dims *d, int b, int h0, int64_t i0, int nqr, int nr, int nl, void *mem,
                           fa__rule_lanes *ln)
{
    int r, masks = fa__has_mask(d);
    ln->bias = (const float **)mem;
    ln->lo = (int *)(ln->bias + nl);
    ln->hi = ln->lo + nl;
    ln->diag = ln->hi + nl;
    ln->slope = (float *)(ln->diag + nl);
    ln->cap = d->softcap;
    ln->mods = fa__has_modifiers(d);
    ln->bias_ks = d->bias ? d->bs[3] : 0;
    for (r = 0; r < nl; r++) {
        int rr = r < nr ? r : nr - 1, h = h0 + rr / nqr;
        int64_t i = i0 + rr % nqr, lo, hi;
        if (masks) {
            fa__key_range(d, i, &lo, &hi);
            ln->lo[r] = (int)lo; ln->hi[r] = (int)hi;
        }
        if (d->alibi) { ln->diag[r] = (int)fa__diag(d, i); ln->slope[r] = fa__alibi_slope(d, b, h); }
        if (d->bias) ln->bias[r] = fa__bias_row(d, b, h, i);
    }
    if (!masks) ln->lo = ln->hi = NULL;
    if (!d->alibi) { ln->diag = NULL; ln->slope = NULL; }
    if (!d->bias) ln->bias = NULL;
}

/* ============================================================================================== */
/* 3. CPU: vector math                                                                     >>simd */
/* ============================================================================================== */

/* exp(x) for x <= 0 (and -inf, giving 0), accurate to a few ulp: 2^k * p(r) with a degree-6
   polynomial on |r| <= ln2/2. Written so that compilers vectorise the loops that call it. x at or
   below FA__EXP_LOW (exp < 3e-38) gives exactly 0 without computing a denormal: a denormal result
   costs a microcode assist (~100+ cycles), and every hidden key's exp would pay it. */
#define FA__EXP_LOW (-86.5f)
static inline float fa__expf(float x)
{
    const float log2e = 1.44269504088896341f, ln2hi = 0.693359375f, ln2lo = -2.12194440e-4f;
    float kf, r, p, x0 = x;
    int32_t ki;
    union { int32_t i; float f; } u;
    if (x != x) return x;                  /* NaN stays NaN */
    if (x < FA__EXP_LOW) x = FA__EXP_LOW;
    if (x > 88.0f) x = 88.0f;
    kf = floorf(x * log2e + 0.5f);
    r = x - kf * ln2hi;
    r = r - kf * ln2lo;
    p = 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    ki = (int32_t)kf;
    /* split the exponent so that 2^k is representable at any k the clamps allow */
    u.i = (ki / 2 + 127) << 23; p *= u.f;
    u.i = ((ki - ki / 2) + 127) << 23; p *= u.f;
    return x0 <= FA__EXP_LOW ? 0.0f : p;
}

/* tanh(x), softcap's step, within a few 1e-8 of tanh: an odd Taylor polynomial below |x| = 0.3
   (the first term left out is < 2e-8 there), else 1 - 2/(exp(2|x|) + 1) through fa__expf. About
   5x cheaper than libm's tanhf, which made softcap cost 5x a plain call. NaN stays NaN. */
#define FA__TANH_SMALL 0.3f
#define FA__TANH_C3 (-0.333333333f)
#define FA__TANH_C5 0.133333333f
#define FA__TANH_C7 (-0.0539682540f)
#define FA__TANH_C9 0.0218694885f
static float fa__tanhf(float x)
{
    float a = fabsf(x), t;
    if (!(a >= FA__TANH_SMALL)) {
        float x2 = x * x;
        return x + x * x2 * (FA__TANH_C3 + x2 * (FA__TANH_C5 + x2 * (FA__TANH_C7 + x2 * FA__TANH_C9)));
    }
    t = 1.0f - 2.0f / (fa__expf(2.0f * a) + 1.0f);
    return x < 0.0f ? -t : t;
}

/* s[t] = exp(s[t] - m); returns the sum. m must be finite. */
static float fa__exp_sum_c(float *s, int n, float m)
{
    float sum = 0.0f;
    int t;
    for (t = 0; t < n; t++) {
        float e = s[t] == -INFINITY ? 0.0f : fa__expf(s[t] - m);
        s[t] = e;
        sum += e;
    }
    return sum;
}

/* max that keeps a NaN: once m or an element is NaN the result is NaN, whatever follows (a later
   finite or -INFINITY element must not replace it, or a NaN row followed by hidden keys would look
   empty and come out 0 / -INFINITY) */
static float fa__row_max_c(const float *s, int n, float m)
{
    int t;
    for (t = 0; t < n; t++)
        if (s[t] > m || s[t] != s[t]) m = s[t];
    return m;
}

/* SIMD. The running CPU picks the path at every call (no -march needed, no state kept):
   2 = AVX-512F, 1 = AVX2+FMA, 0 = portable C. Defining FLASHATTN_ISA to 0, 1 or 2 caps it (tests).
   The x86 kernels are functions with target attributes, so plain -O2 builds still get them. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(FLASHATTN_NO_SIMD)
#define FLASHATTN__X86 1
#ifdef __cplusplus
}
#endif
#include <immintrin.h>
#ifdef __cplusplus
extern "C" {
#endif
#define FA__AVX512 __attribute__((target("avx512f")))
/* fixed 4-16 trip loops over register arrays, unrolled so that the arrays stay in registers (GCC 8+
   and clang read this pragma; -O2 alone keeps such loops and spills the arrays to the stack) */
#if (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8)) && !defined(__CUDACC__)
#define FA__UNROLL _Pragma("GCC unroll 16")
#else
#define FA__UNROLL
#endif
#define FA__AVX2 __attribute__((target("avx2,fma")))
/* vmaxps/vminps through the zero-masked forms: g++ 12 warns on the plain intrinsics' undefined
   pass-through operand. Either returns its second operand when one is NaN. */
#define fa__max16(a, b) _mm512_maskz_max_ps((__mmask16)0xFFFF, (a), (b))
#define fa__min16(a, b) _mm512_maskz_min_ps((__mmask16)0xFFFF, (a), (b))
/* the same for the widening and shifting of half-precision storage (and vcvtph2ps) */
#define fa__cvtph16(h) _mm512_maskz_cvtph_ps((__mmask16)0xFFFF, (h))
#define fa__cvtepu16(h) _mm512_maskz_cvtepu16_epi32((__mmask16)0xFFFF, (h))
#define fa__cvtepi32_16(x) _mm512_maskz_cvtepi32_epi16((__mmask16)0xFFFF, (x))
#define fa__slli32(x, n) _mm512_maskz_slli_epi32((__mmask16)0xFFFF, (x), (n))
#define fa__srli32(x, n) _mm512_maskz_srli_epi32((__mmask16)0xFFFF, (x), (n))
#include <cpuid.h>
#endif

/* CPU features the compilers' __builtin_cpu_supports does not name alike (clang has no "f16c"): by
   cpuid. F16C: leaf 1 ECX bit 29; AVX512BW, AVX512VL: leaf 7 EBX bits 30, 31; AVX512-BF16: leaf 7
   subleaf 1 EAX bit 5. (The AVX-512 state's OS support is in fa__isa's avx512f test.) */
#ifdef FLASHATTN__X86
static int fa__cpu_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
}

static inline int fa__cpu_avx512bf16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!(b >> 30 & 1u) || !(b >> 31 & 1u) || a < 1) return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (int)(a >> 5 & 1u);
}
#endif

static int fa__isa(void)
{
    int isa = 0;
#ifdef FLASHATTN__X86
    if (__builtin_cpu_supports("avx512f")) isa = 2;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa = 1;
#endif
#ifdef FLASHATTN_ISA
    if (isa > FLASHATTN_ISA) isa = FLASHATTN_ISA;
#endif
    return isa;
}

/* The exp coefficients of fa__expf, shared by every path. */
#define FA__EXP_C6 1.3981999507e-3f
#define FA__EXP_C5 8.3334519073e-3f
#define FA__EXP_C4 4.1665795894e-2f
#define FA__EXP_C3 1.6666665459e-1f
#define FA__EXP_C2 5.0000001201e-1f
#define FA__LOG2E 1.44269504088896341f
#define FA__LN2HI 0.693359375f
#define FA__LN2LO (-2.12194440e-4f)

#ifdef FLASHATTN__X86
/* exp on 16 lanes, fa__expf's method: x clamped to [-86.5, 88] (NaN passes: max/min return their
   second operand on NaN), k = round(x log2e), r = x - k ln2 in two parts, 2^k by vscalefps. Lanes
   with x <= -86.5 (exp below 2^-124.8, so under 3e-38; a hidden key's -INFINITY among them) give
   exactly 0: they are clamped first and zeroed at the end, because a result in the denormal range
   costs a microcode assist of ~100+ cycles per instruction, which made every exp of a masked score
   (half of a causal diagonal block) cost as much as the block's FMAs. */
FA__AVX512 static inline __m512 fa__exp16(__m512 x)
{
    __m512 k, r, p;
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(FA__EXP_LOW), _CMP_NLE_UQ);
    x = fa__max16(_mm512_set1_ps(FA__EXP_LOW), x);
    x = fa__min16(_mm512_set1_ps(88.0f), x);
    k = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(x, _mm512_set1_ps(FA__LOG2E)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(FA__LN2HI), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(FA__LN2LO), r);
    p = _mm512_set1_ps(FA__EXP_C6);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FA__EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FA__EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FA__EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FA__EXP_C2));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps(keep, p, k);
}

/* The same on 8 lanes (x <= -86.5 gives 0, without a denormal on the way); 2^k as two halves
   multiplied in, as fa__expf does (no denormal exponent). */
FA__AVX2 static inline __m256 fa__exp8(__m256 x)
{
    __m256 k, r, p;
    __m256i ki, k1, k2;
    __m256 low = _mm256_cmp_ps(x, _mm256_set1_ps(FA__EXP_LOW), _CMP_LE_OQ);
    x = _mm256_max_ps(_mm256_set1_ps(FA__EXP_LOW), x);
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
    k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(FA__LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(FA__LN2HI), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(FA__LN2LO), r);
    p = _mm256_set1_ps(FA__EXP_C6);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FA__EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FA__EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FA__EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FA__EXP_C2));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    ki = _mm256_cvtps_epi32(k);
    k1 = _mm256_srai_epi32(ki, 1);
    k2 = _mm256_sub_epi32(ki, k1);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23)));
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23)));
    return _mm256_andnot_ps(low, p);
}

FA__AVX512 static float fa__exp_sum_avx512(float *s, int n, float m)
{
    __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps(), e;
    int t;
    for (t = 0; t + 16 <= n; t += 16) {
        e = fa__exp16(_mm512_sub_ps(_mm512_loadu_ps(s + t), vm));
        _mm512_storeu_ps(s + t, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (t < n) {
        __mmask16 k = (__mmask16)((1u << (n - t)) - 1u);
        e = fa__exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), vm));
        _mm512_mask_storeu_ps(s + t, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    {
        float buf[16];
        int u;
        _mm512_storeu_ps(buf, acc);
        for (u = 1; u < 16; u++) buf[0] += buf[u];
        return buf[0];
    }
}

FA__AVX2 static float fa__exp_sum_avx2(float *s, int n, float m)
{
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps(), e;
    float buf[8];
    int t, u;
    for (t = 0; t + 8 <= n; t += 8) {
        e = fa__exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
        _mm256_storeu_ps(s + t, e);
        acc = _mm256_add_ps(acc, e);
    }
    _mm256_storeu_ps(buf, acc);
    for (; t < n; t++) {
        s[t] = s[t] == -INFINITY ? 0.0f : fa__expf(s[t] - m);
        buf[0] += s[t];
    }
    for (u = 1; u < 8; u++) buf[0] += buf[u];
    return buf[0];
}
#endif

#ifdef FLASHATTN__X86
/* fa__tanhf on 16 lanes: the same polynomial below |x| = 0.3 and 1 - 2/(exp(2|x|) + 1) above. */
FA__AVX512 static inline __m512 fa__tanh16(__m512 x)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 a = _mm512_abs_ps(x), x2 = _mm512_mul_ps(x, x), p, e, t;
    __mmask16 big = _mm512_cmp_ps_mask(a, _mm512_set1_ps(FA__TANH_SMALL), _CMP_GE_OQ);   /* NaN: polynomial */
    p = _mm512_fmadd_ps(x2, _mm512_set1_ps(FA__TANH_C9), _mm512_set1_ps(FA__TANH_C7));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(FA__TANH_C5));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(FA__TANH_C3));
    p = _mm512_fmadd_ps(_mm512_mul_ps(x, x2), p, x);
    e = fa__exp16(_mm512_add_ps(a, a));
    t = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                      _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    t = _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(t),
                                            _mm512_and_epi32(_mm512_castps_si512(x), sign)));
    return _mm512_mask_blend_ps(big, p, t);
}

FA__AVX512 static void fa__softcap_avx512(float *s, int n, float cap)
{
    const __m512 c = _mm512_set1_ps(cap), ic = _mm512_set1_ps(1.0f / cap);
    int t;
    for (t = 0; t + 16 <= n; t += 16)
        _mm512_storeu_ps(s + t, _mm512_mul_ps(c, fa__tanh16(_mm512_mul_ps(_mm512_loadu_ps(s + t), ic))));
    if (t < n) {
        __mmask16 k = (__mmask16)((1u << (n - t)) - 1u);
        _mm512_mask_storeu_ps(s + t, k, _mm512_mul_ps(c, fa__tanh16(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + t), ic))));
    }
}
#endif

/* s[0..n) = cap * tanh(s / cap), softcap's step on a contiguous run (fa__softcap1 on each) */
static void fa__softcap_c(float *s, int n, float cap)
{
    float ic = 1.0f / cap;
    int t;
    for (t = 0; t < n; t++) s[t] = fa__softcap1(s[t], cap, ic);
}

/* d[t] = s[t] * c (d == s: in place) */
static void fa__scale_c(float *d, const float *s, int n, float c)
{
    int t;
    for (t = 0; t < n; t++) d[t] = s[t] * c;
}

#ifdef FLASHATTN__X86
/* the vector maxes return their second operand when one is NaN, so a lane's NaN would be replaced
   by the next vector's value: NaNs are counted apart and win */
FA__AVX512 static float fa__row_max_avx512(const float *s, int n, float m)
{
    __m512 acc = _mm512_set1_ps(m), x;
    __mmask16 nan = 0;
    int t;
    for (t = 0; t + 16 <= n; t += 16) {
        x = _mm512_loadu_ps(s + t);
        nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        acc = fa__max16(acc, x);
    }
    if (t < n) {
        __mmask16 k = (__mmask16)((1u << (n - t)) - 1u);
        x = _mm512_maskz_loadu_ps(k, s + t);
        nan |= _mm512_mask_cmp_ps_mask(k, x, x, _CMP_UNORD_Q);
        acc = _mm512_mask_max_ps(acc, k, acc, x);
    }
    if (nan) return NAN;
    {
        float buf[16];
        _mm512_storeu_ps(buf, acc);
        return fa__row_max_c(buf, 16, m);
    }
}

FA__AVX512 static void fa__scale_avx512(float *d, const float *s, int n, float c)
{
    __m512 vc = _mm512_set1_ps(c);
    int t;
    for (t = 0; t + 16 <= n; t += 16) _mm512_storeu_ps(d + t, _mm512_mul_ps(_mm512_loadu_ps(s + t), vc));
    if (t < n) {
        __mmask16 k = (__mmask16)((1u << (n - t)) - 1u);
        _mm512_mask_storeu_ps(d + t, k, _mm512_maskz_mul_ps(k, _mm512_maskz_loadu_ps(k, s + t), vc));
    }
}

FA__AVX2 static float fa__row_max_avx2(const float *s, int n, float m)
{
    __m256 acc = _mm256_set1_ps(m), nan = _mm256_setzero_ps(), x;
    float buf[8];
    int t;
    for (t = 0; t + 8 <= n; t += 8) {
        x = _mm256_loadu_ps(s + t);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        acc = _mm256_max_ps(acc, x);
    }
    if (_mm256_movemask_ps(nan)) return NAN;
    _mm256_storeu_ps(buf, acc);
    return fa__row_max_c(s + t, n - t, fa__row_max_c(buf, 8, m));
}

FA__AVX2 static void fa__scale_avx2(float *d, const float *s, int n, float c)
{
    __m256 vc = _mm256_set1_ps(c);
    int t;
    for (t = 0; t + 8 <= n; t += 8) _mm256_storeu_ps(d + t, _mm256_mul_ps(_mm256_loadu_ps(s + t), vc));
    for (; t < n; t++) d[t] = s[t] * c;
}
#endif

/* ---- The tiled path's microkernels ---------------------------------------------------------
   The tiled path keeps its tiles transposed, with query rows along the SIMD lanes: Qt [D][ld],
   St [block_k][ld] (scores, then probabilities), Ot [Dv][ld] (the accumulator), ld a multiple of 16.
   Both products are then one shape, C[a][:] (+)= sum_x A(a, x) * B[x][:] over nv 16-lane vectors:
     scores  St[j][:]  = sum_t K[j][t] * Qt[t][:]   (A = K rows: sa = key stride, sx = 1)
     output  Ot[t][:] += sum_j V[j][t] * St[j][:]   (A = V columns: sa = 1, sx = value stride)
   acc: 0 C =, 1 C +=, 2 C += leaving lanes whose B is 0 untouched (blocks with hidden keys: a
   NaN or inf in a hidden key's V must reach no row, and 0 * NaN is NaN).
   A is read as broadcast scalars straight from the caller's K and V (any stride, no packing), B
   and C are contiguous lane vectors; a register block is 8 A-rows x 48 lanes (AVX-512) or
   6 x 16 (AVX2). The max, exp and rescale of the online softmax are vertical, one lane per row. */
/* A stream of prefetches toward L2 over the rows of up to two matrices, a cache line per step. The
   tiled loop points it at the next key block's K and V rows, and the AVX-512 GEMM loops take a step
   every (mask + 1) iterations (the AVX2 ones too), so that block arrives while this one computes:
   without it the first register panel of every block waited on L3 and ran at half speed (measured,
   2-core Xeon, D=128).
   A prefetch never faults; its address is formed as an integer. */
typedef struct fa__pf {
    uintptr_t row[2];                 /* next row of each matrix; matrix 0 first */
    int64_t stride[2];                /* bytes */
    int lines[2], rows[2];            /* cache lines per row, rows left */
    int c, mask;                      /* next line in the row; step when (x & mask) == 0 */
} fa__pf;

/* rows r0..r1 of width elements of es bytes, `stride` elements apart (es 2: half storage) */
static void fa__pf_set_es(fa__pf *p, int m, const void *base, int64_t stride, int64_t r0, int64_t r1, int width,
                          size_t es)
{
    p->row[m] = (uintptr_t)base + (uintptr_t)(r0 * stride) * es;
    p->stride[m] = stride * (int64_t)es;
    p->lines[m] = (int)(((int64_t)width * (int64_t)es + 63) / 64);
    p->rows[m] = r1 > r0 && p->lines[m] > 0 ? (int)(r1 - r0) : 0;
    p->c = 0;
}

static void fa__pf_set(fa__pf *p, int m, const float *base, int64_t stride, int64_t r0, int64_t r1, int width)
{
    fa__pf_set_es(p, m, base, stride, r0, r1, width, sizeof(float));
}

/* the stream's next line (0 when it is done), the stream moved past it */
static inline uintptr_t fa__pf_next(fa__pf *p)
{
    int m = p->rows[0] > 0 ? 0 : 1;
    uintptr_t a;
    if (p->rows[m] <= 0) return 0;
    a = p->row[m] + (uintptr_t)p->c * 64u;
    if (++p->c == p->lines[m]) {
        p->c = 0;
        p->row[m] += (uintptr_t)p->stride[m];
        p->rows[m]--;
    }
    return a;
}

static inline void fa__pf_step(fa__pf *p)
{
    uintptr_t a = fa__pf_next(p);
#if defined(__GNUC__)
    if (a) __builtin_prefetch((const void *)a, 0, 2);
#else
    (void)a;
#endif
}

/* End of the register panel that starts at lane vector vp of nv: 3 vectors (48 lanes), and when 4
   are left 2 + 2, not 3 + a load-bound 1. The tiled loop walks the same panels. */
static int fa__panel_end(int vp, int nv) { return nv - vp == 4 ? vp + 2 : (nv - vp < 3 ? nv : vp + 3); }

#ifdef FLASHATTN__X86
#define FA__Z3(a) __m512 c##a##0 = _mm512_setzero_ps(), c##a##1 = c##a##0, c##a##2 = c##a##0
#define FA__L3(a) __m512 c##a##0 = _mm512_loadu_ps(C + ra[a] * ldc), c##a##1 = _mm512_loadu_ps(C + ra[a] * ldc + 16), \
                         c##a##2 = _mm512_loadu_ps(C + ra[a] * ldc + 32)
#define FA__F3(a) do { __m512 w_ = _mm512_set1_ps(pa[a][off]); c##a##0 = _mm512_fmadd_ps(w_, b0, c##a##0); \
                       c##a##1 = _mm512_fmadd_ps(w_, b1, c##a##1); c##a##2 = _mm512_fmadd_ps(w_, b2, c##a##2); } while (0)
#define FA__S3(a) do { if (a < na - a0) { _mm512_storeu_ps(C + (a0 + a) * ldc, c##a##0); \
                       _mm512_storeu_ps(C + (a0 + a) * ldc + 16, c##a##1); _mm512_storeu_ps(C + (a0 + a) * ldc + 32, c##a##2); } } while (0)
#define FA__Z2(a) __m512 c##a##0 = _mm512_setzero_ps(), c##a##1 = c##a##0
#define FA__L2(a) __m512 c##a##0 = _mm512_loadu_ps(C + ra[a] * ldc), c##a##1 = _mm512_loadu_ps(C + ra[a] * ldc + 16)
#define FA__F2(a) do { __m512 w_ = _mm512_set1_ps(pa[a][off]); c##a##0 = _mm512_fmadd_ps(w_, b0, c##a##0); \
                       c##a##1 = _mm512_fmadd_ps(w_, b1, c##a##1); } while (0)
#define FA__M2(a) do { __m512 w_ = _mm512_set1_ps(pa[a][off]); c##a##0 = _mm512_mask3_fmadd_ps(w_, b0, c##a##0, k0); \
                       c##a##1 = _mm512_mask3_fmadd_ps(w_, b1, c##a##1, k1); } while (0)
#define FA__S2(a) do { if (a < na - a0) { _mm512_storeu_ps(C + (a0 + a) * ldc, c##a##0); \
                       _mm512_storeu_ps(C + (a0 + a) * ldc + 16, c##a##1); } } while (0)
#define FA__Z1(a) __m512 c##a##0 = _mm512_setzero_ps()
#define FA__L1(a) __m512 c##a##0 = _mm512_loadu_ps(C + ra[a] * ldc)
#define FA__F1(a) c##a##0 = _mm512_fmadd_ps(_mm512_set1_ps(pa[a][off]), b0, c##a##0)
#define FA__S1(a) do { if (a < na - a0) _mm512_storeu_ps(C + (a0 + a) * ldc, c##a##0); } while (0)
/* the same FMAs, leaving lanes whose B is 0 untouched (so a hidden key's NaN/inf V adds nothing) */
#define FA__M3(a) do { __m512 w_ = _mm512_set1_ps(pa[a][off]); c##a##0 = _mm512_mask3_fmadd_ps(w_, b0, c##a##0, k0); \
                       c##a##1 = _mm512_mask3_fmadd_ps(w_, b1, c##a##1, k1); c##a##2 = _mm512_mask3_fmadd_ps(w_, b2, c##a##2, k2); } while (0)
#define FA__M1(a) c##a##0 = _mm512_mask3_fmadd_ps(_mm512_set1_ps(pa[a][off]), b0, c##a##0, k0)
#define FA__NZ(b) _mm512_cmp_ps_mask((b), _mm512_setzero_ps(), _CMP_NEQ_UQ)
#define FA__X8(M) M(0); M(1); M(2); M(3); M(4); M(5); M(6); M(7)

/* the prefetch stream's step inside a GEMM loop (pf is never NULL: a stream with no rows left
   steps nothing), and the next 8 C rows of an accumulating block toward L1 while this block runs
   (their loads would otherwise stall the block's first FMAs) */
#define FA__PFX(x) do { if (((x) & pf->mask) == 0) fa__pf_step(pf); } while (0)
#define FA__PFC(n) do { if (a0 + 8 < na) for (a = 0; a < 8 && a0 + 8 + a < na; a++) { \
                            const char *cp_ = (const char *)(C + (a0 + 8 + a) * ldc); int u_; \
                            for (u_ = 0; u_ < (n); u_++) _mm_prefetch(cp_ + 64 * u_, _MM_HINT_T0); } } while (0)

FA__AVX512 static void fa__gemm_avx512(const float *A, int64_t sa, int64_t sx, int na, int nx,
                                       const float *B, int64_t ldb, float *C0, int64_t ldc, int nv, int acc,
                                       fa__pf *pf)
{
    int a0, v, x, a, vp, ve;
    /* one panel of up to 48 lanes of B at a time (it stays in L1) against every group of 8 A-rows */
    for (vp = 0; vp < nv; vp = ve) {
        ve = fa__panel_end(vp, nv);
        for (a0 = 0; a0 < na; a0 += 8) {
            const float *pa[8];
            int64_t ra[8], off = 0;
            for (a = 0; a < 8; a++) {          /* rows past the end repeat the last one, never stored */
                ra[a] = a0 + a < na ? a0 + a : na - 1;
                pa[a] = A + ra[a] * sa;
            }
            if (ve - vp == 3) {
                const float *b = B + vp * 16;
                float *C = C0 + vp * 16;
                if (acc == 2) {
                    FA__X8(FA__L3);
                    FA__PFC(3);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
                        __mmask16 k0 = FA__NZ(b0), k1 = FA__NZ(b1), k2 = FA__NZ(b2);
                        FA__PFX(x);
                        FA__X8(FA__M3);
                    }
                    FA__X8(FA__S3);
                } else if (acc) {
                    FA__X8(FA__L3);
                    FA__PFC(3);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
                        FA__PFX(x);
                        FA__X8(FA__F3);
                    }
                    FA__X8(FA__S3);
                } else {
                    FA__X8(FA__Z3);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
                        FA__PFX(x);
                        FA__X8(FA__F3);
                    }
                    FA__X8(FA__S3);
                }
                continue;
            }
            if (ve - vp == 2) {
                const float *b = B + vp * 16;
                float *C = C0 + vp * 16;
                if (acc == 2) {
                    FA__X8(FA__L2);
                    FA__PFC(2);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
                        __mmask16 k0 = FA__NZ(b0), k1 = FA__NZ(b1);
                        FA__PFX(x);
                        FA__X8(FA__M2);
                    }
                    FA__X8(FA__S2);
                } else if (acc) {
                    FA__X8(FA__L2);
                    FA__PFC(2);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
                        FA__PFX(x);
                        FA__X8(FA__F2);
                    }
                    FA__X8(FA__S2);
                } else {
                    FA__X8(FA__Z2);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
                        FA__PFX(x);
                        FA__X8(FA__F2);
                    }
                    FA__X8(FA__S2);
                }
                continue;
            }
            for (v = vp; v < ve; v++) {
                const float *b = B + v * 16;
                float *C = C0 + v * 16;
                off = 0;
                if (acc == 2) {
                    FA__X8(FA__L1);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512 b0 = _mm512_loadu_ps(b);
                        __mmask16 k0 = FA__NZ(b0);
                        FA__X8(FA__M1);
                    }
                    FA__X8(FA__S1);
                } else if (acc) {
                    FA__X8(FA__L1);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) { __m512 b0 = _mm512_loadu_ps(b); FA__X8(FA__F1); }
                    FA__X8(FA__S1);
                } else {
                    FA__X8(FA__Z1);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) { __m512 b0 = _mm512_loadu_ps(b); FA__X8(FA__F1); }
                    FA__X8(FA__S1);
                }
            }
        }
    }
}

#define FA__Y2(a) __m256 c##a##0 = acc ? _mm256_loadu_ps(C + ra[a] * ldc) : _mm256_setzero_ps(), \
                         c##a##1 = acc ? _mm256_loadu_ps(C + ra[a] * ldc + 8) : _mm256_setzero_ps()
#define FA__G2(a) do { __m256 w_ = _mm256_set1_ps(pa[a][off]); c##a##0 = _mm256_fmadd_ps(w_, b0, c##a##0); \
                       c##a##1 = _mm256_fmadd_ps(w_, b1, c##a##1); } while (0)
#define FA__N2(a) do { __m256 w_ = _mm256_set1_ps(pa[a][off]); \
                       c##a##0 = _mm256_blendv_ps(c##a##0, _mm256_fmadd_ps(w_, b0, c##a##0), n0); \
                       c##a##1 = _mm256_blendv_ps(c##a##1, _mm256_fmadd_ps(w_, b1, c##a##1), n1); } while (0)
#define FA__T2(a) do { if (a < na - a0) { _mm256_storeu_ps(C + (a0 + a) * ldc, c##a##0); \
                       _mm256_storeu_ps(C + (a0 + a) * ldc + 8, c##a##1); } } while (0)
#define FA__X6(M) M(0); M(1); M(2); M(3); M(4); M(5)

FA__AVX2 static void fa__gemm_avx2(const float *A, int64_t sa, int64_t sx, int na, int nx,
                                   const float *B, int64_t ldb, float *C0, int64_t ldc, int nv, int acc,
                                   fa__pf *pf)
{
    int a0, v, x, a;
    for (a0 = 0; a0 < na; a0 += 6) {
        const float *pa[6];
        int64_t ra[6];
        for (a = 0; a < 6; a++) {
            ra[a] = a0 + a < na ? a0 + a : na - 1;
            pa[a] = A + ra[a] * sa;
        }
        for (v = 0; v < nv; v++) {
            const float *b = B + v * 16;
            float *C = C0 + v * 16;
            int64_t off = 0;
            FA__X6(FA__Y2);
            if (acc == 2)
                for (x = 0; x < nx; x++, off += sx, b += ldb) {
                    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                    __m256 n0 = _mm256_cmp_ps(b0, _mm256_setzero_ps(), _CMP_NEQ_UQ);
                    __m256 n1 = _mm256_cmp_ps(b1, _mm256_setzero_ps(), _CMP_NEQ_UQ);
                    FA__PFX(x);
                    FA__X6(FA__N2);
                }
            else
                for (x = 0; x < nx; x++, off += sx, b += ldb) {
                    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                    FA__PFX(x);
                    FA__X6(FA__G2);
                }
            FA__X6(FA__T2);
        }
    }
}
#endif

static void fa__gemm_c(const float *A, int64_t sa, int64_t sx, int na, int nx,
                       const float *B, int64_t ldb, float *C, int64_t ldc, int nv, int acc, fa__pf *pf)
{
    int a0, x, l0, u, a;
    (void)pf;
    /* portable C: 4 A-rows x 16 lanes in local arrays, fixed-length inner loops that compilers
       vectorise at -O2 for whatever SIMD the target has */
    for (a0 = 0; a0 < na; a0 += 4) {
        const float *pa[4];
        for (a = 0; a < 4; a++) pa[a] = A + (int64_t)(a0 + a < na ? a0 + a : na - 1) * sa;
        for (l0 = 0; l0 < nv * 16; l0 += 16) {
            float c0[16], c1[16], c2[16], c3[16];
            const float *b = B + l0;
            float *cr[4];
            int64_t off = 0;
            for (a = 0; a < 4; a++) cr[a] = C + (int64_t)(a0 + a < na ? a0 + a : na - 1) * ldc + l0;
            for (u = 0; u < 16; u++) {
                c0[u] = acc ? cr[0][u] : 0.0f; c1[u] = acc ? cr[1][u] : 0.0f;
                c2[u] = acc ? cr[2][u] : 0.0f; c3[u] = acc ? cr[3][u] : 0.0f;
            }
            for (x = 0; x < nx; x++, off += sx, b += ldb) {
                const float w0 = pa[0][off], w1 = pa[1][off], w2 = pa[2][off], w3 = pa[3][off];
                if (acc == 2) {
                    for (u = 0; u < 16; u++) {
                        float bu = b[u], z = bu != 0.0f ? 1.0f : 0.0f;
                        c0[u] += z != 0.0f ? w0 * bu : 0.0f; c1[u] += z != 0.0f ? w1 * bu : 0.0f;
                        c2[u] += z != 0.0f ? w2 * bu : 0.0f; c3[u] += z != 0.0f ? w3 * bu : 0.0f;
                    }
                } else {
                    for (u = 0; u < 16; u++) {
                        c0[u] += w0 * b[u]; c1[u] += w1 * b[u]; c2[u] += w2 * b[u]; c3[u] += w3 * b[u];
                    }
                }
            }
            for (u = 0; u < 16; u++) {
                cr[0][u] = c0[u];
                if (a0 + 1 < na) cr[1][u] = c1[u];
                if (a0 + 2 < na) cr[2][u] = c2[u];
                if (a0 + 3 < na) cr[3][u] = c3[u];
            }
        }
    }
}

/* One block of the online softmax on the transposed tile, every lane a query row. Each lane keeps
   a reference max m, and the block's scores become S[j] = exp(S[j] - m), l = alpha l + sum_j S[j].
   A lane's reference moves (to its running max, with its O *= alpha = exp(m_old - m_new)) only
   when the lane saw a score above its m + FA__LAZY, or had no visible key yet: the exps stay below
   e^FA__LAZY, far from fp32 overflow, O / l and m + log l are the same, and the Dv x 16 rescale of
   O, which streams the whole accumulator, runs a handful of times per row instead of every block.
   The decision is each lane's own (a vector rescales when any lane moves, the others by exactly
   1), so a row's bits do not depend on which rows share its vector. A lane whose reference is
   still -INFINITY subtracts 0, so its exps and alpha are exactly 0. `tmp` gets the 16 * nv alphas
   (1 where the reference stayed). */
#ifdef FLASHATTN__X86
/* 2^t for t = (s - m) log2(e) <= FA__LAZY log2(e): k = round(t), f = t - k (exact), 2^f by a
   degree-6 fit on [-1/2, 1/2] (1.7 ulp in fp32 Horner), times 2^k. Three fewer vector ops than
   fa__exp16 (no upper clamp, no ln 2 split). The difference s - m is taken first, as in fa__exp16:
   folding it into one FMA with a precomputed m log2(e) would overflow for |m| > FLT_MAX / log2(e).
   t <= -125 (a hidden key's -INFINITY among them) gives exactly 0, clamped first so that no lane
   goes through the denormal range (see fa__exp16); NaN stays NaN. */
/* The range reduction of the base-2 exps on 16 lanes (fa__exp2_lazy16, fa__exp2_amx16): k = round(t)
   after t is clamped at -125, f = t - k (exact), *keep the lanes with t > -125 (NaN kept: the
   comparison is unordered-true and the max returns t). */
FA__AVX512 static inline __m512 fa__exp2_split16(__m512 t, __m512 *f, __mmask16 *keep)
{
    __m512 k;
    *keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-125.0f), _CMP_NLE_UQ);
    t = fa__max16(_mm512_set1_ps(-125.0f), t);
    k = _mm512_maskz_roundscale_ps(0xFFFF, t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    *f = _mm512_sub_ps(t, k);
    return k;
}

FA__AVX512 static inline __m512 fa__exp2_lazy16(__m512 t)
{
    __m512 f, p;
    __mmask16 keep;
    const __m512 k = fa__exp2_split16(t, &f, &keep);
    p = _mm512_fmadd_ps(_mm512_set1_ps(1.535347110e-04f), f, _mm512_set1_ps(1.339887269e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618436918e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332367e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264774e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471825e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, k);
}

/* The online step's lazy reference on 16 lanes (fa__online_avx512 and the AMX step fa__online_amx):
   the lanes whose block max mx passes their reference mo by more than FA__LAZY (returned) take mx
   as their new reference *mr; *ms is the reference the exps use (0 where *mr is still -INFINITY). */
FA__AVX512 static inline __mmask16 fa__lazy_ref16(__m512 mo, __m512 mx, __m512 *mr, __m512 *ms)
{
    const __mmask16 up = _mm512_cmp_ps_mask(mx, _mm512_add_ps(mo, _mm512_set1_ps(FA__LAZY)), _CMP_GT_OQ);
    *mr = _mm512_mask_mov_ps(mo, up, mx);
    *ms = _mm512_mask_mov_ps(*mr, _mm512_cmp_ps_mask(*mr, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), _mm512_setzero_ps());
    return up;
}

/* O's Dv rows of 16 lanes (row stride ldo) times the lanes' alpha: the rescale of the online step */
FA__AVX512 static inline void fa__rescale16(float *O, int64_t ldo, int Dv, __m512 al)
{
    int t;
    for (t = 0; t < Dv; t++) _mm512_storeu_ps(O + t * ldo, _mm512_mul_ps(_mm512_loadu_ps(O + t * ldo), al));
}

FA__AVX512 static void fa__online_avx512(float *S, int64_t lds, int nk, int nv, float *m, float *l,
                                         float *O, int64_t ldo, int Dv, float *tmp)
{
    int v, j;
    __mmask16 up;
    const __m512 ninf = _mm512_set1_ps(-INFINITY), l2e = _mm512_set1_ps(FA__LOG2E);
    for (v = 0; v < nv; v++) {
        float *s = S + v * 16;
        __m512 mo = _mm512_loadu_ps(m + v * 16), mx = mo, mr, ms, al = _mm512_set1_ps(1.0f), sum = _mm512_setzero_ps();
        {   /* four chains: one would wait on the max latency at every key */
            __m512 x1 = ninf, x2 = ninf, x3 = ninf;
            for (j = 0; j + 4 <= nk; j += 4) {
                mx = fa__max16(mx, _mm512_loadu_ps(s + j * lds));
                x1 = fa__max16(x1, _mm512_loadu_ps(s + (j + 1) * lds));
                x2 = fa__max16(x2, _mm512_loadu_ps(s + (j + 2) * lds));
                x3 = fa__max16(x3, _mm512_loadu_ps(s + (j + 3) * lds));
            }
            for (; j < nk; j++) mx = fa__max16(mx, _mm512_loadu_ps(s + j * lds));
            mx = fa__max16(fa__max16(mx, x1), fa__max16(x2, x3));
        }
        up = fa__lazy_ref16(mo, mx, &mr, &ms);
        if (up) {
            al = _mm512_mask_mov_ps(al, up, fa__exp16(_mm512_sub_ps(mo, ms)));
            fa__rescale16(O + v * 16, ldo, Dv, al);
        }
        for (j = 0; j < nk; j++) {
            __m512 e = fa__exp2_lazy16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j * lds), ms), l2e));
            _mm512_storeu_ps(s + j * lds, e);
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_storeu_ps(l + v * 16, _mm512_fmadd_ps(al, _mm512_loadu_ps(l + v * 16), sum));
        _mm512_storeu_ps(m + v * 16, mr);
        _mm512_storeu_ps(tmp + v * 16, al);
    }
}

FA__AVX2 static void fa__online_avx2(float *S, int64_t lds, int nk, int nv, float *m, float *l,
                                     float *O, int64_t ldo, int Dv, float *tmp)
{
    int v, j, t, up;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (v = 0; v < 2 * nv; v++) {
        float *s = S + v * 8;
        __m256 mo = _mm256_loadu_ps(m + v * 8), mx = mo, mr = mo, ms, upv, al = _mm256_set1_ps(1.0f), sum = _mm256_setzero_ps();
        {
            __m256 x1 = ninf, x2 = ninf, x3 = ninf;
            for (j = 0; j + 4 <= nk; j += 4) {
                mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j * lds));
                x1 = _mm256_max_ps(x1, _mm256_loadu_ps(s + (j + 1) * lds));
                x2 = _mm256_max_ps(x2, _mm256_loadu_ps(s + (j + 2) * lds));
                x3 = _mm256_max_ps(x3, _mm256_loadu_ps(s + (j + 3) * lds));
            }
            for (; j < nk; j++) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j * lds));
            mx = _mm256_max_ps(_mm256_max_ps(mx, x1), _mm256_max_ps(x2, x3));
        }
        upv = _mm256_cmp_ps(mx, _mm256_add_ps(mo, _mm256_set1_ps(FA__LAZY)), _CMP_GT_OQ);
        up = _mm256_movemask_ps(upv) != 0;
        if (up) mr = _mm256_blendv_ps(mo, mx, upv);
        ms = _mm256_blendv_ps(mr, _mm256_setzero_ps(), _mm256_cmp_ps(mr, ninf, _CMP_EQ_OQ));
        if (up) {
            al = _mm256_blendv_ps(al, fa__exp8(_mm256_sub_ps(mo, ms)), upv);
            for (t = 0; t < Dv; t++)
                _mm256_storeu_ps(O + t * ldo + v * 8, _mm256_mul_ps(_mm256_loadu_ps(O + t * ldo + v * 8), al));
        }
        for (j = 0; j < nk; j++) {
            __m256 e = fa__exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j * lds), ms));
            _mm256_storeu_ps(s + j * lds, e);
            sum = _mm256_add_ps(sum, e);
        }
        _mm256_storeu_ps(l + v * 8, _mm256_fmadd_ps(al, _mm256_loadu_ps(l + v * 8), sum));
        _mm256_storeu_ps(m + v * 8, mr);
        _mm256_storeu_ps(tmp + v * 8, al);
    }
}
#endif

/* Few query rows (decoding: one token, the heads of a GQA group): lanes along the query rows would
   sit mostly idle, so the AVX-512 path runs these tiles along the feature dim instead. Scores are
   dot products, 4 rows x 4 keys at a time, reduced 16 -> 1 vector, and written to the transposed St
   as usual (the online softmax is shared); the accumulator is row-major O [rows][Dv]. */
#ifdef FLASHATTN__X86
#define fa__unlo(a, b) _mm512_maskz_unpacklo_ps((__mmask16)0xFFFF, (a), (b))
#define fa__unhi(a, b) _mm512_maskz_unpackhi_ps((__mmask16)0xFFFF, (a), (b))
#define fa__unlo64(a, b) _mm512_castpd_ps(_mm512_maskz_unpacklo_pd((__mmask8)0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)))
#define fa__unhi64(a, b) _mm512_castpd_ps(_mm512_maskz_unpackhi_pd((__mmask8)0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)))
#define fa__sh128(a, b, i) _mm512_maskz_shuffle_f32x4((__mmask16)0xFFFF, (a), (b), (i))

/* s[r][j] = dot(Q[r], K[j]) for r < nr and j < nk (4 x 4 per pass), into S[j * lds + r]. */
#define FA__DZ(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0
#define FA__DFL(r, q) do { __m512 q_ = (q); c##r##0 = _mm512_fmadd_ps(q_, k0, c##r##0); \
                           c##r##1 = _mm512_fmadd_ps(q_, k1, c##r##1); c##r##2 = _mm512_fmadd_ps(q_, k2, c##r##2); \
                           c##r##3 = _mm512_fmadd_ps(q_, k3, c##r##3); } while (0)
#define FA__DF(r) FA__DFL(r, LD(qp[r] + t))
#define FA__DSTEP do { __m512 k0 = LD(kp[0] + t), k1 = LD(kp[1] + t), k2 = LD(kp[2] + t), k3 = LD(kp[3] + t); \
                       FA__DF(0); FA__DF(1); FA__DF(2); FA__DF(3); } while (0)
/* decoding streams K and V from memory once: FA__AHEAD keys ahead (section 0) */
#define FA__PREF(p, off) _mm_prefetch((const char *)((uintptr_t)(p) + (uintptr_t)(off) * sizeof(float)), _MM_HINT_T0)
#define FA__PAIR(a, b) _mm512_add_ps(fa__unlo(a, b), fa__unhi(a, b))
#define FA__QUAD(a, b) _mm512_add_ps(fa__unlo64(a, b), fa__unhi64(a, b))
#define FA__HALF(a, b) _mm512_add_ps(fa__sh128(a, b, 0x88), fa__sh128(a, b, 0xDD))

FA__AVX512 static void fa__dots_avx512(const float *Q, int nr, const float *K, int64_t ks, int nk, int D,
                                       float *S, int64_t lds)
{
    int j0, r0, a, r, t;
    __mmask16 tail = (__mmask16)((1u << (D & 15)) - 1u);
    for (j0 = 0; j0 < nk; j0 += 4) {
        const float *kp[4];
        for (a = 0; a < 4; a++) kp[a] = K + (int64_t)(j0 + a < nk ? j0 + a : nk - 1) * ks;
        for (r0 = 0; r0 < nr; r0 += 4) {
            const float *qp[4];
            float out[16];
            __m512 x, y;
            FA__DZ(0); FA__DZ(1); FA__DZ(2); FA__DZ(3);
            for (r = 0; r < 4; r++) qp[r] = Q + (int64_t)(r0 + r < nr ? r0 + r : nr - 1) * D;
#define LD(p) _mm512_loadu_ps(p)
            for (t = 0; t + 16 <= D; t += 16) {
                if (r0 == 0) { FA__PREF(kp[0], FA__AHEAD * ks + t); FA__PREF(kp[1], FA__AHEAD * ks + t);
                               FA__PREF(kp[2], FA__AHEAD * ks + t); FA__PREF(kp[3], FA__AHEAD * ks + t); }
                FA__DSTEP;
            }
#undef LD
#define LD(p) _mm512_maskz_loadu_ps(tail, p)
            if (tail) FA__DSTEP;
#undef LD
            /* 16 vectors -> one, lane 4r + a = sum of c_ra: pairs within 128-bit lanes, then across */
            x = FA__HALF(FA__QUAD(FA__PAIR(c00, c01), FA__PAIR(c02, c03)), FA__QUAD(FA__PAIR(c10, c11), FA__PAIR(c12, c13)));
            y = FA__HALF(FA__QUAD(FA__PAIR(c20, c21), FA__PAIR(c22, c23)), FA__QUAD(FA__PAIR(c30, c31), FA__PAIR(c32, c33)));
            _mm512_storeu_ps(out, FA__HALF(x, y));
            for (r = 0; r < 4 && r0 + r < nr; r++)
                for (a = 0; a < 4 && j0 + a < nk; a++) S[(j0 + a) * lds + r0 + r] = out[4 * r + a];
        }
    }
}

/* O[r][:] += sum_j P[j][r] V[j][:] for r < nr, row-major O with row stride Dv; a zero weight adds
   nothing even where V is NaN or inf (a hidden key). */
#define FA__PL(r) __m512 c##r##0 = _mm512_maskz_loadu_ps(lm0, O + (int64_t)(r0 + rr[r]) * Dv + t0), \
                         c##r##1 = _mm512_maskz_loadu_ps(lm1, O + (int64_t)(r0 + rr[r]) * Dv + t0 + 16), \
                         c##r##2 = _mm512_maskz_loadu_ps(lm2, O + (int64_t)(r0 + rr[r]) * Dv + t0 + 32), \
                         c##r##3 = _mm512_maskz_loadu_ps(lm3, O + (int64_t)(r0 + rr[r]) * Dv + t0 + 48)
#define FA__PF(r) do { __m512 p_ = _mm512_set1_ps(pr[rr[r]]); \
                       __mmask16 k_ = _mm512_cmp_ps_mask(p_, _mm512_setzero_ps(), _CMP_NEQ_UQ); c##r##0 = _mm512_mask3_fmadd_ps(p_, v0, c##r##0, k_); \
                       c##r##1 = _mm512_mask3_fmadd_ps(p_, v1, c##r##1, k_); c##r##2 = _mm512_mask3_fmadd_ps(p_, v2, c##r##2, k_); \
                       c##r##3 = _mm512_mask3_fmadd_ps(p_, v3, c##r##3, k_); } while (0)
#define FA__PS(r) do { if (r < rn) { float *o_ = O + (int64_t)(r0 + r) * Dv + t0; _mm512_mask_storeu_ps(o_, lm0, c##r##0); \
                       _mm512_mask_storeu_ps(o_ + 16, lm1, c##r##1); _mm512_mask_storeu_ps(o_ + 32, lm2, c##r##2); \
                       _mm512_mask_storeu_ps(o_ + 48, lm3, c##r##3); } } while (0)

static __mmask16 fa__lanes(int left) { return left >= 16 ? (__mmask16)0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0; }

FA__AVX512 static void fa__pv_rows_avx512(const float *P, int64_t lds, int nr, const float *V, int64_t vs, int nk,
                                          float *O, int Dv)
{
    int r0, t0, j, r;
    for (r0 = 0; r0 < nr; r0 += 4) {
        int rn = nr - r0 < 4 ? nr - r0 : 4, rr[4];
        for (r = 0; r < 4; r++) rr[r] = r < rn ? r : rn - 1;     /* rows past the end repeat, never stored */
        for (t0 = 0; t0 < Dv; t0 += 64) {
            __mmask16 lm0 = fa__lanes(Dv - t0), lm1 = fa__lanes(Dv - t0 - 16);
            __mmask16 lm2 = fa__lanes(Dv - t0 - 32), lm3 = fa__lanes(Dv - t0 - 48);
            FA__PL(0); FA__PL(1); FA__PL(2); FA__PL(3);
            for (j = 0; j < nk; j++) {
                const float *vr = V + (int64_t)j * vs + t0, *pr = P + (int64_t)j * lds + r0;
                __m512 v0 = _mm512_maskz_loadu_ps(lm0, vr), v1 = _mm512_maskz_loadu_ps(lm1, vr + 16);
                __m512 v2 = _mm512_maskz_loadu_ps(lm2, vr + 32), v3 = _mm512_maskz_loadu_ps(lm3, vr + 48);
                if (r0 == 0) { FA__PREF(vr, FA__AHEAD * vs); FA__PREF(vr, FA__AHEAD * vs + 16);
                               FA__PREF(vr, FA__AHEAD * vs + 32); FA__PREF(vr, FA__AHEAD * vs + 48); }
                FA__PF(0); FA__PF(1); FA__PF(2); FA__PF(3);
            }
            FA__PS(0); FA__PS(1); FA__PS(2); FA__PS(3);
        }
    }
}
#endif

#ifdef FLASHATTN__X86
/* The decode kernels on half-precision K and V read as stored (2 bytes an element: decoding is
   bound by those bytes), each 16 values widened in registers (vcvtph2ps, or bf16's shift) as they
   are loaded: the same products as fa__dots_avx512 and fa__pv_rows_avx512 on the converted values. */
FA__AVX512 static inline __m512 fa__ldh16(int f16, const uint16_t *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return f16 ? fa__cvtph16(h) : _mm512_castsi512_ps(fa__slli32(fa__cvtepu16(h), 16));
}

/* the first n < 16 values at p, zeros after them */
FA__AVX512 static inline __m512 fa__ldh16_tail(int f16, const uint16_t *p, int n)
{
    uint16_t b[16];
    memset(b, 0, sizeof b);
    memcpy(b, p, (size_t)n * 2);
    return fa__ldh16(f16, b);
}

#if FA__AHEAD_HALF > 0
#define FA__HPREF(p) _mm_prefetch((const char *)(p), FA__HPREF_HINT)
#else
#define FA__HPREF(p) ((void)(p))
#endif
/* The two half decode kernels' bodies, each written once and expanded twice: here with each 16
   stored values widened by fa__ldh16, and in the AVX512-BF16 section (fa__dots_h_bf16,
   fa__pv_rows_h_bf16) with each 32 bf16 widened by vpermw. An expansion defines FA__HW_T, FA__HW_LD(p)
   (what 32 stored values at p are read as: a pointer, or one 512-bit load), FA__HW_LO(w) and
   FA__HW_HI(w) (their first and last 16 as fp32; the body widens the last 16 after the first 16's
   products, so that the one load is kept, not repeated), FA__HW64(p, v0, v1, v2, v3) (the 64 at p,
   or fewer within Dv, zeros past it) and FA__HPF2(p) (a second prefetch, or nothing). Same lanes, same
   products, same sums in either: bitwise the same results. S = Q K^T as fa__dots_avx512 (32 values
   a step, then 16, then the tail), O += P V as fa__pv_rows_avx512. */
#define FA__DOTS_H_PREF do { if (r0 == 0) { \
        FA__HPREF(kp[0] + FA__AHEAD_HALF * ks + t); FA__HPREF(kp[1] + FA__AHEAD_HALF * ks + t); \
        FA__HPREF(kp[2] + FA__AHEAD_HALF * ks + t); FA__HPREF(kp[3] + FA__AHEAD_HALF * ks + t); \
        FA__HPF2(kp[0] + FA__AHEAD_HALF2 * ks + t); FA__HPF2(kp[1] + FA__AHEAD_HALF2 * ks + t); \
        FA__HPF2(kp[2] + FA__AHEAD_HALF2 * ks + t); FA__HPF2(kp[3] + FA__AHEAD_HALF2 * ks + t); } } while (0)
#define FA__DOTS_H_BODY \
    int j0, r0, a, r, t, f16 = dt == FA_F16, tl = D & 15; \
    const __mmask16 tail = (__mmask16)((1u << tl) - 1u); \
    for (j0 = 0; j0 < nk; j0 += 4) { \
        const uint16_t *kp[4]; \
        for (a = 0; a < 4; a++) kp[a] = K + (int64_t)(j0 + a < nk ? j0 + a : nk - 1) * ks; \
        for (r0 = 0; r0 < nr; r0 += 4) { \
            const float *qp[4]; \
            float out[16]; \
            __m512 x, y, k0, k1, k2, k3; \
            FA__DZ(0); FA__DZ(1); FA__DZ(2); FA__DZ(3); \
            for (r = 0; r < 4; r++) qp[r] = Q + (int64_t)(r0 + r < nr ? r0 + r : nr - 1) * D; \
            for (t = 0; t + 32 <= D; t += 32) { \
                const FA__HW_T w0 = FA__HW_LD(kp[0] + t); const FA__HW_T w1 = FA__HW_LD(kp[1] + t); \
                const FA__HW_T w2 = FA__HW_LD(kp[2] + t); const FA__HW_T w3 = FA__HW_LD(kp[3] + t); \
                FA__DOTS_H_PREF; \
                k0 = FA__HW_LO(w0); k1 = FA__HW_LO(w1); k2 = FA__HW_LO(w2); k3 = FA__HW_LO(w3); \
                FA__DFL(0, _mm512_loadu_ps(qp[0] + t)); FA__DFL(1, _mm512_loadu_ps(qp[1] + t)); \
                FA__DFL(2, _mm512_loadu_ps(qp[2] + t)); FA__DFL(3, _mm512_loadu_ps(qp[3] + t)); \
                k0 = FA__HW_HI(w0); k1 = FA__HW_HI(w1); k2 = FA__HW_HI(w2); k3 = FA__HW_HI(w3); \
                FA__DFL(0, _mm512_loadu_ps(qp[0] + t + 16)); FA__DFL(1, _mm512_loadu_ps(qp[1] + t + 16)); \
                FA__DFL(2, _mm512_loadu_ps(qp[2] + t + 16)); FA__DFL(3, _mm512_loadu_ps(qp[3] + t + 16)); \
            } \
            if (t + 16 <= D) { \
                k0 = fa__ldh16(f16, kp[0] + t); k1 = fa__ldh16(f16, kp[1] + t); k2 = fa__ldh16(f16, kp[2] + t); k3 = fa__ldh16(f16, kp[3] + t); \
                FA__DOTS_H_PREF; \
                FA__DFL(0, _mm512_loadu_ps(qp[0] + t)); FA__DFL(1, _mm512_loadu_ps(qp[1] + t)); \
                FA__DFL(2, _mm512_loadu_ps(qp[2] + t)); FA__DFL(3, _mm512_loadu_ps(qp[3] + t)); \
                t += 16; \
            } \
            if (tl) { \
                k0 = fa__ldh16_tail(f16, kp[0] + t, tl); k1 = fa__ldh16_tail(f16, kp[1] + t, tl); \
                k2 = fa__ldh16_tail(f16, kp[2] + t, tl); k3 = fa__ldh16_tail(f16, kp[3] + t, tl); \
                FA__DFL(0, _mm512_maskz_loadu_ps(tail, qp[0] + t)); FA__DFL(1, _mm512_maskz_loadu_ps(tail, qp[1] + t)); \
                FA__DFL(2, _mm512_maskz_loadu_ps(tail, qp[2] + t)); FA__DFL(3, _mm512_maskz_loadu_ps(tail, qp[3] + t)); \
            } \
            x = FA__HALF(FA__QUAD(FA__PAIR(c00, c01), FA__PAIR(c02, c03)), FA__QUAD(FA__PAIR(c10, c11), FA__PAIR(c12, c13))); \
            y = FA__HALF(FA__QUAD(FA__PAIR(c20, c21), FA__PAIR(c22, c23)), FA__QUAD(FA__PAIR(c30, c31), FA__PAIR(c32, c33))); \
            _mm512_storeu_ps(out, FA__HALF(x, y)); \
            for (r = 0; r < 4 && r0 + r < nr; r++) \
                for (a = 0; a < 4 && j0 + a < nk; a++) S[(j0 + a) * lds + r0 + r] = out[4 * r + a]; \
        } \
    }
#define FA__PV_H_BODY \
    int r0, t0, j, r; \
    for (r0 = 0; r0 < nr; r0 += 4) { \
        int rn = nr - r0 < 4 ? nr - r0 : 4, rr[4]; \
        for (r = 0; r < 4; r++) rr[r] = r < rn ? r : rn - 1; \
        for (t0 = 0; t0 < Dv; t0 += 64) { \
            const __mmask16 lm0 = fa__lanes(Dv - t0), lm1 = fa__lanes(Dv - t0 - 16); \
            const __mmask16 lm2 = fa__lanes(Dv - t0 - 32), lm3 = fa__lanes(Dv - t0 - 48); \
            FA__PL(0); FA__PL(1); FA__PL(2); FA__PL(3); \
            for (j = 0; j < nk; j++) { \
                const uint16_t *vr = V + (int64_t)j * vs + t0; \
                const float *pr = P + (int64_t)j * lds + r0; \
                __m512 v0, v1, v2, v3; \
                FA__HW64(vr, v0, v1, v2, v3); \
                if (r0 == 0) { FA__HPREF(vr + FA__AHEAD_HALF * vs); FA__HPREF(vr + FA__AHEAD_HALF * vs + 32); \
                               FA__HPF2(vr + FA__AHEAD_HALF2 * vs); FA__HPF2(vr + FA__AHEAD_HALF2 * vs + 32); } \
                FA__PF(0); FA__PF(1); FA__PF(2); FA__PF(3); \
            } \
            FA__PS(0); FA__PS(1); FA__PS(2); FA__PS(3); \
        } \
    }

/* the 16 values of V's row at t0 + 16 u, within Dv (zeros past it) */
#define FA__LDV(u) (Dv - t0 - 16 * (u) >= 16 ? fa__ldh16(f16, vr + 16 * (u)) : Dv - t0 - 16 * (u) > 0 ? \
                    fa__ldh16_tail(f16, vr + 16 * (u), Dv - t0 - 16 * (u)) : _mm512_setzero_ps())
#define FA__HW_T uint16_t *
#define FA__HW_LD(p) (p)
#define FA__HW_LO(w) fa__ldh16(f16, (w))
#define FA__HW_HI(w) fa__ldh16(f16, (w) + 16)
#define FA__HW64(p, a, b, c, d) ((a) = FA__LDV(0), (b) = FA__LDV(1), (c) = FA__LDV(2), (d) = FA__LDV(3))
#define FA__HPF2(p) ((void)0)
FA__AVX512 static void fa__dots_h_avx512(fa_dtype dt, const float *Q, int nr, const uint16_t *K, int64_t ks, int nk,
                                         int D, float *S, int64_t lds)
{
    FA__DOTS_H_BODY
}

FA__AVX512 static void fa__pv_rows_h_avx512(fa_dtype dt, const float *P, int64_t lds, int nr, const uint16_t *V, int64_t vs,
                                            int nk, float *O, int Dv)
{
    const int f16 = dt == FA_F16;   /* FA__LDV's widening (the bf16 expansion has none) */
    FA__PV_H_BODY
}
#undef FA__HW_T
#undef FA__HW_LD
#undef FA__HW_LO
#undef FA__HW_HI
#undef FA__HW64
#undef FA__HPF2
#undef FA__LDV
#endif

#ifdef FLASHATTN__X86
/* A 16 x 16 block transposed in registers: r[c] <- column c of rows r[0..15]. Interleave 32-bit
   then 64-bit pairs within 128-bit lanes, then move the 128-bit lanes (a 4 x 4 transpose). */
FA__AVX512 static inline __attribute__((always_inline)) void fa__t16_avx512(__m512 *r)
{
    __m512 t[16];
    int i, k;
    FA__UNROLL
    for (i = 0; i < 8; i++) { t[2 * i] = fa__unlo(r[2 * i], r[2 * i + 1]); t[2 * i + 1] = fa__unhi(r[2 * i], r[2 * i + 1]); }
    FA__UNROLL
    for (i = 0; i < 4; i++) {
        r[4 * i] = fa__unlo64(t[4 * i], t[4 * i + 2]); r[4 * i + 1] = fa__unhi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = fa__unlo64(t[4 * i + 1], t[4 * i + 3]); r[4 * i + 3] = fa__unhi64(t[4 * i + 1], t[4 * i + 3]);
    }
    FA__UNROLL
    for (k = 0; k < 4; k++) {
        __m512 x0 = fa__sh128(r[k], r[4 + k], 0x44), x1 = fa__sh128(r[k], r[4 + k], 0xEE);
        __m512 y0 = fa__sh128(r[8 + k], r[12 + k], 0x44), y1 = fa__sh128(r[8 + k], r[12 + k], 0xEE);
        t[k] = fa__sh128(x0, y0, 0x88); t[4 + k] = fa__sh128(x0, y0, 0xDD);
        t[8 + k] = fa__sh128(x1, y1, 0x88); t[12 + k] = fa__sh128(x1, y1, 0xDD);
    }
    FA__UNROLL
    for (i = 0; i < 16; i++) r[i] = t[i];
}

/* Qt[t][r0 + i] = scale * q_i[t] for 16 rows (q_i NULL: a padding lane, 0), all t < D. */
FA__AVX512 static void fa__pack16_avx512(const float *const *q, int D, float scale, float *Qt, int64_t ld)
{
    __m512 v[16], sc = _mm512_set1_ps(scale);
    int t0, i;
    for (t0 = 0; t0 < D; t0 += 16) {
        __mmask16 tm = fa__lanes(D - t0);
        FA__UNROLL
        for (i = 0; i < 16; i++)
            v[i] = q[i] ? _mm512_mul_ps(_mm512_maskz_loadu_ps(tm, q[i] + t0), sc) : _mm512_setzero_ps();
        fa__t16_avx512(v);
        for (i = 0; i < 16 && t0 + i < D; i++) _mm512_storeu_ps(Qt + (t0 + i) * ld, v[i]);
    }
}

/* o_i[t] = O[t][r0 + i] / l[r0 + i] for the rows with o_i not NULL (0 where l is 0, NaN stays). */
FA__AVX512 static void fa__unpack16_avx512(const float *O, int64_t ld, const float *l, int Dv, float *const *o)
{
    __m512 v[16], lv = _mm512_loadu_ps(l);
    __mmask16 keep = _mm512_cmp_ps_mask(lv, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    __m512 inv = _mm512_maskz_div_ps(keep, _mm512_set1_ps(1.0f), lv);
    int t0, i;
    for (t0 = 0; t0 < Dv; t0 += 16) {
        __mmask16 tm = fa__lanes(Dv - t0);
        FA__UNROLL
        for (i = 0; i < 16; i++)
            v[i] = t0 + i < Dv ? _mm512_maskz_mul_ps(keep, _mm512_loadu_ps(O + (t0 + i) * ld), inv) : _mm512_setzero_ps();
        fa__t16_avx512(v);
        FA__UNROLL
        for (i = 0; i < 16; i++)
            if (o[i]) _mm512_mask_storeu_ps(o[i] + t0, tm, v[i]);
    }
}

/* The lane passes: steps 3-5 of the rule (fa__alibi1, fa__bias1, fa__mask_run) on a transposed
   score tile S [nk][ld] whose lanes [0, 16 nvec) are query rows, for keys k0 .. k0 + nk, with each
   lane's inputs from fa__lanes_fill (the arrays start at the tile's first lane). */

/* ALiBi: s -= slope_r * |key - diag_r|, in int32 lanes (|key - diag| < 2^31, fa__lanes_fill). */
FA__AVX512 static void fa__alibi_lanes_avx512(float *S, int64_t ld, int nvec, int nk, int64_t k0, const int *diag,
                                              const float *slope)
{
    int jj, v;
    for (v = 0; v < nvec; v++) {
        const __m512i dg = _mm512_loadu_si512((const void *)(diag + 16 * v));
        const __m512 sl = _mm512_loadu_ps(slope + 16 * v);
        for (jj = 0; jj < nk; jj++) {
            float *p = S + (int64_t)jj * ld + 16 * v;
            __m512i dist = _mm512_sub_epi32(_mm512_set1_epi32((int)(k0 + jj)), dg);
            __m512 f = _mm512_maskz_cvtepi32_ps((__mmask16)0xFFFF, _mm512_maskz_abs_epi32((__mmask16)0xFFFF, dist));
            _mm512_storeu_ps(p, _mm512_sub_ps(_mm512_loadu_ps(p), _mm512_mul_ps(sl, f)));
        }
    }
}

/* The bias: s += bias_r(key), -INFINITY hiding the key whatever the score. Lane r's bias is at
   rows[r][key * ks]. Where a vector's 16 lanes share one row (a bias broadcast over the queries, as a
   padding mask is) it is one broadcast per key; where keys are contiguous (ks = 1), 16 x 16 blocks
   transposed in registers; other strides, lane by lane. */
FA__AVX512 static void fa__bias_lanes_avx512(float *S, int64_t ld, int nvec, int nk, int64_t k0,
                                             const float *const *rows, int64_t ks)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    int jj, v, u, same = 1;
#define FA__BIAS_ADD(p, x) do { __m512 x_ = (x); float *p_ = (p); _mm512_storeu_ps(p_, _mm512_mask_mov_ps( \
        _mm512_add_ps(_mm512_loadu_ps(p_), x_), _mm512_cmp_ps_mask(x_, ninf, _CMP_EQ_OQ), x_)); } while (0)
    for (u = 1; u < 16 * nvec; u++) same &= rows[u] == rows[0];
    if (same) {
        const float *br = rows[0] + k0 * ks;
        for (jj = 0; jj < nk; jj++) {
            __m512 x = _mm512_set1_ps(br[(int64_t)jj * ks]);
            for (v = 0; v < nvec; v++) FA__BIAS_ADD(S + (int64_t)jj * ld + 16 * v, x);
        }
        return;
    }
    for (v = 0; v < nvec; v++) {
        const float *row[16];
        for (u = 0; u < 16; u++) row[u] = rows[16 * v + u] + k0 * ks;
        if (ks != 1) {
            for (u = 0; u < 16; u++)
                for (jj = 0; jj < nk; jj++) {
                    float *p = S + (int64_t)jj * ld + 16 * v + u;
                    *p = fa__bias1(*p, row[u][(int64_t)jj * ks]);
                }
            continue;
        }
        for (jj = 0; jj < nk; jj += 16) {
            __m512 x[16];
            __mmask16 km = fa__lanes(nk - jj);
            for (u = 0; u < 16; u++) {
                x[u] = _mm512_maskz_loadu_ps(km, row[u] + jj);
                FA__PREF(row[u], jj + nk);          /* the next block's bias (rows far apart) */
            }
            fa__t16_avx512(x);
            for (u = 0; u < 16 && jj + u < nk; u++) FA__BIAS_ADD(S + (int64_t)(jj + u) * ld + 16 * v, x[u]);
        }
    }
#undef FA__BIAS_ADD
}

/* The position rule's result: -INFINITY where the key is outside the lane's [lo_r, hi_r). */
FA__AVX512 static void fa__mask_lanes_avx512(float *S, int64_t ld, int nvec, int nk, int64_t k0, const int *lo,
                                             const int *hi)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    int jj, v;
    for (v = 0; v < nvec; v++) {
        const __m512i a = _mm512_loadu_si512((const void *)(lo + 16 * v)), e = _mm512_loadu_si512((const void *)(hi + 16 * v));
        for (jj = 0; jj < nk; jj++) {
            __m512i key = _mm512_set1_epi32((int)(k0 + jj));
            __mmask16 hide = _mm512_cmp_epi32_mask(key, a, _MM_CMPINT_LT) | _mm512_cmp_epi32_mask(key, e, _MM_CMPINT_NLT);
            if (hide) _mm512_mask_storeu_ps(S + (int64_t)jj * ld + 16 * v, hide, ninf);
        }
    }
}
#endif

static void fa__online_c(float *S, int64_t lds, int nk, int nv, float *m, float *l,
                         float *O, int64_t ldo, int Dv, float *tmp)
{
    int r, j, t, nl = nv * 16;
    for (r = 0; r < nl; r++) {
        float mx = m[r], mr = m[r], ms, al = 1.0f, sum = 0.0f;
        for (j = 0; j < nk; j++) mx = fa__row_max_c(S + j * lds + r, 1, mx);
        if (fa__lazy_moves(m[r], mx)) {       /* per row here: the lanes are rows one at a time */
            mr = mx;
            al = m[r] == -INFINITY ? 0.0f : fa__expf(m[r] - mr);
            for (t = 0; t < Dv; t++) O[t * ldo + r] *= al;
        }
        ms = fa__online_ref(mr);
        for (j = 0; j < nk; j++) {
            float *sj = S + j * lds + r;
            *sj = *sj == -INFINITY ? 0.0f : fa__expf(*sj - ms);
            sum += *sj;
        }
        l[r] = al * l[r] + sum;
        m[r] = mr;
        tmp[r] = al;
    }
}

/* The lane passes lane by lane (the portable and AVX2 tables): fa__alibi1, fa__bias1, fa__mask_run. */
static void fa__alibi_lanes_c(float *S, int64_t ld, int nvec, int nk, int64_t k0, const int *diag, const float *slope)
{
    int r, jj;
    for (r = 0; r < 16 * nvec; r++)
        for (jj = 0; jj < nk; jj++) S[jj * ld + r] = fa__alibi1(S[jj * ld + r], slope[r], fa__adist(k0 + jj - diag[r]));
}

static void fa__bias_lanes_c(float *S, int64_t ld, int nvec, int nk, int64_t k0, const float *const *rows, int64_t ks)
{
    int r, jj;
    for (r = 0; r < 16 * nvec; r++)
        for (jj = 0; jj < nk; jj++) S[jj * ld + r] = fa__bias1(S[jj * ld + r], rows[r][(k0 + jj) * ks]);
}

static void fa__mask_lanes_c(float *S, int64_t ld, int nvec, int nk, int64_t k0, const int *lo, const int *hi)
{
    int r;
    for (r = 0; r < 16 * nvec; r++) fa__mask_run(S + r, ld, nk, k0, lo[r], hi[r]);
}

/* 16 lanes the portable way: Qt[t][i] = scale * q_i[t] (q_i NULL: a padding lane, 0), and
   o_i[t] = O[t][i] / l[i] for the rows with o_i not NULL (0 where l is 0, NaN stays). */
static void fa__pack16_c(const float *const *q, int D, float scale, float *Qt, int64_t ld)
{
    int i, t;
    for (i = 0; i < 16; i++)
        for (t = 0; t < D; t++) Qt[t * ld + i] = q[i] ? q[i][t] * scale : 0.0f;
}

static void fa__unpack16_c(const float *O, int64_t ld, const float *l, int Dv, float *const *o)
{
    int i, t;
    for (i = 0; i < 16; i++) {
        float lr = l[i], inv;
        if (!o[i]) continue;
        if (lr > 0.0f || lr != lr) {
            inv = 1.0f / lr;
            for (t = 0; t < Dv; t++) o[i][t] = O[t * ld + i] * inv;
        } else {
            for (t = 0; t < Dv; t++) o[i][t] = 0.0f;
        }
    }
}

/* ---- Half-precision storage: FA_F16 and FA_BF16 to and from fp32 ------------------------------
   The one definition of the conversions (round to nearest even; a NaN stays a NaN, quieted; fp16's
   subnormals, infinities and overflow to infinity exact), and per ISA the same on vectors: F16C /
   AVX-512F's vcvtph2ps and vcvtps2ph for fp16 (the same results as the C), bf16 as a 16-bit shift
   in and the same integer rounding out. Storage is 2 bytes either way (fa__esize). */
static float fa__f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, u;
    float f;
    if (e == 0) {                                    /* zero or subnormal: m 2^-24, exact */
        f = (float)m * 5.9604644775390625e-8f;
        return s ? -f : f;
    }
    u = e == 0x1F ? s | 0x7F800000u | (m << 13) : s | ((e + 112u) << 23) | (m << 13);
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t fa__f32_to_f16(float f)
{
    uint32_t u, s, a, m, r, rem, half;
    int sh;
    memcpy(&u, &f, sizeof u);
    s = (u >> 16) & 0x8000u;
    a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(s | 0x7E00u | ((a >> 13) & 0x3FFu));   /* NaN, quieted */
    if (a >= 0x477FF000u) return (uint16_t)(s | 0x7C00u);        /* 65520 and up (and inf): inf */
    if (a >= 0x38800000u) {                                        /* a normal fp16 (>= 2^-14) */
        r = a - 0x38000000u;
        return (uint16_t)(s | ((r + 0x0FFFu + ((r >> 13) & 1u)) >> 13));   /* a carry moves the exponent up */
    }
    /* an fp16 subnormal (or 0): round(|f| 2^24) = m 2^-(126 - e), e the fp32 exponent */
    sh = 126 - (int)(a >> 23);
    if (a < 0x00800000u || sh > 24) return (uint16_t)s;           /* below 2^-25: 0 */
    m = (a & 0x7FFFFFu) | 0x800000u;
    r = m >> sh;
    rem = m & ((1u << sh) - 1u);
    half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(s | r);
}

static float fa__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t fa__f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);   /* NaN, quieted */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* dst[0..n) = the n values of storage type dt at src, as fp32; and back (dt FA_F16 or FA_BF16) */
static void fa__h2f_c(fa_dtype dt, const void *src, float *dst, int n)
{
    const uint16_t *h = (const uint16_t *)src;
    int t;
    if (dt == FA_F16) for (t = 0; t < n; t++) dst[t] = fa__f16_to_f32(h[t]);
    else for (t = 0; t < n; t++) dst[t] = fa__bf16_to_f32(h[t]);
}

static void fa__f2h_c(fa_dtype dt, const float *src, void *dst, int n)
{
    uint16_t *h = (uint16_t *)dst;
    int t;
    if (dt == FA_F16) for (t = 0; t < n; t++) h[t] = fa__f32_to_f16(src[t]);
    else for (t = 0; t < n; t++) h[t] = fa__f32_to_bf16(src[t]);
}

#ifdef FLASHATTN__X86
FA__AVX512 static void fa__h2f_avx512(fa_dtype dt, const void *src, float *dst, int n)
{
    const uint16_t *h = (const uint16_t *)src;
    int t;
    if (dt == FA_F16)
        for (t = 0; t + 16 <= n; t += 16) _mm512_storeu_ps(dst + t, fa__cvtph16(_mm256_loadu_si256((const __m256i *)(h + t))));
    else
        for (t = 0; t + 16 <= n; t += 16)
            _mm512_storeu_si512((void *)(dst + t), fa__slli32(fa__cvtepu16(_mm256_loadu_si256((const __m256i *)(h + t))), 16));
    if (t < n) fa__h2f_c(dt, h + t, dst + t, n - t);
}

/* x rounded to bf16 on 16 lanes, fa__f32_to_bf16's rule (to nearest even, NaN quieted): the bf16 in
   each lane's high 16 bits (its low 16 bits are not the result) */
FA__AVX512 static inline __attribute__((always_inline)) __m512i fa__bf16_hi_avx512(__m512 x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(fa__srli32(u, 16), _mm512_set1_epi32(1))));
    return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
}

FA__AVX512 static void fa__f2h_avx512(fa_dtype dt, const float *src, void *dst, int n)
{
    uint16_t *h = (uint16_t *)dst;
    int t;
    if (dt == FA_F16)
        for (t = 0; t + 16 <= n; t += 16)
            _mm256_storeu_si256((__m256i *)(h + t), _mm512_maskz_cvtps_ph((__mmask16)0xFFFF, _mm512_loadu_ps(src + t), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    else
        for (t = 0; t + 16 <= n; t += 16)
            _mm256_storeu_si256((__m256i *)(h + t), fa__cvtepi32_16(fa__srli32(fa__bf16_hi_avx512(_mm512_loadu_ps(src + t)), 16)));
    if (t < n) fa__f2h_c(dt, src + t, h + t, n - t);
}

/* fa__unpack16_avx512 into bf16 storage: o_i[t] = O[t][r0 + i] / l[r0 + i] rounded to bf16 (the
   bits of fa__unpack16_avx512 and then fa__f2h_avx512) for the rows with o_i not NULL, Dv even. Two
   features' bf16 make one 32-bit word, so one 16 x 16 transpose takes 32 features to the rows, and
   no fp32 row is stored between (a 480-row tile at Dv = 128 out of L2: 19.7K TSC ticks against 29K on
   the development machine's AMX CPU). */
FA__AVX512 static void fa__unpack16_bf16_avx512(const float *O, int64_t ld, const float *l, int Dv, uint16_t *const *o)
{
    const __m512i himask = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 v[16], lv = _mm512_loadu_ps(l);
    __mmask16 keep = _mm512_cmp_ps_mask(lv, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    __m512 inv = _mm512_maskz_div_ps(keep, _mm512_set1_ps(1.0f), lv);
    int t0, k, i;
    for (t0 = 0; t0 < Dv; t0 += 32) {
        const int nw = (Dv - t0) / 2;       /* words (feature pairs) of this group */
        const __mmask16 wm = fa__lanes(nw);
        FA__UNROLL
        for (k = 0; k < 16; k++)
            if (k < nw) {
                __m512i a = fa__bf16_hi_avx512(_mm512_maskz_mul_ps(keep, _mm512_loadu_ps(O + (t0 + 2 * k) * ld), inv));
                __m512i b = fa__bf16_hi_avx512(_mm512_maskz_mul_ps(keep, _mm512_loadu_ps(O + (t0 + 2 * k + 1) * ld), inv));
                v[k] = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(b, himask, fa__srli32(a, 16), 0xEA));   /* (b & hi) | a >> 16 */
            } else {
                v[k] = _mm512_setzero_ps();
            }
        fa__t16_avx512(v);
        FA__UNROLL
        for (i = 0; i < 16; i++)
            if (o[i]) _mm512_mask_storeu_epi32((void *)(o[i] + t0), wm, _mm512_castps_si512(v[i]));
    }
}

#define FA__AVX2C __attribute__((target("avx2,fma,f16c")))
FA__AVX2C static void fa__h2f_avx2(fa_dtype dt, const void *src, float *dst, int n)
{
    const uint16_t *h = (const uint16_t *)src;
    int t;
    if (dt == FA_F16)
        for (t = 0; t + 8 <= n; t += 8) _mm256_storeu_ps(dst + t, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + t))));
    else
        for (t = 0; t + 8 <= n; t += 8)
            _mm256_storeu_si256((__m256i *)(dst + t), _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + t))), 16));
    if (t < n) fa__h2f_c(dt, h + t, dst + t, n - t);
}

FA__AVX2C static void fa__f2h_avx2(fa_dtype dt, const float *src, void *dst, int n)
{
    uint16_t *h = (uint16_t *)dst;
    int t;
    if (dt == FA_F16)
        for (t = 0; t + 8 <= n; t += 8)
            _mm_storeu_si128((__m128i *)(h + t), _mm256_cvtps_ph(_mm256_loadu_ps(src + t), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    else
        for (t = 0; t + 8 <= n; t += 8) {
            __m256 x = _mm256_loadu_ps(src + t);
            __m256i u = _mm256_castps_si256(x), r;
            r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
            r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_or_si256(u, _mm256_set1_epi32(0x400000))),
                                                     _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
            r = _mm256_srli_epi32(r, 16);
            r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
            _mm_storeu_si128((__m128i *)(h + t), _mm256_castsi256_si128(r));
        }
    if (t < n) fa__f2h_c(dt, src + t, h + t, n - t);
}
#endif

/* ---- bf16 storage on AVX512-BF16 (vdpbf16ps) ------------------------------------------------
   Where the CPU has AVX512-BF16 (Cooper Lake, Sapphire Rapids and later, AMD Zen 4 and later), bf16
   requests with an even head_dim run both products of the tiled forward on vdpbf16ps, which
   multiplies pairs of bf16 and adds them into fp32 lanes: a 32-bit word holds two bf16 of the
   reduction axis. Scores pair features: K's rows are read straight from storage (a word is two
   consecutive features), Q is transposed into words once per tile (Qp [D/2][ld], unscaled: the scale
   multiplies the fp32 sums). P V pairs keys: each K/V block's V is packed once per tile into Vp
   [ceil(nk/2)][Dv] (words of keys 2x, 2x + 1), and each panel's probabilities, rounded to bf16,
   into Pp [ceil(nk/2)][ld] (as FlashAttention does on GPUs); the normaliser l sums the fp32
   probabilities. A V block holding a NaN or inf (hidden or not) goes through the fp32 kernels
   instead (converted), so that a zero weight adds nothing. Accumulation is fp32 throughout. */
#if defined(FLASHATTN__X86) && !defined(FLASHATTN_NO_AVX512BF16)
#define FA__BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define fa__dpbf16(c, a, b) _mm512_dpbf16_ps((c), (__m512bh)(a), (__m512bh)(b))

static inline uint32_t fa__word(const unsigned char *p)
{
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

/* The bf16 decode kernels of the AVX512-BF16 and AMX tables: the half decode bodies
   (FA__DOTS_H_BODY, FA__PV_H_BODY) with each 32 stored values widened by one 512-bit load and two
   vpermw (a word to the top of its own 32-bit lane, zeros below) instead of two loads, two vpmovzxwd
   and two vpslld: bitwise fa__dots_h_avx512's and fa__pv_rows_h_avx512's results; fp16 and a Dv not
   a multiple of 64 go to those kernels. They also prefetch K/V FA__AHEAD_HALF2 keys ahead into the
   L2, beside FA__AHEAD_HALF's prefetcht0, and fa__tiled_item a chunk's first FA__HSTART keys
   (RESULTS, issue 16, "Xeon bf16 decode at 2 threads (cpuh)": with both, 16 threads 1.09-1.13x
   main, 2 threads level within the run's noise). */
#if FA__AHEAD_HALF2 > 0
#define FA__HPREF2(p) _mm_prefetch((const char *)(p), _MM_HINT_T2)
#else
#define FA__HPREF2(p) ((void)(p))
#endif
#define FA__BW_LO _mm512_set_epi32(15 << 16, 14 << 16, 13 << 16, 12 << 16, 11 << 16, 10 << 16, 9 << 16, 8 << 16, \
                                   7 << 16, 6 << 16, 5 << 16, 4 << 16, 3 << 16, 2 << 16, 1 << 16, 0)
#define fa__bw_lo(x) _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16((__mmask32)0xAAAAAAAAu, ilo, (x)))
#define fa__bw_hi(x) _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16((__mmask32)0xAAAAAAAAu, ihi, (x)))
#define FA__HW_T __m512i
#define FA__HW_LD(p) _mm512_loadu_si512((const void *)(p))
#define FA__HW_LO(w) fa__bw_lo(w)
#define FA__HW_HI(w) fa__bw_hi(w)
#define FA__HW64(p, a, b, c, d) do { const __m512i wa_ = FA__HW_LD(p), wb_ = FA__HW_LD((p) + 32); \
                                     (a) = fa__bw_lo(wa_); (b) = fa__bw_hi(wa_); (c) = fa__bw_lo(wb_); (d) = fa__bw_hi(wb_); } while (0)
#define FA__HPF2(p) FA__HPREF2(p)
FA__BF16 static void fa__dots_h_bf16(fa_dtype dt, const float *Q, int nr, const uint16_t *K, int64_t ks, int nk,
                                     int D, float *S, int64_t lds)
{
    const __m512i ilo = FA__BW_LO, ihi = _mm512_add_epi32(ilo, _mm512_set1_epi32(16 << 16));
    if (dt != FA_BF16) { fa__dots_h_avx512(dt, Q, nr, K, ks, nk, D, S, lds); return; }
    {
        FA__DOTS_H_BODY
    }
}

FA__BF16 static void fa__pv_rows_h_bf16(fa_dtype dt, const float *P, int64_t lds, int nr, const uint16_t *V, int64_t vs,
                                        int nk, float *O, int Dv)
{
    const __m512i ilo = FA__BW_LO, ihi = _mm512_add_epi32(ilo, _mm512_set1_epi32(16 << 16));
    if (dt != FA_BF16 || Dv % 64) { fa__pv_rows_h_avx512(dt, P, lds, nr, V, vs, nk, O, Dv); return; }
    {
        FA__PV_H_BODY
    }
}
#undef FA__HW_T
#undef FA__HW_LD
#undef FA__HW_LO
#undef FA__HW_HI
#undef FA__HW64
#undef FA__HPF2
#undef FA__DOTS_H_BODY
#undef FA__PV_H_BODY
#undef FA__DOTS_H_PREF
#undef fa__bw_lo
#undef fa__bw_hi
#undef FA__BW_LO

#define FA__BZ(a) __m512 c##a##0 = _mm512_setzero_ps(), c##a##1 = c##a##0, c##a##2 = c##a##0
#define FA__BL(a) __m512 c##a##0 = _mm512_loadu_ps(C + ra[a] * ldc), c##a##1 = _mm512_loadu_ps(C + ra[a] * ldc + 16), \
                         c##a##2 = _mm512_loadu_ps(C + ra[a] * ldc + 32)
#define FA__BF(a) do { __m512i w_ = _mm512_set1_epi32((int)fa__word(pa[a] + off)); c##a##0 = fa__dpbf16(c##a##0, w_, b0); \
                       c##a##1 = fa__dpbf16(c##a##1, w_, b1); c##a##2 = fa__dpbf16(c##a##2, w_, b2); } while (0)
#define FA__BS(a) do { if (a < na - a0) { _mm512_storeu_ps(C + (a0 + a) * ldc, _mm512_mul_ps(c##a##0, sc)); \
                       _mm512_storeu_ps(C + (a0 + a) * ldc + 16, _mm512_mul_ps(c##a##1, sc)); \
                       _mm512_storeu_ps(C + (a0 + a) * ldc + 32, _mm512_mul_ps(c##a##2, sc)); } } while (0)

/* C[a][:] (+)= s * sum_x A(a, x) . B[x][:] over nv 16-lane vectors, A(a, x) the bf16 pair (word)
   at A + a sa + x sx bytes, B's rows of words ldb words apart: acc 0 C = scale * sum, acc 1
   C += sum (scale unused). Register blocks of 8 A-rows x 48 lanes, as fa__gemm_avx512. */
FA__BF16 static void fa__gemm_bf16_avx512(const unsigned char *A, int64_t sa, int64_t sx, int na, int nx,
                                          const uint32_t *B, int64_t ldb, float *C0, int64_t ldc, int nv, int acc,
                                          float scale, fa__pf *pf)
{
    int a0, x, a, vp, ve, v;
    const __m512 sc = _mm512_set1_ps(acc ? 1.0f : scale);
    for (vp = 0; vp < nv; vp = ve) {
        ve = nv - vp >= 3 ? vp + 3 : nv;
        for (a0 = 0; a0 < na; a0 += 8) {
            const unsigned char *pa[8];
            int64_t ra[8], off = 0;
            for (a = 0; a < 8; a++) {
                ra[a] = a0 + a < na ? a0 + a : na - 1;
                pa[a] = A + ra[a] * sa;
            }
            if (ve - vp == 3) {
                const uint32_t *b = B + vp * 16;
                float *C = C0 + vp * 16;
                if (acc) {
                    FA__X8(FA__BL);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512i b0 = _mm512_loadu_si512((const void *)b), b1 = _mm512_loadu_si512((const void *)(b + 16));
                        __m512i b2 = _mm512_loadu_si512((const void *)(b + 32));
                        FA__PFX(x);
                        FA__X8(FA__BF);
                    }
                    FA__X8(FA__BS);
                } else {
                    FA__X8(FA__BZ);
                    for (x = 0; x < nx; x++, off += sx, b += ldb) {
                        __m512i b0 = _mm512_loadu_si512((const void *)b), b1 = _mm512_loadu_si512((const void *)(b + 16));
                        __m512i b2 = _mm512_loadu_si512((const void *)(b + 32));
                        FA__PFX(x);
                        FA__X8(FA__BF);
                    }
                    FA__X8(FA__BS);
                }
                continue;
            }
            for (v = vp; v < ve; v++) {      /* 1 or 2 vectors left: one at a time */
                const uint32_t *b = B + v * 16;
                float *C = C0 + v * 16;
                __m512 c[8];
                for (a = 0; a < 8; a++) c[a] = acc ? _mm512_loadu_ps(C + ra[a] * ldc) : _mm512_setzero_ps();
                for (x = 0, off = 0; x < nx; x++, off += sx, b += ldb) {
                    __m512i b0 = _mm512_loadu_si512((const void *)b);
                    FA__UNROLL
                    for (a = 0; a < 8; a++) c[a] = fa__dpbf16(c[a], _mm512_set1_epi32((int)fa__word(pa[a] + off)), b0);
                }
                for (a = 0; a < 8 && a0 + a < na; a++) _mm512_storeu_ps(C + (a0 + a) * ldc, _mm512_mul_ps(c[a], sc));
            }
        }
    }
}

/* Qp[x][r0 + i] = word x (features 2x, 2x + 1) of q_i for 16 rows (q_i NULL: a padding lane, 0),
   x < Dp = D / 2. */
FA__BF16 static void fa__qpack_bf16(const uint16_t *const *q, int Dp, uint32_t *Qp, int64_t ld)
{
    __m512 v[16];
    int x0, i;
    for (x0 = 0; x0 < Dp; x0 += 16) {
        __mmask16 tm = fa__lanes(Dp - x0);
        FA__UNROLL
        for (i = 0; i < 16; i++)
            v[i] = q[i] ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(tm, (const void *)(q[i] + 2 * x0))) : _mm512_setzero_ps();
        fa__t16_avx512(v);
        for (i = 0; i < 16 && x0 + i < Dp; i++) _mm512_storeu_ps((float *)(Qp + (x0 + i) * ld), v[i]);
    }
}

/* Vp[x][t] = (V[2x][t], V[2x + 1][t]) for the nk keys of a block (a missing key 2x + 1 is 0);
   returns 1 when every value is finite. */
FA__BF16 static int fa__vpack_bf16(const uint16_t *V, int64_t vs, int nk, int Dv, uint32_t *Vp)
{
    const __m512i ex = _mm512_set1_epi32(0x7F80), exh = _mm512_set1_epi32(0x7F800000);
    __mmask16 bad = 0;
    int x, t;
    for (x = 0; 2 * x < nk; x++) {
        const uint16_t *v0 = V + (int64_t)(2 * x) * vs, *v1 = v0 + vs;
        int two = 2 * x + 1 < nk;
        for (t = 0; t < Dv; t += 16) {
            __mmask16 m = fa__lanes(Dv - t);
            __m512i lo = fa__cvtepu16(_mm256_maskz_loadu_epi16(m, (const void *)(v0 + t)));
            __m512i hi = two ? fa__slli32(fa__cvtepu16(_mm256_maskz_loadu_epi16(m, (const void *)(v1 + t))), 16)
                             : _mm512_setzero_si512();
            __m512i w = _mm512_or_si512(lo, hi);
            bad |= _mm512_mask_cmpeq_epi32_mask(m, _mm512_and_si512(w, ex), ex) |
                   _mm512_mask_cmpeq_epi32_mask(m, _mm512_and_si512(w, exh), exh);
            _mm512_mask_storeu_epi32((void *)(Vp + (int64_t)x * Dv + t), m, w);
        }
    }
    return bad == 0;
}

/* Pp[x][u] = (P[2x][u], P[2x + 1][u]) rounded to bf16, for the nk keys of a score panel of nvec
   vectors (S and Pp at the panel's first lane; a missing key 2x + 1 is 0). */
FA__BF16 static void fa__ppack_bf16(const float *S, int64_t ld, int nk, int nvec, uint32_t *Pp)
{
    int x, v;
    for (x = 0; 2 * x < nk; x++)
        for (v = 0; v < nvec; v++) {
            __m512i lo = fa__cvtepu16((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(S + (int64_t)(2 * x) * ld + 16 * v)));
            __m512i hi = 2 * x + 1 < nk ? fa__slli32(fa__cvtepu16((__m256i)_mm512_cvtneps_pbh(
                                              _mm512_loadu_ps(S + (int64_t)(2 * x + 1) * ld + 16 * v))), 16)
                                        : _mm512_setzero_si512();
            _mm512_storeu_si512((void *)(Pp + (int64_t)x * ld + 16 * v), _mm512_or_si512(lo, hi));
        }
}
#endif

/* ---- bf16 storage on AMX-BF16 tiles (Sapphire Rapids and later) --------------------------------
   The same two products as the vdpbf16ps kernels above, on the tile unit: tdpbf16ps multiplies a
   16 x 32 bf16 tile by a 32 x 16 one (in pairs of rows, the layout of Qp and Pp) into a 16 x 16
   fp32 tile. The tiled loop walks a tile's lanes in panels of 32 (two lane vectors), each panel's
   Qp, Ot, scores and probabilities in rows of 32 lanes (128 bytes) of their own, and every product
   is a 2 x 2 block of C tiles (0-3) from two A tiles (4-5) and two B tiles (6-7): four independent
   accumulators, one tile load per tdpbf16ps.
   Scores: C = St [16 keys][16 lanes], A = 16 K rows as stored (32 features, 64 bytes), B = Qp's
   words [16 pairs][16 lanes]. P V: C = Ot [16 features][16 lanes], A = Vt [16 features][16 key
   pairs] (V's words transposed per block), B = Pp [16 key pairs][16 lanes]. Both are anchored at
   the block's first key (its absolute position, fa__tile_blocks), whatever part of the block a tile
   sees: key groups of 16 and key pairs sit at the same places in every tiling, so a row's bits do
   not depend on its tile. Fewer than 16 keys left at the end of the keys, and features past the
   last 16, go through fa__gemm_bf16_avx512 (the same words). The tiles are configured at the start
   of each work item of fa_tiled (and of fa_tiled_backward, whose five products run on fa__mm_amx
   below) and released at its end.
   Linux hands the tile state to a process only after it asks (arch_prctl(ARCH_REQ_XCOMP_PERM,
   XFEATURE_XTILEDATA)): fa_tiled asks at each call that would use the tiles (a system call; the
   kernel keeps the permission for the whole process, granted once), and where the kernel refuses
   (an old kernel, a seccomp filter) it runs the vdpbf16ps kernels instead. Needs head_dim % 32 == 0.
   FA__AMX_EMULATE (tests only, not an option): the tile instructions in C on thread-local tiles, so
   that a CPU without AMX runs this path's data movement (results within bf16's tolerance, not the
   tile unit's bits). FA__AMX_VT_TEST_OWN (tests only): every other shared Vt block is taken as being
   made by another tile, so the tiles make their own copies of it (fa__tiled_vt_get's path that
   otherwise runs only when threads collide). */
/* one product on the tiles, run a 2 x 2 block of C tiles at a time (fa__amx_group): its operands,
   and the next block (m, n) */
typedef struct fa__amx_job {
    const unsigned char *A;
    const uint32_t *B;
    float *C;
    int64_t lda, ldb, ldc;
    int M, Kd, N, acc, m, n;
} fa__amx_job;

#if defined(FLASHATTN__X86) && !defined(FLASHATTN_NO_AVX512BF16) && !defined(FLASHATTN_NO_AMX) && defined(__linux__) && \
    defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11) || (defined(__clang__) && __clang_major__ >= 12))
#define FA__HAVE_AMX 1
#define FA__AMX_LD 32                   /* lanes in a panel's rows */
#ifdef FA__AMX_EMULATE
#define FA__AMXT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512dq")))
static __thread unsigned char fa__emu_tile[8][1024];
static void fa__emu_load(int t, const void *p, long s)
{
    int r;
    for (r = 0; r < 16; r++) memcpy(fa__emu_tile[t] + 64 * r, (const unsigned char *)p + r * s, 64);
}
static void fa__emu_store(int t, void *p, long s)
{
    int r;
    for (r = 0; r < 16; r++) memcpy((unsigned char *)p + r * s, fa__emu_tile[t] + 64 * r, 64);
}
static void fa__emu_dp(int c, int a, int b)
{
    float C[16][16];
    uint16_t A[16][32], B[16][32];
    int i, n, k;
    memcpy(C, fa__emu_tile[c], sizeof C); memcpy(A, fa__emu_tile[a], sizeof A); memcpy(B, fa__emu_tile[b], sizeof B);
    for (i = 0; i < 16; i++)
        for (n = 0; n < 16; n++)
            for (k = 0; k < 16; k++)
                C[i][n] += fa__bf16_to_f32(A[i][2 * k]) * fa__bf16_to_f32(B[k][2 * n]) +
                           fa__bf16_to_f32(A[i][2 * k + 1]) * fa__bf16_to_f32(B[k][2 * n + 1]);
    memcpy(fa__emu_tile[c], C, sizeof C);
}
#define FA__TLOAD(t, p, s) fa__emu_load(t, p, s)
#define FA__TSTORE(t, p, s) fa__emu_store(t, p, s)
#define FA__TZERO(t) memset(fa__emu_tile[t], 0, 1024)
#define FA__TDP(c, a, b) fa__emu_dp(c, a, b)
#else
#define FA__AMXT __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx512dq")))
#define FA__TLOAD(t, p, s) _tile_loadd(t, p, s)
#define FA__TSTORE(t, p, s) _tile_stored(t, p, s)
#define FA__TZERO(t) _tile_zero(t)
#define FA__TDP(c, a, b) _tile_dpbf16ps(c, a, b)
#endif

/* AMX-TILE and AMX-BF16 (leaf 7 EDX bits 24, 22) with the tile state enabled by the OS (XCR0 bits
   17, 18), and AVX512DQ (leaf 7 EBX bit 17: the online step's vreduceps; every AMX CPU has it) */
static int fa__cpu_amx(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b >> 17 & 1u)) return 0;
#ifdef FA__AMX_EMULATE
    return fa__cpu_avx512bf16();
#else
    unsigned lo, hi;
    if (!(d >> 24 & 1u) || !(d >> 22 & 1u)) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1u)) return 0;      /* OSXSAVE */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((((uint64_t)hi << 32) | lo) & 0x60000u) == 0x60000u;
#endif
}

/* The process's permission to use the tile data (granted once, kept by the kernel): 1 if granted. */
static int fa__amx_permit(void)
{
#ifdef FA__AMX_EMULATE
    return 1;
#else
    long r;     /* syscall(SYS_arch_prctl = 158, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18) */
    __asm__ volatile("syscall" : "=a"(r) : "a"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
    return r == 0;
#endif
}

/* palette 1, tiles 0-7 of 16 rows x 64 bytes: bytes 16 + 2t (colsb, little-endian) and 48 + t (rows).
   A constant table, not a local filled at run time: the intrinsic's asm names only the first 8
   bytes of its operand, so GCC dropped the stores to the rest of a local (the tiles then faulted). */
static const unsigned char fa__amx_cfg[64] = {
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0 };

FA__AMXT static void fa__amx_begin(void)
{
#ifndef FA__AMX_EMULATE
    __asm__ volatile("ldtilecfg %0" : : "m"(*(const unsigned char (*)[64])fa__amx_cfg));
#endif
}

FA__AMXT static void fa__amx_end(void)
{
#ifndef FA__AMX_EMULATE
    _tile_release();
#endif
}

/* The one AMX product, the forward's two (fa__qk_amx, fa__pv_amx) and the backward's five (section
   7b): C [M][N] = scale * A B (acc 0) or C += A B (acc 1), A [M][Kd] bf16 row-major (rows lda bytes
   apart), B [Kd/2][N] words (pairs of A's columns, rows ldb words apart), C fp32 (rows ldc floats
   apart); M and N multiples of 16, Kd of 32. 2 x 2 C tiles (0-3) from A tiles 4-5 and B tiles 6-7:
   32 rows by 32 columns at a time, 16 at the edges. A product is a job (fa__amx_job, its unscaled
   part) run one 2 x 2 block at a time by fa__amx_group, so that the tiled forward can spread a
   job's blocks through its online step's vector work (fa__online_amx); fa__mm_amx runs them all. */
static void fa__amx_job_set(fa__amx_job *j, const void *A, int64_t lda, int M, int Kd, const uint32_t *B, int64_t ldb,
                            float *C, int64_t ldc, int N, int acc)
{
    j->A = (const unsigned char *)A; j->lda = lda; j->M = M; j->Kd = Kd; j->B = B; j->ldb = ldb;
    j->C = C; j->ldc = ldc; j->N = N; j->acc = acc; j->m = 0; j->n = 0;
}

static int fa__amx_groups(const fa__amx_job *j) { return j->m < j->M ? (j->M + 31) / 32 * ((j->N + 31) / 32) : 0; }

/* the job's next 2 x 2 block of C tiles, over the whole reduction */
FA__AMXT static void fa__amx_group(fa__amx_job *j)
{
    const long sb = (long)(4 * j->ldb), sc = (long)(4 * j->ldc), sa = (long)j->lda;
    const int m = j->m, n = j->n, m2 = m + 32 <= j->M, n2 = n + 32 <= j->N;
    const unsigned char *a0 = j->A + (int64_t)m * j->lda, *a1 = a0 + 16 * j->lda;
    float *c0 = j->C + (int64_t)m * j->ldc + n, *c2 = c0 + 16 * j->ldc;
    int k = 0;
    if (j->acc) {
        FA__TLOAD(0, c0, sc); if (n2) FA__TLOAD(1, c0 + 16, sc);
        if (m2) { FA__TLOAD(2, c2, sc); if (n2) FA__TLOAD(3, c2 + 16, sc); }
    } else {
        FA__TZERO(0); if (n2) FA__TZERO(1);
        if (m2) { FA__TZERO(2); if (n2) FA__TZERO(3); }
    }
#if FA__AMX_SWP
    if (m2 && n2) {     /* each operand tile of step k + 1 loaded right after its last use in step k */
        const uint32_t *b = j->B + n;
        FA__TLOAD(4, a0, sa); FA__TLOAD(6, b, sb); FA__TLOAD(7, b + 16, sb); FA__TLOAD(5, a1, sa);
        for (k = 0; k < j->Kd; k += 32) {
            const int nx = k + 32 < j->Kd;
            b = j->B + (int64_t)((k + 32) / 2) * j->ldb + n;
            FA__TDP(0, 4, 6); FA__TDP(1, 4, 7);
            if (nx) FA__TLOAD(4, a0 + 2 * (k + 32), sa);
            FA__TDP(2, 5, 6);
            if (nx) FA__TLOAD(6, b, sb);
            FA__TDP(3, 5, 7);
            if (nx) { FA__TLOAD(5, a1 + 2 * (k + 32), sa); FA__TLOAD(7, b + 16, sb); }
        }
        k = j->Kd;
    }
#endif
    for (; k < j->Kd; k += 32) {
        const uint32_t *b = j->B + (int64_t)(k / 2) * j->ldb + n;
        FA__TLOAD(4, a0 + 2 * k, sa);
        FA__TLOAD(6, b, sb);
        FA__TDP(0, 4, 6);
        if (m2) { FA__TLOAD(5, a1 + 2 * k, sa); FA__TDP(2, 5, 6); }
        if (n2) {
            FA__TLOAD(7, b + 16, sb);
            FA__TDP(1, 4, 7);
            if (m2) FA__TDP(3, 5, 7);
        }
    }
    FA__TSTORE(0, c0, sc); if (n2) FA__TSTORE(1, c0 + 16, sc);
    if (m2) { FA__TSTORE(2, c2, sc); if (n2) FA__TSTORE(3, c2 + 16, sc); }
    j->n = n + (n2 ? 32 : 16);
    if (j->n >= j->N) { j->n = 0; j->m = m + (m2 ? 32 : 16); }
}

/* every block of n jobs, in order */
FA__AMXT static void fa__amx_run(fa__amx_job *j, int n)
{
    int i;
    for (i = 0; i < n; i++)
        while (j[i].m < j[i].M) fa__amx_group(&j[i]);
}

/* the blocks of n jobs round robin: block 0 of every job, then block 1, ...; for jobs that share
   their A operand (the panels of a chunk, FA__AMX_RR) a block's A tiles are read by every job in
   turn while they are in L1. Each block is computed whole, so the bits are fa__amx_run's. */
FA__AMXT static void fa__amx_run_rr(fa__amx_job *j, int n)
{
    int i, left = 1;
    while (left)
        for (left = 0, i = 0; i < n; i++)
            if (j[i].m < j[i].M) { fa__amx_group(&j[i]); left = 1; }
}

FA__AMXT static void fa__mm_amx(const uint16_t *A, int64_t lda, int M, int Kd, const uint32_t *B, int64_t ldb, float *C,
                               int64_t ldc, int N, int acc, float scale)
{
    const __m512 scv = _mm512_set1_ps(scale);
    fa__amx_job j;
    int r, u;
    fa__amx_job_set(&j, A, lda, M, Kd, B, ldb, C, ldc, N, acc);
    fa__amx_run(&j, 1);
    if (!acc && scale != 1.0f)
        for (r = 0; r < M; r++)
            for (u = 0; u < N; u += 16)
                _mm512_storeu_ps(C + (int64_t)r * ldc + u, _mm512_mul_ps(_mm512_loadu_ps(C + (int64_t)r * ldc + u), scv));
}

/* St[j][lanes] = scale * dot(K[j], q_lane) for j < nk and nv (1 or 2) lane vectors, Qp [D/2] and
   St [nk] in rows of FA__AMX_LD lanes (S, Qp at the first lane); D % 32 == 0. Keys in 16-key groups
   on fa__mm_amx; the fewer than 16 left on vdpbf16ps. fa__qk_amx_job: the same unscaled (scale 1),
   the keys past the last group done now, the groups left as the job *j. */
FA__AMXT static void fa__qk_amx_job(const uint16_t *K, int64_t ks, int nk, int D, const uint32_t *Qp, float *S, int nv,
                                   fa__pf *pf, fa__amx_job *j)
{
    const int g = nk / 16 * 16;
    fa__amx_job_set(j, K, 2 * ks, g, D, Qp, FA__AMX_LD, S, FA__AMX_LD, 16 * nv, 0);
    if (g < nk)
        fa__gemm_bf16_avx512((const unsigned char *)(K + (int64_t)g * ks), 2 * ks, 4, nk - g, D / 2, Qp, FA__AMX_LD,
                             S + (int64_t)g * FA__AMX_LD, FA__AMX_LD, nv, 0, 1.0f, pf);
}

FA__AMXT static void fa__qk_amx(const uint16_t *K, int64_t ks, int nk, int D, const uint32_t *Qp, float *S, int nv,
                               float scale, fa__pf *pf)
{
    const int g = nk / 16 * 16;
    if (g) fa__mm_amx(K, 2 * ks, g, D, Qp, FA__AMX_LD, S, FA__AMX_LD, 16 * nv, 0, scale);
    if (g < nk)
        fa__gemm_bf16_avx512((const unsigned char *)(K + (int64_t)g * ks), 2 * ks, 4, nk - g, D / 2, Qp, FA__AMX_LD,
                             S + (int64_t)g * FA__AMX_LD, FA__AMX_LD, nv, 0, scale, pf);
}

/* Vt[t][x] = Vp[x][t] for t < Dv, x < np16 (np16 a multiple of 16; words past np are 0) */
FA__AMXT static void fa__vt_pack(const uint32_t *Vp, int np, int Dv, uint32_t *Vt, int np16)
{
    __m512 r[16];
    int x0, t0, i;
    for (x0 = 0; x0 < np16; x0 += 16)
        for (t0 = 0; t0 < Dv; t0 += 16) {
            __mmask16 tm = fa__lanes(Dv - t0);
            FA__UNROLL
            for (i = 0; i < 16; i++)
                r[i] = x0 + i < np ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(tm, (const void *)(Vp + (int64_t)(x0 + i) * Dv + t0)))
                                   : _mm512_setzero_ps();
            fa__t16_avx512(r);
            for (i = 0; i < 16 && t0 + i < Dv; i++) _mm512_storeu_ps((float *)(Vt + (int64_t)(t0 + i) * np16 + x0), r[i]);
        }
}

/* fa__vpack_bf16 and then fa__vt_pack in one pass, from V as stored: Vt[t][x] = (V[2x][t], V[2x + 1][t])
   for t < Dv, x < np16 (the same words: a missing key 2x + 1 and the pairs past the nk keys are 0);
   returns 1 when every value is finite (Vt is written either way). Per 16 key pairs and 32 features,
   each pair's two rows interleaved within 128-bit lanes (vpunpcklwd: the group's features 0-3, 8-11,
   16-19, 24-27; vpunpckhwd: 4-7, 12-15, ...), and each half transposed 16 x 16 into Vt's rows: no
   Vp between (on the development machine's AMX CPU 1.4x as fast as the two passes at Dv = 128, 1.8x at
   64: 12.4K and 5.3K TSC ticks a block of 256 keys). */
FA__AMXT static int fa__vt_pack_h(const uint16_t *V, int64_t vs, int nk, int Dv, uint32_t *Vt, int np16)
{
    const __m512i ex = _mm512_set1_epi16(0x7F80);
    __m512i big = _mm512_setzero_si512();       /* the largest exponent field seen */
    int x0, t0, x, h, p;
    for (x0 = 0; x0 < np16; x0 += 16)
        for (t0 = 0; t0 < Dv; t0 += 32) {
            const __mmask32 wm = Dv - t0 >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (Dv - t0)) - 1u);
            for (h = 0; h < 2; h++) {
                __m512 r[16];
                FA__UNROLL
                for (x = 0; x < 16; x++) {
                    const int k = 2 * (x0 + x);
                    __m512i a = k < nk ? _mm512_maskz_loadu_epi16(wm, (const void *)(V + (int64_t)k * vs + t0)) : _mm512_setzero_si512();
                    __m512i b = k + 1 < nk ? _mm512_maskz_loadu_epi16(wm, (const void *)(V + (int64_t)(k + 1) * vs + t0))
                                           : _mm512_setzero_si512();
                    if (!h) big = _mm512_max_epu16(big, _mm512_max_epu16(_mm512_and_si512(a, ex), _mm512_and_si512(b, ex)));
                    r[x] = _mm512_castsi512_ps(h ? _mm512_unpackhi_epi16(a, b) : _mm512_unpacklo_epi16(a, b));
                }
                fa__t16_avx512(r);
                FA__UNROLL
                for (p = 0; p < 16; p++) {
                    const int t = t0 + 8 * (p >> 2) + (p & 3) + 4 * h;
                    if (t < Dv) _mm512_storeu_ps((float *)(Vt + (int64_t)t * np16 + x0), r[p]);
                }
            }
        }
    return _mm512_cmpeq_epi16_mask(big, ex) == 0;
}

/* Ot[t][lanes] += sum_x Vt[t][x] . Pp[x][lanes] for t < Dv, x < np16 (Pp's rows past the block's
   key pairs are 0), nv (1 or 2) lane vectors, Ot and Pp in rows of FA__AMX_LD lanes. Features in
   16-feature groups on fa__mm_amx; the fewer than 16 left on vdpbf16ps. fa__pv_amx_job: those done
   now, the groups left as the job *j. */
FA__AMXT static void fa__pv_amx_job(const uint32_t *Vt, int np16, int Dv, const uint32_t *Pp, float *O, int nv, fa__pf *pf,
                                   fa__amx_job *j)
{
    const int t = Dv / 16 * 16;
    fa__amx_job_set(j, Vt, 4 * (int64_t)np16, t, 2 * np16, Pp, FA__AMX_LD, O, FA__AMX_LD, 16 * nv, 1);
    if (t < Dv)
        fa__gemm_bf16_avx512((const unsigned char *)(Vt + (int64_t)t * np16), 4 * (int64_t)np16, 4, Dv - t, np16, Pp,
                             FA__AMX_LD, O + (int64_t)t * FA__AMX_LD, FA__AMX_LD, nv, 1, 1.0f, pf);
}

FA__AMXT static void fa__pv_amx(const uint32_t *Vt, int np16, int Dv, const uint32_t *Pp, float *O, int nv, fa__pf *pf)
{
    fa__amx_job j;
    fa__pv_amx_job(Vt, np16, Dv, Pp, O, nv, pf, &j);
    fa__amx_run(&j, 1);
}

/* FA__AMX_FASTEXP 1: the AMX online step's exps as 2^t, t = s c1 - m c2 in one FMA: f = t - floor(t)
   in [0, 1) by vreduceps, a degree-4 fit of 2^f (2.6e-6 relative; a degree 3's 7.5e-5 moved lse
   past the tests' 1e-5 (1 + |lse|) of the fp32 call), times 2^floor(t) by vscalefps, which floors t
   itself. t <= -126 (a hidden key's -INFINITY among them) gives exactly 0 by the scalef's zero mask,
   so that no lane makes a denormal (a microcode assist, ~100 cycles an instruction; masked lanes
   take none); NaN stays NaN. Seven vector instructions where fa__exp2_split16 and a degree 4 took
   ten (its round is two): the online step ran 1.45x as fast on the development machine's AMX CPU.
   0 (comparisons): fa__online_avx512's exps, so the first AMX kernel's bits (checked under
   FA__AMX_EMULATE). */
#ifndef FA__AMX_FASTEXP
#define FA__AMX_FASTEXP 1
#endif
FA__AMXT static inline __m512 fa__exp2_amx16(__m512 t)
{
    const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_NLE_UQ);
    const __m512 f = _mm512_maskz_reduce_ps(0xFFFF, t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.3534137047827244e-02f), f, _mm512_set1_ps(5.201148986816406e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4144276976585388e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.930038332939148e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000026226043701e+00f));
    return _mm512_maskz_scalef_ps(keep, p, t);
}

/* FA__AMX_PPACK 1: P's two keys rounded to bf16 and packed into Pp's words by integers: half a bf16
   ulp added to each fp32 exp (round to nearest, ties away from zero: differs from the round to even
   only where an exp's low 16 bits are exactly 0x8000), the first key's high half shifted down and the
   second's kept, blended: four vector instructions where vcvtne2ps2bf16 + vpermw took the time of
   about six (the online step 1.05x as fast alone, the forward 0.99-1.04x at 1 thread on the
   development machine). A NaN whose payload carries into the sign becomes -0 in P, while its exp in
   the row sum l keeps the row NaN. 0: vcvtne2ps2bf16 + vpermw (to even). */
#ifndef FA__AMX_PPACK
#define FA__AMX_PPACK 1
#endif
/* FA__AMX_PWMAX (nonzero): the online step's pass that takes a block's exps against the references
   finds whether a reference may move from the max of P's bf16 words (one vpmaxuw a key pair) rather
   than the scores' (two vmaxps): a word from this one up (2^10.5 as bf16, 0x44B5; NaN and -0 too)
   sends the block to its exact max and fa__online_avx512's decision, so the decisions are the same.
   A score that passes its reference m by FA__LAZY has t >= 8 log2(e) - d = 11.54 - d, where t's
   roundings (c1 = scale log2(e), c2 = m log2(e), the FMA) give d <= 2^-23 (|s scale| + |m|) log2(e)
   + 2^-24 |t|, under 0.2 for |m| <= 2^20 (the bound the pass asks for, else it takes the scores'
   max); its exp is then >= 2^11.3 (the fit's 2.6e-6 and P's rounding, 2^-8, take less than 0.01
   more) > 2^10.5. 0: the scores' max. */
#ifndef FA__AMX_PWMAX
#define FA__AMX_PWMAX 0x44B5
#endif
FA__AMXT static inline __m512i fa__pack_pair_amx(__m512 e0, __m512 e1, __m512i ilv)
{
#if FA__AMX_PPACK
    const __m512i h = _mm512_set1_epi32(0x8000);
    (void)ilv;
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, fa__srli32(_mm512_add_epi32(_mm512_castps_si512(e0), h), 16),
                                   _mm512_add_epi32(_mm512_castps_si512(e1), h));
#else
    return _mm512_permutexvar_epi16(ilv, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
#endif
}

/* The online step (fa__online_avx512's rule: the same reference, lazy rescale and key order of the
   sum) on one panel's raw scores, P rounded to bf16 pairs on the way (fa__ppack_bf16's words)
   instead of written back: S [.][32] unscaled scores from the block's first key (fa__qk_amx_job;
   scale applied here, as fa__mm_amx would), the tile's keys [off, off + nk) of the block, Pp
   [np16][32] words, 0 outside those keys; nvec lane vectors at the panel's first lane (S, O, Pp, m
   and l there). A vector whose lanes all have a reference takes its exps against it while it finds
   the block's max, and takes them again in the rare block whose max moves a reference; a vector
   with a lane that has none finds the max first. The key pairs with both keys in the tile run
   without tests (the fast exps), those at its edges one key at a time. The jobs' blocks of tile
   products (with FA__AMX_PIPE 1: the next panel's scores, the previous panel's P V) run spread over
   the pass, so that the tile unit works while the vector units do; all are done at return. */
FA__AMXT static void fa__online_amx(const float *S, int off, int nk, int nvec, float scale, float *m, float *l, float *O,
                                    int Dv, uint32_t *Pp, int np16, fa__amx_job *jobs, int njobs)
{
    static const uint16_t ilv_w[32] = { 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31 };
    const __m512i ilv = _mm512_loadu_si512((const void *)ilv_w);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), l2e = _mm512_set1_ps(FA__LOG2E), scv = _mm512_set1_ps(scale);
    const __m512 lazy = _mm512_set1_ps(FA__LAZY), zero = _mm512_setzero_ps(), c1 = _mm512_set1_ps(scale * FA__LOG2E);
    /* key pairs x in [xa, xb) have both keys 2x - off, 2x + 1 - off in [0, nk) */
    const int xa = (off + 1) / 2, xb = (off + nk) / 2 > xa ? (off + nk) / 2 : xa;
    int ng = 0, done = 0, it = 0, ni = nvec * np16, q = 0, v, x, j, pass;
    for (j = 0; j < njobs; j++) ng += fa__amx_groups(&jobs[j]);
    for (v = 0; v < nvec; v++) {
        const float *s = S + 16 * v;
        uint32_t *pp = Pp + 16 * v;
        float *o = O + 16 * v;
        __m512 mo = _mm512_loadu_ps(m + 16 * v), mx = mo, mr = mo, ms = mo, al = _mm512_set1_ps(1.0f), sum = zero;
        __m512 c2 = zero, xr0 = ninf, xr1 = ninf;
        __mmask16 up;
        __m512i wmax = _mm512_setzero_si512();
        int pre = _mm512_cmp_ps_mask(mo, ninf, _CMP_EQ_OQ) != 0, fast, pw;
#define FA__AMX_MAXPASS                                                                          \
        do {                                                                                     \
            xr0 = ninf; xr1 = ninf;                                                              \
            for (j = 0; j + 1 < nk; j += 2) {                                                    \
                xr0 = fa__max16(xr0, _mm512_loadu_ps(s + (int64_t)(off + j) * FA__AMX_LD));      \
                xr1 = fa__max16(xr1, _mm512_loadu_ps(s + (int64_t)(off + j + 1) * FA__AMX_LD));  \
            }                                                                                    \
            if (j < nk) xr0 = fa__max16(xr0, _mm512_loadu_ps(s + (int64_t)(off + j) * FA__AMX_LD)); \
        } while (0)
        if (pre) {      /* a lane without a reference: the block's max first */
            FA__AMX_MAXPASS;
            mx = fa__max16(mo, _mm512_mul_ps(fa__max16(xr0, xr1), scv));
        }
        for (pass = 0;; pass++) {
            if (pre || pass) {      /* fa__online_avx512's decision */
                up = fa__lazy_ref16(mo, mx, &mr, &ms);
                if (up) {       /* the jobs first: one may be a P V into this O */
                    fa__amx_run(jobs, njobs);
                    done = ng;
                    al = _mm512_mask_mov_ps(al, up, fa__exp16(_mm512_sub_ps(mo, ms)));
                    fa__rescale16(o, FA__AMX_LD, Dv, al);
                }
            }
            /* one FMA where m log2(e) cannot overflow */
            fast = FA__AMX_FASTEXP && (_mm512_cmp_ps_mask(ms, _mm512_set1_ps(1e30f), _CMP_GT_OQ) |
                                           _mm512_cmp_ps_mask(ms, _mm512_set1_ps(-1e30f), _CMP_LT_OQ)) == 0;
            c2 = _mm512_mul_ps(ms, l2e);
            sum = zero; xr0 = ninf; xr1 = ninf;
            /* the max of P's words instead of the scores' where the references are near enough to 0
               that t's rounding stays small (FA__AMX_PWMAX) */
            pw = FA__AMX_PWMAX && fast && !pre && !pass &&
                 (_mm512_cmp_ps_mask(ms, _mm512_set1_ps(1048576.0f), _CMP_GT_OQ) |
                  _mm512_cmp_ps_mask(ms, _mm512_set1_ps(-1048576.0f), _CMP_LT_OQ)) == 0;
            /* the pairs in key order: with the fast exps and no jobs left, those with both keys in the
               tile ([xa, xb)) run without tests, the edges before and after one key at a time */
#define FA__AMX_E(e, jj, xr)                                                                                       \
            if ((jj) >= 0 && (jj) < nk) {                                                                          \
                __m512 r_ = _mm512_loadu_ps(s + (int64_t)(off + (jj)) * FA__AMX_LD);                               \
                if (!pre) xr = fa__max16(xr, r_);                                                                  \
                e = fast ? fa__exp2_amx16(_mm512_fmsub_ps(r_, c1, c2))                                             \
                         : fa__exp2_lazy16(_mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(r_, scv), ms), l2e));         \
            }
#define FA__AMX_EDGE(xlo, xhi)                                                                                     \
            for (x = (xlo); x < (xhi); x++) {                                                                      \
                __m512 e0 = zero, e1 = zero;                                                                       \
                if (!pass && done < ng) {                                                                          \
                    it = v * np16 + x + 1;                                                                         \
                    while (done < ng && (int64_t)done * ni < (int64_t)it * ng) {                                   \
                        while (jobs[q].m >= jobs[q].M) q++;                                                        \
                        fa__amx_group(&jobs[q]);                                                                   \
                        done++;                                                                                    \
                    }                                                                                              \
                }                                                                                                  \
                FA__AMX_E(e0, 2 * x - off, xr0)                                                                    \
                FA__AMX_E(e1, 2 * x + 1 - off, xr1)                                                                \
                sum = _mm512_add_ps(_mm512_add_ps(sum, e0), e1);                                                   \
                _mm512_storeu_si512((void *)(pp + (int64_t)x * FA__AMX_LD), fa__pack_pair_amx(e0, e1, ilv));      \
            }
#define FA__AMX_PAIRS(maxed, words)                                                                                \
            for (x = xa; x < xb; x++) {                                                                            \
                const __m512 r0 = _mm512_loadu_ps(s + (int64_t)(2 * x) * FA__AMX_LD);                              \
                const __m512 r1 = _mm512_loadu_ps(s + (int64_t)(2 * x + 1) * FA__AMX_LD);                          \
                __m512 e0, e1;                                                                                     \
                __m512i w;                                                                                         \
                if (maxed) { xr0 = fa__max16(xr0, r0); xr1 = fa__max16(xr1, r1); }                                 \
                e0 = fa__exp2_amx16(_mm512_fmsub_ps(r0, c1, c2));                                                  \
                e1 = fa__exp2_amx16(_mm512_fmsub_ps(r1, c1, c2));                                                  \
                sum = _mm512_add_ps(_mm512_add_ps(sum, e0), e1);                                                   \
                w = fa__pack_pair_amx(e0, e1, ilv);                                                                \
                if (words) wmax = _mm512_max_epu16(wmax, w);                                                       \
                _mm512_storeu_si512((void *)(pp + (int64_t)x * FA__AMX_LD), w);                                    \
            }
            if (fast && (pass || done >= ng)) {
                FA__AMX_EDGE(0, xa)
                if (pre) FA__AMX_PAIRS(0, 0)
                else if (pw) FA__AMX_PAIRS(0, 1)
                else FA__AMX_PAIRS(1, 0)
                FA__AMX_EDGE(xb, np16)
            } else {
                FA__AMX_EDGE(0, np16)
            }
#undef FA__AMX_E
#undef FA__AMX_EDGE
#undef FA__AMX_PAIRS
            if (pre || pass) break;
            if (pw) {
                /* no P word from 2^10.5 up and no edge key past its reference: the reference holds;
                   else the block's exact max, and fa__online_avx512's decision as always */
                const __m512i wl = _mm512_max_epu16(wmax, fa__srli32(wmax, 16));
                __mmask16 f = _mm512_cmp_epu32_mask(_mm512_and_si512(wl, _mm512_set1_epi32(0xFFFF)),
                                                    _mm512_set1_epi32(FA__AMX_PWMAX), _MM_CMPINT_NLT);
                f |= _mm512_cmp_ps_mask(fa__max16(mo, _mm512_mul_ps(fa__max16(xr0, xr1), scv)), _mm512_add_ps(mo, lazy),
                                        _CMP_GT_OQ);
                if (!f) break;
                FA__AMX_MAXPASS;
            }
            mx = fa__max16(mo, _mm512_mul_ps(fa__max16(xr0, xr1), scv));
            if (!_mm512_cmp_ps_mask(mx, _mm512_add_ps(mo, lazy), _CMP_GT_OQ)) break;    /* the reference holds */
        }
        _mm512_storeu_ps(l + 16 * v, _mm512_fmadd_ps(al, _mm512_loadu_ps(l + 16 * v), sum));
        _mm512_storeu_ps(m + 16 * v, mr);
    }
#undef FA__AMX_MAXPASS
    fa__amx_run(jobs, njobs);
}
#endif

/* ---- The kernel table ------------------------------------------------------------------------
   The kernels of one ISA, one table each. A call picks its table once, K = fa__kernels_for(isa)
   with isa = fa__isa() (as stb_image picks its IDCT once per image), and its paths call K->gemm,
   K->online, ... with no ISA test and no #ifdef of their own. fa__kernels_for is the one place that
   maps an ISA number to kernels; the wrappers after it (fa__gemm(isa, ...), fa__exp_sum,
   fa__softcap_run, fa__online, fa__softmax_row) are the same kernels by ISA number. */
typedef struct fa__kernels {
    /* C (+)= A B over 16-lane vectors, the tiled path's one product shape (see fa__gemm_avx512) */
    void (*gemm)(const float *A, int64_t sa, int64_t sx, int na, int nx, const float *B, int64_t ldb,
                 float *C, int64_t ldc, int nv, int acc, fa__pf *pf);
    /* one block of the online softmax on lanes (fa__online_c) */
    void (*online)(float *S, int64_t lds, int nk, int nv, float *m, float *l, float *O, int64_t ldo, int Dv,
                   float *tmp);
    /* 16 query rows into Qt's lanes (scaled), 16 lanes of O / l out to rows (fa__pack16_c) */
    void (*pack16)(const float *const *q, int D, float scale, float *Qt, int64_t ld);
    void (*unpack16)(const float *O, int64_t ld, const float *l, int Dv, float *const *o);
    /* decode rows: tiles of at most rows_max rows (0: never) keep Q and O row-major, scores by dot
       products into the transposed St, P V into row-major O (fa__dots_avx512, fa__pv_rows_avx512) */
    int rows_max;
    void (*dots)(const float *Q, int nr, const float *K, int64_t ks, int nk, int D, float *S, int64_t lds);
    void (*pv_rows)(const float *P, int64_t lds, int nr, const float *V, int64_t vs, int nk, float *O, int Dv);
    /* the rule's passes: softcap on a contiguous run; ALiBi, bias and the mask on lanes */
    void (*softcap)(float *s, int n, float cap);
    void (*alibi)(float *S, int64_t ld, int nvec, int nk, int64_t k0, const int *diag, const float *slope);
    void (*bias)(float *S, int64_t ld, int nvec, int nk, int64_t k0, const float *const *rows, int64_t ks);
    void (*mask)(float *S, int64_t ld, int nvec, int nk, int64_t k0, const int *lo, const int *hi);
    /* a score row's softmax: exp and sum, max; and d = s * c on a run (d == s: in place) */
    float (*exp_sum)(float *s, int n, float m);
    float (*row_max)(const float *s, int n, float m);
    void (*scale)(float *d, const float *s, int n, float c);
    /* half-precision storage (FA_F16, FA_BF16) to fp32 and back, n elements (fa__h2f_c), and the
       name of the conversion, for fa_describe and fa_build_info */
    void (*h2f)(fa_dtype dt, const void *src, float *dst, int n);
    void (*f2h)(fa_dtype dt, const float *src, void *dst, int n);
    const char *cvt_name;
    /* unpack16 and then f2h to bf16 in one pass (fa__unpack16_bf16_avx512; Dv even); NULL: the two */
    void (*unpack16_bf16)(const float *O, int64_t ld, const float *l, int Dv, uint16_t *const *o);
    /* bf16 products on AVX512-BF16 (fa__gemm_bf16_avx512, the Q, V and P packs); NULL without */
    void (*gemm_bf16)(const unsigned char *A, int64_t sa, int64_t sx, int na, int nx, const uint32_t *B, int64_t ldb,
                      float *C, int64_t ldc, int nv, int acc, float scale, fa__pf *pf);
    void (*qpack_bf16)(const uint16_t *const *q, int Dp, uint32_t *Qp, int64_t ld);
    int (*vpack_bf16)(const uint16_t *V, int64_t vs, int nk, int Dv, uint32_t *Vp);
    void (*ppack_bf16)(const float *S, int64_t ld, int nk, int nvec, uint32_t *Pp);
    /* decode rows on half-precision K and V as stored (fa__dots_h_avx512); NULL: convert blocks */
    void (*dots_h)(fa_dtype dt, const float *Q, int nr, const uint16_t *K, int64_t ks, int nk, int D, float *S, int64_t lds);
    void (*pv_rows_h)(fa_dtype dt, const float *P, int64_t lds, int nr, const uint16_t *V, int64_t vs, int nk, float *O, int Dv);
    /* bf16 products on AMX-BF16 tiles (fa__qk_amx, fa__pv_amx, fa__vt_pack); NULL without */
    void (*amx_qk)(const uint16_t *K, int64_t ks, int nk, int D, const uint32_t *Qp, float *S, int nv, float scale,
                   fa__pf *pf);
    void (*amx_pv)(const uint32_t *Vt, int np16, int Dv, const uint32_t *Pp, float *O, int nv, fa__pf *pf);
    void (*amx_vt)(const uint32_t *Vp, int np, int Dv, uint32_t *Vt, int np16);
    int (*amx_vt_h)(const uint16_t *V, int64_t vs, int nk, int Dv, uint32_t *Vt, int np16);
    void (*amx_mm)(const uint16_t *A, int64_t lda, int M, int Kd, const uint32_t *B, int64_t ldb, float *C, int64_t ldc,
                   int N, int acc, float scale);
    /* the forward's panel pipeline on the tiles: the two products as jobs, their blocks run through the
       online step with P's rounding (fa__qk_amx_job, fa__pv_amx_job, fa__online_amx, fa__amx_run) */
    void (*amx_qk_job)(const uint16_t *K, int64_t ks, int nk, int D, const uint32_t *Qp, float *S, int nv, fa__pf *pf,
                       fa__amx_job *j);
    void (*amx_pv_job)(const uint32_t *Vt, int np16, int Dv, const uint32_t *Pp, float *O, int nv, fa__pf *pf,
                       fa__amx_job *j);
    void (*amx_online)(const float *S, int off, int nk, int nvec, float scale, float *m, float *l, float *O, int Dv,
                       uint32_t *Pp, int np16, fa__amx_job *jobs, int njobs);
    void (*amx_run)(fa__amx_job *j, int n);
    void (*amx_run_rr)(fa__amx_job *j, int n);
} fa__kernels;

#ifdef FLASHATTN__X86
/* The cpuid answers fa__kernels_for needs, asked once per process: cpuid is a VM exit under a
   hypervisor (44 us a call on the development machine's VM, five of them per lookup), and the
   wrappers below (fa__gemm, fa__online, ...) look the table up at every call. */
static int fa__cpu_has_f16c, fa__cpu_has_bf16;
#ifdef FA__HAVE_AMX
static int fa__cpu_has_amx;
#endif
static pthread_once_t fa__cpu_once = PTHREAD_ONCE_INIT;
static void fa__cpu_probe(void)
{
    fa__cpu_has_f16c = fa__cpu_f16c();
    fa__cpu_has_bf16 = fa__cpu_avx512bf16();
#ifdef FA__HAVE_AMX
    fa__cpu_has_amx = fa__cpu_has_bf16 && fa__cpu_amx();
#endif
}
#endif

static const fa__kernels *fa__kernels_for(int isa)
{
    static const fa__kernels portable = {
        fa__gemm_c, fa__online_c, fa__pack16_c, fa__unpack16_c, 0, NULL, NULL,
        fa__softcap_c, fa__alibi_lanes_c, fa__bias_lanes_c, fa__mask_lanes_c,
        fa__exp_sum_c, fa__row_max_c, fa__scale_c, fa__h2f_c, fa__f2h_c, "portable C", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
#ifdef FLASHATTN__X86
    static const fa__kernels avx2 = {
        fa__gemm_avx2, fa__online_avx2, fa__pack16_c, fa__unpack16_c, 0, NULL, NULL,
        fa__softcap_c, fa__alibi_lanes_c, fa__bias_lanes_c, fa__mask_lanes_c,
        fa__exp_sum_avx2, fa__row_max_avx2, fa__scale_avx2, fa__h2f_avx2, fa__f2h_avx2, "f16c", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    /* an AVX2 CPU without F16C (none shipped that we know of) converts in C */
    static const fa__kernels avx2_nof16c = {
        fa__gemm_avx2, fa__online_avx2, fa__pack16_c, fa__unpack16_c, 0, NULL, NULL,
        fa__softcap_c, fa__alibi_lanes_c, fa__bias_lanes_c, fa__mask_lanes_c,
        fa__exp_sum_avx2, fa__row_max_avx2, fa__scale_avx2, fa__h2f_c, fa__f2h_c, "portable C", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    static const fa__kernels avx512 = {
        fa__gemm_avx512, fa__online_avx512, fa__pack16_avx512, fa__unpack16_avx512, 8, fa__dots_avx512,
        fa__pv_rows_avx512, fa__softcap_avx512, fa__alibi_lanes_avx512, fa__bias_lanes_avx512,
        fa__mask_lanes_avx512, fa__exp_sum_avx512, fa__row_max_avx512, fa__scale_avx512,
        fa__h2f_avx512, fa__f2h_avx512, "avx512f vcvtph2ps", fa__unpack16_bf16_avx512, NULL, NULL, NULL, NULL, fa__dots_h_avx512, fa__pv_rows_h_avx512, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    pthread_once(&fa__cpu_once, fa__cpu_probe);
#ifndef FLASHATTN_NO_AVX512BF16
    static const fa__kernels avx512bf16 = {
        fa__gemm_avx512, fa__online_avx512, fa__pack16_avx512, fa__unpack16_avx512, 8, fa__dots_avx512,
        fa__pv_rows_avx512, fa__softcap_avx512, fa__alibi_lanes_avx512, fa__bias_lanes_avx512,
        fa__mask_lanes_avx512, fa__exp_sum_avx512, fa__row_max_avx512, fa__scale_avx512,
        fa__h2f_avx512, fa__f2h_avx512, "avx512f vcvtph2ps", fa__unpack16_bf16_avx512, fa__gemm_bf16_avx512, fa__qpack_bf16,
        fa__vpack_bf16, fa__ppack_bf16, fa__dots_h_bf16, fa__pv_rows_h_bf16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
#ifdef FA__HAVE_AMX
    static const fa__kernels amx = {
        fa__gemm_avx512, fa__online_avx512, fa__pack16_avx512, fa__unpack16_avx512, 8, fa__dots_avx512,
        fa__pv_rows_avx512, fa__softcap_avx512, fa__alibi_lanes_avx512, fa__bias_lanes_avx512,
        fa__mask_lanes_avx512, fa__exp_sum_avx512, fa__row_max_avx512, fa__scale_avx512,
        fa__h2f_avx512, fa__f2h_avx512, "avx512f vcvtph2ps", fa__unpack16_bf16_avx512, fa__gemm_bf16_avx512, fa__qpack_bf16,
        fa__vpack_bf16, fa__ppack_bf16, fa__dots_h_bf16, fa__pv_rows_h_bf16, fa__qk_amx, fa__pv_amx, fa__vt_pack, fa__vt_pack_h,
        fa__mm_amx, fa__qk_amx_job, fa__pv_amx_job, fa__online_amx, fa__amx_run, fa__amx_run_rr };
    if (isa == 2 && fa__cpu_has_amx) return &amx;
#endif
    /* AVX512-BF16 (with the BW and VL it implies on every CPU that has it) unless
       FLASHATTN_NO_AVX512BF16 (tests, benches: the conversion path on the same CPU) */
    if (isa == 2 && fa__cpu_has_bf16) return &avx512bf16;
#endif
    if (isa == 2) return &avx512;
    if (isa == 1) return fa__cpu_has_f16c ? &avx2 : &avx2_nof16c;
#endif
    (void)isa;
    return &portable;
}

/* What serves half-precision storage on this ISA (fa_build_info, fa_describe). */
static const char *fa__half_name(int isa)
{
    const fa__kernels *K = fa__kernels_for(isa);
    const char *c = K->cvt_name;
    if (K->amx_qk) return "avx512f conversion (vcvtph2ps; bf16 by shifts) into the fp32 kernels, bf16 products on "
                          "AMX-BF16 tiles (vdpbf16ps where the tile state is refused)";
    if (K->gemm_bf16) return "avx512f conversion (vcvtph2ps; bf16 by shifts) into the fp32 kernels, bf16 products on "
                             "avx512bf16 vdpbf16ps";
    if (c[0] == 'a') return "avx512f conversion (vcvtph2ps; bf16 by shifts) into the fp32 kernels";
    if (c[0] == 'f') return "f16c conversion (vcvtph2ps; bf16 by shifts) into the fp32 kernels";
    return "portable C conversion into the fp32 kernels";
}

/* The kernels by ISA number. */
static inline void fa__gemm(int isa, const float *A, int64_t sa, int64_t sx, int na, int nx, const float *B,
                            int64_t ldb, float *C, int64_t ldc, int nv, int acc, fa__pf *pf)
{
    fa__kernels_for(isa)->gemm(A, sa, sx, na, nx, B, ldb, C, ldc, nv, acc, pf);
}

static inline void fa__online(int isa, float *S, int64_t lds, int nk, int nv, float *m, float *l, float *O,
                              int64_t ldo, int Dv, float *tmp)
{
    fa__kernels_for(isa)->online(S, lds, nk, nv, m, l, O, ldo, Dv, tmp);
}

/* s[t] = exp(s[t] - m) (0 for -INFINITY), returns the sum; m must be finite. */
static inline float fa__exp_sum(int isa, float *s, int n, float m) { return fa__kernels_for(isa)->exp_sum(s, n, m); }

/* s[0..n) = cap * tanh(s / cap), softcap's step on a contiguous run */
static void fa__softcap_run(int isa, float *s, int n, float cap) { fa__kernels_for(isa)->softcap(s, n, cap); }

/* A softmax of one score row in place; returns its lse. A row with no visible key (max -INFINITY)
   becomes zeros, lse -INFINITY; a NaN anywhere in the row makes its visible entries and lse NaN
   (hidden ones stay 0, so that the backward carries the NaN to no key the row does not see). */
static float fa__softmax_row(int isa, float *s, int n)
{
    const fa__kernels *K = fa__kernels_for(isa);
    float m = K->row_max(s, n, -INFINITY), sum;
    int t;
    if (m == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof(float));
        return -INFINITY;
    }
    if (m != m) {                 /* a NaN row: NaN where a key is visible, 0 where it is hidden */
        for (t = 0; t < n; t++) s[t] = s[t] == -INFINITY ? 0.0f : m;
        return m;
    }
    sum = K->exp_sum(s, n, m);
    K->scale(s, s, n, 1.0f / sum);
    return m + logf(sum);
}

/* Steps 2-5 of the rule on the lanes [lane0, lane0 + 16 nvec) of a transposed score tile (S points
   at lane0; key k0 + jj's column at S + jj * ld), in the rule's order: the lane form of
   fa__modify_row, through the table's passes. mask == 0 skips step 5 (the caller knows every key
   of the block is visible to these rows). */
static void fa__modify_tile(const fa__kernels *K, const fa__rule_lanes *ln, int lane0, float *S, int64_t ld,
                            int nvec, int64_t k0, int nk, int mask)
{
    int jj;
    if (ln->cap > 0.0f)
        for (jj = 0; jj < nk; jj++) K->softcap(S + (int64_t)jj * ld, 16 * nvec, ln->cap);
    if (ln->diag) K->alibi(S, ld, nvec, nk, k0, ln->diag + lane0, ln->slope + lane0);
    if (ln->bias) K->bias(S, ld, nvec, nk, k0, ln->bias + lane0, ln->bias_ks);
    if (mask && ln->lo) K->mask(S, ld, nvec, nk, k0, ln->lo + lane0, ln->hi + lane0);
}

/* ============================================================================================== */
/* 4. CPU: threads                                                                      >>threads */
/* ============================================================================================== */

typedef struct fa__pool {
    pthread_mutex_t mu;
    int64_t next, total;
    int64_t *rng;           /* NULL: items in order from `next`; else thread t's range [rng[2t], rng[2t + 1]) */
    int nrng;               /* ... of nrng threads (fa__run_ranges) */
    void (*fn)(void *ctx, int64_t item, int tid);
    void *ctx;
} fa__pool;

typedef struct fa__worker { fa__pool *pool; int tid; fa_pool *owner; } fa__worker;

/* The next item for thread tid (under pl->mu), pl->total when none is left: the shared counter's,
   or with ranges the front of the thread's own range, then the back of the range with the most
   items left (a thread that is late or never started leaves its items to the others). */
static int64_t fa__take(fa__pool *pl, int tid)
{
    int64_t *r = pl->rng, most = 0;
    int t, v = -1;
    if (!r) return pl->next < pl->total ? pl->next++ : pl->total;
    if (tid < pl->nrng && r[2 * tid] < r[2 * tid + 1]) return r[2 * tid]++;
    for (t = 0; t < pl->nrng; t++)
        if (r[2 * t + 1] - r[2 * t] > most) { most = r[2 * t + 1] - r[2 * t]; v = t; }
    return v < 0 ? pl->total : --r[2 * v + 1];
}

/* Takes items until none is left. */
static void fa__drain(fa__pool *pl, int tid)
{
    for (;;) {
        int64_t item;
        pthread_mutex_lock(&pl->mu);
        item = fa__take(pl, tid);
        pthread_mutex_unlock(&pl->mu);
        if (item >= pl->total) break;
        pl->fn(pl->ctx, item, tid);
    }
}

static void *fa__worker_main(void *arg)
{
    fa__worker *w = (fa__worker *)arg;
    fa__drain(w->pool, w->tid);
    return NULL;
}

static int fa__online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 4096 ? 4096 : (int)n);
}

/* Physical memory in bytes (SIZE_MAX when the system does not say). A naive score matrix larger
   than this cannot exist: it is refused before the allocator is asked, since an overcommitting
   allocator may hand it out and the first touch would then end the process, not fail the call. */
static size_t fa__phys_bytes(void)
{
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long n = sysconf(_SC_PHYS_PAGES), ps = sysconf(_SC_PAGESIZE);
    if (n > 0 && ps > 0 && (unsigned long)n <= SIZE_MAX / (unsigned long)ps) return (size_t)n * (size_t)ps;
#endif
    return SIZE_MAX;
}

/* Worker stacks, for a call's own threads and a pool's: FA__STACK bytes (see fa__run). */


/* A caller-owned pool: n - 1 parked workers (tid 1..n-1), the caller of a call is tid 0. A job is
   posted by bumping `gen` under `mu` and broadcasting `wake`; workers whose tid is below `active`
   drain its queue and count `busy` down, the last one signalling `idle`. Between jobs a worker
   spins on `gen` for a while before it sleeps, and the caller spins on `busy` before it waits, so
   back-to-back calls cost no sleep and wake-up (the spins read with __atomic where the compiler
   has it, and are skipped where it does not). `call` keeps one call at a time on the pool. */
struct fa_pool {
    int n;
    pthread_mutex_t call, mu;
    pthread_cond_t wake, idle;
    unsigned long gen;
    int active, busy, quit;
    fa__pool *job;
    pthread_t *th;
    fa__worker *wk;
};

static int fa__pool_size(const fa_pool *pool) { return pool->n; }

#if defined(__GNUC__) || defined(__clang__)
#define FA__SPIN FA__SPIN_PAUSES   /* section 0 */
#define fa__load_ul(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define fa__load_int(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define fa__store_ul(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define fa__store_int(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#if defined(__x86_64__) || defined(__i386__)
#define fa__relax() __builtin_ia32_pause()
#else
#define fa__relax() ((void)0)
#endif
#else
#undef FA__SPIN
#define FA__SPIN 0
#define fa__load_ul(p) (*(p))
#define fa__load_int(p) (*(p))
#define fa__store_ul(p, v) (*(p) = (v))
#define fa__store_int(p, v) (*(p) = (v))
#define fa__relax() ((void)0)
#endif

static void *fa__pool_main(void *arg)
{
    fa__worker *w = (fa__worker *)arg;
    fa_pool *P = w->owner;
    unsigned long seen = 0;
    for (;;) {
        fa__pool *job;
        int spin, in;
        for (spin = 0; spin < FA__SPIN && fa__load_ul(&P->gen) == seen; spin++) fa__relax();
        pthread_mutex_lock(&P->mu);
        while (P->gen == seen && !P->quit) pthread_cond_wait(&P->wake, &P->mu);
        if (P->quit) { pthread_mutex_unlock(&P->mu); return NULL; }
        seen = P->gen;
        job = P->job;
        in = w->tid < P->active;
        pthread_mutex_unlock(&P->mu);
        if (!in) continue;
        fa__drain(job, w->tid);
        pthread_mutex_lock(&P->mu);
        fa__store_int(&P->busy, P->busy - 1);
        if (P->busy == 0) pthread_cond_signal(&P->idle);
        pthread_mutex_unlock(&P->mu);
    }
}

static void fa__pool_stop(fa_pool *P, int started)
{
    int t;
    pthread_mutex_lock(&P->mu);
    P->quit = 1;
    pthread_cond_broadcast(&P->wake);
    pthread_mutex_unlock(&P->mu);
    for (t = 1; t <= started; t++) pthread_join(P->th[t], NULL);
}

static fa_status fa__pool_check(int threads, fa_pool **pool, const char **why)
{
    if (!pool) return fa__why(why, FA_ERR_INVALID_ARG, "pool is NULL (where fa_pool_create stores the new pool)");
    if (threads < 0) return fa__why(why, FA_ERR_INVALID_ARG, "threads must be 0 (all cores) or positive");
    return FA_OK;
}

FLASHATTN__CPU_DEF const char *fa_explain_pool_create(int threads, fa_pool **pool)
{
    const char *why = NULL;
    return fa__pool_check(threads, pool, &why) == FA_OK ? NULL : why;
}

FLASHATTN__CPU_DEF fa_status fa_pool_create(int threads, fa_pool **pool)
{
    fa_pool *P;
    size_t bytes;
    int n, t, locks = 0;
    pthread_attr_t attr;
    if (fa__pool_check(threads, pool, NULL) != FA_OK) return FA_ERR_INVALID_ARG;
    n = threads ? threads : fa__online_cores();
    if ((size_t)n > (SIZE_MAX - sizeof(fa_pool)) / (sizeof(pthread_t) + sizeof(fa__worker))) return FA_ERR_NO_MEMORY;
    bytes = sizeof(fa_pool) + (size_t)n * (sizeof(pthread_t) + sizeof(fa__worker));
    P = (fa_pool *)FLASHATTN_MALLOC(bytes);
    if (!P) return FA_ERR_NO_MEMORY;
    memset(P, 0, bytes);
    P->n = n;
    P->th = (pthread_t *)(P + 1);
    P->wk = (fa__worker *)(P->th + n);
    if (pthread_mutex_init(&P->call, NULL) == 0) locks++;
    if (locks == 1 && pthread_mutex_init(&P->mu, NULL) == 0) locks++;
    if (locks == 2 && pthread_cond_init(&P->wake, NULL) == 0) locks++;
    if (locks == 3 && pthread_cond_init(&P->idle, NULL) == 0) locks++;
    if (locks == 4 && pthread_attr_init(&attr) == 0) locks++;
    if (locks == 5 && pthread_attr_setstacksize(&attr, FA__STACK) == 0) {
        for (t = 1; t < n; t++) {
            P->wk[t].tid = t;
            P->wk[t].owner = P;
            if (pthread_create(&P->th[t], &attr, fa__pool_main, &P->wk[t]) != 0) break;
        }
        if (t == n) { pthread_attr_destroy(&attr); *pool = P; return FA_OK; }
        fa__pool_stop(P, t - 1);
    }
    if (locks >= 5) pthread_attr_destroy(&attr);
    if (locks >= 4) pthread_cond_destroy(&P->idle);
    if (locks >= 3) pthread_cond_destroy(&P->wake);
    if (locks >= 2) pthread_mutex_destroy(&P->mu);
    if (locks >= 1) pthread_mutex_destroy(&P->call);
    FLASHATTN_FREE(P);
    return FA_ERR_NO_MEMORY;
}

FLASHATTN__CPU_DEF void fa_pool_destroy(fa_pool *pool)
{
    if (!pool) return;
    fa__pool_stop(pool, pool->n - 1);
    pthread_cond_destroy(&pool->idle);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    pthread_mutex_destroy(&pool->call);
    FLASHATTN_FREE(pool);
}

/* The job on the pool's first nthreads threads, the caller as tid 0. */
static void fa__pool_run(fa_pool *P, fa__pool *job, int nthreads)
{
    int spin;
    pthread_mutex_lock(&P->call);
    pthread_mutex_lock(&P->mu);
    P->job = job;
    P->active = nthreads;
    fa__store_int(&P->busy, nthreads - 1);
    fa__store_ul(&P->gen, P->gen + 1);
    pthread_cond_broadcast(&P->wake);
    pthread_mutex_unlock(&P->mu);
    fa__drain(job, 0);
    for (spin = 0; spin < FA__SPIN && fa__load_int(&P->busy) != 0; spin++) fa__relax();
    pthread_mutex_lock(&P->mu);
    while (P->busy != 0) pthread_cond_wait(&P->idle, &P->mu);
    pthread_mutex_unlock(&P->mu);
    pthread_mutex_unlock(&P->call);
}

/* Threads a call uses for `work` independent items. */
static int fa__want_threads(const fa__dims *d)
{
    return d->threads ? d->threads : d->pool ? d->pool->n : fa__online_cores();
}

static int fa__nthreads(const fa__dims *d, int64_t work)
{
    int64_t t = fa__want_threads(d);
    if (t > work) t = work;
    return t < 1 ? 1 : (int)t;
}

/* Bytes of the per-call thread bookkeeping (handles and worker records), 64-byte rounded; none
   on a caller's pool, which has its own. */
static size_t fa__pool_bytes(const fa__dims *d, int nthreads)
{
    size_t b = d->pool ? 0 : (size_t)nthreads * (sizeof(pthread_t) + sizeof(fa__worker));
    return (b + 63) & ~(size_t)63;
}

/* Runs fn over items [0, total) on nthreads threads (the caller is thread 0): the caller's pool's,
   or threads started here. `mem` holds fa__pool_bytes(d, nthreads). A thread that cannot be
   started leaves its share to the others. With `rng` (2 nthreads int64_t) thread t starts on its
   own run of consecutive items, [t total / nthreads, (t + 1) total / nthreads), and then takes from
   the others' (fa__take): for items of equal cost whose neighbours share their inputs (the AMX
   forward's tiles of one head, FA__AMX_RANGES). Which thread runs an item never changes its result. */
static void fa__run_ranges(fa_pool *pool, void (*fn)(void *, int64_t, int), void *ctx, int64_t total, int nthreads,
                           void *mem, int64_t *rng)
{
    fa__pool pl;
    pthread_t *th = (pthread_t *)mem;
    fa__worker *wk = (fa__worker *)(th + nthreads);
    pthread_attr_t attr;
    int t, attr_ok;
    if (nthreads <= 1 || total <= 1 || pthread_mutex_init(&pl.mu, NULL) != 0) {
        int64_t it;
        for (it = 0; it < total; it++) fn(ctx, it, 0);
        return;
    }
    pl.next = 0; pl.total = total; pl.fn = fn; pl.ctx = ctx;
    pl.rng = rng; pl.nrng = rng ? nthreads : 0;
    for (t = 0; t < pl.nrng; t++) { rng[2 * t] = total * t / nthreads; rng[2 * t + 1] = total * (t + 1) / nthreads; }
    if (pool) {
        fa__pool_run(pool, &pl, nthreads);
        pthread_mutex_destroy(&pl.mu);
        return;
    }
    for (t = 0; t < nthreads; t++) { wk[t].pool = &pl; wk[t].tid = t; wk[t].owner = NULL; }
    /* FA__STACK-byte stacks (the workers' own frames are a few KiB; OpenBLAS's single-threaded
       GEMMs in naive's workers use its preallocated buffers): glibc keeps freed stacks in a cache
       of 40 MiB and reuses them, which the default 8 MiB stacks of 15 workers overflow, so every
       call mapped, faulted in and unmapped fresh ones */
    attr_ok = pthread_attr_init(&attr) == 0;
    if (attr_ok && pthread_attr_setstacksize(&attr, FA__STACK) != 0) { pthread_attr_destroy(&attr); attr_ok = 0; }
    for (t = 1; t < nthreads; t++)
        if (pthread_create(&th[t], attr_ok ? &attr : NULL, fa__worker_main, &wk[t]) != 0) { nthreads = t; break; }
    if (attr_ok) pthread_attr_destroy(&attr);
    fa__drain(&pl, 0);
    for (t = 1; t < nthreads; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&pl.mu);
}

static void fa__run(fa_pool *pool, void (*fn)(void *, int64_t, int), void *ctx, int64_t total, int nthreads,
                    void *mem)
{
    fa__run_ranges(pool, fn, ctx, total, nthreads, mem, NULL);
}

/* One allocation per call, 64-byte aligned; the bytes are counted by the workspace functions. */
static size_t fa__add_size(size_t a, size_t b) { return (a > SIZE_MAX - b) ? SIZE_MAX : a + b; }
static size_t fa__mul_size(size_t a, size_t b) { return (b != 0 && a > SIZE_MAX / b) ? SIZE_MAX : a * b; }
static void *fa__align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* ============================================================================================== */
/* 5. CPU: the naive path                                                                 >>naive */
/* ============================================================================================== */

#if !defined(FLASHATTN_NO_BLAS) && defined(OPENBLAS_VERSION)
#define FLASHATTN__OPENBLAS 1
#endif

/* ---- Half-precision storage by fp32 copies (fa_naive and fa_naive_backward) ----------------------
   These paths serve FA_F16 and FA_BF16 by converting their inputs once into packed fp32 copies,
   running the fp32 path on the copies, and converting the outputs back: the same code, and so the
   same bits, as an fp32 call on the rounded values. The naive paths must: their GEMMs are OpenBLAS's
   sgemm, and Debian's OpenBLAS (0.3.21) has no bf16 or fp16 GEMM (fa_tiled_backward reads half
   storage as stored instead, fa__tbwd_item). The copies are O((Sq + Sk) D) floats, never
   O(Sq x Sk), and are counted in the workspace. A job converts up to 8 tensors, an
   item per (tensor, batch, head), each of `S` rows of `w` elements. */
static size_t fa__round16(size_t n);

/* n rounded up to 16, saturating */
static size_t fa__r16s(size_t n) { return n > SIZE_MAX - 15 ? SIZE_MAX : (n + 15) & ~(size_t)15; }

typedef struct fa__half_t {
    const uint16_t *in;         /* half -> fp32 (an input), or NULL */
    uint16_t *out;              /* fp32 -> half (an output), or NULL */
    float *f;                   /* the packed fp32 copy [n0][n1][S][w] */
    int64_t st[3];              /* the half tensor's strides */
    int n0, n1, S, w;
} fa__half_t;

typedef struct fa__half_job {
    const fa__kernels *K;
    fa_dtype dt;
    int nt;
    fa__half_t t[8];
} fa__half_job;

static void fa__half_add(fa__half_job *j, const void *in, void *out, float *f, const int64_t st[3], int n0, int n1,
                         int S, int w)
{
    fa__half_t *t = &j->t[j->nt++];
    t->in = (const uint16_t *)in; t->out = (uint16_t *)out; t->f = f;
    memcpy(t->st, st, sizeof t->st);
    t->n0 = n0; t->n1 = n1; t->S = S; t->w = w;
}

static int64_t fa__half_items(const fa__half_job *j)
{
    int64_t n = 0;
    int a;
    for (a = 0; a < j->nt; a++) n += (int64_t)j->t[a].n0 * j->t[a].n1;
    return n;
}

static void fa__half_item(void *vctx, int64_t item, int tid)
{
    const fa__half_job *j = (const fa__half_job *)vctx;
    const fa__half_t *t = j->t;
    int64_t b, h, i, off;
    (void)tid;
    while (item >= (int64_t)t->n0 * t->n1) { item -= (int64_t)t->n0 * t->n1; t++; }
    b = item / t->n1; h = item % t->n1;
    for (i = 0; i < t->S; i++) {
        float *f = t->f + ((size_t)item * t->S + (size_t)i) * (size_t)t->w;
        off = b * t->st[0] + h * t->st[1] + i * t->st[2];
        if (t->in) j->K->h2f(j->dt, t->in + off, f, t->w);
        else j->K->f2h(j->dt, f, t->out + off, t->w);
    }
}

/* Floats of the packed copies: q, k, v, o for the forward; and d_o, dq, dk, dv for the backward
   (each rounded to 16 floats). 0 for fp32 storage. */
static size_t fa__half_floats(const fa__dims *d, int bwd)
{
    size_t qn, kn, vn, on, n;
    if (d->dtype == FA_F32) return 0;
    qn = fa__r16s(fa__mul_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)d->Sq), (size_t)d->D));
    on = fa__r16s(fa__mul_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)d->Sq), (size_t)d->Dv));
    kn = fa__r16s(fa__mul_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hkv), (size_t)d->Sk), (size_t)d->D));
    vn = fa__r16s(fa__mul_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hkv), (size_t)d->Sk), (size_t)d->Dv));
    n = fa__add_size(fa__add_size(qn, kn), fa__add_size(vn, on));
    return bwd ? fa__mul_size(n, 2) : n;     /* d_o, dq, dk, dv: the sizes of o, q, k, v */
}

/* Runs the job's conversions on the call's threads (pool_mem: fa__pool_bytes for nthreads). */
static void fa__half_run(fa_pool *pool, fa__half_job *j, int nthreads, void *pool_mem)
{
    fa__run(pool, fa__half_item, j, fa__half_items(j), nthreads, pool_mem);
    j->nt = 0;
}

/* Bytes those copies add to a call's one allocation (with 64 for their alignment). */
static size_t fa__half_bytes(const fa__dims *d, int bwd)
{
    size_t f = fa__half_floats(d, bwd);
    return f ? fa__add_size(fa__mul_size(f, sizeof(float)), 64) : 0;
}

/* The fp32 request on the packed copies: d with packed strides and fp32 storage. The copies start
   at mem (64-byte aligned inside the fa__half_bytes region): q, k, v, o, then d_o, dq, dk, dv. */
static void fa__half_dims(const fa__dims *d, fa__dims *d2, void *region, float *f[8])
{
    float *x = (float *)fa__align64(region);
    size_t qn = fa__r16s((size_t)d->B * d->Hq * d->Sq * d->D), on = fa__r16s((size_t)d->B * d->Hq * d->Sq * d->Dv);
    size_t kn = fa__r16s((size_t)d->B * d->Hkv * d->Sk * d->D), vn = fa__r16s((size_t)d->B * d->Hkv * d->Sk * d->Dv);
    *d2 = *d;
    d2->dtype = FA_F32;
    fa__packed3(d->B, d->Hq, d->Sq, d->D, d2->qs);
    fa__packed3(d->B, d->Hkv, d->Sk, d->D, d2->ks);
    fa__packed3(d->B, d->Hkv, d->Sk, d->Dv, d2->vs);
    fa__packed3(d->B, d->Hq, d->Sq, d->Dv, d2->os);
    f[0] = x; f[1] = f[0] + qn; f[2] = f[1] + kn; f[3] = f[2] + vn;
    f[4] = f[3] + on; f[5] = f[4] + on; f[6] = f[5] + qn; f[7] = f[6] + kn;
}


#ifndef FLASHATTN_NO_BLAS
/* ---- GEMMs on the calling thread --------------------------------------------------------------
   The naive paths run their GEMMs inside their own `threads` workers, so every GEMM must run on the
   thread that calls it, and without touching OpenBLAS's thread count: that count is the program's,
   shared by all its threads (a thread that changed it for a call would change it for every other
   thread meanwhile). OpenBLAS has no per-thread count (openblas_set_num_threads_local, from 0.3.27,
   sets the same process-wide one in its pthreads builds), but from 0.3.21 through 0.3.28 its GEMM
   (interface/gemm.c) runs on the calling thread whenever m * n * k <= 65536 x GEMM_MULTITHREAD_THRESHOLD,
   a build option that is 4 by default and in Debian's packages, before it reads the count. So
   fa__sgemm issues the whole GEMM when OpenBLAS runs it on the caller anyway (a sequential build, a
   pthreads build whose count is 1, or a small product), and otherwise blocks of at most
   FLASHATTN_OPENBLAS_1T_MNK multiply-adds (about 25-35% slower for the score GEMM, a few % for P V).
   A program that changes the count during a call affects only the GEMMs issued after the change. */

/* C = alpha op(A) op(B) + beta C, row-major, with cblas_sgemm's arguments (ta, tb nonzero for
   transposed), on the calling thread only. */
static void fa__sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
#ifdef FLASHATTN__OPENBLAS
    const int64_t L = FLASHATTN_OPENBLAS_1T_MNK;
    int64_t mc, nc, kc, i0, j0, k0;
    int par = openblas_get_parallel();
    if ((double)M * (double)N * (double)K > (double)L && M > 0 && N > 0 && K > 0 &&
        !(par == 0 || (par == 1 && openblas_get_num_threads() == 1))) {
        /* blocks: 64 columns of C; no split of K while that leaves 16 rows a block (the score GEMM),
           else 128 rows and K in parts (P V); columns widened again when M is short (decoding) */
        nc = N < 64 ? N : 64;
        if ((int64_t)K * 16 * nc <= L) {
            kc = K;
            mc = L / (nc * K);
        } else {
            mc = 128;
            kc = L / (mc * nc);
        }
        if (mc > M) mc = M;
        if (kc < 1) kc = 1;
        if (kc > K) kc = K;
        if (L / (mc * kc) > nc) nc = L / (mc * kc);
        if (nc > N) nc = N;
        if (nc < 1) nc = 1;
        for (i0 = 0; i0 < M; i0 += mc)
            for (j0 = 0; j0 < N; j0 += nc)
                for (k0 = 0; k0 < K; k0 += kc) {
                    int m = (int)(M - i0 < mc ? M - i0 : mc), n = (int)(N - j0 < nc ? N - j0 : nc);
                    int kk = (int)(K - k0 < kc ? K - k0 : kc);
                    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                                m, n, kk, alpha, ta ? A + k0 * lda + i0 : A + i0 * lda + k0, lda,
                                tb ? B + j0 * ldb + k0 : B + k0 * ldb + j0, ldb, k0 == 0 ? beta : 1.0f,
                                C + i0 * ldc + j0, ldc);
                }
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                A, lda, B, ldb, beta, C, ldc);
}
#endif

typedef struct fa__naive_plan {
    int nthreads;
    size_t q_floats, score_bytes, pool_bytes, total;
} fa__naive_plan;

/* Memory of a call: the thread bookkeeping, each thread's scale * Q of its head ([Sq][D], 64-byte
   rounded), then the [B][Hq][Sq][Sk] scores. */
static void fa__naive_plan_make(const fa__dims *d, fa__naive_plan *pl)
{
    size_t n;
    memset(pl, 0, sizeof *pl);
    pl->nthreads = fa__nthreads(d, (int64_t)d->B * d->Hq);
    if (d->Sq == 0) return;                     /* a no-op allocates nothing */
    n = fa__mul_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)d->Sq), (size_t)d->Sk);
    pl->score_bytes = fa__mul_size(n, sizeof(float));
    pl->q_floats = fa__mul_size((size_t)d->Sq, (size_t)d->D);
    pl->q_floats = pl->q_floats > SIZE_MAX - 15 ? SIZE_MAX : (pl->q_floats + 15) & ~(size_t)15;
    pl->pool_bytes = fa__pool_bytes(d, pl->nthreads);
    pl->total = fa__add_size(fa__add_size(pl->score_bytes, pl->pool_bytes), 64);
    pl->total = fa__add_size(pl->total, fa__mul_size(fa__mul_size(pl->q_floats, (size_t)pl->nthreads), sizeof(float)));
}

typedef struct fa__naive_ctx {
    const fa__dims *d;
    const fa__naive_plan *pl;
    int isa;
    const float *q, *k, *v;
    float *o, *S, *Q, *scores;
} fa__naive_ctx;

#ifndef FLASHATTN_NO_BLAS
/* 1 when the rows x cols floats (rows `stride` apart) are all finite. */
static int fa__finite_rows(const float *x, int rows, int64_t stride, int cols)
{
    int i, t;
    for (i = 0; i < rows; i++)
        for (t = 0; t < cols; t++) {
            float y = x[i * stride + t];
            if (y - y != 0.0f) return 0;     /* NaN - NaN and inf - inf are NaN */
        }
    return 1;
}
#endif

/* One (batch, head): S = (scale Q) K^T, modifiers and mask, softmax, O = P V. The scale is folded
   into a copy of Q first, as the tiled path does, so that a logit in fp32 range is formed without
   an unscaled q.k overflowing on the way (|q|, |k| near 1e20 with a small scale). */
static void fa__naive_head(void *vctx, int64_t item, int tid)
{
    const fa__naive_ctx *c = (const fa__naive_ctx *)vctx;
    const fa__dims *d = c->d;
    int b = (int)(item / d->Hq), h = (int)(item % d->Hq), g = h / d->group;
    int Sq = d->Sq, Sk = d->Sk, D = d->D, Dv = d->Dv, i, j, t;
    const float *q = c->q + (int64_t)b * d->qs[0] + (int64_t)h * d->qs[1], *k, *v;
    float *o = c->o + (int64_t)b * d->os[0] + (int64_t)h * d->os[1];
    float *S = c->S + (size_t)item * Sq * Sk, *Q = c->Q + (size_t)tid * c->pl->q_floats;
    int mask = fa__has_mask(d);
    if (Sk == 0) {
        for (i = 0; i < Sq; i++) {
            memset(o + i * d->os[2], 0, (size_t)Dv * sizeof(float));
            if (d->lse) d->lse[((int64_t)b * d->Hq + h) * Sq + i] = -INFINITY;
        }
        return;
    }
    k = c->k + (int64_t)b * d->ks[0] + (int64_t)g * d->ks[1];
    v = c->v + (int64_t)b * d->vs[0] + (int64_t)g * d->vs[1];
    for (i = 0; i < Sq; i++)
        for (t = 0; t < D; t++) Q[(size_t)i * D + t] = q[i * d->qs[2] + t] * d->scale;
#ifndef FLASHATTN_NO_BLAS
    if (d->ks[2] >= D && d->ks[2] <= INT_MAX)
        fa__sgemm(0, 1, Sq, Sk, D, 1.0f, Q, D, k, (int)d->ks[2], 0.0f, S, Sk);
    else
#endif
    for (i = 0; i < Sq; i++)
        for (j = 0; j < Sk; j++) {
            const float *qi = Q + (size_t)i * D, *kj = k + j * d->ks[2];
            float acc = 0.0f;
            for (t = 0; t < D; t++) acc += qi[t] * kj[t];
            S[(size_t)i * Sk + j] = acc;
        }
    for (i = 0; i < Sq; i++) {
        float *s = S + (size_t)i * Sk, lse;
        if (mask || fa__has_modifiers(d)) fa__modify_row(d, b, h, i, 0, Sk, s, 1, mask, c->isa);
        if (c->scores)
            memcpy(c->scores + ((size_t)item * Sq + i) * Sk, s, (size_t)Sk * sizeof(float));
        lse = fa__softmax_row(c->isa, s, Sk);
        if (d->lse) d->lse[((int64_t)b * d->Hq + h) * Sq + i] = lse;
    }
#ifndef FLASHATTN_NO_BLAS
    /* 0 * NaN is NaN: with hidden keys (weight 0) a non-finite v would reach, through the GEMM,
       rows that never see its key; the loop below skips zero weights */
    if (d->vs[2] >= Dv && d->os[2] >= Dv && d->vs[2] <= INT_MAX && d->os[2] <= INT_MAX &&
        !(fa__hides_keys(d) && !fa__finite_rows(v, Sk, d->vs[2], Dv)))
        fa__sgemm(0, 0, Sq, Dv, Sk, 1.0f, S, Sk, v, (int)d->vs[2], 0.0f, o, (int)d->os[2]);
    else
#endif
    for (i = 0; i < Sq; i++) {
        float *oi = o + i * d->os[2];
        const float *pi = S + (size_t)i * Sk;
        for (t = 0; t < Dv; t++) oi[t] = 0.0f;
        for (j = 0; j < Sk; j++) {
            const float *vj = v + j * d->vs[2];
            float pj = pi[j];
            if (pj == 0.0f) continue;
            for (t = 0; t < Dv; t++) oi[t] += pj * vj[t];
        }
    }
}

/* What the CPU paths cannot serve of a valid request. */
static fa_status fa__cpu_check_why(const fa__dims *d, const char **why)
{
    /* every storage dtype is served since issue 16 (FA_F16 and FA_BF16 computed in fp32) */
    (void)d; (void)why;
    return FA_OK;
}

static fa_status fa__cpu_check(const fa__dims *d) { return fa__cpu_check_why(d, NULL); }

/* The outputs of a forward call (o, lse, scores) share no byte with each other or with an input
   (q, k, v, bias, alibi_slopes): the workers read inputs and write outputs in no order that would
   make sharing well defined. Each tensor is taken as the range from its first to its last element
   (fa__extent), so an output laid inside another tensor's padding is refused too. */
static fa_status fa__cpu_alias(const fa__dims *d, const void *q, const void *k, const void *v, const void *o,
                               const float *scores, const char **why)
{
    const fa_status bad = FA_ERR_INVALID_ARG;
    const int64_t nq[3] = { d->B, d->Hq, d->Sq }, nk[3] = { d->B, d->Hkv, d->Sk };
    const int64_t nb[4] = { d->B, d->Hq, d->Sq, d->Sk }, nB = d->B;
    uintptr_t in[5][2], out[3][2];
    int64_t lo, hi, rows = (int64_t)d->B * d->Hq * d->Sq, n;
    const size_t es = fa__esize(d->dtype);     /* q, k, v, o in the storage dtype */
    int ni = 0, a, t;
    if (d->Sq == 0) return FA_OK;
    /* inputs; the extents fit int64 (fa__resolve) */
    fa__extent(3, nq, d->qs, d->D, &lo, &hi); fa__range_es((uintptr_t)q, lo, hi, es, &in[ni][0], &in[ni][1]); ni++;
    if (d->Sk > 0) {
        fa__extent(3, nk, d->ks, d->D, &lo, &hi); fa__range_es((uintptr_t)k, lo, hi, es, &in[ni][0], &in[ni][1]); ni++;
        fa__extent(3, nk, d->vs, d->Dv, &lo, &hi); fa__range_es((uintptr_t)v, lo, hi, es, &in[ni][0], &in[ni][1]); ni++;
    }
    if (d->bias) { fa__extent(4, nb, d->bs, 1, &lo, &hi); fa__range((uintptr_t)d->bias, lo, hi, &in[ni][0], &in[ni][1]); ni++; }
    if (d->alibi) { fa__extent(1, &nB, &d->alibi_stride, d->Hq, &lo, &hi); fa__range((uintptr_t)d->alibi, lo, hi, &in[ni][0], &in[ni][1]); ni++; }
    /* outputs: o, lse packed [B][Hq][Sq], scores packed [B][Hq][Sq][Sk] (its count may pass int64) */
    fa__extent(3, nq, d->os, d->Dv, &lo, &hi); fa__range_es((uintptr_t)o, lo, hi, es, &out[0][0], &out[0][1]);
    fa__range((uintptr_t)d->lse, 0, d->lse ? rows : 0, &out[1][0], &out[1][1]);
    n = scores && fa__mul64(rows, d->Sk, &n) ? n : INT64_MAX;
    fa__range((uintptr_t)scores, 0, scores ? n : 0, &out[2][0], &out[2][1]);
    for (t = 0; t < 3; t++)
        for (a = 0; a < ni; a++)
            if (fa__overlap(out[t][0], out[t][1], in[a][0], in[a][1]))
                return fa__why(why, bad, t == 0 ? "o overlaps an input (q, k, v, bias or alibi_slopes); outputs must not share memory with inputs"
                                       : t == 1 ? "lse overlaps an input (q, k, v, bias or alibi_slopes); outputs must not share memory with inputs"
                                                : "scores overlaps an input (q, k, v, bias or alibi_slopes); outputs must not share memory with inputs");
    if (fa__overlap(out[1][0], out[1][1], out[0][0], out[0][1])) return fa__why(why, bad, "lse overlaps o");
    if (fa__overlap(out[2][0], out[2][1], out[0][0], out[0][1]) || fa__overlap(out[2][0], out[2][1], out[1][0], out[1][1]))
        return fa__why(why, bad, "scores overlaps o or lse");
    return FA_OK;
}

/* Every check of a forward call that can fail with FA_ERR_INVALID_ARG or FA_ERR_UNSUPPORTED, in the
   calls' order; FA_OK when none fails. */
static fa_status fa__forward_check(const fa_params *p, const void *q, const void *k, const void *v, const void *o,
                                   const float *scores, fa__dims *d, const char **why)
{
    fa_status st = fa__resolve(p, q, k, v, o, d, why);
    if (st == FA_OK) st = fa__cpu_check_why(d, why);
    if (st == FA_OK) st = fa__cpu_alias(d, q, k, v, o, scores, why);
    return st;
}

FLASHATTN__CPU_DEF const char *fa_explain(const fa_params *p, const void *q, const void *k, const void *v,
                                          const void *o, const float *scores)
{
    fa__dims d;
    const char *why = NULL;
    return fa__forward_check(p, q, k, v, o, scores, &d, &why) == FA_OK ? NULL : why;
}

FLASHATTN__CPU_DEF size_t fa_naive_workspace_bytes(const fa_params *p)
{
    fa__dims d;
    fa__naive_plan pl;
    if (!p || fa__resolve(p, p, p, p, p, &d, NULL) != FA_OK || fa__cpu_check(&d) != FA_OK) return 0;
    fa__naive_plan_make(&d, &pl);
    return d.Sq == 0 ? pl.total : fa__add_size(pl.total, fa__half_bytes(&d, 0));
}

FLASHATTN__CPU_DEF fa_status fa_naive(const fa_params *p, const void *q, const void *k, const void *v,
                                      void *o, float *scores)
{
    fa__dims d, d2;
    fa__naive_plan pl;
    fa__naive_ctx c;
    fa__half_job hj;
    float *hf[8] = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    size_t total;
    void *mem;
    fa_status st = fa__forward_check(p, q, k, v, o, scores, &d, NULL);
    if (st != FA_OK) return st;
    if (d.Sq == 0) return FA_OK;
    fa__naive_plan_make(&d, &pl);
    total = fa__add_size(pl.total, fa__half_bytes(&d, 0));
    if (total == SIZE_MAX || pl.score_bytes == SIZE_MAX || total > fa__phys_bytes())
        return FA_ERR_NO_MEMORY;
    mem = FLASHATTN_MALLOC(total);
    if (!mem) return FA_ERR_NO_MEMORY;
    c.d = &d; c.pl = &pl; c.q = (const float *)q; c.k = (const float *)k; c.v = (const float *)v;
    c.o = (float *)o; c.scores = scores; c.isa = fa__isa();
    c.Q = (float *)((char *)fa__align64(mem) + pl.pool_bytes);
    c.S = c.Q + pl.q_floats * (size_t)pl.nthreads;
    if (d.dtype != FA_F32) {    /* fp32 copies for the GEMMs (fa__half_job) */
        fa__half_dims(&d, &d2, (char *)mem + pl.total, hf);
        hj.K = fa__kernels_for(c.isa); hj.dt = d.dtype; hj.nt = 0;
        fa__half_add(&hj, q, NULL, hf[0], d.qs, d.B, d.Hq, d.Sq, d.D);
        if (d.Sk > 0) {
            fa__half_add(&hj, k, NULL, hf[1], d.ks, d.B, d.Hkv, d.Sk, d.D);
            fa__half_add(&hj, v, NULL, hf[2], d.vs, d.B, d.Hkv, d.Sk, d.Dv);
        }
        fa__half_run(d.pool, &hj, pl.nthreads, fa__align64(mem));
        c.d = &d2; c.q = hf[0]; c.k = hf[1]; c.v = hf[2]; c.o = hf[3];
    }
    /* the GEMMs run on the workers' threads (fa__sgemm); OpenBLAS's thread count is left alone */
    fa__run(d.pool, fa__naive_head, &c, (int64_t)d.B * d.Hq, pl.nthreads, fa__align64(mem));
    if (d.dtype != FA_F32) {
        fa__half_add(&hj, NULL, o, hf[3], d.os, d.B, d.Hq, d.Sq, d.Dv);
        fa__half_run(d.pool, &hj, pl.nthreads, fa__align64(mem));
    }
    FLASHATTN_FREE(mem);
    return FA_OK;
}

/* ============================================================================================== */
/* 6. Merging partial results by log-sum-exp                                              >>merge */
/* ============================================================================================== */

static fa_status fa__merge_check(int rows, int dv, int parts, const void *o_parts, const void *lse_parts,
                                 const void *o, const char **why)
{
    const fa_status bad = FA_ERR_INVALID_ARG;
    if (rows < 0) return fa__why(why, bad, "rows must not be negative");
    if (dv < 1) return fa__why(why, bad, "dv must be at least 1");
    if (parts < 1) return fa__why(why, bad, "parts must be at least 1");
    if (!o_parts) return fa__why(why, bad, "o_parts is NULL");
    if (!lse_parts) return fa__why(why, bad, "lse_parts is NULL");
    if (rows > 0 && !o) return fa__why(why, bad, "o is NULL (required when rows > 0)");
    return FA_OK;
}

/* The parts of a CPU merge with rows > 0: every entry set, and the outputs either one of the parts
   (o one of o_parts, lse one of lse_parts: a row is read before it is written) or apart from all of
   them and from each other. */
static fa_status fa__merge_parts(int rows, int dv, int parts, const float *const *op, const float *const *lp,
                                 const float *o, const float *lse, const char **why)
{
    const fa_status bad = FA_ERR_INVALID_ARG;
    uintptr_t oa, ob, la, lb, a, b;
    int p;
    for (p = 0; p < parts; p++) {
        if (!op[p]) return fa__why(why, bad, "an entry of o_parts is NULL");
        if (!lp[p]) return fa__why(why, bad, "an entry of lse_parts is NULL");
    }
    fa__range((uintptr_t)o, 0, (int64_t)rows * dv, &oa, &ob);
    fa__range((uintptr_t)lse, 0, lse ? rows : 0, &la, &lb);
    if (fa__overlap(oa, ob, la, lb)) return fa__why(why, bad, "lse overlaps o");
    for (p = 0; p < parts; p++) {
        fa__range((uintptr_t)op[p], 0, (int64_t)rows * dv, &a, &b);
        if (op[p] != o && fa__overlap(oa, ob, a, b))
            return fa__why(why, bad, "o overlaps an entry of o_parts without being it (o may be one of them, or apart)");
        if (fa__overlap(la, lb, a, b)) return fa__why(why, bad, "lse overlaps an entry of o_parts");
        fa__range((uintptr_t)lp[p], 0, rows, &a, &b);
        if (lse && lp[p] != lse && fa__overlap(la, lb, a, b))
            return fa__why(why, bad, "lse overlaps an entry of lse_parts without being it (lse may be one of them, or apart)");
        if (fa__overlap(oa, ob, a, b)) return fa__why(why, bad, "o overlaps an entry of lse_parts");
    }
    return FA_OK;
}

/* One row of the merge, the log-sum-exp rule written once: part p holds the row's o_p (op[p] row r)
   and its log-sum-exp as a reference max and a sum, m_p + log l_p (mp[p][r] and lp[p][r]; lp NULL:
   l_p = 1, mp is the lse). With M = max m_p and w_p = exp(m_p - M) l_p: o = sum_p w_p o_p / sum_p w_p
   and lse = M + log sum_p w_p; a part with m_p = -INFINITY adds nothing. fa_merge has the lse of
   each part; the tiled path keeps m and l apart, since m + log l in fp32 would lose log l to the
   rounding of a large m. o may alias any op[p] row (read before written, element by element).
   A NaN m_p (a part's row reached by a NaN) makes the merged row NaN. */
static void fa__merge_row(int dv, int parts, const float *const *op, const float *const *mp, const float *const *lp,
                          int64_t r, float *orow, float *lse)
{
    float mx = -INFINITY, sum = 0.0f, w[64], a[64];
    int p, p0, pn, t, t0, tn, u;
    for (p = 0; p < parts; p++) mx = fa__lse_max(mx, mp[p][r]);   /* once NaN, mx stays NaN */
    if (mx == -INFINITY) {
        for (t = 0; t < dv; t++) orow[t] = 0.0f;
        if (lse) lse[r] = -INFINITY;
        return;
    }
    for (p = 0; p < parts; p++)
        sum += fa__lse_weight(mp[p][r], mx, lp ? lp[p][r] : 1.0f);
    /* each element sums its parts in part order: the weights 64 parts at a time (each computed
       once), the elements 64 at a time in a local accumulator, written back after their reads */
    for (p0 = 0; p0 < parts; p0 += 64) {
        pn = parts - p0 < 64 ? parts - p0 : 64;
        for (p = 0; p < pn; p++)
            w[p] = fa__lse_weight(mp[p0 + p][r], mx, lp ? lp[p0 + p][r] : 1.0f);
        for (t0 = 0; t0 < dv; t0 += 64) {
            tn = dv - t0 < 64 ? dv - t0 : 64;
            for (u = 0; u < tn; u++) a[u] = p0 ? orow[t0 + u] : 0.0f;
            for (p = 0; p < pn; p++) {
                const float *x = op[p0 + p] + r * (int64_t)dv + t0;
                if (mp[p0 + p][r] == -INFINITY) continue;
                for (u = 0; u < tn; u++) a[u] += w[p] * x[u];
            }
            for (u = 0; u < tn; u++) orow[t0 + u] = a[u];
        }
    }
    for (t = 0; t < dv; t++) orow[t] /= sum;
    if (lse) lse[r] = fa__lse_of(mx, sum);
}

FLASHATTN__CPU_DEF const char *fa_explain_merge(int rows, int dv, int parts, const float *const *o_parts,
                                                const float *const *lse_parts, const float *o, const float *lse)
{
    const char *why = NULL;
    if (fa__merge_check(rows, dv, parts, o_parts, lse_parts, o, &why) != FA_OK) return why;
    if (rows == 0) return NULL;
    return fa__merge_parts(rows, dv, parts, o_parts, lse_parts, o, lse, &why) != FA_OK ? why : NULL;
}

FLASHATTN__CPU_DEF fa_status fa_merge(int rows, int dv, int parts, const float *const *o_parts,
                                      const float *const *lse_parts, float *o, float *lse)
{
    int64_t r;
    fa_status st = fa__merge_check(rows, dv, parts, o_parts, lse_parts, o, NULL);
    if (st != FA_OK) return st;
    if (rows == 0) return FA_OK;
    if ((st = fa__merge_parts(rows, dv, parts, o_parts, lse_parts, o, lse, NULL)) != FA_OK) return st;
    for (r = 0; r < rows; r++) fa__merge_row(dv, parts, o_parts, lse_parts, NULL, r, o + r * (int64_t)dv, lse);
    return FA_OK;
}

/* ============================================================================================== */
/* 7. CPU: the tiled online-softmax path                                                  >>tiled */
/* ============================================================================================== */

/* The tiling of a call, made by one function for fa_tiled and fa_tiled_workspace_bytes alike.
   A tile is `hpt` query heads (of one kv head) x `nq` query rows of one batch: hpt = 1 and nq =
   block_q normally; with few query rows (decoding) and block_q left to the library, the heads that
   share a kv head go in one tile, so each K/V row is read once for all of them.

   What a row computes depends on the shape only (the call's p less its threads and pool, and not
   on the batch or the number of groups of heads), never on the tiling, so nq may follow the thread
   count for balance:
   - key blocks start at absolute multiples of bk (fa__tile_blocks), so a row meets the same blocks
     in any tile (a block clipped to the tile's keys loses only keys its rows do not see, and a
     block a vector's rows do not see at all is skipped, which is the same as visiting it);
   - every lane decides its own lazy rescale (fa__online_c), so a row's bits do not depend on the
     rows that share its vector;
   - P V's accumulate mode of a vector comes from its own rows and the block's full extent
     (fa__pv_acc);
   - the row-major decode kernels serve a call when all its tiles are short (rows <= rows_max), a
     property of the shape, not of one tile; library tiles are multiples of 16 rows of one head.
   The key axis is split for decoding (at most FA__SPLIT_ROWS rows per head, or packed GQA heads)
   and only there, in `nchunk` chunks of `cb` blocks from key 0 (fixed by Sk and bk), whose partial
   results are merged in chunk order by log-sum-exp (fa__merge_row, section 6), by whichever thread
   finishes a tile's last chunk; a chunk a row does not see gives it m = -INFINITY, which adds
   exactly nothing. */

typedef struct fa__tiled_plan {
    int nq, bk, hpt, rows, ld, rowmajor, nchunk, cb, nthreads;
    int sld;                    /* lanes of St and Pp's allocation: ld, at least 64 on AMX (two panel buffers) */
    int64_t qtiles, tiles, items;
    size_t lane_floats, thread_floats, part_floats, pool_bytes, total;
    size_t half_off;            /* half storage: where a thread's conversion buffers start (floats) */
    int dpbf16;                 /* bf16 products on vdpbf16ps (section 3, fa__gemm_bf16_avx512) */
    int amx, np16;              /* ... on AMX-BF16 tiles where the process may (fa__qk_amx); key pairs per block, to 16 */
    int vt_all;                 /* AMX: every block's Vt packed once per call (fa__tiled_vt_get), not per tile */
    int ranges;                 /* AMX: items by kv head, a run of them per thread (FA__AMX_RANGES), pool_bytes has their bounds */
    int64_t vt_blocks;          /* ... that many blocks (B Hkv ceil(Sk / bk)), vt_floats floats of them and their flags */
    size_t vt_floats;
} fa__tiled_plan;

static size_t fa__round16(size_t n) { return (n + 15) & ~(size_t)15; }

static void fa__tiled_plan_make(const fa__dims *d, const fa__kernels *K, fa__tiled_plan *pl)
{
    int64_t want = fa__want_threads(d), nb;
    size_t f, ld;
    memset(pl, 0, sizeof *pl);
    if (d->Sq == 0) return;
    pl->hpt = 1;
    if (d->block_q == 0 && d->group > 1 && d->Sq <= 16) {
        int h;
        for (h = d->group; h > 1; h--)
            if (d->group % h == 0 && (int64_t)h * d->Sq <= 64) break;
        pl->hpt = h;
    }
    if (pl->hpt > 1) pl->nq = d->Sq;
    else if (d->block_q) pl->nq = (d->block_q < d->Sq ? d->block_q : d->Sq) < INT_MAX - 15 ?   /* ld fits int */
                                  (d->block_q < d->Sq ? d->block_q : d->Sq) : INT_MAX - 15;
    else {
        /* Tall tiles (multiples of the 48-lane register panel) re-read K/V less often: 480 rows
           for D + Dv >= 192, 192 below (measured best on a 2 MiB-L2 Xeon), at most ~1 MiB of
           workspace per thread; shorter when that would leave threads short of work: up to 4
           threads want 4 tall tiles (2 short ones) each, more threads 8 tiles each, as dynamic
           scheduling leaves up to a tile per thread idle at the end (16 threads on a 16-core
           Xeon: S=1024 ran 1.3-1.7x faster on 48 rows than on 96, S=2048 on 96 than on 192,
           S=4096 D=128 1.2-1.4x on 192 than on 480); 48 rows stay while every thread gets two,
           unless 32 rows give 8 each (S=512 at 16 threads: 1.4x faster on 32 rows than on 48,
           where the short count also split the keys), then 32 rows at two each; 16-row tiles
           only when neither gives two (S=128 at 16 threads: 32 rows ~10% faster than 16). Every
           candidate is a multiple of 16 (the results do not depend on the choice, see above). On
           AMX 64 rows take 48's place (two whole 32-lane panels, FA__AMX_TILE_ROWS), and for D + Dv >= 192
           beyond 4 threads 32's place at 8 a thread, as 64 at 4 (FA__AMX_TALL64). */
        static const int cand_f[8] = FA__TILE_ROWS, cand_a[8] = FA__AMX_TILE_ROWS;
        /* bf16 on AMX tiles (pl->amx below, decided before the rows: its condition but rowmajor) */
        const int am = K->gemm_bf16 && K->amx_qk && d->dtype == FA_BF16 && d->D % 32 == 0;
        const int *cand = am ? cand_a : cand_f, mid = cand[5];
        int c, top = (int64_t)d->D + d->Dv >= 192 ? 480 : 192, fallback = 0;
        int64_t tiles;
        int64_t cap = 262144 / ((int64_t)d->D + d->Dv + 67);
        for (c = 0; c < 8; c++) {
            int64_t e = cand[c] < d->Sq ? cand[c] : d->Sq;
            pl->nq = (int)e;
            if (cand[c] > top || (cand[c] > 16 && cand[c] > cap)) continue;
            tiles = (int64_t)d->B * d->Hq * ((d->Sq + e - 1) / e);
            if (tiles >= (want > 4 ? (am ? FA__AMX_TPT : 8) : cand[c] > 96 ? 4 : 2) * want) {
                if (FA__AMX_TALL64 && am && want > 4 && cand[c] == 32 && d->Sq > 32 && 64 <= cap && top == 480)
                    pl->nq = d->Sq < 64 ? d->Sq : 64;   /* FA__AMX_TALL64: half the tiles, twice as tall */
                break;
            }
            if ((cand[c] == mid || cand[c] == 32) && !fallback && tiles >= 2 * want) fallback = (int)e;
            if (cand[c] == 32 && fallback) { pl->nq = fallback; break; }
        }
    }
    /* a library tiling's last tile takes a remainder of under 16 rows (one lane vector) rather
       than leaving it a tile of its own, which would re-read K/V for a part-empty vector */
    pl->qtiles = ((int64_t)d->Sq + pl->nq - 1) / pl->nq;
    pl->rows = pl->hpt * pl->nq;
    if (!d->block_q && pl->hpt == 1 && d->Sq > pl->nq && d->Sq % pl->nq < 16) {
        pl->qtiles = d->Sq / pl->nq;
        pl->rows = pl->nq + d->Sq % pl->nq;
    }
    pl->rowmajor = K->rows_max > 0 && pl->rows <= K->rows_max;
    /* bf16 products on vdpbf16ps; on AMX tiles (where the CPU has them, whether or not the process
       may use them: the plan and its counts do not depend on the permission), with their own key
       block and lanes to a multiple of 32 (panels of two lane vectors, fa__qk_amx) */
    pl->dpbf16 = K->gemm_bf16 && d->dtype == FA_BF16 && d->D % 2 == 0 && !pl->rowmajor;
    pl->amx = pl->dpbf16 && K->amx_qk && d->D % 32 == 0;
    pl->bk = d->block_k ? d->block_k : pl->amx ? FA__AMX_BLOCK_K : FA__BLOCK_K;
    if (pl->bk > d->Sk) pl->bk = d->Sk > 0 ? d->Sk : 1;
    ld = pl->amx ? (fa__round16((size_t)pl->rows) + 31) / 32 * 32 : fa__round16((size_t)pl->rows);
    pl->ld = (int)ld;
    pl->sld = pl->amx && ld < 64 ? 64 : (int)ld;
    pl->tiles = pl->qtiles * d->B * (d->Hq / pl->hpt);
    nb = ((int64_t)d->Sk + pl->bk - 1) / pl->bk;
    pl->nchunk = 1;
    pl->cb = nb > 0 ? (int)nb : 1;
    if (pl->hpt > 1 || d->Sq <= FA__SPLIT_ROWS) {
        int64_t cb = (nb + FA__MAX_CHUNKS - 1) / FA__MAX_CHUNKS, least = ((int64_t)FA__CHUNK_KEYS + pl->bk - 1) / pl->bk;
        if (cb < least) cb = least;
        if (nb > cb) {
            pl->cb = (int)cb;
            pl->nchunk = (int)((nb + cb - 1) / cb);
        }
    }
    pl->items = pl->tiles * pl->nchunk;
    pl->nthreads = fa__nthreads(d, pl->items);
    /* per thread: the rule's lane arrays, Qt [D][ld], St [bk][sld], Ot [Dv][ld], m, l and the alphas [ld] */
    pl->lane_floats = fa__mul_size(ld, FA__LANE_FLOATS);
    f = fa__add_size(pl->lane_floats, fa__mul_size(ld, (size_t)d->D));
    f = fa__add_size(f, fa__mul_size((size_t)pl->sld, (size_t)pl->bk));
    f = fa__add_size(f, fa__mul_size(ld, (size_t)d->Dv));
    f = fa__add_size(f, 3 * ld);
    /* half storage (FA_F16, FA_BF16): the K/V block in fp32, K [bk][D] and V [bk][Dv], converted
       once per block and tile, and 16 rows of Q [16][D] and of o [16][Dv] on their way in and out */
    if (d->dtype != FA_F32) {
        size_t h = fa__add_size(fa__round16(fa__mul_size((size_t)pl->bk, (size_t)d->D)),
                                fa__round16(fa__mul_size((size_t)pl->bk, (size_t)d->Dv)));
        h = fa__add_size(h, fa__mul_size(16, fa__add_size((size_t)d->D, (size_t)d->Dv)));
        /* vdpbf16ps: Q's words in Qt's place and V's in Vc's; the panel probabilities Pp [ceil(bk/2)][ld]
           (AMX: also a panel's Pp [np16][32], fewer; and Vt [Dv][np16], key pairs to a multiple of 16) */
        pl->np16 = (int)fa__round16(((size_t)pl->bk + 1) / 2);
        if (pl->dpbf16) h = fa__add_size(h, fa__round16(fa__mul_size((size_t)pl->sld, ((size_t)pl->bk + 1) / 2 + (pl->amx ? 16 : 0))));
        if (pl->amx) h = fa__add_size(h, fa__mul_size((size_t)d->Dv, (size_t)pl->np16));
        pl->half_off = f;
        f = fa__add_size(f, h);
    }
    pl->thread_floats = f == SIZE_MAX ? SIZE_MAX : fa__round16(f);
    /* AMX with more than one tile per kv head (FA__AMX_VT_ALL): V's words transposed once per call,
       Vt [B][Hkv][blocks][Dv][np16] and a state per block, O(Sk Dv) like V. Made by the tiles as they
       need it (FA__AMX_VT_LAZY), or by a pass before them from Sq Sk >= 2^20 (below, that pass's own
       start of the threads cost more than it saved, S = 512 on the Xeon; on a pool too, where the
       pass starts no thread: up to 1.9x slower at S <= 1024 at 16 threads) */
    if (FA__AMX_VT_ALL && pl->amx && d->Sk > 0 && pl->qtiles * (d->Hq / d->Hkv) / pl->hpt >= 2 &&
        (FA__AMX_VT_LAZY || (int64_t)d->Sq * d->Sk >= ((int64_t)1 << 20))) {
        pl->vt_all = 1;
        pl->vt_blocks = (int64_t)d->B * d->Hkv * nb;
        pl->vt_floats = fa__add_size(fa__round16(fa__mul_size(fa__mul_size((size_t)pl->vt_blocks, (size_t)d->Dv), (size_t)pl->np16)),
                                     fa__round16((size_t)pl->vt_blocks));
    }
    /* split keys: each chunk's o [rows][Dv], m and l [rows]; then a count of done chunks per tile */
    if (pl->nchunk > 1)
        pl->part_floats = fa__add_size(fa__round16(fa__mul_size(fa__mul_size((size_t)pl->items, (size_t)pl->rows),
                                                                (size_t)d->Dv + 2)),
                                       fa__round16(fa__mul_size((size_t)pl->tiles, (sizeof(int) + 3) / sizeof(float))));
    pl->ranges = FA__AMX_RANGES && pl->amx && pl->nchunk == 1 && pl->hpt == 1 && !fa__has_mask(d) && pl->nq <= FA__AMX_RANGES_ROWS;
    pl->pool_bytes = fa__add_size(fa__pool_bytes(d, pl->nthreads), pl->ranges ? fa__round16((size_t)pl->nthreads * 2) * 8 : 0);
    pl->total = fa__add_size(fa__mul_size(fa__add_size(fa__add_size(fa__mul_size(pl->thread_floats, (size_t)pl->nthreads),
                                                                    pl->part_floats), pl->vt_floats), sizeof(float)),
                             fa__add_size(pl->pool_bytes, 64));
}

typedef struct fa__tiled_ctx {
    const fa__dims *d;
    const fa__tiled_plan *pl;
    const fa__kernels *K;
    const float *q, *k, *v;
    float *o, *ws, *parts;
    int *done;                  /* split keys: chunks done per tile, under mu (NULL: merge apart) */
    pthread_mutex_t *mu;
    const uint16_t *qh, *kh, *vh;   /* half storage: the tensors (q, k, v, o above are then NULL) */
    uint16_t *oh;
    int amx;                        /* the plan's AMX tiles, and the process may use them */
    uint32_t *vt;                   /* pl->vt_all: every block's Vt, then an int per block: its V is finite */
} fa__tiled_ctx;

/* Where tile `tile` sits: batch b, first head h0, first query row i0, rows per head nqr. */
static void fa__tile_pos(const fa__dims *d, const fa__tiled_plan *pl, int64_t tile, int *b, int *h0,
                         int64_t *i0, int *nqr)
{
    int64_t hg = d->Hq / pl->hpt, per = d->B * hg;
    int64_t qt = pl->qtiles - 1 - tile / per, bh = tile % per;     /* the longest causal rows first */
    *b = (int)(bh / hg);
    *h0 = (int)(bh % hg) * pl->hpt;
    *i0 = qt * pl->nq;
    *nqr = (int)((qt == pl->qtiles - 1 ? d->Sq : *i0 + pl->nq) - *i0);
}

/* P V's accumulate mode (fa__gemm's acc) for lane vector v and the key block [f0, f1) (its full
   extent, not its part in this tile): 1, plain FMAs, when every row of the vector sees every key of
   the block; else 2, zero weights left out (their V may be a hidden key's NaN). */
static int fa__pv_acc(const fa__rule_lanes *ln, int v, int64_t f0, int64_t f1)
{
    int u;
    for (u = 16 * v; u < 16 * v + 16; u++)
        if (ln->lo[u] > f0 || ln->hi[u] < f1) return 2;
    return 1;
}

static void fa__tiled_merge(void *vctx, int64_t tile, int tid);

/* pl->vt_all: block `item` of [B][Hkv][blocks], V's words over its whole extent transposed into Vt
   (fa__vt_pack_h); 1 if every value is finite (else Vt's words are not used) */
static int fa__tiled_vt_make(const fa__tiled_ctx *c, int64_t item, uint32_t *Vt)
{
    const fa__dims *d = c->d;
    const fa__tiled_plan *pl = c->pl;
    int64_t nb = (d->Sk + pl->bk - 1) / pl->bk, kb = item % nb, bg = item / nb, f0 = kb * pl->bk;
    int64_t f1 = f0 + pl->bk < d->Sk ? f0 + pl->bk : d->Sk;
    const uint16_t *v = c->vh + (bg / d->Hkv) * d->vs[0] + (bg % d->Hkv) * d->vs[1] + f0 * d->vs[2];
    return c->K->amx_vt_h(v, d->vs[2], (int)(f1 - f0), d->Dv, Vt, pl->np16);
}

/* the states of pl->vt_all's blocks: 0 not made, 1 being made, 2 made (V finite), 3 made (V not) */
static int *fa__tiled_vt_state(const fa__tiled_ctx *c)
{
    return (int *)(c->vt + fa__round16((size_t)c->pl->vt_blocks * c->d->Dv * c->pl->np16));
}

/* the pass before the tiles (FA__AMX_VT_LAZY 0): block `item`'s Vt and its state */
static void fa__tiled_vt(void *vctx, int64_t item, int tid)
{
    const fa__tiled_ctx *c = (const fa__tiled_ctx *)vctx;
    int fin;
    (void)tid;      /* a pool callback's signature */
    fin = fa__tiled_vt_make(c, item, c->vt + (size_t)item * c->d->Dv * c->pl->np16);
    fa__tiled_vt_state(c)[item] = fin ? 2 : 3;
}

/* pl->vt_all: block blk's Vt, whether its V is finite (*fin) and whether this call made it (*made).
   With FA__AMX_VT_LAZY the first tile that needs a block claims it and makes it into the shared Vt; a
   tile that finds it being made makes its own copy in `own` (the same words), so that no tile waits on
   another. */
static const uint32_t *fa__tiled_vt_get(const fa__tiled_ctx *c, int64_t blk, uint32_t *own, int *fin, int *made)
{
    int *st = fa__tiled_vt_state(c) + blk, s;
    uint32_t *vt = c->vt + (size_t)blk * c->d->Dv * c->pl->np16;
#if defined(__GNUC__) || defined(__clang__)
    *made = 1;
    s = __atomic_load_n(st, __ATOMIC_ACQUIRE);
#ifdef FA__AMX_VT_TEST_OWN
    if (blk & 1) s = 1;     /* tests only: every other block as if another tile were making it */
#endif
    if (s == 0) {
        int z = 0;
        if (__atomic_compare_exchange_n(st, &z, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            *fin = fa__tiled_vt_make(c, blk, vt);
            __atomic_store_n(st, *fin ? 2 : 3, __ATOMIC_RELEASE);
            return vt;
        }
        s = z;
    }
#else
    *made = 1;
    s = FA__AMX_VT_LAZY ? 1 : *st;      /* no atomics: every tile its own copy */
#endif
    if (s >= 2) { *fin = s == 2; *made = 0; return vt; }
    *fin = fa__tiled_vt_make(c, blk, own);
    return own;
}

/* block blk's Vt if it is made (for the prefetch), else NULL */
static const uint32_t *fa__tiled_vt_ready(const fa__tiled_ctx *c, int64_t blk)
{
#if defined(__GNUC__) || defined(__clang__)
    if (__atomic_load_n(fa__tiled_vt_state(c) + blk, __ATOMIC_ACQUIRE) == 2)
        return c->vt + (size_t)blk * c->d->Dv * c->pl->np16;
#else
    (void)c; (void)blk;
#endif
    return NULL;
}

/* One tile over one chunk of its key blocks: pack Q^T, walk K/V in blocks (scores, the rule where
   needed, online softmax, P V), then write o and lse, or the chunk's partials. */
#define FA__QOFF(r) ((int64_t)b * d->qs[0] + (int64_t)(h0 + (r) / nqr) * d->qs[1] + (i0 + (r) % nqr) * d->qs[2])
#define FA__QROW(r) (c->q + FA__QOFF(r))
static void fa__tiled_item(void *vctx, int64_t item, int tid)
{
    const fa__tiled_ctx *c = (const fa__tiled_ctx *)vctx;
    const fa__dims *d = c->d;
    const fa__tiled_plan *pl = c->pl;
    const fa__kernels *K = c->K;
    /* FA__AMX_RANGES: item u is tile u % qtiles of head u / qtiles (fa__tile_pos's tile numbers are by row, heads inside) */
    int64_t tile = FA__AMX_RANGES == 1 && pl->ranges ? item % pl->qtiles * (d->B * d->Hq) + item / pl->qtiles : item / pl->nchunk;
    int64_t i0, klo, khi, kb, kb0, kb1, ld = pl->ld, bk = pl->bk;
    int ch = (int)(item % pl->nchunk), b, h0, nqr, nr, nv, r, t, D = d->D, Dv = d->Dv;
    /* P V's mode: 1 without hidden keys, 2 with a bias, per vector (fa__pv_acc) with the position rule */
    int masks = fa__has_mask(d), acc_all = !fa__hides_keys(d) ? 1 : d->bias ? 2 : 0;
    float *lanes = c->ws + (size_t)tid * pl->thread_floats, *Qt = lanes + pl->lane_floats, *St = Qt + ld * D;
    float *Ot = St + (int64_t)pl->sld * bk, *m = Ot + ld * Dv, *l = m + ld, *tmp = l + ld;
    const float *kbase = NULL, *vbase = NULL, *kblk, *vblk;
    const uint16_t *khb = NULL, *vhb = NULL;
    int64_t ks = d->ks[2], vs = d->vs[2], kst, vst;
    /* half storage: the block's K and V converted to fp32 (Kc, Vc), Q and o through Qc, Oc */
    const int half = d->dtype != FA_F32;
    float *Kc = half ? lanes + pl->half_off : NULL, *Vc = half ? Kc + fa__round16((size_t)bk * D) : NULL;
    float *Qc = half ? Vc + fa__round16((size_t)bk * Dv) : NULL, *Oc = half ? Qc + 16 * (size_t)D : NULL;
    /* vdpbf16ps (pl->dpbf16): Q's words in Qt, V's in Vc, P's in Pp */
    uint32_t *Pp = pl->dpbf16 ? (uint32_t *)(Oc + 16 * (size_t)Dv) : NULL, *Qp = (uint32_t *)Qt, *Vp = (uint32_t *)Vc;
    uint32_t *Vown = pl->amx ? Pp + fa__round16((size_t)pl->sld * (((size_t)bk + 1) / 2 + 16)) : NULL;
    const uint32_t *Vt = Vown, *vt_next = NULL;
    int vfin = 0, amx_pf = 0;
#ifdef FA__HAVE_AMX
    /* AMX's pipeline across blocks: a panel's P V not yet run (pend) and its operands, the next block's
       first scores taken ahead (la) and their block, panel and keys; items so far (buffer parity) */
    fa__amx_job ajob[2];
    int amx_it = 0, pend = 0, pend_nv = 0, la = 0, la_pv = 0, la_va = 0, la_vb = 0, la_nkq = 0;
    int64_t la_f0 = -1;
    const uint32_t *pend_vt = NULL;
    uint32_t *pend_pp = NULL;
    float *pend_op = NULL;
#define FA__AMX_FLUSH                                                                            \
    do {                                                                                         \
        if (pend) {                                                                              \
            K->amx_pv_job(pend_vt, pl->np16, Dv, pend_pp, pend_op, pend_nv, &pf, &ajob[0]);      \
            K->amx_run(ajob, 1);                                                                 \
            pend = 0;                                                                            \
        }                                                                                        \
    } while (0)
#endif
    fa__rule_lanes ln;
    fa__pf pf;
    uint64_t otz = 0;       /* otlazy: the AMX panels whose O is zeroed */
    const int otlazy = c->amx && !pl->rowmajor && ld <= 64 * 32;
#define FA__OTZ(pnl)                                                                             \
    do {                                                                                         \
        if (otlazy && !(otz >> (pnl) & 1u)) {                                                    \
            memset(Ot + (size_t)(pnl) * 32 * Dv, 0, (size_t)32 * Dv * sizeof(float));            \
            otz |= (uint64_t)1 << (pnl);                                                         \
        }                                                                                        \
    } while (0)

    FA__PROF_AT(tid, 1);
    fa__tile_pos(d, pl, tile, &b, &h0, &i0, &nqr);
    FA__PROF_TILE(tid, b, h0);
    nr = pl->hpt * nqr;
    nv = (nr + 15) / 16;
    /* k, v may be NULL when Sk == 0: no arithmetic on them then */
    if (d->Sk > 0) {
        int64_t koff = (int64_t)b * d->ks[0] + (int64_t)(h0 / d->group) * d->ks[1];
        int64_t voff = (int64_t)b * d->vs[0] + (int64_t)(h0 / d->group) * d->vs[1];
        if (half) { khb = c->kh + koff; vhb = c->vh + voff; }
        else { kbase = c->k + koff; vbase = c->v + voff; }
    }
    fa__tile_blocks(d, i0, i0 + nqr, bk, &kb0, &kb1, &klo, &khi);
    if (kb0 < (int64_t)ch * pl->cb) kb0 = (int64_t)ch * pl->cb;
    if (kb1 > (int64_t)(ch + 1) * pl->cb) kb1 = (int64_t)(ch + 1) * pl->cb;
    for (r = 0; r < nv * 16; r++) { m[r] = -INFINITY; l[r] = 0.0f; }
    /* Q and O row-major for the dot-product kernels (St's padding lanes, which they never write,
       hold finite values: zeroed once per call, fa_tiled), or transposed; on AMX each panel's O
       zeroed just before its first use (otz, FA__OTZ), in L1, not the whole tile's up front (480 x 128
       floats at D = 128: 7% of a 1-thread S = 512 call on the development machine's AMX) */
    if (!otlazy) memset(Ot, 0, (size_t)Dv * (pl->rowmajor ? (size_t)nr : (size_t)ld) * sizeof(float));
    if (kb0 < kb1) {
        if (pl->rowmajor) {
#if defined(__GNUC__) && FA__HSTART > 0
            if (half && K->dots_h) {
                /* the chunk's first FA__HSTART keys of K and V toward the L1 before its first block: the
                   decode kernels prefetch FA__AHEAD_HALF keys ahead of themselves only from there on */
                int64_t j0 = kb0 * bk > klo ? kb0 * bk : klo, j1 = j0 + FA__HSTART < khi ? j0 + FA__HSTART : khi, j;
                int64_t e;
                for (j = j0; j < j1; j++) {
                    for (e = 0; e < D; e += 32) __builtin_prefetch((const char *)(khb + j * ks + e), 0, 3);
                    for (e = 0; e < Dv; e += 32) __builtin_prefetch((const char *)(vhb + j * vs + e), 0, 3);
                }
            }
#endif
            for (r = 0; r < nr; r++) {
                if (half) K->h2f(d->dtype, c->qh + FA__QOFF(r), Qt + r * D, D);
                K->scale(Qt + r * D, half ? Qt + r * D : FA__QROW(r), D, d->scale);
            }
        } else {
            int r0, u;
            for (r0 = 0; r0 < nv * 16; r0 += 16) {
                const float *qp[16];
                if (pl->dpbf16) {
                    const uint16_t *qw[16];
                    for (u = 0; u < 16; u++) qw[u] = r0 + u < nr ? c->qh + FA__QOFF(r0 + u) : NULL;
                    if (c->amx)     /* panels of 32 lanes, each its own [D/2][32] (fa__qk_amx) */
                        K->qpack_bf16(qw, D / 2, Qp + (size_t)(r0 / 32) * 32 * (D / 2) + r0 % 32, 32);
                    else
                        K->qpack_bf16(qw, D / 2, Qp + r0, ld);
                    continue;
                }
                for (u = 0; u < 16; u++) {
                    qp[u] = r0 + u < nr ? (half ? Qc + (size_t)u * D : FA__QROW(r0 + u)) : NULL;
                    if (half && qp[u]) K->h2f(d->dtype, c->qh + FA__QOFF(r0 + u), Qc + (size_t)u * D, D);
                }
                K->pack16(qp, D, d->scale, Qt + r0, ld);
            }
        }
        fa__lanes_fill(d, b, h0, i0, nqr, nr, nv * 16, lanes, &ln);
    }
#ifdef FA__HAVE_AMX
    if (c->amx) fa__amx_begin();
#endif

    for (kb = kb0; kb < kb1; kb++) {
        int64_t f0 = kb * bk, f1 = f0 + bk < d->Sk ? f0 + bk : d->Sk;      /* the block's full extent */
        int64_t k0 = f0 > klo ? f0 : klo, k1 = f1 < khi ? f1 : khi;          /* its keys in this tile */
        int nk = (int)(k1 - k0), mask = masks && !fa__block_unmasked(d, i0, i0 + nqr, k0, k1), v0 = 0, v1 = nv;
        int p0, pe, j;
        if (half && pl->rowmajor && !K->dots_h) {   /* decoding: the half block streamed once, converted in L1 */
            for (j = 0; j < nk; j++) {
                K->h2f(d->dtype, khb + (k0 + j) * ks, Kc + (size_t)j * D, D);
                K->h2f(d->dtype, vhb + (k0 + j) * vs, Vc + (size_t)j * Dv, Dv);
            }
        }
        kblk = half ? Kc : kbase + k0 * ks; kst = half ? D : ks;
        vblk = half ? Vc : vbase + k0 * vs; vst = half ? Dv : vs;
        if (pl->rowmajor) {
            if (half && K->dots_h) K->dots_h(d->dtype, Qt, nr, khb + k0 * ks, ks, nk, D, St, ld);   /* K as stored */
            else K->dots(Qt, nr, kblk, kst, nk, D, St, ld);
            if (ln.mods || mask) fa__modify_tile(K, &ln, 0, St, ld, 1, k0, nk, mask);
            K->online(St, ld, nk, 1, m, l, Ot, ld, 0, tmp);
            for (r = 0; r < nr; r++)
                if (tmp[r] != 1.0f) K->scale(Ot + r * Dv, Ot + r * Dv, Dv, tmp[r]);
            if (half && K->pv_rows_h) K->pv_rows_h(d->dtype, St, ld, nr, vhb + k0 * vs, vs, nk, Ot, Dv);
            else K->pv_rows(St, ld, nr, vblk, vst, nk, Ot, Dv);
            continue;
        }
        if (mask && pl->hpt == 1) {
            /* a block on the mask's edge: only the lane vectors holding rows that see one of its
               keys (fa__key_rows, a contiguous run) */
            int64_t ra, rb;
            fa__key_rows(d, k0, k1, &ra, &rb);
            ra = ra > i0 ? ra - i0 : 0;
            rb = rb < i0 + nqr ? rb - i0 : nqr;
            if (ra >= rb) continue;
            v0 = (int)(ra / 16); v1 = (int)((rb + 15) / 16);
        }
        if (c->amx) {       /* AMX: V's words over the block's whole extent, from f0 (fa__qk_amx) */
            FA__PROF_AT(tid, 2);
            if (pl->vt_all) {    /* shared by the tiles (fa__tiled_vt_get) */
                int64_t blk = ((int64_t)b * d->Hkv + h0 / d->group) * ((d->Sk + bk - 1) / bk) + kb;
                int made;
                Vt = fa__tiled_vt_get(c, blk, Vown, &vfin, &made);
#if defined(__GNUC__)
                if (FA__AMX_VT_PF > 1 && vfin && !made && Vt != vt_next) {
                    /* made by another thread and not prefetched with the block before: toward L2 now,
                       ahead of its P V (FA__AMX_VT_PF 2) */
                    size_t ln_;
                    for (ln_ = 0; ln_ < (size_t)Dv * pl->np16 * 4; ln_ += 64) __builtin_prefetch((const char *)Vt + ln_, 0, 2);
                }
#endif
                (void)made;
                vt_next = FA__AMX_VT_PF && kb + 1 < kb1 ? fa__tiled_vt_ready(c, blk + 1) : NULL;
            } else {
                vfin = K->amx_vt_h(vhb + f0 * vs, vs, (int)(f1 - f0), Dv, Vown, pl->np16);
            }
            if (!vfin)
                for (j = 0; j < nk; j++) K->h2f(d->dtype, vhb + (k0 + j) * vs, Vc + (size_t)j * Dv, Dv);
        } else if (pl->dpbf16) {   /* V's words once per block; a non-finite V goes through the fp32 kernels */
            vfin = K->vpack_bf16(vhb + k0 * vs, vs, nk, Dv, Vp);
            if (!vfin)
                for (j = 0; j < nk; j++) K->h2f(d->dtype, vhb + (k0 + j) * vs, Vc + (size_t)j * Dv, Dv);
        } else if (half)    /* the block converted once for all the tile's panels (its rows were prefetched) */
            for (j = 0; j < nk; j++) {
                K->h2f(d->dtype, khb + (k0 + j) * ks, Kc + (size_t)j * D, D);
                K->h2f(d->dtype, vhb + (k0 + j) * vs, Vc + (size_t)j * Dv, Dv);
            }
        /* the next block's K and V rows toward L2 during this block's GEMM loops, spread over them */
        FA__PROF_AT(tid, 3);
        {
            int64_t n1 = kb + 1 < kb1 ? (k1 + bk < khi ? k1 + bk : khi) - k1 : 0, lines, it;
            int np = 0;
            if (c->amx) np = (v1 + 1) / 2 - v0 / 2;
            else for (p0 = v0; p0 < v1; p0 = fa__panel_end(p0, v1)) np++;
            if (half) {
                fa__pf_set_es(&pf, 0, khb, ks, k1, k1 + n1, D, 2);
                if (vt_next && n1 > 0)  /* AMX: the next block's Vt where it is made, [Dv][np16] words */
                    fa__pf_set_es(&pf, 1, vt_next, 2 * (int64_t)pl->np16, 0, Dv, 2 * pl->np16, 2);
                else
                    fa__pf_set_es(&pf, 1, vhb, vs, k1, k1 + n1, Dv, 2);
            } else {
                fa__pf_set(&pf, 0, kbase, ks, k1, k1 + n1, D);
                fa__pf_set(&pf, 1, vbase, vs, k1, k1 + n1, Dv);
            }
            lines = (int64_t)pf.rows[0] * pf.lines[0] + (int64_t)pf.rows[1] * pf.lines[1];
            it = (int64_t)np * (((int64_t)nk + 7) / 8 * D + ((int64_t)Dv + 7) / 8 * nk);
            pf.mask = it >= 8 * lines ? 3 : it >= 4 * lines ? 1 : 0;
            amx_pf = FA__AMX_BLKPF && np > 0 ? (int)((lines + np - 1) / np) : 0;    /* AMX: lines per panel */
        }
#ifdef FA__HAVE_AMX
        if (c->amx) {
            /* panels of two lane vectors (an even first one), each on its own rows of 32 lanes: scores
               of the block's keys from f0 in whole 16-key groups, the rule and the online step on the
               tile's keys [k0, k1), P rounded to bf16 with 0 outside them, P V on the tiles */
            int nf = (int)(f1 - f0), off = (int)(k0 - f0), nkq = (off + nk + 15) / 16 * 16, pv, i, ip, npn;
            if (nkq > nf) nkq = nf;
            npn = (v1 - (v0 & ~1) + 1) / 2;
            if (vfin) {
                /* the panels in a pipeline: the online step of panel item x (fa__online_amx) runs the
                   tile products of item x - 1's P V and item x + 1's scores along its vector work
                   (two score and two P buffers, by item parity); with every block's Vt kept
                   (pl->vt_all) the items run on across blocks: the last panel's P V in the next
                   block's first step, and the next block's first scores in this block's last (taken
                   if that block starts at the same panel, else computed again). A panel's own steps
                   keep their order. */
                const float sc = ln.mods ? 1.0f : d->scale;      /* the rule's passes want scaled scores */
                int nj;
#define FA__PV(ip) ((v0 & ~1) + 2 * (ip))
#define FA__VA(ip) (FA__PV(ip) > v0 ? FA__PV(ip) : v0)
#define FA__NV(ip) ((FA__PV(ip) + 2 < v1 ? FA__PV(ip) + 2 : v1) - FA__VA(ip))
#define FA__LO(ip) (16 * (FA__VA(ip) - FA__PV(ip)))
#define FA__QP(ip) (Qp + (size_t)(FA__PV(ip) / 2) * 32 * (D / 2) + FA__LO(ip))
#define FA__OP(ip) (Ot + (size_t)(FA__PV(ip) / 2) * 32 * Dv + FA__LO(ip))
#define FA__SP(x, ip) (St + (size_t)((x) & 1) * 32 * bk + FA__LO(ip))
#define FA__PP(x, ip) (Pp + (size_t)((x) & 1) * 32 * pl->np16 + FA__LO(ip))
                if (FA__AMX_RR > 0) {
                    /* chunks of g panels (FA__AMX_RR), panel ip's scores and P in the chunk's slot
                       ip - c0 (St and Pp hold ld / 32 >= npn panels) */
                    int g = FA__AMX_RR * 1024 / (64 * D > 128 * pl->np16 ? 64 * D : 128 * pl->np16), c0, c1;
#define FA__SR(ip) (St + (size_t)((ip) - c0) * 32 * bk + FA__LO(ip))
#define FA__PR(ip) (Pp + (size_t)((ip) - c0) * 32 * pl->np16 + FA__LO(ip))
                    fa__amx_job cj[8];
                    if (g < 1) g = 1;
                    if (g > 8) g = 8;
                    FA__AMX_FLUSH;
                    la = 0;
                    for (c0 = 0; c0 < npn; c0 = c1) {
                        c1 = c0 + g < npn ? c0 + g : npn;
                        FA__PROF_AT(tid, 4);
                        for (ip = c0; ip < c1; ip++)
                            K->amx_qk_job(khb + f0 * ks, ks, nkq, D, FA__QP(ip), FA__SR(ip), FA__NV(ip), &pf, &cj[ip - c0]);
                        K->amx_run_rr(cj, c1 - c0);
                        FA__PROF_AT(tid, 5);
                        for (ip = c0; ip < c1; ip++) {
                            float *s0 = FA__SR(ip) + (size_t)off * 32;
                            for (i = 0; i < amx_pf; i++) fa__pf_step(&pf);
                            if (ln.mods)
                                for (j = 0; j < nk; j++) K->scale(s0 + (size_t)j * 32, s0 + (size_t)j * 32, 16 * FA__NV(ip), d->scale);
                            if (ln.mods || mask) fa__modify_tile(K, &ln, 16 * FA__VA(ip), s0, 32, FA__NV(ip), k0, nk, mask);
                            FA__OTZ(FA__PV(ip) / 2);
                            K->amx_online(FA__SR(ip), off, nk, FA__NV(ip), sc, m + 16 * FA__VA(ip), l + 16 * FA__VA(ip), FA__OP(ip),
                                          Dv, FA__PR(ip), pl->np16, cj, 0);
                        }
                        FA__PROF_AT(tid, 6);
                        for (ip = c0; ip < c1; ip++)
                            K->amx_pv_job(Vt, pl->np16, Dv, FA__PR(ip), FA__OP(ip), FA__NV(ip), &pf, &cj[ip - c0]);
                        K->amx_run_rr(cj, c1 - c0);
                    }
                    FA__PROF_AT(tid, 3);
#undef FA__SR
#undef FA__PR
                } else {
                    if (!(la && la_f0 == f0 && la_nkq == nkq && la_pv == FA__PV(0) && la_va <= FA__VA(0) &&
                          FA__VA(0) + FA__NV(0) <= la_vb)) {
                        K->amx_qk_job(khb + f0 * ks, ks, nkq, D, FA__QP(0), FA__SP(amx_it, 0), FA__NV(0), &pf, &ajob[0]);
                        K->amx_run(ajob, 1);
                    }
                    la = 0;
                    for (ip = 0; ip < npn; ip++) {
                        float *s0 = FA__SP(amx_it, ip) + (size_t)off * 32;
                        nj = 0;
                        for (i = 0; i < amx_pf; i++) fa__pf_step(&pf);
                        if (pend) { K->amx_pv_job(pend_vt, pl->np16, Dv, pend_pp, pend_op, pend_nv, &pf, &ajob[nj++]); pend = 0; }
                        if (ip + 1 < npn) {
                            K->amx_qk_job(khb + f0 * ks, ks, nkq, D, FA__QP(ip + 1), FA__SP(amx_it + 1, ip + 1), FA__NV(ip + 1), &pf,
                                          &ajob[nj++]);
                        } else if (pl->vt_all && kb + 1 < kb1) {
                            int64_t g0 = f0 + bk, g1 = g0 + bk < d->Sk ? g0 + bk : d->Sk, gn = (g1 < khi ? g1 : khi) - g0;
                            if (gn > 0) {   /* the next block's keys in this tile from its first (off 0), as above */
                                la_nkq = (int)((gn + 15) / 16 * 16 < g1 - g0 ? (gn + 15) / 16 * 16 : g1 - g0);
                                la = 1; la_f0 = g0; la_pv = FA__PV(0); la_va = FA__VA(0); la_vb = FA__VA(0) + FA__NV(0);
                                K->amx_qk_job(khb + g0 * ks, ks, la_nkq, D, FA__QP(0), FA__SP(amx_it + 1, 0), FA__NV(0), &pf, &ajob[nj++]);
                            }
                        }
                        if (!FA__AMX_PIPE) { K->amx_run(ajob, nj); nj = 0; }
                        if (ln.mods)
                            for (j = 0; j < nk; j++) K->scale(s0 + (size_t)j * 32, s0 + (size_t)j * 32, 16 * FA__NV(ip), d->scale);
                        if (ln.mods || mask) fa__modify_tile(K, &ln, 16 * FA__VA(ip), s0, 32, FA__NV(ip), k0, nk, mask);
                        FA__OTZ(FA__PV(ip) / 2);
                        K->amx_online(FA__SP(amx_it, ip), off, nk, FA__NV(ip), sc, m + 16 * FA__VA(ip), l + 16 * FA__VA(ip), FA__OP(ip), Dv,
                                      FA__PP(amx_it, ip), pl->np16, ajob, nj);
                        pend = 1; pend_vt = Vt; pend_pp = FA__PP(amx_it, ip); pend_op = FA__OP(ip); pend_nv = FA__NV(ip);
                        amx_it++;
                    }
                    if (!pl->vt_all || Vt == Vown) FA__AMX_FLUSH;     /* the next block's Vt may go where this one's is */
                }
#undef FA__PV
#undef FA__VA
#undef FA__NV
#undef FA__LO
#undef FA__QP
#undef FA__OP
#undef FA__SP
#undef FA__PP
                continue;
            }
            FA__AMX_FLUSH;
            /* a block with a non-finite V: the fp32 kernels on the converted block, as on vdpbf16ps below */
            for (pv = v0 & ~1; pv < v1; pv += 2) {
                int va = pv > v0 ? pv : v0, vb = pv + 2 < v1 ? pv + 2 : v1, lo = 16 * (va - pv), nvec = vb - va, a, e;
                const uint32_t *qp = Qp + (size_t)(pv / 2) * 32 * (D / 2) + lo;
                float *op = Ot + (size_t)(pv / 2) * 32 * Dv + lo, *sp = St + lo, *s0 = sp + (size_t)off * 32;
                for (i = 0; i < amx_pf; i++) fa__pf_step(&pf);
                FA__OTZ(pv / 2);
                K->amx_qk(khb + f0 * ks, ks, nkq, D, qp, sp, nvec, d->scale, &pf);
                if (ln.mods || mask) fa__modify_tile(K, &ln, 16 * va, s0, 32, nvec, k0, nk, mask);
                K->online(s0, 32, nk, nvec, m + 16 * va, l + 16 * va, op, 32, Dv, tmp);
                for (a = va; a < vb; a = e) {
                    int acc = acc_all ? acc_all : fa__pv_acc(&ln, a, f0, f1);
                    for (e = a + 1; e < vb && (acc_all || fa__pv_acc(&ln, e, f0, f1) == acc); e++) {}
                    K->gemm(Vc, 1, Dv, Dv, nk, s0 + 16 * (a - va), 32, op + 16 * (a - va), 32, e - a, acc, &pf);
                }
            }
            continue;
        }
#endif
        /* one register panel (up to 48 lanes, fa__gemm's) at a time through scores, the rule,
           softmax and P V, so its slice of the score tile stays in L1 between the steps */
        for (p0 = v0; p0 < v1; p0 = pe) {
            int pr0 = p0 * 16, va, vb;
            float *S0 = St + pr0;
            pe = fa__panel_end(p0, v1);
            if (pl->dpbf16)
                K->gemm_bf16((const unsigned char *)(khb + k0 * ks), 2 * ks, 4, nk, D / 2, Qp + pr0, ld, S0, ld, pe - p0,
                             0, d->scale, &pf);
            else
                K->gemm(kblk, kst, 1, nk, D, Qt + pr0, ld, S0, ld, pe - p0, 0, &pf);
            if (ln.mods || mask) fa__modify_tile(K, &ln, pr0, S0, ld, pe - p0, k0, nk, mask);
            K->online(S0, ld, nk, pe - p0, m + pr0, l + pr0, Ot + pr0, ld, Dv, tmp);
            if (pl->dpbf16 && vfin) {
                K->ppack_bf16(S0, ld, nk, pe - p0, Pp + pr0);
                K->gemm_bf16((const unsigned char *)Vp, 4, 4 * (int64_t)Dv, Dv, (nk + 1) / 2, Pp + pr0, ld, Ot + pr0, ld,
                             pe - p0, 1, 1.0f, &pf);
                continue;
            }
            for (va = p0; va < pe; va = vb) {     /* runs of vectors with one accumulate mode */
                int acc = acc_all ? acc_all : fa__pv_acc(&ln, va, f0, f1);
                for (vb = va + 1; vb < pe && (acc_all || fa__pv_acc(&ln, vb, f0, f1) == acc); vb++) {}
                K->gemm(vblk, 1, vst, Dv, nk, St + va * 16, ld, Ot + va * 16, ld, vb - va, acc, &pf);
            }
        }
    }

#ifdef FA__HAVE_AMX
    FA__AMX_FLUSH;
#undef FA__AMX_FLUSH
#endif
    FA__PROF_AT(tid, 7);
    (void)amx_pf; (void)Vt; (void)vt_next;
    /* o (or this chunk's partials) = O / l, and lse = m + log l; a row that saw no key gets 0 and
       -INFINITY, a NaN row stays NaN */
#define FA__OOFF(r) ((int64_t)b * d->os[0] + (int64_t)(h0 + (r) / nqr) * d->os[1] + (i0 + (r) % nqr) * d->os[2])
#define FA__OROW(r) (pl->nchunk == 1 ? c->o + FA__OOFF(r) : c->parts + ((size_t)item * pl->rows + (r)) * Dv)
    /* half storage writes o through Oc (partials of a split stay fp32) */
#define FA__HOUT (half && pl->nchunk == 1)
    if (!pl->rowmajor) {
        int r0, u;
        for (r0 = 0; r0 < nr; r0 += 32) FA__OTZ(r0 / 32);      /* panels that saw no key */
#undef FA__OTZ
        for (r0 = 0; r0 < nr; r0 += 16) {
            float *op[16];
            const float *O0 = c->amx ? Ot + (size_t)(r0 / 32) * 32 * Dv + r0 % 32 : Ot + r0;
            const int64_t ldo = c->amx ? 32 : ld;
            if (FA__HOUT && d->dtype == FA_BF16 && K->unpack16_bf16 && Dv % 2 == 0) {     /* straight to bf16 */
                uint16_t *oh[16];
                for (u = 0; u < 16; u++) oh[u] = r0 + u < nr ? c->oh + FA__OOFF(r0 + u) : NULL;
                K->unpack16_bf16(O0, ldo, l + r0, Dv, oh);
                continue;
            }
            for (u = 0; u < 16; u++) op[u] = r0 + u < nr ? (FA__HOUT ? Oc + (size_t)u * Dv : FA__OROW(r0 + u)) : NULL;
            K->unpack16(O0, ldo, l + r0, Dv, op);
            if (FA__HOUT)
                for (u = 0; u < 16 && r0 + u < nr; u++) K->f2h(d->dtype, Oc + (size_t)u * Dv, c->oh + FA__OOFF(r0 + u), Dv);
        }
    }
    for (r = 0; r < nr; r++) {
        float lr = l[r];
        if (pl->nchunk > 1) {      /* the chunk's m and l, apart (fa__merge_row) */
            float *mp = c->parts + (size_t)pl->items * pl->rows * Dv + (size_t)item * pl->rows + r;
            mp[0] = lr != lr ? lr : lr > 0.0f ? m[r] : -INFINITY;   /* a NaN row's NaN reaches the merge */
            mp[(size_t)pl->items * pl->rows] = lr;
        } else if (d->lse) {
            d->lse[((int64_t)b * d->Hq + h0 + r / nqr) * d->Sq + i0 + r % nqr] = lr > 0.0f || lr != lr ? m[r] + logf(lr) : -INFINITY;
        }
        if (pl->rowmajor) {
            float *orow = FA__HOUT ? Oc : FA__OROW(r);
            if (lr > 0.0f || lr != lr) {
                K->scale(orow, Ot + r * Dv, Dv, 1.0f / lr);
            } else {
                for (t = 0; t < Dv; t++) orow[t] = 0.0f;
            }
            if (FA__HOUT) K->f2h(d->dtype, Oc, c->oh + FA__OOFF(r), Dv);
        }
    }
#ifdef FA__HAVE_AMX
    if (c->amx) fa__amx_end();
#endif
    FA__PROF_AT(tid, 0);
    if (c->mu) {     /* the tile's last chunk merges it (the lock orders the other chunks' writes before) */
        int n;
        pthread_mutex_lock(c->mu);
        n = ++c->done[tile];
        pthread_mutex_unlock(c->mu);
        if (n == pl->nchunk) fa__tiled_merge(vctx, tile, tid);
    }
}
#undef FA__QROW
#undef FA__QOFF
#undef FA__OROW
#undef FA__OOFF
#undef FA__HOUT

/* The chunks of one tile merged into o and lse, in chunk order. */
static void fa__tiled_merge(void *vctx, int64_t tile, int tid)
{
    const fa__tiled_ctx *c = (const fa__tiled_ctx *)vctx;
    const fa__dims *d = c->d;
    const fa__tiled_plan *pl = c->pl;
    const float *op[FA__MAX_CHUNKS], *mp[FA__MAX_CHUNKS], *lp[FA__MAX_CHUNKS];
    const float *m0 = c->parts + (size_t)pl->items * pl->rows * d->Dv, *l0 = m0 + (size_t)pl->items * pl->rows;
    int64_t i0;
    int b, h0, nqr, r, p;
    float *lse;
    fa__tile_pos(d, pl, tile, &b, &h0, &i0, &nqr);
    for (p = 0; p < pl->nchunk; p++) {
        op[p] = c->parts + (size_t)(tile * pl->nchunk + p) * pl->rows * d->Dv;
        mp[p] = m0 + (size_t)(tile * pl->nchunk + p) * pl->rows;
        lp[p] = l0 + (size_t)(tile * pl->nchunk + p) * pl->rows;
    }
    /* a tile's rows are contiguous in lse: one head's rows from i0, or all rows of hpt heads */
    lse = d->lse ? d->lse + ((int64_t)b * d->Hq + h0) * d->Sq + i0 : NULL;
    for (r = 0; r < pl->hpt * nqr; r++) {
        int64_t off = (int64_t)b * d->os[0] + (int64_t)(h0 + r / nqr) * d->os[1] + (i0 + r % nqr) * d->os[2];
        if (d->dtype != FA_F32) {   /* through the thread's Oc (fa__tiled_item), then to half storage */
            float *Oc = c->ws + (size_t)tid * pl->thread_floats + pl->half_off + fa__round16((size_t)pl->bk * d->D) +
                        fa__round16((size_t)pl->bk * d->Dv) + 16 * (size_t)d->D;
            fa__merge_row(d->Dv, pl->nchunk, op, mp, lp, r, Oc, lse);
            c->K->f2h(d->dtype, Oc, c->oh + off, d->Dv);
        } else {
            fa__merge_row(d->Dv, pl->nchunk, op, mp, lp, r, c->o + off, lse);
        }
    }
}

FLASHATTN__CPU_DEF size_t fa_tiled_workspace_bytes(const fa_params *p)
{
    fa__dims d;
    fa__tiled_plan pl;
    if (!p || fa__resolve(p, p, p, p, p, &d, NULL) != FA_OK || fa__cpu_check(&d) != FA_OK) return 0;
    fa__tiled_plan_make(&d, fa__kernels_for(fa__isa()), &pl);
    return pl.total;
}

FLASHATTN__CPU_DEF fa_status fa_tiled(const fa_params *p, const void *q, const void *k, const void *v, void *o)
{
    fa__dims d;
    fa__tiled_plan pl;
    fa__tiled_ctx c;
    pthread_mutex_t mu;
    void *mem;
    fa_status st = fa__forward_check(p, q, k, v, o, NULL, &d, NULL);
    if (st != FA_OK) return st;
    if (d.Sq == 0) return FA_OK;
    FA__PROF_AT(FA__PROF_CALL, 0);
    c.K = fa__kernels_for(fa__isa());
    fa__tiled_plan_make(&d, c.K, &pl);
    if (pl.total == SIZE_MAX) return FA_ERR_NO_MEMORY;
    mem = FLASHATTN_MALLOC(pl.total);
    if (!mem) return FA_ERR_NO_MEMORY;
    c.d = &d; c.pl = &pl;
    if (d.dtype == FA_F32) {
        c.q = (const float *)q; c.k = (const float *)k; c.v = (const float *)v; c.o = (float *)o;
        c.qh = c.kh = c.vh = NULL; c.oh = NULL;
    } else {
        c.q = c.k = c.v = NULL; c.o = NULL;
        c.qh = (const uint16_t *)q; c.kh = (const uint16_t *)k; c.vh = (const uint16_t *)v; c.oh = (uint16_t *)o;
    }
    c.amx = 0;
#ifdef FA__HAVE_AMX
    c.amx = pl.amx && fa__amx_permit();      /* a refusal: the vdpbf16ps kernels (section 3) */
#endif
    c.ws = (float *)fa__align64(mem);
    c.parts = c.ws + pl.thread_floats * pl.nthreads;
    c.vt = pl.vt_all ? (uint32_t *)(c.parts + pl.part_floats) : NULL;
    c.done = NULL; c.mu = NULL;
    if (pl.nchunk > 1 && pthread_mutex_init(&mu, NULL) == 0) {
        /* the last chunk of a tile to finish merges the tile, in the same run of the threads */
        c.done = (int *)(c.parts + fa__round16(fa__mul_size(fa__mul_size((size_t)pl.items, (size_t)pl.rows),
                                                            (size_t)d.Dv + 2)));
        memset(c.done, 0, (size_t)pl.tiles * sizeof(int));
        c.mu = &mu;
    }
    if (pl.rowmajor) {      /* the row-major kernels' St: padding lanes finite from the start */
        int t;
        for (t = 0; t < pl.nthreads; t++)
            memset(c.ws + (size_t)t * pl.thread_floats + pl.lane_floats + (size_t)pl.ld * d.D, 0,
                   (size_t)pl.ld * pl.bk * sizeof(float));
    }
    if (c.amx && pl.vt_all) {    /* every block's Vt once (the permission: AMX only): as the tiles need them, or before */
        memset(fa__tiled_vt_state(&c), 0, (size_t)pl.vt_blocks * sizeof(int));
        if (!FA__AMX_VT_LAZY) fa__run(d.pool, fa__tiled_vt, &c, pl.vt_blocks, pl.nthreads, c.parts + pl.part_floats + pl.vt_floats);
    }
    FA__PROF_AT(FA__PROF_CALL, 1);
    {
        void *pmem = c.parts + pl.part_floats + pl.vt_floats;
        fa__run_ranges(d.pool, fa__tiled_item, &c, pl.items, pl.nthreads, pmem,
                       pl.ranges ? (int64_t *)((char *)pmem + fa__pool_bytes(&d, pl.nthreads)) : NULL);
    }
    FA__PROF_AT(FA__PROF_CALL, 2);
    if (c.mu) pthread_mutex_destroy(&mu);
    else if (pl.nchunk > 1) fa__run(d.pool, fa__tiled_merge, &c, pl.tiles, pl.nthreads, c.parts + pl.part_floats + pl.vt_floats);
    FLASHATTN_FREE(mem);
    FA__PROF_AT(FA__PROF_CALL, 3);
    return FA_OK;
}

/* ============================================================================================== */
/* 7b. CPU: the backward                                                               >>backward */
/* ============================================================================================== */

/* Both backwards compute, per (batch, query head, row i, visible key j), with s the modified score
   of the forward and P_ij = exp(s_ij - lse_i):
       delta_i = dot(d_o_i, o_i),  dP_ij = dot(d_o_i, v_j),  dS_ij = P_ij (dP_ij - delta_i) g_ij
       dv_j += P_ij d_o_i,  dq_i += scale dS_ij k_j,  dk_j += scale dS_ij q_i
   where g_ij = 1 - tanh^2(s_raw / softcap) = 1 - (s_capped / softcap)^2 with softcap, else 1.
   fa__ds is that rule on one element (0 where P is 0, so that a hidden key's NaN in v or d_o
   reaches nothing); the SIMD kernel below is the same rule on lanes.

   Determinism. fa_tiled_backward runs one pass over key tiles (an item per batch, kv head and tile
   of keys, FlashAttention-2's arrangement): each item accumulates its tile's dk and dv over the
   query heads of the group and the query rows in order, and forms for each block of query rows
   its contribution to dq. Those contributions are added into dq in key-tile order: a counter per
   (batch, head, row block) says whose turn it is, and a tile waits for its turn (the tiles before
   it were taken from the queue earlier, so the wait ends). Every output element is then summed in
   an order fixed by the shape, and the tiles come from the shape, not the thread count: the same
   bits for any `threads`, pool or none, with FlashAttention-2's 5 GEMM-sized products (a design
   with a second pass for dq costs 7: it ran up to 2x slower at 2 threads, bench/RESULTS.md bwd-v1).
   The per-row delta is computed once, into a [B][Hq][Sq] buffer, before the tiles.
   fa_naive_backward runs an item per (batch, kv head), the group's heads in order: also
   deterministic. */

static float fa__softcap_grad(float s_capped, float cap)
{
    float t = s_capped / cap;
    return 1.0f - t * t;
}

static float fa__ds(float p, float dp, float delta, float g)
{
    return p == 0.0f ? 0.0f : p * (dp - delta) * g;
}

/* S[x][u] = exp(S[x][u] - L) and then dP[x][u] = fa__ds(S[x][u], dP[x][u], Dl, G[x][u]) over rows
   x < nx and lanes u < nl (lanes at or past `valid` get 0 in both), with L and Dl per row
   (lrow[x], drow[x]) when lrow is not NULL, else per lane (llane[u], dlane[u]). A row or lane whose
   L is -INFINITY saw no key: its P is 0. G may be NULL (no softcap). */
static void fa__bwd_pds_c(float *S, float *dP, const float *G, int64_t ld, int nx, int nl, int valid,
                          const float *lrow, const float *drow, const float *llane, const float *dlane)
{
    int x, u;
    for (x = 0; x < nx; x++) {
        float *s = S + x * ld, *dp = dP + x * ld;
        const float *g = G ? G + x * ld : NULL;
        for (u = 0; u < nl; u++) {
            float L = lrow ? lrow[x] : llane[u], Dd = lrow ? drow[x] : dlane[u], p;
            p = u >= valid || L == -INFINITY || s[u] == -INFINITY ? 0.0f : fa__expf(s[u] - L);
            s[u] = p;
            dp[u] = fa__ds(p, dp[u], Dd, g ? g[u] : 1.0f);
        }
    }
}

#ifdef FLASHATTN__X86
FA__AVX512 static void fa__bwd_pds_avx512(float *S, float *dP, const float *G, int64_t ld, int nx, int nl,
                                          int valid, const float *lrow, const float *drow,
                                          const float *llane, const float *dlane)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    int x, u;
    for (x = 0; x < nx; x++) {
        float *s = S + x * ld, *dp = dP + x * ld;
        const float *g = G ? G + x * ld : NULL;
        __m512 lr = lrow ? _mm512_set1_ps(lrow[x]) : zero, dr = lrow ? _mm512_set1_ps(drow[x]) : zero;
        for (u = 0; u < nl; u += 16) {
            __m512 L = lrow ? lr : _mm512_loadu_ps(llane + u), Dd = lrow ? dr : _mm512_loadu_ps(dlane + u);
            __m512 sv = _mm512_loadu_ps(s + u), p, ds;
            __mmask16 ok = _mm512_cmp_ps_mask(L, ninf, _CMP_NEQ_UQ) & _mm512_cmp_ps_mask(sv, ninf, _CMP_NEQ_UQ);
            if (valid - u < 16) ok &= valid - u > 0 ? (__mmask16)((1u << (valid - u)) - 1u) : (__mmask16)0;
            p = _mm512_maskz_mov_ps(ok, fa__exp16(_mm512_sub_ps(sv, L)));
            ds = _mm512_sub_ps(_mm512_loadu_ps(dp + u), Dd);
            if (g) ds = _mm512_mul_ps(ds, _mm512_loadu_ps(g + u));
            ds = _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(p, zero, _CMP_NEQ_UQ), p, ds);
            _mm512_storeu_ps(s + u, p);
            _mm512_storeu_ps(dp + u, ds);
        }
    }
}
#endif

/* nl is a multiple of 16 */
static void fa__bwd_pds(int isa, float *S, float *dP, const float *G, int64_t ld, int nx, int nl, int valid,
                        const float *lrow, const float *drow, const float *llane, const float *dlane)
{
#ifdef FLASHATTN__X86
    if (isa == 2) { fa__bwd_pds_avx512(S, dP, G, ld, nx, nl, valid, lrow, drow, llane, dlane); return; }
#endif
    (void)isa;
    fa__bwd_pds_c(S, dP, G, ld, nx, nl, valid, lrow, drow, llane, dlane);
}

/* dst[t] += src[t], t < n: dq's sum in its turn (the same sums on lanes as in the C loop) */
#ifdef FLASHATTN__X86
FA__AVX512 static void fa__bwd_add_avx512(float *dst, const float *src, int n)
{
    int t;
    for (t = 0; t + 16 <= n; t += 16)
        _mm512_storeu_ps(dst + t, _mm512_add_ps(_mm512_loadu_ps(dst + t), _mm512_loadu_ps(src + t)));
    if (t < n) {
        __mmask16 m = fa__lanes(n - t);
        _mm512_mask_storeu_ps(dst + t, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + t), _mm512_maskz_loadu_ps(m, src + t)));
    }
}

/* Key rows out of a tile's transposed sums M [n][ld] (features along rows, keys along the lanes):
   buf[u][t] = M[t][j0 + u] (times scale when sc), u < 16, t < n (a multiple of 16), by 16 x 16 blocks */
FA__AVX512 static void fa__bwd_cols_avx512(const float *M, int64_t ld, int n, int j0, int sc, float scale, float *buf)
{
    __m512 v[16], s = _mm512_set1_ps(scale);
    int t0, i;
    for (t0 = 0; t0 < n; t0 += 16) {
        FA__UNROLL
        for (i = 0; i < 16; i++) v[i] = _mm512_loadu_ps(M + (int64_t)(t0 + i) * ld + j0);
        fa__t16_avx512(v);
        FA__UNROLL
        for (i = 0; i < 16; i++) _mm512_storeu_ps(buf + (size_t)i * n + t0, sc ? _mm512_mul_ps(v[i], s) : v[i]);
    }
}
#endif

static void fa__bwd_add(int isa, float *dst, const float *src, int n)
{
    int t;
#ifdef FLASHATTN__X86
    if (isa == 2) { fa__bwd_add_avx512(dst, src, n); return; }
#endif
    (void)isa;
    for (t = 0; t < n; t++) dst[t] += src[t];
}

/* rows x n stored half values (rows `stride` elements apart) into packed fp32 rows dst [rows][n]: packed
   rows in one conversion */
static void fa__h2f_rows(const fa__kernels *K, fa_dtype dt, const uint16_t *src, int64_t stride, int rows, int n, float *dst)
{
    int x;
    if (stride == n) K->h2f(dt, src, dst, rows * n);
    else for (x = 0; x < rows; x++) K->h2f(dt, src + x * stride, dst + (size_t)x * n, n);
}

/* the rows' n floats (rows `stride` floats apart) toward L2 */
static void fa__bwd_pf_rows(const float *p, int64_t stride, int rows, int n)
{
#ifdef FLASHATTN__X86
    int x, l;
    for (x = 0; x < rows; x++)
        for (l = 0; l < n; l += 16) _mm_prefetch((const char *)(p + x * stride + l), _MM_HINT_T1);
#else
    (void)p; (void)stride; (void)rows; (void)n;
#endif
}

/* Softcap on n scores of a row (stride 1) or a lane run, its derivative into g (same layout). */
static void fa__bwd_softcap(int isa, float *s, float *g, int n, float cap)
{
    int t;
    fa__softcap_run(isa, s, n, cap);
    for (t = 0; t < n; t++) g[t] = fa__softcap_grad(s[t], cap);
}

/* The request of a backward: fa__resolve's checks (o's strides, which d_o shares, included), the
   CPU's, the pointers (d_o and dq with query rows, dk and dv with keys, lse for the tiled path), and
   the gradient buffers, which are outputs laid out as q, k, v: their rows disjoint
   (fa__rows_disjoint, so a broadcast input has no gradient buffer of its own), and sharing memory
   with no input (q, k, v, o, d_o, lse, bias, slopes) and with no other gradient. cuda: the CUDA
   backward's request (no CPU check; q, k, v, o, d_o and the gradients in p->dtype's bytes). */
static fa_status fa__bwd_resolve_on(const fa_params *p, const void *q, const void *k, const void *v, const void *o,
                                    const void *d_o, const void *dq, const void *dk, const void *dv,
                                    int need_lse, int cuda, fa__dims *d, const char **why)
{
    const fa_status bad = FA_ERR_INVALID_ARG;
    int64_t n3q[3], n3k[3], nb[4], nB, lo, hi, rows;
    uintptr_t in[8][2], out[3][2];
    int ni = 0, a, t;
    size_t es;
    fa_status st = fa__resolve(p, q, k, v, o, d, why);
    if (st != FA_OK) return st;
    es = fa__esize(d->dtype);     /* q, k, v, o, d_o, dq, dk, dv in the storage dtype */
    if (!cuda && (st = fa__cpu_check_why(d, why)) != FA_OK) return st;
    if (d->Sq > 0 && !d_o) return fa__why(why, bad, "d_o is NULL (the upstream gradient, laid out as o)");
    if (d->Sq > 0 && !dq) return fa__why(why, bad, "dq is NULL");
    if (d->Sq > 0 && need_lse && !d->lse)
        return fa__why(why, bad, "lse is NULL: the tiled backward needs the forward's lse in p->lse");
    if (d->Sk > 0 && !dk) return fa__why(why, bad, "dk is NULL");
    if (d->Sk > 0 && !dv) return fa__why(why, bad, "dv is NULL");
    n3q[0] = d->B; n3q[1] = d->Hq; n3q[2] = d->Sq;
    n3k[0] = d->B; n3k[1] = d->Hkv; n3k[2] = d->Sk;
    if (!fa__rows_disjoint(3, n3q, d->qs, d->D))
        return fa__why(why, bad, "q_stride makes rows of dq overlap (dq is written with q's strides: no broadcast)");
    if (!fa__rows_disjoint(3, n3k, d->ks, d->D))
        return fa__why(why, bad, "k_stride makes rows of dk overlap (dk is written with k's strides: no broadcast)");
    if (!fa__rows_disjoint(3, n3k, d->vs, d->Dv))
        return fa__why(why, bad, "v_stride makes rows of dv overlap (dv is written with v's strides: no broadcast)");
    /* inputs and outputs as byte ranges; the extents fit int64 (fa__resolve) */
    rows = (int64_t)d->B * d->Hq * d->Sq;
    if (d->Sq > 0) {
        fa__extent(3, n3q, d->qs, d->D, &lo, &hi); fa__range_es((uintptr_t)q, lo, hi, es, &in[ni][0], &in[ni][1]); ni++;
        fa__extent(3, n3q, d->os, d->Dv, &lo, &hi); fa__range_es((uintptr_t)o, lo, hi, es, &in[ni][0], &in[ni][1]); ni++;
        fa__range_es((uintptr_t)d_o, lo, hi, es, &in[ni][0], &in[ni][1]); ni++;
        fa__range((uintptr_t)d->lse, 0, d->lse ? rows : 0, &in[ni][0], &in[ni][1]); ni++;
    }
    if (d->Sk > 0 && d->Sq > 0) {
        fa__extent(3, n3k, d->ks, d->D, &lo, &hi); fa__range_es((uintptr_t)k, lo, hi, es, &in[ni][0], &in[ni][1]); ni++;
        fa__extent(3, n3k, d->vs, d->Dv, &lo, &hi); fa__range_es((uintptr_t)v, lo, hi, es, &in[ni][0], &in[ni][1]); ni++;
    }
    if (d->bias && d->Sq > 0 && d->Sk > 0) {
        nb[0] = d->B; nb[1] = d->Hq; nb[2] = d->Sq; nb[3] = d->Sk;
        fa__extent(4, nb, d->bs, 1, &lo, &hi); fa__range((uintptr_t)d->bias, lo, hi, &in[ni][0], &in[ni][1]); ni++;
    }
    if (d->alibi) {
        nB = d->B;
        fa__extent(1, &nB, &d->alibi_stride, d->Hq, &lo, &hi); fa__range((uintptr_t)d->alibi, lo, hi, &in[ni][0], &in[ni][1]); ni++;
    }
    fa__extent(3, n3q, d->qs, d->D, &lo, &hi); fa__range_es((uintptr_t)dq, lo, d->Sq > 0 && d->Sk > 0 ? hi : lo, es, &out[0][0], &out[0][1]);
    fa__extent(3, n3k, d->ks, d->D, &lo, &hi); fa__range_es((uintptr_t)dk, lo, hi, es, &out[1][0], &out[1][1]);
    fa__extent(3, n3k, d->vs, d->Dv, &lo, &hi); fa__range_es((uintptr_t)dv, lo, hi, es, &out[2][0], &out[2][1]);
    if (d->Sq > 0 && d->Sk == 0)       /* dq is written (zeros): its range counts */
        { fa__extent(3, n3q, d->qs, d->D, &lo, &hi); fa__range_es((uintptr_t)dq, lo, hi, es, &out[0][0], &out[0][1]); }
    for (t = 0; t < 3; t++)
        for (a = 0; a < ni; a++)
            if (fa__overlap(out[t][0], out[t][1], in[a][0], in[a][1]))
                return fa__why(why, bad, t == 0 ? "dq overlaps an input (q, k, v, o, d_o, lse, bias or alibi_slopes)"
                                       : t == 1 ? "dk overlaps an input (q, k, v, o, d_o, lse, bias or alibi_slopes)"
                                                : "dv overlaps an input (q, k, v, o, d_o, lse, bias or alibi_slopes)");
    if (fa__overlap(out[0][0], out[0][1], out[1][0], out[1][1]) || fa__overlap(out[0][0], out[0][1], out[2][0], out[2][1]) ||
        fa__overlap(out[1][0], out[1][1], out[2][0], out[2][1]))
        return fa__why(why, bad, "dq, dk and dv overlap each other");
    return FA_OK;
}

static fa_status fa__bwd_resolve(const fa_params *p, const void *q, const void *k, const void *v, const void *o,
                                 const void *d_o, const void *dq, const void *dk, const void *dv,
                                 int need_lse, fa__dims *d, const char **why)
{
    return fa__bwd_resolve_on(p, q, k, v, o, d_o, dq, dk, dv, need_lse, 0, d, why);
}

FLASHATTN__CPU_DEF const char *fa_explain_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                                   const void *o, const void *d_o, const void *dq, const void *dk,
                                                   const void *dv)
{
    fa__dims d;
    const char *why = NULL;
    return fa__bwd_resolve(p, q, k, v, o, d_o, dq, dk, dv, 1, &d, &why) == FA_OK ? NULL : why;
}

/* dk and dv of keys no row sees, for Sq == 0 (every key) */
static void fa__bwd_zero_kv(const fa__dims *d, void *dk, void *dv)
{
    int b, g;
    int64_t j;
    size_t es = fa__esize(d->dtype);       /* 0 is all-zero bytes in every storage dtype */
    for (b = 0; b < d->B; b++)
        for (g = 0; g < d->Hkv; g++)
            for (j = 0; j < d->Sk; j++) {
                memset((char *)dk + es * (size_t)((int64_t)b * d->ks[0] + (int64_t)g * d->ks[1] + j * d->ks[2]), 0, (size_t)d->D * es);
                memset((char *)dv + es * (size_t)((int64_t)b * d->vs[0] + (int64_t)g * d->vs[1] + j * d->vs[2]), 0, (size_t)d->Dv * es);
            }
}

/* Turns: a thread waits until *t == want (spinning, then yielding the core: another thread of the
   call holds the turn and is running), and passes the turn on with the release that publishes its
   writes to dq. Compilers without GNU atomics take a mutex and condition variable instead. */
#if defined(__GNUC__) || defined(__clang__)
#define FA__TURN_ATOMIC 1
#endif

typedef struct fa__bwd_ctx {
    const fa__dims *d;
    int isa;
    const float *q, *k, *v, *o, *d_o;
    float *dq, *dk, *dv;
    float *P, *dS, *G, *Q;          /* naive: the whole matrices, each thread's scale * Q */
    float *ws, *delta;              /* tiled: per-thread tiles, the per-row delta */
    int *turn;                      /* tiled: dq's turns */
    size_t qn;                      /* naive: floats of a thread's Q */
    const struct fa__tbwd_plan *plan;
    /* tiled, half storage (plan->hs): the request as given and its fp16 or bf16 inputs; amx (bf16's own
       products, plan->bf): the process may use the tiles */
    const fa__dims *dh;
    const uint16_t *qh, *kh, *vh, *doh;
    int amx;
    /* ... read directly (plan->hs): no fp32 copies of the inputs; o for delta; the gradients written
       in the storage type (dq from the fp32 accumulator dq, by its last tile); fin (plan->bf): per
       (batch, head, query block) 1 when its Q and dO rows are finite */
    const uint16_t *oh;
    uint16_t *dqh, *dkh, *dvh;
    int *fin;
    const struct fa__kernels *K;    /* tiled: fa__kernels_for(isa), looked up once (cpuid, a VM exit) */
#ifndef FA__TURN_ATOMIC
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
} fa__bwd_ctx;

/* Half storage: the backward's inputs q, k, v, o, d_o into fp32 copies (fa__half_job), c pointed
   at them and at the fp32 gradients, with d2 the fp32 request on them; fa__bwd_half_out converts
   the gradients back into dq, dk, dv. */
static void fa__bwd_half_in(const fa__dims *d, fa__dims *d2, fa__bwd_ctx *c, fa__half_job *hj, float *hf[8],
                            void *region, const void *q, const void *k, const void *v, const void *o, const void *d_o,
                            int nthreads, void *pool_mem)
{
    fa__half_dims(d, d2, region, hf);
    hj->K = fa__kernels_for(c->isa); hj->dt = d->dtype; hj->nt = 0;
    fa__half_add(hj, q, NULL, hf[0], d->qs, d->B, d->Hq, d->Sq, d->D);
    fa__half_add(hj, k, NULL, hf[1], d->ks, d->B, d->Hkv, d->Sk, d->D);
    fa__half_add(hj, v, NULL, hf[2], d->vs, d->B, d->Hkv, d->Sk, d->Dv);
    fa__half_add(hj, o, NULL, hf[3], d->os, d->B, d->Hq, d->Sq, d->Dv);
    fa__half_add(hj, d_o, NULL, hf[4], d->os, d->B, d->Hq, d->Sq, d->Dv);
    fa__half_run(d->pool, hj, nthreads, pool_mem);
    c->d = d2;
    c->q = hf[0]; c->k = hf[1]; c->v = hf[2]; c->o = hf[3]; c->d_o = hf[4];
    c->dq = hf[5]; c->dk = hf[6]; c->dv = hf[7];
}

static void fa__bwd_half_out(const fa__dims *d, fa__half_job *hj, float *hf[8], void *dq, void *dk, void *dv,
                             int nthreads, void *pool_mem)
{
    fa__half_add(hj, NULL, dq, hf[5], d->qs, d->B, d->Hq, d->Sq, d->D);
    fa__half_add(hj, NULL, dk, hf[6], d->ks, d->B, d->Hkv, d->Sk, d->D);
    fa__half_add(hj, NULL, dv, hf[7], d->vs, d->B, d->Hkv, d->Sk, d->Dv);
    fa__half_run(d->pool, hj, nthreads, pool_mem);
}

/* ---- the naive backward --------------------------------------------------------------------- */

typedef struct fa__nbwd_plan {
    int nthreads;
    size_t mat_floats, mats, q_floats, pool_bytes, total;
} fa__nbwd_plan;

static void fa__nbwd_plan_make(const fa__dims *d, fa__nbwd_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->nthreads = fa__nthreads(d, (int64_t)d->B * d->Hkv);
    if (d->Sq == 0 || d->Sk == 0) return;
    /* P and dP (dS in place), and the softcap derivative */
    pl->mats = d->softcap > 0.0f ? 3 : 2;
    pl->mat_floats = fa__round16(fa__mul_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)d->Sq),
                                              (size_t)d->Sk));
    /* each thread's scale * Q of its head, [Sq][D] (the forward's naive path does the same: the
       scale applied before the dot products, so that large |q|, |k| with a small scale stay finite) */
    pl->q_floats = fa__round16(fa__mul_size((size_t)d->Sq, (size_t)d->D));
    pl->pool_bytes = fa__pool_bytes(d, pl->nthreads);
    pl->total = fa__add_size(fa__add_size(fa__mul_size(fa__add_size(fa__mul_size(pl->mat_floats, pl->mats),
                                                                     fa__mul_size(pl->q_floats, (size_t)pl->nthreads)),
                                                        sizeof(float)), pl->pool_bytes), 64);
}


static float fa__dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    int t;
    for (t = 0; t < n; t++) s += a[t] * b[t];
    return s;
}

/* One (batch, kv head): for each query head of its group, S, P (the forward's softmax), dP, dS,
   then dq of the head and dk, dv summed over the group. */
static void fa__nbwd_item(void *vctx, int64_t item, int tid)
{
    const fa__bwd_ctx *c = (const fa__bwd_ctx *)vctx;
    const fa__dims *d = c->d;
    int b = (int)(item / d->Hkv), g = (int)(item % d->Hkv), hh, Sq = d->Sq, Sk = d->Sk, D = d->D, Dv = d->Dv;
    int64_t i, j, t;
    const float *k = c->k + (int64_t)b * d->ks[0] + (int64_t)g * d->ks[1];
    const float *v = c->v + (int64_t)b * d->vs[0] + (int64_t)g * d->vs[1];
    float *dk = c->dk + (int64_t)b * d->ks[0] + (int64_t)g * d->ks[1];
    float *dv = c->dv + (int64_t)b * d->vs[0] + (int64_t)g * d->vs[1];
    int mask = fa__has_mask(d), mods = mask || d->alibi || d->bias;
    float *Qs = c->Q + (size_t)tid * c->qn;
    fa__dims nosc = *d;
    nosc.softcap = 0.0f;
    for (hh = 0; hh < d->group; hh++) {
        int h = g * d->group + hh, first = hh == 0;
#ifndef FLASHATTN_NO_BLAS
        int blas;
#endif
        size_t base = ((size_t)b * d->Hq + h) * (size_t)Sq * (size_t)Sk;
        float *P = c->P + base, *dS = c->dS + base, *G = c->G ? c->G + base : NULL;
        const float *q = c->q + (int64_t)b * d->qs[0] + (int64_t)h * d->qs[1];
        const float *o = c->o + (int64_t)b * d->os[0] + (int64_t)h * d->os[1];
        const float *dO = c->d_o + (int64_t)b * d->os[0] + (int64_t)h * d->os[1];
        float *dq = c->dq + (int64_t)b * d->qs[0] + (int64_t)h * d->qs[1];
        for (i = 0; i < Sq; i++)
            for (t = 0; t < D; t++) Qs[i * D + t] = q[i * d->qs[2] + t] * d->scale;
#ifndef FLASHATTN_NO_BLAS
        /* OpenBLAS where the strides suit it; with hidden keys only on finite inputs, since its
           0 * NaN would carry a NaN to entries whose weight is 0 (the loops skip those) */
        blas = d->qs[2] >= D && d->ks[2] >= D && d->vs[2] >= Dv && d->os[2] >= Dv && d->qs[2] <= INT_MAX &&
               d->ks[2] <= INT_MAX && d->vs[2] <= INT_MAX && d->os[2] <= INT_MAX;
        if (blas && fa__hides_keys(d))
            blas = fa__finite_rows(q, Sq, d->qs[2], D) && fa__finite_rows(k, Sk, d->ks[2], D) &&
                   fa__finite_rows(v, Sk, d->vs[2], Dv) && fa__finite_rows(dO, Sq, d->os[2], Dv);
        if (blas) {
            fa__sgemm(0, 1, Sq, Sk, D, 1.0f, Qs, D, k, (int)d->ks[2], 0.0f, P, Sk);
            fa__sgemm(0, 1, Sq, Sk, Dv, 1.0f, dO, (int)d->os[2],
                        v, (int)d->vs[2], 0.0f, dS, Sk);
        } else
#endif
        for (i = 0; i < Sq; i++)
            for (j = 0; j < Sk; j++) {
                P[i * Sk + j] = fa__dot(Qs + i * D, k + j * d->ks[2], D);
                dS[i * Sk + j] = fa__dot(dO + i * d->os[2], v + j * d->vs[2], Dv);
            }
        for (i = 0; i < Sq; i++) {
            float *s = P + i * Sk, *ds = dS + i * Sk, delta = fa__dot(dO + i * d->os[2], o + i * d->os[2], Dv);
            if (G) fa__bwd_softcap(c->isa, s, G + i * Sk, Sk, d->softcap);
            if (mods) fa__modify_row(&nosc, b, h, i, 0, Sk, s, 1, mask, c->isa);
            fa__softmax_row(c->isa, s, Sk);
            for (j = 0; j < Sk; j++) ds[j] = fa__ds(s[j], ds[j], delta, G ? G[i * Sk + j] : 1.0f);
        }
#ifndef FLASHATTN_NO_BLAS
        if (blas) {
            fa__sgemm(0, 0, Sq, D, Sk, d->scale, dS, Sk, k, (int)d->ks[2],
                        0.0f, dq, (int)d->qs[2]);
            fa__sgemm(1, 0, Sk, D, Sq, 1.0f, dS, Sk, Qs, D, first ? 0.0f : 1.0f, dk, (int)d->ks[2]);
            fa__sgemm(1, 0, Sk, Dv, Sq, 1.0f, P, Sk, dO, (int)d->os[2],
                        first ? 0.0f : 1.0f, dv, (int)d->vs[2]);
            continue;
        }
#endif
        for (i = 0; i < Sq; i++) {
            float *dqi = dq + i * d->qs[2];
            for (t = 0; t < D; t++) dqi[t] = 0.0f;
            for (j = 0; j < Sk; j++) {
                float w = dS[i * Sk + j];
                const float *kj = k + j * d->ks[2];
                if (w == 0.0f) continue;
                for (t = 0; t < D; t++) dqi[t] += w * kj[t];
            }
            for (t = 0; t < D; t++) dqi[t] *= d->scale;
        }
        for (j = 0; j < Sk; j++) {
            float *dkj = dk + j * d->ks[2], *dvj = dv + j * d->vs[2];
            if (first) {
                for (t = 0; t < D; t++) dkj[t] = 0.0f;
                for (t = 0; t < Dv; t++) dvj[t] = 0.0f;
            }
            for (i = 0; i < Sq; i++) {
                float w = dS[i * Sk + j], pw = P[i * Sk + j];
                const float *qi = Qs + i * D, *doi = dO + i * d->os[2];
                if (w != 0.0f) for (t = 0; t < D; t++) dkj[t] += w * qi[t];
                if (pw != 0.0f) for (t = 0; t < Dv; t++) dvj[t] += pw * doi[t];
            }
        }
    }
}

FLASHATTN__CPU_DEF size_t fa_naive_backward_workspace_bytes(const fa_params *p)
{
    fa__dims d;
    fa__nbwd_plan pl;
    if (!p || fa__resolve(p, p, p, p, p, &d, NULL) != FA_OK || fa__cpu_check(&d) != FA_OK) return 0;
    fa__nbwd_plan_make(&d, &pl);
    return d.Sq == 0 || d.Sk == 0 ? pl.total : fa__add_size(pl.total, fa__half_bytes(&d, 1));
}

/* dq of every row when there are no keys (Sk == 0): 0 */
static void fa__bwd_zero_q(const fa__dims *d, void *dq)
{
    int b, h;
    int64_t i;
    size_t es = fa__esize(d->dtype);
    for (b = 0; b < d->B; b++)
        for (h = 0; h < d->Hq; h++)
            for (i = 0; i < d->Sq; i++)
                memset((char *)dq + es * (size_t)((int64_t)b * d->qs[0] + (int64_t)h * d->qs[1] + i * d->qs[2]), 0, (size_t)d->D * es);
}

FLASHATTN__CPU_DEF fa_status fa_naive_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                               const void *o, const void *d_o, void *dq, void *dk, void *dv)
{
    fa__dims d, d2;
    fa__nbwd_plan pl;
    fa__bwd_ctx c;
    fa__half_job hj;
    float *hf[8] = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    size_t total;
    void *mem;
    fa_status st = fa__bwd_resolve(p, q, k, v, o, d_o, dq, dk, dv, 0, &d, NULL);
    if (st != FA_OK) return st;
    if (d.Sq == 0 || d.Sk == 0) {
        if (d.Sq == 0) fa__bwd_zero_kv(&d, dk, dv);
        else fa__bwd_zero_q(&d, dq);
        return FA_OK;
    }
    fa__nbwd_plan_make(&d, &pl);
    total = fa__add_size(pl.total, fa__half_bytes(&d, 1));
    if (total == SIZE_MAX || pl.mat_floats >= SIZE_MAX / 16 || total > fa__phys_bytes()) return FA_ERR_NO_MEMORY;
    mem = FLASHATTN_MALLOC(total);
    if (!mem) return FA_ERR_NO_MEMORY;
    memset(&c, 0, sizeof c);
    c.d = &d; c.isa = fa__isa();
    c.q = (const float *)q; c.k = (const float *)k; c.v = (const float *)v; c.o = (const float *)o;
    c.d_o = (const float *)d_o; c.dq = (float *)dq; c.dk = (float *)dk; c.dv = (float *)dv;
    c.P = (float *)((char *)fa__align64(mem) + pl.pool_bytes);
    c.dS = c.P + pl.mat_floats;
    c.G = pl.mats == 3 ? c.dS + pl.mat_floats : NULL;
    c.Q = c.P + pl.mat_floats * pl.mats;
    c.qn = pl.q_floats;
    if (d.dtype != FA_F32)
        fa__bwd_half_in(&d, &d2, &c, &hj, hf, (char *)mem + pl.total, q, k, v, o, d_o, pl.nthreads, fa__align64(mem));
    fa__run(d.pool, fa__nbwd_item, &c, (int64_t)d.B * d.Hkv, pl.nthreads, fa__align64(mem));   /* fa__sgemm: OpenBLAS's count untouched */
    if (d.dtype != FA_F32) fa__bwd_half_out(&d, &hj, hf, dq, dk, dv, pl.nthreads, fa__align64(mem));
    FLASHATTN_FREE(mem);
    return FA_OK;
}

/* ---- the tiled backward --------------------------------------------------------------------- */

/* The plan: items are (key tile, batch, kv head), key tiles of kt keys; each walks the query rows
   in blocks of qb rows on a fixed grid (block r is rows [r qb, (r + 1) qb)), the query heads of the
   group in order. dq's block r of head h takes its contributions from the key tiles whose keys its
   rows see (a contiguous run of tiles, fa__tbwd_tiles), added in tile order: `turn` holds, per
   (batch, head, block), the next tile whose turn it is. */
typedef struct fa__tbwd_plan {
    int kt, qb, ldk, ldd, nthreads;
    int64_t ktiles, qblocks, items;
    size_t thread_floats, delta_floats, turn_ints, pool_bytes, total;
    int bf, amx;        /* bf16 products on the bf16 inputs (vdpbf16ps; AMX tiles where the CPU has them) */
    int qb32, nk32;     /* ... rows and keys of a block to a multiple of 32; bf_off: where a thread's words start */
    size_t bf_off;
    size_t f32_off, fin_ints;   /* hs: a thread's fp32 rows for the fp32 kernels (Qf, dOf, Rf); bf: the fin flags */
    int hs, qf_rows;    /* half storage read as stored (fp16, bf16 either way): no fp32 copies; Qf's, dOf's rows */
} fa__tbwd_plan;

static void fa__tbwd_plan_make(const fa__dims *d, fa__tbwd_plan *pl)
{
    size_t f, cap = d->softcap > 0.0f, rows;
    const fa__kernels *K = fa__kernels_for(fa__isa());
    memset(pl, 0, sizeof *pl);
    pl->hs = d->dtype != FA_F32;
    if (d->Sq == 0 || d->Sk == 0) return;      /* zeros are written, nothing is allocated */
    /* bf16 with head dims multiples of 32 on AVX512-BF16: the five products on the bf16 values
       (FA__BWD_BF16; read as stored, no fp32 copies: fa__tbwd_half_bytes, fa__tbwd_item) */
    pl->bf = FA__BWD_BF16 && d->dtype == FA_BF16 && K->gemm_bf16 && d->D % 32 == 0 && d->Dv % 32 == 0;
    pl->amx = pl->bf && K->amx_mm != NULL;
    pl->kt = d->block_k ? d->block_k : pl->amx && FA__BWD_KT_AMX > 0 ? FA__BWD_KT_AMX
           : d->Sk >= FA__BWD_WIDE ? FA__BWD_KT_WIDE : FA__BWD_KT;
    pl->qb = d->block_q ? d->block_q : !pl->amx ? FA__BWD_QB : d->Sq >= FA__BWD_QB_AMX_FROM ? FA__BWD_QB_AMX_LONG : FA__BWD_QB_AMX;
    if (pl->kt > d->Sk) pl->kt = d->Sk;
    if (pl->qb > d->Sq) pl->qb = d->Sq;
    pl->qb32 = (pl->qb + 31) / 32 * 32;
    pl->nk32 = (pl->kt + 31) / 32 * 32;
    rows = pl->bf ? (size_t)pl->qb32 : (size_t)pl->qb;
    pl->ldk = (int)fa__round16((size_t)pl->kt);
    pl->ldd = (int)fa__round16((size_t)d->D);
    pl->ktiles = ((int64_t)d->Sk + pl->kt - 1) / pl->kt;
    pl->qblocks = ((int64_t)d->Sq + pl->qb - 1) / pl->qb;
    pl->items = pl->ktiles * d->B * d->Hkv;
    /* per thread: Kt, dKt [D][ldk], Vt, dVt [Dv][ldk], Kp [kt][ldd] (the tile row-major, for dq),
       P, dS (and G) [qb][ldk], the dq block [qb][ldd] */
    f = fa__mul_size((size_t)pl->ldk, fa__add_size(fa__mul_size(2, (size_t)d->D), fa__mul_size(2, (size_t)d->Dv)));
    f = fa__add_size(f, fa__mul_size((size_t)pl->kt, (size_t)pl->ldd));
    f = fa__add_size(f, fa__mul_size((size_t)pl->ldk * rows, 2 + cap));
    f = fa__add_size(f, fa__mul_size(rows, (size_t)pl->ldd));
    if (pl->bf) {   /* words: Kw [D/2][ldk], Vw [Dv/2][ldk], Kv [nk32/2][D]; Qb, dOb [qb32][D|Dv] bf16; Qv, dOv
                       [qb32/2][D|Dv]; QT, dOT [D|Dv][qb32/2]; Pp, dSp [qb32/2][ldk]; dSb [qb32][nk32] bf16 */
        size_t DD = (size_t)d->D + d->Dv, w = fa__mul_size((size_t)pl->ldk, DD / 2);
        w = fa__add_size(w, fa__mul_size((size_t)pl->nk32 / 2, (size_t)d->D));
        w = fa__add_size(w, fa__mul_size(fa__mul_size((size_t)pl->qb32 / 2, DD), 3));
        w = fa__add_size(w, fa__mul_size((size_t)pl->qb32, (size_t)pl->ldk));
        w = fa__add_size(w, fa__mul_size((size_t)pl->qb32 / 2, (size_t)pl->nk32));
        pl->bf_off = f;
        f = fa__add_size(f, fa__add_size(w, 16 * 16));
    }
    if (pl->hs) {   /* the inputs are read as stored (no fp32 copies): Qf [qf_rows][D], dOf [qf_rows][Dv] (a
                       block's rows for the fp32 kernels: with bf16's own products converted only for a
                       block with an inf or NaN; at least 16 rows, dk's and dv's transposes at the end),
                       Rf [D + 2 Dv] (a K and a V row; an o and a d_o row for delta) */
        pl->qf_rows = rows > 16 ? (int)rows : 16;
        pl->f32_off = f;
        f = fa__add_size(f, fa__add_size(fa__mul_size((size_t)pl->qf_rows, (size_t)d->D + d->Dv),
                                         fa__round16((size_t)d->D + 2 * (size_t)d->Dv)));
    }
    pl->thread_floats = fa__round16(f);
    pl->delta_floats = fa__round16(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)d->Sq));
    pl->turn_ints = fa__round16(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)pl->qblocks));
    pl->fin_ints = pl->bf ? pl->turn_ints : 0;
    pl->nthreads = fa__nthreads(d, pl->items);
    pl->pool_bytes = fa__pool_bytes(d, pl->nthreads);
    pl->total = fa__add_size(fa__mul_size(fa__add_size(fa__mul_size(pl->thread_floats, (size_t)pl->nthreads),
                                                       pl->delta_floats), sizeof(float)),
                             fa__add_size(fa__mul_size(fa__add_size(pl->turn_ints, pl->fin_ints), sizeof(int)),
                                          fa__add_size(pl->pool_bytes, 64)));
}

/* Bytes that half storage adds to the call's allocation: only dq's fp32 accumulator, [B][Hq][Sq][D]
   packed: the inputs are read as stored (fp32 rows converted per key tile and query block where the
   fp32 kernels need them) and dk, dv written in the storage type from their tiles. fp32 copies of the
   inputs and gradients (fa__half_bytes, as fa_naive_backward still makes) were most of the workspace
   (34 MB at B 2, H 4, S 1024, D 128), and memory of that size comes fresh from the kernel at every
   call (glibc maps blocks over 32 MB anew): a page fault on every 4 KB page touched (RESULTS,
   "Backward without the fp32 copies", "fp16 backward without the fp32 copies"). */
static size_t fa__tbwd_half_bytes(const fa__dims *d, const fa__tbwd_plan *pl)
{
    if (d->Sq == 0 || d->Sk == 0 || !pl->hs) return 0;
    return fa__add_size(fa__mul_size(fa__r16s(fa__mul_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq),
                                                                         (size_t)d->Sq), (size_t)d->D)), sizeof(float)), 64);
}

/* The key tiles whose keys some row of query block r sees, as [t0, t1) (empty: t0 == t1). The
   same rows are those that fa__key_rows finds for a tile, so both sides of dq's turns agree. */
static void fa__tbwd_tiles(const fa__dims *d, const fa__tbwd_plan *pl, int64_t r, int64_t *t0, int64_t *t1)
{
    int64_t i0 = r * pl->qb, i1 = i0 + pl->qb < d->Sq ? i0 + pl->qb : d->Sq, klo, khi;
    fa__rows_range(d, i0, i1, &klo, &khi);
    *t0 = klo / pl->kt;
    *t1 = khi > klo ? (khi - 1) / pl->kt + 1 : *t0;
}


static void fa__turn_wait(fa__bwd_ctx *c, int *t, int want)
{
#ifdef FA__TURN_ATOMIC
    int spin = 0;
    (void)c;
    while (fa__load_int(t) != want) {
        if (++spin < 4096) fa__relax();
        else sched_yield();
    }
#else
    pthread_mutex_lock(&c->mu);
    while (*t != want) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
#endif
}

static void fa__turn_pass(fa__bwd_ctx *c, int *t, int next)
{
#ifdef FA__TURN_ATOMIC
    (void)c;
    fa__store_int(t, next);
#else
    pthread_mutex_lock(&c->mu);
    *t = next;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
#endif
}

/* 1 when none of the n bf16 values of each of `rows` rows (`stride` elements apart) is inf or NaN */
static int fa__bf16_finite(const uint16_t *x, int64_t stride, int64_t rows, int n)
{
    /* four at a time: v's 16-bit lane is 0 where the exponent is all ones (lanes < 0x8000) */
    const uint64_t E = 0x7F807F807F807F80ull, L = 0x0001000100010001ull, H = 0x8000800080008000ull;
    uint64_t bad = 0;
    int64_t r;
    int t;
    for (r = 0; r < rows; r++) {
        const uint16_t *p = x + r * stride;
        for (t = 0; t + 4 <= n; t += 4) {
            uint64_t w, v;
            memcpy(&w, p + t, sizeof w);
            v = (w & E) ^ E;
            bad |= (v - L) & ~v & H;
        }
        for (; t < n; t++) bad |= (p[t] & 0x7F80) == 0x7F80;
    }
    return bad == 0;
}

/* Before the tiles: delta of every row of one (batch, head), its blocks' first turns, and 0 in the
   dq rows of blocks that no tile reaches (rows that see no key). Half storage read as stored
   (plan->hs): delta from each row's o and d_o converted (the same values and sum as from fp32
   copies), the zero rows written into the stored dq; with bf16's own products (plan->bf) each
   block's finite flag (fin). */
static void fa__tbwd_prep(void *vctx, int64_t item, int tid)
{
    fa__bwd_ctx *c = (fa__bwd_ctx *)vctx;
    const fa__dims *d = c->d;
    const fa__tbwd_plan *pl = c->plan;
    int b = (int)(item / d->Hq), h = (int)(item % d->Hq);
    int64_t i, r, t0, t1, off = (int64_t)b * d->os[0] + (int64_t)h * d->os[1];
    if (pl->hs) {
        const fa__dims *dh = c->dh;
        float *Rf = c->ws + (size_t)tid * pl->thread_floats + pl->f32_off + (size_t)pl->qf_rows * (d->D + d->Dv);
        const uint16_t *qh = c->qh + (int64_t)b * dh->qs[0] + (int64_t)h * dh->qs[1];
        const uint16_t *oh = c->oh + (int64_t)b * dh->os[0] + (int64_t)h * dh->os[1];
        const uint16_t *doh = c->doh + (int64_t)b * dh->os[0] + (int64_t)h * dh->os[1];
        for (i = 0; i < d->Sq; i++) {
            c->K->h2f(dh->dtype, doh + i * dh->os[2], Rf, d->Dv);
            c->K->h2f(dh->dtype, oh + i * dh->os[2], Rf + d->Dv, d->Dv);
            c->delta[item * d->Sq + i] = fa__dot(Rf, Rf + d->Dv, d->Dv);
        }
        for (r = 0; r < pl->qblocks; r++) {
            int64_t i0 = r * pl->qb, n = i0 + pl->qb < d->Sq ? pl->qb : d->Sq - i0;
            fa__tbwd_tiles(d, pl, r, &t0, &t1);
            c->turn[item * pl->qblocks + r] = (int)t0;
            if (pl->bf)
                c->fin[item * pl->qblocks + r] = fa__bf16_finite(qh + i0 * dh->qs[2], dh->qs[2], n, d->D) &&
                                             fa__bf16_finite(doh + i0 * dh->os[2], dh->os[2], n, d->Dv);
            if (t0 == t1)
                for (i = i0; i < i0 + n; i++)
                    memset(c->dqh + (int64_t)b * dh->qs[0] + (int64_t)h * dh->qs[1] + i * dh->qs[2], 0, (size_t)d->D * 2);
        }
        return;
    }
    for (i = 0; i < d->Sq; i++)
        c->delta[item * d->Sq + i] = fa__dot(c->d_o + off + i * d->os[2], c->o + off + i * d->os[2], d->Dv);
    for (r = 0; r < pl->qblocks; r++) {
        fa__tbwd_tiles(d, pl, r, &t0, &t1);
        c->turn[item * pl->qblocks + r] = (int)t0;
        if (t0 == t1)
            for (i = r * pl->qb; i < (r + 1) * pl->qb && i < d->Sq; i++)
                memset(c->dq + (int64_t)b * d->qs[0] + (int64_t)h * d->qs[1] + i * d->qs[2], 0, (size_t)d->D * sizeof(float));
    }
}

static const fa__pf fa__no_prefetch = { { 0, 0 }, { 0, 0 }, { 0, 0 }, { 0, 0 }, 0, 0x7FFFFFFF };

/* One tile of keys of one (batch, kv head): Kt, Vt packed (keys along the lanes) and Kp (row-major),
   then for each query head of the group and each block of query rows that sees the tile:
   S = Q Kt, modifiers and mask, P = exp(S - lse), dP = dO Vt, dS; dVt += dO^T P, dKt += Q^T dS;
   the block's dq contribution dS Kp, added to dq in its turn. Finally dk, dv of the tile. */
/* bf16 storage's products (plan->bf): C = scale * A B (acc 0) or C += A B, A(a, x) the word (bf16
   pair) at A + a sa + x sx bytes for a < M, x < Kd / 2, B [Kd / 2][N] words; on AMX tiles (sx 4, M
   and N multiples of 16, Kd of 32: fa__mm_amx) or on vdpbf16ps (fa__gemm_bf16_avx512, M exact). */
static void fa__bwd_mm(const fa__bwd_ctx *c, const void *A, int64_t sa, int64_t sx, int M, int Kd, const uint32_t *B,
                       int64_t ldb, float *C, int64_t ldc, int N, int acc, float scale, fa__pf *pf)
{
    const fa__kernels *K = c->K;
#ifdef FA__HAVE_AMX
    if (c->amx) { (void)sx; K->amx_mm((const uint16_t *)A, sa, M, Kd, B, ldb, C, ldc, N, acc, scale); return; }
#endif
    K->gemm_bf16((const unsigned char *)A, sa, sx, M, Kd / 2, B, ldb, C, ldc, N / 16, acc, scale, pf);
}

/* One tile of keys of one (batch, kv head): Kt, Vt packed (keys along the lanes) and Kp (row-major),
   then for each query head of the group and each block of query rows that sees the tile:
   S = Q Kt, modifiers and mask, P = exp(S - lse), dP = dO Vt, dS; dVt += dO^T P, dKt += Q^T dS;
   the block's dq contribution dS Kp, added to dq in its turn. Finally dk, dv of the tile.
   bf16 storage with plan->bf: the five products on the bf16 values (fa__bwd_mm), K and V packed
   into words once per tile (Kw, Vw: feature pairs along the keys' lanes; Kv: key pairs, for dq),
   each block's Q and dO read as stored (a block whose rows are not a multiple of 32: copied with
   zero rows, Qb, dOb) and packed into row pairs (Qv, dOv; transposed, QT, dOT, for the tiles), P and dS rounded to bf16 (Pp, dSp in row pairs; dSb row-major), as FlashAttention
   does on GPUs; the scores' rule, P, dS, dq's turns and dk, dv the same code as fp32. A tile whose K
   or V, or a block whose Q or dO holds an inf or NaN, runs the fp32 kernels on fp32 rows converted
   for it (Kt, Vt, Kp; Qf, dOf) instead (0 * inf must stay out of the sums, as the fp32 path's
   finite_k and acc 2 ensure). The bf16 inputs are read as stored, dk and dv written as bf16 at the
   end of the tile, and dq's rows by the block's last tile after its turn's sum. */
static void fa__tbwd_item(void *vctx, int64_t item, int tid)
{
    fa__bwd_ctx *c = (fa__bwd_ctx *)vctx;
    const fa__dims *d = c->d;
    const fa__tbwd_plan *pl = c->plan;
    int64_t kt = item / ((int64_t)d->B * d->Hkv), bg = item % ((int64_t)d->B * d->Hkv), ilo, ihi, r, t0, t1;
    int b = (int)(bg / d->Hkv), g = (int)(bg % d->Hkv), D = d->D, Dv = d->Dv, isa = c->isa, hh, j, t;
    int ldk = pl->ldk, ldd = pl->ldd, rows = pl->bf ? pl->qb32 : pl->qb;
    int64_t k0 = kt * pl->kt, k1 = k0 + pl->kt < d->Sk ? k0 + pl->kt : d->Sk;
    int nk = (int)(k1 - k0), nvk = (nk + 15) / 16, finite_k = 1, packed32 = 0, bf = 0, jdone = 0;
    float *Kt = c->ws + (size_t)tid * pl->thread_floats, *dKt = Kt + (size_t)ldk * D, *Vt = dKt + (size_t)ldk * D;
    float *dVt = Vt + (size_t)ldk * Dv, *Kp = dVt + (size_t)ldk * Dv, *P = Kp + (size_t)pl->kt * ldd;
    float *dS = P + (size_t)ldk * rows, *dQ = dS + (size_t)ldk * rows;
    float *G = d->softcap > 0.0f ? dQ + (size_t)rows * ldd : NULL;
    /* the fp32 inputs and dk, dv (fp32 storage); with half storage (pl->hs) the inputs as stored (khb,
       vhb at the tile's first key) and fp32 rows for the fp32 kernels */
    const float *kb = NULL, *vb = NULL;
    float *dkb = NULL, *dvb = NULL, *Qf = NULL, *dOf = NULL, *Rf = NULL;
    const fa__dims *dh = c->dh;
    const uint16_t *khb = NULL, *vhb = NULL;
    /* bf16 words (pl->bf), each buffer at a multiple of 16 words */
    uint32_t *Kw = NULL, *Vw = NULL, *Kv = NULL, *Qv = NULL, *dOv = NULL, *QT = NULL, *dOT = NULL, *Pp = NULL, *dSp = NULL;
    uint16_t *Qb = NULL, *dOb = NULL, *dSb = NULL;
    fa__pf pf = fa__no_prefetch;
    fa__dims nosc = *d;
    const fa__kernels *K = c->K;
    nosc.softcap = 0.0f;
    memset(dKt, 0, (size_t)ldk * D * sizeof(float));
    memset(dVt, 0, (size_t)ldk * Dv * sizeof(float));
    if (!pl->hs) {
        kb = c->k + (int64_t)b * d->ks[0] + (int64_t)g * d->ks[1];
        vb = c->v + (int64_t)b * d->vs[0] + (int64_t)g * d->vs[1];
        dkb = c->dk + (int64_t)b * d->ks[0] + (int64_t)g * d->ks[1];
        dvb = c->dv + (int64_t)b * d->vs[0] + (int64_t)g * d->vs[1];
    } else {
        khb = c->kh + (int64_t)b * dh->ks[0] + (int64_t)g * dh->ks[1] + k0 * dh->ks[2];
        vhb = c->vh + (int64_t)b * dh->vs[0] + (int64_t)g * dh->vs[1] + k0 * dh->vs[2];
        Qf = c->ws + (size_t)tid * pl->thread_floats + pl->f32_off;
        dOf = Qf + (size_t)pl->qf_rows * D;
        Rf = dOf + (size_t)pl->qf_rows * Dv;
    }
    if (pl->bf) {
        uint32_t *w = (uint32_t *)(c->ws + (size_t)tid * pl->thread_floats + pl->bf_off);
        size_t q2 = (size_t)pl->qb32 / 2;
#define FA__BW(p, n) do { p = w; w += fa__round16(n); } while (0)
        FA__BW(Kw, (size_t)ldk * D / 2); FA__BW(Vw, (size_t)ldk * Dv / 2); FA__BW(Kv, (size_t)pl->nk32 / 2 * D);
        FA__BW(Qv, q2 * D); FA__BW(dOv, q2 * Dv); FA__BW(QT, q2 * D); FA__BW(dOT, q2 * Dv);
        FA__BW(Pp, q2 * ldk); FA__BW(dSp, q2 * ldk);
        Qb = (uint16_t *)w; w += fa__round16(q2 * D);
        dOb = (uint16_t *)w; w += fa__round16(q2 * Dv);
        dSb = (uint16_t *)w;
        (void)QT; (void)dOT;            /* the tiles' layout (AMX builds only) */
#undef FA__BW
        bf = fa__bf16_finite(khb, dh->ks[2], nk, D) && fa__bf16_finite(vhb, dh->vs[2], nk, Dv);
        if (bf) {
            int j0, u;
            for (j0 = 0; j0 < ldk; j0 += 16) {      /* Kw, Vw: 16 keys at a time (past nk: 0) */
                const uint16_t *kr[16], *vr[16];
                for (u = 0; u < 16; u++) {
                    kr[u] = j0 + u < nk ? khb + (int64_t)(j0 + u) * dh->ks[2] : NULL;
                    vr[u] = j0 + u < nk ? vhb + (int64_t)(j0 + u) * dh->vs[2] : NULL;
                }
                K->qpack_bf16(kr, D / 2, Kw + j0, ldk);
                K->qpack_bf16(vr, Dv / 2, Vw + j0, ldk);
            }
            K->vpack_bf16(khb, dh->ks[2], nk, D, Kv);
            memset(Kv + (size_t)(nk + 1) / 2 * D, 0, ((size_t)pl->nk32 / 2 - (size_t)(nk + 1) / 2) * D * sizeof(uint32_t));
        }
    }
#ifdef FA__HAVE_AMX
    if (bf && c->amx) fa__amx_begin();
#endif
    fa__key_rows(d, k0, k1, &ilo, &ihi);
    for (hh = 0; ilo < ihi && hh < d->group; hh++) {
        int h = g * d->group + hh;
        const float *qb = pl->hs ? NULL : c->q + (int64_t)b * d->qs[0] + (int64_t)h * d->qs[1];
        const float *dob = pl->hs ? NULL : c->d_o + (int64_t)b * d->os[0] + (int64_t)h * d->os[1];
        const uint16_t *qhb = pl->hs ? c->qh + (int64_t)b * dh->qs[0] + (int64_t)h * dh->qs[1] : NULL;
        const uint16_t *dohb = pl->hs ? c->doh + (int64_t)b * dh->os[0] + (int64_t)h * dh->os[1] : NULL;
        const int *fin = pl->bf ? c->fin + ((int64_t)b * d->Hq + h) * pl->qblocks : NULL;
        const float *lse = d->lse + ((int64_t)b * d->Hq + h) * d->Sq, *delta = c->delta + ((int64_t)b * d->Hq + h) * d->Sq;
        float *dqb = c->dq + (int64_t)b * d->qs[0] + (int64_t)h * d->qs[1];
        int *turn = c->turn + ((int64_t)b * d->Hq + h) * pl->qblocks;
        for (r = ilo / pl->qb; r * pl->qb < ihi; r++) {
            int64_t i0 = r * pl->qb, i1 = i0 + pl->qb < d->Sq ? i0 + pl->qb : d->Sq;
            int nr = (int)(i1 - i0), x, mask = !fa__block_unmasked(d, i0, i1, k0, k1), acc = mask || d->bias ? 2 : 1;
            int bb = 0, nr32 = (nr + 31) / 32 * 32, mr = c->amx ? nr32 : nr;
            const float *qr = qb ? qb + i0 * d->qs[2] : Qf, *dor = dob ? dob + i0 * d->os[2] : dOf;
            int64_t qst = qb ? d->qs[2] : D, ost = dob ? d->os[2] : Dv;    /* their rows' strides */
            const uint16_t *Qa = NULL, *dOa = NULL;     /* bf16 rows of the block, qla and ola elements apart */
            int64_t qla = 0, ola = 0;
            fa__tbwd_tiles(d, pl, r, &t0, &t1);
            if (kt < t0 || kt >= t1) continue;       /* not a tile of this block's turns */
            if (bf) bb = fin[r];
            if (bb && nr == nr32) {     /* the block's Q and dO rows as stored */
                Qa = qhb + i0 * dh->qs[2]; qla = dh->qs[2];
                dOa = dohb + i0 * dh->os[2]; ola = dh->os[2];
            } else if (bb) {   /* ... copied with zero rows to nr32 */
                const uint16_t *qh = qhb + i0 * dh->qs[2], *doh = dohb + i0 * dh->os[2];
                Qa = Qb; qla = D; dOa = dOb; ola = Dv;
                for (x = 0; x < nr; x++) {
                    memcpy(Qb + (size_t)x * D, qh + x * dh->qs[2], (size_t)D * 2);
                    memcpy(dOb + (size_t)x * Dv, doh + x * dh->os[2], (size_t)Dv * 2);
                }
                memset(Qb + (size_t)nr * D, 0, (size_t)(nr32 - nr) * D * 2);
                memset(dOb + (size_t)nr * Dv, 0, (size_t)(nr32 - nr) * Dv * 2);
            } else if (pl->hs) {    /* the fp32 kernels' rows, converted (packed rows: in one call) */
                fa__h2f_rows(K, dh->dtype, qhb + i0 * dh->qs[2], dh->qs[2], nr, D, Qf);
                fa__h2f_rows(K, dh->dtype, dohb + i0 * dh->os[2], dh->os[2], nr, Dv, dOf);
            }
            if (!bb && !packed32) {     /* the fp32 tile: Kt (scaled), Vt, Kp */
                packed32 = 1;
                memset(Kt, 0, (size_t)ldk * D * sizeof(float));
                memset(Vt, 0, (size_t)ldk * Dv * sizeof(float));
                for (j = 0; j < nk; j++) {
                    const float *kr = Rf, *vr = Rf + D;
                    float *kp = Kp + (size_t)j * ldd;
                    if (kb) { kr = kb + (k0 + j) * d->ks[2]; vr = vb + (k0 + j) * d->vs[2]; }
                    else {
                        K->h2f(dh->dtype, khb + (int64_t)j * dh->ks[2], Rf, D);
                        K->h2f(dh->dtype, vhb + (int64_t)j * dh->vs[2], Rf + D, Dv);
                    }
                    for (t = 0; t < D; t++) {
                        float xk = kr[t] * d->scale;
                        Kt[(size_t)t * ldk + j] = xk;
                        kp[t] = xk;
                        if (xk - xk != 0.0f) finite_k = 0;
                    }
                    for (t = D; t < ldd; t++) kp[t] = 0.0f;
                    for (t = 0; t < Dv; t++) Vt[(size_t)t * ldk + j] = vr[t];
                }
            }
            {   /* the next block's Q and dO rows toward L2 during this block's five GEMMs (as the
                   forward streams its next K/V block, cpu-v15): they come from L3 at long S */
                int64_t n1 = i1 < ihi ? (i1 + pl->qb < d->Sq ? pl->qb : d->Sq - i1) : 0, lines, it;
                if (qb) {
                    fa__pf_set(&pf, 0, qb, d->qs[2], i1, i1 + n1, D);
                    fa__pf_set(&pf, 1, dob, d->os[2], i1, i1 + n1, Dv);
                } else {    /* bf16 as stored */
                    fa__pf_set_es(&pf, 0, qhb, dh->qs[2], i1, i1 + n1, D, 2);
                    fa__pf_set_es(&pf, 1, dohb, dh->os[2], i1, i1 + n1, Dv, 2);
                }
                lines = n1 * (pf.lines[0] + pf.lines[1]);
                it = (int64_t)(nvk + 2) / 3 * ((nr + 7) / 8) * (2 * (int64_t)D + 2 * Dv) + (int64_t)(ldd / 16 + 2) / 3 * ((nr + 7) / 8) * nk;
                pf.mask = it >= 8 * lines ? 3 : it >= 4 * lines ? 1 : 0;
            }
            if (bb) {
                fa__bwd_mm(c, Qa, 2 * qla, 4, mr, D, Kw, ldk, P, ldk, nvk * 16, 0, d->scale, &pf);
                fa__bwd_mm(c, dOa, 2 * ola, 4, mr, Dv, Vw, ldk, dS, ldk, nvk * 16, 0, 1.0f, &pf);
            } else {
                K->gemm(qr, qst, 1, nr, D, Kt, ldk, P, ldk, nvk, 0, &pf);
                K->gemm(dor, ost, 1, nr, Dv, Vt, ldk, dS, ldk, nvk, 0, &pf);
            }
            for (x = 0; x < nr; x++) {
                float *s = P + (size_t)x * ldk;
                if (G) fa__bwd_softcap(isa, s, G + (size_t)x * ldk, nvk * 16, d->softcap);
                if (mask || d->alibi || d->bias) fa__modify_row(&nosc, b, h, i0 + x, k0, nk, s, 1, mask, isa);
            }
            fa__bwd_pds(isa, P, dS, G, ldk, nr, nvk * 16, nk, lse + i0, delta + i0, NULL, NULL);
            if (bb) {
                int np = nr32 / 2, kw = c->amx ? np : (nr + 1) / 2;
                /* dVt += dO^T P and dKt += Q^T dS over the block's row pairs (rows past nr: 0) */
                K->ppack_bf16(P, ldk, nr, nvk, Pp);
                K->ppack_bf16(dS, ldk, nr, nvk, dSp);
                for (x = (nr + 1) / 2; x < np; x++) {
                    memset(Pp + (size_t)x * ldk, 0, (size_t)nvk * 16 * sizeof(uint32_t));
                    memset(dSp + (size_t)x * ldk, 0, (size_t)nvk * 16 * sizeof(uint32_t));
                }
                K->vpack_bf16(dOa, ola, nr32, Dv, dOv);
                K->vpack_bf16(Qa, qla, nr32, D, Qv);
#ifdef FA__HAVE_AMX
                if (c->amx) {
                    K->amx_vt(dOv, np, Dv, dOT, np);
                    K->amx_vt(Qv, np, D, QT, np);
                    fa__bwd_mm(c, dOT, 4 * (int64_t)np, 4, Dv, nr32, Pp, ldk, dVt, ldk, nvk * 16, 1, 1.0f, &pf);
                    fa__bwd_mm(c, QT, 4 * (int64_t)np, 4, D, nr32, dSp, ldk, dKt, ldk, nvk * 16, 1, 1.0f, &pf);
                } else
#endif
                {
                    fa__bwd_mm(c, dOv, 4, 4 * (int64_t)Dv, Dv, 2 * kw, Pp, ldk, dVt, ldk, nvk * 16, 1, 1.0f, &pf);
                    fa__bwd_mm(c, Qv, 4, 4 * (int64_t)D, D, 2 * kw, dSp, ldk, dKt, ldk, nvk * 16, 1, 1.0f, &pf);
                }
                /* dq's contribution: scale * dS K over the tile's keys (dSb, Kv: past nk 0) */
                for (x = 0; x < mr; x++) {
                    uint16_t *db = dSb + (size_t)x * pl->nk32;
                    if (x < nr) K->f2h(FA_BF16, dS + (size_t)x * ldk, db, nk);
                    else memset(db, 0, (size_t)nk * 2);
                    memset(db + nk, 0, (size_t)(pl->nk32 - nk) * 2);
                }
                fa__bwd_pf_rows(dqb + i0 * d->qs[2], d->qs[2], nr, D);     /* dq's rows (L3 at long S) during the product */
                fa__bwd_mm(c, dSb, 2 * (int64_t)pl->nk32, 4, mr, (nk + 31) / 32 * 32, Kv, D, dQ, ldd, D, 0, d->scale, &pf);
            } else {
                K->gemm(dor, 1, ost, Dv, nr, P, ldk, dVt, ldk, nvk, acc, &pf);
                K->gemm(qr, 1, qst, D, nr, dS, ldk, dKt, ldk, nvk, acc, &pf);
                /* dq's contribution; a hidden key's non-finite k must reach no row (0 * inf is NaN) */
                if (finite_k || !acc) K->gemm(dS, ldk, 1, nr, nk, Kp, ldd, dQ, ldd, ldd / 16, 0, &pf);
                else
                    for (x = 0; x < nr; x++) {
                        float *o_ = dQ + (size_t)x * ldd;
                        for (t = 0; t < D; t++) o_[t] = 0.0f;
                        for (j = 0; j < nk; j++) {
                            float w = dS[(size_t)x * ldk + j];
                            if (w != 0.0f) for (t = 0; t < D; t++) o_[t] += w * Kp[(size_t)j * ldd + t];
                        }
                    }
            }
            fa__turn_wait(c, turn + r, (int)kt);
            for (x = 0; x < nr; x++) {
                float *dqr = dqb + (i0 + x) * d->qs[2];
                const float *src = dQ + (size_t)x * ldd;
                if (kt == t0) memcpy(dqr, src, (size_t)D * sizeof(float));
                else fa__bwd_add(isa, dqr, src, D);
            }
            fa__turn_pass(c, turn + r, (int)kt + 1);
            if (pl->hs && kt == t1 - 1)     /* the rows' last turn: dq in the storage type */
                for (x = 0; x < nr; x++)
                    K->f2h(dh->dtype, dqb + (i0 + x) * d->qs[2],
                           c->dqh + (int64_t)b * dh->qs[0] + (int64_t)h * dh->qs[1] + (i0 + x) * dh->qs[2], D);
        }
    }
#ifdef FA__HAVE_AMX
    if (bf && c->amx) fa__amx_end();
#endif
#ifdef FLASHATTN__X86
    if (pl->hs && isa == 2 && D % 16 == 0 && Dv % 16 == 0) {    /* 16 keys at a time through a transpose,
                                                                     into Qf and dOf (free now) */
        uint16_t *dkh = c->dkh + (int64_t)b * dh->ks[0] + (int64_t)g * dh->ks[1] + k0 * dh->ks[2];
        uint16_t *dvh = c->dvh + (int64_t)b * dh->vs[0] + (int64_t)g * dh->vs[1] + k0 * dh->vs[2];
        int j0, u;
        for (j0 = 0; j0 < nk; j0 += 16) {
            fa__bwd_cols_avx512(dKt, ldk, D, j0, 1, d->scale, Qf);
            fa__bwd_cols_avx512(dVt, ldk, Dv, j0, 0, 1.0f, dOf);
            for (u = 0; u < 16 && j0 + u < nk; u++) {
                K->f2h(dh->dtype, Qf + (size_t)u * D, dkh + (int64_t)(j0 + u) * dh->ks[2], D);
                K->f2h(dh->dtype, dOf + (size_t)u * Dv, dvh + (int64_t)(j0 + u) * dh->vs[2], Dv);
            }
        }
        jdone = nk;
    }
#endif
    for (j = jdone; j < nk; j++) {
        if (pl->hs) {   /* rows in the storage type (the fp32 values, rounded by the copies' conversion) */
            for (t = 0; t < D; t++) Rf[t] = dKt[(size_t)t * ldk + j] * d->scale;
            K->f2h(dh->dtype, Rf, c->dkh + (int64_t)b * dh->ks[0] + (int64_t)g * dh->ks[1] + (k0 + j) * dh->ks[2], D);
            for (t = 0; t < Dv; t++) Rf[t] = dVt[(size_t)t * ldk + j];
            K->f2h(dh->dtype, Rf, c->dvh + (int64_t)b * dh->vs[0] + (int64_t)g * dh->vs[1] + (k0 + j) * dh->vs[2], Dv);
        } else {
            float *dkr = dkb + (k0 + j) * d->ks[2], *dvr = dvb + (k0 + j) * d->vs[2];
            for (t = 0; t < D; t++) dkr[t] = dKt[(size_t)t * ldk + j] * d->scale;
            for (t = 0; t < Dv; t++) dvr[t] = dVt[(size_t)t * ldk + j];
        }
    }
}

FLASHATTN__CPU_DEF size_t fa_tiled_backward_workspace_bytes(const fa_params *p)
{
    fa__dims d;
    fa__tbwd_plan pl;
    if (!p || fa__resolve(p, p, p, p, p, &d, NULL) != FA_OK || fa__cpu_check(&d) != FA_OK) return 0;
    fa__tbwd_plan_make(&d, &pl);
    return fa__add_size(pl.total, fa__tbwd_half_bytes(&d, &pl));
}

FLASHATTN__CPU_DEF fa_status fa_tiled_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                               const void *o, const void *d_o, void *dq, void *dk, void *dv)
{
    fa__dims d, d2;
    fa__tbwd_plan pl;
    fa__bwd_ctx c;
    size_t total;
    void *mem;
    char *pool_mem;
    fa_status st = fa__bwd_resolve(p, q, k, v, o, d_o, dq, dk, dv, 1, &d, NULL);
    if (st != FA_OK) return st;
    if (d.Sq == 0 || d.Sk == 0) {
        if (d.Sq == 0) fa__bwd_zero_kv(&d, dk, dv);
        else fa__bwd_zero_q(&d, dq);
        return FA_OK;
    }
    fa__tbwd_plan_make(&d, &pl);
    total = fa__add_size(pl.total, fa__tbwd_half_bytes(&d, &pl));
    if (total == SIZE_MAX) return FA_ERR_NO_MEMORY;
    mem = FLASHATTN_MALLOC(total);
    if (!mem) return FA_ERR_NO_MEMORY;
    memset(&c, 0, sizeof c);
    c.d = &d; c.isa = fa__isa(); c.plan = &pl; c.K = fa__kernels_for(c.isa);
    c.q = (const float *)q; c.k = (const float *)k; c.v = (const float *)v; c.o = (const float *)o;
    c.d_o = (const float *)d_o; c.dq = (float *)dq; c.dk = (float *)dk; c.dv = (float *)dv;
    c.ws = (float *)fa__align64(mem);
    c.delta = c.ws + pl.thread_floats * pl.nthreads;
    c.turn = (int *)(c.delta + pl.delta_floats);
    c.fin = c.turn + pl.turn_ints;
    pool_mem = (char *)(c.fin + pl.fin_ints);
#ifndef FA__TURN_ATOMIC
    if (pthread_mutex_init(&c.mu, NULL) != 0) { FLASHATTN_FREE(mem); return FA_ERR_NO_MEMORY; }
    if (pthread_cond_init(&c.cv, NULL) != 0) { pthread_mutex_destroy(&c.mu); FLASHATTN_FREE(mem); return FA_ERR_NO_MEMORY; }
#endif
    if (pl.hs) {    /* half storage read as given (fa__tbwd_item), dq summed in fp32 */
        d2 = d;
        d2.dtype = FA_F32;
        fa__packed3(d.B, d.Hq, d.Sq, d.D, d2.qs);
        fa__packed3(d.B, d.Hkv, d.Sk, d.D, d2.ks);
        fa__packed3(d.B, d.Hkv, d.Sk, d.Dv, d2.vs);
        fa__packed3(d.B, d.Hq, d.Sq, d.Dv, d2.os);
        c.d = &d2; c.dh = &d;
        c.q = c.k = c.v = c.o = c.d_o = NULL; c.dk = c.dv = NULL;
        c.dq = (float *)fa__align64((char *)mem + pl.total);
        c.qh = (const uint16_t *)q; c.kh = (const uint16_t *)k; c.vh = (const uint16_t *)v; c.doh = (const uint16_t *)d_o;
        c.oh = (const uint16_t *)o; c.dqh = (uint16_t *)dq; c.dkh = (uint16_t *)dk; c.dvh = (uint16_t *)dv;
#ifdef FA__HAVE_AMX
        c.amx = pl.amx && fa__amx_permit();     /* a refusal: vdpbf16ps */
#endif
    }
    fa__run(d.pool, fa__tbwd_prep, &c, (int64_t)d.B * d.Hq, pl.nthreads, pool_mem);
    fa__run(d.pool, fa__tbwd_item, &c, pl.items, pl.nthreads, pool_mem);
#ifndef FA__TURN_ATOMIC
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
#endif
    FLASHATTN_FREE(mem);
    return FA_OK;
}

/* ---- what a CPU call would run (fa_describe) --------------------------------------------------- */

static const char *fa__isa_name(int isa) { return isa == 2 ? "avx512f" : isa == 1 ? "avx2+fma" : "portable C"; }

FLASHATTN__CPU_DEF size_t fa_describe(const fa_params *p, fa_call call, char *buf, size_t n)
{
    fa__dims d;
    const char *why = NULL;
    char line[900], half[320];
    int isa = fa__isa(), len;
    fa_status st = fa__resolve(p, p, p, p, p, &d, &why);
    half[0] = '\0';
    if (st == FA_OK && d.dtype != FA_F32)
        snprintf(half, sizeof half, "; %s storage: %s%s%s", d.dtype == FA_F16 ? "fp16" : "bf16",
                 call == FA_CALL_TILED ? "each K/V block and Q row converted once per tile by " : "fp32 copies made by ",
                 call == FA_CALL_TILED ? fa__half_name(isa) : fa__kernels_for(isa)->cvt_name,
                 call == FA_CALL_TILED ? "" : " conversion, the fp32 path on them");
    if (st == FA_OK) st = fa__cpu_check_why(&d, &why);
    if (st != FA_OK) {
        len = snprintf(line, sizeof line, "refused: %s", why ? why : fa_status_string(st));
    } else if (call == FA_CALL_NAIVE) {
        fa__naive_plan pl;
        fa__naive_plan_make(&d, &pl);
        len = snprintf(line, sizeof line, "fa_naive: %s [%d][%d][%d][%d] scores, GEMMs %s, %s softmax; %d threads; "
                       "workspace %zu bytes%s", "materialised", d.B, d.Hq, d.Sq, d.Sk,
#ifdef FLASHATTN_NO_BLAS
                       "by the header's loops",
#else
                       "by OpenBLAS (its thread count untouched)",
#endif
                       fa__isa_name(isa), pl.nthreads, d.Sq ? fa__add_size(pl.total, fa__half_bytes(&d, 0)) : 0, half);
    } else if (call == FA_CALL_TILED) {
        fa__tiled_plan pl;
        fa__tiled_plan_make(&d, fa__kernels_for(isa), &pl);
        if (pl.amx)
            snprintf(half, sizeof half, "; bf16 storage: both products on AMX-BF16 tiles (tdpbf16ps; vdpbf16ps if the "
                     "kernel refuses the tile state), K read as stored, Q packed once per tile, V %s, P rounded to bf16",
                     pl.vt_all ? "transposed once per call" : "once per tile");
        else if (pl.dpbf16)
            snprintf(half, sizeof half, "; bf16 storage: both products on avx512bf16 vdpbf16ps (K read as stored, Q and "
                     "V packed once per tile, P rounded to bf16)");
        else if (pl.rowmajor && d.dtype != FA_F32 && fa__kernels_for(isa)->dots_h)
            snprintf(half, sizeof half, "; %s storage: the decode kernels read K/V as stored, widened in registers",
                     d.dtype == FA_F16 ? "fp16" : "bf16");
        len = snprintf(line, sizeof line, "fa_tiled: %s kernels%s; tiles of %d query rows x %d heads, key blocks of %d; "
                       "key split %d chunk%s of %d blocks; %lld items on %d threads%s; workspace %zu bytes%s",
                       fa__isa_name(isa), pl.rowmajor ? " (row-major decode)" : "", pl.nq, pl.hpt, pl.bk, pl.nchunk,
                       pl.nchunk == 1 ? "" : "s", pl.cb, (long long)pl.items, pl.nthreads,
                       pl.ranges && pl.nthreads > 1 ? " (by head, a run of them a thread first)" : "", pl.total, half);
    } else if (call == FA_CALL_NAIVE_BACKWARD) {
        fa__nbwd_plan pl;
        fa__nbwd_plan_make(&d, &pl);
        len = snprintf(line, sizeof line, "fa_naive_backward: P and dS materialised (%zu matrices of [%d][%d][%d][%d]), "
                       "GEMMs %s, %s; an item per batch and kv head on %d threads; workspace %zu bytes%s", pl.mats,
                       d.B, d.Hq, d.Sq, d.Sk,
#ifdef FLASHATTN_NO_BLAS
                       "by the header's loops",
#else
                       "by OpenBLAS",
#endif
                       fa__isa_name(isa), pl.nthreads,
                       d.Sq && d.Sk ? fa__add_size(pl.total, fa__half_bytes(&d, 1)) : pl.total, half);
    } else if (call == FA_CALL_TILED_BACKWARD) {
        fa__tbwd_plan pl;
        fa__tbwd_plan_make(&d, &pl);
        if (pl.bf)
            snprintf(half, sizeof half, "; bf16 storage: the five products in bf16 on %s (fp32 sums; P and dS rounded to "
                     "bf16), the inputs read as stored, dq summed in fp32, blocks with an inf or NaN converted by %s for "
                     "the fp32 kernels",
                     pl.amx ? "AMX-BF16 tiles (tdpbf16ps; vdpbf16ps if the kernel refuses the tile state)" : "avx512bf16 vdpbf16ps",
                     fa__kernels_for(isa)->cvt_name);
        else if (pl.hs)
            snprintf(half, sizeof half, "; %s storage: the inputs read as stored, each key tile's K, V and each query "
                     "block's Q, dO converted to fp32 by %s for the fp32 kernels (the fp32 call's bits), dk, dv written by "
                     "their tile, dq summed in fp32", d.dtype == FA_F16 ? "fp16" : "bf16", fa__kernels_for(isa)->cvt_name);
        len = snprintf(line, sizeof line, "fa_tiled_backward: %s kernels; key tiles of %d keys, query blocks of %d rows "
                       "(dq added in key-tile order); %lld items on %d threads; workspace %zu bytes%s",
                       fa__isa_name(isa), pl.kt, pl.qb, (long long)pl.items, pl.nthreads,
                       fa__add_size(pl.total, fa__tbwd_half_bytes(&d, &pl)), half);
    } else {
        len = snprintf(line, sizeof line, "refused: call is not an fa_call value");
    }
    return fa__line_out(buf, n, line, len);
}

#ifdef __cplusplus
}
#endif

/* ============================================================================================== */
/* 8. CUDA backend (FLASHATTN_CUDA, compiled by nvcc)                                      >>cuda */
/* ============================================================================================== */
/* 8a the kernels and their tile configurations, named; 8b common device pieces, the score-modifier
   rule and the log-sum-exp merge rule on the device; 8c the generic kernel (FFMA, any dtype and
   head_dim); 8d the tensor-core kernel (fp16/bf16, cut into the steps a backward and a Hopper
   kernel reuse); 8d2 the split-key decode kernels (few query rows: GQA group packed, keys cut in
   chunks fixed by Sk, partials merged by 8b's rule); 8d3 the Hopper forward kernel (sm_90a: wgmma,
   TMA into an mbarrier ring, a producer warpgroup and two ping-ponging consumers, on 8d's steps);
   8e the naive path's and merge's kernels;
   8e2 the backward (the naive path's kernels, the FFMA tiled backward with its dq turns and its
   dq pass for non-finite inputs, the tensor-core tiled backward and its deterministic dq pass, and
   its fp32 form on 3xTF32 products with dq in turns); 8e3 the Hopper backward
   (sm_90a: wgmma dK/dV and dq kernels on 8e2's element steps, TMA); 8f the kernel pickers (forward and
   backward) and the launches; 8g the entry points. */

#if defined(FLASHATTN_CUDA) && defined(__CUDACC__)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>

/* ---- 8a. CUDA: the kernels, their tile configurations and tuning constants -------------------- */

/* Every kernel fa_cuda_tiled can run. fa__cu_pick (8f) chooses one per request and fa__cu_launch
   runs it: one place decides, and what it decided can be asked (the tests assert it per shape). */
typedef enum fa__cu_kernel {
    FA__CU_TC_D64 = 0,      /* tensor cores (mma.sync), fp16/bf16, D = Dv = 64, 16-byte aligned rows */
    FA__CU_TC_D128,         /* the same at D = Dv = 128 */
    FA__CU_F32_D64,         /* fp32, q/k/v rows 16-byte aligned, D, Dv <= 64: (block_q, block_k) (0, 0), (64, 0|64) */
    FA__CU_F32_D64_Q64K32,  /*   block_q 64, block_k 32 */
    FA__CU_F32_D64_Q128K32, /*   block_q 128, block_k 32 */
    FA__CU_F32_D64_Q128,    /*   block_q 128, block_k 0 */
    FA__CU_F32_D128,        /* aligned fp32, D, Dv <= 128: (0, 0) and (64, 64) */
    FA__CU_F32_D128_Q64,    /*   block_q 64, block_k 0 or 32 */
    FA__CU_F32_D128_Q128,   /*   block_q 128, block_k 0, where ~200 KB of shared memory fit (Hopper) */
    FA__CU_F32_D128_K32,    /*   block_k 32 otherwise */
    FA__CU_GENERIC_D64,     /* any dtype and layout, D, Dv <= 64 (and aligned fp32 not listed above) */
    FA__CU_GENERIC_D128,    /*   D, Dv <= 128 */
    FA__CU_GENERIC_D256,    /*   D, Dv <= 256 */
    FA__CU_DEC_TC_D64,      /* split-key decode (8d2), few query rows: tensor cores, fp16/bf16, D = Dv = 64, aligned */
    FA__CU_DEC_TC_D128,     /*   the same at D = Dv = 128 */
    FA__CU_DEC_TC_D64_R32,  /*   blocks of 32 packed rows (group * Sq > 16), D = Dv = 64 */
    FA__CU_DEC_TC_D128_R32, /*   blocks of 32 packed rows, D = Dv = 128 */
    FA__CU_DEC_D64,         /*   FFMA, any dtype and layout, D, Dv <= 64 */
    FA__CU_DEC_D128,        /*   D, Dv <= 128 */
    FA__CU_DEC_D256,        /*   D, Dv <= 256 */
    FA__CU_WG_D128,         /* Hopper (8d3, sm_90a): wgmma, TMA, warp-specialised; fp16/bf16, D = Dv = 128, TMA-able strides */
    FA__CU_WG_D64,          /*   the same at D = Dv = 64 */
    FA__CU_KERNELS
} fa__cu_kernel;

/* Every kernel fa_cuda_tiled_backward can run (8e2, 8e3), picked by fa__cu_pick_backward (8f): the
   FFMA backward of each head-dim class (D and Dv padded up to it), any storage type and layout, the
   tensor-core backward (fp16/bf16, D = Dv = 64 or 128, 16-byte aligned rows, sm_80+), and on
   compute capability 9.0 with this build's sm_90a code the Hopper one (the same requests where TMA
   takes q, k, v and d_o), and its fp32 form on 3xTF32 products (fp32, the same head dims and
   alignment, sm_80+; not built under FLASHATTN_CUDA_FP32_FFMA). A separate
   enum from the forward's, so that the forward's "every kernel served" count stays its own. */
typedef enum fa__cu_bwd_kernel {
    FA__CU_BWD_D64 = 0,     /* D, Dv <= 64 */
    FA__CU_BWD_D128,        /* D, Dv <= 128 */
    FA__CU_BWD_D256,        /* D, Dv <= 256 */
    FA__CU_BWD_TC_D64,      /* tensor cores (mma.sync), fp16/bf16, D = Dv = 64, 16-byte aligned rows */
    FA__CU_BWD_TC_D128,     /*   the same at D = Dv = 128 */
    FA__CU_BWD_WG_D64,      /* Hopper (8e3, sm_90a): wgmma dK/dV and dq kernels, TMA; fp16/bf16, D = Dv = 64, TMA-able q, k, v, d_o */
    FA__CU_BWD_WG_D128,     /*   the same at D = Dv = 128 */
    FA__CU_BWD_TC32_D64,    /* tensor cores for fp32 (3xTF32 mma.sync, sm_80+), D = Dv = 64, 16-byte aligned rows */
    FA__CU_BWD_TC32_D128,   /*   the same at D = Dv = 128 */
    FA__CU_BWD_KERNELS
} fa__cu_bwd_kernel;

/* The generic kernel's tile configurations (8c), one per FA__CU_F32_* and FA__CU_GENERIC_* kernel.
   DC: the head-dim class (D and Dv padded up to it). RM x CN: a thread's register block (BQ = 16 RM
   query rows a block, BK = 16 CN keys a tile). PIPE: 0 one K/V buffer, P written over K; 1 K and V
   double-buffered by cp.async one tile ahead, P in a region of its own; 2 the same with P over the
   K tile just consumed (fp32 with 16-byte aligned rows only). MINB: the blocks per SM it is
   compiled for (__launch_bounds__: 255 registers a thread at 1, 128 at 2, 80 at 3; above 1 the
   launch asks for the largest shared-memory carveout). Why these: bench/RESULTS.md, CUDA, "fp32
   generic kernel" (a row per configuration: fewer FFMAs per shared load in 4 x 4 are won back by
   the second block per SM; BK = 32 pays twice the barriers and softmax steps per key). */
struct fa__cu_f32_d64 { enum { DC = 64, RM = 4, CN = 4, PIPE = 1, MINB = 2 }; };
struct fa__cu_f32_d64_q64k32 { enum { DC = 64, RM = 4, CN = 2, PIPE = 1, MINB = 3 }; };
struct fa__cu_f32_d64_q128k32 { enum { DC = 64, RM = 8, CN = 2, PIPE = 1, MINB = 2 }; };
struct fa__cu_f32_d64_q128 { enum { DC = 64, RM = 8, CN = 4, PIPE = 1, MINB = 1 }; };
struct fa__cu_f32_d128 { enum { DC = 128, RM = 4, CN = 4, PIPE = 0, MINB = 2 }; };
struct fa__cu_f32_d128_q64 { enum { DC = 128, RM = 4, CN = 2, PIPE = 1, MINB = 2 }; };
struct fa__cu_f32_d128_q128 { enum { DC = 128, RM = 8, CN = 4, PIPE = 2, MINB = 1 }; };
struct fa__cu_f32_d128_k32 { enum { DC = 128, RM = 8, CN = 2, PIPE = 1, MINB = 1 }; };
struct fa__cu_generic_d64 { enum { DC = 64, RM = 8, CN = 4, PIPE = 0, MINB = 1 }; };
struct fa__cu_generic_d128 { enum { DC = 128, RM = 8, CN = 4, PIPE = 0, MINB = 1 }; };
struct fa__cu_generic_d256 { enum { DC = 256, RM = 4, CN = 2, PIPE = 0, MINB = 1 }; };

/* The FFMA backward's tile configurations (8e2), one per FA__CU_BWD_* kernel. DC: the head-dim
   class. RM: query rows a thread (BQ = 16 RM rows a query block), CN: keys a thread (BK = 16 CN
   keys a key block). D = 256 halves both so that K, V, Q, dO and dS fit in shared memory. MINB:
   blocks per SM of the dK/dV kernel (D = 64: two of 103 KB, 128 registers a thread, spilling up to
   48 bytes; the deterministic dq kernel stays at one, where two spilled 260 bytes). UN: the S and
   dP loops (fa__cu_bwd_dots) unrolled by UN k-steps of 4 where D (Dv) is the class's own, so that
   ptxas issues the next step's shared loads under this step's FFMAs; UNPV and UNDQ: the unroll of
   the dV/dK loop (steps of 4 query rows) and of dq's loop over keys (fa__cu_bwd_dsk). The same
   products in the same order whatever the unroll (bench/RESULTS.md, CUDA backward, "FFMA
   backward: the loops unrolled", H100: 1.8-3.6% faster at D = 64, 1.0-2.1% at D = 128; D = 256:
   UN = UNPV = 1, UNDQ = 4, unmeasured). */
struct fa__cu_bwd_d64 { enum { DC = 64, RM = 4, CN = 4, MINB = 2, UN = 2, UNPV = 2, UNDQ = 8 }; };
struct fa__cu_bwd_d128 { enum { DC = 128, RM = 4, CN = 4, MINB = 1, UN = 2, UNPV = 2, UNDQ = 8 }; };
struct fa__cu_bwd_d256 { enum { DC = 256, RM = 2, CN = 2, MINB = 1, UN = 1, UNPV = 1, UNDQ = 4 }; };

/* The tensor-core kernel's tile configurations (8d), one per FA__CU_TC_* kernel. D: the head dim.
   NW: warps a block. MT: m16 tiles a warp (BQ = 16 MT NW query rows a block). BK: keys a tile.
   QREG: Q's fragments held in registers (else re-read from shared memory every tile). PF: each
   k-step's B fragments all loaded before its MMAs (else load, use, load, use). MINB: blocks per SM
   for the register budget. Why these: bench/RESULTS.md, CUDA, "Versions" v2-v3 and the tile sweep
   beside them (16 rows a warp doubles the ldmatrix traffic per MMA; BK = 128 at D = 64 and BK = 32
   at D = 128 spill or add barriers; PF removed D = 128's spills and is neutral at D = 64). */
struct fa__tc_d64 { enum { D = 64, NW = 4, MT = 2, BK = 64, QREG = 1, PF = 0, MINB = 2 }; };
struct fa__tc_d128 { enum { D = 128, NW = 4, MT = 2, BK = 64, QREG = 0, PF = 1, MINB = 1 }; };

/* The Hopper kernel's configuration (8d3), an fa__tc_* trait so that 8d's steps run on its
   fragments: NW consumer warps (NW / 4 warpgroups of 64 query rows, MT = 1: a warpgroup's m64
   wgmma accumulator is, warp by warp, 8d's m16 accumulator), BQ = 16 NW rows a block, BK = 128
   keys a tile, ST stages of K/V in the TMA ring, one producer warpgroup besides (WG = 32 NW + 128
   threads in all). REG_P / REG_C: the registers a producer / consumer thread keeps after
   setmaxnreg (the launch caps at 65536 / WG; REG_P * 128 + REG_C * 32 NW <= 65536). ST: as many
   stages as fit beside the Q tile in 227 KB (3 at D = 128: 224 KB; 4 at D = 64: 152 KB). D = 128:
   two consumers (o, S and P take 160 of their 232 registers). D = 64: three consumers of 160
   registers (o 32, S 64, P 32), 192 rows a block, so that two consumers' softmax runs while the
   third's GEMMs hold the tensor pipe, where rows see >= 1024 keys (fa__wg_wide, 8f; else
   fa__wg_d64x2). PP: the consumers take turns at their GEMMs (ping-pong, in
   consumer order; 0 only for the bench's ablation). XP0, XP1, XP2: of every 16 column pairs of
   a score tile, how many take their exps on the FMA pipe (section 1's fa__ex2_poly, through 8d's
   fa__tc_exp_pack) rather than the MUFU, in modifier variants 0 (plain), 1 (softcap: its tanh
   holds the MUFU too) and 2 (ALiBi); variant 4 takes none. All 0: every share measured slower on
   the H200, the more the slower (softcap at D = 128, 8 of 16: -5.5%; D = 64 plain, 3: -9%), as if
   a consumer's softmax were bound by its warps' instruction issue rather than by the MUFU
   (bench/RESULTS.md, "Hopper forward (issue 15)", exp shares); kept for the bench's --xp.
   PER: the block schedule. 0: a grid of every query tile, a block each (the hardware hands the next
   tile to the first SM free). 1-3: persistent, at most one block an SM, each walking its tiles
   in section 1's fa__sched_item order, so that a block's next Q tile and first K/V stages load while
   its consumers finish the last tile (the launch, the ring's fill and the output's store no longer
   idle the SM between tiles); causal tiles in one longest-first run over every head (1), which
   the static schedule balances, in fa__qtile_group's L2 groups as PER 0 (2, the bench's), or (3)
   where each block gets two tiles or more, in section 1's pairs of a head (fa__qtile_zig, walked by
   fa__sched_pair: a long tile and its short complement, every pair the same work, the heads one
   after another, so that the blocks in flight read a few heads' K/V, from L2), else as 1.
   Non-causal tiles go in the L2 groups with PER 0-2, and with PER 3 the heads one after another
   (groups of one head), which ran D = 128 5-6% faster at 2k-4k on an H100 than groups of
   FA__CU_L2_SET bytes (bench/RESULTS.md, "Causal tiles in pairs of a head").
   OV: the modifier variants (bit v: variant v, of 0-2) whose GEMM step issues S_j = Q K_j^T and
   O += P_{j-1} V_{j-1} as two wgmma groups and runs tile j's scores and softmax once the first
   has retired, under the second; then it rescales O and packs P (FlashAttention-3's
   intra-warpgroup overlap); the others: both GEMMs one group, the softmax after both. D = 128:
   softcap and ALiBi (6, FA__CU_WG_OV), which measured 3.3-3.8% faster with it on the H200; plain
   measured level (0.985-1.010x, so it keeps the one-group step), D = 64 not tried (0)
   [bench/RESULTS.md, "Hopper forward (issue 15)", "Softmax overlap at D = 128"].
   QE: 1 where a causal request's query tiles end at row Sq rather than start at row 0 (8b's
   fa__cu_qrow0): where BQ does not divide Sq the partial tile, its rows before row 0 padding, is
   then the first, which sees the fewest keys, rather than the last, which walks every key with
   the padding rows idle. fa__wg_d64 only: 192 rows divide no power of two (S = 2k-4k: ~5% of the
   causal work saved, bench/RESULTS.md, "Query tiles that end at row Sq"); 128 do, and the
   two-consumer block serves short rows and the bias variant, where it was not measured.
   OS: with PER 1 or 2, 1 where a tile's o goes through shared memory (each warp its own 16 rows,
   written back as 16-byte row pieces: 8d3's fa__wg_geom says where), 0 where it goes from the
   registers to global memory, a thread's two columns at a time (the store that PER 0 replaced by
   the dead Q tile's staging). 1: D = 128 +3% (2k) to +7% (2k causal), window 256 +13-17%, 16k
   level; D = 64 level (one H100 call: bench/RESULTS.md, "Hopper forward (issue 15)", "Staged o
   store"). The bench's configurations that name no OS take FA__CU_WG_OS (fa__wg_os). */
#ifndef FA__CU_WG_OV
#define FA__CU_WG_OV 6
#endif
#ifndef FA__CU_WG_OS
#define FA__CU_WG_OS 1
#endif
struct fa__wg_d128 {
    enum { D = 128, NW = 8, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 3, WG = 384, REG_P = 40, REG_C = 232, PP = 1,
           XP0 = 0, XP1 = 0, XP2 = 0, PER = 3, OV = FA__CU_WG_OV, QE = 0, OS = FA__CU_WG_OS };
};
struct fa__wg_d64 {
    enum { D = 64, NW = 12, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 4, WG = 512, REG_P = 24, REG_C = 160, PP = 1,
           XP0 = 0, XP1 = 0, XP2 = 0, PER = 3, OV = 0, QE = 1, OS = FA__CU_WG_OS };
};
/* D = 64's two-consumer block (128 rows, 232 registers a consumer): modifier variant 4 (bias,
   combinations: fa__tc_mods; in 160 registers its constants spill 384 bytes) and rows that see
   few keys (fa__wg_wide, 8f) run on it. */
struct fa__wg_d64x2 {
    enum { D = 64, NW = 8, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 4, WG = 384, REG_P = 40, REG_C = 232, PP = 1,
           XP0 = 0, XP1 = 0, XP2 = 0, PER = 1, OV = 0, QE = 0, OS = FA__CU_WG_OS };
};

/* The tensor-core backward's configurations (8e2), one per FA__CU_BWD_TC_* kernel: a pair of 8d
   traits. KV, the dK/dV kernel's: each of NW warps owns 16 MT keys of the key block (16 MT NW keys,
   fa__tc_geom's BQ), the query rows walked in tiles of BK (64 or 32: dS^T is staged through shared
   memory in swizzled 16-byte chunks). DQ, the deterministic dq kernel's: the forward's arrangement
   (16 MT NW query rows a block, key tiles of BK). QREG and PF as in the forward. Why these:
   bench/RESULTS.md, "CUDA backward (issue 13)", "Tensor-core backward" and "round 2" (the kernels
   are bound by shared-memory reads: at D = 64, 32 keys or rows a warp (MT 2) halve the B-operand
   reads per MMA, in either kernel, the dq pass with key tiles of 32 (64 spill at 255 registers);
   D = 128 has no registers for MT 2; PF, 8-warp dq blocks and 32-key dq tiles at D = 128 measured
   no change). */
struct fa__tcb_kv_d64 { enum { D = 64, NW = 4, MT = 2, BK = 32, QREG = 0, PF = 0, MINB = 2 }; };
struct fa__tcb_dq_d64 { enum { D = 64, NW = 4, MT = 2, BK = 32, QREG = 0, PF = 0, MINB = 2 }; };
struct fa__tcb_kv_d128 { enum { D = 128, NW = 8, MT = 1, BK = 64, QREG = 0, PF = 0, MINB = 1 }; };
struct fa__tcb_dq_d128 { enum { D = 128, NW = 4, MT = 1, BK = 64, QREG = 0, PF = 0, MINB = 2 }; };
struct fa__tcb_d64 { typedef fa__tcb_kv_d64 KV; typedef fa__tcb_dq_d64 DQ; };
struct fa__tcb_d128 { typedef fa__tcb_kv_d128 KV; typedef fa__tcb_dq_d128 DQ; };

/* The fp32 tensor-core backward's configurations (8e2, 3xTF32), one per FA__CU_BWD_TC32_* kernel.
   The dK/dV kernel, the only one (dq by atomics, in key-block turns in the deterministic mode): KW
   warps of 16 keys each (a key block of 16 KW keys), the query rows walked in tiles of BQ (two
   stages); KMINB: its blocks per SM. Rows are padded to D + 4 floats in shared memory (8e2's
   fa__t32_geom), so the D = 128 block takes 215 KB: one block of 8 warps an SM at either D (D =
   64's 119 KB leaves no room for a second).
   Why these: bench/RESULTS.md, "CUDA backward (issue 13)", "fp32 on the tensor cores (3xTF32)".
   FA__CU_BWD_TC32: 0 under FLASHATTN_CUDA_FP32_FFMA (the fp32 backward stays on the FFMA kernel).
   FA__CU_T32_SPLIT, the 3xTF32 split of an operand x (fa__t32_split): 0 big = cvt.rna.tf32(x), small
   = cvt.rna.tf32(x - big); 1 the same big, small = x - big as it is (the tensor core truncates it);
   2 big = x with its low 13 bits cleared (truncated), small as 1; 3 big = x rounded as cvt.rna does
   by an add and a mask, small as 1 (the same bits as 1 for finite x). H100 (bench/RESULTS.md, "fp32
   on the tensor cores (3xTF32)", the split): 1 takes 0.87-0.92x 0's time (cvt.rna.tf32.f32 is a
   compare-and-select sequence in SASS, not one instruction), 3 0.82-0.87x 1's; 2 0.75-0.86x 1's but
   fails API.md's fp32 tolerance (its dropped small x small is biased: dk 3e-4 off with a bias). */
#ifndef FA__CU_T32_SPLIT
#define FA__CU_T32_SPLIT 3
#endif
#ifdef FLASHATTN_CUDA_FP32_FFMA
#define FA__CU_BWD_TC32 0
#else
#define FA__CU_BWD_TC32 1
#endif
struct fa__t32_d64 { enum { D = 64, KW = 8, BQ = 32, KMINB = 1 }; };
struct fa__t32_d128 { enum { D = 128, KW = 8, BQ = 32, KMINB = 1 }; };

/* The Hopper backward's configurations (8e3), one per FA__CU_BWD_WG_* kernel: its dK/dV kernel
   (fa__wgb_dkv) over key blocks of BKV = 128 keys (64 a consumer warpgroup, 16 a warp), the query
   rows walked in tiles of BQ = 64, ST stages of Q and dO tiles in the TMA ring (4 at D = 64: 96 KB;
   3 at D = 128: 160 KB), a producer warpgroup and two consumers (NT = 384 threads; registers
   REG_P / REG_C after setmaxnreg, REG_P 128 + REG_C 256 <= 65536); DQ its dq kernel (fa__wgq_dq):
   query blocks of BQ = 128 rows (64 a consumer), key tiles of BK in a ring of ST stages (D = 128:
   BK 64, so that dq, S, dP and dS fit the consumers' registers). */
struct fa__wgq_d64 { enum { D = 64, BQ = 128, BK = 128, ST = 2, NT = 384, REG_P = 24, REG_C = 240 }; };
struct fa__wgq_d128 { enum { D = 128, BQ = 128, BK = 64, ST = 3, NT = 384, REG_P = 24, REG_C = 240 }; };
struct fa__wgb_d64 {
    enum { D = 64, BKV = 128, BQ = 64, NT = 384, ST = 4, REG_P = 24, REG_C = 240 };
    typedef fa__wgq_d64 DQ;
};
struct fa__wgb_d128 {
    enum { D = 128, BKV = 128, BQ = 64, NT = 384, ST = 3, REG_P = 24, REG_C = 240 };
    typedef fa__wgq_d128 DQ;
};

/* The split-key decode kernels' configurations (8d2). The tensor-core one is an fa__tc_* trait
   (MT m16 tiles of packed query rows a warp, 16 MT RH rows a block, shared by NW warps in NW / RH
   key groups that each walk their own key tiles of BK through a ring of ST cp.async stages, RH
   warps a group, each on its own 16 MT rows) plus ST and RH; BK x D is 2 KB a row
   of the ring at both head dims, so that MINB blocks fit an SM: 2 (3 stages), and at D = 128 in
   16-row blocks 3 (2 stages, 68 KB, Q re-read from shared memory to stay within 168 registers;
   against 2 blocks of 3 stages +1-2% on the bench's rows, +7.6% at Sq = 4, where a block's
   epilogue is longer and the SM's other two blocks stream over it: RESULTS, CUDA decode, "dec4");
   QK2 1: S = Q K^T on two accumulator chains a tile (fa__dec_qk; at D = 128, whose 8 k-steps make
   one chain long; MT = 2 keeps the same two chains, so that a row's sums do not depend on MT).
   MT = 1 (16 rows); the _r32 ones (32 rows), where group * Sq > 16 and the grid of 16-row blocks takes more than one
   wave (8f), read each K/V tile once for a GQA/MQA group of up to 32 packed rows and give a row the
   same bits as the 16-row ones: at D = 64 one warp holds both m16 tiles (MT = 2); at D = 128 two
   warps of one m16 tile share each key group's rings (RH = 2, 8 warps, K copied by one and V by
   the other, a named barrier a tile; 2 blocks an SM at 128 registers: 16 warps an SM on 16 rows
   each, where MT = 2's 4 warps of 255 registers gave 8 on 32 rows, its warps' dependent chains
   the limit: RESULTS, CUDA decode, "decmq").
   LH 1: the K/V copies carry an L2 evict_first policy (fa__cu_cp16_ef): K and V are read once, so
   their lines go first and the chunks' partial o and lse that the split kernel writes stay in the
   L2 for the merge (RESULTS, CUDA decode, "decq": +3-4% a call where the partials are MBs, B = 8,
   32, Sq = 4, MQA B = 8, level at B = 1; "decp": +1.7-3.5% there on an H100). D = 64 keeps 0 (not
   measured). The FFMA
   one walks tiles of FA__CU_DEC_BK keys with FA__CU_DEC_THREADS threads over FA__CU_DEC_ROWS packed
   rows. Chunks: a row's keys are cut at multiples of fa__cu_dec_chunk's size (8f), a function of
   one sequence's shape (Sk, Hkv, group * Sq; never B, the device, or the block picked): at
   least FA__CU_DEC_CHUNK_MIN keys, a multiple of 256, and as many chunks as make about
   FA__CU_DEC_PARTS blocks a sequence (so at most that many). The picker takes the decode path for
   Sq <= FA__CU_DEC_MAX_SQ and group * Sq <= FA__CU_DEC_MAX_ROWS. */
struct fa__dec_d64 { enum { D = 64, NW = 4, MT = 1, BK = 32, QREG = 1, PF = 1, MINB = 2, ST = 3, QK2 = 0, RH = 1, LH = 0 }; };
struct fa__dec_d128 { enum { D = 128, NW = 4, MT = 1, BK = 16, QREG = 0, PF = 1, MINB = 3, ST = 2, QK2 = 1, RH = 1, LH = 1 }; };
struct fa__dec_d64_r32 { enum { D = 64, NW = 4, MT = 2, BK = 32, QREG = 1, PF = 1, MINB = 2, ST = 3, QK2 = 0, RH = 1, LH = 0 }; };
struct fa__dec_d128_r32 { enum { D = 128, NW = 8, MT = 1, BK = 16, QREG = 0, PF = 1, MINB = 2, ST = 3, QK2 = 1, RH = 2, LH = 1 }; };
#define FA__CU_DEC_ROWS 16
#define FA__CU_DEC_BK 32
#define FA__CU_DEC_THREADS 128
#define FA__CU_DEC_CHUNK_MIN 1024
#define FA__CU_DEC_PARTS 256
#define FA__CU_DEC_MAX_SQ 16
#define FA__CU_DEC_MAX_ROWS 64

/* The other constants of the CUDA path. FA__CU_THREADS is the generic kernel's block, a 16 x 16
   thread grid its tiles are laid out on (not a free knob). FA__CU_MERGE bounds the parts of one
   merge launch (their pointers travel as a kernel argument). The naive path: FA__CU_NAIVE_THREADS
   threads a softmax row, the row kept in shared memory up to FA__CU_NAIVE_ROW_SMEM bytes (else
   re-read from S), FA__CU_CUBLAS_WS bytes of cuBLAS workspace in its one allocation. */
#define FA__CU_THREADS 256
#define FA__CU_MERGE 32
#define FA__CU_NAIVE_THREADS 256
#define FA__CU_NAIVE_ROW_SMEM (48 * 1024)
#define FA__CU_CUBLAS_WS ((size_t)32 << 20)
/* The backward's first pass (fa__cu_bwd_prep) runs at most FA__CU_PREP_BLOCKS blocks of 256
   threads (8 row groups a block), its warps walking rows in grid strides beyond that. 1024 blocks
   timed the same as a block for every 8 row groups (0.17 ms with its workspace at bf16 D = 64,
   S = 2k, one call; RESULTS, CUDA backward, "The prep's grid"), so the cap stays out of the way. */
#ifndef FA__CU_PREP_BLOCKS
#define FA__CU_PREP_BLOCKS 65536
#endif
#define FA__CU_LOG2E 1.44269504088896341f
#define FA__CU_LN2 0.693147180559945309f
/* 1: the tensor-core kernels' online softmax (8d's fa__tc_softmax: the mma.sync forward, the
   Hopper forward, the tensor-core decode) moves a row's reference by section 1's lazy rule
   (fa__lazy_moves), as the CPU does; 0: to every new running max (rescaling O whenever one of a
   warp's 16 rows finds one) [RESULTS, Hopper forward, "Lazy rescale"]. */
#ifndef FA__CU_LAZY
#define FA__CU_LAZY 1
#endif

/* The forward kernels' block order (section 1's fa__qtile_of, through 8b's fa__cu_qtile): the (batch,
   head)s go in groups whose K and V take at most FA__CU_L2_SET bytes together, so that the blocks
   in flight read a few heads' K/V, which then stay in L2 (the H100's is 50 MB, the H200's 60 MB,
   the A100's 40 MB). */
#ifndef FA__CU_L2_SET
#define FA__CU_L2_SET ((int64_t)24 << 20)
#endif

/* ---- 8b. CUDA: runtime checks, memory, loads and stores, cp.async, the score-modifier rule ----- */

/* Every CUDA call is checked: an allocation failure is FA_ERR_NO_MEMORY, anything else
   FA_ERR_DEVICE. The (non-sticky) error is cleared so that it does not leak into later calls. */
static fa_status fa__cu(cudaError_t e)
{
    if (e == cudaSuccess) return FA_OK;
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? FA_ERR_NO_MEMORY : FA_ERR_DEVICE;
}

static fa_status fa__cublas(cublasStatus_t s)
{
    if (s == CUBLAS_STATUS_SUCCESS) return FA_OK;
    return s == CUBLAS_STATUS_ALLOC_FAILED ? FA_ERR_NO_MEMORY : FA_ERR_DEVICE;
}

/* The current device (*dev) and what the CUDA paths ask of it, read from the runtime once per device
   and process and kept (device attributes do not change while a process runs). Like the CPU's
   cpuid answers (fa__cpu_once), this and fa__cu_kern_attrs's flags are the only state the library
   keeps: facts that every thread would find the same, each slot written whole (every field, then
   `ready`, with section 4's release stores, fa__store_int) by whichever thread first needs it and
   read with acquire loads, so that two threads racing to fill it store the same values and
   concurrent calls stay safe (API.md). Devices past FA__CU_MAX_DEVICES ask every time. */
#define FA__CU_MAX_DEVICES 64
typedef struct fa__cu_facts {
    int major, minor;   /* compute capability */
    int optin, sms;     /* shared memory a block can opt in to; multiprocessors */
    int pools;          /* memory pools (cudaMallocAsync) supported */
} fa__cu_facts;

static fa_status fa__cu_facts_of(int *dev, fa__cu_facts *f)
{
    static int ready[FA__CU_MAX_DEVICES];
    static fa__cu_facts tab[FA__CU_MAX_DEVICES];
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess) {
        (void)cudaGetLastError();
        return FA_ERR_DEVICE;
    }
    *dev = d;
    if (d >= 0 && d < FA__CU_MAX_DEVICES && fa__load_int(&ready[d])) {
        f->major = fa__load_int(&tab[d].major); f->minor = fa__load_int(&tab[d].minor);
        f->optin = fa__load_int(&tab[d].optin); f->sms = fa__load_int(&tab[d].sms);
        f->pools = fa__load_int(&tab[d].pools);
        return FA_OK;
    }
    if (cudaDeviceGetAttribute(&f->major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&f->minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&f->optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&f->sms, cudaDevAttrMultiProcessorCount, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&f->pools, cudaDevAttrMemoryPoolsSupported, d) != cudaSuccess) {
        (void)cudaGetLastError();
        return FA_ERR_DEVICE;
    }
    if (d >= 0 && d < FA__CU_MAX_DEVICES) {
        fa__store_int(&tab[d].major, f->major); fa__store_int(&tab[d].minor, f->minor);
        fa__store_int(&tab[d].optin, f->optin); fa__store_int(&tab[d].sms, f->sms);
        fa__store_int(&tab[d].pools, f->pools);
        fa__store_int(&ready[d], 1);
    }
    return FA_OK;
}

/* Stream-ordered device allocation (cudaMallocAsync) where the device has memory pools, plain
   cudaMalloc otherwise; fa__cu_free releases it the same way, ordered after the stream's work. */
static fa_status fa__cu_alloc(void **ptr, size_t bytes, cudaStream_t st, int *pooled)
{
    fa__cu_facts f;
    int dev = 0;
    fa_status s;
    *ptr = NULL;
    if (bytes == SIZE_MAX) return FA_ERR_NO_MEMORY;
    if ((s = fa__cu_facts_of(&dev, &f)) != FA_OK) return s;
    *pooled = f.pools != 0;
    return fa__cu(f.pools ? cudaMallocAsync(ptr, bytes ? bytes : 1, st) : cudaMalloc(ptr, bytes ? bytes : 1));
}

static fa_status fa__cu_free(void *ptr, cudaStream_t st, int pooled)
{
    if (!ptr) return FA_OK;
    return fa__cu(pooled ? cudaFreeAsync(ptr, st) : cudaFree(ptr));
}

/* Loads and stores of the three storage types, arithmetic in fp32. */
static __device__ __forceinline__ float fa__ld(const float *p) { return *p; }
static __device__ __forceinline__ float fa__ld(const __half *p) { return __half2float(*p); }
static __device__ __forceinline__ float fa__ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ void fa__st(float *p, float x) { *p = x; }
static __device__ __forceinline__ void fa__st(__half *p, float x) { *p = __float2half_rn(x); }
static __device__ __forceinline__ void fa__st(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }


/* 1 when x is an inf or a NaN (the forward's V checks, 8c-8d3; the backward's marks, 8e2) */
static __device__ __forceinline__ bool fa__cu_bad(float x) { return (__float_as_uint(x) & 0x7F800000u) == 0x7F800000u; }

/* The forward kernels' block order (8c, 8d, 8d3): section 1's fa__qtile_of over the 1-D grid
   (blockIdx.x the item, or `item` where a persistent block walks several: 8d3), in groups of as
   many (batch, head)s as take FA__CU_L2_SET bytes of K and V (Sk (D + Dv) es bytes each, es bytes
   an element) (order FA__ORD_GROUPS), in one group: every head's longest tiles first (FA__ORD_RUN), in
   groups of one head: the heads one after another (FA__ORD_HEADS), or in section 1's pairs
   (FA__ORD_PAIRS, fa__qtile_zig). */
enum { FA__ORD_RUN, FA__ORD_GROUPS, FA__ORD_HEADS, FA__ORD_PAIRS };
static __device__ __forceinline__ void fa__cu_qtile(const fa__dims &d, int qtiles, int es, int *bh, int *qt,
                                                    int64_t item = -1, int order = FA__ORD_GROUPS)
{
    const int nbh = d.B * d.Hq, it = item < 0 ? (int)blockIdx.x : (int)item;   /* items < 2^31 (fa__cu_qblocks) */
    if (order == FA__ORD_PAIRS)
        fa__qtile_zig(qtiles, it, bh, qt);
    else
        fa__qtile_of(nbh, qtiles,
                     order == FA__ORD_GROUPS ? (int)fa__qtile_group(nbh, (int64_t)d.Sk * (d.D + d.Dv) * es, FA__CU_L2_SET)
                     : order == FA__ORD_HEADS ? 1 : nbh,
                     it, bh, qt);
}

/* x where it is finite, else 0: the backward's tiles of q, d_o and k (section 8e2) */
static __device__ __forceinline__ float fa__cu_fin(float x) { return fa__cu_bad(x) ? 0.0f : x; }

/* cp.async (sm_80+), for both tiled kernels: a shared-memory address, one 16-byte copy that
   zero-fills when bytes is 0 (src must still be a valid address), a group commit and a wait for
   all but N groups. The "memory" clobbers keep the compiler from moving shared-memory accesses
   across them. */
static __device__ __forceinline__ unsigned fa__cu_sa(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void fa__cu_cp16(unsigned dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

/* fa__cu_cp16 with an L2 cache policy pol (fa__cu_evict_first's): the same bytes copied, a hint to
   the L2 on which lines to drop first. */
static __device__ __forceinline__ void fa__cu_cp16_ef(unsigned dst, const void *src, int bytes, uint64_t pol)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(bytes), "l"(pol)
                 : "memory");
}

/* The L2 policy of data read once: its lines are the first the L2 evicts. */
static __device__ __forceinline__ uint64_t fa__cu_evict_first(void)
{
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}

static __device__ __forceinline__ void fa__cu_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> static __device__ __forceinline__ void fa__cu_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Programmatic dependent launch (sm_90+; nothing on older targets, and nothing for a grid launched
   without the attribute, fa__cu_dep_cfg): fa__cu_dep_go lets the next grid of the stream that was
   launched with the attribute start now (its blocks then wait in fa__cu_dep_wait), and
   fa__cu_dep_wait returns once the grid before this one in the stream has completed and its writes
   are visible. A kernel that calls fa__cu_dep_wait before its first global access is as ordered
   as a plain launch. */
static __device__ __forceinline__ void fa__cu_dep_go(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ void fa__cu_dep_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* Section 1's tile key range (fa__tile_keys) with its bounds narrowed to int (they lie in [0, Sk]),
   so that the kernels keep them in 32-bit registers. */
static __device__ __forceinline__ fa__keys fa__cu_tile_keys(const fa__dims &d, int i0, int nq)
{
    fa__keys r = fa__tile_keys(&d, i0, (int64_t)i0 + nq);
    r.lo = (int)r.lo; r.hi = (int)r.hi; r.flo = (int)r.flo; r.fhi = (int)r.fhi;
    return r;
}

/* The first row of query tile qt (of the forward kernels' tiles of bq rows, 8c, 8d, 8d3): qt bq, or
   with qe (8a's QE, for causal requests) Sq - (qtiles - qt) bq, so that the tiles end at row Sq and
   the partial one (where bq does not divide Sq) is the first, whose rows before row 0 are padding:
   under causal the tile that sees the fewest keys, rather than the last, which sees them all. A
   tile's rows [i0, i0 + bq) hold its real rows [max(i0, 0), min(i0 + bq, Sq)); padding rows are
   loaded as zeros (a TMA box's out-of-bounds rows, negative coordinates too) and masked by the
   rule (fa__cu_row_keys); what they compute stays in their own rows (a row's softmax is its own),
   they are never stored (fa__tc_write's QE), never read a bias (8d3's QE configurations run no
   bias variant) and decide no key range (fa__cu_qtile_keys). */
static __device__ __forceinline__ int fa__cu_qrow0(const fa__dims &d, int qt, int bq, bool qe)
{
    return qe ? d.Sq - ((d.Sq + bq - 1) / bq - qt) * bq : qt * bq;
}

/* fa__cu_tile_keys of the real rows of the query tile at i0 (fa__cu_qrow0's, with the same qe) */
static __device__ __forceinline__ fa__keys fa__cu_qtile_keys(const fa__dims &d, int i0, int bq, bool qe)
{
    if (!qe) return fa__cu_tile_keys(d, i0, min(bq, d.Sq - i0));   /* tiles from row 0: as before QE, to the letter */
    const int a = max(i0, 0);
    return fa__cu_tile_keys(d, a, min(i0 + bq, d.Sq) - a);
}

/* The mask of query row `row`: key j is visible when lo <= j < hi (section 1's rule, in 32-bit
   registers); a row past Sq (a tile's padding, never written) takes the last row's. A row before
   row 0 (fa__cu_qrow0's padding, never written; row >= -bq) takes the rule's own range, free of
   overflow there too, under causal no more keys than row 0 sees (no clamp: the kernels without
   such rows keep their code). */
static __device__ __forceinline__ void fa__cu_row_keys(const fa__dims &d, int row, int *lo, int *hi)
{
    fa__visible_keys(d.Sk - (d.Sq - min(row, d.Sq - 1)), d.Sk, d.causal, d.wl, d.wr, lo, hi);
}

/* The score-modifier rule on the device (SEMANTICS steps 2-4: softcap, ALiBi, bias), written once
   for the generic kernel, the tensor-core kernel and the naive path's softmax. A kernel carries its
   scores in a unit u (1; log2(e) in the tensor-core kernel, whose exp is one EX2), and the value it
   hands in may still lack the scale (the tensor-core kernel's raw dot products: in = scale) or not
   (a pre-scaled Q: in = 1). fa__cu_mods_of sets up one (batch, head)'s constants once: */
struct fa__cu_mods {
    float pre;         /* the value handed in -> s / softcap, tanh's argument (softcap), or -> s * u */
    float post;        /* softcap * u, tanh's factor (1 where the caller folds it into its exp) */
    float slope;       /* (b, h)'s ALiBi slope times u */
    float unit;        /* u, the bias's factor */
    const float *bias; /* the bias: element (i, j) of (b, h) at bias[bh + i * bq + j * bk] */
    int64_t bh, bq, bk;
};

static __device__ __forceinline__ fa__cu_mods fa__cu_mods_of(const fa__dims &d, int b, int h, float in, float u,
                                                             bool sc, bool al, bool fold_post)
{
    fa__cu_mods m;
    m.pre = sc ? in / d.softcap : in * u;
    m.post = fold_post ? 1.0f : d.softcap * u;
    m.slope = al ? d.alibi[(int64_t)b * d.alibi_stride + h] * u : 0.0f;
    m.unit = u;
    m.bias = d.bias;
    m.bh = (int64_t)b * d.bs[0] + (int64_t)h * d.bs[1];
    m.bq = d.bs[2];
    m.bk = d.bs[3];
    return m;
}

/* softcap's tanh: tanhf (the generic kernel and the naive path, exact fp32), or tanh.approx (one
   MUFU op, relative error <= 2^-11; the tensor-core kernel's fp16/bf16 outputs stay inside
   API.md's bounds with it: bench/RESULTS.md, CUDA, "Versions" v3) */
/* The end of an FFMA kernel's online softmax for one row (the generic kernel, the FFMA decode
   kernel), from its reference ml (log2 units, section 1's frame) and its sum l: o's factor 1 / l
   (0 for a row with no visible key, l = 0; a NaN l stays NaN) and lse = ml ln 2 + log l
   (-INFINITY for no visible key; NaN kept). */
static __device__ __forceinline__ float fa__cu_row_inv(float l) { return (l > 0.0f || l != l) ? 1.0f / l : 0.0f; }
static __device__ __forceinline__ float fa__cu_row_lse(float ml, float l)
{
    return l > 0.0f ? fmaf(ml, FA__CU_LN2, logf(l)) : (l != l ? l : -INFINITY);
}

struct fa__cu_tanh {
    static __device__ __forceinline__ float f(float x) { return tanhf(x); }
};
struct fa__cu_tanh_approx {
    static __device__ __forceinline__ float f(float x)
    {
        float y;
        asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
        return y;
    }
};

/* Steps 2-4 on one value x handed in for row i, key j: softcap if sc, ALiBi if al (dist = d - j
   as a float, computed the caller's way), bias if bi (the caller has checked that (i, j) lies in
   the bias: i < Sq, j < Sk). Returns the modified score times u. PRE: x needs m.pre without
   softcap too (the raw dot product). The backward's softcap factor is 1 - t^2 for t the tanh
   taken here: pass t to keep it. NONNEG: the caller knows dist >= 0 (a key left of the row's
   diagonal, e.g. a causal tile every row sees), so |dist| is dist (no abs: one op fewer). */
template <class TANH, bool PRE, bool NONNEG = false>
static __device__ __forceinline__ float fa__cu_modify(const fa__cu_mods &m, float x, bool sc, bool al, bool bi,
                                                      float dist, int64_t i, int64_t j, float *t = 0)
{
    if (sc) {
        const float th = TANH::f(x * m.pre);
        if (t) *t = th;
        x = fa__softcap_of(th, m.post);
    } else if (PRE) {
        x *= m.pre;
    }
    if (al) x = fa__alibi1(x, m.slope, NONNEG ? dist : fabsf(dist));
    if (bi) x = fa__bias1(x, m.bias[m.bh + i * m.bq + j * m.bk] * m.unit);
    return x;
}

/* The log-sum-exp merge of one row on the device (section 1's rule: fa__lse_max, fa__lse_weight,
   fa__lse_of), written once for fa_cuda_merge's kernel and the decode path's (8d2: its blocks'
   warps, then its chunks). V views the row's parts: V::l(p) part p's lse, V::o(p, t) element t
   of its o. fa__cu_merge_scan, called by a whole warp for one row, gives every lane the row's max
   and sum (lanes over the parts, p = lane + 32 k, then butterflies: the same bits on every lane and
   in every run); fa__cu_merge_elem one merged element (parts in order; 0 for a row with no part);
   the merged lse is fa__lse_of(mx, sum). A NaN lse sticks in mx. */
template <class V>
static __device__ __forceinline__ void fa__cu_merge_scan(const V &v, int parts, float *mx, float *sum)
{
    const int lane = threadIdx.x & 31;
    float m = -INFINITY, s = 0.0f;
    for (int p = lane; p < parts; p += 32) m = fa__lse_max(m, v.l(p));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fa__lse_max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (m != -INFINITY)
        for (int p = lane; p < parts; p += 32) s += fa__lse_weight(v.l(p), m, 1.0f);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    *mx = m;
    *sum = s;
}

/* The parts are read 16 at a time before any is added (an index past the last reads the last
   part again, and is not added), so that the loads of a batch are in flight together: the sum
   itself goes in part order, a part with lse -INFINITY adding nothing (its o is never used). */
template <class V>
static __device__ __forceinline__ float fa__cu_merge_elem(const V &v, int parts, int t, float mx, float sum)
{
    float a = 0.0f;
    if (mx == -INFINITY) return 0.0f;
    for (int p0 = 0; p0 < parts; p0 += 16) {
        float x[16], y[16];
#pragma unroll
        for (int u = 0; u < 16; u++) {
            const int p = min(p0 + u, parts - 1);
            x[u] = v.l(p);
            y[u] = v.o(p, t);
        }
#pragma unroll
        for (int u = 0; u < 16; u++) {
            const float w = fa__lse_weight(x[u], mx, 1.0f);
            a = p0 + u < parts && x[u] != -INFINITY ? a + w * y[u] : a;
        }
    }
    return a / sum;
}

/* ---- 8c. CUDA: the generic tiled kernel (FFMA, any storage type, head_dim <= 256) --------------
   One block of 256 threads (16 x 16) owns BQ = 16*RM query rows of one (batch, head); thread
   (ty, tx) owns rows ty + 16r (r < RM), keys tx + 16c (c < CN) of each BK = 16*CN key tile, and
   output columns 64n + 4tx .. +3 (n < DC/64). Q (pre-scaled), K and V tiles sit in shared memory
   as fp32 rows of DC+4 floats (zero-padded past D, Dv and the sequence ends); S = Q K^T and the
   output accumulator stay in registers (register-blocked like an SGEMM, FFMA only); P goes
   through shared memory for P V. Online softmax in fp32, with the guards the contract needs (a
   tile or a row with no visible key). Tiles outside the mask are never visited; tiles wholly
   inside it skip the per-element mask. A partial tile (some row hides some key, or a bias) also
   checks its V tile for an inf or a NaN (a block vote): such a tile reads them as 0 and makes NaN
   the rows that give their keys weight (fa__cu_fix_v), so that a NaN reaches only the rows that see
   its key. The configuration C is one of 8a's fa__cu_* traits. */

/* The shared-memory layout of configuration C: a buffer is a K region (K, or P over K) and a V
   tile (BSTR floats); PIPE 1 and 2 hold two buffers, PIPE 1 also a P region of its own. */
template <class C> struct fa__cu_geom {
    enum { DC = C::DC, RM = C::RM, CN = C::CN, PIPE = C::PIPE, MINB = C::MINB };
    enum { BQ = 16 * RM, BK = 16 * CN, LD = DC + 4, LDP = BK + 4, NC = DC / 64 };
    enum { KREG = PIPE == 1 ? BK * LD : ((BK * LD > BQ * LDP) ? BK * LD : BQ * LDP), BSTR = KREG + BK * LD };
    enum { SMEM = (BQ * LD + (PIPE != 0 ? 2 * BSTR : BSTR) + (PIPE == 1 ? BQ * LDP : 0)) * 4 };
};

/* Issues the cp.async copies of an fp32 tile (rows [0, nvalid) of src, columns [0, D), zeros
   elsewhere up to DC); the caller commits them. */
template <int NROW, int DC, int LD>
static __device__ __forceinline__ void fa__cu_async_tile(float *dst, const float *src, int64_t ts, int nvalid,
                                                         int D)
{
    enum { N4 = NROW * DC / 4, U = (N4 + FA__CU_THREADS - 1) / FA__CU_THREADS };
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int e = (int)threadIdx.x + u * FA__CU_THREADS, r = e / (DC / 4), c = (e % (DC / 4)) * 4;
        if (e < N4) {
            const int ok = r < nvalid && c < D;
            fa__cu_cp16(fa__cu_sa(dst + r * LD + c), ok ? src + (int64_t)r * ts + c : src, ok ? 16 : 0);
        }
    }
}

/* A tile of NROW rows of a [.][D] tensor (token stride ts, base at the tile's first row) into fp32
   rows of LD floats in shared memory: columns [0, D) times mul, zeros elsewhere up to DC and in
   rows >= nvalid (FIN: a non-finite value as 0, the backward's rule in 8e2). Loads go out in
   batches into registers before any store, so that many are in flight at once. The 16-byte path (fp32 whose rows are 16-byte aligned, D % 4 == 0) splits into
   load() and store() so that the K and V tiles travel together. */
template <int NROW, int DC> struct fa__cu_vec {
    enum { N4 = NROW * DC / 4, U = (N4 + FA__CU_THREADS - 1) / FA__CU_THREADS };
    float4 x[U];
    __device__ __forceinline__ void load(const float *src, int64_t ts, int nvalid, int D)
    {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = (int)threadIdx.x + u * FA__CU_THREADS, r = e / (DC / 4), c = (e % (DC / 4)) * 4;
            x[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (e < N4 && r < nvalid && c < D) x[u] = *(const float4 *)(src + (int64_t)r * ts + c);
        }
    }
    template <int LD> __device__ __forceinline__ void store(float *dst, float mul)
    {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = (int)threadIdx.x + u * FA__CU_THREADS, r = e / (DC / 4), c = (e % (DC / 4)) * 4;
            if (e < N4)
                *(float4 *)(dst + r * LD + c) = make_float4(x[u].x * mul, x[u].y * mul, x[u].z * mul, x[u].w * mul);
        }
    }
};

template <typename T, int NROW, int DC, int LD, bool FIN = false>
static __device__ __forceinline__ void fa__cu_tile(float *dst, const T *src, int64_t ts, int nvalid, int D,
                                                   float mul)
{
    enum { N = NROW * DC, U = 16 };
    for (int base = 0; base < N; base += U * FA__CU_THREADS) {
        float x[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = base + (int)threadIdx.x + u * FA__CU_THREADS, r = e / DC, c = e % DC;
            x[u] = 0.0f;
            if (e < N && r < nvalid && c < D) x[u] = fa__ld(src + (int64_t)r * ts + c);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = base + (int)threadIdx.x + u * FA__CU_THREADS, r = e / DC, c = e % DC;
            if (e < N) dst[r * LD + c] = (FIN ? fa__cu_fin(x[u]) : x[u]) * mul;
        }
    }
}

/* The rare case of a partial tile (some row hides some key, or a bias) whose V tile holds an inf or
   a NaN (a block vote found it): P V would form 0 * NaN = NaN, or 0 * inf, for the rows that do
   not see that key, and a NaN must reach only the rows that see it (API.md). fa__cu_fix_v, called
   by the whole block (barriers inside), reads the tile's infs and NaNs as 0 (NROW x DC floats,
   rows LD apart, NT threads), marking their keys in the rows' padding column DC (an int, which
   P V never reads), and returns bit r set when this thread's row r (P row row0 + r * rstep, ldp
   floats apart, rows < 32) gives a marked key nonzero weight: the caller makes that row's sum l
   NaN, so that its o and lse end NaN (API.md lets a NaN reach the whole row), and runs its P V
   unchanged. Out of line, its loops rolled, so that the kernels' register allocation does not pay
   for it. */
template <int NROW, int DC, int LD, int NT>
static __device__ __noinline__ unsigned fa__cu_fix_v(float *v, const float *p, int ldp, int row0, int rstep, int rows,
                                                     int tid)
{
    unsigned hit = 0;
    if (tid < NROW) ((int *)v)[tid * LD + DC] = 0;
    __syncthreads();
#pragma unroll 1
    for (int e = tid; e < NROW * DC; e += NT) {
        float *x = v + (e / DC) * LD + e % DC;
        if (fa__cu_bad(*x)) {
            *x = 0.0f;
            atomicOr((int *)(v + (e / DC) * LD + DC), 1);
        }
    }
    __syncthreads();
#pragma unroll 1
    for (int r = 0; r < rows; r++)
#pragma unroll 1
        for (int j = 0; j < NROW; j++)
            if (p[(row0 + r * rstep) * ldp + j] != 0.0f && ((const int *)v)[j * LD + DC] != 0) hit |= 1u << r;
    return hit;
}

template <typename T, class CFG>
__global__ void __launch_bounds__(FA__CU_THREADS, CFG::MINB)
fa__cu_generic(fa__dims d, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
               T *__restrict__ o, int qtiles, int vec)
{
    typedef fa__cu_geom<CFG> C;
    enum { DC = C::DC, RM = C::RM, CN = C::CN, PIPE = C::PIPE };
    extern __shared__ float4 fa__cu_smem[];
    float *sQ = (float *)fa__cu_smem, *sK = sQ + C::BQ * C::LD, *sV = sK + C::KREG;
    float *sP = PIPE == 1 ? sK + 2 * C::BSTR : sK;
    int buf = 0;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    int bh, qt;
    fa__cu_qtile(d, qtiles, (int)sizeof(T), &bh, &qt);   /* the longest (causal) rows first */
    const int b = bh / d.Hq, h = bh % d.Hq, g = h / d.group;
    const int i0 = fa__cu_qrow0(d, qt, C::BQ, false), nq = min(C::BQ, d.Sq - i0);   /* tiles from row 0 */
    const int Dp = (d.D + 3) & ~3;
    const T *kb = k + (int64_t)b * d.ks[0] + (int64_t)g * d.ks[1];
    const T *vb = v + (int64_t)b * d.vs[0] + (int64_t)g * d.vs[1];
    const bool sc = d.softcap > 0.0f, al = d.alibi != NULL, bi = d.bias != NULL, mods = sc || al || bi;
    const fa__cu_mods md = fa__cu_mods_of(d, b, h, 1.0f, 1.0f, sc, al, false);
    float acc[RM][4 * C::NC], m[RM], ml[RM], l[RM];

    {
        const T *qb = q + (int64_t)b * d.qs[0] + (int64_t)h * d.qs[1] + (int64_t)i0 * d.qs[2];
        if (sizeof(T) == 4 && (vec & 1)) {
            fa__cu_vec<C::BQ, DC> st;
            st.load((const float *)qb, d.qs[2], nq, d.D);
            st.template store<C::LD>(sQ, d.scale);
        } else {
            fa__cu_tile<T, C::BQ, DC, C::LD>(sQ, qb, d.qs[2], nq, d.D, d.scale);
        }
    }
#pragma unroll
    for (int r = 0; r < RM; r++) {
        m[r] = -INFINITY; ml[r] = -INFINITY; l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < 4 * C::NC; c++) acc[r][c] = 0.0f;
    }
    /* the keys some row sees, [klo, khi), walked in tiles of BK from klo */
    const fa__keys kr = fa__cu_tile_keys(d, i0, nq);
    const int klo = (int)kr.lo, khi = (int)kr.hi;
    if (PIPE && klo < khi) {                               /* the first K/V tile on its way */
        fa__cu_async_tile<C::BK, DC, C::LD>(sK, (const float *)(kb + (int64_t)klo * d.ks[2]), d.ks[2],
                                            min(C::BK, d.Sk - klo), d.D);
        fa__cu_async_tile<C::BK, DC, C::LD>(sV, (const float *)(vb + (int64_t)klo * d.vs[2]), d.vs[2],
                                            min(C::BK, d.Sk - klo), d.Dv);
        fa__cu_commit();
    }

    for (int k0 = klo; k0 < khi; k0 += C::BK, buf ^= (PIPE ? 1 : 0)) {
        const int nk = min(C::BK, d.Sk - k0);
        const int full = fa__keys_full(&kr, k0, k0 + C::BK);
        float s[RM][CN];
        __syncthreads();                                   /* the last tile's P, K and V are consumed */
        if (PIPE) {                                        /* the next tile into the other buffers */
            if (k0 + C::BK < khi) {
                const int n2 = min(C::BK, d.Sk - k0 - C::BK), o2 = (buf ^ 1) * C::BSTR;
                fa__cu_async_tile<C::BK, DC, C::LD>(sK + o2, (const float *)(kb + (int64_t)(k0 + C::BK) * d.ks[2]),
                                                    d.ks[2], n2, d.D);
                fa__cu_async_tile<C::BK, DC, C::LD>(sV + o2, (const float *)(vb + (int64_t)(k0 + C::BK) * d.vs[2]),
                                                    d.vs[2], n2, d.Dv);
                fa__cu_commit();
                fa__cu_wait<1>();
            } else {
                fa__cu_wait<0>();
            }
        } else if (sizeof(T) == 4 && (vec & 6) == 6) {     /* K and V in flight together */
            fa__cu_vec<C::BK, DC> sk, sv;
            sk.load((const float *)(kb + (int64_t)k0 * d.ks[2]), d.ks[2], nk, d.D);
            sv.load((const float *)(vb + (int64_t)k0 * d.vs[2]), d.vs[2], nk, d.Dv);
            sk.template store<C::LD>(sK, 1.0f);
            sv.template store<C::LD>(sV, 1.0f);
        } else {
            fa__cu_tile<T, C::BK, DC, C::LD>(sK, kb + (int64_t)k0 * d.ks[2], d.ks[2], nk, d.D, 1.0f);
            fa__cu_tile<T, C::BK, DC, C::LD>(sV, vb + (int64_t)k0 * d.vs[2], d.vs[2], nk, d.Dv, 1.0f);
        }
        __syncthreads();
        const float *sKb = sK + buf * C::BSTR, *sVb = sV + buf * C::BSTR;
        if (PIPE == 2) sP = sK + buf * C::BSTR;
        /* S = Q K^T */
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int c = 0; c < CN; c++) s[r][c] = 0.0f;
#pragma unroll 2
        for (int t = 0; t < Dp; t += 4) {
            float4 kk[CN];
#pragma unroll
            for (int c = 0; c < CN; c++) kk[c] = *(const float4 *)(sKb + (tx + 16 * c) * C::LD + t);
#pragma unroll
            for (int r = 0; r < RM; r++) {
                const float4 qq = *(const float4 *)(sQ + (ty + 16 * r) * C::LD + t);
#pragma unroll
                for (int c = 0; c < CN; c++) {
                    s[r][c] = fmaf(qq.x, kk[c].x, s[r][c]);
                    s[r][c] = fmaf(qq.y, kk[c].y, s[r][c]);
                    s[r][c] = fmaf(qq.z, kk[c].z, s[r][c]);
                    s[r][c] = fmaf(qq.w, kk[c].w, s[r][c]);
                }
            }
        }
        /* modifiers, mask, online softmax; P = exp(s - m) */
#pragma unroll
        for (int r = 0; r < RM; r++) {
            const int64_t i = (int64_t)i0 + ty + 16 * r;
            float mx = -INFINITY, sum = 0.0f, mnew, ref, alpha;
            int lo = 0, hi = 0;                          /* the row's visible keys, where the tile needs them */
            if (!full) fa__cu_row_keys(d, (int)i, &lo, &hi);
#pragma unroll
            for (int c = 0; c < CN; c++) {
                const int j = k0 + tx + 16 * c;
                float x = s[r][c];
                if (mods && i < d.Sq && j < d.Sk)
                    x = fa__cu_modify<fa__cu_tanh, false>(md, x, sc, al, bi, (float)(i + d.Sk - d.Sq - j), i, j);
                if (!full && (j < lo || j >= hi)) x = -INFINITY;
                s[r][c] = x;
                mx = fa__lse_max(mx, x);
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1) mx = fa__lse_max(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            mnew = fa__lse_max(m[r], mx);
            ref = fa__online_ref(mnew) * FA__CU_LOG2E;               /* the frame of this tile */
            alpha = exp2f(ml[r] - ref);                              /* from the last frame; -inf: 0 */
#pragma unroll
            for (int c = 0; c < CN; c++) {               /* exp(s - m) = 2^(s log2e - m log2e) */
                const float e = exp2f(fmaf(s[r][c], FA__CU_LOG2E, -ref));
                s[r][c] = e;
                sum += e;
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l[r] = l[r] * alpha + sum;
            m[r] = mnew;
            ml[r] = mnew == -INFINITY ? -INFINITY : ref;
#pragma unroll
            for (int c = 0; c < 4 * C::NC; c++) acc[r][c] *= alpha;
        }
        if (PIPE != 1) __syncthreads();                    /* every thread is done with K (P goes there) */
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int c = 0; c < CN; c++) sP[(ty + 16 * r) * C::LDP + tx + 16 * c] = s[r][c];
        const int part = bi || !full;   /* a partial tile whose V holds an inf or a NaN: fa__cu_fix_v's rare case */
        int bad = 0;
        if (part) {   /* this thread's share of the V tile, voted on at the barrier before P V */
            enum { N4 = C::BK * DC / 4, U4 = (N4 + FA__CU_THREADS - 1) / FA__CU_THREADS };
#pragma unroll 1
            for (int u = 0; u < U4; u++) {
                const int e = (int)threadIdx.x + u * FA__CU_THREADS, r = e / (DC / 4), c = (e % (DC / 4)) * 4;
                if (e < N4) {
                    const float4 x = *(const float4 *)(sVb + r * C::LD + c);
                    bad |= fa__cu_bad(x.x) | fa__cu_bad(x.y) | fa__cu_bad(x.z) | fa__cu_bad(x.w);
                }
            }
            bad = __syncthreads_or(bad);
        } else {
            __syncthreads();
        }
        if (bad) {   /* the rare case: the rows that give weight to a key with an inf or a NaN end NaN */
            const unsigned hit = fa__cu_fix_v<C::BK, DC, C::LD, FA__CU_THREADS>(sV + buf * C::BSTR, sP, C::LDP, ty, 16, RM,
                                                                                (int)threadIdx.x);
#pragma unroll
            for (int r = 0; r < RM; r++)
                if (hit >> r & 1u) l[r] = NAN;   /* (o and lse) */
        }
        /* acc += P V */
#pragma unroll 2
        for (int j = 0; j < C::BK; j += 4) {
            float4 pp[RM];
#pragma unroll
            for (int r = 0; r < RM; r++) pp[r] = *(const float4 *)(sP + (ty + 16 * r) * C::LDP + j);
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
#pragma unroll
                for (int n = 0; n < C::NC; n++) {
                    const float4 vv = *(const float4 *)(sVb + (j + jj) * C::LD + 64 * n + 4 * tx);
#pragma unroll
                    for (int r = 0; r < RM; r++) {
                        const float pj = jj == 0 ? pp[r].x : jj == 1 ? pp[r].y : jj == 2 ? pp[r].z : pp[r].w;
                        acc[r][4 * n + 0] = fmaf(pj, vv.x, acc[r][4 * n + 0]);
                        acc[r][4 * n + 1] = fmaf(pj, vv.y, acc[r][4 * n + 1]);
                        acc[r][4 * n + 2] = fmaf(pj, vv.z, acc[r][4 * n + 2]);
                        acc[r][4 * n + 3] = fmaf(pj, vv.w, acc[r][4 * n + 3]);
                    }
                }
            }
        }
    }
    /* o = acc / l written once; a row with no visible key gets 0 and lse -inf */
#pragma unroll
    for (int r = 0; r < RM; r++) {
        const int i = i0 + ty + 16 * r;
        if (i >= d.Sq) continue;
        const float inv = fa__cu_row_inv(l[r]);
        T *orow = o + (int64_t)b * d.os[0] + (int64_t)h * d.os[1] + (int64_t)i * d.os[2];
#pragma unroll
        for (int n = 0; n < C::NC; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = 64 * n + 4 * tx + e;
                if (col < d.Dv) fa__st(orow + col, acc[r][4 * n + e] * inv);
            }
        if (d.lse && tx == 0)
            d.lse[(int64_t)bh * d.Sq + i] = fa__cu_row_lse(ml[r], l[r]);
    }
}

/* ---- 8d. CUDA: the tensor-core kernel for fp16/bf16 (mma.sync m16n8k16, ldmatrix, cp.async) ---
   FlashAttention-2 style forward. A block owns BQ = 16*MT*NW query rows of one (batch, head); each
   warp owns 16*MT of them and never talks to the others (split-Q). K/V tiles of BK keys stream
   through a two-stage cp.async ring in swizzled shared memory (16-byte chunk c of row r lives at
   chunk c ^ (r & 7), so every ldmatrix phase hits 8 distinct bank groups). S = Q K^T and O += P V
   run on mma.sync m16n8k16 with fp32 accumulators; the S accumulator of two n8 tiles, rounded to
   16-bit pairs, is the A fragment of one k16 step of P V, so P never leaves registers. A row lives
   in a 4-thread quad: its max is two butterfly shuffles, its sum is kept per thread and reduced once
   at the end. The online softmax runs in the log2 domain with the scale folded into one FFMA before
   EX2. Only tiles that cross the mask edge (causal diagonal, window edges, the ragged end of the
   keys) pay for per-element masking, and (with the tiles of a bias) for a check of V for an inf or
   a NaN, whose rare hit takes fa__tc_clean_v (a NaN reaches only the rows that see its key); tiles
   wholly outside the mask are never loaded.
   Served (fa__cu_pick): fp16/bf16, head_dim == head_dim_v in {64, 128}, 16-byte aligned rows
   (cp.async), sm_80+; every mask and modifier of the API (softcap alone and ALiBi alone have
   compile-time variants; bias, a non-positive scale and combinations one run-time variant).
   The configuration C is one of 8a's fa__tc_* traits (why those: bench/RESULTS.md, CUDA,
   "Versions" and the tile sweep). The kernel is a sequence of steps, each a device function a
   backward pass or a Hopper kernel can call on the same fragments: fa__tc_load_kv (K/V tile into
   a stage), fa__tc_q_frags, fa__tc_qk (S = Q K^T, raw), fa__tc_scores (modifiers and mask),
   fa__tc_softmax (built on fa__tc_row_max and fa__tc_exp_pack, which forms P from any reference,
   the lse among them), fa__tc_pv (O += P V), fa__tc_write (normalise, lse, store). */

/* What the kernel receives: the request's dims (section 1, as every kernel) and the tensors. */
struct fa__tc_args {
    const void *q, *k, *v;
    void *o;
    fa__dims d;
};

/* The sizes of configuration C (8a): fragments per thread and the shared memory (the Q tile and
   two K/V stages, 16-bit elements). */
template <class C> struct fa__tc_geom {
    enum { D = C::D, NW = C::NW, MT = C::MT, BK = C::BK, QREG = C::QREG, PF = C::PF, MINB = C::MINB };
    enum { BQ = 16 * MT * NW, NT = NW * 32, CH = D / 8, NN = BK / 8, KD = D / 16, KB = BK / 16 };
    enum { SMEM = (BQ * D + 4 * BK * D) * 2 };
};

static __device__ __forceinline__ void fa__tc_ldsm(unsigned a, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

static __device__ __forceinline__ void fa__tc_ldsm_t(unsigned a, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

static __device__ __forceinline__ float fa__tc_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The 16-bit storage types: the MMA and the packing of two floats. */
template <typename T> struct fa__tc_type;
/* One specialisation per type; they differ only in the PTX type name (in cvt and mma). */
#define FA__TC_TYPE(T, PTX)                                                                      \
    template <> struct fa__tc_type<T> {                                                          \
        static __device__ __forceinline__ unsigned pack(float lo, float hi)                      \
        {                                                                                        \
            unsigned u;                                                                          \
            asm("cvt.rn." PTX "x2.f32 %0, %1, %2;\n" : "=r"(u) : "f"(hi), "f"(lo));              \
            return u;                                                                            \
        }                                                                                        \
        static __device__ __forceinline__ void mma(float c[4], const unsigned a[4], unsigned b0, \
                                                   unsigned b1)                                  \
        {                                                                                        \
            asm("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX ".f32 {%0,%1,%2,%3}, "      \
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                       \
                : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                 \
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                 \
        }                                                                                        \
    };
FA__TC_TYPE(__nv_bfloat16, "bf16")
FA__TC_TYPE(__half, "f16")
#undef FA__TC_TYPE

/* R rows of D 16-bit elements from global (row stride st) into a swizzled tile; rows >= n are
   zero-filled (so a ragged tail of V can never inject a NaN into P V). EF 1: the copies with L2
   policy pol (fa__cu_cp16_ef). */
template <int D, int R, int NT, typename T, int EF = 0>
static __device__ __forceinline__ void fa__tc_load(unsigned dst, const T *src, int64_t st, int n, int tid, uint64_t pol = 0)
{
    enum { CH = D / 8, IT = R * CH / NT };
    static_assert(R * CH % NT == 0, "tile load must split evenly over the threads");
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int idx = tid + it * NT, r = idx / CH, c = idx % CH;
        const bool ok = r < n;
        const unsigned to = dst + (unsigned)(r * D + ((c ^ (r & 7)) << 3)) * 2u;
        const void *from = ok ? (const void *)(src + r * st + c * 8) : (const void *)src;
        if (EF) fa__cu_cp16_ef(to, from, ok ? 16 : 0, pol);
        else fa__cu_cp16(to, from, ok ? 16 : 0);
    }
    (void)pol;
}

/* Step: the K and V tiles of keys [k0, k0 + BK) into the stage at byte offset st of the two rings
   (the rows past Sk zero-filled), committed as one cp.async group. */
template <class C, typename T>
static __device__ __forceinline__ void fa__tc_load_kv(unsigned sK, unsigned sV, unsigned st, const T *gk, const T *gv,
                                                      const fa__dims &d, int k0, int tid)
{
    typedef fa__tc_geom<C> G;
    const int n = min((int)G::BK, d.Sk - k0);
    fa__tc_load<G::D, G::BK, G::NT>(sK + st, gk + (int64_t)k0 * d.ks[2], d.ks[2], n, tid);
    fa__tc_load<G::D, G::BK, G::NT>(sV + st, gv + (int64_t)k0 * d.vs[2], d.vs[2], n, tid);
    fa__cu_commit();
}

/* Per-lane ldmatrix bases of a warp: A (Q) rows, B (K) rows, B^T (V) rows. A lane's row r always
   has r & 7 == lane & 7 and its chunk is c0 + bit, c0 even and compile-time, so the physical chunk
   is 8*(c0>>3) + ((c0&7) ^ (bit ^ (lane&7))): four per-lane bases per operand (c0&7 = 0,2,4,6)
   plus an immediate, instead of a register per (row, chunk). */
template <class C>
static __device__ __forceinline__ void fa__tc_bases(unsigned sQ, unsigned sK, unsigned sV, int warp, int lane,
                                                    unsigned (&aq)[4], unsigned (&ak)[4], unsigned (&av)[4])
{
    typedef fa__tc_geom<C> G;
    const int la_r = (lane & 7) + ((lane >> 3) & 1) * 8, la_c = lane >> 4;     /* Q: m0..3 = (r0,k0)(r8,k0)(r0,k8)(r8,k8) */
    const int lk_r = (lane & 7) + (lane >> 4) * 8, lk_c = (lane >> 3) & 1;     /* K: (n0,k0)(n0,k8)(n8,k0)(n8,k8) */
    const int lv_r = (lane & 7) + ((lane >> 3) & 1) * 8, lv_c = lane >> 4;     /* V: (k0,n0)(k8,n0)(k0,n8)(k8,n8) */
#pragma unroll
    for (int j = 0; j < 4; j++) {
        aq[j] = sQ + (unsigned)((warp * 16 * G::MT + la_r) * G::D + (((2 * j) ^ (la_c ^ (lane & 7))) << 3)) * 2u;
        ak[j] = sK + (unsigned)(lk_r * G::D + (((2 * j) ^ (lk_c ^ (lane & 7))) << 3)) * 2u;
        av[j] = sV + (unsigned)(lv_r * G::D + (((2 * j) ^ (lv_c ^ (lane & 7))) << 3)) * 2u;
    }
}

/* The A fragment of m16 tile mt, k-step kk of the row tile at aq (Q, or dO in a backward). */
template <class C>
static __device__ __forceinline__ void fa__tc_a_frag(const unsigned (&aq)[4], int mt, int kk, unsigned (&r)[4])
{
    fa__tc_ldsm(aq[kk & 3] + (unsigned)(mt * 16 * C::D + 64 * (kk >> 2)) * 2u, r[0], r[1], r[2], r[3]);
}

/* Step: this warp's Q fragments into registers (QREG), once, after the Q tile has landed. */
template <class C>
static __device__ __forceinline__ void fa__tc_q_frags(unsigned (&qf)[C::MT][C::D / 16][4], const unsigned (&aq)[4])
{
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int kk = 0; kk < C::D / 16; kk++) fa__tc_a_frag<C>(aq, mt, kk, qf[mt][kk]);
}

/* Q's A fragment of m16 tile mt, k-step kk: from the registers qf (QREG) or re-read through aq. */
template <class C>
static __device__ __forceinline__ void fa__tc_q_of(const unsigned (&qf)[C::MT][C::D / 16][4], const unsigned (&aq)[4],
                                                   int mt, int kk, unsigned (&r)[4])
{
    if (fa__tc_geom<C>::QREG) {
        r[0] = qf[mt][kk][0];
        r[1] = qf[mt][kk][1];
        r[2] = qf[mt][kk][2];
        r[3] = qf[mt][kk][3];
    } else {
        fa__tc_a_frag<C>(aq, mt, kk, r);
    }
}

/* Step: S = Q K^T for the K tile at stage offset st. s[mt][n] is the m16 x n8 accumulator of m16
   tile mt and keys 8n .. 8n+7 of the tile: raw dot products (no scale), what a backward keeps as
   the score before softcap. Q from qf (QREG) or re-read through aq. */
template <typename T, class C>
static __device__ __forceinline__ void fa__tc_qk(float (&s)[C::MT][C::BK / 8][4], const unsigned (&qf)[C::MT][C::D / 16][4],
                                                 const unsigned (&aq)[4], const unsigned (&ak)[4], unsigned st)
{
    typedef fa__tc_geom<C> G;
    typedef fa__tc_type<T> X;
#pragma unroll
    for (int mt = 0; mt < G::MT; mt++)
#pragma unroll
        for (int n = 0; n < G::NN; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < G::KD; kk++) {
        unsigned qa[G::MT][4];
#pragma unroll
        for (int mt = 0; mt < G::MT; mt++) fa__tc_q_of<C>(qf, aq, mt, kk, qa[mt]);
        if (G::PF) {
            unsigned kb[G::NN][2];
#pragma unroll
            for (int n = 0; n < G::NN; n += 2)
                fa__tc_ldsm(ak[kk & 3] + st + (unsigned)(n * 8 * G::D + 64 * (kk >> 2)) * 2u, kb[n][0], kb[n][1], kb[n + 1][0],
                            kb[n + 1][1]);
#pragma unroll
            for (int n = 0; n < G::NN; n++)
#pragma unroll
                for (int mt = 0; mt < G::MT; mt++) X::mma(s[mt][n], qa[mt], kb[n][0], kb[n][1]);
        } else {
#pragma unroll
            for (int n = 0; n < G::NN; n += 2) {
                unsigned b0, b1, b2, b3;
                fa__tc_ldsm(ak[kk & 3] + st + (unsigned)(n * 8 * G::D + 64 * (kk >> 2)) * 2u, b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < G::MT; mt++) {
                    X::mma(s[mt][n], qa[mt], b0, b1);
                    X::mma(s[mt][n + 1], qa[mt], b2, b3);
                }
            }
        }
    }
}

/* Step: the score modifiers (8b's rule, in fa__tc_mod_of's unit) and the mask on one tile's scores.
   This thread's rows are r0 + 16 mt + 8 hf (r0 = i0 + its first row), its columns k0 + cq + 8n + e
   (e < 2). MOD: fa__tc_fwd's (0: none, the scale is folded into the exp; 2: ALiBi on raw dot
   products, no pre-multiply, and no abs on a causal full tile). full: the tile is
   visible to every row (fa__keys_full), so no mask. */
template <class C, int MOD>
static __device__ __forceinline__ void fa__tc_scores(float (&s)[C::MT][C::BK / 8][4], const fa__dims &d,
                                                     const fa__cu_mods &md, bool sc, bool al, bool bi, int r0, int cq,
                                                     int k0, bool full)
{
    typedef fa__tc_geom<C> G;
    /* ALiBi alone on a causal tile that every row sees: each key lies left of each row's diagonal */
    const bool left = MOD == 2 && full && d.causal;
#pragma unroll
    for (int mt = 0; mt < G::MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int row = r0 + 16 * mt + 8 * hf;
            if (MOD) {
                const float dd = (float)((int64_t)row + d.Sk - d.Sq - k0 - cq);   /* d - j = dd - column */
                const bool rowok = row < d.Sq;   /* (rows < 0: 8d3's QE, never with a bias) */
                if (left) {
#pragma unroll
                    for (int n = 0; n < G::NN; n++)
#pragma unroll
                        for (int e = 0; e < 2; e++)
                            s[mt][n][2 * hf + e] = fa__cu_modify<fa__cu_tanh_approx, false, true>(
                                md, s[mt][n][2 * hf + e], false, true, false, dd - (float)(n * 8 + e), row, 0);
                } else {
#pragma unroll
                    for (int n = 0; n < G::NN; n++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int j = k0 + cq + n * 8 + e;
                            s[mt][n][2 * hf + e] = fa__cu_modify<fa__cu_tanh_approx, MOD != 2>(
                                md, s[mt][n][2 * hf + e], sc, al, bi && rowok && j < d.Sk, dd - (float)(n * 8 + e), row, j);
                        }
                }
            }
            if (!full) {   /* the visible keys of this row (fa__cu_row_keys' for padding rows), relative to this lane's first column */
                int lo, hi;
                fa__cu_row_keys(d, row, &lo, &hi);
                lo -= k0 + cq;
                hi -= k0 + cq;
#pragma unroll
                for (int n = 0; n < G::NN; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int c = n * 8 + e;
                        if (c < lo || c >= hi) s[mt][n][2 * hf + e] = -INFINITY;
                    }
            }
        }
}

/* The largest of this thread's scores of row (mt, hf) in the tile (a tree: short dependency
   chains); the quad's max is two shuffles more (fa__tc_quad_max). */
template <class C>
static __device__ __forceinline__ float fa__tc_row_max(const float (&s)[C::MT][C::BK / 8][4], int mt, int hf)
{
    enum { NN = C::BK / 8 };
    float mv[NN];
#pragma unroll
    for (int n = 0; n < NN; n++) mv[n] = fmaxf(s[mt][n][2 * hf], s[mt][n][2 * hf + 1]);
#pragma unroll
    for (int w = 1; w < NN; w *= 2)
#pragma unroll
        for (int n = 0; n + w < NN; n += 2 * w) mv[n] = fmaxf(mv[n], mv[n + w]);
    return mv[0];
}

static __device__ __forceinline__ float fa__tc_quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/* 2^x by the special-function unit (MUFU.EX2) or, when poly, by section 1's fa__ex2_poly on the
   FMA pipe (the same value within 7.5e-5 relative; both give +0 for -INFINITY and keep a NaN). */
static __device__ __forceinline__ float fa__tc_ex2_by(float x, bool poly) { return poly ? fa__ex2_poly(x) : fa__tc_ex2(x); }

/* P = 2^(s f - ref) of row (mt, hf), rounded to 16 bits straight into the A fragments of P V;
   returns this thread's sum of the fp32 values. The forward passes its running reference; a
   backward passes lse * log2(e) and gets P itself. XP of every 16 column pairs n (spread evenly:
   n XP mod 16 < XP) take fa__ex2_poly instead of the MUFU, for a kernel whose exps (and softcap's
   tanh) hold the MUFU longer than its GEMMs hold the tensor pipe (8a's fa__wg_* shares: 0 as
   shipped, measured slower on the H200). IP: P stays in s as fp32 (pa untouched), for a kernel
   that packs it later (fa__tc_pack: 8d3's overlap, whose pa an in-flight P V still reads); the
   same values and the same sum. */
template <typename T, class C, int XP = 0, bool IP = false>
static __device__ __forceinline__ float fa__tc_exp_pack(float (&s)[C::MT][C::BK / 8][4], int mt, int hf, float f,
                                                        float ref, unsigned (&pa)[C::MT][C::BK / 16][4])
{
    enum { NN = C::BK / 8 };
    static_assert(XP >= 0 && XP <= 16, "the exps' polynomial share is XP of 16");
    float mv[NN];
#pragma unroll
    for (int n = 0; n < NN; n++) {
        const bool poly = n * XP % 16 < XP;
        const float p0 = fa__tc_ex2_by(fmaf(s[mt][n][2 * hf], f, -ref), poly);
        const float p1 = fa__tc_ex2_by(fmaf(s[mt][n][2 * hf + 1], f, -ref), poly);
        mv[n] = p0 + p1;
        if (IP) {
            s[mt][n][2 * hf] = p0;
            s[mt][n][2 * hf + 1] = p1;
        } else
            pa[mt][n >> 1][(n & 1) * 2 + hf] = fa__tc_type<T>::pack(p0, p1);
    }
#pragma unroll
    for (int w = 1; w < NN; w *= 2)
#pragma unroll
        for (int n = 0; n + w < NN; n += 2 * w) mv[n] += mv[n + w];
    return mv[0];
}

/* fa__tc_exp_pack's rounding of P, for the P that it left in s (IP) */
template <typename T, class C>
static __device__ __forceinline__ void fa__tc_pack(const float (&s)[C::MT][C::BK / 8][4], unsigned (&pa)[C::MT][C::BK / 16][4])
{
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int n = 0; n < C::BK / 8; n++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                pa[mt][n >> 1][(n & 1) * 2 + hf] = fa__tc_type<T>::pack(s[mt][n][2 * hf], s[mt][n][2 * hf + 1]);
}

/* Step: the online softmax of one tile for this thread's rows. m: the row's reference max (in the
   scores' unit; f > 0 turns them into log2 units, f ln 2 into natural-log ones), l: this thread's
   share of the running sum of 2^(s f - m f), o: the accumulator, rescaled by alpha = 2^(m_old f -
   ref) unless no row reference of the warp moved. With FA__CU_LAZY (the default) the reference
   moves by section 1's lazy rule (fa__lazy_moves: only when the running max passes it by more than
   FA__LAZY, so after a row's first tile the rescale is rare); with 0 it is the running max itself.
   Either way m is the reference of l, so fa__tc_row_end's lse = m f ln 2 + log l is exact. A row
   whose reference did not move takes alpha = 1 exactly (2^(m f - ref) is 2 to the rounding error
   of m f there, not always 1), so that skipping the rescale changes no bit and a row's result does
   not depend on the other rows of its warp (the decode kernels' 16- and 32-row blocks, 8d2, give
   the same bits); nor does a row's first visible tile vote for it (its alpha is 0, and its o is
   still +0: P was 0 for it in every tile before). XP: fa__tc_exp_pack's FMA-pipe share of the
   exps. The step in two halves, for a kernel whose O is still being written when the tile's
   softmax runs (8d3's overlap, 8a's OV): fa__tc_softmax_p (the references, l, alpha and P; IP as
   fa__tc_exp_pack's) returns 1 when O needs the rescale, which fa__tc_rescale then does. */
template <typename T, class C, int XP = 0, bool IP = false>
static __device__ __forceinline__ bool fa__tc_softmax_p(float (&s)[C::MT][C::BK / 8][4], float (&m)[C::MT][2],
                                                        float (&l)[C::MT][2], float (&alpha)[C::MT][2],
                                                        unsigned (&pa)[C::MT][C::BK / 16][4], float f)
{
    typedef fa__tc_geom<C> G;
    bool moved = false;
    const float u = f * FA__CU_LN2;   /* a score's unit in natural-log units */
#pragma unroll
    for (int mt = 0; mt < G::MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const float mo = m[mt][hf], mx = fa__tc_quad_max(fmaxf(mo, fa__tc_row_max<C>(s, mt, hf)));
            const bool mv = FA__CU_LAZY ? fa__lazy_moves(mo * u, mx * u) != 0 : mx != mo;
            const float mr = mv ? mx : mo;
            const float ref = fa__online_ref(mr) * f;   /* a row hidden so far stays at 0 */
            alpha[mt][hf] = mv ? fa__tc_ex2(fmaf(mo, f, -ref)) : 1.0f;
            moved |= mv && mo != -INFINITY;   /* a row's first visible tile: alpha 0 on an o still +0 */
            m[mt][hf] = mr;
            l[mt][hf] = fmaf(l[mt][hf], alpha[mt][hf], fa__tc_exp_pack<T, C, XP, IP>(s, mt, hf, f, ref, pa));
        }
    return __any_sync(0xffffffffu, moved);   /* no row reference of this warp moved: alpha is 1 everywhere */
}

template <class C>
static __device__ __forceinline__ void fa__tc_rescale(float (&o)[C::MT][C::D / 8][4], const float (&alpha)[C::MT][2])
{
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int n = 0; n < C::D / 8; n++) {
            o[mt][n][0] *= alpha[mt][0];
            o[mt][n][1] *= alpha[mt][0];
            o[mt][n][2] *= alpha[mt][1];
            o[mt][n][3] *= alpha[mt][1];
        }
}

template <typename T, class C, int XP = 0>
static __device__ __forceinline__ void fa__tc_softmax(float (&s)[C::MT][C::BK / 8][4], float (&m)[C::MT][2],
                                                      float (&l)[C::MT][2], float (&o)[C::MT][C::D / 8][4],
                                                      unsigned (&pa)[C::MT][C::BK / 16][4], float f)
{
    float alpha[C::MT][2];
    if (fa__tc_softmax_p<T, C, XP>(s, m, l, alpha, pa, f)) fa__tc_rescale<C>(o, alpha);
}

/* Step: O += P V for the V tile at stage offset st (a backward's dV += P^T dO and dQ += dS K
   have this shape). */
template <typename T, class C>
static __device__ __forceinline__ void fa__tc_pv(float (&o)[C::MT][C::D / 8][4], const unsigned (&pa)[C::MT][C::BK / 16][4],
                                                 const unsigned (&av)[4], unsigned st)
{
    typedef fa__tc_geom<C> G;
    typedef fa__tc_type<T> X;
#pragma unroll
    for (int kk = 0; kk < G::KB; kk++) {
        if (G::PF) {   /* eight n8 tiles of V at a time */
#pragma unroll
            for (int n0 = 0; n0 < G::CH; n0 += 8) {
                unsigned vb[8][2];
#pragma unroll
                for (int n = 0; n < 8; n += 2)
                    fa__tc_ldsm_t(av[n >> 1] + st + (unsigned)(kk * 16 * G::D + 8 * n0) * 2u, vb[n][0], vb[n][1],
                                  vb[n + 1][0], vb[n + 1][1]);
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int mt = 0; mt < G::MT; mt++) X::mma(o[mt][n0 + n], pa[mt][kk], vb[n][0], vb[n][1]);
            }
        } else {
#pragma unroll
            for (int n = 0; n < G::CH; n += 2) {
                unsigned b0, b1, b2, b3;
                fa__tc_ldsm_t(av[(n & 7) >> 1] + st + (unsigned)(kk * 16 * G::D + 64 * (n >> 3)) * 2u, b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < G::MT; mt++) {
                    X::mma(o[mt][n], pa[mt][kk], b0, b1);
                    X::mma(o[mt][n + 1], pa[mt][kk], b2, b3);
                }
            }
        }
    }
}

/* A V tile that holds an inf or a NaN (rare), in a tile where some row hides some key (the mask
   cuts it, or a bias may hide keys): P V on the MMAs would form 0 * NaN = NaN, or 0 * inf, for the
   rows that do not see that key, and a NaN must reach only the rows that see it (API.md). Such a
   tile makes NaN the rows that give such a key weight (fa__tc_hits: API.md lets a NaN reach the
   whole row) and reads the infs and NaNs as 0 (fa__tc_clean_v in 8d and 8d2, fa__tc_pv_clean in
   8d3). Partial tiles alone pay for the check (a scan of the V chunks each thread copied,
   fa__tc_scan, and a vote); tiles every row sees unmasked run as they were. fa__tc_bad: a 16-byte
   chunk of 16-bit elements holds an inf or a NaN (exponent bits all set); fa__tc_clean: a pair of
   them with those read as 0. */
static __device__ __forceinline__ unsigned fa__tc_emask(const __half *) { return 0x7C00u; }
static __device__ __forceinline__ unsigned fa__tc_emask(const __nv_bfloat16 *) { return 0x7F80u; }

static __device__ __forceinline__ uint4 fa__tc_lds16(unsigned addr)
{
    uint4 u;
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "r"(addr) : "memory");
    return u;
}

template <typename T> static __device__ __forceinline__ bool fa__tc_bad(uint4 u)
{
    const unsigned e = fa__tc_emask((const T *)0), w[4] = { u.x, u.y, u.z, u.w };
    bool bad = false;
#pragma unroll
    for (int k = 0; k < 4; k++) bad |= (w[k] & e) == e || ((w[k] >> 16) & e) == e;
    return bad;
}

template <typename T> static __device__ __forceinline__ unsigned fa__tc_clean(unsigned w)
{
    const unsigned e = fa__tc_emask((const T *)0);
    if ((w & e) == e) w &= 0xFFFF0000u;
    if (((w >> 16) & e) == e) w &= 0x0000FFFFu;
    return w;
}

/* 1 when one of the 16-byte chunks that fa__tc_load<D, R, NT> has thread tid copy into the tile at
   src holds an inf or a NaN (after the thread's cp.async wait: its own copies have landed). Over
   all NT threads these are every chunk of the tile's R x D elements, whatever their layout. */
template <int D, int R, int NT, typename T> static __device__ __forceinline__ bool fa__tc_scan(unsigned src, int tid)
{
    enum { CH = D / 8, IT = R * CH / NT };
    bool bad = false;
#pragma unroll 2
    for (int it = 0; it < IT; it++) {
        const int idx = tid + it * NT, r = idx / CH, c = idx % CH;
        bad |= fa__tc_bad<T>(fa__tc_lds16(src + (unsigned)(r * D + ((c ^ (r & 7)) << 3)) * 2u));
    }
    return bad;
}

/* The shared address of the 16-byte chunk c (columns 8c .. 8c+7) of key r of a V tile: 8d's
   swizzled rows of D elements (fa__tc_load), or 8d3's TMA panels (64 columns, BK rows of 128
   bytes, the 128-byte swizzle). */
template <int D> struct fa__tc_vrows {
    unsigned base;
    __device__ __forceinline__ unsigned at(int r, int c) const { return base + (unsigned)(r * D + ((c ^ (r & 7)) << 3)) * 2u; }
};
template <int BK> struct fa__wg_vrows {
    unsigned base;
    __device__ __forceinline__ unsigned at(int r, int c) const
    {
        return base + (unsigned)((c >> 3) * BK * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
    }
};

template <typename T> static __device__ __forceinline__ float fa__tc_half(unsigned u, int hi);
template <> __device__ __forceinline__ float fa__tc_half<__half>(unsigned u, int hi)
{
    return __half2float(__ushort_as_half((unsigned short)(hi ? u >> 16 : u & 0xFFFFu)));
}
template <> __device__ __forceinline__ float fa__tc_half<__nv_bfloat16>(unsigned u, int hi)
{
    return __uint_as_float(hi ? u & 0xFFFF0000u : u << 16);
}

/* Bit 2 mt + hf set when this thread's row (mt, hf) gives nonzero weight (its P fragments pa) to a
   key of the V tile at va whose row holds an inf or a NaN (each thread reads its own keys' rows;
   the quad's four shares ORed: every thread of the quad gets its rows' bits). */
template <typename T, class C, class VA>
static __device__ __forceinline__ unsigned fa__tc_hits(const unsigned (&pa)[C::MT][C::BK / 16][4], const VA &va, int lane)
{
    enum { MT = C::MT, NN = C::BK / 8, CH = C::D / 8 };
    const int cq = 2 * (lane & 3);
    unsigned hit = 0;
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            bool kbad = false;   /* key 8n + cq + e of the tile */
#pragma unroll 1
            for (int c = 0; c < CH; c++) kbad |= fa__tc_bad<T>(fa__tc_lds16(va.at(8 * n + cq + e, c)));
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
                    if (kbad && fa__tc_half<T>(pa[mt][n >> 1][(n & 1) * 2 + hf], e) != 0.0f) hit |= 1u << (2 * mt + hf);
        }
    hit |= __shfl_xor_sync(0xffffffffu, hit, 1);
    return hit | __shfl_xor_sync(0xffffffffu, hit, 2);
}

/* The rows whose bit is set in hit (fa__tc_hits) made NaN. */
template <class C> static __device__ __forceinline__ void fa__tc_nan_rows(float (&o)[C::MT][C::D / 8][4], unsigned hit)
{
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
            if (hit >> (2 * mt + hf) & 1u)
#pragma unroll
                for (int n = 0; n < C::D / 8; n++) o[mt][n][2 * hf] = o[mt][n][2 * hf + 1] = NAN;
}

/* The rare case on the cp.async kernels (8d, 8d2), whose threads own the tile they copied: called
   by all NT threads that share the V tile at src (barriers inside: the block, or the warp when NT
   is 32) after fa__tc_hits has read it, it reads the tile's infs and NaNs as 0 (each thread
   rewrites the chunks it copied, fa__tc_scan's), so that 8d's P V runs unchanged on it. */
template <typename T, int D, int R, int NT> static __device__ __forceinline__ void fa__tc_clean_v(unsigned src, int tid)
{
    enum { CH = D / 8, IT = R * CH / NT };
    if (NT == 32) __syncwarp();
    else __syncthreads();
#pragma unroll 1
    for (int it = 0; it < IT; it++) {
        const int idx = tid + it * NT, r = idx / CH, c = idx % CH;
        const unsigned addr = src + (unsigned)(r * D + ((c ^ (r & 7)) << 3)) * 2u;
        const uint4 u = fa__tc_lds16(addr);
        if (fa__tc_bad<T>(u))
            asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(fa__tc_clean<T>(u.x)),
                         "r"(fa__tc_clean<T>(u.y)), "r"(fa__tc_clean<T>(u.z)), "r"(fa__tc_clean<T>(u.w))
                         : "memory");
    }
    if (NT == 32) __syncwarp();
    else __syncthreads();
}

/* Step, the rare case on 8d3's kernel, whose V stage the TMA wrote and two consumers read (it is
   never written): O += P V' on mma.sync for V' the tile at va with its infs and NaNs read as 0
   (ldmatrix, the fragments cleaned in registers), then fa__tc_hits' rows made NaN. */
template <typename T, class C, class VA>
static __device__ __forceinline__ void fa__tc_pv_clean(float (&o)[C::MT][C::D / 8][4],
                                                       const unsigned (&pa)[C::MT][C::BK / 16][4], const VA &va, int lane)
{
    typedef fa__tc_type<T> X;
    enum { MT = C::MT, KB = C::BK / 16, CH = C::D / 8 };
    const int lr = (lane & 7) + ((lane >> 3) & 1) * 8, lc = lane >> 4;
#pragma unroll
    for (int kk = 0; kk < KB; kk++)
#pragma unroll
        for (int n = 0; n < CH; n += 2) {
            unsigned b0, b1, b2, b3;
            fa__tc_ldsm_t(va.at(16 * kk + lr, n + lc), b0, b1, b2, b3);
            b0 = fa__tc_clean<T>(b0); b1 = fa__tc_clean<T>(b1); b2 = fa__tc_clean<T>(b2); b3 = fa__tc_clean<T>(b3);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                X::mma(o[mt][n], pa[mt][kk], b0, b1);
                X::mma(o[mt][n + 1], pa[mt][kk], b2, b3);
            }
        }
    fa__tc_nan_rows<C>(o, fa__tc_hits<T, C>(pa, va, lane));
}

/* The end of a row of the tensor-core kernels (the forward and the decode kernel): the quad's sum
   of this thread's shares l, then 8b's end of row on it: returns o's factor 1 / l and sets lse,
   from the row's reference m (fa__tc_softmax's: the exps' reference, its unit turned into log2
   units by f).
   A NaN sum stays NaN in both. */
static __device__ __forceinline__ float fa__tc_row_end(float l, float m, float f, float *lse)
{
    float sum = l + __shfl_xor_sync(0xffffffffu, l, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    *lse = fa__cu_row_lse(fa__online_ref(m) * f, sum);
    return fa__cu_row_inv(sum);
}

/* Step: o = O / l (0 for a row with no visible key) and lse, staged through this warp's own
   rows (16 MT of D 16-bit values, from sQ + 32 MT D warp) of a free BQ x D buffer at sQ (the dead
   Q tile; 8d3's persistent blocks: 8a's OS) and written as 16-byte row pieces; or, with STAGED 0
   (8d3's persistent blocks with OS 0), stored from the registers, a thread's two columns (4 bytes)
   at a time. QE: the tile may hold rows before row 0 (8d3's, fa__cu_qrow0), not stored. */
template <typename T, class C, int STAGED = 1, int QE = 0>
static __device__ __forceinline__ void fa__tc_write(const fa__tc_args &a, const float (&o)[C::MT][C::D / 8][4],
                                                    const float (&m)[C::MT][2], const float (&l)[C::MT][2], float f,
                                                    unsigned sQ, int b, int h, int i0, int warp, int lane)
{
    typedef fa__tc_geom<C> G;
    typedef fa__tc_type<T> X;
    const fa__dims &d = a.d;
    const int wr0 = warp * 16 * G::MT + (lane >> 2), cq = 2 * (lane & 3);
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < G::MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float lse;
            const float inv = fa__tc_row_end(l[mt][hf], m[mt][hf], f, &lse);
            const int rr = wr0 + 16 * mt + 8 * hf;
            T *gr = (T *)a.o + b * d.os[0] + h * d.os[1] + (int64_t)(i0 + rr) * d.os[2] + cq;
#pragma unroll
            for (int n = 0; n < G::CH; n++) {
                const unsigned u = X::pack(o[mt][n][2 * hf] * inv, o[mt][n][2 * hf + 1] * inv);
                if (STAGED) {
                    const unsigned addr = sQ + (unsigned)(rr * G::D + ((n ^ (rr & 7)) << 3) + cq) * 2u;
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(u) : "memory");
                } else if (i0 + rr < d.Sq && (!QE || i0 + rr >= 0))   /* a real row (fa__cu_qrow0) */
                    *(unsigned *)(gr + 8 * n) = u;
            }
            if (d.lse && (lane & 3) == 0 && i0 + rr < d.Sq && (!QE || i0 + rr >= 0))
                d.lse[((int64_t)b * d.Hq + h) * d.Sq + i0 + rr] = lse;
        }
    if (STAGED) {
        __syncwarp();
        T *go = (T *)a.o + b * d.os[0] + h * d.os[1];
#pragma unroll
        for (int it = 0; it < 16 * G::MT * G::CH / 32; it++) {
            const int idx = lane + it * 32, rr = warp * 16 * G::MT + idx / G::CH, c = idx % G::CH;
            if (i0 + rr < d.Sq && (!QE || i0 + rr >= 0)) {
                uint4 val;
                const unsigned addr = sQ + (unsigned)(rr * G::D + ((c ^ (rr & 7)) << 3)) * 2u;
                asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w) : "r"(addr) : "memory");
                *(uint4 *)(go + (int64_t)(i0 + rr) * d.os[2] + c * 8) = val;
            }
        }
    }
}

/* The modifier variant MOD of the forward tensor-core kernels (fa__tc_fwd, 8d3's fa__wg_fwd) for
   (b, h): which modifiers run (sc softcap, al ALiBi, bi bias), their constants md, and f, from a
   score's unit to log2 units at the exp. Plain: raw dot products, f folds the scale; softcap alone
   keeps tanh values, its positive factor folded into f; ALiBi alone keeps raw dot products too,
   its slopes in their unit (slope / scale, the scale positive there), f folding the scale (no
   multiply a score); else scores are rebuilt in the log2 domain (f = 1). */
struct fa__tc_mod {
    float f;
    bool sc, al, bi;
    fa__cu_mods md;
};

template <int MOD> static __device__ __forceinline__ fa__tc_mod fa__tc_mod_of(const fa__dims &d, int b, int h)
{
    fa__tc_mod r;
    r.f = MOD == 0 || MOD == 2 ? d.scale * FA__CU_LOG2E : MOD == 1 ? d.softcap * FA__CU_LOG2E : 1.0f;
    r.sc = (MOD & 1) || ((MOD & 4) && d.softcap > 0.0f);
    r.al = (MOD & 2) || ((MOD & 4) && d.alibi != 0);
    r.bi = (MOD & 4) && d.bias != 0;
    r.md = fa__cu_mods_of(d, b, h, d.scale, MOD == 2 ? 1.0f / d.scale : FA__CU_LOG2E, r.sc, r.al, MOD == 1);
    return r;
}

/* T: __half or __nv_bfloat16. C: an fa__tc_* configuration (8a). MOD: 0 plain (scale > 0, no
   modifier: raw dot products, the scale folded into the exp's FFMA); else the scores are rebuilt
   in the log2 domain, with bit 1 softcap (its tanh kept unscaled, softcap * log2(e) folded into
   the exp), bit 2 ALiBi, bit 4 everything decided at run time (bias, a non-positive scale,
   combinations). */
template <typename T, class C, int MOD>
__global__ void __launch_bounds__(C::NW * 32, C::MINB) fa__tc_fwd(const fa__tc_args a)
{
    typedef fa__tc_geom<C> G;
    enum { BQ = G::BQ, BK = G::BK, D = G::D, MT = G::MT };
    extern __shared__ __align__(128) unsigned char fa__tc_smem[];
    const fa__dims &d = a.d;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int bh, qt;
    fa__cu_qtile(d, (d.Sq + BQ - 1) / BQ, 2, &bh, &qt);   /* the longest (causal) blocks first */
    const int b = bh / d.Hq, h = bh - b * d.Hq, g = h / d.group, i0 = fa__cu_qrow0(d, qt, BQ, false);   /* from row 0 */
    const int nq = min((int)BQ, d.Sq - i0);
    const unsigned sQ = fa__cu_sa(fa__tc_smem), sK = sQ + BQ * D * 2, sV = sK + 2 * BK * D * 2;
    const T *gq = (const T *)a.q + b * d.qs[0] + h * d.qs[1] + (int64_t)i0 * d.qs[2];
    const T *gk = (const T *)a.k + b * d.ks[0] + g * d.ks[1];
    const T *gv = (const T *)a.v + b * d.vs[0] + g * d.vs[1];

    /* the keys of the block and its BK-aligned key tiles t0 .. t1-1 */
    const fa__keys kr = fa__cu_tile_keys(d, i0, nq);
    const int t0 = (int)kr.lo / BK, t1 = kr.hi > kr.lo ? ((int)kr.hi + BK - 1) / BK : t0;

    /* this thread's rows: i0 + r0 + 16*mt + 8*half; its first column in a tile: cq */
    const int r0 = warp * 16 * MT + (lane >> 2), cq = 2 * (lane & 3);

    const fa__tc_mod mv = fa__tc_mod_of<MOD>(d, b, h);
    const float f = mv.f;
    const bool sc = mv.sc, al = mv.al, bi = mv.bi;
    const fa__cu_mods md = mv.md;

    float o[MT][G::CH][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < G::CH; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    unsigned qf[MT][G::KD][4];   /* unused (and gone) unless QREG */
    unsigned aq[4], ak[4], av[4];
    fa__tc_bases<C>(sQ, sK, sV, warp, lane, aq, ak, av);

    if (t0 < t1) {
        fa__tc_load<D, BQ, G::NT>(sQ, gq, d.qs[2], nq, tid);
        fa__tc_load_kv<C>(sK, sV, 0u, gk, gv, d, t0 * BK, tid);
        fa__cu_wait<0>();
        __syncthreads();
        if (G::QREG) fa__tc_q_frags<C>(qf, aq);
    }

    for (int t = t0; t < t1; t++) {
        const int k0 = t * BK;
        const unsigned st = (unsigned)((t - t0) & 1) * BK * D * 2;
        if (t > t0) {   /* tile t landed, and every warp is done with tile t-1's stage */
            fa__cu_wait<0>();
            __syncthreads();
        }
        if (t + 1 < t1) fa__tc_load_kv<C>(sK, sV, BK * D * 2 - st, gk, gv, d, k0 + BK, tid);   /* streams in meanwhile */

        float s[MT][G::NN][4];
        unsigned pa[MT][G::KB][4];
        fa__tc_qk<T, C>(s, qf, aq, ak, st);
        fa__tc_scores<C, MOD>(s, d, md, sc, al, bi, i0 + r0, cq, k0, fa__keys_full(&kr, k0, k0 + BK));
        fa__tc_softmax<T, C>(s, m, l, o, pa, f);
        /* the rare case: a partial tile (some row hides some key, or a bias) whose V holds an inf
           or a NaN (a block vote on the chunks each thread copied, landed at the wait above): the
           rows that give such a key weight are made NaN, the tile's infs and NaNs read as 0, and
           P V runs as always */
        if ((bi || !fa__keys_full(&kr, k0, k0 + BK)) && __syncthreads_or(fa__tc_scan<D, BK, G::NT, T>(sV + st, tid))) {
            fa__tc_nan_rows<C>(o, fa__tc_hits<T, C>(pa, fa__tc_vrows<D>{ sV + st }, lane));
            fa__tc_clean_v<T, D, BK, G::NT>(sV + st, tid);
        }
        fa__tc_pv<T, C>(o, pa, av, st);
    }
    fa__tc_write<T, C>(a, o, m, l, f, sQ, b, h, i0, warp, lane);
}

/* ---- 8d2. CUDA: the split-key decode kernels (flash-decoding) -------------------------------------
   For few query rows per (batch, kv head): decoding, speculative or chunked decode (fa__cu_pick
   takes this path for Sq <= FA__CU_DEC_MAX_SQ and group * Sq <= FA__CU_DEC_MAX_ROWS). The query rows
   of one kv head's GQA group are packed, packed row r being query head g * group + r / Sq and
   query row r % Sq, so that a block reads each K/V tile once for all the heads that share it. The
   key axis is cut into chunks of fa__cu_dec_chunk keys (8f; a function of one sequence's Sk, Hkv,
   group and Sq, never of B or the device: a sequence's o and lse are bitwise the same decoded
   alone or in a batch).
   One block per (row block, chunk, kv head, batch), a row block 16 MT packed rows (the FFMA
   kernel's FA__CU_DEC_ROWS), walks the chunk's keys that some row sees (the chunk clipped to
   fa__cu_tile_keys of rows 0 .. Sq-1; the per-row mask is fa__cu_row_keys, the modifiers
   fa__cu_modify) and writes its rows' partial o
   (normalised, fp32) and lse into the workspace: o [rows][chunks][Dv], then lse [rows][chunks],
   rows in [B][Hq][Sq] order. A chunk that no row sees writes lse = -INFINITY and o = 0.
   fa__cu_dec_merge then merges each row's chunks into o (storage type, o's strides) and lse, by
   8b's merge rule (the one fa_cuda_merge runs).
   Two kernels: fa__dec_tc (fp16/bf16, D = Dv in {64, 128}, 16-byte aligned q/k/v rows, sm_80+),
   8d's steps on MT m16 tiles of packed rows (32-row blocks, MT = 2 or RH = 2, where a group's rows
   pass 16 and the 16-row grid takes more than a wave, so that K/V are read once for up to 32 of
   them; a row's bits are the same in 16- and 32-row blocks): each of the NW / RH key groups walks
   its own key tiles (tile t0 + kg + (NW / RH) u of the chunk) through its ring of ST cp.async
   stages (no block barrier in the loop: a warp's, or with RH = 2 its two warps' named barrier),
   with 16-byte loads, mma.sync and fp32 accumulators; at the end the key groups' results
   (normalised o and lse, through shared memory) are merged by the same rule, in key-group order.
   fa__dec_ffma (any dtype, layout, D, Dv <= 256): FFMA in exact fp32 like 8c, the tile's K and V
   in shared memory as fp32, each warp owning 4 of the 16 packed rows (keys on its lanes for
   S = Q K^T and the online softmax, columns on its lanes for P V). */

/* What the decode kernels receive: the request, the tensors, the workspace and the cut. */
struct fa__dec_args {
    const void *q, *k, *v;
    float *wo, *wl;            /* partial o [rows][chunks][Dv] and lse [rows][chunks] */
    int chunk, chunks, rblocks; /* keys a chunk, chunks a row, row blocks a kv head */
    fa__dims d;
};

/* Packed row r of kv head g: its query head h and query row i (a padding row, r >= group * Sq,
   takes the last row's, so that its loads stay in bounds; it is never written). */
static __device__ __forceinline__ void fa__dec_row(const fa__dims &d, int g, int r, int *h, int *i)
{
    const int rr = min(r, d.group * d.Sq - 1), hh = rr / d.Sq;
    *h = g * d.group + hh;
    *i = rr - hh * d.Sq;
}

/* The keys [*k0, *k1) chunk c walks: the chunk clipped to the keys some query row sees (rows
   0 .. Sq-1: every packed row is one of them); empty when *k1 <= *k0. Returns those rows' key
   ranges (for fa__keys_full). */
static __device__ __forceinline__ fa__keys fa__dec_keys(const fa__dims &d, int c, int chunk, int *k0, int *k1)
{
    const fa__keys kr = fa__cu_tile_keys(d, 0, d.Sq);
    const int64_t c0 = (int64_t)c * chunk, c1 = c0 + chunk < d.Sk ? c0 + chunk : d.Sk;
    *k0 = (int)(kr.lo > c0 ? kr.lo : c0);
    *k1 = (int)(kr.hi < c1 ? kr.hi : c1);
    return kr;
}

/* The index of a packed row's output row in [B][Hq][Sq]. */
static __device__ __forceinline__ int64_t fa__dec_out_row(const fa__dims &d, int b, int h, int i)
{
    return ((int64_t)b * d.Hq + h) * d.Sq + i;
}

/* The tensor-core kernel's shared memory: the Q tile (ROWS = 16 MT RH rows x D, 16-bit), then per
   key group (KG = NW / RH of them) a K ring and a V ring of ST stages of BK x D 16-bit elements
   (after the loop the group's two rings hold its warps' normalised o, row half h's at byte h WO:
   its WR = 16 MT rows as fp32 rows of D + 4 floats, then at byte LO their lse). */
template <class C> struct fa__dec_geom {
    enum { KG = C::NW / C::RH, WR = 16 * C::MT, ROWS = WR * C::RH, QB = ROWS * C::D * 2, RING = C::ST * C::BK * C::D * 2,
           SMEM = QB + KG * 2 * RING, LDO = C::D + 4, LO = WR * LDO * 4, WO = LO + WR * 4 };
    static_assert(C::RH >= 1 && C::RH <= 2 && C::NW % C::RH == 0, "one or two row halves share a key group's rings");
    static_assert(C::RH * WO <= 2 * RING, "the warps' o and lse fit their key group's rings");
};

/* Step: the K and V tiles of keys [k0, k0 + BK) into stage `stage` of this warp's key group's rings
   (rows past Sk zero-filled), issued by the warp's 32 lanes (with RH = 2 row half 0 copies K and
   row half 1 V), with C::LH's L2 policy pol; the caller commits. */
template <class C, typename T>
static __device__ __forceinline__ void fa__dec_load(unsigned sK, unsigned sV, int stage, const T *gk, const T *gv,
                                                    const fa__dims &d, int k0, int lane, int h, uint64_t pol)
{
    const int n = min((int)C::BK, d.Sk - k0);
    const unsigned st = (unsigned)stage * C::BK * C::D * 2;
    if (C::RH == 1 || h == 0) fa__tc_load<C::D, C::BK, 32, T, C::LH>(sK + st, gk + (int64_t)k0 * d.ks[2], d.ks[2], n, lane, pol);
    if (C::RH == 1 || h == 1) fa__tc_load<C::D, C::BK, 32, T, C::LH>(sV + st, gv + (int64_t)k0 * d.vs[2], d.vs[2], n, lane, pol);
}

/* The warps that share a key group's rings (RH of them, barrier 1 + kg) wait for each other; one
   warp alone (RH 1) waits for its lanes. The ids are constants (ptxas counts a barrier whose id is
   a register as all 16). */
template <class C> static __device__ __forceinline__ void fa__dec_group_sync(int kg)
{
    static_assert(C::RH == 1 || (C::RH == 2 && C::NW / C::RH <= 4), "barriers 1 .. 4 of two warps");
    if (C::RH == 1) __syncwarp();
    else if (kg == 0) asm volatile("bar.sync 1, 64;\n" ::: "memory");
    else if (kg == 1) asm volatile("bar.sync 2, 64;\n" ::: "memory");
    else if (kg == 2) asm volatile("bar.sync 3, 64;\n" ::: "memory");
    else asm volatile("bar.sync 4, 64;\n" ::: "memory");
}

/* Step: the modifiers (MOD 4: 8b's rule in the log2 domain, as fa__tc_scores) and the mask on one
   tile's scores of this thread's 2 MT packed rows (mt, hf: query row qi[mt][hf], its visible keys
   [lo, hi), its head's constants md[mt][hf]); its columns are j0 + 8n + e. */
template <class C, int MOD>
static __device__ __forceinline__ void fa__dec_scores(float (&s)[C::MT][C::BK / 8][4], const fa__dims &d,
                                                      const fa__cu_mods (&md)[C::MT][2], bool sc, bool al, bool bi,
                                                      const int (&qi)[C::MT][2], const bool (&rok)[C::MT][2],
                                                      const int (&lo)[C::MT][2], const int (&hi)[C::MT][2], int j0,
                                                      bool full)
{
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = j0 + n * 8 + e;
                    float x = s[mt][n][2 * hf + e];
                    if (MOD)
                        x = fa__cu_modify<fa__cu_tanh_approx, true>(md[mt][hf], x, sc, al, bi && rok[mt][hf] && j < d.Sk,
                                                                    (float)((int64_t)qi[mt][hf] + d.Sk - d.Sq - j),
                                                                    qi[mt][hf], j);
                    if (!full && (j < lo[mt][hf] || j >= hi[mt][hf])) x = -INFINITY;
                    s[mt][n][2 * hf + e] = x;
                }
}

/* Step: S = Q K^T of one key tile from fa__tc_qk's operands (Q from qf (QREG) or re-read through
   aq, K by ldmatrix), the k-steps alternating between two accumulators added at the end: twice the
   independent mma chains (the same products, summed in another order, the same for every MT). */
template <typename T, class C>
static __device__ __forceinline__ void fa__dec_qk(float (&s)[C::MT][C::BK / 8][4], const unsigned (&qf)[C::MT][C::D / 16][4],
                                                  const unsigned (&aq)[4], const unsigned (&ak)[4], unsigned st)
{
    typedef fa__tc_geom<C> G;
    typedef fa__tc_type<T> X;
    float s2[G::MT][G::NN][4];
#pragma unroll
    for (int mt = 0; mt < G::MT; mt++)
#pragma unroll
        for (int n = 0; n < G::NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[mt][n][e] = s2[mt][n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < G::KD; kk++) {
        unsigned kb[G::NN][2];
#pragma unroll
        for (int n = 0; n < G::NN; n += 2)
            fa__tc_ldsm(ak[kk & 3] + st + (unsigned)(n * 8 * G::D + 64 * (kk >> 2)) * 2u, kb[n][0], kb[n][1], kb[n + 1][0],
                        kb[n + 1][1]);
#pragma unroll
        for (int mt = 0; mt < G::MT; mt++) {
            unsigned qa[4];
            fa__tc_q_of<C>(qf, aq, mt, kk, qa);
#pragma unroll
            for (int n = 0; n < G::NN; n++) X::mma(kk & 1 ? s2[mt][n] : s[mt][n], qa, kb[n][0], kb[n][1]);
        }
    }
#pragma unroll
    for (int mt = 0; mt < G::MT; mt++)
#pragma unroll
        for (int n = 0; n < G::NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[mt][n][e] += s2[mt][n][e];
}

/* The warps' results in shared memory as parts of 8b's merge rule (part p = warp p). */
template <class C> struct fa__dec_warp_parts {
    const unsigned char *base;
    int rr;   /* the block's packed row: row rr % WR of row half rr / WR */
    __device__ __forceinline__ const float *at(int p) const
    {
        typedef fa__dec_geom<C> G;
        return (const float *)(base + G::QB + p * 2 * G::RING + (C::RH > 1 ? rr / G::WR * G::WO : 0));
    }
    __device__ __forceinline__ float l(int p) const
    {
        return at(p)[fa__dec_geom<C>::LO / 4 + (C::RH > 1 ? rr % fa__dec_geom<C>::WR : rr)];
    }
    __device__ __forceinline__ float o(int p, int t) const
    {
        return at(p)[(C::RH > 1 ? rr % fa__dec_geom<C>::WR : rr) * fa__dec_geom<C>::LDO + t];
    }
};

/* T: __half or __nv_bfloat16. C: one of 8a's fa__dec_d* (MT m16 tiles of packed rows). MOD: 0 plain (scale > 0, no
   modifier: raw dot products, the scale folded into the exp), 4 the modifiers decided at run
   time (fa__tc_fwd's variant 4). */
template <typename T, class C, int MOD>
__global__ void __launch_bounds__(C::NW * 32, C::MINB) fa__dec_tc(const fa__dec_args a)
{
    typedef fa__tc_geom<C> G;
    typedef fa__dec_geom<C> E;
    enum { D = C::D, BK = C::BK, NW = C::NW, ST = C::ST, MT = C::MT, RH = C::RH, KG = E::KG, WR = E::WR, ROWS = E::ROWS };
    extern __shared__ __align__(128) unsigned char fa__dec_smem[];
    const fa__dims &d = a.d;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = RH > 1 ? warp / KG : 0, kg = RH > 1 ? warp % KG : warp;   /* row half, key group */
    const int rb = (int)(blockIdx.x % (unsigned)a.rblocks), c = (int)(blockIdx.x / (unsigned)a.rblocks);
    const int g = blockIdx.y, b = blockIdx.z, R = d.group * d.Sq, r0 = rb * ROWS;
    const unsigned sQ = fa__cu_sa(fa__dec_smem), sK = sQ + E::QB + (unsigned)kg * 2 * E::RING, sV = sK + E::RING;
    const T *gk = (const T *)a.k + b * d.ks[0] + g * d.ks[1];
    const T *gv = (const T *)a.v + b * d.vs[0] + g * d.vs[1];
    const uint64_t pol = C::LH ? fa__cu_evict_first() : 0;   /* the K/V copies' L2 policy (C::LH) */
    fa__cu_dep_go();     /* FA__CU_DEC_PDL: the merge may launch, and waits for this grid */
    fa__cu_dep_wait();   /* the grid before this one done (q written, the workspace free) */

    /* the packed Q tile (rows past the pack zero-filled), one cp.async group */
    for (int idx = tid; idx < ROWS * G::CH; idx += NW * 32) {
        const int r = idx / G::CH, cc = idx % G::CH;
        int h, i;
        fa__dec_row(d, g, r0 + r, &h, &i);
        fa__cu_cp16(sQ + (unsigned)(r * D + ((cc ^ (r & 7)) << 3)) * 2u,
                    (const T *)a.q + b * d.qs[0] + h * d.qs[1] + (int64_t)i * d.qs[2] + cc * 8, r0 + r < R ? 16 : 0);
    }
    fa__cu_commit();

    /* this warp's key tiles (its key group's): t0 + kg + KG u, u < nt */
    int k0, k1;
    const fa__keys kr = fa__dec_keys(d, c, a.chunk, &k0, &k1);
    const int t0 = k0 < k1 ? k0 / BK : 0, ntall = k0 < k1 ? (k1 + BK - 1) / BK - t0 : 0;
    const int nt = ntall > kg ? (ntall - kg + KG - 1) / KG : 0;
#pragma unroll
    for (int u = 0; u < ST - 1; u++) {
        if (u < nt) fa__dec_load<C>(sK, sV, u, gk, gv, d, (t0 + kg + KG * u) * BK, lane, h, pol);
        fa__cu_commit();
    }

    /* this thread's packed rows r0 + WR h + 16 mt + (lane >> 2) + 8 hf: query row, visible keys, head constants */
    const float f = MOD == 0 ? d.scale * FA__CU_LOG2E : 1.0f;
    const bool sc = MOD && d.softcap > 0.0f, al = MOD && d.alibi != 0, bi = MOD && d.bias != 0;
    const int cq = 2 * (lane & 3);
    int qi[MT][2], lo[MT][2], hi[MT][2];
    bool rok[MT][2];
    fa__cu_mods md[MT][2];
    float o[MT][G::CH][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int pr = r0 + WR * h + 16 * mt + (lane >> 2) + 8 * hf;
            int hq;
            fa__dec_row(d, g, pr, &hq, &qi[mt][hf]);
            rok[mt][hf] = pr < R;
            md[mt][hf] = fa__cu_mods_of(d, b, hq, d.scale, FA__CU_LOG2E, sc, al, false);
            fa__cu_row_keys(d, qi[mt][hf], &lo[mt][hf], &hi[mt][hf]);
        }
#pragma unroll
        for (int n = 0; n < G::CH; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    unsigned qf[MT][G::KD][4], aq[4], ak[4], av[4];   /* qf unused (and gone) unless QREG */
    fa__tc_bases<C>(sQ, sK, sV, h, lane, aq, ak, av);   /* Q rows of row half h */
    fa__cu_wait<ST - 1>();   /* the Q group, the oldest */
    __syncthreads();
    if (G::QREG) fa__tc_q_frags<C>(qf, aq);

    for (int u = 0; u < nt; u++) {
        const int kt = (t0 + kg + KG * u) * BK;
        const unsigned st = (unsigned)(u % ST) * BK * D * 2;
        const bool full = fa__keys_full(&kr, kt, kt + BK);
        fa__cu_wait<ST - 2>();   /* tile u landed (every lane's part, and the other row half's: the group barrier, */
        fa__dec_group_sync<C>(kg);   /* after which the stage of tile u - 1 is free: both warps are past it) */
        if (u + ST - 1 < nt)
            fa__dec_load<C>(sK, sV, (u + ST - 1) % ST, gk, gv, d, (t0 + kg + KG * (u + ST - 1)) * BK, lane, h, pol);
        fa__cu_commit();
        float s[MT][G::NN][4];
        unsigned pa[MT][G::KB][4];
        if (C::QK2) fa__dec_qk<T, C>(s, qf, aq, ak, st);
        else fa__tc_qk<T, C>(s, qf, aq, ak, st);
        fa__dec_scores<C, MOD>(s, d, md, sc, al, bi, qi, rok, lo, hi, kt + cq, full);
        fa__tc_softmax<T, C>(s, m, l, o, pa, f);
        /* 8d's rare case (fa__tc_clean_v), voted by the warp that copied the V tile (with RH 2 both
           warps of the group scan its chunks and vote alike; both read the tile, then its copier
           cleans it between two group barriers) */
        if ((bi || !full) && __any_sync(0xffffffffu, fa__tc_scan<D, BK, 32, T>(sV + st, lane))) {
            fa__tc_nan_rows<C>(o, fa__tc_hits<T, C>(pa, fa__tc_vrows<D>{ sV + st }, lane));
            if (RH > 1) fa__dec_group_sync<C>(kg);
            if (RH == 1 || h == 1) fa__tc_clean_v<T, D, BK, 32>(sV + st, lane);
            if (RH > 1) fa__dec_group_sync<C>(kg);
        }
        fa__tc_pv<T, C>(o, pa, av, st);
    }
    fa__cu_wait<0>();
    fa__dec_group_sync<C>(kg);   /* the group's rings read */

    /* this warp's normalised o and lse (NaN kept) into its key group's rings (row half h at WO), as fp32 */
    {
        float *so = (float *)(fa__dec_smem + E::QB + kg * 2 * E::RING + h * E::WO), *sl = so + E::LO / 4;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                float lse;
                const float inv = fa__tc_row_end(l[mt][hf], m[mt][hf], f, &lse);
                const int rr = 16 * mt + (lane >> 2) + 8 * hf;
#pragma unroll
                for (int n = 0; n < G::CH; n++) {
                    so[rr * E::LDO + 8 * n + cq] = o[mt][n][2 * hf] * inv;
                    so[rr * E::LDO + 8 * n + cq + 1] = o[mt][n][2 * hf + 1] * inv;
                }
                if ((lane & 3) == 0) sl[rr] = lse;
            }
    }
    __syncthreads();
    /* the key groups' warps merged, in key-group order, into this chunk's partial of each packed row */
    for (int e = tid; e < ROWS * D; e += NW * 32) {
        const int rr = e / D, t = e % D, pr = r0 + rr;
        if (pr >= R) break;   /* rows go up with e */
        const fa__dec_warp_parts<C> v = { fa__dec_smem, rr };
        float mx, sum;
        int hq, i;
        fa__cu_merge_scan(v, KG, &mx, &sum);
        fa__dec_row(d, g, pr, &hq, &i);
        const int64_t row = fa__dec_out_row(d, b, hq, i) * a.chunks + c;
        a.wo[row * d.Dv + t] = fa__cu_merge_elem(v, KG, t, mx, sum);
        if (t == 0) a.wl[row] = fa__lse_of(mx, sum);
    }
}

/* The FFMA decode kernel's shared memory: Q (pre-scaled), a K and a V tile as fp32 rows of DC + 1
   floats (odd: a warp's lanes on 32 keys hit 32 banks), P [16][33]. */
template <int DC> struct fa__dec_ffma_geom {
    enum { LD = DC + 1, SMEM = (FA__CU_DEC_ROWS * LD + 2 * FA__CU_DEC_BK * LD + FA__CU_DEC_ROWS * 33) * 4 };
};

template <typename T, int DC>
__global__ void __launch_bounds__(FA__CU_DEC_THREADS) fa__dec_ffma(const fa__dec_args a)
{
    enum { LD = DC + 1, NC = DC / 32, BKF = FA__CU_DEC_BK, RW = FA__CU_DEC_ROWS / (FA__CU_DEC_THREADS / 32) };
    extern __shared__ float4 fa__cu_smem[];
    float *sQ = (float *)fa__cu_smem, *sK = sQ + FA__CU_DEC_ROWS * LD, *sV = sK + BKF * LD, *sP = sV + BKF * LD;
    const fa__dims &d = a.d;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int rb = (int)(blockIdx.x % (unsigned)a.rblocks), c = (int)(blockIdx.x / (unsigned)a.rblocks);
    const int g = blockIdx.y, b = blockIdx.z, R = d.group * d.Sq, r0 = rb * FA__CU_DEC_ROWS;
    const T *q = (const T *)a.q, *gk = (const T *)a.k + b * d.ks[0] + g * d.ks[1];
    const T *gv = (const T *)a.v + b * d.vs[0] + g * d.vs[1];
    const bool sc = d.softcap > 0.0f, al = d.alibi != NULL, bi = d.bias != NULL, mods = sc || al || bi;
    fa__cu_dep_go();     /* as fa__dec_tc */
    fa__cu_dep_wait();

    for (int e = tid; e < FA__CU_DEC_ROWS * DC; e += FA__CU_DEC_THREADS) {   /* Q, times the scale */
        const int rr = e / DC, t = e % DC;
        int h, i;
        float x = 0.0f;
        fa__dec_row(d, g, r0 + rr, &h, &i);
        if (r0 + rr < R && t < d.D) x = fa__ld(q + b * d.qs[0] + h * d.qs[1] + (int64_t)i * d.qs[2] + t) * d.scale;
        sQ[rr * LD + t] = x;
    }
    /* this warp's packed rows r0 + warp + 4 r */
    int qi[RW], lo[RW], hi[RW];
    bool rok[RW];
    fa__cu_mods md[RW];
    float acc[RW][NC], m[RW], ml[RW], l[RW];
#pragma unroll
    for (int r = 0; r < RW; r++) {
        const int pr = r0 + warp + 4 * r;
        int h;
        fa__dec_row(d, g, pr, &h, &qi[r]);
        rok[r] = pr < R;
        md[r] = fa__cu_mods_of(d, b, h, 1.0f, 1.0f, sc, al, false);
        fa__cu_row_keys(d, qi[r], &lo[r], &hi[r]);
        m[r] = -INFINITY; ml[r] = -INFINITY; l[r] = 0.0f;
#pragma unroll
        for (int n = 0; n < NC; n++) acc[r][n] = 0.0f;
    }
    int k0, k1;
    const fa__keys kr = fa__dec_keys(d, c, a.chunk, &k0, &k1);
    for (int kt = k0 < k1 ? k0 / BKF * BKF : k1; kt < k1; kt += BKF) {
        const int nk = min(BKF, d.Sk - kt), j = kt + lane;
        const bool full = fa__keys_full(&kr, kt, kt + BKF);
        __syncthreads();                                    /* the last tile is consumed; Q stored */
        for (int e = tid; e < BKF * DC; e += FA__CU_DEC_THREADS) {
            const int r = e / DC, t = e % DC;
            sK[r * LD + t] = r < nk && t < d.D ? fa__ld(gk + (int64_t)(kt + r) * d.ks[2] + t) : 0.0f;
            sV[r * LD + t] = r < nk && t < d.Dv ? fa__ld(gv + (int64_t)(kt + r) * d.vs[2] + t) : 0.0f;
        }
        __syncthreads();
        float s[RW];
#pragma unroll
        for (int r = 0; r < RW; r++) s[r] = 0.0f;
        for (int t = 0; t < d.D; t++) {                     /* S = Q K^T: key j on this lane */
            const float kk = sK[lane * LD + t];
#pragma unroll
            for (int r = 0; r < RW; r++) s[r] = fmaf(sQ[(warp + 4 * r) * LD + t], kk, s[r]);
        }
#pragma unroll
        for (int r = 0; r < RW; r++) {                      /* modifiers, mask, online softmax (8c's) */
            float x = s[r], mx, mnew, ref, alpha, e, sum;
            if (mods && rok[r] && j < d.Sk)
                x = fa__cu_modify<fa__cu_tanh, false>(md[r], x, sc, al, bi, (float)((int64_t)qi[r] + d.Sk - d.Sq - j), qi[r], j);
            if (!full && (j < lo[r] || j >= hi[r])) x = -INFINITY;
            mx = x;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) mx = fa__lse_max(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            mnew = fa__lse_max(m[r], mx);
            ref = fa__online_ref(mnew) * FA__CU_LOG2E;
            alpha = exp2f(ml[r] - ref);
            e = exp2f(fmaf(x, FA__CU_LOG2E, -ref));
            sum = e;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l[r] = l[r] * alpha + sum;
            m[r] = mnew;
            ml[r] = mnew == -INFINITY ? -INFINITY : ref;
#pragma unroll
            for (int n = 0; n < NC; n++) acc[r][n] *= alpha;
            sP[(warp + 4 * r) * 33 + lane] = e;
        }
        __syncwarp();
        if (bi || !full) {   /* 8c's rare case (fa__cu_fix_v): the V elements this thread stored, voted on */
            int bad = 0;
#pragma unroll 1
            for (int e = tid; e < BKF * DC; e += FA__CU_DEC_THREADS) bad |= fa__cu_bad(sV[(e / DC) * LD + e % DC]);
            bad = __any_sync(0xffffffffu, bad);   /* the warps' votes through P's padding column */
            if (lane == 0) ((int *)sP)[warp * 33 + 32] = bad;
            __syncthreads();
            bad = 0;
#pragma unroll
            for (int w = 0; w < FA__CU_DEC_THREADS / 32; w++) bad |= ((const int *)sP)[w * 33 + 32];
            if (bad) {
                const unsigned hit = fa__cu_fix_v<BKF, DC, LD, FA__CU_DEC_THREADS>(sV, sP, 33, warp, 4, RW, tid);
#pragma unroll
                for (int r = 0; r < RW; r++)
                    if (hit >> r & 1u) l[r] = NAN;   /* the row ends NaN (o and lse) */
            }
        }
        for (int jj = 0; jj < BKF; jj++) {                  /* acc += P V: columns lane + 32 n */
#pragma unroll
            for (int n = 0; n < NC; n++) {
                const float vv = sV[jj * LD + lane + 32 * n];
#pragma unroll
                for (int r = 0; r < RW; r++) acc[r][n] = fmaf(sP[(warp + 4 * r) * 33 + jj], vv, acc[r][n]);
            }
        }
    }
    /* this chunk's partial: o = acc / l (0 for a row with no visible key, NaN kept), lse */
#pragma unroll
    for (int r = 0; r < RW; r++) {
        if (!rok[r]) continue;
        int h, i;
        fa__dec_row(d, g, r0 + warp + 4 * r, &h, &i);
        const int64_t row = fa__dec_out_row(d, b, h, i) * a.chunks + c;
        const float inv = fa__cu_row_inv(l[r]);
#pragma unroll
        for (int n = 0; n < NC; n++)
            if (lane + 32 * n < d.Dv) a.wo[row * d.Dv + lane + 32 * n] = acc[r][n] * inv;
        if (lane == 0) a.wl[row] = fa__cu_row_lse(ml[r], l[r]);
    }
}

/* The decode merge: a block of FA__CU_DEC_THREADS per output row r, its chunks merged by 8b's rule
   into o (storage type, o's strides) and lse: the chunks' lse staged in shared memory (at most
   FA__CU_DEC_PARTS), every warp scans them (the same bits), each thread merges columns t, t + 128. */
struct fa__dec_ws_row {
    const float *wl, *wo;
    int dv;
    __device__ __forceinline__ float l(int p) const { return wl[p]; }
    __device__ __forceinline__ float o(int p, int t) const { return wo[(int64_t)p * dv + t]; }
};

template <typename T>
__global__ void __launch_bounds__(FA__CU_DEC_THREADS) fa__cu_dec_merge(const fa__dims d, const float *wo, const float *wl,
                                                                       int chunks, T *o)
{
    __shared__ float sl[FA__CU_DEC_PARTS];
    const int64_t r = blockIdx.x;
    const int64_t bh = r / d.Sq, i = r - bh * d.Sq, b = bh / d.Hq, h = bh - b * d.Hq;
    fa__cu_dep_go();     /* FA__CU_DEC_PDL: the next call's split kernel may launch, and waits for this grid */
    fa__cu_dep_wait();   /* the split kernel done, its partials visible */
    for (int p = threadIdx.x; p < chunks; p += FA__CU_DEC_THREADS) sl[p] = wl[r * chunks + p];
    __syncthreads();
    const fa__dec_ws_row v = { sl, wo + r * chunks * d.Dv, d.Dv };
    T *orow = o + b * d.os[0] + h * d.os[1] + i * d.os[2];
    float mx, sum;
    fa__cu_merge_scan(v, chunks, &mx, &sum);
    for (int t = threadIdx.x; t < d.Dv; t += FA__CU_DEC_THREADS) fa__st(orow + t, fa__cu_merge_elem(v, chunks, t, mx, sum));
    if (d.lse && threadIdx.x == 0) d.lse[r] = fa__lse_of(mx, sum);
}

/* ---- 8d3. CUDA: the Hopper forward kernel (sm_90a: wgmma, TMA, an mbarrier ring) ---------------
   FlashAttention-3 style forward for fp16/bf16 at D = Dv in {64, 128} on compute capability 9.0. A block
   of 1 + NC warpgroups owns BQ = 64 NC query rows of one (batch, head) (8a's fa__wg_d128: NC = 2,
   128 rows; fa__wg_d64: NC = 3, 192 rows):
   - warpgroup 0, the producer, lowers its registers (setmaxnreg) and one thread issues every copy:
     the Q tile once, then the K and V tiles of BK keys into a ring of ST stages, each a pair of
     128-byte-swizzled 64-column panels per tensor, loaded by TMA (cp.async.bulk.tensor, rows past
     Sq or Sk zero-filled by the copy engine) and completing on the stage's "full" mbarrier (its
     transaction count is the stage's bytes). It reuses a stage once every consumer warp has
     arrived on its "empty" mbarrier.
   - warpgroups 1 .. NC, the consumers, raise their registers and own 64 query rows each. Per key
     tile j one "GEMM step" issues O += P_{j-1} V_{j-1} (wgmma m64nDk16, P from registers as the
     A operand, V N-major from shared memory) and S_j = Q K_j^T (wgmma m64n128k16, Q and K K-major
     from shared memory), commits them as one group and waits; then 8d's steps run on the accumulators as they
     are (a warp's 16 rows of an m64 accumulator are the m16 layout of 8d with MT = 1): fa__tc_scores
     (modifiers, mask), fa__tc_softmax (online softmax, O rescaled, P packed), and at the end
     fa__tc_write (fa__tc_row_end, lse, o staged through the dead Q tile). The consumers take
     turns at the GEMM step in consumer order (a named barrier each, ping-pong: one token passed
     round), so that the others' softmax runs under one's wgmma (with two consumers measured level
     with no turns at all, PP = 0: bench/RESULTS.md, "Hopper forward (issue 15)"; kept as
     FlashAttention-3's schedule, not for a measured gain). With 8a's OV (the modifier variants
     in its mask: softcap and ALiBi at D = 128) a step where both GEMMs run issues Q K_j^T and
     P_{j-1} V_{j-1} as two groups instead (fa__wg_qk, fa__wg_pv), waits for the first alone, runs
     fa__tc_scores and fa__tc_softmax_p on a copy of S while P V runs, then waits for it, and
     rescales O (fa__tc_rescale) and packs P (fa__tc_pack); the first and last steps of a tile and
     a V stage with an inf or a NaN take the one-group step.
   With 8a's PER (persistent blocks) a block walks several query tiles (section 1's fa__sched_item, or
   fa__sched_pair for PER 3's pairs, over fa__cu_qtile's order): the K/V ring runs on from one tile to
   the next, the producer reloads the Q tile once every consumer warp has arrived on the "qfree"
   mbarrier after its last Q K^T retired (the tile's last softmax, P V and output store then run under
   that load), and with 8a's OS each warp stages its 16 rows of o in shared memory that is free at that
   moment (the Q tile is not: the next one loads there), written back as 16-byte row pieces: at D = 64
   in a buffer of its own (fa__wg_geom's OWN), at D = 128 in the K half of the tile's last stage, once
   the qfree phase shows every consumer's last Q K^T retired, the warp's "empty" arrival on that stage
   held back from the last GEMM step until the store has read its rows (the producer's next copy into
   the stage, a tile or more ahead, waits on it; a tile with no key tile stores from the registers).
   With OS 0 o goes from the registers to global memory.
   The key tiles are 8d's: fa__cu_tile_keys of the block's rows, fa__keys_full for the tiles that
   need no mask, the longest (causal) blocks first. With 8a's QE a causal request's tiles end at
   row Sq (8b's fa__cu_qrow0): the first tile's rows before row 0 are padding, which the Q copy
   fills with zeros (the TMA's out-of-bounds box rows, at a negative row coordinate) and the
   epilogue never stores; the tile's key range is its real rows' (fa__cu_qtile_keys).
   8d's rare case too: before the P V of a partial tile (some row hides some key, or a bias) each
   consumer scans the V stage (its warpgroup's vote on a named barrier of its own, then a warp
   vote, so that ptxas sees a uniform branch around the wgmma); a stage with an inf or a NaN skips
   the P V wgmma and takes fa__tc_pv_clean (mma.sync) on the same fragments after the step's wait,
   reading the stage (which only the TMA writes) before the warp's "empty" arrival.
   Served (fa__cu_pick, fa__wg_pick): fp16/bf16,
   D = Dv in {64, 128}, Sk >= 1, q, k, v in layouts TMA takes (fa__wg_tma_ok), o rows 16-byte aligned, a
   device of compute capability 9.0 running this build's sm_90a code (fa__wg_built); the modifier
   variants are fa__tc_fwd's. Elsewhere (and under a CUDA older than 12.0) fa__tc_fwd serves.
   The body is compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); any other target gets a stub
   that is never launched. The tensor maps come from the driver's cuTensorMapEncodeTiled, reached
   through cudaGetDriverEntryPoint (no -lcuda). */

#if defined(CUDART_VERSION) && CUDART_VERSION >= 12000
#define FA__WG 1
#include <cudaTypedefs.h>

/* What the kernel receives: the three tensor maps (TMA descriptors, kept in the kernel's parameter
   space: __grid_constant__) and 8d's arguments. */
struct fa__wg_args {
    CUtensorMap tq, tk, tv;
    fa__tc_args a;
};

/* 8a's OS of configuration C, FA__CU_WG_OS where C names none (the bench's configurations) */
template <class C, class = int> struct fa__wg_os { enum { v = FA__CU_WG_OS }; };
template <class C> struct fa__wg_os<C, decltype((int)C::OS)> { enum { v = C::OS }; };

/* The shared memory of configuration C (8a): the Q tile, ST stages of K and V (each tile D / 64
   panels of rows x 128 bytes), with 8a's OS (persistent blocks) the o tile's staging buffer of OB
   bytes where it fits beside them in a block's 227 KB (OWN: D = 64), then the mbarriers (full[ST],
   empty[ST], q, qfree), the base rounded up to 1024 bytes (the 128-byte swizzle repeats every 8
   rows of 128 bytes). Without OWN (D = 128: the stages fill the block) a persistent tile's o is
   staged in the K half of its last key tile's stage, free once every consumer warp's last Q K^T
   has retired (qfree) and held from the producer until the o store has read it (8d3). */
template <class C> struct fa__wg_geom {
    enum { D = C::D, BQ = 16 * C::NW, BK = C::BK, ST = C::ST, PANELS = C::D / 64 };
    enum { QB = BQ * D * 2, KB = BK * D * 2, OB = BQ * D * 2 };
    enum { TILES = QB + 2 * ST * KB, TAIL = 8 * (2 * ST + 2) + 1024 };   /* Q and the ring; the mbarriers and the alignment */
    enum { OS = C::PER != 0 && (int)fa__wg_os<C>::v != 0 };
    enum { OWN = OS && (int)TILES + (int)OB + (int)TAIL <= 227 * 1024 };
    enum { BARS = TILES + (OWN ? (int)OB : 0) };
    enum { SMEM = BARS + TAIL };
    static_assert(!OS || OWN || (int)KB >= (int)OB, "8a's OS: the o tile staged in a K stage");
};

/* mbarriers (shared::cta): init with an arrival count, an arrival that also expects `bytes` of
   transactions, a plain arrival, and a wait for the phase of parity `par` to complete. */
static __device__ __forceinline__ void fa__mb_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void fa__mb_expect(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void fa__mb_arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

static __device__ __forceinline__ void fa__mb_wait(unsigned bar, unsigned par)
{
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(par) : "memory");
    } while (!done);
}

/* One TMA copy of a box of a 4-d tensor map at coordinates (c0 .. c3, innermost first) into shared
   memory at dst, completing on the mbarrier bar. */
static __device__ __forceinline__ void fa__tma_load(unsigned dst, const CUtensorMap *map, unsigned bar, int c0, int c1,
                                                    int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 ::"r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory");
}

/* Named barriers among the consumer warpgroups (id 0 is __syncthreads'): the end of the loop (all
   consumers: `threads`), one turn barrier per consumer for the ping-pong (2-4: the consumer that
   waits and the one before it, 256 threads), and one vote barrier per consumer (5-7: its 128
   threads, fa__wg_vote). */
#define FA__WG_BAR_END 1
#define FA__WG_BAR_TURN 2
#define FA__WG_BAR_VOTE 5
static __device__ __forceinline__ void fa__wg_bar_sync(int id, int threads = 256)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
static __device__ __forceinline__ void fa__wg_bar_arrive(int id)
{
    asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}

/* 1 on every thread of a consumer warpgroup when x is 1 on one of them (barrier id, 128 threads) */
static __device__ __forceinline__ bool fa__wg_vote(int id, bool x)
{
    unsigned r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, %2, 128, q;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(r) : "r"((unsigned)x), "r"(id) : "memory");
    return r != 0;
}

/* A wgmma shared-memory descriptor (PTX 9.7.15.5.1.2): address, leading and stride byte offsets
   (16-byte units), 128-byte swizzle. K-major panels (Q, K): LBO unused, SBO 1024 (8 rows of 128
   bytes), +32 bytes per k16 step inside a panel. N-major (V): LBO the panel stride (64 columns),
   SBO 1024 (8 keys), +2048 bytes per k16 step. */
static __device__ __forceinline__ unsigned long long fa__wg_desc(unsigned addr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (unsigned long long)(lbo >> 4) << 16 |
           (unsigned long long)(sbo >> 4) << 32 | 1ull << 62;
}

/* wgmma's ordering: fence before the first wgmma after registers it reads were written, commit
   the issued ones as a group, wait until at most N groups are pending. fa__wg_keep pins an
   accumulator's registers at that point of the program (the compiler may not move their uses
   across it), so that nothing touches them between a wgmma and the wait that covers it. */
static __device__ __forceinline__ void fa__wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/* generic-proxy shared-memory accesses ordered before later async-proxy ones (a TMA copy) */
static __device__ __forceinline__ void fa__wg_proxy_fence(void) { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
static __device__ __forceinline__ void fa__wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void fa__wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

template <int N> static __device__ __forceinline__ void fa__wg_keep(float (&c)[1][N][4])
{
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(c[0][n][e])::"memory");
}

/* The m64nNk16 wgmmas of each 16-bit type, accumulating into the N / 2 fp32 registers c (8d's
   [1][N / 8][4] accumulator, flattened): ss, N = 128, with A and B from shared memory (acc 0:
   D = A B, else D += A B); rs128 and rs64, N = 128 and 64, with A from four registers (8d's A
   fragment) and B N-major (transposed); ss0, ss's D = A B with c written only (no register read:
   the accumulator's old values are not live into it); ss64, N = 64, both K-major (the backward, 8e3). */
#define FA__WG_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                 \
                   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "       \
                   "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "       \
                   "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FA__WG_C8(c, i) "+f"(c[i]), "+f"(c[i + 1]), "+f"(c[i + 2]), "+f"(c[i + 3]), "+f"(c[i + 4]), "+f"(c[i + 5]), \
                        "+f"(c[i + 6]), "+f"(c[i + 7])
#define FA__WG_C64(c) FA__WG_C8(c, 0), FA__WG_C8(c, 8), FA__WG_C8(c, 16), FA__WG_C8(c, 24), FA__WG_C8(c, 32), \
                      FA__WG_C8(c, 40), FA__WG_C8(c, 48), FA__WG_C8(c, 56)
#define FA__WG_O8(c, i) "=f"(c[i]), "=f"(c[i + 1]), "=f"(c[i + 2]), "=f"(c[i + 3]), "=f"(c[i + 4]), "=f"(c[i + 5]), \
                        "=f"(c[i + 6]), "=f"(c[i + 7])
#define FA__WG_O64(c) FA__WG_O8(c, 0), FA__WG_O8(c, 8), FA__WG_O8(c, 16), FA__WG_O8(c, 24), FA__WG_O8(c, 32), \
                      FA__WG_O8(c, 40), FA__WG_O8(c, 48), FA__WG_O8(c, 56)
#define FA__WG_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                 \
                   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA__WG_C32(c) FA__WG_C8(c, 0), FA__WG_C8(c, 8), FA__WG_C8(c, 16), FA__WG_C8(c, 24)
template <typename T> struct fa__wg_mma;
#define FA__WG_MMA(T, PTX)                                                                                         \
    template <> struct fa__wg_mma<T> {                                                                             \
        static __device__ __forceinline__ void ss(float *c, unsigned long long da, unsigned long long db, int acc)  \
        {                                                                                                          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                              \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " " FA__WG_D64                \
                         ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                         \
                         : FA__WG_C64(c) : "l"(da), "l"(db), "r"(acc));                                            \
        }                                                                                                          \
        static __device__ __forceinline__ void ss0(float *c, unsigned long long da, unsigned long long db)          \
        {                                                                                                          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"                                                \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " " FA__WG_D64                \
                         ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                         \
                         : FA__WG_O64(c) : "l"(da), "l"(db));                                                      \
        }                                                                                                          \
        static __device__ __forceinline__ void rs128(float *c, const unsigned (&a)[4], unsigned long long db)      \
        {                                                                                                          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                              \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " " FA__WG_D64                \
                         ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                           \
                         : FA__WG_C64(c) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));          \
        }                                                                                                          \
        static __device__ __forceinline__ void rs64(float *c, const unsigned (&a)[4], unsigned long long db)       \
        {                                                                                                          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                              \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " " FA__WG_D32                 \
                         ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                           \
                         : FA__WG_C32(c) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));          \
        }                                                                                                          \
        static __device__ __forceinline__ void ss64(float *c, unsigned long long da, unsigned long long db, int acc) \
        {                                                                                                          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                              \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " " FA__WG_D32                 \
                         ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                         \
                         : FA__WG_C32(c) : "l"(da), "l"(db), "r"(acc));                                            \
        }                                                                                                          \
    };
FA__WG_MMA(__nv_bfloat16, "bf16")
FA__WG_MMA(__half, "f16")
#undef FA__WG_MMA

/* The consumer's two GEMMs, issued (fa__wg_fence before, fa__wg_commit after, by the caller): S = Q
   K^T (qa: the warpgroup's 64 rows of the Q tile, sk: a K stage; both K-major panels), and O += P V
   (P from the registers pa, sv: a V stage, N-major). G: fa__wg_geom. W0: the first k-step by ss0,
   so that S's old values are not live into it (the overlap's kernels, 8a's OV). */
template <class X, class G, bool W0>
static __device__ __forceinline__ void fa__wg_qk(float (&s)[1][G::BK / 8][4], unsigned qa, unsigned sk)
{
    if (W0) X::ss0(&s[0][0][0], fa__wg_desc(qa, 16, 1024), fa__wg_desc(sk, 16, 1024));
#pragma unroll
    for (int kk = W0 ? 1 : 0; kk < G::D / 16; kk++)
        X::ss(&s[0][0][0], fa__wg_desc(qa + (kk >> 2) * G::BQ * 128 + (kk & 3) * 32, 16, 1024),
              fa__wg_desc(sk + (kk >> 2) * G::BK * 128 + (kk & 3) * 32, 16, 1024), W0 ? 1 : kk);
}

template <class X, class G>
static __device__ __forceinline__ void fa__wg_pv(float (&o)[1][G::D / 8][4], const unsigned (&pa)[1][G::BK / 16][4], unsigned sv)
{
#pragma unroll
    for (int kk = 0; kk < G::BK / 16; kk++) {
        const unsigned long long dv = fa__wg_desc(sv + kk * 2048, G::BK * 128, 1024);
        if (G::D == 128) X::rs128(&o[0][0][0], pa[0][kk], dv);
        else X::rs64(&o[0][0][0], pa[0][kk], dv);
    }
}

/* T: __half or __nv_bfloat16. C: fa__wg_d128 or fa__wg_d64 (8a). MOD: fa__tc_fwd's modifier variants. */
template <typename T, class C, int MOD>
__global__ void __launch_bounds__(C::WG, 1) fa__wg_fwd(const __grid_constant__ fa__wg_args w)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef fa__wg_geom<C> G;
    typedef fa__wg_mma<T> X;
    enum { BQ = G::BQ, BK = G::BK, D = G::D, ST = G::ST, NC = C::NW / 4 };
    enum { XP = MOD == 0 ? C::XP0 : MOD == 1 ? C::XP1 : MOD == 2 ? C::XP2 : 0 };   /* the exps' FMA-pipe share */
    enum { OV = MOD < 3 && (C::OV >> MOD & 1) };   /* 8a's OV (variant 4's constants leave no registers for it) */
    static_assert(D == 64 || D == 128, "the Hopper kernel's head dims");
    static_assert(!C::QE || MOD < 3, "8a's QE: padding rows before row 0 would read the bias (fa__tc_scores)");
    static_assert(C::NW % 4 == 0 && NC >= 2 && NC <= 3 && C::WG == 32 * C::NW + 128 &&
                      C::REG_P * 128 + C::REG_C * 32 * C::NW <= 65536, "the Hopper kernel's warpgroups and registers");
    extern __shared__ __align__(1024) unsigned char fa__wg_smem[];
    const fa__dims &d = w.a.d;
    const int tid = threadIdx.x, wg = tid >> 7, qtiles = (d.Sq + BQ - 1) / BQ;
    const int64_t items = (int64_t)d.B * d.Hq * qtiles;   /* the query tiles, fa__cu_qtile's order */
    /* 8a's PER: 0-2 non-causal in L2 groups; causal in them (0, 2) or in one longest-first run (1);
       3: non-causal the heads one after another, causal in pairs where each block gets two (else a run) */
    const int order = C::PER == 3 ? (!d.causal ? (int)FA__ORD_HEADS
                                     : items >= 2 * (int64_t)gridDim.x ? (int)FA__ORD_PAIRS : (int)FA__ORD_RUN)
                                  : !d.causal || C::PER != 1 ? (int)FA__ORD_GROUPS : (int)FA__ORD_RUN;
    const bool qe = C::QE && d.causal;   /* 8a's QE: causal tiles end at row Sq */
    const unsigned sQ = (fa__cu_sa(fa__wg_smem) + 1023u) & ~1023u, sK = sQ + G::QB, sV = sK + ST * G::KB;
    const unsigned sO = sV + ST * G::KB;   /* 8a's OS: the o tile's own buffer (G::OWN) */
    const unsigned full = sQ + G::BARS, empty = full + 8 * ST, qbar = empty + 8 * ST, qfree = qbar + 8;   /* + 8 s: stage s */
    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            fa__mb_init(full + 8 * s, 1);
            fa__mb_init(empty + 8 * s, C::NW);
        }
        fa__mb_init(qbar, 1);
        fa__mb_init(qfree, C::NW);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    /* The block's items: one (blockIdx.x) in a grid of every tile, or with C::PER a persistent grid's
       (section 1's fa__sched_item). Per item: the (batch, head) and query tile, the keys of the block
       and its BK-aligned key tiles t0 .. t0 + nt - 1 (8d's), which the producer and the consumers
       both derive. The K/V ring runs on across items (tile number gi / gc from the block's first). */
#define FA__WG_POS(k) \
    (order == FA__ORD_PAIRS ? fa__sched_pair(gridDim.x, blockIdx.x, k) : fa__sched_item(gridDim.x, blockIdx.x, k))
#define FA__WG_ITEM(k)                                                                                             \
    int bh, qt;                                                                                                    \
    fa__cu_qtile(d, qtiles, 2, &bh, &qt, FA__WG_POS(k), order);   /* longest first */                             \
    const int b = bh / d.Hq, h = bh - b * d.Hq, i0 = fa__cu_qrow0(d, qt, BQ, qe);   /* may be < 0 (qe) */         \
    const fa__keys kr = fa__cu_qtile_keys(d, i0, BQ, qe);                                                           \
    const int t0 = (int)kr.lo / BK, nt = kr.hi > kr.lo ? ((int)kr.hi + BK - 1) / BK - t0 : 0
    if (wg == 0) {   /* the producer: one thread issues every copy */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"((int)C::REG_P));
        if (tid == 0) {
            int gi = 0;
            for (int64_t k = 0; FA__WG_POS(k) < items; k++) {
                FA__WG_ITEM(k);
                const int g = h / d.group;
                if (k > 0) fa__mb_wait(qfree, (unsigned)(k - 1) & 1u);   /* every consumer done with the last Q */
                if (nt > 0) {
                    fa__mb_expect(qbar, G::QB);
#pragma unroll
                    for (int p = 0; p < G::PANELS; p++) fa__tma_load(sQ + p * BQ * 128, &w.tq, qbar, 64 * p, i0, h, b);
                } else
                    fa__mb_arrive(qbar);
                for (int j = 0; j < nt; j++, gi++) {
                    const int s = gi % ST;
                    if (gi >= ST) fa__mb_wait(empty + 8 * s, (unsigned)(gi / ST - 1) & 1u);   /* stage s consumed */
                    fa__mb_expect(full + 8 * s, 2 * G::KB);
#pragma unroll
                    for (int p = 0; p < G::PANELS; p++) {
                        fa__tma_load(sK + s * G::KB + p * BK * 128, &w.tk, full + 8 * s, 64 * p, (t0 + j) * BK, g, b);
                        fa__tma_load(sV + s * G::KB + p * BK * 128, &w.tv, full + 8 * s, 64 * p, (t0 + j) * BK, g, b);
                    }
                }
            }
        }
    } else {   /* a consumer: 64 query rows, its warps 16 each (8d's warp = cw * 4 + warp of the group) */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"((int)C::REG_C));
        const int cw = wg - 1, warp = (tid - 128) >> 5, lane = tid & 31;
        const int r0 = warp * 16 + (lane >> 2), cq = 2 * (lane & 3);
        const unsigned qa = sQ + cw * 64 * 128;   /* this warpgroup's 64 rows of Q, in each panel */
        float o[1][D / 8][4], s[1][BK / 8][4], m[1][2], l[1][2];
        unsigned pa[1][BK / 16][4];
#pragma unroll
        for (int n = 0; n < BK / 8; n++) s[0][n][0] = s[0][n][1] = s[0][n][2] = s[0][n][3] = 0.0f;
#pragma unroll
        for (int n = 0; n < BK / 16; n++) pa[0][n][0] = pa[0][n][1] = pa[0][n][2] = pa[0][n][3] = 0u;
        if (C::PP && cw == NC - 1) fa__wg_bar_arrive(FA__WG_BAR_TURN);   /* consumer 0 takes the first turn */
        int gc = 0;
        for (int64_t k = 0; FA__WG_POS(k) < items; k++) {
            FA__WG_ITEM(k);
            const fa__tc_mod mv = fa__tc_mod_of<MOD>(d, b, h);
#pragma unroll
            for (int n = 0; n < D / 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
            m[0][0] = m[0][1] = -INFINITY;
            l[0][0] = l[0][1] = 0.0f;
            fa__mb_wait(qbar, (unsigned)k & 1u);   /* the Q tile (the producer's plain arrival where nt = 0) */
            const bool ostage = G::OS && !G::OWN && nt > 0;   /* o staged in the last stage's K: its "empty" arrival waits */
            bool ppart = false;   /* tile j-1 is partial (some row hides some key, or a bias) */
            /* Two loops, so that the variants without 8a's OV compile to the step measured before it
               (the overlap's loop issues Q K^T's first k-step by ss0 in every step: S is never live
               across steps there, which it is in the one-group loop) */
            if (OV)   /* 8a's OV: the overlap where both GEMMs run, else the one-group step */
                for (int j = 0; j <= nt; j++) {   /* GEMM step j: P V of tile j-1, Q K^T of tile j */
                    const bool qk = j < nt, pv = j > 0;
                    const int sq = (gc + j) % ST, sp = (gc + j + ST - 1) % ST;
                    /* 8d's rare case: a partial tile whose V holds an inf or a NaN takes fa__tc_pv_clean, voted
                       by the warpgroup over the stage (which no thread writes: the TMA's alone) */
                    bool bad = false;
                    if (pv && ppart)   /* (the warp vote on top lets ptxas see a warp-uniform branch) */
                        bad = __any_sync(0xffffffffu, fa__wg_vote(FA__WG_BAR_VOTE + cw, fa__tc_scan<D, BK, 128, T>(sV + sp * G::KB, tid & 127)));
                    if (qk) fa__mb_wait(full + 8 * sq, (unsigned)((gc + j) / ST) & 1u);
                    if (C::PP) fa__wg_bar_sync(FA__WG_BAR_TURN + cw);
                    fa__wg_keep(o);
                    fa__wg_fence();
                    const bool qlast = C::PER != 0 && j == (nt > 0 ? nt - 1 : 0);   /* this warp's last Q K^T */
                    const int k0 = (t0 + j) * BK;
                    const bool kfull = qk && fa__keys_full(&kr, k0, k0 + BK);
                    if (qk && pv && !bad) {   /* both GEMMs, each its own group */
                        fa__wg_qk<X, G, true>(s, qa, sK + sq * G::KB);
                        fa__wg_commit();
                        fa__wg_fence();
                        fa__wg_pv<X, G>(o, pa, sV + sp * G::KB);
                        fa__wg_commit();
                        if (C::PP) fa__wg_bar_arrive(FA__WG_BAR_TURN + (cw + 1) % NC);   /* the next consumer's turn */
                        fa__wg_wait<1>();   /* S of tile j retired; P V of tile j-1 runs on, o and pa are its */
                        fa__wg_keep(s);
                        if (qlast) {   /* retired: the Q tile may be reloaded */
                            __syncwarp();
                            if (lane == 0) fa__mb_arrive(qfree);
                        }
                        /* the scores in registers of their own: ptxas serialises every wgmma of the kernel
                           (C7515) when a register of a wgmma's accumulator is written under a branch (the
                           mask's) before the last wait of the step, even one whose group has retired */
                        float sp_[1][BK / 8][4], alpha[1][2];
#pragma unroll
                        for (int n = 0; n < BK / 8; n++)
#pragma unroll
                            for (int e = 0; e < 4; e++) sp_[0][n][e] = s[0][n][e];
                        fa__tc_scores<C, MOD>(sp_, d, mv.md, mv.sc, mv.al, mv.bi, i0 + r0, cq, k0, kfull);
                        const bool rescale = fa__tc_softmax_p<T, C, XP, true>(sp_, m, l, alpha, pa, mv.f);   /* P stays in sp_ */
                        fa__wg_wait<0>();
                        fa__wg_keep(o);
                        __syncwarp();   /* this warp is done with stage sp (K and V of tile j-1) */
                        if (lane == 0) fa__mb_arrive(empty + 8 * sp);
                        if (rescale) fa__tc_rescale<C>(o, alpha);   /* O takes tile j's alpha, pa tile j's P */
                        fa__tc_pack<T, C>(sp_, pa);
                    } else {   /* one group: P V of tile j-1 and Q K^T of tile j, then the softmax */
                        if (pv && !bad) fa__wg_pv<X, G>(o, pa, sV + sp * G::KB);
                        if (qk) fa__wg_qk<X, G, true>(s, qa, sK + sq * G::KB);
                        fa__wg_commit();
                        if (C::PP) fa__wg_bar_arrive(FA__WG_BAR_TURN + (cw + 1) % NC);   /* the next consumer's turn */
                        fa__wg_wait<0>();
                        fa__wg_keep(o);
                        fa__wg_keep(s);
                        if (qlast) {   /* retired: the Q tile may be reloaded */
                            __syncwarp();
                            if (lane == 0) fa__mb_arrive(qfree);
                        }
                        if (pv) {   /* this warp is done with stage sp (K and V of tile j-1), but for o's staging */
                            if (bad) fa__tc_pv_clean<T, C>(o, pa, fa__wg_vrows<BK>{ sV + sp * G::KB }, lane);
                            __syncwarp();
                            if (lane == 0 && !(ostage && j == nt)) fa__mb_arrive(empty + 8 * sp);
                        }
                        if (qk) {
                            fa__tc_scores<C, MOD>(s, d, mv.md, mv.sc, mv.al, mv.bi, i0 + r0, cq, k0, kfull);
                            fa__tc_softmax<T, C, XP>(s, m, l, o, pa, mv.f);
                        }
                    }
                    ppart = qk && (mv.bi || !kfull);
                }
            else
                for (int j = 0; j <= nt; j++) {   /* GEMM step j: P V of tile j-1, Q K^T of tile j */
                    const bool qk = j < nt, pv = j > 0;
                    const int sq = (gc + j) % ST, sp = (gc + j + ST - 1) % ST;
                    /* 8d's rare case: a partial tile whose V holds an inf or a NaN takes fa__tc_pv_clean, voted
                       by the warpgroup over the stage (which no thread writes: the TMA's alone) */
                    bool bad = false;
                    if (pv && ppart)   /* (the warp vote on top lets ptxas see a warp-uniform branch) */
                        bad = __any_sync(0xffffffffu, fa__wg_vote(FA__WG_BAR_VOTE + cw, fa__tc_scan<D, BK, 128, T>(sV + sp * G::KB, tid & 127)));
                    if (qk) fa__mb_wait(full + 8 * sq, (unsigned)((gc + j) / ST) & 1u);
                    if (C::PP) fa__wg_bar_sync(FA__WG_BAR_TURN + cw);
                    fa__wg_keep(o);
                    fa__wg_keep(s);
                    fa__wg_fence();
                    if (pv && !bad) fa__wg_pv<X, G>(o, pa, sV + sp * G::KB);
                    if (qk) fa__wg_qk<X, G, false>(s, qa, sK + sq * G::KB);
                    fa__wg_commit();
                    if (C::PP) fa__wg_bar_arrive(FA__WG_BAR_TURN + (cw + 1) % NC);   /* the next consumer's turn */
                    fa__wg_wait<0>();
                    fa__wg_keep(o);
                    fa__wg_keep(s);
                    if (C::PER != 0 && j == (nt > 0 ? nt - 1 : 0)) {   /* this warp's last Q K^T retired: the Q tile may be reloaded */
                        __syncwarp();
                        if (lane == 0) fa__mb_arrive(qfree);
                    }
                    if (pv) {   /* this warp is done with stage sp (K and V of tile j-1), but for o's staging */
                        if (bad) fa__tc_pv_clean<T, C>(o, pa, fa__wg_vrows<BK>{ sV + sp * G::KB }, lane);
                        __syncwarp();
                        if (lane == 0 && !(ostage && j == nt)) fa__mb_arrive(empty + 8 * sp);
                    }
                    if (qk) {
                        const int k0 = (t0 + j) * BK;
                        const bool kfull = fa__keys_full(&kr, k0, k0 + BK);
                        ppart = mv.bi || !kfull;
                        fa__tc_scores<C, MOD>(s, d, mv.md, mv.sc, mv.al, mv.bi, i0 + r0, cq, k0, kfull);
                        fa__tc_softmax<T, C, XP>(s, m, l, o, pa, mv.f);
                    }
                }
            gc += nt;
            if (C::PER != 0 && G::OWN)   /* 8a's OS: staged in this warp's rows of the o buffer */
                fa__tc_write<T, C, 1, C::QE>(w.a, o, m, l, mv.f, sO, b, h, i0, warp, lane);
            else if (C::PER != 0 && ostage) {   /* staged in the K half of the last tile's stage sl */
                const int sl = (gc + ST - 1) % ST;
                fa__mb_wait(qfree, (unsigned)k & 1u);   /* every consumer warp's last Q K^T (the last read of K) retired */
                fa__tc_write<T, C, 1, C::QE>(w.a, o, m, l, mv.f, sK + sl * G::KB, b, h, i0, warp, lane);
                fa__wg_proxy_fence();   /* this warp's reads and writes of the stage before the producer's next copy */
                __syncwarp();
                if (lane == 0) fa__mb_arrive(empty + 8 * sl);   /* the arrival held back from the last step */
            } else if (C::PER != 0)   /* straight from the registers (8a's OS 0, or no key tile) */
                fa__tc_write<T, C, 0, C::QE>(w.a, o, m, l, mv.f, sQ, b, h, i0, warp, lane);
            else {
                if (C::PP && cw == 0) fa__wg_bar_sync(FA__WG_BAR_TURN);   /* the last consumer's last arrival */
                fa__wg_bar_sync(FA__WG_BAR_END, 32 * C::NW);   /* every wgmma reading the Q tile has retired */
                fa__tc_write<T, C, 1, C::QE>(w.a, o, m, l, mv.f, sQ, b, h, i0, warp, lane);
            }
        }
        if (C::PER != 0 && C::PP && cw == 0) fa__wg_bar_sync(FA__WG_BAR_TURN);   /* the last consumer's last arrival */
    }
#undef FA__WG_ITEM
#undef FA__WG_POS
#else
    /* another target: never launched. The static shared word tells fa__wg_built so (8f). */
    __shared__ unsigned fa__wg_absent[1];
    if (w.a.d.Sq < 0) asm volatile("st.shared.u32 [%0], 0;\n" ::"r"(fa__cu_sa(fa__wg_absent)) : "memory");
#endif
}
#else
#define FA__WG 0
#endif

/* ---- 8e. CUDA: the naive path's kernels and merge's ------------------------------------------ */

/* Block-wide reductions for up to 1024 threads (red holds 32 floats). The max is section 1's
   (fa__lse_max): a NaN sticks, from any lane and any warp. */
static __device__ __forceinline__ float fa__cu_bmax(float x, float *red)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int off = 16; off > 0; off >>= 1) x = fa__lse_max(x, __shfl_xor_sync(0xffffffffu, x, off));
    __syncthreads();
    if (lane == 0) red[w] = x;
    __syncthreads();
    x = -INFINITY;
    for (int i = 0; i < nw; i++) x = fa__lse_max(x, red[i]);
    return x;
}

static __device__ __forceinline__ float fa__cu_bsum(float x, float *red)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    __syncthreads();
    if (lane == 0) red[w] = x;
    __syncthreads();
    x = 0.0f;
    for (int i = 0; i < nw; i++) x += red[i];
    return x;
}

/* One row of S (scale Q K^T from cuBLAS, fp32) per block: modifiers and mask, `scores` if asked,
   softmax into P (storage type TP; for fp32 P is S itself, in place) and lse. ROW: the row is
   kept in shared memory between the passes (Sk small enough), else re-read from S. */
template <typename TP, int ROW>
__global__ void fa__cu_softmax(fa__dims d, float *S, TP *P, float *scores)
{
    extern __shared__ float4 fa__cu_smem[];
    float *red = (float *)fa__cu_smem, *row = red + 32;
    const int64_t r = blockIdx.x, Sk = d.Sk;
    const int64_t bh = r / d.Sq, i = r % d.Sq;
    const int b = (int)(bh / d.Hq), h = (int)(bh % d.Hq);
    const bool sc = d.softcap > 0.0f, al = d.alibi != NULL, bi = d.bias != NULL, mods = sc || al || bi;
    const fa__cu_mods md = fa__cu_mods_of(d, b, h, 1.0f, 1.0f, sc, al, false);
    float *s = S + r * Sk, mx = -INFINITY, sum = 0.0f, inv;
    TP *pr = P + r * Sk;
    int64_t lo, hi;
    fa__key_range(&d, i, &lo, &hi);
    for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) {
        float x = s[j];
        if (mods) x = fa__cu_modify<fa__cu_tanh, false>(md, x, sc, al, bi, (float)(i + d.Sk - d.Sq - j), i, j);
        if (j < lo || j >= hi) x = -INFINITY;
        if (ROW) row[j] = x; else s[j] = x;
        if (scores) scores[r * Sk + j] = x;
        mx = fa__lse_max(mx, x);   /* a NaN score sticks: the row is NaN, never taken for an empty one */
    }
    mx = fa__cu_bmax(mx, red);
    if (mx == -INFINITY) {                                 /* no visible key: P = 0, lse = -inf */
        for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) fa__st(pr + j, 0.0f);
        if (d.lse && threadIdx.x == 0) d.lse[r] = -INFINITY;
        return;
    }
    for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) {
        const float e = expf((ROW ? row[j] : s[j]) - mx);
        if (ROW) row[j] = e; else s[j] = e;
        sum += e;
    }
    sum = fa__cu_bsum(sum, red);
    inv = 1.0f / sum;
    for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) fa__st(pr + j, (ROW ? row[j] : s[j]) * inv);
    if (d.lse && threadIdx.x == 0) d.lse[r] = mx + logf(sum);
}

/* P V's rare case on the naive path: cuBLAS forms 0 * v for the keys a row does not see, NaN when
   v is an inf or a NaN, and a NaN must reach only the rows that see its key (API.md). fa__cu_vbad
   sets flag[b * Hkv + g] (zeroed before) when kv head (b, g) of v (strides s, as the GEMM reads it)
   holds an inf or a NaN: one read of v, beside the GEMMs' many; EM the exponent bits of the storage
   type. fa__cu_pv_fix, after the GEMM, recomputes the rows of a flagged head from P in FFMA, zero
   weights skipped (as the CPU does); other rows return at once. */
template <typename T, typename U, unsigned EM>
__global__ void fa__cu_vbad(const T *v, int Hkv, int Sk, int Dv, int64_t s0, int64_t s1, int64_t s2, int64_t rows,
                            int *flag)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {   /* r = (b * Hkv + g) * Sk + j */
        const int64_t bg = r / Sk, j = r % Sk, b = bg / Hkv, g = bg % Hkv;
        const U *row = (const U *)(v + b * s0 + g * s1 + j * s2);
        int bad = 0;
        for (int t = threadIdx.x; t < Dv; t += blockDim.x) bad |= ((unsigned)row[t] & EM) == EM;
        if (bad) flag[bg] = 1;
    }
}

template <typename T, typename TP>
__global__ void fa__cu_pv_fix(fa__dims d, const T *v, int64_t s0, int64_t s1, int64_t s2, const TP *P, T *o,
                              const int *flag)
{
    const int64_t r = blockIdx.x, bh = r / d.Sq, i = r % d.Sq;
    const int b = (int)(bh / d.Hq), h = (int)(bh % d.Hq), g = h / d.group;
    if (!flag[(int64_t)b * d.Hkv + g]) return;
    const TP *pr = P + r * d.Sk;
    const T *vb = v + b * s0 + g * s1;
    T *orow = o + b * d.os[0] + h * d.os[1] + i * d.os[2];
    for (int t = threadIdx.x; t < d.Dv; t += blockDim.x) {
        float a = 0.0f;
        for (int64_t j = 0; j < d.Sk; j++) {
            const float p = fa__ld(pr + j);
            if (p != 0.0f) a = fmaf(p, fa__ld(vb + j * s2 + t), a);
        }
        fa__st(orow + t, a);
    }
}

/* o = 0 and lse = -inf for every row (Sk == 0) */
template <typename T>
__global__ void fa__cu_empty(fa__dims d, T *o)
{
    const int64_t r = blockIdx.x, bh = r / d.Sq, i = r % d.Sq;
    T *orow = o + (bh / d.Hq) * d.os[0] + (bh % d.Hq) * d.os[1] + i * d.os[2];
    for (int t = threadIdx.x; t < d.Dv; t += blockDim.x) fa__st(orow + t, 0.0f);
    if (d.lse && threadIdx.x == 0) d.lse[r] = -INFINITY;
}

/* A strided [B][H][S][D] tensor copied to packed rows (for strides cuBLAS cannot take). */
template <typename T>
__global__ void fa__cu_pack(const T *src, T *dst, int H, int S, int D, int64_t s0, int64_t s1, int64_t s2)
{
    const int64_t r = blockIdx.x, bh = r / S, i = r % S;
    const T *a = src + (bh / H) * s0 + (bh % H) * s1 + i * s2;
    for (int t = threadIdx.x; t < D; t += blockDim.x) dst[r * D + t] = a[t];
}

/* The six pointer arrays of the two batched GEMMs, one entry per (batch, head). */
__global__ void fa__cu_ptrs(fa__dims d, const char *q, const char *k, const char *v, char *o, float *S,
                            const char *P, int es, int esp, const void **arr)
{
    const int64_t n = (int64_t)d.B * d.Hq, bh = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bh >= n) return;
    const int64_t b = bh / d.Hq, h = bh % d.Hq, g = h / d.group, ss = (int64_t)d.Sq * d.Sk;
    arr[bh] = k + (b * d.ks[0] + g * d.ks[1]) * es;
    arr[n + bh] = q + (b * d.qs[0] + h * d.qs[1]) * es;
    arr[2 * n + bh] = S + bh * ss;
    arr[3 * n + bh] = v + (b * d.vs[0] + g * d.vs[1]) * es;
    arr[4 * n + bh] = P + bh * ss * esp;
    arr[5 * n + bh] = o + (b * d.os[0] + h * d.os[1]) * es;
}

/* merge */
typedef struct fa__cu_parts {
    const float *o[FA__CU_MERGE];
    const float *l[FA__CU_MERGE];
} fa__cu_parts;

/* Block (32, 8): 8 rows, a warp (32 threads over the columns) a row, by 8b's merge rule. Every lse part
   of a row is read before the barrier and lse written after it, so lse may be lse_parts[0]; each
   o element is read and written by the same thread, so o may be o_parts[0]. */
struct fa__cu_parts_row {
    const fa__cu_parts *pp;
    int64_t r;
    int dv;
    __device__ __forceinline__ float l(int p) const { return pp->l[p][r]; }
    __device__ __forceinline__ float o(int p, int t) const { return pp->o[p][r * dv + t]; }
};

__global__ void fa__cu_merge(int rows, int dv, int parts, fa__cu_parts pp, float *o, float *lse)
{
    const int64_t r = (int64_t)blockIdx.x * 8 + threadIdx.y;
    const fa__cu_parts_row v = { &pp, r, dv };
    float mx = -INFINITY, sum = 0.0f;
    if (r < rows) fa__cu_merge_scan(v, parts, &mx, &sum);
    __syncthreads();
    if (r >= rows) return;
    for (int t = threadIdx.x; t < dv; t += 32) o[r * dv + t] = fa__cu_merge_elem(v, parts, t, mx, sum);
    if (lse && threadIdx.x == 0) lse[r] = fa__lse_of(mx, sum);
}
/* ---- 8e2. CUDA: the backward (naive path's kernels, the FFMA tiled backward) ------------------
   Both compute section 7b's rule, per (batch, query head, row i, visible key j), P_ij =
   exp(s_ij - L_i) with s the modified score:
       delta_i = dot(d_o_i, o_i),  dP_ij = dot(d_o_i, v_j),  dS_ij = P_ij (dP_ij - delta_i) g_ij
       dv_j += P_ij d_o_i,  dq_i += scale dS_ij k_j,  dk_j += scale dS_ij q_i
   with g_ij = 1 - t^2 for t the tanh that fa__cu_modify keeps (softcap), else 1, and dS = 0 where
   P = 0 (selected, never multiplied). A NaN or inf reaches only what it reaches (API.md): in a
   product such as dk_j += dS_ij q_i, a hidden (i, j) has dS = 0 but 0 x NaN is NaN, so the second
   operands of the gradient products (q, d_o, k) enter with their non-finite values as 0, and the
   row or key that held one is marked instead: P is NaN at every visible entry of a row whose q
   or d_o held one, and of a key whose k held one, so that the NaN reaches through P and dS every
   gradient it reaches and no other (a -INFINITY bias still hides the entry). v, o and lse need
   no rule (they enter dP, delta and P, whose hidden entries are selected away). The naive path
   zeroes in its fp32 copies and adds the marks (NaN or 0) to the raw scores in fa__cu_bwd_rows;
   the tiled path marks in fa__cu_bwd_prep (a row by a NaN lse, a key by kbad added to the raw
   score, and a flag for the call) and zeroes in the tiles of the FFMA kernels' FIN variant, which
   serves every flagged call (the tensor-core and plain FFMA kernels return at once when the flag
   is set, the FIN ones when it is clear).
   The naive path (fa_cuda_naive_backward, 8g) gathers q (times scale), k, v and d_o into
   packed fp32 copies per query head, runs five cuBLAS GEMMs in exact fp32 over materialised S, dP
   (dS in place) and, with softcap, G, with fa__cu_bwd_rows in between (modifiers, mask, softmax
   from the scores themselves: it needs no lse), and scatters the fp32 gradients into p->dtype,
   dk and dv summed over the group in head order. The tiled path (fa_cuda_tiled_backward) never
   holds an Sq x Sk matrix: fa__cu_bwd_prep first (delta); then fa__cu_bwd_dkv, one block of 256 threads
   per (key block, batch, kv head) with K (times scale) and V in shared memory, walking the query
   heads of the group and, for each, the query blocks (BQ rows at multiples of BQ) holding a row
   that sees the block (fa__key_rows): Q, d_o, lse and delta into shared memory, S and dP by FFMA
   (thread (ty, tx) owns rows ty + 16r, keys tx + 16c; fa__cu_bwd_txy), P from the forward's lse
   and dS (fa__cu_bwd_tile), P^T and dS^T through shared memory, dV += P^T dO and dK += dS^T Q held
   in registers across the whole walk, and dS K, the block's contribution to dq, added into an
   fp32 buffer by atomicAdd; the final fa__cu_bwd_out converts that buffer into dq. With
   p->deterministic the same kernel adds dS K in turns: query block qb takes the key blocks' adds
   in key-block order (fa__cu_turn_wait), the CPU backward's dq turns, so that every gradient is
   summed in an order fixed by the shape at the default mode's cost in products. A call with a
   non-finite input (the FIN kernels, which walk tiles on a few blocks and so cannot wait on
   turns) runs instead fa__cu_bwd_dkv without dq and fa__cu_bwd_dq, one block per (batch, head,
   query block), which walks its key blocks in order and sums dq in registers (S, dP and dS
   computed a second time: 7 GEMM-sized products instead of 5). For fp16/bf16 at D = Dv = 64 or
   128 with aligned rows, fa__cu_pick_backward takes the tensor-core backward below (8e2
   continued) instead: the same rule and the same two dq modes, on mma.sync; for fp32 there, its
   3xTF32 form (dq in turns when deterministic, as here). */

/* The FFMA backward's sizes for configuration CFG (8a): shared memory is K, V [BK][LD], Q, dO
   [BQ][LD], P^T and dS^T [BK][LDT], lse and delta [BQ] (the dq kernel leaves P^T unused). */
template <class CFG> struct fa__cu_bgeom {
    enum { DC = CFG::DC, RM = CFG::RM, CN = CFG::CN, BQ = 16 * RM, BK = 16 * CN, LD = DC + 4, LDT = BQ + 4,
           NC = DC / 64 };
    enum { SMEM = (2 * BK * LD + 2 * BQ * LD + 2 * BK * LDT + 2 * BQ) * 4 };
};

/* Rows of a strided [B][H][S][W] tensor of T set to 0 (a gradient no row or key reaches). */
template <typename T>
__global__ void fa__cu_bwd_zero(T *x, int H, int S, int W, int64_t s0, int64_t s1, int64_t s2, int64_t rows)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t bh = r / S, i = r % S;
        T *row = x + (bh / H) * s0 + (bh % H) * s1 + i * s2;
        for (int t = threadIdx.x; t < W; t += blockDim.x) fa__st(row + t, 0.0f);
    }
}

/* A strided [B][H/group][S][W] tensor of T into packed fp32 [B][H][S][W], times mul: query head
   h's row takes kv head h / group's (group 1: a copy). bad not NULL: a non-finite element is
   copied as 0 and its row's bad[r] set to NaN (bad[] is zero before; the rule of section 8e2). */
template <typename T>
__global__ void fa__cu_bwd_in(const T *src, float *dst, int H, int group, int S, int W, int64_t s0, int64_t s1,
                              int64_t s2, int64_t rows, float mul, float *bad)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t bh = r / S, i = r % S;
        const T *a = src + (bh / H) * s0 + (bh % H / group) * s1 + i * s2;
        int nf = 0;
        for (int t = threadIdx.x; t < W; t += blockDim.x) {
            const float x = fa__ld(a + t);
            nf |= fa__cu_bad(x);
            dst[r * W + t] = (bad ? fa__cu_fin(x) : x) * mul;
        }
        if (bad && __syncthreads_or(nf) && threadIdx.x == 0) bad[r] = NAN;
    }
}

/* Packed fp32 [B][H group][S][W] into a strided [B][H][S][W] tensor of T: row (b, h, i) is mul
   times the sum over the group's rows (b, h group + u, i), u in order; where fb is not NULL and
   *fb is set, mul 1 instead (the tensor-core backward's dq buffer written by the FFMA fallback),
   or with fb_skip nothing (the FFMA fallback's deterministic dq pass wrote dst itself). */
template <typename T>
__global__ void fa__cu_bwd_out(const float *src, T *dst, int H, int group, int S, int W, int64_t s0, int64_t s1,
                               int64_t s2, int64_t rows, float mul, const unsigned *fb, int fb_skip)
{
    if (fb && *fb) {
        if (fb_skip) return;
        mul = 1.0f;
    }
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t bh = r / S, i = r % S, b = bh / H, h = bh % H;
        T *o = dst + b * s0 + h * s1 + i * s2;
        for (int t = threadIdx.x; t < W; t += blockDim.x) {
            float x = 0.0f;
            for (int u = 0; u < group; u++) x += src[(((b * H + h) * group + u) * S + i) * W + t];
            fa__st(o + t, x * mul);
        }
    }
}

/* The naive backward's row step, one (batch, head, row) a block: S (scale Q K^T) and dP (dO V^T)
   from cuBLAS; rbad[r] + kbad[j] (NaN for a row or key that held a non-finite value, else 0) on
   the raw score, then modifiers and mask on S (G = softcap's derivative), the softmax into S (P,
   exactly 0 where hidden), delta from d_o (packed fp32) and o (strided T), dS into dP. A row with
   no visible key gets P = dS = 0. */
template <typename T>
__global__ void fa__cu_bwd_rows(fa__dims d, float *S, float *dP, float *G, const float *dO, const T *o,
                                const float *rbad, const float *kbad, int64_t rows)
{
    __shared__ float red[32];
    const bool sc = d.softcap > 0.0f, al = d.alibi != NULL, bi = d.bias != NULL, mods = sc || al || bi;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t bh = r / d.Sq, i = r % d.Sq, Sk = d.Sk;
        const int b = (int)(bh / d.Hq), h = (int)(bh % d.Hq);
        const fa__cu_mods md = fa__cu_mods_of(d, b, h, 1.0f, 1.0f, sc, al, false);
        const T *orow = o + (int64_t)b * d.os[0] + (int64_t)h * d.os[1] + i * d.os[2];
        float *s = S + r * Sk, *dp = dP + r * Sk, *g = G ? G + r * Sk : NULL, mx = -INFINITY, sum = 0.0f, delta = 0.0f;
        const float rb = rbad[r], *kb = kbad + bh * Sk;
        int64_t lo, hi;
        fa__key_range(&d, i, &lo, &hi);
        for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) {
            float x = s[j] + (rb + kb[j]), t = 0.0f;
            if (mods) x = fa__cu_modify<fa__cu_tanh, false>(md, x, sc, al, bi, (float)(i + d.Sk - d.Sq - j), i, j, &t);
            if (j < lo || j >= hi) x = -INFINITY;
            s[j] = x;
            if (g) g[j] = 1.0f - t * t;
            mx = fa__lse_max(mx, x);
        }
        for (int t = threadIdx.x; t < d.Dv; t += blockDim.x) delta += dO[r * d.Dv + t] * fa__ld(orow + t);
        mx = fa__cu_bmax(mx, red);
        delta = fa__cu_bsum(delta, red);
        if (mx == -INFINITY) {
            for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) s[j] = dp[j] = 0.0f;
            continue;
        }
        for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) sum += expf(s[j] - mx);
        sum = fa__cu_bsum(sum, red);
        for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) {
            const float pj = s[j] == -INFINITY ? 0.0f : expf(s[j] - mx) / sum;   /* a NaN mx or sum: hidden stay 0 */
            s[j] = pj;
            dp[j] = pj == 0.0f ? 0.0f : pj * (dp[j] - delta) * (g ? g[j] : 1.0f);
        }
    }
}

/* VEC elements of a row of T at x (16-byte aligned when VEC > 1) as fp32 */
template <typename T, int VEC>
static __device__ __forceinline__ void fa__cu_ldv(const T *x, float (&f)[VEC])
{
    if (VEC == 1) {
        f[0] = fa__ld(x);
    } else {
        const uint4 u = *(const uint4 *)x;
        const T *h = (const T *)&u;
#pragma unroll
        for (int e = 0; e < VEC; e++) f[e] = fa__ld(h + e);
    }
}

/* The tiled backward's first pass, L lanes a row (L a power of two <= 32: 32 / L rows a warp),
   each lane VEC elements at a time (VEC 16 / sizeof(T) where fa__cu_bwd_vec holds for q, k, o and
   d_o, else 1). Query row r < rows ([B][Hq][Sq]): delta_r = dot(d_o_r, o_r), and lx_r, the lse
   the tiles use: NaN where q_r or d_o_r holds a non-finite value, else the forward's. Key row
   r - rows ([B][Hkv][Sk]): kbad = NaN where k holds one, else 0. *flag = 1 when any row or key is
   so marked (section 8e2's rule). */
template <typename T, int VEC>
__global__ void fa__cu_bwd_prep(fa__dims d, const T *q, const T *k, const T *o, const T *dO, float *delta, float *lx,
                                float *kbad, unsigned *flag, int64_t rows, int64_t keys, int L)
{
    const int lane = threadIdx.x & 31, li = lane & (L - 1), rpw = 32 / L;
    const int64_t total = rows + keys, nw = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w * rpw < total; w += nw) {
        const int64_t r = w * rpw + lane / L;
        float x = 0.0f, f[VEC], g[VEC];
        int nf = 0;
        if (r < rows) {
            const int64_t bh = r / d.Sq, i = r % d.Sq, b = bh / d.Hq, h = bh % d.Hq;
            const int64_t off = b * d.os[0] + h * d.os[1] + i * d.os[2];
            const T *qr = q + b * d.qs[0] + h * d.qs[1] + i * d.qs[2];
            for (int t = li * VEC; t < d.Dv; t += L * VEC) {
                fa__cu_ldv<T, VEC>(dO + off + t, g);
                fa__cu_ldv<T, VEC>(o + off + t, f);
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    nf |= fa__cu_bad(g[e]);
                    x += g[e] * f[e];
                }
            }
            for (int t = li * VEC; t < d.D; t += L * VEC) {
                fa__cu_ldv<T, VEC>(qr + t, f);
#pragma unroll
                for (int e = 0; e < VEC; e++) nf |= fa__cu_bad(f[e]);
            }
        } else if (r < total) {
            const int64_t bg = (r - rows) / d.Sk, j = (r - rows) % d.Sk;
            const T *kj = k + (bg / d.Hkv) * d.ks[0] + (bg % d.Hkv) * d.ks[1] + j * d.ks[2];
            for (int t = li * VEC; t < d.D; t += L * VEC) {
                fa__cu_ldv<T, VEC>(kj + t, f);
#pragma unroll
                for (int e = 0; e < VEC; e++) nf |= fa__cu_bad(f[e]);
            }
        }
        for (int m = L >> 1; m > 0; m >>= 1) {             /* within the row's L lanes */
            x += __shfl_xor_sync(0xffffffffu, x, m);
            nf |= __shfl_xor_sync(0xffffffffu, nf, m);
        }
        if (li == 0 && r < rows) {
            delta[r] = x;
            lx[r] = nf ? NAN : d.lse[r];
        } else if (li == 0 && r < total) {
            kbad[r - rows] = nf ? NAN : 0.0f;
        }
        if (li == 0 && nf && r < total) atomicOr(flag, 1u);
    }
}

/* The FFMA backward's thread (tx, ty) of its 16 x 16 grid: a warp holds 8 tx by 4 ty (warp bit 0
   tx's high bit, warp bits 1-2 ty's two high bits), so that the transposed P^T / dS^T stores (key
   tx + 16c, row ty + 16r: bank 4 tx + ty) are free of bank conflicts. Lanes alternate tx and ty
   bits (lane bits 0, 2, 4: tx's bits 0-2; lane bits 1, 3: ty's bits 0-1), so that every 4
   consecutive lanes hold 2 tx by 2 ty: a warp's 16-byte shared load takes 2 wavefronts where each
   quad of lanes reads at most 2 distinct 16-byte words, 4 where a quad reads 4 (measured on the
   H200, bench/RESULTS.md, CUDA backward, "FFMA backward: lanes in quads of 2 x 2"); with lanes 0-2
   all tx, every load indexed by tx (the K and V rows of S and dP, the dO and Q columns of dV and
   dK, K's columns of dq) took 4. Each thread keeps its (tx, ty), so the same sums. */
static __device__ __forceinline__ void fa__cu_bwd_txy(int &tx, int &ty)
{
    const int t = (int)threadIdx.x, w = t >> 5;
    tx = (t & 1) | (t >> 1 & 2) | (t >> 2 & 4) | (w & 1) << 3;
    ty = (t >> 1 & 1) | (t >> 2 & 2) | (w >> 1) << 2;
}

/* acc[r][c] += dot(A's row ty + 16 r, B's row tx + 16 c) over [0, n), n a multiple of 4, rows LD
   floats apart in shared memory: the FFMA backward's S = Q K^T and dP = dO V^T. NT: n known at
   compile time (0: n at run time), so that the loop unrolls by UN and ptxas can issue the next
   steps' loads under this step's FMAs. */
template <int RM, int CN, int LD, int NT, int UN>
static __device__ __forceinline__ void fa__cu_bwd_dots(float (&acc)[RM][CN], const float *A, const float *B, int n,
                                                       int tx, int ty)
{
    const int nn = NT > 0 ? NT : n;
#pragma unroll UN
    for (int t = 0; t < nn; t += 4) {
        float4 bb[CN];
#pragma unroll
        for (int c = 0; c < CN; c++) bb[c] = *(const float4 *)(B + (tx + 16 * c) * LD + t);
#pragma unroll
        for (int r = 0; r < RM; r++) {
            const float4 aa = *(const float4 *)(A + (ty + 16 * r) * LD + t);
#pragma unroll
            for (int c = 0; c < CN; c++) {
                acc[r][c] = fmaf(aa.x, bb[c].x, acc[r][c]);
                acc[r][c] = fmaf(aa.y, bb[c].y, acc[r][c]);
                acc[r][c] = fmaf(aa.z, bb[c].z, acc[r][c]);
                acc[r][c] = fmaf(aa.w, bb[c].w, acc[r][c]);
            }
        }
    }
}

/* fa__cu_bwd_dots for a configuration: unrolled by CFG::UN with the trip count at compile time where
   n (D or Dv rounded up to 4) is the class's own DC, else the run-time loop. */
template <class CFG>
static __device__ __forceinline__ void fa__cu_bwd_dots_of(float (&acc)[fa__cu_bgeom<CFG>::RM][fa__cu_bgeom<CFG>::CN],
                                                          const float *A, const float *B, int n, int tx, int ty)
{
    typedef fa__cu_bgeom<CFG> G;
    if (n == G::DC && CFG::UN > 1)
        fa__cu_bwd_dots<G::RM, G::CN, G::LD, G::DC, CFG::UN>(acc, A, B, n, tx, ty);
    else
        fa__cu_bwd_dots<G::RM, G::CN, G::LD, 0, 1>(acc, A, B, n, tx, ty);
}

/* One query block x key block of the tiled backward, from shared memory: sQ, sO (dO) [BQ][LD],
   sK (k times scale), sV [BK][LD], sL (lse, -inf past the block's rows) and sDl (delta) [BQ].
   Out: p and ds of rows i0 + ty + 16r, keys k0 + tx + 16c, 0 where hidden. full: every row sees
   keys [k0, k0 + BK) (fa__keys_full), so no mask. FIN: kb, fa__cu_bwd_prep's kbad of (b, kv head),
   added to the raw score of key j (NaN for a key whose k the tiles hold as 0). */
template <class CFG, bool FIN>
static __device__ __forceinline__ void fa__cu_bwd_tile(const fa__dims &d, const fa__cu_mods &md, bool sc, bool al,
                                                       bool bi, const float *sQ, const float *sO, const float *sK,
                                                       const float *sV, const float *sL, const float *sDl,
                                                       const float *kb, int i0, int k0, bool full,
                                                       float (&p)[CFG::RM][CFG::CN], float (&ds)[CFG::RM][CFG::CN])
{
    typedef fa__cu_bgeom<CFG> G;
    enum { RM = G::RM, CN = G::CN, LD = G::LD };
    const int Dp = (d.D + 3) & ~3, Dvp = (d.Dv + 3) & ~3;
    const bool mods = sc || al || bi;
    int tx, ty;
    fa__cu_bwd_txy(tx, ty);
#pragma unroll
    for (int r = 0; r < RM; r++)
#pragma unroll
        for (int c = 0; c < CN; c++) p[r][c] = ds[r][c] = 0.0f;
    fa__cu_bwd_dots_of<CFG>(p, sQ, sK, Dp, tx, ty);      /* S = Q K^T (K carries the scale) */
    fa__cu_bwd_dots_of<CFG>(ds, sO, sV, Dvp, tx, ty);    /* dP = dO V^T */
#pragma unroll
    for (int r = 0; r < RM; r++) {
        const int64_t i = (int64_t)i0 + ty + 16 * r;
        const float L = sL[ty + 16 * r], dl = sDl[ty + 16 * r];
        int lo = 0, hi = d.Sk;
        if (!full) fa__cu_row_keys(d, (int)(i < d.Sq ? i : d.Sq - 1), &lo, &hi);
#pragma unroll
        for (int c = 0; c < CN; c++) {
            const int j = k0 + tx + 16 * c;
            const bool in = i < d.Sq && j < d.Sk;
            float x = FIN ? p[r][c] + (j < d.Sk ? kb[j] : 0.0f) : p[r][c], t = 0.0f, pj;
            if (mods && in) x = fa__cu_modify<fa__cu_tanh, false>(md, x, sc, al, bi, (float)(i + d.Sk - d.Sq - j), i, j, &t);
            pj = !in || j < lo || j >= hi || L == -INFINITY || x == -INFINITY ? 0.0f : expf(x - L);
            p[r][c] = pj;
            ds[r][c] = pj == 0.0f ? 0.0f : pj * (ds[r][c] - dl) * (sc ? 1.0f - t * t : 1.0f);
        }
    }
}

/* fa__cu_tile's result by 16-byte loads (16 / sizeof(T) elements each), for tensors whose rows
   start 16-byte aligned and whose width is a multiple of that (fa__cu_bwd_vec), in two steps:
   load() puts the tile's loads in flight into registers, store() converts them into fp32 rows of
   LD floats (times mul; FIN: a non-finite element stored as 0, q, d_o and k: section 8e2's rule),
   so that a kernel can issue a tile's loads before work that does not need it. */
template <typename T, int NROW, int DC> struct fa__cu_bwd_stage {
    enum { EPV = 16 / sizeof(T), NV = NROW * DC / EPV, U = (NV + FA__CU_THREADS - 1) / FA__CU_THREADS };
    uint4 x[U];
    __device__ __forceinline__ void load(const T *src, int64_t ts, int nvalid, int D)
    {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = (int)threadIdx.x + u * FA__CU_THREADS, r = e / (DC / EPV), c = (e % (DC / EPV)) * EPV;
            x[u] = make_uint4(0u, 0u, 0u, 0u);
            if (e < NV && r < nvalid && c < D) x[u] = *(const uint4 *)(src + (int64_t)r * ts + c);
        }
    }
    template <int LD, bool FIN> __device__ __forceinline__ void store(float *dst, float mul) const
    {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int e = (int)threadIdx.x + u * FA__CU_THREADS, r = e / (DC / EPV), c = (e % (DC / EPV)) * EPV;
            if (e < NV) {
                const T *h = (const T *)&x[u];
                float *o = dst + r * LD + c;
#pragma unroll
                for (int i = 0; i < EPV; i++) o[i] = (FIN ? fa__cu_fin(fa__ld(h + i)) : fa__ld(h + i)) * mul;
            }
        }
    }
};

/* A tile by fa__cu_bwd_stage's loads, all in flight before the first store (vec), or by
   fa__cu_tile (vec false). */
template <typename T, int NROW, int DC, int LD, bool FIN>
static __device__ __forceinline__ void fa__cu_bwd_in_tile(float *dst, const T *src, int64_t ts, int nvalid, int D,
                                                          float mul, bool vec)
{
    fa__cu_bwd_stage<T, NROW, DC> x;
    if (!vec) {
        fa__cu_tile<T, NROW, DC, LD, FIN>(dst, src, ts, nvalid, D, mul);
        return;
    }
    x.load(src, ts, nvalid, D);
    x.template store<LD, FIN>(dst, mul);
}

/* lse and delta of row x of query rows [i0, i0 + nq) of (b, h) (lse -inf, delta 0 past nq) */
static __device__ __forceinline__ float2 fa__cu_bwd_ld_of(const fa__dims &d, const float *delta, int b, int h, int i0,
                                                          int nq, int x)
{
    const int64_t r = ((int64_t)b * d.Hq + h) * d.Sq + i0 + x;
    return x < nq ? make_float2(d.lse[r], delta[r]) : make_float2(-INFINITY, 0.0f);
}

/* lse and delta of query rows [i0, i0 + nq) of (b, h) into shared memory */
template <class CFG>
static __device__ __forceinline__ void fa__cu_bwd_load_ld(const fa__dims &d, const float *delta, int b, int h, int i0,
                                                          int nq, float *sL, float *sDl)
{
    for (int x = threadIdx.x; x < fa__cu_bgeom<CFG>::BQ; x += blockDim.x) {
        const float2 v = fa__cu_bwd_ld_of(d, delta, b, h, i0, nq, x);
        sL[x] = v.x;
        sDl[x] = v.y;
    }
}

/* Q, dO, lse and delta of query rows [i0, i0 + nq) of (b, h) into shared memory (lse -inf past nq);
   vec: q and d_o take fa__cu_bwd_in_tile's 16-byte loads; FIN: their non-finite values as 0. */
template <typename T, class CFG, bool FIN>
static __device__ __forceinline__ void fa__cu_bwd_load_q(const fa__dims &d, const T *q, const T *dO,
                                                         const float *delta, int b, int h, int i0, int nq, float *sQ,
                                                         float *sO, float *sL, float *sDl, bool vec)
{
    typedef fa__cu_bgeom<CFG> G;
    fa__cu_bwd_in_tile<T, G::BQ, G::DC, G::LD, FIN>(sQ, q + (int64_t)b * d.qs[0] + (int64_t)h * d.qs[1] + (int64_t)i0 * d.qs[2],
                                               d.qs[2], nq, d.D, 1.0f, vec);
    fa__cu_bwd_in_tile<T, G::BQ, G::DC, G::LD, FIN>(sO, dO + (int64_t)b * d.os[0] + (int64_t)h * d.os[1] + (int64_t)i0 * d.os[2],
                                               d.os[2], nq, d.Dv, 1.0f, vec);
    fa__cu_bwd_load_ld<CFG>(d, delta, b, h, i0, nq, sL, sDl);
}

/* dq's share of one key block, for both dq paths (the atomic one in fa__cu_bwd_dkv, the ordered
   one in fa__cu_bwd_dq): aq[r][64n + 4tx + e] += sum_j dS^T[j][RM ty + r] K[j][64n + 4tx + e], K
   carrying the scale, dS^T in sST (LDT floats a key), K in sK (LD floats a key). A thread's RM
   rows of dS^T are adjacent: one 16-byte load (8 at RM = 2). */
template <class CFG>
static __device__ __forceinline__ void fa__cu_bwd_dsk(float (&aq)[fa__cu_bgeom<CFG>::RM][4 * fa__cu_bgeom<CFG>::NC],
                                                      const float *sST, const float *sK, int tx, int ty)
{
    typedef fa__cu_bgeom<CFG> G;
    enum { RM = G::RM, NC = G::NC, BK = G::BK, LD = G::LD, LDT = G::LDT, UDQ = CFG::UNDQ };
#pragma unroll UDQ
    for (int j = 0; j < BK; j++) {
        float sv[RM];
        if (RM % 4 == 0) {
#pragma unroll
            for (int r = 0; r < RM; r += 4) {
                const float4 x = *(const float4 *)(sST + j * LDT + RM * ty + r);
                sv[r] = x.x; sv[(r + 1) % RM] = x.y; sv[(r + 2) % RM] = x.z; sv[(r + 3) % RM] = x.w;
            }
        } else if (RM == 2) {
            const float2 x = *(const float2 *)(sST + j * LDT + RM * ty);
            sv[0] = x.x; sv[1 % RM] = x.y;
        } else {
#pragma unroll
            for (int r = 0; r < RM; r++) sv[r] = sST[j * LDT + RM * ty + r];
        }
#pragma unroll
        for (int n = 0; n < NC; n++) {
            const float4 kk = *(const float4 *)(sK + j * LD + 64 * n + 4 * tx);
#pragma unroll
            for (int r = 0; r < RM; r++) {
                aq[r][4 * n + 0] = fmaf(sv[r], kk.x, aq[r][4 * n + 0]);
                aq[r][4 * n + 1] = fmaf(sv[r], kk.y, aq[r][4 * n + 1]);
                aq[r][4 * n + 2] = fmaf(sv[r], kk.z, aq[r][4 * n + 2]);
                aq[r][4 * n + 3] = fmaf(sv[r], kk.w, aq[r][4 * n + 3]);
            }
        }
    }
}

/* The deterministic dq of the FFMA backward in one pass (FA__BWD_TURNS): query block qb of
   (b, h) takes the key blocks' dS K in key-block order, fa__rows_range's first block (the CPU
   backward's dq turns, fa__tbwd_tiles, on the same rule) first: turn[qb] counts the blocks that
   have added theirs, and key block kb adds its own when the count is kb - t0. The spin is one
   thread's, the others wait at the barrier; the block that passes the turn makes its adds visible
   first (fence after the barrier). A key block waits only on work items of lower index (same batch
   and kv head, the key block before it). Work items are tickets, not blockIdx: each block takes
   the next one from a counter (the turns' first word), so an item it waits on belongs to a block
   that is already running, whatever order the hardware starts blocks in; no wait can hang. */
static __device__ __forceinline__ unsigned fa__cu_ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void fa__cu_turn_wait(const unsigned *turn, unsigned want)
{
    if (threadIdx.x == 0)
        while (fa__cu_ld_acquire(turn) != want) __nanosleep(32);
    __syncthreads();
}

/* after a barrier that follows the block's adds */
static __device__ __forceinline__ void fa__cu_turn_pass(unsigned *turn)
{
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(turn, 1u);
    }
}

/* The FFMA dK/dV kernel's ways with dq (fa__cu_bwd_dkv's DQ): none (the separate ordered pass,
   fa__cu_bwd_dq, follows), atomics in any order, atomics in key-block order (the turns above). */
enum { FA__BWD_DQ_NONE = 0, FA__BWD_DQ_ATOMIC = 1, FA__BWD_DQ_TURNS = 2 };

/* One (key block, batch, kv head): dK and dV of the block over every query head of the group and
   every query block (BQ rows at multiples of BQ) holding a row that sees the block; DQ (not
   FA__BWD_DQ_NONE): each query block's dS K added into dqacc (fp32, packed [B][Hq][Sq][D]), in
   key-block order where DQ is FA__BWD_DQ_TURNS (turns: [B][Hq][query blocks], zero before).
   Key blocks in increasing order: under causal the first ones see the most rows, so they start
   first. CFG::MINB 1 (one block an SM: nothing else hides a load) with vec: the next query
   block's Q and dO loads are in flight in registers during the dq product. */
template <typename T, class CFG, int DQ, bool FIN>
static __device__ __forceinline__ void fa__cu_bwd_dkv_block(const fa__dims &d, const T *__restrict__ q,
                                                            const T *__restrict__ k, const T *__restrict__ v,
                                                            const T *__restrict__ dO, const float *__restrict__ delta,
                                                            const float *__restrict__ kbad, float *dqacc,
                                                            unsigned *turns, T *dk, T *dv, int vec, int64_t blk)
{
    typedef fa__cu_bgeom<CFG> G;
    enum { RM = G::RM, CN = G::CN, NC = G::NC, BQ = G::BQ, BK = G::BK, LD = G::LD, LDT = G::LDT, PF = CFG::MINB == 1,
           UPV = CFG::UNPV };
    extern __shared__ float4 fa__cu_smem[];
    float *sK = (float *)fa__cu_smem, *sV = sK + BK * LD, *sQ = sV + BK * LD, *sO = sQ + BQ * LD;
    float *sPT = sO + BQ * LD, *sST = sPT + BK * LDT, *sL = sST + BK * LDT, *sDl = sL + BQ;
    const int64_t nbg = (int64_t)d.B * d.Hkv;
    const int kb = (int)(blk / nbg), bg = (int)(blk % nbg), b = bg / d.Hkv, g = bg % d.Hkv;
    const int k0 = kb * BK, nk = min((int)BK, d.Sk - k0), qblocks = (d.Sq + BQ - 1) / BQ;
    const bool sc = d.softcap > 0.0f, al = d.alibi != NULL, bi = d.bias != NULL, vq = (vec & 1) != 0;
    const float *kbg = kbad + (int64_t)bg * d.Sk;
    const T *qb_ = q + (int64_t)b * d.qs[0], *ob_ = dO + (int64_t)b * d.os[0];
    float adk[CN][4 * NC], adv[CN][4 * NC];
    int64_t r0, r1;
    int tx, ty, qlo, nqb, ntile;
    fa__cu_bwd_txy(tx, ty);
#pragma unroll
    for (int r = 0; r < CN; r++)
#pragma unroll
        for (int c = 0; c < 4 * NC; c++) adk[r][c] = adv[r][c] = 0.0f;
    fa__cu_bwd_in_tile<T, BK, G::DC, LD, FIN>(sK, k + (int64_t)b * d.ks[0] + (int64_t)g * d.ks[1] + (int64_t)k0 * d.ks[2],
                                              d.ks[2], nk, d.D, d.scale, (vec & 2) != 0);
    fa__cu_bwd_in_tile<T, BK, G::DC, LD, false>(sV, v + (int64_t)b * d.vs[0] + (int64_t)g * d.vs[1] + (int64_t)k0 * d.vs[2],
                                                d.vs[2], nk, d.Dv, 1.0f, (vec & 2) != 0);
    fa__key_rows(&d, k0, k0 + nk, &r0, &r1);
    qlo = (int)(r0 / BQ);
    nqb = r0 < r1 ? (int)((r1 + BQ - 1) / BQ) - qlo : 0;
    ntile = d.group * nqb;                                 /* tile t: query head g group + t / nqb, block qlo + t % nqb */
    if (ntile > 0) fa__cu_bwd_load_q<T, CFG, FIN>(d, q, dO, delta, b, g * d.group, qlo * BQ, min((int)BQ, d.Sq - qlo * BQ),
                                                  sQ, sO, sL, sDl, vq);
    for (int t = 0; t < ntile; t++) {
        const int h = g * d.group + t / nqb, qb = qlo + t % nqb, i0 = qb * BQ, nq = min((int)BQ, d.Sq - i0);
        const fa__cu_mods md = fa__cu_mods_of(d, b, h, 1.0f, 1.0f, sc, al, false);
        const fa__keys kr = fa__cu_tile_keys(d, i0, nq);
        const bool more = t + 1 < ntile, pf = PF && vq && more;
        const int hn = g * d.group + (t + 1) / nqb, in0 = (qlo + (t + 1) % nqb) * BQ, nqn = min((int)BQ, d.Sq - in0);
        fa__cu_bwd_stage<T, BQ, G::DC> nQ, nO;
        float2 nld = make_float2(0.0f, 0.0f);              /* the next block's lse and delta (row threadIdx.x) */
        float p[RM][CN], ds[RM][CN];
        __syncthreads();                                   /* this block's Q, dO, lse, delta are stored */
        fa__cu_bwd_tile<CFG, FIN>(d, md, sc, al, bi, sQ, sO, sK, sV, sL, sDl, kbg, i0, k0,
                                  fa__keys_full(&kr, k0, k0 + BK) != 0, p, ds);
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int c = 0; c < CN; c++) {
                sPT[(tx + 16 * c) * LDT + ty + 16 * r] = p[r][c];
                sST[(tx + 16 * c) * LDT + ty + 16 * r] = ds[r][c];
            }
        __syncthreads();
        /* dV += P^T dO, dK += dS^T Q: this thread's keys ty + 16r, columns 64n + 4tx .. +3 */
#pragma unroll UPV
        for (int i = 0; i < BQ; i += 4) {
            float4 pt[CN], st[CN];
#pragma unroll
            for (int r = 0; r < CN; r++) {
                pt[r] = *(const float4 *)(sPT + (ty + 16 * r) * LDT + i);
                st[r] = *(const float4 *)(sST + (ty + 16 * r) * LDT + i);
            }
#pragma unroll
            for (int ii = 0; ii < 4; ii++)
#pragma unroll
                for (int n = 0; n < NC; n++) {
                    const float4 oo = *(const float4 *)(sO + (i + ii) * LD + 64 * n + 4 * tx);
                    const float4 qq = *(const float4 *)(sQ + (i + ii) * LD + 64 * n + 4 * tx);
#pragma unroll
                    for (int r = 0; r < CN; r++) {
                        const float a = ii == 0 ? pt[r].x : ii == 1 ? pt[r].y : ii == 2 ? pt[r].z : pt[r].w;
                        const float e = ii == 0 ? st[r].x : ii == 1 ? st[r].y : ii == 2 ? st[r].z : st[r].w;
                        adv[r][4 * n + 0] = fmaf(a, oo.x, adv[r][4 * n + 0]);
                        adv[r][4 * n + 1] = fmaf(a, oo.y, adv[r][4 * n + 1]);
                        adv[r][4 * n + 2] = fmaf(a, oo.z, adv[r][4 * n + 2]);
                        adv[r][4 * n + 3] = fmaf(a, oo.w, adv[r][4 * n + 3]);
                        adk[r][4 * n + 0] = fmaf(e, qq.x, adk[r][4 * n + 0]);
                        adk[r][4 * n + 1] = fmaf(e, qq.y, adk[r][4 * n + 1]);
                        adk[r][4 * n + 2] = fmaf(e, qq.z, adk[r][4 * n + 2]);
                        adk[r][4 * n + 3] = fmaf(e, qq.w, adk[r][4 * n + 3]);
                    }
                }
        }
        if (pf) {                                          /* the next block's Q, dO, lse and delta in flight */
            nQ.load(qb_ + (int64_t)hn * d.qs[1] + (int64_t)in0 * d.qs[2], d.qs[2], nqn, d.D);
            nO.load(ob_ + (int64_t)hn * d.os[1] + (int64_t)in0 * d.os[2], d.os[2], nqn, d.Dv);
            if ((int)threadIdx.x < BQ) nld = fa__cu_bwd_ld_of(d, delta, b, hn, in0, nqn, (int)threadIdx.x);
        }
        if (DQ != FA__BWD_DQ_NONE) {   /* dq rows RM ty + r of the block += dS K (K carries the scale), by atomics */
            float aq[RM][4 * NC];
            unsigned *turn = turns + ((int64_t)b * d.Hq + h) * qblocks + qb;
#pragma unroll
            for (int r = 0; r < RM; r++)
#pragma unroll
                for (int c = 0; c < 4 * NC; c++) aq[r][c] = 0.0f;
            fa__cu_bwd_dsk<CFG>(aq, sST, sK, tx, ty);
            if (DQ == FA__BWD_DQ_TURNS) {
                int64_t lo, hi;
                fa__rows_range(&d, i0, (int64_t)i0 + nq, &lo, &hi);
                fa__cu_turn_wait(turn, (unsigned)(kb - (int)(lo / BK)));
            }
#pragma unroll
            for (int r = 0; r < RM; r++) {
                const int x = RM * ty + r;
                if (x >= nq) continue;
                float *dst = dqacc + (((int64_t)b * d.Hq + h) * d.Sq + i0 + x) * d.D;
#pragma unroll
                for (int n = 0; n < NC; n++) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                    if ((d.D & 3) == 0) {          /* one 16-byte red a row and n (sm_90); each element still takes one add */
                        if (64 * n + 4 * tx < d.D)
                            atomicAdd((float4 *)(dst + 64 * n + 4 * tx),
                                      make_float4(aq[r][4 * n], aq[r][4 * n + 1], aq[r][4 * n + 2], aq[r][4 * n + 3]));
                        continue;
                    }
#endif
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int col = 64 * n + 4 * tx + e;
                        if (col < d.D) atomicAdd(dst + col, aq[r][4 * n + e]);
                    }
                }
            }
            __syncthreads();                               /* the adds are issued; Q, dO, P^T, dS^T consumed */
            if (DQ == FA__BWD_DQ_TURNS) fa__cu_turn_pass(turn);
        } else {
            __syncthreads();                               /* Q, dO, P^T, dS^T consumed */
        }
        if (pf) {
            nQ.template store<LD, FIN>(sQ, 1.0f);
            nO.template store<LD, FIN>(sO, 1.0f);
            if ((int)threadIdx.x < BQ) {
                sL[threadIdx.x] = nld.x;
                sDl[threadIdx.x] = nld.y;
            }
        } else if (more) {
            fa__cu_bwd_load_q<T, CFG, FIN>(d, q, dO, delta, b, hn, in0, nqn, sQ, sO, sL, sDl, vq);
        }
    }
    /* dk = scale dK, dv = dV of the block's keys (0 for a key no row sees) */
#pragma unroll
    for (int r = 0; r < CN; r++) {
        const int j = ty + 16 * r;
        if (j >= nk) continue;
        T *kr_ = dk + (int64_t)b * d.ks[0] + (int64_t)g * d.ks[1] + (int64_t)(k0 + j) * d.ks[2];
        T *vr_ = dv + (int64_t)b * d.vs[0] + (int64_t)g * d.vs[1] + (int64_t)(k0 + j) * d.vs[2];
#pragma unroll
        for (int n = 0; n < NC; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = 64 * n + 4 * tx + e;
                if (col < d.D) fa__st(kr_ + col, adk[r][4 * n + e] * d.scale);
                if (col < d.Dv) fa__st(vr_ + col, adv[r][4 * n + e]);
            }
    }
}

template <typename T, class CFG, int DQ, bool FIN>
__global__ void __launch_bounds__(FA__CU_THREADS, CFG::MINB)
fa__cu_bwd_dkv(fa__dims d, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
               const T *__restrict__ dO, const float *__restrict__ delta, const float *__restrict__ kbad,
               const unsigned *flag, int64_t nblk, float *dqacc, unsigned *turns, T *dk, T *dv, int vec)
{
    if ((*flag != 0) != FIN) return;   /* FIN: only a call with a non-finite q, d_o or k; else only one without */
    if (!FIN && DQ == FA__BWD_DQ_TURNS) {                  /* a block a tile, the tile by ticket */
        __shared__ unsigned ticket;
        if (threadIdx.x == 0) ticket = atomicAdd(turns, 1u);
        __syncthreads();
        fa__cu_bwd_dkv_block<T, CFG, DQ, FIN>(d, q, k, v, dO, delta, kbad, dqacc, turns + 1, dk, dv, vec, (int64_t)ticket);
    } else if (!FIN) {                                     /* a block a tile */
        fa__cu_bwd_dkv_block<T, CFG, DQ, FIN>(d, q, k, v, dO, delta, kbad, dqacc, turns, dk, dv, vec, (int64_t)blockIdx.x);
    } else {                                               /* a few blocks walk the tiles (never in turns) */
        for (int64_t blk = blockIdx.x; blk < nblk; blk += gridDim.x) {
            fa__cu_bwd_dkv_block<T, CFG, DQ, FIN>(d, q, k, v, dO, delta, kbad, dqacc, turns, dk, dv, vec, blk);
            __syncthreads();                               /* this tile's shared memory is consumed */
        }
    }
}

/* Deterministic dq: one (batch, head, query block), its key blocks walked in order from the first
   visible key, dq = sum dS K in registers, written once (0 for a row that sees no key). The last
   query blocks (the longest under causal) first. */
template <typename T, class CFG, bool FIN>
static __device__ __forceinline__ void fa__cu_bwd_dq_block(const fa__dims &d, const T *__restrict__ q,
                                                           const T *__restrict__ k, const T *__restrict__ v,
                                                           const T *__restrict__ dO, const float *__restrict__ delta,
                                                           const float *__restrict__ kbad, T *dq, int qblocks, int vec,
                                                           int64_t blk)
{
    typedef fa__cu_bgeom<CFG> G;
    enum { RM = G::RM, CN = G::CN, NC = G::NC, BQ = G::BQ, BK = G::BK, LD = G::LD, LDT = G::LDT };
    extern __shared__ float4 fa__cu_smem[];
    float *sK = (float *)fa__cu_smem, *sV = sK + BK * LD, *sQ = sV + BK * LD, *sO = sQ + BQ * LD;
    float *sST = sO + BQ * LD + BK * LDT, *sL = sST + BK * LDT, *sDl = sL + BQ;
    const int64_t nbh = (int64_t)d.B * d.Hq;
    const int qb = qblocks - 1 - (int)(blk / nbh), bh = (int)(blk % nbh), b = bh / d.Hq, h = bh % d.Hq;
    const int g = h / d.group, i0 = qb * BQ, nq = min((int)BQ, d.Sq - i0);
    const bool sc = d.softcap > 0.0f, al = d.alibi != NULL, bi = d.bias != NULL;
    const fa__cu_mods md = fa__cu_mods_of(d, b, h, 1.0f, 1.0f, sc, al, false);
    const fa__keys kr = fa__cu_tile_keys(d, i0, nq);
    const T *kb = k + (int64_t)b * d.ks[0] + (int64_t)g * d.ks[1], *vb = v + (int64_t)b * d.vs[0] + (int64_t)g * d.vs[1];
    const float *kbg = kbad + ((int64_t)b * d.Hkv + g) * d.Sk;
    float aq[RM][4 * NC];
    int tx, ty;
    fa__cu_bwd_txy(tx, ty);
#pragma unroll
    for (int r = 0; r < RM; r++)
#pragma unroll
        for (int c = 0; c < 4 * NC; c++) aq[r][c] = 0.0f;
    fa__cu_bwd_load_q<T, CFG, FIN>(d, q, dO, delta, b, h, i0, nq, sQ, sO, sL, sDl, (vec & 1) != 0);
    for (int k0 = (int)kr.lo; k0 < kr.hi; k0 += BK) {
        const int nk = min((int)BK, d.Sk - k0);
        float p[RM][CN], ds[RM][CN];
        __syncthreads();                                  /* the last block's K, V and dS^T are consumed */
        fa__cu_bwd_in_tile<T, BK, G::DC, LD, FIN>(sK, kb + (int64_t)k0 * d.ks[2], d.ks[2], nk, d.D, d.scale, (vec & 2) != 0);
        fa__cu_bwd_in_tile<T, BK, G::DC, LD, false>(sV, vb + (int64_t)k0 * d.vs[2], d.vs[2], nk, d.Dv, 1.0f, (vec & 2) != 0);
        __syncthreads();
        fa__cu_bwd_tile<CFG, FIN>(d, md, sc, al, bi, sQ, sO, sK, sV, sL, sDl, kbg, i0, k0, fa__keys_full(&kr, k0, k0 + BK) != 0,
                             p, ds);
        (void)p;
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int c = 0; c < CN; c++) sST[(tx + 16 * c) * LDT + ty + 16 * r] = ds[r][c];
        __syncthreads();
        fa__cu_bwd_dsk<CFG>(aq, sST, sK, tx, ty);
    }
#pragma unroll
    for (int r = 0; r < RM; r++) {
        const int x = RM * ty + r;
        if (x >= nq) continue;
        T *dst = dq + (int64_t)b * d.qs[0] + (int64_t)h * d.qs[1] + (int64_t)(i0 + x) * d.qs[2];
#pragma unroll
        for (int n = 0; n < NC; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = 64 * n + 4 * tx + e;
                if (col < d.D) fa__st(dst + col, aq[r][4 * n + e]);
            }
    }
}

template <typename T, class CFG, bool FIN>
__global__ void __launch_bounds__(FA__CU_THREADS, 1)
fa__cu_bwd_dq(fa__dims d, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
              const T *__restrict__ dO, const float *__restrict__ delta, const float *__restrict__ kbad,
              const unsigned *flag, int64_t nblk, T *dq, int qblocks, int vec)
{
    if ((*flag != 0) != FIN) return;   /* FIN: only a call with a non-finite q, d_o or k; else only one without */
    if (!FIN) {                                            /* a block a tile */
        fa__cu_bwd_dq_block<T, CFG, FIN>(d, q, k, v, dO, delta, kbad, dq, qblocks, vec, (int64_t)blockIdx.x);
    } else {                                               /* a few blocks walk the tiles */
        for (int64_t blk = blockIdx.x; blk < nblk; blk += gridDim.x) {
            fa__cu_bwd_dq_block<T, CFG, FIN>(d, q, k, v, dO, delta, kbad, dq, qblocks, vec, blk);
            __syncthreads();                               /* this tile's shared memory is consumed */
        }
    }
}

/* ---- 8e2 (continued). The tensor-core backward (fp16/bf16, D = Dv = 64 or 128, sm_80+) ----------
   The FlashAttention-2 arrangement on 8d's steps. fa__cu_bwd_prep first (as the FFMA path). Then
   fa__tcb_dkv, one block per (key block of 16 MT NW keys, batch, kv head), K and V of the block in
   shared memory, walking the query heads of the GQA group and, for each, the query rows that see
   the block (fa__key_rows) in tiles of BK rows, whose Q, dO, lse and delta stream in by cp.async
   one tile ahead. Each warp owns 16 MT keys and computes, all in registers with mma.sync:
   S^T = K Q^T (fa__tc_qk with K as the row tile), P^T = 2^(s log2 e - lse log2 e) (fa__tcb_p:
   8b's modifier rule, the mask by fa__cu_row_keys where the tile is not fa__keys_full), dV += P^T dO
   (fa__tc_pv: the accumulator layout of S^T is the A layout of P^T, no transpose needed),
   dP^T = V dO^T (fa__tc_qk), dS^T = P^T (dP^T - delta) g, dK += dS^T Q (fa__tc_pv). dq: dS^T goes
   through shared memory (16-bit, swizzled) and each warp forms a 16 x D/NS slice of dS K with
   ldmatrix .trans, added into the fp32 buffer by atomicAdd; fa__cu_bwd_out converts it (times
   the scale). With p->deterministic the dK/dV kernel skips dq and fa__tcb_dq, one block per (query
   block, batch, head) in the forward's arrangement, walks its key tiles in order with dq = dS K in
   registers (S, dP, dS recomputed: 7 products instead of 5), so every gradient's sum order is fixed. */

/* What the tensor-core backward's kernels receive. */
struct fa__tcb_args {
    const void *q, *k, *v, *d_o;
    const float *delta;
    float *dqacc;              /* fp32 dq [B][Hq][Sq][D] (atomic mode), else NULL */
    const unsigned *flag;      /* fa__cu_bwd_prep's: set, the FFMA fallback runs instead (8e2) */
    unsigned *turns;           /* fp32's deterministic dq in key-block turns (fa__t32_dkv): the ticket, then the turns */
    void *dq, *dk, *dv;
    int qblocks;               /* the deterministic dq kernel's query blocks per (batch, head) */
    fa__dims d;
};

/* Shared memory: the dK/dV kernel's K and V blocks, two stages of Q and dO tiles, dS^T, two stages
   of lse and delta; the dq kernel's Q and dO tiles, two stages of K and V tiles, lse and delta. */
template <class C> struct fa__tcb_kgeom {
    enum { BKV = fa__tc_geom<C>::BQ, BQ = C::BK, D = C::D };
    enum { LSE = (2 * BKV * D + 4 * BQ * D + BKV * BQ) * 2, SMEM = LSE + 4 * BQ * 4 };
};
template <class C> struct fa__tcb_qgeom {
    enum { BQ = fa__tc_geom<C>::BQ, BK = C::BK, D = C::D };
    enum { LSE = (2 * BQ * D + 4 * BK * D) * 2, SMEM = LSE + 2 * BQ * 4 };
};

/* R rows of D floats from global (row stride st) into a tile of rows LD = D + 4 floats apart (the
   fp32 backward's, fa__t32_geom: 16-byte rows for ldmatrix, and the padding that keeps its 32-bit
   loads free of bank conflicts); rows >= n zero-filled. */
template <int D, int R, int NT>
static __device__ __forceinline__ void fa__t32_load(unsigned dst, const float *src, int64_t st, int n, int tid)
{
    enum { CH = D / 4, IT = R * CH / NT };
    static_assert(R * CH % NT == 0, "tile load must split evenly over the threads");
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int idx = tid + it * NT, r = idx / CH, c = idx % CH;
        const bool ok = r < n;
        fa__cu_cp16(dst + (unsigned)(r * (D + 4) + 4 * c) * 4u, ok ? (const void *)(src + r * st + 4 * c) : (const void *)src,
                    ok ? 16 : 0);
    }
}

/* What the tensor-core backward's shared steps do per storage type T: tile, a tile of R rows of Q
   or dO into shared memory (the 16-bit kernels' swizzled layout, fa__tc_load; fp32's padded rows,
   fa__t32_load); put, two values of the same row of an m16 x n8 accumulator (row 8 hf + g of m16
   tile mt, columns 8 n + 2t + e, e = 0, 1; g = lane / 4, t = lane % 4) into the A fragments pa of
   the next product, whose k index is the accumulator's column: 16-bit, packed in pairs, k16 step
   n / 2; fp32 (m16n8k8 .tf32), k8 step n as pa[mt][n][hf + 2e], floats: the step's k permuted so
   that no value moves between lanes (A position t is column 2t, position t + 4 column 2t + 1; the
   B operand of that product takes rows 2t and 2t + 1 of its k8 slice, fa__t32_pv); st2, two
   adjacent outputs. */
template <typename T> struct fa__tcb_op {
    template <int D, int R, int NT>
    static __device__ __forceinline__ void tile(unsigned dst, const T *src, int64_t st, int n, int tid)
    {
        fa__tc_load<D, R, NT>(dst, src, st, n, tid);
    }
    template <int MT, int KB>
    static __device__ __forceinline__ void put(unsigned (&pa)[MT][KB][4], int mt, int n, int hf, float v0, float v1)
    {
        pa[mt][n >> 1][(n & 1) * 2 + hf] = fa__tc_type<T>::pack(v0, v1);
    }
    static __device__ __forceinline__ void st2(T *p, float v0, float v1) { *(unsigned *)p = fa__tc_type<T>::pack(v0, v1); }
};
template <> struct fa__tcb_op<float> {
    template <int D, int R, int NT>
    static __device__ __forceinline__ void tile(unsigned dst, const float *src, int64_t st, int n, int tid)
    {
        fa__t32_load<D, R, NT>(dst, src, st, n, tid);
    }
    template <int MT, int NN>
    static __device__ __forceinline__ void put(float (&pa)[MT][NN][4], int mt, int n, int hf, float v0, float v1)
    {
        pa[mt][n][hf] = v0;
        pa[mt][n][hf + 2] = v1;
    }
    static __device__ __forceinline__ void st2(float *p, float v0, float v1) { *(float2 *)p = make_float2(v0, v1); }
};

/* Tile t of a dK/dV block's walk over the query rows that see it (the tensor-core and Hopper
   backwards'): kv head g's query heads in turn, each in nqb tiles of BQ rows from row r0; *h gets
   the tile's query head, *i0 its first row. */
template <int BQ>
static __device__ __forceinline__ void fa__tcb_tile(const fa__dims &d, int g, int r0, int nqb, int t, int *h, int *i0)
{
    const int hh = t / nqb;
    *h = g * d.group + hh;
    *i0 = r0 + (t - hh * nqb) * BQ;
}

/* The lse in log2 units (+INFINITY for a row with no visible key and past Sq, so that its P is 0)
   and delta (0 past Sq) of query rows [i0, i0 + R) of (b, h) into sL, sDl, by NT threads. */
template <int R, int NT>
static __device__ __forceinline__ void fa__tcb_load_ld(const fa__tcb_args &a, float *sL, float *sDl, int b, int h, int i0,
                                                       int tid)
{
    const fa__dims &d = a.d;
    const int nq = min(R, d.Sq - i0);
    const int64_t bh = (int64_t)b * d.Hq + h;
    for (int x = tid; x < R; x += NT) {
        const float l = x < nq ? d.lse[bh * d.Sq + i0 + x] : -INFINITY;
        sL[x] = l == -INFINITY ? INFINITY : l * FA__CU_LOG2E;
        sDl[x] = x < nq ? a.delta[bh * d.Sq + i0 + x] : 0.0f;
    }
}

/* The Q and dO tiles of query rows [i0, i0 + R) of (b, h) (rows past Sq zero-filled) into sQ, sO
   (one cp.async group; T's layout, fa__tcb_op), and their lse and delta (fa__tcb_load_ld). */
template <int D, int R, int NT, typename T>
static __device__ __forceinline__ void fa__tcb_load_q(const fa__tcb_args &a, unsigned sQ, unsigned sO, float *sL,
                                                      float *sDl, int b, int h, int i0, int tid)
{
    const fa__dims &d = a.d;
    const int nq = min(R, d.Sq - i0);
    fa__tcb_op<T>::template tile<D, R, NT>(sQ, (const T *)a.q + b * d.qs[0] + h * d.qs[1] + (int64_t)i0 * d.qs[2], d.qs[2],
                                           nq, tid);
    fa__tcb_op<T>::template tile<D, R, NT>(sO, (const T *)a.d_o + b * d.os[0] + h * d.os[1] + (int64_t)i0 * d.os[2],
                                           d.os[2], nq, tid);
    fa__cu_commit();
    fa__tcb_load_ld<R, NT>(a, sL, sDl, b, h, i0, tid);
}

/* One element of the backward: P = 2^(x' - lse2) for the raw dot product x of query row i and key
   j, where x' is x times scale log2 e (f), or with MODS 8b's rule in the log2 domain (md from
   fa__cu_mods_of(d, b, h, scale, log2 e, ...), exact tanhf); 0 where vis is false (the mask). Returns
   P times g, softcap's derivative factor 1 - t^2 (1 without softcap): what dS needs; *p gets P. */
template <bool MODS>
static __device__ __forceinline__ float fa__tcb_p(const fa__dims &d, const fa__cu_mods &md, bool sc, bool al, bool bi,
                                                  float x, float f, float lse2, int i, int j, bool vis, float *p)
{
    float t = 0.0f;
    if (MODS)
        x = fa__cu_modify<fa__cu_tanh, true>(md, x, sc, al, bi && i < d.Sq && j < d.Sk,
                                             (float)((int64_t)i + d.Sk - d.Sq - j), i, j, &t);
    else
        x *= f;
    *p = vis ? fa__tc_ex2(x - lse2) : 0.0f;
    return *p * (1.0f - t * t);
}

/* dS = P g (dP - delta), 0 where P g is 0 (section 7b's rule: a hidden key's dP never enters) */
static __device__ __forceinline__ float fa__tcb_ds(float pg, float dp, float dl) { return pg == 0.0f ? 0.0f : pg * (dp - dl); }

/* The dS^T staging tile's swizzle: the physical 16-byte chunk of chunk c of key row r, so that the
   8 rows an ldmatrix reads (r & ~7 .. + 7, one logical chunk) fall in 8 distinct bank groups: BQ =
   64 (8 chunks, 128 bytes a row): c ^ (r & 7); BQ = 32 (4 chunks, two rows a 128-byte line):
   c ^ ((r >> 1) & 3). */
template <int BQ> static __device__ __forceinline__ int fa__tcb_swz(int r, int c)
{
    return BQ == 64 ? c ^ (r & 7) : c ^ ((r >> 1) & 3);
}

/* The element steps of a warp's S^T fragments (MT m16 tiles of keys kr0 + 16 mt + 8 hf (+ lane / 4
   in kr0), NN n8 tiles of query columns i0 + cq + 8 n + e), shared by the dK/dV kernels (fa__tcb_dkv,
   and 8e3's fa__wgb_dkv, whose m64 wgmma accumulator is this layout warp by warp). fa__tcb_pt: s (raw
   dot products) becomes P g and pa the packed P^T A fragments (fa__tcb_p; the mask by
   fa__cu_row_keys unless the block is full for the tile); tL: the tile's lse in log2 units. FULL:
   full known true at compile time (8e3 calls it so for full blocks: no key test is compiled). */
template <typename T, int MT, int NN, bool MODS, bool FULL = false, class PA>
static __device__ __forceinline__ void fa__tcb_pt(float (&s)[MT][NN][4], PA &pa, const fa__dims &d,
                                                  const fa__cu_mods &md, bool sc, bool al, bool bi, float f,
                                                  const float *tL, int i0, int cq, int kr0, bool full)
{
#pragma unroll
    for (int n = 0; n < NN; n++) {
        int lo[2] = { 0, 0 }, hi[2] = { d.Sk, d.Sk };
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (!FULL && !full) fa__cu_row_keys(d, i0 + cq + 8 * n + e, &lo[e], &hi[e]);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int j = kr0 + 16 * mt + 8 * hf;
                float p[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int c = cq + 8 * n + e;
                    s[mt][n][2 * hf + e] = fa__tcb_p<MODS>(d, md, sc, al, bi, s[mt][n][2 * hf + e], f, tL[c], i0 + c, j,
                                                           FULL || (j >= lo[e] && j < hi[e]), &p[e]);
                }
                fa__tcb_op<T>::put(pa, mt, n, hf, p[0], p[1]);
            }
    }
}

/* dS^T = P g (dP^T - delta) of the same fragments (s: fa__tcb_pt's P g, dp: dP^T), packed into pa;
   tD: the tile's delta */
template <typename T, int MT, int NN, class PA>
static __device__ __forceinline__ void fa__tcb_dst(const float (&s)[MT][NN][4], const float (&dp)[MT][NN][4], PA &pa,
                                                   const float *tD, int cq)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const float d0 = fa__tcb_ds(s[mt][n][2 * hf], dp[mt][n][2 * hf], tD[cq + 8 * n]);
                const float d1 = fa__tcb_ds(s[mt][n][2 * hf + 1], dp[mt][n][2 * hf + 1], tD[cq + 8 * n + 1]);
                fa__tcb_op<T>::put(pa, mt, n, hf, d0, d1);
            }
}

/* fa__tcb_dkv's dq steps: dS^T (pa) into the staging tile sS ([key][query], BQ / 8 chunks of 8 a
   key, fa__tcb_swz; kw: the warp's first key row in the block), and */
template <int MT, int NN, int BQ>
static __device__ __forceinline__ void fa__tcb_stage(unsigned sS, const unsigned (&pa)[MT][NN / 2][4], int kw, int lane)
{
    const int cq = 2 * (lane & 3);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int rr = kw + 16 * mt + (lane >> 2) + 8 * hf;
                const unsigned addr = sS + (unsigned)(rr * BQ + (fa__tcb_swz<BQ>(rr, n) << 3) + cq) * 2u;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pa[mt][n >> 1][(n & 1) * 2 + hf]) : "memory");
            }
}

/* the atomic accumulation of row hf of a thread's N n8 fragments of an m16 accumulator (columns
   8 n + cq, + 1; dst at column cq) into the fp32 dq buffer */
template <int N>
static __device__ __forceinline__ void fa__tcb_dq_add(float *dst, const float (&acc)[N][4], int hf)
{
#pragma unroll
    for (int n = 0; n < N; n++) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900   /* one 8-byte reduction (sm_90's float2 atomicAdd) */
        atomicAdd((float2 *)(dst + 8 * n), make_float2(acc[n][2 * hf], acc[n][2 * hf + 1]));
#else
        atomicAdd(dst + 8 * n, acc[n][2 * hf]);
        atomicAdd(dst + 8 * n + 1, acc[n][2 * hf + 1]);
#endif
    }
}

/* The element steps of a dq kernel's S and dP fragments (rows = queries i0 + lr + 16 mt + 8 hf,
   lr with lane / 4 in it; columns = keys k0 + cq + 8 n + e): dS = P g (dP - delta) (fa__tcb_p,
   fa__tcb_ds; the mask by fa__cu_row_keys unless the tile is full for the block) packed into pa,
   the A fragments of dq += dS K; sL, sDl: the block's lse (log2 units) and delta, indexed from i0.
   FULL: as fa__tcb_pt's. */
template <typename T, int MT, int NN, bool MODS, bool FULL = false, class PA>
static __device__ __forceinline__ void fa__tcb_ds_rows(const float (&s)[MT][NN][4], const float (&dp)[MT][NN][4],
                                                       PA &pa, const fa__dims &d,
                                                       const fa__cu_mods &md, bool sc, bool al, bool bi, float f,
                                                       const float *sL, const float *sDl, int i0, int lr, int k0,
                                                       int cq, bool full)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int i = i0 + lr + 16 * mt + 8 * hf;
            const float lse2 = sL[lr + 16 * mt + 8 * hf], dl = sDl[lr + 16 * mt + 8 * hf];
            int lo = 0, hi = d.Sk;
            if (!FULL && !full) fa__cu_row_keys(d, i, &lo, &hi);
#pragma unroll
            for (int n = 0; n < NN; n++) {
                float v2[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = k0 + cq + 8 * n + e;
                    float p;
                    const float pg = fa__tcb_p<MODS>(d, md, sc, al, bi, s[mt][n][2 * hf + e], f, lse2, i, j,
                                                     FULL || (j >= lo && j < hi), &p);
                    v2[e] = fa__tcb_ds(pg, dp[mt][n][2 * hf + e], dl);
                }
                fa__tcb_op<T>::put(pa, mt, n, hf, v2[0], v2[1]);
            }
        }
}

/* The end of a dq kernel: dq = scale dq of a thread's rows ir0 + 16 mt + 8 hf (ir0 with lane / 4 in
   it), columns 8 n + cq; rows past Sq not written */
template <typename T, int MT, int CH>
static __device__ __forceinline__ void fa__tcb_write_dq(const fa__tcb_args &a, const float (&acc)[MT][CH][4], int b, int h,
                                                        int ir0, int cq)
{
    const fa__dims &d = a.d;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int i = ir0 + 16 * mt + 8 * hf;
            if (i >= d.Sq) continue;
            T *pq = (T *)a.dq + b * d.qs[0] + h * d.qs[1] + (int64_t)i * d.qs[2] + cq;
#pragma unroll
            for (int n = 0; n < CH; n++)
                fa__tcb_op<T>::st2(pq + 8 * n, acc[mt][n][2 * hf] * d.scale, acc[mt][n][2 * hf + 1] * d.scale);
        }
}

/* The end of a dK/dV kernel: dk = scale dK, dv = dV of a thread's keys kr0 + 16 mt + 8 hf, columns
   8 n + cq (0 for a key no row sees; keys past Sk not written) */
template <typename T, int MT, int CH>
static __device__ __forceinline__ void fa__tcb_write_kv(const fa__tcb_args &a, const float (&dk)[MT][CH][4],
                                                        const float (&dv)[MT][CH][4], int b, int g, int kr0, int cq)
{
    const fa__dims &d = a.d;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int j = kr0 + 16 * mt + 8 * hf;
            if (j >= d.Sk) continue;
            T *pk = (T *)a.dk + b * d.ks[0] + g * d.ks[1] + (int64_t)j * d.ks[2] + cq;
            T *pv = (T *)a.dv + b * d.vs[0] + g * d.vs[1] + (int64_t)j * d.vs[2] + cq;
#pragma unroll
            for (int n = 0; n < CH; n++) {
                fa__tcb_op<T>::st2(pk + 8 * n, dk[mt][n][2 * hf] * d.scale, dk[mt][n][2 * hf + 1] * d.scale);
                fa__tcb_op<T>::st2(pv + 8 * n, dv[mt][n][2 * hf], dv[mt][n][2 * hf + 1]);
            }
        }
}

/* The dK/dV kernel (see above). C: an fa__tcb_kv_* trait; MODS: softcap, ALiBi or bias present;
   DQ: dq by atomics into a.dqacc (else the deterministic dq kernel follows). */
template <typename T, class C, bool MODS, bool DQ>
__global__ void __launch_bounds__(C::NW * 32, C::MINB) fa__tcb_dkv(const fa__tcb_args a)
{
    typedef fa__tc_geom<C> G;
    typedef fa__tcb_kgeom<C> K;
    typedef fa__tc_type<T> X;
    enum { BKV = G::BQ, BQ = G::BK, D = G::D, NN = G::NN, KB = G::KB, CH = G::CH, NT = G::NT };
    enum { MT = G::MT, NS = G::NW * 16 / BQ, NCW = CH / NS };   /* dq: BQ/16 row groups x NS column slices of NCW n8 tiles */
    static_assert((BQ == 64 || BQ == 32) && (G::NW * 16) % BQ == 0 && NCW % 2 == 0, "tc backward tile");
    extern __shared__ __align__(128) unsigned char fa__tc_smem[];
    const fa__dims &d = a.d;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int nbg = d.B * d.Hkv, kb = (int)blockIdx.x / nbg, bg = (int)blockIdx.x - kb * nbg;
    const int b = bg / d.Hkv, g = bg - b * d.Hkv, k0 = kb * BKV, nk = min((int)BKV, d.Sk - k0);
    const unsigned sK = fa__cu_sa(fa__tc_smem), sV = sK + BKV * D * 2, sQ = sV + BKV * D * 2, sO = sQ + 2 * BQ * D * 2;
    const unsigned sS = sO + 2 * BQ * D * 2;
    float *sL = (float *)(fa__tc_smem + K::LSE), *sDl = sL + 2 * BQ;
    const float f = d.scale * FA__CU_LOG2E;
    const bool sc = d.softcap > 0.0f, al = d.alibi != 0, bi = d.bias != 0;
    const int kr0 = k0 + warp * 16 * MT + (lane >> 2), cq = 2 * (lane & 3);   /* this thread's keys kr0 + 16 mt + 8 hf */
    int64_t r0_, r1_;
    if (*a.flag) return;   /* a non-finite q, d_o or k: the FFMA fallback computes this call */
    fa__key_rows(&d, k0, k0 + nk, &r0_, &r1_);
    const int r0 = (int)r0_, nqb = r1_ > r0_ ? (int)((r1_ - r0_ + BQ - 1) / BQ) : 0, tiles = nqb * d.group;

    float dk[MT][CH][4], dv[MT][CH][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < CH; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[mt][n][e] = dv[mt][n][e] = 0.0f;
    unsigned qf[MT][G::KD][4];   /* unused (QREG 0) */
    /* ldmatrix bases: A rows of K (V at a constant offset), B rows of Q (dO: + OQO), B^T rows of dO
       (Q: - OQO; the K block, dq's B^T: - OKO), so that few registers hold them */
    enum { OQO = 2 * BQ * D * 2, OKO = (2 * BKV * D + 2 * BQ * D) * 2 };
    unsigned aK[4], bQ[4], tO[4], aV[4];
    fa__tc_bases<C>(sK, sQ, sO, warp, lane, aK, bQ, tO);
#pragma unroll
    for (int j = 0; j < 4; j++) aV[j] = aK[j] + BKV * D * 2;
    const int rg = warp % (BQ / 16), cs = warp / (BQ / 16);   /* dq: this warp's row group and column slice */
    unsigned kq[NCW / 2];                                     /* dq: its B^T (K) bases, n8 tiles cs NCW + 2u */
#pragma unroll
    for (int u = 0; u < NCW / 2; u++) {
        const int n = cs * NCW + 2 * u, j = (n & 7) >> 1;
        kq[u] = (j == 0 ? tO[0] : j == 1 ? tO[1] : j == 2 ? tO[2] : tO[3]) - OKO + (unsigned)(64 * (n >> 3)) * 2u;
    }

    if (tiles > 0) {   /* K, V and the first tile: one cp.async group */
        fa__tc_load<D, BKV, NT>(sK, (const T *)a.k + b * d.ks[0] + g * d.ks[1] + (int64_t)k0 * d.ks[2], d.ks[2], nk, tid);
        fa__tc_load<D, BKV, NT>(sV, (const T *)a.v + b * d.vs[0] + g * d.vs[1] + (int64_t)k0 * d.vs[2], d.vs[2], nk, tid);
        fa__tcb_load_q<D, BQ, NT, T>(a, sQ, sO, sL, sDl, b, g * d.group, r0, tid);
    }

    for (int t = 0; t < tiles; t++) {
        int h, i0;
        fa__tcb_tile<BQ>(d, g, r0, nqb, t, &h, &i0);
        const int nq = min((int)BQ, d.Sq - i0);
        const unsigned st = (unsigned)(t & 1) * BQ * D * 2;
        const float *tL = sL + (t & 1) * BQ, *tD = sDl + (t & 1) * BQ;
        fa__cu_wait<0>();
        __syncthreads();   /* tile t landed; every warp is done with tile t-1 (its stage and sS) */
        if (t + 1 < tiles) {
            int h2, i2;
            fa__tcb_tile<BQ>(d, g, r0, nqb, t + 1, &h2, &i2);
            fa__tcb_load_q<D, BQ, NT, T>(a, sQ + BQ * D * 2 - st, sO + BQ * D * 2 - st, sL + ((t + 1) & 1) * BQ,
                                         sDl + ((t + 1) & 1) * BQ, b, h2, i2, tid);
        }
        const fa__keys kr = fa__cu_tile_keys(d, i0, nq);
        const bool full = fa__keys_full(&kr, k0, k0 + BKV) != 0;
        const fa__cu_mods md = fa__cu_mods_of(d, b, h, d.scale, FA__CU_LOG2E, sc, al, false);
        float s[MT][NN][4], dp[MT][NN][4];
        unsigned pa[MT][KB][4];

        fa__tc_qk<T, C>(s, qf, aK, bQ, st);   /* S^T: this warp's keys x the tile's query rows */
        fa__tcb_pt<T, MT, NN, MODS>(s, pa, d, md, sc, al, bi, f, tL, i0, cq, kr0, full);
        fa__tc_pv<T, C>(dv, pa, tO, st);            /* dV += P^T dO */
        fa__tc_qk<T, C>(dp, qf, aV, bQ, st + OQO);  /* dP^T = V dO^T */
        fa__tcb_dst<T, MT, NN>(s, dp, pa, tD, cq);
        fa__tc_pv<T, C>(dk, pa, tO, st - OQO);      /* dK += dS^T Q */
        if (DQ) {
            fa__tcb_stage<MT, NN, BQ>(sS, pa, warp * 16 * MT, lane);   /* dS^T into sS */
            __syncthreads();
            /* dq rows 16 rg .. +15 of the tile, n8 tiles cs NCW .. +NCW-1: dS (A, .trans of dS^T) K (B, .trans) */
            float acc[NCW][4];
#pragma unroll
            for (int n = 0; n < NCW; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < BKV / 16; kk++) {
                unsigned af[4];
                const int krow = 16 * kk + (lane & 7) + (lane >> 4) * 8, mc = 2 * rg + ((lane >> 3) & 1);
                fa__tc_ldsm_t(sS + (unsigned)(krow * BQ + (fa__tcb_swz<BQ>(krow, mc) << 3)) * 2u, af[0], af[1], af[2], af[3]);
#pragma unroll
                for (int nl = 0; nl < NCW; nl += 2) {
                    unsigned b0, b1, b2, b3;
                    fa__tc_ldsm_t(kq[nl >> 1] + (unsigned)(kk * 16 * D) * 2u, b0, b1, b2, b3);
                    X::mma(acc[nl], af, b0, b1);
                    X::mma(acc[nl + 1], af, b2, b3);
                }
            }
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int i = i0 + 16 * rg + (lane >> 2) + 8 * hf;
                if (i >= d.Sq) continue;
                fa__tcb_dq_add<NCW>(a.dqacc + (((int64_t)b * d.Hq + h) * d.Sq + i) * D + cq + 8 * cs * NCW, acc, hf);
            }
        }
    }
    fa__tcb_write_kv<T, MT, CH>(a, dk, dv, b, g, kr0, cq);
}

/* The deterministic dq kernel: one block per (query block, batch, head), the last query blocks
   (the longest under causal) first; its BK-aligned key tiles walked in order, K and V streamed by
   cp.async one tile ahead; S = Q K^T and dP = dO V^T (fa__tc_qk), dS packed straight into A
   fragments, dq += dS K (fa__tc_pv, K as the B^T tile), written once as scale dq (0 for a row
   that sees no key). */
template <typename T, class C, bool MODS>
__global__ void __launch_bounds__(C::NW * 32, C::MINB) fa__tcb_dq(const fa__tcb_args a)
{
    typedef fa__tc_geom<C> G;
    typedef fa__tcb_qgeom<C> Q;
    enum { BQ = G::BQ, BK = G::BK, D = G::D, NN = G::NN, KB = G::KB, CH = G::CH, NT = G::NT, MT = G::MT };
    extern __shared__ __align__(128) unsigned char fa__tc_smem[];
    const fa__dims &d = a.d;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int nbh = d.B * d.Hq, qb = a.qblocks - 1 - (int)blockIdx.x / nbh, bh = (int)blockIdx.x % nbh;
    const int b = bh / d.Hq, h = bh - b * d.Hq, g = h / d.group, i0 = qb * BQ, nq = min((int)BQ, d.Sq - i0);
    const unsigned sQ = fa__cu_sa(fa__tc_smem), sO = sQ + BQ * D * 2, sK = sO + BQ * D * 2, sV = sK + 2 * BK * D * 2;
    float *sL = (float *)(fa__tc_smem + Q::LSE), *sDl = sL + BQ;
    const T *gk = (const T *)a.k + b * d.ks[0] + g * d.ks[1], *gv = (const T *)a.v + b * d.vs[0] + g * d.vs[1];
    const float f = d.scale * FA__CU_LOG2E;
    const bool sc = d.softcap > 0.0f, al = d.alibi != 0, bi = d.bias != 0;
    const fa__cu_mods md = fa__cu_mods_of(d, b, h, d.scale, FA__CU_LOG2E, sc, al, false);
    const fa__keys kr = fa__cu_tile_keys(d, i0, nq);
    const int t0 = (int)kr.lo / BK, t1 = kr.hi > kr.lo ? ((int)kr.hi + BK - 1) / BK : t0;
    const int lr = warp * 16 * MT + (lane >> 2), cq = 2 * (lane & 3);   /* this thread's rows i0 + lr + 16 mt + 8 hf */
    if (*a.flag) return;   /* a non-finite q, d_o or k: the FFMA fallback computes this call */

    float acc[MT][CH][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < CH; n++) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
    unsigned qf[MT][G::KD][4];   /* unused (QREG 0) */
    enum { OKV = 2 * BK * D * 2 };   /* V's tiles lie OKV bytes after K's; dO's rows BQ D 2 after Q's */
    unsigned aQ[4], bK[4], tK[4], aO[4];
    fa__tc_bases<C>(sQ, sK, sK, warp, lane, aQ, bK, tK);
#pragma unroll
    for (int j = 0; j < 4; j++) aO[j] = aQ[j] + BQ * D * 2;
    if (t0 < t1) {
        fa__tcb_load_q<D, BQ, NT, T>(a, sQ, sO, sL, sDl, b, h, i0, tid);
        fa__tc_load_kv<C>(sK, sV, 0u, gk, gv, d, t0 * BK, tid);
    }
    for (int t = t0; t < t1; t++) {
        const int k0 = t * BK;
        const unsigned st = (unsigned)((t - t0) & 1) * BK * D * 2;
        fa__cu_wait<0>();
        __syncthreads();   /* tile t landed; every warp is done with tile t-1's stage */
        if (t + 1 < t1) fa__tc_load_kv<C>(sK, sV, BK * D * 2 - st, gk, gv, d, k0 + BK, tid);
        const bool full = fa__keys_full(&kr, k0, k0 + BK) != 0;
        float s[MT][NN][4], dp[MT][NN][4];
        unsigned pa[MT][KB][4];
        fa__tc_qk<T, C>(s, qf, aQ, bK, st);
        fa__tc_qk<T, C>(dp, qf, aO, bK, st + OKV);
        fa__tcb_ds_rows<T, MT, NN, MODS>(s, dp, pa, d, md, sc, al, bi, f, sL, sDl, i0, lr, k0, cq, full);
        fa__tc_pv<T, C>(acc, pa, tK, st);   /* dq += dS K */
    }
    fa__tcb_write_dq<T, MT, CH>(a, acc, b, h, i0 + lr, cq);
}

/* ---- 8e2 (continued). fp32 on the tensor cores: 3xTF32 (D = Dv = 64 or 128, sm_80+) -------------
   fa__tcb_dkv's arrangement and element steps (fa__tcb_pt, fa__tcb_dst, fa__tcb_load_q, the
   writes) for fp32 storage, dq by atomics and, with p->deterministic, by the same atomics in the
   FFMA backward's key-block turns (fa__cu_turn_wait: 5 products, not a dq kernel's 7; a dq kernel
   on these steps measured 1.18-1.35x the default's time, bench/RESULTS.md), every product on
   mma.sync m16n8k8 .tf32 in the 3xTF32 form PyTorch's efficient backward uses (CUTLASS's
   OpMultiplyAddFastF32): each operand x split into big = x rounded to TF32 (to nearest, as
   cvt.rna) and small = x - big, which the tensor core reads as TF32 (fa__t32_split, 8a's
   FA__CU_T32_SPLIT), a b ~= a_small b_big + a_big b_small + a_big b_big, fp32 accumulation. The
   dropped a_small b_small and small's truncation leave about 2^-21 of each term: fp32's level
   (API.md's fp32 backward tolerance; bench/RESULTS.md, "fp32 on the tensor cores (3xTF32)"). Why:
   the FFMA backward reaches about half the FMA pipe's peak, and the tensor pipe's TF32 rate is
   several times that pipe's: three TF32 products for each fp32 one run 1.5-1.9x faster than the
   FFMA kernel (H100; 1.35-1.67x PyTorch's efficient backward, which does the same).
   FLASHATTN_CUDA_FP32_FFMA keeps fp32 on the FFMA backward.
   Shared-memory tiles are rows of D + 4 floats (fa__t32_load): 16-byte rows that ldmatrix (.b16,
   not transposed) reads as 8 x 4-word matrices, giving lane l the word (row l / 4, word l % 4): the
   A fragment of a row-major [m][k] tile and the B fragment of an [n][k] tile (fa__t32_abt: S^T =
   K Q^T and dP^T = V dO^T). A [k][n] B operand (dO, Q, K in dV += P^T
   dO, dK += dS^T Q, dq += dS K: .trans cannot transpose 32-bit words) takes two 32-bit loads a
   fragment, rows 2t and 2t + 1 (fa__t32_pv; rows D + 4 apart put its 32 lanes on 32 banks), the A
   fragments of those products being the previous accumulators in registers (fa__tcb_op<float>'s
   permuted k). With dq by atomics, dS^T goes through shared memory as dS ([query][key], rows
   BKV + 4 apart, each 8 keys in the registers' k order) and each warp forms a 16 x D / NS slice of
   dS K from it by ldmatrix. One warp a 16-key m16 tile (MT = 1; 8a's fa__t32_* traits). */

/* The fp32 backward's sizes: LD the tile rows' floats; shared memory K, V [BKV][LD], two stages of
   Q, dO [BQ][LD], dS [BQ][LDS], two stages of lse and delta. */
template <class C> struct fa__t32_geom {
    enum { D = C::D, LD = D + 4, BKV = 16 * C::KW, BQ = C::BQ, LDS = BKV + 4, KNT = 32 * C::KW };
    enum { KLSE = (2 * BKV * LD + 4 * BQ * LD + BQ * LDS) * 4, KSMEM = KLSE + 4 * BQ * 4 };
};

/* An operand fragment split for 3xTF32: b the big halves, s the small (A: 4 words, B: the first 2). */
struct fa__t32_frag {
    unsigned b[4], s[4];
};

/* x = big + small for 3xTF32 in FA__CU_T32_SPLIT's way (8a). The tensor core reads the top 19 bits
   of a .tf32 operand (sign, exponent, 10 mantissa bits), so small's low bits need no clearing. Way
   3 rounds big as cvt.rna does (to nearest, ties away) by adding half of TF32's last place before
   the mask; a NaN may round to -0 there, but small (x - big) is then the NaN, so that it reaches
   the products as before. */
static __device__ __forceinline__ void fa__t32_split(float x, unsigned &big, unsigned &small)
{
    if (FA__CU_T32_SPLIT == 3)
        big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    else if (FA__CU_T32_SPLIT == 2)
        big = __float_as_uint(x) & 0xffffe000u;
    else
        asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(x));
    if (FA__CU_T32_SPLIT == 0)
        asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(x - __uint_as_float(big)));
    else
        small = __float_as_uint(x - __uint_as_float(big));
}

static __device__ __forceinline__ void fa__t32_mma1(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c += a b in 3xTF32, the small products first */
static __device__ __forceinline__ void fa__t32_mma(float (&c)[4], const fa__t32_frag &a, const fa__t32_frag &b)
{
    fa__t32_mma1(c, a.s, b.b[0], b.b[1]);
    fa__t32_mma1(c, a.b, b.s[0], b.s[1]);
    fa__t32_mma1(c, a.b, b.b[0], b.b[1]);
}

/* This lane's ldmatrix offsets (floats) in tiles of rows ld floats apart: A, the m16 x k8 A fragment
   of a row-major [m][k] tile (matrices rows 0-7 / 8-15 x words 0-3, then words 4-7); B, the B
   fragments of two n8 tiles of an [n][k] tile (rows 0-7 words 0-3 / 4-7, then rows 8-15). */
static __device__ __forceinline__ int fa__t32_la(int lane, int ld)
{
    return ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 4;
}
static __device__ __forceinline__ int fa__t32_lb(int lane, int ld)
{
    return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 4;
}

static __device__ __forceinline__ void fa__t32_ldsm(unsigned addr, fa__t32_frag &f)
{
    unsigned w[4];
    fa__tc_ldsm(addr, w[0], w[1], w[2], w[3]);
#pragma unroll
    for (int j = 0; j < 4; j++) fa__t32_split(__uint_as_float(w[j]), f.b[j], f.s[j]);
}

/* acc = A B^T over k = D, NN n8 tiles: A the m16 tile whose lane address (fa__t32_la) is la, B the
   NN * 8 rows from lb (fa__t32_lb), both in tiles of rows D + 4 floats (byte addresses) */
template <int NN, int D>
static __device__ __forceinline__ void fa__t32_abt(float (&acc)[NN][4], unsigned la, unsigned lb)
{
    static_assert(NN % 2 == 0, "two n8 tiles an ldmatrix");
#pragma unroll
    for (int n = 0; n < NN; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 8; kk++) {
        fa__t32_frag af, bf;
        fa__t32_ldsm(la + (unsigned)kk * 32u, af);
#pragma unroll
        for (int n = 0; n < NN; n += 2) {
            fa__t32_ldsm(lb + (unsigned)(n * 8 * (D + 4) + kk * 8) * 4u, bf);
            fa__t32_frag b1;
            b1.b[0] = bf.b[2]; b1.b[1] = bf.b[3]; b1.s[0] = bf.s[2]; b1.s[1] = bf.s[3];
            fa__t32_mma(acc[n], af, bf);
            fa__t32_mma(acc[n + 1], af, b1);
        }
    }
}

/* acc (CH n8 tiles) += a B for one k8 step: a split, B's rows 2t and 2t + 1 of the step (k permuted
   as fa__tcb_op<float>::put's) read from pb, this lane's word (row 2t, column lane / 4) of the
   first n8 tile, rows LD floats apart */
template <int CH, int LD>
static __device__ __forceinline__ void fa__t32_pv_step(float (&acc)[CH][4], const fa__t32_frag &a, const float *pb)
{
#pragma unroll
    for (int n = 0; n < CH; n++) {
        fa__t32_frag bf;
        fa__t32_split(pb[8 * n], bf.b[0], bf.s[0]);
        fa__t32_split(pb[LD + 8 * n], bf.b[1], bf.s[1]);
        fa__t32_mma(acc[n], a, bf);
    }
}

/* acc += P B over KN k8 steps: pa P's A fragments (fa__tcb_op<float>::put), B the [k][n] tile whose
   rows start at pb (this lane's word of row 2t, column lane / 4) */
template <int KN, int CH, int LD>
static __device__ __forceinline__ void fa__t32_pv(float (&acc)[CH][4], const float (&pa)[KN][4], const float *pb)
{
#pragma unroll
    for (int kk = 0; kk < KN; kk++) {
        fa__t32_frag af;
#pragma unroll
        for (int j = 0; j < 4; j++) fa__t32_split(pa[kk][j], af.b[j], af.s[j]);
        fa__t32_pv_step<CH, LD>(acc, af, pb + kk * 8 * LD);
    }
}

/* The fp32 dK/dV kernel (fa__tcb_dkv's walk and steps). C: an fa__t32_* trait; MODS: as
   fa__tcb_dkv's; DQ: FA__BWD_DQ_ATOMIC, dq by atomics into a.dqacc in any order, or
   FA__BWD_DQ_TURNS (p->deterministic), the same adds in key-block order: the FFMA backward's turns
   (fa__cu_turn_wait's rule: work items by ticket, query blocks of BQ rows at multiples of BQ, turn
   counters a.turns + 1 [B][Hq][Sq / BQ rounded up]), so that every gradient's sum order is fixed
   at the default mode's count of products. */
template <class C, bool MODS, int DQ>
__global__ void __launch_bounds__(C::KW * 32, C::KMINB) fa__t32_dkv(const fa__tcb_args a)
{
    typedef fa__t32_geom<C> G;
    enum { D = G::D, LD = G::LD, BKV = G::BKV, BQ = G::BQ, LDS = G::LDS, NT = G::KNT, NN = BQ / 8, CH = D / 8 };
    enum { NS = C::KW * 16 / BQ, NCW = CH / NS };   /* dq: BQ/16 row groups x NS column slices of NCW n8 tiles */
    static_assert(BQ % 16 == 0 && (C::KW * 16) % BQ == 0 && CH % NS == 0, "fp32 tc backward tile");
    extern __shared__ __align__(128) unsigned char fa__tc_smem[];
    float *fK = (float *)fa__tc_smem, *fV = fK + BKV * LD, *fQ = fV + BKV * LD, *fO = fQ + 2 * BQ * LD;
    float *fS = fO + 2 * BQ * LD, *sL = (float *)(fa__tc_smem + G::KLSE), *sDl = sL + 2 * BQ;
    const unsigned sK = fa__cu_sa(fK), sV = fa__cu_sa(fV), sQ = fa__cu_sa(fQ), sO = fa__cu_sa(fO), sS = fa__cu_sa(fS);
    const fa__dims &d = a.d;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g8 = lane >> 2;
    __shared__ unsigned ticket;
    if (*a.flag) return;   /* a non-finite q, d_o or k: the FFMA fallback computes this call */
    if (DQ == FA__BWD_DQ_TURNS) {   /* the work item by ticket */
        if (tid == 0) ticket = atomicAdd(a.turns, 1u);
        __syncthreads();
    }
    const int item = DQ == FA__BWD_DQ_TURNS ? (int)ticket : (int)blockIdx.x;
    const int nbg = d.B * d.Hkv, kb = item / nbg, bg = item - kb * nbg;
    const int b = bg / d.Hkv, g = bg - b * d.Hkv, k0 = kb * BKV, nk = min((int)BKV, d.Sk - k0);
    const float f = d.scale * FA__CU_LOG2E;
    const bool sc = d.softcap > 0.0f, al = d.alibi != 0, bi = d.bias != 0;
    const int kr0 = k0 + warp * 16 + g8, cq = 2 * (lane & 3);   /* this thread's keys kr0 + 8 hf */
    /* byte addresses: the warp's K and V rows (A), the tiles' Q and dO rows (B) at stage 0; the
       lane's word of the [k][n] operands (row 2t, column g) */
    const unsigned aK = sK + (unsigned)(warp * 16 * LD + fa__t32_la(lane, LD)) * 4u, aV = aK + (unsigned)(BKV * LD) * 4u;
    const unsigned bQ = sQ + (unsigned)fa__t32_lb(lane, LD) * 4u, bO = sO + (unsigned)fa__t32_lb(lane, LD) * 4u;
    const int lp = cq * LD + g8;
    const int rg = warp % (BQ / 16), cs = warp / (BQ / 16);   /* dq: this warp's row group and column slice */
    const unsigned aS = sS + (unsigned)(16 * rg * LDS + fa__t32_la(lane, LDS)) * 4u;
    const int kc = warp * 16 + (g8 >> 1) + 4 * (g8 & 1);      /* dq: key g8's word in dS's rows */
    int64_t r0_, r1_;
    fa__key_rows(&d, k0, k0 + nk, &r0_, &r1_);
    /* the tiles: from the first row that sees the block (turns: from the query block holding it) */
    const int r0 = DQ == FA__BWD_DQ_TURNS ? (int)(r0_ / BQ) * BQ : (int)r0_;
    const int nqb = r1_ > r0_ ? (int)((r1_ - r0 + BQ - 1) / BQ) : 0, tiles = nqb * d.group;

    float dk[1][CH][4], dv[1][CH][4];
#pragma unroll
    for (int n = 0; n < CH; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[0][n][e] = dv[0][n][e] = 0.0f;

    if (tiles > 0) {   /* K, V and the first tile: one cp.async group */
        fa__t32_load<D, BKV, NT>(sK, (const float *)a.k + b * d.ks[0] + g * d.ks[1] + (int64_t)k0 * d.ks[2], d.ks[2], nk, tid);
        fa__t32_load<D, BKV, NT>(sV, (const float *)a.v + b * d.vs[0] + g * d.vs[1] + (int64_t)k0 * d.vs[2], d.vs[2], nk, tid);
        fa__tcb_load_q<D, BQ, NT, float>(a, sQ, sO, sL, sDl, b, g * d.group, r0, tid);
    }

    for (int t = 0; t < tiles; t++) {
        int h, i0;
        fa__tcb_tile<BQ>(d, g, r0, nqb, t, &h, &i0);
        const int nq = min((int)BQ, d.Sq - i0);
        const int so = (t & 1) * BQ * LD;   /* this tile's stage, floats */
        const float *tL = sL + (t & 1) * BQ, *tD = sDl + (t & 1) * BQ;
        fa__cu_wait<0>();
        __syncthreads();   /* tile t landed; every warp is done with tile t-1 (its stage and dS) */
        if (t + 1 < tiles) {
            int h2, i2;
            fa__tcb_tile<BQ>(d, g, r0, nqb, t + 1, &h2, &i2);
            const unsigned so2 = (unsigned)(BQ * LD - so) * 4u;
            fa__tcb_load_q<D, BQ, NT, float>(a, sQ + so2, sO + so2, sL + ((t + 1) & 1) * BQ, sDl + ((t + 1) & 1) * BQ, b,
                                             h2, i2, tid);
        }
        const fa__keys kr = fa__cu_tile_keys(d, i0, nq);
        const bool full = fa__keys_full(&kr, k0, k0 + BKV) != 0;
        const fa__cu_mods md = fa__cu_mods_of(d, b, h, d.scale, FA__CU_LOG2E, sc, al, false);
        float s[1][NN][4], dp[1][NN][4], pa[1][NN][4];

        fa__t32_abt<NN, D>(s[0], aK, bQ + (unsigned)so * 4u);   /* S^T: this warp's keys x the tile's query rows */
        fa__tcb_pt<float, 1, NN, MODS>(s, pa, d, md, sc, al, bi, f, tL, i0, cq, kr0, full);
        fa__t32_pv<NN, CH, LD>(dv[0], pa[0], fO + so + lp);      /* dV += P^T dO */
        fa__t32_abt<NN, D>(dp[0], aV, bO + (unsigned)so * 4u);  /* dP^T = V dO^T */
        fa__tcb_dst<float, 1, NN>(s, dp, pa, tD, cq);
        fa__t32_pv<NN, CH, LD>(dk[0], pa[0], fQ + so + lp);      /* dK += dS^T Q */
        {   /* dq += dS K by atomics (turns: in key-block order) */
#pragma unroll
            for (int n = 0; n < NN; n++)   /* dS^T into fS as dS, each 8 keys in the registers' k order */
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
#pragma unroll
                    for (int e = 0; e < 2; e++) fS[(8 * n + cq + e) * LDS + kc + 8 * hf] = pa[0][n][hf + 2 * e];
            __syncthreads();
            /* dq rows 16 rg .. +15 of the tile, n8 tiles cs NCW .. +NCW-1: dS (A, ldmatrix) K (B, rows 2t, 2t + 1) */
            float acc[NCW][4];
#pragma unroll
            for (int n = 0; n < NCW; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll 4
            for (int kk = 0; kk < BKV / 8; kk++) {
                fa__t32_frag af;
                fa__t32_ldsm(aS + (unsigned)kk * 32u, af);
                fa__t32_pv_step<NCW, LD>(acc, af, fK + 8 * kk * LD + lp + 8 * NCW * cs);
            }
            unsigned *turn = DQ == FA__BWD_DQ_TURNS ? a.turns + 1 + ((int64_t)b * d.Hq + h) * ((d.Sq + BQ - 1) / BQ) + i0 / BQ
                                                    : NULL;
            if (DQ == FA__BWD_DQ_TURNS) {   /* this block's turn: the key blocks before it have added theirs */
                int64_t lo, hi;
                fa__rows_range(&d, i0, (int64_t)i0 + nq, &lo, &hi);
                fa__cu_turn_wait(turn, (unsigned)(kb - (int)(lo / BKV)));
            }
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int i = i0 + 16 * rg + g8 + 8 * hf;
                if (i >= d.Sq) continue;
                fa__tcb_dq_add<NCW>(a.dqacc + (((int64_t)b * d.Hq + h) * d.Sq + i) * D + cq + 8 * cs * NCW, acc, hf);
            }
            if (DQ == FA__BWD_DQ_TURNS) {
                __syncthreads();   /* the adds are issued */
                fa__cu_turn_pass(turn);
            }
        }
    }
    fa__tcb_write_kv<float, 1, CH>(a, dk, dv, b, g, kr0, cq);
}

/* ---- 8e3. CUDA: the Hopper backward (sm_90a: wgmma, TMA, an mbarrier ring) -----------------------
   FlashAttention-3's arrangement of the backward for fp16/bf16 at D = Dv in {64, 128} on compute
   capability 9.0, in two kernels after fa__cu_bwd_prep (launched as one grid: fa__wgb_both), for
   the default and the deterministic mode alike (no dq atomics: bench/RESULTS.md, "Hopper
   backward", measured the separate dq pass faster than dq by atomics from the dK/dV kernel):
   - fa__wgb_dkv, one block per (key block of BKV = 128 keys, batch, kv head), walking the GQA
     group's query heads and the rows that see the block (fa__key_rows) in tiles of BQ = 64 rows,
     exactly as 8e2's fa__tcb_dkv. A producer warpgroup (setmaxnreg down) loads by TMA the K and V
     block once, then each tile's Q and dO (8d3's 128-byte-swizzled 64-column panels) into a ring
     of ST stages; its first warp stores the tile's lse and delta beside them (fa__tcb_load_ld),
     each of its lanes arriving on the stage's "full" mbarrier (the first with the stage's bytes).
     Two consumer warpgroups own 64 keys each (a warp 16) and never meet at a block barrier, so
     that one's element steps run under the other's wgmmas. Per tile a consumer issues S^T = K Q^T
     and dP^T = V dO^T (wgmma m64n64k16, ss64, both K-major from shared memory) as two groups; a
     warp's 16 rows of the m64 accumulator are 8e2's m16 layout (MT = 1), so 8e2's element steps
     run on it as they are: fa__tcb_pt (P g and P^T packed: 8b's modifier rule, the mask) once S^T
     has landed, then dV += P^T dO (wgmma m64nDk16, rs128 / rs64: P^T from registers as the
     forward's P, dO N-major), issued under dP^T's wait; fa__tcb_dst (dS^T packed), then dK +=
     dS^T Q the same way. dK and dV stay in registers for the whole walk (fa__tcb_write_kv writes
     scale dK and dV at the end). Every thread arrives on the stage's "empty" mbarrier once its
     wgmmas reading the stage have retired and its lse/delta reads are done.
   - fa__wgq_dq, 8e2's fa__tcb_dq on wgmma in the forward's arrangement: one block per (query
     block of BQ = 128 rows, batch, head), the longest (causal) first; the producer loads the
     block's Q and dO (TMA) with lse and delta once, then the BK-key tiles of K and V into a ring;
     each consumer owns 64 rows: S = Q K^T and dP = dO V^T (ss), dS by fa__tcb_ds_rows straight
     into A fragments, dq += dS K (rs, K N-major), the tiles in order, so that every sum order is
     fixed; fa__tcb_write_dq at the end (0 for a row that sees no key).
   Each wgmma group is waited before the registers it writes are read and before its stage is
   released. Both kernels return at once when fa__cu_bwd_prep's flag is set (the FFMA fallback
   computes that call, in its deterministic arrangement). Served (fa__cu_pick_backward,
   fa__wgb_pick): the tensor-core backward's requests (every modifier, mask and GQA) whose q, k, v
   and d_o TMA takes (fa__wg_tma_ok), on a device of compute capability 9.0 whose loaded code holds
   the sm_90a bodies (fa__wg_built) and whose driver encodes tensor maps; elsewhere 8e2's kernels.
   The default mode's workspace has no dq buffer where these kernels serve the dims
   (fa__cu_bwd_atomics, 8g). The bodies are compiled only for sm_90a; any other
   target gets a stub never launched. */

#if FA__WG
/* What the kernels receive: the tensor maps of q, d_o (boxes of the kernel's query rows), k and v
   (boxes of its keys), and 8e2's arguments. */
struct fa__wgb_args {
    CUtensorMap tq, to, tk, tv;
    fa__tcb_args a;
    int hmaj;   /* the blocks' order: 0 block-major (the longest first), 1 head-major (fa__wgb_both) */
};

/* The dK/dV kernel's shared memory (C: fa__wgb_d64 or fa__wgb_d128, 8a), from a 1024-byte aligned
   base: the K and V blocks (D / 64 panels of BKV rows each), ST stages of the Q and dO tiles
   (panels of BQ rows), ST stages of lse and delta, the mbarriers (full[ST], empty[ST], kv). */
template <class C> struct fa__wgb_geom {
    enum { D = C::D, BKV = C::BKV, BQ = C::BQ, ST = C::ST, NN = BQ / 8, CH = D / 8 };
    enum { KB = BKV * D * 2, QB = BQ * D * 2, LSE = 2 * KB + 2 * ST * QB, BARS = LSE + 2 * ST * BQ * 4 };
    enum { SMEM = BARS + 8 * (2 * ST + 2) + 1024 };
};

/* The dq kernel's (C: fa__wgq_d64 or fa__wgq_d128): the Q and dO blocks, ST stages of the K and V
   tiles, lse and delta, the mbarriers (full[ST], empty[ST], q). */
template <class C> struct fa__wgq_geom {
    enum { D = C::D, BQ = C::BQ, BK = C::BK, ST = C::ST, NN = BK / 8, CH = D / 8 };
    enum { QB = BQ * D * 2, KB = BK * D * 2, LSE = 2 * QB + 2 * ST * KB, BARS = LSE + 2 * BQ * 4 };
    enum { SMEM = BARS + 8 * (2 * ST + 2) + 1024 };
};

/* The producer's first warp: the lse and delta of query rows [i0, i0 + R) of (b, h) into sL, sDl
   (fa__tcb_load_ld), then each lane's arrival on the mbarrier bar (the first lane's also expects
   `bytes` of the copies it issues next), so that every lane's stores are ordered before the
   consumers' reads by its own arrival. */
template <int R>
static __device__ __forceinline__ void fa__wgb_put_ld(const fa__tcb_args &a, float *sL, float *sDl, int b, int h, int i0,
                                                      int lane, unsigned bar, unsigned bytes)
{
    fa__tcb_load_ld<R, 32>(a, sL, sDl, b, h, i0, lane);
    if (lane == 0) fa__mb_expect(bar, bytes);
    else fa__mb_arrive(bar);
}

/* fa__wg_desc(addr + off, ...) from d = fa__wg_desc(addr, ...), off a multiple of 16: the address
   field (addr >> 4, 14 bits) takes off >> 4 without a carry out of it, shared addresses lying below
   2^18; so that a tile's wgmmas add constants to a few descriptors instead of each building its own */
static __device__ __forceinline__ unsigned long long fa__wg_desc_at(unsigned long long d, unsigned off)
{
    return d + (off >> 4);
}

/* T: __half or __nv_bfloat16. C: fa__wgb_d64 or fa__wgb_d128 (8a). MODS: as fa__tcb_dkv's. */
template <typename T, class C, bool MODS>
static __device__ __forceinline__ void fa__wgb_dkv_block(const fa__wgb_args &w, int blk)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef fa__wgb_geom<C> G;
    typedef fa__wg_mma<T> X;
    enum { BKV = G::BKV, BQ = G::BQ, D = G::D, ST = G::ST, NN = G::NN, CH = G::CH };
    static_assert(BKV == 128 && BQ == 64 && (D == 64 || D == 128) && C::NT == 384, "the Hopper backward's tile");
    extern __shared__ __align__(1024) unsigned char fa__wg_smem[];
    const fa__tcb_args &a = w.a;
    const fa__dims &d = a.d;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    const int nbg = d.B * d.Hkv, nkb = (d.Sk + BKV - 1) / BKV;
    const int kb = w.hmaj ? blk % nkb : blk / nbg, bg = w.hmaj ? blk / nkb : blk - kb * nbg;
    const int b = bg / d.Hkv, g = bg - b * d.Hkv, k0 = kb * BKV, nk = min((int)BKV, d.Sk - k0);
    const unsigned s0 = fa__cu_sa(fa__wg_smem), sK = (s0 + 1023u) & ~1023u, sV = sK + G::KB, sQ = sV + G::KB;
    const unsigned sO = sQ + ST * G::QB;
    const unsigned full = sK + G::BARS, empty = full + 8 * ST, kvbar = empty + 8 * ST;   /* + 8 s: stage s */
    float *sL = (float *)(fa__wg_smem + (sK - s0) + G::LSE), *sDl = sL + ST * BQ;
    int64_t r0_, r1_;
    if (*a.flag) return;   /* a non-finite q, d_o or k: the FFMA fallback computes this call */
    fa__key_rows(&d, k0, k0 + nk, &r0_, &r1_);
    const int r0 = (int)r0_, nqb = r1_ > r0_ ? (int)((r1_ - r0_ + BQ - 1) / BQ) : 0, tiles = nqb * d.group;
    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            fa__mb_init(full + 8 * s, 32);    /* the producer's first warp */
            fa__mb_init(empty + 8 * s, 256);  /* every consumer thread */
        }
        fa__mb_init(kvbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {   /* the producer: its first warp stores lse and delta, its first thread issues the copies */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"((int)C::REG_P));
        if (tid < 32 && tiles > 0) {
            if (tid == 0) {
                fa__mb_expect(kvbar, 2 * G::KB);
#pragma unroll
                for (int p = 0; p < D / 64; p++) {
                    fa__tma_load(sK + p * BKV * 128, &w.tk, kvbar, 64 * p, k0, g, b);
                    fa__tma_load(sV + p * BKV * 128, &w.tv, kvbar, 64 * p, k0, g, b);
                }
            }
            for (int t = 0; t < tiles; t++) {
                const int s = t % ST;
                int h, i0;
                fa__tcb_tile<BQ>(d, g, r0, nqb, t, &h, &i0);
                if (t >= ST) fa__mb_wait(empty + 8 * s, (unsigned)(t / ST - 1) & 1u);   /* stage s consumed */
                fa__wgb_put_ld<BQ>(a, sL + s * BQ, sDl + s * BQ, b, h, i0, tid, full + 8 * s, 2 * G::QB);
                if (tid == 0) {
#pragma unroll
                    for (int p = 0; p < D / 64; p++) {
                        fa__tma_load(sQ + s * G::QB + p * BQ * 128, &w.tq, full + 8 * s, 64 * p, i0, h, b);
                        fa__tma_load(sO + s * G::QB + p * BQ * 128, &w.to, full + 8 * s, 64 * p, i0, h, b);
                    }
                }
            }
        }
    } else {   /* a consumer: 64 keys, its warps 16 each */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"((int)C::REG_C));
        const int c = wg - 1, cw = (tid - 128) >> 5;   /* cw: the warp among the consumers' 8 */
        const int kr0 = k0 + cw * 16 + (lane >> 2), cq = 2 * (lane & 3);   /* this thread's keys kr0 + 8 hf */
        const unsigned ka = (unsigned)c * 64 * 128;                         /* its 64 key rows, in each panel */
        const float f = d.scale * FA__CU_LOG2E;
        const bool sc = d.softcap > 0.0f, al = d.alibi != 0, bi = d.bias != 0;
        float dk[1][CH][4], dv[1][CH][4], s[1][NN][4], dp[1][NN][4];
#pragma unroll
        for (int n = 0; n < CH; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[0][n][e] = dv[0][n][e] = 0.0f;
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[0][n][e] = dp[0][n][e] = 0.0f;
        unsigned pp[1][NN / 2][4], ps[1][NN / 2][4];   /* P^T and dS^T, the A fragments of dV's and dK's wgmmas */
        const unsigned long long kd = fa__wg_desc(sK + ka, 16, 1024), vd = fa__wg_desc(sV + ka, 16, 1024);
        int hh = 0, qi = 0;   /* tile t: query head g group + hh, its query tile qi */
        if (tiles > 0) fa__mb_wait(kvbar, 0);
        for (int t = 0; t < tiles; t++) {
            const int sg = t % ST, h = g * d.group + hh, i0 = r0 + qi * BQ;
            const unsigned st = (unsigned)sg * G::QB;
            const unsigned long long qd = fa__wg_desc(sQ + st, 16, 1024), od = fa__wg_desc(sO + st, 16, 1024);
            const unsigned long long qn = fa__wg_desc(sQ + st, BQ * 128, 1024), on = fa__wg_desc(sO + st, BQ * 128, 1024);
            const float *tL = sL + sg * BQ, *tD = sDl + sg * BQ;
            const fa__keys kr = fa__cu_tile_keys(d, i0, min((int)BQ, d.Sq - i0));
            const bool kfull = fa__keys_full(&kr, k0, k0 + BKV) != 0;
            const fa__cu_mods md = fa__cu_mods_of(d, b, h, d.scale, FA__CU_LOG2E, sc, al, false);
            fa__mb_wait(full + 8 * sg, (unsigned)(t / ST) & 1u);
            fa__wg_keep(s);
            fa__wg_keep(dp);
            fa__wg_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)   /* S^T = K Q^T: this consumer's 64 keys x the tile's rows */
                X::ss64(&s[0][0][0], fa__wg_desc_at(kd, (kk >> 2) * BKV * 128 + (kk & 3) * 32),
                        fa__wg_desc_at(qd, (kk >> 2) * BQ * 128 + (kk & 3) * 32), kk);
            fa__wg_commit();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)   /* dP^T = V dO^T */
                X::ss64(&dp[0][0][0], fa__wg_desc_at(vd, (kk >> 2) * BKV * 128 + (kk & 3) * 32),
                        fa__wg_desc_at(od, (kk >> 2) * BQ * 128 + (kk & 3) * 32), kk);
            fa__wg_commit();
            fa__wg_wait<1>();
            fa__wg_keep(s);
            if (!MODS && kfull) fa__tcb_pt<T, 1, NN, MODS, true>(s, pp, d, md, sc, al, bi, f, tL, i0, cq, kr0, true);
            else fa__tcb_pt<T, 1, NN, MODS>(s, pp, d, md, sc, al, bi, f, tL, i0, cq, kr0, kfull);   /* (MODS: one copy) */
            fa__wg_keep(dv);
            fa__wg_fence();
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) {   /* dV += P^T dO, under dP^T's wait */
                const unsigned long long dO_ = fa__wg_desc_at(on, kk * 2048);
                if (D == 128) X::rs128(&dv[0][0][0], pp[0][kk], dO_);
                else X::rs64(&dv[0][0][0], pp[0][kk], dO_);
            }
            fa__wg_commit();
            fa__wg_wait<1>();
            fa__wg_keep(dp);
            fa__tcb_dst<T, 1, NN>(s, dp, ps, tD, cq);
            fa__wg_keep(dk);
            fa__wg_fence();
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) {   /* dK += dS^T Q */
                const unsigned long long dQ_ = fa__wg_desc_at(qn, kk * 2048);
                if (D == 128) X::rs128(&dk[0][0][0], ps[0][kk], dQ_);
                else X::rs64(&dk[0][0][0], ps[0][kk], dQ_);
            }
            fa__wg_commit();
            fa__wg_wait<0>();
            fa__wg_keep(dk);
            fa__wg_keep(dv);
            fa__mb_arrive(empty + 8 * sg);   /* this thread is done with stage sg */
            if (++qi == nqb) {   /* the next query head of the group */
                qi = 0;
                hh++;
            }
        }
        fa__tcb_write_kv<T, 1, CH>(a, dk, dv, b, g, kr0, cq);
    }
#else
    /* another target: never launched */
    (void)blk;
    if (w.a.d.Sq < 0 && *w.a.flag) asm volatile("trap;\n");
#endif
}

/* T: __half or __nv_bfloat16. C: fa__wgq_d64 or fa__wgq_d128 (8a). MODS: as fa__tcb_dq's. */
template <typename T, class C, bool MODS>
static __device__ __forceinline__ void fa__wgq_dq_block(const fa__wgb_args &w, int blk)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef fa__wgq_geom<C> G;
    typedef fa__wg_mma<T> X;
    enum { BQ = G::BQ, BK = G::BK, D = G::D, ST = G::ST, NN = G::NN, CH = G::CH };
    static_assert(BQ == 128 && (BK == 64 || BK == 128) && (D == 64 || D == 128) && C::NT == 384, "the Hopper dq tile");
    extern __shared__ __align__(1024) unsigned char fa__wg_smem[];
    const fa__tcb_args &a = w.a;
    const fa__dims &d = a.d;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    const int nbh = d.B * d.Hq, bh = w.hmaj ? blk / a.qblocks : blk % nbh;
    const int qb = a.qblocks - 1 - (w.hmaj ? blk - bh * a.qblocks : blk / nbh);
    const int b = bh / d.Hq, h = bh - b * d.Hq, g = h / d.group, i0 = qb * BQ, nq = min((int)BQ, d.Sq - i0);
    const unsigned s0 = fa__cu_sa(fa__wg_smem), sQ = (s0 + 1023u) & ~1023u, sO = sQ + G::QB, sK = sO + G::QB;
    const unsigned sV = sK + ST * G::KB, full = sQ + G::BARS, empty = full + 8 * ST, qbar = empty + 8 * ST;
    float *sL = (float *)(fa__wg_smem + (sQ - s0) + G::LSE), *sDl = sL + BQ;
    const fa__keys kr = fa__cu_tile_keys(d, i0, nq);
    const int t0 = (int)kr.lo / BK, nt = kr.hi > kr.lo ? ((int)kr.hi + BK - 1) / BK - t0 : 0;
    if (*a.flag) return;   /* a non-finite q, d_o or k: the FFMA fallback computes this call */
    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            fa__mb_init(full + 8 * s, 1);
            fa__mb_init(empty + 8 * s, 8);   /* the consumers' warps (the stages hold TMA's writes alone) */
        }
        fa__mb_init(qbar, 32);   /* the producer's first warp */
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {   /* the producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"((int)C::REG_P));
        if (tid < 32 && nt > 0) {
            fa__wgb_put_ld<BQ>(a, sL, sDl, b, h, i0, tid, qbar, 2 * G::QB);
            if (tid == 0) {
#pragma unroll
                for (int p = 0; p < D / 64; p++) {
                    fa__tma_load(sQ + p * BQ * 128, &w.tq, qbar, 64 * p, i0, h, b);
                    fa__tma_load(sO + p * BQ * 128, &w.to, qbar, 64 * p, i0, h, b);
                }
                for (int j = 0; j < nt; j++) {
                    const int s = j % ST;
                    if (j >= ST) fa__mb_wait(empty + 8 * s, (unsigned)(j / ST - 1) & 1u);   /* stage s consumed */
                    fa__mb_expect(full + 8 * s, 2 * G::KB);
#pragma unroll
                    for (int p = 0; p < D / 64; p++) {
                        fa__tma_load(sK + s * G::KB + p * BK * 128, &w.tk, full + 8 * s, 64 * p, (t0 + j) * BK, g, b);
                        fa__tma_load(sV + s * G::KB + p * BK * 128, &w.tv, full + 8 * s, 64 * p, (t0 + j) * BK, g, b);
                    }
                }
            }
        }
    } else {   /* a consumer: 64 rows, its warps 16 each */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"((int)C::REG_C));
        const int c = wg - 1, lr = (((tid - 128) >> 5) & 3) * 16 + (lane >> 2), cq = 2 * (lane & 3);
        const int ic = i0 + c * 64;   /* this consumer's first row */
        const unsigned qa = (unsigned)c * 64 * 128;
        const float f = d.scale * FA__CU_LOG2E;
        const bool sc = d.softcap > 0.0f, al = d.alibi != 0, bi = d.bias != 0;
        const fa__cu_mods md = fa__cu_mods_of(d, b, h, d.scale, FA__CU_LOG2E, sc, al, false);
        float dq[1][CH][4], s[1][NN][4], dp[1][NN][4];
        unsigned pa[1][NN / 2][4];
#pragma unroll
        for (int n = 0; n < CH; n++) dq[0][n][0] = dq[0][n][1] = dq[0][n][2] = dq[0][n][3] = 0.0f;
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[0][n][e] = dp[0][n][e] = 0.0f;
        const unsigned long long qd = fa__wg_desc(sQ + qa, 16, 1024), od = fa__wg_desc(sO + qa, 16, 1024);
        if (nt > 0) fa__mb_wait(qbar, 0);
        for (int j = 0; j < nt; j++) {
            const int sg = j % ST, k0 = (t0 + j) * BK;
            const unsigned st = (unsigned)sg * G::KB;
            const unsigned long long kd = fa__wg_desc(sK + st, 16, 1024), vd = fa__wg_desc(sV + st, 16, 1024);
            const unsigned long long kn = fa__wg_desc(sK + st, BK * 128, 1024);
            const bool kfull = fa__keys_full(&kr, k0, k0 + BK) != 0;
            fa__mb_wait(full + 8 * sg, (unsigned)(j / ST) & 1u);
            fa__wg_keep(s);
            fa__wg_keep(dp);
            fa__wg_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {   /* S = Q K^T, dP = dO V^T */
                const unsigned long long dk_ = fa__wg_desc_at(kd, (kk >> 2) * BK * 128 + (kk & 3) * 32);
                const unsigned long long dq_ = fa__wg_desc_at(qd, (kk >> 2) * BQ * 128 + (kk & 3) * 32);
                if (BK == 128) X::ss(&s[0][0][0], dq_, dk_, kk);
                else X::ss64(&s[0][0][0], dq_, dk_, kk);
            }
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const unsigned long long dv_ = fa__wg_desc_at(vd, (kk >> 2) * BK * 128 + (kk & 3) * 32);
                const unsigned long long do_ = fa__wg_desc_at(od, (kk >> 2) * BQ * 128 + (kk & 3) * 32);
                if (BK == 128) X::ss(&dp[0][0][0], do_, dv_, kk);
                else X::ss64(&dp[0][0][0], do_, dv_, kk);
            }
            fa__wg_commit();
            fa__wg_wait<0>();
            fa__wg_keep(s);
            fa__wg_keep(dp);
            if (!MODS && kfull)
                fa__tcb_ds_rows<T, 1, NN, MODS, true>(s, dp, pa, d, md, sc, al, bi, f, sL + c * 64, sDl + c * 64, ic, lr, k0, cq, true);
            else fa__tcb_ds_rows<T, 1, NN, MODS>(s, dp, pa, d, md, sc, al, bi, f, sL + c * 64, sDl + c * 64, ic, lr, k0, cq, kfull);
            fa__wg_keep(dq);
            fa__wg_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {   /* dq += dS K */
                const unsigned long long dk_ = fa__wg_desc_at(kn, kk * 2048);
                if (D == 128) X::rs128(&dq[0][0][0], pa[0][kk], dk_);
                else X::rs64(&dq[0][0][0], pa[0][kk], dk_);
            }
            fa__wg_commit();
            fa__wg_wait<0>();
            fa__wg_keep(dq);
            __syncwarp();
            if (lane == 0) fa__mb_arrive(empty + 8 * sg);   /* this warp is done with stage sg */
        }
        fa__tcb_write_dq<T, 1, CH>(a, dq, b, h, ic + lr, cq);
    }
#else
    /* another target: never launched */
    (void)blk;
    if (w.a.d.Sq < 0 && *w.a.flag) asm volatile("trap;\n");
#endif
}

/* The kernels: fa__wgb_dkv and fa__wgq_dq, a block each of their grids (the bench's split timings);
   fa__wgb_both, the two in one grid (what fa__wgb_launch runs): its first kgrid blocks the dK/dV
   kernel's, the rest the dq kernel's. The two are independent (both read fa__cu_bwd_prep's output
   and write disjoint gradients), so the dq blocks start on the SMs the dK/dV grid's last wave
   leaves idle instead of after it, and one launch gap goes; each gradient is still computed by one
   block in the same order (the same bits as two launches). */
template <typename T, class C, bool MODS>
__global__ void __launch_bounds__(C::NT, 1) fa__wgb_dkv(const __grid_constant__ fa__wgb_args w)
{
    fa__wgb_dkv_block<T, C, MODS>(w, (int)blockIdx.x);
}

template <typename T, class C, bool MODS>
__global__ void __launch_bounds__(C::NT, 1) fa__wgq_dq(const __grid_constant__ fa__wgb_args w)
{
    fa__wgq_dq_block<T, C, MODS>(w, (int)blockIdx.x);
}

/* fa__wgb_both's arguments: the dK/dV kernel's (k, q, d_o maps in its boxes), the dq kernel's. */
struct fa__wgb_args2 {
    fa__wgb_args k, q;
    int kgrid;
};

template <typename T, class C, bool MODS>
__global__ void __launch_bounds__(C::NT, 1) fa__wgb_both(const __grid_constant__ fa__wgb_args2 w)
{
    static_assert((int)C::NT == (int)C::DQ::NT, "one block size for both kernels");
    if ((int)blockIdx.x < w.kgrid) fa__wgb_dkv_block<T, C, MODS>(w.k, (int)blockIdx.x);
    else fa__wgq_dq_block<T, typename C::DQ, MODS>(w.q, (int)blockIdx.x - w.kgrid);
}
#endif

/* ---- 8f. CUDA: the kernel picker and the launches --------------------------------------------- */

/* 1 when every row of an fp32 tensor starts 16-byte aligned and holds whole float4s */
static int fa__cu_vec16(const fa__dims *d, const void *x, const int64_t s[3], int width)
{
    return d->dtype == FA_F32 && ((uintptr_t)x & 15) == 0 && width % 4 == 0 && s[0] % 4 == 0 &&
           s[1] % 4 == 0 && s[2] % 4 == 0;
}

/* 1 when every row of a 16-bit tensor starts 16-byte aligned (cp.async of 8 elements) */
static int fa__tc_aligned(const void *p, const int64_t s[3])
{
    return ((uintptr_t)p & 15) == 0 && s[0] % 8 == 0 && s[1] % 8 == 0 && s[2] % 8 == 0;
}

/* What fa_cuda_tiled runs for a request: the kernel and, for the tensor-core kernels, the modifier
   variant of fa__tc_fwd (MOD: 0 plain, 1 softcap alone, 2 ALiBi alone, 4 decided at run time:
   bias, a non-positive scale, combinations; 0 for the generic kernels, which decide at run
   time). bq and bk: its tile, query rows a block and keys a tile. */
typedef struct fa__cu_plan {
    fa__cu_kernel kernel;
    int mods, bq, bk;
    int chunk, chunks;   /* the decode kernels (8d2): keys a chunk, chunks a row (bk = chunk) */
} fa__cu_plan;

static const char *fa__cu_kernel_name(fa__cu_kernel k)
{
    switch (k) {
    case FA__CU_TC_D64: return "tc_d64";
    case FA__CU_TC_D128: return "tc_d128";
    case FA__CU_F32_D64: return "f32_d64";
    case FA__CU_F32_D64_Q64K32: return "f32_d64_q64k32";
    case FA__CU_F32_D64_Q128K32: return "f32_d64_q128k32";
    case FA__CU_F32_D64_Q128: return "f32_d64_q128";
    case FA__CU_F32_D128: return "f32_d128";
    case FA__CU_F32_D128_Q64: return "f32_d128_q64";
    case FA__CU_F32_D128_Q128: return "f32_d128_q128";
    case FA__CU_F32_D128_K32: return "f32_d128_k32";
    case FA__CU_GENERIC_D64: return "generic_d64";
    case FA__CU_GENERIC_D128: return "generic_d128";
    case FA__CU_GENERIC_D256: return "generic_d256";
    case FA__CU_DEC_TC_D64: return "dec_tc_d64";
    case FA__CU_DEC_TC_D128: return "dec_tc_d128";
    case FA__CU_DEC_TC_D64_R32: return "dec_tc_d64_r32";
    case FA__CU_DEC_TC_D128_R32: return "dec_tc_d128_r32";
    case FA__CU_DEC_D64: return "dec_d64";
    case FA__CU_DEC_D128: return "dec_d128";
    case FA__CU_DEC_D256: return "dec_d256";
    case FA__CU_WG_D128: return "wg_d128";
    case FA__CU_WG_D64: return "wg_d64";
    case FA__CU_KERNELS: break;
    }
    return "none";
}

/* The blocks of a forward kernel's 1-D grid for tiles of bq query rows (fa__cu_qtile's order): B
   Hq ceil(Sq / bq); -1 when that passes 2^31 - 1. */
static int64_t fa__cu_qblocks(const fa__dims *d, int bq)
{
    int64_t blocks = 0;
    return fa__mul64((d->Sq + bq - 1) / bq, (int64_t)d->B * d->Hq, &blocks) && blocks <= INT_MAX ? blocks : -1;
}

/* The tile and shared memory of a generic configuration, and whether its grid and shared memory
   fit this request on a device with `optin` bytes of shared memory a block. */
template <class CFG> static int fa__cu_fits(const fa__dims *d, int optin, fa__cu_plan *pl)
{
    typedef fa__cu_geom<CFG> C;
    pl->bq = C::BQ;
    pl->bk = C::BK;
    return fa__cu_qblocks(d, C::BQ) >= 0 && (int)C::SMEM <= optin;
}

static int fa__cu_fits_kernel(fa__cu_kernel k, const fa__dims *d, int optin, fa__cu_plan *pl)
{
    switch (k) {
    case FA__CU_F32_D64: return fa__cu_fits<fa__cu_f32_d64>(d, optin, pl);
    case FA__CU_F32_D64_Q64K32: return fa__cu_fits<fa__cu_f32_d64_q64k32>(d, optin, pl);
    case FA__CU_F32_D64_Q128K32: return fa__cu_fits<fa__cu_f32_d64_q128k32>(d, optin, pl);
    case FA__CU_F32_D64_Q128: return fa__cu_fits<fa__cu_f32_d64_q128>(d, optin, pl);
    case FA__CU_F32_D128: return fa__cu_fits<fa__cu_f32_d128>(d, optin, pl);
    case FA__CU_F32_D128_Q64: return fa__cu_fits<fa__cu_f32_d128_q64>(d, optin, pl);
    case FA__CU_F32_D128_Q128: return fa__cu_fits<fa__cu_f32_d128_q128>(d, optin, pl);
    case FA__CU_F32_D128_K32: return fa__cu_fits<fa__cu_f32_d128_k32>(d, optin, pl);
    case FA__CU_GENERIC_D64: return fa__cu_fits<fa__cu_generic_d64>(d, optin, pl);
    case FA__CU_GENERIC_D128: return fa__cu_fits<fa__cu_generic_d128>(d, optin, pl);
    case FA__CU_GENERIC_D256: return fa__cu_fits<fa__cu_generic_d256>(d, optin, pl);
    default: return 0;
    }
}

/* The decode path's cut of the key axis (8d2): keys a chunk, from one sequence's shape alone (Sk,
   Hkv and its row blocks of FA__CU_DEC_ROWS, ceil(group * Sq / FA__CU_DEC_ROWS), whichever block the
   picker then runs; never B or the device, so that a row's arithmetic is the same in any batch):
   the sequence's Hkv * row blocks * Sk keys over FA__CU_DEC_PARTS blocks, rounded up to a multiple
   of 256, at least FA__CU_DEC_CHUNK_MIN; so a sequence runs about FA__CU_DEC_PARTS blocks (about two an
   SM of a 132-SM device at B = 1) and a row has at most FA__CU_DEC_PARTS chunks. */
static int fa__cu_dec_chunk(const fa__dims *d)
{
    const int64_t rb = ((int64_t)d->group * d->Sq + FA__CU_DEC_ROWS - 1) / FA__CU_DEC_ROWS;
    const int64_t work = (int64_t)d->Sk * d->Hkv * rb;
    const int64_t c = ((work + FA__CU_DEC_PARTS - 1) / FA__CU_DEC_PARTS + 255) / 256 * 256;
    return c < FA__CU_DEC_CHUNK_MIN ? FA__CU_DEC_CHUNK_MIN : c >= d->Sk ? d->Sk : (int)c;   /* Sk: one chunk */
}

/* The decode path's workspace: partial o and lse of every output row and chunk, fp32,
   B * Hq * Sq * chunks * (Dv + 1) floats (SIZE_MAX when that overflows). */
static size_t fa__cu_dec_bytes(const fa__dims *d, int chunks)
{
    const size_t rows = fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)d->Sq);
    return fa__mul_size(fa__mul_size(rows, (size_t)chunks), ((size_t)d->Dv + 1) * sizeof(float));
}

/* Step 0 of fa__cu_pick, the decode path (8d2): Sk >= 1, Sq <= FA__CU_DEC_MAX_SQ and group * Sq <=
   FA__CU_DEC_MAX_ROWS (few query rows per (batch, kv head)), B and Hkv within the grid's y and z
   limits. fp16/bf16 with D = Dv in {64, 128} and q, k, v rows 16-byte aligned on an sm_80+ device
   whose blocks can take its shared memory: the tensor-core kernel (variant 0 plain, 4 when a
   modifier, a bias or a non-positive scale needs the scores rebuilt), in blocks of 16 packed rows,
   or of 32 (the _r32 kernels, which read each K/V tile once for up to 32 rows) when group * Sq >
   16 and the 16-row grid would take more than one wave of MINB blocks an SM (RESULTS, CUDA
   decode, "decmq": at D = 128 the 32-row block, paired (RH = 2) or as MT = 2 before it, runs B = 8
   MQA at 1.46x or 1.24x the speed of 16-row blocks, B = 1 MQA 131k at 0.93x or 0.73x, where
   16-row blocks fill one wave and 32-row ones half of it); else the FFMA kernel of the head-dim class. pl->bq: the
   packed rows a block. The choice of block depends on B and the device, but nothing a row
   computes does: the chunks come from the shape alone (fa__cu_dec_chunk), and a row's bits are
   the same in a 16- or a 32-row block (the same products, softmax steps and warp merge: tested),
   so a sequence's o and lse stay bitwise the same alone or in a batch. Returns 1 when the request
   is the decode path's (*pl set, *st FA_OK, or *st FA_ERR_DEVICE when the device cannot be
   queried), 0 to leave it to the steps below. */
static int fa__cu_dec_pick(const fa__dims *d, const void *q, const void *k, const void *v, fa__cu_plan *pl,
                           fa_status *st)
{
    const int dc = d->D > d->Dv ? d->D : d->Dv;
    fa__cu_facts f;
    int dev = 0, major, optin, sms;
    if (d->Sk < 1 || d->Sq > FA__CU_DEC_MAX_SQ || (int64_t)d->group * d->Sq > FA__CU_DEC_MAX_ROWS ||
        d->B > 65535 || d->Hkv > 65535 || (int64_t)d->B * d->Hq * d->Sq > INT_MAX)
        return 0;
    if (fa__cu_facts_of(&dev, &f) != FA_OK) {
        *st = FA_ERR_DEVICE;
        return 1;
    }
    major = f.major; optin = f.optin; sms = f.sms;
    pl->mods = 0;
    *st = FA_OK;
    pl->chunk = pl->bk = fa__cu_dec_chunk(d);
    pl->chunks = (int)(((int64_t)d->Sk + pl->chunk - 1) / pl->chunk);
    if ((d->dtype == FA_F16 || d->dtype == FA_BF16) && d->D == d->Dv && (d->D == 64 || d->D == 128) && major >= 8 &&
        fa__tc_aligned(q, d->qs) && fa__tc_aligned(k, d->ks) && fa__tc_aligned(v, d->vs)) {
        const int64_t rb16 = ((int64_t)d->group * d->Sq + FA__CU_DEC_ROWS - 1) / FA__CU_DEC_ROWS;
        const int minb = d->D == 64 ? (int)fa__dec_d64::MINB : (int)fa__dec_d128::MINB;
        const int r32 = rb16 > 1 && (int64_t)d->B * d->Hkv * rb16 * pl->chunks > (int64_t)minb * sms;
        const int smem = d->D == 64 ? (r32 ? (int)fa__dec_geom<fa__dec_d64_r32>::SMEM : (int)fa__dec_geom<fa__dec_d64>::SMEM)
                                    : (r32 ? (int)fa__dec_geom<fa__dec_d128_r32>::SMEM : (int)fa__dec_geom<fa__dec_d128>::SMEM);
        if (optin >= smem) {
            pl->kernel = d->D == 64 ? (r32 ? FA__CU_DEC_TC_D64_R32 : FA__CU_DEC_TC_D64)
                                    : (r32 ? FA__CU_DEC_TC_D128_R32 : FA__CU_DEC_TC_D128);
            pl->mods = d->bias || !(d->scale > 0.0f) || d->softcap > 0.0f || d->alibi ? 4 : 0;
            pl->bq = r32 ? 32 : 16;
            return 1;
        }
    }
    pl->kernel = dc <= 64 ? FA__CU_DEC_D64 : dc <= 128 ? FA__CU_DEC_D128 : FA__CU_DEC_D256;
    pl->bq = FA__CU_DEC_ROWS;
    if (optin < (dc <= 64 ? (int)fa__dec_ffma_geom<64>::SMEM : dc <= 128 ? (int)fa__dec_ffma_geom<128>::SMEM
                                                                        : (int)fa__dec_ffma_geom<256>::SMEM)) {
        memset(pl, 0, sizeof *pl);
        pl->kernel = FA__CU_KERNELS;
        return 0;
    }
    return 1;
}

/* The modifier variant of the forward tensor-core kernels (fa__tc_fwd and fa__wg_fwd; on the
   device fa__tc_mod_of): 0 plain, 1 softcap alone, 2 ALiBi alone, 4 decided at run time (bias, a
   non-positive scale, combinations). */
static int fa__tc_mods(const fa__dims *d)
{
    const int sc = d->softcap > 0.0f, al = d->alibi != 0;
    return d->bias || !(d->scale > 0.0f) || (sc && al) ? 4 : sc ? 1 : al ? 2 : 0;
}

#if FA__WG
/* 1 when a q, k or v tensor (S tokens, H heads, B batches of 16-bit rows) fits a TMA tensor map:
   its address 16-byte aligned and the stride of every axis longer than one positive, a multiple of
   8 elements and below 2^39 elements (TMA: strides multiples of 16 bytes, below 2^40 bytes). Zero
   (broadcast) and negative strides are fa__tc_fwd's. */
static int fa__wg_tma_ok(const void *p, const int64_t s[3], int64_t S, int64_t H, int64_t B)
{
    const int64_t ext[3] = { B, H, S };
    int i;
    if ((uintptr_t)p & 15) return 0;
    for (i = 0; i < 3; i++)
        if (ext[i] > 1 && (s[i] <= 0 || s[i] % 8 != 0 || s[i] >= ((int64_t)1 << 39))) return 0;
    return 1;
}

typedef PFN_cuTensorMapEncodeTiled_v12000 fa__wg_encode_fn;

/* The driver's cuTensorMapEncodeTiled through the runtime's entry-point query (no -lcuda); NULL
   when the driver has none. */
static fa__wg_encode_fn fa__wg_encoder(void)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return (fa__wg_encode_fn)fn;
}

/* 1 when the code this build loads on the current device holds fa__wg_fwd's sm_90a body: the stub
   compiled for every other target has a static shared word, the body none. */
static int fa__wg_built(void)
{
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, (const void *)fa__wg_fwd<__nv_bfloat16, fa__wg_d128, 0>) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return fa.sharedSizeBytes == 0;
}

/* The tensor map of q, k or v (fa__wg_tma_ok has passed): dims {D, S, H, B} innermost first, boxes
   of 64 elements x `rows` tokens, 128-byte swizzle, out-of-bounds elements read as zeros. An axis
   of one takes the packed stride (its stride is never used). */
static int fa__wg_map(fa__wg_encode_fn enc, CUtensorMap *m, const void *p, fa_dtype dt, int D, int64_t S, int64_t H,
                      int64_t B, const int64_t s[3], int rows)
{
    const int64_t ext[3] = { S, H, B }, str[3] = { s[2], s[1], s[0] };
    cuuint64_t dim[4], stride[3];
    cuuint32_t box[4] = { 64, (cuuint32_t)rows, 1, 1 }, es[4] = { 1, 1, 1, 1 };
    int64_t inner = D;
    int i;
    dim[0] = (cuuint64_t)D;
    for (i = 0; i < 3; i++) {
        const int64_t st = ext[i] > 1 ? str[i] : (inner < ((int64_t)1 << 39) ? inner : 8);
        dim[i + 1] = (cuuint64_t)ext[i];
        stride[i] = (cuuint64_t)st * 2u;
        inner = st * ext[i];
    }
    return enc(m, dt == FA_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)p, dim,
               stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* 1 when the D = 64 Hopper kernel runs its three-consumer block (8a's fa__wg_d64, 192 rows):
   modifier variants 0-2 and a middle query row that sees at least 1024 keys (fa__visible_keys);
   else fa__wg_d64x2 (128 rows). Measured on the H200: three consumers +6-23% where rows see 1k-16k
   keys, -9% causal at S = 1k (512 keys a row on average) and -13% under a window of 256, where
   the taller block's masked tiles cost more than the third consumer gains (bench/RESULTS.md,
   "Hopper forward (issue 15)", three consumers at D = 64). From the shape alone. */
static int fa__wg_wide(const fa__dims *d, int mods)
{
    int lo, hi;
    fa__visible_keys(d->Sk - (d->Sq - d->Sq / 2), d->Sk, d->causal, d->wl, d->wr, &lo, &hi);
    return mods != 4 && hi - lo >= 1024;
}

/* Step 1 of fa__cu_pick, the Hopper kernel (8d3): fp16/bf16, D = Dv in {64, 128}, Sk >= 1, q, k and v as
   TMA takes them (fa__wg_tma_ok), o rows 16-byte aligned, B*Hq and the query tiles inside the
   grid's limits, on a device of compute capability 9.0 with the shared memory, whose loaded code
   holds the sm_90a body (fa__wg_built) and whose driver encodes tensor maps. 1 when it serves
   (*pl set), 0 to leave the request to the steps below (a device that cannot be queried too: they
   say so). */
static int fa__wg_pick(const fa__dims *d, const void *q, const void *k, const void *v, const void *o, fa__cu_plan *pl)
{
    typedef fa__wg_geom<fa__wg_d128> G;
    typedef fa__wg_geom<fa__wg_d64> G64;
    typedef fa__wg_geom<fa__wg_d64x2> G64x2;
    const int mods = fa__tc_mods(d), wide = fa__wg_wide(d, mods);
    const int smem = d->D == 128 ? (int)G::SMEM : wide ? (int)G64::SMEM : (int)G64x2::SMEM;
    int dev = 0, major = 0, minor = 0, optin = 0;
    if (!((d->dtype == FA_F16 || d->dtype == FA_BF16) && d->D == d->Dv && (d->D == 64 || d->D == 128) && d->Sk >= 1 &&
          fa__tc_aligned(o, d->os) && fa__cu_qblocks(d, G::BQ) >= 0 &&
          fa__wg_tma_ok(q, d->qs, d->Sq, d->Hq, d->B) && fa__wg_tma_ok(k, d->ks, d->Sk, d->Hkv, d->B) &&
          fa__wg_tma_ok(v, d->vs, d->Sk, d->Hkv, d->B)))
        return 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (major != 9 || minor != 0 || optin < smem || !fa__wg_built() || !fa__wg_encoder()) return 0;
    pl->kernel = d->D == 128 ? FA__CU_WG_D128 : FA__CU_WG_D64;
    pl->mods = mods;
    pl->bq = d->D == 128 ? (int)G::BQ : wide ? (int)G64::BQ : (int)G64x2::BQ;   /* fa__cu_launch reads D = 64's block */
    pl->bk = d->D == 128 ? (int)G::BK : (int)G64::BK;
    return 1;
}
#endif

/* Picks the kernel for a request that fa__resolve and fa__cu_check accepted, with Sq > 0; the one
   place that decides, and it launches nothing. In order:
   0. Few query rows per (batch, kv head), Sk >= 1: the split-key decode kernels (fa__cu_dec_pick).
   1. On a compute capability 9.0 device, fp16/bf16 at D = Dv in {64, 128}, Sk >= 1, q, k, v in layouts
      TMA takes: the Hopper kernel (fa__wg_pick, 8d3), with the modifier variant the request needs.
   1b. fp16/bf16 with D = Dv in {64, 128}, q, o (and k, v when Sk > 0) rows 16-byte aligned, B*Hq
      and the query tiles inside the grid's limits, on an sm_80+ device: the tensor-core kernel,
      with the modifier variant the request needs.
   2. fp32 whose q, k and v rows are all 16-byte aligned: by head-dim class and (block_q, block_k)
      (block_q other than 64 and 128 counts as 0, block_k other than 32 and 64 too): D, Dv <= 64:
      (0, 0) and (64, 0|64) FA__CU_F32_D64, (64, 32) _Q64K32, (128, 32) _Q128K32, (128, 0) _Q128;
      D, Dv <= 128: (0, 0) and (64, 64) FA__CU_F32_D128, (64, 0|32) _Q64, (128, 0) _Q128;
      taken when its grid and shared memory fit, else step 3.
   3. The generic kernel of the head-dim class (D, Dv <= 64, <= 128, <= 256), any dtype and layout;
      aligned fp32 with block_k = 32 at 64 < D, Dv <= 128 takes FA__CU_F32_D128_K32.
   FA_OK with *pl set; FA_ERR_UNSUPPORTED when step 3's kernel does not fit either (a grid over
   2^31 - 1 blocks, or too little shared memory on this device); FA_ERR_DEVICE when the device
   cannot be queried. */
static fa_status fa__cu_pick(const fa__dims *d, const void *q, const void *k, const void *v, const void *o,
                             fa__cu_plan *pl)
{
    const int dc = d->D > d->Dv ? d->D : d->Dv;
    int dev = 0, major = 0, optin = 0, aligned;
    fa__cu_kernel kern = FA__CU_KERNELS;
    fa_status dst = FA_OK;
    memset(pl, 0, sizeof *pl);
    pl->kernel = FA__CU_KERNELS;
    if (fa__cu_dec_pick(d, q, k, v, pl, &dst)) return dst;
#if FA__WG
    if (fa__wg_pick(d, q, k, v, o, pl)) return FA_OK;
#endif
    if ((d->dtype == FA_F16 || d->dtype == FA_BF16) && d->D == d->Dv && (d->D == 64 || d->D == 128) &&
        fa__tc_aligned(q, d->qs) && fa__tc_aligned(o, d->os) &&
        (d->Sk == 0 || (fa__tc_aligned(k, d->ks) && fa__tc_aligned(v, d->vs))) &&
        fa__cu_qblocks(d, 64) >= 0) {   /* the grid, with BQ >= 64 */
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            return FA_ERR_DEVICE;
        if (major >= 8) {
            pl->kernel = d->D == 64 ? FA__CU_TC_D64 : FA__CU_TC_D128;
            pl->mods = fa__tc_mods(d);
            pl->bq = d->D == 64 ? (int)fa__tc_geom<fa__tc_d64>::BQ : (int)fa__tc_geom<fa__tc_d128>::BQ;
            pl->bk = d->D == 64 ? (int)fa__tc_geom<fa__tc_d64>::BK : (int)fa__tc_geom<fa__tc_d128>::BK;
            return FA_OK;
        }
    }
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return FA_ERR_DEVICE;
    }
    aligned = fa__cu_vec16(d, q, d->qs, d->D) && fa__cu_vec16(d, k, d->ks, d->D) && fa__cu_vec16(d, v, d->vs, d->Dv);
    if (aligned) {
        const int bq = d->block_q == 64 || d->block_q == 128 ? d->block_q : 0;   /* others: the library's */
        const int bk = d->block_k == 32 || d->block_k == 64 ? d->block_k : 0;
        if (dc <= 64) {
            if ((bq == 0 && bk == 0) || (bq == 64 && (bk == 0 || bk == 64))) kern = FA__CU_F32_D64;
            else if (bq == 64 && bk == 32) kern = FA__CU_F32_D64_Q64K32;
            else if (bq == 128 && bk == 32) kern = FA__CU_F32_D64_Q128K32;
            else if (bq == 128 && bk == 0) kern = FA__CU_F32_D64_Q128;
        } else if (dc <= 128) {
            if ((bq == 0 && bk == 0) || (bq == 64 && bk == 64)) kern = FA__CU_F32_D128;
            else if (bq == 64 && (bk == 0 || bk == 32)) kern = FA__CU_F32_D128_Q64;
            else if (bq == 128 && bk == 0) kern = FA__CU_F32_D128_Q128;
        }
        if (kern != FA__CU_KERNELS && fa__cu_fits_kernel(kern, d, optin, pl)) {
            pl->kernel = kern;
            return FA_OK;
        }
    }
    kern = dc <= 64 ? FA__CU_GENERIC_D64
         : dc <= 128 ? (aligned && d->block_k == 32 ? FA__CU_F32_D128_K32 : FA__CU_GENERIC_D128)
         : FA__CU_GENERIC_D256;
    if (!fa__cu_fits_kernel(kern, d, optin, pl)) return FA_ERR_UNSUPPORTED;
    pl->kernel = kern;
    return FA_OK;
}

/* What fa_cuda_tiled_backward runs for a request: the kernel, its tile (bq query rows a query
   block, bk keys a key block), the key blocks and query blocks of the grids, the shared memory. */
typedef struct fa__cu_bwd_plan {
    fa__cu_bwd_kernel kernel;
    int bq, bk, smem;
    int64_t kblocks, qblocks;
    int sms;                   /* the device's multiprocessors: 2 sms blocks for the flagged kernels */
} fa__cu_bwd_plan;

static const char *fa__cu_bwd_kernel_name(fa__cu_bwd_kernel k)
{
    switch (k) {
    case FA__CU_BWD_D64: return "bwd_ffma_d64";
    case FA__CU_BWD_D128: return "bwd_ffma_d128";
    case FA__CU_BWD_D256: return "bwd_ffma_d256";
    case FA__CU_BWD_TC_D64: return "bwd_tc_d64";
    case FA__CU_BWD_TC_D128: return "bwd_tc_d128";
    case FA__CU_BWD_WG_D64: return "bwd_wg_d64";
    case FA__CU_BWD_WG_D128: return "bwd_wg_d128";
    case FA__CU_BWD_TC32_D64: return "bwd_tc32_d64";
    case FA__CU_BWD_TC32_D128: return "bwd_tc32_d128";
    case FA__CU_BWD_KERNELS: break;
    }
    return "none";
}

template <class CFG> static void fa__cu_bwd_plan_of(const fa__dims *d, fa__cu_bwd_plan *pl)
{
    typedef fa__cu_bgeom<CFG> G;
    pl->bq = G::BQ;
    pl->bk = G::BK;
    pl->smem = G::SMEM;
    pl->kblocks = ((int64_t)d->Sk + G::BK - 1) / G::BK;
    pl->qblocks = ((int64_t)d->Sq + G::BQ - 1) / G::BQ;
}

/* The tensor-core backward's plan: bq, bk the dK/dV kernel's query tile and key block; qblocks
   the deterministic dq kernel's query blocks; smem the larger of the two kernels'. */
template <class CFG> static void fa__tcb_plan_of(const fa__dims *d, fa__cu_bwd_plan *pl)
{
    typedef fa__tcb_kgeom<typename CFG::KV> K;
    typedef fa__tcb_qgeom<typename CFG::DQ> Q;
    pl->bq = K::BQ;
    pl->bk = K::BKV;
    pl->smem = (int)K::SMEM > (int)Q::SMEM ? (int)K::SMEM : (int)Q::SMEM;
    pl->kblocks = ((int64_t)d->Sk + K::BKV - 1) / K::BKV;
    pl->qblocks = ((int64_t)d->Sq + Q::BQ - 1) / Q::BQ;
}

/* The fp32 tensor-core backward's plan (fa__t32_*): bq, bk its query tile and key block; qblocks
   the query blocks of its deterministic turns. */
template <class C> static void fa__t32_plan_of(const fa__dims *d, fa__cu_bwd_plan *pl)
{
    typedef fa__t32_geom<C> G;
    pl->bq = G::BQ;
    pl->bk = G::BKV;
    pl->smem = G::KSMEM;
    pl->kblocks = ((int64_t)d->Sk + G::BKV - 1) / G::BKV;
    pl->qblocks = ((int64_t)d->Sq + G::BQ - 1) / G::BQ;
}

#if FA__WG
/* The Hopper backward's plan (8e3) in configuration C: bq, bk the dK/dV kernel's query tile and
   key block; qblocks the dq kernel's query blocks; smem the larger of the two kernels'. */
template <class C> static void fa__wgb_plan_of(const fa__dims *d, fa__cu_bwd_plan *pl)
{
    typedef fa__wgb_geom<C> K;
    typedef fa__wgq_geom<typename C::DQ> Q;
    pl->bq = K::BQ;
    pl->bk = K::BKV;
    pl->smem = (int)K::SMEM > (int)Q::SMEM ? (int)K::SMEM : (int)Q::SMEM;
    pl->kblocks = ((int64_t)d->Sk + K::BKV - 1) / K::BKV;
    pl->qblocks = ((int64_t)d->Sq + Q::BQ - 1) / Q::BQ;
}

/* FA__CU_BWD_MMA_ONLY nonzero: fa__cu_pick_backward never names the Hopper backward, so that the
   tests and the bench run the mma.sync kernels on an H100/H200 too. A translation unit that
   defines FLASHATTN__TEST_SWITCHES before including the header (tests/test_cuda_backward.cu,
   bench/bench_cuda_backward.cu) gets it as the variable fa__cu_bwd_mma_only; everywhere else it is
   the constant 0, so that the library keeps no mutable global state (API.md). Not part of the API. */
#ifdef FLASHATTN__TEST_SWITCHES
static int fa__cu_bwd_mma_only = 0;
#define FA__CU_BWD_MMA_ONLY fa__cu_bwd_mma_only
#else
#define FA__CU_BWD_MMA_ONLY 0
#endif

/* The Hopper backward for a request the tensor-core backward serves, on a device of compute
   capability major.minor = 9.0 whose loaded code holds the sm_90a bodies (fa__wg_built), whose
   driver encodes tensor maps and whose opt-in shared memory (optin) holds its plan, with q, k, v
   and d_o in layouts TMA takes (fa__wg_tma_ok): 1 with *pl set, else 0 (*pl untouched). */
static int fa__wgb_pick(const fa__dims *d, const void *q, const void *k, const void *v, const void *d_o, int optin,
                        int major, int minor, fa__cu_bwd_plan *pl)
{
    fa__cu_bwd_plan w;
    if (FA__CU_BWD_MMA_ONLY || major != 9 || minor != 0 || !fa__wg_tma_ok(q, d->qs, d->Sq, d->Hq, d->B) ||
        !fa__wg_tma_ok(d_o, d->os, d->Sq, d->Hq, d->B) || !fa__wg_tma_ok(k, d->ks, d->Sk, d->Hkv, d->B) ||
        !fa__wg_tma_ok(v, d->vs, d->Sk, d->Hkv, d->B) || !fa__wg_built() || !fa__wg_encoder())
        return 0;
    memset(&w, 0, sizeof w);
    if (d->D == 64) fa__wgb_plan_of<fa__wgb_d64>(d, &w);
    else fa__wgb_plan_of<fa__wgb_d128>(d, &w);
    if (w.smem > optin) return 0;
    w.kernel = d->D == 64 ? FA__CU_BWD_WG_D64 : FA__CU_BWD_WG_D128;
    *pl = w;
    return 1;
}
#endif

/* The FFMA backward's plan for head-dim class dc (the kernel fa__cu_pick_backward names for it,
   and the tensor-core backward's fallback for calls with non-finite inputs, 8e2). */
static fa__cu_bwd_kernel fa__cu_bwd_ffma_of(const fa__dims *d, int dc, fa__cu_bwd_plan *pl)
{
    const fa__cu_bwd_kernel k = dc <= 64 ? FA__CU_BWD_D64 : dc <= 128 ? FA__CU_BWD_D128 : FA__CU_BWD_D256;
    memset(pl, 0, sizeof *pl);
    if (k == FA__CU_BWD_D64) fa__cu_bwd_plan_of<fa__cu_bwd_d64>(d, pl);
    else if (k == FA__CU_BWD_D128) fa__cu_bwd_plan_of<fa__cu_bwd_d128>(d, pl);
    else fa__cu_bwd_plan_of<fa__cu_bwd_d256>(d, pl);
    pl->kernel = k;
    return k;
}

/* 1 when every row of a tensor of es-byte elements starts 16-byte aligned and its width is whole
   16-byte vectors (fa__cu_bwd_in_tile's loads) */
static int fa__cu_bwd_vec(const void *x, const int64_t s[3], int width, size_t es)
{
    const int64_t n = (int64_t)(16 / es);
    return ((uintptr_t)x & 15) == 0 && width % n == 0 && s[0] % n == 0 && s[1] % n == 0 && s[2] % n == 0;
}

/* 1 when plan pl's shared memory fits (optin bytes) and its grids stay within 2^31 - 1 blocks */
static int fa__cu_bwd_fits(const fa__dims *d, const fa__cu_bwd_plan *pl, int optin)
{
    int64_t a, b;
    return pl->smem <= optin && fa__mul64(pl->kblocks, (int64_t)d->B * d->Hkv, &a) && a <= INT_MAX &&
           fa__mul64(pl->qblocks, (int64_t)d->B * d->Hq, &b) && b <= INT_MAX;
}

/* Picks the backward kernel for a request that fa__cu_bwd_resolve accepted, with Sq, Sk > 0, by
   rule: the tensor-core backward for fp16/bf16 at D = Dv = 64 or 128 where q, k, v, d_o and the
   gradients have 16-byte aligned rows and the device is sm_80+ (every modifier, mask and GQA
   included): on a compute capability 9.0 device running this build's sm_90a code, with q, k, v
   and d_o in layouts TMA takes, its Hopper kernels (fa__wgb_pick, 8e3), elsewhere the mma.sync
   ones; for fp32 under the same head dims, alignment and device (unless FLASHATTN_CUDA_FP32_FFMA),
   its 3xTF32 form (fa__t32_*); else the FFMA backward of the head-dim class of max(D, Dv) (<= 64,
   <= 128, <= 256), any dtype and layout. FA_ERR_UNSUPPORTED when its shared memory (or, for the tensor-core
   backward, that of its FFMA fallback) does not fit this device or a grid would pass 2^31 - 1
   blocks; FA_ERR_DEVICE when the device cannot be queried. It launches nothing. */
static fa_status fa__cu_pick_backward(const fa__dims *d, const void *q, const void *k, const void *v, const void *d_o,
                                      const void *dq, const void *dk, const void *dv, fa__cu_bwd_plan *pl)
{
    const int dc = d->D > d->Dv ? d->D : d->Dv;
    int dev = 0, optin = 0, major = 0, minor = 0, sms = 1;
    fa__cu_bwd_plan fb;
    memset(pl, 0, sizeof *pl);
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return FA_ERR_DEVICE;
    }
    const int tcd = d->D == d->Dv && (d->D == 64 || d->D == 128) && major >= 8;
    if ((d->dtype == FA_F16 || d->dtype == FA_BF16) && tcd && fa__tc_aligned(q, d->qs) && fa__tc_aligned(k, d->ks) &&
        fa__tc_aligned(v, d->vs) && fa__tc_aligned(d_o, d->os) && fa__tc_aligned(dq, d->qs) &&
        fa__tc_aligned(dk, d->ks) && fa__tc_aligned(dv, d->vs)) {
        pl->kernel = d->D == 64 ? FA__CU_BWD_TC_D64 : FA__CU_BWD_TC_D128;
        if (d->D == 64) fa__tcb_plan_of<fa__tcb_d64>(d, pl);
        else fa__tcb_plan_of<fa__tcb_d128>(d, pl);
#if FA__WG
        (void)fa__wgb_pick(d, q, k, v, d_o, optin, major, minor, pl);   /* on an H100/H200: the Hopper backward (8e3) */
#else
        (void)minor;
#endif
        fa__cu_bwd_ffma_of(d, dc, &fb);
        if (!fa__cu_bwd_fits(d, &fb, optin)) return FA_ERR_UNSUPPORTED;
    } else if (FA__CU_BWD_TC32 && d->dtype == FA_F32 && tcd && fa__cu_bwd_vec(q, d->qs, d->D, 4) &&
               fa__cu_bwd_vec(k, d->ks, d->D, 4) && fa__cu_bwd_vec(v, d->vs, d->D, 4) &&
               fa__cu_bwd_vec(d_o, d->os, d->D, 4) && fa__cu_bwd_vec(dq, d->qs, d->D, 4) &&
               fa__cu_bwd_vec(dk, d->ks, d->D, 4) && fa__cu_bwd_vec(dv, d->vs, d->D, 4)) {
        pl->kernel = d->D == 64 ? FA__CU_BWD_TC32_D64 : FA__CU_BWD_TC32_D128;
        if (d->D == 64) fa__t32_plan_of<fa__t32_d64>(d, pl);
        else fa__t32_plan_of<fa__t32_d128>(d, pl);
        fa__cu_bwd_ffma_of(d, dc, &fb);
        if (!fa__cu_bwd_fits(d, &fb, optin)) return FA_ERR_UNSUPPORTED;
    } else {
        fa__cu_bwd_ffma_of(d, dc, pl);
    }
    pl->sms = sms;
    return fa__cu_bwd_fits(d, pl, optin) ? FA_OK : FA_ERR_UNSUPPORTED;
}

/* Launches the FFMA backward's kernels in configuration CFG (fa__cu_pick_backward has checked
   that they fit): fa__cu_bwd_dkv with dq in way dqm (FA__BWD_DQ_*: by atomics into dqacc, by
   atomics in key-block order into dqacc with turns, or none), then with none fa__cu_bwd_dq.
   FIN false: they run only for a call whose flag is clear (no non-finite q, d_o or k), a block a
   tile; FIN true: only for a call whose flag is set (section 8e2's rule for non-finite inputs), on
   at most cap blocks that walk the tiles, so that they return at once, and cheaply, when it is
   clear. Turns need every block that a block waits on started, which cap blocks walking tiles
   do not promise: FIN takes the separate dq pass instead (writing dq itself). */
template <typename T, class CFG, bool FIN>
static fa_status fa__cu_bwd_launch(const fa__dims *d, const fa__cu_bwd_plan *pl, int dqm, const void *q,
                                   const void *k, const void *v, const void *d_o, const float *delta,
                                   const float *kbad, const unsigned *flag, int64_t cap, float *dqacc,
                                   unsigned *turns, void *dq, void *dk, void *dv, cudaStream_t st)
{
    typedef fa__cu_bgeom<CFG> G;
    const int64_t nk = pl->kblocks * d->B * d->Hkv, nq = pl->qblocks * d->B * d->Hq;
    const unsigned kgrid = (unsigned)(FIN && nk > cap ? cap : nk), qgrid = (unsigned)(FIN && nq > cap ? cap : nq);
    const int vec = (fa__cu_bwd_vec(q, d->qs, d->D, sizeof(T)) && fa__cu_bwd_vec(d_o, d->os, d->Dv, sizeof(T))) |
                    (fa__cu_bwd_vec(k, d->ks, d->D, sizeof(T)) && fa__cu_bwd_vec(v, d->vs, d->Dv, sizeof(T))) << 1;
    const int m = FIN && dqm == FA__BWD_DQ_TURNS ? FA__BWD_DQ_NONE : dqm;
    auto dkv = m == FA__BWD_DQ_NONE ? fa__cu_bwd_dkv<T, CFG, FA__BWD_DQ_NONE, FIN>
             : m == FA__BWD_DQ_ATOMIC ? fa__cu_bwd_dkv<T, CFG, FA__BWD_DQ_ATOMIC, FIN>
             : fa__cu_bwd_dkv<T, CFG, FIN ? FA__BWD_DQ_NONE : FA__BWD_DQ_TURNS, FIN>;
    fa_status s;
    if ((s = fa__cu(cudaFuncSetAttribute(dkv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)G::SMEM))) != FA_OK)
        return s;
    if (CFG::MINB > 1 &&
        (s = fa__cu(cudaFuncSetAttribute(dkv, cudaFuncAttributePreferredSharedMemoryCarveout, 100))) != FA_OK)
        return s;
    dkv<<<kgrid, FA__CU_THREADS, G::SMEM, st>>>(*d, (const T *)q, (const T *)k, (const T *)v, (const T *)d_o, delta, kbad,
                                              flag, nk, dqacc, turns, (T *)dk, (T *)dv, vec);
    if ((s = fa__cu(cudaGetLastError())) != FA_OK || m != FA__BWD_DQ_NONE) return s;
    if ((s = fa__cu(cudaFuncSetAttribute(fa__cu_bwd_dq<T, CFG, FIN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)G::SMEM))) != FA_OK)
        return s;
    fa__cu_bwd_dq<T, CFG, FIN><<<qgrid, FA__CU_THREADS, G::SMEM, st>>>(
        *d, (const T *)q, (const T *)k, (const T *)v, (const T *)d_o, delta, kbad, flag, nq, (T *)dq, (int)pl->qblocks, vec);
    return fa__cu(cudaGetLastError());
}

/* The FFMA backward in configuration CFG for a call: the kernels for finite inputs, then the ones
   for a flagged call (one of the two returns at once); cap as for fa__cu_bwd_launch. */
template <typename T, class CFG>
static fa_status fa__cu_bwd_launch2(const fa__dims *d, const fa__cu_bwd_plan *pl, int dqm, const void *q,
                                    const void *k, const void *v, const void *d_o, const float *delta,
                                    const float *kbad, const unsigned *flag, int64_t cap, float *dqacc,
                                    unsigned *turns, void *dq, void *dk, void *dv, cudaStream_t st)
{
    const fa_status s = fa__cu_bwd_launch<T, CFG, false>(d, pl, dqm, q, k, v, d_o, delta, kbad, flag, cap, dqacc,
                                                         turns, dq, dk, dv, st);
    if (s != FA_OK) return s;
    return fa__cu_bwd_launch<T, CFG, true>(d, pl, dqm, q, k, v, d_o, delta, kbad, flag, cap, dqacc, turns, dq, dk, dv,
                                           st);
}

/* Launches kern, a kernel of the tensor-core backwards (8e2), on grid blocks of nt threads with smem
   bytes of shared memory; carve: ask for the largest shared-memory carveout (the dq kernels that
   run more than one block an SM). */
static fa_status fa__tcb_go(void (*kern)(const fa__tcb_args), int smem, int nt, int carve, const fa__tcb_args &a,
                            unsigned grid, cudaStream_t st)
{
    fa_status s = fa__cu(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (s != FA_OK) return s;
    if (carve &&
        (s = fa__cu(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100))) != FA_OK)
        return s;
    kern<<<grid, nt, smem, st>>>(a);
    return fa__cu(cudaGetLastError());
}

/* Launches the tensor-core dK/dV kernel (DQ: with dq by atomics) or the deterministic dq kernel
   of configuration C. */
template <typename T, class C, bool MODS, bool DQ>
static fa_status fa__tcb_go_dkv(const fa__tcb_args &a, unsigned grid, cudaStream_t st)
{
    return fa__tcb_go(fa__tcb_dkv<T, C, MODS, DQ>, (int)fa__tcb_kgeom<C>::SMEM, C::NW * 32, 0, a, grid, st);
}

template <typename T, class C, bool MODS>
static fa_status fa__tcb_go_dq(const fa__tcb_args &a, unsigned grid, cudaStream_t st)
{
    return fa__tcb_go(fa__tcb_dq<T, C, MODS>, (int)fa__tcb_qgeom<C>::SMEM, C::NW * 32, C::MINB > 1, a, grid, st);
}

/* The kernel arguments of a call (dqacc NULL: dq by a dq kernel) */
static fa__tcb_args fa__tcb_args_of(const fa__dims *d, const fa__cu_bwd_plan *pl, const void *q, const void *k,
                                    const void *v, const void *d_o, const float *delta, const unsigned *flag,
                                    float *dqacc, void *dq, void *dk, void *dv)
{
    fa__tcb_args a;
    a.q = q; a.k = k; a.v = v; a.d_o = d_o; a.delta = delta; a.dqacc = dqacc; a.flag = flag; a.turns = NULL;
    a.dq = dq; a.dk = dk; a.dv = dv;
    a.qblocks = (int)pl->qblocks;
    a.d = *d;
    return a;
}

/* The tensor-core backward in configuration CFG (fa__cu_pick_backward has checked that it fits):
   the dK/dV kernel with dq by atomics into dqacc, or (det) without, then the dq kernel. MODS
   variants: none (the scale folded into the exp), or softcap, ALiBi, bias decided at run time. */
template <typename T, class CFG>
static fa_status fa__tcb_launch(const fa__dims *d, const fa__cu_bwd_plan *pl, int det, const void *q, const void *k,
                                const void *v, const void *d_o, const float *delta, const unsigned *flag,
                                float *dqacc, void *dq, void *dk, void *dv, cudaStream_t st)
{
    typedef typename CFG::KV KV;
    typedef typename CFG::DQ DQ;
    const unsigned kgrid = (unsigned)(pl->kblocks * d->B * d->Hkv), qgrid = (unsigned)(pl->qblocks * d->B * d->Hq);
    const bool mods = d->softcap > 0.0f || d->alibi != NULL || d->bias != NULL;
    const fa__tcb_args a = fa__tcb_args_of(d, pl, q, k, v, d_o, delta, flag, dqacc, dq, dk, dv);
    fa_status s;
    if (!det) return mods ? fa__tcb_go_dkv<T, KV, true, true>(a, kgrid, st) : fa__tcb_go_dkv<T, KV, false, true>(a, kgrid, st);
    s = mods ? fa__tcb_go_dkv<T, KV, true, false>(a, kgrid, st) : fa__tcb_go_dkv<T, KV, false, false>(a, kgrid, st);
    if (s != FA_OK) return s;
    return mods ? fa__tcb_go_dq<T, DQ, true>(a, qgrid, st) : fa__tcb_go_dq<T, DQ, false>(a, qgrid, st);
}

#if FA__CU_BWD_TC32
/* The fp32 tensor-core backward (3xTF32) in configuration C: its dK/dV kernel with dq by atomics
   into dqacc, in key-block turns where turns is not NULL (fa__cu_pick_backward has checked that it
   fits; the workspace of every deterministic fp32 call holds the turns, fa__cu_tbwd_layout). */
template <class C>
static fa_status fa__t32_launch(const fa__dims *d, const fa__cu_bwd_plan *pl, unsigned *turns, const void *q,
                                const void *k, const void *v, const void *d_o, const float *delta,
                                const unsigned *flag, float *dqacc, void *dq, void *dk, void *dv, cudaStream_t st)
{
    typedef fa__t32_geom<C> G;
    const unsigned kgrid = (unsigned)(pl->kblocks * d->B * d->Hkv);
    const bool mods = d->softcap > 0.0f || d->alibi != NULL || d->bias != NULL;
    fa__tcb_args a = fa__tcb_args_of(d, pl, q, k, v, d_o, delta, flag, dqacc, dq, dk, dv);
    a.turns = turns;
    if (turns)
        return fa__tcb_go(mods ? fa__t32_dkv<C, true, FA__BWD_DQ_TURNS> : fa__t32_dkv<C, false, FA__BWD_DQ_TURNS>, G::KSMEM,
                          G::KNT, 0, a, kgrid, st);
    return fa__tcb_go(mods ? fa__t32_dkv<C, true, FA__BWD_DQ_ATOMIC> : fa__t32_dkv<C, false, FA__BWD_DQ_ATOMIC>, G::KSMEM,
                      G::KNT, 0, a, kgrid, st);
}
#endif

#if FA__WG
/* The tensor maps of the Hopper backward's kernels (8e3): q and d_o in boxes of bq rows, k and v of
   bk; 0 when the driver cannot encode them. */
static int fa__wgb_maps(const fa__tcb_args &a, int bq, int bk, fa__wgb_args *w)
{
    const fa__dims &d = a.d;
    const fa__wg_encode_fn enc = fa__wg_encoder();
    w->a = a;
    w->hmaj = 0;
    return enc && fa__wg_map(enc, &w->tq, a.q, d.dtype, d.D, d.Sq, d.Hq, d.B, d.qs, bq) &&
           fa__wg_map(enc, &w->to, a.d_o, d.dtype, d.D, d.Sq, d.Hq, d.B, d.os, bq) &&
           fa__wg_map(enc, &w->tk, a.k, d.dtype, d.D, d.Sk, d.Hkv, d.B, d.ks, bk) &&
           fa__wg_map(enc, &w->tv, a.v, d.dtype, d.D, d.Sk, d.Hkv, d.B, d.vs, bk);
}

/* Launches one of the Hopper backward's kernels, kern (fa__wgb_dkv or fa__wgq_dq), on grid blocks of
   nt threads with smem bytes of shared memory, its tensor maps in boxes of bq (q, d_o) and bk (k, v)
   rows (FA_ERR_DEVICE when the maps cannot be had). */
static fa_status fa__wgb_go(void (*kern)(const fa__wgb_args), int smem, int nt, int bq, int bk, const fa__tcb_args &a,
                            unsigned grid, cudaStream_t st)
{
    fa__wgb_args w;
    fa_status s;
    if (!fa__wgb_maps(a, bq, bk, &w)) return FA_ERR_DEVICE;
    s = fa__cu(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (s != FA_OK) return s;
    kern<<<grid, nt, smem, st>>>(w);
    return fa__cu(cudaGetLastError());
}

template <typename T, class C, bool MODS>
static fa_status fa__wgb_go_dkv(const fa__tcb_args &a, unsigned grid, cudaStream_t st)
{
    return fa__wgb_go(fa__wgb_dkv<T, C, MODS>, (int)fa__wgb_geom<C>::SMEM, C::NT, C::BQ, C::BKV, a, grid, st);
}

template <typename T, class C, bool MODS>
static fa_status fa__wgq_go_dq(const fa__tcb_args &a, unsigned grid, cudaStream_t st)
{
    return fa__wgb_go(fa__wgq_dq<T, C, MODS>, (int)fa__wgq_geom<C>::SMEM, C::NT, C::BQ, C::BK, a, grid, st);
}

/* fa__wgb_both in configuration C: kgrid dK/dV blocks, then qgrid dq blocks, one launch; hmaj: each
   kernel's blocks in head-major order (a (batch, head)'s blocks adjacent; the bench's variant). */
template <typename T, class C, bool MODS>
static fa_status fa__wgb_go_both(const fa__tcb_args &a, unsigned kgrid, unsigned qgrid, cudaStream_t st, int hmaj = 0)
{
    typedef typename C::DQ Q;
    const int sk = (int)fa__wgb_geom<C>::SMEM, sq = (int)fa__wgq_geom<Q>::SMEM, smem = sk > sq ? sk : sq;
    fa__wgb_args2 w;
    fa_status s;
    if (!fa__wgb_maps(a, C::BQ, C::BKV, &w.k) || !fa__wgb_maps(a, Q::BQ, Q::BK, &w.q)) return FA_ERR_DEVICE;
    w.kgrid = (int)kgrid;
    w.k.hmaj = w.q.hmaj = hmaj;
    s = fa__cu(cudaFuncSetAttribute((const void *)fa__wgb_both<T, C, MODS>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (s != FA_OK) return s;
    fa__wgb_both<T, C, MODS><<<kgrid + qgrid, C::NT, smem, st>>>(w);
    return fa__cu(cudaGetLastError());
}

/* The Hopper backward in configuration C (fa__cu_pick_backward has checked that it fits), in
   either mode: the dK/dV kernel and the dq kernel writing dq, in one grid (fa__wgb_both). MODS
   variants as fa__tcb_launch's. */
template <typename T, class C>
static fa_status fa__wgb_launch(const fa__dims *d, const fa__cu_bwd_plan *pl, const void *q, const void *k,
                                const void *v, const void *d_o, const float *delta, const unsigned *flag, void *dq,
                                void *dk, void *dv, cudaStream_t st)
{
    const unsigned kgrid = (unsigned)(pl->kblocks * d->B * d->Hkv), qgrid = (unsigned)(pl->qblocks * d->B * d->Hq);
    const bool mods = d->softcap > 0.0f || d->alibi != NULL || d->bias != NULL;
    const fa__tcb_args a = fa__tcb_args_of(d, pl, q, k, v, d_o, delta, flag, NULL, dq, dk, dv);
    return mods ? fa__wgb_go_both<T, C, true>(a, kgrid, qgrid, st) : fa__wgb_go_both<T, C, false>(a, kgrid, qgrid, st);
}
#endif

/* The tensor-core backwards of the 16-bit types (det: dq by their dq kernels; turns unused); fp32's
   (3xTF32) below (turns: its deterministic dq, else atomics). */
template <typename T>
static fa_status fa__tcb_dispatch(const fa__dims *d, const fa__cu_bwd_plan *pl, int det, unsigned *turns, const void *q,
                                  const void *k, const void *v, const void *d_o, const float *delta,
                                  const unsigned *flag, float *dqacc, void *dq, void *dk, void *dv, cudaStream_t st)
{
    (void)turns;
#if FA__WG
    if (pl->kernel == FA__CU_BWD_WG_D64) return fa__wgb_launch<T, fa__wgb_d64>(d, pl, q, k, v, d_o, delta, flag, dq, dk, dv, st);
    if (pl->kernel == FA__CU_BWD_WG_D128) return fa__wgb_launch<T, fa__wgb_d128>(d, pl, q, k, v, d_o, delta, flag, dq, dk, dv, st);
#endif
    if (pl->kernel == FA__CU_BWD_TC_D64)
        return fa__tcb_launch<T, fa__tcb_d64>(d, pl, det, q, k, v, d_o, delta, flag, dqacc, dq, dk, dv, st);
    return fa__tcb_launch<T, fa__tcb_d128>(d, pl, det, q, k, v, d_o, delta, flag, dqacc, dq, dk, dv, st);
}

template <>
fa_status fa__tcb_dispatch<float>(const fa__dims *d, const fa__cu_bwd_plan *pl, int det, unsigned *turns,
                                  const void *q, const void *k, const void *v, const void *d_o, const float *delta,
                                  const unsigned *flag, float *dqacc, void *dq, void *dk, void *dv, cudaStream_t st)
{
    (void)det;   /* deterministic: turns */
#if FA__CU_BWD_TC32
    if (pl->kernel == FA__CU_BWD_TC32_D64)
        return fa__t32_launch<fa__t32_d64>(d, pl, turns, q, k, v, d_o, delta, flag, dqacc, dq, dk, dv, st);
    return fa__t32_launch<fa__t32_d128>(d, pl, turns, q, k, v, d_o, delta, flag, dqacc, dq, dk, dv, st);
#else   /* FLASHATTN_CUDA_FP32_FFMA: the picker never names it */
    (void)d; (void)pl; (void)turns; (void)q; (void)k; (void)v; (void)d_o; (void)delta; (void)flag; (void)dqacc;
    (void)dq; (void)dk; (void)dv; (void)st;
    return FA_ERR_UNSUPPORTED;
#endif
}

/* Launches the generic kernel in configuration CFG (fa__cu_pick has checked that it fits). */
template <typename T, class CFG>
static fa_status fa__cu_generic_launch(const fa__dims *d, const void *q, const void *k, const void *v, void *o,
                                       cudaStream_t st)
{
    typedef fa__cu_geom<CFG> C;
    const int64_t qtiles = (d->Sq + C::BQ - 1) / C::BQ, blocks = fa__cu_qblocks(d, C::BQ);
    fa_status s;
    if ((s = fa__cu(cudaFuncSetAttribute(fa__cu_generic<T, CFG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)C::SMEM))) != FA_OK)
        return s;
    if (C::MINB > 1 &&
        (s = fa__cu(cudaFuncSetAttribute(fa__cu_generic<T, CFG>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         100))) != FA_OK)
        return s;
    fa__cu_generic<T, CFG><<<(unsigned)blocks, FA__CU_THREADS, C::SMEM, st>>>(
        *d, (const T *)q, (const T *)k, (const T *)v, (T *)o, (int)qtiles,
        fa__cu_vec16(d, q, d->qs, d->D) | fa__cu_vec16(d, k, d->ks, d->D) << 1 | fa__cu_vec16(d, v, d->vs, d->Dv) << 2);
    return fa__cu(cudaGetLastError());
}

/* Launches the tensor-core kernel in configuration C, modifier variant mods (fa__cu_pick's). */
template <typename T, class C>
static fa_status fa__tc_launch(const fa__dims *d, int mods, const void *q, const void *k, const void *v, void *o,
                               cudaStream_t stream)
{
    typedef fa__tc_geom<C> G;
    void (*kern)(const fa__tc_args) = mods == 4 ? fa__tc_fwd<T, C, 4>
                                    : mods == 1 ? fa__tc_fwd<T, C, 1>
                                    : mods == 2 ? fa__tc_fwd<T, C, 2>
                                                : fa__tc_fwd<T, C, 0>;
    fa__tc_args a;
    if (d->Sq == 0) return FA_OK;
    memset(&a, 0, sizeof a);
    a.d = *d;
    a.q = q; a.k = k; a.v = v; a.o = o;
    if (cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)G::SMEM) != cudaSuccess)
        return FA_ERR_DEVICE;
    kern<<<(unsigned)fa__cu_qblocks(d, G::BQ), G::NT, G::SMEM, stream>>>(a);
    return cudaGetLastError() == cudaSuccess ? FA_OK : FA_ERR_DEVICE;
}

#if FA__WG
/* Launches the Hopper kernel (8d3) in configuration C, modifier variant mods (fa__wg_pick's; one
   instance kern in fa__wg_run): its three tensor maps encoded on the host (FA_ERR_DEVICE if the
   driver refuses one), a 1-D grid of B Hq query tiles in fa__cu_qtile's order, or with C::PER at most
   one block an SM, each walking its items (section 1's fa__sched_item). */
template <class C>
static fa_status fa__wg_run(const fa__dims *d, void (*kern)(const fa__wg_args), const void *q, const void *k,
                            const void *v, void *o, cudaStream_t stream)
{
    typedef fa__wg_geom<C> G;
    const fa__wg_encode_fn enc = fa__wg_encoder();
    fa__wg_args w;
    if (!enc) return FA_ERR_DEVICE;
    memset(&w, 0, sizeof w);
    w.a.d = *d;
    w.a.q = q; w.a.k = k; w.a.v = v; w.a.o = o;
    if (!fa__wg_map(enc, &w.tq, q, d->dtype, C::D, d->Sq, d->Hq, d->B, d->qs, G::BQ) ||
        !fa__wg_map(enc, &w.tk, k, d->dtype, C::D, d->Sk, d->Hkv, d->B, d->ks, G::BK) ||
        !fa__wg_map(enc, &w.tv, v, d->dtype, C::D, d->Sk, d->Hkv, d->B, d->vs, G::BK))
        return FA_ERR_DEVICE;
    if (cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)G::SMEM) != cudaSuccess) {
        (void)cudaGetLastError();
        return FA_ERR_DEVICE;
    }
    int64_t grid = fa__cu_qblocks(d, G::BQ);
    if (C::PER != 0) {   /* persistent: one block an SM (the shared memory allows no second), each walking items */
        int dev = 0, sms = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            return FA_ERR_DEVICE;
        }
        if (sms > 0 && grid > sms) grid = sms;
    }
    kern<<<(unsigned)grid, C::WG, G::SMEM, stream>>>(w);
    return fa__cu(cudaGetLastError());
}

/* C serves modifier variants 0-2, C4 variant 4 (8a: fa__wg_d64x2 at D = 64). */
template <typename T, class C, class C4>
static fa_status fa__wg_launch(const fa__dims *d, int mods, const void *q, const void *k, const void *v, void *o,
                               cudaStream_t stream)
{
    if (mods == 4) return fa__wg_run<C4>(d, fa__wg_fwd<T, C4, 4>, q, k, v, o, stream);
    return fa__wg_run<C>(d, mods == 1 ? fa__wg_fwd<T, C, 1> : mods == 2 ? fa__wg_fwd<T, C, 2> : fa__wg_fwd<T, C, 0>, q, k,
                         v, o, stream);
}
#endif

/* FA__CU_DEC_PDL: which decode launches take the programmatic-dependent-launch attribute (on a device
   of compute capability 9.0 and later, CUDA 12+): bit 0 the merge (its blocks launch while the
   split kernel's last blocks run, and wait in fa__cu_dep_wait), bit 1 the split kernel (its blocks
   launch while the grid before it in the stream, e.g. the last call's merge, drains). Both kernels
   call fa__cu_dep_go at their start and fa__cu_dep_wait before their first global access, so each
   is ordered after the whole of the grid before it either way. -1 (the library's setting): bit 0
   always; bit 1 for a tensor-core split grid that fills at least 15/16 of the SMs' MINB slots
   (several waves, or B = 8 MQA's 256 blocks of 2 an SM). Measured (bench/RESULTS.md, CUDA decode,
   "Host work once per device"): the merge by PDL saves 1.2-2.2 us a call at B = 1; both by PDL
   cost 10-23% at B = 1, Sk >= 32k (256 blocks in 396 slots; the likely cause, not checked: the
   next call's blocks take the free slots while this call's split still runs, and then stand
   unevenly over the SMs) and save 1-2% where the grid leaves no slots free.
   A translation unit that defines FLASHATTN__TEST_SWITCHES (tests/test_cuda.cu,
   bench/bench_cuda.cu) gets it as the variable fa__cu_dec_pdl, to force and time each setting
   0..3; elsewhere it is the constant -1. Not part of the API. */
#ifdef FLASHATTN__TEST_SWITCHES
static int fa__cu_dec_pdl = -1;
#define FA__CU_DEC_PDL fa__cu_dec_pdl
#else
#define FA__CU_DEC_PDL (-1)
#endif

/* kern<<<grid, block, smem, st>>>(args...), with `dep` the programmatic-dependent-launch attribute
   (fa__cu_dep_go, fa__cu_dep_wait): the CUDA error of the launch. */
template <typename... P, typename... A>
static cudaError_t fa__cu_launch_dep(void (*kern)(P...), dim3 grid, dim3 block, int smem, cudaStream_t st, int dep,
                                     const A &...args)
{
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12000
    cudaLaunchConfig_t cfg = cudaLaunchConfig_t();
    cudaLaunchAttribute at[1];
    memset(at, 0, sizeof at);
    cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = (size_t)smem; cfg.stream = st;
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = dep ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kern, args...);
#else
    (void)dep;
    kern<<<grid, block, smem, st>>>(args...);
    return cudaGetLastError();
#endif
}

/* A decode split kernel's attributes on device dev: its dynamic shared memory (smem bytes) and, with
   carve, the largest shared-memory carveout (MINB > 1 blocks an SM; 3 x 68 KB at D = 128). Set
   once per (kernel, device): once[dev] (the kernel's own zero-initialised flags, FA__CU_MAX_DEVICES of
   them, written and read as fa__cu_facts_of's slots; setting twice is harmless) records that it
   was; `force` sets them again (fa__dec_run, after a launch refused because a cudaDeviceReset
   forgot them). */
static fa_status fa__cu_kern_attrs(const void *kern, int smem, int carve, int *once, int dev, int force)
{
    fa_status s;
    const int slot = dev >= 0 && dev < FA__CU_MAX_DEVICES;
    if (!force && slot && fa__load_int(&once[dev])) return FA_OK;
    if ((s = fa__cu(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem))) != FA_OK) return s;
    if (carve && (s = fa__cu(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100))) != FA_OK)
        return s;
    if (slot) fa__store_int(&once[dev], 1);
    return FA_OK;
}

/* Runs the decode path fa__cu_pick chose (8d2) on storage type T, its split kernel `kern` (smem
   bytes of shared memory, `threads` a block, pl->bq packed rows a block; its attributes set once
   per device, fa__cu_kern_attrs, with `carve` and `once`): the workspace allocated stream-ordered
   (fa__cu_alloc: cudaMallocAsync on the stream where the device has memory pools), the split
   kernel, the merge (with FA__CU_DEC_PDL's launch attributes where the device has them; minb: the
   split kernel's blocks an SM, 0 for the FFMA kernels, which take the merge's alone), the
   workspace freed behind them on the same stream. The host work of a call: the device's facts and
   the kernel's attributes looked up (set on the first call only), the allocation, two launches,
   the free. */
template <typename T>
static fa_status fa__dec_run(const fa__cu_plan *pl, const fa__dims *d, const void *q, const void *k, const void *v,
                             void *o, cudaStream_t st, void (*kern)(const fa__dec_args), int smem, int threads, int carve,
                             int minb, int *once)
{
    const size_t bytes = fa__cu_dec_bytes(d, pl->chunks);
    const int64_t rows = (int64_t)d->B * d->Hq * d->Sq;
    fa__cu_facts f;
    fa__dec_args a;
    int dev = 0, pooled = 0, dep;
    int64_t blocks;
    fa_status s, s2;
    cudaError_t e;
    void *ws = NULL;
    dim3 grid;
    memset(&a, 0, sizeof a);
    a.d = *d;
    a.q = q; a.k = k; a.v = v;
    a.chunk = pl->chunk;
    a.chunks = pl->chunks;
    a.rblocks = (d->group * d->Sq + pl->bq - 1) / pl->bq;
    if ((s = fa__cu_facts_of(&dev, &f)) != FA_OK) return s;
    blocks = (int64_t)a.rblocks * a.chunks * d->Hkv * d->B;
    dep = f.major < 9 ? 0 : FA__CU_DEC_PDL >= 0 ? FA__CU_DEC_PDL
        : 1 | (minb > 0 && blocks >= (int64_t)minb * (f.sms - f.sms / 16) ? 2 : 0);
    if ((s = fa__cu_kern_attrs((const void *)kern, smem, carve, once, dev, 0)) != FA_OK) return s;
    if ((s = fa__cu_alloc(&ws, bytes, st, &pooled)) != FA_OK) return s;
    a.wo = (float *)ws;
    a.wl = a.wo + (size_t)rows * pl->chunks * d->Dv;
    grid = dim3((unsigned)(a.rblocks * a.chunks), (unsigned)d->Hkv, (unsigned)d->B);
    e = fa__cu_launch_dep(kern, grid, dim3((unsigned)threads), smem, st, dep & 2, a);
    if (e != cudaSuccess && smem > 48 * 1024) {   /* the attributes forgotten (cudaDeviceReset): set them, once more */
        (void)cudaGetLastError();
        if (fa__cu_kern_attrs((const void *)kern, smem, carve, once, dev, 1) == FA_OK)
            e = fa__cu_launch_dep(kern, grid, dim3((unsigned)threads), smem, st, dep & 2, a);
    }
    s = fa__cu(e);
    if (s == FA_OK)
        s = fa__cu(fa__cu_launch_dep(fa__cu_dec_merge<T>, dim3((unsigned)rows), dim3(FA__CU_DEC_THREADS), 0, st, dep & 1, *d,
                                     (const float *)a.wo, (const float *)a.wl, a.chunks, (T *)o));
    if (s != FA_OK) (void)cudaGetLastError();
    s2 = fa__cu_free(ws, st, pooled);
    return s != FA_OK ? s : s2;
}

/* The tensor-core decode kernel of configuration C (its attributes: the largest shared-memory
   carveout when MINB > 1, as the other MINB > 1 kernels ask), then fa__dec_run. */
template <typename T, class C>
static fa_status fa__dec_tc_launch(const fa__cu_plan *pl, const fa__dims *d, const void *q, const void *k,
                                   const void *v, void *o, cudaStream_t st)
{
    static int once[2][FA__CU_MAX_DEVICES];   /* fa__cu_kern_attrs's flags, per modifier variant (0, 4) */
    void (*kern)(const fa__dec_args) = pl->mods ? fa__dec_tc<T, C, 4> : fa__dec_tc<T, C, 0>;
    return fa__dec_run<T>(pl, d, q, k, v, o, st, kern, (int)fa__dec_geom<C>::SMEM, C::NW * 32, C::MINB > 1, C::MINB,
                          once[pl->mods ? 1 : 0]);
}

template <typename T>
static fa_status fa__dec_ffma_launch(const fa__cu_plan *pl, const fa__dims *d, const void *q, const void *k,
                                     const void *v, void *o, cudaStream_t st)
{
    static int once[3][FA__CU_MAX_DEVICES];   /* fa__cu_kern_attrs's flags, per head-dim class */
    switch (pl->kernel) {
    case FA__CU_DEC_D64:
        return fa__dec_run<T>(pl, d, q, k, v, o, st, fa__dec_ffma<T, 64>, fa__dec_ffma_geom<64>::SMEM, FA__CU_DEC_THREADS, 0, 0,
                              once[0]);
    case FA__CU_DEC_D128:
        return fa__dec_run<T>(pl, d, q, k, v, o, st, fa__dec_ffma<T, 128>, fa__dec_ffma_geom<128>::SMEM, FA__CU_DEC_THREADS, 0, 0,
                              once[1]);
    case FA__CU_DEC_D256:
        return fa__dec_run<T>(pl, d, q, k, v, o, st, fa__dec_ffma<T, 256>, fa__dec_ffma_geom<256>::SMEM, FA__CU_DEC_THREADS, 0, 0,
                              once[2]);
    default: return FA_ERR_UNSUPPORTED;
    }
}

/* Runs what fa__cu_pick chose: the generic kernels on T by dtype (the aligned-fp32 ones on float),
   the tensor-core kernels on fp16 or bf16. */
template <typename T>
static fa_status fa__cu_launch_t(const fa__cu_plan *pl, const fa__dims *d, const void *q, const void *k,
                                 const void *v, void *o, cudaStream_t st)
{
    switch (pl->kernel) {
    case FA__CU_GENERIC_D64: return fa__cu_generic_launch<T, fa__cu_generic_d64>(d, q, k, v, o, st);
    case FA__CU_GENERIC_D128: return fa__cu_generic_launch<T, fa__cu_generic_d128>(d, q, k, v, o, st);
    case FA__CU_GENERIC_D256: return fa__cu_generic_launch<T, fa__cu_generic_d256>(d, q, k, v, o, st);
    default: return FA_ERR_UNSUPPORTED;
    }
}

static fa_status fa__cu_launch(const fa__cu_plan *pl, const fa__dims *d, const void *q, const void *k,
                               const void *v, void *o, cudaStream_t st)
{
    switch (pl->kernel) {
    case FA__CU_DEC_TC_D64:
        return d->dtype == FA_BF16 ? fa__dec_tc_launch<__nv_bfloat16, fa__dec_d64>(pl, d, q, k, v, o, st)
                                   : fa__dec_tc_launch<__half, fa__dec_d64>(pl, d, q, k, v, o, st);
    case FA__CU_DEC_TC_D128:
        return d->dtype == FA_BF16 ? fa__dec_tc_launch<__nv_bfloat16, fa__dec_d128>(pl, d, q, k, v, o, st)
                                   : fa__dec_tc_launch<__half, fa__dec_d128>(pl, d, q, k, v, o, st);
    case FA__CU_DEC_TC_D64_R32:
        return d->dtype == FA_BF16 ? fa__dec_tc_launch<__nv_bfloat16, fa__dec_d64_r32>(pl, d, q, k, v, o, st)
                                   : fa__dec_tc_launch<__half, fa__dec_d64_r32>(pl, d, q, k, v, o, st);
    case FA__CU_DEC_TC_D128_R32:
        return d->dtype == FA_BF16 ? fa__dec_tc_launch<__nv_bfloat16, fa__dec_d128_r32>(pl, d, q, k, v, o, st)
                                   : fa__dec_tc_launch<__half, fa__dec_d128_r32>(pl, d, q, k, v, o, st);
    case FA__CU_DEC_D64:
    case FA__CU_DEC_D128:
    case FA__CU_DEC_D256:
        return d->dtype == FA_BF16 ? fa__dec_ffma_launch<__nv_bfloat16>(pl, d, q, k, v, o, st)
             : d->dtype == FA_F16 ? fa__dec_ffma_launch<__half>(pl, d, q, k, v, o, st)
                                  : fa__dec_ffma_launch<float>(pl, d, q, k, v, o, st);
#if FA__WG
    case FA__CU_WG_D128:
        return d->dtype == FA_BF16 ? fa__wg_launch<__nv_bfloat16, fa__wg_d128, fa__wg_d128>(d, pl->mods, q, k, v, o, st)
                                   : fa__wg_launch<__half, fa__wg_d128, fa__wg_d128>(d, pl->mods, q, k, v, o, st);
    case FA__CU_WG_D64:   /* the block fa__wg_pick chose (fa__wg_wide) */
        if (pl->bq == (int)fa__wg_geom<fa__wg_d64>::BQ)
            return d->dtype == FA_BF16 ? fa__wg_launch<__nv_bfloat16, fa__wg_d64, fa__wg_d64x2>(d, pl->mods, q, k, v, o, st)
                                       : fa__wg_launch<__half, fa__wg_d64, fa__wg_d64x2>(d, pl->mods, q, k, v, o, st);
        return d->dtype == FA_BF16 ? fa__wg_launch<__nv_bfloat16, fa__wg_d64x2, fa__wg_d64x2>(d, pl->mods, q, k, v, o, st)
                                   : fa__wg_launch<__half, fa__wg_d64x2, fa__wg_d64x2>(d, pl->mods, q, k, v, o, st);
#endif
    case FA__CU_TC_D64:
        return d->dtype == FA_BF16 ? fa__tc_launch<__nv_bfloat16, fa__tc_d64>(d, pl->mods, q, k, v, o, st)
                                   : fa__tc_launch<__half, fa__tc_d64>(d, pl->mods, q, k, v, o, st);
    case FA__CU_TC_D128:
        return d->dtype == FA_BF16 ? fa__tc_launch<__nv_bfloat16, fa__tc_d128>(d, pl->mods, q, k, v, o, st)
                                   : fa__tc_launch<__half, fa__tc_d128>(d, pl->mods, q, k, v, o, st);
    case FA__CU_F32_D64: return fa__cu_generic_launch<float, fa__cu_f32_d64>(d, q, k, v, o, st);
    case FA__CU_F32_D64_Q64K32: return fa__cu_generic_launch<float, fa__cu_f32_d64_q64k32>(d, q, k, v, o, st);
    case FA__CU_F32_D64_Q128K32: return fa__cu_generic_launch<float, fa__cu_f32_d64_q128k32>(d, q, k, v, o, st);
    case FA__CU_F32_D64_Q128: return fa__cu_generic_launch<float, fa__cu_f32_d64_q128>(d, q, k, v, o, st);
    case FA__CU_F32_D128: return fa__cu_generic_launch<float, fa__cu_f32_d128>(d, q, k, v, o, st);
    case FA__CU_F32_D128_Q64: return fa__cu_generic_launch<float, fa__cu_f32_d128_q64>(d, q, k, v, o, st);
    case FA__CU_F32_D128_Q128: return fa__cu_generic_launch<float, fa__cu_f32_d128_q128>(d, q, k, v, o, st);
    case FA__CU_F32_D128_K32: return fa__cu_generic_launch<float, fa__cu_f32_d128_k32>(d, q, k, v, o, st);
    default: break;
    }
    if (d->dtype == FA_F16) return fa__cu_launch_t<__half>(pl, d, q, k, v, o, st);
    if (d->dtype == FA_BF16) return fa__cu_launch_t<__nv_bfloat16>(pl, d, q, k, v, o, st);
    return fa__cu_launch_t<float>(pl, d, q, k, v, o, st);
}

/* ---- 8g. CUDA: the entry points ------------------------------------------------------------- */

/* The CUDA-only limits, checked after fa__resolve and before any launch or allocation. */
static fa_status fa__cu_check(const fa__dims *d)
{
    if (d->D > 256 || d->Dv > 256) return FA_ERR_UNSUPPORTED;
    return FA_OK;
}

FLASHATTN_DEF size_t fa_cuda_describe(const fa_params *p, const void *q, const void *k, const void *v,
                                      const void *o, char *buf, size_t n)
{
    fa__dims d;
    fa__cu_plan plan;
    const char *why = NULL;
    char line[320];
    int len;
    fa_status st = fa__resolve(p, q, k, v, o, &d, &why);
    if (st == FA_OK) st = fa__cu_check(&d);
    if (st == FA_OK && d.Sq > 0) st = fa__cu_pick(&d, q, k, v, o, &plan);
    if (st != FA_OK) len = snprintf(line, sizeof line, "refused: %s", why ? why : fa_status_string(st));
    else if (d.Sq == 0) len = snprintf(line, sizeof line, "fa_cuda_tiled: seq_q = 0, nothing launched");
    else if (plan.chunks > 0)
        len = snprintf(line, sizeof line, "fa_cuda_tiled: kernel %s (split-key decode), blocks of %d packed query rows, "
                       "%d chunk(s) of %d keys, modifier variant %d; workspace %zu bytes, cudaMallocAsync on the stream",
                       fa__cu_kernel_name(plan.kernel), plan.bq, plan.chunks, plan.chunk, plan.mods,
                       fa__cu_dec_bytes(&d, plan.chunks));
    else len = snprintf(line, sizeof line, "fa_cuda_tiled: kernel %s, tiles of %d query rows x %d keys, modifier variant %d",
                        fa__cu_kernel_name(plan.kernel), plan.bq, plan.bk, plan.mods);
    return fa__line_out(buf, n, line, len);
}

/* fa_cuda_tiled: the kernel fa__cu_pick chooses, queued on p->stream. Nothing is allocated, except
   on the decode path (8d2): its workspace (fa__cu_dec_bytes; fa_cuda_describe says how many bytes)
   is allocated stream-ordered on p->stream and freed behind the merge on the same stream
   (FA_ERR_NO_MEMORY, nothing written, when that fails). */
FLASHATTN_DEF fa_status fa_cuda_tiled(const fa_params *p, const void *q, const void *k, const void *v, void *o)
{
    fa__dims d;
    fa__cu_plan plan;
    fa_status st = fa__resolve(p, q, k, v, o, &d, NULL);
    if (st != FA_OK) return st;
    if ((st = fa__cu_check(&d)) != FA_OK) return st;
    if (d.Sq == 0) return FA_OK;
    if ((st = fa__cu_pick(&d, q, k, v, o, &plan)) != FA_OK) return st;
    return fa__cu_launch(&plan, &d, q, k, v, o, (cudaStream_t)d.stream);
}

/* A token stride cuBLAS can take as a leading dimension for `rows` rows of `width` elements. */
static int fa__cu_ld_ok(int64_t stride, int rows, int width, int *ld)
{
    if (rows <= 1) { *ld = width; return 1; }   /* one row: the stride is never used */
    if (stride < width || stride > INT_MAX) return 0;
    *ld = (int)stride;
    return 1;
}

static size_t fa__cu_round(size_t n) { return n > SIZE_MAX - 255 ? SIZE_MAX : (n + 255) & ~(size_t)255; }

/* fa_cuda_naive: S = scale K Q^T per (batch, head) by cublasGemmBatchedEx into fp32 (fp32 inputs
   exact, no TF32; fp16/bf16 with fp32 compute), a softmax kernel per row (modifiers, mask, scores,
   lse, P in the storage type), O = P V by a second batched GEMM with the token strides as leading
   dimensions. One stream-ordered allocation (cudaMallocAsync on p->stream) holds S, P, the pointer
   arrays, any packed copies and cuBLAS's workspace. The cuBLAS handle is made per call (nothing is
   kept in globals), and cublasDestroy synchronises the device: fa_cuda_naive returns with its work
   done, unlike fa_cuda_tiled and fa_cuda_merge, which only queue theirs. */

FLASHATTN_DEF fa_status fa_cuda_naive(const fa_params *p, const void *q, const void *k, const void *v,
                                      void *o, float *scores)
{
    fa__dims d, w;
    fa_status st = fa__resolve(p, q, k, v, o, &d, NULL), st2;
    cudaStream_t s;
    cublasHandle_t hd = NULL;
    cudaDataType_t ty;
    size_t es, esp, n, nbh, off_p, off_ptr, off_flag, off_q, off_k, off_v, off_ws, total;
    int ldq, ldk, ldv, ldo, pack_q, pack_k, pack_v, pooled = 0, threads, row_smem;
    char *mem = NULL;
    const void **arr;
    const void *qq = q, *kk = k, *vv = v;
    const float one = 1.0f, zero = 0.0f;
    const size_t cublas_ws = FA__CU_CUBLAS_WS;
    if (st != FA_OK) return st;
    if ((st = fa__cu_check(&d)) != FA_OK) return st;
    if (d.Sq == 0) return FA_OK;
    s = (cudaStream_t)d.stream;
    (void)cudaGetLastError();
    es = d.dtype == FA_F32 ? 4 : 2;
    ty = d.dtype == FA_F32 ? CUDA_R_32F : d.dtype == FA_F16 ? CUDA_R_16F : CUDA_R_16BF;
    nbh = (size_t)d.B * (size_t)d.Hq;
    if (d.Sk == 0) {                                       /* every row is empty */
        if ((int64_t)nbh * d.Sq > INT_MAX) return FA_ERR_UNSUPPORTED;
        if (d.dtype == FA_F32) fa__cu_empty<float><<<(unsigned)(nbh * d.Sq), 64, 0, s>>>(d, (float *)o);
        else if (d.dtype == FA_F16) fa__cu_empty<__half><<<(unsigned)(nbh * d.Sq), 64, 0, s>>>(d, (__half *)o);
        else fa__cu_empty<__nv_bfloat16><<<(unsigned)(nbh * d.Sq), 64, 0, s>>>(d, (__nv_bfloat16 *)o);
        return fa__cu(cudaGetLastError());
    }
    /* cuBLAS's leading dimensions: the token strides, or packed copies where they cannot be */
    pack_q = !fa__cu_ld_ok(d.qs[2], d.Sq, d.D, &ldq);
    pack_k = !fa__cu_ld_ok(d.ks[2], d.Sk, d.D, &ldk);
    pack_v = !fa__cu_ld_ok(d.vs[2], d.Sk, d.Dv, &ldv);
    if (!fa__cu_ld_ok(d.os[2], d.Sq, d.Dv, &ldo)) return FA_ERR_UNSUPPORTED;   /* o stride > INT_MAX */
    if (pack_q) ldq = d.D;
    if (pack_k) ldk = d.D;
    if (pack_v) ldv = d.Dv;
    /* workspace: S fp32 [B*Hq][Sq][Sk] | P (fp16/bf16 only) | 6 pointer arrays | v's flags (fa__cu_vbad,
       B*Hkv ints) | packed q, k, v | cuBLAS */
    n = fa__mul_size(fa__mul_size(nbh, (size_t)d.Sq), (size_t)d.Sk);
    esp = d.dtype == FA_F32 ? 0 : 2;
    off_p = fa__cu_round(fa__mul_size(n, 4));
    off_ptr = fa__add_size(off_p, fa__cu_round(fa__mul_size(n, esp)));
    off_flag = fa__add_size(off_ptr, fa__cu_round(fa__mul_size(nbh, 6 * sizeof(void *))));
    off_q = fa__add_size(off_flag, fa__cu_round(fa__mul_size((size_t)d.B * d.Hkv, sizeof(int))));
    off_k = fa__add_size(off_q, pack_q ? fa__cu_round(fa__mul_size(fa__mul_size(nbh, (size_t)d.Sq), (size_t)d.D * es)) : 0);
    off_v = fa__add_size(off_k, pack_k ? fa__cu_round(fa__mul_size(fa__mul_size((size_t)d.B * d.Hkv, (size_t)d.Sk), (size_t)d.D * es)) : 0);
    off_ws = fa__add_size(off_v, pack_v ? fa__cu_round(fa__mul_size(fa__mul_size((size_t)d.B * d.Hkv, (size_t)d.Sk), (size_t)d.Dv * es)) : 0);
    total = fa__add_size(off_ws, cublas_ws);
    if (total == SIZE_MAX) return FA_ERR_NO_MEMORY;
    if (nbh > INT_MAX || (int64_t)nbh * d.Sq > INT_MAX) return FA_ERR_UNSUPPORTED;   /* grid limits */
    if ((st = fa__cu_alloc((void **)&mem, total, s, &pooled)) != FA_OK) return st;

    w = d;                                                 /* the strides the GEMMs see */
    arr = (const void **)(mem + off_ptr);
    threads = d.Sk >= FA__CU_NAIVE_THREADS ? FA__CU_NAIVE_THREADS : ((d.Sk + 31) / 32) * 32;
    row_smem = (int)((d.Sk + 32) * sizeof(float));
    if (pack_q) {
        qq = mem + off_q;
        if (d.dtype == FA_F32) fa__cu_pack<float><<<(unsigned)(nbh * d.Sq), 128, 0, s>>>((const float *)q, (float *)qq, d.Hq, d.Sq, d.D, d.qs[0], d.qs[1], d.qs[2]);
        else fa__cu_pack<unsigned short><<<(unsigned)(nbh * d.Sq), 128, 0, s>>>((const unsigned short *)q, (unsigned short *)qq, d.Hq, d.Sq, d.D, d.qs[0], d.qs[1], d.qs[2]);
        w.qs[0] = (int64_t)d.Hq * d.Sq * d.D; w.qs[1] = (int64_t)d.Sq * d.D; w.qs[2] = d.D;
    }
    if (pack_k) {
        kk = mem + off_k;
        if (d.dtype == FA_F32) fa__cu_pack<float><<<(unsigned)((size_t)d.B * d.Hkv * d.Sk), 128, 0, s>>>((const float *)k, (float *)kk, d.Hkv, d.Sk, d.D, d.ks[0], d.ks[1], d.ks[2]);
        else fa__cu_pack<unsigned short><<<(unsigned)((size_t)d.B * d.Hkv * d.Sk), 128, 0, s>>>((const unsigned short *)k, (unsigned short *)kk, d.Hkv, d.Sk, d.D, d.ks[0], d.ks[1], d.ks[2]);
        w.ks[0] = (int64_t)d.Hkv * d.Sk * d.D; w.ks[1] = (int64_t)d.Sk * d.D; w.ks[2] = d.D;
    }
    if (pack_v) {
        vv = mem + off_v;
        if (d.dtype == FA_F32) fa__cu_pack<float><<<(unsigned)((size_t)d.B * d.Hkv * d.Sk), 128, 0, s>>>((const float *)v, (float *)vv, d.Hkv, d.Sk, d.Dv, d.vs[0], d.vs[1], d.vs[2]);
        else fa__cu_pack<unsigned short><<<(unsigned)((size_t)d.B * d.Hkv * d.Sk), 128, 0, s>>>((const unsigned short *)v, (unsigned short *)vv, d.Hkv, d.Sk, d.Dv, d.vs[0], d.vs[1], d.vs[2]);
        w.vs[0] = (int64_t)d.Hkv * d.Sk * d.Dv; w.vs[1] = (int64_t)d.Sk * d.Dv; w.vs[2] = d.Dv;
    }
    fa__cu_ptrs<<<(unsigned)((nbh + 127) / 128), 128, 0, s>>>(w, (const char *)qq, (const char *)kk, (const char *)vv,
                                                              (char *)o, (float *)mem,
                                                              d.dtype == FA_F32 ? mem : mem + off_p, (int)es,
                                                              d.dtype == FA_F32 ? 4 : 2, arr);
    st = fa__cu(cudaGetLastError());
    /* the kv heads whose v holds an inf or a NaN (P V's rare case, fa__cu_pv_fix) */
    if (st == FA_OK) st = fa__cu(cudaMemsetAsync(mem + off_flag, 0, (size_t)d.B * d.Hkv * sizeof(int), s));
    if (st == FA_OK) {
        const int64_t vrows = (int64_t)d.B * d.Hkv * d.Sk;
        const unsigned vg = (unsigned)(vrows < 65536 ? vrows : 65536);
        int *flag = (int *)(mem + off_flag);
        if (d.dtype == FA_F32)
            fa__cu_vbad<float, unsigned, 0x7F800000u><<<vg, 64, 0, s>>>((const float *)vv, d.Hkv, d.Sk, d.Dv, w.vs[0], w.vs[1], w.vs[2], vrows, flag);
        else if (d.dtype == FA_F16)
            fa__cu_vbad<unsigned short, unsigned short, 0x7C00u><<<vg, 64, 0, s>>>((const unsigned short *)vv, d.Hkv, d.Sk, d.Dv, w.vs[0], w.vs[1], w.vs[2], vrows, flag);
        else
            fa__cu_vbad<unsigned short, unsigned short, 0x7F80u><<<vg, 64, 0, s>>>((const unsigned short *)vv, d.Hkv, d.Sk, d.Dv, w.vs[0], w.vs[1], w.vs[2], vrows, flag);
        st = fa__cu(cudaGetLastError());
    }
    /* S^T (col-major Sk x Sq) = K Q^T, scaled, fp32 out */
    if (st == FA_OK) st = fa__cublas(cublasCreate(&hd));
    if (st == FA_OK) st = fa__cublas(cublasSetStream(hd, s));
    if (st == FA_OK) st = fa__cublas(cublasSetWorkspace(hd, mem + off_ws, cublas_ws));
    if (st == FA_OK)
        st = fa__cublas(cublasGemmBatchedEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, d.Sk, d.Sq, d.D, &d.scale,
                                            arr, ty, ldk, arr + nbh, ty, ldq, &zero, (void *const *)(arr + 2 * nbh),
                                            CUDA_R_32F, d.Sk, (int)nbh, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    /* modifiers, mask, scores, softmax, lse */
    if (st == FA_OK) {
        int row = row_smem <= FA__CU_NAIVE_ROW_SMEM;
        unsigned rows = (unsigned)(nbh * d.Sq);
        size_t sm = row ? (size_t)row_smem : 32 * sizeof(float);
        if (d.dtype == FA_F32) {
            if (row) fa__cu_softmax<float, 1><<<rows, threads, sm, s>>>(d, (float *)mem, (float *)mem, scores);
            else fa__cu_softmax<float, 0><<<rows, threads, sm, s>>>(d, (float *)mem, (float *)mem, scores);
        } else if (d.dtype == FA_F16) {
            if (row) fa__cu_softmax<__half, 1><<<rows, threads, sm, s>>>(d, (float *)mem, (__half *)(mem + off_p), scores);
            else fa__cu_softmax<__half, 0><<<rows, threads, sm, s>>>(d, (float *)mem, (__half *)(mem + off_p), scores);
        } else {
            if (row) fa__cu_softmax<__nv_bfloat16, 1><<<rows, threads, sm, s>>>(d, (float *)mem, (__nv_bfloat16 *)(mem + off_p), scores);
            else fa__cu_softmax<__nv_bfloat16, 0><<<rows, threads, sm, s>>>(d, (float *)mem, (__nv_bfloat16 *)(mem + off_p), scores);
        }
        st = fa__cu(cudaGetLastError());
    }
    /* O^T (col-major Dv x Sq, ld = token stride) = V^T P^T */
    if (st == FA_OK)
        st = fa__cublas(cublasGemmBatchedEx(hd, CUBLAS_OP_N, CUBLAS_OP_N, d.Dv, d.Sq, d.Sk, &one,
                                            arr + 3 * nbh, ty, ldv, arr + 4 * nbh, ty, d.Sk, &zero,
                                            (void *const *)(arr + 5 * nbh), ty, ldo, (int)nbh,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (st == FA_OK) {   /* the rows of a kv head whose v holds an inf or a NaN, recomputed */
        const unsigned rows = (unsigned)(nbh * d.Sq);
        const int *flag = (const int *)(mem + off_flag);
        if (d.dtype == FA_F32)
            fa__cu_pv_fix<float, float><<<rows, 64, 0, s>>>(d, (const float *)vv, w.vs[0], w.vs[1], w.vs[2], (const float *)mem, (float *)o, flag);
        else if (d.dtype == FA_F16)
            fa__cu_pv_fix<__half, __half><<<rows, 64, 0, s>>>(d, (const __half *)vv, w.vs[0], w.vs[1], w.vs[2], (const __half *)(mem + off_p), (__half *)o, flag);
        else
            fa__cu_pv_fix<__nv_bfloat16, __nv_bfloat16><<<rows, 64, 0, s>>>(d, (const __nv_bfloat16 *)vv, w.vs[0], w.vs[1], w.vs[2], (const __nv_bfloat16 *)(mem + off_p), (__nv_bfloat16 *)o, flag);
        st = fa__cu(cudaGetLastError());
    }
    if (hd) {
        st2 = fa__cublas(cublasDestroy(hd));
        if (st == FA_OK) st = st2;
    }
    st2 = fa__cu_free(mem, s, pooled);
    return st != FA_OK ? st : st2;
}

FLASHATTN_DEF fa_status fa_cuda_merge(int rows, int dv, int parts, const float *const *o_parts,
                                      const float *const *lse_parts, float *o, float *lse)
{
    fa__cu_parts pp;
    float *tmp = NULL;
    int p, done = 0, pooled = 0;
    fa_status st = fa__merge_check(rows, dv, parts, o_parts, lse_parts, o, NULL);
    if (st != FA_OK) return st;
    if (rows == 0) return FA_OK;
    for (p = 0; p < parts; p++)
        if (!o_parts[p] || !lse_parts[p]) return FA_ERR_INVALID_ARG;
    (void)cudaGetLastError();
    /* up to FA__CU_MERGE parts a launch; beyond that the running result is the next launch's
       first part, its lse kept in a temporary row */
    if (parts > FA__CU_MERGE && (st = fa__cu_alloc((void **)&tmp, (size_t)rows * sizeof(float), 0, &pooled)) != FA_OK)
        return st;
    while (done < parts && st == FA_OK) {
        int np = 0, last;
        if (done > 0) { pp.o[np] = o; pp.l[np] = tmp; np++; }
        while (np < FA__CU_MERGE && done < parts) { pp.o[np] = o_parts[done]; pp.l[np] = lse_parts[done]; np++; done++; }
        last = done == parts;
        fa__cu_merge<<<(unsigned)((rows + 7) / 8), dim3(32, 8), 0, 0>>>(rows, dv, np, pp, o, last ? lse : tmp);
        st = fa__cu(cudaGetLastError());
    }
    if (tmp) {
        fa_status s2 = fa__cu_free(tmp, 0, pooled);
        if (st == FA_OK) st = s2;
    }
    return st;
}

/* The backward's request: section 7b's checks (fa__bwd_resolve_on: d_o, the gradients laid out as
   q, k, v, disjoint and sharing memory with no input; lse when the tiled path needs it), then the
   CUDA limits. Nothing is launched before it passes. */
static fa_status fa__cu_bwd_resolve(const fa_params *p, const void *q, const void *k, const void *v, const void *o,
                                    const void *d_o, const void *dq, const void *dk, const void *dv, int need_lse,
                                    fa__dims *d)
{
    fa_status st = fa__bwd_resolve_on(p, q, k, v, o, d_o, dq, dk, dv, need_lse, 1, d, NULL);
    if (st != FA_OK) return st;
    return fa__cu_check(d);
}

/* blocks for a grid-stride loop over `rows` */
static unsigned fa__cu_rows_grid(int64_t rows) { return (unsigned)(rows < 65536 ? (rows > 0 ? rows : 1) : 65536); }

/* The gradients of empty calls: Sq == 0, dk = dv = 0; Sk == 0, dq = 0. */
template <typename T>
static fa_status fa__cu_bwd_empty_t(const fa__dims *d, void *dq, void *dk, void *dv, cudaStream_t s)
{
    if (d->Sq == 0) {
        const int64_t rows = (int64_t)d->B * d->Hkv * d->Sk;
        if (rows == 0) return FA_OK;
        fa__cu_bwd_zero<T><<<fa__cu_rows_grid(rows), 128, 0, s>>>((T *)dk, d->Hkv, d->Sk, d->D, d->ks[0], d->ks[1], d->ks[2], rows);
        fa__cu_bwd_zero<T><<<fa__cu_rows_grid(rows), 128, 0, s>>>((T *)dv, d->Hkv, d->Sk, d->Dv, d->vs[0], d->vs[1], d->vs[2], rows);
    } else {
        const int64_t rows = (int64_t)d->B * d->Hq * d->Sq;
        fa__cu_bwd_zero<T><<<fa__cu_rows_grid(rows), 128, 0, s>>>((T *)dq, d->Hq, d->Sq, d->D, d->qs[0], d->qs[1], d->qs[2], rows);
    }
    return fa__cu(cudaGetLastError());
}

static fa_status fa__cu_bwd_empty(const fa__dims *d, void *dq, void *dk, void *dv, cudaStream_t s)
{
    (void)cudaGetLastError();
    if (d->dtype == FA_F16) return fa__cu_bwd_empty_t<__half>(d, dq, dk, dv, s);
    if (d->dtype == FA_BF16) return fa__cu_bwd_empty_t<__nv_bfloat16>(d, dq, dk, dv, s);
    return fa__cu_bwd_empty_t<float>(d, dq, dk, dv, s);
}

/* The naive backward's workspace, packed fp32 (offsets in bytes, each 256-byte aligned): S, dP, G
   (softcap only) [B*Hq][Sq][Sk]; scale*Q, dO, dQ [B*Hq][Sq][D or Dv]; K, V, dK, dV per query head
   [B*Hq][Sk][D or Dv]; the row and key flags rbad [B*Hq][Sq], kbad [B*Hq][Sk] (fa__cu_bwd_in's
   bad, adjacent: one memset); cuBLAS's workspace last. SIZE_MAX when a count overflows. */
typedef struct fa__cu_nbwd_plan {
    size_t s, dp, g, q, o, dq, k, v, dk, dv, rb, kb, ws, total;
} fa__cu_nbwd_plan;

static void fa__cu_nbwd_plan_make(const fa__dims *d, fa__cu_nbwd_plan *pl)
{
    const size_t nbh = (size_t)d->B * (size_t)d->Hq, n = fa__mul_size(fa__mul_size(nbh, (size_t)d->Sq), (size_t)d->Sk);
    const size_t nq = fa__mul_size(nbh, (size_t)d->Sq), nk = fa__mul_size(nbh, (size_t)d->Sk);
    size_t at = 0;
#define FA__CU_NBWD_AT(f, floats) (pl->f = at, at = fa__add_size(at, fa__cu_round(fa__mul_size((floats), sizeof(float)))))
    FA__CU_NBWD_AT(s, n);
    FA__CU_NBWD_AT(dp, n);
    FA__CU_NBWD_AT(g, d->softcap > 0.0f ? n : 0);
    FA__CU_NBWD_AT(q, fa__mul_size(nq, (size_t)d->D));
    FA__CU_NBWD_AT(o, fa__mul_size(nq, (size_t)d->Dv));
    FA__CU_NBWD_AT(dq, fa__mul_size(nq, (size_t)d->D));
    FA__CU_NBWD_AT(k, fa__mul_size(nk, (size_t)d->D));
    FA__CU_NBWD_AT(v, fa__mul_size(nk, (size_t)d->Dv));
    FA__CU_NBWD_AT(dk, fa__mul_size(nk, (size_t)d->D));
    FA__CU_NBWD_AT(dv, fa__mul_size(nk, (size_t)d->Dv));
    FA__CU_NBWD_AT(rb, nq);
    FA__CU_NBWD_AT(kb, nk);
#undef FA__CU_NBWD_AT
    pl->ws = at;
    pl->total = fa__add_size(at, FA__CU_CUBLAS_WS);
}

/* The naive backward's launches on T, into the workspace `mem` laid out by pl. */
template <typename T>
static fa_status fa__cu_nbwd_run(const fa__dims *d, const fa__cu_nbwd_plan *pl, char *mem, const void *q,
                                 const void *k, const void *v, const void *o, const void *d_o, void *dq, void *dk,
                                 void *dv, cudaStream_t s)
{
    const int64_t nbh = (int64_t)d->B * d->Hq, rq = nbh * d->Sq, rk = nbh * d->Sk, rkv = (int64_t)d->B * d->Hkv * d->Sk;
    const int Sq = d->Sq, Sk = d->Sk, D = d->D, Dv = d->Dv;
    const long long sS = (long long)Sq * Sk, sQ = (long long)Sq * D, sO = (long long)Sq * Dv;
    const long long sK = (long long)Sk * D, sV = (long long)Sk * Dv;
    float *S = (float *)(mem + pl->s), *dP = (float *)(mem + pl->dp), *G = d->softcap > 0.0f ? (float *)(mem + pl->g) : NULL;
    float *Q = (float *)(mem + pl->q), *O = (float *)(mem + pl->o), *dQ = (float *)(mem + pl->dq);
    float *K = (float *)(mem + pl->k), *V = (float *)(mem + pl->v), *dK = (float *)(mem + pl->dk), *dV = (float *)(mem + pl->dv);
    float *rb = (float *)(mem + pl->rb), *kb = (float *)(mem + pl->kb);
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t hd = NULL;
    fa_status st, st2;
    /* section 8e2's rule: q, d_o and k copied with non-finite values as 0, their rows and keys
       flagged in rb, kb (v as it is) */
    if ((st = fa__cu(cudaMemsetAsync(rb, 0, pl->ws - pl->rb, s))) != FA_OK) return st;
    fa__cu_bwd_in<T><<<fa__cu_rows_grid(rq), 128, 0, s>>>((const T *)q, Q, d->Hq, 1, Sq, D, d->qs[0], d->qs[1], d->qs[2], rq, d->scale, rb);
    fa__cu_bwd_in<T><<<fa__cu_rows_grid(rq), 128, 0, s>>>((const T *)d_o, O, d->Hq, 1, Sq, Dv, d->os[0], d->os[1], d->os[2], rq, 1.0f, rb);
    fa__cu_bwd_in<T><<<fa__cu_rows_grid(rk), 128, 0, s>>>((const T *)k, K, d->Hq, d->group, Sk, D, d->ks[0], d->ks[1], d->ks[2], rk, 1.0f, kb);
    fa__cu_bwd_in<T><<<fa__cu_rows_grid(rk), 128, 0, s>>>((const T *)v, V, d->Hq, d->group, Sk, Dv, d->vs[0], d->vs[1], d->vs[2], rk, 1.0f, (float *)NULL);
    st = fa__cu(cudaGetLastError());
    if (st == FA_OK) st = fa__cublas(cublasCreate(&hd));
    if (st == FA_OK) st = fa__cublas(cublasSetStream(hd, s));
    if (st == FA_OK) st = fa__cublas(cublasSetWorkspace(hd, mem + pl->ws, FA__CU_CUBLAS_WS));
    /* row-major X [m][n] is column-major n x m: S^T = K (scale Q)^T, dP^T = V dO^T */
    if (st == FA_OK)
        st = fa__cublas(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, Sk, Sq, D, &one, K, CUDA_R_32F, D, sK, Q,
                                                   CUDA_R_32F, D, sQ, &zero, S, CUDA_R_32F, Sk, sS, (int)nbh,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (st == FA_OK)
        st = fa__cublas(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, Sk, Sq, Dv, &one, V, CUDA_R_32F, Dv, sV, O,
                                                   CUDA_R_32F, Dv, sO, &zero, dP, CUDA_R_32F, Sk, sS, (int)nbh,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (st == FA_OK) {
        const int threads = Sk >= FA__CU_NAIVE_THREADS ? FA__CU_NAIVE_THREADS : ((Sk + 31) / 32) * 32;
        fa__cu_bwd_rows<T><<<fa__cu_rows_grid(rq), threads, 0, s>>>(*d, S, dP, G, O, (const T *)o, rb, kb, rq);
        st = fa__cu(cudaGetLastError());
    }
    /* dQ^T = scale K^T dS^T, dK^T = (scale Q)^T dS, dV^T = dO^T P */
    if (st == FA_OK)
        st = fa__cublas(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_N, CUBLAS_OP_N, D, Sq, Sk, &d->scale, K, CUDA_R_32F, D, sK,
                                                   dP, CUDA_R_32F, Sk, sS, &zero, dQ, CUDA_R_32F, D, sQ, (int)nbh,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (st == FA_OK)
        st = fa__cublas(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_N, CUBLAS_OP_T, D, Sk, Sq, &one, Q, CUDA_R_32F, D, sQ, dP,
                                                   CUDA_R_32F, Sk, sS, &zero, dK, CUDA_R_32F, D, sK, (int)nbh,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (st == FA_OK)
        st = fa__cublas(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_N, CUBLAS_OP_T, Dv, Sk, Sq, &one, O, CUDA_R_32F, Dv, sO, S,
                                                   CUDA_R_32F, Sk, sS, &zero, dV, CUDA_R_32F, Dv, sV, (int)nbh,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (st == FA_OK) {
        fa__cu_bwd_out<T><<<fa__cu_rows_grid(rq), 128, 0, s>>>(dQ, (T *)dq, d->Hq, 1, Sq, D, d->qs[0], d->qs[1], d->qs[2], rq, 1.0f, (const unsigned *)NULL, 0);
        fa__cu_bwd_out<T><<<fa__cu_rows_grid(rkv), 128, 0, s>>>(dK, (T *)dk, d->Hkv, d->group, Sk, D, d->ks[0], d->ks[1], d->ks[2], rkv, 1.0f, (const unsigned *)NULL, 0);
        fa__cu_bwd_out<T><<<fa__cu_rows_grid(rkv), 128, 0, s>>>(dV, (T *)dv, d->Hkv, d->group, Sk, Dv, d->vs[0], d->vs[1], d->vs[2], rkv, 1.0f, (const unsigned *)NULL, 0);
        st = fa__cu(cudaGetLastError());
    }
    if (hd) {
        st2 = fa__cublas(cublasDestroy(hd));
        if (st == FA_OK) st = st2;
    }
    return st;
}

/* fa_cuda_naive_backward: section 8e2's naive path. Like fa_cuda_naive: one stream-ordered
   allocation (FA_ERR_NO_MEMORY, nothing written, when its size overflows, exceeds the device's
   memory (cudaMemGetInfo's total: refused without trying) or the device refuses it),
   a per-call cuBLAS handle whose cublasDestroy synchronises: it returns with its work done. */
FLASHATTN_DEF fa_status fa_cuda_naive_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                               const void *o, const void *d_o, void *dq, void *dk, void *dv)
{
    fa__dims d;
    fa__cu_nbwd_plan pl;
    cudaStream_t s;
    char *mem = NULL;
    int pooled = 0;
    fa_status st = fa__cu_bwd_resolve(p, q, k, v, o, d_o, dq, dk, dv, 0, &d), st2;
    if (st != FA_OK) return st;
    s = (cudaStream_t)d.stream;
    if (d.Sq == 0 || d.Sk == 0) return fa__cu_bwd_empty(&d, dq, dk, dv, s);
    if ((int64_t)d.B * d.Hq > INT_MAX) return FA_ERR_UNSUPPORTED;   /* cuBLAS's batch count */
    fa__cu_nbwd_plan_make(&d, &pl);
    if (pl.total == SIZE_MAX) return FA_ERR_NO_MEMORY;
    (void)cudaGetLastError();
    {   /* more than the device holds: refused before any allocation is tried */
        size_t fr = 0, tot = 0;
        const cudaError_t e = cudaMemGetInfo(&fr, &tot);
        if (e != cudaSuccess) return fa__cu(e);
        if (pl.total > tot) return FA_ERR_NO_MEMORY;
    }
    if ((st = fa__cu_alloc((void **)&mem, pl.total, s, &pooled)) != FA_OK) return st;
    if (d.dtype == FA_F16) st = fa__cu_nbwd_run<__half>(&d, &pl, mem, q, k, v, o, d_o, dq, dk, dv, s);
    else if (d.dtype == FA_BF16) st = fa__cu_nbwd_run<__nv_bfloat16>(&d, &pl, mem, q, k, v, o, d_o, dq, dk, dv, s);
    else st = fa__cu_nbwd_run<float>(&d, &pl, mem, q, k, v, o, d_o, dq, dk, dv, s);
    st2 = fa__cu_free(mem, s, pooled);
    return st != FA_OK ? st : st2;
}

/* The tiled backward's workspace (byte offsets, each 256-aligned): delta and lx [B][Hq][Sq] fp32
   at 0 and lx, kbad [B][Hkv][Sk] fp32, the flag (one unsigned, its 256 bytes zeroed with dq's
   buffer), and (where dq is accumulated by atomics, fa__cu_bwd_atomics, or in the deterministic
   mode's turns, fa__cu_bwd_turns) dq's fp32 accumulator [B][Hq][Sq][D], then (turns, at turn;
   else turn is 0) the FFMA backward's ticket counter and turns [B][Hq][query blocks]; O(Sq D + Sk), never
   O(Sq x Sk). total 0 for an empty call, SIZE_MAX when a count overflows. */
typedef struct fa__cu_tbwd_ws {
    size_t lx, kbad, flag, dq, turn, total;
} fa__cu_tbwd_ws;

/* 1 when the deterministic tiled backward of d takes dq in the FFMA kernel's turns (FA__BWD_DQ_TURNS;
   its workspace holds dq's fp32 buffer and the turns): det, and d is not one the tensor-core
   backwards take by their dims (fp16/bf16 at D = Dv = 64 or 128, with their own deterministic dq
   kernels; should their pointers send such a call to the FFMA kernel, it runs its dq pass). fp32's
   tensor-core backward takes turns of its own query blocks (fa__t32_dkv): the turns are sized for
   the finer of the two kernels' query blocks. */
static int fa__cu_bwd_turns(const fa__dims *d, int det)
{
    return det && !((d->dtype == FA_F16 || d->dtype == FA_BF16) && d->D == d->Dv && (d->D == 64 || d->D == 128));
}

/* 1 when the tiled backward of d accumulates dq by atomics (so that its workspace holds dq's fp32
   buffer): the default mode, unless the Hopper backward (8e3, which has no dq atomics) serves d's
   dims and strides on the current device. The pointers are not looked at, so that the workspace
   query and the call agree; a call whose pointers then keep it off the Hopper kernels runs the
   others in their deterministic arrangement (fa__cu_tbwd_run). */
static int fa__cu_bwd_atomics(const fa__dims *d, int det)
{
#if FA__WG
    int dev = 0, major = 0, minor = 0, optin = 0;
    fa__cu_bwd_plan w;
    if (det) return 0;
    if (FA__CU_BWD_MMA_ONLY || (d->dtype != FA_F16 && d->dtype != FA_BF16) || d->D != d->Dv || (d->D != 64 && d->D != 128) ||
        !fa__wg_tma_ok(NULL, d->qs, d->Sq, d->Hq, d->B) || !fa__wg_tma_ok(NULL, d->os, d->Sq, d->Hq, d->B) ||
        !fa__wg_tma_ok(NULL, d->ks, d->Sk, d->Hkv, d->B) || !fa__wg_tma_ok(NULL, d->vs, d->Sk, d->Hkv, d->B))
        return 1;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    if (major != 9 || minor != 0 || !fa__wg_built() || !fa__wg_encoder()) return 1;
    memset(&w, 0, sizeof w);
    if (d->D == 64) fa__wgb_plan_of<fa__wgb_d64>(d, &w);
    else fa__wgb_plan_of<fa__wgb_d128>(d, &w);
    return w.smem > optin;
#else
    (void)d;
    return !det;
#endif
}

static void fa__cu_tbwd_layout(const fa__dims *d, int det, fa__cu_tbwd_ws *w)
{
    const size_t rows = fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq), (size_t)d->Sq);
    const size_t keys = fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hkv), (size_t)d->Sk);
    const size_t rb = fa__cu_round(fa__mul_size(rows, sizeof(float)));
    w->lx = rb;
    w->kbad = fa__add_size(rb, rb);
    w->flag = fa__add_size(w->kbad, fa__cu_round(fa__mul_size(keys, sizeof(float))));
    w->dq = fa__add_size(w->flag, 256);
    w->turn = 0;
    if (d->Sq == 0 || d->Sk == 0) {
        w->total = 0;
    } else if (fa__cu_bwd_turns(d, det)) {
        fa__cu_bwd_plan fp, tp;
        fa__cu_bwd_ffma_of(d, d->D > d->Dv ? d->D : d->Dv, &fp);
        if (FA__CU_BWD_TC32 && d->dtype == FA_F32 && d->D == d->Dv && (d->D == 64 || d->D == 128)) {
            if (d->D == 64) fa__t32_plan_of<fa__t32_d64>(d, &tp);
            else fa__t32_plan_of<fa__t32_d128>(d, &tp);
            if (tp.qblocks > fp.qblocks) fp.qblocks = tp.qblocks;
        }
        w->turn = fa__add_size(w->dq, fa__cu_round(fa__mul_size(fa__mul_size(rows, (size_t)d->D), sizeof(float))));
        /* the ticket counter, then the turns [B][Hq][query blocks] */
        w->total = fa__add_size(w->turn, fa__mul_size(fa__add_size(fa__mul_size(fa__mul_size((size_t)d->B, (size_t)d->Hq),
                                                                                 (size_t)fp.qblocks), 1), sizeof(unsigned)));
    } else {
        w->total = !fa__cu_bwd_atomics(d, det) ? w->dq
                 : fa__add_size(w->dq, fa__mul_size(fa__mul_size(rows, (size_t)d->D), sizeof(float)));
    }
}

/* fa__cu_bwd_prep on stream s: 16-byte loads where q, k, o and d_o allow them, lanes a row for
   max(D, Dv) */
template <typename T>
static fa_status fa__cu_bwd_prep_launch(const fa__dims *d, const void *q, const void *k, const void *o,
                                        const void *d_o, float *delta, float *lx, float *kbad, unsigned *flag,
                                        cudaStream_t s, unsigned maxb = FA__CU_PREP_BLOCKS)
{
    enum { V = 16 / sizeof(T) };
    const int64_t rows = (int64_t)d->B * d->Hq * d->Sq, keys = (int64_t)d->B * d->Hkv * d->Sk;
    const int dc = d->D > d->Dv ? d->D : d->Dv;
    const int vec = fa__cu_bwd_vec(q, d->qs, d->D, sizeof(T)) && fa__cu_bwd_vec(k, d->ks, d->D, sizeof(T)) &&
                    fa__cu_bwd_vec(o, d->os, d->Dv, sizeof(T)) && fa__cu_bwd_vec(d_o, d->os, d->Dv, sizeof(T));
    int L = 1;
    while (L < 32 && L * (vec ? (int)V : 1) < dc) L *= 2;
    {
        const int64_t warps = (rows + keys + 32 / L - 1) / (32 / L);
        const unsigned grid = (unsigned)(warps < 8 * (int64_t)maxb ? (warps + 7) / 8 : maxb);
        if (vec)
            fa__cu_bwd_prep<T, V><<<grid, 256, 0, s>>>(*d, (const T *)q, (const T *)k, (const T *)o, (const T *)d_o, delta,
                                                      lx, kbad, flag, rows, keys, L);
        else
            fa__cu_bwd_prep<T, 1><<<grid, 256, 0, s>>>(*d, (const T *)q, (const T *)k, (const T *)o, (const T *)d_o, delta,
                                                      lx, kbad, flag, rows, keys, L);
    }
    return fa__cu(cudaGetLastError());
}

/* The tiled backward's launches on T: fa__cu_bwd_prep, then the picked kernels on dims whose lse
   is prep's lx, each kernel in two variants of which one returns at once (by prep's flag): for a
   call without a non-finite q, d_o or k the picked kernel as it is (the FFMA one, or the tensor
   cores); for one with, the FFMA kernel of section 8e2's rule (FIN; in its deterministic
   arrangement after the Hopper backward, which has no dq atomics in either mode). Then, with dq by
   atomics (in turns or not), fa__cu_bwd_out. */
template <typename T>
static fa_status fa__cu_tbwd_run(const fa__dims *d, const fa__cu_bwd_plan *pl, int det, char *mem,
                                 const fa__cu_tbwd_ws *w, const void *q, const void *k, const void *v, const void *o,
                                 const void *d_o, void *dq, void *dk, void *dv, cudaStream_t s)
{
    const int64_t rows = (int64_t)d->B * d->Hq * d->Sq;
    float *delta = (float *)mem, *lx = (float *)(mem + w->lx), *kbad = (float *)(mem + w->kbad);
    const int tc = pl->kernel >= FA__CU_BWD_TC_D64;
    const int t32 = pl->kernel == FA__CU_BWD_TC32_D64 || pl->kernel == FA__CU_BWD_TC32_D128;
    /* deterministic dq in key-block turns: asked for, the FFMA kernel or fp32's tensor-core one picked, and
       the workspace has them */
    const int turns = det && (!tc || t32) && w->turn != 0;
    /* dq by its own kernel: asked for, or the Hopper backward's way (8e3), or the workspace has no dq buffer */
    const int kdet = !turns && (det || pl->kernel == FA__CU_BWD_WG_D64 || pl->kernel == FA__CU_BWD_WG_D128 || w->total <= w->dq);
    const int dqm = turns ? FA__BWD_DQ_TURNS : kdet ? FA__BWD_DQ_NONE : FA__BWD_DQ_ATOMIC;
    float *dqacc = kdet ? NULL : (float *)(mem + w->dq);
    unsigned *flag = (unsigned *)(mem + w->flag), *turn = turns ? (unsigned *)(mem + w->turn) : NULL;
    const int64_t cap = 2 * (int64_t)pl->sms;
    fa__dims dl = *d;
    fa_status st;
    dl.lse = lx;
    /* the flag, and dq's buffer (and the turns) where atomics use it */
    if ((st = fa__cu(cudaMemsetAsync(flag, 0, (kdet ? w->dq : w->total) - w->flag, s))) != FA_OK) return st;
    if ((st = fa__cu_bwd_prep_launch<T>(d, q, k, o, d_o, delta, lx, kbad, flag, s)) != FA_OK) return st;
    switch (pl->kernel) {
    case FA__CU_BWD_D64: st = fa__cu_bwd_launch2<T, fa__cu_bwd_d64>(&dl, pl, dqm, q, k, v, d_o, delta, kbad, flag, cap, dqacc, turn, dq, dk, dv, s); break;
    case FA__CU_BWD_D128: st = fa__cu_bwd_launch2<T, fa__cu_bwd_d128>(&dl, pl, dqm, q, k, v, d_o, delta, kbad, flag, cap, dqacc, turn, dq, dk, dv, s); break;
    case FA__CU_BWD_D256: st = fa__cu_bwd_launch2<T, fa__cu_bwd_d256>(&dl, pl, dqm, q, k, v, d_o, delta, kbad, flag, cap, dqacc, turn, dq, dk, dv, s); break;
    default: st = fa__tcb_dispatch<T>(&dl, pl, kdet, turn, q, k, v, d_o, delta, flag, dqacc, dq, dk, dv, s); break;
    }
    if (st == FA_OK && tc) {   /* the tensor-core backward's fallback */
        fa__cu_bwd_plan fb;
        if (fa__cu_bwd_ffma_of(d, d->D, &fb) == FA__CU_BWD_D64)
            st = fa__cu_bwd_launch<T, fa__cu_bwd_d64, true>(&dl, &fb, dqm, q, k, v, d_o, delta, kbad, flag, cap, dqacc, NULL, dq, dk, dv, s);
        else
            st = fa__cu_bwd_launch<T, fa__cu_bwd_d128, true>(&dl, &fb, dqm, q, k, v, d_o, delta, kbad, flag, cap, dqacc, NULL, dq, dk, dv, s);
    }
    if (st != FA_OK || kdet) return st;
    /* the FFMA kernels' K carries the scale; the tensor-core kernel's dq buffer does not; a flagged
       call in turns ran the FFMA dq pass, which wrote dq */
    fa__cu_bwd_out<T><<<fa__cu_rows_grid(rows), 128, 0, s>>>(dqacc, (T *)dq, d->Hq, 1, d->Sq, d->D, d->qs[0], d->qs[1],
                                                           d->qs[2], rows, tc ? d->scale : 1.0f,
                                                           tc || turns ? flag : NULL, turns);
    return fa__cu(cudaGetLastError());
}

/* fa_cuda_tiled_backward: section 8e2's tiled path, the kernel fa__cu_pick_backward chooses,
   queued on p->stream with its workspace allocated and freed stream-ordered (no host
   synchronisation). p->deterministic: dq by atomics in a fixed order (the FFMA kernel's turns) or
   by a dq kernel of its own (fa__cu_bwd_dq, the tensor-core backwards' dq kernels) instead of
   atomics in any order. */
FLASHATTN_DEF fa_status fa_cuda_tiled_backward(const fa_params *p, const void *q, const void *k, const void *v,
                                               const void *o, const void *d_o, void *dq, void *dk, void *dv)
{
    fa__dims d;
    fa__cu_bwd_plan pl;
    fa__cu_tbwd_ws w;
    cudaStream_t s;
    char *mem = NULL;
    int pooled = 0, det;
    fa_status st = fa__cu_bwd_resolve(p, q, k, v, o, d_o, dq, dk, dv, 1, &d), st2;
    if (st != FA_OK) return st;
    s = (cudaStream_t)d.stream;
    det = p->deterministic != 0;
    if (d.Sq == 0 || d.Sk == 0) return fa__cu_bwd_empty(&d, dq, dk, dv, s);
    if ((st = fa__cu_pick_backward(&d, q, k, v, d_o, dq, dk, dv, &pl)) != FA_OK) return st;
    fa__cu_tbwd_layout(&d, det, &w);
    if (w.total == SIZE_MAX) return FA_ERR_NO_MEMORY;
    (void)cudaGetLastError();
    if ((st = fa__cu_alloc((void **)&mem, w.total, s, &pooled)) != FA_OK) return st;
    if (d.dtype == FA_F16) st = fa__cu_tbwd_run<__half>(&d, &pl, det, mem, &w, q, k, v, o, d_o, dq, dk, dv, s);
    else if (d.dtype == FA_BF16) st = fa__cu_tbwd_run<__nv_bfloat16>(&d, &pl, det, mem, &w, q, k, v, o, d_o, dq, dk, dv, s);
    else st = fa__cu_tbwd_run<float>(&d, &pl, det, mem, &w, q, k, v, o, d_o, dq, dk, dv, s);
    st2 = fa__cu_free(mem, s, pooled);
    return st != FA_OK ? st : st2;
}

/* The backwards' workspace queries: the size of the one fa__cu_alloc each call makes for the same
   p, from the dims alone (the pointers pick the kernel, not the workspace): 0 for an invalid p, an
   empty call, or (naive) a batch count past cuBLAS's int. */
static int fa__cu_ws_dims(const fa_params *p, fa__dims *d)
{
    return p && fa__resolve(p, p, p, p, p, d, NULL) == FA_OK && fa__cu_check(d) == FA_OK && d->Sq > 0 && d->Sk > 0;
}

FLASHATTN_DEF size_t fa_cuda_naive_backward_workspace_bytes(const fa_params *p)
{
    fa__dims d;
    fa__cu_nbwd_plan pl;
    if (!fa__cu_ws_dims(p, &d) || (int64_t)d.B * d.Hq > INT_MAX) return 0;
    fa__cu_nbwd_plan_make(&d, &pl);
    return pl.total;
}

FLASHATTN_DEF size_t fa_cuda_tiled_backward_workspace_bytes(const fa_params *p)
{
    fa__dims d;
    fa__cu_tbwd_ws w;
    if (!fa__cu_ws_dims(p, &d)) return 0;
    fa__cu_tbwd_layout(&d, p->deterministic != 0, &w);
    return w.total;
}
#endif

#endif /* FLASHATTN__IMPLEMENTATION_DONE */
#endif /* FLASHATTN_IMPLEMENTATION */

/* >>license
------------------------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the flashattn.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------------------------
*/
