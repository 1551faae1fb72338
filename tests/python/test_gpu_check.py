"""The GPU check (scripts/gpu_check.sh, scripts/gpu_check.py) keeps what a device call brings back:
a step past its limit is killed and reads "killed (time)", and every finished step's results are in
$OUT as soon as it ends, so that a call killed at any moment still returns them. No GPU and no build:
the steps here are small commands, and the end-to-end cases run the program itself in a scratch
checkout with a fake carried build and a fake python."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from gpu_check import report, runner  # noqa: E402  scripts/gpu_check/
from gpu_check.pack import SOURCE_ROOTS, SOURCE_SUFFIXES, source_hash  # noqa: E402

pytestmark = pytest.mark.same_on_every_torch


def wait_for(predicate, seconds=20):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def steps_of(folder):
    path = Path(folder) / "steps.tsv"
    if not path.exists():
        return {}
    return {row.split("\t")[0]: row.split("\t")[1:] for row in path.read_text().splitlines()}


def gone(pid):
    """The process ended (a zombie waiting for its reaper counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"
    except (FileNotFoundError, IndexError):
        return True


@pytest.fixture
def quick_kills(monkeypatch):
    monkeypatch.setattr(runner, "LEAST_S", 0.2)
    monkeypatch.setattr(runner, "GRACE_S", 1)


def test_a_step_past_its_limit_is_killed_with_its_group_and_reads_killed_time(tmp_path, quick_kills):
    r = runner.Runner(tmp_path / "out", tmp_path / "OUT", budget_s=100, hard_s=100)
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    outcome = r.run(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], tmp_path / "out/slow.txt", limit_s=1,
                    step="slow")
    assert time.monotonic() - started < 15
    assert outcome.killed and outcome.rc is None and not outcome.by_deadline
    assert wait_for(lambda: pid_file.exists() and gone(int(pid_file.read_text())), 10), "the step's child outlived it"
    r.note_outcome("slow", outcome, "slow.txt", hint="cold slow")
    status, detail = steps_of(tmp_path / "OUT")["slow"]
    assert status == "killed (time)" and "its limit" in detail
    summary = (tmp_path / "OUT/summary.txt").read_text()
    assert "checks: none failed; killed (time): slow" in summary
    assert "FAILED" not in summary and "not reached" not in summary  # its own limit: more time would not help


def test_a_compile_stopped_for_time_says_which_region_it_reached_and_where_it_was(tmp_path, quick_kills):
    # A benchmark process as the GPU check's background compiles run it: opara's region progress and,
    # on the runner's SIGTERM, faulthandler's stacks in its log (bench/compile_progress.py).
    script = tmp_path / "slow_compile.py"
    script.write_text(textwrap.dedent(f"""
        import logging, sys, time
        sys.path.insert(0, {str(ROOT / "bench")!r})
        from compile_progress import log_compile_progress
        log_compile_progress()
        log = logging.getLogger("opara")
        log.info("%s: compiling %d region(s) with %s", "googlenet", 3, "Inductor")
        log.info("%s: region %d of %d (%d nodes) %s in %.1f s, %.1f s in all", "googlenet", 1, 3, 40, "compiled", 2.5, 2.5)
        def compile_the_second_region():
            time.sleep(60)
        print("compiling", flush=True)
        compile_the_second_region()
    """))
    r = runner.Runner(tmp_path / "out", tmp_path / "OUT", budget_s=100, hard_s=100)
    proc = r.start([sys.executable, script], tmp_path / "out/warm.log")
    assert wait_for(lambda: "compiling\n" in (tmp_path / "out/warm.log").read_text())
    outcome = r.wait(proc, 1)
    assert outcome.killed
    from gpu_check.steps import where_it_stopped

    words = where_it_stopped(outcome.text())
    assert "last: region 1 of 3 (40 nodes) compiled in 2.5 s" in words
    assert "stopped in compile_the_second_region (slow_compile.py:" in words
    assert where_it_stopped("compiling\n") == ""  # a log with neither says nothing more


