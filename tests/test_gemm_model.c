/* test_gemm_model.c: the GEMM blocking model and the planner's blocking on
 * real CPUs' published cache and FMA figures (panels in the caches meant
 * for them, tiles that fill the FMA pipes and fit the registers, no
 * degenerate blocks), and the cpuid decoding on recorded leaf values. */
#undef FJ_TEST

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"
#include "gemmcase.h"
#include "kernels/x64/cpu_desc.h"
#include "runtime/prims/gemm_int.h"
#include "runtime/prims/gemm_model.h"
#include "runtime/prims/gemm_tune.h"

/* A CPU as its vendor documents it, and what the FMA table should say. */
typedef struct cpu_case {
    const char *name, *vendor;
    int family, model, avx512;
    int64_t l1, l2, l3;           /* KiB */
    int l1w, l2w, l3w;            /* ways */
    int smt, l3_sharing;          /* logical processors per core; sharing the L3 */
    const char *uarch;
    int fma256, fma512, lat;
} cpu_case;

static const cpu_case cpus[] = {
    /* Core i7-4770 */
    {"haswell", "GenuineIntel", 6, 0x3c, 0, 32, 256, 8192, 8, 8, 16, 2, 8, "haswell", 2, 0, 5},
    /* Xeon Platinum 8180 */
    {"skylake-sp", "GenuineIntel", 6, 0x55, 1, 32, 1024, 39424, 8, 16, 11, 2, 56, "skylake-sp", 2,
     2, 4},
    /* Xeon Platinum 8380 */
    {"ice-lake-sp", "GenuineIntel", 6, 0x6a, 1, 48, 1280, 61440, 12, 20, 12, 2, 80, "ice-lake-sp",
     2, 2, 4},
    /* Xeon Platinum 8480+ */
    {"sapphire-rapids", "GenuineIntel", 6, 0x8f, 1, 48, 2048, 107520, 12, 16, 15, 2, 112,
     "sapphire-rapids", 2, 2, 4},
    /* Core i7-1065G7 */
    {"ice-lake-client", "GenuineIntel", 6, 0x7e, 1, 48, 512, 8192, 12, 8, 16, 2, 8, "ice-lake", 2,
     1, 4},
    /* EPYC 7763 */
    {"zen3", "AuthenticAMD", 0x19, 0x01, 0, 32, 512, 32768, 8, 8, 16, 2, 16, "zen3", 2, 0, 4},
    /* EPYC 9654 */
    {"zen4", "AuthenticAMD", 0x19, 0x11, 1, 32, 1024, 32768, 8, 8, 16, 2, 16, "zen4", 2, 1, 4},
    /* EPYC 9755 */
    {"zen5", "AuthenticAMD", 0x1a, 0x02, 1, 48, 1024, 32768, 12, 16, 16, 2, 16, "zen5", 2, 2, 4},
    /* A CPU the table does not know: the default row. */
    {"unknown", "CentaurHauls", 7, 0x3b, 0, 32, 256, 4096, 8, 8, 16, 1, 4, "unknown", 2, 0, 4},
};
enum { NCPU = sizeof cpus / sizeof cpus[0] };

static kc_cache_info cache(int64_t kib, int ways, int sharing) {
    kc_cache_info c = {.size = kib << 10, .ways = ways, .line = 64, .sharing = sharing};
    kc_cache_complete(&c);
    return c;
}

static kc_cpu_desc desc_of(const cpu_case *c) {
    kc_cpu_desc d = {.family = c->family, .model = c->model, .avx512 = c->avx512,
                     .vec_bits = c->avx512 ? 512 : 256, .cache_src = "test"};
    snprintf(d.vendor, sizeof d.vendor, "%s", c->vendor);
    d.l1d = cache(c->l1, c->l1w, c->smt);
    d.l2 = cache(c->l2, c->l2w, c->smt);
    d.l3 = cache(c->l3, c->l3w, c->l3_sharing);
    kc_cpu_fma(&d);
    return d;
}

