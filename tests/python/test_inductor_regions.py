"""kernels="inductor": opara plans the streams, Inductor compiles each region of the plan. Both
entry points give eager's outputs within Inductor's tolerance (and torch.compile's own), run the
regions as opara nodes, count them, and refuse or fall back clearly where they cannot take a model.
Small models only: each region is an Inductor compile (seconds each on two cores)."""

import gc
import json
import logging
import threading

import pytest
import torch

import opara
from conftest import Products, model_file

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def in_process(monkeypatch):
    """These tests are of Inductor's regions compiled in process (opara::native_region, the
    registry, Inductor's failures): the compile cache off, which would load AOTInductor's regions
    instead (its own tests: test_compile_cache.py)."""
    monkeypatch.setenv("OPARA_CACHE", "0")


class ThreeBranches(torch.nn.Module):
    """Three convolution branches of one input, joined; a second output reads one branch."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.c = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x):
        y = torch.relu(self.a(x)) * 2
        z = torch.sigmoid(self.b(x)) + 1
        w = torch.tanh(self.c(x))
        return y + z + w, y.sum()


class Attention(torch.nn.Module):
    """Three projections side by side, and views between the nodes of one region (head split,
    transposes): the views are recomputed inside the regions that read them."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))
        self.out = torch.nn.Linear(32, 32)

    def forward(self, x):
        def heads(t):
            return t.view(1, 8, 4, 8).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        attention = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1) @ v
        return self.out(attention.transpose(1, 2).reshape(1, 8, 32))


class Counter(torch.nn.Module):
    """Writes a buffer in place: state, which each call reads and writes."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return x * self.count


class CacheStep(torch.nn.Module):
    """A decode step's shape: writes this step's row into a cache buffer at `position`, and reads the
    whole cache; two branches read the input side by side."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 8))
        self.key, self.value = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x, position):
        self.cache.index_copy_(0, position, torch.relu(self.key(x)))
        return (self.cache * torch.sigmoid(self.value(x))).sum(0)


def close_to(actual, expected):
    # Inductor reorders float arithmetic: its own tolerance for float32.
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def model_and_input():
    torch.manual_seed(0)
    return ThreeBranches().eval(), torch.randn(1, 8, 32, 32)


def test_opara_compile_runs_each_region_compiled_by_inductor(library, model_and_input, caplog):
    model, x = model_and_input
    with torch.no_grad():
        expected = model(x)
        inductor = torch.compile(model)(x)
    # The plan's regions, as on a GPU (the CPU's default is one region: the next test).
    with caplog.at_level(logging.INFO, logger="opara"):
        compiled = opara.compile(model, [x], kernels="inductor", region_min_share=0.1, device="cpu", cpu_tuning_ms=0)
    kinds = compiled.plan()["kinds"]
    # On the CPU each region is called from C++ through Inductor's C++ wrapper entry.
    regions = compiled.stats()["regions"]
    assert kinds.count("opara::native_region") == regions > 1, kinds
    # Each region's compile is logged as it ends (a long compile says how far it got), and timed.
    logged = [record.getMessage() for record in caplog.records if record.name == "opara"]
    assert f"compiling {int(regions)} region(s) with Inductor" in logged[0]
    assert sum(" compiled in " in line for line in logged) == regions, logged
    assert compiled.stats()["region_compile_s"] > 0
    assert compiled.stats()["streams"] > 1, "the regions of the three branches run side by side"
    for _ in range(2):
        actual = compiled(x)
        close_to(actual, expected)
        close_to(actual, inductor)
    # The weights are frozen into the regions, and the regions live as long as the model.
    native = sorted(compiled._lowerings[0].regions.native)
    with pytest.raises(RuntimeError, match=r"the region compiled in .* takes \d+ inputs, not 0"):
        torch.ops.opara.native_region(native[0], [])
    del compiled
    gc.collect()
    from opara import _regions

    assert not _regions._REGIONS, "a dropped model left its regions registered"
    with pytest.raises(RuntimeError, match=f"no native region {native[0]} is registered"):
        torch.ops.opara.native_region(native[0], [x])


def canonical(streams):
    """Streams renamed by first appearance: two plans that group nodes alike read the same."""
    names = {}
    return [names.setdefault(stream, len(names)) for stream in streams]


