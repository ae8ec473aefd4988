#!/usr/bin/env bash
# The container image holds everything seedd needs: built as `make image` does
# (packaging/image/build.sh into a private buildah store), its root filesystem
# mounted, and the programs run inside it with chroot as its unprivileged
# user: seedd --version, a daemon serving a model, seedctl pulling it byte for
# byte, and seedctl reaching for an upstream with libcurl. A missing library fails the first run. Containers cannot be started
# here; chroot runs the same files. Prints how long the build and the run took.
# Usage: tests/image/image_test.sh BIN_DIR
set -euo pipefail
# A failing command is named, not only the script's status.
trap 'echo "image test: line $LINENO: \"$BASH_COMMAND\" failed with status $?" >&2' ERR
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/../.." && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "image test: needs root (chroot, buildah)" >&2; exit 1; }
work="$(mktemp -d)"
store=(--root "$work/store" --runroot "$work/run" --storage-driver vfs)
ctr=""
cleanup() {
  [ -n "${daemon_pid:-}" ] && kill "$daemon_pid" 2>/dev/null || true
  [ -n "$ctr" ] && { buildah "${store[@]}" umount "$ctr" > /dev/null 2>&1 || true; \
                     buildah "${store[@]}" rm "$ctr" > /dev/null 2>&1 || true; }
  rm -rf "$work"
}
trap cleanup EXIT
# The build reads the loader's library list through a pipe to its end. Here the
# list names libcurl first and goes on for a megabyte: a reader that stopped at
# libcurl's line would leave ldconfig writing into a closed pipe, and the
# build would fail on its SIGPIPE (as it did, now and then, on shorter lists).
mkdir -p "$work/path"
real_ldconfig="$(command -v ldconfig)"
cat > "$work/path/ldconfig" <<EOF
#!/bin/sh
[ "\$1" = "-p" ] || exec "$real_ldconfig" "\$@"
"$real_ldconfig" -p | grep 'libcurl\.so\.4 (libc6,x86-64)'
for i in \$(seq 1 16); do "$real_ldconfig" -p; done
EOF
chmod +x "$work/path/ldconfig"
t0=$(date +%s.%N)
PATH="$work/path:$PATH" BUILDAH_FLAGS="${store[*]}" bash "$root/packaging/image/build.sh" "$bin" "$work/stage"
t1=$(date +%s.%N)
version="$("$bin/seedd" --version | awk '{print $2}')"
config="$(buildah "${store[@]}" inspect --type image "seedd:$version")"
python3 - "$config" <<'PY'
import json, sys
c = json.loads(sys.argv[1])["OCIv1"]["config"]
assert c["User"] == "65532:65532", c["User"]
assert c["Entrypoint"] == ["/usr/bin/seedd"], c["Entrypoint"]
assert "7420/tcp" in c["ExposedPorts"] and "9090/tcp" in c["ExposedPorts"], c["ExposedPorts"]
PY
ctr="$(buildah "${store[@]}" from "seedd:$version")"
fs="$(buildah "${store[@]}" mount "$ctr")"
# Nothing but the programs, their libraries and a few files.
[ ! -e "$fs/bin/sh" ] && [ ! -e "$fs/usr/bin/sh" ] || { echo "the image has a shell" >&2; exit 1; }
run() { chroot --userspec=65532:65532 "$fs" "$@"; }
run /usr/bin/seedd --version | grep -q "^seedd $version"
run /usr/bin/seedctl --help > /dev/null
# A model served by a daemon in the image, pulled by seedctl from the image.
mkdir -p "$fs/tmp/model/sub"
head -c 3145745 /dev/urandom > "$fs/tmp/model/model.bin"
echo '{"layers": 2}' > "$fs/tmp/model/sub/config.json"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$fs/tmp/token"
chown -R 65532:65532 "$fs/tmp/model" "$fs/tmp/token"
chmod 600 "$fs/tmp/token"
# The image's own command line (its CMD) is a configuration seedd accepts.
cmd="$(python3 -c 'import json,sys; print(" ".join(json.loads(sys.argv[1])["OCIv1"]["config"]["Cmd"]))' "$config")"
# shellcheck disable=SC2086
run /usr/bin/seedd --check-config $cmd --token-file /tmp/token > /dev/null
# chroot itself in the background (not the run function, whose subshell is what
# $! would name): it execs seedd, so $! is the daemon that cleanup stops.
chroot --userspec=65532:65532 "$fs" /usr/bin/seedd --listen 127.0.0.1:0 \
  --cache-dir /var/cache/seedd --token-file /tmp/token --model m=/tmp/model --log-level warn \
  > "$work/daemon.out" 2> "$work/daemon.err" &
daemon_pid=$!
for _ in $(seq 1 500); do
  grep -q "serving on" "$work/daemon.out" && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/daemon.err" >&2; exit 1; }
  sleep 0.02
done
addr="$(sed -n 's/^seedd: serving on //p' "$work/daemon.out")"
[ -n "$addr" ] || { echo "the daemon in the image did not start" >&2; cat "$work/daemon.err" >&2; exit 1; }
run /usr/bin/seedctl pull --model m --source "$addr" --into /tmp/out --token-file /tmp/token \
  --progress none > /dev/null
diff -r "$fs/tmp/model" "$fs/tmp/out"
# libcurl, opened only for an upstream, is in the image with its libraries: a
# pull from a registry that is not there fails in the connection, not in the
# loader.
if run /usr/bin/seedctl pull --from oci://127.0.0.1:1/models/none:v1 --into /tmp/none \
  > /dev/null 2> "$work/upstream.err"; then
  echo "image test: a pull from a registry that is not there succeeded" >&2
  exit 1
fi
{ grep -q "http://127.0.0.1:1/v2/models/none/manifests/v1: " "$work/upstream.err" &&
  grep -q "Couldn't connect" "$work/upstream.err"; } ||
  { echo "image test: the pull from an upstream failed otherwise:" >&2; cat "$work/upstream.err" >&2; exit 1; }
# The daemon stops with the test: no process is left running inside the image.
kill "$daemon_pid"
wait "$daemon_pid" 2> /dev/null || true
daemon_pid=""
for p in /proc/[0-9]*; do
  [ "$(readlink "$p/root" 2> /dev/null)" != "$fs" ] || {
    echo "image test: a process outlived its test inside the image: $(tr '\0' ' ' < "$p/cmdline")" >&2
    exit 1
  }
done
t2=$(date +%s.%N)
echo "image test: seedd:$version built in $(awk "BEGIN {printf \"%.1f\", $t1 - $t0}") s" \
  "($(du -sh "$work/stage/rootfs" | cut -f1)); inside it seedd served and seedctl pulled a model" \
  "byte for byte in $(awk "BEGIN {printf \"%.1f\", $t2 - $t1}") s"
