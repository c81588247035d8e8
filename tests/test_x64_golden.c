/* test_x64_golden.c: the encoder against its golden triples
 * (support/x64_golden_cases.c), its error cases, and its form words. */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/x64/x64.h"
#include "kernels/x64/x64_templ.h"
#include "fjtest.h"
#include "x64_golden_cases.h"


static int unhex(const char *s, uint8_t *out) {
    int n = 0;
    while (*s) {
        unsigned v;
        if (sscanf(s, "%2x", &v) != 1) break;
        out[n++] = (uint8_t)v;
        s += 2;
        while (*s == ' ') s++;
    }
    return n;
}

START_TEST(test_golden) {
    const golden *g = &x64_golden_cases[_i];
    uint8_t want[16], got[X64_MAX_LEN + 8];
    int nwant = unhex(g->hex, want);
    memset(got, 0xA5, sizeof got);
    x64_enc_info info;
    int len = x64_encode(g->op, g->o, g->n, got, &info);
    ck_assert_msg(len > 0, "%s: %s", g->text, x64_err_str(len));
    char hex[64] = "";
    for (int i = 0; i < len && i < 15; i++) snprintf(hex + 3 * i, sizeof hex - 3 * (size_t)i, "%02x ", got[i]);
    ck_assert_msg(len == nwant && !memcmp(got, want, (size_t)len), "%s: got %s want %s", g->text, hex, g->hex);
    for (int i = X64_MAX_LEN; i < (int)sizeof got; i++) ck_assert_int_eq(got[i], 0xA5);
    /* RIP-relative operands report where their disp32 sits. */
    int rip = 0;
    for (int i = 0; i < g->n; i++)
        if (g->o[i].kind == X64_K_MEM && g->o[i].base == X64_RIP) {
            rip = 1;
            ck_assert_msg(info.disp_pos > 0 && info.disp_pos + 4 <= len, "%s: disp_pos %d", g->text, info.disp_pos);
            int32_t d;
            memcpy(&d, got + info.disp_pos, 4);
            ck_assert_msg(d == g->o[i].disp, "%s: disp at disp_pos", g->text);
        }
    if (!rip) ck_assert_int_eq(info.disp_pos, -1);
    if (g->n == 1 && g->o[0].kind == X64_K_REL) {
        ck_assert_int_eq(info.rel_size, g->o[0].bits / 8);
        ck_assert_int_eq(info.rel_pos + info.rel_size, len);
    } else {
        ck_assert_int_eq(info.rel_pos, -1);
    }
}
END_TEST

/* Features reported for a few representative encodings. */
START_TEST(test_features) {
    static const struct { const char *text; x64_op op; int n; x64_opnd o[3]; uint32_t feat; } f[] = {
        { "mov rax, rbx", X(MOV), 2, { Q(RAX), Q(RBX) }, 0 },
        { "vaddps ymm", X(VADDPS), 3, { YMM(0), YMM(1), YMM(2) }, X64_F_AVX },
        { "vpaddd xmm", X(VPADDD), 3, { XMM(0), XMM(1), XMM(2) }, X64_F_AVX },
        { "vpaddd ymm", X(VPADDD), 3, { YMM(0), YMM(1), YMM(2) }, X64_F_AVX2 },
        { "vfmadd231ps ymm", X(VFMADD231PS), 3, { YMM(0), YMM(1), YMM(2) }, X64_F_FMA },
        { "bzhi", X(BZHI), 3, { Q(RAX), Q(RBX), Q(RCX) }, X64_F_BMI2 },
        { "vaddps zmm", X(VADDPS), 3, { ZMM(0), ZMM(1), ZMM(2) }, X64_F_AVX512F },
        { "vaddps ymm16", X(VADDPS), 3, { YMM(16), YMM(1), YMM(2) }, X64_F_AVX512F | X64_F_AVX512VL },
        { "vxorps zmm", X(VXORPS), 3, { ZMM(0), ZMM(1), ZMM(2) }, X64_F_AVX512F | X64_F_AVX512DQ },
        { "vmovss xmm20", X(VMOVSS), 2, { XMM(20), M(32, RAX, 0) }, X64_F_AVX512F },
        { "vbroadcastss ymm, xmm", X(VBROADCASTSS), 2, { YMM(0), XMM(1) }, X64_F_AVX2 },
        { "kmovd", X(KMOVD), 2, { KR(1), KR(2) }, X64_F_AVX512F | X64_F_AVX512BW },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        uint8_t out[X64_MAX_LEN];
        x64_enc_info info;
        ck_assert_int_gt(x64_encode(f[i].op, f[i].o, f[i].n, out, &info), 0);
        ck_assert_msg(info.features == f[i].feat, "%s: features %#x want %#x", f[i].text, info.features, f[i].feat);
    }
    uint8_t out[X64_MAX_LEN];
    x64_opnd o[2] = { Q(RAX), Q(RBX) };
    ck_assert_int_gt(x64_encode(X64_MOV, o, 2, out, NULL), 0);   /* info is optional */
}
END_TEST

typedef struct bad {
    const char *text;
    int err;
    x64_op op;
    int n;
    x64_opnd o[4];
} bad;

