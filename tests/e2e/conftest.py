"""Fixtures of the end-to-end suites: SDK clients of both kinds, and extra gateways whose
settings differ from the shared one (API keys, a short read timeout, an unreachable
provider), and one on the shipped config.yaml."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gateway.http.keys import RUNTIME_REF
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import settings_for, settings_of
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.testing.harness.process import free_port
from tests.e2e.helpers import poll_until, reconfigure_provider, shipped_config_apart
from tests.e2e.sdk import Sdk, make_sdk

GATEWAY_KEY = "sk-gw-team-a-0123456789"
GATEWAY_KEY_ENV = "E2E_GATEWAY_KEY_TEAM_A"
KEYED = {"auth": {"keys": [{"env": GATEWAY_KEY_ENV, "tenant": "team-a"}]}}
SHORT_READ_TIMEOUT = 0.5

SdkFactory = Callable[..., Sdk]


@pytest.fixture(params=["sync", "async"])
def sdk_factory(request: pytest.FixtureRequest) -> Iterator[SdkFactory]:
    """Makes SDK clients of this test's kind (`openai.OpenAI` or `openai.AsyncOpenAI`)."""
    made: list[Sdk] = []

    def factory(base_url: str, api_key: str = "client-key", timeout: float = 10.0) -> Sdk:
        made.append(make_sdk(request.param, base_url, api_key, timeout))
        return made[-1]

    yield factory
    for sdk in made:
        sdk.close()


@pytest.fixture
def sdk(sdk_factory: SdkFactory, gw: GatewayServer) -> Sdk:
    """An SDK client of the shared anonymous gateway."""
    return sdk_factory(gw.url)


@pytest.fixture(scope="session")
def keyed_gateway(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    """A gateway that requires an API key (one key, tenant team-a)."""
    settings = settings_for(fake.url, KEYED, {GATEWAY_KEY_ENV: GATEWAY_KEY})
    assert not settings.anonymous
    with running_gateway(server_thread, settings) as server:
        yield server


@pytest.fixture(scope="session")
def short_timeout_gateway(
    server_thread: ServerThread, fake: FakeUpstream
) -> Iterator[GatewayServer]:
    """A gateway whose fake provider gives up after SHORT_READ_TIMEOUT seconds of silence."""
    settings = reconfigure_provider(
        settings_for(fake.url),
        "fake",
        timeouts={"connect": 2, "read": SHORT_READ_TIMEOUT, "total": 10},
    )
    with running_gateway(server_thread, settings) as server:
        yield server


@pytest.fixture(scope="session")
def unreachable_gateway(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    """A gateway whose fake provider points at a closed port."""
    settings = reconfigure_provider(
        settings_for(fake.url), "fake", base_url=f"http://127.0.0.1:{free_port()}/v1"
    )
    with running_gateway(server_thread, settings) as server:
        yield server


@pytest.fixture(scope="session")
def shipped_gateway(
    server_thread: ServerThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    """The gateway on the shipped config.yaml with no key in its environment, as a new user
    starts it; only what would write files beside the test run (the stores, the knowledge
    base) is elsewhere. Ready when the routing exemplars are embedded."""
    config = shipped_config_apart(tmp_path_factory)
    with running_gateway(server_thread, settings_of(config, environ={})) as server:
        router = server.app[RUNTIME_REF].current.router
        assert poll_until(lambda: router.ready, timeout=60), "exemplars embedded"
        yield server
