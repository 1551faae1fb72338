"""The steps both paths share. Each checks that it fits in the time left (runner.in_time), runs its
commands under its own limit (context.LIMITS) and notes one result line per unit of work: ok,
FAILED with its reason, killed (time), or SKIPPED for time with the call that runs it.

hint: the call (cold step or stage) that runs a step skipped here, named on the not-reached line.
"""

import hashlib
import json
import os
import re
import shutil
import signal

from . import report
from .context import (ALL_MODES, COMPARE_BACKENDS, COMPARE_MODELS, GPU_FILTER, LIMITS, PAPER_MODES, PYTEST_FILES,
                      PYTEST_SELECTION, WARMED_BACKENDS, words_env)
from .runner import FAILED, KILLED, OK, killed_detail, write_atomically

# A line of torch's own logging (W1127 09:49:54.899000 1144 torch/_inductor/...): a warning, not
# what a process that died last said.
TORCH_LOG_LINE = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d")


# ---- models ---------------------------------------------------------------------------------------
def export_hash(root):
    """What an export stamp records: the exporter, the model code and the pins of the libraries
    that build the models."""
    h = hashlib.sha256()
    for path in [root / "scripts/export_models.py", *sorted((root / "scripts/opara_models").glob("*.py"))]:
        h.update(path.read_bytes())
    pins = [line for line in (root / "requirements.txt").read_text().splitlines()
            if re.match(r"(torch|torchvision|transformers|numpy)==", line)]
    h.update("".join(line + "\n" for line in pins).encode())
    return h.hexdigest()


def _split_spec(spec):
    name, _, dtype = spec.partition(":")
    return name, dtype or "float32"


class Exports:
    """NAME[:DTYPE] models exported at one batch size, each in a process of its own, all at once
    (the GPU machine has 16 cores). Files of an older exporter are removed first and the stamp
    written, so that a later call on a warm machine reuses what is there. wait() waits for them,
    each at most its limit, and notes one line (name)."""

    def __init__(self, g, batch, specs, name):
        self.g, self.batch, self.name = g, batch, name
        self.procs = []  # (spec, stem, Popen)
        self.done = None
        models = g.models
        models.mkdir(parents=True, exist_ok=True)
        (g.out / "exports").mkdir(parents=True, exist_ok=True)
        stamp = models / (".export-stamp" + ("" if batch == 1 else f"-b{batch}"))
        want = export_hash(g.root)
        if not stamp.exists() or stamp.read_text().strip() != want:
            for old in models.glob(f"*_b{batch}.*"):
                old.unlink()
        stamp.write_text(want + "\n")
        for spec in dict.fromkeys(specs):  # each once, in order
            model, dtype = _split_spec(spec)
            stem = models / (model + ("" if dtype == "float32" else f"_{dtype}") + f"_b{batch}")
            if all(stem.with_name(stem.name + ext).exists() for ext in (".pt", ".pt2", ".json", ".ref.pt")):
                continue
            log = g.out / "exports" / f"{model}_{dtype}_b{batch}.log"
            cmd = [g.python, "-W", "ignore", g.root / "scripts/export_models.py", "--models", model, "--dtype", dtype,
                   "--batch", batch, "--out", models]
            self.procs.append((spec, stem, g.runner.start(cmd, log)))

    def wait(self):
        """True when every model exported; notes the line once (later calls return the same)."""
        if self.done is not None:
            return self.done
        g = self.g
        g.runner.running = self.name  # the step a stop would find running
        failed, killed, lines = [], [], []
        for spec, stem, proc in self.procs:
            outcome = g.runner.wait(proc, LIMITS["export"])
            if outcome.ok:
                lines.append(outcome.tail())
                continue
            # No half-written model left for a later call to take as done.
            for path in stem.parent.glob(stem.name + ".*"):
                path.unlink()
            if outcome.killed:
                killed.append(f"{spec} (after {outcome.seconds:.0f} s)")
                lines.append(f"killed (time): export of {spec} at batch {self.batch} (see exports/{outcome.log.name})")
            else:
                failed.append(f"{spec} (exit {outcome.rc})")
                lines.append(f"FAILED: export of {spec} at batch {self.batch} (see exports/{outcome.log.name})")
        log = "export.log" if self.batch == 1 else f"export_b{self.batch}.log"
        (g.out / "exports" / log).write_text("".join(line + "\n" for line in lines))
        for line in lines:
            g.say(line)
        count = f"{len(self.procs)} exported of {len(self.procs)} missing" if self.procs else "all there already"
        if failed:
            g.runner.note(self.name, FAILED, f"{', '.join(failed + killed)}; see exports/")
        elif killed:
            g.runner.note(self.name, KILLED, f"{', '.join(killed)}; see exports/")
        else:
            g.runner.note(self.name, OK, f"{count}, done after {g.runner.seconds()} s")
        self.done = not failed and not killed
        g.runner.running = None
        g.say(f"models at batch {self.batch} ready after {g.runner.seconds()} s")
        return self.done