START_TEST(fma_table) {
    const cpu_case *c = &cpus[_i];
    kc_cpu_desc d = desc_of(c);
    ck_assert_msg(!strcmp(d.uarch, c->uarch), "%s: uarch %s", c->name, d.uarch);
    ck_assert_msg(d.fma256 == c->fma256 && d.fma512 == c->fma512 && d.fma_lat == c->lat,
                  "%s: FMA %d/%d latency %d", c->name, d.fma256, d.fma512, d.fma_lat);
    /* The published sets: 64 per L1 of each of these CPUs. */
    ck_assert_int_eq(d.l1d.sets, 64);
}
END_TEST

/* The B panel's budget the model sizes kc for. */
static int64_t panel_budget(const gemm_model *m) { return m->l2_stream ? m->l2 / 8 : m->l1 * 4 / 3; }

static void check_model(const cpu_case *c, const gemm_model *m) {
    const char *isa = m->isa == FJ_ISA_AVX512 ? "avx512" : "avx2";
    int nr = m->nv * m->lanes, es = m->es;
    int64_t way1 = (int64_t)m->l1_sets * m->line;
    ck_assert_msg(m->acc_min == m->fma_lat * m->fma_pipes && m->acc_min > 0, "%s", c->name);
    /* The tile covers latency x pipes and fits the register file. */
    ck_assert_msg(m->mr * m->nv >= m->acc_min, "%s %s es %d: %dx%d tile, %d accumulators needed",
                  c->name, isa, es, m->mr, m->nv, m->acc_min);
    ck_assert_int_le(m->mr * m->nv + m->nv + 1, m->regs);
    ck_assert_int_le(m->mr, m->mr_cap);
    ck_assert_int_eq(m->regs, m->isa == FJ_ISA_AVX512 ? 32 : 16);
    /* BLIS's kc: B's micro-panel and A's in the L1 ways but one. */
    ck_assert_int_le(m->kc_l1 * (nr + m->mr) * es, (m->l1_ways - 1) * way1);
    /* kc: at least 16, within its cap, the B panel in its budget. */
    ck_assert_int_ge(m->kc, 16);
    ck_assert_int_le(m->kc, m->kc_max);
    ck_assert_msg(m->kc * nr * es <= panel_budget(m), "%s %s es %d: kc %lld", c->name, isa, es,
                  (long long)m->kc);
    /* mc: the A block beside the B panel in L2. */
    ck_assert_int_ge(m->mc, m->mr);
    ck_assert_int_eq(m->mc % m->mr, 0);
    ck_assert_int_le(m->mc, m->mc_l2);
    ck_assert_int_le(m->mc * m->kc * es + m->kc * nr * es, m->l2);
    /* nc: the B block in half of L2 but for the minimum width, and in L3. */
    ck_assert_int_ge(m->nc, nr);
    ck_assert_int_eq(m->nc % nr, 0);
    ck_assert(m->nc * m->kc * es <= m->l2 / 2 || m->nc <= m->nc_min);
    ck_assert_int_le(m->nc * m->kc * es, m->l3);
    ck_assert_int_ge(m->per_set, 1);
    ck_assert_int_le(m->per_set, m->l1_ways);
    ck_assert(m->unroll >= 1 && m->unroll_short >= 1 && m->pf_a > 0 && m->bpf_rows > 0);
}

/* The models of c: f32 and f64 with AVX2, and with AVX-512 where c has
 * it. Returns how many. */
static int models_of(const cpu_case *c, gemm_model out[4]) {
    kc_cpu_desc d = desc_of(c);
    int n = 0;
    for (int isa = FJ_ISA_AVX2; isa <= FJ_ISA_AVX512; isa++)
        for (int es = 4; es <= 8 && (isa == FJ_ISA_AVX2 || c->avx512); es += 4)
            out[n++] = gemm_model_of(&d, isa, es);
    return n;
}

START_TEST(model_invariants) {
    const cpu_case *c = &cpus[_i];
    gemm_model ms[4];
    int n = models_of(c, ms);
    ck_assert_int_eq(n, c->avx512 ? 4 : 2);
    for (int i = 0; i < n; i++) {
        const gemm_model *m = &ms[i];
        ck_assert_int_eq(m->isa, i < 2 ? FJ_ISA_AVX2 : FJ_ISA_AVX512);
        ck_assert_int_eq(m->es, i % 2 ? 8 : 4);
        ck_assert_int_eq(m->lanes, (m->isa == FJ_ISA_AVX512 ? 64 : 32) / m->es);
        check_model(c, m);
    }
}
END_TEST

