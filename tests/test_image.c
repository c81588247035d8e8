/* test_image.c: Check suite for the self-describing arena files: after
 * kernels are placed through the public API, the /dev/shm file is a valid
 * ELF image (checked by our own parsing and by readelf) whose symbols and
 * FDEs match the kernels described, whose build-id changes with every
 * version, which keeps removed kernels until a compaction drops them, and
 * which goes away with the runtime; the process maps it as a loader would
 * (header, code, metadata), so that an unwinder taking the lowest mapping
 * as the load address reads the right .eh_frame_hdr. Also the image writer
 * on its own (out-of-order kernels, many rewrites), the opt-in perf map,
 * and image-write failures that must not affect kernels. */
#include <check.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "framejit.h"
#include "fjtest.h"
#include "framejit/builder.h"
#include "base/base.h"
#include "runtime/publish.h"
#include "unwindinfo/uw.h"

/* ---- helpers ---------------------------------------------------------------- */

static fj_runtime *make_rt(void) {
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    fj_runtime *rt = NULL;
    ck_assert_msg(fj_runtime_create(&o, &rt) == FJ_OK, "%s", fj_last_error());
    return rt;
}

/* A kernel returning v. */
static fj_kernel *make_kernel(fj_runtime *rt, const char *name, int v) {
    fj_builder *b;
    ck_assert_msg(fj_builder_create(rt, name, 0, &b) == FJ_OK, "%s", fj_last_error());
    fj_reg r = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(r), fj_imm(v));
    fj_return(b, fj_r64(r));
    fj_kernel *k = NULL;
    ck_assert_msg(fj_builder_finish(b, &k) == FJ_OK, "%s: %s", name, fj_last_error());
    ck_assert_int_eq(((long (*)(void))fj_kernel_entry(k))(), v);
    return k;
}

/* A kernel as the image should describe it. */
typedef struct kdesc {
    uintptr_t addr;
    size_t size;
    char name[64];
} kdesc;

static kdesc desc_of(const fj_kernel *k) {
    kdesc d = {(uintptr_t)fj_kernel_entry(k), fj_kernel_code_size(k), ""};
    snprintf(d.name, sizeof d.name, "%s", fj_kernel_name(k));
    return d;
}

/* The executable mapping of kernel k: its file and the file offset that
 * maps to address 0 (runtime address = bias + file offset). */
static int kernel_file(const fj_kernel *k, char *path, size_t n, uintptr_t *bias) {
    uintptr_t pc = (uintptr_t)fj_kernel_entry(k);
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off;
        char perms[8], p[768] = {0};
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %767[^\n]", &lo, &hi, perms, &off, p) < 4)
            continue;
        if (pc < lo || pc >= hi || perms[2] != 'x') continue;
        snprintf(path, n, "%s", p);
        *bias = lo - off;
        found = 1;
    }
    fclose(f);
    return found;
}

typedef struct elf_file {
    uint8_t *p;
    size_t len;
    const Elf64_Ehdr *eh;
    const Elf64_Shdr *sh;
    const char *shstr;
} elf_file;

static void elf_load(const char *path, elf_file *e) {
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    e->len = (size_t)st.st_size;
    e->p = malloc(e->len);
    ck_assert_ptr_nonnull(e->p);
    ck_assert_int_eq(pread(fd, e->p, e->len, 0), (ssize_t)e->len);
    close(fd);
    e->eh = (const Elf64_Ehdr *)e->p;
    ck_assert_msg(e->len >= sizeof *e->eh && !memcmp(e->eh->e_ident, ELFMAG, SELFMAG),
                  "%s is not an ELF file", path);
    ck_assert_int_eq(e->eh->e_ident[EI_CLASS], ELFCLASS64);
    ck_assert_int_eq(e->eh->e_type, ET_DYN);
    ck_assert_int_eq(e->eh->e_machine, EM_X86_64);
    ck_assert_uint_le(e->eh->e_shoff + (uint64_t)e->eh->e_shnum * sizeof(Elf64_Shdr), e->len);
    ck_assert_uint_le(e->eh->e_phoff + (uint64_t)e->eh->e_phnum * sizeof(Elf64_Phdr), 4096);
    e->sh = (const Elf64_Shdr *)(e->p + e->eh->e_shoff);
    const Elf64_Shdr *ss = &e->sh[e->eh->e_shstrndx];
    ck_assert_uint_le(ss->sh_offset + ss->sh_size, e->len);
    e->shstr = (const char *)e->p + ss->sh_offset;
    for (int i = 0; i < e->eh->e_shnum; i++)
        if (e->sh[i].sh_type != SHT_NOBITS)
            ck_assert_uint_le(e->sh[i].sh_offset + e->sh[i].sh_size, e->len);
}