static const bad errors[] = {
    { "rsp as index", X64_E_FORM, X(MOV), 2, { Q(RAX), MX(64, RAX, RSP, 1, 0) } },
    { "rip base with index", X64_E_FORM, X(MOV), 2, { Q(RAX), MEM(64, X64_RIP, X64_RBX, 2, 0) } },
    { "scale 3", X64_E_RANGE, X(MOV), 2, { Q(RAX), MX(64, RAX, RBX, 3, 0) } },
    { "gpr 16", X64_E_RANGE, X(MOV), 2, { Q(RAX), GPR(64, 16) } },
    { "base 16", X64_E_RANGE, X(MOV), 2, { Q(RAX), MEM(64, 16, X64_NOREG, 1, 0) } },
    { "zmm32", X64_E_RANGE, X(VADDPS), 3, { ZMM(32), ZMM(1), ZMM(2) } },
    { "k8", X64_E_RANGE, X(KMOVW), 2, { KR(8), KR(1) } },
    { "write mask k8", X64_E_RANGE, X(VADDPS), 3, { ZMMK(0, 8, 0), ZMM(1), ZMM(2) } },
    { "ymm16 in VEX-only vblendvps", X64_E_FORM, X(VBLENDVPS), 4, { YMM(16), YMM(1), YMM(2), YMM(3) } },
    { "ymm16 as is4 operand", X64_E_FORM, X(VBLENDVPS), 4, { YMM(0), YMM(1), YMM(2), YMM(16) } },
    { "zmm in VEX-only vroundps", X64_E_FORM, X(VROUNDPS), 3, { ZMM(0), ZMM(1), IMM(1) } },
    { "xmm16 in vmaskmovps", X64_E_FORM, X(VMASKMOVPS), 3, { XMM(16), XMM(1), M(128, RAX, 0) } },
    { "mask on VEX-only vhaddps", X64_E_FORM, X(VHADDPS), 3, { { .kind = X64_K_VEC, .bits = 256, .reg = 0, .mask = 1 }, YMM(1), YMM(2) } },
    { "mask on a GPR instruction", X64_E_FORM, X(ADD), 2, { { .kind = X64_K_GPR, .bits = 64, .reg = 0, .mask = 1 }, Q(RBX) } },
    { "mask on a source", X64_E_FORM, X(VADDPS), 3, { ZMM(0), ZMMK(1, 1, 0), ZMM(2) } },
    { "zeroing a memory destination", X64_E_FORM, X(VMOVUPS), 2, { { .kind = X64_K_MEM, .bits = 512, .base = X64_RDI, .index = X64_NOREG, .scale = 1, .mask = 1, .zero = 1 }, ZMM(0) } },
    { "zeroing without a mask", X64_E_FORM, X(VADDPS), 3, { ZMMK(0, 0, 1), ZMM(1), ZMM(2) } },
    { "zeroing a mask destination", X64_E_FORM, X(VCMPPS), 4, { { .kind = X64_K_KREG, .bits = 16, .reg = 1, .mask = 2, .zero = 1 }, ZMM(1), ZMM(2), IMM(0) } },
    { "mask on vmovd", X64_E_FORM, X(VMOVD), 2, { { .kind = X64_K_GPR, .bits = 32, .reg = 0, .mask = 1 }, XMM(16) } },
    { "broadcast on vmovups", X64_E_FORM, X(VMOVUPS), 2, { ZMM(0), BC(RAX, 0) } },
    { "broadcast on VEX-only vhaddps", X64_E_FORM, X(VHADDPS), 3, { YMM(0), YMM(1), BC(RAX, 0) } },
    { "broadcast flag on a register", X64_E_FORM, X(VADDPS), 3, { ZMM(0), ZMM(1), { .kind = X64_K_VEC, .bits = 512, .reg = 2, .bcst = 1 } } },
    { "mixed vector widths", X64_E_FORM, X(VADDPS), 3, { ZMM(0), YMM(1), ZMM(2) } },
    { "memory width disagrees", X64_E_FORM, X(VMOVUPS), 2, { YMM(0), M(128, RAX, 0) } },
    { "memory without a size", X64_E_FORM, X(INC), 1, { M(0, RAX, 0) } },
    /* A memory width no form of the mnemonic has is an error, not the
     * nearest size (it used to encode as a 32-bit access). */
    { "128-bit memory for a GPR op", X64_E_FORM, X(ADD), 2, { M(128, RAX, 0), IMM(1) } },
    { "256-bit memory for inc", X64_E_FORM, X(INC), 1, { M(256, RAX, 0) } },
    { "odd memory width", X64_E_FORM, X(NEG), 1, { M(48, RAX, 0) } },
    { "64-bit memory for a vector op", X64_E_FORM, X(VFPCLASSPS), 3, { KR(1), M(64, RAX, 0), IMM(1) } },
    { "lea from a register", X64_E_FORM, X(LEA), 2, { Q(RAX), Q(RBX) } },
    { "push eax", X64_E_FORM, X(PUSH), 1, { D(RAX) } },
    { "mixed GPR sizes", X64_E_FORM, X(ADD), 2, { Q(RAX), D(RBX) } },
    { "shift count register not cl", X64_E_FORM, X(SHL), 2, { Q(RAX), B8(2) } },
    { "8-bit ALU (not in the table)", X64_E_FORM, X(ADD), 2, { B8(0), B8(1) } },
    { "wrong operand count", X64_E_FORM, X(ADD), 1, { Q(RAX) } },
    { "jump to an immediate", X64_E_FORM, X(JMP), 1, { IMM(5) } },
    { "rel without a width", X64_E_FORM, X(JMP), 1, { REL(0, 5) } },
    { "rel8 out of range", X64_E_RANGE, X(JNE), 1, { REL(8, 200) } },
    { "rel32 out of range", X64_E_RANGE, X(CALL), 1, { REL(32, 0x100000000LL) } },
    { "shift count 256", X64_E_RANGE, X(SHL), 2, { Q(RAX), IMM(256) } },
    { "add imm beyond 32 bits", X64_E_RANGE, X(ADD), 2, { Q(RAX), IMM(1LL << 40) } },
    { "mov r32 imm beyond 32 bits", X64_E_RANGE, X(MOV), 2, { D(RAX), IMM(1LL << 33) } },
    { "imul imm beyond 32 bits", X64_E_RANGE, X(IMUL), 3, { Q(RAX), Q(RBX), IMM(1LL << 33) } },
    { "vcmpps predicate 300", X64_E_RANGE, X(VCMPPS), 4, { YMM(0), YMM(1), YMM(2), IMM(300) } },
    { "forced imm8 that does not fit", X64_E_RANGE, X(ADD), 2, { Q(RAX), { .kind = X64_K_IMM, .bits = 8, .imm = 1000 } } },
    { "bad register width", X64_E_FORM, X(MOV), 2, { GPR(24, 0), Q(RBX) } },
    { "vpermps xmm", X64_E_FORM, X(VPERMPS), 3, { XMM(0), XMM(1), XMM(2) } },
    { "unknown mnemonic", X64_E_OP, X64_OP_COUNT, 0, { IMM(0) } },
    { "no mnemonic", X64_E_OP, X64_NONE, 0, { IMM(0) } },
};

