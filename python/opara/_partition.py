"""The FX partitioning of kernels="inductor": pure graph work on a torch.export program. Which
nodes form each region (the plan's regions matched to FX nodes, or the whole program cut at the
writes of state kept outside), each region as an FX GraphModule with its inputs and outputs, and
the program opara runs: each region one call of an op, the other nodes as they are. It compiles
nothing and calls no Inductor; the only decisions it asks the library for are the in-place twins
of state writes (torch.ops.opara.in_place_twin). It imports nothing of the package
(scripts/check_layers.py)."""

from __future__ import annotations

import contextlib
import graphlib
import heapq
import operator
from typing import Any, Iterator, Sequence

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor


class RegionsUnsupported(ValueError):
    """A program kernels="inductor" cannot take (its regions cannot be ordered, say): compile it
    with kernels="aten"."""


def _targets(exported: torch.export.ExportedProgram) -> dict[str, str]:
    """The model's own name (a dotted path) of each parameter, buffer and lifted constant, by the
    name of its placeholder."""
    signature = exported.graph_signature
    return {**signature.inputs_to_parameters, **signature.inputs_to_buffers,
            **signature.inputs_to_lifted_tensor_constants}


def constants_of(exported: torch.export.ExportedProgram) -> dict[str, torch.Tensor]:
    """The program's parameters, buffers and lifted constants, by the name of their placeholder."""
    return {name: exported.state_dict[target] if target in exported.state_dict else exported.constants[target]
            for name, target in _targets(exported).items()}


