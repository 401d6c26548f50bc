"""Tenant isolation under load, with every feature on at once: no answer may reach the wrong
request, no request may end in a 500, none may hang (the exit status is 1 when one does).

    python bench/isolation.py                     # single process, then 3 replicas + nginx
    python bench/isolation.py --target single --embedder hash --requests 4000
    python bench/isolation.py --json out.json     # also save the report

A fake upstream with random faults (gateway/testing/harness/random_faults.py: 500s, slow and
too-slow answers, malformed bodies, cut streams, bad tool calls) behind one gateway (SQLite
cache) or `--replicas` sharing one redis-server behind nginx; every gateway with tenants, the
cache, the routing alias `auto`, the tool guard, retries, breakers, a deadline and three
policies (docs/RELIABILITY.md). `--clients` clients (client i is tenant i mod `--tenants`) each
send their share of `--requests` in turn: plain or streamed, with or without tools, some
bypassing the cache or too hot for it, questions drawn with repeats, some reworded.

Every request's `user` field is `<tenant>.r<request id>` and the fake answers
`Echo[<user>]: <last user message>`, so every answer names the request that reached the
upstream. The last user message ends in `[ref q017]` (asked by every tenant in the same words,
so a leak would be an exact hit) or `[ref t03.q018]` (a tenant's own). A miss must carry its
own id; a hit may carry another request's if it is the same tenant's, same question, same
scope (served model, tools), one whose answer may be stored, and the text is its exact answer.
Anything else is a contamination (CONTAMINATIONS); answers without a marker are counted by
kind (level 4, tool calls stripped by the guard, streams cut by the upstream).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import secrets
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cache_questions (also for tests)

from cache_questions import FILLER, PAIRS

from gateway.testing.harness import random_faults
from gateway.testing.harness.configs import openai_provider, write_config
from gateway.testing.harness.gateways import embedder_loaded, start_gateways
from gateway.testing.harness.load import Outcome, Request, send, session_for
from gateway.testing.harness.nginx import balancers, start_nginx
from gateway.testing.harness.options import option, parse_options
from gateway.testing.harness.process import Server
from gateway.testing.harness.procstat import load_average
from gateway.testing.harness.random_faults import Faults
from gateway.testing.harness.redis_server import RedisServer
from gateway.testing.harness.replies import parse_reply
from gateway.testing.harness.results import save_json
from gateway.testing.harness.starters import listening, python_server
from gateway.testing.harness.stats import fmt, percentile
from gateway.testing.harness.sync_http import get_json
from gateway.testing.harness.tables import markdown_table

ADMIN_KEY = "isolation-bench-admin-key"
TARGETS = ("single", "replicas")
HUNG_GRACE = 5.0  # a request not finished within its deadline + this is hung
STRIPPED_PREFIX = "I could not make a valid tool call"
UNAVAILABLE_PREFIX = "The assistant is temporarily unavailable"
ECHO = re.compile(r"Echo\[([^\]]*)\]: ")
TAG = re.compile(r"^(t\d+)\.r(\d+)$")
CONTAMINATIONS = ("cross_tenant", "wrong_question", "foreign_on_miss", "wrong_scope", "corrupt")
SYSTEM = "You are a helpful assistant. Answer briefly."
# (question, a rewording or None), every one distinct; PAIRS' rewordings give semantic hits.
QUESTIONS: list[tuple[str, str | None]] = [*PAIRS, *((q, None) for q in FILLER)]


def tool(name: str, description: str, properties: dict[str, Any], **schema: Any) -> Any:
    parameters = {"type": "object", "properties": properties, "required": ["query"], **schema}
    function = {"name": name, "description": description, "parameters": parameters}
    return {"type": "function", "function": function}


QUERY = {"query": {"type": "string"}}
TOOLS = [
    tool("lookup", "Look a question up in the knowledge base.", QUERY, additionalProperties=False),
    tool("convert", "Convert a length.", QUERY | {"unit": {"enum": ["m", "ft"]}}),
]


# --- options and the request plan -------------------------------------------------------------


@dataclass
class Options:
    target: str = option("both", "where the load goes", choices=("single", "replicas", "both"))
    clients: int = option(200, "concurrent clients (client i is tenant i mod --tenants)")
    tenants: int = option(20, "tenants, at most --clients")
    requests: int = option(20_000, "requests per target")
    questions: int = option(60, "the pool each tenant draws from (at most 200)")
    embedder: str = option("minilm", "the cache's embedder", choices=("minilm", "hash"))
    replicas: int = option(3, "gateway replicas behind nginx (--target replicas)")
    deadline: float = option(10.0, "x-gateway-timeout, seconds")
    seed: int = option(1, "the request plan and the faults")
    faults: Faults = field(default_factory=Faults, metadata={"cli": False})
    json_out: Path | None = option(None, "also write the report here", flag="--json")
    quiet: bool = option(False, cli=False)
    # Default: a fresh temporary directory, removed afterwards.
    workdir: Path | None = option(None, "keep logs and stores in this directory", flag="--keep")

    def __post_init__(self) -> None:
        if self.tenants > self.clients:
            raise ValueError("--tenants must not exceed --clients")
        if self.questions > len(QUESTIONS):
            raise ValueError(f"--questions is at most {len(QUESTIONS)}")

    @property
    def tenant_names(self) -> list[str]:
        return [f"t{i:02d}" for i in range(self.tenants)]

    def targets(self) -> list[str]:
        return list(TARGETS) if self.target == "both" else [self.target]


@dataclass(slots=True)
class Spec:
    """One planned request."""

    rid: int
    tenant: str
    qid: int
    ref: str
    text: str  # the last user message
    model: str  # as sent: auto, small, large
    stream: bool
    tools: bool
    bypass: bool  # x-gateway-cache: bypass
    hot: bool  # temperature above the cache's max_temperature

    @property
    def tag(self) -> str:
        return f"{self.tenant}.r{self.rid:06d}"

    @property
    def storable(self) -> bool:
        return not (self.bypass or self.hot)


def plan(opts: Options) -> list[list[Spec]]:
    """Each client's requests, in order. Request ids are global and unique."""
    rng = random.Random(opts.seed)
    pool = QUESTIONS[: opts.questions]
    tenants = opts.tenant_names
    weights = [1 / (k + 1) ** 0.7 for k in range(len(pool))]  # a few popular questions
    per_client = [opts.requests // opts.clients] * opts.clients
    for i in range(opts.requests % opts.clients):
        per_client[i] += 1
    out: list[list[Spec]] = [[] for _ in range(opts.clients)]
    rid = 0
    # Interleave the clients' ids so an id says little about when it was sent.
    for turn in range(max(per_client)):
        for client in range(opts.clients):
            if turn >= per_client[client]:
                continue
            tenant = tenants[client % len(tenants)]
            qid = rng.choices(range(len(pool)), weights)[0]
            question, reworded = pool[qid]
            if reworded is not None and rng.random() < 0.15:
                question = reworded
            ref = f"q{qid:03d}" if qid % 2 == 0 else f"{tenant}.q{qid:03d}"
            bypass = rng.random() < 0.04
            text = f"{question} [ref {ref}]" + (f" [nonce r{rid:06d}]" if bypass else "")
            r = rng.random()
            model = "auto" if r < 0.7 else "small" if r < 0.85 else "large"
            stream, tools = rng.random() < 0.4, rng.random() < 0.2
            hot = rng.random() < 0.03
            out[client].append(Spec(rid, tenant, qid, ref, text, model, stream, tools, bypass, hot))
            rid += 1
    return out


def request_body(spec: Spec) -> bytes:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": spec.text}]
    temperature = 1.5 if spec.hot else 0.2
    body = {"model": spec.model, "messages": messages, "temperature": temperature, "user": spec.tag}
    if spec.stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    if spec.tools:
        body["tools"] = TOOLS
    return json.dumps(body).encode()


# --- the processes ----------------------------------------------------------------------------


def key_env(tenant: str) -> str:  # the variable holding the tenant's key
    return f"ISO_KEY_{tenant.upper()}"


def policies(tenants: list[str]) -> dict[str, dict[str, Any]]:
    return {
        "even-tenants": {
            "description": "even tenants - a stricter similarity bar, per-tenant metrics",
            "match": {"tenants": ["t?[02468]"]},
            "cache": {"similarity_threshold": 0.97},
            "metrics": {"per_tenant": True},
        },
        "odd-tenants": {
            "description": "odd tenants - tool calls cached, one repair attempt",
            "match": {"tenants": ["t?[13579]"]},
            "cache": {"cache_tool_calls": True},
            "guard": {"tools": {"repair_attempts": 1}},
        },
        "limited": {
            "description": "one tenant limited to 3 requests at once",
            "match": {"tenants": [tenants[-1]]},
            "rate_limits": {"concurrent": 3},
        },
    }


def gateway_config(fake: str, redis_url: str | None, opts: Options) -> dict[str, Any]:
    """Every feature on; with `redis_url`, the cache, breakers and rate limits shared there."""
    sqlite = {"type": "sqlite", "path": "cache.sqlite3", "max_entries": 100000}
    shared: dict[str, Any] = {"type": "redis" if redis_url else "memory"}
    store = shared if redis_url else sqlite
    namespace = f"iso-{secrets.token_hex(4)}"
    redis = {"redis": {"url": redis_url, "namespace": namespace}} if redis_url else {}
    tiers = [{"model": "small", "max_score": 0.5}, {"model": "large"}]
    return {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "auth": {
            "admin_key_env": "GATEWAY_ADMIN_KEY",
            "keys": [{"env": key_env(t), "tenant": t} for t in opts.tenant_names],
        },
        "providers": {"fake": openai_provider(f"{fake}/v1", (2, 5, 20), max_connections=1000)},
        "models": [
            {"name": "small", "provider": "fake", "upstream_model": "small-up"},
            {"name": "large", "provider": "fake", "upstream_model": "large-up"}
            | {"fallbacks": ["small"]},
        ],
        "routing": {
            "aliases": {"auto": {"tiers": tiers, "escalate": {"tools": 1}, "sticky": True}}
        },
        "cache": {
            "store": store,
            "embedder": {"type": "hash"} if opts.embedder == "hash" else {},
            "defaults": {"enabled": True},
        },
        "resilience": {
            "retry": {"attempts": 3, "initial_backoff_ms": 50, "max_backoff_ms": 500},
            "breaker": {"failures": 5, "reset_seconds": 5},
            "breaker_storage": shared,
            "deadline_seconds": opts.deadline,
        },
        "guard": {"tools": {"enabled": True, "repair_attempts": 2, "on_failure": "strip"}},
        "degradation": {"unavailable": {"mode": "answer", "retry_after_seconds": 5}},
        "rate_limits": {"storage": shared},
        "policies": {"dir": "policies"},
        **redis,
    }


@dataclass
class Stack:
    """The processes of one target: where clients send, the fake's URL, the tenants' keys."""

    entry: str
    fake: str
    keys: dict[str, str]
    gateways: list[Server]


def start_stack(stack: ExitStack, workdir: Path, opts: Options, target: str) -> Stack:
    """The faulty fake, then one gateway (SQLite store), or redis-server, the replicas sharing
    it and nginx in front of them; all stopped with `stack`."""
    faults = json.dumps(asdict(opts.faults))
    argv = ["-m", random_faults.__name__, "--faults", faults, "--seed", str(opts.seed)]
    fake = stack.enter_context(listening(python_server("fake-upstream", workdir, argv), 30))
    redis_url = None
    if target == "replicas":
        redis = RedisServer(workdir).start(15)
        stack.callback(redis.stop)
        redis_url = redis.url
    tenants = opts.tenant_names
    config = write_config(
        workdir, gateway_config(fake.url, redis_url, opts), policies(tenants), name="gateway.yaml"
    )
    keys = {t: f"sk-iso-{t}-{secrets.token_hex(8)}" for t in tenants}
    env = {"GATEWAY_ADMIN_KEY": ADMIN_KEY, **{key_env(t): k for t, k in keys.items()}}
    count = opts.replicas if redis_url else 1
    named = [(f"gateway-{n}", config) for n in range(1, count + 1)]
    gateways = [stack.enter_context(g) for g in start_gateways(workdir, named, env=env)]
    for gateway in gateways:
        embedder_loaded(gateway, 600)
    entry = gateways[0].url
    if redis_url:
        nginx = start_nginx(workdir, balancers([g.url for g in gateways]), keepalive=256)
        entry = stack.enter_context(nginx).url
    return Stack(entry, fake.url, keys, gateways)


# --- the load ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    status: int = 0  # 0: no HTTP response (timeout, connection error)
    error: str = ""
    elapsed: float = 0.0
    cache: str = "-"
    served: str = ""  # the model that answered (routed for `auto`)
    guard: str = ""
    degraded: bool = False
    texts: list[str] = field(default_factory=list)  # content, then each call's arguments
    stream_errors: list[str] = field(default_factory=list)  # codes of SSE error events
    error_code: str = ""  # the error body's code, for non-200 answers
    replica: str = ""


def request_for(url: str, key: str, spec: Spec, deadline: float) -> Request:
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key}",
        "x-gateway-timeout": f"{deadline:g}",
    }
    if spec.bypass:
        headers["x-gateway-cache"] = "bypass"
    return Request(url, request_body(spec), headers, timeout_s=deadline + HUNG_GRACE + 20)


