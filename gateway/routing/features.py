"""Explainable numbers about a chat request, for the complexity score.

Each feature is a count a person can check by reading the prompt: how long the task is, how
much code, how many numbers and formulas, how many reasoning and multi-step markers (English
and Chinese), how many tools, how deep the conversation. Markers are read from the last user
turn (the task); lengths and depth from the whole request.

Speed: the text is split into lowercase words once and marker words are looked up in the
counts; phrases and Chinese markers are substring counts; the few regular expressions left
start with a literal where they can (a literal prefix is found by a fast search, a character
class is tested at every position). Markers are read from at most the first `_SCAN_HEAD` and
last `_SCAN_TAIL` characters of the task, so a 100 kB paste costs what a 3 kB one does.
Numbers: docs/BENCHMARKS.md, "Routing quality".
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from gateway.util.tokens import message_text

Language = Literal["en", "zh", "other"]

# About 500 tokens from the head of the task and 250 from its tail: Latin text runs about four
# characters a token, Chinese one (as gateway.util.tokens counts them).
_SCAN_HEAD = 2000
_SCAN_TAIL = 1000
_CJK_CHARS_A_TOKEN = 4


@dataclass(frozen=True, slots=True)
class _Lexicon:
    """Marker words of one kind: English words, English phrases, Chinese substrings."""

    words: tuple[str, ...]
    phrases: tuple[str, ...]  # padded with spaces: matched against " word word ... "
    chinese: tuple[str, ...]

    def count(self, counts: Counter[str], joined: str, text: str, han: bool) -> int:
        n: int = sum(filter(None, map(counts.get, self.words)))
        if self.phrases:
            n += sum(map(joined.count, self.phrases))
        if han and self.chinese:
            n += sum(map(text.count, self.chinese))
        return n


def _lexicon(english: str, chinese: str = "") -> _Lexicon:
    entries = [e.strip() for e in english.split(",") if e.strip()]
    return _Lexicon(
        words=tuple(e for e in entries if " " not in e),
        phrases=tuple(f" {e} " for e in entries if " " in e),
        chinese=tuple(e.strip() for e in chinese.split(",") if e.strip()),
    )


_CODE_TASK = _lexicon(
    "implement, implementation, debug, debugging, refactor, function, functions, script,"
    " program, algorithm, algorithms, compile, compiler, bug, bugs, stack trace, traceback,"
    " exception, exceptions, segfault, regex, sql, unit test, unit tests, endpoint, database,"
    " thread-safe, concurrency, race condition, deadlock, deadlocks, memory leak,"
    " time complexity, recursion, code",
    "代码, 函数, 编写, 调试, 报错, 异常, 算法, 程序, 脚本, 正则, 数据库, 接口, 并发, 死锁,"
    " 内存泄漏, 复杂度, 递归, 单元测试, 重构, 编译",
)
_MATH_TERMS = _lexicon(
    "percent, equation, equations, integral, derivative, matrix, matrices, eigenvalue,"
    " eigenvalues, probability, expected value, theorem, lemma, polynomial, logarithm, prime,"
    " primes, modulo, sequence, series, limit, vector, geometry, triangle, angle, area, volume,"
    " radius, variance, standard deviation, inequality",
    "百分之, 方程, 积分, 导数, 微分, 矩阵, 特征值, 概率, 期望, 定理, 引理, 多项式, 对数, 质数,"
    " 素数, 数列, 级数, 极限, 向量, 几何, 三角形, 面积, 体积, 半径, 方差, 不等式",
)
_NUMBER_WORDS = _lexicon(
    "one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen,"
    " fourteen, fifteen, sixteen, seventeen, eighteen, nineteen, twenty, thirty, forty, fifty,"
    " sixty, seventy, eighty, ninety, hundred, thousand, million, billion, dozen"
)
# Quantity relations: each is an operation a word problem asks the solver to carry out.
_RELATIONS = _lexicon(
    "each, per, every, times, twice, thrice, half, halves, third, quarter, double, triple,"
    " ratio, remaining, remainder, the rest, left over, total, sum, difference, average,"
    " more than, less than, fewer than, split, equally, discount, interest, profit, rate, speed",
    "每, 倍, 一半, 剩下, 剩余, 总共, 一共, 平均, 折扣, 打折, 利息, 利润, 速度, 比例, 平分",
)
_REASONING = _lexicon(
    "step by step, step-by-step, think carefully, think through, reason through, prove, proves,"
    " proof, proofs, show that, derive, derivation, deduce, explain why, explain how, analyze,"
    " analyse, analysis, compare, comparing, comparison, contrast, trade-off, trade-offs,"
    " tradeoff, tradeoffs, pros and cons, evaluate, assess, justify, critique, implications,"
    " rigorous, rigorously, formally, in depth, in detail, root cause, design, architecture,"
    " optimize, optimise, strategy, what would happen if, counterexample",
    "一步一步, 一步步, 逐步, 证明, 推导, 推理, 分析, 比较, 对比, 论证, 评估, 权衡, 利弊, 优缺点,"
    " 解释为什么, 说明为什么, 深入, 详细, 设计, 架构, 优化, 策略, 反例",
)
_MULTI_STEP = _lexicon(
    "first, firstly, second, secondly, then, next, after that, afterwards, finally,"
    " subsequently, later, before, after, until",
    "首先, 然后, 接着, 其次, 之后, 最后, 随后, 后来, 步骤, 先把, 再把",
)
_CONSTRAINTS = _lexicon(
    "must, should, at least, at most, no more than, no less than, exactly, without, do not,"
    " don't, never, ensure, make sure, required, requirement, requirements, constraint,"
    " constraints, format, json, yaml",
    "必须, 不要, 不能, 不得, 至少, 至多, 最多, 不超过, 只能, 确保, 要求, 限制, 格式, 以内",
)

_WORD = re.compile(r"[a-z]+(?:['-][a-z]+)*")  # on lowercased text
_DIGITS = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_ZH_NUMBER = re.compile(  # a Chinese numeral with a measure word after it: 三个, 五公里
    "[零一二两三四五六七八九十百千万亿]+(?:个|只|本|元|块|斤|米|公里|小时|分钟|天|年|月|次|辆|人|"
    "名|件|条|张|台|岁|倍|份|杯|瓶|箱|页|道|题|支|颗|棵)"
)
_ZH_STEP = re.compile("第[一二三四五六七八九十0-9]+步")
_FENCE = re.compile(r"^[ \t]*(?:```|~~~)", re.MULTILINE)
_LIST_ITEM = re.compile(r"^[ \t]*(?:[0-9]+[.)]|[-*•])[ \t]", re.MULTILINE)
# Marks of code identifiers, each a literal (fast) search: snake_case, call(, dotted.name, ==.
_IDENTIFIER_MARKS = (
    re.compile(r"_[A-Za-z0-9]"),
    re.compile(r"\((?<=[A-Za-z0-9_]\()"),
    re.compile(r"\.(?<=[a-z0-9_]\.)[a-z_][a-z0-9_]"),
    re.compile(r"[A-Z](?<=[a-z][A-Z])"),  # camelCase
    re.compile(r"==|!=|=>|->|::|&&|\|\||\+=|-="),
)
_MATH_MARKS = (
    re.compile(r"[0-9]\s*(?:[-+*/×÷^=<>≤≥]\s*[0-9(]|%)"),  # noqa: RUF001  (3 + 4, 2/3, 20%)
    re.compile(r"[\^²³]"),  # powers
    re.compile(r"\\[A-Za-z]+"),  # LaTeX commands
    re.compile(r"[∑∫√π∞≈≠≤≥∂∇∈∀∃±]"),
    re.compile(r"\([a-z0-9, ]+\)\s*="),  # f(x) =
)
# Chit-chat, lookups and rewrites, recognised by how the message opens.
_SIMPLE = re.compile(
    r"\s*(?:(?:hi|hello|hey|thanks|thank you|good morning|good night|how are you|what's up"
    r"|what is|what's|who is|who was|when is|when was|where is|define|definition of|meaning of"
    r"|translate|spell|synonyms?|rephrase|rewrite|paraphrase|fix the typo|correct the grammar"
    r"|summari[sz]e|tl;dr|tell me a joke)\b"
    r"|你好|您好|嗨|谢谢|早上好|晚安|翻译|什么是|谁是|改写|润色|总结|讲个笑话"
    r"|[^，。？！\n]{1,12}是什么(?:意思)?[？?]?$)",  # noqa: RUF001
    re.IGNORECASE,
)
# Labelled claims a task asks to judge together ("Statement 1 | ...", "Scenario 2", roman-numbered
# lines, "(ii)", "①", "陈述二"): every one must be judged right, where small models lose most.
# Each pattern starts with a literal or runs only when a cheaper test passes (see _statements):
# a pattern with no literal prefix is tried at every position of a 100 kB paste.
_STATEMENT_WORDS = ("statement", "scenario", "claim", "assertion", "premise", "proposition")
_LABELLED = re.compile(
    r"\b(?:statement|scenario|claim|assertion|premise|proposition)\s*(?:[0-9]+|[ivx]+)\b",
    re.IGNORECASE,
)
_NUMBERED_LINE = re.compile(r"\n[ \t]*\(?(?:i{1,3}|iv|vi{0,3}|I{1,3}|IV|VI{0,3})[.)][ \t]")
_BRACKETED = re.compile(r"\((?:i{1,3}|iv|vi{0,3})\)")  # (i) (ii) within a line
_CIRCLED_OR_ZH = re.compile(
    "[①②③④⑤⑥⑦⑧⑨⑩]|(?:陈述|说法|命题|观点|情景|场景)[一二三四五六七八九十0-9]"
)
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})


@dataclass(frozen=True, slots=True)
class Features:
    """Counts about one request; every field but `language` is a number the scorer weighs."""

    last_user_tokens: int  # the task: the last user turn
    total_tokens: int  # the whole prompt, as gateway.util.tokens.estimate_prompt_tokens counts it
    code_blocks: int  # fenced blocks
    identifiers: int  # marks of code: snake_case, camelCase, dotted.names, calls(, ==, ->
    code_task: int  # "debug", "refactor", "函数", ...
    math: int  # operators between numbers, powers, LaTeX, math symbols and terms, percentages
    numbers: int  # digits, number words, Chinese numerals with a measure word
    relations: int  # quantity relations: each, per, twice, half, remaining, 每, 倍, ...
    reasoning: int  # step by step, prove, analyse, compare, 分析, 推导, 比较, ...
    multi_step: int  # first/then/finally, list items, 首先/然后/最后, ...
    questions: int  # question marks
    constraints: int  # must, at least, without, format, 必须, 至少, ...
    statements: int  # distinct labelled claims to judge together: Statement 1, (ii), III., ①
    simple: int  # 1 when the task opens like chit-chat, a lookup or a rewrite
    tools: int  # declared tools (and legacy functions)
    depth: int  # messages (not system) before the last user turn
    images: int  # image parts in any message
    language: Language  # of the task: "zh" when Han characters dominate, "en" for Latin script


SCORED: tuple[str, ...] = tuple(f for f in Features.__dataclass_fields__ if f != "language")


def extract(body: dict[str, Any]) -> Features:
    """The features of an OpenAI chat request body (`messages`, `tools`); tolerant of junk."""
    raw = body.get("messages")
    messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    last_user = _last_user_index(messages)
    task = message_text(messages[last_user]) if last_user is not None else ""
    # Framing and the other messages, as gateway.util.tokens.estimate_prompt_tokens counts.
    others = 2
    images = 0
    for i, message in enumerate(messages):
        others += 4 + (0 if i == last_user else _tokens(message_text(message)))
        images += _images(message)
    earlier = messages[:last_user] if last_user is not None else messages
    return _read_task(
        task,
        other_tokens=others,
        tools=_count(body.get("tools")) + _count(body.get("functions")),
        depth=sum(1 for m in earlier if m.get("role") != "system"),
        images=images,
    )


def _read_task(task: str, *, other_tokens: int, tools: int, depth: int, images: int) -> Features:
    cjk, han = _cjk(task)
    head, tail = _SCAN_HEAD, _SCAN_TAIL
    if cjk * 2 > len(task):
        head, tail = head // _CJK_CHARS_A_TOKEN, tail // _CJK_CHARS_A_TOKEN
    tokens = _estimate(task, cjk)
    if len(task) > head + tail:
        task = f"{task[:head]}\n{task[-tail:]}"
        han = _cjk(task)[1]
    words = _WORD.findall(task.lower())
    counts = Counter(words)
    joined = f" {' '.join(words)} "

    def lexicon(lex: _Lexicon) -> int:
        return lex.count(counts, joined, task, han > 0)

    def marks(patterns: tuple[re.Pattern[str], ...]) -> int:
        return sum(len(p.findall(task)) for p in patterns)

    zh_numbers = len(_ZH_NUMBER.findall(task)) if han else 0
    zh_steps = len(_ZH_STEP.findall(task)) if han else 0
    return Features(
        last_user_tokens=tokens,
        total_tokens=other_tokens + tokens,
        code_blocks=(len(_FENCE.findall(task)) + 1) // 2,
        identifiers=marks(_IDENTIFIER_MARKS),
        code_task=lexicon(_CODE_TASK),
        math=marks(_MATH_MARKS) + lexicon(_MATH_TERMS),
        numbers=len(_DIGITS.findall(task)) + lexicon(_NUMBER_WORDS) + zh_numbers,
        relations=lexicon(_RELATIONS),
        reasoning=lexicon(_REASONING),
        multi_step=lexicon(_MULTI_STEP) + len(_LIST_ITEM.findall(task)) + zh_steps,
        questions=task.count("?") + task.count("？"),  # noqa: RUF001
        constraints=lexicon(_CONSTRAINTS),
        statements=_statements(task, counts),
        simple=1 if _SIMPLE.match(task) else 0,
        tools=tools,
        depth=depth,
        images=images,
        language="zh" if han and han >= len(words) else ("en" if words else "other"),
    )


def _statements(task: str, counts: Counter[str]) -> int:
    """Distinct labelled claims (`Statement 1` twice is one)."""
    found: set[str] = set()
    if any(word in counts for word in _STATEMENT_WORDS):
        found.update(" ".join(m.lower().split()) for m in _LABELLED.findall(task))
    if "\n" in task or task[:1] in "iIV(":
        text = task if task.startswith("\n") else f"\n{task}"
        found.update(m.strip(" \t\n().").lower() for m in _NUMBERED_LINE.findall(text))
    if "(" in task:  # "(ii)" in a line and "(ii)" opening one are the same label
        found.update(m.strip("()").lower() for m in _BRACKETED.findall(task))
    if not task.isascii():
        found.update(_CIRCLED_OR_ZH.findall(task))
    return len(found)


def _last_user_index(messages: list[dict[str, Any]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


def _tokens(text: str) -> int:
    return _estimate(text, _cjk(text)[0])


def _estimate(text: str, cjk: int) -> int:
    """gateway.util.tokens.estimate_tokens, given the count of CJK characters in `text`."""
    if not text:
        return 0
    return cjk + max(1, (len(text) - cjk + 3) // 4)


def _cjk(text: str) -> tuple[int, int]:
    """(characters gateway.util.tokens counts one a token, Han characters), counted by numpy: a
    regular expression or a loop over the characters takes 10 to 50 times as long."""
    if text.isascii():  # O(1): CPython records it
        return 0, 0
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    cjk = ((points >= 0x3000) & (points <= 0x9FFF)) | ((points >= 0xAC00) & (points <= 0xD7AF))
    han = (points >= 0x4E00) & (points <= 0x9FFF)
    return int(np.count_nonzero(cjk)), int(np.count_nonzero(han))


def _images(message: dict[str, Any]) -> int:
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, dict) and p.get("type") in _IMAGE_PARTS)


def _count(value: object) -> int:
    return len(value) if isinstance(value, list) else 0
