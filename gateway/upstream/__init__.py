"""Upstream providers: one small interface, one adapter per wire format, one registry."""

from gateway.upstream.base import Provider
from gateway.upstream.registry import Upstreams

__all__ = ["Provider", "Upstreams"]
