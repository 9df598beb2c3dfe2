"""Per-stream state of an HTTP/2 connection and its conversion to a RequestRecord.

Everything is stored per *TCP* direction (index 0/1 as the TCP layer named them),
because mid-connection the bytes may only later tell which side is the client. The
RequestRecord is built with the orientation known when the record is handed out.

Body modes per direction: ``grpc`` (length-prefixed messages -> MessageRecords),
``sse`` / ``ndjson`` (text/event-stream, JSON lines: each event is a message, read by
:class:`parsers.llm.taps.EventSplitter`), ``http`` (other bodies: DATA frames are counted
as "messages" for first/last byte timing, but no MessageRecords are emitted for them; a
JSON body is read for what it says of an LLM request), ``probe`` (headers unknown: try
gRPC framing, fall back to http counting).
"""

from __future__ import annotations

from urllib.parse import unquote

from parsers.grpc import KSERVE_INFER, GrpcSplitter, ModelNameTap
from parsers.llm.taps import EventSplitter, JsonBodyTap, llm_facts, tap_for
from parsers.records import RequestRecord


def _is_grpc(ct: str | None) -> bool:
    return ct is not None and ct.startswith("application/grpc") and "grpc-web-text" not in ct


_NO_HEADERS: dict[str, str] = {}  # read-only stand-in for a block not seen

def _number(text: str | None) -> int | None:
    """A status header's value as a number; None unless it is ASCII digits (str.isdigit()
    also accepts '²', which int() refuses: a garbage value must not stop the parser)."""
    return int(text) if text is not None and text.isascii() and text.isdigit() else None

