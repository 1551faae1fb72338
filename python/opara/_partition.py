"""The FX partitioning of kernels="inductor": pure graph work on a torch.export program. Which FX
nodes form each of the regions the library's plan cut (matched by the names of the values they
make), and each region as an FX GraphModule with its inputs and outputs. It compiles nothing,
calls no Inductor and decides no region: the library does (torch.ops.opara.region_plan), and
makes each compiled region one node of its graph (with_compiled_regions). It imports nothing of
the package (scripts/check_layers.py)."""
from __future__ import annotations

import contextlib
import operator
from typing import Any, Iterable, Iterator, Sequence

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols


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
    """The FX nodes of each region the plan cut, by name, with the plan's index of the region
    (`parts`), the kernel-free nodes (views, size queries) each region recomputes (`kernel_free`),
    and the writes of state the regions make where the state lives: by FX node, the in-place op
    the library runs it as (`in_place`: index_copy as aten.index_copy_), and by region, the state
    copied back from a value at its end (`write_backs`: (placeholder, value))."""

    def __init__(self, parts: list[tuple[int, set[str]]], kernel_free: set[str],
                 in_place: dict[str, Any] | None = None, write_backs: dict[int, list[tuple[str, str]]] | None = None):
        self.parts = parts
        self.kernel_free = kernel_free
        self.in_place = in_place or {}
        self.write_backs = write_backs or {}

    @classmethod
    def of_plan(cls, exported: torch.export.ExportedProgram, plan: dict[str, Any],
                state: "ProgramState | None" = None) -> "Parts":
        """The regions of a plan. A plan node's outputs are named as the FX nodes that produce
        them (a multi-output node's by its getitem users, which go with it: Inductor compiles them
        together). A region with a node the program does not have at its top level (a body opara
        inlined), or with a size computed from the data (nonzero's, unknown when the region
        compiles), is left out: its nodes stay ATen. A node that writes state (the plan's
        "writes": the library's name of what it writes) is the program's functional write made
        in place, or the library's copy of a new value into the state after the readers of the old
        one, which has no FX node: `state` says which value."""
        nodes = {node.name: node for node in exported.graph_module.graph.nodes}
        placeholders = _placeholders_by_library_name(exported, state) if state is not None else {}
        parts: list[set[str]] = [set() for _ in range(plan.get("regions", 0))]
        in_place: dict[str, Any] = {}
        write_backs: dict[int, list[tuple[str, str]]] = {}
        left_out = set()
        # Kernel-free in the plan (no region, no stream): recomputed in every region that reads it
        # (regions.h), since a view between two nodes of one region would otherwise leave and
        # re-enter it.
        kernel_free: set[str] = set()
        writes = plan.get("writes", [])
        for node, region in enumerate(plan.get("region_of", [])):
            # The serializer names an output nothing reads "<node>_unused_<i>": one found name is enough.
            found = [nodes[name] for name in plan["outputs"][node]
                     if name in nodes and nodes[name].op == "call_function"]
            written = writes[node] if node < len(writes) else ""
            if not found:
                if region >= 0 and written in placeholders:
                    placeholder = placeholders[written]
                    write_backs.setdefault(region, []).append((placeholder, state.value_written(placeholder)))
                elif region >= 0:
                    left_out.add(region)
                continue
            # A multi-output node (split) is named by its getitems, which go with it.
            fx_node = found[0].args[0] if found[0].target is operator.getitem else found[0]
            names = {fx_node.name} | {user.name for user in fx_node.users if user.target is operator.getitem}
            if region >= 0:
                parts[region] |= names
                if written in placeholders:  # state, made in place (an intermediate's write is the region's own)
                    in_place[fx_node.name] = _operator(plan["kinds"][node], fx_node.target)
            elif plan["stream_of"][node] < 0:
                kernel_free |= names
        left_out |= {region for region, part in enumerate(parts) if any(_has_size_from_data(nodes[n]) for n in part)}
        kept = [(region, part) for region, part in enumerate(parts) if part and region not in left_out]
        return cls(kept, kernel_free - set().union(*(part for _, part in kept)), in_place,
                   {region: backs for region, backs in write_backs.items() if region not in left_out})


