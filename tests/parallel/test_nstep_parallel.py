"""``--n-step`` with sampler processes: rows folded in each process, and pacing that counts only rows.

TinyWalk's episodes are 5 steps: at N = 5 every episode yields one row and drops 4 steps. Counted as emitted,
those drops would grow past the samplers' lead (64 here) within 16 episodes and the run would wait for data
forever (the critic for rows that never come, the samplers for updates): the run must finish, every step
accounted for as a row, a drop or a step still held, and the critic's updates the serial count of its rows.
"""

from __future__ import annotations

import pytest

from spreeze_like.procs import pacing

from .helpers import assert_nothing_left, only_run_dir, read_status
from .test_odd_envs import TINY, run_cli

pytestmark = pytest.mark.multiproc


def test_samplers_that_drop_most_steps_still_finish_the_run_with_every_step_counted(tmp_path):
    proc = run_cli("--env", TINY + "TinyWalk-v0", "--n-step", "5", "--total-steps", "3000", "--samplers", "2",
                   "--logdir", str(tmp_path), timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    counters = read_status(run_dir)["counters"]
    rows = 0
    for name in ("sampler-0", "sampler-1"):
        row = counters[name]
        assert row["env_steps"] == 1500 and row["episodes"] == 300, row
        assert row["nstep_dropped"] == 4 * 300 and row["nstep_pending"] == 0, row  # 1500 = 300 whole episodes
        rows += row["env_steps"] - row["nstep_dropped"]
    assert counters["replay"]["inserted"] == rows == 600
    assert counters["critic-learner"]["total_updates"] == pacing.critic_budget(600, pacing.learn_after(64, 300), 1.0)
    assert_nothing_left(run_dir)
