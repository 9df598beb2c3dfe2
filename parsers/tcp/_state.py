"""Per-connection and per-direction state (plain slotted classes, no logic).

Naming: a :class:`Dir` is one direction of data (the *sender's* sequence space).
Fields are grouped by who writes them:

* "as sender": what this side's own packets tell (sequence space, reassembly,
  TSvals, IP IDs, the ACK/window values *it* last sent, for dup-ACK detection);
* "as acknowledged": what the far end's packets tell about this direction's data
  (cumulative ACK, dup ACKs, SACK, advertised window, zero window).
"""

from __future__ import annotations

import struct

from parsers.tcp._history import History
from parsers.tcp._logs import AckLog, SegLog, TsLog

OPEN, CLOSING, DONE = 0, 1, 2

_SIGNATURE_HEAD = struct.Struct("<7q")  # the seven fields of packet_signature()


def packet_signature(
    ipid: int,
    seq: int,
    ack: int,
    flags: int,
    wire_len: int,
    window: int,
    tsval: int,
    sack_blocks: list[tuple[int, int]] | None,
) -> bytes:
    """What a packet and its capture duplicate share (Dir.sigd's key): IP ID, seq, ack,
    flags, wire payload length, window, TSval (-1: none) and the SACK blocks, each a
    little-endian int64. Bytes, not a tuple of ints: a direction keeps SIG_KEEP of them
    and a capture may hold tens of thousands of open directions (a tuple and its seven
    ints took ~300 bytes, these ~90). The C fast path (row_sig in _speedups.c) builds the
    same bytes."""
    head = _SIGNATURE_HEAD.pack(ipid, seq, ack, flags, wire_len, window, tsval)
    if not sack_blocks:
        return head
    return head + struct.pack(
        f"<{2 * len(sack_blocks)}q", *(v for block in sack_blocks for v in block)
    )


class Hole:
    """A range of sequence space below the highest byte seen that the capture has not
    seen (yet). ``missing`` keeps the sub-ranges still missing."""

    __slots__ = ("start", "end", "missing", "first_seen", "frame", "ev_ipid", "ev_tsv", "retx")

    def __init__(self, start: int, end: int, first_seen: int, frame: int, ev_ipid: int, ev_tsv):
        self.start = start
        self.end = end
        self.missing: list[list[int]] = [[start, end]]
        self.first_seen = first_seen
        self.frame = frame
        self.ev_ipid = ev_ipid  # IP ID / TSval of the packet that revealed the hole
        self.ev_tsv = ev_tsv
        self.retx = False  # filled (partly) by a retransmission, not a late original


class PendingRetx:
    """A retransmission of bytes the capture saw before, waiting for the verdict
    "spurious or not" (D-SACK, Eifel TSecr check, or time-out)."""

    __slots__ = ("event", "start", "end", "ts", "tsv", "burst", "covered_ts")

    def __init__(self, event, start: int, end: int, ts: int, tsv, burst):
        self.covered_ts: int | None = None  # when the cumulative ACK covered it (Eifel: genuine)
        self.event = event
        self.start = start
        self.end = end
        self.ts = ts
        self.tsv = tsv
        self.burst = burst


