/* test_x64_decode.c: the verifier's decoder, checked instruction by
 * instruction against Zydis on random encodings, plus fixed encodings of
 * the frame instructions. Seed: FRAMEJIT_TEST_SEED (default fixed). */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "kernels/x64/x64.h"
#include "fjtest.h"

#define RBP_BIT (1u << X64_RBP)
#define RSP_BIT (1u << X64_RSP)

/* ---- random encodings ---- */

static uint64_t rng_state;

static uint64_t rnd(void) {
    /* xorshift64*: deterministic for a seed, good enough to pick bytes */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static unsigned rb(unsigned n) { return (unsigned)(rnd() >> 33) % n; }

static uint64_t test_seed(void) {
    const char *e = getenv("FRAMEJIT_TEST_SEED");
    uint64_t s = e && *e ? strtoull(e, NULL, 0) : 0x5eed0123u;
    return s ? s : 1;
}

/* Opcodes with GPR destinations (explicit or implicit) in the 0F, 0F38,
 * 0F3A, VEX and EVEX maps and in the one-byte map: a third of the
 * candidates use one of them so that rare writers are exercised often. */
static const uint8_t hot_vec[] = {
    0x7e, 0xc5, 0xd7, 0x50, 0x2c, 0x2d, 0x93, 0xf0, 0xf1, 0xf2, 0xf3, 0xf5, 0xf6, 0xf7,
    0x14, 0x15, 0x16, 0x17, 0x61, 0x63, 0x78, 0x79, 0xb8, 0xbc, 0xbd, 0xc7, 0xae, 0x1e,
    0x44, 0x4f, 0x95, 0xa2, 0xb0, 0xb1, 0xc0, 0xc1, 0xcd, 0xa4, 0xab, 0xba, 0xaf, 0xb6,
    0xbf, 0x31, 0x0d, 0x18, 0x1f};
static const uint8_t hot_1b[] = {
    0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8d, 0x8f, 0x90, 0x95, 0xb4, 0xbd, 0xc6, 0xc7,
    0xc8, 0xc9, 0xf6, 0xf7, 0xfe, 0xff, 0x55, 0x5d, 0x5c, 0x98, 0x99, 0x9f, 0xd7, 0x63,
    0x69, 0x6b, 0xe0, 0xe3, 0xc2, 0xc3, 0xe8, 0x81, 0x83, 0xa1, 0xad, 0xd3, 0xc1};

/* Fills buf with one candidate encoding: some prefixes, an opcode from one
 * of the maps (weighted toward the 0F maps, VEX and EVEX, which random
 * bytes alone rarely reach), then random ModRM/SIB/displacement/imm bytes. */
static void gen(uint8_t buf[X64_MAX_LEN]) {
    static const uint8_t pfx[] = {0x66, 0x66, 0x67, 0xf2, 0xf3, 0x2e, 0x3e, 0x64, 0x65, 0xf0};
    for (int i = 0; i < X64_MAX_LEN; i++) buf[i] = (uint8_t)rnd();
    int k = 0;
    unsigned cls = rb(10);
    int legacy = cls <= 3 ? (int)rb(4) : (rb(8) == 0);   /* VEX/EVEX: rarely */
    while (legacy-- > 0 && rb(2)) buf[k++] = pfx[rb(sizeof pfx)];
    if (cls <= 3 && rb(2)) buf[k++] = (uint8_t)(0x40 | rb(16));
    switch (cls) {
    case 0:
    case 1:
        break;   /* one-byte map: the random byte stays */
    case 2:
        buf[k++] = 0x0f;
        break;
    case 3:
        buf[k++] = 0x0f;
        buf[k++] = rb(2) ? 0x38 : 0x3a;
        break;
    case 4:
        buf[k++] = 0xc5;
        k++;
        break;
    case 5:
        buf[k++] = 0xc4;
        buf[k] = (uint8_t)((buf[k] & 0xe0) | (1 + rb(3)));
        k += 2;
        break;
    default: {
        static const uint8_t maps[] = {1, 2, 3, 1, 2, 3, 5, 6};
        buf[k++] = 0x62;
        buf[k] = (uint8_t)((buf[k] & 0xf0) | maps[rb(sizeof maps)]);
        buf[k + 1] |= 0x04;
        k += 3;
        break;
    }
    }
    /* buf[k] is the opcode byte */
    if (rb(3) == 0)
        buf[k] = cls <= 1 ? hot_1b[rb(sizeof hot_1b)] : hot_vec[rb(sizeof hot_vec)];
}

/* ---- what Zydis says ---- */

typedef struct zinfo {
    ZydisDecodedInstruction insn;
    ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
    uint16_t writes;   /* GPRs written, by 64-bit parent */
} zinfo;

static ZydisDecoder zdec;

static int zdecode(const uint8_t *b, size_t n, zinfo *z) {
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&zdec, b, n, &z->insn, z->ops))) return 0;
    z->writes = 0;
    for (int i = 0; i < z->insn.operand_count; i++) {
        const ZydisDecodedOperand *op = &z->ops[i];
        if (op->type != ZYDIS_OPERAND_TYPE_REGISTER) continue;
        if (!(op->actions & ZYDIS_OPERAND_ACTION_MASK_WRITE)) continue;
        ZydisRegister r = ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64,
                                                           op->reg.value);
        if (ZydisRegisterGetClass(r) == ZYDIS_REGCLASS_GPR64)
            z->writes |= (uint16_t)(1u << (r - ZYDIS_REGISTER_RAX));
    }
    return 1;
}

