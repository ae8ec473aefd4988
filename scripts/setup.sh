#!/usr/bin/env bash
# Installs the Debian packages seedd needs to build, test and benchmark, only when
# something is missing. Idempotent; safe to run on every `make`.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ ccache clang-14 libclang-rt-14-dev clang-format python3
  nlohmann-json3-dev libasio-dev libssl-dev libxxhash-dev libspdlog-dev libfmt-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
