"""The package file (opara.package's and the compile cache's): its records and description,
written atomically. The format is the one opara::load_package reads (csrc/package/).

Records (torch's zip format, which LibTorch's reader opens): opara/meta.json, opara/program.pt2,
opara/regions.json (the description with_compiled_regions reads, op "opara::aoti_region", each
key the number of its record), opara/regions/<key>.pt2 (AOTInductor's package of that region) and
opara/inputs/<i>.bin (each example input's bytes, its dtype and sizes in meta.json; a compile
cache entry holds none, "example_inputs": false, and is loaded with the caller's inputs), and
opara/choice.json once a load has timed a schedule (the library's Model.choice_record(): the options
that make it again and the machine it holds on, which the loader applies there untimed).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

from ._library import __version__
from ._lowering import Kernels, Lowered

# The format opara::load_package reads (csrc/package/package_archive.cpp: kPackageFormat).
_FORMAT = 1
_RECORDS = "opara/"  # every record of a package; the zip writer adds its own beside them
_CHOICE = "opara/choice.json"  # csrc/package/package_archive.h: kPackageChoice


def cpu_isa() -> str:
    """The vector ISA Inductor compiles the CPU's kernels for here and the features its kernels use
    besides ("avx512 avx512_vnni", "avx2", ""): a CPU without them cannot run them, and the loader
    refuses the package there (csrc/package/package_fits.cpp reads it)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    isa = pick_vec_isa()
    # Its kernels are compiled with -mavx512bf16 too where the compiler and the CPU have it.
    return str(isa) + (" avx512_bf16" if getattr(isa, "_is_avx512_bf16_supported", False) else "")


def _meta(name: str, device: torch.device, options: dict[str, str], inputs: list[torch.Tensor], regions: int,
          out_spec: Any, folded_inputs: list[int], example_inputs: bool) -> dict[str, Any]:
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return {
        "format": _FORMAT,
        "name": name,
        "opara": __version__,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "device": device.type,
        "cuda_capability": f"{capability[0]}.{capability[1]}" if capability else "",
        "cpu_isa": cpu_isa() if device.type == "cpu" else "",
        "options": options,
        "regions": regions,
        "inputs": [{"dtype": str(tensor.dtype).removeprefix("torch."), "sizes": list(tensor.shape)}
                   for tensor in inputs],
        "out_spec": pytree.treespec_dumps(out_spec) if out_spec is not None else "",
        "folded_inputs": folded_inputs,  # the inputs the regions hold folded in (the backend's weights)
        "example_inputs": example_inputs,
    }


def tensor_memory(tensor: torch.Tensor) -> Any:
    """The tensor's elements as one run of bytes on the CPU (a uint8 numpy array), as a package
    stores them and the compile cache's key hashes them."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    return tensor_memory(tensor).tobytes()


def _write(path: Path, records: dict[str, bytes], mode: int | None = None) -> None:
    """The records into `path` through a file of the same name in a folder beside it, renamed into
    place once whole: a reader never sees half a package (the zip's folder takes the file's stem).
    `mode`: the file's permissions, set before it is in place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    partial = folder / path.name
    try:
        writer = torch._C.PyTorchFileWriter(str(partial))
        for name, data in records.items():
            writer.write_record(name, data, len(data))
        writer.write_end_of_file()
        del writer
        if mode is not None:
            partial.chmod(mode)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
        folder.rmdir()


def write_package(lowered: Lowered, name: str, options: dict[str, str], inputs: list[torch.Tensor], path: Path, *,
                  example_inputs: bool = True, mode: int | None = None) -> None:
    """A package of `lowered` (lowered ahead of time, for `inputs` and the option text `options`,
    its device placed) into `path`, atomically, with permissions `mode` where given; with the
    example inputs' bytes unless `example_inputs` is False (a compile cache entry: loaded with the
    caller's inputs)."""
    if lowered.archive is None:  # a file the library reads itself: its bytes
        archive = Path(lowered.path).read_bytes()
    else:
        archive = _tensor_bytes(lowered.archive)
    regions = lowered.regions.ahead_of_time if lowered.kernels is Kernels.INDUCTOR and lowered.regions else []
    records = {"opara/program.pt2": archive}
    if regions:
        records["opara/regions.json"] = lowered.regions.description.encode()
        records.update({f"opara/regions/{key}.pt2": data for key, data in enumerate(regions)})
    if example_inputs:
        records.update({f"opara/inputs/{i}.bin": _tensor_bytes(tensor) for i, tensor in enumerate(inputs)})
    folded = list(lowered.regions.folded_inputs) if regions else []
    meta = _meta(name, torch.device(options["device"]), options, inputs, len(regions), lowered.out_spec, folded,
                 example_inputs)
    records["opara/meta.json"] = json.dumps(meta, indent=1).encode()
    _write(path, records, mode)


def keep_choice(path: Path, record: str, mode: int | None = None) -> None:
    """The package at `path` written again, atomically, with `record` (Model.choice_record() of a
    load of it: the schedule that load timed and the machine it holds on) as its opara/choice.json,
    in place of any it held; permissions `mode` where given."""
    reader = torch._C.PyTorchFileReader(str(path))
    records = {name: reader.get_record(name) for name in reader.get_all_records()
               if name.startswith(_RECORDS) and name != _CHOICE}
    del reader
    records[_CHOICE] = record.encode()
    _write(path, records, mode)


class PackagedRegions:
    """A loaded package's regions, as a compiled model's stats count them (the library runs them),
    and the inputs they hold folded in."""

    def __init__(self, count: int, folded_inputs: list[int]):
        self.count = count
        self.folded_inputs = folded_inputs
        self.compile_seconds = 0.0  # compiled when the package was made, not here

    def __len__(self) -> int:
        return self.count

    def input_copies(self) -> int:
        # Not counted yet: AotiRegionOp makes its inputs contiguous without counting the copies.
        return 0


def read_info(path: str) -> dict[str, Any]:
    """The package's description (opara/meta.json as the library reads it); opara::Error naming
    the file and the part for a damaged one."""
    return json.loads(torch.ops.opara.package_info(path))


def loaded(path: str, info: dict[str, Any], handle: Any, exported_with: str) -> Lowered:
    """What a compiled model of the package at `path` (the library's `handle`) was lowered from."""
    out_spec = pytree.treespec_loads(info["out_spec"]) if info["out_spec"] else None
    regions = PackagedRegions(info["regions"], info["folded_inputs"]) if info["regions"] else None
    return Lowered(archive=None, path=path, exported_with=exported_with, out_spec=out_spec, regions=regions,
                   kernels=Kernels.INDUCTOR if regions else Kernels.ATEN, handle=handle)
