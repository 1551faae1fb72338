"""opara.package and opara.load: compile once, then only load, plan and capture.

A package is one file (its records: python/opara/_package_file.py): the model's torch.export
program (decomposed, its devices placed), the plan that cut its regions, each region compiled
ahead of time by AOTInductor (C++ kernels on the CPU, cubins on CUDA) with the weights it reads,
the example inputs, and what it was made for (opara's and torch's releases, the device kind, the
CUDA capability or the CPU's vector ISA, the options). The library loads it without Python
(opara::load_package, include/opara/package.h): each region is one node running AOTInductor's
runner on the plan's stream. opara.load is that loader called from Python.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import torch

from ._frontend import _compile_device, _is_path, _options_text, _tensor_list
from ._library import load_library
from ._lowering import kernels_option, lower
from ._package_file import keep_choice, loaded, read_info, write_package


def package(model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike,
            example_inputs: torch.Tensor | Sequence[torch.Tensor], path: str | os.PathLike,
            **options: Any) -> Path:
    """Compiles `model` for `example_inputs` once and writes a package to `path`, which
    opara.load (Python) and opara::load_package (C++, no Python) load without compiling again.
    The package is loaded once here: the schedule that load times (the CPU tuner's, CUDA's
    measured candidates) is kept in it with the machine it holds on, and a load there compiles
    it untimed, unless the load's options change how the schedule is chosen.
    `options` are opara.compile's; kernels="inductor" (the default here) compiles each region of the
    plan with AOTInductor for the device (a CUDA package is made where its GPU is), "aten" packages
    the program alone (ATen's kernels, one per node). A region AOTInductor refuses stays ATen nodes,
    with a warning. Returns the path."""
    from ._compile import _one_lowering_at_a_time

    return _one_lowering_at_a_time(_package)(model, example_inputs, path, options)


def _package(model: Any, example_inputs: Any, path: str | os.PathLike, options: dict[str, Any]) -> Path:
    load_library()
    inputs = _tensor_list(example_inputs, "example input")
    options = dict(options)
    options.setdefault("kernels", "inductor")
    kernels = kernels_option(options, "opara.package")
    is_path = isinstance(model, (str, os.PathLike)) or (
        not isinstance(model, torch.export.ExportedProgram) and _is_path(model, "opara.package"))
    name = str(model) if is_path else type(model).__name__
    text = _options_text(options)
    torch.ops.opara.check_options(text)
    text["device"] = str(_compile_device(text, inputs, name))
    lowered = lower(model, inputs, text, kernels, name, ahead_of_time=True)
    target = Path(path)
    write_package(lowered, name, text, inputs, target)
    _keep_measured_schedule(target)
    return target


def _keep_measured_schedule(path: Path) -> None:
    """Loads the package once, as opara.load would here, and keeps in it the schedule that load timed
    (the CPU tuner's, CUDA's measured candidates), so that a load on this machine compiles it
    untimed."""
    record = torch.classes.opara.Model.from_package(str(path), {}, None).choice_record()
    if record:
        keep_choice(path, record)


def load(path: str | os.PathLike, **options: Any) -> Any:
    """The compiled model of a package opara.package wrote: its program planned as the package
    says, each region running AOTInductor's compiled code, compiled for the example inputs the
    package holds; call it like the model. `options` replace the package's (opara.compile's keys;
    the device stays the package's). A package for another opara, torch, device kind, CUDA
    capability or CPU vector ISA is refused naming what differs; a damaged one names the part."""
    from ._compile import CompiledModel

    load_library()
    path = str(path)
    info = read_info(path)
    handle = torch.classes.opara.Model.from_package(path, _options_text(dict(options)), None)
    return CompiledModel(handle, path, [loaded(path, info, handle, "package")])
