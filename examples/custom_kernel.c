/* custom_kernel.c: an embedder's own kernel written with the builder:
 * y[i] = a * x[i] + y[i] (saxpy), full vectors then a masked tail.
 * The builder supplies the frame, the CFI and the registers (never rbp). */
#include <framejit.h>
#include <stdio.h>

typedef void (*saxpy_fn)(const float *x, float *y, size_t n, const float *a);

static fj_status build_saxpy(fj_runtime *rt, fj_kernel **out) {
    fj_builder *b;
    fj_status s = fj_builder_create(rt, "example_saxpy_f32", 4, &b);
    if (s != FJ_OK) return s;
    const int lanes = fj_builder_vbits(b) / 32, avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    fj_reg x = fj_arg(b, 0), y = fj_arg(b, 1), n = fj_arg(b, 2), pa = fj_arg(b, 3);
    fj_reg va = fj_vreg(b), vx = fj_vreg(b), vy = fj_vreg(b), i = fj_gpr(b);
    fj_emit(b, FJ_VBROADCASTSS, fj_vec(b, va), fj_mem(32, pa, 0));
    fj_emit(b, FJ_XOR, fj_r32(i), fj_r32(i));
    fj_label loop = fj_label_new(b), tail = fj_label_new(b), done = fj_label_new(b);

    fj_label_bind(b, loop); /* while (n - i >= lanes) */
    fj_reg left = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(left), fj_r64(n));
    fj_emit(b, FJ_SUB, fj_r64(left), fj_r64(i));
    fj_emit(b, FJ_CMP, fj_r64(left), fj_imm(lanes));
    fj_emit(b, FJ_JB, fj_lbl(tail));
    fj_emit(b, FJ_VMOVUPS, fj_vec(b, vx), fj_memx(0, x, i, 4, 0));
    fj_emit(b, FJ_VFMADD213PS, fj_vec(b, vx), fj_vec(b, va), fj_memx(0, y, i, 4, 0));
    fj_emit(b, FJ_VMOVUPS, fj_memx(0, y, i, 4, 0), fj_vec(b, vx));
    fj_emit(b, FJ_ADD, fj_r64(i), fj_imm(lanes));
    fj_emit(b, FJ_JMP, fj_lbl(loop));

    fj_label_bind(b, tail); /* 0 <= left < lanes elements */
    fj_emit(b, FJ_TEST, fj_r64(left), fj_r64(left));
    fj_emit(b, FJ_JE, fj_lbl(done));
    if (avx512) {
        fj_reg k = fj_kreg(b), bits = fj_gpr(b);
        fj_emit(b, FJ_MOV, fj_r32(bits), fj_imm(-1));
        fj_emit(b, FJ_BZHI, fj_r32(bits), fj_r32(bits), fj_r32(left));
        fj_emit(b, FJ_KMOVW, fj_k(k), fj_r32(bits));
        fj_emit(b, FJ_VMOVUPS, fj_masked(fj_vec(b, vx), k, 1), fj_memx(0, x, i, 4, 0));
        fj_emit(b, FJ_VMOVUPS, fj_masked(fj_vec(b, vy), k, 1), fj_memx(0, y, i, 4, 0));
        fj_emit(b, FJ_VFMADD231PS, fj_vec(b, vy), fj_vec(b, va), fj_vec(b, vx));
        fj_emit(b, FJ_VMOVUPS, fj_masked(fj_memx(0, y, i, 4, 0), k, 0), fj_vec(b, vy));
    } else { /* AVX2: scalar tail keeps the example short */
        fj_label one = fj_label_new(b);
        fj_label_bind(b, one);
        fj_emit(b, FJ_VMOVSS, fj_xmm(vx), fj_memx(32, x, i, 4, 0));
        fj_emit(b, FJ_VMOVSS, fj_xmm(vy), fj_memx(32, y, i, 4, 0));
        fj_emit(b, FJ_VFMADD231PS, fj_xmm(vy), fj_xmm(va), fj_xmm(vx));
        fj_emit(b, FJ_VMOVSS, fj_memx(32, y, i, 4, 0), fj_xmm(vy));
        fj_emit(b, FJ_INC, fj_r64(i));
        fj_emit(b, FJ_DEC, fj_r64(left));
        fj_emit(b, FJ_JNE, fj_lbl(one));
    }
    fj_label_bind(b, done);
    fj_return(b, fj_none());
    return fj_builder_finish(b, out); /* verify, place, register CFI */
}

int main(void) {
    fj_runtime *rt;
    fj_kernel *k;
    if (fj_runtime_create(NULL, &rt) != FJ_OK || build_saxpy(rt, &k) != FJ_OK) {
        fprintf(stderr, "custom_kernel: %s\n", fj_last_error());
        return 1;
    }
    float x[37], y[37], a = 0.5f;
    for (int i = 0; i < 37; i++) x[i] = (float)i, y[i] = 1.0f;
    ((saxpy_fn)fj_kernel_entry(k))(x, y, 37, &a);
    int bad = 0;
    for (int i = 0; i < 37; i++) bad += y[i] != 0.5f * (float)i + 1.0f;
    printf("%s: %zu bytes of code, y[36] = %g, %s\n", fj_kernel_name(k), fj_kernel_code_size(k),
           (double)y[36], bad ? "WRONG" : "ok");
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
    return bad != 0;
}
