"""Degradation levels 1-3 with a knowledge base, seen through the real OpenAI SDK.

An external (HTTP) knowledge base is served by the fake retriever, whose faults and results are
set per test; an embedded one is ingested from a temporary folder with the real MiniLM model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.http.keys import BREAKERS
from gateway.testing.fake_retriever import FakeRetriever
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.fake_settings import settings_of
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import assert_conforms, last_upstream_body, request, sse_json

Json = dict[str, Any]
DISCLAIMER = "General knowledge, not your documents."
DISCLAIMER_ZH = "以下回答基于通用知识"
TENANT_KEY = "sk-tenant-with-kb"


@pytest.fixture(scope="module")
def retriever(server_thread: ServerThread) -> Iterator[FakeRetriever]:
    fake = server_thread.call(FakeRetriever().start())
    yield fake
    server_thread.call(fake.stop())


@pytest.fixture
def kb(retriever: FakeRetriever) -> FakeRetriever:
    retriever.reset()
    return retriever


@pytest.fixture(scope="module")
def kgw(
    server_thread: ServerThread, fake: FakeUpstream, retriever: FakeRetriever
) -> Iterator[GatewayServer]:
    handbook = {
        "type": "http",
        "url": retriever.url,
        "api_key_env": "KB_TOKEN",
        "timeout_seconds": 0.3,
        "min_chunks": 1,
        "min_score": 0.3,
        "breaker": {"failures": 100, "reset_seconds": 1},
        "attach": {"models": ["helpdesk", "cached-helpdesk"], "tenants": ["docs-team"]},
    }
    config = {
        "server": {"access_log": False},
        "auth": {
            "keys": [
                {"env": "TENANT_KEY", "tenant": "docs-team"},
                {"env": "OTHER_KEY", "tenant": "others"},
            ]
        },
        "providers": {"fake": {"type": "openai", "base_url": fake.url}},
        "models": [
            {"name": "helpdesk", "provider": "fake", "upstream_model": "helpdesk-up"},
            {"name": "plain", "provider": "fake", "upstream_model": "plain-up"},
            {
                "name": "cached-helpdesk",
                "provider": "fake",
                "upstream_model": "cached-up",
                "cache": {"enabled": True, "semantic": False},
            },
        ],
        "cache": {"store": {"type": "memory"}},
        "knowledge_bases": {"handbook": handbook},
        "resilience": {"retry": {"attempts": 1}},
        "degradation": {
            "disclaimer": {"en": DISCLAIMER, "zh": DISCLAIMER_ZH},
            "unavailable": {"mode": "answer"},
        },
    }
    environ = {"TENANT_KEY": TENANT_KEY, "OTHER_KEY": "sk-other", "KB_TOKEN": "kb-token-123"}
    settings = settings_of(config, environ)
    with running_gateway(server_thread, settings) as server:
        yield server


def client(gw: GatewayServer, key: str = "sk-other") -> openai.OpenAI:
    return sdk_client(gw.url, key, 20)


def ask(gw: GatewayServer, text: str, model: str = "helpdesk", **kw: Any) -> Any:
    key = kw.pop("key", "sk-other")
    return client(gw, key).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **kw
    )


RETURNS_QUESTION = "Can items be returned for a refund within 30 days of delivery?"


def test_level_1_grounds_the_prompt_and_returns_sources(
    kgw: GatewayServer, kb: FakeRetriever, fake_upstream: FakeUpstream
) -> None:
    raw = ask(kgw, RETURNS_QUESTION)
    assert raw.headers["x-gateway-level"] == "1"
    assert raw.headers["x-gateway-knowledge-base"] == "handbook"
    assert "x-gateway-degraded" not in raw.headers
    completion = raw.parse()
    sources = completion.model_extra["sources"]
    assert sources[0]["index"] == 1 and sources[0]["source"] == "handbook/returns.md"
    sent = last_upstream_body(fake_upstream)["messages"]
    assert sent[0]["role"] == "system"
    assert "[1] (handbook/returns.md - Returns)" in sent[0]["content"]
    assert "Cite the sources" in sent[0]["content"]
    assert sent[-1] == {"role": "user", "content": RETURNS_QUESTION}
    search = kb.received[-1]
    assert search["body"]["query"] == RETURNS_QUESTION
    assert search["headers"].get("Authorization") == "Bearer kb-token-123"


def test_level_1_keeps_the_apps_system_prompt_first(
    kgw: GatewayServer, kb: FakeRetriever, fake_upstream: FakeUpstream
) -> None:
    client(kgw).chat.completions.create(
        model="helpdesk",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": RETURNS_QUESTION},
        ],
    )
    sent = last_upstream_body(fake_upstream)["messages"]
    assert sent[0] == {"role": "system", "content": "You are terse."}
    assert "Sources:" in sent[1]["content"]


def test_level_1_streamed_carries_sources_on_the_first_chunk(kgw: GatewayServer, kb: Any) -> None:
    with client(kgw).chat.completions.with_streaming_response.create(
        model="helpdesk", messages=[{"role": "user", "content": RETURNS_QUESTION}], stream=True
    ) as response:
        assert response.headers["x-gateway-level"] == "1"
        chunks = list(response.parse())
    assert chunks[0].model_extra["sources"][0]["source"] == "handbook/returns.md"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == f"Echo: {RETURNS_QUESTION}"


def test_level_2_when_retrieval_finds_too_little(
    kgw: GatewayServer, kb: FakeRetriever, fake_upstream: FakeUpstream
) -> None:
    raw = ask(kgw, "What is the capital of Peru?")  # shares no word with the handbook
    assert raw.headers["x-gateway-level"] == "2"
    assert raw.headers["x-gateway-degraded"] == "general-knowledge"
    content = raw.parse().choices[0].message.content
    assert content == f"{DISCLAIMER}\n\nEcho: What is the capital of Peru?"
    assert "Sources:" not in str(last_upstream_body(fake_upstream)["messages"])


def test_level_2_low_scores_do_not_count(kgw: GatewayServer, kb: FakeRetriever) -> None:
    kb.configure(results=[{"text": "barely related", "score": 0.29, "source": "x.md"}])
    assert ask(kgw, RETURNS_QUESTION).headers["x-gateway-level"] == "2"


def test_the_disclaimer_follows_the_users_language(kgw: GatewayServer, kb: Any) -> None:
    content = ask(kgw, "秘鲁的首都是哪里").parse().choices[0].message.content
    assert content.startswith(DISCLAIMER_ZH)


@pytest.mark.parametrize(
    "knobs",
    [{"status": 503}, {"latency_ms": 1000}, {"malformed": True}, {"wrong_shape": True}],
    ids=["503", "slow", "malformed", "wrong-shape"],
)
def test_level_3_when_retrieval_fails(kgw: GatewayServer, kb: FakeRetriever, knobs: Json) -> None:
    kb.configure(**knobs)
    raw = ask(kgw, RETURNS_QUESTION)
    assert raw.headers["x-gateway-level"] == "3"
    assert raw.headers["x-gateway-degraded"] == "retrieval-unavailable"
    assert raw.parse().choices[0].message.content.startswith(DISCLAIMER + "\n\nEcho: ")


def test_level_3_streamed_begins_with_the_disclaimer(kgw: GatewayServer, kb: FakeRetriever):
    kb.configure(status=500)
    body = {
        "model": "helpdesk",
        "messages": [{"role": "user", "content": "hi there"}],
        "stream": True,
    }
    resp = asyncio.run(
        request(
            "POST",
            kgw.url + "/v1/chat/completions",
            body=body,
            headers={"Authorization": "Bearer sk-other"},
        )
    )
    assert resp.headers["x-gateway-degraded"] == "retrieval-unavailable"
    chunks, done = sse_json(resp.sse())
    assert done
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == f"{DISCLAIMER}\n\nEcho: hi there"
    assert len({c["id"] for c in chunks}) == 1, "the disclaimer chunk is part of the same stream"


def test_the_header_chooses_or_disables_the_knowledge_base(kgw: GatewayServer, kb: Any) -> None:
    raw = ask(kgw, RETURNS_QUESTION, model="plain")
    assert "x-gateway-level" not in raw.headers, "plain has no knowledge base attached"
    chosen = ask(kgw, RETURNS_QUESTION, model="plain", extra_headers={HEADER: "handbook"})
    assert chosen.headers["x-gateway-level"] == "1"
    off = ask(kgw, RETURNS_QUESTION, extra_headers={HEADER: "none"})
    assert "x-gateway-level" not in off.headers
    with pytest.raises(openai.BadRequestError) as info:
        ask(kgw, RETURNS_QUESTION, extra_headers={HEADER: "nope"})
    assert "handbook" in info.value.message


HEADER = "x-gateway-knowledge-base"


def test_a_tenant_attachment_applies_to_any_model(kgw: GatewayServer, kb: Any) -> None:
    raw = ask(kgw, RETURNS_QUESTION, model="plain", key=TENANT_KEY)
    assert raw.headers["x-gateway-level"] == "1"


def test_only_grounded_answers_are_cached(kgw: GatewayServer, kb: FakeRetriever) -> None:
    question = "Is there a warranty covering manufacturing defects on every device?"
    kb.configure(status=503)
    assert ask(kgw, question, model="cached-helpdesk").headers["x-gateway-level"] == "3"
    kb.reset()
    first = ask(kgw, question, model="cached-helpdesk")
    assert first.headers["x-gateway-cache"] == "miss", "the level-3 answer was not stored"

    def cached() -> bool:
        return ask(kgw, question, model="cached-helpdesk").headers["x-gateway-cache"] != "miss"

    assert _eventually(cached)
    hit = ask(kgw, question, model="cached-helpdesk")
    assert hit.parse().model_extra["sources"][0]["source"] == "handbook/warranty.md"


def test_retrieval_down_and_every_model_down_is_level_4(
    kgw: GatewayServer, kb: FakeRetriever, fake_upstream: FakeUpstream
) -> None:
    kb.configure(status=503)
    fake_upstream.per_model["helpdesk-up"] = Knobs(status=500)
    raw = ask(kgw, RETURNS_QUESTION)
    assert raw.headers["x-gateway-level"] == "4"
    assert raw.headers["x-gateway-degraded"] == "unavailable"
    assert raw.parse().choices[0].finish_reason == "stop"


def test_the_deadline_counts_retrieval_time(kgw: GatewayServer, kb: FakeRetriever) -> None:
    kb.configure(latency_ms=1000)  # the base's timeout is 0.3 s
    started = time.monotonic()
    raw = ask(kgw, RETURNS_QUESTION, extra_headers={"x-gateway-timeout": "0.15"})
    assert time.monotonic() - started < 0.28, "retrieval is cut at the deadline (0.15 s)"
    assert raw.headers["x-gateway-level"] == "4", "no time left for the model after retrieval"


def test_retrieval_is_skipped_when_no_model_could_answer(
    kgw: GatewayServer, kb: FakeRetriever
) -> None:
    breaker = kgw.app[BREAKERS].get("fake/helpdesk-up")
    breaker.force_open()
    try:
        raw = ask(kgw, RETURNS_QUESTION)
    finally:
        breaker.reset()
    assert raw.headers["x-gateway-level"] == "4"
    assert not kb.received, "a level-4 answer does not wait for retrieval"


def test_retrieval_metrics(kgw: GatewayServer, kb: FakeRetriever) -> None:
    ask(kgw, RETURNS_QUESTION)
    text = asyncio.run(request("GET", kgw.url + "/metrics")).text
    assert 'gateway_retrievals_total{knowledge_base="handbook",outcome="grounded"}' in text
    assert 'gateway_degradation_total{level="1",model="helpdesk"}' in text


# --- an embedded knowledge base, ingested with the real embedder -----------------------------


@pytest.fixture(scope="module")
def embedded_gateway(
    server_thread: ServerThread, fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    from gateway.cli import main

    root = tmp_path_factory.mktemp("kb")
    docs = root / "docs"
    docs.mkdir()
    (docs / "refunds.md").write_text(
        "# Refunds\n\nRefunds are issued to the original card within 5 business days after "
        "we receive the returned item.\n"
    )
    (docs / "shipping.md").write_text(
        "# Shipping\n\nStandard shipping to Canada takes 7 to 10 business days.\n"
    )
    shop_docs = {"path": str(root / "index"), "timeout_seconds": 10, "attach": {"models": ["shop"]}}
    config = write_config(
        root,
        {
            "server": {"access_log": False},
            "providers": {"fake": {"type": "openai", "base_url": fake.url}},
            "models": [{"name": "shop", "provider": "fake", "upstream_model": "shop-up"}],
            "knowledge_bases": {"shop-docs": shop_docs},
        },
    )
    assert main(["kb", "ingest", "shop-docs", str(docs), "--config", str(config), "--quiet"]) == 0
    from gateway.config import load_settings

    with running_gateway(server_thread, load_settings(config)) as server:
        yield server


def test_an_embedded_knowledge_base_grounds_paraphrased_questions(
    embedded_gateway: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    raw = ask(embedded_gateway, "How long until my money is back on my card?", model="shop")
    assert raw.headers["x-gateway-level"] == "1"
    sources = raw.parse().model_extra["sources"]
    assert sources[0]["source"] == "refunds.md" and sources[0]["score"] > 0.35
    off_topic = ask(embedded_gateway, "How do I bake banana bread?", model="shop")
    assert off_topic.headers["x-gateway-level"] == "2"


def _eventually(check: Any, tries: int = 50) -> bool:
    import time

    for _ in range(tries):
        if check():
            return True
        time.sleep(0.05)
    return False


def test_readyz_reports_the_knowledge_bases(
    kgw: GatewayServer, embedded_gateway: GatewayServer
) -> None:
    http_state = asyncio.run(request("GET", kgw.url + "/readyz")).json()["knowledge_bases"]
    assert http_state == {"handbook": "breaker closed"}
    embedded = asyncio.run(request("GET", embedded_gateway.url + "/readyz")).json()
    assert embedded["knowledge_bases"]["shop-docs"].startswith("v")


def test_a_cached_grounded_answer_keeps_its_level_and_base_plain_and_streamed(
    kgw: GatewayServer, kb: FakeRetriever
) -> None:
    """The README's knowledge-base snippet, run twice: the hit says what the answer was."""
    question = "How many days do I have to return an unopened item for a full refund?"
    first = ask(kgw, question, model="cached-helpdesk")
    assert first.headers["x-gateway-cache"] == "miss"
    assert first.headers["x-gateway-level"] == "1"
    searches = len(kb.received)
    hit = ask(kgw, question, model="cached-helpdesk")
    assert hit.headers["x-gateway-cache"] == "hit-exact"
    assert hit.headers["x-gateway-level"] == "1"
    assert hit.headers["x-gateway-knowledge-base"] == "handbook"
    assert "x-gateway-degraded" not in hit.headers
    assert hit.parse().model_extra["sources"] == first.parse().model_extra["sources"]
    assert hit.headers["x-request-id"] != first.headers["x-request-id"]
    assert len(kb.received) == searches, "a hit needs no retrieval"
    streamed = client(kgw).chat.completions.with_raw_response.create(
        model="cached-helpdesk", messages=[{"role": "user", "content": question}], stream=True
    )
    assert streamed.headers["x-gateway-cache"] == "hit-exact"
    assert streamed.headers["x-gateway-level"] == "1"
    assert streamed.headers["x-gateway-knowledge-base"] == "handbook"
    chunks = list(streamed.parse())
    assert chunks[0].model_extra["sources"] == first.parse().model_extra["sources"]


def test_a_responses_request_is_grounded_and_carries_its_sources(
    kgw: GatewayServer, kb: FakeRetriever, fake_upstream: FakeUpstream
) -> None:
    raw = client(kgw).responses.with_raw_response.create(model="helpdesk", input=RETURNS_QUESTION)
    assert raw.headers["x-gateway-level"] == "1"
    response = raw.parse()
    assert_conforms(response.model_dump(exclude_unset=True), "Response")
    assert response.model_extra["sources"][0]["source"] == "handbook/returns.md"
    sent = last_upstream_body(fake_upstream)["messages"]
    assert "[1] (handbook/returns.md - Returns)" in sent[0]["content"]
    with client(kgw).responses.stream(model="helpdesk", input=RETURNS_QUESTION) as stream:
        final = stream.get_final_response()
    assert final.model_extra["sources"][0]["source"] == "handbook/returns.md"
