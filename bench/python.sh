#!/usr/bin/env bash
# The Python package's client: requests per second against a seedd daemon (a
# 1 KiB artifact, one connection per request), for 1 and 4 client threads,
# beside seedd's C++ client (control_plane_load) and the reference transport's
# client (tests/python/reference_seed.py), all in the same run. REPS runs
# (default 5) of SECONDS_PER_RUN (default 3); medians.
#   bench/python.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
bin="$build/bin"
root="$(cd "$(dirname "$0")/.." && pwd)"
reps="${REPS:-5}"
secs="${SECONDS_PER_RUN:-3}"
python="${PYTHON:-/usr/bin/python3}"
source "$root/scripts/seedd_lib.sh"

export SEEDD_TOKEN="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export PYTHONPATH="$build/python"
hash=0123456789abcdef0123456789abcdef
mkdir -p "$work/cache/bench/$hash"
head -c 1024 /dev/urandom > "$work/cache/bench/$hash/small.bin"
request="{\"kind\":\"artifact\",\"namespace\":\"bench\",\"config_hash\":\"$hash\",\"filename\":\"small.bin\"}"

"$bin/seedd" --listen 127.0.0.1:0 --cache-dir "$work/cache" --log-level error > "$work/seedd.out" &
pids+=("$!")
for _ in $(seq 1 500); do grep -q "serving on" "$work/seedd.out" 2>/dev/null && break; sleep 0.01; done
addr="$(sed -n 's/.*serving on //p' "$work/seedd.out")"
[ -n "$addr" ] || { echo "bench: seedd did not start" >&2; exit 1; }

results="$work/results"
echo "python clients: $reps runs of ${secs}s each, against seedd at $addr"
for i in $(seq 1 "$reps"); do
  for n in 1 4; do
    "$bin/control_plane_load" --target "$addr" --request "$request" --clients "$n" \
      --seconds "$secs" --label "cpp_$n" | tee -a "$results"
    "$python" "$root/bench/python/client_load.py" seedd "$addr" "$request" "$n" "$secs" \
      "binding_$n" | tee -a "$results"
    "$python" "$root/bench/python/client_load.py" reference "$addr" "$request" "$n" "$secs" \
      "reference_$n" | tee -a "$results"
  done
done

"$python" - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, *kv = line.split()
    rows.setdefault(label, []).append({k: float(v) for k, v in (p.split("=") for p in kv)})
m = {l: {k: statistics.median(r[k] for r in rs)
         for k in ("rps", "p50_ms", "p99_ms", "client_cpu_us")}
     for l, rs in rows.items()}
print()
print("python clients against seedd: medians, one connection per request, 1 KiB artifact")
print("  %-28s %9s %8s %8s %12s" % ("client", "req/s", "p50 ms", "p99 ms", "client CPU"))
print("  %-28s %9s %8s %8s %12s" % ("", "", "", "", "us/request"))
for n in (1, 4):
    for label, name in (("cpp", "seedd C++ client"), ("binding", "import seedd"),
                        ("reference", "reference transport")):
        r = m["%s_%d" % (label, n)]
        print("  %-28s %9.0f %8.3f %8.3f %12.1f" % (
            "%s, %d thread%s" % (name, n, "s" if n > 1 else ""), r["rps"], r["p50_ms"],
            r["p99_ms"], r["client_cpu_us"]))
for n in (1, 4):
    b, c, r = m["binding_%d" % n], m["cpp_%d" % n], m["reference_%d" % n]
    print("  %d thread%s: import seedd / C++ client %.2fx (aim >= 0.8x); "
          "import seedd / reference %.2fx (aim >= 2x)"
          % (n, "s" if n > 1 else "", b["rps"] / c["rps"], b["rps"] / r["rps"]))
    print("    client CPU per request: reference / import seedd %.2fx, import seedd / C++ %.2fx"
          % (r["client_cpu_us"] / b["client_cpu_us"], b["client_cpu_us"] / c["client_cpu_us"]))
c, r = m["cpp_1"], m["reference_1"]
print("  the ceiling here: the C++ client itself is %.2fx the reference's req/s at 1 thread "
      "(the server's work and the loopback round trip are most of a request)"
      % (c["rps"] / r["rps"]))
PY
