"""llama-server's slots: the one a session uses saved, restored and erased through
/slots, and a slot file's token header read by effctx itself, so that a state that
cannot be this session's is refused before the server touches the slot (a failed restore
empties the slot: the server clears it before it answers).

A slot file is llama.cpp's sequence state file (llama_state_seq_save_file): the magic
'ggsq', the format version, the count of 32-bit words that follow, those words, then the
KV state. The server packs its token list into those words: -1, its own format version,
the count of tokens, the tokens, the count of media chunks (0 without a projector).
"""

from __future__ import annotations

import os
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

from effctx_core.backends.llama_server.client import ServerClient
from effctx_core.errors import EffctxError

_SEQ_MAGIC = 0x67677371  # 'ggsq' (LLAMA_STATE_SEQ_MAGIC)
_SEQ_VERSION = 3  # LLAMA_STATE_SEQ_VERSION of the llama.cpp commit effctx builds
_PACKED_MARKER = -1  # LLAMA_TOKEN_NULL: the words are the server's packed token list
_PACKED_VERSION = 1  # SERVER_TOKENS_STATE_VERSION


class SlotFileError(EffctxError):
    """Bytes that are not a llama-server slot file this session can restore."""


@dataclass(frozen=True)
class SlotFile:
    tokens: tuple[int, ...]  # what the slot held when it was saved
    size: int


def read_slot_file(data: bytes) -> SlotFile:
    """The token list of a slot file, or SlotFileError saying what is wrong with it."""
    if len(data) < 12:
        raise SlotFileError(f"not a llama-server slot file: {len(data)} bytes, shorter than its header")
    magic, version, n_words = struct.unpack_from("<III", data)
    if magic != _SEQ_MAGIC:
        raise SlotFileError(f"not a llama-server slot file (magic {data[:4]!r})")
    if version != _SEQ_VERSION:
        raise SlotFileError(f"slot file format {version}, this llama.cpp reads {_SEQ_VERSION}")
    if 12 + 4 * n_words > len(data):
        raise SlotFileError(f"slot file cut short: its header counts {n_words} tokens, it holds fewer")
    words = struct.unpack_from(f"<{n_words}i", data, 12)
    if not words or words[0] != _PACKED_MARKER:
        return SlotFile(tuple(words), len(data))  # a plain token list (older servers)
    if len(words) < 3 or words[1] != _PACKED_VERSION:
        raise SlotFileError("slot file token list in a format this llama.cpp does not read")
    count = words[2]
    if not 0 <= count <= len(words) - 4 or words[3 + count] != 0:
        raise SlotFileError("slot file token list is damaged (or holds media this session cannot restore)")
    return SlotFile(tuple(words[3 : 3 + count]), len(data))


class Slot:
    """One slot of a server: the index a session's requests name, and its files in
    `folder` (the server's --slot-save-path as this machine sees it; None: unreadable)."""

    def __init__(self, client: ServerClient, index: int, folder: Path | None):
        self._client = client
        self.index = index
        self.folder = folder

    def erase(self) -> None:
        self._client.post(f"/slots/{self.index}?action=erase", None, "a slot erase")

    def _path(self) -> Path:
        if self.folder is None:
            raise EffctxError("this slot's files cannot be read here")
        return self.folder / f"effctx-{uuid.uuid4().hex}.bin"

    def save(self) -> bytes:
        """The slot's state as the server writes it; the file is removed once read."""
        path = self._path()
        try:
            self._client.post(f"/slots/{self.index}?action=save", {"filename": path.name}, "a slot save")
            return path.read_bytes()
        except OSError as exc:
            raise EffctxError(f"cannot read the slot file llama-server wrote to {self.folder} "
                              f"({exc.strerror or exc}): is slot_dir its --slot-save-path?") from None
        finally:
            path.unlink(missing_ok=True)

    def restore(self, data: bytes) -> int:
        """Load `data` into the slot; the number of tokens the server restored."""
        path = self._path()
        try:
            with open(path, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())  # the server reads it from another process
        except OSError as exc:
            path.unlink(missing_ok=True)
            raise EffctxError(f"cannot write a slot file to {self.folder}: {exc.strerror or exc}") from None
        try:
            answer = self._client.post(f"/slots/{self.index}?action=restore", {"filename": path.name},
                                       "a slot restore")
        finally:
            path.unlink(missing_ok=True)
        return int(answer.get("n_restored", -1))
