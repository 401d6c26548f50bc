"""The pair judge: how likely one answer serves both texts, from a cross-encoder.

An embedding cosine compares two texts pooled apart, so it cannot tell "from Paris to Lyon"
from "from Lyon to Paris", and it scores "how tall" and "how short" alike. The judge reads both
texts together (`[CLS] asked [SEP] stored [SEP]`): a cross-encoder fine-tuned from the shipped
MiniLM by scripts/train_judge.py (docs/CACHE.md, "The judge"), run on ONNX Runtime with MiniLM's
own tokenizer, no torch. Its score is a probability; the cache's `judge_threshold` is the bar.

Calls are micro-batched on one worker thread, like the embedder's: the event loop only queues
pairs. The judge reads English; a pair with Chinese (or other CJK) text is not its to judge
(`reads`), and the lexical checks decide those as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from gateway.embedding.batching import BATCH_TOKENS, LONG_TOKENS, MicroBatcher
from gateway.embedding.onnx_runner import OnnxRunner
from gateway.util.maths import logistic

log = logging.getLogger(__name__)

MODELS = Path(__file__).parent / "models"
MINILM_JUDGE = MODELS / "judge-minilm"
MAX_TOKENS = 128  # both texts together; longer pairs are cut, longest side first
# Scripts whose text MiniLM's vocabulary barely covers (244 CJK characters): not judged.
_UNREAD = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")

Pair = tuple[str, str]


class Judge(Protocol):
    """What the hit decision needs of a judge (the shipped one, or a test's)."""

    name: str

    @property
    def ready(self) -> bool: ...

    def reads(self, text: str) -> bool: ...

    async def scores(self, asked: str, stored: Sequence[str]) -> list[float]: ...

    async def start(self) -> None: ...


class PairJudge:
    """P(one answer serves both) for (asked, stored) pairs, off the event loop."""

    def __init__(
        self,
        model_dir: Path = MINILM_JUDGE,
        *,
        max_batch: int = 16,
        window_ms: float = 1.0,
        threads: int = 1,
    ) -> None:
        manifest = json.loads((model_dir / "manifest.json").read_text(encoding="utf-8"))
        self.name = f"{model_dir.name}@{manifest['files'][_graph(manifest)]['sha256'][:12]}"
        self._path = model_dir / _graph(manifest)
        self._threads = threads
        self._batching = {"max_batch": max_batch, "window_ms": window_ms}
        self._runner: OnnxRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batcher = self._new_batcher()

    def _new_batcher(self) -> MicroBatcher[Pair, float]:
        return MicroBatcher(
            self._score_batch,
            max_batch=int(self._batching["max_batch"]),
            window_ms=self._batching["window_ms"],
            policy="adaptive",
            thread_name="cache-judge",
            cost=_tokens,
            max_cost=BATCH_TOKENS,
            long_from=LONG_TOKENS,  # ONNX Runtime: one session may run on two threads
        )

    def _here(self) -> MicroBatcher[Pair, float]:
        """The batcher of the running event loop: the loaded model is shared, the queue is
        the loop's (a process that runs a second loop, as tests do, gets a queue of its own)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                self._batcher = self._new_batcher()
            self._loop = loop
        return self._batcher

    @staticmethod
    def reads(text: str) -> bool:
        """Whether the judge can read `text` (its vocabulary covers the script)."""
        return _UNREAD.search(text) is None

    async def start(self) -> None:
        if self._runner is None:
            self._runner = await self._here().run_in_worker(self._load)

    def _load(self) -> OnnxRunner:
        runner = OnnxRunner(self._path, max_seq_length=MAX_TOKENS, threads=self._threads)
        log.info("cache judge %s loaded", self.name)
        return runner

    @property
    def ready(self) -> bool:
        return self._runner is not None

    async def scores(self, asked: str, stored: Sequence[str]) -> list[float]:
        """The judge's probability for each (asked, stored) pair."""
        return await self._here().submit_many([(asked, text) for text in stored])

    def score_now(self, pairs: Sequence[Pair]) -> list[float]:
        """Synchronously, on the caller's thread (benchmarks, `gateway cache explain`)."""
        if self._runner is None:
            self._runner = self._load()
        return self._score_batch(list(pairs))

    def _score_batch(self, pairs: list[Pair]) -> list[float]:
        assert self._runner is not None
        logits = self._runner(pairs)
        return [logistic(float(x)) for x in np.ravel(logits)]

    @property
    def closed(self) -> bool:
        return self._batcher.closed

    async def close(self) -> None:
        await self._batcher.close()


def _tokens(pair: Pair) -> int:
    """About how many tokens the judge reads of a pair (its batch cost; embedder._tokens)."""
    return min(MAX_TOKENS, 3 + (len(pair[0]) + len(pair[1])) // 4)  # English: no encode


def _graph(manifest: dict[str, object]) -> str:
    """The int8 graph where the training run found it changes no dev decision, else fp32."""
    chosen = manifest.get("runtime_graph", "model.int8.onnx")
    assert isinstance(chosen, str)
    return chosen
