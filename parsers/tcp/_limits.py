"""The TCP analysis's time and size limits (see the rules in ``_analysis``)."""

M32 = 0xFFFFFFFF
DUP_WINDOW_IPID_NS = 250_000_000
DUP_WINDOW_NOID_NS = 50_000
SIG_KEEP = 16
RTO_MIN_NS = 180_000_000
FAST_WIN_NS = 20_000_000
OOO_DEFAULT_NS = 3_000_000
BURST_GAP_NS = 1_000_000_000
HOLE_TIMEOUT_NS = 3_000_000_000
MAX_BUF_BYTES = 8 << 20
PENDING_RETX_NS = 2_000_000_000
# After the ACK covering a retransmission, how long a D-SACK may still show the original
# was only delayed (at least this, or 4 RTTs)
DSACK_GRACE_NS = 200_000_000
RECENT_BURSTS = 64  # closed bursts a late D-SACK can still correct
FIN_LINGER_NS = 1_000_000_000
TOMBSTONE_NS = 60_000_000_000
STRAGGLER_SEQ = 1 << 20
WINDOW_SLACK = 1 << 20  # beyond the far end's highest window edge + this: not real data
