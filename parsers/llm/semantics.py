"""What LLM streams and bodies say about a request, read as written (sans-I/O).

:class:`LlmStream` is given the events of one streamed response (type and data, from
:mod:`parsers.llm.framing`) and tells for each what it carries (:data:`EVENT_NAMES`) and
how many tokens when the stream says so; it keeps the request-level facts the stream
states: model, finish reason, prompt and completion token counts. Formats:

* OpenAI chat completions (``chat.completion.chunk``) and completions (``text_completion``),
  as served by OpenAI, vLLM, SGLang, TGI's Messages API, llama.cpp, LiteLLM...: content is
  ``delta.content`` / ``text`` / ``delta.reasoning_content`` / ``delta.reasoning`` /
  ``delta.refusal`` or a tool call's ``function.name`` / ``function.arguments``; per-chunk
  tokens from ``logprobs`` (one entry per token) or, when every chunk carries ``usage``
  (vLLM's continuous usage stats), from the growth of ``usage.completion_tokens``;
* OpenAI Responses API (``response.*`` typed events): content is any ``*.delta`` event
  with a non-empty delta; usage and status from ``response.completed`` / ``.incomplete``
  / ``.failed``;
* Anthropic Messages (``message_start``, ``content_block_start``/``_delta``/``_stop``,
  ``message_delta`` with ``stop_reason`` and cumulative ``usage.output_tokens``,
  ``message_stop``, ``ping``, ``error``);
* Hugging Face TGI ``generate_stream``: one ``token`` per event, ``details`` at the end;
* Ollama JSON lines (``response`` / ``message``, ``done`` with ``done_reason``,
  ``prompt_eval_count``, ``eval_count``);
* Triton / KServe generate extension (``model_name``, ``text_output``).

``data: [DONE]`` ends the stream: it is not an event, and nothing after it is read.
Unrecognised events are ``data`` (every one a message, as for any SSE stream).

:func:`read_request_json` and :func:`read_response_json` read the same facts from whole
JSON bodies (captured by :class:`TopLevelJson` without keeping the body), and
:func:`model_from_path` the model a KServe v2 HTTP path names.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# Event kinds (messages.event); NONE for messages that are not events (gRPC).
NONE, CONTENT, START, FINAL, OTHER, ERROR, DATA = range(7)
EVENT_NAMES: tuple[str | None, ...] = (None, "content", "start", "final", "other", "error", "data")
# Kinds of the messages that TTFT and inter-token gaps are measured on: generated content,
# and messages whose meaning is not known (gRPC messages, events of other SSE streams).
TOKEN_KINDS = frozenset((NONE, CONTENT, DATA))

_ANTHROPIC = frozenset((
    "message_start", "message_delta", "message_stop", "content_block_start",
    "content_block_delta", "content_block_stop", "ping",
))  # fmt: skip
_RESPONSE_DONE = frozenset(("response.completed", "response.incomplete", "response.failed"))
_OPENAI_OBJECTS = frozenset(("chat.completion.chunk", "text_completion", "chat.completion"))
# digits marked, to find a run of 19 of them: an integer orjson may read as a float (past
# 64 bits) where json keeps it (a translation and a search: a regex took four times as long)
_DIGITS_MARKED = bytes.maketrans(b"0123456789", b"#" * 10)
_NINETEEN = b"#" * 19
# a JSON string's text that is its value as written: no quote, backslash or control character
_PLAIN = re.compile(r'[^"\\\x00-\x1f]+')
_JSON_SPACE = " \t\n\r"


def loads_json(s: str) -> Any:
    """``json.loads(s)``, by orjson (two to three times faster, the check included: one
    call per event) wherever it reads the same value. Not where it reads another or
    refuses what json takes: integers of 19 digits or more (orjson makes floats of those
    past 64 bits), NaN, Infinity, 1e400 and lone surrogates (orjson's errors), which json
    reads again.
    ValueError when ``s`` is not one JSON value."""
    raw = s.encode("utf-8", "surrogatepass")
    if _NINETEEN not in raw.translate(_DIGITS_MARKED):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(s)


def _text(v: Any) -> bool:
    """A non-empty string."""
    return isinstance(v, str) and v != ""


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _tool_content(calls: Any) -> bool:
    """A tool call delta carrying generated text (the function's name or arguments)."""
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list):
        return False
    for c in calls:
        if isinstance(c, dict):
            fn = c.get("function", c)
            if isinstance(fn, dict) and (_text(fn.get("arguments")) or _text(fn.get("name"))):
                return True
    return False


def _other_delta_content(d: dict[str, Any]) -> bool:
    """A chat delta carrying generated text other than ``content``: reasoning, a
    refusal, a tool or function call's name or arguments."""
    return (_text(d.get("reasoning_content")) or _text(d.get("reasoning")) or _text(d.get("refusal"))
            or _tool_content(d.get("tool_calls")) or _tool_content(d.get("function_call")))  # fmt: skip


def _content_shape(s: str, obj: dict[str, Any]) -> tuple[str, str] | None:
    """The text of an OpenAI chat event ``s`` (read as ``obj``: a content event that said
    no tokens) before and after its one choice's ``delta.content``, when that is plain and
    non-empty and written as it is, once, as the value of a key "content": any other plain
    non-empty text there makes the same object but for that string, which
    LlmStream._openai reads as the same content (a "content" string elsewhere it does not
    read). Not when the event has usage (its running count would make tokens of it)."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    if isinstance(obj.get("usage"), dict):
        return None
    delta = choices[0].get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    if not isinstance(content, str) or not _PLAIN.fullmatch(content):
        return None
    quoted = f'"{content}"'
    at = s.find(quoted)
    if at < 0 or s.find(quoted, at + 1) >= 0:
        return None
    key = s[:at].rstrip(_JSON_SPACE)
    if not key.endswith(":") or not key[:-1].rstrip(_JSON_SPACE).endswith('"content"'):
        return None
    return s[: at + 1], s[at + 1 + len(content) :]


class LlmStream:
    """The facts of one LLM response stream, event by event."""

    __slots__ = ("model", "finish_reason", "prompt_tokens", "completion_tokens", "api", "done",
                 "_cum", "_cum_all", "_counted", "_count_all", "_shape")  # fmt: skip

    def __init__(self) -> None:
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.api: str | None = None  # openai, responses, anthropic, tgi, ollama, triton
        self.done = False  # [DONE] seen
        self._cum: int | None = None  # last cumulative usage.completion_tokens (OpenAI)
        self._cum_all = True  # every event so far carried usage
        self._counted = 0  # tokens stated per content event, summed
        self._count_all = True  # every content event stated its tokens
        # (text before, text after) the delta's content in the last content event read
        # whole that said no tokens (see _content_shape)
        self._shape: tuple[str, str] | None = None

    # -- events ------------------------------------------------------------------------
    def content_shape(self) -> tuple[str, str] | None:
        """(text before, text after) the content of the content events :meth:`event` reads
        as (CONTENT, None) without parsing them and without a change to the stream (see
        _content_shape); None when there is none, or the stream is over."""
        return None if self.done else self._shape

    def event(self, etype: str, data: str) -> tuple[int, int | None] | None:
        """(kind, tokens or None) of one event; None when it is not a message ([DONE],
        or anything after it)."""
        if self.done:
            return None
        s = data.strip()
        if s == "[DONE]":
            self.done = True
            return None
        if not s.startswith(("{", "[")):
            return DATA, None
        shape = self._shape
        if shape is not None:
            # a chat stream's content events differ in their delta's content alone (~3 us
            # an event read whole, half the reading of a stream over HTTP/1.1): an event
            # that is the last one read whole with other plain, non-empty content is read
            # as it was (the content counts only as a non-empty string) and sets the facts
            # that one set, as they are
            before, after = shape
            end = len(s) - len(after)
            if end > len(before) and s.startswith(before) and s.endswith(after) and _PLAIN.fullmatch(s, len(before), end):
                return CONTENT, None
        try:
            obj = loads_json(s)
        except ValueError:
            return DATA, None
        if not isinstance(obj, dict):
            return DATA, None
        kind, tokens = self._read(obj, etype)
        shape = None
        if kind == CONTENT:
            if tokens is None:
                self._count_all = False
                shape = _content_shape(s, obj)
            else:
                self._counted += tokens
        # the shape of this event, if any, not an earlier one's: what this one set (a
        # model, a finish reason) an event of that shape would set again
        self._shape = shape
        return kind, tokens

    def _read(self, obj: dict[str, Any], etype: str) -> tuple[int, int | None]:
        typ = obj.get("type")
        if not isinstance(typ, str):
            typ = etype
        object_type = obj.get("object")  # (any JSON value: a list is no set member, it raises)
        if "choices" in obj or (isinstance(object_type, str) and object_type in _OPENAI_OBJECTS):
            self.api = self.api or "openai"
            return self._openai(obj)
        if typ.startswith("response."):
            self.api = self.api or "responses"
            return self._responses(obj, typ)
        if typ in _ANTHROPIC:
            self.api = self.api or "anthropic"
            return self._anthropic(obj, typ)
        if isinstance(obj.get("token"), dict):
            self.api = self.api or "tgi"
            return self._tgi(obj)
        if isinstance(obj.get("done"), bool):
            self.api = self.api or "ollama"
            return self._ollama(obj)
        if "text_output" in obj:
            self.api = self.api or "triton"
            self.model = self.model or _str(obj.get("model_name"))
            return (CONTENT if _text(obj.get("text_output")) else OTHER), None
        if typ == "error" or "error" in obj:
            return ERROR, None
        return DATA, None

    def _usage(self, u: Any, prompt: str, completion: str) -> int | None:
        """Take a usage object's counts; returns its completion count."""
        if not isinstance(u, dict):
            return None
        p, c = _int(u.get(prompt)), _int(u.get(completion))
        if p is not None:
            self.prompt_tokens = p
        if c is not None:
            self.completion_tokens = c
        return c

    def _openai(self, obj: dict[str, Any]) -> tuple[int, int | None]:
        # (called once per event of the commonest streams: the usual checks written out,
        # not calls of _text and _str, a function call saved each)
        model = obj.get("model")
        if isinstance(model, str) and model:
            self.model = model
        content = role = False
        finish = None
        logprob_tokens: int | None = None
        choices = obj.get("choices")
        for ch in choices if isinstance(choices, list) else ():
            if not isinstance(ch, dict):
                continue
            if _text(ch.get("text")):
                content = True
            d = ch.get("delta")
            if isinstance(d, dict):
                text = d.get("content")
                if (isinstance(text, str) and text) or _other_delta_content(d):
                    content = True
                if d.get("role"):
                    role = True
            fr = ch.get("finish_reason")
            if isinstance(fr, str) and fr and (finish is None or ch.get("index", 0) == 0):
                finish = fr
            lp = ch.get("logprobs")
            if isinstance(lp, dict):
                entries = lp.get("content", lp.get("tokens"))
                if isinstance(entries, list):
                    logprob_tokens = (logprob_tokens or 0) + len(entries)
        if finish:
            self.finish_reason = finish
        tokens = None
        usage = obj.get("usage")
        c = self._usage(usage, "prompt_tokens", "completion_tokens") if isinstance(usage, dict) else None
        if c is None:
            self._cum_all = False
        elif self._cum_all:
            # every chunk so far carried the running count: this one's growth is its tokens
            tokens = c - (self._cum or 0)
            self._cum = c
        if tokens is None or tokens < 0:
            tokens = logprob_tokens
        if content:
            return CONTENT, tokens
        if role:
            return START, tokens
        if finish or isinstance(usage, dict):
            return FINAL, tokens
        return OTHER, tokens

    def _responses(self, obj: dict[str, Any], typ: str) -> tuple[int, int | None]:
        if typ.endswith(".delta"):
            if _text(obj.get("delta")):
                lp = obj.get("logprobs")
                return CONTENT, (len(lp) if isinstance(lp, list) and lp else None)
            return OTHER, None
        resp = obj.get("response")
        if isinstance(resp, dict):
            self.model = _str(resp.get("model")) or self.model
            self._usage(resp.get("usage"), "input_tokens", "output_tokens")
            if typ in _RESPONSE_DONE:
                inc = resp.get("incomplete_details")
                reason = _str(inc.get("reason")) if isinstance(inc, dict) else None
                self.finish_reason = reason or _str(resp.get("status")) or self.finish_reason
        if typ in _RESPONSE_DONE:
            return FINAL, None
        if typ in ("response.created", "response.in_progress", "response.queued"):
            return START, None
        if typ == "response.error" or typ == "error":
            return ERROR, None
        return OTHER, None

    def _anthropic(self, obj: dict[str, Any], typ: str) -> tuple[int, int | None]:
        if typ == "content_block_delta":
            d = obj.get("delta")
            if isinstance(d, dict) and (_text(d.get("text")) or _text(d.get("partial_json"))
                                        or _text(d.get("thinking"))):  # fmt: skip
                return CONTENT, None
            return OTHER, None
        if typ == "content_block_start":
            b = obj.get("content_block")
            if isinstance(b, dict) and (_text(b.get("text")) or _text(b.get("thinking"))
                                        or (b.get("type") in ("tool_use", "server_tool_use") and _text(b.get("name")))):  # fmt: skip
                return CONTENT, None
            return START, None
        if typ == "message_start":
            m = obj.get("message")
            if isinstance(m, dict):
                self.model = _str(m.get("model")) or self.model
                self._usage(m.get("usage"), "input_tokens", "output_tokens")
            return START, None
        if typ == "message_delta":
            d = obj.get("delta")
            if isinstance(d, dict):
                self.finish_reason = _str(d.get("stop_reason")) or self.finish_reason
            self._usage(obj.get("usage"), "input_tokens", "output_tokens")
            return FINAL, None
        if typ == "message_stop":
            return FINAL, None
        return OTHER, None  # ping, content_block_stop

    def _tgi(self, obj: dict[str, Any]) -> tuple[int, int | None]:
        self._tgi_details(obj.get("details"))
        tok = obj["token"]
        if tok.get("special") and not _text(tok.get("text")):
            return OTHER, 1
        return CONTENT, 1

    def _tgi_details(self, det: Any) -> None:
        if isinstance(det, dict):
            self.finish_reason = _str(det.get("finish_reason")) or self.finish_reason
            n = _int(det.get("generated_tokens"))
            if n is not None:
                self.completion_tokens = n

    def _ollama(self, obj: dict[str, Any]) -> tuple[int, int | None]:
        self.model = _str(obj.get("model")) or self.model
        msg = obj.get("message")
        content = _text(obj.get("response")) or _text(obj.get("thinking")) or (
            isinstance(msg, dict) and (_text(msg.get("content")) or _text(msg.get("thinking"))
                                       or _tool_content(msg.get("tool_calls"))))  # fmt: skip
        if obj["done"]:
            self.finish_reason = _str(obj.get("done_reason")) or self.finish_reason
            self._usage(obj, "prompt_eval_count", "eval_count")
        if content:
            return CONTENT, None
        return (FINAL if obj["done"] else OTHER), None

    # -- whole bodies --------------------------------------------------------------------
    def read_body(self, obj: dict[str, Any]) -> None:
        """A whole (non-streamed) JSON response: the same facts as a stream's."""
        self._read(obj, "")
        if obj.get("type") == "message":  # Anthropic, not streamed
            self.api = "anthropic"
            self.model = _str(obj.get("model")) or self.model
            self.finish_reason = _str(obj.get("stop_reason")) or self.finish_reason
            self._usage(obj.get("usage"), "input_tokens", "output_tokens")
        elif obj.get("object") == "response":  # Responses API, not streamed
            self.api = "responses"
            self._responses({"response": obj}, "response.completed")
        elif isinstance(obj.get("details"), dict) and "generated_text" in obj:  # TGI generate
            self.api = "tgi"
            self._tgi_details(obj["details"])
        elif "model_name" in obj:  # KServe v2 / Triton
            self.model = _str(obj.get("model_name")) or self.model

    def summary(self) -> tuple[str | None, str | None, int | None, int | None]:
        """model, finish_reason, prompt_tokens, completion_tokens (None: not said)."""
        completion = self.completion_tokens
        if completion is None and self._counted and self._count_all:
            completion = self._counted  # every content event said its count
        return self.model, self.finish_reason, self.prompt_tokens, completion


# -- request bodies and paths ------------------------------------------------------------
REQUEST_KEYS = frozenset((b"model",))
RESPONSE_KEYS = frozenset((
    b"model", b"object", b"type", b"choices", b"usage", b"stop_reason", b"done", b"done_reason",
    b"prompt_eval_count", b"eval_count", b"status", b"incomplete_details", b"details",
    b"generated_text", b"model_name",
))  # fmt: skip


def read_request_json(values: dict[bytes, bytes]) -> str | None:
    """The model a JSON request body names at its top level."""
    raw = values.get(b"model")
    if raw is None:
        return None
    try:
        return _str(json.loads(raw))
    except ValueError:
        return None


def read_response_json(values: dict[bytes, bytes]) -> LlmStream | None:
    """The facts of a whole JSON response body (its captured top-level values)."""
    obj: dict[str, Any] = {}
    for k, raw in values.items():
        try:
            obj[k.decode()] = json.loads(raw)
        except ValueError:
            continue
    if not obj:
        return None
    s = LlmStream()
    s.read_body(obj)
    return s


_KSERVE_PATH = re.compile(r"^/v2/models/([^/?#]+)(?:/versions/[^/?#]+)?/(?:infer|generate|generate_stream)(?:[?#]|$)")


def model_from_path(path: str | None) -> str | None:
    """KServe v2 / Triton HTTP: ``/v2/models/{name}[/versions/{v}]/infer`` (or the
    generate extension's ``generate`` / ``generate_stream``) names the model."""
    if not path:
        return None
    m = _KSERVE_PATH.match(path)
    if m is None:
        return None
    from urllib.parse import unquote

    return unquote(m.group(1))
