#!/usr/bin/env bash
# Installs every Debian package torchfarm needs to build, test and run. Idempotent: packages that
# are already installed are skipped, and apt is not touched at all when nothing is missing.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  ccache                 # compiler cache; CMake uses it when present (cmake/TorchfarmBuildSpeed.cmake)
  clang-format-14        # tools/check-format.sh (.ci/run): changed C++ lines follow .clang-format
  libtorch-dev
  libturbojpeg0-dev      # JPEG decode stage of the worker pipeline (worker/image_decoder.h)
  libopenblas0-openmp    # without it Debian's libtorch runs on the reference BLAS (~17x slower)
  libzmq3-dev cppzmq-dev
  libboost-dev           # Boost.Interprocess, Boost.Beast (HTTP front end), header-only
  libssl-dev             # TLS of the HTTP front end (Beast over OpenSSL)
  libgrpc++-dev protobuf-compiler protobuf-compiler-grpc  # the gRPC front end (KServe v2)
  nlohmann-json3-dev
  libcli11-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  prometheus-cpp-dev     # /metrics exposition (civetweb inside)
  libsystemd-dev         # sd_notify: Type=notify, watchdog
  systemd                # systemd-analyze verify of configs/*.service (tests/tools)
  python3-numpy python3-zmq python3-pytest
  python3-requests python3-grpcio python3-protobuf  # tests/python: v2 clients as users write them
  python3-yaml           # offline check of deploy/kubernetes (tests/multihost)
  iproute2               # ip netns: the multihost test (tests/multihost)
)

# Optional groups, installed only when asked for, so `make test` stays as quick to set up:
#   --fuzz   clang and libFuzzer's runtime for `make fuzz` (about 200 MB)
#   --models Debian's PyTorch and torchvision for `make models-real` (tools/export_image_models.py)
#            and the PyTorch reference of tests/integration/pipeline_test (skipped without it)
for arg in "$@"; do
  case "$arg" in
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    --models) packages+=(python3-torch python3-torchvision) ;;
    *) echo "install-deps: unknown option '$arg' (known: --fuzz, --models)" >&2; exit 2 ;;
  esac
done

# CI (.ci/run sets CI=true) runs the pipeline tests against their PyTorch reference, not skipped.
if [ "${CI:-}" = "true" ]; then packages+=(python3-torch python3-torchvision); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# Refresh the lists only when they are missing or older than a day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1)" ]; then
  $sudo apt-get update -q
fi
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
