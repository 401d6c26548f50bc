"""The built-in demo provider: deterministic answers with no key and no network.

It exists so the quickstart, and every feature that needs a model, works offline. Every text
answer says it comes from the demo model (and which one, for models other than `demo`: the
demo tiers of a routed alias). It echoes the question; calls a declared tool when tools are
sent, with arguments valid against the tool's JSON Schema; answers from a tool result; answers
`response_format` with JSON (an object for `json_object`, an instance valid against the schema
for `json_schema`); gives `n` distinct choices; streams word by word; and returns deterministic
embeddings (hashed character trigrams, so similar texts land near each other). Asked by the
loop guard to stop calling tools, it answers from the last tool result.

`demo-misbehave` (upstream/demo_mistakes.py) makes the tool-call mistakes agents make, on
request, so the guards can be tried offline.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import AsyncIterator
from itertools import zip_longest
from typing import Any

import orjson
from pydantic import SecretStr

from gateway import wire
from gateway.guard.loops import FINALIZE_OPENING
from gateway.guard.schemas import Budget
from gateway.upstream import demo_mistakes
from gateway.upstream.base import Json, Provider
from gateway.upstream.schema_instance import BUILD_SECONDS, instance
from gateway.util import offload
from gateway.util.tokens import estimate_prompt_tokens, estimate_tokens, message_text

DEMO_NOTICE = "[demo model: no real LLM behind this answer]"
EMBEDDING_DIMENSIONS = 256


class DemoProvider(Provider):
    async def chat(self, body: Json, key: SecretStr | None = None) -> Json:
        model = str(body.get("model", "demo"))
        n = body.get("n")
        count = n if isinstance(n, int) and n > 1 else 1
        # Values built from a client's schemas: off the event loop, one budget for all choices.
        builds = bool(body.get("tools") or body.get("response_format"))
        choices = await offload.run(not builds, _answers, body, model, count)
        prompt = estimate_prompt_tokens(body.get("messages", []))
        completion = sum(_tokens(message) for message, _ in choices)
        reply = wire.chat_completion(
            model, choices[0][0], choices[0][1], wire.usage(prompt, completion)
        )
        reply["choices"] = [
            {"index": i, "message": message, "logprobs": None, "finish_reason": finish}
            for i, (message, finish) in enumerate(choices)
        ]
        reply["system_fingerprint"] = "demo"
        return reply

    async def stream(self, body: Json, key: SecretStr | None = None) -> AsyncIterator[list[Json]]:
        for chunk in await self._chunks(body):
            yield [chunk]  # one at a time, as a model would

    async def _chunks(self, body: Json) -> list[Json]:
        """The plain answer as chunks: each choice's deltas, interleaved as OpenAI streams
        several choices, then usage when asked for."""
        reply = await self.chat(body)
        id_, created, model = reply["id"], reply["created"], reply["model"]

        def make(index: int, delta: Json | None, finish: str | None = None, **kw: Any) -> Json:
            out = wire.chunk(id_, model, created, delta, finish, system_fingerprint="demo", **kw)
            for choice in out["choices"]:
                choice["index"] = index
            return out

        per_choice = [
            [make(c["index"], d) for d in _deltas(c["message"])]
            + [make(c["index"], {}, c["finish_reason"])]
            for c in reply["choices"]
        ]
        out = [chunk for row in zip_longest(*per_choice) for chunk in row if chunk is not None]
        if (body.get("stream_options") or {}).get("include_usage"):
            out.append(make(0, None, usage=reply["usage"]))
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


def _deltas(message: Json) -> list[Json]:
    """One message as stream deltas: the role, its words, then each tool call in fragments."""
    out: list[Json] = [{"role": "assistant", "content": ""}]
    words = (message.get("content") or "").split(" ")
    out += [{"content": word if i == 0 else " " + word} for i, word in enumerate(words)]
    for index, call in enumerate(message.get("tool_calls", [])):
        fn, args = call["function"], call["function"]["arguments"]
        opening = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": fn["name"], "arguments": ""},
        }
        out.append({"tool_calls": [opening]})
        out += [
            {"tool_calls": [{"index": index, "function": {"arguments": args[i : i + 8]}}]}
            for i in range(0, len(args), 8)
        ]
    return out


def _tokens(message: Json) -> int:
    return estimate_tokens(message.get("content") or "") + 8 * len(message.get("tool_calls", []))


def notice(model: str) -> str:
    """The label every text answer starts with; it names the model unless it is `demo`."""
    if model in ("demo", ""):
        return DEMO_NOTICE
    return f"[demo model {model}: no real LLM behind this answer]"


def _answers(body: Json, model: str, count: int) -> list[tuple[Json, str]]:
    budget = Budget(BUILD_SECONDS)
    return [_answer(body, model, index, count, budget) for index in range(count)]


def _answer(
    body: Json, model: str, index: int, count: int, budget: Budget | None = None
) -> tuple[Json, str]:
    """Choice `index` of `count`: a tool call, JSON, or text, as the request asks."""
    messages = body.get("messages") or [{}]
    last = messages[-1]
    tools = body.get("tools") or []
    tool_choice = body.get("tool_choice")
    label = notice(model) + (f" (choice {index + 1} of {count})" if count > 1 else "")
    if demo_mistakes.misbehaves(model):
        functions = _functions(tools, tool_choice)
        made = demo_mistakes.answer(body, label, functions, index, budget or Budget(BUILD_SECONDS))
        if made is not None:
            return made, "tool_calls" if made.get("tool_calls") else "stop"
    if tools and tool_choice != "none" and last.get("role") != "tool":
        tool = _chosen_tool(tools, tool_choice)
        if tool is not None:
            return _tool_call(tool, message_text(last), index, budget), "tool_calls"
    question = next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    structured = _structured(body.get("response_format"), question, label, index, budget)
    if structured is not None:  # JSON was asked for: JSON it is, after a tool result too
        return _text(structured), "stop"
    if last.get("role") == "tool":
        result = message_text(last)[:200]
        return _text(f"{label} The tool returned: {result}"), "stop"
    if last.get("role") == "user" and message_text(last).startswith(FINALIZE_OPENING):
        result = next((message_text(m) for m in reversed(messages) if m.get("role") == "tool"), "")
        said = f"The tools returned: {result[:200]}" if result else "No tool returned anything."
        return _text(f"{label} The gateway stopped the tool calls. {said}"), "stop"
    return _text(f"{label} You asked: {question}"), "stop"


def _structured(
    response_format: Any, question: str, label: str, index: int, budget: Budget | None = None
) -> str | None:
    """The JSON text `response_format` asks for; None for plain text."""
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        return orjson.dumps({"demo": label, "you_asked": question}).decode()
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        schema = schema if schema is not None else {"type": "object"}
        value = instance(schema, question, index, budget)
        return orjson.dumps(value).decode()
    return None


def _text(content: str) -> Json:
    return {"role": "assistant", "content": content, "refusal": None}


def _chosen_tool(tools: list[Json], tool_choice: Any) -> Json | None:
    """The tool `tool_choice` names, or the first one (`auto` and `required` alike)."""
    functions = _functions(tools, tool_choice)
    return functions[0] if functions else None


def _functions(tools: list[Json], tool_choice: Any) -> list[Json]:
    """The declared functions that may be called, in order: only the one `tool_choice` names,
    when it names one."""
    declared = [
        t.get("function") for t in tools if isinstance(t, dict) and t.get("type") == "function"
    ]
    functions: list[Json] = [f for f in declared if isinstance(f, dict) and "name" in f]
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        return [f for f in functions if f.get("name") == wanted]
    return functions


def _tool_call(function: Json, text: str, index: int, budget: Budget | None = None) -> Json:
    arguments = instance(function.get("parameters") or {"type": "object"}, text, index, budget)
    digest = hashlib.sha256(f"{function['name']}:{text}:{index}".encode()).hexdigest()[:24]
    call = {
        "id": f"call_{digest}",
        "type": "function",
        "function": {"name": function["name"], "arguments": orjson.dumps(arguments).decode()},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}


def _embed(text: str, dims: int) -> list[float]:
    vector = [0.0] * dims
    padded = f"  {text.lower()}  "
    for i in range(len(padded) - 2):
        h = int.from_bytes(hashlib.blake2b(padded[i : i + 3].encode(), digest_size=8).digest())
        vector[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]
