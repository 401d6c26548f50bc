"""Tenant isolation under load, with every feature on at once: no answer may reach the wrong
request, no request may end in a 500, none may hang.

    python bench/isolation.py                     # single process, then 3 replicas + nginx
    python bench/isolation.py --target single --embedder hash --requests 4000
    python bench/isolation.py --json out.json     # also save the report

What runs (each on a free loopback port, in a temporary directory):
  - a fake upstream (this file with --serve-fake: gateway/testing/fake_upstream.py plus
    random faults): some answers are HTTP 500, some slow (1.5 s), a few slower than the
    deadline (12 s), some non-stream bodies malformed, some streams cut mid-way or ending in an
    error event; requests that declare tools get tool calls, some naming a tool that was never
    declared or breaking the tool's schema (repairable), a few staying wrong on repair too;
  - `--target single`: one gateway process (SQLite cache store);
    `--target replicas`: three replicas sharing one redis-server (cache store, breakers and
    rate limits in Redis, as docs/DEPLOY.md) behind nginx (round robin, keep-alive,
    proxy_buffering off); `both` (the default) runs one, then the other;
  - every gateway: 20 tenants (auth.keys), the cache on for every model (MiniLM by default,
    `--embedder hash` for speed), the routing alias `auto` (two tiers, tools escalate), the
    tool guard (repair, then strip), retries, breakers, a 10 s deadline per request
    (x-gateway-timeout), level-4 answers when nothing answers, and three policies: even
    tenants a stricter similarity bar and per-tenant metrics, odd tenants cached tool calls and
    one repair attempt, the last tenant 3 concurrent requests at most (429 beyond).

The load: `--clients` concurrent clients (client i is tenant i mod `--tenants`), each sending
its share of `--requests` one after the other: plain or streamed, `auto` or a model by name,
sometimes with tools, sometimes with `x-gateway-cache: bypass` or a temperature above the
cache's max (never read nor written), questions drawn from a pool with repeats (skewed), some
asked in other words (semantic hits).

Markers. The last user message ends in `[ref q017]` (a question every tenant asks in the same
words, so a cross-tenant leak would be an exact hit) or `[ref t03.q018]` (a tenant's own
question); requests that bypass the cache add `[nonce r000123]`. The request's `user` field is
`<tenant>.r<request id>` (not part of the cache scope), and the fake answers
`Echo[<user>]: <last user message>` (in tool calls: the same text in the `query` argument). So
every answer names the request that made it upstream:
  - a miss (or a bypass) must carry its own request id;
  - a cache hit may carry another request's id, but that request must be of the same tenant,
    ask the same question (ref), have the same cache scope (served model, tools), be one whose
    answer may be stored (no bypass, not too hot), and the answer must be its exact text;
  - anything else is a contamination: `cross_tenant` (another tenant's request),
    `wrong_question` (same tenant, another question), `foreign_on_miss` (another request's
    answer on a miss: a response mix-up), `wrong_scope` (a hit from another scope or from an
    answer that was never to be stored), `corrupt` (the text is not the answer it claims).
Answers with no marker are counted by kind: level 4 (nothing could answer), tool calls
stripped by the guard, streams cut by the upstream.

Targets: 0 contaminations, 0 responses with status 500 (nor internal errors inside streams),
0 hung requests (not finished within the deadline + 5 s). The exit status is 1 when a target
is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import secrets
import shutil
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # importable from tests: `procs` and `cache_questions` beside it
    sys.path.insert(0, str(HERE))

from cache_questions import FILLER, PAIRS  # noqa: E402
from procs import Server, fmt, free_port, load_average, percentile, pythonpath  # noqa: E402

ADMIN_KEY = "isolation-bench-admin-key"
TARGETS = ("single", "replicas")
HUNG_GRACE = 5.0  # a request not finished within its deadline + this is hung
STRIPPED_PREFIX = "I could not make a valid tool call"
UNAVAILABLE_PREFIX = "The assistant is temporarily unavailable"
ECHO = re.compile(r"Echo\[([^\]]*)\]: ")
TAG = re.compile(r"^(t\d+)\.r(\d+)$")
CONTAMINATIONS = ("cross_tenant", "wrong_question", "foreign_on_miss", "wrong_scope", "corrupt")
SYSTEM = "You are a helpful assistant. Answer briefly."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a question up in the knowledge base.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert",
            "description": "Convert a length.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "unit": {"enum": ["m", "ft"]}},
                "required": ["query"],
            },
        },
    },
]
HALLUCINATED = ["lookup_web", "transfer_money", "convertt", "search"]


# --- the faulty upstream (a separate process: `python bench/isolation.py --serve-fake`) -------


@dataclass(frozen=True)
class Faults:
    """What the fake upstream does wrong, per upstream request (retries draw again)."""

    error_500: float = 0.03  # HTTP 500 (retryable)
    slow: float = 0.04  # 1.5 s before the answer
    too_slow: float = 0.003  # 12 s: past the gateway's 10 s deadline
    malformed: float = 0.01  # non-stream: a 200 whose JSON is cut short
    stream_cut: float = 0.03  # streams: the connection dropped after two chunks
    stream_error: float = 0.01  # streams: an error event after two chunks
    tool_text: float = 0.25  # requests with tools: a text answer, no call
    hallucinate: float = 0.25  # first answer with tools: an undeclared tool name
    bad_arguments: float = 0.10  # first answer with tools: arguments break the schema
    stays_wrong: float = 0.15  # repairs: still an undeclared name


def serve_fake(faults_json: str, seed: int) -> None:
    """Run the faulty fake upstream until killed (prints its URL like the stock fake)."""
    from aiohttp import web

    from gateway.testing.cli import run_fake
    from gateway.testing.fake_upstream import FakeUpstream, Knobs, ScriptedReply

    faults = Faults(**json.loads(faults_json))
    rng = random.Random(seed)

    class FaultyUpstream(FakeUpstream):
        def __init__(self, host: str, port: int) -> None:
            super().__init__(host, port, history=50)
            self.defaults = Knobs(echo_user=True)
            self.stats.update({f"injected_{name}": 0 for name in asdict(faults)})

        async def _receive(self, request: web.Request) -> tuple[dict[str, Any], Knobs]:
            body, knobs = await super()._receive(request)
            return body, self._inject(body, knobs)

        def _count(self, name: str) -> None:
            self.stats[f"injected_{name}"] += 1

        def _inject(self, body: dict[str, Any], knobs: Knobs) -> Knobs:
            update: dict[str, Any] = {}
            r = rng.random()
            if r < faults.error_500:
                update["status"] = 500
                self._count("error_500")
            elif r < faults.error_500 + faults.too_slow:
                update["latency_ms"] = 12_000
                self._count("too_slow")
            elif r < faults.error_500 + faults.too_slow + faults.slow:
                update["latency_ms"] = 1_500
                self._count("slow")
            if "status" not in update:
                r = rng.random()
                if body.get("stream"):
                    if r < faults.stream_cut:
                        update["cut_after"] = 2
                        self._count("stream_cut")
                    elif r < faults.stream_cut + faults.stream_error:
                        update["stream_error_after"] = 2
                        self._count("stream_error")
                elif r < faults.malformed:
                    update["malformed"] = True
                    self._count("malformed")
            if body.get("tools"):
                reply = self._tool_reply(body)
                if reply is not None:
                    update["replies"] = [reply]
            return knobs.model_copy(update=update) if update else knobs

        def _tool_reply(self, body: dict[str, Any]) -> ScriptedReply | None:
            messages = body.get("messages") or []
            repair = any(m.get("role") == "tool" for m in messages)
            if not repair and rng.random() < faults.tool_text:
                self._count("tool_text")
                return None  # the default echo, as text
            last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
            echo = f"Echo[{body.get('user')}]: {last_user.get('content')}"
            name, arguments = "lookup", {"query": echo}
            r = rng.random()
            if repair:
                if r < faults.stays_wrong:
                    name = rng.choice(HALLUCINATED)
                    self._count("stays_wrong")
            elif r < faults.hallucinate:
                name = rng.choice(HALLUCINATED)
                self._count("hallucinate")
            elif r < faults.hallucinate + faults.bad_arguments:
                name, arguments = "convert", {"query": echo, "unit": "yards"}
                self._count("bad_arguments")
            return ScriptedReply(tool_calls=[{"name": name, "arguments": arguments}])

    async def start(host: str, port: int) -> str:
        fake = await FaultyUpstream(host, port).start()
        return f"fake upstream listening on http://{fake.host}:{fake.port}"

    sys.argv = [sys.argv[0], "--port", "0"]
    run_fake("A fake upstream with random faults.", 0, start)


# --- options and the request plan -------------------------------------------------------------


@dataclass
class Options:
    clients: int = 200
    tenants: int = 20
    requests: int = 20_000
    questions: int = 60  # the pool each tenant draws from
    embedder: str = "minilm"  # or "hash"
    target: str = "both"
    replicas: int = 3
    deadline: float = 10.0
    seed: int = 1
    faults: Faults = field(default_factory=Faults)
    json_out: Path | None = None
    quiet: bool = False
    workdir: Path | None = None  # default: a fresh temporary directory, removed afterwards

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


def question_pool(size: int) -> list[tuple[str, str | None]]:
    """(question, a rewording or None): PAIRS first (their rewordings give semantic hits),
    then FILLER; every one distinct."""
    pool: list[tuple[str, str | None]] = [(q, r) for q, r in PAIRS]
    pool += [(q, None) for q in FILLER]
    if size > len(pool):
        raise ValueError(f"--questions is at most {len(pool)}")
    return pool[:size]


def tenant_names(count: int) -> list[str]:
    return [f"t{i:02d}" for i in range(count)]


def plan(opts: Options) -> list[list[Spec]]:
    """Each client's requests, in order. Request ids are global and unique."""
    rng = random.Random(opts.seed)
    pool = question_pool(opts.questions)
    tenants = tenant_names(opts.tenants)
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
            out[client].append(
                Spec(
                    rid=rid,
                    tenant=tenant,
                    qid=qid,
                    ref=ref,
                    text=text,
                    model=model,
                    stream=rng.random() < 0.4,
                    tools=rng.random() < 0.2,
                    bypass=bypass,
                    hot=rng.random() < 0.03,
                )
            )
            rid += 1
    return out


