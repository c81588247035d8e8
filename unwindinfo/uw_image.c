/* uw_image.c: the bytes that make a code arena's backing file a
 * self-describing ELF image (perf names kernels and unwinds them in
 * --call-graph dwarf mode from the file alone), and the per-kernel unwind
 * data of perf's jitdump format.
 *
 * Arena file (every address below is a file offset too: vaddr == offset,
 * so the load bias of the file is (RX address of the code) - code_off):
 *
 *   0         header page: ELF header, program headers, build-id note
 *   code_off  the code span, mapped read+execute at lo (the code cache's)
 *   meta_off  metadata, never mapped executable: .eh_frame_hdr, .eh_frame,
 *             .symtab, .strtab, .shstrtab, section headers
 *
 *   PT_LOAD  R    [0, header)          first, so tools see load base 0
 *   PT_LOAD  R+X  [code_off, +span)    the kernels (.text)
 *   PT_LOAD  R    [meta_off, +meta)    .eh_frame_hdr, .eh_frame
 *   PT_NOTE, PT_GNU_EH_FRAME
 *
 * FDE addresses are pc-relative (DW_EH_PE_pcrel | sdata4) and the search
 * table data-relative, as linkers write them, so the file describes itself
 * wherever it is mapped. Each kernel's CFA program comes from uw_cfi.c
 * (the FDE it builds for the kernel, re-wrapped with these encodings).
 *
 * The build-id is a hash of what the image says (layout, and for every
 * kernel its address, size, name, CFA program and code bytes), so it
 * changes whenever a kernel is added or dropped: perf files each version
 * under its own build-id. */
#include "unwindinfo/uw_int.h"

#include <elf.h>
#include <string.h>

enum {
    DW_EH_PE_udata4 = 0x03,
    DW_EH_PE_sdata4 = 0x0b,
    DW_EH_PE_pcrel = 0x10,
    DW_EH_PE_datarel = 0x30,
};
enum { DW_CFA_def_cfa = 0x0c, DW_CFA_offset = 0x80 };
#define BUILD_ID_LEN 20

/* ---- Hash (not cryptographic: it only has to tell image versions apart) -- */

typedef struct img_hash {
    uint64_t h[3];
} img_hash;

static void hash_init(img_hash *s) {
    s->h[0] = 0xcbf29ce484222325ull;
    s->h[1] = 0x84222325cbf29ce4ull;
    s->h[2] = 0x9e3779b97f4a7c15ull;
}

static void hash_put(img_hash *s, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        s->h[0] = (s->h[0] ^ b[i]) * 0x100000001b3ull;
        s->h[1] = (s->h[1] ^ b[i]) * 0x100000001b3ull + 1;
        s->h[2] = (s->h[2] ^ (b[i] + 0x5bu)) * 0x100000001b3ull;
    }
}

static void hash_u64(img_hash *s, uint64_t v) { hash_put(s, &v, sizeof v); }

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void hash_final(const img_hash *s, uint8_t out[BUILD_ID_LEN]) {
    uint64_t w[3] = {mix64(s->h[0]), mix64(s->h[1] ^ s->h[0]), mix64(s->h[2] ^ s->h[1])};
    memcpy(out, w, BUILD_ID_LEN);
}

/* ---- CFA programs ----------------------------------------------------------
 * uw_cfi.c builds the FDE; we keep only its instructions. Its CIE must be
 * the one we expect ("zR", 8-byte absolute addresses), else we refuse. */

static int read_uleb(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (unsigned sh = 0; *p < end && sh < 64; sh += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *v = r;
            return 1;
        }
    }
    return 0;
}

