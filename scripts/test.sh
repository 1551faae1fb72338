#!/usr/bin/env bash
# Every test: set up, check formatting, clang-tidy on the torch-free layers, build once (ccache, warnings as errors), export the test
# models if missing, then ctest (GoogleTest, the layer check, the installed package), the
# torch-free layers again under ASan and UBSan, and pytest. GPU tests skip themselves without a GPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$OPARA_ROOT/scripts/setup.sh"
"$OPARA_ROOT/scripts/check_format.sh"
"$OPARA_ROOT/scripts/tidy.sh"
opara_build
opara_export_models "${OPARA_ALL_MODELS[@]}"
# Half precision: what the tests run in bfloat16 and float16 (float16 convolutions are slow on a CPU).
opara_export_models --dtype bfloat16 branchy
opara_export_models --dtype float16 branchy recurrent
export OPARA_MODELS OPARA_BENCH="$OPARA_BUILD/bin/opara-bench"

say "ctest"
ctest --test-dir "$OPARA_BUILD" --output-on-failure -j "$(nproc)"
"$OPARA_ROOT/scripts/sanitize.sh"
say "pytest"
"$OPARA_PYTHON" -m pytest -q "$OPARA_ROOT/tests/python"