/* The figures the planner's constants were measured with on the Zen 5
 * host: the model must give them back. */
START_TEST(model_zen5_figures) {
    kc_cpu_desc d = desc_of(&cpus[7]);
    gemm_model m = gemm_model_of(&d, FJ_ISA_AVX512, 4);
    ck_assert(m.mr == 14 && m.nv == 2 && m.kc == 1024 && m.mc == 56 && m.nc == 256);
    ck_assert(m.per_set == 8 && m.kc_max == 1024 && m.pf_a == 1024 && m.pf_c == 2);
    ck_assert(gemm_model_mr(&m, 3) == 9 && gemm_model_mr(&m, 4) == 6);
    ck_assert_int_eq(gemm_model_kc(&m, 48), 682);
    m = gemm_model_of(&d, FJ_ISA_AVX512, 8);
    ck_assert(m.mr == 14 && m.nv == 2 && m.kc == 1024);
    m = gemm_model_of(&d, FJ_ISA_AVX2, 4);
    ck_assert(m.mr == 6 && m.nv == 2 && m.kc == 512 && m.mc == 24 && m.kc_max == 512);
    m = gemm_model_of(&d, FJ_ISA_AVX2, 8);
    ck_assert(m.mr == 6 && m.kc == 512);
    /* An 8-way 32 KiB L1 (Zen 4): four rows per set. */
    d = desc_of(&cpus[6]);
    ck_assert_int_eq(gemm_model_of(&d, FJ_ISA_AVX512, 4).per_set, 4);
    /* Rows of 1024 floats fall into one set, of 1056 into 32, of 1001
     * (not whole lines) into all 64. */
    ck_assert_int_eq(gemm_model_spread(&m, 1024, 4), 1);
    ck_assert_int_eq(gemm_model_spread(&m, 1056, 4), 32);
    ck_assert_int_eq(gemm_model_spread(&m, 1001, 4), 64);
}
END_TEST

/* ---- plans over many shapes ---- */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static int64_t rnd_dim(int64_t lo, int64_t hi) {
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    /* Log-uniform: small and large dimensions alike. */
    double u = (double)(rng >> 11) / 9007199254740992.0;
    int64_t v = (int64_t)((double)lo * pow((double)hi / (double)lo, u));
    return v < lo ? lo : v > hi ? hi : v;
}

static const int64_t fixed[][3] = {
    {16, 16, 16}, {32, 32, 32}, {64, 64, 64}, {128, 128, 128}, {256, 256, 256}, {512, 512, 512},
    {1024, 1024, 1024}, {2048, 2048, 2048}, {64, 64, 1024}, {1024, 1024, 64}, {1, 1, 1},
    {7, 33, 5}, {100, 60, 70}, {513, 144, 777}, {4096, 8, 300}, {3, 4096, 9}, {257, 255, 15},
    {48, 48, 48}, {1000, 48, 1000}, {300, 140, 300}, {2000, 33, 300}, {9, 3000, 3000},
};
enum { NFIXED = sizeof fixed / sizeof fixed[0], NRAND = 40 };

/* The share of issued FMAs that are useful rows, times the share of the
 * pipes the tile keeps busy, for rows of mr over m. */
static double busy(int64_t m, int mr, int nv, int acc_min) {
    double rows = (double)m / (double)(cdiv(m, mr) * mr);
    double pipes = (double)(mr * nv) / acc_min;
    return rows * (pipes < 1 ? pipes : 1);
}

