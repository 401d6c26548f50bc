import asyncio
from typing import Any

import orjson
import pytest

from gateway.config.guard import CompressionConfig
from gateway.guard.compression import (
    SUMMARY_PREFIX,
    Compression,
    Compressor,
    shorten_result,
    shorten_tool_results,
)
from gateway.util.tokens import message_text
from tests.chat import tool_round

Json = dict[str, Any]
CONFIG = CompressionConfig(enabled=True)  # max_turns 20, keep_turns 8: steps of 12
SYSTEM: Json = {"role": "system", "content": "You are a careful assistant."}


class FakeSummarizer:
    """Counts calls and keeps their inputs; answers deterministically."""

    def __init__(self, answer: str | None = None) -> None:
        self.inputs: list[list[Json]] = []
        self.answer = answer

    @property
    def calls(self) -> int:
        return len(self.inputs)

    async def __call__(self, messages: list[Json]) -> str:
        self.inputs.append(messages)
        if self.answer is not None:
            return self.answer
        return f"{len(messages)} messages, from {message_text(messages[0])[:30]!r}"


def _chat(turns: int) -> list[Json]:
    """A system prompt and `turns` alternating user and assistant text turns."""
    roles = ["user", "assistant"]
    return [SYSTEM] + [
        {"role": roles[i % 2], "content": f"{roles[i % 2]} turn {i}"} for i in range(turns)
    ]


def _round(n: int, parallel: int = 1, result: str | None = None) -> list[Json]:
    return tool_round(
        [
            (f"call_{n}_{k}", "lookup", {"n": n, "k": k}, result or f"result {n}.{k}")
            for k in range(parallel)
        ]
    )


def _agent(rounds: int, parallel: int = 1) -> list[Json]:
    messages = [SYSTEM, {"role": "user", "content": "Find the cheapest flight to Lisbon."}]
    for n in range(rounds):
        messages += _round(n, parallel=1 + n % parallel)
    return messages


def _assert_valid(messages: list[Json]) -> None:
    """What the OpenAI API checks: known roles, every tool result answers a call of the
    assistant message right before its block, and every call has its result."""
    pending: set[str] = set()
    for m in messages:
        assert m["role"] in {"system", "developer", "user", "assistant", "tool"}
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, m
            pending.remove(m["tool_call_id"])
            continue
        assert not pending, f"calls without results: {pending}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            pending = {c["id"] for c in m["tool_calls"]}
    assert not pending, f"calls without results: {pending}"


def _turns(messages: list[Json]) -> int:
    return sum(1 for m in messages if m["role"] not in {"system", "developer"})


# -- when to compress ---------------------------------------------------------------------------


async def test_histories_up_to_max_turns_are_left_alone() -> None:
    summarize = FakeSummarizer()
    messages = _chat(20)
    result = await Compressor().compress(messages, CONFIG, summarize)
    assert result == Compression(messages)
    assert summarize.calls == 0


async def test_disabled_compression_changes_nothing() -> None:
    summarize = FakeSummarizer()
    messages = _agent(40)
    result = await Compressor().compress(messages, CompressionConfig(), summarize)
    assert result.messages is messages and summarize.calls == 0


async def test_the_oldest_turns_become_one_system_message() -> None:
    summarize = FakeSummarizer()
    messages = _chat(21)
    result = await Compressor().compress(messages, CONFIG, summarize)
    assert summarize.inputs == [messages[1:13]]
    assert result.messages == [
        SYSTEM,
        {"role": "system", "content": SUMMARY_PREFIX + "12 messages, from 'user turn 0'"},
        *messages[13:],
    ]
    assert (result.summarized, result.cache_hit, result.failure) == (12, False, None)
    _assert_valid(result.messages)


async def test_leading_system_and_developer_messages_are_kept() -> None:
    developer: Json = {"role": "developer", "content": "Answer in French."}
    messages = [SYSTEM, developer, *_chat(25)[1:]]
    result = await Compressor().compress(messages, CONFIG, FakeSummarizer())
    assert result.messages[:2] == [SYSTEM, developer]
    assert result.messages[2]["content"].startswith(SUMMARY_PREFIX)


@pytest.mark.parametrize("turns", [21, 25, 31, 32, 43, 44, 100])
async def test_between_keep_turns_and_max_turns_stay_verbatim(turns: int) -> None:
    result = await Compressor().compress(_chat(turns), CONFIG, FakeSummarizer())
    kept = _turns(result.messages)
    assert CONFIG.keep_turns <= kept < CONFIG.max_turns
    assert result.summarized + kept == turns


# -- where to cut -------------------------------------------------------------------------------


async def test_the_cut_moves_back_to_the_assistant_message_of_a_round() -> None:
    # user, then rounds of 1 call + 3 parallel calls: turn 12 is a tool result of round 3.
    messages = [SYSTEM, {"role": "user", "content": "go"}]
    for n in range(8):
        messages += _round(n, parallel=1 if n % 2 == 0 else 3)
    assert messages[1 + 12]["role"] == "tool"
    summarize = FakeSummarizer()
    result = await Compressor().compress(messages, CONFIG, summarize)
    tail = result.messages[3:]  # system, summary, the user message lifted
    assert tail[0]["role"] == "assistant" and tail[0]["tool_calls"]
    assert tail == messages[-len(tail) :]
    _assert_valid(result.messages)
    _assert_valid(summarize.inputs[0])


