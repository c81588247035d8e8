/* test_codecache_hot.c: Check suite for kernels' loops kept within one page:
 * cc_place_hot at every line of a page on each backing, its argument
 * checks, and the runtime's kernels (the builder finds their loops). */
#include <check.h>
#include <framejit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codecache/cc.h"
#include "codecache/cc_impl.h"
#include "fjtest.h"

typedef int (*kfn)(void);

/* len bytes of int3 led by mov eax, v; ret. */
static uint8_t *code_of(size_t len, uint32_t v) {
    uint8_t *b = malloc(len);
    ck_assert_ptr_nonnull(b);
    memset(b, 0xcc, len);
    b[0] = 0xb8;
    memcpy(b + 1, &v, 4);
    b[5] = 0xc3;
    return b;
}

static cc_cache *make(int code_file, int anon) {
    cc_config cfg = {.capacity = 64u << 20, .code_file = code_file};
    cc_cache *c = NULL;
    if (anon) fj_test_fault_inject(FJ_FAULT_FILE, 0);
    fj_status st = cc_create(&cfg, &c);
    if (anon) fj_test_fault_inject(FJ_FAULT_FILE, -1);
    ck_assert_msg(st == FJ_OK, "cc_create: %s", fj_last_error());
    if (anon) ck_assert_str_eq(cc_backing(c), "anonymous");
    return c;
}

static size_t up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* A filler of every multiple of a line up to a page, then a 1500-byte
 * kernel whose bytes 300-1400 are hot: with cc_place_hot the range never
 * crosses a page, the kernel starts where the rule says (its sequential
 * place, or on so that the range starts the next page), the bytes skipped
 * are int3 and it runs; cc_place of the same kernels crosses in some. */
static void every_line(int code_file) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), len = 1500, lo = 300, hi = 1400;
    for (int hot = 0; hot < 2; hot++) {
        cc_cache *c = make(code_file, 0);
        int moved = 0, crossed = 0;
        for (size_t fill = CC_ALIGN; fill <= page; fill += CC_ALIGN) {
            uint8_t *f = code_of(fill, 1), *k = code_of(len, 2);
            cc_entry *fe = NULL, *ke = NULL;
            ck_assert_int_eq(cc_place(c, f, fill, "filler", &fe), FJ_OK);
            fj_status st = hot ? cc_place_hot(c, k, len, lo, hi, "hot", &ke)
                               : cc_place(c, k, len, "plain", &ke);
            ck_assert_msg(st == FJ_OK, "place: %s", fj_last_error());
            const uintptr_t seq = fe->start + up(fill, CC_ALIGN), s = ke->start;
            const int cross = (seq + lo) / page != (seq + hi - 1) / page;
            crossed += (s + lo) / page != (s + hi - 1) / page;
            if (ke->arena_lo == fe->arena_lo) {
                uintptr_t want = hot && cross ? up((seq + hi - 1) / page * page - lo, CC_ALIGN) : seq;
                ck_assert_msg(s == want, "filler %zu: kernel at +%#lx, want +%#lx", fill,
                              (unsigned long)(s - ke->arena_lo), (unsigned long)(want - ke->arena_lo));
                size_t bad = 0;
                for (uintptr_t p = seq; p < s; p++) bad += *(const uint8_t *)p != 0xcc;
                ck_assert_msg(bad == 0, "filler %zu: %zu skipped bytes are not int3", fill, bad);
                moved += s != seq;
            }
            ck_assert_int_eq(s % CC_ALIGN, 0);
            ck_assert_msg(memcmp((const void *)s, k, len) == 0, "filler %zu: bytes differ", fill);
            ck_assert_int_eq(((kfn)s)(), 2);
            ck_assert_int_eq(((kfn)fe->start)(), 1);
            free(f);
            free(k);
        }
        if (hot) {
            ck_assert_int_eq(crossed, 0);
            ck_assert_int_gt(moved, 0);
        } else {
            ck_assert_int_gt(crossed, 0); /* the placements above do cross without it */
        }
        cc_destroy(c);
    }
}

START_TEST(hot_file) { every_line(1); }
END_TEST
START_TEST(hot_memfd) { every_line(0); }
END_TEST

/* A range that is not one of the kernel's bytes is the caller's error; one
 * longer than a page less a line cannot be kept and is placed as without;
 * an anonymous arena starts the kernel on a page. */
