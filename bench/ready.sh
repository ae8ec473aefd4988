#!/usr/bin/env bash
# ready: how long a cold replica takes to be ready to serve, end to end. An
# engine-like Python process (bench/engine_ready.py) needs a model (SHARDS x
# SHARD_MIB of safetensors, default 8 x 64 MiB), a JIT extension
# (torch.utils.cpp_extension.load) and an autotune table; it is ready once
# the extension is loaded, the table read and every tensor copied in torch.
#   cold:   nothing local, no seedd: the extension compiles, the autotune pass
#           runs (seedd's cpu-gemm runner, as the engine's own tuning), the
#           model is pulled from the origin daemon (seedd.pull);
#   seeded: a seedd daemon on the replica seeds all three from a warm peer
#           (--warmup compile_cache:torch_extensions --warmup
#           flashinfer_autotune --pull), then the engine starts;
#   warm:   the same daemon restarted with everything local, then the engine.
# The replica's link is held to RATE (default 1gbit; htb on the loopback of a
# network namespace of its own; needs root), T is the model's size at the
# link rate measured in the same run (one TCP stream). REPS runs (default 3),
# medians. Last line:
#   ready: cold=X s seeded=Y s warm=Z s transfer=T s seeded/(warm+transfer)=R
# Usage: bench/ready.sh BIN_DIR
set -euo pipefail
rate="${RATE:-1gbit}"
if [ -z "${SEEDD_READY_NETNS:-}" ]; then
  [ "$(id -u)" -eq 0 ] || { echo "ready: needs root to shape a link" >&2; exit 1; }
  exec unshare --net -- env SEEDD_READY_NETNS=1 bash "$0" "$@"
