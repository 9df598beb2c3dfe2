"""tshark as the reference decoder: per HTTP/2 stream facts from its JSON output.

Used by the end-to-end tests to compare tailtap's `requests` table with what tshark 4.0
decodes from the same capture (see ../shared/MACHINE-NOTES.md for the options).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

TSHARK = shutil.which("tshark")


@dataclass
class RefStream:
    ports: frozenset[int]
    stream_id: int
    server_port: int | None = None
    path: str | None = None
    status: int | None = None
    grpc_status: int | None = None
    content_type: str | None = None
    grpc_messages: list[int] = field(default_factory=list)  # frame times (ns) of response messages
    data_frames: list[int] = field(default_factory=list)  # frame times of response DATA frames with payload
    ambiguous: bool = False  # a packet carried DATA of several streams: message attribution unsure
    has_headers: bool = False

    @property
    def is_grpc(self) -> bool:
        return bool(self.content_type and self.content_type.startswith("application/grpc"))

    @property
    def messages(self) -> list[int]:
        return self.grpc_messages if self.is_grpc else self.data_frames


def _as_list(x) -> list:
    if x is None:
        return []
    return x if isinstance(x, list) else [x]


def _ns(epoch: str) -> int:
    return int(Decimal(epoch) * 1_000_000_000)


def h2_streams(path: Path, decode_ports: tuple[int, ...] = (), keylog: Path | None = None) -> dict[tuple[frozenset[int], int], RefStream]:
    """Every HTTP/2 stream tshark decodes, keyed by (the connection's two ports, stream id);
    TLS decrypted with ``keylog`` (tshark reads a pcapng's Decryption Secrets Blocks itself)."""
    cmd = [TSHARK or "tshark", "-r", str(path), "-o", "tcp.reassemble_out_of_order:TRUE"]
    if keylog is not None:
        cmd += ["-o", f"tls.keylog_file:{keylog}"]
    for port in decode_ports:
        cmd += ["-d", f"tcp.port=={port},http2"]
    cmd += ["-Y", "http2", "-T", "json", "--no-duplicate-keys", "-J", "frame tcp http http2 grpc"]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=120).stdout
    streams: dict[tuple[frozenset[int], int], RefStream] = {}
    for pkt in json.loads(out or b"[]"):
        layers = pkt["_source"]["layers"]
        ts = _ns(_as_list(layers["frame"]["frame.time_epoch"])[0])
        tcp = layers["tcp"]
        sport, dport = int(_as_list(tcp["tcp.srcport"])[0]), int(_as_list(tcp["tcp.dstport"])[0])
        ports = frozenset((sport, dport))
        data_streams: set[int] = set()
        for layer in _as_list(layers.get("http2")):
            for frame in _as_list(layer.get("http2.stream")):
                if "http2.streamid" not in frame:
                    continue
                sid = int(frame["http2.streamid"])
                ftype = int(frame.get("http2.type", -1))
                if sid == 0 or ftype not in (0, 1, 9):
                    continue
                st = streams.setdefault((ports, sid), RefStream(ports, sid))
                if ftype in (1, 9):
                    st.has_headers = True
                    for h in _as_list(frame.get("http2.header")):
                        name, value = h.get("http2.header.name"), h.get("http2.header.value")
                        if name == ":path":
                            st.path = value
                        elif name == ":status":
                            st.status = int(value)
                            st.server_port = sport
                        elif name == "grpc-status":
                            st.grpc_status = int(value)
                            st.server_port = sport
                        elif name == "content-type" and st.content_type is None:
                            st.content_type = value
                elif ftype == 0:
                    data_streams.add(sid)
                    if int(frame.get("http2.length", 0)) > 0 and sport == st.server_port:
                        st.data_frames.append(ts)
        grpc = _as_list(layers.get("grpc"))
        if grpc and data_streams:
            if len(data_streams) > 1:
                for sid in data_streams:
                    streams[(ports, sid)].ambiguous = True
                continue
            st = streams[(ports, next(iter(data_streams)))]
            if sport == st.server_port:
                # frame_type 1 is a gRPC-Web trailer frame, not a message
                st.grpc_messages.extend(
                    ts for g in grpc if "grpc.message_length" in g and g.get("grpc.frame_type", "0") == "0"
                )
    return {k: v for k, v in streams.items() if v.has_headers or v.data_frames}


def compare_streams(name: str, ref: dict[tuple[frozenset[int], int], RefStream], ours: dict) -> list[str]:
    """What differs between tshark's streams and tailtap's requests (rows keyed like
    ``ref``: path, http_status, grpc_status, response_messages, first_ns, last_ns)."""
    problems = []
    for key, st in sorted(ref.items(), key=lambda kv: (sorted(kv[0][0]), kv[0][1])):
        label = f"{name} ports {sorted(key[0])} stream {st.stream_id}"
        r = ours.get(key)
        if r is None:
            problems.append(f"{label}: missing in tailtap")
            continue
        if st.path is not None and r["path"] != st.path:
            problems.append(f"{label}: path {r['path']!r} != tshark {st.path!r}")
        if st.status is not None and r["http_status"] != st.status:
            problems.append(f"{label}: status {r['http_status']} != tshark {st.status}")
        if st.grpc_status is not None and r["grpc_status"] != st.grpc_status:
            problems.append(f"{label}: grpc-status {r['grpc_status']} != tshark {st.grpc_status}")
        if st.ambiguous:
            continue
        msgs = st.messages
        if r["response_messages"] != len(msgs):
            problems.append(f"{label}: {r['response_messages']} response messages != tshark {len(msgs)}")
        if msgs:
            if r["first_ns"] != msgs[0]:
                problems.append(f"{label}: first message at {r['first_ns']} != tshark frame {msgs[0]}")
            if r["last_ns"] != msgs[-1]:
                problems.append(f"{label}: last message at {r['last_ns']} != tshark frame {msgs[-1]}")
    return problems