START_TEST(test_errors) {
    const bad *b = &errors[_i];
    uint8_t out[X64_MAX_LEN];
    memset(out, 0xA5, sizeof out);
    x64_enc_info info;
    int r = x64_encode(b->op, b->o, b->n, out, &info);
    ck_assert_msg(r == b->err, "%s: got %d (%s), want %d (%s)", b->text, r, x64_err_str(r), b->err,
                  x64_err_str(b->err));
    for (size_t i = 0; i < sizeof out; i++) ck_assert_msg(out[i] == 0xA5, "%s: wrote on error", b->text);
    ck_assert_int_eq(info.disp_pos, -1);
    ck_assert_int_eq(info.rel_pos, -1);
    ck_assert_ptr_nonnull(x64_err_str(r));
}
END_TEST

START_TEST(test_names) {
    ck_assert_str_eq(x64_op_name(X64_VFMADD231PS), "vfmadd231ps");
    ck_assert_str_eq(x64_op_name(X64_MOV), "mov");
    ck_assert_str_eq(x64_op_name(X64_JNE), "jne");
    ck_assert_str_eq(x64_op_name(X64_VEXTRACTF32X4), "vextractf32x4");
    ck_assert_str_eq(x64_op_name(X64_PREFETCHNTA), "prefetchnta");
    ck_assert_str_ne(x64_op_name(X64_OP_COUNT), "");
    ck_assert_str_ne(x64_err_str(X64_E_FORM), x64_err_str(X64_E_RANGE));
    ck_assert_str_ne(x64_err_str(X64_E_OP), x64_err_str(X64_E_RANGE));
}
END_TEST

/* The register-only template path (x64_encode_vregs) gives the full
 * search's bytes and features for every mnemonic, width, register count
 * and imm8 it accepts, over register numbers that set every prefix bit;
 * and it does accept the forms compute loops are made of (a path that
 * quietly turned itself off would pass the comparisons). VEX register
 * moves are not among them: which of their two rows is shorter depends on
 * the registers, so they keep the full search. */
static uint64_t vr_rng = 0x9e3779b97f4a7c15ull;
static unsigned vr_next(void) {
    vr_rng ^= vr_rng << 13;
    vr_rng ^= vr_rng >> 7;
    vr_rng ^= vr_rng << 17;
    return (unsigned)(vr_rng >> 32);
}

static int vregs_check(x64_op op, int bits, const uint8_t *reg, int nregs, int64_t imm,
                       int has_imm) {
    uint8_t fast[X64_MAX_LEN + 8], ref[X64_MAX_LEN + 8];
    uint32_t feat = 0;
    int n = x64_encode_vregs(op, bits, reg, nregs, imm, has_imm, fast, &feat);
    if (n <= 0) return 0;
    x64_opnd o[4];
    for (int i = 0; i < nregs; i++) o[i] = (x64_opnd)VEC(bits, reg[i]);
    if (has_imm) o[nregs] = (x64_opnd)IMM(imm);
    x64_enc_info info;
    int m = x64_encode_search(op, o, nregs + has_imm, ref, &info);
    ck_assert_msg(m == n && !memcmp(fast, ref, (size_t)n) && feat == info.features,
                  "%s/%d regs %d %d %d %d imm %d: template %d bytes, search %d", x64_op_name(op),
                  bits, reg[0], reg[1], nregs > 2 ? reg[2] : -1, nregs > 3 ? reg[3] : -1,
                  has_imm ? (int)imm : -1, n, m);
    return 1;
}

/* The packed form words: every field written by the encoder's maker comes
 * back from its accessor, fields do not overlap, and bit 21 (part of the
 * ModRM.rm operand in one format, "present" in the other) is read apart. */
START_TEST(test_form_words) {
    for (unsigned v = 0; v < 8; v++) {
        const uint64_t f = x64_vf_word(v & 1, v & 3, (v + 1) & 3, v & 1, (v + 2) % 3, 0x58 + v,
                                       v, v & 3, 7 - v, v, (v + 3) & 7, 0x8000u >> v, !(v & 1));
        ck_assert(x64_vf_present(f) && x64_vf_evex(f) == (int)(v & 1));
        ck_assert_uint_eq(x64_vf_map(f), v & 3);
        ck_assert_uint_eq(x64_vf_pp(f), (v + 1) & 3);
        ck_assert_uint_eq(x64_vf_w(f), v & 1);
        ck_assert_uint_eq(x64_vf_ll(f), (v + 2) % 3);
        ck_assert_uint_eq(x64_vf_opcode(f), 0x58 + v);
        ck_assert_uint_eq(x64_vf_g_opnd(f), v);
        ck_assert_uint_eq(x64_vf_e_opnd(f), v & 3);
        ck_assert_uint_eq(x64_vf_h_opnd(f), 7 - v);
        ck_assert_uint_eq(x64_vf_ext(f), v);
        ck_assert_uint_eq(x64_vf_is4_opnd(f), (v + 3) & 7);
        ck_assert_uint_eq(x64_vf_features(f), 0x8000u >> v);
        ck_assert_int_eq(x64_vf_imm_unsigned(f), !(v & 1));
        const uint64_t key = x64_vk_key((x64_op)(1 + v), 3, v & 7, v & 1, 0, v & 1);
        const uint64_t m = x64_vm_word(key, v & 3, (v + 1) & 3, v & 1, 0xc2 + v, v, 7 - v, v,
                                       v & 7, 0x800u >> v, v & 1);
        ck_assert(x64_vm_present(m) && x64_vm_pattern(m) == key && !x64_vm_present(key));
        ck_assert_uint_eq(x64_vm_map(m), v & 3);
        ck_assert_uint_eq(x64_vm_pp(m), (v + 1) & 3);
        ck_assert_uint_eq(x64_vm_w(m), v & 1);
        ck_assert_uint_eq(x64_vm_opcode(m), 0xc2 + v);
        ck_assert_uint_eq(x64_vm_g_opnd(m), v);
        ck_assert_uint_eq(x64_vm_h_opnd(m), 7 - v);
        ck_assert_uint_eq(x64_vm_ext(m), v);
        ck_assert_uint_eq(x64_vm_disp_shift(m), v & 7);
        ck_assert_uint_eq(x64_vm_rm_opnd(m), v & 3);
        ck_assert_uint_eq(x64_vm_features(m), 0x800u >> v);
        ck_assert_int_eq(x64_vm_imm_unsigned(m), (int)(v & 1));
    }
    /* The fast paths' one entry gives the template path's bytes. */
    const x64_direct d = {.kind = X64_D_VREGS, .nops = 3, .bits = 512, .regs = 0x1f0201};
    const uint8_t reg[3] = {1, 2, 31};
    uint8_t a[X64_MAX_LEN + 8], b[X64_MAX_LEN + 8];
    uint32_t fa, fb;
    const int n = x64_encode_direct(X64_VFMADD231PS, &d, a, &fa);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(x64_encode_vregs(X64_VFMADD231PS, 512, reg, 3, 0, 0, b, &fb), n);
    ck_assert(!memcmp(a, b, (size_t)n) && fa == fb);
}
END_TEST

