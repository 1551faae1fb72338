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
    assert "FAILED" not in summary and "next call" not in summary  # its own limit: a next call would not help


def test_a_step_at_the_calls_deadline_is_killed_and_named_for_the_next_call(tmp_path, quick_kills):
    r = runner.Runner(tmp_path / "out", tmp_path / "OUT", budget_s=100, hard_s=1)
    r.hint_order = ["tests", "headline"]
    outcome = r.run(["sleep", "60"], tmp_path / "out/late.txt", limit_s=300)
    assert outcome.killed and outcome.by_deadline
    r.note_outcome("late", outcome, "late.txt", hint="cold headline")
    assert steps_of(tmp_path / "OUT")["late"][0] == "killed (time)"
    assert "next call: scripts/gpu_check.sh cold headline" in (tmp_path / "OUT/summary.txt").read_text()


def test_a_step_that_does_not_fit_is_skipped_and_named_for_the_next_call(tmp_path):
    r = runner.Runner(tmp_path / "out", tmp_path / "OUT", budget_s=0, hard_s=100)
    r.hint_order = ["tests", "headline", "compile"]
    assert not r.in_time("torch.compile", "cold compile", 120)
    assert not r.in_time("run googlenet b1", "cold headline", 15)
    assert steps_of(tmp_path / "OUT")["torch.compile"][0] == "SKIPPED"
    summary = (tmp_path / "OUT/summary.txt").read_text()
    assert "checks: all passed (2 skipped for time)" in summary
    assert "next call: scripts/gpu_check.sh cold headline compile" in summary


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
# The probe (-c PROBE DRY TORCH_TXT) and the exporter (-W ignore export_models.py ... --out DIR).
if [ "$1" = -c ]; then
  echo "python 3 torch fake"; printf '2.11.0 abc 1\\n%s/torch\\n' "$(dirname "$4")" >"$4"; exit 0
fi
while [ $# -gt 0 ]; do
  case "$1" in --models) m="$2"; shift ;; --batch) b="$2"; shift ;; --out) o="$2"; shift ;; esac
  shift
done
for e in pt pt2 json ref.pt; do touch "$o/${m}_b$b.$e"; done
echo "exported $m"
"""
FAKE_BENCH = """#!/usr/bin/env bash
# opara-bench run --model PATH ... --json FILE: a slow model sleeps (its pid in slow.pid), others report.
json=""; model=""
while [ $# -gt 0 ]; do
  case "$1" in --json) json="$2"; shift ;; --model) model="$2"; shift ;; esac
  shift
done
case "$model" in *slow*) echo $$ >"$(dirname "$json")/../slow.pid"; exec sleep 60 ;; esac
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
