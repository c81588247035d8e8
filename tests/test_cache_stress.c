/* test_cache_stress.c: the managed code cache under load, watched by
 * profilers. Eight threads acquire, run and release random cached kernels
 * at a capacity that forces constant eviction, while a SIGPROF timer per
 * thread interrupts them and the handler unwinds with libunwind and libgcc
 * from the signal context whenever the pc is inside a kernel; a checker
 * thread scans /proc/self/maps for writable+executable mappings.
 * FRAMEJIT_STRESS_SECONDS sets the duration (default 10).
 *
 * Also: libunwind's stale trace cache, reproduced with raw stubs at a
 * reused address, and shown not to bite framejit, whose code addresses
 * are never reused. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fjtest.h"
#include "runtime/kcache.h"
#include "unwindinfo/uw.h"
#include "unwindinfo/uw_object.h"

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

/* ThreadSanitizer delivers signals late (at its next safe point), so the
 * interrupted context no longer matches what the thread is doing: there
 * the handler only counts, and the kernels are short so that eviction
 * still happens a lot in the time given. All-arenas-held can then occur
 * with the smaller cache and is tolerated. */
#if defined(__SANITIZE_THREAD__)
#define STRESS_TSAN 1
enum { LOOPS = 100, CACHE_BYTES = 96 << 10 };
#else
#define STRESS_TSAN 0
enum { LOOPS = 100000, CACHE_BYTES = 256 << 10 }; /* 16 KiB arenas, ~4000 kernels */
#endif

/* ---- the kernels: key -> val * loops ---- */

typedef struct skey {
    uint32_t val, loops;
} skey;

static void skey_gen(fj_builder *b, const void *ctx) {
    const skey *k = ctx;
    fj_reg acc = fj_gpr(b), n = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(acc), fj_imm(0));
    fj_emit(b, FJ_MOV, fj_r32(n), fj_imm(k->loops));
    fj_label top = fj_label_new(b);
    fj_label_bind(b, top);
    fj_emit(b, FJ_ADD, fj_r64(acc), fj_imm(k->val));
    fj_emit(b, FJ_DEC, fj_r32(n));
    fj_emit(b, FJ_JNE, fj_lbl(top));
    fj_return(b, fj_r64(acc));
}

static void skey_name(const skey *k, char *buf, size_t n) {
    snprintf(buf, n, "stress_%u_%u", k->val, k->loops);
}

/* The kernel's direct caller: every walk from inside a kernel must reach
 * it right after the kernel frame. noinline, no tail call. */
__attribute__((noinline)) static uint64_t stress_marker(void *fn) {
    uint64_t r = ((uint64_t(*)(void))fn)();
    __asm__ volatile("" ::: "memory");
    return r;
}

/* ---- per-thread state the SIGPROF handler reads ---- */

enum { NTHREADS = 8, NKEYS = 6000, MAXF = 64 };

typedef struct tstate {
    atomic_long runs, wrong, full, errors;
    atomic_long samples, kernel_samples, lu_bad, gcc_bad, name_bad;
    char first_bad[768];
    atomic_int has_bad;
} tstate;

static tstate ts[NTHREADS];
static _Thread_local tstate *my;
static _Thread_local const char *volatile cur_name; /* the kernel this thread runs */
static fjt_range marker_range;
static atomic_int stop;
static fj_runtime *g_rt;

static void note_bad(const char *why) {
    if (atomic_exchange(&my->has_bad, 1)) return;
    size_t n = strlen(why);
    if (n >= sizeof my->first_bad) n = sizeof my->first_bad - 1;
    memcpy(my->first_bad, why, n);
    my->first_bad[n] = 0;
}

