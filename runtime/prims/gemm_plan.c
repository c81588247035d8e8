/* gemm_plan.c: how a GEMM is blocked and which kernel runs it: the
 * blocking knobs' defaults, the blocking rules (each with its reason; the
 * measurements behind them are in docs/performance.md), the kernel cache
 * key and the thread's memo of its last plan. gemm.c runs the plans. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/prims/gemm_int.h"
#include "runtime/prims/gemm_model.h"
#include "runtime/prims/gemm_tune.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"
#include "runtime/rt.h"
#include "runtime/prims/span.h"

/* ---- blocking --------------------------------------------------------- */

static gemm_tune tune_cur;
static pthread_once_t tune_once = PTHREAD_ONCE_INIT;
/* Bumped whenever the knobs change: plans remembered before are stale. */
static _Atomic unsigned tune_gen;

void gemm_tune_defaults(gemm_tune *t) {
    /* The cache sizes, the tile and the prefetch distances: the CPU's (the
     * runtime's model, gemm_model.c) unless a knob sets them. */
    *t = (gemm_tune){
        .mr512 = 0, .nv512 = -1, .mr2 = 0, .nv2 = -1, .unroll = 0, .pf_a = -1, .pf_c = -1,
        .b_copy = 1, .bpf_rows = -1, .shortk = 256, .direct = -1, .da = -1, .db = -1, .a_reg = -1,
        .mt_flops = 1L << 19, .shared_min = 1L << 36, .share_k = 128, .rpt = 8, .split_n = -1,
    };
}

/* The defaults, and in builds with the experiment parser (meson
 * -Dgemm_tune=true) FRAMEJIT_GEMM_TUNE's knobs over them. */
static atomic_int tune_ready;
static void tune_init(void) {
    atomic_fetch_add_explicit(&tune_gen, 1, memory_order_relaxed);
    gemm_tune_defaults(&tune_cur);
#if FJ_GEMM_TUNE
    gemm_tune_parse(&tune_cur, getenv("FRAMEJIT_GEMM_TUNE"));
#endif
    atomic_store_explicit(&tune_ready, 1, memory_order_release);
}

/* The knobs set: a load on every call after the first (pthread_once is
 * a call through the PLT each time). */
static inline void tune_need(void) {
    if (!atomic_load_explicit(&tune_ready, memory_order_acquire))
        pthread_once(&tune_once, tune_init);
}

void gemm_tune_set(const gemm_tune *t) {
    pthread_once(&tune_once, tune_init);
    atomic_fetch_add_explicit(&tune_gen, 1, memory_order_relaxed);
    if (t) tune_cur = *t;
    else gemm_tune_defaults(&tune_cur);
}

/* The kernel cache's key for a configuration: the cache hashes every key
 * byte on each call, so the usual configurations get a short key (its own
 * tag keeps it apart from the full form, used for anything that does not
 * fit). */
typedef struct gemm_key {
    int32_t tag;
    uint8_t isa, mr, nv, amode, bmode, unroll, pf_c, a_reg, has_bias, act, b_copy;
    uint8_t stores, tail_rows, full_panels; /* (no padding before pf_a) */
    uint16_t pf_a, pf_b;
    float act_alpha, act_beta; /* only with act */
} gemm_key;

#define GEMM_KEY_TAG 0x47454d32   /* "GEM2" */
#define GEMM_KEY_TAG64 0x47454d33 /* "GEM3": the same for f64 kernels */

