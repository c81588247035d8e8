/* framejit.h: the public API of framejit.
 *
 * framejit generates x86-64 compute kernels at run time. Every kernel has a
 * frame-pointer frame (push rbp; mov rbp, rsp ... pop rbp; ret) and exact
 * DWARF CFI registered with libgcc, libunwind and the GDB JIT interface, so
 * perf -g, gdb, backtrace(), libunwind and C++ exceptions walk through it.
 *
 * Errors: every call that can fail returns an fj_status; FJ_OK is 0. The
 * detail of the last failure on the calling thread is in fj_last_error().
 * The library never exits, aborts or prints on bad input (it prints only
 * when FRAMEJIT_VERBOSE asks it to).
 */
#ifndef FRAMEJIT_H
#define FRAMEJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FJ_BUILDING_LIB)
#define FJ_API __attribute__((visibility("default")))
#else
#define FJ_API
#endif

typedef enum fj_status {
    FJ_OK = 0,
    FJ_ERR_INVALID_ARG,   /* NULL pointer, bad size, unknown op, bad register */
    FJ_ERR_NO_MEMORY,     /* metadata allocation failed */
    FJ_ERR_UNSUPPORTED,   /* the CPU or build lacks what was asked (e.g. ISA) */
    FJ_ERR_CODEGEN,       /* a kernel could not be generated (builder error) */
    FJ_ERR_VERIFY,        /* the rbp/CFI verifier rejected a kernel */
    FJ_ERR_OS,            /* mmap, mprotect, open ... failed */
    FJ_ERR_CACHE_FULL,    /* the code cache has no room left */
    FJ_ERR_UNWIND,        /* unwind info could not be registered */
} fj_status;

/* Instruction-set level the generators may use. */
typedef enum fj_isa {
    FJ_ISA_AUTO = 0,      /* best the CPU has */
    FJ_ISA_AVX2 = 1,      /* AVX2 + FMA, ymm0-15 */
    FJ_ISA_AVX512 = 2,    /* AVX-512 F/BW/DQ/VL, zmm0-31, k1-7 */
} fj_isa;

/* ---- stitching: work on other threads attributed to its caller -------
 *
 * A frame-pointer walk (perf record -g, eBPF ustack) from work that runs on
 * a worker thread normally ends at the worker's thread start: the profile
 * cannot tell who asked for the work. framejit's own workers run every
 * chunk under a frame record that points at the submitting thread's frame
 * in the framejit call, so samples on them read
 *     kernel -> ... -> fj_worker_run -> <framejit entry> -> your caller -> ... -> main
 * (the submitter's frames stay live: the call returns only after every
 * worker that joined is done). fj_origin does the same for an embedder's
 * own threads (OpenMP, TBB, a pthread pool):
 *
 *     fj_origin o;
 *     fj_origin_capture(&o);           // this function's place in its stack
 *     #pragma omp parallel
 *     fj_origin_run(&o, work, &arg);   // work(&arg), stitched to o
 *
 * Rules:
 * - The function that called fj_origin_capture must not return (nor
 *   longjmp past its frame) before every fj_origin_run using that origin
 *   has returned: the stitched walk reads its frames. It must keep a frame
 *   pointer (-fno-omit-frame-pointer), like the callers above it, for the
 *   walk to go on past it.
 * - fj_origin_run(o, fn, arg) calls fn(arg) on the calling thread, any
 *   thread, the capturing one included. Only frame-pointer walks follow the
 *   stitch: DWARF unwinders (backtrace(), C++ exceptions, libunwind, gdb)
 *   see fj_origin_run's real caller on the same thread, so an exception
 *   thrown in fn propagates out of fj_origin_run to its caller. libgomp's
 *   GOMP_parallel frame (which keeps data in rbp, breaking walks) is simply
 *   stepped over.
 * - Linux 6.17+'s deferred user unwinder accepts a step only if it goes up
 *   in address. framejit's workers have stacks mapped below any stack a
 *   caller's thread can get from the system, so their steps always do; for
 *   fj_origin_run on your threads that holds when the capturing thread's
 *   stack is above the running thread's (the main thread's always is above
 *   threads created with default stacks), and cannot be guaranteed
 *   otherwise. perf's classic walk (perf record -g) has no such limit.
 * Both functions are async-signal-safe and cost a few instructions. */
