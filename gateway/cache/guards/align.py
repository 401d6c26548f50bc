"""The alignment guard: two questions hit only if their content words correspond one to one.

Word lists of antonyms always miss the next pair, so this check works the other way round:
it aligns the content words of the two questions (same word, same lemma, a derived form, or
a WordNet near-synonym in its dominant senses; see `synonyms`) and then

- a content word of either side that aligns with nothing is a difference: an added or
  dropped qualifier ("lose weight" / "lose weight without exercise") or a substitution
  ("encrypt" / "decrypt", "lend" / "borrow", "rice" / "quinoa");
- a WordNet antonym on the other side is an antonym;
- aligned words in another order are swapped roles ("the teacher grades the student" /
  "the student grades the teacher"), unless a joiner sits between them ("Java and Python")
  or one of them is an adverb, which moves freely ("quickly learn" / "learn quickly");
- a relational word replaced by another ("from" / "to", "above" / "below") is a difference;
- the kind of question must agree ("why" / "when" / "where" / "who", "how" / "why").

Linear in the number of words (a dictionary per text; greedy one-to-one matching over the
few unmatched words), and run only on texts the semantic tier may compare.
"""

# ruff: noqa: RUF001  (this module compares look-alike characters on purpose)
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from gateway.cache.guards.entities import _canon
from gateway.cache.guards.lexicons import _EN_NEGATIONS, _EN_STOP, _NUMBER_WORDS, _UNITS
from gateway.cache.guards.surface import fold_width
from gateway.cache.guards.synonyms import known, lemmas, relation
from gateway.cache.guards.words import _stem

__all__ = ["AlignFeatures", "align_features", "alignment"]

_TOKEN_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_ASCII_WORD_RE = re.compile(r"[a-z][a-z'’]*")
# Words that say how the others relate: replaced by another of the set, the question changes.
_RELATIONAL = frozenset(
    [
        "from",
        "to",
        "into",
        "onto",
        "toward",
        "towards",
        "out",
        "up",
        "down",
        "over",
        "under",
        "above",
        "below",
        "before",
        "after",
        "against",
        "between",
        "per",
        "via",
        "within",
        "inside",
        "outside",
        "since",
        "until",
        "off",
    ]
)
_JOINERS = frozenset({"and", "or", "vs", "versus", "nor", "between", "both", "either"})
_JOIN_MARKS = re.compile(r"[,/&、]")
# The kind of answer a question wants. "what" and "which" can ask anything ("what is the
# reason" = why), so only the others must agree; "how" differs from "why", "when", "where".
_QUESTION = {
    "why": "why",
    "when": "when",
    "where": "where",
    "who": "who",
    "whom": "who",
    "whose": "whose",
    "how": "how",
}
_FLEXIBLE = frozenset({"what", "which", "whats"})
_OPEN = frozenset({"open"})
_AUXILIARIES = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "am",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "has",
        "have",
        "had",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "don't",
        "doesn't",
        "didn't",
        "can't",
        "couldn't",
        "shouldn't",
        "wouldn't",
        "won't",
        "hasn't",
        "haven't",
    ]
)
_UNIT_WORDS = frozenset(w for spellings in _UNITS.values() for w in spellings if w.isalpha())
_NOT_CONTENT = (
    _EN_STOP
    | _RELATIONAL
    | _FLEXIBLE
    | _NUMBER_WORDS
    | _EN_NEGATIONS
    | _UNIT_WORDS
    | frozenset(
        [
            "whats",
            "hows",
            "whys",
            "wheres",
            "whos",
            "im",
            "ive",
            "id",
            "youre",
            "dont",
            "doesnt",
            "cant",
            "isnt",
            "hi",
            "hello",
            "hey",
            "thanks",
            "thank",
            "pls",
            "plz",
            "kindly",
            "also",
            "currently",
            "basically",
            "generally",
            "typically",
            "usually",
            "simply",
            "please",
            "ok",
            "okay",
        ]
    )
)


@dataclass(frozen=True, slots=True)
class AlignFeatures:
    words: tuple[str, ...]  # lowercase word tokens, in order (case and accents kept)
    content: tuple[int, ...]  # indexes of content words
    relational: frozenset[str]
    question: frozenset[str]
    joins: tuple[int, ...]  # word index after which a joiner comes (prefix counts)


@lru_cache(maxsize=16384)
def align_features(text: str, names: frozenset[str] = frozenset()) -> AlignFeatures:
    """The words of `text` as the alignment sees them: lowercased with str.lower (not
    casefold: "Maße" and "Masse" stay apart), width folded, accents and super/subscripts
    kept. `names`: words of named entities, which the entity check compares instead."""
    text = fold_width(text)
    words: list[str] = []
    join_after: list[int] = []
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        if _JOIN_MARKS.search(text, pos, m.start()):
            join_after.append(len(words))
        pos = m.end()
        w = m.group(0).lower().replace("’", "'")
        if w in _JOINERS:
            join_after.append(len(words))
        words.append(w)
    prefix, count = [], 0
    marks = set(join_after)
    for i in range(len(words) + 1):
        count += i in marks
        prefix.append(count)
    content = tuple(
        i for i, w in enumerate(words) if _is_content(w) and _canon(_stem(w)) not in names
    )
    return AlignFeatures(
        words=tuple(words),
        content=content,
        relational=frozenset(w for w in words if w in _RELATIONAL),
        question=_question_kind(words),
        joins=tuple(prefix),
    )


