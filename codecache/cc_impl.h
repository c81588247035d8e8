/* cc_impl.h: the code cache's internal structures, shared by cc_arena.c
 * (OS memory, backings, address space) and cc_cache.c (placement, lookup).
 *
 * Overview:
 *
 *   process-wide PROT_NONE reservation (1 GiB, grown by more reservations)
 *   ┌──────────┬──────────┬──────────┬───────────────────────── ─ ─
 *   │ arena 0  │ arena 1  │ arena 2  │ never handed out yet ...
 *   └──────────┴──────────┴──────────┴───────────────────────── ─ ─
 *     RX view of file/memfd pages (or anonymous pages flipped RW -> RX)
 *
 *   file /dev/shm/framejit-<pid>-<seq>.so: [header page(s)][code span][metadata]
 *   one arena's block of the range, as a loaded ELF file would be mapped:
 *     [header R][code RX][metadata R][RW view of the whole file]
 *   (memfd: [gap][code RX][RW view of header and code]). The read-only
 *   views exist for profilers (cc.h, "The arena file as an ELF image"); the
 *   RW view lies above the others so that the file's lowest mapping is the
 *   one at its ELF load address. Nothing is ever writable and executable.
 *
 * Arenas are carved from the reservation monotonically and their virtual
 * addresses are never given back for reuse, so a code address names one
 * kernel for the life of the process. Every live arena sits in a global
 * slot table that cc_lookup scans without locks.
 */
#ifndef FJ_CC_IMPL_H
#define FJ_CC_IMPL_H

#include <stdatomic.h>
#include <sys/types.h>
#include "codecache/cc.h"

enum { CC_FILE, CC_MEMFD, CC_ANON };

#define CC_ALIGN 64u                    /* kernel start alignment (a cache line) */
#define CC_ARENA_BYTES ((size_t)1 << 20) /* largest default code span of an arena */
#define CC_ARENA_MIN ((size_t)16 << 10)  /* smallest (small capacities) */
#define CC_HUGE ((size_t)2 << 20)        /* huge page size (x86-64 PMD) */
#define CC_META_MIN ((size_t)256 << 10)  /* least metadata room of a file arena */
#define CC_DEFAULT_CAPACITY ((size_t)64 << 20)
#define CC_MAX_ARENAS 4096              /* live arenas in the whole process */

typedef struct cc_arena cc_arena;

/* One placed kernel. The public part comes first so a cc_entry * is also a
 * cc_rec *. Records live as long as their arena's descriptor: until the
 * cache is destroyed, or the arena has been retired for the reclaim delay
 * and a grace period has passed. */
typedef struct cc_rec {
    cc_entry e;
    atomic_int dead;     /* set by cc_remove; lookups then skip it */
    cc_arena *arena;
    char name[];         /* e.name points here */
} cc_rec;

/* Append-only array of entries sorted by start. When it grows, the old
 * array is kept (chained) until the arena dies: a lookup may still read it.
 * starts[i] == items[i]->e.start, contiguous so that a lookup's binary
 * search touches a few cache lines instead of one record per step. */
typedef struct cc_vec {
    size_t cap;
    struct cc_vec *older;
    uintptr_t *starts;   /* [cap], right after items[] in the same block */
    cc_rec *items[];
} cc_vec;

static inline cc_vec *cc_vec_new(size_t cap) {
    cc_vec *v = fj_malloc(sizeof *v + cap * (sizeof v->items[0] + sizeof v->starts[0]));
    if (v) {
        v->cap = cap;
        v->older = NULL;
        v->starts = (uintptr_t *)(void *)(v->items + cap);
    }
    return v;
}

/* Arena life: OPEN (takes placements while it is the cache's current one)
 * -> CLOSED (takes no more; still runs its kernels) -> RETIRING (every
 * entry removed; the retire hook and the release are under way outside the
 * lock) -> RETIRED (memory given back, unpublished, waiting in limbo until
 * its records can be freed). */
enum { CC_OPEN, CC_CLOSED, CC_RETIRING, CC_RETIRED };

struct cc_arena {
    /* Read by cc_lookup; immutable once the arena is published. */
    uintptr_t lo, hi;                /* RX code span [lo, hi) */
    _Atomic(cc_vec *) vec;
    atomic_size_t count;             /* published entries in vec */

    atomic_uint_least64_t last_use;  /* newest cc_touch tick of its kernels */
    uint64_t id;

    /* Writer side, under the owning cache's lock. */
    cc_cache *owner;
    int kind;                        /* CC_FILE, CC_MEMFD, CC_ANON */
    int state;                       /* CC_OPEN ... CC_RETIRED */
    int fd;                          /* -1 for CC_ANON or once retired */
    int huge;                        /* collapse full 2 MiB chunks */
    pid_t pid;                       /* creator; a forked child never writes here */
    uintptr_t blk;                   /* the arena's block: [blk, blk + blk_len) */
    size_t blk_len;
    uint8_t *rw;                     /* RW view of the whole file (file/memfd) */
    size_t rw_len;
    size_t code_off;                 /* file offset of lo: header page(s) first */
    size_t file_len;                 /* bytes from file offset 0 backed for code */
    size_t meta_room;                /* file: metadata bytes after the span (view at hi) */
    uintptr_t aux;                   /* the owner's room at the block's end (cc_config) */
    size_t aux_len;
    void *image;                     /* the image writer's state (cc_image_set_state) */
    uint64_t meta_backed;            /* metadata bytes [0, meta_backed) allocated in the file */
    void (*image_free)(void *);
    size_t cursor;                   /* next free byte, relative to lo */
    size_t code_end;                 /* placement limit, relative to lo (<= hi - lo) */
    int core_view;                   /* file: private read-only views, code in cores */
    int keep_file;                   /* release keeps the file (cc_shm_keep), not unlink */
    int tail_file;                   /* the cursor's page was written through the file */
    size_t rw_mapped;                /* code bytes [0, rw_mapped) written through the RW view */
    size_t collapsed;                /* bytes from lo already offered to MADV_COLLAPSE */
    atomic_size_t ndead;             /* removed entries (written under the lock) */
    int slot;                        /* index in the global slot table, -1 if none */
    int retired;                     /* memory given back; records kept */
    int evicting;                    /* an eviction of it is under way */
    uint64_t evict_round;            /* last eviction round that tried it */
    uint64_t retired_ns;             /* when it entered limbo */
    void *user;                      /* owner's pointer (cc_arena_set_user) */
    cc_arena *next;                  /* the cache's arena list (or limbo list) */
    cc_arena *work_next;             /* local work lists (retire after unlock) */
    char path[64];                   /* /dev/shm file, "" otherwise */
};

