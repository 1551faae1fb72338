"""The Python package and the torch.classes extension as a user meets them: compiled models give
the module's outputs in the module's structure, errors arrive as exceptions carrying opara's
message, and `pip install` gives a package that works on its own."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
import torchvision

import opara
from conftest import ROOT, model_file

STATS_KEYS = {"streams", "events", "captured_nodes", "graph_nodes", "segments", "host_nodes", "compile_ms",
              "plan_us", "capture_ms", "pool_bytes", "peak_bytes", "runs", "eager_fallbacks", "cpu_nodes",
              "bytes_to_host", "bytes_to_device", "host_ms", "predicted_none_us", "predicted_us",
              "intra_op_threads", "tuning_ms", "keep_alive", "pool_bytes_record_stream", "pool_bytes_keep_alive", "regions"}


def cpu_options():
    # The reference ran with this many intra-op threads; the same count gives the same float sums.
    # ATen's kernels, eager's bit for bit (the CPU default, Inductor's: test_inductor_regions.py).
    return {"device": "cpu", "intra_op_threads": torch.get_num_threads(), "kernels": "aten"}


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.left = torch.nn.Linear(16, 16)
        self.right = torch.nn.Linear(16, 8)

    def forward(self, x):
        return {"left": self.left(x).relu(), "pair": (self.right(x), x.sum(dim=1))}


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


class WritesItsInput(torch.nn.Module):
    def forward(self, x, y):
        x.add_(1.0)
        y[0].mul_(2.0)  # through a view
        return x * 2.0 + y.sum()


def writes_like_eager(device):
    """Compiling leaves the examples alone; each run writes the caller's tensors once, as eager."""
    module = WritesItsInput()
    x = torch.linspace(0, 3, 8, device=device)
    y = torch.arange(6.0, device=device).reshape(2, 3)
    before = (x.clone(), y.clone())
    compiled = opara.compile(module, [x, y], device=device)
    assert torch.equal(x, before[0]) and torch.equal(y, before[1])
    for _ in range(3):
        eager_x, eager_y = x.clone(), y.clone()
        expected = module(eager_x, eager_y)
        torch.testing.assert_close(compiled(x, y), expected, rtol=0, atol=0)
        assert torch.equal(x, eager_x) and torch.equal(y, eager_y)
    return compiled


def test_the_library_registers_the_class_and_the_op(library):
    assert os.path.isfile(library)
    assert opara.library_path() == library
    assert hasattr(torch.classes.opara, "Model")
    assert callable(torch.ops.opara.plan)


def test_version_names_the_torch_built_against_and_the_one_running(library):
    versions = opara.version()
    assert versions == {"opara": opara.__version__, "torch_built": versions["torch_built"],
                        "torch_running": torch.__version__}
    assert versions["torch_built"] == torch.__version__.split("+")[0]


def test_a_library_built_against_another_torch_is_refused_before_it_loads(library, tmp_path):
    """A build for another torch release (an environment whose torch was upgraded, a build folder of
    another torch) would load with undefined symbols or crash: it is refused, naming both releases
    and what to do."""
    other = tmp_path / "lib"
    other.mkdir()
    (other / "libopara_ext.so").symlink_to(Path(library).resolve())  # OPARA_BUILD may be relative
    (other / "opara_build.json").write_text(json.dumps({"opara": "0.1.0", "torch": "9.9.0"}))
    script = "import opara\nopara.load_library()\n"
    env = {**os.environ, "OPARA_LIBRARY": str(other / "libopara_ext.so"), "PYTHONPATH": str(ROOT / "python")}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert f"built against torch 9.9.0, but this Python runs torch {torch.__version__}" in message
    assert "pip install ." in message
    (other / "opara_build.json").unlink()
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "does not say which torch" in result.stderr


