"""`pack`, on the CPU machine: the carried build (.gpu_carry/) and its manifest.

It builds opara, opara_ext, opara-bench and opara_tests (ccache) unless --no-build; unless
--stale-ok, refuses a build older than a C++ source or configured from another checkout (with it,
the manifest records that checkout's commit and sources, which the GPU machine's preflight compares
with the tree that travelled); copies the two binaries and two libraries stripped into .gpu_carry/,
with opara_build.json beside the libraries (python/opara/_library.py reads it there: the torch the
extension links) and manifest.env (the git commit, a hash of the C++ sources, the source folder,
the build type, and the torch the build linked: version, git commit, C++11 ABI); fetches .gpu_deps/
when it is missing; checks what travels stays under 60 MiB.
"""

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

# The files the carried binaries are built from (the same list here and there: no git there).
SOURCE_ROOTS = ["CMakeLists.txt", "cmake", "csrc", "include", "bench", "tests/CMakeLists.txt", "tests/cpp"]
SOURCE_SUFFIXES = (".cpp", ".h", ".hpp", ".cu", ".cuh", ".txt", ".cmake", ".in")
TRAVEL_LIMIT = 60 << 20  # the device takes 64 MiB at most
BUILD_LIMIT_S = 4 * 3600  # the first build on the 2-core CPU machine takes 20 to 40 minutes
TOOL_LIMIT_S = 120
# Written by the CMake build beside libopara_ext; python/opara/_library.py refuses to load the
# extension without it (_BUILD_INFO_NAME there).
BUILD_INFO = "opara_build.json"


class PackError(Exception):
    pass


def source_files(root):
    """The source files under SOURCE_ROOTS, relative to root, in byte order."""
    root = Path(root)
    found = []
    for top in SOURCE_ROOTS:
        path = root / top
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = [Path(d) / f for d, _, files in os.walk(path) for f in files]
        else:
            continue
        found += [p.relative_to(root).as_posix() for p in candidates
                  if p.name.endswith(SOURCE_SUFFIXES) and p.is_file()]
    return sorted(found, key=lambda p: p.encode())


def source_hash(root):
    """16 hex digits: the sha256 of the `sha256sum` lines of the source files (as the bash script
    made it, so that a manifest it wrote still compares)."""
    lines = "".join(f"{hashlib.sha256((Path(root) / p).read_bytes()).hexdigest()}  {p}\n" for p in source_files(root))
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


def read_manifest(path):
    """OPARA_PACK_KEY=value lines (shell-quoted: `source` reads them too) -> {KEY: value}."""
    manifest = {}
    for line in Path(path).read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith("OPARA_PACK_"):
            words = shlex.split(value)
            manifest[key.removeprefix("OPARA_PACK_")] = words[0] if words else ""
    return manifest


def write_manifest(path, manifest):
    Path(path).write_text("".join(f"OPARA_PACK_{k}={shlex.quote(str(v))}\n" for k, v in manifest.items()))


def _run(cmd, limit_s=TOOL_LIMIT_S, capture=True):
    """Runs a command in a group of its own, at most limit_s (then the group is killed); returns
    its stdout (capture) and raises PackError when it fails or overruns. The output goes through a
    file: a pipe held open by a child left behind would make reading it wait forever."""
    cmd = [str(c) for c in cmd]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out if capture else None,
                                stderr=err if capture else None, start_new_session=True)
        try:
            proc.wait(timeout=limit_s)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            raise PackError(f"{shlex.join(cmd)} was stopped after {limit_s} s at most") from None
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            why = err.read().decode(errors="replace").strip()[-2000:]
            raise PackError(f"{shlex.join(cmd)} exited {proc.returncode}: {why}")
        return out.read().decode(errors="replace")


def _cache_entry(cache, key):
    for line in cache.splitlines():
        if line.startswith(key + ":"):
            return line.partition("=")[2]
    return ""


def _tree_size(path):
    """du -sb: the apparent size of a folder, its folders included."""
    total = 0
    for folder, dirs, files in os.walk(path):
        total += os.lstat(folder).st_size
        for f in files:
            total += os.lstat(os.path.join(folder, f)).st_size
    return total


def _travelling_tree_size(root):
    """The tracked and untracked-not-ignored files, and a shared/ folder inside the checkout."""
    listed = _run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    total = 0
    for name in filter(None, listed.split("\0")):
        try:
            total += (root / name).stat().st_size
        except OSError:
            pass  # deleted, not yet committed
    if (root / "shared").is_dir():
        total += _tree_size(root / "shared")
    return total


def _refuse_another_torch(root):
    """The GPU image has the default pin's torch (requirements.txt): a build for the release
    OPARA_TORCH_VERSION names (scripts/common.sh) would be refused there."""
    pins = (root / "requirements.txt").read_text().splitlines()
    default = next((line.split("==", 1)[1] for line in pins if line.startswith("torch==")), None)
    asked = os.environ.get("OPARA_TORCH_VERSION")
    if asked and asked != default:
        raise PackError(f"OPARA_TORCH_VERSION={asked}: the GPU check carries a build for the GPU image's torch, the "
                        f"default pin ({default}, requirements.txt); pack without OPARA_TORCH_VERSION")


