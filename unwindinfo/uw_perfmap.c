/* uw_perfmap.c: FRAMEJIT_PERFMAP=1: one "START SIZE name" line per kernel in
 * /tmp/perf-PID.map, the symbol file perf (and other profilers) read for
 * anonymous executable memory. Off by default: perf names kernels from the
 * arena files themselves, and ignores this file for file-backed or memfd
 * code (it only applies it to anonymous mappings). */
#include "unwindinfo/uw_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

void uw_perfmap_fork(int phase) { fj_fork_mutex(&map_lock, phase); }
static int map_fd = -1;
static pid_t map_pid;

fj_status uw_perfmap_add(const uw_func *f) {
    fj_status st = uw_check_func(f);
    if (st != FJ_OK) return st;
    char line[320];
    /* perf's format: hex start and size without 0x, then the name. */
    int n = snprintf(line, sizeof line, "%lx %zx %s\n", (unsigned long)f->start, f->size, f->name);
    if (n < 0 || (size_t)n >= sizeof line)
        return fj_fail(FJ_ERR_INVALID_ARG, "perf map: name too long: %s", f->name);
    pthread_mutex_lock(&map_lock);
    pid_t me = getpid();
    if (map_fd >= 0 && map_pid != me) { /* forked: the child writes its own file */
        close(map_fd);
        map_fd = -1;
    }
    if (map_fd < 0) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)me);
        /* O_NOFOLLOW: /tmp is shared; never write through someone's link. */
        map_fd = fj_fault_hit(FJ_FAULT_FILE)
                     ? (errno = EIO, -1)
                     : open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (map_fd < 0) {
            int e = errno;
            pthread_mutex_unlock(&map_lock);
            return fj_fail(FJ_ERR_OS, "perf map: open %s: %s", path, strerror(e));
        }
        map_pid = me;
    }
    /* One write per line: O_APPEND keeps lines whole. */
    ssize_t w = fj_fault_hit(FJ_FAULT_FILE) ? (errno = EIO, -1) : write(map_fd, line, (size_t)n);
    int e = errno;
    pthread_mutex_unlock(&map_lock);
    if (w != n)
        return fj_fail(FJ_ERR_OS, "perf map: write: %s", w < 0 ? strerror(e) : "short write");
    return FJ_OK;
}
