/* uw_register.c: uw_register / uw_deregister over the three back-ends, and
 * parsing FRAMEJIT_UNWIND. */
#include "unwindinfo/uw_int.h"

#include <string.h>
#include <strings.h>

/* ---- FRAMEJIT_UNWIND ------------------------------------------------------ */

static const struct {
    const char *word;
    unsigned mask;
} backend_words[] = {
    {"libgcc", UW_LIBGCC},
    {"libunwind", UW_LIBUNWIND},
    {"gdb", UW_GDB},
    {"all", UW_ALL},
};

fj_status uw_parse_backends(const char *s, unsigned *out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "uw_parse_backends: NULL output");
    if (!s || !*s) {  /* unset or empty: the default */
        *out = UW_ALL;
        return FJ_OK;
    }
    unsigned mask = 0;
    int none = 0, words = 0;
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, ",");
        const char *w = p;
        p += n;
        if (*p == ',') p++;
        /* Tolerate spaces around words ("libgcc, gdb"). */
        while (n && (*w == ' ' || *w == '\t')) w++, n--;
        while (n && (w[n - 1] == ' ' || w[n - 1] == '\t')) n--;
        if (n == 0) continue;
        words++;
        if (n == 4 && strncasecmp(w, "none", 4) == 0) {
            none = 1;
            continue;
        }
        size_t k = 0;
        const size_t nwords = sizeof backend_words / sizeof backend_words[0];
        while (k < nwords && !(strlen(backend_words[k].word) == n &&
                               strncasecmp(w, backend_words[k].word, n) == 0))
            k++;
        if (k == nwords)
            return fj_fail(FJ_ERR_INVALID_ARG,
                           "FRAMEJIT_UNWIND: unknown back-end '%.*s' (use libgcc, libunwind, gdb, "
                           "all or none)",
                           (int)n, w);
        mask |= backend_words[k].mask;
    }
    if (none && words > 1)
        return fj_fail(FJ_ERR_INVALID_ARG, "FRAMEJIT_UNWIND: 'none' cannot be combined: '%s'",
                       s);
    *out = none ? 0 : words ? mask : UW_ALL;
    return FJ_OK;
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
