"""The HTTP knowledge base against the fake retriever on a real loopback socket: the contract,
the deadline, failures as RetrievalFailed, and the circuit breaker around it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from gateway.config import BreakerConfig
from gateway.config.knowledge_bases import KnowledgeBaseConfig
from gateway.rag.base import Passage, RetrievalFailed
from gateway.rag.http import HttpKnowledgeBase
from gateway.resilience.breaker import CLOSED, OPEN, Breaker
from gateway.testing.fake_retriever import FakeRetriever

TOKEN = "sk-kb-secret-token-42"

MakeKb = Callable[..., HttpKnowledgeBase]


@pytest.fixture
async def retriever() -> AsyncIterator[FakeRetriever]:
    async with FakeRetriever() as fake:
        yield fake


@pytest.fixture
async def make_kb(retriever: FakeRetriever) -> AsyncIterator[MakeKb]:
    made: list[HttpKnowledgeBase] = []

    def make(
        *,
        token: str | None = TOKEN,
        timeout: float = 2.0,
        failures: int = 3,
        reset: float = 0.2,
        url: str | None = None,
        breaker: Breaker | None = None,
    ) -> HttpKnowledgeBase:
        config = KnowledgeBaseConfig(
            type="http",
            url=url or retriever.url,
            headers={"X-Tenant": "acme"},
            timeout_seconds=timeout,
            breaker=BreakerConfig(failures=failures, reset_seconds=reset),
        )
        breaker = breaker or Breaker("kb:docs", config.breaker)
        kb = HttpKnowledgeBase("docs", config, token, breaker)
        made.append(kb)
        return kb

    yield make
    for kb in made:
        await kb.close()


async def fake_call(fake: FakeRetriever, method: str, path: str, body: Any = None) -> Any:
    """Drive the fake through its HTTP control endpoints, as a benchmark would."""
    url = f"http://{fake.host}:{fake.port}{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=body) as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def configure(fake: FakeRetriever, **knobs: Any) -> None:
    await fake_call(fake, "POST", "/_fake/config", knobs)


async def request_count(fake: FakeRetriever) -> int:
    return len(await fake_call(fake, "GET", "/_fake/requests"))


async def failure(kb: HttpKnowledgeBase, query: str = "refund") -> str:
    with pytest.raises(RetrievalFailed) as info:
        await kb.search(query, None, 4)
    return str(info.value)


# --- the contract ---------------------------------------------------------------------------


async def test_passages_come_back_best_first(make_kb: MakeKb) -> None:
    passages = await make_kb().search("how many days for delivery of my refund", None, 4)
    assert [p.source for p in passages] == [
        "handbook/returns.md",
        "handbook/shipping.md",
    ]
    assert all(isinstance(p, Passage) for p in passages)
    assert passages[0].title == "Returns"
    assert passages[0].score > passages[1].score > 0
    assert all(0 < p.score <= 1 for p in passages)


async def test_sends_query_top_k_name_token_and_headers(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    await make_kb().search("warranty", None, 2)
    (received,) = await fake_call(retriever, "GET", "/_fake/requests")
    assert received["body"] == {"query": "warranty", "top_k": 2, "knowledge_base": "docs"}
    assert received["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert received["headers"]["X-Tenant"] == "acme"
    assert received["headers"]["Content-Type"] == "application/json"


async def test_no_token_no_authorization_header(retriever: FakeRetriever, make_kb: MakeKb) -> None:
    await make_kb(token=None).search("warranty", None, 2)
    (received,) = retriever.received
    assert "Authorization" not in received["headers"]


async def test_results_are_sorted_trimmed_and_extra_fields_ignored(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    await configure(
        retriever,
        results=[
            {"text": "b", "score": 0.2, "source": "b.md", "rank": 2},
            {"text": "a", "score": 0.9, "source": "a.md", "title": None},
            {"text": "c", "score": 0.5, "source": "c.md", "title": "C", "meta": {"x": 1}},
        ],
    )
    passages = await make_kb().search("anything", None, 2)
    assert passages == [
        Passage(text="a", score=0.9, source="a.md"),
        Passage(text="c", score=0.5, source="c.md", title="C"),
    ]


async def test_nothing_overlapping_is_an_empty_answer(make_kb: MakeKb) -> None:
    assert await make_kb().search("zebra quantum", None, 4) == []


async def test_documents_are_set_through_the_knobs(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    await configure(retriever, documents=[{"text": "zebra stripes", "source": "z.txt"}])
    (passage,) = await make_kb().search("zebra", None, 4)
    assert passage == Passage(text="zebra stripes", score=pytest.approx(0.707107), source="z.txt")
    await fake_call(retriever, "POST", "/_fake/reset")
    assert await make_kb().search("zebra", None, 4) == []
    assert await request_count(retriever) == 1  # the reset forgot the first


# --- failures -------------------------------------------------------------------------------


async def test_timeout_is_bounded_by_timeout_seconds(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    await configure(retriever, latency_ms=5_000)
    kb = make_kb(timeout=0.3)
    started = time.monotonic()
    reason = await failure(kb)
    elapsed = time.monotonic() - started
    assert reason == "timed out after 0.3 s"
    assert 0.3 <= elapsed < 0.3 + 0.25


@pytest.mark.parametrize(
    ("knobs", "reason"),
    [
        ({"status": 503}, "HTTP 503"),
        ({"status": 500, "error_body": "<html>oops</html>"}, "HTTP 500"),
        ({"status": 429}, "HTTP 429"),
        ({"status": 404}, "HTTP 404"),
        ({"malformed": True}, "invalid response: not JSON"),
        ({"wrong_shape": True}, "invalid response: results: Field required"),
        ({"results": [{"text": "t", "source": "s"}]}, "invalid response: results.0.score"),
        ({"results": [{"text": "t", "score": 7.5, "source": "s"}]}, "invalid response"),
        ({"results": ["nope"]}, "invalid response: results.0: Input should be a valid dict"),
    ],
)
async def test_bad_answers_are_retrieval_failures(
    retriever: FakeRetriever, make_kb: MakeKb, knobs: dict[str, Any], reason: str
) -> None:
    await configure(retriever, **knobs)
    assert (await failure(make_kb())).startswith(reason)


async def test_unreachable_retriever_is_a_retrieval_failure(make_kb: MakeKb) -> None:
    kb = make_kb(url="http://127.0.0.1:9/search")  # discard port: nothing listens
    assert await failure(kb) == "cannot connect"


async def test_the_token_never_reaches_the_reason(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    kb = make_kb(failures=100)
    echoes = [
        {"status": 500, "error_body": f'{{"error": {{"message": "bad token {TOKEN}"}}}}'},
        {"status": 401, "error_body": f"Unauthorized: Bearer {TOKEN}"},
        {"status": None, "results": [{"text": TOKEN, "source": TOKEN}]},
        {"results": [{"text": "t", "score": TOKEN, "source": "s"}]},
    ]
    for knobs in echoes:
        await configure(retriever, **knobs)
        reason = await failure(kb)
        assert TOKEN not in reason
        assert "Bearer" not in reason


async def test_cancellation_is_not_converted(retriever: FakeRetriever, make_kb: MakeKb) -> None:
    await configure(retriever, latency_ms=5_000)
    kb = make_kb(timeout=5)
    task = asyncio.create_task(kb.search("refund", None, 4))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert kb._breaker.snapshot().failures == 0


# --- the breaker ----------------------------------------------------------------------------


async def test_breaker_opens_and_then_refuses_without_a_request(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    kb = make_kb(failures=3, reset=30)
    await configure(retriever, status=503)
    for _ in range(3):
        assert await failure(kb) == "HTTP 503"
    assert kb._breaker.state == OPEN
    started = time.monotonic()
    assert await failure(kb) == "circuit breaker open"
    assert time.monotonic() - started < 0.05
    assert await request_count(retriever) == 3


async def test_timeouts_count_toward_opening(retriever: FakeRetriever, make_kb: MakeKb) -> None:
    kb = make_kb(failures=2, timeout=0.1, reset=30)
    await configure(retriever, latency_ms=2_000)
    for _ in range(2):
        assert (await failure(kb)).startswith("timed out")
    assert await failure(kb) == "circuit breaker open"
    assert await request_count(retriever) == 2


async def test_invalid_answers_count_toward_opening(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    kb = make_kb(failures=2, reset=30)
    await configure(retriever, malformed=True)
    await failure(kb)
    await configure(retriever, malformed=False, wrong_shape=True)
    await failure(kb)
    assert await failure(kb) == "circuit breaker open"


async def test_one_trial_after_reset_and_its_success_closes(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    kb = make_kb(failures=2, reset=0.2)
    await configure(retriever, status=503)
    for _ in range(2):
        await failure(kb)
    assert await failure(kb) == "circuit breaker open"
    await configure(retriever, status=None, latency_ms=200)
    await asyncio.sleep(0.25)

    # While the trial is in flight, other searches are refused without a request.
    trial = asyncio.create_task(kb.search("refund", None, 4))
    await asyncio.sleep(0.05)
    assert await failure(kb) == "circuit breaker open"
    (passage,) = await trial
    assert passage.source == "handbook/returns.md"
    assert kb._breaker.state == CLOSED
    assert await request_count(retriever) == 3
    await configure(retriever, latency_ms=0)
    assert await kb.search("refund", None, 4)


async def test_failed_trial_reopens(retriever: FakeRetriever, make_kb: MakeKb) -> None:
    kb = make_kb(failures=1, reset=0.2)
    await configure(retriever, status=502)
    await failure(kb)
    await asyncio.sleep(0.25)
    assert await failure(kb) == "HTTP 502"  # the trial
    assert kb._breaker.state == OPEN
    assert await failure(kb) == "circuit breaker open"
    assert await request_count(retriever) == 2


async def test_client_errors_do_not_open_it(retriever: FakeRetriever, make_kb: MakeKb) -> None:
    kb = make_kb(failures=2, reset=30)
    await configure(retriever, status=400)
    for _ in range(5):
        assert await failure(kb) == "HTTP 400"
    assert kb._breaker.state == CLOSED
    assert await request_count(retriever) == 5


async def test_rate_limits_do_open_it(retriever: FakeRetriever, make_kb: MakeKb) -> None:
    kb = make_kb(failures=2, reset=30)
    await configure(retriever, status=429)
    await failure(kb)
    await failure(kb)
    assert await failure(kb) == "circuit breaker open"


async def test_a_success_between_failures_resets_the_count(
    retriever: FakeRetriever, make_kb: MakeKb
) -> None:
    kb = make_kb(failures=2, reset=30)
    await configure(retriever, fail_every_n=2)  # ok, 503, ok, 503, ...
    for _ in range(3):
        assert await kb.search("refund", None, 4)
        assert await failure(kb) == "HTTP 503"
    assert kb._breaker.state == CLOSED


# --- lifetime -------------------------------------------------------------------------------


async def test_start_is_light_and_close_is_idempotent(make_kb: MakeKb) -> None:
    kb = make_kb()
    await kb.start()
    await kb.close()  # never used: nothing to close
    assert await kb.search("refund", None, 1)
    await kb.close()
    await kb.close()
    assert await kb.search("refund", None, 1)  # a new session after close


async def test_fake_config_rejects_unknown_knobs(retriever: FakeRetriever) -> None:
    url = f"http://{retriever.host}:{retriever.port}/_fake/config"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json={"latency": 5}) as resp,
    ):
        assert resp.status == 400
    assert retriever.knobs.latency_ms == 0


async def test_knob_state_is_per_instance(retriever: FakeRetriever) -> None:
    async with FakeRetriever() as other:
        await configure(retriever, status=503)
        assert other.knobs.status is None
