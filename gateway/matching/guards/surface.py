"""Surface checks: differences of writing that change the question even when every word
matches once case and width are folded.

- **Code** (fenced blocks, inline `code`, and lines that look like code) must be identical as
  written, whitespace and case included: indentation is meaning in Python and YAML.
- **Compatibility characters** that carry meaning (superscripts, subscripts, fractions,
  circled and styled letters; not full-width forms): "x²" is not "x2".
- **Symbols** outside sentence punctuation ("C#" / "C", "4!" / "4", "//" / "/", "-16" / "16"):
  their multisets must agree.
- **Case** where it is meaning: acronyms ("SAT" / "sat"), identifiers ("getName" /
  "getname"), anything after a sigil ("-D", "%M", "\\S", "$HOME"), and a word capitalized
  mid-sentence against the same word in lower case ("Turkey" / "turkey") when both texts
  use case at all. A text typed all in lower case, or shouted, says nothing by its case.
- **Accents**: the same letters with other diacritics ("pêcher" / "pécher", "avó" / "avô",
  "côte" / "cote"). MiniLM's tokenizer strips accents, so its vectors and the judge read
  both words as one; where they differ, only writing tells the two questions apart.
"""

# ruff: noqa: RUF001, RUF002  (this module compares look-alike characters on purpose)
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from gateway.matching.guards.lexicons import _EN_STOP
from gateway.matching.guards.synonyms import common, known

__all__ = ["SurfaceFeatures", "fold_width", "surface", "surface_features", "surface_reasons"]

_FENCE_RE = re.compile(r"```.*?(?:```|\Z)", re.S)
_INLINE_RE = re.compile(r"`[^`\n]+`")
# A line that looks like code: indented and ending in code punctuation, or with an
# assignment, a call, a block opener or a statement keyword.
_CODE_LINE_RE = re.compile(
    r"^(?:[ \t]+\S.*|.*[;{}]\s*|\s*(?:def|class|if|elif|else|for|while|return|import|from|try|"
    r"except|with|function|var|let|const|public|private|static|void|int|#include)\b.*[:;{(=].*|"
    r".*\b\w+\s*(?:==|!=|<=|>=|=|\+=|-=)\s*\S.*|\s*[\w.]+\(.*\)\s*:?\s*|\s*-\s+\w[\w-]*:.*|"
    r"\s*[\w-]+:\s*\S*\s*)$"
)
# A quoted string keeps its inner spacing and case: "'a  b'.split()" is not "'a b'.split()".
_QUOTED_RE = re.compile(r"(?<![^\s(\[=,])(['\"])[^'\"\n]{1,80}\1(?!\w)")
_L = "A-Za-z\u00c0-\u024f"  # Latin letters: case lives there (a CJK run is no word here)
_TOKEN_RE = re.compile(f"(?<![{_L}])[{_L}]+(?:['’][{_L}]+)*(?![{_L}])")
_SIGILS = frozenset("-\\%$.@#:/")
# Punctuation that shapes sentences, not meaning (the hyphen only between letters).
_PROSE = frozenset(".,?!;:'\"‘’“”()[]…-–—·`、。，？！；：（）《》「」『』【】～")
_ENDS = frozenset(".,;:!?)\"'’”。，；：！？）")
_CURRENCY = frozenset("$€£¥₹%")
_OPERATORS = frozenset("$%\\@#^&|<>=+*/~")
_MEANINGFUL_TAGS = ("<super>", "<sub>", "<fraction>", "<circle>", "<font>", "<square>")
_SENTENCE_END = frozenset(".?!:;\n。？！；")


@dataclass(frozen=True, slots=True)
class SurfaceFeatures:
    code: tuple[str, ...]  # fenced blocks and code-like lines, as written
    inline: frozenset[str]  # inline `code`: must appear as written in the other text
    text: str
    compat: frozenset[tuple[str, int]]  # meaningful compatibility characters, counted
    symbols: frozenset[tuple[str, int]]
    tokens: tuple[tuple[str, bool, bool], ...]  # (as written, mid-sentence, after a sigil)
    cased: bool  # the text uses both cases: its capitals say something
    shouted: bool = False  # written in capitals


