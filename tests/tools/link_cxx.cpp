// link_cxx.cpp: a C++ program built with `c++ link_cxx.cpp $(pkg-config
// --cflags --libs framejit)`. Checks that _Unwind_* still come from
// libgcc_s, and that exceptions work in plain C++ and through a JIT frame.
#include <framejit.h>

#include <cstdio>
#include <stdexcept>

#include "link_check.h"

extern "C" __attribute__((noinline)) void link_cxx_throw(long code) {
    if (code) throw std::runtime_error("through the kernel");
}

__attribute__((noinline)) static void plain_throw() { throw std::runtime_error("plain"); }

int main() {
    int bad = 0;
    try {
        plain_throw();
        std::printf("FAIL: plain C++ exception not thrown\n");
        bad = 1;
    } catch (const std::exception &e) {
        std::printf("ok: caught %s\n", e.what());
    }

    fj_runtime *rt = nullptr;
    if (fj_runtime_create(nullptr, &rt) != FJ_OK) {
        std::printf("FAIL: fj_runtime_create: %s\n", fj_last_error());
        return 1;
    }
    fj_builder *b = nullptr;
    if (fj_builder_create(rt, "link_cxx_thrower", 1, &b) != FJ_OK) {
        std::printf("FAIL: fj_builder_create: %s\n", fj_last_error());
        return 1;
    }
    fj_opnd args[1] = {fj_r64(fj_arg(b, 0))};
    fj_call(b, reinterpret_cast<const void *>(&link_cxx_throw), args, 1, fj_reg{0});
    fj_return(b, fj_none());
    fj_kernel *k = nullptr;
    if (fj_builder_finish(b, &k) != FJ_OK) {
        std::printf("FAIL: fj_builder_finish: %s\n", fj_last_error());
        return 1;
    }
    auto fn = reinterpret_cast<void (*)(long)>(fj_kernel_entry(k));
    try {
        fn(1);
        std::printf("FAIL: exception not thrown through the kernel\n");
        bad = 1;
    } catch (const std::exception &e) {
        std::printf("ok: caught \"%s\" through %s\n", e.what(), fj_kernel_name(k));
    }

    bad |= expect_libgcc("_Unwind_RaiseException");
    bad |= expect_libgcc("_Unwind_Backtrace");
    bad |= expect_no_libunwind();

    fj_kernel_release(k);
    fj_runtime_destroy(rt);
    std::printf("%s\n", bad ? "link_cxx: FAIL" : "link_cxx: ok");
    return bad;
}
