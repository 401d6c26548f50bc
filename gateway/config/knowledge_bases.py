"""The `knowledge_bases:` section: where retrieval comes from and when an answer is grounded."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict
from gateway.config.resilience import BreakerConfig


class AttachConfig(Strict):
    """Which requests use this knowledge base (a header can still choose another, or none)."""

    models: list[str] = Field(default_factory=list, description="Model names or aliases.")
    tenants: list[str] = Field(default_factory=list)


class KnowledgeBaseConfig(Strict):
    type: Literal["embedded", "http"] = "embedded"
    path: str | None = Field(
        None,
        description="embedded: index directory, relative to this file (default data/kb/<name>).",
    )
    url: str | None = Field(None, description="http: the retriever endpoint (docs/KNOWLEDGE.md).")
    api_key_env: str | None = Field(None, description="http: variable with a bearer token.")
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(2.0, gt=0, le=60, description="Slower retrieval is level 3.")
    breaker: BreakerConfig = Field(
        default_factory=lambda: BreakerConfig(failures=3, reset_seconds=15)
    )
    top_k: int = Field(4, ge=1, le=50, description="Chunks asked for.")
    min_chunks: int = Field(1, ge=1, le=50, description="Level 1 needs this many chunks...")
    min_score: float = Field(0.35, ge=-1, le=1, description="...scoring at least this.")
    chunk_chars: int = Field(
        500, ge=100, le=20_000, description="embedded: chunk size (MiniLM reads ~500-700)."
    )
    overlap_chars: int = Field(80, ge=0, le=5_000, description="embedded: chunk overlap.")
    attach: AttachConfig = Field(default_factory=AttachConfig)

    @model_validator(mode="after")
    def _shape(self) -> KnowledgeBaseConfig:
        if self.type == "http" and not self.url:
            raise ValueError("an 'http' knowledge base needs url")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if self.overlap_chars >= self.chunk_chars:
            raise ValueError("overlap_chars must be smaller than chunk_chars")
        if self.min_chunks > self.top_k:
            raise ValueError("min_chunks cannot exceed top_k")
        return self
