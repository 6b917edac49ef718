"""A console's own conversation sent to an effctx endpoint as chat requests: what a
browser console of `effctx serve --api` types goes through the endpoint's queue as any
client's request does. Standard library only: the console needs no HTTP client package."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from effctx_core.errors import EffctxError

# A turn may wait in the queue behind other clients' requests before its own prefill.
REPLY_TIMEOUT_S = 600.0


class EndpointError(EffctxError):
    pass


@dataclass
class EndpointConversation:
    base_url: str  # http://HOST:PORT/v1
    key: str | None = None
    messages: list[dict] = field(default_factory=list)

    def say(self, text: str, max_tokens: int) -> str:
        """Send `text` after the conversation so far; the reply, which the conversation keeps."""
        asked = [*self.messages, {"role": "user", "content": text}]
        body = json.dumps({"model": "effctx", "messages": asked, "max_tokens": max_tokens,
                           "temperature": 0}).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(f"{self.base_url}/chat/completions", body, headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=REPLY_TIMEOUT_S) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as exc:
            raise EndpointError(f"the endpoint refused the turn ({exc.code}): {_message(exc)}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EndpointError(f"the endpoint {self.base_url} did not answer: {reason}") from None
        reply = answer["choices"][0]["message"].get("content") or ""
        self.messages = [*asked, {"role": "assistant", "content": reply}]
        return reply

    def forget(self) -> None:
        """Start a new conversation."""
        self.messages = []


def _message(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.load(error)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return error.reason
