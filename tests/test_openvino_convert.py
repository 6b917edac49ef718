"""GGUF -> OpenVINO IR without torch, checked against llama.cpp on the same token ids.

The reference text is the GPL-3 that Debian's base-files ships: natural English prose,
read at run time, not copied into the repository.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import openvino as ov
import pytest

from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.backends.openvino import convert as convert_module
from effctx_core.backends.openvino.convert import ConversionError, convert_gguf, converted_dir
from effctx_core.models import sha256_file
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

EFFCTX = str(Path(sys.executable).with_name("effctx"))
PAGE = os.sysconf("SC_PAGE_SIZE")
REFERENCE_TEXT = Path("/usr/share/common-licenses/GPL-3")


def llama_logits(path: Path, ids: list[int]) -> np.ndarray:
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_batch=512, n_threads=2, logits_all=True, verbose=False)
    try:
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)], dtype=np.float32)
    finally:
        llm.close()


def ir_request(xml: Path) -> ov.InferRequest:
    # f32 inference and cache: the CPU plugin would otherwise run bf16 on AVX-512 bf16 CPUs
    # and keep the stateful cache in u8
    config = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "INFERENCE_NUM_THREADS": 2}
    return ov.Core().compile_model(xml, "CPU", config).create_infer_request()


def feed(request: ov.InferRequest, ids: list[int], past: int) -> np.ndarray:
    """Logits for `ids`, appended to the `past` tokens the request's state holds."""
    n = len(ids)
    request.infer({"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, past + n), np.int64),
                   "position_ids": np.arange(past, past + n, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)})
    return np.array(request.get_tensor("logits").data[0])


@dataclass(frozen=True)
class Predictions:
    """What a model predicted at each position of a text."""

    following: np.ndarray  # the log-probability of the token that follows, at every position but the last
    likeliest: np.ndarray  # the likeliest token, at every position

    @classmethod
    def of(cls, logits: np.ndarray, ids: list[int]) -> Predictions:
        # A few rows at a time: over Gemma's 262,144-token vocabulary a pass over all the
        # rows at once makes gigabytes of temporaries.
        following, likeliest = [], []
        for start in range(0, len(ids), 64):
            rows = logits[start:start + 64]
            top = rows.max(-1, keepdims=True)
            log_z = np.log(np.exp(rows - top).sum(-1)) + top[:, 0]
            nexts = np.array(ids[start + 1:start + 1 + len(rows)])
            following.append(rows[np.arange(len(nexts)), nexts] - log_z[:len(nexts)])
            likeliest.append(rows.argmax(-1))
        return cls(np.concatenate(following), np.concatenate(likeliest))

    def first(self, n: int) -> Predictions:
        """The predictions over the text's first `n` tokens."""
        return Predictions(self.following[:n - 1], self.likeliest[:n])

    @property
    def mean_nll(self) -> float:
        return float(-self.following.mean())


def tokens(path: Path, text: str, n: int) -> list[int]:
    vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    ids = vocab.tokenize(text.encode(), add_bos=True)
    assert len(ids) >= n, f"the reference text has only {len(ids)} tokens"
    return ids[:n]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    source = write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
    return source, convert_gguf(source, "f32", out_dir=tmp_path_factory.mktemp("ir") / "tiny", logits_of="all").xml


NLL_LENGTHS = (300, 1200)  # 1,200 reaches past the 512-token sliding window


@pytest.fixture(scope="module")
def gemma(default_model, tmp_path_factory) -> Path:
    return convert_gguf(default_model, "int8", out_dir=tmp_path_factory.mktemp("ir") / "gemma", logits_of="all").xml


@pytest.fixture(scope="module")
def gemma_predictions(default_model, gemma) -> tuple[Predictions, Predictions]:
    """llama.cpp's and the int8 IR's predictions over the reference text's first 1,200
    tokens, run once: a causal model predicts a text's first tokens the same whatever
    follows them, so each length compared reads the start of these."""
    ids = tokens(default_model, REFERENCE_TEXT.read_text(), max(NLL_LENGTHS))
    return Predictions.of(llama_logits(default_model, ids), ids), Predictions.of(feed(ir_request(gemma), ids, 0), ids)


