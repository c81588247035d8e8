/* test_fptax.c: the frame-pointer tax probe (built only with
 * -Dfp_tax_probe=true). A runtime created with FRAMEJIT_FP_TAX_PROBE=1
 * builds kernels that really use rbp as a GPR (the GEMM's first register),
 * compute what the normal kernels compute, carry "_nofp" in their names and
 * still have exact CFI (libgcc and libunwind unwind through them at every
 * instruction); a normal runtime in the same process is untouched. */
#include <check.h>
#include <framejit.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "kernels/x64/x64.h"

static fj_runtime *probe_runtime(fj_isa isa) {
    setenv("FRAMEJIT_FP_TAX_PROBE", "1", 1);
    fj_runtime *rt = fjt_runtime(isa, 1);
    unsetenv("FRAMEJIT_FP_TAX_PROBE");
    return rt;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

/* Instructions from start to the first ret that write rbp, other than
 * the push/pop that save and restore it. */
static int rbp_writes(uintptr_t start) {
    const uint8_t *p = (const uint8_t *)start;
    int writes = 0;
    for (size_t off = 0; off < 65536;) {
        x64_insn in;
        int n = x64_decode(p + off, 16, &in);
        ck_assert_msg(n > 0, "undecodable instruction at offset %zu", off);
        if ((in.gpr_writes >> X64_RBP & 1) && !in.is_push_rbp && !in.is_pop_rbp) writes++;
        if (in.is_ret) break;
        off += (size_t)n;
    }
    return writes;
}

typedef int64_t (*fn2)(int64_t, int64_t);

START_TEST(builder_hands_out_rbp) {
    fj_runtime *rt = probe_runtime(FJ_ISA_AVX2);
    fj_builder *b;
    ck_assert_int_eq(fj_builder_create(rt, "probe_sum", 2, &b), FJ_OK);
    fj_reg r = fj_gpr(b), s = fj_gpr(b);  /* rbp, then rax */
    fj_opnd slot = fj_stack_slot(b, 8, 8, 64);
    fj_emit(b, FJ_MOV, fj_r64(r), fj_r64(fj_arg(b, 0)));
    fj_emit(b, FJ_ADD, fj_r64(r), fj_r64(fj_arg(b, 1)));
    fj_emit(b, FJ_MOV, slot, fj_r64(r));
    fj_emit(b, FJ_MOV, fj_r64(s), slot);
    fj_emit(b, FJ_ADD, fj_r64(s), fj_r64(r));
    fj_return(b, fj_r64(s));
    fj_kernel *k = NULL;
    ck_assert_msg(fj_builder_finish(b, &k) == FJ_OK, "%s", fj_last_error());
    ck_assert(ends_with(fj_kernel_name(k), "_nofp"));
    ck_assert_int_eq(((fn2)fj_kernel_entry(k))(20, 1), 42);
    ck_assert_int_ge(rbp_writes((uintptr_t)fj_kernel_entry(k)), 2);
    fj_kernel_release(k);

    /* fj_call needs the frame-pointer frame. */
    ck_assert_int_eq(fj_builder_create(rt, "probe_call", 0, &b), FJ_OK);
    fj_call(b, (const void *)abs, NULL, 0, (fj_reg){0});
    fj_return(b, fj_none());
    ck_assert_int_eq(fj_builder_finish(b, &k), FJ_ERR_CODEGEN);
    fj_runtime_destroy(rt);
}
END_TEST

/* A normal runtime created after a probe one is not affected. */
START_TEST(normal_runtime_untouched) {
    fj_runtime *p = probe_runtime(FJ_ISA_AVX2), *rt = fjt_runtime(FJ_ISA_AVX2, 1);
    fj_builder *b;
    ck_assert_int_eq(fj_builder_create(rt, "plain", 1, &b), FJ_OK);
    fj_reg r = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(r), fj_r64(fj_arg(b, 0)));
    fj_return(b, fj_r64(r));
    fj_kernel *k = NULL;
    ck_assert_int_eq(fj_builder_finish(b, &k), FJ_OK);
    ck_assert_str_eq(fj_kernel_name(k), "plain");
    ck_assert_int_eq(rbp_writes((uintptr_t)fj_kernel_entry(k)), 1);  /* mov rbp, rsp */
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
    fj_runtime_destroy(p);
}
END_TEST

