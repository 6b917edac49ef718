"""Benchmark workloads: the five built-in data files, their sizes for the default model, the
loader's inheritance and edits, and a one-line error for every kind of bad file."""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources

import pytest

from effctx_core.backends.gguf.runtime import load_model
from effctx_core.bench.workloads import (
    Edit,
    Framing,
    Turn,
    Workload,
    WorkloadError,
    load_workload,
    workload_names,
)
from effctx_core.profiles import DEFAULT_PROFILE

BUILT_IN = ["agent-loop", "branching", "long-decode", "long-document", "prefix-edit"]

# The smallest valid workload; cases below add to it or change one line of it.
VALID = 'description = "d"\nprefix = "The prefix."\n\n[[turns]]\nrole = "user"\ntext = "Hi."\nmax_tokens = 8\n'


@pytest.fixture(scope="module")
def count(default_model):
    """Tokens of a text for the default model, as the engine would prefill it (no BOS)."""
    model = load_model(default_model, vocab_only=True)
    return lambda text: len(model.tokenize(text, False))


def write(tmp_path, text: str, name: str = "w.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(path) -> str:
    with pytest.raises(WorkloadError) as caught:
        load_workload(str(path))
    return str(caught.value)


# --------------------------------------------------------------------------- the built-ins


def test_the_built_in_workloads_are_the_five_benchmarks():
    assert workload_names() == BUILT_IN


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_built_in_workload_loads_under_its_own_name(name):
    workload = load_workload(name)
    assert (workload.name, workload.source) == (name, "built-in")


def test_the_agent_loop_prefix_is_1400_to_1700_tokens(count):
    assert 1400 <= count(load_workload("agent-loop").prefix) <= 1700


def test_the_agent_loop_moves_between_user_messages_and_tool_results():
    roles = [t.role for t in load_workload("agent-loop").turns]
    assert roles == ["user", "tool", "tool", "user", "tool", "tool", "tool", "user"]


def test_every_agent_loop_turn_is_100_to_600_tokens_with_a_64_token_reply(count):
    turns = load_workload("agent-loop").turns
    assert [(100 <= count(t.text.strip()) <= 600, t.max_tokens) for t in turns] == [(True, 64)] * 8


def test_the_agent_loop_tool_definitions_are_json_schemas_with_their_own_names():
    prefix = load_workload("agent-loop").prefix
    tools = re.findall(r"^([a-z_]+)\n(\{\n.*?\n\})$", prefix, flags=re.S | re.M)
    assert [(name, json.loads(schema)["name"]) for name, schema in tools] == [
        (name, name) for name in ("read_file", "write_file", "run_tests", "grep", "list_dir", "git_diff")
    ]


def test_the_long_document_prefix_is_3700_to_4300_tokens(count):
    assert 3700 <= count(load_workload("long-document").prefix) <= 4300


def test_the_long_document_asks_three_questions_with_32_token_replies_and_answers():
    turns = load_workload("long-document").turns
    assert [(t.role, t.max_tokens, bool(t.expect)) for t in turns] == [("user", 32, True)] * 3


def test_each_long_document_answer_is_stated_once_in_the_document_and_not_in_its_question():
    workload = load_workload("long-document")
    assert [(workload.prefix.count(t.expect[0]), any(e.casefold() in t.text.casefold() for e in t.expect))
            for t in workload.turns] == [(1, False)] * 3


def test_the_long_decode_prefix_is_950_to_1100_tokens(count):
    assert 950 <= count(load_workload("long-decode").prefix) <= 1100


def test_the_long_decode_asks_once_for_a_512_token_reply():
    assert [(t.role, t.max_tokens) for t in load_workload("long-decode").turns] == [("user", 512)]


def test_the_branching_workload_forks_two_ways_after_turn_3():
    workload = load_workload("branching")
    assert (workload.branch_after, [b.name for b in workload.branches]) == (3, ["retry-tests", "inspect-diff"])


def test_every_branch_turn_is_100_to_300_tokens_with_a_64_token_reply(count):
    turns = [t for b in load_workload("branching").branches for t in b.turns]
    assert [(100 <= count(t.text.strip()) <= 300, t.max_tokens) for t in turns] == [(True, 64)] * 4


def test_the_prefix_edit_changes_one_word_before_turn_4():
    workload = load_workload("prefix-edit")
    assert workload.edit is not None
    before, after = workload.prefix.split(), workload.edit.apply(workload.prefix).split()
    assert (workload.edit.before_turn, len(after)) == (4, len(before))
    assert [(a, b) for a, b in zip(before, after) if a != b] == [("3.11", "3.12")]


def test_the_prefix_edit_sits_in_the_middle_third_of_the_prefix(count):
    workload = load_workload("prefix-edit")
    assert workload.edit is not None
    at = count(workload.prefix[: workload.prefix.index(workload.edit.find)])
    assert 1 / 3 <= at / count(workload.prefix) <= 2 / 3


@pytest.mark.parametrize("name", ["prefix-edit", "branching"])
def test_a_workload_with_a_base_inherits_its_prefix_turns_and_framing(name):
    base, workload = load_workload("agent-loop"), load_workload(name)
    assert (workload.prefix, workload.turns, workload.framing) == (base.prefix, base.turns, base.framing)


def paths(workload: Workload) -> list[tuple]:
    """Every run of turns that one session holds at once: the main line, and each branch
    after the turns it restores."""
    shared = workload.turns[: workload.branch_after or 0]
    return [workload.turns] + [shared + b.turns for b in workload.branches]


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_built_in_fits_the_default_context_with_every_reply_at_its_full_budget(count, name):
    workload = load_workload(name)
    longest = max(1 + count(workload.prefix + "".join(workload.framing.render(t) for t in turns))
                  + sum(t.max_tokens for t in turns) for turns in paths(workload))
    assert longest <= DEFAULT_PROFILE.n_ctx


def test_the_digest_of_a_built_in_is_the_sha256_of_its_file():
    data = (resources.files("effctx_core.bench.workloads") / "long-decode.toml").read_bytes()
    assert load_workload("long-decode").digest == hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- files and records


def test_a_workload_file_is_named_after_its_file_and_records_its_path_and_digest(tmp_path):
    path = write(tmp_path, VALID, "mine.toml")
    workload = load_workload(str(path))
    assert (workload.name, workload.source, workload.digest) == (
        "mine", str(path), hashlib.sha256(VALID.encode()).hexdigest())


def test_a_file_that_sets_turns_over_a_base_keeps_the_base_prefix_and_its_own_turns(tmp_path):
    path = write(tmp_path, 'base = "agent-loop"\ndescription = "d"\n[[turns]]\nrole = "user"\ntext = "Go."\nmax_tokens = 5\n')
    workload = load_workload(str(path))
    assert (workload.prefix, workload.turns) == (load_workload("agent-loop").prefix, (Turn("user", "Go.", 5),))


def test_the_prefix_loses_its_surrounding_whitespace_because_the_framing_supplies_separators(tmp_path):
    path = write(tmp_path, VALID.replace('"The prefix."', '"""\nThe prefix.\n"""'))
    assert load_workload(str(path)).prefix == "The prefix."


def test_a_file_without_framing_gets_the_default_framing(tmp_path):
    assert load_workload(str(write(tmp_path, VALID))).framing == Framing()


def test_the_framing_renders_a_turn_between_its_role_opening_and_the_assistant_cue():
    framing = Framing(user="<u>", tool="<t>", assistant="<a>")
    assert [framing.render(Turn(role, "  hello \n", 8)) for role in ("user", "tool")] == ["<u>hello<a>", "<t>hello<a>"]


def test_a_reply_is_correct_when_it_contains_an_expected_answer_in_any_case():
    turn = Turn("user", "Name?", 8, expect=("KESTREL-7",))
    assert [turn.is_correct(r) for r in (" It is kestrel-7.", " It is KESTREL.")] == [True, False]


def test_one_caseless_answer_rule_for_workload_replies():
    # casefold, not lower: "STRASSE".lower() is not in "straße".lower(), but the two fold alike.
    turn = Turn("user", "Street?", 8, expect=("STRASSE",))
    assert [turn.is_correct(r) for r in ("Die Straße.", "die strasse", "Die Gasse.")] == [True, True, False]
    # The workload runner grades every turn by the same rule; a turn that asks nothing is not graded.
    assert [turn.grade(r) for r in ("Die Straße.", "Die Gasse.")] == [True, False]
    assert Turn("user", "Go on.", 8).grade("Die Straße.") is None


def test_an_edit_applied_to_a_prefix_without_its_text_fails():
    with pytest.raises(WorkloadError, match=r"^edit.find must occur exactly once in the prefix \(found 0 times\)$"):
        Edit(before_turn=1, find="absent", replace="x").apply("The prefix.")


# --------------------------------------------------------------------------- bad input


def test_an_unknown_built_in_name_lists_the_built_ins():
    with pytest.raises(WorkloadError) as caught:
        load_workload("agnet-loop")
    assert str(caught.value) == (
        "unknown workload 'agnet-loop' (built in: agent-loop, branching, long-decode, long-document, prefix-edit)")


def test_a_missing_file_is_named(tmp_path):
    assert error_of(tmp_path / "gone.toml") == f"workload file not found: {tmp_path / 'gone.toml'}"


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "w.toml"
    path.write_bytes(b'description = "\xff"\n')
    assert error_of(path) == f"workload {path}: not UTF-8 text"


def test_a_toml_syntax_error_is_one_line(tmp_path):
    path = write(tmp_path, 'description = "d"\nprefix = """unterminated\n')
    assert error_of(path) == f"workload {path}: not valid TOML: Unterminated string (at end of document)"


TURN = '[[turns]]\nrole = "user"\ntext = "Hi."\nmax_tokens = 8\n'
TOP = 'description = "d"\nprefix = "The prefix."\n'
BASED = 'base = "agent-loop"\ndescription = "d"\n'

BAD = {
    "unknown top-level field": (VALID.replace("prefix =", "preface ="), "unknown field 'preface'"),
    "unknown field in a turn": (VALID + "\n" + TURN.replace("max_tokens", "max_token"), "unknown field 'max_token' in turns[2]"),
    "unknown field in the edit": (BASED + '[edit]\nturn = 2\nbefore_turn = 2\nfind = "Tern"\nreplace = "Kite"\n', "unknown field 'turn' in [edit]"),
    "unknown field in the framing": (VALID + '[framing]\nsystem = "S: "\n', "unknown field 'system' in [framing]"),
    "missing description": (VALID.replace('description = "d"\n', ""), "missing field 'description'"),
    "missing description over a base": ('base = "agent-loop"\n', "missing field 'description'"),
    "missing prefix": (VALID.replace('prefix = "The prefix."\n', ""), "missing field 'prefix'"),
    "missing turns": (TOP, "missing field 'turns'"),
    "missing max_tokens": (VALID.replace("max_tokens = 8\n", ""), "missing field 'max_tokens' in turns[1]"),
    "max_tokens given as a string": (TOP + TURN * 2 + TURN.replace("8", '"64"'), 'turns[3].max_tokens must be a positive integer (got "64")'),
    "max_tokens above the limit": (VALID.replace("8", "4096"), "turns[1].max_tokens must be between 1 and 2048 (got 4096)"),
    "max_tokens of zero": (VALID.replace("8", "0"), "turns[1].max_tokens must be a positive integer (got 0)"),
    "max_tokens given as a boolean": (VALID.replace("8", "true"), "turns[1].max_tokens must be a positive integer (got true)"),
    "a role that is neither user nor tool": (VALID.replace('"user"', '"assistant"'), 'turns[1].role must be "user" or "tool" (got "assistant")'),
    "a prefix that is not a string": (VALID.replace('"The prefix."', "3"), "prefix must be a string (got 3)"),
    "an empty prefix": (VALID.replace('"The prefix."', '"  "'), "prefix must not be empty"),
    "an empty turn text": (VALID.replace('"Hi."', '""'), "turns[1].text must not be empty"),
    "turns that are not tables": (TOP + 'turns = ["Hi."]\n', "turns must be an array of tables ([[turns]])"),
    "no turns at all": (TOP + "turns = []\n", "turns must not be empty"),
    "expect that is one string": (VALID + 'expect = "KESTREL-7"\n', 'turns[1].expect must be an array of non-empty strings (got "KESTREL-7")'),
    "a stop that is not an array": (VALID + '[framing]\nstop = "User:"\n', 'framing.stop must be an array of non-empty strings (got "User:")'),
    "a framing that is not a table": (TOP + 'framing = "chat"\n' + TURN, "framing must be a table ([framing])"),
    "an unknown base": ('base = "agnet-loop"\ndescription = "d"\n', "base 'agnet-loop' is not a built-in workload (built in: agent-loop, branching, long-decode, long-document, prefix-edit)"),
    "an edit that is not a table": (BASED + 'edit = "Tern"\n', "edit must be a table ([edit])"),
    "an edit missing its replacement": (BASED + '[edit]\nbefore_turn = 2\nfind = "Tern"\n', "missing field 'replace' in [edit]"),
    "an edit whose text is not in the prefix": (BASED + '[edit]\nbefore_turn = 2\nfind = "Kestrel"\nreplace = "Kite"\n', "edit.find must occur exactly once in the prefix (found 0 times)"),
    "an edit whose text occurs twice": (BASED + '[edit]\nbefore_turn = 2\nfind = "read_file"\nreplace = "open_file"\n', "edit.find must occur exactly once in the prefix (found 2 times)"),
    "an edit that changes nothing": (BASED + '[edit]\nbefore_turn = 2\nfind = "Tern"\nreplace = "Tern"\n', "edit.replace must differ from edit.find"),
    "an edit before a turn past the last": (BASED + '[edit]\nbefore_turn = 9\nfind = "Tern"\nreplace = "Kite"\n', "edit.before_turn must be between 1 and 8 (got 9)"),
    "an edit before turn 0": (BASED + '[edit]\nbefore_turn = 0\nfind = "Tern"\nreplace = "Kite"\n', "edit.before_turn must be a positive integer (got 0)"),
    "branch_after past the last turn": (BASED + 'branch_after = 9\n[[branches]]\nname = "b"\n' + TURN.replace("[[turns]]", "[[branches.turns]]"), "branch_after must be between 1 and 8 (got 9)"),
    "branches without branch_after": (BASED + '[[branches]]\nname = "b"\n' + TURN.replace("[[turns]]", "[[branches.turns]]"), "[[branches]] need branch_after (the turn whose reply they restore)"),
    "branch_after without branches": (BASED + "branch_after = 3\n", "branch_after is set but there are no [[branches]]"),
    "a branch without turns": (BASED + 'branch_after = 3\n[[branches]]\nname = "b"\n', "missing field 'turns' in branches[1]"),
    "a bad turn inside a branch": (BASED + 'branch_after = 3\n[[branches]]\nname = "b"\n' + TURN.replace("[[turns]]", "[[branches.turns]]").replace('"user"', '"system"'), 'branches[1].turns[1].role must be "user" or "tool" (got "system")'),
    "two branches with one name": (BASED + "branch_after = 3\n" + ('[[branches]]\nname = "b"\n' + TURN.replace("[[turns]]", "[[branches.turns]]")) * 2, "branches[2].name 'b' is used twice"),
}


@pytest.mark.parametrize(("text", "message"), list(BAD.values()), ids=list(BAD))
def test_a_bad_workload_file_gives_a_one_line_error_naming_the_file_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    assert error_of(path) == f"workload {path}: {message}"


def test_the_digest_of_a_workload_with_a_base_covers_the_base_file_too():
    data = resources.files("effctx_core.bench.workloads").joinpath("prefix-edit.toml").read_bytes()
    base = load_workload("agent-loop").digest
    assert load_workload("prefix-edit").digest == hashlib.sha256(data + base.encode()).hexdigest()
