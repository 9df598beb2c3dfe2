"""gRPC length-prefixed message splitting (sans-I/O).

A gRPC body is a sequence of messages, each ``flag(1) | length(4, big endian) | payload``.
Messages can span several HTTP/2 DATA frames and one frame can hold several messages.
gRPC-Web uses the same framing and sends its trailers as a message whose flag has bit 7 set.

:class:`GrpcSplitter` is fed the DATA payload bytes of one stream direction as they
arrive and reports each completed message as ``(ts_ns, size, flag, end_offset)``, where
``end_offset`` is the direction byte offset just after the message's last byte.

:class:`ModelNameTap` also keeps the start of a KServe v2 / Triton ``ModelInfer`` request
body, whose ``ModelInferRequest.model_name`` (protobuf field 1) names the model; it is read
by field number (:func:`proto_string`), no generated code needed.

When the start of the body was not seen (capture began mid-stream, or bytes were lost),
the splitter *probes*: at each DATA frame start it tries a message boundary and only
confirms it when the chain of prefixes lands exactly on a later frame boundary; messages
found while probing are held until then and are dropped if the chain breaks.
"""

from __future__ import annotations

# Largest message we believe in while probing (gRPC's default receive limit is 4 MiB;
# leave room for raised limits).
PROBE_MAX_MESSAGE = 64 << 20
MAX_MESSAGE = (1 << 32) - 1

Message = tuple[int, int, int, int]  # ts_ns, size, flag, end_offset


def parse_grpc_web_trailers(payload: bytes) -> dict[str, str]:
    """gRPC-Web trailer block: HTTP/1-style ``name: value\\r\\n`` lines."""
    out: dict[str, str] = {}
    for line in payload.decode("latin-1").split("\r\n"):
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


class GrpcSplitter:
    """Splits one stream direction's DATA payload into gRPC messages."""

    # parsers/h2/_speedups.c reads and writes the fields parsers/h2/_layout.py declares and
    # builds the object from its template there: keep the two in step (tests check it)
    __slots__ = (
        "hdr",
        "left",
        "_size",
        "_flag",
        "probing",
        "confirmed",
        "_pending",
        "_dead",
        "keep_trailer",
        "trailer",
    )

    def __init__(self, probing: bool = False, keep_trailer: bool = False) -> None:
        # parsers/h2/_speedups.c builds GrpcSplitter(keep_trailer=...) slot by slot
        # (splitter_tmpl): a change here goes there too
        self.hdr = bytearray()  # partial 5-byte prefix
        self.left = -1  # payload bytes still missing for the current message; -1: in prefix
        self._size = 0
        self._flag = 0
        self.probing = probing  # True until a boundary is confirmed
        self.confirmed = not probing  # ever confirmed as gRPC framing
        self._pending: list[Message] = []  # messages found while probing
        self._dead = probing  # probing and not at a candidate boundary: skip bytes
        self.keep_trailer = keep_trailer  # grpc-web: keep the 0x80 trailer payload
        self.trailer = bytearray()

    def lost(self) -> None:
        """Bytes of this direction were lost: message boundaries are unknown now."""
        self.hdr.clear()
        self.left = -1
        self.probing = True
        self._pending.clear()
        self._dead = True

    def frame_start(self) -> None:
        """A new DATA frame begins; while probing and lost, try a boundary here."""
        if self._dead:
            self._dead = False
            self.hdr.clear()
            self.left = -1
            self._pending.clear()

    def frame_end(self, out: list[Message]) -> None:
        """A DATA frame ended; while probing, a message boundary here confirms the chain."""
        if self.probing and not self._dead and self.left == -1 and not self.hdr:
            if self._pending:
                self.probing = False
                self.confirmed = True
                out.extend(self._pending)
                self._pending.clear()

    def _reject(self) -> None:
        self._pending.clear()
        self.hdr.clear()
        self.left = -1
        self._dead = True

    def feed(
        self,
        data: bytes | bytearray | memoryview,
        i: int,
        n: int,
        off: int,
        ts: int,
        out: list[Message],
    ) -> None:
        """Consume DATA payload bytes ``data[i:n]``; ``off`` is the direction offset of
        ``data[0]`` (so a byte at index k is at direction offset ``off + k``)."""
        if self._dead:
            return
        # Fast path: at a boundary and the bytes are exactly one whole message.
        if self.left == -1 and n - i >= 5 and not self.probing and not self.hdr:
            size = int.from_bytes(data[i + 1 : i + 5], "big")
            if size + 5 == n - i:
                flag = data[i]
                if flag & 0x80:
                    self._trailer(data[i + 5 : n])
                else:
                    out.append((ts, size, flag, off + n))
                return
        dest = self._pending if self.probing else out
        while i < n:
            left = self.left
            if left < 0:
                # Reading the prefix (possibly split across feeds).
                hdr = self.hdr
                if not hdr and n - i >= 5:
                    flag = data[i]
                    size = int.from_bytes(data[i + 1 : i + 5], "big")
                    i += 5
                else:
                    take = min(5 - len(hdr), n - i)
                    hdr += data[i : i + take]
                    i += take
                    if len(hdr) < 5:
                        if self.probing and hdr[0] not in (0, 1, 0x80, 0x81):
                            self._reject()
                        return
                    flag = hdr[0]
                    size = int.from_bytes(hdr[1:5], "big")
                    hdr.clear()
                if self.probing and (flag not in (0, 1, 0x80, 0x81) or size > PROBE_MAX_MESSAGE):
                    self._reject()
                    return
                self._flag = flag
                self._size = size
                self.left = size
                if flag & 0x80 and self.keep_trailer:
                    self.trailer.clear()
                left = size
                if left == 0:
                    self.left = -1
                    if not flag & 0x80:
                        dest.append((ts, 0, flag, off + i))
                    continue
            take = left if left <= n - i else n - i
            if self._flag & 0x80 and self.keep_trailer:
                self.trailer += data[i : i + take]
            i += take
            left -= take
            if left == 0:
                self.left = -1
                if not self._flag & 0x80:
                    dest.append((ts, self._size, self._flag, off + i))
            else:
                self.left = left

    def _trailer(self, payload: bytes | bytearray | memoryview) -> None:
        if self.keep_trailer:
            self.trailer.clear()
            self.trailer += payload

    @property
    def at_boundary(self) -> bool:
        return self.left == -1 and not self.hdr