@pytest.mark.parametrize("share", ["0", "0.1"])
def test_the_streams_that_run_are_the_streams_that_cut_the_regions(library, model_and_input, share):
    """One plan: the library cuts the regions, and the graph of region nodes it compiles runs each
    on the stream that cut it (no second plan of its own)."""
    from opara._frontend import program_archive

    model, x = model_and_input
    program = torch.export.export(model, (x,)).run_decompositions({})
    cut = json.loads(torch.ops.opara.region_plan(program_archive(program), "ThreeBranches", [x],
                                                 {"region_min_share": share}))
    first_node_of = {}
    for node in cut["launch_order"]:
        first_node_of.setdefault(cut["region_of"][node], node)
    cut_streams = [cut["stream_of"][first_node_of[region]] for region in range(cut["regions"])]
    compiled = opara.compile(model, [x], kernels="inductor", region_min_share=float(share), device="cpu",
                             cpu_tuning_ms=0)
    plan = compiled.plan()
    ran = [plan["stream_of"][node] for node in plan["launch_order"] if plan["kinds"][node] == "opara::native_region"]
    assert len(ran) == cut["regions"] > 1
    assert canonical(ran) == canonical(cut_streams), (ran, cut_streams)
    assert plan["streams"] == cut["streams"] > 1


@pytest.mark.parametrize("options", [{}, {"intra_op_threads": 1}, {"region_min_share": 0.1}],
                         ids=["one-stream", "one-thread-asked", "streams"])
def test_regions_on_one_stream_are_compiled_for_the_threads_that_run_them(library, model_and_input, options):
    """On one stream every region runs on the one worker: Inductor compiles its kernels for that
    worker's threads (as for itself: a kernel too small to share stays serial, where a team sized
    at run time opened a parallel region in each). Regions on several streams take each worker's
    team at run time. Either way the outputs are the module's."""
    from opara._frontend import program_archive

    model, x = model_and_input
    program = torch.export.export(model, (x,)).run_decompositions({})
    cut = json.loads(torch.ops.opara.region_plan(program_archive(program), "ThreeBranches", [x],
                                                 {key: str(value) for key, value in options.items()}))
    compiled = opara.compile(model, [x], kernels="inductor", device="cpu", cpu_tuning_ms=0, **options)
    with torch.no_grad():
        close_to(compiled(x), model(x))
    if "region_min_share" in options:
        assert "region_threads" not in cut and compiled.plan()["streams"] > 1
        return
    assert compiled.plan()["streams"] == 1
    assert cut["region_threads"] == compiled.stats()["intra_op_threads"] == options.get("intra_op_threads",
                                                                                      cut["region_threads"])
    assert cut["region_threads"] >= 1


def test_a_region_whose_entry_is_not_found_keeps_the_python_call(library, model_and_input, monkeypatch):
    from opara import _regions

    monkeypatch.setattr(_regions, "native_entry", lambda *args: None)
    model, x = model_and_input
    compiled = opara.compile(model, [x], kernels="inductor", region_min_share=0.1, device="cpu", cpu_tuning_ms=0)
    kinds = compiled.plan()["kinds"]
    assert kinds.count("opara::region") == compiled.stats()["regions"] > 1 and "opara::native_region" not in kinds
    with torch.no_grad():
        close_to(compiled(x), model(x))


