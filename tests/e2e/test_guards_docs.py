"""docs/GUARDS.md, "Try it offline": every curl and OpenAI SDK example, run in order against a
gateway on the shipped config.yaml (policies in a directory of its own, where the examples
write theirs), prints exactly the output the page shows after it."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import load_settings
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway

ROOT = Path(__file__).resolve().parents[2]
GUARDS = ROOT / "docs" / "GUARDS.md"
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def examples() -> list[tuple[str, str, str | None]]:
    """(language, code, the text block right after it, if any) of the section, in order."""
    section = GUARDS.read_text(encoding="utf-8").split("## Try it offline", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = list(FENCE.finditer(section))
    out = []
    for i, block in enumerate(blocks):
        if block[1] not in ("bash", "python"):
            continue
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        shown = None
        if after and after[1] == "text" and not section[block.end() : after.start()].strip():
            shown = after[2]
        out.append((block[1], block[2], shown))
    return out


@pytest.fixture(scope="module")
def docs_gateway(
    server_thread: ServerThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[GatewayServer, Path]]:
    """The gateway as the quickstart starts it, and the directory the examples run in."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    config["cache"]["store"] = {"type": "memory"}
    config["responses"]["store"] = {"type": "memory"}
    config["server"]["access_log"] = False
    directory = tmp_path_factory.mktemp("quickstart")
    for base in config.get("knowledge_bases", {}).values():
        base["path"] = str(directory / "kb")
    (directory / "policies").mkdir()
    config["policies"]["dir"] = str(directory / "policies")
    settings = load_settings(write_config(directory, config))
    with running_gateway(server_thread, settings) as server:
        yield server, directory


@pytest.mark.skipif(not shutil.which("curl"), reason="the examples use curl")
def test_every_example_prints_what_the_page_shows(
    docs_gateway: tuple[GatewayServer, Path],
) -> None:
    server, directory = docs_gateway
    found = examples()
    assert {lang for lang, _, _ in found} == {"bash", "python"} and len(found) >= 10

    def local(code: str) -> str:
        # A policy edit is picked up within a second or two; a loaded machine gets longer.
        code = code.replace("sleep 2", "sleep 3")
        return code.replace("http://127.0.0.1:8080", server.url)

    shell = "".join(
        f"{local(code)}\necho '@@@{i}'\n"
        for i, (lang, code, _) in enumerate(found)
        if lang == "bash"
    )
    run = subprocess.run(
        ["bash", "-e"], input=shell, capture_output=True, text=True, cwd=directory, timeout=120
    )
    assert run.returncode == 0, run.stderr
    printed: dict[int, str] = {}
    rest = run.stdout.replace("\r", "")
    for i, (lang, _, _) in enumerate(found):
        if lang == "bash":
            printed[i], _, rest = rest.partition(f"@@@{i}\n")
    namespace: dict[str, Any] = {"__name__": "guards_docs"}
    try:
        for i, (lang, code, _) in enumerate(found):
            if lang == "python":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(local(code), namespace)
                printed[i] = out.getvalue()
    finally:
        if "client" in namespace:
            namespace["client"].close()
    for i, (lang, code, shown) in enumerate(found):
        if shown is not None:
            assert printed[i] == shown, f"{lang} example {i}:\n{code}"
