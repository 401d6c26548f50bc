"""Property-based fuzzing of `POST /v1/responses`, the stored-response routes and
`POST /v1/completions`, against a real gateway process over raw sockets (the machinery of
test_fuzz_http.py: tests/reliability/fuzz_target.py, rawhttp.py, jsonfuzz.py).

Responses bodies are drawn from OpenAI's `CreateResponse` schema and addressed to the served
models, with hand-made input item lists (messages with every content part type, function
calls and their outputs, reasoning, built-in tool items, unknown types), function and built-in
tools, `text.format` variants, `previous_response_id` (real ids of this tenant and of the
other, deleted and random ones), store and stream on and off, and the fake upstream steered
into faults and hostile tool calls; then mutated. The stored-response routes get real, foreign,
deleted and random ids and hostile query strings; completions bodies come from
`CreateCompletionRequest`, prompts as strings, lists and tokens.

Every answer meets rawhttp.check_reply's contract: a Response (or its event stream, event by
event, numbered, ending in exactly one terminal event), a text completion (or its chunks up to
[DONE]), a stored response, its item list or the deleted marker, or exactly an OpenAI error;
never a 500. Another tenant's response is, for every route, the same 404 as an id that never
existed. At the end the process is alive and kept its memory.

Deterministic by default (tests/reliability/fuzzing.py); FUZZ_EXAMPLES=5000 for a long run.
"""

from __future__ import annotations

import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from gateway.testing.harness.metrics import scrape
from tests.e2e.helpers import (
    assert_conforms,
    assert_openai_error,
    poll_until,
    schema_validator,
)
from tests.e2e.responses_client import parse_events
from tests.reliability.fuzz_target import (
    NATIVE_MODEL,
    TENANT_KEYS,
    FuzzGateway,
)
from tests.reliability.fuzzing import fuzz_settings
from tests.reliability.jsonfuzz import (
    TEXT,
    byte_mutated,
    dumps,
    mutated,
    unicode_value,
)
from tests.reliability.outcomes import assert_survived, refuses_what_it_must
from tests.reliability.rawhttp import KNOWN_BUG, Header, Reply, Sent, build_request, exchange
from tests.reliability.responses_bodies import (
    TEAMS,
    Ids,
    completion_body,
    goes_native,
    needs_native,
    never_existed,
    response_body,
)
from tests.reliability.warmup import (
    COMPLETIONS,
    JSON_TYPE,
    RESPONSES,
    bearer,
    response_id_of,
    send,
)

RSS_GROWTH_LIMIT_MIB = 30
# Headers that differ between any two answers, whatever they answer.
VOLATILE_HEADERS = {"x-request-id", "date"}


@pytest.fixture(scope="module")
def fuzz_gateway(shared_fuzz_gateway: FuzzGateway) -> FuzzGateway:
    return shared_fuzz_gateway.for_module()


@pytest.fixture(scope="module")
def ids(fuzz_gateway: FuzzGateway) -> Ids:
    """A few stored responses of each tenant, and one deleted, before the fuzzing starts."""
    seen = Ids()
    for team in TEAMS:
        for body in (
            {"model": "fake-model", "input": f"seed {team}"},
            {"model": "fake-model", "input": f"seed {team} streamed", "stream": True},
        ):
            _, answer = send(fuzz_gateway, _post(RESPONSES, body, team))
            seen.keep(team, answer)
    doomed = seen.live["team-a"][0]
    send(fuzz_gateway, Sent(b"DELETE", _stored(doomed), [_key("team-a")], None))
    seen.forget("team-a", doomed)
    for team in TEAMS:
        for response_id in seen.live[team]:
            path = _stored(response_id, b"/input_items")
            _, listing = send(fuzz_gateway, Sent(b"GET", path, [_key(team)], None))
            seen.items += [item["id"] for item in listing["data"]]
    return seen


def _key(team: str) -> Header:
    return bearer(TENANT_KEYS[team])


def _post(path: bytes, body: Any, team: str) -> Sent:
    return Sent(b"POST", path, [JSON_TYPE, _key(team)], dumps(body))


