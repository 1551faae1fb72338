"""The one lowering stage of the Python package: a module, a torch.export program or a model file,
its example inputs and the options in; what the library loads out (Lowered): the archive or the
file, the output structure, Inductor's compiled regions, and the kernels they run, with why
(AtenBecause) where those are not Inductor's. It alone chooses the kernels and owns every fallback
to ATen's; opara.compile, opara.compile_graph_set and the Dynamo backend call it and decide
nothing of the kind. (The backend's own fallback, a graph run eagerly, stays the backend's.)"""

from __future__ import annotations

import dataclasses
import enum
import os
import warnings
from typing import Any, Callable, Sequence

import torch

from . import _regions
from ._frontend import _compile_device, _first_line, exported, loaded, program_archive, script_archive, traced_archive
from ._regions import CompiledRegions

# How the kernels of the nodes are made (the option kernels): ATen's own, one per node, or
# Inductor's fused ones, compiled per region of the plan (python/opara/_regions.py); "auto" picks
# the one measured faster on the device.
KERNEL_CHOICES = ("auto", "aten", "inductor")


class Kernels(str, enum.Enum):
    """The kernels a lowered model runs."""
    INDUCTOR = "inductor"  # Inductor's fused kernels, one opara::region node per region
    ATEN = "aten"  # ATen's kernels, one per node


class AtenBecause(str, enum.Enum):
    """Why a lowered model runs ATen's kernels (stats()["aten_because"])."""
    ASKED = "asked"  # kernels="aten"
    GPU_DEFAULT = "gpu_default"  # kernels="auto" on a GPU, where regions are not measured yet
    TORCHSCRIPT = "torchscript"  # a TorchScript module or file: no torch.export program to cut
    EXPORT_FAILED = "export_failed"  # torch.export refused the module (traced with TorchScript)
    LOAD_FAILED = "load_failed"  # torch.export.load could not read the .pt2 file (the library reads it itself)
    GRAPH_SET_FILE = "graph_set_file"  # a graph set from a file: the library makes its buckets
    INDUCTOR_FAILED = "inductor_failed"  # kernels="auto" and Inductor raised


@dataclasses.dataclass
class Lowered:
    """What the library loads for one model: `archive` (in memory), or `path`, a file it reads
    itself; how it was made (`exported_with`: "torch.export", "torchscript", "torchscript-trace" or
    "file"); the output tree spec (None: unknown); the compiled regions its opara::region nodes
    call (kept alive with the model); the kernels, and why ATen's (`aten_because`, with `detail`,
    the error's first line where one was the reason)."""
    archive: torch.Tensor | None
    path: str | None
    exported_with: str
    out_spec: Any
    regions: CompiledRegions | None
    kernels: Kernels
    aten_because: AtenBecause | None = None
    detail: str = ""
    handle: Any = None  # the library's model, where it was loaded already (a package, a cache entry)
    # The library's import of `archive`, kept where one lowering compiles many shapes (for_shape).
    program: Any = None
    cache: str = "off"  # the compile cache: "off", "hit", "stored" or "bypassed: <why>" (python/opara/_cache.py)

    def model(self, name: str, inputs: list[torch.Tensor], options: dict[str, str]) -> Any:
        """The library's compiled model (torch.classes.opara.Model) of what was lowered."""
        if self.handle is not None:
            return self.handle
        if self.archive is None:
            return torch.classes.opara.Model(self.path, inputs, options)
        if self.program is not None:
            return self.program.compile(inputs, options, *self.region_arguments())
        return torch.classes.opara.Model.from_archive(self.archive, name, inputs, options, *self.region_arguments())

    def for_shape(self, inputs: list[torch.Tensor], name: str) -> Lowered | str:
        """This lowering of a dynamic-shape program for inputs of another shape: itself where no
        region was compiled (the library compiles each shape of the program), its regions laid out
        for the shape where Inductor compiled them for every shape; or why it cannot run the shape.
        `name` stands for the model in messages."""
        if self.archive is not None and self.program is None:  # imported once for every shape
            self.program = torch.classes.opara.Program(self.archive, name)
        if self.regions is None or not self.regions.description:
            return self
        regions = self.regions.for_shape(inputs)
        if isinstance(regions, str):
            return regions
        return dataclasses.replace(self, regions=regions, handle=None)

    def region_arguments(self) -> tuple[str, list[torch.Tensor]]:
        """What the library makes the compiled regions nodes of its graph from
        (with_compiled_regions): their description ("": none) and the weights they read."""
        return (self.regions.description, self.regions.constants) if self.regions else ("", [])

    def stats(self) -> dict[str, Any]:
        """The lowering's keys of a compiled model's stats()."""
        regions = self.regions
        return {"kernels": self.kernels.value, "aten_because": self.aten_because.value if self.aten_because else None,
                "regions": float(len(regions or ())),
                "region_input_copies": float(regions.input_copies() if regions else 0),
                "region_compile_s": regions.compile_seconds if regions else 0.0, "cache": self.cache}


