"""The exporter's sidecar JSON and reference files say what opara relies on."""

import json

import pytest
import torch

from conftest import ALL_MODELS, model_file


@pytest.mark.parametrize("name", ALL_MODELS)
def test_sidecar_describes_the_reference_inputs(name):
    sidecar = json.loads(model_file(name, "json").read_text())
    assert sidecar["model"] == name and sidecar["batch"] == 1
    assert sidecar["source"]
    reference = torch.load(model_file(name, "ref.pt"))
    assert len(reference["inputs"]) == len(sidecar["inputs"])
    for spec, tensor in zip(sidecar["inputs"], reference["inputs"]):
        assert list(tensor.shape) == spec["shape"]
        assert str(tensor.dtype) == f"torch.{spec['dtype']}"
        if "range" in spec:
            low, high = spec["range"]
            assert low <= tensor.min().item() and tensor.max().item() < high
    assert len(reference["outputs_pt"]) == len(reference["outputs_pt2"]) == len(sidecar["outputs"])


@pytest.mark.parametrize("name", ["googlenet", "bert_base"])
def test_torchscript_file_reproduces_its_reference(name):
    reference = torch.load(model_file(name, "ref.pt"))
    module = torch.jit.load(str(model_file(name, "pt")))
    with torch.no_grad():
        outputs = module(*reference["inputs"])
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for actual, expected in zip(outputs, reference["outputs_pt"]):
        assert torch.equal(actual, expected)


@pytest.mark.parametrize("name, dtype", [("branchy", "bfloat16"), ("branchy", "float16"), ("recurrent", "float16")])
def test_a_half_precision_export_holds_its_dtype_throughout(name, dtype):
    sidecar = json.loads(model_file(f"{name}_{dtype}", "json").read_text())
    assert sidecar["model"] == name and sidecar["dtype"] == dtype
    assert json.loads(model_file(name, "json").read_text())["dtype"] == "float32"
    reference = torch.load(model_file(f"{name}_{dtype}", "ref.pt"))
    wanted = getattr(torch, dtype)
    assert all(tensor.dtype == wanted for tensor in reference["inputs"])
    assert all(spec["dtype"] == dtype for spec in sidecar["inputs"])
    assert all(tensor.dtype == wanted for tensor in reference["outputs_pt"] + reference["outputs_pt2"])
    weights = torch.jit.load(str(model_file(f"{name}_{dtype}", "pt"))).state_dict().values()
    assert weights and all(tensor.dtype == wanted for tensor in weights if tensor.is_floating_point())
