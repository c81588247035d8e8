/* test_emit_paths.c: the builder's template paths (x64_encode_vregs and
 * x64_encode_vmem) and the math ops' replays (kb_replay) change how fast
 * kernels are emitted, never what is emitted. Every generator's kernels,
 * on both ISAs, come out byte for byte the same (and with the same frame
 * records) as when every instruction goes through the encoder's table
 * search, and as when every copy of a math op is made by its emitter: this
 * checks the builder's translation of operands into those paths
 * (registers, bases, indexes, scales, displacements, masks, broadcasts)
 * and the replays' renaming in the instructions real kernels are made of.
 * The paths' own encodings are compared form by form in x64_golden and
 * x64_zydis. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "fjtest.h"
#include "kernels/builder/builder_int.h"
#include "kernels/gen/eltwise_gen.h"
#include "kernels/gen/gemm_gen.h"
#include "kernels/builder/verify.h"
#include "kernels/x64/x64.h"
#include "runtime/prims/eltslot.h"

typedef void (*gen_fn)(fj_builder *b, const void *ctx);

/* Code is never run here: any ISA can be generated on any CPU. */
static const uint32_t all_features = X64_F_AVX | X64_F_AVX2 | X64_F_FMA | X64_F_BMI2 |
                                     X64_F_F16C | X64_F_AVX512F | X64_F_AVX512VL |
                                     X64_F_AVX512BW | X64_F_AVX512DQ;
static long compared;

/* way: 0 everything on; 1 no template paths; 2 no replays. */
static fj_status assemble(fj_isa isa, int nargs, gen_fn gen, const void *ctx, int way,
                          kb_code *out) {
    fj_builder *b = NULL;
    kb_test_fast_paths(way != 1);
    kb_test_replays(way != 2);
    ck_assert_int_eq(kb_new("emit_paths", nargs, isa, all_features, NULL, &b), FJ_OK);
    gen(b, ctx);
    fj_status s = kb_assemble(b, out);
    kb_free(b);
    /* These kernels are only assembled, never placed: the verifier, which
     * the runtime runs on every kernel it places in the tests, runs here. */
    if (s == FJ_OK)
        ck_assert_msg(kv_verify("emit_paths", out->bytes, out->code_len, out->recs, out->nrecs) ==
                          FJ_OK,
                      "%s", fj_last_error());
    kb_test_fast_paths(1);
    kb_test_replays(1);
    return s;
}

static const char *const ways[3] = {"", "without the template paths", "without replays"};

/* 1 when a and c hold the same bytes; *at: where they first differ. */
static int same_bytes(const kb_code *a, const kb_code *c, size_t *at) {
    size_t i = 0;
    while (i < a->len && i < c->len && a->bytes[i] == c->bytes[i]) i++;
    *at = i;
    return a->len == c->len && i == a->len;
}

/* Returns 1 if the kernel was made (every way) and compared, 0 if the
 * generator refuses the configuration (every way, with the same message). */
static int same(fj_isa isa, int nargs, gen_fn gen, const void *ctx, const char *what) {
    kb_code a, c;
    fj_status sa = assemble(isa, nargs, gen, ctx, 0, &a);
    char why[256];
    snprintf(why, sizeof why, "%s", fj_last_error());
    for (int way = 1; way <= 2; way++) {
        fj_status sc = assemble(isa, nargs, gen, ctx, way, &c);
        ck_assert_msg(sa == sc, "%s: %s, %s %s (%s / %s)", what, fj_status_str(sa),
                      fj_status_str(sc), ways[way], why, fj_last_error());
        if (sa != FJ_OK) {
            ck_assert_str_eq(why, fj_last_error());
            continue;
        }
        size_t at;
        ck_assert_msg(same_bytes(&a, &c, &at),
                      "%s (%s): %zu vs %zu bytes %s, first difference at byte %zu", what,
                      isa == FJ_ISA_AVX512 ? "avx512" : "avx2", a.len, c.len, ways[way], at);
        ck_assert_msg(a.code_len == c.code_len && a.nrecs == c.nrecs &&
                          !memcmp(a.recs, c.recs, a.nrecs * sizeof *a.recs),
                      "%s: frame records differ %s", what, ways[way]);
        kb_code_free(&c);
    }
    if (sa != FJ_OK) return 0;
    kb_code_free(&a);
    compared++;
    return 1;
}