static const Elf64_Shdr *section(const elf_file *e, const char *name) {
    for (int i = 0; i < e->eh->e_shnum; i++)
        if (!strcmp(e->shstr + e->sh[i].sh_name, name)) return &e->sh[i];
    return NULL;
}

static const Elf64_Phdr *phdr(const elf_file *e, uint32_t type, int nth) {
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(e->p + e->eh->e_phoff);
    for (int i = 0; i < e->eh->e_phnum; i++)
        if (ph[i].p_type == type && nth-- == 0) return &ph[i];
    return NULL;
}

static void build_id(const elf_file *e, uint8_t out[20]) {
    const Elf64_Phdr *n = phdr(e, PT_NOTE, 0);
    ck_assert_ptr_nonnull(n);
    const uint32_t *w = (const uint32_t *)(e->p + n->p_offset);
    ck_assert_uint_eq(w[0], 4);
    ck_assert_uint_eq(w[1], 20);
    ck_assert_uint_eq(w[2], NT_GNU_BUILD_ID);
    ck_assert(!memcmp(w + 3, "GNU", 4));
    memcpy(out, (const uint8_t *)(w + 4), 20);
}

static int32_t rd32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Checks the image against the kernels ks[0..n) (all in one file), which
 * also holds `others` kernels made elsewhere (or removed). */