static void on_prof(int sig, siginfo_t *si, void *uc_) {
    (void)sig;
    (void)si;
    if (!my) return;
    int saved = errno;
    ucontext_t *uc = uc_;
    atomic_fetch_add_explicit(&my->samples, 1, memory_order_relaxed);
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    /* Only pcs inside a kernel are unwound: there the thread holds no
     * unwinder or allocator lock of its own. */
    const char *name = fj_symbolize((const void *)pc, NULL);
    if (!name || STRESS_TSAN) goto out;
    atomic_fetch_add_explicit(&my->kernel_samples, 1, memory_order_relaxed);
    const char *want = cur_name;
    if (!want || strcmp(name, want) != 0) {
        atomic_fetch_add_explicit(&my->name_bad, 1, memory_order_relaxed);
        note_bad("pc symbolized to a kernel this thread is not running");
        goto out;
    }
    fjt_frame f[MAXF];
    char why[512];
    int n = fjt_walk_libunwind(uc, f, MAXF);
    if (n <= 0 || fjt_chain_check(f, n, want, 0, &marker_range, 1, 1, why, sizeof why) < 0) {
        atomic_fetch_add_explicit(&my->lu_bad, 1, memory_order_relaxed);
        note_bad(n <= 0 ? "libunwind: no frames" : why);
    }
    n = fjt_walk_libgcc(f, MAXF);
    if (n <= 0 || fjt_chain_check(f, n, want, 0, &marker_range, 1, 1, why, sizeof why) < 0) {
        atomic_fetch_add_explicit(&my->gcc_bad, 1, memory_order_relaxed);
        note_bad(n <= 0 ? "libgcc: no frames" : why);
    }
out:
    errno = saved;
}

static void *worker(void *arg) {
    my = &ts[(intptr_t)arg];
    /* A CPU-time timer of this thread, signalling this thread. */
    timer_t tm;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
    int have_timer = timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &tm) == 0;
    if (have_timer) {
        struct itimerspec its = {{0, 997000}, {0, 997000}};
        timer_settime(tm, 0, &its, NULL);
    }
    unsigned seed = 12345u + (unsigned)(intptr_t)arg * 7919u;
    char name[48];
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint32_t key = (uint32_t)rand_r(&seed) % NKEYS;
        skey k = {key * 2654435761u % 1000003u + 1, LOOPS + key % LOOPS};
        skey_name(&k, name, sizeof name);
        fj_kernel *kern;
        fj_status st = fj_test_kernel_get(g_rt, &k, sizeof k, name, 0, skey_gen, &k, &kern);
        if (st == FJ_ERR_CACHE_FULL) {
            atomic_fetch_add(&my->full, 1);
            continue;
        }
        if (st != FJ_OK) {
            atomic_fetch_add(&my->errors, 1);
            char m[300];
            snprintf(m, sizeof m, "acquire: %s", fj_last_error());
            note_bad(m);
            continue;
        }
        cur_name = name;
        uint64_t r = stress_marker(fj_kernel_entry(kern));
        cur_name = NULL;
        if (r != (uint64_t)k.val * k.loops) atomic_fetch_add(&my->wrong, 1);
        atomic_fetch_add_explicit(&my->runs, 1, memory_order_relaxed);
        fj_kernel_release(kern);
    }
    if (have_timer) timer_delete(tm);
    return NULL;
}

static atomic_long wx_scans, wx_found;
static char wx_detail[512];

