"""What the fuzz tests check beyond each answer's contract (rawhttp.check_reply): that a body a
strict server must refuse is refused, and, at the end of a module, that the gateway process
survived with its memory."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hypothesis import event

from tests.reliability.jsonfuzz import acceptable_json_object, dumps
from tests.reliability.rawhttp import KNOWN_BUG, KNOWN_EXAMPLES, KNOWN_SEEN, PASSED_THROUGH, Sent
from tests.reliability.warmup import CHAT, JSON_TYPE, send, tenant_a

if TYPE_CHECKING:
    from tests.reliability.fuzz_target import FuzzGateway


def refuses_what_it_must(fuzz: FuzzGateway, sent: Sent, raw: bytes) -> None:
    """A body over the size limit gets 413 (or 429), one that is no JSON object an error."""
    from tests.reliability.fuzz_target import MAX_BODY

    reply, parsed = send(fuzz, sent)
    event(f"status={reply.status}")
    if parsed is KNOWN_BUG:
        return
    if len(raw) > MAX_BODY:
        assert reply.status in (413, 429), reply.describe()
    elif not acceptable_json_object(raw):
        assert reply.status >= 400, f"accepted a body it must refuse\n{sent.describe()}"


def assert_survived(fuzz: FuzzGateway, growth_limit_mib: float) -> None:
    """The process is alive, answers /healthz and a normal request (streamed too), and its RSS
    grew less than `growth_limit_mib` since the warm-up."""
    from tests.reliability.rawhttp import check_stream

    assert fuzz.gateway.alive(), fuzz.gateway.output()[-3000:]
    reply, health = send(fuzz, Sent(b"GET", b"/healthz", [], None))
    assert reply.status == 200 and health == {"status": "ok"}
    fresh = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": f"alive? {time.time()}"}],
    }
    reply, answer = send(fuzz, Sent(b"POST", CHAT, [JSON_TYPE, tenant_a()], dumps(fresh)))
    assert reply.status == 200 and answer["choices"][0]["message"]["content"].startswith(
        "Echo: alive?"
    )
    reply, _ = send(
        fuzz, Sent(b"POST", CHAT, [JSON_TYPE, tenant_a()], dumps({**fresh, "stream": True}))
    )
    assert reply.status == 200
    check_stream(reply.body)
    rss = fuzz.gateway.rss_kib()
    growth_mib = (rss - fuzz.baseline_rss_kib) / 1024
    print(
        f"\nfuzz: {fuzz.sent} requests to the gateway ({fuzz.by_test}); "
        f"RSS {fuzz.baseline_rss_kib / 1024:.1f} MiB after warm-up -> "
        f"{rss / 1024:.1f} MiB at the end (growth {growth_mib:+.1f} MiB, limit "
        f"{growth_limit_mib} MiB)"
    )
    assert growth_mib < growth_limit_mib, f"RSS grew {growth_mib:.1f} MiB over {fuzz.sent} requests"

    seen = ", ".join(f"{name}: {count}" for name, count in sorted(KNOWN_SEEN.items()))
    relayed = sum(PASSED_THROUGH.values())
    print(
        f"fuzz: known gateway bugs seen ({seen or 'none'}); "
        f"{relayed} schema-breaking upstream answers relayed"
    )
    for name, example in sorted(KNOWN_EXAMPLES.items()):
        print(f"first {name}: {example}\n")