def _stored(response_id: str, suffix: bytes = b"") -> bytes:
    return RESPONSES + b"/" + response_id.encode("utf-8", "surrogatepass") + suffix


def _record(fuzz: FuzzGateway, name: str) -> None:
    fuzz.by_test[name] = fuzz.by_test.get(name, 0) + 1


TEAM_DRAW = st.sampled_from(["team-a"] * 3 + ["team-b"])


@fuzz_settings(400)
@given(data=st.data(), team=TEAM_DRAW)
def test_responses_bodies(fuzz_gateway: FuzzGateway, ids: Ids, data: st.DataObject, team: str):
    """Responses requests as the schema and the hand-made items draw them: a valid Response
    or event stream, or an OpenAI error. A previous_response_id that is not this tenant's live
    response is never continued: a 404 (or an earlier 4xx), never a 200."""
    _record(fuzz_gateway, "responses")
    body, previous = data.draw(response_body(ids, team))
    native = goes_native(body)
    event(f"previous={previous or 'none'} native={native}")
    reply, parsed = send(fuzz_gateway, _post(RESPONSES, body, team), strict_schema=not native)
    event(f"status={reply.status}")
    if parsed is KNOWN_BUG:
        return
    if previous in ("other", "deleted", "random", "garbage"):
        assert reply.status != 200, f"continued a {previous} response\n{reply.describe()}"
    if reply.status == 404 and previous in ("other", "deleted", "random"):
        assert parsed["error"]["code"] == "previous_response_not_found", parsed
    if reply.status == 200:
        if body.get("stream") is True:
            assert reply.content_type == "text/event-stream", reply.describe()
        if body.get("store") is not False:
            ids.keep(team, parsed, native=native)
        _stored_as_answered(fuzz_gateway, team, body, parsed, native)
    elif "fake" not in body and schema_validator("CreateResponse").is_valid(body):
        error = parsed["error"]
        event(f"schema-valid refused: {reply.status} {error.get('code')} {error.get('param')}")


def _stored_as_answered(
    fuzz: FuzzGateway, team: str, body: dict[str, Any], parsed: Any, native: bool
) -> None:
    """A finished response with store on is what GET answers afterwards, equal as JSON; with
    store off, or failed, GET knows no such id."""
    final = parsed[-1]["response"] if isinstance(parsed, list) else parsed
    output = final.get("output")
    if not (isinstance(output, list) and all(isinstance(item, dict) for item in output)):
        return  # a provider's Response of the wrong shape: relayed, not kept
    kept = body.get("store") is not False and final.get("status") != "failed"
    stored = Sent(b"GET", _stored(final["id"]), [_key(team)], None)
    reply = _unthrottled(fuzz, stored, strict_schema=not native)
    if kept:
        assert reply.status == 200 and json.loads(reply.body) == final, reply.describe()
    else:
        assert reply.status == 404, reply.describe()


@fuzz_settings(400)
@given(data=st.data(), team=TEAM_DRAW)
def test_responses_mutated_bodies(
    fuzz_gateway: FuzzGateway, ids: Ids, data: st.DataObject, team: str
):
    """A Responses body broken in one to three ways, then maybe at the byte level: never a 200
    for a body a strict server must refuse, and a 413 past the size limit."""
    _record(fuzz_gateway, "responses-mutated")
    body, _ = data.draw(response_body(ids, team))
    if goes_native(body):
        body["model"] = "fake-model"  # the provider's own answers are relayed unchecked
    tree, applied = data.draw(mutated(body))
    raw = dumps(tree)
    if data.draw(st.integers(0, 3)) == 0:
        raw, kind = data.draw(byte_mutated(raw))
        applied.append(kind)
    note(f"mutations: {applied}")
    for name in applied:
        event(name.split("@")[0])
    sent = Sent(b"POST", RESPONSES, [JSON_TYPE, _key(team)], raw, notes=tuple(applied))
    refuses_what_it_must(fuzz_gateway, sent, raw)


