/* stitch_x86_64.S: the stitch trampolines (fj_origin_run, fj_worker_run) and
 * fj_origin_capture: work run on one thread continues, for frame-pointer
 * walkers, into the frames of the thread that submitted it.
 *
 * An origin record is {saved rbp, return address}: the capturing function's
 * frame pointer and a pc inside it. A trampoline pushes its own rbp, then
 * the record's two words as a fake frame record, points rbp at it and calls
 * the work: a frame-pointer walk from the work reaches the trampoline's
 * return address (the trampoline's name), then the capturing function, then
 * its callers on their own stack.
 *
 * The CFI keeps DWARF unwinders (libgcc, libunwind, gdb, valgrind) on the
 * thread's own stack: the CFA is rsp-based at every instruction and the
 * caller's rbp is the one pushed first, so a C++ exception or backtrace()
 * steps from the trampoline to its real caller, never into the record.
 * Three pushes from an entry rsp of 8 mod 16 leave rsp 16-byte aligned at
 * the call, as the ABI requires. */

    .text

/* void fj_origin_capture(fj_origin *o): o[0] = the caller's rbp,
 * o[1] = our return address (a pc inside the caller), o[2] = the caller's
 * rsp after we return. rt_origin_capture is the library's own name for it
 * (no PLT, cannot be interposed). */
    .globl fj_origin_capture
    .type fj_origin_capture, @function
    .globl rt_origin_capture
    .hidden rt_origin_capture
    .type rt_origin_capture, @function
    .p2align 4
fj_origin_capture:
rt_origin_capture:
    .cfi_startproc
    movq %rbp, (%rdi)
    movq (%rsp), %rax
    movq %rax, 8(%rdi)
    leaq 8(%rsp), %rax
    movq %rax, 16(%rdi)
    movq $0, 24(%rdi)
    ret
    .cfi_endproc
    .size fj_origin_capture, . - fj_origin_capture
    .size rt_origin_capture, . - rt_origin_capture

/* STITCH name: the trampoline's body up to the call target in %rax, with
 * the work's arguments already in %rdi/%rsi; `setup` moves them there. */
.macro STITCH_ENTER
    .cfi_startproc
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    pushq 8(%rdi)               /* the record: return address ... */
    .cfi_adjust_cfa_offset 8
    pushq (%rdi)                /* ... and saved rbp */
    .cfi_adjust_cfa_offset 8
    movq %rsp, %rbp             /* frame-pointer walkers follow the record */
.endm

.macro STITCH_LEAVE
    addq $16, %rsp
    .cfi_adjust_cfa_offset -16
    popq %rbp
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbp
    ret
    .cfi_endproc
.endm

/* void fj_origin_run(const fj_origin *o, void (*fn)(void *), void *arg) */
    .globl fj_origin_run
    .type fj_origin_run, @function
    .p2align 4
fj_origin_run:
    STITCH_ENTER
    movq %rsi, %rax
    movq %rdx, %rdi
    call *%rax
    STITCH_LEAVE
    .size fj_origin_run, . - fj_origin_run

/* void fj_worker_run(const fj_origin *o, void (*fn)(void *, int64_t),
 *                    void *ctx, int64_t i): the pool's and the embedder
 * pool's chunks, fn(ctx, i) under the submitter's record. Hidden: the
 * name is for profiles, the function is the library's. */
    .globl fj_worker_run
    .hidden fj_worker_run
    .type fj_worker_run, @function
    .p2align 4
fj_worker_run:
    STITCH_ENTER
    movq %rsi, %rax
    movq %rdx, %rdi
    movq %rcx, %rsi
    call *%rax
    STITCH_LEAVE
    .size fj_worker_run, . - fj_worker_run
/* The end of the trampolines, for the single-step test. */
    .globl rt_stitch_end
    .hidden rt_stitch_end
rt_stitch_end:

    .section .note.GNU-stack, "", @progbits
