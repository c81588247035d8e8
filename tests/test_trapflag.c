/* test_trapflag.c: invariant 2, "the CFI is exact at every instruction
 * boundary of every kernel". Each kernel runs with the x86 trap flag set;
 * at every instruction inside it, libunwind (from the signal context) and
 * libgcc (through the signal frame) must reach the kernel's caller, the
 * marker chain and main, and a plain rbp walk must miss the direct caller
 * exactly at offset 0 (push rbp), offset 1 (mov rbp, rsp) and at ret. The
 * machinery is fjt_trace_kernel (tests/support/fjtest.c). */

#include <Zydis/Zydis.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"

int main(void);

/* One thread: the traced (calling) thread must run the kernel. */
static fj_runtime *make_rt(fj_isa isa) { return fjt_runtime(isa, 1); }

static void report(const char *what, const fjt_trace_result *r) {
    printf("%s: kernel %s: %ld kernel stops (%ld distinct offsets), %ld other stops, %ld entries, "
           "%ld rets, rbp walk missed the caller at %ld stops\n",
           what, r->first_name ? r->first_name : "?", r->kernel_steps, r->distinct,
           r->outside_steps, r->entries, r->rets, r->fp_miss);
}

static void assert_trace(const char *what, int ok, const fjt_trace_result *r) {
    report(what, r);
    ck_assert_msg(ok, "%s: %s (libunwind bad %ld, libgcc bad %ld, rbp bad %ld, rbp chain bad %ld)",
                  what, r->msg, r->lu_bad, r->gcc_bad, r->fp_bad, r->fp_chain_bad);
    ck_assert_int_gt(r->kernel_steps, 0);
    /* The rbp walk misses the caller at exactly two instructions per entry
     * and one per ret (fp_bad == 0 says which; this says how many). */
    ck_assert_int_eq(r->fp_miss, 2 * r->entries + r->rets);
}

/* Instruction offsets of a straight-line kernel, decoded with Zydis (an
 * independent decoder) from the entry up to and including the first ret. */
static int decode_offsets(const uint8_t *code, size_t len, uint32_t *offs, int max) {
    ZydisDecoder d;
    ZydisDecoderInit(&d, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    size_t off = 0;
    int n = 0;
    while (off < len && n < max) {
        ZydisDecodedInstruction ins;
        if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&d, NULL, code + off, len - off, &ins)))
            return -1;
        offs[n++] = (uint32_t)off;
        if (ins.mnemonic == ZYDIS_MNEMONIC_RET) return n;
        off += ins.length;
    }
    return -1;
}

/* Every instruction of the kernel was stopped at, and nothing else. */
static void assert_all_visited(const char *what, fj_kernel *k, const fjt_trace_result *r) {
    uint32_t offs[4096];
    int n = decode_offsets(fj_kernel_entry(k), fj_kernel_code_size(k), offs, 4096);
    ck_assert_msg(n > 0, "%s: Zydis could not decode the kernel up to its ret", what);
    ck_assert_msg(r->first_start == (uintptr_t)fj_kernel_entry(k), "%s: traced another kernel", what);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fjt_trace_visited(r, offs[i]), "%s: instruction at offset %u never stopped at",
                      what, offs[i]);
    ck_assert_msg(r->distinct == n, "%s: %ld distinct stops, %d instructions", what, r->distinct, n);
}

/* ---- relu ---------------------------------------------------------------- */

static const size_t relu_ns[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257};
#define NRELU (sizeof relu_ns / sizeof relu_ns[0])

typedef struct relu_arg {
    fj_runtime *rt;
    float alpha;
    const float *src;
    float *dst;
    size_t n;
    fj_status s;
} relu_arg;

static void relu_body(void *p) {
    relu_arg *a = p;
    a->s = fj_eltwise_f32(a->rt, FJ_ELT_RELU, a->alpha, 0.0f, a->src, a->dst, a->n);
    __asm__ volatile("" ::: "memory");
}

