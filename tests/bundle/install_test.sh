#!/usr/bin/env bash
# ctest install.path (label integration): scripts/install.sh links PREFIX/bin/trainer to this build,
# the link runs from a clean PATH, a second install replaces its own link, and a PREFIX/bin/trainer
# that is a file or a link to another program is refused with one line, exit 1, left as it was.
#   tests/bundle/install_test.sh BUILD_DIR
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
source "$(dirname "$0")/../support/shell_test.sh"
scratch_folder install-test
install() { U3D_BUILD_DIR="$BUILD" PATH="/usr/bin:/bin" "$SRC/scripts/install.sh" --prefix "$T/prefix"; }

install | tee "$T/out.txt"
[ -L "$T/prefix/bin/trainer" ] || fail "no link $T/prefix/bin/trainer"
[ "$(readlink "$T/prefix/bin/trainer")" = "$BUILD/trainer" ] || fail "the link does not point to $BUILD/trainer"
grep -q "export PATH=\"$T/prefix/bin:\$PATH\"" "$T/out.txt" || fail "no PATH line printed for a prefix not on PATH"
env -i "PATH=$T/prefix/bin:/usr/bin:/bin" HOME="$T" trainer --version | grep -q '^trainer ' ||
  fail "trainer on PATH did not run"
out="$(U3D_BUILD_DIR="$BUILD" PATH="$T/prefix/bin:/usr/bin:/bin" "$SRC/scripts/install.sh" --prefix "$T/prefix")"
echo "$out" | grep -q "is on PATH" || fail "a second install with the prefix on PATH: $out"

expect_refused() {
  local what="$1" rc=0
  install > /dev/null 2> "$T/err.txt" || rc=$?
  cat "$T/err.txt"
  [ "$rc" = 1 ] || fail "$what: exit $rc, expected 1"
  [ "$(wc -l < "$T/err.txt")" = 1 ] || fail "$what: expected one line on stderr"
}
rm "$T/prefix/bin/trainer"
echo "#!/bin/sh" > "$T/prefix/bin/trainer"
expect_refused "a file"
grep -q '^#!/bin/sh' "$T/prefix/bin/trainer" || fail "the user's file was changed"
rm "$T/prefix/bin/trainer"
ln -s /bin/true "$T/prefix/bin/trainer"
expect_refused "a link to another program"
[ "$(readlink "$T/prefix/bin/trainer")" = /bin/true ] || fail "the user's link was changed"
echo "PASS"
