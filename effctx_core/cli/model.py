"""`effctx model prepare|path`: the embedded default model."""

from __future__ import annotations

import argparse

from effctx_core.cli.options import stderr_progress


def add_parser(sub) -> None:
    model = sub.add_parser("model", help="the default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    model_sub.add_parser("prepare", help="assemble the embedded default model (once)")
    model_sub.add_parser("path", help="print the default model's path")


def run(args: argparse.Namespace) -> int:
    from effctx_core.models import default_model_path, prepare_default_model

    if args.model_command == "path":
        print(default_model_path())
        return 0
    path = prepare_default_model(progress=stderr_progress())
    print(f"default model ready: {path}")
    return 0
