#!/usr/bin/env bash
# The GPU check: scripts/gpu_check.py does the work (scripts/README.md has the calls); this keeps
# the documented ones: `scripts/gpu_check.sh pack [--no-build] [--stale-ok]` here, and
# `scripts/gpu_check.sh cold [STEP...]` or `scripts/gpu_check.sh [all|build|test|bench]` there.
# There the program keeps its own deadline (OPARA_GPU_HARD_S, 570 s); `timeout` is the last resort:
# SIGTERM 15 s past that (the program kills its step and writes what it has), SIGKILL 8 s later,
# both before the device tool's SIGKILL at 600 s. The program needs only python3's standard library.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "${1:-}" = pack ]; then exec python3 "$here/gpu_check.py" "$@"; fi
exec timeout -k 8 "$((${OPARA_GPU_HARD_S:-570} + 15))" python3 "$here/gpu_check.py" "$@"
