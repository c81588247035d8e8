/* uw_elf.c: the ELF writer: relocatable x86-64 objects with .text, .eh_frame
 * and symbols, for the GDB JIT interface (code elsewhere, NOBITS) and for
 * FRAMEJIT_DUMP files (code inside). */
#include "unwindinfo/uw_int.h"

#include <elf.h>
#include <string.h>

/* Section indices, in file order. */
enum { SEC_NULL, SEC_TEXT, SEC_EH, SEC_SYMTAB, SEC_STRTAB, SEC_SHSTRTAB, SEC__N };

static const char *const sec_name[SEC__N] = {
    [SEC_NULL] = "",          [SEC_TEXT] = ".text",     [SEC_EH] = ".eh_frame",
    [SEC_SYMTAB] = ".symtab", [SEC_STRTAB] = ".strtab", [SEC_SHSTRTAB] = ".shstrtab",
};

/* Appends a NUL-terminated string to a string table; returns its offset. */
static uint32_t str_add(uw_buf *t, const char *s) {
    uint32_t at = (uint32_t)t->len;
    uw_put(t, s, strlen(s) + 1);
    return at;
}

static void sym_add(uw_buf *st, uint32_t name, unsigned char bind, unsigned char type,
                    uint16_t shndx, uint64_t value, uint64_t size) {
    Elf64_Sym s = {
        .st_name = name,
        .st_info = ELF64_ST_INFO(bind, type),
        .st_other = STV_DEFAULT,
        .st_shndx = shndx,
        .st_value = value,
        .st_size = size,
    };
    uw_put(st, &s, sizeof s);
}

/* Largest power of two, at most 16, that divides a (sh_addr must be a
 * multiple of sh_addralign). */
