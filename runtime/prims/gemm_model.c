/* gemm_model.c: GEMM blocking derived from the CPU description (BLIS's
 * analytical model, with framejit's measured deviations from it: see
 * docs/performance.md, "GEMM blocking from the CPU"). */
#include "runtime/prims/gemm_model.h"

#include <stdio.h>

/* BLIS's kc: the B micro-panel (kc x nr) stays in L1 while A's
 * micro-panels (mr x kc) stream through it: of the L1's ways, one is left
 * to the streams and the rest split between B and A as nr : mr. */
static int64_t kc_l1(const gemm_model *m, int mr, int nr) {
    int64_t way = (int64_t)m->l1_sets * m->line;
    int64_t b_ways = (int64_t)(m->l1_ways - 1) * nr / (nr + mr);
    return gm_max(1, b_ways) * way / ((int64_t)nr * m->es);
}

/* How far ahead of the k loop packed A is prefetched, in cycles: long
 * enough to cover a line's trip from L3 with the next lines in flight
 * (the distance measured best on Zen 5, 16 lines at 4 bytes a cycle:
 * docs/performance.md). */
enum { PF_A_CYCLES = 256 };

gemm_model gemm_model_of(const kc_cpu_desc *cpu, int isa, int es) {
    gemm_model m = {.isa = isa, .es = es};
    int avx512 = isa == FJ_ISA_AVX512;
    m.lanes = (avx512 ? 64 : 32) / es;
    m.regs = avx512 ? 32 : 16;
    m.fma_pipes = avx512 ? cpu->fma512 : cpu->fma256;
    if (m.fma_pipes < 1) m.fma_pipes = 1;
    m.fma_lat = cpu->fma_lat > 0 ? cpu->fma_lat : 4;
    m.acc_min = m.fma_lat * m.fma_pipes;
    /* In-place row-major A takes a register per row (and per 7 rows an
     * index): the generator takes at most 14 rows. */
    m.mr_cap = 14;
    for (int nv = 1; nv <= 4; nv++) m.mr_nv[nv] = gemm_model_mr(&m, nv);
    m.l1 = cpu->l1d.size > 0 ? cpu->l1d.size : 32 << 10;
    m.l2 = cpu->l2.size > 0 ? cpu->l2.size : 1 << 20;
    m.l3 = cpu->l3.size > 0 ? cpu->l3.size : m.l2;
    m.line = cpu->l1d.line > 0 ? cpu->l1d.line : 64;
    m.l1_ways = cpu->l1d.ways > 0 ? cpu->l1d.ways : 8;
    m.l1_sets = cpu->l1d.sets > 0 ? cpu->l1d.sets : (int)(m.l1 / (m.l1_ways * m.line));
    if (m.l1_sets < 1) m.l1_sets = 1;
    /* Set indexing is by address bits: both are powers of two (rounded
     * down should a description say otherwise). */
    while (m.line & (m.line - 1)) m.line &= m.line - 1;
    while (m.l1_sets & (m.l1_sets - 1)) m.l1_sets &= m.l1_sets - 1;
    m.line_shift = __builtin_ctz((unsigned)m.line);
    m.l2_ways = cpu->l2.ways > 0 ? cpu->l2.ways : 16;
    m.l2_sets = cpu->l2.sets > 0 ? cpu->l2.sets : (int)(m.l2 / ((int64_t)m.l2_ways * m.line));
    if (m.l2_sets < 1) m.l2_sets = 1;
    /* The L3 a core may count on: the cache over the cores sharing it
     * (logical processors sharing L3 over those sharing L1). */
    int per_core = cpu->l1d.sharing > 0 ? cpu->l1d.sharing : 1;
    int cores = cpu->l3.sharing > per_core ? cpu->l3.sharing / per_core : 1;
    m.l3_share = m.l3 / cores;

    /* The tile: two B vectors wide, as tall as the registers allow (on
     * AVX-512 the most accumulators of any width; on AVX2 as many as one or
     * three vectors, with loads of B and broadcasts of A balanced). Wider
     * while the accumulators cannot cover the FMA latency x pipes. */
    m.nv = 2;
    m.mr = gemm_model_mr(&m, m.nv);
    while (m.mr * m.nv < m.acc_min && m.nv < 4 && gemm_model_mr(&m, m.nv + 1) * (m.nv + 1) > m.mr * m.nv) {
        m.nv++;
        m.mr = gemm_model_mr(&m, m.nv);
    }
    int nr = m.nv * m.lanes;
    /* In-place A rows per L1 set: the B panel's stream, C's lines and the
     * prefetched lines take four ways of each set. */
    m.per_set = m.l1_ways > 5 ? m.l1_ways - 4 : 1;
    /* kc_max: C's loads and stores per k block (2 mr nr) fall under 2% of
     * the A and B elements read ((mr + nr) kc): a deeper panel only takes
     * cache room. The power of two at or above 100 mr nr / (mr + nr). */
    int64_t deep = 100 * (int64_t)m.mr * nr / (m.mr + nr);
    for (m.kc_max = 16; m.kc_max < deep; m.kc_max *= 2) {}
    m.l2_stream = avx512;
    m.kc_l1 = kc_l1(&m, m.mr, nr);
    m.kc = gm_max(16, gemm_model_kc(&m, nr) & ~(int64_t)7);
    /* mc: four row tiles per B panel (measured faster than BLIS's A block
     * that fills the L2 ways the B panel leaves, mc_l2, which bounds it). */
    m.mc_tiles = 4;
    int64_t l2_way = (int64_t)m.l2_sets * m.line;
    int64_t b_ways = ((int64_t)m.kc * nr * es + l2_way - 1) / l2_way;
    int64_t a_ways = gm_max(1, m.l2_ways - 1 - b_ways);
    m.mc_l2 = gm_max(m.mr, a_ways * l2_way / (m.kc * es) / m.mr * m.mr);
    m.mc = gm_min((int64_t)m.mc_tiles * m.mr, m.mc_l2);
    /* nc: the B block in half of L2 (BLIS keeps it in L3; from L3 each row
     * block's sweep is more than the prefetchers hide), at least 256
     * columns, 1024 for an A read again per column block, at most 8192
     * (bounds the packing buffer). */
    m.nc_bytes = m.l2 / 2;
    m.nc_min = 256;
    m.nc_min_wide = 1024;
    m.nc_max = 8192;
    m.nc = gm_min(m.nc_max, gemm_model_nc(&m, m.kc, nr, 0));
    /* The k loop: 4 steps per iteration, 8 for a small tile (16
     * accumulators or fewer) on a short k, where loop overhead shows. */
    m.unroll = 4;
    m.unroll_short = 8;
    /* Packed A is prefetched a fixed time ahead of its use: the tile takes
     * mr elements of A per k step and a k step takes mr nv / pipes cycles
     * of FMAs, so A streams at es pipes / nv bytes a cycle; PF_A_CYCLES of
     * that, in whole lines (8 to 64 of them). C's tile is prefetched at
     * each tile's start (mode 2); the copying tile reads B's rows 8 ahead. */
    int64_t pf = (int64_t)PF_A_CYCLES * es * m.fma_pipes / m.nv;
    m.pf_a = (int)gm_min(64 * m.line, gm_max(8 * m.line, pf / m.line * m.line));
    m.pf_c = 2;
    m.bpf_rows = 8;
    return m;
}

