"""A decoder that owns its KV caches, gpt-fast's way (scripts/opara_models/decoder.py: a KVCache with
two buffers per layer, written at the position the call gives, the position an input tensor),
greedily decoded through opara.compile: from the module with both kernel choices and from its
.pt2; the tokens are eager's and after every step each cache equals the eager module's. The C++
API's twin is tests/cpp/compile/test_decoder_state.cpp. On a GPU (skipped without one) the
position is a device tensor and every step replays the captured graph (no eager fallback).
"""

import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch

import opara

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from opara_models.decoder import Decoder, DecoderConfig, greedy_decode  # noqa: E402

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
PROMPT, NEW_TOKENS = 5, 8


def decoder_and_prompt(device):
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(max_seq=PROMPT + NEW_TOKENS)).eval().to(device)
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    return model, prompt.to(device)


def eager_decoding(model, prompt):
    """Eager's tokens, and its caches after each step."""
    model = copy.deepcopy(model)
    caches = []
    with torch.no_grad():
        tokens = greedy_decode(model, prompt, NEW_TOKENS, lambda position: caches.append(
            {name: value.clone() for name, value in model.caches().items()}))
    return tokens, caches


def expect_eagers_decoding(compiled, model, prompt, kernels):
    expected_tokens, expected_caches = eager_decoding(model, prompt)
    assert sorted(compiled.state()) == sorted(model.caches()), "each layer's K and V caches are the model's state"

    def check_state(position):
        for name, value in compiled.state().items():
            expected = expected_caches[position][name]
            assert torch.allclose(value, expected, rtol=1e-4, atol=1e-5), f"step {position}: {name}"

    tokens = greedy_decode(compiled, prompt, NEW_TOKENS, check_state)
    assert torch.equal(tokens, expected_tokens), f"{kernels}: {tokens.tolist()} against eager's {expected_tokens.tolist()}"
    assert len(set(expected_tokens.flatten().tolist())) > 2, "a decoding of one repeated token checks little"


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_greedy_decoding_through_opara_compile_gives_eagers_tokens_and_caches(library, kernels):
    model, prompt = decoder_and_prompt("cpu")
    example = [prompt[:, :1], torch.tensor([0])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = opara.compile(model, example, kernels=kernels, cpu_tuning_ms=0)
    # Every region Inductor's (none left as ATen nodes), nothing fallen back to ATen's kernels.
    assert [str(w.message) for w in caught if str(w.message).startswith("opara:")] == []
    for name, value in model.caches().items():
        assert not value.any(), f"opara.compile wrote the module's {name}"
    expect_eagers_decoding(compiled, model, prompt, kernels)
    for name, value in model.caches().items():
        assert not value.any(), f"the compiled model wrote the module's own {name}, not its state()"


def test_greedy_decoding_of_the_pt2_gives_eagers_tokens_and_caches(library, tmp_path):
    model, prompt = decoder_and_prompt("cpu")
    example = (prompt[:, :1], torch.tensor([0]))
    path = tmp_path / "decoder.pt2"
    with torch.no_grad():
        torch.export.save(torch.export.export(copy.deepcopy(model), example, strict=False), path)
    compiled = opara.compile(path, list(example), kernels="aten", cpu_tuning_ms=0)
    expect_eagers_decoding(compiled, model, prompt, "aten")


@GPU
@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_on_the_gpu_every_step_replays_the_captured_graph(library, no_tf32, kernels):
    model, prompt = decoder_and_prompt("cuda")
    compiled = opara.compile(model, [prompt[:, :1], torch.tensor([0], device="cuda")], kernels=kernels)
    expect_eagers_decoding(compiled, model, prompt, kernels)
    stats = compiled.stats()
    assert stats["eager_fallbacks"] == 0 and stats["runs"] == PROMPT + NEW_TOKENS - 1, stats