static void *wx_checker(void *arg) {
    (void)arg;
    char d[512];
    while (!atomic_load(&stop)) {
        if (fjt_maps_has_wx(d, sizeof d) && !atomic_fetch_add(&wx_found, 1))
            memcpy(wx_detail, d, sizeof d);
        atomic_fetch_add(&wx_scans, 1);
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    return NULL;
}

START_TEST(test_stress) {
    char err[256];
    ck_assert_msg(fjt_unwind_load(err, sizeof err), "%s", err);
    ck_assert(fjt_fn_range((const void *)stress_marker, &marker_range));
    fjt_frame warm[MAXF];
    fjt_walk_libunwind(NULL, warm, MAXF); /* first calls allocate: not in a handler */
    fjt_walk_libgcc(warm, MAXF);
    int secs = 10;
    const char *e = getenv("FRAMEJIT_STRESS_SECONDS");
    if (e && atoi(e) > 0) secs = atoi(e);

    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    o.cache_bytes = CACHE_BYTES; /* the keys need more */
    ck_assert_int_eq(fj_runtime_create(&o, &g_rt), FJ_OK);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);

    atomic_store(&stop, 0);
    memset(ts, 0, sizeof ts);
    pthread_t th[NTHREADS], chk;
    ck_assert_int_eq(pthread_create(&chk, NULL, wx_checker, NULL), 0);
    for (intptr_t i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker, (void *)i), 0);
    struct timespec t = {secs, 0};
    while (nanosleep(&t, &t) != 0) {
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    pthread_join(chk, NULL);
    signal(SIGPROF, SIG_IGN);

    fj_cache_stats cs;
    ck_assert_int_eq(fj_cache_stats_get(g_rt, &cs), FJ_OK);
    long runs = 0, wrong = 0, full = 0, errors = 0, samples = 0, ksamples = 0, lu = 0, gcc = 0,
         nb = 0;
    for (int i = 0; i < NTHREADS; i++) {
        runs += ts[i].runs, wrong += ts[i].wrong, full += ts[i].full, errors += ts[i].errors;
        samples += ts[i].samples, ksamples += ts[i].kernel_samples;
        lu += ts[i].lu_bad, gcc += ts[i].gcc_bad, nb += ts[i].name_bad;
    }
    fprintf(stderr,
            "stress %ds: %ld runs, %llu hits, %llu misses, %llu evictions, %llu live kernels, "
            "%zu bytes reserved; %ld samples, %ld in kernels (libunwind bad %ld, libgcc bad "
            "%ld, name bad %ld); %ld maps scans; %ld cache full\n",
            secs, runs, (unsigned long long)cs.hits, (unsigned long long)cs.misses,
            (unsigned long long)cs.evictions, (unsigned long long)cs.live_kernels,
            cs.bytes_reserved, samples, ksamples, lu, gcc, nb, (long)atomic_load(&wx_scans), full);
    for (int i = 0; i < NTHREADS; i++)
        if (ts[i].has_bad) fprintf(stderr, "thread %d: %s\n", i, ts[i].first_bad);
    ck_assert_int_eq(wrong, 0);
    ck_assert_int_eq(errors, 0);
    if (!STRESS_TSAN) ck_assert_int_eq(full, 0);
    ck_assert_int_eq(lu + gcc + nb, 0);
    ck_assert_msg(atomic_load(&wx_found) == 0, "W+X mapping: %s", wx_detail);
    ck_assert_int_gt(runs, 0);
    ck_assert_uint_gt(cs.evictions, 0);
    ck_assert_uint_le(cs.bytes_reserved, o.cache_bytes + (64 << 10));
    fj_runtime_destroy(g_rt);
    g_rt = NULL;
}
END_TEST

/* ======================================================================
 * libunwind's trace cache and reused code addresses
 * ==================================================================== */

static int (*unw_bt)(void **, int);
static void *bt_ips[64];
static int bt_n;

__attribute__((noinline)) static void bt_cb(void) {
    bt_n = unw_bt(bt_ips, 64);
    __asm__ volatile("" ::: "memory");
}

/* Calls stub(cb): the stub's only call is `call *%rdi`. */
__attribute__((noinline)) static void stale_caller(const void *stub) {
    ((void (*)(void (*)(void)))stub)(bt_cb);
    __asm__ volatile("" ::: "memory");
}

/* Whether the last unw_backtrace went from the frame at ret straight to
 * stale_caller (the right chain). */
static int chain_ok(uintptr_t ret, const fjt_range *caller) {
    for (int i = 0; i + 1 < bt_n; i++)
        if ((uintptr_t)bt_ips[i] == ret) return fjt_in_range(caller, (uintptr_t)bt_ips[i + 1]);
    return 0;
}

/* A stub with CFI registered with libunwind, written at addr (fixed if
 * addr != NULL). A: push rbp; mov rbp,rsp; call *rdi; pop rbp; ret.
 * B: push rbp; nop3; call *rdi; pop rbp; ret: the same return address
 * (offset 6), but the CFA there is rsp-based and rbp is the caller's. */
