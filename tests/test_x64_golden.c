/* test_x64_golden.c: x86-64 encoder golden triples (text, operands, bytes) and error cases. */


#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/x64/x64.h"
#include "kernels/x64/x64_templ.h"
#include "fjtest.h"

/* Operand initializers. Registers are physical numbers. */
#define GPR(b, r) { .kind = X64_K_GPR, .bits = b, .reg = r, .base = X64_NOREG, .index = X64_NOREG }
#define Q(r) GPR(64, X64_##r)
#define D(r) GPR(32, X64_##r)
#define W16(r) GPR(16, X64_##r)
#define B8(n) GPR(8, n)
#define VEC(b, n) { .kind = X64_K_VEC, .bits = b, .reg = n, .base = X64_NOREG, .index = X64_NOREG }
#define XMM(n) VEC(128, n)
#define YMM(n) VEC(256, n)
#define ZMM(n) VEC(512, n)
#define ZMMK(n, k, z) { .kind = X64_K_VEC, .bits = 512, .reg = n, .mask = k, .zero = z, \
                        .base = X64_NOREG, .index = X64_NOREG }
#define YMMK(n, k, z) { .kind = X64_K_VEC, .bits = 256, .reg = n, .mask = k, .zero = z, \
                        .base = X64_NOREG, .index = X64_NOREG }
#define KR(n) { .kind = X64_K_KREG, .bits = 16, .reg = n, .base = X64_NOREG, .index = X64_NOREG }
#define KRK(n, k) { .kind = X64_K_KREG, .bits = 16, .reg = n, .mask = k, .base = X64_NOREG, \
                    .index = X64_NOREG }
/* [base + index*scale + disp] with bits access width */
#define MEM(b, bs, idx, sc, d) { .kind = X64_K_MEM, .bits = b, .base = bs, .index = idx, \
                                   .scale = sc, .disp = d }
#define M(b, bs, d) MEM(b, X64_##bs, X64_NOREG, 1, d)
#define MX(b, bs, idx, sc, d) MEM(b, X64_##bs, X64_##idx, sc, d)
#define MRIP(b, d) MEM(b, X64_RIP, X64_NOREG, 1, d)
#define MK(b, bs, d, k) { .kind = X64_K_MEM, .bits = b, .base = X64_##bs, .index = X64_NOREG, \
                            .scale = 1, .disp = d, .mask = k }
#define BC(bs, d) { .kind = X64_K_MEM, .bits = 32, .base = X64_##bs, .index = X64_NOREG, \
                      .scale = 1, .disp = d, .bcst = 1 }
#define IMM(v) { .kind = X64_K_IMM, .imm = v, .base = X64_NOREG, .index = X64_NOREG }
#define REL(b, v) { .kind = X64_K_REL, .bits = b, .imm = v, .base = X64_NOREG, .index = X64_NOREG }

typedef struct golden {
    const char *text;     /* what it is, in Intel syntax */
    const char *hex;      /* expected bytes (from the GNU assembler) */
    x64_op op;
    int n;
    x64_opnd o[4];
} golden;

