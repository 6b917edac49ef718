"""Certificates: the schema every document follows, the store that seals, checks and keeps
them (a damaged file is reported and moved aside, never lost), whether one counts on this
machine for a cell, and the hardware facts it records. No model is loaded."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import re
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from effctx_core import atomic
from effctx_core.certify import (
    CertificateError,
    CertificateStore,
    Here,
    certificate_schema,
    check_document,
    document_digest,
    example_document,
    file_name,
    gate,
    this_machine,
    utc_timestamp,
    why_not_here,
)
from effctx_core.certify.hardware import cpu_model, machine_id, memory_bytes

NAME = "llama--exact--aaaaaaaaaaaaaaaa.json"  # backend--profile--cell_key[:16] of the example


@pytest.fixture
def store(tmp_path) -> CertificateStore:
    return CertificateStore(tmp_path / "certificates")


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def reseal(path: Path, doc: dict) -> None:
    """Write a document with a correct digest, bypassing the store's checks."""
    doc = {k: v for k, v in doc.items() if k != "digest"}
    doc["digest"] = document_digest(doc)
    path.write_text(json.dumps(doc))


# --------------------------------------------------------------------------- the schema


# Fields added after schema version 1 shipped, optional so that certificates stored before
# them stay valid: where a cell's model and cache lived, and what its states cost (RPC);
# the machine's load while the cell was measured; the task families, the effective
# context and the plan's settings for them.
ADDED_LATER = {"/properties/cell": {"placement", "state_costs"}, "": {"load"}, "/properties/quality": {"tasks"},
               "/properties/context": {"effective"},
               "/properties/plan": {"long", "families", "task_depths", "effective_threshold", "ttft_budget_ms"}}


def test_the_schema_is_valid_draft_2020_12_and_closed_at_every_object_level_but_the_workload_and_task_maps():
    schema = certificate_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    open_maps = []

    def walk(node, where):
        if isinstance(node, dict):
            if node.get("type") == "object":
                if "properties" in node:
                    assert node["additionalProperties"] is False, where
                    wanted = set(node["properties"]) - ADDED_LATER.get(where, set())
                    assert sorted(node["required"]) == sorted(wanted) or where == "", where
                else:
                    open_maps.append(where)
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")

    walk(schema, "")
    assert open_maps == ["/properties/workloads", "/properties/quality/properties/tasks"]
    # Every key of the document is required but the digest, which the store adds and demands,
    # and the keys added later.
    assert sorted(schema["required"]) == sorted(k for k in schema["properties"]
                                                if k != "digest" and k not in ADDED_LATER[""])


def test_the_example_document_is_valid_and_has_no_digest():
    doc = example_document()
    check_document(doc)
    assert "digest" not in doc
    doc["digest"] = document_digest(doc)
    check_document(doc)


def test_example_document_returns_a_fresh_copy_each_time():
    doc = example_document()
    doc["cell"]["model"]["bytes"] = 1
    assert example_document()["cell"]["model"]["bytes"] == 253_000_000


def test_a_failed_certificate_without_a_certified_length_is_valid():
    doc = example_document()
    doc["status"] = "failed"
    doc["failed_gate"] = "passkey"
    doc["gates"][0]["passed"] = False
    doc["context"]["certified"] = None
    doc["reason"] = "passkey found 2 of 6 at 512"
    check_document(doc)


def test_optional_values_may_be_null_and_the_nll_delta_may_be_negative():
    doc = example_document()
    doc["hardware"]["accelerator"] = "none-such NPU"
    doc["context"]["memory"] = None
    doc["quality"]["nll"].update(supported=False, tokens=None, nll=None, reference_nll=None, delta=None,
                                 reference_profile=None)
    doc["workloads"]["chat-8"].update(control_wall_ms=None, control=None, correct=None, questions=None)
    check_document(doc)
    doc["quality"]["nll"]["delta"] = -0.02
    check_document(doc)
    doc["workloads"] = {}
    check_document(doc)


