/* uw_libunwind.c: the libunwind back-end: a REMOTE_TABLE unw_dyn_info_t per
 * object, or one per arena whose table grows in place, given to
 * _U_dyn_register of a dlopen'ed (RTLD_LOCAL) libunwind. */
#include "unwindinfo/uw_int.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

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

int uw_libunwind_fns(dyn_fn *reg, dyn_fn *cancel) {
    pthread_once(&load_once, load);
    *reg = dyn_register;
    *cancel = dyn_cancel;
    return dyn_register != NULL;
}

/* What libunwind's REMOTE_TABLE search reads: entries sorted by start, both
 * fields relative to segbase. */
typedef struct table_entry {
    int32_t start_ip_offset;
    int32_t fde_offset;
} table_entry;

/* ---- One growing table per arena ---------------------------------------------
 * The region near the code holds [table entries | CIE, FDE, FDE, ...]. The
 * dyn info covers the whole arena from the start; libunwind reads
 * u.rti.table_len once per lookup, so an entry written past it is invisible
 * until the length is stored, and kernels come in address order, so the
 * table stays sorted by appending. An address in the arena with no entry
 * yet gives UNW_ENOINFO, as an unknown address does. */

struct uw_unw_table {
    unw_dyn_info_t di;     /* linked into libunwind's list: must not move */
    uw_region mem;
    uintptr_t lo, hi;
    size_t cap;            /* table entries the region has room for */
    size_t fde_at;         /* start of the CIE/FDE area in mem */
    size_t used;           /* end of the CIE/FDEs, relative to mem.p */
    size_t n;              /* published entries */
    size_t pend_end;       /* end of the prepared FDE (0: nothing prepared) */
    char *name;
};

/* The table's layout for a code span: *cap entries (kernels start at
 * least 16 bytes apart; the code cache aligns them further), the CIE/FDE
 * area from *fde_at on, with four times the code span for FDE bytes, which
 * no real kernel's CFI comes near. Returns the whole size. Reserved address
 * space costs nothing until it is written. */
static size_t table_layout(size_t span, size_t *cap, size_t *fde_at) {
    *cap = span / 16 + 1;
    *fde_at = (*cap * sizeof(table_entry) + 4095) & ~(size_t)4095;
    return (*fde_at + 4 * span + 4096 + 4095) & ~(size_t)4095;
}

/* The arena table's size: it is the one that must lie near the code. */
size_t uw_arena_room(size_t span) {
    size_t cap, fde_at;
    return table_layout(span, &cap, &fde_at);
}

fj_status uw_unw_table_create(uintptr_t lo, uintptr_t hi, const char *name, uintptr_t room,
                              size_t room_len, struct uw_unw_table **out) {
    *out = NULL;
    pthread_once(&load_once, load);
    if (!dyn_register) return FJ_OK;
    if (hi - lo > INT32_MAX / 8)
        return fj_fail(FJ_ERR_UNWIND, "libunwind: arena spans %zu bytes (more than 256 MiB)",
                       (size_t)(hi - lo));
    struct uw_unw_table *t = fj_calloc(1, sizeof *t);
    if (!t) return fj_fail(FJ_ERR_NO_MEMORY, "libunwind: out of memory");
    t->name = fj_strdup(name);
    if (!t->name) {
        fj_free(t);
        return fj_fail(FJ_ERR_NO_MEMORY, "libunwind: out of memory");
    }
    t->lo = lo;
    t->hi = hi;
    const size_t need = table_layout(hi - lo, &t->cap, &t->fde_at);
    uw_buf b = {0};
    uint8_t *cie = NULL;
    size_t cie_len = 0;
    fj_status st = FJ_OK;
    /* Room the code cache set aside next to the code is within reach by
     * construction; searching for some is the fallback (address space
     * near code that is never reused fills up as runtimes come and go). */
    if (room && room_len >= need) uw_region_adopt(&t->mem, (void *)room, need);
    else st = uw_region_reserve(&t->mem, need, lo, hi);
    if (st != FJ_OK) goto fail;
    uw_cie_put(&b, 1);
    if ((st = uw_buf_take(&b, &cie, &cie_len)) != FJ_OK) goto fail;
    st = uw_region_commit(&t->mem, t->fde_at + cie_len);
    if (st != FJ_OK) {
        fj_free(cie);
        goto fail;
    }
    memcpy(t->mem.p + t->fde_at, cie, cie_len);
    fj_free(cie);
    t->used = t->fde_at + cie_len;
    /* The first entry's page, touched now rather than by the first kernel
     * (a page fault; the table's length says 0, so nothing reads it). */
    *(volatile table_entry *)(void *)t->mem.p = (table_entry){0, 0};

    unw_dyn_info_t *di = &t->di;
    di->start_ip = lo;
    di->end_ip = hi;
    di->gp = 0;
    di->format = UNW_INFO_FORMAT_REMOTE_TABLE;
    di->u.rti.name_ptr = (unw_word_t)t->name;
    di->u.rti.segbase = lo;
    di->u.rti.table_len = 0;  /* in words: one per 8-byte entry */
    di->u.rti.table_data = (unw_word_t)t->mem.p;
    dyn_register(di);
    *out = t;
    return FJ_OK;
fail:
    uw_region_release(&t->mem);
    fj_free(t->name);
    fj_free(t);
    return st;
}

