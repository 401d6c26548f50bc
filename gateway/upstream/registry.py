"""Every configured provider, built once per settings, listed in one place."""

from __future__ import annotations

from collections.abc import Callable

from gateway.config import ProviderSettings, Settings
from gateway.errors import UpstreamError
from gateway.upstream.base import Provider
from gateway.upstream.demo import DemoProvider
from gateway.upstream.openai_compat import OpenAICompatible

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

    def get(self, name: str) -> Provider:
        try:
            return self._providers[name]
        except KeyError:
            raise UpstreamError(f"provider '{name}' is not available") from None

    def names(self) -> list[str]:
        return sorted(self._providers)

    closed: bool = False

    async def close(self) -> None:
        for provider in self._providers.values():
            await provider.close()
        self.closed = True