def test_a_certificate_may_record_the_load_it_was_measured_under_and_the_record_is_checked():
    doc = example_document()
    assert "load" not in doc  # as in every certificate written before the field
    doc["load"] = {"throughput": {"loadavg_start": [0.5, 0.25, 0.1], "loadavg_end": None},
                   "others": [{"pid": 4242, "what": "effctx bench overhead", "stage": "passkey"}]}
    check_document(doc)
    doc["load"]["throughput"]["loadavg_end"] = [0.5]
    with pytest.raises(CertificateError) as e:
        check_document(doc)
    assert str(e.value) == "certificate exact: load.throughput.loadavg_end: [0.5] is too short"


def _set(path: str, value):
    def change(doc):
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value
    return change


def _delete(path: str):
    def change(doc):
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[part]
        del node[last]
    return change


@pytest.mark.parametrize("change, message", [
    (_set("hardware.cores", "2"), "hardware.cores: '2' is not of type 'integer'"),
    (_set("hardware.cores", True), "hardware.cores: True is not of type 'integer'"),
    (_delete("context.allocated"), "context: 'allocated' is a required property"),
    (_delete("status"), "top level: 'status' is a required property"),
    (_set("cell.colour", "red"), "cell: Additional properties are not allowed ('colour' was unexpected)"),
    (_set("workloads.chat-8.extra", 1), "workloads.chat-8: Additional properties are not allowed ('extra' was unexpected)"),
    (_set("status", "maybe"), "status: 'maybe' is not one of ['certified', 'failed']"),
    (_set("context.certified", -5), "context.certified: -5 is less than the minimum of 0"),
    (_set("throughput.engine.decode_tps", -1.5), "throughput.engine.decode_tps: -1.5 is less than the minimum of 0"),
    (_set("schema_version", 2), "schema_version: 1 was expected"),
    (_set("created", "2026-12-03 18:00:00"), "created: '2026-12-03 18:00:00' does not match '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\\\.[0-9]+)?Z$'"),
    (_set("cell.model.sha256", "ABC"), "cell.model.sha256: 'ABC' does not match '^[0-9a-f]{64}$'"),
    (_set("unsupported", ["State-Snapshot"]), "unsupported[0]: 'State-Snapshot' does not match '^[a-z_]+$'"),
    (_set("quality.passkey.by_length.0.ci_high", 1.5), "quality.passkey.by_length[0].ci_high: 1.5 is greater than the maximum of 1"),
])
def test_an_invalid_document_is_refused_with_its_first_errors_path_and_message(change, message):
    doc = example_document()
    change(doc)
    with pytest.raises(CertificateError) as e:
        check_document(doc)
    assert str(e.value) == f"certificate exact: {message}"


@pytest.mark.parametrize("change, message", [
    # A certified document may not carry a failed gate, a failed gate name or no certified length.
    (_set("gates.3.passed", False), "gates[3].passed: True was expected"),
    (_set("failed_gate", "nll"), "failed_gate: 'nll' is not of type 'null'"),
    (_set("context.certified", None), "context.certified: None is not of type 'integer'"),
    (_set("gates", []), "gates: [] should be non-empty"),
    # Rules between two fields of one record.
    (_set("quality.passkey.by_length.1.found", 7), "quality.passkey.by_length[1].found: 7 is more than its trials (6)"),
    (_set("quality.passkey.by_length.1.needle_resident", 9), "quality.passkey.by_length[1].needle_resident: 9 is more than its trials (6)"),
    (_set("quality.passkey.by_length.0.ci_low", 1.0), None),
    (_set("quality.passkey.control.false_keys", 3), "quality.passkey.control.false_keys: 3 is more than its trials (2)"),
    (_set("gates.2.name", "nll"), "gates[2].name: gate 'nll' is listed twice"),
])
def test_a_document_that_contradicts_itself_is_refused(change, message):
    doc = example_document()
    change(doc)
    if message is None:  # ci_low == ci_high is a valid (degenerate) interval
        check_document(doc)
        return
    with pytest.raises(CertificateError) as e:
        check_document(doc)
    assert str(e.value) == f"certificate exact: {message}"


