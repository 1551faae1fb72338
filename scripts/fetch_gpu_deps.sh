#!/usr/bin/env bash
# Run HERE (with package registries) before a GPU check: fetches what the GPU machine lacks into
# .gpu_deps/ (ignored by git), to be carried there: the Debian .deb files of the C++ libraries
# (with the shared libraries their CMake packages name) and the pinned transformers and diffusers
# wheels. The image has pytest, torchvision and transformers' own needs (see the device notes).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="$OPARA_ROOT/.gpu_deps"
rm -rf "$out"  # two versions of one wheel would stop the install there
mkdir -p "$out/debs" "$out/wheels"
cd "$out/debs"
# The shared libraries that fmt's and Google Benchmark's CMake packages name (libfmt9, ...).
runtime_libs="$(apt-cache depends libfmt-dev libbenchmark-dev | awk '/Depends: lib(fmt|benchmark)[0-9a-z]*$/{print $2}')"
[ -n "$runtime_libs" ] || { echo "fetch_gpu_deps: apt-cache names no fmt or benchmark library (run apt-get update)" >&2; exit 1; }
# shellcheck disable=SC2086  # one package name per word
apt-get download libfmt-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev \
  $runtime_libs >/dev/null
transformers="$(grep '^transformers==' "$OPARA_ROOT/requirements.txt")"
diffusers="$(grep '^diffusers==' "$OPARA_ROOT/requirements.txt")"
# diffusers' own needs besides what the image has (importlib_metadata's zipp, lazy-importer).
"$OPARA_PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$out/wheels" "$transformers" "$diffusers" \
  importlib_metadata zipp lazy-importer
say "carry .gpu_deps: $(du -sh "$out" | cut -f1)"
