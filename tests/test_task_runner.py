"""The task runner prefills what prompts share once, through snapshots, and every trial
still reads exactly the tokens a cold run reads: on the tiny model, real llama.cpp."""

from __future__ import annotations

import pytest

from effctx_core.backends.tape import common_prefix_length
from effctx_core.bench.tasks.base import TaskPrompt
from effctx_core.bench.tasks.runner import run_trials
from effctx_core.engine import SessionEngine
from effctx_core.profiles import Profile
from effctx_core.residency.config import ResidencyConfig
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.model

FILLER = "The grass is green. The sky is blue. " * 12
QUESTION = " What is the key? The key is"


def prompt(depth: float, seed: int) -> TaskPrompt:
    """The same haystack for every depth and seed, the needle at `depth` of it."""
    key = f"{10000 + 7919 * seed + int(depth * 100):05d}"
    cut = int(len(FILLER) * depth)
    needle = f" The key is {key}. "
    text = FILLER[:cut] + needle + FILLER[cut:] + QUESTION
    return TaskPrompt("keys", 200, depth, seed, text, ((cut, cut + len(needle)),), (key,), r"\d{5}", QUESTION)


PROMPTS = [prompt(depth, seed) for depth in (0.8, 0.2, 0.5) for seed in (0, 1)]


def opened(model, profile: Profile) -> SessionEngine:
    engine = SessionEngine(model, profile)
    engine.open()
    return engine


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("runner") / "tiny.gguf")


@pytest.fixture(scope="module")
def engine(tiny_model):
    engine = opened(tiny_model, Profile(name="runner", n_ctx=512))
    yield engine
    engine.close()


def test_a_shared_run_answers_as_the_cold_run_does(engine):
    shared = run_trials(engine, PROMPTS, answer_tokens=6)
    cold = run_trials(engine, PROMPTS, answer_tokens=6, share=False)
    assert [(t.depth, t.seed, t.answer, t.prompt_tokens) for t in shared.trials] == \
        [(t.depth, t.seed, t.answer, t.prompt_tokens) for t in cold.trials]


def test_each_parting_point_is_prefilled_once(tiny_model):
    engine = opened(tiny_model, Profile(name="runner", n_ctx=512))  # an empty cache: nothing kept from before
    try:
        tokens = sorted(engine.session.tokenize(p.text, engine.session.info.facts.add_bos) for p in PROMPTS)
        run = run_trials(engine, PROMPTS, answer_tokens=1)
    finally:
        engine.close()
    # Each prompt of the walk restores what it shares with the one before it.
    restored = [common_prefix_length(a, b) for a, b in zip(tokens, tokens[1:])]
    assert run.prompt_tokens == sum(map(len, tokens))
    assert run.saved == sum(restored) > 0
    assert [t.shared for t in run.trials] == [0, *restored]
    assert [t.shared for t in run.trials] == [0] + [common_prefix_length(a, b) for a, b in zip(tokens, tokens[1:])]


def test_the_deeper_needles_share_the_shallower_ones_haystack(engine):
    run = run_trials(engine, [prompt(0.2, 0), prompt(0.8, 0)], answer_tokens=1)
    shallow, deep = sorted(run.trials, key=lambda t: t.depth)
    assert min(shallow.shared, deep.shared) == 0
    # the later of the two restored the haystack up to the shallower needle, about a fifth
    assert max(shallow.shared, deep.shared) >= 0.15 * shallow.prompt_tokens


def test_an_evicting_cell_runs_every_prompt_cold(tiny_model):
    engine = opened(tiny_model, Profile(name="streaming", n_ctx=512, residency=ResidencyConfig(
        policy="streaming", sink_tokens=4, recent_tokens=380, budget=384, block_size=4)))
    try:
        run = run_trials(engine, PROMPTS[:2], answer_tokens=1)
    finally:
        engine.close()
    assert [t.shared for t in run.trials] == [0, 0]
    assert run.cold_ttft_ms is not None and run.warm_ttft_ms is None  # no state to start warm from


def test_every_trial_is_scored_and_joined_with_residency(engine):
    run = run_trials(engine, PROMPTS[:2], answer_tokens=6)
    for trial in run.trials:
        assert trial.score == (1.0 if trial.answers[0] in trial.answer else 0.0)
        assert trial.needles_resident and trial.evicted_tokens == 0


def test_the_first_prompt_is_timed_cold_and_again_warm_from_its_stable_part(engine):
    run = run_trials(engine, PROMPTS[:1], answer_tokens=1)
    # one prompt: nothing shared, but its stable part's state was kept for the warm start
    assert run.trials[0].shared == 0 and run.prefilled == run.prompt_tokens
    assert run.cold_ttft_ms is not None and run.warm_ttft_ms is not None
