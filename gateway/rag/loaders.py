"""Files to plain text for the embedded knowledge base: Markdown, text and HTML.

A loader never decides whether a run fails: anything it cannot read (unknown type, not UTF-8,
binary, no text left) is a LoadError with a short reason, which the ingest reports as skipped.
HTML goes through the stdlib parser: dropping scripts, styles and navigation and turning block
elements into paragraph breaks is all retrieval needs, and it keeps paragraphs for the chunker.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple

import yaml

MARKDOWN = frozenset({".md", ".markdown"})
TEXT = frozenset({".txt"})
HTML = frozenset({".html", ".htm"})
SUPPORTED = MARKDOWN | TEXT | HTML

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_H1 = re.compile(r"^ {0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_BLANK_LINES = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")


class LoadError(Exception):
    """The file is skipped; the message is the reason shown to the user."""


class LoadedDocument(NamedTuple):
    text: str
    title: str | None


def load(path: Path) -> LoadedDocument:
    """Read one file by its extension. Raises LoadError (never OSError or UnicodeError)."""
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED:
        raise LoadError(f"unsupported file type '{suffix or path.name}'")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LoadError(f"unreadable: {exc.strerror or exc}") from None
    text = _decode(raw)
    if suffix in HTML:
        doc = html_to_text(text)
    elif suffix in MARKDOWN:
        doc = markdown_to_text(text, path.stem)
    else:
        doc = LoadedDocument(text.strip(), path.stem)
    if not doc.text.strip():
        raise LoadError("no text")
    return doc


def _decode(raw: bytes) -> str:
    if b"\x00" in raw[:8192]:
        raise LoadError("binary content")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoadError(f"not UTF-8 (invalid byte at offset {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def markdown_to_text(text: str, stem: str) -> LoadedDocument:
    """Strip YAML front matter; the title is the first `# ` heading (else front matter's
    `title:`, else the file name). The Markdown itself stays: the embedder reads it fine."""
    front_title = None
    match = _FRONT_MATTER.match(text)
    if match:
        front_title = _front_matter_title(match.group(1) or "")
        text = text[match.end() :]
    return LoadedDocument(text.strip(), _first_h1(text) or front_title or stem)


def _front_matter_title(block: str) -> str | None:
    try:
        meta = yaml.safe_load(block)
    except yaml.YAMLError:
        return None
    title = meta.get("title") if isinstance(meta, dict) else None
    if title is None:
        return None
    return str(title).strip() or None


def _first_h1(text: str) -> str | None:
    in_fence = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (match := _H1.match(line)):
            return match.group(1).strip()
    return None


# Elements whose content is never text for retrieval.
_DROPPED = frozenset({"script", "style", "nav", "noscript", "template", "svg", "iframe", "object"})
# Elements that end a paragraph; _LINE ones only end a line (list items, table rows).
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "dd", "details", "dialog", "div", "dl",
        "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4",
        "h5", "h6", "header", "hr", "main", "ol", "p", "pre", "section", "summary", "table",
        "ul",
    }
)  # fmt: skip
_LINE = frozenset({"br", "li", "tr", "caption", "option"})
_CELL = frozenset({"td", "th"})


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: str | None = None
        self.h1: str | None = None
        self._dropped = 0  # depth inside dropped elements
        self._pre = 0
        self._title_parts: list[str] | None = None
        self._h1_parts: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROPPED:
            self._dropped += 1
        if self._dropped:
            return
        if tag == "title" and self.title is None:
            self._title_parts = []
        elif tag == "h1" and self.h1 is None:
            self._h1_parts = []
        elif tag == "pre":
            self._pre += 1
        self._break(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROPPED:
            self._dropped = max(0, self._dropped - 1)
            return
        if self._dropped:
            return
        if tag == "title" and self._title_parts is not None:
            self.title = _squash("".join(self._title_parts)) or None
            self._title_parts = None
        elif tag == "h1" and self._h1_parts is not None:
            self.h1 = _squash("".join(self._h1_parts)) or None
            self._h1_parts = None
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in _BLOCK:  # lines and cells only start with a break: <li>a</li><li>b</li>
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._dropped:
            return
        if self._title_parts is not None:
            self._title_parts.append(data)
            return
        if self._h1_parts is not None:
            self._h1_parts.append(data)
        self.parts.append(data if self._pre else re.sub(r"\s+", " ", data))

    def _break(self, tag: str) -> None:
        if tag in _BLOCK:
            self.parts.append("\n\n")
        elif tag in _LINE:
            self.parts.append("\n")
        elif tag in _CELL:
            self.parts.append(" ")


def html_to_text(html: str) -> LoadedDocument:
    """Visible text with paragraph breaks; the title is <title>, else the first <h1>."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    lines = (line.strip() for line in "".join(parser.parts).split("\n"))
    text = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
    return LoadedDocument(text, parser.title or parser.h1)


def _squash(text: str) -> str:
    return " ".join(text.split())
