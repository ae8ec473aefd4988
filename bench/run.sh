#!/usr/bin/env bash
# Benchmarks, each against a baseline measured in the same run: bench/run.sh BIN_DIR
#
# control_plane: requests/s and latency of seedd against the reference-style Python
# server (tests/interop/seedpeer.py, one connection at a time), 8 clients, one
# connection per request; then seedd again with 200 stalled peers connected.
# Each configuration runs REPS times (default 3); the medians are reported.
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
reps="${REPS:-3}"
secs="${SECONDS_PER_RUN:-4}"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

export SEEDD_TOKEN="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
hash=0123456789abcdef0123456789abcdef
mkdir -p "$work/cache/bench/$hash"
head -c 1024 /dev/urandom > "$work/cache/bench/$hash/table.json"
request="{\"kind\":\"artifact\",\"namespace\":\"bench\",\"config_hash\":\"$hash\",\"filename\":\"table.json\"}"

# Starts a server that prints "...: serving on HOST:PORT"; sets $addr.
start() {
  local out="$work/$1.out"
  shift
  "$@" > "$out" 2> "$work/server.err" &
  pids+=($!)
  for _ in $(seq 1 500); do
    if grep -q "serving on" "$out" 2>/dev/null; then break; fi
    sleep 0.01
  done
  addr="$(sed -n 's/.*serving on //p' "$out")"
  [ -n "$addr" ] || { echo "bench: $1 did not start" >&2; cat "$work/server.err" >&2; exit 1; }
}

start seedd "$bin/seedd" --listen 127.0.0.1:0 --cache-dir "$work/cache" --log-level error
seedd_addr="$addr"
start python python3 "$root/tests/interop/seedpeer.py" serve --listen 127.0.0.1:0 --cache-dir "$work/cache"
python_addr="$addr"

load() { "$bin/control_plane_load" --request "$request" --seconds "$secs" "$@"; }
results="$work/results"
for i in $(seq 1 "$reps"); do
  load --target "$seedd_addr" --label seedd --clients 8 | tee -a "$results"
  load --target "$python_addr" --label python --clients 8 | tee -a "$results"
  load --target "$seedd_addr" --label seedd_stalled200 --clients 8 --stalled 200 | tee -a "$results"
done

python3 - "$results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, *kv = line.split()
    rows.setdefault(label, []).append({k: float(v) for k, v in (p.split("=") for p in kv)})
med = {l: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for l, rs in rows.items()}
s, p, st = med["seedd"], med["python"], med["seedd_stalled200"]
print()
print("control_plane (medians of %d runs, 8 clients, one connection per request)" % len(rows["seedd"]))
print("  %-26s %10s %9s %9s" % ("server", "req/s", "p50 ms", "p99 ms"))
for name, m in (("python reference-style", p), ("seedd", s), ("seedd + 200 stalled peers", st)):
    print("  %-26s %10.0f %9.3f %9.3f" % (name, m["rps"], m["p50_ms"], m["p99_ms"]))
ratio = s["rps"] / p["rps"] if p["rps"] else float("inf")
print("  seedd / python requests/s: %.2fx (target >= 3x)" % ratio)
print("  seedd p99 %.3f ms (target <= 2 ms); with 200 stalled peers %.3f ms (target <= 5 ms)"
      % (s["p99_ms"], st["p99_ms"]))
PY