static void check_plan(const char *what, const gemm_model *bl, const gemm_desc *d, int threads,
                       const gemm_plan *p) {
    int64_t m = d->m, n = d->n, k = d->k;
    int es = bl->es;
    ck_assert_msg(p->mr >= 1 && p->nv >= 1 && p->nv <= 4, "%s: tile %dx%d", what, p->mr, p->nv);
    ck_assert_int_eq(p->nr, p->nv * bl->lanes);
    ck_assert_int_eq(p->lanes, bl->lanes);
    ck_assert_msg(p->mr * p->nv + p->nv + 1 <= bl->regs, "%s: %dx%d tile", what, p->mr, p->nv);
    /* Tall, wide problems: the tile fills the pipes. Short ones: at least
     * as much useful work as the model's tile would issue on these rows. */
    if (m > 256 && n >= 2 * bl->lanes)
        ck_assert_msg(p->mr * p->nv >= bl->acc_min, "%s: %dx%d tile, %d needed", what, p->mr,
                      p->nv, bl->acc_min);
    else if (p->nv == bl->nv)
        ck_assert_msg(busy(m, p->mr, p->nv, bl->acc_min) >=
                          busy(m, bl->mr, bl->nv, bl->acc_min) - 1e-9,
                      "%s: %d rows keep the pipes less busy than %d", what, p->mr, bl->mr);
    /* Blocks: positive, whole tiles, kc at least 16 or all of k. */
    ck_assert_msg(p->kc >= 1 && (p->kc >= 16 || p->kc >= k), "%s: kc %lld", what, (long long)p->kc);
    ck_assert_int_le(p->kc, 2048);
    ck_assert_msg(p->mc >= p->mr && p->mc % p->mr == 0, "%s: mc %lld", what, (long long)p->mc);
    /* A packed B: the model's row tiles per panel, or more only within
     * the A block that L2 holds beside the panel. */
    int64_t tiles_mc = (int64_t)bl->mc_tiles * p->mr;
    ck_assert_msg(p->direct_b || p->mc <= (tiles_mc > bl->mc_l2 ? tiles_mc : bl->mc_l2),
                  "%s: mc %lld", what, (long long)p->mc);
    ck_assert_msg(p->nc >= p->nr && p->nc % p->nr == 0 && p->nc <= bl->nc_max, "%s: nc %lld", what,
                  (long long)p->nc);
    /* Panels in the caches meant for them (unless both operands are read
     * in place: then nothing is packed). */
    int64_t panel = p->kc * p->nr * es;
    if (!(p->direct_a && p->direct_b)) {
        ck_assert_msg(panel <= (panel_budget(bl) > 16 * p->nr * es ? panel_budget(bl) : 16 * p->nr * es),
                      "%s: B panel %lld bytes", what, (long long)panel);
        ck_assert_msg(p->direct_a || p->mc * p->kc * es + panel <= bl->l2,
                      "%s: A block %lld x %lld beside the B panel", what, (long long)p->mc,
                      (long long)p->kc);
        int64_t block = p->nc * p->kc * es;
        ck_assert_msg(p->direct_b || block <= bl->l2 / 2 || p->nc <= bl->nc_min_wide,
                      "%s: B block %lld bytes", what, (long long)block);
        ck_assert_msg(p->direct_b || block <= bl->l3, "%s: B block %lld bytes", what, (long long)block);
    }
    /* The packing buffer: what the plan packs, with its slack. */
    size_t kcf = (size_t)p->kc;
    size_t want = (p->direct_a ? (size_t)p->mr : (size_t)p->mc) * kcf +
                  (p->direct_b ? (size_t)p->nr : (size_t)p->nc) * kcf + 64 + 2 * GEMM_PACK_SLACK;
    ck_assert_msg(p->scratch == want, "%s: scratch %zu, %zu expected", what, p->scratch, want);
    ck_assert(threads > 1 || p->threads == 1);
    ck_assert(p->threads == 1 || p->threads == 64);
    ck_assert(p->cfg.isa == bl->isa && p->cfg.mr == p->mr && p->cfg.nv == p->nv);
    ck_assert(p->cfg.unroll >= 1 && p->cfg.pf_a >= 0 && p->cfg.pf_c >= 0);
    ck_assert(!p->direct_b || !d->tb);
}