def request_body(spec: Spec) -> bytes:
    body: dict[str, Any] = {
        "model": spec.model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": spec.text},
        ],
        "temperature": 1.5 if spec.hot else 0.2,
        "user": spec.tag,
    }
    if spec.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if spec.tools:
        body["tools"] = TOOLS
    return json.dumps(body).encode()


# --- the processes ----------------------------------------------------------------------------


@dataclass
class Stack:
    dir: Path
    servers: list[Server] = field(default_factory=list)
    fake: str = ""  # base URL, no /v1
    gateways: list[str] = field(default_factory=list)
    entry: str = ""  # where clients send: the gateway, or nginx
    redis_url: str = ""
    keys: dict[str, str] = field(default_factory=dict)  # tenant -> key

    def python(self, name: str, *argv: str, env: dict[str, str] | None = None) -> Server:
        env = {"PYTHONPATH": pythonpath(HERE.parent), **(env or {})}
        server = Server(name, [sys.executable, *argv], self.dir, env)
        self.servers.append(server)
        return server

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()


def key_env(tenant: str) -> str:
    return f"ISO_KEY_{tenant.upper()}"


def write_policies(directory: Path, tenants: list[str]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "even-tenants.yaml").write_text(
        "description: even tenants - a stricter similarity bar, per-tenant metrics\n"
        "match: {tenants: ['t?[02468]']}\n"
        "cache: {similarity_threshold: 0.97}\n"
        "metrics: {per_tenant: true}\n"
    )
    (directory / "odd-tenants.yaml").write_text(
        "description: odd tenants - tool calls cached, one repair attempt\n"
        "match: {tenants: ['t?[13579]']}\n"
        "cache: {cache_tool_calls: true}\n"
        "guard: {tools: {repair_attempts: 1}}\n"
    )
    (directory / "limited.yaml").write_text(
        f"description: one tenant limited to 3 requests at once\n"
        f"match: {{tenants: [{tenants[-1]}]}}\n"
        "rate_limit: {concurrent: 3}\n"
    )


