"""What a decode can be asked for beyond its sampler: a GBNF grammar the reply must follow
(constrained_decoding), and each token's log-probability with its likeliest alternatives
(decode_logprobs). Where the capability report claims one, it is exact; where it does not,
asking for it is refused with the report's reason before a token is decoded, the session
as it was."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from effctx_core.contract import DecodeConfig, Session, TokenChunk
from effctx_core.errors import EffctxError, UnsupportedFeatureError
from tests.helpers.contract import require, words

YES_NO = 'root ::= "yes" | "no"'
THREE_DIGITS = "root ::= [0-9] [0-9] [0-9]"


@pytest.fixture
def prompted(fresh: Session) -> Session:
    fresh.ensure_prefix(words(fresh, 8))
    return fresh


def reply_to(session: Session, prompt: list[int], config: DecodeConfig) -> list[TokenChunk]:
    """The reply to `prompt` prefilled into an empty cache: the same batches every time,
    so the same logits."""
    session.ensure_prefix([])
    session.ensure_prefix(prompt)
    return list(session.decode(config))


def refused_unchanged(session: Session, config: DecodeConfig, error: type[EffctxError], message: str) -> None:
    """Decoding with `config` raises `error` with exactly `message` before a token is
    handed out, and the session holds and counts what it did before."""
    tape, before = list(session.tokens), session.explain()
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        next(session.decode(config))
    assert list(session.tokens) == tape and session.explain() == before


def test_the_decode_capabilities_are_described_as_an_open_session_has_them(cell, session):
    described = cell.backend.describe(cell.model_path, cell.profile()).capabilities
    caps = session.info.capabilities
    assert (described.constrained_decoding, described.decode_logprobs) == (caps.constrained_decoding,
                                                                           caps.decode_logprobs)


@pytest.mark.parametrize("grammar, shape", [(YES_NO, "yes|no"), (THREE_DIGITS, "[0-9]{3}")], ids=["yes-no", "digits"])
@pytest.mark.parametrize("config", [DecodeConfig(max_tokens=8), DecodeConfig(max_tokens=8, temperature=1.5, top_p=0.9,
                                                                               seed=7)],
                         ids=["greedy", "sampled"])
def test_a_claimed_grammar_shapes_the_reply_which_ends_when_the_grammar_does(prompted, grammar, shape, config):
    require(prompted.info.capabilities.constrained_decoding, "constrained_decoding")
    chunks = list(prompted.decode(replace(config, grammar=grammar)))
    assert re.fullmatch(shape, "".join(c.text for c in chunks))
    assert [c.stop_reason for c in chunks] == [None] * (len(chunks) - 1) + ["eog"]


def test_a_grammar_where_none_is_claimed_is_refused_with_the_reason(prompted):
    claim = prompted.info.capabilities.constrained_decoding
    if claim.supported:
        pytest.skip("claims constrained_decoding: exercised by the tests above")
    refused_unchanged(prompted, DecodeConfig(max_tokens=4, grammar=YES_NO), UnsupportedFeatureError,
                      f"no constrained decoding here: {claim.reason}")


def test_a_grammar_llama_cpp_cannot_parse_is_one_line_with_its_reason(prompted, capfd):
    require(prompted.info.capabilities.constrained_decoding, "constrained_decoding")
    refused_unchanged(prompted, DecodeConfig(max_tokens=4, grammar='root ::= "yes'), EffctxError,
                      "grammar rejected: unexpected end of input")
    # llama.cpp's parser writes its reason to stderr, where the console draws: taken from there.
    assert "error parsing grammar" not in capfd.readouterr().err


def test_a_grammar_without_a_root_rule_is_one_line_with_its_reason(prompted):
    require(prompted.info.capabilities.constrained_decoding, "constrained_decoding")
    refused_unchanged(prompted, DecodeConfig(max_tokens=4, grammar='answer ::= "yes"'), EffctxError,
                      "grammar rejected: grammar does not contain a 'root' symbol")


def test_a_grammar_no_token_can_follow_ends_the_decode_in_one_line(prompted):
    # llama.cpp's tokens never spell a NUL character; accepting a token the grammar
    # rejected would abort the process.
    require(prompted.info.capabilities.constrained_decoding, "constrained_decoding")
    refused_unchanged(prompted, DecodeConfig(max_tokens=4, grammar=r'root ::= "\x00"'), EffctxError,
                      "grammar dead end: no token of the vocabulary continues it after 0 tokens")


def test_every_token_carries_its_log_probability_and_the_likeliest_first(prompted):
    require(prompted.info.capabilities.decode_logprobs, "decode_logprobs")
    chunks = list(prompted.decode(DecodeConfig(max_tokens=4, logprobs=3)))
    assert chunks
    for chunk in chunks:
        assert chunk.logprob is not None and chunk.logprob <= 0.0
        values = [logprob for _, logprob in chunk.top]
        assert len(chunk.top) == 3 and values == sorted(values, reverse=True) and values[0] <= 0.0
        assert chunk.top[0] == (chunk.token, chunk.logprob)  # greedy takes the likeliest token


def test_zero_alternatives_leave_the_token_its_log_probability_alone(fresh):
    require(fresh.info.capabilities.decode_logprobs, "decode_logprobs")
    prompt = words(fresh, 8)
    with_top = reply_to(fresh, prompt, DecodeConfig(max_tokens=2, logprobs=1))
    alone = reply_to(fresh, prompt, DecodeConfig(max_tokens=2, logprobs=0))
    assert [(c.token, c.logprob, c.top) for c in alone] == [(c.token, c.logprob, ()) for c in with_top]


def test_under_a_grammar_the_log_probabilities_are_the_models_own(fresh):
    caps = fresh.info.capabilities
    require(caps.constrained_decoding, "constrained_decoding")
    require(caps.decode_logprobs, "decode_logprobs")
    prompt = words(fresh, 8)
    free = reply_to(fresh, prompt, DecodeConfig(max_tokens=1, logprobs=5))[0]
    constrained = reply_to(fresh, prompt, DecodeConfig(max_tokens=1, logprobs=5, grammar=YES_NO))[0]
    assert constrained.top == free.top
    # The token the grammar made is scored as the model scores it, not as the only choice.
    raw = dict(free.top)
    if constrained.token in raw:
        assert constrained.logprob == raw[constrained.token]
    else:
        assert constrained.logprob < free.top[-1][1]


def test_logprobs_where_none_are_claimed_are_refused_with_the_reason(prompted):
    claim = prompted.info.capabilities.decode_logprobs
    if claim.supported:
        pytest.skip("claims decode_logprobs: exercised by the tests above")
    refused_unchanged(prompted, DecodeConfig(max_tokens=4, logprobs=2), UnsupportedFeatureError,
                      f"no decode logprobs here: {claim.reason}")


@pytest.mark.parametrize("k", [-1, 21])
def test_a_logprobs_count_outside_0_to_20_is_refused_when_the_config_is_made(k):
    with pytest.raises(EffctxError, match=f"^logprobs must be between 0 and 20, not {k}$"):
        DecodeConfig(logprobs=k)