START_TEST(hot_args) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    cc_cache *c = make(1, 0);
    uint8_t *k = code_of(2 * page, 3);
    cc_entry *e = NULL;
    ck_assert_int_eq(cc_place_hot(c, k, 100, 10, 101, "past", &e), FJ_ERR_INVALID_ARG);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(fj_last_error(), "past") != NULL, "%s", fj_last_error());
    ck_assert_int_eq(cc_place_hot(c, k, 100, 50, 50, "empty", &e), FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(cc_place_hot(c, k, 100, 60, 40, "reversed", &e), FJ_ERR_INVALID_ARG);
    cc_entry *a = NULL, *b = NULL;
    ck_assert_int_eq(cc_place(c, k, 70, "a", &a), FJ_OK);
    ck_assert_int_eq(cc_place_hot(c, k, 2 * page, 0, page - CC_ALIGN + 1, "long", &b), FJ_OK);
    ck_assert_uint_eq(b->start, a->start + 2 * CC_ALIGN);
    ck_assert_int_eq(((kfn)b->start)(), 3);
    cc_destroy(c);
    c = make(0, 1);
    ck_assert_int_eq(cc_place(c, k, 70, "a", &a), FJ_OK);
    ck_assert_int_eq(cc_place_hot(c, k, 2 * page, page - 100, page + 100, "anon", &b), FJ_OK);
    ck_assert_uint_eq(b->start % page, 0);
    ck_assert_int_eq(((kfn)b->start)(), 3);
    cc_destroy(c);
    free(k);
}
END_TEST

/* ---- the runtime's kernels ---- */

static const uint8_t head_mark[8] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
static const uint8_t end_mark[8] = {0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11};

static const uint8_t *find(const uint8_t *from, size_t n, const uint8_t m[8]) {
    for (size_t i = 0; i + 10 <= n; i++)
        if (!memcmp(from + i + 2, m, 8)) return from + i;
    return NULL;
}

typedef int64_t (*fn1)(int64_t);

/* A kernel of `lead` adds, then a loop of `body` adds run n times (the
 * first argument), marked at its head and just after its backward jump:
 * returns lead + n * body. */
static fj_kernel *loop_kernel(fj_runtime *rt, int lead, int body) {
    fj_builder *b;
    ck_assert(fj_builder_create(rt, "t_loop_page", 1, &b) == FJ_OK);
    fj_reg n = fj_arg(b, 0), acc = fj_gpr(b), mk = fj_gpr(b);
    fj_emit(b, FJ_XOR, fj_r32(acc), fj_r32(acc));
    for (int i = 0; i < lead; i++) fj_emit(b, FJ_ADD, fj_r64(acc), fj_imm(1));
    fj_label top = fj_label_new(b);
    fj_label_bind(b, top);
    fj_emit(b, FJ_MOV, fj_r64(mk), fj_imm((int64_t)0x1122334455667788));
    for (int i = 0; i < body; i++) fj_emit(b, FJ_ADD, fj_r64(acc), fj_imm(1));
    fj_emit(b, FJ_DEC, fj_r64(n));
    fj_emit(b, FJ_JNE, fj_lbl(top));
    fj_emit(b, FJ_MOV, fj_r64(mk), fj_imm((int64_t)0x1112131415161718));
    fj_return(b, fj_r64(acc));
    fj_kernel *k = NULL;
    fj_status s = fj_builder_finish(b, &k);
    ck_assert_msg(s == FJ_OK, "finish: %s", fj_last_error());
    return k;
}

/* Kernels after leads of every few lines: each loop of ~1.2 KiB (the
 * builder's backward jump to its head) sits within one page, and a loop
 * longer than a page is placed and runs as well. Each kernel computes and
 * is single-stepped through (the every-instruction check). */
START_TEST(runtime_loops) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 1);
    for (int lead = 0; lead < 1100; lead += 37) {
        fj_kernel *k = loop_kernel(rt, lead, 300);
        const uint8_t *code = fj_kernel_entry(k);
        const size_t n = fj_kernel_code_size(k);
        const uint8_t *h = find(code, n, head_mark), *e = find(code, n, end_mark);
        ck_assert_msg(h && e && e > h, "markers not found");
        ck_assert_msg((uintptr_t)h / page == (uintptr_t)(e - 1) / page,
                      "lead %d: loop at %#lx-%#lx crosses a page", lead, (unsigned long)h,
                      (unsigned long)e);
        ck_assert_int_eq(((fn1)code)(4), lead + 4 * 300);
        fjt_check_traced(fj_kernel_entry(k), fj_kernel_name(k), (const int64_t[6]){3});
        fj_kernel_release(k);
    }
    fj_kernel *k = loop_kernel(rt, 5, 1500);
    ck_assert_int_eq(((fn1)fj_kernel_entry(k))(2), 5 + 2 * 1500);
    fjt_check_traced(fj_kernel_entry(k), fj_kernel_name(k), (const int64_t[6]){3});
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
}
END_TEST

int main(void) {
    Suite *s = suite_create("codecache_hot");
    TCase *t = tcase_create("hot");
    tcase_add_test(t, hot_file);
    tcase_add_test(t, hot_memfd);
    tcase_add_test(t, hot_args);
    tcase_add_test(t, runtime_loops);
    suite_add_tcase(s, t);
    return fjt_run_suite(s);
}
