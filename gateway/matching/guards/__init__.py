"""The hit decision's lexical checks: the vetoes, and the word rules.

Sentence embeddings put "weather in Paris" and "weather in London", or "how do I enable X"
and "how do I not enable X", very close together, yet each needs its own answer. These checks
run on the top candidate *after* the similarity threshold: they compare the small facts that
an answer depends on (numbers, units, dates, negation, named entities, code identifiers) and
veto the hit when one differs. Pure Python with precompiled patterns and a per-text feature
cache, so a check costs tens of microseconds; no model, no data files. The lexicons are short,
hand-written lists of common names; an entity they miss is still caught by capitalization
(English) or by a character diff (Chinese).

Precision comes first: when unsure, a guard fires and the request goes upstream, which costs
one model call; a wrong hit serves a wrong answer.

Modules: `lexicons` (word lists) and `patterns` (compiled regexes) are data; `words`,
`numbers`, `dates` and `entities` extract facts from one text; `features` gathers them per
text behind an LRU cache; `compare` holds `vetoes`, `lexical_reasons`, `near_miss` (both)
and `content_difference`.
"""

from __future__ import annotations

from gateway.matching.guards.compare import MAX_COMPARED_CHARS, content_difference, near_miss
from gateway.matching.guards.features import _features as _features

__all__ = ["MAX_COMPARED_CHARS", "content_difference", "near_miss"]
