"""The compile cache: a model compiled with Inductor's kernels is kept on disk as a package
(python/opara/_package_file.py, its regions compiled by AOTInductor) under a key of everything the
compile read, so that another process compiling the same model for the same inputs and options
loads it instead (opara.compile and the Dynamo backend; graph sets are compiled as before).

The key is a SHA-256 of: the torch.export program's graph (its code, signature and input/output
structure), every weight and buffer it holds and every input folded into its regions (their
bytes, dtypes and layouts), the example inputs' dtypes, sizes, strides and devices, the options,
Inductor's configuration, and the versions (opara's extension library and Python sources, torch's
release and commit, the GPU's capability or the CPU's features). A program calling an op
outside ATen's and prims' namespaces is not cached: the key cannot see that op's code.

On by default on the CPU; on CUDA only when asked (cache=True, or OPARA_CACHE=1): there an entry is
an AOTInductor package loaded in the caller's process, and the one such load on a GPU so far
crashed it (default_refusal). Off: the option cache=False, or OPARA_CACHE=0 in the environment. The folder: the
option cache_dir, else $OPARA_CACHE_DIR, else $XDG_CACHE_HOME/opara/compiled (~/.cache/opara/
compiled), apart from any venv. An entry is written atomically and readable by its owner only,
in a folder only its owner may open (a cached library is code that runs: a folder that another
user owns or may write is not used, with a warning). The folder is bounded by $OPARA_CACHE_MAX_MB
(default 8192): after a store the entries used longest ago are removed. An entry that does not
load (damaged, made for another CPU) is removed and the model compiled again, with a warning;
stats()["cache"] says what happened: "hit", "stored", "off" or "bypassed: <why>".

An entry keeps the schedule its first load timed (the CPU tuner's cap and threads, CUDA's measured
cap) and the machine it holds on (the usable CPUs, or the GPU's name and multiprocessors), as a
package does (opara/choice.json): a hit on such a machine compiles that schedule at once instead of
timing candidates again (a warm start, issue 45); a load on another machine times them and keeps
its own choice instead. The library decides (csrc/package/package_fits.cpp, stored_choice_misfit).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import os
import stat
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree

from ._frontend import _compile_device, _first_line, has_symbolic_sizes
from ._library import __version__, library_path
from ._lowering import Lowered, lower
from ._package_file import keep_choice, loaded, read_info, tensor_memory, write_package

_DEFAULT_MAX_MB = 8192
_ENTRY_SUFFIX = ".opara"
_REFUSAL_SUFFIX = ".refused"  # why AOTInductor refused a key's compile: the next one goes in process at once
# ATen's and prims' ops are torch's: the torch release in the key stands for their code.
_KEYED_NAMESPACES = ("aten", "prims")
# Inductor's configuration that AOTInductor's compile writes itself (the first compile of a process
# fills aot_inductor.metadata in place): not the user's choice, and keyed it would miss every time.
_UNKEYED_INDUCTOR_CONFIG = frozenset({"aot_inductor.metadata"})


@dataclasses.dataclass(frozen=True)
class CacheSettings:
    """Where the cache is (None: off), how large it may grow, and whether the caller asked for it
    (cache=True, OPARA_CACHE=1) rather than took the default."""
    folder: Path | None
    max_bytes: int = _DEFAULT_MAX_MB << 20
    asked: bool = False


def default_refusal(device: str, asked: bool) -> str:
    """Why a compile for `device` is not cached when the caller took the default, or "". On CUDA a
    cache entry is an AOTInductor package loaded in the caller's process, and the only such load
    on a GPU so far (the H200 run, docs/benchmarks.md) crashed the process; its misses also
    compiled every region twice, past minutes. Asked for, it is used."""
    if asked or not device.startswith("cuda"):
        return ""
    return ("not by default on CUDA, where an entry is an AOTInductor package whose load has crashed on a GPU "
            "(cache=True or OPARA_CACHE=1 asks for it)")


def settings(options: dict[str, Any], caller: str) -> CacheSettings:
    """Takes the options cache and cache_dir out of `options` (the C++ options do not know them),
    checked, and reads the environment's."""
    enabled = options.pop("cache", None)
    folder = options.pop("cache_dir", None)
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"{caller} option cache={enabled!r}: expected True (the default: a compile is kept on disk "
                        "and loaded by the next process compiling the same model) or False")
    asked = bool(enabled)
    if enabled is None:
        setting = os.environ.get("OPARA_CACHE", "").strip().lower()
        enabled = setting not in ("0", "false", "no", "off")
        asked = setting in ("1", "true", "yes", "on")
    if not enabled:
        return CacheSettings(None)
    if folder is None:
        folder = os.environ.get("OPARA_CACHE_DIR") or Path(
            os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opara" / "compiled"
    max_mb = os.environ.get("OPARA_CACHE_MAX_MB", str(_DEFAULT_MAX_MB))
    try:
        max_bytes = int(float(max_mb) * (1 << 20))
    except ValueError:
        raise ValueError(f"OPARA_CACHE_MAX_MB={max_mb!r}: expected a number of MiB") from None
    return CacheSettings(Path(folder).expanduser(), max_bytes, asked)


def _owned_folder(folder: Path) -> str:
    """Makes `folder` (owner only); why it cannot hold the cache, or "" where it can."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = folder.stat()
    except OSError as error:
        return f"the cache folder {folder} cannot be made ({error.strerror})"
    if status.st_uid != os.getuid():
        return f"the cache folder {folder} belongs to another user"
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write into the cache folder {folder}"
    return ""


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_IDENTITY: dict[str, str] = {}
_TOLD: set[Path] = set()  # the folders a warning said cannot hold the cache


def _code_identity() -> dict[str, str]:
    """What compiled and will run an entry: the extension library's and the Python package's code."""
    if not _IDENTITY:
        sources = hashlib.sha256()
        for source in sorted(Path(__file__).parent.glob("*.py")):
            sources.update(source.name.encode() + b"\0" + source.read_bytes())
        _IDENTITY.update(library=_file_digest(Path(library_path())), python=sources.hexdigest())
    return _IDENTITY


def _uncacheable(program: torch.export.ExportedProgram) -> str:
    """Why the key cannot stand for what `program` does, or "": an op whose code is not torch's,
    or symbolic sizes (the key holds one shape's sizes; such a program is lowered once for all)."""
    if has_symbolic_sizes(program):
        return "its sizes are symbolic (a dynamic-shape program; the cache keeps programs of one shape)"
    for node in program.graph.nodes:
        if node.op == "call_function":
            target = node.target
            if target is operator.getitem or (isinstance(target, torch._ops.OpOverload)
                                              and target.namespace in _KEYED_NAMESPACES):
                continue
            return f"its graph calls {target}, whose code the cache's key cannot see"
        if node.op in ("call_module", "get_attr"):
            return f"its graph holds a submodule ({node.target})"
    if any(not isinstance(value, torch.Tensor) for value in program.constants.values()):
        return "it holds a script object"
    return ""


def _cpu_features() -> list[str]:
    """The CPU's features as ATen reads them (the loader checks the same ones, package_fits.cpp): a
    folder shared by machines of other CPUs keeps an entry for each. (Inductor's pick_vec_isa
    would take seconds: it compiles a test program per ISA.)"""
    return sorted(name for name, value in torch._C._cpu._get_cpu_capability().items() if value is True)


def _add_tensor(digest: Any, name: str, tensor: torch.Tensor) -> None:
    header = [name, str(tensor.dtype), list(tensor.shape), list(tensor.stride())]
    digest.update(json.dumps(header).encode())
    digest.update(tensor_memory(tensor).data)


def entry_key(program: torch.export.ExportedProgram, inputs: list[torch.Tensor], options: dict[str, str],
              folded_inputs: Sequence[int]) -> str:
    """The key of a compile of `program` for `inputs` and the option text `options` (its device
    placed), the user inputs at `folded_inputs` folded into its regions."""
    device = torch.device(options["device"])
    target = (".".join(map(str, torch.cuda.get_device_capability(device))) if device.type == "cuda" else
              _cpu_features())
    header = {"opara": __version__, **_code_identity(), "torch": torch.__version__,
              "torch_git": torch.version.git_version, "target": target, "options": options,
              "folded_inputs": list(folded_inputs),
              "inputs": [[str(t.dtype), list(t.shape), list(t.stride()), str(t.device)] for t in inputs],
              "inductor": {key: value for key, value in torch._inductor.config.save_config_portable().items()
                           if key not in _UNKEYED_INDUCTOR_CONFIG}}
    digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    for text in (program.graph_module.code, str(program.graph_signature),
                 pytree.treespec_dumps(program.call_spec.in_spec) if program.call_spec.in_spec else "",
                 pytree.treespec_dumps(program.call_spec.out_spec) if program.call_spec.out_spec else ""):
        digest.update(text.encode() + b"\0")
    for name, tensor in sorted(program.state_dict.items()):
        _add_tensor(digest, f"state {name}", tensor)
    for name, tensor in sorted(program.constants.items()):
        _add_tensor(digest, f"constant {name}", tensor)
    for index in folded_inputs:
        _add_tensor(digest, f"input {index}", inputs[index])
    return digest.hexdigest()


def _ahead_of_time(program: torch.export.ExportedProgram, inputs: list[torch.Tensor], options: dict[str, str],
                   name: str, folded_inputs: Sequence[int]) -> tuple[Lowered | None, str]:
    """`program` lowered with AOTInductor's regions, or why a package cannot hold it."""
    try:
        with warnings.catch_warnings():  # a region AOTInductor refuses: compiled in process instead
            warnings.simplefilter("ignore")
            made = lower(program, inputs, options, "inductor", name, folded_inputs=folded_inputs, ahead_of_time=True)
    except Exception as error:  # AOTInductor fails in many ways; Inductor in process may not
        return None, f"AOTInductor could not compile it ({_first_line(error)})"
    if made.regions is not None and made.regions.skipped:
        return None, f"AOTInductor refused a region ({made.regions.skipped[0]})"
    if made.regions is not None and made.regions.constants:
        return None, "its regions read weights they do not hold"
    return made, ""


def _write_owned(path: Path, text: str) -> None:
    """`text` into `path`, readable by its owner only, whole or not at all."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.chmod(0o600)
    os.replace(partial, path)


class CompileCache:
    """The hook lower() calls with a program it would compile with Inductor's kernels: the model
    loaded from the cache, or compiled ahead of time, stored and loaded; else why not (then lower
    compiles it in process as without the cache)."""

    def __init__(self, settings: CacheSettings):
        self.folder = settings.folder
        self.max_bytes = settings.max_bytes
        self.asked = settings.asked

    def __call__(self, program: torch.export.ExportedProgram, inputs: list[torch.Tensor], options: dict[str, str],
                 name: str, folded_inputs: Sequence[int]) -> Lowered | str:
        options = {**options, "device": str(_compile_device(options, inputs, name))}
        not_by_default = default_refusal(options["device"], self.asked)
        if not_by_default:  # before the folder is made or judged: a cache not used has no folder
            return not_by_default
        refused = _owned_folder(self.folder)
        if refused and self.folder not in _TOLD:
            _TOLD.add(self.folder)
            warnings.warn(f"opara: {refused}; compiles are not cached (a cached library is code that runs): give "
                          "cache_dir (or OPARA_CACHE_DIR) a folder of your own", stacklevel=5)
        why = refused or _uncacheable(program)
        if why:
            return why
        entry = self.folder / (entry_key(program, inputs, options, folded_inputs) + _ENTRY_SUFFIX)
        if entry.exists():
            hit = self._load(entry, inputs, options, name, "hit")
            if hit is not None:
                return hit
        refusal = entry.with_suffix(_REFUSAL_SUFFIX)
        if refusal.exists():  # AOTInductor refused this compile before: not tried again
            return refusal.read_text()
        made, refused = _ahead_of_time(program, inputs, options, name, folded_inputs)
        if refused:
            _write_owned(refusal, refused)
            return refused
        write_package(made, name, options, inputs, entry, example_inputs=False, mode=0o600)
        stored = self._load(entry, inputs, options, name, "stored")
        if stored is None:
            return "its entry did not load"
        self._evict(entry)
        return stored

    def _load(self, entry: Path, inputs: list[torch.Tensor], options: dict[str, str], name: str,
              how: str) -> Lowered | None:
        """The entry loaded for `inputs`, marked as used now; None where it did not load (removed,
        with a warning)."""
        try:
            info = read_info(str(entry))
            handle = torch.classes.opara.Model.from_package(str(entry), options, inputs)
        except Exception as error:  # damaged, truncated, made for another CPU: compiled again
            warnings.warn(f"opara: the compile cache's entry {entry} for {name} did not load "
                          f"({_first_line(error)}); it is removed and the model compiled again", stacklevel=6)
            entry.unlink(missing_ok=True)
            return None
        record = handle.choice_record()
        if record:  # timed here: kept for the next load (the loader applied a choice kept for this machine)
            keep_choice(entry, record, mode=0o600)
        os.utime(entry)
        lowered = loaded(str(entry), info, handle, "torch.export")
        lowered.cache = how
        return lowered

    def _evict(self, kept: Path) -> None:
        """Removes the entries used longest ago until the folder is within its bound; `kept`, the
        entry just stored and loaded, goes last (alone past the bound, it is not kept)."""
        entries = []
        for path in [*self.folder.glob("*" + _ENTRY_SUFFIX), *self.folder.glob("*" + _REFUSAL_SUFFIX)]:
            try:
                status = path.stat()
            except FileNotFoundError:  # another process removed it
                continue
            entries.append((path == kept, status.st_mtime, status.st_size, path))
        total = sum(size for _, _, size, _ in entries)
        for _, _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def cache_hook(settings: CacheSettings) -> Callable[..., Lowered | str] | None:
    """lower()'s cache hook for `settings` (None where the cache is off)."""
    return CompileCache(settings) if settings.folder is not None else None
