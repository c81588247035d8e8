/* gemm_model.h: GEMM blocking derived from the CPU description, an
 * analytical model after BLIS's (Low et al., "Analytical Modeling Is
 * Enough for High-Performance BLIS", ACM TOMS 2016). Pure functions. */
#ifndef FJ_GEMM_MODEL_H
#define FJ_GEMM_MODEL_H

#include <stdint.h>
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
    /* Caches, bytes, and the L1's geometry. */
    int64_t l1, l2, l3, l3_share;
    int l1_ways, l1_sets, line, l2_ways, l2_sets;
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

/* The model for isa (FJ_ISA_AVX2 or FJ_ISA_AVX512) and element size es
 * (4 or 8) on the CPU cpu describes. */
FJ_INTERNAL gemm_model gemm_model_of(const kc_cpu_desc *cpu, int isa, int es);
/* The tallest tile of nv vectors the register file holds (accumulators, nv
 * B vectors and A's broadcast), at most mr_cap rows. */
FJ_INTERNAL int gemm_model_mr(const gemm_model *m, int nv);
/* The cycles, in FMA-pipe slots per k step, that m rows take in tiles of
 * mr x nv: the row tiles times the larger of the tile's accumulators and
 * latency x pipes (fewer accumulators wait on their dependency chains). */
FJ_INTERNAL int64_t gemm_model_rows_cost(const gemm_model *m, int64_t rows, int mr, int nv);
/* 1 if tiles of r rows take m rows in fewer cycles than tiles of mr rows,
 * or in as many with fewer rows computed past m. */
FJ_INTERNAL int gemm_model_rows_better(const gemm_model *m, int64_t rows, int r, int mr, int nv);
/* kc for an mr x nr tile (before k is split into balanced blocks). */
FJ_INTERNAL int64_t gemm_model_kc(const gemm_model *m, int mr, int nr);
/* nc for kc and nr (before n is split into balanced blocks); wide: A is
 * read in place and is several L2s large (it is read again per column block). */
FJ_INTERNAL int64_t gemm_model_nc(const gemm_model *m, int64_t kc, int nr, int wide);
/* How many of the L1's sets the rows of a matrix of leading dimension ld
 * (elements of es bytes) fall into. */
FJ_INTERNAL int64_t gemm_model_spread(const gemm_model *m, int64_t ld, int es);
/* Model lines for FRAMEJIT_VERBOSE: the CPU, and the blocking of the
 * default tile, into buf. */
FJ_INTERNAL void gemm_model_cpu_str(const kc_cpu_desc *cpu, char *buf, size_t n);
FJ_INTERNAL void gemm_model_str(const gemm_model *m, char *buf, size_t n);

#endif
