"""The repair section of bench/tool_guard.py (`--section repair`): the tool guard in the request
flow, over HTTP, a fake upstream scripted with BFCL calls and two gateways in front of it (guard
on and off). bench/tool_guard.py's docstring says what is measured and how to run it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bfcl import EXPECTED_KIND, SEED, Sample, load, mutations

from gateway.guard.schemas import ValidatorCache
from gateway.guard.tools import ToolCatalog
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.load import Outcome, Request, closed_loop, session_for
from gateway.testing.harness.process import Server
from gateway.testing.harness.procstat import cpu_seconds, load_average
from gateway.testing.harness.starters import start_fake_upstream, start_gateway
from gateway.testing.harness.stats import fmt, median, percentile
from gateway.testing.harness.tables import markdown_table

MODEL = "bench-model"
REPAIR_KINDS = tuple(EXPECTED_KIND)
CLEANED_KINDS = ("number as string", "boolean as string", "human date")
GUARD_HEADER = "x-gateway-tool-guard"
# Requests between two reads of the fake's request log, which keeps the last 1,000 bodies: a
# batch whose requests reach the upstream at most three times each stays below that.
BATCH = 250
REQUEST_TIMEOUT = 30.0
GUARD_ON, GUARD_OFF = "guard on", "guard off"
VALID, UNGUARDED, CORRECTED, NEVER, CLEANED = (
    "(a) valid",
    "(a) valid, guard off",
    "(b) corrected on feedback",
    "(c) never corrects",
    "cleaned variant",
)
PHASES = (VALID, UNGUARDED, CORRECTED, NEVER, CLEANED)
SERIAL = ", c=1"  # the label of a phase also run one request at a time (no queueing)
LABELS = (*PHASES, VALID + SERIAL, UNGUARDED + SERIAL, CORRECTED + SERIAL)


@dataclass(frozen=True)
class RepairOptions:
    samples: int
    concurrency: int
    rounds: int
    baseline_repeat: int
    max_seconds: float
    repair_attempts: int = 2  # the gateway's default, which the guard-on gateway runs with


def passed(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


@dataclass(frozen=True)
class Case:
    """One chat request and what the client must get back."""

    key: str  # sent as `user`, which repairs keep: the fake's request log is grouped by it
    scenario: str
    kind: str
    sample: Sample
    body: bytes
    bad_index: int | None  # the call the scripted model gets wrong

    def wanted(self) -> list[dict[str, Any]]:
        """The calls the client must receive: the ground truth, or, from a model that never
        corrects, the ground truth without the call it keeps getting wrong."""
        if self.scenario == NEVER:
            return [c for i, c in enumerate(self.sample.calls) if i != self.bad_index]
        return self.sample.calls


@dataclass
class Reply:
    case: Case
    seconds: float
    status: int = 0
    outcome: str | None = None  # the x-gateway-tool-guard header
    message: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    upstream_calls: int = 0
    error: str | None = None

    @property
    def calls(self) -> list[dict[str, Any]]:
        return list(self.message.get("tool_calls") or [])


def scripted(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A fake-upstream reply answering with `calls` (OpenAI tool calls)."""
    return {
        "tool_calls": [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in calls
        ]
    }


def make_case(
    scenario: str,
    kind: str,
    sample: Sample,
    replies: list[list[dict[str, Any]]],
    bad_index: int | None = None,
) -> Case:
    key = f"{scenario}|{kind}|{sample.id}"
    body = {
        "model": MODEL,
        "messages": sample.messages,
        "tools": sample.tools,
        "user": key,
        "fake": {"replies": [scripted(calls) for calls in replies]},
    }
    return Case(key, scenario, kind, sample, json.dumps(body).encode(), bad_index)


def pick_samples(samples: list[Sample], count: int, rng: random.Random) -> list[Sample]:
    """`count` samples spread evenly over the sets, among those whose ground truth is valid as
    it is (the dataset's contradictions, and calls cleaning would change, left out)."""
    cache = ValidatorCache(max_entries=100_000)
    by_set: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        catalog = ToolCatalog.from_request(sample.tools, {}, True, cache=cache)
        checks = [catalog.check(call) for call in sample.calls]
        if all(c.ok and not c.changes for c in checks):
            by_set[sample.set_name].append(sample)
    names = sorted(by_set)
    chosen: list[Sample] = []
    for i, name in enumerate(names):
        quota = count // len(names) + (i < count % len(names))
        chosen += rng.sample(by_set[name], min(quota, len(by_set[name])))
    return chosen


