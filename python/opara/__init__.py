"""opara: run a PyTorch model's independent operators at the same time, on CUDA streams captured
into one CUDA graph (or on host threads on the CPU).

    import opara
    compiled = opara.compile(model, [x])        # torch.export, else TorchScript tracing
    y = compiled(x)
"""

from ._compile import CompiledModel, compile, plan
from ._library import library_path, load_library

__all__ = ["CompiledModel", "compile", "plan", "library_path", "load_library"]
__version__ = "0.1.0"
