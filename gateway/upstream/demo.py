"""The built-in demo provider: deterministic answers with no key and no network.

It exists so the quickstart works offline. Every answer says it comes from the demo model.
It echoes the question, calls a declared tool when tools are sent (arguments built from the
tool's JSON Schema), answers from a tool result, streams word by word, and returns
deterministic embeddings (hashed character trigrams, so similar texts land near each other).
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import AsyncIterator
from typing import Any

import orjson
from pydantic import SecretStr

from gateway import wire
from gateway.upstream.base import Json, Provider
from gateway.util.tokens import estimate_prompt_tokens, estimate_tokens, message_text

DEMO_NOTICE = "[demo model: no real LLM behind this answer]"
EMBEDDING_DIMENSIONS = 256


class DemoProvider(Provider):
    async def chat(self, body: Json, key: SecretStr | None = None) -> Json:
        message, finish = _answer(body)
        model = str(body.get("model", "demo"))
        prompt = estimate_prompt_tokens(body.get("messages", []))
        completion = estimate_tokens(message.get("content") or "") + 8 * len(
            message.get("tool_calls", [])
        )
        return wire.chat_completion(
            model, message, finish, wire.usage(prompt, completion), system_fingerprint="demo"
        )

    async def stream(self, body: Json, key: SecretStr | None = None) -> AsyncIterator[list[Json]]:
        for chunk in await self._chunks(body):
            yield [chunk]  # one at a time, as a model would

    async def _chunks(self, body: Json) -> list[Json]:
        reply = await self.chat(body)
        id_, created, model = reply["id"], reply["created"], reply["model"]
        message = reply["choices"][0]["message"]

        def make(delta: Json | None, finish: str | None = None, **kw: Any) -> Json:
            return wire.chunk(id_, model, created, delta, finish, system_fingerprint="demo", **kw)

        out = [make({"role": "assistant", "content": ""})]
        words = (message.get("content") or "").split(" ")
        out += [make({"content": word if i == 0 else " " + word}) for i, word in enumerate(words)]
        for index, call in enumerate(message.get("tool_calls", [])):
            fn, args = call["function"], call["function"]["arguments"]
            opening = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": ""},
            }
            out.append(make({"tool_calls": [opening]}))
            out += [
                make({"tool_calls": [{"index": index, "function": {"arguments": args[i : i + 8]}}]})
                for i in range(0, len(args), 8)
            ]
        out.append(make({}, reply["choices"][0]["finish_reason"]))
        if (body.get("stream_options") or {}).get("include_usage"):
            out.append(make(None, usage=reply["usage"]))
        return out

    async def embeddings(self, body: Json, key: SecretStr | None = None) -> Json:
        inputs = body.get("input")
        # One text, a list of texts, one token array, or a list of token arrays.
        if isinstance(inputs, str) or (
            isinstance(inputs, list) and inputs and all(isinstance(t, int) for t in inputs)
        ):
            inputs = [inputs]
        texts = list(inputs or [])
        dims = int(body.get("dimensions") or EMBEDDING_DIMENSIONS)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vector = _embed(text if isinstance(text, str) else orjson.dumps(text).decode(), dims)
            encoded: Any = (
                base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
                if as_base64
                else vector
            )
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens = sum(estimate_tokens(t) if isinstance(t, str) else len(t) for t in texts)
        return {
            "object": "list",
            "data": data,
            "model": str(body.get("model", "demo-embedding")),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _answer(body: Json) -> tuple[Json, str]:
    messages = body.get("messages") or [{}]
    last = messages[-1]
    tools = body.get("tools") or []
    tool_choice = body.get("tool_choice")
    if last.get("role") == "tool":
        result = message_text(last)[:200]
        return _text(f"{DEMO_NOTICE} The tool returned: {result}"), "stop"
    if tools and tool_choice != "none":
        tool = _chosen_tool(tools, tool_choice)
        if tool is not None:
            return _tool_call(tool, message_text(last)), "tool_calls"
    question = next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    return _text(f"{DEMO_NOTICE} You asked: {question}"), "stop"


def _text(content: str) -> Json:
    return {"role": "assistant", "content": content, "refusal": None}


def _chosen_tool(tools: list[Json], tool_choice: Any) -> Json | None:
    functions = [t["function"] for t in tools if t.get("type") == "function" and "function" in t]
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        return next((f for f in functions if f.get("name") == wanted), None)
    return functions[0] if functions else None


def _tool_call(function: Json, text: str) -> Json:
    arguments = _example(function.get("parameters") or {"type": "object"}, text)
    digest = hashlib.sha256(f"{function['name']}:{text}".encode()).hexdigest()[:24]
    call = {
        "id": f"call_{digest}",
        "type": "function",
        "function": {"name": function["name"], "arguments": orjson.dumps(arguments).decode()},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}


def _example(schema: Json, text: str) -> Any:
    """A value that satisfies a JSON Schema's common keywords, for demo tool arguments."""
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        props = schema.get("properties") or {}
        required = schema.get("required") or list(props)
        return {name: _example(props.get(name) or {}, text) for name in required}
    if kind == "array":
        items = schema.get("items") or {}
        return [_example(items, text)] * int(schema.get("minItems", 1) or 0)
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return (text.strip() or "demo")[:64]


def _embed(text: str, dims: int) -> list[float]:
    vector = [0.0] * dims
    padded = f"  {text.lower()}  "
    for i in range(len(padded) - 2):
        h = int.from_bytes(hashlib.blake2b(padded[i : i + 3].encode(), digest_size=8).digest())
        vector[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]
