"""The benchmark scripts under bench/ import each other as top-level modules (as when run as
`python bench/x.py`): put bench/ on the path for the tests of their shared parts."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
