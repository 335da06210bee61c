"""Review finding 7 in process: the run's log writers on a real full filesystem (a small tmpfs, filled).

Each writer warns once, never raises, and writes again once space is back: the event writer in a
new event file, the curve writer by reopening ``curves.csv`` (a row torn by the failure is cut off).
The runs through the CLI are in tests/parallel/test_supervision_findings.py.
"""

from __future__ import annotations

from pathlib import Path

from fullfs import fill, small_tmpfs
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from spreeze_like.curves import CurveWriter, read_curves
from spreeze_like.event_writer import EventWriter
from spreeze_like.procs.evaluator_proc import EVALS_FILE, append_result, read_results
from spreeze_like.roles.evaluator import EvalResult
from spreeze_like.write_guard import WriteGuard

META = {"system": "spreeze_like", "env": "Pendulum-v1", "algo": "sac", "seed": 1}


def _scalar_steps(log_dir: Path, tag: str) -> list[int]:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def test_finding07_event_writer_on_a_full_disk_warns_once_then_writes_a_new_file(tmp_path):
    lines: list[str] = []
    with small_tmpfs(tmp_path / "fs", 512) as fs:
        writer = EventWriter(fs, warn=lines.append, retry_s=0.0, flush_secs=0.0)  # flush and retry at every add
        writer.add_scalar("charts/x", 1.0, 1)
        fill(fs)
        for step in range(2, 300):  # ~15 KB of events: past the slack of the file's last page
            writer.add_scalar("charts/x", float(step), step)
        assert len(lines) == 1, lines
        assert lines[0].startswith("[spreeze] warning: cannot write TensorBoard events") and "No space left" in lines[0]
        assert writer.guard.failures > 1  # every add retried a new file, and none was left behind empty
        (fs / ".filler").unlink()
        writer.add_scalar("charts/x", 500.0, 500)
        writer.close()
        assert lines[1:] == [f"[spreeze] TensorBoard events ({fs}): written again"]
        files = sorted(fs.glob("events.out.tfevents.*"))
        assert len(files) == 2 and all(f.stat().st_size > 0 for f in files), files
        steps = _scalar_steps(fs, "charts/x")
        assert steps[0] == 1 and steps[-1] == 500 and steps == sorted(steps)


def test_finding07_event_writer_made_on_a_full_disk_does_not_raise(tmp_path):
    lines: list[str] = []
    with small_tmpfs(tmp_path / "fs", 512) as fs:
        fill(fs)
        writer = EventWriter(fs, purge_step=100, warn=lines.append)  # a monitor (re)started on a full disk
        writer.add_text("config", "x", 0)
        writer.flush()
        writer.close()
        assert len(lines) == 1 and "No space left on device" in lines[0], lines
        assert not list(fs.glob("events.out.tfevents.*"))  # no empty file left


def test_finding07_curve_writer_on_a_full_disk_warns_once_then_appends_whole_rows(tmp_path):
    lines: list[str] = []
    with small_tmpfs(tmp_path / "fs", 512) as fs:
        writer = CurveWriter(fs, META, warn=lines.append, retry_s=0.0)
        writer.add("train", 1.0, 100, -5.0, 2)
        fill(fs)
        for i in range(200):  # ~8 KB of rows
            writer.add("train", 2.0 + i, 200 + i, -4.0, 2)
        assert len(lines) == 1 and "cannot write curves.csv" in lines[0] and "No space left" in lines[0], lines
        (fs / ".filler").unlink()
        writer.add("eval", 900.0, 9000, -1.0, 5)
        writer.close()
        assert lines[-1].endswith("curves.csv (" + str(fs) + "): written again")
        curves = read_curves(fs)  # every line parses: a row torn by the failure was cut off at the reopen
        assert curves.train[0].env_steps == 100 and [p.env_steps for p in curves.eval] == [9000]


def test_finding07_evals_jsonl_on_a_full_disk_warns_once_and_the_next_line_is_whole(tmp_path):
    lines: list[str] = []
    guard = WriteGuard("evals.jsonl", "kept in TensorBoard", lines.append, retry_s=0.0)
    result = EvalResult(100, -5.0, (-5.0,) * 50, (200,) * 50, 3)
    with small_tmpfs(tmp_path / "fs", 512) as fs:
        append_result(fs, result, 1.0, guard)
        fill(fs)
        for _ in range(30):  # lines of ~600 bytes: past the slack of the file's last page
            append_result(fs, result, 2.0, guard)
        assert len(lines) == 1 and "No space left" in lines[0], lines
        (fs / ".filler").unlink()
        append_result(fs, EvalResult(900, -1.0, (-1.0,), (200,), 4), 3.0, guard)
        results = read_results(fs)
        assert results[0]["env_step"] == 100 and results[-1]["env_step"] == 900, results
        assert (fs / EVALS_FILE).read_text().endswith("\n") and lines[-1] == "[spreeze] evals.jsonl: written again"
