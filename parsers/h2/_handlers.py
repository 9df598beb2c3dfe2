"""Mixin for :class:`H2Connection`: each parsed frame applied to the connection's
streams: DATA streamed into messages, HEADERS/CONTINUATION decoded into requests and
responses, SETTINGS, WINDOW_UPDATE, RST_STREAM, GOAWAY, PING and PUSH_PROMISE noted."""

from __future__ import annotations

from parsers.grpc import GrpcSplitter, parse_grpc_web_trailers
from parsers.records import H2EventKind

from ._frames import (
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    FLAG_PADDED,
    FLAG_PRIORITY,
    GOAWAY,
    HEADERS,
    MAX_FRAME_LEN,
    NEED_MORE,
    NOT_FOUND,
    PING,
    PRIORITY,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_NAMES,
    WINDOW_UPDATE,
    frame_ok_in_sync,
    scan_for_frames,
    unpack_header,
)
from ._hpack import DecodedBlock
from ._state import (
    _CLOSED_KEEP,
    _HEADERS_LAYOUT,
    _HOLD_LIMIT,
    _KEPT_FLAGS,
    _MAX_SID_JUMP,
    _MAX_SID_JUMP_LOSSY,
    MSG_ROW,
    _Dir,
    _pack_msg,
)
from ._streams import Stream


