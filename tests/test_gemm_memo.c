/* test_gemm_memo.c: GEMM state kept between calls: the thread's plan memo
 * and its kernel references (shapes repeated, alpha/beta changed,
 * runtimes replaced, threads and runtimes churned), the C updates a
 * kernel is made with, and packing-buffer allocation failures. */
/* The build defines FJ_TEST for test programs, which would mangle the
 * builder's FJ_TEST enumerator (framejit/builder.h). */
#undef FJ_TEST

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"
#include "gemmcase.h"
#include "runtime/prims/gemm_int.h"
#include "runtime/rt.h"

/* One fj_gemm_f32 call of t (NN) on rt, checked against the reference;
 * what (n bytes) gets the case's description for the caller's messages. */
static void gemm_checked(fj_runtime *rt, const gcase *t, char *what, size_t n) {
    case_str(t, what, n);
    gbufs g;
    bufs_make(t, &g);
    fj_status s = fj_gemm_f32(rt, 'N', 'N', t->m, t->n, t->k, t->alpha, g.a, t->lda, g.b, t->ldb,
                              t->beta, g.c, t->ldc);
    ck_assert_msg(s == FJ_OK, "%s: %s", what, fj_last_error());
    check_result(t, &g, g.c, NULL, 0, 0, 0, what);
    bufs_free(&g);
}

/* The same shape again and again (plans are remembered per thread): alpha
 * and beta change between calls, runtimes of either ISA alternate, and a
 * runtime is replaced by one of the other ISA (maybe at the same address). */
START_TEST(repeat_shapes) {
    seed(8);
    fj_runtime *rt[2] = {fjt_runtime(FJ_ISA_AVX2, 1), fjt_runtime(FJ_ISA_AVX512, 1)};
    static const int64_t dims[][3] = {{16, 16, 16}, {32, 32, 32}, {7, 33, 5}, {64, 64, 64}};
    for (int round = 0; round < 3; round++) {
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int rep = 0; rep < 6; rep++) {
                fj_runtime *r = rt[rep & 1] ? rt[rep & 1] : rt[0];
                gcase t = {.m = dims[d][0], .n = dims[d][1], .k = dims[d][2],
                           .alpha = rep % 3 ? 1.0f : -0.5f, .beta = rep >= 3 ? 1.0f : 0.0f};
                t.lda = t.k;
                t.ldb = t.n;
                t.ldc = t.n;
                char what[256];
                gemm_checked(r, &t, what, sizeof what);
            }
        /* Handles of whole-tile shapes (one kernel call per panel) with
         * bias and an activation. */
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            gcase t = {.m = dims[d][0], .n = dims[d][1], .k = dims[d][2], .alpha = 0.75f,
                       .beta = round == 1 ? 0.5f : 0.0f};
            t.lda = t.k;
            t.ldb = t.n;
            t.ldc = t.n;
            handle_case(rt[0], NULL, &t, 1, FJ_ELT_RELU, 0.0f, 0.0f);
            if (rt[1]) handle_case(rt[1], NULL, &t, round != 1, FJ_ELT_TANH, 0.0f, 0.0f);
        }
        /* Swap the ISAs: the new runtimes may reuse the old addresses. */
        int avx2_first = round & 1;
        fj_runtime_destroy(rt[0]);
        fj_runtime_destroy(rt[1]);
        rt[0] = fjt_runtime(avx2_first ? FJ_ISA_AVX2 : FJ_ISA_AVX512, 1);
        rt[1] = fjt_runtime(avx2_first ? FJ_ISA_AVX512 : FJ_ISA_AVX2, 1);
        if (!rt[0]) rt[0] = fjt_runtime(FJ_ISA_AVX2, 1);
    }
    fj_runtime_destroy(rt[0]);
    fj_runtime_destroy(rt[1]);
}
END_TEST