static void cache_str(const char *name, const kc_cache_info *c, char *buf, size_t n) {
    if (c->size <= 0) {
        snprintf(buf, n, "%s none", name);
        return;
    }
    snprintf(buf, n, "%s %lld KiB %d-way %d B lines %d sets shared by %d", name,
             (long long)(c->size >> 10), c->ways, c->line, c->sets, c->sharing);
}

void gemm_model_cpu_str(const kc_cpu_desc *cpu, char *buf, size_t n) {
    char l1[96], l2[96], l3[96];
    cache_str("L1d", &cpu->l1d, l1, sizeof l1);
    cache_str("L2", &cpu->l2, l2, sizeof l2);
    cache_str("L3", &cpu->l3, l3, sizeof l3);
    snprintf(buf, n,
             "cpu: %s family 0x%x model 0x%x stepping %d (%s) \"%s\"; %s; %s; %s (from %s); "
             "vectors %d-bit, FMA/cycle 256-bit %d, 512-bit %d, latency %d",
             cpu->vendor[0] ? cpu->vendor : "unknown", cpu->family, cpu->model, cpu->stepping,
             cpu->uarch ? cpu->uarch : "unknown", cpu->brand, l1, l2, l3,
             cpu->cache_src ? cpu->cache_src : "?", cpu->vec_bits, cpu->fma256, cpu->fma512,
             cpu->fma_lat);
}

void gemm_model_str(const gemm_model *m, char *buf, size_t n) {
    snprintf(buf, n,
             "gemm blocking %s %s: tile %dx%d (%d accumulators, %d cover latency x pipes), "
             "kc %lld (L1-resident %lld, max %lld, B panel from %s), mc %lld (L2 holds %lld), "
             "nc %lld, unroll %d/%d, prefetch A %d B ahead, C mode %d, B rows %d ahead, "
             "A rows per L1 set %d",
             m->isa == FJ_ISA_AVX512 ? "avx512" : "avx2", m->es == 8 ? "f64" : "f32", m->mr,
             m->nv * m->lanes, m->mr * m->nv, m->acc_min, (long long)m->kc, (long long)m->kc_l1,
             (long long)m->kc_max, m->l2_stream ? "L2" : "L1/L2", (long long)m->mc,
             (long long)m->mc_l2, (long long)m->nc, m->unroll, m->unroll_short, m->pf_a, m->pf_c,
             m->bpf_rows, m->per_set);
}
