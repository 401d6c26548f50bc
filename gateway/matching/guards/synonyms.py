"""English word relations from WordNet 3.0: near-synonyms, derived forms and antonyms.

The alignment guard (`align`) lets a content word of one question stand for a different word
of the other only when WordNet says they are near-synonyms in their dominant senses ("fix" /
"repair", "car" / "automobile") or derived forms of one another ("develop" / "development").
An embedding cannot be the judge here: antonyms ("encrypt" / "decrypt", "lend" / "borrow")
sit as close in embedding space as synonyms do. The table is built by
scripts/build_synonyms.py (every single-word lemma, relations for about 58,000 of them)
and loaded on first use.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).parent / "data" / "en_wordnet.tsv.gz"

# Lemma candidates by suffix, tried in order (WordNet's own "morphy" detachment rules, plus
# the adjective and adverb forms): "cities" -> city, "running" -> run / running, "taken" ->
# take. Irregular forms not covered simply stay unmatched (a miss, never a wrong hit).
_DETACH: tuple[tuple[str, str], ...] = (
    ("ies", "y"),
    ("ves", "f"),
    ("ves", "fe"),
    ("ses", "sis"),
    ("ices", "ex"),
    ("ices", "ix"),
    ("i", "us"),
    ("a", "on"),
    ("ses", "s"),
    ("xes", "x"),
    ("zes", "z"),
    ("ches", "ch"),
    ("shes", "sh"),
    ("men", "man"),
    ("s", ""),
    ("ied", "y"),
    ("ed", "e"),
    ("ed", ""),
    ("ing", "e"),
    ("ing", ""),
    ("ier", "y"),
    ("iest", "y"),
    ("er", ""),
    ("est", ""),
    ("er", "e"),
    ("est", "e"),
    ("ily", "y"),
    ("ly", ""),
    ("en", "e"),
)


# Inflections (plural, third person, past, participles) and adverbs in -ly ("quickly" is
# quick): the endings that do not make another word of a word the dictionary knows.
_INFLECTIONS = tuple(
    rule for rule in _DETACH if rule[0] not in ("ier", "iest", "er", "est", "en", "i", "a")
)


@dataclass(frozen=True, slots=True)
class _Lexicon:
    relations: dict[str, str]  # word -> "synonyms<TAB>derived<TAB>antonyms", split on use
    words: frozenset[str]
    common: frozenset[str]  # words WordNet writes in lower case: not only names
    irregular: dict[str, str]  # "spoken" -> "speak": forms the suffix rules cannot undo


@lru_cache(maxsize=1)
def _load() -> _Lexicon:
    relations: dict[str, str] = {}
    words: list[str] = []
    common: list[str] = []
    irregular: dict[str, str] = {}
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        for line in f:
            word, rest = line.rstrip("\n").split("\t", 1)
            if word.startswith("="):
                irregular[word[1:]] = rest
                continue
            rel, _, flag = rest.rpartition("\t")
            words.append(word)
            if flag:
                common.append(word)
            if rel.strip("\t"):
                relations[word] = rel
    return _Lexicon(relations, frozenset(words), frozenset(common), irregular)


@lru_cache(maxsize=65536)
def lemmas(word: str) -> frozenset[str]:
    """The word and the dictionary forms it may be an inflection of."""
    lexicon = _load()
    # Derivational endings are undone only for words the dictionary does not know itself:
    # "faster" is fast, but "corner" is not corn and "better" is not bet.
    rules = _INFLECTIONS if word in lexicon.words else _DETACH
    found = {word} | {base for base in detach(word, rules) if base in lexicon.words}
    if word in lexicon.irregular:
        found.add(lexicon.irregular[word])
    return frozenset(found)


def detach(word: str, rules: tuple[tuple[str, str], ...] = ()) -> set[str]:
    """What the suffix rules make of a word, known to WordNet or not."""
    found = set()
    for suffix, replacement in rules or _DETACH:
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            base = word[: len(word) - len(suffix)] + replacement
            found.add(base)
            if len(base) > 2 and base[-1] == base[-2]:  # running -> runn -> run
                found.add(base[:-1])
    return found


@lru_cache(maxsize=65536)
def _relations(lemma: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    row = _load().relations.get(lemma)
    if row is None:
        return frozenset(), frozenset(), frozenset()
    parts = row.split("\t")
    syn, rel, ant = (frozenset(part.split(",")) if part else frozenset() for part in parts)
    return syn, rel, ant


def known(word: str) -> bool:
    """Whether the word (or a lemma of it) is an English word WordNet knows."""
    vocabulary = _load().words
    return any(lemma in vocabulary for lemma in lemmas(word))


def common(word: str) -> bool:
    """Whether the word is a common English word ("turkey", "sat"), not only a name."""
    vocabulary = _load().common
    return any(lemma in vocabulary for lemma in lemmas(word))


def relation(a: str, b: str) -> str | None:
    """How two different lowercase words relate: "same" (one lemma, "cities" / "city"),
    "synonym", "derived" ("develop" / "development"), "antonym", or None."""
    la, lb = lemmas(a), lemmas(b)
    if la & lb:
        return "same"
    kinds = [_kind(x, lb) for x in la]
    for kind in ("antonym", "synonym", "derived"):
        if kind in kinds:
            return kind
    return None


def _kind(lemma: str, others: frozenset[str]) -> str | None:
    syn, rel, ant = _relations(lemma)
    if ant & others:
        return "antonym"
    if syn & others:
        return "synonym"
    if rel & others:
        return "derived"
    return None
