"""One capture file read by two processes, each handling every other connection, in
lockstep (telemetry/ingest/lockstep.py): the same rows as one process, in one atomic commit."""

from __future__ import annotations

import os
import signal
import traceback
from pathlib import Path
from typing import NoReturn

from telemetry.ingest.commit import deriver
from telemetry.ingest.lockstep import Peer, PeerGone, fork_pair
from telemetry.ingest.options import (
    ANALYSING,
    FINISHING,
    IngestOptions,
    IngestResult,
    ProgressFn,
    StageFn,
)
from telemetry.ingest.pipeline import CapturePipeline
from telemetry.ingest.source import stream
from telemetry.store.parquet import CaptureWriter, Store

SPLIT_MIN_BYTES = 16 << 20  # a smaller capture is read faster than a second process starts


def worth_splitting(path: Path, options: IngestOptions) -> bool:
    return options.processes > 1 and path.stat().st_size >= SPLIT_MIN_BYTES


def ingest_split(
    path: Path, writer: CaptureWriter, result: IngestResult, options: IngestOptions, progress: ProgressFn | None,
    stage: StageFn,
) -> None:
    """Ingest one capture file with two processes, each handling every other connection
    (TcpAnalyzer's ``share``) in lockstep (telemetry/ingest/lockstep.py). The child writes its rows
    into the capture's staging folder; the parent commits them with its own, so the store
    gets the rows one process would have written, in one atomic commit."""
    peer = fork_pair()
    if peer.index == 1:
        _split_child(path, writer.store, result.capture_id, options, peer)
    try:
        pipeline = CapturePipeline(result.capture_id, writer, options, peer)
        stream(path, pipeline, result, progress)
        if result.error:  # the child stopped at the same place
            _wait_child(peer)
            writer.abort()
            return
        stage(FINISHING)
        pipeline.finish()
        part, staged = peer.receive()
        pipeline.add_split_part(part)
        writer.adopt(staged)
        _wait_child(peer)
        pipeline.fill_result(result)
        stage(ANALYSING)
        writer.commit(pipeline.capture_row(path, result), derive=deriver(options, result))
    except BaseException as exc:
        status = _wait_child(peer, kill=True)
        writer.abort()
        if isinstance(exc, PeerGone):
            raise RuntimeError(f"{path}: the second ingest process failed (exit status {status})") from None
        raise
    finally:
        peer.close()


def _split_child(path: Path, store: Store, capture_id: str, options: IngestOptions, peer: Peer) -> NoReturn:
    """The child of :func:`ingest_split`: its half of the connections, then exit."""
    code = 0
    try:
        writer = store.writer(capture_id, part=1)
        pipeline = CapturePipeline(capture_id, writer, options, peer)
        result = IngestResult(path=str(path))
        stream(path, pipeline, result, None)
        if result.error is None:
            pipeline.finish()
            peer.send((pipeline.split_part(), writer.close_part()))
    except PeerGone:  # the parent stopped: it throws the rows away
        code = 1
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - reported here, the parent sees the exit status
        traceback.print_exc()
        code = 70
    finally:
        os._exit(code)


def _wait_child(peer: Peer, kill: bool = False) -> int:
    """Reap the split's child (killed first when ``kill``); its exit status."""
    if peer.child_pid is None:
        return 0
    if kill:
        try:
            os.kill(peer.child_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(peer.child_pid, 0)
    peer.child_pid = None
    return os.waitstatus_to_exitcode(status)
