"""The long-context task families, made offline with the default model's tokenizer: the same
trial makes the same prompt, every trial hides values of its own, the needles hold the
answers at the asked depth, a prompt takes its length to within 2 %, the trials at one
length share their text up to their first needle, scoring, and the natural-text haystack."""

from __future__ import annotations

import re
import shutil
from collections import Counter

import pytest

from effctx_core.backends.gguf.runtime import load_model
from effctx_core.bench.prompts import PASSKEY_INTRO, PASSKEY_QUESTION, passkey_needle
from effctx_core.bench.tasks import haystack
from effctx_core.bench.tasks.base import TaskPrompt
from effctx_core.bench.tasks.families import FAMILIES
from effctx_core.errors import EffctxError

NAMES = ["passkey", "multikey", "multikey-text", "multivalue", "vartrack", "aggregation"]
LENGTH = 2048


@pytest.fixture(scope="module")
def tokenize(default_model):
    """The default model's tokenizer alone (no weights): prompts are made offline."""
    return load_model(default_model, vocab_only=True).tokenize


def count(tokenize, text: str) -> int:
    return len(tokenize(text, False))


def hidden(prompt: TaskPrompt) -> tuple[str, ...]:
    return tuple(prompt.text[start:end] for start, end in prompt.needles)


def test_the_registry_holds_the_six_families_and_their_controls(tokenize):
    assert list(FAMILIES) == NAMES
    assert all(family.name == name for name, family in FAMILIES.items())
    controlled = [name for name, family in FAMILIES.items() if family.control(tokenize, 512, 0) is not None]
    assert controlled == ["passkey", "multikey", "multikey-text", "multivalue"]


@pytest.mark.parametrize("name", NAMES)
def test_the_same_trial_makes_the_same_prompt(tokenize, name):
    family = FAMILIES[name]
    assert family.prompt(tokenize, LENGTH, 0.4, 3) == family.prompt(tokenize, LENGTH, 0.4, 3)
    assert family.control(tokenize, LENGTH, 3) == family.control(tokenize, LENGTH, 3)


@pytest.mark.parametrize("name", NAMES)
def test_every_trial_hides_values_of_its_own(tokenize, name):
    family = FAMILIES[name]
    by_seed = {hidden(family.prompt(tokenize, LENGTH, 0.5, seed)) for seed in range(5)}
    by_depth = {hidden(family.prompt(tokenize, LENGTH, depth, 0)) for depth in (0.0, 0.25, 0.5, 0.75, 1.0)}
    assert len(by_seed) == 5 and len(by_depth) == 5


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])
def test_the_needles_hold_every_answer(tokenize, name, depth):
    prompt = FAMILIES[name].prompt(tokenize, LENGTH, depth, 2)
    assert prompt.answers and not prompt.control
    assert all(any(answer in needle for needle in hidden(prompt)) for answer in prompt.answers)


def test_the_passkey_family_says_it_as_the_passkey_smoke(tokenize):
    prompt = FAMILIES["passkey"].prompt(tokenize, LENGTH, 0.5, 0)
    (key,) = prompt.answers
    assert re.fullmatch(r"\d{5}", key)
    assert hidden(prompt) == (passkey_needle(key),)
    assert prompt.text.startswith(PASSKEY_INTRO) and prompt.text.endswith(PASSKEY_QUESTION)


@pytest.mark.parametrize("name", ["multikey", "multikey-text"])
def test_multikey_asks_for_one_of_four_numbers(tokenize, name):
    prompt = FAMILIES[name].prompt(tokenize, LENGTH, 0.3, 0)
    (needle,) = hidden(prompt)
    word = re.search(r"What is the special magic number for (\w+)\?", prompt.text)[1]
    assert needle == f"The special magic number for {word} is: {prompt.answers[0]}."
    others = re.findall(r"The special magic number for (\w+) is: (\d{7})\.", prompt.text)
    assert len(others) == 4 and len({w for w, _ in others}) == 4 and len({n for _, n in others}) == 4
    assert prompt.score(others[1][1]) == 0.0  # a distractor's number is wrong


def test_multivalue_asks_for_all_four_numbers_of_one_word(tokenize):
    prompt = FAMILIES["multivalue"].prompt(tokenize, LENGTH, 0.3, 0)
    word = re.search(r"What are all the special magic numbers for (\w+)\?", prompt.text)[1]
    assert hidden(prompt) == tuple(f"One of the special magic numbers for {word} is: {v}." for v in prompt.answers)
    assert len(set(prompt.answers)) == 4


def test_vartrack_asks_for_the_value_at_the_end_of_a_chain(tokenize):
    prompt = FAMILIES["vartrack"].prompt(tokenize, LENGTH, 0.3, 0)
    first, *links = hidden(prompt)
    name, value = re.fullmatch(r"VAR ([A-Z]{5}) = (\d{5})\.", first).groups()
    assert prompt.answers == (value,) and len(links) == 4
    for link in links:
        name = re.fullmatch(rf"VAR ([A-Z]{{5}}) = VAR {name}\.", link)[1]
    assert prompt.text.endswith(f"What is the value of VAR {name}? The value of VAR {name} is")


def test_aggregation_lists_one_word_clearly_most_often(tokenize):
    prompt = FAMILIES["aggregation"].prompt(tokenize, LENGTH, 0.3, 0)
    entries = [re.fullmatch(r"Word list entry (\d+): (\w+)\.", needle).groups() for needle in hidden(prompt)]
    assert [int(number) for number, _ in entries] == list(range(1, len(entries) + 1))
    (top, most), (_, next_most) = Counter(word for _, word in entries).most_common(2)
    assert prompt.answers == (top,) and most >= 2 * next_most


