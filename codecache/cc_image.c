/* cc_image.c: access to an arena's backing file for the ELF image written
 * into it (unwindinfo/ lays the bytes out, runtime/publish.c decides when):
 * where the code sits in the file and in memory, writable views of the
 * header page and of the metadata area (never of the code pages), file
 * space for the metadata, and a slot for the writer's per-arena state. The
 * code cache itself never writes there; the header page is reserved for
 * this since the file's creation. */
#include "codecache/cc_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

cc_arena *cc_entry_arena(const cc_entry *e) { return e ? ((const cc_rec *)e)->arena : NULL; }

/* Only the creator process writes, and only while the arena holds memory
 * (its caller holds a live kernel of it, or creates the runtime that owns
 * it, so it cannot be retired under us). */
static cc_arena *file_arena(cc_arena *a) {
    if (a->kind != CC_FILE || a->fd < 0 || a->retired || !a->path[0] || !a->meta_room ||
        a->pid != cc_self_pid())
        return NULL;
    return a;
}

static fj_status image_info(cc_arena *a, cc_image_info *out, const char *fn) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (!a) return fj_fail(FJ_ERR_INVALID_ARG, "%s: NULL argument", fn);
    out->arena_id = a->id;
    out->lo = a->lo;
    out->hi = a->hi;
    out->backing = cc_kind_name(a->kind);
    if (!file_arena(a))
        return FJ_ERR_UNSUPPORTED; /* memfd / anonymous: no file to describe (not an error) */
    out->fd = a->fd;
    out->code_off = a->code_off;
    out->page = cc_page_size();
    out->path = a->path;
    out->hdr = a->rw;
    out->meta_off = a->code_off + (a->hi - a->lo);
    out->meta = a->rw + out->meta_off;
    out->meta_room = a->meta_room;
    out->removed = atomic_load_explicit(&a->ndead, memory_order_relaxed);
    return FJ_OK;
}

fj_status cc_entry_image(const cc_entry *e, cc_image_info *out) {
    return image_info(cc_entry_arena(e), out, "cc_entry_image");
}

fj_status cc_arena_image(cc_arena *a, cc_image_info *out) {
    return image_info(a, out, "cc_arena_image");
}

static fj_status in_room(const cc_arena *a, uint64_t off, uint64_t n, const char *what) {
    if (off + n < off || off + n > a->meta_room)
        return fj_fail(FJ_ERR_INVALID_ARG, "codecache: %s [%#llx, %#llx) is outside the "
                       "metadata area of %s", what, (unsigned long long)off,
                       (unsigned long long)(off + n), a->path);
    return FJ_OK;
}

fj_status cc_image_back(cc_arena *arena, uint64_t off, uint64_t n) {
    cc_arena *a = arena ? file_arena(arena) : NULL;
    if (!a) return fj_fail(FJ_ERR_INVALID_ARG, "cc_image_back: not a live file-backed arena");
    fj_status st = in_room(a, off, n, "image space");
    if (st != FJ_OK || n == 0 || off + n <= a->meta_backed) return st;
    const uint64_t rel = off;
    off += a->code_off + (a->hi - a->lo);
    /* fallocate only: a file system that cannot allocate ahead would turn a
     * full /dev/shm into SIGBUS on a later store through the mapping. */
    int bad = fj_fault_hit(FJ_FAULT_FILE) ? (errno = EIO, 1)
                                          : fallocate(a->fd, 0, (off_t)off, (off_t)n) != 0;
    if (bad)
        return fj_fail(FJ_ERR_OS, "codecache: allocating %llu bytes at %#llx of %s: %s",
                       (unsigned long long)n, (unsigned long long)off, a->path, strerror(errno));
    if (rel <= a->meta_backed && rel + n > a->meta_backed) a->meta_backed = rel + n;
    cc_populate_rw(a, off, n);
    return FJ_OK;
}

fj_status cc_image_discard(cc_arena *arena, uint64_t off, uint64_t n, int truncate) {
    cc_arena *a = arena ? file_arena(arena) : NULL;
    if (!a) return fj_fail(FJ_ERR_INVALID_ARG, "cc_image_discard: not a live file-backed arena");
    fj_status st = in_room(a, off, truncate ? 0 : n, "image discard");
    if (st != FJ_OK) return st;
    if (off < a->meta_backed) a->meta_backed = off;   /* known allocated up to here only */
    off += a->code_off + (a->hi - a->lo);
    if (truncate) {
        if (fj_fault_hit(FJ_FAULT_FILE) ? (errno = EIO, 1) : ftruncate(a->fd, (off_t)off) != 0)
            return fj_fail(FJ_ERR_OS, "codecache: truncating %s: %s", a->path, strerror(errno));
        return FJ_OK;
    }
    if (n && fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)n))
        return fj_fail(FJ_ERR_OS, "codecache: freeing %llu bytes of %s: %s",
                       (unsigned long long)n, a->path, strerror(errno));
    return FJ_OK;
}

void *cc_image_state(const cc_arena *a) { return a->image; }

void cc_image_set_state(cc_arena *a, void *state, void (*free_fn)(void *)) {
    a->image = state;
    a->image_free = free_fn;
}

int cc_entry_removed(const cc_entry *e) {
    return atomic_load_explicit(&((const cc_rec *)e)->dead, memory_order_acquire) != 0;
}