START_TEST(eltwise_reduce_softmax) {
    for (int isa = 0; isa < 2; isa++)
        for (int v = 0; v < RT_SLOT__N; v++) {
            rt_slot e = v;
            char what[64];
            snprintf(what, sizeof what, "pinned slot %d (%s)", v, rt_slot_name(e));
            ck_assert_msg(same(isa ? FJ_ISA_AVX512 : FJ_ISA_AVX2, KG_ELT_NARGS, rt_elt_gen, &e, what),
                          "%s: not generated: %s", what, fj_last_error());
        }
    ck_assert_int_eq(compared, 2 * RT_SLOT__N);
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
 * interleaved order directly, constant-pool fixups included; a label, a
 * jump (forward, or backward with no fixup) or kb_align_next's place
 * inside the span is refused. */
typedef struct ilv_ctx {
    int order;    /* 0: streams, then kb_interleave; 1: interleaved by hand */
    int bad;      /* 1: a label bound inside; 2: a jump inside; 3: a backward one;
                   * 4: kb_align_next's place */
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
                if (l == 1 && k == 4 && c->bad == 4) kb_align_next(b, 32, 16);
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
        ck_assert_int_eq(assemble(i, 1, ilv_gen, &(ilv_ctx){0, 0}, 0, &a), FJ_OK);
        ck_assert_int_eq(assemble(i, 1, ilv_gen, &(ilv_ctx){1, 0}, 0, &c), FJ_OK);
        ck_assert_msg(a.len == c.len && !memcmp(a.bytes, c.bytes, a.len),
                      "interleaved streams differ from the interleaved emission (%zu / %zu bytes)",
                      a.len, c.len);
        kb_code_free(&a);
        kb_code_free(&c);
        for (int bad = 1; bad <= 4; bad++) {
            ck_assert_int_ne(assemble(i, 1, ilv_gen, &(ilv_ctx){0, bad}, 0, &a), FJ_OK);
            ck_assert_msg(strstr(fj_last_error(), "straight-line"), "%s", fj_last_error());
        }
    }
}
END_TEST

/* kb_trace_begin/_end and kb_replay: a recording replayed in three copies
 * with renamed registers gives the bytes of the same instructions emitted
 * by hand, interleaved: register-only forms (signed and unsigned imm8, an
 * is4 register on AVX2), masked and mask-writing instructions,
 * constant-pool (a compare into a mask and masked ones among them), one
 * whose ModRM.reg is an opcode extension, and GPR-based memory
 * operands (their fixups where the copies put them), a register all
 * copies share; the copies after the first on zmm16 and up. What cannot be
 * replayed is refused. */
typedef struct rp_ctx {
    int by_hand;
    int bad;      /* 1 a jump, 2 a label bound, 3 fj_return, 4 nested, 5 a released target */
    int ended;    /* out: what kb_trace_end said */
} rp_ctx;

static void rp_insn(fj_builder *b, int k, fj_reg src, fj_reg x, fj_reg t, fj_reg m, fj_reg sh,
                    fj_opnd cs) {
    const fj_opnd X = fj_vec(b, x), T = fj_vec(b, t), S = fj_vec(b, sh);
    switch (k) {
    case 0: fj_emit(b, FJ_VMOVAPS, T, S); break;
    case 1: fj_emit(b, FJ_VFMADD231PS, T, X, S); break;
    case 2: fj_emit(b, FJ_VPSLLD, T, T, fj_imm(23)); break;
    case 3: fj_emit(b, FJ_VPTERNLOGD, X, T, S, fj_imm(0xe4)); break;
    case 4: fj_emit(b, FJ_VMULPS, X, X, cs); break;
    case 5: fj_emit(b, FJ_VCMPPS, fj_k(m), X, T, fj_imm(0x1d)); break;
    case 6: fj_emit(b, FJ_VSUBPS, fj_masked(X, m, 0), X, T); break;
    case 7: fj_emit(b, FJ_VADDPS, X, X, fj_mem(0, src, 64)); break;
    case 8: fj_emit(b, FJ_VXORPS, T, T, T); break;
    case 10: fj_emit(b, FJ_VCMPPS, fj_k(m), X, cs, fj_imm(0x11)); break; /* a mask from the pool */
    case 11: fj_emit(b, FJ_VADDPS, fj_masked(T, m, 1), X, cs); break;
    case 12: fj_emit(b, FJ_VPSRLD, fj_masked(T, m, 1), X, fj_imm(3)); break; /* ModRM.reg: /2 */
    case 13: fj_emit(b, FJ_VFMADD213PS, fj_masked(X, m, 0), T, cs); break;
    default: fj_emit(b, FJ_VBLENDVPS, X, T, X, S); break;
    }
}

