"""Monitor: counters become rates, mean accumulators become period means, evals land at their step;
curves.csv rows; the custom-scalars layout as TensorBoard's own plugin reads it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
from tensorboard.context import RequestContext
from tensorboard.plugins.base_plugin import TBContext
from tensorboard.plugins.custom_scalar.custom_scalars_plugin import CustomScalarsPlugin
from tensorboard.plugins.scalar.scalars_plugin import ScalarsPlugin

from spreeze_like.config import TrainConfig
from spreeze_like.curves import CurvePoint, read_curves
from spreeze_like.metrics import stats_schema
from spreeze_like.roles.monitor import SCALARS_LAYOUT, Monitor
from spreeze_like.roles.ports import LocalStatsBlock, observe
from spreeze_like.training import train

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
    assert lines and "step 600/1,000" in lines[0] and "return -200.0" in lines[0] and "eval -150.0 |" in lines[0]
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
    assert "eval/success_rate" not in got and "charts/success_rate" not in got  # the env said nothing of success
    assert "hw/cpu_percent" in got and "hw/mem_used" in got
    assert any("hyperparameters" in t for t in text_tags(tmp_path))


def test_success_rates_where_the_env_says_them(tmp_path):
    """A goal env's episodes: the training share pooled over the samplers' episodes that said it, the evaluation's
    share at its step, and the progress line beside the eval return."""
    block, clock, lines = LocalStatsBlock(stats_schema(2)), Clock(), []
    monitor = Monitor(tmp_path, block.snapshot, {"env": "X", "seed": 1}, total_steps=1000, start_step=0,
                      tb_interval=1.0, log_interval=1.0, print_fn=lines.append, clock=clock)
    s0, s1, ev = block.role("sampler-0"), block.role("sampler-1"), block.role("evaluator")
    s0.add("env_steps", 100)
    for sampler, won in ((s0, 1.0), (s0, 0.0), (s1, 1.0), (s1, 1.0)):
        observe(sampler, "episodic_return", -1.0)
        observe(sampler, "episodic_success", won)
    ev.set("eval_return", -2.0)
    ev.set("eval_env_step", 100)
    ev.set("eval_success", 0.75)
    ev.set("eval_success_n", 4)
    ev.add("evaluations")
    clock.t += 2.0
    assert monitor.poll()
    assert "eval -2.0 (success 75%)" in lines[0]
    monitor.close()
    got = scalars(tmp_path)
    assert got["charts/success_rate"] == [(100, pytest.approx(0.75))]  # 3 of the 4 training episodes
    assert got["eval/success_rate"] == [(100, pytest.approx(0.75))]
    curves = read_curves(tmp_path)  # the same shares in curves.csv, for tools/plot_runs.py
    assert [(p.env_steps, p.success) for p in curves.train] == [(100, pytest.approx(0.75))]
    assert [(p.env_steps, p.success) for p in curves.eval] == [(100, pytest.approx(0.75))]


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


@pytest.mark.parametrize("counter", ["nstep_dropped", "her_rows"])
def test_nstep_drops_and_her_rows_are_a_tag_only_where_there_are_some(tmp_path, counter):
    block, clock = LocalStatsBlock(stats_schema(2)), Clock()
    monitor = Monitor(tmp_path, block.snapshot, {"env": "X"}, total_steps=1000, tb_interval=1.0, clock=clock)
    block.role("sampler-0").add("env_steps", 100)
    clock.t += 1.0
    assert monitor.poll()  # a run without the flag (or one before its first truncation / episode end): no tag
    block.role("sampler-0").add(counter, 4)
    block.role("sampler-1").add(counter, 2)
    block.role("sampler-1").add("env_steps", 100)
    clock.t += 1.0
    assert monitor.poll()
    monitor.close()
    assert scalars(tmp_path)[f"samplers/{counter}"] == [(200, 6.0)]


def test_curves_rows_for_training_periods_and_evaluations(tmp_path):
    block, clock = LocalStatsBlock(stats_schema(2)), Clock()
    config = {"env": "X", "algo": "td3", "seed": 4, "serial": False, "eval_episodes": 7}
    monitor = Monitor(tmp_path, block.snapshot, config, total_steps=1000, start_step=500, tb_interval=1.0,
                      clock=clock, session_start=clock.t - 3.0)  # the session began 3 s before the monitor
    s0, s1, ev = block.role("sampler-0"), block.role("sampler-1"), block.role("evaluator")
    s0.add("env_steps", 60)
    clock.t += 1.0
    assert monitor.poll()  # no episode ended: no train row
    observe(s0, "episodic_return", -100.0)
    observe(s1, "episodic_return", -300.0)
    s1.add("env_steps", 40)
    clock.t += 1.0
    assert monitor.poll()
    ev.set("eval_return", -150.0)
    ev.set("eval_env_step", 590)
    ev.add("evaluations")
    clock.t += 0.25
    assert monitor.evaluations_seen < block.role("evaluator").get("evaluations")
    monitor.poll_evals()  # between writes, as the parallel monitor does when the counter moves
    clock.t += 0.25
    monitor.close()
    curves = read_curves(tmp_path)
    assert curves.meta == {"format": "spreeze-curves/2", "system": "spreeze_like", "mode": "parallel", "env": "X",
                           "algo": "td3", "seed": 4}
    assert curves.train == [CurvePoint("train", 5.0, 600, -200.0, 2)]
    assert curves.eval == [CurvePoint("eval", 5.25, 590, -150.0, 7)]  # once, when first seen


def test_resumed_monitor_cuts_the_curve_at_the_checkpoint(tmp_path):
    block, clock = LocalStatsBlock(stats_schema(1)), Clock()
    monitor = Monitor(tmp_path, block.snapshot, {"env": "X"}, total_steps=1000, tb_interval=1.0, clock=clock)
    sampler = block.role("sampler-0")
    for _ in range(3):
        sampler.add("env_steps", 100)
        observe(sampler, "episodic_return", -1.0)
        clock.t += 1.0
        monitor.poll()
    monitor.close()
    block, clock = LocalStatsBlock(stats_schema(1)), Clock()  # a new session from the checkpoint at step 200
    monitor = Monitor(tmp_path, block.snapshot, {"env": "X"}, total_steps=1000, start_step=200, tb_interval=1.0,
                      purge_step=201, clock=clock)
    block.role("sampler-0").add("env_steps", 50)
    observe(block.role("sampler-0"), "episodic_return", -0.5)
    clock.t += 1.0
    monitor.close()
    assert [(p.env_steps, p.wall_s) for p in read_curves(tmp_path).train] == [(100, 1.0), (200, 2.0), (250, 3.0)]


def _custom_scalars(run_root: Path) -> tuple[CustomScalarsPlugin, RequestContext]:
    """TensorBoard's own custom-scalars plugin over the run folders under ``run_root``."""
    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(run_root))
    mux.Reload()
    plugins: dict[str, object] = {}
    tb = TBContext(logdir=str(run_root), multiplexer=mux, data_provider=MultiplexerDataProvider(mux, str(run_root)),
                   plugin_name_to_instance=plugins)
    plugins["scalars"] = ScalarsPlugin(tb)  # the custom-scalars charts read their data through it
    return CustomScalarsPlugin(tb), RequestContext()


