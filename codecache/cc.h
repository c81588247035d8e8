/* cc.h: executable memory for JIT kernels.
 *
 * W^X always: code is written through a writable view and run through a
 * separate read+execute view of the same pages (a file in /dev/shm mapped
 * twice, plus read-only views of its header and metadata for profilers,
 * else a memfd, else anonymous memory whose pages are flipped to RX before
 * any of them runs). Code addresses are never reused for another
 * kernel in the life of the process (libunwind's trace cache cannot be
 * invalidated). The code cache knows nothing about primitives or unwinding.
 *
 * Capacity and eviction. Kernels live in arenas (spans of code address
 * space). The capacity bounds the code memory the arenas hold: the bytes
 * consumed in every arena that has not been given back yet (kernels, their
 * padding, and the room left by kernels removed from an arena that still
 * has live ones). When a placement would go over it, the cache evicts whole
 * arenas, least recently used first (an arena's last use is the newest
 * tick cc_touch gave any of its kernels): the owner's evict hook says
 * whether every kernel in the arena may go (nobody holds or runs it) and
 * frees them. An arena whose kernels are all gone is retired: the retire
 * hook runs first (the owner deregisters the arena's unwind info there:
 * invariant 4), then its pages go back to the system while its virtual
 * range stays reserved (PROT_NONE) forever. Its descriptor and entry
 * records are freed later, once no lookup can still be reading them.
 */
#ifndef FJ_CC_H
#define FJ_CC_H

#include <stddef.h>
#include <stdint.h>
#include "base/base.h"

typedef struct cc_cache cc_cache;
typedef struct cc_arena cc_arena;

/* An arena as the owner sees it in hooks. */
typedef struct cc_arena_info {
    uint64_t id;        /* unique in the process, never reused */
    uintptr_t lo, hi;   /* its RX code span; never handed out again */
    void *user;         /* the owner's pointer for this arena (cc_arena_set_user) */
    cc_arena *arena;    /* opaque, for cc_arena_count / cc_arena_entry */
    uintptr_t aux;      /* the owner's room next to the code (cc_config.aux_room) */
    size_t aux_len;
} cc_arena_info;

typedef struct cc_hooks {
    void *ctx;
    /* Eviction, step 1, called with the cache's lock held (it must not call
     * back into the cache; it may take the owner's own locks as long as the
     * owner never calls the cache while holding them, cc_touch and
     * cc_set_owner excepted). Every live entry of a (cc_arena_entry) must
     * be evictable, else return -1 and change nothing. If they all are,
     * make them unreachable for the owner (no new user can get them), keep
     * what step 2 needs in *detached and return how many there are. NULL:
     * nothing is ever evicted, only empty arenas are retired. */
    long (*evict_detach)(void *ctx, const cc_arena_info *a, void **detached);
    /* Eviction, step 2, without the cache's lock: free what step 1
     * detached; each kernel's entry goes back with cc_remove. */
    void (*evict_free)(void *ctx, void *detached);
    /* The arena's last entry was removed and its memory is about to be
     * given back: deregister whatever unwind info still covers [lo, hi)
     * (invariant 4). Called without the cache's lock, once per arena,
     * also from cc_destroy. May be NULL. */
    void (*retire)(void *ctx, const cc_arena_info *a);
} cc_hooks;

typedef struct cc_config {
    size_t capacity;   /* bytes of code memory held; 0 = default (64 MiB) */
    int code_file;     /* 1: back arenas with files in /dev/shm when possible;
                          0: memfd/anonymous only (FRAMEJIT_CODE_FILE=0) */
    int huge_pages;    /* 1: 2 MiB arenas whose full 2 MiB chunks are
                          collapsed into huge pages where the system allows
                          (FRAMEJIT_HUGEPAGES=1); the log says what happened */
    int reclaim_ms;    /* how long the records of a retired arena stay
                          readable (names returned by lookups); 0 = 1000 */
    /* Address space each arena keeps for its owner at the end of its own
     * block (bytes for a code span of `span`; NULL: none): PROT_NONE,
     * private anonymous, the owner's to make read-write while the arena
     * lives, given back with the arena. For tables that must lie within
     * 32-bit offsets of the code, which free address space near code that
     * is never reused stops offering once many arenas have come and gone. */
    size_t (*aux_room)(size_t span);
    /* 1: the executable view of file arenas is a shared mapping, which the
     * default coredump_filter leaves out of core dumps (FRAMEJIT_CORE_CODE=0);
     * 0: a private one whose code goes into cores (cc_arena.c). */
    int shared_code_view;
    /* Arena files at exit (process-wide: the last cache created says).
     * keep_seconds > 0 and keep_bytes > 0: a normal exit leaves the files
     * of the arenas still live in /dev/shm (read-only, for tools that
     * symbolize after the process is gone), and whoever prunes (the exit
     * itself, a later process's first cache) removes files of exited or
     * dead processes older than keep_seconds, then the oldest until those
     * left take at most keep_bytes. 0: files are removed at exit and any
     * dead process's file at the next start (FRAMEJIT_KEEP_SECONDS,
     * FRAMEJIT_KEEP_MB). */
    int keep_seconds;
    size_t keep_bytes;
} cc_config;

