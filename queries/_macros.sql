-- Macros the models share: one definition of each predicate and constant.

-- A capture in the analysis' scope: one of the variable capture_ids (null: every capture).
CREATE OR REPLACE MACRO in_scope(capture_id) AS
    getvariable('capture_ids') IS NULL OR list_contains(getvariable('capture_ids'), capture_id);

-- The report window a time falls in (variable window_s seconds, aligned on the epoch).
CREATE OR REPLACE MACRO window_of(ts) AS
    CAST(floor(epoch_ns(ts) / (getvariable('window_s') * 1e9)) AS BIGINT);

-- A window's p99 spikes when it is at least spike_factor times its baseline p99 and
-- spike_min_delta_ms more (both: a 2 ms method is not spiking at 3 ms, nor a 2 s one at
-- 2.01 s).
CREATE OR REPLACE MACRO above_baseline(p99_ms) AS
    greatest(p99_ms * getvariable('spike_factor'), p99_ms + getvariable('spike_min_delta_ms'));

-- A method's window is calm when its p99 stays within calm_factor of the method's typical
-- window p99 (and 5 ms): only calm windows' requests make the baseline.
CREATE OR REPLACE MACRO calm(p99_ms, typical_p99_ms) AS
    p99_ms <= greatest(typical_p99_ms * getvariable('calm_factor'), typical_p99_ms + 5);

-- A request is slow when it exceeds its method's baseline p99 by 10% and 5 ms (a p99
-- estimated from one capture is noisy; the margin is the one the lab's ground truth uses).
CREATE OR REPLACE MACRO slow_threshold(p99_ms) AS
    greatest(1.1 * p99_ms, p99_ms + 5);

-- RTT inflation over the path's floor that counts as queueing: at least queue_min_ms, and
-- at least queue_floor_share of the floor (on a long path a few ms of jitter is not a queue).
CREATE OR REPLACE MACRO queued(inflation_ms, floor_ms) AS
    inflation_ms >= greatest(getvariable('queue_min_ms'), getvariable('queue_floor_share') * coalesce(floor_ms, 0));

-- A TCP event that resent bytes the capture saw before (whatever told the sender to):
-- retransmission, fast_retransmission or rto_retransmission (not spurious ones).
CREATE OR REPLACE MACRO resent(kind) AS
    kind IN ('retransmission', 'fast_retransmission', 'rto_retransmission');

-- Any resend of bytes the capture saw before, the spurious ones (the receiver had them) too.
CREATE OR REPLACE MACRO any_resend(kind) AS
    resent(kind) OR kind = 'spurious_retransmission';

-- A TCP event that shows something went wrong with a direction's data on its way: a resend,
-- a hole, an out-of-order arrival or a duplicate ACK.
CREATE OR REPLACE MACRO troubled_kind(kind) AS
    any_resend(kind) OR kind IN ('lost_segment', 'out_of_order', 'dup_ack');

-- A TCP event that counts as a loss of the request's bytes: a resend, a hole at the capture
-- point, or a lost ACK (request_evidence's ack_loss).
CREATE OR REPLACE MACRO loss_kind(kind) AS
    resent(kind) OR kind IN ('lost_segment', 'ack_loss');

-- The longest a receiver holds an ACK (Linux TCP_DELACK_MAX, 200 ms): an ACK later than
-- that was late for another reason.
CREATE OR REPLACE MACRO delayed_ack_max_ms() AS 200.0;

-- Header bytes a shaper or policer meters with each segment's payload: Ethernet (14),
-- IPv4 (20) and TCP with timestamps (32).
CREATE OR REPLACE MACRO header_bytes() AS 66;

-- The numbers lo, lo + 1, ... up to hi (excluded) of a span's seconds (per_s 1) or
-- 100 ms buckets (per_s 10), for joining rows to the spans they fall in by equality and
-- then the exact range (a range join alone pairs every span of a connection with every
-- row of it): at most an hour of them. A longer span is a clock that jumped while it
-- was open (a capture stamped 1970 for a while from then on): its first hour is looked
-- at, not the decades in between, which would be billions of rows.
CREATE OR REPLACE MACRO span_range(lo, hi, per_s) AS range(lo, least(hi, lo + 3600 * per_s));

-- The whole seconds a time span touches (epoch seconds), as span_range.
CREATE OR REPLACE MACRO seconds_between(lo, hi) AS
    span_range(epoch_ns(lo) // 1000000000, greatest(epoch_ns(hi), epoch_ns(lo)) // 1000000000 + 1, 1);

-- A request is in a compared period: started in [since_ns, until_ns) (null: open) and from
-- one of capture_ids (null: any capture).
CREATE OR REPLACE MACRO in_period(started_at, capture_id, since_ns, until_ns, capture_ids) AS
    (since_ns IS NULL OR epoch_ns(started_at) >= since_ns)
    AND (until_ns IS NULL OR epoch_ns(started_at) < until_ns)
    AND (capture_ids IS NULL OR list_contains(capture_ids, capture_id))
    AND NOT (since_ns IS NULL AND until_ns IS NULL AND capture_ids IS NULL);

-- A sum of durations in ms that does not depend on the order of its rows: DuckDB adds a
-- group's rows in the order its threads hand them over, float addition is not associative,
-- and the same capture gave sums a unit in the last place apart run to run. Summed as
-- whole ns (what the durations were measured in), exactly. Rows to leave out: NULL.
CREATE OR REPLACE MACRO sum_ms(ms) AS
    sum(CAST(round(ms * 1e6) AS BIGINT)) / 1e6;
