/* test_stitch.c: Check suite for stitching (runtime/stitch_x86_64.S and
 * the pool, invariant 7): a frame-pointer walk from work run through
 * fj_origin_run or on a framejit worker continues into the capturing
 * thread's frames; DWARF unwinders (libgcc, libunwind, backtrace()) stay on
 * the running thread's own stack at every instruction of the trampolines
 * (single-stepped) and from a signal on a worker; worker stacks lie below
 * the main thread's and a later thread's; an embedder's parallel_for gives
 * the same results as framejit's pool. */
#include <check.h>
#include <dirent.h>
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
#include <unistd.h>

#include "fjtest.h"
#include "runtime/pool.h"

int main(void);

enum { NF = 64 };

/* A plain frame-pointer walk that follows rbp across stacks, as perf's
 * does, but only while it points into one of two stacks ([lo1, hi1) and
 * [lo2, hi2)): frames without frame pointers (libcheck's) leave garbage in
 * rbp. Return addresses, at most max. */
static int fp_walk_any(uintptr_t rbp, uintptr_t *out, int max, const uintptr_t st[4]) {
    int n = 0;
    while (n < max && rbp && !(rbp & 7) &&
           ((rbp >= st[0] && rbp + 16 <= st[1]) || (rbp >= st[2] && rbp + 16 <= st[3]))) {
        const uintptr_t *fr = (const uintptr_t *)rbp;
        if (!fr[1]) break;
        out[n++] = fr[1];
        if (fr[0] == rbp) break;
        rbp = fr[0];
    }
    return n;
}

static int has_in(const uintptr_t *ips, int n, const fjt_range *r) {
    for (int i = 0; i < n; i++)
        if (fjt_in_range(r, ips[i])) return 1;
    return 0;
}

static int frames_have(const fjt_frame *f, int n, const fjt_range *r) {
    return fjt_find_frame(f, n, 0, r) >= 0;
}

/* ---- an origin captured on another thread --------------------------- */

typedef struct remote {
    fj_origin o;
    uintptr_t lo, hi;           /* the capturing thread's stack */
    atomic_int ready, release;
} remote;

__attribute__((noipa)) void remote_capturer(remote *r);
__attribute__((noipa)) void remote_capturer(remote *r) {
    fjt_stack_bounds(&r->lo, &r->hi);
    fj_origin_capture(&r->o);
    atomic_store(&r->ready, 1);
    while (!atomic_load(&r->release)) usleep(1000);
    __asm__ volatile("" ::: "memory");
}

static void *remote_thread(void *arg) {
    remote_capturer(arg);
    return NULL;
}

static remote *remote_start(pthread_t *t) {
    remote *r = calloc(1, sizeof *r);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(pthread_create(t, NULL, remote_thread, r), 0);
    while (!atomic_load(&r->ready)) usleep(100);
    return r;
}

static void remote_stop(remote *r, pthread_t t) {
    atomic_store(&r->release, 1);
    pthread_join(t, NULL);
    free(r);
}

/* What a function run under the stitch sees of its stacks. */
typedef struct seen {
    uintptr_t stacks[4];        /* the capturing thread's stack; this one's */
    uintptr_t fp[NF];
    int nfp;
    fjt_frame gcc[NF], lu[NF];
    int ngcc, nlu;
} seen;

__attribute__((noipa)) static void look(void *arg) {
    seen *s = arg;
    fjt_stack_bounds(&s->stacks[2], &s->stacks[3]);
    s->nfp = fp_walk_any((uintptr_t)__builtin_frame_address(0), s->fp, NF, s->stacks);
    s->ngcc = fjt_walk_libgcc(s->gcc, NF);
    s->nlu = fjt_walk_libunwind(NULL, s->lu, NF);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noipa)) void run_here(const fj_origin *o, seen *s);
__attribute__((noipa)) void run_here(const fj_origin *o, seen *s) {
    fj_origin_run(o, look, s);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noipa)) void own_capture_run(seen *s);