def result_of(outcome: Outcome, spec: Spec) -> Result:
    result = Result(elapsed=outcome.latency_s)
    if outcome.error is not None:
        result.error = outcome.error
        return result
    result.status = outcome.status
    h = outcome.headers
    result.cache = h.get("x-gateway-cache", "-")
    found = re.search(r"model=([^;]+)", h.get("x-gateway-route", ""))
    result.served = found.group(1) if found else spec.model
    result.guard = h.get("x-gateway-tool-guard", "")
    result.degraded = h.get("x-gateway-level") == "4"
    result.replica = h.get("X-Upstream-Addr", "")
    reply = parse_reply(outcome.body, spec.stream and outcome.status == 200)
    if reply.unparsable and not spec.stream:
        result.error = "unparsable body"
    elif outcome.status != 200:
        result.error_code = str(reply.error_code)
    else:
        result.texts, result.stream_errors = reply.texts, reply.stream_errors
    return result


async def run_load(
    stack: Stack, opts: Options, specs: list[list[Spec]]
) -> tuple[dict[int, Result], float]:
    """Each client sends its requests one after the other; all clients at once."""
    url = stack.entry + "/v1/chat/completions"
    results: dict[int, Result] = {}
    total = sum(len(s) for s in specs)
    started = time.perf_counter()

    async def client(mine: list[Spec]) -> None:
        for spec in mine:
            request = request_for(url, stack.keys[spec.tenant], spec, opts.deadline)
            results[spec.rid] = result_of(await send(session, request), spec)

    async def progress() -> None:
        while True:
            await asyncio.sleep(10)
            done = len(results)
            rate = done / (time.perf_counter() - started)
            say(opts, f"    {done}/{total} requests, {rate:.0f} req/s, load {load_average()}")

    async with session_for(0) as session:
        ticker = asyncio.create_task(progress())
        try:
            await asyncio.gather(*(client(mine) for mine in specs))
        finally:
            ticker.cancel()
    return results, time.perf_counter() - started


