"""Results saved as JSON: dataclasses become objects, what JSON cannot hold becomes text."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from gateway.testing.harness.results import save_json


@dataclass
class Inner:
    p50_ms: float = 1.5


@dataclass
class Options:
    json_out: Path | None = Path("out.json")
    concurrency: tuple[int, ...] = (16, 64)
    inner: Inner = field(default_factory=Inner)


def test_options_and_figures_in_one_object(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    save_json(path, options=Options(), rows=[{"rps": 3.0, "p99": math.nan}], note=Path("x"))
    data = json.loads(path.read_text())
    assert data["options"] == {
        "json_out": "out.json",
        "concurrency": [16, 64],
        "inner": {"p50_ms": 1.5},
    }
    assert data["rows"][0]["rps"] == 3.0 and math.isnan(data["rows"][0]["p99"])
    assert data["note"] == "x"
