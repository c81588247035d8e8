/* uw_image.c: the bytes that make a code arena's backing file a
 * self-describing ELF image (perf names kernels and unwinds them in
 * --call-graph dwarf mode from the file alone), written in place as kernels
 * arrive; and the per-kernel unwind data of perf's jitdump format.
 *
 * Arena file (every address below is a file offset too: vaddr == offset,
 * so the load bias of the file is (RX address of the code) - code_off):
 *
 *   0         header page: ELF header, program headers, build-id note,
 *             section headers, .shstrtab
 *   code_off  the code span, mapped read+execute at lo (the code cache's)
 *   meta_off  the metadata area (right after the span, mapped read-only
 *             after the code), never executable. The current version lies
 *             at some page-aligned offset in it:
 *               .eh_frame_hdr  12 + 8 * ncap bytes reserved
 *               .eh_frame      the CIE, then one FDE per kernel (no zero
 *                              terminator: the section size bounds it)
 *               .symtab        24 * (ncap + 1) reserved
 *               .strtab        str_cap reserved
 *
 *   PT_LOAD  R    [0, header)          first, so tools see load base 0
 *   PT_LOAD  R+X  [code_off, +span)    the kernels (.text)
 *   PT_LOAD  R    [.eh_frame_hdr, end of .eh_frame)
 *   PT_NOTE, PT_GNU_EH_FRAME
 *
 * Adding a kernel appends in place, in the room reserved: its FDE after
 * the last one, its symbol and name, its search-table entry (sorted by
 * address: appended, as kernels arrive in address order almost always),
 * then the table's count, and last the header page (section and segment
 * sizes, the build-id). A reader that copies the file meanwhile sees the
 * previous sizes, which describe the previous version (only the table's
 * count may already say one more; its entry is complete by then). When a
 * section's room is full, the whole metadata is written again with every
 * room at twice what is used, at an offset that does not overlap the
 * current version; the header page is switched to it, and the old version
 * is given back to the file system (a hole, or the file is cut after the
 * new one). So is it when compacting (dropping removed kernels). The cost
 * of a kernel is thus constant, amortized, whatever the arena holds.
 *
 * FDE addresses are pc-relative (DW_EH_PE_pcrel | sdata4) and the search
 * table data-relative, as linkers write them, so the file describes itself
 * wherever it is mapped, and a version moves by patching two fields per
 * FDE. Each kernel's CFA program comes from uw_cfi.c (the FDE it builds
 * for the kernel, re-wrapped with these encodings).
 *
 * The build-id is a chained hash: each added kernel (address, size, name,
 * CFA program, code bytes) and each compaction is hashed into the previous
 * one, so it changes with every version and perf files each version under
 * its own build-id; the same sequence of kernels gives the same build-id. */
#include "unwindinfo/uw_int.h"

#include <elf.h>
#include <stddef.h>
#include <stdlib.h>
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

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Bytes to 64 bits, eight at a time in four independent lanes, one
 * multiply per word (every kernel's code is hashed as it is added; a
 * single lane with a full mix per word took a cycle per byte), the lanes
 * mixed at the end. */
static uint64_t hash_bytes(const void *p, size_t n, uint64_t seed) {
    const uint8_t *b = p;
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    uint64_t h0 = mix64(seed ^ (n * k)), h1 = h0 ^ 1, h2 = h0 ^ 2, h3 = h0 ^ 3;
#define LANE(h, at)                                  \
    do {                                             \
        uint64_t w_;                                 \
        memcpy(&w_, b + (at), 8);                    \
        h = (h ^ w_) * k;                            \
        h = h << 31 | h >> 33;                       \
    } while (0)
    for (; n >= 32; n -= 32, b += 32) {
        LANE(h0, 0);
        LANE(h1, 8);
        LANE(h2, 16);
        LANE(h3, 24);
    }
    for (; n >= 8; n -= 8, b += 8) LANE(h0, 0);
#undef LANE
    uint64_t w = 0;
    memcpy(&w, b, n);
    return mix64(h0 ^ w ^ mix64(h1 ^ mix64(h2 ^ mix64(h3))));
}

