"""The tables of the tailtap store: every column of every table, documented here.

This is the one schema module (Zeek-style logs): the store writes exactly these
columns, the DuckDB views read them, and `tailtap schema` prints this documentation.

Conventions
-----------
* Times are ``timestamp[ns, UTC]`` (null when the event was not seen in the capture).
* Durations carry their unit in the name (``ttft_ms``, ``recovery_ms``) and are float ms.
* Directions: ``to_server`` / ``to_client`` for TCP-level rows, ``request`` / ``response``
  for messages; the client is whoever opened the connection (SYN sender), or the HTTP/2
  preface sender when the SYN was not captured (``client_known`` says which).
* Every table carries ``capture_id`` (the content hash of the capture file it came from,
  the idempotency key) and the Hive partition columns ``date`` (YYYY-MM-DD, UTC) and
  ``hour`` (00-23) taken from the row's main time column (``PARTITION_TIME``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from parsers.vocabulary import H2EventKind, HistoryLetter, ResendPrompt, RttSource, TcpEventKind
from parsers.vocabulary import describe as vocabulary_doc

if TYPE_CHECKING:
    import pyarrow as pa

# Column types, named as Arrow prints them. The Arrow schemas (TABLES) are built from them
# on first use: reading the store (`tailtap sql`, `report`) needs the columns' names and
# types only, not pyarrow and numpy (a third of `sql`'s start-up).
STRING, BOOL, INT8, INT32, INT64, FLOAT64 = "string", "bool", "int8", "int32", "int64", "double"
TS = "timestamp[ns, tz=UTC]"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # one of the names above
    doc: str
    # stored compressed (zstd); False for values zstd barely shrinks, whose compression
    # only costs the writer CPU. Integer and time columns are delta-encoded instead, never
    # zstd (telemetry/store/parquet.py)
    compress: bool = True


def _table(*cols: Column) -> tuple[Column, ...]:
    return cols


C = Column
_CAPTURE_ID = C("capture_id", STRING, "Content hash (SHA-256, first 128 bits, hex) of the capture file the row came from.")
_CONN_ID = C("conn_id", STRING, "Stable connection id: 'C' + hash of the 4-tuple, the first packet time and the capture (the first file of a rotated run): the same traffic in two captures is two connections.")

CAPTURES = _table(
    _CAPTURE_ID,
    C("path", STRING, "Path of the capture file as given to `tailtap analyze`."),
    C("format", STRING, "Container format: pcap or pcapng (gzip-compressed files are unwrapped first)."),
    C("compressed", BOOL, "True when the file was gzip-compressed."),
    C("link_types", STRING, "Link types seen, as 'LINKTYPE:packets' pairs separated by commas."),
    C("packets", INT64, "Packets read."),
    C("bytes", INT64, "Captured bytes of those packets."),
    C("tcp_packets", INT64, "Packets that decoded as TCP."),
    C("ip_fragments", INT64, "IP fragments seen (counted, not reassembled)."),
    C("truncated_packets", INT64, "Packets cut by the snaplen inside their headers."),
    C("undecodable_packets", INT64, "Packets of unknown link types or malformed headers."),
    C("time_outliers", INT64, "Packets stamped more than 60 s off the times of the 8 packets around them (a lost "
      "clock, a bad merge), read at those packets' median time; null in stores written before it was counted."),
    C("out_of_time_order", INT64, "Packets read earlier than recorded: a capture over several queues records some "
      "after packets stamped later; each batch of packets is read in time order (not across a step back of more "
      "than 100 ms: the clock's). Null in stores written before it was counted."),
    C("first_ts", TS, "Time of the first packet."),
    C("last_ts", TS, "Time of the last packet."),
    C("kernel_drops", INT64, "Packets the capturing kernel reported dropped (pcapng ISB), null when unknown."),
    C("issues", INT64, "Problems found in the file (truncated record, bad block, resyncs...); see the warnings printed."),
    C("connections", INT64, "TCP connections found."),
    C("requests", INT64, "HTTP requests (HTTP/2 streams and HTTP/1.1 exchanges) found."),
    C("parser_version", STRING, "tailtap version that wrote the rows."),
    C("ingest_time", TS, "When the capture was ingested."),
)

CONNECTIONS = _table(
    _CAPTURE_ID,
    _CONN_ID,
    C("client_addr", STRING, "Client IP address (opened the connection or sent the HTTP/2 preface)."),
    C("client_port", INT32, "Client TCP port."),
    C("server_addr", STRING, "Server IP address."),
    C("server_port", INT32, "Server TCP port."),
    C("client_known", BOOL, "True when the SYN or the HTTP/2 preface showed who the client is; false when guessed from ports."),
    C("ip_version", INT8, "IP version of the connection: 4 or 6."),
    C("start", TS, "First packet of the connection in the capture."),
    C("end", TS, "Last packet of the connection in the capture."),
    C("duration_ms", FLOAT64, "end - start in ms."),
    C("packets_to_server", INT64, "Packets client -> server."),
    C("packets_to_client", INT64, "Packets server -> client."),
    C("bytes_to_server", INT64, "TCP payload bytes client -> server (each byte once)."),
    C("bytes_to_client", INT64, "TCP payload bytes server -> client (each byte once)."),
    C("syn_seen", BOOL, "The three-way handshake was captured."),
    C("handshake_rtt_ms", FLOAT64, "SYN -> ACK of the handshake, ms (null without handshake)."),
    C("rtt_min_ms_to_server", FLOAT64, "Min RTT of samples on client->server data (capture point <-> server path), ms."),
    C("rtt_p50_ms_to_server", FLOAT64, "Median of those samples (on a connection with more than 16,384 in the direction: of a uniform sample of 16,384 of them), ms."),
    C("rtt_p99_ms_to_server", FLOAT64, "99th percentile of those samples (the same uniform sample past 16,384), ms."),
    C("rtt_min_ms_to_client", FLOAT64, "Min RTT of samples on server->client data (capture point <-> client path), ms."),
    C("rtt_p50_ms_to_client", FLOAT64, "Median of those samples (on a connection with more than 16,384 in the direction: of a uniform sample of 16,384 of them), ms."),
    C("rtt_p99_ms_to_client", FLOAT64, "99th percentile of those samples (the same uniform sample past 16,384), ms."),
    C("capture_side", STRING, "Which end the capture point is near: 'server', 'client' or 'middle'/'unknown' (from the two RTT floors; --capture-side sets it). path_rtt measures the path on the far side of it."),
    C("retransmissions_to_server", INT64, "Retransmitted segments client -> server."),
    C("retransmissions_to_client", INT64, "Retransmitted segments server -> client."),
    C("loss_bursts_to_server", INT64, "Loss bursts (runs of consecutive lost segments) client -> server."),
    C("loss_bursts_to_client", INT64, "Loss bursts server -> client."),
    C("longest_loss_burst", INT64, "Segments in the longest loss burst, either direction."),
    C("out_of_order_to_server", INT64, "Segments that arrived late without being retransmissions, client -> server."),
    C("out_of_order_to_client", INT64, "Same, server -> client."),
    C("zero_windows_to_server", INT64, "Zero-window advertisements by the server (client -> server data blocked)."),
    C("zero_windows_to_client", INT64, "Zero-window advertisements by the client (server -> client data blocked)."),
    C("capture_loss_bytes", INT64, "Bytes the peers acknowledged that the capture never saw (capture loss, not network loss)."),
    C("protocol", STRING, "Application protocol: h2c, http1, h2-tls / http1-tls (TLS, decrypted with keys), tls (TLS read without keys: requests estimated from its records) or unknown."),
    C("tls_version", STRING, "TLS version negotiated (TLS 1.2, TLS 1.3...), from the ServerHello; null when not TLS or the handshake was not seen."),
    C("tls_sni", STRING, "Server name the client asked for (ClientHello SNI)."),
    C("tls_alpn", STRING, "Application protocol negotiated by ALPN (h2, http/1.1...): the ServerHello's (TLS 1.2), the EncryptedExtensions' when decrypted (TLS 1.3), else the client's only offer."),
    C("tls_cipher", STRING, "Cipher suite chosen by the server."),
    C("tls_resumed", BOOL, "The session was resumed (TLS 1.3: a pre-shared key accepted; TLS 1.2: the server echoed the client's session id)."),
    C("tls_decrypted", BOOL, "The connection's records were decrypted with keys (a key log or the capture's Decryption Secrets Blocks)."),
    C("tls_note", STRING, "Why a TLS connection was not (or not wholly) decrypted: no key log, no keys for this session, an unsupported cipher suite, a record that did not decrypt, lost bytes."),
    C("requests", INT64, "Requests (HTTP/2 streams / HTTP/1.1 exchanges) on the connection."),
    C("history", STRING, "Compact history of what happened, Zeek-like: upper case = the client's packets or data, lower case = the server's; T, O, L, W, G, X and K repeat at the 10th, 100th... time. " + vocabulary_doc(HistoryLetter) + "."),
)

REQUESTS = _table(
    _CAPTURE_ID,
    _CONN_ID,
    C("stream_id", INT64, "HTTP/2 stream id (HTTP/1.1, and TLS estimated without keys: exchange index on the connection, from 0)."),
    C("client_addr", STRING, "Client IP address."),
    C("client_port", INT32, "Client TCP port."),
    C("server_addr", STRING, "Server IP address."),
    C("server_port", INT32, "Server TCP port."),
    C("protocol", STRING, "h2 or http1; h2-tls or http1-tls when decrypted from TLS; tls when estimated from TLS records without keys."),
    C("encrypted", BOOL, "The request travelled inside TLS (decrypted or estimated)."),
    C("estimated", BOOL, "The request was estimated from TLS record times and sizes, without keys: no path, status or message boundaries; method = the ALPN, authority = the SNI; kind tls_exchange (one exchange at a time: HTTP/1.1) or tls_burst (HTTP/2: what the connection did between two requests, a per-connection figure); its timings are estimates."),
    C("method", STRING, ":method (null when HPACK context was missing)."),
    C("path", STRING, ":path; for gRPC /package.Service/Method."),
    C("authority", STRING, ":authority (or Host)."),
    C("content_type", STRING, "Request content-type."),
    C("user_agent", STRING, "Request user-agent."),
    C("kind", STRING, "unary, server_stream, client_stream, bidi (gRPC, from what was observed), sse (text/event-stream response), ndjson (JSON-lines response, e.g. Ollama), http, or unknown."),
    C("request_start", TS, "First client HEADERS frame (HTTP/1.1: request head)."),
    C("request_end", TS, "Client END_STREAM (last request byte)."),
    C("response_headers", TS, "Server response HEADERS."),
    C("first_message", TS, "First response message (gRPC message / SSE event / DATA frame): time-to-first-token point. For SSE and JSON-lines streams, the first event carrying generated content (text, reasoning, tool-call name or arguments; an event of an unknown format counts): a role-only chunk or a ping is not a token."),
    C("last_message", TS, "Last response message."),
    C("end", TS, "Server END_STREAM (trailers) or RST_STREAM."),
    C("http_status", INT32, "HTTP response status (:status, or the HTTP/1.1 status line)."),
    C("grpc_status", INT32, "grpc-status from trailers (or Trailers-Only)."),
    C("grpc_message", STRING, "grpc-message."),
    C("grpc_encoding", STRING, "grpc-encoding of the response."),
    C("request_messages", INT64, "Request messages (gRPC) / DATA frames."),
    C("response_messages", INT64, "Response messages: gRPC messages, SSE / JSON-lines events (a 'data: [DONE]' sentinel is none), or DATA frames for plain HTTP."),
    C("request_bytes", INT64, "Request body bytes (DATA payload, padding excluded)."),
    C("response_bytes", INT64, "Response body bytes."),
    C("reset_code", INT64, "RST_STREAM error code when the stream was reset."),
    C("trailers_only", BOOL, "The response was a gRPC Trailers-Only response."),
    C("headers_known", BOOL, "False when HPACK context was missing (capture started mid-connection): some header values are unknown, timings are intact."),
    C("app_throttled", BOOL, "HTTP 429/503 or grpc-status RESOURCE_EXHAUSTED (8) / UNAVAILABLE (14)."),
    C("ttft_ms", FLOAT64, "Time to first token: request_end (or request_start) -> first_message, ms, at the capture point."),
    C("latency_ms", FLOAT64, "request_start -> end (or last seen response byte when end is missing), ms."),
    C("gap_p50_ms", FLOAT64, "Median gap between consecutive response messages, ms (of an LLM stream, between the events carrying generated content)."),
    C("gap_p99_ms", FLOAT64, "99th percentile of those gaps, ms."),
    C("max_gap_ms", FLOAT64, "Largest gap between consecutive response messages, ms."),
    C("first_message_acked", TS, "When the client's ACK covering the first response message's last byte was seen."),
    C("end_acked", TS, "When the client's ACK covering the response's last byte was seen."),
    C("ttft_client_est_ms", FLOAT64, "Client-side TTFT estimate: from ACK times, corrected by the capture-point-to-client half RTT floor, ms."),
    C("latency_client_est_ms", FLOAT64, "Client-side latency estimate (same method), ms."),
    C("first_byte", TS, "First response body byte (DATA frame payload / HTTP/1.1 body byte)."),
    C("ttfb_ms", FLOAT64, "Time to first byte: request_end (or request_start) -> first_byte, ms. For an LLM stream it ends at the first event whatever it carries (a role chunk), ttft_ms at the first generated content."),
    C("model", STRING, "LLM model, as the traffic names it: the response's (OpenAI / Anthropic / Ollama / TGI chunks, a JSON response), else the JSON request body's top-level 'model', else a KServe v2 path /v2/models/NAME/... or the KServe / Triton gRPC ModelInferRequest.model_name; null when nothing says."),
    C("finish_reason", STRING, "Why generation stopped, as the response says: OpenAI finish_reason, Anthropic stop_reason, Ollama done_reason, TGI details.finish_reason, Responses API incomplete reason or status."),
    C("prompt_tokens", INT64, "Prompt tokens as the response's usage says (usage.prompt_tokens / input_tokens, Ollama prompt_eval_count); null when not sent."),
    C("completion_tokens", INT64, "Generated tokens as the response says (usage.completion_tokens / output_tokens, Ollama eval_count, TGI generated_tokens, or the sum of per-event counts when every content event states its own); null when not sent."),
    C("tokens_per_s", FLOAT64, "Decode rate: (completion_tokens - 1) / (last_message - first_message) in seconds, the inverse of vLLM's time per output token; null without completion_tokens (or fewer than 2)."),
)

MESSAGES = _table(
    _CAPTURE_ID,
    _CONN_ID,
    C("stream_id", INT64, "HTTP/2 stream id."),
    C("direction", STRING, "request (client -> server) or response."),
    C("index", INT64, "0-based message index within the stream and direction."),
    C("ts", TS, "Capture time of the packet that completed the message (its last byte)."),
    C("acked_ts", TS, "When the receiver's ACK covering its last byte was seen (null if never)."),
    C("size", INT64, "Message payload bytes (without the 5-byte gRPC prefix)."),
    C("compressed", BOOL, "gRPC compressed flag."),
    # (measured milliseconds: zstd saved 8 % of their bytes on the realistic 1M capture and
    # was a fifth of the messages table's write)
    C("gap_ms", FLOAT64, "Time since the previous message of the same stream and direction, ms (null for the first). Of an LLM stream, only between events carrying generated content (null on the others).",
      compress=False),
    C("event", STRING, "What an SSE / JSON-lines event carries: content (generated text, reasoning, tool-call name or arguments), start (role chunk, message_start, response.created...), final (finish reason / usage without content), other (ping, content_block_stop...), error, or data (an event of a format not known); null for gRPC messages."),
    C("tokens", INT64, "Tokens the event carries when the stream says (OpenAI logprobs entries or the growth of per-chunk usage, TGI: one per token event); null when not said (a chunk is not always one token)."),
)

TCP_EVENTS = _table(
    _CAPTURE_ID,
    _CONN_ID,
    C("ts", TS, "Capture time of the packet that showed the event."),
    C("direction", STRING, "to_server or to_client: direction of the data concerned (for ACK-side events such as dup_ack, the data being acknowledged)."),
    C("kind", STRING, vocabulary_doc(TcpEventKind) + "."),
    C("seq", INT64, "Relative sequence number (0 = first payload byte of that direction)."),
    C("bytes", INT64, "Payload bytes concerned."),
    C("frame_no", INT64, "Packet number in the capture file (1-based), to find it in Wireshark."),
    C("recovery_ms", FLOAT64, "For loss events: time from the hole first seen (or original send) to the segment that filled it, ms."),
    C("burst_id", INT64, "Loss burst the event belongs to (consecutive lost segments of one direction), numbered 1, 2, ... within the connection: (conn_id, burst_id) names a burst."),
    C("prompt", STRING, "Resends only (the retransmission kinds, spurious_retransmission too): what made the sender resend: " + vocabulary_doc(ResendPrompt) + "."),
)

RTT_SAMPLES = _table(
    _CAPTURE_ID,
    _CONN_ID,
    C("ts", TS, "Time of the packet that completed the sample (the ACK / echo)."),
    C("direction", STRING, "Direction of the data whose acknowledgement gave the sample: to_server samples measure capture point <-> server, to_client capture point <-> client."),
    C("rtt_ms", FLOAT64, "Round-trip time, ms."),
    C("source", STRING, vocabulary_doc(RttSource) + "."),
)

H2_EVENTS = _table(
    _CAPTURE_ID,
    _CONN_ID,
    C("ts", TS, "Capture time of the frame."),
    C("stream_id", INT64, "Stream id (0 for the connection)."),
    C("direction", STRING, "to_server or to_client: who sent the frame."),
    C("kind", STRING, vocabulary_doc(H2EventKind) + "."),
    C("value", INT64, "Kind-specific value: increment, error code, stream id, bytes skipped..."),
    C("detail", STRING, "Kind-specific text (settings values, GOAWAY last stream id...)."),
    C("duration_ms", FLOAT64, "For flow_control_blocked: how long the sender stayed blocked, ms."),
)

FLOW_RATES = _table(
    _CAPTURE_ID,
    _CONN_ID,
    C("ts", TS, "Start of the bucket (buckets of bucket_ms, aligned on the epoch)."),
    C("bucket_ms", INT32, "Bucket length, ms."),
    C("direction", STRING, "to_server or to_client: direction of the data."),
    C("bytes_sent", INT64, "New payload bytes first seen at the capture point in the bucket (retransmissions excluded)."),
    C("packets_sent", INT64, "Segments that carried those new bytes (wire overhead: a shaper or policer meters headers too)."),
    C("bytes_acked", INT64, "Payload bytes of that direction newly acknowledged by the receiver in the bucket: the delivery rate."),
)

SEGMENT_SENDS = _table(
    _CAPTURE_ID,
    _CONN_ID,
    C("ts", TS, "Capture time of the data segment."),
    C("direction", STRING, "to_server or to_client: direction of the data."),
    C("seq", INT64, "Relative sequence number of its first payload byte (0 = first payload byte of that direction, as in tcp_events)."),
    C("bytes", INT64, "Payload bytes (for kind 'new', the bytes first seen in it; TCP/IP headers not counted)."),
    C("kind", STRING, "new (bytes sent for the first time), retransmission (bytes sent before: that earlier send was lost), spurious_retransmission (bytes the receiver already had)."),
)
# segment_sends is loss-gated: only the data segments a sender put on a path (sender
# address -> receiver address, all connections between the two) while that path direction
# was losing: from up to 3 s before a retransmission (as far back as the pipeline still
# held the segments) to 3 s after the last one. A capture without retransmissions has no
# rows. It is what the per-segment token-bucket simulation of the policer test reads
# (queries/policer_bucket.sql); see telemetry/ingest/sendlog.py.

COLUMNS: dict[str, tuple[Column, ...]] = {
    "captures": CAPTURES,
    "connections": CONNECTIONS,
    "requests": REQUESTS,
    "messages": MESSAGES,
    "tcp_events": TCP_EVENTS,
    "rtt_samples": RTT_SAMPLES,
    "h2_events": H2_EVENTS,
    "flow_rates": FLOW_RATES,
    "segment_sends": SEGMENT_SENDS,
}

# The time column each table is Hive-partitioned by (date=YYYY-MM-DD/hour=HH).
PARTITION_TIME: dict[str, str] = {
    "captures": "first_ts",
    "connections": "start",
    "requests": "request_start",
    "messages": "ts",
    "tcp_events": "ts",
    "rtt_samples": "ts",
    "h2_events": "ts",
    "flow_rates": "ts",
    "segment_sends": "ts",
}

# Rows whose partition time is null (e.g. a request whose HEADERS were never seen)
# fall back to these columns, in order.
PARTITION_FALLBACK: dict[str, tuple[str, ...]] = {
    "requests": ("response_headers", "first_message", "end"),
    "connections": ("end",),
    "captures": ("ingest_time",),
}


def describe(table: str) -> list[tuple[str, str, str]]:
    """(column, type, doc) rows of a table, for `tailtap schema` and the README."""
    return [(c.name, c.type, c.doc) for c in COLUMNS[table]]


def _arrow_type(name: str) -> pa.DataType:
    import pyarrow as pa

    if name == TS:
        return pa.timestamp("ns", tz="UTC")
    return {STRING: pa.string, BOOL: pa.bool_, INT8: pa.int8, INT32: pa.int32, INT64: pa.int64,
            FLOAT64: pa.float64}[name]()


_arrow: dict[str, pa.Schema] = {}


def __getattr__(name: str) -> object:
    """``TABLES``: the Arrow schema of every table (each field's doc in its metadata),
    built from COLUMNS at the first use."""
    if name != "TABLES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _arrow:
        import pyarrow as pa

        for table, cols in COLUMNS.items():
            _arrow[table] = pa.schema([pa.field(c.name, _arrow_type(c.type), metadata={"doc": c.doc}) for c in cols])
    return _arrow