@pytest.mark.parametrize("parallel", [1, 2, 3, 5])
async def test_every_compressed_agent_history_is_valid(parallel: int) -> None:
    for rounds in range(8, 40):
        summarize = FakeSummarizer()
        messages = _agent(rounds, parallel)
        result = await Compressor().compress(messages, CONFIG, summarize)
        _assert_valid(result.messages)
        for given in summarize.inputs:
            _assert_valid(given)
        failed = await Compressor().compress(messages, CONFIG, FakeSummarizer(answer=""))
        _assert_valid(failed.messages)


async def test_the_last_user_message_is_kept_verbatim_after_the_summary() -> None:
    messages = _agent(15)  # the user message is the first turn of 31
    result = await Compressor().compress(messages, CONFIG, FakeSummarizer())
    assert result.messages[0] == SYSTEM
    assert result.messages[1]["content"].startswith(SUMMARY_PREFIX)
    assert result.messages[2] == messages[1]
    assert result.summarized == 10  # the cut at turn 12 moved back to round 5's call
    _assert_valid(result.messages)


# -- the summary cache --------------------------------------------------------------------------


async def test_the_same_prefix_is_summarized_once() -> None:
    compressor, summarize = Compressor(), FakeSummarizer()
    first = await compressor.compress(_chat(25), CONFIG, summarize)
    second = await compressor.compress(_chat(25), CONFIG, summarize)
    assert summarize.calls == 1
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert first.messages == second.messages


async def test_a_growing_agent_loop_pays_once_per_step() -> None:
    compressor, summarize = Compressor(), FakeSummarizer()
    messages = [SYSTEM, {"role": "user", "content": "go"}]
    hits = []
    for n in range(20):  # each request adds one round: two turns
        messages = messages + _round(n)
        result = await compressor.compress(messages, CONFIG, summarize)
        _assert_valid(result.messages)
        if _turns(messages) > CONFIG.max_turns:
            hits.append(result.cache_hit)
    # 21..41 turns: prefixes of 12 turns (21..31), then of 24 (33..41).
    assert summarize.calls == 2
    assert hits == [False] + [True] * 5 + [False] + [True] * 4
    # The second summary starts from the first: its input is about one step long.
    assert summarize.inputs[1][0]["content"].startswith(SUMMARY_PREFIX)
    assert len(summarize.inputs[1]) == 1 + 12


async def test_the_scope_separates_cached_summaries() -> None:
    compressor, summarize = Compressor(), FakeSummarizer()
    await compressor.compress(_chat(25), CONFIG, summarize, scope="tenant-a")
    await compressor.compress(_chat(25), CONFIG, summarize, scope="tenant-b")
    await compressor.compress(
        _chat(25), CONFIG.model_copy(update={"summarizer_model": "x"}), summarize, scope="tenant-a"
    )
    assert summarize.calls == 3


async def test_the_cache_keeps_the_most_recently_used_summaries() -> None:
    config = CONFIG.model_copy(update={"summary_cache_entries": 2})
    compressor, summarize = Compressor(), FakeSummarizer()
    histories = [
        [SYSTEM, {"role": "user", "content": f"conversation {i}"}, *_chat(24)[1:]] for i in range(3)
    ]
    for messages in histories:
        await compressor.compress(messages, config, summarize)
    assert len(compressor) == 2 and summarize.calls == 3
    assert (await compressor.compress(histories[2], config, summarize)).cache_hit
    assert not (await compressor.compress(histories[0], config, summarize)).cache_hit
    assert len(compressor) == 2 and summarize.calls == 4


# -- when summarizing fails ---------------------------------------------------------------------


async def _fail(messages: list[Json]) -> str:
    raise RuntimeError("upstream 503")


async def test_a_failing_summarizer_keeps_the_system_messages_and_the_last_turns() -> None:
    messages = _chat(25)
    result = await Compressor().compress(messages, CONFIG, _fail)
    assert result.messages == [SYSTEM, *messages[-8:]]
    assert (result.failure, result.detail) == ("error", "RuntimeError: upstream 503")
    assert (result.summarized, result.dropped) == (0, 17)


async def test_a_slow_summarizer_times_out() -> None:
    async def slow(messages: list[Json]) -> str:
        await asyncio.sleep(10)
        return "late"

    result = await Compressor().compress(_chat(25), CONFIG, slow, timeout=0.01)
    assert result.failure == "timeout" and _turns(result.messages) == 8


async def test_an_empty_summary_is_a_failure_and_is_not_cached() -> None:
    compressor = Compressor()
    result = await compressor.compress(_chat(25), CONFIG, FakeSummarizer(answer="  "))
    assert result.failure == "empty" and len(compressor) == 0