START_TEST(test_vregs) {
    static const int widths[3] = {128, 256, 512};
    long accepted = 0;
    for (int op = 1; op < X64_OP_COUNT; op++)
        for (int w = 0; w < 3; w++)
            for (int nregs = 2; nregs <= 4; nregs++)
                for (int has_imm = 0; has_imm < 2; has_imm++)
                    for (int t = 0; t < 48; t++) {
                        uint8_t reg[4];
                        int span = t < 24 ? 16 : 32;   /* 0-15 first, then 0-31 */
                        for (int i = 0; i < 4; i++) reg[i] = (uint8_t)(vr_next() % (unsigned)span);
                        accepted += vregs_check((x64_op)op, widths[w], reg, nregs,
                                                has_imm ? (int64_t)(vr_next() % 384) - 128 : 0,
                                                has_imm);
                    }
    ck_assert_int_gt(accepted, 3000);
    /* Out of the template's range: the caller must take x64_encode. */
    uint8_t r3[4] = {1, 2, 3, 0}, bad[4] = {1, 32, 3, 0};
    uint8_t out[X64_MAX_LEN];
    uint32_t f;
    ck_assert_int_eq(x64_encode_vregs(X64_VFMADD231PS, 512, bad, 3, 0, 0, out, &f), 0);
    ck_assert_int_eq(x64_encode_vregs(X64_VPTERNLOGD, 512, r3, 3, 256, 1, out, &f), 0);
    ck_assert_int_eq(x64_encode_vregs(X64_VPTERNLOGD, 512, r3, 3, -1, 1, out, &f), 0);
    ck_assert_int_eq(vregs_check(X64_VPTERNLOGD, 512, r3, 3, 0xe4, 1), 1);   /* unsigned imm8 */
    ck_assert_int_eq(x64_encode_vregs(X64_VADDPS, 384, r3, 3, 0, 0, out, &f), 0);
    /* The forms eltwise bodies and GEMM tiles are made of. */
    static const struct { x64_op op; int bits, nregs, imm; } must[] = {
        {X64_VFMADD231PS, 512, 3, 0}, {X64_VFMADD213PS, 512, 3, 0}, {X64_VFNMADD231PS, 512, 3, 0},
        {X64_VMULPS, 512, 3, 0}, {X64_VADDPS, 512, 3, 0}, {X64_VSUBPS, 512, 3, 0},
        {X64_VMAXPS, 512, 3, 0}, {X64_VMOVAPS, 512, 2, 0}, {X64_VPSLLD, 512, 2, 1},
        {X64_VPTERNLOGD, 512, 3, 1}, {X64_VRCP14PS, 512, 2, 0}, {X64_VXORPS, 128, 3, 0},
        {X64_VFMADD231PS, 256, 3, 0}, {X64_VMULPS, 256, 3, 0}, {X64_VBLENDVPS, 256, 4, 0},
    };
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        for (int hi = 0; hi < 2; hi++) {
            if (hi && (must[i].bits < 512 || must[i].nregs == 4)) continue;
            uint8_t reg[4] = {(uint8_t)(hi ? 17 : 9), 2, (uint8_t)(hi ? 30 : 11), 4};
            ck_assert_msg(vregs_check(must[i].op, must[i].bits, reg, must[i].nregs, 3, must[i].imm),
                          "%s/%d (%s registers) has no template", x64_op_name(must[i].op),
                          must[i].bits, hi ? "high" : "low");
        }
    }
}
END_TEST

/* The 512-bit memory forms (x64_encode_vmem): the loop forms of eltwise
 * and GEMM kernels, with every base register (SIB for rsp/r12, a disp8 0
 * for rbp/r13) and RIP (constants), no index or indexes with REX bits and every scale,
 * displacements that do and do not compress to disp8*N, masks and
 * broadcasts, give the full search's bytes; and every mnemonic
 * with random patterns never disagrees with it. */
/* A form path (x64_encode_vmem, x64_encode_vkregs) against the search:
 * 0 when the path has no form for these operands, 1 when its bytes and
 * features are the search's (else the test fails). */
typedef int (*form_path)(x64_op, const x64_opnd *, int, uint8_t *, uint32_t *);
static int form_check(form_path path, const char *what, x64_op op, const x64_opnd *o, int n) {
    uint8_t fast[X64_MAX_LEN + 8], ref[X64_MAX_LEN + 8];
    uint32_t feat = 0;
    int len = path(op, o, n, fast, &feat);
    if (len <= 0) return 0;
    x64_enc_info info;
    int m = x64_encode_search(op, o, n, ref, &info);
    int at = 0;
    while (at < len && at < m && fast[at] == ref[at]) at++;
    ck_assert_msg(m == len && at == len && feat == info.features,
                  "%s: %s form %d bytes, search %d, first difference at byte %d",
                  x64_op_name(op), what, len, m, at);
    return 1;
}

static int vmem_check(x64_op op, const x64_opnd *o, int n) {
    return form_check(x64_encode_vmem, "memory", op, o, n);
}

