"""`effctx worker`: this machine's CPU as a ggml RPC worker for another machine's llama
cell (a profile's `rpc_workers`)."""

from __future__ import annotations

import argparse
import sys

from effctx_core.cli.options import number
from effctx_core.errors import EffctxError


def add_parser(sub) -> None:
    worker = sub.add_parser("worker", help="serve this machine's CPU to a llama cell's rpc_workers (ggml RPC)")
    worker.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; the protocol has no "
                             "authentication or encryption)")
    worker.add_argument("--port", type=number(int, at_least=1, at_most=65535), default=50052, help="port (default 50052)")
    worker.add_argument("--threads", type=number(int, at_least=1), default=None,
                        help="compute threads (default: all free cores)")


def run(args: argparse.Namespace) -> int:
    from effctx_core.backends.llama.rpc_endpoints import parse_endpoint
    from effctx_core.backends.llama.rpc_worker import INSECURE, check_port_free, serve
    from effctx_core.backends.llama_cpp_build import require_build
    from effctx_core.profiles import default_threads

    try:
        where = parse_endpoint(f"{args.host}:{args.port}")
    except ValueError as exc:
        raise EffctxError(f"--host: {exc}") from None
    build = require_build("effctx worker")
    check_port_free(where)
    if where.loopback:
        print(f"effctx worker: note: {INSECURE}; listening on this machine only", file=sys.stderr)
    else:
        print(f"effctx worker: WARNING: {INSECURE}. Listening on {where}: use a private, trusted link only.",
              file=sys.stderr)

    def say(line: str) -> None:
        print(f"effctx worker: {line}", flush=True)

    return serve(build, where, args.threads or default_threads(), say)