typedef struct img_hash {
    uint64_t h[3];
} img_hash;

static void hash_init(img_hash *s) {
    s->h[0] = 0xcbf29ce484222325ull;
    s->h[1] = 0x84222325cbf29ce4ull;
    s->h[2] = 0x9e3779b97f4a7c15ull;
}

static void hash_u64(img_hash *s, uint64_t v) {
    s->h[0] = mix64(s->h[0] ^ v);
    s->h[1] = mix64(s->h[1] + v + 0x2545f4914f6cdd1dull);
    s->h[2] = (s->h[2] << 23 | s->h[2] >> 41) ^ (v * 0xff51afd7ed558ccdull);
}

static void hash_final(const img_hash *s, uint8_t out[BUILD_ID_LEN]) {
    uint64_t w[3] = {mix64(s->h[0]), mix64(s->h[1] ^ s->h[0]), mix64(s->h[2] ^ s->h[1])};
    memcpy(out, w, BUILD_ID_LEN);
}

/* ---- CFA programs ---------------------------------------------------------- */

/* f's CFA program, encoded straight into a buffer of its own (no CIE or
 * FDE around it to take apart again). */
static fj_status cfa_program(const uw_func *f, uint8_t *stack, size_t stack_cap, uint8_t **out,
                             size_t *len) {
    /* Written into the caller's stack buffer while it fits (a kernel's is
     * a few dozen bytes): one heap allocation less per kernel. Free *out
     * with prog_free. */
    uw_buf b = {stack, 0, stack_cap, 0, 1};
    uw_reserve(&b, f->prog ? f->prog_len : 16 + 4 * f->nrecs);
    fj_status st = uw_cfa_records(&b, f);
    if (st == FJ_OK && b.oom) st = fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
    if (st != FJ_OK) {
        if (!b.ext) fj_free(b.p);
        return st;
    }
    *out = b.p;
    *len = b.len;
    return FJ_OK;
}

