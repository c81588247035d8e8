// cxx_origin.cpp: C++ exceptions thrown under fj_origin_run propagate out
// of it to its caller, on the thread that ran it.
//
//     cxx_origin          (exits 0 when every case is caught where expected)
//
// fj_origin_run changes only what frame-pointer walkers see (the frames of
// the thread that captured the origin); its CFI describes its real return,
// so the C++ runtime unwinds from fn into fj_origin_run's caller on the
// same thread. Three cases, each caught by a try block around
// fj_origin_run:
//   1. fn throws, on the capturing thread;
//   2. fn throws, on another thread (the origin was captured on main's);
//   3. fn calls a builder kernel whose callback throws: the exception
//      crosses the kernel (its registered CFI) and then the trampoline.
#include <framejit.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

fj_kernel *g_kernel;

extern "C" __attribute__((noinline)) void origin_throw(long code) {
    throw std::runtime_error("error " + std::to_string(code));
}

void throws_now(void *arg) { origin_throw(*static_cast<long *>(arg)); }

void throws_in_kernel(void *arg) {
    auto fn = reinterpret_cast<long (*)(long)>(fj_kernel_entry(g_kernel));
    long r = fn(*static_cast<long *>(arg));
    std::printf("kernel returned %ld: no exception (unexpected)\n", r);
}

// noinline, with code after the call: the handler's frame is on the stack.
__attribute__((noinline)) int run_and_catch(const char *what, const fj_origin *o,
                                            void (*fn)(void *), long code) {
    try {
        fj_origin_run(o, fn, &code);
    } catch (const std::exception &e) {
        std::printf("caught: %s: %s\n", what, e.what());
        return 0;
    }
    std::printf("FAIL: %s: nothing thrown\n", what);
    return 1;
}

fj_kernel *build_kernel(fj_runtime *rt) {
    fj_builder *b = nullptr;
    if (fj_builder_create(rt, "cxx_origin_throw", 1, &b) != FJ_OK) return nullptr;
    fj_reg code = fj_arg(b, 0);
    fj_opnd args[1] = {fj_r64(code)};
    fj_call(b, reinterpret_cast<const void *>(&origin_throw), args, 1, fj_reg{0});
    fj_emit2(b, FJ_ADD, fj_r64(code), fj_imm(1));
    fj_return(b, fj_r64(code));
    fj_kernel *k = nullptr;
    if (fj_builder_finish(b, &k) != FJ_OK) return nullptr;
    return k;
}

}  // namespace

int main() {
    fj_runtime *rt = nullptr;
    if (fj_runtime_create(nullptr, &rt) != FJ_OK || !(g_kernel = build_kernel(rt))) {
        std::fprintf(stderr, "cxx_origin: setup failed: %s\n", fj_last_error());
        return 1;
    }
    fj_origin o;
    fj_origin_capture(&o);
    int rc = run_and_catch("same thread", &o, throws_now, 1);
    std::thread t([&] { rc |= run_and_catch("other thread", &o, throws_now, 2); });
    t.join();
    rc |= run_and_catch("through a kernel", &o, throws_in_kernel, 3);
    std::thread t2([&] { rc |= run_and_catch("through a kernel, other thread", &o,
                                             throws_in_kernel, 4); });
    t2.join();
    fj_kernel_release(g_kernel);
    fj_runtime_destroy(rt);
    return rc;
}
