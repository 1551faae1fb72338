"""Finding and loading libopara_ext, the library that registers torch.classes.opara and torch.ops.opara."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

__version__ = "0.1.0"  # the package's; opara.__version__
_LIBRARY_NAME = "libopara_ext.so"
# Written beside the libraries by the CMake build (and copied with them by pip): the torch they link.
_BUILD_INFO_NAME = "opara_build.json"
_loaded: str | None = None


def _release(version: str) -> str:
    """"2.15.0+cu132" -> "2.15.0": the local tag names the CUDA build, not another LibTorch ABI."""
    return version.split("+", 1)[0]


def _candidates() -> list[Path]:
    package = Path(__file__).resolve().parent
    found = []
    if os.environ.get("OPARA_LIBRARY"):
        found.append(Path(os.environ["OPARA_LIBRARY"]))
    found.append(package / "_lib" / _LIBRARY_NAME)  # installed by pip
    # A source checkout: python/opara/ next to the CMake build folders, build/ for the default torch
    # and build-torch<release>/ for another (scripts/common.sh).
    checkout = package.parent.parent
    if os.environ.get("OPARA_BUILD"):
        found.append(Path(os.environ["OPARA_BUILD"]) / "lib" / _LIBRARY_NAME)
    else:
        found.append(checkout / f"build-torch{_release(torch.__version__)}" / "lib" / _LIBRARY_NAME)
        found.append(checkout / "build" / "lib" / _LIBRARY_NAME)
    return found


def library_path() -> str:
    """The path of libopara_ext.so: $OPARA_LIBRARY, the installed package's copy, or a source
    checkout's build folder ($OPARA_BUILD, else build-torch<running release>/ or build/), in that order."""
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


def built_against(path: str | None = None) -> str:
    """The torch release the extension at `path` (default: library_path()) was built against."""
    library = Path(path or library_path())
    info = library.parent / _BUILD_INFO_NAME
    try:
        return str(json.loads(info.read_text())["torch"])
    except (OSError, ValueError, KeyError) as error:
        raise RuntimeError(
            f"{info} does not say which torch {library} was built against ({error}); build opara again "
            "(scripts/build.sh, or pip install . in the checkout)") from error


def version() -> dict[str, str]:
    """Which opara this is, the torch its library was built against and the torch running here,
    e.g. {"opara": "0.1.0", "torch_built": "2.15.0", "torch_running": "2.15.0+cu132"}."""
    return {"opara": __version__, "torch_built": built_against(), "torch_running": torch.__version__}


def _check_torch(path: str) -> None:
    built = built_against(path)
    if _release(built) != _release(torch.__version__):
        raise RuntimeError(
            f"opara's library {path} was built against torch {built}, but this Python runs torch "
            f"{torch.__version__}. LibTorch has no stable ABI between releases: install opara again in this "
            "environment (pip install . in the checkout), or build it for this torch "
            f"(OPARA_TORCH_VERSION={_release(torch.__version__)} scripts/build.sh) and point OPARA_BUILD or "
            "OPARA_LIBRARY at that build.")


def load_library() -> str:
    """Loads the extension once (torch.ops.load_library) and returns its path. Refuses, before
    loading it, a library built against another torch release than the one running."""
    global _loaded
    if _loaded is None:
        path = library_path()
        _check_torch(path)
        torch.ops.load_library(path)
        _loaded = path
    return _loaded
