"""`effctx bench api`: its workloads are the same text on every run and have the shape they
advertise; its table reads recorded results; bad names end in one line; and a real run
against llama-server on the tiny model fills every record."""

from __future__ import annotations

from dataclasses import replace

import pytest

from effctx_core.backends.llama_cpp_build import find_build
from effctx_core.bench.api_run import (
    ApiBenchReport,
    ApiBenchSettings,
    RequestRecord,
    ServerRun,
    run_api_bench,
    table_columns,
    table_rows,
)
from effctx_core.bench.api_workload import estimated_tokens, load_api_workload
from effctx_core.cli.main import run_command
from tests.helpers.tiny_gguf import write_tiny_llama_gguf


def tool_names(agent) -> set[str]:
    return {tool["function"]["name"] for tool in agent.tools}


def test_a_workload_is_the_same_text_every_time():
    first, again = load_api_workload("many-agents"), load_api_workload("many-agents")
    for a, b in zip(first.agents, again.agents):
        assert first.system_prompt(a) == again.system_prompt(b)
        assert [first.user_message(a, turn) for turn in (1, 2)] == [again.user_message(b, turn) for turn in (1, 2)]
        assert first.tool_result(a, 1, 0, "x") == again.tool_result(b, 1, 0, "x")


def test_two_agents_have_their_own_prompts_and_tools_and_take_turns():
    workload = load_api_workload("two-agents")
    a, b = workload.agents
    prompts = [workload.system_prompt(agent) for agent in (a, b)]
    # About 1,500 tokens of the default model each (the estimate is within 3% of its tokenizer).
    assert all(1_400 < estimated_tokens(prompt) < 1_600 for prompt in prompts)
    assert prompts[0][:40] != prompts[1][:40]  # no shared prefix beyond the chat template's
    assert len(tool_names(a)) >= 3 and not tool_names(a) & tool_names(b)
    assert all(tool["type"] == "function" and tool["function"]["parameters"]["type"] == "object"
               for tool in a.tools + b.tools)
    assert [step.label for step in workload.steps()] == ["A1", "B1", "A2", "B2", "A3", "B3"]
    assert workload.user_message(a, 1) != workload.user_message(a, 2)
    assert workload.max_tokens == 16


def test_many_agents_go_round_robin_over_more_than_the_context_holds():
    workload = load_api_workload("many-agents")
    assert len(workload.agents) == 8 and len({frozenset(tool_names(agent)) for agent in workload.agents}) == 8
    assert [step.label for step in workload.steps()][:9] == ["A1", "B1", "C1", "D1", "E1", "F1", "G1", "H1", "A2"]
    # The system prompts alone fill the default profile's 4,096-token context twice over.
    assert sum(estimated_tokens(workload.system_prompt(agent)) for agent in workload.agents) > 2 * 4_096


def record(label: str, ttft: float | None, cached: int | None, prompt: int | None, error: str | None = None):
    return RequestRecord(label, int(label[1:]), ttft, (ttft or 0) + 50, prompt, cached, 16 if prompt else None, "hi", 0,
                         error=error)


def test_the_table_sets_each_request_beside_the_first_server():
    runs = (
        ServerRun("effctx", ("effctx", "api"), (900.0,), (record("A1", 400, 0, 1_600), record("A2", 50, 1_600, 1_700))),
        ServerRun("llama-server", ("llama-server",), (800.0,),
                  (record("A1", 500, 0, 1_590), record("A2", None, None, None, error="400: too long"))),
        ServerRun("llama-cpp-python", ("python",), (700.0,), (record("A1", 800, None, None), record("A2", 100, None, None))),
    )
    report = ApiBenchReport("two-agents", "d", "m.gguf", "exact", 4096, 2, 2, 16, False, runs)
    assert table_columns(report) == ["request", "effctx TTFT", "effctx cached", "llama-server TTFT", "llama-server cached",
                                     "llama-cpp-python TTFT", "llama-cpp-python cached", "llama-server/effctx",
                                     "llama-cpp-python/effctx"]
    assert table_rows(report) == [
        ["A1", "400", "0/1,600", "500", "0/1,590", "800", "–", "1.25x", "2.00x"],
        ["A2", "50", "1,600/1,700", "error", "error", "100", "–", "–", "2.00x"],
        ["first turns", "400", "0/1,600", "500", "0/1,590", "800", "–", "1.25x", "2.00x"],
        ["later turns", "50", "1,600/1,700", "–", "–", "100", "–", "–", "2.00x"],
    ]


@pytest.mark.parametrize("argv, message", [
    (["bench", "api", "three-agents"], "unknown workload 'three-agents' (built in: many-agents, two-agents)"),
    (["bench", "api", "two-agents", "--servers", "effctx,vllm"], "unknown server 'vllm' in --servers"),
    (["bench", "api", "two-agents", "--servers", "llama-server,llama-server"], "names a server twice"),
])
def test_a_bad_name_is_one_line_and_exit_2(argv, message, capsys):
    assert run_command(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("effctx: error: ") and message in err


@pytest.mark.model
@pytest.mark.skipif(find_build() is None, reason="llama-server is not built here (effctx runtime build)")
def test_two_turns_against_llama_server_fill_every_record(tmp_path):
    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf", n_ctx_train=4096)
    # Shorter prompts: the tiny vocabulary spells much of this text in bytes.
    workload = replace(load_api_workload("two-agents"), turns=2, max_tokens=4, system_tokens=300)
    report = run_api_bench(workload, ["llama-server"], ApiBenchSettings(tiny, "exact", 4096, 1))
    (run,) = report.runs
    assert len(run.ready_ms) == 1 and run.ready_ms[0] > 0
    assert [r.label for r in run.requests] == ["A1", "B1", "A2", "B2"]
    assert all(r.error is None and r.ttft_ms and r.ttft_ms > 0 and r.prompt_tokens for r in run.requests)
    # The second turn of each conversation finds the first one's prompt in the server's cache.
    assert all(r.cached_tokens for r in run.requests[2:])