/* One runtime, one whole-tile shape (the kernel called straight from the
 * entry point with the arguments kept in the plan), alpha and beta changed
 * from call to call: each call must run with its own alpha and beta, the
 * C lanes it reads and the C update it asks for (the plan's kept
 * arguments follow them). */
START_TEST(repeat_whole_alpha_beta) {
    seed(9);
    static const float ab[][2] = {{1, 0},   {1, 1}, {0.5f, 0}, {1, 0},    {-2, 0.25f},
                                  {1, 1},   {1, 0}, {0, 1},    {1, -1.5f}, {1, 0}};
    static const int64_t dims[][3] = {{32, 32, 32}, {16, 16, 16}, {24, 48, 7}};
    for (int isa = 0; isa < 2; isa++) {
        fj_runtime *rt = fjt_runtime(isa ? FJ_ISA_AVX2 : FJ_ISA_AVX512, 1);
        if (!rt) continue;
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int round = 0; round < 2; round++)
                for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++) {
                    gcase t = {.m = dims[d][0], .n = dims[d][1], .k = dims[d][2],
                               .alpha = ab[i][0], .beta = ab[i][1]};
                    t.lda = t.k;
                    t.ldb = t.n;
                    t.ldc = t.n;
                    char what[256];
                    gemm_checked(rt, &t, what, sizeof what);
                    const gemm_plan *p = gemm_plan_repeat(rt, KG_DT_F32, 0, 0, t.m, t.n, t.k, t.lda, t.ldb,
                                                          t.ldc, t.alpha, t.beta);
                    ck_assert_msg(p && p->whole, "%s: not a whole plan", what);
                }
        fj_runtime_destroy(rt);
    }
}
END_TEST

/* A call repeating the shape of the thread's last one skips the size
 * checks (the shape was valid), never the rest: NULL operands and bad
 * trans characters still fail, C untouched, and the next good call
 * computes. */
START_TEST(repeat_still_checks) {
    seed(12);
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    gcase t = {.m = 32, .n = 32, .k = 32, .alpha = 1.0f, .lda = 32, .ldb = 32, .ldc = 32};
    gbufs g;
    bufs_make(&t, &g);
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(fj_gemm_f32(rt, 'N', 'N', 32, 32, 32, 1.0f, g.a, 32, g.b, 32, 0.0f, g.c,
                                     32),
                         FJ_OK);
        check_result(&t, &g, g.c, NULL, 0, 0, 0, "repeat_still_checks");
        memcpy(g.c, g.c0, g.nc * sizeof(float));
        FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 32, 32, 32, 1.0f, NULL, 32, g.b, 32, 0.0f,
                                       g.c, 32));
        FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 32, 32, 32, 1.0f, g.a, 32, NULL, 32, 0.0f,
                                       g.c, 32));
        FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 32, 32, 32, 1.0f, g.a, 32, g.b, 32, 0.0f,
                                       NULL, 32));
        FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'X', 'N', 32, 32, 32, 1.0f, g.a, 32, g.b, 32, 0.0f,
                                       g.c, 32));
        FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 32, 32, 32, 1.0f, g.a, 31, g.b, 32, 0.0f,
                                       g.c, 32));
        ck_assert_msg(!memcmp(g.c, g.c0, g.nc * sizeof(float)), "C written by a failed call");
    }
    bufs_free(&g);
    fj_runtime_destroy(rt);
}
END_TEST

/* A kernel has only the C updates its plan calls it with (alpha = 1 and
 * beta = 0: C = acc; k blocks after the first: C += acc; otherwise
 * alpha*acc + beta*C). A shape called again with another alpha/beta gets a
 * kernel with both kinds, so alternating calls settle on one kernel: the
 * second round of the same calls generates nothing. */
static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

