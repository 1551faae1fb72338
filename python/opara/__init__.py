"""opara: run a PyTorch model's independent operators at the same time, on CUDA streams captured
into one CUDA graph (or on host threads on the CPU).

    import opara
    compiled = opara.compile(model, [x])        # torch.export, else TorchScript tracing
    y = compiled(x)

A graph set: one compiled graph per batch size, for calls of any number of rows (a service's batches):

    graph_set = opara.compile_graph_set(model, [x], batch_sizes=[1, 2, 4, 8])

Compiled once ahead of time, then loaded (here, in another process, or from C++ without Python):

    opara.package(model, [x], "model.opara")
    compiled = opara.load("model.opara")

Through Dynamo (graph breaks, guards, one compiled graph per shape):

    compiled = torch.compile(model, backend="opara", options={"streams": "opara"})
    print(opara.describe_compile(opara.dynamo_compiles[-1]))   # what the last compile runs, and where
"""

from ._compile import CompiledModel, GraphSet, compile, compile_graph_set, plan
from ._dynamo import OparaBackendError, opara_backend
from ._dynamo import compiles as dynamo_compiles
from ._dynamo import counters as dynamo_counters
from ._dynamo import describe as describe_compile
from ._dynamo import register as _register_backend
from ._library import __version__, library_path, load_library, version
from ._package import load, package

__all__ = ["CompiledModel", "GraphSet", "compile", "compile_graph_set", "plan", "library_path", "load_library",
           "version", "__version__", "opara_backend", "OparaBackendError", "dynamo_counters", "dynamo_compiles",
           "describe_compile", "package", "load"]

_register_backend()
