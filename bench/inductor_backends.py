"""torch.compile's Inductor as the benches run it beside opara: its default mode ("inductor"), its
CUDA graphs ("inductor-ro", mode="reduce-overhead") and its best configuration for inference
("inductor-best", the peer users compare against: on the CPU freezing, the weights folded in as
constants and oneDNN's packed convolutions and products, with its C++ wrapper, no Python between
kernels, set as PyTorch's CPU inference guides set it, torch._inductor.config itself (FrozenCalls);
on a GPU its CUDA graphs,
reduce-overhead's triton.cudagraphs, without freezing: on the first H200 run freezing with CUDA
graphs made them skip the LLM decode step (its KV cache, a mutated buffer, no longer a static
input: 328 tokens/s against reduce-overhead's 672) and ran the UNet at 2.162 ms against 0.768).

Inductor's CUDA graphs are run as torch's documentation says (cudagraph trees):
torch.compiler.cudagraph_mark_step_begin() before each call, for their pool frees the previous
call's outputs at a new step."""

import warnings

import torch

INDUCTOR_BACKENDS = ("inductor", "inductor-best", "inductor-ro")
BEST_OPTIONS = {"cpu": {"freezing": True, "cpp_wrapper": True},
                "cuda": {"triton.cudagraphs": True}}


def compile_with_inductor(target, backend, device):
    """`target` (a module or a function) compiled as `backend`, one of INDUCTOR_BACKENDS, for
    `device`; a callable taking what `target` takes."""
    if backend == "inductor":
        return torch.compile(target)
    if backend == "inductor-ro":
        compiled = torch.compile(target, mode="reduce-overhead")
    elif device.type == "cuda":
        compiled = torch.compile(target, options=BEST_OPTIONS["cuda"])
    else:
        # The options too: a backend of its own, whose graphs Dynamo caches apart from the default's.
        return FrozenCalls(torch.compile(target, options=BEST_OPTIONS["cpu"]))

    def each_call_a_new_step(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args, **kwargs)

    return each_call_a_new_step


class FrozenCalls:
    """inductor-best on the CPU: `compiled` called under torch._inductor.config's freezing and C++
    wrapper while its calls compile. Dynamo reads the freezing flag itself when it traces
    (torch._dynamo.utils.is_parameter_freezing: the parameters become static inputs, which freezing
    folds in as constants and oneDNN packs); given as torch.compile's options it reaches Inductor
    alone, the parameters stay graph inputs and nothing is packed: googlenet's convolutions then ran
    aten::_slow_conv2d_forward, 13.2 ms a call against 9.1 with packed weights (docs/benchmarks.md,
    "Inductor at its best on the CPU"). Patched until three calls in a row compiled nothing; a
    compile after that, unpatched, is warned of."""

    SETTLED = 3

    def __init__(self, compiled):
        from torch._dynamo.utils import counters
        from torch._inductor import config

        self.compiled, self.graphs = compiled, counters["stats"]
        self.patch = config.patch(BEST_OPTIONS["cpu"])
        self.quiet_calls = 0

    def __call__(self, *args, **kwargs):
        before = self.graphs["unique_graphs"]
        if self.quiet_calls < self.SETTLED:
            with self.patch:
                result = self.compiled(*args, **kwargs)
            self.quiet_calls = self.quiet_calls + 1 if self.graphs["unique_graphs"] == before else 0
            return result
        result = self.compiled(*args, **kwargs)
        if self.graphs["unique_graphs"] != before:
            warnings.warn("inductor-best compiled a graph after its warm-up calls, without freezing")
        return result
