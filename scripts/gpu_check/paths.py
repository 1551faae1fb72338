"""The two ways a call on the GPU machine runs: the cold path (a build carried from the CPU
machine, checked by a preflight) and the full path (the build made there, ctest included), and
main(), which parses the call and writes the final report whatever happens."""

import os
import re
import shutil
import sys
import traceback
from pathlib import Path

from . import steps
from .context import (ALL_MODES, COLD_DEFAULT, COLD_STEPS, LIMITS, TABLE_MODELS, GpuCheck, budget_from_env,
                      int_env)
from .pack import BUILD_INFO, PackError, pack, read_manifest, source_hash
from .runner import FAILED, KILLED, OK, Runner, Stopped, install_signal_handlers

USAGE = f"""usage: scripts/gpu_check.sh pack [--no-build] [--stale-ok]      (here, the CPU machine)
       scripts/gpu_check.sh cold [{' '.join(COLD_STEPS)}]   (the GPU machine, .gpu_carry carried;
           default: {' '.join(COLD_DEFAULT)})
       scripts/gpu_check.sh [all|build|test|bench]            (the GPU machine, builds there)"""


class Abort(Exception):
    """A preflight that cannot go on: its line is noted and the call ends (exit 1)."""

    def __init__(self, name, status, detail):
        super().__init__(f"{name}: {status}: {detail}")
        self.name, self.status, self.detail = name, status, detail


def _fail(outcome):
    return KILLED if outcome.killed else FAILED


def _why(outcome):
    return f"killed after {outcome.seconds:.0f} s" if outcome.killed else f"exit {outcome.rc}"


# ---- what both paths need -------------------------------------------------------------------------
# One python start (torch and transformers take seconds to import): the versions, the torch build and
# folder for the cold path's checks (torch.txt), and no run without a visible GPU.
PROBE = """
import os, sys, torch, torchvision, transformers
print("python", sys.version.split()[0], "torch", torch.__version__, "torchvision", torchvision.__version__,
      "transformers", transformers.__version__)
with open(sys.argv[2], "w") as f:
    print(torch.__version__, torch.version.git_version, int(torch._C._GLIBCXX_USE_CXX11_ABI), file=f)
    print(os.path.dirname(torch.__file__), file=f)
if sys.argv[1] != "1":
    if not torch.cuda.is_available():
        sys.exit("gpu_check: torch sees no CUDA GPU here; the GPU tests would only skip")
    print("gpu", torch.cuda.get_device_name(0))
"""


def python_deps(g):
    """The carried transformers wheel (pinned; for bert_base and t5_small) into /tmp/opara-site, and
    the python probe. Once a call."""
    if g.python_ready:
        return
    r = g.runner
    if not shutil.which("nvcc"):
        os.environ["PATH"] += ":/usr/local/cuda/bin"  # nvcc, compute-sanitizer
    wheels = sorted((g.root / ".gpu_deps/wheels").glob("*.whl"))
    if wheels:
        outcome = r.run([g.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                         "--no-cache-dir", "--upgrade", "--target", g.site, *wheels], g.out / "preflight_pip.log",
                        LIMITS["pip"], step="preflight")
        if not outcome.ok:
            raise Abort("preflight", _fail(outcome),
                        f"pip install of the carried wheels: {_why(outcome)}; see preflight_pip.log")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(g.site), os.environ.get("PYTHONPATH")]))
    else:
        print("gpu_check: no .gpu_deps/wheels carried: the image's transformers exports bert_base and t5_small",
              file=sys.stderr)
    outcome = r.run([g.python, "-c", PROBE, "1" if g.dry_run else "0", g.work / "torch.txt"],
                    g.out / "preflight_python.log", LIMITS["probe"], step="preflight")
    g.print_tail(outcome.log, 5)
    if not outcome.ok:
        raise Abort("preflight", _fail(outcome), f"{g.python}: {_why(outcome)}: {outcome.tail()}")
    g.python_ready = True


