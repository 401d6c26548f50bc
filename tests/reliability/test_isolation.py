"""Tenant isolation under load, every feature on at once (bench/isolation.py, small).

One real gateway process (`python -m gateway serve`) in front of a fake upstream that injects
faults (500s, slow and too-slow answers, malformed bodies, cut streams, stream error events,
hallucinated tool names and schema-breaking arguments), 8 tenants with their own keys, the
cache on (hash embedder, SQLite store), the routing alias `auto`, the tool guard, three
policies. 40 clients send 2,000 requests; every answer names the request that made it upstream
(see bench/isolation.py), so a cached answer served to the wrong tenant, question or scope, a
response mixed up between requests, a status 500 or a request that hangs past its deadline is
counted. Targets: 0 of each.

Also here: the judging itself (a contamination of each kind is recognised), and a finding of
the run: a stripped tool-call answer (the guard's "no valid call" text) is stored in the cache
and served to the tenant's later identical requests.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs, ScriptedReply
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.starters import start_gateway
from tests.resilience.test_redis_breakers import ADMIN_ENV, ADMIN_KEY

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import isolation  # noqa: E402

# --- the load run -------------------------------------------------------------------------


def test_no_contamination_no_500_no_hung_request_under_load_with_every_feature_on(
    tmp_path: Path,
) -> None:
    opts = isolation.Options(
        clients=40,
        tenants=8,
        requests=2_000,
        questions=40,
        embedder="hash",
        target="single",
        seed=7,
        quiet=True,
        workdir=tmp_path,
    )
    started = time.monotonic()
    [report] = isolation.run(opts)
    summary = isolation.table([report])
    assert report.requests == 2_000 and sum(report.statuses.values()) == 2_000, summary

    assert report.contamination_total == 0, f"{summary}\n{report.examples}"
    assert report.status_500 == 0, f"{summary}\n{report.examples}"
    assert report.internal_stream_errors == 0, summary
    assert report.hung == 0, summary
    assert report.transport_errors == {}, summary

    # The run exercised what it claims to: faults were injected and survived, the cache
    # served hits (exact and semantic), the guard repaired calls, both tiers answered.
    injected = report.injected
    for fault in ("error_500", "slow", "stream_cut", "hallucinate", "bad_arguments"):
        assert injected[fault] > 0, summary
    assert report.cache.get("hit-exact", 0) > 100, summary
    assert report.cache.get("hit-semantic", 0) > 0, summary
    assert report.verdicts.get("hit", 0) > 100, summary
    assert report.tool_guard.get("repaired", 0) > 0, summary
    assert set(report.served) == {"small", "large"}, summary
    assert report.statuses.get("429", 0) > 0, "the limited tenant's policy applied: " + summary
    assert time.monotonic() - started < 120, "meant to run in well under a minute"


# --- the judge recognises each contamination ----------------------------------------------


def spec(rid: int, tenant: str = "t01", ref: str = "q002", **kw: Any) -> isolation.Spec:
    fields: dict[str, Any] = {
        "qid": int(ref[-3:]),
        "text": f"What is it? [ref {ref}]",
        "model": "auto",
        "stream": False,
        "tools": False,
        "bypass": False,
        "hot": False,
    } | kw
    return isolation.Spec(rid=rid, tenant=tenant, ref=ref, **fields)


def answer(origin: isolation.Spec, cache: str, served: str = "small") -> isolation.Result:
    return isolation.Result(
        status=200, cache=cache, served=served, texts=[f"Echo[{origin.tag}]: {origin.text}"]
    )


@pytest.mark.parametrize(
    ("origin", "cache", "verdict"),
    [
        (spec(1), "miss", "own"),
        (spec(2), "hit-exact", "hit"),
        (spec(3, tenant="t02"), "hit-exact", "cross_tenant"),
        (spec(4, ref="q004"), "hit-semantic", "wrong_question"),
        (spec(5), "miss", "foreign_on_miss"),
        (spec(6, tools=True), "hit-exact", "wrong_scope"),
        (spec(7, bypass=True), "hit-exact", "wrong_scope"),
        (spec(8, hot=True), "hit-exact", "wrong_scope"),
    ],
)
def test_the_judge_tells_a_legitimate_hit_from_each_contamination(
    origin: isolation.Spec, cache: str, verdict: str
) -> None:
    mine = spec(1) if origin.rid == 1 else spec(100)
    by_rid = {s.rid: s for s in (origin, mine)}
    results = {origin.rid: answer(origin, "miss")}
    got = answer(origin, cache)
    assert isolation.judge(mine, got, by_rid, results) == verdict


def test_the_judge_flags_a_hit_whose_text_is_not_its_origins_answer() -> None:
    origin, mine = spec(2), spec(100)
    by_rid = {2: origin, 100: mine}
    truncated = isolation.Result(
        status=200, cache="hit-exact", served="small", texts=[f"Echo[{origin.tag}]: What is"]
    )
    assert isolation.judge(mine, truncated, by_rid, {2: answer(origin, "miss")}) == "corrupt"
    served_elsewhere = answer(origin, "hit-exact", served="large")
    assert isolation.judge(mine, served_elsewhere, by_rid, {2: answer(origin, "miss")}) == (
        "wrong_scope"
    )


# --- finding: the guard's "no valid tool call" answer is cached ---------------------------

TOOLS = isolation.TOOLS
QUESTION = "Look up the opening hours of the city library."
HALLUCINATING = Knobs(replies=[ScriptedReply(tool_calls=[{"name": "transfer_money"}])])
VALID = Knobs(replies=[ScriptedReply(tool_calls=[{"name": "lookup", "arguments": {"query": "x"}}])])


@pytest.fixture
def cached_gateway(tmp_path: Path, fake_upstream: FakeUpstream) -> Iterator[str]:
    fake = {"type": "openai", "base_url": fake_upstream.url, "timeouts": {"connect": 2, "read": 5}}
    config = {
        "server": {"access_log": False, "watch_config": False},
        "auth": {"admin_key_env": "GATEWAY_ADMIN_KEY"},
        "providers": {"fake": fake},
        "models": [{"name": "assistant", "provider": "fake", "upstream_model": "assistant-up"}],
        "cache": {
            "store": {"type": "memory"},
            "embedder": {"type": "hash"},
            "defaults": {"enabled": True},
        },
        "guard": {"tools": {"enabled": True, "repair_attempts": 1, "on_failure": "strip"}},
    }
    path = write_config(tmp_path, config)
    with start_gateway(tmp_path, path, env=ADMIN_ENV, timeout=20) as gateway:
        yield gateway.url


def chat(base: str, body: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=15) as resp:
        return {k.lower(): v for k, v in resp.headers.items()}, json.loads(resp.read())


def cache_entries(base: str) -> int:
    request = urllib.request.Request(
        base + "/admin/cache/stats", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        return int(json.loads(resp.read())["entries"])


def test_a_stripped_tool_call_answer_is_not_cached_for_the_next_identical_request(
    cached_gateway: str, fake_upstream: FakeUpstream
) -> None:
    """FINDING (gateway/pipeline.py, Pipeline.chat: the answer stored is the one the tool
    guard returns; gateway/cache/service.py `cacheable` accepts it). When the model keeps
    calling an undeclared tool, the guard strips the calls and answers with its own text ("I
    could not make a valid tool call..."), finish_reason stop: a complete-looking answer, so
    the cache stores it. Every later identical request of the tenant (for the TTL, a day by
    default) then gets that failure from the cache instead of asking the model again, which
    now answers with a valid call. The cache must keep only the model's own answers: a
    stripped (or otherwise guard-substituted) answer must not be stored."""
    body = {
        "model": "assistant",
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": TOOLS,
        "temperature": 0,
    }
    fake_upstream.per_model["assistant-up"] = HALLUCINATING
    headers, first = chat(cached_gateway, body)
    assert headers.get("x-gateway-tool-guard") == "stripped", headers
    assert first["choices"][0]["message"]["content"].startswith(isolation.STRIPPED_PREFIX)
    time.sleep(0.5)  # the cache writes in the background

    fake_upstream.per_model["assistant-up"] = VALID  # the model answers properly now
    headers, second = chat(cached_gateway, body)
    message = second["choices"][0]["message"]
    stored = cache_entries(cached_gateway)
    assert not headers.get("x-gateway-cache", "").startswith("hit"), (
        f"the stripped answer was stored ({stored} cache entries) and served again: "
        f"{headers.get('x-gateway-cache')}, {message.get('content')!r}"
    )
    assert [c["function"]["name"] for c in message.get("tool_calls") or []] == ["lookup"]


def test_a_good_tool_call_answer_is_not_blocked_by_the_above(
    cached_gateway: str, fake_upstream: FakeUpstream
) -> None:
    """Control: with the model answering in text, the answer is cached and hit as usual (so
    the tests above fail for the reason they name)."""
    fake_upstream.per_model["assistant-up"] = Knobs()
    body = {
        "model": "assistant",
        "messages": [{"role": "user", "content": QUESTION + " (control)"}],
        "tools": TOOLS,
    }
    chat(cached_gateway, body)
    deadline = time.monotonic() + 5
    while cache_entries(cached_gateway) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    headers, again = chat(cached_gateway, body)
    assert headers.get("x-gateway-cache") == "hit-exact", headers
    assert again["choices"][0]["message"]["content"].startswith("Echo: ")
