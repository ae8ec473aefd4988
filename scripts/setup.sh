#!/usr/bin/env bash
# Installs the Debian packages seedd needs to build, test and benchmark, only when
# something is missing. Idempotent; safe to run on every `make`.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ ccache clang-14 libclang-rt-14-dev clang-format python3
  nlohmann-json3-dev libasio-dev libssl-dev libxxhash-dev libspdlog-dev libfmt-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  pkg-config libhiredis-dev libcurl4-openssl-dev redis-server redis-tools
  libtomlplusplus-dev systemd prometheus-cpp-dev libcpp-httplib-dev prometheus
  python3-dev pybind11-dev python3-pybind11 python3-pytest python3-pip
)
command -v node >/dev/null && command -v npm >/dev/null || PACKAGES+=(nodejs npm)

root="$(cd "$(dirname "$0")/.." && pwd)"

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
install_s3rver() {
  # The S3-compatible server the tests run against, from the npm registry.
  if [ ! -x "$root/tools/s3rver/node_modules/.bin/s3rver" ]; then
    echo "setup: installing s3rver (npm)"
    (cd "$root/tools/s3rver" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  install_s3rver
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# redis-server starts a system service on install; the tests start their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then
  $SUDO systemctl stop redis-server || true
fi
install_s3rver