def test_the_extension_needs_no_python(library):
    """torch.ops.load_library from any Python with the pinned torch: no libpython, no
    libtorch_python (the extension is built without Python headers)."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    dynamic = subprocess.run([readelf, "-d", library], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert any(name.startswith("libtorch") for name in needed), needed
    assert not [name for name in needed if "python" in name], needed


def test_googlenet_compiled_for_the_cpu_gives_the_modules_output(library):
    torch.manual_seed(0)
    model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False).eval()
    x = torch.randn(1, 3, 224, 224)
    compiled = opara.compile(model, [x], **cpu_options())
    assert compiled.exported_with == "torch.export"
    with torch.no_grad():
        expected = model(x)
    assert torch.equal(compiled(x), expected)
    stats = compiled.stats()
    assert stats["streams"] > 1, "googlenet's branches should get streams of their own"
    assert stats["runs"] == 1


def test_outputs_keep_the_modules_structure(library):
    model = TwoHeads().eval()
    x = torch.randn(4, 16)
    compiled = opara.compile(model, x, **cpu_options())
    out = compiled(x)
    expected = model(x)
    assert set(out) == {"left", "pair"} and isinstance(out["pair"], tuple)
    assert torch.equal(out["left"], expected["left"])
    assert torch.equal(out["pair"][0], expected["pair"][0])
    assert torch.equal(out["pair"][1], expected["pair"][1])


def test_a_module_export_rejects_is_traced_and_the_user_is_told(library):
    with pytest.warns(UserWarning, match="falling back to TorchScript tracing"):
        compiled = opara.compile(DataDependent(), [torch.ones(3)], device="cpu")
    assert compiled.exported_with == "torchscript-trace"
    assert torch.equal(compiled(torch.full((3,), 2.0)), torch.full((3,), 4.0))


@pytest.mark.parametrize("extension,pin_workers", [("pt", True), ("pt2", True), ("pt", False)])
def test_model_files_give_their_reference_outputs(library, extension, pin_workers):
    path = model_file("branchy", extension)
    reference = torch.load(str(path).replace(f".{extension}", ".ref.pt"))
    compiled = opara.compile(path, reference["inputs"], pin_workers=pin_workers, **cpu_options())
    expected = reference["outputs_pt" if extension == "pt" else "outputs_pt2"]
    actual = compiled(*reference["inputs"])
    actual = [actual] if isinstance(actual, torch.Tensor) else list(actual)
    assert len(actual) == len(expected)
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def test_split_nodes_keep_the_bits_of_whole_ones(library):
    # One intra-op thread a worker, so that workers split: split_min_us=1 splits every pooling and
    # activation long enough to time among idle workers from the second run on; 0 never does.
    path = model_file("googlenet", "pt")
    x = torch.randn(1, 3, 224, 224)
    split = opara.compile(path, [x], device="cpu", intra_op_threads=1, split_min_us=1)
    whole = opara.compile(path, [x], device="cpu", intra_op_threads=1, split_min_us=0)
    expected = whole(x)
    for _ in range(3):
        assert torch.equal(split(x), expected)


def test_a_bad_path_raises_with_opara_s_message(library):
    with pytest.raises(RuntimeError, match="no-such-model.pt: no such file"):
        opara.compile("no-such-model.pt", [torch.ones(1)])
    with pytest.raises(RuntimeError, match="no such file"):
        torch.classes.opara.Model("no-such-model.pt2", [torch.ones(1)], None)


def test_bad_options_name_the_option(library):
    path = model_file("branchy", "pt")
    x = torch.randn(1, 3, 32, 32)
    with pytest.raises(RuntimeError, match="unknown option 'stream'; the options are: device, streams"):
        opara.compile(path, [x], stream="nimble")
    with pytest.raises(RuntimeError, match="option max_streams='-2'"):
        opara.compile(path, [x], max_streams=-2)
    with pytest.raises(TypeError, match=r"opara option streams=\['opara'\]"):
        opara.compile(path, [x], streams=["opara"])
    with pytest.raises(TypeError, match="example input 1 is a int"):
        opara.compile(path, [x, 3])
    with pytest.raises(RuntimeError, match="aten::rleu"):
        opara.compile(path, [x], device="cpu", overflow="manual", cpu_nodes=["aten::rleu", 0])
    with pytest.raises(RuntimeError, match="option overflow: unknown overflow policy 'sd'"):
        opara.compile(path, [x], overflow="sd")
    with pytest.raises(RuntimeError, match="option pin_workers='yes': expected one of true, false"):
        opara.compile(path, [x], device="cpu", pin_workers="yes")
    with pytest.raises(RuntimeError, match=r"option memory_budget='lots': expected a ratio to the sequential graph's "
                                           r"pool \('1.3x'\), with the headroom .* or a size"):
        opara.compile(path, [x], device="cpu", memory_budget="lots")
    with pytest.raises(RuntimeError, match="option cuda_measure_ms='-1'"):
        opara.compile(path, [x], device="cpu", cuda_measure_ms=-1)


def test_inputs_of_another_signature_name_the_input(library):
    path = model_file("branchy", "pt")
    compiled = opara.compile(path, [torch.randn(1, 3, 32, 32)], device="cpu")
    with pytest.raises(RuntimeError, match=r"input 0 .* has shape \[2, 3, 32, 32\], the model was compiled for"):
        compiled(torch.randn(2, 3, 32, 32))
    with pytest.raises(RuntimeError, match="dtype"):
        compiled(torch.randn(1, 3, 32, 32, dtype=torch.float64))


def test_errors_of_a_compiled_module_name_the_module_and_the_input(library):
    compiled = opara.compile(TwoHeads(), [torch.randn(2, 16)], device="cpu")
    with pytest.raises(RuntimeError, match=r"^TwoHeads: input 0 \('x'\) has shape \[3, 16\]") as raised:
        compiled(torch.randn(3, 16))
    assert "/tmp" not in str(raised.value) and ".pt2" not in str(raised.value)
    with pytest.raises(RuntimeError, match=r"^DataDependent: input 0 \('x[^']*'\) has dtype"):
        # torch.export refuses the branch: the module is traced, and errors still name it
        with pytest.warns(UserWarning, match="falling back to TorchScript tracing"):
            traced = opara.compile(DataDependent(), [torch.ones(4)], device="cpu")
        traced(torch.ones(4, dtype=torch.float64))


class Positions(torch.nn.Module):
    """Factory calls that torch.export writes the example's device into."""

    def forward(self, x):
        positions = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
        return x * positions + torch.ones(x.shape, device=x.device)


