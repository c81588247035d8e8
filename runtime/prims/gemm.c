/* gemm.c: fj_gemm_f32, fj_gemm_f64 and their handles: validation and the
 * driver that runs a plan (gemm_plan.c) over blocks, kernels and threads.
 * The driver is the same for both element types: matrix pointers are
 * untyped and advance by the plan's element size (p->es).
 *
 * Loop nest of one chunk of C (rows [i0,i1) x columns [j0,j1)):
 *
 *   for jc (nc columns):                    B block kc x nc   (L2/L3)
 *     for pc (kc of k):    pack B panels (or read B in place, or let the
 *                          first row block's kernel calls pack them)
 *       for ic (mc rows):  pack A tiles  (or read A in place)   A block in L2
 *         for each nr-wide panel of B:     one kernel call: the kernel loops
 *                                          over the row tiles of the A block
 *                                          (a few) with the B panel in L1/L2
 *
 * Chunks are fixed blocks of C; every C element is computed by the same
 * sequence of operations whatever the chunking, so results do not depend
 * on the thread count. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime/prims/gemm_int.h"
#include "runtime/publish.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"
#include "runtime/rt.h"
#include "runtime/prims/span.h"

/* ---- the driver ------------------------------------------------------- */

enum { MAX_CHUNKS = 256 };

typedef struct run_ctx {
    const gemm_plan *p;
    const void *a, *b, *bias;
    void *c;
    int64_t cn;              /* chunks along n */
    int64_t mstep, nstep;    /* chunk size */
    _Atomic unsigned char failed[MAX_CHUNKS];
} run_ctx;

/* Element i of a matrix at x (p's element type). */
static inline const void *at(const gemm_plan *p, const void *x, int64_t i) {
    return (const char *)x + i * p->es;
}
static inline void *atw(const gemm_plan *p, void *x, int64_t i) {
    return (char *)x + i * p->es;
}

/* The lane masks of a panel `cols` wide (only the ISA's own kind). */
static void set_masks(kg_gemm_args *g, const gemm_plan *p, int64_t cols) {
    const int lanes = p->lanes, words = p->es / 4;
    for (int v = 0; v < p->nv; v++) {
        int64_t w = cols - (int64_t)v * lanes;
        w = w < 0 ? 0 : w > lanes ? lanes : w;
        if (p->cfg.isa == FJ_ISA_AVX512) {
            g->kmask[v] = (uint32_t)((1u << w) - 1u);
            /* AVX-512 kernels read C under these: none when beta = 0. */
            g->kmask_c[v] = g->beta_zero ? 0 : g->kmask[v];
        } else {
            /* vmaskmovps/pd read each element's top bit: all of its words set. */
            for (int l = 0; l < 8; l++) g->ymask[v][l] = l / words < w ? -1 : 0;
        }
    }
}

static void *align64(void *x) { return (void *)(((uintptr_t)x + 63) & ~(uintptr_t)63); }

/* The packers of p's element type (gemm_pack*.c). */
static void pack_a(const gemm_plan *p, void *dst, const void *a, int ta, int64_t rows,
                   int64_t kc) {
    if (p->es == 8) gemm_pack_a64(dst, a, p->lda, ta, rows, kc, p->mr);
    else gemm_pack_a(dst, a, p->lda, ta, rows, kc, p->mr, p->cfg.isa);
}
static void pack_b(const gemm_plan *p, void *dst, const void *b, int tb, int64_t kc,
                   int64_t cols) {
    if (p->es == 8) gemm_pack_b64(dst, b, p->ldb, tb, kc, cols, p->nr);
    else gemm_pack_b(dst, b, p->ldb, tb, kc, cols, p->nr, p->cfg.isa);
}
static void copy_rows(const gemm_plan *p, void *dst, const void *a, int64_t rows, int64_t kc) {
    if (p->es == 8) gemm_copy_rows64(dst, a, p->lda, rows, kc, p->mr);
    else gemm_copy_rows(dst, a, p->lda, rows, kc, p->mr);
}

/* The calling thread's packing buffer for p (gemm_scratch counts floats). */
static void *plan_scratch(const gemm_plan *p) { return gemm_scratch(p->scratch * (size_t)p->es / 4); }

/* The kernel's C update for g's alpha, beta and post (the special cases
 * give the same bits as the general alpha*acc + beta*C). */
static int32_t store_kind(const kg_gemm_args *g) {
    if (g->post || g->alpha_d != 1.0) return KG_STORE_GENERAL;
    if (g->beta_zero) return KG_STORE_SET;
    return g->beta_d == 1.0 ? KG_STORE_ADD : KG_STORE_GENERAL;
}

