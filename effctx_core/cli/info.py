"""`effctx info`: a model's facts, digest, capabilities, context limits and KV capacity."""

from __future__ import annotations

import argparse
import json

from effctx_core.cli.options import add_runtime_options, model_from_args, profile_from_args
from effctx_core.cli.profiles import profile_dict
from effctx_core.contract import ModelInfo
from effctx_core.profiles import Profile
from effctx_core.transcript import chat_format_report
from effctx_core.units import format_bytes


def add_parser(sub) -> None:
    info = sub.add_parser("info", help="model facts, digest, capabilities, context limits and KV capacity")
    add_runtime_options(info)
    info.add_argument("--memory", default="2GiB", metavar="SIZE",
                      help="memory budget for the KV capacity table, e.g. 512MiB, 2GiB (default 2GiB)")
    info.add_argument("--json", action="store_true")


def info_dict(info: ModelInfo) -> dict:
    f = info.facts
    caps = info.capabilities
    return {
        "model": {
            "path": f.path,
            "name": f.name,
            "architecture": f.architecture,
            "file_bytes": f.file_bytes,
            "sha256": f.sha256,
            "n_layers": f.n_layers,
            "n_head": f.n_head,
            "n_head_kv": f.n_head_kv,
            "head_dim_k": f.head_dim_k,
            "head_dim_v": f.head_dim_v,
            "n_embd": f.n_embd,
            "vocab_size": f.vocab_size,
            "context_length": f.context_length,
            "sliding_window": f.sliding_window,
            "global_layers": list(f.global_layers),
            "swa_layers": list(f.swa_layers),
            "global_layers_rule": f.global_layers_rule,
            "bos_token_id": f.bos_token_id,
            "eos_token_id": f.eos_token_id,
            "add_bos": f.add_bos,
            "chat_template": f.chat_template,
            "chat_format": info.identity.prompt_template,
            "chat_format_reason": chat_format_report(f)[1],
        },
        "backend": {"name": info.backend, "version": info.backend_version, "device": info.device},
        # The backend's settings also at the top level, and chat_format, where the JSON
        # had them before the identity took a backend-supplied mapping.
        "identity": {**info.identity.to_dict(), **info.identity.settings, "chat_format": info.identity.prompt_template,
                     "digest": info.identity.digest()},
        "n_ctx": info.n_ctx,
        "capabilities": caps.to_dict(),
        "limits": [{"name": lim.name, "tokens": lim.tokens, "reason": lim.reason} for lim in info.limits],
    }


def run(args: argparse.Namespace) -> int:
    from effctx_core.backends.registry import get_backend
    from effctx_core.units import parse_memory

    memory = parse_memory(args.memory)
    profile = profile_from_args(args)
    backend = get_backend(profile.backend)
    info = backend.describe(model_from_args(args, profile), profile)
    data = info_dict(info)
    data["n_batch"] = profile.n_batch
    data["profile"] = profile_dict(profile)
    report = backend.capacity_report(info, profile, memory)
    data.update(report.to_dict())
    status, why, certificate = certification(info, profile)
    data["certification"] = {"status": status, "reason": why,
                             "certified_tokens": certificate["context"]["certified"] if certificate else None}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    m = data["model"]
    print(f"model        {m['name']} ({m['architecture']}), {format_bytes(m['file_bytes'])}")
    print(f"path         {m['path']}")
    print(f"sha256       {m['sha256']}")
    print(f"layers       {m['n_layers']}, heads {m['n_head']}, KV heads {m['n_head_kv']}, "
          f"head dim K {m['head_dim_k']} / V {m['head_dim_v']}, vocab {m['vocab_size']}")
    if m["sliding_window"]:
        print(f"attention    sliding window {m['sliding_window']}; global layers {m['global_layers']} "
              f"({m['global_layers_rule']})")
    else:
        print("attention    every layer global")
    print(f"chat         {m['chat_format_reason']}")
    print(f"backend      {data['backend']['name']} {data['backend']['version']}, n_ctx {data['n_ctx']}, "
          f"n_batch {data['n_batch']}")
    print(f"profile      {profile.name}: {profile.description or 'no description'}")
    print(f"device       {info.device}")
    print(f"identity     {data['identity']['digest'][:16]}")
    print("capabilities")
    for key, cap in info.capabilities.flags().items():
        print(f"  {key:22} {'yes' if cap.supported else 'no ':3}  {cap.reason}")
    print(f"  {'safe_rollback':22} {info.capabilities.safe_rollback}")
    print("context limits")
    for lim in data["limits"]:
        print(f"  {lim['name']:10} {lim['tokens']:>7} tokens  {lim['reason']}")
    for line in report.text:
        print(line)
    print(f"certificate  {why}" if status == "certified" else f"certificate  {status}: {why}")
    return 0


def certification(info: ModelInfo, profile: Profile) -> tuple[str, str, dict | None]:
    """The cell's standing in the certification matrix on this machine."""
    from effctx_core.certify.matrix import here_for, standing, stored_documents
    from effctx_core.certify.store import CertificateStore

    documents, _damaged = stored_documents(CertificateStore())
    return standing(documents, here_for(info, profile))
