"""What the GPU check reports: the table of every run with issue 4's goals, the compare table
(torch.compile's backends, opara's among them), the checks (one line per step), the profiles'
table, and the parsers of the GoogleTest, pytest and compute-sanitizer logs."""

import json
import math
import re
from pathlib import Path

# Issue 4's goals at batch 1: opara over sequential (googlenet 1.6x, inception_v3 1.4x, bert_base
# 1.05x, resnet50 1.0x), over nimble (googlenet 1.05x) and eager (googlenet 3x), peak memory at
# most 1.5x sequential's, googlenet's warm-up plus capture within 1 s.
GOALS = {("googlenet", "speedup_vs_sequential"): 1.6, ("inception_v3", "speedup_vs_sequential"): 1.4,
         ("bert_base", "speedup_vs_sequential"): 1.05, ("resnet50", "speedup_vs_sequential"): 1.0,
         ("googlenet", "speedup_vs_nimble"): 1.05, ("googlenet", "speedup_vs_eager"): 3.0}


# Issue 45's, on every model's opara row at batch 1: never below 0.98x the sequential graph, and
# the pool estimated before capture within 20% of the pool measured.
LEAST_VS_SEQUENTIAL = 0.98
ESTIMATE_WITHIN = 0.2


def _mib(m, key):
    return format(m[key] / 2**20, ".1f") if isinstance(m.get(key), (int, float)) else "n/a"


def _measured_goals(label, m):
    """What an opara row at batch 1 misses of issue 45's goals, whatever the model."""
    missed = []
    if isinstance(m.get("speedup_vs_sequential"), (int, float)) and m["speedup_vs_sequential"] < LEAST_VS_SEQUENTIAL:
        missed.append(f"{label} opara {m['speedup_vs_sequential']:.2f}x sequential < {LEAST_VS_SEQUENTIAL}")
    pool, estimate = m.get("pool_bytes"), m.get("pool_estimate_bytes")
    if isinstance(pool, (int, float)) and pool > 0 and isinstance(estimate, (int, float)) and estimate > 0:
        if abs(estimate - pool) > ESTIMATE_WITHIN * pool:
            missed.append(f"{label} opara pool estimate {estimate / 2**20:.1f} MiB vs {pool / 2**20:.1f} MiB measured")
    return missed


def _number(m, key, spec):
    return format(m[key], spec) if isinstance(m.get(key), (int, float)) else "n/a"


