"""What every step of a call on the GPU machine reads: the folders, the settings from the
environment (OPARA_GPU_*), the binaries in use, and the runner that keeps time and result lines."""

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .runner import Runner

# A task lent a GPU has one call of 600 s (scripts/README.md): the cold path's default is what is
# worth most, in that order: the GPU tests (C++ and Python, bounded), what users compare (eager,
# Inductor, opara), the paper's table, the CUPTI profiles. The other steps run only by name.
COLD_DEFAULT = ["tests", "compare", "paper", "profiles"]
COLD_STEPS = COLD_DEFAULT + ["headline", "profiled", "compile", "regions", "llm", "serve", "sanitizer", "pytest",
                             "overflow", "trace", "half", "batch8", "downstream"]
# The full path's table: these models at batch 1 and 8, every mode.
TABLE_MODELS = ["googlenet", "inception_v3", "resnet50", "bert_base", "t5_small", "branchy"]
# The headline models (issue 21): their CUPTI profiles (the cold path), and every mode at batch 1
# (the headline step, by name).
HEADLINE_MODELS = ["googlenet", "inception_v3", "bert_base", "t5_small", "branchy"]
ALL_MODES = "eager,sequential,nimble,opara,opara-noreorder"
# The paper's table: its modes on its models, at batch 1.
PAPER_MODELS = ["googlenet", "inception_v3", "bert_base", "unet"]  # unet: issue 46's diffusion workload, tiny
PAPER_MODES = "eager,sequential,nimble,opara"
# What users compare: torch.compile's backends on these models (bench/torch_compile_bench.py) and on
# the Llama-style decode step (bench/llm_decode_bench.py, its large size, batch 1).
COMPARE_MODELS = ["googlenet", "unet"]
COMPARE_BACKENDS = ["eager", "inductor", "inductor-best", "inductor-ro", "opara", "opara-inductor"]
# The backends whose compile a background process makes first, filling Inductor's on-disk caches
# (opara's ATen kernels have none: its first call in the timed process is a cold one).
WARMED_BACKENDS = ["inductor", "inductor-best", "inductor-ro", "opara-inductor"]
# What the GPU tests, the overflow runs and the half-precision runs read besides (NAME:DTYPE).
EXTRA_SPECS = ["resnet50", "vit", "chain", "inplace", "recurrent", "detect", "multihead_rnn", "decoder",
               "branchy:float16", "branchy:bfloat16", "googlenet:float16"]
# The GoogleTest GPU tests: the suites named *Cuda, the GPU halves of the others (OnTheGpu...) and
# the shared pool's.
GPU_FILTER = "*Cuda.*:*.OnTheGpu*:SharedPool.*"
# The Python GPU tests: these files, these names (the tests named for the GPU say cuda or on_the_gpu).
# First the one file no C++ test stands in for (kernels="inductor" on CUDA): a run stopped at the
# tests' bound loses the last files.
PYTEST_FILES = ["test_inductor_regions_cuda.py", "test_package.py", "test_compile_cache.py",
                "test_symbolic_shapes.py", "test_python_package.py", "test_dynamo_backend.py",
                "test_inductor_regions.py", "test_graph_set.py", "test_model_state.py", "test_llm_decode.py",
                "test_decoder.py", "test_state_matrix.py", "test_input_layouts.py", "test_bench_reports.py",
                "test_bench_profile.py", "test_bench_cli.py"]
# googlenet's CPU test spends the bounded step's time on the CPU: left out.
PYTEST_SELECTION = "(cuda or googlenet or cpu_by_name or on_the_gpu) and not for_the_cpu"