@lru_cache(maxsize=16384)
def surface_features(text: str) -> SurfaceFeatures:
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n"))
    code = [m.group(0) for m in _FENCE_RE.finditer(text)]
    prose = fold_width(_FENCE_RE.sub("\n", text))
    inline = frozenset(m.group(0)[1:-1] for m in _INLINE_RE.finditer(prose)) | frozenset(
        m.group(0) for m in _QUOTED_RE.finditer(prose)
    )
    lines = prose.split("\n")
    code_lines = [ln.rstrip() for ln in lines if _looks_like_code(ln, len(lines))]
    if code_lines:
        code.append("\n".join(code_lines))
    letters = [c for c in prose if c.isalpha() and c.isascii()]
    upper = sum(1 for c in letters if c.isupper())
    words = [w for w in _TOKEN_RE.findall(prose) if len(w) > 3]
    title = len(words) >= 3 and sum(w[0].isupper() for w in words) >= 0.8 * len(words)
    return SurfaceFeatures(
        code=tuple(code),
        inline=inline,
        text=prose,
        compat=frozenset(Counter(c for c in text if _meaningful_compat(c)).items()),
        symbols=frozenset(_symbols(prose).items()),
        tokens=tuple(_tokens(prose)),
        # Lower case only, shouted or Title Case: the capitals say nothing.
        shouted=len(letters) >= 4 and upper > 0.6 * len(letters),
        cased=not title and (0 < upper < 0.6 * len(letters) or (upper > 0 and len(letters) < 4)),
    )


def _looks_like_code(line: str, n_lines: int) -> bool:
    stripped = line.strip()
    if not stripped or len(line) > 400:
        return False
    indented = line[:1] in " \t" and n_lines > 1
    return bool(_CODE_LINE_RE.match(line)) and (indented or _has_code_marks(stripped))


def _has_code_marks(line: str) -> bool:
    return any(mark in line for mark in ("=", "(", "{", ";", "[", ":", "->"))


def fold_width(text: str) -> str:
    """Full-width and half-width forms to their ordinary ones ("ＡＩ" -> "AI"), nothing else."""
    if text.isascii():
        return text
    return "".join(_WIDTH.get(c, c) for c in text)


class _WidthTable(dict[str, str]):
    def __missing__(self, c: str) -> str:
        tag = unicodedata.decomposition(c)
        folded = unicodedata.normalize("NFKC", c) if tag.startswith(("<wide>", "<narrow>")) else c
        self[c] = folded
        return folded


_WIDTH = _WidthTable()


@lru_cache(maxsize=4096)
def _meaningful_compat(c: str) -> bool:
    if c.isascii():
        return False
    return unicodedata.decomposition(c).startswith(_MEANINGFUL_TAGS)


