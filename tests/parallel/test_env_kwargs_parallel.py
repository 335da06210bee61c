"""``--env-kwargs`` in the parallel mode: the sampler and evaluator processes are spawned with the config, so
each makes its envs with the run's kwargs (tests/trainer/test_env_kwargs.py covers the rest in one process)."""

from __future__ import annotations

import pytest

from .helpers import TINY_ARGS, assert_nothing_left, only_run_dir, read_status, run_cli

pytestmark = pytest.mark.multiproc


def test_every_process_steps_the_env_made_with_them(tmp_path):
    proc = run_cli(*TINY_ARGS, "--total-steps", "600", "--samplers", "2", "--env-kwargs", '{"max_episode_steps": 50}',
                   "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    counters = read_status(run_dir)["counters"]
    for row in ("sampler-0", "sampler-1"):  # 300 steps each: 6 episodes of 50 (Pendulum's own 200: 1 episode)
        assert counters[row]["episodes"] == 6, counters[row]
        assert counters[row]["episodic_length.sum"] == 300, counters[row]
    assert counters["evaluator"]["eval_length"] == 50, counters["evaluator"]  # its episodes: 50 steps too
    assert_nothing_left(run_dir)
