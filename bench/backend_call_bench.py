#!/usr/bin/env python3
"""What a call through torch.compile(model, backend="opara") costs beside the compiled model's own
run: a chain of --layers Linear(4, 4) (two weights each, next to no arithmetic) compiled with ATen's
kernels, called through the backend (Dynamo's guards, the backend's checks of every weight Dynamo
passes, the call into the library) and through opara.compile's model of the same chain (the
weights inside it: the input alone crosses). The difference is the backend's per-call cost, which
grows with the weights: it is what a GPU graph of 300 weights pays on top of its replay.

    ~/.cache/opara/venv/bin/python bench/backend_call_bench.py --layers 15 150

A benchmark, not a test: best of --repeats blocks of --calls calls, microseconds a call.
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPARA_CACHE", "0")  # a cache hit changes nothing here, a miss compiles twice
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch  # noqa: E402

import opara  # noqa: E402


def per_call_us(call, calls, repeats):
    for _ in range(100):
        call()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - started) / calls * 1e6)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[15, 150])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    options = {"device": "cpu", "kernels": "aten", "cpu_tuning_ms": 0}
    print(f"{'layers':>7}{'weights':>9}{'backend us':>12}{'opara.compile us':>18}{'backend cost us':>17}")
    for layers in args.layers:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(layers)]).eval()
        x = torch.randn(1, 4)
        with torch.no_grad():
            backend = torch.compile(model, backend="opara", options=options)
            direct = opara.compile(model, [x], **options)
            assert torch.allclose(backend(x), model(x)) and torch.allclose(direct(x), model(x))
            through_backend = per_call_us(lambda: backend(x), args.calls, args.repeats)
            through_compile = per_call_us(lambda: direct(x), args.calls, args.repeats)
        print(f"{layers:>7}{2 * layers:>9}{through_backend:>12.1f}{through_compile:>18.1f}"
              f"{through_backend - through_compile:>17.1f}", flush=True)


if __name__ == "__main__":
    main()