START_TEST(store_kinds) {
    seed(11);
    static const float ab[][2] = {{1, 0}, {1, 1}, {0.5f, 0}, {1, 0}, {1, 1}, {-2, 0.25f}, {1, 0}};
    for (int isa = 0; isa < 2; isa++)
        for (int deep = 0; deep < 2; deep++) {
            fj_runtime *rt = fjt_runtime(isa ? FJ_ISA_AVX2 : FJ_ISA_AVX512, 1);
            if (!rt) continue;
            /* deep: three k blocks (k 90 in blocks of 32). */
            gcase t = {.m = 37, .n = 45, .k = deep ? 90 : 29, .tune = deep ? "kc=32" : NULL};
            t.lda = t.k + 3;
            t.ldb = t.n + 1;
            t.ldc = t.n + 2;
            gemm_test_tune(t.tune);
            for (int round = 0; round < 2; round++)
                for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++) {
                    t.alpha = ab[i][0];
                    t.beta = ab[i][1];
                    char what[256];
                    gemm_checked(rt, &t, what, sizeof what);
                    const char *name = fj_kernel_name(rt->kernels); /* the newest */
                    if (round == 0 && i == 0)
                        ck_assert_msg(ends_with(name, deep ? "_set_add" : "_set"), "%s: %s",
                                      what, name);
                    if (round == 0 && i == 2) /* all three: no suffix */
                        ck_assert_msg(ends_with(name, isa ? "_avx2" : "_avx512"), "%s: %s",
                                      what, name);
                }
            /* set, set_add, all (deep: set_add, all) */
            uint64_t made = atomic_load(&rt->kc_misses);
            ck_assert_msg(made == (deep ? 2u : 3u), "deep %d: %llu kernels made", deep,
                          (unsigned long long)made);
            gemm_test_tune(NULL);
            fj_runtime_destroy(rt);
        }
}
END_TEST

/* References held beyond the kernel table's own one, over all of rt's
 * kernels (only GEMM runs on these runtimes: no pinned eltwise slots). */
static long extra_refs(fj_runtime *rt) {
    long n = 0;
    pthread_mutex_lock(&rt->lock);
    for (struct fj_kernel *k = rt->kernels; k; k = k->next) n += atomic_load(&k->refs) - 1;
    pthread_mutex_unlock(&rt->lock);
    return n;
}

static void small_gemm(fj_runtime *rt, int64_t m, int64_t n, int64_t k) {
    gcase t = {.m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f, .lda = k, .ldb = n, .ldc = n};
    gbufs g;
    bufs_make(&t, &g);
    fj_status s = fj_gemm_f32(rt, 'N', 'N', m, n, k, 1.0f, g.a, k, g.b, n, 0.0f, g.c, n);
    ck_assert_msg(s == FJ_OK, "%s", fj_last_error());
    check_result(&t, &g, g.c, NULL, 0, 0, 0, "small_gemm");
    bufs_free(&g);
}

static void *gemm_thread(void *rt) {
    small_gemm(rt, 32, 32, 32);
    return NULL;
}

/* fj_gemm_f32 keeps its last kernel per thread (no table lookup on a
 * repeat): exactly one extra reference per thread, dropped when the thread
 * exits, moved when it calls another runtime, never touched once its
 * runtime is gone. */
START_TEST(memo_refs) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX512, 1);
    if (!rt) rt = fjt_runtime(FJ_ISA_AVX2, 1);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, gemm_thread, rt), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(extra_refs(rt), 0);
    small_gemm(rt, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt), 1);
    small_gemm(rt, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt), 1);
    small_gemm(rt, 7, 33, 5);
    ck_assert_int_eq(extra_refs(rt), 1);
    /* A handle of the memo's shape holds its own reference. */
    fj_gemm_desc d = {.transa = 'N', .transb = 'N', .m = 7, .n = 33, .k = 5, .lda = 5,
                      .ldb = 33, .ldc = 33, .alpha = 1.0f};
    fj_gemm *h;
    ck_assert_int_eq(fj_gemm_create(rt, &d, &h), FJ_OK);
    ck_assert_int_eq(extra_refs(rt), 2);
    fj_gemm_destroy(h);
    ck_assert_int_eq(extra_refs(rt), 1);
    /* Another runtime: the memo moves there. */
    fj_runtime *rt2 = fjt_runtime(FJ_ISA_AVX2, 1);
    small_gemm(rt2, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt), 0);
    ck_assert_int_eq(extra_refs(rt2), 1);
    /* Its runtime destroyed under it: the memo is dropped without a touch
     * (ASan would see one), including by a runtime made at its address. */
    fj_runtime_destroy(rt2);
    rt2 = fjt_runtime(FJ_ISA_AVX2, 1);
    small_gemm(rt2, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt2), 1);
    fj_runtime_destroy(rt2);
    small_gemm(rt, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt), 1);
    fj_runtime_destroy(rt);
}
END_TEST

