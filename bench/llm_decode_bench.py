#!/usr/bin/env python3
"""Greedy decoding with a static KV cache (issue 30): tokens per second of `model.generate` for a
Llama-style model (grouped-query attention) and a Qwen2-MoE-style model (8 experts, top-2, one
shared expert), eager against torch.compile's Inductor and torch.compile(backend="opara"); and of
a gpt-fast-style decoder that owns its KV caches (issue 41, scripts/opara_models/decoder.py),
compiled whole by opara.compile.
A benchmark, not a test: ratios are meaningful within one run on one machine.

    ~/.cache/opara/venv/bin/python bench/llm_decode_bench.py --device cpu
    python3 bench/llm_decode_bench.py --device cuda --json out.json     (scripts/gpu_check.sh)

The models are built from configs with random weights (torch.manual_seed; nothing is downloaded).
Each backend is applied the way a user does it:

    model.forward = torch.compile(model.forward, backend=...)
    cache = transformers.StaticCache(config=model.config, max_cache_len=P + N)   # --cache reused (default)
    cache.early_initialization(batch, kv_heads, head_dim, model.dtype, model.device)  # before compiling
    cache.reset(); model.generate(input_ids, attention_mask=..., max_new_tokens=N, do_sample=False,
                                  past_key_values=cache)               # each request

under torch.no_grad(), with transformers' own compile of the decode step off (disable_compile=True;
on CUDA it would otherwise compile "eager" too). The reused cache is made on the model's device
before the first request (StaticCache.early_initialization, transformers' way to have it ready
before a compiled call): else its first update, inside the compiled prefill, makes its tensors
there, where they are not marked static (torch._dynamo.mark_static_address is skipped while
Dynamo traces), its length counter a CPU tensor moved to the GPU in the graph, and Inductor's CUDA
graphs skip the decode step ("mutated inputs": the cache written in place) and hold the cache in
their pool. inductor-ro runs as torch's docs say for those graphs:
torch.compiler.cudagraph_mark_step_begin() before each call of the compiled forward (generate copies
the logits it keeps; the cache is the static one). Every (model, size, batch, backend) row starts
from torch._dynamo.reset() and opara's counters cleared, so its compiles are its own (opara: one
prefill graph and one decode graph). Per row: the first generate (Dynamo, the backend's compiles
and the run), then --repeats timed generates of N new tokens and of 1 (the prefill alone), in
turn, each round followed by one eager generate of N (the model's own forward): tokens/s = batch * N
/ median(N), decode tokens/s = batch * (N - 1) / (median(N) - median(1)), x eager = the median over
rounds of eager's time / the backend's (a machine that changes speed slows both alike).
The tokens are compared with eager's (exact equality; on a GPU, kernels that differ may change an
argmax, so a mismatch there is not necessarily a bug).

gptfast (the decoder that owns its caches) is driven as gpt-fast drives it, by its own loop
(decoder.greedy_decode: the prompt fed a token a step, each new token the argmax of the last
logits; a step's position is a tensor on the model's device), the step compiled as each backend is
applied to a module: torch.compile(model, ...) for Inductor, opara.compile(model, [token,
position], ...) for opara (its caches are the compiled model's state()). The caches are not reset
between requests: the causal mask hides whatever a position past the step holds.

Backends: eager, inductor (torch.compile's default), inductor-best (its best configuration for
inference: freezing with its C++ wrapper on the CPU, its CUDA graphs without freezing on a GPU:
bench/inductor_backends.py), inductor-ro (mode="reduce-overhead": CUDA graphs, in the default list
on CUDA), opara (ATen's kernels),
opara-1stream (the same graphs on one stream, streams="single": what opara's streams gain; in the
default list on CUDA), opara-inductor (kernels="inductor": Inductor's kernels in opara's regions,
each KV cache row written in place between them). For opara the decode step's plan is reported: its streams and, for the
MoE model, the streams of each layer's shared expert and routed experts. Every opara row carries
opara's counters and says when it fell back (a graph run eagerly, or kernels="inductor" with no
region: bench/opara_rows.py), in its line, the table and the JSON (`fell_back`); on a GPU each row
has its peak memory (the model's weights and the most the row held above them: its caches, graphs
and activations).

--warm-only runs each row's first two requests (the compiles) and no timed ones: with
--inductor-cache and a TORCHINDUCTOR_CACHE_DIR, a process run before the timed one fills the
caches, so that the timed one loads what the other compiled (scripts/gpu_check/steps.py).
"""

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_progress import log_compile_progress  # noqa: E402  beside this file
from inductor_backends import INDUCTOR_BACKENDS, compile_with_inductor  # noqa: E402  beside this file
from opara_rows import fallback_note, marked  # noqa: E402  beside this file

