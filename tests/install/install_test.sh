#!/usr/bin/env bash
# make install into a temporary prefix, then: the installed seedd and seedctl
# run (seedd serves with the example configuration), a program builds against
# the installed libseedd with pkg-config and runs, systemd-analyze verifies the
# unit without a warning, the Python package imports from where it was
# installed, and docs/operations.md shows the example as installed.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
tmp="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2> /dev/null; rm -rf "$tmp"' EXIT
fail() { echo "install_test: FAILED: $*" >&2; exit 1; }

prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in bin/seedd bin/seedctl include/seedd/daemon.h share/doc/seedd/examples/seedd.toml \
         lib/systemd/system/seedd.service lib/sysusers.d/seedd.conf; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done
lib="$(find "$prefix" -name libseedd.a | head -1)"
[ -n "$lib" ] || fail "libseedd.a was not installed"
pcdir="$(dirname "$(find "$prefix" -name seedd.pc | head -1)")"
[ -f "$pcdir/seedd.pc" ] || fail "seedd.pc was not installed"

# The installed binaries run.
"$prefix/bin/seedd" --version | grep -q "^seedd " || fail "seedd --version"
"$prefix/bin/seedctl" --help > /dev/null || fail "seedctl --help"

# The example configuration starts a daemon (paths that need root overridden),
# and every setting it shows, uncommented, is accepted.
example="$prefix/share/doc/seedd/examples/seedd.toml"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/token"
chmod 600 "$tmp/token"
"$prefix/bin/seedd" --config "$example" --listen 127.0.0.1:0 --token-file "$tmp/token" \
  --cache-dir "$tmp/cache" > "$tmp/seedd.out" 2> "$tmp/seedd.err" &
pid=$!
for _ in $(seq 1 300); do
  grep -q "serving on" "$tmp/seedd.out" 2> /dev/null && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
grep -q "^seedd: serving on 127.0.0.1:" "$tmp/seedd.out" || { cat "$tmp/seedd.err"; fail "seedd --config example"; }
addr="$(sed -n 's/^seedd: serving on //p' "$tmp/seedd.out")"
"$prefix/bin/seedctl" ls --source "$addr" --token-file "$tmp/token" > /dev/null || fail "seedctl ls against the installed seedd"
kill -TERM "$pid"
wait "$pid" || fail "seedd did not stop cleanly on SIGTERM"
pid=""
# Every setting uncommented, the files it names made under $tmp (--check-config
# opens them: the TLS files parse and match, the keys load, the model and
# factors files read, the cache directory can be written).
r="$tmp/root"
sed -E 's/^# ([a-z][a-z-]* = )/\1/' "$example" |
  sed -E "s#\"/(etc|models|var)/#\"$r/\1/#g; s#=/(models|var)/#=$r/\1/#g" > "$tmp/all.toml"
mkdir -p "$r/etc/seedd/tls" "$r/models/llama-3-8b" "$r/var/cache"
echo '{}' > "$r/models/llama-3-8b/config.json"
echo '{}' > "$r/etc/seedd/compile-factors.json"
echo '{"auths": {}}' > "$r/etc/seedd/registry-auth.json"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=ca \
  -keyout "$r/etc/seedd/tls/ca.key" -out "$r/etc/seedd/tls/ca.crt" 2> /dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=seedd.internal \
  -keyout "$r/etc/seedd/tls/seedd.key" -out "$tmp/seedd.csr" 2> /dev/null
openssl x509 -req -in "$tmp/seedd.csr" -CA "$r/etc/seedd/tls/ca.crt" -CAkey "$r/etc/seedd/tls/ca.key" \
  -CAcreateserial -days 1 -out "$r/etc/seedd/tls/seedd.crt" 2> /dev/null
openssl genpkey -algorithm ed25519 -out "$r/etc/seedd/sign.pem"
openssl pkey -in "$r/etc/seedd/sign.pem" -pubout -out "$r/etc/seedd/publisher.pub.pem"
grep -q "$r/etc/seedd/tls/seedd.crt" "$tmp/all.toml" || fail "the example's paths were not moved under $r"
for flag in $("$prefix/bin/seedd" --help | sed -nE 's/^  --([a-z][a-z-]*).*/\1/p'); do
  case "$flag" in help | version | config | check-config) continue ;; esac
  grep -qE "^$flag = " "$tmp/all.toml" || fail "the example does not show --$flag"
done
"$prefix/bin/seedd" --config "$tmp/all.toml" --token-file "$tmp/token" --check-config \
  > "$tmp/check.out" 2>&1 || { cat "$tmp/check.out"; fail "a setting of the example is refused"; }
grep -q "configuration OK" "$tmp/check.out" || fail "--check-config did not say OK"
# A file it names that is missing fails the check, not the restart.
rm "$r/etc/seedd/tls/seedd.crt"
if "$prefix/bin/seedd" --config "$tmp/all.toml" --token-file "$tmp/token" --check-config \
  > "$tmp/check.out" 2>&1; then
  fail "--check-config passed with the certificate missing"
fi
grep -q "seedd.crt" "$tmp/check.out" || { cat "$tmp/check.out"; fail "--check-config did not name the missing certificate"; }