/* Instruction classes the decoder does not claim (it may return 0 for
 * them): x87, system, I/O, far branches, and extensions a compute kernel
 * never emits. Everything else must be decoded. */
static int unclaimed(const zinfo *z) {
    static const ZydisISAExt ext[] = {
        ZYDIS_ISA_EXT_X87, ZYDIS_ISA_EXT_AMD3DNOW, ZYDIS_ISA_EXT_AMD_INVLPGB,
        ZYDIS_ISA_EXT_AMX_BF16, ZYDIS_ISA_EXT_AMX_INT8, ZYDIS_ISA_EXT_AMX_TILE,
        ZYDIS_ISA_EXT_CET, ZYDIS_ISA_EXT_CLDEMOTE, ZYDIS_ISA_EXT_CLWB, ZYDIS_ISA_EXT_CLZERO,
        ZYDIS_ISA_EXT_ENQCMD, ZYDIS_ISA_EXT_FMA4, ZYDIS_ISA_EXT_HRESET, ZYDIS_ISA_EXT_INVPCID,
        ZYDIS_ISA_EXT_KEYLOCKER, ZYDIS_ISA_EXT_KEYLOCKER_WIDE, ZYDIS_ISA_EXT_MCOMMIT,
        ZYDIS_ISA_EXT_MONITOR, ZYDIS_ISA_EXT_MONITORX, ZYDIS_ISA_EXT_MOVDIR, ZYDIS_ISA_EXT_MPX,
        ZYDIS_ISA_EXT_PADLOCK, ZYDIS_ISA_EXT_PCONFIG, ZYDIS_ISA_EXT_PKU, ZYDIS_ISA_EXT_PT,
        ZYDIS_ISA_EXT_RDPID, ZYDIS_ISA_EXT_RDPRU, ZYDIS_ISA_EXT_RDTSCP, ZYDIS_ISA_EXT_RTM,
        ZYDIS_ISA_EXT_SERIALIZE, ZYDIS_ISA_EXT_SGX, ZYDIS_ISA_EXT_SGX_ENCLV, ZYDIS_ISA_EXT_SMAP,
        ZYDIS_ISA_EXT_SMX, ZYDIS_ISA_EXT_SNP, ZYDIS_ISA_EXT_SSE4A, ZYDIS_ISA_EXT_SVM,
        ZYDIS_ISA_EXT_TBM, ZYDIS_ISA_EXT_TDX, ZYDIS_ISA_EXT_TSX_LDTRK, ZYDIS_ISA_EXT_UINTR,
        ZYDIS_ISA_EXT_VMFUNC, ZYDIS_ISA_EXT_VTX, ZYDIS_ISA_EXT_WAITPKG, ZYDIS_ISA_EXT_XOP,
        ZYDIS_ISA_EXT_XSAVE, ZYDIS_ISA_EXT_XSAVEC, ZYDIS_ISA_EXT_XSAVEOPT, ZYDIS_ISA_EXT_XSAVES,
        ZYDIS_ISA_EXT_RDWRFSGS,
    };
    static const ZydisInstructionCategory cat[] = {
        ZYDIS_CATEGORY_X87_ALU, ZYDIS_CATEGORY_FCMOV, ZYDIS_CATEGORY_SYSTEM, ZYDIS_CATEGORY_IO,
        ZYDIS_CATEGORY_IOSTRINGOP, ZYDIS_CATEGORY_INTERRUPT, ZYDIS_CATEGORY_SEGOP,
        ZYDIS_CATEGORY_SYSCALL, ZYDIS_CATEGORY_SYSRET,
    };
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (z->insn.meta.isa_ext == ext[i]) return 1;
    for (size_t i = 0; i < sizeof cat / sizeof cat[0]; i++)
        if (z->insn.meta.category == cat[i]) return 1;
    if (z->insn.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR) return 1;
    if (z->insn.mnemonic == ZYDIS_MNEMONIC_IRET || z->insn.mnemonic == ZYDIS_MNEMONIC_IRETD ||
        z->insn.mnemonic == ZYDIS_MNEMONIC_IRETQ)
        return 1;
    for (int i = 0; i < z->insn.operand_count; i++) {   /* mov to/from cr/dr */
        ZydisRegisterClass rc = ZydisRegisterGetClass(z->ops[i].reg.value);
        if (z->ops[i].type == ZYDIS_OPERAND_TYPE_REGISTER &&
            (rc == ZYDIS_REGCLASS_CONTROL || rc == ZYDIS_REGCLASS_DEBUG))
            return 1;
    }
    /* Knights Corner: its VEX mask instructions decode outside KNC mode */
    if (strstr(ZydisISASetGetString(z->insn.meta.isa_set), "KNC")) return 1;
    /* AVX512-FP16 lives in EVEX maps 5 and 6, which are not decoded */
    if (strstr(ZydisISASetGetString(z->insn.meta.isa_set), "FP16")) return 1;
    return 0;
}