def test_the_tiny_llama_gives_llama_cpps_logits(tiny):
    source, xml = tiny
    ids = tokens(source, "The quick brown fox jumps over the lazy dog. " * 12, 100)
    reference, converted = llama_logits(source, ids), feed(ir_request(xml), ids, 0)
    assert np.abs(reference - converted).max() < 1e-2
    assert (reference.argmax(-1) == converted.argmax(-1)).all()


def test_the_state_carries_the_cache_from_one_request_to_the_next(tiny):
    source, xml = tiny
    ids = tokens(source, "The sky is blue and the grass is green. " * 12, 90)
    whole = feed(ir_request(xml), ids, 0)
    request = ir_request(xml)
    feed(request, ids[:50], 0)
    second = feed(request, ids[50:], 50)
    assert np.abs(second - whole[50:]).max() < 1e-3


@pytest.mark.skipif(not REFERENCE_TEXT.is_file(), reason=f"{REFERENCE_TEXT} (Debian base-files) is not on this machine")
@pytest.mark.parametrize("n_tokens", NLL_LENGTHS)
def test_the_default_model_matches_llama_cpp_within_five_percent_nll(gemma_predictions, n_tokens):
    reference, converted = (predictions.first(n_tokens) for predictions in gemma_predictions)
    nll_llama, nll_openvino = reference.mean_nll, converted.mean_nll
    top1 = float((reference.likeliest == converted.likeliest).mean())
    print(f"{n_tokens} tokens: NLL llama.cpp {nll_llama:.4f}, OpenVINO int8 {nll_openvino:.4f}, top-1 {top1:.3f}")
    assert abs(nll_openvino - nll_llama) / nll_llama < 0.05
    assert top1 > 0.9


def test_a_second_conversion_is_the_cached_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    source = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    first = convert_gguf(source, "int8")
    mtime = first.xml.stat().st_mtime_ns
    second = convert_gguf(source, "int8")
    assert second.path == first.path and second.xml.stat().st_mtime_ns == mtime
    assert first.manifest["source_sha256"] == second.manifest["source_sha256"]
    assert [p.name for p in first.path.parent.iterdir()] == [first.path.name]  # no temporary folder left


def conversion_progress(source: Path, out: Path) -> list[tuple[int, int]]:
    """(done, total) of each report of the weights' conversion, in order."""
    calls: list[tuple[str, int, int]] = []
    convert_gguf(source, "int8", lambda stage, done, total: calls.append((stage, done, total)), out_dir=out)
    return [(done, total) for stage, done, total in calls if stage == "converting weights"]


def test_the_conversion_counts_the_bytes_of_the_tensors_rising_by_at_most_one_tensor(tiny, tmp_path):
    sizes = [t.data.nbytes for t in gguf.GGUFReader(tiny[0]).tensors]
    reports = conversion_progress(tiny[0], tmp_path / "ir")
    done = [0] + [d for d, _ in reports]
    assert {total for _, total in reports} == {sum(sizes)}
    assert done[-1] == sum(sizes)
    assert 0 < max(b - a for a, b in zip(done, done[1:])) <= max(sizes)
    assert all(b > a for a, b in zip(done, done[1:]))


def test_the_written_ir_is_checked_with_progress_over_all_its_bytes(tiny, tmp_path):
    calls: list[tuple[str, int, int]] = []
    done = convert_gguf(tiny[0], "int8", lambda *call: calls.append(call), out_dir=tmp_path / "ir")
    checked = [(d, t) for stage, d, t in calls if stage == "checking the IR"]
    size = sum(f.stat().st_size for f in done.path.iterdir() if f.name != "effctx-manifest.json")
    assert checked and checked[-1] == (size, size)
    assert all(b > a for (a, _), (b, _) in zip(checked, checked[1:]))