typedef struct fj_origin {
    uintptr_t opaque_[4];
} fj_origin;
FJ_API void fj_origin_capture(fj_origin *o);
FJ_API void fj_origin_run(const fj_origin *o, void (*fn)(void *arg), void *arg);

/* An embedder's pool running framejit's parallel work (fj_options
 * .parallel_for), as OpenBLAS's threads callback and oneDNN's threadpool
 * interface do: framejit calls parallel_for(ctx, n, body, body_arg), which
 * must call body(body_arg, i) exactly once for every i in [0, n), on any
 * threads (the calling one included) and in any order, and return after
 * all have returned. framejit splits the work into chunks for
 * fj_options.threads threads (set it to the pool's size), and results do
 * not depend on which threads run which chunks. Each chunk runs stitched
 * to the framejit call that made it. parallel_for may be called from
 * several threads at once (one call per framejit call in flight). */
typedef void (*fj_parallel_body)(void *body_arg, int64_t i);
typedef void (*fj_parallel_for_fn)(void *ctx, int64_t n, fj_parallel_body body, void *body_arg);

typedef struct fj_options {
    int threads;          /* 0 = all online CPUs; FRAMEJIT_THREADS overrides */
    size_t cache_bytes;   /* code cache capacity in bytes; 0 = default
                             (64 MiB). It bounds the code memory held by
                             the cache. When a new kernel would not fit,
                             kernels the runtime generated and caches
                             itself (GEMM, eltwise ... variants) that no
                             call is using are evicted, least recently
                             used first, and regenerated on their next
                             use; kernels the user holds (handles,
                             fj_builder_finish) are never evicted. If
                             nothing can go, the call fails with
                             FJ_ERR_CACHE_FULL. */
    fj_isa isa;           /* cap on the ISA; FRAMEJIT_ISA overrides. Asking
                             for an ISA the CPU lacks fails with
                             FJ_ERR_UNSUPPORTED. */
    int verify;           /* run the rbp/CFI verifier on every kernel
                             (FRAMEJIT_VERIFY=1 turns it on as well) */
    int huge_pages;       /* back code arenas with huge pages where the
                             system allows (FRAMEJIT_HUGEPAGES=1 as well);
                             FRAMEJIT_VERBOSE=1 says what it got */
    fj_parallel_for_fn parallel_for; /* NULL: framejit's own pool; else the
                             embedder's pool runs parallel work (see
                             fj_parallel_for_fn) */
    void *parallel_ctx;   /* parallel_for's first argument */
    unsigned cpu_disable; /* FJ_CPU_NO_* bits: instruction families the
                             generators must not use even where the CPU has
                             them (to test the fallbacks); FRAMEJIT_CPU_DISABLE
                             =vnni,bf16 adds to them */
} fj_options;

/* fj_options.cpu_disable bits. */
enum {
    FJ_CPU_NO_VNNI = 1,   /* no vpdpbusd (AVX512_VNNI, AVX-VNNI): int8 GEMM uses
                             vpmaddubsw + vpmaddwd */
    FJ_CPU_NO_BF16 = 2,   /* no vdpbf16ps (AVX512_BF16): bf16 is widened to f32 */
};

typedef struct fj_runtime fj_runtime;

FJ_API void fj_options_init(fj_options *o);
/* opts may be NULL (defaults). FJ_ERR_INVALID_ARG for a bad FRAMEJIT_*
 * value (FRAMEJIT_THREADS, FRAMEJIT_ISA, FRAMEJIT_UNWIND,
 * FRAMEJIT_KEEP_SECONDS, FRAMEJIT_KEEP_MB). */
FJ_API fj_status fj_runtime_create(const fj_options *opts, fj_runtime **out);
/* Deregisters all unwind info and frees every kernel of the runtime. No
 * kernel of it may be running. NULL is ignored. Its code files in /dev/shm
 * are kept read-only for tools that read them after the program (and their
 * read-only views stay mapped until exit), within FRAMEJIT_KEEP_SECONDS and
 * FRAMEJIT_KEEP_MB (docs/profiling.md, "Files after exit"). */
