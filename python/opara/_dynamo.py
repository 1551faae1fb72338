"""torch.compile(model, backend="opara"): each FX graph Dynamo captures is lowered to ATen with
torch.export and compiled by the C++ library in memory (no file, no TorchScript), one compiled
graph per input shape: a parallel CUDA graph on a GPU, the parallel host executor on the CPU.

Dynamo does what opara cannot: graph breaks (a data-dependent branch runs eagerly between two
graphs), guards and recompilation. A graph opara cannot take runs eagerly with one warning naming
the reason (options={"fallback": "error"} raises instead); a wrong result is never returned.

Parameters and buffers reach a graph as inputs (Dynamo lifts them); opara reads them where they
are (Options::static_inputs): no copy per graph or per run, so an in-place change to a weight
(load_state_dict, an optimiser step under no_grad) is seen by the next call. A weight replaced by
another tensor, or moved, gets the graph compiled again for it at its next call. With Inductor's
kernels (kernels="inductor", the CPU's default) the weights are folded into the regions instead,
and one written in place gets the graph compiled again, reading its weights from then on.

State the graph writes in place (a KV cache, its position counter: a decode step) is written where
it lives (state_in_place: on a GPU the captured graph writes the caller's cache, with no copy per
call; a new cache takes over the memory of one the caller dropped, and one beside a cache still
held gets the graph compiled again); compiling never advances it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import operator
import types
import warnings
from typing import Any, Callable, Iterator

import torch
import torch.utils._pytree as pytree
from torch._guards import tracing
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ._cache import CacheSettings, cache_hook, settings
from ._frontend import _compile_device, _first_line, _options_text, exported, has_symbolic_sizes
from ._inductor_compat import is_dynamo_static
from ._library import load_library
from ._lowering import Kernels, Lowered, kernels_option, lower, lower_and_load

# What the backend did since the process started (or since counters.clear()): graphs Dynamo
# handed over, opara compiles (one per graph and shape), graphs that run eagerly instead, and
# (kernels="inductor") the regions Inductor compiled.
counters: collections.Counter[str] = collections.Counter()

# What each of the backend's recent compiles made, newest last (opara.dynamo_compiles): the graph,
# the kernels it runs (Inductor's regions or ATen's nodes), the device, its plan's nodes and streams,
# the streams and threads a call uses, and its compile time. Bounded: a server compiling many
# shapes keeps the last 64.
compiles: collections.deque[dict[str, Any]] = collections.deque(maxlen=64)

# The values of "fallback", the one key the backend reads itself (every other is an opara.compile
# option): what a graph opara cannot take does.
_FALLBACKS = ("eager", "error")


class OparaBackendError(RuntimeError):
    """A graph opara could not compile, with options={"fallback": "error"}."""


def _checked_options(options: Any) -> tuple[dict[str, str], str, str, bool, CacheSettings]:
    """The options as opara's option text, the fallback, the kernels, whether weights are folded
    into Inductor's regions and the compile cache; bad ones raise naming the option."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise TypeError(f"torch.compile(backend='opara') options must be a dict, not {type(options).__name__}")
    options = dict(options)
    kernels = kernels_option(options, "torch.compile(backend='opara')")
    cache = settings(options, "torch.compile(backend='opara')")
    fallback = options.pop("fallback", "eager")
    if fallback not in _FALLBACKS:
        raise ValueError(f"torch.compile(backend='opara') option fallback={fallback!r}: expected 'eager' or 'error'")
    fold_weights = options.pop("fold_weights", True)
    if not isinstance(fold_weights, bool):
        raise TypeError(f"torch.compile(backend='opara') option fold_weights={fold_weights!r}: expected True (the "
                        "weights folded into Inductor's regions) or False (read at each call)")
    if "static_inputs" in options:
        raise ValueError("torch.compile(backend='opara') option static_inputs: the backend sets it (a graph's "
                         "parameters and buffers); it is not an option here")
    text = _options_text(options)  # TypeError naming the option for a value of the wrong type
    load_library()
    try:
        torch.ops.opara.check_options(text)
    except RuntimeError as error:
        raise ValueError(f"torch.compile(backend='opara'): {_first_line(error)}") from None
    return text, fallback, kernels, fold_weights, cache


