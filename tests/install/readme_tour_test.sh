#!/bin/bash
# The README's tour, run as written (readme_tour.py says how), in network and
# mount namespaces of its own: the host keeps nothing of it.
# Usage: readme_tour_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
exec unshare --net --mount --fork -- python3 "$src/tests/install/readme_tour.py" \
  "$src/README.md" "$bin" "$src"
