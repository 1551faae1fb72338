"""kernels="inductor" on a GPU: opara plans the streams, Inductor compiles each region of the plan,
and opara captures the whole in one CUDA graph (python/opara/_regions.py). The CPU's tests are in
test_inductor_regions.py; these are the GPU's, in the GPU check's pytest list
(scripts/gpu_check/context.py): both entry points give eager's outputs within Inductor's tolerance
over replays with new inputs, run Inductor's regions (not ATen's kernels in their place), and a
cache row written at a position through the regions matches eager's step by step."""

import pytest
import torch

import opara
from test_inductor_regions import CacheStep, ThreeBranches, close_to  # the CPU tests' models and tolerance
from test_inductor_regions import in_process  # noqa: F401 (autouse: Inductor's regions in process, the cache off)

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")]


def three_branches():
    torch.manual_seed(0)
    return ThreeBranches().eval().cuda(), torch.randn(1, 8, 32, 32, device="cuda")


def test_opara_compile_on_cuda_runs_inductors_regions_and_gives_eagers_outputs(library, no_tf32):
    model, x = three_branches()
    compiled = opara.compile(model, [x], kernels="inductor", device="cuda")
    regions = compiled.stats()["regions"]
    assert regions >= 1, "kernels='inductor' compiled no region: ATen's kernels ran in their place"
    assert compiled.plan()["kinds"].count("opara::region") == regions
    with torch.no_grad():
        for seed in range(3):  # replays of the captured graph, each with new values in the input
            x = torch.randn(1, 8, 32, 32, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
            close_to(compiled(x), model(x))


def test_the_backend_on_cuda_with_inductors_kernels_gives_eagers_outputs(library, fresh_dynamo, no_tf32):
    model, x = three_branches()
    options = {"kernels": "inductor", "fallback": "error"}  # a graph opara cannot take raises
    with torch.no_grad():
        compiled = torch.compile(model, backend="opara", options=options)
        for _ in range(3):
            close_to(compiled(x), model(x))
            x = torch.randn_like(x)
    assert opara.dynamo_counters["compiles"] == 1 and opara.dynamo_counters["regions"] >= 1
    assert opara.dynamo_counters["fallbacks"] == 0


def test_a_cache_written_at_a_position_on_cuda_matches_eager_step_by_step(library, no_tf32):
    torch.manual_seed(0)
    model, reference = CacheStep().eval().cuda(), CacheStep().eval().cuda()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(1, 8, device="cuda")
    compiled = opara.compile(model, [x, torch.tensor([0], device="cuda")], kernels="inductor", device="cuda")
    assert compiled.stats()["regions"] >= 1
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(1, 8, device="cuda")
            position = torch.tensor([step], device="cuda")
            close_to([compiled(x, position)], [reference(x, position)])