static void plan_all(const cpu_case *c, const gemm_model *bl, int64_t m, int64_t n, int64_t k) {
    gemm_tune none;
    gemm_tune_defaults(&none);
    for (int t = 0; t < 4; t++)
        for (int pad = 0; pad < 2; pad++)
            for (int threads = 1; threads <= 2; threads++) {
                int ta = t & 1, tb = t >> 1;
                int64_t lda = ta ? m : k, ldb = tb ? k : n;
                /* Padded: leading dimensions that alias in L1 (multiples
                 * of 1024 elements) or nearly. */
                if (pad) {
                    lda = (lda + 1023) / 1024 * 1024 + (m % 3) * 8;
                    ldb = (ldb + 1023) / 1024 * 1024;
                }
                gemm_desc d = {.dt = bl->es == 8 ? KG_DT_F64 : KG_DT_F32, .ta = ta, .tb = tb,
                               .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = n,
                               .alpha = 1, .beta = 0};
                gemm_plan p;
                char what[160];
                snprintf(what, sizeof what, "%s %s f%d %lldx%lldx%lld %c%c ld %lld,%lld %dt",
                         c->name, bl->isa == FJ_ISA_AVX512 ? "avx512" : "avx2", bl->es * 8,
                         (long long)m, (long long)n, (long long)k, ta ? 'T' : 'N', tb ? 'T' : 'N',
                         (long long)lda, (long long)ldb, threads);
                fj_status s = gemm_plan_block(&p, &d, bl, threads, &none);
                ck_assert_msg(s == FJ_OK, "%s: %s", what, fj_last_error());
                check_plan(what, bl, &d, threads, &p);
            }
}

START_TEST(plan_invariants) {
    const cpu_case *c = &cpus[_i];
    gemm_model ms[4];
    int nm = models_of(c, ms);
    for (int j = 0; j < nm; j++) {
        for (int i = 0; i < NFIXED; i++) plan_all(c, &ms[j], fixed[i][0], fixed[i][1], fixed[i][2]);
        rng = 0x9e3779b97f4a7c15u + (uint64_t)_i;
        for (int i = 0; i < NRAND; i++) {
            int64_t m = rnd_dim(1, 3000), n = rnd_dim(1, 3000), k = rnd_dim(1, 3000);
            plan_all(c, &ms[j], m, n, k);
        }
    }
}
END_TEST

/* Shared-B row chunks: they cover the rows in order, in whole tiles, at
 * most max of them, largest first, and the first leaves work for the
 * other threads. */
START_TEST(row_chunks) {
    int64_t row0[257];
    const int maxes[] = {256, 8, 2, 1};
    for (int64_t m = 1; m <= 3000; m += m < 40 ? 1 : 37)
        for (int mr = 1; mr <= 16; mr += 5)
            for (int threads = 1; threads <= 8; threads *= 2)
                for (int rpt = 1; rpt <= 32; rpt *= 2)
                    for (int x = 0; x < 4; x++) {
                        int64_t max = maxes[x], n = gemm_row_chunks(m, mr, threads, rpt, row0, max);
                        int64_t tiles = (m + mr - 1) / mr;
                        ck_assert_msg(n >= 1 && n <= max, "m %ld: %ld chunks", (long)m, (long)n);
                        ck_assert_int_eq(row0[0], 0);
                        ck_assert_int_eq(row0[n], m);
                        for (int64_t i = 0; i < n; i++) {
                            ck_assert_int_gt(row0[i + 1], row0[i]);
                            if (i + 1 < n) ck_assert_int_eq(row0[i + 1] % mr, 0);
                            if (i > 0 && n < max)
                                ck_assert_int_le(row0[i + 1] - row0[i], row0[i] - row0[i - 1]);
                        }
                        if (threads > 1 && n < max)
                            ck_assert_int_le(row0[1], (tiles + threads - 1) / threads * mr);
                    }
}
END_TEST

/* The planner is a function of its inputs: the same plan twice, and the
 * runtime's own model gives the runtime's plans. */
