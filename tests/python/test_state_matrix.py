"""State kept in module buffers (issue 41), swept over what users write: one, two or three buffers,
each written in place by add_, index_copy_, index_put_, slice assignment or copy_, in an order
other than the buffers' own and with reads of old and new values between the writes; through
every route (the module, its .pt2 as exported and decomposed, which is the C++ API's
opara::compile, and the torch.compile backend) on ATen's kernels, and Inductor's on a
representative few. Each case runs several calls against an eager twin: the outputs, and every
buffer after every call (CompiledModel.state(); the module handed to opara.compile keeps its
buffers as they were). A GPU twin of each runs where a GPU is.
"""

import copy
import json
import warnings

import pytest
import torch

import opara
from conftest import model_file

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
CALLS = 3
ROWS = 8  # each buffer is [1, ROWS, 4]


def add(buffer, value, position):
    buffer.add_(value)


def index_copy(buffer, value, position):
    buffer.index_copy_(1, position, value)


def index_put(buffer, value, position):
    buffer.index_put_((torch.zeros_like(position), position), value[0])


def slice_assignment(buffer, value, position):
    buffer[:, 2:4] = value


def copy_whole(buffer, value, position):
    buffer.copy_(buffer * 0.5 + value)


WRITES = {"add_": add, "index_copy_": index_copy, "index_put_": index_put, "slice": slice_assignment, "copy_": copy_whole}


class Buffers(torch.nn.Module):
    """`count` buffers, written in a rotated order (s1, s2, s0): each write reads the value the
    previous one wrote, the old values are read before (and one after) the writes begin."""

    def __init__(self, count, write):
        super().__init__()
        self.count = count
        self.write = WRITES[write]
        self.proj = torch.nn.Linear(4, 4)
        for index in range(count):
            self.register_buffer(f"s{index}", torch.randn(1, ROWS, 4))

    def forward(self, x, position):
        names = [f"s{index}" for index in range(self.count)]
        order = names[1:] + names[:1]
        value = self.proj(x)  # [1, 1, 4]
        old = [getattr(self, name).sum(1) for name in reversed(names)]
        for step, name in enumerate(order):
            buffer = getattr(self, name)
            self.write(buffer, value * (step + 1), position)
            if step == 0:
                old.append(getattr(self, order[-1]).amax(1))  # read after another buffer's write
            value = value + buffer.mean(1, keepdim=True)  # the new value, read by the next write
        return torch.stack(old).sum(0) + value[:, 0]


def calls(device):
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(1, 1, 4, generator=generator).to(device), torch.tensor([(3 * call + 1) % ROWS], device=device))
            for call in range(CALLS)]


def module_and_twin(count, write, device):
    torch.manual_seed(0)
    module = Buffers(count, write).eval().to(device)
    return module, copy.deepcopy(module)


def save(module, example, path, decomposed):
    with torch.no_grad():
        exported = torch.export.export(module, example, strict=False)
        if decomposed:
            exported = exported.run_decompositions()
    torch.export.save(exported, path)
    return path


def close(actual, expected, kernels):
    """ATen's kernels on the CPU give eager's bits; Inductor's reorder float arithmetic, and on a GPU
    a captured graph may pick other library kernels."""
    if kernels == "aten" and not actual.is_cuda:
        return torch.equal(actual, expected)
    return torch.allclose(actual, expected, rtol=1e-5, atol=1e-5)


def expect_eagers_state(compiled_call, state_of, twin, inputs, kernels):
    """Each call's output and every buffer after it equal the eager twin's."""
    for call, (x, position) in enumerate(inputs):
        with torch.no_grad():
            expected = twin(x, position)
            actual = compiled_call(x, position)
        assert close(actual, expected, kernels), f"call {call}: output"
        state = state_of()
        buffers = dict(twin.named_buffers())
        assert sorted(state) == sorted(buffers), f"state {sorted(state)}, buffers {sorted(buffers)}"
        for name, value in buffers.items():
            assert close(state[name], value, kernels), f"call {call}: buffer {name}"


