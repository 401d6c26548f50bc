"""What bench/chaos.py observed, and what it makes of it: each request's record, the fault
windows, the breaker polls; the summary (answers by level, latency by window, breaker reaction
and recovery times, the deadline check) and its printed report."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gateway.testing.harness.fault_windows import Window
from gateway.testing.harness.stats import fmt, median, percentile
from gateway.testing.harness.tables import markdown_table

Json = dict[str, Any]

PRIMARY_BREAKER, BACKUP_BREAKER, KB_BREAKER = (
    "primary/chat-primary",
    "backup/chat-backup",
    "kb/docs",
)
# Whose reaction and recovery are timed: (the windows they follow, breaker, window kinds).
BREAKER_EVENTS = (
    ("primary", PRIMARY_BREAKER, ("failing", "slow")),
    ("primary", BACKUP_BREAKER, ("outage",)),
    ("retriever", KB_BREAKER, ("error", "slow")),
)
LEVELS = {"1": "grounded", "2": "general knowledge", "3": "retrieval unavailable"}
LEVELS["4"] = "unavailable answer"


@dataclass
class Poll:
    t: float
    states: dict[str, tuple[str, float | None]]  # breaker -> (state, opened_at)


@dataclass(slots=True)
class Record:
    i: int
    start: float  # unix time sent
    latency: float  # seconds to the last byte
    headers: float  # seconds to the response headers (a stream's first chunk is in hand then)
    stream: bool
    status: int = 0  # 0: no HTTP answer (see error)
    valid: bool = False
    level: str | None = None
    degraded: str | None = None
    fallback: str | None = None
    attempts: int = 1  # x-gateway-attempts; 1 when absent
    attempts_header: bool = False
    error: str | None = None  # client-side: timeout, connection error
    detail: str | None = None  # the start of a body that was not a valid answer


def window_kind(windows: list[Window], t: float) -> str:
    return next((w.kind for w in windows if w.start <= t < w.end), "outside")


def state_at(polls: list[Poll], name: str, t: float) -> str:
    """The breaker's state in the last poll before `t` (closed before it existed)."""
    state = "closed"
    for poll in itertools.takewhile(lambda p: p.t <= t, polls):
        state = poll.states.get(name, ("closed", None))[0]
    return state


def first_poll(polls: list[Poll], name: str, start: float, end: float, state: str) -> Poll | None:
    matching = (p for p in polls if start <= p.t <= end)
    return next((p for p in matching if p.states.get(name, ("closed",))[0] == state), None)


@dataclass
class Timing:
    """Breaker reaction or recovery times over the windows of one kind."""

    breaker: str
    event: str
    seconds: list[float] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # why a window was not measured


def reactions(
    windows: list[Window], polls: list[Poll], breaker: str, kind: str, grace: float
) -> Timing:
    """From the start of each `kind` window to the breaker open; windows where the breaker
    was not closed at the start are skipped, as are those where it never opened."""
    timing = Timing(breaker, f"opens after {kind} starts")
    for k, w in enumerate(windows):
        if w.kind != kind or not math.isfinite(w.end):
            continue
        if state_at(polls, breaker, w.start) != "closed":
            timing.skipped["not closed at start"] += 1
            continue
        # An opening is this window's doing until the next fault starts.
        later = [v.start for v in windows[k + 1 :] if v.kind != "healthy"]
        poll = first_poll(polls, breaker, w.start, min([w.end + grace, *later[:1]]), "open")
        if poll is None:
            timing.skipped["never opened"] += 1
            continue
        opened_at = poll.states[breaker][1]
        # opened_at is exact; the poll only bounds it (it re-opens no sooner than reset_seconds)
        at = opened_at if opened_at is not None and opened_at >= w.start - 0.05 else poll.t
        timing.seconds.append(max(0.0, at - w.start))
    return timing


def recoveries(windows: list[Window], polls: list[Poll], breaker: str, after: str) -> Timing:
    """From the start of each healthy window that follows an `after` window to the breaker
    closed; skipped when it was already closed then, or did not close within the window."""
    timing = Timing(breaker, f"closes after healthy follows {after}")
    for before, w in itertools.pairwise(windows):
        if w.kind != "healthy" or before.kind != after or not math.isfinite(w.end):
            continue
        if state_at(polls, breaker, w.start) == "closed":
            timing.skipped["closed at start"] += 1
            continue
        poll = first_poll(polls, breaker, w.start, w.end, "closed")
        if poll is None:
            timing.skipped["not closed within the window"] += 1
            continue
        timing.seconds.append(poll.t - w.start)
    return timing


