/* fjtest.c: helpers shared by the Check suites: W^X scan of the address
 * space, unwinder walks (libunwind, libgcc, glibc backtrace, rbp chain)
 * and the trap-flag "every instruction unwinds" harness. */
#include "fjtest.h"

#include <check.h>
#include <stdlib.h>

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unwind.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "framejit.h"

int fjt_maps_has_wx(char *detail, size_t n) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        char perms[8] = {0};
        if (sscanf(line, "%*s %7s", perms) == 1 && perms[1] == 'w' && perms[2] == 'x') {
            if (detail && n) snprintf(detail, n, "%s", line);
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

/* ========================================================================
 * Unwinders, reached through dlsym
 * ===================================================================== */

static struct {
    int loaded;
    int (*getcontext)(unw_context_t *);
    int (*init_local)(unw_cursor_t *, unw_context_t *);
    int (*init_local2)(unw_cursor_t *, unw_context_t *, int);
    int (*step)(unw_cursor_t *);
    int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
    int (*proc_info_by_ip)(unw_addr_space_t, unw_word_t, unw_proc_info_t *, void *);
    unw_addr_space_t *as;
    _Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
    _Unwind_Ptr (*get_ip_info)(struct _Unwind_Context *, int *);
    _Unwind_Word (*get_gr)(struct _Unwind_Context *, int);
} uw;

int fjt_unwind_load(char *err, size_t n) {
    if (uw.loaded) return 1;
    void *lu = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    void *lg = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lu || !lg) {
        if (err && n) snprintf(err, n, "dlopen: %s", dlerror());
        return 0;
    }
#define SYM(h, field, name)                                                       \
    do {                                                                          \
        *(void **)&uw.field = dlsym(h, name);                                     \
        if (!uw.field) {                                                          \
            if (err && n) snprintf(err, n, "dlsym %s: %s", name, dlerror());      \
            return 0;                                                             \
        }                                                                         \
    } while (0)
    SYM(lu, getcontext, "_Ux86_64_getcontext");
    SYM(lu, init_local, "_ULx86_64_init_local");
    SYM(lu, init_local2, "_ULx86_64_init_local2");
    SYM(lu, step, "_ULx86_64_step");
    SYM(lu, get_reg, "_ULx86_64_get_reg");
    SYM(lu, proc_info_by_ip, "_ULx86_64_get_proc_info_by_ip");
    SYM(lu, as, "_ULx86_64_local_addr_space");
    SYM(lg, backtrace, "_Unwind_Backtrace");
    SYM(lg, get_ip_info, "_Unwind_GetIPInfo");
    SYM(lg, get_gr, "_Unwind_GetGR");
#undef SYM
    uw.loaded = 1;
    return 1;
}

int fjt_fn_range(const void *fn, fjt_range *r) {
    if (!uw.loaded && !fjt_unwind_load(NULL, 0)) return 0;
    unw_proc_info_t pi;
    memset(&pi, 0, sizeof pi);
    if (uw.proc_info_by_ip(*uw.as, (unw_word_t)(uintptr_t)fn, &pi, NULL) != 0) return 0;
    if (pi.start_ip > (uintptr_t)fn || pi.end_ip <= (uintptr_t)fn) return 0;
    r->lo = pi.start_ip;
    r->hi = pi.end_ip;
    return 1;
}

void fjt_stack_bounds(uintptr_t *lo, uintptr_t *hi) {
    pthread_attr_t a;
    void *addr = NULL;
    size_t size = 0;
    *lo = 0;
    *hi = UINTPTR_MAX;
    if (pthread_getattr_np(pthread_self(), &a) != 0) return;
    if (pthread_attr_getstack(&a, &addr, &size) == 0) {
        *lo = (uintptr_t)addr;
        *hi = (uintptr_t)addr + size;
    }
    pthread_attr_destroy(&a);
}

