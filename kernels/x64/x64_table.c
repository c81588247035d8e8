/* x64_table.c: the encoder's instruction forms, one row each, sorted by mnemonic. */
#include "kernels/x64/x64_table.h"

/*
 * Row = mnemonic, encoding, map|prefix, opcode, W, /digit, sizes, EVEX
 * tuple, flags, features, operands (Intel order, destination first).
 * Operand slots: G = ModRM.reg, E = ModRM.rm, H = vvvv, O = opcode low
 * bits, L = is4 (imm8[7:4]), A = implicit / immediate / branch target.
 * A mnemonic may have several rows; the encoder keeps the shortest legacy
 * or VEX encoding that matches and falls back to EVEX only when none does.
 * Rows of one mnemonic must be adjacent and mnemonics in x64_op order.
 */
#define G(c) ((XS_G << 8) | XC_##c)
#define E(c) ((XS_E << 8) | XC_##c)
#define H(c) ((XS_H << 8) | XC_##c)
#define O(c) ((XS_O << 8) | XC_##c)
#define L(c) ((XS_L << 8) | XC_##c)
#define A(c) (XC_##c)

#define ROW(op, enc, pfx, opc, w, ext, sz, tt, fl, feat, ...) \
    { X64_##op, XE_##enc, pfx, opc, XW_##w, ext, sz, XT_##tt, fl, feat, { __VA_ARGS__ } }

/* Shorthands for the columns. */
#define M1 XM_1B
#define M0F XM_0F
#define N0F (XP_NP | XM_0F)
#define P0F (XP_66 | XM_0F)
#define S0F (XP_F3 | XM_0F)
#define D0F (XP_F2 | XM_0F)
#define P38 (XP_66 | XM_0F38)
#define N38 (XM_0F38)
#define D38 (XP_F2 | XM_0F38)
#define P3A (XP_66 | XM_0F3A)
#define G32 XZ_32
#define G64 XZ_64
#define GQ (XZ_32 | XZ_64)
#define VX XZ_128
#define VY XZ_256
#define VZ XZ_512
#define VXY (XZ_128 | XZ_256)
#define VYZ (XZ_256 | XZ_512)
#define VXYZ (XZ_128 | XZ_256 | XZ_512)
#define AVX X64_F_AVX
#define AVX2 X64_F_AVX2
#define FMA X64_F_FMA
#define BMI2 X64_F_BMI2
#define F X64_F_AVX512F
#define DQ (X64_F_AVX512F | X64_F_AVX512DQ)
#define BW (X64_F_AVX512F | X64_F_AVX512BW)

/* ALU op with ModRM extension n: add/or/adc/and/sub/xor/cmp share opcodes
 * n*8 + {1: rm,r  3: r,rm  5: eax,imm32} and 83 /n ib, 81 /n id. */
#define ALU(op, n) \
    ROW(op, LEG, M1, (n) * 8 + 1, S, -1, GQ, NONE, 0, 0, E(RM), G(R)), \
    ROW(op, LEG, M1, (n) * 8 + 3, S, -1, GQ, NONE, 0, 0, G(R), E(RM)), \
    ROW(op, LEG, M1, 0x83, S, n, GQ, NONE, 0, 0, E(RM), A(I8)), \
    ROW(op, LEG, M1, (n) * 8 + 5, S, -1, GQ, NONE, 0, 0, A(RAX), A(I32)), \
    ROW(op, LEG, M1, 0x81, S, n, GQ, NONE, 0, 0, E(RM), A(I32))

/* Unary F7/FF /n r/m. */
#define UNARY(op, opc, n) ROW(op, LEG, M1, opc, S, n, GQ, NONE, 0, 0, E(RM))

/* Shift/rotate group 2 /n: by 1 (D1), by cl (D3), by imm8 (C1). */
#define SHIFT(op, n) \
    ROW(op, LEG, M1, 0xD1, S, n, GQ, NONE, 0, 0, E(RM), A(ONE)), \
    ROW(op, LEG, M1, 0xD3, S, n, GQ, NONE, 0, 0, E(RM), A(CL)), \
    ROW(op, LEG, M1, 0xC1, S, n, GQ, NONE, 0, 0, E(RM), A(U8))

/* Load (opcode l) and store (opcode s) forms of a full-width vector move. */
#define VMOVE(op, enc, pfx, l, s, tt, feat) \
    ROW(op, enc, pfx, l, 0, -1, (XE_##enc == XE_EVEX ? VXYZ : VXY), tt, 0, feat, G(V), E(VM)), \
    ROW(op, enc, pfx, s, 0, -1, (XE_##enc == XE_EVEX ? VXYZ : VXY), tt, 0, feat, E(VM), G(V))

/* Packed single v = op(v, v/m): VEX xmm/ymm, EVEX with {1to16}. */
#define PS3(op, pfx, opc, fv, fe) \
    ROW(op, VEX, pfx, opc, 0, -1, VXY, NONE, 0, fv, G(V), H(V), E(VM)), \
    ROW(op, EVEX, pfx, opc, 0, -1, VXYZ, FV, 0, fe, G(V), H(V), E(VMB))
/* Packed single v = op(v/m). */
#define PS2(op, pfx, opc, epfx, eopc) \
    ROW(op, VEX, pfx, opc, 0, -1, VXY, NONE, 0, AVX, G(V), E(VM)), \
    ROW(op, EVEX, epfx, eopc, 0, -1, VXYZ, FV, 0, F, G(V), E(VMB))
/* EVEX-only forms. */
#define EV3(op, pfx, opc, feat) ROW(op, EVEX, pfx, opc, 0, -1, VXYZ, FV, 0, feat, G(V), H(V), E(VMB))
#define EV2I(op, pfx, opc, feat) \
    ROW(op, EVEX, pfx, opc, 0, -1, VXYZ, FV, 0, feat, G(V), E(VMB), A(U8))
/* Scalar single xmm = op(xmm, xmm/m32). */
#define SS3(op, opc) \
    ROW(op, VEX, S0F, opc, 0, -1, VX, NONE, XF_LIG, AVX, G(X), H(X), E(XM32)), \
    ROW(op, EVEX, S0F, opc, 0, -1, VX, T1S4, XF_LIG, F, G(X), H(X), E(XM32))
/* Packed dword shift: by imm8 (72 /n) and by xmm/m128 count. */
#define PSHIFT(op, n, opc) \
    ROW(op, VEX, P0F, 0x72, 0, n, VXY, NONE, XF_I2, AVX, H(V), E(V), A(U8)), \
    ROW(op, EVEX, P0F, 0x72, 0, n, VXYZ, FV, 0, F, H(V), E(VMB), A(U8)), \
    ROW(op, VEX, P0F, opc, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(XM128)), \
    ROW(op, EVEX, P0F, opc, 0, -1, VXYZ, M128, 0, F, G(V), H(V), E(XM128))

const x64_row x64_rows[] = {
    /* ---- general purpose ---- */
    ROW(MOV, LEG, M1, 0x89, S, -1, GQ, NONE, 0, 0, E(RM), G(R)),
    ROW(MOV, LEG, M1, 0x8B, S, -1, GQ, NONE, 0, 0, G(R), E(RM)),
    ROW(MOV, LEG, M1, 0x88, 0, -1, 0, NONE, 0, 0, E(RM8), G(R8)),
    ROW(MOV, LEG, M1, 0x8A, 0, -1, 0, NONE, 0, 0, G(R8), E(RM8)),
    ROW(MOV, LEG, M1, 0xC6, 0, 0, 0, NONE, 0, 0, E(RM8), A(U8)),
    ROW(MOV, LEG, M1, 0xB8, S, -1, G32, NONE, 0, 0, O(R), A(I32)),
    ROW(MOV, LEG, M1, 0xC7, S, 0, GQ, NONE, 0, 0, E(RM), A(I32)),
    ROW(MOV, LEG, M1, 0xB8, S, -1, G64, NONE, 0, 0, O(R), A(I64)),  /* movabs */
    ROW(MOVZX, LEG, M0F, 0xB6, S, -1, GQ, NONE, 0, 0, G(R), E(RM8)),
    ROW(MOVZX, LEG, M0F, 0xB7, S, -1, GQ, NONE, 0, 0, G(R), E(RM16)),
    ROW(MOVSX, LEG, M0F, 0xBE, S, -1, GQ, NONE, 0, 0, G(R), E(RM8)),
    ROW(MOVSX, LEG, M0F, 0xBF, S, -1, GQ, NONE, 0, 0, G(R), E(RM16)),
    ROW(MOVSXD, LEG, M1, 0x63, 1, -1, 0, NONE, 0, 0, G(R64), E(RM32)),
    ROW(LEA, LEG, M1, 0x8D, S, -1, GQ, NONE, 0, 0, G(R), E(M)),
    ALU(ADD, 0),
    ALU(SUB, 5),
    ALU(ADC, 2),
    ALU(AND, 4),
    ALU(OR, 1),
    ALU(XOR, 6),
    ALU(CMP, 7),
    ROW(TEST, LEG, M1, 0x85, S, -1, GQ, NONE, 0, 0, E(RM), G(R)),
    ROW(TEST, LEG, M1, 0xA9, S, -1, GQ, NONE, 0, 0, A(RAX), A(I32)),
    ROW(TEST, LEG, M1, 0xF7, S, 0, GQ, NONE, 0, 0, E(RM), A(I32)),
    ROW(IMUL, LEG, M0F, 0xAF, S, -1, GQ, NONE, 0, 0, G(R), E(RM)),
    ROW(IMUL, LEG, M1, 0x6B, S, -1, GQ, NONE, 0, 0, G(R), E(RM), A(I8)),
    ROW(IMUL, LEG, M1, 0x69, S, -1, GQ, NONE, 0, 0, G(R), E(RM), A(I32)),
    UNARY(NEG, 0xF7, 3),
    UNARY(NOT, 0xF7, 2),
    UNARY(INC, 0xFF, 0),
    UNARY(DEC, 0xFF, 1),
    SHIFT(SHL, 4),
    SHIFT(SHR, 5),
    SHIFT(SAR, 7),
    SHIFT(ROL, 0),
    ROW(BZHI, VEX, N38, 0xF5, S, -1, GQ | VX, NONE, 0, BMI2, G(R), E(RM), H(R)),
    ROW(SHLX, VEX, P38, 0xF7, S, -1, GQ | VX, NONE, 0, BMI2, G(R), E(RM), H(R)),
    ROW(SHRX, VEX, D38, 0xF7, S, -1, GQ | VX, NONE, 0, BMI2, G(R), E(RM), H(R)),
    ROW(CMOVO, LEG, M0F, 0x40, S, -1, GQ, NONE, XF_CC, 0, G(R), E(RM)),
    ROW(SETO, LEG, M0F, 0x90, 0, 0, 0, NONE, XF_CC, 0, E(RM8)),
    ROW(JMP, LEG, M1, 0xEB, 0, -1, 0, NONE, 0, 0, A(REL8)),
    ROW(JMP, LEG, M1, 0xE9, 0, -1, 0, NONE, 0, 0, A(REL32)),
    ROW(JMP, LEG, M1, 0xFF, 0, 4, 0, NONE, 0, 0, E(RM64)),
    ROW(JO, LEG, M1, 0x70, 0, -1, 0, NONE, XF_CC, 0, A(REL8)),
    ROW(JO, LEG, M0F, 0x80, 0, -1, 0, NONE, XF_CC, 0, A(REL32)),
    ROW(CALL, LEG, M1, 0xE8, 0, -1, 0, NONE, 0, 0, A(REL32)),
    ROW(CALL, LEG, M1, 0xFF, 0, 2, 0, NONE, 0, 0, E(RM64)),
    ROW(RET, LEG, M1, 0xC3, 0, -1, 0, NONE, 0, 0, 0),
    ROW(PUSH, LEG, M1, 0x50, 0, -1, 0, NONE, 0, 0, O(R64)),
    ROW(PUSH, LEG, M1, 0xFF, 0, 6, 0, NONE, 0, 0, E(M64)),
    ROW(POP, LEG, M1, 0x58, 0, -1, 0, NONE, 0, 0, O(R64)),
    ROW(POP, LEG, M1, 0x8F, 0, 0, 0, NONE, 0, 0, E(M64)),
    ROW(LEAVE, LEG, M1, 0xC9, 0, -1, 0, NONE, 0, 0, 0),
    ROW(PREFETCHT0, LEG, M0F, 0x18, 0, 1, 0, NONE, 0, 0, E(M)),
    ROW(PREFETCHT1, LEG, M0F, 0x18, 0, 2, 0, NONE, 0, 0, E(M)),
    ROW(PREFETCHNTA, LEG, M0F, 0x18, 0, 0, 0, NONE, 0, 0, E(M)),
    ROW(NOP, LEG, M1, 0x90, 0, -1, 0, NONE, 0, 0, 0),
    ROW(INT3, LEG, M1, 0xCC, 0, -1, 0, NONE, 0, 0, 0),
    ROW(UD2, LEG, M0F, 0x0B, 0, -1, 0, NONE, 0, 0, 0),

    /* ---- AVX / AVX2 / FMA, with their AVX-512 forms ---- */
    VMOVE(VMOVUPS, VEX, N0F, 0x10, 0x11, NONE, AVX),
    VMOVE(VMOVUPS, EVEX, N0F, 0x10, 0x11, FVM, F),
    VMOVE(VMOVAPS, VEX, N0F, 0x28, 0x29, NONE, AVX),
    VMOVE(VMOVAPS, EVEX, N0F, 0x28, 0x29, FVM, F),
    VMOVE(VMOVDQU, VEX, S0F, 0x6F, 0x7F, NONE, AVX),
    VMOVE(VMOVDQU, EVEX, S0F, 0x6F, 0x7F, FVM, F),   /* = vmovdqu32 */
    ROW(VMOVSS, VEX, S0F, 0x10, 0, -1, VX, NONE, XF_LIG, AVX, G(X), E(M32)),
    ROW(VMOVSS, VEX, S0F, 0x11, 0, -1, VX, NONE, XF_LIG, AVX, E(M32), G(X)),
    ROW(VMOVSS, VEX, S0F, 0x10, 0, -1, VX, NONE, XF_LIG, AVX, G(X), H(X), E(X)),
    ROW(VMOVSS, VEX, S0F, 0x11, 0, -1, VX, NONE, XF_LIG, AVX, E(X), H(X), G(X)),
    ROW(VMOVSS, EVEX, S0F, 0x10, 0, -1, VX, T1S4, XF_LIG, F, G(X), E(M32)),
    ROW(VMOVSS, EVEX, S0F, 0x11, 0, -1, VX, T1S4, XF_LIG, F, E(M32), G(X)),
    ROW(VMOVSS, EVEX, S0F, 0x10, 0, -1, VX, T1S4, XF_LIG, F, G(X), H(X), E(X)),
    ROW(VMOVSS, EVEX, S0F, 0x11, 0, -1, VX, T1S4, XF_LIG, F, E(X), H(X), G(X)),
    ROW(VMOVD, VEX, P0F, 0x6E, 0, -1, VX, NONE, XF_LIG, AVX, G(X), E(RM32)),
    ROW(VMOVD, VEX, P0F, 0x7E, 0, -1, VX, NONE, XF_LIG, AVX, E(RM32), G(X)),
    ROW(VMOVD, EVEX, P0F, 0x6E, 0, -1, VX, T1S4, XF_LIG | XF_NOK, F, G(X), E(RM32)),
    ROW(VMOVD, EVEX, P0F, 0x7E, 0, -1, VX, T1S4, XF_LIG | XF_NOK, F, E(RM32), G(X)),
    ROW(VMOVQ, VEX, P0F, 0x6E, 1, -1, VX, NONE, XF_LIG, AVX, G(X), E(RM64)),
    ROW(VMOVQ, VEX, P0F, 0x7E, 1, -1, VX, NONE, XF_LIG, AVX, E(RM64), G(X)),
    ROW(VMOVQ, VEX, S0F, 0x7E, 0, -1, VX, NONE, XF_LIG, AVX, G(X), E(XM64)),
    ROW(VMOVQ, VEX, P0F, 0xD6, 0, -1, VX, NONE, XF_LIG, AVX, E(XM64), G(X)),
    ROW(VMOVQ, EVEX, P0F, 0x6E, 1, -1, VX, T1S8, XF_LIG | XF_NOK, F, G(X), E(RM64)),
    ROW(VMOVQ, EVEX, P0F, 0x7E, 1, -1, VX, T1S8, XF_LIG | XF_NOK, F, E(RM64), G(X)),
    ROW(VMOVQ, EVEX, S0F, 0x7E, 1, -1, VX, T1S8, XF_LIG | XF_NOK, F, G(X), E(XM64)),
    ROW(VMOVQ, EVEX, P0F, 0xD6, 1, -1, VX, T1S8, XF_LIG | XF_NOK, F, E(XM64), G(X)),
    ROW(VBROADCASTSS, VEX, P38, 0x18, 0, -1, VXY, NONE, 0, AVX, G(V), E(M32)),
    ROW(VBROADCASTSS, VEX, P38, 0x18, 0, -1, VXY, NONE, 0, AVX2, G(V), E(X)),
    ROW(VBROADCASTSS, EVEX, P38, 0x18, 0, -1, VXYZ, T1S4, 0, F, G(V), E(XM32)),
    ROW(VMASKMOVPS, VEX, P38, 0x2C, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(MV)),
    ROW(VMASKMOVPS, VEX, P38, 0x2E, 0, -1, VXY, NONE, 0, AVX, E(MV), H(V), G(V)),
    PS3(VADDPS, N0F, 0x58, AVX, F),
    PS3(VSUBPS, N0F, 0x5C, AVX, F),
    PS3(VMULPS, N0F, 0x59, AVX, F),
    PS3(VDIVPS, N0F, 0x5E, AVX, F),
    PS3(VMAXPS, N0F, 0x5F, AVX, F),
    PS3(VMINPS, N0F, 0x5D, AVX, F),
    SS3(VADDSS, 0x58),
    SS3(VMULSS, 0x59),
    PS3(VFMADD132PS, P38, 0x98, FMA, F),
    PS3(VFMADD213PS, P38, 0xA8, FMA, F),
    PS3(VFMADD231PS, P38, 0xB8, FMA, F),
    PS3(VFNMADD231PS, P38, 0xBC, FMA, F),
    ROW(VCMPPS, VEX, N0F, 0xC2, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM), A(U8)),
    ROW(VCMPPS, EVEX, N0F, 0xC2, 0, -1, VXYZ, FV, 0, F, G(K), H(V), E(VMB), A(U8)),
    ROW(VBLENDVPS, VEX, P3A, 0x4A, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM), L(V)),
    PS3(VANDPS, N0F, 0x54, AVX, DQ),
    PS3(VORPS, N0F, 0x56, AVX, DQ),
    PS3(VXORPS, N0F, 0x57, AVX, DQ),
    PS3(VANDNPS, N0F, 0x55, AVX, DQ),
    PS2(VCVTDQ2PS, N0F, 0x5B, N0F, 0x5B),
    PS2(VCVTPS2DQ, P0F, 0x5B, P0F, 0x5B),
    PS2(VCVTTPS2DQ, S0F, 0x5B, S0F, 0x5B),
    ROW(VROUNDPS, VEX, P3A, 0x08, 0, -1, VXY, NONE, 0, AVX, G(V), E(VM), A(U8)),
    /* No EVEX vrcpps/vrsqrtps: the AVX-512 forms are vrcp14ps/vrsqrt14ps
     * (more precise, so a kernel written at any width stays correct). */
    PS2(VRCPPS, N0F, 0x53, P38, 0x4C),
    PS2(VRSQRTPS, N0F, 0x52, P38, 0x4E),
    PS2(VSQRTPS, N0F, 0x51, N0F, 0x51),
    ROW(VPADDD, VEX, P0F, 0xFE, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPADDD, EVEX, P0F, 0xFE, 0, -1, VXYZ, FV, 0, F, G(V), H(V), E(VMB)),
    ROW(VPSUBD, VEX, P0F, 0xFA, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPSUBD, EVEX, P0F, 0xFA, 0, -1, VXYZ, FV, 0, F, G(V), H(V), E(VMB)),
    PSHIFT(VPSLLD, 6, 0xF2),
    PSHIFT(VPSRLD, 2, 0xD2),
    ROW(VPERMPS, VEX, P38, 0x16, 0, -1, VY, NONE, 0, AVX2, G(V), H(V), E(VM)),
    ROW(VPERMPS, EVEX, P38, 0x16, 0, -1, VYZ, FV, 0, F, G(V), H(V), E(VMB)),
    ROW(VPERM2F128, VEX, P3A, 0x06, 0, -1, VY, NONE, 0, AVX, G(Y), H(Y), E(YM), A(U8)),
    ROW(VEXTRACTF128, VEX, P3A, 0x19, 0, -1, VY, NONE, 0, AVX, E(XM128), G(Y), A(U8)),
    ROW(VINSERTF128, VEX, P3A, 0x18, 0, -1, VY, NONE, 0, AVX, G(Y), H(Y), E(XM128), A(U8)),
    ROW(VHADDPS, VEX, D0F, 0x7C, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM)),
    ROW(VHADDPD, VEX, P0F, 0x7C, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM)),
    ROW(VZEROUPPER, VEX, N0F, 0x77, 0, -1, VX, NONE, 0, AVX, 0),

    /* ---- AVX-512 only ---- */
    VMOVE(VMOVDQU32, EVEX, S0F, 0x6F, 0x7F, FVM, F),
    EV3(VBLENDMPS, P38, 0x65, F),
    EV3(VSCALEFPS, P38, 0x2C, F),
    ROW(VGETEXPPS, EVEX, P38, 0x42, 0, -1, VXYZ, FV, 0, F, G(V), E(VMB)),
    EV2I(VGETMANTPS, P3A, 0x26, F),
    EV2I(VREDUCEPS, P3A, 0x56, DQ),
    EV2I(VRNDSCALEPS, P3A, 0x08, F),
    EV3(VPERMT2PS, P38, 0x7F, F),
    ROW(VEXTRACTF32X4, EVEX, P3A, 0x19, 0, -1, VYZ, T4, 0, F, E(XM128), G(V), A(U8)),
    ROW(VEXTRACTF32X8, EVEX, P3A, 0x1B, 0, -1, VZ, T8, 0, DQ, E(YM), G(V), A(U8)),
    ROW(VINSERTF32X4, EVEX, P3A, 0x18, 0, -1, VYZ, T4, 0, F, G(V), H(V), E(XM128), A(U8)),
    ROW(VINSERTF32X8, EVEX, P3A, 0x1A, 0, -1, VZ, T8, 0, DQ, G(V), H(V), E(YM), A(U8)),
    ROW(VCOMPRESSPS, EVEX, P38, 0x8A, 0, -1, VXYZ, T1S4, 0, F, E(VM), G(V)),
    ROW(VEXPANDPS, EVEX, P38, 0x88, 0, -1, VXYZ, T1S4, 0, F, G(V), E(VM)),
    ROW(VRCP14PS, EVEX, P38, 0x4C, 0, -1, VXYZ, FV, 0, F, G(V), E(VMB)),
    ROW(VRSQRT14PS, EVEX, P38, 0x4E, 0, -1, VXYZ, FV, 0, F, G(V), E(VMB)),
    ROW(KMOVW, VEX, N0F, 0x90, 0, -1, VX, NONE, 0, F, G(K), E(KM16)),
    ROW(KMOVW, VEX, N0F, 0x91, 0, -1, VX, NONE, 0, F, E(M16), G(K)),
    ROW(KMOVW, VEX, N0F, 0x92, 0, -1, VX, NONE, 0, F, G(K), E(R32)),
    ROW(KMOVW, VEX, N0F, 0x93, 0, -1, VX, NONE, 0, F, G(R32), E(K)),
    ROW(KMOVD, VEX, P0F, 0x90, 1, -1, VX, NONE, 0, BW, G(K), E(KM32)),
    ROW(KMOVD, VEX, P0F, 0x91, 1, -1, VX, NONE, 0, BW, E(M32), G(K)),
    ROW(KMOVD, VEX, D0F, 0x92, 0, -1, VX, NONE, 0, BW, G(K), E(R32)),
    ROW(KMOVD, VEX, D0F, 0x93, 0, -1, VX, NONE, 0, BW, G(R32), E(K)),
    ROW(KANDW, VEX, N0F, 0x41, 0, -1, VY, NONE, 0, F, G(K), H(K), E(K)),
    ROW(KORW, VEX, N0F, 0x45, 0, -1, VY, NONE, 0, F, G(K), H(K), E(K)),
    ROW(KNOTW, VEX, N0F, 0x44, 0, -1, VX, NONE, 0, F, G(K), E(K)),
    ROW(KORTESTW, VEX, N0F, 0x98, 0, -1, VX, NONE, 0, F, G(K), E(K)),
    ROW(VPBROADCASTD, VEX, P38, 0x58, 0, -1, VXY, NONE, 0, AVX2, G(V), E(XM32)),
    ROW(VPBROADCASTD, EVEX, P38, 0x58, 0, -1, VXYZ, T1S4, 0, F, G(V), E(XM32)),
    ROW(VPBROADCASTD, EVEX, P38, 0x7C, 0, -1, VXYZ, NONE, 0, F, G(V), E(R32)),
    ROW(VFPCLASSPS, EVEX, P3A, 0x66, 0, -1, VXYZ, FV, 0, DQ, G(K), E(VMB), A(U8)),
    ROW(VPTERNLOGD, EVEX, P3A, 0x25, 0, -1, VXYZ, FV, 0, F, G(V), H(V), E(VMB), A(U8)),

    /* ---- later additions (FJ_OPS_LATER) ---- */
    ROW(VMOVNTPS, VEX, N0F, 0x2B, 0, -1, VXY, NONE, 0, AVX, E(MV), G(V)),
    ROW(VMOVNTPS, EVEX, N0F, 0x2B, 0, -1, VXYZ, FVM, XF_NOK, F, E(MV), G(V)),
    ROW(SFENCE, LEG, M0F, 0xAE, 0, 7, 0, NONE, XF_RM0, 0, 0),
    /* Packed double (W1 under EVEX). No {1to8} forms: the FV tuple's
     * broadcast element is 32-bit, so f64 kernels broadcast into a register. */
    ROW(VMOVUPD, VEX, P0F, 0x10, 0, -1, VXY, NONE, 0, AVX, G(V), E(VM)),
    ROW(VMOVUPD, VEX, P0F, 0x11, 0, -1, VXY, NONE, 0, AVX, E(VM), G(V)),
    ROW(VMOVUPD, EVEX, P0F, 0x10, 1, -1, VXYZ, FVM, 0, F, G(V), E(VM)),
    ROW(VMOVUPD, EVEX, P0F, 0x11, 1, -1, VXYZ, FVM, 0, F, E(VM), G(V)),
    ROW(VBROADCASTSD, VEX, P38, 0x19, 0, -1, VY, NONE, 0, AVX, G(V), E(M64)),
    ROW(VBROADCASTSD, EVEX, P38, 0x19, 1, -1, VYZ, T1S8, 0, F, G(V), E(XM64)),
    ROW(VMASKMOVPD, VEX, P38, 0x2D, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(MV)),
    ROW(VMASKMOVPD, VEX, P38, 0x2F, 0, -1, VXY, NONE, 0, AVX, E(MV), H(V), G(V)),
    ROW(VADDPD, VEX, P0F, 0x58, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM)),
    ROW(VADDPD, EVEX, P0F, 0x58, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    ROW(VMULPD, VEX, P0F, 0x59, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM)),
    ROW(VMULPD, EVEX, P0F, 0x59, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    ROW(VFMADD231PD, VEX, P38, 0xB8, 1, -1, VXY, NONE, 0, FMA, G(V), H(V), E(VM)),
    ROW(VFMADD231PD, EVEX, P38, 0xB8, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    ROW(VMAXPD, VEX, P0F, 0x5F, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM)),
    ROW(VMAXPD, EVEX, P0F, 0x5F, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    ROW(VMINPD, VEX, P0F, 0x5D, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM)),
    ROW(VMINPD, EVEX, P0F, 0x5D, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    /* Low-precision dot products. vpdpbusd: u8 (vvvv) x s8 (r/m) in groups
     * of four into dwords; the VEX form is AVX-VNNI. vpmaddubsw/vpmaddwd:
     * the pre-VNNI pair (saturating u8 x s8 into words, then words into
     * dwords). vdpbf16ps: bf16 pairs into f32. */
    ROW(VPDPBUSD, VEX, P38, 0x50, 0, -1, VXY, NONE, 0, X64_F_AVXVNNI, G(V), H(V), E(VM)),
    ROW(VPDPBUSD, EVEX, P38, 0x50, 0, -1, VXYZ, FV, 0, F | X64_F_AVX512VNNI, G(V), H(V), E(VMB)),
    ROW(VPMADDUBSW, VEX, P38, 0x04, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPMADDUBSW, EVEX, P38, 0x04, 0, -1, VXYZ, FVM, 0, BW, G(V), H(V), E(VM)),
    ROW(VPMADDWD, VEX, P0F, 0xF5, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPMADDWD, EVEX, P0F, 0xF5, 0, -1, VXYZ, FVM, 0, BW, G(V), H(V), E(VM)),
    ROW(VDPBF16PS, EVEX, (XP_F3 | XM_0F38), 0x52, 0, -1, VXYZ, FV, 0, F | X64_F_AVX512BF16, G(V), H(V), E(VMB)),
    ROW(VPUNPCKLBW, VEX, P0F, 0x60, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPUNPCKLBW, EVEX, P0F, 0x60, 0, -1, VXYZ, FVM, 0, BW, G(V), H(V), E(VM)),
    ROW(VPUNPCKHBW, VEX, P0F, 0x68, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPUNPCKHBW, EVEX, P0F, 0x68, 0, -1, VXYZ, FVM, 0, BW, G(V), H(V), E(VM)),
    ROW(VPUNPCKLWD, VEX, P0F, 0x61, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPUNPCKLWD, EVEX, P0F, 0x61, 0, -1, VXYZ, FVM, 0, BW, G(V), H(V), E(VM)),
    ROW(VPUNPCKHWD, VEX, P0F, 0x69, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPUNPCKHWD, EVEX, P0F, 0x69, 0, -1, VXYZ, FVM, 0, BW, G(V), H(V), E(VM)),
    /* Truncating narrows of zmm dwords to bytes / words (the quantized
     * epilogue's stores, values already in range). */
    ROW(VPMOVDB, EVEX, (XP_F3 | XM_0F38), 0x31, 0, -1, VZ, T4, 0, F, E(XM128), G(V)),
    ROW(VPMOVDW, EVEX, (XP_F3 | XM_0F38), 0x33, 0, -1, VZ, T8, 0, F, E(YM), G(V)),
    /* The f64 epilogue's math (packed double, W1 under EVEX, no {1to8}
     * forms as above; bitwise ops and vector-mask blends use the ps forms,
     * which act on the same bits). vcmppd's EVEX form writes a mask. */
    ROW(VSUBPD, VEX, P0F, 0x5C, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM)),
    ROW(VSUBPD, EVEX, P0F, 0x5C, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    ROW(VDIVPD, VEX, P0F, 0x5E, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM)),
    ROW(VDIVPD, EVEX, P0F, 0x5E, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    ROW(VSQRTPD, VEX, P0F, 0x51, 0, -1, VXY, NONE, 0, AVX, G(V), E(VM)),
    ROW(VSQRTPD, EVEX, P0F, 0x51, 1, -1, VXYZ, FVM, 0, F, G(V), E(VM)),
    ROW(VFMADD213PD, VEX, P38, 0xA8, 1, -1, VXY, NONE, 0, FMA, G(V), H(V), E(VM)),
    ROW(VFMADD213PD, EVEX, P38, 0xA8, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    ROW(VFNMADD231PD, VEX, P38, 0xBC, 1, -1, VXY, NONE, 0, FMA, G(V), H(V), E(VM)),
    ROW(VFNMADD231PD, EVEX, P38, 0xBC, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    ROW(VCMPPD, VEX, P0F, 0xC2, 0, -1, VXY, NONE, 0, AVX, G(V), H(V), E(VM), A(U8)),
    ROW(VCMPPD, EVEX, P0F, 0xC2, 1, -1, VXYZ, FVM, 0, F, G(K), H(V), E(VM), A(U8)),
    ROW(VPSLLQ, VEX, P0F, 0x73, 0, 6, VXY, NONE, XF_I2, AVX, H(V), E(V), A(U8)),
    ROW(VPSLLQ, EVEX, P0F, 0x73, 1, 6, VXYZ, FVM, 0, F, H(V), E(VM), A(U8)),
    ROW(VPSRLQ, VEX, P0F, 0x73, 0, 2, VXY, NONE, XF_I2, AVX, H(V), E(V), A(U8)),
    ROW(VPSRLQ, EVEX, P0F, 0x73, 1, 2, VXYZ, FVM, 0, F, H(V), E(VM), A(U8)),
    ROW(VPSUBQ, VEX, P0F, 0xFB, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    ROW(VPSUBQ, EVEX, P0F, 0xFB, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
    /* Horizontal dword add within each 128-bit lane (no EVEX form): the
     * AVX2 matrix x vector kernel's row sums. */
    ROW(VPHADDD, VEX, P38, 0x02, 0, -1, VXY, NONE, XF_I2, AVX, G(V), H(V), E(VM)),
    /* Word permute of two tables (the destination's and r/m's) by the
     * indexes in vvvv: interleaves two rows of bf16 into k pairs. */
    ROW(VPERMT2W, EVEX, P38, 0x7D, 1, -1, VXYZ, FVM, 0, BW, G(V), H(V), E(VM)),
    ROW(VPERMT2PD, EVEX, P38, 0x7F, 1, -1, VXYZ, FVM, 0, F, G(V), H(V), E(VM)),
};

const int x64_nrows = (int)(sizeof x64_rows / sizeof x64_rows[0]);
_Static_assert(sizeof x64_rows / sizeof x64_rows[0] <= X64_MAX_ROWS, "raise X64_MAX_ROWS");