def transitions(polls: list[Poll]) -> list[Json]:
    """State changes seen by the poller, per breaker."""
    out: list[Json] = []
    last: dict[str, str] = {}
    for poll in polls:
        for name, (state, _) in poll.states.items():
            if last.get(name, "closed") != state:
                out.append({"t": poll.t, "breaker": name, "state": state})
                last[name] = state
    return out


def share(rs: list[Record], test: Any) -> float:
    return sum(1 for r in rs if test(r)) / len(rs) if rs else math.nan


def group_stats(rs: list[Record]) -> Json:
    if not rs:
        return {"requests": 0}
    lat = [r.latency for r in rs]
    return {
        "requests": len(rs),
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": max(lat) * 1000,
        "fallback_share": share(rs, lambda r: r.fallback),
        "level4_share": share(rs, lambda r: r.level == "4"),
        "answered_share": share(rs, lambda r: r.valid),
    }


def after_outage(windows: list[Window], records: list[Record]) -> Json | None:
    """Once both upstreams are back: how long level-4 answers go on (breakers still open)."""
    for before, w in itertools.pairwise(windows):
        if before.kind == "outage" and w.kind == "healthy":
            sent = [r for r in records if w.start <= r.start < w.end]
            done = [r.start + r.latency - w.start for r in sent if r.valid and r.level != "4"]
            first = min(done) if done else math.nan
            level4 = [r.start - w.start for r in sent if r.level == "4"]
            return {
                "level4_answers": len(level4),
                "first_model_answer_s": first,
                "level4_sent_after_first_model_answer": sum(1 for t in level4 if t > first),
            }
    return None


def deadline_check(answered: list[Record], deadline: float) -> Json:
    """The deadline bounds the time to the first byte: for a plain answer, its headers; for a
    stream, its headers too (sent with the first chunk). The slack is the client's and the
    gateway's own time on a loaded loop."""
    heads = [r.headers for r in answered]
    return {
        "deadline_s": deadline,
        "max_headers_s": max(heads, default=math.nan),
        "max_plain_latency_s": max((r.latency for r in answered if not r.stream), default=math.nan),
        "max_latency_s": max((r.latency for r in answered), default=math.nan),
        **{
            f"headers_over_deadline{suffix}": sum(1 for h in heads if h > deadline + extra)
            for suffix, extra in (("", 0), ("_plus_100ms", 0.1), ("_plus_250ms", 0.25))
        },
    }


def counts(values: Any) -> dict[str, int]:
    return {str(k): v for k, v in sorted(Counter(values).items())}


