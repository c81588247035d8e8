/* base.h: what every folder may use: error reporting, the verbose log
 * and metadata allocation. It sits below kernels/, codecache/ and
 * unwindinfo/ (it knows none of them), so data still flows one way. */
#ifndef FJ_BASE_H
#define FJ_BASE_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "framejit.h"

#define FJ_INTERNAL __attribute__((visibility("hidden")))

/* Records status and a printf-style message as the calling thread's last
 * error (fj_last_error) and returns status, so callers write
 *     return fj_fail(FJ_ERR_OS, "mmap %zu bytes: %s", n, strerror(errno)); */
FJ_INTERNAL fj_status fj_fail(fj_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
FJ_INTERNAL void fj_clear_error(void);

/* CLOCK_MONOTONIC in nanoseconds. */
FJ_INTERNAL uint64_t fj_now_ns(void);

/* 1 if the environment variable is set to something other than "" or "0". */
FJ_INTERNAL int fj_env_flag(const char *name);

/* FRAMEJIT_VERBOSE level, read once on first use (0 = silent). */
FJ_INTERNAL int fj_verbose(void);
/* One line on stderr, prefixed "framejit: ", only if fj_verbose() >= level. */
FJ_INTERNAL void fj_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* fork() safety (runtime/fork.c). Before fork every layer takes its locks
 * (FJ_FORK_PREPARE), so that no other thread is inside framejit's shared
 * state when the process is copied; the parent then releases them
 * (FJ_FORK_PARENT) and the child, where only the forking thread exists,
 * makes them anew (FJ_FORK_CHILD). */
enum { FJ_FORK_PREPARE, FJ_FORK_PARENT, FJ_FORK_CHILD };
static inline void fj_fork_mutex(pthread_mutex_t *m, int phase) {
    if (phase == FJ_FORK_PREPARE) pthread_mutex_lock(m);
    else if (phase == FJ_FORK_PARENT) pthread_mutex_unlock(m);
    else pthread_mutex_init(m, NULL);
}

/* Metadata allocation (mimalloc). Executable memory never comes from here.
 * Each can be made to fail by the fault-injection hook below. */
FJ_INTERNAL void *fj_malloc(size_t n);
FJ_INTERNAL void *fj_calloc(size_t count, size_t size);
FJ_INTERNAL void *fj_realloc(void *p, size_t n);
FJ_INTERNAL void fj_free(void *p);
FJ_INTERNAL char *fj_strdup(const char *s);

/* Fault injection for tests: when fj_fault_countdown reaches zero the next
 * fallible call of the given class fails. -1 = off. Hidden like every
 * internal name: the tests and framejit-bench link the static library. */
enum { FJ_FAULT_ALLOC, FJ_FAULT_MMAP, FJ_FAULT_MPROTECT, FJ_FAULT_FILE, FJ_FAULT__N };
FJ_INTERNAL int fj_fault_hit(int cls);
FJ_INTERNAL void fj_test_fault_inject(int cls, long countdown);

#endif
