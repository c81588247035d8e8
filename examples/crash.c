/* crash.c: a JIT kernel that faults, and the stacks the unwinders show.
 *
 *     crash              main -> outer -> inner -> relu kernel, which reads a
 *                        PROT_NONE page and dies of SIGSEGV (run it in gdb:
 *                        `gdb -batch -ex run -ex bt --args ./crash`)
 *     crash --handler    the same, but a SIGSEGV handler prints the stack as
 *                        libunwind and as glibc's backtrace() see it, then
 *                        exits 0
 *
 * The kernel's unwind info is registered with libgcc (which backtrace()
 * uses), with libunwind and with gdb, so all three walk from the faulting
 * instruction through the kernel to inner, outer and main. Unwinders name
 * ordinary functions from the ELF symbol tables (this program is linked with
 * -rdynamic so that backtrace_symbols_fd can); JIT frames are named with
 * fj_symbolize, which is async-signal-safe.
 */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <framejit.h>

#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- async-signal-safe output ---------------------------------------- */

static void out(const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static void out_hex(uintptr_t v) {
    char buf[2 + 16 + 1];
    char *p = buf + sizeof buf - 1;
    *p = 0;
    do {
        *--p = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    *--p = 'x';
    *--p = '0';
    out(p);
}

static void out_dec(unsigned v) {
    char buf[12];
    char *p = buf + sizeof buf - 1;
    *p = 0;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    out(p);
}

/* "  #3 0x7f... name+0x1c" */
static void out_frame(unsigned i, uintptr_t pc, const char *name, uintptr_t off) {
    out("  #");
    out_dec(i);
    out(" ");
    out_hex(pc);
    out(" ");
    out(name ? name : "??");
    if (name) {
        out("+");
        out_hex(off);
    }
    out("\n");
}

/* ---- the handler ------------------------------------------------------ */

static void print_libunwind(void) {
    unw_context_t ctx;
    unw_cursor_t cur;
    out("libunwind:\n");
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0) {
        out("  (libunwind could not start)\n");
        return;
    }
    unsigned i = 0;
    do {
        unw_word_t ip = 0, off = 0;
        char name[256];
        unw_get_reg(&cur, UNW_REG_IP, &ip);
        uintptr_t jit_off;
        const char *jit = fj_symbolize((const void *)ip, &jit_off);
        if (jit) {
            out_frame(i, ip, jit, jit_off);
        } else if (unw_get_proc_name(&cur, name, sizeof name, &off) == 0) {
            out_frame(i, ip, name, off);
        } else {
            out_frame(i, ip, NULL, 0);
        }
    } while (++i < 64 && unw_step(&cur) > 0);
}

static void print_backtrace(void) {
    void *pcs[64];
    out("backtrace():\n");
    int n = backtrace(pcs, 64);
    for (int i = 0; i < n; i++) {
        uintptr_t off;
        const char *jit = fj_symbolize(pcs[i], &off);
        if (jit) {
            out_frame((unsigned)i, (uintptr_t)pcs[i], jit, off);
        } else {
            /* backtrace_symbols_fd writes "file(sym+off)[pc]" for one frame. */
            out("  #");
            out_dec((unsigned)i);
            out(" ");
            backtrace_symbols_fd(&pcs[i], 1, STDOUT_FILENO);
        }
    }
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    out("handler: SIGSEGV at address ");
    out_hex((uintptr_t)si->si_addr);
    out("\n");
    print_libunwind();
    print_backtrace();
    out("handler: done\n");
    _exit(0);
}

/* ---- the faulting call chain ----------------------------------------- */

/* Externally visible (and the program linked -rdynamic) so backtrace_symbols_fd
 * names them; noinline + noclone so every frame exists under its own name;
 * each uses its callee's result, so none is a tail call. */
__attribute__((noinline, noclone)) fj_status inner(fj_runtime *rt, const float *src, float *dst,
                                                   size_t n) {
    fj_status s = fj_eltwise_f32(rt, FJ_ELT_RELU, 0.0f, 0.0f, src, dst, n);
    __asm__ volatile("" ::: "memory");
    return s;
}

__attribute__((noinline, noclone)) fj_status outer(fj_runtime *rt, const float *src, float *dst,
                                                   size_t n) {
    fj_status s = inner(rt, src, dst, n);
    __asm__ volatile("" ::: "memory");
    return s;
}

int main(int argc, char **argv) {
    int handler = argc > 1 && strcmp(argv[1], "--handler") == 0;
    if (argc > 1 && !handler) {
        fprintf(stderr, "usage: %s [--handler]\n", argv[0]);
        return 2;
    }

    fj_options opts;
    fj_options_init(&opts);
    opts.threads = 1; /* the kernel runs, and faults, on this thread */
    fj_runtime *rt;
    fj_status s = fj_runtime_create(&opts, &rt);
    if (s != FJ_OK) {
        fprintf(stderr, "crash: fj_runtime_create: %s: %s\n", fj_status_str(s), fj_last_error());
        return 1;
    }

    size_t n = 4096;
    float *dst = calloc(n, sizeof *dst);
    float *ok = calloc(n, sizeof *ok);
    /* The source: pages that may not be read. */
    void *bad = mmap(NULL, n * sizeof(float), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!dst || !ok || bad == MAP_FAILED) {
        perror("crash: allocation");
        return 1;
    }

    /* Generate the kernel on good data first, so the fault below happens in
     * the kernel and not in whatever the first call does. */
    s = outer(rt, ok, dst, n);
    if (s != FJ_OK) {
        fprintf(stderr, "crash: fj_eltwise_f32: %s: %s\n", fj_status_str(s), fj_last_error());
        return 1;
    }

    if (handler) {
        /* backtrace() loads libgcc_s on first use, which is not
         * async-signal-safe: do that now, outside the handler. */
        void *warm[4];
        backtrace(warm, 4);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, NULL);
    }

    printf("crash: calling relu on a PROT_NONE source at %p\n", bad);
    fflush(stdout);
    s = outer(rt, bad, dst, n);
    /* Not reached: the kernel faults. */
    printf("crash: relu returned %s (expected a SIGSEGV)\n", fj_status_str(s));
    fj_runtime_destroy(rt);
    return 1;
}