def repair_cases(
    samples: list[Sample], pool: list[str], rng: random.Random, attempts: int
) -> dict[str, list[Case]]:
    """The requests of each phase. Per sample and mutation kind, one call (at random among
    those the kind applies to) is replaced by its mutation; the sample's other calls stay."""
    phases: dict[str, list[Case]] = {phase: [] for phase in PHASES}
    for sample in samples:
        good = sample.calls
        phases[VALID].append(make_case(VALID, "valid", sample, [good]))
        phases[UNGUARDED].append(make_case(UNGUARDED, "valid", sample, [good]))
        by_kind: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for index, call in enumerate(good):
            for kind, mutated in mutations(sample, call, pool, rng):
                by_kind[kind].append((index, {**mutated, "id": call["id"]}))
        for kind in (*REPAIR_KINDS, *CLEANED_KINDS):
            if not by_kind[kind]:
                continue
            index, mutated = rng.choice(by_kind[kind])
            bad = [*good[:index], mutated, *good[index + 1 :]]
            if kind in CLEANED_KINDS:
                phases[CLEANED].append(make_case(CLEANED, kind, sample, [bad], index))
                continue
            phases[CORRECTED].append(make_case(CORRECTED, kind, sample, [bad, good], index))
            never = [bad] * (attempts + 1)
            phases[NEVER].append(make_case(NEVER, kind, sample, never, index))
    return phases


# --- servers


def start_repair_servers(
    workdir: Path, attempts: int, stack: ExitStack
) -> tuple[str, dict[str, Server]]:
    """The fake upstream, and two gateways in front of it: the tool guard on (repair_attempts,
    on_failure strip) and off. Access log and cache off (no cache section) in both. Returns
    the fake's URL and the gateways, stopped when `stack` closes."""
    fake = stack.enter_context(start_fake_upstream(workdir))
    servers: dict[str, Server] = {}
    for name, guard in (
        (GUARD_ON, {"enabled": True, "repair_attempts": attempts, "on_failure": "strip"}),
        (GUARD_OFF, {"enabled": False}),
    ):
        slug = "gateway-" + name.replace(" ", "-")
        config = {
            "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
            "providers": {"fake": {"type": "openai", "base_url": f"{fake.url}/v1"}},
            "models": [{"name": MODEL, "provider": "fake"}],
            "guard": {"tools": guard},
        }
        path = write_config(workdir, config, name=f"{slug}.yaml")
        servers[name] = stack.enter_context(start_gateway(workdir, path, name=slug))
    return fake.url, servers


# --- load


def reply_of(case: Case, outcome: Outcome) -> Reply:
    """What the client got for `case`, timed until its body was read."""
    reply = Reply(case, outcome.latency_s, outcome.status, error=outcome.error)
    if outcome.error is not None:
        return reply
    reply.outcome = outcome.headers.get(GUARD_HEADER)
    try:
        choice = json.loads(outcome.body)["choices"][0]
        reply.message, reply.finish_reason = choice["message"], choice["finish_reason"]
    except (ValueError, KeyError, IndexError, TypeError):
        reply.error = f"HTTP {outcome.status}: {outcome.body[:300]!r}"
    return reply


async def send_batch(
    session: aiohttp.ClientSession, url: str, cases: list[Case], concurrency: int
) -> list[Reply]:
    """`cases` from `concurrency` workers (the harness's closed loop), one reply each."""
    replies: list[Reply] = []

    def make(i: int) -> Request:
        return Request(url, cases[i].body)

    def observe(outcome: Outcome) -> None:
        replies.append(reply_of(cases[outcome.index], outcome))

    await closed_loop(session, make, concurrency, count=len(cases), observe=observe)
    return replies


