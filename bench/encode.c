/* encode.c (bench): instruction encoding speed, the bulk of kernel
 * generation time.
 *
 * Two views of the same cost:
 *   - x64_encode alone on a fixed mix of instruction forms (GPR ALU, loads
 *     and stores with SIB and disp8, VEX and EVEX FMAs with {1toN} and
 *     masks, branches), in million instructions per second. The encoder is
 *     internal; framejit-bench links the static library, which has it.
 *   - the public builder API (fj_emitv into a builder, then
 *     fj_builder_destroy, or fj_builder_finish + fj_kernel_release) for an
 *     eltwise-shaped and a GEMM-shaped kernel: what generating a kernel
 *     costs a caller, in µs per kernel and ns per instruction.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "kernels/x64/x64.h"

/* ---- raw encoder ------------------------------------------------------ */

static x64_opnd gpr(int r, int bits) {
    x64_opnd o = {0};
    o.kind = X64_K_GPR; o.reg = (uint8_t)r; o.bits = (uint16_t)bits;
    o.base = o.index = X64_NOREG;
    return o;
}
static x64_opnd vec(int r, int bits) {
    x64_opnd o = gpr(r, bits);
    o.kind = X64_K_VEC;
    return o;
}
static x64_opnd vmask(x64_opnd o, int k, int zero) {
    o.mask = (uint8_t)k; o.zero = (uint8_t)zero;
    return o;
}
static x64_opnd kreg(int r) {
    x64_opnd o = gpr(r, 16);
    o.kind = X64_K_KREG;
    return o;
}
static x64_opnd mem(int bits, int base, int index, int scale, int32_t disp) {
    x64_opnd o = {0};
    o.kind = X64_K_MEM; o.bits = (uint16_t)bits; o.base = (uint8_t)base;
    o.index = (uint8_t)index; o.scale = (uint8_t)scale; o.disp = disp;
    return o;
}
static x64_opnd bcst(int base, int32_t disp) {
    x64_opnd o = mem(32, base, X64_NOREG, 1, disp);
    o.bcst = 1;
    return o;
}
static x64_opnd imm(int64_t v) {
    x64_opnd o = {0};
    o.kind = X64_K_IMM; o.imm = v; o.base = o.index = X64_NOREG;
    return o;
}
static x64_opnd rel(int bits, int64_t v) {
    x64_opnd o = imm(v);
    o.kind = X64_K_REL; o.bits = (uint16_t)bits;
    return o;
}

typedef struct insn {
    x64_op op;
    int n;
    x64_opnd o[4];
} insn;

enum { MIX_GPR, MIX_MEM, MIX_VEX, MIX_EVEX, MIX_BRANCH, MIX__N };
static const char *const mix_name[MIX__N] = {
    "gpr alu", "mem sib/disp8", "vex fma", "evex bcst/mask", "branches",
};

#define I2(op, a, b) { X64_##op, 2, { a, b } }
#define I3(op, a, b, c) { X64_##op, 3, { a, b, c } }
#define I1(op, a) { X64_##op, 1, { a } }

/* Fills the five groups (8 instructions each). Built at run time because
 * the operand helpers are functions. */
