/* verbose.c: FRAMEJIT_VERBOSE lines: one per generated kernel (level 1),
 * one per execution (level 2), with the arena the kernel lives in. */
#include "runtime/publish.h"

#include <stdarg.h>
#include <stdio.h>

atomic_int rt_exec_level = -1;

uint64_t rt_exec_begin_slow(void) {
    int v = atomic_load_explicit(&rt_exec_level, memory_order_relaxed);
    if (v < 0) { /* first call: cache the level (fj_verbose reads it once too) */
        v = fj_verbose() >= 2 ? 2 : 0;
        atomic_store_explicit(&rt_exec_level, v, memory_order_relaxed);
    }
    if (v < 2) return 0;
    uint64_t t = fj_now_ns();
    return t ? t : 1;
}

void rt_exec_log(uint64_t t0, const char *what, const char *fmt, ...) {
    double us = (double)(fj_now_ns() - t0) / 1e3;
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    fj_log(2, "exec,%s,%.1f,%s", what ? what : "?", us, detail);
}

const char *rt_verbose_arena(const cc_entry *e, char *buf, size_t n) {
    cc_image_info info;
    if (!e) {
        snprintf(buf, n, "none");
        return buf;
    }
    if (cc_entry_image(e, &info) == FJ_OK)
        snprintf(buf, n, "file:%s", info.path);
    else
        snprintf(buf, n, "%s:arena-%llu", info.backing ? info.backing : "none",
                 (unsigned long long)info.arena_id);
    return buf;
}

void rt_verbose_kernel(const cc_entry *e, const char *isa, size_t code_bytes, double gen_us) {
    if (fj_verbose() < 1 || !e) return;
    char arena[96];
    fj_log(1, "kernel,%s,%s,%zu,%.1f,%s", e->name, isa, code_bytes, gen_us,
           rt_verbose_arena(e, arena, sizeof arena));
}