@dataclass
class PhaseRun:
    """One phase's requests against one gateway in one round."""

    replies: list[Reply]
    cpu_ms: float  # the gateway process's CPU time per request
    log_gaps: int  # upstream requests missing from the fake's log (it keeps the last 1,000)

    def _ms(self, pct: float) -> float:
        return percentile([r.seconds * 1000 for r in self.replies if r.status == 200], pct)

    @property
    def p50_ms(self) -> float:
        return self._ms(50)

    @property
    def p99_ms(self) -> float:
        return self._ms(99)


async def run_phase(
    session: aiohttp.ClientSession, fake_url: str, gateway: Server, cases: list[Case], conc: int
) -> PhaseRun:
    """`cases` against one gateway, in batches; each reply gets its count of upstream calls."""
    replies: list[Reply] = []
    cpu, gaps = 0.0, 0
    url = gateway.url + "/v1/chat/completions"
    for start in range(0, len(cases), BATCH):
        batch = cases[start : start + BATCH]
        async with session.delete(fake_url + "/_fake/requests") as resp:
            resp.raise_for_status()
        before = await fake_requests_served(session, fake_url)
        cpu_before = cpu_seconds(gateway.pid)
        done = await send_batch(session, url, batch, conc)
        cpu += cpu_seconds(gateway.pid) - cpu_before
        async with session.get(fake_url + "/_fake/requests") as resp:
            received = await resp.json()
        gaps += await fake_requests_served(session, fake_url) - before - len(received)
        counts = Counter(
            r["body"].get("user") for r in received if r["path"] == "/v1/chat/completions"
        )
        for reply in done:
            reply.upstream_calls = counts[reply.case.key]
        replies += done
    return PhaseRun(replies, cpu * 1000 / max(1, len(replies)), gaps)


async def fake_requests_served(session: aiohttp.ClientSession, fake_url: str) -> int:
    async with session.get(fake_url + "/_fake/stats") as resp:
        return int((await resp.json())["requests"])


def pooled(runs: list[PhaseRun]) -> PhaseRun:
    """Several passes of one phase in a round, as one run."""
    replies = [r for run in runs for r in run.replies]
    cpu = sum(run.cpu_ms * len(run.replies) for run in runs) / max(1, len(replies))
    return PhaseRun(replies, cpu, sum(run.log_gaps for run in runs))


async def repair_rounds(
    fake_url: str, gateways: dict[str, Server], phases: dict[str, list[Case]], opts: RepairOptions
) -> dict[str, list[PhaseRun]]:
    """A warm-up, then rounds of every phase: {phase: one PhaseRun per round}."""
    runs: dict[str, list[PhaseRun]] = defaultdict(list)
    started = time.monotonic()
    async with session_for(opts.concurrency + 2, REQUEST_TIMEOUT) as session:

        async def phase(name: str, target: str, concurrency: int) -> PhaseRun:
            return await run_phase(session, fake_url, gateways[target], phases[name], concurrency)

        # Warm-up: every schema compiled and connections open, on both gateways.
        await phase(VALID, GUARD_ON, opts.concurrency)
        await phase(UNGUARDED, GUARD_OFF, opts.concurrency)
        round_seconds = 0.0
        for round_no in range(opts.rounds):
            if round_no and time.monotonic() - started + round_seconds > opts.max_seconds:
                progress(f"  time limit ({opts.max_seconds:.0f} s): {round_no} round(s) done")
                break
            round_started = time.monotonic()
            # The valid requests on both gateways, interleaved, which goes first alternating.
            passes: dict[str, list[PhaseRun]] = {VALID: [], UNGUARDED: []}
            pairs = [(VALID, GUARD_ON), (UNGUARDED, GUARD_OFF)]
            for i in range(opts.baseline_repeat):
                for name, target in pairs if (i + round_no) % 2 == 0 else pairs[::-1]:
                    passes[name].append(await phase(name, target, opts.concurrency))
            for name in (VALID, UNGUARDED):
                runs[name].append(pooled(passes[name]))
            for name in (CORRECTED, NEVER, CLEANED):
                runs[name].append(await phase(name, GUARD_ON, opts.concurrency))
            # One at a time: what a request costs without waiting behind others.
            for name, target in pairs if round_no % 2 == 0 else pairs[::-1]:
                runs[name + SERIAL].append(await phase(name, target, 1))
            runs[CORRECTED + SERIAL].append(await phase(CORRECTED, GUARD_ON, 1))
            round_seconds = time.monotonic() - round_started
            line = ", ".join(f"{name} {runs[name][-1].p50_ms:.2f}" for name in LABELS)
            progress(f"  round {round_no + 1} ({round_seconds:.0f} s), p50 ms: {line}")
    return runs


