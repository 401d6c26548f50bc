"""The README's Quickstart snippets, run in order (each continues from the first, as the README
says) against the gateway on the shipped config with no key, print what the README says they
print. The knowledge-base snippet needs an ingest first: tests/e2e/test_knowledge.py runs it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.harness.inprocess import GatewayServer

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart_snippets() -> list[str]:
    quickstart = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1]
    quickstart = quickstart.split("\n## ", 1)[0]
    return [s for s in re.findall(r"```python\n(.*?)```", quickstart, re.S) if "demo-docs" not in s]


def test_the_quickstart_prints_what_the_readme_says(
    shipped_gateway: GatewayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace: dict[str, Any] = {}
    printed = []
    try:
        for snippet in quickstart_snippets():
            exec(snippet.replace("http://127.0.0.1:8080", shipped_gateway.url), namespace)
            printed.append(capsys.readouterr().out.splitlines())
        cache_status = namespace["client"].chat.completions.with_raw_response.create(
            model="demo", messages=[{"role": "user", "content": "what's a semantic cache?"}]
        )
    finally:
        if "client" in namespace:
            namespace["client"].close()
    chat, responses, routing, structured, tools, cache = printed
    assert chat[0].endswith("You asked: What is a semantic cache?")
    assert chat[1].endswith("You asked: Stream this, please.")  # a newline after the stream
    assert chat[2] == "256"
    assert responses[-1].endswith("You asked: Stream this, please.")
    assert routing[0].startswith("alias=demo-auto; model=demo-cheap; tier=0;")
    assert routing[1] == "[demo model demo-cheap: no real LLM behind this answer] You asked: hi!"
    assert routing[2].startswith("alias=demo-auto; model=demo-strong; tier=1;")
    assert structured[0] == "0 name='The largest city of France?' population=1"
    assert structured[1].startswith("1 name=")
    assert "get_weather" in tools[0] and "Weather in Paris?" in tools[0]
    assert [line.split()[0] for line in cache] == ["miss", "hit-exact", "hit-semantic"]
    # "after the first snippet, 'what's a semantic cache?' is a semantic hit on its first ask"
    assert cache_status.headers["x-gateway-cache"] == "hit-semantic"
