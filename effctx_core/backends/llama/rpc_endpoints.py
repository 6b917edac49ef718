"""ggml RPC workers as endpoints: parsing `host:port`, and asking a worker for its protocol
version before llama.cpp connects to it.

llama.cpp's RPC client aborts the whole process when a worker is down or speaks another
protocol version, and waits forever on one that stops answering. So effctx says HELLO
itself first, from Python with a bounded wait, and turns each of those into one line.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from effctx_core.backends.common.network import is_loopback
from effctx_core.errors import RpcWorkerError

# The protocol of the llama.cpp commit effctx builds (ggml-rpc.h): a worker must have the
# same major version and no newer minor one.
PROTOCOL = (7, 0, 0)
_CMD_HELLO = 14
_CAPS = 24  # transport capability bytes in the HELLO request and answer (protocol 7)
_HELLO_ANSWER = 4 + _CAPS
_OLD_HELLO_ANSWER = 3  # protocols before 4 answered major, minor, patch alone


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def parse_endpoint(text: str) -> Endpoint:
    """`host:port` (IPv6 as `[::1]:port`), or ValueError with the reason."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: port {port!r} is not a number from 1 to 65535")
    return Endpoint(host, int(port))


@dataclass(frozen=True)
class WorkerHello:
    endpoint: str
    version: tuple[int, int, int]

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def say_hello(endpoint: str, timeout: float) -> WorkerHello:
    """The worker's protocol version, or RpcWorkerError naming the worker and what is wrong."""
    where = parse_endpoint(endpoint)
    try:
        with socket.create_connection((where.host, where.port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(bytes([_CMD_HELLO]) + struct.pack("<Q", _CAPS) + bytes(_CAPS))
            head = _recv_exact(sock, 8)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            body = _recv_exact(sock, size) if size in (_HELLO_ANSWER, _OLD_HELLO_ANSWER) else b""
    except ConnectionRefusedError:
        raise RpcWorkerError(f"RPC worker {endpoint} is down (connection refused)", endpoint) from None
    except (TimeoutError, socket.timeout):
        raise RpcWorkerError(f"RPC worker {endpoint} did not answer within {timeout:g} s "
                             "(stopped, or serving another client: a worker serves one at a time)", endpoint) from None
    except OSError as exc:
        raise RpcWorkerError(f"RPC worker {endpoint} is unreachable: {exc.strerror or exc}", endpoint) from None
    if size is None:
        raise RpcWorkerError(f"RPC worker {endpoint} closed the connection at HELLO: not a ggml RPC worker of "
                             f"protocol {PROTOCOL[0]}.x (effctx speaks {'.'.join(map(str, PROTOCOL))})", endpoint)
    if len(body) < 3 or size not in (_HELLO_ANSWER, _OLD_HELLO_ANSWER):
        raise RpcWorkerError(f"RPC worker {endpoint} answered HELLO with {size} bytes: not a ggml RPC worker "
                             f"this client can use", endpoint)
    hello = WorkerHello(endpoint, (body[0], body[1], body[2]))
    if hello.version[0] != PROTOCOL[0] or hello.version[1] > PROTOCOL[1]:
        raise RpcWorkerError(f"RPC worker {endpoint} speaks protocol {hello.version_text}, effctx's llama.cpp build "
                             f"speaks {'.'.join(map(str, PROTOCOL))}: run the same llama.cpp build on every machine",
                             endpoint)
    return hello