START_TEST(plan_pure) {
    kc_cpu_desc desc = desc_of(&cpus[7]);
    gemm_model bl = gemm_model_of(&desc, FJ_ISA_AVX512, 4);
    gemm_tune none;
    gemm_tune_defaults(&none);
    gemm_desc d = {.dt = KG_DT_F32, .m = 1024, .n = 1024, .k = 1024, .lda = 1024, .ldb = 1024,
                   .ldc = 1024, .alpha = 1};
    gemm_plan a, b;
    ck_assert_int_eq(gemm_plan_block(&a, &d, &bl, 2, &none), FJ_OK);
    ck_assert_int_eq(gemm_plan_block(&b, &d, &bl, 2, &none), FJ_OK);
    ck_assert(!memcmp(&a, &b, sizeof a));
    /* Zen 5's AVX-512 f32 plan of 1024^3 (A's rows in one L1 set: eight
     * rows read in place; its B block, 1024 x 1024, more than L2 holds:
     * eight row tiles per B panel, not four). */
    ck_assert(a.mr == 8 && a.nv == 2 && a.kc == 1024 && a.mc == 64 && a.nc == 1024);
    ck_assert(a.direct_a && !a.direct_b && a.threads == 64 && a.split_n);
    /* 512^3: A of one L2, 256-column blocks: the model's four row tiles. */
    gemm_desc h = {.dt = KG_DT_F32, .m = 512, .n = 512, .k = 512, .lda = 512, .ldb = 512,
                   .ldc = 512, .alpha = 1};
    ck_assert_int_eq(gemm_plan_block(&b, &h, &bl, 1, &none), FJ_OK);
    ck_assert(b.mc == (int64_t)bl.mc_tiles * b.mr && b.nc == 256);
    /* Two threads from 8192 cycles of one thread's FMAs: 64^3 splits, 64
     * x 64 x 32 not; with AVX2 (half the flops a cycle) 64 x 64 x 32 too,
     * 48^3 not. */
    gemm_model b2 = gemm_model_of(&desc, FJ_ISA_AVX2, 4);
    static const struct { int isa, m, n, k, threads; } mt[] = {
        {FJ_ISA_AVX512, 64, 64, 64, 64}, {FJ_ISA_AVX512, 64, 64, 32, 1},
        {FJ_ISA_AVX2, 64, 64, 32, 64},   {FJ_ISA_AVX2, 48, 48, 48, 1},
    };
    /* AVX2, short k and wide C: no C prefetch, on two threads and on one;
     * a longer k keeps the model's. */
    gemm_desc w = {.dt = KG_DT_F32, .m = 1024, .n = 1024, .k = 64, .lda = 64, .ldb = 1024,
                   .ldc = 1024, .alpha = 1};
    ck_assert_int_eq(gemm_plan_block(&b, &w, &b2, 2, &none), FJ_OK);
    ck_assert(b.threads == 64 && b.cfg.pf_c == 0);
    ck_assert_int_eq(gemm_plan_block(&b, &w, &b2, 1, &none), FJ_OK);
    ck_assert(b.threads == 1 && b.cfg.pf_c == 0);
    ck_assert_int_ne(b2.pf_c, 0);
    w.k = w.lda = 512;
    ck_assert_int_eq(gemm_plan_block(&b, &w, &b2, 1, &none), FJ_OK);
    ck_assert_int_eq(b.cfg.pf_c, b2.pf_c);
    for (size_t i = 0; i < sizeof mt / sizeof mt[0]; i++) {
        gemm_desc e = {.dt = KG_DT_F32, .m = mt[i].m, .n = mt[i].n, .k = mt[i].k,
                       .lda = mt[i].k, .ldb = mt[i].n, .ldc = mt[i].n, .alpha = 1};
        const gemm_model *mm = mt[i].isa == FJ_ISA_AVX2 ? &b2 : &bl;
        ck_assert_int_eq(gemm_plan_block(&b, &e, mm, 2, &none), FJ_OK);
        ck_assert_int_eq(b.threads, mt[i].threads);
        ck_assert_int_eq(gemm_plan_block(&b, &e, mm, 1, &none), FJ_OK);
        ck_assert_int_eq(b.threads, 1);
    }
    /* A model for the other element size is refused. */
    d.dt = KG_DT_F64;
    ck_assert_int_eq(gemm_plan_block(&a, &d, &bl, 1, &none), FJ_ERR_INVALID_ARG);
}
END_TEST

/* Every tile width the model allows on this CPU generates and computes:
 * with the nv knob the planner takes the model's tallest tile for it
 * (packed and in place, m tall enough to keep it). */
