"""`effctx cells`: the cells this machine can run, backend x profile x model, with capabilities."""

from __future__ import annotations

import argparse
import json

from effctx_core.cli.options import add_runtime_options, model_from_args, profile_from_args


def add_parser(sub) -> None:
    cells = sub.add_parser("cells", help="the cells this machine can run: backend x profile x model, with capabilities")
    add_runtime_options(cells)
    cells.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from effctx_core.cells import list_cells

    profile = profile_from_args(args)
    path = model_from_args(args, profile)
    cells = list_cells(path, path.name)
    if args.json:
        print(json.dumps([c.to_dict() for c in cells], indent=2))
        return 0
    print(f"{'backend':9}{'profile':14}{'n_ctx':>7}  {'K/V':12}{'FA':4}{'policy':11}{'shift':7}{'exact':7}status")
    for c in cells:
        p = c.profile_record
        kv = f"{p.kv_cache_type_k}/{p.kv_cache_type_v}" if p else "-"
        caps = c.info.capabilities if c.info else None
        print(f"{c.backend:9}{c.profile:14}{(c.info.n_ctx if c.info else 0):>7}  {kv:12}"
              f"{('on' if p and p.flash_attn else 'off') if p else '-':4}{(p.residency.policy if p else '-'):11}"
              f"{('yes' if caps.position_shift.supported else 'no') if caps else '-':7}"
              f"{('yes' if caps.exact_snapshot.supported else 'no') if caps else '-':7}"
              f"{'ok: ' if c.runnable else 'unsupported: '}{c.reason}")
    return 0