static uint8_t *make_stub(void *addr, int variant, uw_object **reg) {
    static const uint8_t a[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
    static const uint8_t b[] = {0x55, 0x0f, 0x1f, 0x00, 0xff, 0xd7, 0x5d, 0xc3};
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *p = mmap(addr, (size_t)pg, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | (addr ? MAP_FIXED_NOREPLACE : 0), -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    if (addr) ck_assert_ptr_eq(p, addr);
    memcpy(p, variant ? b : a, 8);
    ck_assert_int_eq(mprotect(p, (size_t)pg, PROT_READ | PROT_EXEC), 0);
    uw_rec ra[] = {{1, UW_PUSH_FP, 0, 0}, {4, UW_SET_FP, 0, 0}, {7, UW_POP_FP, 0, 0}};
    uw_rec rb[] = {{1, UW_PUSH_FP, 0, 0}, {7, UW_POP_FP, 0, 0}};
    uw_func f = {.name = variant ? "stub_b" : "stub_a", .start = (uintptr_t)p, .size = 8,
                 .recs = variant ? rb : ra, .nrecs = variant ? 2 : 3};
    ck_assert_int_eq(uw_register(&f, 1, UW_LIBUNWIND, reg), FJ_OK);
    return p;
}

/* A cached kernel that calls bt_cb. */
static void cb_gen(fj_builder *b, const void *ctx) {
    fj_reg none = {0};
    fj_call(b, (const void *)bt_cb, NULL, 0, none);
    fj_return(b, fj_imm(*(const uint32_t *)ctx));
}

START_TEST(test_stale_trace_cache) {
    char err[256];
    ck_assert_msg(fjt_unwind_load(err, sizeof err), "%s", err);
    void *lu = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    ck_assert_ptr_nonnull(lu);
    *(void **)&unw_bt = dlsym(lu, "unw_backtrace");
    ck_assert_ptr_nonnull(unw_bt);
    fjt_range caller;
    ck_assert(fjt_fn_range((const void *)stale_caller, &caller));
    long pg = sysconf(_SC_PAGESIZE);

    /* 1. The hazard: stub A runs and is unwound (libunwind caches how to
     * step out of A at its return address), A is freed, B is written at
     * the same address. unw_backtrace from B reuses A's rule. */
    uw_object *ra, *rb;
    uint8_t *x = make_stub(NULL, 0, &ra);
    stale_caller(x);
    ck_assert_msg(chain_ok((uintptr_t)x + 6, &caller), "stub A: wrong chain");
    uw_deregister(ra);
    munmap(x, (size_t)pg);
    ck_assert_ptr_eq(make_stub(x, 1, &rb), x);
    stale_caller(x);
    int stale = !chain_ok((uintptr_t)x + 6, &caller);
    /* The same walk without the trace cache (unw_step) is right: the CFI
     * registered for B is fine, only the cache is stale. */
    fjt_frame f[64];
    int n = fjt_walk_libunwind(NULL, f, 64);
    ck_assert_int_gt(n, 0);
    uw_deregister(rb);
    munmap(x, (size_t)pg);
    if (stale)
        fprintf(stderr, "reproduced: unw_backtrace gave a wrong chain for a new stub at a reused "
                        "address (libunwind's trace cache kept the old stub's rule)\n");
    else
        fprintf(stderr, "note: this libunwind's unw_backtrace did not reuse the stale rule\n");

    /* 2. framejit: cached kernels evicted and regenerated over and over;
     * every one gets a fresh address, and unw_backtrace from inside each
     * gives the right chain. */
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    o.cache_bytes = 32 << 10;
    fj_runtime *rt;
    ck_assert_int_eq(fj_runtime_create(&o, &rt), FJ_OK);
    enum { N = 3000 };
    uintptr_t *lo = malloc(N * sizeof *lo);
    long bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint32_t key = i % 600; /* keys come back after their kernel was evicted */
        fj_kernel *k;
        ck_assert_int_eq(fj_test_kernel_get(rt, &key, sizeof key, "bt_kernel", 0, cb_gen, &key,
                                            &k), FJ_OK);
        lo[i] = (uintptr_t)fj_kernel_entry(k);
        stale_caller(fj_kernel_entry(k));
        /* The kernel's frame: the return address after its call. */
        int ok = 0;
        for (int j = 0; j + 1 < bt_n; j++)
            if (fj_symbolize(bt_ips[j], NULL)) {
                ok = fjt_in_range(&caller, (uintptr_t)bt_ips[j + 1]);
                break;
            }
        bad += !ok;
        fj_kernel_release(k);
    }
    fj_cache_stats cs;
    ck_assert_int_eq(fj_cache_stats_get(rt, &cs), FJ_OK);
    ck_assert_uint_gt(cs.evictions, 1000);
    ck_assert_int_eq(bad, 0);
    /* Each kernel start is new unless it is the same (still cached)
     * kernel: a start seen before belongs to the same key. */
    for (uint32_t i = 0; i < N; i++)
        for (uint32_t j = i + 1; j < N; j++)
            if (lo[j] == lo[i]) ck_assert_uint_eq(i % 600, j % 600);
    free(lo);
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("cache_stress");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, test_stale_trace_cache);
    tcase_add_test(t, test_stress);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    return fjt_run_suite(suite());
}