def pack(root, build_first=True, stale_ok=False):
    root = Path(root).resolve()
    _refuse_another_torch(root)
    build = Path(os.environ.get("OPARA_BUILD", root / "build"))
    carry = root / ".gpu_carry"
    started = time.monotonic()
    if build_first:
        # common.sh's opara_build: configures once, builds these targets with ninja and ccache.
        _run(["bash", "-c", 'source "$1/scripts/common.sh" && shift && opara_build "$@"', "opara_build", root,
              "opara", "opara_ext", "opara-bench", "opara_tests"], limit_s=BUILD_LIMIT_S, capture=False)
    if not (build / "CMakeCache.txt").is_file():
        raise PackError(f"no build in {build}: run scripts/build.sh (or drop --no-build)")
    built = time.monotonic()
    for f in ("bin/opara-bench", "bin/opara_tests", "lib/libopara.so", "lib/libopara_ext.so", f"lib/{BUILD_INFO}"):
        if not (build / f).exists():
            raise PackError(f"{build / f} is missing: build it (scripts/build.sh) first")
    cache = (build / "CMakeCache.txt").read_text(errors="replace")
    src = _cache_entry(cache, "CMAKE_HOME_DIRECTORY")
    build_python = _cache_entry(cache, "OPARA_PYTHON")
    build_type = _cache_entry(cache, "CMAKE_BUILD_TYPE")
    if not src or not Path(src).is_dir():
        raise PackError(f"{build} was configured from {src or 'an unknown folder'}, which is not here")
    # The checkout the binaries were built from: its commit and sources go into the manifest.
    sources_root = Path(src).resolve()
    if sources_root != root:
        if not stale_ok:
            raise PackError(f"{build} was configured from {src}, not from this checkout ({root}): its binaries may "
                            "not match the tree that travels (--stale-ok packs it; the GPU machine then compares "
                            "that checkout's C++ sources with this tree's)")
        print(f"gpu_check: note: {build} was built from {src}: the manifest records that checkout's sources",
              file=sys.stderr)
    if build_type != "Release":
        print(f"gpu_check: note: {build} is a {build_type} build; timings want Release", file=sys.stderr)
    # The sources must not be newer than the binaries (with --no-build nothing rebuilt them).
    built_at = (build / "bin/opara_tests").stat().st_mtime_ns
    newer = [p for p in source_files(sources_root) if (sources_root / p).stat().st_mtime_ns > built_at]
    if newer and not stale_ok:
        raise PackError(f"sources changed since {build}/bin/opara_tests was built ({', '.join(newer[:5])}): "
                        "build first, or pack with --stale-ok")
    shutil.rmtree(carry, ignore_errors=True)
    (carry / "bin").mkdir(parents=True)
    (carry / "lib").mkdir()
    for f in ("opara-bench", "opara_tests"):
        shutil.copy2(build / "bin" / f, carry / "bin" / f)
    # Under its soname (what the binaries and libopara_ext ask for); libopara_ext finds it by $ORIGIN.
    soname = ""
    for line in _run(["readelf", "-d", build / "lib/libopara.so"]).splitlines():
        if "Library soname: [" in line:
            soname = line.split("[", 1)[1].rstrip("]")
    shutil.copy2((build / "lib/libopara.so").resolve(), carry / "lib" / (soname or "libopara.so"))
    shutil.copy2(build / "lib/libopara_ext.so", carry / "lib/libopara_ext.so")
    unstripped = _tree_size(carry)
    files = sorted((carry / "bin").iterdir()) + sorted((carry / "lib").iterdir())
    shutil.copy2(build / "lib" / BUILD_INFO, carry / "lib" / BUILD_INFO)  # after the list: not stripped
    _run(["strip", "--strip-unneeded", *files])
    torch_version, torch_git, torch_abi = _run([build_python, "-c", TORCH_IDENTITY], limit_s=180).split()
    commit = _run(["git", "-C", sources_root, "rev-parse", "--short=12", "HEAD"]).strip()
    if _run(["git", "-C", sources_root, "status", "--porcelain", "--", *SOURCE_ROOTS]).strip():
        commit += "-dirty"
    sources = source_hash(sources_root)
    write_manifest(carry / "manifest.env", {
        "COMMIT": commit, "SOURCE_HASH": sources, "SOURCE_DIR": src, "BUILD_TYPE": build_type,
        "TORCH": torch_version, "TORCH_GIT": torch_git, "TORCH_ABI": torch_abi,
        "DATE": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "STALE": "yes" if newer else "no"})
    if not (root / ".gpu_deps/wheels").is_dir():
        _run([root / "scripts/fetch_gpu_deps.sh"], limit_s=900, capture=False)
    tree = _travelling_tree_size(root)
    carried = _tree_size(carry)
    deps = _tree_size(root / ".gpu_deps")
    total = tree + carried + deps
    now = time.monotonic()
    print(f"packed {carry} in {now - started:.0f} s ({built - started:.0f} s of it building): "
          f"commit {commit}, torch {torch_version}, sources {sources}")
    for f in [*files, carry / "lib" / BUILD_INFO]:
        print(f"  {f.stat().st_size:>11}  {f.relative_to(root)}")
    mib = 1 << 20
    print(f"sizes (MiB): .gpu_carry {carried / mib:.1f} ({unstripped / mib:.1f} unstripped), "
          f".gpu_deps {deps / mib:.1f}, "
          f"working tree {tree / mib:.1f}; travels {total / mib:.1f} of 64")
    if total >= TRAVEL_LIMIT:
        raise PackError("what would travel is over 60 MiB: the device refuses more than 64")
    print('the device call: run(command="scripts/gpu_check.sh cold", carry=[".gpu_carry", ".gpu_deps"], timeout_s=600)')


# The version, source commit and C++ ABI of the torch a python imports.
TORCH_IDENTITY = ("import torch; "
                  "print(torch.__version__, torch.version.git_version, int(torch._C._GLIBCXX_USE_CXX11_ABI))")
