"""`effctx bench overhead|planner` and `effctx smoke passkey`: figures and the quality beside them."""

from __future__ import annotations

import argparse
import json
import sys

from .cli_options import COUNT, add_runtime_options, model_from_args, profile_from_args
from .contract import EffctxError


def add_parsers(sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    overhead = bench_sub.add_parser("overhead", help="engine throughput divided by a plain llama-cpp-python loop")
    add_runtime_options(overhead)
    overhead.add_argument("--prompt-tokens", type=COUNT, default=1024, metavar="N")
    overhead.add_argument("--decode-tokens", type=COUNT, default=64, metavar="N")
    overhead.add_argument("--rounds", type=COUNT, default=6, metavar="N")
    overhead.add_argument("--json", action="store_true")

    smoke = sub.add_parser("smoke", help="quality smokes")
    smoke_sub = smoke.add_subparsers(dest="smoke", required=True)
    passkey = smoke_sub.add_parser("passkey", help="find a 5-digit key hidden in filler")
    add_runtime_options(passkey)
    passkey.add_argument("--lengths", default="512,2048,4000", metavar="N,N,…", help="prompt lengths in tokens")
    passkey.add_argument("--depths", default="0.1,0.5,0.9", metavar="D,D,…", help="needle depths, 0 (start) to 1 (end)")
    passkey.add_argument("--seeds", type=COUNT, default=1, metavar="N", help="keys per length and depth")
    passkey.add_argument("--json", action="store_true")

    cell = bench_sub.add_parser("cell", help="a cell's throughput with the passkey smoke beside it "
                                              "(the console's benchmark screen, headless)")
    add_runtime_options(cell)
    for option in ("--prompt-tokens", "--decode-tokens", "--rounds", "--passkey-tokens"):
        cell.add_argument(option, type=COUNT, metavar="N", help="(default: as in the console)")
    cell.add_argument("--depths", metavar="D,D,…", help="passkey needle depths (default: as in the console)")
    cell.add_argument("--json", action="store_true")

    # Drawn with Textual, so effctx_tui's entry point runs it; listed here for --help.
    bench_sub.add_parser("residency", help="time a redraw of the residency view on a 128k-token tape")
    planner = bench_sub.add_parser("planner", help="time each residency policy on a long tape")
    planner.add_argument("--tokens", type=COUNT, default=1_000_000, metavar="N")
    planner.add_argument("--block-size", type=COUNT, default=32, metavar="N")
    planner.add_argument("--json", action="store_true")


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench == "planner":
        return cmd_bench_planner(args)
    if args.bench == "cell":
        return cmd_bench_cell(args)
    if args.bench == "residency":
        raise EffctxError("bench residency draws with Textual: run it as `effctx bench residency`")
    from .bench.overhead import run_overhead

    profile = profile_from_args(args)
    report = run_overhead(
        model_from_args(args, profile), profile, args.prompt_tokens, args.decode_tokens, args.rounds,
        progress=lambda msg, done, total: print(msg, file=sys.stderr, flush=True) if not args.json else None,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print(report.table())
    return 0


def cmd_bench_planner(args: argparse.Namespace) -> int:
    from .bench.planner import run_planner_benchmark

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


def cmd_bench_cell(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .bench.cell import CellBenchPlan, run_cell_bench

    changes = {name: value for name in ("prompt_tokens", "decode_tokens", "rounds", "passkey_tokens")
               if (value := getattr(args, name)) is not None}
    if any(value < 1 for value in changes.values()):
        raise EffctxError("--prompt-tokens, --decode-tokens, --rounds and --passkey-tokens must be at least 1")
    if args.depths is not None:
        changes["depths"] = tuple(_number_list(args.depths, float, "--depths", 0.0, 1.0))
    plan = replace(CellBenchPlan(), **changes)
    profile = profile_from_args(args)
    report = run_cell_bench(
        model_from_args(args, profile), profile, plan,
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


def _number_list(text: str, kind, name: str, low: float, high: float) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise EffctxError(f"{name} must be a comma-separated list of numbers, not {text!r}") from None
    if not values or any(not low <= v <= high for v in values):
        raise EffctxError(f"{name} must hold numbers from {low} to {high}, not {text!r}")
    return values


def cmd_smoke(args: argparse.Namespace) -> int:
    from .bench.smoke import run_passkey
    from .engine import SessionEngine

    lengths = _number_list(args.lengths, int, "--lengths", 64, 1_000_000)
    depths = _number_list(args.depths, float, "--depths", 0.0, 1.0)
    if args.seeds < 1:
        raise EffctxError("--seeds must be at least 1")
    profile = profile_from_args(args)
    engine = SessionEngine(model_from_args(args, profile), profile)

    def show(trial) -> None:
        if not args.json:
            mark = "ok  " if trial.correct else "FAIL"
            print(f"{mark} length {trial.length:>6}  depth {trial.depth:.2f}  key {trial.key}  "
                  f"answer {trial.answer[:28]!r:32} {trial.verdict}", flush=True)

    try:
        engine.open()
        trials = run_passkey(engine, lengths, depths, args.seeds, progress=show)
        policy = engine.residency.policy
    finally:
        engine.close()
    found = sum(t.correct for t in trials)
    if args.json:
        print(json.dumps({
            "profile": profile.name, "policy": policy, "found": found, "trials_run": len(trials),
            "trials": [t.to_dict() for t in trials],
        }, indent=2))
    else:
        strict = sum(t.strict for t in trials)
        print(f"found {found}/{len(trials)} (strict: answer starts with the key {strict}/{len(trials)}); "
              f"profile {profile.name}, policy {policy}")
    return 0
