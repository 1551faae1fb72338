#!/usr/bin/env python3
"""Checks that opara's shared libraries export none of the C++ standard library's code.

    check_exports.py NM LIBRARY...

In a C++ application libopara is in the global scope, and the unique objects of inline code
(function-local statics, guard variables) are shared process-wide whatever the load's flags: a
standard-library instantiation or object it exported could stand in for that of a library loaded
after it, compiled by another GCC (an AOTInductor region's wrapper is compiled where its package is
made). What may be exported: opara's own names and LibTorch's inline code (c10, at, torch, caffe2),
cmake/opara_exports.map, and the standard library's code instantiated over opara's own types (no
other library has it). Each symbol that is none of these is printed; the exit code is 1 when there
is one.
"""

import subprocess
import sys

ALLOWED = ("opara", "c10", "at", "torch", "caffe2")
PREFIXES = ("typeinfo name for ", "typeinfo for ", "vtable for ", "VTT for ", "guard variable for ",
            "non-virtual thunk to ", "virtual thunk to ")


def entity(demangled: str) -> str:
    """The qualified name a demangled symbol defines: past a return type, before its arguments."""
    for prefix in PREFIXES:
        if demangled.startswith(prefix):
            return demangled[len(prefix):]
    depth, start = 0, 0
    for k, c in enumerate(demangled):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0 and c == " ":
            start = k + 1
        elif depth == 0 and c == "(":
            break
    return demangled[start:]


def main(nm: str, libraries: list[str]) -> int:
    bad = 0
    for library in libraries:
        listing = subprocess.run([nm, "-D", "--defined-only", "-C", library], capture_output=True, text=True,
                                 check=True).stdout
        for line in listing.splitlines():
            parts = line.split(" ", 2)
            if len(parts) < 3 or parts[1] in ("A",):  # the version node's own absolute symbol
                continue
            name = entity(parts[2])
            if name.split("::", 1)[0] not in ALLOWED and "opara::" not in name:
                print(f"{library}: exports {parts[2]}")
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
