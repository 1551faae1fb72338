"""opara.compile: an nn.Module, a ScriptModule or a model file, compiled into a parallel CUDA graph
(or, on the CPU, a parallel host-thread executor)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence, overload

import torch
import torch.utils._pytree as pytree

from ._cache import cache_hook, settings
from ._frontend import _first_line, _is_path, _options_text, _tensor_list
from ._inductor_compat import compile_lock
from ._library import load_library
from ._lowering import Lowered, kernels_option, lower, lower_and_load


def _structured(outputs: list[torch.Tensor], out_spec: Any) -> Any:
    """The flat outputs in the module's output structure, when it is known."""
    if out_spec is not None and out_spec.num_leaves == len(outputs):
        return pytree.tree_unflatten(outputs, out_spec)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


class _Runs:
    """An extension handle called like the model: flat tensors in, the model's output structure out."""

    def __init__(self, handle: Any, source: str, lowerings: list[Lowered]):
        self._handle = handle
        # What the handle was lowered from, one per graph (a graph set's buckets, ascending): the
        # output structure, the kernels, and the compiled regions its opara::region nodes call
        # (kept alive here).
        self._lowerings = lowerings
        self._out_spec = lowerings[-1].out_spec
        self.source = source
        self.exported_with = lowerings[-1].exported_with

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

    def stats(self) -> dict[str, Any]:
        """Streams, events, graph segments, host nodes, compile and capture times, memory, runs; the
        kernels ("inductor" or "aten") and, for ATen's, why (aten_because: "asked", "gpu_default",
        "torchscript", "export_failed", "load_failed" or "inductor_failed",
        python/opara/_lowering.py's AtenBecause; None for Inductor's); regions (the regions
        Inductor compiled; 0 for ATen's kernels) and region_input_copies (the inputs of those
        regions that came in another layout than they were compiled for, a channels_last or
        transposed tensor say, and were copied into it; not counted yet for AOTInductor's regions,
        a package's or a cache hit's, which report 0); region_compile_s (the seconds Inductor, or
        AOTInductor, took over the regions; 0 for a package's or a cache hit's); cache (the compile
        cache: "hit", "stored", "off" or "bypassed: <why>"); tuning (the CPU: each schedule the tuner timed, the
        first eager's, as dicts of max_streams, intra_op_threads, streams, median_ms, speedup,
        searched_priorities, replay_speedup and chosen; empty when not tuned) and candidates (CUDA:
        each captured candidate compile() timed, the sequential graph first, as dicts of
        max_streams, streams, median_ms, speedup, pool_bytes, over_budget, pool_estimate_bytes,
        workspace_bytes, workspace_estimate_bytes and chosen; empty when not measured), with
        measure_ms, memory_budget_bytes, pool_estimate_bytes, sequential_pool_estimate_bytes,
        workspace_estimate_bytes and budget_stream_cap (the pool and the cuBLAS workspaces estimated
        before capture, and the cap they put on the plan's streams to fit the budget; 0: none)."""
        lists = json.loads(self._handle.stats_json())
        return {**dict(self._handle.stats()), "tuning": lists["tuning"], "candidates": lists["candidates"],
                **self._lowerings[0].stats()}

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


