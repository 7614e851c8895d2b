/* bench_cuda.cu - attention forward on the GPU: TFLOP/s of fa_cuda_tiled / fa_cuda_naive and of the
   tensor-core kernel's tile configurations (`make bench-cuda`; bench/run_cuda_bench.sh runs it beside
   PyTorch's SDPA and prints one combined table).

   Shapes: the FlashAttention benchmark's, batch x seqlen = 16384 tokens, hidden 2048 (H=32 at D=64,
   H=16 at D=128), S = 512 .. 16384, causal 0/1, dtypes bf16/fp16/fp32; sliding windows (W = 256 and
   4096 at S = 16384) and softcap / ALiBi rows (causal, S = 16384).
   FLOPs: 4*B*H*S*S*D, halved for causal (the FlashAttention convention); windows count the visible
   (row, key) pairs exactly: 4*B*H*D*pairs.
   Timing: CUDA events around each call, warm-up first, median of repeats. Inputs are N(0,1) drawn on
   the device (never zeros); q, k, v, o together are >= 256 MB, over 4x the H200's 60 MB L2, so one
   set is used (no rotation needed at these sizes). Every timed row is checked against a float64 CPU
   reference on sampled rows (first, last and random rows of a few heads): rel = ||o-ref||/||ref||
   over those rows; "OK" needs bf16 <= 5e-3, fp16 <= 1e-3, fp32 <= 1e-5 (with max abs error).
   A correctness section first runs ragged shapes (Sq != Sk, tails, GQA, token strides, causal,
   windows, softcap, ALiBi, bias, lse, empty rows) against a full float64 reference.

   --decode: the split-key decode rows alone (issue 14): bf16, D = 128, Hq = 32, Hkv = 8 (and 1, MQA),
   non-causal, (B, Sq, Sk) as DEC_ROWS below; K/V GB/s (the K and V bytes of the cache, Hkv heads,
   per second) and its fraction of a device-to-device cudaMemcpy measured in the same run (bytes read
   plus written per second). Rows whose K/V is under 256 MB rotate over enough copies of K/V that
   the L2 (60 MB) cannot serve them; N calls between two events, median of 7.
   Row format (shared with bench/torch_sdpa.py --decode):
   DEC impl B Sq Sk Hq Hkv ms kvGB/s frac relerr status

   Options: --quick (fewer shapes), --no-api (time the tensor-core kernel only, through
   fa__cu_pick and fa__cu_launch), --no-tune, --no-naive, --no-check, --budget SEC (per timed row, default 0.08),
   --prof (one launch per profiled shape, for ncu), --decode-probe (the decode rows under other plans
   of the same build, see decode_probe), --decode-prof (the D = 128 decode kernel at B = 1 and 8,
   Sk = 32k, once each, for ncu: see decode_prof), --decode-mqa (the MQA rows under the 32-row block's
   configurations, see decode_mqa), --decode-prof-mqa (their split kernels at B = 8 once each, for ncu), --xp (the Hopper kernel's exp shares: the fa__wg_* XP0/XP1/XP2
   sweep, bf16 at S = 16384, and nothing else). FA_TUNE_ONLY=PREFIX (environment): the tile sweep's
   configurations whose names start with PREFIX (a comma-separated list of prefixes), and nothing
   else; FA_TUNE_S=S1,S2,..: the sweep at those lengths (both masks, bf16 and fp16), each case's
   configurations in turn; FA_BENCH_S=S1,S2,..: the main rows at those lengths.

   Row format (shared with bench/torch_sdpa.py):
   ROW impl dtype D causal S B H extra ms TFLOP/s relerr status */
#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN_CUDA
#define FLASHATTN__TEST_SWITCHES   /* fa__cu_dec_pdl (8f), for --decode-probe */
#ifndef FLASHATTN_NO_BLAS
#define FLASHATTN_NO_BLAS
#endif
#include "flashattn.h"

#include <algorithm>
#include <chrono>
#include <type_traits>
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

static int opt_quick = 0, opt_api = 1, opt_tune = 1, opt_naive = 1, opt_check = 1;
static double opt_budget = 0.08;
static int opt_prof = 0;
static int opt_xp = 0;       /* the exps' FMA-pipe share sweep alone (FA_BENCH_TUNE) */
static int opt_decode = 0;   /* the decode rows alone */   /* one launch of each profiled shape, nothing else (for ncu) */
static int n_fail = 0;

/* ---- random inputs on the device ----------------------------------------------------------- */
__device__ static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
template <typename T> __device__ static T from_f(float x);
template <> __device__ float from_f<float>(float x) { return x; }
template <> __device__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T> __global__ void k_randn(T *x, size_t n, uint64_t seed, float sd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = mix64(seed * 0x9E3779B97F4A7C15ULL + i);
        double u1 = ((double)(z >> 11) + 0.5) / 9007199254740992.0;
        double u2 = (double)(mix64(z) >> 11) / 9007199254740992.0;
        x[i] = from_f<T>((float)(sd * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)));
    }
}
static void randn(void *x, size_t n, fa_dtype dt, uint64_t seed, float sd = 1.0f)
{
    if (dt == FA_F32) k_randn<float><<<1024, 256>>>((float *)x, n, seed, sd);
    else if (dt == FA_F16) k_randn<__half><<<1024, 256>>>((__half *)x, n, seed, sd);
    else k_randn<__nv_bfloat16><<<1024, 256>>>((__nv_bfloat16 *)x, n, seed, sd);
    CK(cudaGetLastError());
}
__global__ void k_fill_u8(unsigned char *x, size_t n, unsigned char v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = v;
}

