"""kernels="inductor": opara plans the streams, Inductor compiles the kernels.

The library plans streams over a program's ATen graph and groups each stream's nodes into regions:
runs of one stream's nodes with cross-stream dependencies only at their edges, the small ones
merged into a neighbour (Plan::region_of, csrc/schedule/regions.h; torch.ops.opara.region_plan).
A region writes the state it writes where the state lives (a KV cache's new row: the in-place op
on its placeholder, which Inductor keeps in place), as Inductor's graph of a whole step does.
Each region becomes an FX subgraph that Inductor compiles (compile_fx: its fused kernels; its own
CUDA graphs stay off, since opara captures the whole). The library then makes each region one node of the same graph, a call of
the op opara::region(key, inputs) whose kernel runs the compiled region, and keeps the plan's
streams (with_compiled_regions, include/opara/compiled_regions.h): one plan. Views and size
queries are recomputed in each region that reads them (and stay nodes where something outside
the regions reads them); regions Inductor cannot compile stay ATen nodes.

On the CPU the whole program is one region by default (region_min_share given: the plan's). CPU
regions are compiled with Inductor's C++ wrapper, which releases the GIL while a region runs (the
Python wrapper holds it through each fused kernel, and two streams were no faster than one), and
called from C++ through its entry function (opara::native_region). On a GPU the regions run only
while opara warms up and captures; replays are one CUDA graph.
docs/benchmarks.md ("Regions compiled by Inductor") has the measurements behind these choices.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ._frontend import _compile_device, _first_line, program_archive
from ._inductor_compat import compile_region, dynamos_events_kept, entry_inputs_recorded, native_entry
from ._partition import (Parts, ProgramState, Region, constants_of, devices_placed, library_names, linear_weights,
                         node_values, placed, products_of_one_row, set_outputs, small_convolution_weights)
from ._symbolic_regions import InputLayout, ShapeBinding

# The compiled regions by key: what the op's kernel runs. A CompiledRegions removes its own.
_REGIONS: dict[int, Callable[..., list[torch.Tensor]]] = {}
_KEYS = itertools.count()

# Each region's compile, as it ends (INFO): a compile of many regions that runs long says how far it
# got and which region took the time (the GPU check's background compiles log it).
_LOG = logging.getLogger("opara")

_LIBRARY = torch.library.Library("opara", "FRAGMENT")
_LIBRARY.define("region(int key, Tensor[] inputs) -> Tensor[]")


def _run_region(key: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    # Inputs laid out otherwise than the region's examples are copied into their layout first
    # (csrc/ext/region_inputs.h), as opara::native_region does.
    return list(_REGIONS[key](*torch.ops.opara.region_inputs(key, inputs)))


_LIBRARY.impl("region", _run_region, "CompositeExplicitAutograd")


class CompiledRegions:
    """The regions of one compiled program, registered while this object lives (the compiled model
    holds it), and what the library makes them nodes of its graph from (with_compiled_regions,
    include/opara/compiled_regions.h): `description`, the plan that cut them and each one's op,
    key, inputs and outputs (JSON; "" where none compiled: the program runs as it is), and
    `constants`, the weights they read without folding them in."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        # Ahead of time (opara.package): each region's AOTInductor package, its key its index here.
        self.ahead_of_time: list[bytes] = []
        self.native: set[int] = set()  # keys also registered with opara::native_region
        self.skipped: list[str] = []  # why regions Inductor could not take stayed ATen nodes
        self.compile_seconds = 0.0  # Inductor's (or AOTInductor's) time over every region
        self.folded_inputs: list[int] = []  # the user inputs folded into the regions (read once)
        self.description = ""
        self.constants: list[torch.Tensor] = []
        # A dynamic-shape program's regions compiled for every shape: how a shape's inputs bind the
        # symbols, and by key each region and the layouts of its inputs; else why not (`not_symbolic`).
        self.binding: ShapeBinding | None = None
        self.symbolic: dict[int, tuple[_CompiledRegion, list[InputLayout]]] = {}
        self.not_symbolic = "compiled for one shape"
        self.template: CompiledRegions | None = None  # for_shape's: the regions it registers again

    def add(self, compiled: "_CompiledRegion", examples: list[torch.Tensor] | None = None) -> int:
        """Registers `compiled` under a key of its own, its inputs checked against `examples` (by
        default the ones it was compiled for)."""
        key = next(_KEYS)
        _REGIONS[key] = compiled.run
        torch.ops.opara.register_region_inputs(key, compiled.examples if examples is None else examples)
        self.keys.append(key)
        if compiled.native is not None:
            library, constants = compiled.native
            torch.ops.opara.register_native_region(key, library, compiled.inputs, constants, len(compiled.outputs),
                                                   compiled.cloned)
            self.native.add(key)
        return key

    def __len__(self) -> int:
        return len(self.keys) + len(self.ahead_of_time)

    def for_shape(self, inputs: list[torch.Tensor]) -> CompiledRegions | str:
        """The regions of a dynamic-shape program for inputs of another shape: each registered again
        under a new key, its inputs checked against the layouts this shape gives them; or why the
        regions cannot run this shape (compiled for one shape, a condition Inductor assumed)."""
        if self.binding is None:
            return self.not_symbolic
        values = self.binding.values(inputs)
        if isinstance(values, str):
            return values
        shaped = CompiledRegions()
        shaped.template = self
        shaped.folded_inputs, shaped.constants, shaped.skipped = self.folded_inputs, self.constants, self.skipped
        keys = {key: shaped.add(region, [layout.for_shape(values) for layout in layouts])
                for key, (region, layouts) in self.symbolic.items()}
        description = json.loads(self.description)
        for call in description["regions"]:
            call["key"] = keys[call["key"]]
        shaped.description = json.dumps(description)
        return shaped

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


