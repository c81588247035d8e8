/* uw_object.c: the per-object registration path (uw_register and
 * uw_deregister of a set of kernels with libgcc, libunwind and gdb), for
 * the tests and framejit-bench only: not part of the library, whose
 * runtime registers kernels per arena (uw_arena.c). */
#include "unwindinfo/uw_object.h"
#include "unwindinfo/uw_int.h"
#include "unwindinfo/uw_libgcc.h"

#include <string.h>
#include <sys/mman.h>

/* Only the types: libunwind is never linked (uw_libunwind.c). */
#include <libunwind.h>

typedef void (*dyn_fn)(unw_dyn_info_t *);

struct uw_libunwind_reg;
struct uw_gdb_entry;

struct uw_object {
    uw_func *fns;        /* copies; names and records owned below */
    size_t n;
    uintptr_t lo, hi;    /* range covered by all functions */
    uint8_t *eh;         /* .eh_frame with absolute FDEs + terminator */
    size_t eh_len;
    size_t *fde_off;     /* per function, offset of its FDE in eh */
    unsigned done;       /* back-ends actually registered (UW_*) */
    struct uw_libunwind_reg *unw;
    struct uw_gdb_entry *gdb;
};

fj_status uw_eh_frame_build(const uw_func *fns, size_t n, uint8_t **out, size_t *len,
                            size_t *fde_off) {
    return uw_eh_frame_build_at(fns, n, 0, out, len, fde_off);
}

/* ---- libgcc: __register_frame of the object's .eh_frame ------------------- */

static fj_status uw_libgcc_register(uw_object *o) {
    /* libgcc keeps the pointer: o->eh must stay put until deregistration. */
    __register_frame(o->eh);
    /* Look every FDE up again, as LuaJIT's assert builds do: a mismatch
     * means another unwinder's __register_frame was bound, or the bytes are
     * wrong, and every later unwind through these kernels would fail. */
    for (size_t i = 0; i < o->n; i++) {
        struct dwarf_eh_bases bases = {0};
        /* A pc inside the function, as an unwinder asks for a return address. */
        void *pc = (void *)(o->fns[i].start + (o->fns[i].size > 1));
        const void *fde = _Unwind_Find_FDE(pc, &bases);
        if (fde != o->eh + o->fde_off[i] || bases.func != (void *)o->fns[i].start) {
            __deregister_frame(o->eh);
            return fj_fail(FJ_ERR_UNWIND,
                           "libgcc: FDE of %s not found after __register_frame (got %p)",
                           o->fns[i].name, fde);
        }
    }
    return FJ_OK;
}

static void uw_libgcc_deregister(uw_object *o) {
    /* Only ever called for a registered object: deregistering anything else
     * aborts inside libgcc. */
    __deregister_frame(o->eh);
}

/* ---- libunwind: a REMOTE_TABLE unw_dyn_info_t per object ------------------ */

/* What libunwind's REMOTE_TABLE search reads: entries sorted by start, both
 * fields relative to segbase. */
typedef struct table_entry {
    int32_t start_ip_offset;
    int32_t fde_offset;
} table_entry;

struct uw_libunwind_reg {
    unw_dyn_info_t di;  /* linked into libunwind's list: must not move */
    uw_region mem;      /* table + .eh_frame copy, near the code */
};

