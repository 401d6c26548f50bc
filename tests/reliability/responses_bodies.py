"""Request bodies for the Responses and legacy completions fuzz tests (test_fuzz_responses.py):
Responses requests from OpenAI's `CreateResponse` schema, with hand-made input items, tools,
text formats and previous_response_ids (real ones, gathered in `Ids` as the tests go), and
completions requests from `CreateCompletionRequest`."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import strategies as st

from tests.reliability.fuzz_target import CHAT_MODELS, NATIVE_MODEL
from tests.reliability.jsonfuzz import TEXT, component, plain_value
from tests.reliability.steering import KNOBS, tools_and_calls
from tests.reliability.warmup import response_id_of

TEAMS = ("team-a", "team-b")
MODELS = CHAT_MODELS * 2 + [NATIVE_MODEL] * 2 + ["fake-embedding", "gpt-nope"]


class Ids:
    """Response ids met so far: each tenant's live ones, and ids deleted since."""

    def __init__(self) -> None:
        self.live: dict[str, list[str]] = {team: [] for team in TEAMS}
        self.deleted: list[str] = []
        self.native: set[str] = set()  # answered by the provider natively (relayed as it was)
        self.items: list[str] = ["msg_1"]  # input item ids, for input_items?after=

    def __repr__(self) -> str:
        sizes = {team: len(live) for team, live in self.live.items()}
        return f"Ids(live={sizes}, deleted={len(self.deleted)})"

    def keep(self, team: str, answer: Any, *, native: bool = False) -> None:
        response_id = response_id_of(answer)
        if response_id is not None:
            self.live[team].append(response_id)
            del self.live[team][:-200]  # the store keeps RESPONSES_KEPT; older ones may be gone
            if native:
                self.native.add(response_id)

    def forget(self, team: str, response_id: str) -> None:
        if response_id in self.live[team]:
            self.live[team].remove(response_id)
        self.deleted.append(response_id)
        del self.deleted[:-50]


def never_existed() -> str:
    """An id shaped as the gateway's own (resp_ and 48 hex characters), of no response."""
    return "resp_" + os.urandom(24).hex()


# --- Responses input items and tools ----------------------------------------------------------

ROLES = ["user", "assistant", "system", "developer", "tool", "", "USER"]
IMAGE_URLS = [
    "https://example.com/cat.png",
    "data:image/png;base64,iVBORw0KGgo=",
    "data:image/png;base64,!!!",
    "",
    "javascript:alert(1)",
    "file:///etc/passwd",
]


def content_part() -> st.SearchStrategy[Any]:
    """Every content part type the Responses API has, and some it has not."""
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("input_text"), "text": TEXT}),
        st.fixed_dictionaries(
            {"type": st.just("output_text"), "text": TEXT},
            optional={"annotations": st.just([]), "logprobs": st.just([])},
        ),
        st.fixed_dictionaries({"type": st.just("refusal"), "refusal": TEXT}),
        st.fixed_dictionaries(
            {"type": st.just("input_image")},
            optional={
                "image_url": st.sampled_from(IMAGE_URLS) | plain_value(),
                "file_id": TEXT,
                "detail": st.sampled_from(["auto", "low", "high", "nope"]),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("input_file")},
            optional={
                "file_data": st.just("data:application/pdf;base64,JVBERi0="),
                "file_id": TEXT,
                "filename": TEXT,
                "file_url": st.just("https://example.com/a.pdf"),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("input_audio")},
            optional={
                "input_audio": st.fixed_dictionaries(
                    {"data": st.just("UklGRg=="), "format": st.sampled_from(["wav", "mp3", "x"])}
                )
                | plain_value()
            },
        ),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["reasoning_text", "summary_text", "output_audio", "", "x"])},
            optional={"text": TEXT},
        ),
        component("InputContent"),
        plain_value(),
    )


def message_item() -> st.SearchStrategy[Any]:
    content = st.one_of(TEXT, st.lists(content_part(), max_size=4), plain_value())
    return st.fixed_dictionaries(
        {"role": st.sampled_from(ROLES), "content": content},
        optional={
            "type": st.just("message"),
            "id": st.sampled_from(["msg_1", ""]) | TEXT,
            "status": st.sampled_from(["completed", "in_progress", "x"]),
        },
    )


CALL_IDS = ["call_1", "call_2", "", "call_\u0000"]
BUILT_IN_ITEMS = [
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "mcp_call",
    "mcp_list_tools",
    "item_reference",
    "custom_tool_call",
]