__attribute__((noipa)) void own_capture_run(seen *s) {
    fj_origin o;
    fj_origin_capture(&o);
    run_here(&o, s);
    __asm__ volatile("" ::: "memory");
}

START_TEST(origin_run_stitches_fp_only) {
    char err[128];
    ck_assert_msg(fjt_unwind_load(err, sizeof err), "%s", err);
    fjt_range cap, here, rmain, trampoline;
    ck_assert(fjt_fn_range((const void *)remote_capturer, &cap));
    ck_assert(fjt_fn_range((const void *)run_here, &here));
    ck_assert(fjt_fn_range((const void *)main, &rmain));
    ck_assert(fjt_fn_range((const void *)fj_origin_run, &trampoline));
    pthread_t t;
    remote *r = remote_start(&t);
    seen *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    s->stacks[0] = r->lo;
    s->stacks[1] = r->hi;
    run_here(&r->o, s);
    /* Frame pointers: look -> fj_origin_run -> remote_capturer (the other
     * thread), and not this thread's run_here. */
    ck_assert_msg(s->nfp >= 2 && fjt_in_range(&trampoline, s->fp[0]),
                  "rbp walk: first return address is not in fj_origin_run");
    ck_assert_msg(fjt_in_range(&cap, s->fp[1]), "rbp walk: fj_origin_run's next frame is not the "
                  "capturing function");
    ck_assert(!has_in(s->fp, s->nfp, &here));
    /* DWARF: look -> fj_origin_run -> run_here -> ... -> main, never the
     * other thread's frames. */
    for (int u = 0; u < 2; u++) {
        const fjt_frame *f = u ? s->lu : s->gcc;
        int n = u ? s->nlu : s->ngcc;
        const char *who = u ? "libunwind" : "libgcc";
        int k = fjt_find_frame(f, n, 0, &trampoline);
        ck_assert_msg(k >= 0, "%s: no fj_origin_run frame", who);
        ck_assert_msg(k + 1 < n && fjt_in_range(&here, f[k + 1].ip),
                      "%s: fj_origin_run's caller is not run_here", who);
        ck_assert_msg(frames_have(f, n, &rmain), "%s: main not reached", who);
        ck_assert_msg(!frames_have(f, n, &cap), "%s: walked into the capturing thread", who);
    }
    /* On the capturing thread itself: the rbp walk reaches the capturing
     * function (above it, Check's own frames may lack frame pointers). */
    fjt_range own;
    ck_assert(fjt_fn_range((const void *)own_capture_run, &own));
    fjt_stack_bounds(&s->stacks[0], &s->stacks[1]);
    own_capture_run(s);
    ck_assert(s->nfp >= 2 && fjt_in_range(&trampoline, s->fp[0]));
    ck_assert(fjt_in_range(&own, s->fp[1]));
    free(s);
    remote_stop(r, t);
}
END_TEST

/* ---- single-stepping the trampolines --------------------------------- */

#define TF_BIT 0x100

static struct {
    volatile sig_atomic_t on;
    fjt_range tramp, caller, cap, rmain;
    uintptr_t lo, hi;           /* the trampoline being stepped */
    long stops, bad_gcc, bad_lu, leaf_stops;
    uint8_t visited[64];
    char msg[300];
} st;

static void st_fail(const char *who, const char *why) {
    if (!st.msg[0]) snprintf(st.msg, sizeof st.msg, "%s: %s", who, why);
}

/* Checks a DWARF walk from a stop: the trampoline (or the leaf under it)
 * steps to the caller on this thread and on to main, never to the origin's
 * capturing function. */
static int st_check(const fjt_frame *f, int n, int k) {
    if (k < 0) return 0;
    int i = fjt_find_frame(f, n, k, &st.caller);
    if (i < 0) return 0;
    for (int j = k + 1; j < i; j++)
        if (!fjt_in_range(&st.tramp, f[j].ip)) return 0; /* only the trampoline between */
    return fjt_find_frame(f, n, i, &st.rmain) > i && !frames_have(f, n, &st.cap);
}

