"""What one request's cache work may cost: linear in its text, capped, long work off the loop.

The exact key normalizes at most `NORMALIZED_CHARS` characters and hashes the rest as sent;
the near-miss guards compare at most the policy's `semantic_max_chars` (longer texts get the
exact tier only). Work on inputs past the inline limits below runs on the worker thread of
`gateway.util.offload`.
"""

from __future__ import annotations

from gateway.cache.normalization import normalize

# Exact keys of bodies up to this size are built inline (normalizing and hashing 16 KB: ~0.1 ms).
INLINE_KEY_BYTES = 16_384
# Near-miss checks of pairs up to this length run inline (measured ~0.3 ms at 100 characters,
# ~2 ms at 256, ~12 ms at 2,048: the guards are not linear in length).
INLINE_COMPARE_CHARS = 128
# Past this many characters a text is not normalized, only hashed as sent: normalizing is
# what grows with length (and may change under us); a hash stays linear and releases the GIL.
NORMALIZED_CHARS = 65_536


def exact_text(text: str) -> str:
    """What the exact key hashes: the normalized text, or for a very long one its normalized
    head and the rest as sent (two long texts then share a key only if their tails are equal
    character for character: fewer hits, never a wrong one)."""
    if len(text) <= NORMALIZED_CHARS:
        return normalize(text)
    head, tail = text[:NORMALIZED_CHARS], text[NORMALIZED_CHARS:]
    return f"{normalize(head)}\x00{len(head)}\x00{tail}"
