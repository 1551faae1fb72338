#!/usr/bin/env bash
# Run ON THE GPU MACHINE, from the repo root, with .gpu_deps carried (scripts/fetch_gpu_deps.sh
# makes it here). One call: unpack the carried libraries, build, export a few models, run the
# GPU tests and the CUDA benchmark, and print a short table last. Output files go to $OUT when set.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps=/tmp/opara-deps
out="${OUT:-/tmp/opara-out}"
models=/tmp/opara-models
mkdir -p "$deps" "$out" "$models"
for deb in "$root"/.gpu_deps/debs/*.deb; do dpkg -x "$deb" "$deps"; done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/opara-site "$root"/.gpu_deps/wheels/*.whl
export PYTHONPATH=/tmp/opara-site${PYTHONPATH:+:$PYTHONPATH}

cmake -S "$root" -B /tmp/opara-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPARA_PYTHON="$(command -v python3)" \
  -DCMAKE_PREFIX_PATH="$deps/usr" -DOPARA_TEST_MODELS="$models" >/dev/null
cmake --build /tmp/opara-build -j "$(nproc)" 2>&1 | tail -3
python3 -W ignore "$root/scripts/export_models.py" --models googlenet inception_v3 bert_base branchy inplace \
  --out "$models"

export OPARA_MODELS="$models"
ctest --test-dir /tmp/opara-build --output-on-failure -R 'Cuda|MatchesForward|RandomOrders' 2>&1 | tee "$out/ctest.log" | tail -5
bench=/tmp/opara-build/bin/opara-bench
for model in googlenet inception_v3 bert_base branchy; do
  for format in pt pt2; do
    "$bench" run --model "$models/${model}_b1.$format" --device cuda --modes eager --iters 100 --warmup 10 \
      --json "$out/${model}_${format}.json" >/dev/null
  done
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 - "$out" <<'PY'
import json, pathlib, sys
print(f"{'model':<14}{'format':<8}{'mode':<10}{'median ms':>10}{'p90 ms':>10}{'max |diff|':>12}")
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    run = json.loads(path.read_text())
    model, fmt = path.stem.rsplit("_", 1)
    for m in run["modes"]:
        print(f"{model:<14}{fmt:<8}{m['mode']:<10}{m['median_ms']:>10.3f}{m['p90_ms']:>10.3f}{m['max_abs_diff']:>12.2e}")
PY
