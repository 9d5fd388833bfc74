#!/usr/bin/env bash
# Installs every Debian package torchfarm needs to build, test and run, then the Python
# environment .venv/ at the project root (issue 29): pyenv's Python 3.11 with the pinned PyTorch
# whose LibTorch the default build links (cmake/TorchfarmTorch.cmake), torchvision, numpy, pyzmq
# and the project's Python client (clients/python, editable). Idempotent: packages that are already
# installed are skipped, apt is not touched when nothing is missing, and pip is not run when .venv
# already holds the pinned versions (a second run takes about a second).
#
# Two Pythons, kept apart: .venv is made from pyenv's python3.11 ($TORCHFARM_VENV_PYTHON to pick
# another CPython >= 3.10 that is not Debian's), never from Debian's /usr/bin/python3, which keeps
# python3-torch 1.13 for the Debian build (-DTORCHFARM_TORCH=debian) and tools that say they use it.
#   --no-venv  Debian packages only (a -DTORCHFARM_TORCH=debian build needs no .venv)
set -euo pipefail
cd "$(dirname "$0")/.."

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
  zlib1g-dev             # gzip/deflate request bodies of the v2 front ends (content_encoding.h)
  nlohmann-json3-dev
  libcli11-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  prometheus-cpp-dev     # /metrics exposition (civetweb inside)
  libsystemd-dev         # sd_notify: Type=notify, watchdog
  libgoogle-perftools-dev  # tcmalloc_minimal, torchfarm-supervisor's allocator (TORCHFARM_MALLOC)
  systemd                # systemd-analyze verify of configs/*.service (tests/tools)
  python3-numpy python3-zmq python3-pytest
  python3-requests python3-grpcio python3-protobuf  # tests/python: v2 clients as users write them
  python3-yaml           # offline check of deploy/kubernetes (tests/multihost)
  iproute2               # ip netns: the multihost test (tests/multihost)
  libb64-0d              # NVIDIA's perf_analyzer binary links it (.venv-perf-analyzer, below)
  valgrind               # make bench-instructions: supervisor instructions per request (callgrind)
  chromium               # headless, for the dashboard's browser test (tests/browser)
  nodejs                 # runs tests/browser's playwright-core driver (npm ci below)
)

# Optional groups, installed only when asked for, so `make test` stays as quick to set up:
#   --fuzz   clang and libFuzzer's runtime for `make fuzz` (about 200 MB)
#   --models Debian's PyTorch and torchvision for `make models-real` (tools/export_image_models.py)
#            and the PyTorch reference of tests/integration/pipeline_test (skipped without it)
with_venv=1
for arg in "$@"; do
  case "$arg" in
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    --models) packages+=(python3-torch python3-torchvision) ;;
    --no-venv) with_venv=0 ;;
    *) echo "install-deps: unknown option '$arg' (known: --fuzz, --models, --no-venv)" >&2; exit 2 ;;
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

install_debian_packages() {
  if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    return
  fi
  echo "install-deps: installing ${missing[*]}"
  local sudo=""
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
}

# The pins of .venv: torch 2.15.0 is the newest that installs here (/work/shared/MACHINE.md); on
# x86_64 Linux PyPI's wheel is a CUDA build (~5.4 GB with its nvidia-* wheels) that also runs on a
# machine without a GPU. torchvision 0.29.2 is the release made for it. The rest is what the tests
# and tools run with .venv/bin/python need: pytest for tests/python, requests and grpcio for the v2
# front ends' tests, NVIDIA's tritonclient (HTTP and gRPC) for the Triton drop-in tests, PyYAML for
# the Kubernetes manifest checks.
venv_pins=(torch==2.15.0 torchvision==0.29.2 numpy==2.4.6 pyzmq==27.3.0 pytest==9.2.0
           requests==2.34.2 grpcio==1.85.3 "tritonclient[http,grpc]==2.73.0" PyYAML==6.0.4)

