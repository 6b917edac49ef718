"""`effctx trace export`: a recorded trace as Chrome/Perfetto trace-event JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from effctx_core.errors import EffctxError


def add_parser(sub) -> None:
    trace = sub.add_parser("trace", help="recorded engine traces")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True)
    export = trace_sub.add_parser("export", help="write a trace as Chrome/Perfetto trace-event JSON")
    export.add_argument("file", help="a JSON Lines trace written with --trace")
    export.add_argument("--perfetto", action="store_true", required=True, help="the output format (the only one)")
    export.add_argument("--output", "-o", metavar="OUT", help="where to write (default: FILE with .perfetto.json)")


def _output(args: argparse.Namespace) -> Path:
    """Where the export goes, refused before any work if writing it would lose a recording:
    the trace being exported (through a link too), or any other effctx trace."""
    from effctx_core.events.trace import is_trace_file
    from effctx_core.user_files import UserFileError, check_output_file, refuse_same_file

    out = check_output_file(args.output or Path(args.file).with_suffix(".perfetto.json"), "output file")
    refuse_same_file(out, "output file", [(args.file, "trace being exported")])
    if is_trace_file(out):
        raise UserFileError(f"the output file {out} is an effctx trace recording: refusing to write over it "
                            "(name another output file)")
    return out


def run(args: argparse.Namespace) -> int:
    from effctx_core.atomic import atomic_write_bytes
    from effctx_core.events.export import to_perfetto
    from effctx_core.events.reader import read_trace

    out = _output(args)
    trace = read_trace(args.file)
    if trace.note:
        print(f"effctx: {trace.note}", file=sys.stderr)
    data = to_perfetto(trace.events)
    try:
        atomic_write_bytes(out, json.dumps(data).encode())
    except OSError as exc:
        raise EffctxError(f"cannot write {out}: {exc.strerror}") from None
    print(f"wrote {len(data['traceEvents'])} trace events to {out} (open it in ui.perfetto.dev or chrome://tracing)")
    return 0
