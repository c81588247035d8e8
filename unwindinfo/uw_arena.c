/* uw_arena.c: registration per code arena (uw.h, "Arenas"): drives the
 * three back-ends' growing tables and keeps gdb's objects few.
 *
 * Adding a kernel is prepare-then-publish: everything that can fail (copies,
 * CFI bytes, table space, the gdb object) happens first, in places no
 * unwinder reads yet; then each back-end publishes with a few ordered
 * stores, libgcc first because its self-check can still withdraw the
 * kernel. So a failed add leaves no back-end knowing the kernel. */
#include "unwindinfo/uw_int.h"

#include <string.h>

/* gdb objects: run i covers fns[first, first + n). Runs are kept like the
 * digits of a binary counter: sizes strictly decrease from the oldest run
 * to the newest after every merge, so there are at most log2(n) + 1. */
typedef struct gdb_run {
    size_t first, n;
    struct uw_gdb_entry *e;
} gdb_run;

struct uw_arena {
    unsigned backends;
    uintptr_t lo, hi;
    uintptr_t next;           /* the next kernel starts here or above */
    char *name;
    size_t count;
    struct uw_gcc_table *gcc;
    struct uw_unw_table *unw;
    /* gdb: copies of every kernel and its FDE, encoded once (objects are
     * rebuilt from them): fdes = [CIE][FDE 0][FDE 1]..., kernel i's at
     * fde_off[i]. */
    uw_func *fns;
    size_t fns_cap, copy_bytes;
    uw_buf fdes;
    size_t *fde_off;
    size_t fde_off_cap;
    gdb_run *runs;
    size_t nruns, runs_cap;
};

/* ---- Copies -------------------------------------------------------------- */

static void copy_free(uw_func *c) {
    fj_free((char *)c->name);
    fj_free((uw_rec *)c->recs);
    *c = (uw_func){0};
}

static fj_status copy_make(const uw_func *f, uw_func *c) {
    *c = *f;
    c->name = NULL;
    c->recs = NULL;
    c->name = fj_strdup(f->name);
    if (!c->name) return fj_fail(FJ_ERR_NO_MEMORY, "unwind arena: out of memory");
    if (f->nrecs) {
        uw_rec *r = fj_malloc(f->nrecs * sizeof *r);
        if (!r) {
            copy_free(c);
            return fj_fail(FJ_ERR_NO_MEMORY, "unwind arena: out of memory");
        }
        memcpy(r, f->recs, f->nrecs * sizeof *r);
        c->recs = r;
    }
    return FJ_OK;
}

/* Room for one more element in a growable array (doubling). */
static fj_status reserve_one(void **p, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return FJ_OK;
    size_t ncap = *cap ? 2 * *cap : 16;
    void *q = fj_realloc(*p, ncap * elem);
    if (!q) return fj_fail(FJ_ERR_NO_MEMORY, "unwind arena: out of memory");
    *p = q;
    *cap = ncap;
    return FJ_OK;
}

/* ---- gdb ----------------------------------------------------------------- */

/* The gdb object for kernels [first, first + n), whose FDEs end at
 * fdes offset `end`: our CIE, their FDEs copied with each CIE pointer
 * patched for its new place, a zero terminator. */
static fj_status run_entry(uw_arena *a, size_t first, size_t n, size_t end,
                           struct uw_gdb_entry **out) {
    const size_t cie = a->fde_off[0], from = a->fde_off[first], body = end - from;
    uint8_t *eh = fj_malloc(cie + body + 4);
    if (!eh) return fj_fail(FJ_ERR_NO_MEMORY, "unwind arena: out of memory");
    memcpy(eh, a->fdes.p, cie);
    memcpy(eh + cie, a->fdes.p + from, body);
    memset(eh + cie + body, 0, 4);
    for (size_t at = cie; at < cie + body;) {
        uint32_t len, back = (uint32_t)(at + 4);  /* to the CIE at 0 */
        memcpy(&len, eh + at, 4);
        memcpy(eh + at + 4, &back, 4);
        at += 4 + (size_t)len;
    }
    fj_status st = uw_gdb_entry_new_eh(a->fns + first, n, eh, cie + body + 4, out);
    fj_free(eh);
    return st;
}

/* End of kernel i's FDE (the next one's start, or the buffer's end). */
static size_t fde_end(const uw_arena *a, size_t i) {
    return i + 1 < a->count ? a->fde_off[i + 1] : a->fdes.len;
}

