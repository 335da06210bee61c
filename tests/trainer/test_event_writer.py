"""The torch-free event writer: TensorBoard reads its scalars, texts and custom-scalars layout, and a purge
hides redone steps."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2

from spreeze_like.event_writer import EventWriter


def read(log_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_scalars_and_text_are_read_back(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path)
    for step in range(5):
        writer.add_scalar("charts/x", step * 1.5, step)
    writer.add_text("config", "|param|value|\n|-|-|\n|seed|3|", 0)
    writer.close()
    acc = read(tmp_path)
    assert [(e.step, e.value) for e in acc.Scalars("charts/x")] == [(s, s * 1.5) for s in range(5)]
    text = acc.Tensors("config")[0].tensor_proto.string_val[0].decode()
    assert "|seed|3|" in text


def test_purge_step_hides_the_redone_part_of_a_resumed_curve(tmp_path: Path) -> None:
    first = EventWriter(tmp_path)
    for step in (100, 200, 300, 400):
        first.add_scalar("charts/x", 1.0, step)
    first.close()
    time.sleep(1.1)  # event files are named by the second; the resumed one must sort after the first
    resumed = EventWriter(tmp_path, purge_step=201)
    for step in (300, 500):
        resumed.add_scalar("charts/x", 2.0, step)
    resumed.close()
    assert [(e.step, e.value) for e in read(tmp_path).Scalars("charts/x")] == [(100, 1.0), (200, 1.0), (300, 2.0),
                                                                              (500, 2.0)]


def test_no_torch_import() -> None:
    code = "import sys\nimport spreeze_like.event_writer\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_custom_scalars_layout_is_read_back(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path)
    writer.add_scalars_layout({"Returns": {"return": ["^charts/episodic_return$", "^eval/episodic_return$"]},
                               "Losses": {"critic": ["^losses/qf1_loss$"]}})
    writer.close()
    acc = read(tmp_path)
    assert acc.PluginTagToContent("custom_scalars") == {"custom_scalars__config__": b""}
    layout = layout_pb2.Layout.FromString(acc.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0])
    assert [(c.title, [(ch.title, list(ch.multiline.tag)) for ch in c.chart]) for c in layout.category] == [
        ("Returns", [("return", ["^charts/episodic_return$", "^eval/episodic_return$"])]),
        ("Losses", [("critic", ["^losses/qf1_loss$"])]),
    ]
