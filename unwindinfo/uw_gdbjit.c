/* uw_gdbjit.c: the GDB JIT interface back-end: the documented descriptor and
 * hook, its list, and per arena a few in-memory ELF objects (chunks) that
 * grow in place. */
#include "unwindinfo/uw_int.h"

#include <elf.h>
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

void uw_gdb_fork(int phase) { fj_fork_mutex(&jit_lock, phase); }

/* Puts e at the head of the list and tells gdb; jit_lock held. */
static void jit_link_locked(struct jit_code_entry *e) {
    e->prev_entry = NULL;
    e->next_entry = __jit_debug_descriptor.first_entry;
    if (e->next_entry) e->next_entry->prev_entry = e;
    __jit_debug_descriptor.first_entry = e;
    __jit_debug_descriptor.relevant_entry = e;
    __jit_debug_descriptor.action_flag = JIT_REGISTER_FN;
    __jit_debug_register_code();
}

struct jit_code_entry *uw_gdb_link(const uint8_t *elf, size_t len) {
    struct jit_code_entry *e = fj_calloc(1, sizeof *e);
    if (!e) return NULL;
    e->symfile_addr = (const char *)elf;
    e->symfile_size = len;
    pthread_mutex_lock(&jit_lock);
    jit_link_locked(e);
    __jit_debug_descriptor.action_flag = JIT_NOACTION;
    pthread_mutex_unlock(&jit_lock);
    return e;
}

/* Takes e out of the list and tells gdb; jit_lock held. */
static void jit_unlink_locked(struct jit_code_entry *e) {
    if (e->prev_entry)
        e->prev_entry->next_entry = e->next_entry;
    else
        __jit_debug_descriptor.first_entry = e->next_entry;
    if (e->next_entry) e->next_entry->prev_entry = e->prev_entry;
    __jit_debug_descriptor.relevant_entry = e;
    __jit_debug_descriptor.action_flag = JIT_UNREGISTER_FN;
    __jit_debug_register_code();
}

/* The same, taking jit_lock, and the descriptor left idle. */
static void jit_unlink(struct jit_code_entry *e) {
    pthread_mutex_lock(&jit_lock);
    jit_unlink_locked(e);
    __jit_debug_descriptor.action_flag = JIT_NOACTION;
    __jit_debug_descriptor.relevant_entry = NULL;
    pthread_mutex_unlock(&jit_lock);
}

void uw_gdb_unlink(struct jit_code_entry *e) {
    if (!e) return;
    jit_unlink(e);
    fj_free(e);
}

/* ---- Chunks: objects that grow in place ------------------------------------
 * An arena's kernels go into a few ELF objects with room laid out up front:
 * [ELF header][section headers][.shstrtab][.eh_frame room][.symtab room]
 * [.strtab room]. A kernel's FDE, symbol and name are written past the
 * sections' current ends, then the sizes in the section headers grow, so
 * no byte gdb may already have read ever changes (gdb reads symbol files
 * from our memory lazily, after registration). gdb only reads a symbol
 * file when it is registered, so each growth registers the object again:
 * under a second list entry first, then the entry that described the
 * smaller version goes, and every kernel stays in gdb's view throughout.
 * The cost per kernel is a few stores and two hook calls; gdb itself, when
 * attached, re-reads one chunk (bounded) per kernel. */

enum { C_NULL, C_TEXT, C_EH, C_SYMTAB, C_STRTAB, C_SHSTRTAB, C__N };
static const char chunk_shstr[] = "\0.text\0.eh_frame\0.symtab\0.strtab\0.shstrtab";
static const uint32_t chunk_shname[C__N] = {0, 1, 7, 17, 25, 33};

struct uw_gdb_chunk {
    struct jit_code_entry e[2];
    int live;               /* index of the linked entry, -1: none yet */
    uint8_t *elf;
    size_t elf_len;
    uintptr_t lo, hi;       /* code covered by its kernels */
    size_t kernels, max_kernels;
    /* Used bytes of each room (what the section headers say once
     * published) and where the staged kernel ends. */
    size_t eh_used, eh_room, sym_used, sym_room, str_used, str_room;
    size_t eh_next, sym_next, str_next;
    uintptr_t next_hi;
};

