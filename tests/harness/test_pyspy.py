"""What a py-spy raw profile says: threads' shares, top functions inclusive and by self time."""

from __future__ import annotations

import pytest

from gateway.testing.harness.pyspy import (
    parse_raw,
    shares_by_thread,
    summary,
    top_inclusive,
    top_self,
)

RAW = """\
thread (101): MainThread;main (app.py:10);handle (app.py:20);parse (app.py:30) 6
thread (101): MainThread;main (app.py:10);handle (app.py:21) 2
thread (102): embed-worker;run (threading.py:982);encode (embed.py:5);encode (embed.py:7) 12
thread (103): pool_0;run (threading.py:982);_worker (concurrent/futures/thread.py:81) 30
not a stack line
"""


def test_stacks_are_read_with_their_thread_and_frames_without_lines() -> None:
    stacks = parse_raw(RAW)
    assert len(stacks) == 4
    assert stacks[0].thread == "MainThread" and stacks[0].count == 6
    assert stacks[0].frames == ("main (app.py)", "handle (app.py)", "parse (app.py)")
    assert parse_raw("main (a.py:1);f (a.py:2) 3")[0].thread == ""  # recorded without --threads


def test_shares_by_thread_and_function() -> None:
    stacks = parse_raw(RAW)[:3]
    assert shares_by_thread(stacks) == [("embed-worker", 0.6), ("MainThread", 0.4)]
    inclusive = dict(top_inclusive(stacks))
    assert inclusive["handle (app.py)"] == pytest.approx(0.4)  # both lines of it: 6 + 2
    assert inclusive["encode (embed.py)"] == pytest.approx(0.6)  # recursive: counted once
    assert top_self(stacks, 2) == [("encode (embed.py)", 0.6), ("parse (app.py)", 0.3)]


def test_the_summary_leaves_idle_workers_out_and_names_threads_and_functions() -> None:
    text = summary(RAW, 4)
    assert text.startswith("20 samples (30 more of executor workers waiting")
    assert "pool_0" not in text
    assert "60.0%  embed-worker" in text and "40.0%  handle (app.py)" in text
    assert text.index("(inclusive)") < text.index("(self)")