# --- the stored-response routes ---------------------------------------------------------------

QUERY_VALUES = {
    "limit": ["1", "2", "20", "100", "0", "101", "-1", "abc", "1e3", "", "%ff", "9" * 40, "+5"],
    "order": ["asc", "desc", "ASC", "", "random", "%00"],
    "after": ["msg_1", "", "%ff", "x" * 300],
}


@st.composite
def query_string(draw: st.DrawFn, item_ids: list[str]) -> bytes:
    names = draw(st.lists(st.sampled_from([*QUERY_VALUES, "x", "limit"]), max_size=4))
    pairs = []
    for name in names:
        values = QUERY_VALUES.get(name, ["1"]) + (item_ids if name == "after" else [])
        pairs.append(f"{name}={draw(st.sampled_from(values))}".encode())
    if draw(st.integers(0, 5)) == 0:
        pairs.append(draw(st.binary(max_size=12)).replace(b" ", b"").replace(b"\r\n", b""))
    return b"?" + b"&".join(pairs) if pairs else b""


ID_KINDS = ["own", "own", "own", "other", "deleted", "random", "garbage"]


@st.composite
def stored_id(draw: st.DrawFn, ids: Ids, team: str) -> tuple[str, bytes]:
    other = TEAMS[1 - TEAMS.index(team)]
    kind = draw(st.sampled_from(ID_KINDS))
    pool = {"own": ids.live[team], "other": ids.live[other], "deleted": ids.deleted}.get(kind)
    if pool:
        return kind, pool[draw(st.integers(0, 10**6)) % len(pool)].encode()
    if kind == "garbage":
        text = draw(unicode_value().filter(lambda v: isinstance(v, str)) | TEXT)
        raw = "".join(f"%{b:02x}" for b in text.encode("utf-8", "surrogatepass")).encode()
        return kind, draw(
            st.sampled_from([raw, b"", b"..", b"%2F", b"resp_" + b"a" * 3000, b"%00", b"%ff"])
        )
    return "random", never_existed().encode()


@fuzz_settings(300)
@given(
    data=st.data(),
    team=TEAM_DRAW,
    method=st.sampled_from([b"GET"] * 4 + [b"DELETE", b"POST", b"PUT", b"HEAD"]),
    route=st.sampled_from([b"", b"/input_items", b"/input_items", b"/", b"/cancel", b"/x/y"]),
)
def test_stored_response_routes(
    fuzz_gateway: FuzzGateway,
    ids: Ids,
    data: st.DataObject,
    team: str,
    method: bytes,
    route: bytes,
):
    """Retrieve, input_items and delete with real, foreign, deleted, random and garbage ids,
    and hostile query strings: a Response, an item list, the deleted marker or an OpenAI error;
    a foreign, deleted or random id is a 404 (or a 4xx the query earns first)."""
    _record(fuzz_gateway, "stored-routes")
    kind, response_id = data.draw(stored_id(ids, team))
    query = data.draw(query_string(ids.items))
    path = RESPONSES + b"/" + response_id + route + query
    if method == b"DELETE" and kind == "own" and data.draw(st.integers(0, 2)):
        method = b"GET"  # deleting own responses empties the pool: only a third do
    body = None if method in (b"GET", b"HEAD", b"DELETE") else b"{}"
    headers = [_key(team), JSON_TYPE] if body is not None else [_key(team)]
    native = response_id.decode("utf-8", "replace") in ids.native
    sent = Sent(method, path, headers, body)
    reply, parsed = send(fuzz_gateway, sent, strict_schema=not native)
    event(f"{kind} {method.decode()} {route.decode() or '/'}: {reply.status}")
    if parsed is KNOWN_BUG:
        return
    if kind in ("other", "deleted", "random"):
        assert reply.status >= 400, f"a {kind} id answered\n{reply.describe()}"
    if method == b"DELETE" and reply.status == 200:
        ids.forget(team, response_id.decode())


# --- another tenant's responses ---------------------------------------------------------------