# opara's Python package from this tree, loading the extension in use (OPARA_LIBRARY), as the
# benchmarks and the Python tests load it: with the library paths the steps get.
LOAD_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import opara
path = opara.load_library()
print("opara", opara.version(), "loaded", path)
"""


def package_check(g):
    """Whether opara's Python package loads the extension in use. A package that cannot (a file
    the pack left behind, a library it misses) makes every Python step FAILED with the reason,
    not a step that passes without it: its own line says why, once."""
    name = "python package (import opara, load the extension)"
    outcome = g.runner.run([g.python, "-c", LOAD_PROBE, g.root / "python"], g.out / "preflight_opara.log",
                           LIMITS["load"], env=g.env(OPARA_LIBRARY=g.ext), step=name)
    g.print_tail(outcome.log, 1)
    if outcome.ok:
        g.runner.note(name, OK, outcome.tail())
        return
    lines = [line for line in outcome.text().splitlines() if line.strip()]
    why = (lines or [_why(outcome)])[-1]
    g.package_error = f"opara's Python package cannot load {g.ext}: {why} (see preflight_opara.log)"
    g.runner.note(name, _fail(outcome), g.package_error)


def final_report(g, stopped):
    if not stopped:
        text, outcome = g.runner.output(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                        LIMITS["tool"]) if shutil.which("nvidia-smi") else ("", None)
        g.say(text.strip() if outcome and outcome.ok else "no nvidia-smi")
    g.runner.finish(f"stopped by {stopped}" if stopped else "finished")
    g.say(g.runner.summary().rstrip())


# ---- the cold path --------------------------------------------------------------------------------
def cold_preflight(g, manifest):
    """The carried build: same torch as here, same C++ sources as this tree, every library it needs
    found, the CPU machine's source folder reachable. Returns why it is refused, or None."""
    m = manifest
    g.say(f"carried build: commit {m.get('COMMIT')}, {m.get('BUILD_TYPE')}, torch {m.get('TORCH')}, "
          f"packed {m.get('DATE')}")
    python_deps(g)
    here, torch_dir = (g.work / "torch.txt").read_text().splitlines()[:2]
    here_torch, here_git, here_abi = here.split()
    if (here_torch, here_git, here_abi) != (m.get("TORCH"), m.get("TORCH_GIT"), m.get("TORCH_ABI")):
        print(f"gpu_check: the carried build links torch {m.get('TORCH')} ({m.get('TORCH_GIT')}, C++11 ABI "
              f"{m.get('TORCH_ABI')}), this machine's python has torch {here_torch} ({here_git}, C++11 ABI "
              f"{here_abi}).", file=sys.stderr)
        if os.environ.get("OPARA_GPU_ALLOW_TORCH_MISMATCH", "0") != "1":
            return ("another torch (to carry a build again: pin this machine's torch in requirements.txt, set up, "
                    "pack; OPARA_GPU_ALLOW_TORCH_MISMATCH=1 runs it anyway)")
    sources = source_hash(g.root)
    if sources != m.get("SOURCE_HASH"):
        if os.environ.get("OPARA_GPU_ALLOW_STALE", "0") != "1":
            return (f"the C++ sources here (hash {sources}) are not those it was made from ({m.get('SOURCE_HASH')}): "
                    "repack (scripts/gpu_check.sh pack) after the last edit (OPARA_GPU_ALLOW_STALE=1 runs it anyway)")
        print("gpu_check: the C++ sources changed since packing; running the carried build anyway", file=sys.stderr)
    if m.get("STALE", "no") != "no":
        print("gpu_check: note: packed with --stale-ok (sources newer than the build)", file=sys.stderr)
    # The RUNPATHs name the CPU machine's venv: LibTorch and the CUDA libraries come from this python's torch.
    site = Path(torch_dir).parent
    dirs = [site / "nvidia/cu13/lib", *sorted(site.glob("nvidia/*/lib")), Path("/usr/local/cuda/lib64"),
            Path("/usr/local/cuda/lib"), Path("/usr/local/cuda/extras/CUPTI/lib64")]
    paths = [str(g.carry / "lib"), f"{torch_dir}/lib", *[str(d) for d in dirs if d.is_dir()]]
    os.environ["LD_LIBRARY_PATH"] = ":".join(filter(None, [*paths, os.environ.get("LD_LIBRARY_PATH")]))
    binaries = sorted((g.carry / "bin").iterdir()) + sorted((g.carry / "lib").glob("*.so*"))
    text, outcome = g.runner.output(["ldd", *binaries], LIMITS["tool"])
    if outcome.killed:
        raise Abort("preflight", KILLED, f"ldd: {_why(outcome)}")
    missing = sorted({line.strip() for line in text.splitlines() if "not found" in line})
    if missing:
        return f"it misses libraries here: {'; '.join(missing)}"
    text, _ = g.runner.output(["ldd", g.bench], LIMITS["tool"])
    for line in text.splitlines():
        if re.search(r"lib(opara|torch_cuda|c10_cuda|cudart|cupti)\.", line):
            g.say("  " + line.strip())
    # Compiled into opara_tests: OPARA_TEST_DATA_DIR=<that source folder>/tests/data. Make it this tree.
    src = Path(m.get("SOURCE_DIR", str(g.root)))
    if src != g.root:
        linked = False
        if not src.exists() and not src.is_symlink():
            try:
                src.parent.mkdir(parents=True, exist_ok=True)
                src.symlink_to(g.root)
                linked = True
                g.say(f"linked {src} -> {g.root} (the test binary's compiled-in data folder)")
            except OSError:
                pass
        if not linked and (not src.exists() or src.resolve() != g.root.resolve()):
            print(f"gpu_check: note: {src} is not this checkout: tests that read fixtures read {src}/tests/data",
                  file=sys.stderr)
    return None


