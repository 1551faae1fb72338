"""The opara Python package: python/opara and the two libraries the CMake project builds
(libopara, and libopara_ext that registers torch.classes.opara and torch.ops.opara).

    pip install .

in a Python that has the pinned torch (the project's venv: scripts/setup.sh makes it): the
libraries link that Python's LibTorch, whatever pip's build isolation installs for itself.
`--no-build-isolation` skips fetching setuptools into an isolated environment (offline). The CMake
build folder is the checkout's (build/, or $OPARA_BUILD) and ccache's, so a rebuild after
scripts/run.sh is quick.
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


class CMakeLibraries(Extension):
    def __init__(self) -> None:
        super().__init__("opara._lib.libopara_ext", sources=[])


class BuildWithCMake(build_ext):
    def build_extension(self, extension: Extension) -> None:
        # pip's build isolation hides the installing Python's site-packages through PYTHONPATH and
        # PYTHONNOUSERSITE; CMake must see that Python's torch, which the libraries link.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
        env["OPARA_PYTHON"] = sys.executable
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
        libraries = [build / "lib" / "libopara_ext.so"]
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
    install_requires=["torch==2.11.0"],
    # pip install ".[serve]": Ray Serve for examples/serve_ray.py.
    extras_require={"serve": ["ray[serve]==2.60.0"]},
    ext_modules=[CMakeLibraries()],
    cmdclass={"build_ext": BuildWithCMake},
    zip_safe=False,
    # torch.compile(model, backend="opara") finds the backend without an `import opara`.
    entry_points={"torch_dynamo_backends": ["opara = opara._dynamo:opara_backend"]},
    # setuptools' scratch space inside the CMake build folder (git ignores it), not a second build/.
    options={"build": {"build_base": str(ROOT / "build" / "setuptools")}},
)
