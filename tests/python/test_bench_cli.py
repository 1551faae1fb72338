"""opara-bench as a user meets it: info and run on every model in both formats, JSON that
parses with the documented keys, and clear failures for bad flags and bad files."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import ALL_MODELS, BENCH, MODELS, model_file

pytestmark = pytest.mark.same_on_every_torch

INFO_KEYS = {"model", "format", "import_ms", "inputs", "state_buffers", "outputs", "nodes", "kernel_nodes", "edges", "data_edges",
             "ordering_edges", "reduced_edges", "inplace_nodes", "not_capturable_nodes", "width", "critical_path",
             "op_kinds"}


@pytest.mark.parametrize("extension", ["pt", "pt2"])
@pytest.mark.parametrize("name", ALL_MODELS)
def test_info_describes_the_graph(bench, name, extension):
    info = json.loads(bench("info", "--model", model_file(name, extension), "--json", "-").stdout)
    assert INFO_KEYS <= info.keys()
    assert info["format"] == ("torchscript" if extension == "pt" else "export")
    assert info["edges"] == info["data_edges"] + info["ordering_edges"]
    assert 1 <= info["width"] <= info["nodes"]
    assert 1 <= info["critical_path"] <= info["nodes"]
    assert info["reduced_edges"] <= info["edges"]
    assert sum(info["op_kinds"].values()) == info["nodes"]


def test_chain_has_no_parallelism_and_branchy_has_some(bench):
    for extension in ("pt", "pt2"):
        chain = json.loads(bench("info", "--model", model_file("chain", extension), "--json", "-").stdout)
        branchy = json.loads(bench("info", "--model", model_file("branchy", extension), "--json", "-").stdout)
        assert chain["width"] == 1
        assert branchy["width"] >= 4


def test_inplace_model_gets_ordering_edges(bench):
    for extension in ("pt", "pt2"):
        info = json.loads(bench("info", "--model", model_file("inplace", extension), "--json", "-").stdout)
        assert info["inplace_nodes"] >= 5
        assert info["ordering_edges"] > 0


@pytest.mark.parametrize("extension", ["pt", "pt2"])
@pytest.mark.parametrize("name", ALL_MODELS)
def test_run_on_cpu_matches_the_model_bitwise(bench, name, extension, tmp_path):
    report = tmp_path / "run.json"
    result = bench("run", "--model", model_file(name, extension), "--device", "cpu", "--modes", "eager",
                   "--iters", "2", "--warmup", "1", "--json", report)
    run = json.loads(report.read_text())
    assert run["device"] == "cpu"
    (mode,) = run["modes"]
    assert mode["mode"] == "eager"
    assert mode["bitwise_equal"] is True
    assert mode["max_abs_diff"] == 0
    assert 0 < mode["median_ms"] <= mode["p90_ms"]
    assert "eager" in result.stdout


def test_run_with_input_shape_compares_against_the_live_forward(bench):
    result = bench("run", "--model", model_file("chain", "pt"), "--input-shape", "x:2x3x32x32", "--iters", "1",
                   "--json", "-")
    (mode,) = json.loads(result.stdout)["modes"]
    assert mode["bitwise_equal"] is True


def test_model_name_resolves_in_the_models_folder(bench):
    result = bench("info", "--model", "inplace")
    assert "inplace_b1.pt" in result.stdout


@pytest.mark.parametrize("name, dtype", [("branchy", "bfloat16"), ("recurrent", "float16")])
def test_dtype_runs_the_models_half_precision_export(bench, name, dtype):
    model_file(f"{name}_{dtype}", "pt")  # skips unless scripts/test.sh exported it
    report = json.loads(bench("run", "--model", name, "--dtype", dtype, "--device", "cpu", "--modes",
                              "eager,opara", "--iters", "2", "--warmup", "1", "--json", "-").stdout)
    assert report["dtype"] == dtype
    assert report["model"].endswith(f"{name}_{dtype}_b1.pt")
    modes = {mode["mode"]: mode for mode in report["modes"]}
    assert modes["eager"]["bitwise_equal"] is True
    assert modes["opara"]["bitwise_equal"] is True or modes["opara"]["bitwise_equal_eager_same_threads"] is True
    plan = json.loads(bench("plan", "--model", name, "--dtype", dtype, "--json", "-").stdout)
    assert plan["nodes"] > 0


def test_dtype_converts_nothing_and_says_how_to_export(bench):
    path = model_file("branchy", "pt")
    result = bench("run", "--model", path, "--dtype", "float16", "--device", "cpu", check=False)
    assert result.returncode == 1
    assert str(path) in result.stderr and "exported in float32" in result.stderr
    assert "scripts/export_models.py --models branchy --dtype float16" in result.stderr
    # A name whose export in that dtype is missing: the command that makes it.
    if not (MODELS / "chain_bfloat16_b1.pt").exists():
        result = bench("info", "--model", "chain", "--dtype", "bfloat16", check=False)
        assert result.returncode == 1
        assert "chain_bfloat16_b1.pt" in result.stderr and "--models chain --dtype bfloat16" in result.stderr
    result = bench("info", "--model", "chain", "--dtype", "float64", check=False)
    assert result.returncode == 2 and "--dtype" in result.stderr


@pytest.mark.parametrize("args", [
    ["info", "--model", "x.pt", "--no-such-flag"],
    ["run", "--model", "x.pt", "--iters", "zero"],
    ["run", "--model", "x.pt", "--iters", "-3"],
    ["run", "--model", "x.pt", "--device", "tpu"],
    ["info"],
    ["frobnicate"],
    [],
])
def test_bad_flags_exit_2_with_a_message(bench, args):
    result = bench(*args, check=False)
    assert result.returncode == 2
    assert "opara-bench:" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["frobnicate"], "unknown subcommand 'frobnicate'; the subcommands are info, plan, profile, run, trace"),
    (["plan", "--model", "x.pt", "--max-streams", "-1"], "--max-streams: must be 0 or more, not -1"),
    (["run", "--model", "x.pt", "--iters", "0"], "--iters: must be positive, not 0"),
    (["run", "--model", "x.pt", "--seed", "-1"], "--seed: must be 0 or more, not -1"),
])
def test_bad_values_are_named_in_a_few_words(bench, args, message):
    result = bench(*args, check=False)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr) < 200


@pytest.mark.parametrize("subcommand", ["info", "plan", "profile", "run", "trace"])
def test_help_for_every_subcommand(bench, subcommand):
    result = bench(subcommand, "--help")
    assert "--model" in result.stdout
    assert "--json" in result.stdout and "--csv" in result.stdout


def test_version_names_the_torch_built_against_and_the_one_running(bench):
    import torch
    release = torch.__version__.split("+")[0]
    result = bench("--version")
    assert result.stdout.strip() == f"opara 0.1.0, built against torch {release}, running torch {release}"


def test_bad_files_fail_with_the_file_named(bench, tmp_path):
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(bytes(range(256)) * 8)
    for path, text in [(tmp_path / "missing.pt", "no such file"), (tmp_path, "is a directory"),
                       (empty, "empty"), (junk, "not a PyTorch model archive")]:
        result = bench("info", "--model", path, check=False)
        assert result.returncode == 1, result.stderr
        assert str(path) in result.stderr and text in result.stderr


def test_unknown_mode_is_refused(bench):
    result = bench("run", "--model", model_file("chain", "pt"), "--modes", "warp", check=False)
    assert result.returncode == 1
    assert "mode 'warp'" in result.stderr


def test_cuda_without_a_gpu_says_so(bench):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the CUDA path is tested elsewhere")
    result = bench("run", "--model", model_file("chain", "pt"), "--device", "cuda", check=False)
    assert result.returncode == 1
    assert "no CUDA GPU" in result.stderr


def test_info_writes_the_graph_as_dot(bench, tmp_path):
    dot = tmp_path / "inplace.dot"
    bench("info", "--model", model_file("inplace", "pt2"), "--dot", dot)
    text = dot.read_text()
    assert text.startswith("digraph")
    assert "[style=dashed]" in text  # the ordering edges of the in-place writes
    assert "aten::relu_" in text


PLAN_KEYS = {"nodes", "streams", "events", "events_unreduced", "launch_order", "stream_of", "plan_us", "waits",
             "records", "stream_policy", "order_policy", "nodes_per_stream", "valid"}


@pytest.mark.parametrize("allocator", ["opara", "opara-unhanded", "nimble", "single", "trtllm", "torchsched"])
@pytest.mark.parametrize("name", ["googlenet", "inception_v3", "bert_base", "t5_small", "inplace"])
def test_plan_checks_and_reports_the_documented_keys(bench, name, allocator):
    plan = json.loads(bench("plan", "--model", name, "--allocator", allocator, "--check", "--json", "-").stdout)
    assert PLAN_KEYS <= plan.keys()
    assert plan["valid"] is True and plan["problems"] == []
    assert sorted(plan["launch_order"]) == list(range(plan["nodes"]))
    assert len(plan["stream_of"]) == plan["nodes"]
    assert plan["events"] <= plan["events_unreduced"]
    assert sum(plan["nodes_per_stream"]) == plan["kernels"]
    assert plan["plan_us"] > 0
    if allocator == "single":
        assert plan["streams"] == 1 and plan["events"] == 0


def test_plan_options_change_the_plan(bench, tmp_path):
    capped = json.loads(bench("plan", "--model", "googlenet", "--max-streams", "3", "--json", "-").stdout)
    assert capped["streams"] <= 3
    paper = json.loads(bench("plan", "--model", "googlenet", "--json", "-").stdout)
    assert paper["streams"] == 28  # nine inception modules: 1 + 9 * 3, as the Opara paper reports
    topological = json.loads(bench("plan", "--model", "googlenet", "--order", "topological", "--json", "-").stdout)
    assert topological["launch_order"] == sorted(topological["launch_order"])
    dot = tmp_path / "plan.dot"
    bench("plan", "--model", "inplace", "--dot", dot)
    assert "stream 0" in dot.read_text() and "color=red" in dot.read_text()


def test_plan_estimates_the_cuda_pool_and_the_cap_its_budget_asks(bench):
    """The pool estimate needs no GPU: branchy's 14 streams each take a 2 MiB segment of their own,
    which the default budget's 64 MiB of headroom allows and a bare 1.3x does not."""
    def estimate(*flags):
        report = json.loads(bench("plan", "--model", model_file("branchy", "pt"), *flags, "--json", "-").stdout)
        return report["pool_estimate"]

    default = estimate()
    assert default["sequential_bytes"] > 0 and default["bytes"] > default["sequential_bytes"]
    assert default["keep_alive_bytes"] >= default["peak_live_bytes"] > 0
    # The budget is of what the sequential graph holds: its pool and its cuBLAS workspace (Hopper's
    # 32 MiB where a stream runs a product; branchy's convolutions run none).
    held = default["sequential_bytes"] + default["sequential_workspace_bytes"]
    assert default["budget_bytes"] == max(-(-13 * held // 10), held + (64 << 20))
    assert default["workspace_bytes"] % (32 << 20) == 0
    assert default["budget_stream_cap"] == 0, "the plan fits the default budget"
    bare = estimate("--memory-budget", "1.3x+0")
    assert bare["budget_stream_cap"] == 1 and bare["budget_bytes"] < default["budget_bytes"]
    single = estimate("--allocator", "single")
    assert single["bytes"] == single["sequential_bytes"] == default["sequential_bytes"]
    refused = bench("plan", "--model", model_file("branchy", "pt"), "--memory-budget", "1.3x+lots", check=False)
    assert refused.returncode == 2 and "a ratio to the sequential graph's pool" in refused.stderr


def test_plan_says_why_it_has_its_streams(bench):
    """bert_base's single cheap ops (masks, biases) fork and join streams whose work cannot pay for
    their two event pairs: compile() on a GPU merges them, and `plan` counts them; `--payoff none`
    keeps every stream the policy opens; the cap's merges are counted apart."""
    def plan(*flags):
        return json.loads(bench("plan", "--model", model_file("bert_base", "pt"), *flags, "--json", "-").stdout)

    paid = plan()
    assert paid["streams_unpaying"] > 0 and paid["streams_capped"] == 0
    assert paid["streams"] == paid["streams_opened"] - paid["streams_unpaying"]
    every = plan("--payoff", "none")
    assert every["streams"] == every["streams_opened"] == paid["streams_opened"] and every["streams_unpaying"] == 0
    assert every["pool_estimate"]["bytes"] > paid["pool_estimate"]["bytes"], "fewer streams, fewer segments"
    capped = plan("--max-streams", "4")
    assert capped["streams"] == 4 and capped["streams_capped"] == paid["streams"] - 4


def test_plan_uses_a_recorded_profile_and_rejects_a_foreign_one(bench, tmp_path):
    kinds = json.loads(bench("plan", "--model", "branchy", "--json", "-").stdout)["kinds"]
    # A profile in the profiler's format: every node with its kind, class and demand.
    profile = {"nodes": [{"id": node, "kind": kind, "class": "compute" if "conv" in kind else "memory",
                          "demand": float(len(kinds) - node)} for node, kind in enumerate(kinds)]}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    plan = json.loads(bench("plan", "--model", "branchy", "--profile", path, "--check", "--json", "-").stdout)
    assert plan["cost_source"] == "profile" and plan["valid"] is True
    profile["nodes"][0]["kind"] = "aten::not_this_op"
    path.write_text(json.dumps(profile))
    result = bench("plan", "--model", "branchy", "--profile", path, check=False)
    assert result.returncode == 1
    assert "node 0" in result.stderr and str(path) in result.stderr


@pytest.mark.parametrize("args", [
    ["plan", "--model", "googlenet", "--allocator", "greedy"],
    ["plan", "--model", "googlenet", "--order", "random"],
    ["plan", "--model", "googlenet", "--max-streams", "-1"],
    ["plan", "--model", "googlenet", "--ridge", "0"],
    ["plan"],
])
def test_plan_bad_flags_exit_2(bench, args):
    result = bench(*args, check=False)
    assert result.returncode == 2, result.stderr
    assert "opara-bench:" in result.stderr


@pytest.mark.parametrize("extension", ["pt", "pt2"])
@pytest.mark.parametrize("name", ["branchy", "inplace", "googlenet"])
def test_run_cpu_planned_modes_match_the_model_bitwise(bench, name, extension):
    report = json.loads(bench("run", "--model", model_file(name, extension), "--device", "cpu", "--modes",
                              "eager,sequential,nimble,opara", "--iters", "2", "--warmup", "1", "--json", "-").stdout)
    modes = {mode["mode"]: mode for mode in report["modes"]}
    assert set(modes) == {"eager", "sequential", "nimble", "opara"}
    assert modes["eager"]["bitwise_equal"] is True
    for mode in modes.values():
        # A worker with fewer intra-op threads than the reference had may differ in a reduction's
        # last bits; it must then equal eager run with its own thread count, bit for bit.
        assert mode["bitwise_equal"] is True or mode["bitwise_equal_eager_same_threads"] is True, mode
        assert mode["max_abs_diff"] < 1e-5
    assert modes["sequential"]["streams"] == 1
    assert modes["opara"]["streams_uncapped"] >= modes["opara"]["streams"] >= 1


def test_a_bad_memory_budget_is_refused_naming_what_it_takes(bench):
    for budget in ("lots", "0x", "-1GB"):
        result = bench("run", "--model", "chain", "--device", "cpu", "--memory-budget", budget, check=False)
        assert result.returncode != 0, budget
        assert "--memory-budget" in result.stderr and "a ratio to the sequential graph's pool" in result.stderr, (
            budget, result.stderr)


def test_a_tuned_run_reports_the_candidates_it_timed(bench):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU: nothing to tune")
    report = json.loads(bench("run", "--model", "branchy", "--modes", "opara", "--iters", "2", "--json", "-").stdout)
    (mode,) = report["modes"]
    assert mode["tuned"] is True
    candidates = mode["tuning"]
    assert len(candidates) >= 2
    assert {"max_streams", "intra_op_threads", "streams", "median_ms", "speedup", "chosen"} <= candidates[0].keys()
    assert candidates[0]["streams"] == 1 and candidates[0]["speedup"] == 1.0, "eager's schedule comes first"
    (chosen,) = [c for c in candidates if c["chosen"]]
    assert (chosen["streams"], chosen["intra_op_threads"]) == (mode["streams"], mode["intra_op_threads"])


def test_run_with_a_fixed_stream_cap_and_threads(bench):
    report = json.loads(bench("run", "--model", "branchy", "--modes", "opara", "--max-streams", "0", "--threads", "1",
                              "--iters", "2", "--json", "-").stdout)
    (mode,) = report["modes"]
    assert mode["tuned"] is False
    assert mode["streams"] == mode["streams_uncapped"] > 1
    assert mode["intra_op_threads"] == 1
    assert mode["bitwise_equal"] is True or mode["bitwise_equal_eager_same_threads"] is True


def test_run_times_the_modes_in_interleaved_rounds(bench):
    report = json.loads(bench("run", "--model", "branchy", "--modes", "eager,sequential,opara", "--iters", "7",
                              "--rounds", "3", "--json", "-").stdout)
    assert report["rounds"] == 3
    modes = {mode["mode"]: mode for mode in report["modes"]}
    # Each speedup is taken within a round, where the machine was the same for every mode; the
    # reported one is their median.
    assert modes["eager"]["speedup_vs_eager_by_round"] == [1.0, 1.0, 1.0]
    for name in ("sequential", "opara"):
        by_round = modes[name]["speedup_vs_eager_by_round"]
        assert len(by_round) == 3 and all(ratio > 0 for ratio in by_round)
        assert modes[name]["speedup_vs_eager"] == sorted(by_round)[1]
    for mode in modes.values():  # every timed run, and the median is theirs
        samples = mode["samples_ms"]
        assert len(samples) == 7 and all(ms > 0 for ms in samples)
        assert mode["median_ms"] == sorted(samples)[3]


def test_run_never_has_more_rounds_than_iterations(bench):
    result = bench("run", "--model", "chain", "--modes", "eager,opara", "--iters", "2", "--rounds", "9", "--json", "-")
    report = json.loads(result.stdout)
    assert report["rounds"] == 2
    assert all(len(mode["speedup_vs_eager_by_round"]) == 2 for mode in report["modes"])


def test_rounds_are_refused_on_the_gpu_and_when_not_positive(bench):
    on_gpu = bench("run", "--model", "chain", "--device", "cuda", "--rounds", "3", check=False)
    assert on_gpu.returncode == 2 and "--rounds" in on_gpu.stderr and "CPU" in on_gpu.stderr
    zero = bench("run", "--model", "chain", "--rounds", "0", check=False)
    assert zero.returncode == 2 and "--rounds" in zero.stderr


# What every mode of `run` reports on either device (null where a device does not measure it), and
# what every planned mode adds: scripts/gpu_check/report.py and docs/json.md read these.
RUN_MODE_KEYS = {"mode", "median_ms", "p10_ms", "p90_ms", "samples_ms", "speedup_vs_sequential", "speedup_vs_eager",
                 "speedup_vs_nimble", "speedup_vs_eager_by_round", "max_abs_diff", "max_rel_diff", "bitwise_equal",
                 "bitwise_equal_eager_same_threads", "peak_bytes", "peak_vs_sequential", "run_peak_bytes",
                 "run_peak_vs_sequential", "peak_live_values"}
PLANNED_MODE_KEYS = {"streams", "streams_uncapped", "events", "segments", "compile_ms", "plan_us", "pool_bytes",
                     "memory", "stream_policy", "order_policy", "cost_source", "tuned", "priorities"}


def test_cpu_modes_report_the_keys_the_gpu_reports(bench):
    report = json.loads(bench("run", "--model", "branchy", "--modes", "eager,sequential,nimble,opara", "--iters", "3",
                              "--rounds", "3", "--json", "-").stdout)
    modes = {mode["mode"]: mode for mode in report["modes"]}
    for name, mode in modes.items():
        assert RUN_MODE_KEYS <= mode.keys(), (name, RUN_MODE_KEYS - mode.keys())
        assert (name == "eager") != (PLANNED_MODE_KEYS <= mode.keys()), name
        assert mode["peak_bytes"] is None and mode["peak_vs_sequential"] is None, "the CPU does not measure memory"
        assert mode["run_peak_bytes"] is None and mode["run_peak_vs_sequential"] is None
        assert (mode["max_rel_diff"] == 0) == (mode["max_abs_diff"] == 0), "both against the reference"
    assert modes["nimble"]["speedup_vs_nimble"] == 1.0
    assert modes["eager"]["peak_live_values"] > 0 and modes["opara"]["peak_live_values"] is None
    assert report["rounds"] == 3


def test_planned_modes_on_cuda_without_a_gpu_say_so(bench):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: test_cuda_modes_report_the_documented_keys runs instead")
    result = bench("run", "--model", "chain", "--device", "cuda", "--modes", "eager,sequential,nimble,opara",
                   check=False)
    assert result.returncode == 1
    assert "no CUDA GPU" in result.stderr and "--device cpu" in result.stderr


def test_cuda_modes_report_the_documented_keys(bench):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here: the GPU path is not run")
    report = json.loads(bench("run", "--model", "branchy", "--device", "cuda", "--modes",
                              "eager,sequential,nimble,opara", "--iters", "20", "--json", "-").stdout)
    modes = {mode["mode"]: mode for mode in report["modes"]}
    assert set(modes) == {"eager", "sequential", "nimble", "opara"}
    for mode in modes.values():
        for key in ("median_ms", "p10_ms", "p90_ms", "speedup_vs_sequential", "speedup_vs_eager", "max_abs_diff",
                    "max_rel_diff", "peak_bytes", "speedup_vs_nimble", "peak_vs_sequential"):
            assert key in mode, key
        assert RUN_MODE_KEYS <= mode.keys(), RUN_MODE_KEYS - mode.keys()
        assert (mode["mode"] == "eager") != (PLANNED_MODE_KEYS <= mode.keys()), mode["mode"]
        assert mode["max_abs_diff"] < 1e-3
    assert report["rounds"] == 1
    assert report["dtype"] == "float32"
    assert modes["sequential"]["streams"] == 1
    opara = modes["opara"]
    # The plan's streams were capped until its pool estimate fitted the default budget (1.3 times
    # the sequential graph's estimate, 64 MiB more at least); the pool measured keeps to the same
    # budget of the sequential graph's measured pool.
    assert opara["pool_estimate_bytes"] > 0 and opara["sequential_pool_estimate_bytes"] > 0
    sequential = modes["sequential"]["pool_bytes"]
    assert opara["pool_bytes"] <= max(1.3 * sequential, sequential + (64 << 20))
    cap = opara["budget_stream_cap"]
    if cap == 1:
        assert opara["streams"] == 1 and "candidates" not in opara, "one stream left: nothing to measure"
        return
    # compile() measured one stream, a cap and the plan within the budget, and kept one: the mode
    # runs its graphs.
    candidates = opara["candidates"]
    assert [candidate["max_streams"] for candidate in candidates][0] == 1 and candidates[-1]["max_streams"] == cap
    assert opara["streams_uncapped"] >= candidates[-1]["streams"] > 1
    (kept,) = [candidate for candidate in candidates if candidate["chosen"]]
    assert kept["streams"] == opara["streams"] and not kept["over_budget"]
    assert kept is candidates[0] or kept["speedup"] >= 1.03
    assert all(candidate["pool_estimate_bytes"] > 0 for candidate in candidates)
    assert "candidates" not in modes["sequential"], "one stream: nothing to measure"
    assert modes["sequential"]["peak_vs_sequential"] == 1.0 and modes["nimble"]["speedup_vs_nimble"] == 1.0
    for mode in modes.values():  # serving's peak holds the model's memory and is within the whole peak
        assert 0 < mode["run_peak_bytes"] <= mode["peak_bytes"], mode["mode"]
    for name in ("sequential", "nimble", "opara"):
        assert {"memory", "stream_policy", "order_policy", "pool_bytes"} <= modes[name].keys()
        assert modes[name]["memory"] == "record-stream"
    assert (modes["opara"]["stream_policy"], modes["opara"]["order_policy"]) == ("opara", "opara")
    # Both protections captured, the smaller pool kept, both pools reported.
    smaller = json.loads(bench("run", "--model", "branchy", "--device", "cuda", "--modes", "opara", "--memory",
                               "smaller-pool", "--iters", "5", "--json", "-").stdout)
    (opara,) = smaller["modes"]
    assert opara["memory"] in ("record-stream", "keep-alive")
    assert opara["pool_bytes"] == min(opara["pool_bytes_record_stream"], opara["pool_bytes_keep_alive"])
    assert isinstance(report["tf32_cudnn"], bool) and isinstance(report["tf32_cublas"], bool)


def test_run_with_a_batch_size_uses_random_inputs_of_that_batch(bench):
    report = json.loads(bench("run", "--model", "branchy", "--modes", "eager,opara", "--batch", "3", "--iters", "2",
                              "--json", "-").stdout)
    assert "random inputs" in report["inputs"]
    for mode in report["modes"]:
        assert mode["max_abs_diff"] < 1e-5


@pytest.mark.parametrize("args", [
    ["--memory", "forever"],
    ["--batch", "0"],
])
def test_run_cuda_flags_are_checked(bench, args):
    result = bench("run", "--model", "branchy", *args, check=False)
    assert result.returncode == 2
    assert "opara-bench:" in result.stderr


def with_model_files(args):
    """The arguments with the model's name after --model made its file (skipped when not exported)."""
    return [model_file(arg, "pt") if previous == "--model" else arg for previous, arg in zip([None, *args], args)]


@pytest.mark.parametrize("args, message", [
    (["run", "--model", "branchy", "--modes", "eager,opara,eager"], "--modes: lists eager twice"),
    (["trace", "--model", "branchy", "--modes", "opara,opara", "--out", "t.json"], "--modes: lists opara twice"),
    (["run", "--model", "branchy", "--threads", "100000"], "--threads: must be at most"),
])
def test_repeated_modes_and_too_many_threads_are_usage_errors(bench, args, message):
    result = bench(*with_model_files(args), check=False)
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full to fill a disk")
@pytest.mark.parametrize("args", [
    ["info", "--model", "branchy", "--json", "/dev/full"],
    ["info", "--model", "branchy", "--dot", "/dev/full"],
    ["plan", "--model", "branchy", "--json", "/dev/full"],
    ["plan", "--model", "branchy", "--csv", "/dev/full"],
    ["run", "--model", "branchy", "--iters", "1", "--csv", "/dev/full"],
    ["trace", "--model", "branchy", "--modes", "eager", "--out", "/dev/full"],
])
def test_a_report_that_cannot_be_written_fails_and_names_the_file(bench, args):
    result = bench(*with_model_files(args), check=False)
    assert result.returncode == 1
    assert "/dev/full: writing" in result.stderr and "failed" in result.stderr


def test_inputs_the_model_cannot_take_are_named_without_a_backtrace(bench, tmp_path):
    path = model_file("branchy", "pt")
    wrong_rank = bench("run", "--model", path, "--input-shape", "1x3x32", check=False)
    assert wrong_rank.returncode == 1
    assert "the module's own forward fails on inputs Float[1, 3, 32]" in wrong_rank.stderr
    assert "Expected 4-dimensional input" in wrong_rank.stderr and "Traceback" not in wrong_rank.stderr
    huge = bench("run", "--model", path, "--input-shape", "1x3x100000x100000", check=False)
    assert huge.returncode == 1
    assert "cannot make a float32 tensor of shape 1x3x100000x100000" in huge.stderr
    assert len(huge.stderr.splitlines()) <= 3, "no C++ backtrace"


def test_a_program_with_data_dependent_sizes_runs_and_matches_its_reference(bench):
    """detect's export computes sizes from its data (nonzero's count, arithmetic on it): they are
    values of the graph, and a run checks its outputs against the module's saved reference."""
    result = bench("run", "--model", model_file("detect", "pt2"))
    assert "eager" in result.stdout and "reference inputs and outputs" in result.stdout


def test_a_reference_of_another_model_fails_the_run_and_says_so(bench, tmp_path):
    """A sidecar pointing at another model's reference: eager cannot match it, and run fails."""
    model = model_file("branchy", "pt")
    shutil.copy(model, tmp_path / model.name)
    for other, reference in [("chain", "chain_b1.ref.pt"), ("googlenet", "googlenet_b1.ref.pt")]:
        shutil.copy(model_file(other, "pt").parent / reference, tmp_path / reference)
        sidecar = json.loads(model.with_suffix(".json").read_text())
        sidecar["reference"] = reference
        (tmp_path / "branchy_b1.json").write_text(json.dumps(sidecar))
        result = bench("run", "--model", tmp_path / model.name, "--iters", "1", "--modes", "eager", check=False)
        assert result.returncode == 1, result.stderr
        assert str(tmp_path / model.name) in result.stderr and reference in result.stderr
        assert "export the model again" in result.stderr


def test_a_reference_made_at_another_thread_count_is_named_as_the_cause(bench):
    """Eager at one intra-op thread differs in the last bits from a reference made at two: the
    error says so and how to match it, instead of calling the reference stale."""
    path = model_file("branchy", "pt")
    threads = json.loads(path.with_suffix(".json").read_text()).get("intra_op_threads")
    if not threads or threads == 1:
        pytest.skip(f"the reference was made with {threads} intra-op threads; this needs more than one")
    result = subprocess.run([str(BENCH), "run", "--model", str(path), "--modes", "eager", "--iters", "1"],
                            capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if result.returncode == 0:
        assert "max |diff|" in result.stdout  # the sums happened to agree at both counts: nothing to explain
        return
    assert result.returncode == 1
    assert f"the reference was made with {threads} intra-op threads and this run has 1" in result.stderr
    assert f"OMP_NUM_THREADS={threads}" in result.stderr
