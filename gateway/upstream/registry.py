"""Every configured provider, built once per settings, listed in one place, with what is known
of its health (probed at start and periodically: upstream/health.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.config import ProviderSettings, Settings
from gateway.errors import ProviderMisconfigured, UpstreamError
from gateway.upstream import health
from gateway.upstream.base import Provider
from gateway.upstream.demo import DemoProvider
from gateway.upstream.health import ProviderHealth
from gateway.upstream.openai_compat import OpenAICompatible

log = logging.getLogger(__name__)

ADAPTERS: dict[str, Callable[[ProviderSettings, list[str]], Provider]] = {
    "openai": OpenAICompatible,
    "demo": lambda settings, _secrets: DemoProvider(settings),
}


class Upstreams:
    """The providers the gateway can call, by config name. Owns their connection pools."""

    def __init__(self, settings: Settings) -> None:
        secrets = settings.secrets()
        self._providers: dict[str, Provider] = {
            name: ADAPTERS[p.type](p, secrets)
            for name, p in settings.providers.items()
            if p.disabled_reason is None
        }
        self.health: dict[str, ProviderHealth] = {n: health.unchecked() for n in self._providers}
        self._models = _upstream_models(settings)
        # (provider, code) of the configuration faults logged, until the provider answers
        self._reported: set[tuple[str, str | None]] = set()

    def get(self, name: str) -> Provider:
        try:
            return self._providers[name]
        except KeyError:
            raise UpstreamError(f"provider '{name}' is not available") from None

    def names(self) -> list[str]:
        return sorted(self._providers)

    def inherit(self, previous: Upstreams) -> None:
        """What the running config's providers learnt, kept for those a reload configures the
        same: whether each has answered (so a refused connection stays an outage, not a wrong
        address) and its last health probe."""
        for name, provider in self._providers.items():
            before = previous._providers.get(name)
            if before is not None and before.settings == provider.settings:
                provider.answered = before.answered
                self.health[name] = previous.health[name]

    def note_fault(self, err: ProviderMisconfigured) -> None:
        """Log a configuration fault at ERROR the first time it is seen (per provider and
        cause); the requests it fails are counted in the metrics, not logged one by one."""
        cause = (err.provider, err.code)
        if cause not in self._reported:
            self._reported.add(cause)
            log.error("%s", err.message)

    def note_answer(self, provider: str) -> None:
        """The provider answered: its faults, if they come back, are worth a new log line."""
        if self._reported:
            self._reported = {cause for cause in self._reported if cause[0] != provider}

    async def probe(self, name: str, *, confirm: bool = False) -> ProviderHealth:
        """Probe one provider now (upstream/health.py) and keep the result."""
        models = self._models.get(name, [])
        found = await health.probe(self._providers[name], models, confirm=confirm)
        self.health[name] = found
        if found.error is None:
            self.note_answer(name)
        elif isinstance(found.error, ProviderMisconfigured):  # logged as a request's would be
            self.note_fault(found.error)
        return found

    async def watch(self, interval: float) -> None:
        """Probe every provider now and then every `interval` seconds, until cancelled."""
        while True:
            found = await asyncio.gather(
                *(self.probe(name) for name in self._providers), return_exceptions=True
            )
            for name, outcome in zip(self._providers, found, strict=True):
                if isinstance(outcome, Exception):  # a bug, not a provider's fault: keep going
                    log.warning("health probe of provider %s failed: %r", name, outcome)
            await asyncio.sleep(interval)

    closed: bool = False

    async def close(self) -> None:
        for provider in self._providers.values():
            await provider.close()
        self.closed = True


def _upstream_models(settings: Settings) -> dict[str, list[tuple[str, str]]]:
    """Each provider's (upstream model name, kind) pairs, as the deployments name them."""
    models: dict[str, list[tuple[str, str]]] = {}
    for route in settings.routes.values():
        for deployment in route.deployments:
            named = models.setdefault(deployment.provider, [])
            if (deployment.upstream_model, route.kind) not in named:
                named.append((deployment.upstream_model, route.kind))
    return models
