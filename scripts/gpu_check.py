#!/usr/bin/env python3
"""The GPU check, for the GPU machine of the `device` tool (a task lent one has one call of at most
10 minutes): the GPU tests, what users compare (eager, Inductor, opara), the paper's table and the
CUPTI profiles. scripts/README.md has the device call, the time budget and what comes back in $OUT,
and when.

Cold path: one call on a bare machine, with a build made on the CPU machine.
  here:  scripts/gpu_check.sh pack [--no-build] [--stale-ok]
         builds the four targets (ccache), copies them stripped into .gpu_carry/ with opara_build.json
         and a manifest (torch version and build, git commit, a hash of the C++ sources), and fetches
         .gpu_deps/ when it is missing; prints the sizes and the device call.
  there: scripts/gpu_check.sh cold [STEP...]            carry: .gpu_carry .gpu_deps
         default: tests compare paper profiles (the GPU tests and pytest, bounded; eager, Inductor
         and opara on googlenet and the llama decode step; the paper's table; the profiles).
         By name, for a session with device time left: headline profiled compile regions llm serve
         sanitizer pytest overflow trace half batch8 downstream. A carried build made with another
         torch or from other C++ sources than the tree that travelled is refused, and the call goes
         on as the full path (OPARA_GPU_FALLBACK=0: it stops instead).
Full path: builds on the device (about 3 minutes of the call), ctest included.
  there: scripts/gpu_check.sh [all|build|test|bench]    carry: .gpu_deps
         all: every stage; build: only the build; test and bench: one stage (each builds first)

Time: no step starts past OPARA_GPU_BUDGET_S seconds (540), nor when it would not fit before
OPARA_GPU_HARD_S (570; the call is killed at 600); every command runs under its own limit and none
past that; one that overruns is killed with its process group and its line reads "killed (time)".
After every step's line the step table and the summary land in .gpu_work/out and in $OUT, with the
logs as $OUT/gpu_check.tar.gz: a call killed at any moment still brings back what was done.
OPARA_GPU_DRY_RUN=1 (the CPU machine, to check the program): no GPU needed, bench runs on the CPU
with 2 iterations, GPU-only steps fail and say so; OPARA_GPU_PYTHON names the python to use.

This program needs only python3's standard library; the steps' python is OPARA_GPU_PYTHON (default:
python3 on the PATH, the image's, with torch). Its modules are in scripts/gpu_check/.
"""

import sys
from pathlib import Path

from gpu_check.paths import main  # scripts/gpu_check/, beside this file

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], Path(__file__).resolve().parents[1]))