/* alpha and beta into g, for the kernel of either element type. */
static inline void args_ab(kg_gemm_args *g, double alpha, double beta) {
    g->alpha_d = alpha;
    g->beta_d = beta;
    g->alpha = (float)alpha;
    g->beta = (float)beta;
}

/* g's fields for k block kb of nkb: its offset and size in k, alpha, beta
 * and whether the post stage runs. */
static void block_args(const gemm_plan *p, kg_gemm_args *g, int64_t kb, int64_t nkb,
                       int64_t *pc, int64_t *kcur) {
    *pc = kb * p->kc;
    *kcur = min64(p->kc, p->k - *pc);
    int first = kb == 0, last = kb == nkb - 1;
    /* k == 0: the kernel runs with kc = 0 and alpha = 0 (C = beta*C,
     * without alpha*0 turning an infinite alpha into NaN). */
    g->kc = *kcur;
    args_ab(g, *kcur ? p->alpha : 0.0, first ? p->beta : 1.0);
    g->act_a = p->act_a;
    g->act_b = p->act_b;
    g->beta_zero = first && p->beta == 0.0;
    g->post = last && p->has_post;
    g->store = store_kind(g);
    g->ldc = p->ldc * p->es;
    g->c_tile = p->mr * p->ldc * p->es;
}

/* The C updates (KG_STORES bits) the driver asks of p's kernel for this
 * alpha and beta: block_args' choice for the first, the middle and the
 * last k block. The kernel has only those (smaller and quicker to make
 * than one with all three). A plan whose only block has the post stage
 * needs none; it gets one. */
int gemm_plan_stores(const gemm_plan *p, double alpha, double beta) {
    gemm_plan q = *p;
    q.alpha = alpha;
    q.beta = beta;
    int64_t nkb = p->k ? cdiv(p->k, p->kc) : 1, kbs[3] = {0, 1, nkb - 1};
    int st = 0;
    for (int i = 0; i < 3; i++) {
        if (kbs[i] >= nkb) continue;
        kg_gemm_args g;
        int64_t pc, kcur;
        block_args(&q, &g, kbs[i], nkb, &pc, &kcur);
        if (!g.post) st |= KG_STORES(g.store);
    }
    return st ? st : KG_STORES(KG_STORE_GENERAL);
}

/* Rows [i0, i1) of C's columns [jc, jc + ncur) for the k block at pc:
 * packs (or reads in place) A, then one kernel call per B panel. bufb
 * holds the packed B panels (or, with B in place, the padded tail panel);
 * with copy, the first call per panel (first row block) packs it. */
static void block_rows(const run_ctx *x, kg_gemm_args *gp, void *bufa, void *bufb,
                       int64_t i0, int64_t i1, int64_t jc, int64_t ncur, int64_t pc,
                       int64_t kcur, int copy) {
    const gemm_plan *p = x->p;
    kg_gemm_fn fn = (kg_gemm_fn)rt_kernel_fn(p->kern);
    const int64_t mr = p->mr, nr = p->nr, npan = cdiv(ncur, nr), es = p->es;
    kg_gemm_args g = *gp;
    int64_t mask_cols = -1; /* the width g's masks are for */
    for (int64_t ic = i0; ic < i1; ic += p->mc) {
        int64_t mcur = min64(p->mc, i1 - ic);
        int64_t full = mcur / mr, rem = mcur % mr;
        const void *a_ip = at(p, x->a, p->ta ? pc * p->lda + ic : ic * p->lda + pc);
        if (!p->direct_a && kcur) pack_a(p, bufa, a_ip, p->ta, mcur, kcur);
        if (p->direct_a && kcur && rem) {
            const void *t = at(p, a_ip, p->ta ? full * mr : full * mr * p->lda);
            if (p->ta) pack_a(p, bufa, t, 1, rem, kcur);
            else copy_rows(p, bufa, t, rem, kcur);
        }
        for (int64_t pn = 0; pn < npan; pn++) {
            int64_t cols = min64(nr, ncur - pn * nr), j = jc + pn * nr;
            if (cols != mask_cols) set_masks(&g, p, mask_cols = cols);
            g.c = atw(p, x->c, ic * p->ldc + j);
            g.bias = x->bias ? at(p, x->bias, j) : NULL;
            /* The kernel copies whole panels; the tail one is packed here,
             * and so is a panel whose first tile is the short last one:
             * that tile's own k loop (kg_gemm_cfg.tail_rows) sums in
             * another order than the copying loop, and C must not depend
             * on how the threads chunked the rows. */
            int kcopy = cols == nr && !(p->cfg.tail_rows && mcur < mr);
            g.copy_b = copy && ic == i0 && kcopy;
            if (copy && ic == i0 && !kcopy && kcur)
                pack_b(p, atw(p, bufb, pn * nr * kcur), at(p, x->b, pc * p->ldb + j), 0, kcur,
                       cols);
            if (g.copy_b) {
                g.b_src = at(p, x->b, pc * p->ldb + j);
                g.ldb = p->ldb * es;
                g.b_src_pf = p->b_src_pf;
            }
            if (!p->direct_b) {
                g.b = atw(p, bufb, pn * nr * kcur);
            } else if (cols == nr) {
                g.b = at(p, x->b, pc * p->ldb + j);
                g.ldb = p->ldb * es;
            } else {
                g.b = bufb;
                g.ldb = nr * es;
            }
            if (!p->direct_a) {
                g.a = bufa;
                g.ntiles = cdiv(mcur, mr);
                g.last_rows = mcur - (g.ntiles - 1) * mr;
                g.a_tile = mr * kcur * es;
                fn(&g);
                continue;
            }
            if (full) {
                g.a = a_ip;
                g.ntiles = full;
                g.last_rows = mr;
                g.lda = p->lda * es;
                g.a_tile = p->ta ? mr * es : mr * p->lda * es;
                fn(&g);
                g.copy_b = 0; /* packed now */
            }
            if (rem) {
                /* The row tail reads the padded copy. */
                g.a = bufa;
                g.ntiles = 1;
                g.last_rows = rem;
                g.lda = p->ta ? mr * es : kcur * es;
                g.c = atw(p, x->c, (ic + full * mr) * p->ldc + j);
                fn(&g);
            }
        }
    }
    /* Keeps the kernel calls above from becoming tail calls. */
    __asm__ volatile("" ::: "memory");
}