fj_status uw_unw_table_prepare(struct uw_unw_table *t, const uw_func *f) {
    t->pend_end = 0;
    if (t->n == t->cap)
        return fj_fail(FJ_ERR_NO_MEMORY, "libunwind: table of arena %s is full (%zu kernels)",
                       t->name, t->n);
    const size_t at = (t->used + 7) & ~(size_t)7;
    /* Made on the stack (a kernel's FDE is a few dozen bytes), then copied in. */
    uint8_t stack[256];
    uw_buf b = {stack, 0, sizeof stack, 0, 1};
    /* The CIE sits at fde_at, before this FDE's bytes. */
    fj_status st = uw_fde_put(&b, f, 0, -(ptrdiff_t)(at - t->fde_at));
    const size_t len = b.len;
    if (st == FJ_OK && b.oom) st = fj_fail(FJ_ERR_NO_MEMORY, "libunwind: out of memory");
    if (st == FJ_OK && at + len > t->mem.len)
        st = fj_fail(FJ_ERR_NO_MEMORY, "libunwind: CFI area of arena %s is full", t->name);
    if (st == FJ_OK) st = uw_region_commit(&t->mem, at + len);
    if (st == FJ_OK) memcpy(t->mem.p + at, b.p, len);
    if (!b.ext) fj_free(b.p);
    if (st != FJ_OK) return st;
    /* The table's pages come first in the region, below the CFI: they are
     * committed already whenever the CFI is. */
    table_entry *e = (table_entry *)t->mem.p + t->n;
    e->start_ip_offset = (int32_t)(f->start - t->lo);
    e->fde_offset = (int32_t)((uintptr_t)(t->mem.p + at) - t->lo);
    t->pend_end = at + len;
    return FJ_OK;
}

void uw_unw_table_publish(struct uw_unw_table *t) {
    if (!t->pend_end) return;
    t->n++;
    t->used = t->pend_end;
    t->pend_end = 0;
    /* Release: the entry and its FDE are written before the length says so. */
    __atomic_store_n(&t->di.u.rti.table_len,
                     (unw_word_t)(t->n * sizeof(table_entry) / sizeof(unw_word_t)),
                     __ATOMIC_RELEASE);
}

void uw_unw_table_destroy(struct uw_unw_table *t) {
    if (!t) return;
    dyn_cancel(&t->di);
    uw_region_release(&t->mem);
    fj_free(t->name);
    fj_free(t);
}

size_t uw_unw_table_bytes(const struct uw_unw_table *t) {
    /* What is written (the rest of the reservation is never touched). */
    return t ? sizeof *t + strlen(t->name) + 1 + t->n * sizeof(table_entry) + (t->used - t->fde_at)
             : 0;
}