class _CompiledRegion:
    """A region as Inductor compiled it: `run` (Python: compiled_fx's function, aliasing outputs
    cloned), its outputs on the examples, and, for a CPU region built with the C++ wrapper whose
    entry was found, `native` (its library and the frozen constants its entry reads after the
    inputs) for opara::native_region, which calls it without Python."""

    def __init__(self, compiled: Callable[..., Any], examples: list[torch.Tensor], modules: list[Any],
                 written: Sequence[int] = ()):
        # The example run: which outputs share memory with an input or an earlier output (opara
        # takes an op's results as new tensors; Inductor's buffer reuse is fixed at compile time),
        # and, seen on the way, what the C++ wrapper's entry receives. The state the region writes
        # (`written`, by input) is the program's own: each example run writes a copy.
        self.inputs = len(examples)
        self.examples = examples  # their layouts are what a call's inputs are copied into where they differ
        self._written = list(written)
        examples = self._to_run(examples)
        with entry_inputs_recorded() as entry_inputs:
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
        self.native = native_entry(modules, entry_inputs, examples)
        if self.native is not None and not self._native_agrees(self._to_run(self.examples)):
            self.native = None

    def _to_run(self, examples: list[torch.Tensor]) -> list[torch.Tensor]:
        """`examples` with a copy, in the same layout, of each one the region writes."""
        examples = list(examples)
        for index in self._written:
            examples[index] = torch.empty_like(examples[index]).copy_(examples[index])
        return examples

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


def _example(value: Any) -> Any:
    """What a region is compiled from for `value`: itself, or a contiguous copy of a tensor whose
    memory overlaps (an expanded tensor), whose layout no copy of a call's input could take
    (csrc/ext/region_inputs.h)."""
    return torch.ops.opara.region_example(value) if isinstance(value, torch.Tensor) else value


