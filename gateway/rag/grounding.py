"""Level 1: retrieved passages go into the prompt as numbered sources the model must cite, and
come back to the client with the answer."""

from __future__ import annotations

from typing import Any

from gateway.context import RequestContext
from gateway.rag.base import Passage
from gateway.reply.stage import Stage

Json = dict[str, Any]

INSTRUCTION = (
    "Answer the user's question from the numbered sources below. Cite the sources you use in "
    "square brackets, like [1] or [2][3]. If the sources do not contain the answer, say so "
    "rather than guessing. Answer in the language of the question."
)


def grounded_messages(messages: list[Any], passages: list[Passage]) -> list[Any]:
    """The messages with a sources message after the app's own system prompt, so the app's
    instructions still come first."""
    blocks = []
    for number, passage in enumerate(passages, 1):
        label = passage.source + (f" - {passage.title}" if passage.title else "")
        blocks.append(f"[{number}] ({label})\n{passage.text.strip()}")
    sources = {"role": "system", "content": INSTRUCTION + "\n\nSources:\n\n" + "\n\n".join(blocks)}
    head = 0
    while (
        head < len(messages)
        and isinstance(messages[head], dict)
        and messages[head].get("role") in ("system", "developer")
    ):
        head += 1
    return [*messages[:head], sources, *messages[head:]]


def sources_field(passages: list[Passage]) -> list[Json]:
    """The `sources` the client receives beside the answer; `index` is the citation number."""
    return [
        {
            "index": number,
            "source": passage.source,
            "title": passage.title,
            "score": round(passage.score, 4),
            "text": passage.text,
        }
        for number, passage in enumerate(passages, 1)
    ]


class Sources(Stage):
    """The sources beside a grounded answer (a stream: in its first chunk)."""

    def __init__(self, ctx: RequestContext, passages: list[Passage]) -> None:
        self._ctx = ctx
        self._count = len(passages)
        self._sources = sources_field(passages)

    async def answer(self, completion: Json) -> Json:
        self._ctx.sources = self._count
        return {**completion, "sources": self._sources}

    def opening(self, first: list[Json]) -> list[Json]:
        self._ctx.sources = self._count
        if first:
            first[0].update({"sources": self._sources})
        return first