def test_a_tensor_larger_than_a_slice_is_counted_slice_by_slice_and_converted_the_same(tiny, tmp_path, monkeypatch):
    whole = convert_gguf(tiny[0], "int8", out_dir=tmp_path / "whole").path / "openvino_model.bin"
    monkeypatch.setattr(convert_module, "_SLICE_BYTES", 16 * 1024)
    reports = conversion_progress(tiny[0], tmp_path / "sliced")
    done = [0] + [d for d, _ in reports]
    embedding = gguf.GGUFReader(tiny[0]).get_tensor(0)
    assert embedding.name == "token_embd.weight" and embedding.data.nbytes > 14 * 16 * 1024
    assert max(b - a for a, b in zip(done, done[1:])) <= 16 * 1024
    assert (tmp_path / "sliced" / "openvino_model.bin").read_bytes() == whole.read_bytes()


def test_an_architecture_the_converter_does_not_know_is_one_line(tmp_path):
    path = tmp_path / "mystery.gguf"
    writer = gguf.GGUFWriter(str(path), "mystery")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ConversionError, match=r"cannot convert architecture 'mystery' to OpenVINO \(known: gemma3, llama\)"):
        convert_gguf(path, "int8", out_dir=tmp_path / "ir")


def test_the_command_converts_once_then_says_it_is_done(tmp_path):
    source = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = [EFFCTX, "model", "convert", "--to", "openvino", "--model", str(source)]
    first = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("converted to OpenVINO IR (int8, ") and "converting weights: 100%" in first.stderr
    again = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert again.stdout == f"already converted: {first.stdout.split(': ', 1)[1]}"


def test_the_paged_pipeline_reads_the_sliding_window_of_every_windowed_layer(gemma):
    # openvino-genai turns the SDPA graph into PagedAttention with this pass; a window it
    # cannot read becomes 0 (full attention) without a word
    from openvino._offline_transformations import paged_attention_transformation

    model = ov.Core().read_model(gemma)
    paged_attention_transformation(model, False, False, False, False, False)

    def window(node) -> int:
        folded = ov.Core().compile_model(ov.Model([ov.opset13.result(node.input_value(10))], [], "window"), "CPU")
        request = folded.create_infer_request()
        request.infer({})
        return int(request.get_output_tensor(0).data)

    paged = [n for n in model.get_ordered_ops() if n.get_type_name() == "PagedAttentionExtension"]
    assert [window(n) for n in paged] == [0 if layer % 6 == 5 else 512 for layer in range(18)]


# --------------------------------------------------------------------------- faults


