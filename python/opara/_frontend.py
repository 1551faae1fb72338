"""The frontend of the Python package's lowering: what turns a user's arguments into what the
library takes. Option text, tensor lists, a model's kind (file or module), torch.export, TorchScript
tracing and loading, archives in memory, the device the library decides, and the error text quoted
back. It imports nothing of the package (scripts/check_layers.py)."""

from __future__ import annotations

import io
import os
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree


def _first_line(error: BaseException) -> str:
    """An error's first line (its name when it has no message): what a warning or a re-raised
    error quotes of a long one."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _option_text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float, torch.device, os.PathLike)):
        return str(value)
    if key == "cpu_nodes" and isinstance(value, (list, tuple)) and all(isinstance(i, (str, int)) for i in value):
        return ",".join(str(item) for item in value)  # cpu_nodes=[12, "aten::relu"]
    if key == "static_inputs" and isinstance(value, (list, tuple)) and all(isinstance(i, int) for i in value):
        return ",".join(str(item) for item in value)  # static_inputs=[0, 2]
    raise TypeError(f"opara option {key}={value!r}: expected a string, a number or a torch.device "
                    "(cpu_nodes: also a list of node ids and kinds; static_inputs: a list of input indices)")


def _options_text(options: dict[str, Any]) -> dict[str, str]:
    return {key: _option_text(key, value) for key, value in options.items()}


def _tensor_list(example_inputs: torch.Tensor | Sequence[torch.Tensor], what: str) -> list[torch.Tensor]:
    inputs = [example_inputs] if isinstance(example_inputs, torch.Tensor) else list(example_inputs)
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{what} {index} is a {type(value).__name__}; opara takes tensors only")
    return inputs


def _is_path(model: Any, caller: str) -> bool:
    """True for a model file's path, False for an nn.Module; anything else raises naming `caller`."""
    if isinstance(model, (str, os.PathLike)):
        return True
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{caller} takes an nn.Module or a model file path, not a {type(model).__name__}")
    return False


def _archive(save: Callable[[io.BytesIO], None]) -> torch.Tensor:
    """What `save` writes to a buffer, as the uint8 tensor the extension reads archives from."""
    buffer = io.BytesIO()
    save(buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def program_archive(program: torch.export.ExportedProgram) -> torch.Tensor:
    return _archive(lambda buffer: torch.export.save(program, buffer))


def _compile_device(options: dict[str, Any], inputs: list[torch.Tensor], name: str) -> torch.device:
    """The device the model `name` compiles for, as the library decides it (opara::model_device):
    the option device, else the CUDA example inputs', else the others', else the CPU."""
    return torch.device(torch.ops.opara.model_device(name, inputs, _options_text(options)))


def _casts_written(exported: Any) -> Any:
    """`exported` with its torch.autocast regions made plain code: autocast picks dtypes at run
    time, which a graph opara runs does not; decomposing (no decomposition table: every op stays)
    writes the casts into the graph. Other programs are returned as they are."""
    autocast = torch.ops.higher_order.wrap_with_autocast
    if any(node.target is autocast for node in exported.graph.nodes):
        return exported.run_decompositions({})
    return exported


def exported(module: torch.nn.Module, inputs: list[torch.Tensor],
             dynamic_shapes: Any = None) -> torch.export.ExportedProgram:
    """`module` exported (torch.export, not strict) for `inputs`, its autocast regions written as
    casts; `dynamic_shapes` as torch.export takes it (None: every size fixed)."""
    return _casts_written(torch.export.export(module, tuple(inputs), dynamic_shapes=dynamic_shapes, strict=False))


def has_symbolic_sizes(program: torch.export.ExportedProgram) -> bool:
    """Whether a size of the program's inputs is symbolic (an export with dynamic_shapes)."""
    return any(isinstance(size, torch.SymInt) for node in program.graph.nodes if node.op == "placeholder"
               for size in getattr(node.meta.get("val"), "shape", ()))


def loaded(path: str) -> torch.export.ExportedProgram | None:
    """The torch.export program of the file at `path`; None for a TorchScript file, which the
    library tells apart first (torch.export.load would log a long traceback for one)."""
    if torch.ops.opara.model_format(path) != "torch.export":
        return None
    return torch.export.load(path)


def traced_archive(module: torch.nn.Module, inputs: list[torch.Tensor], why: str) -> tuple[torch.Tensor, Any]:
    """`module` traced with TorchScript for `inputs`, where torch.export could not export it (`why`,
    said in a warning), as an archive, and its output tree spec."""
    warnings.warn(f"opara: torch.export could not export {type(module).__name__} ({why}); falling back to "
                  "TorchScript tracing, which records the branches these inputs take", stacklevel=5)
    with torch.no_grad(), warnings.catch_warnings():
        # torch.jit.trace's own deprecation notice; the TracerWarnings about the model still show.
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit\.trace")
        _, spec = pytree.tree_flatten(module(*inputs))
        traced = torch.jit.trace(module, tuple(inputs), check_trace=False, strict=False)
    return _archive(lambda buffer: torch.jit.save(traced, buffer)), spec


def script_archive(module: torch.jit.ScriptModule) -> torch.Tensor:
    return _archive(lambda buffer: torch.jit.save(module, buffer))
