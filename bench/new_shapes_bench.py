#!/usr/bin/env python3
"""New shapes (issue 44): how long the first call at each new sequence length takes, and how fast
each length then runs, for a BERT through

  opara         torch.compile(model, backend="opara"): the CPU's default kernels (Inductor's regions)
  opara-aten    the same with kernels="aten"
  opara-static  torch.compile(model, backend="opara", dynamic=False): every length compiled on its own
                (what opara did before symbolic graphs), for the steady speed of per-length kernels
  inductor      torch.compile(model) (Inductor, its default dynamic shapes)

Dynamo compiles a static graph at the first length and a symbolic one at the second; from the
third on, a backend that handles symbolic sizes compiles nothing new. Each way runs in its own
fresh process, with opara's compile cache off (a cache hit would hide the compile) and
Inductor's on-disk cache as it is. First call: from the call to its output. Steady: the median of
--iters calls after 3 warm-ups, at each length of --steady.

    python bench/new_shapes_bench.py --models small_bert bert_base --json new_shapes.json
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("opara", "opara-aten", "opara-static", "inductor")

_CHILD = r"""
import json, statistics, sys, time, warnings
sys.path[:0] = [{python!r}]
warnings.simplefilter("ignore")
import torch, transformers, opara
name, way, iters = sys.argv[1], sys.argv[2], int(sys.argv[5])
lengths, steady = json.loads(sys.argv[3]), json.loads(sys.argv[4])
small = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256, vocab_size=1000)
torch.manual_seed(0)
model = transformers.BertModel(transformers.BertConfig(**(small if name == "small_bert" else {{}}))).eval()
if way == "inductor":
    run = torch.compile(model)
else:
    options = {{"cache": False, **({{"kernels": "aten"}} if way == "opara-aten" else {{}})}}
    run = torch.compile(model, backend="opara", dynamic=False if way == "opara-static" else None, options=options)
def ids(length):
    return torch.randint(0, 1000, (1, length), generator=torch.Generator().manual_seed(length))
first, steady_ms = {{}}, {{}}
with torch.no_grad():
    for length in lengths:
        x = ids(length)
        start = time.perf_counter()
        run(x)
        first[length] = (time.perf_counter() - start) * 1e3
    for length in steady:
        x = ids(length)
        for _ in range(3):
            run(x)
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            run(x)
            times.append((time.perf_counter() - start) * 1e3)
        steady_ms[length] = statistics.median(times)
print("RESULT " + json.dumps({{"first_ms": first, "steady_ms": steady_ms}}))
"""


def measure(model: str, way: str, lengths: list[int], steady: list[int], iters: int) -> dict:
    script = _CHILD.format(python=str(ROOT / "python"))
    done = subprocess.run([sys.executable, "-c", script, model, way, json.dumps(lengths), json.dumps(steady),
                           str(iters)], capture_output=True, text=True, timeout=3600)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=["small_bert", "bert_base"], default=["small_bert"])
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--lengths", nargs="+", type=int, default=[8, 9, 10, 11, 12, 16, 24])
    parser.add_argument("--steady", nargs="+", type=int, default=[16, 24])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    rows = []
    print(f"{'model':11} {'way':13} " + " ".join(f"{f'L={n}':>8}" for n in args.lengths) + "   steady ms "
          + " ".join(f"L={n}" for n in args.steady))
    for model in args.models:
        for way in args.ways:
            result = measure(model, way, args.lengths, args.steady, args.iters)
            rows.append({"model": model, "way": way, **result})
            if "error" in result:
                print(f"{model:11} {way:13} FAILED: {result['error']}")
                continue
            first = " ".join(f"{result['first_ms'][str(n)]:8.0f}" for n in args.lengths)
            steady = " ".join(f"{result['steady_ms'][str(n)]:.2f}" for n in args.steady)
            print(f"{model:11} {way:13} {first}   {steady}", flush=True)
    later = [row for row in rows if "error" not in row and row["way"] != "opara-static"]
    for row in later:
        new = [row["first_ms"][str(n)] for n in args.lengths[2:]]
        print(f"{row['model']} {row['way']}: lengths after the first two, median first call "
              f"{statistics.median(new):.0f} ms, slowest {max(new):.0f} ms")
    print(f"first calls in ms; torch {__import__('torch').__version__}; opara's compile cache off")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