static size_t gemm_key_of(const kg_gemm_cfg *c, gemm_key *k) {
    if ((unsigned)c->isa > 255 || (unsigned)c->mr > 255 || (unsigned)c->nv > 255 ||
        (unsigned)c->amode > 255 || (unsigned)c->bmode > 255 || (unsigned)c->unroll > 255 ||
        (unsigned)c->pf_c > 255 || (unsigned)c->a_reg > 255 || (unsigned)c->has_bias > 255 ||
        (unsigned)c->act > 255 || (unsigned)c->b_copy > 255 || (unsigned)c->pf_a > 65535 ||
        (unsigned)c->pf_b > 65535 || (unsigned)c->stores > 255 || (unsigned)c->tail_rows > 255 ||
        (unsigned)c->full_panels > 255)
        return 0;
    memset(k, 0, sizeof *k);
    *k = (gemm_key){.tag = c->dt == KG_DT_F64 ? GEMM_KEY_TAG64 : GEMM_KEY_TAG, .isa = (uint8_t)c->isa, .mr = (uint8_t)c->mr,
                    .nv = (uint8_t)c->nv, .amode = (uint8_t)c->amode, .bmode = (uint8_t)c->bmode,
                    .unroll = (uint8_t)c->unroll, .pf_c = (uint8_t)c->pf_c,
                    .a_reg = (uint8_t)c->a_reg, .has_bias = (uint8_t)c->has_bias,
                    .act = (uint8_t)c->act, .b_copy = (uint8_t)c->b_copy,
                    .stores = (uint8_t)c->stores, .tail_rows = (uint8_t)c->tail_rows,
                    .full_panels = (uint8_t)c->full_panels,
                    .pf_a = (uint16_t)c->pf_a,
                    .pf_b = (uint16_t)c->pf_b};
    if (!c->act) return offsetof(gemm_key, act_alpha);
    k->act_alpha = c->act_alpha;
    k->act_beta = c->act_beta;
    return sizeof *k;
}

static void plan_kernel_name(const void *cfg, char *buf, size_t n) { kg_gemm_name(cfg, buf, n); }

/* Acquires p->kern for p->cfg (already checked); the name is formatted
 * only when the kernel is made (snprintf costs more than a small GEMM's
 * bookkeeping). */
static fj_status plan_kernel(gemm_plan *p) {
    gemm_key key;
    size_t len = gemm_key_of(&p->cfg, &key);
    rt_kdesc d = {len ? (const void *)&key : (const void *)&p->cfg, len ? len : sizeof p->cfg,
                  NULL, KG_GEMM_NARGS, kg_gemm, &p->cfg, plan_kernel_name};
    return rt_kernel_acquire(p->rt, &d, &p->kern);
}

/* Everything a plan depends on but alpha and beta (and the runtime's ISA
 * and thread count, fixed for its life: the runtime is in here). */
typedef struct plan_inputs {
    fj_runtime *rt;
    int64_t m, n, k, lda, ldb, ldc;
    int32_t dt, ta, tb, has_bias, act;
    unsigned gen;
    float act_alpha, act_beta;
} plan_inputs;

/* The last plan made on this thread, usually with a reference to its
 * kernel: calls repeating a shape, typical of small GEMMs in a loop, skip
 * the blocking arithmetic and the kernel table (its hash and lock are a
 * large share of a small call). A held kernel keeps its arena from eviction, so
 * the runtime bounds how many memos hold one (rt_khold_set); a memo
 * without one looks its kernel up on each call. */
static _Thread_local struct {
    plan_inputs in;
    uint64_t serial;  /* in.rt's: tells it from a later runtime at its address */
    gemm_plan p;      /* p.kern: hold.k, or NULL (lent for one call, see below) */
    rt_khold hold;
    int exit_hook;    /* the thread's exit drops hold */
} memo;

static pthread_key_t memo_key;
static pthread_once_t memo_key_once = PTHREAD_ONCE_INIT;
static int memo_key_ok;

static void memo_exit(void *arg) {
    (void)arg;
    rt_khold_drop(&memo.hold);
}
static void memo_key_init(void) { memo_key_ok = pthread_key_create(&memo_key, memo_exit) == 0; }

static fj_status plan_make(fj_runtime *rt, gemm_plan *p, const gemm_desc *d);

/* A float's bits, for comparing parameters bit for bit (taking d's field
 * addresses for memcmp would keep an inlined d out of registers). */
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* This thread's memo plan if it is the plan of d (on this very runtime),
 * else NULL. Field by field: cheaper than building the inputs and
 * comparing them whole, which shows in the smallest calls. */
