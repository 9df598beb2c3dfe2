"""Tolerant HPACK decoding (RFC 7541) for captures that may miss the dynamic-table context.

The stock ``hpack.Decoder`` aborts a whole header block on an unknown dynamic-table
index, which happens on every capture that starts mid-connection. This decoder reuses
hpack's integer and Huffman decoding and static table but models the dynamic table as
"the entries we saw inserted (newest first), then possibly an unknown tail": an index
into the known part decodes, an index past it becomes a placeholder, and literals with
incremental indexing are still inserted so later indexes stay aligned. Entries are
evicted oldest-first, so the unknown tail is evicted before anything we know; that keeps
the known prefix exact (up to entries whose size we could not know).
"""

from __future__ import annotations

from hpack.exceptions import HPACKDecodingError
from hpack.hpack import VARINT_MAX_LENGTH, decode_integer
from hpack.huffman_table import HUFFMAN_TABLE, decode_huffman
from hpack.table import HeaderTable

from parsers._native import speedups


def _integer(mv: memoryview, i: int, prefix: int) -> tuple[int, int]:
    """hpack's decode_integer of the integer at ``mv[i]``, given as bytes: its error message
    shows what it was given, and a memoryview's repr is its address (a different issue
    message on every run). It reads at most VARINT_MAX_LENGTH + 1 bytes: the same answer."""
    return decode_integer(mv[i : i + VARINT_MAX_LENGTH + 1].tobytes(), prefix)


STATIC_TABLE = HeaderTable.STATIC_TABLE
STATIC_LEN = len(STATIC_TABLE)
DEFAULT_TABLE_SIZE = 4096
_CACHE_BLOCKS = 64  # cached decoded blocks per direction (bounded memory)
_CACHE_BLOCK = 2048  # longer blocks are not cached

# Huffman-coded strings through hpack's own state machine walked in C (parsers/h2/_speedups.c):
# the same bytes out, ~20 us less a string (a capture of thousands of connections has tens
# of thousands: each connection's first requests are literals). It declines where hpack
# raises, and hpack then raises its own error.
_speedups = speedups("parsers.h2")
if _speedups is not None and hasattr(_speedups, "huffman"):
    _speedups.huffman_init(bytes(x for entry in HUFFMAN_TABLE for x in entry))
    _c_huffman = _speedups.huffman

    def _huffman(raw: memoryview) -> bytes:
        out = _c_huffman(raw)
        return out if out is not None else decode_huffman(raw)
else:
    _huffman = decode_huffman


class DecodedBlock:
    """One decoded header block: names/values as str; None where unknown. Read-only once
    decoded: the decoder hands the same block out again for the same bytes (its cache)."""

    # parsers/h2/_speedups.c reads and writes the fields parsers/h2/_layout.py declares
    __slots__ = ("fields", "unknown", "unknown_indexes", "error", "as_dict_memo")

    def __init__(
        self,
        fields: list[tuple[str | None, str | None]],
        unknown: int,
        unknown_indexes: list[int],
        error: str | None,
    ) -> None:
        self.fields = fields
        self.unknown = unknown  # fields whose name (or name and value) could not be known
        self.unknown_indexes = unknown_indexes
        self.error = error  # set when the block itself was malformed
        self.as_dict_memo: dict[str, str] | None = None

    def as_dict(self) -> dict[str, str]:
        """Known fields; repeated names are joined with ', ' (cookie with '; '). Built
        once per block and shared: callers must not change it."""
        out = self.as_dict_memo
        if out is not None:
            return out
        out = {}
        for name, value in self.fields:
            if name is None or value is None:
                continue
            if name in out:
                sep = "; " if name == "cookie" else ", "
                out[name] = out[name] + sep + value
            else:
                out[name] = value
        self.as_dict_memo = out
        return out


def _text(b: bytes) -> str:
    # Header bytes are mostly ASCII; never fail on odd bytes.
    try:
        return b.decode("ascii")
    except UnicodeDecodeError:
        return b.decode("utf-8", "replace")


# the static table as text, decoded once (every entry is ASCII)
STATIC_TEXT = tuple((_text(n), _text(v)) for n, v in STATIC_TABLE)