static void st_handler(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    (void)si;
    ucontext_t *uc = ucv;
    greg_t *g = uc->uc_mcontext.gregs;
    if (!st.on) {
        g[REG_EFL] &= ~(greg_t)TF_BIT;
        return;
    }
    uintptr_t pc = (uintptr_t)g[REG_RIP];
    int in_tramp = pc >= st.lo && pc < st.hi;
    if (!in_tramp) return;
    st.stops++;
    if (pc - st.lo < 64 * 8) st.visited[(pc - st.lo) / 8] |= (uint8_t)(1u << ((pc - st.lo) % 8));
    fjt_frame f[NF];
    int n = fjt_walk_libunwind(uc, f, NF);
    if (n < 1 || f[0].ip != pc || !st_check(f, n, 0)) {
        st.bad_lu++;
        st_fail("libunwind", "walk from the trampoline missed its caller or main");
    }
    n = fjt_walk_libgcc(f, NF);
    int k = -1;
    for (int i = 0; i < n && k < 0; i++)
        if (f[i].ip == pc) k = i;
    if (!st_check(f, n, k)) {
        st.bad_gcc++;
        st_fail("libgcc", "walk from the trampoline missed its caller or main");
    }
}

static void leaf(void *arg) {
    (void)arg;
    __asm__ volatile("" ::: "memory");
}

static void leaf2(void *arg, int64_t i) {
    (void)arg;
    (void)i;
    __asm__ volatile("" ::: "memory");
}

static inline __attribute__((always_inline)) void tf_set(void) {
    __asm__ volatile("lea -128(%%rsp), %%rsp\n\tpushfq\n\torq $0x100, (%%rsp)\n\tpopfq\n\t"
                     "lea 128(%%rsp), %%rsp" ::: "memory", "cc");
}

static inline __attribute__((always_inline)) void tf_clear(void) {
    __asm__ volatile("lea -128(%%rsp), %%rsp\n\tpushfq\n\tandq $-257, (%%rsp)\n\tpopfq\n\t"
                     "lea 128(%%rsp), %%rsp" ::: "memory", "cc");
}

__attribute__((noipa)) void step_caller(const fj_origin *o, int which);
__attribute__((noipa)) void step_caller(const fj_origin *o, int which) {
    tf_set();
    if (which == 0) fj_origin_run(o, leaf, NULL);
    else fj_worker_run(o, leaf2, NULL, 7);
    tf_clear();
    __asm__ volatile("" ::: "memory");
}

/* Loop index 0: fj_origin_run, 1: fj_worker_run. */
START_TEST(trampoline_every_instruction) {
    if (!fjt_can_trace("trampoline_every_instruction")) return;
    char err[128];
    ck_assert_msg(fjt_unwind_load(err, sizeof err), "%s", err);
    memset(&st, 0, sizeof st);
    const void *tr = _i == 0 ? (const void *)fj_origin_run : (const void *)fj_worker_run;
    ck_assert(fjt_fn_range(tr, &st.tramp));
    ck_assert(fjt_fn_range((const void *)step_caller, &st.caller));
    ck_assert(fjt_fn_range((const void *)remote_capturer, &st.cap));
    ck_assert(fjt_fn_range((const void *)main, &st.rmain));
    st.lo = st.tramp.lo;
    st.hi = st.tramp.hi;
    ck_assert(st.hi <= (uintptr_t)rt_stitch_end && st.hi - st.lo < 64);
    pthread_t t;
    remote *r = remote_start(&t);
    fjt_frame warm[NF];
    fjt_walk_libunwind(NULL, warm, NF);
    fjt_walk_libgcc(warm, NF);

    size_t ss_size = 1 << 20;
    void *ss_mem = mmap(NULL, ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(ss_mem != MAP_FAILED);
    stack_t ss = {.ss_sp = ss_mem, .ss_size = ss_size}, old_ss;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = st_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaltstack(&ss, &old_ss);
    sigaction(SIGTRAP, &sa, &old_sa);
    step_caller(&r->o, _i); /* once untraced: the handler clears the flag at once */
    st.on = 1;
    step_caller(&r->o, _i);
    st.on = 0;
    sigaction(SIGTRAP, &old_sa, NULL);
    sigaltstack(&old_ss, NULL);
    munmap(ss_mem, ss_size);
    remote_stop(r, t);

    long distinct = 0;
    for (size_t i = 0; i < sizeof st.visited; i++) distinct += __builtin_popcount(st.visited[i]);
    printf("%s: %ld stops in the trampoline, %ld distinct instructions, libunwind bad %ld, "
           "libgcc bad %ld\n", _i ? "fj_worker_run" : "fj_origin_run", st.stops, distinct,
           st.bad_lu, st.bad_gcc);
    /* push, push, push, mov, the argument moves, call, add, pop, ret */
    ck_assert_int_ge(distinct, _i ? 11 : 10);
    ck_assert_msg(!st.bad_lu && !st.bad_gcc, "%s", st.msg);
}
END_TEST

/* ---- worker stacks lie below the callers' ----------------------------- */

typedef struct where {
    pthread_t caller;
    _Atomic uintptr_t worker_max; /* highest worker stack address seen */
    atomic_int on_worker;
} where;

static void note_stack(void *ctx, int64_t i) {
    (void)i;
    where *w = ctx;
    volatile char here = 0;
    uintptr_t a = (uintptr_t)&here;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL); /* long enough for a worker to join */
    if (pthread_equal(pthread_self(), w->caller)) return;
    atomic_fetch_add(&w->on_worker, 1);
    uintptr_t m = atomic_load(&w->worker_max);
    while (a > m && !atomic_compare_exchange_weak(&w->worker_max, &m, a)) {}
}

