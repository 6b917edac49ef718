"""An `effctx api` endpoint in a thread of the test process, on a free loopback port,
over a real engine; and the `openai` SDK client its users run against it."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import openai

from effctx_core.api.app import ApiSettings
from effctx_core.api.keeper import TreeKeeper
from effctx_core.api.server import EndpointThread, bind
from effctx_core.backends.common.network import free_port
from effctx_core.engine import SessionEngine
from effctx_core.engine.service import EngineService, ServiceState
from effctx_core.profiles import Profile
from effctx_core.snapshots import SnapshotStore
from tests.helpers.engine_jobs import WAIT

# A Hermes-style ChatML template, as Qwen 2.5's: it renders the tool schemas itself, the
# assistant's tool calls as <tool_call> blocks and tool results as <tool_response>.
HERMES_CHATML = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\nCall a function as <tool_call>{\"name\": <name>, \"arguments\": <args>}</tool_call>"
    "<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'system' %}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for c in m.tool_calls or [] %}{{- '\\n<tool_call>\\n{\"name\": \"' + c.function.name + "
    "'\", \"arguments\": ' + c.function.arguments + '}\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")


class ApiServer:
    def __init__(self, model: Path, profile: Profile, state: Path, *, api_key: str | None = None, queue: int = 16,
                 max_body: int = 8 * 1024 * 1024, load_gate: threading.Event | None = None,
                 trace: Path | None = None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        store = SnapshotStore(state / "snapshots")
        keeper = TreeKeeper(state)

        def open_engine(progress) -> SessionEngine:
            if load_gate is not None:  # a test holds the load to see the endpoint while it loads
                progress("held by the test", 0, 1)
                assert load_gate.wait(WAIT)
            return SessionEngine(model, profile, checkpoints=store, trace_path=trace)

        self.service = EngineService(open_engine, queue)
        self.service.submit(lambda engine, token: keeper.load(engine))
        settings = ApiSettings(model_name=model.stem, api_key=api_key, max_body=max_body, after_request=keeper.save)
        self._endpoint = EndpointThread(self.service, settings, bind("127.0.0.1", self.port), queue)

    def start(self, ready: bool = True) -> ApiServer:
        self.service.start()
        self._endpoint.start()
        deadline = time.monotonic() + WAIT
        while not self._endpoint.started or (ready and self.service.state is not ServiceState.READY):
            assert time.monotonic() < deadline, "the endpoint did not come up"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._endpoint.stop(WAIT)

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, timeout=WAIT)


@contextmanager
def running_api(model: Path, profile: Profile, state: Path, **options) -> Iterator[ApiServer]:
    """A started endpoint, ready unless a `load_gate` holds its model's load."""
    server = ApiServer(model, profile, state, **options).start(ready=options.get("load_gate") is None)
    try:
        yield server
    finally:
        server.stop()
