/* bench/ab/ab.h - the request bench/ab/ab.c passes to each side (side.c) of an A/B. */
#include <stdint.h>
typedef struct ab_req {
    int B, H, Hkv, Sq, Sk, D, causal, threads, wl;
    float cap;
    const float *alibi, *bias;
    int64_t bs[4];
} ab_req;
int side_a(const ab_req *r, const float *q, const float *k, const float *v, float *o, float *lse);
int side_b(const ab_req *r, const float *q, const float *k, const float *v, float *o, float *lse);
