"""Requests estimated from the TLS record layer alone (no keys): record headers are in
clear, so their times and sizes show the exchange even when the content does not.

Rules (published work on LLM token side channels finds that token streams leak per-token
timing and sizes through TLS record boundaries; padding hides sizes, not timing):

* application-data records only; in TLS 1.3 the server's protected records before the
  client's first one (its Finished, itself skipped) are the rest of the handshake;
* a client record starts a request once the server has answered the previous one; more
  client records before the answer belong to the same request. In TLS 1.3 the server's
  session tickets may land between the client's first request records: a client record
  within ``TICKET_SPLIT_NS`` of the server's first flight continues the request, and that
  flight is not counted as an answer; over HTTP/2 (the client's first record its preface
  alone) the server's records before its SETTINGS are its tickets, however late they
  come. Over HTTP/2 (chosen, or
  offered when TLS 1.3 hides the choice) a client record needs ``REQUEST_MIN_BYTES`` of
  (estimated) plaintext (smaller ones are control frames: WINDOW_UPDATE, PING, SETTINGS
  acknowledgements), the client's first record is its connection preface, and neither
  the server's (its first record of SETTINGS size, which may come between the client's
  first request records) nor its records of control-frame size count;
* each server record (records completed by the same packet count once: a flight) is a
  response chunk: the first is the first byte (the TTFT estimate), the last before the
  next request is the end.

Over HTTP/1.1 one exchange is open at a time: each estimate is one request
(``kind = tls_exchange``; its stream id is the exchange index from 0, as decrypted
HTTP/1.1's is, so the two readings of one capture join). Over HTTP/2 (or an unknown ALPN) streams may share the
connection, so an estimate spans what the connection did between two requests
(``kind = tls_burst``): a per-connection figure, not a per-stream one."""

from __future__ import annotations

from dataclasses import dataclass, field

from parsers.records import MessageRow, RequestRecord

from ._handshake import Hello
from ._records import APPLICATION_DATA, Record

REQUEST_MIN_BYTES = 40  # HTTP/2 control frames are 9-17 bytes; a request head is more
# HTTP/2: the client's first record is its connection preface and SETTINGS (24 + 9 + 6 per
# setting bytes, ~60-80) unless the first request rides in it too; a server record under
# CONTROL_MAX_BYTES is a SETTINGS ack, WINDOW_UPDATE or PING, not a response chunk
PREFACE_MAX_BYTES = 100
CONTROL_MAX_BYTES = 18
# TLS 1.3: the server sends its session tickets as protected records as soon as it has the
# client's Finished, so they can land between the client's first request records; the
# client's next record within this time of the server's first flight continues the request
TICKET_SPLIT_NS = 1_000_000


def plaintext_estimate(payload_len: int, hello: Hello | None) -> int:
    """Plaintext bytes of a protected record: its length less the AEAD tag, TLS 1.2
    GCM's explicit nonce, and TLS 1.3's inner content type."""
    if hello is not None and hello.version == 0x0304:
        return max(payload_len - 17, 0)
    if hello is not None and hello.cipher_suite is not None and hello.cipher_suite >> 8 == 0xCC:
        return max(payload_len - 16, 0)  # ChaCha20-Poly1305: no explicit nonce
    return max(payload_len - 24, 0)


def _maybe_h2(hello: Hello | None) -> bool:
    """HTTP/2 chosen, or offered and the choice unseen (TLS 1.3 sends it encrypted)."""
    if hello is None:
        return False
    if hello.alpn is not None:
        return hello.alpn.startswith("h2")
    for protocol in hello.alpn_offered:  # (a loop: this runs a record)
        if protocol.startswith("h2"):
            return True
    return False


@dataclass
class _Estimate:
    start: int
    request_end: int
    request_bytes: int
    flights: list[tuple[int, int, int]] = field(default_factory=list)  # (ts, bytes, end offset)


