#!/usr/bin/env bash
# weights (one to one): a generated model directory (SIZE_GIB, default 4) served by
# one daemon and pulled by seedctl on loopback, destination on tmpfs, then on disk;
# baselines in the same run: iperf3 -P 4 on loopback, and the least a verifying
# puller can do here (bench/weights/minimal_pull.cc: the same files over 4
# connections, received, hashed and written, or only received), and landing the
# bytes alone (written and synced from memory: no puller is faster). Peak RSS of both sides.
# The first daemon serves XXH3-128 chunk digests (--chunk-digest xxh3), the
# baseline; then the same model served with SHA-256 chunk digests (the default)
# in the same run: indexing time, pull time and the fetcher's CPU, against the
# cost of the hash alone (bench/weights/minimal_pull.cc hash: one thread, bytes
# in cache): SHA-256 costs the fetcher no more than the hash itself when its
# extra CPU per GiB is at most what the hash alone costs more than XXH3.
# Last, the same model over TLS 1.3 against plain TCP in the same run (a CA and
# a certificate made with the openssl CLI): pull time and CPU per GiB of both sides.
# Usage: bench/weights.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
size_gib="${SIZE_GIB:-4}"
source "$root/scripts/seedd_lib.sh"
if ! command -v iperf3 > /dev/null; then
  echo "weights: installing iperf3 (Debian package) for the baseline"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends iperf3 > /dev/null
fi
shm="$(mktemp -d /dev/shm/seedd-bench.XXXXXX)"
trap 'cleanup; rm -rf "$shm"' EXIT
umask 077
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")