def _operator(kind: str, functional: Any) -> Any:
    """The op of the library's `kind` ("aten::index_copy_") in the overload of `functional`'s."""
    namespace, name = kind.split("::")
    return getattr(getattr(getattr(torch.ops, namespace), name), functional._overloadname)


def library_names(exported: torch.export.ExportedProgram, state: "ProgramState") -> dict[str, str]:
    """The library's name of each placeholder that is a value of its graph where it differs from
    the placeholder's: a buffer the program writes is state, named as the model names it."""
    buffers = exported.graph_signature.inputs_to_buffers
    return {placeholder: buffers[placeholder] for placeholder, _ in state.written if placeholder in buffers}


def _placeholders_by_library_name(exported: torch.export.ExportedProgram, state: "ProgramState") -> dict[str, str]:
    """The placeholder of each input or buffer the program writes, by the library's name of it (a
    buffer's is the model's: `layers.0.cache`; an input's its placeholder's)."""
    names = library_names(exported, state)
    return {names.get(placeholder, placeholder): placeholder for placeholder, _ in state.written}


def _has_size_from_data(node: fx.Node) -> bool:
    """Whether a node's value has a size computed from the data (nonzero's count: an unbacked
    symbol), which no input's size gives."""
    values = node.meta.get("val")
    values = values if isinstance(values, (list, tuple)) else [values]
    return any(isinstance(value, torch.Tensor) and free_unbacked_symbols(value) for value in values)


def symbolic_layout(value: torch.Tensor) -> bool:
    """Whether a recorded value's layout is symbolic (a dynamic-shape program's): comparing it with
    a concrete one would make the export assume the concrete sizes."""
    return any(isinstance(size, torch.SymInt) for size in (*value.shape, *value.stride()))


class Region:
    """One part of the program: its own nodes (`part`), the kernel-free nodes it reads recomputed
    inside it, and the values it reads from outside (`inputs`: placeholders of its module, or its
    frozen constants). The state it writes (`written`: placeholders) it writes where it lives: a
    functional write the library makes in place (`in_place`: by FX node, the in-place op) is that
    op on the placeholder, and a state copied back (`write_backs`: (placeholder, value)) is a copy
    into it at the region's end, after its readers. Once the caller knows which of its values
    others read (`outputs`), `module()` is it as an FX GraphModule."""

    def __init__(self, graph: fx.Graph, index: int, part: set[str], kernel_free: set[str],
                 constants: dict[str, torch.Tensor], frozen: set[str], in_place: dict[str, Any] | None = None,
                 write_backs: Sequence[tuple[str, str]] = ()):
        self.index = index  # the plan's
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
        self.in_place = {name: op for name, op in (in_place or {}).items() if name in part}
        self.write_backs = list(write_backs)
        self.frozen = frozen
        read = [value.name for node in self.members for value in node.all_input_nodes]
        read += [name for write_back in self.write_backs for name in write_back]
        self.inputs = list(dict.fromkeys(name for name in read if name not in self.inside and name not in self.frozen))
        self._nodes = {node.name: node for node in graph.nodes}
        self.written = {self._nodes[name].args[0].name for name in self.in_place} | {p for p, _ in self.write_backs}
        self._constants = constants

    def module(self, examples: Sequence[Any]) -> fx.GraphModule:
        """The region as a GraphModule whose placeholders take `examples` (by `inputs`)."""
        sub = fx.Graph()
        holder = torch.nn.Module()
        copied: dict[str, fx.Node] = {}
        by_name = self._nodes
        for name, example in zip(self.inputs, examples):
            copied[name] = sub.placeholder(name)
            copied[name].meta = dict(by_name[name].meta)
            # Inductor compiles a placeholder for the layout of its recorded value: an example laid
            # out otherwise (made contiguous: _example) is recorded as it is.
            recorded = copied[name].meta.get("val")
            if (isinstance(example, torch.Tensor) and isinstance(recorded, FakeTensor) and not symbolic_layout(recorded)
                    and recorded.stride() != example.stride()):
                copied[name].meta["val"] = recorded.fake_mode.from_tensor(example)
                copied[name].meta.pop("tensor_meta", None)
        for node in self.members:
            for value in node.all_input_nodes:
                if value.name in self.frozen and value.name not in copied:
                    holder.register_buffer(value.name, self._constants[value.name])
                    copied[value.name] = sub.get_attr(value.name)
            copied[node.name] = sub.node_copy(node, lambda value: copied[value.name])
            if node.name in self.in_place:  # written where the state lives (Inductor reinplaces it)
                copied[node.name].target = self.in_place[node.name]
        for placeholder, value in self.write_backs:
            sub.call_function(torch.ops.aten.copy_.default, (copied[placeholder], copied[value]))
        sub.output(tuple(copied[name] for name in self.outputs))
        return fx.GraphModule(holder, sub)