static fj_status cfa_program(const uw_func *f, uint8_t **out, size_t *len) {
    uint8_t *eh = NULL;
    size_t eh_len = 0, fde_at = 0;
    fj_status st = uw_eh_frame_build_at(f, 1, 0, &eh, &eh_len, &fde_at);
    if (st != FJ_OK) return st;
    const uint8_t *end = eh + eh_len, *p = eh;
    uint32_t cie_len, fde_len;
    uint64_t v, aug;
    int ok = eh_len >= 8 && fde_at + 8 <= eh_len;
    if (ok) {
        memcpy(&cie_len, p, 4);
        /* CIE: length, id, version, "zR", code align, data align, RA, aug len, enc */
        p += 9;
        ok = cie_len + 4 <= fde_at && p + 3 <= end && !memcmp(p, "zR", 3);
        p += 3;
        ok = ok && read_uleb(&p, end, &v) && read_uleb(&p, end, &v) && p < end;
        p++; /* return address column (a byte in version 1) */
        ok = ok && read_uleb(&p, end, &aug) && aug == 1 && p < end && *p == 0; /* absptr */
    }
    if (ok) {
        memcpy(&fde_len, eh + fde_at, 4);
        p = eh + fde_at + 4 + 4 + 8 + 8; /* length, CIE pointer, pc begin, range */
        end = eh + fde_at + 4 + fde_len;
        ok = fde_len >= 20 && end <= eh + eh_len && read_uleb(&p, end, &aug) && aug == 0;
    }
    if (!ok) {
        fj_free(eh);
        return fj_fail(FJ_ERR_UNWIND, "arena image: %s: unexpected .eh_frame layout", f->name);
    }
    size_t n = (size_t)(end - p);
    uint8_t *prog = fj_malloc(n ? n : 1);
    if (!prog) {
        fj_free(eh);
        return fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
    }
    memcpy(prog, p, n);
    fj_free(eh);
    *out = prog;
    *len = n;
    return FJ_OK;
}

/* Our CIE: "zR", pc-relative 4-byte FDE addresses, CFA = rsp + 8 and the
 * return address at CFA - 8 on entry. Returns its offset in b. */
static size_t put_cie(uw_buf *b) {
    size_t at = b->len;
    uw_put_u32(b, 0);
    uw_put_u32(b, 0); /* CIE id */
    uw_put_u8(b, 1);  /* version */
    uw_put(b, "zR", 3);
    uw_put_uleb(b, 1);  /* code alignment */
    uw_put_sleb(b, -8); /* data alignment */
    uw_put_u8(b, 16);   /* return address column */
    uw_put_uleb(b, 1);
    uw_put_u8(b, DW_EH_PE_pcrel | DW_EH_PE_sdata4);
    uw_put_u8(b, DW_CFA_def_cfa);
    uw_put_uleb(b, 7); /* rsp */
    uw_put_uleb(b, 8);
    uw_put_u8(b, DW_CFA_offset | 16);
    uw_put_uleb(b, 1); /* at CFA - 8 */
    uw_align(b, 8, 0);
    uw_patch_u32(b, at, (uint32_t)(b->len - at - 4));
    return at;
}

/* One FDE at b's end. sec_vaddr: address of b's first byte; fn_vaddr: the
 * kernel's. Returns the FDE's offset in b. */
static size_t put_fde(uw_buf *b, size_t cie_at, uint64_t sec_vaddr, uint64_t fn_vaddr,
                      uint32_t size, const uint8_t *prog, size_t prog_len) {
    size_t at = b->len;
    uw_put_u32(b, 0);
    uw_put_u32(b, (uint32_t)(b->len - cie_at)); /* back to the CIE from this field */
    uw_put_u32(b, (uint32_t)(int32_t)(int64_t)(fn_vaddr - (sec_vaddr + b->len)));
    uw_put_u32(b, size);
    uw_put_uleb(b, 0); /* no augmentation data */
    uw_put(b, prog, prog_len);
    uw_align(b, 8, 0); /* DW_CFA_nop */
    uw_patch_u32(b, at, (uint32_t)(b->len - at - 4));
    return at;
}

/* .eh_frame_hdr at hdr_vaddr for an .eh_frame at eh_vaddr; starts[i] and
 * fdes[i] (vaddrs) sorted by start. */
