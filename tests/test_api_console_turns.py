"""effctx's own routes for a console that watches an endpoint's engine (POST
/v1/effctx/turn and /v1/effctx/restore), through the client that console runs
(EndpointConsole), on a real endpoint over the tiny ChatML model; the `openai` SDK is the
other client."""

from __future__ import annotations

import pytest

from effctx_core.api.client import EndpointConsole, EndpointError
from effctx_core.profiles import Profile
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML, running_api
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.model

KEY = "console-key"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("console") / "tiny-chatml.gguf", chat_template=HERMES_CHATML,
                                 special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    with running_api(model, Profile(name="console", n_ctx=1024), tmp_path_factory.mktemp("state")) as server:
        yield server


def text_of(server, node: str) -> str:
    engine = server.service.engine
    return engine.detokenize(engine.tree.tape(node))


def test_a_console_turn_makes_a_node_and_the_next_turn_goes_on_from_it(server):
    console = EndpointConsole(server.base_url)
    console.say("First words", 4)
    first = console.node
    console.say("Second words", 4)
    tree = server.service.engine.tree
    assert first is not None and tree.node(first).turn.input == "First words"
    assert tree.node(console.node).parent == first and tree.node(console.node).turn.input == "Second words"


def test_a_console_turn_goes_back_to_its_node_after_a_client_moved_the_engine_elsewhere(server):
    console = EndpointConsole(server.base_url)
    console.say("The console speaks", 4)
    mine = console.node
    server.client().chat.completions.create(model="any", messages=[{"role": "user", "content": "A client elsewhere"}],
                                            max_tokens=4, temperature=0)
    assert server.service.engine.tree.current != mine
    console.say("The console again", 4)
    assert server.service.engine.tree.node(console.node).parent == mine
    assert "A client elsewhere" not in text_of(server, console.node)


def test_a_restore_says_what_it_did_and_the_next_turn_branches_from_the_node(server):
    console = EndpointConsole(server.base_url)
    console.say("Where two ways part", 4)
    fork = console.node
    console.say("One way", 4)
    done = console.restore(fork)
    engine = server.service.engine
    assert (done.node, done.mode, done.tokens, done.recomputed) == (fork, "exact", engine.tree.tape_length(fork), 0)
    assert console.node == fork and engine.tree.current == fork
    console.say("The other way", 4)
    assert engine.tree.node(console.node).parent == fork
    assert "One way" not in text_of(server, console.node)


def test_after_forget_the_next_turn_starts_a_new_conversation(server):
    console = EndpointConsole(server.base_url)
    console.say("An old conversation", 4)
    console.forget()
    console.say("A new one", 4)
    assert "An old conversation" not in text_of(server, console.node)


@pytest.mark.parametrize("route", ["turn", "restore"])
def test_a_node_the_engine_does_not_have_is_refused_in_one_line(server, route):
    console = EndpointConsole(server.base_url, node="n9999")
    with pytest.raises(EndpointError) as refused:
        console.say("From nowhere", 4) if route == "turn" else console.restore("n9999")
    assert str(refused.value) == f"the endpoint refused the {route} (404): no node n9999 in the engine's snapshot tree"


def test_the_routes_take_the_endpoints_key_like_its_openai_routes(model, tmp_path):
    with running_api(model, Profile(name="console", n_ctx=1024), tmp_path, api_key=KEY) as keyed:
        with pytest.raises(EndpointError) as refused:
            EndpointConsole(keyed.base_url).say("No key", 4)
        assert str(refused.value) == "the endpoint refused the turn (401): invalid or missing API key " \
                                     "(send it as Authorization: Bearer KEY)"
        console = EndpointConsole(keyed.base_url, KEY)
        console.say("With the key", 4)
        assert keyed.service.engine.tree.node(console.node).turn.input == "With the key"
