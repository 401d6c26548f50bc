"""What translating costs: the same question through `/v1/responses` (store off and on) and
`/v1/completions` against `/v1/chat/completions`, plain and streamed, on one gateway.

    python bench/responses_overhead.py                    # defaults: about 2-3 minutes
    python bench/responses_overhead.py --quick            # smoke check, about 20 s
    python bench/responses_overhead.py --rounds 5 --json responses.json

Both endpoints are translated to the gateway's chat form and back (gateway/responses/,
gateway/completions/), so each cell here is a chat request with a translation on either side;
the chat cell of the same kind and concurrency is its baseline. One gateway process (cache,
routing and knowledge bases off, access log off; stored Responses in an SQLite file in the
run's temp dir, written on the store's thread "responses-db" before the answer is sent) in
front of the fake upstream in its own process, which answers every cell with the same 33-word
text, one word per stream chunk. Every cell asks the same question: chat's one user message,
Responses' `input` string, completions' `prompt` (each becomes the same chat body).

Each round runs, for each kind (plain, streamed) and concurrency, every endpoint back to back
in an order rotated by one each round, so machine noise lands on all alike. The load comes
from this process (closed loop, aiohttp on uvloop, one pooled connection per worker); the
gateway's CPU per request is its own process's user + system time from /proc, the steadiest
figure on shared cores. Ratios are paired within a round (endpoint vs chat, same cell), then
the median over rounds is taken, as every other figure is.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script: the checkout's gateway package

import aiohttp  # noqa: E402
import uvloop  # noqa: E402

from gateway.testing.harness.configs import write_config  # noqa: E402
from gateway.testing.harness.gitrev import checkout_state  # noqa: E402
from gateway.testing.harness.load import (  # noqa: E402
    JSON_HEADERS,
    Outcome,
    Request,
    RunFigures,
    closed_loop,
    session_for,
)
from gateway.testing.harness.options import listed, option, parse_options  # noqa: E402
from gateway.testing.harness.process import Server  # noqa: E402
from gateway.testing.harness.procstat import (  # noqa: E402
    CpuWatch,
    load_average,
    machine_line,
)
from gateway.testing.harness.results import save_json  # noqa: E402
from gateway.testing.harness.starters import start_fake_upstream, start_gateway  # noqa: E402
from gateway.testing.harness.stats import fmt, median, ratio  # noqa: E402
from gateway.testing.harness.sync_http import get_json, post_json  # noqa: E402
from gateway.testing.harness.tables import markdown_table  # noqa: E402

MODEL = "bench-model"
QUESTION = "Which drill bit do I need for a 6 mm wall plug in brick?"
# 33 words: the fake streams one word per chunk, so a stream has 33 content chunks.
ANSWER = (
    "Use a 6 mm masonry bit with the drill in hammer mode, drill slightly deeper than the "
    "plug, blow out the dust, then tap the plug in flush before you drive the screw."
)
PLAIN, STREAM = "plain", "stream"
CHAT, RESPONSES, STORED, COMPLETIONS = "chat", "responses", "responses+store", "completions"
ENDPOINTS = (CHAT, RESPONSES, STORED, COMPLETIONS)
PATHS = {
    CHAT: "/v1/chat/completions",
    RESPONSES: "/v1/responses",
    STORED: "/v1/responses",
    COMPLETIONS: "/v1/completions",
}
CHAT_END = b"data: [DONE]\n\n"  # chat and completions streams
RESPONSES_END = b"event: response.completed\n"  # the last event of a Responses stream


def request_body(endpoint: str, stream: bool) -> bytes:
    """The same question in each endpoint's own form."""
    body: dict[str, object] = {"model": MODEL, "stream": stream, "temperature": 0.2}
    if endpoint == CHAT:
        body["messages"] = [{"role": "user", "content": QUESTION}]
    elif endpoint == COMPLETIONS:
        body["prompt"] = QUESTION
    else:
        body |= {"input": QUESTION, "store": endpoint == STORED}
    return json.dumps(body).encode()


