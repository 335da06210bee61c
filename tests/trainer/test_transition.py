"""Transition rows: pack/unpack round trip and the finite mask."""

from __future__ import annotations

import numpy as np

from spreeze_like.transition import TransitionLayout, finite_rows


def test_pack_unpack_round_trip():
    layout = TransitionLayout(obs_dim=3, act_dim=2)
    assert layout.width == 3 + 2 + 1 + 3 + 1 + 1
    n = 4
    rng = np.random.default_rng(0)
    obs, act, nxt = rng.normal(size=(n, 3)), rng.normal(size=(n, 2)), rng.normal(size=(n, 3))
    rew, term, trunc = rng.normal(size=n), np.array([0, 1, 0, 0]), np.array([0, 0, 1, 0])
    rows = layout.pack(obs, act, rew, nxt, term, trunc)
    assert rows.dtype == np.float32 and rows.shape == (n, layout.width)
    cols = layout.unpack(rows)
    np.testing.assert_allclose(cols["obs"], obs, rtol=1e-6)
    np.testing.assert_allclose(cols["action"], act, rtol=1e-6)
    np.testing.assert_allclose(cols["reward"], rew, rtol=1e-6)
    np.testing.assert_allclose(cols["next_obs"], nxt, rtol=1e-6)
    np.testing.assert_array_equal(cols["terminated"], term)
    np.testing.assert_array_equal(cols["truncated"], trunc)
    assert np.shares_memory(cols["obs"], rows)  # views, no copy


def test_finite_mask():
    layout = TransitionLayout(1, 1)
    rows = np.zeros((3, layout.width), np.float32)
    rows[1, 2] = np.nan
    rows[2, 0] = np.inf
    np.testing.assert_array_equal(finite_rows(rows), [True, False, False])


def test_replay_writer_puts_rows_into_replay_columns():
    from spreeze_like.metrics import stats_schema
    from spreeze_like.replay import ReplayStorage, UniformSampler
    from spreeze_like.roles.ports import LocalStatsBlock
    from spreeze_like.roles.replay_writer import ReplayWriter

    layout = TransitionLayout(obs_dim=2, act_dim=1)
    storage = ReplayStorage.local(8, 2, 1)
    stats = LocalStatsBlock(stats_schema(1)).role("replay")
    writer = ReplayWriter(UniformSampler(storage, seed=0), layout, stats)
    obs = np.arange(10, dtype=np.float32).reshape(5, 2)
    rows = layout.pack(obs, -np.ones((5, 1)), np.arange(5), obs + 100, [0, 0, 1, 0, 0], [0, 0, 0, 0, 1])
    writer.write(rows)
    writer.write(rows[:0])  # an empty write is fine
    assert writer.size == 5 and stats.get("inserted") == 5 and stats.get("size") == 5
    got = storage.gather(np.arange(5))
    np.testing.assert_array_equal(got.obs, obs)
    np.testing.assert_array_equal(got.next_obs, obs + 100)
    np.testing.assert_array_equal(got.reward, np.arange(5))
    np.testing.assert_array_equal(got.terminated, [0, 0, 1, 0, 0])
