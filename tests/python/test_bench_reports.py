"""opara-bench's reports as other tools read them: CSV that parses with a header and a row per
mode or node, a Chrome trace with a process per mode and a thread per stream, an SVG of the plan;
and clear failures when two reports would share stdout or Graphviz is missing."""

import csv
import io
import json
import os
import shutil
import subprocess

import pytest
import torch

import opara
from conftest import BENCH, model_file

pytestmark = pytest.mark.same_on_every_torch


def read_csv(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_run_csv_has_a_row_per_mode_with_speedups(bench):
    path = model_file("branchy", "pt")
    rows = read_csv(bench("run", "--model", path, "--modes", "eager,sequential,opara", "-n", "3", "-w", "1",
                          "--rounds", "1", "--csv", "-").stdout)
    assert [row["mode"] for row in rows] == ["eager", "sequential", "opara"]
    for row in rows:
        assert row["model"] == str(path) and row["device"] == "cpu"
        assert float(row["median_ms"]) > 0
        # Bitwise against the reference, or against eager at the worker's own intra-op thread count.
        assert "true" in (row["bitwise_equal"], row.get("bitwise_equal_eager_same_threads"))
        # In one round, each speedup is the baseline's median over the row's, as measured in this run.
        medians = {r["mode"]: float(r["median_ms"]) for r in rows}
        assert float(row["speedup_vs_eager"]) == pytest.approx(medians["eager"] / float(row["median_ms"]), rel=1e-6)
        assert float(row["speedup_vs_sequential"]) == pytest.approx(
            medians["sequential"] / float(row["median_ms"]), rel=1e-6)


def test_run_json_and_table_carry_the_speedups_and_the_versions(bench):
    result = bench("run", "--model", model_file("branchy", "pt"), "--modes", "eager,opara", "-n", "3", "-w", "1",
                   "--json", "-")
    report = json.loads(result.stdout)
    torch_release = torch.__version__.split("+")[0]
    assert f"torch {torch_release}" in report["host"]
    assert report["torch_built"] == report["torch_running"] == torch_release
    assert report["opara"] == opara.__version__
    opara_entry = next(mode for mode in report["modes"] if mode["mode"] == "opara")
    assert opara_entry["speedup_vs_sequential"] is None, "sequential did not run"
    assert opara_entry["speedup_vs_eager"] > 0
    assert "vs eager" in result.stderr and f"torch {torch_release}" in result.stderr
    assert f"built against torch {torch_release}, running torch {torch_release}" in result.stderr


def test_info_csv_is_one_row_of_the_json_figures(bench):
    path = model_file("googlenet", "pt2")
    info = json.loads(bench("info", "--model", path, "--json", "-").stdout)
    rows = read_csv(bench("info", "--model", path, "--csv", "-").stdout)
    assert len(rows) == 1
    for key in ("nodes", "edges", "width", "critical_path", "kernel_nodes"):
        assert int(rows[0][key]) == info[key]


def test_plan_csv_has_a_row_per_node_in_launch_order(bench):
    path = model_file("googlenet", "pt")
    plan = json.loads(bench("plan", "--model", path, "--json", "-").stdout)
    rows = read_csv(bench("plan", "--model", path, "--csv", "-").stdout)
    assert [int(row["node"]) for row in rows] == plan["launch_order"]
    for row in rows:
        node = int(row["node"])
        stream = plan["stream_of"][node]
        assert row["stream"] == ("host" if stream < 0 else str(stream))
        assert row["kind"] == plan["kinds"][node]
        waits = [int(w) for w in row["waits_on"].split(";") if w]
        assert waits == plan["waits"].get(str(node), [])


def test_one_stdout_report_at_a_time(bench):
    result = bench("plan", "--model", model_file("branchy", "pt"), "--json", "-", "--csv", "-", check=False)
    assert result.returncode == 2
    assert "--json - and --csv - would all write to stdout" in result.stderr
    result = bench("plan", "--model", model_file("branchy", "pt"), "--dot", "-", "--json", "-", check=False)
    assert result.returncode == 2 and "would all write to stdout" in result.stderr


def test_two_reports_to_one_file_are_refused_before_anything_runs(bench, tmp_path):
    report = tmp_path / "report.txt"
    same_file_twice = [("plan", "--json", report, "--csv", report),
                       ("run", "--json", report, "--csv", tmp_path / "." / "report.txt"),
                       ("plan", "--dot", report, "--svg", report),
                       ("plan", "--json", report, "--dot", report),
                       ("trace", "--out", report, "--csv", report)]
    for command, first, first_path, second, second_path in same_file_twice:
        result = bench(command, "--model", model_file("chain", "pt"), first, first_path, second, second_path,
                       check=False)
        assert result.returncode == 2, command
        assert f"{first} and {second} both write" in result.stderr and "a file of its own" in result.stderr
        assert not report.exists(), "refused before writing anything"


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_plan_svg_is_drawn_by_graphviz(bench, tmp_path):
    svg = tmp_path / "plan.svg"
    dot = tmp_path / "plan.dot"
    bench("plan", "--model", model_file("branchy", "pt"), "--svg", svg, "--dot", dot)
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    assert "color=red" in dot.read_text(), "event edges are drawn red"


def test_plan_svg_without_graphviz_says_how_to_get_it(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot on this PATH
    result = bench("plan", "--model", model_file("branchy", "pt"), "--svg", tmp_path / "plan.svg", check=False)
    assert result.returncode == 1
    assert "needs Graphviz's dot" in result.stderr and "apt-get install graphviz" in result.stderr


def test_trace_has_a_process_per_mode_and_a_thread_per_stream(bench, tmp_path):
    path = model_file("googlenet", "pt")
    out = tmp_path / "trace.json"
    plan = json.loads(bench("plan", "--model", path, "--json", "-").stdout)
    # --max-streams 0: every stream the plan opens, untuned, as `run --max-streams 0` times it.
    bench("trace", "--model", path, "--modes", "sequential,opara", "--out", out, "-w", "1", "--max-streams", "0")
    events = json.loads(out.read_text())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(processes.values()) == ["opara", "sequential"]
    spans = [e for e in events if e["ph"] == "X"]
    by_mode = {name: [e for e in spans if e["pid"] == pid] for pid, name in processes.items()}
    for name, mode_spans in by_mode.items():
        assert sorted(e["args"]["node"] for e in mode_spans) == list(range(plan["nodes"])), name
        assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in mode_spans)
    assert {e["tid"] for e in by_mode["sequential"]} == {0}
    opara_streams = {e["tid"] for e in by_mode["opara"]}
    assert opara_streams == set(range(plan["streams"])), "every stream of opara's plan has a row"
    for e in by_mode["opara"]:
        stream = plan["stream_of"][e["args"]["node"]]
        assert e["tid"] == max(stream, 0)


def test_trace_traces_the_schedule_compile_chose_as_run_does(bench):
    """trace compiles a planned mode as run does (streams and threads tuned unless --max-streams
    fixes them), so it traces the schedule run times, and reports it as run does (figures)."""
    path = model_file("branchy", "pt")
    plan = json.loads(bench("plan", "--model", path, "--json", "-").stdout)
    tunes = len(os.sched_getaffinity(0)) > 1
    for cap, streams in (([], None), (["--max-streams", "2"], 2), (["--max-streams", "0"], plan["streams"])):
        summary = json.loads(bench("trace", "--model", path, "--modes", "eager,opara", "--out", os.devnull, "--json",
                                   "-", *cap).stdout)
        eager, planned = summary["modes"]
        assert eager["figures"] is None and eager["lanes"] == 1
        figures = planned["figures"]
        assert planned["lanes"] == figures["streams"] and figures["streams_uncapped"] == plan["streams"], figures
        assert figures["tuned"] == (tunes and not cap), figures
        if streams is not None:
            assert figures["streams"] == streams, figures


def test_trace_csv_rows_and_bad_uses(bench, tmp_path):
    path = model_file("branchy", "pt")
    rows = read_csv(bench("trace", "--model", path, "--modes", "eager", "--out", tmp_path / "t.json", "--csv",
                          "-").stdout)
    assert len(rows) == json.loads(bench("info", "--model", path, "--json", "-").stdout)["nodes"]
    assert all(float(row["duration_us"]) >= 0 for row in rows)
    summary = json.loads(bench("trace", "--model", path, "--modes", "eager,opara", "--out", tmp_path / "t.json",
                               "--json", "-").stdout)
    assert [mode["mode"] for mode in summary["modes"]] == ["eager", "opara"]
    for mode in summary["modes"]:
        assert mode["spans"] == len(rows) and mode["run_ms"] > 0
        assert mode["concurrency"] == pytest.approx(mode["busy_ms"] / mode["run_ms"])
        # No schedule of these node times beats the bound, this one included; one at a time, it is their sum.
        workers_at_most = len(os.sched_getaffinity(0))
        assert mode["busy_ms"] / workers_at_most <= mode["bound_ms"] <= mode["run_ms"] + 1e-3
    assert summary["modes"][0]["bound_ms"] == pytest.approx(summary["modes"][0]["busy_ms"])
    both = bench("trace", "--model", path, "--out", "-", "--json", "-", check=False)
    assert both.returncode == 2 and "--out - and --json - would all write to stdout" in both.stderr
    missing_out = bench("trace", "--model", path, check=False)
    assert missing_out.returncode == 2 and "--out" in missing_out.stderr
    bad_mode = bench("trace", "--model", path, "--modes", "fastest", "--out", tmp_path / "t.json", check=False)
    assert bad_mode.returncode == 1 and "mode 'fastest' is not available" in bad_mode.stderr


def gpu_available():
    import torch
    return torch.cuda.is_available()


@pytest.mark.skipif(gpu_available(), reason="checks the message given where there is no GPU")
def test_trace_on_cuda_without_a_gpu_says_so(bench, tmp_path):
    result = bench("trace", "--model", model_file("branchy", "pt"), "--device", "cuda", "--out", tmp_path / "t.json",
                   check=False)
    assert result.returncode == 1 and "no CUDA GPU is visible" in result.stderr


@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU here: the CUPTI trace is not run")
def test_trace_on_cuda_records_every_modes_kernels(bench, tmp_path):
    out = tmp_path / "trace.json"
    bench("trace", "--model", model_file("googlenet", "pt"), "--device", "cuda", "--modes", "eager,sequential,opara",
          "--out", out)
    trace = json.loads(out.read_text())
    assert trace["otherData"]["source"] == "CUPTI kernel records"
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    kernels = {name: [e for e in events if e["ph"] == "X" and e["pid"] == pid] for pid, name in processes.items()}
    for name, spans in kernels.items():
        assert len(spans) >= 57, f"{name}: googlenet launches at least one kernel per convolution"
        rows = {}
        for span in sorted(spans, key=lambda e: e["ts"]):
            # Spans in one row never overlap: rows are packed that way.
            assert span["ts"] >= rows.get(span["tid"], 0) - 1e-3, name
            rows[span["tid"]] = span["ts"] + span["dur"]
    # One stream replays one kernel at a time; Opara's parallel graph should overlap some.
    assert len({e["tid"] for e in kernels["sequential"]}) <= 2


def test_progress_bars_are_drawn_on_a_terminal_and_never_into_a_pipe(bench):
    """On a terminal, stderr shows what the wait is for (compiling, then timing) and erases it;
    piped, stderr gets no bar at all."""
    import pty

    args = [str(BENCH), "run", "--model", str(model_file("branchy", "pt")), "--device", "cpu", "--modes",
            "eager,opara", "--iters", "20", "--rounds", "2"]
    leader, follower = pty.openpty()
    with subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=follower) as process:
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the process closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        assert process.wait(timeout=600) == 0
    os.close(leader)
    text = drawn.decode(errors="replace")
    assert "compiling opara" in text and "timing" in text and "\r" in text, text[-500:]
    piped = bench(*args[1:])
    assert "\r" not in piped.stderr and "timing" not in piped.stderr
