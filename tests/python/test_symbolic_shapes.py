"""Programs with symbolic sizes. A torch.export program exported with dynamic_shapes compiles for
every size its export allows, from the file, with either kernel choice, giving the module's
outputs; sizes outside its ranges or its conditions (guards) are refused naming them. Through the
backend, a graph Dynamo made symbolic is exported once with its sizes symbolic, and each new shape
is compiled from that export (ATen's kernels, or Inductor's regions compiled once for the symbolic
sizes), reusing the first shape's tuning; a shape the export's conditions exclude is compiled on
its own, with a note."""


import pytest
import torch

import opara
from test_dynamo_backend import small_bert

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("fresh_dynamo")]

AUTO = torch.export.Dim.AUTO


class SizeArithmetic(torch.nn.Module):
    """The symbolic forms a transformer's export holds: a view of [b, s, 4, 16], a product of
    sizes, a slice to s - 1, a floor division, sizes as a factory's list, a size as a number."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x, mask):
        b, s, _ = x.shape
        heads = self.proj(x).view(b, s, 4, 16).transpose(1, 2).reshape(b * 4, s, 16)
        shifted = heads[:, : s - 1] * (s // 2)
        positions = torch.arange(s, dtype=x.dtype).view(1, s, 1)
        return shifted.relu(), x.new_zeros(b, s * 2) + mask[:, :s].sum(), heads + positions


def exported_file(tmp_path, module, inputs, dynamic_shapes, name="model.pt2"):
    program = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    path = tmp_path / name
    torch.export.save(program, str(path))
    return path, program


def size_arithmetic_inputs(batch, length):
    generator = torch.Generator().manual_seed(length)
    return torch.randn(batch, length, 64, generator=generator), torch.randn(batch, 32, generator=generator)


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_a_dynamic_shape_file_compiles_for_every_length_it_allows(tmp_path, kernels):
    torch.manual_seed(0)
    module = SizeArithmetic().eval()
    path, program = exported_file(tmp_path, module, size_arithmetic_inputs(2, 8),
                                  {"x": {0: AUTO, 1: AUTO}, "mask": {0: AUTO}})
    for batch, length in [(2, 8), (2, 13), (3, 5), (4, 31)]:
        inputs = size_arithmetic_inputs(batch, length)
        compiled = opara.compile(str(path), list(inputs), device="cpu", kernels=kernels,
                                 intra_op_threads=torch.get_num_threads())
        stats = compiled.stats()
        assert stats["kernels"] == kernels and (kernels == "aten" or stats["regions"] >= 1), stats
        # The compile cache keeps programs of one shape: a dynamic one says so.
        assert kernels == "aten" or stats["cache"].startswith("bypassed: its sizes are symbolic"), stats
        with torch.no_grad():
            expected = program.module()(*inputs)
        actual = compiled(*inputs)
        for a, e in zip(actual, expected):
            if kernels == "aten":  # ATen's kernels, eager's bit for bit
                assert torch.equal(a, e), (batch, length)
            else:
                torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_sizes_outside_the_exports_range_and_conditions_are_refused_naming_them(tmp_path):
    class Guarded(torch.nn.Module):
        def forward(self, x, y):
            return x[: x.shape[0] - 1] + y[1:]

    inputs = (torch.randn(5, 3), torch.randn(5, 3))
    path, _ = exported_file(tmp_path, Guarded(), inputs, {"x": {0: AUTO}, "y": {0: AUTO}})
    with pytest.raises(RuntimeError, match=r"the inputs \('x' \[2, 3\], 'y' \[2, 3\]\) do not meet the condition "
                                           r".*L\['x'\]\.size\(\)\[0\].* the program was exported under"):
        opara.compile(str(path), [torch.randn(2, 3), torch.randn(2, 3)], kernels="aten")
    with pytest.raises(RuntimeError, match=r"input 0 \('x'\) dimension 1 is 4; the program was exported with it "
                                           r"fixed at 3"):
        opara.compile(str(path), [torch.randn(6, 4), torch.randn(6, 3)], kernels="aten")
    bounded = torch.export.Dim("rows", min=3, max=16)
    path, _ = exported_file(tmp_path, Guarded(), inputs, {"x": {0: bounded}, "y": {0: bounded}}, "bounded.pt2")
    with pytest.raises(RuntimeError, match=r"dimension 0 is 17, outside the sizes the program was exported for "
                                           r"\(.* in \[3, 16\]\)"):
        opara.compile(str(path), [torch.randn(17, 3), torch.randn(17, 3)], kernels="aten")


def cpu_options(**extra):
    return {"device": "cpu", "intra_op_threads": torch.get_num_threads(), "kernels": "aten", **extra}


def test_new_sequence_lengths_compile_from_one_export_of_the_backends_symbolic_graph():
    """A small BERT at seven lengths: Dynamo compiles a static graph, then a symbolic one; opara
    exports the symbolic one once and compiles each later length from it."""
    torch.manual_seed(0)
    model = small_bert().eval()
    compiled = torch.compile(model, backend="opara", options={"device": "cpu", "kernels": "aten"})
    with torch.no_grad():
        for length in (8, 9, 10, 11, 12, 16, 24):
            ids = torch.randint(0, 1000, (1, length))
            torch.testing.assert_close(compiled(ids).last_hidden_state, model(ids).last_hidden_state,
                                       rtol=1e-4, atol=1e-4)
    assert opara.dynamo_counters["symbolic_exports"] == 1
    assert opara.dynamo_counters["compiles"] == 7 and opara.dynamo_counters["fallbacks"] == 0
    symbolic = [entry for entry in opara.dynamo_compiles if entry.get("symbolic")]
    assert len(symbolic) == 6, list(opara.dynamo_compiles)  # every length after the first graph's


def test_later_shapes_reuse_the_first_shapes_tuning():
    """Four branches: the first shape's compile times the candidate schedules, later shapes run
    the one it chose without timing again."""
    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.branches = torch.nn.ModuleList(
                torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
                for _ in range(4))

        def forward(self, x):
            return sum(branch(x) for branch in self.branches)

    model = Branches().eval()
    compiled = torch.compile(model, backend="opara", dynamic=True, options={"device": "cpu", "kernels": "aten"})
    with torch.no_grad():
        for rows in (16, 24, 40):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x))
    assert opara.dynamo_counters["symbolic_exports"] == 1 and opara.dynamo_counters["compiles"] == 3
    first, *later = opara.dynamo_compiles
    assert first["tuning_ms"] > 0, first
    for entry in later:
        assert entry["tuning_ms"] == 0, entry
        assert (entry["streams"], entry["threads"]) == (first["streams"], first["threads"]), entry


def test_a_shape_the_exports_conditions_exclude_is_compiled_alone_with_a_note():
    """Dynamo's guards keep such a shape from the graph; the backend's graph, called with it
    directly, compiles it on its own and still gives the module's outputs."""
    class Guarded(torch.nn.Module):
        def forward(self, x):
            return x[: x.shape[0] - 1] * 2

    model = Guarded()
    captured = {}

    def record(graph, example_inputs):
        captured.update(graph=graph, example_inputs=example_inputs)
        return graph

    torch.compile(model, backend=record, dynamic=True)(torch.arange(5.0))
    graph = opara.opara_backend(captured["graph"], captured["example_inputs"], options=cpu_options())
    sizes = [value for value in captured["example_inputs"] if isinstance(value, torch.SymInt)]
    assert len(sizes) == 1  # Dynamo passes the length, then the tensor

    def call(n):
        return graph(n, torch.arange(float(n)))[0]

    with torch.no_grad():
        assert torch.equal(call(5), model(torch.arange(5.0)))
        excluded = "is compiled for this shape alone: .*(outside the sizes the program was exported for|do not meet)"
        with pytest.warns(UserWarning, match=excluded):
            assert torch.equal(call(2), model(torch.arange(2.0)))
        assert torch.equal(call(7), model(torch.arange(7.0)))
    assert opara.dynamo_counters["symbolic_exports"] == 1 and opara.dynamo_counters["compiles"] == 3