def refuse(g, reason, saved_library_path):
    """Not running the carried build: unless OPARA_GPU_FALLBACK=0, the call goes on as the full path
    (build here, then every stage) with what is left of its time, so that it still brings something back."""
    print(f"gpu_check: refusing to run the carried build: {reason}", file=sys.stderr)
    if os.environ.get("OPARA_GPU_FALLBACK", "1") != "1":
        g.runner.note("preflight", FAILED, f"carried build refused: {reason}")
        return 1
    g.runner.note("preflight", FAILED, f"carried build refused: {reason}; the full path ran instead")
    print(f"gpu_check: building here instead (scripts/gpu_check.sh all, the full path) after {g.runner.seconds()} s",
          file=sys.stderr)
    # The carried libraries must not shadow the ones the full path builds.
    if saved_library_path is None:
        os.environ.pop("LD_LIBRARY_PATH", None)
    else:
        os.environ["LD_LIBRARY_PATH"] = saved_library_path
    g.stage = "all"
    g.runner.goal_models = list(TABLE_MODELS)
    g.runner.title = g.runner.title.replace(" cold", " all (the full path, the carried build refused)")
    return full(g, "all")


def cold(g, wanted):
    """The cold path: the carried build, the steps wanted (COLD_STEPS' order), then the report."""
    r = g.runner
    manifest = g.carry / "manifest.env"
    if not manifest.is_file():
        raise Abort("preflight", FAILED, "no .gpu_carry/manifest.env: run 'scripts/gpu_check.sh pack' on the CPU "
                    "machine and carry .gpu_carry")
    g.use_build(g.carry)
    lacking = [p.name for p in (g.bench, g.tests_bin, g.ext, g.ext.with_name(BUILD_INFO)) if not p.is_file()]
    if lacking:
        raise Abort("preflight", FAILED, f".gpu_carry lacks {', '.join(lacking)}: pack again")
    steps.fresh_results_for(g, g.bench)
    saved_library_path = os.environ.get("LD_LIBRARY_PATH")
    m = read_manifest(manifest)
    reason = cold_preflight(g, m)
    if reason:
        return refuse(g, reason, saved_library_path)
    r.note("preflight", OK, f"carried build {m.get('COMMIT')}, torch {m.get('TORCH')}, sources {m.get('SOURCE_HASH')}")
    # Every model at once, in the background, while the GPU tests that need none run; the compare
    # step's compiles too (niced, off the timing cores), filling Inductor's caches for its timing.
    exports = steps.Exports(g, 1, g.headline_models + g.paper_models + g.extra_specs, "export the models")
    if {"tests", "compare", "compile", "regions", "llm", "serve", "pytest"} & wanted:
        package_check(g)
    g.iters = ["--iters", "2", "--warmup", "1"] if g.dry_run else ["--iters", str(int_env("OPARA_GPU_ITERS", 200))]
    g.pin_cores()
    g.say(f"preflight done after {r.seconds()} s" + (f"; timing on cores {g.timing_cpus}, background work on "
                                                      f"{g.background_cpus}" if g.timing_cpus else ""))
    warmers = steps.Warmers(g, steps.compare_jobs(g)) if "compare" in wanted else None
    if "tests" in wanted:
        # Bounded, so that no crash or hang eats the call: what users compare comes next.
        steps.gpu_tests(g, r.elapsed() + int_env("OPARA_GPU_TESTS_S", 240), exports, with_pytest=True)
    exports.wait()
    if warmers:
        steps.compare(g, "cold compare", warmers)
    if "paper" in wanted:
        steps.paper(g, "cold paper")
    if "profiles" in wanted:
        steps.profiles(g, "cold profiles", g.headline_models)
    # ---- by name only (a call of a session that has device time left) ----
    if "headline" in wanted:
        steps.headline(g, "cold headline")
    if "profiled" in wanted:
        steps.profiles(g, "cold profiled", g.headline_models)
        # opara again, with the demands measured (the headline's come from the static estimate).
        steps.runs(g, "cold profiled", 1, "sequential,nimble,opara", "_profiled", 1, g.headline_models)
    if "compile" in wanted:
        steps.compile_(g, "cold compile")
    if "regions" in wanted:
        steps.regions(g, "cold regions")
    if "llm" in wanted:
        steps.llm_decode(g, "cold llm")
    if "serve" in wanted:
        steps.serve(g, "cold serve")
    if "sanitizer" in wanted:
        steps.sanitizer(g, "cold sanitizer")
    if "pytest" in wanted and "tests" not in wanted:  # else it ran beside the GPU tests
        steps.pytest(g, "cold pytest")
    if "overflow" in wanted:
        steps.overflow(g, "cold overflow")
    if "trace" in wanted:
        steps.trace(g, "cold trace")
    if "half" in wanted:
        steps.half(g, "cold half")
    if "batch8" in wanted and r.in_time("the batch-8 table", "cold batch8", 60):
        if steps.Exports(g, 8, g.headline_models, "export at batch 8").wait():
            steps.runs(g, "cold batch8", 8, ALL_MODES, "", 0, g.headline_models)
    # The downstream example (an installed package, built against) needs the full build: rarely in time.
    name = "downstream (ctest -R downstream)"
    if "downstream" in wanted and r.in_time(name, "cold downstream", 300):
        if full_build(g):
            outcome = r.run(["ctest", "--test-dir", g.build, "--output-on-failure", "--timeout", "300", "-R",
                             "downstream"], g.out / "ctest_downstream.log", LIMITS["ctest"], step=name)
            r.note_outcome(name, outcome, "ctest_downstream.log", hint="cold downstream")
        else:
            r.note(name, FAILED, "the build failed; see build.log or configure.log")
    return 0


