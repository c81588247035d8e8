/* test_verify.c: the rbp/CFI verifier on hand-assembled kernels: the frame
 * shapes the builder emits are accepted, each kind of violation is rejected
 * with its reason and offset. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/builder/verify.h"
#include "fjtest.h"

#define CODE(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})
#define RECS(...) \
    (const uw_rec[]){__VA_ARGS__}, sizeof((const uw_rec[]){__VA_ARGS__}) / sizeof(uw_rec)
#define PUSH(o) {(o), UW_PUSH_FP, 0, 0}
#define SETFP(o) {(o), UW_SET_FP, 0, 0}
#define SAVE(o, r, c) {(o), UW_SAVE_REG, (r), (c)}
#define RESTORE(o, r) {(o), UW_RESTORE_REG, (r), 0}
#define POP(o) {(o), UW_POP_FP, 0, 0}

/* register numbers as in base/frame_rec.h */
enum { RBX = 3, RSP = 4, R12 = 12 };

/* The prologue and the leaf epilogue, as bytes */
#define PRO 0x55, 0x48, 0x89, 0xe5                    /* push rbp; mov rbp, rsp */
#define PRO_RECS PUSH(1), SETFP(4)

typedef struct vcase {
    const char *what;
    const uint8_t *code;
    size_t len;
    const uw_rec *recs;
    size_t nrecs;
    const char *reason;   /* NULL: must be accepted; else a substring of the error */
    const char *where;    /* with reason: "offset N" expected in the message */
} vcase;

static const vcase good[] = {
    {"leaf without frame space",
     CODE(PRO, 0x48, 0x8b, 0x07,             /* 4: mov rax, [rdi] */
          0x48, 0x01, 0xf0,                  /* 7: add rax, rsi */
          0x5d,                              /* 10: pop rbp */
          0xc3),                             /* 11: ret */
     RECS(PRO_RECS, POP(11)), NULL, NULL},
    {"frame space and saved registers",
     CODE(PRO, 0x48, 0x83, 0xec, 0x20,       /* 4: sub rsp, 32 */
          0x48, 0x89, 0x5d, 0xf8,            /* 8: mov [rbp-8], rbx */
          0x4c, 0x89, 0x65, 0xf0,            /* 12: mov [rbp-16], r12 */
          0x48, 0x89, 0xc3,                  /* 16: mov rbx, rax */
          0x49, 0x89, 0xcc,                  /* 19: mov r12, rcx */
          0xc5, 0xf4, 0x58, 0xc2,            /* 22: vaddps ymm0, ymm1, ymm2 */
          0x62, 0xf2, 0x75, 0x48, 0xb8, 0x45, 0xfe, /* 26: vfmadd231ps zmm0, zmm1, [rbp-128] */
          0x48, 0x8b, 0x5d, 0xf8,            /* 33: mov rbx, [rbp-8] */
          0x4c, 0x8b, 0x65, 0xf0,            /* 37: mov r12, [rbp-16] */
          0xc9,                              /* 41: leave */
          0xc3),                             /* 42: ret */
     RECS(PRO_RECS, SAVE(12, RBX, -24), SAVE(16, R12, -32), RESTORE(37, RBX),
          RESTORE(41, R12), POP(42)),
     NULL, NULL},
    {"calls and pushes in the body",
     CODE(PRO, 0x48, 0x83, 0xec, 0x10,       /* 4: sub rsp, 16 */
          0xe8, 0x00, 0x00, 0x00, 0x00,      /* 8: call rel32 */
          0xff, 0xd0,                        /* 13: call rax */
          0x6a, 0x00,                        /* 15: push 0 */
          0x58,                              /* 17: pop rax */
          0x48, 0x8d, 0x64, 0x24, 0x10,      /* 18: lea rsp, [rsp+16] */
          0x5d,                              /* 23: pop rbp (rsp == rbp again) */
          0xc3),                             /* 24: ret */
     RECS(PRO_RECS, POP(24)), NULL, NULL},
    {"code after the epilogue",
     CODE(PRO, 0x48, 0x83, 0xec, 0x10,       /* 4: sub rsp, 16 */
          0x48, 0x89, 0x5d, 0xf8,            /* 8: mov [rbp-8], rbx */
          0x48, 0x85, 0xff,                  /* 12: test rdi, rdi */
          0x75, 0x08,                        /* 15: jne 25 */
          0x31, 0xc0,                        /* 17: xor eax, eax */
          0x48, 0x8b, 0x5d, 0xf8,            /* 19: mov rbx, [rbp-8] */
          0xc9,                              /* 23: leave */
          0xc3,                              /* 24: ret */
          0x31, 0xdb,                        /* 25: xor ebx, ebx (rbx saved again) */
          0xeb, 0xf4),                       /* 27: jmp 17 */
     RECS(PRO_RECS, SAVE(12, RBX, -24), RESTORE(23, RBX), POP(24), SETFP(25)), NULL, NULL},
    {"int3 padding after ret",
     CODE(PRO, 0x5d, 0xc3, 0xcc, 0xcc, 0x66, 0x90, 0x0f, 0x1f, 0x00),
     RECS(PRO_RECS, POP(5)), NULL, NULL},
    {"mov rsp, rbp; pop rbp and the 8b form of mov rbp, rsp",
     CODE(0x55, 0x48, 0x8b, 0xec, 0x48, 0x81, 0xec, 0x00, 0x01, 0x00, 0x00, /* sub rsp,256 */
          0x48, 0x89, 0xec,                  /* 11: mov rsp, rbp */
          0x5d, 0xc3),                       /* 14: pop rbp; 15: ret */
     RECS(PRO_RECS, POP(15)), NULL, NULL},
};

