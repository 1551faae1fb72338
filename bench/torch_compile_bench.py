#!/usr/bin/env python3
"""Eager against torch.compile's default backend (Inductor) and torch.compile(backend="opara"):
the first call's time (Dynamo, the backend's compile and one run) and the median latency after.
A benchmark, not a test: ratios are meaningful within one run on one machine.

    ~/.cache/opara/venv/bin/python bench/torch_compile_bench.py --device cpu
    python3 bench/torch_compile_bench.py --device cuda --json out.json     (scripts/gpu_check.sh)

The models are the test models of scripts/export_models.py (same builders, seed and inputs), built
in this process at batch 1; each backend's outputs are checked against eager's.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "python"))
import export_models  # noqa: E402  the builders, seed and input recipe of the test models

BACKENDS = ("eager", "inductor", "opara")


def flatten(value):
    return export_models.flatten(value)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call, device):
    synchronize(device)
    started = time.perf_counter()
    result = call()
    synchronize(device)
    return result, (time.perf_counter() - started) * 1000


def run_backend(name, model, inputs, device, args, reference):
    torch._dynamo.reset()
    if name == "eager":
        runner = model
    elif name == "inductor":
        runner = torch.compile(model)
    else:
        # opara's defaults: on the CPU its tuner picks the schedule (eager's unless another is faster).
        runner = torch.compile(model, backend="opara", options={"device": str(device)})
    outputs, first_ms = timed(lambda: runner(*inputs), device)
    for _ in range(args.warmup):
        runner(*inputs)
    samples = [timed(lambda: runner(*inputs), device)[1] for _ in range(args.iters)]
    worst = 0.0
    if reference is not None:
        for actual, expected in zip(flatten(outputs), reference):
            scale = max(expected.abs().max().item(), 1e-12)
            worst = max(worst, (actual.double() - expected.double()).abs().max().item() / scale)
    return {"backend": name, "first_call_ms": first_ms, "median_ms": statistics.median(samples),
            "max_rel_diff": worst}, flatten(outputs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["googlenet", "inception_v3", "bert_base", "branchy"],
                        choices=list(export_models.BUILDERS))
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated, of " + ", ".join(BACKENDS))
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    backends = args.backends.split(",")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    import opara  # noqa: F401  registers backend="opara"

    torch.set_grad_enabled(False)
    results = []
    print(f"{'model':<14}{'backend':<10}{'first call ms':>14}{'median ms':>11}{'x eager':>9}{'max rel diff':>14}")
    for name in args.models:
        torch.manual_seed(export_models.SEED)
        model, specs, _ = export_models.BUILDERS[name](1)
        model = model.eval().to(device)
        inputs = [t.to(device) for t in export_models.make_inputs(specs, export_models.SEED)]
        reference = None
        eager_ms = None
        for backend in ["eager"] + [b for b in backends if b != "eager"]:
            try:
                result, outputs = run_backend(backend, model, inputs, device, args, reference)
            except Exception as error:  # a backend that fails is a row saying so, not a lost run
                result = {"backend": backend, "error": str(error).strip().splitlines()[0]}
                outputs = None
            if backend == "eager":
                reference, eager_ms = outputs, result.get("median_ms")
                if "eager" not in backends:
                    continue
            result["model"] = name
            if "median_ms" in result and eager_ms:
                result["speedup_vs_eager"] = eager_ms / result["median_ms"]
            results.append(result)
            if "error" in result:
                print(f"{name:<14}{backend:<10} FAILED: {result['error']}")
            else:
                print(f"{name:<14}{backend:<10}{result['first_call_ms']:>14.0f}{result['median_ms']:>11.3f}"
                      f"{result.get('speedup_vs_eager', 1.0):>9.2f}{result['max_rel_diff']:>14.2e}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "torch": torch.__version__, "threads":
                                         torch.get_num_threads(), "iters": args.iters, "results": results},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