def _symbols(text: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for i, c in enumerate(text):
        before = text[i - 1] if i else " "
        after = text[i + 1] if i + 1 < len(text) else " "
        if c.isalnum() or c.isspace() or _meaningful_compat(c):
            continue
        if c in _CURRENCY and (after.isdigit() or before.isdigit()):
            continue  # "$20" is "20 dollars": the unit guard compares amounts
        if c in _PROSE:
            # "4!" is a factorial, "-16" a negative number: next to digits they are signs.
            # After an operator they are part of it: "$?" is not "$!".
            # "![]", "x?.y": sentence marks inside an expression are operators.
            sign = (
                (c == "!" and before.isdigit())
                or (c in "-–" and after.isdigit() and not before.isalnum())
                or (c in "!?" and not (after.isspace() or after in _ENDS or after.isalpha()))
            )
            if not (sign or before in _OPERATORS):
                continue
        found[c] += 1
    return found


def _tokens(text: str) -> list[tuple[str, bool, bool]]:
    out = []
    for m in _TOKEN_RE.finditer(text):
        start = m.start()
        before = text[start - 1] if start else ""
        j = start - 1
        while j >= 0 and text[j] in " \t\"'‘“(*":
            j -= 1
        mid = j >= 0 and text[j] not in _SENTENCE_END
        out.append((m.group(0), mid, before in _SIGILS and before != ""))
    return out


def surface(a: SurfaceFeatures, b: SurfaceFeatures) -> str | None:
    """Why two texts differ in writing that carries meaning, or None."""
    return next(surface_reasons(a, b), None)


def surface_reasons(a: SurfaceFeatures, b: SurfaceFeatures) -> Iterator[str]:
    """Every surface reason, in the order `surface` checks them."""
    inline_differs = any(c not in b.text for c in a.inline) or any(
        c not in a.text for c in b.inline
    )
    if a.code != b.code or inline_differs:
        yield "code"
    if a.compat != b.compat or a.symbols != b.symbols:
        yield "symbol"
    reason = _case(a, b)
    if reason:
        yield reason
    if _accents(a, b):
        yield "accent"


def _accents(a: SurfaceFeatures, b: SurfaceFeatures) -> bool:
    """A word written with other diacritics in one text than in the other, and not also
    written the other text's way in it ("résumé" / "resume"; "café" beside "cafe" is not)."""
    if a.text.isascii() and b.text.isascii():
        return False
    forms_a, forms_b = _accent_forms(a), _accent_forms(b)
    return any(not forms & forms_b[bare] for bare, forms in forms_a.items() if bare in forms_b)


def _accent_forms(f: SurfaceFeatures) -> dict[str, set[str]]:
    """The words of a text by their letters without diacritics, where one has some."""
    out: dict[str, set[str]] = {}
    for word, _, _ in f.tokens:
        low = word.lower()
        out.setdefault(_bare(low), set()).add(low)
    return out


@lru_cache(maxsize=8192)
def _bare(word: str) -> str:
    if word.isascii():
        return word
    return "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.combining(c))


def _case(a: SurfaceFeatures, b: SurfaceFeatures) -> str | None:
    written_b: dict[str, list[tuple[str, bool, bool]]] = {}
    for tok in b.tokens:
        written_b.setdefault(tok[0].lower(), []).append(tok)
    for word, mid, sigil in a.tokens:
        others = written_b.get(word.lower())
        if not others or any(o[0] == word for o in others):
            continue
        other, other_mid, other_sigil = others[0]
        if sigil or other_sigil:
            return "case"
        if word.lower() == "i":
            continue
        shouted = a.shouted or b.shouted  # a text in capitals says nothing by its case
        if len(word) <= 3 and not shouted and (_capital_inside(word) or _capital_inside(other)):
            return "case"  # short codes keep their case in any text: mW / MW, dB / DB, pH
        if not (a.cased and b.cased):
            continue
        if _inner_capital(word) or _inner_capital(other):
            return "case"  # getName, MBps / Mbps, iPhone
        # Casual writing capitalizes at will ("Hyderabad" / "hyderabad", "NIMCET" / "nimcet"):
        # case is evidence where the lower-case form is a word of its own, or where a short
        # code is involved (HH / hh, CO / Co).
        low = word.lower()
        if word[1:] != other[1:] and (len(word) <= 3 or known(low) or low in _EN_STOP):
            return "case"
        if mid and other_mid and (common(low) or low in _EN_STOP):  # Turkey / turkey
            return "case"
    return None


def _capital_inside(word: str) -> bool:
    return any(c.isupper() for c in word[1:])


def _inner_capital(word: str) -> bool:
    """A capital after the first letter in a word that is not all capitals: getName, MBps."""
    return not word.isupper() and any(c.isupper() for c in word[1:])