@pytest.mark.parametrize("name", NAMES)
def test_the_first_needle_lies_at_the_asked_depth(tokenize, name):
    family = FAMILIES[name]
    # At depth 0 the first needle follows the intro; at depth 1 (every needle at the end)
    # it follows the whole haystack.
    start = family.prompt(tokenize, LENGTH, 0.0, 0).needles[0][0]
    deepest = family.prompt(tokenize, LENGTH, 1.0, 0)
    whole = count(tokenize, deepest.text[start : deepest.needles[0][0]])
    sentence = max(count(tokenize, s) for s in haystack.sentences(deepest.text[start : deepest.needles[0][0]]))
    for depth in (0.1, 0.5, 0.9):
        prompt = family.prompt(tokenize, LENGTH, depth, 1)
        before = count(tokenize, prompt.text[start : prompt.needles[0][0]])
        assert abs(before - depth * whole) <= sentence, (depth, before, whole)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("length", [512, 2048, 8192])
def test_a_prompt_takes_its_length_within_2_percent(tokenize, name, length):
    family = FAMILIES[name]
    prompts = [family.prompt(tokenize, length, depth, seed) for depth, seed in ((0.0, 0), (0.5, 1), (1.0, 2))]
    control = family.control(tokenize, length, 0)
    for prompt in prompts + ([control] if control else []):
        assert abs(count(tokenize, prompt.text) - length) <= 0.02 * length


@pytest.mark.parametrize("name", NAMES)
def test_the_trials_at_one_length_share_their_text_up_to_their_first_needle(tokenize, name):
    """What the trial runner prefills once: the text before a trial's first needle begins
    every trial whose first needle lies as deep or deeper, and the control."""
    family = FAMILIES[name]
    trials = [family.prompt(tokenize, LENGTH, depth, seed) for depth in (0.0, 0.1, 0.5, 0.9, 1.0) for seed in (0, 1)]
    control = family.control(tokenize, LENGTH, 0)
    for shallow in trials:
        head = shallow.text[: shallow.needles[0][0]]
        deeper = [trial for trial in trials if trial.depth >= shallow.depth]
        assert all(trial.text.startswith(head) for trial in deeper + ([control] if control else []))


def test_scoring_is_exact_match_ignoring_case_and_spacing(tokenize):
    passkey = FAMILIES["passkey"].prompt(tokenize, 512, 0.5, 0)
    (key,) = passkey.answers
    assert passkey.score(f"  {key}. Remember it.") == 1.0
    assert passkey.score(f"{key[:3]} {key[3:]}") == 0.0
    aggregation = FAMILIES["aggregation"].prompt(tokenize, 512, 0.5, 0)
    assert aggregation.score(f" {aggregation.answers[0].upper()}\n") == 1.0
    assert aggregation.score("zebra" if aggregation.answers[0] != "zebra" else "apple") == 0.0


def test_multivalue_scores_the_fraction_of_values_found(tokenize):
    prompt = FAMILIES["multivalue"].prompt(tokenize, 512, 0.5, 0)
    first, second, third, _ = prompt.answers
    assert prompt.score(f"{first}, {second} and {third}") == 0.75
    assert prompt.score(" ".join(reversed(prompt.answers))) == 1.0


@pytest.mark.parametrize("name", ["passkey", "multikey", "multikey-text", "multivalue"])
def test_a_control_hides_nothing_and_an_answer_of_its_values_shape_is_made_up(tokenize, name):
    control = FAMILIES[name].control(tokenize, LENGTH, 0)
    digits = 5 if name == "passkey" else 7
    assert control.control and not control.needles
    assert control.score("1234567"[:digits]) == 0.0
    assert control.score("not given in the text") == 1.0


def test_the_natural_text_is_debians_license_texts_in_order(tokenize):
    texts = [(haystack.LICENSES / name).read_text(encoding="utf-8").strip() for name in ("GPL-3", "GPL-2")]
    family = FAMILIES["multikey-text"]
    # The control's haystack runs from the intro to the question; GPL-3 holds 7,560
    # tokens, so 8,192 go on into GPL-2.
    text = family.control(tokenize, 8192, 0)
    body = text.text[len(family.intro) : text.text.rindex("\n\nWhat is")]
    assert len(body) > len(texts[0]) + 1000 and "\n\n".join(texts).startswith(body)
    assert "GNU" not in FAMILIES["multikey"].control(tokenize, 8192, 0).text


def test_a_missing_license_text_is_a_one_line_error_naming_it(tokenize, tmp_path, monkeypatch):
    gpl3 = haystack.LICENSES / "GPL-3"
    monkeypatch.setattr(haystack, "LICENSES", tmp_path)
    family = FAMILIES["multikey-text"]
    with pytest.raises(EffctxError) as caught:
        family.prompt(tokenize, 512, 0.5, 0)
    assert str(tmp_path / "GPL-3") in str(caught.value) and "\n" not in str(caught.value)
    # A text is read when the haystack reaches it: GPL-3 alone makes 512 tokens, not 8,192.
    shutil.copy(gpl3, tmp_path)
    family.prompt(tokenize, 512, 0.5, 0)
    with pytest.raises(EffctxError, match=re.escape(str(tmp_path / "GPL-2"))):
        family.prompt(tokenize, 8192, 0.5, 0)


@pytest.mark.parametrize("name", NAMES)
def test_a_length_too_short_for_a_haystack_still_hides_the_needles(tokenize, name):
    prompt = FAMILIES[name].prompt(tokenize, 32, 0.5, 0)
    assert all(any(answer in needle for needle in hidden(prompt)) for answer in prompt.answers)
