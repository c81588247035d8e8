#!/usr/bin/env bash
# tool_crash_handler.sh CRASH: a SIGSEGV handler unwinds from a faulting JIT
# kernel with libunwind and with glibc's backtrace().
#
# Runs `CRASH --handler`; passes when the handler finished ("handler: done",
# exit 0) and each of its two chains (libunwind, backtrace()) holds the relu
# kernel, then inner, outer and main, in that order.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

CRASH="$1"
need_exe "$CRASH"
make_tmp

rc=0
"$CRASH" --handler >"$TMP/out" 2>&1 || rc=$?
say "output (exit $rc):"
show "$TMP/out"
((rc == 0)) || fail "crash --handler exited with $rc"
grep -q '^handler: done' "$TMP/out" || fail "the handler did not finish"

# section NAME: the frame lines between "NAME:" and the next section.
section() {
    awk -v want="$1:" '
        /^[^ ]/ { on = ($0 == want); next }
        on' "$TMP/out"
}

# Frame lines: "  #N 0xADDR NAME+0xOFF" (ours) or "  #N FILE(NAME+0xOFF)[0xADDR]"
# (backtrace_symbols_fd). Reduce each to the bare name.
names() {
    sed -E -e 's/^ +#[0-9]+ +//' \
           -e 's/^0x[0-9a-f]+ +([^ +]+).*/\1/' \
           -e 's/^[^(]*\(([^+)]*).*/\1/'
}

for chain in libunwind 'backtrace()'; do
    section "$chain" | names >"$TMP/names"
    [[ -s "$TMP/names" ]] || fail "no $chain chain in the output"
    order="$(awk '
        /^fj_eltwise_relu_f32/ { if (!k) { printf "kernel "; k = 1 }; next }
        /^(inner|outer|main)$/ { printf "%s ", $0 }' "$TMP/names")"
    [[ "$order" == "kernel inner outer main " ]] ||
        fail "$chain chain: expected kernel inner outer main, found '${order}'"
    say "$chain: kernel, inner, outer, main"
done
say "PASS"
