"""End a child process when the process that started it is gone.

A child that a parent started for itself (the RPC host of a llama cell, a console that
`effctx serve` started for a browser tab) must not outlive it: once the parent is killed
(SIGKILL leaves it no time to stop anything), the child is reparented and would go on
holding its model, hundreds of MB, with nobody to talk to. The kernel tells a process it
was reparented only through getppid(), so a daemon thread polls it; a parent that talks
to the child through its stdin is also gone when that pipe hangs up.
"""

from __future__ import annotations

import os
import select
import threading
import time
from typing import Callable

POLL_S = 0.5


def _stdin_hung_up() -> bool:
    """True when fd 0 is a pipe whose writer has closed it (read nothing: the owner of
    stdin keeps every byte)."""
    poller = select.poll()
    poller.register(0, 0)  # POLLHUP and POLLERR are always reported
    return any(revents & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, revents in poller.poll(0))


def watch_parent(on_gone: Callable[[], None], *, stdin_pipe: bool = False) -> threading.Thread:
    """Call `on_gone` once, from a daemon thread, when this process's parent has changed
    (it died) or, with `stdin_pipe`, when the pipe on stdin hangs up."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent and not (stdin_pipe and _stdin_hung_up()):
            time.sleep(POLL_S)
        on_gone()

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread
