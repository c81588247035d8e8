/* x64.h: the x86-64 encoder (table-driven) and the decoder the verifier
 * uses. Registers here are physical numbers; only the builder (which hands
 * registers out from pools that never contain rbp or rsp) calls the encoder
 * with registers, and only for registers it owns.
 */
#ifndef FJ_X64_H
#define FJ_X64_H

#include <stddef.h>
#include <stdint.h>
#include "framejit/ops.h"
#include "base/base.h"

/* Mnemonics: the same numbering as the public fj_op (include/framejit/builder.h). */
typedef enum x64_op {
    X64_NONE = 0,
#define X64_OP_ENUM(n) X64_##n,
    FJ_OPS(X64_OP_ENUM)
#undef X64_OP_ENUM
    X64_OP_COUNT
} x64_op;

/* Physical GPR numbers. */
enum {
    X64_RAX, X64_RCX, X64_RDX, X64_RBX, X64_RSP, X64_RBP, X64_RSI, X64_RDI,
    X64_R8, X64_R9, X64_R10, X64_R11, X64_R12, X64_R13, X64_R14, X64_R15,
    X64_RIP = 0x40,    /* only as a memory base: [rip + disp32] */
    X64_NOREG = 0xff,
};

typedef enum x64_kind {
    X64_K_NONE = 0,
    X64_K_GPR,         /* reg 0..15, bits 8/16/32/64 (8-bit: spl/bpl/sil/dil via REX) */
    X64_K_VEC,         /* reg 0..31, bits 128/256/512 (xmm/ymm/zmm) */
    X64_K_KREG,        /* reg 0..7 */
    X64_K_MEM,         /* [base + index*scale + disp]; bits = access width, 0 = implied */
    X64_K_IMM,         /* imm; bits = 0 (encoder picks) or forced width */
    X64_K_REL,         /* branch/call target, imm = displacement from the end
                          of the instruction; bits 8 or 32 selects the form */
} x64_kind;

typedef struct x64_opnd {
    uint8_t kind;      /* x64_kind */
    uint16_t bits;
    uint8_t reg;       /* GPR/VEC/KREG number */
    uint8_t base;      /* MEM: GPR, X64_RIP or X64_NOREG */
    uint8_t index;     /* MEM: GPR or X64_NOREG (rsp cannot be an index) */
    uint8_t scale;     /* MEM: 1, 2, 4, 8 */
    uint8_t bcst;      /* MEM: EVEX embedded broadcast {1toN} of a 32-bit element */
    uint8_t mask;      /* k1..k7 write mask on this (destination) operand, 0 = none */
    uint8_t zero;      /* with mask: zeroing instead of merging */
    int32_t disp;      /* MEM */
    int64_t imm;       /* IMM / REL */
} x64_opnd;

/* The memory operand, flattened; the caller has checked it: base a GPR
 * (0-15) or X64_RIP (no index then), index a GPR but rsp or X64_NOREG,
 * scale 1/2/4/8, bits 0 or a power of two from 8 to 512. */
typedef struct x64_vm_mem {
    uint8_t base, index, scale, bcst;
    uint16_t bits;
    int32_t disp;
} x64_vm_mem;

/* CPU features an encoding needs (x64_encode reports them; the builder
 * compares them with the target). */
enum {
    X64_F_AVX = 1u << 0, X64_F_AVX2 = 1u << 1, X64_F_FMA = 1u << 2, X64_F_BMI2 = 1u << 3,
    X64_F_AVX512F = 1u << 4, X64_F_AVX512VL = 1u << 5, X64_F_AVX512BW = 1u << 6,
    X64_F_AVX512DQ = 1u << 7, X64_F_F16C = 1u << 8,
    /* dot products: vpdpbusd (EVEX / VEX AVX-VNNI), vdpbf16ps */
    X64_F_AVX512VNNI = 1u << 9, X64_F_AVX512BF16 = 1u << 10, X64_F_AVXVNNI = 1u << 11,
    X64_F_ALL = (1u << 12) - 1,
};

/* What x64_encode tells about the bytes it wrote. */
typedef struct x64_enc_info {
    uint32_t features;  /* X64_F_* the chosen encoding requires */
    int8_t disp_pos;    /* offset of a RIP-relative disp32 (or -1) */
    int8_t rel_pos;     /* offset of a REL displacement (or -1) */
    int8_t rel_size;    /* 1 or 4 */
} x64_enc_info;

enum {
    X64_MAX_LEN = 15,
    X64_E_FORM = -1,    /* no encoding of this mnemonic takes these operands */
    X64_E_RANGE = -2,   /* immediate/displacement/register out of range */
    X64_E_OP = -3,      /* unknown mnemonic */
};

/* Encodes one instruction into out (at least X64_MAX_LEN bytes; bytes past
 * the instruction, within those, may be overwritten). Returns its length
 * (> 0) or an X64_E_* code. Chooses the shortest form (2-byte VEX, disp8 /
 * EVEX disp8*N, imm8) and never allocates. info may be NULL. */
FJ_INTERNAL int x64_encode(x64_op op, const x64_opnd *ops, int nops, uint8_t *out,
                           x64_enc_info *info);
