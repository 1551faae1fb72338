"""opara.compile: an nn.Module, a ScriptModule or a model file, compiled into a parallel CUDA graph
(or, on the CPU, a parallel host-thread executor)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, overload

import torch
import torch.utils._pytree as pytree

from ._frontend import _archive, _compile_device, _first_line, _options_text
from ._library import load_library


def _tensor_list(example_inputs: torch.Tensor | Sequence[torch.Tensor], what: str) -> list[torch.Tensor]:
    inputs = [example_inputs] if isinstance(example_inputs, torch.Tensor) else list(example_inputs)
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{what} {index} is a {type(value).__name__}; opara takes tensors only")
    return inputs


def _casts_written(exported: Any) -> Any:
    """`exported` with its torch.autocast regions made plain code: autocast picks dtypes at run
    time, which a graph opara runs does not; decomposing (no decomposition table: every op stays)
    writes the casts into the graph. Other programs are returned as they are."""
    autocast = torch.ops.higher_order.wrap_with_autocast
    if any(node.target is autocast for node in exported.graph.nodes):
        return exported.run_decompositions({})
    return exported


def _export_module(module: torch.nn.Module, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, str, Any]:
    """`module` as an archive in memory that opara loads (no file: errors name the module, not a
    temporary path): torch.export first, TorchScript tracing when export fails. Returns the
    archive, how it was made and the output tree spec (None: unknown)."""
    if isinstance(module, torch.jit.ScriptModule):
        return _archive(lambda buffer: torch.jit.save(module, buffer)), "torchscript", None
    try:
        exported = _casts_written(torch.export.export(module, tuple(inputs), strict=False))
        return _archive(lambda buffer: torch.export.save(exported, buffer)), "torch.export", exported.call_spec.out_spec
    except Exception as error:  # export fails in many ways; tracing is the documented fallback
        warnings.warn(
            f"opara: torch.export could not export {type(module).__name__} ({_first_line(error)}); "
            "falling back to TorchScript tracing, which records the branches these inputs take",
            stacklevel=3,
        )
    with torch.no_grad(), warnings.catch_warnings():
        # torch.jit.trace's own deprecation notice; the TracerWarnings about the model still show.
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit\.trace")
        _, spec = pytree.tree_flatten(module(*inputs))
        traced = torch.jit.trace(module, tuple(inputs), check_trace=False, strict=False)
    return _archive(lambda buffer: torch.jit.save(traced, buffer)), "torchscript-trace", spec


# How the kernels of the nodes are made (the option kernels): ATen's own, one per node, or
# Inductor's fused ones, compiled per region of the plan (python/opara/_regions.py); "auto" picks
# the one measured faster on the device.
_KERNELS = ("auto", "aten", "inductor")


def _kernels_option(options: dict[str, Any], caller: str) -> str:
    """Takes the option kernels out of `options` (the C++ options do not know it), checked."""
    kernels = options.pop("kernels", "auto")
    if kernels not in _KERNELS:
        raise ValueError(f"{caller} option kernels={kernels!r}: expected 'auto' (the default: Inductor's on the CPU, "
                         "ATen's on a GPU), 'aten' (ATen's kernels, one per node) or 'inductor' (Inductor's fused "
                         "kernels, compiled per region of the plan)")
    return kernels


def _kernels_on(kernels: str, options: dict[str, Any], inputs: list[torch.Tensor], name: str) -> str:
    """"auto" made concrete for the device the model compiles for (the option device, else the
    CUDA example inputs', else the CPU): Inductor's kernels on the CPU, where they ran 1.03x to 1.4x
    Inductor's own against 0.6x to 1.04x for ATen's (docs/benchmarks.md); ATen's on a GPU, where
    regions have not been measured yet."""
    if kernels != "auto":
        return kernels
    return "inductor" if _compile_device(options, inputs, name).type == "cpu" else "aten"


def _with_regions(exported: Any, inputs: list[torch.Tensor], text: dict[str, str], name: str,
                  folded_inputs: Sequence[int] = (), asked: bool = True) -> tuple[Any, Any] | None:
    """`exported` with its regions compiled by Inductor (its constants and the inputs at
    `folded_inputs` folded in), and the regions; None when kernels="inductor" cannot take it (the
    caller then compiles ATen's kernels), with a warning if the user `asked` for Inductor's. Other
    failures raise: the caller falls back where the default chose Inductor's kernels."""
    from ._regions import RegionsUnsupported, compile_regions

    try:
        return compile_regions(exported, inputs, text, name, folded_inputs)
    except RegionsUnsupported as error:
        if asked:
            warnings.warn(f"opara: {error}; compiled with ATen's kernels instead", stacklevel=4)
        return None


@contextlib.contextmanager
def _aten_if_inductor_fails(kernels: str, name: str) -> Iterator[None]:
    """Around compiling Inductor's kernels for `name`: where kernels="auto" chose them, a failure is
    said and swallowed (the caller then compiles ATen's); where the user asked for them, it raises."""
    try:
        yield
    except Exception as error:
        if kernels == "inductor":
            raise
        warnings.warn(f"opara: Inductor's kernels could not be compiled for {name} ({_first_line(error)}); compiled "
                      "with ATen's kernels instead (kernels='aten' skips trying)", stacklevel=3)


def _structured(outputs: list[torch.Tensor], out_spec: Any) -> Any:
    """The flat outputs in the module's output structure, when it is known."""
    if out_spec is not None and out_spec.num_leaves == len(outputs):
        return pytree.tree_unflatten(outputs, out_spec)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


class _Runs:
    """An extension handle called like the model: flat tensors in, the model's output structure out."""

    def __init__(self, handle: Any, source: str, exported_with: str, out_spec: Any = None, regions: Any = None):
        self._handle = handle
        self._out_spec = out_spec
        # kernels="inductor": the compiled regions the handle's opara::region nodes call (kept alive here).
        self._regions = regions
        self.source = source
        self.exported_with = exported_with

    def __call__(self, *inputs: torch.Tensor) -> Any:
        return _structured(self._handle.run(_tensor_list(inputs, "input")), self._out_spec)


class CompiledModel(_Runs):
    """A model compiled for one input signature (the example inputs' count, shapes, dtypes and
    device). Call it like the model; inputs of another signature raise an error naming the input."""

    @property
    def device(self) -> torch.device:
        return torch.device(self._handle.device())

    def plan(self) -> dict[str, Any]:
        """The schedule: stream of each node, launch order, the events between streams."""
        return json.loads(self._handle.plan())

    def save_plan(self, path: str | os.PathLike) -> None:
        self._handle.save_plan(str(path))

    def stats(self) -> dict[str, float]:
        """Streams, events, graph segments, host nodes, compile and capture times, memory, runs,
        regions (kernels="inductor": the regions Inductor compiled; 0 otherwise) and
        region_input_copies (the inputs of those regions that came in another layout than they
        were compiled for, a channels_last or transposed tensor say, and were copied into it)."""
        regions = self._regions
        return {**dict(self._handle.stats()), "regions": float(len(regions or ())),
                "region_input_copies": float(regions.input_copies() if regions else 0)}

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers the model keeps between calls and writes in place (a counter, a cache
        registered on the module), by name: the live tensors on the model's device, first the
        values the module had when compiled. The module's own buffers are not written: read these
        after a call, copy_ into them between calls to set the state."""
        return dict(self._handle.state())

    def __repr__(self) -> str:
        stats = self.stats()
        return (
            f"opara.CompiledModel({self.source!r}, device={self.device}, streams={int(stats['streams'])}, "
            f"segments={int(stats['segments'])}, exported_with={self.exported_with!r})"
        )


def _is_path(model: Any, caller: str) -> bool:
    """True for a model file's path, False for an nn.Module; anything else raises naming `caller`."""
    if isinstance(model, (str, os.PathLike)):
        return True
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{caller} takes an nn.Module or a model file path, not a {type(model).__name__}")
    return False


def _one_lowering_at_a_time(function: Callable[..., Any]) -> Callable[..., Any]:
    """Runs `function` under Dynamo's compile lock, which the backend already holds under
    torch.compile (reentrant): torch.export and Inductor keep process-wide state (the dispatch mode
    stack, the patches of _regions._patched), and two threads exporting at once fail."""
    @functools.wraps(function)
    def serialised(*args: Any, **kwargs: Any) -> Any:
        from torch._dynamo.convert_frame import compile_lock

        with compile_lock:
            return function(*args, **kwargs)

    return serialised


# With batch_sizes a GraphSet (the alias of compile_graph_set), else a CompiledModel.
@overload
def compile(model: torch.nn.Module | str | os.PathLike, example_inputs: torch.Tensor | Sequence[torch.Tensor], *,
            batch_sizes: Sequence[int], batched_inputs: Sequence[int] | None = None, share_pool: bool = True,
            **options: Any) -> GraphSet: ...


@overload
def compile(model: torch.nn.Module | str | os.PathLike, example_inputs: torch.Tensor | Sequence[torch.Tensor],
            **options: Any) -> CompiledModel: ...


@_one_lowering_at_a_time
def compile(
    model: torch.nn.Module | str | os.PathLike,
    example_inputs: torch.Tensor | Sequence[torch.Tensor],
    *,
    batch_sizes: Sequence[int] | None = None,
    batched_inputs: Sequence[int] | None = None,
    share_pool: bool = True,
    **options: Any,
) -> CompiledModel | GraphSet:
    """Compiles `model` for the signature of `example_inputs` into a CompiledModel.

    `batch_sizes=[...]` (with `batched_inputs`, `share_pool`) is an alias of
    opara.compile_graph_set(model, example_inputs, batch_sizes, ...), which returns a GraphSet: the
    keywords opara.compile took before the graph set had a function of its own, kept so that code
    calling it so goes on working.

    `model` is an nn.Module (exported with torch.export, or traced with TorchScript when export
    fails, with a warning), a ScriptModule, or the path of a .pt / .pt2 file. The keyword options
    are opara::Options' members (csrc/options/options_text.cpp parses them):

    device: "cuda", "cuda:1" or "cpu"; default: the CUDA example inputs' device, else the CPU. Each
        input keeps the device of its example: a call passes its inputs where the examples were
        (a 0-dim CPU tensor stays a CPU scalar on a CUDA model; other inputs are copied in).
    streams: stream allocation, "opara" (default), "opara-unhanded", "nimble" or "single".
    order: launch order, "opara" (default) or "topological".
    max_streams: merge streams past this many; 0 (default): no cap (on the CPU: tuned).
    regions: True: the plan also groups each stream's nodes into regions (plan()["region_of"]),
        cut at cross-stream dependencies; region_min_share (default 0.1) merges the small ones.
    kernels: "auto" (default: "inductor" on the CPU, where it measured faster, "aten" on a GPU),
        "aten" (ATen's kernels, one per node: eager's outputs bit for bit) or "inductor": each
        region of the plan is compiled by Inductor into fused kernels (the weights frozen in) and
        runs as one node, stats()["regions"] of them; on the CPU, unless region_min_share is
        given, the whole program is one region. TorchScript models and graphs torch.export
        refuses keep ATen's kernels (with a warning where "inductor" was asked for); under
        "auto" a failure inside Inductor falls back to ATen's kernels with a warning.
    profile: a recorded profile (opara-bench profile) for the demands; default: estimated from
        the shapes of one eager run of the examples on the model's device.
    allow_profile_mismatch: True: use a profile made for another model file, input shapes or GPU,
        with a warning, instead of raising.
    ridge_point: FLOPs per byte above which an op counts as compute-bound (default 16).
    outputs: "clone" (default) or "view" (views of the static buffers, valid until the next run).
    memory: CUDA: "record-stream" (default) or "keep-alive", how capture protects tensors read on
        other streams; "smaller-pool" captures both ways and keeps the smaller pool (stats
        keep_alive, pool_bytes_record_stream, pool_bytes_keep_alive).
    on_uncapturable: CUDA: "split" (default: such a node runs as a host step between graph
        segments) or "error".
    warmup_runs: CUDA: eager warm-up runs on the capture streams before capture (default 2, at least 2).
    intra_op_threads: CPU: intra-op threads per worker; 0 (default): cores / streams, or tuned.
    pin_workers: CPU: True (default): workers of one intra-op thread each that fill the usable
        CPUs are pinned one to each.
    split_min_us: CPU: a pooling or activation node that took at least this long is split among
        idle workers, same bits (default 50); 0: never.
    cpu_tuning_ms: CPU, with neither max_streams nor intra_op_threads given: about how long to
        time the candidate schedules on the examples; eager's schedule stays unless another is
        clearly faster (default 1000); 0: every stream the plan opens, untimed.
    overflow: CUDA: CPU overflow, "none" (default), "comm_sd" (SIR+'s Comm+SD; needs a full
        profile) or "manual" (cpu_nodes); on the CPU it is checked and changes nothing.
    alpha_us: Comm+SD: how much slower (us) a node may get on the CPU and still move (default 100).
    cpu_nodes: "manual": node ids and kinds for the CPU, as a list ([12, "aten::relu"]), a
        comma-separated string ("12,aten::relu") or one .json file ({"cpu": [...]}).
    static_inputs: indices of inputs read where they are (weights passed as inputs): each call must
        pass the same tensors, which on CUDA the graphs read with no copy per run; on the device
        already. One the model writes in place (a KV cache) is written where it lives.
    state_in_place: True: every input the model writes in place (a KV cache, a counter) is a
        static input too, written where it lives (no copy per call on CUDA); False (default): it
        is copied into a buffer of the model's own and the writes copied back after each call.

    Values are strings, numbers, bools, paths or a torch.device. An unknown option or a bad value
    raises RuntimeError naming it and what it accepts.
    """
    if batch_sizes is not None:
        return compile_graph_set(model, example_inputs, batch_sizes, batched_inputs=batched_inputs,
                                 share_pool=share_pool, **options)
    if batched_inputs is not None:
        raise TypeError("opara.compile: batched_inputs is for a graph set: give batch_sizes too "
                        "(or call opara.compile_graph_set)")
    load_library()
    inputs = _tensor_list(example_inputs, "example input")
    options = dict(options)
    kernels = _kernels_option(options, "opara.compile")
    text = _options_text(options)
    is_path = _is_path(model, "opara.compile")
    name = str(model) if is_path else type(model).__name__
    if _kernels_on(kernels, options, inputs, name) == "inductor":
        torch.ops.opara.check_options(text)  # a bad option named before any Inductor compile
        with _aten_if_inductor_fails(kernels, name):
            with_regions = _archive_with_regions(model, name, inputs, text, is_path, asked=kernels == "inductor")
            if with_regions is not None:
                archive, out_spec, regions = with_regions
                handle = torch.classes.opara.Model.from_archive(archive, name, inputs, text)
                return CompiledModel(handle, name, "torch.export", out_spec, regions)
    if is_path:
        path = str(model)
        return CompiledModel(torch.classes.opara.Model(path, inputs, text), path, "file")
    name = type(model).__name__
    archive, exported_with, out_spec = _export_module(model, inputs)
    handle = torch.classes.opara.Model.from_archive(archive, name, inputs, text)
    return CompiledModel(handle, name, exported_with, out_spec)


def _archive_with_regions(model: Any, name: str, inputs: list[torch.Tensor], text: dict[str, str],
                          is_path: bool, asked: bool = True) -> tuple[torch.Tensor, Any, Any] | None:
    """kernels="inductor": a torch.export program (an nn.Module exported, or a .pt2 file) with its
    regions compiled by Inductor, the weights frozen into them, as an archive, with its output
    tree spec and the regions; None for what it cannot take (a TorchScript model, a module export
    refuses), with a warning if the user `asked` for Inductor's kernels: the caller compiles
    ATen's kernels. `name` stands for the model in messages."""
    try:
        if is_path:
            # Asked first: torch.export.load logs a long traceback for a TorchScript file.
            if torch.ops.opara.model_format(str(model)) != "torch.export":
                raise ValueError("a TorchScript file")
            exported = torch.export.load(str(model))
        elif isinstance(model, torch.jit.ScriptModule):
            raise ValueError("a TorchScript module")
        else:
            exported = _casts_written(torch.export.export(model, tuple(inputs), strict=False))
    except Exception as error:  # not a .pt2, or export refuses the module
        if asked:
            warnings.warn(f"opara: kernels='inductor' needs a torch.export program, and {name} is not one "
                          f"({_first_line(error)}); compiled with ATen's kernels instead", stacklevel=3)
        return None
    with_regions = _with_regions(exported, inputs, text, name, asked=asked)
    if with_regions is None:
        return None
    program, regions = with_regions
    return _archive(lambda buffer: torch.export.save(program, buffer)), exported.call_spec.out_spec, regions


def plan(
    path: str | os.PathLike,
    example_inputs: torch.Tensor | Sequence[torch.Tensor] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The plan of a .pt / .pt2 file without compiling it (torch.ops.opara.plan). With example
    inputs the launch order weighs nodes by the shapes they record; without, by the op table."""
    load_library()
    inputs = None if example_inputs is None else _tensor_list(example_inputs, "example input")
    return json.loads(torch.ops.opara.plan(str(Path(path)), inputs, _options_text(options)))


class GraphSet(_Runs):
    """One compiled graph per batch size (opara.compile_graph_set). A call with n rows
    runs on the smallest bucket of at least n rows, its batched inputs padded by repeating the last
    row and the outputs cut back to n rows; more rows than the largest bucket run in pieces. Safe to
    call from several threads at once. A request of the wrong rank, trailing shape or dtype raises
    an error naming the input and the shape expected."""

    def check(self, *inputs: torch.Tensor) -> int:
        """Checks a call's inputs as a call does, without running it: a service refuses a bad
        request with this message before the request joins others in a batch. Returns its rows."""
        return int(self._handle.check(_tensor_list(inputs, "input")))

    @property
    def batch_sizes(self) -> list[int]:
        return list(self._handle.batch_sizes())

    def stats(self) -> dict[str, Any]:
        """Calls, rows, padded rows, calls split in pieces, runs per bucket, the memory pool and
        each bucket's stats (as CompiledModel.stats()); regions and region_input_copies:
        kernels="inductor"'s, all buckets."""
        buckets = self._regions or []
        return {**json.loads(self._handle.stats()), "regions": sum(len(bucket) for bucket in buckets),
                "region_input_copies": sum(bucket.input_copies() for bucket in buckets)}

    def __repr__(self) -> str:
        return f"opara.GraphSet({self.source!r}, batch_sizes={self.batch_sizes}, exported_with={self.exported_with!r})"


@_one_lowering_at_a_time
def compile_graph_set(
    model: torch.nn.Module | str | os.PathLike,
    example_inputs: torch.Tensor | Sequence[torch.Tensor],
    batch_sizes: Sequence[int],
    *,
    batched_inputs: Sequence[int] | None = None,
    share_pool: bool = True,
    **options: Any,
) -> GraphSet:
    """Compiles `model` once per batch size into a GraphSet, for calls of any number of rows.

    `batch_sizes`: the buckets' rows, in any order (repeats count once). `batched_inputs` names the
    inputs whose first dimension is the batch (default: those whose first dimension equals the
    first input's); the others pass whole. The C++ library decides (torch.ops.opara.batched_inputs),
    before anything is exported. `share_pool` (CUDA): the buckets capture into one memory pool and
    run one at a time. `model` and the keyword options are opara.compile's; an nn.Module is
    exported at each batch size, its batched example inputs padded or cut to that many rows as the
    graph set pads a call (torch.ops.opara.inputs_with_rows): torch.export and tracing record sizes
    (a view's shape) as constants.
    """
    load_library()
    inputs = _tensor_list(example_inputs, "example input")
    options = dict(options)
    kernels = _kernels_option(options, "opara.compile_graph_set")
    text = _options_text(options)
    sizes = sorted({int(size) for size in batch_sizes})
    declared = None if batched_inputs is None else [int(index) for index in batched_inputs]
    if _is_path(model, "opara.compile_graph_set"):
        if kernels == "inductor":  # "auto" too, silently: a file's buckets are made by the library
            warnings.warn(f"opara: kernels='inductor' compiles a graph set from an nn.Module (exported at each batch "
                          f"size), not from a file; {model} is compiled with ATen's kernels", stacklevel=2)
        handle = torch.classes.opara.GraphSet([str(model)], inputs, sizes, text, declared, share_pool)
        return GraphSet(handle, str(model), "file")
    # What the library would refuse, said before exporting at a size that cannot be.
    if not sizes or sizes[0] < 1:
        raise ValueError(f"opara.compile_graph_set: batch_sizes={list(batch_sizes)}: give positive numbers of rows")
    try:
        batched = list(torch.ops.opara.batched_inputs(inputs, declared))
    except RuntimeError as error:  # the library's message names the input and the function
        raise ValueError(_first_line(error)) from None
    name = type(model).__name__
    archives, out_spec, exported_with, regions = [], None, None, []
    with_inductor = _kernels_on(kernels, options, inputs, name) == "inductor"
    for size in sizes:
        sized = torch.ops.opara.inputs_with_rows(inputs, batched, size)
        with_regions = None
        if with_inductor:
            with _aten_if_inductor_fails(kernels, f"{name} at {size} rows"):
                with_regions = _archive_with_regions(model, name, sized, text, False, asked=kernels == "inductor")
        if with_regions is not None:
            archive, out_spec, bucket_regions = with_regions
            exported_with = "torch.export"
            regions.append(bucket_regions)
        else:
            archive, exported_with, out_spec = _export_module(model, sized)
        archives.append(archive)
    handle = torch.classes.opara.GraphSet.from_archives(archives, name, inputs, sizes, text, batched, share_pool)
    return GraphSet(handle, name, exported_with, out_spec, regions)
