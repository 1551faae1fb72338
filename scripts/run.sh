#!/usr/bin/env bash
# The main job: set up, build, export the default model if missing, and run opara-bench on it.
#   scripts/run.sh                    googlenet: opara-bench's description of its graph and checked plan, then
#                                     eager against torch.compile (Inductor) and torch.compile(backend="opara")
#                                     on this machine (first call, median, ratios, the plan opara ran), and on a
#                                     GPU the paper's table (eager, sequential, nimble, opara) before it
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
compare=("$OPARA_PYTHON" "$OPARA_ROOT/bench/torch_compile_bench.py" --models "$model" --iters 10 --rounds 3)
if "$OPARA_PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "the paper's table on the GPU: each planned mode is one CUDA graph"
  "$bench" run --model "$OPARA_MODELS/${model}_b1.pt" --device cuda --modes eager,sequential,nimble,opara --iters 20 --warmup 3
  echo
  say "what users compare: eager, torch.compile (Inductor, and reduce-overhead) and torch.compile(backend=\"opara\")"
  say "(opara: ATen's kernels, its default on a GPU; opara-inductor: Inductor's kernels per region of its plan)"
  "${compare[@]}" --device cuda --backends eager,inductor,inductor-best,inductor-ro,opara,opara-inductor
else
  say "what users compare on this CPU: eager, torch.compile (Inductor) and torch.compile(backend=\"opara\"),"
  say "whose CPU default is the opara-inductor row: Inductor's kernels per region of opara's plan. Each compiles cold"
  say "(Inductor's caches off), a minute or more on a small machine; the plan opara ran follows its row"
  "${compare[@]}" --device cpu --backends eager,inductor,inductor-best,opara-inductor
fi
