/* framejit/ops.h: the instruction mnemonics the builder and encoder know.
 *
 * One X-macro list, shared by the public builder API (fj_op values) and the
 * internal encoder table (which lists the operand forms of each mnemonic).
 * _(NAME) becomes FJ_NAME; the text form is the lower-cased name.
 */
#ifndef FRAMEJIT_OPS_H
#define FRAMEJIT_OPS_H

#define FJ_CONDS(_, P) \
    _(P##O) _(P##NO) _(P##B) _(P##AE) \
    _(P##E) _(P##NE) _(P##BE) _(P##A) \
    _(P##S) _(P##NS) _(P##P) _(P##NP) \
    _(P##L) _(P##GE) _(P##LE) _(P##G)

/* Condition-code families are listed in condition order (o, no, b, ae, e,
 * ne, be, a, s, ns, p, np, l, ge, le, g) so that FJ_<family>O + cc gives
 * the instruction for x86 condition code cc. */
#define FJ_OPS_GPR(_) \
    _(MOV) _(MOVZX) _(MOVSX) _(MOVSXD) _(LEA) \
    _(ADD) _(SUB) _(ADC) _(AND) _(OR) _(XOR) \
    _(CMP) _(TEST) _(IMUL) _(NEG) _(NOT) \
    _(INC) _(DEC) _(SHL) _(SHR) _(SAR) _(ROL) \
    _(BZHI) _(SHLX) _(SHRX) \
    FJ_CONDS(_, CMOV) FJ_CONDS(_, SET) \
    _(JMP) FJ_CONDS(_, J) \
    _(CALL) _(RET) _(PUSH) _(POP) _(LEAVE) \
    _(PREFETCHT0) _(PREFETCHT1) _(PREFETCHNTA) \
    _(NOP) _(INT3) _(UD2)

#define FJ_OPS_AVX(_) \
    _(VMOVUPS) _(VMOVAPS) _(VMOVDQU) _(VMOVSS) \
    _(VMOVD) _(VMOVQ) \
    _(VBROADCASTSS) _(VMASKMOVPS) \
    _(VADDPS) _(VSUBPS) _(VMULPS) _(VDIVPS) \
    _(VMAXPS) _(VMINPS) \
    _(VADDSS) _(VMULSS) \
    _(VFMADD132PS) _(VFMADD213PS) _(VFMADD231PS) \
    _(VFNMADD231PS) \
    _(VCMPPS) _(VBLENDVPS) \
    _(VANDPS) _(VORPS) _(VXORPS) _(VANDNPS) \
    _(VCVTDQ2PS) _(VCVTPS2DQ) _(VCVTTPS2DQ) \
    _(VROUNDPS) _(VRCPPS) _(VRSQRTPS) _(VSQRTPS) \
    _(VPADDD) _(VPSUBD) _(VPSLLD) _(VPSRLD) \
    _(VPERMPS) _(VPERM2F128) \
    _(VEXTRACTF128) _(VINSERTF128) \
    _(VHADDPS) _(VHADDPD) _(VZEROUPPER)

#define FJ_OPS_AVX512(_) \
    _(VMOVDQU32) _(VBLENDMPS) \
    _(VSCALEFPS) _(VGETEXPPS) _(VGETMANTPS) \
    _(VREDUCEPS) _(VRNDSCALEPS) _(VPERMT2PS) \
    _(VEXTRACTF32X4) _(VEXTRACTF32X8) \
    _(VINSERTF32X4) _(VINSERTF32X8) \
    _(VCOMPRESSPS) _(VEXPANDPS) \
    _(VRCP14PS) _(VRSQRT14PS) \
    _(KMOVW) _(KMOVD) _(KANDW) _(KORW) _(KNOTW) \
    _(KORTESTW) _(VPBROADCASTD) _(VFPCLASSPS) _(VPTERNLOGD) \
    FJ_OPS_LATER(_)

/* Added after the lists above were published: at the end, so that the
 * fj_op values of the others stay as they were. */
#define FJ_OPS_LATER(_) \
    _(VMOVNTPS) _(SFENCE) \
    _(VMOVUPD) _(VBROADCASTSD) _(VMASKMOVPD) \
    _(VADDPD) _(VMULPD) _(VFMADD231PD) \
    _(VMAXPD) _(VMINPD) \
    _(VPDPBUSD) _(VPMADDUBSW) _(VPMADDWD) _(VDPBF16PS) \
    _(VPUNPCKLBW) _(VPUNPCKHBW) _(VPUNPCKLWD) _(VPUNPCKHWD) \
    _(VPMOVDB) _(VPMOVDW) \
    _(VSUBPD) _(VDIVPD) _(VSQRTPD) _(VFMADD213PD) _(VFNMADD231PD) \
    _(VCMPPD) _(VPSLLQ) _(VPSRLQ) _(VPSUBQ) \
    _(VPHADDD) _(VPERMT2W) _(VPERMT2PD)

#define FJ_OPS(_) FJ_OPS_GPR(_) FJ_OPS_AVX(_) FJ_OPS_AVX512(_)

#endif /* FRAMEJIT_OPS_H */
