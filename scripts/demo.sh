#!/usr/bin/env bash
# The main job on embedded defaults, on loopback with a generated token:
#   A starts cold and runs the autotune warmup pass (cpu-gemm), then publishes its
#     table to a shared Redis store (a redis-server this demo starts);
#   B starts with --source A and adopts A's table over the control channel;
#   C starts with only the shared store and adopts what A published.
# Then B adopts A's other warm artifacts (kernel caches) with seedctl fetch, and
# a cold daemon's Triton compile cache is seeded from a warm one at start.
# Usage: scripts/demo.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
source "$(dirname "$0")/seedd_lib.sh"
py() { python3 -c "$@"; }

umask 077
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")

start_redis
store="redis://127.0.0.1:$redis_port?prefix=seedd:"
start() { start_seedd "$@" --warmup flashinfer_autotune; }

echo "demo: daemon A starts cold and runs the cpu-gemm autotune pass (about half a minute)..."
start A --store "$store"
a_addr="$addr"
IFS='|' read -r a_src a_s <<< "$(warmup_of A)"
echo "demo: A ready on $a_addr: table $a_src in $a_s s, published to $store"
start B --source "$a_addr"
b_addr="$addr"
IFS='|' read -r b_src b_s <<< "$(warmup_of B)"
echo "demo: B ready on $b_addr: table from $b_src A in $b_s s"
start C --store "$store"
IFS='|' read -r c_src c_s <<< "$(warmup_of C)"
echo "demo: C ready on $addr: table from $c_src (Redis) in $c_s s"
for d in B C; do
  cmp -s "$(find "$work/A/flashinfer_autotune" -type f)" "$(find "$work/$d/flashinfer_autotune" -type f)" \
    || { echo "demo: $d's table differs from A's" >&2; exit 1; }
done
py "import sys; a,b,c=map(float,sys.argv[1:]); print('demo: cold warmup %.1f s; seeded from peer %.4f s (%.0fx); from shared store %.4f s (%.0fx)' % (a, b, a/b, c, a/c))" "$a_s" "$b_s" "$c_s"

# A's other warm state: kernel caches, adopted by B as artifacts.
hash="$(printf 'demo-model-config' | sha256sum | cut -c1-32)"
py "
import os, random, sys
rng = random.Random(7)
for ns, name, size in (('triton', 'kernel_0.cubin', 2 << 20), ('triton', 'kernel_1.cubin', 2 << 20),
                       ('inductor', 'fx_graph_cache.bin', 1 << 20)):
    d = os.path.join(sys.argv[1], ns, sys.argv[2]); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, name), 'wb').write(rng.randbytes(size))
" "$work/A" "$hash"
s="$(date +%s.%N)"
count=0
while IFS= read -r path; do
  rel="${path#"$work/A/"}"
  "$bin/seedctl" fetch --source "$a_addr" --token-file "$work/token" --namespace "${rel%%/*}" \
    --config-hash "$hash" --filename "${rel##*/}" --cache-dir "$work/B" > /dev/null
  cmp -s "$path" "$work/B/$rel" || { echo "demo: $rel differs after adoption" >&2; exit 1; }
  count=$((count + 1))
done < <(find "$work/A/triton" "$work/A/inductor" -type f | sort)
e="$(date +%s.%N)"
py "import sys; print('demo: B adopted %s kernel-cache artifacts (5.0 MiB) from A in %.3f s, sha256 verified' % (sys.argv[1], float(sys.argv[3]) - float(sys.argv[2])))" "$count" "$s" "$e"

# Compile caches: a warm daemon W holding a Triton cache directory (a directory
# per kernel hash), a cold daemon X seeded from it at start, and a daemon Y whose
# CUDA differs, which refuses the bundle and stays cold, saying why.
py "
import os, random, sys
rng = random.Random(11)
for i in range(24):
    d = os.path.join(sys.argv[1], '%032x' % rng.getrandbits(128)); os.makedirs(d)
    open(os.path.join(d, 'kernel_%d.cubin' % i), 'wb').write(rng.randbytes(96 << 10))
    open(os.path.join(d, 'kernel_%d.ptx' % i), 'w').write('// ptx of kernel %d\n' % i)
    open(os.path.join(d, 'kernel_%d.json' % i), 'w').write('{\"num_warps\": 4, \"num_stages\": 3}')
