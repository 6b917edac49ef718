"""The `effctx` entry point: the console without a command, headless commands with one."""

from __future__ import annotations

import sys
from typing import Sequence

from effctx_core.cli import COMMANDS, EXIT_BAD_INPUT, _Parser, run_command
from effctx_core.contract import EffctxError
from effctx_core.profiles import DEFAULT_PROFILE


def _console_parser() -> _Parser:
    parser = _Parser(prog="effctx", description="Open the effctx console (headless commands: info, run, bench, model).")
    parser.add_argument("--model", metavar="PATH", help="a GGUF model file (default: the embedded Gemma 3 270M)")
    parser.add_argument("--n-ctx", type=int, default=DEFAULT_PROFILE.n_ctx, metavar="N")
    parser.add_argument("--threads", type=int, default=0, metavar="N")
    parser.add_argument("--max-tokens", type=int, default=128, metavar="N", help="tokens per reply")
    parser.add_argument("--trace", metavar="FILE", help="write the engine's events as JSON Lines")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in COMMANDS:
        return run_command(args)
    try:
        opts = _console_parser().parse_args(args)
        profile = DEFAULT_PROFILE.with_changes(n_ctx=opts.n_ctx, n_threads=opts.threads)
    except EffctxError as exc:
        print(f"effctx: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from .app import EffctxApp

    app = EffctxApp(model=opts.model, profile=profile, max_tokens=opts.max_tokens, trace=opts.trace)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
