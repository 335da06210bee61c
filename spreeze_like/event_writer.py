"""TensorBoard event files written with the ``tensorboard`` package alone (no torch).

The monitor process writes a run's scalars and texts, and the hardware profile writes its curves.
``torch.utils.tensorboard.SummaryWriter`` would do the same, on top of this very package's
``EventFileWriter``, but importing it imports torch: a second of CPU in a process that never
computes with torch, spent while the learners start on the same cores. This class keeps the
subset we use: scalars (``simple_value``, what TensorBoard's scalar dashboard reads), markdown
texts (the text plugin's tensor format, via ``tensorboard.plugins.text.summary_v2.text_pb``), a
custom-scalars layout (the ``custom_scalars`` plugin's ``Layout`` proto as a string tensor under
its config tag; tensorboard's own ``custom_scalar.summary.pb`` needs TensorFlow, so it is built
here from the same protos) and ``purge_step`` for resumed runs.

Owns its event files, created in ``log_dir`` and closed by :meth:`close`. Events are written by
this thread into a buffered file, flushed every ``flush_secs`` and at :meth:`close`; a crash loses
at most the events since the last flush. TensorBoard's own ``EventFileWriter`` writes from a thread
of its own, which prints the traceback of a failed write (a full disk) and re-raises it at the next
call: the review's finding 7, a monitor that crash-loops. Here a failed write is one warning line
(:class:`~spreeze_like.write_guard.WriteGuard`): the file is dropped (a torn last record is where
TensorBoard stops reading it) and a new event file is tried every ``retry_s`` seconds, so the
curves continue once space is back (TensorBoard merges the files of a folder). No method raises
``OSError``.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.types_pb2 import DT_STRING
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalars_metadata
from tensorboard.plugins.text.summary_v2 import text_pb
from tensorboard.summary.writer.record_writer import RecordWriter

from spreeze_like.write_guard import WriteGuard

# {category title: {chart title: [tag regex, ...]}}: TensorBoard's custom-scalars dashboard shows
# each category as a group of charts, each chart with every scalar whose tag matches one regex.
ScalarsLayout = Mapping[str, Mapping[str, Sequence[str]]]

_file_numbers = itertools.count()  # distinguishes two files one process opens within a second


class EventWriter:
    """Scalars and texts into one new event file under ``log_dir``.

    Args:
        log_dir: folder of the event file (created if missing, unless ``create`` is False).
        purge_step: for a resumed run: TensorBoard hides the events of earlier files in this folder
            at steps ``>= purge_step`` (the part of the curve after the checkpoint that was redone).
        flush_secs: the longest events wait in memory before they reach the file.
        warn: where the one line about a failed write goes (default stderr).
        retry_s: seconds between attempts at a new event file after a failed write.
        create: make ``log_dir`` if it is missing. A run's monitor passes False: its run folder exists
            from the start, and one deleted mid-run must stay deleted (the run then stops).
    """

    def __init__(self, log_dir: str | Path, purge_step: int | None = None, flush_secs: float = 10.0,
                 warn: Callable[[str], None] | None = None, retry_s: float = 60.0, create: bool = True) -> None:
        self.log_dir, self.flush_secs, self.create = Path(log_dir), flush_secs, create
        self.guard = WriteGuard(f"TensorBoard events ({self.log_dir})",
                                f"TensorBoard logging paused, a new event file is tried every {retry_s:.0f} s",
                                warn, retry_s)
        self.path: Path | None = None
        self._file: BinaryIO | None = None
        self._records: RecordWriter | None = None
        self._flushed_at = time.monotonic()
        self._closed = False
        self._open(purge_step)

    def _open(self, purge_step: int | None = None) -> None:
        """A new event file: its version event first, then (resume) the purge marker; flushed at once."""
        # TensorBoard reads a folder's event files in name order: the counter is zero-padded so that a
        # process's later file sorts after its earlier ones within one second ("...12" < "...9" unpadded)
        path = self.log_dir / (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                               f"{os.getpid()}.{next(_file_numbers):06d}")
        try:
            if self.create:
                self.log_dir.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "ab")  # noqa: SIM115 - closed by close() or a failed write
            self.path, self._records = path, RecordWriter(self._file)
            self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
            if purge_step is not None:  # the file-version event, then a session restart at that step: the purge marker
                self._write(Event(wall_time=time.time(), step=purge_step, file_version="brain.Event:2"))
                self._write(Event(wall_time=time.time(), step=purge_step,
                                  session_log=SessionLog(status=SessionLog.START)))
            self._file.flush()
        except OSError as exc:
            self._fail(exc)
            try:
                if path.stat().st_size == 0:  # a retry on a disk still full leaves no empty file behind
                    path.unlink()
            except OSError:
                pass
            return
        self._flushed_at = time.monotonic()
        self.guard.succeeded()

    def _write(self, event: Event) -> None:
        assert self._records is not None
        self._records.write(event.SerializeToString())

    def _fail(self, exc: OSError) -> None:
        """Drop the file (its buffer cannot be written either) and warn once."""
        file, self._file, self._records = self._file, None, None
        if file is not None:
            try:
                file.close()  # tries the buffer once more, then closes the descriptor whatever happens
            except OSError:
                pass
        self.guard.failed(exc)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._add(Summary(value=[Summary.Value(tag=tag, simple_value=float(value))]), step)

    def add_text(self, tag: str, markdown: str, step: int) -> None:
        self._add(text_pb(tag, markdown), step)

    def add_scalars_layout(self, layout: ScalarsLayout, step: int = 0) -> None:
        """The custom-scalars dashboard's layout; once per run is enough (TensorBoard merges the
        layouts of all runs it shows, category by category, dropping duplicate charts)."""
        proto = layout_pb2.Layout(category=[
            layout_pb2.Category(title=category, chart=[
                layout_pb2.Chart(title=chart, multiline=layout_pb2.MultilineChartContent(tag=list(tags)))
                for chart, tags in charts.items()
            ])
            for category, charts in layout.items()
        ])
        tensor = TensorProto(dtype=DT_STRING, string_val=[proto.SerializeToString()], tensor_shape=TensorShapeProto())
        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=custom_scalars_metadata.PLUGIN_NAME))
        value = Summary.Value(tag=custom_scalars_metadata.CONFIG_SUMMARY_TAG, metadata=meta, tensor=tensor)
        self._add(Summary(value=[value]), step)

    def _add(self, summary: Summary, step: int) -> None:
        if self._file is None:
            if self._closed or not self.guard.may_try():
                return  # paused after a failed write: these events are lost
            self._open()
            if self._file is None:
                return
        try:
            self._write(Event(wall_time=time.time(), step=int(step), summary=summary))
            if time.monotonic() - self._flushed_at >= self.flush_secs:
                self.flush()
        except OSError as exc:
            self._fail(exc)

    def flush(self) -> None:
        if self._file is None:
            return
        try:
            self._file.flush()
            self._flushed_at = time.monotonic()
        except OSError as exc:
            self._fail(exc)

    def close(self) -> None:
        self.flush()
        self._closed = True
        if self._file is not None:
            file, self._file, self._records = self._file, None, None
            try:
                file.close()
            except OSError as exc:
                self.guard.failed(exc)
