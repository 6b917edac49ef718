"""What the console's `effctx bench` commands share: the core CLI's one-line errors and
exit code, and a result printed as JSON (--json) or as the command's own table."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Iterable

from effctx_core.cli.options import EXIT_BAD_INPUT, OneLineParser
from effctx_core.errors import EffctxError


def bench_command(
    parser: OneLineParser,
    argv: list[str],
    run: Callable[[argparse.Namespace], dict],
    table: Callable[[dict], Iterable[str]],
) -> int:
    """`parser` holds the command's own options; `run` checks them (raising EffctxError)
    and returns the result; `table` gives its lines without --json."""
    parser.add_argument("--json", action="store_true")
    try:
        opts = parser.parse_args(argv)
        result = run(opts)
    except EffctxError as exc:
        print(f"effctx: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if opts.json:
        print(json.dumps(result, indent=2))
    else:
        for line in table(result):
            print(line)
    return 0