/* ---- host conversions ------------------------------------------------------------------------ */
static size_t esize(fa_dtype dt) { return dt == FA_F32 ? 4 : 2; }
static const char *dname(fa_dtype dt) { return dt == FA_F32 ? "fp32" : dt == FA_F16 ? "fp16" : "bf16"; }
static float h2f(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023u, u;
    float f;
    if (e == 0) { f = ldexpf((float)m, -24); return s ? -f : f; }
    if (e == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((e + 112) << 23) | (m << 13);
    memcpy(&f, &u, 4);
    return f;
}
static float tof(const void *p, size_t i, fa_dtype dt)
{
    if (dt == FA_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (dt == FA_F16) return h2f(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- the request --------------------------------------------------------------------------- */
struct Case {
    int B, Hq, Hkv, Sq, Sk, D, causal, wl, wr, bsh;   /* bsh: [B][S][H][D] token strides */
    fa_dtype dt;
    float softcap;
    int alibi, bias;   /* bias: 1 packed random with some -inf; 2 key padding {Sk,0,0,1} */
};

struct Bufs {
    void *q, *k, *v, *o;
    float *lse, *slopes, *bias;
    size_t nq, nk, no, nbias;
};

static void make_params(const Case &c, const Bufs &b, fa_params *p)
{
    memset(p, 0, sizeof *p);
    p->batch = c.B; p->heads = c.Hq; p->kv_heads = c.Hkv; p->seq_q = c.Sq; p->seq_k = c.Sk;
    p->head_dim = c.D; p->dtype = c.dt; p->causal = c.causal;
    p->window_left = c.wl; p->window_right = c.wr; p->softcap = c.softcap;
    p->lse = b.lse;
    if (c.bsh) {
        int64_t qs[3] = { (int64_t)c.Sq * c.Hq * c.D, c.D, (int64_t)c.Hq * c.D };
        int64_t ks[3] = { (int64_t)c.Sk * c.Hkv * c.D, c.D, (int64_t)c.Hkv * c.D };
        memcpy(p->q_stride, qs, sizeof qs); memcpy(p->o_stride, qs, sizeof qs);
        memcpy(p->k_stride, ks, sizeof ks); memcpy(p->v_stride, ks, sizeof ks);
    }
    if (c.alibi) p->alibi_slopes = b.slopes;
    if (c.bias == 1) p->bias = b.bias;
    if (c.bias == 2) { p->bias = b.bias; p->bias_stride[0] = c.Sk; p->bias_stride[3] = 1; }
}

/* float64 reference of one query row (b, h, i): o[Dv], returns lse */
/* K and V of one (batch, kv head) as float rows [Sk][D] */
static void head_kv(const Case &c, const fa__dims &d, const unsigned char *hk, const unsigned char *hv, int b, int g,
                    std::vector<float> &fk, std::vector<float> &fv)
{
    fk.resize((size_t)c.Sk * c.D);
    fv.resize((size_t)c.Sk * c.D);
    for (int j = 0; j < c.Sk; j++)
        for (int e = 0; e < c.D; e++) {
            fk[(size_t)j * c.D + e] = tof(hk, b * d.ks[0] + g * d.ks[1] + j * d.ks[2] + e, c.dt);
            fv[(size_t)j * c.D + e] = tof(hv, b * d.vs[0] + g * d.vs[1] + j * d.vs[2] + e, c.dt);
        }
}

static double ref_row(const Case &c, const fa__dims &d, const unsigned char *hq, const std::vector<float> &fk,
                      const std::vector<float> &fv, const std::vector<float> &hs, const std::vector<float> &hb, int b,
                      int h, int i, double *out)
{
    int D = c.D;
    int64_t dg = (int64_t)i + c.Sk - c.Sq;
    std::vector<double> s(c.Sk);
    double mx = -INFINITY;
    const fa_dtype dt = c.dt;
    const int64_t qo = b * d.qs[0] + h * d.qs[1] + i * d.qs[2];
    std::vector<double> qi(D);
    for (int e = 0; e < D; e++) qi[e] = tof(hq, qo + e, dt);
    for (int j = 0; j < c.Sk; j++) {
        bool vis = !(c.causal && j > dg) && !(c.wl > 0 && j < dg - c.wl) && !(c.wr > 0 && j > dg + c.wr);
        double x = -INFINITY;
        if (vis) {
            const float *kj = &fk[(size_t)j * D];
            double dot = 0;
            for (int e = 0; e < D; e++) dot += qi[e] * kj[e];
            x = d.scale * dot;
            if (c.softcap > 0) x = c.softcap * tanh(x / c.softcap);
            if (c.alibi) x -= hs[h] * fabs((double)(dg - j));
            if (c.bias) x += hb[b * d.bs[0] + h * d.bs[1] + i * d.bs[2] + j * d.bs[3]];
        }
        s[j] = x;
        if (x > mx) mx = x;
    }
    for (int e = 0; e < D; e++) out[e] = 0;
    if (mx == -INFINITY) return -INFINITY;
    double l = 0;
    for (int j = 0; j < c.Sk; j++) {
        if (s[j] == -INFINITY) continue;
        double w = exp(s[j] - mx);
        l += w;
        const float *vj = &fv[(size_t)j * D];
        for (int e = 0; e < D; e++) out[e] += w * vj[e];
    }
    for (int e = 0; e < D; e++) out[e] /= l;
    return mx + log(l);
}

/* Checks rows (all when nrows_per_head == 0) of the result in b.o against float64. */
struct Err { double rel, maxabs, lse_err; int nan, lse_bad; };
static Err check(const Case &c, const Bufs &bu, int heads_sampled, int rows_per_head, uint64_t seed)
{
    fa_params p;
    fa__dims d;
    make_params(c, bu, &p);
    fa__resolve(&p, bu.q, bu.k, bu.v, bu.o, &d, NULL);
    size_t es = esize(c.dt);
    std::vector<unsigned char> rq(bu.nq * es), rk(bu.nk * es), rv(bu.nk * es), ro(bu.no * es);
    CK(cudaMemcpy(rq.data(), bu.q, rq.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(rk.data(), bu.k, rk.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(rv.data(), bu.v, rv.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ro.data(), bu.o, ro.size(), cudaMemcpyDeviceToHost));
    std::vector<float> lse((size_t)c.B * c.Hq * c.Sq), hs(c.Hq), hb(bu.nbias);
    CK(cudaMemcpy(lse.data(), bu.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
    if (c.alibi) CK(cudaMemcpy(hs.data(), bu.slopes, c.Hq * 4, cudaMemcpyDeviceToHost));
    if (c.bias) CK(cudaMemcpy(hb.data(), bu.bias, bu.nbias * 4, cudaMemcpyDeviceToHost));
    uint64_t r = seed;
    double num = 0, den = 0, maxabs = 0, lerr = 0;
    int nan = 0, lbad = 0;
    std::vector<double> out(c.D);
    int nh = heads_sampled ? heads_sampled : c.B * c.Hq;
    for (int t = 0; t < nh; t++) {
        int bh = heads_sampled ? (int)((r = r * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % (c.B * c.Hq) : t;
        int b = bh / c.Hq, h = bh % c.Hq;
        std::vector<float> fk, fv;
        head_kv(c, d, rk.data(), rv.data(), b, h / (c.Hq / c.Hkv), fk, fv);
        int nr = rows_per_head ? std::min(rows_per_head, c.Sq) : c.Sq;
        for (int u = 0; u < nr; u++) {
            int i = !rows_per_head ? u : u == 0 ? 0 : u == 1 ? c.Sq - 1 :
                    (int)(((r = r * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % (uint64_t)c.Sq);
            double l = ref_row(c, d, rq.data(), fk, fv, hs, hb, b, h, i, out.data());
            for (int e = 0; e < c.D; e++) {
                double x = tof(ro.data(), b * d.os[0] + h * d.os[1] + i * d.os[2] + e, c.dt);
                if (x != x) nan++;
                num += (x - out[e]) * (x - out[e]);
                den += out[e] * out[e];
                maxabs = std::max(maxabs, fabs(x - out[e]));
            }
            double gl = lse[((size_t)b * c.Hq + h) * c.Sq + i];
            if (l == -INFINITY) { if (gl != -INFINITY) lbad++; }
            else if (!(fabs(gl - l) <= 1e-3 + 1e-3 * fabs(l))) lbad++;
            else lerr = std::max(lerr, fabs(gl - l));
        }
    }
    Err e;
    e.rel = den > 0 ? sqrt(num / den) : sqrt(num);
    e.maxabs = maxabs; e.nan = nan; e.lse_err = lerr; e.lse_bad = lbad;
    return e;
}
static double tol(fa_dtype dt) { return dt == FA_F32 ? 1e-5 : dt == FA_F16 ? 1e-3 : 5e-3; }
static bool pass(const Err &e, fa_dtype dt)
{
    bool ok = e.nan == 0 && e.lse_bad == 0 && e.rel <= tol(dt);
    if (dt == FA_F32) ok = ok && e.maxabs <= 1e-4;
    return ok;
}

static void alloc_bufs(const Case &c, Bufs &b, uint64_t seed)
{
    memset(&b, 0, sizeof b);
    b.nq = (size_t)c.B * c.Hq * c.Sq * c.D;
    b.nk = (size_t)c.B * c.Hkv * c.Sk * c.D;
    b.no = b.nq;
    size_t es = esize(c.dt);
    CK(cudaMalloc(&b.q, b.nq * es + 16)); CK(cudaMalloc(&b.o, b.no * es + 16));
    CK(cudaMalloc(&b.k, b.nk * es + 16)); CK(cudaMalloc(&b.v, b.nk * es + 16));
    CK(cudaMalloc(&b.lse, (size_t)c.B * c.Hq * c.Sq * 4 + 16));
    randn(b.q, b.nq, c.dt, seed + 1);
    randn(b.k, b.nk, c.dt, seed + 2);
    randn(b.v, b.nk, c.dt, seed + 3);
    k_fill_u8<<<256, 256>>>((unsigned char *)b.o, b.no * es, 0xff);   /* poison: NaN in every dtype */
    CK(cudaGetLastError());
    if (c.alibi) {
        std::vector<float> s(c.Hq);
        for (int h = 0; h < c.Hq; h++) s[h] = (float)pow(2.0, -8.0 * (h + 1) / c.Hq);
        CK(cudaMalloc(&b.slopes, c.Hq * 4));
        CK(cudaMemcpy(b.slopes, s.data(), c.Hq * 4, cudaMemcpyHostToDevice));
    }
    if (c.bias) {
        b.nbias = c.bias == 1 ? (size_t)c.B * c.Hq * c.Sq * c.Sk : (size_t)c.B * c.Sk;
        std::vector<float> hb(b.nbias);
        uint64_t r = seed;
        for (size_t i = 0; i < b.nbias; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            double u = (double)(r >> 11) / 9007199254740992.0;
            hb[i] = u < 0.1 ? -INFINITY : (float)(4.0 * u - 2.0);
        }
        if (c.bias == 2) for (int j = c.Sk / 2; j < c.Sk; j++) hb[j] = -INFINITY;   /* batch 0: second half padded */
        CK(cudaMalloc(&b.bias, b.nbias * 4));
        CK(cudaMemcpy(b.bias, hb.data(), b.nbias * 4, cudaMemcpyHostToDevice));
    }
    CK(cudaDeviceSynchronize());
}
static void free_bufs(Bufs &b)
{
    cudaFree(b.q); cudaFree(b.k); cudaFree(b.v); cudaFree(b.o); cudaFree(b.lse);
    cudaFree(b.slopes); cudaFree(b.bias);
    memset(&b, 0, sizeof b);
}

/* ---- the implementations under test ---------------------------------------------------------- */
typedef fa_status (*tc_fn)(const fa__dims *, const void *, const void *, const void *, void *, cudaStream_t);
struct Impl { const char *name; int kind; tc_fn fn; int D; };   /* kind 0 API tiled, 1 API naive, 2 tc */

/* The tensor-core kernel alone: what fa__cu_pick chooses, when that is a tensor-core kernel (the
   mma.sync one, or on a Hopper the wgmma one). */
/* The decode probes' timer: us per call of call(i) (i picks one of `copies` K/V copies). A pass over
   the copies sizes the run (at least 15 ms, at most 400 calls), then n calls between two events,
   the median of five. */
template <typename F> static double dec_time_us(F &&call, int copies, cudaEvent_t e0, cudaEvent_t e1)
{
    float ms1 = 0;
    call(0);
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(e0));
    for (int i = 0; i < copies; i++) call(i);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms1, e0, e1));
    const int n = (int)std::min(400.0, std::max((double)copies, 15.0 / std::max(ms1 / copies, 1e-3f)));
    std::vector<float> t(5);
    for (size_t rep = 0; rep < t.size(); rep++) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < n; i++) call(i);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[rep], e0, e1));
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::sort(t.begin(), t.end());
    return 1e3 * t[t.size() / 2] / n;
}

static int tc_kernel(fa__cu_kernel k)
{
    return k == FA__CU_TC_D64 || k == FA__CU_TC_D128 || k == FA__CU_WG_D128 || k == FA__CU_WG_D64;
}
static fa_status tc_default(const fa__dims *d, const void *q, const void *k, const void *v, void *o, cudaStream_t s)
{
    fa__cu_plan pl;
    fa_status st = fa__cu_pick(d, q, k, v, o, &pl);
    if (st != FA_OK) return st;
    if (!tc_kernel(pl.kernel)) return FA_ERR_UNSUPPORTED;
    return fa__cu_launch(&pl, d, q, k, v, o, s);
}
/* A tile configuration C of the mma.sync tensor-core kernel (fields as the header's fa__tc_d64), on
   the requests the picker gives a tensor-core kernel with C's head dim (on a Hopper the
   wgmma one: this then times the mma.sync kernel it replaced). */
template <class C>
static fa_status tc_config(const fa__dims *d, const void *q, const void *k, const void *v, void *o, cudaStream_t s)
{
    fa__cu_plan pl;
    fa_status st = fa__cu_pick(d, q, k, v, o, &pl);
    if (st != FA_OK) return st;
    if (!tc_kernel(pl.kernel) || d->D != C::D) return FA_ERR_UNSUPPORTED;
    return d->dtype == FA_BF16 ? fa__tc_launch<__nv_bfloat16, C>(d, pl.mods, q, k, v, o, s)
                               : fa__tc_launch<__half, C>(d, pl.mods, q, k, v, o, s);
}
#ifdef FA_BENCH_TUNE   /* the tile-configuration sweep (make bench-cuda builds it; cuda-objs does not) */
/* Its results: bench/RESULTS.md, CUDA, the tile-configuration table beside "Versions". */
struct tc64_w4m2k64q { enum { D = 64, NW = 4, MT = 2, BK = 64, QREG = 1, PF = 0, MINB = 2 }; };
struct tc64_w4m2k64q_pf { enum { D = 64, NW = 4, MT = 2, BK = 64, QREG = 1, PF = 1, MINB = 2 }; };
struct tc64_w4m2k64_m3 { enum { D = 64, NW = 4, MT = 2, BK = 64, QREG = 0, PF = 1, MINB = 3 }; };
struct tc64_w4m2k32q_m3 { enum { D = 64, NW = 4, MT = 2, BK = 32, QREG = 1, PF = 1, MINB = 3 }; };
struct tc64_w4m2k32q_pf { enum { D = 64, NW = 4, MT = 2, BK = 32, QREG = 1, PF = 1, MINB = 2 }; };
struct tc128_w4m2k64 { enum { D = 128, NW = 4, MT = 2, BK = 64, QREG = 0, PF = 0, MINB = 1 }; };
struct tc128_w4m2k64_pf { enum { D = 128, NW = 4, MT = 2, BK = 64, QREG = 0, PF = 1, MINB = 1 }; };
/* The Hopper kernel's variants (bf16, plain rows only; fields as the header's fa__wg_d128): 2 stages
   instead of 3, without the consumers' ping-pong, and at D = 64 the two-consumer block of 128 rows
   (the header's fa__wg_d64x2, everywhere, not only where fa__wg_wide picks it) and three consumers
   without the ping-pong. */
#define WG128_XP XP0 = fa__wg_d128::XP0, XP1 = fa__wg_d128::XP1, XP2 = fa__wg_d128::XP2, OV = fa__wg_d128::OV, QE = fa__wg_d128::QE
#define WG64_XP XP0 = fa__wg_d64::XP0, XP1 = fa__wg_d64::XP1, XP2 = fa__wg_d64::XP2, OV = fa__wg_d64::OV, QE = fa__wg_d64::QE
struct wg128_st2 { enum { D = 128, NW = 8, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 2, WG = 384, REG_P = 40, REG_C = 232, PP = 1, WG128_XP, PER = 1 }; };
struct wg128_nopp { enum { D = 128, NW = 8, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 3, WG = 384, REG_P = 40, REG_C = 232, PP = 0, WG128_XP, PER = 1 }; };
/* The block schedule (the header's PER): one block a query tile, as before the persistent blocks
   (PER = 0); persistent blocks with the causal tiles in fa__qtile_group's L2 groups (PER = 2)
   or in one longest-first run (PER = 1) rather than in section 1's pairs of a head (PER = 3, the
   header's, fa__qtile_zig) */
#define WG_PER(N, P) \
    struct wg128_##N { enum { D = 128, NW = 8, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 3, WG = 384, REG_P = 40, REG_C = 232, PP = 1, WG128_XP, PER = P }; }; \
    struct wg64_##N { enum { D = 64, NW = 12, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 4, WG = 512, REG_P = 24, REG_C = 160, PP = 1, WG64_XP, PER = P }; };
WG_PER(noper, 0)
WG_PER(per2, 2)
WG_PER(per1, 1)
#undef WG_PER
/* The softmax overlap (the header's OV, a mask of modifier variants) for plain rows at D = 128: on
   (1) and off (0); the one that is the header's choice for variant 0 is fa__wg_d128 itself (one
   kernel instance fewer to compile) */
template <int V> struct wg128_ov_c {
    enum { D = 128, NW = 8, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 3, WG = 384, REG_P = 40, REG_C = 232, PP = 1,
           XP0 = fa__wg_d128::XP0, XP1 = fa__wg_d128::XP1, XP2 = fa__wg_d128::XP2, PER = 1, OV = V, QE = fa__wg_d128::QE };
};
template <int V> struct wg128_ov {
    typedef typename std::conditional<((int)fa__wg_d128::OV & 1) == V, fa__wg_d128, wg128_ov_c<V> >::type type;
};
struct wg64_nopp { enum { D = 64, NW = 12, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 4, WG = 512, REG_P = 24, REG_C = 160, PP = 0, WG64_XP, PER = 1 }; };
/* The D = 64 three-consumer block with its causal query tiles from row 0 (the header's QE = 0), for
   the A/B against wg64_picked (QE = 1: tiles that end at row Sq); both also at fp16 */
struct wg64_qe0 {
    enum { D = 64, NW = 12, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = 4, WG = 512, REG_P = 24, REG_C = 160, PP = 1,
           XP0 = fa__wg_d64::XP0, XP1 = fa__wg_d64::XP1, XP2 = fa__wg_d64::XP2, PER = 1, OV = fa__wg_d64::OV, QE = 0 };
};
/* The exps' FMA-pipe shares (fa__wg_d128's XP0 / XP1 / XP2: plain / softcap / ALiBi, of 16), as
   picked but for the share XS of variant V: --xp times them (bf16, S = 16384 causal, the variant's
   row of the modifier rows; D = 64 plain also non-causal). */
template <int DIM, int V, int XS> struct wg_xp {
    typedef fa__wg_d128 B128;
    typedef fa__wg_d64 B64;
    enum { D = DIM, NW = DIM == 128 ? 8 : 12, MT = 1, BK = 128, QREG = 0, PF = 0, MINB = 1, ST = DIM == 128 ? 3 : 4,
           WG = DIM == 128 ? 384 : 512, REG_P = DIM == 128 ? 40 : 24, REG_C = DIM == 128 ? 232 : 160, PP = 1,
           XP0 = V == 0 ? XS : DIM == 128 ? (int)B128::XP0 : (int)B64::XP0,
           XP1 = V == 1 ? XS : DIM == 128 ? (int)B128::XP1 : (int)B64::XP1,
           XP2 = V == 2 ? XS : DIM == 128 ? (int)B128::XP2 : (int)B64::XP2, PER = 1,
           OV = DIM == 128 ? (int)B128::OV : (int)B64::OV, QE = DIM == 128 ? (int)B128::QE : (int)B64::QE };
};
/* the picked configuration itself where XS is its share (one kernel instance fewer to compile) */
template <int DIM, int V, int XS> struct wg_xp_of {
    typedef typename std::conditional<DIM == 128, fa__wg_d128, fa__wg_d64>::type B;
    typedef typename std::conditional<(V == 0 ? (int)B::XP0 : V == 1 ? (int)B::XP1 : (int)B::XP2) == XS, B,
                                      wg_xp<DIM, V, XS> >::type type;
};
template <class C, int V>
static fa_status wg_xp_config(const fa__dims *d, const void *q, const void *k, const void *v, void *o, cudaStream_t s)
{
    fa__cu_plan pl;
    fa_status st = fa__cu_pick(d, q, k, v, o, &pl);
    if (st != FA_OK) return st;
    if ((pl.kernel != FA__CU_WG_D128 && pl.kernel != FA__CU_WG_D64) || d->D != C::D || pl.mods != V || d->dtype != FA_BF16)
        return FA_ERR_UNSUPPORTED;
    return fa__wg_run<C>(d, fa__wg_fwd<__nv_bfloat16, C, V>, q, k, v, o, s);
}
struct XpImpl { Impl im; int v; };
#define WG_XP(D, V, XS) { { "wg" #D "_v" #V "_xp" #XS, 2, wg_xp_config<typename wg_xp_of<D, V, XS>::type, V>, D }, V }
static const XpImpl xp_impls[] = {
    WG_XP(128, 0, 0), WG_XP(128, 0, 2),
    WG_XP(128, 1, 0), WG_XP(128, 1, 4), WG_XP(128, 1, 8), WG_XP(128, 1, 12),
    WG_XP(128, 2, 0), WG_XP(128, 2, 2),
    WG_XP(64, 0, 0), WG_XP(64, 0, 3), WG_XP(64, 0, 6),
    WG_XP(64, 1, 0), WG_XP(64, 1, 6), WG_XP(64, 1, 8), WG_XP(64, 1, 12),
    WG_XP(64, 2, 0), WG_XP(64, 2, 3),
};
/* H16: fp16 too (else bf16 alone) */
template <class C, bool H16 = false>
static fa_status wg_config(const fa__dims *d, const void *q, const void *k, const void *v, void *o, cudaStream_t s)
{
    fa__cu_plan pl;
    fa_status st = fa__cu_pick(d, q, k, v, o, &pl);
    if (st != FA_OK) return st;
    if ((pl.kernel != FA__CU_WG_D128 && pl.kernel != FA__CU_WG_D64) || d->D != C::D || pl.mods != 0 ||
        (d->dtype != FA_BF16 && !(H16 && d->dtype == FA_F16)))
        return FA_ERR_UNSUPPORTED;
    if (H16 && d->dtype == FA_F16) return fa__wg_run<C>(d, fa__wg_fwd<__half, C, 0>, q, k, v, o, s);
    return fa__wg_run<C>(d, fa__wg_fwd<__nv_bfloat16, C, 0>, q, k, v, o, s);
}
static const Impl tune_impls[] = {
    { "tc64_w4m2k64q", 2, tc_config<tc64_w4m2k64q>, 64 },       { "tc64_w4m2k64q_pf", 2, tc_config<tc64_w4m2k64q_pf>, 64 },
    { "tc64_w4m2k64_m3", 2, tc_config<tc64_w4m2k64_m3>, 64 },   { "tc64_w4m2k32q_m3", 2, tc_config<tc64_w4m2k32q_m3>, 64 },
    { "tc64_w4m2k32q_pf", 2, tc_config<tc64_w4m2k32q_pf>, 64 }, { "tc128_w4m2k64", 2, tc_config<tc128_w4m2k64>, 128 },
    { "tc128_w4m2k64_pf", 2, tc_config<tc128_w4m2k64_pf>, 128 }, { "wg128_st2", 2, wg_config<wg128_st2>, 128 },
    { "wg128_nopp", 2, wg_config<wg128_nopp>, 128 },            { "wg64_nc2", 2, wg_config<fa__wg_d64x2>, 64 },
    { "wg64_nopp", 2, wg_config<wg64_nopp>, 64 },               { "wg128_noper", 2, wg_config<wg128_noper>, 128 },
    { "wg64_noper", 2, wg_config<wg64_noper>, 64 },             { "wg128_per2", 2, wg_config<wg128_per2>, 128 },
    { "wg64_per2", 2, wg_config<wg64_per2>, 64 },               { "wg128_per1", 2, wg_config<wg128_per1, true>, 128 },
    { "wg64_per1", 2, wg_config<wg64_per1, true>, 64 },               { "wg128_picked", 2, wg_config<fa__wg_d128, true>, 128 },
    { "wg64_picked", 2, wg_config<fa__wg_d64, true>, 64 },          { "wg128_ov0", 2, wg_config<wg128_ov<0>::type>, 128 },
    { "wg128_ov1", 2, wg_config<wg128_ov<1>::type>, 128 },           { "wg64_qe0", 2, wg_config<wg64_qe0, true>, 64 },
};
#else
static const Impl tune_impls[] = { { "tc_tiled", 2, tc_default, 0 } };
#endif

/* "2048,4096" -> { 2048, 4096 } (FA_BENCH_S, FA_TUNE_S) */
static std::vector<int> int_list(const char *s)
{
    std::vector<int> v;
    for (char *e; *s; s = *e ? e + 1 : e) {
        long x = strtol(s, &e, 10);
        if (e == s) break;
        if (x > 0) v.push_back((int)x);
    }
    return v;
}

/* name starts with one of the comma-separated prefixes of list (FA_TUNE_ONLY; NULL: every name) */
static bool prefix_in(const char *name, const char *list)
{
    if (!list) return true;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n && strncmp(name, p, n) == 0) return true;
        p += n + (e ? 1 : 0);
    }
    return false;
}

static fa_status call(const Impl &im, const fa_params &p, const Bufs &b)
{
#ifndef FA_BENCH_TC_ONLY
    if (im.kind == 0) return fa_cuda_tiled(&p, b.q, b.k, b.v, b.o);
    if (im.kind == 1) return fa_cuda_naive(&p, b.q, b.k, b.v, b.o, NULL);
#endif
    fa__dims d;
    fa_status st = fa__resolve(&p, b.q, b.k, b.v, b.o, &d, NULL);
    if (st != FA_OK) return st;
    return im.fn(&d, b.q, b.k, b.v, b.o, 0);
}

static double flops(const Case &c)
{
    if (c.wl == 0 && c.wr == 0) return 4.0 * c.B * c.Hq * (double)c.Sq * c.Sk * c.D * (c.causal ? 0.5 : 1.0);
    double pairs = 0;
    for (int i = 0; i < c.Sq; i++) {
        int64_t dg = (int64_t)i + c.Sk - c.Sq, lo = 0, hi = c.Sk;
        if (c.wl > 0) lo = std::max<int64_t>(lo, dg - c.wl);
        if (c.causal) hi = std::min<int64_t>(hi, dg + 1);
        if (c.wr > 0) hi = std::min<int64_t>(hi, dg + c.wr + 1);
        if (hi > lo) pairs += (double)(hi - lo);
    }
    return 4.0 * c.B * c.Hq * c.D * pairs;
}

/* Times one implementation on one case and checks it; prints one ROW line. */
static void bench_row(const Impl &im, const Case &c, Bufs &b, const char *extra)
{
    fa_params p;
    make_params(c, b, &p);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    k_fill_u8<<<256, 256>>>((unsigned char *)b.o, b.no * esize(c.dt), 0xff);
    fa_status st = call(im, p, b);   /* warm-up */
    cudaError_t ce = cudaDeviceSynchronize();
    if (st != FA_OK || ce != cudaSuccess) {
        printf("ROW %-16s %-5s %4d %2d %6d %4d %3d %-10s %9s %8s %9s %s\n", im.name, dname(c.dt), c.D, c.causal, c.Sq, c.B,
               c.Hq, extra, "-", "-", "-", st != FA_OK ? fa_status_string(st) : cudaGetErrorString(ce));
        if (ce != cudaSuccess) exit(1);
        return;
    }
    CK(cudaEventRecord(e0));
    call(im, p, b);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms1;
    CK(cudaEventElapsedTime(&ms1, e0, e1));
    int reps = (int)std::min(50.0, std::max(3.0, opt_budget * 1e3 / std::max(ms1, 1e-3f)));
    std::vector<float> t(reps);
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0));
        call(im, p, b);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[r], e0, e1));
    }
    std::sort(t.begin(), t.end());
    double ms = t[reps / 2];
    /* the check: poison, run once more, compare sampled rows */
    k_fill_u8<<<256, 256>>>((unsigned char *)b.o, b.no * esize(c.dt), 0xff);
    call(im, p, b);
    CK(cudaDeviceSynchronize());
    Err e = check(c, b, 3, c.Sq >= 8192 ? 6 : 12, (uint64_t)c.Sq * 131 + c.D);
    bool ok = pass(e, c.dt);
    if (!ok) n_fail++;
    printf("ROW %-16s %-5s %4d %2d %6d %4d %3d %-10s %9.3f %8.1f %9.2e %s\n", im.name, dname(c.dt), c.D, c.causal, c.Sq,
           c.B, c.Hq, extra, ms, flops(c) / (ms * 1e-3) / 1e12, e.rel, ok ? "OK" : "FAIL");
    fflush(stdout);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
}

