/* link_c.c: a plain C program built with `cc link_c.c $(pkg-config --cflags
 * --libs framejit)`. Checks that _Unwind_RaiseException and
 * _Unwind_Backtrace still come from libgcc_s after framejit is loaded and
 * has registered a kernel, that libunwind did not join the global scope,
 * and that _Unwind_Backtrace walks from a callback, through a JIT kernel,
 * to main. */
#define _GNU_SOURCE /* dladdr, Dl_info */
#include <framejit.h>

#include <stdio.h>
#include <unwind.h>

#include "link_check.h"

struct walk {
    int frames, jit, main;
    void *main_lo, *main_hi;
};

static _Unwind_Reason_Code on_frame(struct _Unwind_Context *ctx, void *arg) {
    struct walk *w = arg;
    int before = 0;
    void *pc = (void *)_Unwind_GetIPInfo(ctx, &before);
    w->frames++;
    if (fj_symbolize((char *)pc - 1, NULL)) w->jit++;
    Dl_info info;
    if (dladdr((char *)pc - 1, &info) && info.dli_sname && strcmp(info.dli_sname, "main") == 0)
        w->main++;
    return w->frames < 64 ? _URC_NO_REASON : _URC_END_OF_STACK;
}

static struct walk walk;

/* Called by the JIT kernel. */
static long callback(long x) {
    _Unwind_Backtrace(on_frame, &walk);
    return x + 1;
}

int main(void) {
    int bad = 0;
    fj_runtime *rt;
    if (fj_runtime_create(NULL, &rt) != FJ_OK) {
        printf("FAIL: fj_runtime_create: %s\n", fj_last_error());
        return 1;
    }
    /* long k(long x) { return callback(x); } */
    fj_builder *b;
    fj_kernel *k;
    if (fj_builder_create(rt, "link_c_callback", 1, &b) != FJ_OK) {
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
    long v = ((long (*)(long))fj_kernel_entry(k))(41);
    printf("kernel returned %ld; _Unwind_Backtrace: %d frames, %d in JIT code, main %s\n", v,
           walk.frames, walk.jit, walk.main ? "found" : "NOT found");
    bad |= v != 42 || !walk.jit || !walk.main;

    bad |= expect_libgcc("_Unwind_RaiseException");
    bad |= expect_libgcc("_Unwind_Backtrace");
    bad |= expect_no_libunwind();

    fj_kernel_release(k);
    fj_runtime_destroy(rt);
    printf("%s\n", bad ? "link_c: FAIL" : "link_c: ok");
    return bad;
}