/* The packed-B part of a chunk's scratch. */
static void *scratch_b(const gemm_plan *p, void *buf) {
    return align64(atw(p, buf, (p->direct_a ? p->mr * p->kc : p->mc * p->kc) + GEMM_PACK_SLACK));
}

/* Columns [jc, jc + ncur) of B for the k block at pc into panels. */
static void pack_b_cols(const gemm_plan *p, const void *b, void *dst, int64_t jc,
                        int64_t ncur, int64_t pc, int64_t kcur) {
    pack_b(p, dst, at(p, b, p->tb ? jc * p->ldb + pc : pc * p->ldb + jc), p->tb, kcur, ncur);
}

static void run_chunk_buf(const run_ctx *x, int64_t idx, void *buf) {
    const gemm_plan *p = x->p;
    int64_t i0 = idx / x->cn * x->mstep, j0 = idx % x->cn * x->nstep;
    int64_t i1 = min64(p->m, i0 + x->mstep), j1 = min64(p->n, j0 + x->nstep);
    const int64_t nr = p->nr;
    void *bufb = scratch_b(p, buf);
    int64_t nkb = p->k ? cdiv(p->k, p->kc) : 1;
    kg_gemm_args g;
    memset(&g, 0, sizeof g);
    for (int64_t jc = j0; jc < j1; jc += p->nc) {
        int64_t ncur = min64(p->nc, j1 - jc);
        for (int64_t kb = 0; kb < nkb; kb++) {
            int64_t pc, kcur;
            block_args(p, &g, kb, nkb, &pc, &kcur);
            if (!p->direct_b && kcur && !p->cfg.b_copy)
                pack_b_cols(p, x->b, bufb, jc, ncur, pc, kcur);
            /* In-place B: the tail panel is copied into a padded buffer. */
            if (p->direct_b && kcur && ncur % nr)
                pack_b(p, bufb, at(p, x->b, pc * p->ldb + jc + ncur / nr * nr), 0, kcur,
                       ncur % nr);
            block_rows(x, &g, buf, bufb, i0, i1, jc, ncur, pc, kcur, p->cfg.b_copy);
        }
    }
}

/* ---- large problems on several threads: B packed once, shared ---------- */

/* Per (jc, pc) block: the threads pack B's panels together into the
 * caller's buffer, then each computes its rows against them. Splitting
 * rows with per-chunk packing would pack (and read from memory) all of B
 * once per thread. */
typedef struct shared_ctx {
    const run_ctx *x;
    kg_gemm_args g;
    void *bufb;
    int64_t jc, ncur, pc, kcur;
    int64_t pan_per;
    int64_t row0[MAX_CHUNKS + 1];  /* chunk i: rows row0[i] .. row0[i + 1] */
    _Atomic unsigned char failed[MAX_CHUNKS];
} shared_ctx;