static void prog_free(uint8_t *prog, const uint8_t *stack) {
    if (prog != stack) fj_free(prog);
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

/* ---- The image of one arena ----------------------------------------------- */

typedef struct img_fn {
    uintptr_t start;
    const void *tag;
    uint32_t size;
    uint32_t fde;     /* its FDE: offset in .eh_frame */
    uint32_t fde_len;
    uint32_t name;    /* its name: offset in .strtab */
} img_fn;

/* Where a version lies; offsets relative to the metadata area. */
typedef struct img_layout {
    uint64_t at, end; /* the version's bytes, page aligned */
    uint64_t hdr, eh, sym, str;
    uint64_t ncap, eh_cap, str_cap;
} img_layout;

struct uw_image {
    uw_image_map m;
    img_fn *fns;      /* in .symtab order (symbol i + 1) */
    size_t n, cap;
    int written;      /* a version is in the file */
    img_layout l;     /* the current version */
    uint64_t eh_len;  /* bytes used in .eh_frame (the CIE and the FDEs) */
    uint64_t str_len; /* ... in .strtab */
    int ehdr;         /* the ELF header is written */
    img_hash h;
    uint64_t versions, rewrites;
    uint8_t build_id[BUILD_ID_LEN];
};

enum { S_NULL, S_NOTE, S_TEXT, S_EH_HDR, S_EH, S_SYMTAB, S_STRTAB, S_SHSTRTAB, S__N };
static const char *const sec_names[S__N] = {
    "", ".note.gnu.build-id", ".text", ".eh_frame_hdr", ".eh_frame", ".symtab", ".strtab",
    ".shstrtab",
};
enum { P_HDR, P_CODE, P_META, P_NOTE, P_EH, P__N };

/* The header page: everything that changes with a version is here, so
 * that one page is updated last. */
#define PH_OFF ((uint64_t)sizeof(Elf64_Ehdr))
#define NOTE_OFF (PH_OFF + P__N * sizeof(Elf64_Phdr))
#define NOTE_LEN ((uint64_t)12 + 4 + BUILD_ID_LEN)
#define SH_OFF ((NOTE_OFF + NOTE_LEN + 63) & ~(uint64_t)63)
#define SHSTR_OFF (SH_OFF + S__N * sizeof(Elf64_Shdr))
#define HEADER_MAX 1024 /* bytes of the header page used, at most */
#define SYM ((uint64_t)sizeof(Elf64_Sym))

static uint64_t up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

static img_layout layout_at(uint64_t at, uint64_t ncap, uint64_t eh_cap, uint64_t str_cap,
                            uint64_t page) {
    img_layout l = {.at = at, .ncap = ncap, .eh_cap = up(eh_cap, 8), .str_cap = str_cap};
    l.hdr = at;
    l.eh = l.hdr + up(12 + 8 * ncap, 8);
    l.sym = l.eh + l.eh_cap;
    l.str = l.sym + SYM * (ncap + 1);
    l.end = up(l.str + str_cap, page);
    return l;
}

static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static int32_t rd32s(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint32_t rel32(uint64_t to, uint64_t from) {
    return (uint32_t)(int32_t)(int64_t)(to - from);
}

/* ELF address (file offset) of a kernel's first byte. */
static uint64_t fn_vaddr(const uw_image *im, uintptr_t start) {
    return im->m.code_off + (start - im->m.lo);
}

fj_status uw_image_new(const uw_image_map *m, uw_image **out) {
    *out = NULL;
    const uint64_t page = m->page;
    if (!m->hdr || !m->meta || page < HEADER_MAX || (page & (page - 1)) || m->code_off < page ||
        m->code_off % page || m->meta_off % page || m->meta_off < m->code_off + m->code_span ||
        m->meta_off + m->meta_room > (uint64_t)INT32_MAX)
        return fj_fail(FJ_ERR_INVALID_ARG, "arena image: bad layout (code %#llx+%#llx, "
                       "metadata %#llx+%#llx)", (unsigned long long)m->code_off,
                       (unsigned long long)m->code_span, (unsigned long long)m->meta_off,
                       (unsigned long long)m->meta_room);
    uw_image *im = fj_calloc(1, sizeof *im);
    if (!im) return fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
    im->m = *m;
    hash_init(&im->h);
    hash_u64(&im->h, m->code_off);
    hash_u64(&im->h, m->code_span);
    hash_u64(&im->h, m->meta_off);
    *out = im;
    return FJ_OK;
}

void uw_image_free(uw_image *im) {
    if (!im) return;
    fj_free(im->fns);
    fj_free(im);
}

size_t uw_image_count(const uw_image *im) { return im ? im->n : 0; }

/* ---- The header page ------------------------------------------------------- */

/* Where the current version's .eh_frame_hdr and .eh_frame are (ELF
 * addresses), the header table's length and the metadata segment's. */
typedef struct hdr_geom {
    uint64_t hdr_v, eh_v, hdr_len, load_len;
} hdr_geom;

static hdr_geom geom_of(const uw_image *im) {
    hdr_geom g;
    g.hdr_v = im->m.meta_off + im->l.hdr;
    g.eh_v = im->m.meta_off + im->l.eh;
    g.hdr_len = 12 + 8 * (uint64_t)im->n;
    g.load_len = g.eh_v + im->eh_len - g.hdr_v;
    return g;
}

static void write_header(uw_image *im) {
    const uw_image_map *m = &im->m;
    const img_layout *l = &im->l;
    const uint64_t n = im->n;
    const hdr_geom g = geom_of(im);
    const uint64_t hdr_v = g.hdr_v, eh_v = g.eh_v, hdr_len = g.hdr_len, load_len = g.load_len;
    uint8_t *h = m->hdr;

    uint32_t shname[S__N], nm = 0;
    char shstr[96];
    for (int i = 0; i < S__N; i++) {
        shname[i] = nm;
        size_t k = strlen(sec_names[i]) + 1;
        memcpy(shstr + nm, sec_names[i], k);
        nm += (uint32_t)k;
    }
    Elf64_Shdr sh[S__N] = {
        [S_NOTE] = {.sh_type = SHT_NOTE, .sh_flags = SHF_ALLOC, .sh_addr = NOTE_OFF,
                    .sh_offset = NOTE_OFF, .sh_size = NOTE_LEN, .sh_addralign = 4},
        [S_TEXT] = {.sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
                    .sh_addr = m->code_off, .sh_offset = m->code_off, .sh_size = m->code_span,
                    .sh_addralign = 64},
        [S_EH_HDR] = {.sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC, .sh_addr = hdr_v,
                      .sh_offset = hdr_v, .sh_size = hdr_len, .sh_addralign = 4},
        [S_EH] = {.sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC, .sh_addr = eh_v,
                  .sh_offset = eh_v, .sh_size = im->eh_len, .sh_addralign = 8},
        [S_SYMTAB] = {.sh_type = SHT_SYMTAB, .sh_offset = m->meta_off + l->sym,
                      .sh_size = SYM * (n + 1), .sh_link = S_STRTAB, .sh_info = 1,
                      .sh_addralign = 8, .sh_entsize = SYM},
        [S_STRTAB] = {.sh_type = SHT_STRTAB, .sh_offset = m->meta_off + l->str,
                      .sh_size = im->str_len, .sh_addralign = 1},
        [S_SHSTRTAB] = {.sh_type = SHT_STRTAB, .sh_offset = SHSTR_OFF, .sh_size = nm,
                        .sh_addralign = 1},
    };
    for (int i = 0; i < S__N; i++) sh[i].sh_name = shname[i];
    const uint64_t head_len = NOTE_OFF + NOTE_LEN;
    Elf64_Phdr ph[P__N] = {
        [P_HDR] = {.p_type = PT_LOAD, .p_flags = PF_R, .p_filesz = head_len,
                   .p_memsz = head_len, .p_align = m->page},
        [P_CODE] = {.p_type = PT_LOAD, .p_flags = PF_R | PF_X, .p_offset = m->code_off,
                    .p_vaddr = m->code_off, .p_paddr = m->code_off, .p_filesz = m->code_span,
                    .p_memsz = m->code_span, .p_align = m->page},
        [P_META] = {.p_type = PT_LOAD, .p_flags = PF_R, .p_offset = hdr_v, .p_vaddr = hdr_v,
                    .p_paddr = hdr_v, .p_filesz = load_len, .p_memsz = load_len,
                    .p_align = m->page},
        [P_NOTE] = {.p_type = PT_NOTE, .p_flags = PF_R, .p_offset = NOTE_OFF,
                    .p_vaddr = NOTE_OFF, .p_paddr = NOTE_OFF, .p_filesz = NOTE_LEN,
                    .p_memsz = NOTE_LEN, .p_align = 4},
        [P_EH] = {.p_type = PT_GNU_EH_FRAME, .p_flags = PF_R, .p_offset = hdr_v,
                  .p_vaddr = hdr_v, .p_paddr = hdr_v, .p_filesz = hdr_len, .p_memsz = hdr_len,
                  .p_align = 4},
    };
    uint8_t note[NOTE_LEN];
    uint32_t nh[3] = {4, BUILD_ID_LEN, NT_GNU_BUILD_ID};
    memcpy(note, nh, sizeof nh);
    memcpy(note + 12, "GNU", 4);
    memcpy(note + 16, im->build_id, BUILD_ID_LEN);

    memcpy(h + SHSTR_OFF, shstr, nm);
    memcpy(h + SH_OFF, sh, sizeof sh);
    memcpy(h + PH_OFF, ph, sizeof ph);
    memcpy(h + NOTE_OFF, note, sizeof note);
    if (!im->ehdr) {
        /* The ELF header never changes: written once, last, so that the
         * file is not an ELF file before it is a complete one. */
        uw_elf_header(h, ET_DYN, PH_OFF, P__N, SH_OFF, S__N, S_SHSTRTAB);
        im->ehdr = 1;
    }
}

/* What a kernel added without a rewrite changes in the header page: the
 * sizes that grow with the kernels and the build-id; the rest is the
 * layout's, written by write_header at the rewrite that made it (writing
 * all of it for each kernel costs far more). */
static void write_sizes(uw_image *im) {
    const uint64_t n = im->n;
    const hdr_geom g = geom_of(im);
    const uint64_t hdr_len = g.hdr_len, load_len = g.load_len;
    uint8_t *h = im->m.hdr;
    const struct {
        size_t at;
        uint64_t v;
    } f[] = {
        {SH_OFF + S_EH_HDR * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_size), hdr_len},
        {SH_OFF + S_EH * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_size), im->eh_len},
        {SH_OFF + S_SYMTAB * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_size), SYM * (n + 1)},
        {SH_OFF + S_STRTAB * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_size), im->str_len},
        {PH_OFF + P_META * sizeof(Elf64_Phdr) + offsetof(Elf64_Phdr, p_filesz), load_len},
        {PH_OFF + P_META * sizeof(Elf64_Phdr) + offsetof(Elf64_Phdr, p_memsz), load_len},
        {PH_OFF + P_EH * sizeof(Elf64_Phdr) + offsetof(Elf64_Phdr, p_filesz), hdr_len},
        {PH_OFF + P_EH * sizeof(Elf64_Phdr) + offsetof(Elf64_Phdr, p_memsz), hdr_len},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) memcpy(h + f[i].at, &f[i].v, 8);
    memcpy(h + NOTE_OFF + 16, im->build_id, BUILD_ID_LEN);
}

