"""`effctx --api`: the console and the endpoint on one engine, one queue. The console
runs headless and the `openai` SDK drives the endpoint from a thread, on the tiny model."""

from __future__ import annotations

import asyncio

import openai
import pytest
from openai.types.chat import ChatCompletion

from effctx_core.api.server import bind
from effctx_core.backends.common.network import free_port
from effctx_core.profiles import Profile
from effctx_tui.app import EffctxApp
from effctx_tui.options import ApiAddress
from effctx_tui.widgets.endpoint_status import EndpointStatus
from effctx_tui.widgets.residency_strip import ResidencyStrip
from effctx_tui.widgets.snapshot_tree import SnapshotTreeView
from effctx_tui.widgets.transcript import Transcript
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML
from tests.helpers.api_traffic import CLOCK, WEATHER
from tests.helpers.engine_jobs import WAIT, held_at
from tests.helpers.pilot_wait import session_when_ready, status_text, take_a_turn, wait_for
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.model

PROFILE = Profile(name="console-api", n_ctx=1024)
MAX_TOKENS = 4  # a reply's tokens, the console's and a client's: a few are enough to follow


@pytest.fixture(scope="module")
def tiny_chatml(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("console-api") / "tiny-chatml.gguf",
                                 chat_template=HERMES_CHATML, special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")


def serving_app(model) -> tuple[EffctxApp, str]:
    port = free_port()
    app = EffctxApp(model=model, profile=PROFILE, max_tokens=MAX_TOKENS, checkpoints=None,
                    api=ApiAddress("127.0.0.1", port, None), api_socket=bind("127.0.0.1", port))
    return app, f"http://127.0.0.1:{port}/v1"


def endpoint_line(screen) -> str:
    return str(screen.query_one(EndpointStatus).render())


def system(text: str) -> dict:
    return {"role": "system", "content": text}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


async def ask(base_url: str, messages: list[dict], tools: list[dict] | None = None) -> ChatCompletion:
    """A client's request, from a thread: the SDK blocks, and the console's loop goes on."""
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=WAIT)
    return await asyncio.to_thread(client.chat.completions.create, model="any", messages=messages, max_tokens=MAX_TOKENS,
                                   temperature=0, tools=tools or openai.omit)


async def sent_on(base_url: str, before: list[dict], after: list[dict],
                  tools: tuple[list[dict] | None, list[dict] | None] = (None, None)) -> tuple[ChatCompletion, ChatCompletion]:
    """A request of `before`, then its conversation sent on as a client sends it: `after`
    (the same messages as `before`, or changed), the first reply and one more question;
    `tools` for each request."""
    first = await ask(base_url, before, tools[0])
    second = await ask(base_url, [*after, first.choices[0].message.model_dump(exclude_none=True), user("And then?")],
                       tools[1])
    return first, second


async def shown_divergence(pilot, screen, response: ChatCompletion) -> dict:
    """The divergence the requests screen shows for `response`'s request, the second
    served, once it is there; it is what the client was told, to the token."""
    await wait_for(pilot, lambda: len(screen.requests.served) == 2)
    shown = screen.requests.rows[1].served.divergence
    told = response.model_extra["effctx"]
    assert shown == told["divergence"] and shown["at"] == told["diverged_at"]
    return shown


def user_lines(screen) -> list[str]:
    """The transcript's lines of what was said to the model, the console's and the clients'."""
    return [str(line.render()) for line in screen.query_one(Transcript).query(".user-turn")]