static void rp_gen(fj_builder *b, const void *p) {
    rp_ctx *c = (rp_ctx *)p;
    const int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    enum { COPIES = 3 };
    static const int seq512[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 1},
                     seq2[] = {0, 1, 2, 4, 7, 9, 8, 1};
    const int *seq = avx512 ? seq512 : seq2;
    const int n = avx512 ? 14 : 8;
    fj_reg src = fj_arg(b, 0), sh = fj_vreg(b), x[COPIES], t[COPIES], m[COPIES] = {{0}};
    const float h[8] = {1.5f, 1.5f, 1.5f, 1.5f, 1.5f, 1.5f, 1.5f, 1.5f};
    fj_opnd cs = avx512 ? fj_bcst(fj_const_f32(b, 1.5f)) : fj_const_data(b, h, 32, 32, 0);
    for (int l = 0; l < COPIES; l++) {
        x[l] = fj_vreg(b);
        t[l] = fj_vreg(b);
        if (avx512) m[l] = fj_kreg(b);
        /* zmm16 and up for the copies after the recorded one: their
         * encodings need the bits the recording's registers leave clear. */
        for (int i = 0; l == 0 && avx512 && i < 16; i++) (void)fj_vreg(b);
    }
    if (c->by_hand) {
        for (int i = 0; i < n; i++)
            for (int l = 0; l < COPIES; l++) rp_insn(b, seq[i], src, x[l], t[l], m[l], sh, cs);
    } else {
        kb_trace tr;
        fj_label lbl = fj_label_new(b);
        kb_trace_begin(b, &tr);
        for (int i = 0; i < n; i++) {
            rp_insn(b, seq[i], src, x[0], t[0], m[0], sh, cs);
            if (i == 3 && c->bad == 1) fj_emit(b, FJ_JMP, fj_lbl(lbl));
            if (i == 3 && c->bad == 2) fj_label_bind(b, lbl);
            if (i == 3 && c->bad == 3) fj_return(b, fj_none());
            if (i == 3 && c->bad == 4) kb_trace_begin(b, &(kb_trace){.n = 0});
        }
        c->ended = kb_trace_end(b);
        if (c->bad == 5) fj_release(b, t[2]);
        const int nmap = avx512 ? 3 : 2;
        fj_reg from[3] = {x[0], t[0], m[0]}, to[COPIES * 3];
        for (int l = 0; l < COPIES; l++) {
            to[l * nmap] = x[l];
            to[l * nmap + 1] = t[l];
            if (avx512) to[l * nmap + 2] = m[l];
        }
        if (c->ended) kb_replay(b, &tr, COPIES, from, to, nmap);
        if (c->bad != 2) fj_label_bind(b, lbl);
    }
    fj_return(b, fj_none());
}

