"""Body readers that plug into the HTTP/1.1 and HTTP/2 decoders (sans-I/O).

They follow the splitter protocol of :class:`parsers.grpc.GrpcSplitter` (``feed(data, i,
n, off, ts, out)``, ``frame_start()``, ``frame_end(out)``, ``lost()``, ``probing``), so
the decoders hand them a body's bytes the way they hand gRPC bodies to the gRPC splitter,
whatever carried them (HTTP/1.1 with Content-Length, chunked or until close; HTTP/2 DATA
frames; the plaintext of a decrypted TLS connection, which reaches the same decoders):

* :class:`EventSplitter`: an event-stream or JSON-lines response; one message per event
  (``(ts, size, flags, end_offset)``, flags from :func:`parsers.records.message_flags`
  carrying the event kind and its tokens), ``[DONE]`` and what follows it excluded;
  ``first_ts`` / ``first_off``: the first event carrying generated content (TTFT);
* :class:`JsonBodyTap`: a JSON request or response body, of which only the top-level
  values that name the model, the finish reason and the token counts are kept.

:func:`tap_for` picks the reader for a body from its content-type and
:func:`llm_facts` reads what the request's two bodies (and its path) said.
"""

from __future__ import annotations

from parsers._native import speedups
from parsers.grpc import GrpcSplitter, ModelNameTap
from parsers.llm.framing import NdjsonFramer, RawEvent, SseFramer
from parsers.llm.jsonscan import TopLevelJson
from parsers.llm.semantics import (
    CONTENT,
    REQUEST_KEYS,
    RESPONSE_KEYS,
    TOKEN_KINDS,
    LlmStream,
    model_from_path,
    read_request_json,
    read_response_json,
)
from parsers.records import message_flags

_speedups = speedups("parsers.llm")
# what a content event of a stream's known shape says: content, tokens not said
_SHAPED_FLAGS = message_flags(False, CONTENT, None)

NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl",
                "application/x-jsonlines", "application/jsonlines", "application/json-lines")  # fmt: skip


class _BodyReader:
    """What the decoders ask of every splitter beyond ``feed`` and ``lost``: body readers
    never probe for message boundaries."""

    __slots__ = ()
    probing = False
    confirmed = True

    def frame_start(self) -> None:
        pass

    def frame_end(self, out: list) -> None:
        pass


class EventSplitter(_BodyReader):
    """One message per server-sent event (or JSON line) of a response body."""

    __slots__ = ("framer", "stream", "first_ts", "first_off", "_raw")

    def __init__(self, ndjson: bool = False) -> None:
        self.framer: SseFramer | NdjsonFramer = NdjsonFramer() if ndjson else SseFramer()
        self.stream = LlmStream()
        self.first_ts: int | None = None  # first event carrying generated content
        self.first_off: int | None = None  # direction offset just after it
        self._raw: list[RawEvent] = []

    @property
    def ndjson(self) -> bool:
        return isinstance(self.framer, NdjsonFramer)

    def feed(self, data: bytes | bytearray | memoryview, i: int, n: int, off: int, ts: int, out: list) -> None:
        raw = self._raw
        self.framer.feed(bytes(data[i:n]), off + i, ts, raw)
        if raw:
            self._messages(raw, out)

    def takes_whole_events(self) -> bool:
        """An event stream between events: :meth:`feed_whole_events` may take the next."""
        framer = self.framer
        return type(framer) is SseFramer and framer.between_events()

    def feed_whole_events(self, events: list[tuple[int, str, int, int]], out: list) -> None:
        """Whole simple ``data:`` events, read already (SseFramer.whole_events), while
        :meth:`takes_whole_events`: what :meth:`feed` of their bytes would give."""
        raw = self._raw
        self.framer.whole_events(events, raw)  # type: ignore[union-attr]
        self._messages(raw, out)

    def _messages(self, raw: list[RawEvent], out: list) -> None:
        if _speedups is not None:
            self._messages_c(raw, out)
            return
        stream = self.stream
        for etype, text, t, size, end in raw:
            self._message(stream.event(etype, text), t, size, end, out)
        raw.clear()

    def _messages_c(self, raw: list[RawEvent], out: list) -> None:
        """:meth:`_messages`, with the content events of a stream's known shape read in C
        (a chat stream's events but for a handful: ~1 us an event in Python)."""
        assert _speedups is not None
        stream, i, n = self.stream, 0, len(raw)
        while i < n:
            shape = stream.content_shape()
            if shape is not None and self.first_ts is not None:
                i = _speedups.shaped_events(raw, i, shape[0], shape[1], _SHAPED_FLAGS, out)
                if i == n:
                    break
            etype, text, t, size, end = raw[i]
            self._message(stream.event(etype, text), t, size, end, out)
            i += 1
        raw.clear()

    def _message(self, said: tuple[int, int | None] | None, t: int, size: int, end: int, out: list) -> None:
        """The message row of one event as LlmStream.event read it (None: no message)."""
        if said is None:  # [DONE], or after it
            return
        kind, tokens = said
        if self.first_ts is None and kind in TOKEN_KINDS:
            self.first_ts, self.first_off = t, end
        out.append((t, size, message_flags(False, kind, tokens), end))

    def lost(self) -> None:
        self.framer.lost()


class JsonBodyTap(_BodyReader):
    """The wanted top-level values of a JSON body; no messages."""

    __slots__ = ("scan", "response")

    def __init__(self, response: bool) -> None:
        self.response = response
        self.scan = TopLevelJson(RESPONSE_KEYS if response else REQUEST_KEYS)

    def feed(self, data: bytes | bytearray | memoryview, i: int, n: int, off: int, ts: int, out: list) -> None:
        if not self.scan.done:
            self.scan.feed(data[i:n])

    def lost(self) -> None:
        self.scan.lost()


def _is_json(ct: str) -> bool:
    media = ct.split(";", 1)[0].strip()
    return media == "application/json" or media.endswith("+json")


def tap_for(content_type: str | None, response: bool) -> EventSplitter | JsonBodyTap | None:
    """The reader for a body of this content-type (None: nothing to read in it)."""
    if not content_type:
        return None
    ct = content_type.lower()
    if response:
        if ct.startswith("text/event-stream"):
            return EventSplitter()
        if ct.startswith(NDJSON_TYPES):
            return EventSplitter(ndjson=True)
    if _is_json(ct):
        return JsonBodyTap(response)
    return None


Facts = tuple[str | None, str | None, int | None, int | None]
NO_FACTS: Facts = (None, None, None, None)


def llm_facts(path: str | None, request_tap: object, response_tap: object) -> Facts:
    """model, finish_reason, prompt_tokens, completion_tokens of one request, as its bodies
    (a JSON request, a stream or JSON response, a KServe gRPC request's ``model_name``) and
    a KServe HTTP path said them; the response's model before the request's."""
    asked = None
    if isinstance(request_tap, JsonBodyTap):
        asked = read_request_json(request_tap.scan.values)
    elif isinstance(request_tap, ModelNameTap):
        asked = request_tap.model_name
    elif response_tap is None or isinstance(response_tap, GrpcSplitter):
        if path is None or not path.startswith("/v2/models/"):
            return NO_FACTS  # nothing here says anything (most gRPC and plain HTTP)
    stream = None
    if isinstance(response_tap, EventSplitter):
        stream = response_tap.stream
    elif isinstance(response_tap, JsonBodyTap):
        stream = read_response_json(response_tap.scan.values)
    model, finish, prompt, completion = stream.summary() if stream is not None else NO_FACTS
    return (model or asked or model_from_path(path), finish, prompt, completion)
