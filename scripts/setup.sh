#!/usr/bin/env bash
# Installs the Debian packages seedd needs, only when something is missing.
# Idempotent; safe to run on every `make`.
#   setup.sh build  what building needs (make, make install, make wheel, make deb; make
#                   image also needs buildah, which setup.sh test installs)
#   setup.sh demo   and the redis-server `make demo` starts
#   setup.sh test   and every server and tool the tests start (make test, make bench)
set -euo pipefail
mode="${1:-test}"

PACKAGES=(
  cmake ninja-build g++ ccache pkg-config python3 binutils dpkg-dev
  nlohmann-json3-dev libasio-dev libssl-dev libxxhash-dev libspdlog-dev libfmt-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libhiredis-dev libcurl4-openssl-dev
  libtomlplusplus-dev prometheus-cpp-dev libcpp-httplib-dev
)
case "$mode" in
  build) ;;
  demo) PACKAGES+=(redis-server redis-tools) ;;
  test)
    # pybind11-dev: torch's extension headers include it (a JIT-built extension
    # in python.test_engine_caches); Debian's libtorch-dev does not pull it in.
    PACKAGES+=(redis-server redis-tools clang-14 libclang-rt-14-dev clang-format systemd prometheus
               python3-pytest python3-venv iproute2 util-linux docker-registry skopeo
               python3-torch libtorch-dev pybind11-dev python3-dev python3-yaml buildah)
    # kubectl (for kustomize): Debian's, unless one is installed already (another
    # package's /usr/bin/kubectl would conflict with it).
    command -v kubectl > /dev/null || PACKAGES+=(kubernetes-client)
    ;;
  *) echo "usage: setup.sh build|demo|test" >&2; exit 2 ;;
esac
if [ "$mode" = test ] && ! { command -v node > /dev/null && command -v npm > /dev/null; }; then
  PACKAGES+=(nodejs npm)
fi

root="$(cd "$(dirname "$0")/.." && pwd)"

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
install_s3rver() {
  # The S3-compatible server the tests run against, and the Kubernetes schema
  # validator of the manifests' test, from the npm registry.
  [ "$mode" = test ] || return 0
  if [ ! -x "$root/tools/s3rver/node_modules/.bin/s3rver" ]; then
    echo "setup: installing s3rver (npm)"
    (cd "$root/tools/s3rver" && npm ci --no-audit --no-fund --loglevel=error)
  fi
  if [ ! -d "$root/tools/k8s-validate/node_modules/kubernetes-models" ]; then
    echo "setup: installing kubernetes-models (npm)"
    (cd "$root/tools/k8s-validate" && npm ci --no-audit --no-fund --loglevel=error)
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
# redis-server and docker-registry start system services on install; the tests
# start their own.
for service in redis-server docker-registry; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$service" 2>/dev/null; then
    $SUDO systemctl stop "$service" || true
  fi
done
install_s3rver
