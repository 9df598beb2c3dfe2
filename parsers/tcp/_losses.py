"""Mixin for :class:`TcpAnalyzer`: what a retransmission or a hole was (loss, reordering,
spurious), the loss bursts they make up, and holes given up on. The rules are in
``_analysis``'s docstring."""

from __future__ import annotations

from parsers.records import ResendPrompt, TcpEvent, TcpEventKind
from parsers.tcp import _reassembly as ra
from parsers.tcp._limits import (
    BURST_GAP_NS,
    DSACK_GRACE_NS,
    FAST_WIN_NS,
    HOLE_TIMEOUT_NS,
    OOO_DEFAULT_NS,
    PENDING_RETX_NS,
    RECENT_BURSTS,
    RTO_MIN_NS,
)
from parsers.tcp._state import Conn, Dir, Hole, PendingRetx


def verdict_due(conn: Conn) -> int | None:
    """The earliest time a verdict on a pending retransmission can fall (the pending limit,
    or the D-SACK grace after its ACK at its shortest): the per-packet path gives it at
    the first packet after that time, so the numpy bulk run ends before that packet for the
    verdict, and the send log's gate it opens, to fall where they would packet by packet
    (the C run gives it on that packet itself). None: no retransmission pending."""
    due = None
    for D in conn.dirs:
        for p in D.pending_retx:
            t = p.ts + PENDING_RETX_NS
            if p.covered_ts is not None and p.covered_ts + DSACK_GRACE_NS < t:
                t = p.covered_ts + DSACK_GRACE_NS
            if due is None or t < due:
                due = t
    return due


def prompt_of(kind: str) -> ResendPrompt:
    """What made a (not yet spurious) resend: the receiver's reports make it fast."""
    return ResendPrompt.RECEIVER if kind == TcpEventKind.FAST_RETRANSMISSION else ResendPrompt.TIMER


