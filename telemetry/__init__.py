"""tailtap: passive tail-latency telemetry for gRPC / HTTP/2 inference traffic."""

__version__ = "0.1.0"
