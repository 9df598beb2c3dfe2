"""Sans-I/O TCP reassembly and analysis for tailtap.

``TcpAnalyzer`` turns :class:`~parsers.records.SegmentBatch` rows (capture order) into

* :class:`~parsers.records.PayloadChunk`: new in-order bytes per connection direction,
  each byte once (retransmitted and overlapping bytes are delivered once; out-of-order
  segments wait until the hole is filled and then carry the filling packet's time).
  ``stream_offset`` is 0 at the first payload byte of the direction (ISN+1 when the
  SYN was seen, else the first sequence number seen). Bytes that will never come
  (ACKed but not captured, cut by the snaplen, or given up on) are skipped and counted
  in ``gap_before`` so the session layer can resynchronise.
  :meth:`TcpAnalyzer.feed_runs` gives the same chunks with the bulk path's ones as
  :class:`~parsers.records.ChunkRun` columns over the batch buffer (no object per packet).
* :class:`~parsers.records.TcpEvent` and :class:`~parsers.records.RttSample`
  (:meth:`TcpAnalyzer.take_events`); rules in :mod:`parsers.tcp._analysis`.
* ACK progress per direction (:meth:`TcpAnalyzer.ack_progress`): when the far end
  acknowledged the direction's bytes up to an offset.
* :class:`~parsers.records.ConnectionSummary` when a connection ends.

Direction conventions: ``TO_SERVER`` (0) / ``TO_CLIENT`` (1) from the client, the SYN
sender. Without a SYN (or SYN/ACK) the server is guessed: a well-known/service port
(< 1024, 443, 50051, 3000, 8000-8999, ...) or else the lower port; ``client_known`` is
then False and the history starts with ``^``. Every event and RTT sample is attached to
the *data direction* it is about: a dup ACK, zero window or capture loss travels in the
ACK packets of the other side but is reported on the direction whose data it
concerns; ``rst`` is reported on the side that sent it. Per-direction summary tuples
follow the same rule (``zero_windows[1]`` = episodes where the client's zero window
blocked the server's data).

History letters (upper case = client's packets / data, lower case = server's; the
vocabulary is :class:`~parsers.records.HistoryLetter`, event kinds
:class:`~parsers.records.TcpEventKind`, RTT sources :class:`~parsers.records.RttSource`)::

    S s  SYN without ACK           H h  SYN+ACK
    A a  pure ACK                  D d  payload
    F f  FIN                       R r  RST
    T t  retransmission            O o  out-of-order (late original)
    L l  sequence gap seen         W w  zero window advertised (by that side)
    G g  capture loss of that side's data (far end ACKed bytes never captured)
    C c  payload cut by the snaplen
    X x  capture duplicate dropped
    K k  reassembly hole given up (skipped)
    ^    client/server guessed (no SYN or SYN/ACK seen)
    ~    window scale unknown (handshake not seen: windows read unscaled,
         no window_full events)

Letters appear in the order they first happened; T, O, L, W, G, X and K are repeated
at the 10th, 100th, 1000th... occurrence (Zeek style). :func:`flip_summary`,
:func:`flip_event` and :func:`flip_rtt_sample` turn records around when the session
layer finds that the roles were guessed wrong; :meth:`TcpAnalyzer.flip_connection`
does the same for a live connection.

RTT samples (``source``), each reported on the direction of the data it measures, i.e.
capture point -> that direction's receiver -> capture point: ``handshake`` (SYN ->
SYN/ACK on to_server, SYN/ACK -> ACK on to_client; none when the SYN or SYN/ACK was
retransmitted), ``data_ack`` (an ACK moving forward -> the send time of the segment
holding the last byte it acknowledges, once per segment; Karn's rule: nothing when the
ACK covers retransmitted bytes), ``tsecr`` (first echo of a data segment's TSval by an
ACK moving forward, when that ACK covers nothing first sent with a newer TSval: a
delayed ACK echoes the oldest TSval and would add its hold time). The full round trip
seen by an end host is the sum of the two directions' values.

Summary fields: ``bytes`` is the sequence space each side used (highest offset seen,
bytes the capture missed included); ``packets`` excludes capture duplicates.
Events are returned in the order they are decided, not sorted by ``ts_ns``: a hole
(``lost_segment``), a zero-window episode and a retransmission of seen bytes are
reported once resolved, with the time they started.
"""

from parsers.tcp._analyzer import TcpAnalyzer
from parsers.tcp._history import (
    flip_direction,
    flip_event,
    flip_history,
    flip_rtt_sample,
    flip_summary,
)

__all__ = [
    "TcpAnalyzer",
    "flip_direction",
    "flip_event",
    "flip_history",
    "flip_rtt_sample",
    "flip_summary",
]
