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
import asyncio
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import uvloop
from procs import (
    Server,
    cpu_seconds,
    fmt,
    free_port,
    http_ok,
    load_average,
    percentile,
    post_json,
    pythonpath,
)

HERE = Path(__file__).resolve().parent
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
HEADERS = {"Content-Type": "application/json"}
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
    headers: dict[str, str] = field(default_factory=lambda: HEADERS)


@dataclass(frozen=True)
class Cell:
    mode: str
    concurrency: int


@dataclass
class Sample:
    """One cell against one target in one round."""

    count: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_ms: float = math.nan  # CPU time of the target's process per request

    @property
    def rps(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


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


@dataclass(frozen=True)
class Workspace:
    """Where the servers keep config and logs, and which gateway checkout they run."""

    dir: Path
    gateway_root: Path

    def python(self, name: str, *argv: str) -> Server:
        """One of our Python servers, importing `gateway` from `gateway_root`."""
        # PYTHONPATH beats an editable install, so an exported older tree can be measured too.
        env = {"PYTHONPATH": pythonpath(self.gateway_root)}
        return Server(name, [sys.executable, *argv], self.dir, env)


def start_fake(ws: Workspace) -> tuple[Server, str]:
    server = ws.python("fake-upstream", "-m", "gateway.testing.fake_upstream", "--port", "0")
    url = server.wait_ready(server.log_url, 30)
    post_json(url + "/_fake/config", {"defaults": {"content": ANSWER}})
    return server, url + "/v1"


def start_forwarder(ws: Workspace, upstream: str) -> tuple[Server, str]:
    server = ws.python(FORWARDER, str(HERE / "forwarder.py"), "--upstream", upstream, "--port", "0")
    return server, server.wait_ready(server.log_url, 30) + "/v1"


def start_gateway(ws: Workspace, upstream: str) -> tuple[Server, str]:
    # No cache or routing section: both are off unless configured.
    config = ws.dir / "gateway.yaml"
    config.write_text(
        "server: {host: 127.0.0.1, port: 0}\n"
        "providers:\n"
        f"  fake: {{type: openai, base_url: '{upstream}'}}\n"
        f"models:\n  - {{name: {MODEL}, provider: fake}}\n"
    )
    server = ws.python(GATEWAY, "-m", "gateway", "serve", "--config", str(config), "--port", "0")
    return server, server.wait_ready(server.log_url, 60) + "/v1"


def start_litellm(ws: Workspace, upstream: str, binary: Path) -> tuple[Server, str]:
    """LiteLLM proxy with default settings, one `openai/` model pointed at the fake upstream."""
    config = ws.dir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: '{upstream}'\n"
        "      api_key: sk-bench-not-a-key\n"
    )
    port = free_port()
    # The local cost map only skips a startup download that cannot succeed offline.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": LITELLM_KEY}
    server = Server(
        LITELLM,
        [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
        ws.dir,
        env,
    )
    base = f"http://127.0.0.1:{port}"
    server.wait_ready(lambda: base if http_ok(base + "/health/liveliness") else None, 180)
    return server, base + "/v1"


# --- load generation -------------------------------------------------------------------------


def response_ok(mode: str, status: int, body: bytes) -> bool:
    return status == 200 and (body.endswith(STREAM_END) if mode == "stream" else True)


async def run_load(
    session: aiohttp.ClientSession,
    target: Target,
    mode: str,
    concurrency: int,
    count: int,
    max_seconds: float,
) -> Sample:
    """`count` requests from `concurrency` workers (or until `max_seconds`); full bodies read."""
    body = BODIES[mode]
    latencies: list[float] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + max_seconds

    async def worker() -> None:
        nonlocal issued, errors
        while issued < count and time.perf_counter() < deadline:
            issued += 1
            started = time.perf_counter()
            try:
                async with session.post(target.url, data=body, headers=target.headers) as resp:
                    data = await resp.read()
                    ok = response_ok(mode, resp.status, data)
            except (TimeoutError, aiohttp.ClientError):
                ok = False
            if ok:
                latencies.append(time.perf_counter() - started)
            else:
                errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    return Sample(
        len(latencies), errors, seconds, percentile(latencies, 50), percentile(latencies, 99)
    )


async def measure(target: Target, cell: Cell, opts: Options) -> Sample:
    # A fresh pool per measurement: every target starts from the same (warmed) state.
    connector = aiohttp.TCPConnector(limit=cell.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
        warmup = max(opts.warmup, 2 * cell.concurrency)
        await run_load(session, target, cell.mode, cell.concurrency, warmup, opts.max_seconds / 4)
        cpu_before = cpu_seconds(target.pid)
        sample = await run_load(
            session, target, cell.mode, cell.concurrency, opts.requests, opts.max_seconds
        )
        if sample.count:
            sample.cpu_ms = (cpu_seconds(target.pid) - cpu_before) * 1000 / sample.count
        return sample


async def check_target(target: Target, stats_url: str) -> str | None:
    """Each request of the mix twice; the reason the target is unusable, or None.

    Every request must reach the upstream: a proxy that answered from a cache would be
    measuring something else.
    """
    async with aiohttp.ClientSession() as session:
        before = await upstream_requests(session, stats_url)
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
        reached = await upstream_requests(session, stats_url) - before
    if reached != 2 * len(BODIES):
        return f"{reached} of {2 * len(BODIES)} requests reached the upstream (a cache on?)"
    return None


async def upstream_requests(session: aiohttp.ClientSession, stats_url: str) -> int:
    async with session.get(stats_url) as resp:
        return int((await resp.json())["requests"])


def rotated(items: list[str], by: int) -> list[str]:
    by %= len(items)
    return items[by:] + items[:by]


async def run_rounds(targets: dict[str, Target], opts: Options) -> Results:
    results = Results()
    cells = [Cell(m, c) for c in opts.concurrency for m in opts.modes]
    names = list(targets)
    for round_no in range(opts.rounds):
        for cell in cells:
            for name in rotated(names, round_no):
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


def median_of(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def paired(
    results: Results, target: str, base: str, cell: Cell, fn: Callable[[Sample, Sample], float]
) -> float:
    """Median over rounds of fn(target's sample, base's sample) from the same round."""
    pairs = zip(results.get(target, cell), results.get(base, cell), strict=False)
    return median_of([fn(t, b) for t, b in pairs])


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


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


def summarize(results: Results, targets: list[str], cells: list[Cell]) -> list[Row]:
    rows = []
    for cell in cells:
        for name in targets:
            samples = results.get(name, cell)
            if not samples:
                continue
            rows.append(
                Row(
                    target=name,
                    mode=cell.mode,
                    concurrency=cell.concurrency,
                    p50_ms=median_of([s.p50_ms for s in samples]),
                    p99_ms=median_of([s.p99_ms for s in samples]),
                    rps=median_of([s.rps for s in samples]),
                    added_p50_ms=paired(
                        results, name, DIRECT, cell, lambda t, b: t.p50_ms - b.p50_ms
                    ),
                    rps_vs_direct=paired(
                        results, name, DIRECT, cell, lambda t, b: ratio(t.rps, b.rps)
                    ),
                    rps_vs_forwarder=paired(
                        results, name, FORWARDER, cell, lambda t, b: ratio(t.rps, b.rps)
                    ),
                    p99_vs_forwarder=paired(
                        results, name, FORWARDER, cell, lambda t, b: ratio(t.p99_ms, b.p99_ms)
                    ),
                    cpu_ms=median_of([s.cpu_ms for s in samples]),
                    errors=sum(s.errors for s in samples),
                )
            )
    return rows


def table(rows: list[Row]) -> str:
    head = (
        "| target | mode | conc | p50 ms | p99 ms | req/s | +p50 ms vs direct "
        "| req/s vs direct | req/s vs forwarder | p99 vs forwarder | CPU ms/req | errors |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        lines.append(
            f"| {r.target} | {r.mode} | {r.concurrency} | {fmt(r.p50_ms, '.2f')} "
            f"| {fmt(r.p99_ms, '.2f')} | {fmt(r.rps, '.0f')} | {fmt(r.added_p50_ms, '+.2f')} "
            f"| {fmt(r.rps_vs_direct, '.2f')} | {fmt(r.rps_vs_forwarder, '.2f')} "
            f"| {fmt(r.p99_vs_forwarder, '.2f')} | {fmt(r.cpu_ms, '.3f')} | {r.errors} |"
        )
    return "\n".join(lines)


def verdicts(rows: list[Row]) -> Iterator[str]:
    """The issue's three targets for the gateway, per mode."""
    for r in rows:
        if r.target != GATEWAY:
            continue
        if r.concurrency == 1:
            yield _verdict(
                f"c=1  {r.mode:6} added p50 vs direct",
                r.added_p50_ms,
                " ms",
                1.0,
                higher_is_better=False,
            )
        if r.concurrency == 64:
            yield _verdict(
                f"c=64 {r.mode:6} req/s vs forwarder",
                r.rps_vs_forwarder,
                "x",
                0.8,
                higher_is_better=True,
            )
            yield _verdict(
                f"c=64 {r.mode:6} p99 vs forwarder",
                r.p99_vs_forwarder,
                "x",
                1.3,
                higher_is_better=False,
            )


def _verdict(what: str, value: float, unit: str, limit: float, higher_is_better: bool) -> str:
    if math.isnan(value):
        return f"SKIP  {what}: not measured"
    ok = value >= limit if higher_is_better else value <= limit
    bound = ">=" if higher_is_better else "<="
    return f"{'PASS' if ok else 'FAIL'}  {what}: {value:.2f}{unit} (target {bound} {limit}{unit})"


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one round (smoke)")
    parser.add_argument("--rounds", type=int, help="rounds over every cell (default 5)")
    parser.add_argument("--requests", type=int, help="measured requests per cell (default 1500)")
    parser.add_argument("--warmup", type=int, help="warm-up requests per cell (default 150)")
    parser.add_argument(
        "--max-seconds", type=float, help="cap on one measurement, for slow targets (default 6)"
    )
    parser.add_argument("--concurrency", default="1,64", help="comma-separated (default 1,64)")
    parser.add_argument("--modes", default="plain,stream", help="plain,stream or one of them")
    parser.add_argument(
        "--targets",
        default=f"{DIRECT},{FORWARDER},{GATEWAY},{LITELLM}",
        help="which paths to measure (litellm only when installed)",
    )
    parser.add_argument(
        "--litellm", type=Path, help=f"litellm binary (default {DEFAULT_LITELLM} if it exists)"
    )
    parser.add_argument("--no-litellm", action="store_true", help="do not measure LiteLLM")
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    parser.add_argument(
        "--report",
        nargs="+",
        type=Path,
        default=(),
        metavar="JSON",
        help="run nothing: print the table of earlier --json files, their rounds pooled",
    )
    parser.add_argument(
        "--gateway-commit",
        metavar="REV",
        help="measure gateway/ as committed at REV (default: this checkout as is)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    litellm = (
        None
        if args.no_litellm
        else args.litellm or (DEFAULT_LITELLM if DEFAULT_LITELLM.exists() else None)
    )
    return Options(
        rounds=args.rounds or (1 if quick else 5),
        requests=args.requests or (200 if quick else 1500),
        warmup=args.warmup if args.warmup is not None else (20 if quick else 150),
        max_seconds=args.max_seconds or (4.0 if quick else 6.0),
        concurrency=tuple(int(c) for c in args.concurrency.split(",")),
        modes=tuple(m for m in args.modes.split(",") if m in BODIES),
        targets=tuple(args.targets.split(",")),
        litellm=litellm,
        json_out=args.json,
        gateway_commit=args.gateway_commit,
        report=tuple(args.report),
    )


def start_servers(
    ws: Workspace, opts: Options, servers: list[Server]
) -> tuple[dict[str, Target], str]:
    """Start what `opts` asks for, appending each server to `servers` as soon as it runs.
    Returns the targets and the fake upstream's base URL."""
    fake, upstream = start_fake(ws)
    servers.append(fake)
    # name -> (base URL, pid of the process answering there)
    urls = {DIRECT: (upstream, fake.proc.pid)} if DIRECT in opts.targets else {}
    starters: list[tuple[str, Callable[[], tuple[Server, str]]]] = [
        (FORWARDER, lambda: start_forwarder(ws, upstream)),
        (GATEWAY, lambda: start_gateway(ws, upstream)),
    ]
    binary = opts.litellm
    if LITELLM in opts.targets:
        if binary and binary.exists():
            starters.append((LITELLM, lambda: start_litellm(ws, upstream, binary)))
        else:
            print(
                f"litellm: skipped (not installed at {opts.litellm or DEFAULT_LITELLM}; "
                "pass --litellm PATH)"
            )
    for name, start in starters:
        if name not in opts.targets:
            continue
        try:
            server, base = start()
        except RuntimeError as exc:
            if name != LITELLM:
                raise
            print(f"litellm: skipped, it did not start: {exc}")
            continue
        servers.append(server)
        urls[name] = (base, server.proc.pid)
    for server in servers:
        print(f"  {server.name}: pid {server.proc.pid}, log {server.log_path}")
    litellm_auth = {**HEADERS, "Authorization": f"Bearer {LITELLM_KEY}"}
    targets = {
        name: Target(base + "/chat/completions", pid, litellm_auth if name == LITELLM else HEADERS)
        for name, (base, pid) in urls.items()
    }
    return targets, upstream


async def usable(targets: dict[str, Target], upstream: str) -> dict[str, Target]:
    """Drop a peer proxy that answers wrongly; a broken gateway or forwarder is fatal."""
    stats_url = upstream.removesuffix("/v1") + "/_fake/stats"
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


async def bench(started: tuple[dict[str, Target], str], opts: Options) -> tuple[list[str], Results]:
    targets = await usable(*started)
    return list(targets), await run_rounds(targets, opts)


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
            ws = Workspace(Path(tmp), root)
            names, results = uvloop.run(bench(start_servers(ws, opts, servers), opts))
        finally:
            for server in reversed(servers):
                server.stop()
    print(f"\ndone in {time.monotonic() - started:.0f} s; load average {load_average()}")
    rows = print_report(results, names, [Cell(m, c) for c in opts.concurrency for m in opts.modes])
    if opts.json_out:
        opts.json_out.write_text(
            json.dumps(
                {
                    "options": {k: str(v) for k, v in asdict(opts).items()},
                    "rows": [asdict(r) for r in rows],
                    "samples": {
                        "/".join(map(str, k)): [asdict(s) for s in v]
                        for k, v in results.samples.items()
                    },
                },
                indent=1,
            )
        )
    return 0


def print_report(results: Results, names: list[str], cells: list[Cell]) -> list[Row]:
    rows = summarize(results, names, cells)
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


if __name__ == "__main__":
    sys.exit(main())
