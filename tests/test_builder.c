/* test_builder.c: the builder's frame, register pools, calls, labels, stack
 * slots and constants, checked by running what it builds. */
#include <check.h>
#include <framejit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fjtest.h"
#include "kernels/builder/builder_int.h"

static fj_runtime *rt;
static fj_isa isas[2];
static int nisa;

static fj_runtime *make_rt(fj_isa isa) {
    fj_options o;
    fj_options_init(&o);
    o.isa = isa;
    o.verify = 1;
    fj_runtime *r = NULL;
    ck_assert_msg(fj_runtime_create(&o, &r) == FJ_OK, "%s", fj_last_error());
    return r;
}

/* Every kernel also passes the every-instruction unwinding check. */
static void check_traced(fj_kernel *k, const int64_t a[6]) {
    fjt_check_traced(fj_kernel_entry(k), fj_kernel_name(k), a);
}

static fj_kernel *finish(fj_builder *b) {
    fj_kernel *k = NULL;
    fj_status s = fj_builder_finish(b, &k);
    ck_assert_msg(s == FJ_OK, "finish: %s: %s", fj_status_str(s), fj_last_error());
    return k;
}

/* Calls fn(a0..a5) with known values in the caller's callee-saved
 * registers and checks they survive: a kernel that forgot to restore one
 * would be caught here, not by luck. */
__attribute__((noinline)) static int64_t call_checked(void *fn, const int64_t a[6], int *ok) {
    static const uint64_t want[FJT_NCSR] = {0x1111, 0x1212, 0x1313, 0x1414, 0x1515};
    uint64_t after[FJT_NCSR];
    int64_t ret = (int64_t)fjt_call_csr(fn, want, after, (uint64_t)a[0], (uint64_t)a[1],
                                        (uint64_t)a[2], (uint64_t)a[3], (uint64_t)a[4],
                                        (uint64_t)a[5]);
    *ok = memcmp(after, want, sizeof want) == 0;
    return ret;
}

/* All 14 GPRs handed out (callee-saved ones included), each loaded with a
 * distinct value, summed: exercises the pool and the save/restore. */
START_TEST(all_gprs_sum) {
    for (int t = 0; t < nisa; t++) {
        rt = make_rt(isas[t]);
        fj_builder *b;
        ck_assert(fj_builder_create(rt, "t_all_gprs", 0, &b) == FJ_OK);
        fj_reg r[14];
        for (int i = 0; i < 14; i++) {
            r[i] = fj_gpr(b);
            ck_assert_uint_ne(r[i].id, 0);
            fj_emit(b, FJ_MOV, fj_r64(r[i]), fj_imm((int64_t)(i + 1) << 20));
        }
        fj_reg extra = fj_gpr(b); /* the 15th: rbp and rsp are never in the pool */
        ck_assert_uint_eq(extra.id, 0);
        fj_builder_destroy(b);

        ck_assert(fj_builder_create(rt, "t_all_gprs", 0, &b) == FJ_OK);
        for (int i = 0; i < 14; i++) {
            r[i] = fj_gpr(b);
            fj_emit(b, FJ_MOV, fj_r64(r[i]), fj_imm((int64_t)(i + 1) << 20));
        }
        for (int i = 1; i < 14; i++) fj_emit(b, FJ_ADD, fj_r64(r[0]), fj_r64(r[i]));
        fj_return(b, fj_r64(r[0]));
        fj_kernel *k = finish(b);
        int64_t a[6] = {0};
        int ok;
        int64_t got = call_checked(fj_kernel_entry(k), a, &ok);
        ck_assert_int_eq(got, (int64_t)105 << 20);
        ck_assert_msg(ok, "callee-saved registers not restored");
        check_traced(k, a);
        fj_runtime_destroy(rt);
    }
}
END_TEST

