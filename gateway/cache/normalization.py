"""The exact-tier key: `normalize(text)`, equal only for texts that are the same question.

Exact means exact: the key folds only what never changes meaning (line endings, Unicode
NFC composition, whitespace at the ends). Case, width forms, inner whitespace, superscripts
and punctuation are the semantic tier's business, where the near-miss guards run: "x²" and
"x2", "SAT" and "sat", or two indentations of a pasted Python snippet get separate keys.
"""

from __future__ import annotations

import unicodedata

__all__ = ["normalize"]


def normalize(text: str) -> str:
    """Key text for the exact tier: line endings unified, NFC, stripped. Linear in the text."""
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n")).strip()
