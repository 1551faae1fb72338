"""opara.package and opara.load: compile once, then only load, plan and capture.

A package is one file: the model's torch.export program (decomposed, its devices placed), the plan
that cut its regions, each region compiled ahead of time by AOTInductor (C++ kernels on the CPU,
cubins on CUDA) with the weights it reads, the example inputs, and what it was made for (opara's
and torch's releases, the device kind, the CUDA capability or the CPU's vector ISA, the options).
The library loads it without Python (opara::load_package, include/opara/package.h): each region
is one node running AOTInductor's runner on the plan's stream. opara.load is that loader called
from Python.

Records (torch's zip format, which LibTorch's reader opens): opara/meta.json, opara/program.pt2,
opara/regions.json (the description with_compiled_regions reads, op "opara::aoti_region", each
key the number of its record), opara/regions/<key>.pt2 (AOTInductor's package of that region) and
opara/inputs/<i>.bin (each example input's bytes, its dtype and sizes in meta.json).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.utils._pytree as pytree

from ._frontend import _compile_device, _is_path, _options_text, _tensor_list
from ._library import __version__, load_library
from ._lowering import Kernels, kernels_option, lower

# The format opara::load_package reads (csrc/package/package_archive.cpp: kPackageFormat).
_FORMAT = 1


def _cpu_isa() -> str:
    """The vector ISA Inductor compiles the CPU's kernels for here and the features its kernels use
    besides ("avx512 avx512_vnni", "avx2", ""): a CPU without them cannot run them, and the loader
    refuses the package there (csrc/package/package_fits.cpp reads it)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    isa = pick_vec_isa()
    # Its kernels are compiled with -mavx512bf16 too where the compiler and the CPU have it.
    return str(isa) + (" avx512_bf16" if getattr(isa, "_is_avx512_bf16_supported", False) else "")


def _meta(name: str, device: torch.device, options: dict[str, str], inputs: list[torch.Tensor], regions: int,
          out_spec: Any) -> dict[str, Any]:
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return {
        "format": _FORMAT,
        "name": name,
        "opara": __version__,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "device": device.type,
        "cuda_capability": f"{capability[0]}.{capability[1]}" if capability else "",
        "cpu_isa": _cpu_isa() if device.type == "cpu" else "",
        "options": options,
        "regions": regions,
        "inputs": [{"dtype": str(tensor.dtype).removeprefix("torch."), "sizes": list(tensor.shape)}
                   for tensor in inputs],
        "out_spec": pytree.treespec_dumps(out_spec) if out_spec is not None else "",
    }


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _write(path: Path, records: dict[str, bytes]) -> None:
    """The records into `path` through a file of the same name in a folder beside it, renamed into
    place once whole: a reader never sees half a package (the zip's folder takes the file's stem)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    partial = folder / path.name
    try:
        writer = torch._C.PyTorchFileWriter(str(partial))
        for name, data in records.items():
            writer.write_record(name, data, len(data))
        writer.write_end_of_file()
        del writer
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
        folder.rmdir()


def package(model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike,
            example_inputs: torch.Tensor | Sequence[torch.Tensor], path: str | os.PathLike,
            **options: Any) -> Path:
    """Compiles `model` for `example_inputs` once and writes a package to `path`, which
    opara.load (Python) and opara::load_package (C++, no Python) load without compiling again.
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
    device = torch.device(text["device"])
    lowered = lower(model, inputs, text, kernels, name, ahead_of_time=True)
    if lowered.archive is None:  # a file the library reads itself: its bytes
        archive = Path(lowered.path).read_bytes()
    else:
        archive = _tensor_bytes(lowered.archive)
    regions = lowered.regions.ahead_of_time if lowered.kernels is Kernels.INDUCTOR and lowered.regions else []
    records = {"opara/program.pt2": archive}
    if regions:
        records["opara/regions.json"] = lowered.regions.description.encode()
        records.update({f"opara/regions/{key}.pt2": data for key, data in enumerate(regions)})
    records.update({f"opara/inputs/{i}.bin": _tensor_bytes(tensor) for i, tensor in enumerate(inputs)})
    meta = _meta(name, device, text, inputs, len(regions), lowered.out_spec)
    records["opara/meta.json"] = json.dumps(meta, indent=1).encode()
    target = Path(path)
    _write(target, records)
    return target


class _PackagedRegions:
    """A loaded package's regions, as a compiled model's stats count them (the library runs them)."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count

    def input_copies(self) -> int:
        return 0


def load(path: str | os.PathLike, **options: Any) -> Any:
    """The compiled model of a package opara.package wrote: its program planned as the package
    says, each region running AOTInductor's compiled code, compiled for the example inputs the
    package holds; call it like the model. `options` replace the package's (opara.compile's keys;
    the device stays the package's). A package for another opara, torch, device kind, CUDA
    capability or CPU vector ISA is refused naming what differs; a damaged one names the part."""
    from ._compile import CompiledModel
    from ._lowering import Lowered

    load_library()
    path = str(path)
    info = json.loads(torch.ops.opara.package_info(path))
    handle = torch.classes.opara.Model.from_package(path, _options_text(dict(options)))
    out_spec = pytree.treespec_loads(info["out_spec"]) if info["out_spec"] else None
    kernels = Kernels.INDUCTOR if info["regions"] else Kernels.ATEN
    lowered = Lowered(archive=None, path=path, exported_with="package", out_spec=out_spec,
                      regions=_PackagedRegions(info["regions"]) if info["regions"] else None, kernels=kernels)
    return CompiledModel(handle, path, [lowered])
