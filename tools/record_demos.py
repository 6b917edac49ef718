"""Record the demo traces that ship with effctx (`effctx --demo NAME`) from the default
model. Run it after a change to what the engine does, so the demos show the engine as it
is:  .venv/bin/python tools/record_demos.py [NAME ...]

The visual baselines are driven by the chat demo: regenerate them afterwards
(`pytest tests/tui/test_visual_baselines.py --snapshot-update`) and look at them.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.models import prepare_default_model
from effctx_core.residency.config import ResidencyConfig

NOTES = "Notes: " + "The grass is green. The sky is blue. " * 60 + " What colour is the sky?"

# name: (profile, [(kind, text, max_tokens)])
DEMOS = {
    "chat": (
        load_profile("exact").with_changes(n_ctx=2048),
        [("chat", "What is the capital of France?", 32), ("chat", "And of Italy?", 32),
         ("chat", "Tell me about the sky.", 32)],
    ),
    "streaming": (
        load_profile("streaming").with_changes(n_ctx=1024, residency=ResidencyConfig(
            policy="streaming", sink_tokens=4, recent_tokens=508, budget=512, block_size=4, slide_tokens=32)),
        [("chat", NOTES, 120)],
    ),
}


def record(name: str, out: Path) -> None:
    profile, turns = DEMOS[name]
    tmp = out.with_suffix(".recording")
    tmp.unlink(missing_ok=True)
    engine = SessionEngine(prepare_default_model(), profile, trace_path=tmp)
    try:
        engine.open()
        for kind, text, max_tokens in turns:
            turn = engine.chat if kind == "chat" else engine.complete
            result = turn(text, DecodeConfig(max_tokens=max_tokens))
            print(f"{name}: {text[:40]!r} -> {result.text[:40]!r} (reused {result.reused}, "
                  f"prefilled {result.prefilled}, dropped {result.dropped})")
    finally:
        engine.close()
    tmp.replace(out)


def main(names: list[str]) -> int:
    unknown = set(names) - set(DEMOS)
    if unknown:
        print(f"unknown demo(s): {', '.join(sorted(unknown))} (known: {', '.join(DEMOS)})", file=sys.stderr)
        return 2
    with resources.as_file(resources.files("effctx_tui") / "demos") as folder:
        for name in names or list(DEMOS):
            record(name, Path(folder) / f"{name}.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
