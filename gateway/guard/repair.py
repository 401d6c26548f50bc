"""Settling a model's tool calls: check them, send the invalid ones back to the model with what
is wrong, and when that does not fix them, apply the policy (strip, pass, or fail). Under
`strip`, a call whose only problem is parameters its schema does not declare loses those
parameters instead of the whole call, when what remains is valid.

Works on one assistant message (a plain answer's, or a stream's once its calls are complete),
so plain and streamed answers are judged by the same code.

What a repair answers is read for its tool calls only: the client gets the first answer's text
(already sent, in a stream) with the settled calls, never the model's reply to the guard's
feedback. A repair that answers with no tool call at all (prose, an apology, an echo of the
feedback) has failed, and the policy applies to the last attempt that made calls, as when
repairs run out; only under `tool_choice: none` is an answer without calls the fix (unless it
repeats the feedback).

The checks run on the offload thread unless the catalog and the arguments are small
(`inline`); when the catalog's budget runs out, the answer goes on as it is, `unchecked`, and
no more repairs are asked for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.config import ToolGuardConfig
from gateway.guard.limits import SMALL_BYTES
from gateway.guard.problems import MODEL_FIXABLE, Problem
from gateway.guard.tools import CheckedCall, ToolCatalog, check_tool_choice
from gateway.util import offload

Json = dict[str, Any]
Outcome = Literal["ok", "cleaned", "repaired", "stripped", "passed", "failed", "unchecked"]
AskAgain = Callable[[list[Json]], Awaitable[Json]]
"""Sends the conversation plus the given messages (the failed attempts and their feedback so
far) back to the model; returns its new message."""

STRIPPED_TEXT = (
    "I could not make a valid tool call for this request, so I did not call any tool. "
    "Please rephrase or give more detail."
)
# How the feedback a repair sends begins; the demo model (upstream/demo.py) reads these to
# answer a repair as a model would.
CALL_ERROR = "Error, the call was not executed: "
CALL_SKIPPED = "Not executed, because another call in the same answer was invalid."
RULES_BROKEN = "Your answer does not follow the rules: "


@dataclass(frozen=True, slots=True)
class Settled:
    message: Json  # the assistant message to send: content and valid (cleaned) tool calls
    outcome: Outcome
    problems: list[Problem] = field(default_factory=list)  # what remained wrong, if anything
    repairs: int = 0  # times the model was asked again
    cleanings: list[str] = field(default_factory=list)  # the reason of each change sent on
    found: list[Problem] = field(default_factory=list)  # repaired: what the first answer had

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.message.get("tool_calls") else "stop"


async def settle(
    message: Json,
    catalog: ToolCatalog,
    tool_choice: Any,
    config: ToolGuardConfig,
    ask_again: AskAgain,
    *,
    inline: bool = True,
) -> Settled:
    """`inline`: the catalog is small enough to check on the event loop (small arguments
    too); otherwise the checks run on the offload thread."""
    current, repairs = message, 0
    conversation: list[Json] = []  # every failed attempt and its feedback, oldest first
    attempt = message  # the last answer judged
    found: list[Problem] = []
    checked: list[CheckedCall] = []
    problems: list[Problem] = []
    while True:
        if repairs and not _calls(current) and (tool_choice != "none" or _echoes(current)):
            # No call to judge: the repair failed; the policy applies to the last attempt.
            return await _give_up(
                message, attempt, checked, problems, config, repairs, catalog, inline
            )
        attempt = current
        checked, problems = await _check(current, catalog, tool_choice, inline)
        found = found if repairs else problems
        if any(c.unchecked for c in checked):  # out of time: nothing more is judged
            answer = _with_calls(message, [c.call for c in checked])
            return Settled(answer, "unchecked", problems, repairs, _reasons(checked))
        if not problems:
            cleaned = any(c.changes for c in checked)
            outcome: Outcome = "repaired" if repairs else "cleaned" if cleaned else "ok"
            answer = _with_calls(message, [c.call for c in checked])
            if repairs and tool_choice == "none":  # the fix is an answer without calls
                answer = _with_calls(current, [])
            return Settled(answer, outcome, [], repairs, _reasons(checked), found)
        fixable = all(p.kind in MODEL_FIXABLE for p in problems)
        if not fixable or repairs >= config.repair_attempts:
            return await _give_up(
                message, attempt, checked, problems, config, repairs, catalog, inline
            )
        repairs += 1
        # The model sees all its failed attempts, so it cannot go back to an earlier mistake.
        conversation += feedback(current, checked, problems)
        current = await ask_again(conversation)


def feedback(message: Json, checked: list[CheckedCall], problems: list[Problem]) -> list[Json]:
    """The assistant's answer and one `tool` message per call saying what is wrong with it
    (every call needs an answer for the conversation to stay valid)."""
    calls = [dict(c.call) for c in checked]
    for i, call in enumerate(calls):
        call.setdefault("id", None)
        call["id"] = call["id"] or f"call_gateway_{i}"
    out: list[Json] = [
        {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
    ]
    if not calls:
        out = [{"role": "assistant", "content": message.get("content") or ""}]
    for call, result in zip(calls, checked, strict=True):
        if result.problems:
            text = CALL_ERROR + "; ".join(map(str, result.problems))
            text += ". Send the call again, corrected."
        else:
            text = CALL_SKIPPED + " Send it again."
        out.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    choice_problems = [p for p in problems if p.kind == "tool_choice"]
    if choice_problems:
        wrong = "; ".join(map(str, choice_problems))
        out.append({"role": "user", "content": f"{RULES_BROKEN}{wrong}."})
    return out


async def _check(
    message: Json, catalog: ToolCatalog, tool_choice: Any, inline: bool
) -> tuple[list[CheckedCall], list[Problem]]:
    calls = _calls(message)
    small = inline and sum(map(_arguments_size, calls)) < SMALL_BYTES
    checked = await offload.run(small, _check_all, catalog, calls)
    problems = [p for c in checked for p in c.problems]
    content = message.get("content") if isinstance(message.get("content"), str) else None
    problems += check_tool_choice(tool_choice, [c.call for c in checked], content)
    return checked, problems


def _check_all(catalog: ToolCatalog, calls: list[Json]) -> list[CheckedCall]:
    return [catalog.check(call) for call in calls]


def _arguments_size(call: Json) -> int:
    function = call.get("function")
    arguments = function.get("arguments") if isinstance(function, dict) else None
    return len(arguments) if isinstance(arguments, str) else SMALL_BYTES  # odd: off the loop


def _echoes(message: Json) -> bool:
    """Whether the text repeats the guard's feedback (a model that parrots its input)."""
    content = message.get("content")
    text = content if isinstance(content, str) else str(content or "")
    return any(words in text for words in (CALL_ERROR, CALL_SKIPPED, RULES_BROKEN))


