"""`effctx bench overhead|cell|ttft|run|api|verdict|planner|prefix-index` (and the console's `residency` and
`keys`, which its entry point hands in): throughput figures, with the quality beside them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from effctx_core.bench.api_run import SERVERS
from effctx_core.cli.options import (
    AUTO_PROFILE,
    COUNT,
    add_runtime_options,
    number,
    number_list,
    prepared_model,
    profile_from_args,
    profiles_from_args,
    stdout_console,
    step_progress,
)
from effctx_core.errors import EffctxError

if TYPE_CHECKING:
    from effctx_core.certify.verdict import Verdict

# A benchmark a front end runs (the console's redraw and key timings, drawn with Textual):
# its help line and its own entry point, which takes the rest of the command line.
FrontEndBench = tuple[str, Callable[[list[str]], int]]


def add_parser(sub, front_ends: Mapping[str, FrontEndBench] | None = None) -> None:
    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for name, (help_text, main) in (front_ends or {}).items():
        # Its options are its own: the rest of the command line goes to it unparsed.
        bench_sub.add_parser(name, help=help_text, add_help=False).set_defaults(front_end=main)
    overhead = bench_sub.add_parser("overhead", help="engine throughput divided by a plain llama-cpp-python loop")
    add_runtime_options(overhead)
    overhead.add_argument("--prompt-tokens", type=COUNT, default=1024, metavar="N")
    overhead.add_argument("--decode-tokens", type=COUNT, default=64, metavar="N")
    overhead.add_argument("--rounds", type=COUNT, default=6, metavar="N")
    overhead.add_argument("--json", action="store_true")

    cell = bench_sub.add_parser("cell", help="a cell's throughput with the passkey smoke beside it "
                                              "(the console's benchmark screen, headless)")
    add_runtime_options(cell)
    for option in ("--prompt-tokens", "--decode-tokens", "--rounds", "--passkey-tokens"):
        cell.add_argument(option, type=COUNT, metavar="N", help="(default: as in the console)")
    cell.add_argument("--depths", metavar="D,D,…", help="passkey needle depths (default: as in the console)")
    cell.add_argument("--json", action="store_true")

    ttft = bench_sub.add_parser("ttft", help="time to first token cold, warm from the runtime's own cache and "
                                              "warm from effctx's prefix snapshot cache, with the passkey answer beside")
    add_runtime_options(ttft)
    ttft.set_defaults(profile="exact")
    ttft.add_argument("--lengths", default="1024", metavar="N,N,…", help="passkey prompt lengths in tokens (default 1024)")
    ttft.add_argument("--json", action="store_true")

    workload = bench_sub.add_parser("run", help="a workload (agent loop, prefix edit, long document, long decode, "
                                                 "branching) through effctx beside the library a user would run")
    workload.add_argument("workload", metavar="WORKLOAD", help="a built-in workload name or a workload .toml file")
    add_runtime_options(workload)
    workload.add_argument("--no-control", action="store_true", help="effctx alone, without the library's control run")
    workload.add_argument("--control", metavar="BACKEND", choices=("llama-server",),
                          help="the control a user would run instead: llama-server, a server of effctx's llama.cpp "
                               "build on the profile's settings (default: the profile's own library)")
    workload.add_argument("--json", action="store_true")

    api = bench_sub.add_parser("api", help="OpenAI-compatible servers (effctx api, llama-server, llama-cpp-python's "
                                             "server) on the same model, one at a time: TTFT and reported prompt "
                                             "caching over agents' conversations")
    # Not `workload`: --profile auto reads that as the certified workload to choose a cell for.
    api.add_argument("api_workload", metavar="WORKLOAD", help="two-agents or many-agents")
    add_runtime_options(api)
    api.add_argument("--servers", default=",".join(SERVERS), metavar="S,S,…",
                     help=f"the servers, in this order; the others are compared with the first "
                          f"(default: {','.join(SERVERS)})")
    api.add_argument("--turns", type=COUNT, metavar="N", help="turns a conversation (default: the workload's)")
    api.add_argument("--max-tokens", type=COUNT, metavar="N", help="tokens a reply (default: the workload's, 16)")
    api.add_argument("--restart", action="store_true",
                     help="restart every server before every request but the first (effctx keeps its state folder)")
    api.add_argument("--ready-timeout", type=number(float, above=0), default=120.0, metavar="S",
                     help="seconds a server may take to load its model (default 120)")
    api.add_argument("--json", metavar="FILE", help="also write the records to FILE as JSON")

    verdict = bench_sub.add_parser("verdict", help="keep or drop each certified cell against the baseline cell, "
                                                    "with the evidence")
    add_runtime_options(verdict)
    verdict.add_argument("--baseline", default=None, metavar="PROFILE", help="the baseline cell (default: exact)")
    verdict.add_argument("--json", action="store_true")

    planner = bench_sub.add_parser("planner", help="time each residency policy on a long tape")
    planner.add_argument("--tokens", type=COUNT, default=1_000_000, metavar="N")
    planner.add_argument("--block-size", type=COUNT, default=32, metavar="N")
    planner.add_argument("--json", action="store_true")
    prefix = bench_sub.add_parser("prefix-index", help="time a longest-prefix lookup among stored states, through the "
                                                        "prefix index and the old way (in memory: no store is written)")
    prefix.add_argument("--states", type=COUNT, default=10_000, metavar="N", help="stored states (default 10000)")
    prefix.add_argument("--tokens", type=COUNT, default=32_768, metavar="N",
                        help="prompt tokens, the longest state's too (default 32768)")
    prefix.add_argument("--lookups", type=COUNT, default=100, metavar="N", help="prompts timed (default 100)")
    prefix.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    if args.bench == "verdict":
        return cmd_bench_verdict(args)
    from effctx_core.bench.measuring import measuring

    # Every other bench command times something: `effctx certify` sees it and does not
    # count a timed stage it overlapped.
    with measuring(f"effctx bench {args.bench}"):
        return _measure(args)


def _measure(args: argparse.Namespace) -> int:
    front_end = getattr(args, "front_end", None)
    if front_end is not None:
        return int(front_end(args.rest))
    if args.bench == "planner":
        return cmd_bench_planner(args)
    if args.bench == "prefix-index":
        return cmd_bench_prefix_index(args)
    if args.bench == "cell":
        return cmd_bench_cell(args)
    if args.bench == "ttft":
        return cmd_bench_ttft(args)
    if args.bench == "run":
        return cmd_bench_run(args)
    if args.bench == "api":
        return cmd_bench_api(args)
    from effctx_core.bench.overhead import run_overhead

    profile = profile_from_args(args)
    report = run_overhead(
        prepared_model(args, profile), profile, args.prompt_tokens, args.decode_tokens, args.rounds,
        progress=lambda msg, done, total: print(msg, file=sys.stderr, flush=True) if not args.json else None,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print(report.table())
    return 0


def cmd_bench_planner(args: argparse.Namespace) -> int:
    from effctx_core.bench.planner import run_planner_benchmark

    if args.tokens < 1 or args.block_size < 1:
        raise EffctxError("--tokens and --block-size must be positive")
    rows = run_planner_benchmark(args.tokens, args.block_size)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{rows[0]['tokens']} tokens in {rows[0]['blocks']} blocks of {args.block_size}; budget = a tenth")
    print(f"{'policy':16}{'median ms':>11}{'p95 ms':>9}")
    for r in rows:
        print(f"{r['policy']:16}{r['median_ms']:>11.3f}{r['p95_ms']:>9.3f}")
    return 0


def cmd_bench_prefix_index(args: argparse.Namespace) -> int:
    from effctx_core.bench.prefix_index import run_prefix_index_benchmark

    report = run_prefix_index_benchmark(args.states, args.tokens, args.lookups)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        old = report["stored_lengths"]
        print(f"{report['states']} stored states ({report['conversations']} conversations, {old['distinct_lengths']} "
              f"distinct lengths), {report['tokens']}-token prompts, blocks of {report['block_size']} tokens, "
              f"{report['lookups']} lookups")
        print(f"{'lookup':34}{'median ms':>11}{'p95 ms':>9}")
        for name, row in (("prefix index", report["prefix_index"]), ("a hash per stored length (before)", old)):
            print(f"{name:34}{row['median_ms']:>11.3f}{row['p95_ms']:>9.3f}")
        print(f"the index was built in {report['build_ms']:.0f} ms ({report['links']} links); "
              + ("both ways found the same states" if report["agree"] else "THE TWO WAYS DISAGREE"))
    if not report["agree"]:
        raise EffctxError("the prefix index and the stored-length lookup found different states")
    return 0


def cmd_bench_cell(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from effctx_core.bench.cell import CellBenchPlan, run_cell_bench

    changes = {name: value for name in ("prompt_tokens", "decode_tokens", "rounds", "passkey_tokens")
               if (value := getattr(args, name)) is not None}
    if any(value < 1 for value in changes.values()):
        raise EffctxError("--prompt-tokens, --decode-tokens, --rounds and --passkey-tokens must be at least 1")
    if args.depths is not None:
        changes["depths"] = tuple(number_list(args.depths, float, "--depths", 0.0, 1.0))
    plan = replace(CellBenchPlan(), **changes)
    profile = profile_from_args(args)
    report = run_cell_bench(
        prepared_model(args, profile), profile, plan,
        progress=lambda msg, done, total: None if args.json else print(f"[{done}/{total}] {msg}", file=sys.stderr, flush=True),
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print(report.throughput.table())
    for t in report.trials:
        print(f"{'ok  ' if t.correct else 'FAIL'} passkey length {t.length}  depth {t.depth:.2f}  key {t.key}  "
              f"answer {t.answer[:28]!r:32} {t.verdict}")
    print(report.summary())
    return 0


def cmd_bench_ttft(args: argparse.Namespace) -> int:
    """--profile takes a comma-separated list here; each is checked before any model loads."""
    from effctx_core.bench.ttft import run_ttft, ttft_table

    lengths = number_list(args.lengths, int, "--lengths", 64, 1_000_000)
    profiles = profiles_from_args(args)
    for profile in profiles:
        if max(lengths) + 64 > profile.n_ctx:
            raise EffctxError(f"--lengths {max(lengths)} does not fit profile {profile.name!r} (n_ctx {profile.n_ctx}) "
                              "with its answer")
    model = prepared_model(args, profiles[0])
    for profile in profiles[1:]:
        prepared_model(args, profile)
    rows = run_ttft(model, profiles, lengths, progress=lambda msg, done, total: None if args.json
                    else print(f"[{done}/{total}] {msg}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps([row.to_dict() for row in rows], indent=2))
        return 0
    print(ttft_table(rows))
    return 0


def cmd_bench_run(args: argparse.Namespace) -> int:
    """Every profile of `--profile a,b,…` on the workload, each turn beside the control."""

    from effctx_core.bench.workload_run import run_workload
    from effctx_core.bench.workload_text import curve_text, summary_lines, totals_table, turn_table
    from effctx_core.bench.workloads import load_workload

    if args.no_control and args.control:
        raise EffctxError("--no-control and --control exclude each other")
    workload = load_workload(args.workload)
    profiles = profiles_from_args(args)
    models = [prepared_model(args, profile) for profile in profiles]
    reports = []
    with step_progress(args.json) as progress:
        for profile, model in zip(profiles, models):
            reports.append(run_workload(model, profile, workload, control=not args.no_control, progress=progress,
                                        control_backend=args.control))
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
        return 0
    console = stdout_console()
    for report in reports:
        console.print(turn_table(report))
    console.print(totals_table(reports))
    for report in reports:
        for line in summary_lines(report):
            console.print(line, highlight=False)
    print(curve_text(reports, width=min(console.width, 100), color=sys.stdout.isatty()))
    return 0


def cmd_bench_api(args: argparse.Namespace) -> int:
    """Every server on the workload in turn, then one table of every request on each."""
    from dataclasses import replace

    from effctx_core.atomic import atomic_write_bytes
    from effctx_core.bench.api_run import ApiBenchSettings, api_table, check_servers, run_api_bench, summary_lines
    from effctx_core.bench.api_workload import load_api_workload
    from effctx_core.user_files import check_output_file

    workload = load_api_workload(args.api_workload)
    changes = {name: value for name in ("turns", "max_tokens") if (value := getattr(args, name)) is not None}
    workload = replace(workload, **changes)
    servers = check_servers(args.servers)
    json_path = check_output_file(args.json, "JSON file") if args.json else None
    profile = profile_from_args(args)
    settings = ApiBenchSettings(prepared_model(args, profile), profile.name if args.profile in (None, AUTO_PROFILE)
                                else args.profile, profile.n_ctx, profile.n_threads, args.restart, args.ready_timeout)
    with step_progress(False) as progress:
        report = run_api_bench(workload, servers, settings, progress)
    if json_path is not None:
        atomic_write_bytes(json_path, json.dumps(report.to_dict(), indent=2).encode())
    console = stdout_console()
    console.print(api_table(report))
    for line in summary_lines(report):
        console.print(line, highlight=False)
    return 0


def cmd_bench_verdict(args: argparse.Namespace) -> int:
    from effctx_core.certify.matrix import cell_matrix
    from effctx_core.certify.verdict import verdicts
    from effctx_core.cli.options import model_from_args
    from effctx_core.profiles import DEFAULT_PROFILE_NAME

    path = model_from_args(args, profile_from_args(args))
    found = verdicts(cell_matrix(path, path.name), args.baseline or DEFAULT_PROFILE_NAME)
    if args.json:
        print(json.dumps([v.to_dict() for v in found], indent=2))
        return 0
    print("\n".join(verdict_lines(found)))
    return 0


def verdict_lines(found: Sequence[Verdict]) -> list[str]:
    """Each cell's verdict in columns as wide as their longest name (a profile or backend
    name of any length keeps its gap), then its evidence."""
    profile_width = max((len(v.profile) for v in found), default=0) + 2
    backend_width = max((len(v.backend) for v in found), default=0) + 2
    lines = []
    for v in found:
        lines.append(f"{v.profile:{profile_width}}{v.backend:{backend_width}}{v.verdict}")
        lines += [f"    {line}" for line in v.evidence]
    return lines