" "$work/triton-warm"
cc_key="$(printf 'demo-compile-settings' | sha256sum | cut -c1-32)"
cc() { echo --warmup "compile_cache:triton=$work/$1" --compile-key "$cc_key" --factor triton=3.1.0 --factor "cuda=$2"; }
# shellcheck disable=SC2046
start_seedd W $(cc triton-warm 12.8)
w_addr="$addr"
# shellcheck disable=SC2046
start_seedd X --source "$w_addr" $(cc triton-x 12.8)
# shellcheck disable=SC2046
start_seedd Y --source "$w_addr" $(cc triton-y 12.4)
diff -r "$work/triton-warm" "$work/triton-x" > /dev/null || { echo "demo: X's compile cache differs" >&2; exit 1; }
x_line="$(sed -n 's/.*compile_cache:triton: \(peer.*\)/\1/p' "$work/X.err")"
y_why="$(sed -n 's/.*Rejected the remote compile_cache seed; using the local path: //p' "$work/Y.err")"
files() { find "$work/$1" -type f 2> /dev/null | wc -l; }
echo "demo: compile caches side by side (Triton, $(files triton-warm) files, $(du -sh "$work/triton-warm" | cut -f1)):"
echo "demo:   W warm:        $(files triton-warm) files"
echo "demo:   X seeded:      $(files triton-x) files, identical to W's: $x_line"
echo "demo:   Y stays cold:  $(files triton-y) files: $y_why"

# Weights: a generated model directory (safetensors shards plus small files),
# served by a fourth daemon and pulled over the verified data plane.
py "
import json, os, struct, sys
root = sys.argv[1]
os.makedirs(root, exist_ok=True)
for i in range(4):
    size = 64 << 20
    header = json.dumps({'layer%d.weight' % i: {'dtype': 'BF16', 'shape': [size // 2], 'data_offsets': [0, size]}}).encode()
    with open(os.path.join(root, 'model-%05d-of-00004.safetensors' % (i + 1)), 'wb') as f:
        f.write(struct.pack('<Q', len(header)) + header)
        f.write(os.urandom(size))
open(os.path.join(root, 'config.json'), 'w').write(json.dumps({'hidden_size': 4096}))
" "$work/model"
start_seedd W --model "demo=$work/model"
s="$(date +%s.%N)"
"$bin/seedctl" pull --source "$addr" --token-file "$work/token" --model demo --into "$work/B/weights/demo" \
  | sed 's/^/demo: /'
diff -r "$work/model" "$work/B/weights/demo" > /dev/null || { echo "demo: the pulled model differs" >&2; exit 1; }
echo "demo: the pulled model is byte-identical (every chunk verified with SHA-256 as it landed)"

# A fleet: an origin and two daemons pulling the model from it at once; each
# relays the chunks it has verified to the other, so the origin sends about one
# copy. The origin logs what it served when it stops.
start_seedd O --model "demo=$work/model"
origin="$addr"
origin_pid="${pids[-1]}"
s="$(date +%s.%N)"
for n in R1 R2; do
  "$bin/seedd" --listen 127.0.0.1:0 --token-file "$work/token" --cache-dir "$work/$n" \
    --source "$origin" --pull demo > "$work/$n.out" 2> "$work/$n.err" &
  pids+=($!)
done
for n in R1 R2; do
  for _ in $(seq 1 6000); do grep -q "serving on" "$work/$n.out" 2> /dev/null && break; sleep 0.01; done
  grep -q "serving on" "$work/$n.out" || { echo "demo: $n did not pull:" >&2; cat "$work/$n.err" >&2; exit 1; }
  diff -r "$work/model" "$work/$n/weights/demo/current" > /dev/null ||
    { echo "demo: $n's copy differs" >&2; exit 1; }
done
fleet_secs="$(py "print('%.2f' % ($(date +%s.%N) - $s))")"
kill -TERM "$origin_pid"
wait "$origin_pid" || { echo "demo: the origin did not stop cleanly" >&2; exit 1; }
rest=()
for p in "${pids[@]}"; do [ "$p" = "$origin_pid" ] || rest+=("$p"); done
pids=("${rest[@]}")
served="$(sed -n 's/.*Weight data plane: served \([0-9]*\) bytes.*/\1/p' "$work/O.err")"
model_bytes="$(du -sb --apparent-size "$work/model" | cut -f1)"
py "print('demo: 2 daemons pulled the model at once in $fleet_secs s, byte-identical; the origin sent'
         ' %.1f MiB for 2 copies of %.1f MiB (%.2fx the model): they relayed the rest to each other'
         % ($served / 1048576, $model_bytes / 1048576, $served / $model_bytes))"

for p in "${pids[@]:1}"; do kill -TERM "$p"; done
for p in "${pids[@]:1}"; do wait "$p" || { echo "demo: a daemon did not stop cleanly" >&2; exit 1; }; done
echo "demo: all daemons stopped cleanly"
