/* uw_libgcc.c: the libgcc back-end: __register_frame / __deregister_frame of
 * an object's .eh_frame, or of one frame table per arena edited in place,
 * with a lookup self-check. */
#include "unwindinfo/uw_int.h"
#include "unwindinfo/uw_libgcc.h"

#include <string.h>
#include <sys/mman.h>

/* ---- One frame table per arena ------------------------------------------------
 * libgcc must never see two registered objects whose pc ranges overlap:
 * GCC 13+ keeps [min pc, max pc end) of each object, computed when it is
 * registered, in a b-tree that rejects a second object with the same start
 * and, when deregistering, recomputes the range from the bytes and removes
 * by its start; before GCC 13 a sorted list searches only the object with
 * the highest start below the pc. Replacing an object by a bigger one (old
 * and new both covering the old kernels) breaks one or the other, and
 * dropping the old one first leaves a window with kernels uncovered. So
 * each arena registers exactly one object, once, sized for the whole arena,
 * and never changes its extent; kernels are added by editing it in place:
 *
 *   region: [ group CIEs, bump-allocated left to right ..... | table ]
 *   table:  [CIE0][FDE lo+0][slot 0][slot 1] ... [slot C-1][FDE hi+0][0]
 *
 * The arena [lo, hi) is cut into windows of `window` bytes; slot i is a
 * 32-byte FDE for the kernels that start in window i (a "group"). libgcc
 * reads every FDE's start and length when it sorts the object (at
 * registration here, through the self-check lookup) and keeps pointers to
 * them, sorted by pc_begin; after that it reads pc_begin and pc_range again
 * on every search, and the CIE and instructions of the one FDE it picks.
 * Unused slots have pc_range 0 (they match no pc) and a pc_begin that keeps
 * the table sorted. A group's CFA program cannot grow inside a 32-byte FDE,
 * so it lives in the group's own CIE as initial instructions (libgcc runs a
 * CIE's instructions exactly like an FDE's, from the FDE's pc_begin), and
 * the CIE may grow because its length field bounds what a reader executes.
 * Adding a kernel to a group: write its instructions past the CIE's end,
 * store the new CIE length, then the new pc_range. Starting a group: write
 * a new CIE, point the slot at it and set pc_begin while pc_range is still
 * 0, then store pc_range. A kernel running past its window pushes the
 * pc_begin of the empty slots it covers up to its end, so the sorted array
 * stays sorted and no empty slot interrupts the binary search. The extent
 * [lo, hi) (sentinel FDEs, pc_range 0) and the object never change, so
 * registration happens once and deregistration exactly once. */

/* Slots are sized for the whole arena, so their number is what creating
 * an arena costs (written, then counted and sorted by libgcc's first
 * lookup) whether it ever holds one kernel or thousands. A wider window
 * makes groups longer, and an unwind runs the CFA program of every kernel
 * before the pc in its group: with 4 KiB windows, 64-byte kernels took
 * _Unwind_Backtrace past twice its plain cost. 512 slots (2 KiB windows
 * for a 1 MiB arena, at most 32 such kernels per group) keep it under
 * that, for a few microseconds more per arena than 256. */
enum { SLOT = 32, MIN_WINDOW = 512, TARGET_SLOTS = 512 };

struct uw_gcc_table {
    uw_region mem;       /* group CIEs from 0 up, then the table */
    size_t cie_cap;      /* bytes of mem before the table */
    uint8_t *table;
    size_t table_len;
    uint8_t *slots;      /* slot i at slots + SLOT * i */
    uintptr_t lo, hi;
    size_t window, nslots;
    size_t used;         /* end of the group CIEs */
    /* The group being filled (the last one: only its CIE can grow). */
    size_t cur;          /* slot, or SIZE_MAX before the first kernel */
    size_t cur_cie;      /* offset of its CIE in mem */
    uintptr_t group_start, loc;
    unsigned touched;
    /* Prepared, not yet published. */
    int pend;            /* 0 nothing, 1 append to cur, 2 start slot pend_slot */
    size_t pend_slot, pend_cie, pend_end;
    uintptr_t pend_loc;
    unsigned pend_touched;
    int broken;          /* a self-check failed: no more kernels */
};

