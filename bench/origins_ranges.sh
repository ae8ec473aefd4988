#!/usr/bin/env bash
# origins_ranges: one large file (SIZE_MIB, default 256) pulled from an OCI
# registry (Debian's docker-registry) whose every connection is held to
# PER_FLOW (default 100mbit), as object stores and the storage behind
# registries cap what one connection carries: `seedctl pull --from oci://...`
# with one GET per file (--origin-range-mib 0, the baseline) against the default
# ranged GETs (64 MiB, 4 at once), alternated, REPS (default 3) each; medians.
# Runs in a network namespace of its own: its ephemeral ports are 40000-40255,
# and loopback is shaped with tc (an htb class of PER_FLOW per client port,
# matched by u32), so each connection the registry sends on is held to PER_FLOW.
# Needs root.
# Usage: bench/origins_ranges.sh BIN_DIR
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "origins_ranges: needs root for a network namespace and tc; skipped" >&2
  exit 1
fi
if [ -z "${SEEDD_RANGES_NETNS:-}" ]; then
  exec unshare --net -- env SEEDD_RANGES_NETNS=1 bash "$0" "$@"
fi
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
size_mib="${SIZE_MIB:-256}"
per_flow="${PER_FLOW:-100mbit}"
reps="${REPS:-3}"
ip link set lo up
source "$root/scripts/seedd_lib.sh"
for tool in docker-registry skopeo tc; do
  command -v "$tool" > /dev/null || { echo "origins_ranges: $tool is missing (scripts/setup.sh test)" >&2; exit 1; }
done

port="$(free_port)"
registry_config "$work/registry.yml" "127.0.0.1:$port" "$work/registry"
docker-registry serve "$work/registry.yml" > "$work/registry.log" 2>&1 &
pids+=($!)
wait_port "$port"
python3 "$root/bench/modelpack_layout.py" "$work" "$size_mib" 1
skopeo copy -q --dest-tls-verify=false "oci:$work/v1:latest" "docker://127.0.0.1:$port/bench/model:v1"
# One class per client port: what the registry sends to port P goes to class P.
sysctl -qw net.ipv4.ip_local_port_range="40000 40255" net.ipv4.tcp_tw_reuse=1
tc qdisc add dev lo root handle 1: htb default 9999 r2q 1000
tc class add dev lo parent 1: classid 1:9999 htb rate 100gbit
for p in $(seq 0 255); do
  tc class add dev lo parent 1: classid "1:$((p + 1))" htb rate "$per_flow" ceil "$per_flow"
  tc filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport "$port" 0xffff \
    match ip dport "$((40000 + p))" 0xffff flowid "1:$((p + 1))"
done
echo "origins_ranges: one ${size_mib} MiB file from a registry, each connection held to $per_flow"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
pull() {  # RANGE_MIB: seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$bin/seedctl" pull --from "oci://127.0.0.1:$port/bench/model:v1" --into "$work/into" \
    --origin-range-mib "$1" > "$work/pull.out" 2> "$work/pull.err"
  t1=$(date +%s.%N)
  rm -rf "$work/into"
  awk "BEGIN {print $t1 - $t0}"
}
one=(); ranged=()
for r in $(seq 1 "$reps"); do
  one+=("$(pull 0)")
  ranged+=("$(pull 64)")
  echo "  run $r: one GET ${one[-1]} s, ranged GETs ${ranged[-1]} s ($(sed 's/.*in \([0-9.]* s\).*/\1/' "$work/pull.out"))"
done
o=$(median "${one[@]}"); g=$(median "${ranged[@]}")
printf 'origins_ranges: %d MiB: one GET %.2f s, ranged GETs (64 MiB, 4 at once) %.2f s: %.2fx as fast\n' \
  "$size_mib" "$o" "$g" "$(awk "BEGIN {print $o / $g}")"
