"""`effctx runtime build|status`: effctx's own llama.cpp build, which RPC workers, llama
cells with rpc_workers and the llama-server cell come from."""

from __future__ import annotations

import argparse

from effctx_core.cli.options import stderr_progress


def add_parser(sub) -> None:
    runtime = sub.add_parser("runtime", help="effctx's llama.cpp build with RPC workers and llama-server")
    runtime_sub = runtime.add_subparsers(dest="runtime_command", required=True)
    runtime_sub.add_parser("build", help="build it once (about 7 minutes on 2 cores)")
    runtime_sub.add_parser("status", help="say whether it is built, and where")


def run(args: argparse.Namespace) -> int:
    from effctx_core.backends.llama_cpp_build import build, find_build

    found = find_build()
    if args.runtime_command == "status" or found is not None:
        if found is None:
            print("not built (effctx runtime build, or make llama-cpp: about 7 minutes on 2 cores)")
            return 1
        print(f"already built: llama.cpp {found.commit} for llama-cpp-python {found.binding_version} "
              f"({found.seconds / 60:.1f} min) in {found.bin_dir}")
        return 0
    done = build(stderr_progress())
    print(f"llama.cpp {done.commit} built with RPC and llama-server in {done.seconds / 60:.1f} min: {done.bin_dir}")
    return 0