def exported_as_from_cuda(module, x, path):
    """`module` exported on the CPU, its device arguments then rewritten to cuda:0, as an export
    from CUDA tensors has them."""
    exported = torch.export.export(module, (x,))
    rewritten = 0
    for node in exported.graph.nodes:
        if isinstance(node.kwargs.get("device"), torch.device):
            node.kwargs = {**node.kwargs, "device": torch.device("cuda", 0)}
            rewritten += 1
    assert rewritten >= 2, "the module should create tensors on its input's device"
    torch.export.save(exported, path)
    return path


def test_a_graph_exported_from_cuda_tensors_runs_where_it_is_compiled(library, tmp_path):
    x = torch.randn(2, 5)
    path = exported_as_from_cuda(Positions(), x, tmp_path / "from_cuda.pt2")
    for kernels in ("aten", "inductor"):  # Inductor's regions create their tensors where they run too
        compiled = opara.compile(path, [x], device="cpu", kernels=kernels)
        assert compiled.stats()["kernels"] == kernels
        for _ in range(2):
            torch.testing.assert_close(compiled(x), Positions()(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
def test_a_module_exported_from_cuda_tensors_compiles_for_the_gpu_and_the_cpu(library, tmp_path, no_tf32):
    x = torch.randn(2, 5, device="cuda")
    expected = Positions()(x)
    on_the_gpu = opara.compile(Positions().cuda(), [x])
    assert on_the_gpu.device == torch.device("cuda", 0)
    torch.testing.assert_close(on_the_gpu(x), expected)
    path = tmp_path / "exported_on_the_gpu.pt2"
    torch.export.save(torch.export.export(Positions(), (x,)), path)
    on_the_cpu = opara.compile(path, [x.cpu()], device="cpu")
    torch.testing.assert_close(on_the_cpu(x.cpu()), expected.cpu())
    # Compiled for the CPU from CUDA examples: called with CUDA tensors, as compiled.
    from_cuda_inputs = opara.compile(path, [x], device="cpu")
    torch.testing.assert_close(from_cuda_inputs(x), expected.cpu())


class Scaled(torch.nn.Module):
    """A scale given as a 0-dim CPU tensor, first: what Dynamo makes of a Python float."""

    def forward(self, scale, x):
        return torch.relu(x * scale + 1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
def test_a_cpu_scalar_input_of_a_cuda_model_stays_one_and_each_value_counts_on_the_gpu(library):
    x = torch.randn(4, 8, device="cuda")
    compiled = opara.compile(Scaled(), [torch.tensor(0.5, dtype=torch.float64), x])
    assert compiled.device == torch.device("cuda", 0), "the device comes from the CUDA input, not the first"
    half = torch.tensor(0.5, dtype=torch.float64)
    torch.testing.assert_close(compiled(half, x), Scaled()(half, x))
    assert compiled.stats()["eager_fallbacks"] == 0
    with pytest.warns(UserWarning, match="CPU scalar.*another value"):
        other = compiled(torch.tensor(2.5, dtype=torch.float64), x)
    torch.testing.assert_close(other, Scaled()(torch.tensor(2.5, dtype=torch.float64), x))
    assert compiled.stats()["eager_fallbacks"] == 1
    with pytest.raises(RuntimeError, match=r"input 0 \('scale'\) is on cuda:0, the model was compiled for cpu"):
        compiled(torch.tensor(0.5, dtype=torch.float64, device="cuda"), x)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run"))])
def test_compiled_under_inference_mode_runs_outside_it_and_back(library, device):
    """A CUDA model's input buffers and host-step slots are ordinary tensors, which a call outside
    inference mode may write (item.pt's .item() is a host step on the GPU)."""
    options = cpu_options() if device == "cpu" else {}
    x = torch.randn(2, 16, device=device)
    model = torch.jit.load(str(ROOT / "tests" / "data" / "item.pt"))
    with torch.inference_mode():
        compiled = opara.compile(ROOT / "tests" / "data" / "item.pt", [x], **options)
    with torch.no_grad():
        expected = model(x)
    for mode in (torch.no_grad, torch.inference_mode, torch.no_grad):
        with mode():
            torch.testing.assert_close(compiled(x), expected)


def test_the_cpu_schedule_is_tuned_unless_told_otherwise(library):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU: there is one schedule and nothing to tune")
    path = model_file("branchy", "pt")
    x = torch.randn(1, 3, 32, 32)
    compiled = opara.compile(path, [x], device="cpu", cpu_tuning_ms=50)
    stats = compiled.stats()
    assert stats["tuning_ms"] > 0
    # The schedules timed, eager's first, the kept one's streams and threads the model's own.
    (kept,) = [candidate for candidate in stats["tuning"] if candidate["chosen"]]
    assert stats["tuning"][0]["streams"] == 1 and stats["tuning"][0]["speedup"] == 1.0
    assert (kept["streams"], kept["intra_op_threads"]) == (stats["streams"], stats["intra_op_threads"])
    assert stats["candidates"] == [] and stats["measure_ms"] == 0, "CUDA's candidates: not measured on the CPU"
    previous = torch.get_num_threads()
    torch.set_num_threads(int(stats["intra_op_threads"]))
    try:
        expected = torch.jit.load(str(path))(x)
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(compiled(x), expected), "equal to eager at the thread count the tuner kept"
    untuned = opara.compile(path, [x], device="cpu", cpu_tuning_ms=0)
    assert untuned.stats()["tuning_ms"] == 0 and untuned.stats()["tuning"] == []
    assert untuned.stats()["streams"] == opara.plan(path, [x])["streams"], "every stream the plan opens"


def test_stats_plan_and_save_plan(library, tmp_path):
    path = model_file("branchy", "pt")
    x = torch.randn(1, 3, 32, 32)
    compiled = opara.compile(path, [x], device="cpu", streams="nimble", order="topological")
    assert STATS_KEYS <= compiled.stats().keys()
    assert compiled.device == torch.device("cpu")
    plan = compiled.plan()
    assert plan["format"] == "opara-plan"
    assert plan["stream_policy"] == "nimble" and plan["order_policy"] == "topological"
    assert sorted(plan["launch_order"]) == list(range(plan["nodes"])), "every node is launched once"
    saved = tmp_path / "plan.json"
    compiled.save_plan(saved)
    assert json.loads(saved.read_text()) == plan
    with pytest.raises(RuntimeError, match="cannot write the plan"):
        compiled.save_plan(tmp_path / "missing-folder" / "plan.json")


def test_the_plan_op_plans_without_compiling(library):
    path = model_file("branchy", "pt2")
    without_inputs = opara.plan(path)
    assert without_inputs["cost_source"] == "none"
    with_inputs = json.loads(torch.ops.opara.plan(str(path), [torch.randn(1, 3, 32, 32)], {"streams": "single"}))
    assert with_inputs["cost_source"] == "shapes"
    assert with_inputs["streams"] == 1 and with_inputs["events"] == 0
    with pytest.raises(RuntimeError, match="option order: unknown launch order 'fastest'"):
        opara.plan(path, order="fastest")


def test_a_torchscript_file_compiles_without_torchs_deserialisation_traceback(library, capfd):
    """kernels="auto" on the CPU tries Inductor's kernels, which need a torch.export program: the
    file's format is asked first, so a good .pt prints nothing of torch.export.load's."""
    path = model_file("branchy", "pt")
    x = torch.randn(1, 3, 32, 32)
    capfd.readouterr()
    compiled = opara.compile(path, [x], cpu_tuning_ms=0)
    printed = capfd.readouterr()
    assert "Traceback" not in printed.err and "Unable to load package" not in printed.err, printed.err
    assert compiled(x).shape == (1, 10)


def test_the_quick_start_leaves_opara_importable_from_the_checkout(tmp_path):
    """scripts/setup.sh names this checkout's python/ in the venv (a .pth file): `import opara`
    works anywhere in that Python, and loads this tree's package and build."""
    checkout = Path(__file__).resolve().parents[2]
    site = Path(sysconfig.get_paths()["purelib"])
    if not Path(sys.prefix).resolve().is_relative_to(Path.home() / ".cache" / "opara"):
        pytest.skip(f"{sys.prefix} is not a venv scripts/setup.sh made")
    pth = site / "opara-checkout.pth"
    assert pth.exists() and pth.read_text().strip() == str(checkout / "python"), (
        f"{pth} does not name this checkout's python/: run scripts/setup.sh from {checkout}")
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPARA_BUILD", "OPARA_LIBRARY")}
    found = subprocess.run([sys.executable, "-c", "import opara; print(opara.__file__); print(opara.library_path())"],
                           cwd=tmp_path, env=environment, capture_output=True, text=True, check=True).stdout.split()
    assert Path(found[0]) == checkout / "python" / "opara" / "__init__.py"
    assert Path(found[1]).is_relative_to(checkout), "the extension is another checkout's"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")
def test_the_plan_op_for_cuda_without_a_gpu_says_so(library):
    """The plan op records shapes where the model runs, as compile does: not on the CPU instead."""
    path = model_file("branchy", "pt2")
    with pytest.raises(RuntimeError, match="branchy_b1.pt2: compiling for cuda needs a CUDA GPU"):
        opara.plan(path, [torch.randn(1, 3, 32, 32)], device="cuda")
    assert opara.plan(path, device="cuda")["cost_source"] == "none", "without examples nothing runs"


class _Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).relu()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the GPU path is not run")
def test_on_the_gpu_the_plan_op_runs_a_cuda_only_op_where_it_is(library, tmp_path):
    """Half-precision attention exported on CUDA decomposes to the flash kernel, which the CPU lacks."""
    q, k, v = (torch.randn(1, 4, 64, 32, device="cuda", dtype=torch.float16) for _ in range(3))
    program = torch.export.export(_Attention(), (q, k, v)).run_decompositions({})
    path = tmp_path / "attention.pt2"
    torch.export.save(program, str(path))
    plan = opara.plan(path, [q, k, v])
    assert plan["cost_source"] == "shapes"
    assert opara.plan(path, [q, k, v], device="cuda")["cost_source"] == "shapes"


def test_the_plan_groups_each_streams_nodes_into_regions_when_asked(library):
    path = model_file("googlenet", "pt2")
    assert "region_of" not in opara.plan(path)
    plan = opara.plan(path, regions=True, region_min_share=0)
    region_of, stream_of = plan["region_of"], plan["stream_of"]
    kernel_nodes = [node for node, stream in enumerate(stream_of) if stream >= 0]
    assert all(region_of[node] >= 0 for node in kernel_nodes)
    assert 1 < plan["regions"] < len(kernel_nodes)
    streams_of_region = {}
    for node in kernel_nodes:
        streams_of_region.setdefault(region_of[node], set()).add(stream_of[node])
    assert all(len(streams) == 1 for streams in streams_of_region.values()), "a region spans streams"
    merged = opara.plan(path, [torch.randn(1, 3, 224, 224)], regions=True, region_min_share=0.5)
    assert merged["regions"] < plan["regions"]
    with pytest.raises(RuntimeError, match="option region_min_share='-1'"):
        opara.plan(path, regions=True, region_min_share=-1)


def test_a_plan_with_regions_runs_as_the_model_on_the_cpu(library):
    """Regions regroup the streams and the launch order; the CPU executor runs that plan."""
    path = model_file("branchy", "pt2")
    reference = torch.load(str(path).replace(".pt2", ".ref.pt"))
    compiled = opara.compile(path, reference["inputs"], regions=True, region_min_share=0.3, **cpu_options())
    expected = reference["outputs_pt2"]
    actual = compiled(*reference["inputs"])
    torch.testing.assert_close(actual if isinstance(actual, (list, tuple)) else [actual], expected, rtol=0, atol=0)
    assert compiled.plan()["regions"] >= 1


def test_a_model_that_writes_its_inputs_writes_them_once_per_run(library):
    assert writes_like_eager("cpu").exported_with == "torch.export"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
def test_a_model_that_writes_its_inputs_writes_them_once_per_run_on_the_gpu(library):
    writes_like_eager("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given where there is no GPU")
def test_compiling_for_cuda_without_a_gpu_says_so(library):
    with pytest.raises(RuntimeError, match="needs a CUDA GPU, and none is visible here"):
        opara.compile(model_file("branchy", "pt"), [torch.randn(1, 3, 32, 32)], device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
def test_googlenet_compiled_for_cuda_is_close_to_the_module(library, no_tf32):
    torch.manual_seed(0)
    model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False).eval().cuda()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    compiled = opara.compile(model, [x])
    with torch.no_grad():
        expected = model(x)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), expected, rtol=1e-4, atol=1e-5)
    assert compiled.stats()["captured_nodes"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
def test_nodes_sent_to_the_cpu_by_name_give_the_models_outputs(library, no_tf32):
    path = model_file("branchy", "pt")
    x = torch.randn(1, 3, 32, 32, device="cuda")
    expected = opara.compile(path, [x])(x)
    compiled = opara.compile(path, [x], overflow="manual", cpu_nodes=["aten::relu"])
    for _ in range(3):
        torch.testing.assert_close(compiled(x), expected, rtol=1e-4, atol=1e-5)
    stats = compiled.stats()
    assert stats["cpu_nodes"] > 0 and stats["bytes_to_host"] > 0 and stats["bytes_to_device"] > 0


def test_pip_install_gives_a_working_package(library, tmp_path):
    target = tmp_path / "site"
    # The offline install the README gives: the venv's pinned setuptools, no registry.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), str(ROOT)], check=True, timeout=1200)
    script = (
        "import opara, torch, sys\n"
        "path = opara.library_path()\n"
        "assert path.startswith(sys.argv[1]), path\n"
        "compiled = opara.compile(sys.argv[2], [torch.randn(1, 3, 32, 32)], device='cpu', cpu_tuning_ms=0)\n"
        "print(int(compiled.stats()['streams']), opara.version()['torch_built'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OPARA_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(target)
    result = subprocess.run([sys.executable, "-c", script, str(target), str(model_file("branchy", "pt"))],
                            env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    streams, torch_built = result.stdout.split()
    assert int(streams) > 1
    # Built against this Python's torch, and requiring that very release.
    release = torch.__version__.split("+")[0]
    assert torch_built == release
    (metadata,) = target.glob("opara-*.dist-info/METADATA")
    assert f"Requires-Dist: torch=={release}" in metadata.read_text().splitlines()
    # torch.compile finds backend="opara" through the package's entry point, with no import of it,
    # and an import before it does not register the backend twice.
    compile_and_check = (
        "model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()\n"
        "x = torch.randn(2, 8)\n"
        "with torch.no_grad():\n"
        "    compiled = torch.compile(model, backend='opara', options={'device': 'cpu', 'cpu_tuning_ms': 0})\n"
        "    torch.testing.assert_close(compiled(x), model(x))\n"
        "import opara\n"
        "assert opara.__file__.startswith(sys.argv[1]), opara.__file__\n"
        "print(opara.dynamo_counters['compiles'])\n"
    )
    for first in ("import sys, torch\n", "import sys, torch, opara\n"):
        result = subprocess.run([sys.executable, "-c", first + compile_and_check, str(target)], env=env,
                                capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert result.returncode == 0, f"{first}{result.stderr}"
        assert result.stdout.strip() == "1"
