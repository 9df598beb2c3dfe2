"""Capture times far off their neighbours': a packet stamped 1970 (or 2100) among packets
of today, from a capture driver that lost its clock for a moment or a bad merge.

Read as stamped, one such packet makes its request, its ACK or its connection span
decades: the analysis would look at every second or 100 ms bucket of those decades
(billions of rows; a capture with 3 % of its packets stamped 0 grew `tailtap analyze` to
18 GB before it was stopped). A packet is an outlier when its time is more than
``OFF_NS`` from the median time of the 9 packets around it (itself, 4 before, 4 after):
up to 4 outliers in a row are found. The median of an ordered run of times is its middle
one, so a capture's own gaps never make an outlier, however long, nor does a clock that
steps back or forward and stays there (more than half of the packets around agree with
either side). An outlier is read at the time of the packet before it: its bytes stay
where they were in the connection, and the batch in the order it was recorded in.

Records out of time order (a capture over several NIC queues or CPUs writes each one's
packets in blocks: a packet can be recorded after a later-stamped one) are read in time
order (:func:`in_time_order`): in file order, a TCP analysis sees the later packet's
sequence numbers first, a hole, and then its fill, and takes a capture artefact for loss
(samples/baseline, no cause injected, with 1 packet in 50 recorded up to 20 ms late:
5 windows blamed on loss bursts, 8 % of its messages lost).

Sans-I/O: times in, times out, counted in DecodeStats (outliers also said in a DecodeIssue).
"""

from __future__ import annotations

import datetime as _dt

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from parsers.records import DecodeIssue, DecodeStats, PacketBatch

OFF_NS = 60 * 10**9  # farther than this from the packets around it: not its time
_HALF = 4  # packets each side of one in its window
_KIND = "time_outlier"
# records out of time order by at most this are read in time order; a step back of more
# is the clock's (NTP steps a clock only past 128 ms, and slews it below)
STEP_NS = 100 * 10**6


class OutlierTimes:
    """Finds and replaces outlying times batch by batch, with the last times of the batch
    before as the first packets' earlier neighbours. The last packets of a batch have no
    later neighbours yet: one behind the packet before it by more than OFF_NS is read at
    that packet's time. The capture's first packet has no earlier ones: it is read as
    stamped."""

    def __init__(self) -> None:
        self._before = np.zeros(0, np.int64)  # the last _HALF times handed out
        self._issue: DecodeIssue | None = None
        self._first = ""

    def start_file(self) -> None:
        """The next file of a run: its own issue (the times around carry over)."""
        self._issue = None

    def repair(
        self, ts_ns: np.ndarray, frame_no: np.ndarray, stats: DecodeStats, issues: list[DecodeIssue]
    ) -> np.ndarray:
        """The batch's times, a new array with each outlier at the time of the packet
        before it when it has any (``ts_ns`` itself otherwise: one comparison of
        consecutive times finds most batches have no jump that large)."""
        before = self._before
        n = len(ts_ns)
        if n == 0:
            return ts_ns
        if not (np.abs(np.diff(ts_ns)) > OFF_NS).any() and not (len(before) and abs(int(ts_ns[0]) - int(before[-1])) > OFF_NS):
            self._before = np.concatenate((before, ts_ns[-_HALF:]))[-_HALF:]
            return ts_ns
        whole = np.concatenate((before, ts_ns))
        # where the packets around run out (the capture's first ones; the batch's last ones,
        # whose later packets are not read yet) the window repeats the last packet there: a
        # one-sided window's median is not the middle of an ordered run (a packet an hour
        # would be an outlier), and one that holds itself five times never is
        padded = np.concatenate((np.repeat(whole[:1], _HALF - len(before)), before, ts_ns, np.repeat(ts_ns[-1:], _HALF)))
        windows = sliding_window_view(padded, 2 * _HALF + 1)
        median = np.partition(windows, _HALF, axis=1)[:, _HALF]
        off = np.abs(ts_ns - median) > OFF_NS
        # the batch's last packets are judged by the ones before them alone: behind the
        # one before by more than OFF_NS (a jump forward may be a gap: read as stamped)
        tail = max(n - _HALF, 0)
        if tail:
            prev: int | None = int(median[tail - 1] if off[tail - 1] else ts_ns[tail - 1])
        else:
            prev = int(whole[-n - 1]) if len(whole) > n else None
        for i in range(tail, n):
            if prev is not None and not off[i] and ts_ns[i] < prev - OFF_NS:
                off[i], median[i] = True, prev
            prev = int(median[i] if off[i] else ts_ns[i])
        if not off.any():
            self._before = whole[-_HALF:].copy()
            return ts_ns
        # read at the time of the packet before it (the median of its window where none
        # is): the batch stays in the order it was recorded in
        kept = np.concatenate((np.ones(len(before), bool), ~off))
        last_kept = np.maximum.accumulate(np.where(kept, np.arange(len(whole)), -1))[len(before):]
        fixed = np.where(~off, ts_ns, np.where(last_kept >= 0, whole[np.maximum(last_kept, 0)], median))
        count = int(off.sum())
        stats.time_outliers += count
        if self._issue is None:
            first = int(np.argmax(off))
            try:
                stamped = f"{_dt.datetime.fromtimestamp(int(ts_ns[first]) // 10**9, _dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
            except (OverflowError, ValueError, OSError):  # past the calendar
                stamped = f"{int(ts_ns[first])} ns after 1970"
            self._first = f"the first stamped {stamped}"
            self._issue = DecodeIssue(_KIND, int(frame_no[first]), "")
            issues.append(self._issue)
        self._issue.message = (
            f"{stats.time_outliers} packet(s) stamped more than {OFF_NS // 10**9} s off the times of the packets"
            f" around them ({self._first}): read at those packets' time"
        )
        self._before = np.concatenate((before, fixed))[-_HALF:]
        return fixed


def in_time_order(batch: PacketBatch, stats: DecodeStats) -> PacketBatch:
    """The batch with its packets in time order (a stable sort: packets stamped alike stay
    in file order; each keeps its packet number, ``frame_no``, for what is said about it);
    the batch itself when it is in order. Packets recorded after ones stamped later are
    counted (``stats.out_of_time_order``), not warned about: lab captures over a bridge
    have them, and their tables are the same either way."""
    ts = batch.ts_ns
    if len(ts) < 2:
        return batch
    back = ts[1:] - ts[:-1]
    if not (back < 0).any():
        return batch
    # a step back of more than STEP_NS is the clock's, not the recording's: the packets
    # after it are ordered among themselves, not moved before the ones of the old clock
    epoch = np.concatenate(([0], np.cumsum(back < -STEP_NS)))
    order = np.lexsort((ts, epoch))
    position = np.empty_like(order)
    position[order] = np.arange(len(ts))
    late = position < np.arange(len(ts))  # read earlier than recorded
    if not late.any():  # (only steps back: the file's order)
        return batch
    stats.out_of_time_order += int(late.sum())
    return PacketBatch(batch.frame_no[order], ts[order], batch.linktype[order], batch.caplen[order],
                       batch.origlen[order], batch.offset[order], batch.buf)
