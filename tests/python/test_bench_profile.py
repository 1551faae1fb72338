"""opara-bench profile, full profiles read by plan and run, and the opara-noreorder mode, as a user
meets them. The profiling itself needs a GPU; everything a saved profile does runs anywhere."""

import csv
import json

import pytest

from conftest import model_file

pytestmark = pytest.mark.same_on_every_torch


def fnv1a64(path):
    """The model fingerprint a profile records: 64-bit FNV-1a over the file's bytes."""
    value = 0xCBF29CE484222325
    for byte in path.read_bytes():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"fnv1a64:{value:016x}"


def full_profile(bench, model_path, sizes):
    """A full profile in the profiler's format for `model_path`, made for one input of `sizes`."""
    kinds = json.loads(bench("plan", "--model", model_path, "--json", "-").stdout)["kinds"]
    device = {"name": "NVIDIA H100 80GB HBM3", "compute_major": 9, "compute_minor": 0, "sm_count": 132,
              "warp_size": 32, "max_threads_per_sm": 2048, "max_threads_per_block": 1024, "max_blocks_per_sm": 32,
              "registers_per_sm": 65536, "registers_per_block": 65536, "smem_per_sm": 233472,
              "smem_per_block": 49152, "smem_per_block_optin": 232448, "reserved_smem_per_block": 1024}
    nodes = [{"id": node, "kind": kind, "class": "compute" if "conv" in kind else "memory",
              "demand": 1.0 / (1 + node), "thread_fraction": 0, "register_fraction": 0, "smem_fraction": 0,
              "gpu_ns": 0, "cpu_ns": 0, "bytes_in": 0, "bytes_out": 0, "flops": None, "expects_device_work": False,
              "kernels": [], "copies": []} for node, kind in enumerate(kinds)]
    return {"format": "opara-profile", "version": 1, "device": device, "torch_version": "2.11.0",
            "cuda_runtime_version": "13.0", "cuda_driver_version": "13.0",
            "model": {"path": str(model_path), "hash": fnv1a64(model_path)},
            "inputs": [{"sizes": sizes, "dtype": "Float"}], "runs": 1, "warmup": 0, "demand_source": "cupti",
            "notes": [], "copy_bandwidth": {"h2d_bytes_per_s": 0, "d2h_bytes_per_s": 0},
            "timing": {"eager_run_ms": 0, "profiled_run_ms": 0, "overhead_ms": 0}, "nodes": nodes,
            "unattributed_kernels": [], "unattributed_copies": [], "silent_nodes": []}


def test_profile_without_a_gpu_says_so(bench, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: test_profile_on_the_gpu_writes_what_plan_reads runs instead")
    out = tmp_path / "branchy.profile.json"
    result = bench("profile", "--model", model_file("branchy", "pt"), "--out", out, check=False)
    assert result.returncode == 1
    assert "no CUDA GPU" in result.stderr and "static estimate" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["profile", "--model", "branchy"],
    ["profile", "--out", "p.json"],
    ["profile", "--model", "branchy", "--out", "p.json", "--runs", "0"],
])
def test_profile_bad_flags_exit_2(bench, args):
    result = bench(*args, check=False)
    assert result.returncode == 2, result.stderr
    assert "opara-bench:" in result.stderr


def test_plan_reads_a_full_profile_and_checks_the_model_file(bench, tmp_path):
    model = model_file("branchy", "pt")
    path = tmp_path / "branchy.profile.json"
    profile = full_profile(bench, model, [1, 3, 32, 32])
    path.write_text(json.dumps(profile))
    plan = json.loads(bench("plan", "--model", model, "--profile", path, "--check", "--json", "-").stdout)
    assert plan["cost_source"] == "profile" and plan["valid"] is True

    profile["model"]["hash"] = "fnv1a64:0000000000000000"
    path.write_text(json.dumps(profile))
    refused = bench("plan", "--model", model, "--profile", path, check=False)
    assert refused.returncode == 1
    assert str(path) in refused.stderr and "model: the profile is of a model file" in refused.stderr
    assert "--allow-profile-mismatch" in refused.stderr
    allowed = bench("plan", "--model", model, "--profile", path, "--allow-profile-mismatch", "--json", "-")
    assert json.loads(allowed.stdout)["cost_source"] == "profile"
    assert "model: the profile is of a model file" in allowed.stderr  # the warning


