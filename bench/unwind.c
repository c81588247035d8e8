/* unwind.c: the "unwind" section: what registering JIT kernels costs the
 * unwinders, with 0, 1, 1,000, 10,000 and 100,000 live kernels held in
 * code arenas (unwindinfo/'s uw_arena_*), and the old one-object-per-kernel
 * registration at 10,000 for contrast:
 *   - one _Unwind_Backtrace (libgcc) from plain C code, and through a JIT
 *     frame; one unw_backtrace (libunwind) likewise; ratios against the
 *     same walk through a C frame with no kernels registered;
 *   - registration cost per kernel (amortised over all adds);
 *   - memory per kernel beyond its code (RSS delta, and the arenas' own
 *     accounting);
 *   - wall time of `gdb -batch -p PID -ex bt` on a process holding 10,000
 *     kernels (skipped when gdb or ptrace is unavailable).
 * The kernels are hand-assembled stubs (push rbp; mov rbp, rsp; ...; call
 * the callback; leave; ret) 64 bytes apart, as the code cache places them.
 * libunwind is reached through dlopen/dlsym only: linked, it would take
 * over _Unwind_* for the whole bench. */
#include "bench.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ucontext.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include "unwindinfo/uw.h"
#include "unwindinfo/uw_object.h"

#define SEC "unwind"

/* ---- Stubs ------------------------------------------------------------------ */

typedef struct probe {
    uint64_t caller_rbx, caller_ra;  /* written by the stub */
    void (*work)(struct probe *);    /* what the callback does */
    double ns;                       /* its result */
} probe;

enum { STUB_SIZE = 51, STRIDE = 64, OFF_CALLBACK = 35, ARENA = 1 << 20 };
static const uint8_t stub_code[STUB_SIZE] = {
    0x55, 0x48, 0x89, 0xe5,                    /* push rbp; mov rbp, rsp */
    0x48, 0x83, 0xec, 0x10,                    /* sub rsp, 16 */
    0x48, 0x89, 0x5d, 0xf8,                    /* mov [rbp-8], rbx */
    0x48, 0x89, 0x1f,                          /* mov [rdi], rbx */
    0x48, 0x8b, 0x45, 0x08,                    /* mov rax, [rbp+8] */
    0x48, 0x89, 0x47, 0x08,                    /* mov [rdi+8], rax */
    0x48, 0xbb, 0x0d, 0xf0, 0xfe, 0xca, 0xef, 0xbe, 0xad, 0x5e, /* mov rbx, imm */
    0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,        /* mov rax, callback */
    0xff, 0xd0,                                /* call rax */
    0x48, 0x8b, 0x5d, 0xf8,                    /* mov rbx, [rbp-8] */
    0xc9, 0xc3,                                /* leave; ret */
};
static const uw_rec stub_recs[] = {
    {.off = 1, .kind = UW_PUSH_FP},
    {.off = 4, .kind = UW_SET_FP},
    {.off = 12, .kind = UW_SAVE_REG, .reg = 3, .cfa_off = -24},
    {.off = 49, .kind = UW_RESTORE_REG, .reg = 3},
    {.off = 50, .kind = UW_POP_FP},
};

typedef void (*stub_fn)(probe *);

static void callback(probe *p) { p->work(p); }

