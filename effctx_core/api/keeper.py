"""The endpoint's conversations across restarts: its snapshot tree, kept in a file per
runtime identity beside the states the snapshot store holds.

The tree records what each request was (its messages, tools, segments) and which stored
state holds its reply. The states themselves live in the store under its byte budget
and LRU, without references: an old conversation's state may go, and its next request
then recomputes, which the request reports.
"""

from __future__ import annotations

import logging
from pathlib import Path

from effctx_core.engine.session_engine import SessionEngine
from effctx_core.snapshots.tree_file import read_tree_file, write_tree_file

log = logging.getLogger("effctx.api")


class TreeKeeper:
    def __init__(self, directory: Path):
        self.directory = directory

    def path(self, engine: SessionEngine) -> Path:
        return self.directory / f"conversations-{engine.info.identity.digest()[:16]}.json"

    def load(self, engine: SessionEngine) -> int:
        """Go on with the conversations an earlier run kept; returns how many requests
        they hold. A damaged file is left where it is and the endpoint starts afresh."""
        path = self.path(engine)
        if not path.is_file():
            return 0
        try:
            tree = read_tree_file(path)
        except Exception as exc:  # noqa: BLE001 - whatever is wrong with the file, the endpoint still serves
            log.warning("effctx: conversations file %s not used (%s); starting without it", path, exc)
            return 0
        root = tree.root
        if root is None or root.identity_digest != engine.info.identity.digest():
            return 0
        engine.set_tree(tree)
        return sum(1 for n in tree if (n.metrics or {}).get("request"))

    def save(self, engine: SessionEngine) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_tree_file(engine.tree, self.path(engine))
