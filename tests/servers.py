"""Run real servers (the gateway, the fake upstream) on loopback sockets in a background thread.

A thread with its own event loop lets the synchronous OpenAI SDK and async clients alike talk
to the servers over real sockets from a test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web

from gateway.config import Settings, build_settings, parse_config
from gateway.observability.accesslog import AccessLog
from gateway.server.app import build_app
from gateway.testing.fake_upstream import FakeUpstream

T = TypeVar("T")


class ServerThread:
    """An event loop in a daemon thread; coroutines are run on it with `call`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class GatewayServer:
    """The real gateway application on a loopback port."""

    def __init__(self, settings: Settings, access_log: AccessLog | None = None) -> None:
        self.settings = settings
        self.app = build_app(settings, access_log)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> GatewayServer:
        self._runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()


# One attempt, no breaker trips, errors instead of level-4 answers: each test sees exactly what
# one upstream call did. tests/e2e/test_resilience.py covers the real defaults.
TEST_RESILIENCE = """
resilience:
  retry: {attempts: 1}
  breaker: {failures: 1000}
degradation:
  unavailable: {mode: error}
"""


def settings_for(
    fake_url: str, extra_yaml: str = "", environ: dict[str, str] | None = None
) -> Settings:
    """Settings with a `fake` provider at `fake_url` and a few public models on it."""
    text = f"""
server: {{max_body_bytes: 65536}}
providers:
  fake:
    type: openai
    base_url: {fake_url}
    api_key_env: FAKE_PROVIDER_KEY
    headers: {{X-Provider-Extra: from-config}}
    timeouts: {{connect: 2, read: 5, total: 10}}
  demo:
    type: demo
models:
  - {{name: fake-model, provider: fake, aliases: [fake-alias]}}
  - {{name: mapped, provider: fake, upstream_model: upstream-name}}
  - {{name: fake-embedding, provider: fake, kind: embedding}}
  - {{name: demo, provider: demo}}
  - {{name: demo-embedding, provider: demo, kind: embedding}}
{extra_yaml}
{"" if "resilience:" in extra_yaml else TEST_RESILIENCE}
"""
    env = {"FAKE_PROVIDER_KEY": "sk-fake-provider-secret-123", **(environ or {})}
    return build_settings(parse_config(text), "<test>", env)


async def start_fake() -> FakeUpstream:
    return await FakeUpstream().start()


Starter = Callable[[], Awaitable[Any]]
