"""Proxy overhead: the same request mix straight to a fake upstream, through a bare aiohttp
forwarder, through the gateway and (when installed) through a peer proxy, in one run.

    python bench/overhead.py                    # defaults: about 5 minutes with LiteLLM
    python bench/overhead.py --quick            # smoke check, well under a minute
    python bench/overhead.py --gateway-commit HEAD --json a.json   # committed code only
    python bench/overhead.py --report a.json b.json                # pool saved runs

Every server is its own process on a free loopback port; the load generator is this process
(aiohttp client on uvloop, one pooled connection per concurrent worker). Each round runs every
cell (plain/stream x concurrency) against every target back to back, rotating the target order,
so machine noise lands on all paths alike; the table shows medians across rounds. Ratios and
added latency are paired within a round (target vs direct/forwarder, same cell) and then the
median is taken. LiteLLM is measured when `--litellm PATH` is given or found at
/tmp/litellm-venv/bin/litellm (install it in its own venv: see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script: the checkout's gateway package

import aiohttp  # noqa: E402
import uvloop  # noqa: E402

from gateway.testing.harness.configs import write_config  # noqa: E402
from gateway.testing.harness.load import (  # noqa: E402
    JSON_HEADERS,
    Outcome,
    Request,
    RunFigures,
    closed_loop,
)
from gateway.testing.harness.process import Server, answers, free_port  # noqa: E402
from gateway.testing.harness.procstat import cpu_seconds, load_average  # noqa: E402
from gateway.testing.harness.starters import (  # noqa: E402
    start_fake_upstream,
    start_forwarder,
    start_gateway,
)
from gateway.testing.harness.stats import fmt, median, ratio  # noqa: E402
from gateway.testing.harness.sync_http import get_json, post_json  # noqa: E402
from gateway.testing.harness.tables import markdown_table  # noqa: E402

DEFAULT_LITELLM = Path("/tmp/litellm-venv/bin/litellm")
MODEL = "bench-model"
# ~30 words, so the fake upstream streams ~30 content chunks (it streams word by word).
ANSWER = (
    "Use a 6 mm masonry bit with the drill in hammer mode, drill slightly deeper than the plug, "
    "blow out the dust, then tap the plug in flush before you drive the screw."
)
BASE_REQUEST = {
    "model": MODEL,
    "messages": [
        {"role": "system", "content": "You are a concise assistant for a hardware store."},
        {"role": "user", "content": "Which drill bit do I need for a 6 mm wall plug in brick?"},
    ],
    "temperature": 0.2,
}
BODIES = {
    "plain": json.dumps(BASE_REQUEST).encode(),
    "stream": json.dumps({**BASE_REQUEST, "stream": True}).encode(),
}
# LiteLLM refuses to start without a master key; clients then send it as a bearer token.
LITELLM_KEY = "sk-bench-master-key"
STREAM_END = b"data: [DONE]\n\n"
DIRECT, FORWARDER, GATEWAY, LITELLM = "direct", "forwarder", "gateway", "litellm"


@dataclass(frozen=True)
class Options:
    rounds: int
    requests: int
    warmup: int
    max_seconds: float
    concurrency: tuple[int, ...]
    modes: tuple[str, ...]
    targets: tuple[str, ...]
    litellm: Path | None
    json_out: Path | None
    gateway_commit: str | None
    report: tuple[Path, ...]


@dataclass(frozen=True)
class Target:
    """Where to send chat completions for one path, and the headers it needs."""

    url: str
    pid: int  # the process the client talks to: its CPU time is counted per request
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON_HEADERS))


@dataclass(frozen=True)
class Cell:
    mode: str
    concurrency: int


@dataclass
class Sample(RunFigures):
    """One cell against one target in one round (saved as is by --json)."""

    cpu_ms: float = math.nan  # CPU time of the target's process per request


@dataclass
class Results:
    # (target, mode, concurrency) -> one Sample per round
    samples: dict[tuple[str, str, int], list[Sample]] = field(default_factory=dict)

    def add(self, target: str, cell: Cell, sample: Sample) -> None:
        self.samples.setdefault((target, cell.mode, cell.concurrency), []).append(sample)

    def get(self, target: str, cell: Cell) -> list[Sample]:
        return self.samples.get((target, cell.mode, cell.concurrency), [])

    def has(self, target: str) -> bool:
        return any(key[0] == target for key in self.samples)

    def cells(self) -> list[Cell]:
        """Every cell measured, by concurrency then mode (plain before stream)."""
        keys = {(c, m) for _, m, c in self.samples}
        return [Cell(m, c) for c, m in sorted(keys)]


# --- servers ---------------------------------------------------------------------------------


def start_litellm(workdir: Path, upstream: str, binary: Path) -> Server:
    """LiteLLM proxy with default settings, one `openai/` model pointed at the fake upstream."""
    params = {"model": f"openai/{MODEL}", "api_base": upstream, "api_key": "sk-bench-not-a-key"}
    config = write_config(
        workdir,
        {"model_list": [{"model_name": MODEL, "litellm_params": params}]},
        name="litellm.yaml",
    )
    port = free_port()
    # The local cost map only skips a startup download that cannot succeed offline.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": LITELLM_KEY}
    argv = [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    server = Server(LITELLM, argv, workdir, env)
    try:
        server.wait_ready(answers(f"http://127.0.0.1:{port}", "/health/liveliness"), 180)
    except BaseException:
        server.stop()
        raise
    return server


def start_servers(
    workdir: Path, root: Path, opts: Options, servers: list[Server]
) -> dict[str, Target]:
    """Start what `opts` asks for, appending each server to `servers` as soon as it runs; the
    gateway and the fake run from `root`. Returns the targets by name."""
    fake = start_fake_upstream(workdir, root=root)
    servers.append(fake)
    post_json(fake.url + "/_fake/config", {"defaults": {"content": ANSWER}})
    upstream = fake.url + "/v1"
    # No cache or routing section: both are off unless configured.
    config = {
        "server": {"host": "127.0.0.1", "port": 0},
        "providers": {"fake": {"type": "openai", "base_url": upstream}},
        "models": [{"name": MODEL, "provider": "fake"}],
    }
    starters: dict[str, Callable[[], Server]] = {
        FORWARDER: lambda: start_forwarder(workdir, upstream),
        GATEWAY: lambda: start_gateway(workdir, write_config(workdir, config), root=root),
    }
    binary = opts.litellm
    if LITELLM in opts.targets and binary and binary.exists():
        starters[LITELLM] = lambda: start_litellm(workdir, upstream, binary)
    elif LITELLM in opts.targets:
        print(f"litellm: skipped (not installed at {binary or DEFAULT_LITELLM}; pass --litellm)")
    targets = {DIRECT: Target(upstream, fake.pid)} if DIRECT in opts.targets else {}
    for name, start in starters.items():
        if name not in opts.targets:
            continue
        try:
            server = start()
        except RuntimeError as exc:
            if name != LITELLM:
                raise
            print(f"litellm: skipped, it did not start: {exc}")
            continue
        servers.append(server)
        targets[name] = Target(server.url + "/v1", server.pid)
    for server in servers:
        print(f"  {server.name}: pid {server.pid}, log {server.log_path}")
    if LITELLM in targets:
        auth = {**JSON_HEADERS, "Authorization": f"Bearer {LITELLM_KEY}"}
        targets[LITELLM] = Target(targets[LITELLM].url, targets[LITELLM].pid, auth)
    return {n: Target(t.url + "/chat/completions", t.pid, t.headers) for n, t in targets.items()}


# --- load ------------------------------------------------------------------------------------


def response_ok(mode: str, status: int, body: bytes) -> bool:
    return status == 200 and (body.endswith(STREAM_END) if mode == "stream" else True)


async def measure(target: Target, cell: Cell, opts: Options) -> Sample:
    request = Request(target.url, BODIES[cell.mode], target.headers)

    def ok(outcome: Outcome) -> bool:
        return response_ok(cell.mode, outcome.status, outcome.body)

    # A fresh pool per measurement: every target starts from the same (warmed) state.
    connector = aiohttp.TCPConnector(limit=cell.concurrency, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=60),
        cookie_jar=aiohttp.DummyCookieJar(),
    ) as session:

        async def run(count: int, seconds: float) -> Sample:
            result = await closed_loop(
                session, lambda _: request, cell.concurrency, count=count, seconds=seconds, ok=ok
            )
            return Sample(**asdict(result.figures()))

        await run(max(opts.warmup, 2 * cell.concurrency), opts.max_seconds / 4)
        cpu_before = cpu_seconds(target.pid)
        sample = await run(opts.requests, opts.max_seconds)
        if sample.count:
            sample.cpu_ms = (cpu_seconds(target.pid) - cpu_before) * 1000 / sample.count
        return sample


async def check_target(target: Target, stats_url: str) -> str | None:
    """Each request of the mix twice; the reason the target is unusable, or None.

    Every request must reach the upstream: a proxy that answered from a cache would be
    measuring something else.
    """
    before = get_json(stats_url)["requests"]
    async with aiohttp.ClientSession() as session:
        for mode, body in [*BODIES.items(), *BODIES.items()]:
            try:
                async with session.post(target.url, data=body, headers=target.headers) as resp:
                    data = await resp.read()
            except aiohttp.ClientError as exc:
                return f"{mode}: {exc}"
            if not response_ok(mode, resp.status, data):
                return f"{mode}: HTTP {resp.status}: {data[:200]!r}"
            if mode == "plain" and json.loads(data)["choices"][0]["message"]["content"] != ANSWER:
                return f"plain: unexpected answer {data[:200]!r}"
    reached = get_json(stats_url)["requests"] - before
    if reached != 2 * len(BODIES):
        return f"{reached} of {2 * len(BODIES)} requests reached the upstream (a cache on?)"
    return None


async def usable(targets: dict[str, Target], stats_url: str) -> dict[str, Target]:
    """Drop a peer proxy that answers wrongly; a broken gateway or forwarder is fatal."""
    out = {}
    for name, target in targets.items():
        problem = await check_target(target, stats_url)
        if problem is None:
            out[name] = target
        elif name == LITELLM:
            print(f"litellm: skipped, bad answer: {problem}")
        else:
            raise RuntimeError(f"{name} answered wrongly: {problem}")
    return out


async def bench(targets: dict[str, Target], stats_url: str, opts: Options) -> Results:
    targets = await usable(targets, stats_url)
    results = Results()
    names = list(targets)
    for round_no in range(opts.rounds):
        for cell in (Cell(m, c) for c in opts.concurrency for m in opts.modes):
            shift = round_no % len(names)  # rotated: each target leads a round in turn
            for name in names[shift:] + names[:shift]:
                sample = await measure(targets[name], cell, opts)
                results.add(name, cell, sample)
                print(
                    f"  round {round_no + 1}/{opts.rounds} {cell.mode:6} c={cell.concurrency:<3}"
                    f" {name:9} p50 {sample.p50_ms:8.2f} ms  p99 {sample.p99_ms:8.2f} ms"
                    f"  {sample.rps:8.1f} req/s  cpu {sample.cpu_ms:6.3f} ms/req"
                    f"  n={sample.count} err={sample.errors}",
                    flush=True,
                )
    return results


# --- report ----------------------------------------------------------------------------------


def paired(
    results: Results, target: str, base: str, cell: Cell, fn: Callable[[Sample, Sample], float]
) -> float:
    """Median over rounds of fn(target's sample, base's sample) from the same round."""
    pairs = zip(results.get(target, cell), results.get(base, cell), strict=False)
    return median([fn(t, b) for t, b in pairs])


@dataclass(frozen=True)
class Row:
    target: str
    mode: str
    concurrency: int
    p50_ms: float
    p99_ms: float
    rps: float
    added_p50_ms: float
    rps_vs_direct: float
    rps_vs_forwarder: float
    p99_vs_forwarder: float
    cpu_ms: float
    errors: int


def row(results: Results, name: str, cell: Cell) -> Row:
    samples = results.get(name, cell)

    def vs(base: str, fn: Callable[[Sample, Sample], float]) -> float:
        return paired(results, name, base, cell, fn)

    return Row(
        target=name,
        mode=cell.mode,
        concurrency=cell.concurrency,
        p50_ms=median([s.p50_ms for s in samples]),
        p99_ms=median([s.p99_ms for s in samples]),
        rps=median([s.rps for s in samples]),
        added_p50_ms=vs(DIRECT, lambda t, b: t.p50_ms - b.p50_ms),
        rps_vs_direct=vs(DIRECT, lambda t, b: ratio(t.rps, b.rps)),
        rps_vs_forwarder=vs(FORWARDER, lambda t, b: ratio(t.rps, b.rps)),
        p99_vs_forwarder=vs(FORWARDER, lambda t, b: ratio(t.p99_ms, b.p99_ms)),
        cpu_ms=median([s.cpu_ms for s in samples]),
        errors=sum(s.errors for s in samples),
    )


HEADER = [
    "target",
    "mode",
    "conc",
    "p50 ms",
    "p99 ms",
    "req/s",
    "+p50 ms vs direct",
    "req/s vs direct",
    "req/s vs forwarder",
    "p99 vs forwarder",
    "CPU ms/req",
    "errors",
]  # one column per Row field, in order
SPECS = {"rps": ".0f", "added_p50_ms": "+.2f", "cpu_ms": ".3f"}  # other floats: .2f


def table(rows: list[Row]) -> str:
    def cell(name: str, value: object) -> object:
        return fmt(value, SPECS.get(name, ".2f")) if isinstance(value, float) else value

    names = [f.name for f in fields(Row)]
    return markdown_table(HEADER, [[cell(n, getattr(r, n)) for n in names] for r in rows])


# The three targets for the gateway: (concurrency, what, field, unit, limit, higher wins)
TARGETS = (
    (1, "added p50 vs direct", "added_p50_ms", " ms", 1.0, False),
    (64, "req/s vs forwarder", "rps_vs_forwarder", "x", 0.8, True),
    (64, "p99 vs forwarder", "p99_vs_forwarder", "x", 1.3, False),
)


def verdicts(rows: list[Row]) -> Iterator[str]:
    for r in (r for r in rows if r.target == GATEWAY):
        for concurrency, what, name, unit, limit, higher in TARGETS:
            if r.concurrency != concurrency:
                continue
            label = f"c={concurrency:<2} {r.mode:6} {what}"
            value = getattr(r, name)
            if math.isnan(value):
                yield f"SKIP  {label}: not measured"
                continue
            ok = value >= limit if higher else value <= limit
            bound = ">=" if higher else "<="
            verdict = "PASS" if ok else "FAIL"
            yield f"{verdict}  {label}: {value:.2f}{unit} (target {bound} {limit}{unit})"


def print_report(results: Results, names: list[str], cells: list[Cell]) -> list[Row]:
    rows = [row(results, n, c) for c in cells for n in names if results.get(n, c)]
    rounds = max((len(v) for v in results.samples.values()), default=0)
    print(
        f"Medians over {rounds} round(s); ratios and +p50 are paired per round; "
        "CPU ms/req is the target's own process (for direct: the fake upstream).\n"
    )
    print(table(rows))
    print()
    for line in verdicts(rows):
        print(line)
    return rows


def load_results(paths: tuple[Path, ...]) -> Results:
    """Samples saved by --json, the rounds of every file pooled (in file order)."""
    results = Results()
    for path in paths:
        for key, samples in json.loads(path.read_text())["samples"].items():
            target, mode, concurrency = key.split("/")
            for sample in samples:
                results.add(target, Cell(mode, int(concurrency)), Sample(**sample))
    return results


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small counts, one round (smoke)")
    p.add_argument("--rounds", type=int, help="rounds over every cell (default 5)")
    p.add_argument("--requests", type=int, help="measured requests per cell (default 1500)")
    p.add_argument("--warmup", type=int, help="warm-up requests per cell (default 150)")
    p.add_argument("--max-seconds", type=float, help="cap on one measurement (default 6)")
    p.add_argument("--concurrency", default="1,64", help="comma-separated (default 1,64)")
    p.add_argument("--modes", default="plain,stream", help="plain,stream or one of them")
    p.add_argument(
        "--targets",
        default=f"{DIRECT},{FORWARDER},{GATEWAY},{LITELLM}",
        help="which paths to measure (litellm only when installed)",
    )
    p.add_argument("--litellm", type=Path, help=f"litellm binary (default {DEFAULT_LITELLM})")
    p.add_argument("--no-litellm", action="store_true", help="do not measure LiteLLM")
    p.add_argument("--json", type=Path, help="also write every sample to this file")
    p.add_argument(
        "--report",
        nargs="+",
        type=Path,
        default=(),
        metavar="JSON",
        help="run nothing: print the table of earlier --json files, their rounds pooled",
    )
    p.add_argument(
        "--gateway-commit",
        metavar="REV",
        help="measure gateway/ as committed at REV (default: this checkout as is)",
    )
    a = p.parse_args(argv)
    litellm = a.litellm or (DEFAULT_LITELLM if DEFAULT_LITELLM.exists() else None)
    return Options(
        rounds=a.rounds or (1 if a.quick else 5),
        requests=a.requests or (200 if a.quick else 1500),
        warmup=a.warmup if a.warmup is not None else (20 if a.quick else 150),
        max_seconds=a.max_seconds or (4.0 if a.quick else 6.0),
        concurrency=tuple(int(c) for c in a.concurrency.split(",")),
        modes=tuple(m for m in a.modes.split(",") if m in BODIES),
        targets=tuple(a.targets.split(",")),
        litellm=None if a.no_litellm else litellm,
        json_out=a.json,
        gateway_commit=a.gateway_commit,
        report=tuple(a.report),
    )


def git(*args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(HERE.parent), *args], capture_output=True, check=True
    ).stdout


def gateway_source(rev: str | None, tmp: Path) -> tuple[Path, str]:
    """The directory to import `gateway` from, and which code that is, so results name it.

    With a revision, its gateway/ is exported (git archive): uncommitted work in the checkout
    then cannot leak into the numbers.
    """
    if rev is None:
        try:
            commit = git("rev-parse", "--short", "HEAD").decode().strip()
            dirty = git("status", "--porcelain", "--", "gateway").strip()
        except (OSError, subprocess.CalledProcessError):
            return HERE.parent, "this checkout"
        return HERE.parent, f"checkout at {commit}" + (" + uncommitted changes" if dirty else "")
    commit = git("rev-parse", "--short", f"{rev}^{{commit}}").decode().strip()
    with tarfile.open(fileobj=io.BytesIO(git("archive", commit, "gateway"))) as archive:
        archive.extractall(tmp / "src", filter="data")
    return tmp / "src", f"commit {commit}"


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.report:
        results = load_results(opts.report)
        names = [n for n in (DIRECT, FORWARDER, GATEWAY, LITELLM) if results.has(n)]
        print_report(results, names, results.cells())
        return 0
    print(
        f"overhead bench: {opts.rounds} round(s), {opts.requests} requests per cell "
        f"(+{opts.warmup} warm-up, cap {opts.max_seconds:.0f} s), concurrency "
        f"{','.join(map(str, opts.concurrency))}, modes {','.join(opts.modes)}"
    )
    servers: list[Server] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="overhead-bench-") as tmp:
        root, source = gateway_source(opts.gateway_commit, Path(tmp))
        print(f"  code measured: {source}; {os.cpu_count()} cpus, load average {load_average()}")
        try:
            targets = start_servers(Path(tmp), root, opts, servers)
            stats_url = servers[0].url + "/_fake/stats"
            results = uvloop.run(bench(targets, stats_url, opts))
        finally:
            for server in reversed(servers):
                server.stop()
    print(f"\ndone in {time.monotonic() - started:.0f} s; load average {load_average()}")
    names = [n for n in (DIRECT, FORWARDER, GATEWAY, LITELLM) if results.has(n)]
    rows = print_report(results, names, [Cell(m, c) for c in opts.concurrency for m in opts.modes])
    if opts.json_out:
        samples = {
            "/".join(map(str, k)): [asdict(s) for s in v] for k, v in results.samples.items()
        }
        options = {k: str(v) for k, v in asdict(opts).items()}
        data = {"options": options, "rows": [asdict(r) for r in rows], "samples": samples}
        opts.json_out.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
