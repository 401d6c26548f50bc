"""Is a secret's value a placeholder? What templates, examples and docs put where a real key
goes, so that a deployment whose Secret was never filled in refuses to start instead of
sending `replace-me` to a provider or letting anyone in with a key printed in the docs.

The rules, case-insensitive, on the value without surrounding whitespace (an empty value is
"unset", as everywhere else in the config):

- blank: only whitespace;
- a fill-me-in word, separators (`-`, `_`, `.`, spaces) ignored: replace-me, change-me,
  changeit, change-this, fill-me, todo, fixme, tbd, placeholder, dummy, example, sample,
  secret, password, api-key, key, token, none, null, nil, undefined, unset, not-set, redacted;
- an instruction: starting with your, my, insert, enter, paste or put and naming a key, token,
  secret or password (your-api-key, YOUR_OPENAI_API_KEY, insert-token-here); replace, change
  or fill followed by with, in, me, it or this (replace-with-your-key, change_this); or ending
  in a separate "here" (key-goes-here);
- a template left unfilled: <your key>, ${OPENAI_API_KEY}, $OPENAI_API_KEY, {{ .Values.key }},
  %API_KEY%;
- an elided example: contains `...` or `…` (sk-..., sk-proj-...);
- one character repeated: alone (three or more: xxx, ****, 0000), after a prefix of one or
  two short words (sk-xxxxxxxx, sk-proj-XXXX-XXXX), or eight in a row anywhere
  (AKIAXXXXXXXXXXXXXXXX, sk-abc********); or such a prefix alone (sk-).

Real keys are long random strings and match none of these; tests/config/test_placeholders.py
holds the examples on both sides.
"""

from __future__ import annotations

import re

WORDS = frozenset(
    {
        "replaceme",
        "changeme",
        "changeit",
        "changethis",
        "fillme",
        "todo",
        "fixme",
        "tbd",
        "placeholder",
        "dummy",
        "example",
        "sample",
        "secret",
        "password",
        "apikey",
        "key",
        "token",
        "none",
        "null",
        "nil",
        "undefined",
        "unset",
        "notset",
        "redacted",
    }
)
_SEPARATORS = re.compile(r"[-_.\s]+")
_INSTRUCTION = re.compile(
    r"^(?:(?:your|insert|enter|paste|put)[-_\s]?|my[-_\s]).*(?:key|token|secret|password)"
    r"|^(?:replace|change|fill)[-_\s]?(?:with|in|me|it|this)(?:[-_\s]|$)"
    r"|[-_\s]here$",
    re.I,
)
_TEMPLATE = re.compile(
    r"^(<.*>|\$\{.*\}|\$[a-z_][a-z0-9_]*|\{\{.*\}\}|%[a-z_][a-z0-9_]*%)$", re.I | re.S
)
_PREFIX = re.compile(r"^(?:[a-z]{1,8}[-_]){1,2}", re.I)  # sk-, sk-proj-, gsk_
_RUN = re.compile(r"(.)\1{7}")  # eight of one character in a row


def placeholder(value: str) -> str | None:
    """Which kind of placeholder `value` is (for the message: the value itself is never
    shown), or None for a value that may be a real secret, or an empty (unset) one."""
    text = value.strip()
    if not value:
        return None
    if not text:
        return "blank"
    if _SEPARATORS.sub("", text).lower() in WORDS or _INSTRUCTION.search(text):
        return "a fill-me-in text"
    if _TEMPLATE.match(text):
        return "a template left unfilled"
    if "..." in text or "\u2026" in text:
        return "an elided example"
    return _repeated(text)


def _repeated(text: str) -> str | None:
    if _RUN.search(text.lower()):
        return "one character repeated"
    rest = _PREFIX.sub("", text)
    characters = set(_SEPARATORS.sub("", rest).lower())
    if rest != text and not characters:
        return "a key prefix alone"
    if len(characters) == 1 and len(rest) >= 3:
        return "one character repeated"
    return None
