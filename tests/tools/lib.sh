# shellcheck shell=bash
# lib.sh: helpers shared by the tool-level tests (sourced, not run).
#
# Exit codes follow meson: 0 pass, 77 skip (only when a tool is truly
# unavailable, always with the reason), anything else fails.

TOOL_TEST="${TOOL_TEST:-$(basename "$0" .sh)}"

# The defaults are what is under test: every unwinder registration, one
# thread where the example asks for one, no perf map or jitdump files.
unset FRAMEJIT_THREADS FRAMEJIT_UNWIND FRAMEJIT_PERFMAP FRAMEJIT_JITDUMP

say() { printf '%s: %s\n' "$TOOL_TEST" "$*"; }
fail() { printf '%s: FAIL: %s\n' "$TOOL_TEST" "$*" >&2; exit 1; }
skip() { printf '%s: SKIP: %s\n' "$TOOL_TEST" "$*"; exit 77; }

# A scratch directory removed on exit (kept with KEEP_TMP=1, for a post-mortem).
make_tmp() {
    TMP="$(mktemp -d "${TMPDIR:-/tmp}/fj-${TOOL_TEST}.XXXXXX")"
    if [[ "${KEEP_TMP:-0}" == 1 ]]; then
        say "keeping $TMP"
    else
        trap 'rm -rf -- "$TMP"' EXIT
    fi
}

need_exe() {
    [[ -x "$1" ]] || fail "not an executable: $1"
}

# indent FILE: prints a file indented, for logs.
show() { sed 's/^/    | /' "$1"; }

# perf_usable: 0 if `perf record` can sample a user process here. Otherwise
# prints why and returns 1 when perf is unavailable (not installed, no perf
# for this kernel, perf_event_open not permitted or not supported), 2 when
# it fails for another reason (a real failure, not a skip).
perf_usable() {
    command -v perf >/dev/null 2>&1 || { echo "perf is not installed"; return 1; }
    local out
    if ! out="$(perf record -g -o "$TMP/probe.data" -- true 2>&1)"; then
        echo "perf record fails (perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo '?')): $(printf '%s' "$out" | head -3 | tr '\n' ' ')"
        if grep -qiE 'permission|paranoid|not permitted|perf_event_open|not supported|perf not found|No such device' <<<"$out"; then
            return 1
        fi
        return 2
    fi
    rm -f "$TMP/probe.data"
    return 0
}

# analyze_perf_script KERNELS_FILE PID < perf-script-output
#
# Input: `perf script -F pid,ip,sym,dso` with call chains (a header line
# with the pid, then one "ip sym (dso)" line per frame, leaf first, then a
# blank line). KERNELS_FILE holds callchain's "callchain: kernel LO-HI NAME"
# lines (its stderr).
#
# A sample counts as a JIT sample when its leaf user-space frame (the first
# frame whose dso is not [kernel.kallsyms]) is in a framejit kernel, which we
# recognize by any of:
#   - its symbol is one of the kernel names callchain printed (perf names
#     kernels from the /dev/shm arena files' .symtab);
#   - its dso is where perf puts JIT code: /tmp/perf-PID.map (perf uses that
#     name for anonymous executable memory even when the file does not exist),
#     //anon, an arena file /dev/shm/framejit*, a /memfd:framejit* mapping;
#   - its dso is unknown and its address lies in a kernel range callchain
#     printed (perf prints absolute addresses for anonymous memory).
# A JIT sample "reaches main" when inner, outer and main appear in its chain
# in that order (leaf first). A JIT sample is "named" when perf gave its leaf
# a symbol (from the arena file's .symtab), and "kname" when that symbol is
# one of the kernel names callchain printed. Prints
# "jit=N ok=M named=K total=T kname=L"; with a third argument "bytid" (and
# `perf script -F pid,tid,...` input) also one "tid=T jit=N ok=M" line per
# thread that had JIT samples, after it.
analyze_perf_script() {
    local kernels="$1" pid="$2" bytid="${3:-}"
    awk -v pid="$pid" -v kfile="$kernels" -v bytid="$bytid" '
    function pad(h) { h = tolower(h); sub(/^0x/, "", h); while (length(h) < 16) h = "0" h; return h }
    function base(s) { sub(/\+0x[0-9a-f]+$/, "", s); sub(/\..*$/, "", s); return s }
    BEGIN {
        nk = 0
        while ((getline line < kfile) > 0) {
            if (line !~ /^callchain: kernel /) continue
            split(line, f, " ")
            split(f[3], r, "-")
            nk++; lo[nk] = pad(r[1]); hi[nk] = pad(r[2]); kname[f[4]] = 1
        }
        total = 0; jit = 0; ok = 0; named = 0; knamed = 0; insample = 0
    }
    function finish() {
        if (!insample) return
        insample = 0
        if (pid != "" && mypid != pid) return
        total++
        if (!isjit) return
        jit++
        tjit[mytid]++
        if (stage == 3) { ok++; tok[mytid]++ }
        if (leafnamed) named++
        if (leafk) knamed++
    }
    /^[ \t]*$/ { finish(); next }
    /^[^ \t]/ || /^ +[0-9]+(\/[0-9]+)? *$/ {
        # sample header: "  PID/TID" or "PID"
        finish()
        insample = 1; leafseen = 0; isjit = 0; leafnamed = 0; leafk = 0; stage = 0
        h = $1; sub(/\/.*/, "", h); mypid = h
        mytid = $1; sub(/^[0-9]+\//, "", mytid)
        next
    }
    insample {
        # "ip sym (dso)"; the dso may read "(/memfd:framejit (deleted))".
        ip = $1
        line = $0; sub(/^[ \t]*[0-9a-fA-F]+ /, "", line)
        dso = "[unknown]"; sym = line
        if (match(line, / \((\(deleted\)|[^()])*\)$/)) {
            dso = substr(line, RSTART + 2, RLENGTH - 3)
            sym = substr(line, 1, RSTART - 1)
        }
        if (!leafseen && dso != "[kernel.kallsyms]") {
            leafseen = 1
            leafnamed = sym != "[unknown]"
            s = base(sym)
            if (sym in kname || s in kname) { isjit = 1; leafk = 1 }
            else if (dso ~ /^\/tmp\/perf-[0-9]+\.map$/ || dso ~ /^\/\/anon/ ||
                     dso ~ /^\/dev\/shm\/framejit/ || dso ~ /^\/memfd:framejit/) isjit = 1
            else if (dso == "[unknown]") {
                p = pad(ip)
                for (k = 1; k <= nk; k++) if (p >= lo[k] && p < hi[k]) isjit = 1
            }
        }
        s = base(sym)
        if (stage == 0 && s == "inner") stage = 1
        else if (stage == 1 && s == "outer") stage = 2
        else if (stage == 2 && s == "main") stage = 3
    }
    END {
        finish(); printf "jit=%d ok=%d named=%d total=%d kname=%d\n", jit, ok, named, total, knamed
        if (bytid != "") for (t in tjit) printf "tid=%s jit=%d ok=%d\n", t, tjit[t], tok[t] + 0
    }
    '
}