START_TEST(test_vmem) {
    static const int32_t disps[] = {0, 4, -4, 64, -64, 127 * 64, 128 * 64, -128 * 64, 100,
                                    0x12345, -0x7fffffff};
    static const struct { x64_op op; int nops, mem, mbits, bcst, mask, zero; } forms[] = {
        {X64_VMOVUPS, 2, 1, 512, 0, 0, 0}, {X64_VMOVUPS, 2, 0, 512, 0, 0, 0},
        {X64_VMOVUPS, 2, 1, 512, 0, 1, 1}, {X64_VMOVUPS, 2, 0, 512, 0, 1, 0},
        {X64_VMAXPS, 3, 2, 512, 0, 0, 0},  {X64_VFMADD231PS, 3, 2, 32, 1, 0, 0},
        {X64_VFMADD231PS, 3, 2, 512, 0, 0, 0}, {X64_VBROADCASTSS, 2, 1, 32, 0, 0, 0},
        {X64_VMULPS, 3, 2, 512, 0, 0, 0},  {X64_VADDPS, 3, 2, 512, 0, 1, 1},
        {X64_VFMADD213PS, 3, 2, 32, 1, 0, 0},
    };
    /* index: none, then every register but rsp, with each scale */
    static const uint8_t idx[] = {X64_NOREG, X64_RAX, X64_RCX, X64_RBP, X64_R8, X64_R12,
                                  X64_R13, X64_R15};
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
        for (int base = 0; base <= 16; base++)   /* 16: RIP */
            for (size_t d = 0; d < sizeof disps / sizeof disps[0] * 8; d++) {
                x64_opnd o[3];
                for (int i = 0; i < forms[f].nops; i++)
                    o[i] = (x64_opnd)ZMM((uint8_t)((base * 7 + 11 * i + (int)d) % 32));
                o[forms[f].mem] = (x64_opnd)MEM(forms[f].mbits, (uint8_t)base, idx[d % 8],
                                                (uint8_t)(1 << (d / 8 % 4)),
                                                disps[d / 8]);
                if (base == 16) o[forms[f].mem] = (x64_opnd)MRIP(forms[f].mbits, disps[d / 8]);
                o[forms[f].mem].bcst = (uint8_t)forms[f].bcst;
                o[0].mask = (uint8_t)(forms[f].mask ? 1 + base % 7 : 0);
                o[0].zero = (uint8_t)forms[f].zero;
                ck_assert_msg(vmem_check(forms[f].op, o, forms[f].nops),
                              "%s (form %zu) has no memory form", x64_op_name(forms[f].op), f);
            }
    /* Random patterns over every mnemonic: wherever there is a form, it
     * matches the search. */
    long accepted = 0;
    for (int op = 1; op < X64_OP_COUNT; op++)
        for (int t = 0; t < 64; t++) {
            int n = 2 + (int)(vr_next() % 3), mem = (int)(vr_next() % (unsigned)n);
            x64_opnd o[4];
            for (int i = 0; i < n; i++) o[i] = (x64_opnd)ZMM((uint8_t)(vr_next() % 32));
            static const uint16_t mb[] = {0, 32, 64, 128, 256, 512};
            o[mem] = (x64_opnd)MEM(mb[vr_next() % 6], (uint8_t)(vr_next() % 16),
                                   idx[vr_next() % 8], (uint8_t)(1 << vr_next() % 4),
                                   disps[vr_next() % (sizeof disps / sizeof disps[0])]);
            if (vr_next() % 8 == 0) o[mem] = (x64_opnd)MRIP(o[mem].bits, o[mem].disp);
            o[mem].bcst = (uint8_t)(vr_next() % 4 == 0);
            if (vr_next() % 2) {
                o[0].mask = (uint8_t)(1 + vr_next() % 7);
                o[0].zero = (uint8_t)(vr_next() % 2);
            }
            if (mem != n - 1 && vr_next() % 3 == 0)
                o[n - 1] = (x64_opnd)IMM((int64_t)(vr_next() % 384) - 128);
            accepted += vmem_check((x64_op)op, o, n);
        }
    ck_assert_int_gt(accepted, 100);
    /* Not for this path: rsp as an index (no encoding), RIP with an index
     * (no encoding), ymm. */
    x64_opnd ix[2] = {ZMM(1), MX(512, RAX, RSP, 4, 0)}, rip[2] = {ZMM(1), MRIP(512, 0)},
             y[2] = {YMM(1), M(256, RAX, 0)};
    uint8_t out[X64_MAX_LEN];
    uint32_t feat;
    ck_assert_int_eq(x64_encode_vmem(X64_VMOVUPS, ix, 2, out, &feat), 0);
    rip[1].index = X64_RCX;
    ck_assert_int_eq(x64_encode_vmem(X64_VMOVUPS, rip, 2, out, &feat), 0);
    ck_assert_int_eq(x64_encode_vmem(X64_VMOVUPS, y, 2, out, &feat), 0);
}
END_TEST

/* The register-only forms with mask registers (x64_encode_vkregs): the
 * compares into a mask and the masked arithmetic of the math kernels, with
 * every register and mask, give the full search's bytes; random patterns
 * over every mnemonic never disagree with it; and what is not such a form
 * is refused. */
static int vk_check(x64_op op, const x64_opnd *o, int n) {
    return form_check(x64_encode_vkregs, "mask-register", op, o, n);
}