def looks_like_grpc(payload: bytes | bytearray | memoryview) -> bool:
    """Whether one whole DATA frame payload is an exact chain of gRPC messages."""
    n = len(payload)
    i = 0
    if n < 5:
        return False
    while i + 5 <= n:
        if payload[i] not in (0, 1, 0x80, 0x81):
            return False
        i += 5 + int.from_bytes(payload[i + 1 : i + 5], "big")
    return i == n


# KServe v2 / Triton gRPC methods whose request message is a ModelInferRequest, with the
# model's name as its field 1 (string model_name = 1)
KSERVE_INFER = frozenset((
    "/inference.GRPCInferenceService/ModelInfer",
    "/inference.GRPCInferenceService/ModelStreamInfer",
))  # fmt: skip
_HEAD_KEPT = 4096  # body bytes kept: field 1 comes first in a serialized message


def _varint(b: bytes | bytearray, i: int) -> tuple[int, int] | None:
    v = shift = 0
    while i < len(b) and shift < 64:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7
    return None


def proto_string(msg: bytes | bytearray, field: int) -> str | None:
    """The first value of a string field of a serialized protobuf message, by number (None
    when absent, truncated before it, or not UTF-8)."""
    i, n = 0, len(msg)
    while i < n:
        kv = _varint(msg, i)
        if kv is None:
            return None
        key, i = kv
        number, wire = key >> 3, key & 7
        if wire == 0:
            kv = _varint(msg, i)
            if kv is None:
                return None
            i = kv[1]
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            kv = _varint(msg, i)
            if kv is None:
                return None
            length, i = kv
            if number == field:
                if i + length > n:
                    return None
                try:
                    return bytes(msg[i : i + length]).decode("utf-8")
                except UnicodeDecodeError:
                    return None
            i += length
        else:  # groups (3, 4) and invalid wire types: not a message we can walk
            return None
    return None


class ModelNameTap(GrpcSplitter):
    """A GrpcSplitter that also keeps the first bytes of the body (a KServe request)."""

    __slots__ = ("head", "_open")

    def __init__(self, probing: bool = False, keep_trailer: bool = False) -> None:
        super().__init__(probing, keep_trailer)
        self.head = bytearray()  # the body's first bytes
        self._open = True  # head still contiguous from the body's first byte

    def feed(self, data: bytes | bytearray | memoryview, i: int, n: int, off: int, ts: int, out: list[Message]) -> None:
        if self._open:
            take = min(n, i + _HEAD_KEPT - len(self.head))
            self.head += data[i:take]
            self._open = len(self.head) < _HEAD_KEPT
        super().feed(data, i, n, off, ts, out)

    def lost(self) -> None:
        self._open = False
        super().lost()

    @property
    def model_name(self) -> str | None:
        """``model_name`` of the first (uncompressed) request message."""
        h = self.head
        if len(h) < 5 or h[0] != 0:
            return None
        size = int.from_bytes(h[1:5], "big")
        return proto_string(h[5 : 5 + size], 1)