static void hex(const uint8_t *b, int n, char *out) {
    for (int i = 0; i < n; i++) sprintf(out + 3 * i, "%02x ", b[i]);
}

static void report(const char *what, const uint8_t *b, const zinfo *z, const x64_insn *o) {
    char h[64] = "";
    hex(b, z->insn.length, h);
    fprintf(stderr, "%s: %s(%s, %s) zydis len %d writes %04x; ours len %d writes %04x\n", what,
            h, ZydisMnemonicGetString(z->insn.mnemonic),
            ZydisISASetGetString(z->insn.meta.isa_set), z->insn.length, z->writes,
            o ? o->len : 0, o ? o->gpr_writes : 0);
}

/* Expected stack-pointer delta of a push/pop/ret Zydis decoded, or 0 if the
 * instruction is not one of those. */
static int z_stack_delta(const zinfo *z) {
    int w = z->insn.operand_width / 8;
    switch (z->insn.mnemonic) {
    case ZYDIS_MNEMONIC_PUSH:
    case ZYDIS_MNEMONIC_PUSHF:
    case ZYDIS_MNEMONIC_PUSHFQ:
        return -w;
    case ZYDIS_MNEMONIC_POP:
    case ZYDIS_MNEMONIC_POPF:
    case ZYDIS_MNEMONIC_POPFQ:
        return w;
    default:
        return 0;
    }
}

