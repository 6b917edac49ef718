"""`effctx profiles`: the runtime profiles, listed or one shown resolved."""

from __future__ import annotations

import argparse
import json
import sys

from effctx_core.backends.profile_loader import available_profiles, legacy_settings, load_profile
from effctx_core.profiles import Profile


def add_parser(sub) -> None:
    profiles = sub.add_parser("profiles", help="list runtime profiles, or show one")
    profiles.add_argument("name", nargs="?", metavar="NAME|PATH", help="show this profile, resolved")
    profiles.add_argument("--json", action="store_true")


def profile_dict(profile: Profile) -> dict:
    data = legacy_settings(profile)
    data["n_threads"] = profile.n_threads
    return data


def run(args: argparse.Namespace) -> int:
    if args.name:
        profile = load_profile(args.name, note=lambda line: print(f"effctx: note: {line}", file=sys.stderr))
        data = profile_dict(profile)
        if args.json:
            print(json.dumps(data, indent=2))
            return 0
        residency = data.pop("residency")
        rows = list(data.items()) + [(f"residency.{k}", v) for k, v in residency.items()]
        for key, value in rows:
            print(f"{key:24} {value}")
        return 0
    found = available_profiles()
    rows = []
    for name, source in found.items():
        profile = load_profile(source if source != "built-in" else name)
        rows.append({"name": name, "source": source, "description": profile.description})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:{width}}  {r['description']}  [{r['source']}]")
    return 0