# Prints the first pin .venv does not satisfy (or the client package), nothing when all hold.
venv_unmet_pin() {
  [ -x .venv/bin/python ] || { echo "no .venv/bin/python"; return; }
  .venv/bin/python - "${venv_pins[@]}" <<'PY' 2>/dev/null || echo "unreadable .venv"
import sys
from importlib import metadata
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    name = name.split("[")[0]  # "tritonclient[http,grpc]": the distribution, without its extras
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        have = None
    if have is None or have.split("+")[0] != want:
        print(f"{name}: want {want}, have {have}")
        sys.exit(0)
try:
    metadata.version("torchfarm")
except metadata.PackageNotFoundError:
    print("torchfarm client: not installed")
PY
}

install_venv() {
  local unmet
  unmet=$(venv_unmet_pin)
  if [ -z "$unmet" ]; then
    echo "install-deps: .venv holds ${venv_pins[*]} and the torchfarm client"
    return
  fi
  local python="${TORCHFARM_VENV_PYTHON:-}"
  if [ -z "$python" ]; then
    python=$(pyenv which python3.11 2>/dev/null || true)
  fi
  if [ -z "$python" ] || [ ! -x "$python" ]; then
    echo "install-deps: need pyenv's python3.11 for .venv (or TORCHFARM_VENV_PYTHON=<CPython >= 3.10>)" >&2
    exit 1
  fi
  case "$(readlink -f "$python")" in
    /usr/bin/*) echo "install-deps: $python is Debian's Python; .venv needs pyenv's (Debian's keeps torch 1.13)" >&2; exit 1 ;;
  esac
  echo "install-deps: .venv: $unmet; installing with $python"
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  .venv/bin/python -m pip install -q "${venv_pins[@]}"
  .venv/bin/python -m pip install -q --no-deps -e clients/python
  unmet=$(venv_unmet_pin)
  if [ -n "$unmet" ]; then
    echo "install-deps: .venv still not as pinned after pip: $unmet" >&2
    exit 1
  fi
}

# NVIDIA's perf_analyzer, for the Triton drop-in test (tests/tools/perf_analyzer_check.py): pip's
# `perf-analyzer` is an empty placeholder; the binary ships in tritonclient[all] 2.51.0's wheel
# (2.52 and later need GLIBC 2.38, Debian 12 has 2.36) and loads libcudart.so.12 (from
# nvidia-cuda-runtime-cu12, also on a machine without a GPU) and libb64. Its own venv, so that
# old tritonclient never replaces .venv's. tools/perf-analyzer runs it with its libraries.
perf_analyzer_pins=("tritonclient[all]==2.51.0" nvidia-cuda-runtime-cu12==12.9.79)
install_perf_analyzer() {
  local venv=.venv-perf-analyzer
  if [ -x "$venv/bin/perf_analyzer" ] && tools/perf-analyzer --version >/dev/null 2>&1; then
    echo "install-deps: $venv holds perf_analyzer ($(tools/perf-analyzer --version 2>&1 | head -1))"
    return
  fi
  [ -x "$venv/bin/python" ] || .venv/bin/python -m venv "$venv" 2>/dev/null ||
    "$(pyenv which python3.11)" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "${perf_analyzer_pins[@]}"
  tools/perf-analyzer --version >/dev/null || {
    echo "install-deps: $venv/bin/perf_analyzer does not start (tools/perf-analyzer --version)" >&2
    exit 1
  }
}

# The dashboard's browser test (tests/browser/dashboard_browser_check.py) drives Debian's chromium
# with playwright-core from npm (pinned in tests/browser/package-lock.json; it downloads no
# browser). Debian's nodejs has no npm of its own (NodeSource's does): Debian's npm then.
install_browser_driver() {
  local dir=tests/browser
  local want have
  want=$(sed -n 's/.*"playwright-core": "\([0-9.]*\)".*/\1/p' $dir/package.json)
  have=$(sed -n 's/.*"version": "\([0-9.]*\)".*/\1/p' \
         $dir/node_modules/playwright-core/package.json 2>/dev/null | head -n 1 || true)
  if [ -n "$want" ] && [ "$want" = "$have" ]; then
    echo "install-deps: $dir/node_modules holds playwright-core $have"
    return
  fi
  if ! command -v npm >/dev/null; then
    missing=(npm)
    install_debian_packages
  fi
  echo "install-deps: $dir: npm ci (playwright-core $want)"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix $dir --no-audit --no-fund --loglevel=error
}

install_debian_packages
install_browser_driver
if [ "$with_venv" = 1 ]; then install_venv; install_perf_analyzer; fi