static fj_status uw_libunwind_register(uw_object *o, int *skipped) {
    *skipped = 0;
    dyn_fn dyn_register, dyn_cancel;
    if (!uw_libunwind_fns(&dyn_register, &dyn_cancel)) {
        *skipped = 1;
        return FJ_OK;
    }
    if (o->hi - o->lo > INT32_MAX)
        return fj_fail(FJ_ERR_UNWIND, "libunwind: kernels span %zu bytes (more than 2 GiB)",
                       (size_t)(o->hi - o->lo));

    struct uw_libunwind_reg *u = fj_calloc(1, sizeof *u);
    if (!u) return fj_fail(FJ_ERR_NO_MEMORY, "libunwind: out of memory");
    size_t table_bytes = o->n * sizeof(table_entry);
    fj_status st = uw_region_reserve(&u->mem, table_bytes + o->eh_len, o->lo, o->hi);
    if (st == FJ_OK) st = uw_region_commit(&u->mem, u->mem.len);
    if (st != FJ_OK) {
        uw_region_release(&u->mem);
        fj_free(u);
        return st;
    }
    table_entry *table = (table_entry *)u->mem.p;
    uint8_t *eh = u->mem.p + table_bytes;  /* 8-aligned: entries are 8 bytes */
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
    mprotect(u->mem.p, u->mem.len, PROT_READ);  /* hardening only; failure harmless */

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

static void uw_libunwind_deregister(uw_object *o) {
    struct uw_libunwind_reg *u = o->unw;
    if (!u) return;
    dyn_fn dyn_register, dyn_cancel;
    uw_libunwind_fns(&dyn_register, &dyn_cancel);   /* loaded: u exists */
    dyn_cancel(&u->di);
    uw_region_release(&u->mem);
    fj_free(u);
    o->unw = NULL;
}

/* ---- gdb: one in-memory ELF object per uw_object --------------------------- */

struct uw_gdb_entry {
    struct jit_code_entry *e;   /* in gdb's list */
    uint8_t *elf;
    size_t elf_len;
};

static fj_status uw_gdb_register(uw_object *o) {
    struct uw_gdb_entry *g = fj_calloc(1, sizeof *g);
    if (!g) return fj_fail(FJ_ERR_NO_MEMORY, "gdb jit: out of memory");
    fj_status st = uw_elf_build(o->fns, o->n, NULL, &g->elf, &g->elf_len);
    if (st == FJ_OK && !(g->e = uw_gdb_link(g->elf, g->elf_len)))
        st = fj_fail(FJ_ERR_NO_MEMORY, "gdb jit: out of memory");
    if (st != FJ_OK) {
        fj_free(g->elf);
        fj_free(g);
        return st;
    }
    o->gdb = g;
    return FJ_OK;
}

static void uw_gdb_deregister(uw_object *o) {
    struct uw_gdb_entry *g = o->gdb;
    if (!g) return;
    uw_gdb_unlink(g->e);
    fj_free(g->elf);
    fj_free(g);
    o->gdb = NULL;
}

/* ---- Objects ---------------------------------------------------------------- */

static void object_free(uw_object *o) {
    if (!o) return;
    if (o->fns) {
        for (size_t i = 0; i < o->n; i++) {
            fj_free((char *)o->fns[i].name);
            fj_free((uw_rec *)o->fns[i].recs);
        }
    }
    fj_free(o->fns);
    fj_free(o->eh);
    fj_free(o->fde_off);
    fj_free(o);
}

/* Copies fns (names, records) so the caller's buffers can go away. */
static fj_status object_new(const uw_func *fns, size_t n, uw_object **out) {
    uw_object *o = fj_calloc(1, sizeof *o);
    if (!o) return fj_fail(FJ_ERR_NO_MEMORY, "uw_register: out of memory");
    o->fns = fj_calloc(n, sizeof *o->fns);
    o->fde_off = fj_calloc(n, sizeof *o->fde_off);
    if (!o->fns || !o->fde_off) goto oom;
    o->n = n;
    for (size_t i = 0; i < n; i++) {
        uw_func *f = &o->fns[i];
        *f = fns[i];
        f->name = NULL;
        f->recs = NULL;
        f->prog = NULL;   /* the caller's: made again from the copied records */
        f->name = fj_strdup(fns[i].name);
        if (!f->name) goto oom;
        if (fns[i].nrecs) {
            uw_rec *r = fj_malloc(fns[i].nrecs * sizeof *r);
            if (!r) goto oom;
            memcpy(r, fns[i].recs, fns[i].nrecs * sizeof *r);
            f->recs = r;
        }
    }
    *out = o;
    return FJ_OK;
oom:
    object_free(o);
    return fj_fail(FJ_ERR_NO_MEMORY, "uw_register: out of memory");
}

/* Undoes registrations in the reverse of their order. */
static void unregister_all(uw_object *o) {
    if (o->done & UW_GDB) uw_gdb_deregister(o);
    if (o->done & UW_LIBUNWIND) uw_libunwind_deregister(o);
    if (o->done & UW_LIBGCC) uw_libgcc_deregister(o);
    o->done = 0;
}

fj_status uw_register(const uw_func *fns, size_t n, unsigned backends, uw_object **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "uw_register: NULL output");
    *out = NULL;
    if (backends & ~(unsigned)UW_ALL)
        return fj_fail(FJ_ERR_INVALID_ARG, "uw_register: unknown back-end bits %#x", backends);
    uintptr_t lo, hi;
    fj_status st = uw_check_funcs(fns, n, &lo, &hi);
    if (st != FJ_OK) return st;

    uw_object *o = NULL;
    st = object_new(fns, n, &o);
    if (st != FJ_OK) return st;
    o->lo = lo;
    o->hi = hi;
    st = uw_eh_frame_build(o->fns, n, &o->eh, &o->eh_len, o->fde_off);
    if (st != FJ_OK) goto fail;

    /* Order matters only for undoing: uw_deregister goes backwards. */
    if (backends & UW_LIBGCC) {
        st = uw_libgcc_register(o);
        if (st != FJ_OK) goto fail;
        o->done |= UW_LIBGCC;
    }
    if (backends & UW_LIBUNWIND) {
        int skipped;
        st = uw_libunwind_register(o, &skipped);
        if (st != FJ_OK) goto fail;
        if (!skipped) o->done |= UW_LIBUNWIND;
    }
    if (backends & UW_GDB) {
        st = uw_gdb_register(o);
        if (st != FJ_OK) goto fail;
        o->done |= UW_GDB;
    }
    fj_log(3, "unwind: registered %zu kernel(s) at %#lx..%#lx (%s%s%s)", n, (unsigned long)lo,
           (unsigned long)hi, o->done & UW_LIBGCC ? " libgcc" : "",
           o->done & UW_LIBUNWIND ? " libunwind" : "", o->done & UW_GDB ? " gdb" : "");
    *out = o;
    return FJ_OK;
fail:
    unregister_all(o);  /* all or nothing */
    object_free(o);
    return st;
}

void uw_deregister(uw_object *o) {
    if (!o) return;
    unregister_all(o);
    object_free(o);
}
