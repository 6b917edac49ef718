"""Where llama.cpp put a model and its cache across RPC workers, read from its own log:
the C API has no call that says which device holds a layer or a buffer."""

from __future__ import annotations

import re
from dataclasses import dataclass

from effctx_core.contract import DeviceShare

_LAYER = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")
_BUFFER = re.compile(r"(\S+)\s+(model|KV) buffer size =\s+([\d.]+) MiB")
_MIB = 1 << 20


@dataclass(frozen=True)
class Placement:
    workers: tuple[DeviceShare, ...]
    # Layers llama.cpp kept on this process's CPU, and the bytes it kept here (the token
    # embedding table stays with the client: its row lookup runs where the input is).
    local_layers: tuple[int, ...]
    local_model_bytes: int
    local_kv_bytes: int

    @property
    def summary(self) -> str:
        parts = [f"{w.where} ({w.layer_text}, {w.model_bytes / _MIB:.0f} MiB weights, "
                 f"{w.kv_bytes / _MIB:.1f} MiB KV)" for w in self.workers]
        return "rpc: " + ", ".join(parts)


def parse_placement(lines: list[str], devices: dict[str, str], n_layers: int) -> Placement:
    """The placement from llama.cpp's load and context-creation log; `devices` maps ggml's
    device names ("RPC0") to the endpoints they were registered for. llama.cpp lists the
    output head as one layer more than the model has."""
    layers: dict[str, list[int]] = {}
    for line in lines:
        found = _LAYER.search(line)
        if found:
            layers.setdefault(found.group(2), []).append(int(found.group(1)))
    model: dict[str, int] = {}
    kv: dict[str, int] = {}
    for line in lines:
        found = _BUFFER.search(line)
        if not found:
            continue
        name, kind, mib = found.group(1), found.group(2), float(found.group(3))
        # An RPC buffer is named "RPC0[host:port]"; host buffers "CPU", "CPU_Mapped", ...
        device = name.split("[", 1)[0]
        # llama.cpp names buffers by the endpoint they live on; the device name in front
        # can be another worker's (the output head on the last worker prints as RPC0).
        endpoint = name[len(device) + 1: -1] if "[" in name else ""
        key = next((d for d, e in devices.items() if e == endpoint), device) if endpoint else "CPU"
        target = model if kind == "model" else kv
        target[key] = target.get(key, 0) + round(mib * _MIB)
    workers = tuple(
        DeviceShare(endpoint, name, tuple(sorted(i for i in layers.get(name, []) if i < n_layers)), model.get(name, 0),
                    kv.get(name, 0), n_layers in layers.get(name, []))
        for name, endpoint in devices.items()
    )
    local = tuple(sorted(i for name, found in layers.items() if name not in devices for i in found))
    return Placement(workers, local, model.get("CPU", 0), kv.get("CPU", 0))