def test_a_step_at_the_calls_deadline_is_killed_and_named_as_not_reached(tmp_path, quick_kills):
    r = runner.Runner(tmp_path / "out", tmp_path / "OUT", budget_s=100, hard_s=1)
    r.hint_order = ["tests", "headline"]
    outcome = r.run(["sleep", "60"], tmp_path / "out/late.txt", limit_s=300)
    assert outcome.killed and outcome.by_deadline
    r.note_outcome("late", outcome, "late.txt", hint="cold headline")
    assert steps_of(tmp_path / "OUT")["late"][0] == "killed (time)"
    assert "not reached: scripts/gpu_check.sh cold headline" in (tmp_path / "OUT/summary.txt").read_text()


def test_a_step_that_does_not_fit_is_skipped_and_named_as_not_reached(tmp_path):
    r = runner.Runner(tmp_path / "out", tmp_path / "OUT", budget_s=0, hard_s=100)
    r.hint_order = ["tests", "headline", "compile"]
    assert not r.in_time("torch.compile", "cold compile", 120)
    assert not r.in_time("run googlenet b1", "cold headline", 15)
    assert steps_of(tmp_path / "OUT")["torch.compile"][0] == "SKIPPED"
    summary = (tmp_path / "OUT/summary.txt").read_text()
    assert "checks: all passed (2 skipped for time)" in summary
    assert "not reached: scripts/gpu_check.sh cold headline compile" in summary


def test_the_results_are_in_OUT_after_every_step(tmp_path):
    r = runner.Runner(tmp_path / "out", tmp_path / "OUT", budget_s=100, hard_s=100)
    for n, name in enumerate(["first", "second"], 1):
        outcome = r.run(["sh", "-c", f"echo {name} says hello"], tmp_path / f"out/{name}.txt", limit_s=30)
        r.note_outcome(name, outcome, f"{name}.txt")
        assert list(steps_of(tmp_path / "OUT")) == ["first", "second"][:n]
        assert f"ok       {name}" in (tmp_path / "OUT/summary.txt").read_text()
        with tarfile.open(tmp_path / "OUT/gpu_check.tar.gz") as tar:
            log = tar.extractfile(f"./{name}.txt").read().decode()
        assert log == f"{name} says hello\n"
    assert not list((tmp_path / "OUT").glob("*.part"))


def test_a_failed_step_reads_FAILED_and_a_killed_one_is_not_counted_as_failed():
    rows = [("a", "ok", ""), ("b", "FAILED", "exit 1"), ("c", "killed (time)", "after 9 s"), ("d", "SKIPPED", "")]
    text = report.checks(rows)
    assert "checks: FAILED: b; killed (time): c (1 skipped for time)" in text
    assert report.checks(rows[:1]).endswith("checks: all passed")


def test_a_gtest_run_killed_at_the_deadline_counts_its_test_as_killed_not_crashed():
    log = textwrap.dedent("""\
        [ RUN      ] A.Passes
        [       OK ] A.Passes (3 ms)
        [ RUN      ] A.Skips
        [  SKIPPED ] A.Skips (0 ms)
        [ RUN      ] A.Slow
        """)
    assert report.gtest_status(log, killed=True) == {"A.Passes": "passed", "A.Skips": "skipped", "A.Slow": "killed"}
    assert report.gtest_status(log, killed=False)["A.Slow"] == "crashed"


