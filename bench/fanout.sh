#!/usr/bin/env bash
# weights fan-out: an origin and TARGETS (default 8) daemons, each host in its own
# network namespace behind a veth pair on one bridge, every host's link shaped with
# tc to RATE (default 500mbit) in both directions; a generated model of SIZE_MIB
# (default 1024) MiB. Every target runs `seedd --pull` (serving what it has verified
# to the others while it pulls). Reports the time for 1 target and for TARGETS
# started at once (until every one is ready), and the bytes the origin's interface
# sent; medians of REPS (default 3), for each origin chunk size in CHUNKS (MiB or
# auto, default "auto": seedd's default, about 1,024 chunks per model).
# INCAST=K measures K flows from K hosts into one host's downlink first;
# MESH=K measures the network alone first: every target receiving the model's
# size from K other targets at once (iperf3), against one such flow;
# MTU (default 1500) sets the links' MTU; SLOW_START_AFTER_IDLE (0 or 1; default:
# the kernel's, 1) sets each host's net.ipv4.tcp_slow_start_after_idle; CC sets
# each host's TCP congestion control (net.ipv4.tcp_congestion_control); TRACE=1 prints, per run, the origin's
# bytes sent by second, the targets' downlinks in use (their bytes received
# over what their links could carry), when each target was ready and the
# qdiscs' drops;
# RELAY_UPLOAD_RATE (default: 90% of RATE, as an operator of shaped hosts sets
# it; 0: no limit) is each target's --relay-upload-rate; RELAY_UPLOAD_PACING
# (capacity, delay or off; default: the daemon's, capacity) its --relay-upload-pacing;
# UPLINK_QDISC (e.g. "pfifo_fast", three bands by socket priority; default none:
# the tbf's own FIFO) is the queue inside each host's uplink shaper, as tc takes
# it, holding UPLINK_QLEN (default 200) packets per band;
# LOG_LEVEL sets the daemons' log level. Also reported: the CPU seconds the
# daemons (the targets and the origin) spent per GiB the targets received, for
# one target and for TARGETS, and their ratio (the cost of relaying).
# Needs root (ip netns, tc).
# Usage: bench/fanout.sh BIN_DIR
set -euo pipefail
# A command that fails ends the bench (set -e), in a function or a command
# substitution too: say which one, where, and its status.
set -E
trap 'echo "fanout: line $LINENO: \"$BASH_COMMAND\" failed (status $?)" >&2' ERR
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
targets="${TARGETS:-8}"
rate="${RATE:-500mbit}"
size_mib="${SIZE_MIB:-1024}"
reps="${REPS:-3}"
source "$root/scripts/seedd_lib.sh"
if [ "$(id -u)" -ne 0 ]; then
  echo "fanout: needs root for network namespaces and tc; skipped" >&2
  exit 1
fi
if ! command -v iperf3 > /dev/null || ! command -v tc > /dev/null; then
  echo "fanout: installing iperf3 and iproute2 (Debian packages)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iperf3 iproute2 > /dev/null
fi
tag="sdf$$"
shm="$(mktemp -d /dev/shm/seedd-fanout.XXXXXX)"
netns_cleanup() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^$tag-" || true); do
    ip netns pids "$ns" | xargs -r kill 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
}
trap 'cleanup; netns_cleanup; rm -rf "$shm"' EXIT
umask 077
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")

# The network: host i (0 = the origin) at 10.77.0.(i+1), its eth0 shaped on egress
# (its upload) and the bridge port shaped on egress (its download).
sw="$tag-sw"
ip netns add "$sw"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
ns() { echo "$tag-h$1"; }
ip_of() { echo "10.77.0.$(($1 + 1))"; }
for i in $(seq 0 "$targets"); do
  ip netns add "$(ns "$i")"
  ip link add eth0 netns "$(ns "$i")" type veth peer name "p$i" netns "$sw"
  ip -n "$(ns "$i")" addr add "$(ip_of "$i")/24" dev eth0
  ip -n "$(ns "$i")" link set lo up
  ip -n "$(ns "$i")" link set eth0 mtu "${MTU:-1500}" up
  ip -n "$sw" link set "p$i" mtu "${MTU:-1500}"
  ip -n "$sw" link set "p$i" master br0
  ip -n "$sw" link set "p$i" up
  ip netns exec "$(ns "$i")" tc qdisc add dev eth0 root handle 1: tbf rate "$rate" burst 256kb latency 50ms
  if [ -n "${UPLINK_QDISC:-}" ]; then
    # shellcheck disable=SC2086 # the qdisc and its parameters, as tc takes them
    ip -n "$(ns "$i")" link set eth0 txqueuelen "${UPLINK_QLEN:-200}"
    ip netns exec "$(ns "$i")" tc qdisc add dev eth0 parent 1:1 handle 10: $UPLINK_QDISC
  fi
  ip netns exec "$sw" tc qdisc add dev "p$i" root tbf rate "$rate" burst 256kb latency 50ms
  if [ -n "${CC:-}" ]; then
    ip netns exec "$(ns "$i")" sysctl -qw net.ipv4.tcp_congestion_control="$CC"
  fi
  if [ -n "${SLOW_START_AFTER_IDLE:-}" ]; then
    ip netns exec "$(ns "$i")" sysctl -qw net.ipv4.tcp_slow_start_after_idle="$SLOW_START_AFTER_IDLE"
  fi