class Stream:
    """One HTTP/2 stream. Lists of two are indexed by TCP direction."""

    # parsers/h2/_speedups.c reads and writes the fields parsers/h2/_layout.py declares and
    # builds the object from its template there: keep the two in step (tests check it)
    __slots__ = (
        "sid",
        "promised",
        "mid",
        "headers_known",
        "hdr",
        "hdr_ts",
        "trailers",
        "end_ts",
        "end_off",
        "last_off",
        "rst_ts",
        "rst_code",
        "rst_dir",
        "rst_off",
        "mode",
        "splitter",
        "msgs",
        "first_msg_ts",
        "last_msg_ts",
        "first_msg_off",
        "data_frames",
        "first_data_ts",
        "last_data_ts",
        "first_data_off",
        "data_bytes",
        "msg_before_end",
        "msg_after_first",
        "trailers_only",
        "informational",
        "web_trailers",
        "opener",
    )

    def __init__(self, sid: int, mid: bool = False) -> None:
        # parsers/h2/_speedups.c builds Stream(sid) slot by slot (stream_tmpl): a change
        # here goes there too (test_c_built_stream_and_splitter_same_as_python checks)
        self.sid = sid
        self.promised = False
        self.mid = mid  # first seen without its opening HEADERS
        self.headers_known = not mid
        self.hdr: list[dict[str, str] | None] = [None, None]
        self.hdr_ts: list[int | None] = [None, None]
        self.trailers: list[dict[str, str] | None] = [None, None]
        self.end_ts: list[int | None] = [None, None]
        self.end_off: list[int | None] = [None, None]
        self.last_off: list[int | None] = [None, None]
        self.rst_ts: int | None = None
        self.rst_code: int | None = None
        self.rst_dir = -1
        self.rst_off: int | None = None
        self.mode = ["probe", "probe"] if mid else ["http", "http"]
        self.splitter: list[GrpcSplitter | EventSplitter | JsonBodyTap | None] = [None, None]
        if mid:
            self.splitter = [GrpcSplitter(probing=True), GrpcSplitter(probing=True)]
        self.msgs = [0, 0]
        self.first_msg_ts: list[int | None] = [None, None]
        self.last_msg_ts: list[int | None] = [None, None]
        self.first_msg_off: list[int | None] = [None, None]
        self.data_frames = [0, 0]
        self.first_data_ts: list[int | None] = [None, None]
        self.last_data_ts: list[int | None] = [None, None]
        self.first_data_off: list[int | None] = [None, None]
        self.data_bytes = [0, 0]
        # a message of direction d arrived while the other direction was still open
        self.msg_before_end = [False, False]
        # a message of direction d arrived after the other direction's first message
        self.msg_after_first = [False, False]
        self.trailers_only = False
        self.informational = False
        self.web_trailers: dict[str, str] | None = None
        self.opener = -1  # TCP direction that opened it (sent the first HEADERS)

    # -- body modes ---------------------------------------------------------------

    def set_content_type(self, ct: str | None, d: int, is_response: bool, path: str | None = None) -> None:
        """Choose body handling once a block with content-type is known."""
        if _is_grpc(ct):
            web = "grpc-web" in (ct or "")
            for k in (0, 1):
                sp = self.splitter[k]
                if self.mode[k] == "grpc":
                    continue
                if isinstance(sp, GrpcSplitter) and (sp.confirmed or sp.probing):
                    # keep a probing splitter that has progress; otherwise start clean
                    if self.data_frames[k] == 0:
                        self.splitter[k] = GrpcSplitter(keep_trailer=web)
                    self.mode[k] = "grpc" if not sp.probing or self.data_frames[k] == 0 else "probe"
                    continue
                if self.data_frames[k] == 0:
                    self.mode[k] = "grpc"
                    self.splitter[k] = GrpcSplitter(keep_trailer=web)
            if path in KSERVE_INFER and not is_response and self.mode[d] == "grpc" and not self.data_frames[d]:
                self.splitter[d] = ModelNameTap(keep_trailer=web)  # the request names its model
        elif is_response and (self.mode[d] == "http" or self.mode[d] == "probe") and self.data_frames[d] == 0:
            sp = tap_for(ct, True)
            if sp is not None:
                self.splitter[d] = sp
                self.mode[d] = ("ndjson" if sp.ndjson else "sse") if isinstance(sp, EventSplitter) else "http"

    def probe_hidden_bodies(self) -> None:
        """The first headers' content-type may be hidden behind an unknown HPACK index (a
        connection seen from its middle): bodies not read yet are probed for gRPC framing
        (the C fast path calls this too)."""
        for k in (0, 1):
            if self.mode[k] == "http" and self.data_frames[k] == 0:
                self.mode[k] = "probe"
                self.splitter[k] = GrpcSplitter(probing=True)

    def late_tap(self, d: int) -> GrpcSplitter | EventSplitter | JsonBodyTap | None:
        """The body reader of direction d at its first DATA frame, when its headers did not
        choose one (a JSON request body; the C fast path opens request streams without
        set_content_type)."""
        h = self.hdr[d]
        if h is None or self.mode[d] != "http" or self.data_frames[d]:
            return None
        sp = tap_for(h.get("content-type"), ":status" in h)
        if isinstance(sp, JsonBodyTap):
            self.splitter[d] = sp
            return sp
        return None

    @property
    def grpc(self) -> bool:
        for k in (0, 1):
            sp = self.splitter[k]
            if self.mode[k] == "grpc" or (isinstance(sp, GrpcSplitter) and sp.confirmed):
                return True
        return False

    def done(self) -> bool:
        return self.rst_ts is not None or (
            self.end_ts[0] is not None and self.end_ts[1] is not None
        )

    # -- record --------------------------------------------------------------------

    def offsets_named(self, s: int) -> list[int]:
        """The offsets in the server's direction ``s`` that this stream's record may name
        if it ends with no more bytes (see :meth:`to_record`): its end, its last byte so
        far, the end of its first message, event or data. The ACK lookups of its request
        ask for them."""
        sp = self.splitter[s]
        first_event = sp.first_off if isinstance(sp, EventSplitter) else None
        rst = self.rst_off if self.rst_dir == s else None
        named = (self.end_off[s], rst, self.last_off[s], self.first_msg_off[s], self.first_data_off[s], first_event)
        return [off for off in named if off is not None]

    def to_record(self, conn_key: int, client: int) -> RequestRecord:
        c, s = client, 1 - client
        req = self.hdr[c] or _NO_HEADERS
        resp = self.hdr[s] or _NO_HEADERS
        trl = self.trailers[s] or _NO_HEADERS
        status = resp.get(":status")
        http_status = _number(status)
        gs = trl.get("grpc-status") or resp.get("grpc-status")
        gm = trl.get("grpc-message") or resp.get("grpc-message")
        web = self.web_trailers
        if web:
            gs = gs or web.get("grpc-status")
            gm = gm or web.get("grpc-message")
        grpc_status = _number(gs.strip() if gs is not None else None)
        rst_ts = self.rst_ts
        end_ts = self.end_ts
        end = end_ts[s] if end_ts[s] is not None else rst_ts
        if rst_ts is not None and (end is None or rst_ts < end):
            end = rst_ts
        if self.end_off[s] is not None:
            end_offset = self.end_off[s]
        elif rst_ts is not None and self.rst_dir == s:
            end_offset = self.rst_off
        else:
            end_offset = self.last_off[s]
        if self.grpc:
            nreq, nresp = self.msgs[c], self.msgs[s]
            first, last, first_off = self.first_msg_ts[s], self.last_msg_ts[s], self.first_msg_off[s]
            kind = self._grpc_kind(c, s)
        elif self.mode[s] == "sse" or self.mode[s] == "ndjson":
            nreq, nresp = self.data_frames[c], self.msgs[s]
            sp = self.splitter[s]
            # the first event carrying generated content is the time-to-first-token point
            first, first_off = (sp.first_ts, sp.first_off) if isinstance(sp, EventSplitter) else (None, None)
            last = self.last_msg_ts[s]
            kind = self.mode[s]
        else:
            nreq, nresp = self.data_frames[c], self.data_frames[s]
            first, last = self.first_data_ts[s], self.last_data_ts[s]
            first_off = self.first_data_off[s]
            kind = "http"
        # one constructor call (positional, in RequestRecord's field order)
        return RequestRecord(
            conn_key,
            self.sid,
            req.get(":method"),
            req.get(":path"),
            req.get(":authority") or req.get("host"),
            req.get(":scheme"),
            req.get("content-type") or resp.get("content-type"),
            req.get("user-agent"),
            kind,
            self.hdr_ts[c],
            end_ts[c],
            self.hdr_ts[s],
            first,
            last,
            end,
            http_status,
            grpc_status,
            unquote(gm) if gm is not None else None,
            resp.get("grpc-encoding") or req.get("grpc-encoding"),
            nreq,
            nresp,
            self.data_bytes[c],
            self.data_bytes[s],
            self.rst_code,
            self.trailers_only,
            self.headers_known,
            first_off,
            end_offset,
            "h2",
            self.first_data_ts[s],
            *llm_facts(req.get(":path"), self.splitter[c], self.splitter[s]),
        )

    def _grpc_kind(self, c: int, s: int) -> str:
        nreq, nresp = self.msgs[c], self.msgs[s]
        # bidi: request messages interleaved with responses, i.e. a response message
        # arrived while the request side was still open, or a request message came
        # after the first response message.
        if self.msg_after_first[c] or (
            self.msg_before_end[s] and self.end_ts[c] is not None and nresp > 0
        ):
            return "bidi"
        if nreq > 1 and nresp > 1:
            return "bidi"
        if nreq > 1:
            return "client_stream"
        if nresp > 1:
            return "server_stream"
        return "unary"
