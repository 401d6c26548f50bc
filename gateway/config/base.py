"""The base every config-file model shares: unknown fields are errors, values are frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EntryProblem(ValueError):
    """A check across fields that knows which entry is wrong (a model naming an unknown
    provider, a tier naming an unknown model): `loc` is that entry's path below the model
    that raised, so the loader reports the entry's own line, not the section's."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        self.loc = loc
        super().__init__(message)
