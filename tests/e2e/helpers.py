"""Shared pieces of the end-to-end suites: raw HTTP and SSE reading, assembling streamed
chunks, OpenAI error-body checks, OpenAPI schema validation, bounded polling, and settings changed
or loaded from files.

The SSE parser here is deliberately independent of `gateway.reply.sse`: the tests check the
gateway's framing, so they must not read it with the gateway's own code.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from jsonschema import Draft202012Validator
from multidict import CIMultiDict

from gateway.config import ConfigFile, Settings, build_settings
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.configs import write_config

Json = dict[str, Any]

USER_HELLO: list[Json] = [{"role": "user", "content": "hello"}]
ERROR_FIELDS = {"message", "type", "param", "code"}
# What an error body must never contain: upstream HTML pages or Python tracebacks.
LEAK_MARKERS = ("<html", "<!doctype", "<body", "traceback (most recent call last)", 'file "/')


# --- raw HTTP -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes
    # Wall-clock arrival time (perf_counter) of each body piece, for latency checks.
    arrivals: list[float] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")

    def json(self) -> Any:
        return json.loads(self.body)

    def sse(self) -> list[str]:
        return parse_sse(self.body)


def wire_body(call: Json) -> Json:
    """The JSON body the SDK would send for `create(**call)`: `extra_body` merged in."""
    body = {k: v for k, v in call.items() if k not in ("extra_body", "extra_headers")}
    return {**body, **call.get("extra_body", {})}


async def request(
    method: str,
    url: str,
    *,
    body: bytes | Json | None = None,
    headers: Mapping[str, str] | None = None,
    chunked: bool = False,
) -> RawResponse:
    """One HTTP request with aiohttp, the body sent as given (bytes) or as JSON (a dict)."""
    data: Any = json.dumps(body).encode() if isinstance(body, dict) else body
    send_headers = dict(headers or {})
    if isinstance(body, dict):
        send_headers.setdefault("Content-Type", "application/json")
    if chunked and data is not None:
        data = _in_pieces(data)
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session,
        session.request(method, url, data=data, headers=send_headers) as resp,
    ):
        raw, arrivals = bytearray(), []
        async for piece in resp.content.iter_any():
            raw += piece
            arrivals.append(time.perf_counter())
        return RawResponse(resp.status, CIMultiDict(resp.headers), bytes(raw), arrivals)


async def _in_pieces(data: bytes, size: int = 8192) -> AsyncIterator[bytes]:
    """An async body makes aiohttp send it with Transfer-Encoding: chunked."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def parse_sse(raw: bytes) -> list[str]:
    """The `data` of each event, checking the framing the gateway promises: UTF-8, events
    separated by a blank line, each event one `data: ` line."""
    text = raw.decode("utf-8")
    assert text.endswith("\n\n"), f"the stream does not end with a complete event: {text[-80:]!r}"
    events = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, f"bad SSE event: {block!r}"
        events.append(block[len("data: ") :])
    return events


def sse_json(events: list[str]) -> tuple[list[Json], bool]:
    """Split raw SSE data into parsed JSON events and whether the stream ended with [DONE]
    (and only there)."""
    done = bool(events) and events[-1] == "[DONE]"
    body = events[:-1] if done else events
    assert "[DONE]" not in body, "[DONE] must be the last event"
    return [json.loads(e) for e in body], done


# --- streamed chunks (SDK objects or raw dicts) --------------------------------------------


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def stream_text(chunks: Iterable[Any]) -> str:
    return "".join(
        _get(_get(choice, "delta"), "content") or ""
        for chunk in chunks
        for choice in (_get(chunk, "choices") or [])
    )


def assemble_tool_calls(chunks: Iterable[Any]) -> list[Json]:
    """Tool calls rebuilt from stream fragments the way clients do: by `index`, the first
    fragment carrying id/type/name, later ones appending to `arguments`."""
    calls: dict[int, Json] = {}
    for chunk in chunks:
        for choice in _get(chunk, "choices") or []:
            for frag in _get(_get(choice, "delta"), "tool_calls") or []:
                call = calls.setdefault(
                    _get(frag, "index"), {"id": None, "type": None, "name": "", "arguments": ""}
                )
                for key in ("id", "type"):
                    if _get(frag, key):
                        assert call[key] is None, f"tool call {key} sent twice"
                        call[key] = _get(frag, key)
                function = _get(frag, "function")
                if function is not None:
                    call["name"] += _get(function, "name") or ""
                    call["arguments"] += _get(function, "arguments") or ""
    assert sorted(calls) == list(range(len(calls))), f"tool call indexes {sorted(calls)}"
    return [calls[i] for i in sorted(calls)]


def finish_reasons(chunks: Iterable[Any]) -> list[str]:
    return [
        _get(choice, "finish_reason")
        for chunk in chunks
        for choice in (_get(chunk, "choices") or [])
        if _get(choice, "finish_reason")
    ]


# --- error bodies ---------------------------------------------------------------------------


