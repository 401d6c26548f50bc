"""Agent-loop limits, read from the history the client sends.

The gateway sees an agent loop only as a growing history: each request repeats every earlier
round. A *round* is an assistant message with `tool_calls` followed by its `role: tool` results.
Every rule except the token budget looks only at the rounds since the last user message (the
current agent run): a new user turn is a fresh start, and asking the same thing twice is not a
loop.

"In a row" (identical calls, failures) is counted per tool, over that tool's calls in order
(rounds in order, parallel calls in one round in their listed order, each counted): calls of
other tools in between do not break a streak, since an agent alternating `search(x)` and
`read(y)` is still looping; a call of the same tool with other arguments (or that succeeds)
does. A side effect: re-reading one file after each edit counts as identical calls; list such
tools in `pollable_tools`, which exempts a tool from the identical-call and no-progress rules
(not from failures: a poll that keeps failing is still failing).

When several rules fire, the most specific is reported: failures, identical calls, no
progress, rounds, budget.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gateway.config.guard import LoopGuardConfig
from gateway.util.tokens import estimate_prompt_tokens, estimate_tokens, message_text

Json = dict[str, Any]
StopReason = Literal[
    "max_rounds", "identical_calls", "tool_failures", "no_progress", "token_budget"
]

# How the `finalize` instruction begins (the demo model reads it to answer as a model would).
FINALIZE_OPENING = "[gateway] Tool calls are stopped: "
# Comparing long round texts: difflib on the head and tail, plus token counts over the whole.
_WINDOW = 1000
_WORD = re.compile(r"\w+|[^\w\s]")

# Failure heuristics, conservative on purpose: a false stop costs an answer.
_ERROR_TEXT = re.compile(
    r"(?:error|exception|fatal(?: error)?)(?:\s*[:\-\[(]|\s+\d)"  # "Error: x", "ERROR 500"
    r"|traceback \(most recent call last\)"
    r"|(?-i:[A-Za-z_][\w.]*(?:Error|Exception)):",  # "ValueError: x", "java.io.IOException: x"
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class LoopStop:
    """Why the loop was stopped: a bounded `reason` code (for metrics and error codes), a
    sentence for people and the model, and the numbers behind it."""

    reason: StopReason
    message: str
    count: int  # what was seen: rounds, calls, failures, stalled rounds, tokens
    limit: int  # the configured limit it was held against
    tool: str | None = None


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    arguments: str  # canonical JSON when the arguments parse, else as sent
    result: str | None  # the tool message's text; None when the client sent none


def check_loop(messages: list[Json], config: LoopGuardConfig) -> LoopStop | None:
    """The first limit the history breaks, or None to let the request through."""
    if not config.enabled:
        return None
    rounds = _rounds(_current_run(messages))
    if not rounds:  # no tool call since the last user turn (most requests): no round rule trips
        return _token_budget(messages, config)
    return (
        _tool_failures(rounds, config)
        or _identical_calls(rounds, config)
        or _no_progress(rounds, config)
        or _max_rounds(rounds, config)
        or _token_budget(messages, config)
    )


def finalize_request(body: Json, stop: LoopStop) -> Json:
    """The request for the `finalize` action: the same conversation with tools disabled and a
    last instruction to answer from what is already there. The instruction is a user message:
    open-model chat templates often reject a system message after the first position, and a user
    turn may follow tool results anywhere."""
    disabled = {"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"}
    finalized = {k: v for k, v in body.items() if k not in disabled}
    instruction = (
        f"{FINALIZE_OPENING}{stop.message} Do not call any more tools. "
        "Answer the original request now from the information already gathered; if it is "
        "incomplete, say what is missing."
    )
    finalized["messages"] = [*body.get("messages", []), {"role": "user", "content": instruction}]
    return finalized


def _current_run(messages: list[Json]) -> list[Json]:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], dict) and messages[i].get("role") == "user":
            return messages[i + 1 :]
    return messages


def _rounds(messages: list[Json]) -> list[list[_Call]]:
    """Each assistant `tool_calls` message with the tool messages right after it. Results are
    matched by id inside that block only: some clients reuse ids (`call_0`) every round."""
    rounds: list[list[_Call]] = []
    for i, m in enumerate(messages):
        calls = (
            m.get("tool_calls") if isinstance(m, dict) and m.get("role") == "assistant" else None
        )
        if not isinstance(calls, list) or not calls:
            continue
        results: dict[Any, str] = {}
        for reply in itertools.islice(messages, i + 1, None):
            if not isinstance(reply, dict) or reply.get("role") != "tool":
                break
            results.setdefault(reply.get("tool_call_id"), message_text(reply))
        rounds.append([_call(c, results) for c in calls if isinstance(c, dict)])
    return rounds


def _call(call: Json, results: dict[Any, str]) -> _Call:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    name = function.get("name")
    return _Call(
        name if isinstance(name, str) else "?",
        _canonical(function.get("arguments")),
        results.get(call.get("id")),
    )


def _canonical(value: Any) -> str:
    """JSON text with sorted keys and no whitespace, so `{"a":1, "b":2}` equals `{"b":2,"a":1}`."""
    if isinstance(value, str):
        text = value
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text.strip()
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return str(value)


def _trailing(calls: list[_Call], key: Callable[[_Call], str | None]) -> tuple[str, int]:
    """Per tool, how many of its latest calls in a row share one `key` (None never counts);
    the tool with the longest such streak (the first seen, on a tie)."""
    runs: dict[str, tuple[str | None, int]] = {}
    for call in calls:
        value = key(call)
        last, count = runs.get(call.name, (None, 0))
        runs[call.name] = (value, 0 if value is None else count + 1 if value == last else 1)
    return max(((name, n) for name, (_, n) in runs.items()), key=lambda r: r[1], default=("", 0))


def _tool_failures(rounds: list[list[_Call]], config: LoopGuardConfig) -> LoopStop | None:
    calls = [c for r in rounds for c in r]
    name, count = _trailing(
        calls, lambda c: "failed" if c.result and is_failure(c.result) else None
    )
    if count < config.max_tool_failures:
        return None
    return LoopStop(
        "tool_failures",
        f"The tool `{name}` failed {count} times in a row (limit {config.max_tool_failures}).",
        count,
        config.max_tool_failures,
        name,
    )


def _identical_calls(rounds: list[list[_Call]], config: LoopGuardConfig) -> LoopStop | None:
    pollable = set(config.pollable_tools)
    calls = [c for r in rounds for c in r if c.name not in pollable]
    name, count = _trailing(calls, lambda c: c.arguments)
    if count < config.max_identical_calls:
        return None
    return LoopStop(
        "identical_calls",
        f"The tool `{name}` was called {count} times in a row with the same arguments "
        f"(limit {config.max_identical_calls}).",
        count,
        config.max_identical_calls,
        name,
    )


def _no_progress(rounds: list[list[_Call]], config: LoopGuardConfig) -> LoopStop | None:
    """The last `max_stalled_rounds` rounds each repeat the round before: the same tools in the
    same order, and calls plus results at least `stall_similarity` alike. Pollable tools are
    left out; a round of only pollable calls never stalls."""
    pollable = set(config.pollable_tools)
    needed = config.max_stalled_rounds
    recent = [[c for c in r if c.name not in pollable] for r in rounds[-(needed + 1) :]]
    if len(recent) < needed + 1:
        return None
    for previous, current in itertools.pairwise(recent):
        if not current or [c.name for c in previous] != [c.name for c in current]:
            return None
        if similarity(_round_text(previous), _round_text(current)) < config.stall_similarity:
            return None
    tools = sorted({c.name for c in recent[-1]})
    return LoopStop(
        "no_progress",
        f"The last {needed} tool-call rounds repeated the round before them "
        f"(calls and results at least {config.stall_similarity:.0%} alike; tools: "
        f"{', '.join(tools)}; limit {needed}).",
        needed,
        needed,
        tools[0] if len(tools) == 1 else None,
    )


def _max_rounds(rounds: list[list[_Call]], config: LoopGuardConfig) -> LoopStop | None:
    if len(rounds) <= config.max_rounds:
        return None
    return LoopStop(
        "max_rounds",
        f"{len(rounds)} tool-call rounds since the last user message (limit {config.max_rounds}).",
        len(rounds),
        config.max_rounds,
    )


def _token_budget(messages: list[Json], config: LoopGuardConfig) -> LoopStop | None:
    if config.token_budget is None:
        return None
    tokens = conversation_tokens(messages)
    if tokens <= config.token_budget:
        return None
    return LoopStop(
        "token_budget",
        f"The conversation holds about {tokens:,} tokens (budget {config.token_budget:,}).",
        tokens,
        config.token_budget,
    )


def conversation_tokens(messages: list[Json]) -> int:
    """Estimated tokens of a history, tool-call names and arguments included."""
    valid = [m for m in messages if isinstance(m, dict)]
    calls = sum(
        estimate_tokens(_canonical(c.get("function"))) + 4
        for m in valid
        if isinstance(m.get("tool_calls"), list)
        for c in m["tool_calls"]
        if isinstance(c, dict)
    )
    return estimate_prompt_tokens(valid) + calls


def is_failure(result: str) -> bool:
    """Whether a tool result looks like a failure: a JSON object with a non-empty `error`,
    `"status": "error"`, `"success": false` or `"isError": true`; or text that starts like an
    error report (`Error: ...`, `ERROR 500`, `Traceback (most recent call last)`,
    `ValueError: ...`). Text that merely mentions an error is not one."""
    text = result.strip()
    if text.startswith("{"):
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict):
            status = doc.get("status")
            return (
                doc.get("error") not in (None, "", False, {}, [])
                or (isinstance(status, str) and status.lower() == "error")
                or doc.get("success") is False
                or doc.get("isError") is True
            )
    return _ERROR_TEXT.match(text) is not None


def similarity(a: str, b: str) -> float:
    """A cheap deterministic likeness in [0, 1], on words and punctuation rather than
    characters, so one changed identifier in a short call (`a1.txt`, `a2.txt`) is a real
    difference. Short texts: difflib's ratio. Long ones: the lower of difflib's ratio on the
    first and last `_WINDOW` tokens and the overlap of their token counts over the whole text,
    so the cost stays bounded while a change in the middle still shows."""
    if a == b:
        return 1.0
    words_a, words_b = _WORD.findall(a), _WORD.findall(b)
    if len(words_a) <= 2 * _WINDOW and len(words_b) <= 2 * _WINDOW:
        return difflib.SequenceMatcher(None, words_a, words_b).ratio()
    counts_a, counts_b = Counter(words_a), Counter(words_b)
    overlap = 2 * sum((counts_a & counts_b).values()) / (len(words_a) + len(words_b))
    clipped = difflib.SequenceMatcher(None, _clip(words_a), _clip(words_b)).ratio()
    return min(overlap, clipped)


def _clip(words: list[str]) -> list[str]:
    return words if len(words) <= 2 * _WINDOW else words[:_WINDOW] + words[-_WINDOW:]


def _round_text(calls: list[_Call]) -> str:
    return "\n".join(f"{c.name}({c.arguments}) -> {_canonical_result(c.result)}" for c in calls)


def _canonical_result(result: str | None) -> str:
    if result is None:
        return ""
    text = result.strip()
    return _canonical(text) if text[:1] in ("{", "[") else text
