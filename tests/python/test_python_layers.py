"""scripts/check_layers.py checks the Python package's imports too (ctest's `layers` runs it): each
module imports only the modules below it, at any depth, so no circle comes back; and no function
is 80 lines long or more, docstrings aside. Here on the package as it is, and on a copy with the
imports a circle would need and a function too long."""

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import check_layers  # noqa: E402

pytestmark = pytest.mark.same_on_every_torch


def test_the_package_imports_only_downwards():
    assert check_layers.python_problems(ROOT) == []


def test_an_import_upwards_or_of_the_package_is_named(tmp_path):
    shutil.copytree(ROOT / "python" / "opara", tmp_path / "python" / "opara")
    package = tmp_path / "python" / "opara"
    with (package / "_regions.py").open("a") as regions:
        regions.write("\n\ndef _late():\n    from ._compile import compile\n    return compile\n")
    with (package / "_library.py").open("a") as library:
        library.write("\n\ndef _version():\n    from . import __version__\n    import opara._dynamo\n")
    (package / "_new.py").write_text("X = 1\n")
    long_body = "".join(f"    x{i} = {i}\n" for i in range(79))
    with (package / "_partition.py").open("a") as partition:
        # 79 lines with its definition, docstring aside: the most a function may have.
        partition.write(f'\n\ndef fits():\n    """A docstring\n    of two lines."""\n{long_body[long_body.index("    x1 "):]}')
        partition.write(f"\n\ndef too_long():\n    x = 0\n{long_body}")
    problems = check_layers.python_problems(tmp_path)
    assert any("_regions.py" in p and "imports _compile" in p for p in problems), problems
    assert any("_library.py" in p and "imports __init__" in p for p in problems), problems
    assert any("_library.py" in p and "imports _dynamo" in p for p in problems), problems
    assert any("_new.py" in p and "does not list" in p for p in problems), problems
    assert any("_partition.py" in p and "function too_long has 81 lines" in p for p in problems), problems
    assert len(problems) == 5, problems