/* The same without the memo of winning rows (the full shortest-form
 * search every time): tests compare the two. */
FJ_INTERNAL int x64_encode_search(x64_op op, const x64_opnd *ops, int nops, uint8_t *out,
                                  x64_enc_info *info);
/* Register-only vector instructions: nregs vector registers of one width
 * (2..4, at most 3 with the imm8), then an imm8 when has_imm (0..255 where
 * the instruction's imm8 is unsigned, else -128..127). The same bytes as
 * x64_encode from a per-form template (see x64_forms.c); returns the length and the features, or 0 when this form
 * has no template (use x64_encode, which also explains errors). */
FJ_INTERNAL int x64_encode_vregs(x64_op op, int bits, const uint8_t *reg, int nregs,
                                 int64_t imm, int has_imm, uint8_t *out, uint32_t *features);
/* 512-bit instructions with one [base (+ index*scale) + disp] memory
 * operand (GPR base) or [rip + disp32] (its disp32 the last four bytes
 * before any imm8), zmm registers otherwise, maybe a write mask on
 * operand 0 and a last imm8 (ranges as above): the same bytes as
 * x64_encode from a per-pattern form (see x64_forms.c). Returns the length and the features, or 0
 * when the operands are not of that kind or the pattern has no form (use
 * x64_encode). */
FJ_INTERNAL int x64_encode_vmem(x64_op op, const x64_opnd *ops, int nops, uint8_t *out,
                                uint32_t *features);
/* Register-only 512-bit instructions with mask-register operands or a
 * write mask on operand 0 (zmm and k operands, a last imm8): the same
 * bytes as x64_encode from a per-pattern form (see x64_templ.h). Returns
 * the length and the features, or 0 when the operands are not of that
 * kind or the pattern has no form (use x64_encode). */
FJ_INTERNAL int x64_encode_vkregs(x64_op op, const x64_opnd *ops, int nops, uint8_t *out,
                                  uint32_t *features);
/* The loop-control and frame instructions of every kernel, straight from
 * their rows (the bytes x64_encode gives): add/sub/and/or/xor/cmp of a
 * 32- or 64-bit register (r0) with a register (r1 >= 0) or an immediate
 * in int32 range (r1 -1), mov, test and cmovcc of two registers, mov of
 * an int32 immediate, inc/dec/not/neg of r0 (r1 X64_GPR_UNARY). Returns
 * the length, or 0 for anything else (use x64_encode). */
enum { X64_GPR_UNARY = -2 };
FJ_INTERNAL int x64_encode_gpr(x64_op op, int bits, int r0, int r1, int64_t imm, uint8_t *out);
/* bzhi/shlx/shrx of three 32- or 64-bit registers; 0 for other ops. */
FJ_INTERNAL int x64_encode_gpr3(x64_op op, int bits, int r0, int r1, int r2, uint8_t *out);
/* kmovw k, k / k, r32 / r32, k (k_dst, k_src: the operand is a mask
 * register); 0 if neither is. */
FJ_INTERNAL int x64_encode_kmov(int k_dst, int dst, int k_src, int src, uint8_t *out);
/* jmp / jcc with a rel8 (near) or rel32 displacement; the rel32 field is
 * the instruction's last 4 bytes. Returns the length, 0 if op is neither. */
FJ_INTERNAL int x64_encode_jump(x64_op op, int rel32, int32_t rel, uint8_t *out);
/* Lower-case mnemonic text ("vfmadd231ps"). */
FJ_INTERNAL const char *x64_op_name(x64_op op);
/* Explanation of an X64_E_* code. */
FJ_INTERNAL const char *x64_err_str(int err);

/* ---- decoder (used by the verifier; independent of the encoder table) ---- */

typedef struct x64_insn {
    uint8_t len;
    uint16_t gpr_writes;   /* bit r: the instruction writes GPR r (any width) */
    uint8_t rsp_kind;      /* X64_RSP_* below */
    int32_t rsp_delta;     /* X64_RSP_DELTA: rsp += delta */
    uint8_t is_ret, is_call, is_jump, is_leave, is_push_rbp, is_mov_rbp_rsp, is_pop_rbp;
    /* For `mov r/m64, r64` (89 /r) with a memory destination: the stored
     * register, the base register and displacement (else store_reg = 0xff).
     * The verifier matches callee-saved register saves against the CFI. */
    uint8_t store_reg, store_base;
    int32_t store_disp;
} x64_insn;

enum {
    X64_RSP_NONE = 0,      /* rsp unchanged */
    X64_RSP_DELTA,         /* push/pop/add/sub imm/lea rsp,[rsp+d]: known delta */
    X64_RSP_FROM_RBP,      /* mov rsp, rbp / leave */
    X64_RSP_OTHER,         /* any other write of rsp */
};

/* Decodes the instruction at p (at most n bytes). Returns its length, or 0
 * if the bytes are not an instruction the decoder understands (the verifier
 * rejects such code). Handles legacy/REX, VEX (2/3 byte) and EVEX. */
FJ_INTERNAL int x64_decode(const uint8_t *p, size_t n, x64_insn *out);

#endif
