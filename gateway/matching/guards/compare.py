"""The comparisons: `near_miss` and `content_difference`, the lexical second opinion.

Each check compares two texts' features on one kind of fact (identifier, date, unit, number,
negation, antonym, entity, order, Chinese swap) and returns a reason or None; `near_miss`
runs them in a fixed order and returns the first reason. Precision comes first: when unsure,
a check fires.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from difflib import SequenceMatcher

from gateway.matching.guards.align import align_features, alignment_reasons
from gateway.matching.guards.entities import _Span
from gateway.matching.guards.features import _Features, _features
from gateway.matching.guards.lexicons import (
    _EN_ANTONYMS,
    _EN_NEG_PREFIXES,
    _EN_STOP,
    _ZH_ANTONYMS,
    _ZH_FUNCTION,
    _ZH_PERSONS,
)
from gateway.matching.guards.patterns import _JOINER_RE, _ZH_NEG_CHARS
from gateway.matching.guards.reorder import reordering
from gateway.matching.guards.surface import surface_features, surface_reasons
from gateway.matching.guards.words import _stem, _zh_diff_units

__all__ = [
    "MAX_COMPARED_CHARS",
    "content_difference",
    "lexical_reasons",
    "near_miss",
    "near_miss_reasons",
    "vetoes",
]

# The longest text the guards compare (the semantic tier never compares longer ones: they
# exceed every embedder's window). Past it near_miss says "too-long": never a semantic hit.
MAX_COMPARED_CHARS = 4096


def _identifier(a: _Features, b: _Features) -> str | None:
    # "JavaScript" is an identifier by its shape; "javascript" on the other side is the
    # same word in other casing, not another identifier.
    for mine, other in ((a.identifiers - b.identifiers, b), (b.identifiers - a.identifiers, a)):
        if any(ident not in other.tokens for ident in mine):
            return "identifier"
    return None


def _date(a: _Features, b: _Features) -> str | None:
    return "date" if a.dates != b.dates else None


def _unit(a: _Features, b: _Features) -> str | None:
    if a.units != b.units:
        return "unit"
    # Same units, other direction: "5 km in miles" vs "5 miles in km".
    if a.quantities != b.quantities and a.numbers == b.numbers:
        return "unit"
    if len(a.unit_order) > 1 and a.unit_order != b.unit_order:
        return "unit"
    return None


def _number(a: _Features, b: _Features) -> str | None:
    if a.numbers == b.numbers:
        return None
    # "one" / "一" on one side and nothing on the other is the article "a", not a number.
    only_a = a.numbers - b.numbers - b.soft_numbers
    only_b = b.numbers - a.numbers - a.soft_numbers
    return "number" if only_a or only_b else None


def _negation(a: _Features, b: _Features) -> str | None:
    return "negation" if a.negations != b.negations else None


def _antonym(a: _Features, b: _Features) -> str | None:
    only_a, only_b = a.words - b.words, b.words - a.words
    if only_a and only_b:
        for x, y in _EN_ANTONYM_PAIRS:
            if (x in only_a and y in only_b) or (y in only_a and x in only_b):
                return "antonym"
    # "install" / "uninstall", "like" / "dislike", "valid" / "invalid"
    for mine, other in ((only_a, only_b), (only_b, only_a)):
        for w in mine:
            if len(w) >= 4 and any(p + w in other for p in _EN_NEG_PREFIXES):
                return "negation"
    if a.zh_text and b.zh_text:
        for x, y in _ZH_ANTONYMS:
            ax, ay, bx, by = x in a.zh_text, y in a.zh_text, x in b.zh_text, y in b.zh_text
            if (ax and not ay and by and not bx) or (ay and not ax and bx and not by):
                return "antonym"
    return None


def _entity(a: _Features, b: _Features) -> str | None:
    if {sp.key for sp in a.zh_entities} != {sp.key for sp in b.zh_entities}:
        return "entity"
    if a.genders and b.genders and a.genders != b.genders:  # men vs women, 他爱她 vs 她爱他
        return "entity"
    unmatched_a = [t for sp in a.entity_spans for t in sp.tokens if t not in b.words]
    unmatched_b = [t for sp in b.entity_spans for t in sp.tokens if t not in a.words]
    if unmatched_a and unmatched_b:  # a swap: Walton County vs Washington County
        return "entity"
    # An added name is another question ("weather" vs "weather in Paris") unless it
    # qualifies a name both share ("Trump" vs "Donald Trump", "Cairo, Egypt", "Near Death
    # Experiences (NDEs)"), or is only a capitalized word.
    for f, other in ((a, b.words), (b, a.words)):
        prev: _Span | None = None
        for sp in f.entity_spans:
            added = sp.strong and all(t not in other for t in sp.tokens)
            if added and not _qualifies(prev, sp, f.entity_text, other):
                return "entity"
            prev = sp
    return None


def _qualifies(prev: _Span | None, sp: _Span, text: str, other: frozenset[str]) -> bool:
    return (
        prev is not None
        and any(t in other for t in prev.tokens)
        and text[prev.end : sp.start].strip() in {",", "(", "-", ""}
    )


def _first_inversion(a: tuple[_Span, ...], b: tuple[_Span, ...]) -> tuple[_Span, _Span] | None:
    """Two names that come in one order in `a` and in the other order in `b`."""
    pos_b: dict[str, int] = {}
    for i, sp in enumerate(b):
        pos_b.setdefault(sp.key, i)
    firsts: dict[str, _Span] = {}
    for sp in a:
        firsts.setdefault(sp.key, sp)
    names = list(firsts.values())
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            if x.key in pos_b and y.key in pos_b and pos_b[y.key] < pos_b[x.key]:
                return x, y
    return None


def _order(a: _Features, b: _Features) -> str | None:
    """Same names, other roles: "Indian women like Pakistani men" vs the reverse,
    "北京到上海" vs "上海到北京". Swapping around "and" / "vs" / "和" keeps the meaning."""
    # English names in other roles are the alignment's to judge (it tells a swap from a
    # phrase that moves: "In Python, how do I read a CSV?" / "How do I read a CSV in Python?").
    for spans_a, spans_b, text in ((a.zh_entities, b.zh_entities, a.zh_text),):
        if len(spans_a) < 2 or {s.key for s in spans_a} != {s.key for s in spans_b}:
            continue
        pair = _first_inversion(spans_a, spans_b)
        if pair and not _JOINER_RE.fullmatch(text[pair[0].end : pair[1].start]):
            return "order"
    # "convert ethanol to acid" vs "convert acid to ethanol": the two sides trade places.
    if a.direction and b.direction:
        (left_a, right_a), (left_b, right_b) = a.direction, b.direction
        if (left_a & right_b) - (left_a & left_b) and (right_a & left_b) - (right_a & right_b):
            return "order"
    return None


def _content(units: tuple[str, ...]) -> list[str]:
    return [u for u in units if u not in _ZH_FUNCTION]


def _zh_swap(a: _Features, b: _Features) -> str | None:
    """A Chinese word replaced by another ("北京" -> "上海", "猫" -> "狗"): a diff span whose
    two sides both hold content characters that the other text has fewer of. Counting, not
    mere presence, tells a move ("北京今天" / "今天北京") from a swap that reuses a character
    found elsewhere ("后患的患" / "后患的免")."""
    if not (a.zh_units and b.zh_units) or max(len(a.zh_units), len(b.zh_units)) > 300:
        return None
    count_a, count_b = Counter(a.zh_units), Counter(b.zh_units)
    ops = SequenceMatcher(None, a.zh_units, b.zh_units, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in ops:
        if tag != "replace":
            continue
        left = [u for u in _content(a.zh_units[i1:i2]) if count_a[u] > count_b[u]]
        right = [u for u in _content(b.zh_units[j1:j2]) if count_b[u] > count_a[u]]
        if left and right:
            return "entity"
    return _zh_pronoun_order(a, b)


def _zh_alignment(a: _Features, b: _Features) -> str | None:
    """Chinese has no spaces to align words by: compare content characters. One side's
    content characters the other lacks are an added qualifier ("怎么减肥" / "怎么快速减肥");
    the same characters in another order are swapped roles ("老师给学生打分" / "学生给老师打分")
    unless they trade places around a joiner ("北京和上海" / "上海和北京")."""
    if _latin_words(a.zh_text) != _latin_words(b.zh_text):
        return "substitution"  # "拼音 mǎi" / "拼音 mài", "schön" / "schon"
    qa, qb = _zh_question(a.zh_text), _zh_question(b.zh_text)
    if qa and qb and qa != qb:
        return "question"  # "为什么要交社保" / "社保怎么交"
    ca, cb = _zh_content(a.zh_text), _zh_content(b.zh_text)
    if Counter(ca) != Counter(cb):
        sa, sb = _zh_sequence(a.zh_text), _zh_sequence(b.zh_text)
        return "qualifier" if _zh_added_words(sa, sb) else None
    if ca == cb:
        return None
    # The order is judged with the small words kept: "老师给学生" has 给 between the two.
    sa, sb = _zh_sequence(a.zh_text), _zh_sequence(b.zh_text)
    if Counter(sa) == Counter(sb):
        return "order" if sa != sb and _swapped_across(sa, sb) else None
    return "order" if _swapped_across(ca, cb) else None


def _zh_sequence(low: str) -> list[str]:
    """The order sequence: every unit but particles (and negations, courtesies)."""
    return [u for u in _zh_units(low) if u not in _ZH_PARTICLES]


def _zh_units(low: str) -> list[str]:
    """Diff units without courtesies and negations (the negation check counts those;
    "无法" and "不能" both say cannot)."""
    low = _ZH_FILLER_RE.sub("", _ZH_NEGATION_WORDS_RE.sub("", low))
    return [u for u in _zh_diff_units(low) if u not in _ZH_NEG_CHARS]


def _latin_words(low: str) -> Counter[str]:
    return Counter(m.group(0) for m in _LATIN_RE.finditer(unicodedata.normalize("NFC", low)))


def _zh_question(low: str) -> frozenset[str]:
    return frozenset(kind for kind, pattern in _ZH_QUESTIONS_RE if pattern.search(low))


def _zh_added_words(ca: list[str], cb: list[str]) -> bool:
    """Characters that only one side has: a word added or dropped ("怎么减肥" / "怎么快速减肥",
    "葡萄" / "葡萄干"), or one put in another's place ("上调" / "下调"). Only single characters
    that leave in one place and arrive in another pass, which is how many Chinese synonyms
    differ ("修理" / "维修", "孩子" / "小孩")."""
    if max(len(ca), len(cb)) > 300:
        return True
    ops = SequenceMatcher(None, ca, cb, autojunk=False).get_opcodes()
    edits = [(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal"]
    if any(max(edit) >= 2 for edit in edits) or any(tag == "replace" for tag, *_ in ops):
        return True  # a word added, or one character put in another's place ("上调" / "下调")
    return sum(x for x, _ in edits) != sum(y for _, y in edits)


def _zh_content(low: str) -> list[str]:
    """Content characters, and joiners so that a swap around one can be told."""
    return [u for u in _zh_units(low) if u in _ZH_JOINER_CHARS or u not in _ZH_FUNCTION]


def _swapped_across(ca: list[str], cb: list[str]) -> bool:
    """Two pieces that trade places across something that stays between them ("老师给学生"
    / "学生给老师"), or a reordering too tangled to call a move; pieces that trade places
    side by side ("北京今天" / "今天北京") or around a joiner ("北京和上海") do not count."""
    kind, between = reordering(ca, cb)
    if kind == "swap":
        return not _ZH_JOINER_RE.search("".join(between))
    return kind == "shuffle"


def _zh_pronoun_order(a: _Features, b: _Features) -> str | None:
    """ "她说我爱她" / "我说她爱我": the same people in other roles."""
    pa = [u for u in a.zh_units if u in _ZH_PERSONS]
    pb = [u for u in b.zh_units if u in _ZH_PERSONS]
    return "order" if len(set(pa)) > 1 and set(pa) == set(pb) and pa != pb else None


_ZH_NEGATION_WORDS_RE = re.compile(r"无法|没法|没办法|不能|不可以|不可|不了")
# Courtesies and requests that ask nothing of their own ("你好, 请帮我", "麻烦问一下").
_ZH_FILLER_RE = re.compile(
    r"^(?:你好|您好|谢谢|谢啦|请问|麻烦问一下|麻烦|想请教一下|请教一下|想问一下|问一下)[,!。 ]*|"
    r"请帮我|帮我|帮忙|解释一下|一下"
)
# Particles that carry no role ("的" does: "老板的助理" is not "助理的老板").
_ZH_PARTICLES = frozenset("了吗呢吧啊呀么哦嘛请问")
_ZH_JOINER_CHARS = frozenset("和与跟及或还、")
_ZH_JOINER_RE = re.compile(r"^(?:和|与|跟|及|或者?|还是|、|,|对比|比较)$")
_LATIN_RE = re.compile(r"[^\W\d_\u3400-\u9fff]+")
_ZH_QUESTIONS_RE = [
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("why", r"为什么|为啥|为何"),
        ("how", r"怎么(?!样)|怎样|如何"),
        ("when", r"什么时候|何时|几点"),
        ("where", r"哪里|哪儿|在哪"),
        ("who", r"谁"),
    )
]
_EN_ANTONYM_PAIRS = frozenset((_stem(x), _stem(y)) for x, y in _EN_ANTONYMS)
# Facts a model cannot be trusted to weigh: a differing one refuses the hit whatever it says.
_VETO_CHECKS = (_identifier, _date, _unit, _number, _negation, _entity)
# Word rules: for pairs no judge reads (Chinese), and where the dev curves show one buys
# precision on top of the judge (docs/CACHE.md, "What decides a hit").
_LEXICAL_CHECKS = (_antonym, _order, _zh_swap)


def near_miss(query: str, cached: str) -> str | None:
    """Why `cached`'s answer must not be served for `query`, or None if nothing forbids it.

    Reasons: "code", "symbol", "case", "accent" (writing that carries meaning, `surface`),
    "identifier", "date", "unit", "number", "negation", "antonym", "entity", "order" (the
    same names or words in swapped roles), and from the alignment of content words
    (`align`): "qualifier" (a content word one side lacks), "substitution" (one replaced by
    a word that is not a near-synonym), "relation", "person", "question"; "too-long".
    Symmetric; bounded: texts over MAX_COMPARED_CHARS are "too-long" unread.
    """
    return next(near_miss_reasons(query, cached), None)


def near_miss_reasons(query: str, cached: str) -> Iterator[str]:
    """Every reason the guards find, lazily, in the order `near_miss` checks them: the
    first is near_miss's answer; the benchmark reads them all to tell what each costs."""
    if query == cached:
        return
    yield from vetoes(query, cached)
    yield from lexical_reasons(query, cached)