FJ_API void fj_runtime_destroy(fj_runtime *rt);
/* The ISA the runtime's generators use. */
FJ_API fj_isa fj_runtime_isa(const fj_runtime *rt);

FJ_API const char *fj_status_str(fj_status s);
/* Thread-local detail of the last failure ("" if none). */
FJ_API const char *fj_last_error(void);

/* ---- eltwise --------------------------------------------------------- */

/* Element-wise ops (oneDNN's eltwise algorithms, same alpha/beta meaning). */
typedef enum fj_eltwise_op {
    FJ_ELT_RELU = 1,      /* x > 0 ? x : alpha * x   (alpha = 0: plain relu) */
    FJ_ELT_LEAKY_RELU,    /* x > 0 ? x : alpha * x */
    FJ_ELT_CLIP,          /* min(max(x, alpha), beta) */
    FJ_ELT_LINEAR,        /* alpha * x + beta */
    FJ_ELT_ABS,           /* |x| */
    FJ_ELT_SQUARE,        /* x * x */
    FJ_ELT_SQRT,          /* sqrt(x) */
    FJ_ELT_EXP,           /* e^x */
    FJ_ELT_LOG,           /* ln(x) */
    FJ_ELT_TANH,          /* tanh(x) */
    FJ_ELT_SIGMOID,       /* 1 / (1 + e^-x) */
    FJ_ELT_GELU_TANH,     /* 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) */
    FJ_ELT_GELU_ERF,      /* 0.5x(1 + erf(x / sqrt(2))) */
    FJ_ELT_SWISH,         /* x * sigmoid(alpha * x) */
    FJ_ELT_HARDSWISH,     /* x * min(max(x + 3, 0), 6) / 6 */
    FJ_ELT__COUNT
} fj_eltwise_op;

/* dst[i] = op(src[i]) for i < n; src == dst (in place) is allowed, other
 * overlap is not. n == 0 is a no-op that still validates rt and op.
 *
 * Accuracy against double-precision libm, over the normal range (finite x,
 * normal result), the same on AVX-512 and AVX2; tests/test_eltwise.c
 * checks every 4093rd float bit pattern plus 2^20 values where each op is
 * interesting, against these bounds (measured maxima in brackets):
 *   relu, leaky_relu, clip, linear, abs, square, sqrt: correctly rounded
 *   exp, log, tanh, sigmoid: <= 2 ulp     (0.93, 1.49, 1.89, 1.43)
 *   swish <= 3.5 ulp (3.41 over every float, alpha 1 and 1.3, against
 *   x / (1 + e^-z) with z = alpha x rounded to float); hardswish <= 2.5 ulp
 *   (2.41)
 *   gelu_tanh, gelu_erf: <= 1e-6 absolute for x <= 12 (5.2e-7, 3.3e-7),
 *   <= 3 ulp above (0.0)
 * NaN in gives NaN out; infinities give the limits (exp(-inf) = 0,
 * log(0) = -inf, tanh(+-inf) = +-1, sigmoid(-inf) = 0 ...); overflow and
 * underflow round as libm does, denormal results included. */
FJ_API fj_status fj_eltwise_f32(fj_runtime *rt, fj_eltwise_op op, float alpha, float beta,
                                const float *src, float *dst, size_t n);

/* ---- GEMM --------------------------------------------------------------- */

/* C = alpha * op(A) * op(B) + beta * C, row-major, with dnnl_sgemm's
 * semantics: transa/transb 'N'/'n' or 'T'/'t'; op(A) is m x k, op(B) is
 * k x n; lda >= (transa == 'N' ? k : m) (and >= 1), likewise ldb, ldc >= n.
 * beta == 0 never reads C (NaN in C does not propagate). m, n or k == 0 is
 * fine (k == 0 scales C by beta). C may share no memory with A or B (or,
 * for a handle, the bias): an overlap is FJ_ERR_INVALID_ARG and C is left
 * as it was; matrices whose rows interleave in one wider array without
 * sharing an element are fine. */