class LossPath:
    """Verdicts on retransmissions and holes, and loss bursts (TcpAnalyzer's state)."""

    stats: dict
    _events: list

    @staticmethod
    def _set_hi(D: Dir, erel: int, ts: int, ipid: int, tsv_u) -> None:
        D.hi = erel
        D.hi_ts = ts
        D.hi_ipid = ipid
        D.hi_tsv = tsv_u

    @staticmethod
    def _has_new(D: Dir, s: int, e: int) -> bool:
        """Does [s, e) hold bytes not in the out-of-order buffer yet?"""
        pos = s
        for bs, _ce, we, *_ in D.buf:
            if bs > pos:
                break
            if we > pos:
                pos = we
            if pos >= e:
                return False
        return pos < e

    def _late_original(self, conn: Conn, D: Dir, hole: Hole, ts: int, ipid: int, tsv_u) -> bool:
        """Hole bytes seen for the first time: sent before the segment that revealed the
        hole (reordering), or after it (a retransmission of bytes lost upstream)?"""
        if tsv_u is not None and hole.ev_tsv is not None and tsv_u != hole.ev_tsv:
            return tsv_u < hole.ev_tsv
        if (
            ipid >= 0
            and hole.ev_ipid >= 0
            and D.ipid_good >= 8
            and D.ipid_bad * 5 <= D.ipid_good
            and ipid != hole.ev_ipid
        ):
            return ((ipid - hole.ev_ipid + 0x8000) & 0xFFFF) - 0x8000 < 0
        full = conn.full_rtt()
        thr = full if full else OOO_DEFAULT_NS
        return ts - hole.first_seen < thr

    @staticmethod
    def _fast_win(full: float | None) -> float:
        """How soon after the receiver's report a resend counts as asked for (``full``:
        the connection's full RTT, Conn.full_rtt)."""
        return max(FAST_WIN_NS, 2 * full) if full else FAST_WIN_NS

    def _retx_kind(self, conn: Conn, D: Dir, s: int, ts: int, t_orig: int | None) -> str:
        full = conn.full_rtt()
        fast_win = self._fast_win(full)
        if D.dupacks >= 2 and s <= D.acked and ts - D.dupack_ts <= fast_win:
            return TcpEventKind.FAST_RETRANSMISSION
        if D.sack_hi > s and ts - D.sack_ts <= fast_win:
            return TcpEventKind.FAST_RETRANSMISSION
        rto = max(RTO_MIN_NS, 1.5 * full) if full else RTO_MIN_NS
        # a retransmission timer only fires when no ACK moved forward for a whole RTO; one
        # right after an ACK is ACK-clocked (partial ACK recovery, PMTU re-segmentation)
        if t_orig is not None and ts - t_orig >= rto and ts - D.progress_ts >= RTO_MIN_NS:
            return TcpEventKind.RTO_RETRANSMISSION
        return TcpEventKind.RETRANSMISSION

    def _retx_seen(self, conn, D, s, e, wl, ts, fr, tsv_u) -> None:
        """A retransmission of bytes the capture saw before."""
        D.retx += 1
        conn.hist.add_side("T", D.idx)
        if e <= D.acked or any(a <= s and e <= b for a, b in D.sacks):
            # the hole filled before the resend came (the dup ACK and SACK state is reset by
            # then; the times of the last reports stay): asked for when the receiver reported
            # a hole shortly before, a timer's otherwise
            asked = ts - max(D.hole_dup_ts, D.sack_ts) <= self._fast_win(conn.full_rtt())
            prompt = ResendPrompt.RECEIVER if asked else ResendPrompt.TIMER
            self._events.append(TcpEvent(ts, conn.key, D.idx, TcpEventKind.SPURIOUS_RETRANSMISSION, s, wl, fr,
                                         prompt=prompt))
            return
        t_orig = D.segs.orig_ts(s, e)
        kind = self._retx_kind(conn, D, s, ts, t_orig)
        self._resent(conn, D, s, e, wl, ts, fr, tsv_u, kind, t_orig, D.segs.starts_in(s, e), D.acked, D.hi)
        D.segs.mark_retx(s, e)

    def _resent(self, conn, D, s, e, wl, ts, fr, tsv_u, kind, t_orig, starts, acked, hi) -> None:
        """A resend not yet known to be spurious (``kind``: _retx_kind; ``t_orig``: its bytes'
        first send time; ``starts``: the outstanding segments it covers; ``acked``, ``hi``:
        the ACK and highest offset at its packet): its loss burst and event, and it waits for
        its verdict. The per-packet path and the C bulk run (which gives these) share it."""
        # a retransmission may carry several lost segments (Linux collapses small ones)
        burst = self._burst(conn, D, s, e, ts, starts, acked, hi)
        rec = (ts - t_orig) / 1e6 if t_orig is not None else None
        ev = TcpEvent(ts, conn.key, D.idx, kind, s, wl, fr, rec, burst, prompt_of(kind))
        D.pending_retx.append(PendingRetx(ev, s, e, ts, tsv_u, burst))

    def _verdict(self, conn: Conn, D: Dir, p: PendingRetx, spurious: bool) -> None:
        ev = p.event
        if spurious:
            ev.kind = TcpEventKind.SPURIOUS_RETRANSMISSION
            ev.burst_id = None
            segs = D.segs.starts_in(p.start, p.end) + [p.start]
            if p.burst is not None and p.burst == D.burst_id:
                D.burst_segs.difference_update(segs)
            elif p.burst is not None:
                self._uncount(D, p.burst, segs)
        self._events.append(ev)

    def _burst(self, conn: Conn, D: Dir, s: int, e: int, ts: int, starts: list[int] | None = None,
               acked: int | None = None, hi: int | None = None) -> int:  # fmt: skip
        """The loss burst a resend of [s, e) at ``ts`` belongs to (``acked``, ``hi``: D's as
        of its packet, when D's fields have moved on since: the C bulk run's)."""
        acked = D.acked if acked is None else acked
        hi = D.hi if hi is None else hi
        if D.burst_id is not None and (acked >= D.burst_end or ts - D.burst_last > BURST_GAP_NS):
            self._close_burst(D)
        if D.burst_id is None:
            # numbered within the connection: a connection's ids do not depend on what
            # other connections (maybe handled by another process) did before
            conn.bursts_opened += 1
            D.burst_id = conn.bursts_opened
            D.burst_segs = set()
            # the whole flight in flight at the first loss belongs to this episode
            D.burst_end = e if e > hi else hi
        if starts:
            D.burst_segs.update(starts)
        else:
            D.burst_segs.add(s)
        if e > D.burst_end:
            D.burst_end = e
        D.burst_last = ts
        return D.burst_id

    @staticmethod
    def _close_burst(D: Dir) -> None:
        if D.burst_segs:
            D.bursts += 1
            size = len(D.burst_segs)
            D.burst_sizes[size] = D.burst_sizes.get(size, 0) + 1
            if size > D.longest:
                D.longest = size
            D.closed_bursts[D.burst_id] = D.burst_segs
            if len(D.closed_bursts) > RECENT_BURSTS:
                del D.closed_bursts[next(iter(D.closed_bursts))]
        D.burst_id = None
        D.burst_segs = set()

    @staticmethod
    def _uncount(D: Dir, burst: int, segs: list[int]) -> None:
        """Segments of a closed burst turned out spurious: shrink it, or uncount it."""
        members = D.closed_bursts.get(burst)
        if members is None:
            return
        old = len(members)
        members.difference_update(segs)
        new = len(members)
        if new == old:
            return
        D.burst_sizes[old] -= 1
        if new:
            D.burst_sizes[new] = D.burst_sizes.get(new, 0) + 1
        else:
            D.bursts -= 1
            del D.closed_bursts[burst]
        D.longest = max((k for k, v in D.burst_sizes.items() if v > 0), default=0)

    # ------------------------------------------------------------------ holes

    def _resolve_hole(self, conn: Conn, D: Dir, h: Hole, ts: int | None, burst) -> None:
        rec = None if ts is None else (ts - h.first_seen) / 1e6
        self._events.append(
            TcpEvent(h.first_seen, conn.key, D.idx, TcpEventKind.LOST_SEGMENT, h.start, h.end - h.start,
                     h.frame, rec, burst if h.retx else None)
        )  # fmt: skip

    def _fill_holes(self, conn: Conn, D: Dir, s: int, e: int, ts: int, burst) -> None:
        keep = []
        for h in D.holes:
            if h.start < e and h.end > s and ra.subtract(h, s, e):
                if burst is not None:
                    h.retx = True
                if not h.missing:
                    self._resolve_hole(conn, D, h, ts, burst)
                    continue
            keep.append(h)
        D.holes = keep

    def _drop_holes_below(self, conn: Conn, D: Dir, upto: int) -> None:
        """Holes below ``upto`` will never be filled (skipped): resolve them unfilled."""
        keep = []
        for h in D.holes:
            if h.start < upto:
                ra.subtract(h, h.start, upto)
                if not h.missing:
                    self._resolve_hole(conn, D, h, None, None)
                    continue
            keep.append(h)
        D.holes = keep

    def _skip_first_hole(self, conn: Conn, D: Dir, ts: int, fr: int, out: list) -> None:
        target = D.buf[0][0] if D.buf else D.hi
        if target <= D.nxt:
            return
        conn.hist.add_side("K", D.idx)
        self._events.append(
            TcpEvent(ts, conn.key, D.idx, TcpEventKind.REASSEMBLY_SKIP, D.nxt, target - D.nxt, fr)
        )
        self._drop_holes_below(conn, D, target)
        ra.drain(conn, D, ts, fr, out, upto=target)

    def _timeouts(self, conn: Conn, ts: int, fr: int, out: list) -> None:
        for D in conn.dirs:
            while D.holes and ts - D.holes[0].first_seen > HOLE_TIMEOUT_NS and D.buf:
                self._skip_first_hole(conn, D, ts, fr, out)
            if D.pending_retx:
                grace = max(DSACK_GRACE_NS, 4 * conn.full_rtt()) if conn.full_rtt() else DSACK_GRACE_NS
                keep = []
                for p in D.pending_retx:
                    if ts - p.ts > PENDING_RETX_NS or (p.covered_ts is not None and ts - p.covered_ts > grace):
                        self._verdict(conn, D, p, False)
                    else:
                        keep.append(p)
                D.pending_retx = keep
