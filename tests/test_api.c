/* test_api.c: the public API under bad input (invariant 6: an error code
 * with a message, never a crash, never lost caller data) and relu
 * correctness against a C reference for both ISAs. */

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"

static fj_runtime *make_rt(fj_isa isa) { return fjt_runtime(isa, 1); }

/* ---- statuses, symbolize ---------------------------------------------------- */

START_TEST(status_strings) {
    for (int s = FJ_OK; s <= FJ_ERR_UNWIND; s++) {
        const char *t = fj_status_str((fj_status)s);
        ck_assert_ptr_nonnull(t);
        ck_assert(t[0] != 0);
    }
    ck_assert_ptr_nonnull(fj_status_str((fj_status)12345));
    ck_assert_ptr_nonnull(fj_status_str((fj_status)-1));
    ck_assert_ptr_nonnull(fj_last_error());
}
END_TEST

START_TEST(symbolize_non_jit) {
    int local;
    uintptr_t off = 77;
    ck_assert_ptr_null(fj_symbolize(NULL, &off));
    ck_assert_ptr_null(fj_symbolize((const void *)fj_symbolize, &off));
    ck_assert_ptr_null(fj_symbolize(&local, NULL));
    ck_assert_ptr_null(fj_symbolize((const void *)UINTPTR_MAX, &off));
    ck_assert_uint_eq(off, 77);   /* untouched on a miss */
    /* With a runtime alive and a kernel made, still NULL for non-JIT pcs,
     * and NULL again for the kernel's range once it is released. */
    fj_runtime *rt = make_rt(FJ_ISA_AVX2);
    fj_kernel *k;
    ck_assert_int_eq(fjt_build_csr_kernel(rt, "api_sym", NULL, &k), FJ_OK);
    void *e = fj_kernel_entry(k);
    ck_assert_str_eq(fj_symbolize(e, &off), "api_sym");
    ck_assert_uint_eq(off, 0);
    ck_assert_str_eq(fj_symbolize((char *)e + fj_kernel_code_size(k) - 1, &off), "api_sym");
    ck_assert_ptr_null(fj_symbolize((const void *)fj_symbolize, NULL));
    fj_kernel_release(k);
    ck_assert_ptr_null(fj_symbolize(e, NULL));
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- runtime creation ----------------------------------------------------- */

START_TEST(create_bad) {
    fj_options o;
    fj_options_init(&o);
    FJT_ASSERT_ERR(fj_runtime_create(&o, NULL), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_runtime_create(NULL, NULL), FJ_ERR_INVALID_ARG);
    fj_runtime *rt = (fj_runtime *)0x1;
    o.isa = (fj_isa)77;
    FJT_ASSERT_ERR(fj_runtime_create(&o, &rt), FJ_ERR_INVALID_ARG);
    ck_assert_ptr_null(rt);
    o.isa = (fj_isa)-3;
    FJT_ASSERT_ERR(fj_runtime_create(&o, &rt), FJ_ERR_INVALID_ARG);
    fj_options_init(&o);
    o.threads = -1;
    FJT_ASSERT_ERR(fj_runtime_create(&o, &rt), FJ_ERR_INVALID_ARG);
    fj_options_init(&o);
    o.isa = FJ_ISA_AVX512;
    if (!fjt_have_avx512()) {
        FJT_ASSERT_ERR(fj_runtime_create(&o, &rt), FJ_ERR_UNSUPPORTED);
    } else {
        ck_assert_int_eq(fj_runtime_create(&o, &rt), FJ_OK);
        fj_runtime_destroy(rt);
    }
    /* NULL options are the defaults. */
    ck_assert_int_eq(fj_runtime_create(NULL, &rt), FJ_OK);
    ck_assert(fj_runtime_isa(rt) == FJ_ISA_AVX512 || fj_runtime_isa(rt) == FJ_ISA_AVX2);
    fj_runtime_destroy(rt);
    fj_runtime_destroy(NULL);
}
END_TEST

START_TEST(create_bad_env) {
    fj_runtime *rt = NULL;
    setenv("FRAMEJIT_ISA", "bogus", 1);
    FJT_ASSERT_ERR(fj_runtime_create(NULL, &rt), FJ_OK);
    ck_assert_ptr_null(rt);
    setenv("FRAMEJIT_ISA", "avx2", 1);
    ck_assert_int_eq(fj_runtime_create(NULL, &rt), FJ_OK);
    ck_assert_int_eq(fj_runtime_isa(rt), FJ_ISA_AVX2);
    fj_runtime_destroy(rt);
    rt = NULL;
    unsetenv("FRAMEJIT_ISA");

    setenv("FRAMEJIT_UNWIND", "bogus", 1);
    FJT_ASSERT_ERR(fj_runtime_create(NULL, &rt), FJ_OK);
    ck_assert_ptr_null(rt);
    setenv("FRAMEJIT_UNWIND", "libgcc,bogus", 1);
    FJT_ASSERT_ERR(fj_runtime_create(NULL, &rt), FJ_OK);
    setenv("FRAMEJIT_UNWIND", "libgcc,libunwind", 1);
    ck_assert_int_eq(fj_runtime_create(NULL, &rt), FJ_OK);
    fj_runtime_destroy(rt);
    rt = NULL;
    unsetenv("FRAMEJIT_UNWIND");

    setenv("FRAMEJIT_THREADS", "many", 1);
    FJT_ASSERT_ERR(fj_runtime_create(NULL, &rt), FJ_OK);
    unsetenv("FRAMEJIT_THREADS");
    ck_assert_int_eq(fj_runtime_create(NULL, &rt), FJ_OK);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- eltwise bad input -------------------------------------------------------- */

static int all_eq(const float *a, float v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != v) return 0;
    return 1;
}

START_TEST(eltwise_bad) {
    fj_runtime *rt = make_rt((_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512);
    if (!rt) return;
    float src[64], buf[80];
    for (int i = 0; i < 64; i++) src[i] = -1.0f;
    for (int i = 0; i < 80; i++) buf[i] = 5.0f;

    FJT_ASSERT_ERR(fj_eltwise_f32(NULL, FJ_ELT_RELU, 0, 0, src, buf, 64), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, NULL, buf, 64), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, src, NULL, 64), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, (fj_eltwise_op)999, 0, 0, src, buf, 64), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, (fj_eltwise_op)0, 0, 0, src, buf, 64), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, (fj_eltwise_op)-1, 0, 0, src, buf, 64), FJ_ERR_INVALID_ARG);
    ck_assert_msg(all_eq(buf, 5.0f, 80), "dst written by a failed call");

    /* n == 0: a no-op, NULL pointers allowed, but rt and op still checked. */
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, NULL, NULL, 0), FJ_OK);
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, src, buf, 0), FJ_OK);
    FJT_ASSERT_ERR(fj_eltwise_f32(NULL, FJ_ELT_RELU, 0, 0, src, buf, 0), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, (fj_eltwise_op)999, 0, 0, src, buf, 0), FJ_ERR_INVALID_ARG);
    ck_assert(all_eq(buf, 5.0f, 80));

    /* Overlap other than in place: rejected, and the data stays. */
    for (int i = 0; i < 80; i++) buf[i] = (float)(i - 40);
    float keep[80];
    memcpy(keep, buf, sizeof keep);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, buf, buf + 1, 64), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, buf + 1, buf, 64), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, buf, buf + 63, 64), FJ_ERR_INVALID_ARG);
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, buf + 63, buf, 64), FJ_ERR_INVALID_ARG);
    ck_assert_msg(memcmp(keep, buf, sizeof keep) == 0, "overlapping call changed the data");
    /* Adjacent (not overlapping) and in place are fine. */
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, buf, buf + 40, 40), FJ_OK);
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, buf, buf, 80), FJ_OK);

    /* A size whose byte count overflows. */
    FJT_ASSERT_ERR(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, src, buf, SIZE_MAX / 2), FJ_OK);

    /* The runtime still works after all that. */
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, src, buf, 64), FJ_OK);
    ck_assert(all_eq(buf, 0.0f, 64));
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- builder misuse ------------------------------------------------------ */