# --- judging and summary


@dataclass(frozen=True)
class Expected:
    outcome: str | None
    upstream_calls: int
    same_text: bool  # the calls come back byte for byte (cleaned ones are re-serialized)


def expectation(scenario: str, attempts: int) -> Expected:
    return {
        VALID: Expected("ok", 1, True),
        UNGUARDED: Expected(None, 1, True),
        CORRECTED: Expected("repaired", 2, True),
        NEVER: Expected("stripped", attempts + 1, True),
        CLEANED: Expected("cleaned", 1, False),
    }[scenario]


def call_key(call: dict[str, Any], same_text: bool) -> tuple[Any, ...]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if not same_text and isinstance(arguments, str):
        arguments = json.loads(arguments)
    return call.get("id"), function.get("name"), arguments


class Judge:
    def __init__(self, attempts: int) -> None:
        self.attempts = attempts
        self.cache = ValidatorCache(max_entries=100_000)
        self.catalogs: dict[str, ToolCatalog] = {}

    def wrong(self, reply: Reply) -> list[str]:
        """How the reply differs from what the client must get (empty: as expected)."""
        if reply.error:
            return [reply.error]
        if reply.status != 200:
            return [f"HTTP {reply.status}"]
        want = expectation(reply.case.scenario, self.attempts)
        found = []
        if reply.outcome != want.outcome:
            found.append(f"outcome {reply.outcome!r}, not {want.outcome!r}")
        wanted = reply.case.wanted()
        if [call_key(c, want.same_text) for c in reply.calls] != [
            call_key(c, want.same_text) for c in wanted
        ]:
            found.append(f"calls {[c.get('function') for c in reply.calls]}")
        finish = "tool_calls" if wanted else "stop"
        if reply.finish_reason != finish:
            found.append(f"finish_reason {reply.finish_reason!r}, not {finish!r}")
        if not wanted and not (reply.message.get("content") or "").strip():
            found.append("every call stripped, and no text for the client")
        if reply.upstream_calls != want.upstream_calls:
            found.append(f"{reply.upstream_calls} upstream calls, not {want.upstream_calls}")
        return found

    def leaked(self, reply: Reply) -> list[str]:
        """What the client got that the guard must never let through: a call to an undeclared
        tool, or arguments that break the tool's schema (judged without cleaning)."""
        sample = reply.case.sample
        catalog = self.catalogs.get(sample.id)
        if catalog is None:
            catalog = ToolCatalog.from_request(sample.tools, {}, False, cache=self.cache)
            self.catalogs[sample.id] = catalog
        return [str(p) for call in reply.calls for p in catalog.check(call).problems]


@dataclass
class Row:
    """The replies of one phase and mutation kind, judged."""

    requests: int = 0
    as_expected: int = 0
    leaked: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    upstream_calls: Counter[int] = field(default_factory=Counter)
    p50_by_round: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    wrong: list[dict[str, Any]] = field(default_factory=list)


