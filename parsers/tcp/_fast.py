"""Bulk path for clean runs of a connection's segments: numpy, or one C pass.

A run is *clean* when, for every row: no SYN/FIN/RST, ACK set, not cut by the
snaplen, no SACK option, window non-zero; data of each direction is exactly
contiguous (each segment starts where the previous one ended, pure ACKs sit at the
next sequence number); cumulative ACKs never go backwards, never cover bytes the
capture has not seen, and no pure ACK repeats the previous ACK and window (dup ACK).
The connection state must be clean too (no holes, buffer, unACKed retransmission, zero
window, FIN). For such rows the per-packet rules reduce to array operations:
delivery in order, ACK progress where the running ACK advances, data->ACK RTT samples
(the segment holding byte ack-1, once per segment) and TSecr samples (first echo of
each TSval), window-full checks against the forward-filled ACK and window of the far
end. The first row that breaks a rule ends the run; the per-packet path takes over
there, so both paths give the same result.

A run also ends before a packet whose IP id skips a few numbers while its side numbers
packets one by one (that packet records the loss upstream of the capture point), and
is not made when such a packet comes within ``min_rows`` rows (:meth:`BulkPath._bulk`).

With the C extension, ``_speedups.fast_run`` does the checks (the IP id one included)
and computes the same results in one loop over the run's rows (read as records laid out
in flow order by ``_speedups.pack_rows``); :meth:`BulkPath._fast_c` applies them to the
connection in the numpy code's order. The C run also takes what a loss past the capture
point brings: ACKs with SACK blocks (not a D-SACK, which may decide a verdict) and
duplicate ACKs (not a possible capture duplicate), keeping the SACK and dup-ACK state
the per-packet path keeps. And where the numpy run stops at the earliest time a verdict
on an ACKed retransmission can fall (the 200 ms D-SACK grace), the C run follows the
smoothed RTTs its own samples move, finds the very packet on which the per-packet path
gives the verdict (4 RTTs when that is longer) and hands out the retransmission's event
as of that packet, running on (a D-SACK, which could make it spurious, never happens
inside a run). Unlike the numpy run, the C run also takes retransmissions of bytes the
capture saw (not already ACKed or SACKed, not keep-alives or capture duplicates): their
kind from the state at their row and the smoothed RTTs folded row by row, the segments
they cover (Karn's rule: no data->ACK sample from an ACK that covers one), their TSvals;
:meth:`LossPath._resent` then gives each its loss burst and event, in row order, as the
per-packet path does. It runs on while they wait for their covering ACK and ends before
an ACK that echoes a TSval older than the resend's (the Eifel check makes it spurious:
per packet). The numpy code stays the fallback (pure-Python mode, and window scales
above 14).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from parsers._native import speedups
from parsers.records import (
    ACK,
    FIN,
    RST,
    SYN,
    ChunkRun,
    RttRun,
    RttSource,
    RunColumn,
    TcpEvent,
    TcpEventKind,
)
from parsers.tcp._analysis import RowLists
from parsers.tcp._limits import (
    DSACK_GRACE_NS,
    DUP_WINDOW_IPID_NS,
    DUP_WINDOW_NOID_NS,
    FAST_WIN_NS,
    PENDING_RETX_NS,
    RTO_MIN_NS,
    SIG_KEEP,
)
from parsers.tcp._losses import verdict_due
from parsers.tcp._state import Conn, Dir, packet_signature

# Optional C bulk runs and smoothed-RTT fold (parsers/tcp/_speedups.c); without them, or
# with TAILTAP_PURE_PYTHON=1, the numpy code and the Python loop give the same results.
_speedups = speedups("parsers.tcp")

_SFR = SYN | FIN | RST
# fast_run's resend kinds (RESEND_PLAIN, _FAST, _RTO)
_RESEND_KINDS = (TcpEventKind.RETRANSMISSION, TcpEventKind.FAST_RETRANSMISSION, TcpEventKind.RTO_RETRANSMISSION)
_M32 = np.int64(0xFFFFFFFF)
_H31 = np.int64(0x80000000)
_BIG = np.int64(1 << 62)
# RFC 7323's largest window scale: windows shifted by more (a bogus option) take the
# numpy path, whose Python ints do not overflow; the C path keeps values in int64.
_MAX_WS = 14
_RECORD_BYTES = 64  # one row as _speedups.pack_rows lays it out
# Column dtypes of _speedups.pack_rows, in its order (see _pack).
_C_TYPES = (np.uint8, np.int32, np.int32, np.uint16, np.bool_, np.bool_, np.uint32, np.uint32,
            np.int64, np.int64, np.bool_, np.uint32, np.uint32, np.int32, np.int64, np.int64,
            np.int8, np.int32, np.uint8)  # fmt: skip


def _unwrap(v: np.ndarray, ref: int) -> np.ndarray:
    """Unwrap 32-bit values to 64 bits, step by step from ``ref`` (exact while each
    step is below 2**31)."""
    d = np.empty(len(v), dtype=np.int64)
    d[0] = v[0] - (ref & 0xFFFFFFFF)
    d[1:] = v[1:] - v[:-1]
    d = ((d + _H31) & _M32) - _H31
    return ref + np.cumsum(d)


def _i64(raw: bytearray) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.int64)


def _c_state(D: Dir) -> tuple:
    """The Dir fields ``_speedups.fast_run`` reads, in its order (-1 for None); it writes
    the run's packet signatures to ``sigd`` and ``sigq`` when it takes a run. The segment
    and TSval logs go as their lists and the index their outstanding part starts at."""
    segs, tsq = D.segs, D.tsq
    return (
        D.base is not None, D.base or 0, D.seq_ref, D.hi, D.ack_ref, D.acked,
        -1 if D.last_ack32 is None else D.last_ack32, -1 if D.last_win is None else D.last_win,
        D.tsv_u is not None, D.tsv_u or 0, D.ipid_last, D.ws, D.ws_known, D.rwnd_known,
        int(_BIG) if D.rwnd is None else D.rwnd, segs.st, segs.en, segs.ts, segs.sampled_end, tsq.tv,
        tsq.t, tsq.s, tsq.last_echo, D.srtt, D.ipid_good, D.ipid_bad, D.ipid_gaps, D.sigd, D.sigq,
        segs.h, tsq.h, D.sack_hi, D.sack_ts, D.dupacks, D.dupack_ts, segs.rx, D.progress_ts, D.sacks,
    )  # fmt: skip


class BulkPath:
    """Mixin for :class:`TcpAnalyzer`."""

    _events: list
    _rtts: list
    stats: dict
    # the batch being fed: (segments, SACK mask, swap, flow order), and its rows as
    # fast_run records once a C run needs them
    _pack_args: tuple
    _packed: bytearray | None
    _pack_buf: bytearray
    _verdict: Callable[..., None]  # LossPath's
    _resent: Callable[..., None]  # LossPath's

    def _bulk(self, conn: Conn, window: np.ndarray, b, swap: np.ndarray, sackm: np.ndarray,
              mv, out: list, at: int, min_rows: int) -> tuple[int, int, int]:  # fmt: skip
        """A bulk run over the longest clean prefix of rows ``window`` (``order[at:]`` of
        the batch's flow grouping) that ends before the first packet with an IP id gap
        (see _before_ipid_gap) and before ``limit``: (rows taken, rows before that gap,
        limit), the gap looked for up to the limit. No run (0 rows) when the gap comes
        before ``min_rows``. The numpy run's limit is the earliest packet on which a
        verdict on a pending retransmission can fall (_before_verdict), and it makes no
        run when that is closer than ``min_rows``. The C run gives such verdicts itself,
        on the packets the per-packet path gives them, and runs on: its limit is the
        window's end, or a packet earlier in time than the one before it while a
        retransmission waits (however close)."""
        if _c_runs(conn):
            kw = self._fast_c(conn, window, b, swap, out, at, min_rows)
            if kw is not None:
                return kw
            if not conn.fast_ready():  # (the state only the C run takes): per packet
                return 0, len(window), len(window)
        limit = _before_verdict(conn, window, b)
        if limit < min_rows:
            return 0, limit, limit
        idx = window[:limit]
        w = _before_ipid_gap(conn, idx, b, swap)
        if w < min_rows:
            return 0, w, limit
        for D in conn.dirs:
            D.ipid_prev_run = D.ipid_last
        k = self._fast(conn, idx[:w], b, swap, sackm, mv, out, at)
        _note_run_ipids(conn, idx[:k], b, swap)
        return k, w, limit

    @staticmethod
    def _bulk_ready(conn: Conn) -> bool:
        """May a bulk run start on this connection now (Conn.fast_ready for the run that
        would be made: the C run also takes retransmissions waiting to be covered)?"""
        return conn.fast_ready(_c_runs(conn))

    @staticmethod
    def _run_may_start(conn: Conn, ts: int) -> bool:
        """May a bulk run start at a packet at ``ts`` of this (ready) connection? The C run
        gives the verdicts on retransmissions itself; the numpy one can only start before
        the earliest time one can fall."""
        if _c_runs(conn):
            return True
        due = verdict_due(conn)
        return due is None or ts <= due

    def _fast(self, conn: Conn, idx: np.ndarray, b, swap: np.ndarray, sackm: np.ndarray,
              mv, out: list, at: int) -> int:  # fmt: skip
        """Process the longest clean prefix of rows ``idx`` (``order[at:]`` of the batch's
        flow grouping) with numpy; returns its length."""
        n = len(idx)
        fl = b.flags[idx]
        wl = b.payload_wire_len[idx].astype(np.int64)
        win = b.window[idx].astype(np.int64)
        bad = ((fl & _SFR) != 0) | ((fl & ACK) == 0) | (wl != b.payload_len[idx]) | (win == 0)
        if sackm is not None:
            bad |= sackm[idx]
        dirv = swap[idx] == conn.client_is_lo  # True: server -> client
        seq = b.seq[idx].astype(np.int64)
        ack = b.ack[idx].astype(np.int64)
        P = (np.flatnonzero(~dirv), np.flatnonzero(dirv))
        per: list[dict | None] = [None, None]
        for d in (0, 1):
            D, R = conn.dirs[d], conn.dirs[1 - d]
            p = P[d]
            if not len(p):
                continue
            if D.base is None:  # first packet of this direction: per-packet path
                bad[p[0]] = True
                continue
            s_abs = _unwrap(seq[p], D.seq_ref)
            rel = s_abs - D.base
            w = wl[p]
            isdata = w > 0
            cnt = np.cumsum(isdata)
            ends = (rel + w)[isdata]
            hi_before = np.concatenate(([D.hi], ends))[cnt - isdata]
            bad[p[rel != hi_before]] = True
            x = {"p": p, "s_abs": s_abs, "rel": rel, "w": w, "isdata": isdata, "cnt": cnt,
                 "ends": ends}  # fmt: skip
            if R.base is not None:
                a32 = ack[p]
                a_abs = _unwrap(a32, R.ack_ref)
                a_rel = a_abs - R.base
                prev = np.concatenate(([R.acked], a_rel[:-1]))
                bad[p[a_rel < prev]] = True
                wd = win[p]
                la = -1 if D.last_ack32 is None else D.last_ack32
                lw = -1 if D.last_win is None else D.last_win
                dup = (
                    ~isdata
                    & (a32 == np.concatenate(([la], a32[:-1])))
                    & (wd == np.concatenate(([lw], wd[:-1])))
                )
                bad[p[dup]] = True
                x.update(a32=a32, a_abs=a_abs, a_rel=a_rel, wd=wd)
            per[d] = x
        # ACKs must not cover bytes the capture has not seen (that is capture loss)
        hi_pos: list[np.ndarray | None] = [None, None]
        for d in (0, 1):
            x = per[d]
            arr = np.full(n, conn.dirs[d].hi, dtype=np.int64)
            if x is not None:
                arr[x["p"][x["isdata"]]] = x["ends"]
            hi_pos[d] = np.maximum.accumulate(arr)
        for d in (0, 1):
            x = per[d]
            if x is not None and "a_rel" in x:
                bad[x["p"][x["a_rel"] > hi_pos[1 - d][x["p"]]]] = True
        bp = np.flatnonzero(bad)
        k = int(bp[0]) if len(bp) else n
        if k == 0:
            return 0

        # ---- apply the clean prefix [0, k)
        ts = b.ts_ns[idx[:k]]
        fr = b.frame_no[idx[:k]]
        key = conn.key
        kd = [0, 0]
        nd = [0, 0]
        for d in (0, 1):
            x = per[d]
            if x is None:
                continue
            kk = int(np.searchsorted(x["p"], k))
            kd[d] = kk
            if kk == 0:
                per[d] = None
                continue
            nd[d] = int(x["cnt"][kk - 1])
            for name in ("p", "s_abs", "rel", "w", "isdata", "a32", "a_abs", "a_rel", "wd"):
                if name in x:
                    x[name] = x[name][:kk]
            x["ends"] = x["ends"][: nd[d]]

        rwnd0 = [conn.dirs[0].rwnd, conn.dirs[1].rwnd]  # before this run's ACKs change them
        # sender side: sequence space, delivery, header memory
        chunk_pos: list[np.ndarray] = []
        chunk_dir: list[np.ndarray] = []
        chunk_rel: list[np.ndarray] = []
        new_segs: list[tuple | None] = [None, None]
        new_tsv: list[tuple | None] = [None, None]
        for d in (0, 1):
            x = per[d]
            if x is None:
                continue
            D, R = conn.dirs[d], conn.dirs[1 - d]
            p = x["p"]
            rows = idx[p]
            D.pkts += kd[d]
            last_abs = int(x["s_abs"][-1])
            if last_abs > D.seq_ref:
                D.seq_ref = last_abs
            isdata = x["isdata"]
            dts = ts[p]
            if nd[d]:
                dp = p[isdata]
                st = x["rel"][isdata]
                en = x["ends"]
                new_segs[d] = (st, en, dts[isdata])
                D.hi = D.nxt = int(en[-1])
                D.hi_ts = int(dts[isdata][-1])
                last_row = int(idx[dp[-1]])
                D.hi_ipid = int(b.ip_id[last_row])
                chunk_pos.append(dp)
                chunk_dir.append(np.full(len(dp), d, dtype=np.int64))
                chunk_rel.append(st)
            hts = b.has_ts[rows]
            if hts.any():
                tv = b.ts_val[rows].astype(np.int64)
                ref = D.tsv_u if D.tsv_u is not None else int(tv[np.argmax(hts)])
                tvh = tv[hts]
                tv_u = _unwrap(tvh, ref)
                mx = int(tv_u.max())
                if D.tsv_u is None or mx > D.tsv_u:
                    D.tsv_u = mx
                sel = isdata[hts]
                if nd[d] and sel.any():
                    new_tsv[d] = (tv_u[sel], dts[hts][sel], x["rel"][hts][sel])
                if nd[d]:
                    li = int(np.flatnonzero(isdata)[-1])
                    D.hi_tsv = int(tv_u[int(hts[: li + 1].sum()) - 1]) if hts[li] else None
            elif nd[d]:
                D.hi_tsv = None
            ipids = b.ip_id[rows].astype(np.int64)
            if ipids[0] >= 0:
                prev = np.concatenate(([D.ipid_last], ipids[:-1]))
                valid = prev >= 0
                delta = (ipids - prev) & 0xFFFF
                good = valid & (delta > 0) & (delta <= 64)
                ng = int(good.sum())
                D.ipid_good += ng
                D.ipid_bad += int(valid.sum()) - ng
                D.ipid_last = int(ipids[-1])
            if "a32" in x:
                D.last_ack32 = int(x["a32"][-1])
                D.last_win = int(x["wd"][-1])
                R.rwnd = D.last_win << D.ws
                R.rwnd_known = D.ws_known
                edge = int((x["a_rel"] + ((x["wd"] << D.ws) << (0 if D.ws_known else 14))).max())
                if edge > R.max_edge:
                    R.max_edge = edge
            self._sigs(D, rows[-SIG_KEEP:], b)
        _note_run_history(conn, idx[:k], b, swap)

        # window full: data reaching the far end's advertised window
        for d in (0, 1):
            x = per[d]
            D, R = conn.dirs[d], conn.dirs[1 - d]
            if x is None or not nd[d] or not D.rwnd_known:
                continue
            y = per[1 - d]
            dp = x["p"][x["isdata"]]
            if y is not None and "a_rel" in y:
                arr = np.full(k, D.acked, dtype=np.int64)
                arr[y["p"]] = y["a_rel"]
                acked_pos = np.maximum.accumulate(arr)[dp]
                li = np.full(k, -1, dtype=np.int64)
                li[y["p"]] = np.arange(len(y["p"]))
                li = np.maximum.accumulate(li)[dp]
                wy = y["wd"] << R.ws
                rw0 = _BIG if rwnd0[d] is None else rwnd0[d]
                rw = np.where(li >= 0, wy[np.maximum(li, 0)], rw0)
            else:
                acked_pos = D.acked
                rw = _BIG if rwnd0[d] is None else rwnd0[d]
            full = x["ends"] >= acked_pos + rw
            if full.any():
                for j in np.flatnonzero(full).tolist():
                    pos = int(dp[j])
                    s = int(x["rel"][x["isdata"]][j])
                    self._events.append(
                        TcpEvent(int(ts[pos]), key, d, TcpEventKind.WINDOW_FULL, s,
                                 int(x["ends"][j]) - s, int(fr[pos]))
                    )  # fmt: skip

        # far-end side: ACK progress, RTT samples, TSecr samples
        for d in (0, 1):
            y = per[1 - d]  # rows of the other side carry the ACKs for d's data
            X = conn.dirs[d]
            segs_new = new_segs[d]
            if y is None or "a_rel" not in y:
                if segs_new is not None:
                    self._seg_extend(X, segs_new)
                if new_tsv[d] is not None:
                    self._tsq_extend(key, X, new_tsv[d], None, None, None)
                continue
            a_rel = y["a_rel"]
            prev = np.concatenate(([X.acked], a_rel[:-1]))
            adv = a_rel > prev
            if not adv.any():
                if segs_new is not None:
                    self._seg_extend(X, segs_new)
                if new_tsv[d] is not None:
                    self._tsq_extend(key, X, new_tsv[d], None, None, None)
                continue
            A = a_rel[adv]
            ya = y["p"][adv]
            TA = ts[ya]
            _ack_progress(X, TA, A, int(y["a_abs"][-1]))
            samples = self._seg_ack(conn, X, segs_new, A, TA)
            ts_samples = None
            yrows = idx[ya]
            yh = b.has_ts[yrows]
            if yh.any() and X.tsv_u is not None:
                te = b.ts_ecr[yrows][yh].astype(np.int64)
                e_u = _unwrap(te, X.tsv_u)
                ts_samples = self._tsq_extend(key, X, new_tsv[d], e_u, TA[yh], A[yh])
            elif new_tsv[d] is not None:
                self._tsq_extend(key, X, new_tsv[d], None, None, None)
            if samples is not None or ts_samples is not None:
                self._fast_srtt(X, samples, ts_samples)
            if X.burst_id is not None and X.acked >= X.burst_end:
                self._close_burst(X)

        # in-order payload, in capture order
        if chunk_pos:
            cp = np.concatenate(chunk_pos)
            cd = np.concatenate(chunk_dir)
            cr = np.concatenate(chunk_rel)
            if len(chunk_pos) > 1:
                o = np.argsort(cp, kind="stable")
                cp, cd, cr = cp[o], cd[o], cr[o]
            rows = idx[cp]
            # columns over the batch buffer, not an object and a bytes copy per packet
            run = np.empty((len(cp), len(RunColumn)), dtype=np.int64)
            run[:, RunColumn.DIRECTION] = cd
            run[:, RunColumn.TS_NS] = ts[cp]
            run[:, RunColumn.FRAME_NO] = fr[cp]
            run[:, RunColumn.STREAM_OFFSET] = cr
            run[:, RunColumn.START] = b.payload_off[rows]
            run[:, RunColumn.END] = run[:, RunColumn.START] + b.payload_len[rows]
            out.append(ChunkRun(key, run, b.buf))
        return self._ran(conn, int(ts.max()), k)

    def _fast_c(self, conn: Conn, idx: np.ndarray, b, swap: np.ndarray, out: list, at: int,
                min_rows: int) -> tuple[int, int, int] | None:  # fmt: skip
        """:meth:`_bulk` through ``_speedups.fast_run``: the numpy run's checks (IP id gap
        included) and results, computed in one C pass, which also takes SACK blocks and
        duplicate ACKs and gives the verdicts on ACKed retransmissions that fall in the
        run; this applies them in the numpy code's order. None when the C pass declines (a
        segment log out of end order)."""
        assert _speedups is not None
        waiting = [(D, p) for D in conn.dirs for p in D.pending_retx]
        pending = [(p.ts, -1 if p.covered_ts is None else p.covered_ts, p.start, p.tsv, D.idx) for D, p in waiting]
        ran = _speedups.fast_run(
            self._records(), at, len(idx), conn.client_is_lo, _c_state(conn.dirs[0]),
            _c_state(conn.dirs[1]), SIG_KEEP, min_rows, b.sack or None,
            (DUP_WINDOW_IPID_NS, DUP_WINDOW_NOID_NS),
            (pending, conn.hs_rtt, PENDING_RETX_NS, DSACK_GRACE_NS, (FAST_WIN_NS, RTO_MIN_NS)),
        )  # fmt: skip
        if ran is None:
            return None
        k, chunks, *res, w, limit, verdicts, covered, resends = ran
        if k == 0:
            return 0, w, limit
        key = conn.key
        for d in (0, 1):  # sender side: sequence space, header memory
            x = res[d]
            if not x["kd"]:
                continue
            D, R = conn.dirs[d], conn.dirs[1 - d]
            D.pkts += x["kd"]
            if x["s_abs"] > D.seq_ref:
                D.seq_ref = x["s_abs"]
            nd = x["nd"]
            if nd:
                D.hi = D.nxt = x["hi"]
                D.hi_ts = x["hi_ts"]
                D.hi_ipid = x["hi_ipid"]
            if x["any_ts"]:
                mx = x["tsv_max"]
                if D.tsv_u is None or mx > D.tsv_u:
                    D.tsv_u = mx
                if nd:
                    D.hi_tsv = x["hi_tsv"] if x["hi_tsv_known"] else None
            elif nd:
                D.hi_tsv = None
            if x["ipid_on"]:
                D.ipid_gaps += x["ipid_gaps"]  # (steps from a known IP id only)
                D.ipid_last_ts = x["ipid_ts"]
                D.ipid_good += x["ipid_good"]
                D.ipid_bad += x["ipid_bad"]
                D.ipid_last = x["ipid_last"]
            if x["any_a32"]:
                D.last_ack32 = x["last_a32"]
                D.last_win = x["last_wd"]
                R.rwnd = D.last_win << D.ws
                R.rwnd_known = D.ws_known
                if x["max_edge"] > R.max_edge:
                    R.max_edge = x["max_edge"]
            # (the run's last packets' signatures are in D.sigd / sigq already, as _sigs)
        _note_run_history(conn, idx[:k], b, swap, [(x[1], x[0]) for x in resends])
        for d, _row, s, e, t, fr, tsv, kind, t_orig, acked, hi, starts in resends:  # in row order
            D = conn.dirs[d]
            D.retx += 1
            self._resent(conn, D, s, e, e - s, t, fr, tsv, _RESEND_KINDS[kind], t_orig, starts, acked, hi)
            waiting.append((D, D.pending_retx[-1]))
        for d in (0, 1):  # window full: data reaching the far end's advertised window
            x = res[d]
            if len(x["wf_pos"]) and conn.dirs[d].rwnd_known:  # (new data or resends)
                for pos, s, nb in zip(_i64(x["wf_pos"]).tolist(), _i64(x["wf_s"]).tolist(),
                                      _i64(x["wf_n"]).tolist(), strict=True):  # fmt: skip
                    row = int(idx[pos])
                    self._events.append(TcpEvent(int(b.ts_ns[row]), key, d, TcpEventKind.WINDOW_FULL, s, nb,
                                                 int(b.frame_no[row])))  # fmt: skip
        resent = {r[0] for r in resends}
        for d in (0, 1):  # far-end side: ACK progress, RTT samples, TSecr samples
            x = res[d]
            X = conn.dirs[d]
            A = _i64(x["A"])
            new_tsv = x["new_tv"] > 0
            if not x["far_rows"] or not len(A):
                # new segments, or resends that marked logged ones retransmitted (Karn: a
                # later ACK of them, however it is read, gives no sample)
                if x["nd"] or d in resent:
                    X.segs.set_lists(x["st"], x["en"], x["t"], x["rx"])
                if new_tsv:
                    X.tsq.set_lists(x["tv"], x["tt"], x["ts"], x["last_echo"])
                continue
            TA = _i64(x["TA"])
            _ack_progress(X, TA, A, x["far_a_abs"])
            X.segs.set_lists(x["st"], x["en"], x["t"], x["rx"])
            X.segs.sampled_end = x["sampled_end"]
            if len(x["smp_t"]):
                rtt = _i64(x["smp_v"]) / 1e6
                self._rtts.append(RttRun(key, X.idx, _i64(x["smp_t"]), rtt, RttSource.DATA_ACK))
            if x["e_on"] or new_tsv:
                X.tsq.set_lists(x["tv"], x["tt"], x["ts"], x["last_echo"])
            if len(x["tsmp_t"]):
                rtt = _i64(x["tsmp_v"]) / 1e6
                self._rtts.append(RttRun(key, X.idx, _i64(x["tsmp_t"]), rtt, RttSource.TSECR))
            if len(x["smp_t"]) or len(x["tsmp_t"]):  # smoothed/min RTT, as _fast_srtt
                X.srtt = x["srtt"]
                if X.min_rtt is None or x["min_rtt"] < X.min_rtt:
                    X.min_rtt = x["min_rtt"]
            if X.burst_id is not None and X.acked >= X.burst_end:
                self._close_burst(X)
        for d in (0, 1):  # SACK blocks and duplicate ACKs (after _ack_progress: as the rows left them)
            x = res[d]
            X = conn.dirs[d]
            if x["sacks"] is not None:
                X.sacks = x["sacks"]
            X.sack_hi, X.sack_ts = x["sack_hi"], x["sack_ts"]
            if x["dupack_ts"] > X.dupack_ts:  # the run's dup ACKs report holes (a D-SACK goes per packet)
                X.hole_dup_ts = x["dupack_ts"]
            X.dupacks, X.dupack_ts = x["dupacks"], x["dupack_ts"]
            if x["dup_pos"]:
                rows = idx[_i64(x["dup_pos"])]
                X.n_dupacks += len(rows)
                for t, arel, fr in zip(b.ts_ns[rows].tolist(), _i64(x["dup_arel"]).tolist(),
                                       b.frame_no[rows].tolist(), strict=True):  # fmt: skip
                    self._events.append(TcpEvent(t, key, d, TcpEventKind.DUP_ACK, arel, 0, fr))
        for (_, p), t in zip(waiting, covered, strict=True):  # retransmissions the run's ACKs covered
            if p.covered_ts is None and t >= 0:
                p.covered_ts = t
        for q, _row in verdicts:  # genuine losses: the retransmission's event is handed out
            D, p = waiting[q]
            D.pending_retx.remove(p)
            self._verdict(conn, D, p, False)
        if len(chunks):
            out.append(ChunkRun(key, _i64(chunks).reshape(-1, len(RunColumn)), b.buf))
        return self._ran(conn, int(b.ts_ns[idx[:k]].max()), k), w, limit

    def _ran(self, conn: Conn, last: int, k: int) -> int:
        """A bulk run of ``k`` rows whose latest time is ``last`` was applied: the
        connection's and the analyzer's clocks move on (to the latest, as packet by packet:
        the run's last row may be earlier when the capture's clock stepped back). Returns
        ``k``."""
        if last > conn.last_ns:
            conn.last_ns = last
        if last > self._now:
            self._now = last
        self.stats["fast_rows"] += k
        return k

    def _take_rows(self, a: int, z: int) -> tuple[list, ...]:
        """Rows ``order[a:z]`` of the batch as the per-packet path reads them (lists): in
        C from the records, where a connection's rows are one sequential read (in the
        columns, a cache miss per column and row)."""
        if _speedups is not None:
            return _speedups.take_rows(self._records(), a, z)
        b, _sackm, swap, order = self._pack_args
        return RowLists(b, swap, order).take(a, z)

    def _records(self) -> bytearray:
        """The batch's rows as records (packed at the first use in the batch)."""
        if self._packed is None:
            self._packed = self._pack()
        return self._packed

    def _pack(self) -> bytearray:
        """The batch's rows in flow order as ``fast_run`` records (see _speedups.c), in
        a buffer kept from batch to batch (fresh memory costs a page fault per page)."""
        assert _speedups is not None
        b, sackm, swap, order = self._pack_args
        size = len(order) * _RECORD_BYTES
        if len(self._pack_buf) < size:
            self._pack_buf = bytearray(size)
        cols = tuple(
            None if a is None else np.ascontiguousarray(a, dtype=t)
            for a, t in zip((b.flags, b.payload_wire_len, b.payload_len, b.window, sackm, swap,
                             b.seq, b.ack, b.ts_ns, b.frame_no, b.has_ts, b.ts_val, b.ts_ecr,
                             b.ip_id, b.payload_off, order, b.wscale, b.mss, b.ip_version), _C_TYPES,
                            strict=True)
        )  # fmt: skip
        _speedups.pack_rows(cols, self._pack_buf)
        return self._pack_buf

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _fast_srtt(X: Dir, samples, ts_samples) -> None:
        """Smoothed/min RTT from this run's samples, in the per-packet path's order
        (time, then data->ACK before TSecr for the same ACK) so both paths agree."""
        parts = [p for p in (samples, ts_samples) if p is not None]
        t = np.concatenate([p[0] for p in parts])
        v = np.concatenate([p[1] for p in parts])
        kind = np.concatenate([np.full(len(p[0]), i) for i, p in enumerate(parts)])
        ordered = v[np.lexsort((kind, t))]
        if _speedups is not None and ordered.dtype == np.int64:
            X.srtt = _speedups.ewma(X.srtt, np.ascontiguousarray(ordered))
        else:
            srtt = X.srtt
            for r in ordered.tolist():
                srtt = float(r) if srtt is None else srtt * 0.875 + r * 0.125
            X.srtt = srtt
        m = int(ordered.min()) if ordered.dtype.kind == "i" else ordered.min().item()
        if X.min_rtt is None or m < X.min_rtt:
            X.min_rtt = m

    @staticmethod
    def _seg_extend(X: Dir, segs_new: tuple) -> None:
        st0, en0, ts0 = X.segs.arrays()
        st, en, t = segs_new
        X.segs.set_arrays(np.concatenate((st0, st)), np.concatenate((en0, en)),
                          np.concatenate((ts0, t)))  # fmt: skip

    def _seg_ack(self, conn: Conn, X: Dir, segs_new, A: np.ndarray, TA: np.ndarray):
        """data->ACK RTT samples (segment holding byte ack-1, first ACK reaching it)."""
        st, en, t = X.segs.arrays()
        if segs_new is not None:
            st = np.concatenate((st, segs_new[0]))
            en = np.concatenate((en, segs_new[1]))
            t = np.concatenate((t, segs_new[2]))
        out = None
        if len(en):
            j = np.searchsorted(en, A, side="left")
            ok = j < len(en)
            jj = np.minimum(j, len(en) - 1)
            ok &= (st[jj] < A) & (t[jj] <= TA) & (en[jj] > X.segs.sampled_end)
            first = np.ones(len(jj), dtype=bool)
            first[1:] = jj[1:] != jj[:-1]
            ok &= first
            if ok.any():
                js = jj[ok]
                out = (TA[ok], TA[ok] - t[js])
                X.segs.sampled_end = int(en[js[-1]])
                self._rtts.append(RttRun(conn.key, X.idx, TA[ok], out[1] / 1e6, RttSource.DATA_ACK))
            keep = en > X.acked
            st, en, t = st[keep], en[keep], t[keep]
        sampled = X.segs.sampled_end
        X.segs.set_arrays(st, en, t)
        X.segs.sampled_end = sampled
        return out

    def _tsq_extend(self, key: int, X: Dir, new, e_u: np.ndarray | None,
                    te_ts: np.ndarray | None, acks: np.ndarray | None):  # fmt: skip
        """Add new TSvals (first occurrences) and match echoes; returns RTT samples."""
        q = X.tsq
        tv, tt, ts_ = q.arrays()
        last_echo = q.last_echo
        if new is not None:
            ntv, ntt, nst = new
            prev_max = np.maximum.accumulate(np.concatenate(([tv[-1] if len(tv) else -1], ntv)))
            firsts = (ntv > prev_max[:-1]) & (ntv > last_echo)
            tv = np.concatenate((tv, ntv[firsts]))
            tt = np.concatenate((tt, ntt[firsts]))
            ts_ = np.concatenate((ts_, nst[firsts]))
        out = None
        if e_u is not None and len(e_u):
            run = np.maximum.accumulate(np.concatenate(([last_echo], e_u)))
            first = e_u > run[:-1]
            n = len(tv)
            if first.any() and n:
                e = e_u[first]
                et = te_ts[first]
                kk = np.searchsorted(tv, e)
                kc = np.minimum(kk, n - 1)
                nxt = np.minimum(kc + 1, n - 1)
                # nothing first sent with a newer TSval below the ACK (see TsLog)
                later_ok = (kc + 1 >= n) | (ts_[nxt] >= acks[first])
                ok = (kk < n) & (tv[kc] == e) & (tt[kc] <= et) & later_ok
                if ok.any():
                    out = (et[ok], et[ok] - tt[kc[ok]])
                    self._rtts.append(RttRun(key, X.idx, et[ok], out[1] / 1e6, RttSource.TSECR))
            last_echo = max(last_echo, int(run[-1]))
        keep = tv > last_echo
        q.set_arrays(tv[keep], tt[keep], ts_[keep], last_echo)
        return out

    @staticmethod
    def _sigs(D: Dir, r: np.ndarray, b) -> None:
        """Remember the signatures of rows ``r`` (a direction's last packets, at most
        SIG_KEEP) for capture-duplicate detection."""
        m = len(r)
        ipid = b.ip_id[r].tolist()
        seq = b.seq[r].tolist()
        ack = b.ack[r].tolist()
        fl = b.flags[r].tolist()
        wl = b.payload_wire_len[r].tolist()
        win = b.window[r].tolist()
        hts = b.has_ts[r].tolist()
        tsv = b.ts_val[r].tolist()
        tl = b.ts_ns[r].tolist()
        sigd, sigq = D.sigd, D.sigq
        for i in range(m):
            if ipid[i] > 0 or wl[i] or hts[i]:
                sig = packet_signature(ipid[i], seq[i], ack[i], fl[i], wl[i], win[i], tsv[i] if hts[i] else -1, None)  # (no SACK in a run)
                sigd[sig] = tl[i]
                sigq.append(sig)
                if len(sigq) > SIG_KEEP:
                    sigd.pop(sigq.pop(0), None)


