/* cc.h: executable memory for JIT kernels.
 *
 * W^X always: code is written through a writable view and run through a
 * separate read+execute view of the same pages (a file in /dev/shm mapped
 * twice, else a memfd, else anonymous memory whose pages are flipped to RX
 * before any of them runs). Code addresses are never reused for another
 * kernel in the life of the process (libunwind's trace cache cannot be
 * invalidated). The code cache knows nothing about primitives or unwinding.
 */
#ifndef FJ_CC_H
#define FJ_CC_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/fj_base.h"

typedef struct cc_cache cc_cache;

typedef struct cc_config {
    size_t capacity;   /* bytes of code; 0 = default */
    int code_file;     /* 1: back arenas with files in /dev/shm when possible;
                          0: memfd/anonymous only (FRAMEJIT_CODE_FILE=0) */
} cc_config;

/* A placed kernel. start/size/name are immutable once published. */
typedef struct cc_entry {
    uintptr_t start;   /* first byte, in the RX view */
    size_t size;       /* bytes placed */
    const char *name;  /* owned by the cache */
} cc_entry;

FJ_INTERNAL fj_status cc_create(const cc_config *cfg, cc_cache **out);
/* Unmaps everything. Unwind info for its kernels must be deregistered
 * first, and none of its kernels may be running. NULL ok. */
FJ_INTERNAL void cc_destroy(cc_cache *c);

/* Copies len bytes of position-independent code (align: power of two,
 * >= 16) into executable memory and publishes it for cc_lookup. */
FJ_INTERNAL fj_status cc_place(cc_cache *c, const uint8_t *code, size_t len, const char *name,
                               cc_entry **out);
/* Unpublishes and frees an entry. Its address range is never reused. */
FJ_INTERNAL void cc_remove(cc_cache *c, cc_entry *e);

/* Async-signal-safe and lock-free, across all live caches: the entry whose
 * [start, start+size) contains pc, or NULL. */
FJ_INTERNAL const cc_entry *cc_lookup(uintptr_t pc);

/* "file", "memfd" or "anonymous": how this cache's code is backed. */
FJ_INTERNAL const char *cc_backing(const cc_cache *c);

#endif