static void shared_pack(void *ctx, int64_t i) {
    shared_ctx *s = ctx;
    const gemm_plan *p = s->x->p;
    int64_t c0 = i * s->pan_per * p->nr, cols = min64(s->ncur - c0, s->pan_per * p->nr);
    if (cols > 0)
        pack_b_cols(p, s->x->b, atw(p, s->bufb, c0 * s->kcur), s->jc + c0, cols, s->pc, s->kcur);
}

static void shared_rows_buf(shared_ctx *s, int64_t i, void *buf) {
    int64_t i0 = s->row0[i], i1 = s->row0[i + 1];
    /* buf's A part only: on the caller, its B part is the shared panels. */
    block_rows(s->x, &s->g, buf, s->bufb, i0, i1, s->jc, s->ncur, s->pc, s->kcur, 0);
}

static void shared_rows(void *ctx, int64_t i) {
    shared_ctx *s = ctx;
    void *buf = plan_scratch(s->x->p);
    if (!buf) {
        atomic_store(&s->failed[i], 1); /* the caller runs it */
        return;
    }
    shared_rows_buf(s, i, buf);
}

/* Rows in chunks claimed dynamically, largest first: each takes
 * 1/(rpt/4 * threads) of the tiles still left, down to a few tiles (each
 * chunk packs its own A rows, so small ones cost nothing extra). A thread
 * that starts late or is preempted does not hold the others at the end
 * of the block, and on an idle machine the threads end a small chunk
 * apart rather than half of an even share's chunk. */
int64_t gemm_row_chunks(int64_t m, int mr, int threads, int rpt, int64_t *row0, int64_t max) {
    int64_t tiles = cdiv(m, mr), left = tiles, n = 0;
    int64_t div = max64(threads, (int64_t)rpt * threads / 4);
    int64_t least = min64(cdiv(tiles, threads), max64(1, tiles / ((int64_t)rpt * threads * 4)));
    row0[0] = 0;
    while (left > 0) {
        int64_t t = n + 1 == max ? left : min64(left, max64(least, cdiv(left, div)));
        left -= t;
        row0[++n] = min64(m, (tiles - left) * mr);
    }
    return n;
}

static void run_shared(const run_ctx *x, void *buf, int threads) {
    const gemm_plan *p = x->p;
    shared_ctx *s = &(shared_ctx){.x = x};
    s->bufb = scratch_b(p, buf);
    int64_t nkb = p->k ? cdiv(p->k, p->kc) : 1;
    int64_t nchunks = gemm_row_chunks(p->m, p->mr, threads, p->rpt, s->row0, MAX_CHUNKS);
    for (int64_t jc = 0; jc < p->n; jc += p->nc) {
        s->jc = jc;
        s->ncur = min64(p->nc, p->n - jc);
        int64_t npan = cdiv(s->ncur, p->nr);
        s->pan_per = cdiv(npan, min64(MAX_CHUNKS, 2 * (int64_t)threads));
        for (int64_t kb = 0; kb < nkb; kb++) {
            block_args(p, &s->g, kb, nkb, &s->pc, &s->kcur);
            if (s->kcur)
                rt_parallel(p->rt, cdiv(npan, s->pan_per), threads, shared_pack, s, p->par_flags);
            for (int64_t i = 0; i < nchunks; i++) atomic_store(&s->failed[i], 0);
            rt_parallel(p->rt, nchunks, threads, shared_rows, s, p->par_flags);
            for (int64_t i = 0; i < nchunks; i++)
                if (atomic_load(&s->failed[i])) shared_rows_buf(s, i, buf);
        }
    }
}

static void run_chunk(void *ctx, int64_t idx) {
    run_ctx *x = ctx;
    void *buf = plan_scratch(x->p);
    if (!buf) {
        /* Nothing of this chunk is written yet: the caller runs it later. */
        atomic_store(&x->failed[idx], 1);
        return;
    }
    run_chunk_buf(x, idx, buf);
}

void gemm_plan_set_ab(gemm_plan *p, double alpha, double beta) {
    p->alpha = alpha;
    p->beta = beta;
    if (!p->whole) return;
    kg_gemm_args *g = &p->whole_args;
    memset(g, 0, sizeof *g);
    g->kc = p->k;
    args_ab(g, alpha, beta);
    g->act_a = p->act_a;
    g->act_b = p->act_b;
    g->beta_zero = beta == 0.0;
    g->post = p->has_post;
    g->store = store_kind(g);
    g->ldc = p->ldc * p->es;
    g->c_tile = p->mr * p->ldc * p->es;
    g->ntiles = p->m / p->mr;
    g->last_rows = p->mr;
    g->lda = p->lda * p->es;
    g->a_tile = p->ta ? p->mr * p->es : p->mr * p->lda * p->es;
    g->ldb = p->ldb * p->es;
    set_masks(g, p, p->nr); /* whole panels only */
}