typedef struct later {
    uintptr_t local, lo;
} later;

static void *later_thread(void *arg) {
    later *l = arg;
    volatile char here = 0;
    l->local = (uintptr_t)&here;
    uintptr_t hi;
    fjt_stack_bounds(&l->lo, &hi);
    return NULL;
}

START_TEST(worker_stacks_below_callers) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 3);
    where w = {.caller = pthread_self()};
    for (int rep = 0; rep < 200 && atomic_load(&w.on_worker) == 0; rep++)
        rt_parallel(rt, 16, 3, note_stack, &w, 0);
    ck_assert_msg(atomic_load(&w.on_worker) > 0, "no chunk ran on a worker");
    uintptr_t wmax = atomic_load(&w.worker_max);
    volatile char here = 0;
    uintptr_t main_local = (uintptr_t)&here;
    later l;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, later_thread, &l), 0);
    pthread_join(t, NULL);
    printf("worker stack %#lx, main thread %#lx, later thread %#lx (stack from %#lx)\n",
           (unsigned long)wmax, (unsigned long)main_local, (unsigned long)l.local,
           (unsigned long)l.lo);
    ck_assert_msg(wmax < main_local, "a worker's stack is above the main thread's");
    ck_assert_msg(wmax < l.lo, "a worker's stack is above a thread created after the pool");
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- DWARF walks from a signal on a framejit worker ---------------------- */

static struct {
    atomic_int busy;
    fjt_frame f[3][NF];
    int n[3];
} ws;

static void ws_handler(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    (void)si;
    int saved = errno;
    ws.n[0] = fjt_walk_libunwind(ucv, ws.f[0], NF);
    ws.n[1] = fjt_walk_libgcc(ws.f[1], NF);
    ws.n[2] = fjt_walk_backtrace(ws.f[2], NF);
    errno = saved;
    atomic_store(&ws.busy, 0);
}

typedef struct gemm_loop {
    fj_runtime *rt;
    float *a, *b, *c;
    atomic_int stop;
    pid_t worker;
} gemm_loop;

__attribute__((noipa)) void gemm_looper(gemm_loop *g);
__attribute__((noipa)) void gemm_looper(gemm_loop *g) {
    while (!atomic_load(&g->stop))
        fj_gemm_f32(g->rt, 'N', 'N', 256, 256, 256, 1.0f, g->a, 256, g->b, 256, 0.0f, g->c, 256);
    __asm__ volatile("" ::: "memory");
}