# A program built against the installed library with pkg-config.
cat > "$tmp/tiny.cc" << 'CC'
#include <seedd/daemon.h>
#include <seedd/tokens.h>
#include <seedd/weights.h>
#include <cstdio>
#include <fstream>
int main(int argc, char** argv) {
  auto where = seedd::ParseHostPort("127.0.0.1:7420");
  seedd::TokenRing ring({"first", "second"});
  if (!where.ok() || ring.Sent() != "first" || !ring.Accepts("second")) return 1;
  // The weights API: a manifest built, then validated as a peer's would be.
  std::filesystem::create_directories(argv[1]);
  std::ofstream(std::string(argv[1]) + "/config.json") << "{}";
  auto built = seedd::BuildManifest("tiny", argv[1], {});
  if (!built.ok()) return 2;
  auto parsed = seedd::ParseManifest(built->ToJson());
  if (!parsed.ok() || parsed->root_digest != built->root_digest) return 3;
  std::printf("tiny: %s %llu\n", where->ToString().c_str(),
              static_cast<unsigned long long>(parsed->chunk_size));
  return 0;
}
CC
export PKG_CONFIG_PATH="$pcdir"
# shellcheck disable=SC2046
g++ -std=c++20 "$tmp/tiny.cc" -o "$tmp/tiny" $(pkg-config --cflags --libs seedd) || fail "building against seedd.pc"
[ "$("$tmp/tiny" "$tmp/tiny-model")" = "tiny: 127.0.0.1:7420 262144" ] || fail "the program built against libseedd"

# A C program against the installed C API, when built (libseedd_c.so).
if [ -f "$build/lib/libseedd_c.so" ]; then
  clib="$(dirname "$(find "$prefix" -name libseedd_c.so | head -1)")"
  [ -f "$clib/libseedd_c.so" ] || fail "libseedd_c.so was not installed"
  cat > "$tmp/capi.c" << 'C'
#include <seedd/seedd_c.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  char* manifest = NULL;
  char* error = NULL;
  int rc = seedd_parse_manifest("{}", &manifest, &error);
  if (rc == 0 || error == NULL || strstr(error, "InvalidArgument") == NULL) return 1;
  seedd_free(error);
  printf("%s\n", seedd_version());
  return 0;
}
C
  cc "$tmp/capi.c" -I"$prefix/include" -L"$clib" -lseedd_c -Wl,-rpath,"$clib" -o "$tmp/capi" ||
    fail "building a C program against libseedd_c"
  "$tmp/capi" | grep -qE "^[0-9]+\.[0-9]+\.[0-9]+$" || fail "the C program against libseedd_c"
fi

# The Python package, when built: importable from the installed site-packages
# alone (nothing of the build tree on the path), its manifest the library's.
if [ -d "$build/python/seedd" ]; then
  init="$(find "$prefix" -path '*/seedd/__init__.py' | head -1)"
  [ -n "$init" ] || fail "the Python package was not installed"
  site="$(dirname "$(dirname "$init")")"
  got="$(cd "$tmp" && PYTHONPATH="$site" /usr/bin/python3 -c "
import seedd, sys
assert seedd.__file__.startswith('$prefix'), seedd.__file__
m = seedd.Manifest.build('tiny', sys.argv[1])
print(m.chunk_size)" "$tmp/tiny-model")" || fail "import seedd from the installed package"
  [ "$got" = "262144" ] || fail "the installed Python package: $got"
  # Installed with the prefix /usr/local, the same directory is on the path of
  # the python it was built for: no PYTHONPATH needed.
  rel="${site#"$prefix"/}"
  /usr/bin/python3 -c "import sys; sys.exit('/usr/local/$rel' not in sys.path)" ||
    fail "/usr/local/$rel (where make install puts the package) is not on python3's path"
fi

# The unit: systemd-analyze verify prints nothing for a unit without fault
# (it exits 0 on unknown keys and bad values, so its output is what counts).
unit="$prefix/lib/systemd/system/seedd.service"
grep -q "^ExecStart=$prefix/bin/seedd --config /etc/seedd/seedd.toml$" "$unit" || fail "ExecStart names $prefix"
for hardening in "ProtectSystem=strict" "ReadWritePaths=/var/cache/seedd" "NoNewPrivileges=yes" \
                 "CapabilityBoundingSet=$"; do
  grep -q "^$hardening" "$unit" || fail "the unit lacks $hardening"
done
systemd-analyze verify "$unit" > "$tmp/verify.out" 2>&1 || { cat "$tmp/verify.out"; fail "systemd-analyze verify"; }
[ ! -s "$tmp/verify.out" ] || { cat "$tmp/verify.out"; fail "systemd-analyze verify warned"; }

# docs/operations.md shows the example exactly as installed.
awk '/^<!-- seedd.toml -->/ {on = 1; next} on && /^```toml/ {next} on && /^```/ {exit} on' \
  "$src/docs/operations.md" > "$tmp/doc.toml"
diff -u "$src/packaging/seedd.toml" "$tmp/doc.toml" > /dev/null || { diff -u "$src/packaging/seedd.toml" "$tmp/doc.toml"; fail "docs/operations.md's example differs from packaging/seedd.toml"; }
echo "install_test: all checks passed"