def _compile_region(region: Region, values: dict[str, Any], device: torch.device,
                    symbolic: list[torch.Tensor] | None = None,
                    layouts: list[torch.Tensor] | None = None, threads: int = 0) -> _CompiledRegion:
    """`region` compiled by Inductor for its inputs' `values`, or, `symbolic`, for the program's fake
    inputs of symbolic sizes (its kernels then take any size), run on the values copied into the
    `layouts` the fakes give this shape where theirs differ; its kernels for `threads` intra-op
    threads (0: whatever the running worker has, compile_region)."""
    # A call's input in another layout is copied into the example's before the region runs
    # (csrc/ext/region_inputs.h): examples in a layout a copy can take.
    examples = [_example(values[name]) for name in region.inputs]
    if layouts is not None:
        examples = [example if example.stride() == layout.stride() else
                    torch.empty_strided(layout.shape, layout.stride(), dtype=example.dtype,
                                        device=example.device).copy_(example)
                    for example, layout in zip(examples, layouts)]
    # `native` (CPU): Inductor's C++ wrapper, which releases the GIL while the region runs and whose
    # entry opara::native_region calls from C++, so no Python runs with the model; freezing folds the
    # constants the region holds (prepacked convolution weights). The measurements behind both:
    # docs/benchmarks.md, "Regions compiled by Inductor".
    native = device.type == "cpu"
    compiled, modules = compile_region(region.module(examples), symbolic or examples, native, threads)
    written = [index for index, name in enumerate(region.inputs) if name in region.written]
    with torch.no_grad():
        return _CompiledRegion(compiled, examples, modules if native else [], written)


def _symbolic_inputs(regions: list[Region], values: dict[str, Any],
                     graph: torch.fx.Graph) -> dict[int, list[torch.Tensor]] | str:
    """By region index, the program's fake values of its inputs, whose sizes are the export's
    symbols; or why the regions cannot be compiled for every shape."""
    by_name = {node.name: node for node in graph.nodes}
    fakes: dict[int, list[torch.Tensor]] = {}
    for region in regions:
        fakes[region.index] = []
        for name in region.inputs:
            fake = by_name[name].meta.get("val")
            if not isinstance(values[name], torch.Tensor) or not isinstance(fake, torch.Tensor):
                return f"a region reads the number {name}"
            if _example(values[name]) is not values[name]:
                return f"a region reads {name}, whose memory overlaps itself (an expanded tensor)"
            fakes[region.index].append(fake)
    return fakes


def _ahead_of_time(region: Region, values: dict[str, Any], small_convolutions: bool) -> bytes:
    """`region` compiled by AOTInductor for its examples, made contiguous (the layout the
    library's runner hands it, csrc/package/aoti_region_op.h): the package's bytes.
    `small_convolutions`: the program's convolutions are all too small for oneDNN's packed weights
    (small_convolution_weights)."""
    examples = [_example(values[name]) for name in region.inputs]
    if not all(isinstance(example, torch.Tensor) for example in examples):
        raise ValueError("AOTInductor's regions take tensors only, and this one reads a number")
    examples = [example.contiguous() for example in examples]
    with torch.no_grad():
        program = torch.export.export(region.module(examples), tuple(examples), strict=False)
        with tempfile.TemporaryDirectory() as folder, dynamos_events_kept():
            # Freezing, as the in-process regions: prepacked convolution weights (googlenet's package
            # ran 1.42x slower without, docs/benchmarks.md "Packages"); not where it would only pack
            # one-row matrix products (one_row_products) or small convolutions (small_convolutions).
            unpacked = one_row_products(region) or small_convolutions
            made = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(folder, "region.pt2"),
                                                            inductor_configs={"freezing": not unpacked})
            return Path(made).read_bytes()


def one_row_products(region: Region) -> bool:
    """Whether `region`'s weights are best left unpacked by AOTInductor: it has matrix products
    (linear, addmm, mm), each of one row (a decode step at batch 1), and no convolution. Freezing
    packs a linear's weight, and under AOT compilation for oneDNN, whose call costs more than a
    one-row product: the gptfast decoder's step ran 1.32x the in-process region's time packed and
    0.82x unpacked; a three-layer MLP packed lost at one row and won from four (docs/benchmarks.md,
    "What is left against inductor-best, attributed")."""
    return products_of_one_row(region.members)


