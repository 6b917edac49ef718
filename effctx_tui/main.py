"""The `effctx` entry point: the console without a command, headless commands with one."""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path
from typing import Sequence

from effctx_core.cli import COMMANDS, run_command
from effctx_core.cli_options import EXIT_BAD_INPUT, OneLineParser, add_runtime_options, profile_from_args, read_text_file
from effctx_core.contract import EffctxError
from effctx_core.snapshots.tree_file import check_name


def _console_parser() -> OneLineParser:
    others = ", ".join([*COMMANDS, "serve"])
    parser = OneLineParser(prog="effctx", description=f"Open the effctx console. Other commands: {others} (effctx COMMAND --help).")
    add_runtime_options(parser)
    parser.add_argument("--max-tokens", type=int, default=128, metavar="N", help="tokens per reply")
    parser.add_argument("--trace", metavar="FILE", help="write the engine's events as JSON Lines")
    parser.add_argument("--record", metavar="FILE", help="record the session's events (the same as --trace)")
    parser.add_argument("--replay", metavar="FILE", help="play a recorded trace in the console, with no model")
    parser.add_argument("--demo", metavar="NAME", help=f"play a shipped demo trace ({', '.join(demo_names())})")
    parser.add_argument("--speed", type=float, default=1.0, metavar="X", help="replay speed (default 1)")
    parser.add_argument("--session", metavar="NAME",
                        help="reopen (or start) the saved session NAME; it is saved after every change "
                             "(default: a new session named by the date and time)")
    parser.add_argument("--no-checkpoints", action="store_true",
                        help="save no snapshot states (restoring a snapshot then recomputes it)")
    parser.add_argument("--prefix-file", metavar="FILE",
                        help="a system prompt or document made resident before the first turn; its state is "
                             "kept in the prefix cache, so the next console with the same file and cell restores it")
    parser.add_argument("--no-prefix-cache", action="store_true", help="prefill the prefix without the prefix cache")
    return parser


def demo_names() -> list[str]:
    root = resources.files("effctx_tui") / "demos"
    return sorted(p.name[: -len(".jsonl")] for p in root.iterdir() if p.name.endswith(".jsonl"))


def _replay_trace(opts):
    """The trace to play, read and checked before the console opens; None for a live console."""
    from effctx_core.trace_reader import read_trace

    if opts.replay and opts.demo:
        raise EffctxError("--replay and --demo both name a trace: give one")
    if not 0 < opts.speed <= 64:
        raise EffctxError("--speed must be above 0 and at most 64")
    if opts.demo:
        if opts.demo not in demo_names():
            raise EffctxError(f"unknown demo {opts.demo!r} (available: {', '.join(demo_names())})")
        with resources.as_file(resources.files("effctx_tui") / "demos" / f"{opts.demo}.jsonl") as path:
            return read_trace(path)
    if not opts.replay:
        return None
    trace = read_trace(opts.replay)
    if trace.note:
        print(f"effctx: {trace.note}", file=sys.stderr)
    return trace


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:2] == ["bench", "residency"]:
        from .bench_residency import main as bench_residency

        return bench_residency(args[2:])
    if args[:2] == ["bench", "keys"]:
        from .bench_keys import main as bench_keys

        return bench_keys(args[2:])
    if args[:1] == ["serve"]:
        from .serve import serve

        return serve(args[1:])
    if args and args[0] in COMMANDS:
        return run_command(args)
    try:
        opts = _console_parser().parse_args(args)
        profile = profile_from_args(opts)
        if opts.session:
            check_name(opts.session)
        replay = _replay_trace(opts)
        prefix_text = read_text_file(opts.prefix_file, "prefix") if opts.prefix_file else None
        if prefix_text is not None and replay is not None:
            raise EffctxError("--prefix-file needs a model: a replay plays its recorded prefix")
    except EffctxError as exc:
        print(f"effctx: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from .app import USER_CACHE, EffctxApp

    if replay is not None:
        app = EffctxApp(replay=replay, replay_speed=opts.speed)
    else:
        app = EffctxApp(model=opts.model or profile.model, profile=profile, max_tokens=opts.max_tokens,
                        trace=opts.record or opts.trace, checkpoints=None if opts.no_checkpoints else USER_CACHE,
                        session_name=opts.session or time.strftime("%Y%m%d-%H%M%S"),
                        prefix_text=prefix_text, prefix_name=Path(opts.prefix_file).name if opts.prefix_file else "prefix",
                        prefix_cache=None if opts.no_prefix_cache else USER_CACHE)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