/* A plan with `whole` set: the kernel calls straight from here with the
 * plan's own arguments (for small GEMMs the general path's bookkeeping
 * costs as much as their arithmetic, so the arguments are not worked out
 * again on each call). The same calls as run_chunk_buf would make, so the
 * same results. */
static void run_whole(const gemm_plan *p, const void *a, const void *b, const void *bias,
                      void *c) {
    kg_gemm_fn fn = (kg_gemm_fn)rt_kernel_fn(p->kern);
    kg_gemm_args g;
    /* Field by field (a struct copy is rep movsq, slow to start), and the
     * AVX2 masks only for AVX2. */
    memcpy(&g, &p->whole_args, offsetof(kg_gemm_args, ymask));
    if (p->cfg.isa != FJ_ISA_AVX512) memcpy(g.ymask, p->whole_args.ymask, sizeof g.ymask);
    g.a = a;
    for (int64_t j = 0; j < p->n; j += p->nr) {
        g.b = at(p, b, j);
        g.c = atw(p, c, j);
        g.bias = bias ? at(p, bias, j) : NULL;
        fn(&g);
    }
    __asm__ volatile("" ::: "memory"); /* no tail call */
}

/* A plan that is not whole: blocks, packing, threads. */
static __attribute__((noinline)) fj_status run_blocks(const gemm_plan *p, const void *a,
                                                      const void *b, const void *bias,
                                                      void *c) {
    int threads = rt_threads(p->rt);
    /* The caller's buffer first: if even that fails, C is untouched. */
    void *buf = plan_scratch(p);
    if (!buf) return fj_fail(FJ_ERR_NO_MEMORY, "gemm: cannot allocate %zu bytes of packing "
                             "buffer", p->scratch * (size_t)p->es);
    run_ctx ctx, *x = &ctx;
    memset(x, 0, sizeof *x);
    x->p = p;
    x->a = a;
    x->b = b;
    x->bias = bias;
    x->c = c;
    x->cn = 1;
    x->mstep = p->m;
    x->nstep = p->n;
    if (threads > p->threads) threads = p->threads;
    if (threads > MAX_CHUNKS) threads = MAX_CHUNKS;
    int64_t nchunks = 1;
    if (threads > 1) {
        /* Split the dimension with more tiles into `threads` chunks of
         * whole tiles; n first when the plan says so (split_n) and it has
         * a panel per thread. */
        int64_t tm = cdiv(p->m, p->mr), tn = cdiv(p->n, p->nr);
        int rows = tm >= tn && !(p->split_n && tn >= threads);
        /* Unless one split leaves its largest chunk fewer tiles than the
         * other (a thread waits for the largest): 64 x 64 in 6 x 16 tiles
         * is 6 + 5 row tiles of 4 panels, or 2 + 2 panels of 11 row
         * tiles. Not for a shared B, whose small chunks balance anyway. */
        int64_t by_rows = cdiv(tm, threads) * tn, by_cols = cdiv(tn, threads) * tm;
        if (!p->share_b && by_rows != by_cols) rows = by_rows < by_cols;
        if (rows) {
            int64_t per = cdiv(tm, threads);
            x->mstep = per * p->mr;
            nchunks = cdiv(p->m, x->mstep);
        } else {
            int64_t per = cdiv(tn, threads);
            x->nstep = per * p->nr;
            x->cn = cdiv(p->n, x->nstep);
            nchunks = x->cn;
        }
    }
    /* Rows split: the plan says whether the threads share one packed B. */
    if (threads > 1 && x->cn == 1 && p->share_b) {
        run_shared(x, buf, threads);
        return FJ_OK;
    }
    if (nchunks == 1) run_chunk_buf(x, 0, buf);
    else rt_parallel(p->rt, nchunks, threads, run_chunk, x, p->par_flags);
    for (int64_t i = 0; i < nchunks; i++)
        if (atomic_load(&x->failed[i])) run_chunk_buf(x, i, buf);
    return FJ_OK;
}

/* C = act(alpha*op(A)*op(B) + beta*C + bias) on the runtime's threads.
 * Inline, with the blocked path a function of its own: a small GEMM no
 * longer sets up that path's frame (its 1 KiB run context) on its way to
 * the kernel. */
static inline fj_status gemm_run(const gemm_plan *p, const void *a, const void *b,
                                 const void *bias, void *c) {
    if (p->m == 0 || p->n == 0) return FJ_OK;
    if (p->whole) {
        run_whole(p, a, b, bias, c);
        return FJ_OK;
    }
    return run_blocks(p, a, b, bias, c);
}

