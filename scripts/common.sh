# Shared settings for the opara scripts; sourced, never run.
# shellcheck shell=bash disable=SC2034  # OPARA_ALL_MODELS and the like are read by the scripts that source this
OPARA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { printf '[opara] %s\n' "$*" >&2; }

# Which torch: the pin in requirements.txt (the GPU machine's), or the release OPARA_TORCH_VERSION
# names. Another release gets its own pins (requirements/torch-<version>.txt, for setup.sh), virtual
# environment, build folder and exported models beside the default ones, so both stay built.
OPARA_DEFAULT_TORCH="$(sed -n 's/^torch==//p' "$OPARA_ROOT/requirements.txt")"
OPARA_TORCH_VERSION="${OPARA_TORCH_VERSION:-$OPARA_DEFAULT_TORCH}"
if [ "$OPARA_TORCH_VERSION" = "$OPARA_DEFAULT_TORCH" ]; then
  OPARA_REQUIREMENTS="$OPARA_ROOT/requirements.txt"
  opara_torch_suffix=""
else
  OPARA_REQUIREMENTS="$OPARA_ROOT/requirements/torch-$OPARA_TORCH_VERSION.txt"
  opara_torch_suffix="-torch$OPARA_TORCH_VERSION"
fi
OPARA_VENV="${OPARA_VENV:-$HOME/.cache/opara/venv$opara_torch_suffix}"
OPARA_BUILD="${OPARA_BUILD:-$OPARA_ROOT/build$opara_torch_suffix}"
OPARA_MODELS="${OPARA_MODELS:-$OPARA_ROOT/torchscript_models${opara_torch_suffix:+/torch$OPARA_TORCH_VERSION}}"
# The Python package (python/opara/_library.py) finds its library in $OPARA_BUILD.
export OPARA_TORCH_VERSION OPARA_BUILD
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/opara/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
# Paths relative to the checkout, so that clones in other folders (CI) hit the same cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$OPARA_ROOT}"
OPARA_PYTHON="${OPARA_PYTHON:-$OPARA_VENV/bin/python}"

# Configures (once) a Debug build of the torch-free layers alone in folder $1, with the CMake
# options that follow; it needs no LibTorch. The sanitizer and clang-tidy builds.
opara_configure_core() {
  local build="$1"
  shift
  if [ ! -f "$build/build.ninja" ]; then
    say "configuring the torch-free layers in $build"
    cmake -S "$OPARA_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOPARA_CORE_ONLY=ON "$@" >&2
  fi
}

# Configures (once) and builds the CMake project with ninja; reruns are incremental. Arguments:
# the targets to build (default: all).
opara_build() {
  # A build folder links the torch of the Python it was configured with: another Python (pip
  # install . from another environment) configures it again, so that no library links a torch
  # other than the one it is installed beside.
  local configured_python
  configured_python="$(sed -n 's/^OPARA_PYTHON:FILEPATH=//p' "$OPARA_BUILD/CMakeCache.txt" 2>/dev/null || true)"
  if [ -f "$OPARA_BUILD/build.ninja" ] && [ "$configured_python" != "$OPARA_PYTHON" ]; then
    say "$OPARA_BUILD was configured with $configured_python; configuring it again with $OPARA_PYTHON"
    rm -f "$OPARA_BUILD/CMakeCache.txt" "$OPARA_BUILD/build.ninja"
  fi
  if [ ! -f "$OPARA_BUILD/build.ninja" ]; then
    say "configuring CMake in $OPARA_BUILD"
    cmake -S "$OPARA_ROOT" -B "$OPARA_BUILD" -G Ninja \
      -DCMAKE_BUILD_TYPE="${OPARA_BUILD_TYPE:-Release}" \
      -DOPARA_PYTHON="$OPARA_PYTHON" -DOPARA_WERROR=ON >&2
  fi
  say "building (ninja, $(nproc) jobs)"
  cmake --build "$OPARA_BUILD" -j "$(nproc)" ${1:+--target "$@"} >&2
}

OPARA_ALL_MODELS=(googlenet inception_v3 resnet50 bert_base t5_small vit branchy chain inplace recurrent detect multihead_rnn
  decoder unet)

# What an export stamp records: the hash of the exporter, the model code and the pins of the
# libraries that build the models.
opara_export_hash() {
  cat "$OPARA_ROOT/scripts/export_models.py" "$OPARA_ROOT"/scripts/opara_models/*.py \
    <(grep -E '^(torch|torchvision|transformers|diffusers|numpy)==' "$OPARA_REQUIREMENTS") |
    sha256sum | cut -d' ' -f1
}

# Exports the models whose files are missing, or all of them when the exporter, the model code
# or the pins of the libraries that build them changed since the last export (a stamp records their hash).
#   opara_export_models [--batch B] [--dtype D] NAME...   (batch 1, float32 by default; another
#                                                          dtype's files are <name>_<dtype>_b<B>.*)
opara_export_models() {
  local batch=1 dtype=float32
  while [ $# -gt 0 ]; do
    case "$1" in
      --batch) batch="$2"; shift 2 ;;
      --dtype) dtype="$2"; shift 2 ;;
      *) break ;;
    esac
  done
  local models=("$@") missing=() stamp="$OPARA_MODELS/.export-stamp" want suffix=""
  [ "$batch" = 1 ] || stamp+="-b$batch"
  [ "$dtype" = float32 ] || suffix="_$dtype"
  want="$(opara_export_hash)"
  mkdir -p "$OPARA_MODELS"
  # Every dtype's files of this batch: they share the stamp.
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] || rm -f "$OPARA_MODELS"/*_b"$batch".*
  for name in "${models[@]}"; do
    local stem="$OPARA_MODELS/${name}${suffix}_b$batch"
    for ext in pt pt2 json ref.pt; do
      if [ ! -f "$stem.$ext" ]; then missing+=("$name"); break; fi
    done
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "exporting ${missing[*]} at batch $batch in $dtype into $OPARA_MODELS (random weights, CPU)"
    "$OPARA_PYTHON" -W ignore "$OPARA_ROOT/scripts/export_models.py" --models "${missing[@]}" \
      --batch "$batch" --dtype "$dtype" --out "$OPARA_MODELS" >&2 || return 1
  fi
  echo "$want" >"$stamp"
}