static void check_image(const char *path, uintptr_t bias, const kdesc *ks, int n, int others) {
    elf_file e;
    elf_load(path, &e);
    /* Program headers: headers first at vaddr 0, code R+X at its own file
     * offset with vaddr == offset, the note, the eh_frame_hdr. */
    const Elf64_Phdr *l0 = phdr(&e, PT_LOAD, 0), *code = phdr(&e, PT_LOAD, 1);
    const Elf64_Phdr *ehp = phdr(&e, PT_GNU_EH_FRAME, 0);
    ck_assert_ptr_nonnull(l0);
    ck_assert_ptr_nonnull(code);
    ck_assert_ptr_nonnull(ehp);
    ck_assert_uint_eq(l0->p_vaddr, 0);
    ck_assert_uint_eq(l0->p_offset, 0);
    ck_assert_uint_eq(code->p_flags, PF_R | PF_X);
    ck_assert_uint_eq(code->p_vaddr, code->p_offset);
    ck_assert_uint_ge(code->p_offset, 4096);
    for (int i = 0; i < n; i++) {
        uintptr_t a = ks[i].addr;
        ck_assert_uint_ge(a - bias, code->p_offset);
        ck_assert_uint_le(a - bias + ks[i].size, code->p_offset + code->p_filesz);
    }
    /* The metadata is outside the code pages. */
    const Elf64_Shdr *hdr = section(&e, ".eh_frame_hdr"), *eh = section(&e, ".eh_frame");
    const Elf64_Shdr *sym = section(&e, ".symtab"), *text = section(&e, ".text");
    ck_assert_ptr_nonnull(hdr);
    ck_assert_ptr_nonnull(eh);
    ck_assert_ptr_nonnull(sym);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(section(&e, ".note.gnu.build-id"));
    ck_assert_uint_ge(hdr->sh_offset, code->p_offset + code->p_filesz);
    ck_assert_uint_ge(sym->sh_offset, code->p_offset + code->p_filesz);
    ck_assert_uint_eq(ehp->p_offset, hdr->sh_offset);

    /* One FUNC symbol per kernel, with its name, address and size. */
    const Elf64_Sym *s = (const Elf64_Sym *)(e.p + sym->sh_offset);
    const char *str = (const char *)e.p + e.sh[sym->sh_link].sh_offset;
    size_t nsym = sym->sh_size / sizeof *s;
    ck_assert_uint_eq(nsym, (size_t)(n + others) + 1);
    for (int i = 0; i < n; i++) {
        int found = 0;
        for (size_t j = 1; j < nsym; j++) {
            if (s[j].st_value + bias != ks[i].addr) continue;
            ck_assert_str_eq(str + s[j].st_name, ks[i].name);
            ck_assert_uint_eq(ELF64_ST_TYPE(s[j].st_info), STT_FUNC);
            ck_assert_uint_eq(s[j].st_size, ks[i].size);
            ck_assert_ptr_eq(&e.sh[s[j].st_shndx], text);
            found++;
        }
        ck_assert_msg(found == 1, "%s: %d symbols", ks[i].name, found);
    }

    /* .eh_frame_hdr: n sorted entries, each naming an FDE that covers
     * exactly one kernel. */
    const uint8_t *h = e.p + hdr->sh_offset;
    ck_assert_uint_eq(h[0], 1);
    ck_assert_uint_eq(h[1], 0x1b);
    ck_assert_uint_eq(h[3], 0x3b);
    ck_assert_int_eq((int64_t)hdr->sh_addr + 4 + rd32(h + 4), (int64_t)eh->sh_addr);
    uint32_t count;
    memcpy(&count, h + 8, 4);
    ck_assert_uint_eq(count, (uint32_t)(n + others));
    /* Its size, as the section and the segment give it: the table and no
     * more (an unwinder reads up to the end it is told). */
    ck_assert_uint_eq(hdr->sh_size, 12 + 8 * (uint64_t)count);
    ck_assert_uint_eq(ehp->p_filesz, hdr->sh_size);
    ck_assert_uint_eq(ehp->p_memsz, hdr->sh_size);
    /* The metadata segment loads .eh_frame_hdr through the end of .eh_frame. */
    const Elf64_Phdr *meta = phdr(&e, PT_LOAD, 2);
    ck_assert_ptr_nonnull(meta);
    ck_assert_uint_eq(meta->p_offset, hdr->sh_offset);
    ck_assert_uint_eq(meta->p_filesz, eh->sh_offset + eh->sh_size - hdr->sh_offset);
    ck_assert_uint_eq(meta->p_memsz, meta->p_filesz);
    int64_t prev = -1;
    int covered = 0;
    for (uint32_t i = 0; i < count; i++) {
        int64_t start = (int64_t)hdr->sh_addr + rd32(h + 12 + 8 * i);
        int64_t fde = (int64_t)hdr->sh_addr + rd32(h + 16 + 8 * i);
        ck_assert_int_gt(start, prev);
        prev = start;
        ck_assert_int_ge(fde, (int64_t)eh->sh_addr);
        const uint8_t *f = e.p + (fde - (int64_t)eh->sh_addr) + eh->sh_offset;
        int64_t pc = fde + 8 + rd32(f + 8); /* pcrel from the field */
        uint32_t range;
        memcpy(&range, f + 12, 4);
        ck_assert_int_eq(pc, start);
        int matched = 0;
        for (int k = 0; k < n; k++)
            if ((uintptr_t)pc + bias == ks[k].addr && range == ks[k].size) matched++;
        ck_assert_msg(matched <= 1, "FDE at %#llx matches %d kernels", (long long)pc, matched);
        covered += matched;
    }
    ck_assert_int_eq(covered, n);
    free(e.p);
}

/* Runs readelf (if installed) on path with args; returns its output, or
 * NULL when readelf is missing. */
