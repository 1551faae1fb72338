#!/usr/bin/env python3
"""Eager against torch.compile's Inductor (default mode; at its best for inference, inductor-best:
freezing with its C++ wrapper on the CPU, its CUDA graphs on a GPU; and "reduce-overhead"
on a GPU: its CUDA graphs) and torch.compile(backend="opara") with ATen's kernels (opara) and with Inductor's, compiled
per region of opara's plan (opara-inductor): the first call's time (Dynamo, the backend's compile
and one run) and the median latency after, and each one's ratio to eager and to Inductor within a
round; on a GPU the peak memory of each (the weights and inputs, and the most it held above them
while compiling and warming up). Each opara row carries opara's counters and says when it fell back
(a graph run eagerly, or kernels="inductor" with no region: bench/opara_rows.py). A benchmark, not
a test: ratios are meaningful within one run on one machine.

    ~/.cache/opara/venv/bin/python bench/torch_compile_bench.py --device cpu
    python3 bench/torch_compile_bench.py --device cuda --json out.json     (scripts/gpu_check.sh)

The models are the test models of scripts/export_models.py (same builders, seed and inputs), built
in this process at batch 1; each backend's outputs are checked against eager's. The JSON is
written after each model (a run killed midway keeps the models done). Exit 1 when a row failed.

inductor-ro is run as torch's documentation says for Inductor's CUDA graphs (cudagraph trees):
torch.compiler.cudagraph_mark_step_begin() before each call, and an output that outlives the next
call cloned (its outputs are views of the graphs' memory pool, which the next replay overwrites).
The outputs compared with eager's are cloned right after their call, outside any timed region, for
every backend, and checked twice: the first call's and the last warm-up's (for inductor-ro a
replay of its recorded graph). The timed calls keep no output. opara's rows run with its default
outputs="clone": each call returns outputs of its own, their copy inside the timed call (a few
microseconds), where inductor-ro returns views of its pool: a rule, if anything, in Inductor's favour.

--warm-only compiles each backend and runs it (the first call and the warm-up), without timing:
with --inductor-cache and a TORCHINDUCTOR_CACHE_DIR, a process run before the timed one fills the
caches, so that the timed one loads what the other compiled (scripts/gpu_check/steps.py).
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "python"))
import export_models  # noqa: E402  the builders, seed and input recipe of the test models
from compile_progress import log_compile_progress  # noqa: E402  beside this file
from inductor_backends import INDUCTOR_BACKENDS, compile_with_inductor  # noqa: E402  beside this file
from opara_rows import Attribution, marked  # noqa: E402  beside this file

BACKENDS = ("eager", "inductor", "inductor-best", "inductor-ro", "opara", "opara-inductor")
# On the CPU "reduce-overhead" (CUDA graphs) is Inductor's default mode again: left out there.
CPU_BACKENDS = ("eager", "inductor", "inductor-best", "opara", "opara-inductor")
# The backends every row is compared with, and the key of its ratio to each.
RATIO_KEYS = {"eager": "speedup_vs_eager", "inductor": "speedup_vs_inductor",
              "inductor-best": "speedup_vs_inductor_best"}


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


def compile_backend(name, model, device):
    if name == "eager":
        return model
    if name in INDUCTOR_BACKENDS:
        return compile_with_inductor(model, name, device)
    # opara's defaults: on the CPU its tuner picks the schedule (eager's unless another is faster).
    options = {"device": str(next(model.parameters()).device),
               "kernels": "inductor" if name == "opara-inductor" else "aten"}
    return torch.compile(model, backend="opara", options=options)


def settle(runner, inputs, device, settle_ms):
    """Untimed runs until `settle_ms` has passed: the previous backend's OpenMP threads spin for a
    while after its last parallel region and take the cores from the next one's first runs."""
    started = time.perf_counter()
    while (time.perf_counter() - started) * 1000 < settle_ms:
        runner(*inputs)
    synchronize(device)


