"""A legacy completions request, validated, and the chat body it becomes.

A prompt becomes one user message; every parameter chat completions also has is copied only
when the client set it, and fields the gateway does not know are forwarded as they came, so
the same question asked through either endpoint makes the same chat body (and the cache scope,
a hash of that body, is shared). What only a native completions endpoint can do (echo the
prompt, token logprobs, a suffix, best_of, prompts as token ids) is named by `native_only`: the
handler sends such a request to an upstream that serves completions natively, or refuses it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import InvalidRequest
from gateway.wire import StreamOptions, validate

Json = dict[str, Any]

MAX_PROMPTS = 2048  # as OpenAI documents: each prompt is a pipeline call of its own
# Fields that exist only in the legacy API: never part of a chat body.
LEGACY_ONLY = frozenset({"prompt", "echo", "logprobs", "suffix", "best_of"})


class CompletionRequest(BaseModel):
    # As for chat: strict types, unknown fields allowed (and forwarded).
    model_config = ConfigDict(extra="allow", strict=True)

    model: str = Field(min_length=1)
    prompt: str | list[str] | list[int] | list[list[int]]
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=128)
    best_of: int | None = Field(None, ge=0, le=20)
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    logit_bias: dict[str, int] | None = None
    echo: bool | None = None
    logprobs: int | None = Field(None, ge=0, le=5)
    suffix: str | None = None

    @property
    def prompts(self) -> list[str] | None:
        """The text prompts, one per pipeline call; None for prompts given as token ids."""
        if isinstance(self.prompt, str):
            return [self.prompt]
        if all(isinstance(p, str) for p in self.prompt):
            return [str(p) for p in self.prompt]
        return None

    @property
    def wants_usage_in_stream(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def parse(body: Any) -> CompletionRequest:
    """The request validated, every refusal naming the legacy field (`prompt`, `max_tokens`)."""
    request: CompletionRequest = validate(CompletionRequest, body)
    if isinstance(request.prompt, list) and len(request.prompt) > MAX_PROMPTS:
        raise InvalidRequest(
            f"'prompt' is a list of {len(request.prompt)} prompts; at most {MAX_PROMPTS} are "
            "accepted in one request.",
            param="prompt",
            code="too_many_prompts",
        )
    return request


def choices(request: CompletionRequest, max_prompts: int, max_choices: int) -> int:
    """The choices `request` asks for (prompts x n: each an upstream generation), or a 400
    naming the parameter when over `server.completions_max_prompts` or
    `completions_max_choices`. Checked before any upstream call."""
    prompts = len(request.prompt) if _is_prompt_list(request.prompt) else 1
    if prompts > max_prompts:
        raise InvalidRequest(
            f"'prompt' is a list of {prompts} prompts; at most {max_prompts} are accepted in "
            "one request.",
            param="prompt",
            code="too_many_prompts",
        )
    n = request.n or 1
    asked = prompts * n
    if asked > max_choices:
        raise InvalidRequest(
            f"This request asks for {asked} choices ({prompts} prompts x n={n}); at most "
            f"{max_choices} are answered in one request. Send fewer prompts or a smaller n "
            "per request.",
            param="n" if n > 1 else "prompt",
            code="too_many_choices",
        )
    return asked


def _is_prompt_list(prompt: object) -> bool:
    """A list of prompts (texts, or token lists); a single prompt of token ids is one."""
    return isinstance(prompt, list) and (not prompt or not isinstance(prompt[0], int))


def native_only(request: CompletionRequest) -> tuple[str, str] | None:
    """The first parameter only a native completions endpoint honours, and why the chat
    pipeline cannot; None when the request translates."""
    prompts = request.prompts
    if prompts is None:
        return "prompt", "a prompt given as token ids has no text to send as a chat message"
    if not prompts:
        return "prompt", "an empty list of prompts asks for nothing"
    if request.echo:
        return "echo", "chat models do not echo the prompt back"
    if request.logprobs is not None:
        return "logprobs", "chat completions report token logprobs in another shape"
    if request.suffix:
        return "suffix", "chat models do not fill in text before a suffix"
    if request.best_of is not None and request.best_of not in (1, request.n or 1):
        return "best_of", "chat completions cannot rank candidates server-side"
    if request.stream and len(prompts) > 1:
        return "prompt", "a stream of several prompts' choices is not a chat stream"
    return None


def chat_body(body: Json, prompt: str) -> Json:
    """The chat body for one prompt of `body` (a validated completions request): the prompt as
    the user's message, every other field but the legacy-only ones as the client sent it."""
    chat: Json = {"model": body["model"], "messages": [{"role": "user", "content": prompt}]}
    for key, value in body.items():
        if key not in LEGACY_ONLY and key != "model":
            chat[key] = value
    return chat
