"""parsers.tcp RTT samples: handshake halves, data->ACK with Karn's rule, TSecr echoes."""

from __future__ import annotations

import pytest
from tcp_builders import Flow, analyze

from parsers.records import TO_CLIENT, TO_SERVER


def _samples(r, source=None, direction=None):
    return [
        round(s.rtt_ms, 6)
        for s in r.rtts
        if (source is None or s.source == source)
        and (direction is None or s.direction == direction)
    ]


def test_handshake_halves_and_full_rtt():
    f = Flow()
    f.c(0, 0, "S", t_us=0)
    f.s(0, 1, "SA", t_us=2000)  # capture point -> server -> capture point: 2 ms
    f.c(1, 1, "A", t_us=2100)  # capture point -> client -> capture point: 0.1 ms
    r = analyze(f.batch())
    assert _samples(r, "handshake", TO_SERVER) == [2.0]
    assert _samples(r, "handshake", TO_CLIENT) == [0.1]
    assert r.summary().handshake_rtt_ms == pytest.approx(2.1)
    assert all(s.ts_ns in (f.rows[1]["ts_ns"], f.rows[2]["ts_ns"]) for s in r.rtts)


def test_retransmitted_syn_gives_no_ambiguous_sample():
    f = Flow()
    f.c(0, 0, "S", t_us=0)
    f.c(0, 0, "S", t_us=1_000_000)  # SYN (or its SYN/ACK) lost: resent after 1 s
    f.s(0, 1, "SA", t_us=1_003_000)
    f.c(1, 1, "A", t_us=1_003_100)
    r = analyze(f.batch())
    assert _samples(r, "handshake", TO_SERVER) == []
    assert _samples(r, "handshake", TO_CLIENT) == [0.1]
    assert r.summary().handshake_rtt_ms is None
    assert [(e.kind, e.recovery_ms) for e in r.events] == [("rto_retransmission", 1000.0)]
    assert r.summary().retransmissions == (1, 0)


def test_data_ack_samples_use_the_newest_segment_covered():
    f = Flow().handshake()
    f.s(1, 1, "A", 1000, dt_us=1000)
    f.s(1001, 1, "A", 1000, dt_us=200)
    f.c(1, 2001, "A", dt_us=5000)  # delayed ACK of both: 5 ms after the second
    f.s(2001, 1, "A", 500, dt_us=100)
    f.c(1, 2201, "A", dt_us=300)  # partial ACK inside the segment: 0.3 ms
    f.c(1, 2501, "A", dt_us=300)  # same segment again: no second sample
    r = analyze(f.batch())
    assert _samples(r, "data_ack", TO_CLIENT) == [5.0, 0.3]
    assert _samples(r, "data_ack", TO_SERVER) == []


def test_client_data_samples_are_on_the_client_direction():
    f = Flow().handshake()
    f.c(1, 1, "AP", 300)
    f.s(1, 301, "A", dt_us=40)
    r = analyze(f.batch())
    assert _samples(r, "data_ack", TO_SERVER) == [0.04]


def test_karn_no_sample_from_retransmitted_ranges():
    f = Flow().handshake()
    f.s(1, 1, "A", 1000)
    f.s(1, 1, "A", 1000, dt_us=250_000)  # timeout retransmission
    f.c(1, 1001, "A", dt_us=2000)  # which copy does it acknowledge? no sample
    f.s(1001, 1, "A", 1000)
    f.c(1, 2001, "A", dt_us=2000)  # fresh data: sampled again
    r = analyze(f.batch())
    assert _samples(r, "data_ack", TO_CLIENT) == [2.0]
    assert r.kinds() == {"rto_retransmission": 1}


def test_tsecr_samples_first_echo_of_each_tsval():
    f = Flow().handshake(tsval=100)
    f.s(1, 1, "A", 1000, tsval=5000, tsecr=101)
    f.s(1001, 1, "A", 1000, tsval=5000, tsecr=101, dt_us=500)  # same TSval (same ms)
    f.c(1, 1001, "A", tsval=103, tsecr=5000, dt_us=3000)  # echoes 5000: 3.5 ms after its first use
    f.c(1, 2001, "A", tsval=104, tsecr=5000, dt_us=100)  # same echo again: no sample
    f.s(2001, 1, "A", 1000, tsval=5007, tsecr=104)
    f.c(1, 3001, "A", tsval=105, tsecr=5007, dt_us=1000)
    r = analyze(f.batch())
    assert _samples(r, "tsecr", TO_CLIENT) == [3.5, 1.0]


def test_idle_echo_of_a_pure_ack_tsval_is_not_a_sample():
    """A side that was silent echoes an old TSval: only ACKs of new data give samples."""
    f = Flow().handshake(tsval=100)
    f.c(1, 1, "A", tsval=200, tsecr=1100)  # pure ACK (not data)
    f.s(1, 1, "AP", 20, tsval=9000, tsecr=200, dt_us=10_000_000)  # 10 s later, echoes 200
    f.c(1, 21, "A", tsval=10200, tsecr=9000, dt_us=200)
    r = analyze(f.batch())
    assert _samples(r, "tsecr", TO_SERVER) == []
    assert _samples(r, "tsecr", TO_CLIENT) == [0.2]


def test_delayed_ack_echo_of_an_older_tsval_is_not_a_sample():
    """A delayed ACK of two segments echoes the first one's TSval (RFC 7323): using it
    would add the receiver's ACK hold time to the RTT; data->ACK still gives 0.3 ms."""
    f = Flow().handshake(tsval=100)
    f.s(1, 1, "AP", 40, tsval=5000, tsecr=101)
    f.s(41, 1, "AP", 40, tsval=5015, tsecr=101, dt_us=15_000)
    f.c(1, 81, "A", tsval=130, tsecr=5000, dt_us=300)
    r = analyze(f.batch())
    assert _samples(r, "tsecr", TO_CLIENT) == []
    assert _samples(r, "data_ack", TO_CLIENT) == [0.3]


def test_tsecr_measures_a_retransmission_that_filled_a_hole():
    """Karn forbids the data->ACK sample; the echo of the retransmission's TSval is exact."""
    f = Flow().handshake(tsval=100)
    f.s(1001, 1, "A", 1000, tsval=5000, tsecr=101)  # [0, 1000) lost upstream
    f.s(1, 1, "A", 1000, tsval=5200, tsecr=101, dt_us=200_000)  # the retransmission
    f.c(1, 2001, "A", tsval=400, tsecr=5200, dt_us=700)
    r = analyze(f.batch())
    assert _samples(r, "tsecr", TO_CLIENT) == [0.7]
    assert _samples(r, "data_ack", TO_CLIENT) == []
