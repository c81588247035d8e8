/* test_emit_paths.c: the builder's template paths (x64_encode_vregs and
 * x64_encode_vmem) change how fast kernels are emitted, never what is
 * emitted. Every generator's kernels, on both ISAs, come out byte for byte
 * the same (and with the same frame records) as when every instruction
 * goes through the encoder's table search: this checks the builder's
 * translation of operands into those paths (registers, bases, indexes,
 * scales, displacements, masks, broadcasts) in the instructions real
 * kernels are made of. The paths' own encodings are compared form by form
 * in x64_golden and x64_zydis. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "fjtest.h"
#include "kernels/builder_int.h"
#include "kernels/eltwise.h"
#include "kernels/gemm.h"
#include "kernels/x64.h"
#include "runtime/eltslot.h"

typedef void (*gen_fn)(fj_builder *b, const void *ctx);

/* Code is never run here: any ISA can be generated on any CPU. */
static const uint32_t all_features = X64_F_AVX | X64_F_AVX2 | X64_F_FMA | X64_F_BMI2 |
                                     X64_F_F16C | X64_F_AVX512F | X64_F_AVX512VL |
                                     X64_F_AVX512BW | X64_F_AVX512DQ;
static long compared;

static fj_status assemble(fj_isa isa, int nargs, gen_fn gen, const void *ctx, int fast,
                          kb_code *out) {
    fj_builder *b = NULL;
    kb_test_fast_paths(fast);
    ck_assert_int_eq(kb_new("emit_paths", nargs, isa, all_features, NULL, &b), FJ_OK);
    gen(b, ctx);
    fj_status s = kb_assemble(b, out);
    kb_free(b);
    kb_test_fast_paths(1);
    return s;
}

/* Returns 1 if the kernel was made (both ways) and compared, 0 if the
 * generator refuses the configuration (both ways, with the same message). */
static int same(fj_isa isa, int nargs, gen_fn gen, const void *ctx, const char *what) {
    kb_code a, c;
    fj_status sa = assemble(isa, nargs, gen, ctx, 1, &a);
    char why[256];
    snprintf(why, sizeof why, "%s", fj_last_error());
    fj_status sc = assemble(isa, nargs, gen, ctx, 0, &c);
    ck_assert_msg(sa == sc, "%s: %s with the template paths, %s without (%s / %s)", what,
                  fj_status_str(sa), fj_status_str(sc), why, fj_last_error());
    if (sa != FJ_OK) {
        ck_assert_str_eq(why, fj_last_error());
        return 0;
    }
    size_t at = 0;
    while (at < a.len && at < c.len && a.bytes[at] == c.bytes[at]) at++;
    ck_assert_msg(a.len == c.len && at == a.len,
                  "%s (%s): %zu vs %zu bytes, first difference at byte %zu", what,
                  isa == FJ_ISA_AVX512 ? "avx512" : "avx2", a.len, c.len, at);
    ck_assert_msg(a.code_len == c.code_len && a.nrecs == c.nrecs &&
                      !memcmp(a.recs, c.recs, a.nrecs * sizeof *a.recs),
                  "%s: frame records differ", what);
    kb_code_free(&a);
    kb_code_free(&c);
    compared++;
    return 1;
}

START_TEST(eltwise_reduce_softmax) {
    for (int isa = 0; isa < 2; isa++)
        for (int v = 0; v < KG_ELT__N; v++) {
            kg_elt e = (kg_elt)v;
            char what[64];
            snprintf(what, sizeof what, "eltwise slot %d (%s)", v, kg_elt_name(e));
            ck_assert_msg(same(isa ? FJ_ISA_AVX512 : FJ_ISA_AVX2, KG_ELT_NARGS, rt_elt_gen, &e, what),
                          "%s: not generated: %s", what, fj_last_error());
        }
    ck_assert_int_eq(compared, 2 * KG_ELT__N);
}
END_TEST

START_TEST(gemm_kernels) {
    static const int acts[] = {0, FJ_ELT_RELU, FJ_ELT_GELU_TANH, FJ_ELT_LEAKY_RELU};
    long made = 0;
    for (int isa = 0; isa < 2; isa++)
        for (int mr = 1; mr <= 14; mr += (mr < 8 ? 1 : 2))
            for (int nv = 1; nv <= 4; nv++)
                for (int mode = 0; mode < 6; mode++)
                    for (int var = 0; var < 4; var++) {
                        kg_gemm_cfg c = {
                            .tag = KG_GEMM_TAG, .isa = isa ? FJ_ISA_AVX512 : FJ_ISA_AVX2,
                            .mr = mr, .nv = nv, .amode = mode % 3, .bmode = mode / 3,
                            .unroll = var & 1 ? 1 : 4, .pf_a = var & 1 ? 0 : 1024,
                            .pf_c = var % 3, .pf_b = var == 2 ? 512 : 0, .a_reg = var >> 1 & 1,
                            .b_copy = isa && mode / 3 == 0 && var != 1,
                            .has_bias = var & 1, .act = acts[var], .act_alpha = 0.5f,
                            .act_beta = 0, .stores = (mr + nv + mode + var) % 8};
                        if (kg_gemm_check(&c) != FJ_OK) continue;
                        char name[96];
                        kg_gemm_name(&c, name, sizeof name);
                        made += same((fj_isa)c.isa, KG_GEMM_NARGS, kg_gemm, &c, name);
                    }
    fprintf(stderr, "emit_paths: %ld GEMM kernels compared\n", made);
    ck_assert_int_gt(made, 300);
}
END_TEST