START_TEST(test_vkregs) {
    for (int a = 0; a < 32; a++)
        for (int c = 0; c < 32; c++) {
            const uint8_t k = (uint8_t)((a + c) % 8), m = (uint8_t)(1 + (a * 3 + c) % 7);
            x64_opnd cmp[4] = {KR(k), ZMM(a), ZMM(c), IMM(0x1d)};
            x64_opnd cmpm[4] = {KRK(k, m), ZMM(a), ZMM(c), IMM(0x1e)};
            x64_opnd sub[3] = {ZMMK(c, m, 0), ZMM(a), ZMM((a + c) % 32)};
            x64_opnd subz[3] = {ZMMK(a, m, 1), ZMM(c), ZMM(a)};
            x64_opnd tern[4] = {ZMMK(a, m, 0), ZMM(c), ZMM(31 - a), IMM(0xe4)};
            x64_opnd blend[3] = {ZMMK(a, m, 0), ZMM(c), ZMM((a * 7 + c) % 32)};
            x64_opnd fpc[3] = {KRK(k, m), ZMM(c), IMM(0x22)};
            ck_assert(vk_check(X64_VCMPPS, cmp, 4));
            ck_assert(vk_check(X64_VCMPPS, cmpm, 4));
            ck_assert(vk_check(X64_VSUBPS, sub, 3));
            ck_assert(vk_check(X64_VSUBPS, subz, 3));
            ck_assert(vk_check(X64_VPTERNLOGD, tern, 4));
            ck_assert(vk_check(X64_VBLENDMPS, blend, 3));
            ck_assert(vk_check(X64_VFPCLASSPS, fpc, 3));
        }
    long accepted = 0;
    for (int op = 1; op < X64_OP_COUNT; op++)
        for (int t = 0; t < 64; t++) {
            int n = 2 + (int)(vr_next() % 3);
            x64_opnd o[4];
            for (int i = 0; i < n; i++) {
                if (vr_next() % 3 == 0) o[i] = (x64_opnd)KR((uint8_t)(vr_next() % 8));
                else o[i] = (x64_opnd)ZMM((uint8_t)(vr_next() % 32));
            }
            if (vr_next() % 2) {
                o[0].mask = (uint8_t)(1 + vr_next() % 7);
                o[0].zero = (uint8_t)(o[0].kind == X64_K_VEC && vr_next() % 2);
            }
            if (vr_next() % 3 == 0) o[n - 1] = (x64_opnd)IMM((int64_t)(vr_next() % 384) - 128);
            accepted += vk_check((x64_op)op, o, n);
        }
    ck_assert_int_gt(accepted, 50);
    /* Not for this path: no mask anywhere (x64_encode_vregs's), ymm, a
     * memory operand, a mask on a source. */
    x64_opnd plain[3] = {ZMM(1), ZMM(2), ZMM(3)}, y[3] = {YMMK(1, 1, 0), YMM(2), YMM(3)},
             mem[3] = {ZMMK(1, 1, 0), ZMM(2), M(512, RAX, 0)}, src[3] = {ZMM(1), ZMMK(2, 1, 0), ZMM(3)};
    uint8_t out[X64_MAX_LEN];
    uint32_t feat;
    ck_assert_int_eq(x64_encode_vkregs(X64_VADDPS, plain, 3, out, &feat), 0);
    ck_assert_int_eq(x64_encode_vkregs(X64_VADDPS, y, 3, out, &feat), 0);
    ck_assert_int_eq(x64_encode_vkregs(X64_VADDPS, mem, 3, out, &feat), 0);
    ck_assert_int_eq(x64_encode_vkregs(X64_VADDPS, src, 3, out, &feat), 0);
}
END_TEST

/* The direct loop-control forms (x64_encode_gpr, x64_encode_jump): the
 * search's bytes for every register pair and immediate class they take,
 * and 0 for what they do not. */
