/* uw_jitdump.c: FRAMEJIT_JITDUMP=1: perf's jitdump file (tools/perf/
 * Documentation/jitdump-specification.txt): a header, then per kernel a
 * JIT_CODE_UNWINDING_INFO record (.eh_frame + .eh_frame_hdr) followed by
 * the JIT_CODE_LOAD record it applies to (name, address, code bytes).
 *
 * Workflow: perf record -k 1 ... ; perf inject --jit -i perf.data -o
 * jit.data ; perf report -i jit.data. perf inject finds the file through
 * the PROT_EXEC mapping of it this process makes once (its "marker"), and
 * writes one small ELF per kernel next to it. Off by default: the arena
 * files already give perf names and unwind info while the process lives;
 * jitdump also covers processes that exit before `perf record` ends. */
#include "unwindinfo/uw_int.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define JITDUMP_MAGIC 0x4A695444u
enum { JIT_CODE_LOAD = 0, JIT_CODE_UNWINDING_INFO = 4 };

struct jd_header {
    uint32_t magic, version, total_size, elf_mach, pad1, pid;
    uint64_t timestamp, flags;
};

struct jd_prefix {
    uint32_t id, total_size;
    uint64_t timestamp;
};

struct jd_load {
    struct jd_prefix p;
    uint32_t pid, tid;
    uint64_t vma, code_addr, code_size, code_index;
    /* name, NUL, code bytes */
};

struct jd_unwind {
    struct jd_prefix p;
    uint64_t unwinding_size, eh_frame_hdr_size, mapped_size;
    /* .eh_frame, .eh_frame_hdr, padding to 8 */
};

static pthread_mutex_t jd_lock = PTHREAD_MUTEX_INITIALIZER;

void uw_jitdump_fork(int phase) { fj_fork_mutex(&jd_lock, phase); }
static int jd_fd = -1;
static pid_t jd_pid;
static void *jd_marker;
static uint64_t jd_index;
static char jd_path[PATH_MAX];

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int mkdir_ok(const char *p) { return mkdir(p, 0700) == 0 || errno == EEXIST; }

/* Under jd_lock. Creates DIR/.debug/jit/framejit-YYYYMMDD.XXXXXX/jit-PID.dump. */
static fj_status jd_open(void) {
    pid_t me = getpid();
    if (jd_fd >= 0 && jd_pid == me) return FJ_OK;
    if (jd_fd >= 0) { /* forked: the parent's file and marker are not ours */
        close(jd_fd);
        jd_fd = -1;
        jd_marker = NULL; /* the inherited mapping stays; harmless */
    }
    const char *base = getenv("JITDUMPDIR");
    if (!base || !*base) base = getenv("HOME");
    if (!base || !*base) base = "/tmp";
    char dir[PATH_MAX], day[16];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(day, sizeof day, "%Y%m%d", &tm);
    int n1 = snprintf(dir, sizeof dir, "%s/.debug", base);
    if (!mkdir_ok(base) || n1 < 0 || (size_t)n1 >= sizeof dir || !mkdir_ok(dir))
        return fj_fail(FJ_ERR_OS, "jitdump: mkdir %s: %s", dir, strerror(errno));
    snprintf(dir, sizeof dir, "%s/.debug/jit", base);
    if (!mkdir_ok(dir)) return fj_fail(FJ_ERR_OS, "jitdump: mkdir %s: %s", dir, strerror(errno));
    int n2 = snprintf(dir, sizeof dir, "%s/.debug/jit/framejit-%s.XXXXXX", base, day);
    if (n2 < 0 || (size_t)n2 >= sizeof dir || !mkdtemp(dir))
        return fj_fail(FJ_ERR_OS, "jitdump: mkdtemp %s: %s", dir, strerror(errno));
    int n3 = snprintf(jd_path, sizeof jd_path, "%.*s/jit-%d.dump", (int)(sizeof jd_path - 32),
                      dir, (int)me);
    if (n3 < 0 || (size_t)n3 >= sizeof jd_path)
        return fj_fail(FJ_ERR_OS, "jitdump: path too long under %s", base);
    int fd = fj_fault_hit(FJ_FAULT_FILE)
                 ? (errno = EIO, -1)
                 : open(jd_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        int e = errno;
        jd_path[0] = 0;
        return fj_fail(FJ_ERR_OS, "jitdump: open: %s", strerror(e));
    }
    struct jd_header h = {JITDUMP_MAGIC, 1, sizeof h, EM_X86_64, 0, (uint32_t)me, mono_ns(), 0};
    if (write_all(fd, &h, sizeof h) != 0) {
        int e = errno;
        close(fd);
        return fj_fail(FJ_ERR_OS, "jitdump: writing the header: %s", strerror(e));
    }
    /* The marker: perf records this mmap and perf inject --jit opens the
     * file it names. Read+execute, never writable; it is never run. */
    void *m = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        close(fd);
        return fj_fail(FJ_ERR_OS, "jitdump: marker mmap: %s", strerror(e));
    }
    jd_marker = m;
    jd_fd = fd;
    jd_pid = me;
    fj_log(1, "jitdump: writing %s", jd_path);
    return FJ_OK;
}

fj_status uw_jitdump_add(const uw_func *f, const uint8_t *code) {
    if (!code) return fj_fail(FJ_ERR_INVALID_ARG, "jitdump: no code bytes");
    uint8_t *uw = NULL;
    size_t uw_len = 0, hdr_len = 0;
    fj_status st = uw_jit_unwind_build(f, &uw, &uw_len, &hdr_len);
    if (st != FJ_OK) return st;
    const size_t name_len = strlen(f->name) + 1;
    const size_t upad = (8 - uw_len % 8) % 8;
    struct jd_unwind u = {{JIT_CODE_UNWINDING_INFO, (uint32_t)(sizeof u + uw_len + upad), 0},
                          uw_len, hdr_len, uw_len};
    struct jd_load l = {{JIT_CODE_LOAD, (uint32_t)(sizeof l + name_len + f->size), 0},
                        0, (uint32_t)syscall(SYS_gettid), f->start, f->start, f->size, 0};
    static const uint8_t zeros[8];
    pthread_mutex_lock(&jd_lock);
    st = jd_open();
    if (st == FJ_OK) {
        u.p.timestamp = l.p.timestamp = mono_ns();
        l.pid = (uint32_t)jd_pid;
        l.code_index = jd_index++;
        /* Unwind info first: perf inject attaches it to the next load. */
        int bad = (fj_fault_hit(FJ_FAULT_FILE) && (errno = EIO)) || write_all(jd_fd, &u, sizeof u) ||
                  write_all(jd_fd, uw, uw_len) || write_all(jd_fd, zeros, upad) ||
                  write_all(jd_fd, &l, sizeof l) || write_all(jd_fd, f->name, name_len) ||
                  write_all(jd_fd, code, f->size);
        if (bad) st = fj_fail(FJ_ERR_OS, "jitdump: writing %s: %s", f->name, strerror(errno));
    }
    pthread_mutex_unlock(&jd_lock);
    fj_free(uw);
    return st;
}

const char *uw_jitdump_path(void) {
    pthread_mutex_lock(&jd_lock);
    const char *p = jd_fd >= 0 && jd_pid == getpid() ? jd_path : NULL;
    pthread_mutex_unlock(&jd_lock);
    return p;
}