START_TEST(replay) {
    for (int isa = 0; isa < 2; isa++) {
        fj_isa i = isa ? FJ_ISA_AVX512 : FJ_ISA_AVX2;
        for (int way = 0; way < 2; way++) {   /* the replay's template paths on and off */
            kb_code a, c;
            rp_ctx r = {0, 0, 0}, h = {1, 0, 0};
            ck_assert_msg(assemble(i, 1, rp_gen, &r, way, &a) == FJ_OK, "%s", fj_last_error());
            ck_assert_int_eq(r.ended, 1);
            ck_assert_int_eq(assemble(i, 1, rp_gen, &h, way, &c), FJ_OK);
            size_t at;
            ck_assert_msg(same_bytes(&a, &c, &at),
                          "replayed copies differ from the instructions emitted by hand (%s, %zu / "
                          "%zu bytes, first difference at %zu)", isa ? "avx512" : "avx2", a.len,
                          c.len, at);
            kb_code_free(&a);
            kb_code_free(&c);
        }
        /* A jump or a label: not recorded; the kernel is still made (the
         * generator would emit the chain itself). */
        for (int bad = 1; bad <= 2; bad++) {
            rp_ctx r = {0, bad, 1};
            kb_code a;
            ck_assert_int_eq(assemble(i, 1, rp_gen, &r, 0, &a), FJ_OK);
            ck_assert_int_eq(r.ended, 0);
            kb_code_free(&a);
        }
        static const char *const why[] = {"outside fj_emitv", "while recording another",
                                          "not live"};
        for (int bad = 3; bad <= 5; bad++) {
            rp_ctx r = {0, bad, 0};
            kb_code a;
            ck_assert_int_ne(assemble(i, 1, rp_gen, &r, 0, &a), FJ_OK);
            ck_assert_msg(strstr(fj_last_error(), why[bad - 3]), "%s", fj_last_error());
        }
    }
}
END_TEST

/* kb_replay_shift: a recording replayed with the displacements of its
 * memory operands on some bases moved gives the bytes of the same
 * instructions emitted by hand with those displacements, whatever form
 * the moved displacement takes (none, disp8 scaled by EVEX's N, disp32;
 * bases that need a SIB byte or a displacement), on zmm memory forms
 * (masked, broadcast, with an index or an imm8), prefetches, GPR loads;
 * operands on the frame, the constant pool and other registers are not
 * moved. A displacement moved out of int32 and a base that is not a live
 * register are errors. */
typedef struct sh_ctx {
    int by_hand;
    int32_t delta;   /* the move of base 0; base 1 moves by delta + 64, base 2 by -delta */
    int bad;         /* 1: base 2 released before the replay */
    int ended;       /* out: recordings kb_trace_end took */
} sh_ctx;

static void sh_insns(fj_builder *b, const fj_reg *g, fj_reg v0, fj_reg v1, fj_reg k, fj_opnd slot,
                     fj_opnd cs, int32_t d0, int32_t d1, int32_t d2) {
    const int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    const fj_opnd V0 = fj_vec(b, v0), V1 = fj_vec(b, v1);
    fj_emit(b, FJ_VMOVUPS, V0, fj_mem(0, g[0], d0));
    fj_emit(b, FJ_VMOVUPS, fj_memx(0, g[1], g[3], 4, 64 + d1), V1);
    fj_emit(b, FJ_PREFETCHT0, fj_mem(0, g[2], 4 + d2));
    fj_emit(b, FJ_MOV, fj_r64(g[4]), fj_mem(64, g[0], 8 + d0));
    fj_emit(b, FJ_MOV, slot, fj_r64(g[4]));
    fj_emit(b, FJ_ADD, fj_r64(g[4]), fj_r64(g[3]));
    fj_emit(b, FJ_VMULPS, V0, V0, cs);
    fj_emit(b, FJ_VFMADD231PS, V0, V1, V0);
    if (avx512) {
        fj_emit(b, FJ_VFMADD231PS, V0, V1, fj_bcst(fj_mem(32, g[1], 4 + d1)));
        fj_emit(b, FJ_VBROADCASTSS, V1, fj_mem(32, g[2], -4 + d2));
        fj_emit(b, FJ_VADDPS, fj_masked(V0, k, 1), V1, fj_mem(0, g[2], 128 + d2));
        fj_emit(b, FJ_VPTERNLOGD, V1, V0, fj_mem(0, g[0], 64 + d0), fj_imm(0xe4));
    } else {
        fj_emit(b, FJ_VBROADCASTSS, V1, fj_mem(32, g[2], -4 + d2));
        fj_emit(b, FJ_VADDPS, V0, V1, fj_memx(0, g[0], g[3], 8, d0));
    }
}

