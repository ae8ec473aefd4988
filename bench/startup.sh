#!/usr/bin/env bash
# startup: what a daemon and the CLI cost before they do anything. For each
# build given: seedd from exec to its ready line ("serving on", nothing to
# serve), alone and N (default 16) started at once as a fleet's daemons start
# (on this machine they share its cores, as in bench/fanout.sh), with the CPU
# each spent by then; and `seedctl --version` from exec to exit. With a second
# build (BASE_BIN_DIR, e.g. the commit before), both run alternately, REPS
# rounds (default 5), and each figure is printed beside its baseline's with
# their ratio. Medians; the CPU is the processes' own (user + system).
# Usage: bench/startup.sh BIN_DIR [BASE_BIN_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bins=("$(cd "$1" && pwd)")
[ $# -lt 2 ] || bins+=("$(cd "$2" && pwd)")
bin="${bins[0]}"
n="${N:-16}"
reps="${REPS:-5}"
source "$root/scripts/seedd_lib.sh"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
chmod 600 "$work/token"
hz="$(getconf CLK_TCK)"

# daemons BIN K: K daemons started at once; prints "SECONDS CPU_SECONDS": until
# the last ready line, and the CPU of each by then, summed.
daemons() {
  local b="$1" k="$2" i start end t=0 f all=() pending
  start="$EPOCHREALTIME"
  for i in $(seq 1 "$k"); do
    "$b/seedd" --listen 127.0.0.1:0 --token-file "$work/token" --cache-dir "$work/cache-$i" \
      --log-level warn > "$work/d$i.out" 2> "$work/d$i.err" &
    all+=($!)
  done
  pending=("${!all[@]}")
  while [ ${#pending[@]} -gt 0 ]; do
    local left=()
    for i in "${pending[@]}"; do
      if file_has "$work/d$((i + 1)).out" "serving on"; then
        # Its CPU as it became ready: what it spent starting.
        f="$(cut -d')' -f2- "/proc/${all[$i]}/stat")"
        read -r _ _ _ _ _ _ _ _ _ _ _ ut st _ <<< "$f"
        t=$((t + ut + st))
      else
        kill -0 "${all[$i]}" 2> /dev/null ||
          { echo "startup: a daemon exited before it was ready:" >&2; cat "$work/d$((i + 1)).err" >&2; exit 1; }
        left+=("$i")
      fi
    done
    pending=("${left[@]}")
    [ ${#pending[@]} -eq 0 ] || nap 0.002
  done
  end="$(stat -c %.9Y "$work"/d*.out | sort -n | tail -1)"
  kill "${all[@]}"
  wait "${all[@]}" 2> /dev/null || true
  rm -rf "$work"/cache-* "$work"/d*.out "$work"/d*.err
  awk -v s="$start" -v e="$end" -v t="$t" -v hz="$hz" 'BEGIN { printf "%.4f %.3f\n", e - s, t / hz }'
}

# cli BIN: seconds from exec to exit of `seedctl --version`.
cli() {
  local start
  start="$EPOCHREALTIME"
  "$1/seedctl" --version > /dev/null
  awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.4f\n", e - s }'
}

for r in $(seq 1 "$reps"); do
  for b in "${!bins[@]}"; do
    echo "$(daemons "${bins[$b]}" 1) $(daemons "${bins[$b]}" "$n") $(cli "${bins[$b]}")" >> "$work/runs.$b"
  done
  echo "startup: round $r of $reps" >&2
done

python3 - "$n" "$reps" "${bins[@]}" "$work" <<'PY'
import statistics, sys
n, reps, bins, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:-1], sys.argv[-1]
med = []
for b in range(len(bins)):
    rows = [list(map(float, l.split())) for l in open("%s/runs.%d" % (work, b))]
    med.append([statistics.median(c) for c in zip(*rows)])
names = ["one daemon ready (ms)", "its CPU (ms)", "%d daemons at once, last ready (ms)" % n,
         "their CPU (ms, all)", "seedctl --version (ms)"]
print("startup (medians of %d; nothing to serve, ready line \"serving on\")" % reps)
print("  %-40s %12s" % ("", "build") + (" %12s %8s" % ("baseline", "ratio") if len(bins) > 1 else ""))
for i, name in enumerate(names):
    line = "  %-40s %12.1f" % (name, med[0][i] * 1e3)
    if len(bins) > 1:
        line += " %12.1f %7.2fx" % (med[1][i] * 1e3, med[0][i] / med[1][i])
    print(line)
print("  build: %s" % bins[0] + ("; baseline: %s" % bins[1] if len(bins) > 1 else ""))
PY
