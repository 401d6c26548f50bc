import time
from typing import Any

import orjson
import pytest

from gateway.config.guard import LoopGuardConfig
from gateway.guard.loops import (
    LoopStop,
    check_loop,
    conversation_tokens,
    finalize_request,
    is_failure,
    similarity,
)
from tests.chat import tool_round

Json = dict[str, Any]
DEFAULT = LoopGuardConfig()


def _round(*calls: tuple[str, Any, str], ids: list[str] | None = None) -> list[Json]:
    """One round: an assistant message with these (tool, arguments, result) calls, then the
    results. Arguments given as a dict are sent as JSON text, as clients do."""
    ids = ids or [
        f"call_{n}_{name}_{abs(hash(str(args))) % 10_000}"
        for n, (name, args, _) in enumerate(calls)
    ]
    return tool_round([(id_, *call) for id_, call in zip(ids, calls, strict=True)])


def _history(*rounds: list[Json], ask: str = "Plan my trip to Lisbon.") -> list[Json]:
    messages: list[Json] = [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": ask},
    ]
    for r in rounds:
        messages += r
    return messages


def _varied(n: int) -> list[list[Json]]:
    return [
        _round(
            (f"tool_{i % 4}", {"step": i, "q": f"question {i}"}, f"answer number {i} " * (i + 1))
        )
        for i in range(n)
    ]


# -- a normal run ------------------------------------------------------------------------------


def test_a_normal_agent_run_of_five_varied_rounds_is_not_stopped() -> None:
    messages = _history(
        _round(
            (
                "search_flights",
                {"from": "BER", "to": "LIS", "date": "2025-06-01"},
                '{"flights": [{"id": "TP531", "price": 189}, {"id": "FR142", "price": 74}]}',
            )
        ),
        _round(
            (
                "get_weather",
                {"city": "Lisbon", "date": "2025-06-01"},
                '{"forecast": "sunny", "high_c": 27}',
            ),
            (
                "search_hotels",
                {"city": "Lisbon", "nights": 3},
                '{"hotels": [{"name": "Alfama Inn", "price": 120}]}',
            ),
        ),
        _round(("get_hotel", {"name": "Alfama Inn"}, "Alfama Inn: 4 stars, breakfast included.")),
        _round(
            (
                "search_flights",
                {"from": "LIS", "to": "BER", "date": "2025-06-04"},
                '{"flights": [{"id": "TP532", "price": 201}]}',
            )
        ),
        _round(
            ("book", {"flight": "TP531", "hotel": "Alfama Inn"}, '{"status": "ok", "ref": "X9"}')
        ),
    )
    assert check_loop(messages, DEFAULT) is None
    assert check_loop(messages, LoopGuardConfig(token_budget=10_000)) is None


def test_a_conversation_without_tool_calls_is_not_stopped() -> None:
    assert check_loop(_history(), DEFAULT) is None
    assert check_loop([], DEFAULT) is None


def test_disabled_guard_never_stops() -> None:
    messages = _history(*_varied(30))
    assert check_loop(messages, LoopGuardConfig(enabled=False, token_budget=1)) is None


# -- max_rounds ---------------------------------------------------------------------------------


def test_rounds_at_the_limit_pass_and_one_more_stops() -> None:
    assert check_loop(_history(*_varied(10)), DEFAULT) is None
    stop = check_loop(_history(*_varied(11)), DEFAULT)
    assert stop == LoopStop(
        "max_rounds", "11 tool-call rounds since the last user message (limit 10).", 11, 10
    )


def test_rounds_count_only_since_the_last_user_message() -> None:
    messages = _history(*_varied(8))
    messages += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "More?"}]
    for r in _varied(8):
        messages += r
    assert check_loop(messages, DEFAULT) is None
    assert check_loop(messages, LoopGuardConfig(max_rounds=7)) is not None


# -- identical_calls ----------------------------------------------------------------------------


def _same(result: str = "no results") -> list[Json]:
    return _round(("search", {"q": "lisbon hotels", "limit": 5}, result))


