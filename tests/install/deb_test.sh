#!/usr/bin/env bash
# The Debian package (as `make deb` builds it with CPack) installs on this
# machine with dpkg, declares its runtime dependencies, runs (seedd --version,
# a daemon serving a model, seedctl pull from it, import seedd in python3) and
# is removed without a trace. Needs root (it installs into /usr).
# Usage: deb_test.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
tmp="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2> /dev/null
  dpkg -r seedd > /dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "deb_test: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root to install a package"

(cd "$build" && cpack -G DEB -B "$tmp/cpack" > "$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; fail "cpack"; }
deb="$(ls "$tmp"/cpack/seedd_*.deb)"
info="$(dpkg-deb --info "$deb")"
dpkg-deb --contents "$deb" > "$tmp/contents"
echo "$info" | grep -q "^ Depends:.*libssl3" || { echo "$info"; fail "the package does not declare libssl3"; }
echo "$info" | grep -q "^ Depends:.*libcurl4" || { echo "$info"; fail "the package does not declare libcurl4"; }
for f in ./usr/bin/seedd ./usr/bin/seedctl ./usr/include/seedd/weights.h ./usr/include/seedd/seedd_c.h \
         ./usr/lib/systemd/system/seedd.service ./usr/lib/sysusers.d/seedd.conf \
         ./usr/share/doc/seedd/examples/seedd.toml; do
  grep -q " $f$" "$tmp/contents" || fail "$f is not in the package"
done
grep -q "/pkgconfig/seedd.pc$" "$tmp/contents" || fail "seedd.pc is not in the package"
grep -q "/libseedd_c.so$" "$tmp/contents" || fail "libseedd_c.so is not in the package"

dpkg -r seedd > /dev/null 2>&1 || true
dpkg -i "$deb" > "$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i"; }
/usr/bin/seedd --version | grep -q "^seedd " || fail "seedd --version"
grep -q "^ExecStart=/usr/bin/seedd " /usr/lib/systemd/system/seedd.service || fail "the unit's ExecStart"
grep -q "^Type=notify" /usr/lib/systemd/system/seedd.service || fail "the unit is not Type=notify"
getent passwd seedd > /dev/null || fail "the seedd user was not created"

# The installed programs serve and pull a model.
mkdir -p "$tmp/model"
head -c 3000000 /dev/urandom > "$tmp/model/w.bin"
echo '{"layers": 2}' > "$tmp/model/config.json"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/token"
chmod 600 "$tmp/token"
/usr/bin/seedd --listen 127.0.0.1:0 --token-file "$tmp/token" --cache-dir "$tmp/cache" \
  --model "m=$tmp/model" > "$tmp/seedd.out" 2> "$tmp/seedd.err" &
pid=$!
for _ in $(seq 1 300); do
  grep -q "serving on" "$tmp/seedd.out" 2> /dev/null && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
addr="$(sed -n 's/^seedd: serving on //p' "$tmp/seedd.out")"
[ -n "$addr" ] || { cat "$tmp/seedd.err"; fail "the installed seedd did not start"; }
/usr/bin/seedctl pull --source "$addr" --model m --into "$tmp/out" --token-file "$tmp/token" \
  > "$tmp/pull.out" 2>&1 || { cat "$tmp/pull.out"; fail "seedctl pull from the installed seedd"; }
diff -r "$tmp/model" "$tmp/out" > /dev/null || fail "the pulled model differs"
(cd "$tmp" && env -u PYTHONPATH /usr/bin/python3 -c "import seedd; assert seedd.__file__.startswith('/usr/lib/'), seedd.__file__") ||
  fail "import seedd from the installed package"
kill -TERM "$pid"
wait "$pid" || fail "seedd did not stop cleanly"
pid=""

dpkg -r seedd > "$tmp/dpkg-r.log" 2>&1 || { cat "$tmp/dpkg-r.log"; fail "dpkg -r"; }
[ ! -e /usr/bin/seedd ] || fail "/usr/bin/seedd is still there after dpkg -r"
echo "deb_test: OK ($(basename "$deb"), $(du -h "$deb" | cut -f1))"
