"""Running the `effctx` command of this venv, and reading its one-line errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

EFFCTX = str(Path(sys.executable).with_name("effctx"))


def effctx(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([EFFCTX, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def interruptible(*args: str, **popen: object) -> subprocess.Popen:
    """`effctx ARGS` as a terminal starts it, so that Ctrl+C (SIGINT) reaches it: a suite
    run as a background job inherits SIGINT ignored (the shell ignores it for background
    jobs), and Python then installs no KeyboardInterrupt handler in the child."""
    return subprocess.Popen([EFFCTX, *args], text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            **popen)  # type: ignore[call-overload]


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("effctx: error: ")
    return lines[0]