def assert_openai_error(
    status: int,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    expected_status: int,
    code: str | None = None,
    param: str | None = None,
) -> Json:
    """An OpenAI error response: the status, JSON, exactly the four error fields, a real
    message, and nothing leaked. Returns the `error` object."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    assert status == expected_status, f"HTTP {status}, expected {expected_status}: {text[:300]}"
    content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
    assert content_type.startswith("application/json"), content_type
    for marker in LEAK_MARKERS:
        assert marker not in text.lower(), f"{marker!r} leaked into the error body: {text[:300]}"
    data = json.loads(text)
    assert isinstance(data, dict) and set(data) == {"error"}, data
    error: Json = data["error"]
    assert set(error) == ERROR_FIELDS, error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    assert isinstance(error["type"], str) and error["type"], error
    assert error["param"] is None or isinstance(error["param"], str), error
    assert error["code"] is None or isinstance(error["code"], str), error
    if code is not None:
        assert error["code"] == code, error
    if param is not None:
        assert error["param"] == param, error
    return error


def assert_raw_error(resp: RawResponse, status: int, **expected: str | None) -> Json:
    return assert_openai_error(
        resp.status, resp.headers, resp.body, expected_status=status, **expected
    )


# --- OpenAPI schemas ------------------------------------------------------------------------

# A copy of ../shared/openai/openapi-subset.json kept in the repository, so that a clone runs
# these tests too (tests/data/openai/README.md; tests/test_vendored_data.py checks the copy).
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "data" / "openai" / "openapi-subset.json"


@cache
def openapi_document() -> Json:
    data: Json = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return data


@cache
def schema_validator(name: str) -> Draft202012Validator:
    """A validator for `#/components/schemas/<name>`; `$ref`s resolve inside the document."""
    components = openapi_document()["components"]
    assert name in components["schemas"], f"no schema {name!r} in {SCHEMA_PATH.name}"
    schema = {"$ref": f"#/components/schemas/{name}", "components": components}
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@cache
def completion_chunk_validator() -> Draft202012Validator:
    """CreateCompletionResponse with a nullable `finish_reason`: a legacy completion chunk
    before the last. The official schema describes streamed chunks with the same schema and
    wants a string there; the real API streams null until the last chunk (README of
    tests/data/openai)."""
    components = copy.deepcopy(openapi_document()["components"])
    choice = components["schemas"]["CreateCompletionResponse"]["properties"]["choices"]["items"]
    reason = choice["properties"]["finish_reason"]
    reason["type"], reason["enum"] = ["string", "null"], [*reason["enum"], None]
    return Draft202012Validator(
        {"$ref": "#/components/schemas/CreateCompletionResponse", "components": components}
    )


def assert_conforms(instance: Any, name: str) -> None:
    errors = sorted(schema_validator(name).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{name}: " + "; ".join(
        f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:5]
    )


# --- settings, polling ----------------------------------------------------------------------


def handbook(retriever_url: str, **more: Any) -> Json:
    """The fake retriever as an http knowledge base, attached to the `helpdesk` model."""
    base = {"type": "http", "url": retriever_url, "timeout_seconds": 2, "min_chunks": 1}
    return {**base, "min_score": 0.3, "attach": {"models": ["helpdesk"]}, **more}


def provider_key(settings: Settings, provider: str = "fake") -> str:
    key = settings.providers[provider].api_key
    assert key is not None
    return key.get_secret_value()


def reconfigure_provider(settings: Settings, provider: str, **changes: Any) -> Settings:
    """The same settings with some fields of one provider changed, validated again."""
    data = settings.file.model_dump(mode="json")
    data["providers"][provider].update(changes)
    environ = {
        settings.file.providers[name].api_key_env or "": p.api_key.get_secret_value()
        for name, p in settings.providers.items()
        if p.api_key is not None
    }
    return build_settings(ConfigFile.model_validate(data), "<e2e>", environ)


def poll_until(condition: Callable[[], bool], timeout: float = 3.0, interval: float = 0.02) -> bool:
    """Bounded polling for something that happens asynchronously on the servers' loop."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def upstream_requests(fake: FakeUpstream, path: str = "/v1/chat/completions") -> list[Json]:
    """What the fake received on one path, oldest first (bodies and headers)."""
    return [r for r in list(fake.received) if r["path"] == path]


def last_upstream_body(fake: FakeUpstream, path: str = "/v1/chat/completions") -> Json:
    received = upstream_requests(fake, path)
    assert received, f"the upstream received nothing on {path}"
    body: Json = received[-1]["body"]
    return body


def settings_from_files(
    directory: Path,
    config: Mapping[str, Any],
    policies: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """`config` written as directory/config.yaml and each policy as
    directory/policies/<name>.yaml, then loaded as `gateway serve` loads them (load_settings),
    with `environ` set in the environment while they load (keys are read then, once)."""
    from gateway.config import load_settings

    path = write_config(directory, config, policies)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (environ or {}).items():
            patch.setenv(name, value)
        return load_settings(path)


def shipped_config_apart(tmp_path_factory: pytest.TempPathFactory) -> Json:
    """The shipped config.yaml as a new user has it, except what would write files beside the
    test run: the stores in memory, each knowledge base in a temporary directory, no access
    log."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    config: Json = yaml.safe_load((root / "config.yaml").read_text(encoding="utf-8"))
    config["cache"]["store"] = {"type": "memory"}
    config["responses"]["store"] = {"type": "memory"}
    config["server"]["access_log"] = False
    for base in config.get("knowledge_bases", {}).values():
        base["path"] = str(tmp_path_factory.mktemp("kb"))
    return config
