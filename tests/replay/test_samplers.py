"""PrioritizedSampler: the learner's two lines, stale updates, weights, beta schedule, max priority
for new rows; and the import failure message when the compiled module is missing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from spreeze_like.errors import ConfigError
from spreeze_like.native import _native
from spreeze_like.replay import PrioritizedConfig, PrioritizedSampler, ReplayStorage, SumTree
from tests.replay.helpers import assert_tree_consistent
from tests.replay.test_storage import ACT, OBS, chunk


def make(capacity: int = 64, **config) -> PrioritizedSampler:
    storage = ReplayStorage.local(capacity, OBS, ACT)
    return PrioritizedSampler(storage, SumTree.local(capacity), PrioritizedConfig(**config), seed=1)


def test_two_line_learner_use():
    sampler = make(256, alpha=1.0, eps=0.0)
    sampler.add(*chunk(0, 256))
    batch = sampler.sample(32)
    np.testing.assert_array_equal(batch.reward, batch.slots)  # rows belong to their slots
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.slots + 0.5)
    assert batch.weights.dtype == np.float32 and batch.generations.dtype == np.uint64
    td = np.arange(1, 33, dtype=np.float32)
    assert sampler.update_priorities(batch.slots, batch.generations, td) == 32
    last = {int(s): float(t) for s, t in zip(batch.slots, td)}  # a repeated slot keeps its last error
    np.testing.assert_array_equal(sampler.tree.get(np.array(list(last))), list(last.values()))
    assert_tree_consistent(sampler.tree)


def test_updates_for_overwritten_slots_are_dropped():
    sampler = make(64, alpha=1.0, eps=0.0)
    sampler.add(*chunk(0, 64))
    batch = sampler.sample(64)
    sampler.add(*chunk(64, 16))  # FIFO: slots 0..15 now hold new transitions
    fresh = batch.slots >= 16
    applied = sampler.update_priorities(batch.slots, batch.generations, np.full(64, 5.0))
    assert applied == np.count_nonzero(fresh)
    pr = sampler.tree.get(np.arange(64))
    assert np.all(pr[:16] == 1.0)  # the new rows keep the max priority they were given
    assert np.all(pr[np.unique(batch.slots[fresh])] == 5.0)


def test_new_rows_get_the_max_priority_and_weights_follow_priorities():
    sampler = make(8, alpha=1.0, eps=0.0, beta0=1.0)
    sampler.add(*chunk(0, 4))
    batch = sampler.sample(4)
    sampler.update_priorities(batch.slots, batch.generations, np.full(4, 0.5))
    sampler.update_priorities(np.array([0]), sampler.storage.generations[[0]], np.array([4.0]))
    sampler.add(*chunk(4, 1))
    assert sampler.tree.get(np.array([4]))[0] == 4.0  # the largest priority seen so far
    pr_all = sampler.tree.get(np.arange(5))
    for _ in range(50):
        batch = sampler.sample(5)
        pr = sampler.tree.get(batch.slots)
        np.testing.assert_allclose(batch.weights, pr_all.min() / pr, rtol=1e-6)  # beta = 1
    assert sampler.tree.min() == 0.5 and pr_all.max() == 4.0


def test_beta_anneals_linearly_to_one():
    sampler = make(16, beta0=0.4, beta_steps=10)
    sampler.add(*chunk(0, 16))
    seen = []
    for _ in range(12):
        seen.append(sampler.beta)
        sampler.sample(4)
    np.testing.assert_allclose(seen[:11], 0.4 + 0.06 * np.arange(11))
    assert seen[11] == 1.0


def test_torn_rows_are_redrawn():
    sampler = make(64)
    sampler.add(*chunk(0, 64))
    busy = np.arange(0, 64, 2, dtype=np.int64)
    _native.generations_begin_write(sampler.storage.generations, busy)  # a write in flight on half
    for _ in range(10):
        batch = sampler.sample(64)
        assert np.all(batch.slots % 2 == 1)
        np.testing.assert_array_equal(batch.reward, batch.slots)


def test_bad_sampler_input():
    sampler = make(16)
    with pytest.raises(ValueError, match="only 0 stored"):
        sampler.sample(1)
    sampler.add(*chunk(0, 8))
    with pytest.raises(ValueError, match="only 8 stored"):
        sampler.sample(9)
    batch = sampler.sample(4)
    with pytest.raises(ValueError, match="NaN"):
        sampler.update_priorities(batch.slots, batch.generations, np.array([1.0, np.nan, 1.0, 1.0]))
    with pytest.raises(ConfigError, match="alpha"):
        PrioritizedConfig(alpha=1.5)
    with pytest.raises(ConfigError, match="capacity"):
        PrioritizedSampler(ReplayStorage.local(8, OBS, ACT), SumTree.local(9))


BLOCKED_IMPORT = """
import sys
sys.modules["spreeze_like._native"] = None  # as if the extension had never been built
try:
    import spreeze_like.replay
except ImportError as exc:
    print(exc)
    sys.exit(0)
sys.exit(1)
"""


def test_missing_native_module_fails_with_the_rebuild_command():
    out = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "pip install -e ." in out.stdout and "spreeze_like._native" in out.stdout