static const vcase bad[] = {
    /* rbp as scratch */
    {"mov rbp, rax", CODE(PRO, 0x48, 0x89, 0xc5, 0x5d, 0xc3), RECS(PRO_RECS, POP(8)),
     "writes rbp", "offset 4"},
    {"add rbp, 8", CODE(PRO, 0x48, 0x83, 0xc5, 0x08, 0x5d, 0xc3), RECS(PRO_RECS, POP(9)),
     "writes rbp", "offset 4"},
    {"xor ebp, ebp", CODE(PRO, 0x31, 0xed, 0x5d, 0xc3), RECS(PRO_RECS, POP(7)), "writes rbp",
     "offset 4"},
    {"mov bpl, al", CODE(PRO, 0x40, 0x88, 0xc5, 0x5d, 0xc3), RECS(PRO_RECS, POP(8)),
     "writes rbp", "offset 4"},
    {"lea rbp, [rax+8]", CODE(PRO, 0x48, 0x8d, 0x68, 0x08, 0x5d, 0xc3),
     RECS(PRO_RECS, POP(9)), "writes rbp", "offset 4"},
    {"pop rbp in the body", CODE(PRO, 0x6a, 0x00, 0x5d, 0x5d, 0xc3), RECS(PRO_RECS, POP(8)),
     "writes rbp", "offset 6"},
    {"xchg rax, rbp", CODE(PRO, 0x48, 0x95, 0x5d, 0xc3), RECS(PRO_RECS, POP(7)), "writes rbp",
     "offset 4"},
    {"cmovne rbp, rax", CODE(PRO, 0x48, 0x0f, 0x45, 0xe8, 0x5d, 0xc3), RECS(PRO_RECS, POP(9)),
     "writes rbp", "offset 4"},
    {"vmovd ebp, xmm0", CODE(PRO, 0xc5, 0xf9, 0x7e, 0xc5, 0x5d, 0xc3),
     RECS(PRO_RECS, POP(9)), "writes rbp", "offset 4"},
    {"bzhi ebp, eax, ecx", CODE(PRO, 0xc4, 0xe2, 0x70, 0xf5, 0xe8, 0x5d, 0xc3),
     RECS(PRO_RECS, POP(10)), "writes rbp", "offset 4"},
    {"kmovw ebp, k1", CODE(PRO, 0xc5, 0xf8, 0x93, 0xe9, 0x5d, 0xc3), RECS(PRO_RECS, POP(9)),
     "writes rbp", "offset 4"},
    {"mov rbp, rsp again in the body", CODE(PRO, 0x48, 0x89, 0xe5, 0x5d, 0xc3),
     RECS(PRO_RECS, POP(8)), "writes rbp", "offset 4"},
    /* prologue */
    {"missing push rbp", CODE(0x48, 0x89, 0xe5, 0x5d, 0xc3), RECS(SETFP(3), POP(4)),
     "does not start with push rbp", "offset 0"},
    {"push rbp without mov rbp, rsp", CODE(0x55, 0x48, 0x83, 0xec, 0x08, 0xc9, 0xc3),
     RECS(PUSH(1), POP(6)), "not followed by mov rbp, rsp", "offset 1"},
    {"no UW_PUSH_FP", CODE(PRO, 0x5d, 0xc3), RECS(SETFP(4), POP(5)), "no UW_PUSH_FP", "offset 1"},
    /* rsp while the CFA is rsp-based */
    {"push rbx after leave", CODE(PRO, 0xc9, 0x53, 0x5b, 0xc3), RECS(PRO_RECS, POP(5)),
     "rsp-based", "offset 5"},
    {"rsp of unknown value", CODE(PRO, 0x48, 0x83, 0xe4, 0xe0, 0xc9, 0xc3),
     RECS(PRO_RECS, POP(9)), "cannot follow", "offset 4"},
    {"pop rbp with frame space left", CODE(PRO, 0x48, 0x83, 0xec, 0x10, 0x5d, 0xc3),
     RECS(PRO_RECS, POP(9)), "rsp != rbp", "offset 8"},
    /* records */
    {"record off an instruction boundary", CODE(PRO, 0x5d, 0xc3), RECS(PUSH(1), SETFP(3), POP(5)),
     "not on an instruction boundary", "offset 3"},
    {"records out of order", CODE(PRO, 0x5d, 0xc3), RECS(SETFP(4), PUSH(1), POP(5)),
     "out of order", "offset 1"},
    {"SET_FP on the wrong instruction",
     CODE(PRO, 0x48, 0x83, 0xec, 0x10, 0xc9, 0xc3), RECS(PUSH(1), SETFP(4), SETFP(8), POP(9)),
     "UW_SET_FP does not match", "offset 8"},
    {"wrong SAVE_REG offset",
     CODE(PRO, 0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0x5d, 0xf8, 0x48, 0x8b, 0x5d, 0xf8, 0xc9,
          0xc3),
     RECS(PRO_RECS, SAVE(12, RBX, -32), RESTORE(16, RBX), POP(17)),
     "UW_SAVE_REG rbx at CFA-32 does not match", "offset 12"},
    {"save slot below rsp",
     CODE(PRO, 0x48, 0x89, 0x5d, 0xf8, 0x48, 0x8b, 0x5d, 0xf8, 0xc9, 0xc3),
     RECS(PRO_RECS, SAVE(8, RBX, -24), RESTORE(12, RBX), POP(13)), "outside the frame",
     "offset 8"},
    {"rsp freed above a live save slot",
     CODE(PRO, 0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0x5d, 0xf8, 0x48, 0x83, 0xc4, 0x20, 0x48,
          0x8b, 0x5d, 0xf8, 0xc9, 0xc3),
     RECS(PRO_RECS, SAVE(12, RBX, -24), RESTORE(20, RBX), POP(21)), "above the save slot of rbx",
     "offset 12"},
    {"restore from the wrong slot",
     CODE(PRO, 0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0x5d, 0xf8, 0x48, 0x8b, 0x5d, 0xf0, 0xc9,
          0xc3),
     RECS(PRO_RECS, SAVE(12, RBX, -24), RESTORE(16, RBX), POP(17)),
     "UW_RESTORE_REG rbx does not match", "offset 16"},
    {"callee-saved register written unsaved", CODE(PRO, 0x31, 0xdb, 0x5d, 0xc3),
     RECS(PRO_RECS, POP(7)), "rbx, which is not saved", "offset 4"},
    {"saved register not restored at ret",
     CODE(PRO, 0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0x5d, 0xf8, 0xc9, 0xc3),
     RECS(PRO_RECS, SAVE(12, RBX, -24), POP(13)), "rbx not restored", "offset 13"},
    {"leave without UW_POP_FP", CODE(PRO, 0xc9, 0xc3), RECS(PRO_RECS), "no UW_POP_FP",
     "offset 5"},
    /* ret */
    {"ret with rbp not restored", CODE(PRO, 0xc3), RECS(PRO_RECS), "ret before rbp is restored",
     "offset 4"},
    {"code after ret without SET_FP", CODE(PRO, 0x5d, 0xc3, 0x48, 0x31, 0xc0, 0xc3),
     RECS(PRO_RECS, POP(5)), "code after a ret", "offset 6"},
    {"falls off the end", CODE(PRO, 0x48, 0x31, 0xc0), RECS(PRO_RECS), "does not end with ret",
     "offset 7"},
    /* bytes */
    {"truncated instruction at the end", CODE(PRO, 0x5d, 0xc3, 0x48, 0x8b),
     RECS(PRO_RECS, POP(5)), "truncated", "offset 6"},
    {"undecodable (x87)", CODE(PRO, 0xd9, 0xc0, 0x5d, 0xc3), RECS(PRO_RECS, POP(7)),
     "undecodable", "offset 4"},
};