START_TEST(differential_vs_zydis) {
    rng_state = test_seed();
    fprintf(stderr, "x64_decode differential: seed 0x%" PRIx64 "\n", rng_state);
    ck_assert(ZYAN_SUCCESS(
        ZydisDecoderInit(&zdec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64)));

    enum { TARGET = 300000, MAX_REPORT = 30 };
    long valid = 0, decoded = 0, unknown_ok = 0, unknown_bad = 0, len_bad = 0;
    long under_fp = 0, under_other = 0, over = 0, flag_bad = 0, rsp_bad = 0;
    long z_invalid = 0, ours_on_invalid = 0, vex = 0, evex = 0, map0f = 0;
    long reported = 0;
    /* FRAMEJIT_TEST_VERBOSE=1 also lists over-reports and bytes only we accept */
    const char *ve = getenv("FRAMEJIT_TEST_VERBOSE");
    long verbose = ve ? atol(ve) : 0;
    uint8_t buf[X64_MAX_LEN];
    for (long iter = 0; valid < TARGET && iter < 20L * TARGET; iter++) {
        gen(buf);
        zinfo z;
        x64_insn o;
        int len = x64_decode(buf, sizeof buf, &o);
        if (!zdecode(buf, sizeof buf, &z)) {
            z_invalid++;
            if (len) ours_on_invalid++;
            if (len && verbose-- > 0) {
                char h[64] = "";
                hex(buf, len, h);
                fprintf(stderr, "zydis-invalid, ours len %d writes %04x: %s\n", len,
                        o.gpr_writes, h);
            }
            continue;
        }
        valid++;
        if (z.insn.encoding == ZYDIS_INSTRUCTION_ENCODING_VEX) vex++;
        if (z.insn.encoding == ZYDIS_INSTRUCTION_ENCODING_EVEX) evex++;
        if (z.insn.opcode_map != ZYDIS_OPCODE_MAP_DEFAULT) map0f++;
        if (!len) {
            if (unclaimed(&z)) {
                unknown_ok++;
            } else {
                unknown_bad++;
                if (reported++ < MAX_REPORT) report("unknown", buf, &z, NULL);
            }
            continue;
        }
        decoded++;
        int bad = 0;
        ZydisInstructionCategory c = z.insn.meta.category;
        if (len != z.insn.length || o.len != len) {
            len_bad++;
            bad = 1;
        }
        uint16_t missing = (uint16_t)(z.writes & ~o.gpr_writes);
        if (missing & (RBP_BIT | RSP_BIT)) {
            under_fp++;
            bad = 1;
        } else if (missing) {
            under_other++;
            bad = 1;
        }
        /* Zydis leaves out the rsi/rdi updates of cmps/scas; we report them */
        if ((o.gpr_writes & ~z.writes) && c != ZYDIS_CATEGORY_STRINGOP) {
            over++;
            if (verbose-- > 0) report("over-reported", buf, &z, &o);
        }
        /* branch flags against Zydis's categories */
        if (o.is_ret != (c == ZYDIS_CATEGORY_RET) || o.is_call != (c == ZYDIS_CATEGORY_CALL) ||
            o.is_jump != (c == ZYDIS_CATEGORY_COND_BR || c == ZYDIS_CATEGORY_UNCOND_BR)) {
            flag_bad++;
            bad = 1;
        }
        /* rsp: every write has a kind; push/pop deltas match the width */
        int zd = z_stack_delta(&z);
        if (((z.writes & RSP_BIT) && o.rsp_kind == X64_RSP_NONE && !o.is_call) ||
            (zd && !(o.rsp_kind == X64_RSP_DELTA && o.rsp_delta == zd) &&
             o.rsp_kind != X64_RSP_OTHER)) {
            rsp_bad++;
            bad = 1;
        }
        if (bad && reported++ < MAX_REPORT) report("mismatch", buf, &z, &o);
    }
    fprintf(stderr,
            "valid %ld (0F maps %ld, VEX %ld, EVEX %ld), decoded %ld, unknown unclaimed %ld, "
            "unknown claimed %ld, length %ld, under-reported rbp/rsp %ld, other %ld, "
            "over-reported %ld, flags %ld, rsp %ld; zydis-invalid %ld of which we decode %ld\n",
            valid, map0f, vex, evex, decoded, unknown_ok, unknown_bad, len_bad, under_fp,
            under_other, over, flag_bad, rsp_bad, z_invalid, ours_on_invalid);

    ck_assert_int_ge(valid, 100000);
    ck_assert_int_ge(vex, 10000);
    ck_assert_int_ge(evex, 5000);
    /* the safety property */
    ck_assert_int_eq(under_fp, 0);
    ck_assert_int_eq(under_other, 0);
    ck_assert_int_eq(len_bad, 0);
    ck_assert_int_eq(unknown_bad, 0);
    ck_assert_int_eq(flag_bad, 0);
    ck_assert_int_eq(rsp_bad, 0);
    /* conservative, but not blindly so */
    ck_assert_int_le(over * 1000, decoded);
    /* unclaimed classes stay a minority of what random bytes produce */
    ck_assert_int_le(unknown_ok * 4, valid);
}
END_TEST

