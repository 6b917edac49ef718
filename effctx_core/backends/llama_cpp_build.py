"""effctx's own build of llama.cpp: the tree that llama-cpp-python's sdist vendors, built
once with ggml's RPC backend and llama-server, into effctx's cache folder.

One build serves everything llama.cpp does in effctx, all from the same llama.cpp commit as
the Python binding, so the binding's C declarations match the library exactly and client,
workers and server speak the same RPC protocol by construction:
- the shared libraries every llama.cpp cell, baseline and control loads, in effctx's
  process and in the RPC host: llama-cpp-python is installed without a library of its own
  (`CMAKE_ARGS=-DLLAMA_BUILD=OFF`, make setup) and reads this one through
  LLAMA_CPP_LIB_PATH (backends/gguf/binding.py sets it before `llama_cpp` is imported);
- `effctx worker`, which serves this machine's CPU from `libggml-rpc.so` with no binary;
- `llama-server`, for the llama-server cell.

No PyPI wheel carries any of it for this platform (llama-cpp-python has no binary wheel,
and llama-server is sdist-only), so the build is the only way; it takes about 5-7 minutes
on 2 cores and is done once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from effctx_core.atomic import atomic_write_bytes
from effctx_core.errors import BackendUnavailableError, EffctxError
from effctx_core.models import cache_dir
from effctx_core.temp_files import create_temp_dir, sweep_dead_temps

ProgressFn = Callable[[str, int, int], None]

# The binding this build must match: the same llama.cpp commit, so the same C API.
BINDING = "llama-cpp-python"
# The UI flags keep llama-server's build from fetching web assets (offline here).
# AMX: llama.cpp builds for the CPU it compiles on (-march=native), which turns on the AMX
# tile instructions wherever the CPU lists them, but under some hypervisors they fault
# (ldtilecfg raises a general protection fault at the first matrix multiply: every prefill
# segfaulted). An explicit -mno-amx-* wins over -march=native whatever the order; AVX-512
# stays on. Models of effctx's size gain nothing measurable from AMX.
_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
    f"-DCMAKE_C_FLAGS={_NO_AMX}", f"-DCMAKE_CXX_FLAGS={_NO_AMX}",
)
# In two stages, each resumable: the libraries (libllama, ggml with its CPU and RPC
# backends) that every llama.cpp cell loads, about a quarter of the compile; then
# llama-server (its common library, HTTP server and multimodal helper are the rest).
LIBRARIES = ("llama",)
TARGETS = (*LIBRARIES, "llama-server")
# llama-cpp-python reads this once, when `llama_cpp` is first imported: the folder its
# libllama.so is loaded from (which finds the ggml libraries beside it).
LIB_PATH_ENV = "LLAMA_CPP_LIB_PATH"
HOW_TO_BUILD = "run `make llama-cpp` (or `effctx runtime build`), once: about 5 minutes on 2 cores"
_STAMP = "build.json"
_COMMIT = "EFFCTX_COMMIT"
_NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\]")


class BuildMissingError(BackendUnavailableError):
    """effctx's llama.cpp build is not there (or not finished)."""


@dataclass(frozen=True)
class LlamaCppBuild:
    root: Path
    binding_version: str
    commit: str
    seconds: float
    targets: tuple[str, ...] = TARGETS

    @property
    def has_server(self) -> bool:
        return "llama-server" in self.targets and self.server_binary.exists()

    @property
    def bin_dir(self) -> Path:
        return self.root / "build" / "bin"

    @property
    def server_binary(self) -> Path:
        return self.bin_dir / "llama-server"

    @property
    def rpc_library(self) -> Path:
        return self.bin_dir / "libggml-rpc.so"

    @property
    def ggml_library(self) -> Path:
        # The file libllama.so links: loading libggml.so instead would map a second copy of
        # ggml whose backend registry llama.cpp never reads.
        return self.bin_dir / "libggml.so.0"


def binding_version() -> str:
    return metadata.version(BINDING)


def build_root(version: str | None = None) -> Path:
    return cache_dir() / f"llama.cpp-{version or binding_version()}"


def _build_at(root: Path, server: bool) -> LlamaCppBuild | None:
    """The build in `root` if it is finished for the installed binding: its libraries, and
    llama-server too when `server`."""
    try:
        stamp = json.loads((root / _STAMP).read_text())
        targets = stamp.get("targets", list(TARGETS))
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            return None
        build = LlamaCppBuild(root, str(stamp["binding_version"]), str(stamp["commit"]), float(stamp["seconds"]),
                              tuple(targets))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # no stamp, or one this code did not write: not a finished build
    needed = (build.rpc_library, build.ggml_library, build.bin_dir / "libllama.so")
    if build.binding_version != binding_version() or not all(p.exists() for p in needed):
        return None
    if server and not build.has_server:
        return None
    return build


def find_build(server: bool = True) -> LlamaCppBuild | None:
    """The finished build for the installed binding (with llama-server unless `server` is
    False: the libraries alone), or None."""
    return _build_at(build_root(), server)