/* A C function that clobbers every caller-saved register it may. */
__attribute__((noinline)) static int64_t clobber(int64_t a, int64_t b2, int64_t c, int64_t d,
                                                 int64_t e, int64_t f) {
    __asm__ volatile("mov $-1, %%rax; mov $-1, %%rcx; mov $-1, %%rdx; mov $-1, %%rsi\n\t"
                     "mov $-1, %%rdi; mov $-1, %%r8; mov $-1, %%r9; mov $-1, %%r10\n\t"
                     "mov $-1, %%r11; vpcmpeqd %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vpcmpeqd %%ymm1, %%ymm1, %%ymm1; vpcmpeqd %%ymm7, %%ymm7, %%ymm7\n\t"
                     "vpcmpeqd %%ymm15, %%ymm15, %%ymm15"
                     ::: "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11",
                       "xmm0", "xmm1", "xmm7", "xmm15", "memory");
    /* Order-sensitive, so swapped arguments are caught (unsigned: a is a
     * pointer, and the sum may wrap). */
    return (int64_t)((uint64_t)a * 1 + (uint64_t)b2 * 10 + (uint64_t)c * 100 +
                     (uint64_t)d * 1000 + (uint64_t)e * 10000 + (uint64_t)f * 100000);
}

/* Live GPRs and vectors survive fj_call; arguments are passed in reverse
 * order of the kernel's own, which needs a correct parallel move. */
START_TEST(call_preserves_and_passes) {
    for (int t = 0; t < nisa; t++) {
        rt = make_rt(isas[t]);
        fj_builder *b;
        ck_assert(fj_builder_create(rt, "t_call", 6, &b) == FJ_OK);
        fj_reg a[6];
        for (int i = 0; i < 6; i++) a[i] = fj_arg(b, i);
        fj_reg keep[7];
        for (int i = 0; i < 7; i++) {
            keep[i] = fj_gpr(b);
            fj_emit(b, FJ_MOV, fj_r64(keep[i]), fj_imm(1000 + i));
        }
        fj_reg v = fj_vreg(b);
        fj_emit(b, FJ_VBROADCASTSS, fj_vec(b, v), fj_const_f32(b, 2.5f));
        fj_reg res = fj_gpr(b); /* 6 args + 7 + 1: all 14, callee-saved ones too */
        fj_opnd args[6];
        for (int i = 0; i < 6; i++) args[i] = fj_r64(a[5 - i]);
        fj_call(b, (const void *)clobber, args, 6, res);
        /* out = a0 (a pointer we also passed): store v there, then sum. */
        fj_emit(b, FJ_VMOVUPS, fj_mem(0, a[0], 0), fj_vec(b, v));
        for (int i = 0; i < 7; i++) fj_emit(b, FJ_ADD, fj_r64(res), fj_r64(keep[i]));
        fj_return(b, fj_r64(res));
        fj_kernel *k = finish(b);
        float out[16] = {0};
        int64_t in[6] = {(int64_t)(uintptr_t)out, 1, 2, 3, 4, 5};
        int ok;
        int64_t got = call_checked(fj_kernel_entry(k), in, &ok);
        uint64_t want = (uint64_t)in[5] * 1 + (uint64_t)in[4] * 10 + (uint64_t)in[3] * 100 +
                        (uint64_t)in[2] * 1000 + (uint64_t)in[1] * 10000 +
                        (uint64_t)in[0] * 100000;
        for (int i = 0; i < 7; i++) want += 1000 + (uint64_t)i;
        ck_assert_uint_eq((uint64_t)got, want);
        ck_assert(ok);
        check_traced(k, in);
        int lanes = isas[t] == FJ_ISA_AVX512 ? 16 : 8;
        for (int i = 0; i < lanes; i++) ck_assert_float_eq(out[i], 2.5f);
        fj_runtime_destroy(rt);
    }
}
END_TEST

/* Loops with backward rel8 and rel32 jumps and a forward exit, a stack
 * slot, and an immediate argument to a call. */
static int64_t seen;
static void note(int64_t v) { seen = v; }

