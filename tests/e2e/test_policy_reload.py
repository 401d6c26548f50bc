"""Live reload of policy files on a real gateway process (`python -m gateway serve`).

The policy under test re-routes the alias `auto` to one tier (`m1`, `m2`, ...), so every
response says which policy served it (`x-gateway-route: ...; model=mN; ...`). While client
tasks hammer chat completions, the policy file is rewritten: valid versions, invalid ones, a
half-written one, an empty one, deleted and created again. No request may fail; once a reload
is counted, the next requests see the new policy; an invalid file leaves the previous policy
in effect and is counted as invalid. Then SIGHUP (with polling off) and `POST /admin/reload`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.configs import Json, dump_yaml, write_config
from gateway.testing.harness.starters import start_gateway
from tests.e2e.helpers import poll_until, request
from tests.resilience.test_redis_breakers import ADMIN_ENV, ADMIN_KEY

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
ROUTE_MODEL = re.compile(r"\bmodel=([\w-]+);")
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def config(fake_url: str, watch: bool = True) -> Json:
    """Models m0..m3 on the fake; `auto` routes to m0 unless a policy says otherwise."""
    timeouts = {"connect": 2, "read": 10, "total": 10}
    return {
        "server": {"access_log": False, "watch_config": watch},
        "auth": {"admin_key_env": "GATEWAY_ADMIN_KEY"},
        "providers": {"fake": {"type": "openai", "base_url": fake_url, "timeouts": timeouts}},
        "models": [
            {"name": f"m{i}", "provider": "fake", "upstream_model": f"up-m{i}"} for i in range(4)
        ],
        "cache": {
            "store": {"type": "memory"},
            "embedder": {"type": "hash"},
            "defaults": {"enabled": False},
        },
        "resilience": {"retry": {"attempts": 1}, "breaker": {"failures": 1000}},
        "routing": {"aliases": {"auto": {"tiers": [{"model": "m0"}], "sticky": False}}},
    }


def route_policy(model: str) -> str:
    """A policy that sends every request for `auto` to `model`, as text: the tests below edit
    it on disk, whole or broken. One key a line, so the lines are known (tiers: line 7)."""
    return dump_yaml(
        {
            "description": f"auto goes to {model}",
            "match": {"models": ["auto"]},
            "routing": {"aliases": {"auto": {"tiers": [{"model": model}]}}},
        }
    )


def with_unknown_field(model: str) -> str:
    """A schema error on line 7: `colour` is no field of an alias."""
    return route_policy(model).replace("auto:\n", "auto:\n      colour: 1\n")


# A second policy that stays valid throughout: the directory holds more than one file.
OTHER_POLICY = {
    "description": "direct requests for m0 are never cached",
    "match": {"models": ["m0"]},
    "cache": {"enabled": False},
}


@dataclass(frozen=True, slots=True)
class Gateway:
    url: str
    route: Path  # policies/route.yaml
    proc: subprocess.Popen[bytes]


@contextmanager
def gateway(tmp_path: Path, fake_url: str, watch: bool = True) -> Iterator[Gateway]:
    """A gateway process on a tmp config with a policies/ directory beside it."""
    path = write_config(tmp_path, config(fake_url, watch), {"other": OTHER_POLICY})
    route = tmp_path / "policies" / "route.yaml"
    route.write_text(route_policy("m1"), encoding="utf-8")
    with start_gateway(tmp_path, path, env=ADMIN_ENV, timeout=20) as server:
        yield Gateway(server.url, route, server.proc)


async def reloads(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    found = re.findall(r'gateway_config_reloads_total\{result="(\w+)"\} (\S+)', text)
    return {result: float(value) for result, value in found}


def reloads_now(url: str) -> dict[str, float]:
    async def once() -> dict[str, float]:
        async with aiohttp.ClientSession() as session:
            return await reloads(session, url)

    return asyncio.run(once())


def routed_model(url: str) -> str:
    resp = asyncio.run(request("POST", url + "/v1/chat/completions", body=CHAT))
    assert resp.status == 200, resp.text
    found = ROUTE_MODEL.search(resp.headers.get("x-gateway-route", ""))
    assert found, dict(resp.headers)
    return found.group(1)


def admin_routed_tier(url: str) -> str:
    """What /admin/policies says `auto` resolves to for any tenant."""
    query = "/admin/policies?tenant=anyone&model=auto"
    resp = asyncio.run(request("GET", url + query, headers=ADMIN))
    assert resp.status == 200, resp.text
    tiers = resp.json()["effective"]["routing"]["aliases"]["auto"]["tiers"]
    return str(tiers[0]["model"])


# --- (a) reload under load ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    sent: float  # monotonic, before the request was sent
    received: float  # monotonic, once the whole body was read
    status: int
    model: str | None  # the tier from x-gateway-route
    problem: str | None  # why the reply is not a valid completion (None: it is)


@dataclass(frozen=True, slots=True)
class Epoch:
    """From the moment a reload was seen until the next change was written, every request
    sent and answered inside the window must be routed to `model`."""

    model: str
    start: float
    end: float
    label: str


def check_completion(status: int, body: bytes, text: str) -> str | None:
    if status != 200:
        return f"HTTP {status}: {body[:300]!r}"
    try:
        data = json.loads(body)
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return f"not a completion ({exc!r}): {body[:300]!r}"
    if data.get("object") != "chat.completion" or content != f"Echo: {text}":
        return f"unexpected completion: {body[:300]!r}"
    return None


def test_policy_edits_under_load_never_fail_a_request(
    tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    with gateway(tmp_path, fake_upstream.url) as gw:
        assert routed_model(gw.url) == "m1"
        replies, epochs, invalid_seen = asyncio.run(edit_under_load(gw.url, gw.route))

    problems = [r for r in replies if r.problem is not None]
    assert len(replies) > 300, f"only {len(replies)} requests in the run"
    assert not problems, f"{len(problems)} of {len(replies)} requests failed: {problems[:3]}"
    for epoch in epochs:
        inside = [r for r in replies if r.sent >= epoch.start and r.received <= epoch.end]
        assert inside, f"no request completed during {epoch.label}"
        wrong = [r.model for r in inside if r.model != epoch.model]
        assert not wrong, (
            f"{epoch.label}: {len(wrong)} of {len(inside)} requests routed to {set(wrong)}, "
            f"expected {epoch.model}"
        )
    # Across a change, a request sees the policy before it or the one after, nothing else:
    # epoch i's policy may be in effect from the write that ended epoch i-1 until the reload
    # that started epoch i+1 was seen.
    for reply in replies:
        possible = {
            epoch.model
            for i, epoch in enumerate(epochs)
            if (i == 0 or epochs[i - 1].end <= reply.received)
            and (i + 1 == len(epochs) or reply.sent <= epochs[i + 1].start)
        }
        assert reply.model in possible, (reply, possible)
    assert invalid_seen >= 5


async def edit_under_load(url: str, route: Path) -> tuple[list[Reply], list[Epoch], float]:
    timeout = aiohttp.ClientTimeout(total=15)
    async with (
        aiohttp.ClientSession(timeout=timeout) as clients,
        aiohttp.ClientSession(timeout=timeout) as admin,
    ):
        run = LoadRun(url, route, clients, admin)
        await asyncio.gather(run.edit(), *(run.client(i) for i in range(6)))
        invalid_seen = (await run.counts()).get("invalid", 0)
    return run.replies, run.epochs, invalid_seen


class LoadRun:
    """Client tasks hammering the gateway, and the editor rewriting the policy meanwhile."""

    def __init__(
        self,
        url: str,
        route: Path,
        clients: aiohttp.ClientSession,
        admin: aiohttp.ClientSession,
    ) -> None:
        self.url, self.route = url, route
        self.clients, self.admin = clients, admin
        self.replies: list[Reply] = []
        self.epochs: list[Epoch] = []
        self.current = Epoch("m1", time.monotonic(), 0.0, "the initial policy")
        self.stop = asyncio.Event()

    async def client(self, worker: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            text = f"worker {worker} request {n}"
            body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
            sent = time.monotonic()
            try:
                async with self.clients.post(self.url + "/v1/chat/completions", json=body) as resp:
                    raw = await resp.read()
                    status, route_header = resp.status, resp.headers.get("x-gateway-route", "")
            except aiohttp.ClientError as exc:  # a failed request, recorded as such
                self.replies.append(Reply(sent, time.monotonic(), 0, None, repr(exc)))
                continue
            found = ROUTE_MODEL.search(route_header)
            model = found.group(1) if found else None
            problem = check_completion(status, raw, text)
            self.replies.append(Reply(sent, time.monotonic(), status, model, problem))

    async def edit(self) -> None:
        full = route_policy("m3")
        cut = full.index("{model: m3}") + len("{model: m")  # inside a flow mapping
        try:
            await asyncio.sleep(0.5)  # the clients get going on the initial policy
            await self.valid("an edit to m2", "m2", lambda: self.write(route_policy("m2")))
            await self.invalid("a schema error", lambda: self.write(with_unknown_field("m2")))
            await self.invalid("a half-written file", lambda: self.write_prefix(full[:cut]))
            await self.valid("the rest of the file (m3)", "m3", lambda: self.append(full[cut:]))
            await self.invalid("an empty file", lambda: self.write(""))
            await self.valid("an edit to m1", "m1", lambda: self.write(route_policy("m1")))
            await self.invalid("an unknown tier model", lambda: self.write(route_policy("m9")))
            await self.invalid(
                "a rate limit narrowed to a model",
                lambda: self.write(route_policy("m2") + "rate_limits: {concurrent: 5}\n"),
            )
            await self.valid("deleting the file (config.yaml's m0)", "m0", self.route.unlink)
            await self.valid("creating it again (m2)", "m2", lambda: self.write(route_policy("m2")))
            self.close_epoch()
        finally:
            self.stop.set()

    async def valid(self, change: str, model: str, apply: Callable[[], object]) -> None:
        """A change that reloads: the old policy holds until it is written, the new one from
        the moment the reload is counted."""
        before = (await self.counts()).get("reloaded", 0)
        self.close_epoch()
        apply()
        seen = await self.wait_for("reloaded", before + 1, change)
        self.current = Epoch(model, seen, 0.0, f"after {change}")
        await self.probe(model, change)
        await asyncio.sleep(0.4)  # the clients run on the new policy a while

    async def invalid(self, change: str, apply: Callable[[], object]) -> None:
        """A change that is refused: counted as invalid, the running policy unchanged."""
        before = await self.counts()
        apply()
        await self.wait_for("invalid", before.get("invalid", 0) + 1, change)
        await asyncio.sleep(0.3)
        after = await self.counts()
        assert after.get("reloaded", 0) == before.get("reloaded", 0), f"{change} was loaded"
        await self.probe(self.current.model, f"{change} (refused)")

    def close_epoch(self) -> None:
        now = time.monotonic()
        self.epochs.append(Epoch(self.current.model, self.current.start, now, self.current.label))

    async def counts(self) -> dict[str, float]:
        return await reloads(self.admin, self.url)

    async def wait_for(self, result: str, at_least: float, what: str) -> float:
        """Poll the reload counter until it reaches `at_least`; returns when it was seen."""
        deadline = time.monotonic() + 6
        while (await self.counts()).get(result, 0) < at_least:
            assert time.monotonic() < deadline, f"{what}: no {result!r} reload within 6 s"
            await asyncio.sleep(0.05)
        return time.monotonic()

    async def probe(self, expected: str, what: str) -> None:
        """A request sent now, and the admin view, agree on the policy in effect."""
        async with self.clients.post(self.url + "/v1/chat/completions", json=CHAT) as resp:
            await resp.read()
            found = ROUTE_MODEL.search(resp.headers.get("x-gateway-route", ""))
        assert found and found.group(1) == expected, (what, resp.headers)
        query = "/admin/policies?tenant=anyone&model=auto"
        async with self.admin.get(self.url + query, headers=ADMIN) as resp:
            effective = (await resp.json())["effective"]
        assert effective["routing"]["aliases"]["auto"]["tiers"][0]["model"] == expected, what

    def write(self, text: str) -> None:
        self.route.write_text(text, encoding="utf-8")

    def write_prefix(self, text: str) -> None:
        """The first part of a file, flushed to disk: what the poller may read mid-save."""
        with self.route.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def append(self, text: str) -> None:
        with self.route.open("a", encoding="utf-8") as f:
            f.write(text)


# --- (b) SIGHUP ------------------------------------------------------------------------------


def test_sighup_picks_up_a_policy_change(tmp_path: Path, fake_upstream: FakeUpstream) -> None:
    with gateway(tmp_path, fake_upstream.url, watch=False) as gw:
        url, route, proc = gw.url, gw.route, gw.proc
        assert routed_model(url) == "m1"
        route.write_text(route_policy("m3"), encoding="utf-8")
        time.sleep(1.3)  # longer than a poll: nothing watches the files
        assert routed_model(url) == "m1", "watching is off: only the signal reloads"
        proc.send_signal(signal.SIGHUP)
        assert poll_until(lambda: routed_model(url) == "m3", timeout=5)
        assert admin_routed_tier(url) == "m3"
        assert reloads_now(url).get("reloaded") == 1

        (route.parent / "late.yaml").write_text(
            "match: {models: [auto]}\nrouting: {aliases: {auto: {colour: red}}}\n",
            encoding="utf-8",
        )
        proc.send_signal(signal.SIGHUP)
        assert poll_until(lambda: reloads_now(url).get("invalid") == 1, timeout=5)
        assert routed_model(url) == "m3", "a new bad file is refused: the policy stays"


# --- (c) POST /admin/reload ------------------------------------------------------------------


def admin_reload(url: str) -> tuple[int, dict[str, object]]:
    resp = asyncio.run(request("POST", url + "/admin/reload", headers=ADMIN))
    return resp.status, resp.json()


BAD_POLICIES = {
    "a value of the wrong type": (
        "description: bad\nmatch:\n  models: [auto]\ncache:\n  enabled: perhaps\n",
        "cache.enabled (line 5)",
    ),
    "an unknown field": (with_unknown_field("m2"), "routing.aliases.auto.colour (line 7)"),
    "a half-written file": (
        "match:\n  models: [auto]\nrouting: {aliases: {auto: {tiers: [{model: m",
        "line 3",
    ),
    "a rate limit narrowed to a model": (
        route_policy("m2") + "rate_limits: {concurrent: 5}\n",
        "match.models (line 3)",
    ),
}


def test_admin_reload_refuses_a_bad_policy_naming_file_and_line(
    tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    with gateway(tmp_path, fake_upstream.url, watch=False) as gw:
        url, route = gw.url, gw.route
        source = str(tmp_path / "config.yaml")
        assert admin_reload(url) == (200, {"result": "unchanged", "source": source})
        for count, (what, (bad_policy, expected)) in enumerate(BAD_POLICIES.items(), 1):
            route.write_text(bad_policy, encoding="utf-8")
            status, body = admin_reload(url)
            assert status == 422, (what, body)
            error = body["error"]
            assert isinstance(error, dict) and error["code"] == "config_invalid", (what, error)
            message = str(error["message"])
            assert str(route) in message, (what, message)
            assert expected in message, (what, message)
            assert routed_model(url) == "m1", f"{what}: the running policy stays"
            assert reloads_now(url).get("invalid") == count, what

        route.write_text(route_policy("m2"), encoding="utf-8")
        assert admin_reload(url) == (200, {"result": "reloaded", "source": source})
        assert routed_model(url) == "m2"


def test_admin_reload_names_the_line_of_an_unknown_tier_model(
    tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    """docs/POLICIES.md: every problem names the file, the field path and the line, also for
    a tier naming a model config.yaml lacks (a cross-reference check)."""
    with gateway(tmp_path, fake_upstream.url, watch=False) as gw:
        url, route = gw.url, gw.route
        route.write_text(route_policy("m9"), encoding="utf-8")  # the tier is on line 8
        status, body = admin_reload(url)
        assert status == 422, body
        message = str(body["error"]["message"])  # type: ignore[index]
        assert str(route) in message and "m9" in message, message
        assert re.search(r"\(line [78]\)", message), message  # tiers: line 7, the tier: 8
