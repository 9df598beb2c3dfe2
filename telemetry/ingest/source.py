"""Capture files as bytes: opening (gzip or not), reading in chunks into a pipeline, and
the user's mistakes said plainly (no such file, a folder, an empty file). The only place
that opens capture files."""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from isal import igzip
from isal.igzip_lib import IsalError

from parsers.capture import CaptureFormatError
from parsers.records import DecodeIssue, PacketBatch
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


# An uncompressed file is mapped into memory a window at a time and decoded in place:
# read into a buffer, each byte was copied once more, into fresh pages for the first
# batches (paired runs of `tailtap analyze`: CPU 0.988 on the realistic 1M capture, system
# time 0.70 -> 0.59 s; 0.968 over 2,000 connections, 1.02 -> 0.65 s). A window this size
# keeps the peak as it was (its pages count in it while its batches live).
MAP_BYTES = 64 << 20


def stream(path: Path, pipeline: CapturePipeline, result: IngestResult, progress: ProgressFn | None) -> None:
    fh, compressed = open_capture(path)
    pipeline.compressed = compressed
    try:
        if compressed or not _stream_mapped(path, fh, pipeline, result, progress):
            _stream_read(path, fh, compressed, pipeline, result, progress)
        if not result.error:
            _process(pipeline, pipeline.decoder.close())
    except CaptureFormatError as exc:
        result.error = f"{path}: {exc}"
    finally:
        fh.close()
    decoder = pipeline.decoder
    if decoder.packets_read == 0 and not result.error:
        fatal = [i for i in decoder.issues if i.fatal]
        reason = fatal[0].message if fatal else "no packets"
        result.error = f"{path}: nothing could be read ({reason})"


def _process(pipeline: CapturePipeline, batches: list[PacketBatch]) -> None:
    # popped, not iterated: a processed batch's buffer is then free before the next feed
    # hands out a store, and the decoder reuses it (or lets its mapped window go)
    while batches:
        pipeline.process(batches.pop(0))


def _stream_mapped(path: Path, fh, pipeline: CapturePipeline, result: IngestResult, progress: ProgressFn | None) -> bool:
    """Each window from the first byte the decoder still needs (the records it has not
    handed out yet are read again in the new window, not copied). False when the file
    cannot be mapped at all, or is no regular file (a pipe): then it is read. The file
    must not shrink meanwhile: a mapped page past its end is a bus error, not an
    exception."""
    decoder = pipeline.decoder
    st = os.fstat(fh.fileno())
    if not stat.S_ISREG(st.st_mode) or not st.st_size:
        return False
    size = st.st_size
    while decoder.bytes_read < size:
        at = decoder.resume_at - decoder.resume_at % mmap.ALLOCATIONGRANULARITY
        # at least half a window of new input, whatever the decoder still holds
        length = min(max(MAP_BYTES, decoder.bytes_read - at + MAP_BYTES // 2), size - at)
        try:
            window = memoryview(mmap.mmap(fh.fileno(), length, offset=at, access=mmap.ACCESS_READ))
        except OSError as exc:  # a file system that cannot map files
            if decoder.bytes_read == 0:
                return False
            result.error = f"{path}: cannot map the file into memory past byte {at}: {exc}"
            return True
        except ValueError:  # mmap refuses a length past the file's end
            result.error = f"{path}: the file shrank while it was read (below byte {at + length})"
            return True
        # the batches' views keep the window mapped while they live, and no longer
        _process(pipeline, decoder.feed_shared(window, at))
        del window
        if progress is not None:
            progress(decoder.bytes_read, decoder.packets_read)
    return True


def _stream_read(
    path: Path, fh, compressed: bool, pipeline: CapturePipeline, result: IngestResult, progress: ProgressFn | None
) -> None:
    decoder = pipeline.decoder
    raw = fh.fileobj if compressed else fh  # on-disk position for progress
    # one buffer read into again and again (the decoder copies what it keeps): a fresh
    # 4 MiB object per read costs a page fault per page
    buf = bytearray(GZIP_CHUNK_BYTES if compressed else CHUNK_BYTES)
    view = memoryview(buf)
    fed = 0  # bytes handed to the decoder
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
            return
        if not n:
            return
        fed += n
        _process(pipeline, decoder.feed(view[:n]))
        if progress is not None:
            progress(raw.tell(), decoder.packets_read)