static int mix_fill(insn out[MIX__N][8]) {
    enum { A = X64_RAX, C = X64_RCX, D = X64_RDX, SI = X64_RSI, DI = X64_RDI, R8 = X64_R8,
           R9 = X64_R9, R12 = X64_R12, R13 = X64_R13, SP = X64_RSP, NR = X64_NOREG };
    const insn g[MIX__N][8] = {
        {   I2(ADD, gpr(A, 64), gpr(C, 64)), I2(SUB, gpr(R8, 64), imm(64)),
            I2(CMP, gpr(D, 64), gpr(R9, 64)), I2(XOR, gpr(A, 32), gpr(A, 32)),
            I2(MOV, gpr(SI, 64), gpr(R12, 64)), I2(AND, gpr(C, 32), imm(0x7fff)),
            I2(SHL, gpr(R9, 64), imm(2)), I1(INC, gpr(R13, 64)) },
        {   I2(MOV, gpr(A, 64), mem(64, DI, C, 8, 16)), I2(MOV, mem(64, SP, NR, 1, 8), gpr(R8, 64)),
            I2(LEA, gpr(SI, 64), mem(0, SI, D, 4, 64)),
            I2(MOV, gpr(D, 32), mem(32, R12, NR, 1, -4)),
            I2(VMOVUPS, vec(0, 256), mem(256, DI, C, 4, 32)),
            I2(VMOVUPS, mem(256, SI, C, 4, 96), vec(9, 256)),
            I2(VMOVUPS, vec(17, 512), mem(512, DI, R8, 4, 128)),
            I2(VMOVUPS, mem(512, R13, NR, 1, 64), vec(3, 512)) },
        {   I3(VFMADD231PS, vec(0, 256), vec(1, 256), vec(2, 256)),
            I3(VFMADD231PS, vec(8, 256), vec(12, 256), mem(256, DI, NR, 1, 32)),
            I3(VFMADD213PS, vec(3, 256), vec(4, 256), mem(256, SI, C, 4, 0)),
            I3(VMULPS, vec(5, 256), vec(6, 256), vec(7, 256)),
            I3(VADDPS, vec(10, 128), vec(11, 128), mem(128, R9, NR, 1, 16)),
            I2(VBROADCASTSS, vec(13, 256), mem(32, DI, C, 4, 4)),
            I3(VXORPS, vec(14, 256), vec(14, 256), vec(14, 256)),
            I3(VMAXPS, vec(15, 256), vec(15, 256), vec(1, 256)) },
        {   I3(VFMADD231PS, vec(0, 512), vec(30, 512), bcst(DI, 8)),
            I3(VFMADD231PS, vec(24, 512), vec(25, 512), mem(512, SI, C, 4, 256)),
            I3(VFMADD231PS, vmask(vec(1, 512), 1, 1), vec(2, 512), vec(3, 512)),
            I3(VMULPS, vmask(vec(4, 512), 2, 0), vec(5, 512), bcst(R12, 4)),
            I3(VADDPS, vec(20, 512), vec(21, 512), mem(512, DI, NR, 1, 64)),
            I2(VMOVUPS, vmask(mem(512, SI, NR, 1, 0), 3, 0), vec(22, 512)),
            I2(KMOVW, kreg(1), gpr(A, 32)),
            I3(VFNMADD231PS, vec(16, 256), vec(17, 256), bcst(SI, 12)) },
        {   I1(JNE, rel(8, -20)), I1(JMP, rel(32, 1000)), I1(JL, rel(8, 30)),
            I1(JE, rel(32, -4000)), I1(JB, rel(8, -2)), I1(JAE, rel(32, 64)),
            I1(JG, rel(8, 100)), I1(JMP, rel(8, -128)) },
    };
    memcpy(out, g, sizeof g);
    /* Self-check: a mix that does not encode would time the error path. */
    uint8_t buf[X64_MAX_LEN];
    for (int s = 0; s < MIX__N; s++)
        for (int i = 0; i < 8; i++)
            if (x64_encode(out[s][i].op, out[s][i].o, out[s][i].n, buf, NULL) <= 0) {
                fprintf(stderr, "bench encode: mix %s #%d does not encode\n", mix_name[s], i);
                return 0;
            }
    return 1;
}

/* ns per instruction for encoding list[0..n) `loops` times; the bytes go
 * into a ring so the stores are real. */
static double time_encode(const insn *list, int n, int loops) {
    static uint8_t ring[4096 + X64_MAX_LEN];
    size_t pos = 0;
    x64_enc_info info;
    double t0 = bench_now_ns();
    for (int l = 0; l < loops; l++)
        for (int i = 0; i < n; i++) {
            int r = x64_encode(list[i].op, list[i].o, list[i].n, ring + pos, &info);
            pos = (pos + (size_t)r) & 4095;
        }
    double t1 = bench_now_ns();
    __asm__ volatile("" : : "r"(ring) : "memory");
    return (t1 - t0) / ((double)loops * n);
}