static uint8_t *slot_at(const struct uw_gcc_table *t, size_t i) { return t->slots + SLOT * i; }

static uint64_t load64(const uint8_t *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED); }
static void store64(uint8_t *p, uint64_t v) { __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE); }
static void store32(uint8_t *p, uint32_t v) { __atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE); }

/* A 32-byte FDE with no instructions at p, for [pc, pc + range), using
 * the CIE at cie (absolute). Written in place: the table is built where
 * libgcc will read it, before it is registered. */
static void put_slot(uint8_t *p, uintptr_t cie, uintptr_t pc, uint64_t range) {
    const uint32_t len = SLOT - 4, back = (uint32_t)((uintptr_t)p + 4 - cie);
    memcpy(p, &len, 4);
    memcpy(p + 4, &back, 4);
    memcpy(p + 8, &pc, 8);
    memcpy(p + 16, &range, 8);
    memset(p + 24, 0, SLOT - 24);  /* augmentation length 0, then DW_CFA_nop */
}

fj_status uw_gcc_table_create(uintptr_t lo, uintptr_t hi, struct uw_gcc_table **out) {
    *out = NULL;
    if (hi <= lo || hi - lo > ((size_t)1 << 30))
        return fj_fail(FJ_ERR_INVALID_ARG, "libgcc: arena %#lx..%#lx: bad span",
                       (unsigned long)lo, (unsigned long)hi);
    struct uw_gcc_table *t = fj_calloc(1, sizeof *t);
    if (!t) return fj_fail(FJ_ERR_NO_MEMORY, "libgcc: out of memory");
    t->lo = lo;
    t->hi = hi;
    t->cur = SIZE_MAX;
    t->window = MIN_WINDOW;
    while ((hi - lo + t->window - 1) / t->window > TARGET_SLOTS) t->window *= 2;
    t->nslots = (hi - lo + t->window - 1) / t->window;
    /* Group CIEs: a header per group plus a few bytes per kernel; four
     * times the code span is far more than that (reserved, not used). */
    t->cie_cap = (4 * (hi - lo) + 65536 + 4095) & ~(size_t)4095;
    const size_t cie0_len = 24, head = cie0_len + SLOT;
    t->table_len = head + SLOT * t->nslots + SLOT + 8;
    fj_status st = uw_region_reserve(&t->mem, t->cie_cap + t->table_len, 0, 0);
    if (st != FJ_OK) goto fail;
    t->table = t->mem.p + t->cie_cap;
    t->slots = t->table + head;
    /* The table's pages, at the end of the reservation. */
    const size_t page = 4096, tab_off = t->cie_cap & ~(page - 1);
    int injected = fj_fault_hit(FJ_FAULT_MPROTECT);
    if (injected || mprotect(t->mem.p + tab_off, t->mem.len - tab_off, PROT_READ | PROT_WRITE)) {
        st = fj_fail(FJ_ERR_NO_MEMORY, "libgcc: cannot commit the frame table of %zu bytes",
                     t->table_len);
        goto fail;
    }
    uw_buf b = {0};
    const uintptr_t base = (uintptr_t)t->table;
    uw_cie_put(&b, 1);
    uint8_t *cie0 = NULL;
    size_t len = 0;
    if ((st = uw_buf_take(&b, &cie0, &len)) != FJ_OK) goto fail;
    if (len != cie0_len) {
        fj_free(cie0);
        st = fj_fail(FJ_ERR_UNWIND, "libgcc: CIE of %zu bytes, expected %zu", len, cie0_len);
        goto fail;
    }
    memcpy(t->table, cie0, len);
    fj_free(cie0);
    uint8_t *p = t->table + cie0_len;
    put_slot(p, base, lo, 0);  /* fixes the object's start at lo */
    p += SLOT;
    for (size_t i = 0; i < t->nslots; i++, p += SLOT) put_slot(p, base, lo + i * t->window, 0);
    put_slot(p, base, hi, 0);  /* ... and its end at hi */
    memset(p + SLOT, 0, 4);    /* terminator */
    __register_frame(t->table);
    /* A lookup makes libgcc sort the object now (it keeps pointers to the
     * slots from then on); nothing is found in an empty arena. */
    struct dwarf_eh_bases bases;
    if (_Unwind_Find_FDE((void *)lo, &bases) != NULL) {
        __deregister_frame(t->table);
        st = fj_fail(FJ_ERR_UNWIND, "libgcc: an FDE already covers arena %#lx..%#lx",
                     (unsigned long)lo, (unsigned long)hi);
        goto fail;
    }
    /* The first kernel's CFI goes at the area's start: committed and
     * touched now, with the table, rather than by that kernel (an mprotect
     * and a page fault, several microseconds each under shadow paging).
     * Past every CIE, so no reader looks there yet; if the commit fails,
     * the first kernel tries again and reports it. */
    if (uw_region_commit(&t->mem, 1) == FJ_OK) *(volatile uint8_t *)t->mem.p = 0;
    *out = t;
    return FJ_OK;
fail:
    uw_region_release(&t->mem);
    fj_free(t);
    return st;
}

