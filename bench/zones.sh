#!/usr/bin/env bash
# weights fan-out across two zones: an origin and PER_ZONE (default 8) targets on
# switch A, PER_ZONE targets on switch B, the two switches joined by one link
# shaped to ZONE_RATE (default 100mbit) each way, every host's own link shaped to
# RATE (default 50mbit) both ways; a generated model of SIZE_MIB (default 64)
# MiB. Every target runs `seedd --pull` (relaying what it verified) at once,
# with `--zone a` / `--zone b` and, alternated in the same run, without zones.
# Reports, medians of REPS (default 3): the time until the last target is
# ready, the bytes that crossed the link between the zones each way over the
# model's size (target: <= 1.1x per zone with zones), and the origin's bytes
# sent; the daemons' own count of bytes across zones (their pull summaries).
# Each host is a network namespace (ip netns) with tbf qdiscs, as in
# bench/fanout.sh. Needs root.
# Usage: bench/zones.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
per_zone="${PER_ZONE:-8}"
rate="${RATE:-50mbit}"
zone_rate="${ZONE_RATE:-100mbit}"
size_mib="${SIZE_MIB:-64}"
reps="${REPS:-3}"
source "$root/scripts/seedd_lib.sh"
if [ "$(id -u)" -ne 0 ]; then
  echo "zones: needs root for network namespaces and tc" >&2
  exit 1
fi
if ! command -v tc > /dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 > /dev/null
fi
tag="sdz$$"
shm="$(mktemp -d /dev/shm/seedd-zones.XXXXXX)"
netns_cleanup() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^$tag-" || true); do
    ip netns pids "$ns" | xargs -r kill 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
}
trap 'cleanup; netns_cleanup; rm -rf "$shm"' EXIT
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"

# Hosts 0..PER_ZONE on switch A (0: the origin), the next PER_ZONE on switch B.
targets=$((2 * per_zone))
ns() { echo "$tag-h$1"; }
ip_of() { echo "10.78.0.$(($1 + 1))"; }
zone_of() { if [ "$1" -le "$per_zone" ]; then echo a; else echo b; fi; }
for z in a b; do
  ip netns add "$tag-sw$z"
  ip -n "$tag-sw$z" link set lo up
  ip -n "$tag-sw$z" link add br0 type bridge
  ip -n "$tag-sw$z" link set br0 up
done
# The link between the zones: xa on A's switch (its egress: A to B), xb on B's.
ip link add xa netns "$tag-swa" type veth peer name xb netns "$tag-swb"
for z in a b; do
  ip -n "$tag-sw$z" link set "x$z" master br0
  ip -n "$tag-sw$z" link set "x$z" up
  ip netns exec "$tag-sw$z" tc qdisc add dev "x$z" root tbf rate "$zone_rate" burst 256kb latency 50ms
done
for i in $(seq 0 "$targets"); do
  sw="$tag-sw$(zone_of "$i")"
  ip netns add "$(ns "$i")"
  ip link add eth0 netns "$(ns "$i")" type veth peer name "p$i" netns "$sw"
  ip -n "$(ns "$i")" addr add "$(ip_of "$i")/24" dev eth0
  ip -n "$(ns "$i")" link set lo up
  ip -n "$(ns "$i")" link set eth0 up
  ip -n "$sw" link set "p$i" master br0
  ip -n "$sw" link set "p$i" up
  ip netns exec "$(ns "$i")" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
  ip netns exec "$sw" tc qdisc add dev "p$i" root tbf rate "$rate" burst 256kb latency 50ms
done

echo "zones: generating a ${size_mib} MiB model in tmpfs"
make_model "$shm/model" "$size_mib"
model_bytes="$(du -sb --apparent-size "$shm/model" | cut -f1)"

start_in() {
  local host="$1" name="$2"
  shift 2
  ip netns exec "$(ns "$host")" "$bin/seedd" --listen "$(ip_of "$host"):7420" \
    --token-file "$work/token" --cache-dir "$shm/$name" --log-level "${LOG_LEVEL:-info}" "$@" \
    > "$work/$name.out" 2> "$work/$name.err" &
  pids+=($!)
}
counter() { ip netns exec "$tag-sw$1" cat "/sys/class/net/$2/statistics/tx_bytes"; }