def input_item() -> st.SearchStrategy[Any]:
    """One input item: a message, a function call or its output, reasoning, a built-in tool's
    item, an item of the schema, an unknown type, or not an object at all."""
    call = st.fixed_dictionaries(
        {"type": st.just("function_call")},
        optional={
            "call_id": st.sampled_from(CALL_IDS) | plain_value(),
            "name": st.sampled_from(["lookup", "book", ""]) | plain_value(),
            "arguments": st.sampled_from(['{"q": "x"}', "{", ""]) | plain_value(),
            "id": st.just("fc_1"),
            "status": st.sampled_from(["completed", "in_progress"]),
        },
    )
    output = st.fixed_dictionaries(
        {"type": st.just("function_call_output")},
        optional={
            "call_id": st.sampled_from(CALL_IDS) | plain_value(),
            "output": TEXT
            | st.lists(content_part(), max_size=3)
            | st.just([{"type": "input_text", "text": 5}])
            | plain_value(),
        },
    )
    reasoning = st.fixed_dictionaries(
        {"type": st.just("reasoning")},
        optional={
            "id": st.just("rs_1"),
            "summary": st.just([{"type": "summary_text", "text": "thought"}]) | plain_value(),
            "content": st.just([{"type": "reasoning_text", "text": "hm"}]),
            "encrypted_content": TEXT,
        },
    )
    built_in = st.fixed_dictionaries(
        {"type": st.sampled_from(BUILT_IN_ITEMS), "id": st.just("x_1")},
        optional={"status": st.just("completed"), "call_id": st.just("call_1")},
    )
    unknown = st.fixed_dictionaries(
        {"type": st.sampled_from(["nope", "", "MESSAGE", "function_call "]) | plain_value()},
        optional={"role": st.sampled_from(ROLES), "content": TEXT},
    )
    return st.one_of(
        message_item(),
        message_item(),
        call,
        output,
        reasoning,
        built_in,
        unknown,
        component("InputItem"),
        plain_value(),
    )


def function_tools() -> st.SearchStrategy[tuple[list[Any], dict[str, Any]]]:
    """tools_and_calls (test_fuzz_http's chat tools and a scripted reply with hostile calls),
    the tools in the Responses form."""

    def responses_form(drawn: tuple[list[Any], dict[str, Any]]) -> tuple[list[Any], Any]:
        tools, fake = drawn
        return [{"type": "function", **tool["function"]} for tool in tools], fake

    return tools_and_calls().map(responses_form)


BUILT_IN_TOOLS = st.sampled_from(
    [
        {"type": "web_search"},
        {"type": "web_search_preview"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {
            "type": "computer_use_preview",
            "display_width": 800,
            "display_height": 600,
            "environment": "browser",
        },
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "image_generation"},
        {"type": "mcp", "server_label": "x", "server_url": "https://example.com"},
        {"type": "custom", "name": "grammar"},
        {"type": "nope"},
        {"type": 5},
        {},
    ]
)
TEXT_FORMATS = st.one_of(
    st.sampled_from(
        [
            {"format": {"type": "text"}},
            {"format": {"type": "json_object"}},
            {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            {"format": {"type": "json_schema", "schema": {"type": "object"}, "strict": True}},
            {"format": {"type": "json_schema", "name": "x"}},  # no schema
            {"format": {"type": "json_schema", "name": "x", "schema": "object"}},
            {"format": {"type": "yaml"}},
            {"format": {}},
            {"format": None},
            {"format": "json"},
            {"verbosity": "low"},
            {"verbosity": 5},
            {},
        ]
    ),
    component("ResponseTextParam"),
    plain_value(),
)
TOOL_CHOICES = st.sampled_from(
    [
        "auto",
        "none",
        "required",
        "lookup",
        {"type": "function", "name": "lookup"},
        {"type": "function"},
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "book"}]},
        {"type": "allowed_tools", "tools": "all"},
        {"type": "web_search"},
        {"type": 5},
    ]
)


@st.composite
def previous_id(draw: st.DrawFn, ids: Ids, team: str) -> tuple[str, Any]:
    """A previous_response_id and what it is: this tenant's, the other's, deleted, random."""
    other = TEAMS[1 - TEAMS.index(team)]
    kind = draw(st.sampled_from(["own", "own", "other", "deleted", "random", "garbage"]))
    pool = {"own": ids.live[team], "other": ids.live[other], "deleted": ids.deleted}.get(kind)
    if pool:
        return kind, pool[draw(st.integers(0, 10**6)) % len(pool)]
    if kind == "garbage":
        value = draw(st.sampled_from(["", "resp_", "../x", "resp_%00"]) | plain_value())
        return ("garbage" if value is not None else ""), value
    return "random", never_existed()


def goes_native(body: dict[str, Any]) -> bool:
    """Whether the gateway relays this request to the provider's own /v1/responses: a tool
    other than a function, for the native model. Its answer is the provider's (the fake echoes
    the request's tools as they came), so the schema check is lenient there (PASSED_THROUGH);
    framing, sequence numbers and the terminal event stay strict."""
    tools = body.get("tools")
    built_in = isinstance(tools, list) and any(
        not isinstance(t, dict) or t.get("type") != "function" for t in tools
    )
    return body.get("model") == NATIVE_MODEL and built_in