def test_inductors_regions_are_compiled_once_for_every_shape_of_a_symbolic_graph():
    """The CPU's default kernels: the regions are compiled once, for the export's symbolic sizes,
    and each later shape runs them (no Inductor compile), as fast as a compile for that shape."""
    torch.manual_seed(0)
    model = small_bert().eval()
    compiled = torch.compile(model, backend="opara", options={"device": "cpu", "kernels": "inductor"})
    with torch.no_grad():
        for length in (8, 9, 10, 13, 24):
            ids = torch.randint(0, 1000, (1, length))
            torch.testing.assert_close(compiled(ids).last_hidden_state, model(ids).last_hidden_state,
                                       rtol=1e-4, atol=1e-4)
    assert opara.dynamo_counters["symbolic_exports"] == 1 and opara.dynamo_counters["fallbacks"] == 0
    symbolic = [entry for entry in opara.dynamo_compiles if entry.get("symbolic")]
    assert len(symbolic) == 4 and all(entry["kernels"] == "inductor" and entry["regions"] >= 1 for entry in symbolic)
    # Regions compiled: the static first graph's and the symbolic graph's, once each.
    assert opara.dynamo_counters["regions"] == opara.dynamo_compiles[0]["regions"] + symbolic[0]["regions"]


@pytest.mark.parametrize("change", ["written in place", "given new memory"])
def test_a_weight_changed_after_the_symbolic_regions_compiled_is_read_at_the_next_shape(change):
    """The regions fold a convolution's weights in: a weight written in place, or given new memory,
    gets the graph lowered again, and every later shape computes with the new weight."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()).eval()
    compiled = torch.compile(model, backend="opara", dynamic=True, options={"device": "cpu", "kernels": "inductor"})
    with torch.no_grad():
        for width in (6, 9):
            x = torch.randn(1, 3, 8, width)
            torch.testing.assert_close(compiled(x), model(x))
        if change == "written in place":
            model[0].weight.copy_(torch.randn(4, 3, 3, 3))
        else:  # new memory behind the same Parameter: Dynamo's graph stays, opara's reads another tensor
            model[0].weight.data = torch.randn(4, 3, 3, 3)
        for width in (9, 12, 6):
            x = torch.randn(1, 3, 8, width)
            torch.testing.assert_close(compiled(x), model(x))


def test_an_input_laid_out_otherwise_is_copied_into_the_symbolic_regions_layout(tmp_path):
    """The regions were compiled for the export's layouts (contiguous); a transposed input of
    another shape is copied into that layout before they read it, and the outputs are right."""
    torch.manual_seed(0)
    module = SizeArithmetic().eval()
    path, program = exported_file(tmp_path, module, size_arithmetic_inputs(2, 8),
                                  {"x": {0: AUTO, 1: AUTO}, "mask": {0: AUTO}})
    x = torch.randn(11, 3, 64).transpose(0, 1)  # [3, 11, 64], not contiguous
    mask = torch.randn(3, 32)
    compiled = opara.compile(str(path), [x, mask], device="cpu", kernels="inductor")
    with torch.no_grad():
        expected = program.module()(x, mask)
    for actual, wanted in zip(compiled(x, mask), expected):
        torch.testing.assert_close(actual, wanted, rtol=1e-5, atol=1e-5)
    assert compiled.stats()["region_input_copies"] >= 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_new_lengths_on_cuda_compile_from_one_export_and_replay_the_modules_outputs(kernels):
    """On a GPU: each length's graph is captured from the one export (its sizes computed while
    capturing), and replays match the module."""
    torch.manual_seed(0)
    model = small_bert().eval().cuda()
    compiled = torch.compile(model, backend="opara", options={"device": "cuda", "kernels": kernels})
    with torch.no_grad():
        for length in (8, 9, 13, 24, 13):
            ids = torch.randint(0, 1000, (1, length), device="cuda")
            torch.testing.assert_close(compiled(ids).last_hidden_state, model(ids).last_hidden_state,
                                       rtol=1e-3, atol=1e-3)
    assert opara.dynamo_counters["symbolic_exports"] == 1 and opara.dynamo_counters["fallbacks"] == 0
    assert opara.dynamo_counters["compiles"] == 4  # 8, then 9, 13 and 24 from the export