def summarize_repair(
    runs: dict[str, list[PhaseRun]], opts: RepairOptions, samples: list[Sample]
) -> dict[str, Any]:
    judge = Judge(opts.repair_attempts)
    rows: dict[tuple[str, str], Row] = {}
    for label in LABELS:
        for round_no, run in enumerate(runs.get(label, [])):
            for reply in run.replies:
                kind = "(all)" if label.endswith(SERIAL) else reply.case.kind
                row = rows.setdefault((label, kind), Row())
                row.requests += 1
                wrong = judge.wrong(reply)
                row.as_expected += not wrong
                row.outcomes[str(reply.outcome)] += 1
                row.upstream_calls[reply.upstream_calls] += 1
                if reply.status == 200:
                    row.p50_by_round[round_no].append(reply.seconds * 1000)
                leaks = judge.leaked(reply) if reply.case.scenario != UNGUARDED else []
                row.leaked += bool(leaks)
                if (wrong or leaks) and len(row.wrong) < 5:
                    row.wrong.append({"key": reply.case.key, "wrong": wrong, "leaked": leaks})
    table = [
        {
            "phase": label,
            "kind": kind,
            "requests": row.requests,
            "as_expected": row.as_expected,
            "leaked": row.leaked,
            "outcomes": dict(row.outcomes),
            "upstream_calls": {str(k): v for k, v in sorted(row.upstream_calls.items())},
            "wrong": row.wrong,
            "rate": row.as_expected / row.requests,
            "upstream_calls_mean": sum(k * v for k, v in row.upstream_calls.items()) / row.requests,
            "p50_ms": median([percentile(v, 50) for v in row.p50_by_round.values()]),
        }
        for (label, kind), row in rows.items()
    ]
    return {
        "options": asdict(opts),
        "samples": len(samples),
        "samples_per_set": dict(Counter(s.set_name for s in samples)),
        "calls": sum(len(s.calls) for s in samples),
        "rounds": len(runs.get(CLEANED, [])),
        "rows": table,
        "latency": repair_latency(runs, opts.repair_attempts),
        "fake_log_gaps": sum(run.log_gaps for phase_runs in runs.values() for run in phase_runs),
    }


def paired(runs: dict[str, list[PhaseRun]], a: str, b: str, fn: Callable[..., float]) -> float:
    """Median over rounds of fn(a's run, b's run) from the same round (rounds that measured
    nothing, NaN, left out)."""
    return median([fn(x, y) for x, y in zip(runs[a], runs[b], strict=False)])


def repair_latency(runs: dict[str, list[PhaseRun]], attempts: int) -> dict[str, Any]:
    phases = {
        name: {
            "n_per_round": len(runs[name][0].replies) if runs[name] else 0,
            "p50_ms": median([r.p50_ms for r in runs[name]]),
            "p99_ms": median([r.p99_ms for r in runs[name]]),
            "gateway_cpu_ms_per_request": median([r.cpu_ms for r in runs[name]]),
            "p50_by_round": [r.p50_ms for r in runs[name]],
            "p99_by_round": [r.p99_ms for r in runs[name]],
        }
        for name in LABELS
    }

    def vs(a: str, b: str) -> dict[str, float]:
        return {
            "added_p50_ms": paired(runs, a, b, lambda x, y: x.p50_ms - y.p50_ms),
            "added_p99_ms": paired(runs, a, b, lambda x, y: x.p99_ms - y.p99_ms),
            "p50_ratio": paired(runs, a, b, lambda x, y: x.p50_ms / y.p50_ms),
            "p99_ratio": paired(runs, a, b, lambda x, y: x.p99_ms / y.p99_ms),
            "added_cpu_ms": paired(runs, a, b, lambda x, y: x.cpu_ms - y.cpu_ms),
        }

    never = vs(NEVER, VALID)
    return {
        "phases": phases,
        "guard_on_vs_off": vs(VALID, UNGUARDED),
        "guard_on_vs_off_c1": vs(VALID + SERIAL, UNGUARDED + SERIAL),
        "one_repair_round": vs(CORRECTED, VALID),
        "one_repair_round_c1": vs(CORRECTED + SERIAL, VALID + SERIAL),
        "never_corrects": never,
        "per_repair_round_when_never_corrects_p50_ms": never["added_p50_ms"] / attempts,
        "cleaned_vs_valid": vs(CLEANED, VALID),
    }


COMPARISONS = (
    ("guard on vs off, valid calls", "guard_on_vs_off"),
    ("  the same, c=1", "guard_on_vs_off_c1"),
    ("one repair round (b) vs (a)", "one_repair_round"),
    ("  the same, c=1", "one_repair_round_c1"),
    ("never corrects (c) vs (a)", "never_corrects"),
    ("cleaned variant vs (a)", "cleaned_vs_valid"),
)


