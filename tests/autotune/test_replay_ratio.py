"""The learning-speed rule: replay ratio in a band, a batch only as large as the samplers can feed, many samplers.

The planner on the synthetic 2-GPU/16-core fixture (before this rule it chose batch 8192 at UTD 1
with one sampler: 384 env steps/s, each transition read 8192 times), on variants of it whose
samplers are slow, and the rule's functions on hand-made curves.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from spreeze_like.autotune import sampler_supply
from spreeze_like.autotune.layout import BATCH_CAP, max_samplers
from spreeze_like.autotune.plan import make_plan
from spreeze_like.autotune.replay_ratio import (
    MIN_RUN_UPDATES,
    REPLAY_RATIO_MAX,
    REPLAY_RATIO_MIN,
    REPLAY_RATIO_TARGET,
    choose_feed,
    in_band,
)
from spreeze_like.autotune.results import EnvRates, Rate, UpdatePoint
from spreeze_like.config import TrainConfig

from .helpers import REAL, TWO_GPU, load

LONG = 10_000_000  # a run bounded by wall time (the benchmarks' --total-steps)


def plan_for(probes, explicit=(), **changes):
    config = dataclasses.replace(TrainConfig(), **changes)
    return make_plan(probes, config, explicit, True)


def slower_samplers(probes, factor):
    """The fixture with every sampler rate (one process and many) divided by ``factor``."""
    probes = copy.deepcopy(probes)
    env = probes.env
    parallel = [r for by_k in env.parallel.values() for r in by_k.values()]
    for rate in [env.step_with_policy, *env.per_sampler.values(), *parallel]:
        rate.value /= factor
    return probes


# --- the 2-GPU / 16-core fixture ---------------------------------------------------------------------
def test_two_gpus_time_bound_run_learns_from_many_samplers_at_a_ratio_in_the_band():
    probes = load(TWO_GPU)
    plan = plan_for(probes, total_steps=LONG)
    assert (plan.value("critic_device"), plan.value("actor_device")) == ("cuda:1", "cuda:0")
    assert plan.value("serial") is False
    batch, utd = plan.value("batch_size"), plan.value("utd")
    ratio = batch * utd
    assert in_band(ratio) and ratio < batch  # not UTD 1 at a large batch: each transition read <= 1024 times
    assert plan.value("samplers") > 1
    # the batch is no larger than the samplers can feed: what the critic learns from at R is within
    # what the cores' samplers can make, and the planned ones cover it
    critic_frames = plan.predicted["update_frames_hz"]
    assert critic_frames / ratio <= plan.predicted["max_sampler_hz"]
    assert plan.predicted["sample_hz"] <= plan.predicted["sampler_capacity_hz"]
    # GPU learners, learner-bound: R at SAC's 256, not the band's floor (R 128 learned less on the H200 grid)
    assert ratio == REPLAY_RATIO_TARGET
    assert plan.predicted["sample_hz"] > 25 * 384  # vs the 384 env steps/s of the update-frames-only plan
    reasons = {name: c.reason for name, c in plan.choices.items()}
    assert "replay ratio R = batch x UTD" in reasons["utd"] and "band [128, 1024]" in reasons["utd"]
    assert "R at SAC's tuned ratio (R 128 learned less in 90 s on the H200 grid" in reasons["utd"]
    assert "env steps/s" in reasons["batch_size"] and f"R {ratio:.0f}" in reasons["batch_size"]
    assert "env steps/s" in reasons["samplers"] and "(measured)" in reasons["samplers"]
    assert "replay ratio 256" in plan.text()


def test_two_gpus_short_run_keeps_its_updates():
    # the default 20,000-step run has no time for a large batch at a small UTD: SAC's defaults
    plan = plan_for(load(TWO_GPU))
    assert plan.value("critic_device") == "cuda:1"
    assert plan.value("utd") * 20_000 >= MIN_RUN_UPDATES
    assert in_band(plan.value("batch_size") * plan.value("utd"))
    assert plan.value("batch_size") == 256 and plan.value("utd") == 1.0
    assert "need >= 20,000 critic updates" in plan.choices["utd"].reason


def test_a_run_length_between_bounds_the_batch_not_the_band():
    plan = plan_for(load(TWO_GPU), total_steps=200_000)  # UTD >= 0.1
    batch, utd = plan.value("batch_size"), plan.value("utd")
    assert utd * 200_000 >= MIN_RUN_UPDATES * 0.999 and in_band(batch * utd)
    assert batch < BATCH_CAP  # 8192 would need R >= 8192 x 0.1 = 819 and learn from fewer env steps/s


def test_slow_samplers_stop_the_batch_where_they_can_no_longer_feed_it():
    probes = slower_samplers(load(TWO_GPU), 40.0)  # 13 samplers x 8 envs: ~2,400 env steps/s in all
    plan = plan_for(probes, total_steps=LONG)
    batch, ratio = plan.value("batch_size"), plan.value("batch_size") * plan.value("utd")
    assert batch < BATCH_CAP  # the critic could do 8192, the samplers cannot feed it
    # R no lower than SAC's 256 (the floor since the H200 grid): a batch the samplers would feed below it runs
    # learner-bound at 256 and learns from fewer env steps/s than one they feed flat out a little above it
    assert in_band(ratio) and ratio >= REPLAY_RATIO_TARGET
    # the samplers run flat out (all of them the cores allow, or within the tolerance of that)
    assert plan.predicted["sample_hz"] == pytest.approx(plan.predicted["max_sampler_hz"], rel=0.06)
    assert plan.value("samplers") >= 0.9 * max_samplers(16)
    assert "re-read the same data" in plan.choices["batch_size"].reason


def test_samplers_far_too_slow_put_the_ratio_at_the_top_and_say_so():
    probes = slower_samplers(load(TWO_GPU), 4000.0)
    plan = plan_for(probes, total_steps=LONG)
    assert plan.value("batch_size") * plan.value("utd") == pytest.approx(REPLAY_RATIO_MAX, rel=1e-3)
    assert plan.value("batch_size") == 256  # the smallest: the critic's spare rate cannot be used anyway
    assert "band's top" in plan.choices["utd"].reason


def test_cpu_learners_keep_the_target_ratio_even_with_spare_cores():
    probes = copy.deepcopy(load(REAL))
    probes.hardware.usable_cores = probes.hardware.logical_cores = 8
    plan = plan_for(probes, total_steps=LONG)
    assert plan.value("critic_device") == "cpu"
    assert plan.value("batch_size") * plan.value("utd") == REPLAY_RATIO_TARGET


def test_the_users_utd_is_kept_and_the_batch_planned_around_it():
    plan = plan_for(load(TWO_GPU), explicit={"utd"}, utd=1.0, total_steps=LONG)
    assert plan.value("utd") == 1.0 and plan.choices["utd"].source == "user"
    assert plan.value("batch_size") == 256  # the in-band batch with the most env steps/s at UTD 1 (R 256)
    plan = plan_for(load(TWO_GPU), explicit={"utd", "batch_size"}, utd=0.001, batch_size=8192, total_steps=LONG)
    assert plan.value("utd") == 0.001 and plan.value("batch_size") == 8192
    assert any("outside the band" in note for note in plan.notes)


# --- the rule on hand-made curves ------------------------------------------------------------------------
def _points(seconds_per_update: dict[int, float]) -> list[tuple[UpdatePoint, float]]:
    out = []
    for b, s in seconds_per_update.items():
        rate = Rate(1.0 / s, "updates/s", 100, 100 * s)
        out.append((UpdatePoint(b, rate, rate), 1.0 / s))
    return out


FLAT = _points({256: 2e-3, 512: 2e-3, 1024: 2.1e-3, 2048: 2.2e-3, 4096: 2.5e-3})  # a launch-bound GPU


def test_learner_bound_takes_the_batch_with_most_frames_at_the_floor():
    feed = choose_feed(FLAT, supply_hz=1e6, floor=REPLAY_RATIO_MIN, least_utd=0.0)
    assert feed.batch_size == 4096 and feed.ratio == REPLAY_RATIO_MIN and feed.limit == "floor"
    assert feed.data_hz == pytest.approx(4096 / 2.5e-3 / REPLAY_RATIO_MIN)


def test_sampler_bound_grows_the_batch_only_as_far_as_the_samplers_feed_it():
    # 5,000 env steps/s: batch 2048 learns from all of them at R 186; 4096 would too, at R 328 --
    # re-reading the same data beyond SAC's ratio; 1024 is learner-bound (R 128 gives 3,810/s)
    feed = choose_feed(FLAT, supply_hz=5_000, floor=REPLAY_RATIO_MIN, least_utd=0.0)
    assert feed.data_hz == pytest.approx(5_000)
    assert feed.batch_size == 2048 and feed.limit == "balanced"
    assert feed.ratio == pytest.approx(2048 / 2.2e-3 / 5_000, rel=1e-3)


def test_a_run_too_short_for_a_batch_skips_it():
    feed = choose_feed(FLAT, supply_hz=1e6, floor=REPLAY_RATIO_MIN, least_utd=1.0)
    assert feed.batch_size * feed.utd >= feed.batch_size  # UTD >= 1
    assert feed.batch_size <= REPLAY_RATIO_MAX and in_band(feed.ratio)


# --- what samplers make ------------------------------------------------------------------------------------
def _env(parallel: dict[int, dict[int, float]], one: dict[int, float]) -> EnvRates:
    rate = lambda v: Rate(v, "steps/s", 100, 1.0)
    return EnvRates("X-v0", 3, 1, rate(1e5), rate(one[1]), {k: rate(v) for k, v in one.items()},
                    {n: {k: rate(v) for k, v in by_k.items()} for n, by_k in parallel.items()})


def test_supply_is_measured_interpolated_or_extrapolated():
    env = _env({1: {1: 1000, 4: 3000}, 4: {1: 3600, 4: 10_000}}, {1: 1000, 4: 3000})
    assert sampler_supply.supply(env, 4, 4).steps_hz == 10_000 and sampler_supply.supply(env, 4, 4).how == "measured"
    mid = sampler_supply.supply(env, 2, 1)
    assert mid.how == "interpolated" and mid.steps_hz == pytest.approx(1000 + (3600 - 1000) / 3)
    far = sampler_supply.supply(env, 8, 4)
    assert far.how == "extrapolated" and far.steps_hz == pytest.approx(20_000)  # 4's per-process rate, 8 times


def test_supply_without_a_multi_process_curve_is_assumed_linear_and_noted():
    env = _env({}, {1: 1000, 4: 3000})
    setup = sampler_supply.supply(env, 3, 4)
    assert setup.how == "assumed linear" and setup.steps_hz == 9000
    assert "assumed" in sampler_supply.scaling_note(env, setup)


def test_setup_for_takes_the_fewest_processes_then_the_fewest_envs():
    env = _env({1: {1: 1000, 4: 3000}, 2: {1: 2000, 4: 6000}, 4: {1: 4000, 4: 12_000}}, {1: 1000, 4: 3000})
    for rate, setup in ((2500, (1, 4)), (5000, (2, 4))):
        made = sampler_supply.setup_for(env, rate, 4)
        assert (made.samplers, made.envs_per_sampler) == setup
    best = sampler_supply.setup_for(env, 1e9, 4)  # more than any setup makes: the fastest
    assert (best.samplers, best.envs_per_sampler) == (4, 4)
