from gateway.testing.harness.inprocess import GatewayServer
from tests.clients import sdk_client


def test_plain_and_streamed_through_fake(gw: GatewayServer) -> None:
    client = sdk_client(gw.url, "k")
    reply = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hello"}]
    )
    assert reply.choices[0].message.content == "Echo: hello"
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "a b c"}], stream=True
        )
        if c.choices
    )
    assert text == "Echo: a b c"