async def test_the_status_line_says_where_the_endpoint_listens(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        await pilot.pause(0.1)
        assert endpoint_line(screen) == f"API {base_url}  │  no request waiting"


async def test_a_request_shows_in_the_transcript_and_the_console_goes_on_after_it(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (100, 30)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        reply = await ask(base_url, [user("Hello from a client")])
        await wait_for(pilot, lambda: "⇄ request: Hello from a client" in user_lines(screen))
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
        for text in ("First client request", "Second client request"):
            await ask(base_url, [user(text)])
        await wait_for(pilot, lambda: all(row.served is not None for row in screen.requests.rows)
                       and len(screen.requests.rows) == 2)
        await pilot.press("ctrl+y")
        await pilot.pause(0.1)
        rows = screen.requests.rows
        assert [row.status for row in rows] == ["done", "done"]
        assert [row.served.label for row in rows] == ["user: First client request",
                                                      "user: Second client request"]
        assert type(app.screen).__name__ == "RequestsScreen"


async def test_a_one_word_change_of_the_system_prompt_is_named_live_at_its_token(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        question = user("Where to?")
        _, second = await sent_on(base_url, [system("You are a travel agent."), question],
                                  [system("You are a tour agent."), question])
        divergence = await shown_divergence(pilot, screen, second)
        assert (divergence["kind"], divergence["segment"]["label"]) == ("system_changed", "system")
        assert "travel" in divergence["sides"]["stored"] and "tour" in divergence["sides"]["prompt"]


async def test_the_snapshots_screen_shows_one_conversation_at_a_time(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        for instruction, text in (("Agent A plans trips.", "Plan Rome"), ("Agent B fixes bugs.", "Fix the loop")):
            await ask(base_url, [system(instruction), user(text)])
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


async def test_a_changed_timestamp_in_the_system_prompt_is_named_live_as_a_date_change(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        question = user("What day?")
        _, second = await sent_on(base_url, [system("Today is 2026-12-05 10:00."), question],
                                  [system("Today is 2026-12-05 10:05."), question])
        divergence = await shown_divergence(pilot, screen, second)
        assert (divergence["kind"], divergence["segment"]["label"], divergence["detail"]) == \
            ("date_changed", "system", "")  # no detail: the client wrote the date, the template stamps none
        # From the minute's last digit, the tokens on each side (the ChatML markers read as nothing).
        assert divergence["sides"] == {"stored": "26-12-05 10:00. \n user\nWha", "prompt": "26-12-05 10:05. \n user\nWha"}


async def test_a_reordered_tool_list_is_named_live_with_both_orders(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        question = user("Order matters")
        _, second = await sent_on(base_url, [question], [question], tools=([WEATHER, CLOCK], [CLOCK, WEATHER]))
        divergence = await shown_divergence(pilot, screen, second)
        assert (divergence["kind"], divergence["segment"]["label"], divergence["detail"]) == \
            ("tools_changed", "tools", "reordered: get_weather, get_time → get_time, get_weather")
        assert divergence["sides"] == {"stored": '"name": "get_weather", "de', "prompt": '"name": "get_time", "descr'}


async def test_an_appended_message_reuses_every_token_the_earlier_request_left(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        sent = [system("You count sheep."), user("One sheep")]
        first, second = await sent_on(base_url, sent, sent)
        divergence = await shown_divergence(pilot, screen, second)
        told = second.model_extra["effctx"]
        # What the first request left: its prompt and its reply, as its node in the tree holds them.
        node = first.model_extra["effctx"]["node"]
        held = app.engine.tree.tape_length(node)
        assert (divergence["kind"], divergence["at"], divergence["against"]) == ("appended", None, node)
        assert (told["route"]["kind"], held) == ("resident", first.usage.prompt_tokens + first.usage.completion_tokens)
        assert second.usage.prompt_tokens_details.cached_tokens == told["reused"] == held


async def test_the_status_line_and_the_strip_follow_a_request_while_it_is_served(tiny_chatml):
    app, base_url = serving_app(tiny_chatml)
    async with session_when_ready(app, (160, 48)) as (pilot, screen):
        await wait_for(pilot, lambda: app.endpoint is not None)
        strip, requests = screen.query_one(ResidencyStrip), screen.requests
        with held_at(app.engine, "prefill_chunk", "token") as go_on:
            served = asyncio.create_task(ask(base_url, [user("Hello from a client")]))
            await wait_for(pilot, lambda: requests.rows and requests.rows[0].prefilled)
            prompt = requests.rows[0].prompt_tokens  # all of it is prefilled: the engine held nothing
            in_prefill = status_text(screen), strip.table.n_tokens, endpoint_line(screen)
            go_on()
            await wait_for(pilot, lambda: requests.rows[0].status == "decoding")
            in_decode = status_text(screen), strip.table.n_tokens, user_lines(screen)
        reply = await served
        await wait_for(pilot, lambda: requests.served)
        after = status_text(screen).split("\n")[0], strip.table.n_tokens, endpoint_line(screen)

        def resident(n: int, pending: int = 0) -> str:
            return f"resident {n} / 1,024 · available {1024 - n}" + (f" · {pending} pending" if pending else "") + "  │  "

        assert prompt == reply.usage.prompt_tokens
        # The strip shows what the engine's residency map holds: the prompt once its prefill is done.
        assert in_prefill == (resident(prompt) + f"prefilling {prompt} / {prompt} tokens…", 0,
                              f"API {base_url}  │  serving a request · no request waiting")
        assert in_decode == (resident(prompt + 1) + "decoding, 1 token…", prompt,
                             ["⇄ request: Hello from a client"])
        total = reply.usage.total_tokens
        generated = reply.usage.completion_tokens
        # A reply cut at its length leaves its last token pending: on the tape (the strip),
        # not in the cache until the next prompt's batch.
        pending = 1 if reply.choices[0].finish_reason == "length" else 0
        assert after == (resident(total - pending, pending) + f"last turn: reused 0 · prefilled {prompt} · generated {generated}",
                         total, f"API {base_url}  │  no request waiting")