/* A write in progress (LuaJIT's reserve -> write -> commit | abort). */
typedef struct cc_txn {
    cc_arena *a;
    size_t off;                      /* relative to a->lo */
    size_t span;                     /* bytes reserved (len rounded up) */
    uint8_t *w;                      /* where to write the code */
} cc_txn;

/* ---- cc_arena.c ---- */

/* Creates an arena of the given kind with at least min_code bytes of code
 * span (rounded up to `span`, its normal size); fills everything but
 * slot/owner/next. huge: 2 MiB aligned span and code offset, full chunks
 * collapsed into huge pages as placement fills them. aux_room: see
 * cc_config. */
/* The system's page size (asked once). */
FJ_INTERNAL size_t cc_page_size(void);
FJ_INTERNAL fj_status cc_arena_new(int kind, size_t span, size_t min_code, int huge,
                                   int core_view, size_t (*aux_room)(size_t span),
                                   cc_arena **out);
/* Gives the arena's memory back (keeps its addresses reserved as PROT_NONE
 * forever), closes and unlinks its file. The descriptor stays valid. */
FJ_INTERNAL void cc_arena_release(cc_arena *a);
/* Frees the descriptor and its records. Unpublished, after a grace period. */
FJ_INTERNAL void cc_arena_free(cc_arena *a);
/* Room for len bytes at the cursor, made writable; 0 if it does not fit.
 * With hot_hi != 0, bytes [hot_lo, hot_hi) of the kernel (at most a page
 * less a line, checked by the caller) must not cross a page boundary:
 * in a file arena the kernel moves on until they start the next page (the
 * bytes skipped stay int3); an anonymous arena starts kernels on pages
 * anyway and places it as without. */
FJ_INTERNAL fj_status cc_arena_reserve(cc_arena *a, size_t len, size_t hot_lo, size_t hot_hi,
                                       cc_txn *t, int *fits);
/* Writes the code (and int3 up to the end of the reservation) to its
 * place: through the RW view or into the file (cc_arena.c says when;
 * *by_file says which). */
FJ_INTERNAL fj_status cc_arena_write(cc_txn *t, const void *code, size_t len, int *by_file);
/* Makes the written bytes executable (anonymous: flips the pages to RX).
 * *huge_ok / *huge_bad count 2 MiB chunks this commit completed and
 * collapsed into huge pages, or failed to. */
FJ_INTERNAL fj_status cc_arena_commit(cc_txn *t, int *huge_ok, int *huge_bad);
/* Makes the RW view's page table entries for file bytes [off, off + len)
 * writable ahead of the stores (best effort; see cc_arena.c). */
FJ_INTERNAL void cc_populate_rw(cc_arena *a, size_t off, size_t len);
/* Drops a reservation; its addresses are simply never used. */
FJ_INTERNAL void cc_arena_abort(cc_txn *t);
/* Marks a live arena's file as kept after exit: read-only (0400, which
 * tells later processes its owner has exited, whatever its pid is now)
 * and its modification time now (when the keep time starts). */
FJ_INTERNAL void cc_shm_keep(const char *path);
/* Bytes of kept files whose views a process keeps mapped after their
 * cache was destroyed (cc_config.keep_bytes of the last cache created). */
FJ_INTERNAL extern _Atomic size_t cc_keep_budget;
/* Removes this user's /dev/shm/framejit-<pid>-<seq>.so files that nobody
 * uses any more past the bounds (cc_config.keep_seconds / keep_bytes; 0:
 * all of them). Files of exited processes (0400) and of dead ones count;
 * at_exit: the caller's own kept files too (cc_shm_keep: at exit or when
 * its cache was destroyed),
 * else the caller's pid has none yet, so any with its pid are an earlier
 * process's. */
FJ_INTERNAL void cc_shm_prune(int at_exit, int keep_seconds, size_t keep_bytes);
FJ_INTERNAL const char *cc_kind_name(int kind);
/* One line on what huge pages can do here (THP settings), for the log. */
FJ_INTERNAL void cc_huge_describe(char *buf, size_t n);
FJ_INTERNAL uint64_t cc_now_ns(void);
/* getpid(), cached (reset in a child of fork). */
FJ_INTERNAL pid_t cc_self_pid(void);
/* The address-space lock around fork (cc_fork_global). */
FJ_INTERNAL void cc_arena_fork(int phase);

/* ---- cc_cache.c ---- */

/* The /dev/shm file holding e's code, or NULL (memfd/anonymous). Tests and
 * the future ELF writer use it. */
FJ_INTERNAL const char *cc_entry_path(const cc_entry *e);

#endif