def kept(outputs):
    """The outputs of a call, cloned: Inductor's CUDA graphs (inductor-ro) return views of their
    pool, which the next call overwrites (reading one after it raises), so an output kept across
    calls is a copy, made outside any timed region."""
    return [t.detach().clone() for t in flatten(outputs)]


def max_relative_difference(outputs, reference):
    worst = 0.0
    for actual, expected in zip(flatten(outputs), reference):
        scale = max(expected.abs().max().item(), 1e-12)
        worst = max(worst, (actual.double() - expected.double()).abs().max().item() / scale)
    return worst


def measure_model(label, model, inputs, device, backends, args):
    """Compiles each backend (its first call timed), then times them in interleaved rounds, so that a
    machine that changes speed during the run (a shared virtual machine does) slows every backend
    alike; each ratio to eager is the median over rounds of the ratio within a round. opara's
    counters are tallied per backend over its compile and its rounds: a graph that falls back at
    any call marks its row."""
    torch._dynamo.reset()  # Dynamo keeps one cache entry per backend: each compiled model keeps its own
    runners, results, reference = {}, {}, None
    attribution = Attribution()
    cuda = device.type == "cuda"
    if cuda:
        synchronize(device)
        weights = torch.cuda.memory_allocated(device)  # the model and its inputs, before any backend
    for name in backends:
        if cuda:
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        if name != "eager":  # Inductor takes a minute or more on a small CPU: say what is going on
            print(f"  {label}: compiling {name} (its first call)...", file=sys.stderr, flush=True)
        try:
            with attribution.to(name):
                runner = compile_backend(name, model, device)
                outputs, first_ms = timed(lambda: runner(*inputs), device)
                outputs = kept(outputs)  # before the next call overwrites inductor-ro's
                last = outputs
                for _ in range(args.warmup):
                    last = kept(runner(*inputs))  # inductor-ro: its recording, then replays
        except Exception as error:  # a backend that fails is a row saying so, not a lost run
            results[name] = {"backend": name, "error": (str(error).strip().splitlines() or [repr(error)])[0]}
            if name.startswith("opara"):
                results[name].update(attribution.row(name))
            continue
        if name == "eager":
            reference = flatten(outputs)
        runners[name] = runner
        # The first call's outputs and the last warm-up's (for inductor-ro, a replay of its graphs).
        results[name] = {"backend": name, "first_call_ms": first_ms, "samples": [], "round_medians": [],
                         "max_rel_diff": max(max_relative_difference(outputs, reference),
                                             max_relative_difference(last, reference))}
        if cuda:
            # Its graphs' pools and activations, above what earlier backends left allocated.
            results[name]["peak_mib"] = (weights + torch.cuda.max_memory_allocated(device) - before) / 2**20
    for _ in range(args.rounds):
        for name, runner in runners.items():
            with attribution.to(name):
                settle(runner, inputs, device, args.settle_ms)
                samples = [timed(lambda: runner(*inputs), device)[1] for _ in range(args.iters)]
            results[name]["samples"] += samples
            results[name]["round_medians"].append(statistics.median(samples))
    for name, result in results.items():
        if name.startswith("opara") and "error" not in result:
            result.update(attribution.row(name))
    # Each row's ratio to these backends, where they ran: the median over rounds of the ratio within one.
    baselines = {key: results[name].get("round_medians") for name, key in RATIO_KEYS.items()
                 if name in runners and results[name].get("round_medians")}
    for result in results.values():
        if not result.get("samples"):  # failed, or --warm-only (no rounds)
            result.pop("samples", None)
            continue
        result["median_ms"] = statistics.median(result.pop("samples"))
        rounds = result["round_medians"]
        for key, baseline in baselines.items():
            result[key] = statistics.median(b / r for b, r in zip(baseline, rounds))
    for result in results.values():
        result.pop("round_medians", None)
    return [results[name] for name in backends]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["googlenet", "inception_v3", "bert_base", "branchy"],
                        choices=list(export_models.BUILDERS))
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--backends", help="comma-separated, of " + ", ".join(BACKENDS) +
                        f" (default: all on a GPU; {', '.join(CPU_BACKENDS)} on the CPU)")
    parser.add_argument("--iters", type=int, default=10, help="timed runs per backend in each round (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--settle-ms", type=float, default=50,
                        help="untimed runs before each backend's timed block in a round (default 50 ms)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--inductor-cache", action="store_true",
                        help="let Inductor use its on-disk caches, and opara its compile cache (default: both off, "
                             "so each first call compiles)")
    parser.add_argument("--warm-only", action="store_true",
                        help="compile and warm up each backend, no timed rounds (fills the on-disk caches for a "
                             "timed run: give --inductor-cache to both)")
    args = parser.parse_args()
    log_compile_progress()
    if args.warm_only:
        args.rounds = 0
    device = torch.device(args.device)
    backends = args.backends.split(",") if args.backends else list(BACKENDS if device.type == "cuda" else CPU_BACKENDS)
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    import opara  # noqa: F401  registers backend="opara"

    if not args.inductor_cache:
        # A first call that finds Inductor's on-disk caches, or opara's compile cache, from an earlier
        # run is not a cold compile.
        os.environ["OPARA_CACHE"] = "0"
        from torch._inductor import config as inductor_config

        inductor_config.force_disable_caches = True

    torch.set_grad_enabled(False)
    results = []
    print(f"{'model':<14}{'backend':<16}{'first call ms':>14}{'median ms':>11}{'x eager':>9}{'x inductor':>11}"
          f"{'x best':>8}{'max rel diff':>14}{'peak MiB':>10}", flush=True)
    for name in args.models:
        torch.manual_seed(export_models.SEED)
        model, specs, _ = export_models.BUILDERS[name](1)
        model = model.eval().to(device)
        inputs = [t.to(device) for t in export_models.make_inputs(specs, export_models.SEED)]
        measured = measure_model(name, model, inputs, device, ["eager"] + [b for b in backends if b != "eager"], args)
        for result in measured:
            if result["backend"] not in backends:
                continue
            result["model"] = name
            if args.warm_only:
                result["warm_only"] = True
            results.append(result)
            print(row_line(result), flush=True)
            for compiled in result.get("compiles", []):  # what opara's row ran, and where
                print(f"{'':<14}  {compiled}", flush=True)
        write_json(args, device, results)  # after every model: a run killed midway keeps its models
    # A failed row is a failed run, so that a check reading the exit code sees it.
    return 1 if any("error" in r for r in results) else 0


def cell(result, key, spec):
    value = result.get(key)
    return "-" if value is None else format(value, spec)


def row_line(result):
    """A row of the table, an opara row that fell back marked (opara_rows.marked)."""
    head = f"{result['model']:<14}{result['backend']:<16}"
    if "error" in result:
        return head + f" FAILED: {result['error']}"
    return (head + f"{result['first_call_ms']:>14.0f}{cell(result, 'median_ms', '.3f'):>11}"
            f"{cell(result, 'speedup_vs_eager', '.2f'):>9}{cell(result, 'speedup_vs_inductor', '.2f'):>11}"
            f"{cell(result, 'speedup_vs_inductor_best', '.2f'):>8}{result['max_rel_diff']:>14.2e}{cell(result, 'peak_mib', '.0f'):>10}"
            + marked(result["backend"], result.get("counters")))


def write_json(args, device, results):
    if args.json:
        text = json.dumps({"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
                           "iters": args.iters, "rounds": args.rounds, "warm_only": args.warm_only,
                           "inductor_cache": args.inductor_cache, "results": results}, indent=2)
        partial = args.json.with_name(args.json.name + ".part")
        partial.write_text(text + "\n")
        partial.replace(args.json)


if __name__ == "__main__":
    sys.exit(main())