def _ipid_steps(D, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For one direction's packets ``ids`` (in order): each step's delta class as the
    per-packet path counts it: (valid, good: 1-64, gap: 2-64)."""
    mine = ids.astype(np.int64)
    prev = np.concatenate(([D.ipid_last], mine[:-1]))
    valid = (mine >= 0) & (prev >= 0)
    delta = (mine - prev) & 0xFFFF
    good = valid & (delta > 0) & (delta <= 64)
    return valid, good, good & (delta >= 2)


def _c_runs(conn: Conn) -> bool:
    """Do this connection's bulk runs go through ``_speedups.fast_run`` (built, and window
    scales it takes)? Else the numpy run."""
    c, s = conn.dirs
    return _speedups is not None and c.ws <= _MAX_WS and s.ws <= _MAX_WS


def _before_verdict(conn: Conn, window: np.ndarray, b) -> int:
    """How many rows of ``window`` come before the first on which a verdict on a pending
    retransmission can fall (all of them when none can)."""
    due = verdict_due(conn)
    if due is not None:
        late = np.flatnonzero(b.ts_ns[window] > due)
        if len(late):
            return int(late[0])
    return len(window)


def _before_ipid_gap(conn, rows: np.ndarray, b, swap: np.ndarray) -> int:
    """How many of ``rows`` come before the first packet whose IP id skips 2-64 numbers
    while its direction's sender numbers packets one by one (counted as the per-packet
    path counts, packet by packet): that packet is the per-packet path's, which records
    the packets lost upstream of the capture point."""
    ids = b.ip_id[rows]
    cut = len(rows)
    server_to_client = swap[rows] == conn.client_is_lo
    for d in (0, 1):
        D = conn.dirs[d]
        p = np.flatnonzero(server_to_client) if d else np.flatnonzero(~server_to_client)
        if not len(p) or ids[p[0]] < 0:
            continue
        valid, good, gap = _ipid_steps(D, ids[p])
        if not gap.any():
            continue
        # the counters before each packet, as ipid_sequential reads them
        n_good = D.ipid_good + np.concatenate(([0], np.cumsum(good)[:-1]))
        n_bad = D.ipid_bad + np.concatenate(([0], np.cumsum(valid & ~good)[:-1]))
        n_gap = D.ipid_gaps + np.concatenate(([0], np.cumsum(gap)[:-1]))
        hit = np.flatnonzero(gap & (n_good >= 32) & (n_bad * 5 <= n_good) & (n_gap * 8 <= n_good))
        if len(hit):
            cut = min(cut, int(p[hit[0]]))
    return cut


_RUN_LETTERS = (("A", 0), ("D", 0), ("A", 1), ("D", 1))


def _note_run_history(conn, rows: np.ndarray, b, swap: np.ndarray, resent: list[tuple[int, int]] = ()) -> None:
    """The history letters a bulk run's rows add (a side's first pure ACK, its first
    data; ``resent``: (row, side) of the C run's resends, a "T" each), in the order of
    their rows, as the per-packet path adds them."""
    hist = conn.hist
    letters = [(r, "T", d) for r, d in resent]
    seen = hist.counts  # (a connection usually has both sides' data and pure ACKs already)
    if not ("A" in seen and "D" in seen and "a" in seen and "d" in seen):
        letters += _first_letters(conn, rows, b, swap)
    for _, ch, d in sorted(letters):
        hist.add_side(ch, d)


def _first_letters(conn, rows: np.ndarray, b, swap: np.ndarray) -> list[tuple[int, str, int]]:
    """(row, letter, side) of the first pure ACK and first data of each side among
    ``rows`` whose letter the history does not have yet."""
    hist = conn.hist
    missing = [(ch, d) for ch, d in _RUN_LETTERS if not hist.has(ch if d == 0 else ch.lower())]
    if not missing:
        return []
    from_server = swap[rows] == conn.client_is_lo
    data = b.payload_wire_len[rows] > 0
    firsts = []
    for ch, d in missing:
        hit = np.flatnonzero((from_server if d else ~from_server) & (data if ch == "D" else ~data))
        if len(hit):
            firsts.append((int(hit[0]), ch, d))
    return firsts


def _note_run_ipids(conn, rows: np.ndarray, b, swap: np.ndarray) -> None:
    """After a bulk run: its IP id steps of 2-64 (counted as the per-packet path counts
    them), and when each direction's last packet was."""
    if not len(rows):
        return
    server_to_client = swap[rows] == conn.client_is_lo
    for d in (0, 1):
        p = np.flatnonzero(server_to_client if d else ~server_to_client)
        if not len(p):
            continue
        D = conn.dirs[d]
        ids = b.ip_id[rows[p]]
        if ids[0] < 0:
            continue
        # ipid_last already moved on to the run's last packet: count from the one before
        # (none known before the run's first packet: its later steps count all the same)
        mine = ids.astype(np.int64)
        prev = np.concatenate(([D.ipid_prev_run], mine[:-1]))
        delta = (mine - prev) & 0xFFFF
        D.ipid_gaps += int(((mine >= 0) & (prev >= 0) & (delta >= 2) & (delta <= 64)).sum())
        D.ipid_last_ts = int(b.ts_ns[rows[p[-1]]])


def _ack_progress(X, ack_ts: np.ndarray, acked: np.ndarray, last_abs: int) -> None:
    """The far end's ACKs advanced direction ``X`` to ``acked`` (relative offsets, at
    ``ack_ts``; ``last_abs``: the last one's raw number): log them, move the ACK state on,
    and forget SACK blocks below the new cumulative ACK."""
    X.acks.extend(ack_ts, acked)
    if last_abs > X.ack_ref:
        X.ack_ref = last_abs
    X.acked = int(acked[-1])
    X.progress_ts = int(ack_ts[-1])
    X.dupacks = 0
    if X.sack_hi and X.acked >= X.sack_hi:
        X.sack_hi = 0
        X.sacks = []