def _read_by_the_caller(graph: fx.Graph, regions: list[Region], state: "ProgramState | None") -> list[str]:
    """The values the program's output gives: the caller's, and the new values of its state but
    those a region writes where the state lives (its in-place writes, the values it copies in)."""
    output = next(node for node in graph.nodes if node.op == "output")
    written = {index for _, index in state.written} if state is not None else set()
    handled = {name for region in regions for name in region.in_place}
    handled |= {value for region in regions for _, value in region.write_backs}
    values = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    return [value.name for index, value in enumerate(values)
            if isinstance(value, fx.Node) and not (index in written and value.name in handled)]


def _kept_outside(graph: fx.Graph, regions: list[Region], state: "ProgramState | None") -> set[str]:
    """The nodes outside the regions that the program still runs: those the caller, a region or
    another kept node reads (a kernel-free node that only regions read is recomputed in them)."""
    in_regions = {name for region in regions for name in region.part}
    by_name = {node.name: node for node in graph.nodes}
    kept: set[str] = set()
    pending = _read_by_the_caller(graph, regions, state) + [name for r in regions for name in r.inputs]
    while pending:
        name = pending.pop()
        if name in in_regions or name in kept:
            continue
        kept.add(name)
        pending.extend(value.name for value in by_name[name].all_input_nodes)
    return kept


def set_outputs(graph: fx.Graph, regions: list[Region], state: "ProgramState | None" = None) -> None:
    """Each region's outputs: its own nodes' values that the caller, another region or a node kept
    outside the regions reads, but the state it writes in place (the library hands that on).
    Leaving a region out later adds no output to the others: its nodes read what it read."""
    by_name = {node.name: node for node in graph.nodes}
    read = {name for region in regions for name in region.inputs}
    for name in _kept_outside(graph, regions, state):
        read.update(value.name for value in by_name[name].all_input_nodes)
    read.update(_read_by_the_caller(graph, regions, state))
    for region in regions:
        region.outputs = [node.name for node in region.members
                          if node.name in region.part and node.name in read and node.name not in region.in_place]


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


def linear_weights(graph: fx.Graph) -> set[str]:
    """The placeholders read only as a linear layer's weight, which Inductor's in-process compile
    reads unfolded: folded, its freezing lays them out anew, and bert_base's matrix products then
    ran 0.86x Inductor's against 1.07x on the original layout (CPU, 32 rows); convolution weights,
    folded and prepacked, made googlenet 1.40x. None where every matrix product of the program takes
    one row (a decode step at batch 1, products_of_one_row): folded, freezing packs them for MKL,
    as inductor-best runs them; unfolded, ATen's mm copied each product's row first (the one-row
    view Inductor passes has stride 0 along its row), a dozen copies a llama decode step, and the
    step ran 0.92x to 0.95x inductor-best's against 0.96x to 0.97x folded (docs/benchmarks.md)."""
    if products_of_one_row(graph.nodes):
        return set()
    return {node.name for node in graph.nodes if node.op == "placeholder" and node.users and all(
        user.target is torch.ops.aten.linear.default and user.args[1] is node for user in node.users)}


# The matrix products freezing packs, by the position of their rows' argument.
_PRODUCTS = {torch.ops.aten.linear.default: 0, torch.ops.aten.addmm.default: 1, torch.ops.aten.mm.default: 0}