fj_status uw_gcc_table_prepare(struct uw_gcc_table *t, const uw_func *f) {
    t->pend = 0;
    if (t->broken)
        return fj_fail(FJ_ERR_UNWIND, "libgcc: frame table of arena %#lx failed a self-check",
                       (unsigned long)t->lo);
    const size_t w = (f->start - t->lo) / t->window;
    const int append = t->cur == w;
    size_t at = append ? t->used : (t->used + 7) & ~(size_t)7;
    uintptr_t loc = append ? t->loc : f->start;
    unsigned touched = append ? t->touched : 0;
    /* Made on the stack (a kernel's are a few dozen bytes), then copied in. */
    uint8_t stack[256];
    uw_buf b = {stack, 0, sizeof stack, 0, 1};
    if (!append) uw_cie_put(&b, 0);
    fj_status st = uw_cfa_append(&b, f, &touched, &loc);
    const size_t len = b.len;
    if (st == FJ_OK && b.oom) st = fj_fail(FJ_ERR_NO_MEMORY, "libgcc: out of memory");
    if (st == FJ_OK && at + len > t->cie_cap)
        st = fj_fail(FJ_ERR_NO_MEMORY, "libgcc: CFI area of arena %#lx is full",
                     (unsigned long)t->lo);
    if (st == FJ_OK) st = uw_region_commit(&t->mem, at + len);
    /* Past the end of every CIE: no reader looks here yet. */
    if (st == FJ_OK) memcpy(t->mem.p + at, b.p, len);
    if (!b.ext) fj_free(b.p);
    if (st != FJ_OK) return st;
    t->pend = append ? 1 : 2;
    t->pend_slot = w;
    t->pend_cie = append ? t->cur_cie : at;
    t->pend_end = at + len;
    t->pend_loc = loc;
    t->pend_touched = touched;
    return FJ_OK;
}

