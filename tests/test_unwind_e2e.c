/* test_unwind_e2e.c: libunwind, libgcc (_Unwind_Backtrace), glibc
 * backtrace() and a plain rbp walk go through framejit kernels and reach
 * main, from a C callback a kernel calls and from signal handlers that
 * interrupt kernels; callee-saved registers recovered for the kernel's
 * caller are the caller's. Every case runs for AVX-512 (when the CPU has
 * it) and AVX2, and for the FRAMEJIT_UNWIND back-end selections. */

#include <check.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fjtest.h"
#include "framejit.h"

#define NF 64

/* Values the caller keeps in rbx, r12-r15 across the call into a kernel. */
static const uint64_t caller_csr[FJT_NCSR] = {
    0x0b0b0b0b0b0b0b01ull, 0x1212121212121202ull, 0x1313131313131303ull,
    0x1414141414141404ull, 0x1515151515151505ull,
};

/* FRAMEJIT_UNWIND selections. */
enum { UW_ALLSEL, UW_GCC_ONLY, UW_LU_ONLY, UW_NONE, UW__N };
static const char *const uw_env[UW__N] = {NULL, "libgcc", "libunwind", "none"};

typedef struct walks {
    fjt_frame lu[NF], gcc[NF], bt[NF], fp[NF];
    int nlu, ngcc, nbt, nfp;
    uintptr_t pc;              /* signal cases: interrupted pc */
    const char *pc_kernel;     /* fj_symbolize(pc) */
    int done;
} walks;

typedef struct e2e {
    fj_kernel *k;
    int raise_usr1;            /* callback raises SIGUSR1 instead of walking */
    walks w;
    uintptr_t stack_lo, stack_hi;
    uint64_t csr_after[FJT_NCSR];
    uint64_t ret;
} e2e;

static fjt_range r_inner, r_outer, r_main, r_cb, r_thunk;
static e2e *volatile g_cur;
static sigjmp_buf g_jb;

