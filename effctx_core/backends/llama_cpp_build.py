"""effctx's own build of llama.cpp: the tree that llama-cpp-python's sdist vendors, built
once with ggml's RPC backend and llama-server, into effctx's cache folder.

One build serves three things, all from the same llama.cpp commit as the Python binding,
so client, workers and server speak the same RPC protocol by construction:
- the RPC-enabled shared libraries that a llama session with `rpc_workers` loads (in a
  host process of its own: llama-cpp-python reads them through LLAMA_CPP_LIB_PATH);
- `effctx worker`, which serves this machine's CPU from `libggml-rpc.so` with no binary;
- `llama-server`, for the llama-server cell.

No PyPI wheel carries either piece for this platform (llama-cpp-python's wheel has no RPC,
and llama-server is sdist-only), so the build is the only way; it takes about 7 minutes
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
from effctx_core.errors import EffctxError
from effctx_core.models import cache_dir
from effctx_core.temp_files import create_temp_dir, sweep_dead_temps

ProgressFn = Callable[[str, int, int], None]

# The binding this build must match: the same llama.cpp commit, so the same C API.
BINDING = "llama-cpp-python"
# The UI flags keep llama-server's build from fetching web assets (offline here). The
# -mno-amx flags are the ones the binding is built with: AMX tile instructions fault
# under some hypervisors at the first matrix multiply.
_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
    f"-DCMAKE_C_FLAGS={_NO_AMX}", f"-DCMAKE_CXX_FLAGS={_NO_AMX}",
)
TARGETS = ("llama", "llama-server")
_STAMP = "build.json"
_COMMIT = "EFFCTX_COMMIT"
_NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\]")


class BuildMissingError(EffctxError):
    """effctx's llama.cpp build is not there (or not finished)."""


@dataclass(frozen=True)
class LlamaCppBuild:
    root: Path
    binding_version: str
    commit: str
    seconds: float

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


def find_build() -> LlamaCppBuild | None:
    """The finished build for the installed binding, or None."""
    root = build_root()
    try:
        stamp = json.loads((root / _STAMP).read_text())
        build = LlamaCppBuild(root, str(stamp["binding_version"]), str(stamp["commit"]), float(stamp["seconds"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None  # no stamp, or one this code did not write: not a finished build
    needed = (build.server_binary, build.rpc_library, build.ggml_library, build.bin_dir / "libllama.so")
    if build.binding_version != binding_version() or not all(p.exists() for p in needed):
        return None
    return build


def require_build(what: str) -> LlamaCppBuild:
    found = find_build()
    if found is None:
        raise BuildMissingError(f"{what} needs effctx's llama.cpp build with RPC and llama-server, which is not there "
                                f"(build it once, about 7 minutes: make llama-cpp, or: effctx runtime build)")
    return found


def _run(cmd: list[str], log: Path, what: str, progress: ProgressFn | None = None, cwd: Path | None = None) -> None:
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
        if proc.wait() != 0:
            raise EffctxError(f"{what} failed (exit {proc.returncode}); the full log is {log}")


def _fetch_source(version: str, root: Path, log: Path) -> Path:
    """The vendored llama.cpp tree of the binding's sdist (pip's own download and cache)."""
    source = root / "src"
    if (source / "CMakeLists.txt").exists():
        return source
    sweep_dead_temps(root)  # a download or unpacking killed mid-way
    tmp = create_temp_dir(source)
    try:
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "--progress-bar", "off",
              f"{BINDING}=={version}", "-d", str(tmp)], log, f"downloading the {BINDING} {version} source")
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


def build(progress: ProgressFn | None = None) -> LlamaCppBuild:
    """Build (once) and return effctx's llama.cpp build; a finished one is returned as it is."""
    found = find_build()
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
    started = time.monotonic()
    source = _fetch_source(version, root, log)
    tree = root / "build"
    _run(["cmake", "-S", str(source), "-B", str(tree), "-G", "Ninja", *CMAKE_OPTIONS], log,
         "configuring llama.cpp")
    _run(["cmake", "--build", str(tree), "--target", *TARGETS, "-j", str(max(1, len(os.sched_getaffinity(0))))],
         log, "compiling llama.cpp (RPC, llama-server)", progress)
    seconds = time.monotonic() - started
    stamp = {"binding_version": version, "commit": (source / _COMMIT).read_text(), "seconds": round(seconds, 1),
             "cmake_options": list(CMAKE_OPTIONS), "targets": list(TARGETS)}
    atomic_write_bytes(root / _STAMP, json.dumps(stamp, indent=2).encode())
    built = find_build()
    if built is None:
        raise EffctxError(f"the llama.cpp build finished without its libraries or llama-server; the log is {log}")
    return built