def _calls(message: Json) -> list[Json]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


async def _give_up(
    message: Json,
    attempt: Json,
    checked: list[CheckedCall],
    problems: list[Problem],
    config: ToolGuardConfig,
    repairs: int,
    catalog: ToolCatalog,
    inline: bool,
) -> Settled:
    """The policy applied to the last `attempt` judged (its calls `checked`), sent with the
    first answer's `message` text."""
    if config.on_failure == "pass":
        return Settled(_with_calls(message, _calls(attempt)), "passed", problems, repairs)
    if config.on_failure == "error":
        return Settled(message, "failed", problems, repairs)
    small = inline and sum(_arguments_size(dict(c.call)) for c in checked) < SMALL_BYTES
    kept = await offload.run(small, _kept, checked, catalog)
    # A call whose second check ran out of time is not known to be valid: it goes too, as
    # does one `tool_choice` refuses (by name; all of them when it names none: 'none').
    refused = {p.tool for p in problems if p.kind == "tool_choice"}
    valid = [
        c
        for c in kept
        if c is not None and c.ok and not c.unchecked and not {None, _name(c.call)} & refused
    ]
    stripped = _with_calls(message, [c.call for c in valid])
    if not valid and not (stripped.get("content") or "").strip():
        stripped["content"] = STRIPPED_TEXT
    return Settled(stripped, "stripped", problems, repairs, _reasons(valid))


def _name(call: Any) -> str | None:
    function = call.get("function") if isinstance(call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else None


def _kept(checked: list[CheckedCall], catalog: ToolCatalog) -> list[CheckedCall | None]:
    return [c if c.ok else _without_undeclared(c, catalog) for c in checked]


def _without_undeclared(checked: CheckedCall, catalog: ToolCatalog) -> CheckedCall | None:
    """The call with its undeclared parameters dropped, when that is all that is wrong."""
    if not any(p.kind == "undeclared_parameter" for p in checked.problems):
        return None
    return catalog.check(checked.call, undeclared="strip")


def _reasons(checked: list[CheckedCall]) -> list[str]:
    return [change.reason for c in checked for change in c.changes]


def _with_calls(message: Json, calls: list[Any]) -> Json:
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    if calls:
        out["tool_calls"] = [dict(c) for c in calls]
    return out