@dataclass
class Options:
    """Counts left at None take their --quick or full default."""

    quick: bool = option(False, "small counts, one round (smoke)")
    rounds: int | None = option(None, "rounds over every cell (default 3)")
    requests: int | None = option(None, "measured requests per cell, at most (default 6000)")
    warmup: int | None = option(None, "warm-up requests per cell (default 100)")
    max_seconds: float | None = option(None, "cap on one measurement, s (default 2.5)")
    concurrency: tuple[int, ...] = option((1, 16), "closed-loop workers", parse=listed(int))
    json_out: Path | None = option(None, "also write every sample to this file", flag="--json")

    def __post_init__(self) -> None:
        quick = self.quick
        self.rounds = self.rounds or (1 if quick else 3)
        self.requests = self.requests or (1000 if quick else 6000)
        self.warmup = self.warmup if self.warmup is not None else (20 if quick else 100)
        self.max_seconds = self.max_seconds or (1.0 if quick else 2.5)


@dataclass(frozen=True)
class Cell:
    kind: str  # plain or stream
    concurrency: int


@dataclass
class Sample(RunFigures):
    """One endpoint in one cell in one round (saved as is by --json)."""

    cpu_ms: float = math.nan  # the gateway process's CPU time per request
    threads_ms: dict[str, float] = field(default_factory=dict)  # the same by thread name


@dataclass
class Results:
    # (endpoint, kind, concurrency) -> one Sample per round
    samples: dict[tuple[str, str, int], list[Sample]] = field(default_factory=dict)

    def add(self, endpoint: str, cell: Cell, sample: Sample) -> None:
        self.samples.setdefault((endpoint, cell.kind, cell.concurrency), []).append(sample)

    def get(self, endpoint: str, cell: Cell) -> list[Sample]:
        return self.samples.get((endpoint, cell.kind, cell.concurrency), [])


# --- servers ---------------------------------------------------------------------------------


def start_servers(workdir: Path, servers: list[Server]) -> str:
    """The fake upstream and the gateway, each appended to `servers` once it runs; the
    gateway's base URL."""
    fake = start_fake_upstream(workdir)
    servers.append(fake)
    post_json(fake.url + "/_fake/config", {"defaults": {"content": ANSWER, "words_per_chunk": 1}})
    store = {"type": "sqlite", "path": str(workdir / "data" / "responses.sqlite3")}
    config = {  # no cache, routing or knowledge_bases section: all off unless configured
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "providers": {"fake": {"type": "openai", "base_url": fake.url + "/v1"}},
        "models": [{"name": MODEL, "provider": "fake"}],
        "responses": {"store": store},
    }
    gateway = start_gateway(workdir, write_config(workdir, config))
    servers.append(gateway)
    for server in servers:
        print(f"  {server.name}: pid {server.pid}, log {server.log_path}")
    return gateway.url


# --- checks ----------------------------------------------------------------------------------


def complete(endpoint: str, kind: str, status: int, body: bytes) -> bool:
    """A 200, and for a stream one that ran to its last event."""
    if kind == PLAIN or status != 200:
        return status == 200
    end = RESPONSES_END if endpoint in (RESPONSES, STORED) else CHAT_END
    return end in body[-4096:]


def answered(endpoint: str, kind: str) -> Callable[[Outcome], bool]:
    """A load run's check."""
    return lambda o: complete(endpoint, kind, o.status, o.body)


def plain_text(endpoint: str, data: dict[str, object]) -> object:
    if endpoint == CHAT:
        return data["choices"][0]["message"]["content"]  # type: ignore[index]
    if endpoint == COMPLETIONS:
        return data["choices"][0]["text"]  # type: ignore[index]
    return data["output"][0]["content"][0]["text"]  # type: ignore[index]


def stream_deltas(endpoint: str, body: bytes) -> list[str]:
    """The text pieces of a stream, in order."""
    out: list[str] = []
    for line in body.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        event = json.loads(line[6:])
        if endpoint in (RESPONSES, STORED):
            if event.get("type") == "response.output_text.delta":
                out.append(event["delta"])
        elif event.get("choices"):
            choice = event["choices"][0]
            piece = (
                choice.get("text") if endpoint == COMPLETIONS else choice["delta"].get("content")
            )
            if piece:
                out.append(piece)
    return out


