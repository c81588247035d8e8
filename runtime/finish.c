/* finish.c: finishing kernels (assemble -> verify -> place -> register
 * unwind info), kernel handles, and the public builder entry points that
 * need the runtime (fj_builder_create's ISA and features, fj_builder_finish). */
#include "runtime/rt.h"

#include <stdio.h>
#include <string.h>

#include "kernels/builder/builder_int.h"
#include "kernels/builder/verify.h"
#include "runtime/publish.h"
#include "runtime/kcache.h"

/* The builder checks the name and the argument count (kb_create); the
 * runtime supplies the ISA and CPU features every kernel is built for. */
fj_status fj_builder_create(fj_runtime *rt, const char *name, int nargs, fj_builder **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "fj_builder_create: out is NULL");
    *out = NULL;
    if (!rt) return fj_fail(FJ_ERR_INVALID_ARG, "fj_builder_create: runtime is NULL");
    return kb_create(name, nargs, rt->isa, rt->features, rt, out);
}

/* An arena's unwind registration (libgcc and libunwind tables, gdb
 * objects), empty. */
static fj_status arena_unwind_new(fj_runtime *rt, uint64_t id, uintptr_t lo, uintptr_t hi,
                                  uintptr_t aux, size_t aux_len, uw_arena **out) {
    char name[48];
    snprintf(name, sizeof name, "framejit-arena-%llu", (unsigned long long)id);
    return uw_arena_create_at(rt->uw_backends, lo, hi, name, aux, aux_len, out);
}

/* The first code arena's ELF image and unwind registration, made
 * together with the runtime, so that its first kernel only adds itself.
 * Failing here is not an error: the first kernel tries again (and
 * reports it). */
void rt_arena_early(fj_runtime *rt) {
    cc_arena_info ai;
    if (!cc_current_arena(rt->cache, &ai)) return;
    rt_image_arena_early(&ai);
    if (!rt->uw_backends || ai.user) return;
    uw_arena *ua;
    if (arena_unwind_new(rt, ai.id, ai.lo, ai.hi, ai.aux, ai.aux_len, &ua) == FJ_OK)
        cc_arena_info_set_user(&ai, ua);
}

/* Unwind info is registered per code arena, not per kernel: with
 * thousands of kernels, per-kernel objects make every unwind in the
 * process slow (libgcc searches them linearly) and gdb slower still.
 * Called with place_lock held, so kernels arrive in address order. */
static fj_status arena_register(fj_runtime *rt, cc_entry *e, const uw_func *f) {
    if (!rt->uw_backends) return FJ_OK;
    uw_arena *ua = cc_arena_user(e);
    if (!ua) {
        fj_status s = arena_unwind_new(rt, e->arena_id, e->arena_lo, e->arena_hi, e->arena_aux,
                                       e->arena_aux_len, &ua);
        if (s != FJ_OK) return s;
        cc_arena_set_user(e, ua);
    }
    return uw_arena_add(ua, f);
}

void rt_arena_retire(void *ctx, const cc_arena_info *a) {
    (void)ctx;
    uw_arena_destroy(a->user);
}

fj_status rt_finish(fj_runtime *rt, fj_builder *b, fj_kernel **out) {
    uint64_t t0 = fj_verbose() ? fj_now_ns() : 0;
    kb_code code;
    fj_status s = kb_assemble(b, &code);
    fj_kernel *k = NULL;
    if (s != FJ_OK) goto fail;
    /* A frame-pointer tax probe kernel writes rbp on purpose: invariant 1
     * cannot hold (kb_nofp is 0 in builds without the probe). */
    int verify = rt->verify && !kb_nofp(b);
    if (verify &&
        (s = kv_verify(kb_name(b), code.bytes, code.code_len, code.recs, code.nrecs)) != FJ_OK)
        goto fail;
    k = fj_calloc(1, sizeof *k);
    if (!k) { s = fj_fail(FJ_ERR_NO_MEMORY, "kernel %s: out of memory", kb_name(b)); goto fail; }
    k->rt = rt;
    pthread_mutex_lock(&rt->place_lock);
    /* Its loops on one page where they fit in one (cc_place_hot). */
    s = cc_place_hot(rt->cache, code.bytes, code.len, code.loop_lo, code.loop_hi, kb_name(b),
                     &k->entry);
    uw_func f = {0};
    uint8_t prog[256];
    if (s == FJ_OK) {
        f = (uw_func){.name = k->entry->name, .start = k->entry->start, .size = code.code_len,
                      .recs = code.recs, .nrecs = code.nrecs};
        uw_func_prog(&f, prog, sizeof prog);
        /* Registered before the entry is returned (invariant 4). */
        s = arena_register(rt, k->entry, &f);
    }
    pthread_mutex_unlock(&rt->place_lock);
    if (s != FJ_OK) goto fail;
    if (rt->dump_dir)
        (void)uw_dump(rt->dump_dir, &f, code.bytes, atomic_fetch_add(&rt->dump_seq, 1));
    /* [profiling] the arena file's ELF image; opt-in perf map / jitdump. */
    rt_image_kernel(k->entry, &f, code.bytes, rt->perfmap, rt->jitdump);
    k->fn = (void *)k->entry->start;
    k->code_size = code.code_len;
    atomic_init(&k->refs, 1);
    pthread_mutex_lock(&rt->lock);
    k->next = rt->kernels;
    if (rt->kernels) rt->kernels->prev = k;
    rt->kernels = k;
    pthread_mutex_unlock(&rt->lock);
    if (fj_verbose())
        rt_verbose_kernel(k->entry, rt->isa == FJ_ISA_AVX512 ? "avx512" : "avx2", code.code_len,
                          (double)(fj_now_ns() - t0) / 1e3);
    kb_code_free(&code);
    kb_free(b);
    *out = k;
    return FJ_OK;
fail:
    if (k && k->entry) cc_remove(rt->cache, k->entry);
    fj_free(k);
    kb_code_free(&code);
    kb_free(b);
    return s;
}

fj_status fj_builder_finish(fj_builder *b, fj_kernel **out) {
    if (!out) {
        kb_free(b);
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_builder_finish: out is NULL");
    }
    *out = NULL;
    if (!b) return fj_fail(FJ_ERR_INVALID_ARG, "fj_builder_finish: builder is NULL");
    return rt_finish(kb_runtime(b), b, out);
}

void *fj_kernel_entry(const fj_kernel *k) { return k ? k->fn : NULL; }
const char *fj_kernel_name(const fj_kernel *k) { return k ? k->entry->name : NULL; }
size_t fj_kernel_code_size(const fj_kernel *k) { return k ? k->code_size : 0; }

void rt_kernel_free(fj_kernel *k) {
    fj_runtime *rt = k->rt;
    pthread_mutex_lock(&rt->lock);
    if (k->prev) k->prev->next = k->next;
    else rt->kernels = k->next;
    if (k->next) k->next->prev = k->prev;
    for (int i = 0; i < RT_SLOT__N; i++)
        if (atomic_load(&rt->elt[i]) == k) atomic_store(&rt->elt[i], NULL);
    pthread_mutex_unlock(&rt->lock);
    /* The arena's unwind registration goes in the retire hook, before its
     * memory is given back (invariant 4). */
    cc_remove(rt->cache, k->entry);
    fj_free(k);
}

void fj_kernel_release(fj_kernel *k) {
    if (k) rt_kernel_unref(k);
}