/* ---- fixed encodings: the frame instructions and classic rbp writers ---- */

typedef struct fixed {
    const char *what;
    uint8_t bytes[X64_MAX_LEN];
    int len;
    uint16_t writes;
    int rsp_kind;
    int32_t delta;
} fixed;

#define B(...) {__VA_ARGS__}, sizeof((uint8_t[]){__VA_ARGS__})
static const fixed cases[] = {
    {"push rbp", B(0x55), RSP_BIT, X64_RSP_DELTA, -8},
    {"mov rbp, rsp", B(0x48, 0x89, 0xe5), RBP_BIT, X64_RSP_NONE, 0},
    {"mov rbp, rsp (8b)", B(0x48, 0x8b, 0xec), RBP_BIT, X64_RSP_NONE, 0},
    {"pop rbp", B(0x5d), RSP_BIT | RBP_BIT, X64_RSP_DELTA, 8},
    {"leave", B(0xc9), RSP_BIT | RBP_BIT, X64_RSP_FROM_RBP, 0},
    {"ret", B(0xc3), RSP_BIT, X64_RSP_DELTA, 8},
    {"sub rsp, 0x20", B(0x48, 0x83, 0xec, 0x20), RSP_BIT, X64_RSP_DELTA, -32},
    {"add rsp, 0x1000", B(0x48, 0x81, 0xc4, 0x00, 0x10, 0, 0), RSP_BIT, X64_RSP_DELTA, 4096},
    {"lea rsp, [rsp-16]", B(0x48, 0x8d, 0x64, 0x24, 0xf0), RSP_BIT, X64_RSP_DELTA, -16},
    {"mov rsp, rbp", B(0x48, 0x89, 0xec), RSP_BIT, X64_RSP_FROM_RBP, 0},
    {"and rsp, -64", B(0x48, 0x83, 0xe4, 0xc0), RSP_BIT, X64_RSP_OTHER, 0},
    {"sub esp, 8", B(0x83, 0xec, 0x08), RSP_BIT, X64_RSP_OTHER, 0},
    {"push r13", B(0x41, 0x55), RSP_BIT, X64_RSP_DELTA, -8},
    {"push ax", B(0x66, 0x50), RSP_BIT, X64_RSP_DELTA, -2},
    {"call rel32", B(0xe8, 0, 0, 0, 0), RSP_BIT, X64_RSP_NONE, 0},
    {"mov rbp, rax", B(0x48, 0x89, 0xc5), RBP_BIT, X64_RSP_NONE, 0},
    {"xor ebp, ebp", B(0x31, 0xed), RBP_BIT, X64_RSP_NONE, 0},
    {"mov bpl, al", B(0x40, 0x88, 0xc5), RBP_BIT, X64_RSP_NONE, 0},
    {"mov ch, al", B(0x88, 0xc5), 1u << X64_RCX, X64_RSP_NONE, 0},
    {"vmovd ebp, xmm0", B(0xc5, 0xf9, 0x7e, 0xc5), RBP_BIT, X64_RSP_NONE, 0},
    {"bzhi ebp, eax, ecx", B(0xc4, 0xe2, 0x70, 0xf5, 0xe8), RBP_BIT, X64_RSP_NONE, 0},
    {"mulx rbp, rax, rcx", B(0xc4, 0xe2, 0xfb, 0xf6, 0xe9), RBP_BIT | 1, X64_RSP_NONE, 0},
    {"kmovw ebp, k1", B(0xc5, 0xf8, 0x93, 0xe9), RBP_BIT, X64_RSP_NONE, 0},
    {"cqo", B(0x48, 0x99), 1u << X64_RDX, X64_RSP_NONE, 0},
    {"vfmadd231ps zmm0, zmm1, [rax+64]", B(0x62, 0xf2, 0x75, 0x48, 0xb8, 0x40, 0x01), 0,
     X64_RSP_NONE, 0},
};

