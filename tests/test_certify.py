"""Certifying real cells: the certificate written, the matrix it makes, resuming, and
certificates that do not count here."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.backends.registry import get_backend
from effctx_core.certify import example_document, this_machine
from effctx_core.certify.effective import effective_sentence
from effctx_core.certify.matrix import CERTIFIED, FAILED, UNCERTIFIED, cell_matrix
from effctx_core.certify.plan import QUICK, CertifyPlan
from effctx_core.certify.runner import Certifier, cell_key
from effctx_core.certify.schema import stage_problem
from effctx_core.certify.store import CertificateStore
from effctx_core.profiles import Profile
from tests.helpers.certify import tiny_plan
from tests.helpers.small_workload import write_small_workload
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

EFFCTX = str(Path(sys.executable).with_name("effctx"))


def effctx(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EFFCTX, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return CertificateStore(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return tiny_plan(write_small_workload(tmp_path_factory.mktemp("workload")))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random-weight model: it fails the passkey gate, and certifies in a fraction
    of a second where what is checked is the certification's own work (its stages, resuming)."""
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def exact(default_model, store, plan):
    """The exact cell of the default model, certified once for the module."""
    return Certifier(default_model, store, plan).certify(load_profile("exact"))


def test_the_default_model_passes_every_gate_on_the_exact_cell(exact):
    doc = exact.document
    assert (doc["status"], doc["failed_gate"], doc["context"]["certified"]) == ("certified", None, 512)
    assert [(g["name"], g["passed"]) for g in doc["gates"]] == [
        ("passkey", True), ("nll", True), ("accounting", True), ("throughput", True)]
    assert doc["reason"] == "every gate passed; certified up to 512 tokens"


def test_the_certificate_records_the_cell_the_machine_and_the_figures(exact, default_model):
    doc = exact.document
    assert doc["cell"]["backend"] == "llama" and doc["cell"]["profile"] == "exact"
    assert (doc["cell"]["kv_type_k"], doc["cell"]["kv_type_v"], doc["cell"]["model"]["bytes"]) == (
        "f16", "f16", default_model.stat().st_size)
    assert doc["context"]["allocated"] == 4096 and doc["context"]["model"] == 32768
    assert doc["hardware"]["cores"] >= 1
    assert doc["quality"]["nll"]["reference_profile"] == "exact (f16, no eviction)"
    assert doc["quality"]["nll"]["delta"] == 0.0  # the exact cell is its own reference
    assert doc["workloads"]["small"]["turns"] == 5
    assert doc["accounting"] == {"turns": 5, "agree": True, "detail": "reported = counted on all 5 workload turns"}


def test_the_certificate_records_each_task_family_and_the_effective_context_they_give(exact):
    doc = exact.document
    tasks = doc["quality"]["tasks"]
    assert sorted(tasks) == ["multikey", "passkey"]
    [passkey], [multikey] = tasks["passkey"]["by_length"], tasks["multikey"]["by_length"]
    # one trial and one no-needle control at 512 tokens each; the passkey gate reads the same trial
    assert (passkey["length"], passkey["trials"], passkey["control_trials"]) == (512, 1, 1)
    assert (multikey["length"], multikey["trials"], multikey["control_trials"]) == (512, 1, 1)
    assert doc["quality"]["passkey"]["by_length"][0]["found"] == passkey["full"]
    effective = doc["context"]["effective"]
    mean = (passkey["score"] + multikey["score"]) / 2
    assert effective["by_length"][0]["score"] == round(mean, 4)
    assert effective["tokens"] == (512 if mean >= 0.8 else None)
    assert (effective["threshold"], effective["ttft_budget_ms"]) == (0.8, 10_000.0)
    # the haystack before the needle was prefilled once for the trial and its control
    assert tasks["multikey"]["prefilled"] < tasks["multikey"]["prompt_tokens"]


def test_the_certificate_records_the_load_its_throughput_stage_ran_under(exact):
    load = exact.document["load"]
    assert [len(load["throughput"][k]) for k in ("loadavg_start", "loadavg_end")] == [3, 3]
    assert load["others"] == []


def test_the_stored_certificate_reads_back_through_the_schema_and_its_digest(exact, store):
    assert store.load(exact.path) == exact.document


def test_the_matrix_shows_the_certified_cell_by_its_certified_limit_and_the_rest_as_uncertified(exact, default_model,
                                                                                                   store):
    matrix = cell_matrix(default_model, default_model.name, store)
    row = matrix.row("exact")
    assert (row.status, row.advertised) == (CERTIFIED, "certified up to 512 tokens")
    other = matrix.row("q8")
    assert (other.status, other.advertised, other.note) == (
        UNCERTIFIED, "uncertified", "no certificate; run `effctx certify --profile q8`")


