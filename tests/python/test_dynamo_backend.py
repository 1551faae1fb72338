"""torch.compile(model, backend="opara") as a PyTorch user calls it: models give eager's outputs
(bit for bit on the CPU at the same thread count), graph breaks and Python loops work, each shape
is compiled once, weights are read where they are, a graph opara cannot take runs eagerly with one
warning (or raises, when asked), and bad options raise naming the option."""

import warnings

import pytest
import torch
import torch._dynamo
import torchvision

import opara

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("fresh_dynamo")]


def cpu_options(**extra):
    # The eager reference runs with this many intra-op threads; the same count gives the same sums.
    # ATen's kernels, eager's bit for bit (the CPU default, Inductor's: test_inductor_regions.py).
    return {"device": "cpu", "intra_op_threads": torch.get_num_threads(), "kernels": "aten", **extra}


def dynamo_graphs():
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def small_bert():
    import transformers

    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                     intermediate_size=256, vocab_size=1000)
    return transformers.BertModel(config, add_pooling_layer=True)


@pytest.mark.parametrize("name", ["googlenet", "inception_v3", "bert"])
def test_models_give_eagers_outputs_bit_for_bit(name):
    torch.manual_seed(0)
    if name == "bert":
        model = small_bert().eval()
        ids = torch.randint(0, 1000, (1, 16))
        inputs = (ids, torch.ones(1, 16, dtype=torch.int64))
    else:
        builder = getattr(torchvision.models, name)
        model = builder(weights=None, aux_logits=False, init_weights=True).eval()
        inputs = (torch.randn(1, 3, 299 if name == "inception_v3" else 224, 299 if name == "inception_v3" else 224),)
    with torch.no_grad():
        expected = model(*inputs)
        compiled = torch.compile(model, backend="opara", options=cpu_options())
        actual = compiled(*inputs)
        again = compiled(*inputs)
    if name == "bert":
        expected, actual, again = (out.last_hidden_state for out in (expected, actual, again))
    assert torch.equal(actual, expected)
    assert torch.equal(again, expected)
    assert dynamo_graphs() == 1  # no graph break in these models
    assert opara.dynamo_counters["compiles"] == 1 and opara.dynamo_counters["fallbacks"] == 0


class Branches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(8, 8)
        self.left = torch.nn.Linear(8, 8)
        self.right = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.stem(x).relu()
        if y.sum() > 1.0:  # data-dependent: Dynamo breaks the graph here
            return self.left(y) * 2 + self.right(y)
        return self.right(y) - 1