/* ---- Rewriting the whole metadata -------------------------------------------- */

/* Writes an FDE of len bytes at .eh_frame offset pos: the bytes of src
 * (an FDE of ours, or NULL: a new one from prog) with its CIE pointer and
 * pc-relative address made right for pos. */
static void put_fde_at(uint8_t *dst, uint64_t pos, uint64_t eh_v, uint64_t pc_v, uint32_t size,
                       const uint8_t *src, const uint8_t *prog, size_t prog_len, uint32_t len) {
    if (src) {
        memcpy(dst, src, len);
    } else {
        wr32(dst, len - 4);
        wr32(dst + 12, size);
        dst[16] = 0; /* no augmentation data */
        memcpy(dst + 17, prog, prog_len);
        memset(dst + 17 + prog_len, 0, len - 17 - prog_len); /* DW_CFA_nop */
    }
    wr32(dst + 4, (uint32_t)(pos + 4)); /* back to the CIE at offset 0 */
    wr32(dst + 8, rel32(pc_v, eh_v + pos + 8));
}

typedef struct tbl_ent {
    uint64_t start; /* ELF address of the kernel */
    uint64_t fde;   /* of its FDE */
} tbl_ent;

static int tbl_cmp(const void *a, const void *b) {
    const tbl_ent *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

/* Rooms for a version holding n kernels with eh and str bytes used:
 * twice that (tight: an eighth more), and where it goes: at the start of
 * the area if it fits before the current version, else right after it. */
static int plan(const uw_image *im, uint64_t n, uint64_t eh, uint64_t str, int tight,
                img_layout *out) {
    /* The first layout (32 kernels) fits one page: an arena that holds a
     * few kernels allocates and touches one page of file for them. */
    uint64_t ncap = tight ? n + n / 8 + 4 : (n < 16 ? 32 : 2 * n);
    uint64_t eh_cap = tight ? eh + eh / 8 + 256 : (eh < 1024 ? 2048 : 2 * eh);
    uint64_t str_cap = tight ? str + str / 8 + 256 : (str < 480 ? 960 : 2 * str);
    img_layout l = layout_at(0, ncap, eh_cap, str_cap, im->m.page);
    uint64_t at = !im->written || l.end <= im->l.at ? 0 : im->l.end;
    if (at + l.end > im->m.meta_room) return 0;
    *out = layout_at(at, ncap, eh_cap, str_cap, im->m.page);
    return 1;
}

/* Writes a new version with the kernels live() keeps (all if live is
 * NULL) and room for one more needing eh_more and str_more bytes
 * (eh_more == 0: none), switches the header page to it and gives the old
 * one back. Nothing changes in the file when it fails. */
static fj_status rewrite(uw_image *im, int (*live)(const void *tag), uint64_t eh_more,
                         uint64_t str_more, void *ctx) {
    const uw_image_map *m = &im->m;
    uint8_t *keep = fj_malloc(im->n + 1);
    tbl_ent *tbl = fj_malloc((im->n + 1) * sizeof *tbl);
    uw_buf cie = {0};
    fj_status st = FJ_OK;
    if (!keep || !tbl) {
        st = fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
        goto out;
    }
    put_cie(&cie);
    if (cie.oom) {
        st = fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
        goto out;
    }
    uint64_t n = 0, eh = cie.len, str = 1;
    for (size_t i = 0; i < im->n; i++) {
        const img_fn *f = &im->fns[i];
        keep[i] = !live || live(f->tag);
        if (!keep[i]) continue;
        n++;
        eh += f->fde_len;
        str += strlen((const char *)m->meta + im->l.str + f->name) + 1;
    }
    img_layout nl;
    uint64_t nn = n + (eh_more != 0);
    if (!plan(im, nn, eh + eh_more, str + str_more, 0, &nl) &&
        !plan(im, nn, eh + eh_more, str + str_more, 1, &nl)) {
        st = fj_fail(FJ_ERR_NO_MEMORY, "arena image: %llu kernels need more than the %llu bytes "
                     "of metadata room after the arena", (unsigned long long)nn,
                     (unsigned long long)m->meta_room);
        goto out;
    }
    st = m->back(ctx, nl.at, nl.end - nl.at);
    if (st != FJ_OK) goto out;

    /* The new version, in bytes nobody reads yet. */
    uint8_t *mem = m->meta;
    const uint64_t eh_v = m->meta_off + nl.eh, hdr_v = m->meta_off + nl.hdr;
    memcpy(mem + nl.eh, cie.p, cie.len);
    memset(mem + nl.sym, 0, SYM); /* the null symbol */
    mem[nl.str] = 0;
    uint64_t pos = cie.len, spos = 1;
    size_t j = 0;
    int sorted = 1;
    for (size_t i = 0; i < im->n; i++) {
        if (!keep[i]) continue;
        img_fn f = im->fns[i];
        const uint64_t pc_v = fn_vaddr(im, f.start);
        put_fde_at(mem + nl.eh + pos, pos, eh_v, pc_v, f.size, mem + im->l.eh + f.fde, NULL, 0,
                   f.fde_len);
        const char *name = (const char *)mem + im->l.str + f.name;
        size_t k = strlen(name) + 1;
        memcpy(mem + nl.str + spos, name, k);
        Elf64_Sym s = {.st_name = (uint32_t)spos,
                       .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
                       .st_other = STV_DEFAULT,
                       .st_shndx = S_TEXT,
                       .st_value = pc_v,
                       .st_size = f.size};
        memcpy(mem + nl.sym + SYM * (j + 1), &s, sizeof s);
        tbl[j] = (tbl_ent){pc_v, eh_v + pos};
        if (j && tbl[j].start < tbl[j - 1].start) sorted = 0;
        f.fde = (uint32_t)pos;
        f.name = (uint32_t)spos;
        im->fns[j++] = f; /* j <= i: in place */
        pos += f.fde_len;
        spos += k;
    }
    if (!sorted) qsort(tbl, j, sizeof *tbl, tbl_cmp);
    uint8_t *hp = mem + nl.hdr;
    hp[0] = 1;
    hp[1] = DW_EH_PE_pcrel | DW_EH_PE_sdata4;   /* eh_frame_ptr */
    hp[2] = DW_EH_PE_udata4;                    /* fde_count */
    hp[3] = DW_EH_PE_datarel | DW_EH_PE_sdata4; /* table */
    wr32(hp + 4, rel32(eh_v, hdr_v + 4));
    wr32(hp + 8, (uint32_t)j);
    for (size_t i = 0; i < j; i++) {
        wr32(hp + 12 + 8 * i, rel32(tbl[i].start, hdr_v));
        wr32(hp + 16 + 8 * i, rel32(tbl[i].fde, hdr_v));
    }

    /* Switch to it, then give the old one back. */
    const img_layout old = im->l;
    const int had = im->written;
    if (j != im->n) { /* kernels were dropped: a new version */
        hash_u64(&im->h, 0x636f6d70616374ull);
        hash_u64(&im->h, j);
        hash_final(&im->h, im->build_id);
        im->versions++;
    }
    im->n = j;
    im->l = nl;
    im->eh_len = pos;
    im->str_len = spos;
    im->written = 1;
    im->rewrites++;
    write_header(im);
    if (had && old.at > nl.at) m->discard(ctx, nl.end, 0, 1);
    else if (had) m->discard(ctx, old.at, old.end - old.at, 0);
out:
    fj_free(keep);
    fj_free(tbl);
    fj_free(cie.p);
    return st;
}

/* ---- Adding kernels, compacting ---------------------------------------------- */

fj_status uw_image_layout(uw_image *im, void *ctx) {
    return im->written ? FJ_OK : rewrite(im, NULL, 0, 0, ctx);
}

fj_status uw_image_add(uw_image *im, const uw_func *f, const uint8_t *code, const void *tag,
                       void *ctx) {
    fj_status st = uw_check_func(f);
    if (st != FJ_OK) return st;
    const uw_image_map *m = &im->m;
    if (f->start < m->lo || f->start + f->size > m->lo + m->code_span)
        return fj_fail(FJ_ERR_INVALID_ARG, "arena image: %s outside the arena", f->name);
    if (im->n == im->cap) {
        size_t cap = im->cap ? im->cap * 2 : 32;
        img_fn *v = fj_realloc(im->fns, cap * sizeof *v);
        if (!v) return fj_fail(FJ_ERR_NO_MEMORY, "arena image: out of memory");
        im->fns = v;
        im->cap = cap;
    }
    uint8_t *prog, pstack[256];
    size_t prog_len;
    st = cfa_program(f, pstack, sizeof pstack, &prog, &prog_len);
    if (st != FJ_OK) return st;
    const uint32_t fde_len = (uint32_t)up(17 + prog_len, 8);
    const size_t name_len = strlen(f->name) + 1;
    const img_layout *l = &im->l;
    if (!im->written || im->n + 1 > l->ncap || im->eh_len + fde_len > l->eh_cap ||
        im->str_len + name_len > l->str_cap) {
        st = rewrite(im, NULL, fde_len, name_len, ctx);
        if (st != FJ_OK) {
            prog_free(prog, pstack);
            return st;
        }
    }
    /* Past what the header page says: invisible until it says more. */
    uint8_t *mem = m->meta;
    const uint64_t hdr_v = m->meta_off + l->hdr, eh_v = m->meta_off + l->eh;
    const uint64_t pc_v = fn_vaddr(im, f->start), pos = im->eh_len;
    put_fde_at(mem + l->eh + pos, pos, eh_v, pc_v, (uint32_t)f->size, NULL, prog, prog_len,
               fde_len);
    memcpy(mem + l->str + im->str_len, f->name, name_len);
    Elf64_Sym s = {.st_name = (uint32_t)im->str_len,
                   .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
                   .st_other = STV_DEFAULT,
                   .st_shndx = S_TEXT,
                   .st_value = pc_v,
                   .st_size = f->size};
    memcpy(mem + l->sym + SYM * (im->n + 1), &s, sizeof s);
    /* The search table: after the last entry that starts lower (the end,
     * unless kernels were described out of address order), then the count. */
    uint8_t *hp = mem + l->hdr;
    const int32_t rs = (int32_t)rel32(pc_v, hdr_v);
    size_t at = im->n;
    while (at > 0 && rd32s(hp + 12 + 8 * (at - 1)) > rs) at--;
    memmove(hp + 12 + 8 * (at + 1), hp + 12 + 8 * at, 8 * (im->n - at));
    wr32(hp + 12 + 8 * at, (uint32_t)rs);
    wr32(hp + 16 + 8 * at, rel32(eh_v + pos, hdr_v));
    wr32(hp + 8, (uint32_t)(im->n + 1));

    im->fns[im->n++] = (img_fn){.start = f->start, .tag = tag, .size = (uint32_t)f->size,
                                .fde = (uint32_t)pos, .fde_len = fde_len,
                                .name = (uint32_t)im->str_len};
    im->eh_len += fde_len;
    im->str_len += name_len;
    hash_u64(&im->h, pc_v);
    hash_u64(&im->h, f->size);
    hash_u64(&im->h, hash_bytes(f->name, name_len, 1));
    hash_u64(&im->h, hash_bytes(prog, prog_len, 2));
    hash_u64(&im->h, code ? hash_bytes(code, f->size, 3) : 0);
    hash_final(&im->h, im->build_id);
    im->versions++;
    prog_free(prog, pstack);
    write_sizes(im); /* last: the new sizes and build-id */
    return FJ_OK;
}

fj_status uw_image_compact(uw_image *im, int (*live)(const void *tag), void *ctx) {
    if (!im->written) return FJ_OK;
    return rewrite(im, live, 0, 0, ctx);
}

void uw_image_get_stats(const uw_image *im, uw_image_stats *st) {
    memset(st, 0, sizeof *st);
    if (!im) return;
    st->kernels = im->n;
    st->versions = im->versions;
    st->rewrites = im->rewrites;
    memcpy(st->build_id, im->build_id, BUILD_ID_LEN);
    if (!im->written) return;
    st->meta_off = im->m.meta_off + im->l.at;
    st->meta_bytes = 12 + 8 * im->n + im->eh_len + SYM * (im->n + 1) + im->str_len;
    st->meta_reserved = im->l.end - im->l.at;
}

/* ---- jitdump unwind data ------------------------------------------------------
 * perf inject --jit writes one ELF per kernel: the code at some offset T (a
 * multiple of 8), .eh_frame at T + code_size rounded up to 8, .eh_frame_hdr
 * right after .eh_frame. The record carries [.eh_frame][.eh_frame_hdr];
 * relative encodings make T irrelevant, so we lay them out with T = 0. */
fj_status uw_jit_unwind_build(const uw_func *f, uint8_t **out, size_t *len, size_t *hdr_len) {
    *out = NULL;
    *len = *hdr_len = 0;
    uint8_t *prog = NULL, pstack[256];
    size_t prog_len;
    fj_status st = uw_check_func(f);
    if (st == FJ_OK) st = cfa_program(f, pstack, sizeof pstack, &prog, &prog_len);
    if (st != FJ_OK) return st;
    uw_buf b = {0}, hdr = {0};
    const uint64_t eh_vaddr = up(f->size, 8);
    size_t cie = put_cie(&b);
    uint64_t start = 0, fde = eh_vaddr + put_fde(&b, cie, eh_vaddr, 0, (uint32_t)f->size, prog,
                                                 prog_len);
    uw_put_u32(&b, 0);
    prog_free(prog, pstack);
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
