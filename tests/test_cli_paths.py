"""The CLI run from another directory acts on the files of the config it is given: relative
paths resolve beside the config file (gateway/config/paths.py), and each command that touches
data names the absolute path it used. A gateway started from the config's own directory then
serves what was ingested, and `cache stats` sees what it cached."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from gateway.rag.embedded import read_current
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.starters import ready, run_gateway_cli, start_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import poll_until

CONFIG = {
    "server": {"access_log": False},
    "providers": {"d": {"type": "demo"}},
    "models": [{"name": "helpdesk", "provider": "d"}],
    # the hash embedder: instant, and ingest and gateway embed alike
    "cache": {"embedder": {"type": "hash"}, "defaults": {"enabled": True}},
    # no path: the default data/kb/docs, beside the config
    "knowledge_bases": {"docs": {"min_score": -1, "attach": {"models": ["helpdesk"]}}},
}


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The config in gw/, documents in docs/, and an unrelated working directory."""
    config = write_config(tmp_path / "gw", CONFIG)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "refunds.md").write_text("# Refunds\n\nRefunds are paid within 30 days.")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return config, docs, elsewhere


def test_ingest_and_cache_stats_from_elsewhere_act_on_the_gateways_files(tmp_path: Path) -> None:
    config, docs, elsewhere = _layout(tmp_path)
    home = config.parent
    index, store = home / "data" / "kb" / "docs", home / "data" / "cache.sqlite3"

    ingest = run_gateway_cli(
        "kb", "ingest", "docs", str(docs), "--config", str(config), "--quiet", cwd=elsewhere
    )
    assert ingest.returncode == 0, ingest.stderr
    version = read_current(index)
    assert version is not None
    assert f"Version {version} is now current in {index};" in ingest.stdout
    assert list(elsewhere.iterdir()) == []  # nothing written where the command ran

    before = run_gateway_cli("cache", "stats", "--config", str(config), cwd=elsewhere)
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["path"] == str(store)
    assert f"no cache file at {store} yet" in before.stderr

    # The gateway started in its own directory, on the config's relative name.
    with start_gateway(tmp_path, Path("config.yaml"), cwd=home) as server:
        ready(server, timeout=60)
        assert poll_until(lambda: f"cache {store}" in server.output(), timeout=5)
        with urllib.request.urlopen(server.url + "/readyz", timeout=10) as response:
            assert json.load(response)["knowledge_bases"]["docs"] == version
        client = sdk_client(server.url)
        question = [{"role": "user", "content": "When are refunds paid?"}]
        for expected in ("miss", "hit-exact"):  # an exact hit is a committed entry
            raw = client.chat.completions.with_raw_response.create(
                model="helpdesk", messages=question
            )
            assert raw.headers["x-gateway-knowledge-base"] == "docs"
            assert raw.headers["x-gateway-level"] == "1"  # grounded in the index
            assert raw.headers["x-gateway-cache"] == expected

        stats = run_gateway_cli("cache", "stats", "--config", str(config), cwd=elsewhere)
    assert stats.returncode == 0, stats.stderr
    shown = json.loads(stats.stdout)
    assert (shown["path"], shown["entries"]) == (str(store), 1)
    assert stats.stderr == ""


def test_check_from_elsewhere_reads_the_index_beside_the_config(tmp_path: Path) -> None:
    config, _, elsewhere = _layout(tmp_path)
    index = config.parent / "data" / "kb" / "docs"
    result = run_gateway_cli("check", "--config", str(config), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert f"knowledge base 'docs' is not ingested yet in {index}" in result.stdout
