"""The gateway the fuzz modules share: started once, when the first test that asks for it
runs (the other suites of this folder never do)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.fuzz_target import FuzzGateway, running_fuzz_gateway


@pytest.fixture(scope="session")
def shared_fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzGateway]:
    with running_fuzz_gateway(tmp_path_factory) as fuzz:
        yield fuzz