def convert_command(source: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([EFFCTX, "model", "convert", "--to", "openvino", "--model", str(source)],
                          capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Callable[[int], Path]]:
    """Real file systems of a given size (tmpfs, in whole pages), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        point = tmp_path / f"disk-{len(mounted)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    try:
        yield mount
    finally:
        for point in mounted:
            subprocess.run(["umount", str(point)], check=True)


def pages(size: int) -> int:
    return -(-size // PAGE) * PAGE


@pytest.mark.parametrize("room", ["for nothing", "for all but the manifest"])
def test_a_full_disk_during_model_convert_is_one_line_naming_the_folder(tiny, small_disk, tmp_path, room):
    # OpenVINO reports a full disk as a RuntimeError ("basic_ios::clear: iostream error"),
    # a write of effctx's own (the manifest) as OSError ENOSPC: both are the same line
    size = PAGE
    if room == "for all but the manifest":
        files = convert_gguf(tiny[0], "int8", out_dir=tmp_path / "probe").manifest["files"]
        size = sum(pages(record["bytes"]) for record in files.values())
    disk = small_disk(size)
    env = {**os.environ, "XDG_DATA_HOME": str(disk), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = convert_command(tiny[0], env)
    folder = disk / "effctx" / "openvino"
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1] == (f"effctx: error: cannot write the OpenVINO IR into {folder}: "
                                           "no space left on the device (its weights take 1 MiB)")
    assert list(folder.iterdir()) == []  # the partial IR is gone


def test_a_failed_save_with_room_on_the_disk_is_not_called_a_full_disk(tiny, tmp_path):
    # a file size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ) fails OpenVINO's write of the
    # .bin the way a full disk does, as a RuntimeError, while the disk has room
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([EFFCTX, "model", "convert", "--to", "openvino", "--model", str(tiny[0])],
                         capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000)))
    folder = tmp_path / "data" / "effctx" / "openvino"
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1] == (f"effctx: error: cannot write the OpenVINO IR into {folder}: "
                                           "OpenVINO could not save it (basic_ios::clear: iostream error)")
    assert list(folder.iterdir()) == []


def test_a_full_disk_at_the_first_use_of_an_openvino_profile_is_one_line(tiny, small_disk, tmp_path):
    disk = small_disk(PAGE)
    env = {**os.environ, "XDG_DATA_HOME": str(disk), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([EFFCTX, "run", "--profile", "ov-exact", "--model", str(tiny[0]), "--n-ctx", "256",
                          "--prompt", "Hello"], capture_output=True, text=True, timeout=120, env=env,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("effctx: error:")]
    assert errors == [f"effctx: error: cannot write the OpenVINO IR into {disk / 'effctx' / 'openvino'}: "
                      "no space left on the device (its weights take 1 MiB)"]
    assert out.stderr.splitlines()[-1] == errors[0]


@pytest.mark.parametrize("damage", ["truncated", "rewritten in place"])
def test_model_convert_converts_a_damaged_ir_again_and_says_why(tiny, tmp_path, damage):
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert convert_command(tiny[0], env).returncode == 0
    folder = tmp_path / "data" / "effctx" / "openvino" / f"{sha256_file(tiny[0])[:16]}-int8-last"
    weights = folder / "openvino_model.bin"
    whole = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(whole[:1000])
        why = f"is damaged: openvino_model.bin has 1000 bytes, its manifest says {len(whole)}"
    else:  # same size: only the digest tells
        weights.write_bytes(whole[:-1] + bytes([whole[-1] ^ 0xFF]))
        why = "is damaged: openvino_model.bin does not match the sha256 in its manifest"
    out = convert_command(tiny[0], env)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines()[0] == f"effctx: the converted model {folder} {why}: converting it again"
    assert out.stdout.startswith("converted to OpenVINO IR (int8, ") and weights.read_bytes() == whole


CONVERSION_STOPPED_WHILE_WRITING = """
import sys, time
from pathlib import Path
from effctx_core.backends.openvino.convert import convert_gguf

def progress(stage, done, total):
    if stage == "writing the IR":  # its temp folder is made: wait here to be killed
        print("writing", flush=True)
        time.sleep(600)

convert_gguf(Path(sys.argv[1]), "int8", progress)
"""


def test_the_temp_folder_of_a_killed_conversion_is_removed_by_the_next_one(tiny, tmp_path, monkeypatch):
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    monkeypatch.setenv("XDG_DATA_HOME", env["XDG_DATA_HOME"])
    monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])
    children = [subprocess.Popen([sys.executable, "-c", CONVERSION_STOPPED_WHILE_WRITING, str(tiny[0])], env=env,
                                 stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        killed, alive = children
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "writing\n"
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        folder = tmp_path / "data" / "effctx" / "openvino"
        temps = {child.pid: [p for p in folder.iterdir() if f".{child.pid}-" in p.name] for child in children}
        assert [len(found) for found in temps.values()] == [1, 1]
        done = convert_gguf(tiny[0], "int8")
        assert done.path == converted_dir(sha256_file(tiny[0]), "int8")
        assert sorted(folder.iterdir()) == sorted([done.path, *temps[alive.pid]])  # the live writer's is kept
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_temp_folder_an_earlier_effctx_left_is_removed_once_its_process_is_gone(tiny, tmp_path, monkeypatch):
    # before temps named their writer's start time they were `.NAME.PID.tmp` (199 MB each)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    target = converted_dir(sha256_file(tiny[0]), "int8")
    left = target.with_name(f".{target.name}.{int(gone.stdout)}.tmp")
    left.mkdir(parents=True)
    (left / "openvino_model.bin").write_bytes(b"\0" * 4096)
    convert_gguf(tiny[0], "int8")
    assert [p.name for p in target.parent.iterdir()] == [target.name]
