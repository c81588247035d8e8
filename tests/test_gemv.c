/* test_gemv.c: fj_gemm_f32/f64 with one row or column of C (the matrix x vector kernels, runtime/prims/gemv.c).
 *
 * Random m = 1 and n = 1 calls of every transpose combination against the
 * double (f64: long double) reference (odd k and lengths for every tail,
 * padded strides, alpha and beta edge values, NaN and Inf), bitwise the
 * same on two threads, on both ISAs; that these shapes take the new
 * kernels and that every instruction of them unwinds (trap flag); C
 * overlapping an operand is refused. FRAMEJIT_FUZZ_ITERS=N sets the
 * random cases per ISA and type (default 400). */
#undef FJ_TEST

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"
#include "gemmcase.h"
#include "kernels/gen/gemm_gen.h"
#include "runtime/prims/gemm_int.h"

static const int64_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128,
                               129, 130, 191, 255, 257, 300, 513, 700, 1031};
static const int64_t ks[] = {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 33, 64, 100, 129, 255, 256, 301};
static const double edges[] = {0.0, 1.0, -1.0, 0.5};

/* A random case that takes the matrix x vector path (f64: alpha and beta
 * any double). */
static void vec_case(gcase *t, int f64) {
    for (;;) {
        memset(t, 0, sizeof *t);
        int64_t len = lens[rnd_to(sizeof lens / sizeof lens[0])];
        t->k = ks[rnd_to(sizeof ks / sizeof ks[0])];
        int row = rnd() & 1;
        t->m = row ? 1 : len;
        t->n = row ? len : 1;
        if (gemm_vec_shape(f64 ? KG_DT_F64 : KG_DT_F32, t->m, t->n, t->k)) break;
    }
    t->ta = rnd() & 1;
    t->tb = rnd() & 1;
    int64_t pad = rnd_to(3) == 0 ? 1 + rnd_to(17) : 0;
    t->lda = (t->ta ? t->m : t->k) + pad;
    t->ldb = (t->tb ? t->k : t->n) + (rnd_to(3) == 0 ? 1 + rnd_to(17) : 0);
    t->ldc = t->n + (rnd_to(3) == 0 ? 1 + rnd_to(5) : 0);
    t->alpha = rnd_to(4) ? edges[rnd_to(4)] : f64 ? rnd_d() : rnd_f();
    t->beta = rnd_to(4) ? edges[rnd_to(4)] : f64 ? rnd_d() : rnd_f();
    t->special = rnd_to(8) == 0 ? 1 + (int)rnd_to(3) : 0;
    if (t->special == 3) t->beta = 0;
}

static void vec_case32(gcase *t) { vec_case(t, 0); }
static void vec_case64(gcase *t) { vec_case(t, 1); }
static const gcase_lists lists32 = {.draw = vec_case32, .iters = 400};
static const gcase_lists lists64 = {.draw = vec_case64, .iters = 400, .f64 = 1};

/* Loop index: bit 0 AVX2, bit 1 f64. */
START_TEST(fuzz) {
    int f64 = _i >> 1 & 1;
    gcase_fuzz(_i & 1 ? FJ_ISA_AVX2 : FJ_ISA_AVX512, 11 + (uint64_t)_i, f64 ? &lists64 : &lists32,
               f64 ? run_dcase : run_case);
}
END_TEST

/* Large enough for both threads to take blocks, every transpose. Loop
 * index: bit 0 AVX2, bit 1 f64. */
