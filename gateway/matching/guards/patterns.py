"""Precompiled regular expressions, and the lookup tables derived from the lexicons.

Compiled once at import so that extracting a text's features costs microseconds: numbers and
units after them, dates, negation (with the Chinese compounds that only look negative),
code identifiers by shape, English name tokens and sentence boundaries, the Chinese diff
units, the joiners under which two names may trade places, and the directional frames
("convert X to Y", "X比Y").
"""

from __future__ import annotations

import re

from gateway.matching.guards.lexicons import (
    _UNIT_SHORT,
    _UNITS,
    _ZH_DIGITS,
    _ZH_NUM_CHARS,
    _ZH_RELATIVE,
)


def _alternation(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_UNIT_OF = {spelling: canon for canon, spellings in _UNITS.items() for spelling in spellings}
# A unit right after a number: "5 km", "5km", "五公里", "3.5%", "20°C", "10 个月".
# The token right after a number: a word, a symbol or up to three CJK characters, looked up
# in _UNIT_OF ("5 km", "5km", "五公里", "3.5%", "20°C", "10 个月", "3 and half days" no).
_AFTER_RE = re.compile(r"\s?([a-z]+(?:/[a-z])?|°[cf]?|[%$€£¥₹]|[\u3400-\u9fff]{1,3})")
# Spellings that name a unit wherever they stand ("in miles", "多少公里").
_UNIT_WORDS = {
    u: c for u, c in _UNIT_OF.items() if u not in _UNIT_SHORT and u.isalpha() and u.isascii()
}
_ZH_UNIT_ANY_RE = re.compile(
    _alternation([u for u in _UNIT_OF if u not in _UNIT_SHORT and not u.isascii() and u.isalpha()])
)
_UNIT_SYMBOL_RE = re.compile(r"[%$€£¥₹]|°[cf]?")
_HOW_MANY_UNIT_RE = re.compile(
    r"\bhow (?:many|much|long)(?: \w+)? (seconds|minutes|hours|days|weeks|months|years)\b|"
    r"(?:多少|几)(?:个)?(秒|分钟|小时|天|周|星期|月|年)"
)
_CURRENCY_PREFIX_RE = re.compile(r"([$€£¥₹]|\brs\b\.?|\binr\b)\s?(?=\d)")
_SECOND_UNIT_RE = re.compile(r"(?<=\d)\s*seconds?\b|\b(?:a|one|per|split) seconds?\b")

_NUM_RE = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+(?![\d,])|\d+)((?:\.\d+)+)?")
_ZH_NUM_RE = re.compile(f"[{_ZH_NUM_CHARS}]+(?:点[{''.join(_ZH_DIGITS)}]+)?")
# Words that contain numeral characters without being numbers (十分 = very, 百度 = Baidu).
_ZH_NOT_NUMBER_RE = re.compile(
    "十分|千万(?![元人美亿])|万万|万一|百度|百科|百货|三星|一下|一些|一样|一起|一直|一般|一定|"
    "一切|统一|唯一|一旦|一致|之一|一会|一点(?![零一二三四五六七八九])|一边|一共|一次性|"
    "一口气|不一|第一时间|一手|二手|三亚|九寨|四川|万能|千万别|一路"
)
_ZH_PERCENT_RE = re.compile(f"百分之([{_ZH_NUM_CHARS}]+|\\d+(?:\\.\\d+)?)")
_WORD_RE = re.compile(r"[a-z]+|\d+")  # one pass over the casefolded text
_DIGIT_RE = re.compile(r"\d")

_YEAR_RE = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)")
_NUMERIC_DATE_RE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b|\b(\d{1,2})/(\d{1,2})/(\d{2,4})\b")
_ZH_NUM_OR_DIGITS = f"(?:\\d+|[{_ZH_NUM_CHARS}]+)"
_ZH_DATE_RE = re.compile(
    f"({_ZH_NUM_OR_DIGITS})年(?!级|代|龄|纪|轻|底|初|中|终|度|货|会|利|限|费|息)|"
    f"({_ZH_NUM_OR_DIGITS})月(?:份)?|({_ZH_NUM_OR_DIGITS})(?:日|号)|"
    "(?:周|星期|礼拜)([一二三四五六日天末])|"
    f"({_alternation(list(_ZH_RELATIVE))})"
)

