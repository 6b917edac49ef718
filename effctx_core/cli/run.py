"""`effctx run`: one prompt, with timings and token accounting; a prefix through the prefix cache."""

from __future__ import annotations

import argparse
import json
import sys

from effctx_core.cli.options import (
    EXIT_BAD_INPUT,
    PROMPT_FILE_LIMIT,
    add_runtime_options,
    add_sampling_options,
    check_run_inputs,
    decode_config_from_args,
    prepared_model,
    read_prompt_file,
    warn,
)
from effctx_core.units import format_bytes, ttft_after, turn_speeds


def add_parser(sub) -> None:
    run = sub.add_parser("run", help="complete one prompt and report timings and token accounting")
    add_runtime_options(run)
    src = run.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", metavar="TEXT")
    src.add_argument("--prompt-file", metavar="FILE", help=f"the prompt from a UTF-8 text file, line breaks kept (at most {format_bytes(PROMPT_FILE_LIMIT)})")
    run.add_argument("--prefix-file", metavar="FILE",
                     help="a stable prefix (system prompt, document) put before the prompt; its state is cached")
    run.add_argument("--no-prefix-cache", action="store_true", help="prefill the prefix without the prefix cache")
    add_sampling_options(run, max_tokens=64)
    run.add_argument("--trace", metavar="FILE", help="write the engine's events as JSON Lines")
    run.add_argument("--json", action="store_true")


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    return read_prompt_file(args.prompt_file)


def run(args: argparse.Namespace) -> int:
    from effctx_core.engine import SessionEngine
    from effctx_core.events.trace import NodeUnsaved

    prompt = _read_prompt(args)
    inputs = check_run_inputs(args, args.trace)
    warn(inputs.warnings)
    profile, prefix_text = inputs.profile, inputs.prefix_text
    store = None
    if prefix_text is not None and not args.no_prefix_cache:
        from effctx_core.snapshots import SnapshotStore

        store = SnapshotStore()
    engine = SessionEngine(prepared_model(args, profile), profile, trace_path=args.trace, prefix_cache=store)
    # The prefix's state is stored in the background; a write that failed is known when
    # the engine settles (at the latest at close), and said then.
    unsaved: list[str] = []
    engine.subscribe(lambda event: unsaved.append(event.message) if isinstance(event, NodeUnsaved) else None)
    try:
        engine.open()
        config = decode_config_from_args(args)
        loaded = engine.load_prefix(prefix_text) if prefix_text is not None else None
        if loaded is not None and loaded.message:
            print(f"effctx: {loaded.message}", file=sys.stderr)
        result = engine.complete(prompt, config)
    finally:
        engine.close()
        for message in unsaved:
            print(f"effctx: {message}", file=sys.stderr)
    # The prefix is part of this run: what the cache restored counts as reused, the rest as
    # prefilled, and its load time is part of the time to the first token.
    prefix_ms = loaded.ms if loaded else 0.0
    reused = loaded.restored if loaded else 0
    prefilled = result.prefilled + (loaded.computed if loaded else 0)
    prefill_ms = result.prefill_ms + prefix_ms
    ttft_ms = ttft_after(prefix_ms, result.ttft_ms)
    prefill_tps = prefilled / (prefill_ms / 1000) if prefilled and prefill_ms else 0.0
    data: dict[str, object] = {
        "text": result.text,
        "stop_reason": result.stop_reason,
        "cache": loaded.cache if loaded else "off",
        "ttft_ms": None if ttft_ms is None else round(ttft_ms, 3),
        "prefill_tps": round(prefill_tps, 2),
        "decode_tps": round(result.decode_tps, 2),
        "prefill_ms": round(prefill_ms, 3),
        "decode_ms": round(result.decode_ms, 3),
        "tokens": {
            "reused": reused,
            "prefilled": prefilled,
            "generated": result.generated,
            "resident": result.resident,
            "pending": result.pending,
            "n_ctx": result.n_ctx,
        },
    }
    if loaded is not None:
        data["prefix"] = {"tokens": loaded.tokens, "restored": loaded.restored, "ms": round(prefix_ms, 3), "key": loaded.key}
    if args.json:
        print(json.dumps(data, indent=2))
        return _trace_outcome(engine)
    print(result.text)
    cache = f"prefix cache {data['cache']}; " if loaded is not None else ""
    speeds = turn_speeds(result.generated, ttft_ms, prefill_tps, result.decode_tps)
    print(
        f"-- {cache}{prefilled:,} prefilled, {reused:,} reused, {result.generated:,} generated "
        f"({result.stop_reason}); " + ", ".join(f"{name} {figure}" for name, figure in speeds),
        file=sys.stderr,
    )
    return _trace_outcome(engine)


def _trace_outcome(engine) -> int:
    """The result is printed whatever happened to the trace; a trace that could not be
    written (a full disk) is then the one error line and the exit code."""
    if engine.trace_error is None:
        return 0
    print(f"effctx: error: {engine.trace_error}", file=sys.stderr)
    return EXIT_BAD_INPUT