def summarize(
    records: list[Record], seconds: float, windows: list[Window], polls: list[Poll], deadline: float
) -> Json:
    total = len(records)
    primary_windows = [w for w in windows if w.target == "primary"]
    retriever_windows = [w for w in windows if w.target == "retriever"]
    statuses = Counter(r.status for r in records)
    answered = [r for r in records if r.valid]
    levels = Counter(r.level or "none" for r in records)
    level4 = [r for r in records if r.level == "4"]
    summary: Json = {
        "requests": total,
        "streamed": sum(r.stream for r in records),
        "seconds": seconds,
        "rps": total / seconds if seconds else math.nan,
        "answered": len(answered),
        "answered_share": len(answered) / total if total else math.nan,
        "answered_by_a_model": sum(1 for r in answered if r.level != "4"),
        "deadline_check": deadline_check(answered, deadline),
        "status_5xx": sum(n for s, n in statuses.items() if s >= 500),
        "other_non_2xx": sum(n for s, n in statuses.items() if s and not 200 <= s < 300),
        "invalid_2xx": sum(1 for r in records if 200 <= r.status < 300 and not r.valid),
        "client_errors": dict(Counter(r.error for r in records if r.error)),
        "statuses": counts(r.status for r in records),
        "fallbacks": sum(1 for r in records if r.fallback),
        "retried": sum(1 for r in records if r.attempts > 1),
        # x-gateway-attempts counts calls that went out (not those an open breaker refused)
        "attempts": counts(r.attempts for r in records),
        # Upstream calls the headers account for: the header's count, else 1 for an answer by
        # a model (one call answered) and 0 for level 4 (0 or 1 call: unknown).
        "calls_by_header": sum(
            r.attempts if r.attempts_header else int(r.valid and r.level != "4") for r in records
        ),
        "level4_without_header": sum(1 for r in level4 if not r.attempts_header),
        # Level-4 answers by x-gateway-attempts ("-": no header, 0 or 1 call)
        "level4_by_attempts": dict(
            Counter(str(r.attempts) if r.attempts_header else "-" for r in level4)
        ),
        "levels": {k: levels[k] for k in ("1", "2", "3", "4", "none") if levels[k]},
        "degraded": dict(Counter(r.degraded for r in records if r.degraded)),
    }
    latency: Json = {}
    for kind in ("healthy", "failing", "slow", "outage", "outside"):
        rs = [r for r in records if window_kind(primary_windows, r.start) == kind]
        if rs:
            count = sum(1 for w in primary_windows if w.kind == kind)
            latency[kind] = {"windows": count, **group_stats(rs)}
            # The same, without the retriever's faults: requests sent while it was healthy.
            calm = [r.latency for r in rs if window_kind(retriever_windows, r.start) == "healthy"]
            latency[kind]["kb_healthy_p50_ms"] = percentile(calm, 50) * 1000
            latency[kind]["kb_healthy_p99_ms"] = percentile(calm, 99) * 1000
    healthy = latency.get("healthy", {})
    for kind in ("failing", "slow"):
        if kind in latency and healthy:
            for p in ("p50_ms", "p99_ms", "kb_healthy_p50_ms", "kb_healthy_p99_ms"):
                latency[kind][f"{p.removesuffix('_ms')}_vs_healthy"] = latency[kind][p] / healthy[p]
    summary["latency_by_primary_window"] = latency
    t0 = min(w.start for w in windows)
    summary["each_window"] = [
        {"target": w.target, "kind": w.kind, "from_s": w.start - t0, "to_s": w.end - t0}
        | group_stats([r for r in records if w.start <= r.start < w.end])
        for w in windows
    ]
    summary["after_outage"] = after_outage(primary_windows, records)
    retrieval: dict[str, Counter[str]] = {}
    for r in records:
        kind = window_kind(retriever_windows, r.start)
        retrieval.setdefault(kind, Counter())[r.level or "none"] += 1
    summary["levels_by_retriever_window"] = {k: dict(v) for k, v in retrieval.items()}
    by_target = {"primary": primary_windows, "retriever": retriever_windows}
    timings = []
    for target, breaker, kinds in BREAKER_EVENTS:
        ws = by_target[target]
        timings += [reactions(ws, polls, breaker, kind, deadline + 0.5) for kind in kinds]
        timings += [recoveries(ws, polls, breaker, kind) for kind in kinds]
    summary["breakers"] = [
        {
            "breaker": t.breaker,
            "event": t.event,
            "n": len(t.seconds),
            "median_s": median(t.seconds),
            "max_s": max(t.seconds, default=math.nan),
            "seconds": [round(s, 3) for s in t.seconds],
            "skipped": dict(t.skipped),
        }
        for t in timings
    ]
    gaps = [b.t - a.t for a, b in itertools.pairwise(polls)]
    summary["polls"] = {
        "count": len(polls),
        "gap_median_ms": median(gaps) * 1000,
        "gap_max_ms": max(gaps, default=math.nan) * 1000,
    }
    targets = ("primary", "retriever")
    summary["windows"] = {
        t: dict(Counter(w.kind for w in windows if w.target == t)) for t in targets
    }
    return summary


def p50_p99(row: Json, name: str, spec: str = ".2f") -> list[str]:
    """The cells of `name` ({p}: p50, then p99); "-" where the row has none."""
    return [fmt(row.get(name.format(p=p), math.nan), spec) for p in ("p50", "p99")]


def window_figures(row: Json) -> list[str]:
    """p50, p99, fallback and level-4 shares of a window's (or a kind of window's) requests."""
    shares = [f"{100 * row[k]:.1f} %" for k in ("fallback_share", "level4_share")]
    return p50_p99(row, "{p}_ms", ".1f") + shares


