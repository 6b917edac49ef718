"""One llama.cpp: every process of effctx loads llama-cpp-python over effctx's own build,
and says how to get it in one line when it is not there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from effctx_core.backends import llama_cpp_build
from effctx_core.backends.gguf.binding import BUILD, llama_cpp
from tests.helpers.cli import effctx, one_error_line
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

NO_BUILD_HERE = "effctx loads llama.cpp from its own build, which is not there"
HOW = "run `make llama-cpp` (or `effctx runtime build`)"


def _mapped_llama_libraries() -> set[Path]:
    """The llama.cpp and ggml shared libraries this process has mapped."""
    with open("/proc/self/maps") as maps:
        paths = {Path(fields[5]) for fields in (line.split() for line in maps) if len(fields) >= 6}
    return {p for p in paths if p.name.startswith(("libllama", "libggml")) and ".so" in p.name}


def test_this_process_runs_llama_cpp_from_effctxs_build():
    assert Path(llama_cpp.llama_cpp._base_path) == BUILD.bin_dir
    assert os.environ["LLAMA_CPP_LIB_PATH"] == str(BUILD.bin_dir)
    llama_cpp.llama_backend_init()  # loaded, and callable
    mapped = _mapped_llama_libraries()
    assert any(p.name.startswith("libllama") for p in mapped)
    assert {p.resolve().parent for p in mapped} == {BUILD.bin_dir.resolve()}, mapped
    assert llama_cpp.llama_supports_rpc()  # the build's ggml, with its RPC backend


def _base_path_in_child(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = "from effctx_core.backends.gguf.binding import llama_cpp; print(llama_cpp.llama_cpp._base_path)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_a_lib_path_that_is_not_an_effctx_build_is_not_used(tmp_path):
    (tmp_path / "build" / "bin").mkdir(parents=True)
    for elsewhere in (tmp_path, tmp_path / "build" / "bin"):
        out = _base_path_in_child({"LLAMA_CPP_LIB_PATH": str(elsewhere)})
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == str(BUILD.bin_dir)


def test_a_child_with_a_cache_folder_of_its_own_keeps_its_parents_build(tmp_path):
    out = _base_path_in_child({"XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(BUILD.bin_dir)


@pytest.fixture
def no_build(tmp_path) -> dict[str, str]:
    """A process that finds no build: an empty cache folder, no library path inherited."""
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "LLAMA_CPP_LIB_PATH": ""}


def test_without_the_build_importing_the_binding_is_one_error_not_a_ctypes_traceback(no_build):
    out = _base_path_in_child(no_build)
    assert out.returncode == 1
    assert "BuildMissingError" in out.stderr and NO_BUILD_HERE in out.stderr and HOW in out.stderr
    assert "ctypes" not in out.stderr and "Shared library" not in out.stderr


@pytest.mark.parametrize("args", [("info",), ("run", "--prompt", "hi", "--max-tokens", "1", "--model", "TINY"),
                                  ("run", "--profile", "ov-exact", "--prompt", "hi", "--model", "TINY"),
                                  ("run", "--profile", "llama-server", "--prompt", "hi", "--model", "TINY"), ()])
def test_without_the_build_commands_and_the_console_say_how_to_get_it_in_one_line(args, no_build, tmp_path):
    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    line = one_error_line(effctx(*(str(tiny) if a == "TINY" else a for a in args), env=no_build, timeout=60))
    assert NO_BUILD_HERE in line and HOW in line


def _fake_build(root: Path, targets: list[str], server_binary: bool = True) -> None:
    bin_dir = root / "build" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("libllama.so", "libggml.so.0", "libggml-rpc.so") + (("llama-server",) if server_binary else ()):
        (bin_dir / name).write_bytes(b"")
    stamp = {"binding_version": llama_cpp_build.binding_version(), "commit": "0c1e57098bba", "seconds": 90.0,
             "targets": targets}
    (root / "build.json").write_text(json.dumps(stamp))


def test_the_libraries_alone_are_a_build_for_the_cells_not_for_llama_server(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", "")
    _fake_build(llama_cpp_build.build_root(), ["llama"], server_binary=False)
    libraries = llama_cpp_build.find_build(server=False)
    assert libraries is not None and not libraries.has_server
    assert llama_cpp_build.library_build() == libraries
    assert llama_cpp_build.find_build() is None
    with pytest.raises(llama_cpp_build.BuildMissingError, match="needs effctx's llama.cpp build with RPC and llama-server"):
        llama_cpp_build.require_build("effctx worker")


def test_a_whole_build_serves_both(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _fake_build(llama_cpp_build.build_root(), ["llama", "llama-server"])
    whole = llama_cpp_build.find_build()
    assert whole is not None and whole.has_server and llama_cpp_build.find_build(server=False) == whole


@pytest.mark.parametrize("targets", ["llama", [1, 2], {"a": 1}])
def test_a_stamp_with_targets_this_code_did_not_write_is_no_build(targets, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _fake_build(llama_cpp_build.build_root(), targets)
    assert llama_cpp_build.find_build(server=False) is None