START_TEST(labels_slots_consts) {
    for (int t = 0; t < nisa; t++) {
        rt = make_rt(isas[t]);
        for (int big = 0; big < 2; big++) {
            fj_builder *b;
            ck_assert(fj_builder_create(rt, "t_loop", 1, &b) == FJ_OK);
            fj_reg n = fj_arg(b, 0), acc = fj_gpr(b);
            fj_opnd slot = fj_stack_slot(b, 8, 8, 64);
            fj_emit(b, FJ_XOR, fj_r32(acc), fj_r32(acc));
            fj_emit(b, FJ_MOV, slot, fj_imm(7));
            fj_label top = fj_label_new(b), out = fj_label_new(b);
            fj_label_bind(b, top);
            fj_emit(b, FJ_TEST, fj_r64(n), fj_r64(n));
            fj_emit(b, FJ_JE, fj_lbl(out));
            fj_emit(b, FJ_ADD, fj_r64(acc), fj_r64(n));
            /* Padding that forces the backward jump to need rel32. */
            for (int i = 0; big && i < 40; i++) fj_emit(b, FJ_ADD, fj_r64(acc), fj_imm(0));
            fj_emit(b, FJ_DEC, fj_r64(n));
            fj_emit(b, FJ_JMP, fj_lbl(top));
            fj_label_bind(b, out);
            fj_emit(b, FJ_ADD, fj_r64(acc), slot);
            fj_opnd arg = fj_imm(4242);
            fj_call(b, (const void *)note, &arg, 1, (fj_reg){0});
            fj_return(b, fj_r64(acc));
            fj_kernel *k = finish(b);
            int64_t in[6] = {100};
            int ok;
            seen = 0;
            ck_assert_int_eq(call_checked(fj_kernel_entry(k), in, &ok), 5050 + 7);
            ck_assert(ok);
            ck_assert_int_eq(seen, 4242);
            in[0] = 5;
            check_traced(k, in);
            fj_kernel_release(k);
        }
        fj_runtime_destroy(rt);
    }
}
END_TEST


/* kb_align_next: the loop's head lands congruent to the asked remainder
 * whatever the prologue (callee-saved registers used) and the code before
 * it, and the kernel computes and unwinds as without; a bad modulus is
 * the builder's error. The head is found by its marker instruction. */
START_TEST(aligned_loop_head) {
    static const uint8_t mark[8] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
    static const unsigned want[3][2] = {{32, 16}, {64, 8}, {16, 0}};
    for (int t = 0; t < nisa; t++) {
        rt = make_rt(isas[t]);
        for (int w = 0; w < 3; w++)
            for (int extra = 0; extra < 9; extra += 4)
                for (int lead = 0; lead < 20; lead += 3) {
                    fj_builder *b;
                    ck_assert(fj_builder_create(rt, "t_align", 1, &b) == FJ_OK);
                    fj_reg n = fj_arg(b, 0), acc = fj_gpr(b), mk = fj_gpr(b), x[8];
                    fj_emit(b, FJ_XOR, fj_r32(acc), fj_r32(acc));
                    for (int i = 0; i < extra; i++) {
                        x[i] = fj_gpr(b);
                        fj_emit(b, FJ_MOV, fj_r64(x[i]), fj_imm(i));
                        fj_emit(b, FJ_ADD, fj_r64(acc), fj_r64(x[i]));
                    }
                    for (int i = 0; i < lead; i++) fj_emit(b, FJ_ADD, fj_r64(acc), fj_imm(1));
                    kb_align_next(b, want[w][0], want[w][1]);
                    fj_label top = fj_label_new(b);
                    fj_label_bind(b, top);
                    fj_emit(b, FJ_MOV, fj_r64(mk), fj_imm((int64_t)0x1122334455667788));
                    fj_emit(b, FJ_ADD, fj_r64(acc), fj_r64(n));
                    fj_emit(b, FJ_DEC, fj_r64(n));
                    fj_emit(b, FJ_JNE, fj_lbl(top));
                    fj_return(b, fj_r64(acc));
                    fj_kernel *k = finish(b);
                    const uint8_t *code = fj_kernel_entry(k), *at = NULL;
                    for (size_t i = 0; i + 10 <= 512 && !at; i++)
                        if (!memcmp(code + i + 2, mark, 8)) at = code + i;
                    ck_assert_msg(at != NULL, "marker not found");
                    ck_assert_msg((uintptr_t)at % want[w][0] == want[w][1],
                                  "loop head at %lu mod %u, want %u (extra %d, lead %d)",
                                  (unsigned long)((uintptr_t)at % want[w][0]), want[w][0],
                                  want[w][1], extra, lead);
                    int64_t in[6] = {10};
                    int ok;
                    int64_t sum = extra * (extra - 1) / 2 + lead + 55;
                    ck_assert_int_eq(call_checked(fj_kernel_entry(k), in, &ok), sum);
                    ck_assert(ok);
                    in[0] = 3;
                    check_traced(k, in);
                    fj_kernel_release(k);
                }
        fj_builder *b;
        ck_assert(fj_builder_create(rt, "t_align_bad", 1, &b) == FJ_OK);
        kb_align_next(b, 48, 16);
        fj_return(b, fj_imm(0));
        fj_kernel *k = NULL;
        ck_assert(fj_builder_finish(b, &k) != FJ_OK);
        ck_assert_msg(strstr(fj_last_error(), "align") != NULL, "%s", fj_last_error());
        ck_assert(k == NULL);
        fj_runtime_destroy(rt);
    }
}
END_TEST

