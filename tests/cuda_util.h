/* tests/cuda_util.h - the device buffers of the CUDA suites (tests/test_cuda.cu and
   tests/test_cuda_backward.cu), included after cmocka.h, flashattn.h and ref.h: CU (a CUDA call
   that must succeed), dalloc (device memory poisoned with 0xFF bytes), upload and download between
   host fp32 and a device tensor of a storage dtype, all_poison (whether device bytes are still the
   poison), esize and dt_name. */
#ifndef FA_TESTS_CUDA_UTIL_H
#define FA_TESTS_CUDA_UTIL_H

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            print_error("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

static size_t esize(fa_dtype dt) { return dt == FA_F32 ? 4 : 2; }

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    CU(cudaMalloc(&p, bytes ? bytes : 1));
    CU(cudaMemset(p, 0xFF, bytes ? bytes : 1));   /* poison */
    return p;
}

/* host fp32 -> device storage of dt */
static void *upload(const float *x, size_t n, fa_dtype dt)
{
    size_t es = esize(dt), i;
    void *d = dalloc(n * es);
    if (dt == FA_F32) {
        CU(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
    } else {
        uint16_t *h = (uint16_t *)malloc((n ? n : 1) * 2);
        assert_non_null(h);
        for (i = 0; i < n; i++) h[i] = dt == FA_F16 ? ref_f32_to_f16(x[i]) : ref_f32_to_bf16(x[i]);
        CU(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
        free(h);
    }
    return d;
}

/* device storage of dt -> host fp32 (and the raw bytes, if raw) */
static void download(float *x, const void *d, size_t n, fa_dtype dt, unsigned char *raw)
{
    size_t es = esize(dt), i;
    unsigned char *h = raw ? raw : (unsigned char *)malloc((n ? n : 1) * es);
    assert_non_null(h);
    CU(cudaMemcpy(h, d, n * es, cudaMemcpyDeviceToHost));
    for (i = 0; i < n; i++) {
        if (dt == FA_F32) memcpy(x + i, h + 4 * i, 4);
        else {
            uint16_t u;
            memcpy(&u, h + 2 * i, 2);
            x[i] = dt == FA_F16 ? ref_f16_to_f32(u) : ref_bf16_to_f32(u);
        }
    }
    if (!raw) free(h);
}

static int all_poison(const void *d, size_t bytes)
{
    unsigned char *h = (unsigned char *)malloc(bytes ? bytes : 1);
    int ok;
    if (!h) return 0;
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) { free(h); return 0; }
    ok = ref_is_poison(h, bytes);
    free(h);
    return ok;
}

static const char *dt_name(fa_dtype dt) { return dt == FA_F32 ? "f32" : dt == FA_F16 ? "f16" : "bf16"; }

#endif
