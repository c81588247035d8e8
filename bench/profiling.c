/* profiling.c (bench): what profiling support costs per kernel generated:
 * fj_builder_finish of a small kernel with code in memfd (no ELF image),
 * in a /dev/shm file kept a valid ELF image (the default), and with the
 * opt-in perf map and jitdump on top; plus the image's metadata bytes per
 * kernel. Executions cost nothing extra: the image is written only when a
 * kernel is generated. */
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <framejit/builder.h>

#include "bench.h"

enum { KERNELS = 200 };

static fj_kernel *small_kernel(fj_runtime *rt, int i) {
    char name[48];
    snprintf(name, sizeof name, "bench_profiling_k%d", i);
    fj_builder *b;
    if (fj_builder_create(rt, name, 0, &b) != FJ_OK) return NULL;
    fj_reg r = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(r), fj_imm(i));
    fj_return(b, fj_r64(r));
    fj_kernel *k = NULL;
    return fj_builder_finish(b, &k) == FJ_OK ? k : NULL;
}

/* Bytes of metadata (every section but the code) in the arena file
 * holding k, or 0 when it is not a /dev/shm ELF image. */
static size_t meta_bytes(const fj_kernel *k) {
    uintptr_t pc = (uintptr_t)fj_kernel_entry(k);
    FILE *m = fopen("/proc/self/maps", "r");
    char line[1024], path[768] = {0};
    while (m && fgets(line, sizeof line, m)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %767[^\n]", &lo, &hi, path) == 3 && pc >= lo &&
            pc < hi)
            break;
        path[0] = 0;
    }
    if (m) fclose(m);
    if (strncmp(path, "/dev/shm/", 9) != 0) return 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    Elf64_Ehdr eh;
    Elf64_Shdr sh[16];
    size_t r = 0;
    if (pread(fd, &eh, sizeof eh, 0) == sizeof eh && eh.e_shnum <= 16 &&
        pread(fd, sh, eh.e_shnum * sizeof sh[0], (off_t)eh.e_shoff) ==
            (ssize_t)(eh.e_shnum * sizeof sh[0]))
        for (int i = 0; i < eh.e_shnum; i++)
            if (!(sh[i].sh_flags & SHF_EXECINSTR)) r += sh[i].sh_size;
    close(fd);
    return r;
}

/* Median microseconds per fj_builder_finish; meta1, metan: metadata with
 * 1 and with KERNELS kernels. */
static double run(const bench_ctx *c, size_t *meta1, size_t *metan) {
    double per[32];
    *meta1 = *metan = 0;
    int reps = c->reps < 32 ? c->reps : 32;
    for (int rep = 0; rep < reps; rep++) {
        fj_options o;
        fj_options_init(&o);
        o.threads = 1;
        fj_runtime *rt;
        if (fj_runtime_create(&o, &rt) != FJ_OK) return -1;
        fj_kernel *ks[KERNELS];
        double t[KERNELS];
        int n = c->quick ? KERNELS / 4 : KERNELS;
        for (int i = 0; i < n; i++) {
            double t0 = bench_now_ns();
            ks[i] = small_kernel(rt, i);
            t[i] = (bench_now_ns() - t0) / 1e3;
            if (!ks[i]) {
                fprintf(stderr, "bench profiling: %s\n", fj_last_error());
                n = i;
                break;
            }
            if (rep == 0 && i == 0) *meta1 = meta_bytes(ks[0]);
        }
        if (rep == 0 && n > 1) *metan = meta_bytes(ks[n - 1]);
        if (rep == 0 && n > 1 && *metan) *metan = (*metan - *meta1) / (size_t)(n - 1);
        per[rep] = bench_median(t, n);
        for (int i = 0; i < n; i++) fj_kernel_release(ks[i]);
        fj_runtime_destroy(rt);
    }
    return bench_median(per, reps);
}

void bench_profiling(const bench_ctx *c) {
    char jd[] = "/tmp/fj-bench-jitdump.XXXXXX";
    if (!mkdtemp(jd)) {
        perror("bench profiling: mkdtemp");
        return;
    }
    printf("# profiling: isa %s; median us per fj_builder_finish of a small kernel (%d kernels "
           "per runtime, median of %d runtimes); ratio = memfd time / this time\n", bench_isa(),
           c->quick ? KERNELS / 4 : KERNELS, c->reps);
    struct {
        const char *name, *code_file, *perfmap, *jitdump;
    } cfg[] = {
        {"memfd, no image", "0", NULL, NULL},
        {"file + ELF image", NULL, NULL, NULL},
        {"+ FRAMEJIT_PERFMAP=1", NULL, "1", NULL},
        {"+ FRAMEJIT_JITDUMP=1", NULL, NULL, "1"},
    };
    double base = 0;
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        if (cfg[i].code_file) setenv("FRAMEJIT_CODE_FILE", cfg[i].code_file, 1);
        else unsetenv("FRAMEJIT_CODE_FILE");
        if (cfg[i].perfmap) setenv("FRAMEJIT_PERFMAP", "1", 1);
        else unsetenv("FRAMEJIT_PERFMAP");
        if (cfg[i].jitdump) {
            setenv("FRAMEJIT_JITDUMP", "1", 1);
            setenv("JITDUMPDIR", jd, 1);
        } else {
            unsetenv("FRAMEJIT_JITDUMP");
        }
        size_t m1, mk;
        double us = run(c, &m1, &mk);
        if (i == 0) base = us;
        bench_row("profiling", "finish small kernel", cfg[i].name, us, "us",
                  i && us > 0 ? base / us : 0);
        if (i == 1) {
            bench_row("profiling", "image metadata, 1 kernel", "file + ELF image", (double)m1,
                      "bytes", 0);
            bench_row("profiling", "image metadata per kernel", "file + ELF image", (double)mk,
                      "bytes", 0);
        }
    }
    unsetenv("FRAMEJIT_PERFMAP");
    unsetenv("FRAMEJIT_JITDUMP");
    unsetenv("JITDUMPDIR");
    char map[64];
    snprintf(map, sizeof map, "/tmp/perf-%d.map", (int)getpid());
    unlink(map);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", jd);
    if (system(cmd) != 0) fprintf(stderr, "bench profiling: could not remove %s\n", jd);
}
