"""The fields of the HTTP/2 parser's objects that its C fast path (``_speedups.c``) reads
and writes in place, declared once.

``_layout.h`` is generated from this module (``TAILTAP_PURE_PYTHON=1 python -m
parsers.h2._layout > parsers/h2/_layout.h``, then ``pip install -e .`` rebuilds the
extension: the one built before refuses the changed classes, and HTTP/2 then runs in pure
Python with a warning; a test checks the header is current): for each object below, an enum of its
fields (``PREFIX_FIELD``, in this order, and ``PREFIX_N``) and the array of their names. At
``init()`` the C module looks each name up among the class's ``__slots__`` members (their
offsets); a name a class no longer has is an error there, not a wrong read. ``Stream`` and
``GrpcSplitter`` are also built in C without running ``__init__``: their templates give every
slot, in ``__slots__`` order, with the value ``__init__`` gives it; when a class's
``__slots__`` differ from its template, C calls the class instead.

The shared records (``PayloadChunk``, ``RequestRecord``) are those of ``parsers.records``:
their field names come from the dataclasses themselves.
"""

from __future__ import annotations

from dataclasses import fields

from parsers.records import RequestRecord

# (C prefix, C names array, what it describes, field names)
LAYOUTS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("C", "chunk_names", "parsers.records.PayloadChunk",
     ("direction", "data", "ts_ns", "frame_no", "stream_offset", "gap_before", "conn_key")),
    ("D", "dir_names", "_state._Dir: a TCP direction's framing state",
     ("plain", "base", "max_known", "max_len", "frames", "block", "hpack", "synced", "buf", "marks", "data_left",
      "data_stream", "pad_left", "data_sid", "data_flags", "data_len", "data_payload")),
    ("S", "stream_names", "_streams.Stream: slots holding a [to_server, to_client] pair",
     ("splitter", "msgs", "first_msg_ts", "first_msg_off", "end_ts", "msg_before_end", "msg_after_first",
      "last_msg_ts", "data_frames", "first_data_ts", "first_data_off", "last_data_ts", "data_bytes",
      "last_off", "hdr", "hdr_ts", "trailers", "end_off", "mode")),
    ("X", "stream_x_names", "_streams.Stream: its other slots",
     ("rst_ts", "mid", "trailers_only", "opener", "sid", "web_trailers", "rst_code", "headers_known")),
    ("G", "splitter_names", "parsers.grpc.GrpcSplitter",
     ("probing", "left", "hdr", "keep_trailer", "_dead", "_flag", "_size", "trailer")),
    ("F", "flow_names", "_flow.FlowState: a direction's flow-control windows",
     ("known", "conn", "streams", "blocked", "initial")),
    ("H", "decoder_names", "_hpack.TolerantDecoder: its header-block cache",
     ("gen", "cache", "cache_gen")),
    ("B", "block_names", "_hpack.DecodedBlock",
     ("unknown", "error", "as_dict_memo")),
    ("R", "record_names", "parsers.records.RequestRecord (every field, in order: C fills them all)",
     tuple(f.name for f in fields(RequestRecord))),
)

# Initial values of the templates (C's V_ kinds)
KINDS = ("SID", "NONE", "FALSE", "TRUE", "MINUS1", "ZERO", "PAIR_NONE", "PAIR_ZERO", "PAIR_FALSE",
         "PAIR_HTTP", "BYTEARRAY", "LIST", "WEB")

# Stream(sid): every slot in __slots__ order, with what __init__ gives it
STREAM_TEMPLATE: tuple[tuple[str, str], ...] = (
    ("sid", "SID"), ("promised", "FALSE"), ("mid", "FALSE"), ("headers_known", "TRUE"),
    ("hdr", "PAIR_NONE"), ("hdr_ts", "PAIR_NONE"), ("trailers", "PAIR_NONE"), ("end_ts", "PAIR_NONE"),
    ("end_off", "PAIR_NONE"), ("last_off", "PAIR_NONE"), ("rst_ts", "NONE"), ("rst_code", "NONE"),
    ("rst_dir", "MINUS1"), ("rst_off", "NONE"), ("mode", "PAIR_HTTP"), ("splitter", "PAIR_NONE"),
    ("msgs", "PAIR_ZERO"), ("first_msg_ts", "PAIR_NONE"), ("last_msg_ts", "PAIR_NONE"),
    ("first_msg_off", "PAIR_NONE"), ("data_frames", "PAIR_ZERO"), ("first_data_ts", "PAIR_NONE"),
    ("last_data_ts", "PAIR_NONE"), ("first_data_off", "PAIR_NONE"), ("data_bytes", "PAIR_ZERO"),
    ("msg_before_end", "PAIR_FALSE"), ("msg_after_first", "PAIR_FALSE"), ("trailers_only", "FALSE"),
    ("informational", "FALSE"), ("web_trailers", "NONE"), ("opener", "MINUS1"),
)  # fmt: skip

# GrpcSplitter(keep_trailer=web)
SPLITTER_TEMPLATE: tuple[tuple[str, str], ...] = (
    ("hdr", "BYTEARRAY"), ("left", "MINUS1"), ("_size", "ZERO"), ("_flag", "ZERO"), ("probing", "FALSE"),
    ("confirmed", "TRUE"), ("_pending", "LIST"), ("_dead", "FALSE"), ("keep_trailer", "WEB"),
    ("trailer", "BYTEARRAY"),
)  # fmt: skip


def c_header() -> str:
    """The text of ``_layout.h``."""
    out = [
        "/* Generated from parsers/h2/_layout.py (TAILTAP_PURE_PYTHON=1 python -m parsers.h2._layout > parsers/h2/_layout.h):",
        " * the fields of the HTTP/2 parser's objects the C fast path reads and writes. Do not edit. */",
        "#ifndef TAILTAP_H2_LAYOUT_H",
        "#define TAILTAP_H2_LAYOUT_H",
    ]
    for prefix, array, what, names in LAYOUTS:
        out.append(f"/* {what} */")
        out.append("enum { " + ", ".join(f"{prefix}_{n.lstrip('_').upper()}" for n in names) + f", {prefix}_N }};")
        out.append(f"static const char *{array}[{prefix}_N] = {{" + ", ".join(f'"{n}"' for n in names) + "};")
    out.append("/* template values: what __init__ gives a slot */")
    out.append("enum { " + ", ".join(f"V_{k}" for k in KINDS) + " };")
    out.append("typedef struct {\n    const char *name;\n    int kind;\n} tmpl_t;")
    for array, template in (("stream_tmpl", STREAM_TEMPLATE), ("splitter_tmpl", SPLITTER_TEMPLATE)):
        out.append(f"static const tmpl_t {array}[] = {{" + ", ".join(f'{{"{n}", V_{k}}}' for n, k in template) + "};")
    out.append("#endif")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(c_header(), end="")