/* A placed kernel. start/size/name and the arena fields are immutable once
 * published. */
typedef struct cc_entry {
    uintptr_t start;     /* first byte, in the RX view */
    size_t size;         /* bytes placed */
    const char *name;    /* owned by the cache */
    uint64_t arena_id;   /* the arena holding it (cc_arena_info.id) */
    uintptr_t arena_lo, arena_hi;
    uintptr_t arena_aux; /* cc_arena_info.aux / aux_len of that arena */
    size_t arena_aux_len;
    void *owner;         /* the owner's object (cc_set_owner); the owner
                            synchronizes its reads and writes itself */
} cc_entry;

FJ_INTERNAL fj_status cc_create(const cc_config *cfg, cc_cache **out);
/* Installs the owner's hooks (before the first placement). */
FJ_INTERNAL void cc_set_hooks(cc_cache *c, const cc_hooks *h);
/* Unmaps everything (the retire hook runs for each arena still holding
 * memory). None of its kernels may be running. NULL ok. */
FJ_INTERNAL void cc_destroy(cc_cache *c);
/* Around fork (FJ_FORK_* phases, runtime/fork.c): c's lock, and the
 * process-wide locks of the arena table and the address space (in the
 * child also the lookups in flight, which the other threads left). */
FJ_INTERNAL void cc_fork(cc_cache *c, int phase);
FJ_INTERNAL void cc_fork_global(int phase);

/* Copies len bytes of position-independent code into executable memory
 * and publishes it for cc_lookup, evicting least recently used arenas if
 * it would not fit in the capacity; FJ_ERR_CACHE_FULL if nothing can be
 * evicted. Never called with a lock the evict hooks take. */
FJ_INTERNAL fj_status cc_place(cc_cache *c, const uint8_t *code, size_t len, const char *name,
                               cc_entry **out);
/* cc_place, with bytes [hot_lo, hot_hi) of the code (its loops) within one
 * page where they fit in one with a line to spare (file and memfd
 * backings; an anonymous one starts every kernel on a page and keeps what
 * that keeps): with its loop across a page boundary the AVX2 vector x
 * matrix kernel ran 15-20% slower in up to 10 of 12 processes on Zen 5
 * (docs/performance.md). The kernel then starts up to hot_hi - hot_lo + a
 * line further on. hot_hi 0: no range; hot_lo >= hot_hi or hot_hi > len
 * otherwise is FJ_ERR_INVALID_ARG. */
FJ_INTERNAL fj_status cc_place_hot(cc_cache *c, const uint8_t *code, size_t len, size_t hot_lo,
                                    size_t hot_hi, const char *name, cc_entry **out);
/* Unpublishes an entry. Its address range is never reused; its record
 * stays readable until its arena is reclaimed. */
FJ_INTERNAL void cc_remove(cc_cache *c, cc_entry *e);

/* Marks e (hence its arena) used at tick (a clock the owner keeps; larger
 * is newer). Lock-free, cheap: one relaxed store. */
FJ_INTERNAL void cc_touch(cc_entry *e, uint64_t tick);
FJ_INTERNAL void cc_set_owner(cc_entry *e, void *owner);
/* The owner's pointer for e's arena, and setting it (under the owner's own
 * synchronization); the retire hook gets it back in cc_arena_info.user. */
FJ_INTERNAL void *cc_arena_user(const cc_entry *e);
FJ_INTERNAL void cc_arena_set_user(const cc_entry *e, void *user);
/* The arena new kernels go to (right after cc_create: the first one, which
 * has no entry yet), so its owner can set its pointer before the first
 * placement. 0 when there is none. Not concurrent with placements. */
FJ_INTERNAL int cc_current_arena(cc_cache *c, cc_arena_info *out);
FJ_INTERNAL void cc_arena_info_set_user(const cc_arena_info *a, void *user);

/* In hooks: entries of an arena; cc_arena_entry gives NULL for a removed one. */
FJ_INTERNAL size_t cc_arena_count(const cc_arena_info *a);
FJ_INTERNAL cc_entry *cc_arena_entry(const cc_arena_info *a, size_t i);

/* Async-signal-safe and lock-free, across all live caches: the entry whose
 * [start, start+size) contains pc, or NULL. The pointer stays readable at
 * least until the entry's arena has been retired for the reclaim delay. */