def fresh_results_for(g, bench):
    """Results of an earlier call on this (still warm) machine made by another build: start again."""
    stamp = hashlib.sha256(bench.read_bytes()).hexdigest()
    path = g.out / ".bench-stamp"
    if path.exists() and path.read_text().strip() == stamp:
        return
    # What this call wrote already (preflight logs, exports under way) stays.
    for old in sorted(g.out.rglob("*"), reverse=True):  # files before their folders
        if old.is_dir():
            if not any(old.iterdir()):
                old.rmdir()
        elif old.lstat().st_mtime < g.runner.wall_started:
            old.unlink()
    g.profiles.mkdir(parents=True, exist_ok=True)
    path.write_text(stamp + "\n")
    g.runner.forget_earlier()


# ---- the GPU tests --------------------------------------------------------------------------------
def _linebuf():
    """Line-buffered, so that a killed run's log still holds every line it printed."""
    return ["stdbuf", "-oL", "-eL"] if shutil.which("stdbuf") else []


def gpu_tests(g, deadline_s, exports, with_pytest=False):
    """The GPU tests, run straight from the test binary (ctest's files hold the CPU machine's
    paths). First with no model folder while the models export; then, with the models, those that
    skipped (a test over models skips when none is exported); a crash leaves tests unrun: they run
    again, after it, 3 rounds at most. None runs past deadline_s (the tests' bound): a test
    stopped there counts as killed (time), not as a crash, and those left count as not run for
    time. A run in which no test passed checked nothing: its line is FAILED. with_pytest: the
    Python GPU tests run beside the runs with models (another process on the GPU; neither is
    timed), under the same bound, with a line of their own."""
    r = g.runner
    name = "GPU tests"
    no_models = g.work / "no-models"
    no_models.mkdir(parents=True, exist_ok=True)
    for old in g.out.glob("gtest_*.log"):
        old.unlink()
    if not r.in_time(name, "cold tests", 30):
        return
    logs = []  # (log, killed), in the order they ran: a later word on a test wins
    first = r.run([*_linebuf(), g.tests_bin, f"--gtest_filter={GPU_FILTER}"], g.out / "gtest_nomodels.log",
                  deadline_s - r.elapsed(), env=g.env(OPARA_MODELS=no_models), step=name)
    logs.append((first.log, first.killed))
    words = report.gtest_status(first.text(), first.killed)
    counts = {}
    for word in words.values():
        counts[word] = counts.get(word, 0) + 1
    ended = f"killed at {r.seconds()} s (time)" if first.killed else f"exit {first.rc} after {r.seconds()} s"
    g.say(f"GPU tests without models: {ended}; "
          + ", ".join(f"{n} {word}" for word, n in sorted(counts.items())))
    exports.wait()
    python_tests = start_pytest(g, deadline_s, "cold tests") if with_pytest else None
    try:
        _gtest_with_models(g, name, deadline_s, first, words, logs)
    finally:
        if python_tests:
            python_tests()


