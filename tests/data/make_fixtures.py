#!/usr/bin/env python3
"""Writes the small models the import tests feed opara, each holding one construct it must
refuse or flag. Run with the project's venv; the outputs are committed (a few KB each).

  control_flow.pt   prim::If on data survives freezing (torch.jit.script)
  loop.pt           prim::Loop survives freezing
  custom_op.pt/.pt2 an operator LibTorch alone does not register (opara_test::scale)
  cond.pt2          torch.cond: a higher-order op
  item.pt           .item(): runs, but cannot be captured in a CUDA graph
  asserts.pt2       aten::_assert_async: a device-side check that can be captured (TorchScript
                    drops it as dead code; torch.export keeps it)
"""

from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent

# An operator defined from Python only: a C++ process without this code cannot run it.
torch.library.define("opara_test::scale", "(Tensor x, float factor) -> Tensor")


@torch.library.impl("opara_test::scale", "CompositeExplicitAutograd")
def _scale(x, factor):
    return x * factor


@torch.library.register_fake("opara_test::scale")
def _scale_fake(x, factor):
    return torch.empty_like(x)


class ControlFlow(torch.nn.Module):
    def forward(self, x):
        if bool(x.sum() > 0):
            return x * 2
        return x - 1


class Loop(torch.nn.Module):
    def forward(self, x):
        for _ in range(int(x.shape[0])):
            x = x + 1
        return x


class CustomOp(torch.nn.Module):
    def forward(self, x):
        return torch.ops.opara_test.scale(x.relu(), 3.0)


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


class Item(torch.nn.Module):
    def forward(self, x):
        return x * x.max().item()


class Asserts(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x) + 1.0
        torch._assert_async(y.max() < 10.0, "y too large")
        return y * 2.0


def main():
    x = torch.randn(2, 3)
    torch.jit.script(ControlFlow()).save(str(HERE / "control_flow.pt"))
    torch.jit.script(Loop()).save(str(HERE / "loop.pt"))
    torch.jit.trace(CustomOp(), (x,)).save(str(HERE / "custom_op.pt"))
    torch.export.save(torch.export.export(CustomOp(), (x,)), str(HERE / "custom_op.pt2"))
    torch.export.save(torch.export.export(Cond(), (x,)), str(HERE / "cond.pt2"))
    torch.jit.script(Item()).save(str(HERE / "item.pt"))
    torch.export.save(torch.export.export(Asserts(), (torch.randn(4, 8),)), str(HERE / "asserts.pt2"))
    print(f"fixtures written to {HERE}")


if __name__ == "__main__":
    main()
