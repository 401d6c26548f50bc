"""The cache stage's decisions, with a scripted embedder so similarities are exact."""

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.cache.embedded_store import EmbeddedStore
from gateway.cache.service import SemanticCache, cacheable
from gateway.cache.store import CacheEntry
from gateway.config import CachePolicy, ModelRoute
from gateway.context import RequestContext
from gateway.wire import chat_completion, usage

DIM = 8


class ScriptedEmbedder:
    """Known texts get chosen vectors; others a vector orthogonal to all of them."""

    name = "scripted"
    dim = DIM

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.calls = 0

    async def start(self) -> None:
        return None

    async def embed(self, text: str) -> np.ndarray:
        self.calls += 1
        v = self.vectors.get(text, np.eye(DIM, dtype=np.float32)[-1])
        return (v / np.linalg.norm(v)).astype(np.float32)

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        return np.stack([await self.embed(t) for t in texts])


BASE = np.eye(DIM, dtype=np.float32)[0]
CLOSE = BASE + 0.2 * np.eye(DIM, dtype=np.float32)[1]  # cosine ~0.98
FAR = BASE + 0.6 * np.eye(DIM, dtype=np.float32)[1]  # cosine ~0.86
EMBEDDER = ScriptedEmbedder(
    {
        "How do I reset my password?": BASE,
        "How can I reset my password?": CLOSE,
        "How do I change my password?": FAR,
        "How do I not reset my password?": CLOSE,
    }
)
ANSWER = chat_completion(
    "m", {"role": "assistant", "content": "Use the link."}, "stop", usage(9, 3)
)


def _route(**policy: Any) -> ModelRoute:
    return ModelRoute("m", "p", "m", "chat", CachePolicy(enabled=True, **policy))


def _body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


def _ctx(tenant: str = "t") -> RequestContext:
    return RequestContext(request_id="r", endpoint="chat", tenant=tenant)


@pytest.fixture
async def cache() -> AsyncIterator[SemanticCache]:
    semantic = SemanticCache(EmbeddedStore(None, 100, 1000), EMBEDDER)
    await semantic.start()
    await semantic.wait_ready()
    yield semantic
    await semantic.close()


async def _fill(cache: SemanticCache, text: str, tenant: str = "t", **extra: Any) -> None:
    ctx = _ctx(tenant)
    plan = cache.plan(ctx, _route(), _body(text, **extra), "default")
    assert plan is not None and await cache.lookup(ctx, plan) is None
    cache.keep(ctx, plan, ANSWER)
    await cache.flush()


async def _ask(
    cache: SemanticCache,
    text: str,
    tenant: str = "t",
    directive: Any = "default",
    route: ModelRoute | None = None,
    **extra: Any,
) -> RequestContext:
    ctx = _ctx(tenant)
    plan = cache.plan(ctx, route or _route(), _body(text, **extra), directive)
    if plan is not None:
        await cache.lookup(ctx, plan)
    return ctx


async def test_exact_then_semantic_hits(cache: SemanticCache) -> None:
    await _fill(cache, "How do I reset my password?")
    calls = EMBEDDER.calls
    exact = await _ask(cache, "How do I reset my password?")
    assert exact.cache_result == "hit-exact" and EMBEDDER.calls == calls  # no embedding needed
    close = await _ask(cache, "How can I reset my password?")
    assert close.cache_result == "hit-semantic" and close.cache_similarity == pytest.approx(
        0.98, abs=0.01
    )
    assert close.embedding is not None  # kept for later stages


async def test_below_threshold_is_a_miss_with_its_similarity(cache: SemanticCache) -> None:
    await _fill(cache, "How do I reset my password?")
    far = await _ask(cache, "How do I change my password?")
    assert far.cache_result == "miss" and far.cache_similarity == pytest.approx(0.86, abs=0.01)
    # Above a lower bar it is a candidate, and the guards refuse it: "change" is not a
    # near-synonym of "reset" (issue 15: a word replaced by a non-synonym is a difference).
    lowered = await _ask(
        cache, "How do I change my password?", route=_route(similarity_threshold=0.8)
    )
    assert lowered.cache_result == "miss" and lowered.cache_near_miss == "substitution"


