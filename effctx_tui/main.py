"""The `effctx` entry point: the console without a command, headless commands with one."""

from __future__ import annotations

import sys
from typing import Sequence

from effctx_core.cli import COMMANDS, EXIT_BAD_INPUT, _Parser, add_runtime_options, profile_from_args, run_command
from effctx_core.contract import EffctxError


def _console_parser() -> _Parser:
    parser = _Parser(prog="effctx", description="Open the effctx console (headless commands: info, run, bench, model).")
    add_runtime_options(parser)
    parser.add_argument("--max-tokens", type=int, default=128, metavar="N", help="tokens per reply")
    parser.add_argument("--trace", metavar="FILE", help="write the engine's events as JSON Lines")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in COMMANDS:
        return run_command(args)
    try:
        opts = _console_parser().parse_args(args)
        profile = profile_from_args(opts)
    except EffctxError as exc:
        print(f"effctx: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from .app import EffctxApp

    app = EffctxApp(model=opts.model or profile.model, profile=profile, max_tokens=opts.max_tokens, trace=opts.trace)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