def compile_route(route, module, example, tmp_path, kernels):
    options = {"cpu_tuning_ms": 0, "kernels": kernels}
    if route == "module":
        return opara.compile(module, example, **options)
    path = save(module, example, tmp_path / f"{route}.pt2", decomposed=route == "pt2-decomposed")
    return opara.compile(path, example, **options)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("route", ["module", "pt2", "pt2-decomposed"])
@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("count", [1, 2, 3])
def test_state_in_buffers_matches_eager_through_opara_compile(library, tmp_path, count, write, route, device):
    module, twin = module_and_twin(count, write, device)
    before = {name: value.clone() for name, value in module.named_buffers()}
    inputs = calls(device)
    compiled = compile_route(route, module, inputs[0], tmp_path, "aten")
    for name, value in compiled.state().items():
        assert torch.equal(value, before[name]), f"compiling wrote {name}"
    expect_eagers_state(compiled, compiled.state, twin, inputs, "aten")
    for name, value in module.named_buffers():
        assert torch.equal(value, before[name]), f"opara.compile wrote the module's own {name}"


INDUCTOR_FEW = [(2, "index_copy_", "module"), (3, "slice", "pt2-decomposed"), (1, "add_", "pt2"),
                (2, "copy_", "module"), (3, "index_put_", "pt2")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("count,write,route", INDUCTOR_FEW)
def test_state_in_buffers_matches_eager_with_inductors_kernels(library, tmp_path, count, write, route, device):
    module, twin = module_and_twin(count, write, device)
    inputs = calls(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = compile_route(route, module, inputs[0], tmp_path, "inductor")
    assert compiled.stats()["regions"] >= 1
    assert [str(w.message) for w in caught if str(w.message).startswith("opara:")] == []
    expect_eagers_state(compiled, compiled.state, twin, inputs, "inductor")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("write", list(WRITES))
def test_state_in_buffers_matches_eager_through_the_backend(library, fresh_dynamo, write, device):
    """Dynamo passes the buffers as inputs; opara writes them where they live, in the module."""
    module, twin = module_and_twin(3, write, device)
    compiled = torch.compile(module, backend="opara", options={"cpu_tuning_ms": 0, "kernels": "aten",
                                                               "fallback": "error"})
    expect_eagers_state(compiled, lambda: dict(module.named_buffers()), twin, calls(device), "aten")
    assert opara.dynamo_counters["fallbacks"] == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernels", ["aten", "inductor"])
@pytest.mark.parametrize("route", ["module", "backend"])
def test_state_compiles_and_runs_under_inference_mode(library, fresh_dynamo, route, kernels, device):
    """generate() runs under torch.inference_mode(), so its caches are inference tensors, which only
    inference mode may write: compile and every call write them there, as eager does."""
    with torch.inference_mode():
        module, twin = module_and_twin(2, "index_copy_", device)
        assert module.s0.is_inference()
        inputs = calls(device)
        if route == "module":
            compiled = opara.compile(module, inputs[0], cpu_tuning_ms=0, kernels=kernels)
            expect_eagers_state(compiled, compiled.state, twin, inputs, kernels)
        else:
            compiled = torch.compile(module, backend="opara",
                                     options={"cpu_tuning_ms": 0, "fallback": "error", "kernels": kernels})
            expect_eagers_state(compiled, lambda: dict(module.named_buffers()), twin, inputs, kernels)
            assert opara.dynamo_counters["fallbacks"] == 0


def test_opara_bench_counts_the_state_buffers_of_a_program(bench, tmp_path):
    module, _ = module_and_twin(3, "index_copy_", "cpu")
    path = save(module, calls("cpu")[0], tmp_path / "three.pt2", decomposed=False)
    info = json.loads(bench("info", "--model", path, "--json", "-").stdout)
    assert (info["inputs"], info["state_buffers"]) == (2, 3)


def test_opara_bench_runs_and_traces_a_decoder_that_owns_its_caches(bench, tmp_path):
    """The exported decoder (its reference inputs and outputs): every mode, eager included, keeps
    the four caches as its own state and gives the reference outputs bit for bit."""
    path = model_file("decoder", "pt2")
    report = tmp_path / "run.json"
    bench("run", "--model", path, "--modes", "eager,sequential,opara", "--iters", 2, "--warmup", 1, "--json", report)
    modes = json.loads(report.read_text())["modes"]
    assert [mode["mode"] for mode in modes] == ["eager", "sequential", "opara"]
    for mode in modes:
        assert mode["max_abs_diff"] == 0, mode["mode"]
    bench("trace", "--model", path, "--out", tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]


class ReturnsItsCaches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, ROWS, 4))
        self.register_buffer("v", torch.zeros(1, ROWS, 4))

    def forward(self, x, position):
        self.k.index_copy_(1, position, x)
        self.v.index_copy_(1, position, x * 2)
        return self.k, self.v[:, :4], (self.k * self.v).sum()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_an_output_that_is_a_state_buffer_is_the_callers_own(library, kernels, device):
    """A model that returns its caches (or views of them) gives the caller tensors of its own, as
    outputs="clone" says: the next call leaves them as they were, and writing them does not reach
    the model's state."""
    module, twin = ReturnsItsCaches().to(device), ReturnsItsCaches().to(device)
    inputs = calls(device)
    compiled = opara.compile(module, inputs[0], kernels=kernels, cpu_tuning_ms=0)
    first = compiled(*inputs[0])
    with torch.no_grad():
        expected = [tensor.clone() for tensor in twin(*inputs[0])]
    for got, want in zip(first, expected):
        assert close(got, want, kernels)
    for x, position in inputs[1:]:
        with torch.no_grad():
            assert close(compiled(x, position)[2], twin(x, position)[2], kernels)
    assert close(compiled.state()["k"], twin.k, kernels) and close(compiled.state()["v"], twin.v, kernels)
    for got, want in zip(first, expected):
        assert close(got, want, kernels), "a later call changed an earlier call's output"
    first[0].fill_(7)
    assert not torch.equal(compiled.state()["k"], first[0]), "writing an output wrote the model's state"


