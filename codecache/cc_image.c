/* cc_image.c: access to an arena's backing file for the ELF image written
 * into it (unwindinfo/ builds the bytes, runtime/image.c decides when):
 * where the code sits in the file and in memory, and writes that can only
 * land outside the code pages. The code cache itself never writes there;
 * the header page is reserved for this since the file's creation. */
#include "codecache/cc_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* Only the creator process writes, and only while the arena holds memory
 * (its caller holds a live kernel of it, so it cannot be retired under us). */
static const cc_arena *file_arena(const cc_entry *e) {
    const cc_arena *a = ((const cc_rec *)e)->arena;
    if (a->kind != CC_FILE || a->fd < 0 || a->retired || !a->path[0] || a->pid != getpid())
        return NULL;
    return a;
}

fj_status cc_entry_image(const cc_entry *e, cc_image_info *out) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (!e) return fj_fail(FJ_ERR_INVALID_ARG, "cc_entry_image: NULL entry");
    const cc_arena *a = ((const cc_rec *)e)->arena;
    out->arena_id = a->id;
    out->lo = a->lo;
    out->hi = a->hi;
    out->backing = cc_kind_name(a->kind);
    if (!file_arena(e))
        return FJ_ERR_UNSUPPORTED; /* memfd / anonymous: no file to describe (not an error) */
    out->fd = a->fd;
    out->code_off = a->code_off;
    out->page = (size_t)sysconf(_SC_PAGESIZE);
    out->path = a->path;
    return FJ_OK;
}

/* The file range [off, off + n) must not touch the code pages. */
static fj_status outside_code(const cc_arena *a, uint64_t off, uint64_t n) {
    uint64_t code_end = a->code_off + (a->hi - a->lo);
    if (off + n < off || (off < code_end && off + n > a->code_off))
        return fj_fail(FJ_ERR_INVALID_ARG, "codecache: image write [%#llx, %#llx) overlaps the "
                       "code pages of %s", (unsigned long long)off,
                       (unsigned long long)(off + n), a->path);
    return FJ_OK;
}

fj_status cc_image_write(const cc_entry *e, uint64_t off, const void *p, size_t n) {
    const cc_arena *a = e ? file_arena(e) : NULL;
    if (!a) return fj_fail(FJ_ERR_INVALID_ARG, "cc_image_write: not a live file-backed arena");
    fj_status st = outside_code(a, off, n);
    if (st != FJ_OK) return st;
    const uint8_t *b = p;
    while (n) {
        ssize_t w = fj_fault_hit(FJ_FAULT_FILE) ? (errno = EIO, -1)
                                                : pwrite(a->fd, b, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return fj_fail(FJ_ERR_OS, "codecache: writing %zu bytes at %#llx of %s: %s", n,
                           (unsigned long long)off, a->path, w < 0 ? strerror(errno) : "no room");
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return FJ_OK;
}

fj_status cc_image_discard(const cc_entry *e, uint64_t off, uint64_t n, int truncate) {
    const cc_arena *a = e ? file_arena(e) : NULL;
    if (!a) return fj_fail(FJ_ERR_INVALID_ARG, "cc_image_discard: not a live file-backed arena");
    if (off < a->code_off + (a->hi - a->lo))
        return fj_fail(FJ_ERR_INVALID_ARG, "cc_image_discard: %#llx is not after the code span",
                       (unsigned long long)off);
    if (truncate) {
        if (fj_fault_hit(FJ_FAULT_FILE) || ftruncate(a->fd, (off_t)off) != 0)
            return fj_fail(FJ_ERR_OS, "codecache: truncating %s: %s", a->path, strerror(errno));
        return FJ_OK;
    }
    if (n && fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)n))
        return fj_fail(FJ_ERR_OS, "codecache: freeing %llu bytes of %s: %s",
                       (unsigned long long)n, a->path, strerror(errno));
    return FJ_OK;
}