/* Merges the two newest runs while the older is not bigger. The merged
 * object goes into gdb's list before the two leave it, so every kernel is
 * always in at least one. A failed merge is not an error (the kernels stay
 * registered in smaller objects); it is tried again on the next add. */
static void gdb_merge(uw_arena *a) {
    while (a->nruns >= 2) {
        gdb_run *x = &a->runs[a->nruns - 2], *y = &a->runs[a->nruns - 1];
        if (x->n > y->n) return;
        struct uw_gdb_entry *m = NULL;
        if (run_entry(a, x->first, x->n + y->n, fde_end(a, y->first + y->n - 1), &m) != FJ_OK) {
            fj_log(2, "unwind arena %s: merging gdb objects failed: %s", a->name,
                   fj_last_error());
            return;
        }
        uw_gdb_entry_link(m);
        uw_gdb_entry_unlink(x->e);
        uw_gdb_entry_unlink(y->e);
        x->n += y->n;
        x->e = m;
        a->nruns--;
    }
}

/* ---- API ----------------------------------------------------------------- */

void uw_arena_destroy(uw_arena *a) {
    if (!a) return;
    /* Newest first, the reverse of registration. */
    while (a->nruns) uw_gdb_entry_unlink(a->runs[--a->nruns].e);
    uw_unw_table_destroy(a->unw);
    uw_gcc_table_destroy(a->gcc);
    for (size_t i = 0; i < a->count && a->fns; i++) copy_free(&a->fns[i]);
    fj_free(a->fns);
    fj_free(a->fde_off);
    fj_free(a->fdes.p);
    fj_free(a->runs);
    fj_free(a->name);
    fj_free(a);
}

fj_status uw_arena_create(unsigned backends, uintptr_t lo, uintptr_t hi, const char *name,
                          uw_arena **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "uw_arena_create: NULL output");
    *out = NULL;
    if (backends & ~(unsigned)UW_ALL)
        return fj_fail(FJ_ERR_INVALID_ARG, "uw_arena_create: unknown back-end bits %#x", backends);
    if (lo == 0 || hi <= lo)
        return fj_fail(FJ_ERR_INVALID_ARG, "uw_arena_create: bad span %#lx..%#lx",
                       (unsigned long)lo, (unsigned long)hi);
    if (!name || !*name) return fj_fail(FJ_ERR_INVALID_ARG, "uw_arena_create: no name");
    uw_arena *a = fj_calloc(1, sizeof *a);
    if (!a) return fj_fail(FJ_ERR_NO_MEMORY, "uw_arena_create: out of memory");
    a->backends = backends;
    a->lo = lo;
    a->hi = hi;
    a->next = lo;
    fj_status st = FJ_OK;
    a->name = fj_strdup(name);
    if (!a->name) st = fj_fail(FJ_ERR_NO_MEMORY, "uw_arena_create: out of memory");
    if (st == FJ_OK && (backends & UW_LIBGCC)) st = uw_gcc_table_create(lo, hi, &a->gcc);
    if (st == FJ_OK && (backends & UW_LIBUNWIND)) st = uw_unw_table_create(lo, hi, name, &a->unw);
    if (st != FJ_OK) {
        uw_arena_destroy(a);
        return st;
    }
    fj_log(2, "unwind: arena %s at %#lx..%#lx (%s%s%s)", name, (unsigned long)lo,
           (unsigned long)hi, a->gcc ? " libgcc" : "", a->unw ? " libunwind" : "",
           backends & UW_GDB ? " gdb" : "");
    *out = a;
    return FJ_OK;
}