# ---- the full path: build here --------------------------------------------------------------------
def full_preflight(g):
    """The carried .debs into /tmp/opara-deps, the python, and what this machine has, in one place,
    so that a failure later can be read against it."""
    r = g.runner
    debs = sorted((g.root / ".gpu_deps/debs").glob("*.deb"))
    if not debs:
        raise Abort("preflight", FAILED,
                    "no .gpu_deps/debs carried: run scripts/fetch_gpu_deps.sh here and carry .gpu_deps")
    g.deps.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        outcome = r.run(["dpkg", "-x", deb, g.deps], g.out / "preflight_dpkg.log", LIMITS["tool"], step="preflight")
        if not outcome.ok:
            raise Abort("preflight", _fail(outcome), f"dpkg -x {deb.name}: {_why(outcome)}; see preflight_dpkg.log")
    python_deps(g)
    versions = []
    for cmd, pick in ((["cmake", "--version"], 0), (["g++", "--version"], 0), (["nvcc", "--version"], -1)):
        text, outcome = r.output(cmd, LIMITS["tool"])
        lines = text.splitlines()
        versions.append(lines[pick] if outcome.ok and lines else f"{cmd[0]}: {_why(outcome)}")
    g.say("; ".join(versions))
    cupti = sorted(Path("/usr/local/cuda/extras/CUPTI/lib64").glob("libcupti.so*")) + sorted(
        Path("/usr/local/cuda").glob("lib*/libcupti.so*"))
    for path in cupti[:2]:
        g.say(str(path))