def _same_answer(foreign: Reply, foreign_id: str, unknown: Reply, unknown_id: str) -> None:
    """Two answers that must not be told apart: the same status, headers (but the request id
    and date) and body, each id replaced by a placeholder."""
    assert foreign.status == unknown.status == 404, (foreign.describe(), unknown.describe())

    def shape(reply: Reply, response_id: str) -> tuple[Any, ...]:
        headers = sorted(
            (k.lower(), v) for k, v in reply.headers if k.lower() not in VOLATILE_HEADERS
        )
        return headers, reply.body.replace(response_id.encode(), b"<id>")

    assert shape(foreign, foreign_id) == shape(unknown, unknown_id)


def _parsed(reply: Reply) -> Any:
    if reply.content_type == "text/event-stream":
        return parse_events(reply.body)
    return json.loads(reply.body)


def _unthrottled(fuzz: FuzzGateway, sent: Sent, *, strict_schema: bool = True) -> Reply:
    """The answer once team-b's rate limit (100 a second, a burst of 30) lets it through."""
    for _ in range(100):
        reply, _ = send(fuzz, sent, strict_schema=strict_schema)
        if reply.status != 429:
            return reply
        time.sleep(0.02)
    raise AssertionError(f"still rate limited: {sent.describe()}")


CROSS_ROUTES = ["retrieve", "input_items", "delete", "previous", "previous-streamed"]


def _probe(route: str, response_id: str, team: str) -> Sent:
    key = [_key(team)]
    if route == "retrieve":
        return Sent(b"GET", _stored(response_id), key, None)
    if route == "input_items":
        return Sent(b"GET", _stored(response_id, b"/input_items?limit=5"), key, None)
    if route == "delete":
        return Sent(b"DELETE", _stored(response_id), key, None)
    body = {"model": "fake-model", "input": "go on", "previous_response_id": response_id}
    return _post(RESPONSES, {**body, "stream": route == "previous-streamed"}, team)


@fuzz_settings(60)
@given(
    routes=st.lists(st.sampled_from(CROSS_ROUTES), min_size=1, max_size=5),
    streamed=st.booleans(),
    owner=st.sampled_from(TEAMS),
)
def test_another_tenants_response_is_an_unknown_id(
    fuzz_gateway: FuzzGateway, ids: Ids, routes: list[str], streamed: bool, owner: str
):
    """A response one tenant just created is, for the other, byte for byte (request id, date
    and the id itself aside) the 404 an id that never existed gets: retrieve, input_items,
    delete, previous_response_id. Afterwards it is still the owner's, unchanged."""
    _record(fuzz_gateway, "cross-tenant")
    other = TEAMS[1 - TEAMS.index(owner)]
    body = {"model": "fake-model", "input": f"mine {owner}", "stream": streamed}
    reply = _unthrottled(fuzz_gateway, _post(RESPONSES, body, owner))
    created = response_id_of(_parsed(reply))
    assert created is not None, reply.describe()
    before = _unthrottled(fuzz_gateway, Sent(b"GET", _stored(created), [_key(owner)], None))
    for route in routes:
        foreign = _unthrottled(fuzz_gateway, _probe(route, created, other))
        unknown_id = never_existed()
        unknown = _unthrottled(fuzz_gateway, _probe(route, unknown_id, other))
        _same_answer(foreign, created, unknown, unknown_id)
    after = _unthrottled(fuzz_gateway, Sent(b"GET", _stored(created), [_key(owner)], None))
    assert after.status == 200 and after.body == before.body, after.describe()


# --- legacy completions -----------------------------------------------------------------------


