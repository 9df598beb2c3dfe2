"""The lab's server process: reads its config and serves the LLM-like service in the
protocol it names (``python -m telemetry.lab.serve CONFIG.json``, started by the runner in
the server namespace): gRPC on grpcio (server.py), the OpenAI-compatible protocols on
uvicorn or hypercorn (openai_server.py); over TLS when the config has ``tls``.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` dumps every thread's stack
    with open(argv[0]) as f:
        cfg = json.load(f)
    if cfg.get("protocol", "grpc") != "grpc":
        from telemetry.lab.openai_server import serve
    else:
        from telemetry.lab.server import serve
    serve(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
