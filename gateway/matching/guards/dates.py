"""Dates: the calendar facts a text names, as canonical keys.

Month and weekday names, years, numeric dates (2024-01-31, 1/31/2024), relative days and
periods ("tomorrow", "next week") and their Chinese forms ("明天", "下周", "三月五号"), each
turned into a key such as "month:3" or "rel:d+1" so that two texts can be compared as sets.
"""

from __future__ import annotations

from gateway.matching.guards.lexicons import (
    _DATE_WORDS,
    _EN_PERIODS,
    _EN_RELATIVE_DAYS,
    _EN_RELATIVE_SHIFT,
    _MONTHS,
    _WEEKDAYS,
    _ZH_RELATIVE,
)
from gateway.matching.guards.numbers import _as_number
from gateway.matching.guards.patterns import _NUMERIC_DATE_RE, _YEAR_RE, _ZH_DATE_RE


def _extract_dates(low: str, words: list[str], has_cjk: bool) -> frozenset[str]:
    found: set[str] = set()
    if _DATE_WORDS.isdisjoint(words) and not _YEAR_RE.search(low):
        words = []  # the common case: nothing date-like, skip the scan
    for i, w in enumerate(words):
        if w in _MONTHS:
            near_digit = any(x.isdigit() for x in words[max(0, i - 1) : i + 2])
            if w != "may" or near_digit:  # "may" is a month only next to a number
                found.add(f"month:{_MONTHS[w]}")
        elif w.rstrip("s") in _WEEKDAYS:
            found.add(f"dow:{_WEEKDAYS[w.rstrip('s')]}")
        elif w in _EN_RELATIVE_DAYS:
            found.add(f"rel:{_EN_RELATIVE_DAYS[w]}")
        elif w in _EN_PERIODS and i and words[i - 1] in _EN_RELATIVE_SHIFT:
            found.add(f"rel:{w}{_EN_RELATIVE_SHIFT[words[i - 1]]}")
        elif len(w) == 4 and w.isdigit() and 1900 <= int(w) <= 2099:
            found.add(f"year:{w}")
    if "-" in low or "/" in low:
        for m in _NUMERIC_DATE_RE.finditer(low):
            found.add("date:" + "/".join(str(int(g)) for g in m.groups() if g))
    if has_cjk:
        for m in _ZH_DATE_RE.finditer(low):
            year, month, day, dow, rel = m.groups()
            if year:
                found.add(f"year:{_as_number(year)}")
            elif month:
                found.add(f"month:{_as_number(month)}")
            elif day:
                found.add(f"day:{_as_number(day)}")
            elif dow:
                found.add(
                    "rel:weekend0"
                    if dow == "末"
                    else f"dow:{'一二三四五六日天'.index(dow) + 1 if dow != '天' else 7}"
                )
            elif rel:
                found.add(f"rel:{_ZH_RELATIVE[rel]}")
    return frozenset(found)
