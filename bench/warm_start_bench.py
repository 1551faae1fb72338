#!/usr/bin/env python3
"""Warm start (issue 44): how long a fresh process waits for its first output, and how fast it
then runs, for each way of getting a compiled model:

  package   opara.load of a package opara.package made earlier (no compile in the process)
  opara     opara.compile(model, kernels="inductor"), opara's compile cache and Inductor's warm
  backend   torch.compile(model, backend="opara"), both caches warm
  opara-nocache, backend-nocache   the same with opara's compile cache off (cache=False)
  inductor  torch.compile(model) (Inductor), its cache warm

Then, in one process, the package's and the in-process compile's (cache=False: Inductor's kernels
in process) steady speeds side by side in alternating rounds (--rounds): the ratio that says
whether a package, and so a cache hit, runs as fast.

Each row above is its own fresh python process (imports not counted: first s runs from the model built
to its first output), after one process per way has warmed Inductor's caches. The package is made
once per model into --folder (its time is the package column). Steady: the median of --iters calls
after 3 warm-ups. The models are the test models of scripts/export_models.py (builders, seed,
inputs), at batch 1, on the CPU unless --device says otherwise.

    python bench/warm_start_bench.py --models googlenet branchy --json warm_start.json
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("package", "opara", "backend", "opara-nocache", "backend-nocache", "inductor")

# One measurement, in a fresh process: argv is the model, the way, the device, the package, iters.
_CHILD = r"""
import json, statistics, sys, time
sys.path[:0] = [{scripts!r}, {python!r}]
import torch, export_models, opara
name, way, device, package, iters = sys.argv[1], sys.argv[2], torch.device(sys.argv[3]), sys.argv[4], int(sys.argv[5])
torch.manual_seed(export_models.SEED)
model, specs, _ = export_models.BUILDERS[name](1)
model = model.eval().to(device)
inputs = [t.to(device) for t in export_models.make_inputs(specs, export_models.SEED)]
def sync():
    if device.type == "cuda":
        torch.cuda.synchronize(device)
with torch.no_grad():
    start = time.perf_counter()
    if way == "package":
        run = opara.load(package)
    elif way.startswith("opara"):
        run = opara.compile(model, inputs, kernels="inductor", device=str(device), cache=way == "opara")
    elif way.startswith("backend"):
        run = torch.compile(model, backend="opara", options={{"kernels": "inductor", "device": str(device),
                                                              "cache": way == "backend"}})
    else:
        run = torch.compile(model)
    run(*inputs); sync()
    first = time.perf_counter() - start
    for _ in range(3):
        run(*inputs)
    sync()
    times = []
    for _ in range(iters):
        t = time.perf_counter(); run(*inputs); sync(); times.append(time.perf_counter() - t)
cache = run.stats()["cache"] if way.startswith("opara") else (
    opara.dynamo_compiles[-1]["cache"] if way.startswith("backend") else "")
