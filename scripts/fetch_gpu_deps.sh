#!/usr/bin/env bash
# Run HERE (with package registries) before a GPU check: fetches what the GPU machine lacks into
# .gpu_deps/ (ignored by git), to be carried there: the Debian .deb files of the C++ libraries
# and the pinned transformers and pytest wheels for its Python 3.12.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="$OPARA_ROOT/.gpu_deps"
mkdir -p "$out/debs" "$out/wheels"
cd "$out/debs"
apt-get download libfmt-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian \
  nlohmann-json3-dev >/dev/null
transformers="$(grep '^transformers==' "$OPARA_ROOT/requirements.txt")"
"$OPARA_PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$out/wheels" "$transformers"
# pytest and what it needs (pure Python), for the Python package's GPU tests.
pytest="$(grep '^pytest==' "$OPARA_ROOT/requirements.txt")"
"$OPARA_PYTHON" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$out/wheels" "$pytest"
say "carry .gpu_deps: $(du -sh "$out" | cut -f1)"