START_TEST(model_tiles_run) {
    seed(36);
    for (int isa = FJ_ISA_AVX2; isa <= FJ_ISA_AVX512; isa++) {
        fj_runtime *rt = fjt_runtime((fj_isa)isa, 1);
        if (!rt) continue;
        for (int nv = 1; nv <= 4; nv++)
            for (int packed = 0; packed < 2; packed++) {
                char tune[64];
                snprintf(tune, sizeof tune, "nv=%d%s", nv, packed ? ",da=0,db=0" : "");
                int lanes = isa == FJ_ISA_AVX512 ? 16 : 8;
                gcase t = {.m = 300, .n = 2 * nv * lanes + 5, .k = 70, .alpha = 1.0f, .beta = 0.5f,
                           .tune = tune};
                t.lda = t.k;
                t.ldb = t.n;
                t.ldc = t.n;
                run_case(rt, NULL, &t);
            }
        fj_runtime_destroy(rt);
    }
}
END_TEST

/* ---- cpuid decoding on recorded leaves ---- */

#define R(a_, b_, c_, d_) {0x##a_, 0x##b_, 0x##c_, 0x##d_}

/* An AMD EPYC (Zen 5, family 0x1a model 2) under a hypervisor. */
static kc_cpuid_raw zen5_raw(void) {
    kc_cpuid_raw r = {
        .l0 = R(0000001c, 68747541, 444d4163, 69746e65),
        .l1 = R(00b00f21, 01020800, fffa3203, 178bfbff),
        .l7 = R(00000001, f1bf07ab, 00405fc6, 00000110),
        .e0 = R(80000021, 68747541, 444d4163, 69746e65),
        .e1 = R(00b00f21, 40000000, 004003f3, 2fd3fbff),
        .brand = {R(20444d41, 43595045, 00000000, 00000000)},
        .e5 = R(ff60ff40, ff60ff40, 300c0140, 20080140),
        .e6 = R(40802040, 60804040, 04008140, 0c009140),
        .e1d = {R(00000121, 02c0003f, 0000003f, 00000000), R(00000122, 01c0003f, 0000003f, 00000000),
                R(00000143, 03c0003f, 000003ff, 00000002), R(00004163, 03c0003f, 00007fff, 00000001)},
    };
    return r;
}

static void assert_cache(const kc_cache_info *c, int64_t size, int ways, int line, int sets, int sharing) {
    ck_assert_msg(c->size == size && c->ways == ways && c->line == line && c->sets == sets &&
                      c->sharing == sharing,
                  "cache %lld %d-way %d B %d sets sharing %d", (long long)c->size, c->ways, c->line,
                  c->sets, c->sharing);
}

START_TEST(decode_zen5) {
    kc_cpuid_raw r = zen5_raw();
    kc_cpu_desc d;
    kc_cpu_decode(&r, &d);
    ck_assert_str_eq(d.vendor, "AuthenticAMD");
    ck_assert_str_eq(d.brand, "AMD EPYC");
    ck_assert(d.family == 0x1a && d.model == 2 && d.stepping == 1 && d.avx512 && d.vec_bits == 512);
    ck_assert_str_eq(d.cache_src, "leaf8000001d");
    assert_cache(&d.l1d, 48 << 10, 12, 64, 64, 1);
    assert_cache(&d.l2, 1 << 20, 16, 64, 1024, 1);
    assert_cache(&d.l3, 32 << 20, 16, 64, 32768, 2);
    ck_assert_str_eq(d.uarch, "zen5");
    ck_assert(d.fma256 == 2 && d.fma512 == 2 && d.fma_lat == 4);
    /* Without TOPOEXT's leaf: the legacy leaves (L3 in 512 KiB units, its
     * ways "see 0x8000001D": unknown, completed to 8). */
    memset(r.e1d, 0, sizeof r.e1d);
    kc_cpu_decode(&r, &d);
    ck_assert_str_eq(d.cache_src, "leaf80000005");
    assert_cache(&d.l1d, 48 << 10, 12, 64, 64, 0);
    assert_cache(&d.l2, 1 << 20, 16, 64, 1024, 0);
    ck_assert_int_eq(d.l3.size, (int64_t)384 << 20);
    ck_assert_int_eq(d.l3.ways, 8);
}
END_TEST

