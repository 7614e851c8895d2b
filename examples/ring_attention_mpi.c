/* ring_attention_mpi.c - ring attention across MPI ranks, forward and backward, from fa_tiled (with
   lse), fa_merge and fa_tiled_backward.

   A context too long for one machine is split across N ranks. Each rank holds its share of the
   queries and of the keys and values of a [B][S][H][D] sequence (Hkv kv heads, GQA allowed); the K/V
   blocks travel round the ring (rank r sends to r+1, receives from r-1) with MPI_Isend/MPI_Irecv
   while the rank attends its queries to the block in hand, and the partial results are merged
   through their log-sum-exp with fa_merge. After N steps every rank has seen every block, and its
   o and lse are those of one call over the whole sequence.

   Chunks. The sequence is cut into 2N chunks of C = S / 2N tokens and rank r holds chunks r and
   2N-1-r (zig-zag), as local tokens [0, C) and [C, 2C) of its [B][2C][H][D] buffers. Causal, a
   (query chunk, key chunk) pair is full attention when the key chunk comes earlier, causal when it is
   the same chunk, and skipped when it comes later; with the zig-zag each rank then does the same work
   at every step (2C^2 scores), where contiguous chunks would leave rank N-1 with N times rank 0's.
   Non-causal, every pair is full and the assignment does not matter (the same one is used).

   Backward. Each rank walks the ring again and recomputes, against each K/V block, the gradients of
   its own query rows with fa_tiled_backward, fed the merged (global) o and lse of the forward; dq
   accumulates locally, and the dk/dv partials of a block travel round the ring with it and end at
   the block's owner, summed in the order of the ring (owner, owner+1, ...): deterministic.

   Check. Rank 0 computes fa_tiled and fa_tiled_backward over the whole sequence in one process,
   gathers every rank's o, lse, dq, dk and dv, and compares them with API.md's fp32 tolerances:
   allclose(1e-5, 1e-5) for o and lse, allclose(1e-4, 1e-5) for the gradients. Exit status 1 on a
   mismatch. The inputs are N(0,1), each element a hash of its position in the whole sequence, so
   every rank draws its own chunks and rank 0 the same values for the whole.

   mpicc -O2 -std=c99 -I. examples/ring_attention_mpi.c -o ring_attention_mpi -lopenblas -lm -lpthread
   mpirun -np 4 ./ring_attention_mpi --S 4096 --causal 1
   ./ring_attention_mpi --memory          (the memory per rank table; no mpirun needed) */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <mpi.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_KV  0          /* + step: a K/V block */
#define TAG_DKV (1 << 16)  /* + step: a block's dk/dv partial sums */

typedef struct opts {
    int B, S, H, Hkv, D, causal, threads, check, reps, memory, perturb;
} opts;

/* One rank's share. Layouts (elements):
     q, dq, dq_s   [B][2C][H][D]      the rank's two query chunks, as [B][S][H][D] strides
     kv blocks     k [B][2C][Hkv][D] then v [B][2C][Hkv][D], in one buffer of kvn floats, so a block
                   is one message; own is this rank's, ring[2] the blocks in flight
     dkv_in[2]     a block's dk/dv partial sums (the layout of a kv block), received, added to, sent
     dkv_s         one call's dk/dv;  dkv: the rank's own dk/dv once they are back
     o[c], d_o[c]  [B][H][C][D] per query chunk c, packed (fa_merge's [rows][dv], rows = B*H*C)
     lse[c]        [B][H][C] per query chunk */
typedef struct ring {
    int rank, n, left, right;
    int B, H, Hkv, D, C, causal, threads;
    size_t qn, kvn, half, on, ln;      /* floats: local q, a kv block, its k (or v), a chunk's o, lse */
    float *q, *own, *ring[2], *o[2], *lse[2], *o_part, *lse_part;
    float *d_o[2], *dq, *dq_s, *dkv_in[2], *dkv_s, *dkv;
    double wait_s;                     /* seconds in MPI_Wait* during the last pass */
    double compute_s;                  /* seconds in fa_tiled / fa_tiled_backward during the last pass */
    double bytes;                      /* bytes this rank sent during the last pass */
    int msgs, late;                    /* messages posted, and those not complete when waited for */
} ring;

/* ---- inputs: N(0,1) from a hash of (tensor, position in the whole sequence) -------------------- */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* element (b, global token s, head h, feature d) of tensor `t` (0 q, 1 k, 2 v, 3 d_o): a position
   hashed with the tensor's own seed, so the four tensors are independent */