echo "weights: generating a ${size_gib} GiB model in tmpfs"
python3 - "$shm/model" "$size_gib" <<'PY'
import json, os, struct, sys
root, gib = sys.argv[1], int(sys.argv[2])
os.makedirs(root)
block = os.urandom(64 << 20)
shards = 4 * gib
for i in range(shards):
    size = 256 << 20
    header = json.dumps({"t%d" % i: {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    with open(os.path.join(root, "model-%05d.safetensors" % i), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for k in range(4):
            f.write(block[k:] + block[:k])  # distinct chunks, cheap to make
open(os.path.join(root, "config.json"), "w").write("{}")
PY

port="$(free_port)"
iperf3 -s -B 127.0.0.1 -p "$port" > /dev/null 2>&1 &
pids+=($!)
wait_port "$port"
# Gbit/s and the receiver's CPU seconds per GiB: the median of REPS runs.
iperf_once() {
  iperf3 -c 127.0.0.1 -p "$port" -P 4 -t 5 -J | python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
r = e["sum_received"]
print(r["bits_per_second"] / 1e9, e["cpu_utilization_percent"]["remote_total"] / 100 * r["seconds"] / (r["bytes"] / 2**30))'
}
read -r iperf_gbps iperf_rx_cpu <<< "$(for _ in $(seq 1 "${REPS:-3}"); do iperf_once; done |
  sort -n | sed -n "$(((${REPS:-3} + 1) / 2))p")"
# The least a puller can do here (bench/weights/minimal_pull.cc): the same files
# over 4 connections with sendfile, received and dropped ("network"), or
# received, hashed with XXH3-128 and written ("write"). Prints "Gbit/s cpu/GiB".
minimal_pull() {  # minimal_pull network | write DEST | land DEST
  local out
  if [ "$1" = write ] || [ "$1" = land ]; then
    mkdir -p "$2"
    out="$("$bin/minimal_pull" "$1" "$2" "$shm"/model/*.safetensors)"
    rm -rf "$2"
  else
    out="$("$bin/minimal_pull" network "$shm"/model/*.safetensors)"
  fi
  sed -n 's/.*: \([0-9.]*\) Gbit\/s, receiver CPU \([0-9.]*\) s\/GiB.*/\1 \2/p' <<< "$out"
}
median_minimal() {  # median_minimal network | write DEST | land DEST: the median of REPS runs
  local rows=()
  for _ in $(seq 1 "${REPS:-3}"); do rows+=("$(minimal_pull "$@")"); done
  printf '%s\n' "${rows[@]}" | sort -n | sed -n "$(((${REPS:-3} + 1) / 2))p"
}
read -r net_gbps net_cpu <<< "$(median_minimal network)"

t0="$(date +%s.%N)"
start_seedd W --model "bench=$shm/model" --chunk-digest xxh3 --log-level warn
t1="$(date +%s.%N)"
src="$addr"
w_pid="${pids[-1]}"
pull() {  # pull DEST [FLAGS]: prints "seconds peak_rss_kib cpu_seconds"
  local dest="$1"
  shift
  /usr/bin/time -f "%e %M %U %S" -o "$work/time" "$bin/seedctl" pull --source "$src" \
    --token-file "$work/token" --model bench --into "$dest" "$@" > "$work/pull.out"
  awk '{print $1, $2, $3 + $4}' "$work/time"
}
# The first pull into tmpfs runs slower (the kernel finds fresh pages for 4 GiB);
# reported apart, then the median of REPS pulls that reuse them.
reps="${REPS:-3}"
median_pull() {  # median_pull DEST [FLAGS]: prints "seconds peak_rss_kib cpu" (median seconds)
  local dest="$1" rows=()
  shift
  for _ in $(seq 1 "$reps"); do
    rows+=("$(pull "$dest" "$@")")
    rm -rf "$dest"
  done
  printf '%s\n' "${rows[@]}" | sort -n | sed -n "$(((reps + 1) / 2))p"
}
read -r first_s first_rss <<< "$(pull "$shm/dest")"
rm -rf "$shm/dest"
read -r min_tmpfs_gbps min_tmpfs_cpu <<< "$(median_minimal write "$shm/minimal")"
read -r land_tmpfs_gbps land_tmpfs_cpu <<< "$(median_minimal land "$shm/minimal")"
read -r tmpfs_s pull_rss xxh3_cpu <<< "$(median_pull "$shm/dest")"
read -r sha_s sha_rss <<< "$(median_pull "$shm/dest" --verify sha256)"
read -r min_disk_gbps _ <<< "$(median_minimal write "$work/minimal")"
read -r land_disk_gbps land_disk_cpu <<< "$(median_minimal land "$work/minimal")"
read -r disk_s disk_rss <<< "$(median_pull "$work/dest")"
# A tmpfs with 2 MiB pages (huge=always): the destination's page allocation, a
# third of the fetcher's CPU on 4 KiB pages, mostly goes away. Needs root.
huge_first=0 huge_s=0
if [ "$(id -u)" -eq 0 ]; then
  huge="$(mktemp -d)"
  if mount -t tmpfs -o "size=$((size_gib + 1))g,huge=always" tmpfs "$huge"; then
    trap 'umount "$huge" 2> /dev/null || true; cleanup; rm -rf "$shm"' EXIT
    read -r huge_first _ <<< "$(pull "$huge/dest")"
    rm -rf "$huge/dest"
    read -r huge_s _ <<< "$(median_pull "$huge/dest")"
    umount "$huge"
  fi
fi
server_rss="$(awk '/VmHWM/ {print $2}' "/proc/$w_pid/status")"

# SHA-256 chunk digests: a second daemon indexes the same model with them (its
# own digest cache, so both hashed every byte), then the same pulls.
echo "weights: the same model with --chunk-digest sha256"
t2="$(date +%s.%N)"
start_seedd S --model "bench=$shm/model" --chunk-digest sha256 --log-level warn
t3="$(date +%s.%N)"
src="$addr"
read -r sha_chunks_s _ sha_cpu <<< "$(median_pull "$shm/dest")"
# The hash alone, per GiB of CPU: the median of REPS runs each.
hash_alone() {
  for _ in $(seq 1 "$reps"); do
    "$bin/minimal_pull" hash "$1" "$shm"/model/*.safetensors |
      sed -n 's/.*receiver CPU \([0-9.]*\) s\/GiB.*/\1/p'
  done | sort -n | sed -n "$(((reps + 1) / 2))p"
}
hash_sha="$(hash_alone sha256)"
hash_xxh3="$(hash_alone xxh3)"
# TLS 1.3: the same model from a daemon with a certificate, pulled with --tls-ca.
echo "weights: the same model over TLS 1.3"
pki="$work/pki"
mkdir -p "$pki"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/ca.key" 2> /dev/null
openssl req -x509 -new -key "$pki/ca.key" -out "$pki/ca.crt" -days 2 -subj /CN=bench-ca 2> /dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/s.key" 2> /dev/null
openssl req -new -key "$pki/s.key" -out "$pki/s.csr" -subj /CN=bench 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > "$pki/ext"
openssl x509 -req -in "$pki/s.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
  -out "$pki/s.crt" -days 2 -extfile "$pki/ext" 2> /dev/null
start_seedd T --model "bench=$shm/model" --tls-cert "$pki/s.crt" --tls-key "$pki/s.key" --log-level warn
t_pid="${pids[-1]}"
cpu_of() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }  # seconds, at 100 ticks/s
src="$addr"
tls_cpu0="$(cpu_of "$t_pid")"
read -r tls_s _ tls_cpu <<< "$(median_pull "$shm/dest" --tls-ca "$pki/ca.crt")"
tls_server_cpu="$(python3 -c "print(($(cpu_of "$t_pid") - $tls_cpu0) / $reps)")"
start_seedd P --model "bench=$shm/model" --log-level warn
p_pid="${pids[-1]}"
src="$addr"
plain_cpu0="$(cpu_of "$p_pid")"
read -r plain_s _ plain_cpu <<< "$(median_pull "$shm/dest")"
plain_server_cpu="$(python3 -c "print(($(cpu_of "$p_pid") - $plain_cpu0) / $reps)")"
index_xxh3="$(python3 -c "print($t1 - $t0)")"
if grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp 2> /dev/null; then
  export KTLS="offered by the kernel (OpenSSL uses it where it can)"
else
  export KTLS="not offered by this kernel: OpenSSL encrypts in user space"
fi
index_sha="$(python3 -c "print($t3 - $t2)")"
python3 - "$size_gib" "$iperf_gbps" "$tmpfs_s" "$disk_s" "$pull_rss" "$server_rss" "$sha_s" "$first_s" "$huge_first" "$huge_s" "$reps" "$xxh3_cpu" "$sha_chunks_s" "$sha_cpu" "$index_xxh3" "$index_sha" "$tls_s" "$tls_cpu" "$tls_server_cpu" "$plain_s" "$plain_cpu" "$plain_server_cpu" "$iperf_rx_cpu" "$net_gbps" "$net_cpu" "$min_tmpfs_gbps" "$min_tmpfs_cpu" "$min_disk_gbps" "$land_tmpfs_gbps" "$land_tmpfs_cpu" "$land_disk_gbps" "$land_disk_cpu" "$hash_sha" "$hash_xxh3" <<'PY'
import sys
(gib, iperf, tmpfs_s, disk_s, pull_rss, server_rss, sha_s, first_s, huge_first, huge_s, reps,
 xxh3_cpu, sha_chunks_s, sha_cpu, index_xxh3, index_sha, tls_s, tls_cpu, tls_server_cpu,
 plain_s, plain_cpu, plain_server_cpu, iperf_rx_cpu, net_gbps, net_cpu, min_tmpfs_gbps,
 min_tmpfs_cpu, min_disk_gbps, land_tmpfs_gbps, land_tmpfs_cpu, land_disk_gbps,
 land_disk_cpu, hash_sha, hash_xxh3) = map(float, sys.argv[1:])
bits = gib * (1 << 30) * 8
t = bits / tmpfs_s / 1e9
d = bits / disk_s / 1e9
print()
print("weights, one to one on loopback (%d GiB model; medians of %d but the first pulls)" % (gib, reps))
print("  iperf3 -P 4 (baseline)              %6.2f Gbit/s  receiver CPU %.2f s/GiB" % (iperf, iperf_rx_cpu))
print("  minimal puller, network only        %6.2f Gbit/s  receiver CPU %.2f s/GiB (%.2fx iperf3)"
      % (net_gbps, net_cpu, net_gbps / iperf))
print("  minimal puller, XXH3 + tmpfs        %6.2f Gbit/s  receiver CPU %.2f s/GiB (%.2fx iperf3)"
      % (min_tmpfs_gbps, min_tmpfs_cpu, min_tmpfs_gbps / iperf))
print("  minimal puller, XXH3 + disk         %6.2f Gbit/s  (%.2fx iperf3)" % (min_disk_gbps, min_disk_gbps / iperf))
print("  landing alone (no network, no hash; the bound of any puller):")
print("    into tmpfs                        %6.2f Gbit/s  CPU %.2f s/GiB (%.2fx iperf3)"
      % (land_tmpfs_gbps, land_tmpfs_cpu, land_tmpfs_gbps / iperf))
print("    onto disk, synced                 %6.2f Gbit/s  CPU %.2f s/GiB (%.2fx iperf3)"
      % (land_disk_gbps, land_disk_cpu, land_disk_gbps / iperf))
f = bits / first_s / 1e9
print("  seedctl pull, tmpfs, first pull     %6.2f Gbit/s  (%.2fx iperf3)" % (f, f / iperf))
print("  seedctl pull, XXH3 chunks, tmpfs    %6.2f Gbit/s  (%.2fx iperf3; target >= 0.85x; %.2fx the minimal"
      " puller)  fetcher CPU %.2f s/GiB" % (t, t / iperf, t / min_tmpfs_gbps, xxh3_cpu / gib))
if huge_s > 0:
    hf = bits / huge_first / 1e9
    h = bits / huge_s / 1e9
    print("  tmpfs huge=always, first pull       %6.2f Gbit/s  (%.2fx iperf3)" % (hf, hf / iperf))
    print("  tmpfs huge=always (2 MiB pages)     %6.2f Gbit/s  (%.2fx iperf3)" % (h, h / iperf))
print("  seedctl pull, destination disk      %6.2f Gbit/s  (%.2fx iperf3; target >= 0.5x; %.2fx the minimal"
      " puller; %.2fx landing alone)" % (d, d / iperf, d / min_disk_gbps, d / land_disk_gbps))
v = bits / sha_s / 1e9
print("  pull --verify sha256, tmpfs         %6.2f Gbit/s  (%.2f s vs %.2f s without: %+.0f%%)"
      % (v, sha_s, tmpfs_s, 100 * (sha_s - tmpfs_s) / tmpfs_s))
print("  peak RSS: seedctl %.1f MiB, serving seedd %.1f MiB (target <= 64 MiB each)"
      % (pull_rss / 1024, server_rss / 1024))
s = bits / sha_chunks_s / 1e9
print("  chunk digests sha256 (the default) vs xxh3 (baseline), tmpfs:")
print("    pull       %6.2f Gbit/s vs %6.2f Gbit/s: %.2fx the throughput (%.2f s vs %.2f s)"
      % (s, t, tmpfs_s / sha_chunks_s, sha_chunks_s, tmpfs_s))
print("    fetcher CPU %5.2f s/GiB vs %5.2f s/GiB: %.2fx"
      % (sha_cpu / gib, xxh3_cpu / gib, sha_cpu / max(xxh3_cpu, 1e-9)))
print("    indexing the model at start: %.2f s vs %.2f s: %.2fx"
      % (index_sha, index_xxh3, index_sha / max(index_xxh3, 1e-9)))
extra = (sha_cpu - xxh3_cpu) / gib
alone = hash_sha - hash_xxh3
print("    the hash alone, one thread: sha256 %.2f s/GiB, xxh3 %.2f s/GiB: %.2f s/GiB more" % (hash_sha, hash_xxh3, alone))
print("    the fetcher's extra CPU for sha256 %.2f s/GiB: %.2fx what the hash alone costs more (target <= 1.0x)"
      % (extra, extra / max(alone, 1e-9)))
tg = bits / tls_s / 1e9
pg = bits / plain_s / 1e9
import os
print("  TLS 1.3 vs plain TCP (baseline), tmpfs; kernel TLS: %s" % os.environ["KTLS"])
print("    pull       %6.2f Gbit/s vs %6.2f Gbit/s: %.2fx the throughput (%.2f s vs %.2f s; target >= 0.6x)"
      % (tg, pg, plain_s / tls_s, tls_s, plain_s))
print("    fetcher CPU %5.2f s/GiB vs %5.2f s/GiB; serving daemon CPU %5.2f s/GiB vs %5.2f s/GiB"
      % (tls_cpu / gib, plain_cpu / gib, tls_server_cpu / gib, plain_server_cpu / gib))
PY