/* ---- validation ------------------------------------------------------- */

static int trans_of(char t) {
    return t == 'N' || t == 'n' ? 0 : t == 'T' || t == 't' ? 1 : -1;
}

/* Elements spanned by a rows x cols matrix with leading dimension ld,
 * in bytes, must fit in ptrdiff_t. */
static int extent_ok(int64_t rows, int64_t cols, int64_t ld) {
    int64_t e;
    if (rows == 0 || cols == 0) return 1;
    /* (in doubles, the largest element type: one rule for both types) */
    if (__builtin_mul_overflow(rows - 1, ld, &e) || __builtin_add_overflow(e, cols, &e) ||
        __builtin_mul_overflow(e, (int64_t)sizeof(double), &e))
        return 0;
    return e <= PTRDIFF_MAX;
}

static fj_status check_dims(const char *fn, char transa, char transb, int64_t m, int64_t n,
                            int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int *ta, int *tb) {
    if ((*ta = trans_of(transa)) < 0 || (*tb = trans_of(transb)) < 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: trans%c = '%c' (0x%02x) is not N, n, T or t", fn,
                       *ta < 0 ? 'a' : 'b', *ta < 0 ? (transa > 31 && transa < 127 ? transa : '?')
                       : (transb > 31 && transb < 127 ? transb : '?'),
                       (unsigned char)(*ta < 0 ? transa : transb));
    if (m < 0 || n < 0 || k < 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: negative size m = %lld, n = %lld, k = %lld", fn,
                       (long long)m, (long long)n, (long long)k);
    int64_t mina = max64(1, *ta ? m : k), minb = max64(1, *tb ? k : n), minc = max64(1, n);
    if (lda < mina)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: lda = %lld < %lld (transa '%c')", fn,
                       (long long)lda, (long long)mina, transa);
    if (ldb < minb)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: ldb = %lld < %lld (transb '%c')", fn,
                       (long long)ldb, (long long)minb, transb);
    if (ldc < minc)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: ldc = %lld < %lld", fn, (long long)ldc,
                       (long long)minc);
    if (!extent_ok(*ta ? k : m, *ta ? m : k, lda) || !extent_ok(*tb ? n : k, *tb ? k : n, ldb) ||
        !extent_ok(m, n, ldc))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: a matrix of m = %lld, n = %lld, k = %lld with "
                       "its leading dimension overflows the address space", fn, (long long)m,
                       (long long)n, (long long)k);
    return FJ_OK;
}

static fj_status check_ptrs(const char *fn, int64_t m, int64_t n, int64_t k, const void *a,
                            const void *b, const void *c) {
    if (m && n && !c) return fj_fail(FJ_ERR_INVALID_ARG, "%s: c is NULL with m, n > 0", fn);
    if (m && n && k && (!a || !b))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: %s is NULL with m, n, k > 0", fn, !a ? "a" : "b");
    return FJ_OK;
}

/* C is written while A, B and the bias are still being read (packed a
 * block at a time, or in place), so C may share no memory with them: the
 * result would depend on the blocking. Checked on every call before
 * anything is written, A and B only when k > 0 (else they are not read).
 * Exact: C and A (or B) as column ranges of one wider array, their rows
 * interleaved, are fine. */
static __attribute__((noinline, cold)) fj_status
check_alias(const char *fn, const gemm_plan *p, const void *a, const void *b,
            const void *bias, const void *c) {
    /* rt_mat counts floats: a double is two of them */
    const int64_t w = p->es / 4;
    const rt_mat cm = {(uintptr_t)c, p->m, p->n * w, p->ldc * w};
    const char *what = NULL;
    if (p->k) {
        const rt_mat am = {(uintptr_t)a, p->ta ? p->k : p->m, (p->ta ? p->m : p->k) * w,
                           p->lda * w};
        const rt_mat bm = {(uintptr_t)b, p->tb ? p->n : p->k, (p->tb ? p->k : p->n) * w,
                           p->ldb * w};
        if (rt_mat_overlap(&cm, &am)) what = "a";
        else if (rt_mat_overlap(&cm, &bm)) what = "b";
    }
    if (!what && bias) {
        const rt_mat vm = {(uintptr_t)bias, 1, p->n * w, p->n * w};
        if (rt_mat_overlap(&cm, &vm)) what = "bias";
    }
    if (!what) return FJ_OK;
    return fj_fail(FJ_ERR_INVALID_ARG, "%s: c overlaps %s (C may share no memory with A, B or "
                   "the bias)", fn, what);
}

/* Whether C's span meets A's, B's or the bias's: the every-call part of
 * the check, from the spans the plan keeps (cheap next to the smallest
 * call). */