def _frozen(exported: torch.export.ExportedProgram, inputs: list[torch.Tensor], constants: dict[str, torch.Tensor],
            state: ProgramState, folded_inputs: Sequence[int], ahead_of_time: bool,
            small_convolutions: set[str]) -> tuple[dict[str, torch.Tensor], set[str]]:
    """What the regions may read: the constants and the user inputs at `folded_inputs`, by
    placeholder, and of those the ones folded in (read once): not state the program writes (read at
    each call), nor, for Inductor's in-process compile, a linear layer's weight (linear_weights: its
    freezing lays them out anew; but a program of one-row products folds them, packed for MKL) or
    the weights of `small_convolutions` (on the CPU, a program's small convolutions,
    small_convolution_weights: freezing would pack them for oneDNN, slower there than ATen's
    calls). AOTInductor's regions hold every weight they read (a package carries them; where
    packing would not pay they are compiled without freezing, _ahead_of_time)."""
    user_inputs = list(exported.graph_signature.user_inputs)
    folded = {user_inputs[index]: inputs[index] for index in folded_inputs}
    written = {placeholder for placeholder, _ in state.written}
    frozen = (set(constants) | set(folded)) - written
    if not ahead_of_time:  # AOTInductor's regions hold what they read (one_row_products, small_convolutions)
        frozen -= linear_weights(exported.graph_module.graph) | small_convolutions
    return {**constants, **folded}, frozen


def _call(region: Region, key: int, native: bool, constants: dict[str, torch.Tensor], names: dict[str, str],
          bound: list[torch.Tensor], device: torch.device) -> dict[str, Any]:
    """How the library's graph calls `region` (with_compiled_regions): its op and key, its inputs (a
    value of the graph by name, or a weight it reads without folding it in, appended to `bound`) and
    its outputs."""
    inputs: list[dict[str, Any]] = []
    for name in region.inputs:
        if name in constants and name not in names:
            inputs.append({"constant": len(bound)})
            bound.append(placed(constants[name], device))
        else:
            inputs.append({"value": names.get(name, name)})
    return {"region": region.index, "op": "opara::native_region" if native else "opara::region", "key": key,
            "inputs": inputs, "outputs": region.outputs}