def products_of_one_row(nodes: Iterable[fx.Node]) -> bool:
    """Whether `nodes` have matrix products (linear, addmm, mm), each of one row of known size (a
    decode step at batch 1), and no convolution."""
    rows = []
    for node in nodes:
        target = getattr(node.target, "__name__", "")
        if target.startswith(("conv", "_convolution", "mkldnn_convolution")):
            return False
        if node.target in _PRODUCTS:
            value = node.args[_PRODUCTS[node.target]].meta.get("val")
            if not isinstance(value, torch.Tensor) or symbolic_layout(value):
                return False
            rows.append(value.numel() // max(value.shape[-1], 1) if value.dim() else 1)
    return bool(rows) and all(count == 1 for count in rows)


# oneDNN's convolutions on the weights freezing packs pay off from about this many floating-point
# operations for the program's largest convolution. Below it ATen's calls ran faster: oneDNN's call
# took 23 us at least on two cores, ATen's 1x1 convolution of the tiny UNet 7 us, and the UNet
# (largest 4.7 MFLOP) ran 1.26 ms packed against 0.98 unpacked; branchy (largest 13 MFLOP) ran
# 0.68 ms packed against 0.87, googlenet 9.1 against 11.2. A program's convolutions are packed or
# not together: mixing the two layouts cost branchy 8% (docs/benchmarks.md, "Inductor at its best
# on the CPU").
PACKED_CONVOLUTION_MIN_FLOPS = 8_000_000


def small_convolution_weights(graph: fx.Graph) -> set[str]:
    """The placeholders read only as convolution weights, when every convolution of the program is
    small (the largest of fewer floating-point operations than PACKED_CONVOLUTION_MIN_FLOPS, all of
    known sizes); else none. They stay region inputs: folded, Inductor's freezing packs them for
    oneDNN, whose call costs more than such a convolution."""
    flops = [_convolution_flops(node, node.args[1]) for node in graph.nodes if _is_convolution(node)]
    if not flops or any(count is None for count in flops) or max(flops) >= PACKED_CONVOLUTION_MIN_FLOPS:
        return set()
    return {node.name for node in graph.nodes if node.op == "placeholder" and node.users and all(
        _is_convolution(user) and user.args[1] is node for user in node.users)}


def _is_convolution(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target in (
        torch.ops.aten.convolution.default, torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default,
        torch.ops.aten.conv3d.default) and len(node.args) >= 2 and isinstance(node.args[1], fx.Node)


def _convolution_flops(node: fx.Node, weight: fx.Node) -> int | None:
    """The multiply-adds of the convolution `node` on `weight`, counted twice, when it is not
    transposed and its sizes are known; else None."""
    if node.target is torch.ops.aten.convolution.default and (len(node.args) < 7 or node.args[6]):
        return None  # transposed
    result, kernel = node.meta.get("val"), weight.meta.get("val")
    if not isinstance(result, torch.Tensor) or not isinstance(kernel, torch.Tensor) or kernel.dim() < 2:
        return None
    if symbolic_layout(result) or symbolic_layout(kernel):
        return None
    return 2 * result.numel() * (kernel.numel() // kernel.shape[0])


class ProgramState:
    """What a functional program writes in place: `written`, (the placeholder of the buffer or
    user input written, the index of its new value among the outputs). Such state is read at each
    call, never folded into a region; the library and the regions write it where it lives
    (include/opara/load.h)."""

    def __init__(self, exported: torch.export.ExportedProgram):
        from torch.export.graph_signature import InputKind, OutputKind

        signature = exported.graph_signature
        buffer_placeholder = {spec.target: spec.arg.name for spec in signature.input_specs
                              if spec.kind == InputKind.BUFFER}
        self.written: list[tuple[str, int]] = []
        for index, spec in enumerate(signature.output_specs):
            if spec.kind == OutputKind.BUFFER_MUTATION:
                self.written.append((buffer_placeholder[spec.target], index))
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                self.written.append((spec.target, index))
        output = next(node for node in exported.graph_module.graph.nodes if node.op == "output")
        self._values = output.args[0]

    def value_written(self, placeholder: str) -> str:
        """The name of the value the program gives `placeholder` in the end."""
        index = next(index for written, index in self.written if written == placeholder)
        return self._values[index].name
