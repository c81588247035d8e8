/* fjtest.h: helpers shared by the Check suites. */
#ifndef FJTEST_H
#define FJTEST_H

#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

#include "framejit.h"

/* Runs a Check suite (takes ownership of it) and returns the process exit
 * status: EXIT_SUCCESS when every test passed. */
struct Suite;
int fjt_run_suite(struct Suite *s);

/* An error: status as expected (or just != OK if want == FJ_OK), a
 * non-empty message (Check assertions: for test files that use Check). */
#define FJT_ASSERT_ERR(expr, want)                                                          \
    do {                                                                                    \
        fj_status s_ = (expr);                                                              \
        ck_assert_msg(s_ != FJ_OK, "%s succeeded", #expr);                                  \
        if ((want) != FJ_OK)                                                                \
            ck_assert_msg(s_ == (want), "%s: %s, expected %s (%s)", #expr, fj_status_str(s_), \
                          fj_status_str(want), fj_last_error());                            \
        ck_assert_msg(fj_last_error() && fj_last_error()[0], "%s: empty fj_last_error()", #expr); \
    } while (0)
#define FJT_ASSERT_INVALID(expr) FJT_ASSERT_ERR(expr, FJ_ERR_INVALID_ARG)

/* How many random cases a differential test runs: the value of the
 * environment variable `name` if set (an absolute count), else dflt (the
 * CI count) times FRAMEJIT_FUZZ_SCALE (default 1; `scripts/dev fuzz` sets
 * it). */
long fjt_iters(const char *name, long dflt);

/* 1 if the CPU has what framejit's AVX-512 path needs (F, BW, DQ, VL). */
int fjt_have_avx512(void);
/* A runtime for isa with `threads` threads and the verifier on; creation
 * is Check-asserted. NULL if isa is AVX-512 and the CPU (or FRAMEJIT_ISA)
 * lacks it. */
fj_runtime *fjt_runtime(fj_isa isa, int threads);
/* The same runtime without Check assertions (NULL on failure, with
 * fj_last_error set): for threads and forked children, where a failed
 * assertion has no test to fail. */
fj_runtime *fjt_runtime_try(fj_isa isa, int threads);

/* Scans /proc/self/maps; returns 1 and describes the first mapping that is
 * both writable and executable, else 0. */
int fjt_maps_has_wx(char *detail, size_t n);

/* ---- unwinders ----------------------------------------------------------
 *
 * libunwind and libgcc are reached through dlopen/dlsym, never by linking:
 * libunwind.so also exports _Unwind_Backtrace, and linking it could make the
 * test's "libgcc" walk silently run libunwind instead (see DESIGN.md,
 * "libunwind exports _Unwind_* too"). Both handles are the same loaded
 * objects the library registers with. */

/* Loads both unwinders once. Returns 1, or 0 with a message. Not
 * async-signal-safe: call it before installing signal handlers. */
int fjt_unwind_load(char *err, size_t n);

/* Callee-saved registers as a frame sees them. */
enum { FJT_RBX, FJT_R12, FJT_R13, FJT_R14, FJT_R15, FJT_NCSR };

typedef struct fjt_frame {
    uintptr_t ip;               /* exact pc for the first/signal-interrupted
                                   frame, a return address for the others */
    uintptr_t csr[FJT_NCSR];    /* libunwind/libgcc walks only */
} fjt_frame;

/* A function's code range [lo, hi). */
typedef struct fjt_range {
    uintptr_t lo, hi;
} fjt_range;

/* The range of the function whose code contains fn (from the executable's
 * CFI, via libunwind). Returns 1 or 0. Not async-signal-safe. */
int fjt_fn_range(const void *fn, fjt_range *r);
/* Is ip, a return address (or exact pc), inside r? */
static inline int fjt_in_range(const fjt_range *r, uintptr_t ip) {
    return ip >= r->lo && ip <= r->hi;
}

/* The calling thread's stack [lo, hi). Not async-signal-safe. */
void fjt_stack_bounds(uintptr_t *lo, uintptr_t *hi);

/* The walks return the number of frames written to out (<= max), or -1.
 * libunwind: uc == NULL walks from its own frame (unw_getcontext);
 * otherwise from a signal context (unw_init_local2 with
 * UNW_INIT_SIGNAL_FRAME), the interrupted pc first. */
int fjt_walk_libunwind(const ucontext_t *uc, fjt_frame *out, int max);
/* libgcc's _Unwind_Backtrace from here (through a signal frame when called
 * in a handler); csr from _Unwind_GetGR. */
int fjt_walk_libgcc(fjt_frame *out, int max);
/* glibc backtrace() (libgcc underneath). Its first call loads libgcc_s:
 * call it once outside any handler first. */
int fjt_walk_backtrace(fjt_frame *out, int max);
/* A plain frame-pointer walk: out[0] = pc (skipped if 0), then the return
 * addresses [rbp+8] of the rbp chain, staying inside [lo, hi) of the
 * stack. Async-signal-safe. */
int fjt_walk_fp(uintptr_t pc, uintptr_t rbp, uintptr_t lo, uintptr_t hi, fjt_frame *out,
                int max);

/* Checks a walk: finds the first frame inside a framejit kernel
 * (fj_symbolize; its name must equal kname unless kname is NULL); if
 * direct_ret != 0 the next frame's ip must equal it; then frames inside
 * rs[0], rs[1], ... rs[nr-1] must follow in this order (rs[0] exactly at
 * the next frame if rs0_direct). Returns the kernel frame's index, or -1
 * with the reason in why. Async-signal-safe. */
int fjt_chain_check(const fjt_frame *f, int n, const char *kname, uintptr_t direct_ret,
                    const fjt_range *rs, int nr, int rs0_direct, char *why, size_t whylen);
/* Index of the first frame inside r at or after index from, or -1. */
int fjt_find_frame(const fjt_frame *f, int n, int from, const fjt_range *r);

/* Calls fn(a0..a5) (integer/pointer System V arguments) with rbx and
 * r12-r15 loaded from in[] at the call, and stores their values after the
 * call in out[]. The function that inlines this is the kernel's direct
 * caller; unwinders stepping out of fn into it must recover in[] for those
 * registers. The enclosing function must keep a frame pointer (the project
 * builds with -fno-omit-frame-pointer): the asm realigns rsp, which is only
 * safe while the CFA is rbp-based. Returns rax. */
static inline __attribute__((always_inline)) uint64_t
fjt_call_csr(const void *fn, const uint64_t in[FJT_NCSR], uint64_t out[FJT_NCSR], uint64_t a0,
             uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5) {
    register uint64_t rdi __asm__("rdi") = a0;
    register uint64_t rsi __asm__("rsi") = a1;
    register uint64_t rdx __asm__("rdx") = a2;
    register uint64_t rcx __asm__("rcx") = a3;
    register uint64_t r8 __asm__("r8") = a4;
    register uint64_t r9 __asm__("r9") = a5;
    register const void *r11 __asm__("r11") = fn;
    register const uint64_t *r10 __asm__("r10") = in;
    uint64_t rax = (uint64_t)(uintptr_t)out;
    __asm__ volatile(
        "mov %%rsp, %%rbx\n\t"
        "lea -128(%%rsp), %%rsp\n\t"     /* step over the red zone */
        "and $-16, %%rsp\n\t"
        "push %%rbx\n\t"                 /* the old rsp */
        "push %%rax\n\t"                 /* out */
        "mov 0(%%r10), %%rbx\n\t"
        "mov 8(%%r10), %%r12\n\t"
        "mov 16(%%r10), %%r13\n\t"
        "mov 24(%%r10), %%r14\n\t"
        "mov 32(%%r10), %%r15\n\t"
        "call *%%r11\n\t"
        "mov (%%rsp), %%rcx\n\t"
        "mov %%rbx, 0(%%rcx)\n\t"
        "mov %%r12, 8(%%rcx)\n\t"
        "mov %%r13, 16(%%rcx)\n\t"
        "mov %%r14, 24(%%rcx)\n\t"
        "mov %%r15, 32(%%rcx)\n\t"
        "mov 8(%%rsp), %%rsp\n\t"
        : "+a"(rax), "+r"(rdi), "+r"(rsi), "+r"(rdx), "+r"(rcx), "+r"(r8), "+r"(r9), "+r"(r10),
          "+r"(r11)
        :
        : "rbx", "r12", "r13", "r14", "r15", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3",
          "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
          "xmm14", "xmm15");
    return rax;
}

/* ---- every-instruction unwinding check (trap flag) ----------------------
 *
 * fjt_trace_kernel runs body(arg) from a fixed noinline chain
 *     fjt_trace_kernel -> fjt_trace_outer -> fjt_trace_inner -> body
 * with the x86 trap flag set, so a SIGTRAP handler (SA_SIGINFO, alternate
 * stack) stops after every instruction. At every stop whose pc is inside a
 * framejit kernel (fj_symbolize) it
 *   - unwinds from the signal context with libunwind and with libgcc
 *     (_Unwind_Backtrace through the signal frame), and requires both to
 *     give: the kernel frame at the exact pc, then the kernel's return
 *     address (read from [rsp] when the kernel was entered), then
 *     fjt_trace_inner, fjt_trace_outer and, if given, root;
 *   - walks the rbp chain from the context and requires it to miss the
 *     direct caller exactly at offset 0 (push rbp), offset 1 (mov rbp, rsp)
 *     and at ret, to find it everywhere else, and to reach the markers.
 * Non-kernel pcs (the body, the library's dispatch, callbacks a kernel
 * calls) are stepped through without checks. body must not tail-call the
 * kernel. Before tracing, body runs once untraced (kernel generation and
 * registration) and each unwinder runs once (their first calls allocate),
 * so the handler itself never allocates beyond what the unwinders do on
 * their own. The calling thread must be the one that runs the kernel
 * (threads = 1). */
typedef struct fjt_trace_opts {
    const void *root;       /* optional function the walks must also reach (e.g. main) */
    long max_steps;         /* safety cap on all stops, 0 = 50,000,000 */
    int no_warmup;          /* do not run body untraced first */
} fjt_trace_opts;

enum { FJT_TRACE_MAX_OFF = 1 << 16 };

typedef struct fjt_trace_result {
    long kernel_steps;      /* stops at kernel pcs (all kernels) */
    long outside_steps;     /* stops elsewhere */
    long entries;           /* stops at offset 0 */
    long rets;              /* stops at a ret */
    long lu_bad;            /* stops where libunwind did not give the chain */
    long gcc_bad;           /* stops where libgcc did not give the chain */
    long fp_miss;           /* stops where the rbp walk missed the direct caller */
    long fp_bad;            /* ... where that differed from "offset 0, 1 or ret" */
    long fp_chain_bad;      /* ... where the rbp walk did not reach the markers */
    int aborted;            /* max_steps reached */
    uintptr_t first_start;  /* start of the first kernel entered */
    const char *first_name; /* its name */
    long distinct;          /* distinct offsets of that kernel visited */
    char msg[512];          /* the first failure */
    uint8_t visited[FJT_TRACE_MAX_OFF / 8]; /* offsets of that kernel visited */
} fjt_trace_result;

/* 0 (and says why on stderr, naming `test`) where single-stepping cannot
 * run: under ThreadSanitizer a SIGTRAP can land inside its runtime while it
 * holds its own lock, and the handler's instrumented code then waits on
 * that lock forever (seen: test_reduce's trace hung in CI). The plain and
 * ASan builds trace every kernel. */
int fjt_can_trace(const char *test);
/* Returns 1 if the trace ran, reached a kernel and every check passed;
 * otherwise 0 (details in r). */
int fjt_trace_kernel(void (*body)(void *), void *arg, const fjt_trace_opts *o,
                     fjt_trace_result *r);
static inline int fjt_trace_visited(const fjt_trace_result *r, size_t off) {
    return off < FJT_TRACE_MAX_OFF && (r->visited[off / 8] >> (off % 8) & 1);
}
/* The every-instruction check of one call of fn (a kernel named name)
 * with a[0..5] as its integer arguments: fails the test unless the trace
 * ran, reached the kernel and every check passed. Skipped where
 * fjt_can_trace says so. */
void fjt_check_traced(const void *fn, const char *name, const int64_t a[6]);

/* ---- kernels the suites share ---------------------------------------- */

/* Values the kernels below put in their registers (sign-extended imm32). */
#define FJT_KREGS 12
#define FJT_KVAL(i) ((uint64_t)(0x4b000000u + 0x10101u * (unsigned)(i)))

/* Builds a kernel (uint64_t k(uint64_t a0, uint64_t a1)) that takes 12 GPRs
 * besides its two arguments, so the pool must hand out rbx and r12-r15
 * (saved in the prologue), writes FJT_KVAL(i) into them, zeroes a vector
 * register, calls cb(a0, a1) through fj_call if cb is non-NULL, and returns
 * 0 if every register still holds its value afterwards (non-zero
 * otherwise). Returns the fj_builder_finish status; on failure *out is
 * NULL and fj_last_error() says why. */
fj_status fjt_build_csr_kernel(fj_runtime *rt, const char *name, const void *cb, fj_kernel **out);

#endif