static uint64_t addr_align(uintptr_t a) {
    uint64_t al = 16;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

/* The ELF around fns (checked; covering [lo, hi)) and their .eh_frame. */
static fj_status build_elf(const uw_func *fns, size_t n, uintptr_t lo, uintptr_t hi,
                           const uint8_t *code, const uint8_t *eh, size_t eh_len, uint8_t **out,
                           size_t *len) {
    const int gdb = code == NULL;

    /* String and symbol tables first, so their sizes are known. */
    uw_buf strtab = {0}, symtab = {0}, shstr = {0}, b = {0};
    /* Sized up front: a batch may hold thousands of kernels, and
     * growing by doubling would copy everything a few times. */
    size_t names = 16;
    for (size_t i = 0; i < n; i++) names += strlen(fns[i].name) + 1;
    uw_reserve(&strtab, names);
    uw_reserve(&symtab, (n + 3) * sizeof(Elf64_Sym));
    uw_reserve(&b, sizeof(Elf64_Ehdr) + 64 + (code ? hi - lo : 0) + eh_len + (n + 3) *
                       sizeof(Elf64_Sym) + names + 64 + sizeof(Elf64_Shdr) * SEC__N);
    uint32_t shname[SEC__N];
    for (int i = 0; i < SEC__N; i++) shname[i] = str_add(&shstr, sec_name[i]);
    str_add(&strtab, "");
    sym_add(&symtab, 0, STB_LOCAL, STT_NOTYPE, SHN_UNDEF, 0, 0);
    sym_add(&symtab, str_add(&strtab, "framejit"), STB_LOCAL, STT_FILE, SHN_ABS, 0, 0);
    sym_add(&symtab, 0, STB_LOCAL, STT_SECTION, SEC_TEXT, 0, 0);
    const uint32_t first_global = 3;
    for (size_t i = 0; i < n; i++)
        sym_add(&symtab, str_add(&strtab, fns[i].name), STB_GLOBAL, STT_FUNC, SEC_TEXT,
                fns[i].start - lo, fns[i].size);

    Elf64_Shdr sh[SEC__N];
    memset(sh, 0, sizeof sh);
    uw_put_zero(&b, sizeof(Elf64_Ehdr));

    uw_align(&b, 16, 0);
    sh[SEC_TEXT] = (Elf64_Shdr){
        .sh_type = gdb ? SHT_NOBITS : SHT_PROGBITS,
        .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
        .sh_addr = gdb ? lo : 0,
        .sh_offset = b.len,
        .sh_size = hi - lo,
        .sh_addralign = gdb ? addr_align(lo) : 16,
    };
    if (!gdb) uw_put(&b, code, hi - lo);

    uw_align(&b, 8, 0);
    sh[SEC_EH] = (Elf64_Shdr){
        .sh_type = SHT_PROGBITS,
        /* Not SHF_ALLOC in the GDB object: an allocated .eh_frame at address
         * 0 has been seen to make gdb very slow, and gdb finds it by name. */
        .sh_flags = gdb ? 0 : SHF_ALLOC,
        .sh_offset = b.len,
        .sh_size = eh_len,
        .sh_addralign = 8,
    };
    uw_put(&b, eh, eh_len);

    uw_align(&b, 8, 0);
    sh[SEC_SYMTAB] = (Elf64_Shdr){
        .sh_type = SHT_SYMTAB,
        .sh_offset = b.len,
        .sh_size = symtab.len,
        .sh_link = SEC_STRTAB,
        .sh_info = first_global,
        .sh_addralign = 8,
        .sh_entsize = sizeof(Elf64_Sym),
    };
    uw_put(&b, symtab.p, symtab.len);

    sh[SEC_STRTAB] = (Elf64_Shdr){
        .sh_type = SHT_STRTAB, .sh_offset = b.len, .sh_size = strtab.len, .sh_addralign = 1};
    uw_put(&b, strtab.p, strtab.len);

    sh[SEC_SHSTRTAB] = (Elf64_Shdr){
        .sh_type = SHT_STRTAB, .sh_offset = b.len, .sh_size = shstr.len, .sh_addralign = 1};
    uw_put(&b, shstr.p, shstr.len);

    for (int i = 0; i < SEC__N; i++) sh[i].sh_name = shname[i];
    uw_align(&b, 8, 0);
    size_t shoff = b.len;
    uw_put(&b, sh, sizeof sh);

    int oom = strtab.oom || symtab.oom || shstr.oom;
    fj_free(strtab.p);
    fj_free(symtab.p);
    fj_free(shstr.p);
    if (oom) b.oom = 1;
    if (!b.oom) {
        uw_elf_header(b.p, ET_REL, 0, 0, shoff, SEC__N, SEC_SHSTRTAB);
    }
    return uw_buf_take(&b, out, len);
}

fj_status uw_elf_build(const uw_func *fns, size_t n, const uint8_t *code, uint8_t **out,
                       size_t *len) {
    if (!out || !len) return fj_fail(FJ_ERR_INVALID_ARG, "uw_elf_build: NULL output");
    uintptr_t lo, hi;
    fj_status st = uw_check_funcs(fns, n, &lo, &hi);
    if (st != FJ_OK) return st;
    /* A .o for tools gets section-relative FDEs; the GDB object absolute
     * ones (gdb adds no section offset for JIT objects). */
    uint8_t *eh = NULL;
    size_t eh_len = 0;
    st = uw_eh_frame_build_at(fns, n, code ? lo : 0, &eh, &eh_len, NULL);
    if (st != FJ_OK) return st;
    st = build_elf(fns, n, lo, hi, code, eh, eh_len, out, len);
    fj_free(eh);
    return st;
}

void uw_elf_header(void *dst, uint16_t type, uint64_t phoff, uint16_t phnum, uint64_t shoff,
                   uint16_t shnum, uint16_t shstrndx) {
    Elf64_Ehdr e = {
        .e_type = type,
        .e_machine = EM_X86_64,
        .e_version = EV_CURRENT,
        .e_phoff = phoff,
        .e_shoff = shoff,
        .e_ehsize = sizeof(Elf64_Ehdr),
        .e_phentsize = phnum ? sizeof(Elf64_Phdr) : 0,
        .e_phnum = phnum,
        .e_shentsize = sizeof(Elf64_Shdr),
        .e_shnum = shnum,
        .e_shstrndx = shstrndx,
    };
    memcpy(e.e_ident, ELFMAG, SELFMAG);
    e.e_ident[EI_CLASS] = ELFCLASS64;
    e.e_ident[EI_DATA] = ELFDATA2LSB;
    e.e_ident[EI_VERSION] = EV_CURRENT;
    e.e_ident[EI_OSABI] = ELFOSABI_NONE;
    memcpy(dst, &e, sizeof e);
}
