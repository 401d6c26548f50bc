"""Per-text features: everything a comparison needs, extracted once per text and cached.

`_features(text)` runs every extractor (identifiers, dates, numbers and units, negations,
stemmed words, the direction frame, genders, English and Chinese entities, Chinese diff
units) and returns a frozen `_Features` record behind an LRU cache, so a text seen again
(the cached side of a pair usually is) costs a dictionary lookup. The small extractors with
no module of their own (code identifiers, negation count, direction) live here too.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from gateway.matching.guards.dates import _extract_dates
from gateway.matching.guards.entities import (
    _apply_aliases,
    _canon,
    _entity_spans,
    _genders,
    _Span,
    _zh_entities,
)
from gateway.matching.guards.lexicons import _EN_NEGATIONS, _EN_STOP, _ZH_FUNCTION
from gateway.matching.guards.numbers import _extract_quantities
from gateway.matching.guards.patterns import (
    _CJK_RE,
    _DIRECTION_WINDOW,
    _EN_DIRECTION_CUE_RE,
    _EN_DIRECTION_RE,
    _EN_NEG_RE,
    _EN_NOT_QUESTION_RE,
    _IDENT_RULES,
    _INNER_CAPITAL_RE,
    _MIN_INNER_CAPITAL,
    _SHORT_DOTTED_RE,
    _TOKEN_RE,
    _WORD_RE,
    _ZH_A_NOT_A_RE,
    _ZH_DIRECTION_RE,
    _ZH_NEG_CHARS,
    _ZH_NOT_NEGATION_RE,
)
from gateway.matching.guards.words import _stem, _zh_diff_units


@dataclass(frozen=True, slots=True)
class _Features:
    identifiers: frozenset[str]
    dates: frozenset[str]
    units: frozenset[str]
    unit_order: tuple[str, ...]
    quantities: frozenset[tuple[str, str]]
    numbers: frozenset[str]
    soft_numbers: frozenset[str]  # numbers seen only as "one" / "first" / "一"
    negations: int
    words: frozenset[str]  # casefolded, lightly stemmed tokens
    tokens: frozenset[str]  # casefolded tokens as written
    direction: tuple[frozenset[str], frozenset[str]] | None  # content words around "to"/"than"
    genders: tuple[str, ...]  # m/f of the people mentioned, in order, repeats collapsed
    entity_text: str  # the text the English spans point into (aliases folded)
    entity_spans: tuple[_Span, ...]
    zh_text: str  # casefolded text when it has CJK characters, else ""
    zh_entities: tuple[_Span, ...]
    zh_units: tuple[str, ...]  # CJK characters and ASCII words, for the diff


def _extract_identifiers(text: str) -> frozenset[str]:
    found: set[str] = set()
    matches = [
        m.group(1) for cue, pattern in _IDENT_RULES if cue in text for m in pattern.finditer(text)
    ]
    matches += [m for m in _INNER_CAPITAL_RE.findall(text) if len(m) >= _MIN_INNER_CAPITAL]
    for ident in matches:
        ident = ident.strip().rstrip(".").removesuffix("()")
        if ident and not _SHORT_DOTTED_RE.match(ident):
            found.add(ident.casefold())
    return frozenset(found)


def _count_negations(low: str, words: list[str], has_cjk: bool) -> int:
    count = sum(1 for w in words if w in _EN_NEGATIONS)
    if "or not" in low or "why not" in low:  # "is it real or not?" asks; it does not negate
        count -= len(_EN_NOT_QUESTION_RE.findall(low))
    if "n't" in low:
        count += len(_EN_NEG_RE.findall(low))
    if has_cjk:
        zh = _ZH_NOT_NEGATION_RE.sub("", _ZH_A_NOT_A_RE.sub("", low))
        count += sum(1 for c in zh if c in _ZH_NEG_CHARS)
    return count


def _direction(low: str, has_cjk: bool) -> tuple[frozenset[str], frozenset[str]] | None:
    """Content words just before and after the first directional word, if there is one."""
    m = _EN_DIRECTION_RE.search(low)
    if m and (m.group(1) != "to" or _EN_DIRECTION_CUE_RE.search(low)):
        left = [_stem(w) for w in _WORD_RE.findall(low[: m.start()])]
        right = [_stem(w) for w in _WORD_RE.findall(low[m.end() :])]
        return (
            frozenset([w for w in left if w not in _EN_STOP][-_DIRECTION_WINDOW:]),
            frozenset([w for w in right if w not in _EN_STOP][:_DIRECTION_WINDOW]),
        )
    if has_cjk:
        m = _ZH_DIRECTION_RE.search(low)
        if m:
            left = [c for c in _zh_diff_units(low[: m.start()]) if c not in _ZH_FUNCTION]
            right = [c for c in _zh_diff_units(low[m.end() :]) if c not in _ZH_FUNCTION]
            return frozenset(left[-_DIRECTION_WINDOW:]), frozenset(right[:_DIRECTION_WINDOW])
    return None


@lru_cache(maxsize=16384)
def _features(text: str) -> _Features:
    text = " ".join(unicodedata.normalize("NFKC", text).replace("\u2019", "'").split())
    low = text.casefold()
    has_cjk = bool(_CJK_RE.search(low))
    words = _WORD_RE.findall(low)
    q = _extract_quantities(low, words, has_cjk)
    order = tuple(dict.fromkeys(unit for _, unit in q.units))
    tokens = _TOKEN_RE.findall(text)  # as written, for the identifier casing check
    entity_text = _apply_aliases(text, low)
    return _Features(
        identifiers=_extract_identifiers(text),
        dates=_extract_dates(low, words, has_cjk),
        units=frozenset(order),
        unit_order=order,
        quantities=frozenset(q.pairs),
        numbers=frozenset(q.numbers),
        soft_numbers=frozenset(q.soft),
        negations=_count_negations(low, words, has_cjk),
        words=frozenset(
            _canon(_stem(t))
            for t in (tokens if entity_text is text else (*tokens, *_TOKEN_RE.findall(entity_text)))
        ),
        tokens=frozenset(t.casefold() for t in tokens),
        direction=_direction(low, has_cjk),
        genders=_genders(words, low, has_cjk),
        entity_text=entity_text,
        entity_spans=_entity_spans(entity_text, low),
        zh_text=low if has_cjk else "",
        zh_entities=_zh_entities(low) if has_cjk else (),
        zh_units=_zh_diff_units(low) if has_cjk else (),
    )
