"""Sending to the fuzzed gateway, and the warm-up before its baseline memory is read."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tests.reliability.rawhttp import Header, Reply, Sent, check_reply, exchange

if TYPE_CHECKING:
    from tests.reliability.fuzz_target import FuzzGateway

CHAT = b"/v1/chat/completions"
EMBEDDINGS = b"/v1/embeddings"
RESPONSES = b"/v1/responses"
COMPLETIONS = b"/v1/completions"
JSON_TYPE: Header = (b"Content-Type", b"application/json")


def bearer(key: str) -> Header:
    return (b"Authorization", b"Bearer " + key.encode())


def tenant_a() -> Header:
    from tests.reliability.fuzz_target import TENANT_KEYS

    return bearer(TENANT_KEYS["team-a"])


def admin() -> Header:
    from tests.reliability.fuzz_target import ADMIN_KEY

    return bearer(ADMIN_KEY)


def post_json(path: bytes, body: Any, *headers: Header) -> Sent:
    return Sent(b"POST", path, [JSON_TYPE, *headers], json.dumps(body).encode())


def send(
    fuzz: FuzzGateway, sent: Sent, endpoint: str | None = None, *, strict_schema: bool = True
) -> tuple[Reply, Any]:
    """One exchange with the gateway, checked against the contract (rawhttp.check_reply)."""
    fuzz.sent += 1
    reply = exchange(fuzz.port, sent)
    if reply is None and not fuzz.gateway.alive():
        raise AssertionError(
            f"the gateway died on {sent.describe()}\n{fuzz.gateway.output()[-3000:]}"
        )
    parsed = check_reply(
        reply, sent, endpoint or endpoint_of(sent.path), strict_schema=strict_schema
    )
    if reply is None:  # allowed for a body cut short by the client (rawhttp.check_reply)
        return Reply(0, [], b"", b""), None
    return reply, parsed


def endpoint_of(path: bytes) -> str:
    route = path.split(b"?", 1)[0]
    if route == CHAT:
        return "chat"
    if route == EMBEDDINGS:
        return "embeddings"
    if route == RESPONSES:
        return "responses"
    if route.startswith(RESPONSES + b"/"):
        return "responses-stored"
    if route == COMPLETIONS:
        return "completions"
    if route == b"/v1/models":
        return "models"
    if route.startswith(b"/v1/models/"):
        return "model"
    return "other"


def warm_up(fuzz: FuzzGateway, rounds: int = 40) -> None:
    """Every path the fuzz tests take, a few times, before memory is measured: lazily built
    parts (pools, validator caches, the cache's index, the router) exist afterwards."""
    key = tenant_a()
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]
    for i in range(rounds):
        text = f"warm-up question {i % 7}"
        messages = [{"role": "user", "content": text}]
        for model in ("fake-model", "auto", "demo"):
            send(fuzz, post_json(CHAT, {"model": model, "messages": messages}, key))
            send(fuzz, post_json(CHAT, {"model": model, "messages": messages, "stream": True}, key))
        scripted = {
            "replies": [{"tool_calls": [{"name": "lookup", "arguments": '{"q": 1'}]}],
        }
        send(
            fuzz,
            post_json(
                CHAT,
                {"model": "fake-model", "messages": messages, "tools": tools, "fake": scripted},
                key,
            ),
        )
        send(
            fuzz,
            post_json(
                CHAT, {"model": "fake-model", "messages": messages, "fake": {"status": 503}}, key
            ),
        )
        send(fuzz, post_json(EMBEDDINGS, {"model": "fake-embedding", "input": [text, "x"]}, key))
        send(fuzz, post_json(EMBEDDINGS, {"model": "demo-embedding", "input": text}, key))
        send(fuzz, Sent(b"POST", CHAT, [JSON_TYPE, key], b'{"model": '))
        send(fuzz, Sent(b"POST", CHAT, [JSON_TYPE], b"{}"))
        send(fuzz, Sent(b"GET", b"/v1/models", [key], None))
        send(fuzz, Sent(b"GET", b"/admin/breakers", [admin()], None))
        send(fuzz, Sent(b"GET", b"/healthz", [], None))
        warm_up_responses(fuzz, text, tools)
        warm_up_completions(fuzz, text)


def warm_up_responses(fuzz: FuzzGateway, text: str, chat_tools: list[Any]) -> None:
    """/v1/responses plain, streamed, with a tool call, continued, level 4, natively with a
    built-in tool; then the stored-response routes and a deleted id. Six stored responses a
    round: the store (RESPONSES_KEPT) is full before the baseline is read."""
    from tests.reliability.fuzz_target import NATIVE_MODEL

    key = tenant_a()
    tools = [{"type": "function", **tool["function"]} for tool in chat_tools]
    scripted = {"replies": [{"tool_calls": [{"name": "lookup", "arguments": '{"q": 1'}]}]}
    bodies: list[Any] = [
        {"model": "fake-model", "input": text},
        {"model": "auto", "input": text, "stream": True, "instructions": "be brief"},
        {"model": "fake-model", "input": text, "tools": tools, "fake": scripted},
        {"model": "fake-model", "input": text, "tools": tools, "stream": True, "fake": scripted},
        {"model": "fake-model", "input": text, "fake": {"status": 503}, "store": False},
        {"model": NATIVE_MODEL, "input": text, "tools": [{"type": "web_search"}]},
        {"model": NATIVE_MODEL, "input": text, "tools": [{"type": "web_search"}], "stream": True},
    ]
    ids = []
    for body in bodies:
        _, answer = send(fuzz, post_json(RESPONSES, body, key))
        ids.append(response_id_of(answer))
    first = next(i for i in ids if i is not None)
    send(
        fuzz,
        post_json(
            RESPONSES, {"model": "fake-model", "input": "and?", "previous_response_id": first}, key
        ),
    )
    stored = RESPONSES + b"/" + first.encode()
    send(fuzz, Sent(b"GET", stored, [key], None))
    send(fuzz, Sent(b"GET", stored + b"/input_items?limit=2&order=asc", [key], None))
    send(fuzz, Sent(b"DELETE", stored, [key], None))
    send(fuzz, Sent(b"GET", stored, [key], None))  # 404 now
    send(fuzz, post_json(RESPONSES, {"model": "fake-model", "input": [{"type": "nope"}]}, key))


def response_id_of(answer: Any) -> str | None:
    """The id of a Response, or of the one a stream's events carry."""
    if isinstance(answer, list):
        answer = answer[-1].get("response") if answer else None
    if isinstance(answer, dict) and answer.get("object") == "response":
        return str(answer["id"])
    return None


def warm_up_completions(fuzz: FuzzGateway, text: str) -> None:
    """/v1/completions translated (plain, two prompts, streamed), natively (echo, streamed
    logprobs), and refused (echo where no upstream serves completions)."""
    from tests.reliability.fuzz_target import NATIVE_MODEL

    key = tenant_a()
    for body in (
        {"model": "fake-model", "prompt": text, "max_tokens": 5},
        {"model": "fake-model", "prompt": [text, "x"]},
        {"model": "auto", "prompt": text, "stream": True},
        {"model": NATIVE_MODEL, "prompt": text, "echo": True},
        {"model": NATIVE_MODEL, "prompt": [1, 2], "logprobs": 2, "stream": True},
        {"model": "fake-model", "prompt": text, "echo": True},
    ):
        send(fuzz, post_json(COMPLETIONS, body, key))
