/* builder_int.h: the builder's internal interface to runtime/ (which owns
 * fj_builder_finish because finishing places code and registers unwind
 * info, which kernels/ must not do, and gives fj_builder_create the
 * runtime's ISA and CPU features). */
#ifndef FJ_BUILDER_INT_H
#define FJ_BUILDER_INT_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/x64/x64.h"
#include "base/base.h"
#include "base/frame_rec.h"

/* The assembled kernel: position-independent bytes (instructions, then the
 * constant pool), and the frame records of its prologue/epilogue. */
typedef struct kb_code {
    uint8_t *bytes;        /* fj_malloc'ed */
    size_t len;            /* whole image, constant pool included */
    size_t code_len;       /* instructions only */
    uw_rec *recs;          /* fj_malloc'ed */
    size_t nrecs;
    uint32_t loop_lo, loop_hi; /* the loops' bytes (first loop head to the end of the
                                * last backward jump), to keep on one page; 0, 0: none */
} kb_code;

/* The frame-pointer tax probe, for one measurement (framejit-bench's GEMM
 * with rbp as a GPR against the frame-pointer kernels): it exists only in
 * builds configured with meson -Dfp_tax_probe=true, which define
 * FJ_FP_TAX_PROBE to 1. Everywhere else FJ_FP_TAX_PROBE is the constant 0
 * and every probe branch (`if (FJ_FP_TAX_PROBE && ...)`) compiles to
 * nothing. The probe lives in the builder (builder_priv.h's kb_probe_nofp,
 * builder.c, builder_frame.c) and in runtime/runtime.c, which alone turns
 * it on (FRAMEJIT_FP_TAX_PROBE=1). KB_NOFP, set in cpu_features (the
 * runtime's one value every builder is created from), makes the builder
 * hand out rbp as a GPR (first), frame kernels without a frame pointer
 * (rbp pushed as a callee-saved register, rsp-relative slots and CFA,
 * uw_rec's UW_CFA_SP), reject fj_call, and add "_nofp" to the kernel's
 * name. Such kernels break invariant 1 on purpose: the runtime skips the
 * verifier for them (kb_nofp, always 0 in other builds). */
#ifndef FJ_FP_TAX_PROBE
#define FJ_FP_TAX_PROBE 0
#endif
#define KB_NOFP (1u << 31)
FJ_INTERNAL int kb_nofp(const fj_builder *b);

/* isa must be AVX2 or AVX512; cpu_features are X64_F_* the CPU has. rt is
 * only remembered (for fj_builder_finish), never used here. */
FJ_INTERNAL fj_status kb_new(const char *name, int nargs, fj_isa isa, uint32_t cpu_features,
                             fj_runtime *rt, fj_builder **out);
/* fj_builder_create's checks of what the user asks for (a name of at most
 * 200 characters of [A-Za-z0-9_.-], 0..6 arguments), then kb_new; *out is
 * NULL on failure. */
FJ_INTERNAL fj_status kb_create(const char *name, int nargs, fj_isa isa, uint32_t cpu_features,
                                fj_runtime *rt, fj_builder **out);
FJ_INTERNAL const char *kb_name(const fj_builder *b);
FJ_INTERNAL fj_runtime *kb_runtime(const fj_builder *b);
/* Lays out prologue + body + epilogue + constants. Returns the builder's
 * sticky error (with its message set via fj_fail) if there was one. */
FJ_INTERNAL fj_status kb_assemble(fj_builder *b, kb_code *out);
FJ_INTERNAL void kb_code_free(kb_code *c);
FJ_INTERNAL void kb_free(fj_builder *b);

/* The body's length so far: between two fj_emit calls, the boundary of
 * the next instruction. */
FJ_INTERNAL uint32_t kb_body_len(const fj_builder *b);
/* The next instruction emitted starts at an address congruent to rem
 * modulo mod (a power of two, 2..64; kernels start on 64-byte lines):
 * no-ops after the prologue make up the difference, so one place a
 * kernel (its hottest loop's head; a later call replaces an earlier one);
 * kb_interleave refuses a span with that place inside. */