class FrameHandlers:
    """Frames applied to streams (H2Connection's state)."""

    def _parse(
        self, D: _Dir, d: int, b: bytes | bytearray, base: int, ts: int, i: int, n: int = -1
    ) -> int:
        if n < 0:
            n = len(b)
        tmp = self._tmp
        while True:
            if not D.synced:
                x, status = scan_for_frames(b, i, n, max(D.max_len, DEFAULT_MAX_FRAME_SIZE))
                D.skipped += x - i
                i = x
                if status == NOT_FOUND or status == NEED_MORE:
                    return i
                self._synced(D, d, ts)

            # -- streaming the payload of a DATA frame ---------------------------------
            if D.data_left or D.pad_left:
                left = D.data_left
                if left:
                    take = n - i
                    if take > left:
                        take = left
                    if take:
                        st = D.data_stream
                        if st is not None:
                            sp = st.splitter[d]
                            if sp is not None:
                                sp.feed(b, i, i + take, base, ts, tmp)
                                if tmp:
                                    self._messages(st, d, tmp)
                        i += take
                        left -= take
                        D.data_left = left
                if not left and D.pad_left:
                    take = n - i
                    if take > D.pad_left:
                        take = D.pad_left
                    i += take
                    D.pad_left -= take
                if D.data_left or D.pad_left:
                    return i
                self._data_end(D, d, base + i, ts)
                continue

            if n - i < 9:
                return i
            hi, lo, ftype, flags, sid = unpack_header(b, i)
            length = (hi << 8) | lo
            limit = D.max_len if D.max_known else MAX_FRAME_LEN
            if ftype == DATA and sid and not sid & 0x80000000 and length <= limit:
                # -- DATA fast path ------------------------------------------------------
                if D.block is not None:
                    self._stray_block(D, d)
                st = self.streams.get(sid)
                if st is None:
                    st = self._data_stream(sid, d)
                p = i + 9
                end = p + length
                if flags & FLAG_PADDED:
                    if n - i < 10:
                        return i
                    pad = b[p]
                    if pad >= length:
                        self._issue("h2_bad_padding", f"DATA pad {pad} >= length {length}")
                        self._desync(D, d, ts)
                        i += 1
                        continue
                    p += 1
                    dend = end - pad
                else:
                    pad = 0
                    dend = end
                D.frames += 1
                if end <= n:
                    # whole frame buffered
                    if st is not None:
                        self._whole_data(
                            d, st, sid, flags, b, p, dend, length, base, base + end, ts
                        )
                    elif self.flows[d].known:
                        self.flows[d].consume(sid, length, ts, bool(flags & FLAG_END_STREAM))
                    i = end
                    continue
                D.data_sid = sid
                D.data_flags = flags
                D.data_len = dend - p
                D.data_payload = length
                D.data_stream = st
                if st is not None:
                    sp = st.splitter[d]
                    if sp is None and not st.data_frames[d]:
                        sp = st.late_tap(d)
                    if sp is not None and (sp.probing or st.mode[d] == "probe"):
                        sp.frame_start()
                # partial frame: stream what we have
                i = p
                D.data_left = dend - p
                D.pad_left = pad
                continue

            if (
                ftype == HEADERS
                and flags & _HEADERS_LAYOUT == FLAG_END_HEADERS
                and sid
                and not sid & 0x80000000
                and length <= limit
                and D.block is None
            ):
                # -- a whole header block in one HEADERS frame: the common case ----------
                e = i + 9 + length
                if e > n:
                    return i
                D.frames += 1
                self._block(D, d, HEADERS, flags, sid, b[i + 9 : e], ts, base + e, 0)
                i = e
                continue
            if not frame_ok_in_sync(length, ftype, flags, sid, limit):
                self._issue(
                    "h2_bad_frame",
                    f"implausible frame header type={ftype} len={length} flags={flags:#x} sid={sid}",
                )
                self._desync(D, d, ts)
                D.skipped += 1
                i += 1
                continue
            if n - i < 9 + length:
                return i
            payload = bytes(b[i + 9 : i + 9 + length])
            i += 9 + length
            D.frames += 1
            self._control(D, d, ftype, flags, sid, payload, ts, base + i)

    # -- DATA --------------------------------------------------------------------------

    def _data_stream(self, sid: int, d: int) -> Stream | None:
        """DATA on a stream we have no state for."""
        if sid in self.closed:
            return None
        first = self.first_opened[sid & 1]
        if not (self.mid or self.lossy) or (first and sid >= first):
            # opened and closed within what we saw, or never opened: ignore
            return None
        st = Stream(sid, mid=True)
        self.streams[sid] = st
        return st

    def _messages(self, st: Stream, d: int, tmp: list[tuple[int, int, int, int]]) -> None:
        o = 1 - d
        idx = st.msgs[d]
        if idx == 0:
            st.first_msg_ts[d] = tmp[0][0]
            st.first_msg_off[d] = tmp[0][3]
        other_open = st.end_ts[o] is None
        if other_open:
            st.msg_before_end[d] = True
        if st.msgs[o]:
            st.msg_after_first[d] = True
        sid = st.sid
        out = self.msg_buf
        for ts, size, flag, end in tmp:
            # gRPC: the compressed bit of the flag byte; events: their kind and tokens too
            out += _pack_msg(sid, d, idx, ts, size, flag & _KEPT_FLAGS, end)
            idx += 1
        st.last_msg_ts[d] = tmp[-1][0]
        st.msgs[d] = idx
        tmp.clear()
        if not self.orient_final and len(out) > _HOLD_LIMIT * MSG_ROW.size:
            self._settle_orientation()

    def _data_end(self, D: _Dir, d: int, end_off: int, ts: int) -> None:
        st = D.data_stream
        sid = D.data_sid
        flags = D.data_flags
        D.data_stream = None
        self.flows[d].consume(sid, D.data_payload, ts, bool(flags & FLAG_END_STREAM))
        if st is None:
            return
        dl = D.data_len
        if dl > 0:
            if st.data_frames[d] == 0:
                st.first_data_ts[d] = ts
                st.first_data_off[d] = end_off
            st.data_frames[d] += 1
            st.last_data_ts[d] = ts
            st.data_bytes[d] += dl
        st.last_off[d] = end_off
        sp = st.splitter[d]
        if sp is not None:
            if isinstance(sp, GrpcSplitter):
                if sp.probing:
                    tmp = self._tmp
                    sp.frame_end(tmp)
                    if tmp:
                        self._messages(st, d, tmp)
                if sp.trailer and st.web_trailers is None:
                    st.web_trailers = parse_grpc_web_trailers(bytes(sp.trailer))
        if flags & FLAG_END_STREAM:
            self._end_stream(st, d, ts, end_off)

    # -- other frames ----------------------------------------------------------------

    def _stray_block(self, D: _Dir, d: int) -> None:
        self._issue("h2_bad_continuation", "header block interrupted by another frame")
        D.block = None
        D.hpack.lose_context()

    def _control(
        self, D: _Dir, d: int, ftype: int, flags: int, sid: int, p: bytes, ts: int, end_off: int
    ) -> None:
        if D.block is not None and ftype != CONTINUATION:
            self._stray_block(D, d)
        if ftype == HEADERS or ftype == PUSH_PROMISE:
            j, e = 0, len(p)
            if flags & FLAG_PADDED:
                j = 1
                e -= p[0]
            promised = 0
            if ftype == HEADERS:
                if flags & FLAG_PRIORITY:
                    j += 5
            else:
                promised = int.from_bytes(p[j : j + 4], "big") & 0x7FFFFFFF
                j += 4
            if e < j:
                self._issue("h2_bad_padding", f"frame type {ftype} padding exceeds payload")
                D.hpack.lose_context()
                return
            frag = p[j:e]
            if flags & FLAG_END_HEADERS:
                self._block(D, d, ftype, flags, sid, frag, ts, end_off, promised)
            else:
                D.block = bytearray(frag)
                D.block_sid = sid
                D.block_type = ftype
                D.block_flags = flags
                D.block_ts = ts
                D.block_promised = promised
        elif ftype == CONTINUATION:
            if D.block is None or sid != D.block_sid:
                # its HEADERS was lost (e.g. resync landed here): context is gone
                self._issue("h2_bad_continuation", f"CONTINUATION on {sid} without HEADERS")
                D.block = None
                D.hpack.lose_context()
                return
            D.block += p
            if flags & FLAG_END_HEADERS:
                blk = D.block
                D.block = None
                self._block(
                    D,
                    d,
                    D.block_type,
                    D.block_flags,
                    sid,
                    blk,
                    D.block_ts,
                    end_off,
                    D.block_promised,
                )
        elif ftype == SETTINGS:
            if flags & FLAG_ACK:
                return
            parts = []
            o = 1 - d
            for k in range(0, len(p) - 5, 6):
                ident = int.from_bytes(p[k : k + 2], "big")
                val = int.from_bytes(p[k + 2 : k + 6], "big")
                parts.append(f"{SETTINGS_NAMES.get(ident, str(ident))}={val}")
                if ident == 1:
                    # our decoder of what the peer sends must fit this size
                    self.dirs[o].hpack.set_max_allowed(val)
                elif ident == 3:
                    self.max_conc[d] = val
                elif ident == 4:
                    self.flows[o].set_initial(val, ts)
                elif ident == 5:
                    self.dirs[o].max_len = max(DEFAULT_MAX_FRAME_SIZE, min(val, MAX_FRAME_LEN))
                    self.dirs[o].max_known = True
            self._event(ts, 0, d, H2EventKind.SETTINGS, len(parts), ",".join(parts))
        elif ftype == WINDOW_UPDATE:
            inc = int.from_bytes(p[:4], "big") & 0x7FFFFFFF
            self._event(ts, sid, d, H2EventKind.WINDOW_UPDATE, inc)
            since = self.flows[1 - d].update(sid, inc)
            if since is not None:
                self._event(
                    since,
                    sid,
                    1 - d,
                    H2EventKind.FLOW_CONTROL_BLOCKED,
                    sid,
                    "connection" if sid == 0 else "stream",
                    (ts - since) / 1e6,
                )
        elif ftype == RST_STREAM:
            code = int.from_bytes(p[:4], "big")
            self._event(ts, sid, d, H2EventKind.RST_STREAM, code)
            st = self.streams.get(sid)
            if st is not None:
                st.rst_ts = ts
                st.rst_code = code
                st.rst_dir = d
                st.rst_off = end_off
                st.last_off[d] = end_off
                self._finalize(st)
        elif ftype == PING:
            self._event(ts, 0, d, H2EventKind.PING, 1 if flags & FLAG_ACK else 0, p.hex())
        elif ftype == GOAWAY:
            last = int.from_bytes(p[:4], "big") & 0x7FFFFFFF
            code = int.from_bytes(p[4:8], "big")
            dbg = p[8:].decode("utf-8", "replace")
            detail = str(last) if not dbg else f"{last} {dbg}"
            self._event(ts, 0, d, H2EventKind.GOAWAY, code, detail)
        elif ftype == PRIORITY:
            dep = int.from_bytes(p[:4], "big")
            self._event(ts, sid, d, H2EventKind.PRIORITY, dep & 0x7FFFFFFF, f"weight={p[4] + 1}")
        # unknown types: ignored (RFC 9113 section 4.1)

    def _block(
        self,
        D: _Dir,
        d: int,
        ftype: int,
        flags: int,
        sid: int,
        frag: bytes | bytearray,
        ts: int,
        end_off: int,
        promised: int,
    ) -> None:
        self._block_decoded(D, d, ftype, flags, sid, D.hpack.decode(frag), ts, end_off, promised)

    def _headers_decoded(self, d: int, flags: int, sid: int, blk: DecodedBlock, ts: int, end_off: int,
                         frame_no: int) -> None:
        """A whole HEADERS frame of _parse's common case (END_HEADERS, no padding or
        priority, the direction plain) whose block the C fast path decoded but did not
        apply: what _parse and feed do with it from there."""
        self._frame_no = frame_no
        D = self.dirs[d]
        D.frames += 1
        self._block_decoded(D, d, HEADERS, flags, sid, blk, ts, end_off, 0)
        D.base = end_off

    def _block_decoded(
        self,
        D: _Dir,
        d: int,
        ftype: int,
        flags: int,
        sid: int,
        blk: DecodedBlock,
        ts: int,
        end_off: int,
        promised: int,
    ) -> None:
        h = blk.as_dict()  # shared with the decoder's cache: stored, never changed
        unknown = bool(blk.unknown or blk.error)
        if unknown:
            self._unknown_block(ts, sid, d, blk)
        if ftype == PUSH_PROMISE:
            self._orient(1 - d)
            self._event(ts, sid, d, H2EventKind.PUSH_PROMISE, promised, h.get(":path"))
            if promised in self.streams or promised in self.closed or not promised:
                return
            c = 1 - d
            st = Stream(promised)
            st.promised = True
            st.opener = d
            st.hdr[c] = h
            st.hdr_ts[c] = ts
            st.end_ts[c] = ts  # a promised request has no body
            st.headers_known = not unknown
            st.set_content_type(h.get("content-type"), c, False)
            self.streams[promised] = st
            self.flows[d].open_stream(promised)
            return
        method = ":method" in h
        status = h.get(":status")
        st = self.streams.get(sid)
        if st is None:
            if sid in self.closed:
                return
            if not self._may_open(sid, method):
                self._issue("h2_bad_stream_id", f"HEADERS cannot open stream {sid} here; ignored")
                return
            st = Stream(sid)
            st.opener = d
            if method:
                if not self.first_opened[sid & 1]:
                    self.first_opened[sid & 1] = sid
                self.last_opened[sid & 1] = sid
            elif status is not None or "grpc-status" in h:
                # we missed the request's HEADERS: mid-connection
                st.mid = True
                st.headers_known = False
                st.opener = 1 - d
            elif unknown:
                st.headers_known = False
            self.streams[sid] = st
            self.flows[0].open_stream(sid)
            self.flows[1].open_stream(sid)
            if self.max_conc[1 - d] is not None:
                self._check_concurrency(d, ts, sid)
        if unknown:
            st.headers_known = False
        # the side that sent :method is the client; :status, the server
        client = d if method else (1 - d if status is not None else -1)
        if client >= 0 and (not self.orient_final or (client == 1) != self.flipped):
            self._orient(client)
        if st.hdr[d] is None and (status is not None or method or st.data_frames[d] == 0):
            if status is not None and status[:1] == "1":
                st.informational = True  # 1xx: the final response headers follow
            else:
                st.hdr[d] = h
                st.hdr_ts[d] = ts
                is_resp = status is not None or (self.orient_final and d != self.client_dir)
                ct = h.get("content-type")
                st.set_content_type(ct, d, is_resp, h.get(":path"))
                if ct is None and unknown:
                    st.probe_hidden_bodies()
                if flags & FLAG_END_STREAM and "grpc-status" in h and is_resp:
                    st.trailers_only = True
        else:
            trl = st.trailers[d]
            # a second trailer block: merged into a new dict (h is shared)
            st.trailers[d] = h if trl is None else {**trl, **h}
        st.last_off[d] = end_off
        if flags & FLAG_END_STREAM:
            self._end_stream(st, d, ts, end_off)

    def _unknown_block(self, ts: int, sid: int, d: int, blk: DecodedBlock) -> None:
        """Report a header block HPACK could not wholly decode (the C fast path calls this
        too, for blocks with unknown indexes)."""
        if blk.error:
            self._issue("hpack_error", f"stream {sid}: {blk.error}")
        if blk.unknown:
            idx = ",".join(str(x) for x in blk.unknown_indexes[:16])
            self._event(ts, sid, d, H2EventKind.HEADERS_UNKNOWN, blk.unknown, f"indexes={idx}")

    def _may_open(self, sid: int, is_request: bool) -> bool:
        """Stream ids only grow (RFC 9113 5.1.1): a new request on an id at or below the
        last one opened, or far beyond it, means the bytes are not what they seem (the
        block was still decoded, so HPACK stays aligned). Streams whose request we never
        saw only exist mid-connection or after loss."""
        if not is_request:
            return self.mid or self.lossy
        last = self.last_opened[sid & 1]
        if not last:
            return True
        jump = sid - last
        return 0 < jump <= (_MAX_SID_JUMP_LOSSY if self.lossy else _MAX_SID_JUMP)

    def _check_concurrency(self, d: int, ts: int, sid: int) -> None:
        limit = self.max_conc[1 - d]
        if limit is None:
            return
        n = 0
        for st in self.streams.values():
            if st.opener == d and not st.done():
                n += 1
        if n >= limit:
            if not self.conc_hit[d]:
                self.conc_hit[d] = True
                self._event(ts, sid, d, H2EventKind.MAX_CONCURRENT_STREAMS, limit, f"open={n}")
        else:
            self.conc_hit[d] = False

    def _end_stream(self, st: Stream, d: int, ts: int, end_off: int) -> None:
        if st.end_ts[d] is None:
            st.end_ts[d] = ts
            st.end_off[d] = end_off
        self.flows[d].close_stream(st.sid)
        if st.done() or (self.orient_final and self._answered_unseen(st)):
            self._finalize(st)

    def _answered_unseen(self, st: Stream) -> bool:
        """A mid-connection stream whose request we never saw and whose response ended:
        the response end ends it (the orientation must be known to tell the two apart)."""
        c = self.client_dir
        return st.mid and st.hdr_ts[c] is None and st.end_ts[1 - c] is not None

    def _end_unseen_requests(self) -> None:
        """The orientation was just settled: the streams :meth:`_answered_unseen` ends
        whose response ended before it end now, as they would have at the response end
        with the orientation known, not at the connection's end. Their rows then leave as
        soon as the others do, and their ACK times are looked up before the pipeline
        forgets the ACK progress below newer streams."""
        for st in list(self.streams.values()):
            if self._answered_unseen(st):
                self._finalize(st)

    def _finalize(self, st: Stream) -> None:
        sid = st.sid
        if self.streams.pop(sid, None) is None:
            return
        closed = self.closed
        closed[sid] = True
        if len(closed) > _CLOSED_KEEP:
            del closed[next(iter(closed))]
        self.flows[0].close_stream(sid)
        self.flows[1].close_stream(sid)
        self.done.append(st)
        if not self.orient_final and self.held() > _HOLD_LIMIT:
            self._settle_orientation()

    def _settle_orientation(self) -> None:
        # keep memory bounded: settle for the TCP layer's orientation
        self.orient_final = True
        self._issue("h2_orientation_guess", "no bytes told the client side; kept TCP's")
        self._end_unseen_requests()
