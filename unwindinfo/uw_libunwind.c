/* uw_libunwind.c: the libunwind back-end: a REMOTE_TABLE unw_dyn_info_t per
 * object, given to _U_dyn_register of a dlopen'ed (RTLD_LOCAL) libunwind. */
#include "unwindinfo/uw_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Only the types: libunwind is never linked (it exports _Unwind_* too and,
 * as a DT_NEEDED, could take over the process's _Unwind_RaiseException). */
#include <libunwind.h>

typedef void (*dyn_fn)(unw_dyn_info_t *);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static dyn_fn dyn_register, dyn_cancel;

static void load(void) {
    /* If the application has its own libunwind this is the same loaded
     * object, so its unwinder sees our registrations. The handle is never
     * closed: registrations live inside the library. */
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fj_log(1, "libunwind not available (%s): skipping that back-end", dlerror());
        return;
    }
    dyn_fn r = (dyn_fn)dlsym(h, "_U_dyn_register");
    dyn_fn c = (dyn_fn)dlsym(h, "_U_dyn_cancel");
    if (!r || !c) {
        fj_log(1, "libunwind has no _U_dyn_register/_U_dyn_cancel: skipping that back-end");
        return;
    }
    dyn_register = r;
    dyn_cancel = c;
}

/* What libunwind's REMOTE_TABLE search reads: entries sorted by start, both
 * fields relative to segbase. */
typedef struct table_entry {
    int32_t start_ip_offset;
    int32_t fde_offset;
} table_entry;

struct uw_libunwind_reg {
    unw_dyn_info_t di;  /* linked into libunwind's list: must not move */
    void *map;          /* table + .eh_frame copy, near the code */
    size_t map_len;
};

static int fits_i32(intptr_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

/* The table's offsets are 32-bit, so the CFI must lie within 2 GiB of the
 * code; metadata from fj_malloc lives far away (mimalloc reserves its
 * segments above 2 TiB), so the copy goes into a small read-only mapping
 * placed next to the code when the kernel honours the hint. */
static void *map_near(uintptr_t lo, uintptr_t hi, size_t len) {
    if (fj_fault_hit(FJ_FAULT_MMAP)) return MAP_FAILED;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t below = (lo & ~(page - 1)) > len ? (lo & ~(page - 1)) - len : 0;
    const uintptr_t hints[] = {below, (hi + page - 1) & ~(page - 1), 0};
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++) {
        void *p = mmap((void *)hints[i], len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED) return p;
        if (fits_i32((intptr_t)((uintptr_t)p - lo)) &&
            fits_i32((intptr_t)((uintptr_t)p + len - lo)))
            return p;
        munmap(p, len);
    }
    errno = ERANGE;
    return MAP_FAILED;
}

fj_status uw_libunwind_register(uw_object *o, int *skipped) {
    *skipped = 0;
    pthread_once(&load_once, load);
    if (!dyn_register) {
        *skipped = 1;
        return FJ_OK;
    }
    if (o->hi - o->lo > INT32_MAX)
        return fj_fail(FJ_ERR_UNWIND, "libunwind: kernels span %zu bytes (more than 2 GiB)",
                       (size_t)(o->hi - o->lo));

    struct uw_libunwind_reg *u = fj_calloc(1, sizeof *u);
    if (!u) return fj_fail(FJ_ERR_NO_MEMORY, "libunwind: out of memory");
    size_t table_bytes = o->n * sizeof(table_entry);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    u->map_len = (table_bytes + o->eh_len + page - 1) & ~(page - 1);
    u->map = map_near(o->lo, o->hi, u->map_len);
    if (u->map == MAP_FAILED) {
        int e = errno;
        fj_free(u);
        return fj_fail(FJ_ERR_UNWIND, "libunwind: no memory for CFI within 2 GiB of %#lx: %s",
                       (unsigned long)o->lo, strerror(e));
    }
    table_entry *table = u->map;
    uint8_t *eh = (uint8_t *)u->map + table_bytes;  /* 8-aligned: entries are 8 bytes */
    memcpy(eh, o->eh, o->eh_len);

    /* segbase = lo; sort the entries by start (insertion: n is small and
     * usually already sorted). */
    const uintptr_t segbase = o->lo;
    for (size_t i = 0; i < o->n; i++) {
        table_entry e = {
            .start_ip_offset = (int32_t)(o->fns[i].start - segbase),
            .fde_offset = (int32_t)((uintptr_t)(eh + o->fde_off[i]) - segbase),
        };
        size_t j = i;
        for (; j > 0 && table[j - 1].start_ip_offset > e.start_ip_offset; j--)
            table[j] = table[j - 1];
        table[j] = e;
    }
    mprotect(u->map, u->map_len, PROT_READ);  /* hardening only; failure harmless */

    unw_dyn_info_t *di = &u->di;
    di->start_ip = o->lo;
    di->end_ip = o->hi;
    di->gp = 0;
    di->format = UNW_INFO_FORMAT_REMOTE_TABLE;
    di->u.rti.name_ptr = (unw_word_t)o->fns[0].name;
    di->u.rti.segbase = segbase;
    /* Counted in words, not bytes nor entries. */
    di->u.rti.table_len = table_bytes / sizeof(unw_word_t);
    di->u.rti.table_data = (unw_word_t)table;
    dyn_register(di);
    o->unw = u;
    return FJ_OK;
}

void uw_libunwind_deregister(uw_object *o) {
    struct uw_libunwind_reg *u = o->unw;
    if (!u) return;
    dyn_cancel(&u->di);
    munmap(u->map, u->map_len);
    fj_free(u);
    o->unw = NULL;
}
