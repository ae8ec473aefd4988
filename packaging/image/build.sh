#!/usr/bin/env bash
# make image: seedd's container image, tagged seedd:VERSION and seedd:latest in
# the local container storage (buildah's; podman sees the same), from the
# binaries in BIN_DIR. Extra buildah flags (a storage driver, a --root) come
# from $BUILDAH_FLAGS.
# Usage: packaging/image/build.sh BIN_DIR STAGE_DIR
set -euo pipefail
# A failing command is named, not only the script's status.
trap 'echo "image: line $LINENO: \"$BASH_COMMAND\" failed with status $?" >&2' ERR
bin="$(cd "$1" && pwd)"
stage="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
command -v buildah > /dev/null || { echo "image: buildah is missing (apt-get install buildah)" >&2; exit 1; }
version="$("$bin/seedd" --version | awk '{print $2}')"
bash "$root/packaging/image/stage.sh" "$bin" "$stage"
# shellcheck disable=SC2086
buildah ${BUILDAH_FLAGS:-} bud -q -f "$root/packaging/Containerfile" -t "seedd:$version" \
  -t seedd:latest "$stage" > /dev/null
echo "image: seedd:$version (and seedd:latest); buildah images / podman images list it;"
echo "image: e.g. podman run --network host seedd:latest --help"
