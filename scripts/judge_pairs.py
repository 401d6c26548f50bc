"""The pair judge's data: every source as (a, b, label) pairs, split into train and dev.

Sources (licences in scripts/judge_data/README.md):
- `paraphrase-train/` from ../shared/datasets: PAWS-Wiki (English), PAWS-X (Chinese) and STS-B
  subsets, permissively licensed and decontaminated against the evaluation sets;
- the team's question clusters, `scripts/judge_data/team/*.jsonl`: a question, rewordings that
  one answer serves, and look-alikes that need another answer (written for this, by people who
  never saw the evaluation sets); 15 % of the clusters are held out as dev data;
- the guard tests' hand-written pairs, `tests/matching/data/{near_miss,paraphrase}_pairs.tsv`;
- part of the team's trap suite, `tests/cache/traps/`: 60 % of its pairs by a stable hash; the
  rest is held back, never trained on, and measured (`split == "dev"`);
- with `edits=True` (`train_judge.py --edits`), minimal pairs made from the English training
  clusters (`judge_edits.py`, the team's word list `judge_data/word_pairs.tsv`); not in the
  shipped judge's data (docs/BENCHMARKS.md, "Minimal pairs").

Never `../shared/datasets/paraphrase/` (QQP, SimCLUE): their licences allow evaluation only.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from judge_edits import WORD_PAIRS, minimal_pairs

REPO = Path(__file__).resolve().parents[1]
TRAIN_SETS = REPO.parent / "shared" / "datasets" / "paraphrase-train"
TEAM = REPO / "scripts" / "judge_data" / "team"
GUARD_DATA = REPO / "tests" / "matching" / "data"
TRAPS = REPO / "tests" / "cache" / "traps"
TEAM_DEV_SHARE = 0.15
TRAPS_TRAIN_SHARE = 0.60
# Longer texts are exact-only in the cache: the judge never sees them.
MAX_CHARS = 600


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    label: int  # 1: one answer serves both
    source: str
    lang: str
    split: str  # "train" or "dev"
    kind: str = ""


def share(key: str) -> float:
    """A stable number in [0, 1) for a text: splits that never move between runs."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 2**32


# PAWS is tokenized the way its release is ("Paris , in 1560 ."): written back as prose,
# so the judge does not learn the tokenization as a style.
_DETOK = [
    (re.compile(r"``\s*|\s*''"), '"'),
    (re.compile(r"\s+([,.;:!?%)\]])"), r"\1"),
    (re.compile(r"([(\[$])\s+"), r"\1"),
    (re.compile(r"\s+('s|'re|'ve|'ll|'d|n't|'m)\b"), r"\1"),
    (re.compile(r"\s+-\s+"), "-"),
]


def detokenize(text: str) -> str:
    for pattern, repl in _DETOK:
        text = pattern.sub(repl, text)
    return text.strip()