/* ---- the correctness section: ragged shapes, full reference --------------------------------- */
static void check_case(const Impl &im, const Case &c, const char *what)
{
    Bufs b;
    alloc_bufs(c, b, 1234 + c.Sq * 7 + c.Sk + c.D);
    fa_params p;
    make_params(c, b, &p);
    k_fill_u8<<<256, 256>>>((unsigned char *)b.lse, (size_t)c.B * c.Hq * c.Sq * 4, 0xff);
    fa_status st = call(im, p, b);
    cudaError_t ce = cudaDeviceSynchronize();
    if (st != FA_OK || ce != cudaSuccess) {
        printf("CHECK %-16s %-5s D=%3d %-44s %s\n", im.name, dname(c.dt), c.D, what,
               st != FA_OK ? fa_status_string(st) : cudaGetErrorString(ce));
        if (st != FA_ERR_UNSUPPORTED) n_fail++;
        free_bufs(b);
        if (ce != cudaSuccess) exit(1);
        return;
    }
    Err e = check(c, b, 0, 0, 1);
    bool ok = pass(e, c.dt);
    if (!ok) n_fail++;
    printf("CHECK %-16s %-5s D=%3d %-44s rel %.2e max %.2e lse %.1e nan %d lsebad %d %s\n", im.name, dname(c.dt), c.D, what,
           e.rel, e.maxabs, e.lse_err, e.nan, e.lse_bad, ok ? "OK" : "FAIL");
    fflush(stdout);
    free_bufs(b);
}