static inline __attribute__((always_inline)) gemm_plan *memo_find(fj_runtime *rt,
                                                                  const gemm_desc *d) {
    /* The thread's memo found once: the compiler would ask the TLS
     * descriptor again for each access (three calls in a repeated call's
     * path), had the asm not made the address opaque to it. */
    __typeof__(memo) *mm = &memo;
    __asm__("" : "+r"(mm));
    const plan_inputs *i = &mm->in;
    if (i->rt != rt || mm->serial != rt->serial || i->m != d->m || i->n != d->n ||
        i->k != d->k || i->lda != d->lda || i->ldb != d->ldb || i->ldc != d->ldc ||
        i->ta != d->ta || i->tb != d->tb || i->dt != d->dt || i->has_bias != d->has_bias ||
        i->act != d->act || i->gen != atomic_load_explicit(&tune_gen, memory_order_relaxed))
        return NULL;
    if (d->act && (f32_bits(i->act_alpha) != f32_bits(d->act_alpha) ||
                   f32_bits(i->act_beta) != f32_bits(d->act_beta)))
        return NULL;
    return &mm->p;
}

/* Plans d and makes it this thread's memo. *lent: the kernel's reference
 * when the memo may not hold it (see gemm_plan_borrow). */
static fj_status memo_make(fj_runtime *rt, const gemm_desc *d, fj_kernel **lent) {
    gemm_plan p;
    fj_status s = plan_make(rt, &p, d);
    if (s == FJ_OK) {
        p.cfg.stores = gemm_plan_stores(&p, d->alpha, d->beta);
        s = plan_kernel(&p);
    }
    if (s != FJ_OK) return s;
    if (!memo.exit_hook) {
        pthread_once(&memo_key_once, memo_key_init);
        memo.exit_hook = 1;
        if (memo_key_ok) pthread_setspecific(memo_key, &memo);
    }
    memo.in = (plan_inputs){.rt = rt, .dt = d->dt, .m = d->m, .n = d->n, .k = d->k,
                            .lda = d->lda, .ldb = d->ldb, .ldc = d->ldc, .ta = d->ta,
                            .tb = d->tb, .has_bias = d->has_bias, .act = d->act,
                            .gen = atomic_load_explicit(&tune_gen, memory_order_relaxed),
                            .act_alpha = d->act ? d->act_alpha : 0.0f,
                            .act_beta = d->act ? d->act_beta : 0.0f};
    memo.serial = rt->serial;
    if (!rt_khold_set(&memo.hold, rt, p.kern)) *lent = p.kern;
    memo.p = p;
    return FJ_OK;
}

fj_status gemm_plan_init(fj_runtime *rt, gemm_plan *p, const gemm_desc *d) {
    const gemm_plan *q;
    fj_kernel *lent;
    fj_status s = gemm_plan_borrow(rt, d, &q, &lent);
    if (s != FJ_OK) {
        memset(p, 0, sizeof *p);
        return s;
    }
    *p = *q;
    if (lent) memo.p.kern = NULL; /* the reference passes to p */
    else rt_kernel_ref(p->kern);  /* held by the memo: not evictable meanwhile */
    return FJ_OK;
}

/* The C updates (KG_STORES bits) this alpha and beta need that memo plan
 * p's kernel lacks; none when they are p's own (bit for bit). */
static int stores_missing(const gemm_plan *p, double alpha, double beta) {
    if (!memcmp(&alpha, &p->alpha, sizeof alpha) && !memcmp(&beta, &p->beta, sizeof beta))
        return 0;
    return gemm_plan_stores(p, alpha, beta) & ~p->cfg.stores;
}

fj_status gemm_plan_borrow(fj_runtime *rt, const gemm_desc *d, const gemm_plan **out,
                           fj_kernel **lent) {
    tune_need();
    *lent = NULL;
    const double alpha = d->alpha, beta = d->beta;
    gemm_plan *p = memo_find(rt, d);
    int miss;
    if (!p) {
        fj_status s = memo_make(rt, d, lent);
        if (s != FJ_OK) return s;
        p = &memo.p;
    } else if ((miss = stores_missing(p, alpha, beta))) {
        /* A C update the memo's kernel lacks: a kernel with the kinds of
         * both, so that calls alternating (alpha, beta) settle on one. */
        gemm_plan q = *p;
        q.cfg.stores |= miss;
        fj_status s = plan_kernel(&q);
        if (s != FJ_OK) return s;
        if (!rt_khold_set(&memo.hold, rt, q.kern)) *lent = q.kern;
        memo.p = q;
    } else if (!p->kern) {
        /* A memo without its kernel: the table's, for this call. */
        fj_status s = plan_kernel(p);
        if (s != FJ_OK) return s;
        *lent = p->kern;
    }
    gemm_plan_set_ab(p, alpha, beta);
    *out = p;
    return FJ_OK;
}