static void *gemm_thread(void *arg) {
    gemm_looper(arg);
    return NULL;
}

/* The walk's last frame is in libc (its thread start, clone3). */
static int ends_in_libc(const fjt_frame *f, int n) {
    while (n > 1 && !f[n - 1].ip) n--;
    Dl_info di;
    return n > 0 && dladdr((void *)f[n - 1].ip, &di) && di.dli_fname &&
           strstr(di.dli_fname, "libc.so");
}

START_TEST(worker_signal_walks_stay_on_thread) {
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer defers a signal to a point of its own choosing and
     * runs the handler on a context it made: there is no interrupted worker
     * frame to walk from. The plain and ASan builds run this test. */
    printf("worker_signal_walks_stay_on_thread: skipped under ThreadSanitizer\n");
    return;
#endif
    char err[128];
    ck_assert_msg(fjt_unwind_load(err, sizeof err), "%s", err);
    fjt_range looper, rmain, wrun;
    ck_assert(fjt_fn_range((const void *)gemm_looper, &looper));
    ck_assert(fjt_fn_range((const void *)main, &rmain));
    ck_assert(fjt_fn_range((const void *)fj_worker_run, &wrun));
    gemm_loop *g = calloc(1, sizeof *g);
    ck_assert_ptr_nonnull(g);
    g->rt = fjt_runtime(FJ_ISA_AVX2, 2);
    g->a = calloc(256 * 256, sizeof(float));
    g->b = calloc(256 * 256, sizeof(float));
    g->c = calloc(256 * 256, sizeof(float));
    ck_assert(g->a && g->b && g->c);
    fjt_frame warm[NF];
    fjt_walk_backtrace(warm, NF);
    fjt_walk_libgcc(warm, NF);
    fj_gemm_f32(g->rt, 'N', 'N', 256, 256, 256, 1.0f, g->a, 256, g->b, 256, 0.0f, g->c, 256);
    /* The worker, by name. */
    pid_t worker = 0;
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; !worker && (e = readdir(d));) {
        char path[300], comm[32] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (!f) continue;
        if (fgets(comm, sizeof comm, f) && !strcmp(comm, "fj-worker-1\n")) worker = atoi(e->d_name);
        fclose(f);
    }
    closedir(d);
    ck_assert_msg(worker, "no thread named fj-worker-1");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = ws_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, gemm_thread, g), 0);
    int walks = 0, in_run = 0;
    static const char *names[3] = {"libunwind", "libgcc", "backtrace()"};
    for (int rep = 0; rep < 300 && in_run < 20; rep++) {
        atomic_store(&ws.busy, 1);
        if (syscall(SYS_tgkill, getpid(), worker, SIGUSR2) != 0) break;
        for (int w = 0; w < 200000 && atomic_load(&ws.busy); w++) usleep(10);
        ck_assert_msg(!atomic_load(&ws.busy), "the handler did not finish");
        int all = 1;
        for (int u = 0; u < 3; u++) {
            ck_assert_msg(ends_in_libc(ws.f[u], ws.n[u]), "%s: walk on the worker (%d frames) "
                          "does not end at its thread start", names[u], ws.n[u]);
            ck_assert_msg(!frames_have(ws.f[u], ws.n[u], &looper) &&
                          !frames_have(ws.f[u], ws.n[u], &rmain),
                          "%s: walk on the worker reached the caller's frames", names[u]);
            all &= frames_have(ws.f[u], ws.n[u], &wrun);
        }
        walks++;
        in_run += all;
        usleep(1000);
    }
    atomic_store(&g->stop, 1);
    pthread_join(t, NULL);
    printf("worker signal walks: %d, %d from inside fj_worker_run\n", walks, in_run);
    ck_assert_int_gt(in_run, 0);
    fj_runtime_destroy(g->rt);
    free(g->a);
    free(g->b);
    free(g->c);
    free(g);
}
END_TEST

/* ---- an embedder's parallel_for ------------------------------------ */

typedef struct ext_pool {
    atomic_int calls, chunks;
    int reverse;
} ext_pool;