static void correctness(const std::vector<Impl> &impls)
{
    for (const Impl &im : impls)
        for (int D : { 64, 128 }) {
            if (im.kind == 2 && im.D && im.D != D) continue;
            for (fa_dtype dt : { FA_BF16, FA_F16 }) {
                if (im.kind == 2 && im.D && dt == FA_F16) continue;   /* tile configs: bf16 only */
                Case c0 = { 2, 4, 2, 300, 517, D, 0, 0, 0, 0, dt, 0.0f, 0, 0 };
                Case c;
                c = c0; check_case(im, c, "B2 H4/2 Sq300 Sk517 plain");
                c = c0; c.causal = 1; c.Sq = 517; c.Sk = 300; check_case(im, c, "causal Sq517 Sk300 (empty rows)");
                c = c0; c.causal = 1; c.wl = 37; c.Sq = c.Sk = 701; check_case(im, c, "window_left 37 causal S701");
                c = c0; c.causal = 1; c.softcap = 5.0f; c.alibi = 1; check_case(im, c, "softcap 5 + alibi causal");
                if (im.kind == 2 && im.D) continue;   /* tile configurations: these four */
                c = c0; c.causal = 1; check_case(im, c, "causal Sq300 Sk517 (bottom-right)");
                c = c0; c.bsh = 1; c.causal = 1; c.Sq = c.Sk = 333; check_case(im, c, "[B][S][H][D] causal S333");
                c = c0; c.wl = 50; c.wr = 20; check_case(im, c, "window 50/20 Sq300 Sk517");
                c = c0; c.causal = 1; c.softcap = 5.0f; check_case(im, c, "softcap 5 causal");
                c = c0; c.causal = 1; c.alibi = 1; c.Hkv = 1; check_case(im, c, "alibi causal MQA");
                c = c0; c.bias = 1; check_case(im, c, "bias packed (10% -inf)");
                c = c0; c.bias = 2; c.causal = 1; check_case(im, c, "bias key padding {Sk,0,0,1}");
                c = c0; c.Sq = 1; c.Sk = 1000; check_case(im, c, "decode Sq1 Sk1000");
                c = c0; c.Sk = 0; check_case(im, c, "Sk 0 (all rows empty)");
            }
        }
}