def gateway_config(stack: Stack, opts: Options, shared: bool) -> Path:
    tenants = tenant_names(opts.tenants)
    keys = "".join(f"    - {{env: {key_env(t)}, tenant: {t}}}\n" for t in tenants)
    embedder = "{type: hash}" if opts.embedder == "hash" else "{}"
    if shared:
        namespace = f"iso-{secrets.token_hex(4)}"
        store = f"{{type: redis, url: '{stack.redis_url}', namespace: {namespace}}}"
        breakers = f"{{type: redis, url: '{stack.redis_url}', namespace: {namespace}}}"
        limits = f"storage: {{type: redis, url: '{stack.redis_url}', namespace: {namespace}}}"
    else:
        store = "{type: sqlite, path: cache.sqlite3, max_entries: 100000}"
        breakers = "{type: memory}"
        limits = "storage: {type: memory}"
    write_policies(stack.dir / "policies", tenants)
    path = stack.dir / "gateway.yaml"
    path.write_text(
        f"""
server: {{host: 127.0.0.1, port: 0, access_log: false}}
auth:
  admin_key_env: GATEWAY_ADMIN_KEY
  keys:
{keys}
providers:
  fake:
    type: openai
    base_url: "{stack.fake}/v1"
    timeouts: {{connect: 2, read: 5, total: 20}}
    max_connections: 1000
models:
  - {{name: small, provider: fake, upstream_model: small-up}}
  - {{name: large, provider: fake, upstream_model: large-up, fallbacks: [small]}}
routing:
  aliases:
    auto:
      tiers:
        - {{model: small, max_score: 0.5}}
        - {{model: large}}
      escalate: {{tools: 1}}
      sticky: true
cache:
  store: {store}
  embedder: {embedder}
  defaults: {{enabled: true}}
resilience:
  retry: {{attempts: 3, initial_backoff_ms: 50, max_backoff_ms: 500}}
  breaker: {{failures: 5, reset_seconds: 5}}
  breaker_storage: {breakers}
  deadline_seconds: {opts.deadline}
guard:
  tools: {{enabled: true, repair_attempts: 2, on_failure: strip}}
degradation:
  unavailable: {{mode: answer, retry_after_seconds: 5}}
rate_limits:
  {limits}
policies: {{dir: policies}}
"""
    )
    return path


