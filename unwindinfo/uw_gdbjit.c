/* uw_gdbjit.c: the GDB JIT interface back-end: the documented descriptor and
 * hook, and in-memory ELF objects (one per uw_object, a few per arena). */
#include "unwindinfo/uw_int.h"

#include <pthread.h>

/* ---- The interface gdb knows (gdb manual, "JIT Interface") ---------------
 * gdb finds these two symbols by name and puts a breakpoint on the hook, so
 * they are exported with default visibility even though the library hides
 * everything else, and the hook is never inlined or optimised away. */
typedef enum { JIT_NOACTION = 0, JIT_REGISTER_FN, JIT_UNREGISTER_FN } jit_actions_t;

struct jit_code_entry {
    struct jit_code_entry *next_entry;
    struct jit_code_entry *prev_entry;
    const char *symfile_addr;
    uint64_t symfile_size;
};

struct jit_descriptor {
    uint32_t version;
    uint32_t action_flag;  /* jit_actions_t */
    struct jit_code_entry *relevant_entry;
    struct jit_code_entry *first_entry;
};

#define FJ_GDB_EXPORT __attribute__((visibility("default"), used))

extern struct jit_descriptor __jit_debug_descriptor;
void __jit_debug_register_code(void);

FJ_GDB_EXPORT struct jit_descriptor __jit_debug_descriptor = {1, JIT_NOACTION, NULL, NULL};

FJ_GDB_EXPORT __attribute__((noinline)) void __jit_debug_register_code(void) {
    __asm__ volatile("" ::: "memory");
}

/* gdb reads the list when the hook is hit; the mutex keeps two threads from
 * interleaving updates between the list change and the hook call. */
static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;

struct uw_gdb_entry {
    struct jit_code_entry e;
    uint8_t *elf;
    size_t elf_len;
};

fj_status uw_gdb_entry_new(const uw_func *fns, size_t n, struct uw_gdb_entry **out) {
    struct uw_gdb_entry *g = fj_calloc(1, sizeof *g);
    if (!g) return fj_fail(FJ_ERR_NO_MEMORY, "gdb jit: out of memory");
    fj_status st = uw_elf_build(fns, n, NULL, &g->elf, &g->elf_len);
    if (st != FJ_OK) {
        fj_free(g);
        return st;
    }
    g->e.symfile_addr = (const char *)g->elf;
    g->e.symfile_size = g->elf_len;
    *out = g;
    return FJ_OK;
}

fj_status uw_gdb_entry_new_eh(const uw_func *fns, size_t n, const uint8_t *eh, size_t eh_len,
                              struct uw_gdb_entry **out) {
    struct uw_gdb_entry *g = fj_calloc(1, sizeof *g);
    if (!g) return fj_fail(FJ_ERR_NO_MEMORY, "gdb jit: out of memory");
    fj_status st = uw_elf_build_eh(fns, n, NULL, eh, eh_len, &g->elf, &g->elf_len);
    if (st != FJ_OK) {
        fj_free(g);
        return st;
    }
    g->e.symfile_addr = (const char *)g->elf;
    g->e.symfile_size = g->elf_len;
    *out = g;
    return FJ_OK;
}

void uw_gdb_entry_link(struct uw_gdb_entry *g) {
    pthread_mutex_lock(&jit_lock);
    g->e.prev_entry = NULL;
    g->e.next_entry = __jit_debug_descriptor.first_entry;
    if (g->e.next_entry) g->e.next_entry->prev_entry = &g->e;
    __jit_debug_descriptor.first_entry = &g->e;
    __jit_debug_descriptor.relevant_entry = &g->e;
    __jit_debug_descriptor.action_flag = JIT_REGISTER_FN;
    __jit_debug_register_code();
    __jit_debug_descriptor.action_flag = JIT_NOACTION;
    pthread_mutex_unlock(&jit_lock);
}

void uw_gdb_entry_unlink(struct uw_gdb_entry *g) {
    if (!g) return;
    pthread_mutex_lock(&jit_lock);
    if (g->e.prev_entry)
        g->e.prev_entry->next_entry = g->e.next_entry;
    else
        __jit_debug_descriptor.first_entry = g->e.next_entry;
    if (g->e.next_entry) g->e.next_entry->prev_entry = g->e.prev_entry;
    __jit_debug_descriptor.relevant_entry = &g->e;
    __jit_debug_descriptor.action_flag = JIT_UNREGISTER_FN;
    __jit_debug_register_code();
    __jit_debug_descriptor.action_flag = JIT_NOACTION;
    __jit_debug_descriptor.relevant_entry = NULL;
    pthread_mutex_unlock(&jit_lock);
    uw_gdb_entry_free(g);
}

void uw_gdb_entry_free(struct uw_gdb_entry *g) {
    if (!g) return;
    fj_free(g->elf);
    fj_free(g);
}

size_t uw_gdb_entry_bytes(const struct uw_gdb_entry *g) { return sizeof *g + g->elf_len; }

fj_status uw_gdb_register(uw_object *o) {
    struct uw_gdb_entry *g = NULL;
    fj_status st = uw_gdb_entry_new(o->fns, o->n, &g);
    if (st != FJ_OK) return st;
    uw_gdb_entry_link(g);
    o->gdb = g;
    return FJ_OK;
}

void uw_gdb_deregister(uw_object *o) {
    uw_gdb_entry_unlink(o->gdb);
    o->gdb = NULL;
}
