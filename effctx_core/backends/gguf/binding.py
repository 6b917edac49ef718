"""llama-cpp-python over effctx's own llama.cpp build: every module of effctx (and every
test) imports `llama_cpp` from here, never directly.

llama-cpp-python is installed without a library of its own (make setup builds its wheel
with `CMAKE_ARGS=-DLLAMA_BUILD=OFF`) and reads LLAMA_CPP_LIB_PATH once, when `llama_cpp`
is first imported: so it is set here, to effctx's build of the very llama.cpp tree the
binding vendors, before the import. Local cells, the RPC host, the baselines, the
llama-server control and the tokenizer the other backends borrow all run on that one
library. The variable stays set for the processes effctx starts, which load the same one.

Importing this module without the build raises BuildMissingError (one line: how to build
it), never a ctypes traceback; nothing of llama-cpp-python is imported then.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from effctx_core.backends.llama_cpp_build import LIB_PATH_ENV, library_build
from effctx_core.errors import EffctxError

BUILD = library_build()
os.environ[LIB_PATH_ENV] = str(BUILD.bin_dir)

_loaded = sys.modules.get("llama_cpp.llama_cpp")
if _loaded is not None and Path(getattr(_loaded, "_base_path", "")) != BUILD.bin_dir:
    raise EffctxError(f"llama-cpp-python was imported before effctx set its library: it loaded "
                      f"{getattr(_loaded, '_base_path', 'an unknown library')}, not effctx's build in {BUILD.bin_dir}")

import llama_cpp  # noqa: E402, TID251 - the one import of llama-cpp-python, after the library path is set

__all__ = ["BUILD", "llama_cpp"]
