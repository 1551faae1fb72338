"""The compile cache (issue 44): a compile with Inductor's kernels is kept on disk as a package and
loaded by the next compile of the same model, inputs and options, in this process or another
(opara.compile and torch.compile(backend="opara")); what changes the compile changes the key; a
damaged or stale entry is compiled again with a warning; the folder is the owner's alone and
bounded. Each test has a cache folder of its own (tmp_path), so that what it counts is its own."""

import json
import os
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import opara
from opara._package_file import keep_choice, read_info

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Small(torch.nn.Module):
    """A convolution and a linear layer: one region, an AOTInductor compile of a few seconds."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def _small(seed=0):
    torch.manual_seed(seed)
    return Small().eval(), torch.randn(2, 3, 8, 8)


def _entries(folder):
    return sorted(folder.glob("*.opara"))


def _compile(model, x, folder, **options):
    return opara.compile(model, [x], kernels="inductor", cache_dir=str(folder), cpu_tuning_ms=0, **options)


def _equal_to_module(compiled, model, x):
    with torch.no_grad():
        expected = model(x)
    assert torch.allclose(compiled(x), expected, rtol=1e-4, atol=1e-5), (compiled(x) - expected).abs().max()


def test_a_second_compile_of_the_same_model_loads_the_first(library, tmp_path):
    model, x = _small()
    first = _compile(model, x, tmp_path)
    assert first.stats()["cache"] == "stored"
    (entry,) = _entries(tmp_path)
    second = _compile(model, x, tmp_path)
    assert second.stats()["cache"] == "hit" and _entries(tmp_path) == [entry]
    assert second.stats()["kernels"] == "inductor" and second.stats()["regions"] == 1
    _equal_to_module(second, model, x)
    _equal_to_module(second, model, x * 3)  # new values, same signature


def test_the_folder_and_its_entries_are_the_owners_alone(library, tmp_path):
    folder = tmp_path / "cache"
    model, x = _small()
    _compile(model, x, folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (entry,) = _entries(folder)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert not [path for path in folder.iterdir() if path.suffix != ".opara"]  # no partial file left


def test_a_folder_others_may_write_is_not_used_with_a_warning(library, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    model, x = _small()
    with pytest.warns(UserWarning, match=r"others may write into the cache folder .*shared.*cache_dir"):
        compiled = _compile(model, x, folder)
    assert compiled.stats()["cache"].startswith("bypassed: others may write")
    assert not _entries(folder)
    _equal_to_module(compiled, model, x)


def test_the_cache_is_off_by_option_and_by_environment(library, tmp_path, monkeypatch):
    model, x = _small()
    off = _compile(model, x, tmp_path, cache=False)
    assert off.stats()["cache"] == "off" and not _entries(tmp_path)
    monkeypatch.setenv("OPARA_CACHE", "0")
    assert _compile(model, x, tmp_path).stats()["cache"] == "off" and not _entries(tmp_path)
    with pytest.raises(TypeError, match=r"option cache='yes': expected True"):
        _compile(model, x, tmp_path, cache="yes")


def test_on_cuda_the_cache_is_used_when_asked_for_and_on_the_cpu_by_default(monkeypatch):
    from opara._cache import default_refusal, settings

    assert default_refusal("cpu", asked=False) == ""
    assert default_refusal("cuda:0", asked=False).startswith("not by default on CUDA")
    assert default_refusal("cuda:0", asked=True) == ""
    monkeypatch.delenv("OPARA_CACHE", raising=False)
    assert not settings({}, "opara.compile").asked, "the default is not asking"
    assert settings({"cache": True}, "opara.compile").asked
    monkeypatch.setenv("OPARA_CACHE", "1")
    assert settings({}, "opara.compile").asked
    assert settings({"cache": False}, "opara.compile").folder is None


def test_the_environment_names_the_folder(library, tmp_path, monkeypatch):
    monkeypatch.setenv("OPARA_CACHE_DIR", str(tmp_path / "from_env"))
    model, x = _small()
    assert opara.compile(model, [x], kernels="inductor", cpu_tuning_ms=0).stats()["cache"] == "stored"
    assert len(_entries(tmp_path / "from_env")) == 1


@pytest.mark.parametrize("change", ["weights", "options", "shape", "dtype"])
def test_what_changes_the_compile_changes_the_key(library, tmp_path, change):
    model, x = _small()
    _compile(model, x, tmp_path)
    options = {}
    if change == "weights":
        model, _ = _small(seed=1)
    elif change == "options":
        options = {"streams": "single"}
    elif change == "shape":
        x = torch.randn(3, 3, 8, 8)
    else:
        model, x = model.double(), x.double()
    compiled = _compile(model, x, tmp_path, **options)
    # float64 too: oneDNN's packed convolution takes none, but Small's convolution is too small to be
    # packed (small_convolution_weights) and runs as ATen's.
    assert compiled.stats()["cache"] == "stored" and len(_entries(tmp_path)) == 2, compiled.stats()["cache"]
    _equal_to_module(compiled, model, x)


@pytest.mark.parametrize("damage", ["truncated", "another torch"])
def test_a_damaged_or_stale_entry_is_compiled_again_with_a_warning(library, tmp_path, damage):
    from test_package import _records, _rewrite

    model, x = _small()
    _compile(model, x, tmp_path)
    (entry,) = _entries(tmp_path)
    if damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:5000])
    else:
        records = _records(entry)
        meta = json.loads(records["opara/meta.json"])
        records["opara/meta.json"] = json.dumps({**meta, "torch": "2.9.0+cpu"}).encode()
        entry.unlink()
        _rewrite(records, entry)
    with pytest.warns(UserWarning, match=r"compile cache's entry .* for Small did not load .*compiled again"):
        compiled = _compile(model, x, tmp_path)
    assert compiled.stats()["cache"] == "stored" and _entries(tmp_path) == [entry]
    _equal_to_module(compiled, model, x)


def test_the_entries_used_longest_ago_are_removed_past_the_bound(library, tmp_path, monkeypatch):
    """Entry sizes vary from compile to compile (AOTInductor's libraries: 0.84 to 1.16 MB here), so
    the bound is set from the first entry's size and what stays is checked against the sizes."""
    model, x = _small()
    _compile(model, x, tmp_path)
    (first,) = _entries(tmp_path)
    first_size = first.stat().st_size
    bound = int(1.5 * first_size)
    monkeypatch.setenv("OPARA_CACHE_MAX_MB", str(bound / (1 << 20)))
    other, _ = _small(seed=1)
    _compile(other, x, tmp_path)
    newest = [entry for entry in _entries(tmp_path) if entry != first]
    assert len(newest) == 1  # the newest stays
    # The entry used longest ago goes, and only when the two together pass the bound.
    assert first.exists() == (first_size + newest[0].stat().st_size <= bound)
    assert sum(entry.stat().st_size for entry in _entries(tmp_path)) <= bound
    smallest = min(entry.stat().st_size for entry in _entries(tmp_path))
    monkeypatch.setenv("OPARA_CACHE_MAX_MB", str(0.1 * smallest / (1 << 20)))
    third, _ = _small(seed=2)
    alone = _compile(third, x, tmp_path)  # alone past the bound: loaded, not kept
    assert alone.stats()["cache"] == "stored" and not _entries(tmp_path)
    _equal_to_module(alone, third, x)


@torch.library.custom_op("opara_cache_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


class CallsACustomOp(Small):
    def forward(self, x):
        return torch.ops.opara_cache_test.twice(super().forward(x))


def test_a_program_calling_an_op_the_key_cannot_see_is_compiled_as_before(library, tmp_path):
    torch.manual_seed(0)
    model, x = CallsACustomOp().eval(), torch.randn(2, 3, 8, 8)
    compiled = _compile(model, x, tmp_path)
    assert "opara_cache_test.twice" in compiled.stats()["cache"] and compiled.stats()["cache"].startswith("bypassed")
    assert not _entries(tmp_path)
    _equal_to_module(compiled, model, x)


class Counts(torch.nn.Module):
    """State written in place: a counter added to the output and advanced at each call."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return self.fc(x) + self.calls


def test_state_written_in_place_runs_from_a_hit_as_from_the_compile(library, tmp_path):
    torch.manual_seed(0)
    model, x = Counts().eval(), torch.randn(2, 4)
    first = _compile(model, x, tmp_path)
    second = _compile(model, x, tmp_path)
    assert second.stats()["cache"] == "hit"
    for call in range(1, 4):
        expected = model.fc(x) + call
        for compiled in (first, second):
            assert torch.allclose(compiled(x), expected, rtol=1e-5, atol=1e-5)
            assert compiled.state()["calls"].item() == call
    assert model.calls.item() == 0  # compiling never advances the module's own state


def test_a_hit_runs_the_schedule_the_first_load_tuned_without_tuning_again(library, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU: there is one schedule and nothing to tune")
    from test_inductor_regions import ThreeBranches

    torch.manual_seed(0)
    model, x = ThreeBranches().eval(), torch.randn(1, 8, 32, 32)
    # The plan's regions on streams of their own: a schedule the CPU tuner chooses.
    options = {"kernels": "inductor", "region_min_share": 0.1, "cache_dir": str(tmp_path), "cpu_tuning_ms": 50}
    first = opara.compile(model, [x], **options)
    stored = first.stats()
    assert stored["cache"] == "stored" and stored["tuning_ms"] > 0 and stored["tuning"], stored
    (entry,) = _entries(tmp_path)
    kept = read_info(str(entry))["choice"]
    assert kept["machine"] == f"{len(os.sched_getaffinity(0))} CPUs", kept
    assert kept["options"] == dict(first._handle.chosen_options()), kept
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600  # written again with it, still its owner's alone
    second = opara.compile(model, [x], **options)
    hit = second.stats()
    assert hit["cache"] == "hit" and hit["tuning_ms"] == 0 and hit["tuning"] == [], hit
    assert (hit["streams"], hit["intra_op_threads"]) == (stored["streams"], stored["intra_op_threads"])
    assert second.plan()["stream_of"] == first.plan()["stream_of"]
    with torch.no_grad():
        expected = model(x)
    for got, want in zip(second(x), expected):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    # A choice made on another machine is not taken: tuned again, and this machine's kept instead.
    keep_choice(entry, json.dumps({"machine": "a machine of 1000 CPUs", "options": kept["options"]}), mode=0o600)
    assert opara.compile(model, [x], **options).stats()["tuning_ms"] > 0
    assert read_info(str(entry))["choice"]["machine"] == kept["machine"]
    # A damaged one: the entry is refused naming it, removed and compiled again.
    keep_choice(entry, "{not json", mode=0o600)
    with pytest.warns(UserWarning, match="opara/choice.json is damaged"):
        again = opara.compile(model, [x], **options)
    assert again.stats()["cache"] == "stored" and again.stats()["tuning_ms"] > 0


_PROCESS = textwrap.dedent("""
    import json, sys, torch, opara
    sys.path.insert(0, {tests!r})
    from test_compile_cache import _small
    model, x = _small()
    with torch.no_grad():
        if sys.argv[1] == "backend":
            compiled = torch.compile(model, backend="opara", options={{"kernels": "inductor", "cpu_tuning_ms": 0}})
            output = compiled(x)
            cache = opara.dynamo_compiles[-1]["cache"]
        else:
            compiled = opara.compile(model, [x], kernels="inductor", cpu_tuning_ms=0)
            output = compiled(x)
            cache = compiled.stats()["cache"]
        close = torch.allclose(output, model(x), rtol=1e-4, atol=1e-5)
    print("RESULT " + json.dumps({{"cache": cache, "close": close, "hits": opara.dynamo_counters["cache_hits"]}}))
""")


@pytest.mark.parametrize("route", ["compile", "backend"])
def test_a_second_process_loads_what_the_first_compiled(library, tmp_path, route):
    script = _PROCESS.format(tests=os.path.dirname(__file__))
    env = {**os.environ, "OPARA_CACHE_DIR": str(tmp_path)}
    results = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", script, route], capture_output=True, text=True, timeout=900,
                             env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        # AOTInductor's compile inside the backend leaves Dynamo's event log as it found it.
        assert "Start event not in stack" not in run.stderr, run.stderr[-3000:]
        results.append(json.loads(run.stdout.split("RESULT ")[-1]))
    assert [result["cache"] for result in results] == ["stored", "hit"], results
    assert all(result["close"] for result in results)
    if route == "backend":
        assert [result["hits"] for result in results] == [0, 1]
    assert len(_entries(tmp_path)) == 1


def test_a_backend_weight_written_in_place_after_a_hit_is_read_from_then_on(fresh_dynamo, tmp_path):
    model, x = _small()
    options = {"kernels": "inductor", "cpu_tuning_ms": 0, "cache_dir": str(tmp_path)}
    with torch.no_grad():
        torch.compile(model, backend="opara", options=options)(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="opara", options=options)
        compiled(x)
        assert opara.dynamo_compiles[-1]["cache"] == "hit"
        assert "loaded from the compile cache" in opara.describe_compile(opara.dynamo_compiles[-1])
        model.fc.weight.mul_(-1)  # its version moves: the graph compiles again, reading the weights
        assert torch.allclose(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_a_cache_entry_holds_no_example_inputs_and_a_call_of_another_signature_is_refused(library, tmp_path):
    model, x = _small()
    _compile(model, x, tmp_path)
    (entry,) = _entries(tmp_path)
    with pytest.raises(RuntimeError, match=r"holds no example inputs \(a compile cache entry"):
        opara.load(entry)
    options = {"device": "cpu", "cpu_tuning_ms": "0"}
    with pytest.raises(RuntimeError, match=r"input 0 has sizes \[1, 3, 8, 8\], and the package was made for \[2, 3, 8, "
                                           r"8\]"):
        torch.classes.opara.Model.from_package(str(entry), options, [x[:1]])
    with pytest.raises(RuntimeError, match=r"input 0 is Double, and the package was made for float32"):
        torch.classes.opara.Model.from_package(str(entry), options, [x.double()])
    with pytest.raises(RuntimeError, match=r"the package takes 1 inputs, and 2 were given"):
        torch.classes.opara.Model.from_package(str(entry), options, [x, x])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # loading it for the right inputs is quiet
        model_ = torch.classes.opara.Model.from_package(str(entry), options, [x])
    with torch.no_grad():
        assert torch.allclose(model_.run([x])[0], model(x), rtol=1e-4, atol=1e-5)


def test_a_compile_aotinductor_refused_goes_in_process_and_is_not_tried_again(library, tmp_path, monkeypatch):
    from opara import _regions

    tries = []

    def refused(region, *_):
        tries.append(region.index)
        raise ValueError("AOTInductor's regions take tensors only, and this one reads a number")

    monkeypatch.setattr(_regions, "_ahead_of_time", refused)
    model, x = _small()
    for _ in range(2):
        compiled = _compile(model, x, tmp_path)
        assert compiled.stats()["cache"].startswith("bypassed: AOTInductor refused a region"), compiled.stats()["cache"]
        assert compiled.stats()["kernels"] == "inductor" and compiled.stats()["regions"] == 1  # Inductor in process
        _equal_to_module(compiled, model, x)
    assert len(tries) == 1, "the refusal is kept: the second compile does not try AOTInductor again"
    assert not _entries(tmp_path) and len(list(tmp_path.glob("*.refused"))) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: the cache's CUDA entries are compiled there")
def test_a_cuda_compile_is_stored_and_the_next_one_loads_it_into_the_captured_graph(fresh_dynamo, tmp_path):
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    model, x = _small()
    model, x = model.cuda(), x.cuda()
    with torch.no_grad():
        expected = model(x).cpu()
        # Not by default on CUDA (an entry is an AOTInductor package): asked for.
        assert opara.compile(model, [x], kernels="inductor", cache_dir=str(tmp_path)).stats()["cache"].startswith(
            "bypassed: not by default on CUDA")
        made = [opara.compile(model, [x], kernels="inductor", cache=True, cache_dir=str(tmp_path)) for _ in range(2)]
        assert [compiled.stats()["cache"] for compiled in made] == ["stored", "hit"]
        for compiled in made:
            for _ in range(3):  # replays of the captured graph
                assert torch.allclose(compiled(x).cpu(), expected, rtol=1e-4, atol=1e-5)
        options = {"kernels": "inductor", "cache": True, "cache_dir": str(tmp_path), "fallback": "error"}
        for _ in range(2):  # the backend's graph: stored, then loaded after Dynamo forgets it
            torch._dynamo.reset()
            assert torch.allclose(torch.compile(model, backend="opara", options=options)(x).cpu(), expected,
                                  rtol=1e-4, atol=1e-5)
        assert opara.dynamo_counters["cache_hits"] == 1
