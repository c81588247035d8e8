/* uwstub.h: a hand-assembled JIT stub and the walks of every unwinder
 * through it, shared by the unwindinfo suites (test_uw.c, test_uw_arena.c). */
#ifndef UWSTUB_H
#define UWSTUB_H

#include <stddef.h>
#include <stdint.h>
#include <unwind.h>

#include "unwindinfo/uw.h"

/* The GDB JIT descriptor (uw_gdbjit.c), as gdb sees it. */
struct jit_code_entry {
    struct jit_code_entry *next_entry, *prev_entry;
    const char *symfile_addr;
    uint64_t symfile_size;
};
struct jit_descriptor {
    uint32_t version, action_flag;
    struct jit_code_entry *relevant_entry, *first_entry;
};
extern struct jit_descriptor __jit_debug_descriptor;

/* ---- The JIT stub ------------------------------------------------------------
 * void stub(probe *p): records the caller's rbx and return address in *p,
 * saves rbx in its frame, clobbers it, and calls p's callback through rax.
 * An unwinder that recovers the caller's rbx from the frame got the CFI. */
typedef struct chain {
    uintptr_t ip[64];
    uint64_t rbx[64];
    int n, have_rbx;
} chain;

typedef struct probe {
    uint64_t caller_rbx;  /* offset 0: written by the stub */
    uint64_t caller_ra;   /* offset 8: written by the stub */
    uintptr_t start, end; /* the stub being walked through */
    chain gcc, glibc, unw_bt, unw_step;
} probe;

#define POISON 0x5eadbeefcafef00dull

enum { STUB_SIZE = 51, OFF_POISON = 25, OFF_CALLBACK = 35 };
extern const uint8_t stub_code[STUB_SIZE];
enum { NRECS = 5 };
extern const uw_rec stub_recs[NRECS];

typedef void (*stub_fn)(probe *);

/* Writes the stub at `at` (writable memory), calling cb. */
void stub_put(uint8_t *at, void (*cb)(probe *));
/* The C frame that calls the stub; never a tail call (unwinders would not
 * see it). */
void caller_marker(stub_fn fn, probe *p);

/* libgcc's and glibc's unwinders, looked up in their own libraries: the
 * suites link libunwind, which exports _Unwind_* and a weak backtrace()
 * too. bind_unwinders fills ux (asserting with Check). */
struct dwarf_eh_bases {
    void *tbase, *dbase, *func;
};
typedef struct uwstub_unwinders {
    _Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
    _Unwind_Ptr (*get_ip)(struct _Unwind_Context *);
    _Unwind_Word (*get_gr)(struct _Unwind_Context *, int);
    const void *(*find_fde)(void *, struct dwarf_eh_bases *);
    int (*glibc_backtrace)(void **, int);
} uwstub_unwinders;
extern uwstub_unwinders ux;
void bind_unwinders(void);

/* A stub callback: walks with libgcc, glibc backtrace(), unw_backtrace and
 * unw_step into p's chains. */
void walk_all(probe *p);
/* NULL if the chain goes through the stub into caller_marker with the
 * caller's rbx, else what is wrong (in msg). */
const char *chain_problem(const chain *c, const probe *p, char *msg, size_t n);

/* ---- gdb on this test binary --------------------------------------------------
 * 1 if the shell finds tool t. */
int have_tool(const char *t);
/* Runs cmd (stderr folded in); its output, malloc'ed. */
char *run(const char *cmd);
/* gdb runs this binary with `args` (a helper mode that traps inside a
 * kernel) and prints bt; its output, malloc'ed. */
char *gdb_bt(const char *args, int timeout_s);
/* 0 if gdb could not trace here (the test is skipped), else 1 after
 * asserting that bt names `kernel` and that the next frames are
 * caller_marker, then main, with no unknown frames between. */
int check_gdb_bt(const char *test, const char *out, const char *kernel);

#endif
