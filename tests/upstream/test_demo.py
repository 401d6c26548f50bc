import base64
import struct

import orjson

from gateway.config import build_settings, parse_config
from gateway.upstream.demo import DEMO_NOTICE, DemoProvider

SETTINGS = build_settings(
    parse_config("providers: {demo: {type: demo}}\nmodels: [{name: demo, provider: demo}]"),
    "<t>",
    {},
)
DEMO = DemoProvider(SETTINGS.providers["demo"])
ASK = {"model": "demo", "messages": [{"role": "user", "content": "What is 2+2?"}]}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "book",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "nights": {"type": "integer", "minimum": 2},
                    "kind": {"enum": ["hotel", "hostel"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["city", "nights", "kind", "tags"],
            },
        },
    }
]


async def test_answers_are_deterministic_and_labelled() -> None:
    first, second = await DEMO.chat(ASK), await DEMO.chat(ASK)
    content = first["choices"][0]["message"]["content"]
    assert content == second["choices"][0]["message"]["content"]
    assert content.startswith(DEMO_NOTICE) and "What is 2+2?" in content
    assert first["usage"]["total_tokens"] > 0


async def test_tools_produce_a_call_that_fits_the_schema() -> None:
    reply = await DEMO.chat({**ASK, "tools": TOOLS})
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    args = orjson.loads(call["function"]["arguments"])
    assert call["function"]["name"] == "book"
    assert args["nights"] == 2 and args["kind"] == "hotel" and isinstance(args["tags"], list)


async def test_a_tool_result_gets_a_text_answer() -> None:
    history = [
        *ASK["messages"],
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    reply = await DEMO.chat({**ASK, "messages": history, "tools": TOOLS})
    assert reply["choices"][0]["message"]["content"].endswith("The tool returned: sunny")


async def test_stream_reassembles_to_the_plain_answer_with_usage_last() -> None:
    body = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
    chunks = [c async for batch in DEMO.stream(body) for c in batch]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == (await DEMO.chat(ASK))["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


async def test_streamed_tool_call_arguments_arrive_in_fragments() -> None:
    stream = DEMO.stream({**ASK, "tools": TOOLS, "stream": True})
    chunks = [c async for batch in stream for c in batch]
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls[0]["id"].startswith("call_") and calls[0]["function"]["name"] == "book"
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert len(calls) > 2 and orjson.loads(arguments)["kind"] == "hotel"


async def test_embeddings_float_and_base64_agree_and_are_normalised() -> None:
    plain = await DEMO.embeddings({"model": "e", "input": ["cat", "cat", "dog"]})
    packed = await DEMO.embeddings({"model": "e", "input": "cat", "encoding_format": "base64"})
    vectors = [d["embedding"] for d in plain["data"]]
    assert vectors[0] == vectors[1] != vectors[2]
    assert abs(sum(v * v for v in vectors[0]) - 1) < 1e-9
    raw = base64.b64decode(packed["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert max(abs(a - b) for a, b in zip(decoded, vectors[0], strict=True)) < 1e-6
