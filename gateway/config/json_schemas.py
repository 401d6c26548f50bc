"""The JSON Schemas `gateway schema` writes, so editors autocomplete and check the YAML: point
the YAML language server at them (`# yaml-language-server: $schema=...`, as config.yaml and
the example policies do)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.config.file import ConfigFile
from gateway.config.policy_file import policy_json_schema

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def config_json_schema() -> dict[str, Any]:
    schema = ConfigFile.model_json_schema()
    return {"$schema": DRAFT, **schema, "title": "Gateway config (config.yaml)"}


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "config.schema.json": config_json_schema,
    "policy.schema.json": policy_json_schema,
}