/* kb_interleave (eltwise's lanes): streams emitted one after the other,
 * then reordered, give the bytes of the same instructions emitted in the
 * interleaved order directly, constant-pool fixups included; a label or a
 * jump (forward, or backward with no fixup) inside the span is refused. */
typedef struct ilv_ctx {
    int order;    /* 0: streams, then kb_interleave; 1: interleaved by hand */
    int bad;      /* 1: a label bound inside; 2: a jump inside; 3: a backward one */
} ilv_ctx;

/* Instruction k of stream lane; cs: its constant (made beforehand, so that
 * both orders lay out the same pool). */
static void ilv_insn(fj_builder *b, fj_reg src, fj_reg v, int lane, int k, fj_opnd cs) {
    switch (k % 4) {
    case 0: fj_emit(b, FJ_VADDPS, fj_vec(b, v), fj_vec(b, v), fj_vec(b, v)); break;
    case 1: fj_emit(b, FJ_VMULPS, fj_vec(b, v), fj_vec(b, v), cs); break;
    case 2: fj_emit(b, FJ_VMOVUPS, fj_vec(b, v), fj_mem(0, src, 64 * lane + 4096 * k)); break;
    default: fj_emit(b, FJ_VBROADCASTSS, fj_vec(b, v), cs); break;
    }
}

static void ilv_gen(fj_builder *b, const void *p) {
    const ilv_ctx *c = p;
    enum { LANES = 3, COUNT = 9 };
    fj_reg src = fj_arg(b, 0), v[LANES];
    fj_opnd cs[LANES][COUNT];
    for (int l = 0; l < LANES; l++) {
        v[l] = fj_vreg(b);
        for (int k = 0; k < COUNT; k++) {
            float x = (float)(l * 10 + k) + 0.5f;
            cs[l][k] = k % 4 == 1 ? fj_const_data(b, (float[8]){x, x, x, x, x, x, x, x}, 32, 32, 0)
                                  : fj_const_f32(b, x);
        }
    }
    fj_label lbl = fj_label_new(b), back = fj_label_new(b);
    fj_label_bind(b, back);
    if (c->order) {
        for (int k = 0; k < COUNT; k++)
            for (int l = 0; l < LANES; l++) ilv_insn(b, src, v[l], l, k, cs[l][k]);
    } else {
        uint32_t at[LANES][COUNT + 2];
        for (int l = 0; l < LANES; l++) {
            at[l][0] = kb_body_len(b);
            for (int k = 0; k < COUNT; k++) {
                ilv_insn(b, src, v[l], l, k, cs[l][k]);
                if (l == 1 && k == 4 && c->bad == 1) fj_label_bind(b, lbl);
                if (l == 1 && k == 4 && c->bad == 2) fj_emit(b, FJ_JMP, fj_lbl(lbl));
                if (l == 1 && k == 4 && c->bad == 3) fj_emit(b, FJ_JE, fj_lbl(back));
                at[l][k + 1] = kb_body_len(b);
            }
        }
        kb_interleave(b, &at[0][0], COUNT + 2, LANES, COUNT);
    }
    if (c->bad != 1) fj_label_bind(b, lbl);
    fj_return(b, fj_none());
}

START_TEST(interleave) {
    for (int isa = 0; isa < 2; isa++) {
        fj_isa i = isa ? FJ_ISA_AVX512 : FJ_ISA_AVX2;
        kb_code a, c;
        ck_assert_int_eq(assemble(i, 1, ilv_gen, &(ilv_ctx){0, 0}, 1, &a), FJ_OK);
        ck_assert_int_eq(assemble(i, 1, ilv_gen, &(ilv_ctx){1, 0}, 1, &c), FJ_OK);
        ck_assert_msg(a.len == c.len && !memcmp(a.bytes, c.bytes, a.len),
                      "interleaved streams differ from the interleaved emission (%zu / %zu bytes)",
                      a.len, c.len);
        kb_code_free(&a);
        kb_code_free(&c);
        for (int bad = 1; bad <= 3; bad++) {
            ck_assert_int_ne(assemble(i, 1, ilv_gen, &(ilv_ctx){0, bad}, 1, &a), FJ_OK);
            ck_assert_msg(strstr(fj_last_error(), "straight-line"), "%s", fj_last_error());
        }
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("emit_paths");
    TCase *tc = tcase_create("same_bytes");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, eltwise_reduce_softmax);
    tcase_add_test(tc, gemm_kernels);
    tcase_add_test(tc, interleave);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