def kernels_option(options: dict[str, Any], caller: str) -> str:
    """Takes the option kernels out of `options` (the C++ options do not know it), checked."""
    kernels = options.pop("kernels", "auto")
    if kernels not in KERNEL_CHOICES:
        raise ValueError(f"{caller} option kernels={kernels!r}: expected 'auto' (the default: Inductor's on the CPU, "
                         "ATen's on a GPU), 'aten' (ATen's kernels, one per node) or 'inductor' (Inductor's fused "
                         "kernels, compiled per region of the plan)")
    return kernels


def _asked_aten(kernels: str, options: dict[str, str], inputs: list[torch.Tensor], name: str) -> AtenBecause | None:
    """Why the option kernels means ATen's kernels, or None where it means Inductor's: "auto" takes
    Inductor's on the CPU, where they ran faster than Inductor's own (docs/benchmarks.md), and
    ATen's on a GPU, where regions have not been measured yet."""
    if kernels == "aten":
        return AtenBecause.ASKED
    if kernels == "auto" and _compile_device(options, inputs, name).type != "cpu":
        return AtenBecause.GPU_DEFAULT
    return None


def _program(model: Any, inputs: list[torch.Tensor],
             graph_set: bool) -> tuple[torch.export.ExportedProgram | None, AtenBecause | None, str]:
    """The torch.export program Inductor's regions are cut from, or None, why not and the detail."""
    if isinstance(model, torch.export.ExportedProgram):
        return model, None, ""
    if isinstance(model, (str, os.PathLike)):
        if graph_set:
            return None, AtenBecause.GRAPH_SET_FILE, ""
        try:
            program = loaded(str(model))
        except Exception as error:  # another torch's file, ops Python has not registered: the library may read it
            return None, AtenBecause.LOAD_FAILED, _first_line(error)
        return (program, None, "") if program is not None else (None, AtenBecause.TORCHSCRIPT, "a TorchScript file")
    if isinstance(model, torch.jit.ScriptModule):
        return None, AtenBecause.TORCHSCRIPT, "a TorchScript module"
    program, why_not = _exported_or_why_not(model, inputs)
    return (program, None, "") if program is not None else (None, AtenBecause.EXPORT_FAILED, why_not)


def _exported_or_why_not(module: torch.nn.Module, inputs: list[torch.Tensor]) -> tuple[Any, str]:
    """`module`'s torch.export program, or None and the first line of why torch.export refused it."""
    try:
        return exported(module, inputs), ""
    except Exception as error:  # export fails in many ways; tracing is the documented fallback
        return None, _first_line(error)


def _say(because: AtenBecause, detail: str, name: str, asked: bool) -> None:
    """The warning for ATen's kernels where Inductor's were asked for, or where "auto" chose them
    and Inductor failed; nothing where "auto" found a model they cannot take."""
    if because is AtenBecause.INDUCTOR_FAILED:
        message = (f"Inductor's kernels could not be compiled for {name} ({detail}); compiled with ATen's kernels "
                   "instead (kernels='aten' skips trying)")
    elif not asked:
        return
    elif because is AtenBecause.GRAPH_SET_FILE:
        message = (f"kernels='inductor' compiles a graph set from an nn.Module (exported at each batch size), not "
                   f"from a file; {name} is compiled with ATen's kernels")
    elif because is AtenBecause.LOAD_FAILED:
        message = (f"kernels='inductor' needs the torch.export program of {name}, which torch.export.load could not "
                   f"read ({detail}); compiled with ATen's kernels instead")
    else:
        message = (f"kernels='inductor' needs a torch.export program, and {name} is not one ({detail}); compiled "
                   "with ATen's kernels instead")
    warnings.warn(f"opara: {message}", stacklevel=5)


