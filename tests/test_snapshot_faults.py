"""Snapshot store under faults, with real mechanisms: SIGKILLed writers, damaged files,
two processes writing at once, a file-size limit, a full tmpfs, a read-only mount and a
path that runs through a regular file.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from effctx_core.contract import SessionSnapshot
from effctx_core.snapshots import (
    CorruptSnapshotError,
    ForeignSnapshotError,
    SnapshotStore,
    SnapshotStoreError,
    key_for,
    load_snapshot,
    save_snapshot,
)
from effctx_core.snapshots.blobfile import BlobDamage, read_blob
from tests.helpers.identities import identity

REPO = str(Path(__file__).resolve().parents[1])
CHILD_ENV = {**os.environ, "PYTHONPATH": REPO}


ID = identity().digest()
OTHER_ID = identity(flash_attn=True).digest()


def temp_files(store: SnapshotStore) -> list[Path]:
    return sorted(p for p in store.blobs_dir.iterdir() if p.name.endswith(".tmp"))


def blob_names(store: SnapshotStore) -> list[str]:
    return sorted(p.name for p in store.blobs_dir.iterdir())


def backdate(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def read_line(proc: subprocess.Popen, timeout: float = 60) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "child did not report in time"
    return proc.stdout.readline().decode()


# --------------------------------------------------------------------------- (a) a writer killed mid-write

# The child is paused inside the store's own write routine after half the payload is on
# disk, says so, and waits for the SIGKILL; everything before that is the real code path.
HALF_WRITER = r"""
import sys, time
from pathlib import Path
from effctx_core.snapshots import store as store_mod
root, ident = sys.argv[1], sys.argv[2]
real = store_mod._write_parts
def half_then_wait(fd, parts):
    *head, payload = parts
    real(fd, head)
    real(fd, [payload[: len(payload) // 2]])
    print("HALF", flush=True)
    time.sleep(600)
store_mod._write_parts = half_then_wait
store_mod.SnapshotStore(Path(root), 1 << 30).put(ident, list(range(1000)), b"\x5a" * (50 << 20))
"""

FULL_WRITER = r"""
import sys
from pathlib import Path
from effctx_core.snapshots import SnapshotStore
SnapshotStore(Path(sys.argv[1]), 1 << 30).put(sys.argv[2], list(range(1000)), b"\x5a" * (50 << 20))
"""


def start_half_writer(store: SnapshotStore) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HALF_WRITER, str(store.root), ID],
                            stdout=subprocess.PIPE, env=CHILD_ENV)
    assert read_line(proc) == "HALF\n"
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_writer_killed_mid_write_leaves_no_visible_entry(tmp_path):
    store = SnapshotStore(tmp_path / "store", 1 << 30)
    kept = store.put(ID, [1, 2, 3], b"survivor").key
    proc = start_half_writer(store)
    (tmp,) = temp_files(store)
    # header + 1000 tokens + "{}" + half of the 50 MiB payload
    assert tmp.stat().st_size == 232 + 4000 + 2 + (25 << 20)
    kill(proc)

    assert [e.key for e in store.ls()] == [kept]
    assert store.find(ID, list(range(1000))) is None
    report = store.verify()
    assert (report.checked, report.ok, report.quarantined, report.adopted) == (1, 1, (), ())
    assert store.get(kept, ID).payload == b"survivor"
    assert store.gc().temp_removed == ()  # younger than a minute: could be a slow writer
    backdate(tmp, 120)
    assert store.gc().temp_removed == (tmp.name,)
    assert blob_names(store) == [f"{kept}.snap"]


def test_gc_keeps_the_temp_file_of_a_live_writer_however_old(tmp_path):
    store = SnapshotStore(tmp_path / "store", 1 << 30)
    proc = start_half_writer(store)
    try:
        tmp = temp_files(store)[0]
        backdate(tmp, 3600)
        assert store.gc().temp_removed == ()  # the writer still holds its flock
        assert tmp.exists()
    finally:
        kill(proc)
    assert store.gc().temp_removed == (tmp.name,)


def test_writer_killed_at_a_real_moment_shows_all_or_nothing(tmp_path):
    """No seam: SIGKILL as soon as the temp file appears, wherever the writer then is."""
    store = SnapshotStore(tmp_path / "store", 1 << 30)
    proc = subprocess.Popen([sys.executable, "-c", FULL_WRITER, str(store.root), ID], env=CHILD_ENV)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if store.blobs_dir.is_dir() and temp_files(store):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.0005)
    proc.wait(timeout=30)

    report = store.verify()
    assert report.quarantined == ()
    entries = store.ls()
    assert len(entries) <= 1
    if entries:  # the kill came after the rename: the entry is whole
        assert store.get(entries[0].key, ID).payload == b"\x5a" * (50 << 20)
    for tmp in temp_files(store):
        backdate(tmp, 120)
    store.gc()
    assert temp_files(store) == []


# --------------------------------------------------------------------------- (b) damaged blobs


def _flip(offset: int):
    def damage(raw: bytearray) -> bytearray:
        raw[offset] ^= 0x01
        return raw
    return damage


def _set_version(raw: bytearray) -> bytearray:
    struct.pack_into("<H", raw, 8, 2)
    return raw


DAMAGE = {
    # name: (damage, expected reason given the original size n, quarantine slug)
    "truncated": (lambda raw: raw[:-100], lambda n: f"truncated: {n - 100} bytes, the header says {n}", "truncated"),
    "empty": (lambda raw: bytearray(), lambda n: "truncated: 0 bytes, shorter than the 232-byte header", "truncated"),
    "trailing-bytes": (lambda raw: raw + b"junk", lambda n: "4 unexpected bytes after the payload", "size"),
    "payload-bit": (_flip(-1), lambda n: "payload checksum mismatch", "checksum"),
    "token-bit": (_flip(232), lambda n: "token list checksum mismatch", "checksum"),
    "token-count-bit": (_flip(80), lambda n: "header checksum mismatch", "header"),
    "identity-bit": (_flip(20), lambda n: "header checksum mismatch", "header"),
    "wrong-magic": (lambda raw: bytearray(b"GGUF\0\0\0\0") + raw[8:],
                    lambda n: "not a snapshot blob (magic b'GGUF\\x00\\x00\\x00\\x00', expected b'EFFCTXS1')", "magic"),
    "wrong-version": (_set_version, lambda n: "unsupported format version 2 (this effctx reads 1)", "version"),
}


@pytest.fixture
def four(tmp_path):
    store = SnapshotStore(tmp_path / "store", 1 << 30)
    payloads = {store.put(ID, [i, i + 1], bytes([i]) * 5000, {"i": i}).key: bytes([i]) * 5000 for i in range(4)}
    return store, payloads


def assert_others_intact(store: SnapshotStore, payloads: dict, bad: str) -> None:
    for key, payload in payloads.items():
        if key != bad:
            assert store.get(key, ID).payload == payload
    assert sorted(e.key for e in store.ls()) == sorted(k for k in payloads if k != bad)


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_blob_is_detected_quarantined_and_the_rest_stay_readable(four, kind):
    store, payloads = four
    bad = sorted(payloads)[1]
    damage, reason, slug = DAMAGE[kind]
    path = store.blob_path(bad)
    original = bytearray(path.read_bytes())
    damaged = bytes(damage(bytearray(original)))
    path.write_bytes(damaged)

    with pytest.raises(CorruptSnapshotError) as err:
        store.get(bad, ID)
    assert err.value.reason == reason(len(original))
    moved = err.value.moved_to
    assert moved.parent == store.quarantine_dir
    assert moved.name.startswith(f"{bad}.snap.") and moved.name.endswith(f".{slug}")
    assert moved.read_bytes() == damaged
    assert not path.exists()
    assert str(err.value) == f"snapshot {bad[:12]} is corrupt: {reason(len(original))}; moved to {moved}"
    assert_others_intact(store, payloads, bad)
    assert store.verify().quarantined == ()


def test_every_single_bit_flip_anywhere_in_a_blob_is_caught(tmp_path):
    store = SnapshotStore(tmp_path / "store", 1 << 30)
    key = store.put(ID, [3, 4], b"0123456789abcdef", {"k": 1}).key
    good = store.blob_path(key).read_bytes()
    probe = tmp_path / "probe.snap"
    missed = []
    for bit in range(8 * len(good)):
        raw = bytearray(good)
        raw[bit // 8] ^= 1 << (bit % 8)
        probe.write_bytes(raw)
        with probe.open("rb") as f:
            try:
                read_blob(f)
            except BlobDamage:
                continue
        missed.append(bit)
    assert missed == []
    assert len(good) == 232 + 8 + 7 + 16


def test_a_blob_copied_under_another_key_is_quarantined(four):
    store, payloads = four
    a, b = sorted(payloads)[:2]
    store.blob_path(b).write_bytes(store.blob_path(a).read_bytes())
    with pytest.raises(CorruptSnapshotError) as err:
        store.get(b, ID)
    assert err.value.reason == f"the file name says key {b[:12]}, its header's identity and tokens give {a[:12]}"
    assert err.value.moved_to.name.endswith(".key-mismatch")
    assert_others_intact(store, payloads, b)


def test_verify_quarantines_every_damaged_blob_and_lists_what_it_did(four):
    store, payloads = four
    keys = sorted(payloads)
    for key, kind in zip(keys, ("truncated", "payload-bit", "wrong-magic")):
        path = store.blob_path(key)
        path.write_bytes(bytes(DAMAGE[kind][0](bytearray(path.read_bytes()))))
    (store.blobs_dir / "notes.txt").write_text("not a blob")

    report = store.verify()
    assert (report.checked, report.ok) == (5, 1)
    assert sorted((q.name, q.reason) for q in report.quarantined) == sorted([
        (f"{keys[0]}.snap", "truncated: 5147 bytes, the header says 5247"),
        (f"{keys[1]}.snap", "payload checksum mismatch"),
        (f"{keys[2]}.snap", "not a snapshot blob (magic b'GGUF\\x00\\x00\\x00\\x00', expected b'EFFCTXS1')"),
        ("notes.txt", "not a snapshot blob file name"),
    ])
    assert all(Path(q.moved_to).parent == store.quarantine_dir for q in report.quarantined)
    assert [e.key for e in store.ls()] == [keys[3]]
    assert store.get(keys[3], ID).payload == payloads[keys[3]]
    again = store.verify()
    assert (again.checked, again.ok, again.quarantined) == (1, 1, ())


def test_a_foreign_identity_is_refused_and_left_in_place(four):
    store, payloads = four
    snap = SessionSnapshot(identity(flash_attn=True), (5, 6), b"state", None)
    key = save_snapshot(store, snap).key
    with pytest.raises(ForeignSnapshotError) as err:
        store.get(key, ID)
    assert (err.value.expected, err.value.found) == (ID, OTHER_ID)
    assert str(err.value) == f"snapshot {key[:12]} belongs to runtime identity {OTHER_ID[:16]}, not {ID[:16]}"
    with pytest.raises(ForeignSnapshotError):
        load_snapshot(store, key, identity())
    assert store.blob_path(key).exists()
    assert load_snapshot(store, key, identity(flash_attn=True)) == snap
    assert store.verify().quarantined == ()
    for other, payload in payloads.items():
        assert store.get(other, ID).payload == payload


def test_a_valid_blob_whose_payload_is_no_session_snapshot_is_quarantined_on_load(four):
    store, payloads = four
    key = store.put(ID, [9], b"not a session payload").key
    with pytest.raises(CorruptSnapshotError) as err:
        load_snapshot(store, key, identity())
    assert err.value.reason == "payload of 21 bytes is shorter than its 32-byte header"
    assert err.value.moved_to.name.endswith(".rejected")
    assert_others_intact(store, {**payloads, key: b""}, key)


# --------------------------------------------------------------------------- (c) two writers at once

CONCURRENT_WRITER = r"""
import sys, time
from pathlib import Path
from effctx_core.snapshots import SnapshotStore, SnapshotNotFoundError
root, ident, start, budget, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
store = SnapshotStore(Path(root), budget)
print("READY", flush=True)
while not go.exists():
    time.sleep(0.001)
began = time.time()
for i in range(start, start + 30):
    store.put(ident, list(range(i + 1)), bytes([i]) * (20000 + i), {"i": i})
    found = store.longest_prefix(ident, list(range(i)))  # read while the other one writes
    if found:
        try:
            store.get(found[0], ident)
        except SnapshotNotFoundError:
            pass  # evicted by the other writer in between: a miss, not an error
print(began, time.time(), flush=True)
"""


def run_two_writers(root: Path, budget: int, tmp_path: Path) -> None:
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT_WRITER, str(root), ID, str(start), str(budget), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=CHILD_ENV) for start in (0, 15)]
    for proc in procs:
        assert read_line(proc) == "READY\n"
    go.touch()
    spans = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        assert err == b""
        spans.append([float(x) for x in out.split()])
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1  # the two writers really ran at the same time


def assert_consistent(store: SnapshotStore) -> list[int]:
    """Index == blobs on disk, every blob verifies and holds what its writer wrote."""
    index = json.loads(store.index_path.read_text())
    assert set(index["entries"]) == {n[:-5] for n in blob_names(store)}
    assert temp_files(store) == []
    uses = [r["use"] for r in index["entries"].values()]
    assert len(set(uses)) == len(uses)  # every update got its own LRU tick: no lost writes
    report = store.verify()
    assert (report.quarantined, report.adopted, report.dropped, report.reindexed) == ((), (), (), ())
    written = []
    for entry in store.ls():
        i = entry.meta["i"]
        assert store.get(entry.key, ID) == (tuple(range(i + 1)), bytes([i]) * (20000 + i), {"i": i})
        written.append(i)
    return sorted(written)


def test_two_processes_writing_overlapping_keys_lose_nothing(tmp_path):
    root = tmp_path / "store"
    run_two_writers(root, 1 << 30, tmp_path)
    store = SnapshotStore(root, 1 << 30)
    assert assert_consistent(store) == list(range(45))
    assert {e.key for e in store.ls()} == {key_for(ID, range(i + 1)) for i in range(45)}


def test_two_processes_writing_under_eviction_pressure_stay_consistent(tmp_path):
    root = tmp_path / "store"
    budget = 8 * 20300
    run_two_writers(root, budget, tmp_path)
    store = SnapshotStore(root, budget)
    written = assert_consistent(store)
    assert 1 <= len(written) <= 8
    assert store.usage().total_bytes <= budget


# --------------------------------------------------------------------------- (d) full disk, unwritable dir

# RLIMIT_FSIZE makes the kernel fail writes past 1 MiB with EFBIG, for real; SIGXFSZ is
# ignored so the write fails instead of the process being killed.
FSIZE_WRITER = r"""
import resource, signal, sys
from pathlib import Path
from effctx_core.snapshots import SnapshotStore, SnapshotStoreError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
try:
    SnapshotStore(Path(sys.argv[1]), 1 << 30).put(sys.argv[2], [1, 2, 3], b"z" * (4 << 20))
except SnapshotStoreError as exc:
    print(exc)
    sys.exit(3)
"""


def test_file_too_large_fails_with_one_line_and_leaves_nothing_partial(tmp_path):
    store = SnapshotStore(tmp_path / "store", 1 << 30)
    kept = store.put(ID, [7], b"small").key
    out = subprocess.run([sys.executable, "-c", FSIZE_WRITER, str(store.root), ID],
                         capture_output=True, text=True, env=CHILD_ENV, timeout=60)
    assert out.returncode == 3, out.stderr
    assert out.stdout == f"cannot write snapshot store at {store.root}: File too large\n"
    assert blob_names(store) == [f"{kept}.snap"]
    assert [e.key for e in store.ls()] == [kept]
    assert store.verify().quarantined == ()


def test_a_root_below_a_regular_file_fails_with_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    root = tmp_path / "afile" / "snapshots"
    store = SnapshotStore(root, 1 << 30)
    with pytest.raises(SnapshotStoreError) as err:
        store.put(ID, [1], b"x")
    assert str(err.value) == f"cannot write snapshot store at {root}: Not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def _mount_namespace_problem() -> str | None:
    """Why a private mount namespace with tmpfs is unavailable here, or None if it is."""
    if not shutil.which("unshare"):
        return "no unshare(1)"
    probe = Path(__import__("tempfile").mkdtemp())
    try:
        out = subprocess.run(["unshare", "-m", "--", "sh", "-c", 'mount -t tmpfs -o size=64k probe "$1"', "sh", str(probe)],
                             capture_output=True, text=True, timeout=30)
    finally:
        probe.rmdir()
    return None if out.returncode == 0 else f"cannot mount in a private namespace: {out.stderr.strip()}"


IN_NAMESPACE = r"""
import json, sys
from pathlib import Path
from effctx_core.snapshots import SnapshotStore, SnapshotStoreError
root, ident, mode = Path(sys.argv[1]) / "store", sys.argv[2], sys.argv[3]
store = SnapshotStore(root, 1 << 30)
result = {}
if mode == "full":
    result["small"] = store.put(ident, [1], b"fits").key
try:
    store.put(ident, [2], b"z" * (4 << 20))
except SnapshotStoreError as exc:
    result["error"] = str(exc)
result["files"] = sorted(p.name for p in store.blobs_dir.iterdir())
result["ls"] = [e.key for e in store.ls()]
result["read"] = store.get(store.find(ident, [1]), ident).payload.decode()
if mode == "full":
    result["verify_quarantined"] = len(store.verify().quarantined)
print(json.dumps(result))
"""

MOUNTS = {
    "full": 'mount -t tmpfs -o size=2m effctx-full "$1"',
    "read-only": 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1"',
}


def run_in_namespace(mode: str, disk: Path) -> dict:
    problem = _mount_namespace_problem()
    if problem:
        pytest.skip(problem)
    script = f'{MOUNTS[mode]} && exec "$2" -c "$3" "$1" "$4" "$5"'
    out = subprocess.run(["unshare", "-m", "--", "sh", "-c", script, "sh", str(disk), sys.executable, IN_NAMESPACE, ID, mode],
                         capture_output=True, text=True, env=CHILD_ENV, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_disk_full_fails_with_one_line_and_the_store_keeps_working(tmp_path):
    """A 2 MiB tmpfs in a private mount namespace: the 4 MiB put hits ENOSPC for real."""
    disk = tmp_path / "disk"
    disk.mkdir()
    result = run_in_namespace("full", disk)
    root = disk / "store"
    small = key_for(ID, [1])
    assert result == {
        "small": small,
        "error": f"cannot write snapshot store at {root}: No space left on device",
        "files": [f"{small}.snap"],
        "ls": [small],
        "read": "fits",
        "verify_quarantined": 0,
    }


def test_read_only_store_still_serves_reads_and_refuses_writes_in_one_line(tmp_path):
    """A read-only bind mount: EROFS for every user, root included."""
    disk = tmp_path / "disk"
    store = SnapshotStore(disk / "store", 1 << 30)
    small = store.put(ID, [1], b"fits").key
    before = {p.name: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    result = run_in_namespace("read-only", disk)
    assert result == {
        "error": f"cannot write snapshot store at {store.root}: Read-only file system",
        "files": [f"{small}.snap"],
        "ls": [small],
        "read": "fits",
    }
    assert {p.name: p.read_bytes() for p in store.root.rglob("*") if p.is_file()} == before


# Root ignores permission bits; in a user namespace without a uid mapping it loses that
# power (no CAP_DAC_OVERRIDE over files of unmapped owners), so chmod 0o500 stops it too.
CHMOD_WRITER = r"""
import sys
from pathlib import Path
from effctx_core.snapshots import SnapshotStore, SnapshotStoreError
try:
    SnapshotStore(Path(sys.argv[1]), 1 << 30).put(sys.argv[2], [2], b"x" * 100_000)
except SnapshotStoreError as exc:
    print(exc)
    sys.exit(3)
"""


def test_chmod_unwritable_store_refuses_writes_in_one_line(tmp_path):
    store = SnapshotStore(tmp_path / "store", 1 << 30)
    small = store.put(ID, [1], b"fits").key
    before = {p.name: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    prefix = ["unshare", "-U", "--"] if os.geteuid() == 0 else []
    if prefix and subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root and no user namespace to drop the permission override in")
    for d in (store.root, store.blobs_dir):
        d.chmod(0o500)
    try:
        out = subprocess.run([*prefix, sys.executable, "-c", CHMOD_WRITER, str(store.root), ID],
                             capture_output=True, text=True, env=CHILD_ENV, timeout=60)
    finally:
        for d in (store.root, store.blobs_dir):
            d.chmod(0o755)
    assert out.returncode == 3, out.stderr
    assert out.stdout == f"cannot write snapshot store at {store.root}: Permission denied\n"
    assert {p.name: p.read_bytes() for p in store.root.rglob("*") if p.is_file()} == before
    assert blob_names(store) == [f"{small}.snap"]