done

ip netns exec "$(ns 0)" iperf3 -s -B "$(ip_of 0)" -p 5201 > /dev/null 2>&1 &
pids+=($!)
sleep 0.5
link_mbps="$(ip netns exec "$(ns 1)" iperf3 -c "$(ip_of 0)" -p 5201 -t 3 -J |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6)')"
kill "${pids[-1]}"
# INCAST=K: K hosts send to host 1 at once for 3 s (one TCP flow each), the
# aggregate received: what several flows into one shaped downlink achieve.
if [ -n "${INCAST:-}" ]; then
  for k in $(seq 1 "$INCAST"); do
    ip netns exec "$(ns 1)" iperf3 -s -1 -B "$(ip_of 1)" -p $((5300 + k)) > /dev/null 2>&1 &
  done
  sleep 0.5
  for k in $(seq 1 "$INCAST"); do
    ip netns exec "$(ns $((k + 1)))" iperf3 -c "$(ip_of 1)" -p $((5300 + k)) -t 3 -J \
      > "$shm/incast.$k.json" 2> /dev/null &
  done
  wait
  incast="$(python3 -c 'import json,sys; print("%.1f" % (sum(json.load(open(f))["end"]["sum_received"]["bits_per_second"] for f in sys.argv[1:]) / 1e6))' "$shm"/incast.*.json)"
  echo "fanout: $INCAST flows from $INCAST hosts into one downlink: $incast Mbit/s together (one flow: $link_mbps)"
fi

echo "fanout: generating a ${size_mib} MiB model in tmpfs"
make_model "$shm/model" "$size_mib"
model_bytes="$(du -sb --apparent-size "$shm/model" | cut -f1)"

# start_in HOST NAME ARGS...: seedd in host HOST's namespace, listening on its address.
start_in() {
  local host="$1" name="$2"
  shift 2
  ip netns exec "$(ns "$host")" "${barrier[@]}" "$bin/seedd" --listen "$(ip_of "$host"):7420" \
    --token-file "$work/token" --cache-dir "$shm/$name" --log-level "${LOG_LEVEL:-warn}" "$@" \
    > "$work/$name.out" 2> "$work/$name.err" &
  pids+=($!)
}
ready() { file_has "$work/$1.out" "serving on"; }
tx_bytes() { ip netns exec "$(ns 0)" cat /sys/class/net/eth0/statistics/tx_bytes; }
# cpu_ticks PID...: the user and system CPU time of these processes, in clock ticks.
cpu_ticks() {
  local t=0 p f
  for p in "$@"; do
    f="$(cut -d')' -f2- "/proc/$p/stat" 2> /dev/null)" || continue
    t=$((t + $(echo "$f" | awk '{ print $12 + $13 }')))
  done
  echo "$t"
}
# Each run also reads the machine's busy CPU time (busy_ticks). A lone pull
# leaves the CPUs idle most of the time and a fleet keeps them busy, so the
# daemons' own CPU time counts more of the kernel's network work for the
# fleet than for the lone pull. Nothing else runs during a run here (the wait
# uses shell builtins), so the machine's busy time is the pull's.
# RATE in bytes per second (tc's units: kbit, mbit, gbit).
rate_bytes() {
  echo "$rate" | awk '{ v = $1 + 0; u = tolower($1); sub(/^[0-9.]+/, "", u);
    m = u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : 1; print v * m / 8 }'
}
# Each target's --relay-upload-rate: 90% of its uplink unless RELAY_UPLOAD_RATE says.
relay_rate="${RELAY_UPLOAD_RATE:-$(rate_bytes | awk '{ printf "%dkbit", $1 * 8 * 0.9 / 1000 }')}"
# Bytes the switch sent to hosts 1..N (what the targets received).
rx_targets() {
  local n="$1"
  ip netns exec "$sw" sh -c "cat \$(seq -f '/sys/class/net/p%g/statistics/tx_bytes' 1 $n)" |
    awk '{ t += $1 } END { print t }'
}

