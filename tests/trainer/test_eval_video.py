"""``--video-every N``: episode 0 of the scheduled evaluations and of the final one, as files in ``<run>/videos/``.

TinyRender's frame t is all grey level 20 t and its episodes are 5 steps, so a video of one evaluation episode is
6 frames (the reset's and one per step) of levels 0, 20, ..., 100, read back from the GIF. The .gif path runs
wherever imageio is (the [test] extra). What is checked: the schedule (the first evaluation at or after each
multiple, the final one, a resume's continuation), the files and lines of a serial run, that a full disk or a
render that fails costs a warning line and never the evaluation, that an interrupted evaluation and a killed
evaluator leave no temporary file, and the run-start refusals (one ``error:`` line, no run folder).
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.config import TrainConfig
from spreeze_like.envs import make_env
from spreeze_like.errors import ConfigError, EnvError
from spreeze_like.metrics import stats_schema
from spreeze_like.roles.eval_video import EvalVideos, video_path
from spreeze_like.roles.evaluator import Evaluator
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.training import train
from spreeze_like.video import VideoFile, VideoWriteError, check_can_record

from .test_cli import assert_one_line_error, run_cli
from .test_policy import TINY

imageio = pytest.importorskip("imageio.v2", reason="--video-every needs imageio (the [test] and [video] extras)")
ENVS = "trainer.tiny_envs:"
RENDER = ENVS + "TinyRender-v0"
EPISODE_LEVELS = [0, 20, 40, 60, 80, 100]
TESTS_DIR = Path(__file__).resolve().parents[1]  # trainer.tiny_envs imports from there in the CLI's process


def levels(path) -> list[int]:
    return [int(np.asarray(f)[..., :3].mean().round()) for f in imageio.mimread(path)]


def evaluator(tmp_path, lines: list[str], every: int = 1000, start_step: int = 0, env: str = RENDER) -> Evaluator:
    spec = AlgoSpec(algo="sac", obs_dim=2, act_dim=1, hidden_sizes=(8,))
    videos = EvalVideos(tmp_path, every, "gif", start_step, env, lines.append)
    return Evaluator(env, spec, LocalBoard(), LocalStatsBlock(stats_schema(1)).role("evaluator"), episodes=2,
                     videos=videos)


def test_the_first_evaluation_past_each_multiple_and_the_final_one_are_recorded(tmp_path):
    lines: list[str] = []
    ev = evaluator(tmp_path, lines)
    try:
        for step in (500, 1000, 1500, 1999, 2100, 2500):
            ev.evaluate(step)
        ev.evaluate(2600, final=True)
    finally:
        ev.close()
    names = sorted(p.name for p in (tmp_path / "videos").iterdir())
    assert names == ["eval_000001000.gif", "eval_000002100.gif", "eval_000002600.gif"]  # no temporary file left
    for name in names:
        assert levels(tmp_path / "videos" / name) == EPISODE_LEVELS
    assert lines == [f"[spreeze] video of the evaluation at {s:,} env steps (episode 0, return 0.0): "
                     f"{video_path(tmp_path, s, 'gif')}" for s in (1000, 2100, 2600)]


def test_a_resumed_session_continues_the_schedule_and_removes_a_killed_evaluators_temporary_file(tmp_path):
    stale = tmp_path / "videos" / ".eval_000003000.gif.tmp.4242.gif"  # VideoFile's temporary name, its writer killed
    stale.parent.mkdir()
    stale.write_bytes(b"GIF89a")
    kept = tmp_path / "videos" / "eval_000003000.gif"
    kept.write_bytes(b"GIF89a")
    ev = evaluator(tmp_path, [], start_step=3100)
    try:
        assert not stale.exists() and kept.exists()
        ev.evaluate(3500)
        assert not video_path(tmp_path, 3500, "gif").exists()  # before 4000: not due
        ev.evaluate(4000)
        assert levels(video_path(tmp_path, 4000, "gif")) == EPISODE_LEVELS
    finally:
        ev.close()


def test_a_full_disk_costs_one_warning_and_that_video_not_the_evaluation(tmp_path, monkeypatch):
    lines: list[str] = []
    ev = evaluator(tmp_path, lines, every=100)
    real_add = VideoFile.add

    def full(self, frame):
        raise VideoWriteError(self.path, OSError(errno.ENOSPC, "No space left on device"))

    try:
        monkeypatch.setattr(VideoFile, "add", full)
        first, second = ev.evaluate(100), ev.evaluate(200)
        assert first.lengths == second.lengths == (5, 5)  # both evaluations ran whole
        monkeypatch.setattr(VideoFile, "add", real_add)
        ev.evaluate(300)
    finally:
        ev.close()
    assert [p.name for p in (tmp_path / "videos").iterdir()] == ["eval_000000300.gif"]  # nor a temporary file
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"[spreeze] warning: cannot write evaluation videos ({tmp_path / 'videos'}): "
                               "No space left on device; training goes on")
    assert lines[1] == f"[spreeze] evaluation videos ({tmp_path / 'videos'}): written again"
    assert lines[2].startswith("[spreeze] video of the evaluation at 300 env steps")


def test_a_render_that_fails_mid_run_stops_the_videos_not_the_evaluations(tmp_path, monkeypatch):
    lines: list[str] = []
    ev = evaluator(tmp_path, lines, every=100)
    frames = 0

    def flaky(self):
        nonlocal frames
        frames += 1
        if frames == 3:
            raise RuntimeError("GL context lost")
        return np.zeros((4, 4, 3), dtype=np.uint8)

    monkeypatch.setattr(type(ev.envs[0].unwrapped), "render", flaky)
    try:
        results = [ev.evaluate(step) for step in (100, 200, 300)]
    finally:
        ev.close()
    assert [r.lengths for r in results] == [(5, 5)] * 3
    assert not any((tmp_path / "videos").iterdir())
    assert frames == 3  # no render after the failure: videos stopped for the session
    assert lines == [("[spreeze] warning: no more evaluation videos this session: render() of env "
                      f"'{RENDER}' raised RuntimeError: GL context lost; training goes on")]


def test_an_interrupted_evaluation_leaves_no_video_file(tmp_path, monkeypatch):
    ev = evaluator(tmp_path, [], every=100)
    steps = 0

    def interrupted(self, action):
        nonlocal steps
        steps += 1
        if steps == 4:
            raise KeyboardInterrupt
        return real_step(self, action)

    real_step = type(ev.envs[0].unwrapped).step
    monkeypatch.setattr(type(ev.envs[0].unwrapped), "step", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            ev.evaluate(100)
    finally:
        ev.close()
    assert not any((tmp_path / "videos").iterdir())


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    lines: list[str] = []
    config = dataclasses.replace(TrainConfig(), env=RENDER, logdir=str(tmp_path_factory.mktemp("runs")),
                                 **{**TINY, "total_steps": 300, "learning_starts": 100, "eval_every": 100,
                                    "video_every": 150, "video_format": "gif"})
    return train(config, print_fn=lines.append), lines


def test_a_serial_run_writes_the_scheduled_and_final_videos_with_the_evaluations_returns(serial_run):
    result, lines = serial_run
    run_dir = result.run_dir
    names = sorted(p.name for p in (run_dir / "videos").iterdir())
    assert names == ["eval_000000200.gif", "eval_000000300.gif"]  # 150 -> the evaluation at 200; 300 is the final
    returns = {step: mean for step, mean, _ in result.evals}  # TinyRender's episodes are alike: episode 0's = the mean
    assert result.final_eval_returns[0] == returns[300]
    for step in (200, 300):
        assert levels(video_path(run_dir, step, "gif")) == EPISODE_LEVELS
        said = f"[spreeze] video of the evaluation at {step} env steps (episode 0, return {returns[step]:.1f}): "
        assert said + str(video_path(run_dir, step, "gif")) in lines


@pytest.mark.parametrize("env, args, said", [
    # gif: the env's refusal whether or not imageio-ffmpeg (mp4's writer, not in [test]) is installed
    (ENVS + "TinyWalk-v0", ("--video-format", "gif"), "renders nothing: its constructor takes no render_mode"),
    (ENVS + "TinyRenderBroken-v0", ("--video-format", "gif"),
     "could not render a frame (RuntimeError: cannot make an OpenGL context)"),
    (RENDER, ("--video-format", "avi"), "invalid choice: 'avi'"),
])
def test_the_cli_refuses_a_run_that_cannot_record_in_one_line(tmp_path, monkeypatch, env, args, said):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    proc = run_cli("--env", env, "--video-every", "100", *args, "--total-steps", "300", "--logdir", str(tmp_path))
    assert_one_line_error(proc, said)
    assert not any(tmp_path.iterdir())  # refused before a run folder


def test_mp4_without_imageio_ffmpeg_is_refused_naming_the_extra_and_gif(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "imageio_ffmpeg" else real(name, *a))
    with pytest.raises(ConfigError, match=r"--video-every with mp4 needs imageio-ffmpeg: .*\[video\].*gif"):
        check_can_record(RENDER, None, "mp4", "--video-every")


def test_a_frame_that_is_not_an_image_is_refused_at_the_start(monkeypatch):
    monkeypatch.setattr(type(make_env(RENDER, render_mode="rgb_array").unwrapped), "render",
                        lambda self: np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(EnvError, match=r"rendered an array of shape \(4, 4\) and dtype float32"):
        check_can_record(RENDER, None, "gif", "--video-every")
