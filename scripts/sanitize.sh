#!/usr/bin/env bash
# The torch-free layers (support, graph, schedule, profile, overflow) and their tests in a Debug
# build with AddressSanitizer and UndefinedBehaviorSanitizer, warnings as errors. Debug also runs
# what Release compiles out: make_plan's proof of every plan it returns. LibTorch is not
# instrumented and not needed here, so the build is small (two minutes cold on 2 cores, seconds
# with ccache); the torch layers are covered by ThreadSanitizer (OPARA_TSAN) instead.
#   scripts/sanitize.sh        (build folder: build-sanitize/, or $OPARA_SANITIZE_BUILD)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build="${OPARA_SANITIZE_BUILD:-$OPARA_ROOT/build-sanitize}"
opara_configure_core "$build" -DOPARA_SANITIZE=ON -DOPARA_WERROR=ON
say "building the torch-free layers with ASan and UBSan"
cmake --build "$build" -j "$(nproc)" >&2
say "ctest (ASan, UBSan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
