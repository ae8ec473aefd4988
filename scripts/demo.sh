#!/usr/bin/env bash
# The main job on embedded defaults: two seedd daemons on loopback with a generated
# token. Daemon A is warm (its cache holds warmup artifacts); daemon B starts cold
# and adopts every artifact from A; then B serves them too.
# Usage: scripts/demo.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }

# A shared secret for this run only, in a file only we can read.
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"

# The warm daemon's cache: what a replica has after its warmup passes.
hash="$(printf 'demo-model-config' | sha256sum | cut -c1-32)"
mkdir -p "$work/warm"
python3 - "$work/warm" "$hash" <<'PY'
import json, os, random, sys
root, h = sys.argv[1], sys.argv[2]
rng = random.Random(7)
def put(ns, name, data):
    d = os.path.join(root, ns, h)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
table = {"_metadata": {"flashinfer_version": "0.2.5", "gpu": "demo"}}
for i in range(600):
    table[f"('gemm', 'cutlass', (({rng.randint(1, 8192)}, 4096),), ())"] = ["cutlass", rng.randint(0, 40)]
put("flashinfer", "autotune_configs_dp0_rank0.json", json.dumps(table).encode())
for i in range(4):
    put("triton", f"kernel_{i}.cubin", rng.randbytes(2 << 20))
put("inductor", "fx_graph_cache.bin", rng.randbytes(1 << 20))
PY

start() {  # start NAME ARGS...: runs seedd, waits for its ready line, sets $addr
  local name="$1"
  shift
  "$bin/seedd" --listen 127.0.0.1:0 --token-file "$work/token" --log-level warn "$@" \
    > "$work/$name.out" 2> "$work/$name.err" &
  pids+=($!)
  for _ in $(seq 1 500); do
    grep -q "serving on" "$work/$name.out" 2>/dev/null && break
    sleep 0.01
  done
  addr="$(sed -n 's/^seedd: serving on //p' "$work/$name.out")"
  [ -n "$addr" ] || { echo "demo: daemon $name did not start:" >&2; cat "$work/$name.err" >&2; exit 1; }
}

start A --cache-dir "$work/warm"
a_addr="$addr"
start B --cache-dir "$work/cold" --source "$a_addr"
b_addr="$addr"
echo "demo: warm daemon A on $a_addr, cold daemon B on $b_addr (token generated for this run)"

total_bytes=0
count=0
t0="$(now)"
while IFS= read -r path; do
  rel="${path#"$work/warm/"}"
  ns="${rel%%/*}"
  file="${rel##*/}"
  s="$(now)"
  "$bin/seedctl" fetch --source "$a_addr" --token-file "$work/token" --namespace "$ns" \
    --config-hash "$hash" --filename "$file" --cache-dir "$work/cold" > /dev/null
  e="$(now)"
  cmp -s "$path" "$work/cold/$rel" || { echo "demo: $rel differs after adoption" >&2; exit 1; }
  size="$(stat -c %s "$path")"
  total_bytes=$((total_bytes + size))
  count=$((count + 1))
  d="$(elapsed "$s" "$e")"
  echo "$d" >> "$work/durations"
  printf 'demo: B adopted %-48s %9d bytes from A in %s s (sha256 verified)\n' "$ns/$file" "$size" "$d"
done < <(find "$work/warm" -type f | sort)
t1="$(now)"

# B now serves what it adopted: a third party asks B, not A.
"$bin/seedctl" request --source "$b_addr" --token-file "$work/token" --kind artifact \
  --param namespace=flashinfer --param "config_hash=$hash" \
  --param filename=autotune_configs_dp0_rank0.json > /dev/null
echo "demo: B now serves the adopted state to other peers"
printf 'demo: cold daemon B warmed with %d artifacts (%.1f MiB) from A: %s s in seedctl fetch, %s s wall with verification\n' \
  "$count" "$(python3 -c "print($total_bytes / 1048576)")" \
  "$(python3 -c "import sys; print('%.3f' % sum(float(l) for l in open(sys.argv[1])))" "$work/durations")" \
  "$(elapsed "$t0" "$t1")"

for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p" || { echo "demo: a daemon did not stop cleanly" >&2; exit 1; }; done
pids=()
echo "demo: both daemons stopped cleanly"
