#!/usr/bin/env python3
"""Load on three ways to serve one model to concurrent callers with requests of mixed batch sizes:
eager PyTorch, one compiled graph (compiled for the largest batch: each request padded to it and
cut back, calls serialised by the CompiledModel's mutex) and a graph set (one graph per batch size,
opara.compile(..., batch_sizes=...)). For each concurrency level: requests per second, rows per
second, and the p50 and p99 latency of a request. A benchmark, not a test: read ratios within one run.

    ~/.cache/opara/venv/bin/python bench/serve_load.py --model branchy --device cpu
"""

import argparse
import concurrent.futures
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "python"))
import export_models  # noqa: E402  the builders, seed and input recipe of the test models

import opara  # noqa: E402


def percentile(samples, fraction):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def make_servers(model, example, sizes, device):
    """name -> a function of one request's batch (a tensor of n rows) returning its output rows."""
    largest = max(sizes)

    def eager(x):
        with torch.no_grad():
            return export_models.flatten(model(x))[0]

    padded_example = example[:1].expand(largest, *example.shape[1:]).contiguous()
    one_graph = opara.compile(model, [padded_example], device=str(device))
    one_graph_lock = threading.Lock()  # the padding buffer is shared; CompiledModel serialises the run itself

    def compiled(x):
        rows = x.shape[0]
        padded = torch.cat([x, x[-1:].expand(largest - rows, *x.shape[1:])]) if rows < largest else x
        with one_graph_lock:
            output = export_models.flatten(one_graph(padded))[0]
        return output[:rows]

    graph_set = opara.compile(model, [example], batch_sizes=sizes, device=str(device))

    def bucketed(x):
        return export_models.flatten(graph_set(x))[0]

    return {"eager": eager, "one graph": compiled, "graph set": bucketed}, graph_set


def load(serve, requests, concurrency, device):
    latencies = []
    lock = threading.Lock()

    def one(x):
        started = time.perf_counter()
        output = serve(x)
        if device.type == "cuda":
            torch.cuda.current_stream().synchronize()
        elapsed = (time.perf_counter() - started) * 1000
        with lock:
            latencies.append(elapsed)
        return output.shape[0] == x.shape[0]

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        ok = all(pool.map(one, requests))
    wall = time.perf_counter() - started
    rows = sum(x.shape[0] for x in requests)
    return {"requests_per_s": len(requests) / wall, "rows_per_s": rows / wall, "p50_ms": percentile(latencies, 0.5),
            "p99_ms": percentile(latencies, 0.99), "mean_ms": statistics.mean(latencies), "all_answered": ok}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="branchy", choices=list(export_models.BUILDERS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", default="1,2,4,8", help="the graph set's buckets (default 1,2,4,8)")
    parser.add_argument("--concurrency", default="1,2,4,8", help="callers at once (default 1,2,4,8)")
    parser.add_argument("--requests", type=int, default=200, help="requests per level (default 200)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    torch.manual_seed(export_models.SEED)
    model, specs, _ = export_models.BUILDERS[args.model](2)
    model = model.eval().to(device)
    if len(specs) != 1:
        parser.error(f"{args.model} takes {len(specs)} inputs; this benchmark serves one-input models")
    example = export_models.make_inputs(specs, export_models.SEED)[0].to(device)
    servers, graph_set = make_servers(model, example, sizes, device)
    shuffle = random.Random(0)
    results = []
    print(f"{args.model} on {device}, requests of 1 to {max(sizes)} rows, buckets {sizes}")
    print(f"{'server':<11}{'callers':>8}{'req/s':>9}{'rows/s':>9}{'p50 ms':>9}{'p99 ms':>9}")
    for concurrency in [int(c) for c in args.concurrency.split(",")]:
        requests = [example[:1].expand(shuffle.randint(1, max(sizes)), *example.shape[1:]).contiguous()
                    + 0.01 * k for k in range(args.requests)]
        for name, serve in servers.items():
            for x in requests[:3]:
                serve(x)  # warm
            result = {"server": name, "concurrency": concurrency, **load(serve, requests, concurrency, device)}
            results.append(result)
            print(f"{name:<11}{concurrency:>8}{result['requests_per_s']:>9.1f}{result['rows_per_s']:>9.1f}"
                  f"{result['p50_ms']:>9.2f}{result['p99_ms']:>9.2f}", flush=True)
    print("graph set:", json.dumps({k: v for k, v in graph_set.stats().items() if k != "buckets"}))
    pools = {}
    if device.type == "cuda":
        # What sharing one memory pool saves: the same set compiled with a pool per bucket.
        apart = opara.compile(model, [example], batch_sizes=sizes, device=str(device), share_pool=False)
        pools = {"shared_pool_bytes": graph_set.stats()["pool_bytes"], "separate_pool_bytes": apart.stats()["pool_bytes"]}
        print(f"memory pools: one shared {pools['shared_pool_bytes'] / 2**20:.1f} MiB, "
              f"a pool per bucket {pools['separate_pool_bytes'] / 2**20:.1f} MiB")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "device": str(device), "batch_sizes": sizes,
                                         "results": results, **pools}, indent=2) + "\n")


if __name__ == "__main__":
    main()
