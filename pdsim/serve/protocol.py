"""vLLM's OpenAI-compatible request and response shapes, as far as ``pdsim serve`` needs
them, and the rules that stand in for a tokenizer and a model.

Rules (stated, so a client can predict every count):

- **Prompt length.** ``prompt_token_ids`` (or a prompt given as a list of token ids) counts
  its ids. A text prompt counts ``ceil(utf-8 bytes / 4)`` tokens, at least 1 (about four
  characters a token, as English text runs). A chat counts the text
  ``"<role>: <content>\\n"`` of every message by the same rule (text parts of a content
  list joined).
- **Output length.** ``max_tokens`` (``max_completion_tokens`` in a chat) defaults to 16
  for completions and to the room left in the context for chats. With ``ignore_eos`` the
  request generates exactly ``max_tokens``; otherwise its length is drawn from the
  config's ``workload.output_tokens`` (random stream ``serve_output_tokens`` of the seed)
  and held between ``min_tokens`` and ``max_tokens``. ``finish_reason`` is ``length``
  when it reached ``max_tokens``, ``stop`` otherwise.
- **Token text.** Output token ``k`` (0-based) of request ``i`` is the word
  ``WORDS[(i + k) % 16]`` with a leading space: a chunk's text is its tokens' words.
- **Errors** are vLLM's: a JSON body ``{"error": {"message", "type", "param", "code"}}``
  with status 400 (``BadRequestError``: a bad field, a prompt over the context), 404
  (``NotFoundError``: an unknown model) or 503 (``ServiceUnavailableError``: more
  requests in flight than ``--max-pending``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

WORDS = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was",
         "with", "be", "by", "on")

#: what a completion request's max_tokens is when it names none (OpenAI's and vLLM's)
COMPLETION_DEFAULT_MAX_TOKENS = 16


class APIError(Exception):
    """A request vLLM would refuse: its HTTP status, error type and message."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.status}}


def text_tokens(text: str) -> int:
    """The prompt-length rule for text: ``ceil(utf-8 bytes / 4)``, at least 1."""
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


def token_text(request_id: int, first: int, n: int) -> str:
    """The text of output tokens ``first .. first + n - 1`` of request ``request_id``."""
    return "".join(" " + WORDS[(request_id + k) % len(WORDS)] for k in range(first, first + n))


@dataclass(frozen=True)
class ParsedRequest:
    """What the server reads from a completion or chat request body."""

    chat: bool
    model: str | None
    prompt_tokens: int
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    kv_transfer_params: dict[str, Any] | None


def _int(body: dict[str, Any], key: str, low: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise APIError(f"{key} must be an integer (got {v!r})", param=key)
    if v < low:
        raise APIError(f"{key} must be at least {low}, got {v}.", param=key)
    return v


def _bool(body: dict[str, Any], key: str) -> bool:
    v = body.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise APIError(f"{key} must be a boolean (got {v!r})", param=key)
    return v


def _ids(v: Any, key: str) -> int:
    if not isinstance(v, list) or not v or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise APIError(f"{key} must be a non-empty list of token ids", param=key)
    return len(v)


def _prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    if body.get("prompt_token_ids") is not None:
        return _ids(body["prompt_token_ids"], "prompt_token_ids")
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise APIError("messages must be a non-empty list", param="messages")
        parts = []
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise APIError("each message needs a role", param="messages")
            content = m.get("content") or ""
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                raise APIError("a message's content must be text or a list of parts",
                               param="messages")
            parts.append(f"{m['role']}: {content}\n")
        return text_tokens("".join(parts))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return text_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        return _ids(prompt, "prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        one = prompt[0]
        return text_tokens(one) if isinstance(one, str) else _ids(one, "prompt")
    if isinstance(prompt, list) and len(prompt) > 1:
        raise APIError("pdsim serve takes one prompt per request (send a batch as several "
                       "requests)", param="prompt")
    raise APIError("prompt must be a string or a list of token ids", param="prompt")


def parse_request(body: Any, chat: bool) -> ParsedRequest:
    """The fields of a completion (``chat`` False) or chat completion body; ``APIError``
    400 on a bad one."""
    if not isinstance(body, dict):
        raise APIError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise APIError("model must be a string", param="model")
    n = _int(body, "n", 1)
    if n is not None and n != 1:
        raise APIError("pdsim serve generates one choice per request (n = 1)", param="n")
    max_tokens = _int(body, "max_completion_tokens", 1) if chat else None
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    if max_tokens is None and not chat:
        max_tokens = COMPLETION_DEFAULT_MAX_TOKENS
    min_tokens = _int(body, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise APIError(f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                       f"got {min_tokens}.", param="min_tokens")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise APIError("stream_options must be an object", param="stream_options")
    stream = _bool(body, "stream")
    if opts and not stream:
        raise APIError("Stream options can only be defined when `stream=True`.",
                       param="stream_options")
    kv = body.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, dict):
        raise APIError("kv_transfer_params must be an object", param="kv_transfer_params")
    return ParsedRequest(chat, model, _prompt_tokens(body, chat), max_tokens, min_tokens,
                         _bool(body, "ignore_eos"), stream, bool(opts.get("include_usage")),
                         kv)


def context_error(max_model_len: int, prompt: int, max_tokens: int | None) -> APIError:
    """vLLM's 400 for a request over the context."""
    if max_tokens is None:
        return APIError(f"This model's maximum context length is {max_model_len} tokens. "
                        f"However, your request has {prompt} input tokens. Please reduce "
                        f"the length of the input messages.")
    return APIError(f"This model's maximum context length is {max_model_len} tokens. "
                    f"However, you requested {prompt + max_tokens} tokens ({prompt} in the "
                    f"messages, {max_tokens} in the completion). Please reduce the length "
                    f"of the messages or completion.", param="max_tokens")
