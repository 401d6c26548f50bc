import base64
import struct

import orjson

from gateway.config import build_settings, parse_config
from gateway.guard.loops import LoopStop, finalize_request
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


async def test_the_loop_guards_stop_is_answered_from_the_tool_results_not_echoed() -> None:
    history = [
        *ASK["messages"],
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    stop = LoopStop("identical_calls", "The tool `book` was called 3 times.", 3, 3, "book")
    body = finalize_request({**ASK, "messages": history, "tools": TOOLS}, stop)
    content = (await DEMO.chat(body))["choices"][0]["message"]["content"]
    assert content == f"{DEMO_NOTICE} The gateway stopped the tool calls. The tools returned: sunny"


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


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "rank": {"type": "integer", "minimum": 1}},
    "required": ["city", "rank"],
    "additionalProperties": False,
}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}}


async def test_json_object_and_json_schema_answers_are_json() -> None:
    plain = await DEMO.chat({**ASK, "response_format": {"type": "json_object"}})
    content = orjson.loads(plain["choices"][0]["message"]["content"])
    assert content == {"demo": DEMO_NOTICE, "you_asked": "What is 2+2?"}
    typed = await DEMO.chat({**ASK, "response_format": JSON_SCHEMA})
    assert orjson.loads(typed["choices"][0]["message"]["content"]) == {
        "city": "What is 2+2?",
        "rank": 1,
    }


async def test_json_is_answered_after_a_tool_result_too() -> None:
    history = [*ASK["messages"], {"role": "tool", "tool_call_id": "c1", "content": "4"}]
    reply = await DEMO.chat({**ASK, "messages": history, "response_format": JSON_SCHEMA})
    assert set(orjson.loads(reply["choices"][0]["message"]["content"])) == {"city", "rank"}


async def test_n_choices_are_distinct_indexed_and_counted() -> None:
    one, three = await DEMO.chat(ASK), await DEMO.chat({**ASK, "n": 3})
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    texts = [c["message"]["content"] for c in three["choices"]]
    assert len(set(texts)) == 3 and texts[1].startswith(f"{DEMO_NOTICE} (choice 2 of 3)")
    assert three["usage"]["completion_tokens"] > 2 * one["usage"]["completion_tokens"]
    typed = await DEMO.chat({**ASK, "n": 2, "response_format": JSON_SCHEMA})
    assert len({c["message"]["content"] for c in typed["choices"]}) == 2


async def test_a_streamed_n_interleaves_choices_that_reassemble_to_the_plain_ones() -> None:
    body = {**ASK, "n": 2, "stream": True}
    chunks = [c async for batch in DEMO.stream(body) for c in batch]
    indices = [c["choices"][0]["index"] for c in chunks]
    assert indices[:4] == [0, 1, 0, 1]
    texts: dict[int, str] = {}
    for chunk in chunks:
        choice = chunk["choices"][0]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["delta"].get("content", "")
    plain = await DEMO.chat({**ASK, "n": 2})
    assert texts == {c["index"]: c["message"]["content"] for c in plain["choices"]}
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert [f for f in finishes if f] == ["stop", "stop"]


async def test_tool_choice_picks_the_named_tool_and_its_schema() -> None:
    other = {"type": "function", "function": {"name": "answer", "parameters": SCHEMA}}
    choice = {"type": "function", "function": {"name": "answer"}}
    reply = await DEMO.chat({**ASK, "tools": [*TOOLS, other], "tool_choice": choice})
    (call,) = reply["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "answer"
    assert orjson.loads(call["function"]["arguments"]) == {"city": "What is 2+2?", "rank": 1}
    none = await DEMO.chat({**ASK, "tools": TOOLS, "tool_choice": "none"})
    assert none["choices"][0]["finish_reason"] == "stop"


async def test_a_model_other_than_demo_is_named_in_the_label() -> None:
    reply = await DEMO.chat({**ASK, "model": "demo-strong"})
    content = reply["choices"][0]["message"]["content"]
    assert content.startswith("[demo model demo-strong: no real LLM behind this answer]")
    assert reply["model"] == "demo-strong"
