#!/usr/bin/env bash
# Builds the CMake project (configured once, then incremental, with ccache) without setting up or
# testing: `scripts/build.sh [targets...]`. setup.py calls it for the Python package.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
opara_build "$@"
echo "$OPARA_BUILD"