# run N LABEL: N targets pull at once; prints "seconds origin_bytes cpu_seconds"
# (the CPU of the targets and the origin until the last target is ready).
run() {
  local n="$1" label="$2" first=${#pids[@]}
  local tx0 start end cpu0 busy0
  # Launched one after another, started together: the clock starts when the
  # last is launched and all of them go.
  barrier_new
  for i in $(seq 1 "$n"); do
    start_in "$i" "$label-$i" --source "$(ip_of 0):7420" --pull bench \
      --relay-upload-rate "$relay_rate" ${RELAY_UPLOAD_PACING:+--relay-upload-pacing "$RELAY_UPLOAD_PACING"}
  done
  tx0="$(tx_bytes)"
  cpu0="$(cpu_ticks "$origin_pid")"
  busy0="$(busy_ticks)"
  barrier_release "$n" || exit 1
  start="$barrier_start"
  echo "fanout: $label: $n launched in $barrier_launch s, started together" >&2
  if [ -n "${TRACE:-}" ]; then  # the origin's bytes sent, every half second
    (while :; do echo "$(date +%s.%N) $(tx_bytes) $(rx_targets "$n")"; sleep 0.5; done) > "$work/$label.trace" &
    local tracer=$!
    # Every host's upload and download (the switch's ports: rx is what host i
    # sent, tx what it received), every half second.
    (while :; do
      echo "$(date +%s.%N) $(ip netns exec "$sw" sh -c "cat \$(seq -f '/sys/class/net/p%g/statistics/rx_bytes' 0 $n) \$(seq -f '/sys/class/net/p%g/statistics/tx_bytes' 0 $n)" | tr '\n' ' ')"
      sleep "${PORT_STEP:-0.5}"
    done) > "$work/$label.ports" &
    local port_tracer=$!
    # Every host's uplink queue (its eth0 tbf backlog, bytes), every 0.2 s.
    (while :; do
      echo "$(date +%s.%N) $(for i in $(seq 0 "$n"); do
        # A host whose namespace is gone (the run just ended) has no queue.
        ip netns exec "$(ns "$i")" tc -s qdisc show dev eth0 2> /dev/null |
          grep -o 'backlog [0-9]*b' | tr -dc '0-9' || true
        echo -n ' '
      done)"
      sleep 0.2
    done) > "$work/$label.queues" &
    local queue_tracer=$!
  fi
  # Each target is ready when its ready line is written: the file's mtime.
  # Polled with shell builtins only (ready, nap): a `grep | wc` and a
  # `sleep` five times a second took about a tenth of this machine's two
  # cores from the daemons being measured.
  local polls=0 pending=() i
  for i in $(seq 1 "$n"); do pending+=("$i"); done
  while [ ${#pending[@]} -gt 0 ]; do
    local left=()
    for i in "${pending[@]}"; do
      ready "$label-$i" || left+=("$i")
    done
    pending=("${left[@]}")
    [ ${#pending[@]} -gt 0 ] || break
    if [ $((++polls % 10)) = 0 ]; then
      for i in "${pending[@]}"; do
        local p="${pids[$((first + i - 1))]}" rc=0
        kill -0 "$p" 2> /dev/null && continue
        wait "$p" || rc=$?
        echo "fanout: target $i of $label (pid $p) exited with status $rc$( ((rc > 128)) &&
          echo " (signal $((rc - 128)))") before it was ready; its log's last lines:" >&2
        tail -n 20 "$work/$label-$i.err" >&2
        exit 1
      done
    fi
    nap 0.2
  done
  end="$(stat -c %.9Y "$work/$label"-*.out | sort -n | tail -1)"
  local cpu=$(($(cpu_ticks "$origin_pid" "${pids[@]:$first}") - cpu0))
  local busy=$(($(busy_ticks) - busy0))
  if [ -n "${TRACE:-}" ]; then
    kill "$tracer" "$port_tracer" "$queue_tracer"
    for i in 0 1 2; do
      echo "  host $i upload: $(ip netns exec "$(ns "$i")" tc -s qdisc show dev eth0 | grep -o 'dropped [0-9]*, overlimits [0-9]*')," \
        "download: $(ip netns exec "$sw" tc -s qdisc show dev "p$i" | grep -o 'dropped [0-9]*, overlimits [0-9]*')" >&2
    done
    python3 - "$start" "$tx0" "$model_bytes" "$n" "$(rate_bytes)" "$work/$label.trace" \
      $(stat -c %.9Y "$work/$label"-*.out) <<'PY' >&2
import sys
start, tx0, model, n, rate = (float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                              int(sys.argv[4]), float(sys.argv[5]))
rows = [tuple(map(float, l.split())) for l in open(sys.argv[6]) if len(l.split()) == 3]
print("  origin sent (fraction of the model) by second:",
      " ".join("%.0f:%.2f" % (t - start, (b - tx0) / model) for t, b, _ in rows[1::2]))
print("  targets' downlinks in use by second:",
      " ".join("%.0f:%.2f" % (b[0] - start, (b[2] - a[2]) / (n * rate * (b[0] - a[0])))
               for a, b in zip(rows[0::2], rows[2::2])))
print("  targets ready at:", " ".join("%.1f" % (float(t) - start) for t in sorted(sys.argv[7:])))
PY
    python3 - "$start" "$n" "$(rate_bytes)" "$work/$label.ports" <<'PY' >&2
import sys
start, n, rate = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
rows = [list(map(float, l.split())) for l in open(sys.argv[4]) if len(l.split()) == 2 * n + 3]
up = lambda r, i: r[1 + i]
down = lambda r, i: r[2 + n + i]
pairs = list(zip(rows[0::2], rows[2::2]))
print("  relays' uplinks in use by second (mean over targets):",
      " ".join("%.0f:%.2f" % (b[0] - start, sum(up(b, i) - up(a, i) for i in range(1, n + 1)) /
                               (n * rate * (b[0] - a[0]))) for a, b in pairs))
for i in range(1, n + 1):
    print("  target %2d down/up by second:" % i,
          " ".join("%.2f/%.2f" % ((down(b, i) - down(a, i)) / (rate * (b[0] - a[0])),
                                  (up(b, i) - up(a, i)) / (rate * (b[0] - a[0]))) for a, b in pairs))
PY
    python3 - "$start" "$n" "$(rate_bytes)" "$work/$label.queues" \
      $(for i in $(seq 1 "$n"); do stat -c %.9Y "$work/$label-$i.out"; done) <<'PY' >&2
import statistics, sys
start, n, rate = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
rows = [list(map(float, l.split())) for l in open(sys.argv[4]) if len(l.split()) == n + 2]
ready = [float(t) - start for t in sys.argv[5:]]
print("  uplink queue (ms at the link's rate) while pulling: median / p90 / time above 25 ms")
for i in range(n + 1):
    end = ready[i - 1] if i > 0 else max(ready)
    q = [r[1 + i] / rate * 1e3 for r in rows if r[0] - start <= end]
    if not q:
        continue
    q.sort()
    print("    host %2d%s: %5.1f / %5.1f ms / %3.0f%%" % (
        i, " (ready %.1f s)" % ready[i - 1] if i > 0 else " (origin)       ", statistics.median(q),
        q[int(0.9 * (len(q) - 1))], 100.0 * sum(x > 25 for x in q) / len(q)))
PY
  fi
  local sent=$(($(tx_bytes) - tx0))
  for i in $(seq 1 "$n"); do
    diff -r "$shm/model" "$shm/$label-$i/weights/bench/current" > /dev/null ||
      { echo "fanout: target $i of $label differs from the model" >&2; exit 1; }
  done
  for p in "${pids[@]:$first}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]:$first}"; do wait "$p" 2> /dev/null || true; done
  pids=("${pids[@]:0:$first}")
  for i in $(seq 1 "$n"); do rm -rf "${shm:?}/$label-$i"; done
  [ -z "${KEEP_LOGS:-}" ] || cp "$work/$label"-*.err "$work/$label".ports /tmp/ 2> /dev/null || true
  python3 -c "print('%.3f %d %.2f %.2f' % ($end - $start, $sent, $cpu / $(getconf CLK_TCK), $busy / $(getconf CLK_TCK)))"
}

if [ -n "${MESH:-}" ]; then
  mesh_floor fanout "$targets" "$MESH" "$size_mib" "$shm"
fi

results=()
# The origin, started anew for each run: a server remembers the relays that
# announced themselves (each until it has not heard from it for 10 s) and the
# claims they took, so a run right after a fleet's found the fleet's dead
# relays holding claims on most chunks (a one-target pull took 12.2-12.6 s
# after a 16-target run against 11.2 s before any).
origin_up() {
  # Emptied first: the last origin's ready line is in it, and the new one
  # truncates it only once its process runs (a check in between saw the old
  # line, the next an empty file: the bench ended, its log empty too).
  : > "$work/origin$chunk.out"
  start_in 0 "origin$chunk" --model "bench=$shm/model" --chunk-mib "$chunk"
  origin_pid="${pids[-1]}"
  for _ in $(seq 1 6000); do ready "origin$chunk" && break; nap 0.01; done
  ready "origin$chunk" || {
    echo "fanout: the origin did not say it was serving within 60 s; its log:" >&2
    cat "$work/origin$chunk.err" >&2
    exit 1
  }
}
# An origin that exited before it was stopped is named, with its exit status
# and its log's last lines: the run's figures would not mean what they say.
origin_down() {
  local rc=0
  if ! kill "$origin_pid" 2> /dev/null; then
    wait "$origin_pid" || rc=$?
    echo "fanout: the origin (pid $origin_pid) exited with status $rc$( ((rc > 128)) &&
      echo " (signal $((rc - 128)))") before it was stopped; its log's last lines:" >&2
    tail -n 20 "$work/origin$chunk.err" >&2
    exit 1
  fi
  wait "$origin_pid" 2> /dev/null || true
  unset 'pids[-1]'
}
for chunk in ${CHUNKS:-auto}; do
  for r in $(seq 1 "$reps"); do
    origin_up
    one="$(run 1 "one$chunk-$r")"
    origin_down
    origin_up
    many="$(run "$targets" "many$chunk-$r")"
    origin_down
    read -r one_s _ one_cpu one_busy <<< "$one"
    read -r many_s many_sent many_cpu many_busy <<< "$many"
    echo "fanout: chunks $chunk, rep $r: 1 target $one_s s; $targets targets $many_s s," \
      "origin sent $many_sent bytes; CPU $one_cpu s and $many_cpu s (machine busy $one_busy s and $many_busy s)"
    results+=("$chunk $one $many")
  done
  rm -rf "${shm:?}/origin$chunk"
done
python3 - "$targets" "$rate" "$link_mbps" "$model_bytes" "$relay_rate" "${results[@]}" <<'PY'
import collections, os, statistics, sys
n, rate, link, model = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
relay_rate = sys.argv[5]
by_chunk = collections.defaultdict(list)
for r in sys.argv[6:]:
    chunk, t1, b1, c1, m1, tn, bn, cn, mn = r.split()
    by_chunk[chunk].append((float(t1), int(b1), float(tn), int(bn), float(c1), float(cn),
                            float(m1), float(mn)))
print()
print("weights fan-out (%.0f MiB model, %d targets, every link %s; iperf3 between two hosts "
      "%.0f Mbit/s)" % (model / 1048576, n, rate, link))
print("  chunk     1 target   %d targets   ratio (<= 1.3x)   origin sent, %d targets (<= 1.5x)"
      % (n, n))
for chunk, rows in by_chunk.items():
    t1 = statistics.median(r[0] for r in rows)
    tn = statistics.median(r[2] for r in rows)
    bn = statistics.median(r[3] for r in rows)
    label = chunk if chunk == "auto" else chunk + " MiB"
    print("  %8s  %7.2f s  %8.2f s   %6.2fx           %.2fx the model"
          % (label, t1, tn, tn / t1, bn / model))
    gib = model / 1073741824
    c1 = statistics.median(r[4] for r in rows) / gib
    cn = statistics.median(r[5] for r in rows) / (n * gib)
    print("  %8s  CPU per GiB received (daemons, origin included): 1 target %.2f s, %d targets "
          "%.2f s, %.2fx (<= 2x)" % ("", c1, n, cn, cn / c1))
    m1 = statistics.median(r[6] for r in rows) / gib
    mn = statistics.median(r[7] for r in rows) / (n * gib)
    print("  %8s  machine's busy CPU per GiB received (the kernel's network work on idle CPUs "
          "too): 1 target %.2f s, %d targets %.2f s, %.2fx%s" % (
              "", m1, n, mn, mn / m1,
              " (TRACE's samplers counted in: not a figure)" if os.environ.get("TRACE") else ""))
print("  medians of %d; all from the origin would take ~%dx; every copy compared with the model"
      % (len(rows), n))
print("  targets' --relay-upload-rate: %s" % ("none" if relay_rate == "0" else relay_rate))
print("  targets' --relay-upload-pacing: %s" % (os.environ.get("RELAY_UPLOAD_PACING") or "default (capacity)"))
PY