/* A Pentium of the Kaby Lake generation (family 6 model 0x9e; no AVX, no
 * FMA), from a published cpuid dump: leaf 4's deterministic caches. */
START_TEST(decode_kaby_lake) {
    kc_cpuid_raw r = {
        .l0 = R(00000016, 756e6547, 6c65746e, 49656e69),
        .l1 = R(000906e9, 00100800, 4ffaebbf, bfebfbff),
        .l7 = R(00000000, 02946687, 00000000, 00000000),
        .l4 = {R(1c004121, 01c0003f, 0000003f, 00000000), R(1c004122, 01c0003f, 0000003f, 00000000),
               R(1c004143, 00c0003f, 000003ff, 00000000), R(1c03c163, 02c0003f, 00000fff, 00000006)},
    };
    kc_cpu_desc d;
    kc_cpu_decode(&r, &d);
    ck_assert_str_eq(d.vendor, "GenuineIntel");
    ck_assert_str_eq(d.brand, "");
    ck_assert(d.family == 6 && d.model == 0x9e && d.stepping == 9 && !d.avx512 && d.vec_bits == 0);
    ck_assert_str_eq(d.cache_src, "leaf4");
    assert_cache(&d.l1d, 32 << 10, 8, 64, 64, 2);
    assert_cache(&d.l2, 256 << 10, 4, 64, 1024, 2);
    assert_cache(&d.l3, 3 << 20, 12, 64, 4096, 16);
    ck_assert_str_eq(d.uarch, "skylake");
    ck_assert(d.fma256 == 0 && d.fma512 == 0 && d.fma_lat == 4);
}
END_TEST

/* A brand string padded with spaces; no cache leaves at all. */
START_TEST(decode_bare) {
    kc_cpuid_raw r = {
        .l0 = R(00000001, 756e6547, 6c65746e, 49656e69),
        .l1 = R(000306c3, 00000000, 00000000, 00000000),
        .e0 = R(80000004, 0, 0, 0),
        .brand = {R(20202020, 65746e49, 6f43206c, 20206572)},
    };
    kc_cpu_desc d;
    kc_cpu_decode(&r, &d);
    ck_assert_str_eq(d.brand, "Intel Core");
    ck_assert(d.family == 6 && d.model == 0x3c && !d.avx512 && d.vec_bits == 0);
    /* FMA3 (leaf 1 ecx bit 12): 256-bit vectors. */
    r.l1.c = 1u << 12;
    kc_cpu_decode(&r, &d);
    ck_assert_int_eq(d.vec_bits, 256);
    ck_assert_str_eq(d.cache_src, "");
    ck_assert_int_eq(d.l1d.size, 0);
    ck_assert_str_eq(d.uarch, "haswell");
    ck_assert_int_eq(d.fma_lat, 5);
}
END_TEST

/* This CPU: whatever cpuid says, a usable description. */
START_TEST(describe_host) {
    kc_cpu_desc d;
    kc_cpu_describe(&d);
    ck_assert(d.l1d.size > 0 && d.l1d.ways > 0 && d.l1d.line > 0 && d.l1d.sets > 0);
    ck_assert(d.l2.size > 0 && d.l2.sets > 0);
    ck_assert(d.fma256 > 0 && d.fma_lat > 0 && d.uarch);
    char buf[512];
    gemm_model_cpu_str(&d, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "L1d "));
    gemm_model m = gemm_model_of(&d, FJ_ISA_AVX2, 4);
    check_model(&(cpu_case){.name = "host"}, &m);
    gemm_model_str(&m, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "gemm blocking avx2 f32: tile "));
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("gemm_model");
    TCase *tc = tcase_create("gemm_model");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, fma_table, 0, NCPU);
    tcase_add_loop_test(tc, model_invariants, 0, NCPU);
    tcase_add_test(tc, model_zen5_figures);
    tcase_add_loop_test(tc, plan_invariants, 0, NCPU);
    tcase_add_test(tc, plan_pure);
    tcase_add_test(tc, row_chunks);
    tcase_add_test(tc, model_tiles_run);
    tcase_add_test(tc, decode_zen5);
    tcase_add_test(tc, decode_kaby_lake);
    tcase_add_test(tc, decode_bare);
    tcase_add_test(tc, describe_host);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
