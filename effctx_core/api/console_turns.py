"""A console's own conversation on the endpoint's engine: effctx's routes beside OpenAI's.

A console that watches an engine another process runs (`effctx --watch FILE --endpoint
URL`, every browser tab of `effctx serve --api`) has no engine to restore a node into or
to branch from. These routes do it on the watched engine, in its queue with the clients'
requests: a turn in the model's chat format going on from the node the console names (its
conversation's last node, or the node it branched from), and a restore of a node. The
console keeps which node is its own, as the console of `effctx --api` does in-process: a
client's request may move the engine to another conversation in between, and the next
turn goes back first.
"""

from __future__ import annotations

from effctx_core.api.errors import ApiError
from effctx_core.api.models import ConsoleTurnRequest, NodeRestoreRequest
from effctx_core.contract import DecodeConfig
from effctx_core.engine.session_engine import SessionEngine


def _known(engine: SessionEngine, node: str) -> None:
    if node not in engine.tree:
        raise ApiError(404, f"no node {node} in the engine's snapshot tree", "not_found_error", "node",
                       "node_not_found")


def console_turn(engine: SessionEngine, req: ConsoleTurnRequest) -> dict:
    """The turn, from the console's node; its reply and the node the turn made (the
    console's node from now on). Runs as a job of the engine's service, which stops it
    at its next chunk or token when the console goes away."""
    if req.node is None:
        engine.reset()
    elif engine.tree.current != req.node:
        _known(engine, req.node)
        engine.restore_node(req.node)
    result = engine.chat(req.text, DecodeConfig(max_tokens=req.max_tokens))
    return {"object": "effctx.turn", "reply": result.text, "node": engine.tree.current,
            "finish": result.stop_reason, "prefilled": result.prefilled, "reused": result.reused,
            "generated": result.generated}


def console_restore(engine: SessionEngine, req: NodeRestoreRequest) -> dict:
    """The node restored into the engine: how, and what it cost."""
    _known(engine, req.node)
    done = engine.restore_node(req.node)
    return {"object": "effctx.restore", "node": done.node, "mode": done.mode, "tokens": done.tokens,
            "recomputed": done.recomputed, "ms": done.ms, "reason": done.reason}