/* Held kernels keep their arenas from eviction: a runtime whose cache
 * has room for few arenas lets one memo hold a kernel; another thread's
 * calls then look their kernel up each time (and still compute right). */
static pthread_barrier_t hold_bar;

static void *hold_thread(void *rt) {
    small_gemm(rt, 32, 32, 32);
    pthread_barrier_wait(&hold_bar); /* holding */
    pthread_barrier_wait(&hold_bar); /* main has checked */
    return NULL;
}

START_TEST(memo_hold_limit) {
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    o.cache_bytes = 64 << 10;
    fj_runtime *rt = NULL;
    ck_assert_int_eq(fj_runtime_create(&o, &rt), FJ_OK);
    pthread_barrier_init(&hold_bar, NULL, 2);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, hold_thread, rt), 0);
    pthread_barrier_wait(&hold_bar);
    ck_assert_int_eq(extra_refs(rt), 1);
    for (int i = 0; i < 3; i++) {
        small_gemm(rt, 16, 16, 16); /* the limit: lent for the call, given back */
        ck_assert_int_eq(extra_refs(rt), 1);
    }
    pthread_barrier_wait(&hold_bar);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(extra_refs(rt), 0);
    small_gemm(rt, 24, 16, 16); /* a new plan may hold again */
    ck_assert_int_eq(extra_refs(rt), 1);
    pthread_barrier_destroy(&hold_bar);
    fj_runtime_destroy(rt);
}
END_TEST

/* Threads that call fj_gemm_f32 on a shared runtime and on runtimes of
 * their own, made and destroyed as they go (their memos move between
 * runtimes, some of them dead): right results, and once the threads are
 * gone no reference is left on the shared runtime's kernels. */
static fj_runtime *memo_shared;

static void *memo_churn(void *arg) {
    int id = (int)(intptr_t)arg;
    seed(100 + (uint64_t)id);
    for (int it = 0; it < 12; it++) {
        fj_runtime *own = fjt_runtime(FJ_ISA_AUTO, 1);
        int64_t d = 8 + (id * 7 + it * 5) % 40;
        small_gemm(memo_shared, d, d + 3, d);
        small_gemm(own, d, d, d + 1);
        if (it % 3 == 0) fj_runtime_destroy(own);
        small_gemm(memo_shared, 16, 16, 16);
        if (it % 3 != 0) fj_runtime_destroy(own);
    }
    return NULL;
}

START_TEST(memo_threads) {
    memo_shared = fjt_runtime(FJ_ISA_AUTO, 1);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, memo_churn, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    ck_assert_int_eq(extra_refs(memo_shared), 0);
    fj_runtime_destroy(memo_shared);
}
END_TEST

/* Two threads making and destroying runtimes side by side: code
 * addresses are never reused, so the code moves on through the address
 * space; libunwind's tables must stay within 32-bit offsets of it (they
 * once ran out of room after ~150 runtimes a thread). */
static void *churn_thread(void *arg) {
    (void)arg;
    seed(91);
    for (int i = 0; i < 400; i++) {
        fj_runtime *r = fjt_runtime(FJ_ISA_AUTO, 1);
        small_gemm(r, 8, 8, 8);
        fj_runtime_destroy(r);
    }
    return NULL;
}

