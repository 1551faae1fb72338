"""kernels="inductor": opara plans the streams, Inductor compiles the kernels.

opara plans streams over a program's ATen graph and groups each stream's nodes into regions: runs
of one stream's nodes with cross-stream dependencies only at their edges, the small ones merged
into a neighbour (Plan::region_of, csrc/schedule/regions.h). Each region becomes an FX subgraph
that Inductor compiles (compile_fx: its fused kernels; its own CUDA graphs stay off, since opara
captures the whole), and one node of the program opara then compiles: a call of the op
opara::region(key, inputs), whose kernel runs the compiled region. Views and size queries are
recomputed in each region that reads them (and stay ATen nodes where something outside the regions
reads them); regions Inductor cannot compile stay ATen nodes.

On the CPU the whole program is one region by default (region_min_share given: the plan's). CPU
regions are compiled with Inductor's C++ wrapper, which releases the GIL while a region runs (the
Python wrapper holds it through each fused kernel, and two streams were no faster than one), and
called from C++ through its entry function (opara::native_region). On a GPU the regions run only
while opara warms up and captures; replays are one CUDA graph.
docs/architecture.md ("Regions compiled by Inductor") has the measurements behind these choices.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import operator
import threading
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor

from ._frontend import _archive, _compile_device, _first_line

# The compiled regions by key, and their outputs' (shape, stride, dtype): what the op's kernel
# runs and what its fake kernel (torch.export's tracing) makes. A CompiledRegions removes its own.
_REGIONS: dict[int, tuple[Callable[..., list[torch.Tensor]], list[tuple[Any, Any, torch.dtype]], torch.device]] = {}
_KEYS = itertools.count()

_LIBRARY = torch.library.Library("opara", "FRAGMENT")
_LIBRARY.define("region(int key, Tensor[] inputs) -> Tensor[]")


def _run_region(key: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    # Inputs laid out otherwise than the region's examples are copied into their layout first
    # (csrc/ext/region_inputs.h), as opara::native_region does.
    return list(_REGIONS[key][0](*torch.ops.opara.region_inputs(key, inputs)))


def _fake_region(key: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    _, outputs, device = _REGIONS[key]
    return [torch.empty_strided(shape, stride, dtype=dtype, device=device) for shape, stride, dtype in outputs]


_LIBRARY.impl("region", _run_region, "CompositeExplicitAutograd")
torch.library.register_fake("opara::region", _fake_region, lib=_LIBRARY)
_NATIVE_FAKE: list[Any] = []  # opara::native_region's fake kernel, once the extension defines the op


def _native_region_op() -> Any:
    """opara::native_region (csrc/ext/native_region_op.cpp), its fake kernel registered here."""
    if not _NATIVE_FAKE:
        _NATIVE_FAKE.append(torch.library.register_fake("opara::native_region", _fake_region, lib=_LIBRARY))
    return torch.ops.opara.native_region.default


class RegionsUnsupported(ValueError):
    """A program kernels="inductor" cannot take (its regions cannot be ordered, say): compile it
    with kernels="aten"."""


class CompiledRegions:
    """The regions of one compiled program, registered while this object lives (the compiled model
    holds it)."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.native: set[int] = set()  # keys also registered with opara::native_region
        self.skipped: list[str] = []  # why regions Inductor could not take stayed ATen nodes
        self.folded_inputs: list[int] = []  # the user inputs folded into the regions (read once)

    def add(self, compiled: "_CompiledRegion", device: torch.device) -> int:
        key = next(_KEYS)
        _REGIONS[key] = (compiled.run, [(tuple(o.shape), o.stride(), o.dtype) for o in compiled.outputs], device)
        torch.ops.opara.register_region_inputs(key, compiled.examples)
        self.keys.append(key)
        if compiled.native is not None:
            library, constants = compiled.native
            torch.ops.opara.register_native_region(key, library, compiled.inputs, constants, len(compiled.outputs),
                                                   compiled.cloned)
            self.native.add(key)
        return key

    def __len__(self) -> int:
        return len(self.keys)

    def input_copies(self) -> int:
        """How many of the regions' inputs came laid out otherwise than they were compiled for
        (strides, alignment) and were copied into that layout (csrc/ext/region_inputs.h)."""
        return int(torch.ops.opara.region_input_copies(self.keys))

    def __del__(self) -> None:
        try:
            for key in self.keys:
                _REGIONS.pop(key, None)
                torch.ops.opara.unregister_region_inputs(key)
            for key in self.native:
                torch.ops.opara.unregister_native_region(key)
        except (AttributeError, TypeError, RuntimeError):  # the interpreter is exiting: the registries go with it
            pass