def http_json(url: str, data: object | None = None, admin: bool = False) -> Any:
    headers = {"Content-Type": "application/json"}
    if admin:
        headers["Authorization"] = f"Bearer {ADMIN_KEY}"
    body = None if data is None else json.dumps(data).encode()
    request = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def ready(base: str) -> str | None:
    """`base` once /readyz says ready with the semantic tier on (the embedder loaded)."""
    try:
        body = http_json(base + "/readyz")
    except (OSError, ValueError):
        return None
    cache = body.get("cache") or {}
    return base if body.get("status") == "ready" and cache.get("semantic") else None


def start_fake(stack: Stack, opts: Options) -> None:
    faults = json.dumps(asdict(opts.faults))
    argv = [str(HERE / "isolation.py"), "--serve-fake", faults, "--seed", str(opts.seed)]
    server = stack.python("fake-upstream", *argv)
    stack.fake = server.wait_ready(server.log_url, 30)


def start_redis(stack: Stack) -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(stack.dir)]
    server = Server("redis", argv, stack.dir)
    stack.servers.append(server)
    stack.redis_url = f"redis://127.0.0.1:{port}/0"

    def probe() -> str | None:
        with contextlib.suppress(OSError):
            import socket

            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return stack.redis_url
        return None

    server.wait_ready(probe, 15)


def start_gateways(stack: Stack, opts: Options, count: int, shared: bool) -> None:
    config = gateway_config(stack, opts, shared)
    env = {"GATEWAY_ADMIN_KEY": ADMIN_KEY}
    for tenant in tenant_names(opts.tenants):
        stack.keys[tenant] = f"sk-iso-{tenant}-{secrets.token_hex(8)}"
        env[key_env(tenant)] = stack.keys[tenant]
    argv = ["-m", "gateway", "serve", "--config", str(config), "--port", "0"]
    started = [stack.python(f"gateway-{n}", *argv, env=env) for n in range(1, count + 1)]
    for server in started:
        base = server.wait_ready(server.log_url, 120)
        stack.gateways.append(server.wait_ready(lambda b=base: ready(b), 600))


