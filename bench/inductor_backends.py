"""torch.compile's Inductor as the benches run it beside opara: its default mode ("inductor"), its
CUDA graphs ("inductor-ro", mode="reduce-overhead") and its best configuration for inference
("inductor-best", the peer users compare against: on the CPU freezing, the weights folded in as
constants, with its C++ wrapper, no Python between kernels; on a GPU its CUDA graphs,
reduce-overhead's triton.cudagraphs, without freezing: on the first H200 run freezing with CUDA
graphs made them skip the LLM decode step (its KV cache, a mutated buffer, no longer a static
input: 328 tokens/s against reduce-overhead's 672) and ran the UNet at 2.162 ms against 0.768).

Inductor's CUDA graphs are run as torch's documentation says (cudagraph trees):
torch.compiler.cudagraph_mark_step_begin() before each call, for their pool frees the previous
call's outputs at a new step."""

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
        return torch.compile(target, options=BEST_OPTIONS["cpu"])

    def each_call_a_new_step(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args, **kwargs)

    return each_call_a_new_step
