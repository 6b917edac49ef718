"""`effctx smoke passkey`: the quality smoke, a key hidden in filler at several lengths and depths."""

from __future__ import annotations

import argparse
import json

from effctx_core.cli.options import COUNT, add_runtime_options, number_list, prepared_model, profile_from_args
from effctx_core.errors import EffctxError


def add_parser(sub) -> None:
    smoke = sub.add_parser("smoke", help="quality smokes")
    smoke_sub = smoke.add_subparsers(dest="smoke", required=True)
    passkey = smoke_sub.add_parser("passkey", help="find a 5-digit key hidden in filler")
    add_runtime_options(passkey)
    passkey.add_argument("--lengths", default="512,2048,4000", metavar="N,N,…", help="prompt lengths in tokens")
    passkey.add_argument("--depths", default="0.1,0.5,0.9", metavar="D,D,…", help="needle depths, 0 (start) to 1 (end)")
    passkey.add_argument("--seeds", type=COUNT, default=1, metavar="N", help="keys per length and depth")
    passkey.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from effctx_core.bench.smoke import run_passkey
    from effctx_core.engine import SessionEngine

    lengths = number_list(args.lengths, int, "--lengths", 64, 1_000_000)
    depths = number_list(args.depths, float, "--depths", 0.0, 1.0)
    if args.seeds < 1:
        raise EffctxError("--seeds must be at least 1")
    profile = profile_from_args(args)
    engine = SessionEngine(prepared_model(args, profile), profile)

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