/* The most frequent call of all takes its inputs in registers: a
 * gemm_desc would be stored to memory and read back on every call
 * (memo_find is inlined, so d below lives in registers). */
const gemm_plan *gemm_plan_repeat(fj_runtime *rt, int dt, int ta, int tb, int64_t m, int64_t n,
                                  int64_t k, int64_t lda, int64_t ldb, int64_t ldc, double alpha,
                                  double beta) {
    const gemm_desc d = {.dt = dt, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                         .ldb = ldb, .ldc = ldc};
    gemm_plan *p = memo_find(rt, &d);
    if (!p || !p->kern) return NULL;
    /* The same alpha and beta as the last call (bit for bit): nothing to
     * redo. */
    if (!memcmp(&alpha, &p->alpha, sizeof alpha) && !memcmp(&beta, &p->beta, sizeof beta))
        return p;
    if (stores_missing(p, alpha, beta)) return NULL;
    gemm_plan_set_ab(p, alpha, beta);
    return p;
}

void gemm_plan_unborrow(fj_kernel *lent) {
    if (!lent) return;
    if (memo.p.kern == lent) memo.p.kern = NULL;
    rt_kernel_unref(lent);
}

/* The plan without alpha and beta (gemm_plan_borrow sets them per call):
 * the runtime's model for d's element size, or with the cache knobs set
 * (l1, l2, l1_ways), a model of the runtime's CPU with those caches. */
static fj_status plan_make(fj_runtime *rt, gemm_plan *p, const gemm_desc *d) {
    const int f64 = d->dt == KG_DT_F64;
    const gemm_model *bl = &rt->gemm[f64];
    gemm_model own;
    if (tune_cur.l1 > 0 || tune_cur.l2 > 0 || tune_cur.l1_ways > 0) {
        kc_cpu_desc cpu = *rt->cpu;
        kc_cache_info *l1 = &cpu.l1d;
        if (tune_cur.l1_ways > 0) {
            /* The same sets, that many ways. */
            l1->ways = tune_cur.l1_ways;
            l1->size = (int64_t)l1->ways * l1->sets * l1->line;
        }
        if (tune_cur.l1 > 0) l1->size = tune_cur.l1, l1->sets = 0;
        if (tune_cur.l2 > 0) cpu.l2.size = tune_cur.l2, cpu.l2.sets = 0;
        kc_cache_complete(l1);
        kc_cache_complete(&cpu.l2);
        own = gemm_model_of(&cpu, rt->isa, f64 ? 8 : 4);
        bl = &own;
    }
    fj_status s = gemm_plan_block(p, d, bl, rt_threads(rt), &tune_cur);
    p->rt = rt;
    return s;
}

