"""The gateway with its semantic cache on, as the benchmarks run it: one model in front of an
upstream with `cache: {enabled: true}`, the default embedder, a SQLite store in the workdir,
started and waited for until /readyz says the semantic tier is on; then filled with questions
(waiting until their background stores have landed), probed for which rewordings of them it
serves as semantic hits, and emptied again (a semantic lookup searches every entry, so a
benchmark starts each round from the same cache). Which tier answered is the
`x-gateway-cache` response header.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.gateways import embedder_loaded
from gateway.testing.harness.load import Outcome, Request, send
from gateway.testing.harness.process import Server
from gateway.testing.harness.starters import REPO_ROOT, start_gateway
from gateway.testing.harness.stats import median
from gateway.testing.harness.sync_http import get_json, post_json

ADMIN_KEY = "bench-admin-key"  # opens /admin/cache/stats: how many entries have landed
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
CACHE_HEADER = "x-gateway-cache"

BodyFor = Callable[[str], bytes]  # a question's text -> the chat request's body


def cached_config(upstream: str, model: str, store: Path, verify: Json | None = None) -> Json:
    """`model` on an `openai` provider at `upstream` (a base URL ending in /v1), cache on
    (`verify`: the model's cache verification, docs/CACHE.md)."""
    cache: Json = {"enabled": True, **({"verify": verify} if verify else {})}
    return {
        "server": {"host": "127.0.0.1", "port": 0},
        "providers": {"fake": {"type": "openai", "base_url": upstream}},
        "models": [{"name": model, "provider": "fake", "cache": cache}],
        "cache": {"store": {"type": "sqlite", "path": str(store)}},
    }


def start_cached_gateway(
    workdir: Path,
    upstream: str,
    model: str,
    *,
    name: str = "gateway-cache",
    root: Path = REPO_ROOT,
    timeout: float = 180.0,
    verify: Json | None = None,
) -> Server:
    """The gateway process with the cache on, once its semantic tier is."""
    config = cached_config(upstream, model, workdir / f"{name}.sqlite3", verify)
    server = start_gateway(
        workdir,
        write_config(workdir, config, name=f"{name}.yaml"),
        name=name,
        env={"GATEWAY_ADMIN_KEY": ADMIN_KEY},
        root=root,
    )
    try:
        return embedder_loaded(server, timeout)
    except BaseException:
        server.stop()
        raise


def cache_header(outcome: Outcome) -> str | None:
    return outcome.headers.get(CACHE_HEADER)


def cache_entries(base: str) -> int:
    return int(get_json(base + "/admin/cache/stats", ADMIN)["entries"])


def purge(base: str) -> int:
    """Empty the cache (pending stores land first); how many entries went."""
    return int(post_json(base + "/admin/cache/purge", {}, ADMIN)["purged"])


async def ask(session: aiohttp.ClientSession, url: str, body: bytes) -> Outcome:
    return await send(session, Request(url, body))


async def fill(
    session: aiohttp.ClientSession, base: str, texts: Sequence[str], body_for: BodyFor
) -> int:
    """Ask each question once (all must be misses) and wait until they are stored; the number
    of entries then."""
    url = base + "/v1/chat/completions"
    headers = [cache_header(await ask(session, url, body_for(t))) for t in texts]
    if headers.count("miss") != len(texts):
        raise RuntimeError(f"fill: expected only misses, got {Counter(map(str, headers))}")
    # Stores run in the background after each answer.
    deadline = time.monotonic() + 30
    while cache_entries(base) < len(texts) and time.monotonic() < deadline:
        time.sleep(0.1)
    return cache_entries(base)


@dataclass
class Rewordings:
    """What one pass over rewordings of stored questions was answered with."""

    hits: list[str] = field(default_factory=list)  # served as hit-semantic
    similarity: list[float] = field(default_factory=list)  # of each hit
    others: Counter[str] = field(default_factory=Counter)  # every other header, counted

    def line(self, asked: int) -> str:
        low = min(self.similarity, default=math.nan)
        return (
            f"rewordings served as hit-semantic: {len(self.hits)} of {asked} (similarity min "
            f"{low:.3f}, median {median(self.similarity):.3f}); others: {dict(self.others)}"
        )


async def semantic_hits(
    session: aiohttp.ClientSession, base: str, texts: Sequence[str], body_for: BodyFor
) -> Rewordings:
    """Ask each rewording once: those served as semantic hits are a benchmark's hit input."""
    url = base + "/v1/chat/completions"
    seen = Rewordings()
    for text in texts:
        answer = await ask(session, url, body_for(text))
        if cache_header(answer) == "hit-semantic":
            seen.hits.append(text)
            seen.similarity.append(float(answer.headers["x-gateway-cache-similarity"]))
        else:
            seen.others[str(cache_header(answer))] += 1
    return seen
