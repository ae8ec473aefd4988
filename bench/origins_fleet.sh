#!/usr/bin/env bash
# origins_fleet: FLEET (default 16) daemons configured alike (`seedd --model
# m=oci://...` and one --registry) fetching a model from an OCI registry, each
# host in its own network namespace behind a veth pair on one bridge, every
# link shaped with tc to RATE (default 100mbit) both ways. Host 0 runs the
# registry (Debian's docker-registry) and redis-server; the model, SIZE_MIB
# (default 128) in FILES (default 8) raw layers plus a config file, is pushed
# there with skopeo before the links are shaped. Reported, medians of REPS
# (default 2):
#  - one daemon alone fetching the model from the registry (start to ready);
#  - FLEET daemons started at once: the time until the last is ready, over the
#    one daemon's, and the bytes host 0's interface sent (the registry's
#    upstream, redis included) over the model's (target <= 1.05);
#  - with TAKEOVER=1 (the default), the same with the daemon that first holds a
#    file's claim killed (SIGKILL) 2 s after the start: the bytes sent again
#    (target <= 1.3x the model) and the survivors' last ready.
# Each run also says how busy the machine's cores were (every host and the
# registry share them: a run near 100% is bound by this machine's CPU, not by
# its links).
# QUEUE_MS (default 50) is how long each link's tbf queue may hold a packet.
# MESH=K measures the network alone first (mesh_floor in scripts/seedd_lib.sh):
# every daemon's host receiving the model's size from K others at once
# (iperf3), against one such flow.
# RANGE_MIB sets the daemons' --origin-range-mib (files over it travel as
# pieces of that size, each fetched from upstream once and shared as it lands).
# Needs root (ip netns, tc).
# Usage: bench/origins_fleet.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
fleet="${FLEET:-16}"
rate="${RATE:-100mbit}"
size_mib="${SIZE_MIB:-128}"
files="${FILES:-8}"
reps="${REPS:-2}"
source "$root/scripts/seedd_lib.sh"
if [ "$(id -u)" -ne 0 ]; then
  echo "origins_fleet: needs root for network namespaces and tc; skipped" >&2
  exit 1
fi
for tool in docker-registry skopeo redis-server redis-cli tc; do
  command -v "$tool" > /dev/null || { echo "origins_fleet: $tool is missing (scripts/setup.sh test)" >&2; exit 1; }
done
tag="sdo$$"
shm="$(mktemp -d /dev/shm/seedd-origins.XXXXXX)"
netns_cleanup() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^$tag-" || true); do
    ip netns pids "$ns" | xargs -r kill -9 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
}
trap 'cleanup; netns_cleanup; rm -rf "$shm"' EXIT
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")

sw="$tag-sw"
ip netns add "$sw"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
ns() { echo "$tag-h$1"; }
ip_of() { echo "10.79.0.$(($1 + 1))"; }
for i in $(seq 0 "$fleet"); do
  ip netns add "$(ns "$i")"
  ip link add eth0 netns "$(ns "$i")" type veth peer name "p$i" netns "$sw"
  ip -n "$(ns "$i")" addr add "$(ip_of "$i")/24" dev eth0
  ip -n "$(ns "$i")" link set lo up
  ip -n "$(ns "$i")" link set eth0 up
  ip -n "$sw" link set "p$i" master br0
  ip -n "$sw" link set "p$i" up
done
shape() {
  for i in $(seq 0 "$fleet"); do
    ip netns exec "$(ns "$i")" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency "${QUEUE_MS:-50}ms"
    ip netns exec "$sw" tc qdisc add dev "p$i" root tbf rate "$rate" burst 256kb latency "${QUEUE_MS:-50}ms"
  done
}

