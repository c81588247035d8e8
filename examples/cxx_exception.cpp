// cxx_exception.cpp: a C++ exception thrown below a JIT frame and caught
// above it.
//
//     main -> run_kernel (try/catch) -> kernel "cxx_throw_through" -> throw_error
//
// The kernel is built with the builder API: it calls an extern "C" function
// that throws std::runtime_error. The C++ runtime unwinds with libgcc's
// _Unwind_RaiseException, which finds the kernel's frame only through the
// .eh_frame that framejit registered (libgcc has no frame-pointer fallback).
// With FRAMEJIT_UNWIND=none nothing is registered and the same program ends
// in std::terminate.
#include <framejit.h>

#include <cstdio>
#include <stdexcept>
#include <string>

extern "C" __attribute__((noinline)) void throw_error(long code) {
    throw std::runtime_error("error " + std::to_string(code) + " thrown through a JIT kernel");
}

using kernel_fn = long (*)(long);

// noinline, and the call is followed by code, so the frame with the
// handler is really on the stack between main and the kernel.
__attribute__((noinline)) static int run_kernel(kernel_fn fn, long code) {
    try {
        long r = fn(code);
        std::printf("kernel returned %ld: no exception (unexpected)\n", r);
        return 1;
    } catch (const std::exception &e) {
        std::printf("caught: %s\n", e.what());
        return 0;
    }
}

static fj_kernel *build_kernel(fj_runtime *rt) {
    fj_builder *b = nullptr;
    if (fj_builder_create(rt, "cxx_throw_through", 1, &b) != FJ_OK) return nullptr;
    // long cxx_throw_through(long code) { throw_error(code); return code + 1; }
    fj_reg code = fj_arg(b, 0);
    fj_opnd args[1] = {fj_r64(code)};
    fj_call(b, reinterpret_cast<const void *>(&throw_error), args, 1, fj_reg{0});
    fj_emit2(b, FJ_ADD, fj_r64(code), fj_imm(1));
    fj_return(b, fj_r64(code));
    fj_kernel *k = nullptr;
    if (fj_builder_finish(b, &k) != FJ_OK) return nullptr;
    return k;
}

int main() {
    fj_options opts;
    fj_options_init(&opts);
    opts.threads = 1;
    fj_runtime *rt = nullptr;
    fj_status s = fj_runtime_create(&opts, &rt);
    if (s != FJ_OK) {
        std::fprintf(stderr, "cxx_exception: fj_runtime_create: %s: %s\n", fj_status_str(s),
                     fj_last_error());
        return 1;
    }
    fj_kernel *k = build_kernel(rt);
    if (!k) {
        std::fprintf(stderr, "cxx_exception: building the kernel failed: %s\n", fj_last_error());
        fj_runtime_destroy(rt);
        return 1;
    }
    std::printf("kernel %s at %p, %zu bytes\n", fj_kernel_name(k), fj_kernel_entry(k),
                fj_kernel_code_size(k));
    std::fflush(stdout);

    int rc = run_kernel(reinterpret_cast<kernel_fn>(fj_kernel_entry(k)), 42);

    fj_kernel_release(k);
    fj_runtime_destroy(rt);
    return rc;
}
