"""State a model keeps between calls, through opara.compile on .pt2 files in both of
torch.export's forms (tests/data/make_fixtures.py): a counter buffer the compiled model keeps
(CompiledModel.state()) and a cache input written at a position the call gives. Three calls give
the scripted module's outputs and state, on the CPU and (skipped without one) on a GPU, where the
torch.compile backend's state_in_place writes the caller's cache where it lives."""

from pathlib import Path

import pytest
import torch

import opara

DATA = Path(__file__).resolve().parents[1] / "data"
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="no CUDA GPU here: the CUDA path is not run"))]
FORMS = ["", "_functional"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", FORMS)
def test_a_counter_buffer_counts_as_eager(library, form, device):
    reference = torch.jit.load(str(DATA / "counter.pt"))
    x = torch.randn(2, 3)
    compiled = opara.compile(DATA / f"counter{form}.pt2", [x.to(device)], cpu_tuning_ms=0)
    assert list(compiled.state()) == ["count"]
    assert compiled.state()["count"].item() == 0, "compiling advanced the counter"
    for call in range(1, 4):
        expected = reference(x)
        assert torch.allclose(compiled(x.to(device)).cpu(), expected, atol=1e-5), f"call {call}"
        assert compiled.state()["count"].item() == reference.count.item() == call
    compiled.state()["count"].fill_(10)  # state handed in
    reference.count.fill_(10)
    assert torch.allclose(compiled(x.to(device)).cpu(), reference(x), atol=1e-5)
    assert compiled.state()["count"].item() == 11


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("in_place", [False, True])
def test_a_cache_input_is_written_as_eager(library, form, device, in_place):
    reference = torch.jit.load(str(DATA / "cache_update.pt"))
    x = torch.randn(1, 4)
    first = torch.randn(5, 4)
    cache = first.to(device, copy=True)
    expected_cache = first.clone()
    compiled = opara.compile(DATA / f"cache_update{form}.pt2", [x.to(device), cache, torch.tensor([0]).to(device)],
                             cpu_tuning_ms=0, state_in_place=in_place)
    assert torch.equal(cache.cpu(), first), "compiling wrote the caller's cache"
    for call in range(3):
        row, position = x * (call + 1), torch.tensor([call])
        expected = reference(row, expected_cache, position)
        assert torch.allclose(compiled(row.to(device), cache, position.to(device)).cpu(), expected), f"call {call}"
        assert torch.equal(cache.cpu(), expected_cache), f"the cache after call {call}"
    if in_place and device == "cuda":
        with pytest.raises(RuntimeError, match="static"):  # captured at the first cache's address
            compiled(x.to(device), cache.clone(), torch.tensor([0]).to(device))
