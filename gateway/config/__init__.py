"""config.yaml: strict pydantic models for the file, and the frozen runtime settings built from it.

Two steps, on purpose: the file models (a module per section, named after it, and file.py for
the whole) reject unknown fields and say exactly which field is wrong; the runtime object
(settings) resolves environment variables (the only place they are read) and indexes models
and keys for the request path.
"""

from gateway.config.auth import ApiKeyConfig, AuthConfig
from gateway.config.cache import (
    CALIBRATED_THRESHOLDS,
    CacheConfig,
    CachePolicy,
    CachePolicyOverride,
    CacheStoreConfig,
    EmbedderConfig,
    JudgeConfig,
    VerifyPolicy,
    calibrated_threshold,
)
from gateway.config.degradation import DegradationConfig, UnavailableConfig
from gateway.config.file import ConfigFile
from gateway.config.guard import (
    ArgumentRule,
    CompressionConfig,
    GuardConfig,
    LoopGuardConfig,
    ToolGuardConfig,
    ToolRule,
)
from gateway.config.knowledge_bases import AttachConfig, KnowledgeBaseConfig
from gateway.config.loading import DEFAULT_CONFIG_PATH, ConfigError, load_settings, parse_config
from gateway.config.models import DeploymentConfig, ModelConfig, Pricing
from gateway.config.providers import ProviderConfig, TimeoutConfig
from gateway.config.rate_limits import RateLimitConfig, RateLimitsConfig, RateLimitStorageConfig
from gateway.config.redis import RedisConfig, RedisTarget, SharedRedis
from gateway.config.resilience import (
    BreakerConfig,
    BreakerStorageConfig,
    ResilienceConfig,
    RetryConfig,
)
from gateway.config.responses import ResponsesConfig, ResponseStoreConfig
from gateway.config.routing import (
    AliasConfig,
    EscalationConfig,
    RoutingConfig,
    ScoringConfig,
    TierConfig,
)
from gateway.config.server import ServerConfig
from gateway.config.settings import (
    Deployment,
    ModelRoute,
    ProviderSettings,
    Settings,
    build_settings,
    hash_key,
)

__all__ = [
    "CALIBRATED_THRESHOLDS",
    "DEFAULT_CONFIG_PATH",
    "AliasConfig",
    "ApiKeyConfig",
    "ArgumentRule",
    "AttachConfig",
    "AuthConfig",
    "BreakerConfig",
    "BreakerStorageConfig",
    "CacheConfig",
    "CachePolicy",
    "CachePolicyOverride",
    "CacheStoreConfig",
    "CompressionConfig",
    "ConfigError",
    "ConfigFile",
    "DegradationConfig",
    "Deployment",
    "DeploymentConfig",
    "EmbedderConfig",
    "EscalationConfig",
    "GuardConfig",
    "JudgeConfig",
    "KnowledgeBaseConfig",
    "LoopGuardConfig",
    "ModelConfig",
    "ModelRoute",
    "Pricing",
    "ProviderConfig",
    "ProviderSettings",
    "RateLimitConfig",
    "RateLimitStorageConfig",
    "RateLimitsConfig",
    "RedisConfig",
    "RedisTarget",
    "ResilienceConfig",
    "ResponseStoreConfig",
    "ResponsesConfig",
    "RetryConfig",
    "RoutingConfig",
    "ScoringConfig",
    "ServerConfig",
    "Settings",
    "SharedRedis",
    "TierConfig",
    "TimeoutConfig",
    "ToolGuardConfig",
    "ToolRule",
    "UnavailableConfig",
    "VerifyPolicy",
    "build_settings",
    "calibrated_threshold",
    "hash_key",
    "load_settings",
    "parse_config",
]
