"""The leaf of the Python package's lowering: what turns a user's arguments into what the library
takes (option text, archives in memory, the device the library decides) and the error text quoted
back. It imports nothing of the package but the library loader (scripts/check_layers.py)."""

from __future__ import annotations

import io
import os
from typing import Any, Callable

import torch


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


def _archive(save: Callable[[io.BytesIO], None]) -> torch.Tensor:
    """What `save` writes to a buffer, as the uint8 tensor the extension reads archives from."""
    buffer = io.BytesIO()
    save(buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _compile_device(options: dict[str, Any], inputs: list[torch.Tensor], name: str) -> torch.device:
    """The device the model `name` compiles for, as the library decides it (opara::model_device):
    the option device, else the CUDA example inputs', else the others', else the CPU."""
    return torch.device(torch.ops.opara.model_device(name, inputs, _options_text(options)))