def _gtest_with_models(g, name, deadline_s, first, words, logs):
    """The second half of gpu_tests: the tests that need the models, and the line."""
    r = g.runner
    listing, listed_outcome = r.output([g.tests_bin, f"--gtest_filter={GPU_FILTER}", "--gtest_list_tests"],
                                       LIMITS["tool"])
    listed = set(report.gtest_names(listing)) if listed_outcome.ok else set()
    if not listed:
        why = "listing the tests was killed" if listed_outcome.killed else "opara_tests lists no test"
        r.note(name, KILLED if listed_outcome.killed else FAILED, f"{why}; see gtest_nomodels.log")
        return
    # Every test but those that passed or failed without models: those that skipped, and those a
    # crash kept from running.
    wanted = {t for t in listed if words.get(t) not in ("passed", "failed")}
    not_run = ""
    for round_ in (1, 2, 3):
        if not wanted:
            break
        if deadline_s - r.elapsed() < 20:
            not_run = f"; {len(wanted)} not run for time (after {r.seconds()} s)"
            r.add_hint("cold tests", f"SKIPPED (out of time after {r.seconds()} s): the GPU tests with models")
            break
        run = r.run([*_linebuf(), g.tests_bin, "--gtest_filter=" + ":".join(sorted(wanted))],
                    g.out / f"gtest_models_{round_}.log", deadline_s - r.elapsed(), step=name)
        logs.append((run.log, run.killed))
        g.say(f"GPU tests with models (round {round_}): "
              + (f"killed at {r.seconds()} s (time)" if run.killed else f"exit {run.rc} after {r.seconds()} s"))
        # Left to run: those this round never reached (after a crash or the kill).
        remaining = wanted - set(report.gtest_status(run.text(), run.killed))
        if run.killed:  # the deadline came: what is left did not run for time
            if remaining:
                not_run = f"; {len(remaining)} not run for time (after {r.seconds()} s)"
                r.add_hint("cold tests", f"killed at the deadline ({r.seconds()} s): the GPU tests with models")
            break
        if remaining == wanted:
            break  # nothing ran: no point in a new round
        wanted = remaining
    results = {}
    for log, killed in logs:
        results.update(report.gtest_status(log.read_text(errors="replace") if log.exists() else "", killed))
    (g.out / "gtest_results.txt").write_text("".join(f"{s} {t}\n" for t, s in sorted(results.items())))

    def named(word):
        return [t for t, s in sorted(results.items()) if s == word]

    n = {word: len(named(word)) for word in ("passed", "failed", "skipped", "crashed", "killed")}
    counts = (f"{n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped, {n['crashed']} crashed, "
              f"{n['killed']} killed (time)")
    failed = " ".join((named("failed") + named("crashed"))[:8])
    # A GPU test that skips on the GPU did not check anything: name them (a model failed to export?).
    skipped = " ".join(named("skipped")[:8])
    killed = " ".join(named("killed"))
    also = (f"; skipped: {skipped}" if skipped else "") + (f"; killed: {killed}" if killed else "")
    if failed:
        r.note(name, FAILED, f"{GPU_FILTER}: {counts}{not_run}: {failed}{also}; see gtest_*.log")
    elif killed:
        r.note(name, KILLED, f"{GPU_FILTER}: {counts}{not_run}{also}; see gtest_*.log")
    elif not n["passed"]:  # every test skipped (no GPU, no model): nothing was checked
        r.note(name, FAILED, f"{GPU_FILTER}: {counts}{not_run}: no test passed{also}; see gtest_*.log")
    else:
        r.note(name, OK, f"{GPU_FILTER}: {counts}{not_run}{also}")
    g.say(f"GPU tests: {counts}")


# ---- steps of one command ------------------------------------------------------------------------
def command_step(g, name, hint, least_s, cmd, log, limit_s, env=None, detail=None, passed=None, tail=0):
    """A step that is one command: skipped for time when least_s seconds do not fit, else run under
    limit_s and noted ok, FAILED or killed (time) (Runner.note_outcome). detail(outcome): the
    words of its ok or FAILED line; passed(outcome): whether its check held (default: exit 0).
    Prints the last `tail` lines of its log. Returns the Outcome, or None when skipped."""
    r = g.runner
    if not r.in_time(name, hint, least_s):
        return None
    outcome = r.run(cmd, log, limit_s, env=env, step=name)
    words = detail(outcome) if detail else ""
    r.note_outcome(name, outcome, log.name, ok_detail=words, failed_detail=words, hint=hint,
                   passed=passed(outcome) if passed else None)
    if tail:
        g.print_tail(outcome.log, tail)
    return outcome


def bench_json(g, name, hint, args, json_path):
    """An opara-bench command writing json_path (its log beside it, .txt), noted as one line; none
    when an earlier call on this machine made the JSON. A failed run leaves no JSON behind, so that
    a later call runs it again. Returns the Outcome, or None when nothing ran."""
    if json_path.exists():
        return None
    log = json_path.with_suffix(".txt")
    outcome = g.runner.run(g.timed([g.bench, *args, "--json", json_path]), log, LIMITS["run"], step=name)
    if not outcome.ok:
        json_path.unlink(missing_ok=True)
    g.runner.note_outcome(name, outcome, log.name, hint=hint)
    return outcome


# ---- opara-bench runs -----------------------------------------------------------------------------
def profiles(g, hint, models):
    """CUPTI profiles at batch 1 (skipped when an earlier call on this machine made one), then
    their table: the overhead of profiling (googlenet's goal: 10 ms or less)."""
    r = g.runner
    g.profiles.mkdir(parents=True, exist_ok=True)
    for model in models:
        name = f"profile {model}"
        if not r.in_time(name, hint, 20):
            continue
        profile = g.profiles / f"{model}_b1.json"
        if profile.exists():
            continue  # made by an earlier call on this machine
        outcome = r.run(g.timed([g.bench, "profile", "--model", g.models / f"{model}_b1.pt", "--out", profile,
                                 "--require-cupti"]), g.profiles / f"{model}_b1.txt", LIMITS["profile"], step=name)
        if not outcome.ok:
            profile.unlink(missing_ok=True)
        r.note_outcome(name, outcome, f"profiles/{model}_b1.txt", hint=hint)
    try:
        table = report.profiles_table(g.profiles)
        if table:
            g.say(table)
    except (ValueError, KeyError, TypeError) as error:
        g.say(f"FAILED: the profile table (a half-written profile?): {error!r}")