class _Specialized(torch.nn.Module):
    """The graph with its non-tensor arguments (a symbolic size's value) fixed: torch.export and
    opara take tensors only. Its non-tensor results (a size the graph returns, a lazily made
    cache's batch) are fixed too, read off the trace: it returns the tensors alone, and
    `results(tensors)` puts the graph's whole output back together."""

    def __init__(self, graph: torch.fx.GraphModule, args: list[Any], sizes: dict[int, tuple[int, int]] | None = None):
        super().__init__()
        self.graph_module = graph
        self.fixed = [None if isinstance(arg, torch.Tensor) else arg for arg in args]
        # A symbolic size Dynamo passes as an argument, read off the tensor dimension it is (by
        # argument: the tensor's index among the tensors, the dimension): a dynamic-shape export
        # then traces it as that size, not as the first call's number.
        self.sizes = sizes or {}
        # What the trace saw (torch.export puts a module's own attributes back after tracing).
        self.traced = types.SimpleNamespace(out_spec=None, fixed_results=[])  # by leaf: None for a tensor

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        given = iter(tensors)
        arguments = [next(given) if fixed is None else fixed for fixed in self.fixed]
        for position, (tensor, dim) in self.sizes.items():
            arguments[position] = tensors[tensor].shape[dim]
        # Node by node, keeping each node's metadata: the exported nodes then name the model's own
        # lines and modules (plan()'s "sources"), not the graph module's generated code.
        with torch.fx.traceback.preserve_node_meta():
            output = torch.fx.Interpreter(self.graph_module).run(*arguments)
        leaves, self.traced.out_spec = pytree.tree_flatten(output)
        self.traced.fixed_results = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                self.traced.fixed_results.append(None)
            elif isinstance(leaf, (bool, int, float, str, type(None))):
                self.traced.fixed_results.append(leaf)
            else:  # a SymInt computed from the data: no fixed value to give back
                raise TypeError(f"the graph returns {type(leaf).__name__} {leaf}, computed from tensor data; "
                                "opara returns tensors and fixed values only")
        return tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))

    def results(self, tensors: list[torch.Tensor]) -> Any:
        given = iter(tensors)
        leaves = [next(given) if fixed is None else fixed for fixed in self.traced.fixed_results]
        return pytree.tree_unflatten(leaves, self.traced.out_spec)


def _attributes_lifted(graph: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, tuple[torch.Tensor, ...]]:
    """`graph` (itself where it reads no tensor attribute) with each tensor it reads as an attribute
    taken as an input after its own, and those tensors. A copy: Dynamo reads its graph's
    placeholders after the backend returns."""
    read = [(node, operator.attrgetter(node.target)(graph)) for node in graph.graph.nodes if node.op == "get_attr"]
    attributes = {node: value for node, value in read if isinstance(value, torch.Tensor)}
    if not attributes:
        return graph, ()
    copied = torch.fx.Graph()
    nodes: dict[torch.fx.Node, torch.fx.Node] = {}
    copied.output(copied.graph_copy(graph.graph, nodes))
    placeholders = [node for node in copied.nodes if node.op == "placeholder"]
    last = placeholders[-1] if placeholders else None
    for node in attributes:
        attribute = nodes[node]
        with copied.inserting_after(last) if last is not None else copied.inserting_before():
            placeholder = copied.placeholder(attribute.name)
        placeholder.meta.update(attribute.meta)
        attribute.replace_all_uses_with(placeholder)
        copied.erase_node(attribute)
        last = placeholder
    lifted = torch.fx.GraphModule(graph, copied)
    lifted.meta.update(graph.meta)
    return lifted, tuple(attributes.values())


