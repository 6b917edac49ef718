"""`effctx bench api`: OpenAI-compatible servers on the same model, measured from the client
side with the real `openai` SDK, over agents' conversations (api_workload.py).

The servers run one at a time (a server measured while another holds the cores measures
the other), each as a subprocess on a free loopback port with its own defaults, given only
the model, n_ctx and threads:
- effctx: `effctx api`, its stored states kept in a folder of the run (`--state-dir`), so
  they outlive a restart;
- llama-server, from effctx's llama.cpp build: its defaults are 4 slots in one unified KV
  and an 8 GiB host-memory prompt cache, which a restart empties;
- llama-cpp-python's own server (`python -m llama_cpp.server`) on effctx's build of the
  library: one context, which keeps the last prompt only.

Every request is streamed: TTFT is the time to the first chunk that carries content or a
tool call, wall the time to the end of the stream. Prompt and cached tokens are what the
server reports (llama-cpp-python reports none), effctx's `effctx` extension object is kept
as it came. A server that does not come up, or dies, ends the run with one line and the
last lines of its log; a request the server refuses is recorded with its error and the
conversation goes on. Every server is stopped (SIGINT, then SIGKILL after a grace), also
when the run is interrupted.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from effctx_core.backends.common.network import free_port
from effctx_core.backends.llama_cpp_build import LIB_PATH_ENV, library_build, require_build
from effctx_core.bench.api_workload import Agent, ApiWorkload, Step
from effctx_core.errors import EffctxError
from effctx_core.units import ms_since

SERVERS = ("effctx", "llama-server", "llama-cpp-python")
# llama-cpp-python's server has no /health, but it loads its model before it listens.
_READY_PATHS = {"effctx": "/health", "llama-server": "/health", "llama-cpp-python": "/v1/models"}
_POLL_S = 0.1
_PROBE_TIMEOUT_S = 2.0
_STOP_GRACE_S = 10.0
_REQUEST_TIMEOUT_S = 600.0  # one request, prefill and reply: 2 cores, a long conversation, a cold server
_LOG_TAIL_LINES = 3
_ERROR_CHARS = 300

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ApiBenchSettings:
    """What every server is given: the same model, context and threads."""

    model: Path
    profile: str  # effctx's profile, as `effctx api --profile` takes it: a name or a file
    n_ctx: int
    threads: int
    restart: bool = False  # every server restarted before every request but the first
    ready_timeout_s: float = 120.0


@dataclass(frozen=True)
class RequestRecord:
    label: str  # A1, B1, A2…: the conversation's letter, the turn
    turn: int
    ttft_ms: float | None  # None: no content and no tool call came (or the request failed)
    wall_ms: float
    prompt_tokens: int | None  # as the server reports them; None: it reports none
    cached_tokens: int | None
    completion_tokens: int | None
    reply: str
    tool_calls: int
    effctx: Any = None  # effctx's extension object, raw
    error: str | None = None


@dataclass(frozen=True)
class ServerRun:
    server: str
    command: tuple[str, ...]
    ready_ms: tuple[float, ...]  # from the start of its process to ready, each start
    requests: tuple[RequestRecord, ...]


@dataclass(frozen=True)
class ApiBenchReport:
    workload: str
    description: str
    model: str
    profile: str
    n_ctx: int
    threads: int
    turns: int
    max_tokens: int
    restart: bool
    runs: tuple[ServerRun, ...]

    def to_dict(self) -> dict:
        return asdict(self)


def launch(server: str, settings: ApiBenchSettings, port: int, state_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The command line of `server` on `port`, and what its environment adds."""
    host = ["--host", "127.0.0.1", "--port", str(port)]
    model, n_ctx, threads = str(settings.model), str(settings.n_ctx), str(settings.threads)
    if server == "effctx":
        return [sys.executable, "-m", "effctx_core.cli.main", "api", "--profile", settings.profile, "--model", model,
                "--n-ctx", n_ctx, "--threads", threads, *host, "--state-dir", str(state_dir)], {}
    if server == "llama-server":
        binary = require_build("`effctx bench api --servers llama-server`").server_binary
        return [str(binary), "-m", model, "-c", n_ctx, "-t", threads, *host], {}
    if server == "llama-cpp-python":
        # Installed without a library of its own: it loads effctx's build, as effctx does.
        # Its batch threads default to every CPU; llama-server's -t sets both.
        return ([sys.executable, "-m", "llama_cpp.server", "--model", model, "--n_ctx", n_ctx, "--n_threads", threads,
                 "--n_threads_batch", threads, *host], {LIB_PATH_ENV: str(library_build().bin_dir)})
    raise EffctxError(f"unknown server {server!r} (known: {', '.join(SERVERS)})")


