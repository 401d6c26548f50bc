"""Questions no two alike, for load that must miss the cache: pseudo-words drawn at random plus
a counter, so no two share a text (not even the hash embedder's character 3-grams line up)."""

from __future__ import annotations

import random

SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "fe", "gi", "hu")


class UniqueQuestions:
    """`template` filled with `words` pseudo-words ({words}) and the question's number ({n})."""

    def __init__(
        self,
        seed: int,
        template: str = "Tell me about {words} (request {n}).",
        words: int = 8,
        vocabulary: int = 3000,
    ) -> None:
        self._rng = rng = random.Random(seed)
        self._vocabulary = ["".join(rng.choices(SYLLABLES, k=3)) for _ in range(vocabulary)]
        self._template, self._words = template, words
        self.count = 0

    def next(self) -> str:
        self.count += 1
        words = " ".join(self._rng.choices(self._vocabulary, k=self._words))
        return self._template.format(words=words, n=self.count)
