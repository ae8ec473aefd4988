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

# machine_ticks: "BUSY TOTAL", the machine's CPU time in clock ticks over all
# CPUs, busy being every state but idle and iowait. The kernel's network work
# for a packet that arrives while a CPU idles (a shaped link's timer, the
# receive softirq) is charged to no process, so the benchmarks that share
# these cores among many daemons read the machine's time beside their own.
machine_ticks() { awk '$1 == "cpu" {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat; }

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