def test_a_certificate_from_another_machine_does_not_count_here(exact, default_model, tmp_path):
    elsewhere = CertificateStore(tmp_path)
    doc = json.loads(exact.path.read_text())
    doc.pop("digest")
    doc["hardware"].update(machine_id="f" * 16, cpu_model="Other CPU", cores=64)
    elsewhere.save(doc)
    row = cell_matrix(default_model, default_model.name, elsewhere).row("exact")
    assert (row.status, row.note) == (UNCERTIFIED, "its certificate does not count here: made on another machine "
                                                   "(Other CPU, 64 cores); run `effctx certify --profile exact`")


def test_a_random_weight_model_fails_the_passkey_gate_and_says_so(tiny, tmp_path, plan):
    store = CertificateStore(tmp_path / "certificates")
    done = Certifier(tiny, store, plan).certify(load_profile("exact").with_changes(n_ctx=1024))
    doc = done.document
    assert (doc["status"], doc["failed_gate"], doc["context"]["certified"]) == ("failed", "passkey", None)
    assert doc["reason"].startswith("passkey gate failed: found 0 of 1 at 512 tokens")
    assert store.load(done.path)["status"] == "failed"


def stopped_at_nll(model: Path, store: CertificateStore, plan: CertifyPlan) -> Profile:
    """The profile of a certification stopped as its NLL stage starts."""
    profile = load_profile("exact").with_changes(n_ctx=1024)

    def stop_at_nll(message: str, done: int, total: int) -> None:
        if "NLL" in message:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Certifier(model, store, plan, stop_at_nll).certify(profile)
    return profile


def test_a_stopped_certification_resumes_from_the_stages_it_finished(tiny, tmp_path, plan):
    store = CertificateStore(tmp_path)
    profile = stopped_at_nll(tiny, store, plan)
    assert len(list((tmp_path / "partial").iterdir())) == 1
    resumed = Certifier(tiny, store, plan).certify(profile)
    assert resumed.resumed == ("passkey", "task:multikey", "throughput")
    assert not list((tmp_path / "partial").iterdir())


def test_a_certification_resumed_under_another_ttft_budget_keeps_its_stages_and_records_the_new_budget(
        tiny, tmp_path, plan):
    store = CertificateStore(tmp_path)
    profile = stopped_at_nll(tiny, store, plan)
    resumed = Certifier(tiny, store, replace(plan, ttft_budget_ms=2500.0)).certify(profile)
    assert resumed.resumed == ("passkey", "task:multikey", "throughput")
    assert resumed.document["plan"]["ttft_budget_ms"] == resumed.document["context"]["effective"]["ttft_budget_ms"] == 2500


def test_every_stage_a_certification_saves_passes_the_stage_check_and_is_resumed(tiny, tmp_path, plan):
    store = CertificateStore(tmp_path / "certificates")
    profile = load_profile("exact").with_changes(n_ctx=1024)

    def stop_before_writing(message: str, done: int, total: int) -> None:
        if "writing the certificate" in message:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Certifier(tiny, store, plan, stop_before_writing).certify(profile)
    [partial] = (tmp_path / "certificates" / "partial").glob("*.json")
    stages = json.loads(partial.read_text())["stages"]
    assert {name: stage_problem(name, value) for name, value in stages.items()} == {
        "throughput": None, "passkey": None, "task:multikey": None, "nll": None, "workload:small": None}
    notes: list[str] = []
    resumed = Certifier(tiny, store, plan, note=notes.append).certify(profile)
    assert (resumed.resumed, notes) == (("nll", "passkey", "task:multikey", "throughput", "workload:small"), [])


@pytest.mark.model
def test_a_damaged_saved_stage_is_said_in_one_line_and_measured_again(tmp_path):
    # Room for the agent loop in the tiny model's tokens, and a model trained for as many.
    model = write_tiny_llama_gguf(tmp_path / "tiny.gguf", n_ctx_train=16384)
    profile = load_profile("exact").with_changes(n_ctx=16384)
    key = cell_key(this_machine(), get_backend("llama").describe(model, profile), profile)
    partial = CertificateStore().root / "partial" / f"{key}.json"
    partial.parent.mkdir(parents=True)
    damaged = {"throughput": example_document()["throughput"], "load": {"loadavg_start": None, "loadavg_end": None}}
    damaged["throughput"]["engine_raw"]["prefill"] = "fast"
    partial.write_text(json.dumps({"plan": QUICK.key, "stages": {"throughput": damaged}}))
    out = effctx("certify", "--quick", "--profile", "exact", "--n-ctx", "16384", "--model", str(model), "--json")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ("effctx: certify: the saved throughput stage of exact is damaged (throughput.engine_raw."
                          "prefill: 'fast' is not of type 'number'): measuring it again\n")
    [done] = json.loads(out.stdout)
    assert done["resumed"] == [] and isinstance(done["throughput"]["engine_raw"]["prefill"], float)
    assert CertificateStore().load(Path(done["path"]))["cell_key"] == key
    assert not partial.exists()