# --- judging the answers ----------------------------------------------------------------------


def judge(spec: Spec, result: Result, by_rid: dict[int, Spec], results: dict[int, Result]) -> str:
    """The verdict on one 200 answer: "own", "hit" (a legitimate hit), a contamination
    (CONTAMINATIONS) or a kind of answer without a marker."""
    hit = result.cache.startswith("hit")
    verdict = ""
    marked = 0
    for text in result.texts:
        tags = ECHO.findall(text)
        if not tags:
            continue
        marked += 1
        for tag in tags:
            found = TAG.match(tag)
            origin = by_rid.get(int(found.group(2))) if found else None
            if origin is None or found is None or origin.tenant != found.group(1):
                return "corrupt"  # a marker no request of this run carries
            if origin.tenant != spec.tenant:
                return "cross_tenant"
            if origin.ref != spec.ref:
                return "wrong_question"
            if origin.rid != spec.rid and not hit:
                return "foreign_on_miss"
            if origin.rid != spec.rid:
                done = results.get(origin.rid)
                same_scope = (
                    done is not None
                    and done.served == result.served
                    and origin.tools == spec.tools
                    and origin.storable
                )
                if not same_scope:
                    return "wrong_scope"
            verdict = "hit" if origin.rid != spec.rid else "own"
        expected = f"Echo[{tags[0]}]: "
        origin_text = by_rid[int(TAG.match(tags[0]).group(2))].text  # type: ignore[union-attr]
        whole = text == expected + origin_text
        in_call = _call_query(text) == expected + origin_text
        if not (whole or in_call) and not (result.stream_errors and not hit):
            return "corrupt"
    if marked:
        return verdict
    if result.degraded:
        return "level4"
    if any(t.startswith(STRIPPED_PREFIX) for t in result.texts):
        # From the cache: the guard's own text was stored (see tests/reliability/
        # test_isolation.py, the stripped-answer finding).
        return "stripped_from_cache" if hit else "stripped"
    if result.stream_errors:
        return "stream_cut_before_text"
    if any(t.startswith(UNAVAILABLE_PREFIX) for t in result.texts):
        return "level4"
    return "no_marker"


