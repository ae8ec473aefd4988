#!/usr/bin/env bash
# warmup: cold warmup time against seeded warmup time, in the same run. Per rep,
# fresh caches: A runs the cpu-gemm pass cold and publishes to Redis; B seeds from
# A over the control channel; C seeds from Redis. Medians of REPS (default 3).
# Usage: bench/warmup.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
reps="${REPS:-3}"
source "$root/scripts/seedd_lib.sh"
umask 077
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")
start_redis
results="$work/results"
echo "warmup: $reps runs (each cold pass takes about half a minute)"
for i in $(seq 1 "$reps"); do
  store="redis://127.0.0.1:$redis_port?prefix=run$i:"
  n=${#pids[@]}
  start_seedd "A$i" --warmup flashinfer_autotune --store "$store"
  a_addr="$addr"
  start_seedd "B$i" --warmup flashinfer_autotune --source "$a_addr"
  start_seedd "C$i" --warmup flashinfer_autotune --store "$store"
  for d in A B C; do echo "$d $(warmup_of "$d$i")" | tee -a "$results"; done
  for p in "${pids[@]:$n}"; do kill -TERM "$p"; wait "$p" || true; done
done
python3 - "$results" <<'PY'
import statistics, sys
runs = {"A": [], "B": [], "C": []}
for line in open(sys.argv[1]):
    d, rest = line.split(" ", 1)
    src, secs = rest.strip().split("|")
    runs[d].append((src, float(secs)))
for d, want in (("A", "tuned"), ("B", "peer"), ("C", "shared store")):
    assert all(s == want for s, _ in runs[d]), (d, runs[d])
cold, peer, shared = (statistics.median(t for _, t in runs[d]) for d in "ABC")
print()
print("warmup (medians of %d runs; cpu-gemm, default shapes)" % len(runs["A"]))
print("  cold warmup (tune every shape)      %9.3f s" % cold)
print("  seeded from a peer daemon           %9.4f s  (%.0fx faster)" % (peer, cold / peer))
print("  seeded from a shared Redis store    %9.4f s  (%.0fx faster)" % (shared, cold / shared))
print("  target: seeded >= 100x faster than cold: %s"
      % ("met" if min(cold / peer, cold / shared) >= 100 else "NOT met"))
PY