def _with_atens_kernels(model: Any, inputs: list[torch.Tensor], program: torch.export.ExportedProgram | None,
                        because: AtenBecause, detail: str) -> Lowered:
    """`model` for ATen's kernels: a file as it is, else an archive of its program (exported here
    if no program was made yet), of its TorchScript, or of its trace where export failed."""
    aten = dict(kernels=Kernels.ATEN, aten_because=because, detail=detail, regions=None)
    if isinstance(model, (str, os.PathLike)):
        return Lowered(archive=None, path=str(model), exported_with="file", out_spec=None, **aten)
    if isinstance(model, torch.jit.ScriptModule):
        return Lowered(archive=script_archive(model), path=None, exported_with="torchscript", out_spec=None, **aten)
    if isinstance(model, torch.export.ExportedProgram):
        program = model
    why_not_exported = detail if because is AtenBecause.EXPORT_FAILED else ""
    if program is None and not why_not_exported:
        program, why_not_exported = _exported_or_why_not(model, inputs)
    if program is None:
        archive, out_spec = traced_archive(model, inputs, why_not_exported)
        return Lowered(archive=archive, path=None, exported_with="torchscript-trace", out_spec=out_spec, **aten)
    return Lowered(archive=program_archive(program), path=None, exported_with="torch.export",
                   out_spec=program.call_spec.out_spec, **aten)


def lower(model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike, inputs: list[torch.Tensor],
          options: dict[str, str], kernels: str, name: str, *, folded_inputs: Sequence[int] = (),
          graph_set: bool = False, ahead_of_time: bool = False,
          cache: Callable[..., Lowered | str] | None = None) -> Lowered:
    """`model` lowered for `inputs` and the option text `options` (without kernels, which is
    `kernels`, checked by kernels_option). `name` stands for the model in messages. Inductor's
    kernels where `kernels` asks or "auto" chooses them and the model is a torch.export program
    (a module export takes, a .pt2 file, a program), else ATen's, with a warning where the user
    asked for Inductor's; where "auto" chose Inductor's and Inductor fails, ATen's with a warning,
    where the user asked, the error. `folded_inputs`: user inputs folded into the regions (the
    weights the backend passes in). `graph_set`: a graph set's bucket, which for a file the
    library makes itself. `ahead_of_time`: the regions compiled by AOTInductor (opara.package).
    `cache`: the compile cache's hook (python/opara/_cache.py), asked first for a program that
    Inductor's kernels compile: the model loaded (a Lowered holding its handle), or why not. A
    dynamic-shape program's regions are compiled for every shape it takes (Lowered.for_shape)."""
    because = _asked_aten(kernels, options, inputs, name)
    program, detail = None, ""
    if because is None:
        program, because, detail = _program(model, inputs, graph_set)
    not_cached = "ATen's kernels (the cache keeps Inductor's regions)"
    if program is not None and because is None:
        if cache is not None:
            cached = cache(program, inputs, options, name, folded_inputs)
            if isinstance(cached, Lowered):
                return cached
            not_cached = cached
        try:
            archive, regions = _regions.compile_regions(program, inputs, options, name, folded_inputs,
                                                        ahead_of_time)
        except Exception as error:
            if kernels == "inductor":
                raise
            because, detail = AtenBecause.INDUCTOR_FAILED, _first_line(error)
        else:
            return Lowered(archive=archive, path=None, exported_with="torch.export",
                           out_spec=program.call_spec.out_spec, regions=regions, kernels=Kernels.INDUCTOR,
                           cache=f"bypassed: {not_cached}" if cache is not None else "off")
    _say(because, detail, name, asked=kernels == "inductor")
    lowered = _with_atens_kernels(model, inputs, program, because, detail)
    if cache is not None:
        lowered.cache = f"bypassed: {not_cached}"
    return lowered


def lower_and_load(lowerings: Callable[[str], list[Lowered]], load: Callable[[list[Lowered]], Any], kernels: str,
                   name: str) -> tuple[list[Lowered], Any]:
    """Lowers a model's graphs (`lowerings(kernels)`: one, or a graph set's buckets) and loads them
    (`load`: the library compiles them into a handle). Where "auto" chose Inductor's kernels and the
    library fails on their program (a region's first runs, say), ATen's are lowered and loaded,
    with a warning (aten_because "inductor_failed"); where those fail too, the model's own problem,
    the first error is raised. Where the user asked for Inductor's, the error."""
    lowered = lowerings(kernels)
    if kernels != "auto" or all(one.kernels is Kernels.ATEN for one in lowered):
        return lowered, load(lowered)
    try:
        return lowered, load(lowered)
    except Exception as error:  # the library fails in many ways on a program; ATen's kernels remain
        failure = error
    lowered = lowerings("aten")
    try:
        handle = load(lowered)
    except Exception:
        raise failure from None
    detail = _first_line(failure)
    _say(AtenBecause.INDUCTOR_FAILED, detail, name, asked=False)
    for one in lowered:
        one.aten_because, one.detail = AtenBecause.INDUCTOR_FAILED, detail
    return lowered, handle