def test_ci_low_above_ci_high_is_refused():
    doc = example_document()
    doc["quality"]["passkey"]["by_length"][0]["ci_low"] = 0.9
    doc["quality"]["passkey"]["by_length"][0]["ci_high"] = 0.8
    with pytest.raises(CertificateError, match=r"^certificate exact: quality\.passkey\.by_length\[0\]\.ci_low: 0\.9 is above ci_high \(0\.8\)$"):
        check_document(doc)


def test_a_document_that_is_not_an_object_or_has_no_profile_is_named_plainly():
    with pytest.raises(CertificateError) as e:
        check_document([])  # type: ignore[arg-type]
    assert str(e.value) == "certificate: top level: the document is a JSON list, not an object"
    with pytest.raises(CertificateError) as e:
        check_document({"schema_version": 1})
    assert str(e.value) == "certificate: top level: 'created' is a required property"


def test_a_huge_value_in_an_error_is_cut_to_one_short_line():
    doc = example_document()
    doc["cell"]["backend"] = {"x" * 50: ["y\nz" * 100]}
    with pytest.raises(CertificateError) as e:
        check_document(doc)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("certificate exact: cell.backend: {'xxxx")
    assert str(e.value).endswith("…")
    assert len(str(e.value)) == len("certificate exact: cell.backend: ") + 240


def test_record_helpers():
    assert gate("nll", True, "delta <= 0.05", "0.01") == {
        "name": "nll", "passed": True, "threshold": "delta <= 0.05", "measured": "0.01", "detail": ""}
    with pytest.raises(CertificateError, match=r"^unknown certificate gate 'speed' \(known: passkey, nll, accounting, throughput\)$"):
        gate("speed", True, "", "")
    assert utc_timestamp(1796320800) == "2026-12-03T18:00:00Z"
    doc = example_document()
    doc["created"] = utc_timestamp()
    check_document(doc)


# --------------------------------------------------------------------------- save and load