BACKENDS = ("eager", "inductor", "inductor-best", "inductor-ro", "opara", "opara-1stream", "opara-inductor")
SEED = 0
# name -> size -> config keywords. Small: about 1M parameters; large: about 20M.
CONFIGS = {
    "llama": {
        "small": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=2048),
        "large": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=2, vocab_size=8192),
    },
    "qwen2_moe": {
        "small": dict(hidden_size=128, moe_intermediate_size=64, shared_expert_intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=2048),
        "large": dict(hidden_size=384, moe_intermediate_size=256, shared_expert_intermediate_size=1024,
                      num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2, vocab_size=8192),
        # Qwen1.5-MoE-A2.7B's widths (60 routed experts of 1408, 4 per token, a shared expert of
        # 5632, hidden 2048, 16 heads) in 2 layers and a small vocabulary: a GPU's (1.1B parameters).
        "wide": dict(hidden_size=2048, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                     num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=16, vocab_size=8192,
                     num_experts=60, num_experts_per_tok=4),
    },
}
# The decoder that owns its caches (DecoderConfig): about the llama rows' sizes.
CONFIGS["gptfast"] = {
    "small": dict(dim=128, intermediate=512, layers=2, heads=4, kv_heads=2, vocab_size=2048),
    "large": dict(dim=512, intermediate=1408, layers=4, heads=8, kv_heads=2, vocab_size=8192),
}
MOE = dict(num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=False)


def build_decoder(size, device, batch, max_seq):
    sys.path.insert(0, str(ROOT / "scripts"))
    from opara_models.decoder import Decoder, DecoderConfig

    torch.manual_seed(SEED)
    return Decoder(DecoderConfig(**CONFIGS["gptfast"][size], max_batch=batch, max_seq=max_seq)).eval().to(device)


def build_model(name, size, device):
    import transformers

    torch.manual_seed(SEED)
    common = dict(max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=None,
                  tie_word_embeddings=False)
    if name == "llama":
        config = transformers.LlamaConfig(**CONFIGS[name][size], **common)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.Qwen2MoeConfig(**{**MOE, **CONFIGS[name][size]}, **common)
        model = transformers.Qwen2MoeForCausalLM(config)
    # Greedy, no end token (random weights would stop rows at different steps), pad 0.
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    return model.eval().to(device)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(model, inputs, new_tokens, device):
    """One request. With a cache of the row's own (--cache reused) it is reset in place first, as
    a server does between requests; else generate() makes a new static cache."""
    synchronize(device)
    started = time.perf_counter()
    cache = inputs.get("past_key_values")
    if cache is not None:
        cache.reset()
    tokens = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False, disable_compile=True,
                            **({} if cache is not None else {"cache_implementation": "static"}))
    synchronize(device)
    return tokens, time.perf_counter() - started


def compile_forward(model, backend, device, opara_graphs):
    """The user's way: the model's forward replaced by its compiled self (undone by `del model.forward`).
    opara's graphs are kept in `opara_graphs` (their plans are reported)."""
    if backend == "eager":
        return
    if backend in INDUCTOR_BACKENDS:  # under CUDA graphs each decode step is a new step
        model.forward = compile_with_inductor(model.forward, backend, device)
    else:
        import opara

        # opara-1stream: the same graphs on one stream, what the streams are measured against;
        # opara-inductor: Inductor's kernels in opara's regions, the KV cache rows written in place.
        options = {"device": device.type, **({"streams": "single"} if backend == "opara-1stream" else {}),
                   "kernels": "inductor" if backend == "opara-inductor" else "aten"}

        def recording_backend(graph, example_inputs):
            compiled = opara.opara_backend(graph, example_inputs, options=options)
            opara_graphs.append(compiled)
            return compiled

        model.forward = torch.compile(model.forward, backend=recording_backend)


