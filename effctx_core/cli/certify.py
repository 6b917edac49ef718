"""`effctx certify`: measure cells on this machine, gate them, write their certificates."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from effctx_core.cli.options import (
    AUTO_PROFILE,
    add_runtime_options,
    number,
    prepared_model,
    profiles_from_args,
    stdout_console,
    step_progress,
)
from effctx_core.errors import EffctxError
from effctx_core.profiles import Profile

EXIT_INCOMPLETE = 3  # --max-minutes stopped the run at a stage boundary: run it again to go on


def add_parser(sub) -> None:
    certify = sub.add_parser("certify", help="measure cells on this machine against the quality gates and write "
                                             "their certificates (--quick: a few minutes)")
    add_runtime_options(certify, profile_default="every built-in profile a backend of this build runs; a,b,… names "
                                                  "several")
    certify.set_defaults(profile=None)
    plans = certify.add_mutually_exclusive_group()
    plans.add_argument("--quick", action="store_true", help="the quick plan: two passkey lengths, the agent loop "
                                                            "without its control, four throughput rounds")
    plans.add_argument("--long", action="store_true",
                       help="the full plan on each cell allocated up to the model's trained context (32,768 on the "
                            "default model), where this machine's memory holds it")
    certify.add_argument("--max-minutes", type=number(float, above=0), metavar="M",
                         help="start no stage after M minutes; the finished stages are kept, and the same command "
                              "goes on from there")
    certify.add_argument("--ttft-budget", type=number(float, above=0), metavar="S",
                         help="the TTFT budget of the latency-budgeted effective context, in seconds (default 10); "
                              "a resumed certification keeps what it measured under another budget")
    certify.add_argument("--json", action="store_true")


def _default_profiles() -> str:
    """Every built-in profile."""
    from effctx_core.backends.profile_loader import available_profiles

    return ",".join(n for n, source in available_profiles().items() if source == "built-in")


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from effctx_core.backends.registry import get_backend
    from effctx_core.certify.matrix import here_for, not_counted, stored_documents
    from effctx_core.certify.plan import FULL, LONG, QUICK
    from effctx_core.certify.runner import Certifier, OutOfTime
    from effctx_core.certify.store import CertificateStore
    from effctx_core.cli.task_table import task_table

    if args.profile is None:
        args.profile = _default_profiles()
    if AUTO_PROFILE in (name.strip() for name in args.profile.split(",")):
        raise EffctxError("certify measures named profiles; --profile auto picks among certified ones")
    if args.long and args.n_ctx is not None:
        raise EffctxError("--long allocates the model's trained context: give it or --n-ctx, not both")
    profiles = profiles_from_args(args)
    models = [prepared_model(args, profile) for profile in profiles]
    if args.long:
        profiles = [long_profile(models[0], profile) for profile in profiles]
    if len(set(models)) > 1:
        raise EffctxError("certify runs one model at a time: the profiles name different model files")
    store = CertificateStore()
    plan = QUICK if args.quick else LONG if args.long else FULL
    if args.ttft_budget is not None:
        plan = replace(plan, ttft_budget_ms=args.ttft_budget * 1000)
    documents, damaged = stored_documents(store)
    for line in damaged:
        print(f"effctx: damaged certificate (left in place): {line}", file=sys.stderr)
    done = []
    with step_progress(args.json) as progress:
        certifier = Certifier(models[0], store, plan, progress,
                              note=lambda line: print(line, file=sys.stderr, flush=True), max_minutes=args.max_minutes)
        for profile in profiles:
            why = not_counted(documents, here_for(get_backend(profile.backend).describe(models[0], profile), profile))
            if why is not None:
                print(f"effctx: {profile.name}: the stored certificate does not count here ({why}): measuring it again",
                      file=sys.stderr, flush=True)
            try:
                done.append(certifier.certify(profile))
            except OutOfTime as stopped:
                print(f"effctx: {stopped}", file=sys.stderr, flush=True)
                return EXIT_INCOMPLETE
    if args.json:
        print(json.dumps([{"profile": c.profile, "path": str(c.path), "resumed": list(c.resumed), **c.document}
                          for c in done], indent=2))
        return 0
    name = "quick" if plan.quick else "long" if plan.long else "full"
    table = Table(title=f"certificates ({name} plan) in {store.root}", title_justify="left")
    for column in ("profile", "backend", "status", "certified", "allocated", "prefill tok/s", "decode tok/s",
                   "engine/raw", "passkey", "NLL Δ"):
        table.add_column(column, justify="left" if column in ("profile", "backend", "status") else "right")
    for c in done:
        d = c.document
        engine, ratio = d["throughput"]["engine"], d["throughput"]["engine_raw"]
        passkey = " ".join(f"{r['found']}/{r['trials']}" for r in d["quality"]["passkey"]["by_length"])
        delta = d["quality"]["nll"]["delta"]
        table.add_row(c.profile, d["cell"]["backend"], d["status"] if d["status"] == "certified"
                      else f"failed ({d['failed_gate']})", str(d["context"]["certified"] or "-"),
                      str(d["context"]["allocated"]), f"{engine['prefill_tps']:.0f}", f"{engine['decode_tps']:.1f}",
                      f"{ratio['prefill']:.2f}/{ratio['decode']:.2f}", passkey,
                      "-" if delta is None else f"{delta:+.4f}")
    console = stdout_console()
    console.print(table)
    for c in done:
        resumed = f" (resumed: {', '.join(c.resumed)})" if c.resumed else ""
        console.print(f"{c.profile}: {c.document['reason']}{resumed}", highlight=False)
        tasks = task_table(c.profile, c.document)
        if tasks is not None:
            console.print(tasks)
    return 0


def long_profile(model: Path, profile: Profile) -> Profile:
    """The profile allocating the model's trained context, or what this machine's memory
    holds when that is less; said in one line."""
    from effctx_core.backends.registry import get_backend
    from effctx_core.certify.runner import memory_limit

    info = get_backend(profile.backend).describe(model, profile)
    trained = info.facts.context_length
    memory = memory_limit(info, profile)
    n_ctx = trained if memory is None or memory >= trained else memory - memory % 256
    why = ("the model's trained context" + (f"; memory holds {memory:,}" if memory is not None else "")
           if n_ctx == trained else f"what memory holds now, below the trained {trained:,}")
    print(f"effctx: {profile.name}: allocating {n_ctx:,} tokens ({why})", file=sys.stderr, flush=True)
    return replace(profile, n_ctx=n_ctx)
