"""A local token estimator, for accounting when an upstream reports no usage.

No tokenizer download: about four characters a token for Latin text, one a token for CJK,
which is close enough for budgets and cost estimates.
"""

from __future__ import annotations

from typing import Any


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    cjk = sum(1 for ch in text if "\u3000" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af")
    return cjk + max(1, (len(text) - cjk + 3) // 4)


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message, whether its content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (part.get("text") for part in content if isinstance(part, dict))
        return "\n".join(text for text in texts if isinstance(text, str))
    return ""


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    # 4 tokens of framing per message, as OpenAI's chat format costs.
    return sum(4 + estimate_tokens(message_text(m)) for m in messages) + 2