def check_servers(text: str) -> list[str]:
    """`--servers a,b,…`: known names, each once, in the order given (the first is the one
    the others are compared with)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise EffctxError("--servers names no server")
    for name in names:
        if name not in SERVERS:
            raise EffctxError(f"unknown server {name!r} in --servers (known: {', '.join(SERVERS)})")
    if len(set(names)) != len(names):
        raise EffctxError(f"--servers names a server twice: {text}")
    return names


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _ERROR_CHARS else line[: _ERROR_CHARS - 1] + "…"


class _ServerProcess:
    """One server as a subprocess in a session of its own (a Ctrl+C at the terminal reaches
    the benchmark, which stops the server itself), its output in a log file."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path, port: int, timeout_s: float):
        self.name, self.command, self.env, self.log, self.timeout_s = name, command, env, log, timeout_s
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None

    def tail(self) -> str:
        try:
            lines = [line.strip() for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            lines = []
        return _one_line(" | ".join(lines[-_LOG_TAIL_LINES:])) if lines else "it printed nothing"

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def start(self) -> float:
        """Milliseconds from the process's start to ready (its ready path answers 200)."""
        t0 = time.perf_counter_ns()
        with open(self.log, "ab") as out:
            # A pipe nobody reads would fill and stop the server: its output goes to a file.
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env={**os.environ, **self.env},
                                            start_new_session=True)
        deadline = time.monotonic() + self.timeout_s
        while not self._ready():
            code = self.exit_code()
            if code is not None:
                raise EffctxError(f"{self.name} exited ({code}) before it was ready: {self.tail()}")
            if time.monotonic() > deadline:
                tail = self.tail()  # before the stop adds its own lines
                self.stop()
                raise EffctxError(f"{self.name} was not ready within {self.timeout_s:g} s: {tail}")
            time.sleep(_POLL_S)
        return round(ms_since(t0), 1)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + _READY_PATHS[self.name], timeout=_PROBE_TIMEOUT_S) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False  # not listening yet, or loading its model (503)

    def stop(self) -> None:
        """SIGINT to its process group, as a Ctrl+C at its terminal; SIGKILL to what is left
        of the group after the grace, or at once when a second Ctrl+C cuts the grace short."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            if process.poll() is None:
                _signal_group(process, signal.SIGINT)
                process.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        finally:
            _signal_group(process, signal.SIGKILL)
            process.wait()


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass  # the whole group has exited


def _send(client: Any, model: str, messages: list[dict], tools: Sequence[dict], max_tokens: int,
          step: Step) -> tuple[RequestRecord, dict]:
    """One streamed request; the record, and the assistant message as the server returned it."""
    text: list[str] = []
    calls: dict[int, dict] = {}
    ttft_ms = None
    usage = None
    extension = None
    t0 = time.perf_counter_ns()
    stream = client.chat.completions.create(
        model=model, messages=messages, tools=list(tools), temperature=0, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True})
    for chunk in stream:
        usage = chunk.usage or usage
        extension = getattr(chunk, "effctx", None) or extension
        for choice in chunk.choices:
            delta = choice.delta
            if (delta.content or delta.tool_calls) and ttft_ms is None:
                ttft_ms = round(ms_since(t0), 1)
            text.append(delta.content or "")
            for part in delta.tool_calls or ():
                call = calls.setdefault(part.index, {"id": "", "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                call["id"] = part.id or call["id"]
                if part.function is not None:
                    call["function"]["name"] += part.function.name or ""
                    call["function"]["arguments"] += part.function.arguments or ""
    wall_ms = round(ms_since(t0), 1)
    details = usage.prompt_tokens_details if usage is not None else None
    reply = "".join(text)
    message: dict[str, Any] = {"role": "assistant", "content": reply}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    record = RequestRecord(
        step.label, step.turn, ttft_ms, wall_ms, usage.prompt_tokens if usage is not None else None,
        details.cached_tokens if details is not None else None, usage.completion_tokens if usage is not None else None,
        reply, len(calls), extension)
    return record, message


def _turn_messages(workload: ApiWorkload, agent: Agent, turn: int, reply: dict) -> list[dict]:
    """The reply, and an answer to each tool call it made: a conversation that goes on
    after a tool call answers it first, as an agent does."""
    results = [{"role": "tool", "tool_call_id": call["id"],
                "content": workload.tool_result(agent, turn, index, call["function"]["name"])}
               for index, call in enumerate(reply.get("tool_calls", ()))]
    return [reply, *results]


def _run_server(name: str, workload: ApiWorkload, settings: ApiBenchSettings, progress: Progress, done: int,
                total: int) -> ServerRun:
    import openai

    steps = workload.steps()
    with tempfile.TemporaryDirectory(prefix=f"effctx-bench-api-{name}-") as folder:
        port = free_port()  # kept across restarts: the client is configured once, as a user's is
        states = Path(folder) / "states"
        states.mkdir()
        command, env = launch(name, settings, port, states)
        server = _ServerProcess(name, command, env, Path(folder) / "server.log", port, settings.ready_timeout_s)
        ready: list[float] = []
        records: list[RequestRecord] = []
        conversations = [[{"role": "system", "content": workload.system_prompt(agent)}] for agent in workload.agents]
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="effctx-bench", max_retries=0,
                               timeout=_REQUEST_TIMEOUT_S)
        try:
            progress(f"{name}: starting", done, total)
            ready.append(server.start())
            try:
                model = client.models.list().data[0].id
            except (openai.APIError, IndexError) as exc:
                raise EffctxError(f"{name} names no model at GET /v1/models: {_one_line(str(exc))}") from None
            for index, step in enumerate(steps):
                if settings.restart and index:
                    progress(f"{name}: restarting before {step.label}", done + index, total)
                    server.stop()
                    ready.append(server.start())
                agent = workload.agents[step.agent]
                progress(f"{name}: {step.label} ({agent.name}, turn {step.turn})", done + index, total)
                messages = conversations[step.agent]
                messages.append({"role": "user", "content": workload.user_message(agent, step.turn)})
                t0 = time.perf_counter_ns()
                try:
                    record, reply = _send(client, model, messages, agent.tools, workload.max_tokens, step)
                except openai.APIError as exc:  # a stream cut short too: the SDK wraps transport errors
                    code = server.exit_code()
                    if code is not None:
                        raise EffctxError(f"{name} exited ({code}) during request {step.label}: {server.tail()}") from None
                    records.append(RequestRecord(step.label, step.turn, None, round(ms_since(t0), 1), None, None,
                                                 None, "", 0, error=_one_line(str(exc))))
                    continue
                records.append(record)
                messages += _turn_messages(workload, agent, step.turn, reply)
        finally:
            server.stop()
    return ServerRun(name, tuple(command), tuple(ready), tuple(records))


def run_api_bench(workload: ApiWorkload, servers: Sequence[str], settings: ApiBenchSettings,
                  progress: Progress = lambda message, done, total: None) -> ApiBenchReport:
    try:
        import openai  # noqa: F401 - checked before any server starts
    except ImportError:
        raise EffctxError("effctx bench api sends its requests with the openai client, which is not installed "
                          "(pip install 'effctx[bench]')") from None
    steps = len(workload.steps())
    runs = []
    for number, name in enumerate(servers):
        runs.append(_run_server(name, workload, settings, progress, number * steps, len(servers) * steps))
    progress("done", len(servers) * steps, len(servers) * steps)
    return ApiBenchReport(workload.name, workload.description, str(settings.model), settings.profile, settings.n_ctx,
                          settings.threads, workload.turns, workload.max_tokens, settings.restart, tuple(runs))


# --------------------------------------------------------------------------- the report


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _cached(record: RequestRecord) -> str:
    if record.error is not None:
        return "error"
    if record.cached_tokens is None:
        return "–"
    return f"{record.cached_tokens:,}/{record.prompt_tokens or 0:,}"  # usage has both, or neither


def _ratio(theirs: float | None, mine: float | None) -> str:
    return "–" if theirs is None or not mine else f"{theirs / mine:.2f}x"


def _mean_ttft(records: Sequence[RequestRecord]) -> float | None:
    times = [r.ttft_ms for r in records if r.ttft_ms is not None]
    return statistics.fmean(times) if times else None


def _cached_sum(records: Sequence[RequestRecord]) -> str:
    reported = [r for r in records if r.cached_tokens is not None]
    if not reported:
        return "–"
    return f"{sum(r.cached_tokens or 0 for r in reported):,}/{sum(r.prompt_tokens or 0 for r in reported):,}"


def table_columns(report: ApiBenchReport) -> list[str]:
    """The request, each server's TTFT and cached/prompt tokens, then each other server's
    TTFT over the first server's (above 1: the first is faster)."""
    columns = ["request"]
    for run in report.runs:
        columns += [f"{run.server} TTFT", f"{run.server} cached"]
    first = report.runs[0].server
    return columns + [f"{run.server}/{first}" for run in report.runs[1:]]


