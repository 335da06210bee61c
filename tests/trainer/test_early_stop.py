"""``--time-limit-s`` and ``--stop-at-return`` (spreeze_like/early_stop.py): the rule, its flag, a serial run."""

from __future__ import annotations

import dataclasses
import math

import pytest

from spreeze_like.checkpoint import checkpoint_step, list_checkpoints
from spreeze_like.config import TrainConfig
from spreeze_like.early_stop import EarlyStop
from spreeze_like.errors import ConfigError
from spreeze_like.training import train

from .test_serial import tiny


def test_no_limit_never_times_out():
    rule = EarlyStop(None, 0.0, t0=100.0)
    assert rule.deadline == math.inf
    assert rule.timed_out(1e12, 5) is None and rule.evaluated(1e9, 5) is None
    assert rule.reason == ""


def test_the_time_limit_counts_from_the_sessions_start():
    rule = EarlyStop(None, 30.0, t0=100.0)
    assert rule.timed_out(129.9, 10) is None and rule.reason == ""
    line = rule.timed_out(130.0, 1234)
    assert line is not None and "--time-limit-s 30 reached at 1,234 env steps" in line
    assert rule.reason == "time limit"


@pytest.mark.parametrize(("mean_return", "stops"), [(-200.0, True), (-150.0, True), (-200.1, False),
                                                     (float("nan"), False)])
def test_an_evaluation_stops_the_run_at_or_above_the_target(mean_return: float, stops: bool):
    rule = EarlyStop(-200.0, 0.0, t0=0.0)
    line = rule.evaluated(mean_return, 3000)
    assert (line is not None) is stops and bool(rule.reason) is stops
    if stops:
        assert "--stop-at-return -200.0 at 3,000 env steps" in line and rule.reason == "return"


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_a_negative_or_non_finite_limit_is_refused_in_one_line(value: float):
    with pytest.raises(ConfigError, match=r"^--time-limit-s .* is invalid: must be"):
        dataclasses.replace(TrainConfig(), time_limit_s=value).validate()


def test_a_serial_run_stops_at_its_time_limit_with_a_checkpoint_and_an_evaluation_and_resumes(tmp_path):
    lines: list[str] = []
    cfg = tiny(tmp_path, total_steps=10**7, time_limit_s=2.0)
    first = train(cfg, print_fn=lines.append)
    assert first.stop_reason == "time limit" and first.stopped_early
    assert 0 < first.env_steps < cfg.total_steps
    assert any("--time-limit-s 2 reached" in line for line in lines), lines
    # it ended as at its last step: its final evaluation and checkpoint are at the step it stopped at
    assert first.evals[-1][0] == first.env_steps and len(first.final_eval_returns) == cfg.eval_episodes
    assert checkpoint_step(list_checkpoints(first.run_dir)[-1]) == first.env_steps
    # --resume continues it; the limit counts again from the new session's start
    again = train(dataclasses.replace(cfg, resume=str(first.run_dir)), print_fn=lambda line: None)
    assert again.run_dir == first.run_dir and again.stop_reason == "time limit"
    assert first.env_steps < again.env_steps < cfg.total_steps
