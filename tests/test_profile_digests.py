"""The digests a profile reaches, held as effctx computed them before profiles had typed
backend tables (commit d8572be): every stored state (runtime identity) and every
certificate (profile digest) made by an earlier effctx still counts for the same
settings, whether written as a built-in, in the old top-level form or in the new one."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.certify.runner import profile_digest
from effctx_core.identity import RuntimeIdentity

# name -> (runtime identity digest, certificate profile digest), first 16 hex digits.
HELD = {
    "exact": ("91e0e14a44794155", "7860ac7bcb3a891c"),
    "fast-long": ("028e73224afbe00e", "e5c9202ff5a95605"),
    "llama-server": ("d94c8121f3b09343", "eff9a5471498536d"),
    "ov-evict": ("2676e0c3b903d5dd", "cf8b5f9498d78bc2"),
    "ov-exact": ("862bb4ccd41a6565", "a398c5827c4cf66d"),
    "ov-prefix-cache": ("b41e36a9959e316c", "4495e49ed4d89308"),
    "q8": ("73c465d2fc937dc8", "15a75a0a0cf7ec05"),
    "streaming": ("8a27efa3fb6ae59a", "c9f32210ae94d85f"),
    "old-llama": ("73c465d2fc937dc8", "585c5a3785edc0e8"),
    "old-rpc": ("91e0e14a44794155", "e6b15cd1e0ace751"),
    "old-server": ("223be8322fed444f", "bf5b53bf6d606ed8"),
    "old-openvino": ("150d02d0e035d514", "b4214b919c33063c"),
}

# User profiles as effctx read them before the backend tables: llama's settings at the top.
OLD_STYLE = {
    "old-llama": 'n_ctx = 8192\nflash_attn = true\nswa_full = false\nkv_cache_type_k = "q8_0"\n'
                 'kv_cache_type_v = "q8_0"\n',
    "old-rpc": 'backend = "llama"\nrpc_workers = ["127.0.0.1:50052", "127.0.0.1:50053"]\nrpc_timeout_s = 30\n',
    "old-server": 'backend = "llama-server"\nflash_attn = true\nswa_full = false\n[llama-server]\ntimeout_s = 90\n',
    "old-openvino": 'backend = "openvino"\nn_batch = 64\n[openvino]\npipeline = "paged"\n'
                    "enable_prefix_caching = true\n",
}
PACKAGES = {"llama": "llama", "openvino": "openvino", "llama-server": "llama_server"}


def _kv_settings(profile) -> dict:
    settings = importlib.import_module(f"effctx_core.backends.{PACKAGES[profile.backend]}.settings")
    return settings.kv_settings(profile)


def _digests(profile) -> tuple[str, str]:
    identity = RuntimeIdentity.build(profile.backend, "v", "ab" * 32, _kv_settings(profile),
                                     profile.residency.identity_key, "plain-transcript-v1", True)
    return identity.digest()[:16], profile_digest(profile)[:16]


@pytest.mark.parametrize("name", [n for n in HELD if n not in OLD_STYLE])
def test_a_built_in_profile_keeps_its_digests(name):
    assert _digests(load_profile(name)) == HELD[name]


@pytest.mark.parametrize("name", list(OLD_STYLE))
def test_an_old_style_user_profile_keeps_its_digests(name, tmp_path: Path):
    path = tmp_path / f"{name}.toml"
    path.write_text(OLD_STYLE[name])
    assert _digests(load_profile(str(path))) == HELD[name]