static char *run_readelf(const char *args, const char *path) {
    if (system("command -v readelf >/dev/null 2>&1") != 0) return NULL;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "readelf %s '%s' 2>&1; echo \"exit=$?\"", args, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    size_t r;
    while ((r = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += r;
        if (len + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[len] = 0;
    pclose(p);
    return out;
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* ---- tests ------------------------------------------------------------------ */

/* readelf -a and --debug-dump=frames find nothing to complain about, and
 * count FDEs with a frame pointer. Returns 0 when readelf is missing. */
static int readelf_clean(const char *path, int fdes, const kdesc *ks, int n) {
    char *out = run_readelf("-a -W", path);
    if (!out) {
        fprintf(stderr, "test_image: readelf is not installed: skipped its checks\n");
        return 0;
    }
    ck_assert_msg(strstr(out, "exit=0") && !strstr(out, "Error") && !strstr(out, "Warning"),
                  "readelf -a: %s", out);
    for (int i = 0; i < n; i++) ck_assert(strstr(out, ks[i].name) != NULL);
    ck_assert(strstr(out, "NT_GNU_BUILD_ID") != NULL);
    ck_assert(strstr(out, "GNU_EH_FRAME") != NULL);
    free(out);
    out = run_readelf("--debug-dump=frames", path);
    ck_assert_msg(strstr(out, "exit=0") && !strstr(out, "Error") && !strstr(out, "Warning"),
                  "readelf -wf: %s", out);
    ck_assert_int_eq(count_of(out, " FDE "), fdes);
    ck_assert_int_eq(count_of(out, "DW_CFA_def_cfa_register: r6 (rbp)"), fdes);
    free(out);
    return 1;
}

static void file_build_id(const char *path, uint8_t id[20]) {
    elf_file e;
    elf_load(path, &e);
    build_id(&e, id);
    free(e.p);
}

START_TEST(image_matches_kernels) {
    fj_runtime *rt = make_rt();
    enum { N = 6 };
    fj_kernel *ks[N + 1];
    kdesc d[N + 2];
    char path[512] = {0}, first[512];
    uintptr_t bias = 0;
    uint8_t ids[N + 1][20];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "img_test_k%d", i);
        ks[i] = make_kernel(rt, name, 100 + i);
        d[i] = desc_of(ks[i]);
        ck_assert(kernel_file(ks[i], path, sizeof path, &bias));
        if (i == 0) snprintf(first, sizeof first, "%s", path);
        ck_assert_str_eq(path, first);
        ck_assert_msg(!strncmp(path, "/dev/shm/framejit-", 18), "code not in /dev/shm: %s", path);
        check_image(path, bias, d, i + 1, 0);
        file_build_id(path, ids[i]);
        for (int j = 0; j < i; j++)
            ck_assert_msg(memcmp(ids[i], ids[j], 20) != 0, "build-id did not change at %d", i);
    }
    /* A built-in primitive joins the same image. */
    float x[40];
    for (int i = 0; i < 40; i++) x[i] = (float)(i - 20);
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, x, x, 40), FJ_OK);
    ck_assert(x[0] == 0.0f && x[39] == 19.0f);

    /* readelf agrees: no complaints, every symbol, one FDE per kernel. */
    if (readelf_clean(path, N + 1, d, N)) {
        char *out = run_readelf("-s -W", path);
        ck_assert(strstr(out, "fj_eltwise_relu_f32_") != NULL);
        free(out);
    }

    /* A released kernel stays described (its addresses are never reused)
     * until a compaction; the next kernel is added all the same. */
    fj_kernel_release(ks[0]);
    ks[N] = make_kernel(rt, "img_test_after", 7);
    d[N] = desc_of(ks[N]);
    check_image(path, bias, d, N + 1, 1); /* + relu */
    file_build_id(path, ids[N]);
    ck_assert(memcmp(ids[N], ids[N - 1], 20) != 0);

    for (int i = 1; i <= N; i++) fj_kernel_release(ks[i]);
    fj_runtime_destroy(rt);
    /* Kept for tools that read it after the runtime is gone: read-only,
     * the last version of the image. */
    struct stat st;
    ck_assert_msg(stat(path, &st) == 0, "%s not kept after fj_runtime_destroy", path);
    ck_assert_int_eq(st.st_mode & 0777, 0400);
    check_image(path, bias, d, N + 1, 1);
    unlink(path);
}
END_TEST

/* A runtime lays out its first arena's image when it is created: the
 * first kernel is appended to it (no whole rewrite on the caller's first
 * call), and the image then describes it. */
START_TEST(image_laid_out_with_runtime) {
    rt_image_stats s0, s1, s2;
    rt_image_get_stats(&s0);
    fj_runtime *rt = make_rt();
    rt_image_get_stats(&s1);
    ck_assert_uint_eq(s1.rewrites - s0.rewrites, 1);
    fj_kernel *k = make_kernel(rt, "img_first_kernel", 5);
    rt_image_get_stats(&s2);
    ck_assert_uint_eq(s2.rewrites, s1.rewrites);
    ck_assert_uint_eq(s2.failures, s0.failures);
    char path[512];
    uintptr_t bias;
    kdesc d[1] = {desc_of(k)};
    ck_assert(kernel_file(k, path, sizeof path, &bias));
    check_image(path, bias, d, 1, 0);
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
}
END_TEST

/* Once half of the kernels described have been removed (and at least 32),
 * the next kernel in the arena compacts the image: only live kernels stay,
 * with a new build-id. */
