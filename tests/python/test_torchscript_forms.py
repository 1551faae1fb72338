"""TorchScript the way people write it: lists that grow in forward() run like eager on every call,
and what opara cannot pass or return (non-tensor arguments and results, prints) is refused at load
with the file and the fix named, never dropped or left to fail inside LibTorch."""

from typing import Dict, List, Optional, Tuple

import pytest
import torch

import opara

# torch.jit.script and torch.jit.load warn that TorchScript is deprecated; these tests are about it.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class AppendToALiteral(torch.nn.Module):
    def forward(self, x):
        parts = [x]
        parts.append(x * 2)
        return torch.cat(parts)


class AppendSizes(torch.nn.Module):
    def forward(self, x):
        repeats: List[int] = []
        repeats.append(2)
        return x.repeat(repeats)


class InsertIntoEmpty(torch.nn.Module):
    def forward(self, x):
        parts: List[torch.Tensor] = []
        parts.insert(0, x)
        return torch.stack(parts)


class AddToEmpty(torch.nn.Module):
    def forward(self, x):
        parts: List[torch.Tensor] = []
        parts += [x]
        return torch.stack(parts)


class ExtendEmpty(torch.nn.Module):
    def forward(self, x):
        parts: List[torch.Tensor] = []
        parts.extend([x, x + 1])
        return torch.stack(parts)


@pytest.mark.parametrize("module", [AppendToALiteral, AppendSizes, InsertIntoEmpty, AddToEmpty, ExtendEmpty])
def test_lists_that_grow_in_forward_start_empty_on_every_run(library, module, tmp_path):
    path = tmp_path / "model.pt"
    torch.jit.script(module()).save(str(path))
    x = torch.arange(4.0)
    expected = torch.jit.load(str(path))(x)
    compiled = opara.compile(path, [x], device="cpu")
    for _ in range(3):
        assert torch.equal(compiled(x), expected)


class TakesAnInt(torch.nn.Module):
    def forward(self, x, n: int):
        return x * n


class TakesAList(torch.nn.Module):
    def forward(self, xs: List[torch.Tensor]):
        return xs[0] + xs[1]


class TakesATuple(torch.nn.Module):
    def forward(self, pair: Tuple[torch.Tensor, torch.Tensor]):
        return pair[0] * pair[1]


class TakesADict(torch.nn.Module):
    def forward(self, named: Dict[str, torch.Tensor]):
        return named["a"]


class TakesAnOptional(torch.nn.Module):
    def forward(self, x, bias: Optional[torch.Tensor]):
        return x if bias is None else x + bias


class ReturnsANumber(torch.nn.Module):
    def forward(self, x):
        return x.shape[0], x


class Prints(torch.nn.Module):
    def forward(self, x):
        print("shape", x.shape)
        return x + 1


@pytest.mark.parametrize("module, message", [
    (TakesAnInt, "forward's argument 1 ('n') is int; opara passes tensors only"),
    (TakesAList, "forward's argument 0 ('xs') is List[Tensor]"),
    (TakesATuple, "is Tuple[Tensor, Tensor]"),
    (TakesADict, "is Dict[str, Tensor]"),
    (TakesAnOptional, "is Optional[Tensor]"),
    (ReturnsANumber, "forward returns Tuple[int, Tensor]; opara returns tensors only, and would drop the rest"),
    (Prints, "prim::Print"),
])
def test_what_opara_cannot_pass_or_return_is_refused_at_load(library, bench, module, message, tmp_path):
    path = tmp_path / f"{module.__name__}.pt"
    torch.jit.script(module()).save(str(path))
    with pytest.raises(RuntimeError) as error:
        opara.compile(path, [torch.ones(2)], device="cpu")
    assert str(path) in str(error.value)
    assert message in str(error.value)
    result = bench("info", "--model", path, check=False)
    assert result.returncode == 1 and str(path) in result.stderr
