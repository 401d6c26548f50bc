"""The `degradation:` section: what the client receives when retrieval or every model is
unavailable (the disclaimer of levels 2 and 3, the level 4 message)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict


def _messages(en: str, zh: str) -> dict[str, str]:
    return {"en": en, "zh": zh}


class UnavailableConfig(Strict):
    """Level 4: every model in the chain is down or open."""

    mode: Literal["answer", "error"] = Field(
        "answer", description="answer: a normal completion saying so; error: an HTTP 503."
    )
    message: dict[str, str] = Field(
        default_factory=lambda: _messages(
            "The assistant is temporarily unavailable. Please retry in a little while.",
            "助手暂时无法使用，请稍后重试。",  # noqa: RUF001
        ),
        description="By language of the user's message ('en' is the default, 'zh' for CJK).",
    )
    retry_after_seconds: int = Field(30, ge=1, le=3600)

    @model_validator(mode="after")
    def _has_english(self) -> UnavailableConfig:
        if "en" not in self.message:
            raise ValueError("message needs an 'en' entry (the default language)")
        return self


class DegradationConfig(Strict):
    disclaimer: dict[str, str] = Field(
        default_factory=lambda: _messages(
            "The following answer is based on general knowledge, not your documents.",
            "以下回答基于通用知识，而非您的文档。",  # noqa: RUF001
        ),
        description="Levels 2 and 3: the answer begins with this, by language.",
    )
    unavailable: UnavailableConfig = Field(default_factory=UnavailableConfig)

    @model_validator(mode="after")
    def _has_english(self) -> DegradationConfig:
        if "en" not in self.disclaimer:
            raise ValueError("disclaimer needs an 'en' entry (the default language)")
        return self
