/* uw_dump.c: FRAMEJIT_DUMP: each kernel as DIR/<name>.<seq>.o, a relocatable
 * object that objdump -d and readelf --debug-dump=frames read. */
#include "unwindinfo/uw_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Kernel names come from embedders: keep the file name inside DIR. */
static void safe_name(const char *in, char *out, size_t n) {
    size_t i = 0;
    for (; in[i] && i + 1 < n; i++) {
        char c = in[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || (c == '.' && i > 0);
        out[i] = ok ? c : '_';
    }
    out[i] = 0;
}

static fj_status write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return FJ_ERR_OS;
        p += w;
        n -= (size_t)w;
    }
    return FJ_OK;
}

fj_status uw_dump(const char *dir, const uw_func *f, const uint8_t *code, unsigned seq) {
    if (!dir || !f || !code) return fj_fail(FJ_ERR_INVALID_ARG, "uw_dump: NULL argument");
    uint8_t *elf;
    size_t len;
    fj_status st = uw_elf_build(f, 1, code, &elf, &len);
    if (st != FJ_OK) return st;

    char name[128], path[PATH_MAX], tmp[PATH_MAX];
    safe_name(f->name, name, sizeof name);
    int a = snprintf(path, sizeof path, "%s/%s.%u.o", dir, name, seq);
    /* Written under a temporary name and renamed, so a reader never sees
     * half a file. */
    int b = snprintf(tmp, sizeof tmp, "%s/.%s.%u.o.%ld.tmp", dir, name, seq, (long)getpid());
    if (a < 0 || b < 0 || (size_t)a >= sizeof path || (size_t)b >= sizeof tmp) {
        fj_free(elf);
        return fj_fail(FJ_ERR_INVALID_ARG, "FRAMEJIT_DUMP: path too long for %s in %s", f->name,
                       dir);
    }
    int fd = fj_fault_hit(FJ_FAULT_FILE)
                 ? (errno = EIO, -1)
                 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        fj_free(elf);
        return fj_fail(FJ_ERR_OS, "FRAMEJIT_DUMP: open %s: %s", tmp, strerror(e));
    }
    st = write_all(fd, elf, len);
    int e = errno;
    fj_free(elf);
    if (close(fd) != 0 && st == FJ_OK) {
        st = FJ_ERR_OS;
        e = errno;
    }
    if (st == FJ_OK && rename(tmp, path) != 0) {
        st = FJ_ERR_OS;
        e = errno;
    }
    if (st != FJ_OK) {
        unlink(tmp);
        return fj_fail(st, "FRAMEJIT_DUMP: writing %s: %s", path, strerror(e));
    }
    fj_log(1, "dumped %s (%zu bytes) to %s", f->name, f->size, path);
    return FJ_OK;
}