def shared_and_routed_experts(plan, layers, moe_block):
    """Per layer of a Qwen2-MoE decode step's plan, the streams of the shared expert's projections
    (the lines of `moe_block`'s shared expert, Qwen2MoeMLP.forward) and of the routed experts'
    matrix products (transformers/integrations/moe.py), found by the plan's node kinds and
    sources; nodes are in program order, one layer after the other. None when they cannot be
    told apart (the plan names no sources, or another count of nodes)."""
    import inspect

    mlp = type(moe_block.shared_expert)
    lines, first = inspect.getsourcelines(mlp.forward)
    mlp_file = inspect.getsourcefile(mlp)

    def is_shared(kind, source):
        path, _, line = source.rpartition(":")
        return kind == "aten::linear" and path == mlp_file and line.isdigit() and first <= int(line) < first + len(lines)

    def is_routed(kind, source):
        return source.rpartition(":")[0].endswith("integrations/moe.py") and kind in (
            "aten::bmm", "aten::_grouped_mm", "transformers::grouped_mm_fallback")

    nodes = list(enumerate(zip(plan.get("kinds", []), plan.get("sources", []))))
    shared = [n for n, (kind, source) in nodes if is_shared(kind, source)]
    routed = [n for n, (kind, source) in nodes if is_routed(kind, source)]
    if len(shared) != 3 * layers or not routed or len(routed) % layers:
        return None
    per_layer = len(routed) // layers
    return [(sorted({plan["stream_of"][n] for n in shared[3 * layer:3 * layer + 3]}),
             sorted({plan["stream_of"][n] for n in routed[per_layer * layer:per_layer * (layer + 1)]}))
            for layer in range(layers)]


def decode_plan(model, opara_graphs):
    """The plan of opara's decode step (the compiled graph that ran most), and for a MoE model each
    layer's shared and routed experts' streams."""
    import json as json_module

    compiled = [c for graph in opara_graphs for c in graph.by_shape.values() if hasattr(c, "handle")]
    if not compiled:
        return None
    decode = max(compiled, key=lambda c: c.handle.stats()["runs"])
    plan = json_module.loads(decode.handle.plan())
    report = {"streams": plan["streams"], "nodes": plan["nodes"]}
    blocks = [m for m in model.modules() if hasattr(m, "shared_expert") and hasattr(m, "experts")]
    if blocks:
        report["experts_streams"] = shared_and_routed_experts(plan, len(blocks), blocks[0])
    return report


def timings(batch, full, prefill, eager, args):
    """A row's speeds from its timed requests (none with --warm-only)."""
    if not full:
        return {"warm_only": True}
    full_s, prefill_s = statistics.median(full), statistics.median(prefill)
    return dict(median_s=full_s, prefill_s=prefill_s, tokens_per_s=batch * args.new_tokens / full_s,
                decode_tokens_per_s=(batch * (args.new_tokens - 1) / (full_s - prefill_s)
                                     if args.new_tokens > 1 and full_s > prefill_s else None),
                speedup_vs_eager=statistics.median(e / f for e, f in zip(eager, full)) if eager else 1.0)


class PeakMemory:
    """On a GPU, the most memory a row held: the model's weights (`weights`, allocated before the
    rows) and the most allocated above what was allocated when the row started."""

    def __init__(self, device, weights):
        self.device, self.weights = device, weights
        if device.type == "cuda":
            synchronize(device)
            self.before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)

    def mib(self):
        if self.device.type != "cuda":
            return None
        return (self.weights + torch.cuda.max_memory_allocated(self.device) - self.before) / 2**20