static void put_eh_frame_hdr(uw_buf *b, uint64_t hdr_vaddr, uint64_t eh_vaddr,
                             const uint64_t *starts, const uint64_t *fdes, size_t n) {
    uw_put_u8(b, 1);
    uw_put_u8(b, DW_EH_PE_pcrel | DW_EH_PE_sdata4);   /* eh_frame_ptr */
    uw_put_u8(b, DW_EH_PE_udata4);                    /* fde_count */
    uw_put_u8(b, DW_EH_PE_datarel | DW_EH_PE_sdata4); /* table */
    uw_put_u32(b, (uint32_t)(int32_t)(int64_t)(eh_vaddr - (hdr_vaddr + 4)));
    uw_put_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        uw_put_u32(b, (uint32_t)(int32_t)(int64_t)(starts[i] - hdr_vaddr));
        uw_put_u32(b, (uint32_t)(int32_t)(int64_t)(fdes[i] - hdr_vaddr));
    }
}

/* ---- The per-arena kernel list --------------------------------------------- */

typedef struct img_fn {
    uintptr_t start;
    uint32_t size;
    char *name;
    uint8_t *prog;
    size_t prog_len;
    uint64_t code_hash;
    const void *tag;
} img_fn;

struct uw_image {
    img_fn *fns; /* sorted by start */
    size_t n, cap;
};

fj_status uw_image_new(uw_image **out) {
    *out = fj_calloc(1, sizeof **out);
    return *out ? FJ_OK : fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
}

static void fn_free(img_fn *f) {
    fj_free(f->name);
    fj_free(f->prog);
}

void uw_image_free(uw_image *im) {
    if (!im) return;
    for (size_t i = 0; i < im->n; i++) fn_free(&im->fns[i]);
    fj_free(im->fns);
    fj_free(im);
}

size_t uw_image_count(const uw_image *im) { return im ? im->n : 0; }

fj_status uw_image_add(uw_image *im, const uw_func *f, const uint8_t *code, const void *tag) {
    fj_status st = uw_check_func(f);
    if (st != FJ_OK) return st;
    for (size_t i = 0; i < im->n; i++) {
        const img_fn *g = &im->fns[i];
        if (f->start < g->start + g->size && g->start < f->start + f->size)
            return fj_fail(FJ_ERR_INVALID_ARG, "arena image: %s overlaps %s", f->name, g->name);
    }
    if (im->n == im->cap) {
        size_t cap = im->cap ? im->cap * 2 : 16;
        img_fn *v = fj_realloc(im->fns, cap * sizeof *v);
        if (!v) return fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
        im->fns = v;
        im->cap = cap;
    }
    img_fn nf = {.start = f->start, .size = (uint32_t)f->size, .tag = tag};
    nf.name = fj_strdup(f->name);
    if (!nf.name) return fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
    st = cfa_program(f, &nf.prog, &nf.prog_len);
    if (st != FJ_OK) {
        fn_free(&nf);
        return st;
    }
    img_hash h;
    hash_init(&h);
    if (code) hash_put(&h, code, f->size);
    nf.code_hash = mix64(h.h[0] ^ mix64(h.h[1]));
    /* Kernels arrive in address order almost always; insert where it goes. */
    size_t at = im->n;
    while (at > 0 && im->fns[at - 1].start > nf.start) at--;
    memmove(&im->fns[at + 1], &im->fns[at], (im->n - at) * sizeof nf);
    im->fns[at] = nf;
    im->n++;
    return FJ_OK;
}

size_t uw_image_prune(uw_image *im, int (*live)(const void *tag, uintptr_t start, void *ctx),
                      void *ctx) {
    size_t kept = 0, dropped = 0;
    for (size_t i = 0; i < im->n; i++) {
        if (live(im->fns[i].tag, im->fns[i].start, ctx)) {
            im->fns[kept++] = im->fns[i];
        } else {
            fn_free(&im->fns[i]);
            dropped++;
        }
    }
    im->n = kept;
    return dropped;
}

/* ---- Layout ------------------------------------------------------------------ */

enum { S_NULL, S_NOTE, S_TEXT, S_EH_HDR, S_EH, S_SYMTAB, S_STRTAB, S_SHSTRTAB, S__N };
static const char *const sec_names[S__N] = {
    "", ".note.gnu.build-id", ".text", ".eh_frame_hdr", ".eh_frame", ".symtab", ".strtab",
    ".shstrtab",
};
enum { P_HDR, P_CODE, P_META, P_NOTE, P_EH, P__N };

