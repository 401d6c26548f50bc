"""Is each provider configured right and answering? A cheap authenticated call (GET /models)
tells a rejected key, a wrong host or port, or a wrong base_url from a working provider before
any request does. The running gateway probes at start and periodically (`/readyz` shows the
result per provider); `gateway check --probe` also confirms, with a one-token call each, the
models the provider does not list, since some providers serve names they do not list."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.errors import GatewayError, ProviderMisconfigured, UpstreamTimeout
from gateway.upstream.base import Provider

OK = "ok"


@dataclass(frozen=True, slots=True)
class ProviderHealth:
    """`status`: ok, or what is wrong (auth_failed, unreachable, not_found, model_unknown: the
    gateway's configuration; timeout, failing: the provider's health). `error`: what the probe
    raised, None when ok."""

    status: str
    checked_at: float
    error: GatewayError | None = None

    @property
    def fix(self) -> str | None:
        """One line saying what is wrong and what to do; None when ok."""
        return self.error.message if self.error is not None else None

    def summary(self) -> dict[str, object]:
        """What `/readyz` shows: no URL, key or provider message (it is unauthenticated)."""
        return {"status": self.status, "checked_seconds_ago": round(time.time() - self.checked_at)}


def unchecked() -> ProviderHealth:
    return ProviderHealth("unchecked", time.time())


async def probe(
    provider: Provider, models: list[tuple[str, str]], *, confirm: bool = False
) -> ProviderHealth:
    """`provider`'s health: its model list fetched with the configured key; with `confirm`,
    each of `models` ((upstream name, kind) of its deployments) that it does not list is asked
    for one token (or one embedding), so that a model it does not know is found before a
    client asks for it."""
    try:
        listed = await provider.listed_models()
        if confirm:
            for model, kind in models:
                if listed is None or model not in listed:
                    await _one_call(provider, model, kind)
    except GatewayError as err:
        return failed(err)
    return ProviderHealth(OK, time.time())


def failed(err: GatewayError) -> ProviderHealth:
    if isinstance(err, ProviderMisconfigured):
        status = (err.code or "misconfigured").removeprefix("upstream_")
    elif err.code == "upstream_unreachable":
        status = "unreachable"
    else:
        status = "timeout" if isinstance(err, UpstreamTimeout) else "failing"
    return ProviderHealth(status, time.time(), err)


async def _one_call(provider: Provider, model: str, kind: str) -> None:
    """A chat call for one token, or an embedding of one word. A 400 about anything but the
    model (a reasoning model that refuses max_tokens, say) or a 429 still shows that the
    provider knows the model and the key."""
    try:
        if kind == "embedding":
            await provider.embeddings({"model": model, "input": "ping"})
        else:
            messages = [{"role": "user", "content": "ping"}]
            await provider.chat({"model": model, "messages": messages, "max_tokens": 1})
    except ProviderMisconfigured:
        raise
    except GatewayError as err:
        if err.status >= 500:
            raise
