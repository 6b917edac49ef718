"""`effctx --watch FILE --endpoint URL`: a console with no model of its own follows the
trace of an endpoint's engine as it is written, and sends its own turns to that endpoint
(what each browser tab of `effctx serve --api` runs). The endpoint runs in this process
over the tiny model; the `openai` SDK is its other client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import effctx_tui
from effctx_core.api.client import EndpointConversation
from effctx_core.events.follow import TraceFollower
from effctx_core.profiles import Profile
from effctx_tui.app import EffctxApp
from effctx_tui.widgets.endpoint_status import EndpointStatus
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML, running_api
from tests.helpers.pilot_wait import wait_for
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.model

DEMO = Path(effctx_tui.__file__).with_name("demos") / "chat.jsonl"  # its first line opens a session


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("watch")
    model = write_tiny_llama_gguf(folder / "tiny-chatml.gguf", chat_template=HERMES_CHATML,
                                  special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")
    with running_api(model, Profile(name="watch", n_ctx=1024), folder / "state", trace=folder / "engine.jsonl") as server:
        yield server, folder / "engine.jsonl"


def ask(server, text: str):
    return server.client().chat.completions.create(model="any", messages=[{"role": "user", "content": text}],
                                                   max_tokens=4, temperature=0)


def watching(trace, talk: EndpointConversation | None = None) -> EffctxApp:
    follower = TraceFollower(trace)
    return EffctxApp(replay=follower.opening(), follow=follower, talk=talk, max_tokens=4)


def said(app: EffctxApp) -> list[str]:
    return [str(w.render()) for w in app.session_screen.query_one(Transcript).children]


async def test_a_request_served_after_the_console_opened_shows_in_its_requests_table(endpoint):
    server, trace = endpoint
    app = watching(trace)
    async with app.run_test(size=(120, 36)) as pilot:
        before = len(app.session_screen.requests.rows)
        reply = await asyncio.get_running_loop().run_in_executor(None, ask, server, "Seen from afar")
        await wait_for(pilot, lambda: len(app.session_screen.requests.served) == before + 1)
        row = app.session_screen.requests.rows[before]
        assert row.served is not None and row.served.finish == reply.choices[0].finish_reason
        assert row.served.prompt_tokens == reply.usage.prompt_tokens
        assert any("⇄ request: Seen from afar" in line for line in said(app))
        assert app.player is not None and app.player.describe().startswith("watching engine.jsonl: event ")


async def test_a_turn_typed_in_the_watching_console_is_a_request_to_the_endpoint(endpoint):
    server, trace = endpoint
    talk = EndpointConversation(server.base_url)
    app = watching(trace, talk)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.session_screen
        assert str(screen.query_one(EndpointStatus).render()).startswith(f"API {server.base_url}")
        await pilot.press(*"Typed in a tab", "enter")  # the prompt has the focus from the start
        await wait_for(pilot, lambda: len(talk.messages) == 2 and not screen.busy)
        await wait_for(pilot, lambda: any("⇄ request: Typed in a tab" in line for line in said(app)))
        assert [m["role"] for m in talk.messages] == ["user", "assistant"]
        assert talk.messages[0]["content"] == "Typed in a tab"
        served = screen.requests.rows[screen.requests.served[-1]].served
        assert served is not None and served.status == "done"


async def test_a_watched_trace_that_turns_bad_stops_the_watch_and_says_why(tmp_path):
    trace = tmp_path / "engine.jsonl"
    opened = DEMO.read_text(encoding="utf-8").splitlines(keepends=True)[0]
    trace.write_text(opened, encoding="utf-8")
    app = watching(trace)
    async with app.run_test(size=(120, 36)) as pilot:
        with trace.open("a", encoding="utf-8") as f:
            f.write("not json\n")
        await wait_for(pilot, lambda: app.player is not None and app.player.error is not None)
        assert app.player.describe() == f"watching engine.jsonl: event 1/1 · stopped: {trace} line 2: " \
                                        "not a JSON event (the trace is damaged)"