async def test_a_guarded_near_miss_never_hits(cache: SemanticCache) -> None:
    await _fill(cache, "How do I reset my password?")
    ctx = await _ask(cache, "How do I not reset my password?")
    assert ctx.cache_result == "miss" and ctx.cache_near_miss == "negation"


async def test_scope_is_exact(cache: SemanticCache) -> None:
    await _fill(cache, "How do I reset my password?")
    assert (await _ask(cache, "How do I reset my password?", tenant="u")).cache_result == "miss"
    assert (
        await _ask(cache, "How do I reset my password?", temperature=0.5)
    ).cache_result == "miss"


@pytest.mark.parametrize(
    ("directive", "extra", "route", "result"),
    [
        ("bypass", {}, None, "bypass"),
        ("refresh", {}, None, "refresh"),
        ("default", {"n": 2}, None, "bypass"),
        ("default", {"temperature": 1.5}, None, "bypass"),
        ("default", {}, ModelRoute("m", "p", "m", "chat", CachePolicy(enabled=False)), None),
    ],
)
async def test_requests_that_skip_the_cache(
    cache: SemanticCache,
    directive: Any,
    extra: dict[str, Any],
    route: ModelRoute | None,
    result: str | None,
) -> None:
    await _fill(cache, "How do I reset my password?")
    ctx = await _ask(
        cache, "How do I reset my password?", directive=directive, route=route, **extra
    )
    assert ctx.cache_result == result


async def test_exact_tier_only_when_semantic_is_off(cache: SemanticCache) -> None:
    await _fill(cache, "How do I reset my password?")
    ctx = await _ask(cache, "How can I reset my password?", route=_route(semantic=False))
    assert ctx.cache_result == "miss" and ctx.embedding is None


def _with(message: dict[str, Any], finish: str = "stop", choices: int = 1) -> dict[str, Any]:
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {"choices": [choice] * choices}


@pytest.mark.parametrize(
    ("completion", "policy", "expected"),
    [
        (_with({"content": "ok"}), CachePolicy(), True),
        (_with({"content": "ok"}, finish="length"), CachePolicy(), False),
        (_with({"content": "ok"}, finish="content_filter"), CachePolicy(), False),
        (_with({"content": "ok"}, choices=2), CachePolicy(), False),
        (_with({"content": "  "}), CachePolicy(), False),
        (_with({"content": None, "tool_calls": [{"id": "c"}]}, "tool_calls"), CachePolicy(), False),
        (
            _with({"content": None, "tool_calls": [{"id": "c"}]}, "tool_calls"),
            CachePolicy(cache_tool_calls=True),
            True,
        ),
        ({"error": {"message": "x"}}, CachePolicy(), False),
    ],
)
def test_only_complete_answers_are_cacheable(
    completion: dict[str, Any], policy: CachePolicy, expected: bool
) -> None:
    assert cacheable(completion, policy) is expected


async def test_expired_entries_are_misses(cache: SemanticCache) -> None:
    ctx = _ctx()
    plan = cache.plan(ctx, _route(ttl_seconds=1), _body("How do I reset my password?"), "default")
    assert plan is not None
    cache.keep(ctx, plan, ANSWER)
    await cache.flush()
    entry = await cache.store.get(plan.key.exact, time.time() + 2)
    assert entry is None


async def test_a_kept_answer_is_served_at_once_before_its_write(cache: SemanticCache) -> None:
    ctx = _ctx()
    plan = cache.plan(ctx, _route(), _body("How do I reset my password?"), "default")
    assert plan is not None and await cache.lookup(ctx, plan) is None
    cache.keep(ctx, plan, ANSWER)  # no flush: the durable write is still pending
    assert (await _ask(cache, "How do I reset my password?")).cache_result == "hit-exact"
    assert (await _ask(cache, "How can I reset my password?")).cache_result == "hit-semantic"
    await cache.flush()


async def test_without_a_lookup_vector_the_exact_key_is_served_at_once(
    cache: SemanticCache,
) -> None:
    ctx = _ctx()
    plan = cache.plan(ctx, _route(), _body("How do I reset my password?"), "refresh")
    assert plan is not None and await cache.lookup(ctx, plan) is None and ctx.embedding is None
    cache.keep(ctx, plan, ANSWER)
    assert (await _ask(cache, "How do I reset my password?")).cache_result == "hit-exact"
    await cache.flush()  # the vector is computed in the background, then joins
    assert (await _ask(cache, "How can I reset my password?")).cache_result == "hit-semantic"


