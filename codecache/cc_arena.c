/* cc_arena.c: OS memory for the code cache: the process-wide address-space
 * reservation, arenas backed by /dev/shm files, memfds or anonymous pages,
 * the reserve -> write -> commit/abort protocol that keeps W^X, and removal
 * of /dev/shm files left behind by dead processes. */
#include "codecache/cc_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* ------------------------------------------------------------------------
 * OS calls behind one small table, each fallible one preceded by its
 * fault-injection check so tests can make exactly one of them fail.
 * ---------------------------------------------------------------------- */

typedef struct cc_os {
    void *(*mmap)(void *, size_t, int, int, int, off_t);
    int (*munmap)(void *, size_t);
    int (*mprotect)(void *, size_t, int);
    int (*open)(const char *, int, ...);
    int (*memfd_create)(const char *, unsigned int);
    int (*fallocate)(int, int, off_t, off_t);
    int (*ftruncate)(int, off_t);
    int (*fchmod)(int, mode_t);
    int (*close)(int);
    int (*unlink)(const char *);
    ssize_t (*pwritev)(int, const struct iovec *, int, off_t);
} cc_os;

static const cc_os os = {mmap, munmap, mprotect, open, memfd_create,
                         fallocate, ftruncate, fchmod, close, unlink, pwritev};

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (fj_fault_hit(FJ_FAULT_MMAP)) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return os.mmap(addr, len, prot, flags, fd, off);
}

static int sys_mprotect(uintptr_t addr, size_t len, int prot) {
    if (fj_fault_hit(FJ_FAULT_MPROTECT)) {
        errno = ENOMEM;
        return -1;
    }
    return os.mprotect((void *)addr, len, prot);
}

/* Every file call shares one check so "the next file call fails" is
 * meaningful whatever the call is. */
static int file_fault(void) {
    if (fj_fault_hit(FJ_FAULT_FILE)) {
        errno = EIO;
        return 1;
    }
    return 0;
}

/* Replaces [lo, lo+len) by fresh PROT_NONE pages. Used to keep an address
 * range reserved after its code is gone, so nothing else (ours or another
 * JIT's) is ever mapped there. Cleanup: no fault check. */
