"""What every step of a call on the GPU machine reads: the folders, the settings from the
environment (OPARA_GPU_*), the binaries in use, and the runner that keeps time and result lines."""

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .runner import Runner

COLD_STEPS = ["tests", "headline", "compile", "regions", "llm", "serve", "profiles", "sanitizer", "pytest", "overflow", "trace",
              "half", "batch8", "downstream"]
# The full path's table: these models at batch 1 and 8, every mode.
TABLE_MODELS = ["googlenet", "inception_v3", "resnet50", "bert_base", "t5_small", "branchy"]
# The headline table (issue 21; the cold path): these models at batch 1, every mode.
HEADLINE_MODELS = ["googlenet", "inception_v3", "bert_base", "t5_small", "branchy"]
ALL_MODES = "eager,sequential,nimble,opara,opara-noreorder"
# What the GPU tests, the overflow runs and the half-precision runs read besides (NAME:DTYPE).
EXTRA_SPECS = ["resnet50", "vit", "chain", "inplace", "recurrent", "detect", "multihead_rnn", "decoder",
               "branchy:float16", "branchy:bfloat16", "googlenet:float16"]
# The GoogleTest GPU tests: the suites named *Cuda, the GPU halves of the others (OnTheGpu...) and
# the shared pool's.
GPU_FILTER = "*Cuda.*:*.OnTheGpu*:SharedPool.*"
# The Python GPU tests: these files, these names (the tests named for the GPU say cuda or on_the_gpu).
PYTEST_FILES = ["test_python_package.py", "test_bench_reports.py", "test_bench_profile.py", "test_bench_cli.py",
                "test_dynamo_backend.py", "test_graph_set.py", "test_model_state.py", "test_llm_decode.py",
                "test_decoder.py", "test_state_matrix.py", "test_input_layouts.py"]
PYTEST_SELECTION = "cuda or googlenet or cpu_by_name or on_the_gpu"

# Each step's own time limit, in seconds; none runs past the call's deadline either (runner.py).
# A step that reaches its limit is killed and its line reads "killed (time)".
LIMITS = {
    "tool": 30,  # nvidia-smi, ldd, cmake --version, dpkg -x, --gtest_list_tests
    "pip": 120,  # the carried transformers wheel into /tmp/opara-site
    "probe": 180,  # one python start importing torch, torchvision and transformers
    "export": 400,  # one model's export (all of them start at once, in the background)
    "run": 300,  # one opara-bench run (a model, its modes)
    "profile": 180,  # one CUPTI profile
    "trace": 120,
    "sanitizer": 150,  # one compute-sanitizer tool
    "pytest": 420,
    "compile": 540,  # Inductor compiles for a minute or more a model
    "llm": 480,  # LLM decode: Inductor (two modes) compiles a prefill and a decode graph per row
    "serve": 300,
    "configure": 180,
    "build": 540,
    "ctest": 540,
}


def int_env(name, default):
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


@dataclass
class GpuCheck:
    root: Path
    runner: Runner
    stage: str  # cold, all, build, test or bench
    dry_run: bool = field(default_factory=lambda: os.environ.get("OPARA_GPU_DRY_RUN", "0") == "1")
    python: str = field(default_factory=lambda: os.environ.get("OPARA_GPU_PYTHON") or shutil.which("python3")
                        or "python3")
    headline_models: list = field(default_factory=lambda: os.environ.get("OPARA_GPU_MODELS", "").split()
                                  or list(HEADLINE_MODELS))
    # Set but empty: no extra model (as ${OPARA_GPU_EXTRA_MODELS-...} did).
    extra_specs: list = field(default_factory=lambda: os.environ["OPARA_GPU_EXTRA_MODELS"].split()
                              if "OPARA_GPU_EXTRA_MODELS" in os.environ else list(EXTRA_SPECS))
    iters: list = field(default_factory=list)  # opara-bench's default on the full path (1000); cold: 200
    bench: Path | None = None  # the opara-bench in use
    tests_bin: Path | None = None
    ext: Path | None = None  # libopara_ext in use
    python_ready: bool = False

    @property
    def device(self):
        return "cpu" if self.dry_run else "cuda"

    @property
    def work(self):
        return self.root / ".gpu_work"

    @property
    def out(self):
        return self.runner.out

    @property
    def models(self):
        return self.work / "models"

    @property
    def profiles(self):
        return self.out / "profiles"

    @property
    def carry(self):
        return self.root / ".gpu_carry"

    @property
    def build(self):
        return self.work / "build"

    deps = Path("/tmp/opara-deps")
    site = Path("/tmp/opara-site")

    def env(self, **extra):
        """The environment of a command: this process's, plus extra (None removes a name)."""
        env = dict(os.environ)
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        return env

    def use_build(self, folder):
        """The binaries and the extension of a build (.gpu_carry or .gpu_work/build) from now on."""
        self.bench = folder / "bin/opara-bench"
        self.tests_bin = folder / "bin/opara_tests"
        self.ext = folder / "lib/libopara_ext.so"

    def say(self, text):
        print(text, flush=True)

    def print_tail(self, path, lines):
        try:
            text = Path(path).read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return
        for line in text[-lines:]:
            self.say(line)


def budget_from_env():
    """OPARA_GPU_BUDGET_S (480): no step starts after it; OPARA_GPU_HARD_S (570): none runs past it."""
    return int_env("OPARA_GPU_BUDGET_S", 480), int_env("OPARA_GPU_HARD_S", 570)