def print_report(s: Json, concurrency: int, poll_ms: float) -> None:
    total, levels, d = s["requests"], s["levels"], s["deadline_check"]

    def pct(n: int) -> str:
        return f"{n} ({100 * n / total:.2f} %)" if total else "-"

    print(
        f"\n{total} requests ({s['streamed']} streamed) at c={concurrency} "
        f"in {s['seconds']:.1f} s: {s['rps']:.0f} req/s\n"
    )
    rows: list[tuple[str, object]] = [
        ("answered (2xx, valid chat completion, any level)", pct(s["answered"])),
        ("... by a model (levels 1-3)", pct(s["answered_by_a_model"])),
        ("5xx responses (target 0)", s["status_5xx"]),
        ("other non-2xx responses", s["other_non_2xx"] - s["status_5xx"]),
        ("2xx with an invalid body", s["invalid_2xx"]),
        ("no response (client timeout / connection error)", sum(s["client_errors"].values())),
        ("answered by the fallback model", pct(s["fallbacks"])),
        ("more than one attempt (x-gateway-attempts > 1)", pct(s["retried"])),
        (
            f"max time to headers / plain latency, answered (deadline {d['deadline_s']:g} s)",
            f"{d['max_headers_s']:.3f} s / {d['max_plain_latency_s']:.3f} s",
        ),
        (
            "answered with headers after the deadline (+0 / +100 / +250 ms)",
            " / ".join(
                str(d[f"headers_over_deadline{x}"]) for x in ("", "_plus_100ms", "_plus_250ms")
            ),
        ),
    ]
    rows += [(f"level {k} ({name})", pct(levels.get(k, 0))) for k, name in LEVELS.items()]
    if levels.get("none"):
        rows.append(("no x-gateway-level header", levels["none"]))
    print(markdown_table(("measure", "value"), rows))

    print("\nLatency by the primary's window (requests by when they were sent):\n")
    head = ("window", "windows", "requests", "p50 ms", "p99 ms", "fallback", "level 4", "max ms")
    head += ("p50 / healthy", "p99 / healthy", "retriever healthy too: p50 ms", "p99 ms")
    head += ("p50 / healthy", "p99 / healthy")
    table = [
        (
            *(kind, row["windows"], row["requests"], *window_figures(row)),
            fmt(row["max_ms"], ".0f"),
            *p50_p99(row, "{p}_vs_healthy"),
            *p50_p99(row, "kb_healthy_{p}_ms", ".1f"),
            *p50_p99(row, "kb_healthy_{p}_vs_healthy"),
        )
        for kind, row in s["latency_by_primary_window"].items()
    ]
    print(markdown_table(head, table))

    print("\nLevels by the retriever's window:\n")
    head = ("retriever", "requests", "level 1", "level 2", "level 3", "level 4")
    by_window = s["levels_by_retriever_window"].items()
    table = [(k, sum(c.values()), *(c.get(level, 0) for level in "1234")) for k, c in by_window]
    print(markdown_table(head, table))

    polls = s["polls"]
    print(
        f"\nCircuit breakers (polled every {poll_ms:.0f} ms: median gap "
        f"{fmt(polls['gap_median_ms'], '.0f')} ms, max {fmt(polls['gap_max_ms'], '.0f')}"
        " ms; open times from the breaker's own opened_at):\n"
    )
    head = ("breaker", "event", "n", "median s", "max s", "skipped")
    table = []
    for b in s["breakers"]:
        skipped = ", ".join(f"{n} {why}" for why, n in b["skipped"].items()) or "-"
        table.append(
            (b["breaker"], b["event"], b["n"], fmt(b["median_s"]), fmt(b["max_s"]), skipped)
        )
    print(markdown_table(head, table))
    outage = s["after_outage"]
    if outage:
        print(
            f"\nAfter the outage: first model answer {fmt(outage['first_model_answer_s'], '.2f')}"
            f" s into the healthy window; {outage['level4_answers']} level-4 answers to requests"
            f" sent in it, {outage['level4_sent_after_first_model_answer']} of them sent later"
        )
    print("\nEach window (t from the first window's start):\n")
    head = ("target", "window", "t s", "requests", "p50 ms", "p99 ms", "fallback", "level 4")
    table = []
    for w in s["each_window"]:
        span = f"{w['from_s']:.1f}-{w['to_s']:.1f}"
        figures = window_figures(w) if w["requests"] else ["-"] * 4
        table.append((w["target"], w["kind"], span, w["requests"], *figures))
    print(markdown_table(head, table))
    if s["client_errors"]:
        print(f"\nclient errors: {s['client_errors']}")
    print(
        f"statuses: {s['statuses']}; x-gateway-degraded: {s['degraded']}; "
        f"x-gateway-attempts: {s['attempts']}; calls by header {s['calls_by_header']} "
        f"(+ up to {s['level4_without_header']} level-4 answers without it)"
    )
    print(
        f"gateway CPU {s['gateway_cpu_ms_per_request']:.2f} ms/request; upstream calls "
        f"{s['upstream_requests']}; gateway log {s['gateway_log']}; failed polls "
        f"{s['failed_polls']}"
    )
    print(
        f"upstream failures (gateway metrics): {s['upstream_failures']}; level-4 answers by "
        f"x-gateway-attempts: {s['level4_by_attempts']}"
    )