static const int lu_csr_regs[FJT_NCSR] = {UNW_X86_64_RBX, UNW_X86_64_R12, UNW_X86_64_R13,
                                          UNW_X86_64_R14, UNW_X86_64_R15};
/* DWARF numbers: rbx 3, r12..r15 12..15. */
static const int dw_csr_regs[FJT_NCSR] = {3, 12, 13, 14, 15};

/* noinline: the unw_context_t must live in a frame that stays put during
 * the walk. */
__attribute__((noinline)) int fjt_walk_libunwind(const ucontext_t *uc, fjt_frame *out, int max) {
    if (!uw.loaded || max <= 0) return -1;
    unw_cursor_t c;
    unw_context_t ctx;
    int rc;
    if (uc) {
        rc = uw.init_local2(&c, (unw_context_t *)(uintptr_t)uc, UNW_INIT_SIGNAL_FRAME);
    } else {
        uw.getcontext(&ctx);
        rc = uw.init_local(&c, &ctx);
    }
    if (rc != 0) return -1;
    int n = 0;
    do {
        unw_word_t v = 0;
        uw.get_reg(&c, UNW_REG_IP, &v);
        out[n].ip = v;
        for (int i = 0; i < FJT_NCSR; i++) {
            v = 0;
            uw.get_reg(&c, lu_csr_regs[i], &v);
            out[n].csr[i] = v;
        }
        n++;
    } while (n < max && uw.step(&c) > 0);
    return n;
}

typedef struct gcc_walk {
    fjt_frame *out;
    int n, max;
} gcc_walk;

static _Unwind_Reason_Code gcc_cb(struct _Unwind_Context *ctx, void *p) {
    gcc_walk *w = p;
    if (w->n >= w->max) return _URC_END_OF_STACK;
    int before = 0;
    fjt_frame *f = &w->out[w->n++];
    f->ip = uw.get_ip_info(ctx, &before);
    for (int i = 0; i < FJT_NCSR; i++) f->csr[i] = uw.get_gr(ctx, dw_csr_regs[i]);
    return _URC_NO_REASON;
}

__attribute__((noinline)) int fjt_walk_libgcc(fjt_frame *out, int max) {
    if (!uw.loaded || max <= 0) return -1;
    gcc_walk w = {out, 0, max};
    uw.backtrace(gcc_cb, &w);
    return w.n;
}

__attribute__((noinline)) int fjt_walk_backtrace(fjt_frame *out, int max) {
    void *ips[128];
    if (max > 128) max = 128;
    int n = backtrace(ips, max);
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].ip = (uintptr_t)ips[i];
    }
    return n;
}

int fjt_walk_fp(uintptr_t pc, uintptr_t rbp, uintptr_t lo, uintptr_t hi, fjt_frame *out,
                int max) {
    int n = 0;
    if (pc && n < max) {
        memset(&out[n], 0, sizeof out[n]);
        out[n++].ip = pc;
    }
    uintptr_t prev = 0;
    while (n < max) {
        if (rbp < lo || rbp + 16 > hi || (rbp & 7) || rbp <= prev) break;
        uintptr_t ra = ((const uintptr_t *)rbp)[1];
        if (!ra) break;
        memset(&out[n], 0, sizeof out[n]);
        out[n++].ip = ra;
        prev = rbp;
        rbp = ((const uintptr_t *)rbp)[0];
    }
    return n;
}

/* ---- async-signal-safe message formatting ---- */

static void why_put(char *why, size_t n, const char *s) {
    if (!why || !n) return;
    size_t len = strlen(why);
    while (*s && len + 1 < n) why[len++] = *s++;
    why[len] = 0;
}