def test_identical_calls_below_the_limit_pass_and_at_the_limit_stop() -> None:
    assert check_loop(_history(_same("a"), _same("b")), DEFAULT) is None
    stop = check_loop(_history(_same("a"), _same("b"), _same("c")), DEFAULT)
    assert stop is not None
    assert (stop.reason, stop.tool, stop.count, stop.limit) == ("identical_calls", "search", 3, 3)
    assert "`search`" in stop.message and "3 times in a row" in stop.message
    assert "limit 3" in stop.message


def test_arguments_are_compared_as_canonical_json() -> None:
    rounds = [
        _round(("search", '{"q": "lisbon hotels", "limit": 5}', "a")),
        _round(("search", '{"limit":5,"q":"lisbon hotels"}', "b")),
        _round(("search", '  {"q" : "lisbon hotels" ,\n "limit": 5}', "c")),
    ]
    stop = check_loop(_history(*rounds), DEFAULT)
    assert stop is not None and stop.reason == "identical_calls"


def test_other_tools_in_between_do_not_break_the_streak() -> None:
    rounds = []
    for i in range(3):
        rounds += [_same(f"r{i}"), _round(("read_page", {"url": f"https://x/{i}"}, f"page {i}"))]
    stop = check_loop(_history(*rounds), DEFAULT)
    assert stop is not None and (stop.reason, stop.tool) == ("identical_calls", "search")


def test_the_same_tool_with_other_arguments_breaks_the_streak() -> None:
    other = _round(("search", {"q": "porto hotels", "limit": 5}, "x"))
    assert check_loop(_history(_same("a"), _same("b"), other, _same("c")), DEFAULT) is None


def test_the_streak_is_the_latest_one() -> None:
    other = _round(("search", {"q": "porto hotels", "limit": 5}, "x"))
    messages = _history(_same("a"), _same("b"), _same("c"), other)
    # Three identical calls happened, but the agent moved on (the request then was stopped).
    assert check_loop(messages, LoopGuardConfig(max_identical_calls=4)) is None
    assert check_loop(messages, DEFAULT) is None


def test_parallel_identical_calls_count_individually() -> None:
    call = ("get_weather", {"city": "Lisbon"}, "sunny")
    assert check_loop(_history(_round(call, call)), DEFAULT) is None
    stop = check_loop(_history(_round(call, call, call)), DEFAULT)
    assert stop is not None and (stop.reason, stop.count) == ("identical_calls", 3)


def test_parallel_calls_of_one_tool_with_different_arguments_are_not_identical() -> None:
    rounds = [
        _round(
            ("get_weather", {"city": "Lisbon"}, f"sunny {i}"),
            ("get_weather", {"city": "Porto"}, f"cloudy {i}"),
        )
        for i in range(3)
    ]
    stop = check_loop(_history(*rounds), LoopGuardConfig(max_stalled_rounds=5))
    assert stop is None


def test_pollable_tools_may_repeat() -> None:
    polls = [_round(("job_status", {"job": "42"}, '{"state": "running"}')) for _ in range(6)]
    config = LoopGuardConfig(pollable_tools=["job_status"])
    assert check_loop(_history(*polls), config) is None
    stop = check_loop(_history(*polls), DEFAULT)
    assert stop is not None and stop.reason == "identical_calls"


def test_reused_call_ids_across_rounds_match_each_rounds_own_results() -> None:
    rounds = [
        _round(
            ("fetch", {"url": f"https://x/{i}"}, "Error: timeout" if i < 2 else "ok"),
            ids=["call_0"],
        )
        for i in range(3)
    ]
    assert check_loop(_history(*rounds), DEFAULT) is None  # the last fetch succeeded


# -- tool_failures ------------------------------------------------------------------------------


def _failing(i: int, result: str = '{"error": "upstream timeout"}') -> list[Json]:
    return _round(("fetch", {"url": f"https://example.com/{i}"}, result))


def test_failures_below_the_limit_pass_and_at_the_limit_stop() -> None:
    assert check_loop(_history(_failing(0), _failing(1)), DEFAULT) is None
    stop = check_loop(_history(_failing(0), _failing(1), _failing(2)), DEFAULT)
    assert stop is not None
    assert (stop.reason, stop.tool, stop.count, stop.limit) == ("tool_failures", "fetch", 3, 3)
    assert stop.message == "The tool `fetch` failed 3 times in a row (limit 3)."


