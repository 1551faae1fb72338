#!/usr/bin/env python3
"""Checks that each layer of csrc/ includes only itself and the layers it uses, and that each
module of the Python package (python/opara/) imports only the modules below it.

    check_layers.py BUILD/layers.txt REPO

layers.txt is written by CMake's opara_layer() calls, one line per layer:
"name|folder|used,layers|public,headers". A layer may include its own headers, the headers of the
layers it uses and of theirs (link dependencies are transitive), and the public headers
(include/opara/) those layers own. Every violation is printed with its file and line; the exit
code is 1 when there is one.
"""

import ast
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# The Python package's modules, each with the modules it may import (at any depth: an import inside
# a function is an import too), lowest first: no circle, and the leaves stay leaves.
PYTHON_LAYERS = {
    "_library": set(),
    "_frontend": set(),
    "_inductor_compat": set(),
    "_partition": set(),
    "_symbolic_regions": set(),
    "_regions": {"_frontend", "_inductor_compat", "_partition", "_symbolic_regions"},
    "_lowering": {"_frontend", "_partition", "_regions"},
    "_package_file": {"_library", "_lowering"},
    "_cache": {"_frontend", "_library", "_lowering", "_package_file"},
    "_compile": {"_cache", "_frontend", "_inductor_compat", "_library", "_lowering"},
    "_dynamo": {"_cache", "_frontend", "_inductor_compat", "_library", "_lowering"},
    "_package": {"_compile", "_frontend", "_library", "_lowering", "_package_file"},
    "__init__": {"_compile", "_dynamo", "_library", "_package"},
    "__main__": {"_library", "_package"},
}


def package_modules_imported(node: ast.AST) -> list:
    """The package modules an import statement imports: `from ._x import y` and `import opara._x`
    import _x; `from . import y` imports y when y is a module, else the package (__init__)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names if alias.name == "opara" or alias.name.startswith("opara.")]
        return [name.removeprefix("opara").removeprefix(".") or "__init__" for name in names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        if node.module != "opara" and not (node.module or "").startswith("opara."):
            return []
        module = node.module.removeprefix("opara").removeprefix(".")
    else:
        module = node.module or ""
    if module:
        return [module]
    return [alias.name if alias.name in PYTHON_LAYERS else "__init__" for alias in node.names]


# The longest a function of the Python package may be, its docstring aside (the C++ house's rule too).
LONGEST_FUNCTION = 79


def body_lines(function: ast.AST) -> int:
    """A function's lines from its definition to its end, less its docstring's."""
    lines = function.end_lineno - function.lineno + 1
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def python_problems(repo: Path) -> list:
    """Every import of a package module that PYTHON_LAYERS does not allow, every module it does not
    list, and every function longer than LONGEST_FUNCTION lines, docstrings aside."""
    problems = []
    for source in sorted((repo / "python" / "opara").glob("*.py")):
        name = source.stem
        if name not in PYTHON_LAYERS:
            problems.append(f"{source.relative_to(repo)}: a module scripts/check_layers.py's PYTHON_LAYERS does not list")
            continue
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body_lines(node) > LONGEST_FUNCTION:
                problems.append(f"{source.relative_to(repo)}:{node.lineno}: function {node.name} has "
                                f"{body_lines(node)} lines (docstring aside); the most is {LONGEST_FUNCTION}: split it")
            for target in package_modules_imported(node):
                if target not in PYTHON_LAYERS[name]:
                    problems.append(f"{source.relative_to(repo)}:{node.lineno}: module {name} imports {target}, "
                                    f"which it may not (it may: {', '.join(sorted(PYTHON_LAYERS[name])) or 'none'})")
    return problems


def main() -> int:
    table, repo = Path(sys.argv[1]), Path(sys.argv[2])
    layers = {}
    for line in table.read_text().splitlines():
        if line.strip():
            name, folder, uses, headers = line.split("|")
            layers[name] = (folder, [u for u in uses.split(",") if u], [h for h in headers.split(",") if h])
    folder_of = {name: folder for name, (folder, _, _) in layers.items()}
    owner_of_header = {header: name for name, (_, _, headers) in layers.items() for header in headers}

    def reachable(name: str) -> set:
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(layers[current][1])
        return seen

    def layer_of_path(path: str):
        # The longest layer folder that holds `path` (runtime/cuda before runtime).
        best = None
        for name, folder in folder_of.items():
            if path.startswith(folder + "/") and (best is None or len(folder) > len(folder_of[best])):
                best = name
        return best

    problems = []
    for name, (folder, _, _) in layers.items():
        allowed = reachable(name)
        for source in sorted((repo / "csrc" / folder).glob("*")):
            if source.suffix not in (".h", ".cpp"):
                continue
            for number, text in enumerate(source.read_text().splitlines(), 1):
                match = INCLUDE.match(text)
                if not match:
                    continue
                included = match.group(1)
                if included.startswith("opara/"):
                    target = owner_of_header.get(included[len("opara/"):])
                    if target is None:
                        problems.append(f"{source.relative_to(repo)}:{number}: {included} is no public header a layer owns")
                        continue
                else:
                    target = layer_of_path(included)
                    if target is None:
                        problems.append(f"{source.relative_to(repo)}:{number}: {included} is in no layer")
                        continue
                if target not in allowed:
                    problems.append(
                        f"{source.relative_to(repo)}:{number}: layer {name} includes {included} of layer {target}, "
                        f"which it does not use (uses: {', '.join(sorted(allowed - {name})) or 'nothing'}); "
                        "add the dependency in CMakeLists.txt if it is no cycle, or move the code"
                    )
    # Public headers include only public headers of the layers their owner uses.
    for header, name in owner_of_header.items():
        allowed = reachable(name)
        path = repo / "include" / "opara" / header
        for number, text in enumerate(path.read_text().splitlines(), 1):
            match = INCLUDE.match(text)
            if not match:
                continue
            included = match.group(1)
            target = owner_of_header.get(included[len("opara/"):]) if included.startswith("opara/") else None
            if target is None or target not in allowed:
                problems.append(f"include/opara/{header}:{number}: public header of layer {name} includes {included}")
    unowned = {p.name for p in (repo / "include" / "opara").glob("*.h")} - set(owner_of_header)
    for header in sorted(unowned):
        problems.append(f"include/opara/{header}: no layer owns this public header (HEADERS in CMakeLists.txt)")
    problems += python_problems(repo)
    for problem in problems:
        print(problem)
    print(f"{len(layers)} layers and {len(PYTHON_LAYERS)} Python modules, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
