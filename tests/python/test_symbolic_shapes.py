"""Programs with symbolic sizes. A torch.export program exported with dynamic_shapes compiles for
every size its export allows, from the file, with either kernel choice, giving the module's
outputs; sizes outside its ranges or its conditions (guards) are refused naming them. Through the
backend, a graph Dynamo made symbolic is exported once with its sizes symbolic, and each new shape
is compiled from that export (ATen's kernels), reusing the first shape's tuning; a shape the
export's conditions exclude, or Inductor's kernels, are compiled per shape, with a note."""

import warnings

import pytest
import torch

import opara

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
        assert compiled.stats()["kernels"] == kernels
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


def small_bert():
    import transformers

    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                     intermediate_size=256, vocab_size=1000)
    return transformers.BertModel(config, add_pooling_layer=True)


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


def test_inductors_kernels_compile_a_symbolic_graph_per_shape_with_a_note():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    compiled = torch.compile(model, backend="opara", dynamic=True, options=cpu_options(kernels="inductor"))
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in (3, 5):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(compiled(x), model(x))
    notes = [str(w.message) for w in caught if "once per concrete shape" in str(w.message)]
    assert len(notes) == 1 and "Inductor's kernels are compiled per shape" in notes[0], notes
    assert opara.dynamo_counters["symbolic_exports"] == 0 and opara.dynamo_counters["compiles"] == 2
