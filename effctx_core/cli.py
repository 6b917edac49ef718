"""Headless commands: `effctx info`, `effctx run`, `effctx bench overhead`, `effctx model`.

Bad input ends with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from .contract import DecodeConfig, EffctxError, ModelInfo
from .sessions_cli import add_parser as add_sessions_parser
from .sessions_cli import cmd_sessions
from .snapshots_cli import add_parser as add_snapshots_parser
from .snapshots_cli import cmd_snapshots
from .profiles import DEFAULT_PROFILE_NAME, Profile, available_profiles, load_profile

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + error
        raise EffctxError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="effctx", description="See and steer what a local LLM runtime keeps in context.")
    sub = parser.add_subparsers(dest="command")

    model_options = add_runtime_options

    info = sub.add_parser("info", help="model facts, digest, capabilities, context limits and KV capacity")
    model_options(info)
    info.add_argument("--memory", default="2GiB", metavar="SIZE",
                      help="memory budget for the KV capacity table, e.g. 512MiB, 2GiB (default 2GiB)")
    info.add_argument("--json", action="store_true")

    run = sub.add_parser("run", help="complete one prompt and report timings and token accounting")
    model_options(run)
    src = run.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", metavar="TEXT")
    src.add_argument("--prompt-file", metavar="FILE")
    run.add_argument("--prefix-file", metavar="FILE",
                     help="a stable prefix (system prompt, document) put before the prompt; its state is cached")
    run.add_argument("--no-prefix-cache", action="store_true", help="prefill the prefix without the prefix cache")
    run.add_argument("--max-tokens", type=int, default=64, metavar="N")
    run.add_argument("--temperature", type=float, default=0.0)
    run.add_argument("--top-p", type=float, default=1.0)
    run.add_argument("--seed", type=int)
    run.add_argument("--trace", metavar="FILE", help="write the engine's events as JSON Lines")
    run.add_argument("--json", action="store_true")

    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    overhead = bench_sub.add_parser("overhead", help="engine throughput divided by a plain llama-cpp-python loop")
    model_options(overhead)
    overhead.add_argument("--prompt-tokens", type=int, default=1024, metavar="N")
    overhead.add_argument("--decode-tokens", type=int, default=64, metavar="N")
    overhead.add_argument("--rounds", type=int, default=6, metavar="N")
    overhead.add_argument("--json", action="store_true")

    smoke = sub.add_parser("smoke", help="quality smokes")
    smoke_sub = smoke.add_subparsers(dest="smoke", required=True)
    passkey = smoke_sub.add_parser("passkey", help="find a 5-digit key hidden in filler")
    add_runtime_options(passkey)
    passkey.add_argument("--lengths", default="512,2048,4000", metavar="N,N,…", help="prompt lengths in tokens")
    passkey.add_argument("--depths", default="0.1,0.5,0.9", metavar="D,D,…", help="needle depths, 0 (start) to 1 (end)")
    passkey.add_argument("--seeds", type=int, default=1, metavar="N", help="keys per length and depth")
    passkey.add_argument("--json", action="store_true")

    cells = sub.add_parser("cells", help="the cells this machine can run: backend x profile x model, with capabilities")
    add_runtime_options(cells)
    cells.add_argument("--json", action="store_true")

    trace = sub.add_parser("trace", help="recorded engine traces")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True)
    export = trace_sub.add_parser("export", help="write a trace as Chrome/Perfetto trace-event JSON")
    export.add_argument("file", help="a JSON Lines trace written with --trace")
    export.add_argument("--perfetto", action="store_true", required=True, help="the output format (the only one)")
    export.add_argument("--output", "-o", metavar="OUT", help="where to write (default: FILE with .perfetto.json)")

    add_snapshots_parser(sub)
    add_sessions_parser(sub)

    profiles = sub.add_parser("profiles", help="list runtime profiles, or show one")
    profiles.add_argument("name", nargs="?", metavar="NAME|PATH", help="show this profile, resolved")
    profiles.add_argument("--json", action="store_true")

    # Drawn with Textual, so effctx_tui's entry point runs it; listed here for --help.
    bench_sub.add_parser("residency", help="time a redraw of the residency view on a 128k-token tape")
    planner = bench_sub.add_parser("planner", help="time each residency policy on a long tape")
    planner.add_argument("--tokens", type=int, default=1_000_000, metavar="N")
    planner.add_argument("--block-size", type=int, default=32, metavar="N")
    planner.add_argument("--json", action="store_true")

    model = sub.add_parser("model", help="the default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    model_sub.add_parser("prepare", help="assemble the embedded default model (once)")
    model_sub.add_parser("path", help="print the default model's path")
    return parser


def add_runtime_options(p: argparse.ArgumentParser) -> None:
    """The options every command that runs a model shares."""
    p.add_argument("--profile", metavar="NAME|PATH", help=f"a runtime profile (default: {DEFAULT_PROFILE_NAME})")
    p.add_argument("--model", metavar="PATH", help="a GGUF model file (default: the profile's, else the embedded Gemma 3 270M)")
    p.add_argument("--n-ctx", type=int, metavar="N", help="context size in tokens (overrides the profile)")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (overrides the profile; 0 = all free cores)")


def profile_from_args(args: argparse.Namespace) -> Profile:
    profile = load_profile(args.profile)
    changes = {}
    if args.n_ctx is not None:
        changes["n_ctx"] = args.n_ctx
    if args.threads is not None:
        changes["threads"] = args.threads
    return profile.with_changes(**changes) if changes else profile


def model_from_args(args: argparse.Namespace, profile: Profile) -> Path:
    from .models import resolve_model

    return resolve_model(args.model or profile.model, progress=_stderr_progress())


def _stderr_progress():
    """Progress for long set-up steps: a live line on a terminal, a few lines otherwise."""
    tty = sys.stderr.isatty()
    last = {"stage": None, "step": -1}

    def report(stage: str, done: int, total: int) -> None:
        pct = int(done * 100 / total) if total else 100
        if tty:
            end = "\n" if done >= total else ""
            print(f"\r{stage}: {pct:3d}% ({done >> 20} of {total >> 20} MiB)", end=end, file=sys.stderr, flush=True)
            return
        step = pct // 25
        if stage != last["stage"] or step != last["step"]:
            last.update(stage=stage, step=step)
            print(f"{stage}: {pct}%", file=sys.stderr, flush=True)

    return report


# --------------------------------------------------------------------------- commands


def info_dict(info: ModelInfo) -> dict:
    f = info.facts
    caps = info.capabilities
    return {
        "model": {
            "path": f.path,
            "name": f.name,
            "architecture": f.architecture,
            "file_bytes": f.file_bytes,
            "sha256": f.sha256,
            "n_layers": f.n_layers,
            "n_head": f.n_head,
            "n_head_kv": f.n_head_kv,
            "head_dim_k": f.head_dim_k,
            "head_dim_v": f.head_dim_v,
            "n_embd": f.n_embd,
            "vocab_size": f.vocab_size,
            "context_length": f.context_length,
            "sliding_window": f.sliding_window,
            "global_layers": list(f.global_layers),
            "swa_layers": list(f.swa_layers),
            "global_layers_rule": f.global_layers_rule,
            "bos_token_id": f.bos_token_id,
            "eos_token_id": f.eos_token_id,
            "add_bos": f.add_bos,
            "chat_template": f.chat_template,
            "chat_format": info.identity.chat_format,
        },
        "backend": {"name": info.backend, "version": info.backend_version},
        "identity": {**info.identity.to_dict(), "digest": info.identity.digest()},
        "n_ctx": info.n_ctx,
        "n_batch": info.n_batch,
        "capabilities": {
            "position_shift": caps.position_shift,
            "quantized_v_cache": caps.quantized_v_cache,
            "exact_snapshot_replay": caps.exact_snapshot_replay,
            "safe_rollback": caps.safe_rollback_tokens,
            "reasons": caps.reasons,
        },
        "limits": [{"name": lim.name, "tokens": lim.tokens, "reason": lim.reason} for lim in info.limits],
    }


def cmd_info(args: argparse.Namespace) -> int:
    from .backends.registry import get_backend
    from .capacity import LayerKVProfile, capacity_table, format_bytes, layer_profile_dict, parse_memory

    memory = parse_memory(args.memory)
    profile = profile_from_args(args)
    info = get_backend(profile.backend).describe(model_from_args(args, profile), profile)
    data = info_dict(info)
    data["profile"] = profile_dict(profile)
    layers = LayerKVProfile.from_facts(info.facts, profile.kv_cache_type_k, profile.kv_cache_type_v)
    data["layer_profile"] = {
        **layer_profile_dict(layers),
        "cache_bytes": layers.cache_bytes(info.n_ctx, profile.n_batch, profile.swa_full).total,
        "n_ctx": info.n_ctx,
        "swa_full": profile.swa_full,
    }
    data["capacity"] = {
        "memory_bytes": memory,
        "swa_full": profile.swa_full,
        "n_ctx_limit": None,
        "rows": capacity_table(info.facts, memory, None, profile.swa_full, profile.n_batch),
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    m = data["model"]
    print(f"model        {m['name']} ({m['architecture']}), {m['file_bytes'] / 2**20:.1f} MiB")
    print(f"path         {m['path']}")
    print(f"sha256       {m['sha256']}")
    print(f"layers       {m['n_layers']}, heads {m['n_head']}, KV heads {m['n_head_kv']}, "
          f"head dim K {m['head_dim_k']} / V {m['head_dim_v']}, vocab {m['vocab_size']}")
    if m["sliding_window"]:
        print(f"attention    sliding window {m['sliding_window']}; global layers {m['global_layers']} "
              f"({m['global_layers_rule']})")
    else:
        print("attention    every layer global")
    print(f"chat         {'template in the model' if m['chat_template'] else 'no chat template'}; "
          f"effctx uses {m['chat_format']}")
    print(f"backend      {data['backend']['name']} {data['backend']['version']}, n_ctx {data['n_ctx']}, "
          f"n_batch {data['n_batch']}")
    print(f"profile      {profile.name}: {profile.description or 'no description'}")
    print(f"identity     {data['identity']['digest'][:16]}")
    print("capabilities")
    caps = data["capabilities"]
    for key in ("position_shift", "quantized_v_cache", "exact_snapshot_replay"):
        print(f"  {key:22} {'yes' if caps[key] else 'no ':3}  {caps['reasons'][key]}")
    print(f"  {'safe_rollback':22} {caps['safe_rollback']}")
    print("context limits")
    for lim in data["limits"]:
        print(f"  {lim['name']:10} {lim['tokens']:>7} tokens  {lim['reason']}")
    lp = data["layer_profile"]
    print(f"KV cache     {profile.kv_cache_type_k}/{profile.kv_cache_type_v}: K {lp['k_bytes_per_token_layer']} + "
          f"V {lp['v_bytes_per_token_layer']} B per token per layer; {len(lp['global_layers'])} global + "
          f"{len(lp['swa_layers'])} windowed layers; {format_bytes(lp['cache_bytes'])} allocated at n_ctx {lp['n_ctx']}"
          f"{'' if profile.swa_full else ' (windowed layers capped)'}")
    print(f"capacity for {format_bytes(memory)} (swa_full {'on' if profile.swa_full else 'off'}; "
          "every K/V pair is in --json)")
    print(f"  {'K/V':14}{'B/token':>10}{'max hot tokens':>16}  bound by")
    for row in data["capacity"]["rows"]:
        if row["kv_cache_type_k"] != row["kv_cache_type_v"]:
            continue
        pair = f"{row['kv_cache_type_k']}/{row['kv_cache_type_v']}" + ("*" if row["needs_flash_attn"] else "")
        print(f"  {pair:14}{row['bytes_per_token'] or 0:>10.0f}{row['max_hot_tokens']:>16}  {row['reason']}")
    print("  * needs flash attention")
    return 0


def read_text_file(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EffctxError(f"{what} file not found: {path}") from None
    except IsADirectoryError:
        raise EffctxError(f"{what} file is a directory: {path}") from None
    except UnicodeDecodeError:
        raise EffctxError(f"{what} file is not UTF-8 text: {path}") from None
    except OSError as exc:
        raise EffctxError(f"cannot read {what} file {path}: {exc.strerror}") from None


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    return read_text_file(args.prompt_file, "prompt")


def cmd_run(args: argparse.Namespace) -> int:
    from .engine import SessionEngine

    prompt = _read_prompt(args)
    prefix_text = read_text_file(args.prefix_file, "prefix") if args.prefix_file else None
    if args.max_tokens < 0:
        raise EffctxError("--max-tokens must be 0 or more")
    profile = profile_from_args(args)
    store = None
    if prefix_text is not None and not args.no_prefix_cache:
        from .snapshots import SnapshotStore

        store = SnapshotStore()
    engine = SessionEngine(model_from_args(args, profile), profile, trace_path=args.trace, prefix_cache=store)
    try:
        engine.open()
        config = DecodeConfig(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
        loaded = engine.load_prefix(prefix_text) if prefix_text is not None else None
        if loaded is not None and loaded.message:
            print(f"effctx: {loaded.message}", file=sys.stderr)
        result = engine.complete(prompt, config)
    finally:
        engine.close()
    # The prefix is part of this run: a cache hit counts it as reused, a miss as prefilled,
    # and its load time is part of the time to the first token.
    hit = loaded is not None and loaded.cache == "hit"
    prefix_tokens = loaded.tokens if loaded else 0
    prefix_ms = loaded.ms if loaded else 0.0
    reused = prefix_tokens if hit else 0
    prefilled = result.prefilled + (0 if hit else prefix_tokens)
    prefill_ms = result.prefill_ms + prefix_ms
    data = {
        "text": result.text,
        "stop_reason": result.stop_reason,
        "cache": loaded.cache if loaded else "off",
        "ttft_ms": round(result.ttft_ms + prefix_ms, 3),
        "prefill_tps": round(prefilled / (prefill_ms / 1000), 2) if prefilled and prefill_ms else 0.0,
        "decode_tps": round(result.decode_tps, 2),
        "prefill_ms": round(prefill_ms, 3),
        "decode_ms": round(result.decode_ms, 3),
        "tokens": {
            "reused": reused,
            "prefilled": prefilled,
            "generated": result.generated,
            "resident": result.resident,
            "n_ctx": result.n_ctx,
        },
    }
    if loaded is not None:
        data["prefix"] = {"tokens": prefix_tokens, "ms": round(prefix_ms, 3), "key": loaded.key}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(result.text)
    cache = f"prefix cache {data['cache']}; " if loaded is not None else ""
    print(
        f"-- {cache}{prefilled} prefilled, {reused} reused, {result.generated} generated "
        f"({result.stop_reason}); TTFT {data['ttft_ms']:.0f} ms, prefill {data['prefill_tps']:.0f} tok/s, "
        f"decode {result.decode_tps:.1f} tok/s",
        file=sys.stderr,
    )
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench == "planner":
        return cmd_bench_planner(args)
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


def cmd_cells(args: argparse.Namespace) -> int:
    from .cells import list_cells

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
              f"{('yes' if caps and caps.position_shift else 'no') if caps else '-':7}"
              f"{('yes' if caps and caps.exact_snapshot_replay else 'no') if caps else '-':7}"
              f"{'ok: ' if c.runnable else 'unsupported: '}{c.reason}")
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from .atomic import atomic_write_bytes
    from .trace_export import to_perfetto
    from .trace_reader import read_trace

    trace = read_trace(args.file)
    if trace.note:
        print(f"effctx: {trace.note}", file=sys.stderr)
    out = Path(args.output) if args.output else Path(args.file).with_suffix(".perfetto.json")
    data = to_perfetto(trace.events)
    try:
        atomic_write_bytes(out, json.dumps(data).encode())
    except OSError as exc:
        raise EffctxError(f"cannot write {out}: {exc.strerror}") from None
    print(f"wrote {len(data['traceEvents'])} trace events to {out} (open it in ui.perfetto.dev or chrome://tracing)")
    return 0


def profile_dict(profile: Profile) -> dict:
    data = asdict(profile)
    data["n_threads"] = profile.n_threads
    return data


def cmd_profiles(args: argparse.Namespace) -> int:
    if args.name:
        profile = load_profile(args.name)
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


def cmd_model(args: argparse.Namespace) -> int:
    from .models import default_model_path, prepare_default_model

    if args.model_command == "path":
        print(default_model_path())
        return 0
    path = prepare_default_model(progress=_stderr_progress())
    print(f"default model ready: {path}")
    return 0


COMMANDS = {
    "info": cmd_info, "run": cmd_run, "bench": cmd_bench, "smoke": cmd_smoke,
    "profiles": cmd_profiles, "model": cmd_model, "snapshots": cmd_snapshots, "sessions": cmd_sessions,
    "cells": cmd_cells, "trace": cmd_trace,
}


def run_command(argv: Sequence[str]) -> int:
    """Run a headless command; returns the exit code. Errors become one line."""
    try:
        args = build_parser().parse_args(list(argv))
        if args.command is None:
            raise EffctxError("no command given (try: effctx --help)")
        return COMMANDS[args.command](args)
    except EffctxError as exc:
        print(f"effctx: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("effctx: interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
