"""How the gateway asks a (cheap) model to summarize the oldest turns of a conversation."""

from __future__ import annotations

from typing import Any

from gateway.util.tokens import message_text

Json = dict[str, Any]

INSTRUCTION = (
    "You summarize the earlier part of a conversation between a user, an assistant and the "
    "assistant's tools, so that the assistant can continue without the original. Keep every "
    "fact, number, name, decision and open question, and the key values of tool results; drop "
    "pleasantries and repetition. Plain text, at most about 200 words."
)


def summary_request(model: str, messages: list[Json]) -> Json:
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": INSTRUCTION},
            {"role": "user", "content": transcript(messages)},
        ],
        "temperature": 0,
    }


def transcript(messages: list[Json]) -> str:
    """The messages as plain text: tool calls and results spelled out, roles named."""
    lines = []
    for message in messages:
        role = message.get("role", "?")
        text = message_text(message)
        calls = [
            f"{c['function'].get('name')}({c['function'].get('arguments', '')})"
            for c in message.get("tool_calls") or []
            if isinstance(c, dict) and isinstance(c.get("function"), dict)
        ]
        if calls:
            text = (text + "\n" if text else "") + "[calls tools: " + "; ".join(calls) + "]"
        lines.append(f"{'tool result' if role == 'tool' else role}: {text}")
    return "\n".join(lines)


def summary_text(completion: Json) -> str:
    choices = completion.get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content")
    return content.strip() if isinstance(content, str) else ""
