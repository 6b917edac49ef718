"""The console's options: one parser, and one check that the console and `effctx serve`
both run before anything starts (serve must refuse bad input once, up front, not in
every browser tab). The options they share with `effctx run` go through the same check
as `run` (`check_run_inputs`)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from importlib import resources

from effctx_core.cli.options import (
    COUNT,
    OneLineParser,
    add_runtime_options,
    check_run_inputs,
    number,
    session_name,
)
from effctx_core.errors import EffctxError
from effctx_core.events.follow import TraceFollower
from effctx_core.events.reader import Trace
from effctx_core.profiles import Profile

MAX_SPEED = 64
# Set by `effctx serve` for the consoles it starts (textual-serve passes its environment on).
SERVED_ENV = "EFFCTX_SERVED"
# The key a watching console sends with its turns (`--endpoint`): the environment, not an
# argument, so `ps` does not show it.
ENDPOINT_KEY_ENV = "EFFCTX_ENDPOINT_KEY"


def demo_names() -> list[str]:
    root = resources.files("effctx_tui") / "demos"
    return sorted(p.name[: -len(".jsonl")] for p in root.iterdir() if p.name.endswith(".jsonl"))


def console_parser(commands: list[str]) -> OneLineParser:
    others = ", ".join([*commands, "serve"])
    parser = OneLineParser(prog="effctx", description=f"Open the effctx console. Other commands: {others} (effctx COMMAND --help).")
    add_runtime_options(parser)
    parser.add_argument("--max-tokens", type=COUNT, default=128, metavar="N", help="tokens per reply (default 128)")
    parser.add_argument("--trace", metavar="FILE", help="write the engine's events as JSON Lines")
    parser.add_argument("--record", metavar="FILE", help="record the session's events (the same as --trace)")
    parser.add_argument("--replay", metavar="FILE", help="play a recorded trace in the console, with no model")
    parser.add_argument("--demo", metavar="NAME", help=f"play a shipped demo trace ({', '.join(demo_names())})")
    parser.add_argument("--watch", metavar="FILE",
                        help="follow a trace another effctx process is writing (effctx api --trace FILE, "
                             "effctx --record FILE), live, with no model")
    parser.add_argument("--endpoint", metavar="URL",
                        help="with --watch: send your turns to this effctx endpoint (http://HOST:PORT/v1) as "
                             f"chat requests; its key, if it needs one, in ${ENDPOINT_KEY_ENV}")
    parser.add_argument("--speed", type=number(float, above=0, at_most=MAX_SPEED), default=1.0, metavar="X",
                        help=f"replay speed, above 0 and at most {MAX_SPEED} (default 1)")
    parser.add_argument("--session", metavar="NAME", type=session_name,
                        help="reopen (or start) the saved session NAME; it is saved after every change "
                             "(default: a new session named by the date and time)")
    parser.add_argument("--no-checkpoints", action="store_true",
                        help="save no snapshot states (restoring a snapshot then recomputes it)")
    parser.add_argument("--prefix-file", metavar="FILE",
                        help="a system prompt or document made resident before the first turn; its state is "
                             "kept in the prefix cache, so the next console with the same file and cell restores it")
    parser.add_argument("--no-prefix-cache", action="store_true", help="prefill the prefix without the prefix cache")
    parser.add_argument("--api", metavar="[HOST:]PORT",
                        help="also serve the engine as an OpenAI-compatible endpoint (127.0.0.1 unless HOST is "
                             "given; any other host needs --api-key): its requests and your turns share one queue")
    parser.add_argument("--api-key", metavar="KEY", help="the key every endpoint request must send")
    return parser


@dataclass(frozen=True)
class ApiAddress:
    host: str
    port: int
    key: str | None


def _api_address(opts: argparse.Namespace) -> ApiAddress | None:
    from effctx_core.backends.common.network import is_loopback

    if opts.api is None:
        if opts.api_key:
            raise EffctxError("--api-key is for the endpoint: give --api [HOST:]PORT too")
        return None
    host, _, port = opts.api.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise EffctxError(f"--api {opts.api!r}: give [HOST:]PORT with a port from 1 to 65535")
    if not is_loopback(host) and not opts.api_key:
        raise EffctxError(f"--api {opts.api} is reachable from other machines: give --api-key too")
    return ApiAddress(host, int(port), opts.api_key)


@dataclass(frozen=True)
class ConsoleOptions:
    profile: Profile
    replay: Trace | None  # a recorded trace to play instead of a model
    prefix_text: str | None
    warnings: list[str]  # said before the console opens and again inside it
    api: ApiAddress | None = None  # where the console also serves its engine
    follow: TraceFollower | None = None  # the replayed trace is still being written (`--watch`)

    @property
    def notes(self) -> list[str]:
        return [self.replay.note] if self.replay is not None and self.replay.note else []


def _replay_trace(opts: argparse.Namespace) -> Trace | None:
    from effctx_core.events.reader import read_trace

    if sum(bool(given) for given in (opts.replay, opts.demo, opts.watch)) > 1:
        raise EffctxError("--replay, --demo and --watch each name a trace: give one")
    if opts.demo:
        if opts.demo not in demo_names():
            raise EffctxError(f"unknown demo {opts.demo!r} (available: {', '.join(demo_names())})")
        with resources.as_file(resources.files("effctx_tui") / "demos" / f"{opts.demo}.jsonl") as path:
            return read_trace(path)
    return read_trace(opts.replay) if opts.replay else None


def check_console_options(opts: argparse.Namespace) -> ConsoleOptions:
    """Every console option checked, or an EffctxError with the one line to print."""
    if opts.trace and opts.record:
        raise EffctxError("--trace and --record both name the trace file: give one")
    inputs = check_run_inputs(opts, opts.trace or opts.record)
    replay = _replay_trace(opts)
    follow = TraceFollower(opts.watch) if opts.watch else None
    if follow is not None:
        replay = follow.opening()
    if replay is not None:
        if inputs.prefix_text is not None:
            raise EffctxError("--prefix-file needs a model: a replay plays its recorded prefix")
        if opts.trace or opts.record:
            raise EffctxError("--trace records a model's session: a replay has none to record")
    if opts.endpoint and not opts.watch:
        raise EffctxError("--endpoint sends a watching console's turns: give --watch FILE too")
    if opts.endpoint and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", opts.endpoint):
        raise EffctxError(f"--endpoint {opts.endpoint!r}: give the endpoint's URL, http://HOST:PORT/v1")
    api = _api_address(opts)
    if api is not None and replay is not None:
        raise EffctxError("--api serves a model: a replay has none")
    return ConsoleOptions(inputs.profile, replay, inputs.prefix_text, inputs.warnings, api, follow)
