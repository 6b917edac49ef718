"""Where and why a request's prompt left its conversation's last request (diverge), on
the inputs the endpoint builds: the facts of each request (request_facts), the metrics
its node keeps (RequestFacts.metrics) and the earlier request found in the tree
(find_conversation). One token per character, so the tokens read as the text."""

from __future__ import annotations

import hashlib

from effctx_core.api.conversations import (
    Divergence,
    PromptSegment,
    diverge,
    find_conversation,
    message_hash,
    request_facts,
)
from effctx_core.snapshots.tree import SnapshotTree
from effctx_core.transcript import PLAIN_TRANSCRIPT
from tests.helpers.api_server import HERMES_CHATML

DIGEST = "0" * 64
# What the endpoint names a Jinja template by (api/prompt.py rendering_for).
CHATML = f"jinja-sha256:{hashlib.sha256(HERMES_CHATML.encode()).hexdigest()}"
HI = {"role": "user", "content": "Hi"}
REPLY = {"role": "assistant", "content": "Hello"}
NEXT = {"role": "user", "content": "Next"}


def rendered(*pieces: tuple[str, int | None, str | None, str]) -> tuple[list[int], list[PromptSegment]]:
    """A prompt as its format writes it, piece by piece (label, message index, role,
    text): its tokens and its segments."""
    tokens: list[int] = []
    segments = []
    for label, index, role, text in pieces:
        segments.append(PromptSegment(label, index, role, len(tokens), len(tokens) + len(text)))
        tokens += map(ord, text)
    return tokens, segments


def detokenize(tokens) -> str:
    return "".join(map(chr, tokens))


def test_a_request_written_in_another_template_is_a_template_change_from_one_to_the_other():
    # The first request, in the plain transcript (a base model's), and its reply, as the tree keeps them.
    tokens, segments = rendered(("message 0 (user)", 0, "user", "User: Hi\n"), ("generation prompt", None, None, "Assistant:"))
    earlier = request_facts([HI], [], PLAIN_TRANSCRIPT.identity, False, segments, None)
    tree = SnapshotTree()
    root = tree.add(None, (), "root", DIGEST)
    node = tree.add(root.id, [*tokens, *map(ord, " Hello")], "turn", DIGEST,
                    metrics=earlier.metrics("c1", "chatcmpl-1", message_hash(REPLY)))
    # The conversation sent on after the cell changed to a model with a ChatML template.
    tokens, segments = rendered(("message 0 (user)", 0, "user", "<|im_start|>user\nHi<|im_end|>\n"),
                                ("message 1 (assistant)", 1, "assistant", "<|im_start|>assistant\nHello<|im_end|>\n"),
                                ("message 2 (user)", 2, "user", "<|im_start|>user\nNext<|im_end|>\n"),
                                ("generation prompt", None, None, "<|im_start|>assistant\n"))
    facts = request_facts([HI, REPLY, NEXT], [], CHATML, False, segments, None)
    conversation, found = find_conversation(tree, facts, tokens)
    assert found is not None and (conversation, found.node.id) == ("c1", node.id)
    assert diverge(found, facts, tokens, tree, detokenize) == Divergence(
        "template_changed", 0, segments[0], 0, "User: Hi\nAss", "<|im_start|>", f"{PLAIN_TRANSCRIPT.identity} → {CHATML}",
        node.id)
