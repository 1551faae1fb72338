"""opara-bench plan --overflow as a user meets it: the placement and segments of each policy, the
predicted times from a full profile, and clear failures for missing or bad flags."""

import json

import pytest

from conftest import model_file
from test_bench_profile import full_profile

pytestmark = pytest.mark.same_on_every_torch


def timed_profile(bench, model):
    """A full profile of branchy whose convolutions are slow on the CPU and everything else cheap."""
    profile = full_profile(bench, model, [1, 3, 32, 32])
    for node in profile["nodes"]:
        conv = "conv" in node["kind"]
        node.update(gpu_ns=20_000 if conv else 10_000, cpu_ns=5_000_000 if conv else 2_000,
                    bytes_in=4096, bytes_out=4096)
    profile["copy_bandwidth"] = {"h2d_bytes_per_s": 1e10, "d2h_bytes_per_s": 1e10}
    return profile


def overflow_of(bench, *args):
    return json.loads(bench("plan", *args, "--json", "-").stdout)["overflow"]


def test_none_keeps_every_node_on_the_gpu_in_one_segment(bench):
    report = overflow_of(bench, "--model", model_file("branchy", "pt"), "--overflow", "none")
    assert set(report["placement"]) == {"gpu"}
    assert report["cpu_nodes"] == [] and report["host_nodes"] == []
    assert [segment["kind"] for segment in report["segments"]] == ["graph"]


def test_comm_sd_moves_cheap_nodes_and_predicts_no_slowdown(bench, tmp_path):
    model = model_file("branchy", "pt")
    path = tmp_path / "branchy.profile.json"
    path.write_text(json.dumps(timed_profile(bench, model)))
    plan = json.loads(bench("plan", "--model", model, "--profile", path, "--overflow", "comm_sd", "--alpha-us", "50",
                            "--json", "-").stdout)
    report = plan["overflow"]
    assert report["policy"] == "comm_sd" and report["alpha_us"] == 50
    assert len(report["placement"]) == plan["nodes"]
    for node, (kind, place) in enumerate(zip(plan["kinds"], report["placement"])):
        if "conv" in kind:
            assert place == "gpu", f"node {node} ({kind}) is 250x slower on the CPU"
    assert report["converged"] is True and report["iterations"] >= 1
    assert report["moves_kept"] <= report["moves_tried"]
    assert report["predicted_us"] <= report["predicted_none_us"]
    assert sum(len(segment["nodes"]) for segment in report["segments"]) == plan["nodes"]
    text = bench("plan", "--model", model, "--profile", path, "--overflow", "comm_sd").stdout
    assert "predicted      none" in text and "segments" in text


def test_manual_names_nodes_by_kind_and_id(bench, tmp_path):
    model = model_file("branchy", "pt")
    kinds = json.loads(bench("plan", "--model", model, "--json", "-").stdout)["kinds"]
    report = overflow_of(bench, "--model", model, "--overflow", "manual", "--cpu-nodes", "aten::relu,0")
    expected = [node for node, kind in enumerate(kinds) if kind == "aten::relu" or node == 0]
    assert report["cpu_nodes"] == expected
    kinds_file = tmp_path / "cpu.json"
    kinds_file.write_text(json.dumps({"cpu": [0, "aten::relu"]}))
    assert overflow_of(bench, "--model", model, "--overflow", "manual", "--cpu-nodes", kinds_file)["cpu_nodes"] == \
        expected
    unknown = bench("plan", "--model", model, "--overflow", "manual", "--cpu-nodes", "aten::rleu,99999", check=False)
    assert unknown.returncode == 1
    assert "aten::rleu, 99999" in unknown.stderr and "opara-bench info" in unknown.stderr


def test_detect_puts_its_nms_on_the_host(bench):
    report = overflow_of(bench, "--model", model_file("detect", "pt"), "--overflow", "none")
    assert report["host_nodes"], "nonzero cannot be captured"
    assert [segment["kind"] for segment in report["segments"]][:3] == ["graph", "host", "graph"]


def test_comm_sd_needs_a_full_profile(bench, tmp_path):
    model = model_file("branchy", "pt")
    missing = bench("plan", "--model", model, "--overflow", "comm_sd", check=False)
    assert missing.returncode == 2 and "--profile" in missing.stderr
    kinds = json.loads(bench("plan", "--model", model, "--json", "-").stdout)["kinds"]
    minimal = tmp_path / "minimal.json"
    minimal.write_text(json.dumps({"nodes": [{"id": node, "kind": kind, "class": "memory", "demand": 1.0}
                                             for node, kind in enumerate(kinds)]}))
    result = bench("plan", "--model", model, "--profile", minimal, "--overflow", "comm_sd", check=False)
    assert result.returncode == 1 and "full profile" in result.stderr


@pytest.mark.parametrize("args", [
    ["--overflow", "sd"],
    ["--overflow", "comm_sd", "--alpha-us", "-1"],
    ["--alpha-us", "10"],
    ["--cpu-nodes", "0"],
    ["--overflow", "manual"],
    ["--overflow", "none", "--cpu-nodes", "0"],
])
def test_plan_overflow_bad_flags_exit_2(bench, args):
    result = bench("plan", "--model", "branchy", *args, check=False)
    assert result.returncode == 2, result.stderr
    assert "opara-bench:" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--modes", "opara", "--overflow", "manual", "--cpu-nodes", "0"], "only go with --modes ...,opara+overflow"),
    (["--modes", "opara", "--alpha-us", "5"], "only go with --modes ...,opara+overflow"),
    (["--device", "cuda", "--modes", "opara+overflow"], "needs --profile"),
    (["--device", "cuda", "--modes", "opara+overflow", "--overflow", "manual"], "needs --cpu-nodes"),
    (["--device", "cuda", "--modes", "opara+overflow", "--overflow", "none", "--cpu-nodes", "0"],
     "only goes with --overflow manual"),
])
def test_run_overflow_bad_flags_exit_2(bench, args, message):
    result = bench("run", "--model", "branchy", *args, check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_run_overflow_mode_on_the_cpu_says_it_needs_a_gpu(bench):
    result = bench("run", "--model", "branchy", "--modes", "opara+overflow", "--overflow", "manual",
                   "--cpu-nodes", "aten::relu", check=False)
    assert result.returncode == 1
    assert "opara+overflow needs --device cuda" in result.stderr


def test_plan_shows_cpu_nodes_taken_back_for_in_place_writes_and_the_overlap(bench):
    model = model_file("inplace", "pt")
    report = overflow_of(bench, "--model", model, "--overflow", "manual", "--cpu-nodes",
                         "aten::mul,aten::add_,aten::sum,aten::relu_")
    kinds = json.loads(bench("plan", "--model", model, "--json", "-").stdout)["kinds"]
    assert report["taken_back"], "relu_ and add_ write memory the GPU side reads"
    assert all(kinds[node] in ("aten::relu_", "aten::add_") for node in report["taken_back"])
    assert not set(report["taken_back"]) & set(report["cpu_nodes"])
    segments = report["segments"]
    assert any(segment["on_cpu"] for segment in segments)
    for index, segment in enumerate(segments):
        if segment["during_next_host_step"]:
            assert segment["kind"] == "graph" and segments[index + 1]["kind"] == "host"
    text = bench("plan", "--model", model, "--overflow", "manual", "--cpu-nodes", "aten::relu_").stdout
    assert "aliasing" in text and "back on the GPU" in text
