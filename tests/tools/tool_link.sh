#!/usr/bin/env bash
# tool_link.sh BUILD_DIR: linking framejit must not change which _Unwind_*
# implementation a program uses, and must not pull libunwind in.
#
# Installs the build into a scratch root (meson install --destdir; the
# uninstalled pkg-config file when that fails), builds the link_* programs
# next to this script the way a user would, with
# `cc prog.c $(pkg-config --cflags --libs framejit)`, and runs them:
#   link_c     _Unwind_RaiseException/_Unwind_Backtrace come from libgcc_s,
#              libunwind is not in the global scope, _Unwind_Backtrace walks
#              from a callback through a JIT kernel to main;
#   link_cxx   the same from C++, plus exceptions in plain C++ and through a
#              builder kernel;
#   link_unw   a program that links -lunwind itself: unw_backtrace from a
#              callback of a JIT kernel finds the kernel and main;
#   link_cxx_static  link_cxx built with `pkg-config --static --libs`: the
#              private link flags must not bring libunwind in either.
# Also: libframejit.so has no DT_NEEDED entry for libunwind, framejit.pc
# names libunwind nowhere (Requires, Requires.private, Libs.private), and
# the library exports only the public API (fj_* names declared in the
# installed headers) and the GDB JIT interface's two symbols.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

BUILD="$(cd "$1" && pwd)"
SRC="$(cd "$(dirname "$0")" && pwd)"
make_tmp
CC="${CC:-cc}"
CXX="${CXX:-c++}"
command -v pkg-config >/dev/null 2>&1 || skip "pkg-config is not installed"

if meson install -C "$BUILD" --destdir "$TMP/inst" --no-rebuild --quiet >"$TMP/install.log" 2>&1; then
    pc="$(find "$TMP/inst" -name framejit.pc | head -1)"
    [[ -n "$pc" ]] || fail "meson install did not install framejit.pc"
    PKG_CONFIG_PATH="$(dirname "$pc")"
    export PKG_CONFIG_PATH
    # The .pc names the final prefix; the sysroot maps it into the scratch root.
    export PKG_CONFIG_SYSROOT_DIR="$TMP/inst"
    libdir="$(dirname "$(dirname "$pc")")"
    say "installed into a scratch root; pkg-config file $(basename "$pc")"
else
    say "meson install failed; using the uninstalled pkg-config file:"
    show "$TMP/install.log"
    export PKG_CONFIG_PATH="$BUILD/meson-uninstalled"
    libdir="$BUILD"
fi
flags="$(pkg-config --cflags --libs framejit)" || fail "pkg-config does not find framejit"
static_flags="$(pkg-config --static --cflags --libs framejit)"
say "pkg-config --cflags --libs framejit: $flags"
say "pkg-config --static --cflags --libs framejit: $static_flags"
lib="$libdir/libframejit.so"
[[ -e "$lib" ]] || fail "no $lib"

# ---- libframejit.so must not need libunwind ---------------------------------
readelf -d "$lib" >"$TMP/dynamic"
grep NEEDED "$TMP/dynamic" | sed 's/^/    /'
if grep NEEDED "$TMP/dynamic" | grep -qi 'libunwind'; then
    fail "libframejit.so has a DT_NEEDED entry for libunwind"
fi
say "ok: no DT_NEEDED libunwind in libframejit.so"

# ---- libframejit.so exports only the public API ------------------------------
command -v nm >/dev/null 2>&1 || skip "nm (binutils) is not installed"
incdir="$(pkg-config --variable=includedir framejit)"
# The installed headers (pkg-config may or may not prefix the scratch root),
# else the source tree's.
for d in "${PKG_CONFIG_SYSROOT_DIR:-}$incdir" "$incdir" "$SRC/../../include"; do
    [[ -f "$d/framejit.h" ]] && { incdir="$d"; break; }
done
[[ -f "$incdir/framejit.h" ]] || fail "no installed framejit.h to compare the exports with"
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u >"$TMP/exports"
bad=0
while read -r sym; do
    case "$sym" in
    __jit_debug_descriptor | __jit_debug_register_code) continue ;;
    fj_*) grep -rqw -- "$sym" "$incdir/framejit.h" "$incdir/framejit" && continue ;;
    esac
    say "exported but not public API: $sym"
    bad=1
done <"$TMP/exports"
((bad == 0)) || fail "libframejit.so exports names outside the public API (see above)"
say "ok: libframejit.so exports $(wc -l <"$TMP/exports") names, all public API or GDB JIT interface"

# ---- framejit.pc must not hand libunwind to the user's link --------------------
status=0
pcfile="$(pkg-config --path framejit 2>/dev/null || true)"
if [[ -n "$pcfile" ]] && grep -iE '^(Requires|Requires\.private|Libs|Libs\.private):.*unwind' "$pcfile"; then
    say "FAIL: $(basename "$pcfile") names libunwind (see the lines above): a program linked with"
    say "      \`pkg-config --static --libs framejit\` gets libunwind's _Unwind_* (link_cxx_static)"
    status=1
fi

# ---- build the programs as a user would ---------------------------------------
unw_flags="$(PKG_CONFIG_SYSROOT_DIR="" pkg-config --cflags --libs libunwind)"
# shellcheck disable=SC2086  # the flags are lists of words
{
    $CC -o "$TMP/link_c" "$SRC/link_c.c" -rdynamic $flags &&
    $CXX -o "$TMP/link_cxx" "$SRC/link_cxx.cpp" $flags &&
    $CC -o "$TMP/link_unw" "$SRC/link_unw.c" -rdynamic $flags $unw_flags &&
    $CXX -o "$TMP/link_cxx_static" "$SRC/link_cxx.cpp" $static_flags
} 2>"$TMP/cc.log" || { show "$TMP/cc.log"; fail "building the link_* programs failed"; }

for prog in link_c link_cxx link_unw link_cxx_static; do
    rc=0
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$TMP/$prog" >"$TMP/$prog.out" 2>&1 || rc=$?
    say "$prog (exit $rc):"
    show "$TMP/$prog.out"
    ((rc == 0)) || status=1
done
((status == 0)) || fail "a link_* program failed"
say "PASS"
