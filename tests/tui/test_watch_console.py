"""`effctx --watch FILE --endpoint URL`: a console with no model of its own follows the
trace of an endpoint's engine as it is written, and sends its own turns to that endpoint
(what each browser tab of `effctx serve --api` runs), and restores and branches in that
engine through it. The endpoint runs in this process
over the tiny model; the `openai` SDK is its other client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import effctx_tui
from effctx_core.api.client import EndpointConsole
from effctx_core.events.follow import TraceFollower
from effctx_core.profiles import Profile
from effctx_tui.app import EffctxApp
from effctx_tui.screens.snapshots import SnapshotsScreen
from effctx_tui.widgets.endpoint_status import EndpointStatus
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView
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


def watching(trace, talk: EndpointConsole | None = None) -> EffctxApp:
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


async def test_a_turn_typed_in_the_watching_console_is_a_turn_of_its_own_on_the_endpoints_engine(endpoint):
    server, trace = endpoint
    talk = EndpointConsole(server.base_url)
    app = watching(trace, talk)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.session_screen
        assert str(screen.query_one(EndpointStatus).render()).startswith(f"API {server.base_url}")
        await pilot.press(*"Typed in a tab", "enter")  # the prompt has the focus from the start
        await wait_for(pilot, lambda: talk.node is not None and not screen.busy)
        await wait_for(pilot, lambda: "Typed in a tab" in said(app))
        assert server.service.engine.tree.node(talk.node).turn.input == "Typed in a tab"


async def test_a_watching_console_branches_from_a_clients_node_and_its_next_turn_goes_on_from_it(endpoint):
    server, trace = endpoint
    await asyncio.get_running_loop().run_in_executor(None, ask, server, "A client's question")
    fork = server.service.engine.tree.current
    talk = EndpointConsole(server.base_url)
    app = watching(trace, talk)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.session_screen
        await wait_for(pilot, lambda: app.player is not None and fork in app.player.engine.tree)
        await pilot.press("ctrl+t")
        snapshots = app.screen
        assert isinstance(snapshots, SnapshotsScreen) and snapshots.check_action("branch", ()) is True
        snapshots.query_one(SnapshotTreeView).select_id(fork)
        await pilot.press("b")
        await wait_for(pilot, lambda: app.screen is screen)  # a branch goes back to the prompt
        assert talk.node == fork and server.service.engine.tree.current == fork
        await pilot.press(*"From the fork", "enter")
        await wait_for(pilot, lambda: talk.node != fork and not screen.busy)
        assert server.service.engine.tree.node(talk.node).parent == fork


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
