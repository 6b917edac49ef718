"""`effctx runtime build|status`: effctx's own llama.cpp build, which every llama.cpp cell
loads its libraries from, and RPC workers and the llama-server cell come from."""

from __future__ import annotations

import argparse

from effctx_core.cli.options import stderr_progress


def add_parser(sub) -> None:
    runtime = sub.add_parser("runtime", help="effctx's llama.cpp build (libraries, RPC workers, llama-server)")
    runtime_sub = runtime.add_subparsers(dest="runtime_command", required=True)
    build = runtime_sub.add_parser("build", help="build it once (about 5 minutes on 2 cores)")
    build.add_argument("--libraries", action="store_true",
                       help="only the libraries every llama.cpp cell loads (about a quarter of the compile): "
                            "what the console needs; RPC workers and the llama-server cell need the whole build")
    runtime_sub.add_parser("status", help="say whether it is built, and where")


def run(args: argparse.Namespace) -> int:
    from effctx_core.backends.llama_cpp_build import HOW_TO_BUILD, build, find_build

    if args.runtime_command == "status":
        found = find_build(server=False)
        if found is None:
            print(f"not built ({HOW_TO_BUILD})")
            return 1
        what = "libraries and llama-server" if found.has_server else \
            "libraries only (llama-server and RPC workers: effctx runtime build)"
        print(f"built: llama.cpp {found.commit} for llama-cpp-python {found.binding_version}, {what} "
              f"({found.seconds / 60:.1f} min) in {found.bin_dir}")
        return 0
    server = not args.libraries
    found = find_build(server)
    if found is not None:
        print(f"already built: llama.cpp {found.commit} for llama-cpp-python {found.binding_version} "
              f"({found.seconds / 60:.1f} min) in {found.bin_dir}")
        return 0
    done = build(stderr_progress(), server)
    what = "with RPC and llama-server" if server else "libraries with RPC"
    print(f"llama.cpp {done.commit} built ({what}) in {done.seconds / 60:.1f} min: {done.bin_dir}")
    return 0