/* Deliberately bad kernels, built through the builder's raw-bytes test
 * hook: finish must refuse each with FJ_ERR_VERIFY and say why. */
START_TEST(verifier_rejects_bad_kernels) {
    static const struct {
        const char *what;
        uint8_t bytes[8];
        size_t n;
        const char *why;   /* part of the expected message */
    } bad[] = {
        {"mov rbp, rax", {0x48, 0x89, 0xc5}, 3, "rbp"},
        {"xor ebp, ebp", {0x31, 0xed}, 2, "rbp"},
        {"lea rbp, [rax+8]", {0x48, 0x8d, 0x68, 0x08}, 4, "rbp"},
        {"mov bpl, al", {0x40, 0x88, 0xc5}, 3, "rbp"},
        {"pop rbp", {0x5d}, 1, "rbp"},
        {"ret in the body", {0xc3}, 1, "ret"},
    };
    rt = make_rt(isas[0]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_builder *b;
        ck_assert(fj_builder_create(rt, "t_bad", 1, &b) == FJ_OK);
        fj_reg r = fj_gpr(b);
        fj_emit(b, FJ_MOV, fj_r64(r), fj_imm(1));
        kb_test_raw(b, bad[i].bytes, bad[i].n);
        fj_return(b, fj_r64(r));
        fj_kernel *k = NULL;
        fj_status s = fj_builder_finish(b, &k);
        ck_assert_msg(s == FJ_ERR_VERIFY, "%s: got %s (%s)", bad[i].what, fj_status_str(s),
                      fj_last_error());
        ck_assert_ptr_null(k);
        ck_assert_msg(strstr(fj_last_error(), bad[i].why) && strstr(fj_last_error(), "t_bad"),
                      "%s: message '%s'", bad[i].what, fj_last_error());
    }
    /* The runtime is still fine afterwards. */
    fj_builder *b;
    ck_assert(fj_builder_create(rt, "t_good", 0, &b) == FJ_OK);
    fj_return(b, fj_imm(5));
    fj_kernel *k = finish(b);
    ck_assert_int_eq(((int64_t(*)(void))fj_kernel_entry(k))(), 5);
    fj_runtime_destroy(rt);
}
END_TEST

/* FRAMEJIT_DUMP=DIR: each finished kernel is also written as an ELF .o
 * that objdump disassembles; an unwritable DIR never breaks the kernel. */
