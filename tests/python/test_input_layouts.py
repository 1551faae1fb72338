"""Inputs in any layout (issue 41): a model compiled for one layout of its input gives the module's
outputs for every other a caller may pass: contiguous, channels_last, a transposed view, an
expanded tensor, a slice with a storage offset, a contiguous tensor that is not aligned; through
every route (the module, its .pt2, its TorchScript, the torch.compile backend) and both kernel
choices. Inductor compiles a region for its
example's strides: an input laid out otherwise is copied into them first, and counted
(stats()["region_input_copies"]). A GPU twin runs where a GPU is (the captured graph copies the
inputs into its own buffers).
"""

import pytest
import torch

import opara

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
SHAPE = (1, 3, 8, 8)


def layouts(device):
    """Each layout of one [1, 3, 8, 8] input, by name, all with other values."""
    generator = torch.Generator().manual_seed(2)

    def values(*shape):
        return torch.randn(*shape, generator=generator).to(device)

    return {
        "contiguous": values(*SHAPE),
        "channels_last": values(*SHAPE).contiguous(memory_format=torch.channels_last),
        "transposed": values(*SHAPE).transpose(2, 3),
        "expanded": values(1, 3, 8, 1).expand(*SHAPE),
        "offset_slice": values(2, 3, 9, 9)[1:, :, 1:, 1:],
        # Contiguous strides one element into its storage: not 16-byte aligned, as Inductor assumes.
        "misaligned": values(1 + 3 * 8 * 8)[1:].view(*SHAPE),
    }


class Net(torch.nn.Module):
    """Layout-sensitive work for Inductor: convolutions, an elementwise chain over the input
    itself, and a reduction along one dimension."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Conv2d(4, 2, 1)

    def forward(self, x):
        y = self.head(torch.relu(self.conv(x)))
        return y, (x * 2 + 1).sum(3)


def module(device):
    torch.manual_seed(0)
    return Net().eval().to(device)


def compiled_by(route, model, example, kernels, tmp_path, device):
    options = {"cpu_tuning_ms": 0, "kernels": kernels, "device": device}
    if route == "module":
        return opara.compile(model, [example], **options)
    if route == "pt2":
        path = tmp_path / "net.pt2"
        with torch.no_grad():
            torch.export.save(torch.export.export(model, (example,), strict=False), path)
        return opara.compile(path, [example], **options)
    if route == "torchscript":
        path = tmp_path / "net.pt"
        with torch.no_grad():
            torch.jit.trace(model, (example,)).save(str(path))
        return opara.compile(path, [example], **options)
    options.pop("device")
    return torch.compile(model, backend="opara", options={**options, "fallback": "error"})


def expect_every_layout_right(compiled, model, device, kernels, route):
    with torch.no_grad():
        for name, x in layouts(device).items():
            expected = model(x)
            actual = compiled(x)
            for got, want in zip(actual, expected):
                assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (
                    f"{route}, {kernels}, {name} input: off by {(got - want).abs().max().item()}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernels", ["aten", "inductor"])
@pytest.mark.parametrize("route", ["module", "pt2", "torchscript", "backend"])
def test_every_layout_gives_the_modules_outputs(library, fresh_dynamo, tmp_path, no_tf32, route, kernels, device):
    model = module(device)
    example = torch.randn(*SHAPE, device=device)
    if route == "torchscript" and kernels == "inductor":
        with pytest.warns(UserWarning, match="needs a torch.export program"):
            compiled = compiled_by(route, model, example, kernels, tmp_path, device)
    else:
        compiled = compiled_by(route, model, example, kernels, tmp_path, device)
    expect_every_layout_right(compiled, model, device, kernels, route)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_a_model_compiled_for_a_channels_last_or_expanded_example_takes_every_layout(library, tmp_path, no_tf32,
                                                                                    kernels, device):
    model = module(device)
    for example_layout in ("channels_last", "expanded"):
        example = layouts(device)[example_layout]
        compiled = opara.compile(model, [example], cpu_tuning_ms=0, kernels=kernels, device=device)
        expect_every_layout_right(compiled, model, device, kernels, f"compiled for {example_layout}")


def test_inductors_regions_copy_an_input_of_another_layout_and_count_it(library):
    """On the CPU the program is one region reading the input: contiguous calls copy nothing, each
    call in another layout copies the input once."""
    model = module("cpu")
    compiled = opara.compile(model, [torch.randn(*SHAPE)], cpu_tuning_ms=0, kernels="inductor", device="cpu",
                             cache=False)  # Inductor's regions in process: the ones that count their copies
    assert compiled.stats()["regions"] >= 1
    given = layouts("cpu")
    compiled(given["contiguous"])
    assert compiled.stats()["region_input_copies"] == 0
    compiled(given["channels_last"])
    compiled(given["transposed"])
    assert compiled.stats()["region_input_copies"] == 2
    compiled(given["offset_slice"])  # strides of a [2, 3, 9, 9] tensor: another layout too
    assert compiled.stats()["region_input_copies"] == 3
    compiled(given["misaligned"])  # the example's strides, but not aligned as the example was
    assert compiled.stats()["region_input_copies"] == 4
