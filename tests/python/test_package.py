"""Packages (issue 44): opara.package compiles a model once, its regions by AOTInductor, and
opara.load (the library's opara::load_package, no Python at run time) loads it here or in a fresh
process and gives the module's outputs; a package that does not fit this process, or a damaged
one, is refused naming what is wrong. Small models: each region is an AOTInductor compile (half a
minute on two cores), so one package is made per module and the bad ones are edited copies."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import opara
from conftest import Products
from opara._package_file import keep_choice, read_info

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Branches(torch.nn.Module):
    """Two convolution branches of one input, joined, and a second output: a tuple."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 8, 1)

    def forward(self, x):
        y = torch.relu(self.a(x)) + torch.sigmoid(self.b(x))
        return y, y.mean(dim=(2, 3))


def _model_and_input():
    torch.manual_seed(0)
    return Branches().eval(), torch.randn(1, 4, 12, 12)


@pytest.fixture(scope="module")
def made(library, tmp_path_factory):
    """One package of Branches with AOTInductor's regions, and the module and input it was made from."""
    model, x = _model_and_input()
    path = tmp_path_factory.mktemp("package") / "branches.opara"
    assert opara.package(model, [x], path, device="cpu", cpu_tuning_ms=0) == path
    return path, model, x


def _close(actual, expected):
    for a, e in zip(actual, expected):
        assert torch.allclose(a, e, rtol=1e-4, atol=1e-5), (a - e).abs().max()


def test_a_loaded_package_runs_aotinductors_regions_and_gives_the_modules_outputs(made):
    path, model, x = made
    compiled = opara.load(path)
    with torch.no_grad():
        expected = model(x)
    outputs = compiled(x)
    assert isinstance(outputs, tuple) and len(outputs) == 2  # the module's output structure
    _close(outputs, expected)
    _close(compiled(x * 2), model(x * 2))  # new values, same signature: no compile
    stats = compiled.stats()
    assert stats["kernels"] == "inductor" and stats["regions"] == 1, stats
    assert "opara::aoti_region" in compiled.plan()["kinds"]
    assert compiled.exported_with == "package"