def node_values(exported: torch.export.ExportedProgram, inputs: list[torch.Tensor],
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


class Parts:
    """The FX nodes of each region, by name (`parts`), and the kernel-free nodes (views, size
    queries) each region recomputes (`kernel_free`)."""

    def __init__(self, parts: list[set[str]], kernel_free: set[str]):
        self.parts = parts
        self.kernel_free = kernel_free

    @classmethod
    def of_plan(cls, exported: torch.export.ExportedProgram, plan: dict[str, Any]) -> "Parts":
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
    def whole(cls, exported: torch.export.ExportedProgram, outside: set[str] = frozenset()) -> "Parts | None":
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


class Region:
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


def _kept_outside(graph: fx.Graph, regions: list[Region]) -> set[str]:
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


def set_outputs(graph: fx.Graph, regions: list[Region]) -> None:
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


def _item_order(graph: fx.Graph, regions: list[Region], name: str) -> tuple[list[tuple[str, Any]], list[fx.Node]]:
    """The items of the program opara runs, in order: the placeholders, each region, each node kept
    outside them, the output last; a topological order of the graph with each region contracted
    (which the plan's regions make a DAG), taking the ready item earliest in the graph first. Also
    the graph's nodes the items stand for."""
    region_of = {node_name: index for index, region in enumerate(regions) for node_name in region.part}
    kept = _kept_outside(graph, regions)
    nodes = [node for node in graph.nodes
             if node.name in region_of or node.name in kept or node.op in ("placeholder", "output")]
    item_of = {node.name: ("region", region_of[node.name]) if node.name in region_of else ("node", node.name)
               for node in nodes}
    position = {item: index for index, item in reversed(list(enumerate(item_of[node.name] for node in nodes)))}
    sorter: graphlib.TopologicalSorter = graphlib.TopologicalSorter()
    for node in nodes:
        if node.name not in region_of and node.op != "output":
            sorter.add(item_of[node.name], *(item_of[value.name] for value in node.all_input_nodes))
    for index, region in enumerate(regions):
        sorter.add(("region", index), *(item_of[input_name] for input_name in region.inputs))
    try:
        sorter.prepare()
    except graphlib.CycleError:
        raise RegionsUnsupported(f"the regions of {name} read each other through nodes outside them, in a ring; "
                                 "kernels='inductor' cannot order them") from None
    order: list[tuple[str, Any]] = []
    ready: list[tuple[int, tuple[str, Any]]] = []
    while sorter.is_active():
        for item in sorter.get_ready():
            heapq.heappush(ready, (position[item], item))
        _, item = heapq.heappop(ready)
        order.append(item)
        sorter.done(item)
    return order + [("node", nodes[-1].name)], nodes


def outer_module(exported: torch.export.ExportedProgram, regions: list[Region], calls: list[tuple[Any, int]],
                 constants: dict[str, torch.Tensor], state: "ProgramState", in_place: dict[str, Any],
                 name: str) -> fx.GraphModule:
    """The program with each region one call of its op (`calls`: the op and the region's key, as
    op(key, inputs)) and a getitem per output, the nodes kept outside the regions as they are, and
    its constants as attributes; its placeholders are the user inputs. State the program writes
    (`state.written`) is written in place by the nodes `in_place` names, as their in-place twin
    (index_copy_ for index_copy), else copied into its buffer or input at the end; only the user
    outputs are returned."""
    graph = exported.graph_module.graph
    order, nodes = _item_order(graph, regions, name)
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
            op, key = calls[what]
            call = out.call_function(op, (key, [value(n) for n in region.inputs]))
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
            copied[node.name] = out.call_function(in_place[node.name],
                                                  *fx.map_arg((node.args, node.kwargs), lambda v: value(v.name)))
        else:
            copied[node.name] = out.node_copy(node, lambda input_node: value(input_node.name))
    return fx.GraphModule(holder, out)


def placed(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
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


@contextlib.contextmanager
def devices_placed(graph: fx.Graph, device: torch.device) -> Iterator[None]:
    """Every device argument of `graph` made `device` while this is open (_place_device_arguments),
    then put back: the caller's program is left as it was."""
    saved = {node: (node.args, node.kwargs) for node in graph.nodes if node.op == "call_function"}
    _place_device_arguments(graph, device)
    try:
        yield
    finally:
        for node, (args, kwargs) in saved.items():
            node.args, node.kwargs = args, kwargs
        graph.owning_module.recompile()


def _op(target: str) -> Any:
    """"torch.ops.aten.index_copy_.default" -> torch.ops.aten.index_copy_.default."""
    _, _, namespace, name, overload = target.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _same_shape_and_dtype(value: fx.Node, placeholder: fx.Node) -> bool:
    """Whether the new value has the state's shape and dtype, so that writing it in place is what
    copying it back would do (a reassigned buffer may change either)."""
    new, old = value.meta.get("val"), placeholder.meta.get("val")
    return (isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor) and new.dtype == old.dtype
            and tuple(new.shape) == tuple(old.shape))


def in_place_writes(graph: fx.Graph, state: "ProgramState") -> dict[str, Any]:
    """The nodes that write state in place, by name, with the in-place twin each is written as: a
    written buffer's or input's new value made from the placeholder itself (as `self`) by an op the
    library writes in place (torch.ops.opara.in_place_twin: index_copy as index_copy_, add as add_),
    of the state's shape and dtype, where nothing else reads the placeholder. The program opara
    runs writes such a one in place (a KV cache's new row), outside the regions, where a region
    would make the whole new cache and the program copy it back."""
    output = next(node for node in graph.nodes if node.op == "output")
    placeholders = {node.name: node for node in graph.nodes if node.op == "placeholder"}
    found = {}
    for placeholder, index in state.written:
        value = output.args[0][index]
        if not (isinstance(value, fx.Node) and isinstance(value.target, torch._ops.OpOverload) and value.args
                and value.args[0] is placeholders[placeholder] and set(placeholders[placeholder].users) == {value}
                and _same_shape_and_dtype(value, placeholders[placeholder])):
            continue
        twin = torch.ops.opara.in_place_twin(f"torch.ops.{value.target}")
        if twin is not None:
            found[value.name] = _op(twin)
    return found


def linear_weights(graph: fx.Graph) -> set[str]:
    """The placeholders read only as a linear layer's weight. They stay region inputs: folded,
    Inductor's freezing lays them out anew, and bert_base's matrix products then ran 0.86x
    Inductor's against 1.07x on the original layout (CPU, 32 rows); convolution weights, folded
    and prepacked, made googlenet 1.40x."""
    return {node.name for node in graph.nodes if node.op == "placeholder" and node.users and all(
        user.target is torch.ops.aten.linear.default and user.args[1] is node for user in node.users)}


class ProgramState:
    """What a functional program writes in place: `written`, (the placeholder of the buffer or
    user input written, the index of its new value among the outputs), and `user_outputs`, the
    indices of the outputs the caller sees. The regions compute the new values (or the program
    opara runs writes them in place: in_place_writes); the program writes the others back at its
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
