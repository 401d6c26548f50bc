"""The units that texts are compared in: lightly stemmed English words and Chinese diff units.

`_stem` folds case, accents, possessives and plurals so that "cities" and "city" match;
`_zh_diff_units` turns Chinese text into the character sequence the Chinese diff runs on.
Shared by entity detection, feature extraction and the comparisons.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from gateway.matching.guards.lexicons import _ZH_NUM_CHARS, _ZH_QUESTIONS
from gateway.matching.guards.patterns import _ZH_DIFF_UNIT_RE


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    word = word.casefold()
    if not word.isascii():
        word = "".join(c for c in unicodedata.normalize("NFKD", word) if c.isascii())
    if word.endswith("'s"):
        word = word[:-2]
    if not word.isalpha():  # c++, node.js, don't: compare as written
        return word
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _zh_diff_units(low: str) -> tuple[str, ...]:
    """The sequence the Chinese diff runs on: CJK characters and ASCII words, without
    numerals (the number check owns those) and without question-word synonyms."""
    for q in _ZH_QUESTIONS:
        low = low.replace(q, " ")
    return tuple(u for u in _ZH_DIFF_UNIT_RE.findall(low) if u not in _ZH_NUM_CHARS)
