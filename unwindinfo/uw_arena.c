/* uw_arena.c: registration per code arena (uw.h, "Arenas"): drives the
 * three back-ends' growing tables and keeps gdb's objects few.
 *
 * Adding a kernel is prepare-then-publish: everything that can fail (the
 * CFI bytes, table space, the gdb object) happens first, in places no
 * unwinder reads yet; then each back-end publishes with a few ordered
 * stores, libgcc first because its self-check can still withdraw the
 * kernel. So a failed add leaves no back-end knowing the kernel. */
#include "unwindinfo/uw_int.h"

#include <pthread.h>
#include <string.h>

/* gdb: kernels go into chunks (uw_gdbjit.c) that grow in place; a chunk
 * holds at most CHUNK_MAX kernels so that gdb, when attached, re-reads a
 * bounded object per kernel. The first chunks are small: an arena that
 * only ever holds a few kernels pays for a few. */
enum { CHUNK_FIRST = 16, CHUNK_MAX = 256, FDE_GUESS = 48, NAME_GUESS = 32 };

struct uw_arena {
    unsigned backends;
    uintptr_t lo, hi;
    uintptr_t next;           /* the next kernel starts here or above */
    char *name;
    size_t count;
    struct uw_gcc_table *gcc;
    struct uw_unw_table *unw;
    struct uw_gdb_chunk **chunks;
    size_t nchunks, chunks_cap;
    struct uw_gdb_chunk *spare; /* the first chunk, made with the arena (not in gdb's list) */
    uw_buf fde;               /* scratch: the FDE being added */
};

/* Held across the calls below that reach libgcc's and libunwind's own
 * registration locks, so that fork (uw_fork) never copies one of those
 * held by a thread of ours. */
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;

void uw_fork(int phase) {
    if (phase == FJ_FORK_PREPARE) fj_fork_mutex(&arena_lock, phase);
    uw_gdb_fork(phase);
    uw_jitdump_fork(phase);
    uw_perfmap_fork(phase);
    if (phase != FJ_FORK_PREPARE) fj_fork_mutex(&arena_lock, phase);
}

/* Room for one more element in a growable array (doubling). */
static fj_status reserve_one(void **p, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return FJ_OK;
    size_t ncap = *cap ? 2 * *cap : 8;
    void *q = fj_realloc(*p, ncap * elem);
    if (!q) return fj_fail(FJ_ERR_NO_MEMORY, "unwind arena: out of memory");
    *p = q;
    *cap = ncap;
    return FJ_OK;
}

/* Stages f in the newest chunk, or in a new one (*fresh, not yet in the
 * list) when that one is full. */
static fj_status gdb_stage(uw_arena *a, const uw_func *f, struct uw_gdb_chunk **fresh) {
    *fresh = NULL;
    a->fde.len = 0;
    a->fde.oom = 0;
    /* The CIE pointer is patched when the FDE is placed. */
    fj_status st = uw_fde_put(&a->fde, f, 0, 0);
    if (st == FJ_OK && a->fde.oom) st = fj_fail(FJ_ERR_NO_MEMORY, "unwind arena: out of memory");
    if (st != FJ_OK) return st;
    if ((st = reserve_one((void **)&a->chunks, &a->chunks_cap, a->nchunks, sizeof *a->chunks)) !=
        FJ_OK)
        return st;
    if (a->nchunks && uw_gdb_chunk_stage(a->chunks[a->nchunks - 1], f, a->fde.p, a->fde.len))
        return FJ_OK;
    /* The first kernel: into the chunk made with the arena, if it fits. */
    if (!a->nchunks && a->spare) {
        *fresh = a->spare;
        a->spare = NULL;
        if (uw_gdb_chunk_stage(*fresh, f, a->fde.p, a->fde.len)) return FJ_OK;
        uw_gdb_chunk_free(*fresh);
        *fresh = NULL;
    }
    size_t k = CHUNK_FIRST << (a->nchunks < 5 ? a->nchunks : 5);
    if (k > CHUNK_MAX) k = CHUNK_MAX;
    size_t eh = k * FDE_GUESS, str = k * NAME_GUESS, name = strlen(f->name) + 1;
    if (eh < 2 * a->fde.len) eh = 2 * a->fde.len;
    if (str < 2 * name) str = 2 * name;
    if ((st = uw_gdb_chunk_new(k, eh, str, fresh)) != FJ_OK) return st;
    if (!uw_gdb_chunk_stage(*fresh, f, a->fde.p, a->fde.len)) {
        uw_gdb_chunk_free(*fresh);
        *fresh = NULL;
        return fj_fail(FJ_ERR_UNWIND, "unwind arena %s: no room for %s in a new gdb object",
                       a->name, f->name);
    }
    return FJ_OK;
}

/* ---- API ----------------------------------------------------------------- */

static void arena_destroy(uw_arena *a) {
    /* Newest first, the reverse of registration. */
    while (a->nchunks) uw_gdb_chunk_free(a->chunks[--a->nchunks]);
    uw_gdb_chunk_free(a->spare);
    uw_unw_table_destroy(a->unw);
    uw_gcc_table_destroy(a->gcc);
    fj_free(a->chunks);
    fj_free(a->fde.p);
    fj_free(a->name);
    fj_free(a);
}