def _call_query(text: str) -> str | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data.get("query") if isinstance(data, dict) else None


@dataclass
class Report:
    target: str
    requests: int
    seconds: float
    rps: float
    statuses: dict[str, int]
    status_500: int
    internal_stream_errors: int
    hung: int
    contaminations: dict[str, int]
    contamination_total: int
    verdicts: dict[str, int]
    cache: dict[str, int]
    hit_rate: float
    p50_ms: float
    p99_ms: float
    max_s: float
    stream_errors: dict[str, int]
    tool_guard: dict[str, int]
    served: dict[str, int]
    transport_errors: dict[str, int]
    injected: dict[str, int]
    replicas_answering: dict[str, int]
    examples: list[dict[str, Any]]
    load: str

    @property
    def met(self) -> bool:
        return (
            self.contamination_total == 0
            and self.status_500 == 0
            and self.internal_stream_errors == 0
            and self.hung == 0
        )


COUNTS = ("statuses", "verdicts", "cache", "stream_errors", "tool_guard", "served")
COUNTS += ("transport_errors", "replicas_answering")


def analyse(
    target: str,
    opts: Options,
    specs: list[list[Spec]],
    results: dict[int, Result],
    seconds: float,
    injected: dict[str, int],
) -> Report:
    by_rid = {s.rid: s for mine in specs for s in mine}
    counts: dict[str, Counter[str]] = {name: Counter() for name in COUNTS}
    latencies: list[float] = []
    examples: list[dict[str, Any]] = []
    hung = 0
    for rid, spec in by_rid.items():
        result = results.get(rid)
        if result is None:
            counts["transport_errors"]["never_sent"] += 1
            continue
        hung += result.elapsed > opts.deadline + HUNG_GRACE or result.error == "timeout"
        counts["statuses"][str(result.status) if result.status else "none"] += 1
        if result.status == 0:
            counts["transport_errors"][result.error] += 1
            continue
        if result.replica:
            counts["replicas_answering"][result.replica] += 1
        if result.status != 200:
            if len(examples) < 20 and result.status >= 500:
                examples.append({"rid": rid, "status": result.status, "code": result.error_code})
            continue
        latencies.append(result.elapsed)
        counts["cache"][result.cache] += 1
        counts["served"][result.served] += 1
        counts["tool_guard"].update([result.guard] if result.guard else [])
        counts["stream_errors"].update(result.stream_errors)
        verdict = judge(spec, result, by_rid, results)
        counts["verdicts"][verdict] += 1
        if verdict in CONTAMINATIONS and len(examples) < 20:
            got = [t[:200] for t in result.texts]
            examples.append({"rid": rid, "verdict": verdict, "tenant": spec.tenant} | {
                "sent": spec.text, "cache": result.cache, "got": got
            })  # fmt: skip
    contaminations = {name: counts["verdicts"][name] for name in CONTAMINATIONS}
    cache = counts["cache"]
    lookups = cache["hit-exact"] + cache["hit-semantic"] + cache["miss"]
    hits = cache["hit-exact"] + cache["hit-semantic"]
    return Report(
        target=target,
        requests=len(by_rid),
        seconds=seconds,
        rps=len(results) / seconds if seconds else 0.0,
        status_500=counts["statuses"]["500"],
        internal_stream_errors=counts["stream_errors"]["internal_error"],
        hung=hung,
        contaminations=contaminations,
        contamination_total=sum(contaminations.values()),
        hit_rate=hits / lookups if lookups else 0.0,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        max_s=max((r.elapsed for r in results.values()), default=0.0),
        injected=injected,
        examples=examples,
        load=load_average(),
        **{name: {k: v for k, v in c.items() if v} for name, c in counts.items()},
    )