static fj_isa loop_isa(int i) { return (i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512; }
static int loop_uw(int i) { return i >> 1; }

/* Creates a runtime for loop index i (ISA and FRAMEJIT_UNWIND); returns NULL
 * when the ISA is not available (the case is skipped). */
static fj_runtime *make_rt(int i) {
    if (loop_isa(i) == FJ_ISA_AVX512 && !fjt_have_avx512()) return NULL;
    if (uw_env[loop_uw(i)]) setenv("FRAMEJIT_UNWIND", uw_env[loop_uw(i)], 1);
    else unsetenv("FRAMEJIT_UNWIND");
    fj_options o;
    fj_options_init(&o);
    o.isa = loop_isa(i);
    o.threads = 1;
    fj_runtime *rt = NULL;
    fj_status s = fj_runtime_create(&o, &rt);
    ck_assert_msg(s == FJ_OK, "fj_runtime_create: %s: %s", fj_status_str(s), fj_last_error());
    ck_assert_int_eq(fj_runtime_isa(rt), loop_isa(i));
    return rt;
}

static void setup_ranges(void) {
    char err[256];
    ck_assert_msg(fjt_unwind_load(err, sizeof err), "%s", err);
}

/* ---- markers ------------------------------------------------------------ */

__attribute__((noipa)) static uint64_t e2e_cb(uint64_t a0, uint64_t a1) {
    e2e *c = (e2e *)(uintptr_t)a0;
    (void)a1;
    if (c->raise_usr1) {
        pthread_kill(pthread_self(), SIGUSR1);
    } else {
        walks *w = &c->w;
        w->nlu = fjt_walk_libunwind(NULL, w->lu, NF);
        w->ngcc = fjt_walk_libgcc(w->gcc, NF);
        w->nbt = fjt_walk_backtrace(w->bt, NF);
        w->nfp = fjt_walk_fp(0, (uintptr_t)__builtin_frame_address(0), c->stack_lo, c->stack_hi,
                             w->fp, NF);
        w->done = 1;
    }
    __asm__ volatile("" ::: "memory");
    return 7;
}

__attribute__((noipa)) static uint64_t relu_thunk(uint64_t rt, uint64_t src, uint64_t dst,
                                                  uint64_t n) {
    fj_status s = fj_eltwise_f32((fj_runtime *)(uintptr_t)rt, FJ_ELT_RELU, 0.0f, 0.0f,
                                 (const float *)(uintptr_t)src, (float *)(uintptr_t)dst, (size_t)n);
    __asm__ volatile("" ::: "memory");
    return (uint64_t)s;
}

/* The kernel's (or relu_thunk's) direct caller, with known callee-saved
 * registers around the call. */
__attribute__((noipa)) static void test_inner(e2e *c, const void *fn, uint64_t a0, uint64_t a1,
                                              uint64_t a2, uint64_t a3) {
    c->ret = fjt_call_csr(fn, caller_csr, c->csr_after, a0, a1, a2, a3, 0, 0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noipa)) static void test_outer(e2e *c, const void *fn, uint64_t a0, uint64_t a1,
                                              uint64_t a2, uint64_t a3) {
    test_inner(c, fn, a0, a1, a2, a3);
    __asm__ volatile("" ::: "memory");
}

static void init_ranges(void) {
    ck_assert(fjt_fn_range((const void *)test_inner, &r_inner));
    ck_assert(fjt_fn_range((const void *)test_outer, &r_outer));
    ck_assert(fjt_fn_range((const void *)e2e_cb, &r_cb));
    ck_assert(fjt_fn_range((const void *)relu_thunk, &r_thunk));
    int main(void);
    ck_assert(fjt_fn_range((const void *)main, &r_main));
}

/* ---- checks ------------------------------------------------------------- */

static int is_fp_walk(const char *what) { return strncmp(what, "rbp walk", 8) == 0; }

static int is_kval(uint64_t v) {
    for (int i = 0; i < FJT_KREGS; i++)
        if (v == FJT_KVAL(i)) return 1;
    return 0;
}

/* A walk that must go kernel -> test_inner (direct) -> test_outer -> main.
 * cb_below: the frame below the kernel must be e2e_cb. csr: check the
 * recovered callee-saved registers (kernel frame: the kernel's values;
 * test_inner: the caller's). Returns the kernel frame index. */
static int check_kernel_walk(const char *what, const fjt_frame *f, int n, const char *kname,
                             int cb_below, int csr) {
    char why[512];
    fjt_range rs[3] = {r_inner, r_outer, r_main};
    ck_assert_msg(n > 0, "%s: no frames", what);
    /* An rbp walk ends inside libcheck (built without frame pointers), so
     * it is held to the markers only; the DWARF walks must reach main. */
    int k = fjt_chain_check(f, n, kname, 0, rs, is_fp_walk(what) ? 2 : 3, 1, why, sizeof why);
    ck_assert_msg(k >= 0, "%s: %s", what, why);
    if (cb_below) ck_assert_msg(k > 0 && fjt_in_range(&r_cb, f[k - 1].ip),
                                "%s: frame below the kernel is not the callback", what);
    if (csr) {
        for (int r = 0; r < FJT_NCSR; r++) {
            ck_assert_msg(is_kval(f[k].csr[r]), "%s: kernel frame csr %d = %#lx, not a kernel value",
                          what, r, (unsigned long)f[k].csr[r]);
            ck_assert_msg(f[k + 1].csr[r] == caller_csr[r],
                          "%s: caller frame csr %d = %#lx, expected %#lx", what, r,
                          (unsigned long)f[k + 1].csr[r], (unsigned long)caller_csr[r]);
        }
    }
    return k;
}

/* Unregistered kernel seen by libgcc: the walk ends at the kernel frame
 * (libgcc has no frame-pointer fallback). */
static void check_stops_at_kernel(const char *what, const fjt_frame *f, int n) {
    int k = -1;
    for (int i = 0; i < n && k < 0; i++)
        if (fj_symbolize((const void *)f[i].ip, NULL)) k = i;
    ck_assert_msg(k >= 0, "%s: the walk does not even reach the kernel", what);
    ck_assert_msg(fjt_find_frame(f, n, k + 1, &r_outer) < 0,
                  "%s: went past an unregistered kernel (libgcc has no FP fallback?)", what);
}

static int count_csr_right(const fjt_frame *f, int n, const fjt_range *caller) {
    int i = fjt_find_frame(f, n, 0, caller);
    if (i < 0) return -1;
    int ok = 0;
    for (int r = 0; r < FJT_NCSR; r++) ok += f[i].csr[r] == caller_csr[r];
    return ok;
}

/* ---- 1. walks from a C callback ----------------------------------------- */

START_TEST(callback_walks) {
    setup_ranges();
    init_ranges();
    fj_runtime *rt = make_rt(_i);
    if (!rt) return;
    int sel = loop_uw(_i);
    static e2e c;
    memset(&c, 0, sizeof c);
    fjt_stack_bounds(&c.stack_lo, &c.stack_hi);
    fj_status s = fjt_build_csr_kernel(rt, "e2e_csr_call", (const void *)e2e_cb, &c.k);
    ck_assert_msg(s == FJ_OK, "build: %s: %s", fj_status_str(s), fj_last_error());
    const char *kname = fj_kernel_name(c.k);
    ck_assert_str_eq(kname, "e2e_csr_call");
    void *entry = fj_kernel_entry(c.k);
    ck_assert_ptr_nonnull(entry);
    uintptr_t off = 1;
    ck_assert_str_eq(fj_symbolize(entry, &off), kname);
    ck_assert_uint_eq(off, 0);

    test_outer(&c, entry, (uint64_t)(uintptr_t)&c, 42, 0, 0);
    ck_assert_msg(c.ret == 0, "kernel lost a register value across fj_call (%#lx)",
                  (unsigned long)c.ret);
    for (int r = 0; r < FJT_NCSR; r++)
        ck_assert_msg(c.csr_after[r] == caller_csr[r], "kernel did not preserve csr %d", r);
    ck_assert(c.w.done);
    walks *w = &c.w;

    /* The frame-pointer walk never needs registration. */
    check_kernel_walk("rbp walk", w->fp, w->nfp, kname, 0, 0);
    switch (sel) {
    case UW_ALLSEL:
        check_kernel_walk("libunwind", w->lu, w->nlu, kname, 1, 1);
        check_kernel_walk("libgcc", w->gcc, w->ngcc, kname, 1, 1);
        check_kernel_walk("backtrace", w->bt, w->nbt, kname, 1, 0);
        break;
    case UW_GCC_ONLY:
        check_kernel_walk("libgcc", w->gcc, w->ngcc, kname, 1, 1);
        check_kernel_walk("backtrace", w->bt, w->nbt, kname, 1, 0);
        /* libunwind without registration falls back to the rbp chain: the
         * chain is right, the callee-saved registers are not recovered. */
        check_kernel_walk("libunwind (rbp fallback)", w->lu, w->nlu, kname, 1, 0);
        printf("callback, FRAMEJIT_UNWIND=libgcc, isa %d: libunwind's rbp fallback recovered "
               "%d of 5 callee-saved registers of the caller\n",
               (int)loop_isa(_i), count_csr_right(w->lu, w->nlu, &r_inner));
        break;
    case UW_LU_ONLY:
        check_kernel_walk("libunwind", w->lu, w->nlu, kname, 1, 1);
        check_stops_at_kernel("libgcc", w->gcc, w->ngcc);
        check_stops_at_kernel("backtrace", w->bt, w->nbt);
        break;
    case UW_NONE:
        check_kernel_walk("libunwind (rbp fallback)", w->lu, w->nlu, kname, 1, 0);
        check_stops_at_kernel("libgcc", w->gcc, w->ngcc);
        check_stops_at_kernel("backtrace", w->bt, w->nbt);
        break;
    }
    fj_kernel_release(c.k);
    ck_assert_ptr_null(fj_symbolize(entry, NULL));
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- 2. walks from a signal raised in a callback ------------------------ */

static void usr1_handler(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    (void)si;
    e2e *c = g_cur;
    walks *w = &c->w;
    ucontext_t *uc = ucv;
    w->pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    w->nlu = fjt_walk_libunwind(uc, w->lu, NF);
    w->ngcc = fjt_walk_libgcc(w->gcc, NF);
    w->nbt = fjt_walk_backtrace(w->bt, NF);
    w->done = 1;
}

static void install(int sig, void (*h)(int, siginfo_t *, void *), void **altmem) {
    size_t sz = 1 << 20;
    *altmem = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(*altmem != MAP_FAILED);
    stack_t ss = {.ss_sp = *altmem, .ss_size = sz, .ss_flags = 0};
    ck_assert_int_eq(sigaltstack(&ss, NULL), 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = h;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(sig, &sa, NULL), 0);
}

/* First calls of the unwinders allocate; do them outside handlers. */
static void warm_unwinders(void) {
    fjt_frame f[NF];
    fjt_walk_libunwind(NULL, f, NF);
    fjt_walk_libgcc(f, NF);
    fjt_walk_backtrace(f, NF);
}

START_TEST(signal_in_callback) {
    setup_ranges();
    init_ranges();
    fj_runtime *rt = make_rt(_i);
    if (!rt) return;
    int sel = loop_uw(_i);
    static e2e c;
    memset(&c, 0, sizeof c);
    c.raise_usr1 = 1;
    fj_status s = fjt_build_csr_kernel(rt, "e2e_csr_signal", (const void *)e2e_cb, &c.k);
    ck_assert_msg(s == FJ_OK, "build: %s: %s", fj_status_str(s), fj_last_error());
    const char *kname = fj_kernel_name(c.k);
    void *alt;
    install(SIGUSR1, usr1_handler, &alt);
    warm_unwinders();
    g_cur = &c;
    test_outer(&c, fj_kernel_entry(c.k), (uint64_t)(uintptr_t)&c, 1, 0, 0);
    ck_assert(c.w.done);
    ck_assert_msg(c.ret == 0, "kernel lost a register value across fj_call");
    for (int r = 0; r < FJT_NCSR; r++) ck_assert(c.csr_after[r] == caller_csr[r]);
    walks *w = &c.w;
    ck_assert_msg(w->nlu > 0 && w->lu[0].ip == w->pc, "libunwind: first frame is not the "
                  "interrupted pc");
    if (sel == UW_ALLSEL || sel == UW_LU_ONLY)
        check_kernel_walk("libunwind from ucontext", w->lu, w->nlu, kname, 1, 1);
    else
        check_kernel_walk("libunwind from ucontext (rbp fallback)", w->lu, w->nlu, kname, 1, 0);
    if (sel == UW_ALLSEL || sel == UW_GCC_ONLY) {
        check_kernel_walk("libgcc from handler", w->gcc, w->ngcc, kname, 1, 1);
        check_kernel_walk("backtrace from handler", w->bt, w->nbt, kname, 1, 0);
    } else {
        check_stops_at_kernel("libgcc from handler", w->gcc, w->ngcc);
        check_stops_at_kernel("backtrace from handler", w->bt, w->nbt);
    }
    fj_kernel_release(c.k);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- 3. relu kernel faulting: SIGSEGV handler unwinds, then leaves ------ */

static uintptr_t g_stack_lo, g_stack_hi;

static void segv_handler(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    (void)si;
    e2e *c = g_cur;
    walks *w = &c->w;
    ucontext_t *uc = ucv;
    w->pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    w->pc_kernel = fj_symbolize((const void *)w->pc, NULL);
    w->nlu = fjt_walk_libunwind(uc, w->lu, NF);
    w->ngcc = fjt_walk_libgcc(w->gcc, NF);
    w->nbt = fjt_walk_backtrace(w->bt, NF);
    w->nfp = fjt_walk_fp(w->pc, (uintptr_t)uc->uc_mcontext.gregs[REG_RBP], g_stack_lo, g_stack_hi,
                         w->fp, NF);
    w->done = 1;
    siglongjmp(g_jb, 1);
}

/* kernel -> (library) -> relu_thunk -> test_inner -> test_outer -> main;
 * callee-saved registers at test_inner are the caller's. */
static void check_relu_walk(const char *what, const fjt_frame *f, int n, int csr) {
    char why[512];
    fjt_range rs[4] = {r_thunk, r_inner, r_outer, r_main};
    int k = fjt_chain_check(f, n, NULL, 0, rs, is_fp_walk(what) ? 3 : 4, 0, why, sizeof why);
    ck_assert_msg(k >= 0, "%s: %s", what, why);
    if (csr) {
        int i = fjt_find_frame(f, n, k + 1, &r_inner);
        for (int r = 0; r < FJT_NCSR; r++)
            ck_assert_msg(f[i].csr[r] == caller_csr[r], "%s: test_inner csr %d = %#lx, expected %#lx",
                          what, r, (unsigned long)f[i].csr[r], (unsigned long)caller_csr[r]);
    }
}

START_TEST(relu_segv) {
    setup_ranges();
    init_ranges();
    fj_runtime *rt = make_rt(_i);
    if (!rt) return;
    int sel = loop_uw(_i);
    static e2e c;
    memset(&c, 0, sizeof c);
    fjt_stack_bounds(&g_stack_lo, &g_stack_hi);

    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *mem = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(mem != MAP_FAILED);
    ck_assert_int_eq(mprotect(mem + pg, (size_t)pg, PROT_NONE), 0);
    size_t n = 4096;
    float *src = (float *)(mem + pg) - 40;   /* 40 readable floats, then the hole */
    for (int i = 0; i < 40; i++) src[i] = (float)(i - 20);
    float *dst = calloc(n, sizeof *dst);
    ck_assert_ptr_nonnull(dst);

    /* Make the kernel and warm the unwinders up outside the handler. */
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0.0f, 0.0f, src, dst, 40), FJ_OK);
    warm_unwinders();

    void *alt;
    install(SIGSEGV, segv_handler, &alt);
    g_cur = &c;
    if (sigsetjmp(g_jb, 1) == 0) {
        test_outer(&c, (const void *)relu_thunk, (uint64_t)(uintptr_t)rt, (uint64_t)(uintptr_t)src,
                   (uint64_t)(uintptr_t)dst, n);
        ck_abort_msg("relu over a PROT_NONE page did not fault (status %d)", (int)c.ret);
    }
    signal(SIGSEGV, SIG_DFL);
    walks *w = &c.w;
    ck_assert(w->done);
    ck_assert_msg(w->pc_kernel != NULL, "the fault was not inside a kernel (pc %#lx)",
                  (unsigned long)w->pc);
    ck_assert_msg(w->nlu > 0 && w->lu[0].ip == w->pc, "libunwind: first frame is not the pc");
    ck_assert_msg(w->nfp > 0 && w->fp[0].ip == w->pc, "rbp walk: first frame is not the pc");
    check_relu_walk("rbp walk from ucontext", w->fp, w->nfp, 0);
    if (sel == UW_ALLSEL || sel == UW_LU_ONLY) {
        check_relu_walk("libunwind from ucontext", w->lu, w->nlu, 1);
    } else {
        check_relu_walk("libunwind from ucontext (rbp fallback)", w->lu, w->nlu, 0);
        printf("relu SIGSEGV, FRAMEJIT_UNWIND=%s, isa %d, kernel %s: libunwind's rbp fallback "
               "recovered %d of 5 callee-saved registers of test_inner\n",
               uw_env[sel], (int)loop_isa(_i), w->pc_kernel,
               count_csr_right(w->lu, w->nlu, &r_inner));
    }
    if (sel == UW_ALLSEL || sel == UW_GCC_ONLY) {
        check_relu_walk("libgcc from handler", w->gcc, w->ngcc, 1);
        check_relu_walk("backtrace from handler", w->bt, w->nbt, 0);
    } else {
        check_stops_at_kernel("libgcc from handler", w->gcc, w->ngcc);
        check_stops_at_kernel("backtrace from handler", w->bt, w->nbt);
    }
    free(dst);
    /* The kernel was left by siglongjmp: leak the runtime rather than
     * destroy it (fj_runtime_destroy requires no kernel running). */
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("unwind_e2e");
    TCase *t = tcase_create("walks");
    tcase_set_timeout(t, 120);
    /* loop index: bit 0 = ISA (AVX-512, AVX2), bits 1.. = FRAMEJIT_UNWIND */
    tcase_add_loop_test(t, callback_walks, 0, 2 * UW__N);
    tcase_add_loop_test(t, signal_in_callback, 0, 2 * UW__N);
    tcase_add_loop_test(t, relu_segv, 0, 2 * UW__N);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    /* The suites choose ISAs and threads themselves. */
    unsetenv("FRAMEJIT_ISA");
    unsetenv("FRAMEJIT_THREADS");
    return fjt_run_suite(suite());
}
