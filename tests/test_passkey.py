"""Quality smoke: the default model finds a passkey hidden in ~1,500 tokens of filler."""

from __future__ import annotations

from effctx_core.bench.prompts import passkey_prompt
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.profiles import Profile


def test_the_default_model_finds_a_passkey_in_1500_tokens(default_model):
    engine = SessionEngine(default_model, Profile(name="passkey", n_ctx=2048))
    engine.open()
    try:
        task = passkey_prompt(engine.session.tokenize, 1500, depth=0.5, seed=3)
        result = engine.complete(task.text, DecodeConfig(max_tokens=16))
    finally:
        engine.close()
    assert 1400 <= result.prefilled <= 1600
    assert result.text.strip().startswith(task.key)