static void finish_fails(fj_builder *b, const char *what) {
    fj_kernel *k = (fj_kernel *)0x1;
    fj_status s = fj_builder_finish(b, &k);
    ck_assert_msg(s != FJ_OK, "%s: fj_builder_finish succeeded", what);
    ck_assert_msg(fj_last_error()[0] != 0, "%s: empty fj_last_error()", what);
    if (getenv("FJT_SHOW_ERRORS")) printf("%s -> %s: %s\n", what, fj_status_str(s), fj_last_error());
    ck_assert_msg(k == NULL || k == (fj_kernel *)0x1, "%s: a kernel came back with an error", what);
}

static fj_builder *new_b(fj_runtime *rt, int nargs) {
    fj_builder *b = NULL;
    fj_status s = fj_builder_create(rt, "api_misuse", nargs, &b);
    ck_assert_msg(s == FJ_OK, "%s", fj_last_error());
    return b;
}

/* The process and runtime are fine after a misuse: a good kernel builds and
 * runs. */
static void still_works(fj_runtime *rt) {
    fj_kernel *k;
    fj_status s = fjt_build_csr_kernel(rt, "api_after_misuse", NULL, &k);
    ck_assert_msg(s == FJ_OK, "good kernel after misuse: %s", fj_last_error());
    uint64_t r = ((uint64_t(*)(uint64_t, uint64_t))fj_kernel_entry(k))(1, 2);
    ck_assert_uint_eq(r, 0);
    fj_kernel_release(k);
}

START_TEST(builder_create_bad) {
    fj_runtime *rt = make_rt(FJ_ISA_AVX2);
    fj_builder *b = (fj_builder *)1;
    FJT_ASSERT_ERR(fj_builder_create(NULL, "x", 0, &b), FJ_OK);
    ck_assert_ptr_null(b);
    FJT_ASSERT_ERR(fj_builder_create(rt, NULL, 0, &b), FJ_OK);
    FJT_ASSERT_ERR(fj_builder_create(rt, "", 0, &b), FJ_OK);
    FJT_ASSERT_ERR(fj_builder_create(rt, "bad name", 0, &b), FJ_OK);
    FJT_ASSERT_ERR(fj_builder_create(rt, "x", 7, &b), FJ_OK);
    FJT_ASSERT_ERR(fj_builder_create(rt, "x", -1, &b), FJ_OK);
    FJT_ASSERT_ERR(fj_builder_create(rt, "x", 0, NULL), FJ_OK);
    FJT_ASSERT_ERR(fj_builder_finish(NULL, NULL), FJ_OK);
    fj_builder_destroy(NULL);
    fj_kernel_release(NULL);
    /* A builder abandoned midway. */
    b = new_b(rt, 2);
    fj_gpr(b);
    fj_builder_destroy(b);
    still_works(rt);
    fj_runtime_destroy(rt);
}
END_TEST

/* The end of one misuse: the builder fails to finish with a message, and
 * the runtime still makes good kernels. */
static void misuse_done(fj_runtime *rt, fj_builder *b, fj_builder *b2, const char *what) {
    fj_return(b, fj_none());
    finish_fails(b, what);
    if (b2) fj_builder_destroy(b2);
    still_works(rt);
    fj_runtime_destroy(rt);
}

/* One misuse per loop index; each leaves the builder in error. */
enum {
    MIS_ARG_RANGE, MIS_ARG_NEG, MIS_OTHER_BUILDER, MIS_FREED, MIS_DOUBLE_FREE, MIS_NOREG,
    MIS_UNBOUND, MIS_BIND_TWICE, MIS_RET, MIS_PUSH, MIS_POP, MIS_LEAVE, MIS_MEM_MEM,
    MIS_VEC_IMM, MIS_TOO_MANY_OPS, MIS_BAD_OP, MIS_OP_NONE, MIS_KREG_AVX2, MIS_ZMM_AVX2,
    MIS_GPR_EXHAUST, MIS_BAD_SCALE, MIS_NO_RETURN, MIS_BAD_LABEL, MIS_CALL_ARGS, MIS__N
};