static uint64_t up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

fj_status uw_image_build(const uw_image *im, const uw_image_layout *l, uw_image_bytes *out) {
    memset(out, 0, sizeof *out);
    if (!im || im->n == 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "arena image: no kernels");
    const uint64_t page = l->page ? l->page : 4096;
    if (l->code_off < page || l->code_off % page || l->meta_off % page ||
        l->meta_off < l->code_off + l->code_span)
        return fj_fail(FJ_ERR_INVALID_ARG, "arena image: bad layout (code %#llx+%#llx, meta %#llx)",
                       (unsigned long long)l->code_off, (unsigned long long)l->code_span,
                       (unsigned long long)l->meta_off);
    for (size_t i = 0; i < im->n; i++) {
        const img_fn *f = &im->fns[i];
        if (f->start < l->lo || f->start + f->size > l->lo + l->code_span)
            return fj_fail(FJ_ERR_INVALID_ARG, "arena image: %s outside the arena", f->name);
    }
    const size_t n = im->n;
    uint64_t *starts = fj_malloc(n * sizeof *starts), *fdes = fj_malloc(n * sizeof *fdes);
    uw_buf eh = {0}, hdr = {0}, sym = {0}, str = {0}, shstr = {0}, meta = {0}, head = {0};
    fj_status st = FJ_ERR_NO_MEMORY;
    if (!starts || !fdes) goto done;

    /* Offsets in the metadata are fixed by sizes alone: .eh_frame_hdr
     * first (its size is known from n), then .eh_frame. */
    const uint64_t hdr_vaddr = l->meta_off;
    const size_t hdr_len = 12 + 8 * n;
    const uint64_t eh_vaddr = hdr_vaddr + up(hdr_len, 8);
    img_hash h;
    hash_init(&h);
    hash_u64(&h, l->code_off);
    hash_u64(&h, l->code_span);

    size_t cie = put_cie(&eh);
    for (size_t i = 0; i < n; i++) {
        const img_fn *f = &im->fns[i];
        starts[i] = l->code_off + (f->start - l->lo);
        fdes[i] = eh_vaddr + put_fde(&eh, cie, eh_vaddr, starts[i], f->size, f->prog,
                                     f->prog_len);
        hash_u64(&h, starts[i]);
        hash_u64(&h, f->size);
        hash_put(&h, f->name, strlen(f->name) + 1);
        hash_put(&h, f->prog, f->prog_len);
        hash_u64(&h, f->code_hash);
    }
    uw_put_u32(&eh, 0); /* terminator */
    put_eh_frame_hdr(&hdr, hdr_vaddr, eh_vaddr, starts, fdes, n);
    hash_final(&h, out->build_id);

    /* Symbols: the null symbol, then one global function per kernel. */
    uw_put_u8(&str, 0);
    Elf64_Sym s0 = {0};
    uw_put(&sym, &s0, sizeof s0);
    for (size_t i = 0; i < n; i++) {
        Elf64_Sym s = {
            .st_name = (uint32_t)str.len,
            .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
            .st_other = STV_DEFAULT,
            .st_shndx = S_TEXT,
            .st_value = starts[i],
            .st_size = im->fns[i].size,
        };
        uw_put(&str, im->fns[i].name, strlen(im->fns[i].name) + 1);
        uw_put(&sym, &s, sizeof s);
    }
    uint32_t shname[S__N];
    for (int i = 0; i < S__N; i++) {
        shname[i] = (uint32_t)shstr.len;
        uw_put(&shstr, sec_names[i], strlen(sec_names[i]) + 1);
    }

    /* Header page: ELF header, program headers, the build-id note. */
    const uint64_t phoff = sizeof(Elf64_Ehdr);
    const uint64_t note_off = phoff + P__N * sizeof(Elf64_Phdr);
    const uint64_t note_len = 12 + 4 + BUILD_ID_LEN;
    const uint64_t head_len = note_off + note_len;

    /* Metadata: .eh_frame_hdr, .eh_frame, .symtab, .strtab, .shstrtab, shdrs. */
    Elf64_Shdr sh[S__N];
    memset(sh, 0, sizeof sh);
    sh[S_EH_HDR] = (Elf64_Shdr){.sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                                .sh_addr = hdr_vaddr, .sh_offset = hdr_vaddr,
                                .sh_size = hdr.len, .sh_addralign = 4};
    uw_put(&meta, hdr.p, hdr.len);
    uw_align(&meta, 8, 0);
    sh[S_EH] = (Elf64_Shdr){.sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC, .sh_addr = eh_vaddr,
                            .sh_offset = eh_vaddr, .sh_size = eh.len, .sh_addralign = 8};
    uw_put(&meta, eh.p, eh.len);
    const uint64_t alloc_end = l->meta_off + meta.len; /* the loadable part ends here */
    uw_align(&meta, 8, 0);
    sh[S_SYMTAB] = (Elf64_Shdr){.sh_type = SHT_SYMTAB, .sh_offset = l->meta_off + meta.len,
                                .sh_size = sym.len, .sh_link = S_STRTAB, .sh_info = 1,
                                .sh_addralign = 8, .sh_entsize = sizeof(Elf64_Sym)};
    uw_put(&meta, sym.p, sym.len);
    sh[S_STRTAB] = (Elf64_Shdr){.sh_type = SHT_STRTAB, .sh_offset = l->meta_off + meta.len,
                                .sh_size = str.len, .sh_addralign = 1};
    uw_put(&meta, str.p, str.len);
    sh[S_SHSTRTAB] = (Elf64_Shdr){.sh_type = SHT_STRTAB, .sh_offset = l->meta_off + meta.len,
                                  .sh_size = shstr.len, .sh_addralign = 1};
    uw_put(&meta, shstr.p, shstr.len);
    sh[S_NOTE] = (Elf64_Shdr){.sh_type = SHT_NOTE, .sh_flags = SHF_ALLOC, .sh_addr = note_off,
                              .sh_offset = note_off, .sh_size = note_len, .sh_addralign = 4};
    sh[S_TEXT] = (Elf64_Shdr){.sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
                              .sh_addr = l->code_off, .sh_offset = l->code_off,
                              .sh_size = l->code_span, .sh_addralign = 64};
    for (int i = 0; i < S__N; i++) sh[i].sh_name = shname[i];
    uw_align(&meta, 8, 0);
    const uint64_t shoff = l->meta_off + meta.len;
    uw_put(&meta, sh, sizeof sh);

    Elf64_Ehdr eh_hdr = {
        .e_type = ET_DYN,
        .e_machine = EM_X86_64,
        .e_version = EV_CURRENT,
        .e_phoff = phoff,
        .e_shoff = shoff,
        .e_ehsize = sizeof(Elf64_Ehdr),
        .e_phentsize = sizeof(Elf64_Phdr),
        .e_phnum = P__N,
        .e_shentsize = sizeof(Elf64_Shdr),
        .e_shnum = S__N,
        .e_shstrndx = S_SHSTRTAB,
    };
    memcpy(eh_hdr.e_ident, ELFMAG, SELFMAG);
    eh_hdr.e_ident[EI_CLASS] = ELFCLASS64;
    eh_hdr.e_ident[EI_DATA] = ELFDATA2LSB;
    eh_hdr.e_ident[EI_VERSION] = EV_CURRENT;
    eh_hdr.e_ident[EI_OSABI] = ELFOSABI_NONE;
    Elf64_Phdr ph[P__N] = {
        [P_HDR] = {.p_type = PT_LOAD, .p_flags = PF_R, .p_offset = 0, .p_vaddr = 0, .p_paddr = 0,
                   .p_filesz = head_len, .p_memsz = head_len, .p_align = page},
        [P_CODE] = {.p_type = PT_LOAD, .p_flags = PF_R | PF_X, .p_offset = l->code_off,
                    .p_vaddr = l->code_off, .p_paddr = l->code_off, .p_filesz = l->code_span,
                    .p_memsz = l->code_span, .p_align = page},
        [P_META] = {.p_type = PT_LOAD, .p_flags = PF_R, .p_offset = l->meta_off,
                    .p_vaddr = l->meta_off, .p_paddr = l->meta_off,
                    .p_filesz = alloc_end - l->meta_off, .p_memsz = alloc_end - l->meta_off,
                    .p_align = page},
        [P_NOTE] = {.p_type = PT_NOTE, .p_flags = PF_R, .p_offset = note_off, .p_vaddr = note_off,
                    .p_paddr = note_off, .p_filesz = note_len, .p_memsz = note_len,
                    .p_align = 4},
        [P_EH] = {.p_type = PT_GNU_EH_FRAME, .p_flags = PF_R, .p_offset = hdr_vaddr,
                  .p_vaddr = hdr_vaddr, .p_paddr = hdr_vaddr, .p_filesz = hdr.len,
                  .p_memsz = hdr.len, .p_align = 4},
    };
    uw_put(&head, &eh_hdr, sizeof eh_hdr);
    uw_put(&head, ph, sizeof ph);
    uint32_t nh[3] = {4, BUILD_ID_LEN, NT_GNU_BUILD_ID};
    uw_put(&head, nh, sizeof nh);
    uw_put(&head, "GNU", 4);
    uw_put(&head, out->build_id, BUILD_ID_LEN);
    if (head.len != head_len || head_len > l->code_off) head.oom = 1;

    int oom = eh.oom || hdr.oom || sym.oom || str.oom || shstr.oom || meta.oom || head.oom;
    if (!oom && uw_buf_take(&meta, &out->meta, &out->meta_len) == FJ_OK) {
        if (uw_buf_take(&head, &out->hdr, &out->hdr_len) == FJ_OK) {
            out->eh_frame_hdr_off = hdr_vaddr;
            out->shoff = shoff;
            st = FJ_OK;
        } else {
            fj_free(out->meta);
            out->meta = NULL;
        }
    }
done:
    fj_free(starts);
    fj_free(fdes);
    fj_free(eh.p);
    fj_free(hdr.p);
    fj_free(sym.p);
    fj_free(str.p);
    fj_free(shstr.p);
    fj_free(meta.p);
    fj_free(head.p);
    if (st != FJ_OK) {
        uw_image_bytes_free(out);
        return fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory (%zu kernels)", n);
    }
    return FJ_OK;
}

