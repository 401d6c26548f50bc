"""hey as a load generator: its command line from a run, its CSV rows read into a LoadResult,
and a real run against the fake upstream (skipped when hey is not installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.hey import HeyRun, hey_path, parse_csv, run_hey

CSV = """response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset
0.0021,0.0002,0.0000,0.0001,0.0016,0.0001,200,0.0003
0.0008,0.0000,0.0000,0.0000,0.0007,0.0000,200,0.0024
0.0030,0.0012,0.0000,0.0001,0.0017,0.0000,502,0.0004
0.0005,0.0000,0.0000,0.0000,0.0005,0.0000,200,0.0032
"""


def test_rows_with_the_ok_status_are_latencies_and_others_errors() -> None:
    result = parse_csv(CSV)
    assert result.latencies_s == [0.0021, 0.0008, 0.0005]
    assert result.errors == 1
    # From the first start (0.0003) to the last end (0.0032 + 0.0005).
    assert result.seconds == pytest.approx(0.0034)
    assert parse_csv(CSV, ok_status=502).latencies_s == [0.0030]


def test_requests_missing_from_the_rows_count_as_errors() -> None:
    assert parse_csv(CSV, expected=6).errors == 3  # one 502, two without an answer
    empty = parse_csv(CSV.splitlines()[0] + "\n", expected=2)
    assert (empty.count, empty.errors, empty.seconds) == (0, 2, 0.0)


def test_the_command_line_carries_the_body_headers_and_a_count_or_a_duration() -> None:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer k"}
    run = HeyRun("http://h/v1", b"{}", 4, count=10, headers=headers)
    argv = run.argv(Path("/tmp/body"))
    assert argv[0] == "hey" and argv[-1] == "http://h/v1"
    assert argv[1:3] == ["-m", "POST"] and argv[3:5] == ["-D", "/tmp/body"]
    assert argv[argv.index("-T") + 1] == "application/json"
    assert argv[argv.index("-H") + 1] == "Authorization: Bearer k"
    assert argv[argv.index("-n") + 1] == "10" and "-z" not in argv
    assert run.expected == 8  # each of the 4 workers sends 10 // 4
    timed = HeyRun("http://h/v1", b"{}", 4, seconds=1.5)
    assert timed.argv(Path("b"))[-3:-1] == ["-z", "1.500s"] and timed.expected is None
    with pytest.raises(ValueError):
        HeyRun("http://h/v1", b"{}", 4, count=3).argv(Path("b"))
    with pytest.raises(ValueError):
        HeyRun("http://h/v1", b"{}", 4).argv(Path("b"))


@pytest.mark.skipif(hey_path() is None, reason="hey is not installed")
async def test_a_real_run_against_the_fake_upstream(fake_upstream: FakeUpstream) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    url = fake_upstream.url + "/chat/completions"
    result = await run_hey(HeyRun(url, body, 3, count=31))
    assert (result.count, result.errors) == (30, 0)
    assert fake_upstream.stats["requests"] == 30
    assert result.seconds > 0 and all(0 < s < result.seconds + 0.01 for s in result.latencies_s)
    wrong = await run_hey(HeyRun(fake_upstream.url + "/no-such-path", body, 2, count=4))
    assert (wrong.count, wrong.errors) == (0, 4)