static void bench_raw(const bench_ctx *c) {
    insn mix[MIX__N][8];
    if (!mix_fill(mix)) return;
    int loops = c->quick ? 20000 : 100000;
    double t[MIX__N + 1][32];
    time_encode(&mix[0][0], MIX__N * 8, loops / 10);   /* warm */
    for (int rep = 0; rep < c->reps; rep++) {
        /* Interleaved groups: machine noise hits them alike. */
        for (int s = 0; s < MIX__N; s++) t[s][rep] = time_encode(mix[s], 8, loops);
        t[MIX__N][rep] = time_encode(&mix[0][0], MIX__N * 8, loops);
    }
    for (int s = 0; s <= MIX__N; s++) {
        double ns = bench_median(t[s], c->reps);
        char name[64];
        snprintf(name, sizeof name, "x64_encode %s", s < MIX__N ? mix_name[s] : "mix of 40");
        bench_row("encode", name, "ns/insn", ns, "ns", 0);
        bench_row("encode", name, "M insn/s", 1e3 / ns, "M/s", 0);
    }
}

/* ---- through the builder ---------------------------------------------- */

/* An eltwise-shaped kernel (leaky relu, unrolled by 6, masked tail on
 * AVX-512): about 60 instructions. Returns the instructions emitted. */
static int build_eltwise(fj_builder *b) {
    int vb = fj_builder_vbits(b), avx512 = vb == 512, step = vb / 8;
    fj_reg src = fj_arg(b, 0), dst = fj_arg(b, 1), n = fj_arg(b, 2);
    fj_reg i = fj_gpr(b), t = fj_gpr(b);
    enum { U = 6 };   /* 2 * U + 2 vector registers: fits AVX2's 16 */
    fj_reg zero = fj_vreg(b), alpha = fj_vreg(b), v[2 * U];
    for (int k = 0; k < 2 * U; k++) v[k] = fj_vreg(b);
    int cnt = 0;
#define E(...) (fj_emit(b, __VA_ARGS__), cnt++)
    E(FJ_XOR, fj_r32(i), fj_r32(i));
    E(FJ_VXORPS, fj_vec(b, zero), fj_vec(b, zero), fj_vec(b, zero));
    E(FJ_VBROADCASTSS, fj_vec(b, alpha), fj_const_f32(b, 0.1f));
    fj_label top = fj_label_new(b), tail = fj_label_new(b), done = fj_label_new(b);
    E(FJ_MOV, fj_r64(t), fj_r64(n));
    E(FJ_SUB, fj_r64(t), fj_imm(U * step / 4));
    E(FJ_JL, fj_lbl(tail));
    fj_label_bind(b, top);
    for (int k = 0; k < U; k++)
        E(FJ_VMOVUPS, fj_vec(b, v[k]), fj_memx(0, src, i, 4, k * step));
    for (int k = 0; k < U; k++) {
        E(FJ_VMULPS, fj_vec(b, v[U + k]), fj_vec(b, v[k]), fj_vec(b, alpha));
        E(FJ_VMAXPS, fj_vec(b, v[k]), fj_vec(b, v[k]), fj_vec(b, v[U + k]));
        E(FJ_VMINPS, fj_vec(b, v[U + k]), fj_vec(b, v[k]), fj_vec(b, zero));
        E(FJ_VADDPS, fj_vec(b, v[k]), fj_vec(b, v[k]), fj_vec(b, v[U + k]));
    }
    for (int k = 0; k < U; k++)
        E(FJ_VMOVUPS, fj_memx(0, dst, i, 4, k * step), fj_vec(b, v[k]));
    E(FJ_ADD, fj_r64(i), fj_imm(U * step / 4));
    E(FJ_CMP, fj_r64(i), fj_r64(t));
    E(FJ_JLE, fj_lbl(top));
    fj_label_bind(b, tail);
    E(FJ_CMP, fj_r64(i), fj_r64(n));
    E(FJ_JGE, fj_lbl(done));
    if (avx512) {
        fj_reg k1 = fj_kreg(b);
        E(FJ_MOV, fj_r64(t), fj_r64(n));
        E(FJ_SUB, fj_r64(t), fj_r64(i));
        E(FJ_MOV, fj_r32(n), fj_imm(1));
        E(FJ_SHLX, fj_r32(n), fj_r32(n), fj_r32(t));
        E(FJ_SUB, fj_r32(n), fj_imm(1));
        E(FJ_KMOVW, fj_k(k1), fj_r32(n));
        E(FJ_VMOVUPS, fj_masked(fj_vec(b, v[0]), k1, 1), fj_memx(0, src, i, 4, 0));
        E(FJ_VMULPS, fj_vec(b, v[U]), fj_vec(b, v[0]), fj_bcst(fj_const_f32(b, 0.1f)));
        E(FJ_VMAXPS, fj_vec(b, v[0]), fj_vec(b, v[0]), fj_vec(b, v[U]));
        E(FJ_VMOVUPS, fj_masked(fj_memx(0, dst, i, 4, 0), k1, 0), fj_vec(b, v[0]));
    } else {
        fj_label one = fj_label_new(b);
        fj_label_bind(b, one);
        E(FJ_VMOVSS, fj_xmm(v[0]), fj_memx(32, src, i, 4, 0));
        E(FJ_VMULSS, fj_xmm(v[U]), fj_xmm(v[0]), fj_xmm(alpha));
        E(FJ_VMAXPS, fj_xmm(v[0]), fj_xmm(v[0]), fj_xmm(v[U]));
        E(FJ_VMOVSS, fj_memx(32, dst, i, 4, 0), fj_xmm(v[0]));
        E(FJ_INC, fj_r64(i));
        E(FJ_CMP, fj_r64(i), fj_r64(n));
        E(FJ_JL, fj_lbl(one));
    }
    fj_label_bind(b, done);
    fj_return(b, fj_none());
#undef E
    return cnt + 1;
}