def test_a_profile_of_other_input_shapes_is_refused(bench, tmp_path):
    model = model_file("branchy", "pt")
    path = tmp_path / "branchy.profile.json"
    path.write_text(json.dumps(full_profile(bench, model, [1, 3, 32, 32])))
    result = bench("plan", "--model", model, "--profile", path, "--input-shape", "x:4x3x32x32", check=False)
    assert result.returncode == 1
    assert "input shapes: the profile was made for Float[1x3x32x32], the inputs are Float[4x3x32x32]" in result.stderr
    run = bench("run", "--model", model, "--profile", path, "--modes", "opara", "--batch", "4", "--iters", "1",
                check=False)
    assert run.returncode == 1 and "input shapes" in run.stderr


def test_run_opara_noreorder_is_opara_streams_in_program_order(bench, tmp_path):
    report = json.loads(bench("run", "--model", model_file("branchy", "pt"), "--modes",
                              "eager,opara,opara-noreorder", "--max-streams", "0", "--threads", "1", "--iters", "2",
                              "--json", "-").stdout)
    modes = {mode["mode"]: mode for mode in report["modes"]}
    assert set(modes) == {"eager", "opara", "opara-noreorder"}
    assert modes["opara-noreorder"]["streams"] == modes["opara"]["streams"] > 1
    for mode in modes.values():
        assert mode["bitwise_equal"] is True or mode["bitwise_equal_eager_same_threads"] is True, mode
    # The launch order is the one thing that differs: program order.
    assert modes["opara"]["stream_policy"] == modes["opara-noreorder"]["stream_policy"] == "opara"
    assert (modes["opara"]["order_policy"], modes["opara-noreorder"]["order_policy"]) == ("opara", "topological")
    topological = json.loads(bench("plan", "--model", model_file("branchy", "pt"), "--order", "topological",
                                   "--json", "-").stdout)
    assert topological["launch_order"] == sorted(topological["launch_order"])


def test_profile_on_the_gpu_writes_what_plan_reads(bench, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here: the GPU path is not run")
    model = model_file("branchy", "pt")
    out = tmp_path / "branchy.profile.json"
    rows_csv = tmp_path / "rows.csv"
    result = bench("profile", "--model", model, "--out", out, "--runs", "3", "--require-cupti", "--json", "-",
                   "--csv", rows_csv)
    assert "wrote" in result.stderr  # the table moves to stderr when a report takes stdout
    summary = json.loads(result.stdout)
    profile = json.loads(out.read_text())
    assert summary["nodes"] == len(profile["nodes"]) and summary["demand_source"] == "cupti"
    assert summary["kernels"] == sum(len(node["kernels"]) for node in profile["nodes"])
    rows = list(csv.DictReader(rows_csv.read_text().splitlines()))
    assert [int(row["node"]) for row in rows] == list(range(len(profile["nodes"])))
    assert profile["format"] == "opara-profile" and profile["demand_source"] == "cupti"
    assert profile["model"]["hash"] == fnv1a64(model)
    assert profile["unattributed_kernels"] == [] and profile["silent_nodes"] == []
    assert all(0 < node["demand"] <= 1 for node in profile["nodes"] if node["kernels"])
    plan = json.loads(bench("plan", "--model", model, "--profile", out, "--check", "--json", "-").stdout)
    assert plan["cost_source"] == "profile" and plan["valid"] is True
    run = json.loads(bench("run", "--model", model, "--device", "cuda", "--profile", out, "--modes",
                           "opara,opara-noreorder", "--iters", "20", "--json", "-").stdout)
    assert {mode["mode"] for mode in run["modes"]} == {"opara", "opara-noreorder"}
