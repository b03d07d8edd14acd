# Sourced by the shell tests (tests/bundle/*_test.sh, tests/support/torch_test.sh): what each of them
# needs first, written once.
#   source "$(dirname "$0")/../support/shell_test.sh"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"  # the source tree
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $*"; }
# scratch_folder NAME: T is a new empty folder (u3d-NAME-*) removed on exit, together with the
# process whose id a test keeps in $pid (a run it started and may not have stopped).
scratch_folder() {
  T="$(mktemp -d "${TMPDIR:-/tmp}/u3d-$1-XXXXXX")"
  pid=""
  trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$T"' EXIT
}
# need_venv DIR: skipped (exit 77) without the torch venv DIR (scripts/setup.sh makes it).
need_venv() { [ -n "$1" ] && [ -x "$1/bin/python" ] || { echo "SKIP: no torch venv ($1)"; exit 77; }; }
# bundle_tarball BUILD_DIR OUT_DIR: scripts/bundle.sh --no-build of BUILD_DIR into OUT_DIR; prints the
# tarball's path.
bundle_tarball() { U3D_BUILD_DIR="$1" "$SRC/scripts/bundle.sh" --no-build --out "$2" | tail -n1; }
# kill_during SECTION SECONDS REPORT WORK LOG COMMAND...: runs COMMAND (gpu-check.sh or workflows.sh with
# --report REPORT --work WORK) into LOG, SIGKILLs it once REPORT says SECTION runs (waiting at most
# SECONDS), and fails unless every process it started is gone. The caller checks the report.
kill_during() {
  local section="$1" seconds="$2" report="$3" work="$4" log="$5"
  shift 5
  "$@" > "$log" 2>&1 &
  pid=$!
  python3 "$SRC/tests/bundle/gpu_check_report.py" wait "$report" "$section" "$seconds" ||
    { cat "$log"; fail "section $section never ran"; }
  sleep 0.5  # a command of the section is running now
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
  sleep 1
  python3 "$SRC/tests/bundle/gpu_check_report.py" alive "$work" || fail "the killed run left processes"
}