fj_status uw_arena_add(uw_arena *a, const uw_func *f) {
    if (!a || !f) return fj_fail(FJ_ERR_INVALID_ARG, "uw_arena_add: NULL argument");
    fj_status st = uw_check_func(f);
    if (st != FJ_OK) return st;
    if (f->start < a->lo || f->size > a->hi - f->start)
        return fj_fail(FJ_ERR_INVALID_ARG, "uw_arena_add: %s at %#lx+%zu is outside arena %s",
                       f->name, (unsigned long)f->start, f->size, a->name);
    if (f->start < a->next)
        return fj_fail(FJ_ERR_INVALID_ARG,
                       "uw_arena_add: %s at %#lx is below the end of the previous kernel "
                       "(%#lx): kernels are added in address order",
                       f->name, (unsigned long)f->start, (unsigned long)a->next);

    const int gdb = (a->backends & UW_GDB) != 0;
    uw_func copy = {0};
    struct uw_gdb_entry *g = NULL;
    const size_t fdes_len = a->fdes.len;
    if (gdb) {
        if ((st = reserve_one((void **)&a->fns, &a->fns_cap, a->count, sizeof *a->fns)) != FJ_OK ||
            (st = reserve_one((void **)&a->fde_off, &a->fde_off_cap, a->count,
                              sizeof *a->fde_off)) != FJ_OK ||
            (st = reserve_one((void **)&a->runs, &a->runs_cap, a->nruns, sizeof *a->runs)) != FJ_OK ||
            (st = copy_make(f, &copy)) != FJ_OK)
            return st;
        /* Its FDE past the end of the others (absolute addresses, as gdb
         * wants them); the CIE pointer is fixed up per object. */
        if (a->count == 0 && a->fdes.len == 0) uw_cie_put(&a->fdes, 1);
        const size_t at = a->fdes.len;
        st = uw_fde_put(&a->fdes, f, 0, 0);
        if (st == FJ_OK && a->fdes.oom)
            st = fj_fail(FJ_ERR_NO_MEMORY, "unwind arena: out of memory");
        if (st != FJ_OK) goto fail;
        a->fde_off[a->count] = at;
        a->fns[a->count] = copy;  /* not counted until published */
        if ((st = run_entry(a, a->count, 1, a->fdes.len, &g)) != FJ_OK) goto fail;
    }
    if (a->gcc && (st = uw_gcc_table_prepare(a->gcc, f)) != FJ_OK) goto fail;
    if (a->unw && (st = uw_unw_table_prepare(a->unw, f)) != FJ_OK) goto fail;

    /* Publish. Only libgcc's self-check can still fail, so it goes first. */
    if (a->gcc && (st = uw_gcc_table_publish(a->gcc, f)) != FJ_OK) goto fail;
    if (a->unw) uw_unw_table_publish(a->unw);
    if (gdb) {
        size_t i = a->count;
        a->fns[i] = copy;
        a->copy_bytes += sizeof copy + strlen(copy.name) + 1 + copy.nrecs * sizeof(uw_rec);
        uw_gdb_entry_link(g);
        a->runs[a->nruns++] = (gdb_run){.first = i, .n = 1, .e = g};
    }
    a->count++;
    a->next = f->start + f->size;
    if (gdb) gdb_merge(a);
    return FJ_OK;
fail:
    uw_gdb_entry_free(g);
    copy_free(&copy);
    a->fdes.len = fdes_len;  /* drop the FDE; clear a sticky failure */
    a->fdes.oom = 0;
    return st;
}

void uw_arena_get_stats(const uw_arena *a, uw_arena_stats *st) {
    *st = (uw_arena_stats){0};
    if (!a) return;
    st->kernels = a->count;
    st->libgcc_bytes = uw_gcc_table_bytes(a->gcc);
    st->libunwind_bytes = uw_unw_table_bytes(a->unw);
    st->gdb_objects = a->nruns;
    st->gdb_bytes = a->copy_bytes + a->fns_cap * sizeof *a->fns + a->runs_cap * sizeof *a->runs +
                    a->fdes.cap + a->fde_off_cap * sizeof *a->fde_off;
    for (size_t i = 0; i < a->nruns; i++) st->gdb_bytes += uw_gdb_entry_bytes(a->runs[i].e);
}

fj_status uw_arena_check(const uw_arena *a) {
    if (!a) return fj_fail(FJ_ERR_INVALID_ARG, "uw_arena_check: NULL arena");
    if (a->gcc) {
        fj_status st = uw_gcc_table_check(a->gcc);
        if (st != FJ_OK) return st;
    }
    size_t bound = 1, total = 0;
    for (size_t n = a->count; n > 1; n >>= 1) bound++;
    for (size_t i = 0; i < a->nruns; i++) {
        if (a->runs[i].first != total)
            return fj_fail(FJ_ERR_UNWIND, "arena %s: gdb object %zu starts at kernel %zu, not %zu",
                           a->name, i, a->runs[i].first, total);
        total += a->runs[i].n;
    }
    if ((a->backends & UW_GDB) && (total != a->count || a->nruns > bound))
        return fj_fail(FJ_ERR_UNWIND, "arena %s: %zu gdb objects cover %zu of %zu kernels",
                       a->name, a->nruns, total, a->count);
    return FJ_OK;
}