def start_nginx(stack: Stack) -> None:
    binary = shutil.which("nginx", path="/usr/sbin:/usr/local/sbin:/usr/bin:/usr/local/bin")
    if binary is None:
        raise SystemExit("nginx is not installed (apt-get install -y nginx)")
    port, d = free_port(), stack.dir
    members = "".join(f"    server {g.removeprefix('http://')};\n" for g in stack.gateways)
    (d / "nginx.conf").write_text(
        "worker_processes 1;\n"
        f"pid {d}/nginx.pid;\n"
        f"error_log {d}/nginx-error.log warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n"
        "  access_log off;\n"
        f"  client_body_temp_path {d}/nginx-client-body;\n"
        f"  proxy_temp_path {d}/nginx-proxy;\n"
        f"  fastcgi_temp_path {d}/nginx-fastcgi;\n"
        f"  uwsgi_temp_path {d}/nginx-uwsgi;\n"
        f"  scgi_temp_path {d}/nginx-scgi;\n"
        "  keepalive_requests 1000000;\n"
        f"  upstream gateways {{\n{members}    keepalive 256;\n  }}\n"
        "  server {\n"
        f"    listen 127.0.0.1:{port};\n"
        "    location / {\n"
        "      proxy_pass http://gateways;\n"
        "      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n'
        "      proxy_buffering off;\n"
        "      proxy_read_timeout 120s;\n"
        "      add_header X-Upstream-Addr $upstream_addr always;\n"
        "    }\n"
        "  }\n"
        "}\n"
    )
    argv = [binary, "-c", str(d / "nginx.conf"), "-p", str(d), "-g", "daemon off;"]
    server = Server("nginx", argv, d)
    stack.servers.append(server)
    base = f"http://127.0.0.1:{port}"
    stack.entry = server.wait_ready(lambda: base if _healthy(base) else None, 15)


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def start_stack(stack: Stack, opts: Options, target: str) -> None:
    start_fake(stack, opts)
    if target == "single":
        start_gateways(stack, opts, 1, shared=False)
        stack.entry = stack.gateways[0]
    else:
        start_redis(stack)
        start_gateways(stack, opts, opts.replicas, shared=True)
        start_nginx(stack)


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


def parse_answer(raw: bytes, stream: bool, result: Result) -> None:
    if not stream:
        try:
            data = json.loads(raw)
        except ValueError:
            result.error = "unparsable body"
            return
        if result.status != 200:
            error = data.get("error") if isinstance(data, dict) else None
            result.error_code = str((error or {}).get("code") or (error or {}).get("type"))
            return
        message = ((data.get("choices") or [{}])[0]).get("message") or {}
        result.texts.append(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            result.texts.append((call.get("function") or {}).get("arguments") or "")
        return
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    for line in raw.split(b"\n"):
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        try:
            event = json.loads(line[6:])
        except ValueError:
            result.stream_errors.append("unparsable_event")
            continue
        if "error" in event:
            error = event["error"] or {}
            result.stream_errors.append(str(error.get("code") or error.get("type")))
            continue
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                args = (call.get("function") or {}).get("arguments") or ""
                calls.setdefault(int(call.get("index") or 0), []).append(args)
    result.texts.append("".join(content))
    result.texts += ["".join(parts) for _, parts in sorted(calls.items())]


async def send(session: Any, url: str, key: str, spec: Spec, deadline: float) -> Result:
    import aiohttp

    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key}",
        "x-gateway-timeout": f"{deadline:g}",
    }
    if spec.bypass:
        headers["x-gateway-cache"] = "bypass"
    result = Result()
    started = time.perf_counter()
    try:
        timeout = aiohttp.ClientTimeout(total=deadline + HUNG_GRACE + 20)
        async with session.post(
            url, data=request_body(spec), headers=headers, timeout=timeout
        ) as resp:
            raw = await resp.read()
            result.status = resp.status
            h = resp.headers
            result.cache = h.get("x-gateway-cache", "-")
            route = h.get("x-gateway-route", "")
            found = re.search(r"model=([^;]+)", route)
            result.served = found.group(1) if found else spec.model
            result.guard = h.get("x-gateway-tool-guard", "")
            result.degraded = h.get("x-gateway-level") == "4"
            result.replica = h.get("X-Upstream-Addr", "")
            parse_answer(raw, spec.stream and resp.status == 200, result)
    except TimeoutError:
        result.error = "timeout"
    except aiohttp.ClientError as err:
        result.error = type(err).__name__
    result.elapsed = time.perf_counter() - started
    return result


async def run_load(
    stack: Stack, opts: Options, specs: list[list[Spec]]
) -> tuple[dict[int, Result], float]:
    import aiohttp

    url = stack.entry + "/v1/chat/completions"
    results: dict[int, Result] = {}
    total = sum(len(s) for s in specs)
    started = time.perf_counter()

    async def client(mine: list[Spec]) -> None:
        for spec in mine:
            results[spec.rid] = await send(
                session, url, stack.keys[spec.tenant], spec, opts.deadline
            )

    async def progress() -> None:
        while True:
            await asyncio.sleep(10)
            done = len(results)
            rate = done / (time.perf_counter() - started)
            say(opts, f"    {done}/{total} requests, {rate:.0f} req/s, load {load_average()}")

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
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