def runs(g, hint, batch, modes, suffix, use_profile, models):
    """One opara-bench run per model into <model><suffix>_b<batch>.json (skipped when an earlier
    call on this machine made it). use_profile: 0, static demands; 1, the model's profile gives
    opara's demands (no run without one); 2, the profile when there is one."""
    r = g.runner
    for model in models:
        name = f"run {model}{suffix} b{batch}"
        if not r.in_time(name, hint, 15):
            continue
        profile = g.profiles / f"{model}_b1.json"
        flags = []
        if use_profile and batch == 1 and profile.exists():
            flags = ["--profile", profile]
        elif use_profile == 1:
            continue  # the profiled run of a model without a profile: the profile step said why
        bench_json(g, name, hint, ["run", "--model", g.models / f"{model}_b{batch}.pt", "--device", g.device,
                                   "--modes", modes, *g.iters, *flags], g.out / f"{model}{suffix}_b{batch}.json")


def half(g, hint):
    """Half precision and the memory protections: googlenet in float16, and its graphs captured
    both ways with the smaller pool kept (the JSON has both pools)."""
    r = g.runner
    for run in ("float16", "smaller-pool"):
        name = f"googlenet {run}"
        if not r.in_time(name, hint, 15):
            continue
        flags = ["--dtype", "float16"] if run == "float16" else ["--memory", "smaller-pool"]
        bench_json(g, name, hint, ["run", "--model", "googlenet", *flags, "--device", g.device, "--modes",
                                   "eager,sequential,opara", *g.iters], g.out / f"googlenet_{run}_b1.json")


def overflow(g, hint):
    """CPU overflow (issue 6): Comm+SD on each profile against opara with the non-capturable step
    as a plain graph break, and against sequential; googlenet should move nothing (or stay within 5%)."""
    r = g.runner
    models = ["googlenet", "detect", "multihead_rnn"]
    profiles(g, hint, models)
    for model in models:
        name = f"opara+overflow {model}"
        if not r.in_time(name, hint, 15):
            continue
        profile = g.profiles / f"{model}_b1.json"
        if not profile.exists():
            r.note(name, FAILED, f"no profile of {model}")
            continue
        outcome = bench_json(g, name, hint, ["run", "--model", g.models / f"{model}_b1.pt", "--device", g.device,
                                             "--modes", "sequential,opara,opara+overflow", "--overflow", "comm_sd",
                                             "--profile", profile, *g.iters], g.out / f"overflow_{model}_b1.json")
        for line in outcome.text().splitlines() if outcome else []:
            if line.startswith("opara+overflow ("):
                g.say(line)


def trace(g, hint):
    """Fig. 6: the kernels of one run per mode, from CUPTI."""
    command_step(g, "trace googlenet", hint, 20,
                 [g.bench, "trace", "--model", g.models / "googlenet_b1.pt", "--device", g.device, "--modes",
                  "eager,sequential,nimble,opara", "--out", g.out / "trace_googlenet_b1.json"],
                 g.out / "trace_googlenet_b1.txt", LIMITS["trace"], tail=6)


def sanitizer(g, hint):
    """compute-sanitizer on the captured multi-stream graph of one small model. What it can and
    cannot see: memcheck, out-of-bounds and misaligned accesses (inside blocks the caching
    allocator handed out it sees nothing); racecheck, shared-memory hazards between the threads of
    ONE kernel; synccheck, barrier misuse inside one kernel; initcheck, reads of device memory never
    written (on the first run a consumer that overtakes its producer on another stream reads such
    memory: the one cross-stream symptom any of them can show). None of them checks the ordering
    between streams: that is what opara::validate proves on the plan and what the GPU tests check
    on the outputs (allclose to eager over every mode, 64 streams, a thousand replays).
    A tool's failure (errors in its summary, or its exit code: --error-exitcode) is a FAILED line."""
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        name = f"compute-sanitizer {tool}"
        if not shutil.which("compute-sanitizer"):
            if g.runner.in_time(name, hint, 30):
                g.runner.note(name, FAILED, "compute-sanitizer is not on the PATH")
            continue
        command_step(g, name, hint, 30,
                     ["compute-sanitizer", "--tool", tool, "--error-exitcode", "86", "--print-limit", "5", g.bench,
                      "run", "--model", g.models / "branchy_b1.pt", "--device", "cuda", "--modes", "opara", "--iters",
                      "3", "--warmup", "1"], g.out / f"sanitizer_{tool}.txt", LIMITS["sanitizer"],
                     detail=lambda outcome: report.sanitizer_summary(outcome.text())[0] or "no summary",
                     passed=lambda outcome: outcome.ok and report.sanitizer_summary(outcome.text())[1] == 0)


PYTEST_NAME = "pytest (Python GPU tests)"


