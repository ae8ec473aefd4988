#!/bin/bash
# Every test's name, as ctest lists and reports it, is short and says what it
# proves: a value-parameterized test prints its parameter by name, not as a
# dump of its bytes (gtest's default, which ctest appends to the test's name).
# Usage: test_names_test.sh TEST_BINARY...
set -euo pipefail
status=0
total=0
for bin in "$@"; do
  list=$("$bin" --gtest_list_tests)
  total=$((total + $(grep -c '^  ' <<< "$list" || true)))
  dumps=$(grep -E 'byte object <' <<< "$list" || true)
  long=$(awk 'length($0) > 200' <<< "$list")
  if [[ -n $dumps || -n $long ]]; then
    echo "$(basename "$bin"): test names with a parameter's bytes or over 200 characters:"
    echo "$dumps"
    echo "$long"
    status=1
  fi
done
[[ $status == 0 ]] && echo "ok: $total test names read, none a dump of bytes or over 200 characters"
exit $status
