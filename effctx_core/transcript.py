"""How a conversation becomes text for the model.

The default model is a base model without a chat template, and llama-cpp-python's
fallback for such models ("llama-2") is wrong for it, so effctx writes a plain transcript.
"""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.contract import ModelFacts


@dataclass(frozen=True)
class ChatFormat:
    name: str
    user_prefix: str
    assistant_prefix: str
    stop: tuple[str, ...]

    @property
    def turn_opening(self) -> str:
        """How a user turn opens after a reply: what the model writes when it ends its
        reply by starting the next turn, so a reply that ends on exactly this keeps it."""
        return "\n" + self.user_prefix.rstrip()

    def render_turn(self, user_text: str, first: bool, opened: bool = False) -> str:
        """The text a new user turn adds to the tape, ending where the model writes;
        `opened`: the tape already ends with the turn's opening."""
        if opened:
            head = self.user_prefix[len(self.user_prefix.rstrip()):]
        else:
            head = ("" if first else "\n") + self.user_prefix
        return f"{head}{user_text.strip()}\n{self.assistant_prefix}"


PLAIN_TRANSCRIPT = ChatFormat(
    name="plain-transcript-v1",
    user_prefix="User: ",
    assistant_prefix="Assistant:",
    stop=("\nUser:",),
)


def chat_format_for(facts: ModelFacts) -> ChatFormat:
    # Models that carry a chat template get the plain transcript too until templates
    # are rendered; the identity names the format, so states never mix across formats.
    return PLAIN_TRANSCRIPT