/* A C function shaped like the stub: the "through a C frame" reference. */
static __attribute__((noinline)) void c_stub(probe *p) {
    callback(p);
    __asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void call_through(stub_fn fn, probe *p) {
    fn(p);
    __asm__ volatile("" ::: "memory");
}

/* n stubs in 1 MiB arenas: code written, then registered (timed). */
typedef struct kset {
    size_t n, narenas;
    uint8_t **code;
    uw_arena **arenas;
    uw_object **objs;  /* per-kernel registration instead (old path) */
    double reg_ns;
} kset;

static uint8_t *stub_at(const kset *s, size_t i) {
    return s->code[i / (ARENA / STRIDE)] + (i % (ARENA / STRIDE)) * STRIDE;
}

static int kset_code(kset *s, size_t n) {
    memset(s, 0, sizeof *s);
    s->n = n;
    s->narenas = (n + ARENA / STRIDE - 1) / (ARENA / STRIDE);
    s->code = calloc(s->narenas + 1, sizeof *s->code);
    s->arenas = calloc(s->narenas + 1, sizeof *s->arenas);
    if (!s->code || !s->arenas) return -1;
    for (size_t a = 0; a < s->narenas; a++) {
        uint8_t *p = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return -1;
        s->code[a] = p;
    }
    uint64_t cb = (uint64_t)(uintptr_t)callback;
    for (size_t i = 0; i < n; i++) {
        memcpy(stub_at(s, i), stub_code, STUB_SIZE);
        memcpy(stub_at(s, i) + OFF_CALLBACK, &cb, 8);
    }
    for (size_t a = 0; a < s->narenas; a++)
        if (mprotect(s->code[a], ARENA, PROT_READ | PROT_EXEC) != 0) return -1;
    return 0;
}

static uw_func stub_func(const kset *s, size_t i, char *name, size_t len) {
    snprintf(name, len, "fjbench_k%zu", i);
    return (uw_func){.name = name, .start = (uintptr_t)stub_at(s, i), .size = STUB_SIZE,
                     .recs = stub_recs, .nrecs = 5};
}

/* Process CPU time: registration is single-threaded here, and CPU time
 * does not count the time other processes take the CPU away. */
static double cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int kset_register_arenas(kset *s) {
    char name[32];
    double t0 = cpu_ns();
    for (size_t a = 0; a < s->narenas; a++) {
        snprintf(name, sizeof name, "bench%zu", a);
        uintptr_t lo = (uintptr_t)s->code[a];
        if (uw_arena_create(UW_ALL, lo, lo + ARENA, name, &s->arenas[a]) != FJ_OK) return -1;
    }
    for (size_t i = 0; i < s->n; i++) {
        uw_func f = stub_func(s, i, name, sizeof name);
        if (uw_arena_add(s->arenas[i / (ARENA / STRIDE)], &f) != FJ_OK) return -1;
    }
    s->reg_ns = cpu_ns() - t0;
    return 0;
}

static int kset_register_each(kset *s) {
    char name[32];
    s->objs = calloc(s->n + 1, sizeof *s->objs);
    if (!s->objs) return -1;
    double t0 = cpu_ns();
    for (size_t i = 0; i < s->n; i++) {
        uw_func f = stub_func(s, i, name, sizeof name);
        if (uw_register(&f, 1, UW_ALL, &s->objs[i]) != FJ_OK) return -1;
    }
    s->reg_ns = cpu_ns() - t0;
    return 0;
}

/* Deregisters; the code stays mapped (addresses are never reused: libunwind
 * caches by address). */
static void kset_drop(kset *s) {
    for (size_t a = 0; a < s->narenas; a++) uw_arena_destroy(s->arenas[a]);
    if (s->objs)
        for (size_t i = 0; i < s->n; i++) uw_deregister(s->objs[i]);
    free(s->objs);
    free(s->arenas);
    free(s->code);
    memset(s, 0, sizeof *s);
}

/* ---- Walks ------------------------------------------------------------------ */

static int (*unw_bt)(void **, int);
/* unw_step walks: the slow path unw_backtrace skips once its per-thread
 * cache knows the frames; this one searches the registered tables on every
 * frame. The context is libunwind's (unw_context_t is a ucontext_t). */
static int (*unw_getcontext_fn)(ucontext_t *);
static int (*unw_init_local_fn)(void *cursor, ucontext_t *);
static int (*unw_step_fn)(void *cursor);
static int reps = 9;
enum { CALLS = 200 };

static _Unwind_Reason_Code count_frame(struct _Unwind_Context *ctx, void *arg) {
    (void)ctx;
    ++*(int *)arg;
    return _URC_NO_REASON;
}

static __attribute__((noinline)) int gcc_walk(void) {
    int n = 0;
    _Unwind_Backtrace(count_frame, &n);
    return n;
}

static __attribute__((noinline)) int unw_walk(void) {
    void *buf[64];
    return unw_bt(buf, 64);
}

static __attribute__((noinline)) int unw_step_walk(void) {
    ucontext_t uc;
    uint64_t cursor[160];  /* >= sizeof(unw_cursor_t) (127 words on x86-64) */
    if (unw_getcontext_fn(&uc) != 0 || unw_init_local_fn(cursor, &uc) != 0) return 0;
    int n = 1;
    while (n < 64 && unw_step_fn(cursor) > 0) n++;
    return n;
}

static int (*walk_fn)(void);
static int frames;

/* ns per walk: median over reps of CALLS walks, from where it is called. */
static void time_walks(probe *p) {
    double v[64];
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < CALLS; i++) frames = walk_fn();
        v[r] = (bench_now_ns() - t0) / CALLS;
    }
    p->ns = bench_median(v, reps);
}

/* One walk from plain C code, through a C frame, through the JIT stub fn. */
typedef struct walk_costs {
    double gcc_c, gcc_jit, unw_c, unw_jit, step_c, step_jit;
    int gcc_frames, unw_frames;
} walk_costs;

static double measure(int (*fn)(void), stub_fn through, int *nframes) {
    walk_fn = fn;
    probe p = {.work = time_walks};
    call_through(through, &p);
    *nframes = frames;
    return p.ns;
}