# Host 0: the registry and redis.
reg="$(ip_of 0):5000"
registry_config "$work/registry.yml" "$reg" "$work/registry"
ip netns exec "$(ns 0)" docker-registry serve "$work/registry.yml" > "$work/registry.log" 2>&1 &
pids+=($!)
ip netns exec "$(ns 0)" redis-server --bind "$(ip_of 0)" --port 6379 --protected-mode no --save '' --appendonly no \
  > "$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  ip netns exec "$(ns 1)" bash -c "exec 3<>/dev/tcp/${reg%:*}/${reg#*:}" 2> /dev/null && break
  sleep 0.1
done

python3 "$root/bench/modelpack_layout.py" "$work" "$size_mib" "$files"
model_bytes="$(du -cb --apparent-size "$work"/v1/blobs/sha256/* | tail -1 | cut -f1)"
ip netns exec "$(ns 1)" skopeo copy -q --dest-tls-verify=false "oci:$work/v1:latest" \
  "docker://$reg/bench/model:v1"
shape
if [ -n "${MESH:-}" ]; then
  command -v iperf3 > /dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iperf3 > /dev/null
  mesh_floor origins_fleet "$fleet" "$MESH" "$size_mib" "$shm"
fi
url="m=oci://$reg/bench/model:v1?plain-http=true"
echo "origins_fleet: a $size_mib MiB model in $files files; $fleet daemons and the registry, links of $rate"

tx0() { ip netns exec "$(ns 0)" cat /sys/class/net/eth0/statistics/tx_bytes; }
# Bytes redis-server has sent to its clients so far (the registry's share of host 0's).
redis_out() {
  ip netns exec "$(ns 0)" redis-cli -h "$(ip_of 0)" INFO stats | tr -d '\r' |
    awk -F: '$1 == "total_net_output_bytes" {print $2}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# The machine's CPU (machine_ticks): every host shares these cores, so a run
# that keeps them busy is bound by the machine, not by its links.
busy_since() {
  local b0 t0 b1 t1
  read -r b0 t0 <<< "$1"
  read -r b1 t1 < <(machine_ticks)
  awk "BEGIN {printf \"%.0f%%\", 100 * ($b1 - $b0) / ($t1 - $t0)}"
}
# start_in HOST NAME ARGS...: seedd in HOST's namespace on its address.
start_in() {
  local host="$1" name="$2"
  shift 2
  ip netns exec "$(ns "$host")" "${barrier[@]}" "$bin/seedd" --listen "$(ip_of "$host"):7420" \
    --token-file "$work/token" --cache-dir "$shm/$name" --log-level info \
    ${RANGE_MIB:+--origin-range-mib "$RANGE_MIB"} "$@" \
    > "$work/$name.out" 2> "$work/$name.err" &
  pids+=($!)
  host_pid[$host]=$!
}
declare -A host_pid
# wait_ready HOST NAME: until it printed its ready line, or exited.
wait_ready() {
  for _ in $(seq 1 60000); do
    file_has "$work/$2.out" "serving on" && return 0
    kill -0 "${host_pid[$1]}" 2> /dev/null || { echo "  $2 exited: $(tail -1 "$work/$2.err" | cut -c1-300)" >&2; return 0; }
    nap 0.01
  done
}

alone_s=()
for r in $(seq 1 "$reps"); do
  barrier_new
  start_in 1 "alone-$r" --model "$url"
  ticks=$(machine_ticks)
  barrier_release 1 || exit 1
  t0="$barrier_start"
  wait_ready 1 "alone-$r"
  t1=$(date +%s.%N)
  kill "${host_pid[1]}"
  wait "${host_pid[1]}" 2> /dev/null || true
  alone_s+=("$(awk "BEGIN {print $t1 - $t0}")")
  rm -rf "$shm/alone-$r"
  echo "  one daemon alone, run $r: ${alone_s[-1]} s (the machine's $(nproc) cores $(busy_since "$ticks") busy)"
done
alone=$(median "${alone_s[@]}")

# fleet_run KILL: FLEET daemons at once; with KILL=1 the first to claim a file is killed after 2 s.
fleet_run() {
  local kill_one="$1" t0 t1 before after victim="" killed=0
  ip netns exec "$(ns 0)" redis-cli -h "$(ip_of 0)" FLUSHALL > /dev/null
  ip netns exec "$(ns 0)" redis-cli -h "$(ip_of 0)" CONFIG RESETSTAT > /dev/null
  redis_before=$(redis_out)
  before=$(tx0)
  # Launched one after another, started together (seedd_lib.sh's barrier).
  barrier_new
  for i in $(seq 1 "$fleet"); do
    start_in "$i" "fleet-$i" --model "$url" --registry "redis://$(ip_of 0):6379"
  done
  ticks=$(machine_ticks)
  barrier_release "$fleet" || exit 1
  t0="$barrier_start"
  if [ "$kill_one" = 1 ]; then
    sleep 2
    # A daemon fetching from upstream now (its log says so), else host 1.
    killed=1
    for i in $(seq 1 "$fleet"); do
      if grep -q "from upstream for the fleet" "$work/fleet-$i.err" 2> /dev/null; then
        killed=$i
        break
      fi
    done
    kill -9 "${host_pid[$killed]}"
    victim="fleet-$killed"
  fi
  for i in $(seq 1 "$fleet"); do [ "$i" = "$killed" ] || wait_ready "$i" "fleet-$i"; done
  t1=$(date +%s.%N)
  busy=$(busy_since "$ticks")
  after=$(tx0)
  redis_sent=$(($(redis_out) - redis_before))
  for i in $(seq 1 "$fleet"); do kill "${host_pid[$i]}" 2> /dev/null || true; done
  for i in $(seq 1 "$fleet"); do wait "${host_pid[$i]}" 2> /dev/null || true; done
  local ready
  ready=$(grep -l "serving on" "$work"/fleet-*.out | wc -l)
  run_s=$(awk "BEGIN {print $t1 - $t0}")
  run_up=$(awk "BEGIN {print ($after - $before) / $model_bytes}")
  echo "  $([ "$kill_one" = 1 ] && echo "takeover (${victim} killed)" || echo fleet) run: last ready in $run_s s, $ready daemons ready, host 0 sent ${run_up}x the model (of which redis-server $(awk "BEGIN {printf \"%.4f\", $redis_sent / $model_bytes}")x); the machine's $(nproc) cores $busy busy"
  if [ -n "${KEEP_LOGS:-}" ]; then
    mkdir -p "$KEEP_LOGS" && cp "$work"/fleet-*.err "$KEEP_LOGS"/
    ip netns exec "$(ns 0)" redis-cli -h "$(ip_of 0)" INFO commandstats > "$KEEP_LOGS/redis-commandstats"
  fi
  rm -rf "$shm"/fleet-* "$work"/fleet-*
}

fleet_s=(); fleet_up=(); take_s=(); take_up=()
for r in $(seq 1 "$reps"); do
  fleet_run 0
  fleet_s+=("$run_s"); fleet_up+=("$run_up")
  if [ "${TAKEOVER:-1}" = 1 ]; then
    fleet_run 1
    take_s+=("$run_s"); take_up+=("$run_up")
  fi
done
fs=$(median "${fleet_s[@]}"); fu=$(median "${fleet_up[@]}")
printf 'origins_fleet: %d daemons alike: last ready in %.2f s, %.2fx one daemon alone (%.2f s); host 0 sent %.3fx the model (target <= 1.05)\n' \
  "$fleet" "$fs" "$(awk "BEGIN {print $fs / $alone}")" "$alone" "$fu"
if [ "${TAKEOVER:-1}" = 1 ]; then
  ts=$(median "${take_s[@]}"); tu=$(median "${take_up[@]}")
  printf 'origins_fleet: one fetching daemon killed after 2 s: the others last ready in %.2f s; host 0 sent %.3fx the model (target <= 1.3)\n' \
    "$ts" "$tu"
fi