/* ---- decode (issue 14): K/V bandwidth of fa_cuda_tiled's split-key path ------------------------ */
/* A device-to-device copy: bytes read plus written per second (GB/s), median of 7 copies of 2 GiB. */
static double copy_gbs(void)
{
    const size_t n = (size_t)2 << 30;
    void *a, *b;
    cudaEvent_t e0, e1;
    std::vector<float> t(7);
    CK(cudaMalloc(&a, n)); CK(cudaMalloc(&b, n));
    CK(cudaMemset(a, 1, n));
    CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (size_t r = 0; r < t.size(); r++) {
        CK(cudaEventRecord(e0));
        CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[r], e0, e1));
    }
    std::sort(t.begin(), t.end());
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    cudaFree(a); cudaFree(b);
    return 2.0 * n / (t[t.size() / 2] * 1e-3) / 1e9;
}

struct DecRow { int B, Sq, Sk, Hkv; };
static const DecRow DEC_ROWS[] = {
    { 1, 1, 4096, 8 }, { 1, 1, 32768, 8 }, { 1, 1, 131072, 8 }, { 1, 1, 1048576, 8 }, { 8, 1, 32768, 8 },
    { 32, 1, 8192, 8 }, { 8, 4, 32768, 8 }, { 1, 1, 131072, 1 }, { 8, 1, 32768, 1 },
};

/* One decode row's buffers (bf16, D = 128, Hq = 32): q, k, v, o, and enough K/V copies (ks, vs;
   [0] is b's) that the calls rotated over them read at least 256 MB, so K/V come from memory, not
   the L2; kvb the bytes of one K/V. Freed at the end of the row's scope. */
struct DecSet {
    Case c;
    Bufs b;
    double kvb;
    int copies;
    std::vector<void *> ks, vs;
    explicit DecSet(const DecRow &r)
        : c{ r.B, 32, r.Hkv, r.Sq, r.Sk, 128, 0, 0, 0, 0, FA_BF16, 0.0f, 0, 0 },
          kvb(2.0 * r.B * r.Hkv * (double)r.Sk * 128 * 2), copies(kvb >= 256e6 ? 1 : (int)ceil(256e6 / kvb))
    {
        alloc_bufs(c, b, 4000 + r.Sk + r.B + r.Hkv);
        ks.assign(copies, b.k); vs.assign(copies, b.v);
        for (int i = 1; i < copies; i++) {
            CK(cudaMalloc(&ks[i], b.nk * 2)); CK(cudaMalloc(&vs[i], b.nk * 2));
            randn(ks[i], b.nk, c.dt, 77 + 2 * i); randn(vs[i], b.nk, c.dt, 78 + 2 * i);
        }
    }
    /* the row's request made, resolved and picked (false: not resolved) */
    bool pick(fa_params *p, fa__dims *d, fa__cu_plan *pl)
    {
        make_params(c, b, p);
        return fa__resolve(p, b.q, b.k, b.v, b.o, d, NULL) == FA_OK && fa__cu_pick(d, b.q, b.k, b.v, b.o, pl) == FA_OK;
    }
    ~DecSet()
    {
        for (int i = 1; i < copies; i++) { cudaFree(ks[i]); cudaFree(vs[i]); }
        free_bufs(b);
    }
    DecSet(const DecSet &) = delete;
    DecSet &operator=(const DecSet &) = delete;
};

static void decode_rows(double cgbs)
{
    for (const DecRow &r : DEC_ROWS) {
        DecSet ds(r);
        const Case &c = ds.c;
        Bufs &b = ds.b;
        const double kvb = ds.kvb;
        const int copies = ds.copies;
        const std::vector<void *> &ks = ds.ks, &vs = ds.vs;
        fa_params p;
        make_params(c, b, &p);
        char line[400];
        fa_cuda_describe(&p, b.q, b.k, b.v, b.o, line, sizeof line);
        printf("# decode B=%d Sq=%d Sk=%d Hkv=%d (%d K/V copies): %s\n", r.B, r.Sq, r.Sk, r.Hkv, copies, line);
        fa_status st = fa_cuda_tiled(&p, b.q, b.k, b.v, b.o);
        CK(cudaDeviceSynchronize());
        if (st != FA_OK) {
            printf("DEC %-14s %3d %2d %8d %3d %2d %9s %8s %6s %9s %s\n", "fa_cuda_tiled", r.B, r.Sq, r.Sk, 32, r.Hkv, "-", "-",
                   "-", "-", fa_status_string(st));
            n_fail++;
        } else {
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
            float ms1 = 0;
            CK(cudaEventRecord(e0));
            for (int i = 0; i < copies; i++) fa_cuda_tiled(&p, b.q, ks[i], vs[i], b.o);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms1, e0, e1));
            int n = (int)std::min(400.0, std::max((double)copies, 20.0 / std::max(ms1 / copies, 1e-3f)));
            std::vector<float> t(7);
            for (size_t rep = 0; rep < t.size(); rep++) {
                CK(cudaEventRecord(e0));
                for (int i = 0; i < n; i++) fa_cuda_tiled(&p, b.q, ks[i % copies], vs[i % copies], b.o);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&t[rep], e0, e1));
            }
            std::sort(t.begin(), t.end());
            const double ms = t[t.size() / 2] / n, gbs = kvb / (ms * 1e-3) / 1e9;
            k_fill_u8<<<256, 256>>>((unsigned char *)b.o, b.no * 2, 0xff);
            fa_cuda_tiled(&p, b.q, b.k, b.v, b.o);
            CK(cudaDeviceSynchronize());
            Err e = check(c, b, 2, r.Sq, 11 + r.Sk);
            bool ok = pass(e, c.dt);
            if (!ok) n_fail++;
            printf("DEC %-14s %3d %2d %8d %3d %2d %9.4f %8.1f %6.3f %9.2e %s\n", "fa_cuda_tiled", r.B, r.Sq, r.Sk, 32, r.Hkv, ms,
                   gbs, gbs / cgbs, e.rel, ok ? "OK" : "FAIL");
            CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
        }
        fflush(stdout);
    }
}

/* ---- --decode-probe (issue 14): the decode rows under other plans of the same build ------------
   Per DEC_ROWS row, us per call (N calls between two events, median of 5; K/V copies rotated as
   --decode) and the host's time a call (32 calls queued on an idle device, steady_clock): "pick"
   fa_cuda_tiled as shipped (fa__cu_dec_pdl -1); "pdl0".."pdl3" the picked plan under each setting (bit 0
   the merge, bit 1 the split kernel launched with the programmatic-dependent-launch attribute),
   alternated over two rounds; "pdl0-old" pdl0 with main's per-call host work added back (74ae4bd:
   the device's attributes queried and the split kernel's two attributes set at every call);
   "split" the picked plan's split kernel alone and "merge" its merge alone (the workspace
   allocated once); "graph" the picked call's N calls captured in one CUDA graph and replayed.
   Each plan's o is checked against the picked call's (max |diff|, printed: the settings change no
   arithmetic, so 0). Earlier probes (the 32-row blocks, chunk sizes, dec4's m2s3/m2s2/m3s2
   configurations) are in git and bench/RESULTS.md, CUDA decode. */
/* The probe's configurations of the D = 128 16-row tensor-core decode kernel (8d2's fa__dec_d128
   fields; only the pipeline and the occupancy differ, so every one gives the same bits): "m2s3" two
   blocks an SM, a ring of 3 stages a warp, Q in registers (main's ed62c29); "m2s2" the same with 2
   stages (half the tiles in flight: Little's law's check); "m3s2" three blocks an SM (68 KB of
   shared memory, at most 168 registers: Q re-read from shared memory), 2 stages. */
struct prb_d128_m2s3 { enum { D = 128, NW = 4, MT = 1, BK = 16, QREG = 1, PF = 1, MINB = 2, ST = 3, QK2 = 1, RH = 1, LH = 0 }; };
struct prb_d128_m2s2 { enum { D = 128, NW = 4, MT = 1, BK = 16, QREG = 1, PF = 1, MINB = 2, ST = 2, QK2 = 1, RH = 1, LH = 0 }; };
struct prb_d128_m3s2 { enum { D = 128, NW = 4, MT = 1, BK = 16, QREG = 0, PF = 1, MINB = 3, ST = 2, QK2 = 1, RH = 1, LH = 0 }; };
/* --decode-mqa's other configuration of the D = 128 32-row block: "r32old", main's before decmq (4
   warps of two m16 tiles each, 255 registers, 2 blocks an SM; the shipped one pairs 8 warps of one
   m16 tile, two row halves sharing each key group's rings). Both give the bits of the 16-row block. */