START_TEST(image_compaction) {
    fj_runtime *rt = make_rt();
    enum { N = 48, KEEP = 8 };
    fj_kernel *ks[N];
    kdesc d[KEEP + 1];
    char path[512];
    uintptr_t bias;
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "img_compact_k%d", i);
        ks[i] = make_kernel(rt, name, i);
    }
    ck_assert(kernel_file(ks[0], path, sizeof path, &bias));
    for (int i = 0; i < N; i++) {
        if (i % (N / KEEP) == 0) d[i / (N / KEEP)] = desc_of(ks[i]);
        else fj_kernel_release(ks[i]);
    }
    uint8_t before[20], after[20];
    file_build_id(path, before);
    rt_image_stats s0, s1;
    rt_image_get_stats(&s0);
    fj_kernel *k = make_kernel(rt, "img_compact_new", 1);
    rt_image_get_stats(&s1);
    d[KEEP] = desc_of(k);
    ck_assert_uint_eq(s1.compactions, s0.compactions + 1);
    check_image(path, bias, d, KEEP + 1, 0);
    file_build_id(path, after);
    ck_assert(memcmp(before, after, 20) != 0);
    readelf_clean(path, KEEP + 1, d, KEEP + 1);
    for (int i = 0; i < N; i += N / KEEP) fj_kernel_release(ks[i]);
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
}
END_TEST

/* A failing image write (the file space for a larger version) is logged,
 * never the kernel's problem: the file keeps its previous version, and the
 * next kernel writes a complete image again. */
START_TEST(image_write_failure) {
    fj_runtime *rt = make_rt();
    enum { MAX = 300 };
    fj_kernel *ks[MAX];
    kdesc d[MAX];
    int n = 0, failed = -1;
    ks[n++] = make_kernel(rt, "img_fault_a", 1);
    char path[512];
    uintptr_t bias;
    ck_assert(kernel_file(ks[0], path, sizeof path, &bias));
    rt_image_stats s0, s1;
    rt_image_get_stats(&s0);
    /* The next file call fails: the first one is the image's growth. */
    fj_test_fault_inject(FJ_FAULT_FILE, 0);
    while (failed < 0 && n < MAX) {
        char name[32];
        snprintf(name, sizeof name, "img_fault_b%d", n);
        ks[n] = make_kernel(rt, name, n); /* asserts finish and run */
        rt_image_get_stats(&s1);
        if (s1.failures != s0.failures) failed = n;
        n++;
    }
    fj_test_fault_inject(FJ_FAULT_FILE, -1);
    ck_assert_msg(failed > 0, "no image write failed in %d kernels", n);
    ck_assert_uint_eq(s1.failures, s0.failures + 1);
    /* The file is the version before the failure. */
    for (int i = 0; i < failed; i++) d[i] = desc_of(ks[i]);
    check_image(path, bias, d, failed, 0);
    ks[n++] = make_kernel(rt, "img_fault_c", 3);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (i != failed) d[m++] = desc_of(ks[i]);
    check_image(path, bias, d, m, 0);
    readelf_clean(path, m, d, 0);
    for (int i = 0; i < n; i++) fj_kernel_release(ks[i]);
    fj_runtime_destroy(rt);
}
END_TEST

/* Many kernels in one arena: the image grows (rewritten into larger room
 * a few times) and stays exact. */
START_TEST(image_many_kernels) {
    fj_runtime *rt = make_rt();
    enum { N = 2500 };
    fj_kernel **ks = malloc(N * sizeof *ks);
    kdesc *d = malloc(N * sizeof *d);
    char path[512];
    uintptr_t bias;
    rt_image_stats s0, s1;
    rt_image_get_stats(&s0);
    for (int i = 0; i < N; i++) {
        char name[48];
        snprintf(name, sizeof name, "img_many_kernel_with_a_longer_name_%d", i);
        ks[i] = make_kernel(rt, name, i);
        d[i] = desc_of(ks[i]);
    }
    rt_image_get_stats(&s1);
    ck_assert(kernel_file(ks[0], path, sizeof path, &bias));
    char last[512];
    uintptr_t bias2;
    ck_assert(kernel_file(ks[N - 1], last, sizeof last, &bias2));
    ck_assert_str_eq(path, last); /* one 1 MiB arena */
    ck_assert_uint_eq(s1.failures, s0.failures);
    ck_assert_uint_ge(s1.rewrites - s0.rewrites, 3);
    ck_assert_uint_le(s1.rewrites - s0.rewrites, 20); /* doubling, not one per kernel */
    check_image(path, bias, d, N, 0);
    readelf_clean(path, N, d, 0);
    for (int i = 0; i < N; i++) fj_kernel_release(ks[i]);
    fj_runtime_destroy(rt);
    free(ks);
    free(d);
}
END_TEST

