#!/usr/bin/env bash
# stores: get and put of 64 KiB and 4 MiB artifacts against each backend, each with
# its baseline from the same run: redis-benchmark (same value size, one
# connection) for Redis; the AWS CLI against the same s3rver for S3.
# Usage: bench/stores.sh BIN_DIR   (REPS runs per figure, medians reported)
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
reps="${REPS:-3}"
secs="${STORE_SECONDS:-3}"
source "$root/scripts/seedd_lib.sh"

if [ ! -x /usr/bin/aws ]; then
  echo "stores: installing the AWS CLI (Debian package awscli) for the S3 baseline"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends awscli
fi
start_redis
s3_port="$(free_port)"
mkdir -p "$work/s3" "$work/shared"
node "$root/tools/s3rver/node_modules/s3rver/bin/s3rver.js" -d "$work/s3" -a 127.0.0.1 \
  -p "$s3_port" -s --configure-bucket bench > /dev/null &
pids+=($!)
wait_port "$s3_port"

export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_DEFAULT_REGION=us-east-1
export AWS_PAGER="" AWS_CONFIG_FILE="$work/aws-config"
: > "$AWS_CONFIG_FILE"
redis_url="redis://127.0.0.1:$redis_port"
s3_url="s3://bench/seedd?endpoint=http://127.0.0.1:$s3_port&region=us-east-1"
file_url="file://$work/shared"
results="$work/results"
sb() { "$bin/store_bench" --seconds "$secs" "$@" | tee -a "$results"; }

echo "stores: $reps runs per figure, ${secs}s each"
for i in $(seq 1 "$reps"); do
  for size in 65536 4194304; do
    n=$([ "$size" -eq 65536 ] && echo 20000 || echo 300)
    for t in set get; do
      rps="$(redis-benchmark -h 127.0.0.1 -p "$redis_port" -c 1 -n "$n" -d "$size" -t "$t" -q \
              | tr '\r' '\n' | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1)"
      echo "redisbench_${t}_$size ops_s=$rps mb_s=$(python3 -c "print($rps*$size/1e6)") errors=0" | tee -a "$results"
    done
    for op in put get; do
      sb --store "$redis_url" --op "$op" --size "$size" --label "redis_${op}_$size"
      sb --store "$file_url" --op "$op" --size "$size" --label "file_${op}_$size"
      sb --store "$s3_url" --op "$op" --size "$size" --label "s3_${op}_$size"
      sb --store "$s3_url" --op "$op" --size "$size" --threads 10 --label "s3x10_${op}_$size"
    done
  done
  # AWS CLI: 16 objects per invocation (amortising its start-up), 10 concurrent
  # requests (its default), the same s3rver.
  for size in 65536 4194304; do
    rm -rf "$work/up" "$work/down" && mkdir -p "$work/up" "$work/down"
    for k in $(seq 1 16); do head -c "$size" /dev/urandom > "$work/up/v$k"; done
    s="$(date +%s.%N)"
    /usr/bin/aws s3 cp --quiet --recursive --endpoint-url "http://127.0.0.1:$s3_port" "$work/up" "s3://bench/awscli/$size/"
    m="$(date +%s.%N)"
    /usr/bin/aws s3 cp --quiet --recursive --endpoint-url "http://127.0.0.1:$s3_port" "s3://bench/awscli/$size/" "$work/down"
    e="$(date +%s.%N)"
    python3 - "$s" "$m" "$e" "$size" >> "$results" <<'PY'
import sys
s, m, e, size = map(float, sys.argv[1:])
for op, t in (("put", m - s), ("get", e - m)):
    print("awscli_%s_%d ops_s=%.1f mb_s=%.1f errors=0" % (op, size, 16 / t, 16 * size / t / 1e6))
PY
    tail -2 "$results"
  done
done

python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, *kv = line.split()
    rows.setdefault(label, []).append({k: float(v) for k, v in (p.split("=") for p in kv)})
m = {l: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for l, rs in rows.items()}
def row(name, label):
    r = m[label]
    print("  %-44s %10.1f %9.1f" % (name, r["ops_s"], r["mb_s"]))
for size, sz in ((65536, "64 KiB"), (4194304, "4 MiB")):
    print()
    print("stores, %s values (medians)%s" % (sz, ""))
    print("  %-44s %10s %9s" % ("", "ops/s", "MB/s"))
    for op, rop in (("get", "get"), ("put", "set")):
        row("redis-benchmark %s, 1 connection" % rop.upper(), "redisbench_%s_%d" % (rop, size))
        row("seedd redis %s, 1 connection" % op, "redis_%s_%d" % (op, size))
        row("AWS CLI s3 cp %s (16 objects, 10 requests)" % op, "awscli_%s_%d" % (op, size))
        row("seedd s3 %s, 1 request at a time" % op, "s3_%s_%d" % (op, size))
        row("seedd s3 %s, 10 requests at a time" % op, "s3x10_%s_%d" % (op, size))
        row("seedd file:// %s" % op, "file_%s_%d" % (op, size))
    g = m["redis_get_%d" % size]["ops_s"] / m["redisbench_get_%d" % size]["ops_s"]
    print("  redis GET: seedd / redis-benchmark = %.2fx (target >= 0.5x)" % g)
    for op in ("get", "put"):
        print("  s3 %s: seedd (10 requests) / AWS CLI = %.2fx; seedd (1 request) / AWS CLI = %.2fx%s"
              % (op, m["s3x10_%s_%d" % (op, size)]["mb_s"] / m["awscli_%s_%d" % (op, size)]["mb_s"],
                 m["s3_%s_%d" % (op, size)]["mb_s"] / m["awscli_%s_%d" % (op, size)]["mb_s"],
                 " (target >= 1x at 4 MiB)" if size == 4194304 else ""))
PY
