/* link_unw.c: a program that links libunwind itself (-lunwind) and calls
 * unw_backtrace from a callback that a JIT kernel calls. framejit registers
 * kernels with the libunwind the program already has loaded (the same
 * object it dlopens), so the trace holds the kernel (fj_symbolize names it)
 * and goes on to main. Linked -rdynamic so dladdr can name main. */
#define _GNU_SOURCE /* dladdr, Dl_info */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <framejit.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void *pcs[64];
static int npcs;

static long callback(long x) {
    npcs = unw_backtrace(pcs, 64);
    return x + 1;
}

int main(void) {
    fj_runtime *rt;
    if (fj_runtime_create(NULL, &rt) != FJ_OK) {
        printf("FAIL: fj_runtime_create: %s\n", fj_last_error());
        return 1;
    }
    fj_builder *b;
    fj_kernel *k;
    if (fj_builder_create(rt, "link_unw_callback", 1, &b) != FJ_OK) {
        printf("FAIL: fj_builder_create: %s\n", fj_last_error());
        return 1;
    }
    fj_reg x = fj_arg(b, 0), r = fj_gpr(b);
    fj_opnd args[1] = {fj_r64(x)};
    fj_call(b, (const void *)callback, args, 1, r);
    fj_return(b, fj_r64(r));
    if (fj_builder_finish(b, &k) != FJ_OK) {
        printf("FAIL: fj_builder_finish: %s\n", fj_last_error());
        return 1;
    }
    long v = ((long (*)(long))fj_kernel_entry(k))(1);

    int jit = -1, main_at = -1;
    for (int i = 0; i < npcs; i++) {
        uintptr_t off;
        Dl_info info;
        const char *name = fj_symbolize(pcs[i], &off);
        if (!name && dladdr(pcs[i], &info)) name = info.dli_sname;
        printf("  #%d %p %s\n", i, pcs[i], name ? name : "??");
        if (jit < 0 && fj_symbolize(pcs[i], NULL) &&
            strcmp(fj_symbolize(pcs[i], NULL), fj_kernel_name(k)) == 0)
            jit = i;
        if (main_at < 0 && name && strcmp(name, "main") == 0) main_at = i;
    }
    int bad = v != 2 || jit < 0 || main_at < jit;
    printf("unw_backtrace: %d frames, kernel %s at #%d, main at #%d\n", npcs, fj_kernel_name(k),
           jit, main_at);
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
    printf("%s\n", bad ? "link_unw: FAIL" : "link_unw: ok");
    return bad;
}
