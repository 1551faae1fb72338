#!/usr/bin/env bash
# The main job: set up, build, export the default model if missing, and run opara-bench on it.
#   scripts/run.sh                    info, the checked plan and a CPU timing of every mode on googlenet
#   scripts/run.sh ARGS...            opara-bench ARGS... (e.g. run --model bert_base --iters 50)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$OPARA_ROOT/scripts/setup.sh"
opara_build
bench="$OPARA_BUILD/bin/opara-bench"
export OPARA_MODELS

if [ $# -gt 0 ]; then
  opara_export_models "${OPARA_ALL_MODELS[@]}"
  exec "$bench" "$@"
fi

model="${OPARA_DEFAULT_MODEL:-googlenet}"
opara_export_models "$model"
"$bench" info --model "$OPARA_MODELS/${model}_b1.pt"
echo
"$bench" plan --model "$OPARA_MODELS/${model}_b1.pt" --check
echo
devices=(cpu)
if "$OPARA_PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  devices+=(cuda)
fi
for device in "${devices[@]}"; do
  for format in pt pt2; do
    # On the CPU the planned modes run on host workers; on the GPU each is one CUDA graph.
    modes=eager,sequential,nimble,opara
    "$bench" run --model "$OPARA_MODELS/${model}_b1.$format" --device "$device" --modes "$modes" --iters 20 --warmup 3
    echo
  done
done
