"""Per-packet TCP analysis (the exact path; the bulk path in ``_fast`` handles clean runs).

Classification rules (``TcpEvent.kind``), all per data direction:

* capture duplicates (same IPv4 ID and identical TCP header within 250 ms, or, without
  a usable IP ID, identical header incl. TSval within 50 us) are dropped first: they are
  artefacts of the capture (mirror both ways, loops), never retransmissions.
* ``lost_segment``: a segment starts above the highest byte seen: the bytes between
  are a *hole*. The event is emitted when the hole is resolved, at the time it was first
  seen, with ``recovery_ms`` = first sight -> the segment that filled it (None when it was
  never filled). It joins a loss burst only when a retransmission filled it.
* ``out_of_order``: the first sight of bytes inside a hole that were *sent before* the
  segment that revealed the hole (a late original, reordering). Evidence, in order:
  TSval (older than the revealing segment's), IPv4 ID (older, when the sender's IDs are
  sequential: >= 8 small forward steps, 5 times more than other steps), else timing
  like tshark (late by less than the round trip, 3 ms when no RTT is known).
  ``recovery_ms`` = how late.
* retransmissions: bytes the capture saw before, or the first sight of hole bytes that
  were sent after the revealing segment (lost upstream of the capture point):
  ``fast_retransmission`` when >= 2 dup ACKs for this offset (tshark's rule: some may be
  missing from the trace) or SACK blocks above it were seen within max(20 ms, 2 RTT);
  else ``rto_retransmission`` when it comes >= max(180 ms, 1.5 RTT) after the original
  send (Linux RTO >= 200 ms; 10 % slack for capture timing) *and* >= 180 ms after the
  cumulative ACK last moved (the timer restarts on every forward ACK; a retransmission
  right after an ACK is ACK-clocked, not a timeout); else ``retransmission``
  (tail-loss probes, RACK, ...). ``recovery_ms`` = original send (or first sight of the
  hole) -> this retransmission.
* ``spurious_retransmission``: the bytes were already ACKed or SACKed when retransmitted,
  or later a D-SACK covers them, or the first ACK covering them echoes a TSval older than
  the retransmission's (Eifel). Retransmissions of seen bytes are therefore held back
  until that verdict (the ACK covering them, a D-SACK, or 2 s) before being emitted.
* ``dup_ack``: tshark's rule (no data, same ACK and window as the same side's previous
  segment, window non-zero, at its next sequence number, not the ACK of a keep-alive).
* ``zero_window``: an episode of zero receive window blocking this direction's data,
  emitted when the window opens again with ``recovery_ms`` = its duration.
* ``window_full``: a data segment reaches the far end's advertised (scaled) window;
  only when the window scale is known (handshake seen).
* ``capture_loss``: the far end ACKed bytes the capture never saw, one event a missing
  range (at the seq of the hole it showed as); counted in ``capture_loss_bytes``, never a
  network loss. The bytes are skipped (``gap_before``).
* ``reassembly_skip``: a hole given up on (buffer over ``MAX_BUF_BYTES`` or older than
  ``HOLE_TIMEOUT_NS``, or the connection ended with it open); the bytes are skipped.
* ``rst``: a RST segment (direction = the side that sent it).

Loss bursts: loss events (non-spurious retransmissions, holes filled by a retransmission)
of one direction belong to the same burst (one loss episode) while the cumulative ACK
has not passed the end of the flight that was in the air when the burst's first loss
was detected (or a later lost byte of the burst), and the previous loss is less than
1 s old. The burst length is the number of distinct lost segments (as originally sent,
when the capture saw them: one retransmission may carry several).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from parsers.records import (
    ACK,
    FIN,
    RST,
    SYN,
    ConnectionSummary,
    ResendPrompt,
    RttSample,
    RttSource,
    TcpEvent,
    TcpEventKind,
)
from parsers.tcp import _reassembly as ra
from parsers.tcp._flows import addr_str, make_conn_id, server_is_lo
from parsers.tcp._limits import (
    DUP_WINDOW_IPID_NS,
    DUP_WINDOW_NOID_NS,
    M32,
    MAX_BUF_BYTES,
    SIG_KEEP,
    STRAGGLER_SEQ,
    TOMBSTONE_NS,
    WINDOW_SLACK,
)
from parsers.tcp._losses import prompt_of
from parsers.tcp._state import (
    CLOSING,
    DONE,
    OPEN,
    Conn,
    Dir,
    Hole,
    ipid_sequential,
    packet_signature,
)

_SFR = SYN | FIN | RST


class RowLists:
    """A batch's columns as the per-packet path reads them, without the C extension:
    :meth:`take` gives the lists of rows ``order[a:z]`` (``_speedups.take_rows`` reads
    the same from the bulk path's records)."""

    def __init__(self, b, swap: np.ndarray, order: np.ndarray) -> None:
        self._order = order
        # in PacketPath._slow_rows' order; None: the row numbers themselves
        self._arrays = (
            b.ts_ns, b.frame_no, b.flags, b.seq, b.ack, b.window, b.payload_len, b.payload_wire_len,
            b.has_ts, b.ts_val, b.ts_ecr, b.ip_id, b.wscale, b.mss, b.payload_off, swap, None,
            b.ip_version,
        )  # fmt: skip

    def take(self, a: int, z: int) -> tuple[list, ...]:
        rows = self._order[a:z]
        return tuple(rows.tolist() if c is None else c[rows].tolist() for c in self._arrays)


def unwrap(v: int, ref: int) -> int:
    d = (v - ref) & M32
    if d >= 0x80000000:
        d -= 0x100000000
    return ref + d


def _sack_rel(R: Dir, blocks) -> list[tuple[int, int]]:
    """SACK blocks about R's data, relative to its first byte."""
    base, ref = R.base, R.ack_ref
    return [(unwrap(a, ref) - base, unwrap(b, ref) - base) for a, b in blocks]


def _is_dsack(rel: list[tuple[int, int]], arel: int) -> bool:
    """The first block is a D-SACK (RFC 2883): below the cumulative ACK, or inside the
    second block: the receiver got those bytes twice."""
    l0, r0 = rel[0]
    return r0 <= arel or (len(rel) > 1 and rel[1][0] <= l0 and r0 <= rel[1][1])


class PacketPath:
    """Mixin for :class:`TcpAnalyzer`: the per-packet state machine."""

    # attributes provided by TcpAnalyzer
    _table: dict
    _by_key: dict
    _tomb: dict
    _events: list
    _rtts: list
    _done: list
    _late: list
    _next_key: int
    _now: int
    run: bytes
    stats: dict
    _run_may_start: Callable[[Conn, int], bool]  # BulkPath's: may a bulk run start here?
    _bulk_ready: Callable[[Conn], bool]  # BulkPath's: may a bulk run start on this connection?

    # ------------------------------------------------------------------ connections

    def _new_conn(self, key6: tuple, src_is_lo: bool, fl: int, ts: int, ipv: int) -> Conn:
        if fl & SYN and not fl & ACK:
            client_is_lo, known = src_is_lo, True
        elif fl & SYN:
            client_is_lo, known = not src_is_lo, True
        else:
            client_is_lo, known = not server_is_lo(key6[2], key6[5]), False
        key = self._next_key
        self._next_key += 1
        conn = Conn(key, make_conn_id(key6, ts, self.run), key6, client_is_lo, known, ipv, ts)
        if not known:
            conn.hist.add("^")
        if not fl & SYN:
            conn.hist.add("~")  # window scale unknown: handshake not seen
        self._table[key6] = conn
        self._by_key[key] = conn
        self._tomb.pop(key6, None)
        return conn

    def _new_incarnation(self, conn: Conn, d: int, fl: int, seq: int) -> bool:
        """A SYN on a known 4-tuple: a retransmitted SYN, or a new connection?"""
        if not fl & ACK:
            return d != 0 or conn.dirs[0].isn != seq
        if d != 1:
            return True
        s = conn.dirs[1]
        if s.isn is not None:
            return s.isn != seq
        return conn.syn_n == 0

    def _straggler(self, key6: tuple, src_is_lo: bool, fl: int, seq: int, ts: int) -> bool:
        """A late packet of a connection that already finished (final ACK, RST, ...)."""
        t = self._tomb.get(key6)
        if t is None or fl & SYN:
            return False
        close_ts, seqs = t
        if ts - close_ts > TOMBSTONE_NS:
            del self._tomb[key6]
            return False
        ref = seqs[0 if src_is_lo else 1]
        if ref is None:
            return True
        return abs(unwrap(seq, ref) - ref) < STRAGGLER_SEQ

    # ------------------------------------------------------------------ per packet

    def _slow_rows(self, key6: tuple, cols: tuple[list, ...], b, out: list, mv, ready_after: int = 0) -> int:
        """Per-packet path over rows of batch ``b`` given as their columns (lists, see
        :class:`RowLists`). ``ready_after`` > 0: stop early, once that many rows are done,
        after the first row that leaves the connection ready for the bulk path again (and
        no verdict due). Returns the rows done."""
        ts_l, fr_l, fl_l, seq_l, ack_l, win_l, pl_l, wl_l, hts_l, tsv_l, tse_l, ipid_l, ws_l, \
            mss_l, off_l, sw_l, row_l, ipv_l = cols  # fmt: skip
        ipv = ipv_l[0]
        sack = b.sack
        conn = self._table.get(key6)
        done = len(row_l)
        for k in range(done):
            sk = sack.get(row_l[k]) if sack else None
            conn = self._packet(
                conn, key6, not sw_l[k], ts_l[k], fr_l[k], fl_l[k], seq_l[k], ack_l[k],
                win_l[k], pl_l[k], wl_l[k], hts_l[k], tsv_l[k], tse_l[k], ipid_l[k],
                ws_l[k], mss_l[k], off_l[k], sk, ipv, out, mv,
            )  # fmt: skip
            if ready_after and k + 1 >= ready_after and conn is not None and self._bulk_ready(conn):
                if self._run_may_start(conn, ts_l[k]):
                    done = k + 1
                    break
        self.stats["slow_rows"] += done
        return done

    def _packet(self, conn, key6, src_is_lo, ts, fr, fl, seq, ack, win, pl, wl, hts, tsv,
                tse, ipid, ws, mss, off, sk, ipv, out, mv):  # fmt: skip
        if ts > self._now:
            self._now = ts
        if conn is None or conn.state == DONE:
            conn = self._table.get(key6)
            if conn is None:
                if self._straggler(key6, src_is_lo, fl, seq, ts):
                    self.stats["stragglers"] += 1
                    return None
                conn = self._new_conn(key6, src_is_lo, fl, ts, ipv)
        elif fl & SYN:
            d0 = 0 if src_is_lo == conn.client_is_lo else 1
            if self._new_incarnation(conn, d0, fl, seq):
                self._finalize(conn, out, tomb=False)
                conn = self._new_conn(key6, src_is_lo, fl, ts, ipv)
        d = 0 if src_is_lo == conn.client_is_lo else 1
        D = conn.dirs[d]
        R = conn.dirs[1 - d]

        # capture duplicates: the same packet captured twice is not a retransmission
        if ipid > 0:
            dw = DUP_WINDOW_IPID_NS
        elif wl or hts:
            dw = DUP_WINDOW_NOID_NS
        else:
            dw = 0
        if dw:
            sig = packet_signature(ipid, seq, ack, fl, wl, win, tsv if hts else -1, sk)
            t0 = D.sigd.get(sig)
            if t0 is not None and 0 <= ts - t0 <= dw:
                D.dups += 1
                self.stats["duplicates"] += 1
                conn.hist.add_side("X", d)
                return conn
            D.sigd[sig] = ts
            D.sigq.append(sig)
            if len(D.sigq) > SIG_KEEP:
                D.sigd.pop(D.sigq.pop(0), None)

        if ts > conn.last_ns:
            conn.last_ns = ts
        D.pkts += 1
        tsv_u = None
        if hts:
            tsv_u = tsv if D.tsv_u is None else unwrap(tsv, D.tsv_u)
            if D.tsv_u is None or tsv_u > D.tsv_u:
                D.tsv_u = tsv_u

        if fl & RST:
            srel = unwrap(seq, D.seq_ref) - D.base if D.base is not None else 0
            if D.base is not None and abs(srel - D.hi) > WINDOW_SLACK:
                self.stats["out_of_window"] += 1  # not this connection's RST (stray / forged)
                return conn
            self._events.append(TcpEvent(ts, conn.key, d, TcpEventKind.RST, srel, 0, fr))
            conn.hist.add_side("R", d)
            conn.rst = True
            self._finalize(conn, out, tomb=True)
            return conn
        if fl & SYN:
            first = D.isn is None
            self._syn(conn, d, D, R, ts, fr, fl, seq, ack, win, ws, mss, tsv_u)
            if wl and first:  # TCP Fast Open: payload in the SYN starts the stream
                self._data(conn, d, D, R, ts, fr, fl & ~SYN, 0, wl, pl, off, mv, ipid, tsv_u, out)
            if fl & ACK and R.base is not None:  # a SYN/ACK acknowledging Fast Open data
                a_abs = unwrap(ack, R.ack_ref)
                if a_abs - R.base > R.acked:
                    R.ack_ref = a_abs
                    self._advance(conn, R, a_abs - R.base, ts, fr, hts, tse, out)
            return conn
        if D.base is None:
            D.base = D.seq_ref = D.ack_ref = seq
        seq_abs = unwrap(seq, D.seq_ref)
        if seq_abs > D.seq_ref:
            D.seq_ref = seq_abs
        srel = seq_abs - D.base
        if fl & ACK and R.base is not None:
            self._ack(conn, d, D, R, ts, fr, fl, ack, win, wl, srel, hts, tse, sk, out)
        if wl or fl & FIN:
            self._data(conn, d, D, R, ts, fr, fl, srel, wl, pl, off, mv, ipid, tsv_u, out)
        elif not conn.hist.has("A" if d == 0 else "a"):
            conn.hist.add_side("A", d)
        if D.holes or R.holes or D.pending_retx or R.pending_retx:
            self._timeouts(conn, ts, fr, out)
        if ipid >= 0:  # after the analysis: a late packet must not vouch for itself
            if D.ipid_last >= 0:
                delta = (ipid - D.ipid_last) & 0xFFFF
                if 0 < delta <= 64:
                    if delta > 1:
                        if ipid_sequential(D) and not (D.holes and D.holes[-1].frame == fr):
                            # packets the sender numbered between its last one and this
                            # never passed the capture point, and they carried no data
                            # this packet skips (that would be a hole: lost_segment): lost
                            # ACKs, or the first copy of what this packet resends
                            self._events.append(TcpEvent(ts, conn.key, d, TcpEventKind.UPSTREAM_LOSS, D.hi, delta - 1, fr,
                                                         (ts - D.ipid_last_ts) / 1e6))
                        D.ipid_gaps += 1
                    D.ipid_good += 1
                else:
                    D.ipid_bad += 1
            D.ipid_last = ipid
            D.ipid_last_ts = ts
        return conn

    # ------------------------------------------------------------------ handshake

    def _syn(self, conn, d, D, R, ts, fr, fl, seq, ack, win, ws, mss, tsv_u) -> None:
        if not fl & ACK:
            if D.isn is None:
                self._set_isn(D, seq, ws, mss)
                conn.syn_ts = ts
                conn.syn_n = 1
                conn.hist.add_side("S", d)
            else:
                conn.syn_n += 1
                self._syn_retx(conn, D, ts, fr, conn.syn_ts)
        else:
            if D.isn is None:
                self._set_isn(D, seq, ws, mss)
                conn.synack_ts = ts
                conn.synack_n = 1
                conn.hist.add_side("H", d)
                if conn.syn_ts is not None and conn.syn_n == 1:
                    # SYN -> SYN/ACK: capture point -> server -> capture point
                    self._rtt(conn, R, ts - conn.syn_ts, ts, RttSource.HANDSHAKE)
            else:
                conn.synack_n += 1
                self._syn_retx(conn, D, ts, fr, conn.synack_ts)
            if R.base is None:  # the client's SYN was not captured
                R.base = R.seq_ref = R.ack_ref = ack
            D.last_ack32 = ack
        D.last_win = win
        R.rwnd = win  # windows in SYN segments are never scaled
        R.rwnd_known = True
        if win > R.max_edge:
            R.max_edge = win
        if tsv_u is not None:
            D.tsq.add(tsv_u, ts, 0)
        self._update_ws(conn)

    @staticmethod
    def _set_isn(D: Dir, seq: int, ws: int, mss: int) -> None:
        D.isn = seq
        D.base = seq + 1
        D.seq_ref = seq + 1
        D.ack_ref = seq + 1
        D.ws_opt = ws
        D.mss = mss

    def _syn_retx(self, conn, D, ts, fr, t0) -> None:
        D.retx += 1
        conn.hist.add_side("T", D.idx)
        rec = (ts - t0) / 1e6 if t0 is not None else None
        self._events.append(TcpEvent(ts, conn.key, D.idx, TcpEventKind.RTO_RETRANSMISSION, 0, 0, fr, rec,
                                     prompt=ResendPrompt.TIMER))

    @staticmethod
    def _update_ws(conn: Conn) -> None:
        c, s = conn.dirs
        if c.isn is not None and s.isn is not None:
            both = c.ws_opt >= 0 and s.ws_opt >= 0
            c.ws = c.ws_opt if both else 0
            s.ws = s.ws_opt if both else 0
            c.ws_known = s.ws_known = True
        elif s.isn is not None:  # SYN/ACK only: its option tells whether scaling is on
            if s.ws_opt < 0:
                c.ws = s.ws = 0
                c.ws_known = s.ws_known = True
            else:
                s.ws = s.ws_opt
                s.ws_known = True
        elif c.isn is not None and c.ws_opt < 0:
            c.ws = s.ws = 0
            c.ws_known = s.ws_known = True

    # ------------------------------------------------------------------ ACK side

    def _ack(self, conn, d, D, R, ts, fr, fl, ack, win, wl, srel, hts, tse, sk, out) -> None:
        a_abs = unwrap(ack, R.ack_ref)
        arel = a_abs - R.base
        if arel > R.hi and R.max_edge and arel > max(R.max_edge, R.hi) + WINDOW_SLACK:
            # acknowledges more than the sender could have sent: a corrupt or stray packet
            self.stats["out_of_window"] += 1
            return
        rel = _sack_rel(R, sk) if sk else None  # read by the dup ACK check and _sack
        if (
            wl == 0
            and not fl & _SFR
            and win
            and win == D.last_win
            and ack == D.last_ack32
            and srel == D.hi + (D.fin is not None)
        ):
            if not R.keepalive:
                R.dupacks += 1
                R.n_dupacks += 1
                R.dupack_ts = ts
                if not (rel and _is_dsack(rel, arel)):
                    R.hole_dup_ts = ts  # a hole report, not a duplicate segment's echo
                self._events.append(TcpEvent(ts, conn.key, R.idx, TcpEventKind.DUP_ACK, arel, 0, fr))
        R.keepalive = False
        D.last_win = win
        D.last_ack32 = ack
        R.rwnd = win << D.ws
        R.rwnd_known = D.ws_known
        edge = arel + (R.rwnd if D.ws_known else R.rwnd << 14)  # unknown scale: at most 14
        if edge > R.max_edge:
            R.max_edge = edge
        if win == 0:
            if R.zw_since is None and not fl & _SFR:
                R.zw_since = ts
                R.zw_frame = fr
                R.zw_seq = arel
                R.zero_windows += 1
                conn.hist.add_side("W", d)
        elif R.zw_since is not None:
            self._zw_end(conn, R, ts)
        if not conn.hs_done and conn.synack_ts is not None and d == 0:
            conn.hs_done = True
            if conn.synack_n == 1 and arel >= 0:
                # SYN/ACK -> ACK: capture point -> client -> capture point
                self._rtt(conn, R, ts - conn.synack_ts, ts, RttSource.HANDSHAKE)
                if conn.syn_n == 1 and conn.syn_ts is not None:
                    conn.hs_rtt = ts - conn.syn_ts
        if rel:
            self._sack(conn, R, rel, arel, ts)
        if arel > R.acked:
            if a_abs > R.ack_ref:
                R.ack_ref = a_abs
            self._advance(conn, R, arel, ts, fr, hts, tse, out)

    def _zw_end(self, conn: Conn, R: Dir, ts: int | None) -> None:
        rec = None if ts is None else (ts - R.zw_since) / 1e6
        self._events.append(
            TcpEvent(R.zw_since, conn.key, R.idx, TcpEventKind.ZERO_WINDOW, R.zw_seq, 0, R.zw_frame, rec)
        )
        R.zw_since = None

    def _sack(self, conn: Conn, R: Dir, rel: list[tuple[int, int]], arel: int, ts: int) -> None:
        """The far end's SACK blocks about R's data (``rel``: relative, _sack_rel)."""
        l0, r0 = rel[0]
        if _is_dsack(rel, arel):
            # D-SACK (RFC 2883): the receiver got these bytes twice
            keep = []
            for p in R.pending_retx:
                if p.start < r0 and max(p.end, p.start + 1) > l0:
                    self._verdict(conn, R, p, True)
                else:
                    keep.append(p)
            R.pending_retx = keep
            rel = rel[1:]
        if rel:
            R.sacks = rel
            hi = max(r for _, r in rel)
            if hi > R.sack_hi:
                R.sack_hi = hi
            R.sack_ts = ts

    def _advance(self, conn, R, arel, ts, fr, hts, tse, out) -> None:
        """The far end's cumulative ACK for R's data moved forward to ``arel``."""
        data_ack = arel if R.fin is None else min(arel, R.fin)
        # the far end has bytes the capture never saw: capture loss, not network loss. One
        # event a missing range (the hole it showed as first: its lost_segment, same seq),
        # not one an ACK: an ACK past two holes leaves neither looking like network loss
        missed: list[tuple[int, int]] = []
        for h in R.holes:
            if h.start >= data_ack:
                break
            for m0, m1 in h.missing:
                if m0 < data_ack:
                    missed.append((m0, min(m1, data_ack) - m0))
        if data_ack > R.hi:
            missed.append((R.hi, data_ack - R.hi))
        if missed:
            for first, unseen in missed:
                R.cap_loss += unseen
                self._events.append(TcpEvent(ts, conn.key, R.idx, TcpEventKind.CAPTURE_LOSS, first, unseen, fr))
            conn.hist.add_side("G", R.idx)
            self._drop_holes_below(conn, R, data_ack)
            if data_ack > R.hi:
                R.hi = data_ack
            ra.drain(conn, R, ts, fr, out, upto=data_ack, own_times=True)
        if R.fin is None or R.acked < R.fin:  # the ACK of a FIN adds no payload offset
            R.acks.append(ts, data_ack)
        R.acked = arel
        R.progress_ts = ts
        R.dupacks = 0
        if R.sack_hi and arel >= R.sack_hi:
            R.sack_hi = 0
            R.sacks = []
        t0, _any_rx = R.segs.ack(data_ack)
        if t0 is not None:
            self._rtt(conn, R, ts - t0, ts, RttSource.DATA_ACK)
        e_u = None
        if hts and R.tsv_u is not None:
            e_u = unwrap(tse, R.tsv_u)
            t1 = R.tsq.echo(e_u, ts, data_ack)
            if t1 is not None:
                self._rtt(conn, R, ts - t1, ts, RttSource.TSECR)
        if R.pending_retx:
            keep = []
            for p in R.pending_retx:
                if arel > p.start and ts >= p.ts and p.covered_ts is None:
                    # Eifel (RFC 3522): the ACK echoes a TSval older than the retransmission
                    if e_u is not None and p.tsv is not None and e_u < p.tsv:
                        self._verdict(conn, R, p, True)
                        continue
                    # The ACK answers the retransmission, yet the original may only have been
                    # delayed (reordering past the capture point): its late arrival brings a
                    # D-SACK. Wait a little for it before calling the loss genuine.
                    p.covered_ts = ts
                keep.append(p)
            R.pending_retx = keep
        if R.burst_id is not None and arel >= R.burst_end:
            self._close_burst(R)
        if conn.state == CLOSING:
            self._maybe_closed(conn, out)

    def _rtt(self, conn: Conn, X: Dir, rtt_ns: int, ts: int, source: str) -> None:
        if rtt_ns < 0:
            return
        self._rtts.append(RttSample(ts, conn.key, X.idx, rtt_ns / 1e6, source))
        X.srtt = float(rtt_ns) if X.srtt is None else X.srtt * 0.875 + rtt_ns * 0.125
        if X.min_rtt is None or rtt_ns < X.min_rtt:
            X.min_rtt = rtt_ns

    # ------------------------------------------------------------------ data side

    def _data(self, conn, d, D, R, ts, fr, fl, srel, wl, pl, off, mv, ipid, tsv_u, out) -> None:
        erel = srel + wl
        if srel > D.hi and D.max_edge and srel > max(D.max_edge, D.hi) + WINDOW_SLACK:
            # far beyond any window the receiver offered: a corrupt or stray segment
            self.stats["out_of_window"] += 1
            return
        if fl & FIN:
            if D.fin is None:
                D.fin = erel
                conn.hist.add_side("F", d)
                if R.fin is not None and conn.state == OPEN:
                    conn.state = CLOSING
                    conn.closing_since = ts
            elif wl == 0 and srel == D.fin:
                self._retx_seen(conn, D, srel, srel + 1, 0, ts, fr, tsv_u)
                return
        if wl == 0:
            return
        if not conn.hist.has("D" if d == 0 else "d"):
            conn.hist.add_side("D", d)
        if wl <= 1 and srel == D.hi - 1 and D.acked >= D.hi and not D.holes:
            D.keepalive = True  # keep-alive probe: one old byte, nothing to deliver
            return
        if D.rwnd_known and D.rwnd is not None and erel >= D.acked + D.rwnd:
            self._events.append(TcpEvent(ts, conn.key, d, TcpEventKind.WINDOW_FULL, srel, wl, fr))
        if srel >= D.hi:
            if srel > D.hi:
                D.holes.append(Hole(D.hi, srel, ts, fr, ipid, tsv_u))
                conn.hist.add_side("L", d)
            D.segs.append(srel, erel, ts)
            self._set_hi(D, erel, ts, ipid, tsv_u)
        else:
            top = erel if erel < D.hi else D.hi
            new, hole = ra.new_bytes(D, srel, top)
            if new == 0:
                self._retx_seen(conn, D, srel, erel, wl, ts, fr, tsv_u)
            else:
                if new == top - srel and self._late_original(conn, D, hole, ts, ipid, tsv_u):
                    D.ooo += 1
                    conn.hist.add_side("O", d)
                    rec = (ts - hole.first_seen) / 1e6
                    self._events.append(
                        TcpEvent(ts, conn.key, d, TcpEventKind.OUT_OF_ORDER, srel, wl, fr, rec)
                    )
                    self._fill_holes(conn, D, srel, top, ts, None)
                    D.segs.append(srel, top, ts)
                else:
                    kind = self._retx_kind(conn, D, srel, ts, hole.first_seen)
                    burst = self._burst(conn, D, srel, erel, ts)
                    D.retx += 1
                    conn.hist.add_side("T", d)
                    rec = (ts - hole.first_seen) / 1e6
                    self._events.append(TcpEvent(ts, conn.key, d, kind, srel, wl, fr, rec, burst, prompt_of(kind)))
                    self._fill_holes(conn, D, srel, top, ts, burst)
                    D.segs.append(srel, top, ts, True)
            if erel > D.hi:
                D.segs.append(D.hi, erel, ts)
                self._set_hi(D, erel, ts, ipid, tsv_u)
        if tsv_u is not None:
            D.tsq.add(tsv_u, ts, srel)
        if pl:
            data = bytes(mv[off : off + pl])
        else:
            data = b""
        if pl < wl:
            conn.hist.add_side("C", d)
        if erel > D.nxt:
            if srel > D.nxt and not self._has_new(D, srel, erel):
                return  # every byte of it is buffered already
            ra.insert(conn, D, srel, srel + pl, erel, data, ts, fr, out)
            if D.buf_bytes > MAX_BUF_BYTES:
                self._skip_first_hole(conn, D, ts, fr, out)

    # ------------------------------------------------------------------ closing

    def _maybe_closed(self, conn: Conn, out: list | None) -> None:
        c, s = conn.dirs
        if c.fin is not None and s.fin is not None and c.acked > c.fin and s.acked > s.fin:
            self._finalize(conn, out, tomb=True)

    def _finalize(self, conn: Conn, out: list | None, tomb: bool) -> None:
        """The connection is over: flush everything pending, summarise, forget it."""
        if conn.state == DONE:
            return
        ts = conn.last_ns
        sink = out if out is not None else self._late
        for D in conn.dirs:
            if D.buf:
                # holes that can no longer be filled: deliver what is buffered after them
                end = max(x[2] for x in D.buf)
                gap = end - D.nxt - sum(x[1] - x[0] for x in D.buf)
                conn.hist.add_side("K", D.idx)
                self._events.append(
                    TcpEvent(ts, conn.key, D.idx, TcpEventKind.REASSEMBLY_SKIP, D.nxt, max(gap, 0), 0)
                )
                ra.drain(conn, D, ts, 0, sink, upto=end)
            for h in D.holes:
                self._resolve_hole(conn, D, h, None, None)
            D.holes = []
            for p in D.pending_retx:
                self._verdict(conn, D, p, False)
            D.pending_retx = []
            if D.zw_since is not None:
                self._zw_end(conn, D, None)
            if D.burst_id is not None:
                self._close_burst(D)
        conn.state = DONE
        if self._table.get(conn.tuple6) is conn:
            del self._table[conn.tuple6]
            if tomb:
                lo = conn.dirs[0 if conn.client_is_lo else 1]
                hi = conn.dirs[1 if conn.client_is_lo else 0]
                self._tomb[conn.tuple6] = (
                    ts,
                    tuple(None if x.base is None else x.seq_ref & M32 for x in (lo, hi)),
                )
        self._by_key.pop(conn.key, None)
        self._closed_info[conn.key] = self._ports(conn)
        self._done.append(self._summary(conn))

    _closed_info: dict

    @staticmethod
    def _ports(conn: Conn) -> tuple[int, int]:
        t = conn.tuple6
        return (t[2], t[5]) if conn.client_is_lo else (t[5], t[2])

    @staticmethod
    def _endpoints(conn: Conn) -> tuple[tuple[str, int], tuple[str, int]]:
        """((client address, port), (server address, port)) as the summary names them."""
        t = conn.tuple6
        lo = (addr_str(t[0], t[1]), t[2])
        hi = (addr_str(t[3], t[4]), t[5])
        return (lo, hi) if conn.client_is_lo else (hi, lo)

    def _summary(self, conn: Conn) -> ConnectionSummary:
        cl, sv = self._endpoints(conn)
        c, s = conn.dirs
        return ConnectionSummary(
            conn_key=conn.key,
            conn_id=conn.conn_id,
            client_addr=cl[0],
            client_port=cl[1],
            server_addr=sv[0],
            server_port=sv[1],
            client_known=conn.client_known,
            start_ns=conn.start_ns,
            end_ns=conn.last_ns,
            packets=(c.pkts, s.pkts),
            bytes=(c.hi, s.hi),
            syn_seen=conn.syn_n > 0 or conn.synack_n > 0,
            handshake_rtt_ms=None if conn.hs_rtt is None else conn.hs_rtt / 1e6,
            history=str(conn.hist),
            retransmissions=(c.retx, s.retx),
            loss_bursts=(c.bursts, s.bursts),
            longest_loss_burst=max(c.longest, s.longest),
            out_of_order=(c.ooo, s.ooo),
            zero_windows=(c.zero_windows, s.zero_windows),
            capture_loss_bytes=(c.cap_loss, s.cap_loss),
            ip_version=conn.ip_version,
            ack_progress=(c.acks.arrays(), s.acks.arrays()),
        )