fj_status gemm_plan_block(gemm_plan *p, const gemm_desc *d, const gemm_model *bl, int threads,
                          const gemm_tune *knobs) {
    /* The knobs, with what they leave unset from the model. */
    gemm_tune tune = *knobs;
    if (tune.nv512 < 0) tune.nv512 = bl->nv;
    if (tune.nv2 < 0) tune.nv2 = bl->nv;
    if (tune.pf_a < 0) tune.pf_a = bl->pf_a;
    if (tune.pf_c < 0) tune.pf_c = bl->pf_c;
    if (tune.bpf_rows < 0) tune.bpf_rows = bl->bpf_rows;
    /* (The rules below read the call's fields by their short names.) */
    const int dt = d->dt, ta = d->ta, tb = d->tb, has_bias = d->has_bias, act = d->act;
    const int64_t m = d->m, n = d->n, k = d->k, lda = d->lda, ldb = d->ldb, ldc = d->ldc;
    memset(p, 0, sizeof *p);
    const int es = dt == KG_DT_F64 ? 8 : 4;
    if (es != bl->es)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm plan: a model for %d-byte elements", bl->es);
    *p = (gemm_plan){.dt = dt, .es = es, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                     .ldb = ldb, .ldc = ldc, .has_post = has_bias || act};
    /* (The entry points validated the dimensions: the spans fit.) */
    p->span_a = rt_mat_bytes(ta ? k : m, ta ? m : k, lda) / 4 * es;
    p->span_b = rt_mat_bytes(tb ? n : k, tb ? k : n, ldb) / 4 * es;
    p->span_c = rt_mat_bytes(m, n, ldc) / 4 * es;
    int avx512 = bl->isa == FJ_ISA_AVX512;
    p->lanes = bl->lanes;
    p->nv = avx512 ? tune.nv512 : tune.nv2;
    int mr_max = gemm_model_mr(bl, p->nv);
    /* Narrow problems: fewer vectors, taller tiles (same register count). */
    while (p->nv > 1 && (int64_t)(p->nv - 1) * p->lanes >= n) {
        p->nv--;
        mr_max = mr_max * (p->nv + 1) / p->nv;
    }
    if (mr_max > bl->mr_cap) mr_max = bl->mr_cap;
    /* The tile is the plan's to choose (no mr/nv knob set): the rules below
     * may change it. */
    const int auto_tile = avx512 && !tune.mr512 && tune.nv512 == bl->nv;
    /* n that 48-wide panels cover with fewer idle lanes than 32-wide ones
     * (48, 144, 240...: the last 32-wide panel would run half empty): 3
     * vectors and at most 9 rows (27 accumulators): fewer idle lanes is
     * less wasted FMA work. */
    if (auto_tile && p->nv == 2 && cdiv(n, 3 * p->lanes) * 3 * p->lanes - n < cdiv(n, 2 * p->lanes) * 2 * p->lanes - n) {
        p->nv = 3;
        mr_max = gemm_model_mr(bl, 3);
    }
    p->mr = avx512 ? tune.mr512 : tune.mr2;
    if (!p->mr) {
        /* Rows computed past m are wasted FMAs, and a tile with fewer
         * accumulators than the FMA latency x pipes leaves the pipes idle:
         * for short problems pick the tile height that takes the fewest
         * cycles, then wastes fewest rows (gemm_model_rows_better; ties:
         * the taller tile). Tall problems keep the tallest tile, so they
         * share one kernel. */
        p->mr = mr_max;
        /* AVX2 with a k loop of 64 steps and more: no tile under 1.5 x
         * latency x pipes accumulators (12 on two pipes of latency 4). A
         * tile of only latency x pipes (4 x 16) stalls whenever a load is
         * late (it has no broadcast folded into its FMAs), and loses more
         * than the rows the taller tile wastes. A shorter k loop is cheap
         * next to the tile's fixed costs (zeroing, stores, the call), where
         * the least waste wins. */
        int r_min = (mr_max + 1) / 2;
        if (!avx512 && k >= 64) r_min = (int)max64(r_min, cdiv(bl->acc_min * 3 / 2, p->nv));
        if (m <= 256)
            for (int r = mr_max - 1; r >= r_min; r--)
                if (gemm_model_rows_better(bl, m, r, p->mr, p->nv)) p->mr = r;
    }
    /* Rows of A read in place that one L1 set keeps beside the B panel
     * streaming through it (the model's: 4 in an 8-way L1, 8 in a 12-way
     * one, the ways the B panel's lines leave free). */
    int per_set = bl->per_set;
    /* Row-major A whose rows all fall into one L1 set (lda a multiple of
     * 1024 floats) and an L1 that holds 8 of them: 8-row tiles read A in
     * place instead of packing it for the tallest tile: the pack costs
     * more than the shorter tile loses. */
    const int auto_a = !ta && tune.da < 0 && tune.direct < 0; /* A in place or not: ours */
    if (auto_tile && auto_a && m > 256 && per_set >= 8 && gemm_model_spread(bl, lda, p->es) == 1 && p->mr > per_set)
        p->mr = per_set;
    /* Row-major A whose rows fall into 2-3 L1 sets (lda near a multiple
     * of 512 floats) and an L1 that holds fewer of them than the tall tile
     * puts in one set: the tile's rows evict each other in place and its
     * transposing pack is not free; six rows x 64 columns read in place
     * avoid both (at 256^3 the 8-row tile already fits in place, at 1024^3
     * even six rows share one set). */
    int six = auto_tile && auto_a && n >= 256 && m > 256 && gemm_model_spread(bl, lda, p->es) >= 2 &&
              cdiv(p->mr, gemm_model_spread(bl, lda, p->es)) > per_set;
    /* Short k and wide C: a tile is a few hundred cycles of FMAs, and
     * touching C costs a page walk per row (rows are often 4 KiB and more
     * apart); the 6 x 64 tile touches a page per 64 outputs instead of per
     * 32, and prefetching C does not pay. Only up to a short k (the
     * shortk knob): with a long k the taller tile's reuse of B wins. */
    const int short_wide = n >= 256 && m > 256 && k <= tune.shortk;
    int shortk = auto_tile && short_wide;
    if (six || shortk) {
        p->mr = gemm_model_mr(bl, 4);
        p->nv = 4;
    }
    p->nr = p->nv * p->lanes;

    /* Small m x n with a long k: nothing is reused enough to pay for
     * packing; read both operands in place over the whole k (one pass
     * over C). */
    int small_mn = m <= 128 && n <= 128 && k >= 4 * max64(m, n) && !tb;
    /* kc: the model's for this tile (gemm_model_kc: the B panel about 4/3
     * of L1, with AVX-512 an eighth of L2; as deep as C's passes matter).
     * k blocks balanced so that the last one is not a sliver. */
    int64_t kc = tune.kc       ? tune.kc
                 : small_mn   ? 2048
                              : gemm_model_kc(bl, p->nr);
    kc = max64(16, kc & ~(int64_t)7);
    int64_t nkb = max64(1, cdiv(k, kc));
    p->kc = max64(1, min64(kc, (cdiv(k, nkb) + 7) & ~(int64_t)7));
    /* mc: four row tiles per B panel. Short row blocks keep the C block
     * that the panels sweep (mc x n) and the A block in L2, and each
     * kernel call's C lines within a few pages; B's panels come from L2 or
     * L3 again for every row block, which the prefetchers hide (it beat
     * sizing the A block to a quarter of L2). */
    int64_t mc = tune.mc ? tune.mc : bl->mc_tiles * p->mr;
    p->mc = max64(p->mr, mc / p->mr * p->mr);

    double flops = 2.0 * (double)m * (double)n * (double)k;
    /* Threads pay from about 0.5 MFLOP on (the mt_flops knob), 8192
     * cycles of one thread's FMAs, several times what handing a job to a
     * spinning worker and joining it costs: below it a second thread saves
     * less than the hand-off. That is a time: the threshold scales with
     * the flops a cycle this ISA retires on this CPU (FMA pipes x vector
     * width; the knob is for two 512-bit pipes). A one-thread runtime
     * keeps the plan that calls the kernel directly. */
    const double mt_flops =
        (double)tune.mt_flops * bl->fma_pipes * (bl->lanes * bl->es * 8) / 1024.0;
    p->threads = threads > 1 && flops >= mt_flops ? 64 : 1;
    /* A napping worker woken at once from 256^3 on (rt_par_wake_from). */
    p->par_flags = p->threads > 1 ? rt_par_wake_from(flops, mt_flops) : 0;

    /* Packing costs about one copy of the operand: relative to the product
     * that is ~2/n for A and ~2/m for B. Read in place when that matters
     * and the in-place layout does not alias in L1 (rows of a power-of-two
     * stride fall into a few cache sets and evict each other). */
    int64_t kb = min64(k, p->kc);
    /* Row-major A: its transposing pack costs more than reading the rows
     * in place, whatever n, as long as the tile's rows spread over the L1
     * sets (at most per_set of them per set: more evict each other and
     * lose to packing). */
    int da = ta ? n <= 128 && gemm_model_spread(bl, lda, p->es) * 6 >= kb
                : (gemm_model_spread(bl, lda, p->es) >= 2 || per_set >= 8) &&
                      cdiv(p->mr, gemm_model_spread(bl, lda, p->es)) <= per_set;
    int db = !tb && m <= 128 && gemm_model_spread(bl, ldb, p->es) * 6 >= kb;
    /* Row-major B of a small problem on one thread, even where its rows
     * alias in L1: each tile streams the panel from L2 as fast as from a
     * packed copy in L1, and the packing (the first tile's stores) and the
     * blocked driver are saved. Only up to 256 x 384 x 512: past it the
     * panel no longer streams from L2 as fast and packing wins. Both
     * ISAs: the ymm kernel takes B at half the zmm one's rate. */
    if (!tb && p->threads == 1 && m <= 256 && n <= 384 && k <= 512) db = 1;
    if (small_mn || six) da = db = 1;
    if (six) db = 0;
    if (tune.direct >= 0) da = db = tune.direct;
    p->direct_a = tune.da >= 0 ? tune.da : da;
    p->direct_b = (tune.db >= 0 ? tune.db : db) && !tb;
    /* Both operands read in place: there is no packed A block for a row
     * block to keep in L2, only B's panel to reuse from L1, so one row
     * block takes all the rows (each panel then streams into L1 once,
     * not once per four row tiles). */
    if (p->direct_a && p->direct_b && !tune.mc) p->mc = cdiv(m, p->mr) * p->mr;
    /* nc: the model's (gemm_model_nc): the B block (kc x nc) in half of
     * L2, in balanced column blocks. Every row block sweeps the whole
     * block again; from L3 that is more than the prefetchers hide. At least 256 columns: A is packed
     * again for each column block. At least 1024 for an A read in place
     * that is four L2s or more: it is read again, from memory, for every
     * column block, so wider blocks pay even though the B block then
     * sweeps from L3 (a smaller A still prefers the narrower block). With
     * AVX2, for a packed A of four L2s or more: its transposing pack is
     * redone for every column block (a tenth of the kernel's time with 256
     * columns), and the ymm kernel takes B at half the rate of the zmm
     * one, which L3 keeps up with. */
    const int wide = (avx512 ? p->direct_a && k >= 512 : !p->direct_a) &&
                     (double)m * (double)k * es >= 4.0 * (double)bl->l2;
    int64_t nc = gemm_model_nc(bl, p->kc, p->nr, wide);
    int64_t nnb = max64(1, cdiv(n, nc));
    p->nc = tune.nc ? max64(p->nr, tune.nc / p->nr * p->nr) : cdiv(cdiv(n, nnb), p->nr) * p->nr;
    if (p->nc > bl->nc_max) p->nc = bl->nc_max;
    /* A wide AVX-512 plan's B block (kc x nc) is more than L2 holds: each
     * kernel call streams its B panel from L3 during its first row tile,
     * slower than the other tiles read it from L2. Twice the row tiles per
     * panel halve that share; the A block (mc x kc) stays within what L2
     * holds beside the panel (the model's mc_l2). */
    if (avx512 && wide && !p->direct_b && !tune.mc && (double)p->kc * (double)p->nc * es > (double)bl->l2)
        p->mc = max64(p->mr, min64(2 * (int64_t)bl->mc_tiles * p->mr, bl->mc_l2) / p->mr * p->mr);

    size_t kcf = (size_t)p->kc;
    if (p->direct_a) p->scratch = (size_t)p->mr * kcf;
    else p->scratch = (size_t)p->mc * kcf;
    if (p->direct_b) p->scratch += (size_t)p->nr * kcf;
    else p->scratch += (size_t)p->nc * kcf;
    p->scratch += 64 + 2 * GEMM_PACK_SLACK; /* realignment and the packers' slack */

    /* Threads that split the rows share one packed B for short k and for
     * very large problems (per-chunk packing packs, and reads from memory,
     * all of B once per chunk). Otherwise each thread packs B into its own
     * cache and hands off once, which keeps its B in its own cache; a
     * short k favours sharing. Shared rows go in eight chunks per thread,
     * claimed dynamically: smaller chunks balance the threads better than
     * four, and more would pay the hand-off too often. */
    p->share_b = !p->direct_b && ((double)m * (double)n * (double)k >= (double)tune.shared_min ||
                                  k < tune.share_k);
    p->rpt = tune.rpt;
    /* Threads that split the rows each pack all of B (k x n) and read half
     * of A in place; split by column panels, each packs half of B and
     * reads all of A. Packing (a copy) costs more than reading, so with
     * n >= m the columns go first. Not with B read in place (nothing
     * packed) or shared (short k, very large problems: one packing for all
     * threads already). */
    p->split_n = tune.split_n >= 0 ? tune.split_n && !p->share_b
                                   : !p->share_b && !p->direct_b && n >= m;
    p->whole = p->threads == 1 && p->direct_a && p->direct_b && k > 0 && k <= p->kc &&
               m % p->mr == 0 && n % p->nr == 0 && n <= p->nc;

    /* The k loop's unroll: 4 k steps. The 16-accumulator AVX-512 tile
     * (8 x 32, the one m <= 256 gets when 8 rows waste least) on a short
     * k runs a tile in a few hundred cycles, where 8 steps per iteration
     * save loop overhead; with larger tiles or a long k the longer loop
     * body loses, and it makes the kernel longer to generate. */
    const int unroll = tune.unroll ? tune.unroll
                       : avx512 && p->mr * p->nv <= 16 && k <= 256 ? bl->unroll_short : bl->unroll;
    p->cfg = (kg_gemm_cfg){
        .tag = KG_GEMM_TAG, .isa = bl->isa, .mr = p->mr,
        .nv = p->nv, .amode = p->direct_a ? (ta ? KG_GA_COLS : KG_GA_ROWS) : KG_GA_PACKED,
        .bmode = p->direct_b ? KG_GB_ROWS : KG_GB_PACKED, .unroll = unroll,
        .pf_a = p->direct_a ? 0 : tune.pf_a, .pf_c = tune.pf_c,
        .pf_b = p->direct_b ? 0 : tune.pf_b, .a_reg = avx512 && tune.a_reg > 0,
        .has_bias = has_bias,
        .act = act, .act_alpha = act ? d->act_alpha : 0.0f, .act_beta = act ? d->act_beta : 0.0f,
    };
    if (shortk) p->cfg.pf_c = 0;
    /* AVX2, short k and wide C: no C prefetch either. Each prefetch reads
     * a line that the tile then overwrites whole (the store's own read for
     * ownership fetches it anyway, and the store buffer hides that at the
     * end of the tile); prefetched at the tile's start, its mr lines sit
     * in L1 through the whole short k loop beside A and B (for C rows a
     * multiple of 4 KiB apart, all in one set), and threads that share
     * the L3 and memory pay for the traffic. */
    if (!avx512 && short_wide) p->cfg.pf_c = 0;
    /* AVX2: the last row tile (m % mr rows; only the problem's last rows
     * are ever a short tile, whatever the blocking and threads) runs a k
     * loop over its own rows, not all mr: the 4-row tail of a 6-row tile
     * (m = 64, 256) takes 4 cycles a k step instead of 6, a 2-row one
     * (128) 2 (its steps spread over three sets of accumulators). And n a
     * multiple of the panel width: no call has a column tail, C is stored
     * without masks. */
    if (!avx512) {
        p->cfg.tail_rows = (int)(m % p->mr);
        p->cfg.full_panels = n % p->nr == 0;
    }
    /* Row-major B is packed by the kernels' first row tile, hidden under
     * its FMAs, instead of a separate pass over B. Also when B's rows are
     * far apart (each k step of the copying tile a new page): the tile
     * prefetches B's rows ahead (bpf_rows), and with few rows of A the
     * separate pass would be a large share of the time. */
    p->cfg.b_copy = !p->direct_b && !tb && tune.b_copy > 0;
    p->b_src_pf = (int64_t)tune.bpf_rows * ldb * es;
    /* A broadcast into a register, whatever A's layout: in-place
     * row-major A is addressed base + index*scale, and an FMA with such a
     * memory operand is split in two uops at rename (a broadcast load is
     * one); a packed or column A element feeds nv FMAs, and an FMA that
     * broadcasts from memory loads it again for each of them, where one
     * broadcast serves them all. */
    if (avx512 && tune.a_reg < 0) p->cfg.a_reg = 1;
    /* f64 kernels always broadcast A into a register (kg_gemm_check). */
    p->cfg.dt = dt;
    if (dt == KG_DT_F64) p->cfg.a_reg = avx512;
    return kg_gemm_check(&p->cfg);
}

void gemm_plan_release(gemm_plan *p) {
    if (p->kern) rt_kernel_unref(p->kern);
    p->kern = NULL;
}
