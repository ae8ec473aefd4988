#!/usr/bin/env bash
# Lays out the root filesystem of seedd's container image in OUT/rootfs (and
# archives it as OUT/rootfs.tar, owners kept): the
# two programs (debug info stripped), every shared library they load with the
# dynamic loader (read off `ldd`) and libcurl with its own, CA certificates, a passwd and group naming
# the unprivileged user seedd runs as (65532), /tmp, the cache directory it
# owns, and the example configuration. Nothing else: no shell, no package
# manager. packaging/Containerfile copies it onto an empty image.
# Usage: packaging/image/stage.sh BIN_DIR OUT_DIR
set -euo pipefail
# A failing command is named, not only the script's status.
trap 'echo "stage: line $LINENO: \"$BASH_COMMAND\" failed with status $?" >&2' ERR
bin="$(cd "$1" && pwd)"
out="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
rootfs="$out/rootfs"
rm -rf "$rootfs"
mkdir -p "$rootfs"/{usr/bin,etc/seedd,etc/ssl/certs,tmp,var/cache/seedd}
# libs_of FILE: the libraries FILE loads, copied at the paths the loader looks
# for them.
libs_of() {
  ldd "$1" | awk '/=> \// {print $3} /^\t\// {print $1}' | while read -r lib; do
    [ -e "$rootfs$lib" ] && continue
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
}
for prog in seedd seedctl; do
  objcopy --strip-debug "$bin/$prog" "$rootfs/usr/bin/$prog"
  libs_of "$bin/$prog"
done
# libcurl, which seedd opens only when an S3 store or an http(s) origin needs
# it (dlopen), and its libraries.
# awk reads the whole list: exiting at the first match would leave ldconfig
# writing into a closed pipe, and its SIGPIPE fails this script (pipefail).
curl="$(ldconfig -p | awk '$1 == "libcurl.so.4" && /x86-64/ && !found {print $NF; found = 1}')"
[ -n "$curl" ] || { echo "stage: libcurl.so.4 is not installed (Debian: libcurl4)" >&2; exit 1; }
mkdir -p "$rootfs$(dirname "$curl")"
cp -L "$curl" "$rootfs$curl"
libs_of "$curl"
# The loader also searches /usr/lib/x86_64-linux-gnu when /lib is a link to it.
for d in lib lib64; do
  if [ -L "/$d" ] && [ -d "$rootfs/$d" ] && [ ! -L "$rootfs/$d" ]; then
    mkdir -p "$rootfs/usr/$d"
    cp -a "$rootfs/$d/." "$rootfs/usr/$d/"
    rm -rf "${rootfs:?}/$d"
    ln -s "usr/$d" "$rootfs/$d"
  fi
done
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
cat > "$rootfs/etc/passwd" <<'P'
root:x:0:0:root:/root:/sbin/nologin
seedd:x:65532:65532:seedd:/var/cache/seedd:/sbin/nologin
P
cat > "$rootfs/etc/group" <<'G'
root:x:0:
seedd:x:65532:
G
printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$rootfs/etc/hosts"
cp "$root/packaging/seedd.toml" "$rootfs/etc/seedd/seedd.toml"
chmod 1777 "$rootfs/tmp"
chown 65532:65532 "$rootfs/var/cache/seedd"
tar -C "$rootfs" --numeric-owner --sort=name -cf "$out/rootfs.tar" .
du -sh "$rootfs" | awk '{print "image: root filesystem " $1 " in " "'"$rootfs"'"}'
