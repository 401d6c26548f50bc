"""Live reload: a changed config file (polled), SIGHUP or `POST /admin/reload` builds a new
Runtime and swaps it in; a bad edit never replaces the running config.

    read + validate everything  -> invalid: keep running as is, log, count it
    build the new Runtime, start it -> swap the reference (new requests use it)
    close the old Runtime once the requests that started on it have finished

The cache and the circuit breakers belong to the process and carry over (breaker thresholds
are updated in place); changes to the cache's store or embedder need a restart, and say so.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gateway.cache.service import SemanticCache
from gateway.config import ConfigError, Settings, load_settings
from gateway.resilience.breaker import Breakers
from gateway.runtime import Runtime, RuntimeRef

log = logging.getLogger("gateway.reload")
Result = Literal["reloaded", "unchanged", "invalid", "failed"]
POLL_SECONDS = 1.0
DRAIN_SECONDS = 600.0  # the longest an old runtime waits for its requests before closing


@dataclass(frozen=True, slots=True)
class ReloadOutcome:
    result: Result
    source: str
    problems: tuple[str, ...] = ()


class Reloader:
    def __init__(
        self,
        ref: RuntimeRef,
        breakers: Breakers,
        cache: SemanticCache | None,
        on_result: Callable[[Result], None] | None = None,
    ) -> None:
        self.ref = ref
        self.breakers = breakers
        self.cache = cache
        self._on_result = on_result
        self._lock = asyncio.Lock()
        self._digest = _digest(Path(ref.current.settings.source))
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def path(self) -> Path:
        return Path(self.ref.current.settings.source)

    async def watch(self) -> None:
        """Poll the config file; reload when its content changes."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            if _digest(self.path) not in (self._digest, None):
                await self.reload()

    async def reload(self) -> ReloadOutcome:
        async with self._lock:
            outcome = await self._reload()
        if self._on_result is not None:
            self._on_result(outcome.result)
        return outcome

    async def _reload(self) -> ReloadOutcome:
        path = self.path
        digest = _digest(path)
        try:
            settings = await asyncio.to_thread(load_settings, path)
        except ConfigError as err:
            self._digest = digest  # do not retry the same bad content every second
            log.error("config reload refused, still running the previous config: %s", err)
            return ReloadOutcome("invalid", str(path), tuple(err.problems))
        if digest == self._digest and settings.file == self.ref.current.settings.file:
            return ReloadOutcome("unchanged", str(path))
        old = self.ref.current
        _warn_about_restart_only_changes(old.settings, settings)
        try:
            self.breakers.configure(
                settings.resilience.breaker, settings.resilience.breaker_storage
            )
            new = Runtime.build(settings, self.breakers, self.cache)
            await new.start()
        except Exception as exc:  # a config that validates but cannot run
            log.exception("config reload failed, still running the previous config")
            return ReloadOutcome("failed", str(path), (f"{type(exc).__name__}: {exc}",))
        self.ref.current = new
        self._digest = digest
        task = asyncio.get_running_loop().create_task(_close_when_idle(old))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        log.warning("config reloaded from %s", path)
        return ReloadOutcome("reloaded", str(path))

    async def close(self) -> None:
        for task in list(self._closing):
            await task


async def _close_when_idle(runtime: Runtime) -> None:
    """Requests that started on the old runtime finish on it; then its pools close."""
    try:
        await asyncio.wait_for(runtime.idle(), DRAIN_SECONDS)
    except TimeoutError:
        log.warning("closing a replaced runtime with requests still running on it")
    await runtime.close()


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _warn_about_restart_only_changes(old: Settings, new: Settings) -> None:
    if old.file.cache.store != new.file.cache.store or (
        old.file.cache.embedder != new.file.cache.embedder
    ):
        log.warning("cache store or embedder changes take effect at the next restart")
    if old.server != new.server:
        log.warning("server settings (host, port, ...) take effect at the next restart")
