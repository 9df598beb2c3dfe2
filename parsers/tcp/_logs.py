"""Per-direction logs shared by the per-packet path and the bulk (numpy) path.

* :class:`SegLog`: segments sent but not yet cumulatively ACKed (start, end, first send
  time, retransmitted flag) for data->ACK RTT samples (Karn) and original send times.
* :class:`TsLog`: TSvals of data segments not yet echoed, for TSecr RTT samples.
* :class:`AckLog`: ACK progress (time, acknowledged offset), non-decreasing.

The per-packet path appends to Python lists; the bulk path converts the (short)
outstanding part to numpy and back. Consumed entries are dropped lazily (head index).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

_EMPTY_I64 = np.zeros(0, dtype=np.int64)
# Bound on outstanding entries: without ACKs (one-sided capture) nothing is ever
# acknowledged or echoed; the oldest entries are dropped (they only feed RTT samples).
MAX_ENTRIES = 1 << 16


class SegLog:
    __slots__ = ("st", "en", "ts", "rx", "h", "n_rx", "sampled_end")

    def __init__(self) -> None:
        self.st: list[int] = []
        self.en: list[int] = []
        self.ts: list[int] = []
        self.rx: list[bool] = []
        self.h = 0  # entries before h are ACKed
        self.n_rx = 0  # retransmitted entries still outstanding
        self.sampled_end = -1  # end of the last segment that gave an RTT sample

    def __len__(self) -> int:
        return len(self.st) - self.h

    def append(self, s: int, e: int, ts: int, rx: bool = False) -> None:
        if self.st and len(self.st) > self.h and s < self.st[-1]:
            self.insert(s, e, ts, rx)
            return
        self.st.append(s)
        self.en.append(e)
        self.ts.append(ts)
        self.rx.append(rx)
        if rx:
            self.n_rx += 1
        if len(self.st) - self.h > MAX_ENTRIES:
            self._drop(len(self.st) - self.h - MAX_ENTRIES // 2)

    def _drop(self, k: int) -> None:
        h = self.h
        self.n_rx -= sum(self.rx[h : h + k])
        del self.st[: h + k], self.en[: h + k], self.ts[: h + k], self.rx[: h + k]
        self.h = 0

    def insert(self, s: int, e: int, ts: int, rx: bool) -> None:
        i = bisect_right(self.st, s, self.h)
        self.st.insert(i, s)
        self.en.insert(i, e)
        self.ts.insert(i, ts)
        self.rx.insert(i, rx)
        if rx:
            self.n_rx += 1

    def _first_overlap(self, s: int) -> int:
        # entries are in start order; ends are (nearly) sorted too, scan from a bisect
        i = bisect_right(self.st, s, self.h) - 1
        return max(i, self.h)

    def orig_ts(self, s: int, e: int) -> int | None:
        """Earliest send time of the outstanding bytes in [s, e)."""
        best = None
        i = self._first_overlap(s)
        st, en, ts = self.st, self.en, self.ts
        n = len(st)
        while i < n and st[i] < e:
            if en[i] > s and (best is None or ts[i] < best):
                best = ts[i]
            i += 1
        return best

    def starts_in(self, s: int, e: int) -> list[int]:
        """Starts of the outstanding (originally sent) segments overlapping [s, e)."""
        out = []
        i = self._first_overlap(s)
        st, en = self.st, self.en
        n = len(st)
        while i < n and st[i] < e:
            if en[i] > s:
                out.append(st[i])
            i += 1
        return out

    def mark_retx(self, s: int, e: int) -> None:
        i = self._first_overlap(s)
        st, en, rx = self.st, self.en, self.rx
        n = len(st)
        while i < n and st[i] < e:
            if en[i] > s and not rx[i]:
                rx[i] = True
                self.n_rx += 1
            i += 1

    def ack(self, a: int) -> tuple[int | None, bool]:
        """Cumulative ACK up to ``a``: drop covered entries. Returns (send time of the
        segment holding byte a-1 when it may give a sample, any retransmitted covered)."""
        st, en, ts, rx = self.st, self.en, self.ts, self.rx
        h = self.h
        n = len(st)
        any_rx = False
        cand = None
        cand_rx = False
        cand_end = -1
        while h < n and en[h] <= a:
            if rx[h]:
                any_rx = True
                self.n_rx -= 1
            cand, cand_rx, cand_end = ts[h], rx[h], en[h]
            h += 1
        if h < n and st[h] < a:  # partially ACKed segment holds byte a-1
            cand, cand_rx, cand_end = ts[h], rx[h], en[h]
            any_rx = any_rx or rx[h]
        self.h = h
        if h > 256 and h * 2 > n:
            del st[:h], en[:h], ts[:h], rx[:h]
            self.h = 0
        if cand is None or cand_rx or any_rx or cand_end <= self.sampled_end:
            return None, any_rx
        self.sampled_end = cand_end
        return cand, any_rx

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h = self.h
        return (
            np.array(self.st[h:], dtype=np.int64),
            np.array(self.en[h:], dtype=np.int64),
            np.array(self.ts[h:], dtype=np.int64),
        )

    def set_arrays(self, st: np.ndarray, en: np.ndarray, ts: np.ndarray) -> None:
        """Bulk path: replace the log with these (never-retransmitted) segments."""
        self.set_lists(st.tolist(), en.tolist(), ts.tolist())

    def set_lists(self, st: list[int], en: list[int], ts: list[int], rx: list[bool] | None = None) -> None:
        """:meth:`set_arrays` of lists (the C bulk path's), taken as they are; ``rx``: the
        retransmitted flags (none when None)."""
        if len(st) > MAX_ENTRIES:
            k = MAX_ENTRIES // 2
            st, en, ts = st[-k:], en[-k:], ts[-k:]
            rx = None if rx is None else rx[-k:]
        self.st = st
        self.en = en
        self.ts = ts
        self.rx = [False] * len(st) if rx is None else rx
        self.h = 0
        self.n_rx = 0 if rx is None else sum(rx)


class TsLog:
    """TSvals (unwrapped to 64 bits) of data segments: first send time of each value and
    the lowest offset sent with it.

    An echo is a sample only when the ACK covers no byte first sent with a newer TSval:
    a receiver echoes the *oldest* unacknowledged TSval (RFC 7323), so a delayed ACK of
    two segments echoes the first one's and would add the ACK hold time to the RTT.
    """

    __slots__ = ("tv", "t", "s", "h", "last_echo")

    def __init__(self) -> None:
        self.tv: list[int] = []
        self.t: list[int] = []
        self.s: list[int] = []
        self.h = 0
        self.last_echo = -1

    def add(self, tv: int, ts: int, start: int) -> None:
        if tv <= self.last_echo:
            return
        if self.tv and len(self.tv) > self.h and tv <= self.tv[-1]:
            if tv == self.tv[-1] and start < self.s[-1]:
                self.s[-1] = start
            return
        self.tv.append(tv)
        self.t.append(ts)
        self.s.append(start)
        if len(self.tv) - self.h > MAX_ENTRIES:
            k = len(self.tv) - MAX_ENTRIES // 2
            del self.tv[:k], self.t[:k], self.s[:k]
            self.h = 0

    def echo(self, e: int, now: int, ack: int) -> int | None:
        """The far end echoed TSval ``e`` in an ACK up to ``ack``: the send time of that
        TSval, once, when the ACK covers nothing sent later."""
        if e <= self.last_echo:
            return None
        self.last_echo = e
        tv, h = self.tv, self.h
        n = len(tv)
        if h < n and tv[h] < e:
            h = bisect_left(tv, e, h)
        out = None
        if h < n and tv[h] == e:
            if self.t[h] <= now and (h + 1 == n or self.s[h + 1] >= ack):
                out = self.t[h]
            h += 1
        self.h = h
        if h > 256 and h * 2 > n:
            del self.tv[:h], self.t[:h], self.s[:h]
            self.h = 0
        return out

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h = self.h
        return (
            np.array(self.tv[h:], dtype=np.int64),
            np.array(self.t[h:], dtype=np.int64),
            np.array(self.s[h:], dtype=np.int64),
        )

    def set_arrays(self, tv: np.ndarray, t: np.ndarray, s: np.ndarray, last_echo: int) -> None:
        self.set_lists(tv.tolist(), t.tolist(), s.tolist(), last_echo)

    def set_lists(self, tv: list[int], t: list[int], s: list[int], last_echo: int) -> None:
        """:meth:`set_arrays` of lists (the C bulk path's), taken as they are."""
        if len(tv) > MAX_ENTRIES:
            k = MAX_ENTRIES // 2
            tv, t, s = tv[-k:], t[-k:], s[-k:]
        self.tv = tv
        self.t = t
        self.s = s
        self.h = 0
        self.last_echo = last_echo


class AckLog:
    """(ts_ns, acked offset) pairs, both non-decreasing.

    Kept in one growing pair of buffers (entries ``[h, n)`` are live): the pipeline asks
    for the whole progress after every batch, and views of the buffers answer that
    without concatenating. Written entries are never overwritten (growth copies to new
    buffers), so arrays handed out stay valid.
    """

    __slots__ = ("_ts", "_off", "_h", "_n", "_tts", "_toff", "_view")

    def __init__(self) -> None:
        self._ts = _EMPTY_I64
        self._off = _EMPTY_I64
        self._h = 0
        self._n = 0
        self._tts: list[int] = []  # per-packet appends, moved to the buffers when read
        self._toff: list[int] = []
        self._view = (_EMPTY_I64, _EMPTY_I64)  # the live entries, as handed out

    def append(self, ts: int, off: int) -> None:
        self._tts.append(ts)
        self._toff.append(off)

    def extend(self, ts: np.ndarray, off: np.ndarray) -> None:
        if len(ts):
            self._flush_tail()
            self._put(ts, off)

    def _flush_tail(self) -> None:
        if self._tts:
            self._put(np.array(self._tts, dtype=np.int64), np.array(self._toff, dtype=np.int64))
            self._tts = []
            self._toff = []

    def _put(self, ts: np.ndarray, off: np.ndarray) -> None:
        m = len(ts)
        if self._n + m > len(self._ts):
            live = self._n - self._h
            # room for twice what is live, from a small floor: there is a log per
            # connection direction, and with a floor of 256 the 10,000 open connections of
            # a 1M-packet capture held room for 5.1M entries around 113k live ones (80 MB)
            cap = max(2 * (live + m), 16)
            grown_ts = np.empty(cap, dtype=np.int64)
            grown_off = np.empty(cap, dtype=np.int64)
            grown_ts[:live] = self._ts[self._h : self._n]
            grown_off[:live] = self._off[self._h : self._n]
            self._ts, self._off, self._h, self._n = grown_ts, grown_off, 0, live
        self._ts[self._n : self._n + m] = ts
        self._off[self._n : self._n + m] = off
        self._n += m
        self._view = (self._ts[self._h : self._n], self._off[self._h : self._n])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._tts:
            self._flush_tail()
        return self._view

    def prune(self, below: int) -> None:
        """Forget the entries below offset ``below``."""
        k = int(np.searchsorted(self.arrays()[1], below, side="left"))
        if k:
            self._h += k
            self._view = (self._ts[self._h : self._n], self._off[self._h : self._n])