START_TEST(accepts_good_kernels) {
    const vcase *c = &good[_i];
    fj_status s = kv_verify(c->what, c->code, c->len, c->recs, c->nrecs);
    ck_assert_msg(s == FJ_OK, "%s: rejected: %s", c->what, fj_last_error());
}
END_TEST

START_TEST(rejects_bad_kernels) {
    const vcase *c = &bad[_i];
    fj_status s = kv_verify("k_bad", c->code, c->len, c->recs, c->nrecs);
    const char *msg = fj_last_error();
    ck_assert_msg(s == FJ_ERR_VERIFY, "%s: accepted", c->what);
    ck_assert_msg(strstr(msg, c->reason), "%s: message '%s' lacks '%s'", c->what, msg, c->reason);
    ck_assert_msg(strstr(msg, c->where), "%s: message '%s' lacks '%s'", c->what, msg, c->where);
    ck_assert_msg(strstr(msg, "kernel 'k_bad'"), "%s: message '%s' does not name the kernel",
                  c->what, msg);
}
END_TEST

/* Every strict prefix of a good kernel is rejected (it cannot end well). */
START_TEST(rejects_every_truncation) {
    const vcase *c = &good[1];
    for (size_t n = 1; n < c->len; n++) {
        size_t nr = 0;
        while (nr < c->nrecs && c->recs[nr].off <= n) nr++;
        ck_assert_msg(kv_verify("cut", c->code, n, c->recs, nr) == FJ_ERR_VERIFY,
                      "prefix of %zu bytes accepted", n);
    }
}
END_TEST

START_TEST(rejects_bad_arguments) {
    ck_assert_int_eq(kv_verify("k", NULL, 4, NULL, 0), FJ_ERR_VERIFY);
    ck_assert_int_eq(kv_verify("k", (const uint8_t[]){0xc3}, 0, NULL, 0), FJ_ERR_VERIFY);
    ck_assert_int_eq(kv_verify("k", (const uint8_t[]){0x55, 0xc3}, 2, NULL, 2), FJ_ERR_VERIFY);
    /* a record beyond the code */
    const uint8_t leaf[] = {PRO, 0x5d, 0xc3};
    const uw_rec far[] = {PRO_RECS, POP(5), SETFP(9)};
    ck_assert_int_eq(kv_verify("k", leaf, sizeof leaf, far, 4), FJ_ERR_VERIFY);
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "outside the code"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("verify");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, accepts_good_kernels, 0, (int)(sizeof good / sizeof good[0]));
    tcase_add_loop_test(tc, rejects_bad_kernels, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, rejects_every_truncation);
    tcase_add_test(tc, rejects_bad_arguments);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