/* The process maps the arena file as a loader maps an ELF file: header
 * (offset 0) first, code, then the metadata right after the code, and the
 * writable view above them; never writable and executable. An unwinder
 * that takes the file's lowest mapping for its load address, as perf's
 * does, reads .eh_frame_hdr and the FDEs in memory where the ELF says, and
 * finds each kernel. */
START_TEST(image_views) {
    fj_runtime *rt = make_rt();
    enum { N = 40 };
    fj_kernel *ks[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "img_view_k%d", i);
        ks[i] = make_kernel(rt, name, i);
    }
    char path[512];
    uintptr_t bias;
    ck_assert(kernel_file(ks[0], path, sizeof path, &bias));
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    unsigned long low = ~0ul, low_off = 0, rx_hi = 0, rx_off = 0, meta_lo = 0, meta_off = 0;
    unsigned long rw_lo = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off;
        char perms[8], p[768] = {0};
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %767[^\n]", &lo, &hi, perms, &off, p) < 5 ||
            strcmp(p, path) != 0)
            continue;
        ck_assert_msg(!(perms[1] == 'w' && perms[2] == 'x'), "W+X: %s", line);
        if (lo < low) low = lo, low_off = off;
        /* Read-only views are private mappings (code in core dumps) unless
         * FRAMEJIT_CORE_CODE=0; the writable one is always shared. */
        if (!strncmp(perms, "r-x", 3)) rx_hi = hi, rx_off = off;
        if (!strcmp(perms, "rw-s")) rw_lo = lo;
        if (!strncmp(perms, "r--", 3) && off) meta_lo = lo, meta_off = off;
    }
    fclose(f);
    ck_assert_uint_eq(low_off, 0);
    ck_assert_uint_eq(low, bias); /* the header page, at the load address */
    ck_assert_uint_eq(meta_lo, rx_hi);
    ck_assert_uint_eq(meta_off, rx_off + (rx_hi - (rx_off + bias)));
    ck_assert_uint_gt(rw_lo, meta_lo);

    elf_file e;
    elf_load(path, &e);
    const Elf64_Shdr *hs = section(&e, ".eh_frame_hdr");
    const uint8_t *h = (const uint8_t *)(low - low_off + hs->sh_addr);
    ck_assert(!memcmp(h, e.p + hs->sh_offset, hs->sh_size));
    uint32_t count;
    memcpy(&count, h + 8, 4);
    ck_assert_uint_eq(count, N);
    for (int i = 0; i < N; i++) {
        const uint8_t *start = h + rd32(h + 12 + 8 * i), *fde = h + rd32(h + 16 + 8 * i);
        ck_assert_ptr_eq(start, fj_kernel_entry(ks[i])); /* placed in address order */
        ck_assert_ptr_eq(fde + 8 + rd32(fde + 8), start);
    }
    free(e.p);
    for (int i = 0; i < N; i++) fj_kernel_release(ks[i]);
    fj_runtime_destroy(rt);

    /* Given back with the file kept: the header, code and metadata views
     * stay mapped (what reads the mappings at exit finds the file), the
     * writable view is gone and its range stays reserved, inaccessible. */
    f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    int covered = 0, views = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (strstr(line, path)) {
            ck_assert_msg(perms[1] != 'w' && hi <= rw_lo, "writable: %s",
                          line);
            views++;
        }
        if (lo <= rw_lo && hi > rw_lo) {
            ck_assert_str_eq(perms, "---p");
            covered = 1;
        }
    }
    fclose(f);
    ck_assert_int_eq(views, 3);
    ck_assert(covered);
}
END_TEST

/* Threads generating kernels at once: every kernel is described once,
 * the search table stays sorted (kernels may be described out of address
 * order), and readelf accepts the result. */
enum { TH = 4, PER = 120 };
typedef struct th_arg {
    fj_runtime *rt;
    int id;
    fj_kernel *ks[PER];
} th_arg;

