"""`effctx bench keys`: how fast typed keys show up while a long prefill runs.

The console runs headless under Textual's Pilot on the real default model. A prompt of
about --prompt-tokens tokens is submitted (one reply token), and once its first prefill
chunk is reported, keys are posted straight into the app's message queue every ~100 ms
(Pilot.press waits for the app to go idle, which it never is during a prefill).

With --api-traffic the console serves its endpoint (`effctx --api`) and the prompt comes
from a client instead: the `openai` SDK sends it as a chat request from a thread, as an
agent beside the console would, and the keys are typed into the idle console's prompt
while the engine prefills that request.

"On screen" here means: the first compositor refresh of the session screen that runs
after the prompt Input's value holds the key. That refresh is the step that turns the
changed widget into the terminal update; headless, Textual then skips only the final
write of that update to the terminal, so a real terminal adds that write's cost.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import TYPE_CHECKING

from effctx_core.cli.options import OneLineParser
from effctx_core.errors import EffctxError
from effctx_core.units import format_count, format_counted, format_ms, ms_between
from effctx_tui.bench.command import bench_command

if TYPE_CHECKING:
    from effctx_core.profiles import Profile
    from effctx_tui.app import EffctxApp

KEYS = "abcdefghijklmnopqrstuvwxyz0123"
SPACING_S = 0.1
# One repeat of the sentence is 5 tokens with Gemma 3's tokenizer, plus 6 for the
# chat template (measured: 500 repeats prefill 2506 tokens).
SENTENCE = "The grass is green. "
PROMPT_ROOM = 64  # tokens a full context keeps free of the prompt: the template's and the reply's


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _stats(values: list[float]) -> dict:
    return {"n": len(values), "median_ms": statistics.median(values), "p95_ms": _percentile(values, 0.95),
            "max_ms": max(values)}


def _serving_console(profile: Profile) -> tuple[EffctxApp, str]:
    """A console that serves its endpoint on a free loopback port, and the endpoint's URL."""
    from effctx_core.api.server import bind
    from effctx_tui.app import EffctxApp
    from effctx_tui.options import ApiAddress

    sock = bind("127.0.0.1", 0)  # port 0: the system picks a free one, and it is ours at once
    port = sock.getsockname()[1]
    app = EffctxApp(profile=profile, max_tokens=1, checkpoints=None, api=ApiAddress("127.0.0.1", port, None),
                    api_socket=sock)
    return app, f"http://127.0.0.1:{port}/v1"


