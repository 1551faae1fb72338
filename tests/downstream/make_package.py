"""Makes the package the downstream test loads from C++ (examples/opara_load_package.cpp), and the
module's outputs on its example inputs (torch.save: a list of tensors). The module and its input
are the Python package tests' (tests/python/test_package.py).

    python tests/downstream/make_package.py PACKAGE OUTPUTS
"""

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests" / "python")]
import opara  # noqa: E402  the checkout's package, with the build's extension ($OPARA_LIBRARY)
from test_package import _model_and_input  # noqa: E402


def main(package, outputs):
    model, x = _model_and_input()
    opara.package(model, [x], package, device="cpu", cpu_tuning_ms=0)
    with torch.no_grad():
        torch.save(list(model(x)), outputs)
    print(f"wrote {package} and {outputs}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
