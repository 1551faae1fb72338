#!/usr/bin/env bash
# The GPU check, for the GPU machine of the `device` tool (one call: at most 10 minutes): the GPU
# tests, the headline table (every mode's median, speedups and peak memory) and whatever else fits.
# scripts/README.md has the exact device calls, the time budget step by step and the traps.
#
# Cold path: one call on a bare machine, with a build made on the CPU machine.
#   here:  scripts/gpu_check.sh pack [--no-build] [--stale-ok]
#          builds the four targets (ccache), copies them stripped into .gpu_carry/ with a manifest
#          (torch version and build, git commit, a hash of the C++ sources), and fetches
#          .gpu_deps/ when it is missing; prints the sizes and the device call.
#   there: scripts/gpu_check.sh cold [STEP...]            carry: .gpu_carry .gpu_deps
#          STEP: tests headline compile serve profiles sanitizer pytest overflow trace half batch8 downstream
#          (default: all of them, in that order). A carried build made with another torch or from
#          other C++ sources than the tree that travelled is refused, and the call goes on as the
#          full path (OPARA_GPU_FALLBACK=0: it stops instead).
# Full path: builds on the device (about 3 minutes of the call), ctest included.
#   there: scripts/gpu_check.sh [all|build|test|bench]    carry: .gpu_deps
#          all: every stage; build: only the build; test and bench: one stage (each builds first)
#
# No step starts past OPARA_GPU_BUDGET_S seconds (default 480), nor when its own estimate would
# take it past OPARA_GPU_HARD_S (570; the call is killed at 600), and none runs past that: each
# skipped step says so and names the call that runs it. The logs and JSON are in .gpu_work/out and
# come back as $OUT/gpu_check.tar.gz, with the final table and checks as $OUT/summary.txt.
# OPARA_GPU_DRY_RUN=1 (the CPU machine, to check the script): no GPU needed, bench runs on the CPU
# with 2 iterations, GPU-only steps fail and say so; OPARA_GPU_PYTHON names the python to use.
set -euo pipefail
export PYTHONUNBUFFERED=1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stage="${1:-all}"
[ $# -eq 0 ] || shift
cold_steps_all=(tests headline compile serve profiles sanitizer pytest overflow trace half batch8 downstream)
# The full path's table: these models at batch 1 and 8, every mode.
table_models=(googlenet inception_v3 resnet50 bert_base t5_small branchy)
# The headline table (issue 21; the cold path): these models at batch 1, every mode.
read -ra headline_models <<<"${OPARA_GPU_MODELS:-googlenet inception_v3 bert_base t5_small branchy}"
all_modes=eager,sequential,nimble,opara,opara-noreorder
# What the GPU tests, the overflow runs and the half-precision runs read besides (NAME:DTYPE).
read -ra extra_specs <<<"${OPARA_GPU_EXTRA_MODELS-resnet50 vit chain inplace recurrent detect multihead_rnn branchy:float16 branchy:bfloat16 googlenet:float16}"
# The GoogleTest GPU tests: the suites named *Cuda, the GPU halves of the others (OnTheGpu...) and
# the shared pool's.
gpu_filter='*Cuda.*:*.OnTheGpu*:SharedPool.*'

usage() {
  echo "usage: $0 pack [--no-build] [--stale-ok]      (here, the CPU machine)" >&2
  echo "       $0 cold [${cold_steps_all[*]}]   (the GPU machine, .gpu_carry carried)" >&2
  echo "       $0 [all|build|test|bench]            (the GPU machine, builds there)" >&2
  exit 2
}
die() { echo "gpu_check: $*" >&2; exit 1; }

# The files the carried binaries are built from (the same list here and there: no git there).
source_hash() {
  (cd "$1" && { find CMakeLists.txt cmake csrc include bench tests/CMakeLists.txt tests/cpp -type f \
    \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.txt' \
    -o -name '*.cmake' -o -name '*.in' \) -print0 2>/dev/null || true; } |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
torch_identity() {  # version, source commit, C++ ABI of the torch a python imports
  "$1" -c 'import torch; print(torch.__version__, torch.version.git_version, int(torch._C._GLIBCXX_USE_CXX11_ABI))'
}

# ---- pack (here) ---------------------------------------------------------------------------------
pack() {
  local build_first=1 stale_ok=0
  while [ $# -gt 0 ]; do
    case "$1" in --no-build) build_first=0 ;; --stale-ok) stale_ok=1 ;; *) usage ;; esac
    shift
  done
  # shellcheck source=scripts/common.sh
  source "$root/scripts/common.sh"
  local carry="$OPARA_ROOT/.gpu_carry" build="$OPARA_BUILD" started=$SECONDS
  if [ "$build_first" = 1 ]; then opara_build opara opara_ext opara-bench opara_tests; fi
  [ -f "$build/CMakeCache.txt" ] || die "no build in $build: run scripts/build.sh (or drop --no-build)"
  local built=$SECONDS
  local f
  for f in bin/opara-bench bin/opara_tests lib/libopara.so lib/libopara_ext.so; do
    [ -e "$build/$f" ] || die "$build/$f is missing: build it (scripts/build.sh) first"
  done
  local src build_python build_type
  src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
  build_python="$(sed -n 's/^OPARA_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")"
  build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")"
  [ "$(cd "$src" && pwd -P)" = "$(cd "$OPARA_ROOT" && pwd -P)" ] ||
    die "$build was configured from $src, not from this checkout ($OPARA_ROOT): its binaries would not match the tree that travels"
  [ "$build_type" = Release ] || echo "gpu_check: note: $build is a $build_type build; timings want Release" >&2
  # The sources must not be newer than the binaries (with --no-build nothing rebuilt them).
  local newer
  newer="$(cd "$OPARA_ROOT" && find CMakeLists.txt cmake csrc include bench tests/CMakeLists.txt tests/cpp -type f \
    \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.txt' \
    -o -name '*.cmake' -o -name '*.in' \) -newer "$build/bin/opara_tests" | head -5)"
  if [ -n "$newer" ] && [ "$stale_ok" = 0 ]; then
    die "sources changed since $build/bin/opara_tests was built (${newer//$'\n'/, }): build first, or pack with --stale-ok"
  fi
  rm -rf "$carry"
  mkdir -p "$carry/bin" "$carry/lib"
  cp "$build/bin/opara-bench" "$build/bin/opara_tests" "$carry/bin/"
  # Under its soname (what the binaries and libopara_ext ask for); libopara_ext finds it by $ORIGIN.
  local soname
  soname="$(readelf -d "$build/lib/libopara.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
  cp -L "$build/lib/libopara.so" "$carry/lib/${soname:-libopara.so}"
  cp "$build/lib/libopara_ext.so" "$carry/lib/"
  local before
  before="$(du -sb "$carry" | cut -f1)"
  strip --strip-unneeded "$carry"/bin/* "$carry"/lib/*
  read -r torch_version torch_git torch_abi <<<"$(torch_identity "$build_python")"
  local commit
  commit="$(git -C "$OPARA_ROOT" rev-parse --short=12 HEAD)"
  [ -z "$(git -C "$OPARA_ROOT" status --porcelain -- CMakeLists.txt cmake csrc include bench tests)" ] || commit+="-dirty"
  {
    printf 'OPARA_PACK_%s=%q\n' COMMIT "$commit" SOURCE_HASH "$(source_hash "$OPARA_ROOT")" \
      SOURCE_DIR "$src" BUILD_TYPE "$build_type" TORCH "$torch_version" TORCH_GIT "$torch_git" TORCH_ABI "$torch_abi" \
      DATE "$(date -u +%FT%TZ)" STALE "$([ -n "$newer" ] && echo yes || echo no)"
  } >"$carry/manifest.env"
  [ -d "$OPARA_ROOT/.gpu_deps/wheels" ] || "$OPARA_ROOT/scripts/fetch_gpu_deps.sh"
  # What travels: the tracked and untracked-not-ignored files, and the carried folders.
  local tree carried deps_size
  tree="$(cd "$OPARA_ROOT" && git ls-files -z --cached --others --exclude-standard |
    { xargs -0 stat -L -c %s 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}')"
  # A shared/ folder inside the checkout travels too, ignored or not.
  [ ! -d "$OPARA_ROOT/shared" ] || tree=$((tree + $(du -sb "$OPARA_ROOT/shared" | cut -f1)))
  carried="$(du -sb "$carry" | cut -f1)"
  deps_size="$(du -sb "$OPARA_ROOT/.gpu_deps" | cut -f1)"
  local total=$((tree + carried + deps_size))
  echo "packed $OPARA_ROOT/.gpu_carry in $((SECONDS - started)) s ($((built - started)) s of it building):" \
    "commit $commit, torch $torch_version, sources $(source_hash "$OPARA_ROOT")"
  ls -l "$carry"/bin/* "$carry"/lib/*
  awk -v c="$carried" -v b="$before" -v d="$deps_size" -v t="$tree" -v a="$total" 'BEGIN {m = 1048576
    printf "sizes (MiB): .gpu_carry %.1f (%.1f unstripped), .gpu_deps %.1f, working tree %.1f; travels %.1f of 64\n",
      c / m, b / m, d / m, t / m, a / m}'
  [ "$total" -lt $((60 << 20)) ] || die "what would travel is over 60 MiB: the device refuses more than 64"
  echo 'the device call: run(command="scripts/gpu_check.sh cold", carry=[".gpu_carry", ".gpu_deps"], timeout_s=600)'
}

case "$stage" in
  pack) pack "$@"; exit ;;
  all | build | test | bench) [ $# -eq 0 ] || usage ;;
  cold) ;;
  *) usage ;;
esac

# ---- the GPU machine -----------------------------------------------------------------------------
budget="${OPARA_GPU_BUDGET_S:-480}"
hard_limit="${OPARA_GPU_HARD_S:-570}"  # no step runs past this: the call is killed at 600 s
dry_run="${OPARA_GPU_DRY_RUN:-0}"
work="$root/.gpu_work"
deps=/tmp/opara-deps
build="$work/build"
out="$work/out"
model_dir="$work/models"
carry="$root/.gpu_carry"
mkdir -p "$out" "$model_dir"
rm -f "$out/summary.txt"  # an earlier call's: this call writes its own at the end
# The image's python3 holds the torch the build links; opara_export_models exports what is missing.
OPARA_PYTHON="${OPARA_GPU_PYTHON:-$(command -v python3)}"
OPARA_MODELS="$model_dir"
# shellcheck source=scripts/common.sh
source "$root/scripts/common.sh"
export OPARA_MODELS
device=cuda
iters=()  # opara-bench's default on the GPU (1000) on the full path; cold: --iters 200
if [ "$dry_run" = 1 ]; then device=cpu; fi

# One line per step in $out/steps.tsv (name, ok|FAILED|SKIPPED, detail), shown in the final checks.
note() {
  touch "$out/steps.tsv"
  awk -F'\t' -v n="$1" '$1 != n' "$out/steps.tsv" >"$out/steps.tsv.new"
  printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >>"$out/steps.tsv.new"
  mv "$out/steps.tsv.new" "$out/steps.tsv"
  if [ "$2" = FAILED ]; then echo "FAILED: $1${3:+ ($3)}"; fi
}
# True while there is time for a step (label, the stage or cold step that runs it, the seconds it
# needs at least); otherwise notes it as skipped and says, once per hint, which call runs it.
told="|"
skipped_steps=()
in_time() {
  if [ "$SECONDS" -lt "$budget" ] && [ $((SECONDS + ${3:-0})) -lt "$hard_limit" ]; then return 0; fi
  note "$1" SKIPPED "out of time after ${SECONDS} s"
  case "$told" in *"|$2|"*) ;; *)
    echo "SKIPPED (out of time after ${SECONDS} s) from $1 on: run scripts/gpu_check.sh $2 in the next call"
    told="$told$2|"
    skipped_steps+=("$2") ;;
  esac
  return 1
}
wants() { [ "$stage" = all ] || [ "$stage" = "$1" ]; }
# Runs a step under what is left of the hard limit (or under $1 seconds, if less: limited_for), so
# that a slow step cannot take the logs with it.
left() { echo $((hard_limit > SECONDS + 10 ? hard_limit - SECONDS : 10)); }
limited() { timeout --kill-after=5 "$(left)" "$@"; }
limited_for() {  # seconds command...: at most that long (5 at least: timeout 0 would mean forever)
  local cap=$(($1 > 5 ? $1 : 5)) rest
  shift
  rest="$(left)"
  timeout --kill-after=5 "$((cap < rest ? cap : rest))" "$@"
}
# The logs and results come back even when a step fails or the budget runs out.
trap 'if [ -n "${OUT:-}" ]; then tar -czf "$OUT/gpu_check.tar.gz" -C "$out" . || true; cp "$out/summary.txt" "$OUT/" 2>/dev/null || true; fi' EXIT

# Results of an earlier call on this (still warm) machine were made by another build: start again.
fresh_results_for() {
  local stamp
  stamp="$(sha256sum "$1" | cut -d' ' -f1)"
  if [ "$(cat "$out/.bench-stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "${out:?}"/* && mkdir -p "$out" "$profiles" && echo "$stamp" >"$out/.bench-stamp"
  fi
}

python_deps() {
  command -v nvcc >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"  # nvcc, compute-sanitizer
  # transformers (pinned) for bert_base and t5_small; the image has the rest (see the device notes).
  if compgen -G "$root/.gpu_deps/wheels/*.whl" >/dev/null; then
    "$OPARA_PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/opara-site "$root"/.gpu_deps/wheels/*.whl
    export PYTHONPATH=/tmp/opara-site${PYTHONPATH:+:$PYTHONPATH}
  else
    echo "gpu_check: no .gpu_deps/wheels carried: the image's transformers exports bert_base and t5_small" >&2
  fi
  # One python start (torch and transformers take seconds to import): the versions, the torch build
  # and folder for the cold path's checks ($work/torch.txt), and no run without a visible GPU.
  "$OPARA_PYTHON" - "$dry_run" "$work/torch.txt" <<'PY'
import os, sys, torch, torchvision, transformers
print("python", sys.version.split()[0], "torch", torch.__version__, "torchvision", torchvision.__version__,
      "transformers", transformers.__version__)
with open(sys.argv[2], "w") as f:
    print(torch.__version__, torch.version.git_version, int(torch._C._GLIBCXX_USE_CXX11_ABI), file=f)
    print(os.path.dirname(torch.__file__), file=f)
if sys.argv[1] != "1":
    if not torch.cuda.is_available():
        sys.exit("gpu_check: torch sees no CUDA GPU here; the GPU tests would only skip")
    print("gpu", torch.cuda.get_device_name(0))
PY
}

# Exports NAME[:DTYPE]... at a batch size, each in a process of its own at once (the machine has 16
# cores; one process exports a model in about the time the CPU machine takes, see the README).
# Files of an older exporter are removed first, as opara_export_models does, and the stamp that
# opara_export_models reads is written, so that later calls on a warm machine reuse the files.
export_at_once() {
  local batch="$1" spec name dtype stem rc=0 i stamp="$model_dir/.export-stamp" want
  shift
  local pids=() specs=() logs=()
  mkdir -p "$out/exports"
  [ "$batch" = 1 ] || stamp+="-b$batch"
  want="$(opara_export_hash)"
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] || rm -f "$model_dir"/*_b"$batch".*
  echo "$want" >"$stamp"
  for spec in "$@"; do
    name="${spec%%:*}"
    dtype=float32
    [ "$spec" = "$name" ] || dtype="${spec#*:}"
    stem="$model_dir/$name"
    [ "$dtype" = float32 ] || stem+="_$dtype"
    stem+="_b$batch"
    if [ -f "$stem.pt" ] && [ -f "$stem.pt2" ] && [ -f "$stem.json" ] && [ -f "$stem.ref.pt" ]; then continue; fi
    "$OPARA_PYTHON" -W ignore "$root/scripts/export_models.py" --models "$name" --dtype "$dtype" --batch "$batch" \
      --out "$model_dir" >"$out/exports/${name}_${dtype}_b$batch.log" 2>&1 &
    pids+=("$!")
    specs+=("$spec")
    logs+=("${name}_${dtype}_b$batch.log")
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then
      tail -1 "$out/exports/${logs[$i]}"
    else
      echo "FAILED: export of ${specs[$i]} at batch $batch (see exports/${logs[$i]})"
      rc=1
    fi
  done
  return $rc
}

# ---- the steps both paths share (bench: the opara-bench to run) ----------------------------------
profiles="$out/profiles"
mkdir -p "$profiles"
# CUPTI profiles at batch 1. The overhead is the median profiled run (CUPTI on, node ids pushed)
# minus the median plain eager run of the same executor (goal for googlenet: 10 ms or less).
step_profiles() {  # hint model...
  local hint="$1" model
  shift
  for model in "$@"; do
    in_time "profile $model" "$hint" 20 || continue
    [ -f "$profiles/${model}_b1.json" ] && continue  # made by an earlier call on this machine
    if limited "$bench" profile --model "$model_dir/${model}_b1.pt" --out "$profiles/${model}_b1.json" --require-cupti \
      >"$profiles/${model}_b1.txt" 2>&1; then
      note "profile $model" ok
    else
      rm -f "$profiles/${model}_b1.json"
      note "profile $model" FAILED "see profiles/${model}_b1.txt"
    fi
  done
  "$OPARA_PYTHON" - "$profiles" <<'PY' || echo "FAILED: the profile table (a half-written profile?)"
import json, pathlib, sys
paths = sorted(pathlib.Path(sys.argv[1]).glob("*.json"))
if paths:
    print(f"{'profile':<16}{'eager ms':>10}{'profiled ms':>12}{'overhead ms':>12}{'kernels':>9}{'no node':>8}{'silent':>7}")
for path in paths:
    p = json.loads(path.read_text())
    t = p["timing"]
    kernels = sum(len(n["kernels"]) for n in p["nodes"])
    overhead = t["overhead_ms"] if t["overhead_ms"] is not None else float("nan")  # None: no CUPTI runs
    goal = "  (goal <= 10 ms: " + ("met)" if overhead <= 10 else "MISSED)") if path.stem == "googlenet_b1" else ""
    print(f"{path.stem:<16}{t['eager_run_ms']:>10.3f}{t['profiled_run_ms']:>12.3f}{overhead:>12.3f}"
          f"{kernels:>9}{len(p['unattributed_kernels']):>8}{len(p['silent_nodes']):>7}{goal}")
PY
  if [ -n "${OUT:-}" ] && compgen -G "$profiles/*.json" >/dev/null; then mkdir -p "$OUT/profiles" && cp "$profiles"/*.json "$OUT/profiles/"; fi
}

# One opara-bench run per model into $out/<model><suffix>_b<batch>.json (skipped when an earlier
# call on this machine made it). use_profile: 0, static demands; 1, the model's profile gives
# opara's demands (no run without one); 2, the profile when there is one.
step_runs() {  # hint batch modes suffix use_profile model...
  local hint="$1" batch="$2" modes="$3" suffix="$4" use_profile="$5" model flags
  shift 5
  for model in "$@"; do
    in_time "run $model$suffix b$batch" "$hint" 15 || continue
    local stem="$out/${model}${suffix}_b${batch}"
    [ -f "$stem.json" ] && continue
    flags=()
    if [ "$use_profile" != 0 ] && [ "$batch" = 1 ] && [ -f "$profiles/${model}_b1.json" ]; then
      flags=(--profile "$profiles/${model}_b1.json")
    elif [ "$use_profile" = 1 ]; then
      continue  # the profiled run of a model without a profile: the profile step said why
    fi
    if limited "$bench" run --model "$model_dir/${model}_b${batch}.pt" --device "$device" --modes "$modes" \
      ${iters[@]+"${iters[@]}"} ${flags[@]+"${flags[@]}"} --json "$stem.json" >"$stem.txt" 2>&1; then
      note "run $model$suffix b$batch" ok
    else
      rm -f "$stem.json"
      note "run $model$suffix b$batch" FAILED "see $(basename "$stem").txt"
    fi
  done
}

# Half precision and the memory protections: googlenet in float16, and its graphs captured both
# ways with the smaller pool kept (the JSON has both pools).
step_half() {  # hint
  local run flags
  for run in float16 smaller-pool; do
    in_time "googlenet $run" "$1" 15 || continue
    [ -f "$out/googlenet_${run}_b1.json" ] && continue
    flags=(--dtype float16)
    [ "$run" = smaller-pool ] && flags=(--memory smaller-pool)
    if limited "$bench" run --model googlenet "${flags[@]}" --device "$device" --modes eager,sequential,opara \
      ${iters[@]+"${iters[@]}"} --json "$out/googlenet_${run}_b1.json" >"$out/googlenet_${run}_b1.txt" 2>&1; then
      note "googlenet $run" ok
    else
      rm -f "$out/googlenet_${run}_b1.json"
      note "googlenet $run" FAILED "see googlenet_${run}_b1.txt"
    fi
  done
}

# CPU overflow (issue 6): Comm+SD on each profile against opara with the non-capturable step as a
# plain graph break, and against sequential; googlenet should move nothing (or stay within 5%).
step_overflow() {  # hint
  local model
  step_profiles "$1" googlenet detect multihead_rnn
  for model in googlenet detect multihead_rnn; do
    in_time "opara+overflow $model" "$1" 15 || continue
    [ -f "$profiles/${model}_b1.json" ] || { note "opara+overflow $model" FAILED "no profile of $model"; continue; }
    [ -f "$out/overflow_${model}_b1.json" ] && continue
    if limited "$bench" run --model "$model_dir/${model}_b1.pt" --device "$device" --modes sequential,opara,opara+overflow \
      --overflow comm_sd --profile "$profiles/${model}_b1.json" ${iters[@]+"${iters[@]}"} \
      --json "$out/overflow_${model}_b1.json" >"$out/overflow_${model}_b1.txt" 2>&1; then
      note "opara+overflow $model" ok
    else
      rm -f "$out/overflow_${model}_b1.json"
      note "opara+overflow $model" FAILED "see overflow_${model}_b1.txt"
    fi
    grep -E "^opara\+overflow \(" "$out/overflow_${model}_b1.txt" || true
  done
}

# Fig. 6: the kernels of one run per mode, from CUPTI.
step_trace() {  # hint
  in_time "trace googlenet" "$1" 20 || return 0
  if limited "$bench" trace --model "$model_dir/googlenet_b1.pt" --device "$device" --modes eager,sequential,nimble,opara \
    --out "$out/trace_googlenet_b1.json" >"$out/trace_googlenet_b1.txt" 2>&1; then
    note "trace googlenet" ok
  else
    note "trace googlenet" FAILED "see trace_googlenet_b1.txt"
  fi
  tail -6 "$out/trace_googlenet_b1.txt"
}

# compute-sanitizer on the captured multi-stream graph of one small model. What it can and cannot
# see: memcheck, out-of-bounds and misaligned accesses (inside blocks the caching allocator handed
# out it sees nothing); racecheck, shared-memory hazards between the threads of ONE kernel;
# synccheck, barrier misuse inside one kernel; initcheck, reads of device memory never written
# (on the first run a consumer that overtakes its producer on another stream reads such memory:
# the one cross-stream symptom any of them can show). None of them checks the ordering between
# streams: that is what opara::validate proves on the plan and what the GPU tests check on the
# outputs (allclose to eager over every mode, 64 streams, a thousand replays).
# A tool's failure (errors in its summary, or its exit code: --error-exitcode) is a FAILED check.
step_sanitizer() {  # hint
  local tool rc log summary errors
  for tool in memcheck racecheck synccheck initcheck; do
    in_time "compute-sanitizer $tool" "$1" 30 || continue
    if ! command -v compute-sanitizer >/dev/null; then
      note "compute-sanitizer $tool" FAILED "compute-sanitizer is not on the PATH"
      continue
    fi
    log="$out/sanitizer_$tool.txt"
    rc=0
    limited_for 150 compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 5 \
      "$bench" run --model "$model_dir/branchy_b1.pt" --device cuda --modes opara --iters 3 --warmup 1 >"$log" 2>&1 || rc=$?
    summary="$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 || true)"
    summary="${summary#========= }"
    # "ERROR SUMMARY: 0 errors"; "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    errors="$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) error.*/\1/p; s/.*\(([0-9]+) errors?,.*/\1/p' <<<"$summary" | head -1)"
    if [ "$rc" = 0 ] && [ "${errors:-x}" = 0 ]; then
      note "compute-sanitizer $tool" ok "$summary"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      note "compute-sanitizer $tool" FAILED "timed out after ${SECONDS} s; see sanitizer_$tool.txt"
    else
      note "compute-sanitizer $tool" FAILED "exit $rc, ${summary:-no summary}; see sanitizer_$tool.txt"
    fi
  done
}

# The Python package and the extension on the GPU (libopara_ext from the build in use).
step_pytest() {  # hint ext
  in_time "pytest (Python GPU tests)" "$1" 30 || return 0
  if OPARA_LIBRARY="$2" OPARA_BENCH="$bench" \
    limited "$OPARA_PYTHON" -m pytest -q -p no:cacheprovider "$root/tests/python/test_python_package.py" \
    "$root/tests/python/test_bench_reports.py" "$root/tests/python/test_bench_profile.py" \
    "$root/tests/python/test_bench_cli.py" "$root/tests/python/test_dynamo_backend.py" \
    "$root/tests/python/test_graph_set.py" \
    -k 'cuda or googlenet or cpu_by_name or on_the_gpu' >"$out/pytest.log" 2>&1; then
    note "pytest (Python GPU tests)" ok "$(tail -1 "$out/pytest.log")"
  else
    note "pytest (Python GPU tests)" FAILED "$(tail -1 "$out/pytest.log"); see pytest.log"
  fi
  tail -3 "$out/pytest.log"
}

# torch.compile (issue 23): eager, Inductor and backend="opara" on googlenet, inception_v3,
# bert_base and branchy: first-call time and median latency (bench/torch_compile_bench.py). Inductor
# compiles for a minute or more per model: this step goes after the headline.
step_compile() {  # hint
  in_time "torch.compile (eager, inductor, opara)" "$1" 120 || return 0
  local args=(--device "$device" --json "$out/torch_compile.json")
  [ "$dry_run" = 1 ] && args+=(--iters 2 --warmup 1 --models branchy --backends eager,opara)
  if OPARA_LIBRARY="$2" limited "$OPARA_PYTHON" "$root/bench/torch_compile_bench.py" "${args[@]}" \
    >"$out/torch_compile.txt" 2>&1; then
    note "torch.compile (eager, inductor, opara)" ok
  else
    note "torch.compile (eager, inductor, opara)" FAILED "see torch_compile.txt"
  fi
  cat "$out/torch_compile.txt"
}

# Serving (issue 24): eager, one compiled graph and a graph set under concurrent callers on
# googlenet, and the set's memory pool shared against a pool per bucket (bench/serve_load.py).
step_serve() {  # hint ext
  in_time "serving load (graph set)" "$1" 90 || return 0
  local args=(--model googlenet --device "$device" --json "$out/serve_load.json")
  [ "$dry_run" = 1 ] && args=(--model branchy --device "$device" --requests 20 --concurrency 2 --json "$out/serve_load.json")
  if OPARA_LIBRARY="$2" limited "$OPARA_PYTHON" "$root/bench/serve_load.py" "${args[@]}" >"$out/serve_load.txt" 2>&1; then
    note "serving load (graph set)" ok
  else
    note "serving load (graph set)" FAILED "see serve_load.txt"
  fi
  cat "$out/serve_load.txt"
}

# The final table: every run's modes, then the checks (a line per step that did not pass) and the goals.
final_report() {  # the models the goals are checked on
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$OPARA_PYTHON" - "$out" "$@" <<'PY' 2>&1 | tee "$out/summary.txt"
import json, pathlib, sys
# Issue 4's goals at batch 1: opara over sequential (googlenet 1.6x, inception_v3 1.4x, bert_base
# 1.05x, resnet50 1.0x), over nimble (googlenet 1.05x) and eager (googlenet 3x), peak memory at
# most 1.5x sequential's, googlenet's warm-up plus capture within 1 s.
out = pathlib.Path(sys.argv[1])
table_models = set(sys.argv[2:])  # the models of the script's table
goals = {("googlenet", "speedup_vs_sequential"): 1.6, ("inception_v3", "speedup_vs_sequential"): 1.4,
         ("bert_base", "speedup_vs_sequential"): 1.05, ("resnet50", "speedup_vs_sequential"): 1.0,
         ("googlenet", "speedup_vs_nimble"): 1.05, ("googlenet", "speedup_vs_eager"): 3.0}
print(f"{'model':<22}{'batch':>5} {'mode':<16}{'median ms':>10}{'x seq':>7}{'x nimble':>9}{'x eager':>8}"
      f"{'max |diff|':>11}{'peak MiB':>9}{'/seq':>6}{'compile ms':>11}{'streams':>8}")
missed = []
measured = set()  # the goal models with an opara row at batch 1
def number(m, key, spec):
    return format(m[key], spec) if isinstance(m.get(key), (int, float)) else "n/a"
for path in sorted(out.glob("*_b*.json")):
    try:
        run = json.loads(path.read_text())
    except ValueError:
        print(f"{path.stem:<22} unreadable JSON")
        continue
    if "modes" not in run:
        continue  # the trace
    model, batch = path.stem.rsplit("_b", 1)
    for m in run["modes"]:
        peak = m["peak_bytes"] / 2**20 if isinstance(m.get("peak_bytes"), (int, float)) else None
        print(f"{model:<22}{batch:>5} {m['mode']:<16}{number(m, 'median_ms', '.3f'):>10}"
              f"{number(m, 'speedup_vs_sequential', '.2f'):>7}{number(m, 'speedup_vs_nimble', '.2f'):>9}"
              f"{number(m, 'speedup_vs_eager', '.2f'):>8}{number(m, 'max_abs_diff', '.2e'):>11}"
              f"{(format(peak, '.1f') if peak is not None else 'n/a'):>9}{number(m, 'peak_vs_sequential', '.2f'):>6}"
              f"{number(m, 'compile_ms', '.0f') if 'compile_ms' in m else '':>11}{m.get('streams', 1):>8}")
        # The goals are the float32 runs at batch 1 (<model>_b1.json, and <model>_profiled_b1.json
        # with measured demands): not overflow_*, _float16, _smaller-pool.
        base = model.removesuffix("_profiled")
        label = base + (" (profiled)" if base != model else "")
        if batch != "1" or m["mode"] != "opara" or base not in table_models:
            continue
        measured.add(base)
        for (goal_model, key), least in goals.items():
            if goal_model == base and (m.get(key) or 0) < least:
                missed.append(f"{label} opara {key} {number(m, key, '.2f')} < {least}")
        if (m.get("peak_vs_sequential") or 0) > 1.5:
            missed.append(f"{label} opara peak {m['peak_vs_sequential']:.2f}x sequential's > 1.5x")
        # compile_ms holds warm-up and capture, and planning and costs too: over 1 s it may still meet it.
        if base == "googlenet" and m.get("compile_ms", 0) > 1000:
            missed.append(f"{label} compile (warm-up, capture, planning) {m['compile_ms']:.0f} ms > 1000 ms")
steps = out / "steps.tsv"
rows = [line.split("\t") for line in steps.read_text().splitlines()] if steps.exists() else []
print("checks:")
for name, status, detail in rows:
    if status != "SKIPPED":
        print(f"  {status:<8} {name}{': ' + detail if detail else ''}")
failed = [name for name, status, _ in rows if status == "FAILED"]
skipped = [name for name, status, _ in rows if status == "SKIPPED"]
if skipped:
    print(f"  SKIPPED  for time: {'; '.join(skipped)}")
print("checks: " + ("all passed" if not failed else "FAILED: " + "; ".join(failed)) +
      (f" ({len(skipped)} skipped for time)" if skipped else ""))
unmeasured = sorted({m for m, _ in goals if m in table_models} - measured)
if not measured:
    verdict = "none measured"
elif missed:
    verdict = "MISSED: " + "; ".join(missed)
else:
    verdict = "all met of those measured" if unmeasured else "all met"
print("goals: " + verdict + (f" (not measured: {', '.join(unmeasured)})" if unmeasured else ""))
PY
}

# ---- the cold path -------------------------------------------------------------------------------
# Not running the carried build: unless OPARA_GPU_FALLBACK=0, the call goes on as the full path
# (build here, then every stage) with what is left of its time, so that it still brings something back.
refuse() {
  echo "gpu_check: refusing to run the carried build: $*" >&2
  [ "${OPARA_GPU_FALLBACK:-1}" = 1 ] || exit 1
  echo "gpu_check: building here instead (scripts/gpu_check.sh all, the full path) after ${SECONDS} s" >&2
  export OPARA_GPU_BUDGET_S=$((budget - SECONDS)) OPARA_GPU_HARD_S=$((hard_limit - SECONDS))
  trap - EXIT
  exec "$root/scripts/gpu_check.sh" all
}
# The carried build: same torch as here (else refuse), same C++ sources as this tree (else refuse),
# every library it needs found, the CPU machine's source folder reachable.
cold_preflight() {
  [ -f "$carry/manifest.env" ] ||
    die "no .gpu_carry/manifest.env: run 'scripts/gpu_check.sh pack' on the CPU machine and carry .gpu_carry"
  # shellcheck source=/dev/null
  source "$carry/manifest.env"
  echo "carried build: commit $OPARA_PACK_COMMIT, $OPARA_PACK_BUILD_TYPE, torch $OPARA_PACK_TORCH, packed $OPARA_PACK_DATE"
  python_deps
  local here_torch here_git here_abi
  read -r here_torch here_git here_abi <"$work/torch.txt"
  if [ "$here_torch $here_git $here_abi" != "$OPARA_PACK_TORCH $OPARA_PACK_TORCH_GIT $OPARA_PACK_TORCH_ABI" ]; then
    echo "gpu_check: the carried build links torch $OPARA_PACK_TORCH ($OPARA_PACK_TORCH_GIT, C++11 ABI $OPARA_PACK_TORCH_ABI)," \
      "this machine's python has torch $here_torch ($here_git, C++11 ABI $here_abi)." >&2
    [ "${OPARA_GPU_ALLOW_TORCH_MISMATCH:-0}" = 1 ] ||
      refuse "another torch (to carry a build again: pin this machine's torch in requirements.txt, set up, pack; OPARA_GPU_ALLOW_TORCH_MISMATCH=1 runs it anyway)"
  fi
  local sources
  sources="$(source_hash "$root")"
  if [ "$sources" != "$OPARA_PACK_SOURCE_HASH" ]; then
    [ "${OPARA_GPU_ALLOW_STALE:-0}" = 1 ] ||
      refuse "the C++ sources here (hash $sources) are not those it was made from ($OPARA_PACK_SOURCE_HASH): repack (scripts/gpu_check.sh pack) after the last edit (OPARA_GPU_ALLOW_STALE=1 runs it anyway)"
    echo "gpu_check: the C++ sources changed since packing; running the carried build anyway" >&2
  fi
  [ "$OPARA_PACK_STALE" = no ] || echo "gpu_check: note: packed with --stale-ok (sources newer than the build)" >&2
  # The RPATHs name the CPU machine's venv: LibTorch and the CUDA libraries come from this python's torch.
  local torch_dir site dirs=() d
  torch_dir="$(sed -n 2p "$work/torch.txt")"
  site="$(dirname "$torch_dir")"
  for d in "$site"/nvidia/cu13/lib "$site"/nvidia/*/lib /usr/local/cuda/lib64 /usr/local/cuda/lib \
    /usr/local/cuda/extras/CUPTI/lib64; do
    [ -d "$d" ] && dirs+=("$d")
  done
  LD_LIBRARY_PATH="$carry/lib:$torch_dir/lib$(printf ':%s' ${dirs[@]+"${dirs[@]}"})${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  local missing
  missing="$(ldd "$carry"/bin/* "$carry"/lib/*.so* 2>&1 | grep 'not found' | sort -u || true)"
  [ -z "$missing" ] || refuse "it misses libraries here: $missing"
  ldd "$carry/bin/opara-bench" | grep -E 'lib(opara|torch_cuda|c10_cuda|cudart|cupti)\.' | sed 's/^\s*/  /'
  # Compiled into opara_tests: OPARA_TEST_DATA_DIR=<that source folder>/tests/data. Make it this tree.
  local src="$OPARA_PACK_SOURCE_DIR"
  if [ "$src" != "$root" ]; then
    if [ ! -e "$src" ] && mkdir -p "$(dirname "$src")" 2>/dev/null && ln -s "$root" "$src"; then
      echo "linked $src -> $root (the test binary's compiled-in data folder)"
    elif [ "$(cd "$src" 2>/dev/null && pwd -P)" != "$(cd "$root" && pwd -P)" ]; then
      echo "gpu_check: note: $src is not this checkout: tests that read fixtures read $src/tests/data" >&2
    fi
  fi
}

# The GPU tests, run straight from the test binary (ctest's files hold the CPU machine's paths).
# First those that need no model, with no model folder, while the models export; then, with the
# models, those that skipped and the one that passes without any (it loops over the exported
# ones); a crash or a kill leaves tests unrun: they run again, after it, while there is time.
gtest_status() {  # log...: "passed|failed|skipped|crashed NAME", the last word of the logs on each test
  "$OPARA_PYTHON" - "$@" <<'PY'
import re, sys
status = {}
for path in sys.argv[1:]:
    try:
        lines = open(path, errors="replace").read().splitlines()
    except FileNotFoundError:
        continue
    for line in lines:
        m = re.match(r"\[ RUN      \] (\S+)$", line)
        if m:
            status[m.group(1)] = "crashed"
            continue
        m = re.match(r"\[ +(OK|FAILED|SKIPPED) +\] (\S+) \(\d+ ms\)$", line)
        if m:
            status[m.group(2)] = {"OK": "passed", "FAILED": "failed", "SKIPPED": "skipped"}[m.group(1)]
for name, s in status.items():
    print(s, name)
PY
}
# Line-buffered, so that a killed run's log still holds every line it printed.
linebuf=()
if command -v stdbuf >/dev/null; then linebuf=(stdbuf -oL -eL); fi
gtest_list() {  # filter: the full names of the tests it selects
  "$tests_bin" --gtest_filter="$1" --gtest_list_tests | awk '/^[^ ]/{suite=$1; next} {print suite $1}'
}
step_gpu_tests() {  # deadline_s
  local deadline="$1" rc=0 round filter_b listed wanted done_now remaining not_run=""
  mkdir -p "$work/no-models"
  rm -f "$out"/gtest_*.log
  in_time "GPU tests" "cold tests" 30 || return 0
  OPARA_MODELS="$work/no-models" limited_for $((deadline - SECONDS)) ${linebuf[@]+"${linebuf[@]}"} "$tests_bin" --gtest_filter="$gpu_filter" \
    >"$out/gtest_nomodels.log" 2>&1 || rc=$?
  echo "GPU tests without models: exit $rc after ${SECONDS} s; $(gtest_status "$out/gtest_nomodels.log" | cut -d' ' -f1 | sort | uniq -c | tr -s ' \n' ' ')"
  wait_exports
  # Every test but those that passed or failed without models (so: those that skipped, and those a
  # crash kept from running), and the one that passes without any.
  listed="$(gtest_list "$gpu_filter" | sort -u)"
  if [ -z "$listed" ]; then
    note "GPU tests" FAILED "opara_tests lists no test; see gtest_nomodels.log"
    return 0
  fi
  wanted="$(comm -23 <(echo "$listed") \
    <(gtest_status "$out/gtest_nomodels.log" | awk '$1 == "passed" || $1 == "failed" {print $2}' | sort -u))"
  wanted="$(printf '%s\nCompiledModelCuda.EveryModeOfEveryModelIsCloseToEager\n' "$wanted" | grep -v '^$' | sort -u)"
  for round in 1 2 3; do
    [ -n "$wanted" ] || break
    if [ $((deadline - SECONDS)) -lt 20 ]; then
      not_run="; $(wc -l <<<"$wanted") not run for time (after ${SECONDS} s)"
      echo "SKIPPED (out of time after ${SECONDS} s): the GPU tests with models: run scripts/gpu_check.sh cold tests in the next call"
      skipped_steps+=("cold tests")
      break
    fi
    filter_b="$(paste -sd: <<<"$wanted")"
    rc=0
    limited_for $((deadline - SECONDS)) ${linebuf[@]+"${linebuf[@]}"} "$tests_bin" --gtest_filter="$filter_b" \
      >"$out/gtest_models_$round.log" 2>&1 || rc=$?
    echo "GPU tests with models (round $round): exit $rc after ${SECONDS} s"
    # Left to run: those this round never reached (after a crash or the kill).
    done_now="$(gtest_status "$out/gtest_models_$round.log" | awk '{print $2}' | sort -u)"
    remaining="$(comm -23 <(echo "$wanted") <(echo "$done_now"))"
    [ "$remaining" != "$wanted" ] || break  # nothing ran: no point in a new round
    wanted="$remaining"
  done
  local results counts failed
  results="$(gtest_status "$out"/gtest_nomodels.log "$out"/gtest_models_*.log)"
  echo "$results" | sort -k2 >"$out/gtest_results.txt"
  counts="$(awk '{n[$1]++} END {printf "%d passed, %d failed, %d skipped, %d crashed or killed", n["passed"], n["failed"], n["skipped"], n["crashed"]}' <<<"$results")"
  failed="$(awk '$1 == "failed" || $1 == "crashed" {print $2}' <<<"$results" | head -8 | paste -sd' ')"
  # A GPU test that skips on the GPU did not check anything: name them (a model failed to export?).
  local skipped
  skipped="$(awk '$1 == "skipped" {print $2}' <<<"$results" | head -8 | paste -sd' ')"
  if [ -n "$failed" ] || [ -z "$results" ]; then
    note "GPU tests" FAILED "$gpu_filter: $counts$not_run: $failed${skipped:+; skipped: $skipped}; see gtest_*.log"
  else
    note "GPU tests" ok "$gpu_filter: $counts$not_run${skipped:+; skipped: $skipped}"
  fi
  echo "GPU tests: $counts"
}

exporting=""
wait_exports() {
  [ -n "$exporting" ] || return 0
  if wait "$exporting"; then
    note "export the models" ok "done after ${SECONDS} s"
  else
    note "export the models" FAILED "see exports/"
    tail -5 "$out/exports/export.log"
  fi
  exporting=""
  echo "models ready after ${SECONDS} s"
}

cold() {
  local steps=("$@") step
  [ ${#steps[@]} -gt 0 ] || steps=("${cold_steps_all[@]}")
  for step in "${steps[@]}"; do
    case " ${cold_steps_all[*]} " in *" $step "*) ;; *) usage ;; esac
  done
  has() { case " ${steps[*]} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
  cold_preflight
  bench="$carry/bin/opara-bench"
  tests_bin="$carry/bin/opara_tests"
  fresh_results_for "$bench"
  iters=(--iters "${OPARA_GPU_ITERS:-200}")
  [ "$dry_run" = 1 ] && iters=(--iters 2 --warmup 1)
  echo "preflight done after ${SECONDS} s"
  # Every model at once, in the background, while the GPU tests that need none run.
  mkdir -p "$out/exports"
  (export_at_once 1 "${headline_models[@]}" ${extra_specs[@]+"${extra_specs[@]}"}) >"$out/exports/export.log" 2>&1 &
  exporting=$!
  # The headline table is what a cold call is for: the tests give way to it past this point.
  local reserve="${OPARA_GPU_HEADLINE_RESERVE_S:-150}"
  has headline || reserve=0
  if has tests; then step_gpu_tests $((budget - reserve)); fi
  wait_exports
  if has headline; then
    step_runs "cold headline" 1 "$all_modes" "" 0 "${headline_models[@]}"
  fi
  if has compile; then step_compile "cold compile" "$carry/lib/libopara_ext.so"; fi
  if has serve; then step_serve "cold serve" "$carry/lib/libopara_ext.so"; fi
  if has profiles; then
    step_profiles "cold profiles" "${headline_models[@]}"
    # opara again, with the demands measured (the headline's come from the static estimate).
    step_runs "cold profiles" 1 sequential,nimble,opara _profiled 1 "${headline_models[@]}"
  fi
  if has sanitizer; then step_sanitizer "cold sanitizer"; fi
  if has pytest; then step_pytest "cold pytest" "$carry/lib/libopara_ext.so"; fi
  if has overflow; then step_overflow "cold overflow"; fi
  if has trace; then step_trace "cold trace"; fi
  if has half; then step_half "cold half"; fi
  if has batch8 && in_time "the batch-8 table" "cold batch8" 60; then
    if export_at_once 8 "${headline_models[@]}" >"$out/exports/export_b8.log" 2>&1; then
      step_runs "cold batch8" 8 "$all_modes" "" 0 "${headline_models[@]}"
    else
      note "export at batch 8" FAILED "see exports/export_b8.log"
    fi
  fi
  # The downstream example (an installed package, built against) needs the full build: rarely in time.
  if has downstream && in_time "downstream (ctest -R downstream)" "cold downstream" 300; then
    if full_build && limited ctest --test-dir "$build" --output-on-failure --timeout 300 -R downstream \
      >"$out/ctest_downstream.log" 2>&1; then
      note "downstream (ctest -R downstream)" ok
    else
      note "downstream (ctest -R downstream)" FAILED "see ctest_downstream.log or build.log"
    fi
  fi
  if [ ${#skipped_steps[@]} -gt 0 ]; then
    local next=()
    for step in "${cold_steps_all[@]}"; do
      case " ${skipped_steps[*]} " in *" cold $step "*) next+=("$step") ;; esac
    done
    echo "next call: scripts/gpu_check.sh cold ${next[*]}"
  fi
}

# ---- the full path: build here -------------------------------------------------------------------
full_preflight() {
  mkdir -p "$deps"
  for deb in "$root"/.gpu_deps/debs/*.deb; do dpkg -x "$deb" "$deps"; done
  python_deps
  # What this machine has, in one place, so that a failure below can be read against it.
  echo "$(cmake --version | head -1); $(g++ --version | head -1); $(nvcc --version | tail -1)"
  # shellcheck disable=SC2012  # names only, for the log
  ls /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* /usr/local/cuda/lib*/libcupti.so* 2>/dev/null | head -2 || true
}
full_build() {
  [ -d "$deps/usr" ] || full_preflight
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPARA_PYTHON="$OPARA_PYTHON" \
    -DCMAKE_PREFIX_PATH="$deps/usr" -DOPARA_TEST_MODELS="$model_dir" >"$work/configure.log" 2>&1 ||
    { tail -30 "$work/configure.log"; cp "$work/configure.log" "$out/"; return 1; }
  if ! limited cmake --build "$build" -j "$(nproc)" >"$work/build.log" 2>&1; then
    grep -m3 -B2 -A12 -E 'error|FAILED' "$work/build.log" || tail -30 "$work/build.log"
    cp "$work/build.log" "$out/"
    return 1
  fi
  echo "built in ${SECONDS} s"
}

full() {
  full_preflight
  # The library, the tests, opara-bench and the extension; the models, each exported once. Every
  # stage starts here, so that each can run alone on a fresh machine.
  # Always built: a no-op when up to date, and a fix made between two calls is what gets tested.
  local all_models=(googlenet inception_v3 resnet50 bert_base t5_small branchy inplace recurrent chain)
  # The models export (CPU, Python) while the library builds; the CPU-overflow models are one-image
  # models: batch 1 only.
  # Half precision: branchy for the GPU tests' tolerances, googlenet for one --dtype float16 run.
  # One call a line: inside an && list a failed export would not stop the subshell (set -e).
  (
    opara_export_models "${all_models[@]}" detect multihead_rnn
    opara_export_models --dtype float16 branchy googlenet
    opara_export_models --dtype bfloat16 branchy
  ) >"$work/export.log" 2>&1 &
  exporting=$!
  if ! full_build; then
    wait "$exporting" || true  # no half-written model left for the next call to take as done
    note "build" FAILED "see build.log or configure.log"
    final_report "${table_models[@]}"
    exit 1
  fi
  bench=$build/bin/opara-bench
  fresh_results_for "$bench"
  if ! wait "$exporting"; then
    tail -30 "$work/export.log"
    cp "$work/export.log" "$out/"
    exit 1
  fi
  exporting=""
  echo "models at batch 1 ready after ${SECONDS} s"
  [ "$stage" != build ] || return 0

  if wants test && in_time "GPU ctest" test; then
    # The GPU tests (CompiledModelCuda: every model and mode allclose to eager, 64 streams, host
    # steps, 1,000 replays) and the eager CUDA reference. The downstream example, built against the
    # installed package, runs on the GPU too.
    if limited ctest --test-dir "$build" --output-on-failure --timeout 300 \
      -R 'Cuda|WrittenInputs|MatchesForward|RandomOrders|downstream' >"$out/ctest.log" 2>&1; then
      note "GPU ctest" ok "$(grep -E 'tests passed' "$out/ctest.log" | tail -1)"
    else
      note "GPU ctest" FAILED "$(grep -E 'tests passed' "$out/ctest.log" | tail -1); see ctest.log"
    fi
    tail -5 "$out/ctest.log"
  fi
  if wants test; then step_pytest test "$build/lib/libopara_ext.so"; fi
  if wants bench; then
    step_profiles bench googlenet inception_v3 bert_base detect multihead_rnn
    # At batch 1 a profiled model's opara mode takes its demands from the profile.
    step_runs bench 1 "$all_modes" "" 2 "${table_models[@]}"
    step_compile bench "$build/lib/libopara_ext.so"
    step_serve bench "$build/lib/libopara_ext.so"
    if in_time "exporting the models at batch 8" bench; then
      opara_export_models --batch 8 "${table_models[@]}"
      step_runs bench 8 "$all_modes" "" 0 "${table_models[@]}"
    fi
    step_half bench
    step_overflow bench
    step_trace bench
  fi
  if wants test; then step_sanitizer test; fi
}

if [ "$stage" = cold ]; then
  cold "$@"
  final_report "${headline_models[@]}"
else
  full
  [ "$stage" = build ] || final_report "${table_models[@]}"
fi