class CountsItsCalls(torch.nn.Module):
    """State of no batch size: a call counter and the last call's mean row."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("last", torch.zeros(4))

    def forward(self, x):
        self.count.add_(1)
        self.last.copy_(x.mean(0))
        return x * self.count


@pytest.mark.parametrize("device", DEVICES)
def test_a_graph_set_of_a_model_with_state_is_refused_naming_the_buffer(library, device):
    with pytest.raises(RuntimeError, match=r"writes its buffer 'count' in place \(2 state buffers\).*graph set"):
        opara.compile_graph_set(CountsItsCalls().to(device), [torch.randn(2, 4, device=device)], [1, 2],
                                kernels="aten")


class WritesItsInput(torch.nn.Module):
    def forward(self, x, cache):
        cache.add_(x)
        return cache * 2


def test_a_graph_set_of_a_model_that_writes_an_input_is_refused_naming_it(library):
    with pytest.raises(RuntimeError, match=r"writes its input 1 \('cache'\) in place.*graph set"):
        opara.compile_graph_set(WritesItsInput(), [torch.randn(2, 4), torch.randn(2, 4)], [2, 4], kernels="aten")


def test_torchscript_state_is_refused_with_a_clear_message(library):
    """TorchScript keeps a written buffer as a module attribute; opara runs torch.export programs'
    state only, and says so."""
    module, _ = module_and_twin(2, "index_copy_", "cpu")
    traced = torch.jit.trace(module, calls("cpu")[0], check_trace=False)
    with pytest.raises(RuntimeError, match=r"torch\.export"):
        opara.compile(traced, calls("cpu")[0], kernels="aten")
