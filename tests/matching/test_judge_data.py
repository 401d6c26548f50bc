"""The judge's training data (scripts/judge_pairs.py, scripts/judge_edits.py): evaluation-only
sets never enter it, dev splits stay out, and the minimal pairs are labelled by what the edit
does to the answer."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import judge_edits  # noqa: E402
from judge_edits import minimal_pairs, word_pairs  # noqa: E402

CLUSTERS = [
    ["Is it hard to learn Mandarin?", "how difficult is Mandarin to learn"],
    ["How do I tighten a loose bike chain?"],
    ["How long is the flight from Paris to Tokyo?"],
    ["What is the difference between baking soda and baking powder?"],
    ["Is a tomato a fruit or a vegetable?"],
    ["How do I remove a hard-boiled egg shell quickly?"],
]


def test_word_pairs_read_both_kinds_and_no_word_is_both() -> None:
    pairs = word_pairs()
    assert len(pairs["same"]) > 50 and len(pairs["opposite"]) > 50
    same = {frozenset(p) for p in pairs["same"]}
    assert not same & {frozenset(p) for p in pairs["opposite"]}


def test_edits_keep_or_change_the_question_as_labelled() -> None:
    rng = random.Random(0)
    assert judge_edits._direction("How long is the flight from Paris to Tokyo?", rng) == (
        "How long is the flight from Tokyo to Paris?"
    )
    assert judge_edits._symmetric("Is a tomato a fruit or a vegetable?", rng) == (
        "Is a tomato a vegetable or a fruit?"
    )
    chain = "How do I tighten a loose bike chain?"
    swapped = judge_edits._swap_word(chain, [("tighten", "loosen")], rng)
    assert swapped == "How do I loosen a loose bike chain?"
    # Never inside a hyphenated word: "hard-boiled" is not "difficult-boiled".
    assert judge_edits._swap_word("A hard-boiled egg", [("difficult", "hard")], rng) is None
    assert judge_edits._swap_word("Is it Hard?", [("difficult", "hard")], rng) == "Is it Difficult?"


def test_minimal_pairs_are_seeded_and_hold_both_labels() -> None:
    first = list(minimal_pairs(CLUSTERS, seed=3, unrelated=4))
    assert first == list(minimal_pairs(CLUSTERS, seed=3, unrelated=4))
    kinds = Counter((kind, label) for _, _, label, kind in first)
    assert kinds[("unrelated", 0)] == 4
    assert kinds[("direction", 0)] == 1 and kinds[("opposite-word", 0)] >= 1
    assert sum(n for (kind, label), n in kinds.items() if label == 1) == sum(map(len, CLUSTERS))
    assert all(a != b for a, b, _, _ in first)


def test_training_pairs_never_hold_evaluation_text_or_dev_clusters() -> None:
    from judge_pairs import all_pairs

    pairs = all_pairs(("en",), edits=True)
    train = [p for p in pairs if p.split == "train"]
    dev_texts = {t for p in pairs if p.split == "dev" and p.source == "team" for t in (p.a, p.b)}
    edited = [p for p in train if p.source == "edits"]
    assert edited and not {p.a for p in edited} & dev_texts
    assert {p.source for p in train} >= {"team", "edits", "traps", "stsb-en", "paws-wiki-en"}
