"""Context compression for long conversations.

A client resends the whole history on every request, so an agent loop would pay for the same
summary again and again. Two choices keep that from happening:

- The cut moves in steps. With `max_turns` 20 and `keep_turns` 8, a history of 21 to 31 turns
  has its first 12 turns summarized, 32 to 43 its first 24, and so on: between keep_turns and
  max_turns turns stay verbatim (a few more when the cut moves back to keep a round whole), and
  the replaced prefix (hence the cache key) stays the same for 12 turns in a row. Cutting at
  exactly `keep_turns` would move the prefix, and miss the cache, on every request.
- Summaries are incremental: the summary of a longer prefix is made from the cached summary of
  the previous step plus the turns after it, so the summarizer's input stays about one step
  long however long the conversation grows.

The cut never separates an assistant `tool_calls` message from its results (it moves back to
the assistant message), and the last user message is always kept verbatim: when it falls in the
summarized part, it is placed right after the summary, so the model still reads the request in
the user's words.

Tool results older than the last two rounds are shortened to their key fields first (when
enabled), in every request over the threshold or not: it is deterministic, so the shortened
history is the same prefix on every request, and the summarizer reads the shortened form too.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gateway.config.guard import CompressionConfig
from gateway.util.tokens import message_text

Json = dict[str, Any]
Summarize = Callable[[list[Json]], Awaitable[str]]
"""Summarizes messages (a previous summary may come first, as a system message that starts
with SUMMARY_PREFIX). Render them as text for a cheap model: they may hold tool calls."""

SUMMARY_PREFIX = "Summary of the earlier conversation: "
_SYSTEM = frozenset({"system", "developer"})
_STRING_CHARS = 200  # the most of one string field a shortened JSON result keeps
Failure = Literal["timeout", "error", "empty"]


@dataclass(frozen=True, slots=True)
class Compression:
    """The messages to send and what was done to them."""

    messages: list[Json]
    summarized: int = 0  # turns replaced by the summary
    dropped: int = 0  # turns dropped without a summary, because summarizing failed
    cache_hit: bool = False  # the summary came from the cache: no summarizer call
    shortened: int = 0  # old tool results shortened
    failure: Failure | None = None  # why summarizing failed
    detail: str | None = None  # the summarizer's exception, for the log


class Compressor:
    """Compresses histories; holds the summary cache (one per process, shared by requests)."""

    def __init__(self) -> None:
        self._summaries: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._summaries)

    async def compress(
        self,
        messages: list[Json],
        config: CompressionConfig,
        summarize: Summarize,
        *,
        timeout: float | None = None,
        scope: str = "",
    ) -> Compression:
        """`timeout`: seconds the summarizer may take. `scope`: what else a summary depends on
        and who may reuse it (tenant, summarizer model), part of the cache key."""
        if not config.enabled:
            return Compression(messages)
        shortened = 0
        if config.shorten_tool_results:
            messages, shortened = shorten_tool_results(messages, config.tool_result_chars)
        head = _leading_system(messages)
        system, body = messages[:head], messages[head:]
        turns = [i for i, m in enumerate(body) if m.get("role") not in _SYSTEM]
        if len(turns) <= config.max_turns:
            return Compression(messages, shortened=shortened)
        step = config.max_turns - config.keep_turns
        count = (len(turns) - config.keep_turns) // step * step
        cuts = sorted({_safe_cut(body, turns[k]) for k in range(step, count + 1, step)} - {0})
        last_user = _last_user(body)
        if not cuts or _turns(body[: cuts[-1]], skip=last_user) == 0:
            return Compression(messages, shortened=shortened)
        cut = cuts[-1]
        keys = _prefix_digests(body, cuts, scope, config.summarizer_model)
        hit = self._get(keys[cut])
        failure: Failure | None = None
        detail: str | None = None
        try:
            summary = hit or await self._summarize(body, cuts, keys, config, summarize, timeout)
        except Exception as exc:  # any summarizer failure; cancellation still propagates
            summary, failure = "", "timeout" if isinstance(exc, TimeoutError) else "error"
            detail = f"{type(exc).__name__}: {exc}"[:300]
        if not summary:
            kept, dropped = _keep_last(system, body, turns, last_user, config.keep_turns)
            failure = failure or "empty"
            return Compression(
                kept, dropped=dropped, shortened=shortened, failure=failure, detail=detail
            )
        lifted = [body[last_user]] if last_user is not None and last_user < cut else []
        return Compression(
            [*system, _summary_message(summary), *lifted, *body[cut:]],
            summarized=_turns(body[:cut], skip=last_user),
            cache_hit=hit is not None,
            shortened=shortened,
        )

    async def _summarize(
        self,
        body: list[Json],
        cuts: list[int],
        keys: dict[int, str],
        config: CompressionConfig,
        summarize: Summarize,
        timeout: float | None,
    ) -> str:
        """Summarize body[:cuts[-1]], from the latest cached step when there is one."""
        cut, start, earlier = cuts[-1], 0, []
        for previous in reversed(cuts[:-1]):
            cached = self._get(keys[previous])
            if cached is not None:
                start, earlier = previous, [_summary_message(cached)]
                break
        async with asyncio.timeout(timeout):
            summary = (await summarize([*earlier, *body[start:cut]])).strip()
        if summary:
            self._put(keys[cut], summary, config)
        return summary

    def _get(self, key: str) -> str | None:
        summary = self._summaries.get(key)
        if summary is not None:
            self._summaries.move_to_end(key)
        return summary

    def _put(self, key: str, summary: str, config: CompressionConfig) -> None:
        self._summaries[key] = summary
        self._summaries.move_to_end(key)
        while len(self._summaries) > config.summary_cache_entries:
            self._summaries.popitem(last=False)


def shorten_tool_results(messages: list[Json], limit: int) -> tuple[list[Json], int]:
    """Shorten the tool results older than the last two rounds that are longer than `limit`
    characters; return the new list (the input is not changed) and how many were shortened."""
    rounds = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and _calls(m)]
    if len(rounds) < 3:
        return messages, 0
    shortened = list(messages)
    count = 0
    for i, m in enumerate(messages[: rounds[-2]]):
        text = message_text(m) if m.get("role") == "tool" else ""
        short = shorten_result(text, limit) if len(text) > limit else text
        if len(short) < len(text):  # a result just over the limit is not worth a marker
            shortened[i] = {**m, "content": short}
            count += 1
    return shortened, count


def shorten_result(text: str, limit: int) -> str:
    """A JSON object keeps its top-level scalar fields (long strings cut) and the names of its
    nested ones, in order, as far as `limit` allows; anything else keeps its first two thirds
    and last third of `limit` characters around a marker saying how much was removed."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            doc = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict):
            key_fields = _key_fields(doc, limit)
            if len(key_fields) < len(text):
                return key_fields
    head = limit * 2 // 3
    tail = limit - head
    removed = len(text) - head - tail
    return f"{text[:head]}\n[... {removed:,} characters removed by the gateway ...]\n{text[-tail:]}"