static inline int spans_meet(const gemm_plan *p, const void *a, const void *b,
                             const void *bias, const void *c) {
    uintptr_t c0 = (uintptr_t)c, c1 = c0 + p->span_c;
    return ((uintptr_t)a < c1 && c0 < (uintptr_t)a + p->span_a) |
           ((uintptr_t)b < c1 && c0 < (uintptr_t)b + p->span_b) |
           (bias && (uintptr_t)bias < c1 && c0 < (uintptr_t)at(p, bias, p->n));
}

/* ---- public entry points ---------------------------------------------- */

/* fj_gemm_f32 and fj_gemm_f64: one body, the element type a parameter. */
static inline __attribute__((always_inline)) fj_status
gemm_call(const char *fn, int dt, fj_runtime *rt, char transa, char transb, int64_t m, int64_t n,
          int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
          double beta, void *c, int64_t ldc) {
    if (!rt) return fj_fail(FJ_ERR_INVALID_ARG, "%s: runtime is NULL", fn);
    /* A call that repeats the shape this thread planned last (small
     * GEMMs in a loop) skips the size checks, which depend on nothing but
     * the inputs the plan was made for, valid then, and the rest of the
     * planning. */
    int ta = trans_of(transa), tb = trans_of(transb);
    const gemm_plan *p = ta < 0 || tb < 0 ? NULL
                         : gemm_plan_repeat(rt, dt, ta, tb, m, n, k, lda, ldb, ldc, alpha, beta);
    fj_kernel *lent = NULL;
    fj_status s = FJ_OK;
    if (!p) s = check_dims(fn, transa, transb, m, n, k, lda, ldb, ldc, &ta, &tb);
    if (s == FJ_OK) s = check_ptrs(fn, m, n, k, a, b, c);
    if (s != FJ_OK || m == 0 || n == 0) return s;
    /* One row or column of C: matrix x vector kernels (gemv.c). */
    if (!p && gemm_vec_shape(dt, m, n, k))
        return gemm_vec(rt, dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (!p) {
        const gemm_desc d = {.dt = dt, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                             .ldb = ldb, .ldc = ldc, .alpha = alpha, .beta = beta};
        s = gemm_plan_borrow(rt, &d, &p, &lent);
        if (s != FJ_OK) return s;
    }
    if (__builtin_expect(spans_meet(p, a, b, NULL, c), 0) &&
        (s = check_alias(fn, p, a, b, NULL, c)) != FJ_OK) {
        gemm_plan_unborrow(lent);
        return s;
    }
    uint64_t t0 = rt_exec_begin();
    s = gemm_run(p, a, b, NULL, c);
    rt_exec_end(t0, fn, "m=%lld n=%lld k=%lld", (long long)m, (long long)n, (long long)k);
    if (lent) gemm_plan_unborrow(lent);
    return s;
}

fj_status fj_gemm_f32(fj_runtime *rt, char transa, char transb, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc) {
    return gemm_call("fj_gemm_f32", KG_DT_F32, rt, transa, transb, m, n, k, alpha, a, lda, b,
                     ldb, beta, c, ldc);
}

fj_status fj_gemm_f64(fj_runtime *rt, char transa, char transb, int64_t m, int64_t n, int64_t k,
                      double alpha, const double *a, int64_t lda, const double *b, int64_t ldb,
                      double beta, double *c, int64_t ldc) {
    return gemm_call("fj_gemm_f64", KG_DT_F64, rt, transa, transb, m, n, k, alpha, a, lda, b,
                     ldb, beta, c, ldc);
}

struct fj_gemm {
    gemm_plan plan;
    int has_bias;
};

/* Both element types' handles: d's fields, alpha and beta as doubles. */
static fj_status gemm_create(const char *fn, int dt, fj_runtime *rt, char transa, char transb,
                             int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                             int64_t ldc, double alpha, double beta, int has_bias,
                             fj_eltwise_op post_op, double post_alpha, double post_beta,
                             fj_gemm **out) {
    int ta, tb;
    fj_status s = check_dims(fn, transa, transb, m, n, k, lda, ldb, ldc, &ta, &tb);
    if (s != FJ_OK) return s;
    if ((int)post_op < 0 || post_op >= FJ_ELT__COUNT)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: post_op %d is not an fj_eltwise_op", fn,
                       (int)post_op);
    if (dt == KG_DT_F64 && post_op && !kg_gemm_act64(post_op, post_alpha))
        return fj_fail(FJ_ERR_UNSUPPORTED, "%s: f64 GEMM has no post-op %d", fn, (int)post_op);
    fj_gemm *g = fj_calloc(1, sizeof *g);
    if (!g) return fj_fail(FJ_ERR_NO_MEMORY, "%s: out of memory", fn);
    g->has_bias = has_bias != 0;
    /* f64 kernels take the post-op's constants at run time: their code
     * depends only on which form relu takes (its key says which: max,
     * min, or the negative-alpha form). */
    float key_a = (float)post_alpha, key_b = (float)post_beta;
    if (dt == KG_DT_F64) {
        int leaky = post_op == FJ_ELT_RELU || post_op == FJ_ELT_LEAKY_RELU;
        key_a = !leaky || post_alpha == 0 ? 0.0f
                : post_alpha < 0  ? -1.0f
                : post_alpha <= 1 ? 0.5f
                                  : 2.0f;
        key_b = 0.0f;
    }
    const gemm_desc d = {.dt = dt, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                         .ldb = ldb, .ldc = ldc, .alpha = alpha, .beta = beta,
                         .has_bias = g->has_bias, .act = (int)post_op, .act_alpha = key_a,
                         .act_beta = key_b};
    s = gemm_plan_init(rt, &g->plan, &d);
    if (s != FJ_OK) {
        gemm_plan_release(&g->plan);
        fj_free(g);
        return s;
    }
    if (dt == KG_DT_F64 && post_op) {
        /* f64 kernels read the post-op's constants at run time, exactly */
        g->plan.act_a = post_alpha;
        g->plan.act_b = post_beta;
        gemm_plan_set_ab(&g->plan, alpha, beta);
    }
    *out = g;
    return FJ_OK;
}

