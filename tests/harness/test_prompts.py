from __future__ import annotations

from gateway.testing.harness.prompts import UniqueQuestions


def test_questions_are_all_different_and_numbered() -> None:
    questions = UniqueQuestions(seed=3)
    drawn = [questions.next() for _ in range(2000)]
    assert len(set(drawn)) == 2000
    assert drawn[0].startswith("Tell me about ") and drawn[0].endswith("(request 1).")
    assert questions.count == 2000


def test_the_template_takes_the_words_and_the_number() -> None:
    questions = UniqueQuestions(seed=1, template="Q{n}: {words}?", words=3)
    first = questions.next()
    assert first.startswith("Q1: ") and first.endswith("?")
    assert len(first.removeprefix("Q1: ").removesuffix("?").split()) == 3


def test_the_same_seed_draws_the_same_questions() -> None:
    a, b = UniqueQuestions(seed=9), UniqueQuestions(seed=9)
    assert [a.next() for _ in range(5)] == [b.next() for _ in range(5)]
    assert UniqueQuestions(seed=10).next() != UniqueQuestions(seed=9).next()