START_TEST(test_gpr_jump) {
    static const x64_op ops[] = {X64_ADD, X64_SUB, X64_AND, X64_OR, X64_XOR, X64_CMP, X64_MOV,
                                 X64_TEST, X64_ADC, X64_IMUL, X64_LEA};
    static const int64_t imms[] = {0, 1, -1, 127, 128, -128, -129, 255, 0x12345, -0x12345,
                                   INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1};
    long compared = 0;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        for (int bits = 32; bits <= 64; bits += 32)
            for (int r0 = 0; r0 < 16; r0++)
                for (int r1 = -(int)(sizeof imms / sizeof imms[0]); r1 < 16; r1++) {
                    int64_t imm = r1 < 0 ? imms[-r1 - 1] : 0;
                    uint8_t fast[X64_MAX_LEN + 8], ref[X64_MAX_LEN + 8];
                    int n = x64_encode_gpr(ops[k], bits, r0, r1 < 0 ? -1 : r1, imm, fast);
                    x64_opnd o[2] = {GPR((uint16_t)bits, (uint8_t)r0), GPR((uint16_t)bits, 0)};
                    if (r1 < 0) o[1] = (x64_opnd)IMM(imm);
                    else o[1].reg = (uint8_t)r1;
                    x64_enc_info info;
                    int m = x64_encode_search(ops[k], o, 2, ref, &info);
                    if (n == 0) {
                        /* Only what the direct forms leave out: other ops, the
                         * imm forms of test, immediates past int32. */
                        ck_assert_msg(ops[k] == X64_ADC || ops[k] == X64_IMUL || ops[k] == X64_LEA ||
                                          (r1 < 0 && (ops[k] == X64_TEST || imm > INT32_MAX)),
                                      "%s/%d r%d %d: no direct form", x64_op_name(ops[k]), bits,
                                      r0, r1);
                        continue;
                    }
                    ck_assert_msg(m == n && !memcmp(fast, ref, (size_t)n) && info.features == 0,
                                  "%s/%d r%d, %s%lld: direct %d bytes, search %d",
                                  x64_op_name(ops[k]), bits, r0, r1 < 0 ? "imm " : "r",
                                  (long long)(r1 < 0 ? imm : r1), n, m);
                    compared++;
                }
    ck_assert_int_gt(compared, 3000);
    static const int32_t rels[] = {0, 5, -5, 127, -128, 0x12345678, -0x12345678};
    for (int op = X64_JMP; op <= X64_JG; op++)
        for (size_t i = 0; i < sizeof rels / sizeof rels[0]; i++)
            for (int wide = 0; wide < 2; wide++) {
                uint8_t fast[X64_MAX_LEN + 8], ref[X64_MAX_LEN + 8];
                int n = x64_encode_jump((x64_op)op, wide, rels[i], fast);
                if (!wide && (rels[i] > 127 || rels[i] < -128)) {
                    ck_assert_int_eq(n, 0);
                    continue;
                }
                x64_opnd o[1] = {REL(wide ? 32 : 8, rels[i])};
                x64_enc_info info;
                int m = x64_encode_search((x64_op)op, o, 1, ref, &info);
                ck_assert_msg(n > 0 && m == n && !memcmp(fast, ref, (size_t)n),
                              "%s rel%d %d: direct %d bytes, search %d", x64_op_name((x64_op)op),
                              wide ? 32 : 8, rels[i], n, m);
            }
    uint8_t out[X64_MAX_LEN];
    ck_assert_int_eq(x64_encode_jump(X64_CALL, 1, 0, out), 0);
    ck_assert_int_eq(x64_encode_gpr(X64_ADD, 16, 0, 1, 0, out), 0);

    /* cmovcc, bzhi/shlx/shrx and kmovw, over every register. */
    compared = 0;
    for (int bits = 32; bits <= 64; bits += 32)
        for (int r0 = 0; r0 < 16; r0++)
            for (int r1 = 0; r1 < 16; r1++) {
                uint8_t fast[X64_MAX_LEN + 8], ref[X64_MAX_LEN + 8];
                x64_enc_info info;
                for (int op = X64_CMOVO; op <= X64_CMOVG; op++) {
                    x64_opnd o[2] = {GPR((uint16_t)bits, (uint8_t)r0), GPR((uint16_t)bits, (uint8_t)r1)};
                    int n = x64_encode_gpr((x64_op)op, bits, r0, r1, 0, fast);
                    int m = x64_encode_search((x64_op)op, o, 2, ref, &info);
                    ck_assert_msg(n > 0 && n == m && !memcmp(fast, ref, (size_t)n), "%s r%d r%d",
                                  x64_op_name((x64_op)op), r0, r1);
                    compared++;
                }
                static const x64_op g3[] = {X64_BZHI, X64_SHLX, X64_SHRX};
                for (int k = 0; k < 3; k++) {
                    int r2 = (r0 * 3 + r1 + k) % 16;
                    x64_opnd o[3] = {GPR((uint16_t)bits, (uint8_t)r0), GPR((uint16_t)bits, (uint8_t)r1),
                                     GPR((uint16_t)bits, (uint8_t)r2)};
                    int n = x64_encode_gpr3(g3[k], bits, r0, r1, r2, fast);
                    int m = x64_encode_search(g3[k], o, 3, ref, &info);
                    ck_assert_msg(n > 0 && n == m && !memcmp(fast, ref, (size_t)n) &&
                                      info.features == X64_F_BMI2,
                                  "%s/%d r%d r%d r%d", x64_op_name(g3[k]), bits, r0, r1, r2);
                    compared++;
                }
                if (bits == 32)
                    for (int form = 0; form < 3; form++) {   /* k,k  k,r32  r32,k */
                        int kd = form != 2, ks = form != 1, d = kd ? r0 % 8 : r0, sr = ks ? r1 % 8 : r1;
                        x64_opnd o[2] = {GPR(32, (uint8_t)d), GPR(32, (uint8_t)sr)};
                        if (kd) o[0] = (x64_opnd){.kind = X64_K_KREG, .bits = 16, .reg = (uint8_t)d,
                                                  .base = X64_NOREG, .index = X64_NOREG};
                        if (ks) o[1] = (x64_opnd){.kind = X64_K_KREG, .bits = 16, .reg = (uint8_t)sr,
                                                  .base = X64_NOREG, .index = X64_NOREG};
                        int n = x64_encode_kmov(kd, d, ks, sr, fast);
                        int m = x64_encode_search(X64_KMOVW, o, 2, ref, &info);
                        ck_assert_msg(n > 0 && n == m && !memcmp(fast, ref, (size_t)n),
                                      "kmovw form %d %d %d: direct %d bytes, search %d", form, d,
                                      sr, n, m);
                        compared++;
                    }
            }
    ck_assert_int_gt(compared, 10000);
    ck_assert_int_eq(x64_encode_gpr3(X64_ADD, 32, 0, 1, 2, out), 0);
    ck_assert_int_eq(x64_encode_kmov(0, 1, 0, 2, out), 0);
    ck_assert_int_eq(x64_encode_kmov(1, 8, 0, 2, out), 0);

    /* Memory forms (x64_encode_gpr_mem): every base (SIB for rsp/r12, a
     * disp8 0 for rbp/r13) and RIP, indexes with and without REX bits and
     * every scale, displacements of each size. */
    static const x64_op mops[] = {X64_MOV, X64_ADD, X64_SUB, X64_CMP, X64_AND, X64_XOR, X64_OR,
                                  X64_PREFETCHT0, X64_PREFETCHT1, X64_PREFETCHNTA, X64_LEA,
                                  X64_TEST};
    static const int32_t disps[] = {0, 8, -8, 127, -128, 128, -129, 0x12345, -0x7fffffff};
    static const uint8_t idx[] = {X64_NOREG, X64_RAX, X64_RBP, X64_R8, X64_R13, X64_R15};
    compared = 0;
    for (size_t k = 0; k < sizeof mops / sizeof mops[0]; k++)
        for (int bits = 32; bits <= 64; bits += 32)
            for (int store = 0; store < 2; store++)
                for (int base = 0; base <= 16; base++)   /* 16: RIP */
                    for (size_t t = 0; t < sizeof disps / sizeof disps[0] * 6; t++) {
                        int pf = mops[k] >= X64_PREFETCHT0 && mops[k] <= X64_PREFETCHNTA;
                        int reg = (base * 5 + (int)t) % 16;
                        x64_vm_mem m = {(uint8_t)(base == 16 ? X64_RIP : base),
                                        base == 16 ? X64_NOREG : idx[t % 6],
                                        (uint8_t)(1 << (t / 6 % 4)), 0, 0, disps[t / 6]};
                        if (m.index == X64_NOREG) m.scale = 1;
                        uint8_t fast[X64_MAX_LEN + 8], ref[X64_MAX_LEN + 8];
                        int n = x64_encode_gpr_mem(mops[k], bits, reg, store, &m, fast);
                        x64_opnd mo = MEM(0, m.base, m.index, m.scale, m.disp);
                        x64_opnd o[2] = {GPR((uint16_t)bits, (uint8_t)reg), mo};
                        if (store) { o[0] = mo; o[1] = (x64_opnd)GPR((uint16_t)bits, (uint8_t)reg); }
                        if (pf) o[0] = mo;
                        x64_enc_info info;
                        int mm = x64_encode_search(mops[k], o, pf ? 1 : 2, ref, &info);
                        if (n == 0) {
                            ck_assert_msg(mops[k] == X64_TEST || (store && mops[k] != X64_MOV && !pf),
                                          "%s/%d %s base %d: no direct form",
                                          x64_op_name(mops[k]), bits, store ? "store" : "load",
                                          base);
                            continue;
                        }
                        ck_assert_msg(mm == n && !memcmp(fast, ref, (size_t)n),
                                      "%s/%d %s r%d [base %d index %d*%d %+d]: direct %d bytes, "
                                      "search %d", x64_op_name(mops[k]), bits,
                                      store ? "store" : "load", reg, base, m.index, m.scale,
                                      m.disp, n, mm);
                        compared++;
                    }
    ck_assert_int_gt(compared, 5000);
}
END_TEST

