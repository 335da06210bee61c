"""curves.csv: what a writer appends reads back; a torn last line is skipped; resume cuts and offsets."""

from __future__ import annotations

import pytest

from spreeze_like.curves import CURVES_FILE, CurvePoint, CurveWriter, read_curves, write_curves
from spreeze_like.errors import ConfigError

META = {"system": "spreeze_like", "mode": "serial", "env": "Pendulum-v1", "algo": "sac", "seed": 3}


def test_a_peer_file_reads_back_with_its_label(tmp_path):
    points = [CurvePoint("train", 1.5, 200, -1200.25), CurvePoint("eval", 2.0, 200, -900.0, 10),
              CurvePoint("train", 3.0, 400, -800.0)]
    write_curves(tmp_path, {"system": "sb3", "env": "Pendulum-v1", "seed": 2}, points)
    curves = read_curves(tmp_path)
    assert curves.train == [points[0], points[2]] and curves.eval == [points[1]]
    assert curves.label == "sb3 seed 2"
    assert read_curves(tmp_path / CURVES_FILE).meta["system"] == "sb3"  # the file itself works too
    write_curves(tmp_path, {"system": "sb3", "seed": 2, "label": "SB3 (rl-zoo)"}, points)
    assert read_curves(tmp_path).label == "SB3 (rl-zoo)"


def test_writer_rows_and_a_torn_last_line(tmp_path):
    writer = CurveWriter(tmp_path, META)
    writer.add("train", 1.25, 100, -10.5, 2)
    writer.add("train", 2.0, 150, float("nan"), 1)  # nothing to draw: not written
    writer.add("eval", 2.5, 100, -7.0, 10)
    writer.close()
    with open(tmp_path / CURVES_FILE, "a") as f:
        f.write("train,3.0,20")  # a crash in the middle of a row
    curves = read_curves(tmp_path)
    assert curves.label == "spreeze_like serial seed 3"
    assert curves.train == [CurvePoint("train", 1.25, 100, -10.5, 2)]
    assert curves.eval == [CurvePoint("eval", 2.5, 100, -7.0, 10)]


def test_a_broken_row_before_the_end_is_an_error(tmp_path):
    write_curves(tmp_path, META, [CurvePoint("train", 1.0, 10, -1.0)])
    text = (tmp_path / CURVES_FILE).read_text()
    (tmp_path / CURVES_FILE).write_text(text + "train,x,1,2,3\ntrain,2.0,20,-2.0,1\n")
    with pytest.raises(ConfigError, match="line 5"):
        read_curves(tmp_path)


OTHER_FORMAT = '# curves {"format": "other/9"}\nkind,wall_s,env_steps,episode_return,episodes\n'


@pytest.mark.parametrize("content", ["", "kind,wall_s\n", OTHER_FORMAT])
def test_not_a_curves_file(tmp_path, content):
    (tmp_path / CURVES_FILE).write_text(content)
    with pytest.raises(ConfigError):
        read_curves(tmp_path)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ConfigError, match="no curves.csv"):
        read_curves(tmp_path)
    with pytest.raises(ConfigError, match="no such run folder"):
        read_curves(tmp_path / "absent")


def test_resume_drops_the_redone_rows_and_continues_the_wall_time(tmp_path):
    first = CurveWriter(tmp_path, META)
    for step, wall in ((100, 1.0), (200, 2.0), (300, 3.0), (400, 4.0)):
        first.add("train", wall, step, -float(step), 1)
    first.add("eval", 2.1, 200, -50.0, 10)
    first.add("eval", 4.1, 400, -40.0, 10)
    first.close()
    # the checkpoint was at step 200: a new session starts there, its clock at 0
    resumed = CurveWriter(tmp_path, {**META, "seed": 99}, resume_step=200)
    assert resumed.wall_offset == pytest.approx(2.1)
    resumed.add("train", 0.5, 300, -1.0, 1)
    resumed.close()
    curves = read_curves(tmp_path)
    assert [(p.env_steps, p.wall_s) for p in curves.train] == [(100, 1.0), (200, 2.0), (300, pytest.approx(2.6))]
    assert [p.env_steps for p in curves.eval] == [200]
    assert curves.meta["seed"] == 3  # the run's name is the file's, not the reopening writer's


def test_a_restarted_writer_appends_after_cutting_a_torn_line(tmp_path):
    CurveWriter(tmp_path, META, resume_step=500).close()  # a resumed run from before curves existed
    first = CurveWriter(tmp_path, META, resume_step=500)
    assert first.wall_offset == 0.0
    first.add("train", 1.0, 600, -5.0, 1)
    first.close()
    with open(tmp_path / CURVES_FILE, "a") as f:
        f.write("eval,1.5,6")  # the writer's process was killed mid-row
    again = CurveWriter(tmp_path, META)  # the monitor restarted within the session
    again.add("eval", 2.0, 600, -4.0, 10)
    again.close()
    curves = read_curves(tmp_path)
    assert [p.env_steps for p in curves.train] == [600] and curves.eval == [CurvePoint("eval", 2.0, 600, -4.0, 10)]


def test_moving_mean_weights_rows_by_their_episodes(tmp_path):
    write_curves(tmp_path, META, [CurvePoint("train", 1.0, 10, -10.0, 1), CurvePoint("train", 2.0, 20, -4.0, 3),
                                  CurvePoint("train", 3.0, 30, 0.0, 1)])
    moving = read_curves(tmp_path).train_moving_mean(window=4)
    assert moving == [(1.0, 10, -10.0), (2.0, 20, pytest.approx(-22.0 / 4)), (3.0, 30, pytest.approx(-12.0 / 4))]
