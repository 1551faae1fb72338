"""The one lowering stage (python/opara/_lowering.py): every route says which kernels its model
runs and, for ATen's, why (stats()["kernels"], stats()["aten_because"]), with a warning exactly
where the user asked for Inductor's; a module torch.export refuses is exported once, then traced;
the library decides which writes of state run in place (in_place_twin, csrc/import/exported_state.h)."""

import warnings

import pytest
import torch

import opara
from conftest import model_file
from test_inductor_regions import ThreeBranches, close_to
from test_python_package import DataDependent

CPU = {"device": "cpu", "cpu_tuning_ms": 0}


def branchy_input():
    return torch.load(str(model_file("branchy", "pt")).replace(".pt", ".ref.pt"))["inputs"]


def opara_warnings(caught):
    return [str(w.message) for w in caught if str(w.message).startswith("opara:")]


@pytest.mark.parametrize("kernels", ["auto", "inductor", "aten"])
@pytest.mark.parametrize("route", ["module", "pt2", "pt", "script_module"])
def test_each_route_says_its_kernels_and_why(library, route, kernels):
    torch.manual_seed(0)
    if route == "module":
        model, inputs = ThreeBranches().eval(), [torch.randn(1, 8, 16, 16)]
        expected = model(*inputs)
    else:
        inputs = branchy_input()
        model = {"pt2": model_file("branchy", "pt2"), "pt": model_file("branchy", "pt"),
                 "script_module": torch.jit.load(str(model_file("branchy", "pt")))}[route]
        expected = torch.jit.load(str(model_file("branchy", "pt")))(*inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = opara.compile(model, inputs, kernels=kernels, **CPU)
    stats = compiled.stats()
    program = route in ("module", "pt2")
    if kernels == "aten":
        assert (stats["kernels"], stats["aten_because"]) == ("aten", "asked")
    elif program:
        assert (stats["kernels"], stats["aten_because"], stats["regions"]) == ("inductor", None, 1)
    else:
        assert (stats["kernels"], stats["aten_because"], stats["regions"]) == ("aten", "torchscript", 0)
    # Said where Inductor's kernels were asked for and cannot be had; never otherwise.
    said = opara_warnings(caught)
    if kernels == "inductor" and not program:
        assert len(said) == 1 and "kernels='inductor' needs a torch.export program" in said[0], said
    else:
        assert said == [], said
    with torch.no_grad():
        close_to([compiled(*inputs)], [expected])


@pytest.mark.parametrize("kernels", ["auto", "inductor"])
def test_a_module_export_refuses_is_exported_once_then_traced(library, monkeypatch, kernels):
    exports = []
    export = torch.export.export

    def counted(*args, **kwargs):
        exports.append(type(args[0]).__name__)
        return export(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counted)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = opara.compile(DataDependent(), [torch.ones(3)], kernels=kernels, **CPU)
    assert exports == ["DataDependent"]
    stats = compiled.stats()
    assert (stats["kernels"], stats["aten_because"], compiled.exported_with) == (
        "aten", "export_failed", "torchscript-trace")
    said = opara_warnings(caught)
    assert any("falling back to TorchScript tracing" in message for message in said), said
    assert any("needs a torch.export program" in message for message in said) == (kernels == "inductor"), said
    assert torch.equal(compiled(torch.full((3,), 2.0)), torch.full((3,), 4.0))


def test_a_graph_set_says_each_buckets_kernels(library):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    graph_set = opara.compile_graph_set(model, [torch.randn(2, 3, 8, 8)], [1, 2], **CPU)
    assert graph_set.stats()["kernels"] == ["inductor", "inductor"]
    assert graph_set.stats()["aten_because"] == [None, None]
    with pytest.warns(UserWarning, match="compiles a graph set from an nn.Module .* not from a file"):
        from_file = opara.compile_graph_set(model_file("branchy", "pt2"), branchy_input(), [1], kernels="inductor",
                                            **CPU)
    assert from_file.stats()["kernels"] == ["aten"] and from_file.stats()["aten_because"] == ["graph_set_file"]


class Accumulates(torch.nn.Module):
    """total += x: the new state is add(total, x), whose in-place twin is add_."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        self.total.add_(x)
        return torch.tanh(self.total) * 2


class Decays(torch.nn.Module):
    """average = average * 0.5 + x: the new state is add(mul(average), x), not made from the state
    itself by one op, so a region makes it and the program copies it back."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        self.total.mul_(0.5).add_(x)
        return torch.tanh(self.total) * 2


@pytest.mark.parametrize("model_class", [Accumulates, Decays])
def test_a_write_of_state_runs_in_its_region_whether_in_place_or_copied_back(library, model_class):
    # The region writes the state where it lives: add_ on it, or the new value copied into it at
    # its end; no ATen write between regions, the state handed on after the region.
    model, reference = model_class(), model_class()
    compiled = opara.compile(model, [torch.zeros(4)], kernels="inductor", **CPU)
    kinds = compiled.plan()["kinds"]
    assert kinds[1:] == ["opara::written_in_region"] and kinds[0].endswith("_region"), kinds
    for step in range(3):
        x = torch.full((4,), float(step))
        close_to([compiled(x)], [reference(x)])
    close_to([compiled.state()["total"]], [reference.total])
    assert torch.equal(model.total, torch.zeros(4))  # the module's own buffer is not written


@pytest.mark.parametrize("kernels", ["auto", "inductor"])
def test_where_the_library_fails_on_inductors_program_auto_takes_atens(library, monkeypatch, kernels):
    """The library compiles the program with Inductor's regions as nodes (their first runs, the
    tuner's): where that fails, "auto" says so and compiles ATen's kernels; asked for, the error."""
    import opara._lowering

    def damaged(lowered):  # a description of the regions the library refuses
        return ("{", []) if lowered.regions else ("", [])

    monkeypatch.setattr(opara._lowering.Lowered, "region_arguments", damaged)
    monkeypatch.setenv("OPARA_CACHE", "0")  # in process: a cache entry is loaded apart (test_compile_cache.py)
    model, x = ThreeBranches().eval(), torch.randn(1, 8, 16, 16)
    if kernels == "inductor":
        with pytest.raises(RuntimeError, match="ThreeBranches"):
            opara.compile(model, [x], kernels=kernels, **CPU)
        return
    with pytest.warns(UserWarning, match="Inductor's kernels could not be compiled for ThreeBranches"):
        compiled = opara.compile(model, [x], **CPU)
    assert (compiled.stats()["kernels"], compiled.stats()["aten_because"]) == ("aten", "inductor_failed")
    with torch.no_grad():
        assert torch.equal(compiled(x)[0], model(x)[0])


def test_a_program_file_python_cannot_read_is_read_by_the_library(library, monkeypatch):
    import opara._lowering

    def unreadable(path):
        raise RuntimeError("this torch cannot read it")

    monkeypatch.setattr(opara._lowering, "loaded", unreadable)
    inputs = branchy_input()
    with pytest.warns(UserWarning, match="torch.export.load could not read .*this torch cannot read it"):
        compiled = opara.compile(model_file("branchy", "pt2"), inputs, kernels="inductor", **CPU)
    assert (compiled.stats()["kernels"], compiled.stats()["aten_because"]) == ("aten", "load_failed")
    expected = torch.jit.load(str(model_file("branchy", "pt")))(*inputs)
    close_to([compiled(*inputs)], [expected])


def test_a_program_is_not_a_model_opara_compile_takes(library):
    program = torch.export.export(ThreeBranches().eval(), (torch.randn(1, 8, 16, 16),))
    with pytest.raises(TypeError, match="opara.compile takes an nn.Module or a model file path, not a ExportedProgram"):
        opara.compile(program, [torch.randn(1, 8, 16, 16)], **CPU)


class Reassigns(torch.nn.Module):
    """Gives its long buffer a float tensor: eager's attribute becomes a float tensor."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4, dtype=torch.long))

    def forward(self, x):
        self.total = self.total.add(x)
        return self.total * 2


def test_a_state_write_of_another_dtype_is_refused_naming_the_buffer(library, tmp_path):
    # A functional program (decomposed) says what the buffer becomes: a Float where it holds a Long.
    program = torch.export.export(Reassigns(), (torch.ones(4),), strict=False).run_decompositions({})
    path = tmp_path / "reassigns.pt2"
    torch.export.save(program, str(path))
    with pytest.raises(RuntimeError, match=r"reassigns\.pt2: the model gives 'total' a new value of Float \[4\] "
                                           r"where it holds Long \[4\]"):
        opara.compile(path, [torch.ones(4)], kernels="aten", **CPU)


def test_a_module_giving_a_buffer_another_dtype_is_refused_with_inductors_kernels(library):
    # Inductor's regions are cut from the functional program, which the library reads as the file
    # above: the same refusal, naming the module and its buffer (ATen's route reads the program as
    # exported, where the new value is a casting copy_: a known limit, docs/usage.md "State in buffers").
    with pytest.raises(RuntimeError, match=r"Reassigns: the model gives 'total' a new value of Float \[4\] "
                                           r"where it holds Long \[4\]"):
        opara.compile(Reassigns(), [torch.ones(4)], kernels="inductor", **CPU)


def test_a_models_own_error_is_raised_without_blaming_inductor(library, recwarn):
    """A graph set refuses a model whose outputs mix rows, whatever its kernels: the library's error,
    not a fallback to ATen's kernels said to be Inductor's fault."""
    from test_graph_set import MixesRows

    with pytest.raises(RuntimeError, match="the outputs mix rows"):
        opara.compile_graph_set(MixesRows(), [torch.randn(2, 8)], [1, 4], **CPU)
    assert not [w for w in recwarn if "Inductor's kernels could not be compiled" in str(w.message)]