class Dir:
    __slots__ = (
        "idx",
        # as sender
        "base", "seq_ref", "isn", "hi", "nxt", "fin", "buf", "buf_bytes", "holes",
        "pending_gap", "segs", "tsq", "tsv_u", "ipid_last", "ipid_good", "ipid_bad", "ipid_gaps",
        "ipid_last_ts", "ipid_prev_run",
        "hi_ts", "hi_ipid", "hi_tsv", "last_ack32", "last_win", "ws_opt", "ws", "ws_known",
        "mss", "sigd", "sigq", "keepalive", "pkts", "dups", "trunc_bytes",
        # as acknowledged by the far end
        "ack_ref", "acked", "progress_ts", "acks", "dupacks", "dupack_ts", "hole_dup_ts", "sack_hi", "sack_ts", "sacks",
        "rwnd", "rwnd_known", "max_edge", "zw_since", "zw_frame", "zw_seq", "pending_retx",
        # RTT of this direction's data (capture point -> far end -> capture point)
        "srtt", "min_rtt",
        # loss bursts
        "burst_id", "burst_end", "burst_last", "burst_segs", "closed_bursts", "burst_sizes",
        # counters
        "retx", "ooo", "zero_windows", "cap_loss", "bursts", "longest", "n_dupacks",
    )  # fmt: skip

    def __init__(self, idx: int) -> None:
        self.idx = idx
        self.base: int | None = None  # absolute (unwrapped) seq of stream offset 0
        self.seq_ref = 0  # highest unwrapped seq seen, reference for unwrapping
        self.isn: int | None = None
        self.hi = 0  # highest data offset seen (end, exclusive)
        self.nxt = 0  # reassembly: next offset to deliver
        self.fin: int | None = None  # offset of the FIN
        self.buf: list[list] = []  # out-of-order segments [start, cap_end, wire_end, bytes, ts, frame]
        self.buf_bytes = 0
        self.holes: list[Hole] = []
        self.pending_gap = 0  # skipped bytes to report before the next delivered byte
        self.segs = SegLog()
        self.tsq = TsLog()
        self.tsv_u: int | None = None  # highest TSval sent, unwrapped
        self.ipid_last = -1
        self.ipid_good = 0
        self.ipid_bad = 0
        self.ipid_gaps = 0  # IP id steps of 2-64 (ipid_good counts them too)
        self.ipid_last_ts = 0  # capture time of the packet that had ipid_last
        self.ipid_prev_run = -1  # ipid_last before the bulk run being applied
        self.hi_ts = 0  # time / IP ID / TSval of the packet that set ``hi``
        self.hi_ipid = -1
        self.hi_tsv: int | None = None
        self.last_ack32: int | None = None  # ACK / window this side last sent
        self.last_win: int | None = None
        self.ws_opt = -1  # window scale option in this side's SYN
        self.ws = 0  # shift applied to windows this side advertises
        self.ws_known = False
        self.mss = -1
        self.sigd: dict[bytes, int] = {}  # recent packet_signature()s -> ts (capture duplicates)
        # their order, oldest first (a list: an empty deque alone took ~700 bytes a direction)
        self.sigq: list[bytes] = []
        self.keepalive = False  # last data packet was a keep-alive probe
        self.pkts = 0
        self.dups = 0
        self.trunc_bytes = 0

        self.ack_ref = 0  # highest unwrapped ACK about this data
        self.acked = 0  # cumulative ACK offset
        self.progress_ts = 0  # when the cumulative ACK last moved forward
        self.acks = AckLog()
        self.dupacks = 0
        self.dupack_ts = 0
        self.hole_dup_ts = 0  # last dup ACK that reported a hole (not a D-SACK echo)
        self.sack_hi = 0  # highest SACKed offset (receiver has bytes above a hole)
        self.sack_ts = 0
        self.sacks: list[tuple[int, int]] = []
        self.rwnd: int | None = None  # far end's advertised window (scaled, bytes)
        self.rwnd_known = False
        self.max_edge = 0  # highest right window edge the far end offered (offset)
        self.zw_since: int | None = None
        self.zw_frame = 0
        self.zw_seq = 0
        self.pending_retx: list[PendingRetx] = []

        self.srtt: float | None = None
        self.min_rtt: int | None = None

        self.burst_id: int | None = None
        self.burst_end = 0
        self.burst_last = 0
        self.burst_segs: set[int] = set()

        self.retx = 0
        self.ooo = 0
        self.zero_windows = 0
        self.cap_loss = 0
        self.bursts = 0
        self.longest = 0
        # recently closed bursts (id -> segments) and how many bursts have each size, so a
        # D-SACK that arrives after a burst closed can still take a spurious segment out
        self.closed_bursts: dict[int, set[int]] = {}
        self.burst_sizes: dict[int, int] = {}
        self.n_dupacks = 0

    def clean(self, c_run: bool = False) -> bool:
        """Nothing pending that needs the per-packet path. ``c_run``: for the C bulk run,
        which also takes the ACKs of retransmissions still waiting to be covered (Karn's
        rule on their segments, the covering ACK, an Eifel check ends the run)."""
        return (
            self.base is not None
            and not self.buf
            and not self.holes
            and self.pending_gap == 0
            # a retransmission already ACKed only waits for a D-SACK, and rows with SACK
            # blocks never take the numpy run, so it cannot be missed there
            and (c_run or all(p.covered_ts is not None for p in self.pending_retx))
            and self.zw_since is None
            and self.fin is None
            and not self.keepalive
            and (c_run or self.segs.n_rx == 0)
        )


class Conn:
    __slots__ = (
        "key", "conn_id", "tuple6", "client_is_lo", "client_known", "ip_version",
        "start_ns", "last_ns", "dirs", "hist", "syn_ts", "syn_n", "synack_ts", "synack_n",
        "hs_done", "hs_rtt", "state", "closing_since", "rst", "bursts_opened",
    )  # fmt: skip

    def __init__(self, key: int, conn_id: str, tuple6: tuple, client_is_lo: bool,
                 client_known: bool, ip_version: int, ts: int) -> None:  # fmt: skip
        self.key = key
        self.conn_id = conn_id
        self.tuple6 = tuple6
        self.client_is_lo = client_is_lo
        self.client_known = client_known
        self.ip_version = ip_version
        self.start_ns = ts
        self.last_ns = ts
        self.dirs = (Dir(0), Dir(1))
        self.hist = History()
        self.syn_ts: int | None = None
        self.syn_n = 0
        self.synack_ts: int | None = None
        self.synack_n = 0
        self.hs_done = False
        self.hs_rtt: int | None = None
        self.state = OPEN
        self.closing_since = 0
        self.rst = False
        self.bursts_opened = 0  # loss bursts numbered so far (burst ids 1, 2, ...)

    def full_rtt(self) -> float | None:
        """Round trip seen by an end host: capture->server->capture + capture->client->capture."""
        a, b = self.dirs[0].srtt, self.dirs[1].srtt
        if a is None and b is None:
            return None if self.hs_rtt is None else float(self.hs_rtt)
        return (a or 0.0) + (b or 0.0)

    def fast_ready(self, c_run: bool = False) -> bool:
        """May a bulk run (``c_run``: the C one, see Dir.clean) start here?"""
        return (
            self.state == OPEN
            and (self.synack_ts is None or self.hs_done)
            and self.dirs[0].clean(c_run)
            and self.dirs[1].clean(c_run)
        )


def ipid_sequential(D: Dir) -> bool:
    """The sender numbers this direction's packets one by one (Linux does, per socket):
    at least 32 steps seen, nearly all +1, at most one in eight skipping a few numbers.
    Only then does a skipped number mean a packet lost before the capture point (a
    host-wide counter, as Windows has, skips for every other connection's packet)."""
    return D.ipid_good >= 32 and D.ipid_bad * 5 <= D.ipid_good and D.ipid_gaps * 8 <= D.ipid_good
