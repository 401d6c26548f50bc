"""Paths in a config resolve beside the config file (gateway/config/paths.py): relative ones
against its directory, absolute ones as written, and against the working directory for a
config with no file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.config import ConfigFile, load_settings, parse_config
from gateway.config.paths import config_dir, resolve_path, resolve_paths
from gateway.rag.embedded import kb_path
from gateway.testing.harness.configs import write_config

BASE = {"providers": {"d": {"type": "demo"}}, "models": [{"name": "m", "provider": "d"}]}
RELATIVE = {
    **BASE,
    "cache": {"store": {"path": "state/cache.sqlite3"}},
    "responses": {"store": {"path": "../shared/responses.sqlite3"}},
    "knowledge_bases": {
        "named": {"path": "indexes/named"},
        "default": {},
        "remote": {"type": "http", "url": "http://127.0.0.1:9/search"},
    },
    "routing": {"scoring": {"exemplars": "votes.yaml"}},
    "policies": {"dir": "rules"},
}


def _paths(file: ConfigFile) -> dict[str, str | None]:
    kbs = file.knowledge_bases
    return {
        "cache": file.cache.store.path,
        "responses": file.responses.store.path,
        "named": kbs["named"].path,
        "default": kbs["default"].path,
        "remote": kbs["remote"].path,
        "exemplars": file.routing.scoring.exemplars,
        "policies": file.policies.dir,
    }


def test_relative_paths_resolve_beside_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path / "etc" / "gw", RELATIVE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    here = tmp_path / "etc" / "gw"
    assert _paths(load_settings(config).file) == {
        "cache": str(here / "state" / "cache.sqlite3"),
        "responses": str(tmp_path / "etc" / "shared" / "responses.sqlite3"),  # ".." normalized
        "named": str(here / "indexes" / "named"),
        "default": str(here / "data" / "kb" / "default"),  # the default, beside it too
        "remote": None,  # an http knowledge base has no index on disk
        "exemplars": str(here / "votes.yaml"),
        "policies": str(here / "rules"),
    }


def test_a_relative_config_path_resolves_against_the_working_directory_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(tmp_path / "conf", BASE)
    monkeypatch.chdir(tmp_path)
    settings = load_settings("conf/config.yaml")
    assert settings.file.cache.store.path == str(tmp_path / "conf" / "data" / "cache.sqlite3")
    assert config_dir("conf/config.yaml") == tmp_path / "conf"


def test_absolute_paths_stay_as_written(tmp_path: Path) -> None:
    absolute = {
        **BASE,
        "cache": {"store": {"path": "/var/lib/gw/cache.sqlite3"}},
        "knowledge_bases": {"docs": {"path": "/srv/kb/docs"}},
    }
    settings = load_settings(write_config(tmp_path, absolute))
    assert settings.file.cache.store.path == "/var/lib/gw/cache.sqlite3"
    assert kb_path("docs", settings.knowledge_bases["docs"]) == Path("/srv/kb/docs")
    assert resolve_path("~/gw/cache.sqlite3", tmp_path) == os.path.expanduser("~/gw/cache.sqlite3")


def test_a_config_with_no_file_resolves_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = parse_config("providers: {d: {type: demo}}\nmodels: [{name: m, provider: d}]\n")
    assert file.cache.store.path == "data/cache.sqlite3"  # parsed alone: as written
    monkeypatch.chdir(tmp_path)
    resolved = resolve_paths(file, None)
    assert resolved.cache.store.path == str(tmp_path / "data" / "cache.sqlite3")
    assert resolved.responses.store.path == str(tmp_path / "data" / "responses.sqlite3")
    assert resolved.policies.dir == str(tmp_path / "policies")


def test_a_sentence_transformers_model_is_a_path_only_when_it_is_one(tmp_path: Path) -> None:
    (tmp_path / "models" / "mine").mkdir(parents=True)

    def model(name: str) -> str:
        embedder = {"type": "sentence-transformers", "model": name}
        config = write_config(tmp_path, {**BASE, "cache": {"embedder": embedder}})
        return load_settings(config).file.cache.embedder.model

    assert model("models/mine") == str(tmp_path / "models" / "mine")  # exists beside it
    assert model("./not-yet-exported") == str(tmp_path / "not-yet-exported")  # written as one
    assert model("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"  # a hub name


def test_policies_in_a_relative_dir_are_found_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = {"match": {"tenants": ["*"]}, "cache": {"enabled": True}}
    config = write_config(tmp_path / "gw", BASE, policies={"on": policy})
    monkeypatch.chdir(tmp_path)
    settings = load_settings(config)
    assert [p.source for p in settings.policies.policies] == [
        str(tmp_path / "gw" / "policies" / "on.yaml")
    ]
