"""The `redis:` section: the one Redis that replicas share state through, and where each part
that shares (the cache store, the circuit breakers, the rate limits, stored responses) keeps
its keys in it.

A part only says whether it shares (`type: redis`); the server and the key prefix are set once
here, so several replicas (and the three parts) cannot point at different servers by mistake.
The per-part `url` and `namespace` of earlier versions are still read, with a warning naming
the setting that replaces them, as long as they agree: two different URLs, or a part's
namespace that differs from what an explicit `redis.namespace` gives that part, are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from pydantic import Field, field_validator, model_validator
from pydantic.config import JsonDict

from gateway.config.base import EntryProblem, Strict

DEFAULT_URL = "redis://127.0.0.1:6379/0"
SCHEMES = ("redis://", "rediss://", "unix://")
# Marks the per-part fields that moved here, in the JSON Schema (editors strike them through).
MOVED: JsonDict = {"deprecated": True}


def check_url(url: str) -> str:
    if not url.startswith(SCHEMES):
        raise ValueError("url must start with redis://, rediss:// or unix://")
    return url


class RedisConfig(Strict):
    url: str = Field(
        DEFAULT_URL,
        description="The server every part with `type: redis` keeps its shared state in "
        "(one connection pool per process for each timeout a part needs).",
    )
    namespace: str = Field(
        "gateway",
        min_length=1,
        max_length=64,
        description="Prefix of every key: breakers and rate limits use it as it is, the cache "
        "`<namespace>:cache`, stored responses `<namespace>:responses`. Replicas of one "
        "deployment share it; another deployment on the same server takes another.",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return check_url(url)


class StorageSection(Strict):
    """What every part's storage section (cache.store, resilience.breaker_storage,
    rate_limits.storage) has: its `type`, the part's own choice (`redis` shares), and the two
    fields that moved to `redis:`, still read (with a warning) so that older configs load."""

    type: str
    url: str | None = Field(None, description="Moved: redis.url.", json_schema_extra=MOVED)
    namespace: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Moved: redis.namespace.",
        json_schema_extra=MOVED,
    )

    @property
    def shared(self) -> bool:
        return self.type == "redis"

    @model_validator(mode="after")
    def _moved_url(self) -> Self:
        if self.shared and self.url is not None:
            check_url(self.url)
        return self

    def as_written(self, path: str, suffix: str = "") -> PartStorage:
        """This section for `resolve`: `path` is where it is, `suffix` its keys' below
        redis.namespace."""
        return PartStorage(path, self.shared, suffix, self.url, self.namespace)


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where one part keeps its shared state: the server, and the prefix of its keys."""

    url: str
    namespace: str


@dataclass(frozen=True, slots=True)
class PartStorage:
    """One part's storage section as written: whether it shares, and the fields that moved
    here (None: not written, as it should be)."""

    path: str  # where the section is in config.yaml: "cache.store"
    shared: bool
    suffix: str  # the part's keys below redis.namespace: "" (as it is) or ":cache"
    url: str | None = None
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class SharedRedis:
    """What the parts that share state use, resolved from config.yaml once per (re)load."""

    targets: Mapping[str, RedisTarget]  # component ("cache", ...) -> where; sharing parts only
    moved: tuple[str, ...]  # one warning per moved field still written at its old place

    def target(self, component: str) -> RedisTarget | None:
        """Where `component` keeps its shared state; None: it keeps it in this process."""
        return self.targets.get(component)


def resolve(redis: RedisConfig, written: set[str], parts: Mapping[str, PartStorage]) -> SharedRedis:
    """Each sharing part's server and prefix. `written`: the fields of `redis:` the file sets.
    Raises ValueError naming the setting to keep when old per-part fields disagree with it or
    with each other (a URL's value is never quoted: it may hold a password)."""
    urls = {"redis.url": redis.url} if "url" in written else {}
    urls |= {f"{p.path}.url": p.url for p in parts.values() if p.shared and p.url is not None}
    if len(set(urls.values())) > 1:
        raise EntryProblem(
            _loc(list(urls)[-1]),
            f"{' and '.join(urls)} name different servers: replicas and their parts share one "
            "Redis, set once as redis.url (remove the per-part url)",
        )
    url = next(iter(urls.values()), redis.url)
    targets: dict[str, RedisTarget] = {}
    for component, part in parts.items():
        if not part.shared:
            continue
        namespace = redis.namespace + part.suffix
        if part.namespace is not None:
            if "namespace" in written and part.namespace != namespace:
                raise EntryProblem(
                    _loc(f"{part.path}.namespace"),
                    f"{part.path}.namespace {part.namespace!r} disagrees with redis.namespace "
                    f"{redis.namespace!r} (which puts this part's keys under {namespace!r}): "
                    "keep redis.namespace only",
                )
            namespace = part.namespace  # the keys stay where this deployment has them
        targets[component] = RedisTarget(url, namespace)
    return SharedRedis(targets, tuple(_moved(parts)))


def _loc(dotted: str) -> tuple[str, ...]:
    """A setting's path ("cache.store.url") as EntryProblem's loc, to report its line."""
    return tuple(dotted.split("."))


def _moved(parts: Mapping[str, PartStorage]) -> list[str]:
    warnings = []
    for part in parts.values():
        for name, value in (("url", part.url), ("namespace", part.namespace)):
            if value is None:
                continue
            unused = "" if part.shared else " (ignored here: this part does not use Redis)"
            warnings.append(
                f"{part.path}.{name} is deprecated{unused}: set redis.{name} once, for every "
                "part that shares state (docs/DEPLOY.md)"
            )
    return warnings