static void sh_gen(fj_builder *b, const void *p) {
    sh_ctx *c = (sh_ctx *)p;
    const int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    /* Every register, so that bases land on r12 and r13 (a SIB byte, a
     * displacement even for 0). */
    fj_reg all[13], g[5];
    const int n = 13;   /* all but the argument's */
    for (int i = 0; i < n; i++) all[i] = fj_gpr(b);
    g[0] = all[n - 1];
    g[1] = all[n - 4];
    g[2] = all[n - 3];
    g[3] = all[0];
    g[4] = all[1];
    const fj_reg v0 = fj_vreg(b), v1 = fj_vreg(b), k = avx512 ? fj_kreg(b) : (fj_reg){0};
    const fj_opnd slot = fj_stack_slot(b, 8, 8, 64);
    const float h[8] = {2.f, 2.f, 2.f, 2.f, 2.f, 2.f, 2.f, 2.f};
    const fj_opnd cs = avx512 ? fj_bcst(fj_const_f32(b, 2.f)) : fj_const_data(b, h, 32, 32, 0);
    const int32_t d = c->delta;
    for (int rep = 0; rep < 2; rep++) {   /* once moved, once as recorded */
        const int32_t m = rep ? 0 : d;
        if (c->by_hand) {
            sh_insns(b, g, v0, v1, k, slot, cs, m, m + 64, -m);
            continue;
        }
        kb_trace tr;
        kb_trace_begin(b, &tr);
        sh_insns(b, g, v0, v1, k, slot, cs, 0, 0, 0);
        c->ended += kb_trace_end(b);
        if (c->bad == 1) fj_release(b, g[2]);
        const int32_t delta[3] = {m, m + 64, -m};
        kb_replay_shift(b, &tr, g, delta, 3);
    }
    fj_return(b, fj_none());
}

START_TEST(replay_shift) {
    static const int32_t deltas[] = {0,    4,     6,    60,      64,      124,   128,  252,
                                     256,  508,   512,  8192,    -4,      -64,   -65,  -128,
                                     -512, 1 << 20, -(1 << 20), 0x3fffff00};
    for (int isa = 0; isa < 2; isa++) {
        fj_isa i = isa ? FJ_ISA_AVX512 : FJ_ISA_AVX2;
        for (size_t j = 0; j < sizeof deltas / sizeof deltas[0]; j++)
            for (int way = 0; way < 2; way++) {   /* the template paths on and off */
                kb_code a, c;
                sh_ctx r = {0, deltas[j], 0, 0}, h = {1, deltas[j], 0, 0};
                ck_assert_msg(assemble(i, 1, sh_gen, &r, way, &a) == FJ_OK, "%s", fj_last_error());
                ck_assert_int_eq(r.ended, 2);
                ck_assert_msg(assemble(i, 1, sh_gen, &h, way, &c) == FJ_OK, "%s", fj_last_error());
                size_t at;
                ck_assert_msg(same_bytes(&a, &c, &at),
                              "moved replay differs from the instructions emitted by hand (%s, "
                              "delta %d, %s, %zu / %zu bytes, first difference at %zu)",
                              isa ? "avx512" : "avx2", deltas[j], ways[way], a.len, c.len, at);
                kb_code_free(&a);
                kb_code_free(&c);
            }
        kb_code a;
        sh_ctx r = {0, 0x7fffff80, 0, 0};   /* base 1's operand moves past int32 */
        ck_assert_int_ne(assemble(i, 1, sh_gen, &r, 0, &a), FJ_OK);
        r = (sh_ctx){0, 64, 1, 0};
        ck_assert_int_ne(assemble(i, 1, sh_gen, &r, 0, &a), FJ_OK);
        ck_assert_msg(strstr(fj_last_error(), "not a live general register"), "%s",
                      fj_last_error());
    }
}
END_TEST