fi
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
reps="${REPS:-3}"
shards="${SHARDS:-8}"
shard_mib="${SHARD_MIB:-64}"
py=/usr/bin/python3
ip link set lo up
tc qdisc add dev lo root handle 1: htb default 1 r2q 1000
tc class add dev lo parent 1: classid 1:1 htb rate "$rate" ceil "$rate"
source "$root/scripts/seedd_lib.sh"
export PYTHONPATH="$(dirname "$bin")/python" PYTHONDONTWRITEBYTECODE=1 MAX_JOBS=2
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")
export SEEDD_TOKEN="$(cat "$work/token")"
mkdir -p "$work/src"
cat > "$work/src/ext.cpp" <<'CPP'
#include <torch/extension.h>
torch::Tensor add(torch::Tensor x) { return x + 1; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add", &add); }
CPP
SHARDS="$shards" SHARD_MIB="$shard_mib" "$py" - "$work/model" <<'PY'
import json, os, sys
root = sys.argv[1]
os.makedirs(root)
shards, mib = int(os.environ["SHARDS"]), int(os.environ["SHARD_MIB"])
per = mib * 1024 * 1024 // 2 // 8
for i in range(1, shards + 1):
    header = {"layers.%d.w%d" % (i, k): {"dtype": "F16", "shape": [per // 1024, 1024],
              "data_offsets": [k * per * 2, (k + 1) * per * 2]} for k in range(8)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(root, "model-%05d-of-%05d.safetensors" % (i, shards)), "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + os.urandom(8 * per * 2))
PY
model_bytes=$(du -sb "$work/model" | cut -f1)
now() { date +%s.%N; }
since() { awk "BEGIN {printf \"%.3f\", $(now) - $1}"; }
engine() {  # EXT_DIR MODEL_DIR TABLE_GLOB
  TORCH_EXTENSIONS_DIR="$1" "$py" "$root/bench/engine_ready.py" "$2" "$work/src/ext.cpp" "$3"
}
table_of() { echo "$work/$1/flashinfer_autotune/*/autotune_configs_dp0_rank0.json"; }

# The warm peer: a replica that went through the cold start once. Its daemon
# serves the model, the extensions directory and the autotune table.
echo "ready: preparing the warm peer (one cold extension build and autotune pass)"
start_seedd tune0 --warmup flashinfer_autotune
kill -TERM "${pids[-1]}"; wait "${pids[-1]}" || true
engine "$work/ext-peer" "$work/model" "$(table_of tune0)" > /dev/null 2>&1
TORCH_EXTENSIONS_DIR="$work/ext-peer" start_seedd tune0 --warmup flashinfer_autotune \
  --warmup compile_cache:torch_extensions --python "$py" --model "m=$work/model"
peer="$addr"

# The link's rate, measured: one TCP stream of 128 MiB over it.
transfer=$("$py" - "$model_bytes" <<'PY'
import socket, sys, threading, time
n = 128 << 20
srv = socket.create_server(("127.0.0.1", 0))
def send():
    c, _ = srv.accept()
    buf = bytes(1 << 20)
    for _ in range(n >> 20):
        c.sendall(buf)
    c.close()
threading.Thread(target=send, daemon=True).start()
s = socket.create_connection(srv.getsockname())
t, got = time.monotonic(), 0
while got < n:
    d = s.recv(1 << 20)
    if not d:
        break
    got += len(d)
rate = got / (time.monotonic() - t)
print("%.3f" % (int(sys.argv[1]) / rate))
PY
)
echo "ready: model $((model_bytes >> 20)) MiB; link held to $rate; transfer time at the measured rate $transfer s"

cold=(); seeded=(); warm=()
for i in $(seq 1 "$reps"); do
  n=${#pids[@]}
  # cold: the engine's own work, nothing from seedd but the pull from the origin.
  t0=$(now)
  start_seedd "cold$i" --warmup flashinfer_autotune  # the autotune pass
  kill -TERM "${pids[-1]}"; wait "${pids[-1]}" || true
  "$py" -c "import seedd, sys; seedd.pull('m', sys.argv[1], sys.argv[2])" "$peer" "$work/cold$i-model"
  engine "$work/ext-cold$i" "$work/cold$i-model" "$(table_of "cold$i")" > "$work/cold$i.engine" 2>&1
  cold+=("$(since "$t0")")
  grep -q "extension compiled" "$work/cold$i.engine" || { cat "$work/cold$i.engine"; exit 1; }
  # seeded: the daemon seeds everything from the warm peer, then the engine starts.
  t0=$(now)
  TORCH_EXTENSIONS_DIR="$work/ext-r$i" start_seedd "r$i" --source "$peer" --pull m \
    --warmup flashinfer_autotune --warmup compile_cache:torch_extensions --python "$py"
  engine "$work/ext-r$i" "$work/r$i/weights/m/current" "$(table_of "r$i")" > "$work/r$i.engine" 2>&1
  seeded+=("$(since "$t0")")
  grep -q "extension prebuilt" "$work/r$i.engine" || { cat "$work/r$i.engine" "$work/r$i.err"; exit 1; }
  kill -TERM "${pids[-1]}"; wait "${pids[-1]}" || true
  # warm: the same replica restarted, everything local.
  t0=$(now)
  TORCH_EXTENSIONS_DIR="$work/ext-r$i" start_seedd "r$i" --source "$peer" --pull m \
    --warmup flashinfer_autotune --warmup compile_cache:torch_extensions --python "$py"
  engine "$work/ext-r$i" "$work/r$i/weights/m/current" "$(table_of "r$i")" > "$work/w$i.engine" 2>&1
  warm+=("$(since "$t0")")
  kill -TERM "${pids[-1]}"; wait "${pids[-1]}" || true
  echo "  run $i: cold ${cold[-1]} s, seeded ${seeded[-1]} s, warm ${warm[-1]} s"
  rm -rf "$work/cold$i-model" "$work/r$i/weights"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
c=$(median "${cold[@]}"); s=$(median "${seeded[@]}"); w=$(median "${warm[@]}")
printf 'ready: cold=%.2f s seeded=%.2f s warm=%.2f s transfer=%.2f s seeded/(warm+transfer)=%.2f\n' \
  "$c" "$s" "$w" "$transfer" "$(awk "BEGIN {print $s / ($w + $transfer)}")"