START_TEST(builder_misuse) {
    fj_runtime *rt = make_rt(FJ_ISA_AVX2);
    fj_builder *b = new_b(rt, 2);
    fj_builder *b2 = NULL;
    fj_reg r = fj_gpr(b);
    const char *what = "?";
    switch (_i) {
    case MIS_ARG_RANGE:
        what = "fj_arg out of range";
        fj_emit(b, FJ_MOV, fj_r64(fj_arg(b, 2)), fj_imm(1));
        break;
    case MIS_ARG_NEG:
        what = "fj_arg negative";
        fj_emit(b, FJ_MOV, fj_r64(fj_arg(b, -1)), fj_imm(1));
        break;
    case MIS_OTHER_BUILDER: {
        what = "register of another builder";
        b2 = new_b(rt, 0);
        fj_gpr(b2);
        fj_reg o = fj_gpr(b2);
        fj_emit(b, FJ_MOV, fj_r64(o), fj_imm(1));
        break;
    }
    case MIS_FREED:
        what = "freed register";
        fj_release(b, r);
        fj_emit(b, FJ_MOV, fj_r64(r), fj_imm(1));
        break;
    case MIS_DOUBLE_FREE:
        what = "register freed twice";
        fj_release(b, r);
        fj_release(b, r);
        break;
    case MIS_NOREG: {
        what = "the {0} register";
        fj_reg z = {0};
        fj_emit(b, FJ_MOV, fj_r64(z), fj_imm(1));
        break;
    }
    case MIS_UNBOUND: {
        what = "unbound label";
        fj_label l = fj_label_new(b);
        fj_emit(b, FJ_JMP, fj_lbl(l));
        break;
    }
    case MIS_BIND_TWICE: {
        what = "label bound twice";
        fj_label l = fj_label_new(b);
        fj_label_bind(b, l);
        fj_emit0(b, FJ_NOP);
        fj_label_bind(b, l);
        break;
    }
    case MIS_RET:
        what = "user RET";
        fj_emit0(b, FJ_RET);
        break;
    case MIS_PUSH:
        what = "user PUSH";
        fj_emit(b, FJ_PUSH, fj_r64(r));
        break;
    case MIS_POP:
        what = "user POP";
        fj_emit(b, FJ_POP, fj_r64(r));
        break;
    case MIS_LEAVE:
        what = "user LEAVE";
        fj_emit0(b, FJ_LEAVE);
        break;
    case MIS_MEM_MEM:
        what = "mov mem, mem";
        fj_emit(b, FJ_MOV, fj_mem(64, fj_arg(b, 0), 0), fj_mem(64, fj_arg(b, 1), 0));
        break;
    case MIS_VEC_IMM: {
        what = "vaddps with an immediate";
        fj_reg v = fj_vreg(b);
        fj_emit(b, FJ_VADDPS, fj_ymm(v), fj_ymm(v), fj_imm(3));
        break;
    }
    case MIS_TOO_MANY_OPS:
        what = "add with three operands";
        fj_emit(b, FJ_ADD, fj_r64(r), fj_r64(r), fj_r64(r));
        break;
    case MIS_BAD_OP:
        what = "op out of range";
        fj_emit(b, (fj_op)(FJ_OP_COUNT + 5), fj_r64(r));
        break;
    case MIS_OP_NONE:
        what = "FJ_OP_NONE";
        fj_emit(b, FJ_OP_NONE, fj_r64(r));
        break;
    case MIS_KREG_AVX2: {
        what = "mask register on AVX2";
        fj_reg k = fj_kreg(b);
        fj_emit(b, FJ_KMOVW, fj_k(k), fj_r32(r));
        break;
    }
    case MIS_ZMM_AVX2: {
        what = "zmm on AVX2";
        fj_reg v = fj_vreg(b);
        fj_emit(b, FJ_VXORPS, fj_zmm(v), fj_zmm(v), fj_zmm(v));
        break;
    }
    case MIS_GPR_EXHAUST:
        what = "more GPRs than the pool has";
        for (int i = 0; i < 20; i++) fj_emit(b, FJ_XOR, fj_r32(fj_gpr(b)), fj_r32(r));
        break;
    case MIS_BAD_SCALE:
        what = "memory operand with scale 3";
        fj_emit(b, FJ_MOV, fj_r64(r), fj_memx(64, fj_arg(b, 0), fj_arg(b, 1), 3, 0));
        break;
    case MIS_NO_RETURN:
        what = "no fj_return and a label bound past the end";
        {
            fj_label l = fj_label_new(b);
            fj_emit(b, FJ_JMP, fj_lbl(l));
            fj_label_bind(b, l);
        }
        /* An empty tail after a bound label cannot fall off the end into the
         * constant pool; the builder must either add the epilogue itself or
         * refuse. If it succeeds, the kernel must still run and return. */
        {
            fj_kernel *k = NULL;
            fj_status s = fj_builder_finish(b, &k);
            if (s == FJ_OK) {
                ((void (*)(void))fj_kernel_entry(k))();
                fj_kernel_release(k);
            } else {
                ck_assert(fj_last_error()[0] != 0);
            }
            still_works(rt);
            fj_runtime_destroy(rt);
            return;
        }
    case MIS_BAD_LABEL: {
        what = "label of another builder / never created";
        fj_label l = {12345};
        fj_emit(b, FJ_JMP, fj_lbl(l));
        break;
    }
    case MIS_CALL_ARGS: {
        what = "fj_call with 7 arguments";
        fj_opnd a[7];
        for (int i = 0; i < 7; i++) a[i] = fj_imm(i);
        fj_reg none = {0};
        fj_call(b, (const void *)abort, a, 7, none);
        break;
    }
    }
    misuse_done(rt, b, b2, what);
}
END_TEST

