"""`effctx certify`: measure cells on this machine, gate them, write their certificates."""

from __future__ import annotations

import argparse
import json
import sys

from effctx_core.cli.options import (
    AUTO_PROFILE,
    add_runtime_options,
    prepared_model,
    profiles_from_args,
    stdout_console,
    step_progress,
)
from effctx_core.errors import EffctxError


def add_parser(sub) -> None:
    certify = sub.add_parser("certify", help="measure cells on this machine against the quality gates and write "
                                             "their certificates (--quick: a few minutes)")
    add_runtime_options(certify, profile_default="every built-in profile a backend of this build runs; a,b,… names "
                                                  "several")
    certify.set_defaults(profile=None)
    certify.add_argument("--quick", action="store_true", help="the quick plan: two passkey lengths, the agent loop "
                                                              "without its control, four throughput rounds")
    certify.add_argument("--json", action="store_true")


def _default_profiles() -> str:
    """Every built-in profile."""
    from effctx_core.backends.profile_loader import available_profiles

    return ",".join(n for n, source in available_profiles().items() if source == "built-in")


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from effctx_core.backends.registry import get_backend
    from effctx_core.certify.matrix import here_for, not_counted, stored_documents
    from effctx_core.certify.plan import FULL, QUICK
    from effctx_core.certify.runner import Certifier
    from effctx_core.certify.store import CertificateStore

    if args.profile is None:
        args.profile = _default_profiles()
    if AUTO_PROFILE in (name.strip() for name in args.profile.split(",")):
        raise EffctxError("certify measures named profiles; --profile auto picks among certified ones")
    profiles = profiles_from_args(args)
    models = [prepared_model(args, profile) for profile in profiles]
    if len(set(models)) > 1:
        raise EffctxError("certify runs one model at a time: the profiles name different model files")
    store = CertificateStore()
    plan = QUICK if args.quick else FULL
    documents, damaged = stored_documents(store)
    for line in damaged:
        print(f"effctx: damaged certificate (left in place): {line}", file=sys.stderr)
    done = []
    with step_progress(args.json) as progress:
        certifier = Certifier(models[0], store, plan, progress,
                              note=lambda line: print(line, file=sys.stderr, flush=True))
        for profile in profiles:
            why = not_counted(documents, here_for(get_backend(profile.backend).describe(models[0], profile), profile))
            if why is not None:
                print(f"effctx: {profile.name}: the stored certificate does not count here ({why}): measuring it again",
                      file=sys.stderr, flush=True)
            done.append(certifier.certify(profile))
    if args.json:
        print(json.dumps([{"profile": c.profile, "path": str(c.path), "resumed": list(c.resumed), **c.document}
                          for c in done], indent=2))
        return 0
    table = Table(title=f"certificates ({'quick' if plan.quick else 'full'} plan) in {store.root}", title_justify="left")
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
    return 0