def _targets(exported: torch.export.ExportedProgram) -> dict[str, str]:
    """The model's own name (a dotted path) of each parameter, buffer and lifted constant, by the
    name of its placeholder."""
    signature = exported.graph_signature
    return {**signature.inputs_to_parameters, **signature.inputs_to_buffers,
            **signature.inputs_to_lifted_tensor_constants}


def _constants(exported: torch.export.ExportedProgram) -> dict[str, torch.Tensor]:
    """The program's parameters, buffers and lifted constants, by the name of their placeholder."""
    return {name: exported.state_dict[target] if target in exported.state_dict else exported.constants[target]
            for name, target in _targets(exported).items()}


def _values(exported: torch.export.ExportedProgram, inputs: list[torch.Tensor],
            constants: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Every node's value on the example inputs, by node name: the regions' example inputs."""
    values: dict[str, Any] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, node: fx.Node) -> Any:
            values[node.name] = super().run_node(node)
            return values[node.name]

    given = iter(inputs)
    arguments = [constants[n.name] if n.name in constants else next(given)
                 for n in exported.graph_module.graph.nodes if n.op == "placeholder"]
    with torch.no_grad():
        Recorder(exported.graph_module).run(*arguments)
    return values


class _Parts:
    """The FX nodes of each region, by name (`parts`), and the kernel-free nodes (views, size
    queries) each region recomputes (`kernel_free`)."""

    def __init__(self, parts: list[set[str]], kernel_free: set[str]):
        self.parts = parts
        self.kernel_free = kernel_free

    @classmethod
    def of_plan(cls, exported: torch.export.ExportedProgram, plan: dict[str, Any]) -> "_Parts":
        """The regions of a plan. A plan node's outputs are named as the FX nodes that produce
        them (a multi-output node's by its getitem users, which go with it: Inductor compiles them
        together). A region with a node the program does not have at its top level (a body opara
        inlined), or with a size computed from the data (nonzero's, unknown when the region
        compiles), is left out: its nodes stay ATen."""
        nodes = {node.name: node for node in exported.graph_module.graph.nodes}
        parts: list[set[str]] = [set() for _ in range(plan.get("regions", 0))]
        left_out = set()
        # Kernel-free in the plan: recomputed in every region that reads it (regions.h), since a
        # view between two nodes of one region would otherwise leave and re-enter it.
        kernel_free: set[str] = set()
        for node, region in enumerate(plan.get("region_of", [])):
            names = plan["outputs"][node]
            if region < 0:
                kernel_free.update(name for name in names if name in nodes and nodes[name].op == "call_function")
                continue
            # The serializer names an output nothing reads "<node>_unused_<i>": one found name is enough.
            found = [nodes[name] for name in names if name in nodes and nodes[name].op == "call_function"]
            if not found:
                left_out.add(region)
                continue
            fx_node = found[0].args[0] if found[0].target is operator.getitem else found[0]
            parts[region].add(fx_node.name)
            parts[region].update(user.name for user in fx_node.users if user.target is operator.getitem)
        left_out |= {region for region, part in enumerate(parts) if any(_has_symbolic_size(nodes[n]) for n in part)}
        kept = [part for region, part in enumerate(parts) if part and region not in left_out]
        return cls(kept, kernel_free - set().union(*kept))

    @classmethod
    def whole(cls, exported: torch.export.ExportedProgram, outside: set[str] = frozenset()) -> "_Parts | None":
        """The whole program as one region, without a plan, or, where `outside` nodes (writes of
        state in place) sit between its nodes, one region per stage: the nodes that read, through
        any path, k of those writes in a row make stage k (a write reads its stage's region, and
        the next stage reads the write). None where a size is computed from the data (the plan
        leaves such regions out)."""
        calls = [node for node in exported.graph_module.graph.nodes if node.op == "call_function"]
        if not calls or any(_has_symbolic_size(node) for node in calls):
            return None
        stage: dict[str, int] = {}
        for node in calls:  # graph order: topological
            stage[node.name] = max((stage[value.name] + (value.name in outside) for value in node.all_input_nodes
                                    if value.name in stage), default=0)
        stages: dict[int, set[str]] = {}
        for node in calls:
            if node.name not in outside:
                stages.setdefault(stage[node.name], set()).add(node.name)
        return cls([stages[k] for k in sorted(stages)], set())


def _has_symbolic_size(node: fx.Node) -> bool:
    values = node.meta.get("val")
    values = values if isinstance(values, (list, tuple)) else [values]
    return any(isinstance(value, torch.Tensor) and any(isinstance(size, torch.SymInt) for size in value.shape)
               for value in values)


class _Region:
    """One part of the program: its own nodes (`part`), the kernel-free nodes it reads recomputed
    inside it, and the values it reads from outside (`inputs`: placeholders of its module, or its
    frozen constants). Once the caller knows which of its values others read (`outputs`),
    `module()` is it as an FX GraphModule."""

    def __init__(self, graph: fx.Graph, part: set[str], kernel_free: set[str], constants: dict[str, torch.Tensor],
                 frozen: set[str]):
        self.part = part
        self.outputs: list[str] = []
        recomputed: set[str] = set()
        frontier = [node for node in graph.nodes if node.name in part]
        while frontier:
            for value in frontier.pop().all_input_nodes:
                if value.name in kernel_free and value.name not in recomputed:
                    recomputed.add(value.name)
                    frontier.append(value)
        self.inside = part | recomputed
        self.members = [node for node in graph.nodes if node.name in self.inside]  # graph order: topological
        self.frozen = frozen
        self.inputs = list(dict.fromkeys(value.name for node in self.members for value in node.all_input_nodes
                                         if value.name not in self.inside and value.name not in self.frozen))
        self._constants = constants

    def module(self, examples: Sequence[Any]) -> fx.GraphModule:
        """The region as a GraphModule whose placeholders take `examples` (by `inputs`)."""
        sub = fx.Graph()
        holder = torch.nn.Module()
        copied: dict[str, fx.Node] = {}
        by_name = {value.name: value for node in self.members for value in node.all_input_nodes}
        for name, example in zip(self.inputs, examples):
            copied[name] = sub.placeholder(name)
            copied[name].meta = dict(by_name[name].meta)
            # Inductor compiles a placeholder for the layout of its recorded value: an example laid
            # out otherwise (made contiguous: _example) is recorded as it is.
            recorded = copied[name].meta.get("val")
            if isinstance(example, torch.Tensor) and isinstance(recorded, FakeTensor) and (
                    recorded.stride() != example.stride()):
                copied[name].meta["val"] = recorded.fake_mode.from_tensor(example)
                copied[name].meta.pop("tensor_meta", None)
        for node in self.members:
            for value in node.all_input_nodes:
                if value.name in self.frozen and value.name not in copied:
                    holder.register_buffer(value.name, self._constants[value.name])
                    copied[value.name] = sub.get_attr(value.name)
            copied[node.name] = sub.node_copy(node, lambda value: copied[value.name])
        sub.output(tuple(copied[name] for name in self.outputs))
        return fx.GraphModule(holder, sub)


def _kept_outside(graph: fx.Graph, regions: list[_Region]) -> set[str]:
    """The nodes outside the regions that the program still runs: those the output, a region or
    another kept node reads (a kernel-free node that only regions read is recomputed in them)."""
    in_regions = {name for region in regions for name in region.part}
    by_name = {node.name: node for node in graph.nodes}
    output = next(node for node in graph.nodes if node.op == "output")
    kept: set[str] = set()
    pending = [value.name for value in output.all_input_nodes] + [name for r in regions for name in r.inputs]
    while pending:
        name = pending.pop()
        if name in in_regions or name in kept:
            continue
        kept.add(name)
        pending.extend(value.name for value in by_name[name].all_input_nodes)
    return kept


def _set_outputs(graph: fx.Graph, regions: list[_Region]) -> None:
    """Each region's outputs: its own nodes' values that the program's output, another region or a
    node kept outside the regions reads. Leaving a region out later adds no output to the others:
    its nodes read what it read."""
    by_name = {node.name: node for node in graph.nodes}
    read = {name for region in regions for name in region.inputs}
    for name in _kept_outside(graph, regions):
        read.update(value.name for value in by_name[name].all_input_nodes)
    read.update(value.name for value in next(n for n in graph.nodes if n.op == "output").all_input_nodes)
    for region in regions:
        region.outputs = [node.name for node in region.members if node.name in region.part and node.name in read]


class _CompiledRegion:
    """A region as Inductor compiled it: `run` (Python: compiled_fx's function, aliasing outputs
    cloned), its outputs on the examples, and, for a CPU region built with the C++ wrapper whose
    entry was found, `native` (its library and the frozen constants its entry reads after the
    inputs) for opara::native_region, which calls it without Python."""

    def __init__(self, compiled: Callable[..., Any], examples: list[torch.Tensor], modules: list[Any]):
        # The example run: which outputs share memory with an input or an earlier output (opara
        # takes an op's results as new tensors; Inductor's buffer reuse is fixed at compile time),
        # and, seen on the way, what the C++ wrapper's entry receives.
        self.inputs = len(examples)
        self.examples = examples  # their layouts are what a call's inputs are copied into where they differ
        with _entry_inputs_recorded() as entry_inputs:
            self.outputs = list(compiled(*examples))
        seen = {tensor.untyped_storage().data_ptr() for tensor in examples}
        self.cloned = []
        for index, tensor in enumerate(self.outputs):
            address = tensor.untyped_storage().data_ptr()
            if address in seen:
                self.cloned.append(index)
            seen.add(address)
        clone = self.cloned

        def run(*inputs: torch.Tensor) -> list[torch.Tensor]:
            results = list(compiled(*inputs))
            for index in clone:
                results[index] = results[index].clone()
            return results

        self.run = run
        self.native = _native_entry(modules, entry_inputs, examples)
        if self.native is not None and not self._native_agrees(examples):
            self.native = None

    def _native_agrees(self, examples: list[torch.Tensor]) -> bool:
        """The entry, called as opara::native_region will, gives what the Python path gave on the
        examples (the same kernels: equal, not close); else the region keeps the Python call."""
        key = -1 - next(_KEYS)  # a key of its own for this check, never the program's
        library, constants = self.native
        torch.ops.opara.register_native_region(key, library, self.inputs, constants, len(self.outputs), self.cloned)
        try:
            native = torch.ops.opara.native_region(key, examples)
        finally:
            torch.ops.opara.unregister_native_region(key)
        return len(native) == len(self.outputs) and all(
            a.shape == e.shape and a.stride() == e.stride() and a.dtype == e.dtype and torch.equal(a, e)
            for a, e in zip(native, self.outputs))


@contextlib.contextmanager
def _patched(owner: Any, name: str, make: Callable[[Callable[..., Any], int], Callable[..., Any]]) -> Any:
    """`owner.name` replaced by make(original, this thread) while this is open. The patch is
    process-wide: under Dynamo's compile lock (which the backend already holds under torch.compile),
    so that two threads compiling regions never patch over each other and leave a stale one."""
    from torch._dynamo.convert_frame import compile_lock

    with compile_lock:
        original = getattr(owner, name)
        setattr(owner, name, make(original, threading.get_ident()))
        try:
            yield
        finally:
            setattr(owner, name, original)


@contextlib.contextmanager
def _entry_inputs_recorded() -> Any:
    """What the C++ wrapper hands its entry in this thread while this is open: its inputs, then its
    constants (Inductor's generated Python passes both to
    torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors). Another thread's calls meanwhile (a region
    running) are not recorded."""
    recorded: list[list[torch.Tensor]] = []
    if getattr(torch._C._aoti, "unsafe_alloc_void_ptrs_from_tensors", None) is None:
        yield recorded
        return

    def make(original: Callable[..., Any], thread: int) -> Callable[..., Any]:
        def record(tensors: list[torch.Tensor]) -> Any:
            if threading.get_ident() == thread:
                recorded.append(list(tensors))
            return original(tensors)
        return record

    with _patched(torch._C._aoti, "unsafe_alloc_void_ptrs_from_tensors", make):
        yield recorded


def _native_entry(modules: list[Any], entry_inputs: list[list[torch.Tensor]],
                  examples: list[torch.Tensor]) -> tuple[str, list[torch.Tensor]] | None:
    """The C++ wrapper's library and the constants its entry reads after the inputs, when the
    compile loaded one wrapper module that called its entry once, with the examples first."""
    entries = [module.inductor_entry for module in modules if hasattr(module, "inductor_entry")]
    if len(entries) != 1 or len(entry_inputs) != 1:
        return None
    library = getattr(getattr(entries[0], "__self__", None), "__file__", None)
    handed = entry_inputs[0]
    if not library or len(handed) < len(examples):
        return None
    same = all(isinstance(h, torch.Tensor) and h.data_ptr() == e.data_ptr() and h.shape == e.shape
               and h.stride() == e.stride() for h, e in zip(handed, examples))
    return (library, handed[len(examples):]) if same else None


@contextlib.contextmanager
def _modules_loaded(into: list[Any]) -> Any:
    """The wrapper modules Inductor loads in this thread while this is open (a fresh compile's and
    a cache hit's both go through PyCodeCache.load_by_key_path)."""
    from torch._inductor.codecache import PyCodeCache

    def make(original: Callable[..., Any], thread: int) -> Callable[..., Any]:
        def load(*args: Any, **kwargs: Any) -> Any:
            module = original(*args, **kwargs)
            if threading.get_ident() == thread:
                into.append(module)
            return module
        return load

    with _patched(PyCodeCache, "load_by_key_path", make):
        yield into


def _example(value: Any) -> Any:
    """What a region is compiled from for `value`: itself, or a contiguous copy of a tensor whose
    memory overlaps (an expanded tensor), whose layout no copy of a call's input could take
    (csrc/ext/region_inputs.h)."""
    return torch.ops.opara.region_example(value) if isinstance(value, torch.Tensor) else value


def _compile_region(region: _Region, values: dict[str, Any], device: torch.device) -> _CompiledRegion:
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    # A call's input in another layout is copied into the example's before the region runs
    # (csrc/ext/region_inputs.h): examples in a layout a copy can take.
    examples = [_example(values[name]) for name in region.inputs]
    native = device.type == "cpu"
    # `native` (CPU): the C++ wrapper, which releases the GIL while the region runs and whose entry
    # opara::native_region calls from C++ (about 1 us against 28): no Python runs with the model.
    # It compiles a program's kernels in one compiler call, faster than the Python wrapper's one
    # per kernel where they are many (googlenet as one region: 24 s against 35) and slower where
    # they are large (bert_base: about 15 s against 10). Freezing folds the constants the region
    # holds as attributes (prepacked convolution weights), and with the weights as inputs too its
    # passes made googlenet 1.11x Inductor's against 1.0x without (bert_base: the same speed, 1.5 s
    # more compile).
    # cpp.dynamic_threads: the C++ kernels take the running thread's OpenMP team size, not the one
    # at compile time, so a region follows the intra-op threads opara gives each worker. Baked in,
    # two workers ran two full teams each on the cores, and their spinning threads slowed the whole
    # process (Inductor itself, run after, 3x: docs/architecture.md).
    modules: list[Any] = []
    with torch.no_grad(), config.patch({"cpp_wrapper": native, "freezing": True,
                                        "cpp.dynamic_threads": True}), _modules_loaded(modules):
        compiled = compile_fx(region.module(examples), examples)
    with torch.no_grad():
        return _CompiledRegion(compiled, examples, modules if native else [])


def _outer_module(exported: torch.export.ExportedProgram, regions: list[_Region], keys: list[int],
                  native: set[int], constants: dict[str, torch.Tensor], state: "_State", in_place: set[str],
                  name: str) -> fx.GraphModule:
    """The program with each region one call of opara::region(key, inputs) and a getitem per output,
    the nodes kept outside the regions as they are, and its constants as attributes; its
    placeholders are the user inputs. State the program writes (`state.written`) is written in
    place by the nodes `in_place` names (index_copy_ for index_copy), else copied into its buffer
    or input at the end; only the user outputs are returned. Items (regions, other
    nodes) go in a topological order of the graph with each region contracted, which the plan's
    regions make a DAG."""
    graph = exported.graph_module.graph
    region_of = {name: index for index, region in enumerate(regions) for name in region.part}
    kept = _kept_outside(graph, regions)
    nodes = [node for node in graph.nodes
             if node.name in region_of or node.name in kept or node.op in ("placeholder", "output")]
    item_of = {node.name: ("region", region_of[node.name]) if node.name in region_of else ("node", node.name)
               for node in nodes}
    waits_for: dict[tuple[str, Any], set[tuple[str, Any]]] = {}
    for node in nodes:
        if node.name not in region_of:
            waits_for[item_of[node.name]] = {item_of[value.name] for value in node.all_input_nodes}
    for index, region in enumerate(regions):
        waits_for[("region", index)] = {item_of[name] for name in region.inputs}
    pending = list(dict.fromkeys(item_of[node.name] for node in nodes))
    order, done = [], set()
    while pending:
        ready = next((item for item in pending if waits_for[item] <= done), None)
        if ready is None:
            raise RegionsUnsupported(f"the regions of {name} read each other through nodes outside them, in a "
                                     "ring; kernels='inductor' cannot order them")
        pending.remove(ready)
        order.append(ready)
        done.add(ready)

    by_name = {node.name: node for node in nodes}
    holder = torch.nn.Module()
    out = fx.Graph()
    copied: dict[str, fx.Node] = {}

    targets = _targets(exported)

    def value(name: str) -> fx.Node:
        # A constant becomes an attribute at its first use outside the regions, under the model's
        # own name for it (CompiledModel.state() names written buffers so): one only frozen
        # regions read is not carried by the program.
        if name not in copied and name in constants:
            *path, leaf = targets[name].split(".")
            owner = holder
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            owner.register_buffer(leaf, constants[name])
            copied[name] = out.get_attr(targets[name])
        return copied[name]

    for kind, what in order:
        if kind == "region":
            region = regions[what]
            op = _native_region_op() if keys[what] in native else torch.ops.opara.region.default
            call = out.call_function(op, (keys[what], [value(n) for n in region.inputs]))
            for index, name in enumerate(region.outputs):
                copied[name] = out.call_function(operator.getitem, (call, index))
            continue
        node = by_name[what]
        if node.op == "placeholder" and node.name in constants:
            continue
        if node.op == "output":
            results = fx.map_arg(node.args[0], lambda input_node: value(input_node.name))
            # After every reader of the old values (the order above is topological, and this is last).
            for placeholder, index in state.written:
                if node.args[0][index].name not in in_place:
                    out.call_function(torch.ops.aten.copy_.default, (value(placeholder), results[index]))
            out.output(tuple(results[index] for index in state.user_outputs))
        elif node.name in in_place:  # the state written where it is, its only reader
            copied[node.name] = out.call_function(_IN_PLACE_TWINS[node.target],
                                                  *fx.map_arg((node.args, node.kwargs), lambda v: value(v.name)))
        else:
            copied[node.name] = out.node_copy(node, lambda input_node: value(input_node.name))
    return fx.GraphModule(holder, out)


def _placed(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """An example input where the compiled model runs it: on `device`, except a 0-dim CPU tensor
    on a GPU model (a scalar, which stays where it is, as the runtime keeps it)."""
    if tensor.device == device or (device.type == "cuda" and tensor.device.type == "cpu" and tensor.dim() == 0):
        return tensor
    return tensor.to(device)


def _place_device_arguments(graph: fx.Graph, device: torch.device) -> None:
    """Every device argument (factory calls and checks, which export records as the example's
    device: cuda:0 for a program exported from CUDA tensors) made `device` in place, as the C++
    runtime does for its nodes (csrc/exec/node_op.cpp), so that the regions create tensors where
    they run."""
    def placed(argument: Any) -> Any:
        return device if isinstance(argument, torch.device) else argument

    for node in graph.nodes:
        if node.op == "call_function":
            node.args = fx.node.map_aggregate(node.args, placed)
            node.kwargs = fx.node.map_aggregate(node.kwargs, placed)
    graph.owning_module.recompile()


# Functional writes into state and their in-place twins (the C++ importer pairs them the same way:
# csrc/import/exported_state.h).
_IN_PLACE_TWINS = {torch.ops.aten.index_copy.default: torch.ops.aten.index_copy_.default,
                   torch.ops.aten.index_put.default: torch.ops.aten.index_put_.default}


def _in_place_writes(graph: fx.Graph, state: "_State") -> set[str]:
    """The names of the nodes that can write state in place: a written buffer's or input's new
    value made by index_copy or index_put of the placeholder itself, which nothing else reads. The
    program opara runs writes such a one in place (a KV cache's new row), outside the regions,
    where a region would make the whole new cache and the program copy it back."""
    output = next(node for node in graph.nodes if node.op == "output")
    placeholders = {node.name: node for node in graph.nodes if node.op == "placeholder"}
    found = set()
    for placeholder, index in state.written:
        value = output.args[0][index]
        if (isinstance(value, fx.Node) and value.target in _IN_PLACE_TWINS and value.args[0] is placeholders[placeholder]
                and set(placeholders[placeholder].users) == {value}):
            found.add(value.name)
    return found


def _linear_weights(graph: fx.Graph) -> set[str]:
    """The placeholders read only as a linear layer's weight. They stay region inputs: folded,
    Inductor's freezing lays them out anew, and bert_base's matrix products then ran 0.86x
    Inductor's against 1.07x on the original layout (CPU, 32 rows); convolution weights, folded
    and prepacked, made googlenet 1.40x."""
    return {node.name for node in graph.nodes if node.op == "placeholder" and node.users and all(
        user.target is torch.ops.aten.linear.default and user.args[1] is node for user in node.users)}


class _State:
    """What a functional program writes in place: `written`, (the placeholder of the buffer or
    user input written, the index of its new value among the outputs), and `user_outputs`, the
    indices of the outputs the caller sees. The regions compute the new values (or the program
    opara runs writes them in place: _in_place_writes); the program writes the others back at its
    end, which torch.export records as the same mutation again."""

    def __init__(self, exported: torch.export.ExportedProgram):
        from torch.export.graph_signature import InputKind, OutputKind

        signature = exported.graph_signature
        buffer_placeholder = {spec.target: spec.arg.name for spec in signature.input_specs
                              if spec.kind == InputKind.BUFFER}
        self.written: list[tuple[str, int]] = []
        self.user_outputs: list[int] = []
        for index, spec in enumerate(signature.output_specs):
            if spec.kind == OutputKind.BUFFER_MUTATION:
                self.written.append((buffer_placeholder[spec.target], index))
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                self.written.append((spec.target, index))
            else:
                self.user_outputs.append(index)


def compile_regions(exported: torch.export.ExportedProgram, inputs: list[torch.Tensor], options: dict[str, str],
                    name: str, folded_inputs: Sequence[int] = ()) -> tuple[torch.export.ExportedProgram,
                                                                            CompiledRegions]:
    """`exported` with its regions compiled by Inductor, as a program of opara::region calls, and
    the regions (which must live as long as the program runs). `options` are the compile's (the
    plan is made as compile() will make it, with regions). The program's constants, and the user
    inputs at `folded_inputs` (the weights Dynamo passes in), are folded into the regions (read
    once, prepacked by Inductor's freezing), except state the program writes;
    `CompiledRegions.folded_inputs` says which inputs were."""
    device = _compile_device(options, inputs, name)
    inputs = [_placed(tensor, device) for tensor in inputs]
    _place_device_arguments(exported.graph_module.graph, device)
    exported = exported.run_decompositions({})  # functional: a region never writes what it reads
    state = _State(exported)
    # On the CPU the whole program is one region unless the user gives region_min_share: with
    # calls at 1 us the plan's regions ran level with Inductor, and one region faster: two cores'
    # overlap of small kernels does not beat Inductor's intra-op threads over the same kernels
    # fused across the region edges (docs/architecture.md, "Regions compiled by Inductor"). On a
    # GPU the calls happen only while opara captures, and the plan's regions stay.
    whole = device.type == "cpu" and "region_min_share" not in options
    in_place = _in_place_writes(exported.graph_module.graph, state) if whole else set()
    parts = _Parts.whole(exported, in_place) if whole else None
    if parts is None:
        in_place = set()
        archive = _archive(lambda buffer: torch.export.save(exported, buffer))
        plan = json.loads(torch.ops.opara.plan_archive(archive, name, inputs, {**options, "regions": "true"}))
        parts = _Parts.of_plan(exported, plan)
    constants = _constants(exported)
    values = _values(exported, inputs, constants)
    compiled = CompiledRegions()
    regions: list[_Region] = []
    keys: list[int] = []
    graph = exported.graph_module.graph
    # State the program writes is read at each call, never folded in.
    written = {placeholder for placeholder, _ in state.written}
    user_inputs = list(exported.graph_signature.user_inputs)
    folded = {user_inputs[index]: inputs[index] for index in folded_inputs}
    frozen = (set(constants) | set(folded)) - written - _linear_weights(graph)
    compiled.folded_inputs = [index for index in folded_inputs if user_inputs[index] in frozen]
    candidates = [_Region(graph, part, parts.kernel_free, {**constants, **folded}, frozen) for part in parts.parts]
    _set_outputs(graph, candidates)
    for region in candidates:
        try:
            compiled_region = _compile_region(region, values, device)
        except Exception as error:  # Inductor refuses some graphs; their nodes stay ATen
            compiled.skipped.append(f"the region of {sorted(region.part)[0]}: {_first_line(error)}")
            continue
        regions.append(region)
        keys.append(compiled.add(compiled_region, device))
    if compiled.skipped:
        warnings.warn(f"opara: {len(compiled.skipped)} regions of {name} stay ATen nodes (Inductor could not "
                      f"compile them): {compiled.skipped[0]}", stacklevel=3)
    outer = _outer_module(exported, regions, keys, compiled.native, constants, state, in_place, name)
    with torch.no_grad():
        program = torch.export.export(outer, tuple(inputs), strict=False)
    return program, compiled