def vetoes(query: str, cached: str) -> Iterator[str]:
    """The hard vetoes, lazily: texts too long to compare, writing that carries meaning
    (code, symbols, case, accents), identifiers, dates, units, numbers, negation and named
    entities. No judge overrides one."""
    if query == cached:
        return
    if max(len(query), len(cached)) > MAX_COMPARED_CHARS:
        yield "too-long"
        return
    yield from surface_reasons(surface_features(query), surface_features(cached))
    a, b = _features(query), _features(cached)
    for check in _VETO_CHECKS:
        reason = check(a, b)
        if reason is not None:
            yield reason


def lexical_reasons(query: str, cached: str) -> Iterator[str]:
    """The word rules, lazily: antonyms, swapped roles, Chinese words replaced or added, and
    the English content-word alignment (qualifier, substitution, relation, person, question,
    order). Texts past MAX_COMPARED_CHARS are the vetoes' ("too-long")."""
    if query == cached or max(len(query), len(cached)) > MAX_COMPARED_CHARS:
        return
    a, b = _features(query), _features(cached)
    for check in _LEXICAL_CHECKS:
        reason = check(a, b)
        if reason is not None:
            yield reason
    if a.zh_text or b.zh_text:
        reason = _zh_alignment(a, b)
        if reason:
            yield reason
        return
    # Aligned on the entity text (aliases folded: "United States" is "USA"); names are the
    # entity check's to compare, so the alignment leaves them out.
    names = frozenset(t for f in (a, b) for sp in f.entity_spans for t in sp.tokens)
    yield from alignment_reasons(
        align_features(a.entity_text, names), align_features(b.entity_text, names)
    )


def content_difference(query: str, cached: str) -> int:
    """How many content words (English) or content characters (Chinese) one text has and
    the other lacks: a lexical second opinion for a hit close to the threshold."""
    a, b = _features(query), _features(cached)
    words = {w for w in a.words ^ b.words if w not in _EN_STOP and w.isalpha() and len(w) > 1}
    chars = set(_content(a.zh_units)) ^ set(_content(b.zh_units))
    return len(words) + sum(1 for c in chars if not c.isascii())