def report_repair(result: dict[str, Any]) -> str:
    opts = result["options"]
    per_set = ", ".join(f"{k} {v}" for k, v in sorted(result["samples_per_set"].items()))
    rows = [
        (
            row["phase"],
            row["kind"],
            row["requests"],
            f"{row['rate']:.1%}",
            row["leaked"],
            " ".join(f"{k}x{v}" for k, v in row["upstream_calls"].items()),
            fmt(row["p50_ms"]),
            ", ".join(f"{k} {v}" for k, v in row["outcomes"].items()),
        )
        for row in result["rows"]
    ]
    header = ["phase", "kind", "requests", "as expected", "leaked", "upstream calls", "p50 ms"]
    lines = [
        f"Repair through the gateway: {result['samples']} BFCL samples ({per_set}), "
        f"{result['calls']} ground-truth calls; {result['rounds']} round(s), concurrency "
        f"{opts['concurrency']}, repair_attempts {opts['repair_attempts']}, on_failure strip",
        "",
        markdown_table([*header, "outcomes"], rows),
        *(
            f"  WRONG {example['key']}: {example['wrong']} {example['leaked']}"
            for row in result["rows"]
            for example in row["wrong"]
        ),
        "",
    ]
    lat = result["latency"]
    rows = [
        (name, s["n_per_round"], fmt(s["p50_ms"]), fmt(s["p99_ms"]), fmt(s[cpu], ".3f"))
        for name, s in lat["phases"].items()
        for cpu in ["gateway_cpu_ms_per_request"]
    ]
    header = ["latency, medians over rounds", "n/round", "p50 ms", "p99 ms"]
    lines += [markdown_table([*header, "gateway CPU ms/req"], rows), ""]
    rows = [
        (
            what,
            f"{fmt(d['added_p50_ms'], '+.2f')} (x{fmt(d['p50_ratio'])})",
            f"{fmt(d['added_p99_ms'], '+.2f')} (x{fmt(d['p99_ratio'])})",
            fmt(d["added_cpu_ms"], "+.3f"),
        )
        for what, key in COMPARISONS
        for d in [lat[key]]
    ]
    header = ["added, medians over rounds", "p50 ms", "p99 ms", "gateway CPU ms/req"]
    lines.append(markdown_table(header, rows))
    phase_ok = {p: all(r["rate"] == 1 for r in result["rows"] if r["phase"] == p) for p in PHASES}
    leaks = sum(r["leaked"] for r in result["rows"])
    all_ok = all(r["rate"] == 1 for r in result["rows"])
    lines += [
        "",
        f"targets: repaired 100 % per kind: {passed(phase_ok[CORRECTED])}; "
        f"never-correcting ends stripped: {passed(phase_ok[NEVER])}; "
        f"nothing invalid reaches the client: {'PASS' if leaks == 0 else f'FAIL ({leaks})'}; "
        f"every phase as expected: {passed(all_ok)}",
    ]
    if result["fake_log_gaps"]:
        lines.append(f"the fake's log missed {result['fake_log_gaps']} upstream requests")
    return "\n".join(lines)


def run_repair(set_names: list[str], opts: RepairOptions) -> dict[str, Any]:
    everything = [s for name in set_names for s in load(name)]
    pool = sorted({t["function"]["name"] for s in everything for t in s.tools})
    rng = random.Random(SEED)
    samples = pick_samples(everything, opts.samples, rng)
    phases = repair_cases(samples, pool, rng, opts.repair_attempts)
    sizes = ", ".join(f"{name} {len(cases)}" for name, cases in phases.items())
    progress(f"repair: {len(samples)} samples; requests per round: {sizes}")
    with tempfile.TemporaryDirectory(prefix="tool-guard-bench-") as tmp, ExitStack() as stack:
        fake_url, gateways = start_repair_servers(Path(tmp), opts.repair_attempts, stack)
        load_before = load_average()
        progress(f"  {os.cpu_count()} cpus, load average {load_before}")
        runs = uvloop.run(repair_rounds(fake_url, gateways, phases, opts))
    result = summarize_repair(runs, opts, samples)
    result["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }
    return result


def progress(line: str) -> None:
    """Progress on stderr, so that --json output stays parseable."""
    print(line, file=sys.stderr, flush=True)
