"""The planner, from recorded probe results: 0 GPUs (real recording), 1 and 2 GPUs (synthetic edits)."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from spreeze_like.autotune import plan as plan_module
from spreeze_like.autotune.apply import apply_plan, explicit_fields
from spreeze_like.autotune.layout import SUPPLY_HEADROOM, knee_batch, max_samplers
from spreeze_like.autotune.plan import BATCH_CAP, GPU_MEMORY_FRACTION, PROCESS_BYTES, make_plan, replay_row_bytes
from spreeze_like.autotune.replay_ratio import (
    MIN_RUN_UPDATES,
    REPLAY_RATIO_TARGET,
    in_band,
)
from spreeze_like.autotune.sampler_supply import supply
from spreeze_like.config import TrainConfig
from spreeze_like.errors import ConfigError

from .fixtures.transcribe_probe_text import SOURCE, transcribe
from .helpers import ALL, H200, H200_RECORDED, ONE_GPU, REAL, TWO_GPU, load

LONG = 10_000_000  # a run bounded by wall time, not steps (tools/bench_autotune.py passes this)

CONFIGS = {
    "default": {},
    "utd4": {"utd": 4.0},
    "utd-quarter": {"utd": 0.25},
    "prioritized-long": {"prioritized": True, "total_steps": 3_000_000, "buffer_size": 2_000_000},
    "td3": {"algo": "td3"},
    "time-bound": {"total_steps": LONG},
}


def plan_for(fixture, explicit=(), parallel=True, probes=None, **changes):
    config = dataclasses.replace(TrainConfig(), **changes)
    return make_plan(probes or load(fixture), config, explicit, parallel), config


def with_cores(probes, cores):
    probes = copy.deepcopy(probes)
    probes.hardware.usable_cores = probes.hardware.logical_cores = cores
    return probes


# --- the three machines ------------------------------------------------------------------------------
@pytest.mark.parametrize("total_steps", [20_000, LONG])
def test_real_two_core_cpu_machine(total_steps):
    plan, _ = plan_for(REAL, total_steps=total_steps)
    assert plan.value("actor_device") == plan.value("critic_device") == "cpu"
    # two CPU learners get a core each; the one sampler, paced to them, needs a few percent of a core
    assert plan.value("serial") is False and "in parallel vs" in plan.choices["serial"].reason
    assert plan.value("samplers") == 1 and plan.value("envs_per_sampler") == 1
    # the plan made before the replay-ratio rule, kept: the CPU curve bends at once, learners on the CPU keep R 256
    assert plan.value("batch_size") == 256 and plan.value("utd") == 1.0
    # R 256 is also the short run's least (20,000 updates in 20,000 steps): the reason names what binds
    expected = "need >= 20,000 critic updates" if total_steps == 20_000 else "SAC's tuned ratio"
    assert expected in plan.choices["utd"].reason
    assert plan.predicted["busy_processes"] == 2


def test_the_mode_with_the_higher_expected_rate_wins():
    probes = load(REAL)
    for m in probes.curve("cpu", 2).points:  # pretend 2 threads were 4x faster than 1: serial wins
        m.critic.value = 4 * probes.curve("cpu", 1).point(m.batch_size).critic.value
        m.actor.value = 4 * probes.curve("cpu", 1).point(m.batch_size).actor.value
    plan, _ = plan_for(REAL, probes=probes)
    assert plan.value("serial") is True and plan.value("torch_threads") == 2
    assert "in one process vs" in plan.choices["serial"].reason


def test_a_serial_gain_inside_the_margin_keeps_the_parallel_mode(monkeypatch):
    probes = load(REAL)
    for m in probes.curve("cpu", 2).points:  # 2 threads 2.2x one: serial expected a little ahead of parallel
        m.critic.value = 2.2 * probes.curve("cpu", 1).point(m.batch_size).critic.value
        m.actor.value = 2.2 * probes.curve("cpu", 1).point(m.batch_size).actor.value
    plan, _ = plan_for(REAL, probes=probes)
    reason = plan.choices["serial"].reason
    assert plan.value("serial") is False and f"under the {plan_module.SERIAL_MIN_GAIN}x it must show" in reason
    gain = float(reason.split("one process's ")[1].split("x")[0])
    assert 1.0 < gain < plan_module.SERIAL_MIN_GAIN
    # the margin is what decided: without it the same probes plan serial
    monkeypatch.setattr(plan_module, "SERIAL_MIN_GAIN", 1.0)
    plan, _ = plan_for(REAL, probes=probes)
    assert plan.value("serial") is True and "in one process vs" in plan.choices["serial"].reason


def test_learners_on_the_cpu_keep_the_smallest_batch_even_where_a_doubling_looks_free():
    probes = load(REAL)
    for curve in probes.curves("cpu"):  # every doubling 1.9x the frames/s: a GPU's knee would grow the batch
        for m in curve.points:
            m.critic.value = curve.points[0].critic.value * 0.95 ** (m.batch_size // 512)
    points = sorted(probes.curve("cpu", 1).points, key=lambda p: p.batch_size)
    assert knee_batch(points, serial=False)[0].batch_size > points[0].batch_size
    for total_steps in (LONG, 20_000):  # the long run first: without the rule it would plan a larger batch
        plan, _ = plan_for(REAL, probes=probes, total_steps=total_steps)
        assert plan.value("batch_size") == points[0].batch_size == 256
        assert "learners on the CPU keep batch 256" in plan.choices["batch_size"].reason


def test_a_sampler_that_must_run_flat_out_counts_as_busy():
    probes = load(REAL)
    for n in probes.env.per_sampler:  # samplers barely faster than the learners need: a busy third process
        probes.env.per_sampler[n].value = 60.0
    probes.env.step_with_policy.value = 60.0
    plan, _ = plan_for(REAL, probes=probes)
    assert plan.value("serial") is True and "busy processes on 2 core(s)" in plan.choices["serial"].reason


def test_cpu_machine_with_more_cores_runs_parallel():
    plan, _ = plan_for(REAL, probes=with_cores(load(REAL), 8))
    assert plan.value("serial") is False
    assert 1 <= plan.value("samplers") <= 6
    assert plan.predicted["busy_processes"] <= 8 and plan.predicted["cpu_demand"] <= 8


def test_no_parallel_mode_means_serial():
    plan, _ = plan_for(REAL, parallel=False, probes=with_cores(load(REAL), 8))
    assert plan.value("serial") is True and "not built" in plan.choices["serial"].reason


def test_one_gpu_puts_both_learners_on_it_with_a_large_batch():
    plan, _ = plan_for(ONE_GPU, total_steps=LONG)
    assert plan.value("actor_device") == plan.value("critic_device") == "cuda:0"
    assert plan.value("serial") is False
    # the synthetic GPU curve is launch-bound (flat update time): the batch grows to the cap, the
    # learner stays the bottleneck, and R stays at SAC's 256 (R 128 learned less on the H200 grid)
    assert plan.value("batch_size") == BATCH_CAP
    assert plan.value("utd") * BATCH_CAP == REPLAY_RATIO_TARGET
    assert plan.value("torch_threads") == 1
    # enough samplers, with the headroom, for what the critic learns from
    setup = supply(load(ONE_GPU).env, plan.value("samplers"), plan.value("envs_per_sampler"))
    assert setup.steps_hz >= SUPPLY_HEADROOM * plan.predicted["sample_hz"] * 0.99
    assert setup.steps_hz == pytest.approx(plan.predicted["sampler_capacity_hz"])


def test_two_gpus_put_each_learner_on_its_own_and_the_critic_on_the_faster():
    plan, _ = plan_for(TWO_GPU)
    assert plan.value("critic_device") == "cuda:1"  # 25% faster in the fixture
    assert plan.value("actor_device") == "cuda:0"


def test_the_h200_grid_machine_plans_r256_between_the_grids_two_best_cells():
    # the probe the lent H200 printed before its autotune grid (2026-11-28): there the old rule planned R 128
    # (4 x 2 samplers, batch 4096, UTD 1/32) and reached 81% of the grid's best; the best cells were R 256
    # at batch 2048 (98%) and 8192 (100%), 13 samplers
    plan, _ = plan_for(H200, total_steps=LONG, env="HalfCheetah-v5", algo="crossq")
    assert plan.value("actor_device") == plan.value("critic_device") == "cuda:0"
    assert plan.value("serial") is False and plan.value("torch_threads") == 1
    assert plan.value("batch_size") * plan.value("utd") == REPLAY_RATIO_TARGET
    assert 2048 <= plan.value("batch_size") <= 8192
    # the samplers feed the critic with the headroom, from the measured multi-process curve
    setup = supply(load(H200).env, plan.value("samplers"), plan.value("envs_per_sampler"))
    assert setup.steps_hz >= SUPPLY_HEADROOM * plan.predicted["sample_hz"] * 0.99
    assert setup.how in ("measured", "interpolated")


def test_the_h200_probe_file_plans_what_the_device_printed_and_ran():
    """The probe file the lent H200 wrote before the autotuned run of 2026-11-28, 17:07 UTC, brought back whole
    (BENCHMARKS.md, Autotune): planned here it gives the plan the device printed, and that run reached 95% of
    the best of the grid cells beside it. A change of the planner that changes this plan changes a measured one."""
    plan, _ = plan_for(H200_RECORDED, total_steps=LONG, env="HalfCheetah-v5", algo="crossq")
    assert plan.value("actor_device") == plan.value("critic_device") == "cuda:0"
    assert (plan.value("samplers"), plan.value("envs_per_sampler")) == (2, 4)
    assert (plan.value("batch_size"), plan.value("utd")) == (4096, 0.0625)
    assert plan.value("serial") is False and plan.value("torch_threads") == 1
    # the device printed "expected: 18,711 env steps/s, 1,169.4 critic updates/s" for this file
    assert plan.predicted["sample_hz"] == pytest.approx(18_711, abs=1)
    assert plan.predicted["update_hz"] == pytest.approx(1_169.4, abs=0.1)


def test_the_h200_fixture_is_its_printed_probe():
    # the fixture is what the transcriber makes of the device's text, and the text's own plan line agrees with it
    assert transcribe(SOURCE.read_text()) == json.loads(H200.read_text())
    best = max(p.critic_frames for p in load(H200).curve("cuda:0").points)
    assert "cuda:0 does 10,983,623 critic frames/s at best" in SOURCE.read_text()
    assert best == pytest.approx(10_983_623, rel=1e-4)  # the printed rates are rounded to 0.1 update/s


def test_a_gpu_slower_than_the_cpu_is_not_used():
    probes = load(ONE_GPU)
    for p in probes.curve("cuda:0").points:
        p.critic.value = p.actor.value = 1e-3
    plan, _ = plan_for(ONE_GPU, probes=probes)
    assert plan.value("critic_device") == "cpu" and "no GPU measured faster" in plan.choices["critic_device"].reason


# --- invariants over every fixture and several configs --------------------------------------------------
@pytest.mark.parametrize("config_name", CONFIGS)
@pytest.mark.parametrize("fixture_name", ALL)
def test_plan_invariants(fixture_name, config_name):
    probes = load(ALL[fixture_name])
    changes = CONFIGS[config_name]
    yours = {"utd"} & set(changes)  # a --utd in a config is the user's: the plan keeps it
    plan, config = plan_for(ALL[fixture_name], explicit=yours, **changes)
    hw = probes.hardware
    cores = hw.usable_cores
    # never more busy processes than cores; the paced samplers that do not count add under half a core
    assert plan.predicted["busy_processes"] <= cores
    assert plan.predicted["cpu_demand"] < cores + 0.5
    # replay (and rings) within the free memory
    row = replay_row_bytes(probes.env.obs_dim, probes.env.act_dim, config.prioritized)
    procs = 1 if plan.value("serial") else plan.value("samplers") + 5
    free = hw.memory_available if plan.value("serial") else min(hw.memory_available, hw.shm_free)
    assert plan.value("buffer_size") * row <= free - procs * PROCESS_BYTES
    assert plan.value("buffer_size") >= plan.value("batch_size")
    # batch within GPU memory, and a batch size that was measured
    curve = probes.curve(plan.value("critic_device"))
    point = curve.point(plan.value("batch_size"))
    assert point is not None
    gpu = {g.device: g for g in hw.gpus}.get(plan.value("critic_device"))
    if gpu is not None:
        assert point.peak_memory <= GPU_MEMORY_FRACTION * gpu.total_memory
    # the replay ratio: the user's UTD kept; otherwise inside the band, with the run's minimum of updates
    ratio = plan.value("batch_size") * plan.value("utd")
    assert plan.predicted["replay_ratio"] == pytest.approx(ratio)
    if yours:
        assert plan.value("utd") == changes["utd"] and plan.choices["utd"].source == "user"
    else:
        assert in_band(ratio), ratio
        assert plan.value("utd") * config.total_steps >= MIN_RUN_UPDATES * 0.999
    # the samplers planned make what the critic learns from; never more of them than the cores allow
    if not plan.value("serial"):
        assert plan.predicted["sample_hz"] <= plan.predicted["sampler_capacity_hz"] * 1.001
        assert plan.value("samplers") <= max_samplers(cores)
    # every choice has a one-line reason, and the result is a valid config
    for name, choice in plan.choices.items():
        assert choice.reason and "\n" not in choice.reason, name
    apply_plan(config, plan).validate()


def test_batch_respects_a_small_gpu():
    probes = load(ONE_GPU)
    probes.hardware.gpus[0].total_memory = 2**27  # 128 MiB: the fixture's peak at 8192 is ~146 MiB
    plan, _ = plan_for(ONE_GPU, probes=probes, total_steps=LONG)
    point = probes.curve("cuda:0").point(plan.value("batch_size"))
    assert point.peak_memory <= GPU_MEMORY_FRACTION * 2**27
    assert plan.value("batch_size") < BATCH_CAP


def test_replay_shrinks_to_the_free_memory():
    probes = load(REAL)
    probes.hardware.memory_available = PROCESS_BYTES + 64 * 2**20  # 64 MiB beyond one process
    plan, _config = plan_for(REAL, probes=probes, total_steps=10_000_000, buffer_size=10_000_000)
    row = replay_row_bytes(probes.env.obs_dim, probes.env.act_dim, False)
    assert plan.value("buffer_size") * row <= 0.5 * 64 * 2**20
    assert "would not fit" in plan.choices["buffer_size"].reason


def test_replay_holds_every_row_of_a_her_run():
    """--her-goals K stores 1 + K rows a step: the plan's replay holds the run's rows, not its steps."""
    plain, _ = plan_for(REAL, total_steps=20_000)
    her, _ = plan_for(REAL, total_steps=20_000, her_goals=4)
    assert plain.value("buffer_size") == 20_000 and her.value("buffer_size") == 100_000
    assert "20,000 steps x 5 rows (--her-goals 4)" in her.choices["buffer_size"].reason


def test_cpu_threads_only_when_measured_faster():
    probes = with_cores(load(REAL), 2)
    one, many = probes.curve("cpu", 1), probes.curve("cpu", 2)
    assert many is not None, "the real recording has a 2-thread CPU curve"
    plan, _ = plan_for(REAL, probes=probes, serial=True, explicit={"serial"})
    faster = all(m.critic.value >= 1.1 * one.point(m.batch_size).critic.value for m in many.points)
    assert plan.value("torch_threads") == (2 if faster else 1)
    for m in many.points:  # now make two threads clearly faster
        m.critic.value = 3 * one.point(m.batch_size).critic.value
    plan, _ = plan_for(REAL, probes=probes, serial=True, explicit={"serial"})
    assert plan.value("torch_threads") == 2


# --- the user's flags win ------------------------------------------------------------------------------------
def test_user_flags_win_and_the_rest_is_planned_around_them():
    user = {"batch_size": 1024, "samplers": 3, "critic_device": "cpu", "serial": False}
    plan, config = plan_for(ONE_GPU, explicit=set(user), **user)
    for name, value in user.items():
        assert plan.value(name) == value and plan.choices[name].source == "user"
    assert plan.value("actor_device") == "cuda:0"  # still planned
    tuned = apply_plan(config, plan)
    for name, value in user.items():
        assert getattr(tuned, name) == value


def test_a_flag_equal_to_its_default_still_wins_when_typed():
    # --batch-size 256 typed on the command line: the plan must not replace it with its own choice
    plan, _ = plan_for(ONE_GPU, explicit={"batch_size"}, batch_size=256, total_steps=LONG)
    assert plan.value("batch_size") == 256 and plan.choices["batch_size"].source == "user"
    assert plan.value("utd") * 256 == REPLAY_RATIO_TARGET  # the UTD is planned around it: R at the target
    plan, _ = plan_for(ONE_GPU, total_steps=LONG)
    assert plan.value("batch_size") != 256


def test_explicit_fields_in_python_are_those_off_default():
    config = dataclasses.replace(TrainConfig(), batch_size=512, autotune=True)
    assert explicit_fields(config) == {"batch_size"}
    assert explicit_fields(config, {"samplers"}) == {"batch_size", "samplers"}


@pytest.mark.parametrize("flag", ["critic_device", "actor_device"])
def test_a_device_that_does_not_exist_is_a_one_line_error(flag):
    with pytest.raises(ConfigError) as info:
        plan_for(ONE_GPU, explicit={flag}, **{flag: "cuda:3"})
    assert "cuda:3" in str(info.value) and "\n" not in str(info.value)


# --- the plan as data -----------------------------------------------------------------------------------------
def test_plan_is_pure_and_round_trips():
    probes = load(TWO_GPU)
    before = probes.to_json()
    a, _ = plan_for(TWO_GPU, probes=probes)
    b, _ = plan_for(TWO_GPU, probes=probes)
    assert probes.to_json() == before  # the input is not modified
    assert a.to_dict() == b.to_dict()
    assert json.loads(a.to_json())["choices"]["batch_size"]["value"] == a.value("batch_size")
    text = a.text()
    for name in a.choices:
        assert "--" + name.replace("_", "-") in text


def test_estimates_are_carried_into_the_plan():
    probes = load(REAL)
    probes.ring.estimate = "budget too small"
    plan, _ = plan_for(REAL, probes=probes)
    assert any("ring: budget too small" in e for e in plan.estimates)
    assert "estimate: ring: budget too small" in plan.text()


def test_fixtures_are_labelled():
    for path in (ONE_GPU, TWO_GPU):
        assert json.loads(path.read_text())["_fixture"].startswith("SYNTHETIC")
    assert json.loads(REAL.read_text())["_fixture"].startswith("REAL")
    assert json.loads(H200.read_text())["_fixture"].startswith("TRANSCRIBED")


def test_precision_is_what_the_learner_curves_were_measured_in():
    plan, _ = plan_for(REAL)  # recorded in fp32
    assert plan.value("precision") == "fp32"
    probes = copy.deepcopy(load(REAL))
    for curve in probes.updates:
        curve.precision = "bf16"
    plan, config = plan_for(REAL, probes=probes)
    assert plan.value("precision") == "bf16" and "natively" in plan.choices["precision"].reason
    assert apply_plan(config, plan).precision == "bf16"
    plan, _ = plan_for(REAL, explicit={"precision"}, probes=probes, precision="fp32")
    assert plan.choices["precision"].source == "user" and any("--precision fp32" in n for n in plan.notes)


def test_bf16_measured_but_too_small_an_update_for_it_plans_fp32():
    """The curves say bf16 (a CPU with native bf16), but at 64x64 the planned batch's update is under
    devices.BF16_MIN_WORK_EXPLICIT (SAC's explicit fp32 step), where bf16 ran slower: the plan takes fp32 and says
    why; yours stays yours."""
    probes = copy.deepcopy(load(REAL))
    for curve in probes.updates:
        curve.precision = "bf16"
    plan, config = plan_for(REAL, probes=probes, hidden_sizes=(64, 64))
    batch = plan.value("batch_size")
    assert batch * 64 * 64 < 2**23
    assert plan.value("precision") == "fp32" and "is under 16,777,216" in plan.choices["precision"].reason
    assert apply_plan(config, plan).precision == "fp32"
    plan, _ = plan_for(REAL, probes=probes, hidden_sizes=(64, 64), critic_hidden_sizes=(2048, 2048))
    assert plan.value("precision") == "bf16"  # the critic's 2048-wide layers make the update large
    plan, _ = plan_for(REAL, explicit={"precision"}, probes=probes, hidden_sizes=(64, 64), precision="bf16")
    assert plan.value("precision") == "bf16" and plan.choices["precision"].source == "user"


@pytest.mark.parametrize("limit, fits", [(60.0, False), (1e6, True)])
def test_a_time_limit_says_where_the_session_ends_and_leaves_the_plan_as_it_was(limit, fits):
    plain, _ = plan_for(REAL, total_steps=200_000)
    plan, _ = plan_for(REAL, total_steps=200_000, time_limit_s=limit)
    assert plan.settings() == plain.settings()  # a session's limit: the run's plan is the same
    rate = plan.predicted["sample_hz"]
    notes = [n for n in plan.notes if n.startswith("--time-limit-s")]
    assert len(notes) == 1 and not any(n.startswith("--time-limit-s") for n in plain.notes)
    if fits:
        assert f"take about {200_000 / rate:,.0f} s" in notes[0] and "within the limit" in notes[0]
    else:
        assert f"ends near {rate * limit:,.0f} of the 200,000 env steps" in notes[0] and "--resume" in notes[0]