class KeylessEstimator:
    def __init__(self, conn_key: int, client_dir: int) -> None:
        self.conn_key = conn_key
        self.client_dir = client_dir
        self.hello: Hello | None = None
        self.client_protected = 0  # the client's protected records so far
        self.client_app = 0  # the client's application-data records so far
        self.client_preface = False  # HTTP/2: the client's first record was its preface alone
        self.server_preface = False  # HTTP/2: the server's SETTINGS record went by
        self.server_flights = 0  # the server's flights counted as response chunks so far
        self.estimates: list[_Estimate] = []
        self.records = 0

    def lost(self, role: int) -> None:
        """Bytes of ``role``'s records never came (the estimates go on after them)."""

    def record(self, role: int, rec: Record, hello: Hello | None) -> None:
        self.hello = hello
        if rec.content_type == APPLICATION_DATA:
            self.app_data(role, len(rec.payload), rec.ts_ns, rec.end_offset, hello)

    def app_data(self, role: int, payload_len: int, ts_ns: int, end_offset: int, hello: Hello | None) -> None:
        """A protected application data record of ``role``: ``payload_len`` bytes after its
        header, completed at ``ts_ns``, ending at direction offset ``end_offset``."""
        self.hello = hello
        tls13 = hello is not None and hello.version == 0x0304
        if role == 0:
            self.client_protected += 1
            if tls13 and self.client_protected == 1:
                return  # the client's Finished
        elif tls13 and self.client_protected == 0:
            return  # the server's encrypted handshake
        self.records += 1
        size = plaintext_estimate(payload_len, hello)
        h2 = _maybe_h2(hello)
        cur = self.estimates[-1] if self.estimates else None
        if role == 0:
            first = self.client_app == 0
            self.client_app += 1
            if h2 and first and size < PREFACE_MAX_BYTES:
                self.client_preface = True
                return
            if h2 and size < REQUEST_MIN_BYTES:
                return
            if (tls13 and cur is not None and self.server_flights == 1 and len(cur.flights) == 1
                    and ts_ns - cur.flights[0][0] < TICKET_SPLIT_NS):
                cur.flights.clear()  # that flight was the session tickets, not an answer
            if cur is None or cur.flights:
                self.estimates.append(_Estimate(ts_ns, ts_ns, size))
            else:
                cur.request_end = ts_ns
                cur.request_bytes += size
            return
        if h2 and not self.server_preface and CONTROL_MAX_BYTES <= size < PREFACE_MAX_BYTES:
            # the server's connection preface (its SETTINGS), which may come between the
            # client's first request records: not a response chunk
            self.server_preface = True
            if tls13 and self.client_preface and cur is not None and cur.flights:
                # no HTTP/2 response comes before the server's SETTINGS: what came before
                # them were its session tickets, however late they came (only where the
                # client's first record was its preface: a client that offered h2 and speaks
                # HTTP/1.1, the choice hidden, sends its request first)
                self.server_flights -= len(cur.flights)
                cur.flights.clear()
            return
        if cur is None or (h2 and size < CONTROL_MAX_BYTES):
            return  # before any request (a session ticket), or HTTP/2 control
        if cur.flights and cur.flights[-1][0] == ts_ns:
            ts, b, _end = cur.flights[-1]
            cur.flights[-1] = (ts, b + size, end_offset)
        else:
            cur.flights.append((ts_ns, size, end_offset))
            self.server_flights += 1

    def take(self) -> tuple[list[RequestRecord], list[MessageRow]]:
        """The estimated requests and their response chunks (as message rows, TCP
        direction), and forget them."""
        hello = self.hello
        alpn = None
        if hello is not None:
            alpn = hello.alpn or (hello.alpn_offered[0] if len(hello.alpn_offered) == 1 else None)
        kind = "tls_exchange" if alpn in ("http/1.1", "http/1.0") else "tls_burst"
        server_dir = 1 - self.client_dir
        reqs: list[RequestRecord] = []
        rows: list[MessageRow] = []
        for sid, e in enumerate(self.estimates):  # from 0, as HTTP/1.1's exchange index
            r = RequestRecord(self.conn_key, sid, method=alpn or "tls", authority=hello.sni if hello else None,
                              kind=kind, request_start=e.start, request_end=e.request_end, protocol="tls",
                              headers_known=False, request_bytes=e.request_bytes)  # fmt: skip
            if e.flights:
                r.first_message = r.first_byte = e.flights[0][0]
                r.last_message = r.end = e.flights[-1][0]
                r.response_messages = len(e.flights)
                r.response_bytes = sum(b for _t, b, _o in e.flights)
                r.first_message_end_offset = e.flights[0][2]
                r.end_offset = e.flights[-1][2]
                rows += [(sid, server_dir, j, t, b, 0, off) for j, (t, b, off) in enumerate(e.flights)]
            reqs.append(r)
        self.estimates = []
        return reqs, rows
