/* gemm_int.h: the GEMM driver's internals, shared by runtime/gemm*.c. */
#ifndef FJ_GEMM_INT_H
#define FJ_GEMM_INT_H

#include <stdint.h>
#include "kernels/gen/gemm_gen.h"
#include "kernels/gen/gemv_gen.h"
#include "base/base.h"

/* One GEMM problem, planned: its blocking and the kernel that runs it.
 * Everything here depends on the shape only (never on the thread count),
 * so results are bitwise the same for any number of threads. */
typedef struct gemm_plan {
    fj_runtime *rt;
    int dt, es;                  /* KG_DT_* of A, B, C and its size in bytes */
    int ta, tb;                  /* op(A) = A^T, op(B) = B^T */
    int64_t m, n, k, lda, ldb, ldc;
    double alpha, beta;          /* (f32 plans: exactly the float values) */
    double act_a, act_b;         /* f64 handles: the post-op's alpha and beta */
    int has_post;                /* bias and/or activation in the last k block */
    int lanes, mr, nv, nr;       /* register tile: mr x nr = nv*lanes */
    int direct_a, direct_b;      /* read A / B in place instead of packing */
    int whole;                   /* one k block, both in place, whole tiles and
                                    panels: one kernel call per B panel */
    int64_t kc, mc, nc;          /* cache blocks */
    int64_t b_src_pf;            /* b_copy: prefetch distance in B's rows, bytes */
    int threads;                 /* how many threads the problem is worth */
    unsigned par_flags;          /* rt_parallel's flags (RT_PAR_WAKE) */
    int share_b;                 /* rows split over threads: pack B once, shared */
    int rpt;                     /* ... in this many row chunks per thread */
    int split_n;                 /* threads take column panels rather than rows */
    size_t scratch;              /* elements of packing buffer per running chunk */
    kg_gemm_cfg cfg;
    fj_kernel *kern;             /* a reference, dropped by gemm_plan_release */
    kg_gemm_args whole_args;     /* whole plans: the kernel's arguments but the
                                    pointers, for this alpha and beta
                                    (gemm_plan_set_ab) */
    uintptr_t span_a, span_b, span_c; /* bytes from a, b and c to the end of
                                    what a call reads (A, B: none if k is 0)
                                    or writes, for the aliasing check */
} gemm_plan;

/* One GEMM call as the planner sees it (dimensions already validated):
 * everything a plan depends on, and the alpha and beta the call scales
 * by (they choose the kernel's C updates only). */
typedef struct gemm_desc {
    int dt;                      /* KG_DT_* of A, B, C */
    int ta, tb;                  /* op(A) = A^T, op(B) = B^T */
    int64_t m, n, k, lda, ldb, ldc;
    double alpha, beta;
    int has_bias;                /* a bias row added in the last k block */
    int act;                     /* an fj_eltwise_op applied after it, or 0 */
    float act_alpha, act_beta;   /* the activation's parameters (with act) */
} gemm_desc;

struct gemm_model;
struct gemm_tune;
/* The blocking of d (all of p but the runtime and the kernel): a pure
 * function of the shape, the CPU's blocking model m (for the runtime's ISA
 * and d's element size: gemm_model.h), the runtime's thread count and the
 * knobs (gemm_tune.h; gemm_tune_defaults sets none). */
FJ_INTERNAL fj_status gemm_plan_block(gemm_plan *p, const gemm_desc *d, const struct gemm_model *m,
                                      int threads, const struct gemm_tune *knobs);
/* Fills p for the call d describes and acquires its kernel. */
FJ_INTERNAL fj_status gemm_plan_init(fj_runtime *rt, gemm_plan *p, const gemm_desc *d);
/* The same plan for one call on this thread: *out is the thread's memo
 * (repeated shapes skip the planning, and usually the kernel table),
 * valid until the thread plans again. *lent is NULL when the memo holds
 * the kernel, else a reference for this call, given back with
 * gemm_plan_unborrow after it. */
FJ_INTERNAL fj_status gemm_plan_borrow(fj_runtime *rt, const gemm_desc *d, const gemm_plan **out,
                                       fj_kernel **lent);
FJ_INTERNAL void gemm_plan_unborrow(fj_kernel *lent);
/* A call that repeats this thread's memo (no bias, no activation) and
 * that its kernel serves: the memo's plan with this alpha and beta, valid
 * as gemm_plan_borrow's and with no kernel reference to give back; else
 * NULL. A memo plan's inputs were validated before it was made. */
FJ_INTERNAL const gemm_plan *gemm_plan_repeat(fj_runtime *rt, int dt, int ta, int tb, int64_t m,
                                              int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                              int64_t ldc, double alpha, double beta);
FJ_INTERNAL void gemm_plan_release(gemm_plan *p);
/* The C updates (KG_STORES bits) the driver asks of p's kernel for this
 * alpha and beta (gemm.c). */
FJ_INTERNAL int gemm_plan_stores(const gemm_plan *p, double alpha, double beta);
/* Gives p this alpha and beta (and a whole plan the kernel arguments that
 * go with them: a small GEMM's call copies them rather than working them
 * out, gemm.c). */
FJ_INTERNAL void gemm_plan_set_ab(gemm_plan *p, double alpha, double beta);

/* Test hook (gemm_tune.c, which the GEMM tests compile): replaces the
 * blocking knobs (as FRAMEJIT_GEMM_TUNE would, e.g. "da=0,db=0,kc=16") for
 * plans made afterwards; NULL = defaults. Not thread-safe against
 * concurrent GEMM calls. */