DOCUMENT = "Quarterly report. " + "Revenue grew in every region we serve. " * 40


async def test_texts_longer_than_the_window_use_the_exact_tier_only() -> None:
    """Two prompts sharing a long document and differing in the last instruction embed alike
    (the model reads only its window): the semantic tier must not judge them."""
    summarize, translate = DOCUMENT + "Summarize it.", DOCUMENT + "Translate it to French."
    embedder = ScriptedEmbedder({summarize: BASE, translate: BASE})  # what truncation does
    cache = SemanticCache(EmbeddedStore(None, 100, 1000), embedder)
    await cache.start()
    await cache.wait_ready()
    try:
        route = _route(semantic_max_chars=1000)
        ctx = _ctx()
        plan = cache.plan(ctx, route, _body(summarize), "default")
        assert plan is not None and await cache.lookup(ctx, plan) is None
        assert ctx.cache_exact_only == "long-text" and ctx.embedding is None
        ctx.embedding = BASE  # a router's vector of the same text is not stored either
        cache.keep(ctx, plan, ANSWER)
        await cache.flush()
        assert cache.store.best_similarity(plan.key.scope, BASE, "scripted") is None
        other = await _ask(cache, translate, route=route)
        assert other.cache_result == "miss" and other.cache_exact_only == "long-text"
        assert (await _ask(cache, summarize, route=route)).cache_result == "hit-exact"
        short = await _ask(cache, "How do I reset my password?", route=route)
        assert short.cache_exact_only is None
    finally:
        await cache.close()


