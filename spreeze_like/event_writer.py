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

Owns its event file (one per instance, created in ``log_dir`` on construction, closed by
:meth:`close`); a crash loses at most the events still queued (flushed every ``flush_secs``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.types_pb2 import DT_STRING
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalars_metadata
from tensorboard.plugins.text.summary_v2 import text_pb

# {category title: {chart title: [tag regex, ...]}}: TensorBoard's custom-scalars dashboard shows
# each category as a group of charts, each chart with every scalar whose tag matches one regex.
ScalarsLayout = Mapping[str, Mapping[str, Sequence[str]]]
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
        self._file.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