struct prb_d128_r32old { enum { D = 128, NW = 4, MT = 2, BK = 16, QREG = 0, PF = 1, MINB = 2, ST = 3, QK2 = 1, RH = 1, LH = 0 }; };

/* A whole call (split kernel, merge, workspace) of plan pl with configuration C of the kernel (the
   largest carveout, as every tensor-core decode launch of this build; main's ed62c29 asked none). */
template <class C>
static void dec_call_cfg(const fa__cu_plan &pl, const fa__dims &d, const void *q, const void *k, const void *v, void *o)
{
    const fa_status s = fa__dec_tc_launch<__nv_bfloat16, C>(&pl, &d, q, k, v, o, (cudaStream_t)d.stream);
    CK(s == FA_OK ? cudaSuccess : cudaErrorUnknown);
}

template <class C>
static void dec_split_only(const fa__cu_plan &pl, const fa__dims &d, const void *q, const void *k, const void *v, float *ws)
{
    fa__dec_args a;
    memset(&a, 0, sizeof a);
    a.d = d; a.q = q; a.k = k; a.v = v;
    a.chunk = pl.chunk; a.chunks = pl.chunks;
    a.rblocks = (d.group * d.Sq + pl.bq - 1) / pl.bq;
    a.wo = ws;
    a.wl = ws + (size_t)d.B * d.Hq * d.Sq * pl.chunks * d.Dv;
    void (*kern)(const fa__dec_args) = pl.mods ? fa__dec_tc<__nv_bfloat16, C, 4> : fa__dec_tc<__nv_bfloat16, C, 0>;
    CK(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa__dec_geom<C>::SMEM));
    CK(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100));   /* as fa__dec_tc_launch */
    kern<<<dim3((unsigned)(a.rblocks * a.chunks), (unsigned)d.Hkv, (unsigned)d.B), C::NW * 32, fa__dec_geom<C>::SMEM>>>(a);
}

