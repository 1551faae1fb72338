"""The Ray Serve example end to end (examples/serve_ray.py): a local Ray instance serves a model
compiled into a graph set; a few hundred concurrent HTTP requests of mixed batch sizes on 127.0.0.1
each get the model's answer, bad requests get status 400 naming the input and the shape expected
while the others are served, and everything shuts down. Needs the optional `serve` extra
(requirements-serve.txt; scripts/setup.sh installs it); skipped without Ray. Bounded: about a
minute, every request with a timeout."""

import concurrent.futures
import importlib.util
import json
import os
import random
import shutil
import socket
import tempfile
import urllib.error
import urllib.request

import pytest
import torch

from conftest import ROOT

pytestmark = [pytest.mark.serve, pytest.mark.same_on_every_torch,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# The example sets Ray's environment before it imports Ray; without Ray the module is skipped.
_spec = importlib.util.spec_from_file_location("serve_ray_example", ROOT / "examples" / "serve_ray.py")
serve_ray = importlib.util.module_from_spec(_spec)
try:
    _spec.loader.exec_module(serve_ray)
except ImportError as error:
    # The pins of the torch under test: requirements.txt, or another release's (scripts/common.sh).
    _pins = ROOT / "requirements" / f"torch-{torch.__version__.split('+')[0]}.txt"
    _pins = _pins.relative_to(ROOT) if _pins.is_file() else "requirements.txt"
    pytest.skip(f"Ray Serve is not installed ({error}): pip install -c {_pins} -r requirements-serve.txt",
                allow_module_level=True)

REQUESTS = 300
ROW = (3, 16, 16)


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(self.conv(x).relu(), 1), 1))


def build_small_net():
    torch.manual_seed(0)  # the replica's weights and the test's are the same
    return SmallNet()


def free_port():
    """A free port below the kernel's ephemeral range and above Ray's worker ports (10002-19999): an
    ephemeral one, closed here, was taken by one of Ray's own processes before Serve's proxy bound it."""
    ephemeral_start = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    ports = range(20000, min(ephemeral_start, 32768))
    for port in random.sample(ports, min(200, len(ports))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.fail("no free port between 20000 and the ephemeral range on 127.0.0.1")


def post(url, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.fixture(scope="module")
def served(library):
    import ray
    from ray import serve

    # The replicas import opara from this checkout and this test module by name.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "python"), str(ROOT / "tests" / "python"), os.environ.get("PYTHONPATH")]))
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    port = free_port()
    example = torch.randn(1, *ROW)
    try:
        serve_ray.start(serve_ray.app(build_small_net, example, [1, 2, 4, 8], "cpu"), port, temp_dir)
        yield f"http://127.0.0.1:{port}/"
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_concurrent_requests_of_mixed_sizes_get_the_models_answers(served):
    model = build_small_net().eval()
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randn(1 + k % 6, *ROW, generator=generator) for k in range(REQUESTS)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(lambda x: post(served, {"inputs": x.tolist()}), batches))
    assert len(answers) == REQUESTS
    with torch.no_grad():
        for x, (status, body) in zip(batches, answers):
            assert status == 200, body
            torch.testing.assert_close(torch.tensor(body["outputs"]), model(x), rtol=1e-4, atol=1e-5)


def test_bad_requests_get_400_naming_the_input_and_the_rest_are_served(served):
    good = torch.randn(2, *ROW)
    bad = [{"inputs": torch.randn(2, 3, 15, 16).tolist()},  # a wrong trailing shape
           {"inputs": torch.randn(3, 16, 16).tolist()},  # a row without its batch dimension
           {"inputs": "not rows"},
           {"rows": good.tolist()},  # no "inputs"
           b"{not json"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda body: post(served, body), bad + [{"inputs": good.tolist()}] * 10))
    for status, body in answers[:2]:
        assert status == 400 and "input 0" in body["error"] and "[*, 3, 16, 16]" in body["error"], body
    for status, body in answers[2:len(bad)]:
        assert status == 400 and body["error"], body
    with torch.no_grad():
        expected = build_small_net().eval()(good)
    for status, body in answers[len(bad):]:
        assert status == 200
        torch.testing.assert_close(torch.tensor(body["outputs"]), expected, rtol=1e-4, atol=1e-5)
