"""Top-level values of a JSON object body, read as its bytes stream by (sans-I/O).

A request body can be large (a long prompt) and name the model anywhere: the OpenAI
Python client, for one, sends ``messages`` before ``model``. :class:`TopLevelJson` walks
the body once, keeping only the raw JSON text of the wanted top-level keys' values, so
memory stays small however large the body is. It stops at the end of the top-level
object, at the first sign the body is not a JSON object, or after ``limit`` bytes.
"""

from __future__ import annotations

import re

from parsers._native import speedups

# top_level_whole: a body whole in its first feed; skip_nested: the loop below in strings and
# nested values
_speedups = speedups("parsers.llm")
_OUTSIDE = re.compile(rb'["{}\[\],:]')  # what matters outside strings
# what matters inside a nested value: not its commas and colons (an embedding's thousands
# of numbers are passed over in one search, not one a comma)
_NESTED = re.compile(rb'["{}\[\]]')
_INSIDE = re.compile(rb'["\\]')  # what ends or escapes inside a string
_WS = b" \t\r\n"


class TopLevelJson:
    """Raw values (bytes) of the wanted top-level keys of a JSON object, streamed."""

    __slots__ = ("keys", "values", "limit", "value_cap", "_seen", "_depth", "_in_str", "_esc",
                 "_want_key", "_reading_key", "_key", "_capture", "_acc", "_done")  # fmt: skip

    def __init__(self, keys: frozenset[bytes], limit: int = 8 << 20, value_cap: int = 1 << 20) -> None:
        self.keys = keys
        self.values: dict[bytes, bytes] = {}
        self.limit = limit  # body bytes looked at
        self.value_cap = value_cap  # a value longer than this is dropped
        self._seen = 0
        self._depth = 0
        self._in_str = False
        self._esc = False  # the previous byte inside a string was a backslash
        self._want_key = False  # at depth 1, a key comes next
        self._reading_key = False
        self._key = b""
        self._capture: bytes | None = None  # key whose value is being kept
        self._acc = bytearray()  # key or captured value bytes of earlier feeds
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, b: bytes | bytearray | memoryview) -> None:
        if self._done:
            return
        b = bytes(b)
        if not self._seen and _speedups is not None and len(b) < self.limit:
            # the usual body, whole in its first feed: read in C at once (None: it goes on)
            whole = _speedups.top_level_whole(b, self.keys, self.value_cap)
            if whole is not None:
                self._seen = len(b)
                self.values.update(whole)
                self._done = True
                return
        self._seen += len(b)
        n = len(b)
        i = 0
        mark = 0  # where the bytes being accumulated (key or value) begin in b
        while i < n:
            if _speedups is not None and (self._in_str or self._depth > 1):
                # strings, and what is below the top level, passed over in C (a regular
                # expression search takes ~6 ns a byte)
                i, self._depth, self._in_str, self._esc = _speedups.skip_nested(b, i, self._depth, self._in_str, self._esc)
                if self._reading_key and not self._in_str:  # the key's closing quote is at i - 1
                    self._reading_key = False
                    self._key = bytes(self._acc) + b[mark : i - 1]
                    self._acc.clear()
                continue
            if self._in_str:
                if self._esc:
                    self._esc = False
                    i += 1
                    continue
                m = _INSIDE.search(b, i)
                if m is None:
                    i = n
                    break
                j = m.start()
                if b[j] == 0x5C:  # backslash: the next byte is escaped
                    self._esc = True
                    i = j + 1
                    continue
                self._in_str = False
                i = j + 1
                if self._reading_key:
                    self._reading_key = False
                    self._key = bytes(self._acc) + b[mark:j]
                    self._acc.clear()
                continue
            if self._depth == 0:
                while i < n and b[i] in _WS:
                    i += 1
                if i == n:
                    break
                if b[i] != 0x7B:  # not '{': not a JSON object
                    self._done = True
                    return
                self._depth = 1
                self._want_key = True
                i += 1
                continue
            m = (_NESTED if self._depth > 1 else _OUTSIDE).search(b, i)
            if m is None:
                i = n
                break
            j = m.start()
            c = b[j]
            i = j + 1
            if c == 0x22:  # '"'
                self._in_str = True
                if self._depth == 1 and self._want_key:
                    self._want_key = False
                    self._reading_key = True
                    self._acc.clear()
                    mark = i
            elif c == 0x7B or c == 0x5B:  # '{' '['
                self._depth += 1
            elif self._depth > 1:
                if c == 0x7D or c == 0x5D:  # '}' ']'
                    self._depth -= 1
            elif c == 0x3A:  # ':' at depth 1: a value begins
                if self._key in self.keys:
                    self._capture = self._key
                    self._acc.clear()
                    mark = i
            elif c == 0x2C or c == 0x7D:  # ',' '}' at depth 1: the value ends
                if self._capture is not None:
                    raw = bytes(self._acc) + b[mark:j]
                    if len(raw) <= self.value_cap:
                        self.values[self._capture] = raw.strip()
                    self._capture = None
                    self._acc.clear()
                self._key = b""
                if c == 0x7D:
                    self._done = True
                    return
                self._want_key = True
        # bytes of a key or kept value continue into the next feed
        if self._reading_key or self._capture is not None:
            self._acc += b[mark:n]
            if len(self._acc) > self.value_cap:  # too long to keep (or to be a wanted key)
                self._capture = None
                self._acc.clear()
        if self._seen >= self.limit:
            self._done = True

    def lost(self) -> None:
        """Bytes of the body were lost: nothing after them can be trusted."""
        self._done = True