def test_two_threads_compiling_regions_each_run_their_own_native_entries(library, model_and_input):
    """Finding a region's C++ entry patches two of Inductor's privates for the process: under
    Dynamo's compile lock, and recording only the compiling thread's calls, so two threads compiling
    at once each find their own entries and leave the originals in place."""
    from torch._inductor.codecache import PyCodeCache

    originals = (torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors, PyCodeCache.load_by_key_path)
    model, x = model_and_input
    results, errors = {}, []
    # torch 2.11's export crashes once the first thread that exported has ended (fixed in 2.15):
    # this thread exports first, and both threads stay until both are done.
    torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), strict=False)
    both_done = threading.Barrier(2)

    def compile_one(name, scale):
        try:
            results[name] = (opara.compile(model, [x * scale], kernels="inductor", region_min_share=0.1, device="cpu",
                                           cpu_tuning_ms=0), x * scale)
        except Exception as error:  # reported below, with the thread's name
            errors.append(f"{name}: {error}")
        both_done.wait()

    threads = [threading.Thread(target=compile_one, args=(name, scale)) for name, scale in (("one", 1.0), ("two", 2.0))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for compiled, example in results.values():
        kinds = compiled.plan()["kinds"]
        assert kinds.count("opara::native_region") == compiled.stats()["regions"] > 1, kinds
        with torch.no_grad():
            close_to(compiled(example), model(example))
    assert (torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors, PyCodeCache.load_by_key_path) == originals


def test_another_threads_entry_calls_are_not_recorded(library):
    from opara._inductor_compat import entry_inputs_recorded

    original = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors
    mine, theirs = torch.ones(2), torch.ones(3)
    with entry_inputs_recorded() as recorded:
        other = threading.Thread(target=lambda: torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors([theirs]))
        other.start()
        other.join()
        torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors([mine])
    assert [[t.data_ptr() for t in call] for call in recorded] == [[mine.data_ptr()]]
    assert torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors is original


def test_bad_native_region_registrations_are_named(library, tmp_path):
    with pytest.raises(RuntimeError, match=r"cannot load the region library .*missing\.so"):
        torch.ops.opara.register_native_region(-7, str(tmp_path / "missing.so"), 1, [], 1, [])
    ext = next(p for p in torch.ops.loaded_libraries if "opara_ext" in p)
    with pytest.raises(RuntimeError, match=r"has no _Z19inductor_entry_impl.* \(Inductor's C\+\+ wrapper entry\)"):
        torch.ops.opara.register_native_region(-7, ext, 1, [], 1, [])
    with pytest.raises(RuntimeError, match="output 3 to clone is not one of its 2"):
        torch.ops.opara.register_native_region(-7, ext, 1, [], 2, [3])


def test_on_the_cpu_the_whole_program_is_one_region_by_default(library, model_and_input):
    # Two cores' overlap did not beat Inductor's intra-op threads (opara/_regions.py).
    model, x = model_and_input
    compiled = opara.compile(model, [x], kernels="inductor", device="cpu", cpu_tuning_ms=0)
    assert compiled.plan()["kinds"] == ["opara::native_region"] and compiled.stats()["regions"] == 1
    with torch.no_grad():
        close_to(compiled(x), model(x))


def test_inductors_kernels_are_the_default_on_the_cpu(library, model_and_input, fresh_dynamo, recwarn):
    # kernels="auto": Inductor's on the CPU, where they measured faster (docs/benchmarks.md).
    model, x = model_and_input
    compiled = opara.compile(model, [x], device="cpu", cpu_tuning_ms=0)
    assert compiled.stats()["regions"] == 1
    with torch.no_grad():
        close_to(compiled(x), model(x))
        close_to(torch.compile(model, backend="opara", options={"fallback": "error"})(x), model(x))
    assert opara.dynamo_counters["regions"] == 1 and opara.dynamo_counters["fallbacks"] == 0
    # Where Inductor's cannot be had, ATen's, without a word: it was not asked for.
    compiled = opara.compile(model_file("branchy", "pt"), [torch.randn(1, 3, 32, 32)], device="cpu", cpu_tuning_ms=0)
    assert compiled.stats()["regions"] == 0
    assert not [w for w in recwarn if "opara" in str(w.message)], [str(w.message) for w in recwarn]


def test_when_inductor_fails_the_default_takes_atens_kernels_and_says_so(library, model_and_input, fresh_dynamo,
                                                                         monkeypatch):
    import opara._regions

    def failing(*args, **kwargs):
        raise RuntimeError("Inductor broke")

    monkeypatch.setattr(opara._regions, "compile_regions", failing)
    model, x = model_and_input
    with torch.no_grad():
        with pytest.warns(UserWarning, match="Inductor's kernels could not be compiled .*Inductor broke"):
            compiled = opara.compile(model, [x], device="cpu", cpu_tuning_ms=0)
        assert compiled.stats()["regions"] == 0 and compiled.stats()["aten_because"] == "inductor_failed"
        close_to(compiled(x), model(x))
        with pytest.warns(UserWarning, match="Inductor's kernels could not be compiled .*Inductor broke"):
            backend = torch.compile(model, backend="opara", options={"device": "cpu", "fallback": "error"})
            close_to(backend(x), model(x))
        assert opara.dynamo_counters["compiles"] == 1 and opara.dynamo_counters["regions"] == 0
        with pytest.raises(RuntimeError, match="Inductor broke"):  # asked for: no fallback
            opara.compile(model, [x], kernels="inductor", device="cpu", cpu_tuning_ms=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_atens_kernels_are_the_default_on_the_gpu(library, model_and_input, no_tf32):
    # Regions are not measured on a GPU yet: "auto" keeps ATen's there.
    model, x = model_and_input
    try:
        compiled = opara.compile(model.cuda(), [x.cuda()])
        assert compiled.stats()["regions"] == 0 and compiled.stats()["aten_because"] == "gpu_default"
        with torch.no_grad():
            close_to(compiled(x.cuda()), model(x.cuda()))
    finally:
        model.cpu()


def test_views_between_the_nodes_of_a_region_are_recomputed_in_it(library):
    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(1, 8, 32)
    compiled = opara.compile(model, [x], kernels="inductor", region_min_share=0.1, device="cpu", cpu_tuning_ms=0)
    assert compiled.stats()["regions"] > 1
    with torch.no_grad():
        close_to([compiled(x)], [model(x)])


def test_the_backend_folds_the_weights_and_compiles_again_when_one_is_written(library, fresh_dynamo):
    torch.manual_seed(0)
    model, x = ThreeBranches().eval(), torch.randn(1, 8, 32, 32)  # its own: the weights are written
    options = {"kernels": "inductor", "region_min_share": 0.1, "device": "cpu", "cpu_tuning_ms": 0, "fallback": "error"}
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", options=options)
        close_to(compiled(x), model(x))
        assert opara.dynamo_counters["regions"] > 1 and opara.dynamo_counters["compiles"] == 1
        # Folded into a region (its convolutions' weights are not: too small to pack, read at each
        # call): the graph is compiled again, reading the weights.
        model.a.bias.add_(1)
        close_to(compiled(x), model(x))
        assert opara.dynamo_counters["compiles"] == 2
        model.a.bias.mul_(0.5)  # read at each call now: no compile
        close_to(compiled(x), model(x))
        model.load_state_dict({**model.state_dict(), "b.bias": model.b.bias * 3})
        close_to(compiled(x), model(x))
        assert opara.dynamo_counters["compiles"] == 2
    assert opara.dynamo_counters["fallbacks"] == 0


def test_weights_made_under_inference_mode_are_read_not_folded(library, fresh_dynamo):
    # An inference tensor has no version counter to watch: it stays a region input.
    torch.manual_seed(0)
    with torch.inference_mode():
        model, x = ThreeBranches().eval(), torch.randn(1, 8, 32, 32)
        compiled = torch.compile(model, backend="opara", options={"device": "cpu", "fallback": "error"})
        close_to(compiled(x), model(x))
        model.c.bias.add_(1)  # allowed on an inference tensor inside inference mode
        close_to(compiled(x), model(x))
    assert opara.dynamo_counters["regions"] == 1 and opara.dynamo_counters["compiles"] == 1


def test_fold_weights_off_reads_the_weights_at_each_call(library, fresh_dynamo):
    # Even a write through .data, which moves no version counter (folded, it would not be seen).
    torch.manual_seed(0)
    model, x = ThreeBranches().eval(), torch.randn(1, 8, 32, 32)
    options = {"kernels": "inductor", "fold_weights": False, "device": "cpu", "cpu_tuning_ms": 0, "fallback": "error"}
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", options=options)
        close_to(compiled(x), model(x))
        model.c.bias.data.add_(1)
        close_to(compiled(x), model(x))
    assert opara.dynamo_counters["compiles"] == 1


def test_a_program_that_writes_a_buffer_reads_and_writes_it_at_each_call(library):
    x = torch.ones(3)
    compiled = opara.compile(Counter(), [x], kernels="inductor", device="cpu", cpu_tuning_ms=0)
    assert compiled.stats()["regions"] == 1
    # add_, the library's twin of add, in the region: the state handed on after it
    assert compiled.plan()["kinds"] == ["opara::native_region", "opara::written_in_region"]
    assert torch.equal(compiled(x), torch.full((3,), 1.0)) and torch.equal(compiled(x), torch.full((3,), 2.0))


class WritesACopy(torch.nn.Module):
    """Writes in place into a copy of its input in another dtype: `to` says it may alias its input,
    but here it copies, so the input is not state (transformers' StaticCache moves its CPU counter
    to the GPU so, then add_s to it: opara on CUDA refused that graph as writing a CPU input)."""

    def forward(self, x):
        wide = x.to(torch.float64)
        wide.add_(1.0)
        return (wide * 2.0).sin().to(torch.float32)


def test_a_write_into_a_copy_in_another_dtype_is_no_write_of_the_input(library):
    x = torch.randn(4, 8)
    kept = x.clone()
    compiled = opara.compile(WritesACopy(), [x], kernels="inductor", device="cpu", cpu_tuning_ms=0)
    # No write of state: the whole program is one region (a write of state would stay outside).
    assert compiled.stats()["regions"] == 1 and compiled.plan()["kinds"] == ["opara::native_region"]
    assert torch.allclose(compiled(x), WritesACopy()(x)) and torch.equal(x, kept)


@pytest.mark.parametrize("share", [None, 0.1])
def test_a_cache_written_at_a_position_matches_eager_step_by_step(library, share):
    torch.manual_seed(0)
    model, reference = CacheStep().eval(), CacheStep().eval()
    reference.load_state_dict(model.state_dict())
    x, options = torch.randn(1, 8), {} if share is None else {"region_min_share": share}
    compiled = opara.compile(model, [x, torch.tensor([0])], kernels="inductor", device="cpu", cpu_tuning_ms=0,
                             **options)
    kinds = compiled.plan()["kinds"]
    # The new row is written into the cache where it is, by the region that makes it (Inductor's
    # kernel writes the row): no ATen write between regions, no whole cache made and copied back,
    # with the plan's regions too; on the CPU's default the write cuts nothing.
    assert "aten::index_copy_" not in kinds and "aten::copy_" not in kinds, kinds
    assert kinds.count("opara::written_in_region") == 1, kinds
    assert compiled.stats()["regions"] == 1 if share is None else compiled.stats()["regions"] >= 1
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(1, 8)
            close_to([compiled(x, torch.tensor([step]))], [reference(x, torch.tensor([step]))])


def test_the_backend_writes_a_models_buffer_through_regions(library, fresh_dynamo):
    torch.manual_seed(0)
    model, reference = CacheStep().eval(), CacheStep().eval()
    reference.load_state_dict(model.state_dict())
    options = {"kernels": "inductor", "device": "cpu", "cpu_tuning_ms": 0, "fallback": "error"}
    compiled = torch.compile(model, backend="opara", options=options)
    with torch.no_grad():
        for step in range(3):
            x = torch.randn(1, 8)
            close_to([compiled(x, torch.tensor([step]))], [reference(x, torch.tensor([step]))])
    assert opara.dynamo_counters["regions"] >= 1 and opara.dynamo_counters["fallbacks"] == 0
    torch.testing.assert_close(model.cache, reference.cache, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernels,dynamic", [("aten", False), ("inductor", False), ("inductor", True)])
def test_members_of_one_class_share_dynamos_graph_and_keep_their_own_compiles(library, fresh_dynamo, kernels,
                                                                               dynamic):
    # Dynamo guards the parameters' properties, not which they are: an ensemble's members share its
    # graph. Each call of another member found the weights moved and compiled the graph again, and
    # with dynamic shapes a new shape of one was compiled from another's program, with that one's
    # weights folded in (outputs 5.7 off).
    torch.manual_seed(0)
    members = [ThreeBranches().eval() for _ in range(3)]
    options = {"kernels": kernels, "device": "cpu", "cpu_tuning_ms": 0, "fallback": "error"}
    compiled = [torch.compile(member, backend="opara", options=options, dynamic=dynamic) for member in members]
    sizes = [32, 24] if dynamic else [32]
    with torch.no_grad():
        for _ in range(3):
            for size in sizes:
                x = torch.randn(1, 8, size, size)
                for member, call in zip(members, compiled):
                    close_to(call(x), member(x))
        assert opara.dynamo_counters["graphs"] == 1
        compiles = opara.dynamo_counters["compiles"]
        assert compiles == len(members) * len(sizes)
        members[1].a.bias.add_(1)  # folded with Inductor's kernels: that member alone compiled again
        for member, call in zip(members, compiled):
            close_to(call(x), member(x))
    assert opara.dynamo_counters["compiles"] == compiles + (kernels == "inductor")
    assert opara.dynamo_counters["fallbacks"] == 0


def frozen_trace_backend(options, weights_passed):
    """opara's backend for torch.compile(model, backend=...), noting how many parameters Dynamo
    passed it: none under a frozen trace."""
    from opara._dynamo import opara_backend

    def backend(graph, example_inputs):
        weights_passed.append(sum(isinstance(value, torch.nn.Parameter) for value in example_inputs))
        return opara_backend(graph, example_inputs, options=options)

    return backend


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_under_a_frozen_trace_the_weights_are_folded_and_a_write_is_seen(library, fresh_dynamo, kernels):
    # torch._inductor.config.freezing set for the process, as PyTorch's CPU inference guide sets
    # it: Dynamo passes no weight, it makes them attributes of its graph. They were then constants
    # of opara's program, folded in for good: a weight written in place was not seen (branchy's
    # outputs 0.14 off after its first convolution's weight doubled).
    from torch._inductor import config

    torch.manual_seed(0)
    model, x = ThreeBranches().eval(), torch.randn(1, 8, 32, 32)
    weights_passed = []
    options = {"kernels": kernels, "device": "cpu", "cpu_tuning_ms": 0, "fallback": "error"}
    with torch.no_grad(), config.patch(freezing=True):
        compiled = torch.compile(model, backend=frozen_trace_backend(options, weights_passed))
        close_to(compiled(x), model(x))
        assert weights_passed == [0]  # the trace this test is about
        model.a.weight.mul_(2)  # a convolution's weight, folded into the region with Inductor's kernels
        close_to(compiled(x), model(x))
        model.load_state_dict({**model.state_dict(), "c.bias": model.c.bias * 3})
        close_to(compiled(x), model(x))
        model.b.weight.data = model.b.weight.data * 0.5  # another memory under the same parameter
        close_to(compiled(x), model(x))
    assert weights_passed == [0] and opara.dynamo_counters["fallbacks"] == 0


def test_under_a_frozen_trace_the_backend_writes_a_models_buffer(library, fresh_dynamo):
    from torch._inductor import config

    torch.manual_seed(0)
    model, reference = CacheStep().eval(), CacheStep().eval()
    reference.load_state_dict(model.state_dict())
    weights_passed = []
    options = {"kernels": "inductor", "device": "cpu", "cpu_tuning_ms": 0, "fallback": "error"}
    with torch.no_grad(), config.patch(freezing=True):
        compiled = torch.compile(model, backend=frozen_trace_backend(options, weights_passed))
        for step in range(3):
            x = torch.randn(1, 8)
            close_to([compiled(x, torch.tensor([step]))], [reference(x, torch.tensor([step]))])
    assert weights_passed == [0] and opara.dynamo_counters["fallbacks"] == 0
    torch.testing.assert_close(model.cache, reference.cache, rtol=1e-4, atol=1e-5)


def test_a_torchscript_file_is_compiled_with_atens_kernels_and_says_so(library):
    path = model_file("branchy", "pt")
    with pytest.warns(UserWarning, match="kernels='inductor' needs a torch.export program"):
        compiled = opara.compile(path, [torch.randn(1, 3, 32, 32)], kernels="inductor", device="cpu",
                                 cpu_tuning_ms=0)
    assert compiled.stats()["regions"] == 0


def test_a_bad_kernels_value_is_named(library):
    # The backend's: tests/python/test_dynamo_backend.py, test_bad_options_raise_naming_the_option.
    with pytest.raises(ValueError, match="opara.compile option kernels='triton': expected 'auto'"):
        opara.compile(ThreeBranches(), [torch.randn(1, 8, 8, 8)], kernels="triton")


def test_a_graph_set_compiles_the_regions_of_each_bucket(library):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    x = torch.randn(2, 16)
    graph_set = opara.compile_graph_set(model, [x], [1, 4], kernels="inductor", device="cpu", cpu_tuning_ms=0)
    assert graph_set.stats()["regions"] == 2, "each bucket is a program of its own, with its own region"
    for rows in (1, 3, 4):
        call = torch.randn(rows, 16)
        with torch.no_grad():
            close_to([graph_set(call)], [model(call)])


def convolutions(channels, size, transposed=False):
    """Two convolutions with a ReLU between them, on `channels` channels of size x size."""
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d if transposed else torch.nn.Conv2d
    model = torch.nn.Sequential(conv(channels, channels, 3, padding=1), torch.nn.ReLU(),
                                conv(channels, channels, 3, padding=1)).eval()
    return model, torch.randn(1, channels, size, size)


@pytest.mark.parametrize("channels, size, transposed, unfolded", [
    (32, 8, False, True),    # 1.2 MFLOP each, the tiny UNet's kind: ATen's calls
    (64, 32, False, False),  # 75 MFLOP each: oneDNN's packed convolutions
    (32, 8, True, False),    # transposed: not counted, left to freezing
])
def test_the_weights_of_a_program_of_small_convolutions_are_not_packed(library, channels, size, transposed,
                                                                       unfolded):
    """Folded, a convolution's weight is packed for oneDNN by Inductor's freezing, whose call costs
    more than a small convolution: a program whose convolutions are all small keeps their weights
    region inputs (ATen's calls), and its outputs are the module's."""
    from torch._dynamo.utils import counters

    from opara._partition import small_convolution_weights

    model, x = convolutions(channels, size, transposed)
    program = torch.export.export(model, (x,)).run_decompositions({})
    weights = small_convolution_weights(program.graph_module.graph)
    assert len(weights) == (2 if unfolded else 0), weights
    packed = counters["inductor"]["mkldnn_conv_weight_pack_matcher_count"]
    compiled = opara.compile(model, [x], kernels="inductor", device="cpu", cpu_tuning_ms=0)
    with torch.no_grad():
        close_to([compiled(x)], [model(x)])
    regions = compiled._lowerings[0].regions
    if unfolded:
        assert len(regions.constants) == 2, "both weights passed to the region, not folded in"
        assert counters["inductor"]["mkldnn_conv_weight_pack_matcher_count"] == packed
    elif not transposed and torch.backends.mkldnn.is_available():
        assert counters["inductor"]["mkldnn_conv_weight_pack_matcher_count"] > packed


@pytest.mark.parametrize("shape, packed", [
    ((1, 16), True),      # a decode step's products at batch 1: packed for MKL, as inductor-best runs them
    ((1, 1, 16), True),   # with a sequence dimension of one
    ((4, 16), False),     # four rows: the weights stay region inputs, in their own layout
])
@pytest.mark.parametrize("route", ["opara.compile", "backend"])
def test_a_program_whose_products_take_one_row_folds_its_linear_weights(library, fresh_dynamo, shape, packed,
                                                                        route):
    """Unfolded, a one-row product's row is copied by ATen's mm first (Inductor passes it with stride
    0 along the row); folded, freezing packs the weights for MKL. A program of more rows keeps
    them unfolded (freezing's layout ran bert_base's products slower). Outputs are the module's."""
    from torch._dynamo.utils import counters

    from opara._partition import linear_weights

    torch.manual_seed(0)
    model, x = Products().eval(), torch.randn(shape)
    program = torch.export.export(model, (x,)).run_decompositions({})
    assert len(linear_weights(program.graph_module.graph)) == (0 if packed else 2)
    before = counters["inductor"]["mkldnn_linear_weight_pack_matcher_count"]
    options = {"kernels": "inductor", "device": "cpu", "cpu_tuning_ms": 0}
    compiled = (opara.compile(model, [x], **options) if route == "opara.compile"
                else torch.compile(model, backend="opara", options={**options, "fallback": "error"}))
    with torch.no_grad():
        close_to([compiled(x)], [model(x)])
    packs = counters["inductor"]["mkldnn_linear_weight_pack_matcher_count"] - before
    if not packed:
        assert packs == 0, "the weights of products of four rows were folded and packed"
    elif torch.backends.mkldnn.is_available():
        assert packs == 2, f"{packs} of the two one-row products' weights packed"
    if route == "backend":  # a folded weight written in place: compiled again, its outputs the module's
        with torch.no_grad():
            model.a.weight.mul_(2)
            close_to([compiled(x)], [model(x)])
        assert opara.dynamo_counters["fallbacks"] == 0


def test_a_weight_read_by_a_convolution_and_something_else_stays_folded(library):
    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 1)

        def forward(self, x):
            return self.conv(x) + self.conv.weight.sum()

    from opara._partition import small_convolution_weights

    program = torch.export.export(Shared().eval(), (torch.randn(1, 8, 4, 4),)).run_decompositions({})
    weights = small_convolution_weights(program.graph_module.graph)
    assert not any("weight" in name for name in weights), weights
