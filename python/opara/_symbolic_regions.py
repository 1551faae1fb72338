"""Regions compiled once for every shape of a dynamic-shape program (kernels="inductor").

Inductor compiles each region for the program's own fake inputs, whose sizes are the export's
symbols (s0 for a sequence length), so that its kernels take any size. Each shape then only needs
what the library checks a region's inputs against (csrc/ext/region_inputs.h): the sizes and
strides the region was compiled to read, which are expressions of the symbols, evaluated here for
the shape's inputs. Where Inductor assumed something of the sizes while compiling (a guard it
added to the export's shape environment), each shape is checked against it first, and a shape
that does not meet it is compiled on its own."""

from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch


def _expression(size: Any) -> sympy.Expr:
    """A size or stride as an expression of the export's symbols."""
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)


class InputLayout:
    """What a region was compiled to read of one input: sizes and strides as expressions of the
    symbols, and the dtype and device."""

    def __init__(self, fake: torch.Tensor):
        self.sizes = [_expression(size) for size in fake.shape]
        self.strides = [_expression(stride) for stride in fake.stride()]
        self.dtype = fake.dtype
        self.device = fake.device

    def symbols(self) -> set[sympy.Symbol]:
        return set().union(*(expression.free_symbols for expression in self.sizes + self.strides))

    def for_shape(self, values: dict[sympy.Symbol, int]) -> torch.Tensor:
        """A tensor without data (on the meta device) laid out as this shape's input must be."""
        def concrete(expressions: list[sympy.Expr]) -> list[int]:
            return [int(expression.xreplace(values)) for expression in expressions]

        return torch.empty_strided(concrete(self.sizes), concrete(self.strides), dtype=self.dtype, device="meta")


class ShapeBinding:
    """How a shape's inputs give each symbol its value (the program's user inputs' recorded sizes),
    and the conditions on them Inductor added while compiling the regions."""

    def __init__(self, exported: torch.export.ExportedProgram):
        by_name = {node.name: node for node in exported.graph_module.graph.nodes if node.op == "placeholder"}
        self.inputs = [by_name[name].meta.get("val") for name in exported.graph_signature.user_inputs]
        self.shape_env = next((value.fake_mode.shape_env for value in self.inputs
                               if isinstance(value, torch.Tensor) and hasattr(value, "fake_mode")), None)
        # The guards the program holds before the regions compile: Inductor's are the ones after.
        self.guards_before = len(self.shape_env.guards) if self.shape_env is not None else 0
        self.guards: list[sympy.Basic] = []

    def drop_expression_hints(self) -> None:
        """torch.export.load's shape environment records hints of expressions (2*s27) among those of
        its symbols, which Inductor's passes reject ("expected sympy.Symbol"): they are dropped (each
        is known from its symbols')."""
        if self.shape_env is None:
            return
        hints = getattr(self.shape_env, "backed_var_to_val", None)  # older torch: var_to_val
        hints = self.shape_env.var_to_val if hints is None else hints
        for expression in [key for key in hints if not isinstance(key, sympy.Symbol)]:
            del hints[expression]

    def bound_symbols(self) -> set[sympy.Symbol]:
        """The symbols an input's size is, which each shape's inputs give values."""
        return {size.node.expr for value in self.inputs if isinstance(value, torch.Tensor) for size in value.shape
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol)}

    def record_guards(self) -> str | None:
        """After the regions compiled: the conditions Inductor added, or why they cannot be checked."""
        if self.shape_env is None:
            return "the program records no symbolic sizes"
        self.guards = [guard.expr for guard in self.shape_env.guards[self.guards_before:]]
        unbound = set().union(*(guard.free_symbols for guard in self.guards)) - self.bound_symbols()
        return f"Inductor assumed something of sizes no input gives ({sorted(map(str, unbound))})" if unbound else None

    def values(self, inputs: Sequence[torch.Tensor]) -> dict[sympy.Symbol, int] | str:
        """Each symbol's value for these inputs, or why this shape cannot use the regions."""
        values: dict[sympy.Symbol, int] = {}
        for value, given in zip(self.inputs, inputs):
            if not isinstance(value, torch.Tensor):
                continue
            for size, concrete in zip(value.shape, given.shape):
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    values.setdefault(size.node.expr, int(concrete))
        for guard in self.guards:
            if not bool(guard.xreplace(values)):
                return f"Inductor compiled the regions under the condition {guard}, which these sizes do not meet"
        return values