static Elf64_Shdr *chunk_sh(struct uw_gdb_chunk *c) {
    return (Elf64_Shdr *)(c->elf + sizeof(Elf64_Ehdr));
}

static uint64_t chunk_align(uintptr_t a) {
    uint64_t al = 16;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

fj_status uw_gdb_chunk_new(size_t max_kernels, size_t eh_room, size_t str_room,
                           struct uw_gdb_chunk **out) {
    struct uw_gdb_chunk *c = fj_calloc(1, sizeof *c);
    const size_t head = sizeof(Elf64_Ehdr) + C__N * sizeof(Elf64_Shdr);
    const size_t shstr = (sizeof chunk_shstr + 7) & ~(size_t)7;
    /* CIE first; our CIE is well under 64 bytes. */
    eh_room = (eh_room + 64 + 7) & ~(size_t)7;
    const size_t sym_room = (max_kernels + 3) * sizeof(Elf64_Sym);
    str_room += 16;
    if (c) c->elf = fj_calloc(1, head + shstr + eh_room + sym_room + str_room);
    if (!c || !c->elf) {
        fj_free(c);
        return fj_fail(FJ_ERR_NO_MEMORY, "gdb jit: out of memory");
    }
    c->elf_len = head + shstr + eh_room + sym_room + str_room;
    c->live = -1;
    c->max_kernels = max_kernels;
    c->eh_room = eh_room;
    c->sym_room = sym_room;
    c->str_room = str_room;
    uint8_t *p = c->elf;
    uw_elf_header(p, ET_REL, 0, 0, sizeof(Elf64_Ehdr), C__N, C_SHSTRTAB);
    memcpy(p + head, chunk_shstr, sizeof chunk_shstr);
    const size_t eh_off = head + shstr, sym_off = eh_off + eh_room, str_off = sym_off + sym_room;

    uw_buf cie = {0};
    uw_cie_put(&cie, 1);
    if (cie.oom || cie.len > 64) {
        fj_free(cie.p);
        fj_free(c->elf);
        fj_free(c);
        return fj_fail(FJ_ERR_NO_MEMORY, "gdb jit: out of memory");
    }
    memcpy(p + eh_off, cie.p, cie.len);
    c->eh_used = cie.len;
    fj_free(cie.p);

    /* The null symbol, the file and the section symbol; kernels follow. */
    static const char file[] = "framejit";
    memcpy(p + str_off + 1, file, sizeof file);
    c->str_used = 1 + sizeof file;
    Elf64_Sym syms[3] = {
        {0},
        {.st_name = 1, .st_info = ELF64_ST_INFO(STB_LOCAL, STT_FILE), .st_shndx = SHN_ABS},
        {.st_info = ELF64_ST_INFO(STB_LOCAL, STT_SECTION), .st_shndx = C_TEXT},
    };
    memcpy(p + sym_off, syms, sizeof syms);
    c->sym_used = sizeof syms;

    Elf64_Shdr *sh = chunk_sh(c);
    sh[C_TEXT] = (Elf64_Shdr){.sh_type = SHT_NOBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
                              .sh_addralign = 1};
    /* Not SHF_ALLOC: see uw_elf.c. */
    sh[C_EH] = (Elf64_Shdr){.sh_type = SHT_PROGBITS, .sh_offset = eh_off, .sh_size = c->eh_used,
                            .sh_addralign = 8};
    sh[C_SYMTAB] = (Elf64_Shdr){.sh_type = SHT_SYMTAB, .sh_offset = sym_off,
                                .sh_size = c->sym_used, .sh_link = C_STRTAB, .sh_info = 3,
                                .sh_addralign = 8, .sh_entsize = sizeof(Elf64_Sym)};
    sh[C_STRTAB] = (Elf64_Shdr){.sh_type = SHT_STRTAB, .sh_offset = str_off,
                                .sh_size = c->str_used, .sh_addralign = 1};
    sh[C_SHSTRTAB] = (Elf64_Shdr){.sh_type = SHT_STRTAB, .sh_offset = head,
                                  .sh_size = sizeof chunk_shstr, .sh_addralign = 1};
    for (int i = 0; i < C__N; i++) sh[i].sh_name = chunk_shname[i];
    for (int i = 0; i < 2; i++) {
        c->e[i].symfile_addr = (const char *)c->elf;
        c->e[i].symfile_size = c->elf_len;
    }
    *out = c;
    return FJ_OK;
}

int uw_gdb_chunk_stage(struct uw_gdb_chunk *c, const uw_func *f, const uint8_t *fde,
                       size_t fde_len) {
    const size_t name = strlen(f->name) + 1;
    if (c->kernels >= c->max_kernels || fde_len > c->eh_room - c->eh_used ||
        name > c->str_room - c->str_used)
        return 0;
    Elf64_Shdr *sh = chunk_sh(c);
    const uintptr_t lo = c->kernels ? c->lo : f->start;
    /* The FDE's CIE pointer counts back from its own field to offset 0. */
    uint8_t *at = c->elf + sh[C_EH].sh_offset + c->eh_used;
    memcpy(at, fde, fde_len);
    uint32_t back = (uint32_t)(c->eh_used + 4);
    memcpy(at + 4, &back, 4);
    memcpy(c->elf + sh[C_STRTAB].sh_offset + c->str_used, f->name, name);
    Elf64_Sym s = {
        .st_name = (uint32_t)c->str_used,
        .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
        .st_shndx = C_TEXT,
        .st_value = f->start - lo,
        .st_size = f->size,
    };
    memcpy(c->elf + sh[C_SYMTAB].sh_offset + c->sym_used, &s, sizeof s);
    c->eh_next = c->eh_used + fde_len;
    c->str_next = c->str_used + name;
    c->sym_next = c->sym_used + sizeof s;
    c->next_hi = f->start + f->size;
    if (!c->kernels) c->lo = f->start;
    return 1;
}

void uw_gdb_chunk_publish(struct uw_gdb_chunk *c) {
    Elf64_Shdr *sh = chunk_sh(c);
    /* Ordered so that a reader stopping us at any point (gdb attaching)
     * finds a consistent object: data first, then .text's extent, the
     * FDE and the name before the symbol that refers to the name. */
    if (!c->kernels) {
        sh[C_TEXT].sh_addr = c->lo;
        sh[C_TEXT].sh_addralign = chunk_align(c->lo);
    }
    c->hi = c->next_hi;
    sh[C_TEXT].sh_size = c->hi - c->lo;
    __atomic_store_n(&sh[C_EH].sh_size, c->eh_next, __ATOMIC_RELEASE);
    __atomic_store_n(&sh[C_STRTAB].sh_size, c->str_next, __ATOMIC_RELEASE);
    __atomic_store_n(&sh[C_SYMTAB].sh_size, c->sym_next, __ATOMIC_RELEASE);
    c->eh_used = c->eh_next;
    c->str_used = c->str_next;
    c->sym_used = c->sym_next;
    c->kernels++;

    const int old = c->live, cur = old < 0 ? 0 : !old;
    pthread_mutex_lock(&jit_lock);
    jit_link_locked(&c->e[cur]);
    if (old >= 0) jit_unlink_locked(&c->e[old]);
    __jit_debug_descriptor.action_flag = JIT_NOACTION;
    pthread_mutex_unlock(&jit_lock);
    c->live = cur;
}

size_t uw_gdb_chunk_kernels(const struct uw_gdb_chunk *c) { return c->kernels; }
size_t uw_gdb_chunk_bytes(const struct uw_gdb_chunk *c) { return sizeof *c + c->elf_len; }

void uw_gdb_chunk_free(struct uw_gdb_chunk *c) {
    if (!c) return;
    if (c->live >= 0) jit_unlink(&c->e[c->live]);
    fj_free(c->elf);
    fj_free(c);
}