# Each step's own time limit, in seconds; none runs past the call's deadline either (runner.py).
# A step that reaches its limit is killed and its line reads "killed (time)".
LIMITS = {
    "tool": 30,  # nvidia-smi, ldd, cmake --version, dpkg -x, --gtest_list_tests
    "pip": 120,  # the carried transformers wheel into /tmp/opara-site
    "probe": 180,  # one python start importing torch, torchvision and transformers
    "export": 400,  # one model's export (all of them start at once, in the background)
    "load": 60,  # one python start: import opara, load the carried extension
    "warm": 240,  # one background compile of one backend, filling Inductor's caches
    "compare": 240,  # one timed process of the compare step (its compiles loaded from the caches)
    "run": 300,  # one opara-bench run (a model, its modes)
    "profile": 180,  # one CUPTI profile
    "trace": 120,
    "sanitizer": 150,  # one compute-sanitizer tool
    "pytest": 420,
    "backtrace": 120,  # one test that crashed its pytest worker, run again alone under cuda-gdb
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
    headline_models: list = field(default_factory=lambda: words_env("OPARA_GPU_MODELS", HEADLINE_MODELS))
    paper_models: list = field(default_factory=lambda: words_env("OPARA_GPU_PAPER_MODELS", PAPER_MODELS))
    # Set but empty: no extra model (as ${OPARA_GPU_EXTRA_MODELS-...} did).
    extra_specs: list = field(default_factory=lambda: os.environ["OPARA_GPU_EXTRA_MODELS"].split()
                              if "OPARA_GPU_EXTRA_MODELS" in os.environ else list(EXTRA_SPECS))
    iters: list = field(default_factory=list)  # opara-bench's default on the full path (1000); cold: 200
    bench: Path | None = None  # the opara-bench in use
    tests_bin: Path | None = None
    ext: Path | None = None  # libopara_ext in use
    python_ready: bool = False
    # Why opara's Python package cannot load the extension in use (the cold preflight's check), or
    # None: every Python step then fails at once, saying so, instead of running without it.
    package_error: str | None = None
    # taskset -c lists: the timing processes' cores, and the background work's (exports, compiles);
    # empty: no pinning (fewer than 8 cores, or no taskset).
    timing_cpus: str = ""
    background_cpus: str = ""

    def pin_cores(self):
        """Timed processes get cores of their own (launch-bound rows are sensitive to a busy CPU):
        OPARA_GPU_TIMING_CPUS (default 0-3) for them, the rest for the background work."""
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if len(cores) < 8 or not shutil.which("taskset"):
            return
        timing = os.environ.get("OPARA_GPU_TIMING_CPUS") or ",".join(map(str, cores[:4]))
        chosen = set(_cpu_list(timing))
        rest = [c for c in cores if c not in chosen]
        if chosen and rest:
            self.timing_cpus, self.background_cpus = timing, ",".join(map(str, rest))

    def timed(self, cmd):
        """A command that measures time: on the timing cores."""
        return ["taskset", "-c", self.timing_cpus, *cmd] if self.timing_cpus else list(cmd)

    def background(self, cmd, nice=0):
        """A command that runs beside others (a compile): off the timing cores, niced by `nice`."""
        prefix = ["nice", "-n", str(nice)] if nice and shutil.which("nice") else []
        return (["taskset", "-c", self.background_cpus] if self.background_cpus else []) + prefix + list(cmd)

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

    @property
    def inductor_cache(self):
        # Kept on a warm machine: a later call loads what this one compiled.
        return self.work / "inductor-cache"

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
    """OPARA_GPU_BUDGET_S (540): no step starts after it; OPARA_GPU_HARD_S (570): none runs past it
    (the wrapper's timeout sends SIGTERM 15 s later, SIGKILL 8 s after that: before the call's 600 s)."""
    return int_env("OPARA_GPU_BUDGET_S", 540), int_env("OPARA_GPU_HARD_S", 570)


def words_env(name, default):
    """A list from a space-separated variable; unset or blank: default."""
    return os.environ.get(name, "").split() or list(default)


def _cpu_list(text):
    """"0-3,8" -> [0, 1, 2, 3, 8]."""
    found = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        found += range(int(first), int(last or first) + 1)
    return found
