"""Random faults for the fake upstream, drawn for each upstream request at given rates (a
retry draws again): HTTP 500s, slow and too-slow answers, malformed bodies, streams cut or
ending in an error event, and, for requests that declare tools, tool calls that name a tool
never declared or break its schema, some staying wrong on repair too.

The calls name `lookup` (valid), `convert` with unit "yards" (outside an m/ft enum) or one of
HALLUCINATED; arguments carry the fake's echo (`Echo[<user>]: <last user message>`), so a
request's `user` marker survives in them. Each fault drawn is counted in /_fake/stats as
`injected_<fault>`.

    python -m gateway.testing.harness.random_faults --faults '{"error_500": 0.1}' --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict, dataclass
from typing import Any

from gateway.testing.fake_upstream import FakeUpstream, Knobs, Received, ScriptedReply

HALLUCINATED = ("lookup_web", "transfer_money", "convertt", "search")


@dataclass(frozen=True)
class Faults:
    """How often each fault is drawn (0..1)."""

    error_500: float = 0.03  # HTTP 500 (retryable)
    slow: float = 0.04  # 1.5 s before the answer
    too_slow: float = 0.003  # 12 s: past a 10 s deadline
    malformed: float = 0.01  # non-stream: a 200 whose JSON is cut short
    stream_cut: float = 0.03  # streams: the connection dropped after two chunks
    stream_error: float = 0.01  # streams: an error event after two chunks
    tool_text: float = 0.25  # requests with tools: a text answer, no call
    hallucinate: float = 0.25  # first answer with tools: an undeclared tool name
    bad_arguments: float = 0.10  # first answer with tools: arguments break the schema
    stays_wrong: float = 0.15  # repairs: still an undeclared name


class RandomFaults:
    """A fault hook (`FakeUpstream(fault=...)`): this request's knobs, with what was drawn."""

    def __init__(self, faults: Faults, seed: int, stats: dict[str, int]) -> None:
        self.faults, self.rng, self.stats = faults, random.Random(seed), stats
        stats.update({f"injected_{name}": 0 for name in asdict(faults)})

    def __call__(self, received: Received) -> Knobs:
        faults, rng, body = self.faults, self.rng, received.body
        update: dict[str, Any] = {}
        r = rng.random()
        if r < faults.error_500:
            update["status"] = self.count("error_500", 500)
        elif r < faults.error_500 + faults.too_slow:
            update["latency_ms"] = self.count("too_slow", 12_000)
        elif r < faults.error_500 + faults.too_slow + faults.slow:
            update["latency_ms"] = self.count("slow", 1_500)
        if "status" not in update:
            r = rng.random()
            if body.get("stream"):
                if r < faults.stream_cut:
                    update["cut_after"] = self.count("stream_cut", 2)
                elif r < faults.stream_cut + faults.stream_error:
                    update["stream_error_after"] = self.count("stream_error", 2)
            elif r < faults.malformed:
                update["malformed"] = self.count("malformed", True)
        if body.get("tools"):
            reply = self.tool_reply(body)
            if reply is not None:
                update["replies"] = [reply]
        return received.knobs.model_copy(update=update)

    def count(self, fault: str, value: Any) -> Any:
        self.stats[f"injected_{fault}"] += 1
        return value

    def tool_reply(self, body: dict[str, Any]) -> ScriptedReply | None:
        faults, rng = self.faults, self.rng
        messages = body.get("messages") or []
        repair = any(m.get("role") == "tool" for m in messages)
        if not repair and rng.random() < faults.tool_text:
            self.count("tool_text", None)
            return None  # the default echo, as text
        users = [m for m in messages if m.get("role") == "user"]
        last_user: dict[str, Any] = users[-1] if users else {}
        echo = f"Echo[{body.get('user')}]: {last_user.get('content')}"
        name, arguments = "lookup", {"query": echo}
        r = rng.random()
        if repair:
            if r < faults.stays_wrong:
                name = self.count("stays_wrong", rng.choice(HALLUCINATED))
        elif r < faults.hallucinate:
            name = self.count("hallucinate", rng.choice(HALLUCINATED))
        elif r < faults.hallucinate + faults.bad_arguments:
            name = self.count("bad_arguments", "convert")
            arguments = {"query": echo, "unit": "yards"}
        return ScriptedReply(tool_calls=[{"name": name, "arguments": arguments}])


def main() -> None:
    """A fake upstream (echoing each request's `user`) with random faults, until killed."""
    from gateway.testing.cli import run_fake

    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", default="{}", help="Faults as JSON (rates by name)")
    parser.add_argument("--seed", type=int, default=1)
    args, rest = parser.parse_known_args()
    faults = Faults(**json.loads(args.faults))

    async def start(host: str, port: int) -> str:
        fake = FakeUpstream(host, port, history=50)
        fake.defaults = Knobs(echo_user=True)
        fake.inject(RandomFaults(faults, args.seed, fake.stats))
        await fake.start()
        return f"fake upstream listening on http://{fake.host}:{fake.port}"

    sys.argv = [sys.argv[0], *rest]
    run_fake("A fake upstream with random faults.", 0, start)


if __name__ == "__main__":
    main()