fj_status uw_gcc_table_publish(struct uw_gcc_table *t, const uw_func *f) {
    if (!t->pend) return fj_fail(FJ_ERR_UNWIND, "libgcc: nothing prepared for %s", f->name);
    const size_t w = t->pend_slot;
    uint8_t *slot = slot_at(t, w), *cie = t->mem.p + t->pend_cie;
    const uint32_t old_cie_len = *(uint32_t *)cie;
    const uint64_t old_range = load64(slot + 16);
    const uintptr_t start = t->pend == 2 ? f->start : t->group_start, end = f->start + f->size;
    if (t->pend == 2) {
        /* pc_range is 0: nobody uses this slot while it changes. */
        store32(cie, (uint32_t)(t->pend_end - t->pend_cie - 4));
        store32(slot + 4, (uint32_t)((uintptr_t)slot + 4 - (uintptr_t)cie));
        store64(slot + 8, start);
    } else {
        store32(cie, (uint32_t)(t->pend_end - t->pend_cie - 4));
    }
    /* Empty slots this kernel reaches into move up to its end (highest
     * first, so the array is sorted after every store). */
    const size_t last = (end - 1 - t->lo) / t->window;
    for (size_t j = last; j > w; j--)
        if (load64(slot_at(t, j) + 8) < end) store64(slot_at(t, j) + 8, end);
    store64(slot + 16, end - start);

    /* Look it up again as an unwinder will (a pc inside, as for a return
     * address, and its last byte); a mismatch means another unwinder's registration functions
     * are bound, or the table is wrong: withdraw the kernel. */
    struct dwarf_eh_bases bases = {0}, bases_end = {0};
    const void *fde = _Unwind_Find_FDE((void *)(f->start + (f->size > 1)), &bases);
    const void *fde_end = _Unwind_Find_FDE((void *)(end - 1), &bases_end);
    if (fde != slot || bases.func != (void *)start || fde_end != slot) {
        store64(slot + 16, old_range);
        store32(cie, old_cie_len);
        t->pend = 0;
        t->broken = 1;  /* empty slots may have moved past what comes next */
        return fj_fail(FJ_ERR_UNWIND, "libgcc: %s not found in its arena's frame table (got %p)",
                       f->name, fde);
    }
    if (t->pend == 2) {
        t->cur = w;
        t->cur_cie = t->pend_cie;
        t->group_start = start;
    }
    t->used = t->pend_end;
    t->loc = t->pend_loc;
    t->touched = t->pend_touched;
    t->pend = 0;
    return FJ_OK;
}

void uw_gcc_table_destroy(struct uw_gcc_table *t) {
    if (!t) return;
    /* Registered exactly once, in create: deregistering is always valid. */
    __deregister_frame(t->table);
    uw_region_release(&t->mem);
    fj_free(t);
}

size_t uw_gcc_table_bytes(const struct uw_gcc_table *t) {
    return t ? sizeof *t + t->table_len + t->used : 0;
}

fj_status uw_gcc_table_check(const struct uw_gcc_table *t) {
    /* Walk the object as libgcc does when it registers, sorts or (GCC 13+)
     * deregisters it: by length fields up to the zero terminator. */
    const uint8_t *p = t->table;
    uintptr_t min = UINTPTR_MAX, max = 0, prev_begin = 0, prev_end = 0;
    size_t fdes = 0;
    for (;;) {
        uint32_t len;
        memcpy(&len, p, 4);
        if (len == 0) break;
        uint32_t id;
        memcpy(&id, p + 4, 4);
        if (id != 0) {  /* an FDE */
            uint64_t begin = load64(p + 8), range = load64(p + 16);
            const uint8_t *cie = p + 4 - id;
            if (cie < t->mem.p || cie >= p)
                return fj_fail(FJ_ERR_UNWIND, "libgcc table: FDE %zu: CIE outside the region",
                               fdes);
            if (begin < prev_begin || (range && begin < prev_end))
                return fj_fail(FJ_ERR_UNWIND, "libgcc table: FDE %zu at %#lx+%lu unsorted or "
                               "overlapping (previous %#lx..%#lx)", fdes, (unsigned long)begin,
                               (unsigned long)range, (unsigned long)prev_begin,
                               (unsigned long)prev_end);
            if (begin < min) min = begin;
            if (begin + range > max) max = begin + range;
            prev_begin = begin;
            if (range) prev_end = begin + range;
            fdes++;
        }
        p += 4 + (size_t)len;
    }
    if (fdes != t->nslots + 2 || min != t->lo || max != t->hi)
        return fj_fail(FJ_ERR_UNWIND, "libgcc table: %zu FDEs over %#lx..%#lx, registered as %zu "
                       "over %#lx..%#lx", fdes, (unsigned long)min, (unsigned long)max,
                       t->nslots + 2, (unsigned long)t->lo, (unsigned long)t->hi);
    return FJ_OK;
}
