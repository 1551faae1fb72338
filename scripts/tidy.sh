#!/usr/bin/env bash
# clang-tidy (.clang-tidy: bug patterns, needless copies) on the torch-free layers (support, graph,
# schedule, profile, overflow) and their headers; any finding fails. Needs only a configured
# core-only build for its compile commands, no compiling: about two minutes on 2 cores. The torch
# layers are left out: parsing LibTorch's headers takes clang-tidy tens of seconds a file.
#   scripts/tidy.sh        (build folder: build-tidy/, or $OPARA_TIDY_BUILD)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build="${OPARA_TIDY_BUILD:-$OPARA_ROOT/build-tidy}"
opara_configure_core "$build" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
say "clang-tidy on the torch-free layers"
cd "$OPARA_ROOT"
# GCC's warning flags in the compile commands are unknown to clang; the counts of warnings in
# headers outside the filter say nothing.
ls csrc/{support,graph,schedule,profile,overflow}/*.cpp |
  xargs -P "$(nproc)" -n 4 clang-tidy --quiet -p "$build" --extra-arg=-Wno-unknown-warning-option 2>&1 |
  sed '/warnings\? generated\.$/d'
say "clang-tidy: no findings"
