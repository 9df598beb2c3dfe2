"""The decrypted TLS path against the cleartext one, the same traffic both ways.

Python's HTTP/1.1 server streams SSE token events (64 events of ~100 bytes per request,
no delays) to a keep-alive client, once in clear and once over TLS 1.3 (OpenSSL through
Python's ssl, the client writing the key log), each captured by tcpdump on loopback
(root). Then ``tailtap analyze FILE`` (with ``--keylog`` for TLS) runs ``--runs`` times on
each, alternating, as whole processes; the medians of CPU seconds (user + sys, from wait4)
and their ratio are written to bench/results/tls.md. The bar: decrypted within 2x of
cleartext.

Usage: sudo python bench/bench_tls.py [--requests 400] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAILTAP = str(Path(sys.executable).parent / "tailtap")
EVENTS = 64


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(EVENTS):
            ev = b'data: {"choices":[{"delta":{"content":" tok%d"}}],"model":"bench"}\n\n' % i
            self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, *args) -> None:
        pass


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)  # fmt: skip
    return cert, key


def make_capture(out: Path, requests: int, tls: bool, tmp: Path) -> Path | None:
    """Serve and fetch ``requests`` streams, captured; the key log's path when TLS."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port = server.server_address[1]
    keylog = None
    client_ctx = None
    if tls:
        cert, key = _self_signed(tmp)
        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(cert, key)
        server.socket = sctx.wrap_socket(server.socket, server_side=True)
        client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
        keylog = tmp / "keys.txt"
        client_ctx.keylog_filename = str(keylog)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-U", "-n", "-s", "70000", "-B", "65536", "-w", str(out),
                             f"tcp port {port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    while b"listening on" not in dump.stderr.readline():
        pass
    import http.client

    conn = (http.client.HTTPSConnection("127.0.0.1", port, context=client_ctx) if tls
            else http.client.HTTPConnection("127.0.0.1", port))  # fmt: skip
    body = b'{"model": "bench", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    for _ in range(requests):
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        while resp.read(65536):
            pass
    conn.close()
    time.sleep(0.3)
    dump.send_signal(signal.SIGINT)
    dump.wait(10)
    server.shutdown()
    return keylog


def cpu_seconds(argv: list[str]) -> float:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} failed")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tls.md")
    args = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("tcpdump") is None:
        sys.exit("needs root and tcpdump (it captures on loopback)")
    with tempfile.TemporaryDirectory(prefix="tailtap-bench-tls-") as d:
        tmp = Path(d)
        clear, secret = tmp / "clear.pcap", tmp / "tls.pcap"
        make_capture(clear, args.requests, False, tmp)
        keylog = make_capture(secret, args.requests, True, tmp)
        rows = {"cleartext": [], "TLS 1.3 decrypted": [], "TLS 1.3 without keys": []}
        for i in range(args.runs):
            for label, argv in (
                ("cleartext", [TAILTAP, "analyze", str(clear), "--out", str(tmp / f"c{i}")]),
                ("TLS 1.3 decrypted", [TAILTAP, "analyze", str(secret), "--keylog", str(keylog), "--out", str(tmp / f"t{i}")]),
                ("TLS 1.3 without keys", [TAILTAP, "analyze", str(secret), "--out", str(tmp / f"k{i}")]),
            ):
                rows[label].append(cpu_seconds(argv))
        base = statistics.median(rows["cleartext"])
        packets = int(subprocess.run(["capinfos", "-c", "-M", str(secret)], capture_output=True, text=True).stdout.split()[-1]) \
            if shutil.which("capinfos") else None
    lines = [f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores: "
             f"{args.requests} SSE streams of {EVENTS} events over one keep-alive connection "
             f"({packets or '?'} packets with TLS); `tailtap analyze` (ingest and report), CPU seconds, "
             f"median of {args.runs} runs, alternating.", "",
             "| input | CPU s (median) | vs cleartext |", "|---|---|---|"]  # fmt: skip
    for label, vals in rows.items():
        med = statistics.median(vals)
        lines.append(f"| {label} | {med:.2f} | {med / base:.2f}x |")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