static void measure_all(stub_fn jit, walk_costs *w) {
    int f;
    w->gcc_c = measure(gcc_walk, c_stub, &f);
    w->gcc_jit = jit ? measure(gcc_walk, jit, &w->gcc_frames) : 0;
    if (!jit) w->gcc_frames = f;
    w->unw_c = unw_bt ? measure(unw_walk, c_stub, &f) : 0;
    w->unw_jit = unw_bt && jit ? measure(unw_walk, jit, &w->unw_frames) : 0;
    if (!jit) w->unw_frames = f;
    w->step_c = unw_step_fn ? measure(unw_step_walk, c_stub, &f) : 0;
    w->step_jit = unw_step_fn && jit ? measure(unw_step_walk, jit, &f) : 0;
}

/* ---- Memory ----------------------------------------------------------------- */

static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (double)res * (double)sysconf(_SC_PAGESIZE);
}

/* The arenas' own accounting: libgcc, libunwind, gdb bytes. */
static void arenas_bytes(const kset *s, double b[3]) {
    b[0] = b[1] = b[2] = 0;
    for (size_t a = 0; a < s->narenas; a++) {
        uw_arena_stats st;
        uw_arena_get_stats(s->arenas[a], &st);
        b[0] += (double)st.libgcc_bytes;
        b[1] += (double)st.libunwind_bytes;
        b[2] += (double)st.gdb_bytes;
    }
}

/* ---- Rows ------------------------------------------------------------------- */

static void rows(const char *variant, size_t n, const walk_costs *w, const walk_costs *base,
                 const kset *s, double rss_delta, int arenas) {
    char name[64];
    snprintf(name, sizeof name, "bt_c n=%zu", n);
    bench_row(SEC, name, variant, w->gcc_c, "ns", w->gcc_c / base->gcc_c);
    if (w->gcc_jit > 0) {
        snprintf(name, sizeof name, "bt_jit n=%zu", n);
        bench_row(SEC, name, variant, w->gcc_jit, "ns", w->gcc_jit / base->gcc_c);
    }
    if (unw_bt) {
        snprintf(name, sizeof name, "unw_bt_c n=%zu", n);
        bench_row(SEC, name, variant, w->unw_c, "ns", w->unw_c / base->unw_c);
        if (w->unw_jit > 0) {
            snprintf(name, sizeof name, "unw_bt_jit n=%zu", n);
            bench_row(SEC, name, variant, w->unw_jit, "ns", w->unw_jit / base->unw_c);
        }
    }
    if (unw_step_fn) {
        snprintf(name, sizeof name, "unw_step_c n=%zu", n);
        bench_row(SEC, name, variant, w->step_c, "ns", w->step_c / base->step_c);
        if (w->step_jit > 0) {
            snprintf(name, sizeof name, "unw_step_jit n=%zu", n);
            bench_row(SEC, name, variant, w->step_jit, "ns", w->step_jit / base->step_c);
        }
    }
    if (n) {
        snprintf(name, sizeof name, "register/kernel(cpu) n=%zu", n);
        bench_row(SEC, name, variant, s->reg_ns / 1e3 / (double)n, "us", 0);
        snprintf(name, sizeof name, "rss/kernel n=%zu", n);
        bench_row(SEC, name, variant, rss_delta / (double)n, "B", 0);
        if (arenas) {
            double b[3];
            arenas_bytes(s, b);
            snprintf(name, sizeof name, "own/kernel n=%zu", n);
            bench_row(SEC, name, variant, (b[0] + b[1] + b[2]) / (double)n, "B", 0);
            static const char *const what[3] = {"libgcc", "libunwind", "gdb"};
            for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof name, "own/kernel %s n=%zu", what[i], n);
                bench_row(SEC, name, variant, b[i] / (double)n, "B", 0);
            }
        }
    }
}

/* ---- gdb -------------------------------------------------------------------- */

static int ready_fd = -1;

static void park(probe *p) {
    (void)p;
    char c = 1;
    if (write(ready_fd, &c, 1) != 1) _exit(3);
    for (;;) pause();
}

static __attribute__((noreturn)) void gdb_child(size_t n, int per_kernel) {
    kset s;
    if (kset_code(&s, n) != 0 || (per_kernel ? kset_register_each(&s) : kset_register_arenas(&s))) {
        fprintf(stderr, "%-10s gdb child: %s\n", SEC, fj_last_error());
        _exit(2);
    }
#ifdef PR_SET_PTRACER
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  /* Yama: let gdb attach */
#endif
    probe p = {.work = park};
    call_through((stub_fn)(void *)stub_at(&s, n / 2), &p);
    _exit(0);
}

