#!/usr/bin/env python3
"""Serving a model compiled by opara with Ray Serve: requests of any number of rows arrive over
HTTP, Ray Serve's dynamic batching (@serve.batch) joins the ones that arrive together, and an opara
graph set (one compiled graph per batch size) runs the joined batch on the smallest graph that
fits. The same code serves on the CPU or a GPU, on one machine or a Ray cluster.

    pip install ".[serve]"       # or: pip install -c requirements.txt -r requirements-serve.txt
    python examples/serve_ray.py --model resnet18 --device cpu --port 8000
    curl -X POST 127.0.0.1:8000/ -H 'Content-Type: application/json' \\
         -d '{"inputs": [[[[0.0, ...]]]]}'      # rows of the input, nested lists

A request is {"inputs": rows}, rows shaped [n, *the model's input without its batch dimension];
the answer is {"outputs": the model's first output for those n rows}. A request of the wrong shape
or type gets status 400 and a message naming the input and the shape expected, before it joins a
batch, so the other requests are served.
"""

from __future__ import annotations

import argparse
import os
import secrets
import time
from typing import Any, Callable

# Ray reads these when it is imported: no usage report, and its own token on the listeners it opens.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
os.environ.setdefault("RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S", "1")

import torch  # noqa: E402
import torch.utils._pytree  # noqa: E402
from ray import serve  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402


@serve.deployment(max_ongoing_requests=64)
class OparaModel:
    """One replica: the model compiled into a graph set on its device."""

    def __init__(self, build: Callable[[], torch.nn.Module], example: torch.Tensor, batch_sizes: list[int],
                 device: str):
        import opara

        self.device = torch.device(device)
        model = build().eval().to(self.device)
        self.graph_set = opara.compile(model, [example.to(self.device)], batch_sizes=batch_sizes)
        self.dtype = example.dtype

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def infer(self, requests: list[torch.Tensor]) -> list[list]:
        rows = [request.shape[0] for request in requests]
        outputs = self.graph_set(torch.cat(requests).to(self.device))
        first = torch.utils._pytree.tree_leaves(outputs)[0]  # the model's first output
        return [piece.tolist() for piece in torch.split(first.cpu(), rows)]

    async def __call__(self, request: Request) -> Any:
        try:
            body = await request.json()
            x = torch.tensor(body["inputs"], dtype=self.dtype)
            self.graph_set.check(x.to(self.device))  # the set's own check: names the input and the shape
        except (ValueError, TypeError, KeyError, RuntimeError) as error:
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            return JSONResponse({"error": f"{type(error).__name__}: {message}"}, status_code=400)
        return {"outputs": await self.infer(x)}


def app(build: Callable[[], torch.nn.Module], example: torch.Tensor, batch_sizes: list[int], device: str):
    """The Serve application: serve.run(app(...)) locally, or `serve deploy` it to a cluster."""
    return OparaModel.bind(build, example, batch_sizes, device)


def start(application, port: int, temp_dir: str | None = None):
    """A local Ray on this machine, Serve's HTTP proxy on 127.0.0.1:`port`, the application deployed.
    Returns once it serves; ray.shutdown() stops all of it."""
    import ray

    ray.init(include_dashboard=False, log_to_driver=False, logging_level="warning", _temp_dir=temp_dir,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    serve.start(http_options={"host": "127.0.0.1", "port": port},
                logging_config={"log_level": "WARNING", "enable_access_log": False})
    serve.run(application, name="opara", route_prefix="/")


def torchvision_model(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import torchvision

        return getattr(torchvision.models, name)(weights=None)

    return build


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="a torchvision model, random weights (default resnet18)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    example = torch.randn(1, 3, args.image_size, args.image_size)
    sizes = [int(size) for size in args.batch_sizes.split(",")]
    start(app(torchvision_model(args.model), example, sizes, args.device), args.port)
    print(f"serving {args.model} on {args.device} at http://127.0.0.1:{args.port}/ (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()


if __name__ == "__main__":
    main()
