"""Split a document into overlapping chunks that end where the text pauses.

A chunk is a slice of the document (stripped), at most `chunk_chars` long. It ends at the
last paragraph break that keeps it at least half full, else the last sentence end (`.`, `!`,
`?`, `;` and the full-width CJK stops), else the last line break, else the last space, else
it is cut hard (a long URL, CJK without punctuation). The next chunk starts up to
`overlap_chars` before that end, at the earliest sentence (else word) start in that window, so
a passage that straddles the cut is whole in one of the two. Consecutive chunks touch or
overlap: together they cover every non-space character of the document, in order.
"""

from __future__ import annotations

import bisect
import re

# Cut positions are where content ends (never inside whitespace): after the last character of
# a paragraph, a sentence, a line, a word.
_PARAGRAPH = re.compile(r"\S(?=[ \t]*\n[ \t]*\n)")
_LINE = re.compile(r"\S(?=[ \t]*\n)")
_WORD = re.compile(r"\S(?=\s)")
# Latin stops count before whitespace only ("3.5", "e.g.x" stay whole); CJK stops always
# (no spaces in CJK text). Closing quotes and brackets stay with their sentence.
_SENTENCE = re.compile(
    r"[.!?;][\"'\u201d\u2019)\]]*(?=\s)"
    r"|[\u3002\uff01\uff1f\uff1b][\u300d\u300f\u201d\u2019\uff09]*"
)


def split_text(text: str, chunk_chars: int, overlap_chars: int) -> list[str]:
    """The chunks' texts, in document order; none is empty or whitespace only."""
    return [text[start:end] for start, end in chunk_spans(text, chunk_chars, overlap_chars)]


def chunk_spans(text: str, chunk_chars: int, overlap_chars: int) -> list[tuple[int, int]]:
    """(start, end) offsets of each chunk in `text`, stripped of surrounding whitespace."""
    if chunk_chars < 1:
        raise ValueError("chunk_chars must be at least 1")
    if not 0 <= overlap_chars < chunk_chars:
        raise ValueError("overlap_chars must be at least 0 and smaller than chunk_chars")
    levels = [[m.end() for m in rx.finditer(text)] for rx in (_PARAGRAPH, _SENTENCE, _LINE, _WORD)]
    content_end = len(text.rstrip())
    spans: list[tuple[int, int]] = []
    start = _skip_space(text, 0)
    while start < content_end:
        limit = start + chunk_chars
        if content_end <= limit:
            end = content_end
        else:
            floor = start + max(chunk_chars // 2, overlap_chars + 1)
            end = _last_boundary(levels, floor, limit) or limit
        span = _strip(text, start, end)
        if span is None or (spans and span[1] <= spans[-1][1]):
            # A hard cut inside a long run of whitespace: nothing new up to `end`, and
            # overlapping across blank space is pointless, so continue after it.
            start = _skip_space(text, end)
            continue
        spans.append(span)
        if end >= content_end:
            break
        start = _skip_space(text, _overlap_start(levels, end, overlap_chars))
    return spans


def _last_boundary(levels: list[list[int]], low: int, high: int) -> int | None:
    """The last cut in [low, high] of the best level that has one."""
    for positions in levels:
        i = bisect.bisect_right(positions, high) - 1
        if i >= 0 and positions[i] >= low:
            return positions[i]
    return None


def _overlap_start(levels: list[list[int]], end: int, overlap_chars: int) -> int:
    """Where the next chunk starts: the earliest sentence start in the overlap window, else
    the earliest word start, else exactly `overlap_chars` back."""
    low = end - overlap_chars
    if overlap_chars == 0:
        return end
    sentence_starts = [_first_at_or_after(positions, low, end) for positions in levels[:3]]
    found = [p for p in sentence_starts if p is not None]
    if found:
        return min(found)
    word = _first_at_or_after(levels[3], low, end)
    return word if word is not None else low


def _first_at_or_after(positions: list[int], low: int, high: int) -> int | None:
    i = bisect.bisect_left(positions, low)
    return positions[i] if i < len(positions) and positions[i] < high else None


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _strip(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None
