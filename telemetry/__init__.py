"""tailtap: passive tail-latency telemetry for gRPC / HTTP/2 inference traffic."""

import os

__version__ = "0.1.0"

# Arrow allocates from glibc malloc rather than its bundled jemalloc (read once, when
# pyarrow first allocates; a user's own setting wins). Our tables are built and written
# batch by batch, and jemalloc's purging of freed pages (28,821 madvise calls on the
# realistic 1M capture) cost ~2% more CPU and ~60 MiB more peak memory than malloc there.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
