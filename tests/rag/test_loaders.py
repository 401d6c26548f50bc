"""Loaders: HTML, Markdown and text to (text, title); unreadable files are LoadErrors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.rag.loaders import LoadError, html_to_text, load, markdown_to_text

PAGE = """<!doctype html>
<html><head>
  <title>  Shipping &amp; Delivery </title>
  <style>body { color: red }</style>
  <script>var tracking = "do not index me";</script>
</head>
<body>
  <nav><a href="/">Home</a> | <a href="/faq">FAQ</a></nav>
  <h1>Shipping</h1>
  <p>Orders ship within
     two business days.</p>
  <div>Express delivery<br>costs extra.</div>
  <ul><li>Europe: 3 days</li><li>Asia: 7 days</li></ul>
  <table><tr><th>Zone</th><td>Price</td></tr></table>
  <noscript>Enable JavaScript</noscript>
  <pre>line one
  line two</pre>
</body></html>
"""


def test_html_keeps_visible_text_in_paragraphs_and_drops_scripts_styles_navigation() -> None:
    text, title = html_to_text(PAGE)
    assert title == "Shipping & Delivery"
    assert text.split("\n\n") == [
        "Shipping",
        "Orders ship within two business days.",
        "Express delivery\ncosts extra.",
        "Europe: 3 days\nAsia: 7 days",
        "Zone Price",
        "line one\nline two",
    ]
    for hidden in ("color: red", "do not index me", "Home", "FAQ", "JavaScript"):
        assert hidden not in text


def test_html_title_falls_back_to_the_first_h1() -> None:
    _, title = html_to_text("<body><h1>  Rate <em>limits</em> </h1><h1>Other</h1></body>")
    assert title == "Rate limits"
    _, title = html_to_text("<body><svg><title>icon</title></svg><p>no heading</p></body>")
    assert title is None


def test_malformed_html_does_not_raise() -> None:
    text, _ = html_to_text("<p>unclosed <b>bold <div>and </span> stray</p></nav> tail &bogus;")
    assert "unclosed bold" in text
    assert "tail &bogus;" in text


def test_markdown_front_matter_is_stripped_and_the_h1_is_the_title() -> None:
    source = "---\ntitle: From front matter\ntags: [a]\n---\nIntro.\n\n# Refund policy\n\nBody.\n"
    text, title = markdown_to_text(source, "refunds")
    assert title == "Refund policy"
    assert text.startswith("Intro.")
    assert "tags" not in text


def test_markdown_title_falls_back_to_front_matter_then_file_name() -> None:
    assert markdown_to_text("---\ntitle: Meta\n---\n## Sub\ntext", "f").title == "Meta"
    assert markdown_to_text("```\n# not a heading\n```\ntext", "stem").title == "stem"
    assert markdown_to_text("#hashtag is not a heading", "stem").title == "stem"
    assert markdown_to_text("# Closed heading ##\n", "stem").title == "Closed heading"


def test_load_picks_the_loader_by_extension(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("\ufeffplain\r\ntext\n")
    (tmp_path / "guide.MARKDOWN").write_text("# Guide\nhello")
    (tmp_path / "page.htm").write_text("<title>Page</title><p>hi</p>")
    assert load(tmp_path / "notes.txt") == ("plain\ntext", "notes")
    assert load(tmp_path / "guide.MARKDOWN") == ("# Guide\nhello", "Guide")
    assert load(tmp_path / "page.htm") == ("hi", "Page")


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("report.pdf", b"%PDF-1.7", "unsupported file type '.pdf'"),
        ("Makefile", b"all:", "unsupported file type 'Makefile'"),
        ("latin1.txt", "caf\xe9".encode("latin-1"), "not UTF-8"),
        ("blob.txt", b"abc\x00def", "binary content"),
        ("empty.md", b"---\ntitle: x\n---\n  \n", "no text"),
        ("scripts.html", b"<script>x()</script><nav>menu</nav>", "no text"),
    ],
)
def test_unreadable_files_raise_load_error_with_a_reason(
    tmp_path: Path, name: str, content: bytes, reason: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(LoadError, match=reason):
        load(path)


def test_a_missing_file_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="unreadable"):
        load(tmp_path / "gone.txt")
