"""`effctx --api`: the console and the endpoint on one engine, one queue. The console
runs headless and the `openai` SDK drives the endpoint from a thread, on the tiny model."""

from __future__ import annotations

import asyncio

import openai
import pytest

from effctx_core.api.server import bind
from effctx_core.backends.common.network import free_port
from effctx_core.profiles import Profile
from effctx_tui.app import EffctxApp
from effctx_tui.options import ApiAddress
from effctx_tui.widgets.endpoint_status import EndpointStatus
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML
from tests.helpers.engine_jobs import WAIT
from tests.helpers.pilot_wait import session_when_ready, take_a_turn, wait_for
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.model

PROFILE = Profile(name="console-api", n_ctx=1024)


@pytest.fixture(scope="module")
def tiny_chatml(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("console-api") / "tiny-chatml.gguf",
                                 chat_template=HERMES_CHATML, special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")


def serving_app(model) -> tuple[EffctxApp, str]:
    port = free_port()
    app = EffctxApp(model=model, profile=PROFILE, max_tokens=4, checkpoints=None,
                    api=ApiAddress("127.0.0.1", port, None), api_socket=bind("127.0.0.1", port))
    return app, f"http://127.0.0.1:{port}/v1"


def ask(base_url: str, text: str) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=WAIT)
    return client.chat.completions.create(model="any", messages=[{"role": "user", "content": text}], max_tokens=4,
                                          temperature=0)


async def test_the_status_line_says_where_the_endpoint_listens(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        await pilot.pause(0.1)
        assert str(screen.query_one(EndpointStatus).render()) == \
            f"API {base_url}  │  no request waiting"


async def test_a_request_shows_in_the_transcript_and_the_console_goes_on_after_it(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        reply = await asyncio.get_running_loop().run_in_executor(None, ask, base_url, "Hello from a client")
        await wait_for(pilot, lambda: any("⇄ request: Hello from a client" in str(w.render())
                                          for w in screen.query_one(Transcript).children))
        await take_a_turn(pilot, screen, "And from the console")
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert screen.last_result is not None and screen.last_result.generated > 0
        # The console's turn went on from its own conversation, not from the client's.
        tape = app.engine.detokenize(app.engine.tape)
        assert "And from the console" in tape and "Hello from a client" not in tape


async def test_the_requests_screen_fills_in_order_as_clients_send_requests(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        loop = asyncio.get_running_loop()
        for text in ("First client request", "Second client request"):
            await loop.run_in_executor(None, ask, base_url, text)
        await wait_for(pilot, lambda: all(row.served is not None for row in screen.requests.rows)
                       and len(screen.requests.rows) == 2)
        await pilot.press("ctrl+y")
        await pilot.pause(0.1)
        rows = screen.requests.rows
        assert [row.status for row in rows] == ["done", "done"]
        assert [row.served.label for row in rows] == ["user: First client request",
                                                      "user: Second client request"]
        assert type(app.screen).__name__ == "RequestsScreen"


def ask_with_system(base_url: str, system: str, history: list) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=WAIT)
    return client.chat.completions.create(model="any", max_tokens=4, temperature=0,
                                          messages=[{"role": "system", "content": system}, *history])


async def test_a_one_word_change_of_the_system_prompt_is_named_live_at_its_token(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        loop = asyncio.get_running_loop()
        question = [{"role": "user", "content": "Where to?"}]
        first = await loop.run_in_executor(None, ask_with_system, base_url, "You are a travel agent.", question)
        history = [*question, first.choices[0].message.model_dump(exclude_none=True),
                   {"role": "user", "content": "And then?"}]
        second = await loop.run_in_executor(None, ask_with_system, base_url, "You are a tour agent.", history)
        await wait_for(pilot, lambda: len(screen.requests.served) == 2)
        divergence = screen.requests.rows[1].served.divergence
        assert (divergence["kind"], divergence["segment"]["label"]) == ("system_changed", "system")
        assert divergence["at"] == second.model_extra["effctx"]["diverged_at"]
        assert "travel" in divergence["sides"]["stored"] and "tour" in divergence["sides"]["prompt"]


async def test_the_snapshots_screen_shows_one_conversation_at_a_time(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        loop = asyncio.get_running_loop()
        for system, user in (("Agent A plans trips.", "Plan Rome"), ("Agent B fixes bugs.", "Fix the loop")):
            await loop.run_in_executor(None, ask_with_system, base_url, system, [{"role": "user", "content": user}])
        await pilot.press("ctrl+t")
        await pilot.pause(0.1)
        snapshots = app.screen
        view = snapshots.query_one(SnapshotTreeView)
        everything = set(view._views)
        await pilot.press("v")
        await pilot.pause(0.1)
        first = set(view._views)
        await pilot.press("v")
        await pilot.pause(0.1)
        second = set(view._views)
        await pilot.press("v")
        await pilot.pause(0.1)
        assert (first, second) == ({"n0", "n1"}, {"n0", "n2"})
        assert set(view._views) == everything == {"n0", "n1", "n2"}
