"""OpenAI SDK clients for tests, one per (gateway URL, key, timeout), all closed when the session
ends. A client left to the garbage collector leaves its pooled sockets unclosed, and the
ResourceWarning that raises then fails whichever test happens to be running."""

from __future__ import annotations

import openai

_clients: dict[tuple[str, str, float], openai.OpenAI] = {}


def sdk_client(url: str, key: str = "k", timeout: float = 20.0) -> openai.OpenAI:
    """A client of the gateway at `url` (with or without `/v1`), no retries."""
    base = url.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    client = _clients.get((base, key, timeout))
    if client is None:
        client = _clients[(base, key, timeout)] = openai.OpenAI(
            base_url=base, api_key=key, max_retries=0, timeout=timeout
        )
    return client


def close_all() -> None:
    for client in _clients.values():
        client.close()
    _clients.clear()