START_TEST(fixed_encodings) {
    const fixed *c = &cases[_i];
    x64_insn o;
    int len = x64_decode(c->bytes, (size_t)c->len, &o);
    ck_assert_msg(len == c->len, "%s: length %d, want %d", c->what, len, c->len);
    ck_assert_msg(o.gpr_writes == c->writes, "%s: writes %04x, want %04x", c->what,
                  o.gpr_writes, c->writes);
    ck_assert_msg(o.rsp_kind == c->rsp_kind, "%s: rsp kind %d, want %d", c->what, o.rsp_kind,
                  c->rsp_kind);
    if (c->rsp_kind == X64_RSP_DELTA)
        ck_assert_msg(o.rsp_delta == c->delta, "%s: delta %d", c->what, o.rsp_delta);
    /* one byte short is never a valid instruction */
    ck_assert_msg(x64_decode(c->bytes, (size_t)c->len - 1, &o) == 0, "%s: truncated", c->what);
}
END_TEST

START_TEST(frame_flags_and_stores) {
    x64_insn o;
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x55}, 1, &o), 1);
    ck_assert(o.is_push_rbp && !o.is_pop_rbp);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x41, 0x55}, 2, &o), 2);
    ck_assert(!o.is_push_rbp);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x48, 0x89, 0xe5}, 3, &o), 3);
    ck_assert(o.is_mov_rbp_rsp);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x48, 0x8b, 0xec}, 3, &o), 3);
    ck_assert(o.is_mov_rbp_rsp);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x48, 0x89, 0xec}, 3, &o), 3);
    ck_assert(!o.is_mov_rbp_rsp);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x5d}, 1, &o), 1);
    ck_assert(o.is_pop_rbp);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0xc9}, 1, &o), 1);
    ck_assert(o.is_leave);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x66, 0xc9}, 2, &o), 2);
    ck_assert(!o.is_leave && (o.gpr_writes & RBP_BIT));
    /* mov [rbp-8], rbx */
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x48, 0x89, 0x5d, 0xf8}, 4, &o), 4);
    ck_assert_int_eq(o.store_reg, X64_RBX);
    ck_assert_int_eq(o.store_base, X64_RBP);
    ck_assert_int_eq(o.store_disp, -8);
    ck_assert_int_eq(o.gpr_writes, 0);
    /* mov [rbp-0x100], r12 (disp32) */
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x4c, 0x89, 0xa5, 0x00, 0xff, 0xff, 0xff}, 7,
                                &o), 7);
    ck_assert_int_eq(o.store_reg, X64_R12);
    ck_assert_int_eq(o.store_disp, -256);
    /* mov [rsp+8], r15 (SIB) */
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x4c, 0x89, 0x7c, 0x24, 0x08}, 5, &o), 5);
    ck_assert_int_eq(o.store_reg, X64_R15);
    ck_assert_int_eq(o.store_base, X64_RSP);
    ck_assert_int_eq(o.store_disp, 8);
    /* 32-bit store and a register-register mov report no store */
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x89, 0x5d, 0xf8}, 3, &o), 3);
    ck_assert_int_eq(o.store_reg, X64_NOREG);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x48, 0x89, 0xd8}, 3, &o), 3);
    ck_assert_int_eq(o.store_reg, X64_NOREG);
    /* not understood: x87, in, syscall, 16 bytes of prefixes */
    ck_assert_int_eq(x64_decode((const uint8_t[]){0xd9, 0xc0}, 2, &o), 0);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0xe4, 0x10}, 2, &o), 0);
    ck_assert_int_eq(x64_decode((const uint8_t[]){0x0f, 0x05}, 2, &o), 0);
    uint8_t long_insn[16];
    memset(long_insn, 0x66, sizeof long_insn);
    long_insn[15] = 0x90;
    ck_assert_int_eq(x64_decode(long_insn, sizeof long_insn, &o), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("x64_decode");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, fixed_encodings, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, frame_flags_and_stores);
    tcase_add_test(tc, differential_vs_zydis);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