FJ_INTERNAL void kb_align_next(fj_builder *b, unsigned mod, unsigned rem);
/* Vector and mask registers fj_vreg / fj_kreg can still hand out. */
FJ_INTERNAL int kb_free_vregs(const fj_builder *b);
FJ_INTERNAL int kb_free_kregs(const fj_builder *b);
/* Interleaves straight-line instruction streams emitted one after the
 * other: lanes streams of count instructions each, stream l's instruction
 * k at body offsets [at[l * stride + k], at[l * stride + k + 1]) (stride
 * > count), each stream starting where the previous one ends and the last
 * one ending at the body's end. Rewrites that span as instruction 0 of every
 * stream, then instruction 1, ... (independent chains side by side, for
 * the out-of-order core), moving constant fixups with their instructions.
 * A jump, a label bound or kb_align_next's place inside the span makes
 * it an error. */
FJ_INTERNAL void kb_interleave(fj_builder *b, const uint32_t *at, size_t stride, int lanes,
                               int count);

/* Traces. A generator that emits one straight-line sequence many times
 * with other registers or displacements (a math op once per vector of an
 * unrolled loop, once per accumulator of an epilogue; a GEMM k step once
 * per step of the unrolled loop) records it once and replays it: between
 * kb_trace_begin and kb_trace_end, fj_emitv records each instruction
 * instead of emitting it, and kb_replay emits copies of the recording with
 * registers renamed, instruction k of every copy before instruction k + 1
 * of any (independent chains side by side, for the out-of-order core, as
 * kb_interleave lays them out); kb_replay_shift emits one copy with the
 * displacements of memory operands on some base registers moved. The
 * instructions the builder's template paths take (vector registers, zmm
 * with one memory operand or mask registers, GPR ALU ops, prefetches and
 * GPR loads and stores) replay straight through the encoder's templates,
 * their operands checked once when recorded; the others through
 * fj_emitv. Jumps, labels and anything that emits bytes other than
 * fj_emitv make a trace unusable (kb_trace_end says so; bytes emitted
 * meanwhile are an error of the builder). */
enum { KB_TRACE_MAX = 48, KB_REPLAY_MAX = 8 };
/* How an entry replays (kb_tinsn.form). */
enum {
    KB_TF_GENERAL = 0, /* gen 0: x64_vregs; gen 1: fj_emitv with the operands in gen[gi] */
    KB_TF_EVEX,        /* gen 0: tpl the EVEX form's bytes with every register 0;
                          gen 1 while recording: mask-register operands taken
                          (KB_TF_VK once kb_trace_end has the form) */
    KB_TF_VK,          /* mask-register form (x64_vk_fill): w the form word, regs
                          (vector or mask numbers), sh the mask operands, write
                          mask and zeroing */
    KB_TF_VM,          /* zmm memory form (x64_vm_fill): w the form word, regs, m,
                          sh the write mask and zeroing */
    KB_TF_GPR_MEM,     /* x64_encode_gpr_mem: bits, regs the register, sh[0] store,
                          sh[1] 1 when m's base is a register handle (not the frame) */
    KB_TF_GPR,         /* x64_encode_gpr: bits, regs r0 | r1 << 8 (r1 as int8: -1 an imm,
                          X64_GPR_UNARY none) */
    /* The constant-pool forms (kb_trace_end; pool the constant's offset),
     * last: a replay tells them by one compare. */
    KB_TF_VMK,         /* as KB_TF_VM with a mask register as operand 0 (vcmpps k,
                          zmm, [pool], imm8): w made from the encoder's bytes */
    KB_TF_VMP,         /* KB_TF_VM on the constant pool */
};
typedef struct kb_tinsn {
    uint16_t op;
    uint8_t nops;
    uint8_t gen;           /* 1: operands in gen[gi]; 0: vector registers in regs */
    uint16_t bits;         /* the vector width (registers) */
    uint8_t gi, nv;        /* nv: register operands (registers) */
    uint32_t regs;         /* physical registers, operand i's in bits 8i..8i+7 */
    int32_t imm;           /* last operand, an imm8 (registers, has_imm) */
    uint8_t has_imm;
    uint8_t form;          /* KB_TF_* */
    uint8_t sh[3];
    uint64_t w;
    x64_vm_mem m;          /* KB_TF_VM, KB_TF_GPR_MEM: the memory operand */
    /* The bytes as recorded (kept at the first kb_replay_shift; enc_len
     * 0: none), for replays that rename nothing: a copy, and for a memory
     * operand whose displacement moves, its ModRM.. rewritten from byte
     * head on (disp8 scaled by 1 << nsh); shift 1 when it can move. */
    uint8_t enc[16];
    uint8_t enc_len, head, nsh, shift;
    uint32_t pool;         /* KB_TF_VMK, KB_TF_VMP: the constant's pool offset */
    /* KB_TF_EVEX, KB_TF_VK and the constant-pool forms (tlen > 0: made
     * at kb_trace_end): the bytes with every register 0 and no write mask,
     * which a copy's registers are put into (x64_evex_regs); tg, te, th,
     * tm: the registers of ModRM.reg, ModRM.rm, vvvv and the write mask,
     * as a replay's rename table indexes them (builder_trace.c). */
    uint8_t tpl[16];
    uint8_t tlen, tg, te, th, tm;
} kb_tinsn;
typedef struct kb_trace {
    kb_tinsn in[KB_TRACE_MAX];
    fj_opnd gen[KB_TRACE_MAX][4];
    int n, ngen, bad;
    int kept;              /* the entries' enc: kept by the first kb_replay_shift */
    size_t len0, nfix0;
} kb_trace;
FJ_INTERNAL void kb_trace_begin(fj_builder *b, kb_trace *t);
/* 1 when the trace can be replayed. */
FJ_INTERNAL int kb_trace_end(fj_builder *b);
/* Emits copies of t (1..KB_REPLAY_MAX), interleaved, copy c with the
 * register of from[i] renamed to that of to[c * nmap + i] (vector or mask
 * registers, live; any other register the trace names is kept). */
