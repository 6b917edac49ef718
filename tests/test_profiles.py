"""Runtime profiles: TOML schema, built-ins, user profiles, validation, identity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from effctx_core.backends.llama.backend import LlamaBackend
from effctx_core.backends.profile_loader import available_profiles, load_profile, profile_from_toml
from effctx_core.profiles import ProfileError

EFFCTX = str(Path(sys.executable).with_name("effctx"))


def test_the_built_in_profiles_are_there_and_valid():
    assert {"exact", "fast-long", "q8", "streaming"} <= set(available_profiles())
    exact, fast, q8, streaming = (load_profile(n) for n in ("exact", "fast-long", "q8", "streaming"))
    assert (exact.backend_options.flash_attn, exact.kv_cache_type_k, exact.kv_cache_type_v) == (False, "f16", "f16")
    assert (fast.backend_options.flash_attn, fast.backend_options.swa_full) == (True, False)
    assert (q8.kv_cache_type_k, q8.kv_cache_type_v, q8.backend_options.flash_attn) == ("q8_0", "q8_0", True)
    assert (streaming.residency.policy, streaming.residency.sink_tokens, streaming.backend_options.swa_full) == ("streaming", 4, True)


def test_no_profile_means_the_exact_profile():
    assert load_profile(None).name == "exact"


def test_a_user_profile_overrides_a_built_in_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    user_dir = tmp_path / "effctx" / "profiles"
    user_dir.mkdir(parents=True)
    (user_dir / "exact.toml").write_text("n_ctx = 1024\n")
    (user_dir / "mine.toml").write_text('description = "mine"\nn_ctx = 2048\n')
    assert load_profile("exact").n_ctx == 1024
    assert load_profile("mine").n_ctx == 2048
    assert available_profiles()["mine"] == str(user_dir / "mine.toml")


def test_a_profile_can_be_given_as_a_path(tmp_path):
    f = tmp_path / "long.toml"
    f.write_text("n_ctx = 8192\nflash_attn = true\n")
    profile = load_profile(str(f))
    assert (profile.name, profile.n_ctx, profile.backend_options.flash_attn) == ("long", 8192, True)


@pytest.mark.parametrize(
    "toml, message",
    [
        ('kv_cache_type_k = "q3_k"',
         "unknown KV cache type 'q3_k' for K (known: f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, bf16)"),
        ('kv_cache_type_v = "q8_0"',
         "V cache type q8_0 needs flash_attn = true (llama.cpp cannot create a context with a quantized V cache without it)"),
        ("n_ctx = 8", "n_ctx 8 is too small (minimum 16)"),
        ('[residency]\npolicy = "lru"', "unknown residency policy 'lru' (known: none, streaming, budget, scored)"),
        ('[residency]\npolicy = "streaming"\nsink_tokens = 32\nrecent_tokens = 1024\nbudget = 1024',
         "sink_tokens 32 + recent_tokens 1024 is above the budget 1024"),
        ('[residency]\npolicy = "streaming"\nsink_tokens = 5\nblock_size = 4',
         "residency.sink_tokens 5 is not a multiple of block_size 4"),
        ("n_ctx = 1024\n[residency]\nbudget = 2048", "residency budget 2048 is above n_ctx 1024"),
        ("flash_atn = true", "unknown key flash_atn"),
        ("[residency]\nsink = 4", "unknown key residency.sink"),
        ('n_ctx = "big"', "n_ctx must be int, not str"),
        ("flash_attn = 1", "flash_attn must be bool, not int"),
    ],
)
def test_invalid_profiles_are_refused_with_the_reason(toml, message):
    """(OpenVINO profiles' errors are in test_openvino_backend.py.)"""
    with pytest.raises(ProfileError) as err:
        profile_from_toml(toml, "bad", "profile 'bad'")
    assert str(err.value) == f"profile 'bad': {message}"


def test_a_profile_that_is_not_toml_is_refused():
    with pytest.raises(ProfileError, match="^profile 'bad': not valid TOML: "):
        profile_from_toml("n_ctx = [", "bad", "profile 'bad'")


def test_an_unknown_profile_name_lists_the_available_ones():
    with pytest.raises(ProfileError, match="unknown profile 'nope' \\(available: exact, fast-long, llama-server, ov-evict, ov-exact, ov-prefix-cache, q8, streaming"):
        load_profile("nope")


@pytest.mark.parametrize(
    "args, message",
    [
        (["info", "--profile", "nope"], "unknown profile 'nope'"),
        (["run", "--prompt", "hi", "--profile", "{bad}"], "unknown KV cache type 'q3_k' for K"),
        (["info", "--n-ctx", "40000"], "n_ctx 40000 is above the model's trained context length 32768"),
    ],
)
def test_profile_errors_on_the_command_line_are_one_line_and_exit_2(tmp_path, args, message, default_model):
    bad = tmp_path / "bad.toml"
    bad.write_text('kv_cache_type_k = "q3_k"\n')
    out = subprocess.run([EFFCTX, *[a.format(bad=bad) for a in args]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_info_shows_the_profile_it_ran(default_model):
    out = subprocess.run([EFFCTX, "info", "--profile", "q8", "--json"], capture_output=True, text=True, timeout=120)
    data = json.loads(out.stdout)
    assert data["profile"]["name"] == "q8"
    assert (data["identity"]["kv_cache_type_k"], data["identity"]["kv_cache_type_v"]) == ("q8_0", "q8_0")


def test_the_identity_changes_with_every_kv_relevant_field(default_model):
    backend = LlamaBackend()
    base = load_profile("exact").with_changes(n_ctx=512)
    variants = [
        base.with_changes(kv_cache_type_k="q8_0"),
        base.with_changes(kv_cache_type_v="bf16"),
        base.with_changes(flash_attn=True),
        base.with_changes(n_batch=256),
        load_profile("streaming").with_changes(n_ctx=1024),
    ]
    same = [base.with_changes(n_ctx=1024), base.with_changes(threads=1), base.with_changes(swa_full=False)]
    identity = backend.describe(default_model, base).identity
    assert all(backend.describe(default_model, v).identity != identity for v in variants)
    assert all(backend.describe(default_model, v).identity == identity for v in same)


def test_an_old_style_profile_loads_with_a_note_naming_the_table_key(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("n_ctx = 8192\nflash_attn = true\nrpc_timeout_s = 30\n")
    notes: list[str] = []
    profile = load_profile(str(path), note=notes.append)
    assert (profile.backend_options.flash_attn, profile.backend_options.rpc_timeout_s) == (True, 30.0)
    assert notes == [f"{path}: flash_attn belongs in the [llama] table now (llama.flash_attn); read from the top level",
                     f"{path}: rpc_timeout_s belongs in the [llama] table now (llama.rpc_timeout_s); read from the top "
                     "level"]


def test_a_setting_given_at_the_top_and_in_its_table_is_refused():
    with pytest.raises(ProfileError, match=r"^p\.toml: swa_full is set twice, at the top and as llama\.swa_full "
                                           r"\(keep the \[llama\] one\)$"):
        profile_from_toml("swa_full = false\n[llama]\nswa_full = true\n", "p", "p.toml")


def test_checking_every_built_in_profile_loads_no_runtime():
    code = ("import sys\nfrom effctx_core.backends.profile_loader import available_profiles, load_profile\n"
            "[load_profile(n) for n in available_profiles()]\n"
            "print(sorted(m for m in ('llama_cpp', 'openvino', 'openvino_genai') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr
