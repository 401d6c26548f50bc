"""A read-only probe inside a server process, for what the server does not expose: the asyncio
tasks not done (with the most common coroutines), the threads, and the length of every
container attribute of the cache store (to compare with its max_entries).

`probe_env` gives the environment that loads it: a `sitecustomize` module on the child's
PYTHONPATH imports this one, whose daemon thread writes a JSON sample to the file named by
$HARNESS_PROBE_OUT every 2 s; `read_probe` reads the last one. It changes nothing in the
process and never raises into it (errors go to OUT.error).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from gateway.testing.harness.process import pythonpath
from gateway.testing.harness.starters import REPO_ROOT

OUT_ENV = "HARNESS_PROBE_OUT"
CONTAINERS = (list, dict, set, frozenset, collections.deque)


def probe_env(workdir: Path, out: Path, root: Path = REPO_ROOT) -> dict[str, str]:
    """The environment of a child (python) process that runs the probe, writing to `out`."""
    site = workdir / "probe"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"import {__name__}\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), pythonpath(root)]), OUT_ENV: str(out)}


def read_probe(out: Path) -> dict[str, Any]:
    """The probe's last sample ({} before the first)."""
    try:
        data: dict[str, Any] = json.loads(out.read_text())
    except (OSError, ValueError):
        return {}
    return data


def containers(obj: object) -> dict[str, int]:
    """The length of each container attribute of `obj`, and of `obj` itself (`__len__`)."""
    out = {}
    for name in dir(obj):
        if name.startswith("__"):
            continue
        try:
            value = getattr(obj, name)
        except Exception:
            continue
        if isinstance(value, CONTAINERS):
            out[name] = len(value)
    with contextlib.suppress(Exception):
        out["__len__"] = len(obj)  # type: ignore[arg-type]
    return out


def _find_store(live: list[asyncio.Task[Any]]) -> object | None:
    """The cache store, reached from the cache's own sweeper task (`self` in its frame is the
    SemanticCache). gc.get_objects() cannot find it: the gateway freezes start-up objects
    (gc.freeze), which hides them from it."""
    for task in live:
        frame = getattr(task.get_coro(), "cr_frame", None)
        owner = frame.f_locals.get("self") if frame is not None else None
        if type(owner).__name__ == "SemanticCache":
            store: object = owner.store  # type: ignore[union-attr]
            return store
    return None


def _live_tasks() -> list[asyncio.Task[Any]]:
    # The registry asyncio.all_tasks() reads, from another thread: retry while it changes.
    for _ in range(100):
        try:
            tasks = list(asyncio.tasks._all_tasks)  # type: ignore[attr-defined]
            return [t for t in tasks if not t.done()]
        except RuntimeError:
            continue
    return []


def sample(store: object | None, live: list[asyncio.Task[Any]]) -> dict[str, Any]:
    names: collections.Counter[str] = collections.Counter()
    for task in live:
        coro = task.get_coro()
        names[getattr(coro, "__qualname__", type(coro).__name__)] += 1
    return {
        "time": time.time(),
        "tasks": len(live),
        "top_tasks": dict(names.most_common(6)),
        "threads": threading.active_count(),
        "store": containers(store) if store is not None else {},
        "store_type": type(store).__name__ if store is not None else None,
    }


def _run(path: str) -> None:
    store: weakref.ref[object] | None = None
    last_search = 0.0
    while True:
        time.sleep(2)
        try:
            live = _live_tasks()
            found = store() if store is not None else None
            if found is None and time.monotonic() - last_search > 10:
                last_search = time.monotonic()
                found = _find_store(live)
                store = weakref.ref(found) if found is not None else None
            with open(path + ".tmp", "w") as f:
                json.dump(sample(found, live), f)
            os.replace(path + ".tmp", path)
        except Exception as exc:  # never take the server down
            with open(path + ".error", "a") as f:
                f.write(repr(exc) + "\n")


_path = os.environ.get(OUT_ENV)
if _path:
    threading.Thread(target=_run, args=(_path,), name="harness-probe", daemon=True).start()