def _foldable(weight: torch.Tensor) -> bool:
    """Whether a static input may be folded into Inductor's regions: its in-place writes must move
    its version counter, which an inference tensor has none of, and which a CUDA graph's replay
    (another compiled graph writing a buffer this one reads) does not move: on a GPU only
    parameters are folded."""
    return not weight.is_inference() and (weight.device.type == "cpu" or isinstance(weight, torch.nn.Parameter))


class _Compiled:
    """One shape's compiled graph: the extension's handle (watching the weights and state it reads
    where they are), how to rebuild the outputs, and the regions it calls."""

    def __init__(self, handle: Any, graph: _Specialized, tensors: list[torch.Tensor], weights: list[int],
                 lowered: Lowered):
        self.handle = handle
        self.graph = graph
        self.lowered = lowered  # with the regions the handle's opara::region nodes call (kept alive here)
        regions = lowered.regions
        # Checked before each run (Model.run_watched): where each weight (Dynamo's static inputs) had
        # its memory, since one may be given new memory (`param.data = ...`, module.to(...)) and then
        # it is another input; the version counters of those the regions hold folded in, which every
        # in-place write (load_state_dict, copy_, an optimiser step) advances; and the state the graph
        # writes (a KV cache), which may be made anew for each request.
        folded = list(regions.folded_inputs) if regions is not None else []
        handle.watch(tensors, weights, folded)
        # A call passing these very weights (Dynamo passes the module's own parameters) hands the
        # library the other tensors alone (Model.run_with_watched_weights): converting every weight
        # at each call cost more than checking it.
        self.count = len(tensors)
        self.weights_of = _picker(weights)
        watched = set(weights)
        self.others_of = _picker([k for k in range(len(tensors)) if k not in watched])
        self.weights = self.weights_of(tensors)

    def run(self, tensors: list[torch.Tensor]) -> tuple[int, list[torch.Tensor]]:
        """Model.run_watched's (found, outputs) for these tensors."""
        if len(tensors) == self.count and all(map(operator.is_, self.weights_of(tensors), self.weights)):
            return self.handle.run_with_watched_weights(list(self.others_of(tensors)))
        return self.handle.run_watched(tensors)


