"""Chunking: size cap, overlap, preferred boundaries, CJK, and coverage of the whole text."""

# ruff: noqa: RUF001  (full-width CJK punctuation on purpose)

from __future__ import annotations

import itertools
import random
import re

import pytest

from gateway.rag.chunking import chunk_spans, split_text

WORDS = ["refund", "order", "ship", "days", "policy", "rate", "limit", "token", "cost", "the", "a"]


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
    return " ".join(words).capitalize() + rng.choice([".", ".", "!", "?", ";"])


def _document(rng: random.Random) -> str:
    paragraphs = [
        " ".join(_sentence(rng) for _ in range(rng.randint(1, 8)))
        for _ in range(rng.randint(1, 12))
    ]
    return rng.choice(["\n\n", "\n \n", "\n\n\n"]).join(paragraphs)


def _text(rng: random.Random) -> str:
    """Prose, CJK, long unbroken tokens, stray whitespace: anything the chunker may meet."""
    kind = rng.choice(["prose", "prose", "cjk", "unbroken", "mixed", "gaps"])
    if kind == "prose":
        return _document(rng)
    if kind == "cjk":
        return "".join(
            rng.choice("退款政策订单发货天内可以。！？；，") for _ in range(rng.randint(1, 900))
        )
    if kind == "unbroken":
        return "x" * rng.randint(1, 700) + " " + "https://example.com/" + "a" * rng.randint(0, 500)
    if kind == "gaps":  # long runs of whitespace between short bits of text
        return "".join(
            rng.choice(["word ", " " * rng.randint(1, 300), "\n\n", "x."]) for _ in range(60)
        )
    return "  \n".join(_document(rng) + "。数据。" + " " * rng.randint(0, 5) for _ in range(3))


def _covered(text: str, spans: list[tuple[int, int]]) -> bool:
    covered = [False] * len(text)
    for start, end in spans:
        for i in range(start, end):
            covered[i] = True
    return all(covered[i] or text[i].isspace() for i in range(len(text)))


@pytest.mark.parametrize("seed", range(300))
def test_chunks_are_bounded_nonempty_ordered_overlapping_and_cover_the_text(seed: int) -> None:
    rng = random.Random(seed)
    text = _text(rng)
    chunk_chars = rng.choice([20, 50, 100, 160, 400, 1000])
    overlap_chars = rng.randint(0, chunk_chars - 1) if seed % 3 else min(15, chunk_chars - 1)
    spans = chunk_spans(text, chunk_chars, overlap_chars)
    chunks = split_text(text, chunk_chars, overlap_chars)
    assert chunks == [text[s:e] for s, e in spans]
    assert _covered(text, spans)
    for chunk in chunks:
        assert 0 < len(chunk) <= chunk_chars
        assert chunk == chunk.strip()
    for (s1, e1), (s2, e2) in itertools.pairwise(spans):
        assert s1 < s2 and e1 < e2  # always moving forward
        assert e1 - s2 <= overlap_chars  # never more overlap than asked for
    assert chunks == split_text(text, chunk_chars, overlap_chars)  # deterministic


def test_short_and_blank_texts() -> None:
    assert split_text("", 100, 10) == []
    assert split_text(" \n\t\n ", 100, 10) == []
    assert split_text("  one short paragraph.  \n", 100, 10) == ["one short paragraph."]


def test_paragraph_breaks_win_over_sentences() -> None:
    first = "First paragraph has two sentences. Here is the second one."
    second = "Second paragraph. It is short."
    chunks = split_text(f"{first}\n\n{second}\n\n{first}", 100, 0)
    assert chunks == [first + "\n\n" + second, first]


def test_sentences_win_over_words_and_overlap_starts_at_a_sentence() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(20))
    chunks = split_text(text, 120, 40)
    assert all(c.endswith(".") for c in chunks)
    assert all(re.match(r"Sentence number \d+ is here\.", c) for c in chunks)
    for before, after in itertools.pairwise(chunks):
        first_sentence = after.split(". ")[0] + "."
        assert before.endswith(first_sentence)  # the overlap is a whole sentence


def test_words_are_kept_whole_when_there_is_no_sentence_end() -> None:
    text = " ".join(["supercalifragilistic"] * 30)
    chunks = split_text(text, 100, 25)
    assert all(set(c.split()) == {"supercalifragilistic"} for c in chunks)
    assert len(chunks[0]) == 100 - (100 % 21) - 1  # as many whole words as fit


def test_unbroken_text_is_cut_hard_at_the_size() -> None:
    chunks = split_text("a" * 250, 100, 10)
    assert [len(c) for c in chunks] == [100, 100, 70]


def test_cjk_sentences_end_at_full_width_stops() -> None:
    text = "我们的退款政策适用于所有订单。请在三十天内申请退款！需要帮助吗？请联系客服；谢谢。" * 6
    spans = chunk_spans(text, 60, 20)
    assert len(spans) > 1
    assert all(text[end - 1] in "。！？；" for _, end in spans[:-1])
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert 0 < end - start <= 20  # overlapping, by at most the overlap
        assert text[start - 1] in "。！？；"  # and starting at a sentence


def test_closing_quotes_stay_with_their_sentence() -> None:
    text = 'He said "stop." Then left. ' * 10 + "「这是引用。」然后结束。" * 10
    for chunk in split_text(text, 50, 0):
        assert not chunk.startswith(('"', "」"))


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        split_text("x", 0, 0)
    with pytest.raises(ValueError):
        split_text("x", 10, 10)
