"""`effctx model prepare|path|convert`: the embedded default model, and its conversions."""

from __future__ import annotations

import argparse
import sys

from effctx_core.cli.options import stderr_progress
from effctx_core.units import format_bytes, format_ms


def add_parser(sub) -> None:
    model = sub.add_parser("model", help="the default model, and its conversion to other runtimes' formats")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    model_sub.add_parser("prepare", help="assemble the embedded default model (once)")
    model_sub.add_parser("path", help="print the default model's path")
    convert = model_sub.add_parser("convert", help="convert a GGUF model to OpenVINO IR, without torch (once)")
    convert.add_argument("--to", required=True, choices=["openvino"], help="the target format")
    convert.add_argument("--model", metavar="PATH", help="a GGUF model file (default: the embedded Gemma 3 270M)")
    convert.add_argument("--weights", default="int8", choices=["int8", "f16", "f32"],
                         help="weight precision in the IR (default int8: symmetric, one scale per 32 weights)")


def run(args: argparse.Namespace) -> int:
    from effctx_core.models import default_model_path, prepare_default_model, resolve_model

    if args.model_command == "path":
        print(default_model_path())
        return 0
    if args.model_command == "convert":
        from effctx_core.backends.gguf.facts import check_gguf_file
        from effctx_core.backends.openvino.convert import cached_conversion, convert_gguf

        source = resolve_model(args.model, progress=stderr_progress())
        check_gguf_file(source)
        # The one explicit check: every file's sha256 against the manifest, not only its size.
        cached = cached_conversion(source, args.weights, digests=True)
        if cached.model is not None:
            print(f"already converted: {cached.model.path}")
            return 0
        if cached.problem:
            print(f"effctx: {cached.problem}: converting it again", file=sys.stderr, flush=True)
        converted = convert_gguf(source, args.weights, progress=stderr_progress(), reuse=False)
        m = converted.manifest
        print(f"converted to OpenVINO IR ({args.weights}, {format_bytes(m['weight_bytes'])} of weights, "
              f"{format_ms(m['seconds'] * 1000)}): {converted.path}")
        return 0
    path = prepare_default_model(progress=stderr_progress())
    print(f"default model ready: {path}")
    return 0
