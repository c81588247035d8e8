/* image.c: keeps each code arena's backing file a valid ELF image that
 * lists the arena's live kernels (names, sizes, CFI, build-id), so perf
 * names kernels and unwinds through them with no map or jitdump file; and
 * writes the opt-in perf map (FRAMEJIT_PERFMAP=1) and jitdump
 * (FRAMEJIT_JITDUMP=1) files.
 *
 * Per arena this keeps the list of its kernels with their CFA programs
 * (uw_image) and, for each new kernel, lays the image out again and writes
 * it: the metadata first, into whichever of two slots after the code span
 * the current header does not point to, then the header page. A reader
 * (perf copying the file at the end of a recording) thus sees the old or
 * the new version whole, unless two updates pass during its read. The
 * stale slot is then freed (hole or truncation), so the file holds one
 * copy of the metadata.
 *
 * Kernels removed from the cache leave the image at the arena's next
 * update (liveness: cc_lookup of the kernel's start still gives its entry;
 * code addresses are never reused, so this cannot mistake another kernel
 * for it). An arena's state is freed once none of its kernels is live,
 * and at exit. */
#include "runtime/image.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct img_arena {
    uint64_t id;
    uintptr_t lo, hi;
    uw_image *im;
    uint64_t base;    /* first metadata byte: right after the code span */
    uint64_t cap;     /* bytes per slot; slot i at base + i * cap */
    int cur;          /* slot the header points to, -1 before the first write */
    uint64_t cur_len; /* its metadata bytes */
    struct img_arena *next;
} img_arena;

static pthread_mutex_t img_lock = PTHREAD_MUTEX_INITIALIZER;
static img_arena *arenas;
static rt_image_stats stats;
static int logged_skip;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void arena_free(img_arena *s) {
    uw_image_free(s->im);
    fj_free(s);
}

static void free_all_at_exit(void) {
    pthread_mutex_lock(&img_lock);
    while (arenas) {
        img_arena *s = arenas;
        arenas = s->next;
        arena_free(s);
    }
    pthread_mutex_unlock(&img_lock);
}

static void register_exit(void) {
    if (atexit(free_all_at_exit) != 0) fj_log(1, "image: atexit failed");
}

/* Is the kernel whose entry was tag, at start, still in the cache? */
static int kernel_live(const void *tag, uintptr_t start, void *ctx) {
    (void)ctx;
    return (const void *)cc_lookup(start) == tag;
}

/* Under img_lock: the state for e's arena (created if needed), after
 * dropping dead kernels everywhere and the states left empty. */
static img_arena *arena_for(const cc_image_info *info) {
    img_arena *found = NULL, **pp = &arenas;
    while (*pp) {
        img_arena *s = *pp;
        uw_image_prune(s->im, kernel_live, NULL);
        if (s->id == info->arena_id) {
            found = s;
        } else if (uw_image_count(s->im) == 0) {
            *pp = s->next;
            arena_free(s);
            continue;
        }
        pp = &s->next;
    }
    if (found) return found;
    img_arena *s = fj_calloc(1, sizeof *s);
    if (!s || uw_image_new(&s->im) != FJ_OK) {
        fj_free(s);
        return NULL;
    }
    s->id = info->arena_id;
    s->lo = info->lo;
    s->hi = info->hi;
    s->base = (info->code_off + (info->hi - info->lo) + info->page - 1) & ~(uint64_t)(info->page - 1);
    s->cur = -1;
    s->next = arenas;
    arenas = s;
    pthread_once(&exit_once, register_exit);
    return s;
}

static uint64_t page_up(uint64_t v, uint64_t pg) { return (v + pg - 1) & ~(pg - 1); }

/* Under img_lock. Writes a new version of s's image through e. */
static fj_status write_image(img_arena *s, const cc_entry *e, const cc_image_info *info) {
    uw_image_layout l = {.page = info->page, .code_off = info->code_off,
                         .code_span = info->hi - info->lo, .lo = info->lo};
    int slot = s->cur == 0 ? 1 : 0;
    uw_image_bytes b;
    l.meta_off = s->base + (uint64_t)slot * s->cap;
    fj_status st = uw_image_build(s->im, &l, &b);
    if (st != FJ_OK) return st;
    if (b.meta_len > s->cap) {
        /* Grow the slots. With cap at least doubled, whatever the header
         * points to now lies inside the new slot 0: write slot 1. */
        uint64_t cap = s->cap ? s->cap : 16384;
        while (cap < 2 * b.meta_len || cap < 2 * s->cap) cap *= 2;
        s->cap = page_up(cap, info->page);
        slot = s->cur < 0 ? 0 : 1;
        uw_image_bytes_free(&b);
        l.meta_off = s->base + (uint64_t)slot * s->cap;
        st = uw_image_build(s->im, &l, &b);
        if (st != FJ_OK) return st;
    }
    /* Metadata first, then the header that points to it. */
    st = cc_image_write(e, l.meta_off, b.meta, b.meta_len);
    if (st == FJ_OK) st = cc_image_write(e, 0, b.hdr, b.hdr_len);
    if (st == FJ_OK) {
        const int old = s->cur;
        const uint64_t old_off = s->base + (uint64_t)(old < 0 ? 0 : old) * s->cap;
        const uint64_t old_len = s->cur_len;
        s->cur = slot;
        s->cur_len = b.meta_len;
        stats.images++;
        stats.meta_bytes = b.meta_len;
        stats.kernels = uw_image_count(s->im);
        /* Give the stale copy back: cut the file after the new copy when
         * it is the last thing in the file, else punch the old one out. */
        fj_status d = FJ_OK;
        if (old >= 0 && old_off > l.meta_off)
            d = cc_image_discard(e, l.meta_off + b.meta_len, 0, 1);
        else if (old >= 0 && old_off != l.meta_off)
            d = cc_image_discard(e, old_off, page_up(old_len, info->page), 0);
        if (d != FJ_OK) fj_log(1, "image: %s: %s (harmless)", info->path, fj_last_error());
        if (fj_verbose() >= 2) {
            char id[2 * sizeof b.build_id + 1];
            for (size_t i = 0; i < sizeof b.build_id; i++)
                snprintf(id + 2 * i, 3, "%02x", b.build_id[i]);
            fj_log(2, "image: %s: %zu kernel(s), %zu metadata bytes at %#llx, build-id %s",
                   info->path, uw_image_count(s->im), b.meta_len,
                   (unsigned long long)l.meta_off, id);
        }
    }
    uw_image_bytes_free(&b);
    return st;
}

static int env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

void rt_image_kernel(const cc_entry *e, const uw_func *f, const uint8_t *code) {
    if (!e || !f) return;
    cc_image_info info;
    fj_status st = cc_entry_image(e, &info);
    if (st == FJ_OK) {
        pthread_mutex_lock(&img_lock);
        img_arena *s = arena_for(&info);
        st = s ? uw_image_add(s->im, f, code, e)
               : fj_fail(FJ_ERR_NO_MEMORY, "image: out of memory");
        if (st == FJ_OK) st = write_image(s, e, &info);
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
    if (env_on("FRAMEJIT_PERFMAP") && uw_perfmap_add(f) != FJ_OK)
        fj_log(1, "image: perf map: %s", fj_last_error());
    if (env_on("FRAMEJIT_JITDUMP") && (!code || uw_jitdump_add(f, code) != FJ_OK))
        fj_log(1, "image: jitdump: %s", code ? fj_last_error() : "no code bytes");
}

void rt_image_get_stats(rt_image_stats *st) {
    pthread_mutex_lock(&img_lock);
    *st = stats;
    pthread_mutex_unlock(&img_lock);
}
