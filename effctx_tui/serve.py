"""`effctx serve`: the console in a browser, through textual-serve.

textual-serve starts one console process per browser connection from a shell command
line, so the console options given here are checked once up front and then passed
through verbatim to `python -m effctx_tui.main`.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shlex
import socket
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from effctx_core.cli.options import EXIT_BAD_INPUT, OneLineParser, number, warn
from effctx_core.errors import EffctxError
from effctx_core.user_files import os_reason
from effctx_tui.options import (
    ENDPOINT_KEY_ENV,
    SERVED_ENV,
    ConsoleOptions,
    check_console_options,
    console_parser,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
API_QUEUE = 16  # requests that may wait for the engine, the browser consoles' turns among them
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _serve_parser(console: argparse.ArgumentParser) -> OneLineParser:
    # The console's own options are added as parents so `--help` lists them all;
    # allow_abbrev is off so `--ho` never silently means `--host`.
    parser = OneLineParser(prog="effctx serve", parents=[console], add_help=False, allow_abbrev=False,
                     description="Serve the effctx console to a web browser (one console per browser tab).")
    parser.add_argument("--port", type=number(int, at_least=1, at_most=65535), default=DEFAULT_PORT, metavar="N", help=f"TCP port (default {DEFAULT_PORT})")
    parser.add_argument("--host", default=None, metavar="ADDR",
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    parser.add_argument("--public-url", metavar="URL",
                        help="the URL browsers use to reach the server, when it is not http://HOST:PORT "
                             "(behind a proxy, or when listening on 0.0.0.0)")
    return parser


def console_argv(console: argparse.ArgumentParser, opts: argparse.Namespace) -> list[str]:
    """The console options that were set, as a command line for the served console."""
    argv: list[str] = []
    for action in console._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(opts, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1]  # the long spelling, readable in `ps`
        argv += [flag] if isinstance(action, argparse._StoreTrueAction) else [flag, str(value)]
    return argv


def console_command(argv: list[str]) -> str:
    # sys.executable, not `effctx`: the served console must be this very install, even
    # when the venv's bin/ is not on PATH. textual-serve runs the string through a shell;
    # `exec` makes the console the server's own child, and SERVED_ENV tells it to end
    # when the server is gone.
    return f"{SERVED_ENV}=1 exec " + shlex.join([sys.executable, "-m", "effctx_tui.main", *argv])


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# A stylesheet link to another host: textual-serve's page takes its font from a font CDN.
_REMOTE_STYLESHEET = re.compile(r"<link\b[^>]*\bhref=\"https?://[^\"]*\"[^>]*>\s*", re.DOTALL)
# The same font from the copy textual-serve serves itself: effctx runs offline.
_LOCAL_FONT = """<style>
      @font-face { font-family: "Roboto Mono"; font-style: normal; font-weight: 100 700;
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf") format("truetype"); }
      @font-face { font-family: "Roboto Mono"; font-style: italic; font-weight: 100 700;
        src: url("{{ config.static.url }}fonts/RobotoMono-Italic-VariableFont_wght.ttf") format("truetype"); }
    </style>
  </head>"""


def offline_page(page: str) -> str:
    """textual-serve's page template, loading nothing from another host."""
    return _REMOTE_STYLESHEET.sub("", page).replace("</head>", _LOCAL_FONT, 1)


@contextmanager
def offline_templates() -> Iterator[Path]:
    """A templates folder for textual-serve's Server holding its page made offline; it is
    derived at each start (not a copy in effctx) so the page follows the installed version."""
    import textual_serve

    page = Path(textual_serve.__file__).with_name("templates") / "app_index.html"
    with tempfile.TemporaryDirectory(prefix="effctx-serve-") as folder:
        (Path(folder) / page.name).write_text(offline_page(page.read_text(encoding="utf-8")), encoding="utf-8")
        yield Path(folder)


def _prepare_model(model: str | None) -> None:
    """Prepare the default model once here, so the first browser tab does not wait for it."""
    if model is not None:
        return
    from effctx_core.models import prepare_default_model

    print("effctx serve: checking the default model…", flush=True)
    prepare_default_model()


def _check_listen(host: str, port: int) -> None:
    """Refuse an address that cannot be listened on before the model is prepared: a
    name that does not resolve, a port in use or one that needs privileges."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise EffctxError(f"--host {host}: the name does not resolve ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # as the server will bind: SO_REUSEADDR, so a port in TIME_WAIT is not "in use"
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            reason = "the port is in use" if exc.errno == errno.EADDRINUSE else os_reason(exc)
            raise EffctxError(f"cannot listen on {_url_host(host)}:{port}: {reason}") from None


def serve(argv: list[str]) -> int:
    from effctx_core.cli.main import COMMANDS

    console = console_parser(list(COMMANDS))
    try:
        opts = _serve_parser(console).parse_args(argv)
        checked = check_console_options(opts)
        host = opts.host or DEFAULT_HOST
        _check_listen(host, opts.port)
        if checked.api is not None:
            return _serve_with_endpoint(console, opts, checked, host)
        if opts.prefix_file:
            # absolute: the served consoles need not start in this directory
            opts.prefix_file = str(Path(opts.prefix_file).resolve())
        if checked.replay is None:
            _prepare_model(opts.model or checked.profile.model)
    except EffctxError as exc:
        print(f"effctx: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    warn(checked.warnings)
    return _serve_consoles(console_command(console_argv(console, opts)), host, opts)


def _serve_consoles(command: str, host: str, opts: argparse.Namespace) -> int:
    """textual-serve, starting `command` for each browser tab, until Ctrl+C."""
    if host not in _LOOPBACK:
        print(f"effctx serve: warning: listening on {host}: the console (and the files it can write) "
              "is reachable from the network, without a password", file=sys.stderr, flush=True)
    from textual_serve.server import Server

    public_url = opts.public_url or f"http://{_url_host(host)}:{opts.port}"
    print(f"effctx serve: open {public_url} in a browser (Ctrl+C stops)", flush=True)
    try:
        with offline_templates() as templates:
            Server(command, host=host, port=opts.port, title="effctx", public_url=public_url,
                   templates_path=templates).serve()
    except OSError as exc:  # the port was taken between the check and the bind
        print(f"effctx: error: cannot listen on {_url_host(host)}:{opts.port}: {os_reason(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _serve_with_endpoint(console: argparse.ArgumentParser, opts: argparse.Namespace, checked: ConsoleOptions,
                         host: str) -> int:
    """`effctx serve --api`: this process holds the engine and serves the endpoint; each
    browser tab's console watches the engine's trace live and sends its turns to the
    endpoint, one more client in the same queue."""
    from effctx_core.api.server import EndpointThread, bind
    from effctx_core.cli.api_command import open_endpoint

    assert checked.api is not None  # the caller's reason to come here
    for given, flag in ((opts.prefix_file, "--prefix-file"), (opts.session, "--session"), (checked.replay, "--replay")):
        if given:
            raise EffctxError(f"{flag} is a console's own: with --api the browser consoles watch the endpoint's engine")
    record = opts.record or opts.trace
    if record and Path(record).exists():
        # The consoles follow the trace as it is written: a trace replacing an old file
        # is written beside it and renamed only at the end.
        raise EffctxError(f"{record} exists: with --api the trace must be a new file, followed as it is written")
    api = checked.api
    if api.port == opts.port:
        raise EffctxError(f"--api {api.port} is --port too: the endpoint and the browser consoles need a port each")
    sock = bind(api.host, api.port)  # a port in use is one line now, not after the model loads
    with tempfile.TemporaryDirectory(prefix="effctx-serve-api-") as folder:
        trace = Path(record).resolve() if record else Path(folder) / "engine.jsonl"
        profile = checked.profile
        endpoint = open_endpoint(opts, profile, str(trace), API_QUEUE, checkpoints=not opts.no_checkpoints)
        print(f"effctx serve: loading {opts.model or profile.model or 'the default model'} "
              f"(profile {profile.name})…", flush=True)
        try:
            kept = endpoint.kept.future.result()
        except Exception as exc:  # noqa: BLE001 - the model did not open: said in one line
            endpoint.service.stop()
            sock.close()
            raise EffctxError(f"the model did not load: {exc}") from None
        thread = EndpointThread(endpoint.service, endpoint.settings, sock, API_QUEUE)
        thread.start()
        url = f"http://{_url_host(api.host)}:{api.port}/v1"
        resumed = f"; {kept} earlier requests' conversations kept" if kept else ""
        print(f"effctx serve: the endpoint is ready on {url}{resumed}", flush=True)
        if api.key:
            # Inherited by the consoles (textual-serve passes its environment on): a key
            # on their command lines would show in `ps`.
            os.environ[ENDPOINT_KEY_ENV] = api.key
        try:
            return _serve_consoles(console_command(["--watch", str(trace), "--endpoint", url]), host, opts)
        finally:
            thread.stop()