print("RESULT " + json.dumps({{"first_s": first, "steady_ms": statistics.median(times) * 1e3, "cache": cache}}))
"""


# The steady speeds side by side, in one process: the package and the in-process compile timed in
# alternating rounds (a 2-core machine's noise moves a lone median by 20%), the ratio per round.
_PAIR = r"""
import json, statistics, sys, time
sys.path[:0] = [{scripts!r}, {python!r}]
import torch, export_models, opara
name, device, package, rounds, iters = sys.argv[1], torch.device(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
torch.manual_seed(export_models.SEED)
model, specs, _ = export_models.BUILDERS[name](1)
model = model.eval().to(device)
inputs = [t.to(device) for t in export_models.make_inputs(specs, export_models.SEED)]
def median_ms(run):
    times = []
    for _ in range(iters):
        t = time.perf_counter(); run(*inputs); times.append(time.perf_counter() - t)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(times) * 1e3
with torch.no_grad():
    loaded = opara.load(package)
    compiled = opara.compile(model, inputs, kernels="inductor", device=str(device), cache=False)
    for run in (loaded, compiled):
        for _ in range(3):
            run(*inputs)
    ratios, package_ms, compiled_ms = [], [], []
    for _ in range(rounds):
        package_ms.append(median_ms(loaded)); compiled_ms.append(median_ms(compiled))
        ratios.append(package_ms[-1] / compiled_ms[-1])
print("RESULT " + json.dumps({{"package_ms": statistics.median(package_ms), "compiled_ms": statistics.median(compiled_ms),
                              "ratio": statistics.median(ratios)}}))
"""


def pair(model, device, package, rounds, iters):
    code = _PAIR.format(scripts=str(ROOT / "scripts"), python=str(ROOT / "python"))
    done = subprocess.run([sys.executable, "-c", code, model, device, str(package), str(rounds), str(iters)],
                          capture_output=True, text=True, timeout=1800)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}


def child(model, way, device, package, iters):
    code = _CHILD.format(scripts=str(ROOT / "scripts"), python=str(ROOT / "python"))
    done = subprocess.run([sys.executable, "-c", code, model, way, device, str(package), str(iters)],
                          capture_output=True, text=True, timeout=1800)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}


def make_package(model, device, path):
    code = (f"import sys; sys.path[:0] = [{str(ROOT / 'scripts')!r}, {str(ROOT / 'python')!r}]\n"
            "import torch, export_models, opara\n"
            f"torch.manual_seed(export_models.SEED)\nmodel, specs, _ = export_models.BUILDERS[{model!r}](1)\n"
            f"inputs = [t.to({device!r}) for t in export_models.make_inputs(specs, export_models.SEED)]\n"
            f"opara.package(model.eval().to({device!r}), inputs, {str(path)!r}, device={device!r})\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"opara.package({model}) failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["googlenet"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--rounds", type=int, default=10,
                        help="rounds of the side-by-side steady comparison (package / in-process compile)")
    parser.add_argument("--folder", type=Path, help="where the packages go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="opara-warm-start-"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor-cache"))
    os.environ.setdefault("OPARA_CACHE_DIR", str(folder / "opara-cache"))
    os.environ.setdefault("OPARA_CACHE", "1")  # asked for: on CUDA the compile cache is off by default
    rows = []
    print(f"{'model':14} {'way':15} {'first s':>8} {'steady ms':>10} {'x package':>10}  cache")
    for model in args.models:
        package = folder / f"{model}.opara"
        package_s = make_package(model, args.device, package) if "package" in args.ways else None
        for way in args.ways:  # a first process per way fills Inductor's caches: not counted
            if way != "package":
                child(model, way, args.device, package, 1)
        results = {way: child(model, way, args.device, package, args.iters) for way in args.ways}
        base = results.get("package", {}).get("steady_ms")
        for way, result in results.items():
            row = {"model": model, "way": way, "device": args.device, **result}
            if way == "package":
                row["package_s"] = package_s
            rows.append(row)
            if "error" in result:
                print(f"{model:14} {way:15} FAILED: {result['error']}")
                continue
            ratio = f"{result['steady_ms'] / base:.2f}" if base else "-"
            print(f"{model:14} {way:15} {result['first_s']:8.2f} {result['steady_ms']:10.2f} {ratio:>10}  "
                  f"{result['cache']}")
        if "package" in args.ways and "opara" in args.ways:
            side = pair(model, args.device, package, args.rounds, args.iters)
            rows.append({"model": model, "way": "package/opara, one process", "device": args.device, **side})
            if "error" in side:
                print(f"{model:14} side by side FAILED: {side['error']}")
            else:
                print(f"{model:14} side by side: package {side['package_ms']:.2f} ms, opara.compile "
                      f"{side['compiled_ms']:.2f} ms, package / compile {side['ratio']:.3f} (median of "
                      f"{args.rounds} rounds)")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"packages, opara's and Inductor's caches in {folder}; torch {__import__('torch').__version__}; "
          f"first s: model built to first output in a fresh process (imports excluded); steady: median of "
          f"{args.iters}")
    return 0 if all("error" not in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