static void why_hex(char *why, size_t n, uintptr_t v) {
    char buf[19];
    int i = 18;
    buf[i] = 0;
    do {
        buf[--i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v && i > 2);
    buf[--i] = 'x';
    buf[--i] = '0';
    why_put(why, n, buf + i);
}

static void why_dec(char *why, size_t n, long v) {
    char buf[24];
    int i = 23, neg = v < 0;
    unsigned long u = neg ? 0UL - (unsigned long)v : (unsigned long)v;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (neg) buf[--i] = '-';
    why_put(why, n, buf + i);
}

static void why_frames(char *why, size_t n, const fjt_frame *f, int nf) {
    why_put(why, n, " [frames:");
    for (int i = 0; i < nf && i < 12; i++) {
        why_put(why, n, " ");
        why_hex(why, n, f[i].ip);
        uintptr_t off;
        const char *k = fj_symbolize((const void *)f[i].ip, &off);
        if (k) {
            why_put(why, n, "=");
            why_put(why, n, k);
            why_put(why, n, "+");
            why_dec(why, n, (long)off);
        }
    }
    why_put(why, n, "]");
}

int fjt_find_frame(const fjt_frame *f, int n, int from, const fjt_range *r) {
    for (int i = from < 0 ? 0 : from; i < n; i++)
        if (fjt_in_range(r, f[i].ip)) return i;
    return -1;
}

int fjt_chain_check(const fjt_frame *f, int n, const char *kname, uintptr_t direct_ret,
                    const fjt_range *rs, int nr, int rs0_direct, char *why, size_t whylen) {
    if (why && whylen) why[0] = 0;
    int k = -1;
    for (int i = 0; i < n && k < 0; i++) {
        const char *name = fj_symbolize((const void *)f[i].ip, NULL);
        if (name && (!kname || !strcmp(name, kname))) k = i;
    }
    if (k < 0) {
        why_put(why, whylen, "no kernel frame");
        if (kname) {
            why_put(why, whylen, " named ");
            why_put(why, whylen, kname);
        }
        why_frames(why, whylen, f, n);
        return -1;
    }
    if (direct_ret && (k + 1 >= n || f[k + 1].ip != direct_ret)) {
        why_put(why, whylen, "frame after the kernel is not its return address ");
        why_hex(why, whylen, direct_ret);
        why_frames(why, whylen, f, n);
        return -1;
    }
    int at = k + 1;
    for (int j = 0; j < nr; j++) {
        int i = fjt_find_frame(f, n, at, &rs[j]);
        if (i < 0 || (j == 0 && rs0_direct && i != k + 1)) {
            why_put(why, whylen, i < 0 ? "marker " : "marker not the direct caller: ");
            why_dec(why, whylen, j);
            why_put(why, whylen, " not found after frame ");
            why_dec(why, whylen, at);
            why_frames(why, whylen, f, n);
            return -1;
        }
        at = i + 1;
    }
    return k;
}

/* ========================================================================
 * Trap-flag tracing
 * ===================================================================== */

#define TR_FRAMES 64
#define TF_BIT 0x100

void fjt_trace_outer(void (*body)(void *), void *arg);
void fjt_trace_inner(void (*body)(void *), void *arg);

static struct {
    volatile sig_atomic_t active;
    fjt_trace_result *r;
    fjt_range rs[3];
    int nr;
    uintptr_t ret_addr;       /* return address at the last kernel entry */
    uintptr_t stack_lo, stack_hi;
    long max_steps, steps;
} tr;

static void tr_fail(const char *what, uintptr_t off, const char *why) {
    fjt_trace_result *r = tr.r;
    if (r->msg[0]) return;
    why_put(r->msg, sizeof r->msg, what);
    why_put(r->msg, sizeof r->msg, " at offset ");
    why_dec(r->msg, sizeof r->msg, (long)off);
    why_put(r->msg, sizeof r->msg, ": ");
    why_put(r->msg, sizeof r->msg, why);
}

static void tr_handler(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    (void)si;
    ucontext_t *uc = ucv;
    greg_t *g = uc->uc_mcontext.gregs;
    if (!tr.active) {
        g[REG_EFL] &= ~(greg_t)TF_BIT;
        return;
    }
    fjt_trace_result *r = tr.r;
    if (++tr.steps > tr.max_steps) {
        g[REG_EFL] &= ~(greg_t)TF_BIT;
        r->aborted = 1;
        return;
    }
    uintptr_t pc = (uintptr_t)g[REG_RIP];
    uintptr_t off = 0;
    const char *name = fj_symbolize((const void *)pc, &off);
    if (!name) {
        r->outside_steps++;
        return;
    }
    r->kernel_steps++;
    uintptr_t start = pc - off;
    if (off == 0) {
        tr.ret_addr = *(const uintptr_t *)(uintptr_t)g[REG_RSP];
        r->entries++;
    }
    if (!r->first_start) {
        r->first_start = start;
        r->first_name = name;
    }
    if (start == r->first_start && off < FJT_TRACE_MAX_OFF) {
        if (!(r->visited[off / 8] >> (off % 8) & 1)) r->distinct++;
        r->visited[off / 8] |= (uint8_t)(1u << (off % 8));
    }
    const uint8_t *p = (const uint8_t *)pc;
    int is_ret = p[0] == 0xc3 || p[0] == 0xc2 || (p[0] == 0xf3 && p[1] == 0xc3);
    if (is_ret) r->rets++;

    fjt_frame f[TR_FRAMES];
    char why[400];

    /* libunwind from the signal context: the kernel frame first, at pc. */
    int n = fjt_walk_libunwind(uc, f, TR_FRAMES);
    int k = fjt_chain_check(f, n, NULL, tr.ret_addr, tr.rs, tr.nr, 0, why, sizeof why);
    if (k != 0 || f[0].ip != pc) {
        r->lu_bad++;
        tr_fail("libunwind", off, k > 0 ? "kernel is not the first frame" : why);
    }

    /* libgcc from here, through the signal frame. */
    n = fjt_walk_libgcc(f, TR_FRAMES);
    k = fjt_chain_check(f, n, NULL, tr.ret_addr, tr.rs, tr.nr, 0, why, sizeof why);
    if (k < 0 || f[k].ip != pc) {
        r->gcc_bad++;
        tr_fail("libgcc", off, k >= 0 ? "kernel frame is not at the interrupted pc" : why);
    }

    /* Plain rbp walk from the context. */
    n = fjt_walk_fp(pc, (uintptr_t)g[REG_RBP], tr.stack_lo, tr.stack_hi, f, TR_FRAMES);
    int found = 0;
    for (int i = 1; i < n; i++)
        if (f[i].ip == tr.ret_addr) found = 1;
    int expect_miss = off == 0 || off == 1 || is_ret;
    if (!found) r->fp_miss++;
    if (found == expect_miss) {
        r->fp_bad++;
        tr_fail("rbp walk", off, found ? "found the direct caller where it cannot (offset 0, 1 or ret)"
                                       : "missed the direct caller");
    }
    /* Held to the two markers only: C code built without frame pointers
     * (libcheck, say) may end an rbp chain before main. */
    if (fjt_chain_check(f, n, NULL, 0, tr.rs, 2, 0, why, sizeof why) != 0) {
        r->fp_chain_bad++;
        tr_fail("rbp walk chain", off, why);
    }
}

static inline __attribute__((always_inline)) void tf_set(void) {
    __asm__ volatile("lea -128(%%rsp), %%rsp\n\t"
                     "pushfq\n\t"
                     "orq $0x100, (%%rsp)\n\t"
                     "popfq\n\t"
                     "lea 128(%%rsp), %%rsp" ::: "memory", "cc");
}

static inline __attribute__((always_inline)) void tf_clear(void) {
    __asm__ volatile("lea -128(%%rsp), %%rsp\n\t"
                     "pushfq\n\t"
                     "andq $-257, (%%rsp)\n\t"
                     "popfq\n\t"
                     "lea 128(%%rsp), %%rsp" ::: "memory", "cc");
}

__attribute__((noipa)) void fjt_trace_inner(void (*body)(void *), void *arg) {
    tf_set();
    body(arg);
    tf_clear();
    __asm__ volatile("" ::: "memory");
}

__attribute__((noipa)) void fjt_trace_outer(void (*body)(void *), void *arg) {
    fjt_trace_inner(body, arg);
    __asm__ volatile("" ::: "memory");
}

#if defined(__SANITIZE_THREAD__)
#define FJT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FJT_TSAN 1
#endif
#endif

int fjt_can_trace(const char *test) {
#ifdef FJT_TSAN
    fprintf(stderr, "%s: single-stepping skipped under ThreadSanitizer (a SIGTRAP inside its "
            "runtime deadlocks the handler); the plain and ASan builds run it\n", test);
    return 0;
#else
    (void)test;
    return 1;
#endif
}

int fjt_trace_kernel(void (*body)(void *), void *arg, const fjt_trace_opts *o,
                     fjt_trace_result *r) {
    memset(r, 0, sizeof *r);
    fjt_trace_opts opts = {0};
    if (o) opts = *o;
    char err[256];
    if (!fjt_unwind_load(err, sizeof err)) {
        snprintf(r->msg, sizeof r->msg, "unwinders: %s", err);
        return 0;
    }
    memset(&tr, 0, sizeof tr);
    tr.r = r;
    tr.max_steps = opts.max_steps > 0 ? opts.max_steps : 50000000L;
    if (!fjt_fn_range((const void *)fjt_trace_inner, &tr.rs[0]) ||
        !fjt_fn_range((const void *)fjt_trace_outer, &tr.rs[1]) ||
        (opts.root && !fjt_fn_range(opts.root, &tr.rs[2]))) {
        snprintf(r->msg, sizeof r->msg, "no CFI range for a marker function");
        return 0;
    }
    tr.nr = opts.root ? 3 : 2;
    fjt_stack_bounds(&tr.stack_lo, &tr.stack_hi);

    /* Warm up: kernel generation and registration, then the unwinders'
     * first-call allocations (libgcc sorts newly registered objects on the
     * next search; glibc's backtrace loads libgcc_s). */
    if (!opts.no_warmup) body(arg);
    fjt_frame f[TR_FRAMES];
    fjt_walk_libunwind(NULL, f, TR_FRAMES);
    fjt_walk_libgcc(f, TR_FRAMES);
    fjt_walk_backtrace(f, TR_FRAMES);

    size_t ss_size = 1 << 20;
    void *ss_mem = mmap(NULL, ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ss_mem == MAP_FAILED) {
        snprintf(r->msg, sizeof r->msg, "mmap of the alternate stack failed");
        return 0;
    }
    stack_t ss = {.ss_sp = ss_mem, .ss_size = ss_size, .ss_flags = 0}, old_ss;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = tr_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaltstack(&ss, &old_ss);
    sigaction(SIGTRAP, &sa, &old_sa);

    tr.active = 1;
    fjt_trace_outer(body, arg);
    tr.active = 0;

    sigaction(SIGTRAP, &old_sa, NULL);
    sigaltstack(&old_ss, NULL);
    munmap(ss_mem, ss_size);

    if (!r->msg[0]) {
        if (r->aborted) snprintf(r->msg, sizeof r->msg, "step limit reached");
        else if (!r->kernel_steps) snprintf(r->msg, sizeof r->msg, "no stop inside a kernel");
        else if (!r->entries) snprintf(r->msg, sizeof r->msg, "kernel entry never seen");
        else if (!r->rets) snprintf(r->msg, sizeof r->msg, "kernel ret never seen");
    }
    return !r->aborted && r->kernel_steps > 0 && r->entries > 0 && r->rets > 0 && !r->lu_bad &&
           !r->gcc_bad && !r->fp_bad && !r->fp_chain_bad;
}

typedef int64_t (*fn6)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);