# --- running it -------------------------------------------------------------------------------


def say(opts: Options, text: str) -> None:
    if not opts.quiet:
        print(text, flush=True)


def run_target(target: str, opts: Options, workdir: Path) -> Report:
    with ExitStack() as stack:
        say(opts, f"[{target}] starting processes in {workdir} (load {load_average()})")
        processes = start_stack(stack, workdir, opts, target)
        count = len(processes.gateways)
        say(opts, f"[{target}] ready: {count} gateway(s), entry {processes.entry}")
        specs = plan(opts)
        results, seconds = uvloop.run(run_load(processes, opts, specs))
        injected = {
            k.removeprefix("injected_"): v
            for k, v in get_json(processes.fake + "/_fake/stats").items()
            if k.startswith("injected_") or k == "requests"
        }
        report = analyse(target, opts, specs, results, seconds, injected)
        if report.status_500 or report.internal_stream_errors:
            for server in processes.gateways:
                say(opts, f"[{target}] {server.name} log tail:\n{server.tail(40)}")
        return report


def run(opts: Options) -> list[Report]:
    """Every target in `opts`, one after the other; the reports."""
    reports = []
    for target in opts.targets():
        if opts.workdir is not None:
            workdir = opts.workdir / target
            workdir.mkdir(parents=True, exist_ok=True)
            reports.append(run_target(target, opts, workdir))
        else:
            with tempfile.TemporaryDirectory(prefix=f"gateway-isolation-{target}-") as tmp:
                reports.append(run_target(target, opts, Path(tmp)))
    return reports


