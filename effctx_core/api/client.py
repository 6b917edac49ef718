"""A watching console's own conversation on the engine an effctx endpoint serves: what a
browser tab of `effctx serve --api` (or `effctx --watch FILE --endpoint URL`) types goes
through the endpoint's queue as any client's request does, and its restores and branches
too (effctx's routes beside OpenAI's: api/console_turns.py). Standard library only: the
console needs no HTTP client package."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from effctx_core.engine.records import NodeRestore
from effctx_core.errors import EffctxError

# A turn may wait in the queue behind other clients' requests before its own prefill.
REPLY_TIMEOUT_S = 600.0


class EndpointError(EffctxError):
    pass


@dataclass
class EndpointConsole:
    base_url: str  # http://HOST:PORT/v1
    key: str | None = None
    # The console's conversation: the node its next turn goes on from (None: a new one).
    node: str | None = None

    def say(self, text: str, max_tokens: int) -> str:
        """A turn after the console's node; the reply. The turn's node is the console's from now on."""
        answer = self._post("turn", {"text": text, "node": self.node, "max_tokens": max_tokens})
        self.node = str(answer["node"])
        return str(answer["reply"])

    def restore(self, node: str) -> NodeRestore:
        """Restore `node` in the engine; the console's next turn branches from it."""
        answer = self._post("restore", {"node": node})
        self.node = node
        return NodeRestore(node, str(answer["mode"]), int(answer["tokens"]), int(answer["recomputed"]),
                           float(answer["ms"]), str(answer["reason"]))

    def forget(self) -> None:
        """Start a new conversation at the next turn."""
        self.node = None

    def _post(self, route: str, payload: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(f"{self.base_url}/effctx/{route}", json.dumps(payload).encode(), headers,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=REPLY_TIMEOUT_S) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as exc:
            raise EndpointError(f"the endpoint refused the {route} ({exc.code}): {_message(exc)}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EndpointError(f"the endpoint {self.base_url} did not answer: {reason}") from None
        if not isinstance(answer, dict):
            raise EndpointError(f"the endpoint {self.base_url} answered the {route} with no object")
        return answer


def _message(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.load(error)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return error.reason