def test_a_success_of_the_same_tool_resets_the_failures() -> None:
    ok = _round(("fetch", {"url": "https://example.com/ok"}, '{"status": "ok"}'))
    assert check_loop(_history(_failing(0), _failing(1), ok, _failing(2)), DEFAULT) is None


def test_failures_of_different_tools_are_not_one_streak() -> None:
    rounds = [
        _round((f"tool_{i}", {"i": i}, "Traceback (most recent call last):\n  ..."))
        for i in range(3)
    ]
    assert check_loop(_history(*rounds), DEFAULT) is None


def test_failures_are_reported_before_identical_calls() -> None:
    rounds = [_round(("fetch", {"url": "u"}, "Error: 503 Service Unavailable")) for _ in range(3)]
    stop = check_loop(_history(*rounds), DEFAULT)
    assert stop is not None and stop.reason == "tool_failures"


def test_pollable_tools_are_not_exempt_from_failures() -> None:
    polls = [_round(("job_status", {"job": "42"}, '{"status": "error"}')) for _ in range(3)]
    stop = check_loop(_history(*polls), LoopGuardConfig(pollable_tools=["job_status"]))
    assert stop is not None and stop.reason == "tool_failures"


@pytest.mark.parametrize(
    "result",
    [
        '{"error": "not found"}',
        '{"error": {"code": 404}}',
        '{"status": "error", "detail": "x"}',
        '{"status": "ERROR"}',
        '{"success": false, "data": null}',
        '{"isError": true, "content": []}',
        "Error: file not found",
        "error: permission denied",
        "ERROR 500 from upstream",
        "Exception: boom",
        "Traceback (most recent call last):\n  File ...",
        "ValueError: bad date",
        "java.io.IOException: broken pipe",
        "fatal: not a git repository",
        "  Error: leading whitespace",
    ],
)
def test_results_that_look_like_failures(result: str) -> None:
    assert is_failure(result)


@pytest.mark.parametrize(
    "result",
    [
        '{"error": null, "data": [1]}',
        '{"error": "", "ok": true}',
        '{"errors_seen": 2}',
        '{"status": "failed_jobs_listed", "success": true}',
        '["error"]',
        "Errors: 0, warnings: 2",
        "Error handling is described in chapter 4.",
        "The page says: Error 404 happened yesterday.",
        "Terror: a novel",
        "All tests passed.",
        "",
    ],
)
def test_results_that_do_not_look_like_failures(result: str) -> None:
    assert not is_failure(result)


# -- no_progress --------------------------------------------------------------------------------

PAGE = "Lisbon hotels: Alfama Inn 120 EUR, Baixa House 95 EUR, Chiado Suites 210 EUR. " * 4


def _stalled(i: int, tool: str = "browse") -> list[Json]:
    # Arguments differ a little every round (so not identical calls); the result does not.
    return _round((tool, {"query": f"hotels in lisbon, attempt {i}"}, PAGE))


def test_no_progress_needs_the_configured_number_of_stalled_rounds() -> None:
    assert check_loop(_history(_stalled(1), _stalled(2)), DEFAULT) is None
    stop = check_loop(_history(_stalled(1), _stalled(2), _stalled(3)), DEFAULT)
    assert stop is not None
    assert (stop.reason, stop.tool, stop.count, stop.limit) == ("no_progress", "browse", 2, 2)
    assert "`" not in stop.message and "browse" in stop.message and "95%" in stop.message


def test_a_round_that_changes_breaks_the_stall() -> None:
    changed = _round(("browse", {"query": "hotels in porto"}, "Porto hotels: none available."))
    messages = _history(_stalled(1), _stalled(2), changed, _stalled(3))
    assert check_loop(messages, DEFAULT) is None


