"""Shared fixtures: where opara-bench, the Python package and the exported models are."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(os.environ.get("OPARA_MODELS", ROOT / "torchscript_models"))
BENCH = Path(os.environ.get("OPARA_BENCH", ROOT / "build" / "bin" / "opara-bench"))
# The package from this checkout (python/opara), finding libopara_ext in the build folder.
sys.path.insert(0, str(ROOT / "python"))
# The compile cache (on by default, as users have it) in a folder of this session's own: apart from
# the user's, and empty at the start, so that a test's hit or miss depends on this run alone.
_SESSION_CACHE = None if "OPARA_CACHE_DIR" in os.environ else tempfile.mkdtemp(prefix="opara-test-cache-")
if _SESSION_CACHE:
    os.environ["OPARA_CACHE_DIR"] = _SESSION_CACHE


class Products(torch.nn.Module):
    """Two linear layers with a GELU between: the matrix products whose rows decide how their
    weights are packed (python/opara/_partition.py, products_of_one_row)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


def pytest_sessionfinish(session, exitstatus):
    if _SESSION_CACHE:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


ALL_MODELS = ["googlenet", "inception_v3", "resnet50", "bert_base", "t5_small", "vit", "branchy", "chain", "inplace", "recurrent"]


def model_file(name, extension):
    path = MODELS / f"{name}_b1.{extension}"
    if not path.exists():
        pytest.skip(f"{path} is not exported: run scripts/export_models.py")
    return path


@pytest.fixture(scope="session")
def bench():
    if not BENCH.exists():
        pytest.skip(f"{BENCH} is not built: run scripts/test.sh")

    def run(*args, check=True):
        result = subprocess.run([str(BENCH), *map(str, args)], capture_output=True, text=True, timeout=600)
        if check and result.returncode != 0:
            raise AssertionError(f"opara-bench {' '.join(map(str, args))} exited {result.returncode}:\n{result.stderr}")
        return result

    return run


@pytest.fixture(scope="session")
def library():
    """The extension library, loaded (torch.classes.opara and torch.ops.opara registered)."""
    import opara
    try:
        return opara.load_library()
    except FileNotFoundError as error:
        pytest.skip(str(error))


@pytest.fixture
def fresh_dynamo(library):
    """No compiled graphs and zeroed counters (Dynamo's and the opara backend's) before the test;
    Dynamo reset after it."""
    import torch._dynamo

    import opara
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    opara.dynamo_counters.clear()
    opara.dynamo_compiles.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def no_tf32():
    """fp32 comparisons at rtol 1e-4 need TF32 off; the settings are put back afterwards."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def pytest_configure(config):
    config.addinivalue_line("markers", "serve: needs the optional Ray Serve extra (requirements-serve.txt)")
    config.addinivalue_line(
        "markers", "same_on_every_torch: what no torch release changes (opara-bench's flags and reports over the "
        "library ctest runs on each release, the GPU check's scripting, the layers check, serving through Ray): "
        "the pass over the second torch release (OPARA_TORCH_FREE_CHECKS=0, .ci/run) leaves it out")
