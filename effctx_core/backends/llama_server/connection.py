"""The server a session talks to: one effctx starts for it from its own llama.cpp build,
or one that runs already (the profile's server_url), checked before it is used: it
answers as llama-server, serves the same model with the same tokenizer, and writes its
slot files where the session reads them."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from effctx_core.backends.gguf.runtime import LoadedModel
from effctx_core.backends.llama_cpp_build import BINDING, LlamaCppBuild, binding_version, find_build, require_build
from effctx_core.backends.llama_server.client import ServerClient, ServerError
from effctx_core.backends.llama_server.process import StartedServer, binary_version, start_server
from effctx_core.backends.llama_server.settings import LlamaServerOptions, options_of
from effctx_core.backends.llama_server.slots import Slot
from effctx_core.errors import BackendUnavailableError, EffctxError

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

# Text whose tokens an attached server must give exactly as the local vocabulary does:
# plain words, a number, non-ASCII text and a control token.
_TOKENIZER_PROBE = "effctx probe: 12345 naïve café <start_of_turn>"

# The slots of attached servers that sessions of this process hold: a second session on
# a slot would overwrite the first one's cache between its requests.
_claimed: set[str] = set()
_claimed_lock = threading.Lock()


def missing_build() -> str | None:
    """Why no server can be started here, or None."""
    try:
        require_build("the llama-server backend")
    except EffctxError as exc:
        return str(exc)
    return None


def server_version(build: LlamaCppBuild) -> str:
    """A started server's version as its sessions' identity carries it."""
    return f"llama-server {binary_version(build)}"


def started_version() -> str:
    """The version a started server would have, and the binding its build matches."""
    build = find_build()
    if build is None:
        return f"not built ({BINDING} {binding_version()})"
    return f"{server_version(build)}, {BINDING} {binding_version()}"


@dataclass(frozen=True)
class ServerFacts:
    version: str  # the server's build, as the identity carries it
    slot_n_ctx: int  # the tokens a slot holds
    slots: int = 1


def _field(data: dict[str, Any], path: str, url: str) -> Any:
    value: Any = data
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ServerError(f"{url} answered without {path}: not a llama-server of this API")
        value = value[key]
    return value


def attached_facts(client: ServerClient) -> ServerFacts:
    """What /props says about a running server: its build, its slots and their context."""
    props = client.get("/props", "GET /props")
    n_ctx = _field(props, "default_generation_settings.n_ctx", client.url)
    slots = _field(props, "total_slots", client.url)
    if not isinstance(n_ctx, int) or n_ctx < 2 or not isinstance(slots, int) or slots < 1:
        raise ServerError(f"{client.url} reports a slot context of {n_ctx!r} in {slots!r} slots: not usable")
    return ServerFacts(f"llama-server {props.get('build_info', 'unknown build')} (attached)", n_ctx, slots)


def _check_model(client: ServerClient, vocab: LoadedModel) -> None:
    """The attached server serves this model: its shape and its tokenizer agree (the
    server does not say which file's digest it serves)."""
    models = client.get("/v1/models", "GET /v1/models")
    data = models.get("data")
    meta = data[0].get("meta") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    if not isinstance(meta, dict):
        raise ServerError(f"{client.url} answered /v1/models without the model's metadata")
    facts = vocab.facts
    mine = {"n_vocab": facts.vocab_size, "n_embd": facts.n_embd, "n_ctx_train": facts.context_length}
    theirs = {key: meta.get(key) for key in mine}
    if theirs != mine:
        diff = ", ".join(f"{k} {theirs[k]} (here {mine[k]})" for k in mine if theirs[k] != mine[k])
        raise ServerError(f"the server at {client.url} serves another model than {facts.path}: {diff}")
    tokens = client.post("/tokenize", {"content": _TOKENIZER_PROBE, "add_special": False, "parse_special": True},
                         "POST /tokenize").get("tokens")
    if tokens != vocab.tokenize(_TOKENIZER_PROBE, add_bos=False, special=True):
        raise ServerError(f"the server at {client.url} tokenizes differently from {facts.path}: another model "
                          "or another llama.cpp")


@dataclass
class ServerConnection:
    client: ServerClient
    facts: ServerFacts
    slot: Slot  # the session's own (its folder None where its files cannot be read)
    started: StartedServer | None = None
    claimed: str | None = None
    closed: bool = False

    def close(self) -> None:
        """Stop the server effctx started for the session, or let go of the attached slot."""
        if self.closed:
            return
        self.closed = True
        if self.started is not None:
            self.started.stop()
        if self.claimed is not None:
            with _claimed_lock:
                _claimed.discard(self.claimed)


def _start(model_path: Path, profile: Profile, options: LlamaServerOptions) -> ServerConnection:
    try:
        build = require_build("the llama-server backend")
    except EffctxError as exc:
        raise BackendUnavailableError(str(exc)) from None
    server = start_server(build, model_path, profile, options.start_timeout_s)
    try:
        client = ServerClient(server.url, options.timeout_s)
        n_ctx = attached_facts(client).slot_n_ctx
        facts = ServerFacts(server_version(build), n_ctx)
        return ServerConnection(client, facts, Slot(client, 0, server.slot_dir), started=server)
    except BaseException:
        server.stop(keep_log=True)
        raise


def _claim(url: str, slots: int) -> int:
    """The first slot of the server no session of this process holds, now held."""
    with _claimed_lock:
        for index in range(slots):
            key = f"{url}#{index}"
            if key not in _claimed:
                _claimed.add(key)
                return index
    raise EffctxError(f"every slot of {url} ({slots}) is in use by another session of this process (a session "
                      "needs a slot to itself; start the server with more, -np)")


def _attach(vocab: LoadedModel, options: LlamaServerOptions) -> ServerConnection:
    url = options.server_url.rstrip("/")
    client = ServerClient(url, options.timeout_s)
    facts = attached_facts(client)
    _check_model(client, vocab)
    index = _claim(url, facts.slots)
    try:
        slot = Slot(client, index, Path(options.slot_dir).expanduser() if options.slot_dir else None)
        if slot.folder is not None:
            slot.save()  # proves the server writes its slot files where the session reads them
        return ServerConnection(client, facts, slot, claimed=f"{url}#{index}")
    except BaseException:
        with _claimed_lock:
            _claimed.discard(f"{url}#{index}")
        raise


def connect(model_path: Path, profile: Profile, vocab: LoadedModel) -> ServerConnection:
    """The session's server, ready, its slot empty."""
    options = options_of(profile)
    connection = _attach(vocab, options) if options.attached else _start(model_path, profile, options)
    try:
        connection.slot.erase()  # an attached slot may hold someone else's tokens
    except BaseException:
        connection.close()
        raise
    return connection
