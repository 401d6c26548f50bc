from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from gateway.guard.dates import (
    earliest_today,
    is_date,
    is_date_time,
    normalize_date,
    normalize_date_time,
    parse_date_time,
)


@pytest.mark.parametrize("text", ["2024-01-31", "2024-02-29"])
def test_iso_dates_are_dates(text: str) -> None:
    assert is_date(text)


@pytest.mark.parametrize(
    "text", ["2023-02-29", "2024-1-1", "2024/01/01", "20240101", " 2024-01-01"]
)
def test_other_spellings_and_impossible_days_are_not(text: str) -> None:
    assert not is_date(text)


@pytest.mark.parametrize(
    "text",
    ["2024-01-31T09:30:00Z", "2024-01-31t09:30:00.123+08:00", "2016-12-31T23:59:60Z"],
)
def test_rfc3339_date_times(text: str) -> None:
    assert is_date_time(text)


@pytest.mark.parametrize(
    "text", ["2024-01-31T09:30:00", "2024-01-31 09:30:00Z", "2024-01-31T25:00:00Z", "2024-01-31"]
)
def test_date_times_without_offset_or_impossible_are_not(text: str) -> None:
    assert not is_date_time(text)


def test_parsed_date_time_is_aware() -> None:
    parsed = parse_date_time("2024-01-31T09:30:00+02:00")
    assert parsed == datetime(2024, 1, 31, 7, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2024/01/05", "2024-01-05"),
        ("2024.1.5", "2024-01-05"),
        ("2024-1-5", "2024-01-05"),
        ("2024年1月5日", "2024-01-05"),
        ("２０２４年１月５日", "2024-01-05"),
        ("2024 年 1 月 5 号", "2024-01-05"),
        ("2024년 1월 5일", "2024-01-05"),
        ("Jan 5, 2024", "2024-01-05"),
        ("jan. 5 2024", "2024-01-05"),
        ("January 5th, 2024", "2024-01-05"),
        ("5 January 2024", "2024-01-05"),
        ("5th of Sept, 2024", "2024-09-05"),
        ("05-Jan-2024", "2024-01-05"),
        ("  Jan 5, 2024 ", "2024-01-05"),
    ],
)
def test_unambiguous_human_dates_normalize(text: str, iso: str) -> None:
    assert normalize_date(text) == iso


@pytest.mark.parametrize(
    "text",
    ["01/02/2024", "1.2.2024", "24/1/5", "Jan 5", "Foo 5, 2024", "2024年2月30日", "tomorrow", ""],
)
def test_ambiguous_or_impossible_dates_are_left(text: str) -> None:
    assert normalize_date(text) is None


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2024-01-05 09:30:00Z", "2024-01-05T09:30:00Z"),
        ("2024-01-05T09:30+0800", "2024-01-05T09:30:00+08:00"),
        ("2024/1/5 9:30:15.5 UTC", "2024-01-05T09:30:15.5Z"),
    ],
)
def test_date_times_with_an_offset_normalize(text: str, iso: str) -> None:
    assert normalize_date_time(text) == iso


@pytest.mark.parametrize("text", ["2024-01-05 09:30:00", "2024-01-05T25:30Z", "01/05/2024 09:30Z"])
def test_date_times_without_offset_or_impossible_are_left(text: str) -> None:
    assert normalize_date_time(text) is None


def test_earliest_today_is_twelve_hours_behind_utc() -> None:
    assert earliest_today(datetime(2024, 6, 1, 11, 0, tzinfo=UTC)) == date(2024, 5, 31)
    assert earliest_today(datetime(2024, 6, 1, 12, 0, tzinfo=UTC)) == date(2024, 6, 1)