def _show_errors(log):
    """The first three errors of a build log with their context, else its last 30 lines."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    hits = [i for i, line in enumerate(lines) if re.search("error|FAILED", line)][:3]
    shown = sorted({j for i in hits for j in range(max(0, i - 2), min(len(lines), i + 13))}) or range(
        max(0, len(lines) - 30), len(lines))
    for j in shown:
        print(lines[j], flush=True)


def full_build(g):
    """Configures and builds the whole project in .gpu_work/build; notes the build's line."""
    r = g.runner
    if not (g.deps / "usr").is_dir():
        try:
            full_preflight(g)
        except Abort as abort:
            r.note("build", abort.status, f"preflight: {abort.detail}")
            return False
    outcome = r.run(["cmake", "-S", g.root, "-B", g.build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                     f"-DOPARA_PYTHON={g.python}", f"-DCMAKE_PREFIX_PATH={g.deps}/usr",
                     f"-DOPARA_TEST_MODELS={g.models}"], g.work / "configure.log", LIMITS["configure"], step="build")
    if not outcome.ok:
        g.print_tail(outcome.log, 30)
        shutil.copy(outcome.log, g.out)
        r.note("build", _fail(outcome), f"configure: {_why(outcome)}; see configure.log")
        return False
    outcome = r.run(["cmake", "--build", g.build, "-j", os.cpu_count() or 1], g.work / "build.log", LIMITS["build"],
                    step="build")
    if not outcome.ok:
        _show_errors(outcome.log)
        shutil.copy(outcome.log, g.out)
        r.note("build", _fail(outcome), f"{_why(outcome)}; see build.log")
        return False
    r.note("build", OK, f"built after {r.seconds()} s")
    return True


def _ctest_count(outcome):
    """ctest's "N% tests passed, M tests failed out of T" line."""
    return ([line for line in outcome.text().splitlines() if "tests passed" in line] or [""])[-1]


def full(g, stage):
    """Builds there (the library, the tests, opara-bench and the extension) while the models
    export, then the stage's steps. Every stage starts here, so that each can run alone on a
    fresh machine; the build is a no-op when up to date, and a fix made between two calls is what
    gets tested."""
    r = g.runner
    full_preflight(g)
    # The CPU-overflow models are one-image models: batch 1 only. Half precision: branchy for the
    # GPU tests' tolerances, googlenet for one --dtype float16 run.
    models = ["googlenet", "inception_v3", "resnet50", "bert_base", "t5_small", "branchy", "inplace", "recurrent",
              "chain", "detect", "multihead_rnn", "decoder", "branchy:float16", "googlenet:float16", "branchy:bfloat16"]
    exports = steps.Exports(g, 1, models, "export the models")
    if not full_build(g):
        exports.wait()  # no half-written model left for the next call to take as done
        return 1
    g.use_build(g.build)
    steps.fresh_results_for(g, g.bench)
    if not exports.wait():
        return 1
    if stage == "build":
        return 0

    def wants(name):
        return stage in ("all", name)

    if wants("test"):
        # The GPU tests (CompiledModelCuda: every model and mode allclose to eager, 64 streams, host
        # steps, 1,000 replays) and the eager CUDA reference. The downstream example, built against the
        # installed package, runs on the GPU too.
        steps.command_step(g, "GPU ctest", "test", 0,
                           ["ctest", "--test-dir", g.build, "--output-on-failure", "--timeout", "300", "-R",
                            "Cuda|WrittenInputs|MatchesForward|RandomOrders|downstream"], g.out / "ctest.log",
                           LIMITS["ctest"], detail=_ctest_count, tail=5)
    if wants("test"):
        steps.pytest(g, "test")
    if wants("bench"):
        steps.profiles(g, "bench", ["googlenet", "inception_v3", "bert_base", "detect", "multihead_rnn"])
        # At batch 1 a profiled model's opara mode takes its demands from the profile.
        steps.runs(g, "bench", 1, ALL_MODES, "", 2, TABLE_MODELS)
        steps.compile_(g, "bench")
        steps.regions(g, "bench")
        steps.llm_decode(g, "bench")
        steps.serve(g, "bench")
        if r.in_time("exporting the models at batch 8", "bench"):
            if steps.Exports(g, 8, TABLE_MODELS, "export at batch 8").wait():
                steps.runs(g, "bench", 8, ALL_MODES, "", 0, TABLE_MODELS)
        steps.half(g, "bench")
        steps.overflow(g, "bench")
        steps.trace(g, "bench")
    if wants("test"):
        steps.sanitizer(g, "test")
    return 0