/* The direct forms GEMM kernels added: inc/dec/not/neg of a register,
 * cmovcc loads, ALU ops and mov of memory with an immediate, kmovw with
 * memory; every base and index kind, displacement and immediate size. */
START_TEST(test_gpr_more) {
    long compared = 0;
    uint8_t fast[X64_MAX_LEN + 8], ref[X64_MAX_LEN + 8];
    x64_enc_info info;
    static const x64_op un[] = {X64_INC, X64_DEC, X64_NOT, X64_NEG};
    for (int k = 0; k < 4; k++)
        for (int bits = 32; bits <= 64; bits += 32)
            for (int r = 0; r < 16; r++) {
                x64_opnd o[1] = {GPR((uint16_t)bits, (uint8_t)r)};
                int n = x64_encode_gpr(un[k], bits, r, X64_GPR_UNARY, 0, fast);
                int m = x64_encode_search(un[k], o, 1, ref, &info);
                ck_assert_msg(n > 0 && n == m && !memcmp(fast, ref, (size_t)n), "%s/%d r%d",
                              x64_op_name(un[k]), bits, r);
                ck_assert_int_eq(x64_encode_gpr(un[k], bits, r, -1, 1, fast), 0);   /* no imm form */
                compared++;
            }
    ck_assert_int_eq(x64_encode_gpr(X64_ADD, 64, 0, X64_GPR_UNARY, 0, fast), 0);
    static const x64_op mi[] = {X64_ADD, X64_SUB, X64_AND, X64_OR, X64_XOR, X64_CMP, X64_MOV};
    static const int64_t imms[] = {0, 1, -1, 127, -128, 128, -129, 0x12345, INT32_MIN, INT32_MAX};
    static const int32_t disps[] = {0, 8, -8, 127, -128, 128, 0x12345};
    static const uint8_t idx[] = {X64_NOREG, X64_RAX, X64_RBP, X64_R8, X64_R13, X64_R15};
    for (int base = 0; base <= 16; base++)   /* 16: RIP */
        for (size_t t = 0; t < sizeof disps / sizeof disps[0] * 6; t++) {
            x64_vm_mem m = {(uint8_t)(base == 16 ? X64_RIP : base), base == 16 ? X64_NOREG : idx[t % 6],
                            (uint8_t)(1 << (t / 6 % 4)), 0, 0, disps[t / 6]};
            if (m.index == X64_NOREG) m.scale = 1;
            for (int bits = 32; bits <= 64; bits += 32) {
                x64_opnd mo = MEM((uint16_t)bits, m.base, m.index, m.scale, m.disp);
                for (int op = X64_CMOVO; op <= X64_CMOVG; op += 5) {
                    const int reg = (base + (int)t) % 16;
                    x64_opnd o[2] = {GPR((uint16_t)bits, (uint8_t)reg), mo};
                    int n = x64_encode_gpr_mem((x64_op)op, bits, reg, 0, &m, fast);
                    int mm = x64_encode_search((x64_op)op, o, 2, ref, &info);
                    ck_assert_msg(n > 0 && n == mm && !memcmp(fast, ref, (size_t)n), "%s base %d",
                                  x64_op_name((x64_op)op), base);
                    ck_assert_int_eq(x64_encode_gpr_mem((x64_op)op, bits, reg, 1, &m, fast), 0);
                    compared++;
                }
                for (size_t k = 0; k < sizeof mi / sizeof mi[0]; k++)
                    for (size_t i = 0; i < sizeof imms / sizeof imms[0]; i++) {
                        x64_opnd o[2] = {mo, IMM(imms[i])};
                        int n = x64_encode_mem_imm(mi[k], bits, &m, imms[i], fast);
                        int mm = x64_encode_search(mi[k], o, 2, ref, &info);
                        ck_assert_msg(n > 0 && n == mm && !memcmp(fast, ref, (size_t)n),
                                      "%s/%d [base %d index %d*%d %+d], %lld: direct %d bytes, "
                                      "search %d", x64_op_name(mi[k]), bits, base, m.index,
                                      m.scale, m.disp, (long long)imms[i], n, mm);
                        compared++;
                    }
            }
            x64_opnd mo = MEM(16, m.base, m.index, m.scale, m.disp);
            for (int store = 0; store < 2; store++)
                for (int k = 0; k < 8; k++) {
                    x64_opnd ko = {.kind = X64_K_KREG, .bits = 16, .reg = (uint8_t)k,
                                   .base = X64_NOREG, .index = X64_NOREG};
                    x64_opnd o[2] = {ko, mo};
                    if (store) { o[0] = mo; o[1] = ko; }
                    int n = x64_encode_kmov_mem(store, k, &m, fast);
                    int mm = x64_encode_search(X64_KMOVW, o, 2, ref, &info);
                    ck_assert_msg(n > 0 && n == mm && !memcmp(fast, ref, (size_t)n),
                                  "kmovw %s k%d [base %d index %d]: direct %d bytes, search %d",
                                  store ? "store" : "load", k, base, m.index, n, mm);
                    compared++;
                }
        }
    x64_vm_mem m0 = {X64_RAX, X64_NOREG, 1, 0, 0, 0};
    ck_assert_int_eq(x64_encode_mem_imm(X64_TEST, 32, &m0, 1, fast), 0);
    ck_assert_int_eq(x64_encode_mem_imm(X64_ADD, 16, &m0, 1, fast), 0);
    ck_assert_int_eq(x64_encode_mem_imm(X64_ADD, 64, &m0, (int64_t)INT32_MAX + 1, fast), 0);
    ck_assert_int_eq(x64_encode_kmov_mem(0, 8, &m0, fast), 0);
    ck_assert_int_gt(compared, 15000);
}
END_TEST

int main(void) {
    Suite *s = suite_create("x64_golden");
    TCase *tc = tcase_create("encoder");
    tcase_add_loop_test(tc, test_golden, 0, (int)x64_golden_ncases);
    tcase_add_test(tc, test_features);
    tcase_add_loop_test(tc, test_errors, 0, (int)(sizeof errors / sizeof errors[0]));
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_form_words);
    tcase_add_test(tc, test_vregs);
    tcase_add_test(tc, test_vmem);
    tcase_add_test(tc, test_vkregs);
    tcase_add_test(tc, test_gpr_jump);
    tcase_add_test(tc, test_gpr_more);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