static float *fill(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = (float)((int)((i * 2654435761u + seed) >> 9) % 201 - 100) / 64.0f;
    return p;
}

typedef struct gemm_arg {
    fj_runtime *rt;
    int m, n, k;
    const float *a, *b;
    float *c;
    fj_status s;
} gemm_arg;

static void gemm_body(void *p) {
    gemm_arg *g = p;
    g->s = fj_gemm_f32(g->rt, 'N', 'N', g->m, g->n, g->k, 1.0f, g->a, g->k, g->b, g->n, 0.0f,
                       g->c, g->n);
    __asm__ volatile("" ::: "memory");
}

/* The same results as the frame-pointer kernels, bit for bit (the same
 * schedule, one register renamed), and rbp written in the kernel. */
START_TEST(gemm_same_results) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    fj_runtime *p = probe_runtime(isa);
    static const int dims[][3] = {{64, 64, 64}, {100, 60, 70}, {7, 33, 5}, {256, 256, 256}};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        int m = dims[d][0], n = dims[d][1], k = dims[d][2];
        float *a = fill((size_t)m * k, 1), *b = fill((size_t)k * n, 2);
        float *c0 = calloc((size_t)m * n, sizeof *c0), *c1 = calloc((size_t)m * n, sizeof *c1);
        gemm_arg g0 = {rt, m, n, k, a, b, c0, FJ_OK}, g1 = {p, m, n, k, a, b, c1, FJ_OK};
        gemm_body(&g0);
        gemm_body(&g1);
        ck_assert_msg(g0.s == FJ_OK && g1.s == FJ_OK, "%s", fj_last_error());
        ck_assert_msg(!memcmp(c0, c1, (size_t)m * n * sizeof *c0), "%dx%dx%d differs", m, n, k);
        double want = 0;
        for (int i = 0; i < k; i++) want += (double)a[(m - 1) * k + i] * b[(size_t)i * n + n - 1];
        ck_assert(fabs(want - c1[(size_t)m * n - 1]) <= 1e-3 * (1 + fabs(want)));
        free(a); free(b); free(c0); free(c1);
    }
    fj_runtime_destroy(p);
    fj_runtime_destroy(rt);
}
END_TEST

/* Every instruction of a probe GEMM kernel: libgcc and libunwind unwind
 * through it to the caller (its rsp-based CFI is exact). The rbp walk is
 * expected to fail: that is what the probe measures the price of. */
START_TEST(gemm_cfi_exact) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    if (isa == FJ_ISA_AVX512 && !fjt_have_avx512()) return;
    fj_runtime *p = probe_runtime(isa);
    float *a = fill(5 * 3, 3), *b = fill(3 * 17, 4), *c = calloc(5 * 17, sizeof *c);
    gemm_arg g = {p, 5, 17, 3, a, b, c, FJ_OK};
    fjt_trace_result *r = calloc(1, sizeof *r);
    fjt_trace_opts o = {0};
    fjt_trace_kernel(gemm_body, &g, &o, r);
    ck_assert_msg(g.s == FJ_OK, "%s", fj_last_error());
    ck_assert(!r->aborted);
    ck_assert_int_gt(r->kernel_steps, 0);
    ck_assert_int_ge(r->rets, 1);
    ck_assert_msg(r->lu_bad == 0 && r->gcc_bad == 0, "libunwind %ld, libgcc %ld bad stops: %s",
                  r->lu_bad, r->gcc_bad, r->msg);
    ck_assert_msg(r->first_name && ends_with(r->first_name, "_nofp"), "%s",
                  r->first_name ? r->first_name : "(none)");
    ck_assert_int_ge(rbp_writes(r->first_start), 1);
    free(r);
    free(a); free(b); free(c);
    fj_runtime_destroy(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fptax");
    TCase *tc = tcase_create("probe");
    tcase_add_test(tc, builder_hands_out_rbp);
    tcase_add_test(tc, normal_runtime_untouched);
    tcase_add_loop_test(tc, gemm_same_results, 0, 2);
    tcase_add_loop_test(tc, gemm_cfi_exact, 0, 2);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
