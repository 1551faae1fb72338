"""opara.compile_graph_set(...) as a service uses it: calls of any number of rows give the
model's outputs, inputs that are not batched pass whole, threads calling one set at once each get
their own answers, bad requests raise naming the input and the shape expected while the set keeps
serving, and models whose outputs mix rows are refused at compile time."""

import concurrent.futures

import pytest
import torch

import opara

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Rowwise(torch.nn.Module):
    """Two branches over each row, and a temperature that is not batched."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.left = torch.nn.Linear(8, 4)
        self.right = torch.nn.Linear(8, 4)

    def forward(self, x, temperature):
        features = self.conv(x).relu().mean((2, 3))
        return {"scores": (self.left(features) / temperature).softmax(-1), "gate": self.right(features).sigmoid()}


class MixesRows(torch.nn.Module):
    def forward(self, x):
        return x - x.mean(0, keepdim=True)


def cpu_options():
    # ATen's kernels, eager's bit for bit (the CPU default, Inductor's: test_inductor_regions.py).
    return {"device": "cpu", "cpu_tuning_ms": 0, "kernels": "aten"}


@pytest.fixture(scope="module")
def rowwise_set(library):
    torch.manual_seed(0)
    model = Rowwise().eval()
    temperature = torch.tensor([2.0])
    graph_set = opara.compile_graph_set(model, [torch.randn(2, 3, 8, 8), temperature], [1, 2, 4, 8], **cpu_options())
    return model, temperature, graph_set


# A bucket runs more rows than eager does (the padding): BLAS may block its products otherwise, and
# the last bits differ.
def expect_like(model, graph_set, x, temperature):
    with torch.no_grad():
        expected = model(x, temperature)
    actual = graph_set(x, temperature)
    assert set(actual) == {"scores", "gate"}
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-5)


def test_calls_of_any_size_give_the_models_outputs(rowwise_set):
    model, temperature, graph_set = rowwise_set
    assert graph_set.batch_sizes == [1, 2, 4, 8]
    before = graph_set.stats()
    for rows in (1, 2, 3, 5, 8, 11, 20):
        expect_like(model, graph_set, torch.randn(rows, 3, 8, 8), temperature)
    stats = graph_set.stats()
    assert stats["calls"] - before["calls"] == 7
    assert stats["split_calls"] - before["split_calls"] == 2  # 11 and 20 rows
    assert len(stats["buckets"]) == 4 and all(b["device"] == "cpu" for b in stats["buckets"])


def test_threads_calling_one_set_each_get_their_own_answers(rowwise_set):
    model, temperature, graph_set = rowwise_set

    def call(k):
        rows = 1 + k % 9
        x = torch.full((rows, 3, 8, 8), 0.01 * k) + torch.arange(8.0) * 1e-2  # each call's own rows
        with torch.no_grad():
            expected = model(x, temperature)
        actual = graph_set(x, temperature)
        return all(torch.allclose(actual[key], expected[key], rtol=1e-4, atol=1e-5) for key in expected)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(call, range(200)))
    assert len(answers) == 200 and all(answers)


def test_bad_requests_name_the_input_and_the_set_keeps_serving(rowwise_set):
    model, temperature, graph_set = rowwise_set
    with pytest.raises(RuntimeError, match=r"input 0 \('x'\) has shape \[2, 3, 9, 8\]; the graph set takes \[\*, 3, 8, 8\]"):
        graph_set(torch.randn(2, 3, 9, 8), temperature)
    with pytest.raises(RuntimeError, match=r"input 0 \('x'\) has dtype Double"):
        graph_set(torch.randn(2, 3, 8, 8, dtype=torch.float64), temperature)
    with pytest.raises(RuntimeError, match=r"input 1 \('temperature'\) has shape \[2\]; the graph set takes \[1\]"):
        graph_set(torch.randn(2, 3, 8, 8), torch.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match=r"has shape \[3, 8, 8\]; the graph set takes \[\*, 3, 8, 8\]"):
        graph_set.check(torch.randn(3, 8, 8), temperature)  # the same check, nothing run
    assert graph_set.check(torch.randn(5, 3, 8, 8), temperature) == 5
    expect_like(model, graph_set, torch.randn(3, 3, 8, 8), temperature)


def test_a_model_whose_outputs_mix_rows_is_refused(library):
    with pytest.raises(RuntimeError, match="the outputs mix rows"):
        opara.compile_graph_set(MixesRows(), [torch.randn(2, 8)], [1, 4], **cpu_options())


def test_bad_batch_sizes_and_batched_inputs_are_refused(library):
    with pytest.raises(ValueError, match="MixesRows: batch size 0 is not a positive number of rows"):
        opara.compile_graph_set(MixesRows(), [torch.randn(2, 8)], [0, 2], **cpu_options())
    with pytest.raises(ValueError, match="MixesRows: a graph set needs at least one batch size"):
        opara.compile_graph_set(MixesRows(), [torch.randn(2, 8)], [], **cpu_options())
    with pytest.raises(ValueError, match=r"opara.compile_graph_set: batched input 3 does not exist"):
        opara.compile_graph_set(MixesRows(), [torch.randn(2, 8)], [2], batched_inputs=[3], **cpu_options())
    with pytest.raises(ValueError, match=r"batched input 1 has shape \[3\]; every batched example needs the same"):
        opara.compile_graph_set(Rowwise(), [torch.randn(2, 3, 8, 8), torch.ones(3)], [2], batched_inputs=[0, 1],
                                **cpu_options())
    with pytest.raises(ValueError, match=r"no input is batched: declare .*batched_inputs=\[\.\.\.\]"):
        opara.compile_graph_set(MixesRows(), [torch.tensor(1.0)], [2], **cpu_options())
    with pytest.raises(TypeError, match="batched_inputs is for a graph set"):
        opara.compile(MixesRows(), [torch.randn(2, 8)], batched_inputs=[0], **cpu_options())


def test_sizes_in_any_order_and_repeated_give_one_bucket_each(library):
    torch.manual_seed(0)
    model = Rowwise().eval()
    temperature = torch.tensor([2.0])
    graph_set = opara.compile_graph_set(model, [torch.randn(2, 3, 8, 8), temperature], [8, 1, 8, 2], **cpu_options())
    assert graph_set.batch_sizes == [1, 2, 8]
    for rows in (1, 2, 5, 9):
        expect_like(model, graph_set, torch.randn(rows, 3, 8, 8), temperature)


def test_opara_compile_with_batch_sizes_is_an_alias_of_compile_graph_set(library):
    torch.manual_seed(0)
    model = Rowwise().eval()
    temperature = torch.tensor([2.0])
    graph_set = opara.compile(model, [torch.randn(2, 3, 8, 8), temperature], batch_sizes=[4, 1],
                              batched_inputs=[0], **cpu_options())
    assert isinstance(graph_set, opara.GraphSet) and graph_set.batch_sizes == [1, 4]
    expect_like(model, graph_set, torch.randn(3, 3, 8, 8), temperature)


def test_the_library_decides_the_batched_inputs_and_pads_them_as_the_set_does(library):
    x = torch.arange(6.0).reshape(3, 2)
    temperature = torch.tensor([2.0])
    assert list(torch.ops.opara.batched_inputs([x, temperature], None)) == [0]  # first dimension 3, not 1
    assert list(torch.ops.opara.batched_inputs([x, x], [1, 0, 1])) == [0, 1]
    padded, whole = torch.ops.opara.inputs_with_rows([x, temperature], [0], 5)
    assert torch.equal(padded, torch.cat([x, x[-1:], x[-1:]])) and torch.equal(whole, temperature)
    cut, _ = torch.ops.opara.inputs_with_rows([x, temperature], [0], 1)
    assert torch.equal(cut, x[:1])


def test_a_transformer_with_token_ids_and_a_mask(library):
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=500)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    ids = torch.randint(0, 500, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    graph_set = opara.compile_graph_set(model, [ids, mask], [1, 4], **cpu_options())
    for rows in (1, 3, 6):
        ids = torch.randint(0, 500, (rows, 12))
        mask = torch.ones(rows, 12, dtype=torch.int64)
        mask[:, 9:] = 0
        with torch.no_grad():
            expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(graph_set(ids, mask)["last_hidden_state"], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the GPU path is not run")
def test_on_the_gpu_the_buckets_share_one_pool(library, no_tf32):
    torch.manual_seed(0)
    model = Rowwise().eval().cuda()
    temperature = torch.tensor([2.0], device="cuda")
    examples = [torch.randn(2, 3, 32, 32, device="cuda"), temperature]
    shared = opara.compile_graph_set(model, examples, [1, 4, 16])
    apart = opara.compile_graph_set(model, examples, [1, 4, 16], share_pool=False)
    assert shared.stats()["shared_pool"] and not apart.stats()["shared_pool"]
    assert shared.stats()["pool_bytes"] <= apart.stats()["pool_bytes"]
    for rows in (1, 5, 16, 19):
        x = torch.randn(rows, 3, 32, 32, device="cuda")
        with torch.no_grad():
            expected = model(x, temperature)
        for graph_set in (shared, apart):
            actual = graph_set(x, temperature)
            for key in expected:
                torch.testing.assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-5)