def runs_table(out, goal_models):
    """The table of every opara-bench run in out (<model>_b<batch>.json) and the goals' line,
    checked on the opara rows at batch 1 of goal_models (and their _profiled runs)."""
    goal_models = set(goal_models)
    lines = [f"{'model':<22}{'batch':>5} {'mode':<16}{'median ms':>10}{'x seq':>7}{'x nimble':>9}{'x eager':>8}"
             f"{'max |diff|':>11}{'peak MiB':>9}{'/seq':>6}{'run MiB':>8}{'/seq':>6}{'compile ms':>11}{'streams':>8}"
             f"{'pool MiB':>9}{'est MiB':>8}{'ws MiB':>7}{'ws est':>7}{'cap':>4}"]
    missed = []
    measured = set()  # the goal models with an opara row at batch 1
    for path in sorted(Path(out).glob("*_b*.json")):
        try:
            run = json.loads(path.read_text())
        except ValueError:
            lines.append(f"{path.stem:<22} unreadable JSON")
            continue
        if not isinstance(run, dict) or "modes" not in run:
            continue  # the trace
        model, batch = path.stem.rsplit("_b", 1)
        for m in run["modes"]:
            peak = m["peak_bytes"] / 2**20 if isinstance(m.get("peak_bytes"), (int, float)) else None
            lines.append(f"{model:<22}{batch:>5} {m['mode']:<16}{_number(m, 'median_ms', '.3f'):>10}"
                         f"{_number(m, 'speedup_vs_sequential', '.2f'):>7}{_number(m, 'speedup_vs_nimble', '.2f'):>9}"
                         f"{_number(m, 'speedup_vs_eager', '.2f'):>8}{_number(m, 'max_abs_diff', '.2e'):>11}"
                         f"{(format(peak, '.1f') if peak is not None else 'n/a'):>9}"
                         f"{_number(m, 'peak_vs_sequential', '.2f'):>6}{_mib(m, 'run_peak_bytes'):>8}"
                         f"{_number(m, 'run_peak_vs_sequential', '.2f'):>6}"
                         f"{_number(m, 'compile_ms', '.0f') if 'compile_ms' in m else '':>11}{m.get('streams', 1):>8}"
                         f"{_mib(m, 'pool_bytes'):>9}{_mib(m, 'pool_estimate_bytes'):>8}{_mib(m, 'workspace_bytes'):>7}"
                         f"{_mib(m, 'workspace_estimate_bytes'):>7}{m.get('budget_stream_cap', '') or '':>4}")
            # The goals are the float32 runs at batch 1 (<model>_b1.json, and <model>_profiled_b1.json
            # with measured demands): not overflow_*, _float16, _smaller-pool.
            base = model.removesuffix("_profiled")
            label = base + (" (profiled)" if base != model else "")
            if batch != "1" or m["mode"] != "opara":
                continue
            missed += _measured_goals(label, m)
            if base not in goal_models:
                continue
            measured.add(base)
            for (goal_model, key), least in GOALS.items():
                if goal_model == base and (m.get(key) or 0) < least:
                    missed.append(f"{label} opara {key} {_number(m, key, '.2f')} < {least}")
            if (m.get("peak_vs_sequential") or 0) > 1.5:
                missed.append(f"{label} opara peak {m['peak_vs_sequential']:.2f}x sequential's > 1.5x")
            # compile_ms holds warm-up and capture, and planning and costs too: over 1 s it may still meet it.
            if base == "googlenet" and m.get("compile_ms", 0) > 1000:
                missed.append(f"{label} compile (warm-up, capture, planning) {m['compile_ms']:.0f} ms > 1000 ms")
    unmeasured = sorted({m for m, _ in GOALS if m in goal_models} - measured)
    if not measured and not missed:
        verdict = "none measured"
    elif missed:
        verdict = "MISSED: " + "; ".join(missed)
    else:
        verdict = "all met of those measured" if unmeasured else "all met"
    goals = "goals: " + verdict + (f" (not measured: {', '.join(unmeasured)})" if unmeasured else "")
    return "\n".join(lines), goals


def checks(rows):
    """The checks: a line per step (name, status, detail) but the skipped, which share one line,
    then the verdict. A step killed for time neither passed nor failed: it is counted apart."""
    lines = ["checks:"]
    for name, status, detail in rows:
        if status != "SKIPPED":
            lines.append(f"  {status:<8} {name}{': ' + detail if detail else ''}")
    failed = [name for name, status, _ in rows if status == "FAILED"]
    killed = [name for name, status, _ in rows if status == "killed (time)"]
    skipped = [name for name, status, _ in rows if status == "SKIPPED"]
    if skipped:
        lines.append(f"  SKIPPED  for time: {'; '.join(skipped)}")
    if failed:
        verdict = "FAILED: " + "; ".join(failed)
    elif killed:
        verdict = "none failed"
    else:
        verdict = "all passed"
    if killed:
        verdict += f"; killed (time): {'; '.join(killed)}"
    lines.append("checks: " + verdict + (f" ({len(skipped)} skipped for time)" if skipped else ""))
    return "\n".join(lines)


def profiles_table(profiles):
    """The CUPTI profiles' table: the overhead is the median profiled run (CUPTI on, node ids
    pushed) minus the median plain eager run of the same executor (googlenet's goal: 10 ms or
    less). Raises ValueError or KeyError on a half-written profile."""
    paths = sorted(Path(profiles).glob("*.json"))
    lines = []
    if paths:
        lines.append(f"{'profile':<16}{'eager ms':>10}{'profiled ms':>12}{'overhead ms':>12}{'kernels':>9}"
                     f"{'no node':>8}{'silent':>7}")
    for path in paths:
        p = json.loads(path.read_text())
        t = p["timing"]
        kernels = sum(len(n["kernels"]) for n in p["nodes"])
        overhead = t["overhead_ms"] if t["overhead_ms"] is not None else math.nan  # None: no CUPTI runs
        goal = "  (goal <= 10 ms: " + ("met)" if overhead <= 10 else "MISSED)") if path.stem == "googlenet_b1" else ""
        lines.append(f"{path.stem:<16}{t['eager_run_ms']:>10.3f}{t['profiled_run_ms']:>12.3f}{overhead:>12.3f}"
                     f"{kernels:>9}{len(p['unattributed_kernels']):>8}{len(p['silent_nodes']):>7}{goal}")
    return "\n".join(lines)