def _picker(positions: list[int]) -> Callable[[list[Any]], tuple[Any, ...]]:
    """The items at `positions` of a list, as a tuple (operator.itemgetter's, for any count)."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        position = positions[0]
        return lambda values: (values[position],)
    return lambda values: ()


_SAME, _MOVED, _WRITTEN = 0, 1, 2  # Model.run_watched's answers (csrc/ext/model_class.cpp)

# The compiles of this many other modules' weights are kept per Dynamo graph (each holds its
# weights folded in): an ensemble of a few members of one class alternates without compiling again.
_WEIGHT_SETS_KEPT_APART = 4


def _described(name: str, handle: Any, lowered: Lowered) -> dict[str, Any]:
    """One compile as opara.dynamo_compiles lists it."""
    stats, plan = handle.stats(), json.loads(handle.plan())
    lowering = lowered.stats()
    return {"graph": name, "device": handle.device(), "kernels": lowering["kernels"],
            "aten_because": lowering["aten_because"], "regions": int(lowering["regions"]), "nodes": plan["nodes"],
            "plan_streams": plan["streams"], "streams": int(stats["streams"]),
            "threads": int(stats["intra_op_threads"]), "host_nodes": int(stats["host_nodes"]),
            "segments": int(stats["segments"]), "compile_ms": stats["compile_ms"], "tuning_ms": stats["tuning_ms"],
            "region_compile_s": lowering["region_compile_s"],
            "cache": lowering["cache"]}


def describe(entry: dict[str, Any]) -> str:
    """One line for an entry of opara.dynamo_compiles: what ran where."""
    kernels = (f"{entry['regions']} Inductor region(s)" if entry["kernels"] == "inductor"
               else f"ATen's kernels, one per node: {entry['aten_because']}")
    if entry.get("cache") == "hit":
        kernels += ", loaded from the compile cache"
    on = (f"{entry['streams']} of {entry['plan_streams']} planned stream(s), {entry['threads']} thread(s) each"
          if entry["device"].startswith("cpu")
          else f"{entry['streams']} stream(s) in {entry['segments']} segment(s), {entry['host_nodes']} host node(s)")
    return f"{entry['graph']}: {entry['nodes']} node(s) ({kernels}) on {entry['device']}: {on}"


def _traced_values(graph: torch.fx.GraphModule, example_inputs: list[Any]) -> list[Any]:
    """The graph's inputs as Dynamo traced them (its placeholders' fake values, whose sizes are
    symbolic where Dynamo made them so; the example inputs it passes are real tensors), or the
    example inputs where the graph does not record them."""
    values = [node.meta.get("example_value") for node in graph.graph.nodes if node.op == "placeholder"]
    if len(values) != len(example_inputs) or any(value is None for value in values):
        return example_inputs
    return values


def _size_sources(example_inputs: list[Any]) -> dict[int, tuple[int, int]] | None:
    """Where each symbolic size Dynamo passes as an argument is a dimension of a tensor argument
    (by argument: the tensor's index among the tensors, the dimension); None where one is not."""
    tensors = [value for value in example_inputs if isinstance(value, torch.Tensor)]
    dims = {str(size): (index, dim) for index, tensor in reversed(list(enumerate(tensors)))
            for dim, size in reversed(list(enumerate(tensor.shape))) if isinstance(size, torch.SymInt)}
    sources = {}
    for position, value in enumerate(example_inputs):
        if isinstance(value, torch.SymInt):
            if str(value) not in dims:
                return None
            sources[position] = dims[str(value)]
    return sources


def _dynamic_shapes(example_inputs: list[Any]) -> tuple[tuple[dict[int, Any], ...]]:
    """torch.export's dynamic_shapes for _Specialized's forward(*tensors): each dimension Dynamo made
    symbolic, left for torch.export to relate (Dim.AUTO)."""
    tensors = [value for value in example_inputs if isinstance(value, torch.Tensor)]
    auto = torch.export.Dim.AUTO
    return (tuple({dim: auto for dim, size in enumerate(tensor.shape) if isinstance(size, torch.SymInt)}
                  for tensor in tensors),)


class _SymbolicProgram:
    """One dynamic-shape export of a graph Dynamo made symbolic, lowered once: with ATen's kernels,
    or with Inductor's regions compiled for every shape. Each concrete shape is compiled from it by
    the library (no export, no lowering, no Inductor), with the schedule the first shape's tuning
    chose (`tuned`: the options that fix it, on the CPU)."""

    def __init__(self, specialized: _Specialized, lowered: Lowered):
        self.specialized = specialized
        self.lowered = lowered
        self.tuned: dict[str, str] | None = None
        self.pool: str | None = None  # on a GPU: the graph memory pool every shape captures into

    def options(self, options: dict[str, str], device: torch.device) -> dict[str, str]:
        """A shape's options: the first shape's tuning, and on a GPU one memory pool for every
        shape's graphs, as a graph set's buckets share one (they take turns; each call's outputs are
        the caller's own, so a later shape's replay reuses only what its graph freed)."""
        chosen = {**options, **(self.tuned or {})}
        shares = options.get("memory") != "smaller-pool" and options.get("outputs", "clone") == "clone"
        if device.type == "cuda" and shares:
            if self.pool is None:
                self.pool = ",".join(map(str, torch.cuda.graph_pool_handle()))
            chosen.setdefault("memory_pool", self.pool)
        return chosen

    def folds_weights(self) -> bool:
        """Whether Inductor's regions hold weights folded in, which a new weight tensor makes stale."""
        return bool(self.lowered.regions and self.lowered.regions.folded_inputs)

    def remember_tuning(self, handle: Any, options: dict[str, str]) -> None:
        """After the first shape: the schedule its tuning (the CPU) or measuring (CUDA) chose, as
        the options that make it again untimed (the library's chosen_options), unless the user
        fixed one."""
        if self.tuned is not None or "max_streams" in options or "intra_op_threads" in options:
            return
        self.tuned = dict(handle.chosen_options())


class _EagerGraph:
    """A graph opara could not take: Dynamo's own graph module, run as it is."""


@contextlib.contextmanager
def _outside_dynamos_trace() -> Iterator[None]:
    """A compile apart from the Dynamo trace that called the backend. Inside it, torch.export and
    Inductor take Dynamo's fake mode from its tracing context, and the symbols and guards they make
    for opara's own programs (Inductor's layout choice for a CUDA convolution) land in Dynamo's
    shape env, whose guards then name sizes no source of the frame has (IndexError at the guard)."""
    with tracing(None), unset_fake_temporarily():
        yield


class OparaGraph:
    """What the backend returns for one Dynamo graph: compiles per concrete shape at its first
    call (the graph's example shape at once) and runs the compiled graph."""

    def __init__(self, graph: torch.fx.GraphModule, example_inputs: list[Any], options: dict[str, str],
                 fallback: str, kernels: str = "auto", fold_weights: bool = True,
                 cache: CacheSettings = CacheSettings(None)):
        # A frozen trace (torch._inductor.config.freezing set for the process, as PyTorch's CPU
        # inference guide sets it) passes no weights: Dynamo made them attributes of the graph. They
        # become inputs again, given by this object at each call, so that they are folded, watched
        # and read where they live like the weights Dynamo passes.
        graph, self.attributes = _attributes_lifted(graph)
        example_inputs = list(example_inputs) + list(self.attributes)
        self.graph_module = graph
        self.options = options
        self.fallback = fallback
        self.kernels = kernels
        self.name = f"torch.compile graph {graph.meta.get('dynamo_compile_id', '')}".rstrip()
        lifted = range(len(example_inputs) - len(self.attributes), len(example_inputs))
        self.static = [i for i, value in enumerate(example_inputs) if is_dynamo_static(value) or i in lifted]
        # Dynamo guards its inputs' types: a graph of tensors alone is given tensors alone (no
        # filter over hundreds of weights at each call).
        self.tensors_only = all(isinstance(value, torch.Tensor) for value in example_inputs)
        self.fold_weights = fold_weights  # kernels="inductor": until a folded weight is written in place
        self.cache = cache_hook(cache)
        self.by_shape: dict[tuple, _Compiled | _EagerGraph] = {}
        # Another module of the same class (an ensemble's member) shares this graph: Dynamo guards
        # its parameters' properties, not which they are. The compiled shapes and the program above
        # hold one module's weights folded in (`weights`, their identities); another's are kept
        # apart while it runs (the most recent few).
        self.weights: tuple[int, ...] | None = None
        self.apart: collections.OrderedDict[tuple[int, ...], tuple[dict, Any]] = collections.OrderedDict()
        counters["graphs"] += 1
        symbols = [str(value) for value in example_inputs if isinstance(value, torch.SymInt)]
        symbolic = symbols or any(
            isinstance(size, torch.SymInt) for value in example_inputs if isinstance(value, torch.Tensor)
            for size in value.shape)
        self.symbolic = bool(symbolic)
        self.symbols = ", ".join(symbols) or "in its tensors"
        # A symbolic graph: exported once with dynamic shapes at its first call (_SymbolicProgram),
        # or why it is exported per shape instead.
        self.program: _SymbolicProgram | str | None = None
        traced = _traced_values(graph, list(example_inputs)) if symbolic else []
        self.size_sources = _size_sources(traced) if symbolic else None
        self.dynamic_shapes = _dynamic_shapes(traced) if symbolic else None
        self._weights_taken(list(example_inputs))
        if not symbolic and not self._inference_only(list(example_inputs)):
            self._compile(list(example_inputs))  # else at the first call without gradients
        self.told_gradients = False

    def _key(self, args: tuple[Any, ...] | list[Any]) -> tuple:
        """The concrete shape a call compiles for. A graph without symbolic sizes has one: Dynamo's
        guards hold every input's shape, dtype and device (no per-call walk over the inputs)."""
        if not self.symbolic:
            return ()
        return tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else ("value", a)
                     for a in args)

    def _inference_only(self, args: list[Any]) -> str | None:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return ("opara compiles for inference and its outputs carry no gradient; call the model under "
                    "torch.no_grad() or torch.inference_mode()")
        return None

    def _static_positions(self, args: tuple[Any, ...] | list[Any]) -> list[int]:
        """Where the static inputs are among the tensor arguments (what the compiled model takes)."""
        tensor_positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        return [tensor_positions.index(i) for i in self.static if i in tensor_positions]

    def _compile(self, args: list[Any]) -> _Compiled | _EagerGraph:
        key = self._key(args)
        compiled: _Compiled | _EagerGraph
        try:
            compiled = self._compiled(args)
        except Exception as error:  # export and opara fail in many ways; eager is always right
            if self.fallback == "error":
                raise OparaBackendError(f"opara could not compile {self.name}: {_first_line(error)}") from error
            warnings.warn(f"opara: {self.name} runs eagerly: {_first_line(error)}", stacklevel=3)
            counters["fallbacks"] += 1
            compiled = _EagerGraph()
        self.by_shape[key] = compiled
        return compiled

    def _compiled(self, args: list[Any]) -> _Compiled:
        """The graph for these arguments, lowered (opara._lowering chooses the kernels) and compiled.
        The weights (Dynamo's static inputs) are folded into Inductor's regions, prepacked once,
        until one is written in place (load_state_dict): then read at each call."""
        with _outside_dynamos_trace():
            return self._compiled_apart(args)

    def _compiled_apart(self, args: list[Any]) -> _Compiled:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        static_positions = self._static_positions(args)
        options = dict(self.options)
        if static_positions:
            options["static_inputs"] = ",".join(map(str, static_positions))
        options["state_in_place"] = "true"  # a KV cache Dynamo passes in is written where it lives
        if self.symbolic:
            compiled = self._from_symbolic_program(args, tensors, static_positions, options)
            if compiled is not None:
                return compiled
        with torch.no_grad():
            specialized = _Specialized(self.graph_module, args)
            program = exported(specialized, tensors)
        folded = [p for p in static_positions if self.fold_weights and _foldable(tensors[p])]
        lowered, handle = lower_and_load(
            lambda chosen: [lower(program, tensors, options, chosen, self.name, folded_inputs=folded,
                                  cache=self.cache)],
            lambda one: one[0].model(self.name, tensors, options),
            self.kernels, self.name)
        lowered = lowered[0]
        compiled = _Compiled(handle, specialized, tensors, static_positions, lowered)
        counters["compiles"] += 1
        counters["regions"] += len(lowered.regions or ())
        counters["cache_hits"] += lowered.cache == "hit"
        compiles.append(_described(self.name, handle, lowered))
        return compiled

    def _symbolic_program(self, args: list[Any], tensors: list[torch.Tensor], options: dict[str, str],
                          folded: list[int]) -> _SymbolicProgram | str:
        """The graph exported once with its symbolic sizes and lowered for every shape, or why not
        (then each shape is exported and lowered on its own)."""
        if self.size_sources is None:
            return "a size Dynamo passes as an argument is no dimension of its tensors"
        specialized = _Specialized(self.graph_module, args, self.size_sources)
        try:
            with torch.no_grad():
                program = exported(specialized, tensors, dynamic_shapes=self.dynamic_shapes)
        except Exception as error:  # export fails in many ways; per shape remains
            return f"torch.export could not keep its sizes symbolic ({_first_line(error)})"
        if not has_symbolic_sizes(program):
            return "torch.export fixed every size"
        lowered = lower(program, tensors, options, self.kernels, self.name, folded_inputs=folded)
        if lowered.kernels is Kernels.INDUCTOR and lowered.regions.description and lowered.regions.binding is None:
            return f"Inductor's regions were compiled for this shape alone: {lowered.regions.not_symbolic}"
        counters["symbolic_exports"] += 1
        counters["regions"] += len(lowered.regions or ())
        return _SymbolicProgram(specialized, lowered)

    def _from_symbolic_program(self, args: list[Any], tensors: list[torch.Tensor], static_positions: list[int],
                               options: dict[str, str]) -> _Compiled | None:
        """This shape compiled from the graph's one dynamic-shape export; None where there is none,
        or the export's sizes and conditions do not allow this shape (said once each)."""
        if self.program is None:
            folded = [p for p in static_positions if self.fold_weights and _foldable(tensors[p])]
            self.program = self._symbolic_program(args, tensors, options, folded)
            if isinstance(self.program, str):
                warnings.warn(f"opara: {self.name} has symbolic sizes ({self.symbols}); opara compiles it once per "
                              f"concrete shape, at the first call of each: {self.program}", stacklevel=5)
        program = self.program
        if isinstance(program, str):
            return None
        lowered = program.lowered.for_shape(tensors, self.name)
        try:
            if isinstance(lowered, str):  # a condition Inductor assumed while compiling the regions
                raise RuntimeError(lowered)
            handle = lowered.model(self.name, tensors,
                                   program.options(options, _compile_device(options, tensors, self.name)))
        except RuntimeError as error:  # or sizes outside the export's ranges or conditions
            warnings.warn(f"opara: {self.name} is compiled for this shape alone: {_first_line(error)}", stacklevel=5)
            return None
        program.remember_tuning(handle, options)
        compiled = _Compiled(handle, program.specialized, tensors, static_positions, lowered)
        counters["compiles"] += 1
        compiles.append({**_described(self.name, handle, lowered), "symbolic": True})
        return compiled

    def __call__(self, *args: Any) -> Any:
        reason = self._inference_only(args)
        if reason:  # gradients wanted: opara's outputs would carry none, so this call is Dynamo's graph
            if self.fallback == "error":
                raise OparaBackendError(f"opara cannot run {self.name}: {reason}")
            if not self.told_gradients:
                warnings.warn(f"opara: {self.name} runs eagerly while gradients are wanted: {reason}", stacklevel=2)
                counters["fallbacks"] += 1
                self.told_gradients = True
            return self.graph_module(*args, *self.attributes)
        key = self._key(args)
        callers = args
        args += self.attributes
        compiled = self.by_shape.get(key)
        tensors = list(args) if self.tensors_only else [a for a in args if isinstance(a, torch.Tensor)]
        if isinstance(compiled, _Compiled):
            found, outputs = self._run(compiled, tensors, key, args)
            if found == _SAME:
                return outputs
            if self._weights_taken(args):  # another module's weights: its own compiles, looked up again
                return self(*callers)
            if found == _WRITTEN:
                self.fold_weights = False  # written once, maybe again: from now on read at each call
                self.program = None  # a symbolic graph's regions are compiled again, reading the weights
            elif isinstance(self.program, _SymbolicProgram) and self.program.folds_weights():
                self.program = None  # a weight was replaced or moved: its regions hold the old one
            compiled = None
        if compiled is None:
            if self._weights_taken(args):  # a new shape of another module's: not from this one's program
                return self(*callers)
            compiled = self._compile(list(args))
        if isinstance(compiled, _EagerGraph):
            return self.graph_module(*args)
        found, outputs = self._run(compiled, tensors, key, args)
        if found != _SAME:  # compiled for these very tensors a moment ago: not reached
            return self._eager_from_now_on(key, args, RuntimeError("its inputs changed while it compiled"), 3)
        return outputs

    def _weights_taken(self, args: tuple[Any, ...] | list[Any]) -> bool:
        """Whether `args` hold other weights than the compiled shapes and program were made for
        (other tensors, not the same ones in other memory); if so, those become the ones compiled
        for these weights (none yet: compiled at their first call), the others kept apart."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        given = tuple(id(tensors[position]) for position in self._static_positions(args))
        if self.weights is None or given == self.weights:
            self.weights = given
            return False
        self.apart[self.weights] = (self.by_shape, self.program)  # the newest, last (it was taken out)
        self.by_shape, self.program = self.apart.pop(given, ({}, None))
        self.weights = given
        while len(self.apart) > _WEIGHT_SETS_KEPT_APART:
            self.apart.popitem(last=False)
        return True

    def _run(self, compiled: _Compiled, tensors: list[torch.Tensor], key: tuple, args: tuple[Any, ...]) -> tuple[int, Any]:
        """(_SAME, the graph's results), or why the compiled graph cannot run these tensors (then it
        did not run)."""
        try:
            found, outputs = compiled.run(tensors)
        except RuntimeError as error:  # an input opara refuses, a failure on the device: eager is still right
            return _SAME, self._eager_from_now_on(key, args, error)
        return found, compiled.graph.results(outputs) if found == _SAME else None

    def _eager_from_now_on(self, key: tuple, args: tuple[Any, ...], error: Exception, stacklevel: int = 4) -> Any:
        if self.fallback == "error":
            raise OparaBackendError(f"opara could not run {self.name}: {_first_line(error)}") from error
        warnings.warn(f"opara: {self.name} runs eagerly from now on: {_first_line(error)}", stacklevel=stacklevel)
        counters["fallbacks"] += 1
        self.by_shape[key] = _EagerGraph()
        return self.graph_module(*args)


def opara_backend(graph: torch.fx.GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None,
                  **unexpected: Any) -> Callable[..., Any]:
    """The torch.compile backend: torch.compile(model, backend="opara", options={...}).

    `options` takes opara.compile's keyword options (device, streams, order, max_streams, memory,
    outputs, intra_op_threads, kernels, ...) and "fallback": "eager" (default: a graph opara cannot
    take runs eagerly, with a warning) or "error" (OparaBackendError instead). kernels="inductor"
    compiles each region of the plan with Inductor (counters["regions"] counts them), the weights
    folded in (prepacked once) unless "fold_weights" is False; a weight written in place later
    (copy_, load_state_dict: its version counter moves) gets the graph compiled again, reading its
    weights at each call from then on. A write through `.data` moves no version counter and is not
    seen: write weights under torch.no_grad(), or give fold_weights=False. "cache" and "cache_dir"
    are opara.compile's: a graph compiled with Inductor's kernels is kept on disk, and the same
    graph in another process loads it (opara.dynamo_counters["cache_hits"]). Under a frozen trace
    (torch._inductor.config.freezing set) the weights Dynamo makes graph attributes are folded and
    watched alike; modules of one class, which share Dynamo's graph, each keep their own compiles.
    """
    if unexpected:
        names = ", ".join(sorted(unexpected))
        raise TypeError(f"torch.compile(backend='opara') takes options={{...}} only, not {names} "
                        "(mode presets are Inductor's)")
    text, fallback, kernels, fold_weights, cache = _checked_options(options)
    return OparaGraph(graph, list(example_inputs), text, fallback, kernels, fold_weights, cache)


def register() -> None:
    """Makes backend="opara" known to Dynamo in this process (import opara calls it), through
    Dynamo's public registry, once however often it is called. An installed package declares a
    torch_dynamo_backends entry point (setup.py): Dynamo lists it without importing opara and loads
    opara_backend at the first torch.compile(backend="opara"), so nothing is registered here then
    (Dynamo refuses a name registered twice)."""
    if "opara" not in torch.compiler.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(opara_backend, name="opara")