def train_sets(langs: tuple[str, ...]) -> Iterator[Pair]:
    files = {
        "paws-wiki-en.train.jsonl.gz": "en",
        "paws-x-zh.train.jsonl.gz": "zh",
        "stsb-en.train.jsonl.gz": "en",
        "stsb-zh.train.jsonl.gz": "zh",
    }
    for name, lang in files.items():
        if lang not in langs:
            continue
        with gzip.open(TRAIN_SETS / name, "rt", encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                a, b = row["a"], row["b"]
                if name.startswith("paws"):
                    a, b = detokenize(a), detokenize(b)
                # STS: 4 and up is "mostly or completely equivalent"; 3 is "important
                # information differs", which for a cache is another question.
                label = int(row["score"] >= 4.0) if "score" in row else int(row["label"])
                yield Pair(a, b, label, name.split(".")[0], lang, "train")


def team_clusters(langs: tuple[str, ...]) -> Iterator[tuple[dict[str, object], str]]:
    for path in sorted(TEAM.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            cluster = json.loads(line)
            if cluster["lang"] in langs:
                split = "dev" if share(cluster["question"]) < TEAM_DEV_SHARE else "train"
                yield cluster, split


def team_pairs(langs: tuple[str, ...]) -> Iterator[Pair]:
    """Each cluster as pairs: question and rewordings with each other (1); each look-alike
    with the question and every rewording (0). Look-alikes of one cluster are not paired with
    each other: two changes need not give two different answers."""
    for cluster, split in team_clusters(langs):
        lang = str(cluster["lang"])
        same = [str(cluster["question"]), *map(str, cluster["paraphrases"])]  # type: ignore[call-overload]
        for i, a in enumerate(same):
            for b in same[i + 1 :]:
                yield Pair(a, b, 1, "team", lang, split, "paraphrase")
        for other in map(str, cluster["lookalikes"]):  # type: ignore[call-overload]
            for a in same:
                yield Pair(a, other, 0, "team", lang, split, "lookalike")


def edit_pairs() -> Iterator[Pair]:
    """Minimal pairs made from the English training clusters (judge_edits.py)."""
    clusters = [
        [str(c["question"]), *map(str, c["paraphrases"])]  # type: ignore[call-overload]
        for c, split in team_clusters(("en",))
        if split == "train"
    ]
    for a, b, label, kind in minimal_pairs(clusters):
        yield Pair(a, b, label, "edits", "en", "train", kind)


def guard_pairs() -> Iterator[Pair]:
    for name, label in (("near_miss_pairs.tsv", 0), ("paraphrase_pairs.tsv", 1)):
        with (GUARD_DATA / name).open(encoding="utf-8") as f:
            for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                if not row or row[0].startswith("#") or len(row) < 3:
                    continue
                lang = "zh" if re.search(r"[\u4e00-\u9fff]", row[1] + row[2]) else "en"
                yield Pair(row[1], row[2], label, "guard-tests", lang, "train", row[0])


def trap_pairs() -> Iterator[Pair]:
    for name, label in (("traps.jsonl", 0), ("paraphrases.jsonl", 1)):
        for line in (TRAPS / name).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            split = "train" if share(row["a"] + "\t" + row["b"]) < TRAPS_TRAIN_SHARE else "dev"
            yield Pair(row["a"], row["b"], label, "traps", row["lang"], split, row["kind"])


def all_pairs(langs: tuple[str, ...] = ("en", "zh"), *, edits: bool = False) -> list[Pair]:
    """Every pair, training and dev. `edits`: with the minimal pairs of judge_edits.py (not in
    the shipped judge's data: docs/BENCHMARKS.md, "Minimal pairs")."""
    pairs = [
        *train_sets(langs),
        *team_pairs(langs),
        *(edit_pairs() if edits and "en" in langs else ()),
        *(p for p in guard_pairs() if p.lang in langs),
        *(p for p in trap_pairs() if p.lang in langs),
    ]
    return [p for p in pairs if max(len(p.a), len(p.b)) <= MAX_CHARS and p.a != p.b]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def data_files(langs: tuple[str, ...], *, edits: bool = False) -> list[Path]:
    """Every file the pairs are read from, for the manifest."""
    sets = [
        TRAIN_SETS / f
        for f, lang in (
            ("paws-wiki-en.train.jsonl.gz", "en"),
            ("paws-x-zh.train.jsonl.gz", "zh"),
            ("stsb-en.train.jsonl.gz", "en"),
            ("stsb-zh.train.jsonl.gz", "zh"),
        )
        if lang in langs
    ]
    return [
        *sets,
        *sorted(TEAM.glob("*.jsonl")),
        *([WORD_PAIRS] if edits else []),
        GUARD_DATA / "near_miss_pairs.tsv",
        GUARD_DATA / "paraphrase_pairs.tsv",
        TRAPS / "traps.jsonl",
        TRAPS / "paraphrases.jsonl",
    ]