class Loop(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:  # a Python loop: Dynamo unrolls it into one graph
            x = layer(x).tanh() + x
        return x


def test_a_data_dependent_branch_runs_opara_on_both_sides_and_eager_for_the_decision():
    torch.manual_seed(0)
    model = Branches().eval()
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", options=cpu_options())
        x = torch.randn(4, 8)
        taken = model.stem(x).relu().sum() > 1.0
        assert torch.equal(compiled(x), model(x))
        # The graph up to the decision, and the one after it on the side taken.
        assert dynamo_graphs() == 2
        assert opara.dynamo_counters["compiles"] == 2
        # The other side: one more graph, compiled by opara too.
        other = -x * 10 if taken else x * 10
        if bool(model.stem(other).relu().sum() > 1.0) != bool(taken):
            assert torch.equal(compiled(other), model(other))
            assert dynamo_graphs() == 3 and opara.dynamo_counters["compiles"] == 3
    assert opara.dynamo_counters["fallbacks"] == 0


def test_a_python_loop_is_one_graph():
    torch.manual_seed(0)
    model = Loop().eval()
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", options=cpu_options())
        x = torch.randn(2, 8)
        assert torch.equal(compiled(x), model(x))
    assert dynamo_graphs() == 1 and opara.dynamo_counters["compiles"] == 1


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_each_compile_says_what_it_runs_and_where(kernels):
    """opara.dynamo_compiles: the backend's last compiles, each described in one line."""
    torch.manual_seed(0)
    model = Loop().eval()
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", options={**cpu_options(), "kernels": kernels})
        compiled(torch.randn(2, 8))
    entry = opara.dynamo_compiles[-1]
    assert entry["graph"].startswith("torch.compile graph") and entry["device"] == "cpu"
    assert entry["kernels"] == kernels and entry["streams"] >= 1 and entry["threads"] >= 1
    if kernels == "aten":
        assert entry["regions"] == 0 and entry["nodes"] > 1 and entry["aten_because"] == "asked", entry
        assert "ATen's kernels, one per node: asked" in opara.describe_compile(entry)
    else:
        assert entry["regions"] >= 1 and opara.dynamo_counters["regions"] >= entry["regions"], entry
        assert entry["aten_because"] is None, entry
        assert f"{entry['regions']} Inductor region(s)" in opara.describe_compile(entry)
    assert opara.describe_compile(entry).startswith(entry["graph"] + ":")


def test_inductors_region_compiles_leave_dynamos_trace_alone(monkeypatch):
    """Inductor compiles opara's regions apart from the Dynamo trace that called the backend: seen
    from inside it, Inductor took Dynamo's fake mode, and on CUDA its convolution layout choice
    left guards on sizes no source of the frame has in Dynamo's shape env (IndexError, every
    Inductor-kernel graph of googlenet and llama on an H100). So no region compile sees Dynamo's
    tracing context, and the frame's guards stay Dynamo's own."""
    import torch._guards
    import torch._inductor.compile_fx

    seen = []
    original = torch._inductor.compile_fx.compile_fx

    def spy(module, examples, *args, **kwargs):
        seen.append(torch._guards.TracingContext.try_get())
        return original(module, examples, *args, **kwargs)

    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx", spy)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3)).eval()
    x = torch.randn(1, 3, 12, 12)
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara",
                                 options={**cpu_options(), "kernels": "inductor", "fallback": "error"})
        assert torch.allclose(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    assert seen and all(context is None for context in seen), seen
    assert opara.dynamo_counters["fallbacks"] == 0


def test_each_batch_size_is_compiled_once_and_right():
    torch.manual_seed(0)
    model = Branches().eval()
    model.stem.bias.data.fill_(10.0)  # every input takes the first branch: two graphs per shape
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", dynamic=False, options=cpu_options())
        for batch in (2, 4, 8):
            x = torch.randn(batch, 8)
            assert torch.equal(compiled(x), model(x))
        assert opara.dynamo_counters["compiles"] == 3 * 2
        for batch in (2, 4, 8):  # the second call of each shape compiles nothing
            x = torch.randn(batch, 8)
            assert torch.equal(compiled(x), model(x))
        assert opara.dynamo_counters["compiles"] == 3 * 2


def test_symbolic_sizes_compile_every_shape_from_one_export():
    torch.manual_seed(0)
    model = Loop().eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no note: nothing is exported per shape
        compiled = torch.compile(model, backend="opara", dynamic=True, options=cpu_options())
        first = compiled(torch.randn(3, 8))
        assert opara.dynamo_counters["compiles"] == 1
        for batch in (3, 5, 5):
            x = torch.randn(batch, 8)
            assert torch.equal(compiled(x), model(x))
    assert dynamo_graphs() == 1  # one symbolic graph
    assert opara.dynamo_counters["symbolic_exports"] == 1  # exported once, with dynamic shapes
    assert opara.dynamo_counters["compiles"] == 2  # batch 3 and batch 5, both from that export
    assert all(entry["symbolic"] for entry in opara.dynamo_compiles)
    assert first.shape == (3, 8)


def test_weights_are_read_where_they_are():
    torch.manual_seed(0)
    model = Loop().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", options=cpu_options())
        assert torch.equal(compiled(x), model(x))
        model.layers[1].weight.mul_(3.0)  # in place: the compiled graph reads the module's own tensor
        assert torch.equal(compiled(x), model(x))
        assert opara.dynamo_counters["compiles"] == 1
        model.layers[1].weight = torch.nn.Parameter(torch.randn(8, 8))  # replaced: compiled again for it
        assert torch.equal(compiled(x), model(x))
        assert opara.dynamo_counters["compiles"] == 2
        model.layers[1].weight.data = torch.randn(8, 8)  # the same object, new memory: compiled again
        assert torch.equal(compiled(x), model(x))
        assert opara.dynamo_counters["compiles"] == 3


class ThreeProducts(torch.nn.Module):
    def forward(self, x, w0, w1, w2):
        return x @ w0 @ w1 @ w2


def test_a_watched_run_says_what_changed_and_runs_only_when_nothing_did():
    # What the backend checks its weights with at every step, in the run's own call: where each
    # weight lives, and the version of those held folded into the regions (here w1).
    x = torch.randn(2, 4)
    weights = [torch.randn(4, 4) for _ in range(3)]
    handle = opara.compile(ThreeProducts(), [x, *weights], device="cpu", static_inputs=[1, 2, 3])._handle
    handle.watch([x, *weights], [1, 2, 3], [2])
    found, outputs = handle.run_watched([x, *weights])
    assert found == 0 and torch.allclose(outputs[0], x @ weights[0] @ weights[1] @ weights[2])
    transposed = [x, weights[0], weights[1], weights[2].t()]  # the same memory, other strides
    assert handle.run_watched(transposed) == (1, [])
    assert handle.run_watched([x, *weights[:2]]) == (1, [])  # too few: not run, not refused
    weights[0].add_(1.0)  # not versioned: written where it is, read there
    found, outputs = handle.run_watched([x, *weights])
    assert found == 0 and torch.allclose(outputs[0], x @ weights[0] @ weights[1] @ weights[2])
    # The call the backend makes when Dynamo passes the watched weights themselves: the others alone.
    y = torch.randn(2, 4)
    found, outputs = handle.run_with_watched_weights([y])
    assert found == 0 and torch.allclose(outputs[0], y @ weights[0] @ weights[1] @ weights[2])
    with pytest.raises(RuntimeError, match="2 tensors given besides the weights, 1 expected"):
        handle.run_with_watched_weights([y, y])
    weights[1].mul_(2.0)
    assert handle.run_watched([x, *weights]) == (2, [])
    assert handle.run_with_watched_weights([y]) == (2, []), "the held weights are checked as the given ones"
    with pytest.raises(RuntimeError, match="position 5 is not among the call's 4 tensors"):
        handle.watch([x, *weights], [5], [])


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


def test_a_graph_opara_cannot_take_runs_eagerly_with_one_warning():
    model = Cond()
    x = torch.randn(3)
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", options=cpu_options())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert torch.equal(compiled(x), model(x))
            assert torch.equal(compiled(-x), model(-x))
    ours = [str(w.message) for w in caught if "opara" in str(w.message)]
    assert len(ours) == 1, ours
    assert "runs eagerly" in ours[0] and "cond" in ours[0]
    assert opara.dynamo_counters["fallbacks"] == 1 and opara.dynamo_counters["compiles"] == 0


def test_the_fallback_can_be_an_error():
    with torch.no_grad():
        compiled = torch.compile(Cond(), backend="opara", options=cpu_options(fallback="error"))
        with pytest.raises(Exception, match="opara could not compile.*cond"):
            compiled(torch.randn(3))


def test_a_model_that_needs_gradients_runs_eagerly_and_says_why():
    model = Loop()
    x = torch.randn(2, 8)
    compiled = torch.compile(model, backend="opara", options=cpu_options())
    with pytest.warns(UserWarning, match="inference.*no_grad"):
        out = compiled(x)
    out.sum().backward()  # eager: gradients flow
    assert model.layers[0].weight.grad is not None


def scaled(x, scale):
    return torch.relu(x * scale + 1.0)


def test_a_changing_python_float_gives_eagers_outputs():
    x = torch.randn(4, 8)
    with torch.no_grad():
        compiled = torch.compile(scaled, backend="opara", options=cpu_options())
        for scale in (0.5, 1.5, -2.0, 3.25):
            assert torch.equal(compiled(x, scale), scaled(x, scale)), scale
    assert opara.dynamo_counters["compiles"] >= 1 and opara.dynamo_counters["fallbacks"] == 0


class FailingRun:
    """A compiled graph whose run fails, as an input opara refuses would."""

    def run_watched(self, tensors):
        raise RuntimeError("opara: input 0 ('x') is on cpu, the model was compiled for cuda:0")

    def run_with_watched_weights(self, others):  # the same call when the weights are the watched ones
        return self.run_watched(others)


def graph_whose_runs_fail(fallback):
    model = Loop().eval()
    graph = opara.opara_backend(torch.fx.symbolic_trace(model), [torch.randn(2, 8)],
                                        cpu_options(fallback=fallback))
    for compiled in graph.by_shape.values():
        compiled.handle = FailingRun()
    return model, graph


def test_a_run_that_opara_refuses_runs_eagerly_from_then_on():
    model, graph = graph_whose_runs_fail("eager")
    x = torch.randn(2, 8)
    with torch.no_grad():
        with pytest.warns(UserWarning, match="runs eagerly from now on.*compiled for cuda:0"):
            assert torch.equal(graph(x), model(x))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once is enough
            assert torch.equal(graph(x), model(x))
    assert opara.dynamo_counters["fallbacks"] == 1


def test_a_run_that_opara_refuses_raises_when_the_fallback_is_an_error():
    _, graph = graph_whose_runs_fail("error")
    with torch.no_grad(), pytest.raises(opara.OparaBackendError, match="could not run.*cuda:0"):
        graph(torch.randn(2, 8))


def test_a_call_that_wants_gradients_runs_eagerly_and_one_without_runs_opara():
    model = Loop()
    x = torch.randn(2, 8)
    compiled = torch.compile(model, backend="opara", options=cpu_options())
    with pytest.warns(UserWarning, match="gradients"):
        compiled(x).sum().backward()
    assert opara.dynamo_counters["compiles"] == 0
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))
    assert opara.dynamo_counters["compiles"] == 1