async def test_near_miss_guards_never_compare_past_the_cap(
    cache: SemanticCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.matching import decision

    compared: list[int] = []
    real = decision.check

    def recording(query: str, cached: str) -> tuple[str | None, str | None]:
        compared.append(max(len(query), len(cached)))
        return real(query, cached)

    monkeypatch.setattr(decision, "check", recording)
    ctx = _ctx()
    plan = cache.plan(ctx, _route(), _body("How can I reset my password?"), "default")
    assert plan is not None
    long_entry = CacheEntry(  # an entry stored before the cap existed, vector and all
        scope=plan.key.scope,
        exact_key="old",
        tenant="t",
        model="m",
        text="How do I reset my password? " + "x" * 5000,
        response=ANSWER,
        expires_at=time.time() + 60,
        vector=BASE,
        embedder="scripted",
    )
    await cache.store.put(long_entry)
    assert await cache.lookup(ctx, plan) is None and compared == []
    await _fill(cache, "How do I reset my password?")
    assert (await _ask(cache, "How can I reset my password?")).cache_result == "hit-semantic"
    assert compared and max(compared) <= CachePolicy().semantic_max_chars


def test_the_exact_key_of_a_long_text_is_linear_and_tells_tails_apart() -> None:
    from gateway.cache.bounds import NORMALIZED_CHARS, exact_text

    head = "Shared document. " * (NORMALIZED_CHARS // 8)
    one, two = head + "Question 1?", head + "Question 2?"
    assert exact_text(one) != exact_text(two) and exact_text(one) == exact_text(one)
    short = "How do I reset my password?"
    from gateway.cache.normalization import normalize

    assert exact_text(short) == normalize(short)  # short texts: exactly as before


async def test_long_work_runs_off_the_event_loop(
    cache: SemanticCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from gateway.cache import service
    from gateway.matching import decision

    threads: dict[str, set[str]] = {"key": set(), "near_miss": set()}
    real_text, real_check = service.exact_text, decision.check

    def exact_text(text: str) -> str:
        threads["key"].add(threading.current_thread().name)
        return real_text(text)

    def check(query: str, cached: str) -> tuple[str | None, str | None]:
        threads["near_miss"].add(threading.current_thread().name)
        return real_check(query, cached)

    monkeypatch.setattr(service, "exact_text", exact_text)
    monkeypatch.setattr(decision, "check", check)
    stored = "How do I reset my password? " + "Please explain every step. " * 10
    asked = "How can I reset my password? " + "Please explain every step. " * 10
    EMBEDDER.vectors |= {stored: BASE, asked: CLOSE}
    ctx = _ctx()
    ctx.body_bytes = 5_000_000  # as the handler measured it
    plan = await cache.prepare(ctx, _route(), _body(stored), "default")
    assert plan is not None and await cache.lookup(ctx, plan) is None
    cache.keep(ctx, plan, ANSWER)
    small = _ctx()
    small.body_bytes = 300
    assert await cache.prepare(small, _route(), _body("hi"), "default") is not None
    ctx = _ctx()
    plan = cache.plan(ctx, _route(), _body(asked), "default")
    assert plan is not None
    assert await cache.lookup(ctx, plan) is not None  # a semantic hit, guards run long
    main = threading.current_thread().name
    assert threads["key"] == {"gateway-cpu", main}  # the 5 MB body's, and the small ones
    assert threads["near_miss"] == {"gateway-cpu"}


class CountingEmbedder(ScriptedEmbedder):
    """Records each text it embeds."""

    def __init__(self) -> None:
        super().__init__(EMBEDDER.vectors)
        self.texts: list[str] = []

    async def embed(self, text: str) -> np.ndarray:
        self.texts.append(text)
        return await super().embed(text)


async def test_a_miss_in_an_empty_scope_embeds_nothing_until_the_scope_has_company(
    tmp_path: Path,
) -> None:
    embedder = CountingEmbedder()
    cache = SemanticCache(EmbeddedStore(str(tmp_path / "c.sqlite3"), 100, 1000), embedder)
    await cache.start()
    await cache.wait_ready()
    try:
        await _fill(cache, "How do I reset my password?")  # first in its scope: no vector
        await _fill(cache, "How do I reset my password?", tenant="other")  # another scope
        assert embedder.texts == []
        close = await _ask(cache, "How can I reset my password?")
        assert close.cache_result == "hit-semantic"  # the stored one was embedded to compare
        assert embedder.texts == ["How can I reset my password?", "How do I reset my password?"]
        await _ask(cache, "How can I reset my password?")
        assert embedder.texts[2:] == ["How can I reset my password?"]  # its vector was kept
    finally:
        await cache.close()
    reopened = SemanticCache(EmbeddedStore(str(tmp_path / "c.sqlite3"), 100, 1000), embedder)
    await reopened.start()
    await reopened.wait_ready()
    try:  # the added vector was written: only the question is embedded after a restart
        assert (await _ask(reopened, "How can I reset my password?")).cache_result == "hit-semantic"
        assert embedder.texts[3:] == ["How can I reset my password?"]
        # the other tenant's entry is still without a vector, embedded when its scope is asked
        await _ask(reopened, "How can I reset my password?", tenant="other")
        assert embedder.texts[4:] == ["How can I reset my password?", "How do I reset my password?"]
    finally:
        await reopened.close()


async def test_a_router_vector_is_stored_even_in_an_empty_scope(cache: SemanticCache) -> None:
    ctx = _ctx()
    plan = cache.plan(ctx, _route(), _body("How do I reset my password?"), "default")
    assert plan is not None
    ctx.embedding = await EMBEDDER.embed("How do I reset my password?")  # the router's
    assert await cache.lookup(ctx, plan) is None
    cache.keep(ctx, plan, ANSWER)
    await cache.flush()
    calls = EMBEDDER.calls
    assert (await _ask(cache, "How can I reset my password?")).cache_result == "hit-semantic"
    assert EMBEDDER.calls == calls + 1  # the question only


async def test_a_stored_text_too_long_to_judge_is_never_embedded(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    cache = SemanticCache(EmbeddedStore(None, 100, 1000), embedder)
    await cache.start()
    await cache.wait_ready()
    long_text = "How do I reset my password? " + "Some detail. " * 60
    try:
        ctx = _ctx()
        plan = cache.plan(ctx, _route(semantic_max_chars=200), _body(long_text), "default")
        assert plan is not None and await cache.lookup(ctx, plan) is None
        cache.keep(ctx, plan, ANSWER)
        await cache.flush()
        for _ in range(2):
            await _ask(cache, "How can I reset my password?", route=_route(semantic_max_chars=200))
        assert long_text not in embedder.texts
    finally:
        await cache.close()