async def test_failures_are_not_cached() -> None:
    compressor, summarize = Compressor(), FakeSummarizer()
    await compressor.compress(_chat(25), CONFIG, _fail)
    result = await compressor.compress(_chat(25), CONFIG, summarize)
    assert result.failure is None and summarize.calls == 1


async def test_the_fallback_keeps_the_last_user_message_and_whole_rounds() -> None:
    messages = _agent(15, parallel=3)
    result = await Compressor().compress(messages, CONFIG, _fail)
    assert result.messages[:2] == messages[:2]
    assert result.messages[2]["role"] == "assistant"
    assert _turns(result.messages) >= CONFIG.keep_turns + 1
    _assert_valid(result.messages)


async def test_cancellation_is_not_swallowed() -> None:
    started = asyncio.Event()

    async def hang(messages: list[Json]) -> str:
        started.set()
        await asyncio.sleep(10)
        return "never"

    task = asyncio.create_task(Compressor().compress(_chat(25), CONFIG, hang))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- shortening old tool results ----------------------------------------------------------------

BIG_JSON = orjson.dumps(
    {
        "id": "flight-42",
        "price": 189.5,
        "direct": True,
        "note": None,
        "description": "d" * 1000,
        "segments": [{"from": "BER", "to": "LIS"}] * 30,
        "fare": {"class": "Y", "rules": "x" * 500},
    }
).decode()


def _with_results(*results: str) -> list[Json]:
    messages = [SYSTEM, {"role": "user", "content": "go"}]
    for n, result in enumerate(results):
        messages += _round(n, result=result)
    return messages


def test_json_results_keep_their_key_fields() -> None:
    short = orjson.loads(shorten_result(BIG_JSON, 600))
    assert short["id"] == "flight-42" and short["price"] == 189.5
    assert short["direct"] is True and short["note"] is None
    assert short["segments"] == "<list of 30 items, removed>"
    assert short["fare"] == "<object with 2 fields, removed>"
    assert short["description"].startswith("d" * 200 + "... <800 characters removed>")
    assert "shortened by the gateway" in short["_gateway"]


def test_json_results_with_many_fields_stay_near_the_limit() -> None:
    doc = {f"field_{i}": i for i in range(200)}
    short = orjson.loads(shorten_result(orjson.dumps(doc).decode(), 200))
    assert list(short)[:3] == ["field_0", "field_1", "field_2"]
    assert short["_gateway"].endswith(f"{200 - len(short) + 1} more fields omitted")
    assert len(orjson.dumps({k: v for k, v in short.items() if k != "_gateway"})) <= 200


def test_text_results_keep_head_and_tail_around_a_marker() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    short = shorten_result(text, 300)
    assert short.startswith(text[:200]) and short.endswith(text[-100:])
    removed = len(text) - 300
    assert f"[... {removed:,} characters removed by the gateway ...]" in short


def test_only_results_older_than_the_last_two_rounds_are_shortened() -> None:
    long_text = "t" * 2000
    messages = _with_results(BIG_JSON, "short", long_text, long_text, long_text)
    shortened, count = shorten_tool_results(messages, 600)
    assert count == 2  # rounds 0 and 2; round 1 is short, rounds 3 and 4 are the last two
    results = [m for m in shortened if m["role"] == "tool"]
    assert orjson.loads(results[0]["content"])["id"] == "flight-42"
    assert results[1]["content"] == "short"
    assert "characters removed by the gateway" in results[2]["content"]
    assert results[3]["content"] == results[4]["content"] == long_text
    assert messages[2 + 1]["content"] == BIG_JSON  # the input is not changed
    _assert_valid(shortened)


def test_a_result_just_over_the_limit_is_left_alone() -> None:
    messages = _with_results("a" * 620, "b", "c")
    assert shorten_tool_results(messages, 600) == (messages, 0)


def test_two_rounds_or_fewer_are_never_shortened() -> None:
    messages = _with_results(BIG_JSON, BIG_JSON)
    assert shorten_tool_results(messages, 100) == (messages, 0)


async def test_shortening_applies_below_the_turn_threshold_and_can_be_turned_off() -> None:
    messages = _with_results(BIG_JSON, BIG_JSON, BIG_JSON)
    result = await Compressor().compress(messages, CONFIG, FakeSummarizer())
    assert result.shortened == 1 and result.summarized == 0
    off = CONFIG.model_copy(update={"shorten_tool_results": False})
    assert (await Compressor().compress(messages, off, FakeSummarizer())).messages is messages


# -- determinism --------------------------------------------------------------------------------


async def test_compression_is_deterministic() -> None:
    messages = _with_results(*[BIG_JSON if n % 2 else "r" * 900 for n in range(14)])
    original = orjson.dumps(messages)
    first = await Compressor().compress(messages, CONFIG, FakeSummarizer())
    second = await Compressor().compress(messages, CONFIG, FakeSummarizer())
    assert orjson.dumps(first.messages) == orjson.dumps(second.messages)
    assert first.shortened > 0 and first.summarized > 0
    assert orjson.dumps(messages) == original
    _assert_valid(first.messages)
