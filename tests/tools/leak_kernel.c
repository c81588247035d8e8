/* leak_kernel.c: a leak made in a C callback that a builder kernel calls:
 * main -> outer -> kernel "leak_kernel_k" -> make_leak -> malloc, for
 * tool_lsan.sh (built with -fsanitize=address). main destroys the runtime
 * before LeakSanitizer's report is made at exit. */
#include <framejit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

__attribute__((noinline)) static long make_leak(long n) {
    char *p = malloc((size_t)n);
    if (p) memset(p, 1, (size_t)n);
    sink = p;
    sink = NULL; /* the only pointer is gone: a leak */
    return n;
}

typedef long (*leak_fn)(long);

__attribute__((noinline)) static long outer(leak_fn k) {
    long r = k(4242);
    __asm__ volatile("" ::: "memory"); /* no tail call */
    return r;
}

int main(void) {
    fj_runtime *rt;
    if (fj_runtime_create(NULL, &rt) != FJ_OK) {
        fprintf(stderr, "leak_kernel: %s\n", fj_last_error());
        return 1;
    }
    /* long k(long n) { return make_leak(n); } */
    fj_builder *b;
    fj_kernel *k;
    if (fj_builder_create(rt, "leak_kernel_k", 1, &b) != FJ_OK) return 1;
    fj_reg n = fj_arg(b, 0), r = fj_gpr(b);
    fj_opnd args[1] = {fj_r64(n)};
    fj_call(b, (const void *)make_leak, args, 1, r);
    fj_return(b, fj_r64(r));
    if (fj_builder_finish(b, &k) != FJ_OK) {
        fprintf(stderr, "leak_kernel: %s\n", fj_last_error());
        return 1;
    }
    long got = outer((leak_fn)fj_kernel_entry(k));
    printf("leak_kernel: leaked %ld bytes from kernel %p\n", got, fj_kernel_entry(k));
    fj_kernel_release(k);
    fj_runtime_destroy(rt);
    return got == 4242 ? 0 : 1;
}