@fuzz_settings(300)
@given(body=completion_body(), team=TEAM_DRAW)
def test_completions_bodies(fuzz_gateway: FuzzGateway, body: dict[str, Any], team: str):
    """Completions requests from the schema: a text completion (or its chunks) or an OpenAI
    error; echo, logprobs, suffix, best_of and token prompts are answered only by the native
    model, else refused with a 400."""
    _record(fuzz_gateway, "completions")
    native = needs_native(body)
    # The provider's own answers are relayed as they came: their schema check is lenient.
    relayed = native and body["model"] == NATIVE_MODEL
    reply, parsed = send(fuzz_gateway, _post(COMPLETIONS, body, team), strict_schema=not relayed)
    event(f"native-only={native} model={'native' if body['model'] == NATIVE_MODEL else 'chat'}")
    event(f"status={reply.status}")
    if parsed is KNOWN_BUG:
        return
    if native and body["model"] != NATIVE_MODEL:
        assert reply.status != 200, f"answered what needs a native upstream\n{reply.describe()}"
    if reply.status == 200 and body.get("stream") is True:
        assert reply.content_type == "text/event-stream", reply.describe()


@fuzz_settings(200)
@given(data=st.data(), team=TEAM_DRAW)
def test_completions_mutated_bodies(fuzz_gateway: FuzzGateway, data: st.DataObject, team: str):
    """A completions body broken in one to three ways, then maybe at the byte level."""
    _record(fuzz_gateway, "completions-mutated")
    tree, applied = data.draw(mutated(data.draw(completion_body())))
    raw = dumps(tree)
    if data.draw(st.integers(0, 3)) == 0:
        raw, kind = data.draw(byte_mutated(raw))
        applied.append(kind)
    note(f"mutations: {applied}")
    sent = Sent(b"POST", COMPLETIONS, [JSON_TYPE, _key(team)], raw, notes=tuple(applied))
    refuses_what_it_must(fuzz_gateway, sent, raw)


# --- one conversation, many clients at once -------------------------------------------------


def _race_plan(root: str) -> list[Sent]:
    """Continuations of `root` (plain and streamed), reads of it, its input items and its
    deletion, all at once; plus clients that leave a stream after its first bytes."""
    key = [_key("team-a")]
    turn = {"model": "fake-model", "input": "and then?", "previous_response_id": root}
    plan = [
        _post(RESPONSES, turn, "team-a"),
        _post(RESPONSES, {**turn, "stream": True}, "team-a"),
        Sent(b"GET", _stored(root), key, None),
        Sent(b"GET", _stored(root, b"/input_items?order=asc"), key, None),
    ]
    return plan * 4 + [Sent(b"DELETE", _stored(root), key, None)]


def test_a_conversation_continued_read_and_deleted_at_once(fuzz_gateway: FuzzGateway) -> None:
    """Sixteen clients continue, read and list one stored response while a seventeenth deletes
    it, and others drop their streams after the first bytes: every answer meets the contract
    (a continuation either found the response or is its 404), the process stays up."""
    _record(fuzz_gateway, "race")
    for round_ in range(5):
        _, answer = send(
            fuzz_gateway,
            _post(RESPONSES, {"model": "fake-model", "input": f"root {round_}"}, "team-a"),
        )
        root = response_id_of(answer)
        assert root is not None, answer
        plan = _race_plan(root)
        with ThreadPoolExecutor(max_workers=8) as pool:
            leaving = [pool.submit(_leave_early, fuzz_gateway.port, root) for _ in range(3)]
            replies = list(pool.map(lambda sent: send(fuzz_gateway, sent)[0], plan))
            for left in leaving:
                left.result()
        for sent, reply in zip(plan, replies, strict=True):
            if reply.status != 200:
                assert reply.status == 404, f"{sent.describe()}\n{reply.describe()}"
    assert fuzz_gateway.gateway.alive(), fuzz_gateway.gateway.output()[-3000:]


def _leave_early(port: int, root: str) -> None:
    """A streamed continuation whose client reads its first bytes and closes the socket."""
    body = {"model": "fake-model", "input": "bye", "previous_response_id": root, "stream": True}
    data, _ = build_request(_post(RESPONSES, body, "team-a"))
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(data)
        sock.recv(64)


# --- afterwards: the process survived ---------------------------------------------------------