/* A GEMM-shaped micro-kernel: 6 rows x 4 zmm (AVX-512) or 6 x 2 ymm
 * (AVX2) accumulators, k unrolled by 8 (broadcast A, load B, FMAs), stores
 * with beta = 1: about 300 / 200 instructions. */
static int build_gemm(fj_builder *b) {
    int vb = fj_builder_vbits(b), step = vb / 8;
    int rows = 6, cols = vb == 512 ? 4 : 2;   /* 24 + 4 + 1 / 12 + 2 + 1 registers */
    fj_reg pa = fj_arg(b, 0), pb = fj_arg(b, 1), pc = fj_arg(b, 2), k = fj_arg(b, 3);
    fj_reg lda4 = fj_gpr(b);
    fj_reg acc[24], bv[4], av = fj_vreg(b);
    for (int i = 0; i < rows * cols; i++) acc[i] = fj_vreg(b);
    for (int j = 0; j < cols; j++) bv[j] = fj_vreg(b);
    int cnt = 0;
#define E(...) (fj_emit(b, __VA_ARGS__), cnt++)
    for (int i = 0; i < rows * cols; i++)
        E(FJ_VXORPS, fj_vec(b, acc[i]), fj_vec(b, acc[i]), fj_vec(b, acc[i]));
    E(FJ_MOV, fj_r64(lda4), fj_imm(4 * 256));
    fj_label top = fj_label_new(b);
    fj_label_bind(b, top);
    for (int u = 0; u < 8; u++) {
        for (int j = 0; j < cols; j++)
            E(FJ_VMOVUPS, fj_vec(b, bv[j]), fj_mem(0, pb, (u * cols + j) * step));
        for (int i = 0; i < rows; i++) {
            fj_opnd a = i < 3 ? fj_mem(32, pa, i * 1024 + u * 4)
                              : fj_memx(32, pa, lda4, 2, (i - 3) * 1024 + u * 4);
            if (vb == 512) {
                for (int j = 0; j < cols; j++)
                    E(FJ_VFMADD231PS, fj_vec(b, acc[i * cols + j]), fj_vec(b, bv[j]), fj_bcst(a));
            } else {
                E(FJ_VBROADCASTSS, fj_vec(b, av), a);
                for (int j = 0; j < cols; j++)
                    E(FJ_VFMADD231PS, fj_vec(b, acc[i * cols + j]), fj_vec(b, bv[j]),
                      fj_vec(b, av));
            }
        }
    }
    E(FJ_ADD, fj_r64(pa), fj_imm(32));
    E(FJ_ADD, fj_r64(pb), fj_imm(8 * cols * step));
    E(FJ_SUB, fj_r64(k), fj_imm(8));
    E(FJ_JG, fj_lbl(top));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            fj_opnd m = fj_mem(0, pc, i * 1024 + j * step);
            E(FJ_VADDPS, fj_vec(b, acc[i * cols + j]), fj_vec(b, acc[i * cols + j]), m);
            E(FJ_VMOVUPS, m, fj_vec(b, acc[i * cols + j]));
        }
    fj_return(b, fj_none());
