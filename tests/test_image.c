/* test_image.c: Check suite for the self-describing arena files: after
 * kernels are placed through the public API, the /dev/shm file is a valid
 * ELF image (checked by our own parsing and by readelf) whose symbols and
 * FDEs match the live kernels, whose build-id changes with its content,
 * and which goes away with the runtime. Also the opt-in perf map, and
 * image-write failures that must not affect kernels. */
#include <check.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "framejit.h"
#include "framejit/builder.h"
#include "runtime/fj_base.h"

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
 * also holds `others` kernels made elsewhere. */
static void check_image(const char *path, uintptr_t bias, fj_kernel *const *ks, int n,
                        int others) {
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
        uintptr_t a = (uintptr_t)fj_kernel_entry(ks[i]);
        ck_assert_uint_ge(a - bias, code->p_offset);
        ck_assert_uint_le(a - bias + fj_kernel_code_size(ks[i]), code->p_offset + code->p_filesz);
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
            if (strcmp(str + s[j].st_name, fj_kernel_name(ks[i]))) continue;
            ck_assert_uint_eq(ELF64_ST_TYPE(s[j].st_info), STT_FUNC);
            ck_assert_uint_eq(s[j].st_value + bias, (uintptr_t)fj_kernel_entry(ks[i]));
            ck_assert_uint_eq(s[j].st_size, fj_kernel_code_size(ks[i]));
            ck_assert_ptr_eq(&e.sh[s[j].st_shndx], text);
            found++;
        }
        ck_assert_msg(found == 1, "%s: %d symbols", fj_kernel_name(ks[i]), found);
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
            if ((uintptr_t)pc + bias == (uintptr_t)fj_kernel_entry(ks[k]) &&
                range == fj_kernel_code_size(ks[k]))
                matched++;
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

START_TEST(image_matches_kernels) {
    fj_runtime *rt = make_rt();
    enum { N = 6 };
    fj_kernel *ks[N + 1];
    char path[512] = {0}, first[512];
    uintptr_t bias = 0;
    uint8_t ids[N][20];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "img_test_k%d", i);
        ks[i] = make_kernel(rt, name, 100 + i);
        ck_assert(kernel_file(ks[i], path, sizeof path, &bias));
        if (i == 0) snprintf(first, sizeof first, "%s", path);
        ck_assert_str_eq(path, first);
        ck_assert_msg(!strncmp(path, "/dev/shm/framejit-", 18), "code not in /dev/shm: %s", path);
        check_image(path, bias, ks, i + 1, 0);
        elf_file e;
        elf_load(path, &e);
        build_id(&e, ids[i]);
        free(e.p);
        for (int j = 0; j < i; j++)
            ck_assert_msg(memcmp(ids[i], ids[j], 20) != 0, "build-id did not change at %d", i);
    }
    /* A built-in primitive joins the same image. */
    float x[40];
    for (int i = 0; i < 40; i++) x[i] = (float)(i - 20);
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, x, x, 40), FJ_OK);
    ck_assert(x[0] == 0.0f && x[39] == 19.0f);

    /* readelf agrees: no complaints, every symbol, one FDE per kernel. */
    char *out = run_readelf("-a -W", path);
    if (out) {
        ck_assert_msg(strstr(out, "exit=0") && !strstr(out, "Error") && !strstr(out, "Warning"),
                      "readelf -a: %s", out);
        for (int i = 0; i < N; i++) ck_assert(strstr(out, fj_kernel_name(ks[i])) != NULL);
        ck_assert(strstr(out, "fj_eltwise_relu_f32_") != NULL);
        ck_assert(strstr(out, "NT_GNU_BUILD_ID") != NULL);
        ck_assert(strstr(out, "GNU_EH_FRAME") != NULL);
        free(out);
        out = run_readelf("--debug-dump=frames", path);
        ck_assert_msg(strstr(out, "exit=0") && !strstr(out, "Error") && !strstr(out, "Warning"),
                      "readelf -wf: %s", out);
        ck_assert_int_eq(count_of(out, " FDE "), N + 1);
        ck_assert_int_eq(count_of(out, "DW_CFA_def_cfa_register: r6 (rbp)"), N + 1);
        free(out);
    } else {
        fprintf(stderr, "test_image: readelf is not installed: skipped its checks\n");
    }

    /* A released kernel leaves the image at the arena's next update. */
    fj_kernel_release(ks[0]);
    ks[N] = make_kernel(rt, "img_test_after", 7);
    /* every live builder kernel, plus the eltwise kernel */
    elf_file e;
    elf_load(path, &e);
    const Elf64_Shdr *sym = section(&e, ".symtab");
    const Elf64_Sym *s = (const Elf64_Sym *)(e.p + sym->sh_offset);
    const char *str = (const char *)e.p + e.sh[sym->sh_link].sh_offset;
    int k0 = 0, after = 0;
    for (size_t j = 1; j < sym->sh_size / sizeof *s; j++) {
        k0 += !strcmp(str + s[j].st_name, "img_test_k0");
        after += !strcmp(str + s[j].st_name, "img_test_after");
    }
    ck_assert_int_eq(k0, 0);
    ck_assert_int_eq(after, 1);
    ck_assert_uint_eq(sym->sh_size / sizeof *s, (size_t)N + 2); /* null + 5 + relu + after */
    free(e.p);
    check_image(path, bias, ks + 1, N, 1);

    for (int i = 1; i <= N; i++) fj_kernel_release(ks[i]);
    fj_runtime_destroy(rt);
    ck_assert_msg(access(path, F_OK) != 0, "%s still exists after fj_runtime_destroy", path);
}
END_TEST

/* A failing image write is logged, never the kernel's problem; the next
 * kernel writes a complete image again. */
START_TEST(image_write_failure) {
    fj_runtime *rt = make_rt();
    fj_kernel *a = make_kernel(rt, "img_fault_a", 1);
    char path[512];
    uintptr_t bias;
    ck_assert(kernel_file(a, path, sizeof path, &bias));
    for (long skip = 0; skip < 3; skip++) {
        fj_test_fault_inject(FJ_FAULT_FILE, skip);
        char name[32];
        snprintf(name, sizeof name, "img_fault_b%ld", skip);
        fj_kernel *b = make_kernel(rt, name, 2); /* asserts finish and run */
        fj_test_fault_inject(FJ_FAULT_FILE, -1);
        fj_kernel_release(b);
    }
    fj_kernel *c = make_kernel(rt, "img_fault_c", 3);
    fj_kernel *ks[2] = {a, c};
    check_image(path, bias, ks, 2, 0);
    fj_kernel_release(a);
    fj_kernel_release(c);
    fj_runtime_destroy(rt);
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
    tcase_add_test(t, image_write_failure);
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
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
