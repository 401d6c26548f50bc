"""A benchmark's results saved as JSON (`--json PATH`): its options and figures in one object,
dataclasses as objects and anything else JSON has no type for (a path, an option's tuple key)
as text, so a script does not convert each part by hand."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def to_json(**parts: Any) -> str:
    return json.dumps(parts, indent=1, default=_plain)


def save_json(path: Path, **parts: Any) -> None:
    """`parts` as one JSON object in `path`."""
    path.write_text(to_json(**parts), encoding="utf-8")
