#!/usr/bin/env bash
# The wheel (scripts/build_wheel.py, as `make wheel` builds it) installs with
# `pip install --no-index --find-links DIST seedd` into a fresh venv of each
# CPython given, and there, with nothing else on the path, the transport and a
# pull work (tests/python/wheel_check.py). An interpreter older than the
# package serves is refused by pip, and an import under it names the versions.
# Usage: wheel_test.sh BUILD_DIR SOURCE_DIR [VERSION...] (pyenv versions, e.g. 3.9)
set -euo pipefail
build="$1"
src="$(cd "$2" && pwd)"
build="$(cd "$build" && pwd)"
shift 2
versions=("$@")
[ $# -gt 0 ] || versions=(3.9 3.12 3.13)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "wheel_test: FAILED: $*" >&2; exit 1; }
pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
python_of() { ls -d "$pyenv_root"/versions/"$1".*/bin/python3 2> /dev/null | sort -V | tail -1; }

python3 "$src/scripts/build_wheel.py" "$build" "$tmp/dist" || fail "build_wheel.py"
# libcurl, which libseedd_c opens only for an S3 store or an http(s) origin,
# travels beside it.
python3 - "$tmp"/dist/seedd-*.whl <<'PY' || fail "the wheel does not carry libcurl.so.4 beside libseedd_c.so"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
sys.exit(0 if "seedd/libcurl.so.4" in names and "seedd/libseedd_c.so" in names else 1)
PY
unset PYTHONPATH
for v in "${versions[@]}"; do
  py="$(python_of "$v")"
  [ -x "$py" ] || fail "CPython $v is not under $pyenv_root/versions (scripts/setup.sh installs pyenv's)"
  start=$(date +%s%N)
  "$py" -m venv "$tmp/venv-$v" || fail "venv for $v"
  "$tmp/venv-$v/bin/python" -m pip install -q --disable-pip-version-check --no-index \
    --find-links "$tmp/dist" seedd > "$tmp/pip-$v.log" 2>&1 || { cat "$tmp/pip-$v.log"; fail "pip install under $v"; }
  mkdir -p "$tmp/work-$v"
  (cd "$tmp/work-$v" && "$tmp/venv-$v/bin/python" "$src/tests/python/wheel_check.py" \
    "$build/bin/seedd" "$tmp/work-$v") || fail "the installed wheel under CPython $v"
  echo "wheel_test: CPython $v: venv, install and checks in $(( ($(date +%s%N) - start) / 1000000 )) ms"
done

# An interpreter the package does not serve: pip refuses it (Requires-Python),
# and the package imported by path says which versions it serves.
old="$(python_of 3.8)"
if [ -x "$old" ]; then
  "$old" -m venv "$tmp/venv-old"
  if "$tmp/venv-old/bin/python" -m pip install -q --disable-pip-version-check --no-index \
    --find-links "$tmp/dist" seedd > "$tmp/pip-old.log" 2>&1; then
    fail "pip installed the wheel into CPython 3.8"
  fi
  grep -qi "requires-python\|requires a different python" "$tmp/pip-old.log" ||
    { cat "$tmp/pip-old.log"; fail "pip's refusal under 3.8 does not name Requires-Python"; }
  msg="$(cd "$tmp" && PYTHONPATH="$build/python" "$old" -c 'import seedd' 2>&1 || true)"
  echo "$msg" | grep -q "seedd supports CPython 3.9 and newer.*this interpreter is cpython 3.8" ||
    fail "importing under 3.8 said: $msg"
else
  fail "CPython 3.8 is not under $pyenv_root/versions"
fi
echo "wheel_test: OK"