def test_save_seals_the_document_with_the_digest_of_its_canonical_json_and_load_returns_it(store):
    doc = example_document()
    path = store.save(doc)
    assert path == store.root / NAME
    assert path == store.path_for("llama", "exact", "a" * 64)
    canonical = json.dumps(example_document(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert doc["digest"] == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert store.load(path) == doc
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert list(on_disk) == [*example_document(), "digest"]  # the document's own key order, digest last


def test_the_digest_ignores_a_stale_digest_and_covers_non_ascii_text(store):
    doc = example_document()
    doc["hardware"]["cpu_model"] = "Überchip™ 9000"
    doc["digest"] = "0" * 64
    path = store.save(doc)
    assert doc["digest"] == document_digest(doc) != "0" * 64
    assert "Überchip™ 9000" in path.read_text(encoding="utf-8")  # written as UTF-8, not \u escapes
    assert store.load(path)["hardware"]["cpu_model"] == "Überchip™ 9000"


def test_save_checks_the_json_form_of_the_document(store):
    doc = example_document()
    doc["plan"]["lengths"] = (512, 1024)  # a tuple is written as a JSON array, and read back as one
    path = store.save(doc)
    assert store.load(path)["plan"]["lengths"] == [512, 1024]


@pytest.mark.parametrize("change, message", [
    (_set("context.certified", -5), "certificate exact: context.certified: -5 is less than the minimum of 0"),
    (_set("quality.nll.delta", float("nan")), "certificate is not plain JSON data: a number is NaN or infinite"),
    (_set("quality.nll.nll", float("inf")), "certificate is not plain JSON data: a number is NaN or infinite"),
    (_set("unsupported", {"state_snapshot"}), "certificate is not plain JSON data: Object of type set is not JSON serializable"),
])
def test_save_refuses_an_invalid_document_and_writes_nothing(store, change, message):
    doc = example_document()
    change(doc)
    with pytest.raises(CertificateError) as e:
        store.save(doc)
    assert str(e.value) == message
    assert "digest" not in doc
    assert not store.root.exists()


def test_saving_a_cell_again_replaces_its_certificate(store):
    first = example_document()
    store.save(first)
    second = example_document()
    second["context"]["certified"] = 512
    path = store.save(second)
    assert files_under(store.root) == [NAME]
    assert store.load(path)["context"]["certified"] == 512


def test_saving_over_a_damaged_file_moves_it_aside_first(store):
    store.root.mkdir(parents=True)
    (store.root / NAME).write_bytes(b"{ half a certif")
    store.save(example_document())
    names = files_under(store.root)
    assert len(names) == 2 and names[0] == f"damaged/{NAME}.{names[0].rsplit('.', 1)[1]}"
    assert (store.root / names[0]).read_bytes() == b"{ half a certif"
    assert names[1] == NAME


def test_a_write_leaves_no_temp_file_and_a_failed_write_leaves_the_old_certificate(store, monkeypatch):
    path = store.save(example_document())
    assert files_under(store.root) == [NAME]
    before = path.read_bytes()

    def disk_full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", disk_full)
    doc = example_document()
    doc["context"]["certified"] = 512
    with pytest.raises(CertificateError) as e:
        store.save(doc)
    assert str(e.value) == f"cannot write certificate {path}: no space left on the device"
    assert files_under(store.root) == [NAME]
    assert path.read_bytes() == before


def test_a_tampered_file_is_refused(store):
    path = store.save(example_document())
    doc = json.loads(path.read_text())
    doc["throughput"]["engine"]["decode_tps"] = 99.0  # a figure changed, the digest left
    path.write_text(json.dumps(doc))
    with pytest.raises(CertificateError) as e:
        store.load(path)
    assert str(e.value) == f"certificate {path}: digest does not match its contents"


@pytest.mark.parametrize("content, why", [
    (None, "not JSON (Unterminated string starting at: line 84 column 14)"),  # the file cut in half
    (b"", "the file is empty"),
    (b"hello", "not JSON (Expecting value: line 1 column 1)"),
    (b"\xff\xfe{}", "not JSON (not UTF-8 text)"),
    (b"[1, 2]", "not a certificate (a JSON list, not an object)"),
    (b'{"a": NaN}', "not JSON (NaN is not a JSON number)"),
    (b'{"a": 1, "a": 2}', "not a certificate (duplicate key 'a')"),
    (b'{"schema_version": 1}', "top level: 'created' is a required property"),
])
def test_a_file_that_is_not_a_certificate_is_refused_with_the_reason(store, content, why):
    path = store.save(example_document())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if content is None else content)
    with pytest.raises(CertificateError) as e:
        store.load(path)
    assert str(e.value) == f"certificate {path}: {why}"


def test_a_file_of_another_schema_version_is_refused_as_such(store):
    path = store.save(example_document())
    doc = json.loads(path.read_text())
    doc["schema_version"] = 99
    reseal(path, doc)
    with pytest.raises(CertificateError) as e:
        store.load(path)
    assert str(e.value) == f"certificate {path}: schema version 99 is not one this effctx reads (1)"


def test_a_file_without_a_digest_is_refused(store):
    path = store.save(example_document())
    path.write_text(json.dumps(example_document()))
    with pytest.raises(CertificateError) as e:
        store.load(path)
    assert str(e.value) == f"certificate {path}: it has no digest"


def test_a_file_named_for_another_cell_is_refused(store):
    path = store.save(example_document())
    other = store.root / "llama--fast--aaaaaaaaaaaaaaaa.json"
    path.rename(other)
    with pytest.raises(CertificateError) as e:
        store.load(other)
    assert str(e.value) == f"certificate {other}: its name does not match the cell it describes ({NAME})"


def test_a_file_too_large_to_be_a_certificate_is_not_read(store):
    store.root.mkdir(parents=True)
    path = store.root / NAME
    with open(path, "wb") as f:
        f.truncate(4 * 1024 * 1024 + 1)
    with pytest.raises(CertificateError) as e:
        store.load(path)
    assert str(e.value) == f"certificate {path}: 4194305 bytes is more than a certificate holds (at most 4194304)"


def test_a_missing_file_or_a_directory_is_refused(store):
    store.root.mkdir(parents=True)
    with pytest.raises(CertificateError) as e:
        store.load(store.root / NAME)
    assert str(e.value) == f"certificate file not found: {store.root / NAME}"
    (store.root / NAME).mkdir()
    with pytest.raises(CertificateError) as e:
        store.load(store.root / NAME)
    assert str(e.value) == f"certificate file is a directory, not a file: {store.root / NAME}"


def test_file_names_keep_to_portable_characters():
    assert file_name("llama", "exact", "a" * 64) == NAME
    assert file_name("llama", "my profile/v2", "b" * 64) == "llama--my_profile_v2--bbbbbbbbbbbbbbbb.json"
    assert file_name("llama", "..", "c" * 64) == "llama--_.--cccccccccccccccc.json"


def test_the_default_store_is_under_the_user_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("EFFCTX_CERTIFICATES")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert CertificateStore().root == tmp_path / "data" / "effctx" / "certificates"


def test_effctx_certificates_moves_the_default_store(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFCTX_CERTIFICATES", str(tmp_path / "elsewhere"))
    assert CertificateStore().root == tmp_path / "elsewhere"


# --------------------------------------------------------------------------- scan and quarantine


def test_scan_reports_damaged_files_without_raising_and_quarantine_moves_them_aside(store):
    good = store.save(example_document())
    other = example_document()
    other["cell_key"] = "f" * 64
    tampered = store.save(other)
    data = tampered.read_bytes()
    tampered.write_bytes(data.replace(b'"decode_tps": 52.0', b'"decode_tps": 90.0', 1))
    truncated = store.root / "llama--exact--0000000000000000.json"
    truncated.write_bytes(data[:100])
    (store.root / ".llama--exact--1111111111111111.json.abc.tmp").write_bytes(b"being written")
    (store.root / "notes.txt").write_text("not a certificate")
    before = {name: (store.root / name).read_bytes() for name in files_under(store.root)}

    found = store.scan()
    assert [(s.path.name, s.ok) for s in found] == [
        (truncated.name, False), (good.name, True), (tampered.name, False)]
    assert found[1].document == store.load(good) and found[1].error is None
    assert found[0].document is None and found[0].error == f"certificate {truncated}: not JSON (Expecting value: line 5 column 13)"
    assert found[2].error == f"certificate {tampered}: digest does not match its contents"
    assert {name: (store.root / name).read_bytes() for name in files_under(store.root)} == before  # scan moves nothing

    moved = [store.quarantine(s.path) for s in found if not s.ok]
    assert [m.parent for m in moved] == [store.damaged_dir, store.damaged_dir]
    assert [m.name.rsplit(".", 1)[0] for m in moved] == [truncated.name, tampered.name]
    assert all(re.fullmatch(r"\d{8}-\d{6}", m.name.rsplit(".", 1)[1]) for m in moved)
    assert [m.read_bytes() for m in moved] == [before[truncated.name], before[tampered.name]]
    assert [s.path.name for s in store.scan()] == [good.name]
    # Nothing was deleted: every byte that was stored is still under the root.
    assert sorted(before.values()) == sorted((store.root / n).read_bytes() for n in files_under(store.root))


def test_quarantining_the_same_name_twice_keeps_both(store):
    store.root.mkdir(parents=True)
    path = store.root / NAME
    path.write_bytes(b"first")
    one = store.quarantine(path)
    path.write_bytes(b"second")
    two = store.quarantine(path)
    assert one != two and one.read_bytes() == b"first" and two.read_bytes() == b"second"


def test_quarantine_refuses_a_file_outside_the_store_or_one_that_is_missing(store, tmp_path):
    outside = tmp_path / NAME
    outside.write_text("{}")
    with pytest.raises(CertificateError) as e:
        store.quarantine(outside)
    assert str(e.value) == f"cannot move {outside} aside: it is not in the certificate store {store.root}"
    assert outside.exists()
    store.root.mkdir(parents=True)
    with pytest.raises(CertificateError) as e:
        store.quarantine(store.root / NAME)
    assert str(e.value) == f"cannot move {store.root / NAME} aside: it does not exist"


def test_scanning_a_store_that_does_not_exist_yet_finds_nothing(store):
    assert store.scan() == []


# --------------------------------------------------------------------------- does it count here


HERE = Here(machine_id="0123456789abcdef", backend="llama", backend_version="0.3.36", model_sha256="c" * 64,
            profile_name="exact", profile_digest="b" * 64)


@pytest.mark.parametrize("field, value, reason", [
    ("machine_id", "fedcba9876543210", "made on another machine (Example CPU, 2 cores)"),
    ("model_sha256", "9" * 64, "for another model (sha256 cccccccccccc…)"),
    ("backend_version", "0.3.40", "for llama 0.3.36, this is 0.3.40"),
    ("backend", "openvino", "for llama 0.3.36, this is openvino 0.3.36"),
    ("profile_name", "fast", "for profile 'exact', this is 'fast'"),
    ("profile_digest", "e" * 64, "for another version of profile 'exact'"),
])
def test_a_certificate_does_not_count_for_another_machine_model_backend_or_profile(field, value, reason):
    from dataclasses import replace

    assert why_not_here(example_document(), replace(HERE, **{field: value})) == reason


def test_a_certificate_counts_for_its_own_cell_on_its_own_machine_whatever_its_status():
    doc = example_document()
    assert why_not_here(doc, HERE) is None
    doc["status"] = "failed"
    assert why_not_here(doc, HERE) is None


def test_the_reasons_come_in_order_machine_model_backend_profile():
    everything_else = Here(machine_id="f" * 16, backend="openvino", backend_version="1", model_sha256="9" * 64,
                           profile_name="fast", profile_digest="e" * 64)
    assert why_not_here(example_document(), everything_else) == "made on another machine (Example CPU, 2 cores)"


def test_certify_says_why_the_newest_stored_certificate_of_a_cell_does_not_count_here():
    from dataclasses import replace

    from effctx_core.certify.matrix import not_counted

    older, newer = example_document(), example_document()
    older["created"], newer["created"] = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"
    newer["hardware"]["machine_id"] = "fedcba9876543210"
    assert not_counted([older, newer], HERE) == "made on another machine (Example CPU, 2 cores)"
    assert not_counted([older], HERE) is None
    assert not_counted([older, newer], replace(HERE, profile_name="q8")) is None  # none of its own


# --------------------------------------------------------------------------- hardware


def test_this_machine_reports_plausible_facts_and_a_stable_id():
    hw = this_machine()
    assert hw.cores == os.cpu_count()
    assert hw.memory_bytes > 0
    assert hw.cpu_model.strip() == hw.cpu_model != ""
    assert hw.accelerator is None
    assert hw.machine_id == machine_id(hw.cpu_model, hw.cores, hw.memory_bytes, platform.machine())
    assert re.fullmatch(r"[0-9a-f]{16}", hw.machine_id)
    assert this_machine() is hw
    doc = example_document()
    doc["hardware"] = hw.to_dict()
    check_document(doc)


def test_machine_id_is_the_first_16_hex_of_sha256_of_its_facts_with_memory_in_whole_gib():
    assert machine_id("Example CPU", 2, 24 * 2**30, "x86_64") == hashlib.sha256(b"Example CPU|2|24|x86_64").hexdigest()[:16]


def test_a_few_megabytes_more_memory_is_the_same_machine():
    assert machine_id("Example CPU", 2, 25_275_990_016, "x86_64") == machine_id("Example CPU", 2, 25_280_000_000, "x86_64")


def test_cpu_model_and_memory_are_read_from_proc_text():
    cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t:  Intel(R)  Xeon(R) Processor \n\nprocessor\t: 1\nmodel name\t: other\n"
    assert cpu_model(cpuinfo) == "Intel(R) Xeon(R) Processor"
    assert cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n") == (platform.processor().strip() or platform.machine() or "unknown CPU")
    assert memory_bytes("MemTotal:       24683584 kB\nMemFree:  1 kB\n") == 24683584 * 1024
    assert memory_bytes("") == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