def test_a_rephrased_call_with_the_same_result_is_a_stall() -> None:
    queries = ["hotels in lisbon", "lisbon hotels", "hotels lisbon"]
    rounds = [_round(("browse", {"query": q}, PAGE)) for q in queries]
    stop = check_loop(_history(*rounds), DEFAULT)
    assert stop is not None and stop.reason == "no_progress"


def test_one_changed_identifier_with_a_short_acknowledgement_is_progress() -> None:
    rounds = [_round(("delete_file", {"path": f"a{i}.txt"}, "deleted")) for i in range(5)]
    assert check_loop(_history(*rounds), DEFAULT) is None


def test_rounds_calling_other_tools_are_not_stalled() -> None:
    rounds = [_round((f"tool_{i}", {"q": "same"}, PAGE)) for i in range(4)]
    assert check_loop(_history(*rounds), DEFAULT) is None


def test_stall_similarity_threshold_is_configurable() -> None:
    messages = _history(_stalled(1), _stalled(2), _stalled(3))
    assert check_loop(messages, LoopGuardConfig(stall_similarity=1.0)) is None


def test_pollable_tools_are_exempt_from_no_progress() -> None:
    rounds = [_stalled(i, tool="job_status") for i in range(5)]
    assert check_loop(_history(*rounds), LoopGuardConfig(pollable_tools=["job_status"])) is None


def test_pollable_calls_are_left_out_of_a_mixed_rounds_comparison() -> None:
    rounds = [
        _round(
            ("job_status", {"job": "42"}, f'{{"progress": {i * 30}}}'),
            ("browse", {"query": f"hotels in lisbon, attempt {i}"}, PAGE),
        )
        for i in range(3)
    ]
    config = LoopGuardConfig(pollable_tools=["job_status"])
    stop = check_loop(_history(*rounds), config)
    assert stop is not None and (stop.reason, stop.tool) == ("no_progress", "browse")


def test_similarity_of_long_texts_is_bounded_in_time_and_sees_the_middle() -> None:
    head, tail = "x" * 5000, "y" * 5000
    a = head + " ".join(f"word{i}" for i in range(20_000)) + tail
    b = head + " ".join(f"other{i}" for i in range(20_000)) + tail
    started = time.perf_counter()
    assert similarity(a, a + "!") > 0.95
    assert similarity(a, b) < 0.5
    assert time.perf_counter() - started < 2.0
    assert similarity("abc", "abc") == 1.0
    assert similarity(a, b) == similarity(a, b)


# -- token_budget -------------------------------------------------------------------------------


def test_token_budget_is_off_by_default_and_stops_above_the_budget() -> None:
    messages = _history(*_varied(3))
    tokens = conversation_tokens(messages)
    assert check_loop(messages, DEFAULT) is None
    assert check_loop(messages, LoopGuardConfig(token_budget=tokens)) is None
    stop = check_loop(messages, LoopGuardConfig(token_budget=tokens - 1))
    assert stop is not None
    assert (stop.reason, stop.count, stop.limit) == ("token_budget", tokens, tokens - 1)
    assert f"{tokens:,} tokens" in stop.message


def test_token_estimate_counts_tool_call_arguments() -> None:
    short = _history(_round(("f", {"a": 1}, "ok")))
    long = _history(_round(("f", {"a": "z " * 2000}, "ok")))
    assert conversation_tokens(long) > conversation_tokens(short) + 900


# -- finalize_request ---------------------------------------------------------------------------


def test_finalize_request_disables_tools_and_asks_for_an_answer() -> None:
    messages = _history(*_varied(11))
    body: Json = {
        "model": "gpt-x",
        "messages": messages,
        "temperature": 0.1,
        "tools": [{"type": "function", "function": {"name": "tool_0"}}],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "stream": True,
    }
    original = orjson.dumps(body)
    stop = check_loop(messages, DEFAULT)
    assert stop is not None
    final = finalize_request(body, stop)
    assert orjson.dumps(body) == original  # the client's body is not changed
    assert set(final) == {"model", "messages", "temperature", "stream"}
    assert final["messages"][:-1] == messages
    last = final["messages"][-1]
    assert last["role"] == "user"
    assert stop.message in last["content"] and "Do not call any more tools" in last["content"]
