"""Monitor: counters become rates, mean accumulators become period means, evals land at their step."""

from __future__ import annotations

import pytest

from spreeze_like.metrics import stats_schema
from spreeze_like.roles.monitor import Monitor
from spreeze_like.roles.ports import LocalStatsBlock, observe

from .tb import scalars, text_tags


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_rates_means_and_eval(tmp_path):
    block, clock, lines = LocalStatsBlock(stats_schema(2)), Clock(), []
    monitor = Monitor(
        tmp_path,
        block.snapshot,
        {"env": "X", "seed": 1},
        total_steps=1000,
        start_step=500,
        tb_interval=1.0,
        log_interval=1.0,
        print_fn=lines.append,
        clock=clock,
    )
    s0, s1 = block.role("sampler-0"), block.role("sampler-1")
    critic, actor, ev = block.role("critic-learner"), block.role("actor-learner"), block.role("evaluator")
    s0.add("env_steps", 60)
    s1.add("env_steps", 40)
    observe(s0, "episodic_return", -100.0)
    observe(s1, "episodic_return", -300.0)
    critic.add("updates", 50)
    critic.add("update_frames", 50 * 256)
    observe(critic, "qf1_loss", 5.0, 10)  # mean 0.5
    observe(actor, "actor_loss", -20.0, 10)
    ev.set("eval_return", -150.0)
    ev.set("eval_env_step", 560)
    ev.add("evaluations")
    clock.t += 2.0
    assert monitor.poll()
    assert not monitor.poll()  # within tb_interval
    assert lines and "step 600/1,000" in lines[0] and "return -200.0" in lines[0] and "eval -150.0" in lines[0]
    monitor.close()
    got = scalars(tmp_path)
    last = {tag: values[-1] for tag, values in got.items()}
    assert last["perf/sample_hz"] == (600, pytest.approx(50.0))  # 100 steps in 2 s, at global step 500+100
    assert last["perf/update_hz"][1] == pytest.approx(25.0)
    assert last["perf/update_frames_hz"][1] == pytest.approx(25.0 * 256)
    assert got["charts/episodic_return"][0] == (600, pytest.approx(-200.0))
    assert got["losses/qf1_loss"][0][1] == pytest.approx(0.5)
    assert got["losses/actor_loss"][0][1] == pytest.approx(-2.0)
    assert got["eval/episodic_return"] == [(560, pytest.approx(-150.0))]  # once, at its own step
    assert "hw/cpu_percent" in got and "hw/mem_used" in got
    assert any("hyperparameters" in t for t in text_tags(tmp_path))


def test_the_curve_ends_at_the_final_step_even_right_after_a_point(tmp_path):
    """A fast run can reach its last step a fraction of a second after the previous point."""
    block, clock = LocalStatsBlock(stats_schema(1)), Clock()
    monitor = Monitor(tmp_path, block.snapshot, {"env": "X"}, total_steps=1000, tb_interval=1.0, clock=clock)
    sampler = block.role("sampler-0")
    sampler.add("env_steps", 300)
    clock.t += 1.0
    assert monitor.poll()
    sampler.add("env_steps", 94)  # the last steps, 0.1 s later
    clock.t += 0.1
    monitor.close()
    assert scalars(tmp_path)["charts/SPS"][-1][0] == 394


def test_no_duplicate_point_when_nothing_moved(tmp_path):
    block, clock = LocalStatsBlock(stats_schema(1)), Clock()
    monitor = Monitor(tmp_path, block.snapshot, {"env": "X"}, total_steps=1000, tb_interval=1.0, clock=clock)
    block.role("sampler-0").add("env_steps", 300)
    clock.t += 1.0
    assert monitor.poll()
    clock.t += 0.1
    monitor.close()
    assert [s for s, _ in scalars(tmp_path)["charts/SPS"]] == [300]
