"""Where the files and directories a config names are: relative paths resolve against the
directory of the config file, as `policies.dir` always has, so `gateway kb ingest --config
/srv/gw/config.yaml` run from anywhere writes where the gateway started on that file reads.

Absolute paths (and `~/...`) stay as written. A config with no file (one built from text, as
tests do) resolves against the working directory. `load_settings` applies this once, so every
reader (the stores, the knowledge bases, the CLI) sees absolute paths.
"""

from __future__ import annotations

import os
from pathlib import Path

from gateway.config.file import ConfigFile
from gateway.config.knowledge_bases import KnowledgeBaseConfig

DEFAULT_KB_ROOT = Path("data/kb")  # an embedded knowledge base's index: data/kb/<name>


def resolve_path(written: str, base: Path | None) -> str:
    """`written` as an absolute path: against `base` (the config's directory) when relative,
    against the working directory when `base` is None."""
    path = Path(written).expanduser()
    if not path.is_absolute():
        path = (base if base is not None else Path.cwd()) / path
    return os.path.abspath(path)  # "..": normalized, symlinks kept as written


def config_dir(config_path: Path | str) -> Path:
    """The directory relative paths of the config at `config_path` resolve against."""
    return Path(os.path.abspath(config_path)).parent


def resolve_paths(file: ConfigFile, base: Path | None) -> ConfigFile:
    """`file` with every path it holds absolute: the cache and response stores, the knowledge
    bases' indexes (the default data/kb/<name> included), the policies directory, the
    routing exemplars and a sentence-transformers model given as a path."""
    cache, responses, routing = file.cache, file.responses, file.routing
    store = cache.store.model_copy(update={"path": resolve_path(cache.store.path, base)})
    embedder = cache.embedder
    if embedder.type == "sentence-transformers" and _is_local(embedder.model, base):
        embedder = embedder.model_copy(update={"model": resolve_path(embedder.model, base)})
    scoring = routing.scoring
    if scoring.exemplars is not None:
        scoring = scoring.model_copy(update={"exemplars": resolve_path(scoring.exemplars, base)})
    response_store = responses.store.model_copy(
        update={"path": resolve_path(responses.store.path, base)}
    )
    return file.model_copy(
        update={
            "cache": cache.model_copy(update={"store": store, "embedder": embedder}),
            "responses": responses.model_copy(update={"store": response_store}),
            "routing": routing.model_copy(update={"scoring": scoring}),
            "knowledge_bases": {
                name: _knowledge_base(name, kb, base) for name, kb in file.knowledge_bases.items()
            },
            "policies": file.policies.model_copy(
                update={"dir": resolve_path(file.policies.dir, base)}
            ),
        }
    )


def _knowledge_base(name: str, kb: KnowledgeBaseConfig, base: Path | None) -> KnowledgeBaseConfig:
    if kb.type != "embedded":
        return kb
    written = kb.path if kb.path is not None else str(DEFAULT_KB_ROOT / name)
    return kb.model_copy(update={"path": resolve_path(written, base)})


def _is_local(model: str, base: Path | None) -> bool:
    """Whether a sentence-transformers `model` names a local directory rather than a model
    on the hub: written as a path (`./`, `../`, `~`, absolute), or one that exists there."""
    if model.startswith(("./", "../", "~", "/", ".\\", "..\\")):
        return True
    return Path(resolve_path(model, base)).exists()
