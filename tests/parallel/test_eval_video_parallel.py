"""``--video-every`` in the parallel mode: the evaluator process records episode 0 of its scheduled evaluations and
of the final one the supervisor asks for, into ``<run>/videos/``, and the run ends with nothing left behind.

TinyRender's frames are grey levels 0, 20, ..., 100 over its 5-step episodes (tests/trainer/test_eval_video.py
checks the schedule, failures and refusals in one process).
"""

from __future__ import annotations

import numpy as np
import pytest

from spreeze_like.procs.evaluator_proc import read_results
from spreeze_like.roles.eval_video import video_path

from .helpers import assert_nothing_left, finished_counters
from .test_odd_envs import run_cli

imageio = pytest.importorskip("imageio.v2", reason="--video-every needs imageio (the [test] and [video] extras)")
pytestmark = pytest.mark.multiproc


def test_the_evaluator_process_records_the_scheduled_and_final_evaluations(tmp_path):
    proc = run_cli("--env", "trainer.tiny_envs:TinyRender-v0", "--total-steps", "1500", "--eval-every", "500",
                   "--video-every", "1000", "--video-format", "gif", "--logdir", str(tmp_path))
    run_dir, counters = finished_counters(proc, tmp_path)
    videos = sorted((run_dir / "videos").iterdir())
    steps = [int(p.stem.removeprefix("eval_")) for p in videos]
    assert len(steps) == 2 and 1000 <= steps[0] < 1500 and steps[1] == 1500, steps  # no temporary file either
    evaluated = [int(r["env_step"]) for r in read_results(run_dir)]
    assert set(steps) <= set(evaluated) and counters["evaluator"]["evaluations"] == len(evaluated)
    assert all(step in steps for step in evaluated if step >= 1000)  # those before 1000 are not due: not recorded
    for step in steps:
        frames = imageio.mimread(video_path(run_dir, step, "gif"))
        assert [int(np.asarray(f)[..., :3].mean().round()) for f in frames] == [0, 20, 40, 60, 80, 100]
        assert f"video of the evaluation at {step:,} env steps (episode 0, return " in proc.stdout
    assert_nothing_left(run_dir)