FJ_INTERNAL void kb_replay(fj_builder *b, const kb_trace *t, int copies, const fj_reg *from,
                           const fj_reg *to, int nmap);
/* Room for n traces owned by the builder (kept, like its other buffers,
 * for the thread's next builder), valid until the next call or kb_free;
 * NULL when out of memory (the generator then emits without traces). */
FJ_INTERNAL kb_trace *kb_scratch_traces(fj_builder *b, int n);
/* Emits t once, its registers as recorded, the displacement of each
 * memory operand on base register base[i] (a live GPR) plus delta[i]. */
FJ_INTERNAL void kb_replay_shift(fj_builder *b, kb_trace *t, const fj_reg *base,
                                 const int32_t *delta, int nbase);

/* dst[i] := vals[i] (a float's bits) broadcast, for i < n, from n
 * constants laid out in the pool one after the other (as n
 * fj_const_data(4 bytes, align 4) calls would place them): what the
 * vbroadcastss of each would emit, the form looked up once. */
FJ_INTERNAL void kb_bcst_consts(fj_builder *b, const fj_reg *dst, const uint32_t *vals, int n);

/* v[i] := [base + disp + i*step] (load) or [base + disp + i*step] := v[i]
 * (store), i < n: what fj_emit of op (vmovups; vmovntps stores) with
 * fj_vec(v[i]) and fj_mem(0, base, ...) would emit, the form looked up
 * once rather than per instruction (every element-wise kernel has a few
 * such runs). */
FJ_INTERNAL void kb_vmov_run(fj_builder *b, fj_op op, int store, const fj_reg *v, int n,
                             fj_reg base, int32_t disp, int32_t step);

/* Sets the builder's sticky error (if none yet), for generators that find
 * a problem of their own (unknown op, unsupported parameter...). */
FJ_INTERNAL void kb_fail(fj_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Test hook (hidden, not public API): append raw bytes to the body, to
 * build deliberately bad kernels that the verifier must reject. */
FJ_INTERNAL void kb_test_raw(fj_builder *b, const void *bytes, size_t n);
/* Test hook: with 0, every instruction takes the general encoding path
 * (the encoder's table search and memo), none the template paths; the
 * kernels must come out byte for byte the same. Process-wide. */
FJ_INTERNAL void kb_test_fast_paths(int on);
/* Test hook: with 0, generators emit every copy of what they would
 * replay (kb_replays says which); the kernels must come out byte for byte
 * the same. Process-wide. */
FJ_INTERNAL void kb_test_replays(int on);
FJ_INTERNAL int kb_replays(void);

#endif
