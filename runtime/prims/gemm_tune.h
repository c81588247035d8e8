/* gemm_tune.h: the GEMM planner's blocking knobs, over the CPU's blocking
 * model (gemm_plan.c reads them; the FRAMEJIT_GEMM_TUNE parser, gemm_tune.c,
 * may replace them). */
#ifndef FJ_GEMM_TUNE_H
#define FJ_GEMM_TUNE_H

#include "base/base.h"

typedef struct gemm_tune {
    long l1, l2;          /* data cache bytes per core (0: the CPU's) */
    int l1_ways;          /* L1 data cache associativity (0: the CPU's) */
    int mr512, nv512, mr2, nv2, unroll, pf_a, pf_b, pf_c; /* nv, pf_a, pf_c: -1 the model's */
    long kc, mc, nc;      /* 0: from the cache sizes */
    int direct;           /* -1 auto, 0 never, 1 always (when possible) */
    int da, db;           /* per operand: -1 auto, 0 pack, 1 in place */
    long mt_flops;        /* problems smaller than this stay on one thread */
    int a_reg;            /* AVX-512: broadcast A into a register (-1 auto) */
    int b_copy;           /* kernels pack row-major B themselves
                             (> 0, the default) or a separate pass does (0) */
    int bpf_rows;         /* ... prefetching this many rows of B ahead (-1: the model's) */
    long shortk;          /* k up to which wide problems take the 6 x 64 tile */
    long shared_min;      /* m*n*k from which threads share one packed B */
    long share_k;         /* ... and k below which they do */
    int rpt;              /* shared B: row chunks per thread */
    int split_n;          /* threads split n, not m (-1 auto, 0 never, 1 when possible) */
} gemm_tune;

/* The knobs every plan uses unless replaced: none set, the blocking is the
 * runtime's model's (gemm_plan.c). */
FJ_INTERNAL void gemm_tune_defaults(gemm_tune *t);
/* Replaces the knobs for plans made afterwards (NULL: the defaults); plans
 * remembered before are stale. Not thread-safe against concurrent GEMM
 * calls (gemm_plan.c). */
FJ_INTERNAL void gemm_tune_set(const gemm_tune *t);

/* Experiment-only, in gemm_tune.c: applies a knob list such as
 * "kc=256,mc=280,da=0" to *t; unknown keys end the parse. The library has
 * it (and reads FRAMEJIT_GEMM_TUNE at the first GEMM) only when built with
 * meson -Dgemm_tune=true, which defines FJ_GEMM_TUNE; the GEMM tests
 * compile gemm_tune.c themselves for gemm_test_tune (gemm_int.h). */
FJ_INTERNAL void gemm_tune_parse(gemm_tune *t, const char *spec);

#endif
