/* test_codecache_rt.c: Check suite for the runtime's kernel cache on top of
 * the code cache: one generation per key under concurrency, eviction that
 * never frees a kernel in use, fj_cache_stats_get, FJ_ERR_CACHE_FULL, and
 * fault injection through whole create/place/evict/destroy cycles. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codecache/cc.h"
#include "fjtest.h"
#include "runtime/kcache.h"
#include "runtime/rt.h"

/* ---- a tiny kernel: returns val * loops, optionally padded ---- */

typedef struct tiny {
    uint32_t val, loops, pad;
} tiny;

static atomic_long gen_calls;
static atomic_int gen_sleep_ms;
static const uint8_t zeros[8192];

static void tiny_gen(fj_builder *b, const void *ctx) {
    const tiny *t = ctx;
    atomic_fetch_add(&gen_calls, 1);
    int ms = atomic_load(&gen_sleep_ms);
    if (ms) {
        struct timespec ts = {0, (long)ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    fj_reg acc = fj_gpr(b), n = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(acc), fj_imm(0));
    fj_emit(b, FJ_MOV, fj_r32(n), fj_imm(t->loops ? t->loops : 1));
    fj_label top = fj_label_new(b);
    fj_label_bind(b, top);
    fj_emit(b, FJ_ADD, fj_r64(acc), fj_imm(t->val));
    fj_emit(b, FJ_DEC, fj_r32(n));
    fj_emit(b, FJ_JNE, fj_lbl(top));
    if (t->pad) { /* a constant pool of pad zero bytes, read once */
        fj_reg x = fj_gpr(b);
        fj_emit(b, FJ_MOV, fj_r32(x), fj_const_data(b, zeros, t->pad, 64, 32));
        fj_emit(b, FJ_ADD, fj_r64(acc), fj_r64(x));
    }
    fj_return(b, fj_r64(acc));
}

static uint64_t expect(const tiny *t) { return (uint64_t)t->val * (t->loops ? t->loops : 1); }

static fj_status get(fj_runtime *rt, const tiny *t, fj_kernel **k) {
    char name[48];
    snprintf(name, sizeof name, "tiny_%u_%u", t->val, t->pad);
    return fj_test_kernel_get(rt, t, sizeof *t, name, 0, tiny_gen, t, k);
}

static uint64_t run(fj_kernel *k) { return ((uint64_t(*)(void))fj_kernel_entry(k))(); }

static fj_runtime *make_rt(size_t cache_bytes) {
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    o.cache_bytes = cache_bytes;
    fj_runtime *rt = NULL;
    fj_status st = fj_runtime_create(&o, &rt);
    ck_assert_msg(st == FJ_OK, "fj_runtime_create: %s", fj_last_error());
    return rt;
}

static fj_cache_stats stats(fj_runtime *rt) {
    fj_cache_stats s;
    ck_assert_int_eq(fj_cache_stats_get(rt, &s), FJ_OK);
    return s;
}

/* ---- dedup: N threads ask for the same key at once ---- */

enum { NT = 8 };
static pthread_barrier_t bar;
typedef struct dedup_arg {
    fj_runtime *rt;
    const tiny *t;
    fj_kernel *k;
    fj_status st;
    uint64_t got;
} dedup_arg;

static void *dedup_thread(void *p) {
    dedup_arg *a = p;
    pthread_barrier_wait(&bar);
    a->st = get(a->rt, a->t, &a->k);
    if (a->st == FJ_OK) a->got = run(a->k);
    return NULL;
}

START_TEST(test_dedup_threads) {
    fj_runtime *rt = make_rt(0);
    ck_assert_int_eq(pthread_barrier_init(&bar, NULL, NT), 0);
    for (int round = 0; round < 6; round++) {
        tiny t = {1000u + (uint32_t)round, 3, 0};
        atomic_store(&gen_calls, 0);
        /* A slow generator widens the window in which the others ask. */
        atomic_store(&gen_sleep_ms, round % 2 ? 30 : 0);
        pthread_t th[NT];
        dedup_arg a[NT];
        for (int i = 0; i < NT; i++) {
            a[i] = (dedup_arg){rt, &t, NULL, FJ_ERR_OS, 0};
            ck_assert_int_eq(pthread_create(&th[i], NULL, dedup_thread, &a[i]), 0);
        }
        for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
        ck_assert_int_eq(atomic_load(&gen_calls), 1);
        for (int i = 0; i < NT; i++) {
            ck_assert_int_eq(a[i].st, FJ_OK);
            ck_assert_ptr_eq(a[i].k, a[0].k);
            ck_assert_uint_eq(a[i].got, expect(&t));
            fj_kernel_release(a[i].k);
        }
    }
    atomic_store(&gen_sleep_ms, 0);
    fj_cache_stats s = stats(rt);
    ck_assert_uint_eq(s.misses, 6);
    ck_assert_uint_eq(s.hits, 6 * (NT - 1));
    ck_assert_uint_eq(s.live_kernels, 6);
    pthread_barrier_destroy(&bar);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- stats ---- */

START_TEST(test_stats) {
    fj_runtime *rt = make_rt(0);
    fj_cache_stats s = stats(rt);
    ck_assert_uint_eq(s.hits + s.misses + s.evictions + s.live_kernels + s.bytes_used, 0);
    ck_assert_uint_gt(s.bytes_reserved, 0); /* the first arena */
    tiny t = {5, 1, 0};
    fj_kernel *k1, *k2;
    ck_assert_int_eq(get(rt, &t, &k1), FJ_OK);
    ck_assert_int_eq(get(rt, &t, &k2), FJ_OK);
    ck_assert_ptr_eq(k1, k2);
    s = stats(rt);
    ck_assert_uint_eq(s.misses, 1);
    ck_assert_uint_eq(s.hits, 1);
    ck_assert_uint_eq(s.live_kernels, 1);
    ck_assert_uint_ge(s.bytes_used, fj_kernel_code_size(k1));
    fj_kernel_release(k1);
    fj_kernel_release(k2);
    /* Released, it stays cached. */
    ck_assert_uint_eq(stats(rt).live_kernels, 1);
    ck_assert_int_eq(fj_cache_stats_get(NULL, &s), FJ_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "runtime"));
    ck_assert_int_eq(fj_cache_stats_get(rt, NULL), FJ_ERR_INVALID_ARG);
    fj_kernel *k = (fj_kernel *)1;
    ck_assert_int_eq(fj_test_kernel_get(rt, &t, sizeof t, NULL, 0, tiny_gen, &t, &k),
                     FJ_ERR_INVALID_ARG);
    ck_assert_ptr_null(k);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- eviction through the runtime ---- */

START_TEST(test_evict_runtime) {
    /* 64 KiB: 16 KiB arenas of four ~4 KiB kernels each. */
    fj_runtime *rt = make_rt(64 << 10);
    tiny held_t = {7, 2, 3900};
    fj_kernel *held;
    ck_assert_int_eq(get(rt, &held_t, &held), FJ_OK); /* kept through it all */
    fj_builder *b;
    ck_assert_int_eq(fj_builder_create(rt, "handle", 0, &b), FJ_OK);
    tiny_gen(b, &held_t);
    fj_kernel *handle;
    ck_assert_int_eq(fj_builder_finish(b, &handle), FJ_OK);
    uintptr_t seen_max = 0;
    for (uint32_t i = 0; i < 400; i++) {
        tiny t = {100 + i, 1 + i % 3, 3900};
        fj_kernel *k;
        ck_assert_msg(get(rt, &t, &k) == FJ_OK, "get %u: %s", i, fj_last_error());
        uintptr_t at = (uintptr_t)fj_kernel_entry(k);
        /* Addresses only move forward: an evicted one never comes back. */
        ck_assert_uint_gt(at, seen_max);
        seen_max = at;
        ck_assert_uint_eq(run(k), expect(&t));
        fj_kernel_release(k);
        ck_assert_uint_le(stats(rt).bytes_reserved, 64 << 10);
    }
    fj_cache_stats s = stats(rt);
    ck_assert_uint_gt(s.evictions, 300);
    ck_assert_uint_eq(s.misses, 401);
    ck_assert_uint_eq(run(held), expect(&held_t));
    ck_assert_uint_eq(run(handle), expect(&held_t));
    ck_assert_str_eq(fj_symbolize(fj_kernel_entry(held), NULL), "tiny_7_3900");
    /* A recently used key is still cached; an old one was regenerated.
     * (Not the first keys: they share the held kernels' arena.) */
    tiny last = {100 + 399, 1 + 399 % 3, 3900}, first = {100 + 20, 1 + 20 % 3, 3900};
    fj_kernel *k;
    atomic_store(&gen_calls, 0);
    ck_assert_int_eq(get(rt, &last, &k), FJ_OK);
    ck_assert_int_eq(atomic_load(&gen_calls), 0);
    fj_kernel_release(k);
    ck_assert_int_eq(get(rt, &first, &k), FJ_OK);
    ck_assert_int_eq(atomic_load(&gen_calls), 1);
    ck_assert_uint_eq(run(k), expect(&first));
    fj_kernel_release(k);
    fj_kernel_release(held);
    fj_kernel_release(handle);
    fj_runtime_destroy(rt);
}
END_TEST

START_TEST(test_cache_full) {
    fj_runtime *rt = make_rt(64 << 10);
    fj_kernel *ks[64];
    int n = 0;
    fj_status st = FJ_OK;
    /* Hold everything: eventually nothing can be evicted. */
    for (; n < 64; n++) {
        tiny t = {(uint32_t)n, 1, 3900};
        st = get(rt, &t, &ks[n]);
        if (st != FJ_OK) break;
    }
    ck_assert_int_eq(st, FJ_ERR_CACHE_FULL);
    ck_assert_ptr_null(ks[n]);
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "cache_bytes"));
    ck_assert_int_gt(n, 8);
    for (int i = 0; i < n; i++) ck_assert_uint_eq(run(ks[i]), (uint64_t)i);
    ck_assert_uint_eq(stats(rt).evictions, 0);
    /* The failed key left nothing behind: it can be asked for again. */
    for (int i = 0; i < n; i++) fj_kernel_release(ks[i]);
    tiny t = {(uint32_t)n, 1, 3900};
    fj_kernel *k;
    ck_assert_int_eq(get(rt, &t, &k), FJ_OK);
    ck_assert_uint_eq(run(k), (uint64_t)n);
    ck_assert_uint_gt(stats(rt).evictions, 0);
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- fault injection through whole cycles ---- */

/* 1 if the fault armed for cls with countdown n is still pending (did not
 * fire): then it fires within n + 1 more checks. */
static int fault_pending(int cls, long n) {
    for (long i = 0; i <= n; i++)
        if (fj_fault_hit(cls)) return 1;
    return 0;
}

static long failures_seen;

/* st failed: it must say so, and the same call must then work. */
static void check_failure(fj_status st, const char *what, int cls) {
    ck_assert_msg(st != FJ_OK, "%s", what);
    ck_assert_msg(strlen(fj_last_error()) > 0, "%s failed without a message", what);
    fj_test_fault_inject(cls, -1);
    failures_seen++;
}

/* One create / place (with eviction) / release / destroy cycle. Any step
 * may fail once (the injected fault); it is then retried and must work. */
static void cycle(int cls) {
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    o.cache_bytes = 32 << 10;
    fj_runtime *rt = NULL;
    /* mprotect is only used by anonymous arenas: make the memfd probe
     * fail so that the cache falls back to them. */
    if (cls == FJ_FAULT_MPROTECT) {
        setenv("FRAMEJIT_CODE_FILE", "0", 1);
        fj_test_fault_inject(FJ_FAULT_FILE, 0);
    }
    fj_status st = fj_runtime_create(&o, &rt);
    if (cls == FJ_FAULT_MPROTECT) {
        fj_test_fault_inject(FJ_FAULT_FILE, -1);
        unsetenv("FRAMEJIT_CODE_FILE");
    }
    if (st != FJ_OK) {
        ck_assert_ptr_null(rt);
        check_failure(st, "fj_runtime_create", cls);
        ck_assert_int_eq(fj_runtime_create(&o, &rt), FJ_OK);
    }
    fj_kernel *keep = NULL;
    /* Two 16 KiB arenas of five kernels each: the last ones evict. */
    for (uint32_t i = 0; i < 14; i++) {
        tiny t = {i + 1, 2, 3000};
        fj_kernel *k = NULL;
        st = get(rt, &t, &k);
        if (st != FJ_OK) {
            ck_assert_ptr_null(k);
            check_failure(st, "kernel get", cls);
            ck_assert_msg(get(rt, &t, &k) == FJ_OK, "retry: %s", fj_last_error());
        }
        ck_assert_uint_eq(run(k), expect(&t));
        if (i == 3) keep = k;
        else fj_kernel_release(k);
    }
    fj_builder *b;
    st = fj_builder_create(rt, "handle", 0, &b);
    if (st != FJ_OK) {
        check_failure(st, "fj_builder_create", cls);
        ck_assert_int_eq(fj_builder_create(rt, "handle", 0, &b), FJ_OK);
    }
    tiny t = {9, 1, 0};
    tiny_gen(b, &t);
    fj_kernel *h = NULL;
    st = fj_builder_finish(b, &h);
    if (st != FJ_OK) {
        check_failure(st, "fj_builder_finish", cls);
        ck_assert_int_eq(fj_builder_create(rt, "handle", 0, &b), FJ_OK);
        tiny_gen(b, &t);
        ck_assert_int_eq(fj_builder_finish(b, &h), FJ_OK);
    }
    ck_assert_uint_eq(run(h), 9);
    ck_assert_uint_eq(run(keep), expect(&(tiny){4, 2, 3000}));
    fj_cache_stats s = stats(rt);
    ck_assert_uint_gt(s.evictions, 0);
    fj_kernel_release(h);
    fj_kernel_release(keep);
    fj_runtime_destroy(rt);
}

static void fault_sweep(int cls) {
    char detail[512];
    long n;
    failures_seen = 0;
    for (n = 0; n < 5000; n++) {
        fj_test_fault_inject(cls, n);
        cycle(cls);
        int pending = fault_pending(cls, n);
        fj_test_fault_inject(cls, -1);
        ck_assert_msg(!fjt_maps_has_wx(detail, sizeof detail), "W+X after fault %ld: %s", n,
                      detail);
        if (pending) break; /* the cycle makes fewer than n + 1 such calls */
    }
    ck_assert_msg(n > 0 && n < 5000, "sweep of class %d: %ld", cls, n);
    fprintf(stderr, "fault class %d: %ld injection points, %ld reported failures\n", cls, n,
            failures_seen);
}

START_TEST(test_fault_alloc) { fault_sweep(FJ_FAULT_ALLOC); }
END_TEST
START_TEST(test_fault_mmap) { fault_sweep(FJ_FAULT_MMAP); }
END_TEST
START_TEST(test_fault_mprotect) { fault_sweep(FJ_FAULT_MPROTECT); }
END_TEST
START_TEST(test_fault_file) { fault_sweep(FJ_FAULT_FILE); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("codecache_rt");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, test_dedup_threads);
    tcase_add_test(t, test_stats);
    tcase_add_test(t, test_evict_runtime);
    tcase_add_test(t, test_cache_full);
    tcase_add_test(t, test_fault_alloc);
    tcase_add_test(t, test_fault_mmap);
    tcase_add_test(t, test_fault_mprotect);
    tcase_add_test(t, test_fault_file);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    return fjt_run_suite(suite());
}