/* Instructions shaped like the builder's template paths (all vector
 * registers; zmm and one memory operand) but wrong in one way still fail
 * with a message, on both ISAs: those paths leave anything doubtful to the
 * general one, which reports it. */
enum {
    FM_FREED_VEC, FM_OTHER_BUILDER_VEC, FM_BCST_REG, FM_MIXED_WIDTH, FM_STALE_BASE,
    FM_STALE_INDEX, FM_STALE_MASK, FM_SCALE3, FM_SCALE3_NOINDEX, FM_RSP_INDEX_IMM, FM_BIG_IMM,
    FM_ZMM_AVX2, FM__N
};

START_TEST(builder_fast_path_misuse) {
    for (int isa = 0; isa < 2; isa++) {
        int z = isa == 1;
        if (z && !fjt_have_avx512()) continue;
        fj_runtime *rt = make_rt(z ? FJ_ISA_AVX512 : FJ_ISA_AVX2);
        fj_builder *b = new_b(rt, 2), *b2 = NULL;
        fj_reg v = fj_vreg(b), w = fj_vreg(b), g = fj_gpr(b);
        fj_opnd V = fj_vec(b, v), W = fj_vec(b, w), M = fj_mem(0, fj_arg(b, 0), 64);
        const char *what = "?";
        switch (_i) {
        case FM_FREED_VEC:
            what = "freed vector register";
            fj_release(b, w);
            fj_emit(b, FJ_VADDPS, V, V, W);
            break;
        case FM_OTHER_BUILDER_VEC: {
            what = "vector register of another builder";
            b2 = new_b(rt, 0);
            fj_vreg(b2);
            fj_vreg(b2);
            fj_emit(b, FJ_VMULPS, V, V, fj_vec(b, fj_vreg(b2)));
            break;
        }
        case FM_BCST_REG:
            what = "broadcast flag on a register";
            fj_emit(b, FJ_VADDPS, V, V, fj_bcst(W));
            break;
        case FM_MIXED_WIDTH:
            what = "vaddps with mixed widths";
            fj_emit(b, FJ_VADDPS, V, fj_xmm(v), W);
            break;
        case FM_STALE_BASE:
            what = "freed base register";
            fj_release(b, g);
            fj_emit(b, FJ_VMOVUPS, V, fj_mem(0, g, 0));
            break;
        case FM_STALE_INDEX:
            what = "freed index register";
            fj_release(b, g);
            fj_emit(b, FJ_VMOVUPS, V, fj_memx(0, fj_arg(b, 0), g, 4, 0));
            break;
        case FM_STALE_MASK: {
            what = z ? "freed mask register" : "mask register on AVX2";
            fj_reg k = fj_kreg(b);
            fj_release(b, k);
            fj_emit(b, FJ_VMOVUPS, fj_masked(V, k, 1), M);
            break;
        }
        case FM_SCALE3:
            what = "scale 3 with an index";
            fj_emit(b, FJ_VMAXPS, V, V, fj_memx(0, fj_arg(b, 0), fj_arg(b, 1), 3, 0));
            break;
        case FM_SCALE3_NOINDEX: {
            what = "scale 3 without an index";
            fj_opnd m = M;
            m.scale = 3;
            fj_emit(b, FJ_VMOVUPS, m, V);
            break;
        }
        case FM_RSP_INDEX_IMM:
            what = "vpternlogd with a memory operand and an 8-bit immediate out of range";
            fj_emit(b, FJ_VPTERNLOGD, V, W, M, fj_imm(300));
            break;
        case FM_BIG_IMM:
            what = "vpslld by an immediate out of range";
            fj_emit(b, FJ_VPSLLD, V, W, fj_imm(1000));
            break;
        case FM_ZMM_AVX2:
            what = z ? "ymm register used as zmm with a ymm" : "zmm on AVX2";
            fj_emit(b, FJ_VADDPS, fj_zmm(v), fj_zmm(v), z ? fj_ymm(w) : fj_zmm(w));
            break;
        }
        misuse_done(rt, b, b2, what);
    }
}
END_TEST