FJ_INTERNAL void gemm_test_tune(const char *spec);
/* Threads sharing one packed B take its rows in chunks, largest first:
 * fills row0[0..n] (chunk i: rows row0[i] .. row0[i + 1], whole tiles of
 * mr but the last) and returns n, at most max. */
FJ_INTERNAL int64_t gemm_row_chunks(int64_t m, int mr, int threads, int rpt, int64_t *row0,
                                    int64_t max);

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- packing (gemm_pack.c) ---- */

/* isa: the runtime's fj_isa (the CPU has it: faster transposes may be
 * used).
 * A(i, k) for i < rows, k < kc (A(i,k) = ta ? a[k*lda + i] : a[i*lda + k])
 * into micro-panels of mr rows: dst[t*mr*kc + k*mr + i'], rows past `rows`
 * zero. */
FJ_INTERNAL void gemm_pack_a(float *dst, const float *a, int64_t lda, int ta, int64_t rows,
                             int64_t kc, int mr, int isa);
/* B(k, j) for k < kc, j < cols (B(k,j) = tb ? b[j*ldb + k] : b[k*ldb + j])
 * into panels of nr columns: dst[p*nr*kc + k*nr + j'], columns past `cols`
 * zero. */
FJ_INTERNAL void gemm_pack_b(float *dst, const float *b, int64_t ldb, int tb, int64_t kc,
                             int64_t cols, int nr, int isa);
/* Packers with AVX-512 (gemm_pack512.c; the CPU must have it): A either
 * way round (mr <= 16) and transposed B (nr a multiple of 16). */
FJ_INTERNAL void gemm_pack_a512(float *dst, const float *a, int64_t lda, int ta, int64_t rows,
                                int64_t kc, int mr);
FJ_INTERNAL void gemm_pack_bt512(float *dst, const float *b, int64_t ldb, int64_t kc,
                                 int64_t cols, int nr);
/* Row-major B with AVX-512 (nr a multiple of 16). */
FJ_INTERNAL void gemm_pack_b512(float *dst, const float *b, int64_t ldb, int64_t kc,
                                int64_t cols, int nr);
/* The same with AVX2 (gemm_pack_avx2.c; the CPU must have it): A either
 * way round (mr <= 8) and transposed B (nr a multiple of 8). */
FJ_INTERNAL void gemm_pack_a_avx2(float *dst, const float *a, int64_t lda, int ta, int64_t rows,
                                  int64_t kc, int mr);
FJ_INTERNAL void gemm_pack_bt_avx2(float *dst, const float *b, int64_t ldb, int64_t kc,
                                   int64_t cols, int nr);
/* The same for f64 (the portable packers, gemm_pack_tmpl.h). */
FJ_INTERNAL void gemm_pack_a64(double *dst, const double *a, int64_t lda, int ta, int64_t rows,
                               int64_t kc, int mr);
FJ_INTERNAL void gemm_pack_b64(double *dst, const double *b, int64_t ldb, int tb, int64_t kc,
                               int64_t cols, int nr);
FJ_INTERNAL void gemm_copy_rows64(double *dst, const double *a, int64_t lda, int64_t rows,
                                  int64_t kc, int mr);
/* Elements of slack the packers may write past a packed block. */
enum { GEMM_PACK_SLACK = 16 };
/* Row-major copy of A rows [0, rows) x [0, kc) into dst (ld = kc), rows up
 * to mr zero: the in-place kernel's row tail. */
FJ_INTERNAL void gemm_copy_rows(float *dst, const float *a, int64_t lda, int64_t rows,
                                int64_t kc, int mr);
/* The calling thread's scratch (64-byte aligned, at least `floats`), or
 * NULL if it cannot be allocated. Kept per thread between calls. */
FJ_INTERNAL float *gemm_scratch(size_t floats);
/* A matrix x vector call (int8, bf16 or f32) streams its matrix at about
 * 100 bytes a nanosecond (L2 / L3 bandwidth, not the arithmetic, bounds
 * it): threads from about a microsecond of that, the tile path's rule in
 * time, this many bytes of the matrix. */
enum { GEMM_VEC_MT_BYTES = 128 << 10 };
/* Matrices from this many elements take the vector kernels (smaller calls
 * are a few hundred nanoseconds on the tile paths' memos either way). */
enum { GEMM_VEC_MIN_ELEMS = 4096 };
/* gemv.c: the runtime's vector x matrix kernel of c (checked, generated on
 * first use; the caller holds a reference), for gemv.c and gemv_lowp.c. */
FJ_INTERNAL fj_status gemv_vxm_kernel(fj_runtime *rt, const kg_vxm_cfg *c, fj_kernel **out);
/* gemv.c: whether an fj_gemm_f32/f64 call of this shape (m = 1 or n = 1,
 * a matrix large enough) takes the matrix x vector kernels, and the call
 * (after the entry point's checks; m, n, k > 0; dt KG_DT_F32 or F64, the
 * pointers and alpha/beta of that type). */
FJ_INTERNAL int gemm_vec_shape(int dt, int64_t m, int64_t n, int64_t k);
FJ_INTERNAL fj_status gemm_vec(fj_runtime *rt, int dt, int ta, int tb, int64_t m, int64_t n,
                               int64_t k, double alpha, const void *a, int64_t lda,
                               const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

#endif