FJ_API fj_status fj_gemm_f32(fj_runtime *rt, char transa, char transb,
                             int64_t m, int64_t n, int64_t k, float alpha,
                             const float *a, int64_t lda, const float *b, int64_t ldb,
                             float beta, float *c, int64_t ldc);

/* Create-once / execute-many GEMM with a fused epilogue: after alpha/beta,
 * bias[j] (per column of C, if has_bias) is added and post_op (an eltwise
 * op, 0 = none, with post_alpha/post_beta) applied before C is stored. */
typedef struct fj_gemm_desc {
    char transa, transb;
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    float alpha, beta;
    int has_bias;
    fj_eltwise_op post_op;     /* 0: none */
    float post_alpha, post_beta;
} fj_gemm_desc;

typedef struct fj_gemm fj_gemm;
FJ_API fj_status fj_gemm_create(fj_runtime *rt, const fj_gemm_desc *d, fj_gemm **out);
/* bias is ignored (may be NULL) unless the descriptor has has_bias. */
FJ_API fj_status fj_gemm_execute(const fj_gemm *g, const float *a, const float *b,
                                 const float *bias, float *c);
FJ_API void fj_gemm_destroy(fj_gemm *g);

/* ---- double-precision GEMM ------------------------------------------- */

/* fj_gemm_f32 in double precision: the same semantics, checks, errors and
 * aliasing rule, JIT kernels for AVX-512 and AVX2. */
