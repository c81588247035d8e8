/* publish.c: keeps each code arena's backing file a valid ELF image of the
 * kernels placed in it (names, sizes, CFI, build-id), so perf names kernels
 * and unwinds through them with no map or jitdump file; and writes the
 * opt-in perf map (FRAMEJIT_PERFMAP=1) and jitdump (FRAMEJIT_JITDUMP=1)
 * files.
 *
 * Each arena's image (unwindinfo/uw_image.c) hangs off the arena itself
 * (cc_image_set_state) and goes with it when the arena is retired. A new
 * kernel is appended to it in place, through the arena's writable view of
 * its metadata, at a constant cost however many kernels the arena holds;
 * the whole metadata is only written again when its room is full (twice
 * the room, so rarely) or when compacting.
 *
 * Kernels removed from the cache stay described until a compaction drops
 * them: at a kernel's arrival in the same arena, when at least half of the
 * kernels described (and at least COMPACT_MIN) have been removed since the
 * last one. A stale symbol names addresses that no other kernel will ever
 * have (the code cache never reuses them), so it cannot mislabel samples.
 * An arena that takes no more kernels keeps its removed kernels' entries
 * until it is retired and its file deleted. */
#include "runtime/publish.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPACT_MIN 32

typedef struct img_arena {
    uw_image *im;
    size_t removed_base; /* the arena's removed count at the last compaction */
} img_arena;

static pthread_mutex_t img_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_image_stats stats;
static int logged_skip;

void rt_image_fork(int phase) { fj_fork_mutex(&img_lock, phase); }

/* The arena's retirement frees it (cc_arena_release). */
static void arena_free(void *p) {
    img_arena *s = p;
    if (!s) return;
    uw_image_free(s->im);
    fj_free(s);
}

/* ctx: the arena (cc_arena *). */
static fj_status back(void *ctx, uint64_t off, uint64_t n) { return cc_image_back(ctx, off, n); }

static void discard(void *ctx, uint64_t off, uint64_t n, int truncate) {
    if (cc_image_discard(ctx, off, n, truncate) != FJ_OK)
        fj_log(1, "image: %s (harmless)", fj_last_error());
}

static int kernel_live(const void *tag) { return !cc_entry_removed(tag); }

/* Under img_lock: arena a's image, created at its first kernel (or, for
 * a runtime's first arena, at the runtime's creation: rt_image_arena_early). */
static img_arena *image_of(cc_arena *a, const cc_image_info *info) {
    img_arena *s = cc_image_state(a);
    if (s) return s;
    uw_image_map m = {
        .hdr = info->hdr,
        .meta = info->meta,
        .page = info->page,
        .code_off = info->code_off,
        .code_span = info->hi - info->lo,
        .lo = info->lo,
        .meta_off = info->meta_off,
        .meta_room = info->meta_room,
        .back = back,
        .discard = discard,
    };
    s = fj_calloc(1, sizeof *s);
    if (!s) {
        fj_fail(FJ_ERR_NO_MEMORY, "image: out of memory");
        return NULL;
    }
    if (uw_image_new(&m, &s->im) != FJ_OK) {
        fj_free(s);
        return NULL;
    }
    cc_image_set_state(a, s, arena_free);
    return s;
}

/* Under img_lock. Drops removed kernels when they are half of the image. */
static void maybe_compact(img_arena *s, const cc_entry *e, const cc_image_info *info) {
    size_t dead = info->removed - s->removed_base;
    if (dead < COMPACT_MIN || 2 * dead < uw_image_count(s->im)) return;
    if (uw_image_compact(s->im, kernel_live, cc_entry_arena(e)) != FJ_OK) {
        fj_log(1, "image: %s: compaction failed (removed kernels stay listed): %s", info->path,
               fj_last_error());
        return;
    }
    s->removed_base = info->removed;
    stats.compactions++;
    stats.images++;
}

/* Under img_lock. */
static fj_status describe(const cc_entry *e, const uw_func *f, const uint8_t *code,
                          const cc_image_info *info) {
    cc_arena *ar = cc_entry_arena(e);
    img_arena *s = image_of(ar, info);
    if (!s) return FJ_ERR_NO_MEMORY;
    uw_image_stats a, b;
    uw_image_get_stats(s->im, &a);
    maybe_compact(s, e, info);
    fj_status st = uw_image_add(s->im, f, code, e, ar);
    uw_image_get_stats(s->im, &b);
    stats.rewrites += b.rewrites - a.rewrites;
    if (st != FJ_OK) return st;
    stats.images++;
    stats.meta_bytes = b.meta_bytes;
    stats.kernels = b.kernels;
    if (fj_verbose() >= 2) {
        char id[2 * sizeof b.build_id + 1];
        for (size_t i = 0; i < sizeof b.build_id; i++)
            snprintf(id + 2 * i, 3, "%02x", b.build_id[i]);
        fj_log(2, "image: %s: %zu kernel(s), %llu metadata bytes at %#llx, build-id %s",
               info->path, b.kernels, (unsigned long long)b.meta_bytes,
               (unsigned long long)b.meta_off, id);
    }
    return FJ_OK;
}

void rt_image_kernel(const cc_entry *e, const uw_func *f, const uint8_t *code, int perfmap,
                     int jitdump) {
    if (!e || !f) return;
    cc_image_info info;
    fj_status st = cc_entry_image(e, &info);
    if (st == FJ_OK) {
        pthread_mutex_lock(&img_lock);
        st = describe(e, f, code, &info);
        if (st != FJ_OK) stats.failures++;
        pthread_mutex_unlock(&img_lock);
        if (st != FJ_OK)
            fj_log(1, "image: %s: kernel %s not described in the file (perf may show it as "
                   "[unknown]): %s", info.path, f->name, fj_last_error());
    } else if (!__atomic_exchange_n(&logged_skip, 1, __ATOMIC_RELAXED)) {
        fj_log(1, "image: code is %s-backed: no ELF image for perf (kernels show as [unknown] "
               "unless FRAMEJIT_PERFMAP=1 with anonymous memory or FRAMEJIT_JITDUMP=1)",
               info.backing ? info.backing : "not");
    }
    if (perfmap && uw_perfmap_add(f) != FJ_OK)
        fj_log(1, "image: perf map: %s", fj_last_error());
    if (jitdump && (!code || uw_jitdump_add(f, code) != FJ_OK))
        fj_log(1, "image: jitdump: %s", code ? fj_last_error() : "no code bytes");
}

void rt_image_arena_early(const cc_arena_info *ai) {
    cc_image_info info;
    if (!ai || cc_arena_image(ai->arena, &info) != FJ_OK) return;
    pthread_mutex_lock(&img_lock);
    img_arena *s = image_of(ai->arena, &info);
    uw_image_stats a, b;
    if (s) uw_image_get_stats(s->im, &a);
    if (s && uw_image_layout(s->im, ai->arena) == FJ_OK) {
        uw_image_get_stats(s->im, &b);
        stats.rewrites += b.rewrites - a.rewrites;
    }
    pthread_mutex_unlock(&img_lock);
}

void rt_image_get_stats(rt_image_stats *st) {
    pthread_mutex_lock(&img_lock);
    *st = stats;
    pthread_mutex_unlock(&img_lock);
}
