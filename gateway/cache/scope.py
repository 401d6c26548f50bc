"""What a cached answer may be reused for.

The scope is exact, never similarity: tenant, requested model, and a hash of everything else
that changes the answer (system prompt, every earlier turn, tools, tool_choice,
response_format, sampling parameters, and any field we do not know, since it may matter).
Only the last user turn is compared by similarity, and only inside one scope.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.util.tokens import message_text

# Fields that cannot change the answer's content. Everything else is part of the scope.
_NOT_SCOPE = frozenset(
    {"model", "messages", "stream", "stream_options", "user", "metadata", "store", "service_tier"}
)


@dataclass(frozen=True, slots=True)
class CacheKey:
    tenant: str
    model: str
    scope: str  # hex digest: tenant, model, history, parameters
    exact: str  # hex digest: scope + normalized last user text
    text: str  # the last user turn, as the client sent it


def cache_key(
    tenant: str, model: str, body: dict[str, Any], normalized: str, context: str | None = None
) -> CacheKey:
    """Build the key of a request whose last message is a user turn (see `wire.last_user_text`).
    `context`: what else the answer depends on (a knowledge base name), if anything."""
    messages = body["messages"]
    params = {k: v for k, v in body.items() if k not in _NOT_SCOPE}
    scope_doc: dict[str, Any] = {
        "tenant": tenant,
        "model": model,
        "history": messages[:-1],
        "params": params,
    }
    if context is not None:
        scope_doc["context"] = context
    scope = _digest(orjson.dumps(scope_doc, option=orjson.OPT_SORT_KEYS))
    exact = _digest(scope.encode() + b"\x00" + normalized.encode())
    return CacheKey(tenant, model, scope, exact, message_text(messages[-1]))


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()
