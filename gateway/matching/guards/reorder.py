"""How one sequence of words became another with the same words: a move, a swap, or more.

Two questions with the same words in another order ask the same thing when a phrase only
moved ("In Python, how do I read a CSV?" / "How do I read a CSV in Python?": a rotation),
and something else when two pieces traded places across what stays between them ("the
teacher grades the student" / "the student grades the teacher", "老师给学生" / "学生给老师").
Shared by the English alignment and the Chinese comparison.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal, TypeVar

MAX_MIDDLE = 48  # items in the reordered middle: the search is cubic in it

Kind = Literal["same", "move", "swap", "shuffle"]
T = TypeVar("T", bound=Hashable)


def reordering(xs: Sequence[T], ys: Sequence[T]) -> tuple[Kind, list[T]]:
    """Classify `ys` as a reordering of `xs` (same items). For a swap, also the items that
    stay between the two pieces, so the caller can tell a joiner ("Java and Python")."""
    if list(xs) == list(ys):
        return "same", []
    start = 0
    while xs[start] == ys[start]:
        start += 1
    end = 0
    while xs[-1 - end] == ys[-1 - end]:
        end += 1
    # A word that repeats ("the vice president overrules the president") can make the common
    # ends look longer than they are: try giving a few back before calling it a move.
    found: tuple[Kind, list[T]] = ("shuffle", [])
    for back in range(min(end, 3) + 1):
        kind, between = _middle(xs[start : len(xs) - end + back], ys[start : len(ys) - end + back])
        if kind == "swap":
            return kind, between
        if back == 0:
            found = (kind, between)
    return found


def _middle(mx: Sequence[T], my: Sequence[T]) -> tuple[Kind, list[T]]:
    mx, my = list(mx), list(my)
    n = len(mx)
    if n > MAX_MIDDLE:
        return "shuffle", []
    for lx in range(1, n):
        for ly in range(1, n - lx + 1):
            x, between, y = mx[:lx], mx[lx : n - ly], mx[n - ly :]
            if my == y + between + x:
                return ("swap" if between else "move"), between
    return "shuffle", []
