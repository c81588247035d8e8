/* framejit/builder.h: build your own kernels on framejit.
 *
 * The builder owns the frame: every kernel starts with push rbp; mov rbp,
 * rsp, saves the callee-saved registers it was handed, and ends with the
 * matching epilogue, all described by exact CFI that is registered with
 * every unwinder before fj_builder_finish returns. Registers come only from
 * the builder's pools; rbp and rsp are in no pool, so a kernel cannot write
 * them and cannot break a frame-pointer stack walk.
 *
 *     fj_builder *b;
 *     fj_builder_create(rt, "my_scale_add", 3, &b);    // (float *x, const float *y, size_t n)
 *     fj_reg x = fj_arg(b, 0), y = fj_arg(b, 1), n = fj_arg(b, 2);
 *     fj_reg v = fj_vreg(b);
 *     ...
 *     fj_emit(b, FJ_VMOVUPS, fj_vec(b, v), fj_mem(0, x, 0));
 *     ...
 *     fj_kernel *k;
 *     if (fj_builder_finish(b, &k) != FJ_OK) puts(fj_last_error());
 *     ((void (*)(float *, const float *, size_t))fj_kernel_entry(k))(x, y, n);
 *
 * Errors are sticky: after the first bad call the builder ignores further
 * calls and fj_builder_finish returns the first error with its message.
 */
#ifndef FRAMEJIT_BUILDER_H
#define FRAMEJIT_BUILDER_H

#include "framejit.h"

#include <stddef.h>
#include <stdint.h>
#include "framejit/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fj_builder fj_builder;
typedef struct fj_kernel fj_kernel;

typedef enum fj_op {
    FJ_OP_NONE = 0,
#define FJ_OP_ENUM_(n) FJ_##n,
    FJ_OPS(FJ_OP_ENUM_)
#undef FJ_OP_ENUM_
    FJ_OP_COUNT
} fj_op;

/* A register handed out by one builder. {0} is "no register". Handles of a
 * freed register, or of another builder, are rejected. */
typedef struct fj_reg { uint32_t id; } fj_reg;
typedef struct fj_label { uint32_t id; } fj_label;

typedef enum fj_opnd_kind {
    FJ_OPND_NONE = 0, FJ_OPND_REG, FJ_OPND_MEM, FJ_OPND_IMM, FJ_OPND_LABEL,
} fj_opnd_kind;

/* An instruction operand. Build it with the helpers below. */
typedef struct fj_opnd {
    uint8_t kind;      /* fj_opnd_kind */
    uint8_t scale;     /* MEM: 1, 2, 4, 8 */
    uint8_t bcst;      /* MEM: AVX-512 broadcast of one 32-bit element */
    uint8_t zero;      /* with mask: zero instead of merge */
    uint16_t bits;     /* REG: 8/16/32/64 (GPR), 128/256/512 (vector), 16 (mask);
                          MEM: access width in bits, 0 = implied by the instruction */
    fj_reg reg;        /* REG: the register; MEM: base register (or none) */
    fj_reg index;      /* MEM: index register (or none) */
    fj_reg mask;       /* optional AVX-512 write mask for a destination */
    int64_t val;       /* IMM value, MEM displacement, LABEL id */
} fj_opnd;

/* Integer/pointer arguments in (0..6), result (if any) in the first
 * return register, System V calling convention. */
FJ_API fj_status fj_builder_create(fj_runtime *rt, const char *name, int nargs, fj_builder **out);
/* Abandons a builder without making a kernel. NULL ok. */
FJ_API void fj_builder_destroy(fj_builder *b);
/* The ISA the builder targets (the runtime's) and its natural vector width
 * in bits (512 for AVX-512, 256 for AVX2). */
FJ_API fj_isa fj_builder_isa(const fj_builder *b);
/* pure: a builder's width never changes, so the calls of one instruction's
 * fj_vec operands fold into one. */
FJ_API int fj_builder_vbits(const fj_builder *b) __attribute__((pure));

/* The register that holds argument i (0-based); it is the kernel's to use
 * and may be freed like any other. */
FJ_API fj_reg fj_arg(fj_builder *b, int i);
FJ_API fj_reg fj_gpr(fj_builder *b);    /* a general-purpose register */
FJ_API fj_reg fj_vreg(fj_builder *b);   /* a vector register (zmm0-31 / ymm0-15) */
FJ_API fj_reg fj_kreg(fj_builder *b);   /* an AVX-512 mask register (k1-k7) */
FJ_API void fj_release(fj_builder *b, fj_reg r);

/* A stack slot of `bytes` bytes (aligned to `align`, a power of two <= 16:
 * the frame is 16-byte aligned) in the kernel's frame, as a memory operand
 * of `bits` access width. Vector spills use unaligned moves. */
FJ_API fj_opnd fj_stack_slot(fj_builder *b, uint32_t bytes, uint32_t align, uint16_t bits);
/* A constant placed out of the instruction stream (after the code),
 * addressed RIP-relative. fj_const_f32 is meant for {1toN} broadcast or
 * vbroadcastss; fj_const_data for tables (align <= 64). */
FJ_API fj_opnd fj_const_f32(fj_builder *b, float v);
FJ_API fj_opnd fj_const_data(fj_builder *b, const void *data, uint32_t bytes, uint32_t align,
                             uint16_t bits);

FJ_API fj_label fj_label_new(fj_builder *b);
FJ_API void fj_label_bind(fj_builder *b, fj_label l);

/* Emits one instruction. Jumps take a label operand (fj_lbl); the builder
 * picks rel8 or rel32. PUSH, POP, RET and LEAVE are not available to
 * kernels (they would move rsp behind the CFI's back): use fj_return. */
