"""Whether a fresh answer and a cached one say the same: the verdict of a verification.

Two answers to one question seldom match word for word (models sample), so the default judge
compares what they mean: the cosine of their embeddings (the cache's own embedder), and, for
short answers, the cache's near-miss guards applied to the answers (a different number,
entity, date or a negation is a different answer). Tool calls agree when they call the same
functions with the same arguments. An operator who wants a stronger check names a
`judge_model`, which is asked to compare the two (docs/CACHE.md).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gateway.cache import guards
from gateway.cache.guards.compare import near_miss_reasons

if TYPE_CHECKING:
    from gateway.cache.embedder import Embedder

Json = dict[str, Any]
JudgeCall = Callable[[Json], Awaitable[Json]]  # a chat body -> a completion (the judge model)

AGREE_COSINE = 0.80  # answers' cosine at or above which they say the same (MiniLM)
SHORT_ANSWER_CHARS = 400  # the near-miss guards read answers up to this long


@dataclass(frozen=True, slots=True)
class Verdict:
    agree: bool
    reason: str  # identical, similar, different, a guard's reason, judge-same, judge-different
    similarity: float | None = None  # the answers' cosine, when it was computed


class AnswerJudge:
    def __init__(self, embedder: Embedder | None) -> None:
        self.embedder = embedder

    async def compare(
        self,
        question: str,
        cached: Json,
        fresh: Json,
        judge: JudgeCall | None = None,
    ) -> Verdict | None:
        """The verdict, or None when either completion has no answer to compare."""
        a, b = answer_text(cached), answer_text(fresh)
        if not a or not b:
            return None
        if guards.normalize(a) == guards.normalize(b):
            return Verdict(True, "identical", 1.0)
        if judge is not None:
            return await _ask_judge(judge, question, a, b)
        if max(len(a), len(b)) <= SHORT_ANSWER_CHARS:
            reason = _fact_difference(a, b)
            if reason is not None:
                return Verdict(False, reason)
        if self.embedder is None:
            return Verdict(False, "different")
        vectors = await self.embedder.embed_many([a, b])
        similarity = float(np.dot(vectors[0], vectors[1]))
        agree = similarity >= AGREE_COSINE
        return Verdict(agree, "similar" if agree else "different", similarity)


# The guards' reasons that are about facts; the others (wording, order, case) differ between
# any two phrasings of one answer.
_FACT_REASONS = frozenset({"number", "date", "unit", "negation", "entity", "identifier"})


def _fact_difference(a: str, b: str) -> str | None:
    return next((r for r in near_miss_reasons(a, b) if r in _FACT_REASONS), None)


def answer_text(completion: Json) -> str:
    """What a completion answers: its text, or its tool calls in a canonical form."""
    choices = completion.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    message = choices[0].get("message") or {}
    calls = message.get("tool_calls")
    if calls:
        return json.dumps([_canonical_call(call) for call in calls], sort_keys=True)
    content = message.get("content")
    return content.strip() if isinstance(content, str) else ""


def _canonical_call(call: Any) -> Any:
    function = call.get("function") or {} if isinstance(call, dict) else {}
    arguments = function.get("arguments")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = arguments
    return {"name": function.get("name"), "arguments": parsed}


_JUDGE_PROMPT = (
    "Two answers were given to the same question. Do they give the same answer (the same "
    "facts, numbers and conclusion; wording may differ)? Reply with one word: SAME or DIFFERENT."
    "\n\nQuestion:\n{question}\n\nAnswer A:\n{a}\n\nAnswer B:\n{b}"
)


async def _ask_judge(judge: JudgeCall, question: str, a: str, b: str) -> Verdict:
    body = {
        "messages": [
            {"role": "user", "content": _JUDGE_PROMPT.format(question=question, a=a, b=b)}
        ],
        "temperature": 0,
        "max_tokens": 4,
    }
    reply = answer_text(await judge(body)).upper()
    if "DIFFERENT" in reply or reply.startswith("NO"):
        return Verdict(False, "judge-different")
    if "SAME" in reply or reply.startswith("YES"):
        return Verdict(True, "judge-same")
    raise ValueError(f"the judge model's reply is neither SAME nor DIFFERENT: {reply[:40]!r}")
