"""What tests can rely on from tiny_gguf: a real, small, deterministic llama that llama.cpp runs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from effctx_core.backends.gguf.binding import llama_cpp
from tests.helpers.tiny_gguf import (
    BOS_ID,
    N_EMBD,
    N_HEAD,
    N_HEAD_KV,
    N_LAYER,
    N_VOCAB,
    write_tiny_llama_gguf,
)

Llama = llama_cpp.Llama
LogitsProcessorList = llama_cpp.LogitsProcessorList
CreateCompletionResponse = llama_cpp.llama_types.CreateCompletionResponse

SENTENCE = b"The quick brown fox jumps over the lazy dog. Hello, world! 12345"
PROMPT = "The quick brown fox"
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _load(path: Path, **kwargs: Any) -> Llama:
    return Llama(model_path=str(path), n_ctx=256, n_threads=2, verbose=False, **kwargs)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _greedy_ids(llm: Llama, prompt: str = PROMPT) -> list[int]:
    """The 8 token ids that create_completion picks greedily after ``prompt``.

    create_completion returns text only, so a pass-through logits processor notes the
    argmax of the logits the greedy sampler is about to choose from (the candidates are
    still in id order there); the ids are checked against the returned text.
    """
    chosen: list[int] = []

    def note_argmax(_input_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        chosen.append(int(np.argmax(logits)))
        return logits

    out = cast(
        CreateCompletionResponse,
        llm.create_completion(
            prompt, max_tokens=8, temperature=0, logits_processor=LogitsProcessorList([note_argmax])
        ),
    )
    assert out["usage"]["completion_tokens"] == 8
    prompt_ids = llm.tokenize(prompt.encode())
    text = llm.detokenize(chosen, prev_tokens=prompt_ids).decode("utf-8", errors="ignore")
    assert text == out["choices"][0]["text"]
    return chosen


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def llm(model_path: Path) -> Iterator[Llama]:
    model = _load(model_path)
    yield model
    model.close()


def test_the_file_is_a_gguf_of_a_few_megabytes(model_path: Path) -> None:
    assert model_path.read_bytes()[:4] == b"GGUF"
    assert model_path.stat().st_size < 8 * 1024 * 1024


def test_the_write_leaves_no_temporary_file_behind(model_path: Path) -> None:
    assert sorted(p.name for p in model_path.parent.iterdir()) == ["tiny.gguf"]


def test_llama_cpp_reads_the_tiny_hyper_parameters(llm: Llama) -> None:
    assert (
        llama_cpp.llama_model_n_layer(llm.model),
        llama_cpp.llama_model_n_embd(llm.model),
        llama_cpp.llama_model_n_head(llm.model),
        llama_cpp.llama_model_n_head_kv(llm.model),
        llama_cpp.llama_model_n_ctx_train(llm.model),
        llm.n_vocab(),
    ) == (N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, 2048, N_VOCAB)
    assert llm.metadata["general.architecture"] == "llama"
    assert llm.metadata["general.name"] == "tiny-llama-test"


@pytest.mark.model
def test_n_ctx_train_is_the_advertised_training_context(tmp_path: Path) -> None:
    path = write_tiny_llama_gguf(tmp_path / "short.gguf", n_ctx_train=512)
    llm = _load(path)  # not vocab_only: that skips the hyper-parameters and reports 0
    try:
        assert llama_cpp.llama_model_n_ctx_train(llm.model) == 512
    finally:
        llm.close()


def test_plain_ascii_round_trips_exactly(llm: Llama) -> None:
    assert llm.detokenize(llm.tokenize(SENTENCE)) == SENTENCE


def test_common_words_are_single_tokens_after_bos(llm: Llama) -> None:
    tokens = llm.tokenize(SENTENCE)
    assert tokens[0] == BOS_ID
    assert [llm.detokenize([t]) for t in tokens[1:]] == [
        b" The", b" quick", b" brown", b" fox", b" jumps", b" over", b" the", b" lazy",
        b" dog", b".", b" Hello", b",", b" world", b"!", b" 1", b"2", b"3", b"4", b"5",
    ]  # fmt: skip


def test_text_outside_the_pieces_round_trips_through_byte_fallback(llm: Llama) -> None:
    text = "naïve café — 日本語 🦙\n\ttabs  and two spaces".encode()
    assert llm.detokenize(llm.tokenize(text)) == text


def test_greedy_generation_repeats_on_the_same_model(llm: Llama) -> None:
    assert _greedy_ids(llm) == _greedy_ids(llm)


def test_the_same_seed_writes_a_byte_identical_file(model_path: Path, tmp_path: Path) -> None:
    assert _digest(write_tiny_llama_gguf(tmp_path / "again.gguf", seed=0)) == _digest(model_path)


def test_the_same_seed_in_a_second_file_generates_the_same_ids(llm: Llama, tmp_path: Path) -> None:
    other = _load(write_tiny_llama_gguf(tmp_path / "again.gguf", seed=0))
    try:
        assert _greedy_ids(other) == _greedy_ids(llm)
    finally:
        other.close()


def test_a_different_seed_writes_a_different_file(model_path: Path, tmp_path: Path) -> None:
    assert _digest(write_tiny_llama_gguf(tmp_path / "seed1.gguf", seed=1)) != _digest(model_path)


@pytest.mark.model
def test_the_chat_template_is_read_back_as_metadata(tmp_path: Path) -> None:
    llm = _load(write_tiny_llama_gguf(tmp_path / "chat.gguf", chat_template=TEMPLATE))
    try:
        assert llm.metadata["tokenizer.chat_template"] == TEMPLATE
    finally:
        llm.close()


def test_without_a_chat_template_there_is_none_in_the_metadata(llm: Llama) -> None:
    assert "tokenizer.chat_template" not in llm.metadata


def test_a_q8_0_k_cache_with_flash_attention_completes(model_path: Path) -> None:
    llm = _load(model_path, type_k=llama_cpp.GGML_TYPE_Q8_0, flash_attn=True)
    try:
        out = cast(CreateCompletionResponse, llm.create_completion(PROMPT, max_tokens=8, temperature=0))
        assert (out["choices"][0]["finish_reason"], out["usage"]["completion_tokens"]) == ("length", 8)
    finally:
        llm.close()