FJ_INTERNAL const cc_entry *cc_lookup(uintptr_t pc);

/* "file", "memfd" or "anonymous": how this cache's code is backed. */
FJ_INTERNAL const char *cc_backing(const cc_cache *c);
/* How many arenas the capacity holds (normal spans; at least 1). */
FJ_INTERNAL size_t cc_arena_slots(const cc_cache *c);

typedef struct cc_stats {
    size_t capacity;
    size_t held;             /* bytes counted against the capacity */
    size_t live_kernels;     /* placed and not removed */
    size_t live_bytes;       /* their code bytes */
    size_t mapped_bytes;     /* spans of arenas holding memory */
    size_t arenas;           /* arenas holding memory */
    size_t limbo;            /* retired arenas whose records are not freed yet */
    uint64_t arenas_evicted; /* arenas emptied by eviction */
    uint64_t arenas_retired;
    uint64_t huge_chunks;    /* 2 MiB chunks collapsed into huge pages */
    uint64_t huge_failed;    /* ... that the system refused */
    uint64_t file_writes;    /* kernels written into the file, not through the view */
} cc_stats;
FJ_INTERNAL void cc_get_stats(cc_cache *c, cc_stats *out);

/* ---- The arena file as an ELF image (cc_image.c) ---------------------------
 * For the self-describing arena files (runtime/publish.c). Besides its code
 * (read+execute at lo), a /dev/shm arena maps the file's header page
 * read-only at lo - code_off and the metadata area that follows the code
 * span in the file (meta_room bytes from file offset code_off + (hi - lo))
 * read-only at hi: the file is laid out in memory as a loader would map an
 * ELF file whose addresses are its file offsets, and its writable view lies
 * above all of that. So an unwinder that takes the file's lowest mapping
 * for its load address (perf --call-graph dwarf) reads .eh_frame_hdr and
 * .eh_frame where the ELF headers say they are. The image writer writes
 * through the writable view: the header page and the metadata area only,
 * never the code pages; the code cache itself never writes there. */
typedef struct cc_image_info {
    int fd;              /* the backing file (owned by the cache; -1 if none) */
    uint64_t arena_id;
    uint64_t code_off;   /* file offset of lo */
    uintptr_t lo, hi;    /* the arena's code span in the RX view */
    size_t page;
    const char *backing; /* "file", "memfd", "anonymous" */
    const char *path;    /* /dev/shm file, NULL otherwise */
    uint8_t *hdr;        /* writable header page (file offset 0, page bytes) */
    uint8_t *meta;       /* writable metadata area (file offset meta_off) */
    uint64_t meta_off;   /* code_off + (hi - lo) */
    size_t meta_room;    /* bytes of the area (and of its read-only view at hi) */
    size_t removed;      /* entries of the arena removed so far (cc_remove) */
} cc_image_info;
/* The arena holding e (the functions below work on arenas). */
FJ_INTERNAL cc_arena *cc_entry_arena(const cc_entry *e);
/* Fills out for e's arena. FJ_ERR_UNSUPPORTED (no message: not an error)
 * when the arena is not a file this process may write (memfd, anonymous,
 * or a file created by the parent of a fork); the id, span and backing
 * are filled anyway. The caller holds a live entry of the arena (so it
 * cannot be retired under it) and serializes image writes per arena. */
FJ_INTERNAL fj_status cc_entry_image(const cc_entry *e, cc_image_info *out);
/* The same for an arena (cc_arena_info.arena) that its owner knows to be
 * alive: the runtime's first arena while the runtime is being created. */
FJ_INTERNAL fj_status cc_arena_image(cc_arena *a, cc_image_info *out);
/* Allocates the file's pages for [off, off + n) of the metadata area
 * (offsets relative to it), so that writes there through meta cannot fault
 * on a full /dev/shm; FJ_ERR_OS if the system cannot (then write nothing
 * there). */
FJ_INTERNAL fj_status cc_image_back(cc_arena *a, uint64_t off, uint64_t n);
/* Gives [off, off + n) of the metadata area back (a hole), or with
 * truncate != 0 cuts the file at that offset. */
FJ_INTERNAL fj_status cc_image_discard(cc_arena *a, uint64_t off, uint64_t n, int truncate);
/* The image writer's state for the arena, NULL until set. free_fn(state)
 * runs once, when the arena's memory is given back (retire, cc_destroy). */
FJ_INTERNAL void *cc_image_state(const cc_arena *a);
FJ_INTERNAL void cc_image_set_state(cc_arena *a, void *state, void (*free_fn)(void *));
/* Whether e was removed (cc_remove). Its arena must still hold memory. */
FJ_INTERNAL int cc_entry_removed(const cc_entry *e);

#endif
