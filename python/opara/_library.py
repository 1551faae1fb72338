"""Finding and loading libopara_ext, the library that registers torch.classes.opara and torch.ops.opara."""

from __future__ import annotations

import os
from pathlib import Path

import torch

_LIBRARY_NAME = "libopara_ext.so"
_loaded: str | None = None


def _candidates() -> list[Path]:
    package = Path(__file__).resolve().parent
    found = []
    if os.environ.get("OPARA_LIBRARY"):
        found.append(Path(os.environ["OPARA_LIBRARY"]))
    found.append(package / "_lib" / _LIBRARY_NAME)  # installed by pip
    # A source checkout: python/opara/ next to the CMake build folder.
    checkout = package.parent.parent
    found.append(Path(os.environ.get("OPARA_BUILD", checkout / "build")) / "lib" / _LIBRARY_NAME)
    return found


def library_path() -> str:
    """The path of libopara_ext.so: $OPARA_LIBRARY, the installed package's copy, or a source
    checkout's build folder, in that order."""
    candidates = _candidates()
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    tried = "\n  ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"opara's extension library {_LIBRARY_NAME} was not found; tried:\n  {tried}\n"
        "Build it (scripts/run.sh, or pip install . in the checkout) "
        "or point OPARA_LIBRARY at it."
    )


def load_library() -> str:
    """Loads the extension once (torch.ops.load_library) and returns its path."""
    global _loaded
    if _loaded is None:
        path = library_path()
        torch.ops.load_library(path)
        _loaded = path
    return _loaded
