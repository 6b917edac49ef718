"""`effctx api`: serve one model on one cell as an OpenAI-compatible endpoint, headless."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from effctx_core.api import DEFAULT_MAX_BODY
from effctx_core.cli.options import add_runtime_options, check_run_inputs, number, prepared_model, warn
from effctx_core.errors import EffctxError
from effctx_core.profiles import Profile

if TYPE_CHECKING:  # the web stack is imported when the endpoint runs, not for every command
    from effctx_core.api.app import ApiSettings
    from effctx_core.engine.service import EngineService, Job

DEFAULT_PORT = 8080
DEFAULT_QUEUE = 16


def add_parser(sub) -> None:
    p = sub.add_parser("api", help="serve the model as an OpenAI-compatible endpoint (chat and text completions)")
    add_runtime_options(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs --api-key)")
    p.add_argument("--port", type=number(int, at_least=1, at_most=65535), default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--api-key", metavar="KEY", help="the key every request must send (Authorization: Bearer KEY)")
    p.add_argument("--queue", type=number(int, at_least=1), default=DEFAULT_QUEUE, metavar="N",
                   help=f"requests that may wait for the engine; more get 429 (default {DEFAULT_QUEUE})")
    p.add_argument("--max-body", type=number(int, at_least=1024), default=DEFAULT_MAX_BODY, metavar="BYTES",
                   help="largest request body (default 8 MiB); larger get 413")
    p.add_argument("--state-dir", metavar="DIR",
                   help="where conversations and their states persist across restarts "
                        "(default: effctx's snapshot store and data folder)")
    p.add_argument("--trace", metavar="FILE", help="write the engine's events as JSON Lines")


@dataclass(frozen=True)
class Endpoint:
    """An engine and the endpoint's settings over it, not yet listening."""
    service: EngineService
    settings: ApiSettings
    kept: Job[int]  # reopens the conversations kept on disk: its end says the model is open


def open_endpoint(args: argparse.Namespace, profile: Profile, trace: str | None, queue: int,
                  state_dir: str | None = None, max_body: int = DEFAULT_MAX_BODY, checkpoints: bool = True) -> Endpoint:
    """The engine of `args`' model and profile in its service thread, loading; its
    conversations and their states persist in `state_dir` (default: effctx's own folders).
    Without `checkpoints` no state is stored: a request that leaves its conversation's
    resident tape recomputes it."""
    from effctx_core.api.app import ApiSettings
    from effctx_core.api.keeper import TreeKeeper
    from effctx_core.engine import SessionEngine
    from effctx_core.engine.service import EngineService
    from effctx_core.models import data_dir
    from effctx_core.snapshots import SnapshotStore

    state = Path(state_dir).expanduser() if state_dir else None
    store = SnapshotStore(state / "snapshots" if state else None) if checkpoints else None
    keeper = TreeKeeper(state if state else data_dir() / "api")

    def open_engine(progress) -> SessionEngine:
        return SessionEngine(prepared_model(args, profile), profile, trace_path=trace, checkpoints=store)

    service = EngineService(open_engine, queue_size=queue)
    service.start()
    kept = service.submit(lambda engine, _token: keeper.load(engine))
    settings = ApiSettings(model_name=Path(args.model).stem if args.model else profile.name, api_key=args.api_key,
                           max_body=max_body, after_request=keeper.save)
    return Endpoint(service, settings, kept)


def run(args: argparse.Namespace) -> int:
    from effctx_core.api.server import bind, serve
    from effctx_core.backends.common.network import is_loopback

    if not is_loopback(args.host) and not args.api_key:
        raise EffctxError(f"--host {args.host} is reachable from other machines: give --api-key too")
    inputs = check_run_inputs(args, args.trace)
    warn(inputs.warnings)
    profile = inputs.profile
    sock = bind(args.host, args.port)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    endpoint = open_endpoint(args, profile, args.trace, args.queue, args.state_dir, args.max_body)
    endpoint.kept.future.add_done_callback(lambda f: _ready_line(f, args))
    print(f"effctx api: listening on http://{args.host}:{args.port}/v1 (profile {profile.name}); "
          f"the model is loading", file=sys.stderr, flush=True)
    serve(endpoint.service, endpoint.settings, sock, args.queue)
    return 0


def _ready_line(future, args: argparse.Namespace) -> None:
    if future.cancelled() or future.exception() is not None:
        exc = None if future.cancelled() else future.exception()
        print(f"effctx api: the model did not load: {exc}", file=sys.stderr, flush=True)
        return
    kept = future.result()
    resumed = f"; {kept} earlier requests' conversations kept" if kept else ""
    print(f"effctx api: ready on http://{args.host}:{args.port}/v1{resumed}", file=sys.stderr, flush=True)
