"""The pacing rules (pure functions) and the parallel stats schema."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spreeze_like.metrics import stats_schema
from spreeze_like.procs import pacing
from spreeze_like.procs.control import CONTROL, SUPERVISOR, parallel_schema


def test_budget_matches_the_serial_count():
    # the serial tests' tiny run: learning starts at 200 stored transitions, 600 steps -> 401 updates
    assert pacing.critic_budget(600, 200, 1.0) == 401
    assert pacing.critic_budget(400, 200, 2.0) == 2 * (400 - 199)
    assert pacing.critic_budget(199, 200, 1.0) == 0
    assert pacing.critic_budget(200, 200, 0.25) == 0 and pacing.critic_budget(203, 200, 0.25) == 1


@given(preloaded=st.integers(0, 3000), new=st.integers(0, 3000), batch=st.sampled_from([64, 256]),
       starts=st.sampled_from([0, 1000, 2500]), utd=st.sampled_from([0.25, 0.5, 1.0, 2.0]))
def test_a_resume_with_a_saved_replay_counts_like_the_serial_loop(preloaded, new, batch, starts, utd):
    """--save-replay: the serial loop earns utd updates for every transition collected once its replay (loaded rows
    included) holds learn_after; the parallel critic's budget over this session's rows must be that count."""
    learn_after, size, credit = pacing.learn_after(batch, starts), preloaded, 0.0
    for _ in range(new):  # serial.py's loop, one transition per step
        size += 1
        if size >= learn_after:
            credit += utd
    start = pacing.session_learn_after(batch, starts, preloaded)
    assert pacing.critic_budget(new, start, utd) == int(credit + 1e-9)
    assert start == learn_after if preloaded == 0 else start >= 1


@given(updates=st.integers(0, 100_000), start=st.integers(1, 10_000), utd=st.sampled_from([0.1, 0.25, 0.5, 1.0, 2.0,
                                                                                          3.0, 8.0]))
def test_allowance_is_the_data_the_next_update_needs_plus_the_lead(updates, start, utd):
    need = pacing.data_allowance(updates, start, utd, lead=0)
    assert pacing.critic_budget(need, start, utd) >= updates + 1  # enough for the next update
    assert pacing.critic_budget(need - 1, start, utd) < updates + 1  # and not more than needed
    assert pacing.data_allowance(updates, start, utd, lead=64) == need + 64


@given(remaining=st.integers(0, 10**7), samplers=st.integers(1, 64))
def test_quotas_add_up(remaining, samplers):
    quotas = pacing.sampler_quotas(remaining, samplers)
    assert sum(quotas) == remaining and max(quotas) - min(quotas) <= 1


def test_actor_lag_and_backoff():
    assert pacing.actor_lag(10, 10, 1) == 0 and pacing.actor_lag(10, 3, 2) == 2 and pacing.actor_lag(1, 5, 1) == 0
    assert [pacing.backoff_s(n) for n in (1, 2, 3, 6, 20)] == [1, 2, 4, 30, 30]


def test_ring_holds_more_than_the_lead():
    for samplers, envs in [(1, 1), (4, 8), (32, 16)]:
        lead = pacing.default_lead(samplers, envs)
        cap = pacing.ring_capacity(lead, envs)
        assert cap >= 2 * lead and cap & (cap - 1) == 0
    assert pacing.learn_after(256, 1000) == 1000 and pacing.learn_after(4096, 1000) == 4096


def test_lead_covers_a_few_updates_at_a_low_utd():
    assert pacing.default_lead(1, 1) == 64 and pacing.default_lead(4, 8) == 128
    assert pacing.default_lead(4, 8, utd=1 / 64) == 256  # 4 updates' worth of data at 64 transitions each
    # the samplers may then run ahead by the next update's data plus that lead
    assert pacing.data_allowance(10, 1000, 1 / 64, 256) - pacing.data_allowance(9, 1000, 1 / 64, 256) == 64


@pytest.mark.parametrize("samplers", [1, 3])
def test_parallel_schema_extends_the_serial_one(samplers):
    serial, parallel = stats_schema(samplers), parallel_schema(samplers)
    for role, slots in serial.items():
        assert parallel[role][: len(slots)] == slots  # the serial slots first, in order
        assert "done" in parallel[role] or role == "replay"
    assert {"phase", "ckpt_request", "eval_request", "eval_step"} <= set(parallel[CONTROL])
    assert "restarts" in parallel[SUPERVISOR]
