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
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from gateway.matching.guards.entities import _canon
from gateway.matching.guards.lexicons import _EN_NEGATIONS, _EN_STOP, _NUMBER_WORDS, _UNITS
from gateway.matching.guards.reorder import reordering
from gateway.matching.guards.surface import fold_width
from gateway.matching.guards.synonyms import detach, known, relation
from gateway.matching.guards.words import _stem

__all__ = ["AlignFeatures", "align_features", "alignment", "alignment_reasons"]

_TOKEN_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
# Words that say how the others relate: replaced by another of the set, the question changes.
_RELATIONAL = frozenset(
    [
        "from",
        "to",
        "in",
        "into",
        "onto",
        "than",
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
_PRONOUN_CASES = (("i", "me"), ("we", "us"), ("he", "him"), ("they", "them"))
_POSSESSIVES = frozenset({"my", "your", "his", "her", "their", "our", "its"})
_OPEN = frozenset({"open"})
_OPEN_OBJECT = frozenset({"open", "object"})
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
# Words that take part in word order (who does what to whom) but whose absence on one side
# changes nothing ("Chinese people" / "Chinese").
_LIGHT = frozenset(
    [
        "people",
        "person",
        "persons",
        "someone",
        "somebody",
        "anyone",
        "anybody",
        "everyone",
        "everybody",
        "others",
        "other",
        "thing",
        "things",
        "way",
        "ways",
        "lot",
    ]
)
_MAX_SYNONYM_TRIES = 256
# Relation words that say the same relation ("convert X to Y" / "into Y").
_RELATION_CLASS = {
    "into": "to",
    "onto": "to",
    "toward": "to",
    "towards": "to",
    "inside": "in",
    "within": "in",
    "outside": "out",
    "above": "over",
    "below": "under",
}
_CONTRACTION_RE = re.compile(r"'(?:ll|re|ve|d|m)$")
_PREAMBLE_RE = re.compile(r"\s*([^,:;!?.]{1,60}?)(?:[,:;!]|\s[-–—]\s|\bbut\b)\s*")
_PREAMBLE_WORDS = frozenset(
    [
        "quick",
        "question",
        "questions",
        "just",
        "curious",
        "i",
        "was",
        "am",
        "wondering",
        "thanks",
        "thank",
        "you",
        "in",
        "advance",
        "sorry",
        "if",
        "this",
        "is",
        "a",
        "dumb",
        "silly",
        "stupid",
        "hi",
        "hello",
        "hey",
        "there",
        "all",
        "everyone",
        "guys",
        "ok",
        "okay",
        "so",
        "please",
    ]
)
_MAKING_VERBS = frozenset(
    [
        "write",
        "draft",
        "compose",
        "create",
        "generate",
        "make",
        "draw",
        "translate",
        "summarize",
        "summarise",
        "rewrite",
        "name",
        "find",
        "plan",
        "design",
        "build",
        "prepare",
    ]
)
_REQUEST_VERBS = frozenset(
    [
        "give",
        "show",
        "tell",
        "explain",
        "describe",
        "list",
        "suggest",
        "recommend",
        "help",
        "understand",
        "telling",
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
    relational: tuple[str, ...]
    question: frozenset[str]
    joins: tuple[int, ...]  # word index after which a joiner comes (prefix counts)
    named: frozenset[int] = frozenset()  # content words that belong to a name
    request: int = 0  # leading words that make a request ("can you help me"), not content


@lru_cache(maxsize=16384)
def align_features(text: str, names: frozenset[str] = frozenset()) -> AlignFeatures:
    """The words of `text` as the alignment sees them: lowercased with str.lower (not
    casefold: "Maße" and "Masse" stay apart), width folded, accents and super/subscripts
    kept. `names`: words of named entities, which the entity check compares instead."""
    text = _strip_preamble(fold_width(text))
    words: list[str] = []
    join_after: list[int] = []
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        if _JOIN_MARKS.search(text, pos, m.start()):
            join_after.append(len(words))
        pos = m.end()
        w = _CONTRACTION_RE.sub("", m.group(0).lower().replace("’", "'"))
        if w in _JOINERS:
            join_after.append(len(words))
        words.append(w)
    prefix, count = [], 0
    marks = set(join_after)
    for i in range(len(words) + 1):
        count += i in marks
        prefix.append(count)
    request = _request_prefix(words)
    content = tuple(
        i
        for i, w in enumerate(words)
        if i >= request and (w in _LIGHT or w in _UNIT_WORDS or _is_content(w))
    )
    # Names take part in the order (who does what to whom) but not in the matching: the
    # entity check compares which names there are.
    named = frozenset(i for i in content if _canon(_stem(words[i])) in names)
    return AlignFeatures(
        words=tuple(words),
        content=content,
        relational=tuple(sorted(w for w in words if w in _RELATIONAL)),
        question=_OPEN if request else _question_kind(words, _second_clause(words, join_after)),
        joins=tuple(prefix),
        named=named,
        request=request,
    )


def _second_clause(words: list[str], marks: list[int]) -> str | None:
    """The first word after the first comma or joiner, if any."""
    return words[marks[0]] if marks and marks[0] < len(words) else None


def _strip_preamble(text: str) -> str:
    """Drop a leading courtesy ("Quick question:", "Just curious,", "Thanks in advance!")."""
    while True:
        m = _PREAMBLE_RE.match(text)
        if not m or not set(_TOKEN_RE.findall(m.group(1).lower())) <= _PREAMBLE_WORDS:
            return text
        text = text[m.end() :]


def _request_prefix(words: list[str]) -> int:
    """How many leading words make a request rather than ask a question ("can you help me",
    "please explain", "give me"): they go, and the rest is an open question."""
    i = 0
    if words[:2] in (["can", "you"], ["could", "you"], ["would", "you"]):
        i = 2
        if i < len(words) and words[i] == "mind":
            i += 1
    while i < len(words) and words[i] in ("please", "kindly", "just"):
        i += 1
    start = i
    while i < len(words) and _request_verb(words[i]):
        i += 1
        if i < len(words) and words[i] in ("me", "us"):
            i += 1
    if i == start and start and i < len(words) and words[i] in _MAKING_VERBS:
        return start  # "can you write a haiku": a request to write; "can you see ..." asks
    return i if i > start else 0


def _request_verb(word: str) -> bool:
    return word in _REQUEST_VERBS or any(is_typo(word, verb) for verb in _REQUEST_VERBS)


def _question_kind(words: list[str], clause: str | None = None) -> frozenset[str]:
    """The wh-words that set the kind of answer, or "yes-no" for a question that opens with
    an auxiliary ("Can Islam be reformed?" is not "How can Islam be reformed?")."""
    heads = [w.split("'")[0] for w in words]  # "how's" asks how
    kinds = frozenset(_QUESTION[w] for w in heads if w in _QUESTION)
    # Do-support tells who is asked about: "who does the agent pay" asks for the object,
    # "who pays the agent" for the subject.
    kinds |= {
        "who:object"
        for w, nxt in pairwise(heads)
        if w in ("who", "whom") and nxt in ("do", "does", "did")
    }
    if kinds:
        return kinds
    if _FLEXIBLE.intersection(heads):
        # "what do owls eat" asks for the object, "what eats owls" for the subject: the
        # same do-support, when the verb itself is the same word on both sides.
        if any(w in _FLEXIBLE and nxt in ("do", "does", "did") for w, nxt in pairwise(heads)):
            return _OPEN_OBJECT
        return _OPEN
    if words and (words[0] in _AUXILIARIES or clause in _AUXILIARIES):
        return frozenset({"yes-no"})  # "As an American, do I need a visa?" asks yes or no
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
    return next(alignment_reasons(a, b), None)


def alignment_reasons(a: AlignFeatures, b: AlignFeatures) -> Iterator[str]:
    """Every reason the alignment finds, in the order `alignment` checks them (the
    benchmark reads them all to tell what each rule costs)."""
    for check in (_question, _relational, _possessive, _number_order):
        reason = check(a, b)
        if reason:
            yield reason
    pairs, only_a, only_b = _match(a, b)
    only_a = [i for i in only_a if not _light(a, i)]
    only_b = [j for j in only_b if not _light(b, j)]
    if any(
        relation(_key(a.words[i]), _key(b.words[j])) == "antonym" for i in only_a for j in only_b
    ):
        yield "antonym"
    if only_a and only_b:
        yield "substitution"
    elif only_a or only_b:
        yield "qualifier"
    reason = _order(a, b, pairs)
    if reason:
        yield reason
    elif any(a.words[i].endswith("'s") != b.words[j].endswith("'s") for i, j in pairs):
        yield "order"  # whose: "my boss's assistant" / "my assistant's boss"


def _light(f: AlignFeatures, i: int) -> bool:
    """Words that take part in the order but whose absence on one side says nothing."""
    return f.words[i] in _LIGHT or f.words[i] in _UNIT_WORDS or i in f.named


def _question(a: AlignFeatures, b: AlignFeatures) -> str | None:
    if a.question == b.question:
        return None
    # "what is the best way to" asks what "how do I" asks, but not what "can I" asks.
    if {a.question, b.question} == {_OPEN, _OPEN_OBJECT}:
        return "question" if _same_verbs(a, b) else None
    if a.question == _OPEN or b.question == _OPEN:
        return "question" if "yes-no" in a.question | b.question else None
    return "question"


def _same_verbs(a: AlignFeatures, b: AlignFeatures) -> bool:
    """Both texts have the same content words (plural and third-person "s" aside): a
    subject and object that traded roles, not a rephrasing ("what does X mean" / "what is
    the meaning of X")."""
    return Counter(_stem(a.words[i]) for i in a.content) == Counter(
        _stem(b.words[j]) for j in b.content
    )


def _possessive(a: AlignFeatures, b: AlignFeatures) -> str | None:
    """Whose: "hate my mother" / "hate your mother", "my website" / "your website". A
    possessive on one side only ("my phone" / "the phone") says little; one replaced by
    another says whose it is."""
    pa = Counter(w for w in a.words if w in _POSSESSIVES)
    pb = Counter(w for w in b.words if w in _POSSESSIVES)
    if (pa - pb) and (pb - pa):
        return "person"
    # Who does it to whom: "I" on one side and only "me" on the other is the same person in
    # the other role ("I cosign for my brother" / "my brother cosigns for me").
    wa, wb = a.words[a.request :], b.words[b.request :]
    for subject, obj in _PRONOUN_CASES:
        sa, oa = subject in wa, obj in wa
        sb, ob = subject in wb, obj in wb
        if (sa and not oa and ob and not sb) or (sb and not ob and oa and not sa):
            return "person"
    return None


def _number_order(a: AlignFeatures, b: AlignFeatures) -> str | None:
    """The same numbers in another order: "2-to-1 odds" / "1-to-2 odds"."""
    na, nb = [w for w in a.words if w.isdigit()], [w for w in b.words if w.isdigit()]
    return "order" if na != nb and sorted(na) == sorted(nb) else None


def _relational(a: AlignFeatures, b: AlignFeatures) -> str | None:
    # One side's relation word missing from the other is often an infinitive "to" or an
    # elided "in"; one replaced by another is a different relation.
    ca = Counter(_RELATION_CLASS.get(w, w) for w in a.relational)
    cb = Counter(_RELATION_CLASS.get(w, w) for w in b.relational)
    return "relation" if (ca - cb) and (cb - ca) else None


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
    if not rest_a or not rest_b or len(rest_a) * len(rest_b) > _MAX_SYNONYM_TRIES:
        return pairs, rest_a, rest_b  # nothing to pair up, or too many: not the same question
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
    """Pieces that trade places across what stays between them: swapped roles ("the
    teacher grades the student" / "the student grades the teacher", "can the president fire
    a justice" / "can a justice fire the president"), or a word that crosses a relation word.
    Not a swap: a phrase that moves ("physics books" / "books for physics": a rotation),
    pieces a joiner separates ("Java and Python"), adverbs, which move freely. When the two
    texts have exactly the same words, the small ones count as what stays between ("share
    of engineers are immigrants" / "share of immigrants are engineers")."""
    fixed = [(i, j) for i, j in pairs if not _movable(a.words[i])]
    order = [j for _, j in fixed]
    if order == sorted(order):
        return None
    if _crosses_relation(a, b, fixed):
        return "order"
    if Counter(a.words) == Counter(b.words):
        kind, words = reordering(a.words, b.words)
    else:  # content words, each named by its position in `a`
        by_b = sorted(fixed, key=lambda pair: pair[1])
        kind, between = reordering([i for i, _ in fixed], [i for i, _ in by_b])
        words = [a.words[i] for i in between]
    if kind != "swap" or _JOINERS.intersection(words):
        return None
    return "order"


def _crosses_relation(a: AlignFeatures, b: AlignFeatures, pairs: list[tuple[int, int]]) -> bool:
    """Two aligned words on either side of a relation word in both texts, in the other order
    ("rebase main onto my branch" / "rebase my branch onto main"). Each word is placed in a
    segment (relation words before it); one pass over the pairs sorted by position in `a`."""
    seg_a, seg_b = _segments(a), _segments(b)
    highest_before = -1  # the highest segment in `b` of the words in earlier segments of `a`
    current, group_high = -1, -1
    for i, j in pairs:
        if seg_a[i] != current:
            highest_before = max(highest_before, group_high)
            current, group_high = seg_a[i], -1
        if seg_b[j] < highest_before:
            return True
        group_high = max(group_high, seg_b[j])
    return False


def _segments(f: AlignFeatures) -> list[int]:
    out, count = [], 0
    for w in f.words:
        count += w in _RELATIONAL
        out.append(count)
    return out


def _movable(word: str) -> bool:
    return len(word) > 4 and word.endswith("ly") and any(known(b) for b in detach(word))
