"""The exact-tier key: `normalize(text)`, equal for texts that must get the same answer.

Independent of the near-miss checks: it folds width, case, whitespace and trailing sentence
punctuation, and leaves code (fenced blocks and inline `code`) as written.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize"]

_FENCE_RE = re.compile(r"(```.*?```)", re.S)
_INLINE_CODE_RE = re.compile(r"(`[^`\n]+`)")
_WS_RE = re.compile(r"\s+")
# Trailing sentence punctuation only; "5!" (a factorial) keeps its "!".
_TRAIL_RE = re.compile(r"(?:[\s?.,~\u2026\u3002]|(?<!\d)!)+$")  # full-width ?,! folded by NFKC


def normalize(text: str) -> str:
    """Key for the exact tier: texts with equal keys must deserve the same answer.

    NFKC (full-width to half-width), casefold, whitespace collapsed, trailing ?/./! dropped.
    Code is kept as written: fenced blocks verbatim (indentation is meaning in Python) and
    inline `code` with its case (getName and getname are different identifiers).
    """
    text = unicodedata.normalize("NFKC", text).strip()
    parts = _FENCE_RE.split(text)
    out: list[str] = []
    for i, part in enumerate(parts):
        if i % 2:  # a fenced code block
            out.append(part)
            continue
        for j, piece in enumerate(_INLINE_CODE_RE.split(part)):
            out.append(piece if j % 2 else _WS_RE.sub(" ", piece.casefold()))
    joined = "".join(out).strip()
    if not joined.endswith("```"):
        joined = _TRAIL_RE.sub("", joined)
    return joined