/* loop index: bit 0 ISA, bit 1 alpha (relu / leaky), rest: n */
START_TEST(relu_every_instruction) {
    fj_isa isa = (_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    float alpha = (_i & 2) ? 0.25f : 0.0f;
    size_t n = relu_ns[_i >> 2];
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    float *src = malloc((n + 1) * sizeof *src), *dst = malloc((n + 1) * sizeof *dst);
    ck_assert(src && dst);
    for (size_t i = 0; i < n; i++) src[i] = (float)((int)(i % 7) - 3) * 0.5f;
    relu_arg a = {rt, alpha, src, dst, n, FJ_ERR_INVALID_ARG};
    fjt_trace_opts o = {.root = (const void *)main};
    fjt_trace_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    char what[96];
    snprintf(what, sizeof what, "relu isa=%d alpha=%g n=%zu", (int)isa, alpha, n);
    int ok = fjt_trace_kernel(relu_body, &a, &o, r);
    ck_assert_msg(a.s == FJ_OK, "%s: %s", what, fj_last_error());
    assert_trace(what, ok, r);
    ck_assert_int_ge(r->rets, 1);
    for (size_t i = 0; i < n; i++) {
        float want = src[i] > 0 ? src[i] : alpha * src[i];
        ck_assert_msg(dst[i] == want, "%s: dst[%zu] = %g, want %g", what, i, dst[i], want);
    }
    free(r);
    free(src);
    free(dst);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- GEMM kernels, f32 and f64 --------------------------------------------- */

typedef struct gemm_arg {
    fj_runtime *rt;
    int f64;
    int64_t m, n, k;
    const void *a, *b;
    void *c;
    fj_gemm *h;        /* f64 handle with bias and clip, if set */
    const double *bias;
    fj_status s;
} gemm_arg;

static void gemm_body(void *p) {
    gemm_arg *g = p;
    if (g->h)
        g->s = fj_gemm_f64_execute(g->h, g->a, g->b, g->bias, g->c);
    else if (g->f64)
        g->s = fj_gemm_f64(g->rt, 'N', 'T', g->m, g->n, g->k, 0.5, g->a, g->k, g->b, g->k, 0.0,
                           g->c, g->n);
    else
        g->s = fj_gemm_f32(g->rt, 'N', 'T', g->m, g->n, g->k, 0.5f, g->a, g->k, g->b, g->k, 0.0f,
                           g->c, g->n);
    __asm__ volatile("" ::: "memory");
}

/* Loop index: bit 0 ISA, bit 1 f64, bit 2 shape (row and column tails),
 * bit 3 an f64 handle with a bias and clip (its post stage); 16-23: f64
 * handles with a bias and swish (16-19) or tanh (20-23), bit 0 ISA, bit 1
 * shape (the transcendental post stage: exp, selects, masks). */
START_TEST(gemm_every_instruction) {
    fj_isa isa = (_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    int handle = _i >> 3 & 1, f64 = (_i >> 1 & 1) | handle, shape = _i >> 2 & 1;
    fj_eltwise_op act = FJ_ELT_CLIP;
    if (_i >= 16) {
        handle = f64 = 1;
        shape = _i >> 1 & 1;
        act = _i < 20 ? FJ_ELT_SWISH : FJ_ELT_TANH;
    }
    static const int64_t shapes[2][3] = {{5, 7, 3}, {19, 21, 9}};
    const int64_t *sh = shapes[shape];
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    size_t es = f64 ? sizeof(double) : sizeof(float);
    size_t na = (size_t)(sh[0] * sh[2]), nb = (size_t)(sh[1] * sh[2]), nc = (size_t)(sh[0] * sh[1]);
    char *a = malloc(na * es), *b = malloc(nb * es), *c = malloc(nc * es);
    ck_assert(a && b && c);
    for (size_t i = 0; i < na; i++) {
        if (f64) ((double *)a)[i] = (double)(i % 5);
        else ((float *)a)[i] = (float)(i % 5);
    }
    for (size_t i = 0; i < nb; i++) {
        if (f64) ((double *)b)[i] = (double)(i % 3);
        else ((float *)b)[i] = (float)(i % 3);
    }
    memset(c, 0, nc * es);
    double bias[32];
    for (int j = 0; j < 32; j++) bias[j] = j % 4 - 1.5;
    gemm_arg g = {rt, f64, sh[0], sh[1], sh[2], a, b, c, NULL, bias, FJ_ERR_INVALID_ARG};
    if (handle) {
        fj_gemm_f64_desc d = {'N', 'T', sh[0], sh[1], sh[2], sh[2], sh[2], sh[1], 0.5, 0.0, 1,
                              act, act == FJ_ELT_CLIP ? -1.0 : 0.75, 7.0};
        ck_assert_int_eq(fj_gemm_f64_create(rt, &d, &g.h), FJ_OK);
    }
    fjt_trace_opts o = {.root = (const void *)main};
    fjt_trace_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    char what[96];
    snprintf(what, sizeof what, "gemm %s%s isa=%d %lldx%lldx%lld", f64 ? "f64" : "f32",
             !handle ? "" : act == FJ_ELT_CLIP ? " handle bias clip"
                          : act == FJ_ELT_SWISH ? " handle bias swish" : " handle bias tanh",
             (int)isa,
             (long long)sh[0], (long long)sh[1], (long long)sh[2]);
    int ok = fjt_trace_kernel(gemm_body, &g, &o, r);
    ck_assert_msg(g.s == FJ_OK, "%s: %s", what, fj_last_error());
    assert_trace(what, ok, r);
    ck_assert_int_ge(r->rets, 1);
    ck_assert_msg(r->first_name && strstr(r->first_name, f64 ? "fj_gemm_f64_" : "fj_gemm_f32_"),
                  "%s: traced %s", what, r->first_name ? r->first_name : "?");
    /* C = 0.5 * A * B^T, exact in both types */
    for (int64_t i = 0; i < sh[0]; i++)
        for (int64_t j = 0; j < sh[1]; j++) {
            double want = 0;
            for (int64_t p = 0; p < sh[2]; p++)
                want += (double)((i * sh[2] + p) % 5) * (double)((j * sh[2] + p) % 3);
            want *= 0.5;
            double tol = 0;
            if (handle) {
                want += bias[j];
                if (act == FJ_ELT_CLIP) want = fmin(fmax(want, -1.0), 7.0);
                else if (act == FJ_ELT_SWISH) want = want / (1 + exp(-0.75 * want));
                else want = tanh(want);
                if (act != FJ_ELT_CLIP) tol = 1e-15 * (fabs(want) + 1e-300);
            }
            double got = f64 ? ((double *)c)[i * sh[1] + j] : ((float *)c)[i * sh[1] + j];
            ck_assert_msg(fabs(got - want) <= tol, "%s: C(%lld,%lld) = %.17g, want %.17g", what,
                          (long long)i, (long long)j, got, want);
        }
    free(r);
    free(a);
    free(b);
    free(c);
    fj_gemm_destroy(g.h);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- builder kernels ------------------------------------------------------ */

typedef struct call_arg {
    void *entry;
    uint64_t a0, a1, ret;
} call_arg;

static void call_body(void *p) {
    call_arg *c = p;
    c->ret = ((uint64_t(*)(uint64_t, uint64_t))c->entry)(c->a0, c->a1);
    __asm__ volatile("" ::: "memory");
}

static volatile uint64_t cb_calls;

__attribute__((noipa)) static uint64_t trace_cb(uint64_t a0, uint64_t a1) {
    cb_calls++;
    return a0 + a1;
}

/* Saved registers, with and without a call. Loop index: bit 0 ISA, bit 1
 * with a call. */
START_TEST(csr_kernel_every_instruction) {
    fj_isa isa = (_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    int with_call = (_i & 2) != 0;
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    fj_kernel *k;
    fj_status s = fjt_build_csr_kernel(rt, with_call ? "trace_csr_call" : "trace_csr", with_call ?
                                       (const void *)trace_cb : NULL, &k);
    ck_assert_msg(s == FJ_OK, "build: %s: %s", fj_status_str(s), fj_last_error());
    call_arg c = {fj_kernel_entry(k), 3, 4, 99};
    fjt_trace_opts o = {.root = (const void *)main};
    fjt_trace_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    cb_calls = 0;
    char what[64];
    snprintf(what, sizeof what, "%s isa=%d", fj_kernel_name(k), (int)isa);
    int ok = fjt_trace_kernel(call_body, &c, &o, r);
    assert_trace(what, ok, r);
    ck_assert_uint_eq(c.ret, 0);
    ck_assert_int_eq(r->entries, 1);
    ck_assert_int_eq(r->rets, 1);
    if (with_call) {
        ck_assert_uint_eq(cb_calls, 2);   /* warm-up + traced run */
        ck_assert_int_gt(r->outside_steps, 0);
    }
    assert_all_visited(what, k, r);
    free(r);
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
}
END_TEST

/* A loop with a stack slot and a vector op: uint64_t k(uint64_t n, uint64_t x)
 * returns n * (x + 3) by repeated addition (n >= 1). */
static fj_status build_loop_kernel(fj_runtime *rt, fj_kernel **out) {
    fj_builder *b;
    fj_status s = fj_builder_create(rt, "trace_loop", 2, &b);
    if (s != FJ_OK) return s;
    fj_reg n = fj_arg(b, 0), x = fj_arg(b, 1);
    fj_reg acc = fj_gpr(b), t = fj_gpr(b);
    fj_reg v = fj_vreg(b);
    fj_opnd slot = fj_stack_slot(b, 8, 8, 64);
    fj_opnd vslot = fj_stack_slot(b, (uint32_t)fj_builder_vbits(b) / 8, 16,
                                  (uint16_t)fj_builder_vbits(b));
    fj_emit(b, FJ_XOR, fj_r32(acc), fj_r32(acc));
    fj_emit(b, FJ_LEA, fj_r64(t), fj_mem(0, x, 3));
    fj_emit(b, FJ_MOV, slot, fj_r64(t));
    fj_label top = fj_label_new(b);
    fj_label_bind(b, top);
    fj_emit(b, FJ_VXORPS, fj_vec(b, v), fj_vec(b, v), fj_vec(b, v));
    fj_emit(b, FJ_VMOVUPS, vslot, fj_vec(b, v));
    fj_emit(b, FJ_ADD, fj_r64(acc), slot);
    fj_emit(b, FJ_DEC, fj_r64(n));
    fj_emit(b, FJ_JNE, fj_lbl(top));
    fj_return(b, fj_r64(acc));
    return fj_builder_finish(b, out);
}

START_TEST(loop_kernel_every_instruction) {
    fj_isa isa = (_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    fj_kernel *k;
    fj_status s = build_loop_kernel(rt, &k);
    ck_assert_msg(s == FJ_OK, "build: %s: %s", fj_status_str(s), fj_last_error());
    call_arg c = {fj_kernel_entry(k), 5, 10, 0};
    fjt_trace_opts o = {.root = (const void *)main};
    fjt_trace_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    int ok = fjt_trace_kernel(call_body, &c, &o, r);
    char what[48];
    snprintf(what, sizeof what, "trace_loop isa=%d", (int)isa);
    assert_trace(what, ok, r);
    ck_assert_uint_eq(c.ret, 5 * 13);
    ck_assert_int_eq(r->entries, 1);
    assert_all_visited(what, k, r);
    free(r);
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
}
END_TEST

/* The harness itself must notice a broken frame: a kernel that was never
 * registered cannot be traced (fj_symbolize misses it), so instead check
 * the negative path of the chain checker on a walk that skips a marker. */
START_TEST(chain_check_rejects) {
    char err[128];
    ck_assert_msg(fjt_unwind_load(err, sizeof err), "%s", err);
    fjt_range rm;
    ck_assert(fjt_fn_range((const void *)main, &rm));
    fjt_frame f[2] = {{.ip = rm.lo + 1}, {.ip = 0}};
    char why[256];
    ck_assert_int_lt(fjt_chain_check(f, 2, NULL, 0, &rm, 1, 0, why, sizeof why), 0);
    ck_assert(why[0] != 0);
}
END_TEST

/* ---- int8 and bf16 GEMM kernels --------------------------------------------- */

typedef struct lowp_arg {
    fj_runtime *rt;
    int bf16;
    fj_gemm_lowp *h;   /* the handle variant (relu epilogue), else NULL */
    const void *a, *b;
    void *c;
    int k;             /* LK or LK - 2 (int8: A packed; bf16: A in place, the last
                          group's one element read alone), or LK - 1 (whole k groups:
                          A in place) */
    int n;             /* LN, LN1 (one-vector tiles on either ISA) or LN2 (one full panel) */
    fj_status s;
} lowp_arg;

enum { LM = 19, LN = 21, LK = 9, LN1 = 7, LN2 = 32 };

/* B's and C's row stride: LN, or n where it is wider. */
static int lowp_ld(int n) { return n > LN ? n : LN; }

static void lowp_body(void *p) {
    lowp_arg *g = p;
    static const int32_t co[LN2];
    static const float one = 1.0f;
    if (g->h)
        g->s = fj_gemm_lowp_execute(g->h, g->a, g->b, g->bf16 ? NULL : &one, NULL, g->c);
    else if (g->bf16)
        g->s = fj_gemm_bf16bf16f32(g->rt, 'N', 'N', LM, g->n, g->k, 1.0f, g->a, g->k, g->b,
                                   lowp_ld(g->n), 0.0f, g->c, lowp_ld(g->n));
    else
        g->s = fj_gemm_u8s8s32(g->rt, 'N', 'N', 'R', LM, g->n, g->k, 1.0f, g->a, g->k, 1, g->b,
                               lowp_ld(g->n), 0, 0.0f, g->c, lowp_ld(g->n), co);
    __asm__ volatile("" ::: "memory");
}

/* The one-thread runtime of a lowp trace test's loop index: bit 0 AVX2
 * (else AVX-512), bit 1 without the VNNI/BF16 dot products; NULL, with the
 * reason printed, where the CPU lacks the ISA. */
static fj_runtime *lowp_rt(int i, const char *what, fj_options *o) {
    fj_options_init(o);
    o->isa = (i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    o->threads = 1;
    o->cpu_disable = (i & 2) ? FJ_CPU_NO_VNNI | FJ_CPU_NO_BF16 : 0;
    fj_runtime *rt = NULL;
    if (fj_runtime_create(o, &rt) != FJ_OK) {
        printf("%s %d: skipped: %s\n", what, i, fj_last_error());
        return NULL;
    }
    return rt;
}

/* body(g) under the trap flag, rooted at main: the call succeeded, every
 * instruction unwound, and the first kernel entered is named prefix... */
static void trace_lowp(void (*body)(void *), lowp_arg *g, const char *what, const char *prefix) {
    fjt_trace_opts to = {.root = (const void *)main};
    fjt_trace_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    int ok = fjt_trace_kernel(body, g, &to, r);
    ck_assert_msg(g->s == FJ_OK, "%s: %s", what, fj_last_error());
    assert_trace(what, ok, r);
    ck_assert_msg(r->first_name && strstr(r->first_name, prefix), "%s: traced %s", what,
                  r->first_name ? r->first_name : "?");
    free(r);
}

/* Loop index: bit 0 ISA, bit 1 without the dot-product instructions, bit 2 bf16,
 * bit 3 a handle with the fused epilogue (relu; int8 to f32, bf16 to bf16),
 * bit 4 k = 8 (whole k groups: the in-place A kernels, full tiles and the
 * last tile's rows; with k = 9 int8 packs A and bf16 reads A in place with
 * a half last group), bit 5 n = LN1 (one-vector tiles;
 * not with the handle, whose n is fixed at LN), bit 6 n = LN2 (a full
 * panel: with bf16 dot products and k = 8 its first tile interleaves B
 * in place; not with bit 5 or the handle). */
START_TEST(lowp_every_instruction) {
    fj_options o;
    fj_runtime *rt = lowp_rt(_i, "lowp", &o);
    if (!rt) return;
    int bf16 = _i >> 2 & 1;
    static uint16_t a[LM * LK], b[LK * LN2];
    static float c[LM * LN2];
    for (int i = 0; i < LM * LK; i++) a[i] = bf16 ? 0x3f80 + (uint16_t)(i % 3 << 7) /* 1, 2, 4 */ : (uint16_t)(i % 7);
    for (int i = 0; i < LK * LN2; i++) b[i] = bf16 ? 0x4000 + (uint16_t)(i % 3 << 7) /* 2, 4, 8 */ : (uint16_t)(i % 5);
    memset(c, 0, sizeof c);
    /* int8: A and B as bytes (the first LM*LK / LK*LN2 bytes of the arrays) */
    if (!bf16) {
        uint8_t *a8 = (uint8_t *)a, *b8 = (uint8_t *)b;
        for (int i = 0; i < LM * LK; i++) a8[i] = (uint8_t)(i % 7);
        for (int i = 0; i < LK * LN2; i++) b8[i] = (uint8_t)(i % 5);
    }
    /* bf16 without dot products: k = 7, an odd number of whole groups
     * before the half one (k = 9: an even number) */
    int handle = _i >> 3 & 1, lk = _i >> 4 & 1 ? LK - 1 : bf16 && (_i >> 1 & 1) ? LK - 2 : LK;
    int ln = _i >> 6 & 1 ? LN2 : _i >> 5 & 1 ? LN1 : LN, ld = lowp_ld(ln);
    if ((handle && ln != LN) || (_i >> 5 & _i >> 6 & 1)) {
        fj_runtime_destroy(rt);
        return;
    }
    fj_gemm_lowp *h = NULL;
    if (handle) {
        fj_gemm_lowp_desc d = {0};
        d.a_type = bf16 ? FJ_DT_BF16 : FJ_DT_U8;
        d.b_type = bf16 ? FJ_DT_BF16 : FJ_DT_S8;
        d.c_type = bf16 ? FJ_DT_BF16 : FJ_DT_F32;
        d.transa = d.transb = 'N';
        d.m = LM; d.n = LN; d.k = lk; d.lda = lk; d.ldb = LN; d.ldc = LN;
        d.ao = 1;
        d.post_op = FJ_ELT_RELU;
        ck_assert_msg(fj_gemm_lowp_create(rt, &d, &h) == FJ_OK, "%s", fj_last_error());
    }
    lowp_arg g = {rt, bf16, h, a, b, c, lk, ln, FJ_ERR_INVALID_ARG};
    char what[96];
    snprintf(what, sizeof what, "lowp %s%s k=%d n=%d isa=%d disable=%u", bf16 ? "bf16" : "u8s8",
             handle ? " handle" : "", lk, ln, (int)o.isa, o.cpu_disable);
    trace_lowp(lowp_body, &g, what, bf16 ? "fj_gemm_bf16bf16f32_" : "fj_gemm_u8s8s32_");
    for (int i = 0; i < LM; i++)
        for (int j = 0; j < ln; j++) {
            double want = 0;
            for (int p = 0; p < lk; p++)
                want += bf16 ? (double)(1 << (i * lk + p) % 3) * (double)(2 << (p * ld + j) % 3)
                             : (double)((i * lk + p) % 7 - 1) * (double)((p * ld + j) % 5);
            double got = bf16 ? c[i * ld + j] : ((int32_t *)c)[i * ld + j];
            if (handle) {
                if (want < 0) want = 0;
                uint16_t hb = ((uint16_t *)c)[i * LN + j];
                uint32_t u = (uint32_t)hb << 16;
                float f;
                memcpy(&f, &u, 4);
                got = bf16 ? f : c[i * LN + j];
            }
            ck_assert_msg(got == want, "%s: C(%d,%d) = %g, want %g", what, i, j, got, want);
        }
    fj_gemm_lowp_destroy(h);
    fj_runtime_destroy(rt);
}
END_TEST

/* Matrix x vector (u8 A times one column of B): GM rows (two blocks of 8
 * and a 3-row tail kernel), GK = two whole vectors and a masked part on
 * either ISA. */
enum { GM = 19, GK = 132 };

static void gemv_body(void *p) {
    lowp_arg *g = p;
    static const int32_t co[1];
    /* n = 2: B transposed as the matrix, x @ B^T with x = the vector */
    if (g->n == 2 && g->bf16)
        g->s = fj_gemm_bf16bf16f32(g->rt, 'N', 'T', 1, GM, GK, 1.0f, g->b, GK, g->a, GK, 0.0f, g->c, GM);
    else if (g->n == 2)
        g->s = fj_gemm_u8s8s32(g->rt, 'N', 'T', 'F', 1, GM, GK, 1.0f, g->b, GK, 1, g->a, GK, 0, 0.0f,
                               g->c, GM, co);
    else if (g->bf16)
        g->s = fj_gemm_bf16bf16f32(g->rt, 'N', 'N', GM, 1, GK, 1.0f, g->a, GK, g->b, 1, 0.0f, g->c, 1);
    else if (g->k != GK)  /* s8 A */
        g->s = fj_gemm_s8s8s32(g->rt, 'N', 'N', 'F', GM, 1, GK, 1.0f, g->a, GK, 1, g->b, 1, 0, 0.0f,
                               g->c, 1, co);
    else
        g->s = fj_gemm_u8s8s32(g->rt, 'N', 'N', 'F', GM, 1, GK, 1.0f, g->a, GK, 1, g->b, 1, 0, 0.0f,
                               g->c, 1, co);
    __asm__ volatile("" ::: "memory");
}

/* Loop index: bit 0 ISA, bit 1 without the dot-product instruction, bit 2
 * bf16, bit 3 s8 A (int8 only; lowp_arg.k = -1 marks it), bit 4 one row of
 * C with B transposed as the matrix (int8: its rows the signed side, A's
 * offset through the second pass; not with bit 3). */
START_TEST(lowp_gemv_every_instruction) {
    int bf16 = _i >> 2 & 1, s8 = _i >> 3 & 1, bt = _i >> 4 & 1;
    if ((bf16 || bt) && s8) return;
    fj_options o;
    fj_runtime *rt = lowp_rt(_i, "lowp gemv", &o);
    if (!rt) return;
    static uint8_t a[GM * GK];
    static int8_t b[GK];
    static uint16_t a16[GM * GK], b16[GK];
    static int32_t c[GM];
    for (int i = 0; i < GM * GK; i++) a[i] = (uint8_t)(i % 7);
    for (int i = 0; i < GK; i++) b[i] = (int8_t)(i % 5);
    for (int i = 0; i < GM * GK; i++) a16[i] = 0x3f80 + (uint16_t)(i % 3 << 7); /* 1, 2, 4 */
    for (int i = 0; i < GK; i++) b16[i] = 0x4000;                               /* 2 */
    lowp_arg g = {rt, bf16, NULL, bf16 ? (const void *)a16 : a, bf16 ? (const void *)b16 : b, c,
                  s8 ? -1 : GK, 1 + bt, FJ_ERR_INVALID_ARG};
    char what[64];
    snprintf(what, sizeof what, "lowp gemv %s%s isa=%d disable=%u", bf16 ? "bf16" : s8 ? "s8s8" : "u8s8",
             bt ? " bt" : "", (int)o.isa, o.cpu_disable);
    trace_lowp(gemv_body, &g, what, bf16 ? "fj_gemm_bf16bf16f32_gemv_"
                                    : s8 ? "fj_gemm_s8s8s32_gemv_"
                                    : bt ? "fj_gemm_u8s8s32_bt_gemv_" : "fj_gemm_u8s8s32_gemv_");
    for (int i = 0; i < GM; i++) {
        int32_t want = 0;
        for (int p = 0; p < GK; p++)
            want += bf16 ? (1 << (i * GK + p) % 3) * 2
                    : bt ? (p % 5 - 1) * ((i * GK + p) % 7) : ((i * GK + p) % 7 - 1) * (p % 5);
        double got = bf16 ? (double)((float *)c)[i] : (double)c[i];
        ck_assert_msg(got == want, "%s: C(%d) = %g, want %d", what, i, got, want);
    }
    fj_runtime_destroy(rt);
}
END_TEST

/* Vector x matrix (u8 A 1 x VK, B VK x VN in place): 8-row groups, a
 * 4-row group, the last 2 rows' padded quad, whole blocks and a tail
 * panel (VN % 64 or % 32 columns). */
enum { VK = 38, VN = 139 }; /* n*k past the path's 4096 */

static void vxm_body(void *p) {
    lowp_arg *g = p;
    static const int32_t co[1];
    g->s = fj_gemm_u8s8s32(g->rt, 'N', 'N', 'F', 1, VN, VK, 1.0f, g->a, VK, 0, g->b, VN, 0, 0.0f,
                           g->c, VN, co);
    __asm__ volatile("" ::: "memory");
}

/* Loop index: bit 0 ISA, bit 1 without the dot-product instruction. */
START_TEST(lowp_vxm_every_instruction) {
    fj_options o;
    fj_runtime *rt = lowp_rt(_i, "lowp vxm", &o);
    if (!rt) return;
    static uint8_t a[VK];
    static int8_t b[VK * VN];
    static int32_t c[VN];
    for (int i = 0; i < VK; i++) a[i] = (uint8_t)(i % 7 + 1);
    for (int i = 0; i < VK * VN; i++) b[i] = (int8_t)(i % 11 - 5);
    lowp_arg g = {rt, 0, NULL, a, b, c, VK, VN, FJ_ERR_INVALID_ARG};
    char what[64];
    snprintf(what, sizeof what, "lowp vxm isa=%d disable=%u", (int)o.isa, o.cpu_disable);
    trace_lowp(vxm_body, &g, what, "fj_gemm_u8s8s32_vxm_");
    for (int j = 0; j < VN; j++) {
        int32_t want = 0;
        for (int p = 0; p < VK; p++) want += (p % 7 + 1) * ((p * VN + j) % 11 - 5);
        ck_assert_msg(c[j] == want, "%s: C(%d) = %d, want %d", what, j, c[j], want);
    }
    fj_runtime_destroy(rt);
}
END_TEST

/* bf16 vector x matrix (A 1 x BK, B BK x BN in place): 8-row groups and
 * the last 5 rows; blocks, a whole chunk after them and a tail panel on
 * either ISA (187 = 128 + 32 + 27 = 160 + 16 + 11). */
enum { BK = 37, BN = 187 };

static void vxm16_body(void *p) {
    lowp_arg *g = p;
    g->s = fj_gemm_bf16bf16f32(g->rt, 'N', 'N', 1, BN, BK, 1.0f, g->a, BK, g->b, BN, 0.0f, g->c, BN);
    __asm__ volatile("" ::: "memory");
}

/* Loop index: bit 0 ISA. */
START_TEST(lowp_vxm16_every_instruction) {
    fj_options o;
    fj_runtime *rt = lowp_rt(_i, "lowp bf16 vxm", &o);
    if (!rt) return;
    static uint16_t a[BK], b[BK * BN];
    static float c[BN];
    for (int i = 0; i < BK; i++) a[i] = 0x3f80 + (uint16_t)(i % 3 << 7); /* 1, 2, 4 */
    for (int i = 0; i < BK * BN; i++) b[i] = i % 2 ? 0x4000 : 0x3f80; /* 2, 1 */
    lowp_arg g = {rt, 1, NULL, a, b, c, BK, BN, FJ_ERR_INVALID_ARG};
    char what[64];
    snprintf(what, sizeof what, "lowp bf16 vxm isa=%d", (int)o.isa);
    trace_lowp(vxm16_body, &g, what, "fj_gemm_bf16bf16f32_vxm_");
    for (int j = 0; j < BN; j++) {
        float want = 0;
        for (int p = 0; p < BK; p++) want += (float)(1 << p % 3) * (float)(1 + (p * BN + j) % 2);
        ck_assert_msg(c[j] == want, "%s: C(%d) = %g, want %g", what, j, c[j], want);
    }
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("trapflag");
    TCase *t = tcase_create("every_instruction");
    tcase_set_timeout(t, 240);
    tcase_add_loop_test(t, relu_every_instruction, 0, (int)(4 * NRELU));
    tcase_add_loop_test(t, csr_kernel_every_instruction, 0, 4);
    tcase_add_loop_test(t, gemm_every_instruction, 0, 24);
    tcase_add_loop_test(t, lowp_every_instruction, 0, 128);
    tcase_add_loop_test(t, lowp_gemv_every_instruction, 0, 32);
    tcase_add_loop_test(t, lowp_vxm_every_instruction, 0, 4);
    tcase_add_loop_test(t, lowp_vxm16_every_instruction, 0, 2);
    tcase_add_loop_test(t, loop_kernel_every_instruction, 0, 2);
    tcase_add_test(t, chain_check_rejects);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    /* The suites choose ISAs and threads themselves. */
    unsetenv("FRAMEJIT_ISA");
    unsetenv("FRAMEJIT_THREADS");
    return fjt_run_suite(suite());
}