def table_rows(report: ApiBenchReport) -> list[list[str]]:
    """One row a request, then the mean TTFT and summed tokens of the first turns (the
    conversations' system prompts computed) and of the later ones."""
    rows = []
    first = report.runs[0]
    for index, record in enumerate(first.requests):
        row = [record.label]
        for run in report.runs:
            theirs = run.requests[index]
            row += ["error" if theirs.error is not None else _ms(theirs.ttft_ms), _cached(theirs)]
        rows.append(row + [_ratio(run.requests[index].ttft_ms, record.ttft_ms) for run in report.runs[1:]])
    for name, later in (("first turns", False), ("later turns", True)):
        groups = [[r for r in run.requests if (r.turn > 1) == later] for run in report.runs]
        if not groups[0]:
            continue
        row = [name]
        for group in groups:
            row += [_ms(_mean_ttft(group)), _cached_sum(group)]
        rows.append(row + [_ratio(_mean_ttft(group), _mean_ttft(groups[0])) for group in groups[1:]])
    return rows


def api_table(report: ApiBenchReport):
    from rich.table import Table

    restart = ", restarted before every request" if report.restart else ""
    table = Table(title=f"{report.workload}, {report.turns} turns a conversation{restart}: TTFT in ms",
                  title_justify="left")
    for index, column in enumerate(table_columns(report)):
        table.add_column(column, justify="left" if index == 0 else "right")
    rows = table_rows(report)
    for number, row in enumerate(rows):
        table.add_row(*row, end_section=number == len(report.runs[0].requests) - 1)
    return table


def summary_lines(report: ApiBenchReport) -> list[str]:
    lines = ["cached: cached/prompt tokens as the server reports them (–: it reports none); each server builds its "
             "prompt with its own chat template. First turns, later turns: mean TTFT, summed tokens"]
    if len(report.runs) > 1:
        lines.append(f"X/{report.runs[0].server}: X's TTFT over {report.runs[0].server}'s (above 1: "
                     f"{report.runs[0].server} is faster)")
    for run in report.runs:
        starts = f"{len(run.ready_ms)} starts, ready in {_ms(statistics.fmean(run.ready_ms))} ms on average" \
            if len(run.ready_ms) > 1 else f"ready in {_ms(run.ready_ms[0])} ms" if run.ready_ms else "not started"
        tools = sum(r.tool_calls for r in run.requests)
        lines.append(f"{run.server}: {starts}; {tools} tool call{'' if tools == 1 else 's'} in "
                     f"{len(run.requests)} replies")
        lines += [f"{run.server}: {r.label} failed: {r.error}" for r in run.requests if r.error is not None]
    return lines
