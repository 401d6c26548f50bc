"""The verified cache end to end (issue 21): the real OpenAI SDK, the gateway on a socket, the
real MiniLM embedder, and the fake upstream scripted to give one answer per meaning (a
`Fault` that maps each question of tests/e2e/data/paraphrase_pairs.jsonl to its meaning's
answer). Same-meaning questions get the same answer; close-but-different ones get another, so
the truth of every semantic hit is known: it is wrong when the answer served is not the
question's own meaning's answer.

Each case has a model of its own (verdict windows are per model) in one gateway."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.http.keys import CACHE as CACHE_KEY
from gateway.testing.fake_upstream import FakeUpstream, Knobs, Received
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import poll_until, request

Json = dict[str, Any]
DATA = Path(__file__).parent / "data" / "paraphrase_pairs.jsonl"
ADMIN_ENV, ADMIN_KEY = "VERIFY_E2E_ADMIN_KEY", "verify-e2e-admin"
VERDICT_WAIT = 30.0  # seconds at most for background verdicts (the deadline, not a timing)


LOOSE = 0.72  # a threshold low enough that some close-but-different questions hit


def _verify(**fields: Any) -> Json:
    return {"sample_rate": 1.0, "max_per_minute": 100_000, **fields}


def _loose(**fields: Any) -> Json:
    return {"similarity_threshold": LOOSE, "verify": _verify(**fields)}


MODELS = [
    # measure only: every semantic hit verified, nothing acted on
    {"name": "measured", "provider": "fake", "cache": _loose(adapt=False)},
    {"name": "marking", "provider": "fake", "cache": _loose(adapt=True)},
    {"name": "adapting", "provider": "fake", "cache": _loose(adapt=True)},
    {"name": "shadowed", "provider": "fake", "cache": _loose(adapt=False)},
    {"name": "streamed", "provider": "fake", "cache": _loose(adapt=False)},
]


@dataclass(frozen=True)
class Pair:
    first: str
    second: str
    same: bool


def _pairs() -> list[Pair]:
    lines = DATA.read_text(encoding="utf-8").splitlines()
    return [Pair(**json.loads(line)) for line in lines if line.strip()]


def _meanings(pairs: list[Pair]) -> dict[str, int]:
    """Each question's meaning id: same-meaning pairs joined (union-find over the texts)."""
    parent: dict[str, str] = {}

    def root(text: str) -> str:
        parent.setdefault(text, text)
        while parent[text] != text:
            text = parent[text]
        return text

    for pair in pairs:
        a, b = root(pair.first), root(pair.second)
        if pair.same:
            parent[b] = a
    roots = sorted({root(text) for text in parent})
    ids = {text: number for number, text in enumerate(roots, start=1)}
    meanings = {text: ids[root(text)] for text in parent}
    for pair in pairs:  # the fixture is consistent: a different pair never shares a meaning
        assert (meanings[pair.first] == meanings[pair.second]) == pair.same, pair
    return meanings


def answer_of(meaning: int) -> str:
    return f"Reference answer number {meaning} for this question, as the upstream gives it."


@dataclass
class Script:
    """The fake upstream's scripted answers: a question's meaning's answer, unless `shadow`
    names another for it (what a changed upstream would say), and `slow` questions wait for
    `release` before answering (a slow shadow call held in flight)."""

    meanings: dict[str, int]
    shadow: dict[str, str] = field(default_factory=dict)
    slow: set[str] = field(default_factory=set)
    release: asyncio.Event | None = None
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    async def __call__(self, received: Received) -> Knobs | None:
        messages = received.body.get("messages") or []
        text = str(messages[-1].get("content")) if messages else ""
        if text not in self.meanings:
            return None
        content = self.shadow.get(text) or answer_of(self.meanings[text])
        if text in self.slow:
            self.started.append(text)
            if self.release is None:
                self.release = asyncio.Event()
            await self.release.wait()
            self.finished.append(text)
        return received.knobs.model_copy(update={"content": content})


