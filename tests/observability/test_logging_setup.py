"""`gateway serve`'s logging keeps faiss's loader chatter ("Could not load library with AVX2
support ...", at INFO on every start) out, and still shows faiss's errors."""

import subprocess
import sys

from gateway.testing.harness.process import pythonpath
from gateway.testing.harness.starters import REPO_ROOT

IMPORT_FAISS = (
    "import logging, faiss, gateway.cache.index; "
    "logging.getLogger('faiss.loader').error('a real faiss error')"
)


def _stderr(setup: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", f"{setup}; {IMPORT_FAISS}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": pythonpath(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_the_gateways_logging_keeps_faiss_loader_info_out_but_not_its_errors() -> None:
    quiet = _stderr(
        "from gateway.observability.logging_setup import configure_logging; configure_logging()"
    )
    assert "Loading faiss" not in quiet and "support" not in quiet, quiet
    assert quiet.splitlines() == ["a real faiss error"]


def test_without_it_faiss_says_at_info_what_it_loads() -> None:
    # The control: the chatter is there to keep out (its wording depends on the CPU).
    noisy = _stderr("import logging, sys; logging.basicConfig(level=logging.INFO)")
    assert "Loading faiss" in noisy
