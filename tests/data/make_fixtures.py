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
  counter.pt/.pt2   state in a buffer: a call counter incremented in place on each call (.pt: the
                    eager reference, scripted; .pt2 keeps the add_; counter_functional.pt2 is
                    decomposed: a functional add and a BUFFER_MUTATION output)
  cache_update.pt/.pt2  state in an input: a cache written at a position given as an input
                    (index_copy_) and read on two branches; cache_update_functional.pt2 lists the
                    write as a USER_INPUT_MUTATION output
  kv_caches.pt/.pt2 state in two buffers: a K and a V cache written at a position given as an input
                    (index_copy_); kv_caches_functional.pt2 is decomposed (two BUFFER_MUTATION outputs)
  wrapped.pt2       a @torch.no_grad() method and a torch.autocast(enabled=False) region, which
                    torch.export keeps as higher-order wrappers around subgraphs
  autocast_on.pt2   a torch.autocast region that is enabled: it picks dtypes at run time
  dynamic_batch.pt2 exported with a dynamic batch size (dynamic_shapes): a reshape to a
                    symbolic size
  symbolic_guard.pt2 exported with two dynamic sizes torch.export relates (Dim.AUTO): slices to
                    a size minus one, under the condition the size is not 2 (its guard)
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


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 3))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.count.add_(1)
        return x @ self.weight + self.count


class CacheUpdate(torch.nn.Module):
    def forward(self, x, cache, position):
        before = cache.relu()
        cache.index_copy_(0, position, x)
        return before + cache.abs() * 2


class KvCaches(torch.nn.Module):
    """A decoder's state in its own buffers, one written after the other, both read after."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 8, 4))
        self.register_buffer("v", torch.zeros(1, 8, 4))

    def forward(self, x, position):
        self.k.index_copy_(1, position, x)
        self.v.index_copy_(1, position, x * 2)
        return (self.k * self.v).sum(1)


class Wrapped(torch.nn.Module):
    @torch.no_grad()
    def rotary(self, x):
        return torch.cos(x), torch.sin(x) * 2, x

    def forward(self, x):
        with torch.autocast("cpu", enabled=False):
            y = x.float() + 1
        c, s, same = self.rotary(x)
        return c + s + y + same


class DynamicBatch(torch.nn.Module):
    def forward(self, x):
        return x.relu().reshape(x.shape[0], 2, 2)


class SymbolicGuard(torch.nn.Module):
    def forward(self, x, y):
        return x[: x.shape[0] - 1] + y[1:]


class AutocastOn(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ x


def export_state_fixtures():
    """The same weights in the scripted reference and both export forms."""
    torch.manual_seed(0)
    counter = Counter()
    torch.jit.script(counter).save(str(HERE / "counter.pt"))
    x = torch.randn(2, 3)
    with torch.no_grad():
        exported = torch.export.export(counter, (x,))
        torch.export.save(exported, str(HERE / "counter.pt2"))
        torch.export.save(exported.run_decompositions({}), str(HERE / "counter_functional.pt2"))
    torch.jit.script(CacheUpdate()).save(str(HERE / "cache_update.pt"))
    args = (torch.randn(1, 4), torch.randn(5, 4), torch.tensor([2]))
    with torch.no_grad():
        exported = torch.export.export(CacheUpdate(), args)
        torch.export.save(exported, str(HERE / "cache_update.pt2"))
        torch.export.save(exported.run_decompositions({}), str(HERE / "cache_update_functional.pt2"))
    export_kv_fixtures()
    torch.export.save(torch.export.export(Wrapped(), (torch.randn(4),)), str(HERE / "wrapped.pt2"))
    torch.export.save(torch.export.export(AutocastOn(), (torch.randn(3, 3),)), str(HERE / "autocast_on.pt2"))


def export_kv_fixtures():
    torch.jit.script(KvCaches()).save(str(HERE / "kv_caches.pt"))
    with torch.no_grad():
        exported = torch.export.export(KvCaches(), (torch.randn(1, 1, 4), torch.tensor([3])))
        torch.export.save(exported, str(HERE / "kv_caches.pt2"))
        torch.export.save(exported.run_decompositions({}), str(HERE / "kv_caches_functional.pt2"))


def main():
    x = torch.randn(2, 3)
    torch.jit.script(ControlFlow()).save(str(HERE / "control_flow.pt"))
    torch.jit.script(Loop()).save(str(HERE / "loop.pt"))
    torch.jit.trace(CustomOp(), (x,)).save(str(HERE / "custom_op.pt"))
    torch.export.save(torch.export.export(CustomOp(), (x,)), str(HERE / "custom_op.pt2"))
    torch.export.save(torch.export.export(Cond(), (x,)), str(HERE / "cond.pt2"))
    torch.jit.script(Item()).save(str(HERE / "item.pt"))
    torch.export.save(torch.export.export(Asserts(), (torch.randn(4, 8),)), str(HERE / "asserts.pt2"))
    batch = torch.export.Dim("batch", min=2, max=64)
    dynamic = torch.export.export(DynamicBatch(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(dynamic, str(HERE / "dynamic_batch.pt2"))
    auto = {0: torch.export.Dim.AUTO}
    guarded = torch.export.export(SymbolicGuard(), (torch.randn(5, 3), torch.randn(5, 3)),
                                  dynamic_shapes={"x": auto, "y": auto})
    torch.export.save(guarded, str(HERE / "symbolic_guard.pt2"))
    export_state_fixtures()
    print(f"fixtures written to {HERE}")


if __name__ == "__main__":
    main()
