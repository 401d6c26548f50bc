"""The cached gateway's config is one the gateway accepts, with the cache on for the model and
a SQLite store where the benchmark said; the cache header is read from an answer."""

from __future__ import annotations

from pathlib import Path

from multidict import CIMultiDict, CIMultiDictProxy

from gateway.testing.harness.cached_gateway import cache_header, cached_config
from gateway.testing.harness.fake_settings import settings_of
from gateway.testing.harness.load import Outcome, Request


def test_the_config_turns_the_cache_on_for_the_model(tmp_path: Path) -> None:
    config = cached_config("http://127.0.0.1:9/v1", "bench-model", tmp_path / "c.sqlite3")
    settings = settings_of(config)
    assert settings.routes["bench-model"].cache.enabled
    assert config["cache"]["store"] == {"type": "sqlite", "path": str(tmp_path / "c.sqlite3")}


def test_the_cache_header_says_which_tier_answered() -> None:
    outcome = Outcome(0, Request("http://h", b""), 0.0)
    assert cache_header(outcome) is None
    outcome.headers = CIMultiDictProxy(CIMultiDict({"X-Gateway-Cache": "hit-semantic"}))
    assert cache_header(outcome) == "hit-semantic"
