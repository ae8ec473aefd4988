# Shell helpers shared by the demo and the benchmarks. Sourcing it makes $work (a
# scratch directory) and $pids (what was started); both are cleaned up on exit.
# The caller sets $bin, the directory of the seedd binaries.

work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# nap SECONDS: sleeps without starting a process (a read that times out on a
# pipe nobody writes). Polling loops of the benchmarks use it with file_has, so
# that waiting for N daemons costs no CPU the daemons would miss: a `grep` and a
# `sleep` every 10 ms are 200 process starts a second.
exec {nap_fd}<> <(:)
nap() { read -r -t "$1" -u "$nap_fd" _ || true; }

# file_has FILE TEXT: whether a line of FILE contains TEXT (no process started).
file_has() {
  local line
  [ -r "$1" ] || return 1
  while IFS= read -r line || [ -n "$line" ]; do
    [[ $line == *"$2"* ]] && return 0
  done < "$1"
  return 1
}

# A start barrier: daemons a bench launches one after another (a fork, an
# `ip netns exec` and a few lookups each, tens of milliseconds apiece on this
# machine while others run) start together, as a fleet's hosts do, and the
# clock starts when they do. barrier_new makes one and sets $barrier, the
# words to put before a command (which then runs, with the same pid, once
# released); barrier_release N waits until N commands wait at it (at most
# 60 s), lets them all go at once, sets $barrier_start (EPOCHREALTIME) and
# $barrier_launch (the seconds from barrier_new until then: what the launches
# took) and empties $barrier.
barrier=()
barrier_new() {
  barrier_made="$EPOCHREALTIME"
  barrier_fifo="$(mktemp -u "$work/barrier.XXXXXX")"
  mkfifo "$barrier_fifo"
  # Held open read-write, so that the waiters' opens do not block.
  exec {barrier_fd}<> "$barrier_fifo"
  # shellcheck disable=SC2016 # expanded by the waiting sh
  barrier=(sh -c 'exec 3< "$0" && : > "$0.$$" && read -r _ <&3 && exec 3<&- && exec "$@"' "$barrier_fifo")
}
barrier_release() {
  local n="$1" armed i
  for i in $(seq 1 12000); do
    armed=("$barrier_fifo".*)
    [ -e "${armed[0]}" ] && [ ${#armed[@]} -ge "$n" ] && break
    nap 0.005
  done
  [ -e "${armed[0]}" ] && [ ${#armed[@]} -ge "$n" ] ||
    { echo "barrier: ${#armed[@]} of $n commands reached the start in 60 s" >&2; return 1; }
  # shellcheck disable=SC2034 # read by the benchmarks
  barrier_start="$EPOCHREALTIME"
  # One line each: every waiter's read takes one, whatever their order.
  for ((i = 0; i < n; i++)); do echo >&"$barrier_fd"; done
  exec {barrier_fd}>&-
  # shellcheck disable=SC2034 # read by the benchmarks
  barrier_launch="$(awk -v a="$barrier_made" -v b="$barrier_start" 'BEGIN { printf "%.3f", b - a }')"
  rm -f "$barrier_fifo" "$barrier_fifo".*
  # shellcheck disable=SC2034 # read by the benchmarks
  barrier=()
}

# machine_ticks: "BUSY TOTAL", the machine's CPU time in clock ticks over all
# CPUs, busy being every state but idle and iowait. The kernel's network work
# for a packet that arrives while a CPU idles (a shaped link's timer, the
# receive softirq) is charged to no process, so the benchmarks that share
# these cores among many daemons read the machine's time beside their own.
machine_ticks() { awk '$1 == "cpu" {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat; }
# busy_ticks: the busy part of machine_ticks alone.
busy_ticks() { machine_ticks | cut -d' ' -f1; }

# mesh_floor LABEL N K MIB DIR: the network alone in a bench's topology of
# namespaces (the caller's `ns` and `ip_of`; hosts 1..N, and host 0 beside
# them), before any daemon runs, with iperf3. Every host 1..N receives MIB
# from K of the others (MIB/K each, one flow each) and so sends as much, all
# at once, against one flow of MIB from host 0 to host 1. Prints how much
# longer the fleet's bytes take and how much more of the machine's busy CPU
# per GiB: the kernel's own cost of moving a swarm's bytes with K flows into
# and out of every link, the floor under a fleet's figures on this machine.
mesh_floor() {
  local label="$1" n="$2" k="$3" mib="$4" dir="$5" flows=() i j one many
  one="$(mesh_flows "$dir" "0 1 ${mib}M")" || return 1
  for i in $(seq 1 "$n"); do
    for j in $(seq 1 "$k"); do flows+=("$(((i - 1 + j) % n + 1)) $i $((mib * 1024 / k))K"); done
  done
  many="$(mesh_flows "$dir" "${flows[@]}")" || return 1
  # shellcheck disable=SC2086 # each run's figures, one argument each
  python3 - "$label" "$n" "$k" "$mib" $one $many << 'PY'
import sys
label, n, k, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t1, b1, o1, r1, _, _, tn, bn, on, rn, first, median = map(float, sys.argv[5:])
g = mib / 1024
print(label + ": the network alone (iperf3, before the daemons): one flow of %d MiB %.2f s; %d hosts "
      "each receiving %d MiB from %d others at once %.2f s, %.2fx (flows ended from %.2f s, median "
      "%.2f s; %d segments retransmitted, %d for the one flow); CPU per GiB received: iperf3's own "
      "%.2f s and %.2f s, %.2fx; the machine's busy %.2f s and %.2f s, %.2fx"
      % (mib, t1, n, mib, k, tn, tn / t1, first, median, rn, r1, o1 / g, on / (n * g),
         on / (n * o1), b1 / g, bn / (n * g), bn / (n * b1)))
PY
}
# mesh_flows DIR "SRC DST BYTES"...: those iperf3 flows at once (BYTES as
# `iperf3 -n` takes it); prints "SECONDS BUSY OWN RETRANS FIRST MEDIAN": until
# the last flow ended, the machine's busy CPU seconds meanwhile, the iperf3
# processes' own, the TCP segments the hosts retransmitted, and when the first
# flow and the median one ended. Fails if a flow failed.
mesh_flows() {
  local dir="$1" f port=6000 src dst bytes start busy0 busy clients=() servers=() hosts=() r0 r1
  shift
  for f in "$@"; do
    read -r src dst _ <<< "$f"
    hosts+=("$src" "$dst")
  done
  mapfile -t hosts < <(printf '%s\n' "${hosts[@]}" | sort -un)
  # The segments these hosts' TCP retransmitted so far (RetransSegs).
  mesh_retrans() {
    local h t=0
    for h in "${hosts[@]}"; do
      t=$((t + $(ip netns exec "$(ns "$h")" awk '$1 == "Tcp:" && $13 ~ /^[0-9]+$/ { v = $13 } END { print v + 0 }' /proc/net/snmp)))
    done
    echo "$t"
  }
  r0="$(mesh_retrans)"
  for f in "$@"; do
    read -r _ dst _ <<< "$f"
    ip netns exec "$(ns "$dst")" iperf3 -s -1 -B "$(ip_of "$dst")" -p "$port" > /dev/null 2>&1 &
    servers+=($!)
    port=$((port + 1))
  done
  sleep 1
  port=6000
  busy0="$(busy_ticks)"
  # The CPU of this shell's children so far (the lookups above), not iperf3's.
  # A builtin's output into a file: no fork, whose times would be its own.
  times > "$dir/mesh-times0"
  start="$EPOCHREALTIME"
  for f in "$@"; do
    read -r src dst bytes <<< "$f"
    (ip netns exec "$(ns "$src")" iperf3 -c "$(ip_of "$dst")" -B "$(ip_of "$src")" -p "$port" \
      -n "$bytes" > /dev/null 2>&1 && echo "$EPOCHREALTIME" > "$dir/mesh.end.$port") &
    clients+=($!)
    port=$((port + 1))
  done
  wait "${clients[@]}" || true
  busy=$(($(busy_ticks) - busy0))
  kill "${servers[@]}" 2> /dev/null || true  # those whose client failed
  wait "${servers[@]}" 2> /dev/null || true
  # The iperf3 processes' own CPU (the kernel's work in their system calls
  # included), as a bench counts its daemons': this shell's children since.
  local own
  times > "$dir/mesh-times1"
  own="$(tail -qn 1 "$dir/mesh-times0" "$dir/mesh-times1" | awk '
    { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } c[NR] = t }
    END { print c[2] - c[1] }')"
  if [ "$(cat "$dir"/mesh.end.* 2> /dev/null | wc -l)" != $# ]; then
    echo "mesh: $(($# - $(cat "$dir"/mesh.end.* 2> /dev/null | wc -l))) of $# iperf3 flows failed" >&2
    return 1
  fi
  r1="$(mesh_retrans)"
  cat "$dir"/mesh.end.* | sort -n | awk -v start="$start" -v busy="$busy" -v own="$own" \
    -v retrans=$((r1 - r0)) -v hz="$(getconf CLK_TCK)" '
    { end[NR] = $1 - start }
    END { printf "%.3f %.2f %.2f %d %.3f %.3f\n", end[NR], busy / hz, own, retrans, end[1],
          end[int((NR + 1) / 2)] }'
  rm -f "$dir"/mesh.end.* "$dir"/mesh-times?
}

# registry_config FILE ADDR ROOT [access]: a docker-registry configuration
# serving ADDR (HOST:PORT) from storage ROOT, logging errors only (and every
# request with `access`).
registry_config() {
  local access=""
  [ "${4:-}" = access ] && access=$'\n  accesslog:\n    disabled: false'
  cat > "$1" << YML
version: 0.1
log:
  level: error$access
storage:
  filesystem:
    rootdirectory: $3
http:
  addr: $2
YML
}

# Prints a free loopback port.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits until something accepts on 127.0.0.1:$1.
wait_port() {
  for _ in $(seq 1 1000); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.01; done
  return 1
}

# start_redis: a throwaway redis-server; sets $redis_port.
start_redis() {
  redis_port="$(free_port)"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    --loglevel warning > /dev/null &
  pids+=($!)
  wait_port "$redis_port"
}

# start_seedd NAME ARGS...: seedd with the token and cache dir $work/NAME; waits
# for its ready line (the warmup runs before it); sets $addr.
start_seedd() {
  local name="$1"
  shift
  "$bin/seedd" --listen 127.0.0.1:0 --token-file "$work/token" --cache-dir "$work/$name" "$@" \
    > "$work/$name.out" 2> "$work/$name.err" &
  pids+=($!)
  for _ in $(seq 1 30000); do
    grep -q "serving on" "$work/$name.out" 2>/dev/null && break
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.01
  done
  addr="$(sed -n 's/^seedd: serving on //p' "$work/$name.out")"
  [ -n "$addr" ] || { echo "daemon $name did not start:" >&2; cat "$work/$name.err" >&2; return 1; }
}

# warmup_of NAME: "SOURCE|SECONDS" from the daemon's warmup log line.
warmup_of() {
  sed -n 's/.*FlashInfer autotune warmup: table from \(.*\) in \([0-9.]*\) s.*/\1|\2/p' "$work/$1.err"
}

# make_model DIR MIB: a model of MIB MiB in safetensors shards of at most 256 MiB
# (random bytes, every chunk distinct) and a config.json, for the benchmarks.
make_model() {
  python3 - "$1" "$2" <<'PY'
import json, os, struct, sys
root, mib = sys.argv[1], int(sys.argv[2])
os.makedirs(root)
block = os.urandom(64 << 20)
shard_mib = 256
for i in range((mib + shard_mib - 1) // shard_mib):
    size = min(shard_mib, mib - i * shard_mib) << 20
    header = json.dumps({"t%d" % i: {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    with open(os.path.join(root, "model-%05d.safetensors" % i), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for k in range(size // len(block)):
            f.write(block[k:] + block[:k])  # distinct chunks, cheap to make
        f.write(block[: size % len(block)])
open(os.path.join(root, "config.json"), "w").write("{}")
PY
}