def table(reports: list[Report]) -> str:
    def row(name: str, cell: Any) -> tuple[str, ...]:
        return (name, *(str(cell(r)) for r in reports))

    rows = [
        row("requests", lambda r: r.requests),
        row("seconds", lambda r: f"{r.seconds:.1f}"),
        row("requests/s", lambda r: f"{r.rps:.0f}"),
        row("contaminations", lambda r: r.contamination_total),
        *(row(f"  {name}", lambda r, n=name: r.contaminations[n]) for name in CONTAMINATIONS),
        row("status 500", lambda r: r.status_500),
        row("internal errors in streams", lambda r: r.internal_stream_errors),
        row("hung (> deadline + 5 s)", lambda r: r.hung),
        row("slowest request (s)", lambda r: f"{r.max_s:.2f}"),
        row("latency p50 (ms)", lambda r: fmt(r.p50_ms, ".1f")),
        row("latency p99 (ms)", lambda r: fmt(r.p99_ms, ".1f")),
        row("cache hit rate", lambda r: f"{r.hit_rate:.1%}"),
    ]
    for k in sorted({k for r in reports for k in r.statuses}):
        rows.append(row(f"status {k}", lambda r, k=k: r.statuses.get(k, 0)))
    for title, attr in (
        ("cache", "cache"),
        ("answer", "verdicts"),
        ("tool guard", "tool_guard"),
        ("served by", "served"),
        ("stream error event", "stream_errors"),
        ("transport error", "transport_errors"),
        ("injected", "injected"),
    ):
        for k in sorted({k for r in reports for k in getattr(r, attr)}):
            rows.append(row(f"{title}: {k}", lambda r, a=attr, k=k: getattr(r, a).get(k, 0)))
    rows.append(row("replicas that answered", lambda r: len(r.replicas_answering)))
    rows.append(row("targets met", lambda r: "yes" if r.met else "NO"))
    return markdown_table(("", *(r.target for r in reports)), rows)


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(Options, argv, __doc__)
    print(
        f"isolation: {opts.clients} clients, {opts.tenants} tenants, {opts.requests} requests"
        f" per target, embedder {opts.embedder}, deadline {opts.deadline:g} s,"
        f" load {load_average()}",
        flush=True,
    )
    reports = run(opts)
    print()
    print(table(reports))
    for report in reports:
        for example in report.examples:
            print(f"  [{report.target}] {example}")
    if opts.json_out is not None:
        save_json(
            opts.json_out, options=opts, reports=[asdict(r) | {"met": r.met} for r in reports]
        )
        print(f"\nwritten: {opts.json_out}")
    return 0 if all(r.met for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
