"""`effctx sessions ls|show|export|import|rm`: saved snapshot trees (named session files)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from effctx_core.cli.options import session_name
from effctx_core.engine import session_owner
from effctx_core.errors import EffctxError
from effctx_core.snapshots import SnapshotStore
from effctx_core.snapshots.tree import SnapshotTree
from effctx_core.snapshots.tree_file import (
    check_export_target,
    check_name,
    list_sessions,
    load_tree,
    read_tree_file,
    save_tree,
    session_path,
    sessions_dir,
    write_tree_file,
)
from effctx_core.user_files import folder_problem


def add_parser(sub) -> argparse.ArgumentParser:
    sessions = sub.add_parser("sessions", help="saved conversation trees: list, show, export, import, remove")
    sessions_sub = sessions.add_subparsers(dest="sessions_command", required=True)
    ls = sessions_sub.add_parser("ls", help="the saved sessions")
    ls.add_argument("--json", action="store_true")
    show = sessions_sub.add_parser("show", help="one session's tree of nodes")
    show.add_argument("name", type=session_name)
    show.add_argument("--json", action="store_true")
    export = sessions_sub.add_parser("export", help="write a session to one file (states stay in the store)")
    export.add_argument("name", type=session_name)
    export.add_argument("file")
    imp = sessions_sub.add_parser("import", help="read a session file written by export")
    imp.add_argument("file")
    imp.add_argument("--name", type=session_name, help="save it under this name (default: the file's name)")
    rm = sessions_sub.add_parser("rm", help="delete a saved session and release its states in the store")
    rm.add_argument("name", type=session_name)
    return sessions


def _summary(name: str, tree: SnapshotTree, missing: dict[str, str]) -> dict:
    nodes = list(tree)
    return {
        "name": name,
        "nodes": len(nodes),
        "states": len(tree.blobs() - missing.keys()),  # what the store holds, not what the tree names
        "states_missing": _reasons(missing),
        "longest_tape": max((tree.tape_length(n.id) for n in nodes), default=0),
        "current": tree.current,
        "created": min((n.created for n in nodes), default=None),
    }


def _reasons(missing: dict[str, str]) -> dict[str, int]:
    """How many states are missing, by why."""
    counts: dict[str, int] = {}
    for why in missing.values():
        counts[why] = counts.get(why, 0) + 1
    return dict(sorted(counts.items()))


def _missing_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} missing: {why}" for why, n in counts.items())


def _node_state(blob: str | None, missing: dict[str, str]) -> str:
    if blob is None:
        return "no state"
    return f"state missing: {missing[blob]}" if blob in missing else "state"


def _ls(args: argparse.Namespace, store: SnapshotStore) -> int:
    rows = []
    for name in list_sessions():
        tree = load_tree(name)
        rows.append(_summary(name, tree, store.missing_states(tree.blobs())))
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no saved sessions")
    else:
        width = max(len(r["name"]) for r in rows)
        for r in rows:
            gone = f" ({_missing_text(r['states_missing'])})" if r["states_missing"] else ""
            print(f"{r['name']:{width}}  {r['nodes']:>4} nodes  {r['states']:>4} states{gone}  "
                  f"longest tape {r['longest_tape']} tokens")
    return 0


def _show(args: argparse.Namespace, store: SnapshotStore) -> int:
    tree = load_tree(args.name)
    missing = store.missing_states(tree.blobs())
    if args.json:
        print(json.dumps({**_summary(args.name, tree, missing), "tree": [
            {"id": n.id, "parent": n.parent, "label": n.label, "kind": n.kind, "tokens": tree.tape_length(n.id),
             "own_tokens": len(n.own_tokens), "blob": n.blob, "state": _node_state(n.blob, missing),
             "metrics": n.metrics} for n in tree]}, indent=2))
        return 0
    for node in tree:
        indent = "  " * tree.depth(node.id)
        mark = "*" if node.id == tree.current else " "
        print(f"{mark} {indent}{node.id} {node.label!r} [{node.kind}] {tree.tape_length(node.id)} tokens, "
              f"{_node_state(node.blob, missing)}")
    return 0


def run(args: argparse.Namespace) -> int:
    command = args.sessions_command
    if (problem := folder_problem(sessions_dir(), "the sessions folder")) is not None:
        raise EffctxError(problem)
    if command == "ls":
        return _ls(args, SnapshotStore())
    if command == "show":
        return _show(args, SnapshotStore())
    if command == "export":
        target = check_export_target(Path(args.file))
        tree = load_tree(args.name)
        write_tree_file(tree, target)
        print(f"exported {args.name} ({len(tree)} nodes) to {args.file}; saved states stay in this machine's store")
        return 0
    if command == "import":
        name = check_name(Path(args.file).stem if args.name is None else args.name)
        tree = read_tree_file(Path(args.file))
        if session_path(name).exists():
            raise EffctxError(f"a session named {name!r} exists already (choose another with --name)")
        save_tree(tree, name)
        print(f"imported {len(tree)} nodes as session {name}")
        return 0
    if command == "rm":
        path = session_path(args.name)
        if not path.exists():
            raise EffctxError(f"no saved session named {args.name!r}")
        released = SnapshotStore().remove_refs(session_owner(args.name))
        path.unlink()
        print(f"removed session {args.name}; {released} saved state{'' if released == 1 else 's'} "
              "released to the store's budget")
        return 0
    raise EffctxError(f"unknown sessions command {command!r}")


