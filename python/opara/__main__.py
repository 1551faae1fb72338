"""python -m opara: packages from the command line.

    python -m opara package MODEL --input-shape 1x3x224x224[,1x16] --out model.opara [--option key=value ...]
    python -m opara info model.opara

`package` compiles MODEL (a torch.export .pt2 file, or a TorchScript .pt with kernels=aten) for
inputs of those shapes (random float32 values: the package keeps them as its example inputs) and
writes a package (opara.package); `info` prints what a package was made for. The options are
opara.compile's, as text ("device=cuda", "kernels=aten", "max_streams=4").
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import torch

from ._package import package


def _shapes(text: str) -> list[list[int]]:
    try:
        return [[int(size) for size in shape.split("x")] for shape in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of shapes like 1x3x224x224,1x16") from None


def _option(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opara", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("package", help="compile a model file into a package")
    make.add_argument("model", help="a torch.export .pt2 file (or a TorchScript .pt, with kernels=aten)")
    make.add_argument("--input-shape", type=_shapes, required=True, help="the inputs' shapes: 1x3x224x224,1x16")
    make.add_argument("--out", required=True, help="the package to write")
    make.add_argument("--option", type=_option, action="append", default=[], metavar="KEY=VALUE",
                      help="an opara.compile option (repeatable)")
    make.add_argument("--seed", type=int, default=0, help="the example inputs' random seed")
    show = commands.add_parser("info", help="what a package was made for, as JSON")
    show.add_argument("package")
    args = parser.parse_args(argv)
    try:
        if args.command == "info":
            from ._library import load_library

            load_library()
            print(json.dumps(json.loads(torch.ops.opara.package_info(args.package)), indent=1))
            return 0
        generator = torch.Generator().manual_seed(args.seed)
        inputs = [torch.randn(shape, generator=generator) for shape in args.input_shape]
        written = package(args.model, inputs, args.out, **dict(args.option))
    except (RuntimeError, ValueError, TypeError, OSError) as error:
        print(f"python -m opara {args.command}: {error}", file=sys.stderr)
        return 1
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
