"""How a conversation becomes text for the model.

The default model is a base model without a chat template, and llama-cpp-python's
fallback for such models ("llama-2") is wrong for it, so effctx writes a plain transcript.
"""

from __future__ import annotations

from dataclasses import dataclass

from .contract import ModelFacts


@dataclass(frozen=True)
class ChatFormat:
    name: str
    user_prefix: str
    assistant_prefix: str
    stop: tuple[str, ...]

    def render_turn(self, user_text: str, first: bool) -> str:
        """The text a new user turn adds to the tape, ending where the model writes."""
        lead = "" if first else "\n"
        return f"{lead}{self.user_prefix}{user_text.strip()}\n{self.assistant_prefix}"


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