@pytest.mark.parametrize("options, error, match", [
    ("cpu", TypeError, "options must be a dict"),
    ({"streams": ["opara"]}, TypeError, "streams"),
    ({"streams": "fastest"}, ValueError, "streams"),
    ({"warmup_runs": 1}, ValueError, "warmup_runs"),
    ({"no_such_option": 1}, ValueError, "no_such_option"),
    ({"fallback": "maybe"}, ValueError, "fallback"),
    ({"static_inputs": [0]}, ValueError, "static_inputs"),
    ({"kernels": "fused"}, ValueError, "option kernels='fused': expected 'auto'"),
    ({"fold_weights": "no"}, TypeError, "option fold_weights='no': expected True"),
])
def test_bad_options_raise_naming_the_option(options, error, match):
    compiled = torch.compile(Loop().eval(), backend="opara", options=options)
    with torch.no_grad(), pytest.raises(Exception, match=match) as raised:
        compiled(torch.randn(2, 8))
    # Dynamo hands a backend's exception on inside BackendCompilerFailed, its message included.
    assert isinstance(getattr(raised.value, "inner_exception", raised.value), error)


def test_the_backend_is_registered_by_import():
    assert "opara" in torch._dynamo.list_backends()


def test_registering_again_leaves_the_one_backend():
    import opara._dynamo

    first = torch._dynamo.lookup_backend("opara")
    opara._dynamo.register()  # Dynamo asserts on a name registered twice: this one returns
    opara._dynamo.register()
    assert torch._dynamo.lookup_backend("opara") is first
    assert torch.compiler.list_backends().count("opara") == 1


requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the GPU path is not run")


@requires_gpu
def test_googlenet_on_the_gpu_is_close_to_eager(no_tf32):
    torch.manual_seed(0)
    model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False).eval().cuda()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="opara")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), expected, rtol=1e-4, atol=1e-5)
    assert opara.dynamo_counters["compiles"] == 1 and opara.dynamo_counters["fallbacks"] == 0


@requires_gpu
def test_a_changing_python_float_on_the_gpu_gives_eagers_outputs():
    """Dynamo passes the float as a 0-dim CPU tensor: the graph compiles for the GPU (not for the CPU,
    though its first input is on the CPU) and a call with another value gives eager's result."""
    x = torch.randn(4, 8, device="cuda")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*CPU scalar")  # a new value runs eagerly: said once
        compiled = torch.compile(lambda scale, x: scaled(x, scale), backend="opara")
        for scale in (0.5, 1.5, -2.0, 3.25, 1.5):
            torch.testing.assert_close(compiled(scale, x), scaled(x, scale))
    assert opara.dynamo_counters["compiles"] >= 1 and opara.dynamo_counters["fallbacks"] == 0


@requires_gpu
def test_on_the_gpu_weights_are_read_where_they_are_not_copied(no_tf32):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8192, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 8192)).eval().cuda()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())  # 512 MiB
    x = torch.randn(2, 8192, device="cuda")
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara")
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() - before < weights / 2, "compiling copied the weights"
        model[0].weight.mul_(0.5)  # in place: the captured graph reads the parameter's memory
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        assert opara.dynamo_counters["compiles"] == 1