def test_auto_picks_the_certified_cell_and_says_why_in_one_line(exact, store, monkeypatch):
    monkeypatch.setenv("EFFCTX_CERTIFICATES", str(store.root))
    out = effctx("run", "--profile", "auto", "--workload", "small", "--max-tokens", "2", "--prompt", "Hello")
    assert out.returncode == 0, out.stderr
    assert ("effctx: profile auto: exact (llama): the least time on small among 1 certified cell" in out.stderr)


def test_auto_with_nothing_certified_is_one_line_and_exit_2(default_model):
    out = effctx("run", "--profile", "auto", "--prompt", "Hello")
    assert (out.returncode, out.stderr) == (
        2, "effctx: error: --profile auto: no cell is certified on this machine; run `effctx certify --quick`\n")


def test_a_damaged_certificate_is_listed_by_cells_and_left_where_it_is(exact, store, monkeypatch, tmp_path):
    damaged = tmp_path / "certificates"
    damaged.mkdir()
    target = damaged / exact.path.name
    text = exact.path.read_text()
    assert text.count('"status": "certified"') == 1
    target.write_text(text.replace('"status": "certified"', '"status": "failed"'))  # schema-valid, digest not
    monkeypatch.setenv("EFFCTX_CERTIFICATES", str(damaged))
    out = effctx("cells", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert len(data["damaged_certificates"]) == 1
    assert "digest does not match" in data["damaged_certificates"][0]
    assert {c["profile"]: c["status"] for c in data["cells"]}["exact"] == UNCERTIFIED
    assert target.exists()


def test_cells_tasks_shows_each_certified_cells_families_below_the_matrix(exact, store, monkeypatch):
    monkeypatch.setenv("EFFCTX_CERTIFICATES", str(store.root))
    out = effctx("cells", "--tasks")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    title = lines.index("exact: task score by prompt length (threshold 0.8)")
    assert [line.split("│")[1].strip() for line in lines[title:] if line.startswith("│")] == [
        "passkey", "multikey", "mean", "TTFT cold", "TTFT warm"]
    assert effective_sentence(exact.document["context"]["effective"]) in lines[title:]


def test_cells_never_advertise_a_context_without_a_certificate(default_model):
    out = effctx("cells", "--json")
    assert out.returncode == 0, out.stderr
    cells = json.loads(out.stdout)["cells"]
    assert {c["advertised"] for c in cells if c["runnable"]} == {"uncertified"}
    assert all("up to" not in c["reason"] for c in cells)


def test_failed_status_is_shown_as_the_gate(exact, store, tmp_path, default_model):
    doc = json.loads(exact.path.read_text())
    doc.pop("digest")
    doc.update(status="failed", failed_gate="nll", reason="nll gate failed: the cache costs answer quality")
    doc["context"]["certified"] = None
    doc["gates"][1]["passed"] = False
    failed_store = CertificateStore(tmp_path)
    failed_store.save(doc)
    row = cell_matrix(default_model, default_model.name, failed_store).row("exact")
    assert (row.status, row.advertised) == (FAILED, "failed: nll gate")


def test_an_unknown_workload_is_one_line_and_exit_2():
    out = effctx("bench", "run", "agnet-loop")
    assert (out.returncode, out.stderr) == (2, "effctx: error: unknown workload 'agnet-loop' (built in: agent-loop, "
                                               "branching, long-decode, long-document, prefix-edit)\n")


def test_a_workload_file_with_a_wrong_field_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('description = "d"\nprefix = "p"\n[[turns]]\nrole = "user"\ntext = "t"\nmax_tokens = "64"\n')
    out = effctx("bench", "run", str(path))
    assert (out.returncode, out.stderr) == (
        2, f'effctx: error: workload {path}: turns[1].max_tokens must be a positive integer (got "64")\n')


def test_certify_of_an_unknown_profile_is_one_line_and_exit_2():
    out = effctx("certify", "--quick", "--profile", "nope")
    assert out.returncode == 2
    assert out.stderr.startswith("effctx: error: unknown profile 'nope' (available: ")
    assert out.stderr.count("\n") == 1


def test_certify_of_auto_is_refused_in_one_line_before_anything_runs():
    out = effctx("certify", "--quick", "--profile", "exact,auto")
    assert (out.returncode, out.stderr) == (
        2, "effctx: error: certify measures named profiles; --profile auto picks among certified ones\n")


def test_a_ttft_budget_of_zero_is_one_line_and_exit_2():
    out = effctx("certify", "--quick", "--profile", "exact", "--ttft-budget", "0")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--ttft-budget" in out.stderr
