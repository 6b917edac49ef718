"""llama-server's HTTP API from the standard library: JSON requests and the server-sent
event stream of a completion, each read bounded by a timeout, every failure one line.

One connection per request: the server closes idle keep-alive connections after 5 s, and
a request resent on a connection it had already closed could run twice. On loopback a
new connection costs a fraction of a millisecond.
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import urlsplit

from effctx_core.errors import EffctxError

_QUOTE = 80  # characters of a garbage answer quoted in an error


class ServerError(EffctxError):
    """llama-server could not be reached, did not answer in time, or answered something
    that is not its API."""


class ServerRefusal(ServerError):
    """llama-server answered with an error of its own (an HTTP error status)."""

    def __init__(self, message: str, status: int, kind: str, body: dict[str, Any]):
        self.status = status
        self.kind = kind  # the server's error type, e.g. "exceed_context_size_error"
        self.body = body
        super().__init__(message)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _QUOTE else flat[: _QUOTE - 1] + "…"


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise ServerError(f"{what} is not JSON: {_one_line(raw.decode('utf-8', 'replace'))!r}") from None
    if not isinstance(value, dict):
        raise ServerError(f"{what} is not a JSON object: {_one_line(raw.decode('utf-8', 'replace'))!r}")
    return value


@dataclass(frozen=True)
class Event:
    """One `data:` event of a streamed completion."""

    data: dict[str, Any]

    @property
    def final(self) -> bool:
        # The last event carries the timings; every token event before it has stop false.
        return bool(self.data.get("stop")) and "timings" in self.data


class EventStream:
    """A streamed completion's events; closing it before the end drops the connection,
    which makes the server stop the request."""

    def __init__(self, client: "ServerClient", connection: http.client.HTTPConnection,
                 response: http.client.HTTPResponse, what: str):
        self._client = client
        self._connection = connection
        self._response = response
        self._what = what

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Event]:
        while True:
            line = self._client._guard(self._response.readline, self._what)
            if not line:
                return
            if not line.startswith(b"data:"):
                continue  # blank separators and ": ping" comments
            data = _json_object(line[5:].strip(), f"an event of {self._what}")
            if "error" in data:
                raise self._client._refusal(200, data, self._what)
            yield Event(data)

    def close(self) -> None:
        self._connection.close()


class ServerClient:
    def __init__(self, url: str, timeout_s: float):
        parts = urlsplit(url)
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self.timeout_s = timeout_s

    def _connect(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=self.timeout_s)

    def _guard(self, call, what: str):
        """Run one blocking step of a request, turning transport failures into ServerError."""
        try:
            return call()
        except (socket.timeout, TimeoutError):
            raise ServerError(f"llama-server at {self.url} did not answer {what} within {self.timeout_s:g} s") from None
        except ConnectionRefusedError:
            raise ServerError(f"cannot reach llama-server at {self.url}: connection refused") from None
        except ConnectionError as exc:
            raise ServerError(f"llama-server at {self.url} dropped the connection during {what}: "
                              f"{exc.strerror or type(exc).__name__}") from None
        except http.client.HTTPException as exc:
            raise ServerError(f"{self.url} answered {what} with something that is not HTTP "
                              f"({type(exc).__name__}: {_one_line(str(exc))})") from None
        except OSError as exc:
            raise ServerError(f"cannot reach llama-server at {self.url}: {exc.strerror or exc}") from None

    def _refusal(self, status: int, body: dict[str, Any], what: str) -> ServerRefusal:
        error = body.get("error")
        if not isinstance(error, dict):
            error = {"message": str(error)}
        message = _one_line(str(error.get("message", "no message")))
        kind = str(error.get("type", ""))
        return ServerRefusal(f"llama-server refused {what} (HTTP {status}{', ' + kind if kind else ''}): {message}",
                             status, kind, error)

    def _send(self, method: str, path: str, body: dict[str, Any] | None, what: str
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        connection = self._connect()
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        try:
            self._guard(lambda: connection.request(method, path, payload, headers), what)
            response = self._guard(connection.getresponse, what)
        except BaseException:
            connection.close()
            raise
        return connection, response

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, what: str = "") -> dict[str, Any]:
        """One request and its JSON answer; an HTTP error status is a ServerRefusal."""
        what = what or f"{method} {path}"
        connection, response = self._send(method, path, body, what)
        try:
            raw = self._guard(response.read, what)
        finally:
            connection.close()
        if response.status >= 400:
            try:
                parsed = _json_object(raw, f"the answer to {what}")
            except ServerError:
                parsed = {"error": {"message": raw.decode("utf-8", "replace")}}
            raise self._refusal(response.status, parsed, what)
        return _json_object(raw, f"the answer to {what}")

    def get(self, path: str, what: str = "") -> dict[str, Any]:
        return self.request("GET", path, None, what)

    def post(self, path: str, body: dict[str, Any] | None = None, what: str = "") -> dict[str, Any]:
        return self.request("POST", path, body if body is not None else {}, what)

    def stream(self, path: str, body: dict[str, Any], what: str = "") -> EventStream:
        """A streamed request's events (the body's `stream` is set here)."""
        what = what or f"POST {path}"
        connection, response = self._send("POST", path, {**body, "stream": True}, what)
        if response.status >= 400:
            try:
                raw = self._guard(response.read, what)
            finally:
                connection.close()
            raise self._refusal(response.status, _json_object(raw, f"the answer to {what}"), what)
        if "text/event-stream" not in (response.getheader("Content-Type") or ""):
            connection.close()
            raise ServerError(f"{self.url} answered {what} with {response.getheader('Content-Type')!r}, "
                              "not an event stream")
        return EventStream(self, connection, response, what)
