"""Greedy decoding of small LLMs with Hugging Face's static KV cache through
torch.compile(model.forward, backend="opara") (issue 30): the tokens are eager's, nothing falls
back, the decode step is compiled once per batch size; a Qwen2-MoE decodes with its routing in the
graph (batched_mm, grouped_mm) or broken at the routing (the eager experts' nonzero); and a plan
orders a write of state on one stream against its reads on another.

Every model is a tiny config with random weights (torch.manual_seed), never downloaded.
"""

import collections
import copy
import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch._dynamo

import opara

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from llm_decode_bench import shared_and_routed_experts  # noqa: E402  what the benchmark reports too

transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("fresh_dynamo")]

VOCAB = 256
PROMPT = 8  # tokens in each prompt
NEW_TOKENS = 10  # generated: the first by the prefill step, the other 9 by the decode step
BATCHES = (1, 2, 4)


def cpu_options():
    # The eager reference runs with this many intra-op threads; the same count gives the same sums
    # (and no tuning run per compile). ATen's kernels, eager's bit for bit (the CPU default,
    # Inductor's, is tested in test_inductor_regions.py).
    return {"device": "cpu", "intra_op_threads": torch.get_num_threads(), "kernels": "aten"}


def tiny_llama():
    # Grouped-query attention: 4 query heads share 2 KV heads. No EOS: every prompt gets all its tokens.
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      eos_token_id=None)
    return transformers.LlamaForCausalLM(config)


def tiny_qwen2_moe(experts_implementation=None):
    # 8 routed experts, top-2, and a shared expert with its sigmoid gate in every layer. The default
    # experts_implementation (None) resolves to "grouped_mm" in transformers 5.
    config = transformers.Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                         moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                         num_experts=8, num_experts_per_tok=2, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         experts_implementation=experts_implementation)
    return transformers.Qwen2MoeForCausalLM(config)


MODELS = {
    "llama": tiny_llama,
    "qwen2_moe": tiny_qwen2_moe,  # grouped_mm
    "qwen2_moe-batched_mm": lambda: tiny_qwen2_moe("batched_mm"),
    "qwen2_moe-eager_experts": lambda: tiny_qwen2_moe("eager"),
}


def model_and_prompts(name, batches=BATCHES):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    prompts = {batch: torch.randint(0, VOCAB, (batch, PROMPT)) for batch in batches}
    return model, prompts


def generate(model, ids, new_tokens=NEW_TOKENS):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                              cache_implementation="static")


def opara_warnings(caught, *expected):
    """opara's warnings, but for the notes named in `expected`."""
    texts = [str(w.message) for w in caught if str(w.message).startswith("opara:")]
    return [text for text in texts if not any(note in text for note in expected)]