static float gen(int t, int b, int s, int h, int d)
{
    uint64_t pos = (((uint64_t)b * 16777216u + (uint64_t)s) * 4096u + (uint64_t)h) * 4096u + (uint64_t)d;
    uint64_t key = mix64(pos) ^ mix64(0x5eed0000u + (uint64_t)t);
    uint64_t a = mix64(key * 2u), c = mix64(key * 2u + 1u);
    double u1 = ((double)(a >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(c >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void die(const char *what)
{
    fprintf(stderr, "ring_attention_mpi: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static void check_fa(fa_status st, const char *call)
{
    char buf[200];
    if (st == FA_OK) return;
    snprintf(buf, sizeof buf, "%s: %s", call, fa_status_string(st));
    die(buf);
}

static float *alloc_floats(size_t n)
{
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!p) die("out of memory");
    return p;
}

/* ---- which keys of a block a query chunk sees -------------------------------------------------- */
enum { SKIP = 0, FULL = 1, DIAG = 2 };

/* global chunk of local chunk c (0 or 1) of rank r, of n */
static int chunk_of(int r, int n, int c) { return c == 0 ? r : 2 * n - 1 - r; }

/* the pair rule: key chunk gk against query chunk gq */
static int pair_kind(int causal, int gq, int gk)
{
    if (!causal) return FULL;
    return gk < gq ? FULL : gk == gq ? DIAG : SKIP;
}

/* Query chunk qc of this rank against the block of rank j: the visible keys are the first *nk of the
   block's 2C local tokens, with the bottom-right causal mask when *causal. By the pair rule:
   key chunk 1 visible only when key chunk 0 is fully visible (zig-zag: j's chunk 1, 2N-1-j, is later
   than its chunk 0), so one fa_tiled call covers the pair or both pairs: keys [0, 2C), causal when
   chunk 1 is the diagonal (query i then sees chunk 0 and keys 0..i of chunk 1, i.e. j <= i + Sk - Sq);
   or keys [0, C), causal when chunk 0 is the diagonal; or nothing. */
static void plan(const ring *R, int qc, int j, int *nk, int *causal)
{
    int gq = chunk_of(R->rank, R->n, qc);
    int k0 = pair_kind(R->causal, gq, chunk_of(j, R->n, 0)), k1 = pair_kind(R->causal, gq, chunk_of(j, R->n, 1));
    *nk = 0; *causal = 0;
    if (k1 != SKIP) {
        if (k0 != FULL) die("internal: key chunk 1 visible without key chunk 0");
        *nk = 2 * R->C; *causal = k1 == DIAG;
    } else if (k0 != SKIP) {
        *nk = R->C; *causal = k0 == DIAG;
    }
}

/* the call of query chunk qc against nk keys of a block: q a strided view of the local [B][2C][H][D]
   buffer, k and v views of the block, o and lse packed per chunk */
static fa_params call_params(const ring *R, int nk, int causal, float *lse)
{
    fa_params p;
    memset(&p, 0, sizeof p);
    p.batch = R->B; p.heads = R->H; p.kv_heads = R->Hkv;
    p.seq_q = R->C; p.seq_k = nk; p.head_dim = R->D;
    p.q_stride[0] = (int64_t)2 * R->C * R->H * R->D; p.q_stride[1] = R->D; p.q_stride[2] = (int64_t)R->H * R->D;
    p.k_stride[0] = p.v_stride[0] = (int64_t)2 * R->C * R->Hkv * R->D;
    p.k_stride[1] = p.v_stride[1] = R->D;
    p.k_stride[2] = p.v_stride[2] = (int64_t)R->Hkv * R->D;
    p.o_stride[0] = (int64_t)R->H * R->C * R->D; p.o_stride[1] = (int64_t)R->C * R->D; p.o_stride[2] = R->D;
    p.causal = causal;
    p.lse = lse;
    p.threads = R->threads;
    return p;
}

static const float *q_chunk(const ring *R, const float *q, int qc) { return q + (size_t)qc * R->C * R->H * R->D; }

/* ---- MPI helpers -------------------------------------------------------------------------------- */
/* Wait for n requests; one not yet complete when it is needed counts as late (not hidden). A
   request already completed by poke() is MPI_REQUEST_NULL: it was hidden. */
static void wait_all(ring *R, int n, MPI_Request *req)
{
    double t0 = MPI_Wtime();
    int i, flag;
    for (i = 0; i < n; i++)
        if (req[i] != MPI_REQUEST_NULL) {
            MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
            R->late += !flag;
        }
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    R->wait_s += MPI_Wtime() - t0;
}

/* progress the transfers between two calls (MPI moves data only inside its own calls) */
static void poke(int n, MPI_Request *req)
{
    int flag;
    if (n) MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
}

static void send_block(ring *R, const float *buf, int tag, MPI_Request *req)
{
    MPI_Isend((void *)buf, (int)R->kvn, MPI_FLOAT, R->right, tag, MPI_COMM_WORLD, req);
    R->bytes += (double)R->kvn * sizeof(float);
    R->msgs++;
}

static void recv_block(ring *R, float *buf, int tag, MPI_Request *req)
{
    MPI_Irecv(buf, (int)R->kvn, MPI_FLOAT, R->left, tag, MPI_COMM_WORLD, req);
    R->msgs++;
}

/* dst[b][t][..] += src[b][t][..] over the first `tokens` tokens of each batch, rows of `row` floats,
   `seq` tokens per batch */
static void add_rows(float *dst, const float *src, int B, int seq, int tokens, size_t row)
{
    int b;
    size_t i, n = (size_t)tokens * row;
    for (b = 0; b < B; b++) {
        float *d = dst + (size_t)b * seq * row;
        const float *s = src + (size_t)b * seq * row;
        for (i = 0; i < n; i++) d[i] += s[i];
    }
}

/* ---- forward ------------------------------------------------------------------------------------ */
/* Step t: the block of rank (r - t) mod N is in hand; the next one is already on its way in while
   this one is attended. Every step's partial (o, lse) of a query chunk is merged into the running
   one in place: the same order on every run, and one chunk of partial output in memory. */
static void forward(ring *R)
{
    int t, qc, have[2] = { 0, 0 };
    double t0;
    R->wait_s = 0.0; R->compute_s = 0.0; R->bytes = 0.0; R->msgs = R->late = 0;
    for (t = 0; t < R->n; t++) {
        const float *cur = t == 0 ? R->own : R->ring[(t - 1) % 2];
        int j = (R->rank - t + R->n) % R->n, nreq = 0;
        MPI_Request req[2];
        if (t < R->n - 1) {
            recv_block(R, R->ring[t % 2], TAG_KV + t, &req[0]);
            send_block(R, cur, TAG_KV + t, &req[1]);
            nreq = 2;
        }
        for (qc = 0; qc < 2; qc++) {
            int nk, causal;
            fa_params p;
            plan(R, qc, j, &nk, &causal);
            if (nk == 0) continue;
            p = call_params(R, nk, causal, have[qc] ? R->lse_part : R->lse[qc]);
            t0 = MPI_Wtime();
            check_fa(fa_tiled(&p, q_chunk(R, R->q, qc), cur, cur + R->half, have[qc] ? R->o_part : R->o[qc]),
                     "fa_tiled");
            R->compute_s += MPI_Wtime() - t0;
            if (have[qc]) {
                const float *op[2], *lp[2];
                op[0] = R->o[qc]; op[1] = R->o_part; lp[0] = R->lse[qc]; lp[1] = R->lse_part;
                check_fa(fa_merge((int)(R->ln), R->D, 2, op, lp, R->o[qc], R->lse[qc]), "fa_merge");
            }
            have[qc] = 1;
            poke(nreq, req);
        }
        if (!have[0] || !have[1]) die("internal: a query chunk had no visible key at step 0");
        wait_all(R, nreq, req);
    }
}

/* ---- backward ----------------------------------------------------------------------------------- */
/* fa_tiled_backward is fed the merged o and lse of the whole sequence, not those of one block: then
   P = exp(s - lse) is the global softmax probability of each (row, key) of the block, and
   delta = rowsum(d_o * o), computed by the call from the o it is given, is the global one. So
   dS = P (dP - delta) is the global dS restricted to the block's keys: the dq of a block is that
   block's share of the global sum, and dk, dv of the block's keys from these rows are exact. The
   keys a call sees (and so its causal mask) are those of the forward's call for the same pair.
   fa_tiled_backward overwrites dq, dk and dv, so each call writes scratch (dq_s, dkv_s) that is then
   added: dq in step order, a block's dk/dv in ring order starting at its owner. */
static void backward(ring *R)
{
    MPI_Request sreq[2] = { MPI_REQUEST_NULL, MPI_REQUEST_NULL }, fin = MPI_REQUEST_NULL;
    int t, qc;
    const size_t qrow = (size_t)R->H * R->D, krow = (size_t)R->Hkv * R->D;
    double t0;
    R->wait_s = 0.0; R->compute_s = 0.0; R->bytes = 0.0; R->msgs = R->late = 0;
    memset(R->dq, 0, R->qn * sizeof(float));
    for (t = 0; t < R->n; t++) {
        const float *cur = t == 0 ? R->own : R->ring[(t - 1) % 2];
        float *acc = R->dkv_in[t % 2];
        int j = (R->rank - t + R->n) % R->n, nreq = 0, waiting = 0;
        MPI_Request req[3];
        if (t < R->n - 1) {
            recv_block(R, R->ring[t % 2], TAG_KV + t, &req[0]);
            send_block(R, cur, TAG_KV + t, &req[1]);
            nreq = 2;
        }
        if (t > 0) {   /* the partial sums of block j, from the ranks before this one */
            wait_all(R, 1, &sreq[t % 2]);   /* acc was sent two steps ago: that send must be done */
            recv_block(R, acc, TAG_DKV + t - 1, &req[nreq]);
            waiting = 1;
        } else {
            memset(acc, 0, R->kvn * sizeof(float));
        }
        /* the last step's sums go to rank r+1, whose block that is; ours come from rank r-1 */
        if (t == R->n - 1 && R->n > 1) recv_block(R, R->dkv, TAG_DKV + R->n - 1, &fin);
        for (qc = 0; qc < 2; qc++) {
            int nk, causal;
            fa_params p;
            plan(R, qc, j, &nk, &causal);
            if (nk == 0) continue;
            p = call_params(R, nk, causal, R->lse[qc]);
            t0 = MPI_Wtime();
            check_fa(fa_tiled_backward(&p, q_chunk(R, R->q, qc), cur, cur + R->half, R->o[qc], R->d_o[qc],
                                       (float *)q_chunk(R, R->dq_s, qc), R->dkv_s, R->dkv_s + R->half),
                     "fa_tiled_backward");
            R->compute_s += MPI_Wtime() - t0;
            add_rows((float *)q_chunk(R, R->dq, qc), q_chunk(R, R->dq_s, qc), R->B, 2 * R->C, R->C, qrow);
            if (waiting) { wait_all(R, 1, &req[nreq]); waiting = 0; }
            poke(nreq, req);
            add_rows(acc, R->dkv_s, R->B, 2 * R->C, nk, krow);
            add_rows(acc + R->half, R->dkv_s + R->half, R->B, 2 * R->C, nk, krow);
        }
        if (waiting) wait_all(R, 1, &req[nreq]);   /* a step with no visible key still passes the sums on */
        if (R->n > 1) {
            send_block(R, acc, TAG_DKV + t, &sreq[t % 2]);
        }
        wait_all(R, nreq, req);
    }
    if (R->n > 1) {
        wait_all(R, 1, &fin);
        wait_all(R, 2, sreq);
    } else {
        memcpy(R->dkv, R->dkv_in[0], R->kvn * sizeof(float));
    }
}

/* The same messages with no attention: what the communication costs when nothing hides it. */
static double comm_alone(ring *R, int with_dkv)
{
    int t;
    double t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (t = 0; t < R->n; t++) {
        MPI_Request req[4];
        int nreq = 0;
        if (t < R->n - 1) {
            recv_block(R, R->ring[t % 2], TAG_KV + t, &req[nreq++]);
            send_block(R, t == 0 ? R->own : R->ring[(t - 1) % 2], TAG_KV + t, &req[nreq++]);
        }
        if (with_dkv && R->n > 1) {
            recv_block(R, R->dkv_in[(t + 1) % 2], TAG_DKV + t, &req[nreq++]);
            send_block(R, R->dkv_in[t % 2], TAG_DKV + t, &req[nreq++]);
        }
        MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    }
    return MPI_Wtime() - t0;
}

/* ---- set-up: the rank's chunks of the whole sequence ------------------------------------------- */
static void setup(ring *R, const opts *o, int rank, int n)
{
    int b, c, i, h, d;
    memset(R, 0, sizeof *R);
    R->rank = rank; R->n = n; R->left = (rank - 1 + n) % n; R->right = (rank + 1) % n;
    R->B = o->B; R->H = o->H; R->Hkv = o->Hkv; R->D = o->D; R->C = o->S / (2 * n);
    R->causal = o->causal; R->threads = o->threads;
    R->qn = (size_t)R->B * 2 * R->C * R->H * R->D;
    R->half = (size_t)R->B * 2 * R->C * R->Hkv * R->D;
    R->kvn = 2 * R->half;
    R->on = (size_t)R->B * R->H * R->C * R->D;
    R->ln = (size_t)R->B * R->H * R->C;
    R->q = alloc_floats(R->qn); R->dq = alloc_floats(R->qn); R->dq_s = alloc_floats(R->qn);
    R->own = alloc_floats(R->kvn); R->ring[0] = alloc_floats(R->kvn); R->ring[1] = alloc_floats(R->kvn);
    R->dkv_in[0] = alloc_floats(R->kvn); R->dkv_in[1] = alloc_floats(R->kvn);
    R->dkv_s = alloc_floats(R->kvn); R->dkv = alloc_floats(R->kvn);
    R->o_part = alloc_floats(R->on); R->lse_part = alloc_floats(R->ln);
    for (c = 0; c < 2; c++) {
        R->o[c] = alloc_floats(R->on); R->d_o[c] = alloc_floats(R->on); R->lse[c] = alloc_floats(R->ln);
    }
    for (b = 0; b < R->B; b++)
        for (c = 0; c < 2; c++)
            for (i = 0; i < R->C; i++) {
                int s = chunk_of(rank, n, c) * R->C + i, t = c * R->C + i;   /* global, local token */
                for (h = 0; h < R->H; h++)
                    for (d = 0; d < R->D; d++) {
                        R->q[(((size_t)b * 2 * R->C + t) * R->H + h) * R->D + d] = gen(0, b, s, h, d);
                        R->d_o[c][(((size_t)b * R->H + h) * R->C + i) * R->D + d] = gen(3, b, s, h, d);
                    }
                for (h = 0; h < R->Hkv; h++)
                    for (d = 0; d < R->D; d++) {
                        size_t e = (((size_t)b * 2 * R->C + t) * R->Hkv + h) * R->D + d;
                        R->own[e] = gen(1, b, s, h, d);
                        R->own[R->half + e] = gen(2, b, s, h, d);
                    }
            }
}

static void teardown(ring *R)
{
    int c;
    free(R->q); free(R->dq); free(R->dq_s); free(R->own); free(R->ring[0]); free(R->ring[1]);
    free(R->dkv_in[0]); free(R->dkv_in[1]); free(R->dkv_s); free(R->dkv); free(R->o_part); free(R->lse_part);
    for (c = 0; c < 2; c++) { free(R->o[c]); free(R->d_o[c]); free(R->lse[c]); }
}

/* ---- the check: the whole sequence in one process (rank 0) ------------------------------------- */
typedef struct whole {
    float *q, *k, *v, *o, *d_o, *lse, *dq, *dk, *dv;
} whole;

/* [B][S][H][D] for q, o, d_o, dq; [B][S][Hkv][D] for k, v, dk, dv; lse [B][H][S] */
static fa_params whole_params(const opts *o, float *lse)
{
    fa_params p;
    memset(&p, 0, sizeof p);
    p.batch = o->B; p.heads = o->H; p.kv_heads = o->Hkv; p.seq_q = o->S; p.seq_k = o->S; p.head_dim = o->D;
    p.q_stride[0] = p.o_stride[0] = (int64_t)o->S * o->H * o->D;
    p.q_stride[1] = p.o_stride[1] = o->D;
    p.q_stride[2] = p.o_stride[2] = (int64_t)o->H * o->D;
    p.k_stride[0] = p.v_stride[0] = (int64_t)o->S * o->Hkv * o->D;
    p.k_stride[1] = p.v_stride[1] = o->D;
    p.k_stride[2] = p.v_stride[2] = (int64_t)o->Hkv * o->D;
    p.causal = o->causal;
    p.lse = lse;
    p.threads = o->threads;
    return p;
}

static void whole_run(const opts *o, whole *W, double *fwd_s, double *bwd_s)
{
    size_t nq = (size_t)o->B * o->S * o->H * o->D, nk = (size_t)o->B * o->S * o->Hkv * o->D, e;
    int b, s, h, d;
    fa_params p;
    double t0;
    W->q = alloc_floats(nq); W->o = alloc_floats(nq); W->d_o = alloc_floats(nq); W->dq = alloc_floats(nq);
    W->k = alloc_floats(nk); W->v = alloc_floats(nk); W->dk = alloc_floats(nk); W->dv = alloc_floats(nk);
    W->lse = alloc_floats((size_t)o->B * o->H * o->S);
    for (b = 0; b < o->B; b++)
        for (s = 0; s < o->S; s++) {
            for (h = 0; h < o->H; h++)
                for (d = 0; d < o->D; d++) {
                    e = (((size_t)b * o->S + s) * o->H + h) * o->D + d;
                    W->q[e] = gen(0, b, s, h, d);
                    W->d_o[e] = gen(3, b, s, h, d);
                }
            for (h = 0; h < o->Hkv; h++)
                for (d = 0; d < o->D; d++) {
                    e = (((size_t)b * o->S + s) * o->Hkv + h) * o->D + d;
                    W->k[e] = gen(1, b, s, h, d);
                    W->v[e] = gen(2, b, s, h, d);
                }
        }
    p = whole_params(o, W->lse);
    t0 = MPI_Wtime();
    check_fa(fa_tiled(&p, W->q, W->k, W->v, W->o), "fa_tiled (whole sequence)");
    *fwd_s = MPI_Wtime() - t0;
    t0 = MPI_Wtime();
    check_fa(fa_tiled_backward(&p, W->q, W->k, W->v, W->o, W->d_o, W->dq, W->dk, W->dv),
             "fa_tiled_backward (whole sequence)");
    *bwd_s = MPI_Wtime() - t0;
}

static void whole_free(whole *W)
{
    free(W->q); free(W->k); free(W->v); free(W->o); free(W->d_o); free(W->lse);
    free(W->dq); free(W->dk); free(W->dv);
}

/* Gather every rank's results on rank 0, laid out as the whole sequence's (W's layouts), so that one
   fa_allclose per tensor compares them. */
static void gather_whole(const ring *R, const opts *o, whole *G)
{
    const int n = R->n, C = R->C, B = R->B, H = R->H, Hkv = R->Hkv, D = R->D;
    float *all[7] = { NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    const float *mine[7];
    size_t cnt[7];
    int x, r;
    mine[0] = R->o[0]; mine[1] = R->o[1]; mine[2] = R->lse[0]; mine[3] = R->lse[1];
    mine[4] = R->dq; mine[5] = R->dkv; mine[6] = R->dkv + R->half;
    cnt[0] = cnt[1] = R->on; cnt[2] = cnt[3] = R->ln; cnt[4] = R->qn; cnt[5] = cnt[6] = R->half;
    for (x = 0; x < 7; x++) {
        if (R->rank == 0) all[x] = alloc_floats(cnt[x] * (size_t)n);
        MPI_Gather((void *)mine[x], (int)cnt[x], MPI_FLOAT, all[x], (int)cnt[x], MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
    if (R->rank != 0) return;
    {
        size_t nq = (size_t)B * o->S * H * D, nk = (size_t)B * o->S * Hkv * D;
        G->o = alloc_floats(nq); G->dq = alloc_floats(nq); G->dk = alloc_floats(nk); G->dv = alloc_floats(nk);
        G->lse = alloc_floats((size_t)B * H * o->S);
        G->q = G->k = G->v = G->d_o = NULL;
    }
    for (r = 0; r < n; r++) {
        int c, b, i, h;
        for (c = 0; c < 2; c++)
            for (b = 0; b < B; b++)
                for (i = 0; i < C; i++) {
                    int s = chunk_of(r, n, c) * C + i, t = c * C + i;
                    for (h = 0; h < H; h++) {
                        const float *oc = all[c] + (size_t)r * R->on + (((size_t)b * H + h) * C + i) * D;
                        const float *dq = all[4] + (size_t)r * R->qn + (((size_t)b * 2 * C + t) * H + h) * D;
                        memcpy(G->o + (((size_t)b * o->S + s) * H + h) * D, oc, (size_t)D * sizeof(float));
                        memcpy(G->dq + (((size_t)b * o->S + s) * H + h) * D, dq, (size_t)D * sizeof(float));
                        G->lse[((size_t)b * H + h) * o->S + s] = all[2 + c][(size_t)r * R->ln + ((size_t)b * H + h) * C + i];
                    }
                    for (h = 0; h < Hkv; h++) {
                        size_t src = (size_t)r * R->half + (((size_t)b * 2 * C + t) * Hkv + h) * D;
                        size_t dst = (((size_t)b * o->S + s) * Hkv + h) * D;
                        memcpy(G->dk + dst, all[5] + src, (size_t)D * sizeof(float));
                        memcpy(G->dv + dst, all[6] + src, (size_t)D * sizeof(float));
                    }
                }
    }
    for (x = 0; x < 7; x++) free(all[x]);
}

static int compare(const char *name, const float *a, const float *ref, size_t n, float rtol, float atol)
{
    int ok = fa_allclose(a, ref, n, rtol, atol);
    printf("  %-3s max |ring - one process| = %.3e, allclose(%g, %g) %s\n", name, fa_max_abs_diff(a, ref, n),
           rtol, atol, ok ? "True" : "FALSE");
    return ok;
}

/* ---- the memory a rank needs ------------------------------------------------------------------- */
/* Bytes per rank of this program's buffers at context S over n ranks (Sr = S/n tokens a rank), plus
   the library's workspace for the largest call (fa_*_workspace_bytes: what the call allocates); n = 1
   is one process with no ring (q, k, v, o, lse; for training d_o, dq, dk, dv too). */
static void rank_bytes(int S, int H, int Hkv, int n, int threads, double *fwd, double *train)
{
    const int B = 1, D = 128;
    double f = 4.0, Sr = (double)S / n, q = B * Sr * H * D * f, blk = 2.0 * B * Sr * Hkv * D * f;
    double lse = B * H * Sr * f, wf, wb, wmax;
    fa_params p;
    if (n == 1) {
        opts o;
        memset(&o, 0, sizeof o);
        o.B = B; o.S = S; o.H = H; o.Hkv = Hkv; o.D = D; o.threads = threads;
        p = whole_params(&o, NULL);
    } else {
        ring R;
        memset(&R, 0, sizeof R);
        R.B = B; R.H = H; R.Hkv = Hkv; R.D = D; R.C = S / (2 * n); R.threads = threads;
        p = call_params(&R, 2 * R.C, 0, NULL);
    }
    wf = (double)fa_tiled_workspace_bytes(&p);
    wb = (double)fa_tiled_backward_workspace_bytes(&p);
    wmax = wb > wf ? wb : wf;
    if (n == 1) {
        *fwd = q + blk + q + lse + wf;
        *train = q + blk + q + lse + q + q + blk + wmax;
        return;
    }
    /* forward: q, own k/v, two blocks in flight, o and lse, one chunk's partial o and lse */
    *fwd = q + blk + 2 * blk + q + lse + q / 2 + lse / 2 + wf;
    /* training (this program): + d_o, dq and its scratch, two dk/dv sums in flight, one call's dk/dv,
       the rank's dk/dv; the larger of the two workspaces (the calls do not overlap) */
    *train = *fwd - wf + 3 * q + 4 * blk + wmax;
}

static const char *human(double b, char *buf, size_t len)
{
    const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int i = 0;
    while (b >= 1024.0 && i < 4) { b /= 1024.0; i++; }
    snprintf(buf, len, "%.1f %s", b, u[i]);
    return buf;
}

static void memory_table(const opts *o)
{
    static const int lens[] = { 131072, 1048576 }, ranks[] = { 1, 2, 4, 8, 64 };
    static const int heads[][2] = { { 8, 8 }, { 32, 8 }, { 32, 32 } };
    size_t a, b, c;
    char s1[32], s2[32];
    printf("Memory per rank, fp32, B=1, D=128, %d thread(s) per rank (workspaces from fa_*_workspace_bytes);\n"
           "each cell forward / training. 1 rank: one process, q, k, v, o, lse (+ d_o, dq, dk, dv).\n"
           "N ranks, forward: q, own k/v, 2 K/V blocks in flight, o, lse, one chunk's partial o and lse,\n"
           "fa_tiled's workspace; training: + d_o, dq and its scratch, 2 dk/dv sums in flight, one call's\n"
           "dk/dv, the rank's dk/dv, and the larger workspace (fa_tiled_backward's).\n", o->threads);
    printf("| context | ranks | tokens per rank |");
    for (c = 0; c < sizeof heads / sizeof heads[0]; c++) printf(" H=%d, Hkv=%d |", heads[c][0], heads[c][1]);
    printf("\n| --- | --- | --- |");
    for (c = 0; c < sizeof heads / sizeof heads[0]; c++) printf(" --- |");
    printf("\n");
    for (a = 0; a < sizeof lens / sizeof lens[0]; a++)
        for (b = 0; b < sizeof ranks / sizeof ranks[0]; b++) {
            if (lens[a] % 1048576 == 0) printf("| %dM |", lens[a] / 1048576);
            else printf("| %dk |", lens[a] / 1024);
            printf(" %d | %d |", ranks[b], lens[a] / ranks[b]);
            for (c = 0; c < sizeof heads / sizeof heads[0]; c++) {
                double f, t;
                rank_bytes(lens[a], heads[c][0], heads[c][1], ranks[b], o->threads, &f, &t);
                printf(" %s / %s |", human(f, s1, sizeof s1), human(t, s2, sizeof s2));
            }
            printf("\n");
        }
}

/* ---- main --------------------------------------------------------------------------------------- */
static int parse(int argc, char **argv, opts *o)
{
    int i;
    o->B = 1; o->S = 1024; o->H = 4; o->Hkv = 0; o->D = 64; o->causal = 1; o->threads = 1; o->check = 1;
    o->reps = 1; o->memory = 0; o->perturb = 0;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = NULL;
        if (!strcmp(a, "--memory")) { o->memory = 1; continue; }
        if (!strcmp(a, "--no-check")) { o->check = 0; continue; }
        if (!strcmp(a, "--perturb")) { o->perturb = 1; continue; }
        if (!strcmp(a, "--B")) dst = &o->B;
        else if (!strcmp(a, "--S")) dst = &o->S;
        else if (!strcmp(a, "--H")) dst = &o->H;
        else if (!strcmp(a, "--Hkv")) dst = &o->Hkv;
        else if (!strcmp(a, "--D")) dst = &o->D;
        else if (!strcmp(a, "--causal")) dst = &o->causal;
        else if (!strcmp(a, "--threads")) dst = &o->threads;
        else if (!strcmp(a, "--check")) dst = &o->check;
        else if (!strcmp(a, "--reps")) dst = &o->reps;
        if (!dst || i + 1 >= argc) return 0;
        *dst = atoi(argv[++i]);
    }
    if (o->Hkv == 0) o->Hkv = o->H;
    return o->B >= 1 && o->S >= 1 && o->H >= 1 && o->Hkv >= 1 && o->H % o->Hkv == 0 && o->D >= 1 &&
           o->threads >= 0 && o->reps >= 1;
}

static double median(double *x, int n)
{
    int i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && x[j - 1] > x[j]; j--) { double t = x[j]; x[j] = x[j - 1]; x[j - 1] = t; }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static double min_of(const double *x, int n)
{
    double m = x[0];
    int i;
    for (i = 1; i < n; i++) m = x[i] < m ? x[i] : m;
    return m;
}

static double load1(void)
{
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1.0;
        fclose(f);
    }
    return l;
}

/* per rank, means over the reps: 0 wait fwd, 1 compute fwd, 2 wait bwd, 3 compute bwd, 4 and 5 the
   same messages alone (fwd, bwd; median of the reps), 6 and 7 the fractions hidden (fwd, bwd): the
   share of the messages already complete when the rank needed them (wait_all) */
#define NSTAT 8

int main(int argc, char **argv)
{
    opts o;
    ring R;
    int rank, n, ok = 1, rep, x;
    double *tf, *tb, *cf, *cb, sent_f = 0.0, sent_b = 0.0, v[NSTAT], mx[NSTAT], sum[NSTAT], load0 = load1();

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (!parse(argc, argv, &o)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np N %s [--S tokens] [--B b] [--H heads] [--Hkv kv_heads] [--D dim]\n"
                            "       [--causal 0|1] [--threads per rank] [--check 0|1 | --no-check] [--reps n] [--memory]\n"
                            "       [--perturb: add 1e-2 to one dk of the last rank, so the check must fail]\n",
                    argv[0]);
        MPI_Finalize();
        return 2;
    }
    if (o.memory) {
        if (rank == 0) memory_table(&o);
        MPI_Finalize();
        return 0;
    }
    if (o.S % (2 * n) != 0) {
        if (rank == 0) fprintf(stderr, "ring_attention_mpi: S = %d must be a multiple of 2 x ranks = %d\n", o.S, 2 * n);
        MPI_Finalize();
        return 2;
    }
    if ((double)4 * o.B * (o.S / n) * o.Hkv * o.D > (double)INT_MAX ||
        (double)o.B * (o.S / n) * o.H * o.D > (double)INT_MAX) {
        if (rank == 0) fprintf(stderr, "ring_attention_mpi: a rank's block exceeds one MPI message (INT_MAX floats)\n");
        MPI_Finalize();
        return 2;
    }
    setup(&R, &o, rank, n);
    tf = (double *)malloc((size_t)o.reps * sizeof(double)); tb = (double *)malloc((size_t)o.reps * sizeof(double));
    cf = (double *)malloc((size_t)o.reps * sizeof(double)); cb = (double *)malloc((size_t)o.reps * sizeof(double));
    if (!tf || !tb || !cf || !cb) die("out of memory");
    for (x = 0; x < NSTAT; x++) v[x] = 0.0;
    for (rep = 0; rep < o.reps; rep++) {
        double t0, loc[2], glob[2];
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        forward(&R);
        loc[0] = MPI_Wtime() - t0;
        v[0] += R.wait_s; v[1] += R.compute_s; sent_f = R.bytes;
        v[6] += R.msgs ? 1.0 - (double)R.late / R.msgs : 1.0;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        backward(&R);
        loc[1] = MPI_Wtime() - t0;
        v[2] += R.wait_s; v[3] += R.compute_s; sent_b = R.bytes;
        v[7] += R.msgs ? 1.0 - (double)R.late / R.msgs : 1.0;
        MPI_Allreduce(loc, glob, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        tf[rep] = glob[0]; tb[rep] = glob[1];
    }
    if (o.perturb && rank == n - 1) R.dkv[R.kvn / 3] += 1e-2f;   /* a wrong gradient the check must catch */
    for (rep = 0; rep < o.reps; rep++) { cf[rep] = comm_alone(&R, 0); cb[rep] = comm_alone(&R, 1); }
    for (x = 0; x < 4; x++) v[x] /= o.reps;
    for (x = 6; x < 8; x++) v[x] /= o.reps;
    v[4] = median(cf, o.reps); v[5] = median(cb, o.reps);
    MPI_Reduce(v, mx, NSTAT, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(v, sum, NSTAT, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double f = median(tf, o.reps), b = median(tb, o.reps);
        /* the wait holds both the transfers not yet done and the time a rank waits for a slower
           neighbour to post its send (on a shared machine, most of it) */
        printf("ring attention over MPI: %d rank(s), B=%d S=%d H=%d Hkv=%d D=%d %s, chunks of %d tokens "
               "(rank r holds chunks r and %d-r), %d thread(s) per rank, %d rep(s); load average %.2f before, %.2f after\n",
               n, o.B, o.S, o.H, o.Hkv, o.D, o.causal ? "causal" : "non-causal", R.C, 2 * n - 1, o.threads, o.reps,
               load0, load1());
        printf("  forward:  %.4f s (slowest rank, median of reps; fastest %.4f), computing %.4f s, waiting in MPI\n"
               "            %.4f s (max %.4f); sent %.2f MiB per rank, %.4f s for the same messages alone;\n"
               "            %.0f%% of the messages complete when needed (hidden)\n",
               f, min_of(tf, o.reps), sum[1] / n, sum[0] / n, mx[0], sent_f / 1048576.0, sum[4] / n, 100.0 * sum[6] / n);
        printf("  backward: %.4f s (slowest rank, median of reps; fastest %.4f), computing %.4f s, waiting in MPI\n"
               "            %.4f s (max %.4f); sent %.2f MiB per rank, %.4f s for the same messages alone;\n"
               "            %.0f%% of the messages complete when needed (hidden)\n",
               b, min_of(tb, o.reps), sum[3] / n, sum[2] / n, mx[2], sent_b / 1048576.0, sum[5] / n, 100.0 * sum[7] / n);
    }
    if (o.check) {
        whole W, G;
        double ref_f = 0.0, ref_b = 0.0;
        memset(&G, 0, sizeof G);
        gather_whole(&R, &o, &G);
        if (rank == 0) {
            size_t nq = (size_t)o.B * o.S * o.H * o.D, nk = (size_t)o.B * o.S * o.Hkv * o.D;
            whole_run(&o, &W, &ref_f, &ref_b);
            printf("  one process (rank 0, fa_tiled and fa_tiled_backward over the whole sequence, %d thread(s)): "
                   "forward %.4f s, backward %.4f s\n", o.threads, ref_f, ref_b);
            ok &= compare("o", G.o, W.o, nq, 1e-5f, 1e-5f);
            ok &= compare("lse", G.lse, W.lse, (size_t)o.B * o.H * o.S, 1e-5f, 1e-5f);
            ok &= compare("dq", G.dq, W.dq, nq, 1e-4f, 1e-5f);
            ok &= compare("dk", G.dk, W.dk, nk, 1e-4f, 1e-5f);
            ok &= compare("dv", G.dv, W.dv, nk, 1e-4f, 1e-5f);
            whole_free(&W);
            free(G.o); free(G.lse); free(G.dq); free(G.dk); free(G.dv);
        }
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    if (rank == 0)
        printf("RESULT ranks=%d S=%d causal=%d threads=%d fwd_s=%.4f bwd_s=%.4f fwd_min_s=%.4f bwd_min_s=%.4f compute_fwd_s=%.4f compute_bwd_s=%.4f "
               "wait_fwd_s=%.4f wait_bwd_s=%.4f comm_fwd_s=%.4f comm_bwd_s=%.4f hidden_fwd=%.2f hidden_bwd=%.2f "
               "sent_fwd_MiB=%.2f sent_bwd_MiB=%.2f check=%s\n",
               n, o.S, o.causal, o.threads, median(tf, o.reps), median(tb, o.reps), min_of(tf, o.reps),
               min_of(tb, o.reps), sum[1] / n, sum[3] / n,
               sum[0] / n, sum[2] / n, sum[4] / n, sum[5] / n, sum[6] / n, sum[7] / n,
               sent_f / 1048576.0, sent_b / 1048576.0, !o.check ? "off" : ok ? "PASS" : "FAIL");
    free(tf); free(tb); free(cf); free(cb);
    teardown(&R);
    MPI_Finalize();
    return ok ? 0 : 1;
}