async def check_endpoints(base: str, stats_url: str) -> None:
    """Each endpoint, plain and streamed, gives the fake's answer from the upstream (not from
    a cache), a stream in ~30 pieces; a stored Response can be read back, an unstored one not.
    Raises on anything else: the figures would measure something other than the translation."""
    before = get_json(stats_url)["requests"]
    async with aiohttp.ClientSession() as session:
        for endpoint in ENDPOINTS:
            url = base + PATHS[endpoint]
            async with session.post(url, data=request_body(endpoint, False)) as resp:
                data = await resp.json(content_type=None)
            if resp.status != 200 or plain_text(endpoint, data) != ANSWER:
                raise RuntimeError(f"{endpoint} plain: HTTP {resp.status}: {str(data)[:300]}")
            if endpoint in (RESPONSES, STORED):
                async with session.get(f"{base}/v1/responses/{data['id']}") as got:
                    if got.status != (200 if endpoint == STORED else 404):
                        raise RuntimeError(f"{endpoint}: GET its response: HTTP {got.status}")
            async with session.post(url, data=request_body(endpoint, True)) as resp:
                body = await resp.read()
            pieces = stream_deltas(endpoint, body)
            if not complete(endpoint, STREAM, resp.status, body):
                raise RuntimeError(f"{endpoint} stream: HTTP {resp.status}: {body[-300:]!r}")
            if "".join(pieces) != ANSWER or len(pieces) < 25:
                raise RuntimeError(f"{endpoint} stream: {len(pieces)} pieces: {pieces[:5]}")
            print(f"  {endpoint:15} checked: plain answer, stream of {len(pieces)} text deltas")
    reached = get_json(stats_url)["requests"] - before
    if reached != 2 * len(ENDPOINTS):
        raise RuntimeError(f"{reached} of {2 * len(ENDPOINTS)} requests reached the upstream")


# --- load ------------------------------------------------------------------------------------


async def measure(base: str, pid: int, endpoint: str, cell: Cell, opts: Options) -> Sample:
    """Warm-up, then the measured run, the gateway's CPU time (by thread) read around it."""
    assert opts.requests is not None and opts.warmup is not None and opts.max_seconds
    stream = cell.kind == STREAM
    request = Request(base + PATHS[endpoint], request_body(endpoint, stream), JSON_HEADERS)
    ok = answered(endpoint, cell.kind)
    async with session_for(cell.concurrency) as session:  # a fresh pool per measurement

        async def run(count: int, seconds: float) -> RunFigures:
            result = await closed_loop(
                session, lambda _: request, cell.concurrency, count=count, seconds=seconds, ok=ok
            )
            return result.figures()

        await run(max(opts.warmup, 2 * cell.concurrency), opts.max_seconds / 4)
        watch = CpuWatch(pid)
        figures = await run(opts.requests, opts.max_seconds)
        sample = Sample(**asdict(figures))
        sample.cpu_ms, sample.threads_ms = watch.per_request(sample.count)
    return sample


def cells(opts: Options) -> list[Cell]:
    return [Cell(kind, c) for c in opts.concurrency for kind in (PLAIN, STREAM)]


async def bench(base: str, pid: int, stats_url: str, opts: Options) -> Results:
    assert opts.rounds is not None
    await check_endpoints(base, stats_url)
    results = Results()
    for round_no in range(opts.rounds):
        shift = round_no % len(ENDPOINTS)  # rotated: each endpoint leads a round in turn
        for cell in cells(opts):
            for endpoint in ENDPOINTS[shift:] + ENDPOINTS[:shift]:
                sample = await measure(base, pid, endpoint, cell, opts)
                results.add(endpoint, cell, sample)
                print(
                    f"  round {round_no + 1}/{opts.rounds} {cell.kind:6} c={cell.concurrency:<3}"
                    f" {endpoint:15} p50 {sample.p50_ms:7.2f} ms  {sample.rps:7.1f} req/s"
                    f"  cpu {sample.cpu_ms:6.3f} ms/req  n={sample.count} err={sample.errors}",
                    flush=True,
                )
    return results