def test_a_package_loads_in_a_fresh_process_without_compiling(made, tmp_path):
    path, model, x = made
    with torch.no_grad():
        torch.save({"x": x, "expected": model(x)}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import torch, opara
        io = torch.load({str(tmp_path / "io.pt")!r})
        import torch._inductor.compile_fx as compile_fx
        def refused(*args, **kwargs):
            raise AssertionError("loading a package compiled with Inductor")
        compile_fx.compile_fx = refused
        compiled = opara.load({str(path)!r})
        for a, e in zip(compiled(io["x"]), io["expected"]):
            assert torch.allclose(a, e, rtol=1e-4, atol=1e-5), (a - e).abs().max()
        print("ok", compiled.stats()["regions"])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "ok 1.0" in done.stdout, done.stderr[-3000:]


def test_a_package_of_atens_kernels_gives_the_modules_outputs_bit_for_bit(library, tmp_path):
    model, x = _model_and_input()
    path = opara.package(model, [x], tmp_path / "aten.opara", kernels="aten", device="cpu", cpu_tuning_ms=0)
    compiled = opara.load(path)
    with torch.no_grad():
        expected = model(x)
    for a, e in zip(compiled(x), expected):
        assert torch.equal(a, e)
    assert compiled.stats()["kernels"] == "aten" and compiled.stats()["regions"] == 0


def test_the_options_given_at_load_replace_the_packages_but_not_its_device(made):
    path, model, x = made
    compiled = opara.load(path, outputs="view")
    _close(compiled(x), model(x))
    with pytest.raises(RuntimeError, match="made for device cpu"):
        opara.load(path, device="cuda")


def test_a_package_keeps_the_schedule_its_load_timed_and_a_load_here_does_not_time_again(library, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU: there is one schedule and nothing to time")
    model, x = _model_and_input()
    # ATen's kernels (no AOTInductor compile): the two branches on two streams, a schedule the CPU
    # tuner chooses.
    path = opara.package(model, [x], tmp_path / "branches.opara", kernels="aten", device="cpu", cpu_tuning_ms=50)
    kept = read_info(str(path))["choice"]
    assert kept["machine"] == f"{len(os.sched_getaffinity(0))} CPUs", kept
    assert set(kept["options"]) >= {"intra_op_threads"}, kept
    loaded = opara.load(path)
    stats = loaded.stats()
    assert stats["tuning_ms"] == 0 and stats["tuning"] == [], stats  # compiled as kept, untimed
    assert str(int(stats["intra_op_threads"])) == kept["options"]["intra_op_threads"]
    with torch.no_grad():
        _close(loaded(x), model(x))
    # Options that change how the schedule is chosen are the caller's: timed again (or fixed).
    assert opara.load(path, cpu_tuning_ms=40).stats()["tuning"] != []
    assert opara.load(path, intra_op_threads=1).stats()["intra_op_threads"] == 1
    # Kept for another machine: timed again here.
    keep_choice(path, json.dumps({"machine": "a machine of 1000 CPUs", "options": kept["options"]}))
    assert opara.load(path).stats()["tuning"] != []
    # A damaged one is named.
    keep_choice(path, "{not json")
    with pytest.raises(RuntimeError, match="opara/choice.json is damaged"):
        opara.load(path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: a CUDA package is made where its GPU is")
def test_a_cuda_package_captures_aotinductors_regions_and_gives_the_modules_outputs(library, tmp_path):
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    model, x = _model_and_input()
    model, x = model.cuda(), x.cuda()
    path = opara.package(model, [x], tmp_path / "cuda.opara", region_min_share=0.0)
    info = json.loads(torch.ops.opara.package_info(str(path)))
    assert info["device"] == "cuda" and info["cuda_capability"] and info["regions"] >= 1, info
    compiled = opara.load(path)
    with torch.no_grad():
        expected = model(x)
    for _ in range(3):  # replays of the captured graph
        _close([t.cpu() for t in compiled(x)], [t.cpu() for t in expected])
    stats = compiled.stats()
    assert stats["segments"] >= 1 and "opara::aoti_region" in compiled.plan()["kinds"], stats


def test_the_command_line_packages_a_model_file_and_says_what_it_holds(library, tmp_path):
    model, x = _model_and_input()
    program = tmp_path / "branches.pt2"
    torch.export.save(torch.export.export(model, (x,)), program)
    out = tmp_path / "cli.opara"
    command = [sys.executable, "-m", "opara", "package", str(program), "--input-shape", "1x4x12x12", "--out", str(out),
               "--option", "kernels=aten", "--option", "device=cpu", "--option", "cpu_tuning_ms=0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and f"wrote {out}" in done.stdout, done.stderr[-3000:]
    info = subprocess.run([sys.executable, "-m", "opara", "info", str(out)], capture_output=True, text=True, timeout=600)
    assert info.returncode == 0 and json.loads(info.stdout)["options"]["device"] == "cpu", info.stderr[-3000:]
    same = torch.randn(1, 4, 12, 12, generator=torch.Generator().manual_seed(0))  # the CLI's example input
    with torch.no_grad():
        expected = model(same)
    for a, e in zip(opara.load(out)(same), expected):
        assert torch.equal(a, e)
    bad = subprocess.run(command[:6] + ["1xfour"] + command[7:], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "'1xfour' is not a list of shapes" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "opara", "info", str(tmp_path / "none.opara")],
                             capture_output=True, text=True, timeout=600)
    assert missing.returncode == 1 and "none.opara" in missing.stderr


# ---- bad packages: each an edited copy of the one made above ----

def _records(path):
    reader = torch._C.PyTorchFileReader(str(path))
    return {name: bytes(reader.get_record(name)) for name in reader.get_all_records()}


def _rewrite(records, path):
    writer = torch._C.PyTorchFileWriter(str(path))
    for name, data in records.items():
        writer.write_record(name, data, len(data))
    writer.write_end_of_file()
    del writer
    return path


def _with_meta(made, tmp_path, **changes):
    records = _records(made[0])
    meta = json.loads(records["opara/meta.json"])
    meta.update(changes)
    records["opara/meta.json"] = json.dumps(meta).encode()
    return _rewrite(records, tmp_path / "edited.opara")


@pytest.mark.parametrize("changes, match", [
    ({"torch": "2.9.0+cpu"}, r"made with torch 2\.9\.0\+cpu, and this process runs torch"),
    ({"opara": "0.0.1"}, r"made by opara 0\.0\.1, and this is opara"),
    ({"cpu_isa": "avx512", "options": {"device": "cpu"}, "device": "cuda", "cuda_capability": "9.0"},
     r"made for a CUDA GPU" if not torch.cuda.is_available() else r"compute capability|made for device"),
    ({"format": 7}, r"a package of format 7, and this opara reads format 1"),
    ({"options": {"cpu_tuning_ms": "0"}}, r"opara/meta.json gives no device among its options"),
])
def test_a_package_that_does_not_fit_this_process_is_refused_naming_what_differs(made, tmp_path, changes, match):
    edited = _with_meta(made, tmp_path, **changes)
    with pytest.raises(RuntimeError, match=match) as error:
        opara.load(edited)
    assert str(edited) in str(error.value)


def test_a_package_for_cpu_features_this_cpu_lacks_is_refused(made, tmp_path):
    capabilities = torch._C._cpu._get_cpu_capability()
    lacking = sorted(name for name, has in capabilities.items() if has is False)
    if not lacking:
        pytest.skip("this CPU has every feature ATen names")
    isa = f"avx2 {lacking[0]}"  # an ISA's kernels that also use a feature this CPU lacks
    with pytest.raises(RuntimeError, match=rf"compiled for {isa} \({lacking[0]}\), which this CPU lacks"):
        opara.load(_with_meta(made, tmp_path, cpu_isa=isa))


def test_a_package_missing_a_region_names_the_record(made, tmp_path):
    records = _records(made[0])
    del records["opara/regions/0.pt2"]
    with pytest.raises(RuntimeError, match=r"the package has no opara/regions/0\.pt2"):
        opara.load(_rewrite(records, tmp_path / "no-region.opara"))


def test_a_damaged_region_names_the_record(made, tmp_path):
    records = _records(made[0])
    records["opara/regions/0.pt2"] = b"not a zip"
    with pytest.raises(RuntimeError, match=r"opara/regions/0\.pt2: AOTInductor could not load it"):
        opara.load(_rewrite(records, tmp_path / "bad-region.opara"))


def test_a_truncated_package_names_the_file(made, tmp_path):
    data = made[0].read_bytes()
    truncated = tmp_path / "truncated.opara"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError, match="not an opara package .*damaged or truncated") as error:
        opara.load(truncated)
    assert str(truncated) in str(error.value)


def test_a_torch_export_file_is_not_a_package(library, tmp_path):
    model, x = _model_and_input()
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (x,)), path)
    with pytest.raises(RuntimeError, match="not an opara package: it has no opara/meta.json"):
        opara.load(path)