# run MODE LABEL (MODE zones or none): every target pulls at once; prints
# "seconds a_to_b b_to_a origin_sent daemons_across".
run() {
  local mode="$1" label="$2" first=${#pids[@]}
  local ab0 ba0 o0 start end
  ab0="$(counter a xa)"
  ba0="$(counter b xb)"
  o0="$(ip netns exec "$tag-swa" cat /sys/class/net/p0/statistics/rx_bytes)"
  local rt0
  rt0="$(ip netns exec "$(ns 0)" awk '/^Tcp:/ { getline; print $13; exit }' /proc/net/snmp)"
  start="$(date +%s.%N)"
  for i in $(seq 1 "$targets"); do
    local zone=()
    [ "$mode" = zones ] && zone=(--zone "$(zone_of "$i")")
    start_in "$i" "$label-$i" --source "$(ip_of 0):7420" --pull bench "${zone[@]}"
  done
  local polls=0
  until [ "$(grep -l "serving on" "$work/$label"-*.out 2> /dev/null | wc -l)" -ge "$targets" ]; do
    if [ $((++polls % 10)) = 0 ]; then
      for p in "${pids[@]:$first}"; do
        kill -0 "$p" 2> /dev/null || { cat "$work/$label"-*.err >&2; exit 1; }
      done
    fi
    nap 0.2
  done
  end="$(stat -c %.9Y "$work/$label"-*.out | sort -n | tail -1)"
  local ab=$(($(counter a xa) - ab0)) ba=$(($(counter b xb) - ba0))
  local rt
  rt=$(($(ip netns exec "$(ns 0)" awk '/^Tcp:/ { getline; print $13; exit }' /proc/net/snmp) - rt0))
  echo "zones: $label: the origin retransmitted $rt TCP segments" >&2
  # The switch's port to the origin receives what the origin sent.
  local osent
  osent=$(($(ip netns exec "$tag-swa" cat /sys/class/net/p0/statistics/rx_bytes) - o0))
  for i in $(seq 1 "$targets"); do
    diff -r "$shm/model" "$shm/$label-$i/weights/bench/current" > /dev/null ||
      { echo "zones: target $i of $label differs from the model" >&2; exit 1; }
  done
  # What the daemons counted across zones (their pull summaries: "N MiB from
  # other zones than Z"), in bytes.
  local across
  across="$(cat "$work/$label"-*.err | grep -o '[0-9.]* [KMG]*i*B from other zones' |
    awk '{ m = $2 == "KiB" ? 1024 : $2 == "MiB" ? 1048576 : $2 == "GiB" ? 1073741824 : 1;
           t += $1 * m } END { printf "%d", t }')"
  for p in "${pids[@]:$first}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]:$first}"; do wait "$p" 2> /dev/null || true; done
  pids=("${pids[@]:0:$first}")
  for i in $(seq 1 "$targets"); do rm -rf "${shm:?}/$label-$i"; done
  [ -z "${KEEP_LOGS:-}" ] || cp "$work/$label"-*.err /tmp/ 2> /dev/null || true
  python3 -c "print('%.3f %d %d %d %d' % ($end - $start, $ab, $ba, $osent, $across))"
}

start_in 0 origin --model "bench=$shm/model" --zone a
for _ in $(seq 1 6000); do file_has "$work/origin.out" "serving on" && break; nap 0.01; done
file_has "$work/origin.out" "serving on" || { cat "$work/origin.err" >&2; exit 1; }
results=()
for r in $(seq 1 "$reps"); do
  for mode in none zones; do
    line="$(run "$mode" "$mode-$r")"
    echo "zones: rep $r, $mode: $line (seconds, A->B, B->A, origin sent, daemons' count across)"
    results+=("$mode $line")
  done
done
python3 - "$per_zone" "$rate" "$zone_rate" "$model_bytes" "${results[@]}" << 'PY'
import statistics, sys
per_zone, rate, zone_rate, model = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = {"none": [], "zones": []}
for r in sys.argv[5:]:
    mode, *v = r.split()
    rows[mode].append([float(x) for x in v])
med = lambda mode, k: statistics.median(r[k] for r in rows[mode])
print()
print("weights fan-out across two zones (%.0f MiB model; zone a: the origin and %d targets, "
      "zone b: %d targets; hosts' links %s, the link between the zones %s)"
      % (model / 1048576, per_zone, per_zone, rate, zone_rate))
print("  %-10s %12s %22s %22s %14s" % ("", "last ready", "into zone b (<= 1.1x)",
                                        "into zone a (<= 1.1x)", "origin sent"))
for mode in ("none", "zones"):
    print("  %-10s %10.2f s %21.2fx %21.2fx %13.2fx" % (
        "no zones" if mode == "none" else "--zone", med(mode, 0), med(mode, 1) / model,
        med(mode, 2) / model, med(mode, 3) / model))
print("  time with zones / without: %.2fx; daemons' own count across zones: %.2fx the model"
      % (med("zones", 0) / med("none", 0), med("zones", 4) / model))
print("  medians of %d; every copy compared with the model" % len(rows["zones"]))
PY
