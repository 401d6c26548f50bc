"""Numbers and units: what quantities a text asks about.

Reads digits ("1,200", "3.5", versions "1.2.3"), Chinese numerals ("三万", "百分之五"),
English number words ("twenty five", "third") and the units written after or around them,
and returns them as canonical numbers, units in order of appearance, and (number, unit)
pairs, so that "5 km in miles" and "5 miles in km" differ. A "one" / "first" / "一" seen
only in words is kept apart as a soft number: it often means the article "a".
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.matching.guards.lexicons import (
    _EN_NUM_WORDS,
    _EN_ORDINALS,
    _EN_SCALES,
    _NUMBER_WORDS,
    _SOFT_ONE_WORDS,
    _ZH_BIG,
    _ZH_DIGITS,
    _ZH_SMALL,
)
from gateway.matching.guards.patterns import (
    _AFTER_RE,
    _CURRENCY_PREFIX_RE,
    _DIGIT_RE,
    _HOW_MANY_UNIT_RE,
    _NUM_RE,
    _SECOND_UNIT_RE,
    _UNIT_OF,
    _UNIT_SYMBOL_RE,
    _UNIT_WORDS,
    _WORD_RE,
    _ZH_NOT_NUMBER_RE,
    _ZH_NUM_RE,
    _ZH_PERCENT_RE,
    _ZH_UNIT_ANY_RE,
)


def _canon_number(whole: str, frac: str | None) -> str:
    whole = whole.replace(",", "").lstrip("0") or "0"
    if not frac:
        return whole
    if frac.count(".") > 1:  # a version: 1.2.3
        return whole + frac
    digits = frac[1:]
    return whole if set(digits) == {"0"} else f"{whole}.{digits}"


def _zh_value(span: str) -> int:
    if all(c in _ZH_DIGITS for c in span):  # 二〇二三 -> 2023, digit by digit
        return int("".join(str(_ZH_DIGITS[c]) for c in span))
    total = section = num = 0
    for c in span:
        if c in _ZH_DIGITS:
            num = _ZH_DIGITS[c]
        elif c in _ZH_SMALL:
            section += (num or 1) * _ZH_SMALL[c]
            num = 0
        else:
            total += ((section + num) or 1) * _ZH_BIG[c]
            section = num = 0
    return total + section + num


def _zh_number(span: str) -> str:
    whole, _, frac = span.partition("点")
    value = str(_zh_value(whole))
    if frac:
        return value + "." + "".join(str(_ZH_DIGITS[c]) for c in frac)
    return value


def _as_number(token: str) -> str:
    return str(int(token)) if token.isdigit() else _zh_number(token)


@dataclass(slots=True)
class _Quantities:
    numbers: set[str]
    soft: set[str]
    units: list[tuple[int, str]]  # (position, canonical unit)
    pairs: set[tuple[str, str]]  # (number, unit) written together

    def add(self, low: str, value: str, end: int, soft: bool = False) -> None:
        (self.soft if soft else self.numbers).add(value)
        unit = _unit_after(low, end)
        if unit:
            self.units.append((end, unit))
            self.pairs.add((value, unit))


def _unit_after(low: str, end: int) -> str | None:
    m = _AFTER_RE.match(low, end)
    if not m:
        return None
    tok = m.group(1)
    if tok[0] < "\u3400":
        return _UNIT_OF.get(tok)
    tok = tok.removeprefix("个") if len(tok) > 1 else tok
    for size in (3, 2, 1):  # longest spelling first: 公里 before 公
        unit = _UNIT_OF.get(tok[:size]) or _UNIT_OF.get("个" + tok[:size])
        if unit:
            return unit
    return None


def _en_word_numbers(low: str, words: list[str], q: _Quantities) -> None:
    """Numbers written as words: "twenty five" -> 25, "two hundred" -> 200, "third" -> 3."""
    current: int | None = None
    if _NUMBER_WORDS.isdisjoint(words):
        return
    if "second" in low:
        low = _SECOND_UNIT_RE.sub(" sec", low)
    end = 0
    for m in [*_WORD_RE.finditer(low), None]:
        word = m.group(0) if m else ""
        if word in _EN_NUM_WORDS:
            current, end = (current or 0) + _EN_NUM_WORDS[word], m.end() if m else 0
            continue
        if word in _EN_SCALES and current is not None:
            current, end = current * _EN_SCALES[word], m.end() if m else 0
            continue
        if current is not None:
            q.add(low, str(current), end)
            current = None
        if word in _EN_ORDINALS:
            q.numbers.add(str(_EN_ORDINALS[word]))
        elif word in _SOFT_ONE_WORDS and m:
            q.add(low, "1", m.end(), soft=True)


def _digit_numbers(low: str, q: _Quantities) -> None:
    for m in _CURRENCY_PREFIX_RE.finditer(low):
        unit = _UNIT_OF[m.group(1).rstrip(".")]
        q.units.append((m.start(), unit))
        num = _NUM_RE.match(low, m.end())
        if num:
            q.pairs.add((_canon_number(num.group(1), num.group(2)), unit))
    for m in _NUM_RE.finditer(low):
        value, end = _canon_number(m.group(1), m.group(2)), m.end()
        if end < len(low) and low[end] in _ZH_BIG:  # 3万 -> 30000
            value = str(round(float(value) * _ZH_BIG[low[end]]))
            end += 1
        q.add(low, value, end)


def _zh_numbers(low: str, q: _Quantities) -> None:
    for m in _ZH_PERCENT_RE.finditer(low):
        value = _as_number(m.group(1)) if "." not in m.group(1) else m.group(1)
        q.numbers.add(value)
        q.units.append((m.start(), "%"))
        q.pairs.add((value, "%"))
    masked = _ZH_PERCENT_RE.sub(lambda m: "_" * len(m.group(0)), low)
    masked = _ZH_NOT_NUMBER_RE.sub(lambda m: "_" * len(m.group(0)), masked)
    for m in _ZH_NUM_RE.finditer(masked):
        if m.start() and masked[m.start() - 1].isdigit():
            continue  # the 万 of "3万", already counted
        q.add(low, _zh_number(m.group(0)), m.end(), soft=m.group(0) == "一")
    for m in _ZH_UNIT_ANY_RE.finditer(low):
        q.units.append((m.start(), _UNIT_OF[m.group(0)]))


def _unit_words(low: str, words: list[str], q: _Quantities) -> None:
    prev = ""
    scan = not _UNIT_WORDS.keys().isdisjoint(words) or "cent" in words
    for m in _WORD_RE.finditer(low) if scan else ():
        w = m.group(0)
        unit = _UNIT_WORDS.get(w)
        if unit is None and w == "cent" and prev == "per":
            unit = "%"
        if unit is not None:
            q.units.append((m.start(), unit))
        prev = w
    for m in _UNIT_SYMBOL_RE.finditer(low):
        q.units.append((m.start(), _UNIT_OF[m.group(0)]))
    if "how " not in low and "多少" not in low and "几" not in low:
        return
    for m in _HOW_MANY_UNIT_RE.finditer(low):
        spelling = m.group(1) or m.group(2)
        q.units.append((m.start(), _UNIT_OF.get(spelling) or _UNIT_OF.get("个" + spelling, "")))


def _extract_quantities(low: str, words: list[str], has_cjk: bool) -> _Quantities:
    """Numbers (digits, Chinese numerals, words), units and (number, unit) pairs."""
    q = _Quantities(set(), set(), [], set())
    if _DIGIT_RE.search(low):
        _digit_numbers(low, q)
    if has_cjk:
        _zh_numbers(low, q)
    _en_word_numbers(low, words, q)
    _unit_words(low, words, q)
    q.soft -= q.numbers
    q.units.sort()
    return q