# ---- the call -------------------------------------------------------------------------------------
def usage():
    print(USAGE, file=sys.stderr)
    return 2


def main(argv, root):
    sys.stdout.reconfigure(line_buffering=True)
    stage = argv[0] if argv else "all"
    rest = argv[1:]
    if stage == "pack":
        if any(a not in ("--no-build", "--stale-ok") for a in rest):
            return usage()
        try:
            pack(root, build_first="--no-build" not in rest, stale_ok="--stale-ok" in rest)
        except PackError as error:
            print(f"gpu_check: {error}", file=sys.stderr)
            return 1
        return 0
    if stage == "cold":
        if any(step not in COLD_STEPS for step in rest):
            return usage()
        wanted = set(rest or COLD_DEFAULT)
    elif stage in ("all", "build", "test", "bench"):
        if rest:
            return usage()
    else:
        return usage()

    os.environ["PYTHONUNBUFFERED"] = "1"
    budget, hard = budget_from_env()
    dry = os.environ.get("OPARA_GPU_DRY_RUN", "0") == "1"
    title = f"gpu_check {stage}" + (" (dry run, CPU)" if dry else "")
    runner = Runner(root / ".gpu_work/out", os.environ.get("OUT") or None, budget, hard, title=title)
    runner.hint_order = COLD_STEPS
    g = GpuCheck(root, runner, stage)
    # The goals are checked on the models of the path's table.
    runner.goal_models = list(dict.fromkeys(g.paper_models + g.headline_models)) if stage == "cold" else list(
        TABLE_MODELS)
    g.models.mkdir(parents=True, exist_ok=True)
    os.environ["OPARA_MODELS"] = str(g.models)
    os.environ["OPARA_PYTHON"] = g.python
    # As scripts/common.sh sets them, for a build there when ccache is found.
    os.environ.setdefault("CCACHE_DIR", str(Path.home() / ".cache/opara/ccache"))
    os.environ.setdefault("CCACHE_MAXSIZE", "5G")
    os.environ.setdefault("CCACHE_BASEDIR", str(root))
    install_signal_handlers()
    code, stopped = 1, None
    runner.publish(logs=False)  # an earlier call's summary is replaced at once
    try:
        code = cold(g, wanted) if stage == "cold" else full(g, stage)
    except Abort as abort:
        runner.note(abort.name, abort.status, abort.detail)
    except Stopped as stop:
        stopped = stop.signame
        code = 124
        runner.kill_all()
        runner.note(runner.running or "the call", KILLED, f"stopped by {stop.signame} after {runner.seconds()} s "
                    "(the wrapper's timeout, past OPARA_GPU_HARD_S)")
    except Exception as error:  # a bug here: the results so far still come back, with the reason
        traceback.print_exc()
        runner.note(runner.running or "the call", FAILED, f"gpu_check stopped on {error!r} (a bug in gpu_check)")
    finally:
        runner.kill_all()
    final_report(g, stopped)
    return code