START_TEST(threads_large) {
    fj_isa isa = _i & 1 ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    int f64 = _i >> 1 & 1;
    fj_runtime *rt1 = fjt_runtime_try(isa, 1), *rt2 = fjt_runtime_try(isa, 2);
    if (!rt1) return;
    seed(13);
    for (int c = 0; c < 8; c++) {
        gcase t = {.ta = c & 1, .tb = (c >> 1) & 1, .k = 517, .alpha = 1, .beta = c & 4 ? 0.5 : 0};
        t.m = c & 4 ? 1 : 1999;
        t.n = c & 4 ? 1999 : 1;
        t.lda = t.ta ? t.m : t.k;
        t.ldb = t.tb ? t.k : t.n;
        t.ldc = t.n;
        (f64 ? run_dcase : run_case)(rt1, rt2, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}
END_TEST

/* Every instruction of both kernels, with row and column tails, unwinds;
 * the first kernel the call enters is the matrix x vector one. Loop
 * index: bit 0 AVX2, bit 1 f64. */
START_TEST(trace_unwind) {
    fj_isa isa = _i & 1 ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    int f64 = _i >> 1 & 1;
    fj_runtime *rt = fjt_runtime_try(isa, 1);
    if (!rt) return;
    seed(17);
    static const struct { int ta, tb, m, n, k; const char *kernel; } cs[] = {
        {0, 0, 1, 157, 29, "_vxm_"},   /* B along C: vector x matrix */
        {1, 0, 141, 1, 30, "_vxm_"},   /* A transposed: the same kernel */
        {0, 0, 139, 1, 37, "_gemv_"},  /* A along k: matrix x vector */
        {0, 1, 1, 133, 33, "_gemv_"},  /* B transposed: the same */
    };
    const char *type = f64 ? "fj_gemm_f64_" : "fj_gemm_f32_";
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        gcase t = {.ta = cs[i].ta, .tb = cs[i].tb, .m = cs[i].m, .n = cs[i].n, .k = cs[i].k,
                   .alpha = 1.5, .beta = 0};  /* (the body runs twice: warm-up, trace) */
        t.lda = t.ta ? t.m : t.k;
        t.ldb = t.tb ? t.k : t.n;
        t.ldc = t.n;
        ck_assert(gemm_vec_shape(f64 ? KG_DT_F64 : KG_DT_F32, t.m, t.n, t.k));
        gbufs g;
        dbufs d;
        fjt_trace_result *r = calloc(1, sizeof *r);
        fj_status st;
        int ok;
        if (f64) {
            dbufs_make(&t, &d);
            ok = gcase_dtrace(rt, &t, &d, r, &st);
        } else {
            bufs_make(&t, &g);
            ok = gcase_trace(rt, &t, &g, NULL, NULL, r, &st);
        }
        ck_assert_msg(st == FJ_OK, "case %zu: %s", i, fj_last_error());
        ck_assert_msg(ok, "case %zu (%s): %s", i, r->first_name ? r->first_name : "?", r->msg);
        ck_assert_int_gt(r->kernel_steps, 0);
        ck_assert_msg(r->first_name && strstr(r->first_name, cs[i].kernel) &&
                          !strncmp(r->first_name, type, strlen(type)),
                      "case %zu ran %s first, not a %s%s kernel", i,
                      r->first_name ? r->first_name : "no kernel", type, cs[i].kernel);
        if (f64) {
            dcheck(&t, &d, d.c, NULL, "traced");
            dbufs_free(&d);
        } else {
            check_result(&t, &g, g.c, NULL, 0, 0, 0, "traced");
            bufs_free(&g);
        }
        free(r);
    }
    fj_runtime_destroy(rt);
}
END_TEST

/* C may not share memory with A or B here either. */
START_TEST(alias) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 1);
    float *buf = calloc(4096 + 64, sizeof(float));
    ck_assert_ptr_nonnull(buf);
    /* A (1 x 64) inside C's row of 64 x 64 B's product */
    fj_status s = fj_gemm_f32(rt, 'N', 'N', 1, 64, 64, 1, buf, 64, buf + 64, 64, 0, buf + 32, 64);
    ck_assert_int_eq(s, FJ_ERR_INVALID_ARG);
    ck_assert_msg(strstr(fj_last_error(), "overlaps a"), "%s", fj_last_error());
    /* B's column (n = 1, ldb 1: 64 floats) under C's column */
    s = fj_gemm_f32(rt, 'N', 'N', 64, 1, 64, 1, buf + 128, 64, buf, 1, 0, buf + 8, 1);
    ck_assert_int_eq(s, FJ_ERR_INVALID_ARG);
    ck_assert_msg(strstr(fj_last_error(), "overlaps b"), "%s", fj_last_error());
    free(buf);
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("gemv");
    TCase *tc = tcase_create("gemv");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, alias);
    tcase_add_loop_test(tc, trace_unwind, 0, 4);
    tcase_add_loop_test(tc, threads_large, 0, 4);
    tcase_add_loop_test(tc, fuzz, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