void uw_arena_destroy(uw_arena *a) {
    if (!a) return;
    pthread_mutex_lock(&arena_lock);
    arena_destroy(a);
    pthread_mutex_unlock(&arena_lock);
}

fj_status uw_arena_create(unsigned backends, uintptr_t lo, uintptr_t hi, const char *name,
                          uw_arena **out) {
    return uw_arena_create_at(backends, lo, hi, name, 0, 0, out);
}

fj_status uw_arena_create_at(unsigned backends, uintptr_t lo, uintptr_t hi, const char *name,
                             uintptr_t room, size_t room_len, uw_arena **out) {
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
    pthread_mutex_lock(&arena_lock);
    if (st == FJ_OK && (backends & UW_LIBGCC)) st = uw_gcc_table_create(lo, hi, &a->gcc);
    if (st == FJ_OK && (backends & UW_LIBUNWIND))
        st = uw_unw_table_create(lo, hi, name, room, room_len, &a->unw);
    if (st != FJ_OK) arena_destroy(a);
    pthread_mutex_unlock(&arena_lock);
    if (st != FJ_OK) return st;
    /* gdb's first object, made now rather than by the first kernel (an
     * arena is made ahead of its kernels: the runtime's first one with the
     * runtime). Not registered until a kernel is in it; if it cannot be
     * made here, the first kernel makes it (and reports why not). */
    if ((backends & UW_GDB) &&
        uw_gdb_chunk_new(CHUNK_FIRST, CHUNK_FIRST * FDE_GUESS, CHUNK_FIRST * NAME_GUESS,
                         &a->spare) != FJ_OK)
        a->spare = NULL;
    fj_log(2, "unwind: arena %s at %#lx..%#lx (%s%s%s)", name, (unsigned long)lo,
           (unsigned long)hi, a->gcc ? " libgcc" : "", a->unw ? " libunwind" : "",
           backends & UW_GDB ? " gdb" : "");
    *out = a;
    return FJ_OK;
}

static fj_status arena_add(uw_arena *a, const uw_func *f) {
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
    struct uw_gdb_chunk *fresh = NULL;
    if (gdb && (st = gdb_stage(a, f, &fresh)) != FJ_OK) return st;
    if (a->gcc && (st = uw_gcc_table_prepare(a->gcc, f)) != FJ_OK) goto fail;
    if (a->unw && (st = uw_unw_table_prepare(a->unw, f)) != FJ_OK) goto fail;

    /* Publish. Only libgcc's self-check can still fail, so it goes first. */
    if (a->gcc && (st = uw_gcc_table_publish(a->gcc, f)) != FJ_OK) goto fail;
    if (a->unw) uw_unw_table_publish(a->unw);
    if (gdb) {
        if (fresh) a->chunks[a->nchunks++] = fresh;
        uw_gdb_chunk_publish(a->chunks[a->nchunks - 1]);
    }
    a->count++;
    a->next = f->start + f->size;
    return FJ_OK;
fail:
    uw_gdb_chunk_free(fresh);  /* never registered; a staged kernel elsewhere is just dropped */
    return st;
}

fj_status uw_arena_add(uw_arena *a, const uw_func *f) {
    pthread_mutex_lock(&arena_lock);
    fj_status st = arena_add(a, f);
    pthread_mutex_unlock(&arena_lock);
    return st;
}

void uw_arena_get_stats(const uw_arena *a, uw_arena_stats *st) {
    *st = (uw_arena_stats){0};
    if (!a) return;
    st->kernels = a->count;
    st->libgcc_bytes = uw_gcc_table_bytes(a->gcc);
    st->libunwind_bytes = uw_unw_table_bytes(a->unw);
    st->gdb_objects = a->nchunks;
    st->gdb_bytes = a->chunks_cap * sizeof *a->chunks + a->fde.cap;
    for (size_t i = 0; i < a->nchunks; i++) st->gdb_bytes += uw_gdb_chunk_bytes(a->chunks[i]);
    if (a->spare) st->gdb_bytes += uw_gdb_chunk_bytes(a->spare);
    st->gdb_spare = a->spare != NULL;
}

fj_status uw_arena_check(const uw_arena *a) {
    if (!a) return fj_fail(FJ_ERR_INVALID_ARG, "uw_arena_check: NULL arena");
    if (a->gcc) {
        fj_status st = uw_gcc_table_check(a->gcc);
        if (st != FJ_OK) return st;
    }
    /* Every chunk but the newest is closed with at least one kernel; the
     * count bound follows from the chunk sizes (CHUNK_FIRST doubling up to
     * CHUNK_MAX) unless big kernels filled chunks early. */
    size_t total = 0;
    for (size_t i = 0; i < a->nchunks; i++) {
        size_t k = uw_gdb_chunk_kernels(a->chunks[i]);
        if (k == 0)
            return fj_fail(FJ_ERR_UNWIND, "arena %s: gdb object %zu is empty", a->name, i);
        total += k;
    }
    if ((a->backends & UW_GDB) && total != a->count)
        return fj_fail(FJ_ERR_UNWIND, "arena %s: %zu gdb objects cover %zu of %zu kernels",
                       a->name, a->nchunks, total, a->count);
    return FJ_OK;
}
