"""A hand-made snapshot tree, for the snapshots screen without a model:

    n0 start                      root, no state
    └── n1 Hello                  8 tokens, state 180.7 KiB, restored exact
        ├── n2 What is two…       24 tokens (8 shared), state 433 KiB
        └── n3 Tell me a joke     22 tokens (8 shared), no state, restored by recompute, current
            └── n4 Another one    30 tokens (22 shared), state 556.7 KiB

n2 and n3 both start with the three tokens 20, 21, 22 (a turn header), so they share
11 tokens. The fake detokenizer writes token t as "<t>".
"""

from __future__ import annotations

from typing import Callable, Iterable

from textual.app import App

from effctx_core.engine import NodeRestore
from effctx_core.snapshots.tree import SnapshotTree, TurnText
from effctx_tui.screens.snapshots import SnapshotsScreen

T0 = 1_700_000_000.0
IDENTITY = "fixed-identity"


def metrics(reused: int, prefilled: int, state_bytes: int) -> dict:
    return {"reused": reused, "prefilled": prefilled, "generated": 4, "ttft_ms": 52.8,
            "prefill_tps": 180.0, "decode_tps": 77.1, "bytes": state_bytes}


def fixed_tree() -> SnapshotTree:
    tree = SnapshotTree()
    root = tree.add(None, (), "root", IDENTITY, label="start", created=T0)
    hello = tree.add(root.id, range(1, 9), "turn", IDENTITY, label="Hello", created=T0 + 5,
                     metrics=metrics(0, 7, 185_032), blob="5655251542aa", turn=TurnText("Hello", " Hello! How can I help?"))
    tree.add(hello.id, [20, 21, 22, *range(30, 43)], "turn", IDENTITY, label="What is two plus two?", created=T0 + 20,
             metrics=metrics(8, 12, 443_416), blob="0421bcc3fdbb", turn=TurnText("What is two plus two?", " Two plus two is four."))
    joke = tree.add(hello.id, [20, 21, 22, *range(50, 61)], "turn", IDENTITY, label="Tell me a joke", created=T0 + 40,
                    metrics=metrics(8, 14, 0), turn=TurnText("Tell me a joke", " Why did the chicken cross the road?"))
    tree.add(joke.id, range(70, 78), "turn", IDENTITY, label="Another one", created=T0 + 60,
             metrics=metrics(22, 8, 570_060), blob="77aa01c2dd", turn=TurnText("Another one", " What do you call a fish?"))
    tree.set_current(joke.id)
    return tree


def fixed_restores() -> dict[str, NodeRestore]:
    return {
        "n1": NodeRestore("n1", "exact", 8, 0, 3.8, "restored its saved state"),
        "n3": NodeRestore("n3", "recompute", 22, 14, 152.4, "the node has no saved state"),
    }


def fake_detokenize(tokens) -> str:
    return "".join(f"<{t}>" for t in tokens)


class SnapshotsApp(App):
    """The snapshots screen over the fixed tree and its restores (or `tree`, never
    restored), with no engine behind it; `missing_states` answers for a store
    (SnapshotStore.missing_states), none by default."""

    def __init__(self, tree: SnapshotTree | None = None,
                 missing_states: Callable[[Iterable[str]], dict[str, str]] = lambda keys: {}) -> None:
        super().__init__()
        self.snapshot_tree = fixed_tree() if tree is None else tree
        self.screen_under_test = SnapshotsScreen(self.snapshot_tree, detokenize=fake_detokenize,
                                                 restores=fixed_restores() if tree is None else {},
                                                 missing_states=missing_states)

    def on_mount(self) -> None:
        self.push_screen(self.screen_under_test)