def _key_fields(doc: Json, limit: int) -> str:
    kept: Json = {}
    size, omitted = 2, 0
    for key, value in doc.items():
        if isinstance(value, dict):
            value = f"<object with {len(value)} fields, removed>"
        elif isinstance(value, list):
            value = f"<list of {len(value)} items, removed>"
        elif isinstance(value, str) and len(value) > _STRING_CHARS:
            value = (
                f"{value[:_STRING_CHARS]}... <{len(value) - _STRING_CHARS:,} characters removed>"
            )
        entry = len(orjson.dumps({key: value})) - 1
        if size + entry > limit:
            omitted += 1
            continue
        kept[key] = value
        size += entry
    note = "shortened by the gateway: nested values and long strings removed"
    kept["_gateway"] = f"{note}, {omitted} more fields omitted" if omitted else note
    return orjson.dumps(kept).decode()


def _prefix_digests(
    body: list[Json], cuts: list[int], scope: str, model: str | None
) -> dict[int, str]:
    """A digest of body[:cut] for each cut, in one pass."""
    digest = hashlib.blake2b(orjson.dumps([scope, model]), digest_size=20)
    digests: dict[int, str] = {}
    wanted = set(cuts)
    for i, message in enumerate(body[: cuts[-1]]):
        digest.update(orjson.dumps(message, option=orjson.OPT_SORT_KEYS) + b"\n")
        if i + 1 in wanted:
            digests[i + 1] = digest.hexdigest()
    return digests


def _keep_last(
    system: list[Json], body: list[Json], turns: list[int], last_user: int | None, keep: int
) -> tuple[list[Json], int]:
    """Without a summary: the leading system messages, the last user message and the last
    `keep` turns; and how many turns that drops."""
    cut = _safe_cut(body, turns[-keep])
    lifted = [body[last_user]] if last_user is not None and last_user < cut else []
    return [*system, *lifted, *body[cut:]], _turns(body[:cut], skip=last_user)


def _safe_cut(body: list[Json], cut: int) -> int:
    """Move a cut back until it does not fall inside a round (before a tool result)."""
    while cut > 0 and body[cut].get("role") == "tool":
        cut -= 1
    return cut


def _leading_system(messages: list[Json]) -> int:
    count = 0
    while count < len(messages) and messages[count].get("role") in _SYSTEM:
        count += 1
    return count


def _last_user(body: list[Json]) -> int | None:
    return next((i for i in range(len(body) - 1, -1, -1) if body[i].get("role") == "user"), None)


def _turns(messages: list[Json], skip: int | None) -> int:
    return sum(1 for i, m in enumerate(messages) if m.get("role") not in _SYSTEM and i != skip)


def _calls(message: Json) -> bool:
    calls = message.get("tool_calls")
    return isinstance(calls, list) and bool(calls)


def _summary_message(summary: str) -> Json:
    return {"role": "system", "content": SUMMARY_PREFIX + summary}
