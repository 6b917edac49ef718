"""Chat formats: the plain transcript for base models, the model's Jinja chat template otherwise.

The unit part cuts templates into turn pieces without a model; the last part runs the
real engine on a tiny ChatML model to show the pieces become the right tokens and that
every later turn reuses the whole tape.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pytest

from effctx_core import transcript
from effctx_core.contract import DecodeConfig, ModelFacts
from effctx_core.engine import SessionEngine, TurnResult
from effctx_core.profiles import Profile
from effctx_core.transcript import PLAIN_TRANSCRIPT, TemplateFormat, chat_format_for, chat_format_report
from tests.helpers.tiny_gguf import BOS_ID, EOS_ID, N_VOCAB, write_tiny_llama_gguf

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Llama 2's shape: BOS before every user message, a space before the reply, EOS after it.
LLAMA2 = (
    "{% for m in messages %}{% if m.role == 'user' %}{{ bos_token }}[INST] {{ m.content }} [/INST]"
    "{% else %} {{ m.content }} {{ eos_token }}{% endif %}{% endfor %}"
)
TOKEN_TEXT = {BOS_ID: "<s>", EOS_ID: "</s>"}


def facts(chat_template: str | None, add_bos: bool = True) -> ModelFacts:
    return ModelFacts(
        path="model.gguf", name="model", architecture="llama", file_bytes=0, sha256="0" * 64,
        n_layers=2, n_head=4, n_head_kv=2, head_dim_k=32, head_dim_v=32, n_embd=128,
        context_length=2048, sliding_window=None, global_layers=(0, 1), global_layers_rule="all",
        vocab_size=N_VOCAB, bos_token_id=BOS_ID, eos_token_id=EOS_ID, add_bos=add_bos,
        chat_template=chat_template,
    )


def template_format(chat_template: str, token_text: Mapping[int, str] | None = None) -> TemplateFormat:
    fmt, why = chat_format_report(facts(chat_template), token_text)
    assert isinstance(fmt, TemplateFormat), why
    return fmt


def fallback_reason(chat_template: str, token_text: Mapping[int, str] | None = None) -> str:
    fmt, why = chat_format_report(facts(chat_template), token_text)
    assert fmt is PLAIN_TRANSCRIPT
    return why


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- the plain transcript


def test_a_model_without_a_chat_template_gets_the_plain_transcript() -> None:
    assert chat_format_report(facts(None)) == (PLAIN_TRANSCRIPT, "no chat template in the model; plain-transcript-v1")


def test_the_plain_transcript_renders_turns_as_it_always_has() -> None:
    fmt = chat_format_for(facts(None))
    assert fmt.render_turn("  Hello \n", first=True) == "User: Hello\nAssistant:"
    assert fmt.render_turn("Again", first=False) == "\nUser: Again\nAssistant:"
    assert fmt.render_turn("Again", first=False, opened=True) == " Again\nAssistant:"
    assert (fmt.identity, fmt.turn_opening, fmt.special_tokens) == ("plain-transcript-v1", "\nUser:", False)


def test_the_plain_transcript_stops_on_either_speakers_label_at_the_start_of_a_line() -> None:
    assert PLAIN_TRANSCRIPT.stop == ("\nUser:", "\nAssistant:")


# --------------------------------------------------------------------------- a ChatML template


def test_a_first_turn_is_the_head_the_user_message_and_the_generation_prompt() -> None:
    fmt = template_format(CHATML)
    assert fmt.render_turn(" Hello\n", first=True) == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"


def test_a_later_turn_closes_the_reply_and_opens_the_next_generation() -> None:
    fmt = template_format(CHATML)
    assert fmt.render_turn("Again", first=False) == (
        "<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n")


def test_the_turns_add_up_to_what_the_template_renders_for_the_conversation() -> None:
    fmt = template_format(CHATML)
    tape = fmt.render_turn("Hello", first=True) + "Hi there" + fmt.render_turn("Again", first=False)
    whole = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(CHATML).render(
        messages=[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
                  {"role": "user", "content": "Again"}],
        add_generation_prompt=True)
    assert tape == whole


def test_a_reply_that_wrote_the_opening_itself_gets_only_the_rest_of_it() -> None:
    fmt = template_format(CHATML)
    assert fmt.turn_opening == "<|im_end|>\n<|im_start|>user"
    assert fmt.render_turn("Again", first=False, opened=True) == "\nAgain<|im_end|>\n<|im_start|>assistant\n"


def test_a_chatml_reply_stops_on_the_next_turns_opening_and_on_either_speakers_marker() -> None:
    assert template_format(CHATML).stop == (
        "<|im_end|>\n<|im_start|>user", "<|im_start|>user", "<|im_end|>\n<|im_start|>assistant")


def test_a_llama2_reply_stops_on_the_next_turns_opening_and_on_either_speakers_marker() -> None:
    assert template_format(LLAMA2, TOKEN_TEXT).stop == (" </s><s>[INST]", "[INST]", "[/INST]")


def test_template_text_is_tokenized_with_special_tokens() -> None:
    assert template_format(CHATML).special_tokens is True


def test_the_identity_is_the_sha256_of_the_template_source() -> None:
    assert template_format(CHATML).identity == f"jinja-sha256:{sha256(CHATML)}"


def test_two_templates_have_two_identities() -> None:
    other = CHATML.replace("<|im_end|>\n", "<|im_end|>")
    assert template_format(other).identity != template_format(CHATML).identity


def test_the_report_names_the_template() -> None:
    assert chat_format_report(facts(CHATML))[1] == f"the model's chat template (jinja-sha256:{sha256(CHATML)})"


def test_a_template_is_compiled_once_however_many_turns_ask_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    from_string = transcript._ENVIRONMENT.from_string

    def counting(source: str) -> jinja2.Template:
        compiled.append(source)
        return from_string(source)

    monkeypatch.setattr(transcript._ENVIRONMENT, "from_string", counting)
    fresh = CHATML + "{# compiled once #}"
    first = chat_format_for(facts(fresh))
    assert chat_format_for(facts(fresh)) is first
    assert compiled == [fresh]


# --------------------------------------------------------------------------- BOS and EOS


def test_a_bos_the_tokenizer_adds_is_not_written_again() -> None:
    fmt = template_format("{{ bos_token }}" + CHATML, TOKEN_TEXT)
    assert fmt.render_turn("Hello", first=True) == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"


def test_a_leading_bos_needs_no_token_text_when_the_tokenizer_adds_it() -> None:
    fmt = template_format("{{ bos_token }}" + CHATML)
    assert fmt.render_turn("Hello", first=True) == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"


def test_a_model_whose_tokenizer_adds_no_bos_gets_the_templates_bos() -> None:
    fmt, _ = chat_format_report(facts("{{ bos_token }}" + CHATML, add_bos=False), TOKEN_TEXT)
    assert fmt.render_turn("Hello", first=True) == "<s><|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"


def test_bos_and_eos_between_turns_stay_where_the_template_writes_them() -> None:
    fmt = template_format(LLAMA2, TOKEN_TEXT)
    assert fmt.render_turn("Hello", first=True) == "[INST] Hello [/INST]"
    assert fmt.render_turn("Again", first=False) == " </s><s>[INST] Again [/INST]"


def test_a_template_that_writes_eos_is_not_used_without_its_text() -> None:
    assert fallback_reason(LLAMA2) == (
        "the model's chat template is not used (it writes the BOS or EOS token, whose text is not known); "
        "plain-transcript-v1")


# --------------------------------------------------------------------------- templates that cannot be used


def test_a_template_that_refuses_the_conversation_falls_back_with_its_one_line_message() -> None:
    refusing = "{% if messages[0].role != 'system' %}{{ raise_exception('A system\n  message is required') }}{% endif %}"
    assert fallback_reason(refusing + CHATML) == (
        "the model's chat template is not used (A system message is required); plain-transcript-v1")


def test_a_template_without_a_generation_prompt_falls_back() -> None:
    assert "no generation prompt" in fallback_reason("{% for m in messages %}{{ m.content }}{% endfor %}")


def test_a_template_that_ignores_add_generation_prompt_falls_back() -> None:
    ignoring = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    assert "renders earlier turns differently" in fallback_reason(ignoring)


def test_a_template_that_changes_the_content_falls_back() -> None:
    assert "content once, as it is" in fallback_reason(CHATML.replace("m.content", "m.content | upper"))


def test_a_template_with_a_syntax_error_falls_back() -> None:
    assert "TemplateSyntaxError" in fallback_reason("{% for m in messages %}{{ m.content }}")


def test_a_template_cannot_reach_python_internals() -> None:
    assert "SecurityError" in fallback_reason("{{ ''.__class__.__mro__ }}" + CHATML)


def test_a_template_cannot_run_code(tmp_path: Path) -> None:
    marker = tmp_path / "escaped"
    payload = "{{ cycler.__init__.__globals__.os.popen('touch " + str(marker) + "').read() }}"
    assert "SecurityError" in fallback_reason(payload + CHATML)
    assert not marker.exists()


# --------------------------------------------------------------------------- the engine on a ChatML model

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
IM_START_ID, IM_END_ID = N_VOCAB, N_VOCAB + 1  # tiny_gguf appends special tokens in order


@dataclass(frozen=True)
class TwoTurns:
    engine: SessionEngine
    first: TurnResult
    second: TurnResult
    tape_after_first: tuple[int, ...]
    tape_after_second: tuple[int, ...]


@pytest.fixture(scope="module")
def two_turns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoTurns]:
    path = write_tiny_llama_gguf(tmp_path_factory.mktemp("chatml") / "chatml.gguf", chat_template=CHATML,
                                 special_tokens=(IM_START, IM_END), eot_token=IM_END)
    engine = SessionEngine(path, Profile(name="t", n_ctx=512))
    engine.open()
    try:
        first = engine.chat("Hello", DecodeConfig(max_tokens=4))
        tape_after_first = engine.tape
        second = engine.chat("Again", DecodeConfig(max_tokens=4))
        yield TwoTurns(engine, first, second, tape_after_first, engine.tape)
    finally:
        engine.close()


def test_the_engine_records_the_template_identity(two_turns: TwoTurns) -> None:
    assert two_turns.engine.info.identity.prompt_template == f"jinja-sha256:{sha256(CHATML)}"


def test_the_second_turn_reuses_the_whole_first_turn(two_turns: TwoTurns) -> None:
    assert (two_turns.second.reused, two_turns.second.dropped) == (len(two_turns.tape_after_first), 0)


def test_control_token_text_becomes_one_token_each(two_turns: TwoTurns) -> None:
    prompt = list(two_turns.tape_after_first[:two_turns.first.prefilled])
    assert prompt[:2] == [BOS_ID, IM_START_ID]
    assert (prompt.count(IM_START_ID), prompt.count(IM_END_ID)) == (2, 1)


def test_the_second_turn_starts_by_closing_the_reply(two_turns: TwoTurns) -> None:
    start = len(two_turns.tape_after_first)
    appended = list(two_turns.tape_after_second[start:start + two_turns.second.prefilled])
    assert appended[0] == IM_END_ID
    assert (appended.count(IM_START_ID), appended.count(IM_END_ID)) == (2, 2)
