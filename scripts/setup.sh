#!/usr/bin/env bash
# Installs everything opara needs on a fresh Debian machine; idempotent, so a second run is quick.
#   - Debian packages for the C++ build (apt-get, only those missing)
#   - a Python virtual environment outside the work tree ($OPARA_VENV, default
#     ~/.cache/opara/venv) with the pinned requirements.txt (torch 2.11.0 brings LibTorch), and
#     the serving extra requirements-serve.txt (Ray Serve) unless OPARA_SERVE=0
#   - with OPARA_TORCH_VERSION=<release> (requirements/torch-<release>.txt pins it and what goes
#     with it): that torch, in a virtual environment of its own (~/.cache/opara/venv-torch<release>)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [ ! -f "$OPARA_REQUIREMENTS" ]; then
  known="$(cd "$OPARA_ROOT/requirements" && ls torch-*.txt | sed 's/^torch-//; s/\.txt$//' | paste -sd ' ')"
  say "error: no pins for torch $OPARA_TORCH_VERSION ($OPARA_REQUIREMENTS). OPARA_TORCH_VERSION may be" \
    "$OPARA_DEFAULT_TORCH (the default) or one of: $known; for another release, write its pins there first."
  exit 2
fi

DEBIAN_PACKAGES=(cmake ninja-build ccache g++ python3-venv libfmt-dev libcli11-dev libgtest-dev
  libgmock-dev libbenchmark-dev nlohmann-json3-dev clang-format clang-tidy)

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  say "installing Debian packages: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
else
  say "Debian packages present"
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  say "note: no CUDA toolkit found; opara builds its CPU parts only (CUPTI profiling needs CUDA 13)"
fi

if [ ! -x "$OPARA_PYTHON" ]; then
  say "creating the virtual environment $OPARA_VENV"
  mkdir -p "$(dirname "$OPARA_VENV")"
  python3 -m venv "$OPARA_VENV"
fi

# The stamp holds the hash of the pins: pip runs only when they change.
stamp="$OPARA_VENV/.opara-requirements"
want="$(sha256sum "$OPARA_REQUIREMENTS" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing the pinned Python requirements (torch $OPARA_TORCH_VERSION is large; the first time takes minutes)"
  "$OPARA_PYTHON" -m pip install -q --upgrade pip
  "$OPARA_PYTHON" -m pip install -q -r "$OPARA_REQUIREMENTS"
  echo "$want" >"$stamp"
else
  say "Python requirements present in $OPARA_VENV"
fi
# The serving extra (Ray Serve: examples/serve_ray.py and its test), with the pins as constraints so
# that nothing pinned moves; its own stamp. OPARA_SERVE=0 leaves it out (its test then skips).
serve_stamp="$OPARA_VENV/.opara-requirements-serve"
serve_want="$(cat "$OPARA_REQUIREMENTS" "$OPARA_ROOT/requirements-serve.txt" | sha256sum | cut -d' ' -f1)"
if [ "${OPARA_SERVE:-1}" != 0 ] && [ "$(cat "$serve_stamp" 2>/dev/null)" != "$serve_want" ]; then
  say "installing the serving extra (Ray Serve, about 110 MiB)"
  "$OPARA_PYTHON" -m pip install -q -c "$OPARA_REQUIREMENTS" -r "$OPARA_ROOT/requirements-serve.txt"
  echo "$serve_want" >"$serve_stamp"
fi
# opara importable in the venv from this checkout, as an editable install is: a .pth file naming
# python/, so `import opara` loads this tree's package, which loads this checkout's build (build/ or
# build-torch<release>/): a rebuild is what Python loads. A package installed with pip comes first.
site="$("$OPARA_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ "$(cat "$site/opara-checkout.pth" 2>/dev/null)" != "$OPARA_ROOT/python" ]; then
  echo "$OPARA_ROOT/python" >"$site/opara-checkout.pth"
  say "opara importable in $OPARA_VENV from $OPARA_ROOT/python"
fi
say "torch $("$OPARA_PYTHON" -c 'import torch; print(torch.__version__)')"
