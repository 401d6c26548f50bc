"""Property-based fuzzing of upstream 200s that only look valid, against a real gateway process.

The fake upstream is steered (its `"fake"` knobs, forwarded by the gateway) into answers drawn
by Hypothesis: a named broken shape (gateway/testing/fake_shapes.py: no choices, no message or
delta, an error body, a stream of no chunks, a JSON answer to a stream request...), another
Content-Type over a good body, and `choices` replaced by generated lists of choices whose
message or delta is missing, null, text, a list, or an object with content and tool calls of
any type, plain and streamed.

The property: no 200 carries an answer the gateway cannot stand behind. A 200 is either the
level-4 answer (nothing else could answer: this model has no fallback) or an answer whose
choices are a non-empty list of objects each with a `message` (a stream: chunks whose choices
each have a `delta`, at least one choice before [DONE]). An error is an OpenAI error with an
upstream_* code, never a 500. And nothing refused is cached: asked again, the same question is
no cache hit. (Hypothesis settings: tests/reliability/fuzzing.py.)
"""

from __future__ import annotations

import json
import uuid
from typing import Any, get_args

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from gateway.testing.fake_shapes import Shape
from tests.reliability.fuzz_target import FuzzGateway
from tests.reliability.fuzzing import fuzz_settings
from tests.reliability.jsonfuzz import TEXT, dumps, plain_value
from tests.reliability.outcomes import assert_survived
from tests.reliability.rawhttp import Reply, Sent, exchange
from tests.reliability.warmup import CHAT, JSON_TYPE, tenant_a

Json = dict[str, Any]
RSS_GROWTH_LIMIT_MIB = 40.0
CONTENT_TYPES = [
    "text/html",
    "text/plain",
    "",
    "application/octet-stream",
    "application/json",
    "application/json; charset=utf-8",
    "application/problem+json",
    "text/event-stream",
]
ANY = plain_value()
CONTENT = st.one_of(st.none(), TEXT, st.integers(), st.lists(TEXT, max_size=2), st.just({}))
CALLS = st.one_of(
    st.none(),
    st.just([]),
    st.just({"id": "c"}),
    st.just(["call"]),
    st.just([{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]),
)
BODY = st.one_of(
    st.none(),
    TEXT,
    st.integers(),
    st.lists(ANY, max_size=2),
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["assistant", "user", ""]),
            "content": CONTENT,
            "tool_calls": CALLS,
            "refusal": st.none() | TEXT,
        },
    ),
)


@st.composite
def choice(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(ANY)  # not an object at all
    out: Json = {"index": 0, "finish_reason": draw(st.sampled_from([None, "stop", "length"]))}
    for part in draw(st.lists(st.sampled_from(["message", "delta"]), unique=True, max_size=2)):
        out[part] = draw(BODY)
    return out


CHOICES = st.one_of(st.lists(choice(), max_size=3), ANY)
KNOBS = st.fixed_dictionaries(
    {},
    optional={
        "shape": st.sampled_from(get_args(Shape)),
        "content_type": st.sampled_from(CONTENT_TYPES),
        "extra": st.fixed_dictionaries({"choices": CHOICES}),
    },
)


@pytest.fixture(scope="module")
def fuzz_gateway(shared_fuzz_gateway: FuzzGateway) -> FuzzGateway:
    return shared_fuzz_gateway.for_module()


def ask(fuzz: FuzzGateway, text: str, stream: bool, knobs: Json) -> Reply:
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
        "fake": knobs,
    }
    fuzz.sent += 1
    reply = exchange(fuzz.port, Sent(b"POST", CHAT, [JSON_TYPE, tenant_a()], dumps(body)))
    assert reply is not None, "no answer"
    return reply


def stands_behind(reply: Reply, stream: bool) -> str:
    """What the answer was (`level4`, `error`, `answer`); fails when a 200 carries an answer
    the gateway should have refused, or an error is not an upstream error."""
    assert reply.status != 500, reply.describe()
    if reply.status >= 400:
        error = json.loads(reply.body)["error"]
        assert str(error.get("code")).startswith("upstream"), reply.describe()
        return "error"
    assert reply.status == 200, reply.describe()
    if reply.header("x-gateway-level") == "4":
        assert reply.header("x-gateway-degraded") == "unavailable", reply.describe()
        return "level4"
    if not stream:
        assert reply.content_type == "application/json", reply.describe()
        choices = json.loads(reply.body)["choices"]
        assert isinstance(choices, list) and choices, reply.describe()
        for one in choices:
            assert isinstance(one, dict) and isinstance(one.get("message"), dict), reply.describe()
            content = one["message"].get("content")
            assert content is None or isinstance(content, str), reply.describe()
        return "answer"
    assert reply.content_type == "text/event-stream", reply.describe()
    events = [e[len("data: ") :] for e in reply.body.decode().split("\n\n") if e]
    assert events[-1] == "[DONE]", reply.describe()
    chunks = [json.loads(e) for e in events[:-1]]
    said = [c for c in chunks if c.get("choices")]
    assert said, f"a stream without a choice\n{reply.describe()}"
    for chunk in said:
        for one in chunk["choices"]:
            assert isinstance(one, dict) and isinstance(one.get("delta"), dict), reply.describe()
    return "answer"


@fuzz_settings(250)
@given(knobs=KNOBS, stream=st.booleans())
def test_no_200_carries_an_answer_that_only_looks_valid(
    fuzz_gateway: FuzzGateway, knobs: Json, stream: bool
) -> None:
    question = f"looks valid {uuid.uuid4().hex}"
    first = stands_behind(ask(fuzz_gateway, question, stream, knobs), stream)
    event(f"{'stream' if stream else 'plain'}: {first}")
    again = ask(fuzz_gateway, question, stream, knobs)
    second = stands_behind(again, stream)
    if first != "answer":
        assert (again.header("x-gateway-cache") or "").startswith("hit") is False, (
            f"a refused answer was cached\n{again.describe()}"
        )
        assert second == first, f"{first}, then {second}"


def test_the_gateway_survived_and_kept_its_memory(fuzz_gateway: FuzzGateway) -> None:
    assert_survived(fuzz_gateway, RSS_GROWTH_LIMIT_MIB)