def analyse(
    target: str,
    opts: Options,
    specs: list[list[Spec]],
    results: dict[int, Result],
    seconds: float,
    injected: dict[str, int],
) -> Report:
    by_rid = {s.rid: s for mine in specs for s in mine}
    statuses: Counter[str] = Counter()
    verdicts: Counter[str] = Counter()
    cache: Counter[str] = Counter()
    stream_errors: Counter[str] = Counter()
    guard: Counter[str] = Counter()
    served: Counter[str] = Counter()
    transport: Counter[str] = Counter()
    answering: Counter[str] = Counter()
    latencies: list[float] = []
    examples: list[dict[str, Any]] = []
    hung = 0
    for rid, spec in by_rid.items():
        result = results.get(rid)
        if result is None:
            transport["never_sent"] += 1
            continue
        if result.elapsed > opts.deadline + HUNG_GRACE or result.error == "timeout":
            hung += 1
        statuses[str(result.status) if result.status else "none"] += 1
        if result.status == 0:
            transport[result.error] += 1
            continue
        if result.replica:
            answering[result.replica] += 1
        if result.status != 200:
            if len(examples) < 20 and result.status >= 500:
                examples.append({"rid": rid, "status": result.status, "code": result.error_code})
            continue
        latencies.append(result.elapsed)
        cache[result.cache] += 1
        served[result.served] += 1
        if result.guard:
            guard[result.guard] += 1
        stream_errors.update(result.stream_errors)
        verdict = judge(spec, result, by_rid, results)
        verdicts[verdict] += 1
        if verdict in CONTAMINATIONS and len(examples) < 20:
            examples.append(
                {
                    "rid": rid,
                    "verdict": verdict,
                    "tenant": spec.tenant,
                    "sent": spec.text,
                    "cache": result.cache,
                    "got": [t[:200] for t in result.texts],
                }
            )
    contaminations = {name: verdicts.get(name, 0) for name in CONTAMINATIONS}
    lookups = sum(v for k, v in cache.items() if k in ("hit-exact", "hit-semantic", "miss"))
    hits = cache.get("hit-exact", 0) + cache.get("hit-semantic", 0)
    return Report(
        target=target,
        requests=len(by_rid),
        seconds=seconds,
        rps=len(results) / seconds if seconds else 0.0,
        statuses=dict(statuses),
        status_500=statuses.get("500", 0),
        internal_stream_errors=stream_errors.get("internal_error", 0),
        hung=hung,
        contaminations=contaminations,
        contamination_total=sum(contaminations.values()),
        verdicts=dict(verdicts),
        cache=dict(cache),
        hit_rate=hits / lookups if lookups else 0.0,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        max_s=max((r.elapsed for r in results.values()), default=0.0),
        stream_errors=dict(stream_errors),
        tool_guard=dict(guard),
        served=dict(served),
        transport_errors=dict(transport),
        injected=injected,
        replicas_answering=dict(answering),
        examples=examples,
        load=load_average(),
    )


# --- running it -------------------------------------------------------------------------------


def say(opts: Options, text: str) -> None:
    if not opts.quiet:
        print(text, flush=True)


async def run_target_async(target: str, opts: Options, workdir: Path) -> Report:
    stack = Stack(workdir)
    try:
        say(opts, f"[{target}] starting processes in {workdir} (load {load_average()})")
        await asyncio.to_thread(start_stack, stack, opts, target)
        say(opts, f"[{target}] ready: {len(stack.gateways)} gateway(s), entry {stack.entry}")
        specs = plan(opts)
        results, seconds = await run_load(stack, opts, specs)
        injected = {
            k.removeprefix("injected_"): v
            for k, v in (await asyncio.to_thread(http_json, stack.fake + "/_fake/stats")).items()
            if k.startswith("injected_") or k == "requests"
        }
        report = analyse(target, opts, specs, results, seconds, injected)
        if report.status_500 or report.internal_stream_errors:
            for server in stack.servers:
                if server.name.startswith("gateway"):
                    say(opts, f"[{target}] {server.name} log tail:\n{server.tail(40)}")
        return report
    finally:
        stack.stop()


