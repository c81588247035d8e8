/* x64_golden_cases.h: the encoder's golden triples (text, operands, bytes)
 * and the operand initializers they and the encoder tests are written with. */
#ifndef FJ_X64_GOLDEN_CASES_H
#define FJ_X64_GOLDEN_CASES_H

#include <stddef.h>

#include "kernels/x64/x64.h"

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

extern const golden x64_golden_cases[];
extern const size_t x64_golden_ncases;

#endif