def test_the_layout_is_in_the_events_once_per_session(tmp_path):
    run = tmp_path / "run"
    run.mkdir()  # a run folder exists before its monitor (prepare_run); the monitor never makes one
    Monitor(run, LocalStatsBlock(stats_schema(1)).snapshot, {"env": "X", "serial": True}, 100).close()
    plugin, ctx = _custom_scalars(tmp_path)
    layout = json.loads(plugin.layout_impl(ctx, ""))
    groups = {c["title"]: {ch["title"]: ch["multiline"]["tag"] for ch in c["chart"]} for c in layout["category"]}
    assert groups == SCALARS_LAYOUT  # a serial run: no Pipeline group
    assert list(groups) == ["Returns", "Speed", "Losses", "Policy lag"]
    parallel = tmp_path / "parallel"
    parallel.mkdir()
    Monitor(parallel, LocalStatsBlock(stats_schema(1)).snapshot, {"env": "X", "serial": False}, 100).close()
    merged = json.loads(_custom_scalars(tmp_path)[0].layout_impl(ctx, ""))
    assert [c["title"] for c in merged["category"]] == ["Returns", "Speed", "Losses", "Policy lag", "Pipeline"]


def test_every_chart_of_the_layout_has_data_in_a_real_sac_run(tmp_path):
    config = dataclasses.replace(
        TrainConfig(), env="trainer.tiny_envs:TinyWalk-v0", logdir=str(tmp_path), serial=True, hidden_sizes=(16, 16),
        batch_size=16, learning_starts=50, total_steps=150, eval_every=50, eval_episodes=2, log_interval=0,
        tb_interval=0, checkpoint_every=0)
    result = train(config, print_fn=lambda line: None)
    plugin, ctx = _custom_scalars(tmp_path)
    run = result.run_dir.name
    for group, charts in SCALARS_LAYOUT.items():
        for chart, regexes in charts.items():
            for regex in regexes:
                found = plugin.scalars_impl(ctx, run, regex, "")["tag_to_events"]
                assert len(found) == 1 and next(iter(found.values())), (group, chart, regex)
    curves = read_curves(result.run_dir)
    assert curves.train and [(p.env_steps, p.episode_return) for p in curves.eval] == [
        (step, pytest.approx(ret)) for step, ret, _ in result.evals]
