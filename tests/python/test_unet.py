"""A Stable-Diffusion-style UNet (diffusers' UNet2DConditionModel, a tiny config with random
weights: scripts/opara_models/unet.py), one denoising step, as users compile it: the module through
opara.compile and through torch.compile's backend, the exported .pt2 and the traced .pt, each
giving the module's noise prediction; its plan opens streams for the text path beside the image
path and every planner policy's plan is valid."""

import json
import sys

import pytest
import torch

import opara
from conftest import ROOT, model_file

sys.path.insert(0, str(ROOT / "scripts"))

pytest.importorskip("diffusers", reason="diffusers (requirements.txt) builds the UNet")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")


@pytest.fixture(scope="module")
def unet():
    import export_models

    torch.manual_seed(export_models.SEED)
    model, specs, _ = export_models.BUILDERS["unet"](1)
    inputs = export_models.make_inputs(specs, export_models.SEED)
    model.eval()
    with torch.no_grad():
        expected = model(*inputs)
    return model, inputs, expected


def test_the_unet_compiled_gives_its_noise_prediction_bit_for_bit(library, unet):
    model, inputs, expected = unet
    compiled = opara.compile(model, inputs, device="cpu", kernels="aten", intra_op_threads=torch.get_num_threads())
    for _ in range(2):
        assert torch.equal(compiled(*inputs), expected)


def test_the_unet_through_the_backend_gives_its_noise_prediction(library, unet):
    model, inputs, expected = unet
    compiled = torch.compile(model, backend="opara", options={"kernels": "aten", "cpu_tuning_ms": 0})
    with torch.no_grad():
        assert torch.allclose(compiled(*inputs), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extension", ["pt2", "pt"])
def test_the_exported_unet_gives_its_reference(library, extension):
    path = model_file("unet", extension)
    reference = torch.load(str(path.with_name("unet_b1.ref.pt")))
    compiled = opara.compile(path, reference["inputs"], device="cpu", cpu_tuning_ms=0)
    (want,) = reference[f"outputs_{extension}"]
    assert torch.allclose(compiled(*reference["inputs"]), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("allocator", ["opara", "nimble", "trtllm", "torchsched"])
def test_every_policys_plan_of_the_unet_is_valid_and_the_text_path_runs_beside(bench, allocator):
    path = model_file("unet", "pt2")
    plan = json.loads(bench("plan", "--model", path, "--allocator", allocator, "--check", "--json", "-").stdout)
    assert plan["valid"] is True and plan["problems"] == []
    # The cross-attention's keys and values read the text states alone: a stream besides the image's.
    assert plan["streams"] > 1, plan["streams"]