_RUN = re.compile(r"\[ RUN      \] (\S+)$")
_END = re.compile(r"\[ +(OK|FAILED|SKIPPED) +\] (\S+) \(\d+ ms\)$")
_WORD = {"OK": "passed", "FAILED": "failed", "SKIPPED": "skipped"}


def gtest_status(text, killed=False):
    """name -> passed, failed, skipped, crashed or killed: the last word of a GoogleTest log on each
    test. A test that started and never ended crashed, or, in the log of a run killed for time
    (killed), was killed: the run stopped in it."""
    status = {}
    for line in text.splitlines():
        m = _RUN.match(line)
        if m:
            status[m.group(1)] = "killed" if killed else "crashed"
            continue
        m = _END.match(line)
        if m:
            status[m.group(2)] = _WORD[m.group(1)]
    return status


def gtest_names(listing):
    """The full names of a --gtest_list_tests listing ("Suite." lines, then indented tests)."""
    names, suite = [], ""
    for line in listing.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split()[0]
        else:
            names.append(suite + line.split()[0])
    return names


def sanitizer_summary(text):
    """compute-sanitizer's summary line and its error count (None when it printed none):
    "ERROR SUMMARY: 0 errors"; "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"."""
    lines = [line for line in text.splitlines() if re.search("ERROR SUMMARY|RACECHECK SUMMARY", line)]
    if not lines:
        return "", None
    summary = lines[-1].removeprefix("========= ")
    m = re.search(r"ERROR SUMMARY: ([0-9]+) error", summary) or re.search(r"\(([0-9]+) errors?,", summary)
    return summary, int(m.group(1)) if m else None


# "path::name[id] WORD", a skip's "(reason)", then the progress: "[ 40%]".
_WORDS = r"(?P<word>PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)"
# `pytest -v`'s line, "<test> WORD [ n%]", and pytest-xdist's, "[gw0] [ n%] WORD <test>".
_PYTEST_LINES = (re.compile(rf"^(?P<name>\S+::\S+) {_WORDS}(?: \(.*\))? +\[ *\d+%\]$"),
                 re.compile(rf"^\[gw\d+\] \[ *\d+%\] {_WORDS} (?P<name>\S+::\S+)"))


def pytest_counts(text):
    """The words of a `pytest -v` log, with pytest-xdist's workers or without, counted line by line
    (a run stopped midway counts what it printed): passed, failed, error, skipped, and failed_names
    (failed and errored tests; under xdist a test that crashed its worker is failed)."""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "failed_names": []}
    for line in text.splitlines():
        m = next(filter(None, (pattern.search(line.strip()) for pattern in _PYTEST_LINES)), None)
        if not m:
            continue
        word = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                "XFAIL": "skipped"}[m.group("word")]
        counts[word] += 1
        if word in ("failed", "error"):
            counts["failed_names"].append(m.group("name").rpartition("/")[2])
    return counts


_CRASHED = re.compile(r"worker '\w+' crashed while running '([^']+)'")


def crashed_tests(text):
    """The tests of a pytest-xdist log that crashed their worker (a signal: SIGSEGV, SIGABRT), in
    the order they crashed, each once."""
    return list(dict.fromkeys(_CRASHED.findall(text)))


def _row_label(row):
    parts = [row.get("model"), row.get("size"), f"b{row['batch']}" if "batch" in row else None, row.get("backend")]
    return " ".join(str(p) for p in parts if p)


