"""Capture files as bytes: opening (gzip or not), reading in chunks into a pipeline, and
the user's mistakes said plainly (no such file, a folder, an empty file). The only place
that opens capture files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from isal import igzip
from isal.igzip_lib import IsalError

from parsers.capture import CaptureFormatError
from parsers.records import DecodeIssue
from telemetry.ingest.options import IngestResult, ProgressFn

if TYPE_CHECKING:
    from telemetry.ingest.pipeline import CapturePipeline

CHUNK_BYTES = 4 << 20
# gzip input is read in smaller pieces: at a cut in the stream the inflater raises, and the
# bytes of that read are lost (a cut-short file keeps what came before, less one read)
GZIP_CHUNK_BYTES = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
# what a corrupt or cut-short gzip stream raises: BadGzipFile (an OSError), EOFError, or
# the inflater's own error (not an OSError)
DECOMPRESSION_ERRORS = (OSError, EOFError, IsalError)


def open_capture(path: Path):
    """The file's bytes, decompressed when it is gzip (by ISA-L's inflater: the standard
    library's zlib took 0.62 CPU s for a 1M-packet capture's 158 MB, ISA-L 0.24)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == GZIP_MAGIC:
        return igzip.open(path, "rb"), True
    return open(path, "rb"), False


def unreadable(path: Path) -> str | None:
    if not path.exists():
        return f"{path}: no such file"
    if path.is_dir():
        return f"{path}: is a folder, not a capture file"
    if path.stat().st_size == 0:
        return f"{path}: empty file, not a capture"
    return None


def stream(path: Path, pipeline: CapturePipeline, result: IngestResult, progress: ProgressFn | None) -> None:
    fh, compressed = open_capture(path)
    pipeline.compressed = compressed
    decoder = pipeline.decoder
    raw = fh.fileobj if compressed else fh  # on-disk position for progress
    # one buffer read into again and again (the decoder copies what it keeps): a fresh
    # 4 MiB object per read costs a page fault per page
    buf = bytearray(GZIP_CHUNK_BYTES if compressed else CHUNK_BYTES)
    view = memoryview(buf)
    fed = 0  # bytes handed to the decoder
    try:
        while True:
            try:
                n = fh.readinto(buf)
            except DECOMPRESSION_ERRORS as exc:  # corrupt or truncated gzip stream
                if not fed:  # not a byte of it: the file is unreadable, say why (not "empty")
                    result.error = f"{path}: cannot decompress this gzip file: {exc}"
                    return
                pipeline.issues.append(
                    DecodeIssue("bad_compression", decoder.packets_read, f"{path}: {exc}", fatal=True)
                )
                break
            if not n:
                break
            fed += n
            try:
                batches = decoder.feed(view[:n])
            except CaptureFormatError as exc:
                result.error = f"{path}: {exc}"
                return
            # popped, not iterated: a processed batch's buffer is then free before the next
            # feed hands out a store, and the decoder reuses it instead of a new one
            while batches:
                pipeline.process(batches.pop(0))
            if progress is not None:
                progress(raw.tell(), decoder.packets_read)
        try:
            for batch in decoder.close():
                pipeline.process(batch)
        except CaptureFormatError as exc:
            result.error = f"{path}: {exc}"
            return
    finally:
        fh.close()
    if decoder.packets_read == 0 and not result.error:
        fatal = [i for i in decoder.issues if i.fatal]
        reason = fatal[0].message if fatal else "no packets"
        result.error = f"{path}: nothing could be read ({reason})"