START_TEST(runtime_churn) {
    pthread_t th[2];
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, churn_thread, NULL), 0);
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
}
END_TEST

/* Packing buffers are the thread's, made on its first GEMM that needs
 * them. A failure there, or in any other allocation of the call, is an
 * error and C is left as it was; the next call computes. Each size runs
 * on a new thread (no buffer yet), after a warm call on this one (the
 * kernel exists): the fault fires on the thread's first, second, ...
 * allocation until a call succeeds, and one of the failures must have
 * been the buffer's. */
typedef struct scratch_case {
    fj_runtime *rt;
    int64_t n;
    int fault;
} scratch_case;

static void *scratch_thread(void *arg) {
    const scratch_case *sc = arg;
    gcase t = {.m = sc->n, .n = sc->n, .k = sc->n, .alpha = 1.0f, .beta = 0.5f,
               .lda = sc->n + 3, .ldb = sc->n + 1, .ldc = sc->n + 5};
    seed(77 + (uint64_t)sc->n);
    gbufs g;
    bufs_make(&t, &g);
    int packing = 0;
    fj_status s = FJ_ERR_NO_MEMORY;
    for (long countdown = 0; countdown < 64 && s != FJ_OK; countdown++) {
        fj_test_fault_inject(sc->fault, countdown);
        s = fj_gemm_f32(sc->rt, 'N', 'N', t.m, t.n, t.k, t.alpha, g.a, t.lda, g.b, t.ldb,
                        t.beta, g.c, t.ldc);
        fj_test_fault_inject(sc->fault, -1);
        if (s == FJ_OK) break;
        ck_assert_msg(s == FJ_ERR_NO_MEMORY, "%s", fj_last_error());
        packing |= strstr(fj_last_error(), "packing") != NULL;
        ck_assert_msg(memcmp(g.c, g.c0, g.nc * sizeof(float)) == 0,
                      "C written by a call that failed: %s", fj_last_error());
    }
    ck_assert_msg(s == FJ_OK, "%s", fj_last_error());
    ck_assert(packing);
    check_result(&t, &g, g.c, NULL, 0, 0, 0, "scratch after failed allocations");
    bufs_free(&g);
    return NULL;
}

START_TEST(scratch_fault) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    /* Packing buffers of ~600 and ~50 KiB. */
    const scratch_case cases[] = {{rt, 300, FJ_FAULT_ALLOC}, {rt, 100, FJ_FAULT_ALLOC}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* The thread's call exactly (beta too: it picks the kernel), so
         * that the thread makes no kernel: which of a kernel's allocations
         * fail quietly (the profiling image's) is not this test's concern. */
        gcase t = {.m = cases[i].n, .n = cases[i].n, .k = cases[i].n, .alpha = 1.0f,
                   .beta = 0.5f, .lda = cases[i].n + 3, .ldb = cases[i].n + 1,
                   .ldc = cases[i].n + 5};
        gbufs g;
        bufs_make(&t, &g);
        ck_assert_int_eq(fj_gemm_f32(rt, 'N', 'N', t.m, t.n, t.k, t.alpha, g.a, t.lda, g.b, t.ldb,
                                     t.beta, g.c, t.ldc),
                         FJ_OK);
        bufs_free(&g);
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, scratch_thread, (void *)&cases[i]), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
    }
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("gemm_memo");
    TCase *tc = tcase_create("gemm_memo");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, repeat_shapes);
    tcase_add_test(tc, repeat_still_checks);
    tcase_add_test(tc, repeat_whole_alpha_beta);
    tcase_add_test(tc, store_kinds);
    tcase_add_test(tc, memo_refs);
    tcase_add_test(tc, memo_threads);
    tcase_add_test(tc, memo_hold_limit);
    tcase_add_test(tc, runtime_churn);
    tcase_add_test(tc, scratch_fault);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
