#!/bin/bash
# The swarm protocol cores (src/kinds/weights/proto/) are sans-I/O: no
# threads, locks, sockets, Asio or clock reads, and nothing from the rest of
# the project but each other. The simulator and the unit tests run them with
# a clock of their own; a driver that needs any of these lives outside.
set -euo pipefail
dir=$1/src/kinds/weights/proto
[[ -d $dir ]] || { echo "no $dir"; exit 1; }
bad=$(grep -nE '#include <(thread|mutex|condition_variable|future|sys/socket\.h|netinet/[a-z_.]+|asio[a-z_./]*)>|::now\(\)|sleep_for|sleep_until|std::random_device' \
  "$dir"/*.h "$dir"/*.cc || true)
outside=$(grep -nE '#include "' "$dir"/*.h "$dir"/*.cc | grep -vE '#include "kinds/weights/proto/' || true)
if [[ -n $bad || -n $outside ]]; then
  echo "proto/ must stay sans-I/O:"
  echo "$bad"
  echo "$outside"
  exit 1
fi
echo "ok: $(ls "$dir" | wc -l) files in proto/ read no clock and start no thread"
