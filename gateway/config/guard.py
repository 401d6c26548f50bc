"""The `guard:` section: tool-call validation and repair, agent-loop limits, context compression."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict

UndeclaredPolicy = Literal["repair", "strip", "allow"]


class ArgumentRule(Strict):
    """A business rule on one argument, narrower than the tool's JSON Schema."""

    pattern: str | None = Field(None, description="A regular expression strings must match.")
    minimum: float | None = None
    maximum: float | None = None
    enum: list[Any] | None = Field(None, description="Allowed values (narrower than the schema).")
    not_in_past: bool = Field(False, description="A date or date-time that must not be past.")

    @model_validator(mode="after")
    def _pattern_compiles(self) -> ArgumentRule:
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern is not a valid regular expression: {exc}") from None
        return self


class ToolRule(Strict):
    arguments: dict[str, ArgumentRule] = Field(
        default_factory=dict, description="By argument path: `amount`, `address.country`."
    )
    hook: str | None = Field(
        None,
        description="`package.module:function`, called with (tool name, arguments); returns a "
        "list of problems (empty: fine). For checks a schema cannot express.",
    )

    @model_validator(mode="after")
    def _hook_shape(self) -> ToolRule:
        if self.hook is not None and ":" not in self.hook:
            raise ValueError("hook must look like package.module:function")
        return self


class ToolLimits(Strict):
    """What one request may declare and spend on tool validation (docs/GUARDS.md, Limits).
    Declarations over a limit get a 400 before any upstream call; validation that runs out of
    time stops, and the answer says its calls were not checked."""

    max_tools: int = Field(128, ge=1, description="Tools one request may declare.")
    max_schema_bytes: int = Field(
        512 * 1024, ge=1024, description="The JSON of all the tools' parameters, in bytes."
    )
    max_patterns: int = Field(
        64, ge=0, description="`pattern` and `patternProperties` entries, all tools together."
    )
    max_alternatives: int = Field(64, ge=1, description="Branches of one `anyOf` or `oneOf`.")
    validation_ms: int = Field(
        250,
        ge=1,
        le=60_000,
        description="Time all validation of one request may take, repairs included (regular "
        "expressions, keywords, schema compilation); past it the calls pass unchecked.",
    )


class ToolGuardConfig(Strict):
    enabled: bool = True
    limits: ToolLimits = Field(default_factory=ToolLimits)
    clean: bool = Field(True, description="Deterministic cleaning before validation.")
    repair_attempts: int = Field(
        2, ge=0, le=5, description="Times an invalid call goes back to the model to be fixed."
    )
    on_failure: Literal["strip", "pass", "error"] = Field(
        "strip",
        description="When repair fails: strip the bad calls, pass them with a warning header, "
        "or answer with an error.",
    )
    undeclared_parameters: UndeclaredPolicy = Field(
        "repair",
        description="Arguments a tool's schema does not declare, where it does not say "
        "`additionalProperties` (most clients' schemas do not): repair (sent back to the model "
        "like other invalid calls; when that fails and on_failure is strip, the parameters are "
        "dropped if the rest is valid), strip (dropped at once), or allow (JSON Schema's "
        "reading: anything goes). `additionalProperties: false` is enforced either way.",
    )
    rules: dict[str, ToolRule] = Field(default_factory=dict, description="By tool name.")


class LoopGuardConfig(Strict):
    enabled: bool = True
    max_rounds: int = Field(10, ge=1, description="Tool-call rounds since the last user message.")
    max_identical_calls: int = Field(
        3, ge=2, description="The same tool with the same arguments, in a row."
    )
    max_tool_failures: int = Field(3, ge=2, description="The same tool failing, in a row.")
    max_stalled_rounds: int = Field(
        2, ge=1, description="Rounds whose call and result repeat the previous round's."
    )
    stall_similarity: float = Field(0.95, gt=0, le=1)
    pollable_tools: list[str] = Field(
        default_factory=list, description="Tools expected to repeat (status polls): exempt."
    )
    token_budget: int | None = Field(
        None, ge=1, description="Estimated tokens a conversation may hold in all."
    )
    action: Literal["finalize", "error"] = Field(
        "finalize",
        description="finalize: one more call with tools disabled, told to answer from what it "
        "has; error: a 400 that says which limit was hit.",
    )


class CompressionConfig(Strict):
    enabled: bool = False
    max_turns: int = Field(
        20, ge=4, description="Longer histories get their oldest turns summarized."
    )
    keep_turns: int = Field(8, ge=2, description="The most recent turns, always kept verbatim.")
    summarizer_model: str | None = Field(
        None, description="A configured chat model (a cheap one); default: the request's model."
    )
    shorten_tool_results: bool = Field(
        True, description="Shorten tool results older than the last two rounds."
    )
    tool_result_chars: int = Field(600, ge=100)
    summary_cache_entries: int = Field(1000, ge=1)

    @model_validator(mode="after")
    def _keep_fewer_than_max(self) -> CompressionConfig:
        if self.keep_turns >= self.max_turns:
            raise ValueError("keep_turns must be smaller than max_turns")
        return self


class GuardConfig(Strict):
    tools: ToolGuardConfig = Field(default_factory=ToolGuardConfig)
    loops: LoopGuardConfig = Field(default_factory=LoopGuardConfig)
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
