/* gemm_model.h: GEMM blocking derived from the CPU description, an
 * analytical model after BLIS's (Low et al., "Analytical Modeling Is
 * Enough for High-Performance BLIS", ACM TOMS 2016). Pure functions. */
#ifndef FJ_GEMM_MODEL_H
#define FJ_GEMM_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "framejit.h"
#include "kernels/x64/cpu_desc.h"

/* The blocking parameters for one ISA and element size on one CPU. The
 * planner (gemm_plan.c) starts from these; its shape rules pick among the
 * tiles gemm_model_mr allows and size kc and nc for the tile it picks. */
typedef struct gemm_model {
    int isa, es;            /* FJ_ISA_AVX2 / FJ_ISA_AVX512; element bytes */
    int lanes, regs;        /* elements per vector; vector registers */
    int fma_pipes, fma_lat; /* FMAs per cycle at this width; latency in cycles */
    int acc_min;            /* accumulators that keep the pipes busy: lat x pipes */
    int nv, mr;             /* the default tile: mr rows x nv vectors */
    int mr_cap;             /* tallest tile the generator takes */
    int mr_nv[5];           /* gemm_model_mr for 1-4 vectors, worked out once */
    /* Caches, bytes, and the L1's geometry. */
    int64_t l1, l2, l3, l3_share;
    int l1_ways, l1_sets, line, l2_ways, l2_sets; /* l1_sets, line: powers of two */
    int line_shift;         /* log2(line) */
    int per_set;            /* in-place A rows one L1 set keeps beside the B panel */
    int l2_stream;          /* the B panel streams from L2 (else from L1) */
    int64_t kc_max;         /* k steps past which C's traffic is negligible */
    int64_t kc, kc_l1;      /* the default tile's kc; the L1-resident (BLIS) kc */
    int mc_tiles;           /* row tiles per B panel: mc = mc_tiles x mr */
    int64_t mc, mc_l2;      /* the default tile's mc; the A block L2 holds (BLIS) */
    int64_t nc_bytes;       /* the B block's budget (kc x nc elements) */
    int64_t nc_min, nc_min_wide, nc_max;
    int64_t nc;             /* the default tile's nc at its kc */
    int unroll, unroll_short; /* k steps per loop iteration; short k, small tile */
    int pf_a;               /* prefetch distance ahead of packed A, bytes */
    int pf_c;               /* C prefetch (kg_gemm_cfg.pf_c) */
    int bpf_rows;           /* B copy: prefetch this many of B's rows ahead */
} gemm_model;

static inline int64_t gm_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t gm_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* The model for isa (FJ_ISA_AVX2 or FJ_ISA_AVX512) and element size es
 * (4 or 8) on the CPU cpu describes. */
FJ_INTERNAL gemm_model gemm_model_of(const kc_cpu_desc *cpu, int isa, int es);
/* The tallest tile of nv vectors the register file holds (accumulators, nv
 * B vectors and A's broadcast), at most mr_cap rows. */
static inline int gemm_model_mr(const gemm_model *m, int nv) {
    if (nv >= 1 && nv <= 4 && m->mr_nv[nv]) return m->mr_nv[nv];
    /* The k loop holds mr*nv accumulators, nv B vectors and A's broadcast;
     * the epilogue the accumulators, the B vectors' registers (alpha and
     * beta in two of them) and on AVX2 a mask and a temporary. */
    int epi = (nv > 2 ? nv : 2) + (m->isa == FJ_ISA_AVX512 ? 0 : 2);
    int loop = (m->regs - nv - 1) / nv, tail = (m->regs - epi) / nv;
    int mr = loop < tail ? loop : tail;
    return mr > m->mr_cap ? m->mr_cap : mr < 1 ? 1 : mr;
}

/* The cycles, in FMA-pipe slots per k step, that m rows take in tiles of
 * mr x nv: the row tiles times the larger of the tile's accumulators and
 * latency x pipes (fewer accumulators wait on their dependency chains). */
static inline int64_t gemm_model_rows_cost(const gemm_model *m, int64_t rows, int mr, int nv) {
    int64_t acc = (int64_t)mr * nv;
    return (rows + mr - 1) / mr * (acc > m->acc_min ? acc : m->acc_min);
}

/* 1 if tiles of r rows take m rows in fewer cycles than tiles of mr rows,
 * or in as many with fewer rows computed past m. */
static inline int gemm_model_rows_better(const gemm_model *m, int64_t rows, int r, int mr, int nv) {
    /* (Two divisions: the planner asks this for each height it tries.) */
    int64_t tr = (rows + r - 1) / r, tm = (rows + mr - 1) / mr;
    int64_t ar = gm_max((int64_t)r * nv, m->acc_min), am = gm_max((int64_t)mr * nv, m->acc_min);
    return tr * ar < tm * am || (tr * ar == tm * am && tr * r < tm * mr);
}

/* kc for a tile nr wide (before k is split into balanced blocks). */
static inline int64_t gemm_model_kc(const gemm_model *m, int nr) {
    /* framejit's kernels stream the B panel from beyond L1: with AVX-512
     * they copy and prefetch it, and it takes an eighth of L2 (the A block,
     * C's rows and the next panel take the rest); with AVX2 it takes 4/3
     * of L1, streaming partly from L2. Both measured faster than the
     * L1-resident panel (kc_l1). */
    int64_t budget = m->l2_stream ? m->l2 / 8 : m->l1 * 4 / 3;
    return gm_min(m->kc_max, budget / ((int64_t)nr * m->es));
}

/* nc for kc and nr (before n is split into balanced blocks); wide: A is
 * read in place and is several L2s large (it is read again per column block). */
static inline int64_t gemm_model_nc(const gemm_model *m, int64_t kc, int nr, int wide) {
    /* The B block (kc x nc) in its budget; at least nc_min columns (A is
     * packed again per column block), nc_min_wide when A is read again
     * from memory per column block. */
    int64_t nc = gm_max(wide ? m->nc_min_wide : m->nc_min, m->nc_bytes / (gm_max(1, kc) * m->es));
    return gm_max(nr, nc / nr * nr);
}

/* How many of the L1's sets the rows of a matrix of leading dimension ld
 * (elements of es bytes) fall into. */
static inline int64_t gemm_model_spread(const gemm_model *m, int64_t ld, int es) {
    /* Rows l lines apart (mod the sets) visit sets / gcd(sets, l) sets; the
     * sets and the line are powers of two, so the gcd is l's lowest set bit
     * (shifts and masks: the planner asks this several times per plan). */
    int64_t bytes = ld * es, sets = m->l1_sets;
    if (bytes & (m->line - 1)) return sets;
    int64_t l = (bytes >> m->line_shift) & (sets - 1);
    return l ? sets >> __builtin_ctzll((unsigned long long)l) : 1;
}

/* Model lines for FRAMEJIT_VERBOSE: the CPU, and the blocking of the
 * default tile, into buf. */
FJ_INTERNAL void gemm_model_cpu_str(const kc_cpu_desc *cpu, char *buf, size_t n);
FJ_INTERNAL void gemm_model_str(const gemm_model *m, char *buf, size_t n);

#endif