def _question_kind(words: list[str]) -> frozenset[str]:
    """The wh-words that set the kind of answer, or "yes-no" for a question that opens with
    an auxiliary ("Can Islam be reformed?" is not "How can Islam be reformed?")."""
    heads = [w.split("'")[0] for w in words]  # "how's" asks how
    kinds = frozenset(_QUESTION[w] for w in heads if w in _QUESTION)
    if kinds:
        return kinds
    if _FLEXIBLE.intersection(heads):
        return _OPEN
    if words and words[0] in _AUXILIARIES:
        return frozenset({"yes-no"})
    return frozenset()


def _is_content(word: str) -> bool:
    # Numbers and negations have guards of their own that compare them exactly.
    if word in _NOT_CONTENT or word.isdigit() or word.endswith("n't"):
        return False
    if word.endswith("'s"):
        return word[:-2] not in _NOT_CONTENT
    return not (len(word) == 1 and word.isascii())


def _key(word: str) -> str:
    return word[:-2] if word.endswith("'s") else word


def alignment(a: AlignFeatures, b: AlignFeatures) -> str | None:
    """Why the two questions are not the same question, or None when every content word
    has a counterpart, in the same order, and the relational and question words agree."""
    reason = _question(a, b) or _relational(a, b)
    if reason:
        return reason
    pairs, only_a, only_b = _match(a, b)
    for i in only_a:
        for j in only_b:
            if relation(_key(a.words[i]), _key(b.words[j])) == "antonym":
                return "antonym"
    if only_a and only_b:
        return "substitution"
    if only_a or only_b:
        return "qualifier"
    return _order(a, b, pairs)


def _question(a: AlignFeatures, b: AlignFeatures) -> str | None:
    if a.question == b.question:
        return None
    # "what is the best way to" asks what "how do I" asks, but not what "can I" asks.
    if a.question == _OPEN or b.question == _OPEN:
        return "question" if "yes-no" in a.question | b.question else None
    return "question"


def _relational(a: AlignFeatures, b: AlignFeatures) -> str | None:
    # One side's relation word missing from the other is often an infinitive "to" or an
    # elided "in"; one replaced by another is a different relation.
    if (a.relational - b.relational) and (b.relational - a.relational):
        return "relation"
    return None


def _match(
    a: AlignFeatures, b: AlignFeatures
) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Content words paired one to one: the same word, then the same lemma, then a derived
    form or a near-synonym. Returns the pairs and each side's unmatched words."""
    free_b: dict[str, list[int]] = {}
    for j in b.content:
        free_b.setdefault(_key(b.words[j]), []).append(j)
    pairs: list[tuple[int, int]] = []
    rest_a: list[int] = []
    for i in a.content:
        slots = free_b.get(_key(a.words[i]))
        if slots:
            pairs.append((i, slots.pop(0)))
        else:
            rest_a.append(i)
    rest_b = sorted(j for slots in free_b.values() for j in slots)
    if not rest_a or not rest_b:
        return pairs, rest_a, rest_b
    only_a: list[int] = []
    for i in rest_a:
        wa = _key(a.words[i])
        match = next((j for j in rest_b if _counterparts(wa, _key(b.words[j]))), None)
        if match is None:
            only_a.append(i)
        else:
            pairs.append((i, match))
            rest_b.remove(match)
    return sorted(pairs), only_a, rest_b


def _counterparts(a: str, b: str) -> bool:
    return relation(a, b) in ("same", "synonym", "derived") or is_typo(a, b)


def is_typo(a: str, b: str) -> bool:
    """One edit (insert, delete, replace or swap of neighbours) between a long word the
    dictionary knows and one it does not: "embarassing" for "embarrassing". Two real words
    one edit apart ("complement" / "compliment") are two words."""
    if min(len(a), len(b)) < 6 or abs(len(a) - len(b)) > 1 or known(a) == known(b):
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) < len(b):  # one letter inserted
        return a[i:] == b[i + 1 :]
    if a[i + 1 :] == b[i + 1 :]:  # one replaced
        return True
    return a[i + 2 :] == b[i + 2 :] and a[i : i + 2] == b[i : i + 2][::-1]  # neighbours swapped


def _order(a: AlignFeatures, b: AlignFeatures, pairs: list[tuple[int, int]]) -> str | None:
    """Two aligned words that trade places while the rest keeps its order: swapped roles
    ("the teacher grades the student" / "the student grades the teacher"). Not a swap: a
    phrase that moves ("physics books" / "books for physics": a rotation), words written
    side by side in either text (a compound turned around), words a joiner separates
    ("Java and Python"), adverbs, which move freely."""
    fixed = [(i, j) for i, j in pairs if not _movable(a.words[i])]
    order = [j for _, j in fixed]
    if order == sorted(order):
        return None
    ranked = sorted(order)
    wrong = [x for x, j in enumerate(order) if j != ranked[x]]
    if len(wrong) != 2:
        return None  # a move or a reshuffle, not two words trading places
    (i1, j1), (i2, j2) = fixed[wrong[0]], fixed[wrong[1]]
    if i2 - i1 == 1 or abs(j1 - j2) == 1:
        return None
    if a.joins[i2] != a.joins[i1] or b.joins[j1] != b.joins[j2]:
        return None
    return "order"


def _movable(word: str) -> bool:
    return len(word) > 4 and word.endswith("ly") and bool(lemmas(word) - {word})
