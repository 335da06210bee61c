"""TensorBoard event files written with the ``tensorboard`` package alone (no torch).

The monitor process writes a run's scalars and texts, and the hardware profile writes its curves.
``torch.utils.tensorboard.SummaryWriter`` would do the same, on top of this very package's
``EventFileWriter``, but importing it imports torch: a second of CPU in a process that never
computes with torch, spent while the learners start on the same cores. This class keeps the
subset we use: scalars (``simple_value``, what TensorBoard's scalar dashboard reads), markdown
texts (the text plugin's tensor format, via ``tensorboard.plugins.text.summary_v2.text_pb``) and
``purge_step`` for resumed runs.

Owns its event file (one per instance, created in ``log_dir`` on construction, closed by
:meth:`close`); a crash loses at most the events still queued (flushed every ``flush_secs``).
"""

from __future__ import annotations

import time
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.text.summary_v2 import text_pb
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class EventWriter:
    """Scalars and texts into one new event file under ``log_dir``.

    Args:
        log_dir: folder of the event file (created if missing).
        purge_step: for a resumed run: TensorBoard hides the events of earlier files in this folder
            at steps ``>= purge_step`` (the part of the curve after the checkpoint that was redone).
        flush_secs: the longest events wait in memory before they reach the file.
    """

    def __init__(self, log_dir: str | Path, purge_step: int | None = None, flush_secs: float = 10.0) -> None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self._file = EventFileWriter(str(log_dir), flush_secs=flush_secs)
        if purge_step is not None:  # the file-version event, then a session restart at that step: the purge marker
            self._file.add_event(Event(wall_time=time.time(), step=purge_step, file_version="brain.Event:2"))
            self._file.add_event(
                Event(wall_time=time.time(), step=purge_step, session_log=SessionLog(status=SessionLog.START))
            )

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._add(Summary(value=[Summary.Value(tag=tag, simple_value=float(value))]), step)

    def add_text(self, tag: str, markdown: str, step: int) -> None:
        self._add(text_pb(tag, markdown), step)

    def _add(self, summary: Summary, step: int) -> None:
        self._file.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
