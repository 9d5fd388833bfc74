#!/usr/bin/env bash
# Installs the servers torchfarm is compared with (issue 31: TorchServe, PyTriton, Ray Serve,
# LitServe) into their own venv, so their pins never touch the farm's .venv. Idempotent: a venv
# whose stamp matches the pinned list below is left as it is. Nothing of the peers' code goes into
# the repository; this script, bench/peers/*.py and the generator are all that drive them.
#
# Usage: bench/peers/install_peers.sh [VENV_DIR]    (default build/peers-venv)
# Needs: pyenv's (or any) python3.11 on PATH, network access to PyPI, OpenJDK 17 for TorchServe.
set -euo pipefail

VENV=${1:-build/peers-venv}
PYTHON=${PEERS_PYTHON:-python3}
# Pinned set (checked on this machine kind, /work/shared/MACHINE.md). torch is PyPI's wheel (a
# CUDA build that runs on CPU; PyTorch's CPU-only index is not reachable here).
PINS=(
  torch==2.15.0
  torchvision==0.29.2
  torchserve==0.12.0
  torch-model-archiver==0.12.0
  nvidia-pytriton==0.7.0
  "ray[serve]==2.60.0"
  litserve==0.2.19
)
# Their dependencies, as resolved when the pins were checked (pip freeze of that venv).
CONSTRAINTS="$(dirname "$0")/constraints.txt"
STAMP="$VENV/.torchfarm-peers-stamp"
WANT="$(printf '%s\n' "${PINS[@]}"; sha256sum <"$CONSTRAINTS" | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "peers: $VENV is up to date"
  exit 0
fi

version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ "$version" != "3.11" ]]; then
  echo "peers: expected python3 3.11 (the version the pins were checked with), got $version" >&2
  echo "peers: set PEERS_PYTHON to a 3.11 interpreter" >&2
  exit 1
fi
if ! command -v java >/dev/null; then
  echo "peers: TorchServe needs Java (OpenJDK 17): java not found; it will be reported as not installed" >&2
fi

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip wheel
"$VENV/bin/python" -m pip install --quiet -c "$CONSTRAINTS" "${PINS[@]}"
# Each peer's import is checked here, so a broken install stops now rather than mid-benchmark.
"$VENV/bin/python" - <<'PY'
import importlib
for name in ["torch", "torchvision", "ts", "model_archiver", "pytriton", "ray.serve", "litserve"]:
    importlib.import_module(name)
print("peers: all imports work")
PY
printf '%s\n' "$WANT" >"$STAMP"
echo "peers: installed into $VENV"