def rows_verdict(path):
    """(passed, words) for the JSON of a Python benchmark (torch_compile_bench.py,
    llm_decode_bench.py): passed when it has rows and none failed. The words count the rows and name
    the failed ones, the opara rows that fell back (`fell_back`: a graph run eagerly, ATen's kernels
    in place of Inductor's) and those whose tokens are not eager's (on a GPU, kernels that differ
    may change an argmax: read the log)."""
    try:
        rows = json.loads(Path(path).read_text())["results"]
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"no rows ({Path(path).name} missing or unreadable)"
    failed = [f"{_row_label(r)} ({r['error']})" for r in rows if "error" in r]
    fell = [f"{_row_label(r)} ({r['fell_back']})" for r in rows if r.get("fell_back")]
    differ = [_row_label(r) for r in rows if r.get("tokens_equal") is False]
    words = f"{len(rows)} rows"
    if not rows:
        words += ": none"
    elif len(failed) == len(rows):
        words += ", every one FAILED"
    words += f"; failed: {', '.join(failed)}" if failed else ""
    words += f"; opara FELL BACK in: {', '.join(fell)}" if fell else "; no opara row fell back"
    words += f"; tokens not eager's: {', '.join(differ)}" if differ else ""
    return bool(rows) and not failed, words


def _cell(value, spec, suffix=""):
    return "-" if not isinstance(value, (int, float)) else format(value, spec) + suffix


def compare_table(out):
    """The compare step's table (compare_*.json): per model and backend its speed (median ms, or
    decode tokens/s), x eager, the first call (Inductor's caches warm from the background compiles)
    and the cold one (that background compile: beside other work, an upper bound), peak memory,
    its outputs against eager's (max relative difference, or tokens equal) and, for opara's rows,
    whether they fell back. "" when there is none."""
    out = Path(out)
    paths = sorted(out.glob("compare_*.json"))
    if not paths:
        return ""
    lines = ["compare (first s: the timed process's first call, Inductor's caches warm, opara's ATen kernels cold; "
             "cold s: Inductor's compile in a background process, beside other work):",
             f"{'model':<22}{'backend':<16}{'speed':>16}{'x eager':>8}{'first s':>9}{'cold s':>8}{'peak MiB':>9}"
             f"  {'= eager':<12} opara"]
    for path in paths:
        try:
            rows = json.loads(path.read_text())["results"]
        except (OSError, ValueError, KeyError, TypeError):
            lines.append(f"{path.name}: unreadable")
            continue
        cold = {}
        for warm in sorted((out / "warm").glob(path.stem + "_*.json")):
            try:
                for r in json.loads(warm.read_text())["results"]:
                    first = r.get("first_call_s", r.get("first_call_ms", 0) / 1000 if "first_call_ms" in r else None)
                    if r.get("backend") != "eager" and first is not None:
                        cold[r["backend"]] = first
            except (OSError, ValueError, KeyError, TypeError):
                continue
        for r in rows:
            model = " ".join(str(p) for p in (r.get("model"), r.get("size"),
                                                 f"b{r['batch']}" if "batch" in r else None) if p)
            head = f"{model:<22}{r.get('backend', '?'):<16}"
            if "error" in r:
                lines.append(head + f"FAILED: {r['error']}")
                continue
            if "decode_tokens_per_s" in r:
                speed = _cell(r.get("decode_tokens_per_s"), ".0f", " tok/s")
                first = r.get("first_call_s")
                same = {True: "yes", False: f"NO ({r.get('tokens_differing', 'shape')})", None: "-"}[
                    r.get("tokens_equal")] if r.get("backend") != "eager" else "(reference)"
            else:
                speed = _cell(r.get("median_ms"), ".3f", " ms")
                first = r["first_call_ms"] / 1000 if isinstance(r.get("first_call_ms"), (int, float)) else None
                same = _cell(r.get("max_rel_diff"), ".1e") if r.get("backend") != "eager" else "(reference)"
            opara = ""
            if r.get("backend", "").startswith("opara"):
                c = r.get("counters") or {}
                opara = (f"FELL BACK: {r['fell_back']}" if r.get("fell_back") else
                         f"{c.get('compiles', '?')} compiles, {c.get('regions', 0)} regions, no fallback")
            lines.append(head + f"{speed:>16}{_cell(r.get('speedup_vs_eager'), '.2f'):>8}{_cell(first, '.2f'):>9}"
                         f"{_cell(cold.get(r.get('backend')), '.1f'):>8}{_cell(r.get('peak_mib'), '.0f'):>9}"
                         f"  {same:<12} {opara}".rstrip())
    return "\n".join(lines)
