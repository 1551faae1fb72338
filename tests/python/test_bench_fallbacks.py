"""A benchmark row labelled opara that ran eagerly says so (bench/opara_rows.py): torch.compile's
opara backend runs a graph it cannot take eagerly, so a row could time eager under opara's name.
The benchmarks tally opara's counters per backend and mark the row in their tables and JSON."""

import argparse
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import llm_decode_bench  # noqa: E402
import torch_compile_bench  # noqa: E402
from opara_rows import fallback_note, marked  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ARGS = argparse.Namespace(iters=2, rounds=1, warmup=1, settle_ms=0)


def model_and_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    return model, torch.randn(2, 8)


def measured(grad):
    model, x = model_and_input()
    with torch.set_grad_enabled(grad):
        rows = torch_compile_bench.measure_model("tiny", model, [x], torch.device("cpu"), ["eager", "opara"], ARGS)
    return {row["backend"]: row for row in rows}


def test_an_opara_row_that_ran_eagerly_is_marked_in_its_line_and_json(fresh_dynamo):
    # With gradients wanted opara's outputs would carry none: the backend runs Dynamo's graph eagerly.
    row = measured(grad=True)["opara"]
    assert row["counters"]["graphs"] == 1 and row["counters"]["fallbacks"] >= 1, row
    assert row["fell_back"] and "ran eagerly" in row["fell_back"]
    assert any("runs eagerly while gradients are wanted" in w for w in row["warnings"]), row["warnings"]
    row["model"] = "tiny"
    assert "FELL BACK: ran eagerly" in torch_compile_bench.row_line(row)


def test_an_opara_row_that_ran_its_compiled_graph_is_not_marked(fresh_dynamo):
    rows = measured(grad=False)
    row = rows["opara"]
    assert row["counters"] == {"graphs": 1, "compiles": 1, "fallbacks": 0, "regions": 0}, row
    assert row["fell_back"] is None and "median_ms" in row
    # What the row ran, and where: one compile of ATen's nodes on the CPU (opara.describe_compile).
    assert len(row["compiles"]) == 1 and "ATen's kernels" in row["compiles"][0] and "on cpu" in row["compiles"][0]
    row["model"] = "tiny"
    assert "FELL BACK" not in torch_compile_bench.row_line(row)
    assert "counters" not in rows["eager"]  # eager has no counters to report


def test_each_backends_fallbacks_are_its_own(fresh_dynamo):
    # Two opara rows in one process, one falling back at its calls only: the other stays clean.
    model, x = model_and_input()
    rows = {}
    with torch.no_grad():
        rows.update({r["backend"]: r for r in torch_compile_bench.measure_model(
            "tiny", model, [x], torch.device("cpu"), ["eager", "opara", "opara-inductor"], ARGS)})
    assert rows["opara"]["fell_back"] is None, rows["opara"]
    assert rows["opara-inductor"]["counters"]["regions"] >= 1 and rows["opara-inductor"]["fell_back"] is None
    assert ["Inductor region" in line for line in rows["opara-inductor"]["compiles"]] == [True]


@pytest.mark.parametrize("backend, counters, words", [
    ("opara", {"graphs": 2, "compiles": 1, "fallbacks": 1}, "ran eagerly 1 time(s) (2 graph(s), 1 compile(s))"),
    ("opara", {"graphs": 0, "compiles": 0, "fallbacks": 0}, "Dynamo handed opara no graph"),
    ("opara-1stream", {"graphs": 1, "compiles": 0, "fallbacks": 0}, "nothing compiled"),
    ("opara-inductor", {"graphs": 1, "compiles": 1, "fallbacks": 0, "regions": 0}, "no region compiled by Inductor"),
    ("opara-inductor", {"graphs": 1, "compiles": 1, "fallbacks": 0, "regions": 3}, None),
    ("opara", {"graphs": 3, "compiles": 3, "fallbacks": 0}, None),
    ("inductor", {"graphs": 0}, None),
    ("opara", None, None),
])
def test_the_fallback_note_names_what_did_not_run_as_labelled(backend, counters, words):
    note = fallback_note(backend, counters)
    if words is None:
        assert note is None and marked(backend, counters) == ""
    else:
        assert words in note and marked(backend, counters).startswith(" FELL BACK: ")


def test_the_llm_table_marks_a_row_that_fell_back():
    common = dict(model="llama", size="large", params=2e7, batch=1, first_call_s=1.0, tokens_per_s=100.0,
                  decode_tokens_per_s=120.0, speedup_vs_eager=1.0, peak_mib=50.0, tokens_equal=True)
    clean = {"graphs": 2, "compiles": 2, "fallbacks": 0, "regions": 0}
    rows = [dict(common, backend="eager"), dict(common, backend="opara", counters=clean),
            dict(common, backend="opara-inductor", counters=dict(clean, fallbacks=1, regions=4))]
    lines = llm_decode_bench.table(rows).splitlines()[2:]
    assert "FELL BACK" not in lines[0] + lines[1]
    assert "| 2 / 2 / 1 FELL BACK: ran eagerly 1 time(s)" in lines[2]
    assert "| 50 |" in lines[1]  # the peak memory column