def test_the_gateway_survived_and_kept_its_memory(fuzz_gateway: FuzzGateway) -> None:
    """After every fuzz test above, the process is alive, answers /healthz and a normal
    request (streamed too), and its RSS grew less than RSS_GROWTH_LIMIT_MIB since the warm-up
    (which filled the bounded response store), and it logged no traceback."""
    assert_survived(fuzz_gateway, RSS_GROWTH_LIMIT_MIB)
    # An exception nobody answered for (a background task, a write after the headers) shows
    # only in the log. (test_fuzz_http.py cannot ask this: aiohttp logs the tracebacks of the
    # compressed bodies that do not inflate, which it answers with a 400.)
    log = fuzz_gateway.module_log()
    assert "Traceback" not in log, log[max(0, log.index("Traceback") - 300) :][:4000]


# --- regressions: gateway bugs the fuzzing found ----------------------------------------------
# (each fixed since; one still open would be in rawhttp.KNOWN_BUGS while the fuzz explores on)


def test_an_empty_input_items_page_conforms(fuzz_gateway: FuzzGateway) -> None:
    """An empty page (after= the last item, or a response continued with no input of its
    own) validates: ResponseItemList requires first_id and last_id as strings, so they are
    empty ones (they were null)."""
    body = {"model": "fake-model", "input": "one item"}
    _, answer = send(fuzz_gateway, _post(RESPONSES, body, "team-a"))
    response_id = response_id_of(answer)
    assert response_id is not None, answer
    key = [_key("team-a")]
    _, listing = send(fuzz_gateway, Sent(b"GET", _stored(response_id, b"/input_items"), key, None))
    last = listing["data"][-1]["id"].encode()
    page = Sent(b"GET", _stored(response_id, b"/input_items?after=" + last), key, None)
    reply = exchange(fuzz_gateway.port, page)
    assert reply is not None and reply.status == 200, reply
    assert_conforms(json.loads(reply.body), "ResponseItemList")


ECHOED_VALUES = {
    "reasoning.effort": {"reasoning": {"effort": "bogus"}},
    "reasoning.summary": {"reasoning": {"summary": "x"}},
    "tool_choice": {"tool_choice": "lookup", "tools": [{"type": "function", "name": "lookup"}]},
    "text.verbosity": {"text": {"verbosity": "loud"}},
    "text.format.name": {"text": {"format": {"type": "json_schema", "schema": {}}}},
    "text.format.strict": {
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {}, "strict": "yes"}}
    },
}


@pytest.mark.parametrize("param", list(ECHOED_VALUES))
def test_values_the_response_would_echo_are_checked(fuzz_gateway: FuzzGateway, param: str):
    """Was a bug: the Response echoes reasoning, text and tool_choice as the request gave them,
    and gateway/responses/request.py took any object (or string) there, so a value the schema
    forbids made a 200 whose Response did not validate. Now a 400 naming the field."""
    body = {"model": "fake-model", "input": "hi", **ECHOED_VALUES[param]}
    reply = exchange(fuzz_gateway.port, _post(RESPONSES, body, "team-a"))
    assert reply is not None
    assert_openai_error(
        reply.status, dict(reply.headers), reply.body, expected_status=400, param=param
    )


@pytest.mark.parametrize(
    "given", [[], [{"type": "reasoning", "summary": []}]], ids=["no-items", "reasoning-only"]
)
def test_an_empty_input_is_refused_by_its_own_name(fuzz_gateway: FuzzGateway, given: Any):
    """Was a bug: an input with nothing a chat model reads (no items, or only reasoning, which
    is not replayed) became a chat body without messages, and the 400 named `messages`, a
    field the client never sent. Now the 400 names `input`."""
    body = {"model": "fake-model", "input": given}
    reply = exchange(fuzz_gateway.port, _post(RESPONSES, body, "team-a"))
    assert reply is not None
    assert_openai_error(
        reply.status, dict(reply.headers), reply.body, expected_status=400, param="input"
    )


NATIVE_FAULTS = {
    "error-event": {"stream_error_after": 2},
    "cut": {"cut_after": 3},
    "malformed": {"malformed": True},
    "not-utf8": {"invalid_utf8": True},
}