#define X(name) X64_##name
static const golden cases[] = {
    /* REX.W vs none, REX.R/B only */
    { "mov rax, rbx", "48 89 d8", X(MOV), 2, { Q(RAX), Q(RBX) } },
    { "mov eax, ebx", "89 d8", X(MOV), 2, { D(RAX), D(RBX) } },
    { "mov r8d, eax", "41 89 c0", X(MOV), 2, { D(R8), D(RAX) } },
    { "mov r15, r9", "4d 89 cf", X(MOV), 2, { Q(R15), Q(R9) } },
    /* rbp/r13 bases need a disp8 0; rsp/r12 bases need a SIB byte */
    { "mov rax, qword ptr [rbp]", "48 8b 45 00", X(MOV), 2, { Q(RAX), M(64, RBP, 0) } },
    { "mov rax, qword ptr [r13]", "49 8b 45 00", X(MOV), 2, { Q(RAX), M(64, R13, 0) } },
    { "mov rax, qword ptr [rsp]", "48 8b 04 24", X(MOV), 2, { Q(RAX), M(64, RSP, 0) } },
    { "mov rax, qword ptr [r12]", "49 8b 04 24", X(MOV), 2, { Q(RAX), M(64, R12, 0) } },
    { "mov rax, qword ptr [rsp+8]", "48 8b 44 24 08", X(MOV), 2, { Q(RAX), M(0, RSP, 8) } },
    { "mov rax, qword ptr [r12+0x100]", "49 8b 84 24 00 01 00 00", X(MOV), 2, { Q(RAX), M(64, R12, 0x100) } },
    { "mov rax, qword ptr [rbp+r13*2]", "4a 8b 44 6d 00", X(MOV), 2, { Q(RAX), MX(64, RBP, R13, 2, 0) } },
    { "mov rax, qword ptr [r13+rax*4+0x7f]", "49 8b 44 85 7f", X(MOV), 2, { Q(RAX), MX(64, R13, RAX, 4, 0x7f) } },
    { "mov rcx, qword ptr [rbp-0x80]", "48 8b 4d 80", X(MOV), 2, { Q(RCX), M(64, RBP, -0x80) } },
    { "mov rcx, qword ptr [rbp-0x81]", "48 8b 8d 7f ff ff ff", X(MOV), 2, { Q(RCX), M(64, RBP, -0x81) } },
    /* index without base, absolute, RIP-relative */
    { "mov rax, qword ptr [rcx*8+0x10]", "48 8b 04 cd 10 00 00 00", X(MOV), 2, { Q(RAX), MEM(64, X64_NOREG, X64_RCX, 8, 0x10) } },
    { "mov rax, qword ptr [r9*2]", "4a 8b 04 4d 00 00 00 00", X(MOV), 2, { Q(RAX), MEM(64, X64_NOREG, X64_R9, 2, 0) } },
    { "mov eax, dword ptr [0x1000]", "8b 04 25 00 10 00 00", X(MOV), 2, { D(RAX), MEM(32, X64_NOREG, X64_NOREG, 1, 0x1000) } },
    { "mov rax, qword ptr [rip+0x12345678]", "48 8b 05 78 56 34 12", X(MOV), 2, { Q(RAX), MRIP(64, 0x12345678) } },
    { "mov qword ptr [rdi+8], r9", "4c 89 4f 08", X(MOV), 2, { M(64, RDI, 8), Q(R9) } },
    /* immediates: mov picks b8 id / c7 id / movabs */
    { "mov eax, 0x12345678", "b8 78 56 34 12", X(MOV), 2, { D(RAX), IMM(0x12345678) } },
    { "mov eax, 0xffffffff", "b8 ff ff ff ff", X(MOV), 2, { D(RAX), IMM(0xffffffff) } },
    { "mov rax, -1", "48 c7 c0 ff ff ff ff", X(MOV), 2, { Q(RAX), IMM(-1) } },
    { "movabs rax, 0x80000000", "48 b8 00 00 00 80 00 00 00 00", X(MOV), 2, { Q(RAX), IMM(0x80000000) } },
    { "movabs r10, 0x123456789abcdef", "49 ba ef cd ab 89 67 45 23 01", X(MOV), 2, { Q(R10), IMM(0x123456789abcdefLL) } },
    { "mov dword ptr [rax], 5", "c7 00 05 00 00 00", X(MOV), 2, { M(32, RAX, 0), IMM(5) } },
    { "mov qword ptr [rsp+0x10], -2", "48 c7 44 24 10 fe ff ff ff", X(MOV), 2, { M(64, RSP, 0x10), IMM(-2) } },
    /* 8-bit register 6 is sil (needs a REX), never dh */
    { "mov byte ptr [rdi], sil", "40 88 37", X(MOV), 2, { M(8, RDI, 0), B8(6) } },
    { "mov byte ptr [rdi], bl", "88 1f", X(MOV), 2, { M(8, RDI, 0), B8(3) } },
    { "movzx eax, byte ptr [rdi]", "0f b6 07", X(MOVZX), 2, { D(RAX), M(8, RDI, 0) } },
    { "movzx rax, word ptr [rsi]", "48 0f b7 06", X(MOVZX), 2, { Q(RAX), M(16, RSI, 0) } },
    { "movzx ecx, spl", "40 0f b6 cc", X(MOVZX), 2, { D(RCX), B8(4) } },
    { "movsx r8, dil", "4c 0f be c7", X(MOVSX), 2, { Q(R8), B8(7) } },
    { "movsx eax, r9w", "41 0f bf c1", X(MOVSX), 2, { D(RAX), W16(R9) } },
    { "movsxd rax, dword ptr [rdi]", "48 63 07", X(MOVSXD), 2, { Q(RAX), M(32, RDI, 0) } },
    { "movsxd r11, ecx", "4c 63 d9", X(MOVSXD), 2, { Q(R11), D(RCX) } },
    { "lea rax, [rip+0x10]", "48 8d 05 10 00 00 00", X(LEA), 2, { Q(RAX), MRIP(0, 0x10) } },
    { "lea r11, [rax+rbx*2+1]", "4c 8d 5c 58 01", X(LEA), 2, { Q(R11), MX(0, RAX, RBX, 2, 1) } },
    { "lea eax, [r12+r12*8]", "43 8d 04 e4", X(LEA), 2, { D(RAX), MX(0, R12, R12, 8, 0) } },
    /* ALU: imm8 vs imm32, the rax short form */
    { "add rax, 8", "48 83 c0 08", X(ADD), 2, { Q(RAX), IMM(8) } },
    { "add rax, 0x80", "48 05 80 00 00 00", X(ADD), 2, { Q(RAX), IMM(0x80) } },
    { "add rcx, -128", "48 83 c1 80", X(ADD), 2, { Q(RCX), IMM(-128) } },
    { "add rcx, 0x1000", "48 81 c1 00 10 00 00", X(ADD), 2, { Q(RCX), IMM(0x1000) } },
    { "add ecx, -1", "83 c1 ff", X(ADD), 2, { D(RCX), IMM(0xffffffff) } },
    { "add rax, rbx", "48 01 d8", X(ADD), 2, { Q(RAX), Q(RBX) } },
    { "sub r8, qword ptr [rdi+0x40]", "4c 2b 47 40", X(SUB), 2, { Q(R8), M(64, RDI, 0x40) } },
    { "sub dword ptr [r14+rcx*4], eax", "41 29 04 8e", X(SUB), 2, { MX(32, R14, RCX, 4, 0), D(RAX) } },
    { "cmp qword ptr [rbp-8], 0", "48 83 7d f8 00", X(CMP), 2, { M(64, RBP, -8), IMM(0) } },
    { "cmp r9d, 1000", "41 81 f9 e8 03 00 00", X(CMP), 2, { D(R9), IMM(1000) } },
    { "and eax, 0x7fffffff", "25 ff ff ff 7f", X(AND), 2, { D(RAX), IMM(0x7fffffff) } },
    { "xor eax, eax", "31 c0", X(XOR), 2, { D(RAX), D(RAX) } },
    { "or r9, r10", "4d 09 d1", X(OR), 2, { Q(R9), Q(R10) } },
    { "adc rax, rbx", "48 11 d8", X(ADC), 2, { Q(RAX), Q(RBX) } },
    { "adc qword ptr [rax], 3", "48 83 10 03", X(ADC), 2, { M(64, RAX, 0), IMM(3) } },
    { "test rax, rax", "48 85 c0", X(TEST), 2, { Q(RAX), Q(RAX) } },
    { "test eax, 0x10", "a9 10 00 00 00", X(TEST), 2, { D(RAX), IMM(0x10) } },
    { "test r8d, 1", "41 f7 c0 01 00 00 00", X(TEST), 2, { D(R8), IMM(1) } },
    { "test qword ptr [rdi], rsi", "48 85 37", X(TEST), 2, { M(64, RDI, 0), Q(RSI) } },
    /* shifts: by 1, by cl, by imm8 */
    { "shl rax, 1", "48 d1 e0", X(SHL), 2, { Q(RAX), IMM(1) } },
    { "shr r9, 7", "49 c1 e9 07", X(SHR), 2, { Q(R9), IMM(7) } },
    { "sar eax, cl", "d3 f8", X(SAR), 2, { D(RAX), B8(1) } },
    { "rol r11d, 3", "41 c1 c3 03", X(ROL), 2, { D(R11), IMM(3) } },
    { "shl qword ptr [rax], cl", "48 d3 20", X(SHL), 2, { M(64, RAX, 0), B8(1) } },
    { "imul rax, qword ptr [rbx+8]", "48 0f af 43 08", X(IMUL), 2, { Q(RAX), M(64, RBX, 8) } },
    { "imul r8, r9, 16", "4d 6b c1 10", X(IMUL), 3, { Q(R8), Q(R9), IMM(16) } },
    { "imul eax, ecx, 1000", "69 c1 e8 03 00 00", X(IMUL), 3, { D(RAX), D(RCX), IMM(1000) } },
    { "inc r11", "49 ff c3", X(INC), 1, { Q(R11) } },
    { "dec dword ptr [rax]", "ff 08", X(DEC), 1, { M(32, RAX, 0) } },
    { "neg eax", "f7 d8", X(NEG), 1, { D(RAX) } },
    { "not r15", "49 f7 d7", X(NOT), 1, { Q(R15) } },
    /* BMI2 (VEX on GPRs) */
    { "bzhi rax, qword ptr [r8], r15", "c4 c2 80 f5 00", X(BZHI), 3, { Q(RAX), M(64, R8, 0), Q(R15) } },
    { "bzhi eax, ebx, ecx", "c4 e2 70 f5 c3", X(BZHI), 3, { D(RAX), D(RBX), D(RCX) } },
    { "shlx eax, ebx, ecx", "c4 e2 71 f7 c3", X(SHLX), 3, { D(RAX), D(RBX), D(RCX) } },
    { "shrx r8, r9, r10", "c4 42 ab f7 c1", X(SHRX), 3, { Q(R8), Q(R9), Q(R10) } },
    { "cmove rax, rbx", "48 0f 44 c3", X(CMOVE), 2, { Q(RAX), Q(RBX) } },
    { "cmovg r8d, dword ptr [rax]", "44 0f 4f 00", X(CMOVG), 2, { D(R8), M(32, RAX, 0) } },
    { "sete sil", "40 0f 94 c6", X(SETE), 1, { B8(6) } },
    { "setb r9b", "41 0f 92 c1", X(SETB), 1, { B8(9) } },
    /* branches: imm is the displacement from the end of the instruction */
    { "jmp rel8 -2", "eb fe", X(JMP), 1, { REL(8, -2) } },
    { "jmp rel32 0x1000", "e9 00 10 00 00", X(JMP), 1, { REL(32, 0x1000) } },
    { "jne rel8 +5", "75 05", X(JNE), 1, { REL(8, 5) } },
    { "jo rel8 -128", "70 80", X(JO), 1, { REL(8, -128) } },
    { "jg rel32 -300", "0f 8f d4 fe ff ff", X(JG), 1, { REL(32, -300) } },
    { "jae rel32 0", "0f 83 00 00 00 00", X(JAE), 1, { REL(32, 0) } },
    { "call rel32 0x12345", "e8 45 23 01 00", X(CALL), 1, { REL(32, 0x12345) } },
    { "call rax", "ff d0", X(CALL), 1, { Q(RAX) } },
    { "call qword ptr [rip+0x100]", "ff 15 00 01 00 00", X(CALL), 1, { MRIP(64, 0x100) } },
    { "jmp r11", "41 ff e3", X(JMP), 1, { Q(R11) } },
    { "push rbp", "55", X(PUSH), 1, { Q(RBP) } },
    { "push r15", "41 57", X(PUSH), 1, { Q(R15) } },
    { "pop rbx", "5b", X(POP), 1, { Q(RBX) } },
    { "pop r12", "41 5c", X(POP), 1, { Q(R12) } },
    { "push qword ptr [rax]", "ff 30", X(PUSH), 1, { M(64, RAX, 0) } },
    { "ret", "c3", X(RET), 0, { IMM(0) } },
    { "leave", "c9", X(LEAVE), 0, { IMM(0) } },
    { "nop", "90", X(NOP), 0, { IMM(0) } },
    { "int3", "cc", X(INT3), 0, { IMM(0) } },
    { "ud2", "0f 0b", X(UD2), 0, { IMM(0) } },
    { "prefetcht0 byte ptr [rax+64]", "0f 18 48 40", X(PREFETCHT0), 1, { M(0, RAX, 64) } },
    { "prefetcht1 byte ptr [r12]", "41 0f 18 14 24", X(PREFETCHT1), 1, { M(0, R12, 0) } },
    { "prefetchnta byte ptr [rip+0x40]", "0f 18 05 40 00 00 00", X(PREFETCHNTA), 1, { MRIP(0, 0x40) } },

    /* VEX: 2- vs 3-byte */
    { "vaddps ymm0, ymm1, ymm2", "c5 f4 58 c2", X(VADDPS), 3, { YMM(0), YMM(1), YMM(2) } },
    { "vaddps ymm0, ymm1, ymm8", "c4 c1 74 58 c0", X(VADDPS), 3, { YMM(0), YMM(1), YMM(8) } },
    { "vaddps ymm8, ymm9, ymm2", "c5 34 58 c2", X(VADDPS), 3, { YMM(8), YMM(9), YMM(2) } },
    { "vaddps xmm0, xmm1, xmmword ptr [r8]", "c4 c1 70 58 00", X(VADDPS), 3, { XMM(0), XMM(1), M(128, R8, 0) } },
    { "vaddps ymm0, ymm1, ymmword ptr [rax+r9*4]", "c4 a1 74 58 04 88", X(VADDPS), 3, { YMM(0), YMM(1), MX(256, RAX, R9, 4, 0) } },
    { "vmovups ymm0, ymmword ptr [rdi+0x20]", "c5 fc 10 47 20", X(VMOVUPS), 2, { YMM(0), M(0, RDI, 0x20) } },
    { "vmovups ymmword ptr [rbp], ymm15", "c5 7c 11 7d 00", X(VMOVUPS), 2, { M(256, RBP, 0), YMM(15) } },
    { "vmovups xmm0, xmm8", "c5 78 11 c0", X(VMOVUPS), 2, { XMM(0), XMM(8) } },
    { "vmovaps ymm3, ymmword ptr [rip+0x200]", "c5 fc 28 1d 00 02 00 00", X(VMOVAPS), 2, { YMM(3), MRIP(256, 0x200) } },
    { "vmovdqu ymm1, ymmword ptr [rsi]", "c5 fe 6f 0e", X(VMOVDQU), 2, { YMM(1), M(256, RSI, 0) } },
    /* EVEX disp8*N and the disp32 fallback */
    { "vmovups zmm0, zmmword ptr [rdi+0x40]", "62 f1 7c 48 10 47 01", X(VMOVUPS), 2, { ZMM(0), M(512, RDI, 0x40) } },
    { "vmovups zmm0, zmmword ptr [rdi+0x44]", "62 f1 7c 48 10 87 44 00 00 00", X(VMOVUPS), 2, { ZMM(0), M(512, RDI, 0x44) } },
    { "vmovups zmm0, zmmword ptr [rdi+0x2000]", "62 f1 7c 48 10 87 00 20 00 00", X(VMOVUPS), 2, { ZMM(0), M(512, RDI, 0x2000) } },
    { "vmovups zmm0, zmmword ptr [rdi-0x2000]", "62 f1 7c 48 10 47 80", X(VMOVUPS), 2, { ZMM(0), M(512, RDI, -0x2000) } },
    { "vmovups zmm0, zmmword ptr [r13]", "62 d1 7c 48 10 45 00", X(VMOVUPS), 2, { ZMM(0), M(512, R13, 0) } },
    { "vmovups xmm16, xmmword ptr [rax+0x10]", "62 e1 7c 08 10 40 01", X(VMOVUPS), 2, { XMM(16), M(128, RAX, 0x10) } },
    { "vmovups ymm17, ymmword ptr [r12+r15*8-0x20]", "62 81 7c 28 10 4c fc ff", X(VMOVUPS), 2, { YMM(17), MX(256, R12, R15, 8, -0x20) } },
    /* zmm16-31: EVEX.R', V', X */
    { "vaddps zmm16, zmm17, zmm31", "62 81 74 40 58 c7", X(VADDPS), 3, { ZMM(16), ZMM(17), ZMM(31) } },
    { "vaddps zmm0, zmm1, zmm24", "62 91 74 48 58 c0", X(VADDPS), 3, { ZMM(0), ZMM(1), ZMM(24) } },
    { "vaddps ymm20, ymm5, ymm6", "62 e1 54 28 58 e6", X(VADDPS), 3, { YMM(20), YMM(5), YMM(6) } },
    /* broadcast {1toN}: N = 4 for disp8 */
    { "vaddps zmm0, zmm1, dword ptr [rax+0x8]{1to16}", "62 f1 74 58 58 40 02", X(VADDPS), 3, { ZMM(0), ZMM(1), BC(RAX, 8) } },
    { "vaddps ymm0, ymm1, dword ptr [rax]{1to8}", "62 f1 74 38 58 00", X(VADDPS), 3, { YMM(0), YMM(1), BC(RAX, 0) } },
    { "vaddps xmm2, xmm3, dword ptr [rax+0x200]{1to4}", "62 f1 64 18 58 90 00 02 00 00", X(VADDPS), 3, { XMM(2), XMM(3), BC(RAX, 0x200) } },
    { "vmulps zmm3, zmm4, dword ptr [rip+0x80]{1to16}", "62 f1 5c 58 59 1d 80 00 00 00", X(VMULPS), 3, { ZMM(3), ZMM(4), { .kind = X64_K_MEM, .bits = 32, .base = X64_RIP, .index = X64_NOREG, .scale = 1, .disp = 0x80, .bcst = 1 } } },
    /* masks: merge, zero, masked store */
    { "vmulps zmm1{k1}, zmm2, zmm3", "62 f1 6c 49 59 cb", X(VMULPS), 3, { ZMMK(1, 1, 0), ZMM(2), ZMM(3) } },
    { "vmulps zmm1{k7}{z}, zmm2, zmm3", "62 f1 6c cf 59 cb", X(VMULPS), 3, { ZMMK(1, 7, 1), ZMM(2), ZMM(3) } },
    { "vmovups zmmword ptr [rdi]{k2}, zmm5", "62 f1 7c 4a 11 2f", X(VMOVUPS), 2, { MK(512, RDI, 0, 2), ZMM(5) } },
    { "vmovups zmm5{k2}{z}, zmmword ptr [rsi+r10*8+0x80]", "62 b1 7c ca 10 6c d6 02", X(VMOVUPS), 2, { ZMMK(5, 2, 1), MX(512, RSI, R10, 8, 0x80) } },
    { "vmaxps zmm20{k3}, zmm21, zmm31", "62 81 54 43 5f e7", X(VMAXPS), 3, { { .kind = X64_K_VEC, .bits = 512, .reg = 20, .mask = 3 }, ZMM(21), ZMM(31) } },
    { "vminps zmm0, zmm1, zmmword ptr [rsp+0x40]", "62 f1 74 48 5d 44 24 01", X(VMINPS), 3, { ZMM(0), ZMM(1), M(512, RSP, 0x40) } },
    { "vsubps ymm1, ymm2, ymm3", "c5 ec 5c cb", X(VSUBPS), 3, { YMM(1), YMM(2), YMM(3) } },
    { "vdivps zmm1, zmm2, zmm3", "62 f1 6c 48 5e cb", X(VDIVPS), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    /* broadcasts and masked moves */
    { "vbroadcastss ymm0, dword ptr [rdi]", "c4 e2 7d 18 07", X(VBROADCASTSS), 2, { YMM(0), M(32, RDI, 0) } },
    { "vbroadcastss zmm0, dword ptr [rdi+4]", "62 f2 7d 48 18 47 01", X(VBROADCASTSS), 2, { ZMM(0), M(32, RDI, 4) } },
    { "vbroadcastss xmm1, xmm2", "c4 e2 79 18 ca", X(VBROADCASTSS), 2, { XMM(1), XMM(2) } },
    { "vbroadcastss zmm3, xmm4", "62 f2 7d 48 18 dc", X(VBROADCASTSS), 2, { ZMM(3), XMM(4) } },
    { "vmaskmovps ymm1, ymm2, ymmword ptr [rax]", "c4 e2 6d 2c 08", X(VMASKMOVPS), 3, { YMM(1), YMM(2), M(256, RAX, 0) } },
    { "vmaskmovps ymmword ptr [r9+8], ymm2, ymm1", "c4 c2 6d 2e 49 08", X(VMASKMOVPS), 3, { M(256, R9, 8), YMM(2), YMM(1) } },
    /* FMA, logic, compare, blend */
    { "vfmadd231ps ymm1, ymm2, ymmword ptr [rsi]", "c4 e2 6d b8 0e", X(VFMADD231PS), 3, { YMM(1), YMM(2), M(256, RSI, 0) } },
    { "vfmadd231ps zmm1, zmm2, zmm3", "62 f2 6d 48 b8 cb", X(VFMADD231PS), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vfmadd231ps zmm8{k1}, zmm9, dword ptr [rax]{1to16}", "62 72 35 59 b8 00", X(VFMADD231PS), 3, { ZMMK(8, 1, 0), ZMM(9), BC(RAX, 0) } },
    { "vfmadd132ps ymm1, ymm2, ymm3", "c4 e2 6d 98 cb", X(VFMADD132PS), 3, { YMM(1), YMM(2), YMM(3) } },
    { "vfmadd213ps zmm1, zmm2, zmm3", "62 f2 6d 48 a8 cb", X(VFMADD213PS), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vfnmadd231ps ymm10, ymm11, ymm12", "c4 42 25 bc d4", X(VFNMADD231PS), 3, { YMM(10), YMM(11), YMM(12) } },
    { "vxorps zmm0, zmm0, zmm0", "62 f1 7c 48 57 c0", X(VXORPS), 3, { ZMM(0), ZMM(0), ZMM(0) } },
    { "vxorps ymm0, ymm0, ymm0", "c5 fc 57 c0", X(VXORPS), 3, { YMM(0), YMM(0), YMM(0) } },
    { "vandps zmm1, zmm2, dword ptr [rip+0x10]{1to16}", "62 f1 6c 58 54 0d 10 00 00 00", X(VANDPS), 3, { ZMM(1), ZMM(2), { .kind = X64_K_MEM, .bits = 32, .base = X64_RIP, .index = X64_NOREG, .scale = 1, .disp = 0x10, .bcst = 1 } } },
    { "vorps ymm1, ymm2, ymm3", "c5 ec 56 cb", X(VORPS), 3, { YMM(1), YMM(2), YMM(3) } },
    { "vandnps xmm1, xmm2, xmm3", "c5 e8 55 cb", X(VANDNPS), 3, { XMM(1), XMM(2), XMM(3) } },
    { "vcmpps ymm0, ymm1, ymm2, 0x1", "c5 f4 c2 c2 01", X(VCMPPS), 4, { YMM(0), YMM(1), YMM(2), IMM(1) } },
    { "vcmpps k2, zmm1, zmmword ptr [rax], 0xe", "62 f1 74 48 c2 10 0e", X(VCMPPS), 4, { KR(2), ZMM(1), M(512, RAX, 0), IMM(14) } },
    { "vcmpps k2{k1}, zmm1, zmm2, 0x0", "62 f1 74 49 c2 d2 00", X(VCMPPS), 4, { KRK(2, 1), ZMM(1), ZMM(2), IMM(0) } },
    { "vblendvps ymm0, ymm1, ymm2, ymm3", "c4 e3 75 4a c2 30", X(VBLENDVPS), 4, { YMM(0), YMM(1), YMM(2), YMM(3) } },
    { "vblendvps xmm9, xmm10, xmm11, xmm12", "c4 43 29 4a cb c0", X(VBLENDVPS), 4, { XMM(9), XMM(10), XMM(11), XMM(12) } },
    { "vblendmps zmm0{k1}, zmm1, zmm2", "62 f2 75 49 65 c2", X(VBLENDMPS), 3, { ZMMK(0, 1, 0), ZMM(1), ZMM(2) } },
    /* mask registers */
    { "kmovw k1, k2", "c5 f8 90 ca", X(KMOVW), 2, { KR(1), KR(2) } },
    { "kmovw k1, eax", "c5 f8 92 c8", X(KMOVW), 2, { KR(1), D(RAX) } },
    { "kmovw eax, k1", "c5 f8 93 c1", X(KMOVW), 2, { D(RAX), KR(1) } },
    { "kmovw k1, r9d", "c4 c1 78 92 c9", X(KMOVW), 2, { KR(1), D(R9) } },
    { "kmovw k1, word ptr [rdi]", "c5 f8 90 0f", X(KMOVW), 2, { KR(1), M(16, RDI, 0) } },
    { "kmovw word ptr [rdi], k1", "c5 f8 91 0f", X(KMOVW), 2, { M(16, RDI, 0), KR(1) } },
    { "kmovd k3, dword ptr [rax]", "c4 e1 f9 90 18", X(KMOVD), 2, { KR(3), M(32, RAX, 0) } },
    { "kmovd r10d, k3", "c5 7b 93 d3", X(KMOVD), 2, { D(R10), KR(3) } },
    { "kandw k1, k2, k3", "c5 ec 41 cb", X(KANDW), 3, { KR(1), KR(2), KR(3) } },
    { "korw k1, k2, k3", "c5 ec 45 cb", X(KORW), 3, { KR(1), KR(2), KR(3) } },
    { "knotw k4, k5", "c5 f8 44 e5", X(KNOTW), 2, { KR(4), KR(5) } },
    { "kortestw k1, k1", "c5 f8 98 c9", X(KORTESTW), 2, { KR(1), KR(1) } },
    { "vzeroupper", "c5 f8 77", X(VZEROUPPER), 0, { IMM(0) } },
    /* the rest of the AVX list */
    { "vmovss xmm0, dword ptr [rax+4]", "c5 fa 10 40 04", X(VMOVSS), 2, { XMM(0), M(32, RAX, 4) } },
    { "vmovss dword ptr [rax], xmm9", "c5 7a 11 08", X(VMOVSS), 2, { M(32, RAX, 0), XMM(9) } },
    { "vmovss xmm20, dword ptr [rax+8]", "62 e1 7e 08 10 60 02", X(VMOVSS), 2, { XMM(20), M(32, RAX, 8) } },
    { "vmovss xmm1, xmm2, xmm3", "c5 ea 10 cb", X(VMOVSS), 3, { XMM(1), XMM(2), XMM(3) } },
    { "vmovd xmm0, eax", "c5 f9 6e c0", X(VMOVD), 2, { XMM(0), D(RAX) } },
    { "vmovd r8d, xmm1", "c4 c1 79 7e c8", X(VMOVD), 2, { D(R8), XMM(1) } },
    { "vmovq xmm0, rax", "c4 e1 f9 6e c0", X(VMOVQ), 2, { XMM(0), Q(RAX) } },
    { "vmovq rcx, xmm17", "62 e1 fd 08 7e c9", X(VMOVQ), 2, { Q(RCX), XMM(17) } },
    { "vaddss xmm0, xmm1, dword ptr [rdi]", "c5 f2 58 07", X(VADDSS), 3, { XMM(0), XMM(1), M(32, RDI, 0) } },
    { "vmulss xmm16, xmm1, dword ptr [rdi+0x40]", "62 e1 76 08 59 47 10", X(VMULSS), 3, { XMM(16), XMM(1), M(32, RDI, 0x40) } },
    { "vcvtdq2ps ymm0, ymm1", "c5 fc 5b c1", X(VCVTDQ2PS), 2, { YMM(0), YMM(1) } },
    { "vcvtps2dq zmm0, zmm1", "62 f1 7d 48 5b c1", X(VCVTPS2DQ), 2, { ZMM(0), ZMM(1) } },
    { "vcvttps2dq ymm2, ymmword ptr [rax]", "c5 fe 5b 10", X(VCVTTPS2DQ), 2, { YMM(2), M(256, RAX, 0) } },
    { "vroundps ymm0, ymm1, 0x9", "c4 e3 7d 08 c1 09", X(VROUNDPS), 3, { YMM(0), YMM(1), IMM(9) } },
    { "vrcpps ymm0, ymm1", "c5 fc 53 c1", X(VRCPPS), 2, { YMM(0), YMM(1) } },
    { "vrsqrtps xmm0, xmm1", "c5 f8 52 c1", X(VRSQRTPS), 2, { XMM(0), XMM(1) } },
    { "vsqrtps zmm0, zmm1", "62 f1 7c 48 51 c1", X(VSQRTPS), 2, { ZMM(0), ZMM(1) } },
    { "vpaddd ymm0, ymm1, ymm2", "c5 f5 fe c2", X(VPADDD), 3, { YMM(0), YMM(1), YMM(2) } },
    { "vpsubd zmm0, zmm1, zmm2", "62 f1 75 48 fa c2", X(VPSUBD), 3, { ZMM(0), ZMM(1), ZMM(2) } },
    { "vpslld ymm0, ymm1, 0x17", "c5 fd 72 f1 17", X(VPSLLD), 3, { YMM(0), YMM(1), IMM(23) } },
    { "vpslld zmm0, zmmword ptr [rax+0x40], 0x17", "62 f1 7d 48 72 70 01 17", X(VPSLLD), 3, { ZMM(0), M(512, RAX, 0x40), IMM(23) } },
    { "vpsrld ymm0, ymm1, xmm2", "c5 f5 d2 c2", X(VPSRLD), 3, { YMM(0), YMM(1), XMM(2) } },
    { "vpsrld zmm0, zmm1, xmmword ptr [rax+0x10]", "62 f1 75 48 d2 40 01", X(VPSRLD), 3, { ZMM(0), ZMM(1), M(128, RAX, 0x10) } },
    { "vpermps ymm0, ymm1, ymm2", "c4 e2 75 16 c2", X(VPERMPS), 3, { YMM(0), YMM(1), YMM(2) } },
    { "vpermps zmm0, zmm1, zmm2", "62 f2 75 48 16 c2", X(VPERMPS), 3, { ZMM(0), ZMM(1), ZMM(2) } },
    { "vperm2f128 ymm0, ymm1, ymm2, 0x21", "c4 e3 75 06 c2 21", X(VPERM2F128), 4, { YMM(0), YMM(1), YMM(2), IMM(0x21) } },
    { "vextractf128 xmm0, ymm1, 0x1", "c4 e3 7d 19 c8 01", X(VEXTRACTF128), 3, { XMM(0), YMM(1), IMM(1) } },
    { "vinsertf128 ymm0, ymm1, xmmword ptr [rax], 0x1", "c4 e3 75 18 00 01", X(VINSERTF128), 4, { YMM(0), YMM(1), M(128, RAX, 0), IMM(1) } },
    { "vhaddps ymm0, ymm1, ymm2", "c5 f7 7c c2", X(VHADDPS), 3, { YMM(0), YMM(1), YMM(2) } },
    /* AVX-512 only; vmovdqu/vrcpps at zmm use vmovdqu32/vrcp14ps */
    { "vmovdqu32 zmm1, zmmword ptr [rsi+0x40]", "62 f1 7e 48 6f 4e 01", X(VMOVDQU), 2, { ZMM(1), M(512, RSI, 0x40) } },
    { "vmovdqu32 zmmword ptr [rsi]{k1}, zmm1", "62 f1 7e 49 7f 0e", X(VMOVDQU32), 2, { MK(512, RSI, 0, 1), ZMM(1) } },
    { "vrcp14ps zmm0, zmm1", "62 f2 7d 48 4c c1", X(VRCPPS), 2, { ZMM(0), ZMM(1) } },
    { "vrsqrt14ps zmm0, zmm1", "62 f2 7d 48 4e c1", X(VRSQRT14PS), 2, { ZMM(0), ZMM(1) } },
    { "vscalefps zmm0, zmm1, zmm2", "62 f2 75 48 2c c2", X(VSCALEFPS), 3, { ZMM(0), ZMM(1), ZMM(2) } },
    { "vgetexpps zmm0, zmm1", "62 f2 7d 48 42 c1", X(VGETEXPPS), 2, { ZMM(0), ZMM(1) } },
    { "vgetmantps zmm0, zmm1, 0x8", "62 f3 7d 48 26 c1 08", X(VGETMANTPS), 3, { ZMM(0), ZMM(1), IMM(8) } },
    { "vreduceps zmm0, zmm1, 0x3", "62 f3 7d 48 56 c1 03", X(VREDUCEPS), 3, { ZMM(0), ZMM(1), IMM(3) } },
    { "vrndscaleps zmm0, zmm1, 0x1", "62 f3 7d 48 08 c1 01", X(VRNDSCALEPS), 3, { ZMM(0), ZMM(1), IMM(1) } },
    { "vpermt2ps zmm0, zmm1, zmm2", "62 f2 75 48 7f c2", X(VPERMT2PS), 3, { ZMM(0), ZMM(1), ZMM(2) } },
    { "vextractf32x4 xmmword ptr [rax+0x10], zmm1, 0x3", "62 f3 7d 48 19 48 01 03", X(VEXTRACTF32X4), 3, { M(128, RAX, 0x10), ZMM(1), IMM(3) } },
    { "vextractf32x8 ymmword ptr [rax+0x20], zmm1, 0x1", "62 f3 7d 48 1b 48 01 01", X(VEXTRACTF32X8), 3, { M(256, RAX, 0x20), ZMM(1), IMM(1) } },
    { "vinsertf32x4 zmm0, zmm1, xmm2, 0x2", "62 f3 75 48 18 c2 02", X(VINSERTF32X4), 4, { ZMM(0), ZMM(1), XMM(2), IMM(2) } },
    { "vinsertf32x8 zmm0, zmm1, ymm2, 0x1", "62 f3 75 48 1a c2 01", X(VINSERTF32X8), 4, { ZMM(0), ZMM(1), YMM(2), IMM(1) } },
    { "vcompressps zmmword ptr [rdi+0x8]{k1}, zmm2", "62 f2 7d 49 8a 57 02", X(VCOMPRESSPS), 2, { MK(512, RDI, 8, 1), ZMM(2) } },
    { "vexpandps zmm2{k1}{z}, zmmword ptr [rdi+0x8]", "62 f2 7d c9 88 57 02", X(VEXPANDPS), 2, { ZMMK(2, 1, 1), M(512, RDI, 8) } },
    { "vpbroadcastd zmm0, eax", "62 f2 7d 48 7c c0", X(VPBROADCASTD), 2, { ZMM(0), D(RAX) } },
    { "vpbroadcastd ymm1, dword ptr [rax]", "c4 e2 7d 58 08", X(VPBROADCASTD), 2, { YMM(1), M(32, RAX, 0) } },
    { "vpbroadcastd zmm1, xmm2", "62 f2 7d 48 58 ca", X(VPBROADCASTD), 2, { ZMM(1), XMM(2) } },
    { "vfpclassps k1, zmm2, 0x22", "62 f3 7d 48 66 ca 22", X(VFPCLASSPS), 3, { KR(1), ZMM(2), IMM(0x22) } },
    { "vpternlogd zmm0, zmm1, zmm2, 0xe4", "62 f3 75 48 25 c2 e4", X(VPTERNLOGD), 4, { ZMM(0), ZMM(1), ZMM(2), IMM(0xe4) } },
    { "vpternlogd zmm3, zmm17, dword ptr [rax+0x40]{1to16}, 0xe4", "62 f3 75 50 25 58 10 e4", X(VPTERNLOGD), 4, { ZMM(3), ZMM(17), BC(RAX, 0x40), IMM(0xe4) } },
    { "vmovntps zmmword ptr [rdi+0x40], zmm1", "62 f1 7c 48 2b 4f 01", X(VMOVNTPS), 2, { M(512, RDI, 0x40), ZMM(1) } },
    { "vmovntps ymmword ptr [rax], ymm2", "c5 fc 2b 10", X(VMOVNTPS), 2, { M(256, RAX, 0), YMM(2) } },
    { "vmovntps zmmword ptr [r9+rcx*4+0x100], zmm17", "62 c1 7c 48 2b 4c 89 04", X(VMOVNTPS), 2, { MEM(512, X64_R9, X64_RCX, 4, 0x100), ZMM(17) } },
    { "sfence", "0f ae f8", X(SFENCE), 0, { IMM(0) } },
    /* packed double */
    { "vmovupd zmm1, zmmword ptr [rax+0x40]", "62 f1 fd 48 10 48 01", X(VMOVUPD), 2, { ZMM(1), M(512, RAX, 0x40) } },
    { "vmovupd zmmword ptr [rdi+0x80]{k2}, zmm17", "62 e1 fd 4a 11 4f 02", X(VMOVUPD), 2, { MK(512, RDI, 0x80, 2), ZMM(17) } },
    { "vmovupd ymm2, ymmword ptr [rcx]", "c5 fd 10 11", X(VMOVUPD), 2, { YMM(2), M(256, RCX, 0) } },
    { "vmovupd ymmword ptr [rdx+0x20], ymm3", "c5 fd 11 5a 20", X(VMOVUPD), 2, { M(256, RDX, 0x20), YMM(3) } },
    { "vbroadcastsd ymm1, qword ptr [rax+0x8]", "c4 e2 7d 19 48 08", X(VBROADCASTSD), 2, { YMM(1), M(64, RAX, 8) } },
    { "vbroadcastsd zmm20, qword ptr [r13+0x10]", "62 c2 fd 48 19 65 02", X(VBROADCASTSD), 2, { ZMM(20), M(64, R13, 0x10) } },
    { "vmaskmovpd ymm1, ymm2, ymmword ptr [rax]", "c4 e2 6d 2d 08", X(VMASKMOVPD), 3, { YMM(1), YMM(2), M(256, RAX, 0) } },
    { "vmaskmovpd ymmword ptr [rax+0x20], ymm2, ymm3", "c4 e2 6d 2f 58 20", X(VMASKMOVPD), 3, { M(256, RAX, 0x20), YMM(2), YMM(3) } },
    { "vaddpd zmm1{k1}, zmm2, zmmword ptr [rcx+0x40]", "62 f1 ed 49 58 49 01", X(VADDPD), 3, { ZMMK(1, 1, 0), ZMM(2), M(512, RCX, 0x40) } },
    { "vaddpd ymm1, ymm2, ymm3", "c5 ed 58 cb", X(VADDPD), 3, { YMM(1), YMM(2), YMM(3) } },
    { "vmulpd zmm5, zmm5, zmm30", "62 91 d5 48 59 ee", X(VMULPD), 3, { ZMM(5), ZMM(5), ZMM(30) } },
    { "vmulpd ymm4, ymm4, ymm7", "c5 dd 59 e7", X(VMULPD), 3, { YMM(4), YMM(4), YMM(7) } },
    { "vfmadd231pd zmm0, zmm28, zmm30", "62 92 9d 40 b8 c6", X(VFMADD231PD), 3, { ZMM(0), ZMM(28), ZMM(30) } },
    { "vfmadd231pd ymm0, ymm12, ymm14", "c4 c2 9d b8 c6", X(VFMADD231PD), 3, { YMM(0), YMM(12), YMM(14) } },
    { "vfmadd231pd zmm3{k1}, zmm29, zmmword ptr [r12+0x100]", "62 d2 95 41 b8 5c 24 04", X(VFMADD231PD), 3, { ZMMK(3, 1, 0), ZMM(29), M(512, R12, 0x100) } },
    { "vmaxpd zmm1, zmm2, zmm3", "62 f1 ed 48 5f cb", X(VMAXPD), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vmaxpd ymm1, ymm2, ymmword ptr [rax+0x20]", "c5 ed 5f 48 20", X(VMAXPD), 3, { YMM(1), YMM(2), M(256, RAX, 0x20) } },
    { "vminpd zmm17{k1}, zmm2, zmmword ptr [rcx+0x40]", "62 e1 ed 49 5d 49 01", X(VMINPD), 3, { ZMMK(17, 1, 0), ZMM(2), M(512, RCX, 0x40) } },
    { "vminpd ymm4, ymm5, ymm6", "c5 d5 5d e6", X(VMINPD), 3, { YMM(4), YMM(5), YMM(6) } },
    /* low-precision dot products */
    { "vpdpbusd zmm1, zmm2, zmm3", "62 f2 6d 48 50 cb", X(VPDPBUSD), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vpdpbusd zmm17, zmm30, zmmword ptr [rax+0x40]", "62 e2 0d 40 50 48 01", X(VPDPBUSD), 3, { ZMM(17), ZMM(30), M(512, RAX, 0x40) } },
    { "vpdpbusd zmm3{k1}, zmm29, dword ptr [r12+0x100]{1to16}", "62 d2 15 51 50 5c 24 40", X(VPDPBUSD), 3, { ZMMK(3, 1, 0), ZMM(29), BC(R12, 0x100) } },
    { "{vex} vpdpbusd ymm1, ymm2, ymm3", "c4 e2 6d 50 cb", X(VPDPBUSD), 3, { YMM(1), YMM(2), YMM(3) } },
    { "{vex} vpdpbusd ymm9, ymm14, ymmword ptr [r13+0x20]", "c4 42 0d 50 4d 20", X(VPDPBUSD), 3, { YMM(9), YMM(14), M(256, R13, 0x20) } },
    { "vpmaddubsw zmm1, zmm2, zmm3", "62 f2 6d 48 04 cb", X(VPMADDUBSW), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vpmaddubsw zmm20, zmm2, zmmword ptr [rsp+0x80]", "62 e2 6d 48 04 64 24 02", X(VPMADDUBSW), 3, { ZMM(20), ZMM(2), M(512, RSP, 0x80) } },
    { "vpmaddubsw ymm1, ymm2, ymm3", "c4 e2 6d 04 cb", X(VPMADDUBSW), 3, { YMM(1), YMM(2), YMM(3) } },
    { "vpmaddwd zmm1, zmm2, zmm3", "62 f1 6d 48 f5 cb", X(VPMADDWD), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vpmaddwd zmm1, zmm22, zmmword ptr [rcx+0x40]", "62 f1 4d 40 f5 49 01", X(VPMADDWD), 3, { ZMM(1), ZMM(22), M(512, RCX, 0x40) } },
    { "vpmaddwd ymm5, ymm12, ymm3", "c5 9d f5 eb", X(VPMADDWD), 3, { YMM(5), YMM(12), YMM(3) } },
    { "vdpbf16ps zmm1, zmm2, zmm3", "62 f2 6e 48 52 cb", X(VDPBF16PS), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vdpbf16ps zmm20, zmm21, zmmword ptr [rdx+0x40]", "62 e2 56 40 52 62 01", X(VDPBF16PS), 3, { ZMM(20), ZMM(21), M(512, RDX, 0x40) } },
    { "vdpbf16ps zmm4, zmm5, dword ptr [rax+8]{1to16}", "62 f2 56 58 52 60 02", X(VDPBF16PS), 3, { ZMM(4), ZMM(5), BC(RAX, 8) } },
    { "vdpbf16ps ymm4, ymm5, ymm6", "62 f2 56 28 52 e6", X(VDPBF16PS), 3, { YMM(4), YMM(5), YMM(6) } },
    { "vpmovdb xmmword ptr [rax+0x10]{k1}, zmm2", "62 f2 7e 49 31 50 01", X(VPMOVDB), 2, { MK(128, RAX, 0x10, 1), ZMM(2) } },
    { "vpmovdb xmm3, zmm20", "62 e2 7e 48 31 e3", X(VPMOVDB), 2, { XMM(3), ZMM(20) } },
    { "vpmovdw ymmword ptr [r9+0x40]{k2}, zmm5", "62 d2 7e 4a 33 69 02", X(VPMOVDW), 2, { MK(256, R9, 0x40, 2), ZMM(5) } },
    { "vpmovdw ymm1, zmm2", "62 f2 7e 48 33 d1", X(VPMOVDW), 2, { YMM(1), ZMM(2) } },
    /* the f64 epilogue's math */
    { "vsubpd zmm1, zmm2, zmm3", "62 f1 ed 48 5c cb", X(VSUBPD), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vsubpd ymm1, ymm2, ymmword ptr [rax+0x20]", "c5 ed 5c 48 20", X(VSUBPD), 3, { YMM(1), YMM(2), M(256, RAX, 0x20) } },
    { "vdivpd zmm4, zmm5, zmmword ptr [rcx+0x40]", "62 f1 d5 48 5e 61 01", X(VDIVPD), 3, { ZMM(4), ZMM(5), M(512, RCX, 0x40) } },
    { "vdivpd ymm1, ymm2, ymm3", "c5 ed 5e cb", X(VDIVPD), 3, { YMM(1), YMM(2), YMM(3) } },
    { "vsqrtpd zmm1, zmm2", "62 f1 fd 48 51 ca", X(VSQRTPD), 2, { ZMM(1), ZMM(2) } },
    { "vsqrtpd ymm3, ymm4", "c5 fd 51 dc", X(VSQRTPD), 2, { YMM(3), YMM(4) } },
    { "vfmadd213pd zmm1, zmm2, zmm3", "62 f2 ed 48 a8 cb", X(VFMADD213PD), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vfmadd213pd ymm1, ymm2, ymm3", "c4 e2 ed a8 cb", X(VFMADD213PD), 3, { YMM(1), YMM(2), YMM(3) } },
    { "vfnmadd231pd zmm1, zmm2, zmm3", "62 f2 ed 48 bc cb", X(VFNMADD231PD), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vfnmadd231pd ymm9, ymm2, ymmword ptr [rcx]", "c4 62 ed bc 09", X(VFNMADD231PD), 3, { YMM(9), YMM(2), M(256, RCX, 0) } },
    { "vcmppd k1, zmm2, zmm3, 0x1d", "62 f1 ed 48 c2 cb 1d", X(VCMPPD), 4, { KR(1), ZMM(2), ZMM(3), IMM(0x1d) } },
    { "vcmppd ymm1, ymm2, ymm3, 0x11", "c5 ed c2 cb 11", X(VCMPPD), 4, { YMM(1), YMM(2), YMM(3), IMM(0x11) } },
    { "vpsllq zmm1, zmm2, 0x34", "62 f1 f5 48 73 f2 34", X(VPSLLQ), 3, { ZMM(1), ZMM(2), IMM(52) } },
    { "vpsllq ymm1, ymm2, 0x34", "c5 f5 73 f2 34", X(VPSLLQ), 3, { YMM(1), YMM(2), IMM(52) } },
    { "vpsrlq zmm17, zmm2, 0x1", "62 f1 f5 40 73 d2 01", X(VPSRLQ), 3, { ZMM(17), ZMM(2), IMM(1) } },
    { "vpsrlq ymm1, ymm2, 0x1", "c5 f5 73 d2 01", X(VPSRLQ), 3, { YMM(1), YMM(2), IMM(1) } },
    { "vpsubq zmm1, zmm2, zmm3", "62 f1 ed 48 fb cb", X(VPSUBQ), 3, { ZMM(1), ZMM(2), ZMM(3) } },
    { "vpsubq ymm1, ymm2, ymm3", "c5 ed fb cb", X(VPSUBQ), 3, { YMM(1), YMM(2), YMM(3) } },
    { "vmovupd zmm1{k2}{z}, zmm1", "62 f1 fd ca 10 c9", X(VMOVUPD), 2, { ZMMK(1, 2, 1), ZMM(1) } },
};

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
    const golden *g = &cases[_i];
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
    tcase_add_loop_test(tc, test_golden, 0, (int)(sizeof cases / sizeof cases[0]));
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
