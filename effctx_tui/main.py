"""The `effctx` entry point: the console without a command, headless commands with one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Sequence

from effctx_core.cli.main import COMMANDS, run_command
from effctx_core.cli.options import EXIT_BAD_INPUT, warn
from effctx_core.errors import EffctxError
from effctx_core.parent_watch import watch_parent
from effctx_tui.options import ENDPOINT_KEY_ENV, SERVED_ENV, check_console_options, console_parser

QUIT_GRACE_S = 5.0  # how long a served console whose server is gone may take to quit


def _bench_residency(argv: list[str]) -> int:
    from effctx_tui.bench.residency import main as bench_residency

    return bench_residency(argv)


def _bench_keys(argv: list[str]) -> int:
    from effctx_tui.bench.keys import main as bench_keys

    return bench_keys(argv)


# The `effctx bench` commands the console runs (they draw with Textual), imported when run.
FRONT_END_BENCHES = {
    "residency": ("time a redraw of the residency view on a 128k-token tape", _bench_residency),
    "keys": ("time a typed key on screen while a long prompt is prefilled", _bench_keys),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:
        from effctx_tui.serve import serve

        return serve(args[1:])
    if args and args[0] in COMMANDS:
        return run_command(args, FRONT_END_BENCHES)
    try:
        opts = console_parser(list(COMMANDS)).parse_args(args)
        checked = check_console_options(opts)
    except EffctxError as exc:
        print(f"effctx: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if checked.replay is None:
        # Every cell runs llama.cpp from effctx's build (the OpenVINO and llama-server cells
        # its tokenizer): without it, one line now rather than a console that cannot open.
        from effctx_core.backends.llama_cpp_build import BuildMissingError, library_build

        try:
            library_build()
        except BuildMissingError as exc:
            print(f"effctx: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    warn(checked.warnings)
    for note in checked.notes:
        print(f"effctx: {note}", file=sys.stderr)
    from effctx_core.api.client import EndpointConsole
    from effctx_tui.app import USER_CACHE, EffctxApp

    api_socket = None
    if checked.api is not None:
        from effctx_core.api.server import bind

        try:
            # Taken now: a port in use is one line before the console opens.
            api_socket = bind(checked.api.host, checked.api.port)
        except EffctxError as exc:
            print(f"effctx: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if checked.replay is not None:
        talk = EndpointConsole(opts.endpoint.rstrip("/"), os.environ.get(ENDPOINT_KEY_ENV)) if opts.endpoint else None
        app = EffctxApp(replay=checked.replay, replay_speed=opts.speed, follow=checked.follow, talk=talk)
    else:
        profile = checked.profile
        app = EffctxApp(model=opts.model or profile.model, profile=profile, max_tokens=opts.max_tokens,
                        trace=opts.record or opts.trace, checkpoints=None if opts.no_checkpoints else USER_CACHE,
                        session_name=opts.session or time.strftime("%Y%m%d-%H%M%S"),
                        prefix_text=checked.prefix_text,
                        prefix_name=Path(opts.prefix_file).name if opts.prefix_file else "prefix",
                        prefix_cache=None if opts.no_prefix_cache else USER_CACHE, warnings=checked.warnings,
                        api=checked.api, api_socket=api_socket)
    if os.environ.get(SERVED_ENV):
        _end_with_server(app)
    app.run()
    return app.return_code or 0


def _end_with_server(app) -> None:
    """A console that `effctx serve` started for a browser tab ends when the server is
    gone (killed, even with SIGKILL): it asks the app to quit, and ends the process if
    the quit has not finished within a few seconds (a prefill may hold the engine)."""

    def leave() -> None:
        try:
            app.call_from_thread(app.exit)
        except Exception:  # noqa: BLE001 - the app is not running (yet or any more): end now
            os._exit(1)
        time.sleep(QUIT_GRACE_S)
        os._exit(1)

    watch_parent(leave, stdin_pipe=True)


if __name__ == "__main__":
    sys.exit(main())