@pytest.mark.parametrize("fault", list(NATIVE_FAULTS))
def test_a_broken_native_stream_ends_with_response_failed(fuzz_gateway: FuzzGateway, fault: str):
    """Was a bug: a native Responses stream (a built-in tool, relayed from the provider) that
    broke ended with an `error` event alone (gateway/reply/native.py NativeEvents.failed);
    a translated stream ends with `error` then `response.failed`, and clients wait for a
    terminal event. Now gateway/responses/native.py NativeStream adds `response.failed`."""
    body = {
        "model": NATIVE_MODEL,
        "input": "search this",
        "tools": [{"type": "web_search"}],
        "stream": True,
        "fake": NATIVE_FAULTS[fault],
    }
    reply, events = send(fuzz_gateway, _post(RESPONSES, body, "team-a"))
    assert reply.status == 200, reply.describe()
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"], events


def test_a_native_final_response_of_a_wrong_shape_is_not_a_500(fuzz_gateway: FuzzGateway):
    """Was a bug: a native stream's final Response is kept in the store, and keeping it
    replays its output as chat turns (gateway/responses/output.py conversation_output), which
    indexed whatever the provider sent: an `output` that is not a list of items raised in
    NativeStream.end, after the stream's headers, and aiohttp wrote an HTTP 500 into the
    chunked body. Now an output of the wrong shape is relayed but not kept."""
    body = {
        "model": NATIVE_MODEL,
        "input": "search this",
        "tools": [{"type": "web_search"}],
        "stream": True,
        "fake": {"extra": {"output": 5}},
    }
    reply, events = send(fuzz_gateway, _post(RESPONSES, body, "team-a"), strict_schema=False)
    assert reply.status == 200 and events[-1]["type"] == "response.completed", reply.describe()
    response_id = events[-1]["response"]["id"]
    stored = exchange(fuzz_gateway.port, Sent(b"GET", _stored(response_id), [_key("team-a")], None))
    assert stored is not None and stored.status == 404, stored


@pytest.mark.parametrize("path", [b"/v1/chat/completions", RESPONSES], ids=["chat", "responses"])
def test_a_client_leaving_a_stream_is_not_an_internal_error(fuzz_gateway: FuzzGateway, path):
    """Was a bug: a client that closes its socket mid-stream can make the next write raise
    aiohttp's ClientConnectionResetError ("Cannot write to closing transport": the connection
    is closing, the handler not cancelled yet), a ConnectionResetError that render.stream's
    inner `except Exception` took first: logged as "unhandled error mid-stream" with a
    traceback, recorded as internal_error. Forty clients that leave after the first bytes,
    each streamed from the upstream (about one in five hit the window on this machine): no
    such log entry."""
    text = " ".join(["word"] * 200)
    if path == RESPONSES:
        body: dict[str, Any] = {"model": "fake-model", "input": text}
    else:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": text}]}
    body |= {"stream": True, "fake": {"content": text}}
    prefix = f"leave-{os.urandom(4).hex()}-"
    for i in range(40):
        headers = [JSON_TYPE, _key("team-a"), (b"x-request-id", f"{prefix}{i}".encode())]
        headers.append((b"x-gateway-cache", b"bypass"))  # each one streamed from the upstream
        data, _ = build_request(Sent(b"POST", path, headers, dumps(body)))
        with socket.create_connection(("127.0.0.1", fuzz_gateway.port), timeout=20) as sock:
            sock.sendall(data)
            assert sock.recv(64)
    assert poll_until(lambda: _in_flight(fuzz_gateway) <= 1, timeout=10)  # the scrape itself
    log = fuzz_gateway.gateway.output()
    entry = f"unhandled error mid-stream in request {prefix}"
    assert entry not in log, log[log.index(entry) :][:2500]


def _in_flight(fuzz: FuzzGateway) -> float:
    samples = scrape(f"http://127.0.0.1:{fuzz.port}", "gateway_in_flight_requests")
    return sum(samples.values())
