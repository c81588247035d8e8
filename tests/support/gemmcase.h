/* gemmcase.h: GEMM test cases for the Check suites: random inputs, the
 * double-precision reference and its tolerance, and one call checked. */
#ifndef GEMMCASE_H
#define GEMMCASE_H

#include <stddef.h>
#include <stdint.h>

#include "framejit.h"

/* Random numbers, per thread; seed(salt) mixes FRAMEJIT_TEST_SEED in. */
uint64_t rnd(void);
int64_t rnd_to(int64_t n);
float rnd_f(void); /* uniform in [-1, 1) */
double rnd_d(void); /* the same in double (rnd_f is it rounded) */
long env_long(const char *name, long dflt);
void seed(uint64_t salt);

typedef struct gcase {
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    double alpha, beta;   /* (f32 cases: float values) */
    int special;          /* 1: NaN in A, 2: Inf in B, 3: NaN everywhere in C (beta = 0) */
    const char *tune;     /* blocking knobs for gemm_test_tune */
} gcase;

/* What a suite draws its random cases from: dimensions, and blocking
 * knobs per ISA; f64: alpha and beta any double, else float values. Or
 * draw, the suite's own drawing of a case, instead. iters: the cases a
 * fuzz run has by default (0: 1500). */
typedef struct gcase_lists {
    const int64_t *dims;
    size_t ndims;
    const char *const *tunes512, *const *tunes2;
    size_t n512, n2;
    int f64;
    void (*draw)(gcase *t);
    long iters;
} gcase_lists;
/* The it-th random case of a run (every 50th is larger, up to 300):
 * dimensions mostly from l's, padded strides, alpha and beta mostly 0, 1,
 * -1, 0.5, NaN/Inf specials, and blocking knobs from l's for the AVX-512
 * or the AVX2 kernels. */
void gcase_random(gcase *t, const gcase_lists *l, int avx512, long it);
/* FRAMEJIT_FUZZ_ITERS (default l's) random cases of l on isa, seeded with
 * salt, each through run on a one-thread runtime and every other one also
 * on a two-thread runtime (nothing without the ISA). */
void gcase_fuzz(fj_isa isa, uint64_t salt, const gcase_lists *l,
                void (*run)(fj_runtime *rt1, fj_runtime *rt2, const gcase *t));
/* Fills A (na elements), B and C0 of t's element size es (4 or 8) with
 * random values, C0 outside the m x n region and its last element with
 * GEMMCASE_PAD, and t's special values. */
void gcase_fill(const gcase *t, int es, void *a, size_t na, void *b, size_t nb, void *c0,
                size_t nc);

typedef struct gbufs {
    float *a, *b, *c0, *c;
    size_t na, nb, nc;
} gbufs;

/* C outside the m x n region: must stay. */
#define GEMMCASE_PAD 12345.0f

/* Random A, B and C0 for t (C = C0), with t's special values. */
void bufs_make(const gcase *t, gbufs *g);
void bufs_free(gbufs *g);
/* Checks got against alpha*op(A)op(B) + beta*C0 (+ bias[j], then act) in
 * double; act among relu, leaky_relu, clip, linear, or 0. */
void check_result(const gcase *t, const gbufs *g, const float *got, const float *bias,
                  fj_eltwise_op act, float act_alpha, float act_beta, const char *what);
void case_str(const gcase *t, char *buf, size_t n);
/* Runs t on rt1 (and on rt2, whose result must be bitwise the same). */
void run_case(fj_runtime *rt1, fj_runtime *rt2, const gcase *t);
/* t through a GEMM handle with bias and op (fj_gemm_create, executed
 * twice), checked against the reference where the op has one and bitwise
 * against fj_gemm_f32 + bias + fj_eltwise_f32; on rt2 bitwise the same. */
void handle_case(fj_runtime *rt, fj_runtime *rt2, const gcase *t, int has_bias,
                 fj_eltwise_op op, float pa, float pb);

/* t's call (fj_gemm_f32 on rt, or h executed with bias when h is set)
 * under the trap flag (fjt_trace_kernel, root-less, warmed up first: the
 * body runs twice); *s: the call's status. Returns fjt_trace_kernel's. */
struct fjt_trace_result;
int gcase_trace(fj_runtime *rt, const gcase *t, gbufs *g, fj_gemm *h, const float *bias,
                struct fjt_trace_result *r, fj_status *s);

/* The f64 forms: buffers of doubles (bias: n + 1 random values), the
 * long-double reference (tolerance from the sum of |terms| and k), and
 * one fj_gemm_f64 call checked (on rt2 bitwise the same). */
typedef struct dbufs {
    double *a, *b, *c0, *c, *bias;
    size_t na, nb, nc;
} dbufs;
void dbufs_make(const gcase *t, dbufs *g);
void dbufs_free(dbufs *g);
void dcase_str(const gcase *t, char *buf, size_t n);
void dcheck(const gcase *t, const dbufs *g, const double *got, const double *bias,
            const char *what);
/* sum over p of op(A)(i, p) op(B)(p, j) in long double; *abs_s: of the
 * terms' magnitudes. */
long double ddot_ref(const gcase *t, const dbufs *g, int64_t i, int64_t j, long double *abs_s);
void run_dcase(fj_runtime *rt1, fj_runtime *rt2, const gcase *t);
/* gcase_trace's fj_gemm_f64 call on d. */
int gcase_dtrace(fj_runtime *rt, const gcase *t, dbufs *d, struct fjt_trace_result *r,
                 fj_status *s);

#endif
