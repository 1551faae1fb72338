"""The baselines the benches compare opara with run as configured (bench/inductor_backends.py):
Inductor at its best for inference on the CPU (inductor-best: freezing and its C++ wrapper) gives
eager's outputs with its weights frozen and packed, and every row's ratio to it is reported, as the
README's comparison reads it."""

import argparse
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import torch_compile_bench  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ARGS = argparse.Namespace(iters=2, rounds=1, warmup=1, settle_ms=0)


def test_inductor_at_its_best_gives_eagers_outputs_and_each_row_its_ratio_to_it(fresh_dynamo):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 4)).eval()
    x = torch.randn(1, 3, 8, 8)
    from torch._dynamo.utils import counters

    packed = counters["inductor"]["mkldnn_conv_weight_pack_matcher_count"]
    with torch.no_grad():
        rows = {row["backend"]: row for row in torch_compile_bench.measure_model(
            "tiny", model, [x], torch.device("cpu"), ["eager", "inductor", "inductor-best"], ARGS)}
    best = rows["inductor-best"]
    assert "error" not in best, best
    assert best["max_rel_diff"] < 1e-4, best
    assert best["speedup_vs_inductor_best"] == 1.0
    assert rows["eager"]["speedup_vs_inductor_best"] > 0
    # Frozen as PyTorch's CPU inference guides freeze (torch._inductor.config itself): the weights
    # folded in and the convolution's packed for oneDNN. Given as torch.compile's options, freezing
    # reaches Inductor but not Dynamo, which then passes the weights as inputs: nothing is packed.
    # Compiled after Inductor's default, it is compiled all the same, not found in Dynamo's cache.
    if torch.backends.mkldnn.is_available():
        assert counters["inductor"]["mkldnn_conv_weight_pack_matcher_count"] > packed
