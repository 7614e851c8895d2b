/* tests/talloc.h - the counting, failable allocator that the CPU suites compile the library with
   (behind FLASHATTN_MALLOC / FLASHATTN_FREE): every call's peak allocation is compared with its
   workspace query, leaks are counted, and the n-th allocation can be made to fail. Include it
   once, before flashattn.h, in a suite's only translation unit. */
#ifndef FLASHATTN_TESTS_TALLOC_H
#define FLASHATTN_TESTS_TALLOC_H
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TA_HDR 64   /* keeps malloc's alignment and holds the block's size */

static pthread_mutex_t ta_mu = PTHREAD_MUTEX_INITIALIZER;
static size_t ta_live, ta_peak;        /* bytes the library holds now, and the most since reset */
static long ta_calls;                  /* allocations since reset */
static long ta_fail_in = -1;           /* the allocation (0 = the next) that fails; -1: none */
static int ta_failed;                  /* an injected failure happened since reset */

static void *ta_malloc(size_t n)
{
    unsigned char *b;
    pthread_mutex_lock(&ta_mu);
    ta_calls++;
    if (ta_fail_in == 0) {
        ta_fail_in = -1;
        ta_failed = 1;
        pthread_mutex_unlock(&ta_mu);
        return NULL;
    }
    if (ta_fail_in > 0) ta_fail_in--;
    b = n > SIZE_MAX - TA_HDR ? NULL : (unsigned char *)malloc(n + TA_HDR);
    if (b) {
        memcpy(b, &n, sizeof n);
        ta_live += n;
        if (ta_live > ta_peak) ta_peak = ta_live;
    }
    pthread_mutex_unlock(&ta_mu);
    return b ? b + TA_HDR : NULL;
}

static void ta_free(void *p)
{
    unsigned char *b;
    size_t n;
    if (!p) return;
    b = (unsigned char *)p - TA_HDR;
    memcpy(&n, b, sizeof n);
    pthread_mutex_lock(&ta_mu);
    ta_live -= n;
    pthread_mutex_unlock(&ta_mu);
    free(b);
}

/* Starts a measurement; returns the bytes live before it (0 unless a concurrent test runs). */
static size_t ta_reset(long fail_in)
{
    size_t live;
    pthread_mutex_lock(&ta_mu);
    ta_peak = ta_live;
    ta_calls = 0;
    ta_fail_in = fail_in;
    ta_failed = 0;
    live = ta_live;
    pthread_mutex_unlock(&ta_mu);
    return live;
}

#ifdef __SANITIZE_ADDRESS__
/* The no-memory tests ask for petabytes: under ASan, malloc must say NULL rather than abort. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

#endif /* FLASHATTN_TESTS_TALLOC_H */
