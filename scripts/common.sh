# Shared settings for the opara scripts; sourced, never run.
OPARA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OPARA_VENV="${OPARA_VENV:-$HOME/.cache/opara/venv}"
OPARA_BUILD="${OPARA_BUILD:-$OPARA_ROOT/build}"
OPARA_MODELS="${OPARA_MODELS:-$OPARA_ROOT/torchscript_models}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/opara/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
OPARA_PYTHON="$OPARA_VENV/bin/python"

say() { printf '[opara] %s\n' "$*" >&2; }

# Configures (once) and builds the CMake project with ninja; reruns are incremental.
opara_build() {
  if [ ! -f "$OPARA_BUILD/build.ninja" ]; then
    say "configuring CMake in $OPARA_BUILD"
    cmake -S "$OPARA_ROOT" -B "$OPARA_BUILD" -G Ninja \
      -DCMAKE_BUILD_TYPE="${OPARA_BUILD_TYPE:-Release}" \
      -DOPARA_PYTHON="$OPARA_PYTHON" >&2
  fi
  say "building (ninja, $(nproc) jobs)"
  cmake --build "$OPARA_BUILD" -j "$(nproc)" >&2
}

# Exports one model in both formats unless all its files are already there.
opara_export_model() {
  local name="$1" batch="${2:-1}"
  local stem="$OPARA_MODELS/${name}_b${batch}"
  if [ -f "$stem.pt" ] && [ -f "$stem.pt2" ] && [ -f "$stem.json" ] && [ -f "$stem.ref.pt" ]; then
    return 0
  fi
  say "exporting $name (batch $batch) into $OPARA_MODELS"
  "$OPARA_PYTHON" "$OPARA_ROOT/scripts/export_models.py" --models "$name" --batch "$batch" \
    --out "$OPARA_MODELS" >&2
}
