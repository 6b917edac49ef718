"""Headless commands: the `effctx COMMAND` parser and dispatch; each command is a module
of this package with its options (`add_parser`) and its work (`run`).

Bad input ends with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Mapping, Sequence

from effctx_core.cli import (
    api_command,
    bench,
    cells,
    certify,
    info,
    model,
    profiles,
    run,
    runtime,
    sessions,
    smoke,
    snapshots,
    trace,
    worker,
)
from effctx_core.cli.options import EXIT_BAD_INPUT, OneLineParser
from effctx_core.errors import EffctxError
from effctx_core.user_files import os_reason

# In the order `effctx --help` lists them.
COMMANDS = {
    "info": info, "cells": cells, "certify": certify, "profiles": profiles, "run": run, "api": api_command,
    "bench": bench, "smoke": smoke,
    "trace": trace, "snapshots": snapshots, "sessions": sessions, "model": model, "worker": worker,
    "runtime": runtime,
}


def build_parser(front_end_benches: Mapping[str, bench.FrontEndBench] | None = None) -> argparse.ArgumentParser:
    """Every command; `front_end_benches` are the `bench` subcommands a front end runs
    (the console's, drawn with Textual, which this package never imports)."""
    parser = OneLineParser(prog="effctx", description="See and steer what a local LLM runtime keeps in context.")
    sub = parser.add_subparsers(dest="command")
    for command in COMMANDS.values():
        if command is bench:
            bench.add_parser(sub, front_end_benches)
        else:
            command.add_parser(sub)
    return parser


def run_command(argv: Sequence[str], front_end_benches: Mapping[str, bench.FrontEndBench] | None = None) -> int:
    """Run a headless command; returns the exit code. Errors become one line."""
    try:
        args, rest = build_parser(front_end_benches).parse_known_args(list(argv))
        if getattr(args, "front_end", None) is not None:
            args.rest = rest  # a front end's benchmark parses its own options
        elif rest:
            raise EffctxError(f"unrecognized arguments: {' '.join(rest)}")
        if args.command is None:
            raise EffctxError("no command given (try: effctx --help)")
        return COMMANDS[args.command].run(args)
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