static void bench_gdb(size_t n, int per_kernel) {
    const char *variant = per_kernel ? "per-kernel" : "arena";
    if (system("command -v gdb >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1") != 0) {
        printf("%-10s gdb bt: skipped, gdb is not installed\n", SEC);
        return;
    }
    int fds[2];
    if (pipe(fds) != 0) return;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return;
    if (pid == 0) {
        close(fds[0]);
        ready_fd = fds[1];
        gdb_child(n, per_kernel);
    }
    close(fds[1]);
    char c;
    if (read(fds[0], &c, 1) != 1) {
        printf("%-10s gdb bt: skipped, the child holding %zu kernels failed\n", SEC, n);
        close(fds[0]);
        waitpid(pid, NULL, 0);
        return;
    }
    close(fds[0]);
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "timeout -k 5 300 gdb -nx -batch -ex 'set debuginfod enabled off' "
             "-ex 'set pagination off' -p %d -ex bt 2>&1 </dev/null",
             (int)pid);
    double t0 = bench_now_ns();
    FILE *f = popen(cmd, "r");
    static char out[1 << 16];
    size_t len = 0, r;
    while (f && (r = fread(out + len, 1, sizeof out - 1 - len, f)) > 0) len += r;
    out[len] = 0;
    if (f) pclose(f);
    double ms = (bench_now_ns() - t0) / 1e6;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char want[48], name[48];
    snprintf(want, sizeof want, " in fjbench_k%zu ", n / 2);
    if (!strstr(out, want) || !strstr(out, "main")) {
        const char *why = strstr(out, "ptrace") ? "gdb cannot attach (ptrace)" : "unexpected bt";
        printf("%-10s gdb bt: skipped, %s:\n%.600s\n", SEC, why, out);
        return;
    }
    snprintf(name, sizeof name, "gdb -p bt n=%zu", n);
    bench_row(SEC, name, variant, ms, "ms", 0);
}

/* ---- Section ---------------------------------------------------------------- */

void bench_unwind(const bench_ctx *c) {
    reps = c->reps > 64 ? 64 : c->reps;
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h) *(void **)&unw_bt = dlsym(h, "unw_backtrace");
    if (h) {
        *(void **)&unw_getcontext_fn = dlsym(h, "_Ux86_64_getcontext");
        *(void **)&unw_init_local_fn = dlsym(h, "_ULx86_64_init_local");
        *(void **)&unw_step_fn = dlsym(h, "_ULx86_64_step");
        if (!unw_getcontext_fn || !unw_init_local_fn) unw_step_fn = NULL;
    }
    if (!unw_bt) printf("%-10s libunwind.so.8 not found: unw_backtrace rows skipped\n", SEC);

    /* Reference: no kernels registered at all, walks through a C frame. */
    walk_costs base;
    measure_all(NULL, &base);  /* warm-up: first walks fill libgcc's and libunwind's caches */
    measure_all(NULL, &base);
    kset none = {0};
    rows("arena", 0, &base, &base, &none, 0, 0);

    static const size_t counts[] = {1, 1000, 10000, 100000};
    const size_t ncounts = c->quick ? 3 : 4;
    for (size_t k = 0; k < ncounts; k++) {
        kset s;
        if (kset_code(&s, counts[k]) != 0) {
            printf("%-10s cannot map code for %zu kernels\n", SEC, counts[k]);
            return;
        }
        double rss0 = rss_bytes();
        if (kset_register_arenas(&s) != 0) {
            printf("%-10s registering %zu kernels failed: %s\n", SEC, counts[k], fj_last_error());
            return;
        }
        double rss1 = rss_bytes();
        walk_costs w;
        measure_all((stub_fn)(void *)stub_at(&s, s.n / 2), &w);
        rows("arena", s.n, &w, &base, &s, rss1 - rss0, 1);
        kset_drop(&s);
    }

    /* The old registration, one object per kernel, at 10,000 (1,000 with
     * --quick). The first walk after registering sorts every object. */
    {
        const size_t n = c->quick ? 1000 : 10000;
        kset s;
        if (kset_code(&s, n) == 0) {
            double rss0 = rss_bytes();
            if (kset_register_each(&s) == 0) {
                double rss1 = rss_bytes();
                double t0 = bench_now_ns();
                gcc_walk();
                bench_row(SEC, n == 10000 ? "first bt n=10000" : "first bt n=1000", "per-kernel",
                          (bench_now_ns() - t0) / 1e6, "ms", 0);
                walk_costs w;
                measure_all((stub_fn)(void *)stub_at(&s, s.n / 2), &w);
                rows("per-kernel", n, &w, &base, &s, rss1 - rss0, 0);
            } else {
                printf("%-10s registering %zu kernels one by one failed: %s\n", SEC, n,
                       fj_last_error());
            }
            kset_drop(&s);
        }
    }

    bench_gdb(1, 0);
    bench_gdb(c->quick ? 1000 : 10000, 0);
    if (!c->quick) bench_gdb(10000, 1);
}
