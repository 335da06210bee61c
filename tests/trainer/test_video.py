"""``python -m spreeze_like.evaluate RUN --video FILE``: every episode's frames in one file, or one error line.

TinyRender's frame t is all grey level 20 t, 10 fps, 5-step episodes: 2 episodes are 2 x (1 reset + 5 steps) =
12 frames, read back from the file. The .gif path runs wherever imageio is (the [test] extra); the .mp4 path
needs imageio-ffmpeg (the [video] extra) and is skipped, saying so, where it is not installed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spreeze_like.config import TrainConfig
from spreeze_like.errors import EnvError
from spreeze_like.evaluate import main, run_episodes
from spreeze_like.policy import load_policy
from spreeze_like.training import train
from spreeze_like.video import VideoFile

from .test_policy import TINY

imageio = pytest.importorskip("imageio.v2", reason="--video needs imageio (the [test] and [video] extras)")
RENDER = "trainer.tiny_envs:TinyRender-v0"


@pytest.fixture(scope="module")
def render_run(tmp_path_factory) -> Path:
    config = dataclasses.replace(TrainConfig(), env=RENDER, logdir=str(tmp_path_factory.mktemp("runs")),
                                 **{**TINY, "total_steps": 300, "learning_starts": 100})
    return train(config, print_fn=lambda line: None).run_dir


def grey_levels(frames) -> list[int]:
    return [int(np.asarray(f)[..., :3].mean().round()) for f in frames]


def test_a_gif_holds_every_episodes_frames(render_run, tmp_path, capsys):
    out = tmp_path / "policy.gif"
    assert main([str(render_run), "--episodes", "2", "--video", str(out), "--env", RENDER]) == 0
    printed = capsys.readouterr().out
    assert f"video: {out} (12 frames at 10 fps, 1.2 s)" in printed
    assert grey_levels(imageio.mimread(out)) == [0, 20, 40, 60, 80, 100] * 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.gif"]  # no temporary file left beside it


@pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is None,
                    reason="writing .mp4 needs imageio-ffmpeg (pip install -e '.[video]'); CI installs [test] only")
def test_an_mp4_at_the_envs_frame_rate(render_run, tmp_path):
    out = tmp_path / "policy.mp4"
    assert main([str(render_run), "--episodes", "2", "--video", str(out), "--env", RENDER]) == 0
    reader = imageio.get_reader(out)
    try:
        assert reader.get_meta_data()["fps"] == 10.0 and reader.count_frames() == 12
        levels = grey_levels(reader.get_data(i) for i in range(12))
    finally:
        reader.close()
    assert all(abs(a - b) <= 3 for a, b in zip(levels, [0, 20, 40, 60, 80, 100] * 2)), levels  # H.264 is lossy


def test_an_mp4_without_imageio_ffmpeg_is_one_line_before_the_policy_loads(tmp_path, monkeypatch, capsys):
    """imageio without its ffmpeg plugin (the [test] extra, not [video]) raised a ValueError traceback at the first
    episode; now the writer is looked for first. The path need not even hold a run: the video is checked first."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "imageio_ffmpeg" else real(name, *a))
    out = tmp_path / "policy.mp4"
    assert main([str(tmp_path / "no run"), "--video", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    said = ('error: --video with mp4 needs imageio-ffmpeg: pip install -e ".[video]", or choose a .gif file '
            "(Pillow, which imageio brings)")
    assert err == [said]
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_evaluation_leaves_no_file(render_run, tmp_path):
    policy = load_policy(render_run, env=RENDER)
    calls = 0

    def interrupted(obs):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt
        return policy(obs)

    interrupted.make_env, interrupted.env_id, interrupted.seed = policy.make_env, policy.env_id, policy.seed
    video = VideoFile(tmp_path / "cut.gif")
    with pytest.raises(KeyboardInterrupt):
        run_episodes(interrupted, 2, None, None, video)
    assert list(tmp_path.iterdir()) == []


def test_a_frame_that_is_no_picture_is_one_line(tmp_path):
    video = VideoFile(tmp_path / "x.gif")
    video.env_name = "X-v0"
    with pytest.raises(EnvError, match=r"rendered an array of shape \(4, 4\) and dtype float64 in rgb_array mode"):
        video.add(np.zeros((4, 4)))
    with pytest.raises(EnvError, match="rendered None"):
        video.add(None)


def evaluate_cli(*args: str) -> subprocess.CompletedProcess:
    tests_dir = str(Path(__file__).resolve().parents[1])
    return subprocess.run([sys.executable, "-m", "spreeze_like.evaluate", *args], capture_output=True, text=True,
                          check=False, timeout=120, cwd=tests_dir)


@pytest.mark.parametrize(
    "video, fragment",
    [
        ("policy.avi", "name a .mp4 or .gif file"),
        ("absent/policy.mp4", "no folder"),
        ("", "that is a folder"),
    ],
)
def test_a_video_path_it_cannot_write_is_one_line(render_run, tmp_path, video, fragment):
    proc = evaluate_cli(str(render_run), "--video", str(tmp_path / video) if video else str(tmp_path))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], \
        proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_env_that_renders_no_frames_is_one_line(tmp_path):
    run = train(dataclasses.replace(TrainConfig(), env="trainer.tiny_envs:TinyWalk-v0", logdir=str(tmp_path / "runs"),
                                    **{**TINY, "total_steps": 300, "learning_starts": 100}),
                print_fn=lambda line: None).run_dir
    out = tmp_path / "walk.gif"
    proc = evaluate_cli(str(run), "--video", str(out), "--env", "trainer.tiny_envs:TinyWalk-v0")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines[-1].startswith("error: "), proc.stderr
    assert "renders nothing: its constructor takes no render_mode (asked for 'rgb_array')" in lines[-1]
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["runs"]


def test_an_env_that_takes_render_mode_but_lists_no_rgb_array_is_one_line(tmp_path):
    """An env whose metadata does not list rgb_array (gymnasium only warns of that when it makes it)."""
    import gymnasium as gym

    env = gym.make("trainer.tiny_envs:TinyRender-v0")
    env.unwrapped.metadata = {"render_modes": ["human"]}
    video = VideoFile(tmp_path / "x.gif")
    with pytest.raises(EnvError, match=r"does not render rgb_array frames \(its render_modes: \['human'\]\)"):
        video.open(env, "TinyRender-v0")
    env.close()
    video.close(keep=False)
    assert list(tmp_path.iterdir()) == []


def test_video_with_a_render_window_is_refused(render_run):
    proc = evaluate_cli(str(render_run), "--video", "x.mp4", "--render", "human")
    assert proc.returncode == 2 and "leave out --render human" in proc.stderr