/* kb_vmov_run: a run of vmovups loads and vmovups / vmovntps stores gives
 * the bytes of the same instructions emitted one by one, whatever form
 * each displacement takes (none, disp8 scaled by EVEX's N, disp32), on
 * bases that need a SIB byte or a displacement (r12, r13), with zmm16 and
 * up, on both ISAs; a released register is the error fj_emit reports,
 * and a run past int32 an error of its own. */
typedef struct vr_ctx {
    int by_hand;
    int32_t disp, step;
    int bad;   /* 1: a register of the runs released first */
} vr_ctx;

static void vr_gen(fj_builder *b, const void *p) {
    const vr_ctx *c = (const vr_ctx *)p;
    const int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    fj_reg all[13], v[8];
    for (int i = 0; i < 13; i++) all[i] = fj_gpr(b);   /* every one: r12 and r13 among them */
    for (int i = 0; i < 8; i++) {
        v[i] = fj_vreg(b);
        for (int j = 0; avx512 && i == 3 && j < 16; j++) (void)fj_vreg(b);   /* v[4..]: zmm20.. */
    }
    if (c->bad) fj_release(b, v[5]);
    for (int g = 0; g < 13; g++) {
        const int n = 1 + g % 8;
        for (int kind = 0; kind < 3; kind++) {
            const fj_op op = kind == 2 ? FJ_VMOVNTPS : FJ_VMOVUPS;
            const int store = kind != 0;
            if (!c->by_hand) {
                kb_vmov_run(b, op, store, v, n, all[g], c->disp, c->step);
                continue;
            }
            for (int i = 0; i < n; i++) {
                const fj_opnd mo = fj_mem(0, all[g], c->disp + c->step * i), V = fj_vec(b, v[i]);
                fj_emit(b, op, store ? mo : V, store ? V : mo);
            }
        }
    }
    fj_return(b, fj_none());
}

START_TEST(vmov_run) {
    static const int32_t runs[][2] = {{0, 64},     {0, -64},  {120 * 64, 64}, {-8192, 64},
                                      {4, 64},     {0, 32},   {-128, 4},      {0x7fff0000, 64},
                                      {8128, 0}};
    for (int isa = 0; isa < 2; isa++) {
        const fj_isa i = isa ? FJ_ISA_AVX512 : FJ_ISA_AVX2;
        for (size_t j = 0; j < sizeof runs / sizeof runs[0]; j++)
            for (int way = 0; way < 2; way++) {   /* the template paths on and off */
                kb_code a, c;
                vr_ctx r = {0, runs[j][0], runs[j][1], 0}, h = {1, runs[j][0], runs[j][1], 0};
                ck_assert_msg(assemble(i, 1, vr_gen, &r, way, &a) == FJ_OK, "%s", fj_last_error());
                ck_assert_msg(assemble(i, 1, vr_gen, &h, way, &c) == FJ_OK, "%s", fj_last_error());
                size_t at;
                ck_assert_msg(same_bytes(&a, &c, &at),
                              "run differs from the moves emitted one by one (%s, disp %d step %d, "
                              "%s, %zu / %zu bytes, first difference at %zu)",
                              isa ? "avx512" : "avx2", runs[j][0], runs[j][1], ways[way], a.len,
                              c.len, at);
                kb_code_free(&a);
                kb_code_free(&c);
            }
        kb_code a;
        for (int by_hand = 0; by_hand < 2; by_hand++) {   /* the same error either way */
            vr_ctx r = {by_hand, 0, 64, 1};
            ck_assert_int_ne(assemble(i, 1, vr_gen, &r, 0, &a), FJ_OK);
            ck_assert_msg(strstr(fj_last_error(), "is not live in this builder"), "%s",
                          fj_last_error());
        }
        vr_ctx r;
        r = (vr_ctx){0, INT32_MAX - 64, 64, 0};   /* the third move's past int32 */
        ck_assert_int_ne(assemble(i, 1, vr_gen, &r, 0, &a), FJ_OK);
        ck_assert_msg(strstr(fj_last_error(), "out of int32"), "%s", fj_last_error());
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
    tcase_add_test(tc, replay);
    tcase_add_test(tc, replay_shift);
    tcase_add_test(tc, vmov_run);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