_EN_NEG_RE = re.compile(r"n't\b")  # curly apostrophes are folded first
_EN_NOT_QUESTION_RE = re.compile(r"\bor not\b|\bor why not\b")
_ZH_A_NOT_A_RE = re.compile(r"([^还])[不没]\1|可不可以|了没有?(?=[?。,!\s]|$)")
# Compounds with a negation character that do not negate (非常 = very, 别人 = others).
_ZH_NOT_NEGATION_RE = re.compile(
    "不过|不错|不仅|不但|不久|不断|不少|不如|不管|不论|不然|差不多|不好意思|对不起|了不起|"
    "不得不|不一定|非常|非得|除非|是非|非洲|无论|否则|是否|能否|可否|与否|无聊|无线|无人机|无限|"
    "未来|未成年|别人|别的|特别|区别|分别|级别|类别|识别|告别|性别|个别|差别|辨别|鉴别|离别|"
    "莫名|没关系|不客气"
)
_ZH_NEG_CHARS = frozenset("不没沒无無未别勿莫非否")

# (cue characters, pattern): a pattern runs only when one of its cues is in the text.
# re.ASCII: a CJK character next to an identifier is a boundary ("getUserName方法").
_IDENT_RULES: list[tuple[str, re.Pattern[str]]] = [
    (cue, re.compile(pattern, re.ASCII))
    for cue, pattern in [
        ("`", r"`([^`\n]+)`"),
        ("(", r"(?<![\w.])([A-Za-z_][\w.]*)(?=\()"),  # a call: foo_bar(, os.path.join(
        ("_", r"\b([A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*(?:_\w+)+|_+[A-Za-z]\w*)\b"),  # snake_case
        # dotted names and file names: os.path, config.yaml, Node.js (not e.g. / U.S.)
        (".", r"(?<![\w.])([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+)(?![\w(-]|\.\w)"),
        (".", r"(?<![\w.])(\.[a-z][a-z0-9]{1,5})\b"),  # extensions: .py, .tar
        ("-", r"(?<![\w-])(--?[A-Za-z][\w-]*)"),  # command-line flags
        ("/", r"(?<!\S)((?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)*/?)"),  # paths
        ("$", r"(\$[A-Za-z_]\w*)"),  # environment variables
    ]
]
_INNER_CAPITAL_RE = re.compile(r"\b([A-Za-z]*[a-z][A-Z][A-Za-z0-9]*)\b", re.ASCII)  # getName
_MIN_INNER_CAPITAL = 4  # kW, mAh, iOS are units and names, not identifiers
_SHORT_DOTTED_RE = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]?$")  # e.g, i.e, U.S.A

_L = "A-Za-z\u00c0-\u024f"  # Latin letters, accented ones included
_TOKEN_RE = re.compile(f"[{_L}][{_L}0-9]*(?:['.&+#-][{_L}0-9]+)*[+#]*")
_SENTENCE_ENDS = frozenset('.?!:;"(\n\u201c\u3002')  # after NFKC
_CJK_RE = re.compile(r"[\u3400-\u9fff]")
_ASCII_LETTER_RE = re.compile(r"[A-Za-z]")
_UPPER_RE = re.compile(r"[A-Z]")
_ZH_DIFF_UNIT_RE = re.compile(r"[A-Za-z]+|[\u3400-\u9fff]")
# Joiners under which swapping two names keeps the meaning: "X and Y", "X vs Y", "X和Y".
_JOINER_RE = re.compile(
    r"\s*(?:,|&|/|、|和|与|跟|及|或者?|还是|and|or|vs\.?|versus)?\s*(?:the\s+)?"
)
# Directional frames: "convert X to Y", "from X to Y", "X better than Y", "X比Y", "X换成Y".
_EN_DIRECTION_CUE_RE = re.compile(
    r"\b(?:convert\w*|translat\w*|transform\w*|switch\w*|migrat\w*|mov\w*|transfer\w*|"
    r"chang\w*|from|fly|flights?|drive|travel\w*)\b"
)
_EN_DIRECTION_RE = re.compile(r"\b(than|into|to)\b")
_ZH_DIRECTION_RE = re.compile(
    r"(?<!对)比(?!较|赛|例|如|分|率)|换成|转成|变成|翻译成|转换成|转为|到"
)
_DIRECTION_WINDOW = 3
_LIST_WORDS = frozenset({"and", "or", "&", "vs", "versus"})
_NAME_PREPOSITIONS = frozenset({"in", "at", "near", "from", "to", "of", "into", "visit"})
