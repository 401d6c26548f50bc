"""Stored Responses shared by three replicas through one Redis (`responses.store: {type:
redis}`): a response created through one replica is retrieved, listed, continued and deleted
through the others, and stays its tenant's own on every replica."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import openai
import pytest

from gateway.testing.fake_upstream import FakeUpstream
from tests.clients import sdk_client
from tests.e2e.helpers import last_upstream_body
from tests.scaleout.cluster import Replica, ready_replicas
from tests.scaleout.cluster import base_config as base

KEYS = {"acme": "SO_RESP_KEY_ACME", "globex": "SO_RESP_KEY_GLOBEX"}
SECRET = {tenant: f"sk-scaleout-responses-{tenant}" for tenant in KEYS}


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, fake: FakeUpstream
) -> Iterator[list[Replica]]:
    namespace = f"so-resp-{uuid.uuid4().hex[:12]}"
    config = base(
        fake.url,
        KEYS,
        models=[{"name": "assistant", "provider": "fake", "upstream_model": "up-resp"}],
        redis={"url": redis_url, "namespace": namespace},
        responses={"store": {"type": "redis"}},
    )
    env = {KEYS[t]: SECRET[t] for t in KEYS}
    yield from ready_replicas(tmp_path_factory, "responses", config, env)


def sdk(replica: Replica, tenant: str = "acme") -> openai.OpenAI:
    return sdk_client(replica.url, SECRET[tenant], 20)


def test_readiness_reports_the_shared_response_store(cluster: list[Replica]) -> None:
    for replica in cluster:
        assert replica.readyz().json()["shared_state"]["responses"] == "ok"


def test_any_replica_reads_continues_and_deletes_what_another_stored(
    cluster: list[Replica], fake_upstream: FakeUpstream
) -> None:
    one, two, three = cluster
    first = sdk(one).responses.create(model="assistant", input="Name a red fruit.")
    assert sdk(two).responses.retrieve(first.id).output_text == first.output_text
    items = sdk(three).responses.input_items.list(first.id)
    assert [item.type for item in items.data] == ["message"]
    second = sdk(three).responses.create(
        model="assistant", input="And a yellow one?", previous_response_id=first.id
    )
    assert [m["content"] for m in last_upstream_body(fake_upstream)["messages"]] == [
        "Name a red fruit.",
        first.output_text,
        "And a yellow one?",
    ]
    sdk(two).responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        sdk(one).responses.retrieve(second.id)


def test_another_tenant_finds_nothing_on_any_replica(cluster: list[Replica]) -> None:
    created = sdk(cluster[0]).responses.create(model="assistant", input="A secret question")
    for replica in cluster:
        with pytest.raises(openai.NotFoundError) as theirs:
            sdk(replica, "globex").responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError) as unknown:
            sdk(replica, "globex").responses.retrieve("resp_" + "0" * 48)
        assert theirs.value.body == {
            **unknown.value.body,  # the same error, but for the id asked about
            "message": f"Response with id '{created.id}' not found.",
        }
