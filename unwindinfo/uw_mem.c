/* uw_mem.c: memory for unwind tables that grow in place: a PROT_NONE
 * reservation made read-write front to back as it fills, optionally placed
 * within +-2 GiB of code (libunwind's tables hold 32-bit offsets). Never
 * executable: unwindinfo/ only ever describes code. */
#include "unwindinfo/uw_int.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static int fits_i32(intptr_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

/* Whole of [p, p + len) within 32-bit offsets of every byte of [lo, hi)? */
static int near_enough(uintptr_t p, size_t len, uintptr_t lo, uintptr_t hi) {
    return fits_i32((intptr_t)(p - lo)) && fits_i32((intptr_t)(p + len - lo)) &&
           fits_i32((intptr_t)(p - hi)) && fits_i32((intptr_t)(p + len - hi));
}

fj_status uw_region_reserve(uw_region *r, size_t len, uintptr_t near, uintptr_t near_hi) {
    *r = (uw_region){0};
    const size_t page = page_size();
    len = (len + page - 1) & ~(page - 1);
    if (fj_fault_hit(FJ_FAULT_MMAP))
        return fj_fail(FJ_ERR_NO_MEMORY, "unwind tables: cannot reserve %zu bytes: injected", len);
    /* The kernel takes an address hint when that range is free: just below
     * the code, just above it, then anywhere (still often close: mmap
     * allocates top-down next to recent mappings), then further below and
     * above in 64 MiB steps. "Anywhere" goes to the highest hole that fits,
     * which in a process that has mapped and freed a lot can be gigabytes
     * away, while the code's own neighbours are other code (seen with
     * thousands of kernels registered one by one next to each other). */
    enum { STEPS = 31 };
    const uintptr_t step = (uintptr_t)64 << 20;
    uintptr_t hints[3 + 2 * STEPS];
    size_t nh = 1;
    hints[0] = 0;
    if (near) {
        const uintptr_t lo = near & ~(uintptr_t)(page - 1);
        const uintptr_t hi = (near_hi + page - 1) & ~(uintptr_t)(page - 1);
        hints[0] = lo > len ? lo - len : 0;
        hints[1] = hi;
        hints[2] = 0;
        nh = 3;
        for (uintptr_t i = 1; i <= STEPS; i++) {
            if (lo > len + i * step && near_enough(lo - len - i * step, len, near, near_hi))
                hints[nh++] = lo - len - i * step;
            if (hi + i * step + len > hi && near_enough(hi + i * step, len, near, near_hi))
                hints[nh++] = hi + i * step;
        }
    }
    for (size_t i = 0; i < nh; i++) {
        void *p = mmap((void *)hints[i], len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (p == MAP_FAILED)
            return fj_fail(FJ_ERR_NO_MEMORY, "unwind tables: cannot reserve %zu bytes: %s", len,
                           strerror(errno));
        if (!near || near_enough((uintptr_t)p, len, near, near_hi)) {
            r->p = p;
            r->len = len;
            return FJ_OK;
        }
        munmap(p, len);
    }
    return fj_fail(FJ_ERR_UNWIND, "libunwind: no room for %zu bytes of CFI within 2 GiB of %#lx",
                   len, (unsigned long)near);
}

fj_status uw_region_commit(uw_region *r, size_t upto) {
    if (upto <= r->committed) return FJ_OK;
    if (upto > r->len)
        return fj_fail(FJ_ERR_NO_MEMORY, "unwind tables: %zu bytes needed, %zu reserved", upto,
                       r->len);
    /* 64 KiB steps keep the mprotect calls rare; pages stay untouched (and
     * free) until written. */
    const size_t step = (size_t)64 << 10;
    size_t want = (upto + step - 1) & ~(step - 1);
    if (want > r->len) want = r->len;
    int failed = fj_fault_hit(FJ_FAULT_MPROTECT);
    if (failed) errno = ENOMEM;
    if (failed || mprotect(r->p + r->committed, want - r->committed, PROT_READ | PROT_WRITE) != 0)
        return fj_fail(FJ_ERR_NO_MEMORY, "unwind tables: cannot commit %zu bytes: %s",
                       want - r->committed, strerror(errno));
    r->committed = want;
    return FJ_OK;
}

void uw_region_adopt(uw_region *r, void *p, size_t len) {
    *r = (uw_region){.p = p, .len = len, .lent = 1};
}

void uw_region_release(uw_region *r) {
    if (r->p && r->lent && r->committed) {
        /* The owner's range stays reserved: back to PROT_NONE, pages freed. */
        (void)madvise(r->p, r->committed, MADV_DONTNEED);
        (void)mprotect(r->p, r->committed, PROT_NONE);
    } else if (r->p && !r->lent) {
        munmap(r->p, r->len);
    }
    *r = (uw_region){0};
}
