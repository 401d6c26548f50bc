"""Named entities: who and what a text is about, in English and Chinese.

English names are runs of name-like tokens, found by the lexicon, acronyms, inner capitals and
capitalization (weak evidence, ignored at a sentence start and in Title Case or shouted
text), with aliases and demonyms folded ("U.S." ~ "USA", "Indians" ~ "India"). Chinese names
come from the lexicon only; the Chinese diff catches the rest. Also the genders of the people
mentioned ("men" vs "women", 男 vs 女).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.matching.guards.lexicons import (
    _ALIAS_CUE_RE,
    _ALIASES,
    _CAP_STOP,
    _DEMONYMS,
    _EN_ENTITIES,
    _EN_GENDER,
    _EN_STOP,
    _ZH_ENTITIES,
    _ZH_GENDER_RE,
)
from gateway.matching.guards.patterns import (
    _ASCII_LETTER_RE,
    _LIST_WORDS,
    _NAME_PREPOSITIONS,
    _SENTENCE_ENDS,
    _TOKEN_RE,
    _UPPER_RE,
)
from gateway.matching.guards.words import _stem


@dataclass(frozen=True, slots=True)
class _Span:
    tokens: tuple[str, ...]  # stemmed, casefolded
    strong: bool
    start: int
    end: int

    @property
    def key(self) -> str:
        return " ".join(self.tokens)


def _at_sentence_start(text: str, pos: int) -> bool:
    pos -= 1
    while pos >= 0 and text[pos] in " \t\r'*-":
        pos -= 1
    return pos < 0 or text[pos] in _SENTENCE_ENDS


def _apply_aliases(text: str, low: str) -> str:
    if "US" not in text and not _ALIAS_CUE_RE.search(low):
        return text
    for pattern, canonical in _ALIASES:
        text = pattern.sub(canonical, text)
    return text


def _canon(key: str) -> str:
    return _DEMONYMS.get(key, key)


def _is_title_case(tokens: list[str]) -> bool:
    """Headline Style Capitalizes Common Words too; a sentence full of names does not."""
    long_words = [w for w in tokens[1:] if len(w) > 3]
    caps = [w for w in long_words if w[0].isupper()]
    return (
        len(long_words) >= 3
        and len(caps) >= 0.8 * len(long_words)
        and any(w.casefold() in _EN_STOP for w in caps)
    )


def _entity_spans(text: str, low: str) -> tuple[_Span, ...]:
    """Runs of name-like tokens. Strong evidence: lexicon names, acronyms, inner capitals
    (iPhone), multi-word names, a name after in/at/near/from/to. Weak: a lone capitalized
    word mid-sentence (skipped at a sentence start and in Title Case or SHOUTED text)."""
    matches = list(_TOKEN_RE.finditer(text))
    tokens = [m.group(0) for m in matches]
    upper = len(_UPPER_RE.findall(text))
    shouting = upper > 8 and upper > 0.6 * len(_ASCII_LETTER_RE.findall(text))
    title = shouting or (upper >= 3 and _is_title_case(tokens))
    spans: list[_Span] = []
    run: list[str] = []
    strong = False
    start = end = 0
    prev_word = ""
    for m, tok in zip(matches, tokens, strict=True):
        key = _stem(tok)
        kind = _entity_kind(tok, key, shouting, title, text, m.start())
        if kind and run and not text[end : m.start()].strip():
            run.append(_canon(key))  # "Walton County": one name
            strong, end = True, m.end()
        elif kind:
            if run:
                spans.append(_Span(tuple(run), strong, start, end))
            # A name after in/at/near, or listed with another name ("Venus, Saturn and Mars")
            listed = prev_word in _LIST_WORDS and bool(spans) and spans[-1].end >= m.start() - 6
            strong = kind == "strong" or prev_word in _NAME_PREPOSITIONS or listed
            run, start, end = [_canon(key)], m.start(), m.end()
        elif run:
            spans.append(_Span(tuple(run), strong, start, end))
            run = []
        prev_word = key
    if run:
        spans.append(_Span(tuple(run), strong, start, end))
    return tuple(spans)


def _entity_kind(
    tok: str, key: str, shouting: bool, title: bool, text: str, pos: int
) -> str | None:
    if key in _EN_ENTITIES or (not tok.isalpha() and tok.casefold() in _EN_ENTITIES):
        return "strong"
    if tok.islower() or shouting:
        return None
    if len(tok) > 1 and tok.isupper() and tok.isalpha() and key != "ok":
        return "strong"  # NASA, and IN / GA as state codes: mid-sentence capitals are not "in"
    if key in _CAP_STOP:
        return None
    if any(c.isupper() for c in tok[1:]):
        return "strong"  # iPhone, YouTube
    if tok[0].isupper() and not title and not _at_sentence_start(text, pos):
        return "weak"
    return None


def _genders(words: list[str], low: str, has_cjk: bool) -> tuple[str, ...]:
    found = [_EN_GENDER[w] for w in words if w in _EN_GENDER]
    if has_cjk:
        found += ["m" if m.group(1) else "f" for m in _ZH_GENDER_RE.finditer(low)]
    return tuple(g for i, g in enumerate(found) if i == 0 or found[i - 1] != g)


def _zh_entities(low: str) -> tuple[_Span, ...]:
    found = [e for e in _ZH_ENTITIES if e in low]
    # Keep the longest name at each place: 中国银行, not also 中国.
    kept = [e for e in found if not any(e != o and e in o for o in found)]
    return tuple(
        sorted(
            (_Span((e,), True, low.find(e), low.find(e) + len(e)) for e in kept),
            key=lambda sp: sp.start,
        )
    )
