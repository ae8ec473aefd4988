#!/usr/bin/env bash
# origins: a model of SIZE_MIB (default 256) in ten files, pushed as a ModelPack
# artifact (one raw layer per file) to a loopback OCI registry (Debian's
# docker-registry) with skopeo. Measured, medians of REPS (default 3):
#  - a daemon fetching it at start (`seedd --model m=oci://...`, every file
#    verified against its layer digest, fsynced, then indexed into chunk digests)
#    against skopeo copying the same artifact to a directory in the same run
#    (the registry's own client; no index, no fsync);
#  - a new revision that rewrote one file of ten (10% of the bytes): the bytes
#    fetched from upstream over the model's (target <= 0.15), the rest copied
#    from the version held;
#  - FLEET (default 8) daemons configured alike (the same --model URL and
#    --registry, a real redis-server), started at once: the bytes the registry
#    sent (its access log's blob GETs, ranged ones too) over the model's (target <= 1.05), and
#    the time until the last is ready over one daemon's fetch alone (loopback,
#    unshaped: the fleet's pulls share this machine's 2 cores and disk).
# Usage: bench/origins.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
size_mib="${SIZE_MIB:-256}"
reps="${REPS:-3}"
fleet="${FLEET:-8}"
source "$root/scripts/seedd_lib.sh"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")

port="$(free_port)"
registry_config "$work/registry.yml" "127.0.0.1:$port" "$work/registry" access
docker-registry serve "$work/registry.yml" > "$work/registry.log" 2>&1 &
pids+=($!)
start_redis
wait_port "$port"

echo "origins: a ${size_mib} MiB model in 10 files, two revisions (one file rewritten)"
python3 "$root/bench/modelpack_layout.py" "$work" "$size_mib" 10 --revision
for v in v1 v2; do
  skopeo copy -q --dest-tls-verify=false "oci:$work/$v:latest" "docker://127.0.0.1:$port/bench/model:$v"
done

# seconds of `seedd --model` start to ready, and its "Fetched" line's figures.
fetch() {  # NAME TAG
  local t0 t1
  t0=$(date +%s.%N)
  start_seedd "$1" --model "m=oci://127.0.0.1:$port/bench/model:$2" --log-level info
  t1=$(date +%s.%N)
  kill "${pids[-1]}"
  wait "${pids[-1]}" 2>/dev/null || true
  awk "BEGIN {print $t1 - $t0}"
}
to_bytes() {  # "1.50 MiB" -> bytes
  python3 -c 'import sys; n, u = sys.argv[1], sys.argv[2]; print(int(float(n) * {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}[u]))' "$1" "$2"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

seedd_s=(); skopeo_s=(); fetched_ratio=()
model_bytes=$((size_mib * 1048576 / 10 * 10 + 28))
for r in $(seq 1 "$reps"); do
  rm -rf "$work/skopeo-$r"
  t0=$(date +%s.%N)
  skopeo copy -q --src-tls-verify=false "docker://127.0.0.1:$port/bench/model:v1" "dir:$work/skopeo-$r"
  t1=$(date +%s.%N)
  skopeo_s+=("$(awk "BEGIN {print $t1 - $t0}")")
  rm -rf "$work/skopeo-$r"
  seedd_s+=("$(fetch "run-$r" v1)")
  fetch "run-$r" v2 > /dev/null
  line=$(grep "Fetched model m" "$work/run-$r.err" | tail -1)
  up=$(echo "$line" | sed -n 's/.* files, \([0-9.]*\) \([KMG]*i*B\) from upstream.*/\1 \2/p')
  fetched=$(to_bytes $up)
  fetched_ratio+=("$(awk "BEGIN {print $fetched / $model_bytes}")")
  echo "  run $r: skopeo ${skopeo_s[-1]} s, seedd ${seedd_s[-1]} s; revision: $up from upstream"
  rm -rf "$work/run-$r"
done
s=$(median "${seedd_s[@]}"); k=$(median "${skopeo_s[@]}"); f=$(median "${fetched_ratio[@]}")
printf 'origins: fetch at start %.2f s (seedd, verified, fsynced, indexed) vs %.2f s (skopeo copy): %.2fx\n' "$s" "$k" "$(awk "BEGIN {print $s / $k}")"
printf 'origins: a revision rewriting 10%% of the bytes fetched %.3f of the model from upstream (target <= 0.15)\n' "$f"

# The fleet: FLEET daemons configured alike, started at once.
blob_bytes() {  # bytes of blob GETs answered (200, or 206 to a ranged GET) in the registry's access log so far
  grep -oE '"GET /v2/bench/model/blobs/sha256:[0-9a-f]* HTTP/1.1" 20[06] [0-9]*' "$work/registry.log" |
    awk '{s += $NF} END {print s + 0}'
}
fleet_s=(); fleet_up=()
for r in $(seq 1 "$reps"); do
  redis-cli -p "$redis_port" FLUSHALL > /dev/null
  before=$(blob_bytes)
  t0=$(date +%s.%N)
  fleet_pids=()
  for i in $(seq 1 "$fleet"); do
    "$bin/seedd" --listen 127.0.0.1:0 --token-file "$work/token" --cache-dir "$work/fleet-$r-$i" \
      --log-level info --model "m=oci://127.0.0.1:$port/bench/model:v1" --registry "redis://127.0.0.1:$redis_port" \
      > "$work/fleet-$r-$i.out" 2> "$work/fleet-$r-$i.err" &
    fleet_pids+=($!)
    pids+=($!)
  done
  for i in $(seq 1 "$fleet"); do
    for _ in $(seq 1 60000); do
      file_has "$work/fleet-$r-$i.out" "serving on" && break
      kill -0 "${fleet_pids[$((i - 1))]}" 2> /dev/null || { cat "$work/fleet-$r-$i.err" >&2; exit 1; }
      nap 0.01
    done
  done
  t1=$(date +%s.%N)
  kill "${fleet_pids[@]}"
  wait "${fleet_pids[@]}" 2> /dev/null || true
  fleet_s+=("$(awk "BEGIN {print $t1 - $t0}")")
  fleet_up+=("$(awk "BEGIN {print ($(blob_bytes) - $before) / $model_bytes}")")
  # "X from upstream (N parts), Y from the fleet (M parts)" per daemon.
  upstream=$(grep -ho 'from upstream ([0-9]* parts)' "$work"/fleet-"$r"-*.err | tr -d '(' |
    awk '{s += $3; if ($3 > 0) d++} END {printf "%d part(s) from upstream, by %d daemon(s)", s, d}')
  echo "  fleet run $r: ${fleet_s[-1]} s, registry sent ${fleet_up[-1]} x the model; $upstream"
  if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp "$work"/fleet-"$r"-*.err "$KEEP_LOGS"/; fi
  rm -rf "$work"/fleet-"$r"-*
done
fs=$(median "${fleet_s[@]}"); fu=$(median "${fleet_up[@]}")
printf 'origins: %d daemons configured alike: the registry sent %.3fx the model (target <= 1.05); the last ready in %.2f s, %.2fx one daemon alone (%.2f s)\n' \
  "$fleet" "$fu" "$fs" "$(awk "BEGIN {print $fs / $s}")" "$s"
