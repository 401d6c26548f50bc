"""Answers that vary by nature: a verdict on them says nothing about the cache.

Two answers to "write a poem about the sea" differ however right the hit was, so a shadow
call's "different" there would count a right hit as wrong and raise the threshold (for the
tenant asking). Such hits are recognised three ways, cheapest first:

- the request asks for variety: an explicit `temperature` above VARYING_TEMPERATURE;
- the prompt asks for something made up (a poem, a story, a joke...): an English word list,
  read in the first CREATIVE_CHARS characters of the last user turn;
- the upstream disagrees with itself: when a verdict says "different", the verifier asks once
  more and compares the two fresh answers (verifier.py); if they differ too the prompt varies
  by nature, no verdict is kept, and the entry is remembered (`Varying`) so it costs no more
  shadow calls. At most one extra call per disagreeing verdict, from the same budgets.

The first two are decided before any call (no shadow call is made); all three are counted
under the shadow-call outcome `varies`.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

from gateway.wire import last_user_text

VARYING_TEMPERATURE = 0.8  # an explicit temperature above this asks for variety
CREATIVE_CHARS = 500  # how much of the last user turn the word list reads
MAX_VARYING_ENTRIES = 10_000  # entries remembered as varying (the oldest forgotten first)

_MAKE = r"(write|compose|tell|make up|create|generate|come up with|give me|invent|imagine|draft)"
_MADE = (
    r"(poem|poems|poetry|haiku|limerick|sonnet|verse|verses|lyrics|song|rap|story|stories|"
    r"tale|fable|joke|jokes|pun|puns|riddle|slogan|tagline|names? for|fiction|rhyme)"
)
_CREATIVE = re.compile(rf"\b{_MAKE}\b.*?\b{_MADE}\b", re.IGNORECASE | re.DOTALL)


def varies(body: dict[str, Any]) -> str | None:
    """Why this request's answers vary by nature ("temperature", "creative"), or None."""
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and temperature > VARYING_TEMPERATURE:
        return "temperature"
    text = last_user_text(body)
    if text and _CREATIVE.search(text[:CREATIVE_CHARS]):
        return "creative"
    return None


class Varying:
    """Entries whose answers were seen to disagree with themselves (two fresh answers to one
    question): not verified again. Bounded; this process's only."""

    def __init__(self, size: int = MAX_VARYING_ENTRIES) -> None:
        self._size = size
        self._entries: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, entry: str) -> bool:
        return entry in self._entries

    def add(self, entry: str) -> None:
        self._entries[entry] = None
        self._entries.move_to_end(entry)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
