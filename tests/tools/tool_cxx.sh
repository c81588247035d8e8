#!/usr/bin/env bash
# tool_cxx.sh CXX_EXCEPTION: a C++ exception crosses a JIT frame, and only
# because framejit registered the kernel's CFI with libgcc.
#
# Passes when cxx_exception prints "caught:" and exits 0, and the same
# program with FRAMEJIT_UNWIND=none (nothing registered) does not: libgcc
# cannot step through the kernel, so std::terminate aborts it.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

EXE="$1"
need_exe "$EXE"
make_tmp

rc=0
"$EXE" >"$TMP/out" 2>&1 || rc=$?
say "default registration (exit $rc):"
show "$TMP/out"
((rc == 0)) || fail "cxx_exception exited with $rc"
grep -q '^caught: ' "$TMP/out" || fail "no 'caught:' line"

rc=0
FRAMEJIT_UNWIND=none "$EXE" >"$TMP/none" 2>&1 || rc=$?
say "FRAMEJIT_UNWIND=none (exit $rc):"
show "$TMP/none"
grep -q '^kernel ' "$TMP/none" || fail "with FRAMEJIT_UNWIND=none the kernel was not even built"
((rc != 0)) || fail "with FRAMEJIT_UNWIND=none the exception still crossed the kernel (exit 0)"
! grep -q '^caught: ' "$TMP/none" || fail "with FRAMEJIT_UNWIND=none the exception was caught"
# 134 = 128 + SIGABRT: std::terminate -> abort.
((rc == 134)) || say "note: expected exit 134 (SIGABRT from std::terminate), got $rc"
say "PASS"
