/* uwstub.c: the hand-assembled JIT stub and the unwinder walks shared by
 * the unwindinfo suites. */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "uwstub.h"

const uint8_t stub_code[STUB_SIZE] = {
    0x55,                                      /*  0 push rbp */
    0x48, 0x89, 0xe5,                          /*  1 mov rbp, rsp */
    0x48, 0x83, 0xec, 0x10,                    /*  4 sub rsp, 16 */
    0x48, 0x89, 0x5d, 0xf8,                    /*  8 mov [rbp-8], rbx */
    0x48, 0x89, 0x1f,                          /* 12 mov [rdi], rbx */
    0x48, 0x8b, 0x45, 0x08,                    /* 15 mov rax, [rbp+8] */
    0x48, 0x89, 0x47, 0x08,                    /* 19 mov [rdi+8], rax */
    0x48, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0,        /* 23 mov rbx, POISON */
    0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,        /* 33 mov rax, callback */
    0xff, 0xd0,                                /* 43 call rax */
    0x48, 0x8b, 0x5d, 0xf8,                    /* 45 mov rbx, [rbp-8] */
    0xc9,                                      /* 49 leave */
    0xc3,                                      /* 50 ret */
};
const uw_rec stub_recs[NRECS] = {
    {.off = 1, .kind = UW_PUSH_FP},
    {.off = 4, .kind = UW_SET_FP},
    {.off = 12, .kind = UW_SAVE_REG, .reg = 3, .cfa_off = -24},  /* rbx at rbp-8 */
    {.off = 49, .kind = UW_RESTORE_REG, .reg = 3},
    {.off = 50, .kind = UW_POP_FP},
};
_Static_assert(sizeof stub_recs / sizeof stub_recs[0] == NRECS, "NRECS");

void stub_put(uint8_t *at, void (*cb)(probe *)) {
    memcpy(at, stub_code, STUB_SIZE);
    uint64_t poison = POISON, fn = (uint64_t)(uintptr_t)cb;
    memcpy(at + OFF_POISON, &poison, 8);
    memcpy(at + OFF_CALLBACK, &fn, 8);
}

__attribute__((noinline)) void caller_marker(stub_fn fn, probe *p) {
    fn(p);
    __asm__ volatile("" ::: "memory");
}

uwstub_unwinders ux;

void bind_unwinders(void) {
    void *g = dlopen("libgcc_s.so.1", RTLD_NOW);
    ck_assert_msg(g != NULL, "libgcc_s: %s", dlerror());
    *(void **)&ux.backtrace = dlsym(g, "_Unwind_Backtrace");
    *(void **)&ux.get_ip = dlsym(g, "_Unwind_GetIP");
    *(void **)&ux.get_gr = dlsym(g, "_Unwind_GetGR");
    *(void **)&ux.find_fde = dlsym(g, "_Unwind_Find_FDE");
    void *c = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(c != NULL, "libc: %s", dlerror());
    *(void **)&ux.glibc_backtrace = dlsym(c, "backtrace");
    ck_assert(ux.backtrace && ux.get_ip && ux.get_gr && ux.find_fde && ux.glibc_backtrace);
}

static _Unwind_Reason_Code gcc_frame(struct _Unwind_Context *ctx, void *arg) {
    chain *c = arg;
    if (c->n == 64) return _URC_END_OF_STACK;
    c->ip[c->n] = ux.get_ip(ctx);
    c->rbx[c->n] = ux.get_gr(ctx, 3);  /* DWARF 3 = rbx */
    c->n++;
    return _URC_NO_REASON;
}

void walk_all(probe *p) {
    p->gcc.have_rbx = 1;
    ux.backtrace(gcc_frame, &p->gcc);

    void *buf[64];
    p->glibc.n = ux.glibc_backtrace(buf, 64);
    for (int i = 0; i < p->glibc.n; i++) p->glibc.ip[i] = (uintptr_t)buf[i];

    p->unw_bt.n = unw_backtrace(buf, 64);
    for (int i = 0; i < p->unw_bt.n; i++) p->unw_bt.ip[i] = (uintptr_t)buf[i];

    unw_context_t uc;
    unw_cursor_t cur;
    unw_getcontext(&uc);
    if (unw_init_local(&cur, &uc) != 0) return;
    chain *c = &p->unw_step;
    c->have_rbx = 1;
    do {
        unw_word_t ip = 0, rbx = 0;
        unw_get_reg(&cur, UNW_REG_IP, &ip);
        unw_get_reg(&cur, UNW_X86_64_RBX, &rbx);
        c->ip[c->n] = ip;
        c->rbx[c->n] = rbx;
        c->n++;
    } while (c->n < 64 && unw_step(&cur) > 0);
}

const char *chain_problem(const chain *c, const probe *p, char *msg, size_t n) {
    for (int i = 0; i < c->n; i++) {
        if (c->ip[i] < p->start || c->ip[i] >= p->end) continue;
        if (i + 1 == c->n) return "the walk stops at the JIT frame";
        if (c->ip[i + 1] != p->caller_ra) {
            snprintf(msg, n, "after the JIT frame: %#lx, expected the caller at %#lx",
                     (unsigned long)c->ip[i + 1], (unsigned long)p->caller_ra);
            return msg;
        }
        if (i + 2 >= c->n) return "the walk stops at the caller";
        if (c->have_rbx && c->rbx[i + 1] != p->caller_rbx) {
            snprintf(msg, n, "caller's rbx %#llx, expected %#llx",
                     (unsigned long long)c->rbx[i + 1], (unsigned long long)p->caller_rbx);
            return msg;
        }
        return NULL;
    }
    snprintf(msg, n, "no frame in the JIT stub among %d", c->n);
    return msg;
}

int have_tool(const char *t) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", t);
    return system(cmd) == 0;
}

char *run(const char *cmd) {
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 16, n = 0, r;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    while ((r = fread(out + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 4096) {
            cap *= 2;
            out = realloc(out, cap);
            ck_assert_ptr_nonnull(out);
        }
    }
    out[n] = 0;
    pclose(f);
    return out;
}

char *gdb_bt(const char *args, int timeout_s) {
    char exe[PATH_MAX], cmd[2 * PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    ck_assert_int_gt(n, 0);
    exe[n] = 0;
    snprintf(cmd, sizeof cmd,
             "timeout -k 5 %d gdb -nx -batch -ex 'set debuginfod enabled off' "
             "-ex 'set pagination off' -ex run -ex bt -ex kill --args '%s' %s 2>&1 </dev/null",
             timeout_s, exe, args);
    return run(cmd);
}

int check_gdb_bt(const char *test, const char *out, const char *kernel) {
    if (!strstr(out, "SIGTRAP") && (strstr(out, "ptrace") || strstr(out, "not permitted"))) {
        fprintf(stderr, "%s: skipped, gdb cannot trace here:\n%s\n", test, out);
        return 0;
    }
    char want[128];
    snprintf(want, sizeof want, " in %s ", kernel);
    const char *k = strstr(out, want);
    ck_assert_msg(k != NULL, "gdb bt does not name the kernel:\n%s", out);
    const char *c = strstr(k, "caller_marker");
    ck_assert_msg(c != NULL, "gdb bt does not reach the caller:\n%s", out);
    /* ... as the very next frame: no "??" frames made up in between. */
    const char *q = strstr(k, " ?? ");
    ck_assert_msg(q == NULL || q > c, "gdb bt has unknown frames after the kernel:\n%s", out);
    ck_assert_msg(strstr(c, "main") != NULL, "gdb bt does not reach main:\n%s", out);
    return 1;
}
