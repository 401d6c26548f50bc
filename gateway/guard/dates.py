"""Dates as tools receive them.

`is_date`/`is_date_time` are the strict RFC 3339 checks behind `format: date|date-time`;
`normalize_date`/`normalize_date_time` turn the few human spellings that have exactly one reading
('2024年1月1日', 'Jan 1, 2024', '2024/01/01') into that form. Day-month order guesses
('01/02/2024'), two-digit years and date-times without an offset are left alone: the gateway must
not pick a reading or a time zone for the model.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, date, datetime, timedelta

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_DATE_TIME = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
)

_MONTHS = {
    "jan": 1, "january": 1, "feb": 2, "february": 2, "mar": 3, "march": 3, "apr": 4, "april": 4,
    "may": 5, "jun": 6, "june": 6, "jul": 7, "july": 7, "aug": 8, "august": 8, "sep": 9,
    "sept": 9, "september": 9, "oct": 10, "october": 10, "nov": 11, "november": 11, "dec": 12,
    "december": 12,
}  # fmt: skip
_DAY = r"(?P<d>\d{1,2})(?:st|nd|rd|th)?"
_MONTH = r"(?P<m>[a-z]+)\.?"
_YEAR = r"(?P<y>\d{4})"
_HUMAN_DATES = [
    # 2024-1-1, 2024/01/01, 2024.1.1: year first is never read day-first.
    re.compile(r"(?P<y>\d{4})\s*(?P<sep>[-/.])\s*(?P<m>\d{1,2})\s*(?P=sep)\s*(?P<d>\d{1,2})\.?"),
    # 2024年1月1日 (Chinese, Japanese), 2024년 1월 1일 (Korean).
    re.compile(r"(?P<y>\d{4})\s*年\s*(?P<m>\d{1,2})\s*月\s*(?P<d>\d{1,2})\s*[日号]"),
    re.compile(r"(?P<y>\d{4})\s*년\s*(?P<m>\d{1,2})\s*월\s*(?P<d>\d{1,2})\s*일"),
    # Jan 1, 2024 / January 1st 2024
    re.compile(rf"{_MONTH}\s+{_DAY},?\s+{_YEAR}", re.IGNORECASE),
    # 1 January 2024 / 1st of Jan, 2024 / 01-Jan-2024
    re.compile(rf"{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}", re.IGNORECASE),
    re.compile(rf"{_DAY}-{_MONTH}-{_YEAR}", re.IGNORECASE),
]
_HUMAN_DATE_TIME = re.compile(
    r"(?P<y>\d{4})(?P<sep>[-/.])(?P<mo>\d{1,2})(?P=sep)(?P<d>\d{1,2})[Tt ]\s*"
    r"(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?P<frac>\.\d+)?)?\s*"
    r"(?P<tz>[Zz]|UTC|[+-]\d{2}:?\d{2})"
)


def parse_date(text: str) -> date | None:
    """An RFC 3339 full-date (`2024-01-31`), or None."""
    match = _DATE.fullmatch(text)
    if match is None:
        return None
    return _date(*match.groups())


def parse_date_time(text: str) -> datetime | None:
    """An RFC 3339 date-time, which always carries an offset, as an aware datetime, or None."""
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        return None
    day, hour, minute, second, fraction, offset = match.groups()
    # RFC 3339 allows a leap second; datetime does not. Validity is what matters here.
    second = "59" if second == "60" else second
    iso = f"{day}T{hour}:{minute}:{second}{fraction or ''}{offset.upper()}"
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return None


def is_date(text: str) -> bool:
    return parse_date(text) is not None


def is_date_time(text: str) -> bool:
    return parse_date_time(text) is not None


def normalize_date(text: str) -> str | None:
    """The ISO form of a date with one possible reading, or None (unknown or ambiguous)."""
    text = unicodedata.normalize("NFKC", text).strip()
    for pattern in _HUMAN_DATES:
        match = pattern.fullmatch(text)
        if match is None:
            continue
        groups = match.groupdict()
        month = groups["m"]
        if not month.isdigit():
            month_number = _MONTHS.get(month.lower())
            if month_number is None:
                continue
            month = str(month_number)
        found = _date(groups["y"], month, groups["d"])
        return found.isoformat() if found else None
    return None


def normalize_date_time(text: str) -> str | None:
    """The RFC 3339 form of a date-time that states its offset, or None. A date-time without
    one is not normalized: choosing a time zone would be a guess."""
    match = _HUMAN_DATE_TIME.fullmatch(unicodedata.normalize("NFKC", text).strip())
    if match is None:
        return None
    g = match.groupdict()
    day = _date(g["y"], g["mo"], g["d"])
    if day is None:
        return None
    tz = g["tz"].upper()
    if tz in ("Z", "UTC"):
        tz = "Z"
    elif ":" not in tz:
        tz = f"{tz[:3]}:{tz[3:]}"
    result = f"{day.isoformat()}T{int(g['h']):02d}:{g['mi']}:{g['s'] or '00'}{g['frac'] or ''}{tz}"
    return result if is_date_time(result) else None


def earliest_today(now: datetime) -> date:
    """The earliest date it is anywhere on Earth (UTC-12) at `now`: a date before it is in the
    past for every user, whatever their time zone."""
    return (now.astimezone(UTC) - timedelta(hours=12)).date()


def _date(year: str, month: str, day: str) -> date | None:
    try:
        return date(int(year), int(month), int(day))
    except ValueError:
        return None
