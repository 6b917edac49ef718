"""Running the `effctx` command of this venv, and reading its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EFFCTX = str(Path(sys.executable).with_name("effctx"))


def effctx(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([EFFCTX, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("effctx: error: ")
    return lines[0]
