#!/usr/bin/env bash
# engine_caches: a PyTorch C++ extension (torch.utils.cpp_extension.load, the
# ninja JIT build FlashInfer and similar kernel libraries use), cold against
# seeded, in the same run. Per rep, fresh directories: host A's load() compiles
# the extension (cold); daemon A serves A's extensions directory
# (--warmup compile_cache:torch_extensions); daemon B seeds B's empty one from
# A; B's load() then returns without a compiler run. Medians of REPS (default 3).
# Usage: bench/engine_caches.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
reps="${REPS:-3}"
py=/usr/bin/python3
source "$root/scripts/seedd_lib.sh"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")
mkdir -p "$work/src"
cat > "$work/src/ext.cpp" <<'CPP'
#include <torch/extension.h>
torch::Tensor add(torch::Tensor x) { return x + 1; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add", &add); }
CPP
cat > "$work/load.py" <<'PY'
import sys, time
t = time.monotonic()
import torch, torch.utils.cpp_extension as ce
m = ce.load(name="seedd_bench", sources=[sys.argv[1]])
assert m.add(torch.zeros(2)).tolist() == [1.0, 1.0]
print("%.3f" % (time.monotonic() - t))
PY
load() { TORCH_EXTENSIONS_DIR="$1" MAX_JOBS=2 "$py" "$work/load.py" "$work/src/ext.cpp" 2>/dev/null; }
results="$work/results"
echo "engine_caches: $reps runs (each cold compile takes about 20 s here)"
for i in $(seq 1 "$reps"); do
  n=${#pids[@]}
  cold=$(load "$work/a$i")
  TORCH_EXTENSIONS_DIR="$work/a$i" start_seedd "A$i" --warmup compile_cache:torch_extensions \
    --python "$py"
  began=$(date +%s.%N)
  TORCH_EXTENSIONS_DIR="$work/b$i" start_seedd "B$i" --warmup compile_cache:torch_extensions \
    --python "$py" --source "$addr"
  seeded_start=$(python3 -c "import time; print('%.3f' % ($(date +%s.%N) - $began))")
  grep -q "compile_cache:torch_extensions: peer" "$work/B$i.err" \
    || { echo "B was not seeded:" >&2; cat "$work/B$i.err" >&2; exit 1; }
  seeded=$(load "$work/b$i")
  warm=$(load "$work/a$i")
  echo "$cold $seeded_start $seeded $warm" | tee -a "$results"
  for p in "${pids[@]:$n}"; do kill -TERM "$p"; wait "$p" || true; done
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
cold, start, seeded, warm = (statistics.median(r[k] for r in rows) for k in range(4))
print()
print("torch extension (medians of %d runs; Debian's torch, this machine's c++)" % len(rows))
print("  cold: load() compiles and links          %8.2f s" % cold)
print("  seeded: daemon start, cache from a peer  %8.2f s" % start)
print("  seeded: then load(), no compiler run     %8.2f s" % seeded)
print("  warm: load() on host A again             %8.2f s" % warm)
print("engine_caches: cold=%.2f s seeded=%.2f s (daemon %.2f + load %.2f) warm=%.2f s cold/seeded=%.1fx"
      % (cold, start + seeded, start, seeded, warm, cold / (start + seeded)))
PY