class TolerantDecoder:
    """HPACK decoder for one direction's header blocks."""

    # parsers/h2/_speedups.c reads and writes the fields parsers/h2/_layout.py declares
    __slots__ = (
        "entries", "size", "max_size", "max_allowed", "complete", "size_exact", "gen", "cache",
        "cache_gen",
    )  # fmt: skip

    def __init__(self, complete: bool = True) -> None:
        # (name or None, value or None, size) newest first; a list, not a deque: a table
        # holds a few dozen (4,096 bytes by default), and an empty deque alone took ~700
        # bytes, two per connection
        self.entries: list[tuple[str | None, str | None, int]] = []
        self.size = 0
        self.max_size = DEFAULT_TABLE_SIZE
        self.max_allowed = DEFAULT_TABLE_SIZE
        # complete: we saw the connection start, so the table has no unknown tail
        self.complete = complete
        self.size_exact = True
        # Decoded blocks that changed nothing, by their bytes: valid while the dynamic
        # table is unchanged (gen counts its changes). Steady-state streams repeat the
        # same all-indexed blocks, which then decode once (and share one DecodedBlock).
        self.gen = 0
        self.cache: dict[bytes, DecodedBlock] = {}
        self.cache_gen = 0

    def lose_context(self) -> None:
        """Bytes of this direction were lost (or never seen): any entries may have been
        inserted since, so everything we hold may sit at other indexes now."""
        self.gen += 1
        self.entries.clear()
        self.size = 0
        self.complete = False

    def set_max_allowed(self, value: int) -> None:
        """SETTINGS_HEADER_TABLE_SIZE sent by the decoding side: the encoder must fit."""
        self.max_allowed = value
        if self.max_size > value:
            self._resize(value)

    def _resize(self, new_max: int) -> None:
        self.gen += 1
        self.max_size = new_max
        self._evict()

    def _evict(self) -> None:
        entries = self.entries
        while self.size > self.max_size and entries:
            self.size -= entries.pop()[2]
        if self.max_size <= 0:
            entries.clear()
            self.size = 0

    def _insert(self, name: str | None, value: str | None, nlen: int, vlen: int) -> None:
        self.gen += 1
        size = 32 + nlen + vlen
        if size > self.max_size:
            self.entries.clear()
            self.size = 0
            return
        self.entries.insert(0, (name, value, size))
        self.size += size
        self._evict()

    def _lookup(self, index: int) -> tuple[str | None, str | None]:
        if 0 < index <= STATIC_LEN:
            return STATIC_TEXT[index - 1]
        i = index - STATIC_LEN - 1
        if 0 <= i < len(self.entries):
            e = self.entries[i]
            return e[0], e[1]
        return None, None

    def decode(self, data: bytes | bytearray | memoryview) -> DecodedBlock:
        """Decode a complete header block. Never raises: malformed input sets
        ``block.error`` and drops the dynamic context (alignment is unknown after it)."""
        key = bytes(data)
        if self.cache_gen != self.gen:
            self.cache.clear()
            self.cache_gen = self.gen
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        gen = self.gen
        out = self._decode(data)
        if self.gen == gen and out.error is None and len(key) <= _CACHE_BLOCK and len(self.cache) < _CACHE_BLOCKS:
            self.cache[key] = out
        return out

    def _decode(self, data: bytes | bytearray | memoryview) -> DecodedBlock:
        fields: list[tuple[str | None, str | None]] = []
        unknown_indexes: list[int] = []
        error = None
        mv = memoryview(data)
        n = len(mv)
        i = 0
        try:
            while i < n:
                b = mv[i]
                if b & 0x80:  # indexed field
                    if b != 0xFF:  # the index fits the prefix: one byte (the common case)
                        index = b & 0x7F
                        i += 1
                    else:
                        index, used = _integer(mv, i, 7)
                        i += used
                    if index == 0:
                        raise HPACKDecodingError("index 0")
                    name, value = self._lookup(index)
                    if name is None:
                        unknown_indexes.append(index)
                    fields.append((name, value))
                elif b & 0xE0 == 0x20:  # dynamic table size update
                    size, used = _integer(mv, i, 5)
                    i += used
                    self._resize(size)
                else:
                    if b & 0x40:
                        prefix, indexing = 6, True
                    else:
                        prefix, indexing = 4, False
                    mask = (1 << prefix) - 1
                    if b & mask != mask:
                        index = b & mask
                        i += 1
                    else:
                        index, used = _integer(mv, i, prefix)
                        i += used
                    if index:
                        name, _ = self._lookup(index)
                        nlen = -1 if name is None else len(name)
                        if name is None:
                            unknown_indexes.append(index)
                    else:
                        raw, i = self._string(mv, i, n)
                        name = _text(raw)
                        nlen = len(raw)
                    raw, i = self._string(mv, i, n)
                    value = _text(raw)
                    if indexing:
                        if nlen < 0:
                            # Unknown name length: insert anyway to keep indexes aligned;
                            # the size (and so later evictions) is a guess.
                            self.size_exact = False
                            nlen = 0
                        self._insert(name, value, nlen, len(raw))
                    fields.append((name, value))
        except (HPACKDecodingError, IndexError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.lose_context()
        return DecodedBlock(fields, len(unknown_indexes), unknown_indexes, error)

    @staticmethod
    def _string(mv: memoryview, i: int, n: int) -> tuple[bytes, int]:
        if i >= n:
            raise HPACKDecodingError("truncated string")
        first = mv[i]
        huff = first & 0x80
        if first & 0x7F != 0x7F:  # the length fits the prefix: one byte
            length = first & 0x7F
            i += 1
        else:
            length, used = _integer(mv, i, 7)
            i += used
        end = i + length
        if end > n:
            raise HPACKDecodingError("truncated string")
        raw = mv[i:end]
        return (_huffman(raw) if huff else raw.tobytes()), end
