"""The store: Parquet files per table, capture, date and hour. Knows tables, not protocols.

- ``schema``: every column of every table, documented (``tailtap schema`` prints it).
- ``parquet``: the store itself (``Store``, ``CaptureWriter``): idempotent, atomic writes.
- ``capture_id``: a capture file's content hash, the store's idempotency key.
"""
