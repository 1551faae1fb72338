"""A traced torchvision ViT-B/16, the transformer TorchScript users save: its attention
(aten::_native_multi_head_attention without weights) returns an undefined tensor, which once made
planning fail with "Cannot report itemsize of Tensor that doesn't have initialized dtype". It plans,
and compiled on the CPU it gives its own forward's output bit for bit."""

import json
import subprocess

import pytest
import torch
import torchvision

import opara
from conftest import BENCH

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")


@pytest.fixture(scope="module")
def traced_vit(tmp_path_factory):
    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        traced = torch.jit.trace(model, (x,), check_trace=False)
    path = tmp_path_factory.mktemp("vit") / "vit_b_16.pt"
    traced.save(str(path))
    assert "aten::_native_multi_head_attention" in str(traced.inlined_graph), "the construct under test is gone"
    with torch.no_grad():
        expected = torch.jit.load(str(path))(x)
    return path, x, expected


def test_a_traced_vit_b_16_plans(traced_vit):
    path, _, _ = traced_vit
    if not BENCH.exists():
        pytest.skip(f"{BENCH} is not built: run scripts/build.sh")
    result = subprocess.run([str(BENCH), "plan", "--model", str(path), "--input-shape", "x:1x3x224x224", "--check",
                             "--json", "-"], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["valid"] is True
    assert plan["streams"] >= 1


def test_a_traced_vit_b_16_compiled_on_the_cpu_equals_its_forward(library, traced_vit):
    path, x, expected = traced_vit
    compiled = opara.compile(path, [x], device="cpu", intra_op_threads=torch.get_num_threads())
    for _ in range(2):
        assert torch.equal(compiled(x), expected)
