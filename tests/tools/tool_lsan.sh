#!/usr/bin/env bash
# tool_lsan.sh BUILD_DIR: LeakSanitizer reports a leak made in a C callback
# that a builder kernel calls (leak_kernel.c: main -> outer -> kernel
# leak_kernel_k -> make_leak -> malloc) with the kernel's frame and the
# callers up to main. The program is built with -fsanitize=address against
# the build's libframejit (the library itself is not instrumented).
#
# Pass:
#   clang (compiler-rt's LeakSanitizer, symbolizing with llvm-symbolizer):
#     the report names leak_kernel_k between make_leak and outer, then main;
#   gcc (libasan symbolizes with its built-in libbacktrace, which knows only
#     the modules the dynamic loader loaded): the report gives the kernel's
#     frame as (/dev/shm/framejit-PID-SEQ.so+OFFSET) between make_leak and
#     outer, then main, and after the program has exited
#     `addr2line -f -e FILE OFFSET` names leak_kernel_k from the arena file
#     framejit kept.
# A compiler that is not installed is skipped (with the reason); at least
# one must run.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

BUILD="$(cd "$1" && pwd)"
SRC="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$SRC/../.." && pwd)"
make_tmp
unset FRAMEJIT_KEEP_SECONDS FRAMEJIT_KEEP_MB FRAMEJIT_CODE_FILE ASAN_OPTIONS LSAN_OPTIONS
status=0
ran=0

# report CC: builds and runs leak_kernel with CC; the report in $TMP/CC.report.
report() {
    local cc="$1"
    "$cc" -O1 -g -fsanitize=address -fno-omit-frame-pointer "$SRC/leak_kernel.c" \
        -I"$ROOT/include" -L"$BUILD" -lframejit -Wl,-rpath,"$BUILD" -o "$TMP/leak.$cc" \
        2>"$TMP/$cc.cc" || { show "$TMP/$cc.cc"; fail "$cc: cannot build leak_kernel with -fsanitize=address"; }
    "$TMP/leak.$cc" >"$TMP/$cc.out" 2>"$TMP/$cc.report" && fail "$cc: LeakSanitizer reported no leak"
    show "$TMP/$cc.report"
    grep -q 'ERROR: LeakSanitizer: detected memory leaks' "$TMP/$cc.report" ||
        fail "$cc: no LeakSanitizer report"
}

# order CC KERNEL_PATTERN: make_leak, the kernel's frame, outer, main in order.
order() {
    awk -v k="$2" '/ in make_leak / { s = 1; next }
        s == 1 { if ($0 ~ k) s = 2; else exit 1; next }
        s == 2 && / in outer / { s = 3 } s == 3 && / in main / { s = 4 }
        END { exit s == 4 ? 0 : 1 }' "$TMP/$1.report"
}

if command -v clang >/dev/null 2>&1; then
    ran=1
    report clang
    if order clang ' in leak_kernel_k '; then
        say "clang: the report names leak_kernel_k, then outer and main"
    else
        say "FAIL: clang: the report does not go make_leak -> leak_kernel_k -> outer -> main"; status=1
    fi
else
    say "clang part skipped: clang is not installed"
fi

if command -v gcc >/dev/null 2>&1; then
    ran=1
    report gcc
    if order gcc '\(/dev/shm/framejit-[0-9]+-[0-9]+\.so\+0x[0-9a-f]+\)'; then
        frame="$(grep -oE '/dev/shm/framejit-[0-9]+-[0-9]+\.so\+0x[0-9a-f]+' "$TMP/gcc.report" | head -1)"
        name="$(addr2line -f -e "${frame%+*}" "${frame#*+}" 2>&1 | head -1)"
        if [[ "$name" == leak_kernel_k ]]; then
            say "gcc: the kernel's frame is $frame, then outer and main; after exit addr2line names it $name"
        else
            say "FAIL: gcc: addr2line -f -e ${frame%+*} ${frame#*+} after exit gives '$name'"; status=1
        fi
    else
        say "FAIL: gcc: the report does not go make_leak -> arena file+offset -> outer -> main"; status=1
    fi
else
    say "gcc part skipped: gcc is not installed"
fi

((ran)) || skip "neither clang nor gcc is installed"
if ((status == 0)); then say "PASS"; fi
exit "$status"