FJ_API fj_status fj_gemm_f64(fj_runtime *rt, char transa, char transb, int64_t m, int64_t n,
                             int64_t k, double alpha, const double *a, int64_t lda,
                             const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

/* Create-once / execute-many f64 GEMM with a fused epilogue: after
 * alpha/beta, bias[j] (per column of C, if has_bias) is added and post_op
 * applied before C is stored. Every fj_eltwise_op is an f64 post-op
 * (0 = none), computed in double on AVX-512 and AVX2 alike. Accuracy
 * against long double, in ulps of the double result (tests/
 * test_gemm_f64_act.c checks these bounds on random and special values;
 * maxima measured over 300,000 values an op in brackets):
 *   relu, leaky_relu (any alpha), clip, linear (one FMA), abs, square,
 *   sqrt: correctly rounded
 *   exp <= 2 (0.97), log <= 2 (0.80), sigmoid <= 2.5 (1.99),
 *   tanh <= 3 (2.49), hardswish <= 2.5 (1.87), gelu_erf <= 7 (5.73)
 *   swish <= 3.5 (2.84) and gelu_tanh <= 3.5 (2.82), given their
 *   exponent's argument z = alpha x and v = x (c1 + c2 x^2) as rounded in
 *   double (the rounding of z itself moves e^-z by up to |z| 2^-53)
 * Denormal results included; NaN in gives NaN out; infinities give the
 * limits (exp(-inf) = 0, log(0) = -inf, tanh(+-inf) = +-1, swish(-inf) =
 * -0 for alpha > 0, hardswish(-inf) = 0, gelu_erf(-inf) = -0 ...). swish's and
 * gelu_tanh's x e^z is taken as 0 for z < -1416 (exact unless |x| > 1e290).
 * Destroyed with fj_gemm_destroy; executing it with fj_gemm_execute (or an
 * f32 handle with fj_gemm_f64_execute) is FJ_ERR_INVALID_ARG. */
typedef struct fj_gemm_f64_desc {
    char transa, transb;
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    double alpha, beta;
    int has_bias;
    fj_eltwise_op post_op;     /* 0: none */
    double post_alpha, post_beta;
} fj_gemm_f64_desc;

FJ_API fj_status fj_gemm_f64_create(fj_runtime *rt, const fj_gemm_f64_desc *d, fj_gemm **out);
/* bias is ignored (may be NULL) unless the descriptor has has_bias. */
FJ_API fj_status fj_gemm_f64_execute(const fj_gemm *g, const double *a, const double *b,
                                     const double *bias, double *c);

/* ---- low-precision GEMM (int8, bf16) ------------------------------------ */

/* Integer GEMM with dnnl_gemm_u8s8s32's semantics (row-major): op(A) is
 * m x k u8 (s8 for fj_gemm_s8s8s32), op(B) k x n s8, C m x n int32;
 * offsetc 'F' (co[0] for all of C), 'C' (co[i] per row: oneDNN's column
 * vector) or 'R' (co[j] per column: its row vector), upper or lower case.
 *   acc = sum_k (op(A)(i,k) - ao) * (op(B)(k,j) - bo)        int32, mod 2^32
 *   alpha == 1, beta 0 or 1: C = acc + beta*C + co              mod 2^32
 *   otherwise: C = sat(round(alpha*acc + beta*C)) + co (the last add mod 2^32)
 * with alpha*acc + beta*C in double, round half away from zero and sat
 * clamping to int32 (as oneDNN 2.6). beta == 0 never reads C. The result
 * is exact on every ISA path but one: without a dot-product instruction
 * (AVX-512 or AVX2 without VNNI, or FJ_CPU_NO_VNNI) the products are
 * summed in pairs of consecutive k (k = 2p, 2p+1) into int16 with
 * saturation (vpmaddubsw), so an element differs from the exact result
 * exactly when some pair has x(i,2p)*op(B)(2p,j) + x(i,2p+1)*op(B)(2p+1,j)
 * outside [-32768, 32767], with x = op(A) (u8s8) or op(A) + 128 (s8s8):
 * never with A < 128 (u8s8), or with |B| <= 64. C may share no memory with
 * A, B or co. Sizes and leading dimensions as fj_gemm_f32. */
FJ_API fj_status fj_gemm_u8s8s32(fj_runtime *rt, char transa, char transb, char offsetc,
                                 int64_t m, int64_t n, int64_t k, float alpha, const uint8_t *a,
                                 int64_t lda, uint8_t ao, const int8_t *b, int64_t ldb, int8_t bo,
                                 float beta, int32_t *c, int64_t ldc, const int32_t *co);
FJ_API fj_status fj_gemm_s8s8s32(fj_runtime *rt, char transa, char transb, char offsetc,
                                 int64_t m, int64_t n, int64_t k, float alpha, const int8_t *a,
                                 int64_t lda, int8_t ao, const int8_t *b, int64_t ldb, int8_t bo,
                                 float beta, int32_t *c, int64_t ldc, const int32_t *co);
/* C = alpha * op(A) * op(B) + beta * C with A and B bf16 (the upper 16 bits
 * of an IEEE float, stored as uint16_t) and C f32, row-major. Products are
 * exact in f32 and summed in f32 (in pairs of consecutive k, then along k);
 * with AVX512_BF16 (vdpbf16ps) denormal inputs and products count as zero.
 * beta == 0 never reads C. */
FJ_API fj_status fj_gemm_bf16bf16f32(fj_runtime *rt, char transa, char transb, int64_t m,
                                     int64_t n, int64_t k, float alpha, const uint16_t *a,
                                     int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                                     float *c, int64_t ldc);

/* Create-once / execute-many low-precision GEMM for inference, with the
 * epilogue fused into the kernel's store:
 *   int8 (a_type u8 or s8, b_type s8):
 *     acc = sum_k (op(A)(i,k) - ao) * (op(B)(k,j) - bo)      int32, mod 2^32
 *     y   = act(scale * float(acc) + bias[j])   scale = scales[j] per column
 *                                               (scale_per_column) or scales[0]
 *   bf16 (a_type, b_type bf16): y = act(op(A) * op(B) + bias[j]) in f32
 * with act the eltwise post_op (0 = none; the same code as fj_eltwise_f32)
 * and bias only if has_bias. The result C(i,j) is y (c_type f32), y
 * rounded to bf16, nearest even (bf16 inputs only), or requantized
 * (int8 inputs, c_type u8 or s8):
 *     q = clamp(rint(y * out_scale), lo - out_zero, hi - out_zero) + out_zero
 * rint to nearest even, [lo, hi] the output type's range; NaN gives lo.
 * float(acc) rounds to nearest even; scale*x + bias is a product then a
 * sum (no fused multiply-add), so results are reproducible exactly in C.
 * ldc counts elements of c_type. AVX2 kernels store u8/s8/bf16 results as
 * dwords into a scratch buffer that the driver narrows. */
typedef enum fj_dtype {
    FJ_DT_F32 = 1, FJ_DT_S32, FJ_DT_U8, FJ_DT_S8, FJ_DT_BF16,
} fj_dtype;

typedef struct fj_gemm_lowp_desc {
    fj_dtype a_type, b_type, c_type;
    char transa, transb;
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    int32_t ao, bo;            /* int8: zero points of A and B (in their types' range) */
    int scale_per_column;      /* int8: scales[j] (else scales[0] for all of C) */
    int has_bias;              /* bias[j] (f32) added before the activation */
    fj_eltwise_op post_op;     /* 0: none */
    float post_alpha, post_beta;
    float out_scale;           /* u8/s8 output: y * out_scale, then + out_zero */
    int32_t out_zero;
} fj_gemm_lowp_desc;

typedef struct fj_gemm_lowp fj_gemm_lowp;
FJ_API fj_status fj_gemm_lowp_create(fj_runtime *rt, const fj_gemm_lowp_desc *d,
                                     fj_gemm_lowp **out);
/* a, b: the input types; scales: int8 only (NULL for bf16); bias: only
 * read if has_bias; c: c_type. C may share no memory with A or B. */
FJ_API fj_status fj_gemm_lowp_execute(const fj_gemm_lowp *g, const void *a, const void *b,
                                      const float *scales, const float *bias, void *c);
FJ_API void fj_gemm_lowp_destroy(fj_gemm_lowp *g);

/* ---- reductions and softmax ------------------------------------------- */

typedef enum fj_reduce_op {
    FJ_REDUCE_SUM = 1, FJ_REDUCE_MAX, FJ_REDUCE_MIN, FJ_REDUCE_MEAN, FJ_REDUCE_L2,
    FJ_REDUCE__COUNT
} fj_reduce_op;

/* dst[r] = reduce(src[r * ld + 0 .. cols)) for r < rows; ld >= cols.
 * cols == 0: sum/L2 give 0, mean gives NaN, max gives -Inf, min +Inf. The
 * result does not depend on the thread count. max/min skip NaN (as
 * fmaxf/fminf); sum, mean and L2 propagate it. Sums are float, in a fixed
 * tree of partial sums. L2 is sqrt of the float sum of squares (no
 * hypot-style scaling): +Inf once that sum passes FLT_MAX (elements from
 * ~1.8e19), and squares below FLT_MIN round to denormals or 0 (elements
 * under ~1e-19; an absolute error up to sqrt(cols * 2^-149)). */
FJ_API fj_status fj_reduce_f32(fj_runtime *rt, fj_reduce_op op, int64_t rows, int64_t cols,
                               const float *src, int64_t ld, float *dst);

/* Softmax (log_softmax if log != 0) over each row, numerically stable
 * (the row max is subtracted). src == dst with equal ld is allowed. */
FJ_API fj_status fj_softmax_f32(fj_runtime *rt, int log, int64_t rows, int64_t cols,
                                const float *src, int64_t ld_src, float *dst, int64_t ld_dst);

/* ---- code cache statistics -------------------------------------------- */

typedef struct fj_cache_stats {
    uint64_t hits;            /* kernel requests served by a cached kernel */
    uint64_t misses;          /* ... that had to generate one */
    uint64_t evictions;       /* kernels evicted to make room */
    uint64_t live_kernels;    /* kernels in the code cache now (cached and held) */
    size_t bytes_used;        /* code bytes of those kernels */
    size_t bytes_reserved;    /* bytes of code arenas currently mapped */
} fj_cache_stats;

/* A snapshot of rt's code cache. Counters only grow over the runtime's
 * life. Thread-safe. */
FJ_API fj_status fj_cache_stats_get(fj_runtime *rt, fj_cache_stats *out);

/* ---- symbolization --------------------------------------------------- */

/* Async-signal-safe, lock-free: the name of the framejit kernel whose code
 * contains pc, or NULL. *offset (if offset is non-NULL) receives pc minus
 * the kernel's start. The name stays valid while the kernel is live. */
FJ_API const char *fj_symbolize(const void *pc, uintptr_t *offset);

#ifdef __cplusplus
}
#endif

#include "framejit/builder.h"

#endif /* FRAMEJIT_H */