def _diverge(script: Script, pairs: list[Pair], every: int) -> list[Pair]:
    """Every `every`-th same-meaning pair's second question answered as a meaning of its own:
    the upstream's truth differs from what the questions' wording suggests, so a hit on it is
    wrong (the case real traffic has when the guards let a different question through)."""
    chosen = [p for p in pairs if p.same][::every]
    for pair in chosen:
        script.meanings[pair.second] = 10_000 + len(script.meanings)
    return chosen


@pytest.fixture(scope="module")
def pairs() -> list[Pair]:
    return _pairs()


@pytest.fixture(scope="module")
def meanings(pairs: list[Pair]) -> dict[str, int]:
    return _meanings(pairs)


@pytest.fixture(scope="module")
def verifying_gateway(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    cache = {
        "store": {"type": "memory"},
        "embedder": {"type": "minilm"},
        "defaults": {"enabled": True},
    }
    extra = {
        "models": MODELS,
        "cache": cache,
        "auth": {"admin_key_env": ADMIN_ENV},
        "server": {"max_body_bytes": 65536, "access_log": False},
    }
    settings = settings_for(fake.url, extra, {ADMIN_ENV: ADMIN_KEY})
    with running_gateway(server_thread, settings) as gateway:
        service = gateway.app[CACHE_KEY]
        assert service is not None
        server_thread.call(service.wait_ready(), timeout=120)
        assert service.embedder_ready, service.embedder_error
        yield gateway


@pytest.fixture
def script(fake_upstream: FakeUpstream, meanings: dict[str, int]) -> Iterator[Script]:
    scripted = Script(dict(meanings))
    fake_upstream.inject(scripted)
    yield scripted
    fake_upstream.inject(None)


@pytest.fixture
def vgw(verifying_gateway: GatewayServer, script: Script) -> GatewayServer:
    return verifying_gateway


def _ask(gw: GatewayServer, model: str, text: str, stream: bool = False) -> tuple[str, str]:
    """The answer served and its x-gateway-cache header."""
    client: openai.OpenAI = sdk_client(gw.url)
    messages: Any = [{"role": "user", "content": text}]
    if stream:
        with client.chat.completions.with_streaming_response.create(
            model=model, messages=messages, stream=True
        ) as raw:
            kind = raw.headers.get("x-gateway-cache", "")
            parts = [chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices]
        return "".join(parts), kind
    response = client.chat.completions.with_raw_response.create(model=model, messages=messages)
    return response.parse().choices[0].message.content or "", response.headers.get(
        "x-gateway-cache", ""
    )


def _settle(gw: GatewayServer, server_thread: ServerThread) -> None:
    cache = gw.app[CACHE_KEY]
    assert cache is not None
    server_thread.call(cache.flush())


def _admin(gw: GatewayServer, method: str, path: str) -> Json:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    resp = asyncio.run(request(method, gw.url + path, headers=headers))
    assert resp.status == 200, resp.text
    found: Json = resp.json()
    return found


def _verification(gw: GatewayServer, model: str) -> Json:
    state: Json = _admin(gw, "GET", "/admin/cache/stats")["verification"].get(model, {})
    return state


def _verified(gw: GatewayServer, model: str) -> int:
    return int(_verification(gw, model).get("precision", {}).get("verified", 0))


def _wait_verified(gw: GatewayServer, model: str, count: int) -> None:
    assert poll_until(lambda: _verified(gw, model) >= count, timeout=VERDICT_WAIT), (
        _verification(gw, model),
        count,
    )


def _shadow_calls(gw: GatewayServer, model: str, outcome: str) -> float:
    text = asyncio.run(request("GET", gw.url + "/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gateway_cache_shadow_calls_total" and sample.labels == {
                "model": model,
                "outcome": outcome,
            }:
                return float(sample.value)
    return 0.0


def _asked(fake: FakeUpstream, model: str, text: str) -> int:
    """How many chat requests for `text` the upstream received for `model`."""
    return sum(
        1
        for r in list(fake.received)
        if r["path"] == "/v1/chat/completions"
        and r["body"].get("model") == model
        and (r["body"].get("messages") or [{}])[-1].get("content") == text
    )


# --- 1. the estimate converges on the truth -------------------------------------------------


def test_the_estimate_is_the_precision_of_the_hits_served(
    vgw: GatewayServer, server_thread: ServerThread, script: Script, pairs: list[Pair]
) -> None:
    _diverge(script, pairs, every=4)
    meanings = script.meanings
    served = wrong = 0
    for pair in pairs:
        _ask(vgw, "measured", pair.first)
        _settle(vgw, server_thread)
        content, kind = _ask(vgw, "measured", pair.second)
        if kind == "hit-semantic":
            served += 1
            wrong += content != answer_of(meanings[pair.second])
    assert served >= 30 and wrong >= 3, (served, wrong)  # the traffic exercises both sides
    _wait_verified(vgw, "measured", served)
    state = _verification(vgw, "measured")
    precision = state["precision"]
    assert precision["verified"] == served
    truth = 1 - wrong / served
    assert abs(precision["point"] - truth) <= 0.05, (precision, truth)
    assert precision["lower"] < precision["point"]
    # measure only: the threshold did not move although the budget is exceeded
    assert state["effective_threshold"] == state["configured_threshold"]


# --- 2. a wrong entry is not served again for its question ----------------------------------


def test_a_wrong_hit_found_is_not_served_again_for_its_question(
    vgw: GatewayServer,
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    script: Script,
    pairs: list[Pair],
) -> None:
    meanings = script.meanings
    for pair in (p for p in pairs if p.same):
        script.meanings[pair.second] = 20_000 + len(script.meanings)  # a hit on it is wrong
        _ask(vgw, "marking", pair.first)
        _settle(vgw, server_thread)
        before = _verified(vgw, "marking")
        content, kind = _ask(vgw, "marking", pair.second)
        if kind == "hit-semantic" and content != answer_of(meanings[pair.second]):
            break
        if kind == "hit-semantic":
            _wait_verified(vgw, "marking", before + 1)
    else:
        pytest.fail("no close-but-different question got a (wrong) semantic hit")
    right = answer_of(meanings[pair.second])
    _wait_verified(vgw, "marking", before + 1)
    assert _verification(vgw, "marking")["precision"]["disagreements"] >= 1
    _settle(vgw, server_thread)
    asked = _asked(fake_upstream, "marking", pair.second)
    content, kind = _ask(vgw, "marking", pair.second)
    assert kind == "miss" and content == right
    assert _asked(fake_upstream, "marking", pair.second) == asked + 1
    _settle(vgw, server_thread)
    near_copy = pair.second.rstrip("?") + " please?"
    script.meanings[near_copy] = meanings[pair.second]
    content, kind = _ask(vgw, "marking", near_copy)
    assert content == right, (kind, content)


# --- 3. past the budget the effective threshold rises ---------------------------------------


def test_a_burst_of_wrong_hits_raises_the_effective_threshold(
    vgw: GatewayServer,
    server_thread: ServerThread,
    script: Script,
    pairs: list[Pair],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    _diverge(script, pairs, every=2)
    meanings = script.meanings
    hits = wrong = 0
    for pair in (p for p in pairs if p.same):  # half of them answered otherwise upstream
        _ask(vgw, "adapting", pair.first)
        _settle(vgw, server_thread)
        content, kind = _ask(vgw, "adapting", pair.second)
        if kind == "hit-semantic":
            hits += 1
            wrong += content != answer_of(meanings[pair.second])
            _wait_verified(vgw, "adapting", hits)  # each verdict in before the next question
    assert wrong >= 10 and wrong / hits > 0.2, (hits, wrong)
    state = _verification(vgw, "adapting")
    assert state["effective_threshold"] > state["configured_threshold"], state
    messages = [r.getMessage() for r in caplog.records]
    assert any("effective threshold" in m and "->" in m for m in messages), messages
    # The right entries are still served under the raised threshold, and no wrong one.
    served = 0
    for pair in (p for p in pairs if p.same):
        content, kind = _ask(vgw, "adapting", pair.second)
        if kind.startswith("hit"):
            served += 1
            assert content == answer_of(meanings[pair.second]), pair
    assert served >= 5, served


# --- 4. shadow calls: after the response, never served, not when the breaker is open -------


def test_a_slow_shadow_call_never_holds_back_nor_replaces_the_hit(
    vgw: GatewayServer,
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    script: Script,
    pairs: list[Pair],
    meanings: dict[str, int],
) -> None:
    pair = next(p for p in pairs if p.same)
    cached, kind = _ask(vgw, "shadowed", pair.first)
    assert kind == "miss"
    _settle(vgw, server_thread)
    other = "A shadow answer that says something else entirely about the weather on Mars."
    script.shadow[pair.second] = other
    script.slow.add(pair.second)
    content, kind = _ask(vgw, "shadowed", pair.second)
    # The client has the cached answer while the shadow call is, at most, in flight.
    assert kind == "hit-semantic" and content == cached
    assert script.finished == []
    assert poll_until(lambda: script.started == [pair.second], timeout=VERDICT_WAIT)
    assert fake_upstream.stats["in_flight"] >= 1  # the hit was answered, the shadow call waits
    assert script.release is not None
    server_thread.loop.call_soon_threadsafe(script.release.set)  # the fake's loop
    _wait_verified(vgw, "shadowed", 1)
    assert _verification(vgw, "shadowed")["precision"]["disagreements"] == 1
    script.slow.clear()
    # The shadow call's answer is not an answer of the cache.
    for text in (pair.first, pair.second):
        content, kind = _ask(vgw, "shadowed", text)
        assert kind.startswith("hit") and content == cached and content != other


def test_no_shadow_call_while_the_breaker_is_open(
    vgw: GatewayServer,
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    pairs: list[Pair],
) -> None:
    pair = [p for p in pairs if p.same][2]
    _, kind = _ask(vgw, "shadowed", pair.first)
    assert kind == "miss"
    _settle(vgw, server_thread)
    breakers = _admin(vgw, "GET", "/admin/breakers")["breakers"]
    names = [b["name"] for b in breakers if "shadowed" in b["name"]] or [
        b["name"] for b in breakers if "fake" in b["name"]
    ]
    assert names, breakers
    skipped = _shadow_calls(vgw, "shadowed", "breaker_open")
    for name in names:
        _admin(vgw, "POST", f"/admin/breakers/{name}/open")
    try:
        _, kind = _ask(vgw, "shadowed", pair.second)
        assert kind == "hit-semantic"
        assert poll_until(
            lambda: _shadow_calls(vgw, "shadowed", "breaker_open") == skipped + 1,
            timeout=VERDICT_WAIT,
        )
        _settle(vgw, server_thread)
        assert _asked(fake_upstream, "shadowed", pair.second) == 0
    finally:
        for name in names:
            _admin(vgw, "POST", f"/admin/breakers/{name}/reset")


# --- 5. streams ------------------------------------------------------------------------------


def test_a_streamed_hit_is_verified_and_an_exact_hit_is_not(
    vgw: GatewayServer,
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    pairs: list[Pair],
    meanings: dict[str, int],
) -> None:
    same = [p for p in pairs if p.same]
    first, second = same[5], same[8]
    for pair in (first, second):
        _ask(vgw, "streamed", pair.first)
    _settle(vgw, server_thread)
    content, kind = _ask(vgw, "streamed", first.second, stream=True)
    assert kind == "hit-semantic" and content == answer_of(meanings[first.first])
    _wait_verified(vgw, "streamed", 1)
    # an exact hit, then a semantic one: only the semantic one is verified
    _, kind = _ask(vgw, "streamed", second.first, stream=True)
    assert kind == "hit-exact"
    _, kind = _ask(vgw, "streamed", second.second)
    assert kind == "hit-semantic"
    _wait_verified(vgw, "streamed", 2)
    _settle(vgw, server_thread)
    assert _verified(vgw, "streamed") == 2
    assert _asked(fake_upstream, "streamed", second.first) == 1  # the miss only
    assert _asked(fake_upstream, "streamed", first.second) == 1  # the shadow call