START_TEST(dump_dir) {
    char dir[] = "/tmp/fjdumpXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (int bad = 0; bad < 2; bad++) {
        char where[96];
        snprintf(where, sizeof where, "%s%s", dir, bad ? "/missing/sub" : "");
        setenv("FRAMEJIT_DUMP", where, 1);
        rt = make_rt(isas[0]);
        unsetenv("FRAMEJIT_DUMP");
        fj_builder *b;
        ck_assert(fj_builder_create(rt, "t_dumped", 0, &b) == FJ_OK);
        fj_return(b, fj_imm(9));
        fj_kernel *k = finish(b);
        ck_assert_int_eq(((int64_t(*)(void))fj_kernel_entry(k))(), 9);
        fj_runtime_destroy(rt);
    }
    char path[160], cmd[256], line[256];
    snprintf(path, sizeof path, "%s/t_dumped.0.o", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "no %s", path);
    unsigned char magic[4] = {0};
    ck_assert_uint_eq(fread(magic, 1, 4, f), 4);
    fclose(f);
    ck_assert(magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F');
    snprintf(cmd, sizeof cmd, "objdump -d '%s' 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    int named = 0, pushes = 0;
    while (p && fgets(line, sizeof line, p)) {
        named += strstr(line, "<t_dumped>:") != NULL;
        pushes += strstr(line, "push") && strstr(line, "rbp");
    }
    int rc = p ? pclose(p) : -1;
    if (rc == 0) { /* objdump present: it must see the symbol and the prologue */
        ck_assert_int_eq(named, 1);
        ck_assert_int_eq(pushes, 1);
    }
    unlink(path);
    rmdir(dir);
}
END_TEST

/* An instruction whose CPU feature the runtime may not use is refused on
 * every emit path: register and memory forms, the first time and from the
 * forms the encoder keeps (vpdpbusd needs VNNI, switched off here). */
START_TEST(disabled_feature_refused) {
    if (isas[0] != FJ_ISA_AVX512) return;
    for (int pass = 0; pass < 2; pass++) {
        for (int form = 0; form < 3; form++) {
            fj_options o;
            fj_options_init(&o);
            o.isa = FJ_ISA_AVX512;
            o.threads = 1;
            o.cpu_disable = pass ? FJ_CPU_NO_VNNI : 0;
            fj_runtime *r;
            ck_assert(fj_runtime_create(&o, &r) == FJ_OK);
            fj_builder *b;
            ck_assert(fj_builder_create(r, "t_vnni", 1, &b) == FJ_OK);
            fj_reg p = fj_arg(b, 0), v0 = fj_vreg(b), v1 = fj_vreg(b), v2 = fj_vreg(b);
            fj_emit(b, FJ_VXORPS, fj_zmm(v0), fj_zmm(v0), fj_zmm(v0));
            fj_emit(b, FJ_VXORPS, fj_zmm(v1), fj_zmm(v1), fj_zmm(v1));
            fj_emit(b, FJ_VXORPS, fj_zmm(v2), fj_zmm(v2), fj_zmm(v2));
            for (int rep = 0; rep < 2; rep++) {
                if (form == 0) fj_emit(b, FJ_VPDPBUSD, fj_zmm(v0), fj_zmm(v1), fj_zmm(v2));
                if (form == 1) fj_emit(b, FJ_VPDPBUSD, fj_zmm(v0), fj_zmm(v1), fj_mem(512, p, 64));
                if (form == 2)
                    fj_emit(b, FJ_VPDPBUSD, fj_zmm(v0), fj_zmm(v1), fj_bcst(fj_mem(32, p, 4)));
            }
            fj_return(b, fj_imm(0));
            fj_kernel *k = NULL;
            fj_status st = fj_builder_finish(b, &k);
            int has = __builtin_cpu_supports("avx512vnni");
            if (pass || !has) ck_assert_msg(st != FJ_OK, "form %d: vpdpbusd accepted without VNNI", form);
            else ck_assert_msg(st == FJ_OK, "form %d: %s", form, fj_last_error());
            if (k) fj_kernel_release(k);
            fj_runtime_destroy(r);
        }
    }
}
END_TEST

int main(void) {
    fj_runtime *probe;
    if (fj_runtime_create(NULL, &probe) == FJ_OK) {
        if (fj_runtime_isa(probe) == FJ_ISA_AVX512) isas[nisa++] = FJ_ISA_AVX512;
        fj_runtime_destroy(probe);
    }
    isas[nisa++] = FJ_ISA_AVX2;
    Suite *s = suite_create("builder");
    TCase *tc = tcase_create("run");
    tcase_add_test(tc, all_gprs_sum);
    tcase_add_test(tc, call_preserves_and_passes);
    tcase_add_test(tc, labels_slots_consts);
    tcase_add_test(tc, aligned_loop_head);
    tcase_add_test(tc, verifier_rejects_bad_kernels);
    tcase_add_test(tc, dump_dir);
    tcase_add_test(tc, disabled_feature_refused);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
