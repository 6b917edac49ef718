"""`effctx api`'s server: uvicorn on a socket bound before the model loads, and stopped so
that nothing is left half-done.

The socket is bound first, so a port in use is one line before any model work. The model
then loads on the engine's worker while the server already answers (503 with Retry-After
until it is ready). uvicorn bounds an idle keep-alive connection but not a client that
sends its headers slowly; the protocol below gives every request's headers a deadline.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from effctx_core.api.app import ApiSettings, create_app
from effctx_core.engine.service import EngineService
from effctx_core.errors import EffctxError
from effctx_core.user_files import os_reason

HEADER_TIMEOUT_S = 10.0  # from a connection (or the end of its last response) to a request's headers
KEEP_ALIVE_S = 5
GRACEFUL_S = 5  # what a Ctrl+C gives running requests before their connections close


class HeaderDeadlineH11(H11Protocol):
    """h11 with a deadline for each request's headers: a client that connects and sends
    nothing, or dribbles its headers, is cut off instead of holding a connection."""

    _deadline: asyncio.TimerHandle | None = None
    _served: Any = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        if self.cycle is self._served and not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self._served:
            self._served = self.cycle  # a new request's headers arrived in time
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or one line on why it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise EffctxError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = "the port is in use" if exc.errno == errno.EADDRINUSE else os_reason(exc)
        raise EffctxError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def make_server(service: EngineService, settings: ApiSettings, queue: int) -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(service, settings), http=HeaderDeadlineH11, lifespan="off", access_log=False,
        log_level="warning", timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=GRACEFUL_S,
        # Connections beyond what the queue can take get a 503 from uvicorn at once.
        limit_concurrency=queue + 16,
        h11_max_incomplete_event_size=64 * 1024,
    )
    return uvicorn.Server(config)


def serve(service: EngineService, settings: ApiSettings, sock: socket.socket, queue: int) -> None:
    """Serve until Ctrl+C (uvicorn shuts down gracefully, then re-raises the interrupt)
    or until `service` stops; the engine is stopped either way."""
    server = make_server(service, settings, queue)
    service.start()
    try:
        server.run(sockets=[sock])
    finally:
        service.stop()
        sock.close()


class EndpointThread:
    """The endpoint served from a thread, in a process whose main thread runs something
    else (the console): uvicorn installs no signal handlers off the main thread, so the
    process's own Ctrl+C handling stays as it is, and stop() ends the server."""

    def __init__(self, service: EngineService, settings: ApiSettings, sock: socket.socket, queue: int):
        self.service = service
        self._sock = sock
        self._server = make_server(service, settings, queue)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="effctx-api",
                                        daemon=True)

    @property
    def address(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"{host}:{port}"

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = GRACEFUL_S + 5) -> None:
        """Stop taking requests (running ones get the graceful period), then the engine."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.service.stop(timeout)
        self._sock.close()
