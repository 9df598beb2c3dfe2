"""The lab's load process: reads its config, picks the load generator for the service's
protocol and runs it (``python -m telemetry.lab.load CONFIG.json``, started by the runner in
the client namespace).

* gRPC: grpcio (client.py);
* gRPC over TLS with a key log: httpx (grpc_tls_client.py), since grpcio cannot write one;
* the OpenAI-compatible protocols: httpx (openai_client.py).
"""

from __future__ import annotations

import faulthandler
import gc
import json
import signal
import sys

from telemetry.lab.client import LoadGenerator


def generator(cfg: dict) -> LoadGenerator:
    if cfg.get("protocol", "grpc") != "grpc":
        from telemetry.lab.openai_client import OpenAILoadGenerator

        return OpenAILoadGenerator(cfg)
    if cfg.get("tls_keylog"):
        from telemetry.lab.grpc_tls_client import GrpcTlsLoadGenerator

        return GrpcTlsLoadGenerator(cfg)
    return LoadGenerator(cfg)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` dumps every thread's stack
    with open(argv[0]) as f:
        cfg = json.load(f)
    # Hard bound: whatever hangs, the process ends (with every thread's stack in its log).
    faulthandler.dump_traceback_later(float(cfg.get("max_runtime_s", 120)), exit=True)
    gen = generator(cfg)
    gen.connect()
    gc.freeze()  # startup objects out of the GC's way (shorter pauses under load)
    print("READY", json.dumps([c.local_port for c in gen.conns]), flush=True)
    try:
        gen.run()
    finally:
        gen.write(cfg["out"], cfg["meta_out"])
        gen.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
