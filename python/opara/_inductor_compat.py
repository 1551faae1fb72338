"""The one module that touches Inductor's and Dynamo's private API (checked on torch 2.11 and
2.15): compiling an FX region with compile_fx under a config patch, the wrapper modules and entry
inputs of Inductor's C++ wrapper (patched for the time of one compile, under Dynamo's compile
lock), the lock itself, and Dynamo's mark on the inputs it lifts. Everything else in the package
calls these functions, so a torch release that moves one of them is fixed here alone. It imports
nothing of the package (scripts/check_layers.py)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch


def compile_lock() -> Any:
    """Dynamo's compile lock (reentrant), which the backend holds under torch.compile: the one lock
    every lowering runs under, since torch.export and Inductor keep process-wide state (the
    dispatch mode stack, the patches below)."""
    from torch._dynamo.convert_frame import compile_lock as lock

    return lock


def is_dynamo_static(value: Any) -> bool:
    """Whether Dynamo lifted `value` from the module into the graph's inputs (a parameter or
    buffer), which it marks."""
    return isinstance(value, torch.nn.Parameter) or getattr(value, "_dynamo_static_input_type", None) is not None


@contextlib.contextmanager
def dynamos_events_kept() -> Iterator[None]:
    """Dynamo's open compile events as they were before what runs inside: AOTInductor's compile
    clears the event log when it ends (compile_fx_aot's reset_event_log_on_exit), and inside the
    backend, Dynamo then closes events no longer on its stack ("ChromiumEventLogger: Start event
    not in stack, ignoring", logged at each graph a cache miss compiles)."""
    from torch._dynamo.utils import get_chromium_event_logger

    log = get_chromium_event_logger()
    kept = [(part, list(part)) for part in (log.get_stack(), log.get_pt2_compile_substack())]
    data = dict(log.get_event_data())
    try:
        yield
    finally:
        for part, before in kept:
            part[:] = before
        log.get_event_data().update(data)


@contextlib.contextmanager
def _patched(owner: Any, name: str, make: Callable[[Callable[..., Any], int], Callable[..., Any]]) -> Iterator[None]:
    """`owner.name` replaced by make(original, this thread) while this is open. The patch is
    process-wide: under Dynamo's compile lock, so that two threads compiling regions never patch
    over each other and leave a stale one."""
    with compile_lock():
        original = getattr(owner, name)
        setattr(owner, name, make(original, threading.get_ident()))
        try:
            yield
        finally:
            setattr(owner, name, original)


@contextlib.contextmanager
def entry_inputs_recorded() -> Iterator[list[list[torch.Tensor]]]:
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


@contextlib.contextmanager
def _modules_loaded(into: list[Any]) -> Iterator[list[Any]]:
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


def compile_region(module: torch.fx.GraphModule, examples: list[Any], native: bool,
                   threads: int = 0) -> tuple[Any, list[Any]]:
    """`module` compiled by Inductor (compile_fx) for `examples`, its constants frozen in, and the
    wrapper modules the compile loaded. `native`: with Inductor's C++ wrapper, whose entry opara
    calls from C++ (CPU regions); else the Python wrapper. `threads`: the intra-op threads every
    call of the region runs with, where the plan fixes them (a CPU region plan of one stream), for
    which Inductor sizes each kernel's parallel loops as it does for itself, a kernel too small to
    share left serial; 0: cpp.dynamic_threads, the C++ kernels take the running thread's OpenMP team
    size, so that a region follows the intra-op threads opara gives each worker, but every kernel
    opens a parallel region (a llama decode step's 15 against Inductor's 2: 160 against 111 us a
    step; docs/benchmarks.md, "Regions compiled by Inductor")."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    threading = {"cpp.dynamic_threads": False, "cpp.threads": threads} if threads > 0 else {"cpp.dynamic_threads": True}
    modules: list[Any] = []
    with torch.no_grad(), config.patch({"cpp_wrapper": native, "freezing": True, **threading}), \
            _modules_loaded(modules):
        compiled = compile_fx(module, examples)
    return compiled, modules


def native_entry(modules: list[Any], entry_inputs: list[list[torch.Tensor]],
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
    constants = handed[len(examples):]
    # A dynamic-shape region's entry may take sizes after its tensors: then the Python wrapper calls it.
    same = same and all(isinstance(constant, torch.Tensor) for constant in constants)
    return (library, constants) if same else None
