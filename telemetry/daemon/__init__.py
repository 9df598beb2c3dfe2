"""`tailtap daemon`: continuous ring-buffer capture, ingest, Prometheus metrics, retention."""
