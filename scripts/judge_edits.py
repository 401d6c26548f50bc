"""Minimal pairs for the pair judge: one small edit of a team question, labelled by what the
edit does to its answer.

A judge trained on PAWS word-swaps and the trap suite's look-alikes sees almost no pair that is
nearly identical *and* the same question, so it learns "nearly identical means a trap" and
refuses "hard" / "difficult". These pairs put both kinds side by side, from the same sentences:

- **same** (1): a synonym from `judge_data/word_pairs.tsv`, a contraction, a typo, chat-style
  casing and punctuation, a polite opener, two sides of a symmetric "between X and Y" or
  "X or Y" swapped;
- **opposite** (0): a word from the list's opposites ("tighten" / "loosen", "cheapest" / "most
  expensive"), a direction swapped ("from X to Y", "convert X to Y");
- **unrelated** (0): two questions of different clusters, so that little overlap is read as
  "another question" too.

Only English clusters of the training split are edited; the dev clusters stay as written. The
pairs come from a seeded generator: the same files give the same pairs.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

WORD_PAIRS = Path(__file__).resolve().parent / "judge_data" / "word_pairs.tsv"

_CONTRACTIONS = (
    ("what is", "what's"),
    ("who is", "who's"),
    ("where is", "where's"),
    ("how is", "how's"),
    ("it is", "it's"),
    ("that is", "that's"),
    ("there is", "there's"),
    ("I am", "I'm"),
    ("I have", "I've"),
    ("you are", "you're"),
    ("they are", "they're"),
    ("do not", "don't"),
    ("does not", "doesn't"),
    ("is not", "isn't"),
    ("are not", "aren't"),
    ("can not", "can't"),
    ("will not", "won't"),
)
_OPENERS = (
    "Can you tell me ",
    "Quick question: ",
    "Hey, ",
    "I was wondering, ",
    "Please explain: ",
)
_PLACE = r"([\w-]+(?: [A-Z][\w-]*)?)"  # a word, or a two-word name ("New York")
_DIRECTION = re.compile(rf"\b(from|convert) {_PLACE} (to|into) {_PLACE}")
_BETWEEN = re.compile(r"\bbetween (\w+(?: \w+)?) and (\w+(?: \w+)?)([?.]?)$")
_EITHER = re.compile(r"\b(an? \w+|\w+) or (an? \w+|\w+)\?$")


def word_pairs(path: Path = WORD_PAIRS) -> dict[str, list[tuple[str, str]]]:
    """{"same": [(a, b)], "opposite": [(a, b)]} from the TSV (comments and blanks skipped)."""
    out: dict[str, list[tuple[str, str]]] = {"same": [], "opposite": []}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, a, b = line.split("\t")
        out[kind].append((a, b))
    return out


def _swap_word(text: str, pairs: Sequence[tuple[str, str]], rng: random.Random) -> str | None:
    """`text` with one listed word or phrase replaced by its partner (either way round), or
    None. Not inside hyphenated words ("hard-boiled")."""
    options = []
    for a, b in pairs:
        for old, new in ((a, b), (b, a)):
            for m in re.finditer(rf"(?<![\w-]){re.escape(old)}(?![\w-])", text, re.IGNORECASE):
                options.append((m, new))
    if not options:
        return None
    m, new = rng.choice(options)
    if m.group(0)[0].isupper() and not new[0].isupper():
        new = new[0].upper() + new[1:]
    elif m.group(0)[0].islower() and new[0].isupper() and new[1:2].islower():
        new = new[0].lower() + new[1:]
    return text[: m.start()] + new + text[m.end() :]


def _contraction(text: str, rng: random.Random) -> str | None:
    pairs = [(a, b) for a, b in _CONTRACTIONS] + [(b, a) for a, b in _CONTRACTIONS]
    return _swap_word(text, pairs, rng)


def _typo(text: str, rng: random.Random) -> str | None:
    """Two neighbouring letters swapped, or one dropped, in a lower-case word of 5+ letters."""
    words = [m for m in re.finditer(r"\b[a-z]{5,}\b", text)]
    if not words:
        return None
    m = rng.choice(words)
    w = m.group(0)
    i = rng.randrange(1, len(w) - 2)
    typo = w[:i] + w[i + 1] + w[i] + w[i + 2 :] if rng.random() < 0.5 else w[:i] + w[i + 1 :]
    return text[: m.start()] + typo + text[m.end() :]


def _chat(text: str, rng: random.Random) -> str | None:
    casual = text.rstrip("?.! ")
    if casual[:1].isupper() and casual[1:2].islower():  # not "I'm" or "NASA"
        casual = casual[0].lower() + casual[1:]
    return casual if casual != text else None


def _opener(text: str, rng: random.Random) -> str | None:
    if not text[:1].isupper() or text[1:2].isupper():
        return None
    return rng.choice(_OPENERS) + text[0].lower() + text[1:]


def _symmetric(text: str, rng: random.Random) -> str | None:
    for pattern in (_BETWEEN, _EITHER):
        m = pattern.search(text)
        if m and m.group(1).lower() != m.group(2).lower():
            rest = m.group(3) if pattern is _BETWEEN else "?"
            head = "between " if pattern is _BETWEEN else ""
            joined = "and" if head else "or"
            return text[: m.start()] + f"{head}{m.group(2)} {joined} {m.group(1)}{rest}"
    return None


def _direction(text: str, rng: random.Random) -> str | None:
    m = _DIRECTION.search(text)
    if not m or m.group(2).lower() == m.group(4).lower():
        return None
    swapped = f"{m.group(1)} {m.group(4)} {m.group(3)} {m.group(2)}"
    return text[: m.start()] + swapped + text[m.end() :]


def minimal_pairs(
    clusters: Sequence[Sequence[str]], seed: int = 0, unrelated: int = 1500
) -> Iterator[tuple[str, str, int, str]]:
    """(original, edited, label, kind) for each edit that applies to a sentence of the
    clusters (each cluster: its question and rewordings), and `unrelated` cross-cluster pairs."""
    rng = random.Random(seed)
    words = word_pairs()
    same_edits = {
        "synonym": lambda t, r: _swap_word(t, words["same"], r),
        "contraction": _contraction,
        "typo": _typo,
        "chat": _chat,
        "opener": _opener,
        "symmetric": _symmetric,
    }
    opposite_edits = {
        "opposite-word": lambda t, r: _swap_word(t, words["opposite"], r),
        "direction": _direction,
    }
    for cluster in clusters:
        for text in cluster:
            # Every opposite that applies, and one same-question edit: near-identical pairs
            # of both labels, so that how much changed says nothing by itself.
            for kind, edit in opposite_edits.items():
                edited = edit(text, rng)
                if edited is not None and edited != text:
                    yield text, edited, 0, kind
            kinds = list(same_edits)
            rng.shuffle(kinds)
            for kind in kinds:
                edited = same_edits[kind](text, rng)
                if edited is not None and edited != text:
                    yield text, edited, 1, kind
                    break
    firsts = [c[0] for c in clusters if c]
    for _ in range(unrelated if len(firsts) > 1 else 0):
        a, b = rng.sample(firsts, 2)
        yield a, b, 0, "unrelated"