void uw_image_bytes_free(uw_image_bytes *b) {
    if (!b) return;
    fj_free(b->hdr);
    fj_free(b->meta);
    b->hdr = b->meta = NULL;
    b->hdr_len = b->meta_len = 0;
}

/* ---- jitdump unwind data ------------------------------------------------------
 * perf inject --jit writes one ELF per kernel: the code at some offset T (a
 * multiple of 8), .eh_frame at T + code_size rounded up to 8, .eh_frame_hdr
 * right after .eh_frame. The record carries [.eh_frame][.eh_frame_hdr];
 * relative encodings make T irrelevant, so we lay them out with T = 0. */
fj_status uw_jit_unwind_build(const uw_func *f, uint8_t **out, size_t *len, size_t *hdr_len) {
    *out = NULL;
    *len = *hdr_len = 0;
    uint8_t *prog;
    size_t prog_len;
    fj_status st = uw_check_func(f);
    if (st == FJ_OK) st = cfa_program(f, &prog, &prog_len);
    if (st != FJ_OK) return st;
    uw_buf b = {0}, hdr = {0};
    const uint64_t eh_vaddr = up(f->size, 8);
    size_t cie = put_cie(&b);
    uint64_t start = 0, fde = eh_vaddr + put_fde(&b, cie, eh_vaddr, 0, (uint32_t)f->size, prog,
                                                 prog_len);
    uw_put_u32(&b, 0);
    fj_free(prog);
    const size_t eh_len = b.len;
    put_eh_frame_hdr(&hdr, eh_vaddr + eh_len, eh_vaddr, &start, &fde, 1);
    uw_put(&b, hdr.p, hdr.len);
    const size_t hl = hdr.len;
    fj_free(hdr.p);
    if (hdr.oom) b.oom = 1;
    st = uw_buf_take(&b, out, len);
    if (st == FJ_OK) *hdr_len = hl;
    return st;
}
