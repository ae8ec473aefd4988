#!/usr/bin/env bash
# Runs every fuzz target for N seconds: fuzz/run.sh BUILD_DIR SECONDS
# Each target starts from its checked-in seeds; new inputs go to a scratch corpus.
set -euo pipefail
build="$1"
seconds="$2"
root="$(cd "$(dirname "$0")" && pwd)"
for target in frame_request_fuzz artifact_payload_fuzz store_url_fuzz manifest_fuzz \
  safetensors_fuzz records_fuzz catalog_fuzz origin_fuzz; do
  corpus="$(mktemp -d)"
  echo "fuzz: $target for ${seconds}s"
  "$build/bin/$target" -max_total_time="$seconds" -max_len=70000 -rss_limit_mb=2048 \
    -artifact_prefix="$build/" \
    -print_final_stats=1 "$corpus" "$root/seeds/$target" 2>&1 | tail -n 12
  rc=${PIPESTATUS[0]}
  rm -rf "$corpus"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $target failed (exit $rc)" >&2
    exit "$rc"
  fi
done
echo "fuzz: all targets ran clean"
