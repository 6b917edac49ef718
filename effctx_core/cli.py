"""Headless commands: the `effctx COMMAND` parser and dispatch; each command's module
holds its options and its work.

Bad input ends with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from . import bench_cli, info_cli, run_cli
from .cli_options import EXIT_BAD_INPUT, OneLineParser, stderr_progress
from .contract import EffctxError
from .user_files import os_reason
from .sessions_cli import add_parser as add_sessions_parser
from .sessions_cli import cmd_sessions
from .snapshots_cli import add_parser as add_snapshots_parser
from .snapshots_cli import cmd_snapshots


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="effctx", description="See and steer what a local LLM runtime keeps in context.")
    sub = parser.add_subparsers(dest="command")
    info_cli.add_parsers(sub)
    run_cli.add_parser(sub)
    bench_cli.add_parsers(sub)
    trace = sub.add_parser("trace", help="recorded engine traces")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True)
    export = trace_sub.add_parser("export", help="write a trace as Chrome/Perfetto trace-event JSON")
    export.add_argument("file", help="a JSON Lines trace written with --trace")
    export.add_argument("--perfetto", action="store_true", required=True, help="the output format (the only one)")
    export.add_argument("--output", "-o", metavar="OUT", help="where to write (default: FILE with .perfetto.json)")

    add_snapshots_parser(sub)
    add_sessions_parser(sub)
    model = sub.add_parser("model", help="the default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    model_sub.add_parser("prepare", help="assemble the embedded default model (once)")
    model_sub.add_parser("path", help="print the default model's path")
    return parser


def cmd_trace(args: argparse.Namespace) -> int:
    from .atomic import atomic_write_bytes
    from .trace_export import to_perfetto
    from .trace_reader import read_trace

    trace = read_trace(args.file)
    if trace.note:
        print(f"effctx: {trace.note}", file=sys.stderr)
    out = Path(args.output) if args.output else Path(args.file).with_suffix(".perfetto.json")
    data = to_perfetto(trace.events)
    try:
        atomic_write_bytes(out, json.dumps(data).encode())
    except OSError as exc:
        raise EffctxError(f"cannot write {out}: {exc.strerror}") from None
    print(f"wrote {len(data['traceEvents'])} trace events to {out} (open it in ui.perfetto.dev or chrome://tracing)")
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    from .models import default_model_path, prepare_default_model

    if args.model_command == "path":
        print(default_model_path())
        return 0
    path = prepare_default_model(progress=stderr_progress())
    print(f"default model ready: {path}")
    return 0


COMMANDS = {
    "info": info_cli.cmd_info, "run": run_cli.cmd_run, "bench": bench_cli.cmd_bench, "smoke": bench_cli.cmd_smoke,
    "profiles": info_cli.cmd_profiles, "model": cmd_model, "snapshots": cmd_snapshots, "sessions": cmd_sessions,
    "cells": info_cli.cmd_cells, "trace": cmd_trace,
}


def run_command(argv: Sequence[str]) -> int:
    """Run a headless command; returns the exit code. Errors become one line."""
    try:
        args = build_parser().parse_args(list(argv))
        if args.command is None:
            raise EffctxError("no command given (try: effctx --help)")
        return COMMANDS[args.command](args)
    except EffctxError as exc:
        print(f"effctx: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        # The last guard of the one-line promise: a file or folder the command could
        # not use that no check above named.
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"effctx: error: {os_reason(exc)}{where}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("effctx: interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
