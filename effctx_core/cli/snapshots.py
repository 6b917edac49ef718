"""`effctx snapshots ls|show ID|rm ID|gc|verify [--json]`: the persistent snapshot store.

IDs are unique prefixes of an entry's key, as with git. `verify` exits 1 when it
quarantined something; bad input (unknown or ambiguous ID) is an EffctxError.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Sequence

from effctx_core.errors import EffctxError
from effctx_core.snapshots.codec import describe
from effctx_core.snapshots.store import Quarantined, SnapshotStore, StoreUsage
from effctx_core.units import format_bytes
from effctx_core.user_files import folder_problem

EXIT_QUARANTINED = 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    snap = subparsers.add_parser("snapshots", help="the persistent snapshot store: ls, show, rm, gc, verify")
    sub = snap.add_subparsers(dest="snapshots_command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--dir", metavar="PATH", help="store directory (default: <user cache dir>/snapshots)")
        p.add_argument("--json", action="store_true")
        return p

    command("ls", "list entries, most recently used first")
    command("show", "one entry in full, its blob checked").add_argument("id", metavar="ID", help="a unique key prefix")
    rm = command("rm", "remove an entry")
    rm.add_argument("id", metavar="ID", help="a unique key prefix")
    rm.add_argument("--force", action="store_true", help="also when saved snapshot trees reference it")
    command("gc", "evict to the budget, remove dead writers' temp files, reconcile the index")
    command("verify", "check every blob; quarantine bad ones (exit 1 if any)")
    return snap


def run(args: argparse.Namespace) -> int:
    store = SnapshotStore(Path(args.dir).expanduser() if args.dir else None)
    # A store that is not there is not an empty one: "0 ok" would be a false all-clear.
    # Only the default store may be missing (nothing was cached yet).
    if (problem := folder_problem(store.root, "the snapshot store")) is not None:
        raise EffctxError(problem)
    if args.dir and not store.root.exists():
        raise EffctxError(f"no snapshot store at {store.root} (the folder does not exist)")
    return _COMMANDS[args.snapshots_command](store, args)


# --------------------------------------------------------------------------- commands


def _ls(store: SnapshotStore, args: argparse.Namespace) -> int:
    entries = store.ls()
    usage = store.usage()
    if args.json:
        _print_json({**usage.to_dict(), "entries": [e.to_dict() for e in entries]})
        return 0
    if not entries:
        print(f"no snapshots in {store.root}")
    else:
        width = store.unique_prefix_length()
        rows = [("ID", "IDENTITY", "TOKENS", "SIZE", "LAST USED", "REFS")]
        rows += [(e.key[:width], e.identity[:8], str(e.n_tokens), format_bytes(e.bytes), _when(e.last_used),
                  str(len(e.refs))) for e in entries]
        print(_table(rows, right=frozenset({2, 3, 5})))
    print(_usage_line(usage))
    return 0


def _show(store: SnapshotStore, args: argparse.Namespace) -> int:
    key = store.resolve(args.id)
    entry = store.info(key)
    peek = store.peek(key)  # reads and checks the whole blob; quarantines a bad one
    payload = describe(peek.payload) or {"kind": "opaque", "bytes": len(peek.payload)}
    if args.json:
        _print_json({**entry.to_dict(), "file_bytes": peek.file_bytes, "payload": payload, "integrity": "ok"})
        return 0
    rows = [
        ("key", key),
        ("identity", entry.identity),
        ("tokens", f"{entry.n_tokens} (sha256 {entry.token_hash})"),
        ("size", f"{format_bytes(entry.bytes)} ({entry.bytes} bytes)"),
        ("created", _when(entry.created)),
        ("last used", _when(entry.last_used)),
        ("refs", ", ".join(entry.refs) or "none"),
        ("meta", json.dumps(entry.meta, sort_keys=True) if entry.meta else "none"),
        ("payload", _payload_line(payload)),
        ("integrity", "ok (header, token, meta and payload checksums match)"),
    ]
    print(_table(rows))
    return 0


def _rm(store: SnapshotStore, args: argparse.Namespace) -> int:
    key = store.resolve(args.id)
    removed = store.rm(key, force=args.force)
    if args.json:
        _print_json({"removed": removed.to_dict() if removed else {"key": key}})
        return 0
    detail = f" ({removed.n_tokens} tokens, {format_bytes(removed.bytes)})" if removed else ""
    dropped = f"; dropped refs of {', '.join(removed.refs)}" if removed and removed.refs else ""
    print(f"removed {key[:12]}{detail}{dropped}")
    return 0


def _gc(store: SnapshotStore, args: argparse.Namespace) -> int:
    report = store.gc()
    if args.json:
        _print_json(report.to_dict())
        return 0
    print(f"evicted {_count(len(report.evicted), 'snapshot')} ({format_bytes(report.freed_bytes)}), "
          f"removed {_count(len(report.temp_removed), 'stale temp file')}, "
          f"adopted {len(report.adopted)}, dropped {len(report.dropped)} index entries, "
          f"purged {len(report.quarantine_purged)} from quarantine")
    for q in report.quarantined:
        print(_quarantine_line(q))
    print(_usage_line(report.usage))
    return 0


def _verify(store: SnapshotStore, args: argparse.Namespace) -> int:
    report = store.verify()
    code = 0 if report.clean else EXIT_QUARANTINED
    if args.json:
        _print_json(report.to_dict())
        return code
    print(f"checked {_count(report.checked, 'file')}: {report.ok} ok, {len(report.quarantined)} quarantined")
    for q in report.quarantined:
        print(_quarantine_line(q))
    for label, keys in (("adopted", report.adopted), ("dropped", report.dropped), ("reindexed", report.reindexed)):
        for key in keys:
            print(f"{label} {key[:12]}")
    for owner, key in report.dangling_refs:
        print(f"dangling ref: {owner} -> {key[:12]} (no such entry)")
    return code


_COMMANDS = {"ls": _ls, "show": _show, "rm": _rm, "gc": _gc, "verify": _verify}


# --------------------------------------------------------------------------- formatting


def _print_json(data: dict) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _usage_line(usage: StoreUsage) -> str:
    line = (f"{_count(usage.entries, 'snapshot')}, {format_bytes(usage.total_bytes)} of "
            f"{format_bytes(usage.budget_bytes)} budget ({usage.budget_source})")
    if usage.over_budget_bytes:
        line += (f"; over budget by {format_bytes(usage.over_budget_bytes)}: saved trees reference "
                 f"{format_bytes(usage.referenced_bytes)}")
    return line


def _quarantine_line(q: Quarantined) -> str:
    where = f"-> {q.moved_to}" if q.moved_to else "(left in place: the store is not writable)"
    return f"quarantined {q.name}: {q.reason} {where}"


def _payload_line(payload: dict) -> str:
    if payload["kind"] != "session":
        return f"{payload['bytes']} bytes, not a session snapshot"
    logits = "none" if payload["logits_bytes"] is None else format_bytes(payload["logits_bytes"])
    pending = f", {payload['pending_tokens']} pending token(s) after the state" if payload["pending_tokens"] else ""
    return f"session snapshot: state {format_bytes(payload['state_bytes'])}, logits {logits}{pending}"


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _table(rows: Sequence[tuple[str, ...]], right: frozenset[int] = frozenset()) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