#undef E
    return cnt + 1;
}

typedef int (*build_fn)(fj_builder *b);

/* µs per kernel: build then destroy (finish = 0), or build, finish and
 * release (finish = 1: assembly, verifier if enabled, placement, unwind
 * registration), or build and finish, all kernels kept until the timing
 * ends (finish = 2: as a runtime keeps the kernels it generates, so every
 * kernel goes to new code and metadata space). *ninsn receives the
 * instructions per kernel. */
enum { KEEP_MAX = 512 };
static double time_build(fj_runtime *rt, build_fn fn, int finish, int kernels, int *ninsn) {
    fj_kernel *kept[KEEP_MAX];
    int nkept = 0;
    if (finish == 2 && kernels > KEEP_MAX) kernels = KEEP_MAX;
    double t0 = bench_now_ns();
    for (int i = 0; i < kernels; i++) {
        fj_builder *b;
        if (fj_builder_create(rt, "bench_encode", 4, &b) != FJ_OK) return -1;
        *ninsn = fn(b);
        if (finish) {
            fj_kernel *k;
            if (fj_builder_finish(b, &k) != FJ_OK) {
                fprintf(stderr, "bench encode: %s\n", fj_last_error());
                while (nkept) fj_kernel_release(kept[--nkept]);
                return -1;
            }
            if (finish == 2) kept[nkept++] = k;
            else fj_kernel_release(k);
        } else {
            fj_builder_destroy(b);
        }
    }
    double t = (bench_now_ns() - t0) / 1e3 / kernels;
    while (nkept) fj_kernel_release(kept[--nkept]);
    return t;
}

static void bench_builder(const bench_ctx *c, fj_runtime *rt, const char *name, build_fn fn) {
    double emit[32], fin[32], kept[32];
    int n = 0;
    int kernels = c->quick ? 200 : 1000;
    if (time_build(rt, fn, 0, 10, &n) < 0 || time_build(rt, fn, 1, 2, &n) < 0) return;
    for (int rep = 0; rep < c->reps; rep++) {
        emit[rep] = time_build(rt, fn, 0, kernels, &n);
        /* Fewer finished kernels: each one maps code and registers CFI. */
        fin[rep] = time_build(rt, fn, 1, kernels / 10, &n);
        kept[rep] = time_build(rt, fn, 2, kernels / 10, &n);
    }
    double e = bench_median(emit, c->reps), f = bench_median(fin, c->reps);
    char row[64];
    snprintf(row, sizeof row, "builder %s %d insns", name, n);
    bench_row("encode", row, "emit+destroy", e, "us", 0);
    bench_row("encode", row, "emit ns/insn", e * 1e3 / n, "ns", 0);
    bench_row("encode", row, "emit+finish", f, "us", 0);
    bench_row("encode", row, "emit+finish, kept", bench_median(kept, c->reps), "us", 0);
}

void bench_encode(const bench_ctx *c) {
    printf("# encode: isa %s; median of %d; x64_encode alone, then whole kernels through the "
           "builder API\n", bench_isa(), c->reps);
    bench_raw(c);
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    fj_runtime *rt;
    if (fj_runtime_create(&o, &rt) != FJ_OK) {
        fprintf(stderr, "bench encode: %s\n", fj_last_error());
        return;
    }
    printf("# encode: builder on isa %s\n",
           fj_runtime_isa(rt) == FJ_ISA_AVX512 ? "avx512" : "avx2");
    bench_builder(c, rt, "eltwise", build_eltwise);
    bench_builder(c, rt, "gemm", build_gemm);
    fj_runtime_destroy(rt);
}