def test_the_source_hash_is_the_one_the_bash_script_wrote_into_manifests():
    if not shutil.which("sha256sum"):
        pytest.skip("no sha256sum")
    names = " -o ".join(f"-name '*{suffix}'" for suffix in SOURCE_SUFFIXES)
    bash = subprocess.run(
        ["bash", "-c", f"find {' '.join(SOURCE_ROOTS)} -type f \\( {names} \\) -print0 | LC_ALL=C sort -z "
         "| xargs -0 sha256sum | sha256sum | cut -c1-16"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert source_hash(ROOT) == bash


# ---- the program itself, in a scratch checkout ----------------------------------------------------
FAKE_PYTHON = """#!/usr/bin/env bash
# The probe (-c PROBE DRY TORCH_TXT), the package's load (-c LOAD_PROBE ROOT/python: FAKE_NO_PACKAGE
# makes it fail), pytest (-m pytest), the benchmarks (bench/*_bench.py ... --json FILE: each call
# listed in calls.log; FAKE_ROWS=error writes every row as an error and exits 0) and the exporter
# (-W ignore export_models.py ... --out DIR).
calls="$(dirname "$0")/calls.log"
if [ "$1" = -c ]; then
  case "$2" in *load_library*)
    [ -n "$FAKE_NO_PACKAGE" ] && { echo "RuntimeError: opara_build.json does not say which torch"; exit 1; }
    echo "opara {'opara': '0.1.0'} loaded $OPARA_LIBRARY"; exit 0 ;;
  esac
  echo "python 3 torch fake"; printf '2.11.0 abc 1\\n%s/torch\\n' "$(dirname "$4")" >"$4"; exit 0
fi
if [ "$1" = -m ]; then
  if [ -n "$FAKE_PYTEST_CRASH" ]; then  # pytest-xdist's lines when a test crashes its worker
    echo "[gw0] [ 50%] PASSED tests/python/test_inductor_regions_cuda.py::test_on_cuda"
    echo "[gw0] [100%] FAILED tests/python/test_package.py::test_a_cuda_package"
    echo "worker 'gw0' crashed while running 'tests/python/test_package.py::test_a_cuda_package'"
    echo "1 failed, 1 passed in 1s"; exit 1
  fi
  echo "tests/python/test_inductor_regions_cuda.py::test_on_cuda PASSED [100%]"; echo "1 passed in 1s"; exit 0
fi
case "$1" in *_bench.py)
  script="$(basename "$1")"; json=""; backends=""; warm=""
  while [ $# -gt 0 ]; do
    case "$1" in --json) json="$2"; shift ;; --backends) backends="$2"; shift ;; --warm-only) warm=1 ;; esac
    shift
  done
  echo "$script ${warm:+warm }$backends" >>"$calls"
  rows=""
  for b in eager ${backends//,/ }; do
    if [ "$FAKE_ROWS" = error ]; then row='{"model": "m", "backend": "'$b'", "error": "broke"}'
    else
      row='{"model": "m", "backend": "'$b'", "first_call_ms": 2000, "median_ms": 1.5, "max_rel_diff": 0.0, '
      row="$row"'"counters": {"graphs": 1, "compiles": 1, "fallbacks": 0, "regions": 1}, "fell_back": null}'
    fi
    rows="$rows${rows:+, }$row"
  done
  echo '{"results": ['"$rows"']}' >"$json"; exit 0 ;;
esac
while [ $# -gt 0 ]; do
  case "$1" in --models) m="$2"; shift ;; --batch) b="$2"; shift ;; --out) o="$2"; shift ;; esac
  shift
done
for e in pt pt2 json ref.pt; do touch "$o/${m}_b$b.$e"; done
echo "exported $m"
"""
FAKE_BENCH = """#!/usr/bin/env bash
# opara-bench run --model PATH ... --json FILE: a slow model sleeps (its pid in slow.pid), others report.
# opara-bench profile --model PATH --out FILE: a profile the profiles' table reads.
command="$1"; json=""; model=""; out=""
while [ $# -gt 0 ]; do
  case "$1" in --json) json="$2"; shift ;; --model) model="$2"; shift ;; --out) out="$2"; shift ;; esac
  shift
done
case "$model" in *slow*) echo $$ >"$(dirname "$json")/../slow.pid"; exec sleep 60 ;; esac
if [ "$command" = profile ]; then
  echo '{"timing": {"eager_run_ms": 1, "profiled_run_ms": 2, "overhead_ms": 1}, "nodes": [],
         "unattributed_kernels": [], "silent_nodes": []}' >"$out"; exit 0
fi
echo '{"modes": [{"mode": "opara", "median_ms": 1.5, "speedup_vs_sequential": 1.2}]}' >"$json"
"""


@pytest.fixture
def scratch(tmp_path):
    """A checkout with the GPU check's files, a carried build of fake binaries and a fake python."""
    root = tmp_path / "checkout"
    (root / "scripts/opara_models").mkdir(parents=True)
    shutil.copytree(ROOT / "scripts/gpu_check", root / "scripts/gpu_check",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("gpu_check.py", "gpu_check.sh", "export_models.py"):
        shutil.copy2(ROOT / "scripts" / name, root / "scripts" / name)
    (root / "requirements.txt").write_text("torch==2.11.0\n")
    carry = root / ".gpu_carry"
    (carry / "bin").mkdir(parents=True)
    (carry / "lib").mkdir()
    (carry / "bin/opara-bench").write_text(FAKE_BENCH)
    (carry / "bin/opara_tests").write_text("#!/bin/sh\n")
    (carry / "lib/libopara_ext.so").write_text("")
    (carry / "lib/opara_build.json").write_text('{"opara": "0.1.0", "torch": "2.11.0"}\n')
    for path in [*(carry / "bin").iterdir()]:
        path.chmod(0o755)
    (carry / "manifest.env").write_text(
        f"OPARA_PACK_COMMIT=fake\nOPARA_PACK_SOURCE_HASH={source_hash(root)}\nOPARA_PACK_SOURCE_DIR={root}\n"
        "OPARA_PACK_BUILD_TYPE=Release\nOPARA_PACK_TORCH=2.11.0\nOPARA_PACK_TORCH_GIT=abc\nOPARA_PACK_TORCH_ABI=1\n"
        "OPARA_PACK_DATE=now\nOPARA_PACK_STALE=no\n")
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    env = dict(os.environ, OUT=str(tmp_path / "OUT"), OPARA_GPU_DRY_RUN="1", OPARA_GPU_PYTHON=str(python),
               OPARA_GPU_MODELS="fast1 fast2 slow", OPARA_GPU_EXTRA_MODELS="")
    env.pop("LD_LIBRARY_PATH", None)
    return root, env


def start_cold_headline(root, env):
    return subprocess.Popen([root / "scripts/gpu_check.sh", "cold", "headline"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def stop_slow_run(root):
    pid_file = root / ".gpu_work/slow.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_call_killed_with_SIGKILL_halfway_leaves_the_finished_steps_in_OUT(scratch):
    root, env = scratch
    out = Path(env["OUT"])
    call = start_cold_headline(root, env)
    try:
        assert wait_for(lambda: (root / ".gpu_work/slow.pid").exists()), "the slow run never started"
        os.killpg(call.pid, signal.SIGKILL)  # the device tool's kill: no handler runs
        call.communicate(timeout=10)
    finally:
        stop_slow_run(root)
    steps = steps_of(out)
    assert [steps[n][0] for n in ("preflight", "export the models", "run fast1 b1", "run fast2 b1")] == ["ok"] * 4
    assert "run slow b1" not in steps
    summary = (out / "summary.txt").read_text()
    assert "in progress" in summary and "ok       run fast2 b1" in summary
    assert "fast2                     1 opara" in summary  # the table so far
    with tarfile.open(out / "gpu_check.tar.gz") as tar:
        assert json.load(tar.extractfile("./fast1_b1.json"))["modes"][0]["median_ms"] == 1.5


def test_a_call_stopped_by_SIGTERM_kills_its_step_and_reports_it_killed_for_time(scratch):
    root, env = scratch
    out = Path(env["OUT"])
    call = start_cold_headline(root, env)
    try:
        assert wait_for(lambda: (root / ".gpu_work/slow.pid").exists()), "the slow run never started"
        slow = int((root / ".gpu_work/slow.pid").read_text())
        os.killpg(call.pid, signal.SIGTERM)  # what the wrapper's timeout sends
        output, _ = call.communicate(timeout=20)
        assert call.returncode == 124, output
        assert wait_for(lambda: gone(slow), 10), "the step outlived the call"
    finally:
        stop_slow_run(root)
    status, detail = steps_of(out)["run slow b1"]
    assert status == "killed (time)" and "SIGTERM" in detail
    summary = (out / "summary.txt").read_text()
    assert "stopped by SIGTERM" in summary and "checks: none failed; killed (time): run slow b1" in summary


def test_a_cold_call_without_a_carried_build_says_what_to_do(scratch):
    root, env = scratch
    shutil.rmtree(root / ".gpu_carry")
    call = subprocess.run([root / "scripts/gpu_check.sh", "cold"], env=env, capture_output=True, text=True, timeout=60)
    assert call.returncode == 1
    status, detail = steps_of(env["OUT"])["preflight"]
    assert status == "FAILED" and "scripts/gpu_check.sh pack" in detail


def test_a_carried_build_of_another_torch_is_refused_and_says_how_to_carry_one_again(scratch):
    root, env = scratch
    manifest = root / ".gpu_carry/manifest.env"
    manifest.write_text(manifest.read_text().replace("OPARA_PACK_TORCH_GIT=abc", "OPARA_PACK_TORCH_GIT=other"))
    call = subprocess.run([root / "scripts/gpu_check.sh", "cold", "headline"], env=dict(env, OPARA_GPU_FALLBACK="0"),
                          capture_output=True, text=True, timeout=60)
    assert call.returncode == 1, call.stdout + call.stderr
    status, detail = steps_of(env["OUT"])["preflight"]
    assert status == "FAILED" and "carried build refused: another torch" in detail
    assert "run fast1 b1" not in steps_of(env["OUT"])


def test_packing_for_another_torch_is_refused_before_anything_builds(scratch):
    """The GPU image has the default pin's torch: a pack with OPARA_TORCH_VERSION naming another
    release would carry a build the GPU machine refuses."""
    root, env = scratch
    call = subprocess.run([root / "scripts/gpu_check.sh", "pack"], env=dict(env, OPARA_TORCH_VERSION="2.15.0"),
                          capture_output=True, text=True, timeout=60)
    assert call.returncode != 0
    assert "OPARA_TORCH_VERSION=2.15.0" in call.stderr and "default pin (2.11.0" in call.stderr
    assert "pack without OPARA_TORCH_VERSION" in call.stderr


FAKE_TESTS = """#!/usr/bin/env bash
# opara_tests with one GPU test, which ends as $WORD says (OK or SKIPPED).
case "$*" in *--gtest_list_tests*) printf 'CompiledModelCuda.\\n  EveryModeOfEveryModelIsCloseToEager\\n'; exit 0 ;; esac
echo "[ RUN      ] CompiledModelCuda.EveryModeOfEveryModelIsCloseToEager"
printf '[ %8s ] CompiledModelCuda.EveryModeOfEveryModelIsCloseToEager (0 ms)\\n' "$WORD"
"""


@pytest.mark.parametrize("word, status", [("SKIPPED", "FAILED"), ("OK", "ok")])
def test_a_gpu_test_run_in_which_every_test_skipped_checked_nothing_and_reads_failed(scratch, word, status):
    root, env = scratch
    (root / ".gpu_carry/bin/opara_tests").write_text(FAKE_TESTS)
    call = subprocess.run([root / "scripts/gpu_check.sh", "cold", "tests"], env=dict(env, WORD=word),
                          capture_output=True, text=True, timeout=120)
    assert call.returncode == 0, call.stdout + call.stderr
    got, detail = steps_of(env["OUT"])["GPU tests"]
    assert got == status, detail
    if word == "SKIPPED":
        assert "0 passed" in detail and "no test passed" in detail and "EveryModeOfEveryModelIsCloseToEager" in detail


def cold_default(root, env, **extra):
    """The cold call's default (no step named), every model one of the fakes', the GPU tests passing."""
    (root / ".gpu_carry/bin/opara_tests").write_text(FAKE_TESTS)
    env = dict(env, WORD="OK", OPARA_GPU_MODELS="fast1", OPARA_GPU_PAPER_MODELS="fast1 fast2",
               OPARA_GPU_COMPARE_MODELS="fast2", **extra)
    call = subprocess.run([root / "scripts/gpu_check.sh", "cold"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert call.returncode == 0, call.stdout + call.stderr
    return steps_of(env["OUT"]), call.stdout


def test_the_cold_default_runs_the_tests_then_the_compare_then_the_papers_table_then_the_profiles(scratch):
    root, env = scratch
    steps, output = cold_default(root, env)
    assert list(steps) == ["preflight", "python package (import opara, load the extension)", "export the models",
                           "GPU tests", "pytest (Python GPU tests)", "compare fast2", "compare llama small decode",
                           "run fast1 b1", "run fast2 b1", "profile fast1"], output
    assert all(status == "ok" for status, _ in steps.values()), steps
    assert "no opara row fell back" in steps["compare fast2"][1]
    # The compiles were made in the background (Inductor's caches) before the timed run of each job.
    calls = (root.parent / "calls.log").read_text().splitlines()
    timed = calls.index("torch_compile_bench.py eager,inductor,opara,opara-inductor")  # dry run: no reduce-overhead
    assert {"torch_compile_bench.py warm inductor", "torch_compile_bench.py warm opara-inductor"} <= set(calls[:timed])
    assert "llm_decode_bench.py warm inductor" in calls[:calls.index("llm_decode_bench.py eager,inductor,opara,"
                                                                    "opara-inductor")]
    summary = (Path(env["OUT"]) / "summary.txt").read_text()
    assert "compare (first s" in summary and "not reached" not in summary
    assert (Path(env["OUT"]) / "profiles/fast1_b1.json").exists()


def test_a_test_that_crashes_its_pytest_worker_is_run_again_under_cuda_gdb_for_its_stack(scratch, tmp_path):
    root, env = scratch
    tools = tmp_path / "tools"
    tools.mkdir()
    gdb = tools / "cuda-gdb"
    gdb.write_text('#!/bin/sh\necho "cuda-gdb $*" >>"$(dirname "$0")/../calls.log"\n'
                   'echo \'Thread 1 "python3" received signal SIGSEGV, Segmentation fault.\'\necho "#0 0x1 in f ()"\n')
    gdb.chmod(0o755)
    steps, output = cold_default(root, dict(env, FAKE_PYTEST_CRASH="1", PATH=f"{tools}:{env['PATH']}"))
    assert steps["pytest (Python GPU tests)"][0] == "FAILED" and "test_a_cuda_package" in steps["pytest (Python GPU tests)"][1]
    status, detail = steps["crash backtrace"]
    assert status == "ok" and detail.startswith("tests/python/test_package.py::test_a_cuda_package: its stack"), detail
    (call,) = [line for line in (root.parent / "calls.log").read_text().splitlines() if line.startswith("cuda-gdb")]
    assert call.endswith("pytest -x -q -p no:cacheprovider tests/python/test_package.py::test_a_cuda_package"), call
    with tarfile.open(Path(env["OUT"]) / "gpu_check.tar.gz") as logs:
        (member,) = [m for m in logs.getmembers() if m.name.endswith("crash_backtrace.log")]
        assert b"#0 0x1 in f ()" in logs.extractfile(member).read()


def test_a_benchmark_whose_every_row_is_an_error_reads_failed_though_it_exited_0(scratch):
    root, env = scratch
    steps, _ = cold_default(root, env, FAKE_ROWS="error")
    status, detail = steps["compare fast2"]
    assert status == "FAILED" and "every one FAILED" in detail, detail
    assert steps["run fast1 b1"][0] == "ok"  # the steps after it still run


def test_a_python_package_that_cannot_load_the_extension_fails_every_python_step_loudly(scratch):
    root, env = scratch
    steps, _ = cold_default(root, env, FAKE_NO_PACKAGE="1")
    status, detail = steps["python package (import opara, load the extension)"]
    assert status == "FAILED" and "opara_build.json" in detail
    for name in ("pytest (Python GPU tests)", "compare fast2", "compare llama small decode"):
        status, detail = steps[name]
        assert status == "FAILED" and "not run: opara's Python package cannot load" in detail, (name, detail)
    assert not (root.parent / "calls.log").exists(), "a benchmark ran without the package"
    # The C++ steps do not need it.
    assert [steps[n][0] for n in ("GPU tests", "run fast1 b1", "profile fast1")] == ["ok"] * 3


def test_pytest_counts_read_a_log_stopped_midway():
    log = textwrap.dedent("""\
        tests/python/test_a.py::test_one PASSED                                  [ 10%]
        tests/python/test_a.py::test_two[aten-cuda] FAILED                       [ 20%]
        tests/python/test_b.py::test_three SKIPPED (no CUDA GPU here)            [ 30%]
        tests/python/test_b.py::test_four ERROR                                  [ 40%]
        tests/python/test_b.py::test_five PASSED                                 [ 50%]
        """)
    counts = report.pytest_counts(log)
    assert {k: counts[k] for k in ("passed", "failed", "error", "skipped")} == {"passed": 2, "failed": 1, "error": 1,
                                                                               "skipped": 1}
    assert counts["failed_names"] == ["test_a.py::test_two[aten-cuda]", "test_b.py::test_four"]


def test_pytest_counts_read_xdists_lines_and_a_crashed_worker():
    log = textwrap.dedent("""        tests/python/test_a.py::test_one
        [gw0] [ 25%] PASSED tests/python/test_a.py::test_one
        tests/python/test_a.py::test_crash
        [gw0] [ 50%] FAILED tests/python/test_a.py::test_crash

        replacing crashed worker gw0
        [gw1] [ 75%] SKIPPED tests/python/test_b.py::test_three
        [gw1] [100%] PASSED tests/python/test_b.py::test_four
        worker 'gw0' crashed while running 'tests/python/test_a.py::test_crash'
        """)
    counts = report.pytest_counts(log)
    assert {k: counts[k] for k in ("passed", "failed", "error", "skipped")} == {"passed": 2, "failed": 1, "error": 0,
                                                                               "skipped": 1}
    assert counts["failed_names"] == ["test_a.py::test_crash"]
    assert report.crashed_tests(log + log) == ["tests/python/test_a.py::test_crash"]
    assert report.crashed_tests("[gw0] [100%] PASSED tests/python/test_a.py::test_one") == []


def test_the_compare_table_marks_an_opara_row_that_fell_back(tmp_path):
    rows = [{"model": "googlenet", "backend": "eager", "first_call_ms": 50, "median_ms": 2.0, "max_rel_diff": 0.0,
             "speedup_vs_eager": 1.0, "peak_mib": 40.0},
            {"model": "googlenet", "backend": "opara", "first_call_ms": 900, "median_ms": 1.0, "max_rel_diff": 1e-7,
             "speedup_vs_eager": 2.0, "counters": {"graphs": 1, "compiles": 1, "fallbacks": 1, "regions": 0},
             "fell_back": "ran eagerly 1 time(s) (1 graph(s), 1 compile(s))"},
            {"model": "googlenet", "backend": "opara-inductor", "error": "RuntimeError: broke"}]
    (tmp_path / "compare_googlenet.json").write_text(json.dumps({"results": rows}))
    (tmp_path / "warm").mkdir()
    (tmp_path / "warm/compare_googlenet_inductor.json").write_text(json.dumps(
        {"results": [{"model": "googlenet", "backend": "inductor", "first_call_ms": 61000}]}))
    table = report.compare_table(tmp_path).splitlines()
    assert "FELL BACK: ran eagerly 1 time(s)" in table[3] and "2.00" in table[3]
    assert "FAILED: RuntimeError: broke" in table[4]
    passed, words = report.rows_verdict(tmp_path / "compare_googlenet.json")
    assert not passed and "failed: googlenet opara-inductor (RuntimeError: broke)" in words
    assert "opara FELL BACK in: googlenet opara (ran eagerly" in words


# ---- pack, on the CPU machine -----------------------------------------------------------------------
def fake_build(tmp_path, source_dir):
    """A build folder of small real ELF files (strip and readelf must take them), as CMake leaves it."""
    import torch

    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (build / "lib").mkdir()
    (build / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={source_dir}\n"
                                          f"OPARA_PYTHON:FILEPATH={sys.executable}\nCMAKE_BUILD_TYPE:STRING=Release\n")
    for name in ("opara-bench", "opara_tests"):
        shutil.copy(shutil.which("true"), build / "bin" / name)  # built now: after the sources
    library = Path(torch.__file__).parent / "lib/libshm.so"
    shutil.copy2(library, build / "lib/libopara.so")
    shutil.copy2(library, build / "lib/libopara_ext.so")
    (build / "lib/opara_build.json").write_text(json.dumps({"opara": "0.1.0", "torch": "2.11.0"}) + "\n")
    return build


def checkout(path):
    (path / ".gpu_deps/wheels").mkdir(parents=True)  # else pack fetches them
    (path / "requirements.txt").write_text("torch==2.11.0\n")
    (path / "csrc").mkdir()
    (path / "csrc/a.cpp").write_text(f"// {path.name}\n")
    subprocess.run(["git", "init", "-q", path], check=True)
    subprocess.run(["git", "-C", path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                    "-m", "init"], check=True)
    return path


@pytest.mark.skipif(not (shutil.which("strip") and shutil.which("readelf")), reason="no binutils (strip, readelf)")
def test_pack_carries_what_the_python_package_reads_beside_the_extension(tmp_path, monkeypatch):
    from gpu_check.pack import BUILD_INFO, PackError, pack, read_manifest

    sys.path.insert(0, str(ROOT / "python"))
    from opara import _library

    root = checkout(tmp_path / "checkout")
    monkeypatch.setenv("OPARA_BUILD", str(fake_build(tmp_path, root)))
    monkeypatch.delenv("OPARA_TORCH_VERSION", raising=False)
    pack(root, build_first=False)
    ext = root / ".gpu_carry/lib/libopara_ext.so"
    assert BUILD_INFO == _library._BUILD_INFO_NAME  # the name _library.py looks for
    assert _library.built_against(str(ext)) == "2.11.0"  # what the package reads before loading the carried library
    # A build made from another checkout: refused, unless --stale-ok, and then its manifest names
    # that checkout's sources (the GPU machine compares them with the tree that travelled).
    other = checkout(tmp_path / "other")
    with pytest.raises(PackError, match="not from this checkout .*--stale-ok"):
        pack(other, build_first=False)
    pack(other, build_first=False, stale_ok=True)
    manifest = read_manifest(other / ".gpu_carry/manifest.env")
    assert manifest["SOURCE_DIR"] == str(root) and manifest["SOURCE_HASH"] == source_hash(root) != source_hash(other)
    assert (other / ".gpu_carry/lib" / BUILD_INFO).is_file()


def test_the_runs_table_gives_each_pool_and_its_estimate_and_checks_issue_45s_goals(tmp_path):
    """Every model's opara row at batch 1: never below 0.98x sequential, and the pool estimated
    before capture within 20% of the pool measured; the table shows both pools, the cuBLAS
    workspaces measured and estimated beside them, and the cap."""
    def run(model, speedup, pool, estimate, cap=0):
        modes = [{"mode": "sequential", "median_ms": 1.0, "speedup_vs_sequential": 1.0, "streams": 1},
                 {"mode": "opara", "median_ms": 1.0 / speedup, "speedup_vs_sequential": speedup, "streams": 4,
                  "pool_bytes": pool, "pool_estimate_bytes": estimate, "budget_stream_cap": cap,
                  "workspace_bytes": 64 * 2**20, "workspace_estimate_bytes": 96 * 2**20}]
        (tmp_path / f"{model}_b1.json").write_text(json.dumps({"modes": modes}))

    mib = 2**20
    run("branchy", 1.2, 30 * mib, 28 * mib)
    run("chain", 0.95, 4 * mib, 4 * mib)
    run("detect", 1.0, 20 * mib, 40 * mib, cap=3)
    table, goals = report.runs_table(tmp_path, [])
    rows = {line.split()[0] + " " + line.split()[2]: line for line in table.splitlines()[1:]}
    assert rows["branchy opara"].split()[-4:] == ["30.0", "28.0", "64.0", "96.0"]
    assert rows["detect opara"].split()[-5:] == ["20.0", "40.0", "64.0", "96.0", "3"]
    assert rows["chain sequential"].split()[-4:] == ["n/a", "n/a", "n/a", "n/a"], "no pool: none of them"
    assert goals.startswith("goals: MISSED")
    assert "chain opara 0.95x sequential < 0.98" in goals
    assert "detect opara pool estimate 40.0 MiB vs 20.0 MiB measured" in goals
    assert "branchy" not in goals