/* Errors are sticky: a good instruction after a bad one does not clear it,
 * and the message is the first error's. */
START_TEST(builder_sticky) {
    fj_runtime *rt = make_rt(FJ_ISA_AVX2);
    fj_builder *b = new_b(rt, 1);
    fj_emit0(b, FJ_RET);
    fj_reg r = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(r), fj_imm(1));
    fj_return(b, fj_r64(r));
    finish_fails(b, "sticky");
    ck_assert_msg(strstr(fj_last_error(), "ret") != NULL, "not the first error: %s", fj_last_error());
    still_works(rt);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- relu correctness -------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float ref(float x, float alpha) { return x > 0 ? x : alpha * x; }

/* Same float, with -0.0 == +0.0 and NaN == NaN. */
static int same(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

#define GUARD 16
#define CANARY 1234.5f

/* Runs one relu case with canaries on both sides of dst. */
static void relu_case(fj_runtime *rt, float alpha, size_t n, size_t soff, size_t doff, int inplace) {
    size_t cap = n + 2 * GUARD + 32;
    float *sbuf = malloc(cap * sizeof(float)), *dbuf = malloc(cap * sizeof(float));
    ck_assert(sbuf && dbuf);
    float *src = sbuf + GUARD + soff;
    float *dst = inplace ? src : dbuf + GUARD + doff;
    for (size_t i = 0; i < cap; i++) dbuf[i] = CANARY;
    for (size_t i = 0; i < cap; i++) sbuf[i] = CANARY;
    for (size_t i = 0; i < n; i++) src[i] = ((float)(int)(rnd() % 2001) - 1000.0f) / 64.0f;
    float *want = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) want[i] = ref(src[i], alpha);
    fj_status s = fj_eltwise_f32(rt, FJ_ELT_RELU, alpha, 0.0f, src, dst, n);
    ck_assert_msg(s == FJ_OK, "n=%zu: %s", n, fj_last_error());
    /* One assertion per case: a passing ck_assert costs a message to the
     * parent process in fork mode. */
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (!same(dst[i], want[i])) bad = i;
    ck_assert_msg(bad == n, "isa %d alpha %g n=%zu soff=%zu doff=%zu inplace=%d: dst[%zu] = %g, "
                  "want %g", (int)fj_runtime_isa(rt), alpha, n, soff, doff, inplace, bad,
                  bad < n ? dst[bad] : 0.0f, bad < n ? want[bad] : 0.0f);
    float *buf = inplace ? sbuf : dbuf;
    ptrdiff_t before = -1, after = -1;
    for (float *p = buf; p < dst && before < 0; p++)
        if (*p != CANARY) before = dst - p;
    for (float *p = dst + n; p < buf + cap && after < 0; p++)
        if (*p != CANARY) after = p - (dst + n);
    ck_assert_msg(before < 0, "n=%zu: wrote %td floats before dst", n, before);
    ck_assert_msg(after < 0, "n=%zu: wrote %td floats past dst", n, after);
    free(want);
    free(sbuf);
    free(dbuf);
}

