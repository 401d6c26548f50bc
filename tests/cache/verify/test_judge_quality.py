"""The default verification judge with the real shipped MiniLM on the shipped answer pairs'
held-out half (bench/cache_verify_judge.py prints the measurement). The fixture's name
`minilm` gives the test the tier of the real embedder (tests/tiers.py FIXTURES)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from gateway.cache.factory import new_embedder
from gateway.cache.verify.judge import AnswerJudge
from gateway.config.cache import EmbedderConfig
from gateway.embedding.embedder import Embedder

PAIRS = Path(__file__).parents[1] / "data" / "answer_pairs.jsonl"
# Measured on the held-out half (32 same, 32 wrong-hit pairs): 0 false agrees, 22 false
# disagrees. Bounds with a margin; a false agree hides a wrong hit, so its bound is tight.
MAX_FALSE_AGREE = 2
MAX_FALSE_DISAGREE = 26


@pytest_asyncio.fixture
async def minilm() -> AsyncIterator[Embedder]:
    embedder = new_embedder(EmbedderConfig())
    await embedder.start()
    yield embedder
    await embedder.close()


def text(content: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


async def test_held_out_error_rates_stay_within_the_measured_bounds(minilm: Embedder) -> None:
    judge = AnswerJudge(minilm)
    rows = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    held_out = [row for row in rows if row["split"] == "held-out"]
    false_agree = false_disagree = 0
    for row in held_out:
        verdict = await judge.compare(row["question"], text(row["a"]), text(row["b"]))
        assert verdict is not None
        false_agree += verdict.agree and not row["same"]
        false_disagree += row["same"] and not verdict.agree
    assert false_agree <= MAX_FALSE_AGREE
    assert false_disagree <= MAX_FALSE_DISAGREE
