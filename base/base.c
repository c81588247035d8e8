/* base.c: thread-local errors, the verbose log, metadata allocation and
 * the fault-injection hook. */
#include "base/base.h"

#include <mimalloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char err_msg[512];

fj_status fj_fail(fj_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    fj_log(1, "error: %s: %s", fj_status_str(s), err_msg);
    return s;
}

void fj_clear_error(void) { err_msg[0] = 0; }

const char *fj_last_error(void) { return err_msg; }

const char *fj_status_str(fj_status s) {
    switch (s) {
    case FJ_OK: return "ok";
    case FJ_ERR_INVALID_ARG: return "invalid argument";
    case FJ_ERR_NO_MEMORY: return "out of memory";
    case FJ_ERR_UNSUPPORTED: return "unsupported";
    case FJ_ERR_CODEGEN: return "code generation failed";
    case FJ_ERR_VERIFY: return "kernel rejected by the verifier";
    case FJ_ERR_OS: return "operating system call failed";
    case FJ_ERR_CACHE_FULL: return "code cache full";
    case FJ_ERR_UNWIND: return "unwind registration failed";
    }
    return "unknown status";
}

uint64_t fj_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int fj_env_flag(const char *name) {
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

/* -1: not read yet. Read once; the hot path tests a cached int. */
static atomic_int verbose_level = -1;

int fj_verbose(void) {
    int v = atomic_load_explicit(&verbose_level, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("FRAMEJIT_VERBOSE");
        v = e ? atoi(e) : 0;
        if (v < 0) v = 0;
        atomic_store_explicit(&verbose_level, v, memory_order_relaxed);
    }
    return v;
}

void fj_log(int level, const char *fmt, ...) {
    if (fj_verbose() < level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "framejit: %s\n", line);
}

static atomic_long fault_countdown[FJ_FAULT__N] = {-1, -1, -1, -1};

void fj_test_fault_inject(int cls, long countdown) {
    if (cls >= 0 && cls < FJ_FAULT__N) atomic_store(&fault_countdown[cls], countdown);
}

int fj_fault_hit(int cls) {
    if (atomic_load_explicit(&fault_countdown[cls], memory_order_relaxed) < 0) return 0;
    /* Fires exactly once, when the countdown passes zero. */
    return atomic_fetch_sub(&fault_countdown[cls], 1) == 0;
}

/* [cache] Sanitizer builds use the system allocator, so that ASan checks
 * and LeakSanitizer sees every metadata allocation (mimalloc's own pages
 * are invisible to it). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define mi_malloc malloc
#define mi_calloc calloc
#define mi_realloc realloc
#define mi_free free
#define mi_strdup strdup
#endif
void *fj_malloc(size_t n) { return fj_fault_hit(FJ_FAULT_ALLOC) ? NULL : mi_malloc(n); }
void *fj_calloc(size_t c, size_t s) { return fj_fault_hit(FJ_FAULT_ALLOC) ? NULL : mi_calloc(c, s); }
void *fj_realloc(void *p, size_t n) { return fj_fault_hit(FJ_FAULT_ALLOC) ? NULL : mi_realloc(p, n); }
void fj_free(void *p) { mi_free(p); }
char *fj_strdup(const char *s) { return fj_fault_hit(FJ_FAULT_ALLOC) ? NULL : mi_strdup(s); }