typedef struct ext_half {
    fj_parallel_body body;
    void *arg;
    int64_t n;
} ext_half;

static void *ext_odd(void *arg) {
    ext_half *h = arg;
    for (int64_t i = 1; i < h->n; i += 2) h->body(h->arg, i);
    return NULL;
}

/* Odd chunks on a fresh thread, even ones here (in reverse order if asked). */
static void ext_for(void *ctx, int64_t n, fj_parallel_body body, void *arg) {
    ext_pool *p = ctx;
    atomic_fetch_add(&p->calls, 1);
    atomic_fetch_add(&p->chunks, (int)n);
    ext_half h = {body, arg, n};
    pthread_t t;
    int threaded = pthread_create(&t, NULL, ext_odd, &h) == 0;
    if (!threaded) ext_odd(&h);
    int64_t top = (n - 1) & ~(int64_t)1;
    for (int64_t k = 0; k <= top; k += 2) body(arg, p->reverse ? top - k : k);
    if (threaded) pthread_join(t, NULL);
}

START_TEST(parallel_for_same_results) {
    enum { M = 200, N = 300, K = 170, E = (1 << 21) + 77 };
    float *a = malloc(M * K * sizeof(float)), *b = malloc(K * N * sizeof(float));
    float *c0 = malloc(M * N * sizeof(float)), *c1 = malloc(M * N * sizeof(float));
    float *x = malloc(E * sizeof(float)), *y0 = malloc(E * sizeof(float));
    float *y1 = malloc(E * sizeof(float));
    ck_assert(a && b && c0 && c1 && x && y0 && y1);
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 13) - 6.0f;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 11) * 0.125f;
    for (int i = 0; i < E; i++) x[i] = (float)((i % 29) - 14) * 0.3f;
    fj_runtime *own = fjt_runtime(FJ_ISA_AVX2, 3);
    ck_assert_int_eq(fj_gemm_f32(own, 'N', 'N', M, N, K, 1.0f, a, K, b, N, 0.0f, c0, N), FJ_OK);
    ck_assert_int_eq(fj_eltwise_f32(own, FJ_ELT_TANH, 0, 0, x, y0, E), FJ_OK);
    fj_runtime_destroy(own);
    for (int reverse = 0; reverse < 2; reverse++) {
        ext_pool p = {.reverse = reverse};
        fj_options o;
        fj_options_init(&o);
        o.threads = 3;
        o.isa = FJ_ISA_AVX2;
        o.verify = 1;
        o.parallel_for = ext_for;
        o.parallel_ctx = &p;
        fj_runtime *rt;
        unsetenv("FRAMEJIT_THREADS");
        ck_assert_int_eq(fj_runtime_create(&o, &rt), FJ_OK);
        ck_assert_int_eq(fj_gemm_f32(rt, 'N', 'N', M, N, K, 1.0f, a, K, b, N, 0.0f, c1, N), FJ_OK);
        ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_TANH, 0, 0, x, y1, E), FJ_OK);
        ck_assert_msg(atomic_load(&p.calls) >= 2, "parallel_for called %d times",
                      atomic_load(&p.calls));
        ck_assert_msg(!memcmp(c0, c1, M * N * sizeof(float)), "GEMM differs with parallel_for");
        ck_assert_msg(!memcmp(y0, y1, E * sizeof(float)), "eltwise differs with parallel_for");
        fj_runtime_destroy(rt);
    }
    free(a);
    free(b);
    free(c0);
    free(c1);
    free(x);
    free(y0);
    free(y1);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("stitch");
    TCase *tc = tcase_create("stitch");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, origin_run_stitches_fp_only);
    tcase_add_loop_test(tc, trampoline_every_instruction, 0, 2);
    tcase_add_test(tc, worker_stacks_below_callers);
    tcase_add_test(tc, worker_signal_walks_stay_on_thread);
    tcase_add_test(tc, parallel_for_same_results);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    unsetenv("FRAMEJIT_THREADS");
    return fjt_run_suite(suite());
}