def package_refused(g, name, hint, least_s=0):
    """True (and the step's line FAILED, saying why) when the preflight found that opara's Python
    package cannot load the extension in use: a Python step must not pass without it. False when
    the step may run (or was skipped for time)."""
    if g.package_error is None:
        return False
    if g.runner.in_time(name, hint, least_s):
        g.runner.note(name, FAILED, f"not run: {g.package_error}")
    return True


def start_pytest(g, deadline_s, hint):
    """Starts the Python GPU tests (libopara_ext from the build in use) in the background, to end by
    deadline_s; returns a function that waits for them and notes their line, or None when they do
    not run (the line says why)."""
    r = g.runner
    if package_refused(g, PYTEST_NAME, hint, 30) or not r.in_time(PYTEST_NAME, hint, 30):
        return None
    # -v: a line per test as it ends, so that a run stopped at the bound still counts what it did.
    # One xdist worker: a test that crashes it (the first H200 run's CUDA package, SIGSEGV) is
    # failed and the others still run, in a fresh worker.
    cmd = [g.python, "-m", "pytest", "-v", "-n", "1", "-p", "no:cacheprovider", "-rfE",
           *[g.root / "tests/python" / f for f in PYTEST_FILES], "-k", PYTEST_SELECTION]
    proc = r.start(cmd, g.out / "pytest.log", env=g.env(OPARA_LIBRARY=g.ext, OPARA_BENCH=g.bench))
    limit = max(deadline_s - r.elapsed(), 30)

    def wait():
        r.running = PYTEST_NAME
        outcome = r.wait(proc, min(limit, LIMITS["pytest"]))
        r.running = None
        _note_pytest(g, outcome, hint)
        g.print_tail(outcome.log, 3)
        crash_backtrace(g, report.crashed_tests(outcome.text()), hint)

    return wait