def _one_lowering_at_a_time(function: Callable[..., Any]) -> Callable[..., Any]:
    """Runs `function` under Dynamo's compile lock, which the backend already holds under
    torch.compile (reentrant): torch.export and Inductor keep process-wide state (the dispatch mode
    stack, _inductor_compat's patches), and two threads exporting at once fail."""
    @functools.wraps(function)
    def serialised(*args: Any, **kwargs: Any) -> Any:
        with compile_lock():
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
    streams: stream allocation, "opara" (default), "opara-unhanded", "nimble", "single", or a
        peer's automatic scheduler as its code does it: "trtllm" (TensorRT-LLM's multi-stream
        pass, 3 streams) or "torchsched" (apex's, 8); max_streams is their stream count.
    order: launch order, "opara" (default), "topological" or "trtllm" (TensorRT-LLM's list
        schedule: with streams="trtllm", its own).
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
        stats()["kernels"] says which kernels run, stats()["aten_because"] why ATen's.
    profile: a recorded profile (opara-bench profile) for the demands; default: estimated from
        the shapes of one eager run of the examples on the model's device.
    allow_profile_mismatch: True: use a profile made for another model file, input shapes or GPU,
        with a warning, instead of raising.
    ridge_point: FLOPs per byte above which an op counts as compute-bound (default 16).
    outputs: "clone" (default) or "view" (views of the static buffers, valid until the next run).
    memory: CUDA: "record-stream" (default) or "keep-alive", how capture protects tensors read on
        other streams; "smaller-pool" captures both ways and keeps the smaller pool (stats
        keep_alive, pool_bytes_record_stream, pool_bytes_keep_alive).
    memory_pool: CUDA: "a,b", a torch.cuda.graph_pool_handle(): the model's graphs capture into
        that pool, shared with other models given it (they take turns; not with "smaller-pool").
    cuda_measure_ms: CUDA, without max_streams: compile() captures the sequential graph, the plan
        capped at half its streams and the plan, times their replays in interleaved rounds for
        about this long and keeps the fastest unless it is not clearly (3%) faster than one stream
        (default 200; stats()["candidates"]); 0: the plan, captured unmeasured.
    memory_budget: CUDA: the most the graphs may hold, their pool and their cuBLAS workspaces (one
        a stream that runs a matrix product, 32 MiB on Hopper): "1.3x" (default: a ratio to what
        the sequential graph holds, at least 64 MiB more than it), "1.3x+0" or "2x+16MiB" (another
        headroom), or a size ("512MiB", "2GB", bytes). Without max_streams the plan's streams are
        capped until its estimate fits (stats()["budget_stream_cap"]); a measured candidate over it
        is dropped (stats()["memory_budget_bytes"]).
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
    cache: True (default on the CPU, unless OPARA_CACHE=0; on CUDA only when asked, cache=True or
        OPARA_CACHE=1): a compile with Inductor's kernels is kept on disk and the next compile of
        the same model, inputs and options loads it, in this process or another
        (python/opara/_cache.py; stats()["cache"]: "hit", "stored", "off", "bypassed: ...").
    cache_dir: the cache's folder (default: $OPARA_CACHE_DIR, else ~/.cache/opara/compiled).
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
    kernels = kernels_option(options, "opara.compile")
    cache = cache_hook(settings(options, "opara.compile"))
    text = _options_text(options)
    is_path = _is_path(model, "opara.compile")
    name = str(model) if is_path else type(model).__name__
    torch.ops.opara.check_options(text)  # a bad option named before anything is exported or compiled

    def load(lowered: list[Lowered]) -> Any:
        return lowered[0].model(name, inputs, text)

    lowered, handle = lower_and_load(lambda chosen: [lower(model, inputs, text, chosen, name, cache=cache)], load,
                                     kernels, name)
    return CompiledModel(handle, name, lowered)


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
        each bucket's stats (as CompiledModel.stats()); kernels and aten_because, one per bucket
        (as CompiledModel.stats()'s); regions, region_input_copies and region_compile_s, all buckets'."""
        lowered = [lowering.stats() for lowering in self._lowerings]
        return {**json.loads(self._handle.stats()), "kernels": [one["kernels"] for one in lowered],
                "aten_because": [one["aten_because"] for one in lowered],
                "regions": sum(one["regions"] for one in lowered),
                "region_input_copies": sum(one["region_input_copies"] for one in lowered),
                "region_compile_s": sum(one["region_compile_s"] for one in lowered)}

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
    kernels = kernels_option(options, "opara.compile_graph_set")
    settings(options, "opara.compile_graph_set")  # checked; a graph set's buckets are compiled as before
    text = _options_text(options)
    declared = None if batched_inputs is None else [int(index) for index in batched_inputs]
    is_path = _is_path(model, "opara.compile_graph_set")
    name = str(model) if is_path else type(model).__name__
    try:  # what the library refuses, said before anything is exported at a size that cannot be
        sizes = list(torch.ops.opara.batch_sizes(name, [int(size) for size in batch_sizes]))
        batched = list(torch.ops.opara.batched_inputs(inputs, declared))
    except RuntimeError as error:  # the library's message names the model or the input
        raise ValueError(_first_line(error)) from None
    if is_path:  # the library makes a file's buckets
        lowered = lower(model, inputs, text, kernels, name, graph_set=True)
        handle = torch.classes.opara.GraphSet([lowered.path], inputs, sizes, text, declared, share_pool)
        return GraphSet(handle, name, [lowered])

    def lowerings(chosen: str) -> list[Lowered]:
        return [lower(model, torch.ops.opara.inputs_with_rows(inputs, batched, size), text, chosen,
                      f"{name} at {size} rows") for size in sizes]

    def load(lowered: list[Lowered]) -> Any:
        descriptions, constants = zip(*(one.region_arguments() for one in lowered))
        return torch.classes.opara.GraphSet.from_archives([one.archive for one in lowered], name, inputs, sizes, text,
                                                          batched, share_pool, list(descriptions), list(constants))

    lowered, handle = lower_and_load(lowerings, load, kernels, name)
    return GraphSet(handle, name, lowered)