# Fields the gateway refuses outright (gateway/responses/request.py parse): mostly left out of
# schema draws, so the rest of the body is exercised.
REFUSED_FIELDS = ("background", "conversation", "prompt")


@st.composite
def response_body(draw: st.DrawFn, ids: Ids, team: str) -> tuple[dict[str, Any], str]:
    """A Responses request and the kind of its previous_response_id ("" for none)."""
    body: dict[str, Any] = draw(component("CreateResponse"))
    if draw(st.integers(0, 3)):
        for name in REFUSED_FIELDS:
            body.pop(name, None)
    body["model"] = draw(st.sampled_from(MODELS))
    given = draw(st.sampled_from(["schema", "text", "items", "items", "text"]))
    if given == "text":
        body["input"] = draw(TEXT | st.sampled_from(["hello", "", " "]))
    elif given == "items":
        body["input"] = draw(st.lists(input_item(), min_size=0, max_size=5))
    tools = draw(st.sampled_from(["schema", "none", "none", "function", "built-in", "both"]))
    if tools == "none":
        body.pop("tools", None)
        body.pop("tool_choice", None)
    elif tools != "schema":
        chosen: list[Any] = []
        if tools in ("function", "both"):
            chosen, body["fake"] = draw(function_tools())
        if tools in ("built-in", "both"):
            chosen += draw(st.lists(BUILT_IN_TOOLS, min_size=1, max_size=2))
        body["tools"] = chosen
        body["tool_choice"] = draw(st.none() | TOOL_CHOICES)
        if body["tool_choice"] is None:
            del body["tool_choice"]
    if draw(st.booleans()):
        body["text"] = draw(TEXT_FORMATS)
    kind = ""
    if draw(st.integers(0, 2)) == 0:
        kind, body["previous_response_id"] = draw(previous_id(ids, team))
    else:
        body.pop("previous_response_id", None)
    for name in ("store", "stream"):
        choice = draw(st.sampled_from(["keep", "true", "false", "absent"]))
        if choice != "keep":
            body.pop(name, None)
            if choice != "absent":
                body[name] = choice == "true"
    if "fake" not in body and draw(st.integers(0, 2)) == 0:
        body["fake"] = draw(KNOBS)
    return body, kind


# --- legacy completions -----------------------------------------------------------------------

PROMPTS = st.one_of(
    TEXT,
    st.lists(TEXT, max_size=3),
    st.lists(st.integers(0, 100_000), min_size=1, max_size=5),
    st.lists(st.lists(st.integers(0, 100_000), min_size=1, max_size=3), min_size=1, max_size=2),
    st.sampled_from([[], [[]], "", [""], [1, "a"], [[1], "a"], [-1], [2**40]]),
)
NATIVE_ONLY = st.fixed_dictionaries(
    {},
    optional={
        "echo": st.booleans(),
        "logprobs": st.none() | st.integers(-1, 6),
        "suffix": st.none() | TEXT,
        "best_of": st.none() | st.integers(0, 21),
    },
)


@st.composite
def completion_body(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = draw(component("CreateCompletionRequest"))
    body["model"] = draw(st.sampled_from(MODELS))
    if draw(st.booleans()):
        body["prompt"] = draw(PROMPTS)
    # One in three keeps or draws parameters only a native upstream serves: the others test
    # the translation through the chat pipeline.
    if draw(st.sampled_from(["translated", "translated", "native-only"])) == "translated":
        for name in ("echo", "logprobs", "suffix", "best_of"):
            body.pop(name, None)
        if draw(st.sampled_from(["text", "text", "schema"])) == "text":
            body["prompt"] = draw(TEXT | st.lists(TEXT, min_size=1, max_size=3))
    else:
        body.update(draw(NATIVE_ONLY))
        if draw(st.booleans()):
            body["model"] = NATIVE_MODEL
    if "n" in body and draw(st.booleans()):
        body["n"] = draw(st.integers(1, 3))  # the schema allows 128 choices a prompt
    if draw(st.integers(0, 2)) == 0:
        body["fake"] = draw(KNOBS)
    return body


def needs_native(body: dict[str, Any]) -> bool:
    """What only an upstream serving /v1/completions can answer (docs/RESPONSES.md): the
    gateway refuses it unless the model's provider serves completions itself."""
    prompt = body.get("prompt")
    tokens = isinstance(prompt, list) and any(not isinstance(p, str) for p in prompt)
    several_streamed = isinstance(prompt, list) and len(prompt) > 1 and body.get("stream") is True
    best_of = body.get("best_of")
    return bool(
        tokens
        or prompt == []
        or several_streamed
        or body.get("echo") is True
        or body.get("logprobs") is not None
        or body.get("suffix")
        or (best_of is not None and best_of not in (1, body.get("n") or 1))
    )
