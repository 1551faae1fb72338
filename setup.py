"""The opara Python package: python/opara and the two libraries the CMake project builds
(libopara, and libopara_ext that registers torch.classes.opara and torch.ops.opara).

    pip install .

in a Python that has torch 2.11 to 2.15 (the project's venv has the pinned 2.11.0: scripts/setup.sh
makes it): the libraries link that Python's LibTorch, whatever pip's build isolation installs for
itself, and the package requires that very torch release, since LibTorch has no stable ABI between
releases. `--no-build-isolation` skips fetching setuptools into an isolated environment (offline).
The CMake build folder is the checkout's for that torch (build/ for the pinned one,
build-torch<release>/ for another, or $OPARA_BUILD) and ccache's, so a rebuild after scripts/run.sh
is quick.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def installing_python_environment() -> dict[str, str]:
    """The environment of the Python that runs pip, without what pip's build isolation adds: its
    PYTHONPATH and PYTHONNOUSERSITE hide that Python's site-packages, and with them its torch, which
    the libraries must link."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}


def installed_torch_release() -> str:
    """The installing Python's torch release ("2.15.0" for 2.15.0+cu132)."""
    result = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                            env=installing_python_environment(), capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"opara builds against the torch of the Python that installs it, and {sys.executable} cannot "
                 f"import torch:\n{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ''}\n"
                 "Install torch 2.11 to 2.15 there first (pip install torch==2.11.0), then install opara.")
    return result.stdout.strip().split("+", 1)[0]


TORCH_RELEASE = installed_torch_release()


class CMakeLibraries(Extension):
    def __init__(self) -> None:
        super().__init__("opara._lib.libopara_ext", sources=[])


class BuildWithCMake(build_ext):
    def build_extension(self, extension: Extension) -> None:
        # pip's build isolation hides the installing Python's site-packages through PYTHONPATH and
        # PYTHONNOUSERSITE; CMake must see that Python's torch, which the libraries link.
        env = installing_python_environment()
        env["OPARA_PYTHON"] = sys.executable
        env["OPARA_TORCH_VERSION"] = TORCH_RELEASE  # its own build folder (scripts/common.sh)
        result = subprocess.run(
            ["bash", str(ROOT / "scripts" / "build.sh"), "opara_ext"],
            env=env,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        build = Path(result.stdout.strip().splitlines()[-1])
        target = Path(self.get_ext_fullpath(extension.name)).parent
        target.mkdir(parents=True, exist_ok=True)
        # libopara_ext needs libopara by its SONAME (libopara.so.0.1); symlinks are copied as files.
        # opara_build.json says which torch they link (python/opara/_library.py checks it).
        libraries = [build / "lib" / "libopara_ext.so", build / "lib" / "opara_build.json"]
        libraries += [p for p in (build / "lib").glob("libopara.so.*") if re.fullmatch(r"libopara\.so\.\d+\.\d+", p.name)]
        for library in libraries:
            shutil.copy2(library, target / library.name)


setup(
    name="opara",
    version="0.1.0",
    description="Parallel multi-stream CUDA Graph inference for PyTorch models",
    packages=["opara"],
    package_dir={"": "python"},
    python_requires=">=3.10",
    # The torch it was built against, and no other: LibTorch has no stable ABI between releases.
    install_requires=[f"torch=={TORCH_RELEASE}"],
    # pip install ".[serve]": Ray Serve for examples/serve_ray.py.
    extras_require={"serve": ["ray[serve]==2.60.0"]},
    ext_modules=[CMakeLibraries()],
    cmdclass={"build_ext": BuildWithCMake},
    zip_safe=False,
    # torch.compile(model, backend="opara") finds the backend without an `import opara`.
    entry_points={"torch_dynamo_backends": ["opara = opara._dynamo:opara_backend"]},
    # setuptools' scratch space inside the CMake build folder (git ignores it), not a second build/;
    # one per torch, as the CMake build folders.
    options={"build": {"build_base": str(ROOT / "build" / "setuptools" / f"torch{TORCH_RELEASE}")}},
)
