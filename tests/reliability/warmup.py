"""Sending to the fuzzed gateway, and the warm-up before its baseline memory is read."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tests.reliability.rawhttp import Header, Reply, Sent, check_reply, exchange

if TYPE_CHECKING:
    from tests.reliability.fuzz_target import FuzzGateway

CHAT = b"/v1/chat/completions"
EMBEDDINGS = b"/v1/embeddings"
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
    if path == CHAT:
        return "chat"
    if path == EMBEDDINGS:
        return "embeddings"
    if path == b"/v1/models":
        return "models"
    if path.startswith(b"/v1/models/"):
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