FJ_API void fj_emitv(fj_builder *b, fj_op op, const fj_opnd *ops, int nops);

/* Calls a C function fn(args...) with up to 6 integer/pointer arguments.
 * Live caller-saved registers (GPRs, vectors, masks) are preserved across
 * the call and the stack is aligned per the System V ABI. If result is a
 * register, it receives the return value (rax). */
FJ_API void fj_call(fj_builder *b, const void *fn, const fj_opnd *args, int nargs, fj_reg result);
/* Returns from the kernel; value (if kind != NONE) becomes the result. */
FJ_API void fj_return(fj_builder *b, fj_opnd value);

/* Verifies, places in the code cache, registers unwind info, and returns
 * the kernel. The builder is freed in every case. */
FJ_API fj_status fj_builder_finish(fj_builder *b, fj_kernel **out);

FJ_API void *fj_kernel_entry(const fj_kernel *k);
FJ_API const char *fj_kernel_name(const fj_kernel *k);
FJ_API size_t fj_kernel_code_size(const fj_kernel *k);
/* Deregisters the kernel's unwind info and frees it. NULL ok. */
FJ_API void fj_kernel_release(fj_kernel *k);

/* ---- operand helpers ------------------------------------------------- */

/* {0} in C, {} in C++ (where g++ -Wextra warns about {0} on structs). */
#ifdef __cplusplus
#define FJ_ZERO_INIT_ {}
#else
#define FJ_ZERO_INIT_ {0}
#endif

static inline fj_opnd fj_reg_opnd_(fj_reg r, uint16_t bits) {
    fj_opnd o = FJ_ZERO_INIT_;
    o.kind = FJ_OPND_REG; o.reg = r; o.bits = bits;
    return o;
}
static inline fj_opnd fj_r64(fj_reg r) { return fj_reg_opnd_(r, 64); }
static inline fj_opnd fj_r32(fj_reg r) { return fj_reg_opnd_(r, 32); }
static inline fj_opnd fj_r16(fj_reg r) { return fj_reg_opnd_(r, 16); }
static inline fj_opnd fj_r8(fj_reg r) { return fj_reg_opnd_(r, 8); }
static inline fj_opnd fj_xmm(fj_reg r) { return fj_reg_opnd_(r, 128); }
static inline fj_opnd fj_ymm(fj_reg r) { return fj_reg_opnd_(r, 256); }
static inline fj_opnd fj_zmm(fj_reg r) { return fj_reg_opnd_(r, 512); }
static inline fj_opnd fj_k(fj_reg r) { return fj_reg_opnd_(r, 16); }
/* The builder's natural vector width (zmm or ymm). */
static inline fj_opnd fj_vec(const fj_builder *b, fj_reg r) {
    return fj_reg_opnd_(r, (uint16_t)fj_builder_vbits(b));
}
static inline fj_opnd fj_imm(int64_t v) {
    fj_opnd o = FJ_ZERO_INIT_;
    o.kind = FJ_OPND_IMM; o.val = v;
    return o;
}
/* [base + disp], access width bits (0 = implied). */
static inline fj_opnd fj_mem(uint16_t bits, fj_reg base, int32_t disp) {
    fj_opnd o = FJ_ZERO_INIT_;
    o.kind = FJ_OPND_MEM; o.bits = bits; o.reg = base; o.scale = 1; o.val = disp;
    return o;
}
/* [base + index*scale + disp] */
static inline fj_opnd fj_memx(uint16_t bits, fj_reg base, fj_reg index, uint8_t scale, int32_t disp) {
    fj_opnd o = fj_mem(bits, base, disp);
    o.index = index; o.scale = scale;
    return o;
}
static inline fj_opnd fj_bcst(fj_opnd m) { m.bcst = 1; return m; }
static inline fj_opnd fj_masked(fj_opnd dst, fj_reg k, int zeroing) {
    dst.mask = k; dst.zero = (uint8_t)(zeroing != 0);
    return dst;
}
static inline fj_opnd fj_lbl(fj_label l) {
    fj_opnd o = FJ_ZERO_INIT_;
    o.kind = FJ_OPND_LABEL; o.val = l.id;
    return o;
}
static inline fj_opnd fj_none(void) { fj_opnd o = FJ_ZERO_INIT_; return o; }

static inline void fj_emit0(fj_builder *b, fj_op op) { fj_emitv(b, op, 0, 0); }
static inline void fj_emit1(fj_builder *b, fj_op op, fj_opnd a) { fj_emitv(b, op, &a, 1); }
static inline void fj_emit2(fj_builder *b, fj_op op, fj_opnd a, fj_opnd c) {
    fj_opnd v[2] = {a, c};
    fj_emitv(b, op, v, 2);
}
static inline void fj_emit3(fj_builder *b, fj_op op, fj_opnd a, fj_opnd c, fj_opnd d) {
    fj_opnd v[3] = {a, c, d};
    fj_emitv(b, op, v, 3);
}
static inline void fj_emit4(fj_builder *b, fj_op op, fj_opnd a, fj_opnd c, fj_opnd d, fj_opnd e) {
    fj_opnd v[4] = {a, c, d, e};
    fj_emitv(b, op, v, 4);
}
#ifndef __cplusplus
/* fj_emit(b, FJ_VADDPS, dst, src1, src2): any operand count >= 1. */
#define fj_emit(b, op, ...) \
    fj_emitv((b), (op), (const fj_opnd[]){__VA_ARGS__}, \
             (int)(sizeof((fj_opnd[]){__VA_ARGS__}) / sizeof(fj_opnd)))
#endif

#ifdef __cplusplus
}
#endif

#endif /* FRAMEJIT_BUILDER_H */