fj_status fj_gemm_create(fj_runtime *rt, const fj_gemm_desc *d, fj_gemm **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "fj_gemm_create: out is NULL");
    *out = NULL;
    if (!rt || !d)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_gemm_create: %s is NULL", !rt ? "runtime" : "desc");
    return gemm_create("fj_gemm_create", KG_DT_F32, rt, d->transa, d->transb, d->m, d->n, d->k,
                       d->lda, d->ldb, d->ldc, d->alpha, d->beta, d->has_bias, d->post_op,
                       d->post_alpha, d->post_beta, out);
}

fj_status fj_gemm_f64_create(fj_runtime *rt, const fj_gemm_f64_desc *d, fj_gemm **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "fj_gemm_f64_create: out is NULL");
    *out = NULL;
    if (!rt || !d)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_gemm_f64_create: %s is NULL",
                       !rt ? "runtime" : "desc");
    return gemm_create("fj_gemm_f64_create", KG_DT_F64, rt, d->transa, d->transb, d->m, d->n,
                       d->k, d->lda, d->ldb, d->ldc, d->alpha, d->beta, d->has_bias, d->post_op,
                       d->post_alpha, d->post_beta, out);
}

static fj_status gemm_execute(const char *fn, int dt, const fj_gemm *g, const void *a,
                              const void *b, const void *bias, void *c) {
    if (!g) return fj_fail(FJ_ERR_INVALID_ARG, "%s: handle is NULL", fn);
    const gemm_plan *p = &g->plan;
    if (p->dt != dt)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: the handle is for %s", fn,
                       p->dt == KG_DT_F64 ? "f64 (fj_gemm_f64_execute)" : "f32 (fj_gemm_execute)");
    fj_status s = check_ptrs(fn, p->m, p->n, p->k, a, b, c);
    if (s != FJ_OK) return s;
    if (g->has_bias && p->m && p->n && !bias)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: bias is NULL but the descriptor has has_bias", fn);
    if (!g->has_bias) bias = NULL;
    if (p->m && p->n && spans_meet(p, a, b, bias, c) &&
        (s = check_alias(fn, p, a, b, bias, c)) != FJ_OK)
        return s;
    uint64_t t0 = rt_exec_begin();
    s = gemm_run(p, a, b, bias, c);
    rt_exec_end(t0, fn, "m=%lld n=%lld k=%lld", (long long)p->m, (long long)p->n,
                (long long)p->k);
    return s;
}

fj_status fj_gemm_execute(const fj_gemm *g, const float *a, const float *b, const float *bias,
                          float *c) {
    return gemm_execute("fj_gemm_execute", KG_DT_F32, g, a, b, bias, c);
}

fj_status fj_gemm_f64_execute(const fj_gemm *g, const double *a, const double *b,
                              const double *bias, double *c) {
    return gemm_execute("fj_gemm_f64_execute", KG_DT_F64, g, a, b, bias, c);
}

void fj_gemm_destroy(fj_gemm *g) {
    if (!g) return;
    gemm_plan_release(&g->plan);
    fj_free(g);
}
