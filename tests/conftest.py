from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread
from tests import tiers


def _patch_aioresponses() -> None:
    """aioresponses 0.7.9 builds ClientResponse without the `stream_writer` argument that
    aiohttp >= 3.14 requires; hand it a response class that supplies an idle one."""
    import inspect
    from types import SimpleNamespace

    import aiohttp
    from aioresponses import core

    if "stream_writer" not in inspect.signature(aiohttp.ClientResponse.__init__).parameters:
        return

    class _Response(aiohttp.ClientResponse):
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs.setdefault("stream_writer", SimpleNamespace(output_size=0))
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    core.ClientResponse = _Response  # type: ignore[misc]


_patch_aioresponses()


@pytest.fixture(scope="session")
def server_thread() -> Iterator[ServerThread]:
    thread = ServerThread()
    yield thread
    thread.close()


@pytest.fixture(scope="session")
def fake(server_thread: ServerThread) -> Iterator[FakeUpstream]:
    upstream = server_thread.call(FakeUpstream().start())
    yield upstream
    server_thread.call(upstream.stop())


@pytest.fixture(scope="session")
def down(server_thread: ServerThread) -> Iterator[FakeUpstream]:
    """A provider in an outage: it answers every call with 503. (A closed port is no outage: a
    provider that never answered is a configuration fault, an error: docs/RESILIENCE.md.)"""
    upstream = server_thread.call(FakeUpstream().start())
    upstream.defaults = Knobs(status=503)
    yield upstream
    server_thread.call(upstream.stop())


@pytest.fixture
def fake_upstream(fake: FakeUpstream) -> FakeUpstream:
    """The shared fake upstream, reset to healthy defaults for each test."""
    fake.reset()
    return fake


@pytest.fixture(scope="session")
def gateway(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    """The gateway on a real socket, in anonymous mode, in front of the fake upstream."""
    server = server_thread.call(GatewayServer(settings_for(fake.url)).start())
    yield server
    server_thread.call(server.stop())


@pytest.fixture
def gw(gateway: GatewayServer, fake_upstream: FakeUpstream) -> GatewayServer:
    """The shared gateway with a freshly reset fake upstream behind it."""
    return gateway


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server for the session (its URL); skipped where it is not installed."""
    from gateway.testing.harness.redis_server import redis_server, redis_server_path

    if redis_server_path() is None:
        pytest.skip("redis-server is not on PATH (CI installs it: apt-get install redis-server)")
    with redis_server() as server:
        yield server.url


@pytest.fixture(scope="session", autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    """Every OpenAI client the tests made (tests/clients.py) is closed at the end."""
    from tests.clients import close_all

    yield
    close_all()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test's kind as markers (tests/tiers.py): the tiers select on them."""
    tiers.mark_kinds(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """A test that starts a program says so in tests/tiers.py, or fails."""
    with tiers.refusing_unmarked_processes(item):
        return (yield)


# A test that imports torch (or another package of the sentence-transformers extra) says so in
# tests/tiers.py, or fails: in the phase that imported it, or, for an import at module level,
# at collection.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with tiers.refusing_unmarked_torch(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with tiers.refusing_unmarked_torch(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with tiers.refusing_unmarked_torch(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    before = tiers.loaded_torch_modules()
    report = yield
    return tiers.refusing_torch_at_collection(collector, report, before)
