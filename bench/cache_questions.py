"""Questions for the cache benchmarks (bench/cache_perf_hit.py, scaleout.py, isolation.py), all
written for them; the text is in bench/data/cache_questions.yaml.

PAIRS: a question and a light rewording of it, the kind of repeat a cache should serve
(a synonym, a contraction, a word added or moved). Whether a rewording really is served as a
semantic hit (cosine >= 0.95 with MiniLM and no near-miss guard firing) is measured, not
assumed. FILLER: more distinct questions, stored but never asked again, so the scope holds
the 200 entries the benchmark asks for. `miss_questions`: pieces combined into questions that
are new on every request.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import yaml

_DATA = yaml.safe_load((Path(__file__).parent / "data" / "cache_questions.yaml").read_text("utf-8"))

PAIRS: list[tuple[str, str]] = [(a, b) for a, b in _DATA["pairs"]]
# Distinct from each other and from PAIRS: stored, never asked again.
FILLER: list[str] = [f.format(t) for t in _DATA["filler_topics"] for f in _DATA["filler_frames"]]


def miss_questions(seed: int = 0) -> list[str]:
    """Every combination of the miss parts (960), shuffled: a fresh question per request."""
    parts = (_DATA["miss_tasks"], _DATA["miss_subjects"], _DATA["miss_twists"])
    texts = [f"Write {task} {who} {twist}." for task, who, twist in itertools.product(*parts)]
    random.Random(seed).shuffle(texts)
    return texts
