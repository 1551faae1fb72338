"""Makes the package the downstream test loads from C++ (examples/opara_load_package.cpp), and the
module's outputs on its example inputs (torch.save: a list of tensors).

    python tests/downstream/make_package.py PACKAGE OUTPUTS
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import opara  # noqa: E402  the checkout's package, with the build's extension ($OPARA_LIBRARY)


class Branches(torch.nn.Module):
    """Two convolution branches of one input, joined, and a second output."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 8, 1)

    def forward(self, x):
        y = torch.relu(self.a(x)) + torch.sigmoid(self.b(x))
        return y, y.mean(dim=(2, 3))


def main(package, outputs):
    torch.manual_seed(0)
    model, x = Branches().eval(), torch.randn(1, 4, 12, 12)
    opara.package(model, [x], package, device="cpu", cpu_tuning_ms=0)
    with torch.no_grad():
        torch.save(list(model(x)), outputs)
    print(f"wrote {package} and {outputs}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