static void decode_probe(void)
{
    for (const DecRow &r : DEC_ROWS) {
        DecSet ds(r);
        const Case &c = ds.c;
        Bufs &b = ds.b;
        const double kvb = ds.kvb;
        const int copies = ds.copies;
        const std::vector<void *> &ks = ds.ks, &vs = ds.vs;
        fa_params p;
        fa__dims d;
        fa__cu_plan pick;
        if (!ds.pick(&p, &d, &pick)) {
            printf("# probe B=%d Sk=%d Hkv=%d: not resolved\n", r.B, r.Sk, r.Hkv);
            n_fail++;
            continue;
        }
        /* cfg: 0 the build's kernel, 1.. prb_d128_* (not run now: dec4's question); pdl: fa__cu_dec_pdl's
           setting; oldhost: the per-call host work of main at 74ae4bd added (the device queried and the
           split kernel's attributes set at every call) */
        struct Var { const char *name; fa__cu_plan pl; int cfg, pdl, oldhost; };
        std::vector<Var> vars;
        vars.push_back({ "pick", pick, 0, -1, 0 });
        for (int round = 0; round < 2; round++) {   /* the launch settings, alternated over two rounds */
            vars.push_back({ "pdl0", pick, 0, 0, 0 });
            vars.push_back({ "pdl0-old", pick, 0, 0, 1 });
            vars.push_back({ "pdl1", pick, 0, 1, 0 });
            vars.push_back({ "pdl2", pick, 0, 2, 0 });
            vars.push_back({ "pdl3", pick, 0, 3, 0 });
        }
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
        double host_us = 0;   /* set by timed: the host's time a call, 32 calls queued on an idle device */
        auto timed = [&](auto &&call) {   /* us per call: N calls between events, median of 5 */
            const double us = dec_time_us(call, copies, e0, e1);
            const auto h0 = std::chrono::steady_clock::now();
            for (int i = 0; i < 32; i++) call(i);
            const auto h1 = std::chrono::steady_clock::now();
            CK(cudaDeviceSynchronize());
            host_us = std::chrono::duration<double, std::micro>(h1 - h0).count() / 32;
            return us;
        };
        const size_t ob = b.no * 2;
        std::vector<unsigned char> ref(ob), got(ob);
        printf("# probe B=%d Sq=%d Sk=%d Hkv=%d (%d K/V copies), %.1f MB of K/V:\n", r.B, r.Sq, r.Sk, r.Hkv, copies, kvb / 1e6);
        for (size_t vi = 0; vi < vars.size(); vi++) {
            const fa__cu_plan pl = vars[vi].pl;
            const int cfg = vars[vi].cfg, oldhost = vars[vi].oldhost;
            fa__cu_dec_pdl = vars[vi].pdl;
            auto call = [&](int i) {
                fa__dims dd;
                fa__cu_plan x;
                fa__resolve(&p, b.q, ks[i % copies], vs[i % copies], b.o, &dd, NULL);
                fa__cu_pick(&dd, b.q, ks[i % copies], vs[i % copies], b.o, &x);   /* the same host work as a call */
                if (oldhost) {   /* main's: fa__cu_dec_pick's and fa__cu_alloc's queries, the two cudaFuncSetAttribute */
                    int dev = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0;
                    const void *kf = pl.kernel == FA__CU_DEC_TC_D128_R32
                                         ? (const void *)fa__dec_tc<__nv_bfloat16, fa__dec_d128_r32, 0>
                                         : (const void *)fa__dec_tc<__nv_bfloat16, fa__dec_d128, 0>;
                    const int sm = pl.kernel == FA__CU_DEC_TC_D128_R32 ? (int)fa__dec_geom<fa__dec_d128_r32>::SMEM
                                                                       : (int)fa__dec_geom<fa__dec_d128>::SMEM;
                    CK(cudaGetDevice(&dev));
                    CK(cudaDeviceGetAttribute(&a1, cudaDevAttrComputeCapabilityMajor, dev));
                    CK(cudaDeviceGetAttribute(&a2, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
                    CK(cudaDeviceGetAttribute(&a3, cudaDevAttrMultiProcessorCount, dev));
                    CK(cudaFuncSetAttribute(kf, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
                    CK(cudaFuncSetAttribute(kf, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
                    CK(cudaGetDevice(&dev));
                    CK(cudaDeviceGetAttribute(&a4, cudaDevAttrMemoryPoolsSupported, dev));
                }
                if (cfg == 1) dec_call_cfg<prb_d128_m2s3>(pl, dd, b.q, ks[i % copies], vs[i % copies], b.o);
                else if (cfg == 2) dec_call_cfg<prb_d128_m2s2>(pl, dd, b.q, ks[i % copies], vs[i % copies], b.o);
                else if (cfg == 3) dec_call_cfg<prb_d128_m3s2>(pl, dd, b.q, ks[i % copies], vs[i % copies], b.o);
                else fa__cu_launch(&pl, &dd, b.q, ks[i % copies], vs[i % copies], b.o, (cudaStream_t)dd.stream);
            };
            const double us = timed(call);
            k_fill_u8<<<256, 256>>>((unsigned char *)b.o, ob, 0xff);
            call(0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), b.o, ob, cudaMemcpyDeviceToHost));
            if (vi == 0) ref = got;
            double md = 0;
            for (size_t e = 0; e < b.no; e++) md = std::max(md, (double)fabsf(tof(got.data(), e, c.dt) - tof(ref.data(), e, c.dt)));
            printf("PROBE %3d %2d %8d %2d %-8s %-16s rows %2d chunks %4d x %6d  %9.2f us %8.1f GB/s  maxdiff %.3g  host %.2f us\n",
                   r.B, r.Sq, r.Sk, r.Hkv, vars[vi].name, fa__cu_kernel_name(pl.kernel), pl.bq, pl.chunks, pl.chunk, us,
                   kvb / (us * 1e-6) / 1e9, md, host_us);
            fa__cu_dec_pdl = -1;
            fflush(stdout);
        }
        {   /* the picked plan's split kernel and merge alone, the workspace allocated once */
            float *ws = NULL;
            CK(cudaMalloc(&ws, fa__cu_dec_bytes(&d, pick.chunks)));
            const float *wl = ws + (size_t)d.B * d.Hq * d.Sq * pick.chunks * d.Dv;
            auto split = [&](int i) {
                if (pick.kernel == FA__CU_DEC_TC_D128_R32)
                    dec_split_only<fa__dec_d128_r32>(pick, d, b.q, ks[i % copies], vs[i % copies], ws);
                else
                    dec_split_only<fa__dec_d128>(pick, d, b.q, ks[i % copies], vs[i % copies], ws);
            };
            auto merge = [&](int) {
                fa__cu_dec_merge<__nv_bfloat16><<<(unsigned)(d.B * d.Hq * d.Sq), FA__CU_DEC_THREADS>>>(d, ws, wl, pick.chunks,
                                                                                                  (__nv_bfloat16 *)b.o);
            };
            const double us_s = timed(split), us_m = timed(merge);
            printf("PROBE %3d %2d %8d %2d %-8s %-16s rows %2d chunks %4d x %6d  %9.2f us %8.1f GB/s\n", r.B, r.Sq, r.Sk, r.Hkv,
                   "split", fa__cu_kernel_name(pick.kernel), pick.bq, pick.chunks, pick.chunk, us_s, kvb / (us_s * 1e-6) / 1e9);
            printf("PROBE %3d %2d %8d %2d %-8s %-16s rows %2d chunks %4d x %6d  %9.2f us\n", r.B, r.Sq, r.Sk, r.Hkv, "merge",
                   fa__cu_kernel_name(pick.kernel), pick.bq, pick.chunks, pick.chunk, us_m);
            cudaFree(ws);
        }
        {   /* the picked call captured as a graph of N calls on a stream of its own */
            cudaStream_t st;
            cudaGraph_t g;
            cudaGraphExec_t ge;
            const int n = std::max(copies, 40);
            CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
            fa_params ps = p;
            ps.stream = st;
            bool ok = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) == cudaSuccess;
            for (int i = 0; ok && i < n; i++) ok = fa_cuda_tiled(&ps, b.q, ks[i % copies], vs[i % copies], b.o) == FA_OK;
            ok = cudaStreamEndCapture(st, &g) == cudaSuccess && ok;
            ok = ok && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
            if (ok) {
                std::vector<float> t(5);
                CK(cudaGraphLaunch(ge, st));
                CK(cudaStreamSynchronize(st));
                for (size_t rep = 0; rep < t.size(); rep++) {
                    CK(cudaEventRecord(e0, st));
                    CK(cudaGraphLaunch(ge, st));
                    CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&t[rep], e0, e1));
                }
                std::sort(t.begin(), t.end());
                const double us = 1e3 * t[2] / n;
                printf("PROBE %3d %2d %8d %2d %-8s %-16s rows %2d chunks %4d x %6d  %9.2f us %8.1f GB/s\n", r.B, r.Sq, r.Sk,
                       r.Hkv, "graph", fa__cu_kernel_name(pick.kernel), pick.bq, pick.chunks, pick.chunk, us,
                       kvb / (us * 1e-6) / 1e9);
                cudaGraphExecDestroy(ge);
                cudaGraphDestroy(g);
            } else {
                printf("# probe: graph capture failed (%s)\n", cudaGetErrorString(cudaGetLastError()));
            }
            (void)cudaGetLastError();
            cudaStreamDestroy(st);
        }
        fflush(stdout);
        CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    }
}

/* ---- --decode-mqa (issue 14, helper decmq): the decode rows with more than 16 packed rows (the MQA
   rows) under the D = 128 32-row configurations: the picked call, then forced plans (16-row blocks;
   32-row blocks in r32old and in the shipped paired block), whole calls and their split kernels
   alone, alternated over two rounds, us per call (N calls, median of 5, K/V copies rotated as
   --decode); each forced plan's o compared with the pick's (max |diff|: 0 expected, the same bits).
   With prof set (--decode-prof-mqa, for ncu): B = 8 only, each split kernel launched once, nothing
   timed. */
static void decode_mqa(bool prof)
{
    for (const DecRow &r : DEC_ROWS) {
        if (r.Hkv != 1 || (prof && r.B != 8)) continue;
        DecSet ds(r);
        const Case &c = ds.c;
        Bufs &b = ds.b;
        const double kvb = ds.kvb;
        const int copies = ds.copies;
        const std::vector<void *> &ks = ds.ks, &vs = ds.vs;
        fa_params p;
        fa__dims d;
        fa__cu_plan pick;
        if (!ds.pick(&p, &d, &pick) || (pick.kernel != FA__CU_DEC_TC_D128 && pick.kernel != FA__CU_DEC_TC_D128_R32)) {
            printf("# mqa B=%d Sk=%d: not the tensor-core decode\n", r.B, r.Sk);
            n_fail++;
            continue;
        }
        fa__cu_plan p16 = pick, p32 = pick;
        p16.kernel = FA__CU_DEC_TC_D128; p16.bq = 16;
        p32.kernel = FA__CU_DEC_TC_D128_R32; p32.bq = 32;
        float *ws = NULL;
        CK(cudaMalloc(&ws, fa__cu_dec_bytes(&d, pick.chunks)));
        if (prof) {
            dec_split_only<prb_d128_r32old>(p32, d, b.q, b.k, b.v, ws);
            dec_split_only<fa__dec_d128_r32>(p32, d, b.q, b.k, b.v, ws);
            dec_split_only<fa__dec_d128>(p16, d, b.q, b.k, b.v, ws);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            printf("# prof mqa B=%d Sk=%d: %d chunks of %d (split r32old, p32 (shipped), 16-row)\n", r.B, r.Sk, pick.chunks,
                   pick.chunk);
            cudaFree(ws);
            continue;
        }
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
        auto timed = [&](auto &&call) {
            return dec_time_us(call, copies, e0, e1);
        };
        const size_t ob = b.no * 2;
        std::vector<unsigned char> ref(ob), got(ob);
        const char *names[] = { "pick", "call16", "call-r32old", "call-p32", "split16", "split-r32old", "split-p32" };
        printf("# mqa B=%d Sq=%d Sk=%d Hkv=%d: pick %s, %d chunks of %d\n", r.B, r.Sq, r.Sk, r.Hkv, fa__cu_kernel_name(pick.kernel),
               pick.chunks, pick.chunk);
        for (int round = 0; round < 2; round++)
            for (int v = 0; v < 7; v++) {
                auto call = [&](int i) {
                    fa__dims dd;
                    fa__resolve(&p, b.q, ks[i % copies], vs[i % copies], b.o, &dd, NULL);
                    const void *kk = ks[i % copies], *vv = vs[i % copies];
                    switch (v) {
                    case 0: CK(fa_cuda_tiled(&p, b.q, kk, vv, b.o) == FA_OK ? cudaSuccess : cudaErrorUnknown); break;
                    case 1: dec_call_cfg<fa__dec_d128>(p16, dd, b.q, kk, vv, b.o); break;
                    case 2: dec_call_cfg<prb_d128_r32old>(p32, dd, b.q, kk, vv, b.o); break;
                    case 3: dec_call_cfg<fa__dec_d128_r32>(p32, dd, b.q, kk, vv, b.o); break;
                    case 4: dec_split_only<fa__dec_d128>(p16, dd, b.q, kk, vv, ws); break;
                    case 5: dec_split_only<prb_d128_r32old>(p32, dd, b.q, kk, vv, ws); break;
                    default: dec_split_only<fa__dec_d128_r32>(p32, dd, b.q, kk, vv, ws); break;
                    }
                };
                const double us = timed(call);
                double md = 0;
                if (v < 4) {
                    k_fill_u8<<<256, 256>>>((unsigned char *)b.o, ob, 0xff);
                    call(0);
                    CK(cudaDeviceSynchronize());
                    CK(cudaMemcpy(got.data(), b.o, ob, cudaMemcpyDeviceToHost));
                    if (v == 0) ref = got;
                    for (size_t e = 0; e < b.no; e++)
                        md = std::max(md, (double)fabsf(tof(got.data(), e, c.dt) - tof(ref.data(), e, c.dt)));
                    if (md != 0) n_fail++;
                }
                printf("MQA %d %3d %2d %8d %2d %-13s %9.2f us %8.1f GB/s  maxdiff %.3g\n", round, r.B, r.Sq, r.Sk, r.Hkv, names[v], us,
                       kvb / (us * 1e-6) / 1e9, md);
                fflush(stdout);
            }
        CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
        cudaFree(ws);
    }
}

/* ---- --decode-prof (issue 14, for ncu): B = 1 and B = 8 at Sk = 32k (bf16, D = 128, GQA 32/8, the
   DEC_ROWS shapes): one fa_cuda_tiled call (the build's pick), then the split kernel alone in main's
   configuration (prb_d128_m2s3) and in m3s2, once each; nothing timed. */
static void decode_prof(void)
{
    for (const DecRow &r : DEC_ROWS) {
        if (r.Sk != 32768 || r.Sq != 1 || r.Hkv != 8) continue;
        DecSet ds(r);
        Bufs &b = ds.b;
        fa_params p;
        make_params(ds.c, b, &p);
        fa__dims d;
        fa__cu_plan pick;
        if (fa__resolve(&p, b.q, b.k, b.v, b.o, &d, NULL) != FA_OK || fa__cu_pick(&d, b.q, b.k, b.v, b.o, &pick) != FA_OK ||
            pick.kernel != FA__CU_DEC_TC_D128) {
            printf("# prof B=%d Sk=%d: not the 16-row tensor-core decode kernel\n", r.B, r.Sk);
            n_fail++;
            continue;
        }
        float *ws = NULL;
        CK(cudaMalloc(&ws, fa__cu_dec_bytes(&d, pick.chunks)));
        CK(fa_cuda_tiled(&p, b.q, b.k, b.v, b.o) == FA_OK ? cudaSuccess : cudaErrorUnknown);
        dec_split_only<prb_d128_m2s3>(pick, d, b.q, b.k, b.v, ws);
        dec_split_only<prb_d128_m3s2>(pick, d, b.q, b.k, b.v, ws);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        printf("# prof B=%d Sk=%d: %d chunks of %d, %d blocks (call, split m2s3, split m3s2)\n", r.B, r.Sk, pick.chunks, pick.chunk,
               pick.chunks * d.Hkv * d.B);
        cudaFree(ws);
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) opt_quick = 1;
        else if (!strcmp(argv[i], "--no-api")) opt_api = 0;
        else if (!strcmp(argv[i], "--no-tune")) opt_tune = 0;
        else if (!strcmp(argv[i], "--no-naive")) opt_naive = 0;
        else if (!strcmp(argv[i], "--no-check")) opt_check = 0;
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc) opt_budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--prof")) opt_prof = 1;
        else if (!strcmp(argv[i], "--decode")) opt_decode = 1;
        else if (!strcmp(argv[i], "--decode-probe")) opt_decode = 2;
        else if (!strcmp(argv[i], "--decode-prof")) opt_decode = 3;
        else if (!strcmp(argv[i], "--decode-mqa")) opt_decode = 4;
        else if (!strcmp(argv[i], "--decode-prof-mqa")) opt_decode = 5;
        else if (!strcmp(argv[i], "--xp")) opt_xp = 1;
        else { fprintf(stderr, "usage: %s [--quick] [--no-api] [--no-tune] [--no-naive] [--no-check] [--budget s] [--decode] [--decode-probe] [--decode-prof] [--decode-mqa] [--decode-prof-mqa] [--xp]\n", argv[0]); return 2; }
    }