def test_damaged_example_inputs_are_named(made, tmp_path):
    records = _records(made[0])
    records["opara/inputs/0.bin"] = records["opara/inputs/0.bin"][:10]
    with pytest.raises(RuntimeError, match=r"opara/inputs/0\.bin holds 10 bytes"):
        opara.load(_rewrite(records, tmp_path / "inputs.opara"))


class DecodeStep(torch.nn.Module):
    """A decode step's shape at batch 1: one-row linear layers, this step's row written into a
    cache buffer in place at `position`, the whole cache read after."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 16))
        self.key, self.out = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x, position):
        self.cache.index_copy_(0, position, torch.relu(self.key(x)))
        return self.out(x) + (self.cache * x).sum(0, keepdim=True)


def _region_of(module, inputs):
    """The whole decomposed program of `module` as one region."""
    from opara._partition import Region

    with torch.no_grad():
        exported = torch.export.export(module.eval(), tuple(inputs), strict=False).run_decompositions({})
    graph = exported.graph_module.graph
    return Region(graph, 0, {n.name for n in graph.nodes if n.op == "call_function"}, set(), {}, set())


@pytest.mark.parametrize("module, inputs, unpacked", [
    (Products(), [torch.randn(1, 16)], True),  # a decode step's products at batch 1
    (Products(), [torch.randn(1, 1, 16)], True),  # with a sequence dimension of one
    (Products(), [torch.randn(4, 16)], False),  # four rows: oneDNN's packing wins
    (Branches(), [torch.randn(1, 4, 12, 12)], False),  # convolutions need their packed weights
    (torch.nn.ReLU(), [torch.randn(1, 16)], False),  # nothing to pack: as before
], ids=["one-row", "one-row-3d", "four-rows", "convolutions", "no-products"])
def test_aotinductor_leaves_weights_unpacked_only_where_every_product_takes_one_row(library, module, inputs,
                                                                                    unpacked):
    from opara._regions import one_row_products

    assert one_row_products(_region_of(module, inputs)) is unpacked


def test_a_packaged_decode_step_writes_its_cache_in_its_region_and_matches_eager(library, tmp_path):
    """The package's region (AOTInductor's, unpacked one-row products) writes the cache row where
    the cache lives: no ATen write between regions, eager's outputs and cache call after call."""
    torch.manual_seed(0)
    model, twin = DecodeStep().eval(), DecodeStep().eval()
    twin.load_state_dict(model.state_dict())
    x, path = torch.randn(1, 16), tmp_path / "step.opara"
    opara.package(model, [x, torch.tensor([0])], path, device="cpu", cpu_tuning_ms=0)
    compiled = opara.load(path)
    kinds = compiled.plan()["kinds"]
    assert kinds == ["opara::aoti_region", "opara::written_in_region"], kinds
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(1, 16)
            _close([compiled(x, torch.tensor([step]))], [twin(x, torch.tensor([step]))])
    (name, cache), = compiled.state().items()
    assert name == "cache" and torch.allclose(cache, twin.cache, rtol=1e-4, atol=1e-5)
