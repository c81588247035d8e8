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

typedef struct fj_options {
    int threads;          /* 0 = all online CPUs; FRAMEJIT_THREADS overrides */
    size_t cache_bytes;   /* code cache capacity; 0 = default (64 MiB) */
    fj_isa isa;           /* cap on the ISA; FRAMEJIT_ISA overrides. Asking
                             for an ISA the CPU lacks fails with
                             FJ_ERR_UNSUPPORTED. */
    int verify;           /* run the rbp/CFI verifier on every kernel
                             (FRAMEJIT_VERIFY=1 turns it on as well) */
} fj_options;

typedef struct fj_runtime fj_runtime;

FJ_API void fj_options_init(fj_options *o);
/* opts may be NULL (defaults). */
FJ_API fj_status fj_runtime_create(const fj_options *opts, fj_runtime **out);
/* Deregisters all unwind info and frees every kernel of the runtime. No
 * kernel of it may be running. NULL is ignored. */
FJ_API void fj_runtime_destroy(fj_runtime *rt);
/* The ISA the runtime's generators use. */
FJ_API fj_isa fj_runtime_isa(const fj_runtime *rt);

FJ_API const char *fj_status_str(fj_status s);
/* Thread-local detail of the last failure ("" if none). */
FJ_API const char *fj_last_error(void);

/* ---- eltwise --------------------------------------------------------- */

typedef enum fj_eltwise_op {
    FJ_ELT_RELU = 1,      /* dst = src > 0 ? src : alpha * src (alpha = 0: relu) */
} fj_eltwise_op;

/* dst[i] = op(src[i]) for i < n; src == dst (in place) is allowed, other
 * overlap is not. n == 0 is a no-op that still validates rt and op. */
FJ_API fj_status fj_eltwise_f32(fj_runtime *rt, fj_eltwise_op op, float alpha, float beta,
                                const float *src, float *dst, size_t n);

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