static void *th_make(void *p) {
    th_arg *a = p;
    for (int i = 0; i < PER; i++) {
        char name[32];
        snprintf(name, sizeof name, "img_thread%d_k%d", a->id, i);
        a->ks[i] = make_kernel(a->rt, name, i);
    }
    return NULL;
}

START_TEST(image_threads) {
    fj_runtime *rt = make_rt();
    static th_arg a[TH];
    pthread_t t[TH];
    for (int i = 0; i < TH; i++) {
        a[i].rt = rt;
        a[i].id = i;
        ck_assert_int_eq(pthread_create(&t[i], NULL, th_make, &a[i]), 0);
    }
    for (int i = 0; i < TH; i++) pthread_join(t[i], NULL);
    static kdesc d[TH * PER];
    char path[512];
    uintptr_t bias;
    ck_assert(kernel_file(a[0].ks[0], path, sizeof path, &bias));
    for (int i = 0; i < TH; i++)
        for (int j = 0; j < PER; j++) {
            char p2[512];
            uintptr_t b2;
            ck_assert(kernel_file(a[i].ks[j], p2, sizeof p2, &b2));
            ck_assert_str_eq(p2, path); /* one arena */
            d[i * PER + j] = desc_of(a[i].ks[j]);
        }
    check_image(path, bias, d, TH * PER, 0);
    readelf_clean(path, TH * PER, d, 0);
    for (int i = 0; i < TH; i++)
        for (int j = 0; j < PER; j++) fj_kernel_release(a[i].ks[j]);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- the image writer alone, on a file in memory ----------------------------- */

static const uw_rec unit_recs[] = {
    {.off = 1, .kind = UW_PUSH_FP},
    {.off = 4, .kind = UW_SET_FP},
    {.off = 9, .kind = UW_POP_FP},
};

static fj_status unit_back(void *ctx, uint64_t off, uint64_t n) {
    (void)ctx;
    (void)off;
    (void)n;
    return FJ_OK;
}

static void unit_discard(void *ctx, uint64_t off, uint64_t n, int truncate) {
    (void)ctx;
    (void)off;
    (void)n;
    (void)truncate;
}

static int unit_live(const void *tag) { return ((uintptr_t)tag & 1) == 0; }

/* Kernels in random address order, some dropped by a compaction: the
 * image (written out to a file) has every kernel, sorted, and readelf
 * accepts it. */
START_TEST(image_writer_out_of_order) {
    enum { PAGE = 4096, SPAN = 1 << 20, ROOM = 4 << 20, N = 700, STEP = 128 };
    const uint64_t code_off = PAGE, meta_off = PAGE + SPAN, len = meta_off + ROOM;
    uint8_t *file = calloc(1, len);
    ck_assert_ptr_nonnull(file);
    const uintptr_t lo = 0x7f0000000000ull;
    uw_image_map m = {.hdr = file, .meta = file + meta_off, .page = PAGE, .code_off = code_off,
                      .code_span = SPAN, .lo = lo, .meta_off = meta_off, .meta_room = ROOM,
                      .back = unit_back, .discard = unit_discard};
    uw_image *im;
    ck_assert_int_eq(uw_image_new(&m, &im), FJ_OK);
    int order[N];
    for (int i = 0; i < N; i++) order[i] = i;
    srand(7);
    for (int i = N - 1; i > 0; i--) { /* a few long runs out of order */
        if (rand() % 8) continue;
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    static kdesc d[N];
    int nd = 0;
    for (int i = 0; i < N; i++) {
        int k = order[i];
        char name[32];
        snprintf(name, sizeof name, "unit_k%d", k);
        uw_func f = {.name = name, .start = lo + (uintptr_t)k * STEP, .size = 10 + k % 50,
                     .recs = unit_recs, .nrecs = 3};
        ck_assert_int_eq(uw_image_add(im, &f, NULL, (const void *)(uintptr_t)k, NULL), FJ_OK);
        if (i == N / 2) ck_assert_int_eq(uw_image_compact(im, unit_live, NULL), FJ_OK);
    }
    for (int i = 0; i < N; i++) {
        int k = order[i];
        if (i <= N / 2 && !unit_live((const void *)(uintptr_t)k)) continue;
        kdesc *x = &d[nd++];
        x->addr = lo + (uintptr_t)k * STEP;
        x->size = 10 + (size_t)(k % 50);
        snprintf(x->name, sizeof x->name, "unit_k%d", k);
    }
    uw_image_stats st;
    uw_image_get_stats(im, &st);
    ck_assert_uint_eq(st.kernels, (size_t)nd);
    char path[] = "/tmp/fj-image-unit.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const uint64_t flen = st.meta_off + st.meta_reserved;
    ck_assert_int_eq(write(fd, file, flen), (ssize_t)flen);
    close(fd);
    check_image(path, lo - code_off, d, nd, 0);
    readelf_clean(path, nd, d, 0);
    unlink(path);
    uw_image_free(im);
    free(file);
}
END_TEST

/* FRAMEJIT_CODE_FILE=0: memfd or anonymous code, no file, kernels fine. */
START_TEST(no_code_file) {
    setenv("FRAMEJIT_CODE_FILE", "0", 1);
    fj_runtime *rt = make_rt();
    unsetenv("FRAMEJIT_CODE_FILE");
    fj_kernel *k = make_kernel(rt, "img_memfd_k", 5);
    char path[512];
    uintptr_t bias;
    ck_assert(kernel_file(k, path, sizeof path, &bias));
    ck_assert_msg(strncmp(path, "/dev/shm/", 9) != 0, "code in %s", path);
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
}
END_TEST

/* FRAMEJIT_PERFMAP=1: one "START SIZE name" line per kernel, hex. */
START_TEST(perf_map) {
    char map[64];
    snprintf(map, sizeof map, "/tmp/perf-%d.map", (int)getpid());
    unlink(map);
    setenv("FRAMEJIT_PERFMAP", "1", 1);
    fj_runtime *rt = make_rt();
    fj_kernel *a = make_kernel(rt, "img_map_a", 1), *b = make_kernel(rt, "img_map_b", 2);
    unsetenv("FRAMEJIT_PERFMAP");
    FILE *f = fopen(map, "r");
    ck_assert_msg(f != NULL, "%s: %s", map, strerror(errno));
    unsigned long start, size;
    char name[256];
    int seen = 0;
    while (fscanf(f, "%lx %lx %255s", &start, &size, name) == 3) {
        fj_kernel *k = !strcmp(name, "img_map_a") ? a : !strcmp(name, "img_map_b") ? b : NULL;
        if (!k) continue;
        ck_assert_uint_eq(start, (uintptr_t)fj_kernel_entry(k));
        ck_assert_uint_eq(size, fj_kernel_code_size(k));
        seen++;
    }
    fclose(f);
    ck_assert_int_eq(seen, 2);
    unlink(map);
    fj_kernel_release(a);
    fj_kernel_release(b);
    fj_runtime_destroy(rt);
}
END_TEST

/* By default neither a perf map nor a jitdump file is written. */
START_TEST(no_symbol_files_by_default) {
    char map[64];
    snprintf(map, sizeof map, "/tmp/perf-%d.map", (int)getpid());
    unlink(map);
    char dir[] = "/tmp/fj-jd.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("JITDUMPDIR", dir, 1);
    fj_runtime *rt = make_rt();
    fj_kernel *k = make_kernel(rt, "img_default_k", 9);
    ck_assert_msg(access(map, F_OK) != 0, "%s written without FRAMEJIT_PERFMAP", map);
    char sub[64];
    snprintf(sub, sizeof sub, "%s/.debug", dir);
    ck_assert_msg(access(sub, F_OK) != 0, "jitdump written without FRAMEJIT_JITDUMP");
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
    unsetenv("JITDUMPDIR");
    rmdir(dir);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("image");
    TCase *t = tcase_create("image");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, image_matches_kernels);
    tcase_add_test(t, image_laid_out_with_runtime);
    tcase_add_test(t, image_compaction);
    tcase_add_test(t, image_write_failure);
    tcase_add_test(t, image_many_kernels);
    tcase_add_test(t, image_views);
    tcase_add_test(t, image_threads);
    tcase_add_test(t, image_writer_out_of_order);
    tcase_add_test(t, no_code_file);
    tcase_add_test(t, perf_map);
    tcase_add_test(t, no_symbol_files_by_default);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    unsetenv("FRAMEJIT_CODE_FILE");
    unsetenv("FRAMEJIT_PERFMAP");
    unsetenv("FRAMEJIT_JITDUMP");
    return fjt_run_suite(suite());
}