def _ask(base_url: str, text: str) -> None:
    """A client's chat request of `text`, one reply token, as the bench's thread sends it."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    try:
        client.chat.completions.create(model="effctx", messages=[{"role": "user", "content": text}], max_tokens=1,
                                       temperature=0)
    except openai.APIError as exc:
        raise EffctxError(f"the client's request failed: {exc}") from None


async def _measure(prompt_tokens: int, api_traffic: bool, profile: Profile) -> dict:
    from textual import events
    from textual.widgets import Input, ProgressBar

    from effctx_tui.app import EffctxApp

    profile = profile.with_changes(n_ctx=context_for(profile, prompt_tokens))
    # The prompt leaves room for the chat template's tokens and the one-token reply.
    prompt_tokens = min(prompt_tokens, profile.n_ctx - PROMPT_ROOM)
    if api_traffic:
        app, base_url = _serving_console(profile)
    else:
        app = EffctxApp(profile=profile, max_tokens=1, checkpoints=None)
    sent: list[int] = []  # time.perf_counter_ns() readings
    shown: list[int | None] = []
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.session_screen
        while not screen.ready or (api_traffic and not (app.endpoint is not None and app.endpoint.started)):
            await pilot.pause(0.05)
        prompt = screen.query_one(Input)

        original_refresh = screen._compositor_refresh

        def timed_refresh() -> None:
            original_refresh()
            now = time.perf_counter_ns()
            # Keys are typed in order, so the value's length says how many have landed.
            for i in range(min(len(prompt.value), len(sent))):
                if shown[i] is None:
                    shown[i] = now

        # Timed on this one screen instance, for this run only: an instance attribute
        # shadows Textual's method, and is put back below.
        screen._compositor_refresh = timed_refresh  # type: ignore[method-assign]

        text = SENTENCE * max(1, (prompt_tokens - 6) // 5)
        submitted = time.perf_counter_ns()
        if api_traffic:
            request = asyncio.get_running_loop().run_in_executor(None, _ask, base_url, text)
            finished = request.done  # the client has its reply
        else:
            prompt.value = text
            app.post_message(events.Key("enter", None))
            finished = lambda: screen.turns_done > 0  # noqa: E731
        bar = screen.query_one(ProgressBar)
        while not bar.total and not finished():  # the first prefill chunk is reported
            await asyncio.sleep(0.005)
        for key in KEYS:
            shown.append(None)
            sent.append(time.perf_counter_ns())
            app.post_message(events.Key(key, key))
            await asyncio.sleep(SPACING_S)
        while not finished():
            await asyncio.sleep(0.01)
        turn_done = time.perf_counter_ns()
        if api_traffic:
            await request  # a failed request raises here, with the client's reason
        deadline = time.perf_counter() + 5
        # The request's turn_finished may reach the screen after the client has its reply.
        while (None in shown or screen.last_result is None) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        result = screen.last_result
        screen._compositor_refresh = original_refresh  # type: ignore[method-assign]
    if result is None:
        raise EffctxError("the turn did not finish (see the console's error)")
    latencies = [ms_between(t, s) for t, s in zip(sent, shown) if s is not None]
    during = sum(1 for t in sent if t < turn_done)
    return {
        "mode": "api-traffic" if api_traffic else "console",
        "keys": _stats(latencies) if latencies else None,
        "keys_sent": len(sent),
        "keys_sent_during_prefill": during,
        "keys_never_shown": sum(1 for s in shown if s is None),
        "prompt_tokens_prefilled": result.prefilled,
        "prefill_ms": result.prefill_ms,
        "turn_ms": ms_between(submitted, turn_done),
        "profile": profile.name,
        "n_ctx": profile.n_ctx,
        "threads": profile.n_threads,
    }


def context_for(profile: Profile, prompt_tokens: int) -> int:
    """Room for the prompt and more, within what the model was trained for (32,768 on
    the default model): a 32k prompt then fills the context."""
    from effctx_core.backends.registry import get_backend
    from effctx_core.models import resolve_model

    trained = get_backend(profile.backend).describe(resolve_model(profile.model), profile).facts.context_length
    return min(trained, max(10240, prompt_tokens + 2048))


def run_keys_benchmark(prompt_tokens: int, api_traffic: bool, profile: Profile) -> dict:
    return asyncio.run(_measure(prompt_tokens, api_traffic, profile))


def _run_checked(opts) -> dict:
    from effctx_core.backends.profile_loader import load_profile

    if opts.prompt_tokens < 16:
        raise EffctxError("--prompt-tokens must be at least 16")
    profile = load_profile(opts.profile)  # an unknown or invalid profile is one line, before the model loads
    if opts.api_traffic:
        try:
            import openai  # noqa: F401 - checked before the model loads
        except ImportError:
            raise EffctxError("--api-traffic sends its prompt with the openai client, which is not installed "
                              "(pip install 'effctx[bench]')") from None
    return run_keys_benchmark(opts.prompt_tokens, opts.api_traffic, profile)


MODES = {
    "console": "the prompt typed into the console",
    "api-traffic": "the prompt sent by an openai client through the console's endpoint",
}


def _table(result: dict) -> list[str]:
    keys = result["keys"]
    turn = "turn" if result["mode"] == "console" else "request"
    lines = [
        f"mode: {result['mode']} ({MODES[result['mode']]})",
        f"prefill: {format_counted(result['prompt_tokens_prefilled'], 'token')} in {format_ms(result['prefill_ms'])} "
        f"({result['profile']}, n_ctx {format_count(result['n_ctx'])}, {result['threads']} threads; "
        f"whole {turn} {format_ms(result['turn_ms'])})",
        f"keys: {result['keys_sent']} sent {format_ms(SPACING_S * 1000)} apart, "
        f"{result['keys_sent_during_prefill']} of them while the {turn} ran, {result['keys_never_shown']} never shown",
    ]
    if keys:
        lines.append(f"key -> on screen: median {format_ms(keys['median_ms'])}   p95 {format_ms(keys['p95_ms'])}   "
                     f"max {format_ms(keys['max_ms'])}   (target < 100 ms)")
    return lines


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="effctx bench keys", description="time typed keys on screen during a long prefill")
    parser.add_argument("--prompt-tokens", type=int, default=8192, metavar="N")
    parser.add_argument("--profile", metavar="P", help="the cell the console runs (default: the default profile)")
    parser.add_argument("--api-traffic", action="store_true",
                        help="serve the console's endpoint and send the prompt through it with the openai client")
    return bench_command(parser, argv, _run_checked, _table)
