"""LLM streaming semantics (sans-I/O): server-sent events and JSON lines framed to spec,
what OpenAI-compatible, Anthropic, TGI, Ollama and Triton streams and bodies say (model,
finish reason, token counts, which events carry generated content), and the body readers
the HTTP/1.1 and HTTP/2 decoders feed (:mod:`parsers.llm.taps`)."""

from parsers.llm.framing import NdjsonFramer, SseFramer
from parsers.llm.jsonscan import TopLevelJson
from parsers.llm.semantics import EVENT_NAMES, TOKEN_KINDS, LlmStream, model_from_path
from parsers.llm.taps import EventSplitter, JsonBodyTap, llm_facts, tap_for

__all__ = [
    "EVENT_NAMES",
    "TOKEN_KINDS",
    "EventSplitter",
    "JsonBodyTap",
    "LlmStream",
    "NdjsonFramer",
    "SseFramer",
    "TopLevelJson",
    "llm_facts",
    "model_from_path",
    "tap_for",
]
