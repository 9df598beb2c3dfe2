/* Generated from parsers/h2/_layout.py (TAILTAP_PURE_PYTHON=1 python -m parsers.h2._layout > parsers/h2/_layout.h):
 * the fields of the HTTP/2 parser's objects the C fast path reads and writes. Do not edit. */
#ifndef TAILTAP_H2_LAYOUT_H
#define TAILTAP_H2_LAYOUT_H
/* parsers.records.PayloadChunk */
enum { C_DIRECTION, C_DATA, C_TS_NS, C_FRAME_NO, C_STREAM_OFFSET, C_GAP_BEFORE, C_CONN_KEY, C_N };
static const char *chunk_names[C_N] = {"direction", "data", "ts_ns", "frame_no", "stream_offset", "gap_before", "conn_key"};
/* _state._Dir: a TCP direction's framing state */
enum { D_PLAIN, D_BASE, D_MAX_KNOWN, D_MAX_LEN, D_FRAMES, D_BLOCK, D_HPACK, D_SYNCED, D_BUF, D_MARKS, D_DATA_LEFT, D_DATA_STREAM, D_PAD_LEFT, D_DATA_SID, D_DATA_FLAGS, D_DATA_LEN, D_DATA_PAYLOAD, D_N };
static const char *dir_names[D_N] = {"plain", "base", "max_known", "max_len", "frames", "block", "hpack", "synced", "buf", "marks", "data_left", "data_stream", "pad_left", "data_sid", "data_flags", "data_len", "data_payload"};
/* _streams.Stream: slots holding a [to_server, to_client] pair */
enum { S_SPLITTER, S_MSGS, S_FIRST_MSG_TS, S_FIRST_MSG_OFF, S_END_TS, S_MSG_BEFORE_END, S_MSG_AFTER_FIRST, S_LAST_MSG_TS, S_DATA_FRAMES, S_FIRST_DATA_TS, S_FIRST_DATA_OFF, S_LAST_DATA_TS, S_DATA_BYTES, S_LAST_OFF, S_HDR, S_HDR_TS, S_TRAILERS, S_END_OFF, S_MODE, S_N };
static const char *stream_names[S_N] = {"splitter", "msgs", "first_msg_ts", "first_msg_off", "end_ts", "msg_before_end", "msg_after_first", "last_msg_ts", "data_frames", "first_data_ts", "first_data_off", "last_data_ts", "data_bytes", "last_off", "hdr", "hdr_ts", "trailers", "end_off", "mode"};
/* _streams.Stream: its other slots */
enum { X_RST_TS, X_MID, X_TRAILERS_ONLY, X_OPENER, X_SID, X_WEB_TRAILERS, X_RST_CODE, X_HEADERS_KNOWN, X_N };
static const char *stream_x_names[X_N] = {"rst_ts", "mid", "trailers_only", "opener", "sid", "web_trailers", "rst_code", "headers_known"};
/* parsers.grpc.GrpcSplitter */
enum { G_PROBING, G_LEFT, G_HDR, G_KEEP_TRAILER, G_DEAD, G_FLAG, G_SIZE, G_TRAILER, G_N };
static const char *splitter_names[G_N] = {"probing", "left", "hdr", "keep_trailer", "_dead", "_flag", "_size", "trailer"};
/* _flow.FlowState: a direction's flow-control windows */
enum { F_KNOWN, F_CONN, F_STREAMS, F_BLOCKED, F_INITIAL, F_N };
static const char *flow_names[F_N] = {"known", "conn", "streams", "blocked", "initial"};
/* _hpack.TolerantDecoder: its header-block cache */
enum { H_GEN, H_CACHE, H_CACHE_GEN, H_N };
static const char *decoder_names[H_N] = {"gen", "cache", "cache_gen"};
/* _hpack.DecodedBlock */
enum { B_UNKNOWN, B_ERROR, B_AS_DICT_MEMO, B_N };
static const char *block_names[B_N] = {"unknown", "error", "as_dict_memo"};
/* parsers.records.RequestRecord (every field, in order: C fills them all) */
enum { R_CONN_KEY, R_STREAM_ID, R_METHOD, R_PATH, R_AUTHORITY, R_SCHEME, R_CONTENT_TYPE, R_USER_AGENT, R_KIND, R_REQUEST_START, R_REQUEST_END, R_RESPONSE_HEADERS, R_FIRST_MESSAGE, R_LAST_MESSAGE, R_END, R_HTTP_STATUS, R_GRPC_STATUS, R_GRPC_MESSAGE, R_GRPC_ENCODING, R_REQUEST_MESSAGES, R_RESPONSE_MESSAGES, R_REQUEST_BYTES, R_RESPONSE_BYTES, R_RESET_CODE, R_TRAILERS_ONLY, R_HEADERS_KNOWN, R_FIRST_MESSAGE_END_OFFSET, R_END_OFFSET, R_PROTOCOL, R_FIRST_BYTE, R_MODEL, R_FINISH_REASON, R_PROMPT_TOKENS, R_COMPLETION_TOKENS, R_N };
static const char *record_names[R_N] = {"conn_key", "stream_id", "method", "path", "authority", "scheme", "content_type", "user_agent", "kind", "request_start", "request_end", "response_headers", "first_message", "last_message", "end", "http_status", "grpc_status", "grpc_message", "grpc_encoding", "request_messages", "response_messages", "request_bytes", "response_bytes", "reset_code", "trailers_only", "headers_known", "first_message_end_offset", "end_offset", "protocol", "first_byte", "model", "finish_reason", "prompt_tokens", "completion_tokens"};
/* template values: what __init__ gives a slot */
enum { V_SID, V_NONE, V_FALSE, V_TRUE, V_MINUS1, V_ZERO, V_PAIR_NONE, V_PAIR_ZERO, V_PAIR_FALSE, V_PAIR_HTTP, V_BYTEARRAY, V_LIST, V_WEB };
typedef struct {
    const char *name;
    int kind;
} tmpl_t;
static const tmpl_t stream_tmpl[] = {{"sid", V_SID}, {"promised", V_FALSE}, {"mid", V_FALSE}, {"headers_known", V_TRUE}, {"hdr", V_PAIR_NONE}, {"hdr_ts", V_PAIR_NONE}, {"trailers", V_PAIR_NONE}, {"end_ts", V_PAIR_NONE}, {"end_off", V_PAIR_NONE}, {"last_off", V_PAIR_NONE}, {"rst_ts", V_NONE}, {"rst_code", V_NONE}, {"rst_dir", V_MINUS1}, {"rst_off", V_NONE}, {"mode", V_PAIR_HTTP}, {"splitter", V_PAIR_NONE}, {"msgs", V_PAIR_ZERO}, {"first_msg_ts", V_PAIR_NONE}, {"last_msg_ts", V_PAIR_NONE}, {"first_msg_off", V_PAIR_NONE}, {"data_frames", V_PAIR_ZERO}, {"first_data_ts", V_PAIR_NONE}, {"last_data_ts", V_PAIR_NONE}, {"first_data_off", V_PAIR_NONE}, {"data_bytes", V_PAIR_ZERO}, {"msg_before_end", V_PAIR_FALSE}, {"msg_after_first", V_PAIR_FALSE}, {"trailers_only", V_FALSE}, {"informational", V_FALSE}, {"web_trailers", V_NONE}, {"opener", V_MINUS1}};
static const tmpl_t splitter_tmpl[] = {{"hdr", V_BYTEARRAY}, {"left", V_MINUS1}, {"_size", V_ZERO}, {"_flag", V_ZERO}, {"probing", V_FALSE}, {"confirmed", V_TRUE}, {"_pending", V_LIST}, {"_dead", V_FALSE}, {"keep_trailer", V_WEB}, {"trailer", V_BYTEARRAY}};
#endif