#ifdef FA_BENCH_TC_ONLY
    opt_api = 0;
    (void)opt_naive;
#endif
    cudaDeviceProp pr;
    int drv = 0;
    CK(cudaGetDeviceProperties(&pr, 0));
    CK(cudaDriverGetVersion(&drv));
    printf("# device %s, %d SMs, L2 %d MB, cc %d.%d, driver API %d\n", pr.name, pr.multiProcessorCount,
           pr.l2CacheSize >> 20, pr.major, pr.minor, drv);

    const Impl tc = { "tc_tiled", 2, tc_default, 0 };
#ifndef FA_BENCH_TC_ONLY
    if (opt_decode == 3 || opt_decode == 5) {
        if (opt_decode == 3) decode_prof();
        else decode_mqa(true);
        return n_fail ? 1 : 0;
    }
    if (opt_decode == 4) {
        decode_mqa(false);
        printf("# %s: %d failure(s)\n", n_fail ? "FAILED" : "all checks passed", n_fail);
        return n_fail ? 1 : 0;
    }
    if (opt_decode) {
        const double cg = copy_gbs();
        printf("# device-to-device cudaMemcpy: %.1f GB/s (bytes read + written)\n", cg);
        printf("COPY %.1f\n", cg);
        if (opt_decode == 2) decode_probe();
        else decode_rows(cg);
        printf("# %s: %d failure(s)\n", n_fail ? "FAILED" : "all checks passed", n_fail);
        return n_fail ? 1 : 0;
    }
#endif
#ifndef FA_BENCH_TUNE
    if (opt_xp) {
        fprintf(stderr, "%s: --xp needs a build with -DFA_BENCH_TUNE (make build/bench_cuda)\n", argv[0]);
        return 2;
    }
#else
    if (opt_xp) {   /* the exps' FMA-pipe shares alone (xp_impls) */
        for (int D : { 128, 64 }) {
            const int H = 2048 / D;
            Case base = { 1, H, H, 16384, 16384, D, 1, 0, 0, 0, FA_BF16, 0.0f, 1, 0 };
            Bufs b;
            alloc_bufs(base, b, 4242 + D);   /* with the slopes */
            for (const XpImpl &x : xp_impls) {
                if (x.im.D != D) continue;
                for (int causal = x.v == 0 && D == 64 ? 0 : 1; causal < 2; causal++) {
                    Case c = base;
                    c.causal = causal;
                    c.softcap = x.v == 1 ? 30.0f : 0.0f;
                    c.alibi = x.v == 2;
                    bench_row(x.im, c, b, x.v == 0 ? "plain" : x.v == 1 ? "softcap30" : "alibi");
                }
            }
            free_bufs(b);
        }
        printf("# %s: %d failure(s)\n", n_fail ? "FAILED" : "all checks passed", n_fail);
        return n_fail ? 1 : 0;
    }
#endif
    if (opt_prof) {   /* bf16, S = 16384: D=64 and D=128, non-causal then causal */
        for (int D : { 64, 128 })
            for (int causal = 0; causal < 2; causal++) {
                Case c = { 1, 2048 / D, 2048 / D, 16384, 16384, D, causal, 0, 0, 0, FA_BF16, 0.0f, 0, 0 };
                Bufs b;
                fa_params p;
                alloc_bufs(c, b, 5);
                make_params(c, b, &p);
                fa_status st = call(tc, p, b);
                CK(cudaDeviceSynchronize());
                printf("# prof D=%d causal=%d: %s\n", D, causal, fa_status_string(st));
                free_bufs(b);
            }
        return 0;
    }
#ifndef FA_BENCH_TC_ONLY
    const Impl api_tiled = { "fa_cuda_tiled", 0, 0, 0 }, api_naive = { "fa_cuda_naive", 1, 0, 0 };
#endif
    if (opt_check) {
        std::vector<Impl> v;
#ifndef FA_BENCH_TC_ONLY
        if (opt_api) v.push_back(api_tiled);
#endif
        if (!opt_api) v.push_back(tc);
        if (opt_tune) for (const Impl &t : tune_impls) v.push_back(t);
        correctness(v);
    }

    std::vector<int> Ss = opt_quick ? std::vector<int>{ 1024, 4096, 16384 } : std::vector<int>{ 512, 1024, 2048, 4096, 8192, 16384 };
    if (getenv("FA_BENCH_S")) Ss = int_list(getenv("FA_BENCH_S"));   /* e.g. FA_BENCH_S=2048,4096: those lengths */
    /* tile configurations: bf16 plain, S = 4096 and 16384 non-causal, 16384 and 4096 causal; or with
       FA_TUNE_S=S1,S2,.. those lengths, non-causal and causal, bf16 and fp16 (rows a configuration
       cannot run say so), each case's configurations one after another (an A/B in one run) */
#ifndef FA_BENCH_TUNE
    opt_tune = 0;
#endif
    if (opt_tune) {
        const char *only = getenv("FA_TUNE_ONLY");   /* e.g. FA_TUNE_ONLY=wg: those configurations' rows, then exit */
        const char *ts = getenv("FA_TUNE_S");
        std::vector<Case> cs;
        for (int D : { 64, 128 }) {
            int H = 2048 / D;
            if (ts)
                for (int S : int_list(ts))
                    for (int causal = 0; causal < 2; causal++)
                        for (fa_dtype dt : { FA_BF16, FA_F16 }) cs.push_back({ 16384 / S, H, H, S, S, D, causal, 0, 0, 0, dt, 0.0f, 0, 0 });
            else
                for (int k = 0; k < 4; k++) {
                    int S = k == 0 || k == 3 ? 4096 : 16384, causal = k >= 2;
                    cs.push_back({ 16384 / S, H, H, S, S, D, causal, 0, 0, 0, FA_BF16, 0.0f, 0, 0 });
                }
        }
        for (const Impl &t : tune_impls) {   /* without FA_TUNE_S: configuration by configuration, as before */
            if (ts || !prefix_in(t.name, only)) continue;
            for (const Case &c : cs) {
                if (c.D != t.D) continue;
                Bufs b;
                alloc_bufs(c, b, 77 + c.Sq + c.D);
                bench_row(t, c, b, "tune");
                free_bufs(b);
            }
        }
        if (ts)
            for (const Case &c : cs) {
                Bufs b;
                bool any = false;
                for (const Impl &t : tune_impls) {
                    if (c.D != t.D || !prefix_in(t.name, only)) continue;
                    if (!any) alloc_bufs(c, b, 77 + c.Sq + c.D + c.dt);
                    any = true;
                    bench_row(t, c, b, "tune");
                }
                if (any) free_bufs(b);
            }
        if (only) return 0;
    }
    std::vector<Impl> rows;
#ifndef FA_BENCH_TC_ONLY
    if (opt_api) rows.push_back(api_tiled);
    if (opt_api && opt_naive) rows.push_back(api_naive);
#endif
    if (!opt_api) rows.push_back(tc);
    for (int D : { 64, 128 }) {
        int H = 2048 / D;
        for (int S : Ss)
            for (int causal = 0; causal < 2; causal++)
                for (fa_dtype dt : { FA_BF16, FA_F16, FA_F32 }) {
                    if (!opt_api && dt == FA_F32) continue;
                    Case c = { 16384 / S, H, H, S, S, D, causal, 0, 0, 0, dt, 0.0f, 0, 0 };
                    Bufs b;
                    alloc_bufs(c, b, 99 + S * 3 + D + dt);
                    for (const Impl &im : rows) {
                        /* the naive path materialises B*H*S*S fp32 scores: keep it under ~17 GB */
                        if (im.kind == 1 && (double)c.B * H * S * (double)S * 4 > 17.5e9) continue;
                        bench_row(im, c, b, "-");
                    }
                    free_bufs(b);
                }
        /* sliding windows, softcap, ALiBi at S = 16384 (causal), bf16 and fp16 */
        for (fa_dtype dt : { FA_BF16, FA_F16 }) {
            const int S = 16384;
            Case base = { 1, H, H, S, S, D, 1, 0, 0, 0, dt, 0.0f, 0, 0 };
            Bufs b;
            alloc_bufs(base, b, 555 + D + dt);   /* slopes always allocated below */
            {
                std::vector<float> s(H);
                for (int h = 0; h < H; h++) s[h] = (float)pow(2.0, -8.0 * (h + 1) / H);
                CK(cudaMalloc(&b.slopes, H * 4));
                CK(cudaMemcpy(b.slopes, s.data(), H * 4, cudaMemcpyHostToDevice));
            }
            for (const Impl &im : rows) {
                if (im.kind == 1) continue;
                Case c = base;
                bench_row(im, c, b, "plain");
                c = base; c.wl = 256; bench_row(im, c, b, "window256");
                c = base; c.wl = 4096; bench_row(im, c, b, "window4096");
                c = base; c.softcap = 30.0f; bench_row(im, c, b, "softcap30");
                c = base; c.alibi = 1; bench_row(im, c, b, "alibi");
            }
            free_bufs(b);
        }
    }
    printf("# %s: %d failure(s)\n", n_fail ? "FAILED" : "all checks passed", n_fail);
    return n_fail ? 1 : 0;
}
