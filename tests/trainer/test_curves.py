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


def test_success_shares_read_back_and_an_env_that_says_nothing_leaves_the_column_empty(tmp_path):
    writer = CurveWriter(tmp_path, META)
    writer.add("train", 1.0, 100, -3.0, 4, 0.25)
    writer.add("train", 2.0, 200, -2.0, 4)  # the env said nothing of success
    writer.add("eval", 2.5, 200, -1.0, 10, 0.7)
    writer.add("eval", 3.5, 300, -1.0, 10, float("nan"))  # no share to write: the row is kept, its cell empty
    writer.close()
    rows = (tmp_path / CURVES_FILE).read_text().splitlines()
    assert rows[1] == "kind,wall_s,env_steps,episode_return,episodes,success"
    assert rows[3:] == ["train,1.000,100,-3.0,4,0.25", "train,2.000,200,-2.0,4,", "eval,2.500,200,-1.0,10,0.7",
                        "eval,3.500,300,-1.0,10,"]
    curves = read_curves(tmp_path)
    assert [p.success for p in curves.train] == [0.25, None] and [p.success for p in curves.eval] == [0.7, None]


def test_a_success_share_outside_0_1_is_not_a_curve_row(tmp_path):
    write_curves(tmp_path, META, [CurvePoint("eval", 1.0, 10, -1.0, 10, 0.5)])
    text = (tmp_path / CURVES_FILE).read_text()
    (tmp_path / CURVES_FILE).write_text(text + "eval,2.0,20,-1.0,10,1.5\ntrain,3.0,30,-1.0,1,\n")
    with pytest.raises(ConfigError, match="line 5.*success must be a share"):
        read_curves(tmp_path)


FORMAT_1_FILE = (
    '# curves {"algo": "sac", "env": "Pendulum-v1", "format": "spreeze-curves/1", "seed": 3, "system": "spreeze_like"}\n'
    "kind,wall_s,env_steps,episode_return,episodes\n"
    '# session {"start_step": 0, "wall_offset": 0.0}\n'
    "train,1.000,100,-900.5,2\n"
    "eval,1.500,100,-800.0,10\n"
    "train,2.000,200,-700.0,1\n"
    "eval,2.5"  # torn: the run was killed mid-row
)


def test_a_format_1_file_reads_as_rows_without_success(tmp_path):
    """Files written before the success column (until 2026-11-29) stay readable, by plot_runs and the benchmarks."""
    (tmp_path / CURVES_FILE).write_text(FORMAT_1_FILE)
    curves = read_curves(tmp_path)
    assert curves.meta["format"] == "spreeze-curves/1"
    assert curves.train == [CurvePoint("train", 1.0, 100, -900.5, 2), CurvePoint("train", 2.0, 200, -700.0, 1)]
    assert curves.eval == [CurvePoint("eval", 1.5, 100, -800.0, 10)]


@pytest.mark.parametrize("resume_step", [150, None])
def test_a_writer_continuing_a_format_1_file_rewrites_it_in_format_2(tmp_path, resume_step):
    """A resume (the cut at its checkpoint) or a restarted monitor of a run begun by an older version: the file
    is rewritten in format 2 with every row (as far as the cut), so the new rows' success cells fit its columns."""
    (tmp_path / CURVES_FILE).write_text(FORMAT_1_FILE)
    writer = CurveWriter(tmp_path, META, resume_step=resume_step)
    writer.add("eval", 0.5, 300, -100.0, 10, 0.5)
    writer.close()
    curves = read_curves(tmp_path)
    assert curves.meta["format"] == "spreeze-curves/2" and curves.meta["seed"] == 3
    kept_train = [CurvePoint("train", 1.0, 100, -900.5, 2)] + ([] if resume_step else
                                                               [CurvePoint("train", 2.0, 200, -700.0, 1)])
    assert curves.train == kept_train
    assert curves.eval[0] == CurvePoint("eval", 1.5, 100, -800.0, 10)
    assert curves.eval[1].env_steps == 300 and curves.eval[1].success == 0.5
    assert curves.eval[1].wall_s == pytest.approx(0.5 + (1.5 if resume_step else 0.0))
