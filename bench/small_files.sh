#!/usr/bin/env bash
# small files: a model of many small files (FILES, default 5,000, 16.7 MiB in
# 50 directories: a compile cache's or a tokenizer-heavy repository's shape)
# served by one daemon and pulled by seedctl into a directory on disk, against
# the baseline from the same run: `tar -c | tar -x` over a loopback TCP
# connection followed by a syncfs of the destination (what copying the files
# costs here, with the durability a pull promises). Medians of REPS (3) runs;
# the target is a pull within 2x the baseline. The destinations are on a fresh
# ext4 file system (an image under BENCH_DIR, default /var/tmp, on a loop
# device; as root): on a file system with many recently deleted files, ext4
# spends most of a create looking past them, whoever creates (tar too), and
# the figures then say more about the disk's history than about the copy.
# Without root, a directory under BENCH_DIR.
# Usage: bench/small_files.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
files="${FILES:-5000}"
reps="${REPS:-3}"
source "$root/scripts/seedd_lib.sh"
disk="$(mktemp -d "${BENCH_DIR:-/var/tmp}/seedd-small.XXXXXX")"
trap 'cleanup; mountpoint -q "$disk/fs" && umount "$disk/fs"; rm -rf "$disk"' EXIT
dests="$disk"
if [ "$(id -u)" -eq 0 ] && command -v mkfs.ext4 > /dev/null; then
  truncate -s 2G "$disk/fs.img"
  mkfs.ext4 -q -F -N $((files * 2 * (reps + 1) + 10000)) "$disk/fs.img"
  mkdir "$disk/fs"
  if mount -o loop "$disk/fs.img" "$disk/fs"; then
    dests="$disk/fs"
    echo "small files: destinations on a fresh ext4 file system ($disk/fs.img on a loop device)"
  fi
fi
umask 077
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")

echo "small files: generating $files files in $disk/model"
python3 - "$disk/model" "$files" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
total = 0
for i in range(n):
    d = os.path.join(root, "d%02d" % (i % 50))
    os.makedirs(d, exist_ok=True)
    size = rng.randint(300, 6700)  # 3.4 KiB on average
    with open(os.path.join(d, "f%05d.bin" % i), "wb") as f:
        f.write(os.urandom(size))
    total += size
print("small files: %d files, %.1f MiB" % (n, total / 1048576))
PY
sync -f "$disk"

median() { sort -n | sed -n "$(((reps + 1) / 2))p"; }
# The pull is timed by the shell itself: starting a Python interpreter to read a
# clock takes up to half a second on a loaded machine, as long as the pull.

# The baseline: tar over loopback TCP, then syncfs of the destination.
tar_once() {  # tar_once DEST
  local dest="$1"
  mkdir -p "$dest"
  sync -f "$dests"
  python3 - "$disk/model" "$dest" <<'PY'
import socket, subprocess, sys, time
src, dest = sys.argv[1], sys.argv[2]
t0 = time.monotonic()
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
sender = socket.create_connection(listener.getsockname())
receiver, _ = listener.accept()
x = subprocess.Popen(["tar", "-x", "-C", dest], stdin=receiver.fileno())
c = subprocess.Popen(["tar", "-c", "-C", src, "."], stdout=sender.fileno())
receiver.close()
sender.close()
if c.wait() != 0 or x.wait() != 0:
    sys.exit("small files: the tar baseline failed")
subprocess.run(["sync", "-f", dest], check=True)
print(time.monotonic() - t0)
PY
}

start_seedd S --model "small=$disk/model" --log-level warn
pull_once() {  # pull_once DEST
  local dest="$1" t0 t1
  sync -f "$dests"
  t0="${EPOCHREALTIME/,/.}"
  "$bin/seedctl" pull --source "$addr" --token-file "$work/token" --model small --into "$dest" \
    --progress none > /dev/null
  t1="${EPOCHREALTIME/,/.}"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }'
}

# Each run lands in a new directory (removing one costs the next run: this
# disk discards freed blocks), tar and pull in turn so that both meet the disk
# in the same state; the copies are removed at the end.
tar_once "$dests/warm" > /dev/null  # the source files in the page cache
tar_runs=() pull_runs=()
for i in $(seq 1 "$reps"); do
  tar_runs+=("$(tar_once "$dests/tar-$i")")
  pull_runs+=("$(pull_once "$dests/pull-$i")")
done
tar_s="$(printf '%s\n' "${tar_runs[@]}" | median)"
pull_s="$(printf '%s\n' "${pull_runs[@]}" | median)"
diff -r "$disk/model" "$dests/pull-1" > /dev/null || { echo "small files: the pulled copy differs" >&2; exit 1; }
python3 - "$files" "$tar_s" "$pull_s" "$reps" <<'PY'
import sys
files, tar_s, pull_s, reps = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
print()
print("small files: %d files, destination on disk (medians of %d)" % (files, reps))
print("  tar -c | tar -x over loopback TCP + syncfs (baseline)  %6.2f s" % tar_s)
print("  seedctl pull from seedd                                %6.2f s  (%.2fx the baseline; target <= 2x)"
      % (pull_s, pull_s / tar_s))
PY