def dynamo_graphs():
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("name", ["llama", "qwen2_moe", "qwen2_moe-batched_mm"])
def test_greedy_decode_gives_eagers_tokens_and_compiles_each_step_once_per_batch_size(name):
    """Static shapes (dynamic=False): each batch size is its own pair of graphs. The routed experts
    (batched_mm, and grouped_mm's transformers::grouped_mm_fallback custom op) stay in the graph."""
    model, prompts = model_and_prompts(name)
    expected = {batch: generate(model, ids) for batch, ids in prompts.items()}
    model.forward = torch.compile(model.forward, backend="opara", dynamic=False, options=cpu_options())
    for step, (batch, ids) in enumerate(prompts.items(), start=1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tokens = generate(model, ids)
        assert torch.equal(tokens, expected[batch]), f"batch {batch}"
        assert opara_warnings(caught) == []
        assert opara.dynamo_counters["fallbacks"] == 0
        # Two Dynamo graphs per batch size: the prefill (8 prompt tokens; it also makes the static
        # cache's tensors and returns them) and the decode step (1 token, writing the cache in place
        # with index_copy_), which Dynamo guards apart by its extra keyword argument and its shapes.
        # Each is compiled by opara once: the decode step runs 9 times on one compiled graph. No
        # graph break (graphs == unique graphs), and a new batch size compiles both steps once more.
        assert dynamo_graphs() == 2 * step, f"batch {batch}: graph breaks"
        assert opara.dynamo_counters["graphs"] == 2 * step
        assert opara.dynamo_counters["compiles"] == 2 * step, f"batch {batch}"
    assert not torch._dynamo.utils.counters["graph_break"]


def test_later_requests_reuse_the_compiled_steps_on_the_cpu():
    """generate() makes a new static cache for each request (transformers 5). On the CPU opara reads
    and writes the cache where it is, so a second request, or a batch size seen before, compiles
    nothing more (on CUDA the new cache takes over the dropped one's memory: the GPU test below)."""
    torch.manual_seed(0)
    model = tiny_llama().eval()
    requests = [torch.randint(0, VOCAB, (batch, PROMPT)) for batch in (1, 1, 2, 1)]
    expected = [generate(model, ids, new_tokens=4) for ids in requests]
    model.forward = torch.compile(model.forward, backend="opara", dynamic=False, options=cpu_options())
    for number, (ids, tokens) in enumerate(zip(requests, expected)):
        assert torch.equal(generate(model, ids, new_tokens=4), tokens), f"request {number}"
    assert opara.dynamo_counters["compiles"] == 4  # prefill and decode, for batch 1 and batch 2
    assert opara.dynamo_counters["fallbacks"] == 0


def test_decode_with_the_cpus_default_kernels_gives_eagers_tokens_and_writes_the_cache_in_place():
    """The CPU's default, Inductor's kernels in opara's regions: the tokens are eager's, the cache
    rows are written in place inside the step's one region (python/opara/_regions.py), and a
    second request's new cache runs on the compiled steps."""
    torch.manual_seed(0)
    model = tiny_llama().eval()
    requests = [torch.randint(0, VOCAB, (1, PROMPT)) for _ in range(2)]
    expected = [generate(model, ids, new_tokens=4) for ids in requests]
    graphs = []

    def recording_backend(graph, example_inputs):
        graphs.append(opara.opara_backend(graph, example_inputs, options={"device": "cpu", "fallback": "error"}))
        return graphs[-1]

    model.forward = torch.compile(model.forward, backend=recording_backend, dynamic=False)
    for number, (ids, tokens) in enumerate(zip(requests, expected)):
        assert torch.equal(generate(model, ids, new_tokens=4), tokens), f"request {number}"
    assert opara.dynamo_counters["compiles"] == 2 and opara.dynamo_counters["regions"] >= 2
    (decode,) = graphs[1].by_shape.values()
    kinds = json.loads(decode.handle.plan())["kinds"]
    layers = model.config.num_hidden_layers
    # Each layer's key and value caches, written by the region where they live (the cache's small
    # counters, read more than once, copied into them at its end): no ATen write between regions.
    assert len([kind for kind in kinds if kind.endswith("_region") and kind != "opara::written_in_region"]) == 1, kinds
    assert kinds.count("opara::written_in_region") >= 2 * layers, "\n".join(kinds)
    assert not [kind for kind in kinds if kind.startswith("aten::") and kind.endswith("_")], "\n".join(kinds)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA path is not run")
@pytest.mark.parametrize("name", ["llama", "qwen2_moe-batched_mm"])
def test_on_the_gpu_every_decode_step_replays_the_captured_graph(name, no_tf32):
    """On a GPU the decode step is captured with the cache and its position counter read and
    written where they live: every step replays it (no eager run for a changed scalar, no
    fallback), the tokens are eager's, and the next request's new cache takes over the first's
    memory instead of a new capture."""
    graphs = []

    def recording_backend(graph, example_inputs):
        compiled = opara.opara_backend(graph, example_inputs, options={"device": "cuda"})
        graphs.append(compiled)
        return compiled

    model, prompts = model_and_prompts(name, batches=(1,))
    model = model.cuda()
    ids = prompts[1].cuda()
    expected = generate(model, ids)
    model.forward = torch.compile(model.forward, backend=recording_backend, dynamic=False)
    tokens = generate(model, ids)
    assert torch.equal(tokens, expected)
    assert opara.dynamo_counters["fallbacks"] == 0 and opara.dynamo_counters["compiles"] == 2
    (decode,) = graphs[1].by_shape.values()
    stats = decode.handle.stats()
    assert stats["runs"] == NEW_TOKENS - 1 and stats["eager_fallbacks"] == 0, dict(stats)
    # A second request: generate() makes a new cache and drops the first, whose memory the captured
    # graphs take over (CompiledModel::adopt_state): nothing is compiled or captured again.
    assert torch.equal(generate(model, ids), expected)
    assert opara.dynamo_counters["compiles"] == 2 and opara.dynamo_counters["fallbacks"] == 0
    assert decode.handle.stats()["runs"] == 2 * (NEW_TOKENS - 1)


def test_with_dynamic_shapes_a_new_batch_size_compiles_each_step_once_more():
    """torch.compile's default (dynamic=None): the second batch size makes Dynamo recompile both
    steps with a symbolic batch; opara compiles those once per concrete batch size, with a note."""
    model, prompts = model_and_prompts("llama")
    expected = {batch: generate(model, ids) for batch, ids in prompts.items()}
    model.forward = torch.compile(model.forward, backend="opara", options=cpu_options())
    for step, (batch, ids) in enumerate(prompts.items(), start=1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tokens = generate(model, ids)
        assert torch.equal(tokens, expected[batch]), f"batch {batch}"
        assert opara_warnings(caught, "symbolic sizes") == [], f"batch {batch}"
        assert opara.dynamo_counters["fallbacks"] == 0
        # Batch 1: static prefill and decode graphs. Batch 2: their symbolic twins, each compiled for
        # batch 2. Batch 4: no new Dynamo graph, each symbolic graph compiled for batch 4.
        assert opara.dynamo_counters["graphs"] == min(2 * step, 4)
        assert opara.dynamo_counters["compiles"] == 2 * step, f"batch {batch}"


def test_eager_experts_break_the_graph_at_the_routing_and_still_give_eagers_tokens():
    """experts_implementation="eager" loops in Python over the experts nonzero() finds: Dynamo
    breaks the graph there and runs the loop eagerly; attention, norms, the shared expert and the
    router go through opara."""
    model, prompts = model_and_prompts("qwen2_moe-eager_experts", batches=(1,))
    expected = generate(model, prompts[1])
    model.forward = torch.compile(model.forward, backend="opara", dynamic=False, options=cpu_options())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tokens = generate(model, prompts[1])
    assert torch.equal(tokens, expected)
    assert opara_warnings(caught) == []
    assert opara.dynamo_counters["fallbacks"] == 0
    breaks = torch._dynamo.utils.counters["graph_break"]
    assert any("aten.nonzero" in reason for reason in breaks), list(breaks)
    assert dynamo_graphs() > 2 and opara.dynamo_counters["compiles"] >= dynamo_graphs()


@pytest.mark.parametrize("experts", [None, "batched_mm"])
def test_qwen2_moe_decode_puts_each_layers_shared_expert_on_a_stream_beside_its_routed_experts(experts):
    """The whole decode step (every layer's attention, shared expert, router and routed experts,
    the routing on the device) is one graph; opara's plan runs it on several streams, and without
    being told puts each layer's shared expert on streams of its own, beside the routed experts.
    The plan is the untuned one (cpu_tuning_ms=0: every stream the plan opens, as on a GPU)."""
    graphs = []

    def recording_backend(graph, example_inputs):
        compiled = opara.opara_backend(graph, example_inputs,
                                       options={"device": "cpu", "cpu_tuning_ms": 0, "kernels": "aten"})
        graphs.append(compiled)
        return compiled

    torch.manual_seed(0)
    model = tiny_qwen2_moe(experts).eval()
    ids = torch.randint(0, VOCAB, (1, PROMPT))
    expected = generate(model, ids, new_tokens=3)
    model.forward = torch.compile(model.forward, backend=recording_backend, dynamic=False)
    assert torch.equal(generate(model, ids, new_tokens=3), expected)
    assert opara.dynamo_counters["fallbacks"] == 0 and not torch._dynamo.utils.counters["graph_break"]
    assert len(graphs) == 2  # prefill, decode
    (decode,) = graphs[1].by_shape.values()
    plan = json.loads(decode.handle.plan())
    assert plan["streams"] > 1
    assert sorted(plan["launch_order"]) == list(range(plan["nodes"]))
    layers = model.config.num_hidden_layers
    experts = shared_and_routed_experts(plan, layers, model.model.layers[0].mlp)
    assert experts is not None and len(experts) == layers, "the plan's kinds and sources do not find the experts"
    for layer, (shared, routed) in enumerate(experts):
        assert shared and routed and not set(shared) & set(routed), f"layer {layer}: shared {shared}, routed {routed}"


class CacheWriteRead(torch.nn.Module):
    """Reads a cache on two branches, writes it in place (index_copy_) and reads it again: the write
    must wait for the two reads of the old value, the last read for the write."""

    def __init__(self, as_buffer):
        super().__init__()
        self.left = torch.nn.Linear(16, 16)
        self.right = torch.nn.Linear(16, 16)
        self.as_buffer = as_buffer
        if as_buffer:
            self.register_buffer("cache", torch.randn(8, 16))

    def forward(self, *args):
        cache, x, pos = (self.cache, *args) if self.as_buffer else args
        old = self.left(cache.relu())
        also_old = cache.abs().sum(0)
        cache.index_copy_(0, pos, x.sigmoid())
        return old + self.right(cache) + also_old


def write_read_module_and_inputs(as_buffer):
    torch.manual_seed(0)
    module = CacheWriteRead(as_buffer).eval()
    inputs = [torch.randn(2, 16), torch.tensor([1, 5])]
    return module, inputs if as_buffer else [torch.randn(8, 16), *inputs]


def happens_before(plan, first, then):
    """Whether node `first` runs before node `then` in the plan: same-stream launch order and event
    waits, transitively."""
    after = collections.defaultdict(set)
    last_on = {}
    for node in plan["launch_order"]:
        stream = plan["stream_of"][node]
        if stream < 0:
            continue  # launches nothing (a view)
        if stream in last_on:
            after[last_on[stream]].add(node)
        last_on[stream] = node
    for node, waited in plan["waits"].items():
        for before in waited:
            after[before].add(int(node))
    seen, todo = set(), [first]
    while todo:
        for node in after[todo.pop()] - seen:
            seen.add(node)
            todo.append(node)
    return then in seen


@pytest.mark.parametrize("state", ["input", "buffer"])
def test_a_write_of_state_and_its_reads_on_other_streams_are_ordered(bench, tmp_path, state):
    """The plan of a file (opara-bench plan --check, which validates it): the in-place write and the
    reads of the old value are on different streams, ordered by events; the read of the new value
    comes after the write."""
    module, inputs = write_read_module_and_inputs(state == "buffer")
    path = tmp_path / f"cache_{state}.pt2"
    with torch.no_grad():
        torch.export.save(torch.export.export(module, tuple(inputs), strict=False), path)
    plan = json.loads(bench("plan", "--model", path, "--check", "--json", "-").stdout)
    assert plan["valid"] is True and plan["problems"] == []
    kinds = plan["kinds"]
    write = kinds.index("aten::index_copy_")
    reads_of_old = [kinds.index("aten::relu"), kinds.index("aten::abs")]
    read_of_new = max(node for node, kind in enumerate(kinds) if kind == "aten::linear")  # self.right
    assert any(plan["stream_of"][read] != plan["stream_of"][write] for read in reads_of_old), plan["stream_of"]
    for read in reads_of_old:
        assert happens_before(plan, read, write), f"{kinds[read]} is not ordered before the write"
    assert happens_before(plan, write, read_of_new)


@pytest.mark.parametrize("state", ["input", "buffer"])
def test_a_compiled_model_writes_state_as_eager_does(state):
    """opara.compile on the CPU: its executor validates the plan it runs (every dependency ordered,
    the write after the reads of the old value); two calls give eager's outputs and state."""
    module, inputs = write_read_module_and_inputs(state == "buffer")
    eager = copy.deepcopy(module)
    with torch.no_grad():
        compiled = opara.compile(copy.deepcopy(module), [t.clone() for t in inputs], **cpu_options())
        assert compiled.plan()["streams"] > 1
        eager_inputs = [t.clone() for t in inputs]
        opara_inputs = [t.clone() for t in inputs]
        for call in range(2):
            expected = eager(*eager_inputs)
            actual = compiled(*opara_inputs)
            assert torch.equal(actual, expected), f"call {call}"
            if state == "input":  # the caller's cache is written where it is
                assert torch.equal(opara_inputs[0], eager_inputs[0]), f"call {call}"
            eager_inputs[-1] = opara_inputs[-1] = torch.tensor([0, 7]) if call == 0 else inputs[-1]



class Rotary(torch.nn.Module):
    """What Hugging Face models do around their rotary embeddings: a @torch.no_grad() method and
    autocast regions, which torch.export keeps as higher-order wrappers around subgraphs."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    @torch.no_grad()
    def angles(self, x):
        return torch.cos(x), torch.sin(x), x

    def forward(self, x):
        with torch.autocast("cpu", enabled=False):
            y = self.proj(x.float())
        cos, sin, same = self.angles(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = self.proj(y)  # in bfloat16: autocast picks the dtype at run time
        return y * cos + sin + same, z


def test_opara_compile_inlines_no_grad_and_autocast_regions_outside_no_grad():
    torch.manual_seed(0)
    model = Rotary().eval()
    x = torch.randn(2, 8)
    wrappers = {str(node.target) for node in torch.export.export(model, (x,)).graph.nodes
                if str(node.target).startswith("wrap_with")}
    assert wrappers == {"wrap_with_set_grad_enabled", "wrap_with_autocast"}, wrappers
    compiled = opara.compile(model, [x], **cpu_options())  # outside torch.no_grad(), as the issue tried
    assert compiled.exported_with == "torch.export"
    expected = model(x)
    actual = compiled(x)
    assert actual[1].dtype == torch.bfloat16
    for got, want in zip(actual, expected):
        assert torch.equal(got, want)