def compile_regions(exported: torch.export.ExportedProgram, inputs: list[torch.Tensor], options: dict[str, str],
                    name: str, folded_inputs: Sequence[int] = (),
                    ahead_of_time: bool = False) -> tuple[torch.Tensor, CompiledRegions]:
    """The archive of `exported` decomposed, and its regions compiled by Inductor (which must live as
    long as the model runs): the library cuts them (torch.ops.opara.region_plan) and, given
    `CompiledRegions.description`, makes each one node of its graph, planned once. `options` are the
    compile's. The program's constants, and the user inputs at `folded_inputs` (the weights Dynamo
    passes in), are folded into the regions (read once, prepacked by Inductor's freezing), except
    state the program writes; `CompiledRegions.folded_inputs` says which inputs were. A region
    Inductor refuses stays ATen nodes. `ahead_of_time` (opara.package): each region compiled by
    AOTInductor into `CompiledRegions.ahead_of_time`, called through op opara::aoti_region, which
    the library's package loader runs (csrc/package). A dynamic-shape program's regions are
    compiled for every shape it takes (CompiledRegions.for_shape), or, where they cannot be, left
    ATen nodes, saying why."""
    device = _compile_device(options, inputs, name)
    inputs = [placed(tensor, device) for tensor in inputs]
    # Functional, so that a region never writes what it reads; decomposed (traced again) with the
    # devices placed, into a new program, so that the caller's is left as it was (the lowering
    # compiles it with ATen's kernels where Inductor fails).
    with devices_placed(exported.graph_module.graph, device):
        exported = exported.run_decompositions({})
    archive = program_archive(exported)
    plan = json.loads(torch.ops.opara.region_plan(archive, name, inputs, options))
    threads = plan.get("region_threads", 0)  # where the plan fixes each region's intra-op threads
    state = ProgramState(exported)
    constants = constants_of(exported)
    small_convolutions = small_convolution_weights(exported.graph_module.graph) if device.type == "cpu" else set()
    readable, frozen = _frozen(exported, inputs, constants, state, folded_inputs, ahead_of_time, small_convolutions)
    compiled = CompiledRegions()
    user_inputs = list(exported.graph_signature.user_inputs)
    compiled.folded_inputs = [index for index in folded_inputs if user_inputs[index] in frozen]
    graph = exported.graph_module.graph
    parts = Parts.of_plan(exported, plan, state)
    candidates = [Region(graph, index, part, parts.kernel_free, readable, frozen, parts.in_place,
                         parts.write_backs.get(index, ())) for index, part in parts.parts]
    set_outputs(graph, candidates, state)
    values = node_values(exported, inputs, constants)
    names = library_names(exported, state)
    binding, fakes = ShapeBinding(exported), {}
    if not binding.bound_symbols():  # no dynamic-shape program
        binding = None
    else:
        fakes = _symbolic_inputs(candidates, values, graph) if not ahead_of_time else "AOTInductor compiles one shape"
        if isinstance(fakes, str):
            compiled.skipped.append(f"its regions: the program has symbolic sizes and {fakes}")
            compiled.not_symbolic, candidates, binding = fakes, [], None
        else:
            binding.drop_expression_hints()
            shape = binding.values(inputs)  # this shape's symbols: no guard is recorded yet
            layouts = {index: [InputLayout(fake) for fake in region_fakes] for index, region_fakes in fakes.items()}
    calls = []
    _LOG.info("%s: compiling %d region(s) with %s", name, len(candidates),
              "AOTInductor" if ahead_of_time else "Inductor")
    for number, region in enumerate(candidates, 1):
        started, outcome = time.perf_counter(), "compiled"
        try:
            if ahead_of_time:
                compiled.ahead_of_time.append(_ahead_of_time(region, values, bool(small_convolutions)))
            else:
                symbolic_inputs, shaped = None, None
                if binding is not None:
                    symbolic_inputs = fakes[region.index]
                    shaped = [layout.for_shape(shape) for layout in layouts[region.index]]
                compiled_region = _compile_region(region, values, device, symbolic_inputs, shaped, threads)
        except Exception as error:  # Inductor refuses some graphs; their nodes stay ATen
            compiled.skipped.append(f"the region of {sorted(region.part)[0]}: {_first_line(error)}")
            outcome = "refused"
            continue
        finally:
            seconds = time.perf_counter() - started
            compiled.compile_seconds += seconds
            _LOG.info("%s: region %d of %d (%d nodes) %s in %.1f s, %.1f s in all", name, number, len(candidates),
                      len(region.part), outcome, seconds, compiled.compile_seconds)
        if ahead_of_time:
            key = len(compiled.ahead_of_time) - 1
            calls.append({**_call(region, key, False, constants, names, compiled.constants, device),
                          "op": "opara::aoti_region"})
            continue
        key = compiled.add(compiled_region)
        calls.append(_call(region, key, key in compiled.native, constants, names, compiled.constants, device))
        if binding is not None:
            compiled.symbolic[key] = (compiled_region, layouts[region.index])
    if compiled.skipped:
        warnings.warn(f"opara: {len(compiled.skipped)} regions of {name} stay ATen nodes (Inductor could not "
                      f"compile them): {compiled.skipped[0]}", stacklevel=3)
    if calls:
        compiled.description = json.dumps({"plan": plan, "regions": calls})
    if binding is not None:
        _bind_symbolic(compiled, binding)
    return archive, compiled


def _bind_symbolic(compiled: CompiledRegions, binding: ShapeBinding) -> None:
    """Makes `compiled`'s symbolic regions usable for other shapes (CompiledRegions.for_shape)
    where every size they read is one a shape's inputs give, else says why not."""
    why_not = binding.record_guards()
    unbound = set().union(*(layout.symbols() for _, layouts in compiled.symbolic.values() for layout in layouts))
    unbound -= binding.bound_symbols()
    if unbound:
        why_not = f"a region reads sizes no input gives ({sorted(map(str, unbound))}: computed from data)"
    if why_not:
        compiled.not_symbolic, compiled.symbolic = why_not, {}
    else:
        compiled.binding = binding