typedef struct call6 {
    const void *fn;
    int64_t a[6];
} call6;

static void call6_body(void *p) {
    const call6 *c = p;
    ((fn6)c->fn)(c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
    __asm__ volatile("" ::: "memory"); /* no tail call into the kernel */
}

void fjt_check_traced(const void *fn, const char *name, const int64_t a[6]) {
    if (!fjt_can_trace(name)) return;
    call6 c = {fn, {0}};
    memcpy(c.a, a, sizeof c.a);
    fjt_trace_result *r = calloc(1, sizeof *r);
    ck_assert_ptr_nonnull(r);
    fjt_trace_opts o = {0};
    ck_assert_msg(fjt_trace_kernel(call6_body, &c, &o, r), "%s: %s", name, r->msg);
    ck_assert_int_gt(r->kernel_steps, 0);
    free(r);
}

/* ========================================================================
 * Shared kernels
 * ===================================================================== */

fj_status fjt_build_csr_kernel(fj_runtime *rt, const char *name, const void *cb, fj_kernel **out) {
    *out = NULL;
    fj_builder *b;
    fj_status s = fj_builder_create(rt, name, 2, &b);
    if (s != FJ_OK) return s;
    fj_reg a0 = fj_arg(b, 0), a1 = fj_arg(b, 1);
    fj_reg g[FJT_KREGS];
    for (int i = 0; i < FJT_KREGS; i++) g[i] = fj_gpr(b);
    for (int i = 0; i < FJT_KREGS; i++) fj_emit(b, FJ_MOV, fj_r64(g[i]), fj_imm((int64_t)FJT_KVAL(i)));
    fj_reg v = fj_vreg(b);
    fj_emit(b, FJ_VXORPS, fj_vec(b, v), fj_vec(b, v), fj_vec(b, v));
    if (cb) {
        fj_opnd args[2] = {fj_r64(a0), fj_r64(a1)};
        fj_reg none = {0};
        fj_call(b, cb, args, 2, none);
    }
    for (int i = 0; i < FJT_KREGS; i++) fj_emit(b, FJ_SUB, fj_r64(g[i]), fj_imm((int64_t)FJT_KVAL(i)));
    for (int i = 1; i < FJT_KREGS; i++) fj_emit(b, FJ_OR, fj_r64(g[0]), fj_r64(g[i]));
    fj_return(b, fj_r64(g[0]));
    return fj_builder_finish(b, out);
}

int fjt_run_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

long fjt_iters(const char *name, long dflt) {
    const char *e = getenv(name);
    if (e && *e) return atol(e);
    e = getenv("FRAMEJIT_FUZZ_SCALE");
    long scale = e && *e ? atol(e) : 1;
    return dflt * (scale > 0 ? scale : 1);
}

int fjt_have_avx512(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

fj_runtime *fjt_runtime_try(fj_isa isa, int threads) {
    fj_options o;
    fj_options_init(&o);
    o.isa = isa;
    o.threads = threads;
    o.verify = 1;
    fj_runtime *rt = NULL;
    return fj_runtime_create(&o, &rt) == FJ_OK ? rt : NULL;
}

fj_runtime *fjt_runtime(fj_isa isa, int threads) {
    if (isa == FJ_ISA_AVX512 && !fjt_have_avx512()) return NULL;
    fj_runtime *rt = fjt_runtime_try(isa, threads);
    ck_assert_msg(rt != NULL, "fj_runtime_create: %s", fj_last_error());
    /* FRAMEJIT_ISA=avx2 caps the runtime below what was asked: tests of
     * AVX-512 paths then have nothing to test. */
    if (isa == FJ_ISA_AVX512 && fj_runtime_isa(rt) != FJ_ISA_AVX512) {
        fj_runtime_destroy(rt);
        return NULL;
    }
    return rt;
}