static int rereserve(uintptr_t lo, size_t len) {
    void *p = os.mmap((void *)lo, len, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == MAP_FAILED ? -1 : 0;
}

size_t cc_page_size(void) {
    static _Atomic size_t pg;   /* asked once: every placement and description asks */
    size_t n = atomic_load_explicit(&pg, memory_order_relaxed);
    if (!n) atomic_store_explicit(&pg, n = (size_t)sysconf(_SC_PAGESIZE), memory_order_relaxed);
    return n;
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* This process's pid, asked for on every placement and image write (a
 * forked child must not write its parent's arena files) where getpid is a
 * system call each time. fork() resets it in the child through an atfork
 * handler, registered before the first value is cached; a child made by a
 * raw clone without fork's handlers must not use the library. */
static atomic_int self_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;
static void pid_forget(void) { atomic_store_explicit(&self_pid, 0, memory_order_relaxed); }
static void pid_hook(void) { (void)pthread_atfork(NULL, NULL, pid_forget); }

pid_t cc_self_pid(void) {
    pid_t p = (pid_t)atomic_load_explicit(&self_pid, memory_order_relaxed);
    if (p) return p;
    pthread_once(&pid_once, pid_hook);
    p = getpid();
    atomic_store_explicit(&self_pid, (int)p, memory_order_relaxed);
    return p;
}

const char *cc_kind_name(int kind) {
    switch (kind) {
    case CC_FILE: return "file";
    case CC_MEMFD: return "memfd";
    default: return "anonymous";
    }
}

/* ------------------------------------------------------------------------
 * Address space: one large PROT_NONE reservation carved monotonically.
 * Nothing is ever returned to it, so a code address is used at most once.
 * ---------------------------------------------------------------------- */

#define CC_RESERVE_BYTES ((size_t)1 << 30)

static pthread_mutex_t va_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t va_cur, va_end;

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

void cc_arena_fork(int phase) {
    fj_fork_mutex(&va_lock, phase);
    fj_fork_mutex(&kept_lock, phase);
}

/* n bytes at an address aligned to align (a power of two >= the page). */
static fj_status va_carve(size_t n, size_t align, uintptr_t *out) {
    fj_status st = FJ_OK;
    pthread_mutex_lock(&va_lock);
    /* The bytes skipped to align stay reserved and unused forever. */
    uintptr_t at = round_up(va_cur, align);
    if (at < va_cur || at > va_end || va_end - at < n) {
        /* MAP_NORESERVE: the range costs neither memory nor commit charge.
         * Just what is needed is tried when address space is limited
         * (ulimit -v). The old range's unused tail stays reserved, never
         * reused. need has room to align inside the new range. */
        size_t need = n + (align - cc_page_size());
        size_t want = need > CC_RESERVE_BYTES ? round_up(need, CC_RESERVE_BYTES)
                                              : CC_RESERVE_BYTES;
        size_t tries[2] = {want, round_up(need, cc_page_size())};
        void *p = MAP_FAILED;
        int err = 0;
        for (int i = 0; i < 2 && p == MAP_FAILED; i++) {
            p = sys_mmap(NULL, tries[i], PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
            if (p == MAP_FAILED) err = errno;
            else want = tries[i];
        }
        if (p == MAP_FAILED) {
            st = fj_fail(FJ_ERR_OS, "codecache: reserving %zu bytes of address space: %s", want,
                         strerror(err));
            goto out;
        }
        va_end = (uintptr_t)p + want;
        at = round_up((uintptr_t)p, align);
        fj_log(2, "codecache: reserved %zu MiB of code address space at %#lx", want >> 20,
               (unsigned long)(uintptr_t)p);
    }
    *out = at;
    va_cur = at + n;
out:
    pthread_mutex_unlock(&va_lock);
    return st;
}

/* ------------------------------------------------------------------------
 * Arenas
 * ---------------------------------------------------------------------- */

/* Files grow in steps: pages are allocated up front so that a full
 * /dev/shm shows up as ENOSPC here, not as SIGBUS on a later write through
 * the shared mapping. Code pages are allocated by writing int3 into them
 * rather than with fallocate: pages with contents let the first call of a
 * kernel map the pages around it in the same fault (the kernel's fault-
 * around), while fallocated ones are still to be cleared and fault one by
 * one; and the code area's unused bytes trap. */
#define CC_FILE_GROW ((size_t)64 << 10)
#define CC_VEC_INITIAL 16

static atomic_uint file_seq;
static const uint8_t int3_page[4096] = {[0 ... 4095] = 0xcc};

/* Writes the iovecs' bytes at pos, through short writes and EINTR.
 * Returns 0, or -1 with errno (ENOSPC if the file stops growing). */
static int pwrite_all(int fd, struct iovec *iov, int n, off_t pos) {
    while (n > 0) {
        ssize_t w = os.pwritev(fd, iov, n, pos);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC;
            return -1;
        }
        pos += w;
        for (; n > 0 && (size_t)w >= iov->iov_len; iov++, n--) w -= (ssize_t)iov->iov_len;
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* int3 over [from, to) of the file, up to 16 pages a call. */
static int code_fill(int fd, size_t from, size_t to) {
    while (from < to) {
        struct iovec iov[16];
        size_t at = from;
        int n = 0;
        for (; n < 16 && from < to; n++) {
            size_t l = to - from < sizeof int3_page ? to - from : sizeof int3_page;
            iov[n] = (struct iovec){(void *)int3_page, l};
            from += l;
        }
        if (pwrite_all(fd, iov, n, (off_t)at) != 0) return -1;
    }
    return 0;
}

/* The writable view's page table entries for file bytes [off, off + len),
 * made writable in one call when the file grows (code) or the image's
 * metadata gets new room. A first store into a page of the view is
 * otherwise a write fault of its own: read faults map the pages around
 * them (for shmem, writable), write faults do not, and placement and the
 * image writer write without reading. On virtual machines with shadow
 * paging a write fault costs several times what populating a page does
 * (the page's first store still pays the host's mapping of it). Without it
 * (Linux before 5.14) a read of each page does the same through the read
 * faults' fault-around. Nothing is changed: the bytes there stay. */
void cc_populate_rw(cc_arena *a, size_t off, size_t len) {
    size_t page = cc_page_size(), end = off + len;
    off = round_up(off, page);
    if (a->kind == CC_ANON || !a->rw || end <= off || end > a->rw_len) return;
    if (madvise(a->rw + off, end - off, MADV_POPULATE_WRITE) == 0) return;
    for (size_t at = off; at < end; at += page) (void)*(volatile const uint8_t *)(a->rw + at);
}

static void populate_rw(cc_arena *a, size_t from, size_t to) {
    if (to > from) cc_populate_rw(a, a->code_off + from, to - from);
}

static int file_extend(int fd, size_t from, size_t to, int code) {
    if (file_fault()) return -1;
    if (code) return code_fill(fd, from, to);
    if (os.fallocate(fd, 0, (off_t)from, (off_t)(to - from)) == 0) return 0;
    if (errno != EOPNOTSUPP && errno != ENOSYS) return -1;
    /* Never shorter: the metadata after the code span may be there. (It
     * is only written where fallocate works, so this cannot race it.) */
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)to) return 0;
    return os.ftruncate(fd, (off_t)to);
}

/* Opens the backing file or memfd; O_EXCL so a leftover file is never
 * shared, 0600 (fchmod too, since umask could widen nothing but we want
 * exactly 0600 whatever it is) so no other user can read or write code. */
static fj_status open_backing(cc_arena *a) {
    if (a->kind == CC_FILE) {
        /* ".so": gperftools' pprof symbolizes only mappings of files so
         * named (and the program itself). */
        snprintf(a->path, sizeof a->path, "/dev/shm/framejit-%d-%u.so", (int)a->pid,
                 atomic_fetch_add(&file_seq, 1));
        a->fd = file_fault() ? -1
                             : os.open(a->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                                       0600);
        if (a->fd < 0) {
            int err = errno;
            a->path[0] = 0;
            return fj_fail(FJ_ERR_OS, "codecache: creating /dev/shm file: %s", strerror(err));
        }
        if (file_fault() || os.fchmod(a->fd, 0600) != 0)
            return fj_fail(FJ_ERR_OS, "codecache: chmod %s: %s", a->path, strerror(errno));
    } else {
        a->fd = file_fault() ? -1 : os.memfd_create("framejit", MFD_CLOEXEC);
        if (a->fd < 0)
            return fj_fail(FJ_ERR_OS, "codecache: memfd_create: %s", strerror(errno));
    }
    return FJ_OK;
}

/* Metadata room of a file arena: address space for the image writer's
 * metadata after the span (its view at hi) and file offsets for it. Costs
 * nothing until written: the file is sparse and the view is never touched
 * by the process itself. */
static size_t meta_room_for(size_t span) {
    size_t r = 4 * span;
    return r < CC_META_MIN ? CC_META_MIN : r;
}

/* Maps one view of the file at a fixed address inside the arena's block. */
static int map_fixed(uintptr_t at, size_t len, int prot, int share, int fd, size_t off) {
    void *p = sys_mmap((void *)at, len, prot, share | MAP_FIXED, fd, (off_t)off);
    return p == MAP_FAILED ? -1 : 0;
}

/* The executable view of a core-visible arena (a->core_view): a private
 * mapping of the file, because the default coredump_filter (0x33) leaves
 * shared mappings of linked files out of core dumps, and private file
 * mappings too unless the mapping has anonymous pages (then the kernel
 * dumps all of it, file pages included). The view gets its one anonymous
 * page before any code exists: mapped read+write (nothing in it is
 * executable yet, nothing ever runs there), one store into the span's last
 * page (a private copy of its int3 bytes; that page is one more than the
 * arena's code span and placement never uses it), then read+execute for
 * good. Every other page of the
 * view stays the file's own page, so code written through the writable
 * view shows through it as with a shared mapping. */
static int map_code_view(cc_arena *a, size_t span) {
    size_t page = cc_page_size();
    if (!a->core_view)
        return map_fixed(a->lo, span, PROT_READ | PROT_EXEC, MAP_SHARED, a->fd, a->code_off);
    if (file_extend(a->fd, a->code_off + span - page, a->code_off + span, 1) != 0) return -1;
    if (map_fixed(a->lo, span, PROT_READ | PROT_WRITE, MAP_PRIVATE, a->fd, a->code_off) != 0)
        return -1;
    *(volatile uint8_t *)(a->hi - page) = 0xcc;
    return sys_mprotect(a->lo, span, PROT_READ | PROT_EXEC);
}

/* The views, inside the arena's block (cc_impl.h):
 *   [blk, lo)        file: the header page read-only (pgoff 0)
 *   [lo, hi)         the code, read+execute
 *   [hi, +meta)      file: the metadata area read-only, right after the code
 *                    as in the file, so an unwinder that computes where
 *                    .eh_frame_hdr is loaded from the file's lowest mapping
 *                    (perf --call-graph dwarf) finds it there
 *   [rw, +rw_len)    the whole file read+write, above all of them
 * A failed step leaves the block to cc_arena_new, which reserves it again. */
static fj_status map_views(cc_arena *a, size_t span) {
    a->file_len = a->code_off + (span < CC_FILE_GROW ? span : CC_FILE_GROW);
    int bad = file_extend(a->fd, 0, a->huge ? cc_page_size() : a->code_off, 0) != 0 ||
              file_extend(a->fd, a->code_off, a->file_len, 1) != 0;
    if (bad)
        return fj_fail(FJ_ERR_OS, "codecache: sizing code file to %zu bytes: %s", a->file_len,
                       strerror(errno));
    uintptr_t rw = a->hi + a->meta_room;
    if (map_fixed(rw, a->rw_len, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0) != 0)
        return fj_fail(FJ_ERR_OS, "codecache: mapping RW view (%zu bytes): %s", a->rw_len,
                       strerror(errno));
    a->rw = (uint8_t *)rw;
    /* The views replace our own PROT_NONE reservation in place. RX maps the
     * whole span and the metadata view the whole room, even past the
     * current end of file: nothing executes or reads there before the file
     * has grown over it. */
    if (map_code_view(a, span) != 0)
        return fj_fail(FJ_ERR_OS, "codecache: mapping RX view (%zu bytes): %s", span,
                       strerror(errno));
    /* Read-only views of a core-visible arena are private too: the header
     * page, an ELF header at file offset 0, then goes into core dumps
     * (coredump_filter bit 4), where debuggers find the build-id. */
    int share = a->core_view ? MAP_PRIVATE : MAP_SHARED;
    if (a->meta_room &&
        (map_fixed(a->blk, cc_page_size(), PROT_READ, share, a->fd, 0) != 0 ||
         map_fixed(a->hi, a->meta_room, PROT_READ, share, a->fd, a->code_off + span) != 0))
        return fj_fail(FJ_ERR_OS, "codecache: mapping the read-only views of %s: %s", a->path,
                       strerror(errno));
    return FJ_OK;
}

/* The pages the arena's first kernel writes and runs, mapped now (a page
 * fault each, several microseconds under shadow paging) rather than by
 * that kernel's placement, description and first call: its code page in
 * both views (the int3 already there written back through the writable
 * one, a read through the executable one; the rest of the first file
 * step populated, see populate_rw), and for a file arena the
 * image's header page and the first page of its metadata (allocated
 * first: a store past the end of the file would fault; if that fails, the
 * image writer allocates and reports it later). */
static void warm_views(cc_arena *a, size_t span) {
    volatile uint8_t *w = a->rw + a->code_off;
    *w = *w;
    a->rw_mapped = cc_page_size();
    populate_rw(a, cc_page_size(), a->file_len - a->code_off);
    (void)*(volatile const uint8_t *)a->lo;
    if (!a->meta_room) return;
    w = a->rw;
    *w = *w;
    size_t meta = a->code_off + span;
    if (!file_fault() && os.fallocate(a->fd, 0, (off_t)meta, (off_t)cc_page_size()) == 0) {
        a->meta_backed = cc_page_size();
        w = a->rw + meta;
        *w = *w;
    }
}

static atomic_uint_least64_t arena_ids;

fj_status cc_arena_new(int kind, size_t span, size_t min_code, int huge, int core_view,
                       size_t (*aux_room)(size_t span), cc_arena **out) {
    *out = NULL;
    size_t unit = huge ? CC_HUGE : cc_page_size();
    if (min_code > SIZE_MAX / 4) return fj_fail(FJ_ERR_INVALID_ARG, "codecache: kernel too large");
    /* Huge-page arenas keep the shared view: MADV_COLLAPSE does not take
     * file pages of a mapping that has anonymous ones. */
    core_view = core_view && kind == CC_FILE && !huge;
    span = round_up(min_code > span ? min_code : span, unit) + (core_view ? cc_page_size() : 0);
    cc_arena *a = fj_calloc(1, sizeof *a);
    cc_vec *v = cc_vec_new(CC_VEC_INITIAL);
    if (!a || !v) {
        fj_free(a);
        fj_free(v);
        return fj_fail(FJ_ERR_NO_MEMORY, "codecache: arena descriptor");
    }
    atomic_init(&a->vec, v);
    atomic_init(&a->count, 0);
    atomic_init(&a->last_use, 0);
    a->id = atomic_fetch_add(&arena_ids, 1) + 1;
    a->kind = kind;
    a->huge = huge;
    a->fd = -1;
    a->slot = -1;
    a->pid = cc_self_pid();
    a->core_view = core_view;
    a->code_end = span - (core_view ? cc_page_size() : 0);

    /* The first page(s) of a file are kept for a header (the ELF image's
     * headers); code starts at a page-aligned offset after it. For huge
     * pages the code starts at 2 MiB, so that file offsets and RX addresses
     * of each 2 MiB chunk line up (a PMD mapping needs both aligned); the
     * gap after the header page is a hole costing nothing. */
    if (kind != CC_ANON) {
        a->code_off = huge ? CC_HUGE : cc_page_size();
        a->meta_room = kind == CC_FILE ? meta_room_for(span) : 0;
        a->rw_len = a->code_off + span + a->meta_room;
    }
    a->blk_len = kind == CC_ANON ? span : a->code_off + span + a->meta_room + a->rw_len;
    size_t views = a->blk_len;
    if (aux_room) {
        a->aux_len = round_up(aux_room(span), cc_page_size());
        a->blk_len += a->aux_len;
    }
    fj_status st = va_carve(a->blk_len, unit, &a->blk);
    if (st != FJ_OK) goto fail;
    a->lo = a->blk + a->code_off;
    a->hi = a->lo + span;
    if (a->aux_len) a->aux = a->blk + views; /* stays as va_carve reserved it */
    if (kind != CC_ANON) {
        st = open_backing(a);
        if (st == FJ_OK) st = map_views(a, span);
        if (st != FJ_OK) goto fail;
        warm_views(a, span);
    }
    /* CC_ANON: the pages stay PROT_NONE in the reservation until a
     * placement makes exactly its own pages RW, then RX. MADV_HUGEPAGE
     * lets khugepaged collapse them too; failure only costs that. */
    if (huge) (void)madvise((void *)a->lo, span, MADV_HUGEPAGE);
    fj_log(2, "codecache: new %s arena %#lx-%#lx%s%s", cc_kind_name(kind), (unsigned long)a->lo,
           (unsigned long)a->hi, a->path[0] ? " " : "", a->path);
    *out = a;
    return FJ_OK;
fail:
    /* A failed MAP_FIXED may have left a hole: the block stays reserved. */
    if (a->blk) rereserve(a->blk, a->blk_len);
    if (a->fd >= 0) os.close(a->fd);
    if (a->path[0]) os.unlink(a->path);
    fj_free(v);
    fj_free(a);
    return st;
}

/* Views of kept files still mapped after their cache was destroyed,
 * oldest first, at most CC_KEPT_VIEWS of them and cc_keep_budget bytes of
 * file in all (the process's share of what keeping may hold). */
#define CC_KEPT_VIEWS 64
static struct kept_view {
    uintptr_t lo;
    size_t len;
    uint64_t bytes;
} kept_views[CC_KEPT_VIEWS];
static int nkept_views;
static uint64_t kept_view_bytes;
_Atomic size_t cc_keep_budget;

/* A kept arena's header, code and metadata views stay mapped until exit,
 * so that what reads the process's mappings at exit (gperftools' profile,
 * LeakSanitizer's report) still finds the file behind the code when the
 * runtime was destroyed first; older ones are given back past the budget.
 * Their code is never reached again: its cache is gone and the addresses
 * are never reused. Returns 0 when the views stay. */
static int keep_views(cc_arena *a) {
    struct stat st;
    uint64_t bytes = fstat(a->fd, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
    size_t budget = atomic_load_explicit(&cc_keep_budget, memory_order_relaxed);
    if (bytes > budget) return -1;
    pthread_mutex_lock(&kept_lock);
    while (nkept_views == CC_KEPT_VIEWS || (nkept_views && kept_view_bytes + bytes > budget)) {
        (void)rereserve(kept_views[0].lo, kept_views[0].len);
        kept_view_bytes -= kept_views[0].bytes;
        memmove(kept_views, kept_views + 1, --nkept_views * sizeof kept_views[0]);
    }
    kept_views[nkept_views++] = (struct kept_view){a->blk, a->hi + a->meta_room - a->blk, bytes};
    kept_view_bytes += bytes;
    pthread_mutex_unlock(&kept_lock);
    return 0;
}

void cc_arena_release(cc_arena *a) {
    if (a->retired) return;
    a->retired = 1;
    /* The range stays reserved (PROT_NONE, no memory behind it) for the
     * life of the process; if even that fails the old mapping stays, which
     * wastes memory but still never lets the addresses be reused. A kept
     * file's read-only and executable views may stay (keep_views); its
     * writable view goes in any case. */
    uintptr_t from = a->blk;
    if (a->blk && a->keep_file && a->pid == cc_self_pid() && a->fd >= 0 && keep_views(a) == 0)
        from = a->hi + a->meta_room;
    if (a->blk && rereserve(from, a->blk + a->blk_len - from) != 0)
        fj_log(1, "codecache: could not release arena %#lx: %s", (unsigned long)a->lo,
               strerror(errno));
    a->rw = NULL;
    /* Nobody writes the image any more: its caller holds a live kernel of
     * the arena, and there is none left. */
    if (a->image_free) a->image_free(a->image);
    a->image = NULL;
    a->image_free = NULL;
    if (a->fd >= 0) os.close(a->fd);
    a->fd = -1;
    /* A forked child must not delete the file its parent still uses. */
    if (a->path[0] && a->pid == cc_self_pid()) {
        if (a->keep_file) cc_shm_keep(a->path);
        else os.unlink(a->path);
    }
}

void cc_arena_free(cc_arena *a) {
    if (!a) return;
    cc_vec *v = atomic_load_explicit(&a->vec, memory_order_relaxed);
    size_t n = atomic_load_explicit(&a->count, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) fj_free(v->items[i]);
    while (v) {
        cc_vec *o = v->older;
        fj_free(v);
        v = o;
    }
    fj_free(a);
}

fj_status cc_arena_reserve(cc_arena *a, size_t len, size_t hot_lo, size_t hot_hi, cc_txn *t,
                           int *fits) {
    *fits = 0;
    /* After fork the child's placements go to arenas of its own: these
     * pages are still shared with the parent, which keeps writing them. */
    if (a->retired || a->pid != cc_self_pid()) return FJ_OK;
    /* Anonymous arenas place each kernel on pages of its own, so no page is
     * ever made writable while another kernel on it may be running. */
    size_t unit = a->kind == CC_ANON ? cc_page_size() : CC_ALIGN;
    size_t size = a->code_end; /* a core-visible arena's last page is not for code */
    size_t off = round_up(a->cursor, unit);
    if (hot_hi && a->kind != CC_ANON) {
        const size_t page = cc_page_size(), last = (off + hot_hi - 1) / page;
        if ((off + hot_lo) / page != last) off = round_up(last * page - hot_lo, unit);
    }
    if (len > size || off > size - len) return FJ_OK;
    size_t span = round_up(len, unit);
    if (span > size - off) span = size - off;
    *fits = 1;
    t->a = a;
    t->off = off;
    t->span = span;
    if (a->kind == CC_ANON) {
        if (sys_mprotect(a->lo + off, span, PROT_READ | PROT_WRITE) != 0)
            return fj_fail(FJ_ERR_OS, "codecache: mprotect RW %zu bytes: %s", span,
                           strerror(errno));
        t->w = (uint8_t *)(a->lo + off);
    } else {
        size_t need = a->code_off + off + span;
        if (need > a->file_len) {
            size_t nl = round_up(need, CC_FILE_GROW);
            if (nl > a->code_off + size) nl = a->code_off + size;
            if (file_extend(a->fd, a->file_len, nl, 1) != 0)
                return fj_fail(FJ_ERR_OS, "codecache: growing code file to %zu bytes: %s", nl,
                               strerror(errno));
            populate_rw(a, a->file_len - a->code_off, nl - a->code_off);
            a->file_len = nl;
        }
        t->w = a->rw + a->code_off + off;
    }
    return FJ_OK;
}

/* How code gets into a file arena's pages. A page's first write through
 * the RW view costs the host's mapping of it: on virtual machines with
 * shadow paging several microseconds even with the view's entries
 * populated as the file grows (populate_rw), about what encoding a small
 * kernel costs; pwritev() into the file costs a system call and no such
 * touch, but every later write to that page must then go through the file
 * too (one RW touch would pay it after all). Placement is sequential, so
 * only the page holding the cursor can see a later write: its way is
 * remembered (tail_file). Small kernels go through the view, so a page of
 * them pays one touch for all of them; a kernel that reaches a page not
 * written through the view yet (rw_mapped: the first one is, from the
 * arena's creation) and fills at least half a page, or one that continues
 * a page written through the file, goes into the file. (A page of n-byte
 * kernels pays one touch through the view or page/n calls through the
 * file: from about half a page the file wins, on shadow-paging virtual
 * machines and on bare metal alike.) */
static fj_status write_file(cc_arena *a, size_t at, const void *code, size_t len, size_t span) {
    struct iovec iov[2] = {{(void *)code, len}, {(void *)int3_page, span - len}};
    if (file_fault() || pwrite_all(a->fd, iov, 2, (off_t)(a->code_off + at)) != 0)
        return fj_fail(FJ_ERR_OS, "codecache: writing %zu bytes of code to the file: %s", span,
                       strerror(errno));
    return FJ_OK;
}

fj_status cc_arena_write(cc_txn *t, const void *code, size_t len, int *by_file) {
    cc_arena *a = t->a;
    const size_t page = cc_page_size();
    /* Written through the file: always for a page already written that
     * way, else for a kernel that reaches a page not mapped in the view
     * yet and is not small. */
    int cont = t->off % page != 0, file = 0;
    if (a->kind != CC_ANON && t->span - len <= sizeof int3_page) {
        int new_page = t->off + t->span > a->rw_mapped &&
                       ((t->off + t->span - 1) / page != t->off / page || !cont);
        file = (cont && a->tail_file) || (new_page && 2 * len >= page);
    }
    *by_file = file;
    if (file) {
        fj_status st = write_file(a, t->off, code, len, t->span);
        if (st != FJ_OK) return st;
    } else {
        memcpy(t->w, code, len);
        memset(t->w + len, 0xcc, t->span - len);
    }
    /* The page the cursor will be in (a continued page keeps its way). */
    if ((t->off + t->span) % page) a->tail_file = file;
    if (!file && t->off + t->span > a->rw_mapped)
        a->rw_mapped = (t->off + t->span + page - 1) / page * page;
    return FJ_OK;
}

/* Huge pages without a hugetlbfs pool and without ever mapping code
 * writable: once placement has filled a 2 MiB chunk (all of it RX code by
 * then), MADV_COLLAPSE copies it into one huge page in place (Linux 6.1+;
 * shmem too, unless shmem THP is "deny"). Best effort: a refusal (THP
 * "never", an old kernel, a chunk with a PROT_NONE hole left by an aborted
 * placement) only costs the iTLB savings. */
static void collapse_full_chunks(cc_arena *a, int *ok, int *bad) {
    while (a->huge && a->collapsed + CC_HUGE <= a->cursor) {
        uintptr_t p = a->lo + a->collapsed;
        a->collapsed += CC_HUGE;
        if (madvise((void *)p, CC_HUGE, MADV_COLLAPSE) == 0) {
            ++*ok;
            fj_log(2, "codecache: huge page for code at %#lx", (unsigned long)p);
        } else {
            ++*bad;
            fj_log(1, "codecache: no huge page for code at %#lx: madvise(MADV_COLLAPSE): %s",
                   (unsigned long)p, strerror(errno));
        }
    }
}

fj_status cc_arena_commit(cc_txn *t, int *huge_ok, int *huge_bad) {
    cc_arena *a = t->a;
    a->cursor = t->off + t->span;
    if (a->kind == CC_ANON && sys_mprotect(a->lo + t->off, t->span, PROT_READ | PROT_EXEC) != 0) {
        int err = errno;
        /* Never leave written code writable; the pages are simply skipped. */
        os.mprotect((void *)(a->lo + t->off), t->span, PROT_NONE);
        return fj_fail(FJ_ERR_OS, "codecache: mprotect RX %zu bytes: %s", t->span,
                       strerror(err));
    }
    /* (file/memfd: the RX view already shows the bytes.) */
    collapse_full_chunks(a, huge_ok, huge_bad);
    return FJ_OK;
}

void cc_arena_abort(cc_txn *t) {
    cc_arena *a = t->a;
    /* Written-but-unpublished bytes are skipped rather than rewritten:
     * addresses only ever move forward. */
    a->cursor = t->off + t->span;
    if (a->kind == CC_ANON) os.mprotect((void *)(a->lo + t->off), t->span, PROT_NONE);
}

/* ------------------------------------------------------------------------
 * Huge pages: what the system allows, for the log.
 * ---------------------------------------------------------------------- */

/* The bracketed word of a THP sysfs file ("always [madvise] never"). */
static void thp_setting(const char *path, char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[256];
    if (fgets(line, sizeof line, f)) {
        char *l = strchr(line, '['), *r = l ? strchr(l, ']') : NULL;
        if (l && r) snprintf(out, n, "%.*s", (int)(r - l - 1), l + 1);
    }
    fclose(f);
}

void cc_huge_describe(char *buf, size_t n) {
    char anon[32], shm[32];
    thp_setting("/sys/kernel/mm/transparent_hugepage/enabled", anon, sizeof anon);
    thp_setting("/sys/kernel/mm/transparent_hugepage/shmem_enabled", shm, sizeof shm);
    snprintf(buf, n, "transparent huge pages: anonymous '%s', shmem '%s'", anon, shm);
}

uint64_t cc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------
 * Files after exit. A normal exit keeps the live arenas' files (read-only,
 * 0400) for tools that read them after the process is gone: perf at the
 * end of `perf record -- prog`, pprof, sanitizers' symbolizers, eu-stack on
 * a core. A process that died without its exit hook leaves its files as
 * they were (0600). Both are removed by pruning, at a normal exit and when
 * the next process creates its first code cache: past keep_seconds, then
 * the oldest until the rest take at most keep_bytes. Only files with our
 * exact names, regular and of the same user, are ever touched. Best effort
 * and not fault-injected: a failure here only leaves a file until the
 * next prune (or the next boot: /dev/shm is a tmpfs).
 * ---------------------------------------------------------------------- */

void cc_shm_keep(const char *path) {
    (void)chmod(path, 0400);
    (void)utimensat(AT_FDCWD, path, NULL, 0);
}

typedef struct kept_file {
    char name[48];
    int64_t mtime_ns;
    uint64_t bytes;
} kept_file;

static int newest_first(const void *x, const void *y) {
    const kept_file *a = x, *b = y;
    return a->mtime_ns < b->mtime_ns ? 1 : a->mtime_ns > b->mtime_ns ? -1 : 0;
}

static void prune_remove(int dfd, const char *name, const char *why) {
    if (unlinkat(dfd, name, 0) == 0) fj_log(1, "codecache: removed /dev/shm/%s (%s)", name, why);
}

void cc_shm_prune(int at_exit, int keep_seconds, size_t keep_bytes) {
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    int dfd = dirfd(d);
    uid_t me = geteuid();
    pid_t self = getpid();
    int keep = keep_seconds > 0 && keep_bytes > 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    kept_file *files = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int pid;
        unsigned seq;
        char canon[48];
        if (strncmp(de->d_name, "framejit-", 9) != 0) continue;
        if (sscanf(de->d_name, "framejit-%d-%u", &pid, &seq) != 2 || pid <= 0) continue;
        /* Only names we would have written (without ".so" by versions
         * before it), nothing that merely starts so. */
        snprintf(canon, sizeof canon, "framejit-%d-%u.so", pid, seq);
        if (strcmp(canon, de->d_name) != 0) {
            canon[strlen(canon) - 3] = 0;
            if (strcmp(canon, de->d_name) != 0) continue;
        }
        struct stat st;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(st.st_mode) || st.st_uid != me) continue;
        if (pid == self) {
            /* Before our first arena: a file of an earlier process that had
             * our pid. At exit: ours, kept a moment ago (or a live file of
             * a cache still being made by another thread: left alone). */
            if (!at_exit) {
                prune_remove(dfd, de->d_name, "left by an earlier process with this pid");
                continue;
            }
            if ((st.st_mode & 0777) != 0400) continue;
        } else if ((st.st_mode & 0777) != 0400 && !(kill(pid, 0) == -1 && errno == ESRCH)) {
            continue; /* a live process's */
        }
        int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        if (!keep) {
            prune_remove(dfd, de->d_name, "its process is gone");
            continue;
        }
        if (now_ns - mt > (int64_t)keep_seconds * 1000000000) {
            prune_remove(dfd, de->d_name, "kept past FRAMEJIT_KEEP_SECONDS");
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            kept_file *nf = fj_realloc(files, nc * sizeof *nf);
            if (!nf) break;
            files = nf;
            cap = nc;
        }
        memcpy(files[n].name, canon, sizeof canon);
        files[n].mtime_ns = mt;
        files[n].bytes = (uint64_t)st.st_blocks * 512;
        n++;
    }
    /* Newest first: what was kept last is what a tool is about to read. */
    if (n > 1) qsort(files, n, sizeof *files, newest_first);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += files[i].bytes;
        if (total > keep_bytes) prune_remove(dfd, files[i].name, "over FRAMEJIT_KEEP_MB");
    }
    fj_free(files);
    closedir(d);
}
