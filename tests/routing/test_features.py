"""Prompt features: counts a person can check, in English and Chinese, read in microseconds."""

# ruff: noqa: RUF001  (full-width CJK punctuation on purpose)

from __future__ import annotations

import time
from typing import Any

from gateway.routing import features
from gateway.routing.features import SCORED, Features, extract
from gateway.util.tokens import estimate_prompt_tokens


def ask(text: str, **body: Any) -> Features:
    return extract({"messages": [{"role": "user", "content": text}], **body})


def test_a_greeting_is_short_simple_and_has_no_markers() -> None:
    f = ask("hi")
    assert f.simple == 1 and f.language == "en"
    assert f.last_user_tokens == 1
    busy = [n for n in SCORED if getattr(f, n) and n not in ("last_user_tokens", "total_tokens")]
    assert busy == ["simple"]


def test_code_blocks_and_identifiers() -> None:
    f = ask(
        "Debug this:\n```python\ndef get_user(user_id):\n"
        "    return db.query(User).filter(User.id == user_id)\n```\n"
        "and this one:\n~~~\nconst fullName = person.firstName;\n~~~\n"
    )
    assert f.code_blocks == 2
    assert f.identifiers >= 6  # user_id x2, get_user, query(, filter(, .id, ==, fullName, ...
    assert f.code_task >= 1  # debug
    assert ask("Here is an unclosed fence:\n```\nx = 1").code_blocks == 1


def test_plain_prose_has_no_identifiers() -> None:
    f = ask("The weather was lovely, e.g. sunny and warm; i.e. a fine day (mostly).")
    assert f.identifiers == 0 and f.code_blocks == 0


def test_math_formulas_and_numbers() -> None:
    f = ask("Solve x^2 + 3x = 10 and find the integral of \\frac{1}{x}; then what is 20% of 45?")
    assert f.math >= 4  # ^, 3x = 10 (operator), \frac, integral, 20%
    assert f.numbers >= 5
    assert ask("She has three apples and twelve pears.").numbers == 2
    assert ask("买了三个苹果和五公里外的两本书，一起回家").numbers == 3  # 一起 is not a number


def test_reasoning_markers_in_english_and_chinese() -> None:
    assert ask("Prove it, step by step, and compare the two approaches.").reasoning == 3
    f = ask("请分析这个问题，推导公式，并比较两种方法。")
    assert f.reasoning == 3 and f.language == "zh"
    assert ask("What time is it?").reasoning == 0


def test_multi_step_markers() -> None:
    assert ask("First boil water, then add pasta, finally drain it.").multi_step == 3
    assert ask("首先烧水，然后放面，最后沥干。").multi_step == 3
    assert ask("Do this:\n1. wash\n2. cut\n- serve").multi_step == 3
    assert ask("第一步洗菜，第二步切菜").multi_step == 2


def test_questions_constraints_and_relations() -> None:
    f = ask("Must it be JSON? Is at least one field required？")
    assert f.questions == 2
    assert f.constraints >= 4  # must, json, at least, required
    assert ask("Each box holds twice as many as the rest, per day.").relations == 4
    assert ask("每个盒子装的是剩下的两倍").relations == 3  # 每, 剩下, 倍


def test_statements_to_judge_together_are_counted_once_each() -> None:
    paired = "Statement 1 | Every group of order 4 is cyclic. Statement 2 | Every field is a ring."
    assert ask(paired + "\nA. True, True\nB. False, False").statements == 2
    scenarios = "Scenario 1 | I kept the wallet I found. Scenario 2 | I returned it. Scenario 1?"
    assert ask(scenarios).statements == 2  # "Scenario 1" twice is one claim
    assert ask("Which hold?\nI. cats\nII. dogs\nIII. birds\nA. I only\nB. I and II").statements == 3
    assert ask("(i) the first claim\n(ii) the second claim").statements == 2
    assert ask("下列说法正确的是：① 地球是圆的 ② 太阳绕地球转 ③ 水是湿的").statements == 3
    assert ask("陈述一：甲。陈述二：乙。").statements == 2
    for plain in ("I think I am fine. I guess.", "Is it true?", "Part 2 of the story", "hi"):
        assert ask(plain).statements == 0, plain


def test_simple_openers() -> None:
    for text in ("Hello! How are you?", "What is the capital of Peru?", "translate this", "你好",
                 "翻译：早上好", "光合作用是什么？"):  # fmt: skip
        assert ask(text).simple == 1, text
    for text in ("Prove that 2 is prime.", "分析一下这个方案", "Higher-order functions?"):
        assert ask(text).simple == 0, text


def test_tools_depth_images_and_total_tokens() -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Look at this"},
        {"role": "assistant", "content": "Sure."},
        {"role": "tool", "content": '{"ok": true}'},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "这张图里有什么？"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
    ]
    f = extract({"messages": messages, "tools": [{}, {}, {}], "functions": [{}]})
    assert f.tools == 4
    assert f.depth == 3  # user, assistant, tool; the system message does not count
    assert f.images == 1
    assert f.language == "zh"
    assert f.total_tokens == estimate_prompt_tokens(messages)


def test_total_tokens_match_the_gateway_estimate_in_mixed_scripts() -> None:
    messages = [
        {"role": "user", "content": "Résumé ’quotes’ — 混合的文本 and 한국어 " * 7},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "ok"},
    ]
    assert extract({"messages": messages}).total_tokens == estimate_prompt_tokens(messages)


def test_junk_bodies_do_not_raise() -> None:
    for body in ({}, {"messages": None}, {"messages": "hi"}, {"messages": [None, 3, {}]},
                 {"messages": [{"role": "user", "content": [None, {"type": "text"}]}]},
                 {"messages": [{"role": "assistant", "content": "no user turn"}],
                  "tools": "many"}):  # fmt: skip
        f = extract(body)
        assert f.last_user_tokens == 0 and f.tools == 0


def test_markers_are_read_from_the_head_and_tail_of_a_long_task() -> None:
    middle = "filler words " * 2000 + "prove " + "filler words " * 2000
    f = ask("Please analyse this. " + middle + " Then compare.")
    assert f.reasoning == 2  # analyse, compare; the "prove" in the middle is not read
    assert f.last_user_tokens > 12_000  # lengths count the whole text


def test_each_marker_word_has_one_kind() -> None:
    lexicons = [v for v in vars(features).values() if isinstance(v, features._Lexicon)]
    entries = [e for lex in lexicons for e in (*lex.words, *lex.phrases, *lex.chinese)]
    assert len(entries) == len(set(entries))


def test_extraction_is_fast() -> None:
    bodies = [
        {"messages": [{"role": "user", "content": "A bakery sells 12 cakes a day at $3 each. "
                                                   "How much does it earn in a week?" * 3}]},
        {"messages": [{"role": "user", "content": "请一步一步分析并推导这个方程：x^2 + 3x = 10"}]},
        {"messages": [{"role": "user", "content": "x = foo_bar(y) + 1\n" * 5000}]},  # 100 kB
    ]  # fmt: skip
    for body in bodies:
        extract(body)
        times = []
        for _ in range(50):
            started = time.thread_time()  # CPU: what other work on the machine cannot inflate
            extract(body)
            times.append(time.thread_time() - started)
        assert sorted(times)[25] < 0.002, body  # median; typically 20 to 300 µs