# --- report ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    endpoint: str
    kind: str
    concurrency: int
    cpu_ms: float
    cpu_vs_chat: float
    p50_ms: float
    p50_vs_chat: float
    rps: float
    rps_vs_chat: float
    loop_ms: float  # the event loop's thread ("python"), CPU per request
    store_thread_ms: float  # the response store's thread ("responses-db"), CPU per request
    errors: int


HEADER = [
    "endpoint",
    "kind",
    "conc",
    "CPU ms/req",
    "CPU vs chat",
    "p50 ms",
    "p50 vs chat",
    "req/s",
    "req/s vs chat",
    "loop ms/req",
    "store thread ms/req",
    "errors",
]  # one column per Row field, in order
SPECS = {"cpu_ms": ".3f", "loop_ms": ".3f", "store_thread_ms": ".3f", "rps": ".0f"}  # others .2f


def row(results: Results, endpoint: str, cell: Cell) -> Row:
    samples, chat = results.get(endpoint, cell), results.get(CHAT, cell)

    def vs_chat(value: Callable[[Sample], float]) -> float:
        pairs = zip(samples, chat, strict=False)  # the same round's chat sample
        return median([ratio(value(s), value(c)) for s, c in pairs])

    return Row(
        endpoint=endpoint,
        kind=cell.kind,
        concurrency=cell.concurrency,
        cpu_ms=median([s.cpu_ms for s in samples]),
        cpu_vs_chat=vs_chat(lambda s: s.cpu_ms),
        p50_ms=median([s.p50_ms for s in samples]),
        p50_vs_chat=vs_chat(lambda s: s.p50_ms),
        rps=median([s.rps for s in samples]),
        rps_vs_chat=vs_chat(lambda s: s.rps),
        loop_ms=median([s.threads_ms.get("python", math.nan) for s in samples]),
        store_thread_ms=median([s.threads_ms.get("responses-db", 0.0) for s in samples]),
        errors=sum(s.errors for s in samples),
    )


def table(rows: list[Row]) -> str:
    def cell(name: str, value: object) -> object:
        return fmt(value, SPECS.get(name, ".2f")) if isinstance(value, float) else value

    names = [f.name for f in fields(Row)]
    return markdown_table(HEADER, [[cell(n, getattr(r, n)) for n in names] for r in rows])


def print_report(results: Results, opts: Options) -> list[Row]:
    rows = [row(results, e, c) for c in cells(opts) for e in ENDPOINTS if results.get(e, c)]
    print(
        f"\nMedians over {opts.rounds} round(s); 'vs chat' ratios are paired per round with "
        "the chat cell of the same kind and concurrency; CPU is the gateway process's own.\n"
    )
    print(table(rows))
    return rows


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(Options, argv, __doc__)
    source, machine = checkout_state("gateway"), machine_line()
    print(machine)
    print(
        f"responses/completions translation bench: {opts.rounds} round(s), {opts.requests} "
        f"requests per cell (+{opts.warmup} warm-up, cap {opts.max_seconds:g} s), "
        f"concurrency {','.join(map(str, opts.concurrency))}; code measured: {source}"
    )
    servers: list[Server] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="responses-bench-") as tmp:
        try:
            base = start_servers(Path(tmp), servers)
            stats_url = servers[0].url + "/_fake/stats"
            results = uvloop.run(bench(base, servers[-1].pid, stats_url, opts))
        finally:
            for server in reversed(servers):
                server.stop()
    print(f"\ndone in {time.monotonic() - started:.0f} s; load average {load_average()}")
    rows = print_report(results, opts)
    if opts.json_out:
        samples = {"/".join(map(str, k)): v for k, v in results.samples.items()}
        save_json(
            opts.json_out,
            machine=machine,
            options=opts,
            code=source,
            rows=rows,
            samples=samples,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