/* loop index: bit 0 ISA, bit 1 alpha */
START_TEST(relu_random) {
    fj_runtime *rt = make_rt((_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512);
    if (!rt) return;
    float alpha = (_i & 2) ? 0.125f : 0.0f;
    for (size_t n = 0; n <= 130; n++) relu_case(rt, alpha, n, n % 5, (n * 3) % 7, 0);
    for (int it = 0; it < 300; it++) {
        size_t n = rnd() % 5001;
        relu_case(rt, alpha, n, rnd() % 16, rnd() % 16, rnd() % 4 == 0);
    }
    relu_case(rt, alpha, 5000, 0, 0, 1);
    fj_runtime_destroy(rt);
    /* Many threads: the split must cover every element exactly once. */
    rt = fjt_runtime((_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512, 0);
    for (int it = 0; it < 50; it++) relu_case(rt, alpha, rnd() % 200000, rnd() % 16, rnd() % 16, 0);
    fj_runtime_destroy(rt);
}
END_TEST

START_TEST(relu_special) {
    fj_runtime *rt = make_rt((_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512);
    if (!rt) return;
    const float qnan = __builtin_nanf(""), nnan = -__builtin_nanf("");
    const float in[] = {qnan, nnan, INFINITY, -0.0f, 0.0f, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f,
                        1.0f, -1.0f, 1.17549435e-38f, -1.17549435e-38f};
    enum { NIN = sizeof in / sizeof in[0] };
    /* Repeat the pattern so every lane position and the tail see each value. */
    size_t n = NIN * 37;
    float *src = malloc(n * sizeof *src), *dst = malloc(n * sizeof *dst);
    for (size_t i = 0; i < n; i++) src[i] = in[i % NIN];
    for (int a = 0; a < 2; a++) {
        float alpha = a ? 0.5f : 0.0f;
        ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, alpha, 0, src, dst, n), FJ_OK);
        for (size_t i = 0; i < n; i++) {
            float x = src[i], y = dst[i];
            if (isnan(x) ? !isnan(y) : !same(y, ref(x, alpha)))
                ck_abort_msg("isa %d alpha %g: relu(%g) = %g, want %g (element %zu)",
                             (int)fj_runtime_isa(rt), alpha, x, y, isnan(x) ? x : ref(x, alpha), i);
        }
        /* Sign of zero: documented, not asserted. */
        printf("isa %d alpha %g: relu(-0.0) = %s0.0, relu(-1e-45) = %g\n", (int)fj_runtime_isa(rt),
               alpha, signbit(dst[3]) ? "-" : "+", dst[6]);
    }
    /* -Inf: the header's formula gives alpha * -Inf, NaN for alpha 0; 0 is
     * the mathematical relu. Accept either for alpha 0, record which. */
    float ni[16], no[16];
    for (int i = 0; i < 16; i++) ni[i] = -INFINITY;
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0.0f, 0, ni, no, 16), FJ_OK);
    for (int i = 0; i < 16; i++) ck_assert(isnan(no[i]) || no[i] == 0.0f);
    printf("isa %d: relu(-inf) with alpha 0 = %g\n", (int)fj_runtime_isa(rt), no[0]);
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0.5f, 0, ni, no, 16), FJ_OK);
    for (int i = 0; i < 16; i++) ck_assert(no[i] == -INFINITY);
    free(src);
    free(dst);
    fj_runtime_destroy(rt);
}
END_TEST

/* The same input through both ISAs gives bit-identical output. */
START_TEST(relu_isas_agree) {
    if (!fjt_have_avx512()) return;
    fj_runtime *a = make_rt(FJ_ISA_AVX512), *b = make_rt(FJ_ISA_AVX2);
    size_t n = 4099;
    float *src = malloc(n * sizeof(float)), *d1 = malloc(n * sizeof(float)),
          *d2 = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) src[i] = ((float)(int)(rnd() % 20001) - 10000.0f) / 3.0f;
    for (int k = 0; k < 2; k++) {
        float alpha = k ? 0.3f : 0.0f;
        ck_assert_int_eq(fj_eltwise_f32(a, FJ_ELT_RELU, alpha, 0, src, d1, n), FJ_OK);
        ck_assert_int_eq(fj_eltwise_f32(b, FJ_ELT_RELU, alpha, 0, src, d2, n), FJ_OK);
        ck_assert(memcmp(d1, d2, n * sizeof(float)) == 0);
    }
    free(src);
    free(d1);
    free(d2);
    fj_runtime_destroy(a);
    fj_runtime_destroy(b);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("api");
    TCase *t = tcase_create("bad_input");
    tcase_add_test(t, status_strings);
    tcase_add_test(t, symbolize_non_jit);
    tcase_add_test(t, create_bad);
    tcase_add_test(t, create_bad_env);
    tcase_add_loop_test(t, eltwise_bad, 0, 2);
    tcase_add_test(t, builder_create_bad);
    tcase_add_loop_test(t, builder_misuse, 0, MIS__N);
    tcase_add_loop_test(t, builder_fast_path_misuse, 0, FM__N);
    tcase_add_test(t, builder_sticky);
    suite_add_tcase(s, t);
    TCase *c = tcase_create("relu");
    tcase_set_timeout(c, 120);
    tcase_add_loop_test(c, relu_random, 0, 4);
    tcase_add_loop_test(c, relu_special, 0, 2);
    tcase_add_test(c, relu_isas_agree);
    suite_add_tcase(s, c);
    return s;
}

int main(void) {
    /* The suites choose ISAs and threads themselves. */
    unsetenv("FRAMEJIT_ISA");
    unsetenv("FRAMEJIT_THREADS");
    return fjt_run_suite(suite());
}
