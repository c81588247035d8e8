/* link_check.h: shared by the link_* programs of tool_link.sh.
 *
 * expect_libgcc(sym): dlsym(RTLD_DEFAULT, sym) must resolve, and dladdr
 * must place it in libgcc_s: linking framejit must not hand the program's
 * _Unwind_* calls to another unwinder (libunwind exports _Unwind_* too). */
#ifndef LINK_CHECK_H
#define LINK_CHECK_H

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static inline int expect_libgcc(const char *sym) {
    void *p = dlsym(RTLD_DEFAULT, sym);
    Dl_info info;
    if (!p) {
        printf("FAIL: %s is not in the global scope\n", sym);
        return 1;
    }
    if (!dladdr(p, &info) || !info.dli_fname) {
        printf("FAIL: dladdr(%s = %p) found no object\n", sym, p);
        return 1;
    }
    if (!strstr(info.dli_fname, "libgcc_s")) {
        printf("FAIL: %s comes from %s, not libgcc_s\n", sym, info.dli_fname);
        return 1;
    }
    printf("ok: %s from %s\n", sym, info.dli_fname);
    return 0;
}

/* Linking framejit must not put libunwind in the program's global scope. */
static inline int expect_no_libunwind(void) {
    if (dlsym(RTLD_DEFAULT, "_U_dyn_register") || dlsym(RTLD_DEFAULT, "unw_backtrace")) {
        printf("FAIL: libunwind is in the global scope of a program that does not link it\n");
        return 1;
    }
    printf("ok: libunwind is not in the global scope\n");
    return 0;
}

#endif