def allocated(device):
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def static_cache(model, batch, length):
    """The row's static KV cache, made now on the model's device (early_initialization), outside
    any compiled call: its tensors (keys, values and the length counter) are marked static
    (torch._dynamo.mark_static_address), so that Inductor's CUDA graphs take the in-place writes of
    the decode step, and none is made inside a compiled prefill (where the marking is skipped, the
    counter is a CPU tensor moved to the GPU in the graph, and a CUDA graph's pool holds the cache)."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=length)
    shape = model._get_static_cache_init_shape() if hasattr(model, "_get_static_cache_init_shape") else None
    if shape is None:  # another transformers, or a model it cannot say: the heads from the config
        config = model.config.get_text_config(decoder=True)
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        shape = heads, getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache.early_initialization(batch_size=batch, num_heads=shape[0], head_dim=shape[1], dtype=model.dtype,
                               device=model.device)
    return cache


def measure(model, inputs, backend, reference, device, args, opara, weights=0):
    batch = inputs["input_ids"].shape[0]
    row = {"backend": backend}
    torch._dynamo.reset()
    opara.dynamo_counters.clear()
    peak = PeakMemory(device, weights)
    model.__dict__.pop("_previous_max_cache_length", None)  # the static cache's length: this row's own
    if args.cache == "reused":  # one cache for the row's requests, at one address (what CUDA graphs keep)
        inputs = {**inputs, "past_key_values": static_cache(model, batch, args.prompt_len + args.new_tokens)}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opara_graphs = []
            compile_forward(model, backend, device, opara_graphs)
            compiled = model.__dict__.get("forward")
            tokens, first_s = generate(model, inputs, args.new_tokens, device)
            # Untimed: with a reused cache the second request's prefill finds the cache made, another graph.
            generate(model, inputs, args.new_tokens, device)
            full, prefill, eager = [], [], []
            for _ in range(0 if args.warm_only else args.repeats):
                full.append(generate(model, inputs, args.new_tokens, device)[1])
                prefill.append(generate(model, inputs, 1, device)[1])
                if compiled is not None:  # eager beside it, so that a machine that changes speed slows both
                    del model.forward
                    eager.append(generate(model, inputs, args.new_tokens, device)[1])
                    model.forward = compiled
    except Exception as error:  # a backend that fails is a row saying so, not a lost run
        row["error"] = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
        return row, None
    finally:
        model.__dict__.pop("forward", None)
    row.update(first_call_s=first_s, new_tokens=int(tokens.shape[1] - inputs["input_ids"].shape[1]),
               peak_mib=peak.mib(), **timings(batch, full, prefill, eager, args))
    if reference is not None:
        row["tokens_equal"] = bool(tokens.shape == reference.shape and torch.equal(tokens.cpu(), reference.cpu()))
        if not row["tokens_equal"] and tokens.shape == reference.shape:
            row["tokens_differing"] = int((tokens.cpu() != reference.cpu()).sum())
    if backend.startswith("opara"):
        row["counters"] = {k: opara.dynamo_counters.get(k, 0) for k in ("graphs", "compiles", "fallbacks", "regions")}
        row["fell_back"] = fallback_note(backend, row["counters"])
        row["decode_plan"] = decode_plan(model, opara_graphs)
    # opara's warnings (a graph that runs eagerly, symbolic sizes), each once, verbatim.
    row["warnings"] = list(dict.fromkeys(str(w.message) for w in caught if "opara" in str(w.message)))
    return row, tokens


def compile_step(model, backend, device, example):
    """The decoder's step as `backend` compiles a module, and opara's compiled model (else None)."""
    if backend == "eager":
        return model, None
    if backend in INDUCTOR_BACKENDS:
        return compile_with_inductor(model, backend, device), None
    import opara

    options = {"device": device.type, "kernels": "inductor" if backend == "opara-inductor" else "aten",
               **({"streams": "single"} if backend == "opara-1stream" else {})}
    compiled = opara.compile(model, example, **options)
    return compiled, compiled


def decode(step, prompt, new_tokens, device):
    from opara_models.decoder import greedy_decode

    synchronize(device)
    started = time.perf_counter()
    tokens = greedy_decode(step, prompt, new_tokens)
    synchronize(device)
    return tokens, time.perf_counter() - started


def measure_decoder(model, prompt, backend, reference, device, args, weights=0):
    """A row of the decoder that owns its caches, timed as measure() times generate()."""
    batch = prompt.shape[0]
    row = {"backend": backend}
    torch._dynamo.reset()
    peak = PeakMemory(device, weights)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            synchronize(device)
            started = time.perf_counter()
            step, compiled = compile_step(model, backend, device, [prompt[:, :1], torch.tensor([0], device=device)])
            tokens, _ = decode(step, prompt, args.new_tokens, device)
            first_s = time.perf_counter() - started
            decode(step, prompt, args.new_tokens, device)
            full, prefill, eager = [], [], []
            for _ in range(0 if args.warm_only else args.repeats):
                full.append(decode(step, prompt, args.new_tokens, device)[1])
                prefill.append(decode(step, prompt, 1, device)[1])
                if step is not model:
                    eager.append(decode(model, prompt, args.new_tokens, device)[1])
    except Exception as error:  # a backend that fails is a row saying so, not a lost run
        row["error"] = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
        return row, None
    row.update(first_call_s=first_s, new_tokens=int(tokens.shape[1]), peak_mib=peak.mib(),
               **timings(batch, full, prefill, eager, args))
    if reference is not None:
        row["tokens_equal"] = bool(tokens.shape == reference.shape and torch.equal(tokens.cpu(), reference.cpu()))
        if not row["tokens_equal"] and tokens.shape == reference.shape:
            row["tokens_differing"] = int((tokens.cpu() != reference.cpu()).sum())
    if compiled is not None:  # one opara.compile: one graph, compiled once
        stats = compiled.stats()
        row["counters"] = {"graphs": 1, "compiles": 1, "fallbacks": int(stats.get("eager_fallbacks", 0)),
                           "regions": int(stats["regions"])}
        row["fell_back"] = fallback_note(backend, row["counters"])
        plan = compiled.plan()
        row["decode_plan"] = {"streams": plan["streams"], "nodes": plan["nodes"]}
        row["regions"] = int(stats["regions"])
    row["warnings"] = list(dict.fromkeys(str(w.message) for w in caught if "opara" in str(w.message)))
    return row, tokens


def cell(value, fmt):
    return "-" if value is None else format(value, fmt)


def table(results):
    """The markdown table of the rows; an opara row that fell back says so in its last column."""
    lines = ["| model | size | params | batch | backend | first call s | tokens/s | decode tokens/s | x eager "
             "| peak MiB | tokens = eager | opara graphs / compiles / fallbacks |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in results:
        head = f"| {r['model']} | {r['size']} | {r['params'] / 1e6:.1f}M | {r['batch']} | {r['backend']} "
        if "error" in r:
            lines.append(head + f"| FAILED: {r['error']} | | | | | | |")
            continue
        same = {True: "yes", False: f"NO ({r.get('tokens_differing', 'shape')} differ)", None: "-"}[
            r.get("tokens_equal")] if r["backend"] != "eager" else "(reference)"
        c = r.get("counters")
        counts = f"{c['graphs']} / {c['compiles']} / {c['fallbacks']}" if c else ""
        lines.append(head + f"| {r['first_call_s']:.2f} | {cell(r.get('tokens_per_s'), '.0f')} | "
                     f"{cell(r.get('decode_tokens_per_s'), '.0f')} | {cell(r.get('speedup_vs_eager'), '.2f')} | "
                     f"{cell(r.get('peak_mib'), '.0f')} | {same} | {counts}{marked(r['backend'], c)} |")
    return "\n".join(lines)


def write_json(args, device, results):
    if args.json:
        text = json.dumps({"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
                           "new_tokens": args.new_tokens, "prompt_len": args.prompt_len, "repeats": args.repeats, "cache": args.cache,
                           "warm_only": args.warm_only, "inductor_cache": args.inductor_cache,
                           "results": results}, indent=2)
        partial = args.json.with_name(args.json.name + ".part")
        partial.write_text(text + "\n")
        partial.replace(args.json)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--models", default="llama,qwen2_moe,gptfast",
                        help="comma-separated: llama, qwen2_moe, gptfast (the decoder that owns its caches)")
    parser.add_argument("--sizes", default="small,large",
                        help="comma-separated: small (~1M), large (~20M), wide (qwen2_moe only: Qwen1.5-MoE-A2.7B's "
                             "widths, 1.1B parameters, for a GPU)")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes (default 1,8)")
    parser.add_argument("--backends", help="comma-separated, of " + ", ".join(BACKENDS) +
                        " (default: eager,inductor,opara; on cuda eager,inductor,inductor-ro,opara,opara-1stream)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per call (default 32)")
    parser.add_argument("--prompt-len", type=int, default=8, help="prompt tokens (default 8)")
    parser.add_argument("--repeats", type=int, default=5, help="timed generate calls of each kind (default 5)")
    parser.add_argument("--cache", choices=("reused", "new"), default="reused",
                        help="reused (default): one transformers.StaticCache per row, reset before each generate "
                             "and passed as past_key_values, as a server keeps it; new: generate() makes a new "
                             "static cache per call (transformers 5's default), which a CUDA graph backend "
                             "captures again each time; that cache is made inside the first compiled call, "
                             "unmarked (see above): Inductor's CUDA graphs skip the decode step")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: llama small, batch 1, 4 new tokens, 1 repeat (unless given)")
    parser.add_argument("--inductor-cache", action="store_true",
                        help="let Inductor use its on-disk caches (default: off, so its first call compiles)")
    parser.add_argument("--warm-only", action="store_true",
                        help="each row's first two requests (the compiles), no timed ones: fills the on-disk "
                             "caches for a timed run (give --inductor-cache to both)")
    given = {a.split("=")[0] for a in sys.argv[1:] if a.startswith("--")}
    args = parser.parse_args()
    log_compile_progress()
    if args.quick:  # flags given explicitly win
        for flag, value in (("--models", "llama"), ("--sizes", "small"), ("--batches", "1"), ("--new-tokens", 4),
                            ("--repeats", 1)):
            if flag not in given:
                setattr(args, flag[2:].replace("-", "_"), value)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    backends = (args.backends or ("eager,inductor,inductor-ro,opara,opara-1stream" if device.type == "cuda"
                                  else "eager,inductor,opara")).split(",")
    for flag, values, allowed in (("--backends", backends, BACKENDS), ("--models", args.models.split(","), CONFIGS),
                                  ("--sizes", args.sizes.split(","), ("small", "large", "wide"))):
        unknown = [v for v in values if v not in allowed]
        if unknown:
            parser.error(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(allowed)}")
    if args.new_tokens < 1 or args.repeats < 1:
        parser.error("--new-tokens and --repeats must be at least 1")
    import opara  # registers backend="opara"

    if not args.inductor_cache:
        from torch._inductor import config as inductor_config

        inductor_config.force_disable_caches = True
    torch.set_grad_enabled(False)
    results = []
    started = time.perf_counter()
    for name in args.models.split(","):
        for size in args.sizes.split(","):
            if size not in CONFIGS[name]:
                print(f"{name} has no {size} size: skipped", file=sys.stderr)
                continue
            model = build_model(name, size, device) if name != "gptfast" else None
            for batch in map(int, args.batches.split(",")):
                if name == "gptfast":  # its caches are made for one batch size
                    model = build_decoder(size, device, batch, args.prompt_len + args.new_tokens)
                params = sum(p.numel() for p in model.parameters())
                weights = allocated(device)  # the model alone, before the row's caches and graphs
                generator = torch.Generator().manual_seed(SEED + batch)
                ids = torch.randint(1, model.config.vocab_size, (batch, args.prompt_len), generator=generator)
                inputs = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}
                reference = None
                for backend in ["eager"] + [b for b in backends if b != "eager"]:
                    if name == "gptfast":
                        row, tokens = measure_decoder(model, ids.to(device), backend, reference, device, args,
                                                      weights)
                    else:
                        row, tokens = measure(model, inputs, backend, reference, device, args, opara, weights)
                    if backend == "eager":
                        reference = tokens
                        if "eager" not in backends:
                            continue
                    row.update(model=name, size=size, params=params, batch=batch)
                    results.append(row)
                    print(f"{name} {size} ({params / 1e6:.1f}M) b{batch} {backend}: " + (
                        f"FAILED: {row['error']}" if "error" in row else
                        f"first call {row['first_call_s']:.2f} s, {cell(row.get('tokens_per_s'), '.0f')} tokens/s, "
                        f"decode {cell(row.get('decode_tokens_per_s'), '.0f')} tokens/s, peak "
                        f"{cell(row.get('peak_mib'), '.0f')} MiB, tokens = eager: {row.get('tokens_equal', '-')}"
                        + (f", counters {row['counters']}" if "counters" in row else "")
                        + marked(backend, row.get("counters"))), flush=True)
                    plan = row.get("decode_plan")
                    if plan:
                        print(f"  decode plan: {plan['nodes']} nodes on {plan['streams']} streams" + "".join(
                            f"; layer {layer}: shared expert on {shared}, routed experts on {routed}"
                            for layer, (shared, routed) in enumerate(plan.get("experts_streams") or [])), flush=True)
                    for message in row.get("warnings", []):
                        print(f"  warning: {message}", flush=True)
                    write_json(args, device, results)  # after every row: a run killed midway keeps its rows
            del model
    print(f"\n{len(results)} rows in {time.perf_counter() - started:.0f} s; {args.new_tokens} new tokens after a "
          f"{args.prompt_len}-token prompt, median of {args.repeats}, {device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, cache {args.cache}\n")
    print(table(results))
    # Exit 1 when a row failed or its tokens differ from eager's on the CPU, so a check sees it.
    bad = [r for r in results if "error" in r or (device.type == "cpu" and r.get("tokens_equal") is False)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