def run(opts: Options) -> list[Report]:
    """Every target in `opts`, one after the other; the reports."""
    reports = []
    for target in opts.targets():
        if opts.workdir is not None:
            workdir = opts.workdir / target
            workdir.mkdir(parents=True, exist_ok=True)
            reports.append(_run_target(target, opts, workdir))
        else:
            with tempfile.TemporaryDirectory(prefix=f"gateway-isolation-{target}-") as tmp:
                reports.append(_run_target(target, opts, Path(tmp)))
    return reports


def _run_target(target: str, opts: Options, workdir: Path) -> Report:
    try:
        import uvloop

        return uvloop.run(run_target_async(target, opts, workdir))
    except ImportError:
        return asyncio.run(run_target_async(target, opts, workdir))


def table(reports: list[Report]) -> str:
    rows: list[tuple[str, ...]] = [
        ("", *(r.target for r in reports)),
        ("requests", *(str(r.requests) for r in reports)),
        ("seconds", *(f"{r.seconds:.1f}" for r in reports)),
        ("requests/s", *(f"{r.rps:.0f}" for r in reports)),
        ("contaminations", *(str(r.contamination_total) for r in reports)),
    ]
    for name in CONTAMINATIONS:
        rows.append((f"  {name}", *(str(r.contaminations[name]) for r in reports)))
    rows += [
        ("status 500", *(str(r.status_500) for r in reports)),
        ("internal errors in streams", *(str(r.internal_stream_errors) for r in reports)),
        ("hung (> deadline + 5 s)", *(str(r.hung) for r in reports)),
        ("slowest request (s)", *(f"{r.max_s:.2f}" for r in reports)),
        ("latency p50 (ms)", *(fmt(r.p50_ms, ".1f") for r in reports)),
        ("latency p99 (ms)", *(fmt(r.p99_ms, ".1f") for r in reports)),
        ("cache hit rate", *(f"{r.hit_rate:.1%}" for r in reports)),
    ]
    keys = sorted({k for r in reports for k in r.statuses})
    rows += [(f"status {k}", *(str(r.statuses.get(k, 0)) for r in reports)) for k in keys]
    for title, attr in (
        ("cache", "cache"),
        ("answer", "verdicts"),
        ("tool guard", "tool_guard"),
        ("served by", "served"),
        ("stream error event", "stream_errors"),
        ("transport error", "transport_errors"),
        ("injected", "injected"),
    ):
        names = sorted({k for r in reports for k in getattr(r, attr)})
        rows += [
            (f"{title}: {k}", *(str(getattr(r, attr).get(k, 0)) for r in reports)) for k in names
        ]
    rows += [
        ("replicas that answered", *(str(len(r.replicas_answering)) for r in reports)),
        ("targets met", *("yes" if r.met else "NO" for r in reports)),
    ]
    width = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append(
            "  ".join(c.ljust(width[0]) if i == 0 else c.rjust(width[i]) for i, c in enumerate(row))
        )
        if n == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--target", choices=["single", "replicas", "both"], default="both")
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--tenants", type=int, default=20)
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--questions", type=int, default=60, help="pool size (at most 200)")
    p.add_argument("--embedder", choices=["minilm", "hash"], default="minilm")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--deadline", type=float, default=10.0, help="x-gateway-timeout, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, dest="json_out", help="also write the report here")
    p.add_argument("--keep", type=Path, help="keep logs and stores in this directory")
    a = p.parse_args(argv)
    if a.tenants > a.clients:
        p.error("--tenants must not exceed --clients")
    return Options(
        clients=a.clients,
        tenants=a.tenants,
        requests=a.requests,
        questions=a.questions,
        embedder=a.embedder,
        target=a.target,
        replicas=a.replicas,
        deadline=a.deadline,
        seed=a.seed,
        json_out=a.json_out,
        workdir=a.keep,
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--serve-fake"]:
        seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 1
        serve_fake(args[1], seed)
        return 0
    opts = parse_args(args)
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
        opts.json_out.write_text(
            json.dumps(
                {
                    "options": {**asdict(opts), "json_out": None, "workdir": None},
                    "reports": [asdict(r) | {"met": r.met} for r in reports],
                },
                indent=2,
            )
        )
        print(f"\nwritten: {opts.json_out}")
    return 0 if all(r.met for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