def crash_backtrace(g, crashed, hint):
    """The native stack of the first test that crashed its pytest worker (`crashed`), run again
    alone under cuda-gdb (the image has no gdb) into crash_backtrace.log, when the call has time
    for it: the first H200 run's package crash took a call of its own to see."""
    name = "crash backtrace"
    gdb = shutil.which("cuda-gdb")  # the preflight put /usr/local/cuda/bin on the PATH
    if not crashed or not gdb or not g.runner.in_time(name, hint, 60):
        return
    log = g.out / "crash_backtrace.log"
    cmd = [gdb, "-batch", "-ex", "set pagination off", "-ex", "run", "-ex", "bt 40", "-ex", "info sharedlibrary",
           "--args", g.python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", crashed[0]]
    outcome = g.runner.run(cmd, log, LIMITS["backtrace"], env=g.env(OPARA_LIBRARY=g.ext, OPARA_BENCH=g.bench),
                           cwd=g.root, step=name)
    if outcome.killed:
        g.runner.note(name, KILLED, f"{crashed[0]}: {killed_detail(outcome, g.runner)}; see crash_backtrace.log")
        return
    # A diagnosis, not a check: the pytest line already failed the crashed test.
    stopped = "received signal" in outcome.text()
    g.runner.note(name, OK, f"{crashed[0]}: {'its stack' if stopped else 'no signal when run alone'}; "
                  "see crash_backtrace.log")


def _note_pytest(g, outcome, hint):
    """ok; FAILED (a test failed or errored, pytest itself failed, or no test passed: a run that
    checked nothing); killed (time) with what it counted so far."""
    r = g.runner
    counts = report.pytest_counts(outcome.text())
    words = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped"))
    failed = " ".join(counts["failed_names"][:8])
    see = "; see pytest.log"
    if counts["failed"] or counts["error"]:
        r.note(PYTEST_NAME, FAILED, f"{words}: {failed}{see}")
    elif outcome.killed:
        r.note(PYTEST_NAME, KILLED, f"{words} before it was stopped, {killed_detail(outcome, r)}{see}")
    elif not outcome.ok:
        r.note(PYTEST_NAME, FAILED, f"exit {outcome.rc}, {words}: {outcome.tail()}{see}")
    elif not counts["passed"]:
        r.note(PYTEST_NAME, FAILED, f"{words}: no test passed{see}")
    else:
        r.note(PYTEST_NAME, OK, words)


def pytest(g, hint):
    """The Python package and the extension on the GPU (libopara_ext from the build in use), alone."""
    python_tests = start_pytest(g, g.runner.elapsed() + LIMITS["pytest"], hint)
    if python_tests:
        python_tests()


def compile_(g, hint):
    """torch.compile (issue 23): eager, Inductor and backend="opara" on googlenet, inception_v3,
    bert_base and branchy: first-call time and median latency (bench/torch_compile_bench.py).
    Inductor compiles for a minute or more per model: this step goes after the headline."""
    name = "torch.compile (eager, inductor, opara)"
    json_path = g.out / "torch_compile.json"
    args = ["--device", g.device, "--json", json_path, "--backends", "eager,inductor,opara"]
    if g.dry_run:
        args += ["--iters", "2", "--warmup", "1", "--models", "branchy", "--backends", "eager,opara"]
    if not package_refused(g, name, hint, 120):
        rows_step(g, name, hint, 120, [g.python, g.root / "bench/torch_compile_bench.py", *args], json_path,
                  LIMITS["compile"])


def regions(g, hint):
    """Streams over fused kernels (issue 33): eager, Inductor "reduce-overhead" (its CUDA graphs),
    backend="opara" with ATen's kernels and with Inductor's compiled per region of opara's plan, on
    googlenet and inception_v3 at batch 1, the goal's models (bench/torch_compile_bench.py; the
    ratio to Inductor is the default mode's, run as well)."""
    name = "regions (eager, inductor, reduce-overhead, opara, opara-inductor)"
    json_path = g.out / "torch_compile_regions.json"
    args = ["--device", g.device, "--json", json_path, "--models", "googlenet", "inception_v3", "--backends",
            "eager,inductor,inductor-ro,opara,opara-inductor"]
    if g.dry_run:
        args = ["--device", g.device, "--json", json_path, "--iters", "2", "--warmup", "1", "--models", "branchy",
                "--backends", "eager"]
    if not package_refused(g, name, hint, 120):
        rows_step(g, name, hint, 120, [g.python, g.root / "bench/torch_compile_bench.py", *args], json_path,
                  LIMITS["compile"])


def llm_decode(g, hint):
    """LLM decode (issue 30): greedy generate with a static KV cache, Llama-style and Qwen2-MoE-style
    models of about 20M parameters at batch 1 and 8, eager, Inductor (default and reduce-overhead)
    and backend="opara": first-call time, tokens/s, tokens against eager's, opara's compiles
    (bench/llm_decode_bench.py; both sizes and four backends would not fit in one call: --sizes
    small,large by hand). Each row lands in the JSON as it ends: a killed run keeps its rows."""
    name = "LLM decode (eager, inductor, opara)"
    json_path = g.out / "llm_decode.json"
    args = ["--device", g.device, "--sizes", "large", "--json", json_path]
    if g.dry_run:
        args = ["--device", g.device, "--quick", "--backends", "eager,opara", "--json", json_path]
    if not package_refused(g, name, hint, 120):
        rows_step(g, name, hint, 120, [g.python, g.root / "bench/llm_decode_bench.py", *args], json_path,
                  LIMITS["llm"])


def rows_step(g, name, hint, least_s, cmd, json_path, limit_s, env=None, extra=None):
    """A Python benchmark writing rows into json_path, noted as one line: ok when it exited 0 and
    its JSON has rows, none failed; its detail names the failed rows, the opara rows that fell back
    and those whose tokens are not eager's (report.rows_verdict). A run whose every row is an
    error is FAILED whatever its exit code. extra: words for the line (and a reason to fail: None
    or a string). Returns the Outcome, or None when skipped."""
    def verdict(outcome):
        passed, words = report.rows_verdict(json_path)
        if extra:
            more = extra()
            if more:
                return False, f"{words}; {more}"
        return passed, words

    json_path.unlink(missing_ok=True)  # no earlier run's rows read as this one's
    results = {}

    def detail(outcome):
        results["verdict"] = verdict(outcome)
        return results["verdict"][1]

    return command_step(g, name, hint, least_s, cmd, json_path.with_suffix(".txt"), limit_s,
                        env=env or g.env(OPARA_LIBRARY=g.ext), detail=detail,
                        passed=lambda outcome: outcome.ok and results["verdict"][0], tail=10**6)


def serve(g, hint):
    """Serving (issue 24): eager, one compiled graph and a graph set under concurrent callers on
    googlenet, and the set's memory pool shared against a pool per bucket (bench/serve_load.py)."""
    args = ["--model", "googlenet", "--device", g.device, "--json", g.out / "serve_load.json"]
    if g.dry_run:
        args = ["--model", "branchy", "--device", g.device, "--requests", "20", "--concurrency", "2", "--json",
                g.out / "serve_load.json"]
    if package_refused(g, "serving load (graph set)", hint, 90):
        return
    command_step(g, "serving load (graph set)", hint, 90, [g.python, g.root / "bench/serve_load.py", *args],
                 g.out / "serve_load.txt", LIMITS["serve"], env=g.env(OPARA_LIBRARY=g.ext), tail=10**6)


def headline(g, hint):
    """The headline table (issue 21): the headline models at batch 1, every mode, static demands (a
    model the paper's table ran already keeps that run: <model>_b1.json)."""
    runs(g, hint, 1, ALL_MODES, "", 0, g.headline_models)


def paper(g, hint):
    """The paper's table: eager, sequential, nimble and opara on its models at batch 1, static
    demands, on the timing cores (after the compiles)."""
    runs(g, hint, 1, PAPER_MODES, "", 0, g.paper_models)


# ---- what users compare: torch.compile's backends, opara's among them -----------------------------
class Job:
    """One benchmark process of the compare step: a script, its arguments, the backends it times."""

    def __init__(self, name, script, args, backends, json_name):
        self.name, self.script, self.args, self.backends, self.json_name = name, script, args, backends, json_name


def compare_jobs(g):
    """googlenet and the tiny diffusers UNet (bench/torch_compile_bench.py; unet_sd15, SD 1.5's, when
    OPARA_GPU_COMPARE_MODELS names it), the Llama-style decode step, its large size at batch 1, and
    the MoE decode step at Qwen1.5-MoE's widths (bench/llm_decode_bench.py, qwen2_moe wide), last;
    OPARA_GPU_COMPARE_MODELS and OPARA_GPU_COMPARE_LLM_SIZE change them. A dry run (the CPU):
    branchy and the small llama, 2 iterations, 4 tokens, no CUDA graphs, no MoE."""
    backends = [b for b in COMPARE_BACKENDS if not (g.dry_run and b in ("inductor-ro", "inductor-best"))]
    models = words_env("OPARA_GPU_COMPARE_MODELS", ["branchy"] if g.dry_run else COMPARE_MODELS)
    quick = ["--iters", "2", "--rounds", "2", "--warmup", "1"] if g.dry_run else []
    size = g.env().get("OPARA_GPU_COMPARE_LLM_SIZE") or ("small" if g.dry_run else "large")
    tokens = ["--new-tokens", "4", "--repeats", "1"] if g.dry_run else []
    jobs = [Job(f"compare {model}", "bench/torch_compile_bench.py", ["--models", model, *quick], backends,
                f"compare_{model}.json") for model in models]
    jobs.append(Job(f"compare llama {size} decode", "bench/llm_decode_bench.py",
                    ["--models", "llama", "--sizes", size, "--batches", "1", *tokens], backends,
                    f"compare_llama_{size}.json"))
    if not g.dry_run:
        jobs.append(Job("compare qwen2_moe wide decode", "bench/llm_decode_bench.py",
                        ["--models", "qwen2_moe", "--sizes", "wide", "--batches", "1"], backends,
                        "compare_qwen2_moe_wide.json"))
    return jobs


class Warmers:
    """The compiles of the compare step, made first in background processes (one per job and
    backend Inductor compiles, niced, off the timing cores) while the GPU tests run: each fills
    Inductor's on-disk caches (.gpu_work/inductor-cache), so that the timed process loads what they
    compiled instead of compiling beside its timing. Their first calls are the cold ones (compiled
    beside other work: an upper bound), kept in warm/*.json."""

    def __init__(self, g, jobs):
        self.g, self.jobs = g, jobs
        self.procs = {}  # (job name, backend) -> Popen
        g.inductor_cache.mkdir(parents=True, exist_ok=True)
        (g.out / "warm").mkdir(parents=True, exist_ok=True)
        if g.package_error is not None:
            return
        for job in jobs:
            for backend in job.backends:
                if backend not in WARMED_BACKENDS:
                    continue
                stem = g.out / "warm" / f"{job.json_name.removesuffix('.json')}_{backend}"
                cmd = [g.python, g.root / job.script, "--device", g.device, *job.args, "--backends", backend,
                       "--warm-only", "--inductor-cache", "--json", stem.with_suffix(".json")]
                self.procs[job.name, backend] = g.runner.start(g.background(cmd, nice=10), stem.with_suffix(".log"),
                                                               env=compile_env(g, threads=4))

    def wait(self, job):
        """Waits for a job's warmers, each at most LIMITS["warm"] from its start; returns
        {backend: why it is not timed} for those that failed or overran (a backend that cannot
        compile in the background would not in the timed process either)."""
        refused = {}
        for backend in job.backends:
            proc = self.procs.pop((job.name, backend), None)
            if proc is None:
                continue
            outcome = self.g.runner.wait(proc, LIMITS["warm"])
            if outcome.killed:
                refused[backend] = (f"its compile ran past {outcome.seconds:.0f} s (warm/{outcome.log.name})"
                                    + where_it_stopped(outcome.text()))
            elif not outcome.ok:
                refused[backend] = f"its compile {ended(outcome.rc)} (warm/{outcome.log.name}): {last_words(outcome)}"
        return refused

    def stop(self):
        """Kills the warmers no job waited for (its step skipped for time): no compile beside the timing after it."""
        for proc in self.procs.values():
            self.g.runner.kill(proc)
        self.procs.clear()


def ended(rc):
    """How a background compile that did not exit 0 ended, in words: a crash names its signal."""
    if rc is not None and rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"CRASHED ({name}, exit {rc})"
    return f"failed, exit {rc}"


def last_words(outcome):
    """The last line of a log that says something: torch's own log lines (W1127 09:49:54 ...:
    warnings, a stack of them) skipped; a log of those alone (a process that crashed in native
    code says nothing), the first of them, which states the warning."""
    lines = [line for line in outcome.text().splitlines() if line.strip()]
    said = [line for line in lines if not TORCH_LOG_LINE.match(line)]
    return (said[-1] if said else lines[0] if lines else "").strip()


# opara's region progress (bench/compile_progress.py) and faulthandler's stack, which SIGTERM writes.
REGION_LINE = re.compile(r"\bregion \d+ of \d+ .*$|\bcompiling \d+ region\(s\).*$")
STACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def where_it_stopped(log):
    """What a background compile stopped for time had done, from its log: opara's last region line
    and the innermost frame of the main thread's stack (faulthandler writes it on SIGTERM, most
    recent call first), as "; words" ('' where the log has neither)."""
    lines = log.splitlines()
    words = []
    progress = [match.group(0) for match in map(REGION_LINE.search, lines) if match]
    if progress:
        words.append(f"last: {progress[-1]}")
    # The stack of the thread that took the signal (the main one, which compiles), else the first.
    heads = [index for index, line in enumerate(lines) if "(most recent call first)" in line]
    head = next((index for index in heads if lines[index].startswith("Current thread")), heads[0] if heads else None)
    frame = next((m for m in map(STACK_FRAME.match, lines[head + 1:]) if m), None) if head is not None else None
    if frame:
        words.append(f"stopped in {frame['function']} ({os.path.basename(frame['file'])}:{frame['line']})")
    return "".join(f"; {word}" for word in words)


def note_not_timed(json_path, job, refused):
    """The backends of a job that were not timed (their background compile failed or crashed),
    as rows of its JSON saying why, so that the compare table shows each one."""
    if not refused:
        return
    try:
        data = json.loads(json_path.read_text())
        rows = data["results"]
    except (OSError, ValueError, KeyError, TypeError):
        data, rows = {"results": []}, None
    rows = rows if isinstance(rows, list) else []
    where = {k: rows[0][k] for k in ("model", "size", "batch") if rows and k in rows[0]}
    if "model" not in where:  # no timed row to copy: the job's name ("compare googlenet")
        where = {"model": job.name.removeprefix("compare ").removesuffix(" decode")}
    rows += [{**where, "backend": backend, "error": f"not timed: {why}"} for backend, why in refused.items()]
    data["results"] = rows
    write_atomically(json_path, json.dumps(data, indent=2) + "\n")


def compile_env(g, threads=None):
    """The benchmarks' environment: the extension in use, Inductor's on-disk caches in one folder
    (the timed process loads what the warmers compiled), at most `threads` compile workers each.
    opara's compile cache is off: on a miss it compiles each region again with AOTInductor and
    loads the package (on the first H200 run every opara-inductor compile ran past its 240 s, and
    loading a CUDA package crashed in the Python tests); opara's regions are compiled in process,
    from Inductor's caches, and the package test checks AOTInductor's."""
    extra = {"OPARA_LIBRARY": g.ext, "TORCHINDUCTOR_CACHE_DIR": g.inductor_cache, "OPARA_CACHE": "0"}
    if threads:
        extra["TORCHINDUCTOR_COMPILE_THREADS"] = threads
    return g.env(**extra)


def compare(g, hint, warmers):
    """What users compare (issue 42): each job's backends timed in one process on the timing cores,
    after its compiles were made in the background (Warmers): latency or decode tokens/s, the first
    call (Inductor's caches warm; the cold one is the warmer's), peak memory, outputs or tokens
    against eager's, and each opara row's fallbacks. A backend whose background compile failed is
    not timed (its line says so and reads FAILED); the table is report.compare_table."""
    r = g.runner
    for job in warmers.jobs:
        if package_refused(g, job.name, hint, 60) or not r.in_time(job.name, hint, 60):
            continue
        r.running = job.name  # the step a stop would find running
        refused = warmers.wait(job)
        r.running = None
        g.say(f"{job.name}: compiles made after {r.seconds()} s"
              + "".join(f"; {b} not timed: {why}" for b, why in refused.items()))
        backends = [b for b in job.backends if b not in refused]
        json_path = g.out / job.json_name
        cmd = g.timed([g.python, g.root / job.script, "--device", g.device, *job.args, "--backends",
                       ",".join(backends), "--inductor-cache", "--json", json_path])
        not_timed = "; ".join(f"{b} not timed: {why}" for b, why in refused.items())
        rows_step(g, job.name, hint, 60, cmd, json_path, LIMITS["compare"], env=compile_env(g),
                  extra=lambda words=not_timed: words or None)
        note_not_timed(json_path, job, refused)  # after the verdict: the table shows them
    warmers.stop()
    table = report.compare_table(g.out)
    if table:
        g.say(table)
