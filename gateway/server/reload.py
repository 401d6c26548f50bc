"""Live reload: a changed config file or policy file (polled), SIGHUP or `POST /admin/reload`
builds a new Runtime and swaps it in; a bad edit never replaces the running config.

    read + validate everything  -> invalid: keep running as is, log, count it
    build the new Runtime, start it -> swap the reference (new requests use it)
    close the old Runtime once the requests that started on it have finished

The cache and the circuit breakers belong to the process and carry over (breaker thresholds
are updated in place); changes to the cache's store or embedder, and to `responses:` (the
response store is the process's too), need a restart, and say so.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gateway.cache.factory import cache_wanted
from gateway.cache.service import SemanticCache
from gateway.config import ConfigError, Settings, load_settings
from gateway.config.environment import unset_variables
from gateway.config.loading import policy_files
from gateway.resilience.breaker import Breakers
from gateway.server.exposure import open_to_anyone
from gateway.server.runtime import Runtime, RuntimeRef

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
        self._digest = _digest(ref.current.settings)
        self._running = self._digest  # the files the running config was read from
        self._closing: set[asyncio.Task[None]] = set()
        # The address `gateway serve` listens on when other machines reach it (server/exposure.py):
        # there, a config without keys needs auth.anonymous, at a reload as at the start.
        self.public_host: str | None = None

    @property
    def path(self) -> Path:
        return Path(self.ref.current.settings.source)

    async def watch(self) -> None:
        """Poll the config and policy files; reload when their content changes."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            if await asyncio.to_thread(_digest, self.ref.current.settings) != self._digest:
                await self.reload()

    async def reload(self) -> ReloadOutcome:
        async with self._lock:
            outcome = await self._reload()
        if self._on_result is not None:
            self._on_result(outcome.result)
        return outcome

    async def _reload(self) -> ReloadOutcome:
        path = self.path
        digest = _digest(self.ref.current.settings)
        try:
            settings = await asyncio.to_thread(load_settings, path)
        except ConfigError as err:
            return self._refuse(digest, path, str(err), tuple(err.problems))
        if self.public_host is not None:
            problem = open_to_anyone(settings.file.auth, self.public_host)
            if problem:
                return self._refuse(digest, path, problem, (problem,))
        if _same(settings, self.ref.current.settings):
            self._digest = self._running = _digest(settings)
            return ReloadOutcome("unchanged", str(path))
        old = self.ref.current
        _warn_about_restart_only_changes(old.settings, settings)
        if self.cache is None and cache_wanted(settings):
            log.warning("the cache was off at start: turning it on takes effect at a restart")
        try:
            self.breakers.configure(
                settings.resilience.breaker, settings.file.shared_redis().target("breakers")
            )
            new = Runtime.build(settings, self.breakers, self.cache)
            new.upstreams.inherit(old.upstreams)
            await new.start()
        except Exception as exc:  # a config that validates but cannot run
            log.exception("config reload failed, still running the previous config")
            return ReloadOutcome("failed", str(path), (f"{type(exc).__name__}: {exc}",))
        self.ref.current = new
        before, self._digest = self._running, _digest(settings)
        self._running = self._digest
        task = asyncio.get_running_loop().create_task(_close_when_idle(old))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        log.warning("config reloaded from %s%s", path, _changed(before, self._digest, path))
        _warn_about_new_unset_variables(old.settings, settings)
        return ReloadOutcome("reloaded", str(path))

    def _refuse(
        self, digest: Digest, path: Path, why: str, problems: tuple[str, ...]
    ) -> ReloadOutcome:
        """An edit that cannot run: logged, the running config kept, and its content not read
        again every second until it changes."""
        self._digest = digest
        log.error(
            "config reload refused%s, still running the previous config: %s",
            _changed(self._running, digest, path),
            why,
        )
        return ReloadOutcome("invalid", str(path), problems)

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


Digest = dict[str, str]  # each watched file -> a hash of its content ("missing": unreadable)


def _digest(settings: Settings) -> Digest:
    """Of the config file and every policy file of the directory it names, file by file (a
    file added, removed or edited changes it, and says which)."""
    path = Path(settings.source)
    found = {}
    for file in (path, *policy_files(path, settings.file)):
        try:
            found[str(file)] = hashlib.sha256(file.read_bytes()).hexdigest()
        except OSError:
            found[str(file)] = "missing"
    return found


def _changed(before: Digest, after: Digest, config: Path) -> str:
    """' (FILE edited, FILE added, ...)': the files whose content differs from what the running
    config was read from, named relative to the config's directory; '' when none does (a
    SIGHUP or POST /admin/reload with nothing edited)."""
    changes = []
    for file in sorted(before.keys() | after.keys()):
        was, now = before.get(file, "missing"), after.get(file, "missing")
        if was != now:
            what = "added" if was == "missing" else "removed" if now == "missing" else "edited"
            changes.append(f"{_shown(Path(file), config)} {what}")
    return f" ({', '.join(changes)})" if changes else ""


def _shown(file: Path, config: Path) -> str:
    base = Path(os.path.abspath(config)).parent
    absolute = Path(os.path.abspath(file))
    return str(absolute.relative_to(base)) if absolute.is_relative_to(base) else str(file)


def _same(a: Settings, b: Settings) -> bool:
    mine = [(p.name, p.match, p.overlay) for p in a.policies.policies]
    theirs = [(p.name, p.match, p.overlay) for p in b.policies.policies]
    return a.file == b.file and mine == theirs


def _warn_about_new_unset_variables(old: Settings, new: Settings) -> None:
    """An edit that names a variable nobody set (a new tenant's key) is said at once, as
    `gateway serve` says those at start: otherwise that tenant just gets 401s."""
    before = {(v.name, v.where) for v in unset_variables(old.file)}
    for variable in unset_variables(new.file):
        if (variable.name, variable.where) not in before:
            level = logging.WARNING if variable.serious else logging.INFO
            log.log(level, "  %s", variable.describe())


def _warn_about_restart_only_changes(old: Settings, new: Settings) -> None:
    was, now = old.file.shared_redis(), new.file.shared_redis()
    if (
        old.file.cache.store != new.file.cache.store
        or old.file.cache.embedder != new.file.cache.embedder
        or was.target("cache") != now.target("cache")
    ):
        log.warning(
            "cache store (or its redis) or embedder changes take effect at the next restart"
        )
    if old.file.rate_limits.storage != new.file.rate_limits.storage or (
        was.target("rate_limits") != now.target("rate_limits")
    ):
        log.warning("rate_limits.storage (or its redis) changes take effect at the next restart")
    if old.file.responses != new.file.responses or (
        was.target("responses") != now.target("responses")
    ):
        log.warning("responses (its store, redis or ttl) changes take effect at the next restart")
    if old.server != new.server:
        log.warning("server settings (host, port, ...) take effect at the next restart")