def library_build() -> LlamaCppBuild:
    """The build this process loads llama.cpp from: the one LLAMA_CPP_LIB_PATH names when
    that is a finished effctx build for this binding (a process effctx started, such as the
    RPC host or a command a test runs with a cache folder of its own, inherits its parent's),
    else the one in the cache folder. Any other LLAMA_CPP_LIB_PATH is not used: a library
    of another llama.cpp commit would not match the binding's C declarations."""
    named = os.environ.get(LIB_PATH_ENV)
    if named:
        bin_dir = Path(named)
        inherited = _build_at(bin_dir.parent.parent, server=False) if bin_dir.parts[-2:] == ("build", "bin") else None
        if inherited is not None:
            return inherited
    found = find_build(server=False)
    if found is None:
        raise BuildMissingError(f"effctx loads llama.cpp from its own build, which is not there "
                                f"(llama-cpp-python {binding_version()}): {HOW_TO_BUILD}")
    return found


def require_build(what: str) -> LlamaCppBuild:
    found = find_build()
    if found is None:
        raise BuildMissingError(f"{what} needs effctx's llama.cpp build with RPC and llama-server, which is not there "
                                f"({HOW_TO_BUILD})")
    return found


def _run(cmd: list[str], log: Path, what: str, progress: ProgressFn | None = None, cwd: Path | None = None) -> None:
    """Run one step into the log; `progress` hears its start, ninja's steps and its end."""
    if progress is not None:
        progress(what, 0, 1)
    done = False
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            step = _NINJA_STEP.match(line)
            if step and progress is not None:
                progress(what, int(step.group(1)), int(step.group(2)))
                done = step.group(1) == step.group(2)
        if proc.wait() != 0:
            raise EffctxError(f"{what} failed (exit {proc.returncode}); the full log is {log}")
    if progress is not None and not done:
        progress(what, 1, 1)


def _fetch_source(version: str, root: Path, log: Path, progress: ProgressFn | None) -> Path:
    """The vendored llama.cpp tree of the binding's sdist (pip's own download and cache)."""
    source = root / "src"
    if (source / "CMakeLists.txt").exists():
        return source
    sweep_dead_temps(root)  # a download or unpacking killed mid-way
    tmp = create_temp_dir(source)
    try:
        # The binding's sdist only: --no-binary=:all: would also build its build tools
        # (scikit-build-core and what that needs) from their sources, 1.5 minutes more.
        _run([sys.executable, "-m", "pip", "download", "--no-deps", f"--no-binary={BINDING}", "--progress-bar", "off",
              f"{BINDING}=={version}", "-d", str(tmp)], log, f"downloading the {BINDING} {version} source", progress)
        archive = next(tmp.glob("*.tar.gz"))
        top = archive.name[: -len(".tar.gz")]
        prefix = f"{top}/vendor/llama.cpp/"
        unpacked = tmp / "llama.cpp"
        with tarfile.open(archive) as tar:
            # The sdist carries its git folder: the submodule's HEAD names the vendored commit.
            head = tar.extractfile(f"{top}/.git/modules/vendor/llama.cpp/HEAD")
            commit = head.read().decode().strip()[:12] if head else "unknown"
            members = []
            for member in tar.getmembers():
                if member.name.startswith(prefix):
                    member.name = member.name[len(prefix):]
                    members.append(member)
            tar.extractall(unpacked, members=members, filter="data")
        (unpacked / _COMMIT).write_text(commit)
        os.replace(unpacked, source)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return source


def build(progress: ProgressFn | None = None, server: bool = True) -> LlamaCppBuild:
    """Build (once) and return effctx's llama.cpp build: its libraries, then llama-server
    unless `server` is False; what is already built is returned as it is."""
    found = find_build(server)
    if found is not None:
        return found
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise EffctxError(f"building llama.cpp needs {tool}, which is not installed "
                              f"(Debian: apt-get install {'ninja-build' if tool == 'ninja' else tool})")
    version = binding_version()
    root = build_root(version)
    root.mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    libraries = find_build(server=False)
    spent = libraries.seconds if libraries is not None else 0.0
    started = time.monotonic()
    source = _fetch_source(version, root, log, progress)
    tree = root / "build"
    _run(["cmake", "-S", str(source), "-B", str(tree), "-G", "Ninja", *CMAKE_OPTIONS], log,
         "configuring llama.cpp", progress)
    jobs = str(max(1, len(os.sched_getaffinity(0))))
    stages: list[tuple[tuple[str, ...], str]] = [(LIBRARIES, "compiling llama.cpp's libraries (with RPC)")]
    if server:
        stages.append((TARGETS, "compiling llama-server"))
    for targets, what in stages:
        if libraries is not None and targets == LIBRARIES:
            continue
        _run(["cmake", "--build", str(tree), "--target", *targets, "-j", jobs], log, what, progress)
        seconds = spent + time.monotonic() - started
        stamp = {"binding_version": version, "commit": (source / _COMMIT).read_text(), "seconds": round(seconds, 1),
                 "cmake_options": list(CMAKE_OPTIONS), "targets": list(targets)}
        atomic_write_bytes(root / _STAMP, json.dumps(stamp, indent=2).encode())
    built = find_build(server)
    if built is None:
        raise EffctxError(f"the llama.cpp build finished without its libraries or llama-server; the log is {log}")
    return built
