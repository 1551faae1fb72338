#!/usr/bin/env bash
# Every test: set up, check formatting, clang-tidy on the torch-free layers, build once (ccache, warnings as errors), export the test
# models if missing, then ctest (GoogleTest, the layer check, the installed package), the
# torch-free layers again under ASan and UBSan, and pytest. GPU tests skip themselves without a GPU.
#   OPARA_TORCH_VERSION=2.15.0 scripts/test.sh   the same against that torch (requirements/torch-2.15.0.txt),
#                                                in its own venv, build folder and exported models
#   OPARA_TORCH_FREE_CHECKS=0                    leaves out what no torch changes (formatting, clang-tidy,
#                                                the sanitizer build, the Python tests marked
#                                                same_on_every_torch): .ci/run's pass over the second torch
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

say "testing against torch $OPARA_TORCH_VERSION ($OPARA_VENV, $OPARA_BUILD)"
"$OPARA_ROOT/scripts/setup.sh"
if [ "${OPARA_TORCH_FREE_CHECKS:-1}" != 0 ]; then
  "$OPARA_ROOT/scripts/check_format.sh"
  "$OPARA_ROOT/scripts/tidy.sh"
fi
opara_build
opara_export_models "${OPARA_ALL_MODELS[@]}"
# Half precision: what the tests run in bfloat16 and float16 (float16 convolutions are slow on a CPU).
opara_export_models --dtype bfloat16 branchy
opara_export_models --dtype float16 branchy recurrent
export OPARA_MODELS OPARA_BENCH="$OPARA_BUILD/bin/opara-bench"

say "ctest"
ctest --test-dir "$OPARA_BUILD" --output-on-failure -j "$(nproc)"
[ "${OPARA_TORCH_FREE_CHECKS:-1}" = 0 ] || "$OPARA_ROOT/scripts/sanitize.sh"
say "pytest"
# A worker per core (pytest-xdist), each taking whole files: a file's module fixtures (a package, a
# traced model) are made once, and its tests run in their order.
workers=(-n "$(nproc)" --dist loadfile)
if [ "${OPARA_TORCH_FREE_CHECKS:-1}" = 0 ]; then
  # The second release's pass: what no torch release changes ran in the first (conftest.py's
  # same_on_every_torch marker).
  "$OPARA_PYTHON" -m pytest -q "${workers[@]}" -m "not same_on_every_torch" "$OPARA_ROOT/tests/python"
else
  "$OPARA_PYTHON" -m pytest -q "${workers[@]}" "$OPARA_ROOT/tests/python"
fi
