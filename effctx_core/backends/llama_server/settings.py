"""The llama-server backend's profile settings: the llama.cpp keys it starts its server
with, and its `[llama-server]` table, which attaches to a running server instead."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from effctx_core.backends.common.network import is_loopback
from effctx_core.backends.conformance import ContractVariant
from effctx_core.backends.gguf.context import QUANTIZED_TYPES as LLAMA_QUANTIZED_TYPES
from effctx_core.backends.gguf.context import LlamaContextOptions, context_kv_settings, kv_type_problems
from effctx_core.backends.table import options_of as table_options_of
from effctx_core.identity import Setting

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

# The server is built from the same llama.cpp commit as the binding: the same cache types.
QUANTIZED_TYPES = LLAMA_QUANTIZED_TYPES

TABLE = "llama-server"


def _user_server(model_path, profile):
    from effctx_core.backends.llama_server.process import contract_server

    return contract_server(model_path, profile)


# A server effctx starts for each session, and one a user runs that sessions attach to.
CONTRACT_VARIANTS = {"": ContractVariant(), "attached": ContractVariant(services=_user_server)}


@dataclass(frozen=True)
class LlamaServerOptions(LlamaContextOptions):
    """The `[llama-server]` table of a profile, with its defaults: the llama.cpp context
    settings it starts a server with (an attached server was started by someone else with
    its own), and how it reaches the server."""

    # Attach to this running llama-server ("http://host:port") instead of starting one.
    server_url: str = ""
    # llama-server's API has no authentication here: a server that is not on loopback is
    # refused unless the profile says it is trusted.
    allow_remote: bool = False
    # The attached server's --slot-save-path as this machine sees it: snapshots read and
    # write slot files there. Without it an attached session has no snapshots.
    slot_dir: str = ""
    # The longest wait for one answer (or one streamed token) from the server.
    timeout_s: float = 120.0
    # The longest wait for a started server to load its model and answer /health.
    start_timeout_s: float = 60.0

    @property
    def attached(self) -> bool:
        return bool(self.server_url)


def started_profile(profile: "Profile") -> "Profile":
    """The profile for a server effctx starts itself: its llama.cpp settings, without the
    settings that attach to someone else's server."""
    defaults = LlamaServerOptions()
    return profile.with_changes(server_url=defaults.server_url, allow_remote=defaults.allow_remote,
                                slot_dir=defaults.slot_dir)


# What an earlier effctx read at a profile's top level and now belongs in [llama-server].
MOVED_KEYS = ("flash_attn", "swa_full")


def options_of(profile: "Profile") -> LlamaServerOptions:
    return table_options_of(profile, LlamaServerOptions, TABLE)


def url_problem(url: str) -> str | None:
    """Why `url` is not an http(s)://host:port address of a server, or None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"server_url {url!r} is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"server_url {url!r} is not an http:// or https:// address with a host"
    if port is None:
        return f"server_url {url!r} has no port (llama-server listens on 8080 by default: {url.rstrip('/')}:8080)"
    if parts.path.strip("/") or parts.query or parts.fragment:
        return f"server_url {url!r} has a path; give the server's root (http://host:port)"
    return None


def value_problem(key: str, value: object) -> str | None:
    if isinstance(value, float | int) and not isinstance(value, bool) and (not math.isfinite(value) or value <= 0):
        return "must be a positive number of seconds"
    return None


def _attach_problems(options: LlamaServerOptions, where: str) -> list[str]:
    if not options.attached:
        unused = [k for k in ("allow_remote", "slot_dir") if getattr(options, k) != getattr(LlamaServerOptions(), k)]
        return [f"{where}: {TABLE}.{', '.join(unused)} only apply with server_url"] if unused else []
    problem = url_problem(options.server_url)
    if problem is not None:
        return [f"{where}: {TABLE}.{problem}"]
    host = urlsplit(options.server_url).hostname or ""
    if not is_loopback(host) and not options.allow_remote:
        return [f"{where}: {TABLE}.server_url {options.server_url} is not on loopback, and llama-server's API has "
                "no authentication: set allow_remote = true to attach to it anyway"]
    return []


def check_profile(profile: "Profile", where: str) -> list[str]:
    """What is wrong with the profile for llama-server, one line each (empty: nothing)."""
    options = options_of(profile)
    return _attach_problems(options, where) + kv_type_problems(profile, options, where)


def kv_settings(profile: "Profile") -> dict[str, Setting]:
    """The settings that change what the slot's cache holds for a token list, for the identity."""
    return {
        # As on the llama backend: the cache types, flash attention and the batch size
        # change the numbers written into the cache.
        **context_kv_settings(profile, options_of(profile)),
        # A slot file saved without the full sliding-window cache holds only the window:
        # restored where swa_full is on, it would be a cache with holes.
        "swa_full": options_of(profile).swa_full,
    }
