#!/usr/bin/env bash
# load_while_pulling: seedd.load_safetensors against the pull alone and
# pull-then-load, in one run (bench/load_while_pulling.py). The daemon and the
# puller talk over a loopback held to RATE (default 1gbit, htb, in a network
# namespace of its own; needs root), as a replica's link is the limit when it
# pulls; RATE=0 leaves the loopback unshaped (the pull is then CPU-bound).
# Usage: bench/load_while_pulling.sh BIN_DIR
set -euo pipefail
rate="${RATE:-1gbit}"
if [ "$rate" != 0 ] && [ -z "${SEEDD_LOAD_NETNS:-}" ]; then
  [ "$(id -u)" -eq 0 ] || { echo "load_while_pulling: needs root to shape a link (or RATE=0)" >&2; exit 1; }
  exec unshare --net -- env SEEDD_LOAD_NETNS=1 bash "$0" "$@"
fi
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$rate" != 0 ]; then
  ip link set lo up
  tc qdisc add dev lo root handle 1: htb default 1 r2q 1000
  tc class add dev lo parent 1: classid 1:1 htb rate "$rate" ceil "$rate"
  echo "load_while_pulling: loopback held to $rate"
fi
PYTHONPATH="$(dirname "$bin")/python" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 "$root/bench/load_while_pulling.py" "$bin"
