"""The native sum tree against the numpy reference: random operation sequences, sampling
frequencies, zero priorities, stale updates, importance weights, bad input and crash recovery."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from spreeze_like.errors import ConfigError
from spreeze_like.replay.reference_tree import ReferenceSumTree
from spreeze_like.replay.sum_tree import KS, SumTree
from tests.replay.helpers import assert_tree_consistent, attach_buffer, shared_buffer

priority = st.one_of(st.just(0.0), st.floats(0.0, 1e6, allow_nan=False), st.floats(1e-6, 1e-3))


@st.composite
def op_sequences(draw):
    capacity = draw(st.integers(1, 300))
    slot = st.integers(0, capacity - 1)
    ops = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["update", "set_max", "td", "checked", "bump", "raise_max"]))
        slots = draw(st.lists(slot, min_size=1, max_size=2 * capacity + 5))
        n = len(slots)
        if kind == "update":
            ops.append((kind, slots, draw(st.lists(priority, min_size=n, max_size=n))))
        elif kind == "td":
            tds = draw(st.lists(st.floats(-1e3, 1e3), min_size=n, max_size=n))
            ops.append(
                (kind, slots, tds, draw(st.sampled_from([0.0, 0.5, 0.6, 1.0])), draw(st.sampled_from([0.0, 1e-6])))
            )
        elif kind == "raise_max":
            ops.append((kind, slots, draw(st.floats(1e-3, 1e3))))
        elif kind == "checked":
            ops.append(
                (
                    kind,
                    slots,
                    draw(st.lists(priority, min_size=n, max_size=n)),
                    draw(st.lists(st.booleans(), min_size=n, max_size=n)),
                )
            )
        else:
            ops.append((kind, slots))
    return capacity, draw(st.sampled_from(KS)), ops


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(op_sequences(), st.integers(0, 2**32))
def test_random_operation_sequences_match_the_reference(case, seed):
    capacity, k, ops = case
    tree, ref = SumTree.local(capacity, k=k, seed=seed), ReferenceSumTree(capacity)
    gens = np.zeros(capacity, np.uint64)
    rng = np.random.default_rng(seed)
    for op in ops:
        slots = np.array(op[1], np.int64)
        if op[0] == "update":
            assert tree.update(slots, np.array(op[2])) == ref.update(slots, np.array(op[2]))
        elif op[0] == "set_max":
            tree.set_max(slots)
            ref.set_max(slots)
        elif op[0] == "raise_max":
            tree.raise_max(op[2])
            ref.raise_max(op[2])
        elif op[0] == "td":
            _, _, tds, alpha, eps = op
            assert tree.update_from_td(slots, np.array(tds), alpha, eps) == ref.update_from_td(slots, tds, alpha, eps)
        elif op[0] == "checked":  # generation-checked update: entries marked False are stale
            expected = gens[slots] + np.where(op[3], 0, 2).astype(np.uint64)
            pr = np.array(op[2])
            assert tree.update(slots, pr, expected, gens) == ref.update(slots, pr, expected, gens)
        else:  # the slots were rewritten: their generation moves on
            gens[np.unique(slots)] += 2
        # Exact, but for (|td| + eps) ** alpha, which the tree computes with its own vectorised pow.
        np.testing.assert_allclose(tree.leaves(), ref.priorities, rtol=1e-12, atol=0)
        assert tree.max_priority() == pytest.approx(ref.max_priority(), rel=1e-12)
        assert tree.min() == pytest.approx(ref.min(), rel=1e-12)
        assert_tree_consistent(tree)
        total = ref.total()
        assert abs(tree.total() - total) <= 1e-9 * total
        if total > 0:
            u = rng.random(64) * total
            far = ref.boundary_distance(u) > 1e-9 * total  # at a boundary, rounding may pick either side
            np.testing.assert_array_equal(tree.find(u)[far], ref.find(u)[far])
            drawn, probs = tree.sample(32)
            assert np.all(ref.priorities[drawn] > 0)
            np.testing.assert_allclose(probs, ref.priorities[drawn] / total, rtol=1e-9)


@pytest.mark.parametrize("k", KS)
def test_sampled_frequencies_match_priorities_chi_square(k):
    capacity = 1000
    rng = np.random.default_rng(7)
    pr = rng.lognormal(0.0, 1.5, capacity)  # priorities over several orders of magnitude
    pr[rng.random(capacity) < 0.1] = 0.0
    tree = SumTree.local(capacity, k=k, seed=11)
    tree.update(np.arange(capacity), pr)
    counts = np.zeros(capacity, np.int64)
    draws = 0
    while draws < 1_000_000:
        slots, _ = tree.sample(4096)
        counts += np.bincount(slots, minlength=capacity)
        draws += slots.size
    assert counts[pr == 0].sum() == 0, "a zero-priority slot was drawn"
    positive = pr > 0
    expected = pr[positive] / pr.sum() * draws
    result = stats.chisquare(counts[positive], expected)
    assert result.pvalue > 1e-4, result


def test_zero_priority_slots_are_never_drawn_even_between_positive_ones():
    capacity = 4096
    pr = np.zeros(capacity)
    pr[::7] = np.random.default_rng(0).random(pr[::7].size) + 1e-12
    for k in KS:
        tree = SumTree.local(capacity, k=k, seed=k)
        tree.update(np.arange(capacity), pr)
        for _ in range(50):
            slots, probs = tree.sample(1024)
            assert np.all(slots % 7 == 0) and np.all(probs > 0)
        edges = np.cumsum(pr)[::7]  # prefix sums exactly at interval ends
        assert np.all(pr[tree.find(np.concatenate([[0.0], edges, [edges[-1] * 2]]))] > 0)


def test_importance_weights_match_the_reference():
    capacity = 500
    rng = np.random.default_rng(3)
    pr = rng.random(capacity) * 10 + 0.01
    pr[:50] = 0.0
    tree, ref = SumTree.local(capacity, seed=5), ReferenceSumTree(capacity)
    tree.update(np.arange(capacity), pr)
    ref.update(np.arange(capacity), pr)
    for beta in (0.0, 0.4, 1.0):
        slots, probs, weights = tree.sample_weighted(256, beta)
        assert weights.dtype == np.float32
        np.testing.assert_allclose(probs, pr[slots] / pr.sum(), rtol=1e-12)
        np.testing.assert_allclose(weights, ref.weights(slots, beta), rtol=1e-6)
        assert weights.max() <= 1.0
    slots, _, weights = tree.sample_weighted(4096, 0.7)
    smallest = np.argmin(np.where(pr > 0, pr, np.inf))
    assert np.all(weights[slots == smallest] == pytest.approx(1.0))


def test_new_slots_get_the_largest_priority_seen():
    tree = SumTree.local(16)
    tree.set_max(np.array([0, 1]))
    np.testing.assert_array_equal(tree.get(np.array([0, 1])), [1.0, 1.0])  # nothing seen yet: 1
    tree.update_from_td(np.array([0]), np.array([-8.0]), 0.5, 1.0)  # (8 + 1) ** 0.5 = 3
    tree.update(np.array([1]), np.array([0.5]))
    tree.set_max(np.array([5]))
    assert tree.get(np.array([5]))[0] == 3.0 and tree.max_priority() == 3.0


def test_raise_max_sets_what_new_slots_get_and_changes_no_leaf():
    tree = SumTree.local(16)
    tree.update(np.array([0, 1]), np.array([2.0, 0.5]))
    before = _snapshot(tree)[0]
    tree.raise_max(9.5)  # a resumed run's largest priority, above every loaded row's
    assert tree.max_priority() == 9.5
    for level, saved in zip(_snapshot(tree)[0], before):
        np.testing.assert_array_equal(level, saved)
    tree.raise_max(4.0)  # the largest only grows
    tree.set_max(np.array([3]))
    assert tree.get(np.array([3]))[0] == 9.5
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive and finite"):
            tree.raise_max(bad)
    assert tree.max_priority() == 9.5


def _snapshot(tree: SumTree):
    return [np.array(tree.level(lv)).copy() for lv in range(tree.depth + 1)], tree.max_priority()


@pytest.mark.parametrize(
    ("slots", "values", "error", "match"),
    [
        ([1, 2], [1.0, -0.5], ValueError, "negative"),
        ([1, 2], [np.nan, 1.0], ValueError, "NaN"),
        ([1, 2], [1.0, np.inf], ValueError, "infinite"),
        ([1, 100], [1.0, 1.0], ValueError, "outside the tree's capacity"),
        ([-1, 2], [1.0, 1.0], ValueError, "outside the tree's capacity"),
        (np.array([1.0, 2.0]), [1.0, 1.0], TypeError, "integer"),
        ([1, 2, 3], [1.0, 1.0], ValueError, "as long as slots"),
    ],
)
def test_bad_input_raises_and_leaves_the_tree_untouched(slots, values, error, match):
    tree = SumTree.local(100, seed=1)
    tree.update(np.arange(100), np.linspace(0.1, 10, 100))
    before = _snapshot(tree)
    with pytest.raises(error, match=match):
        tree.update(np.asarray(slots), np.asarray(values))
    after = _snapshot(tree)
    for a, b in zip(before[0], after[0]):
        np.testing.assert_array_equal(a, b)
    assert before[1] == after[1]


def test_bad_td_errors_and_bad_construction():
    tree = SumTree.local(10)
    with pytest.raises(ValueError, match="TD error at position 1 is NaN"):
        tree.update_from_td(np.array([0, 1]), np.array([1.0, np.nan]), 0.6, 1e-6)
    with pytest.raises(ValueError, match="every priority in the tree is zero"):
        tree.sample(4)
    for bad in (0, -1, 1.5):
        with pytest.raises(ConfigError, match="capacity"):
            SumTree.nbytes(bad)
    with pytest.raises(ConfigError, match="K must be one of"):
        SumTree.local(10, k=3)
    with pytest.raises(ValueError, match="too small"):
        SumTree(np.zeros(64, np.uint8), 10, create=True)
    with pytest.raises(ValueError, match="create it with create=True"):
        SumTree(np.zeros(SumTree.nbytes(10), np.uint8), 10, create=False)
    buf = np.zeros(SumTree.nbytes(10, 16), np.uint8)
    SumTree(buf, 10, k=16, create=True)
    with pytest.raises(ValueError, match="attach with the same K and capacity"):
        SumTree(buf, 9, k=16, create=False)


def test_attached_trees_share_one_memory():
    buf = np.zeros(SumTree.nbytes(1000), np.uint8)
    a = SumTree(buf, 1000, create=True, seed=1)
    b = SumTree(buf, 1000, create=False, seed=2)
    a.update(np.arange(10), np.arange(10.0))
    assert b.total() == 45.0 and b.get(np.array([9]))[0] == 9.0


def _die_mid_batch(name: str, capacity: int) -> None:
    SumTree(attach_buffer(name), capacity, create=False)._impl._die_mid_batch_for_tests(3, 1e6)


def test_a_writer_killed_holding_the_lock_is_recovered_from():
    capacity = 5000
    with shared_buffer(SumTree.nbytes(capacity), "tree") as (name, mem):
        tree = SumTree(mem, capacity, create=True)
        tree.update(np.arange(capacity), np.ones(capacity))
        proc = mp.get_context("spawn").Process(target=_die_mid_batch, args=(name, capacity))
        proc.start()
        proc.join(60)
        assert proc.exitcode == 3
        assert tree.get(np.array([3]))[0] == 1e6 and tree.total() == capacity  # leaf written, sums not
        tree.update(np.array([7]), np.array([2.0]))  # would block forever on a non-robust lock
        assert tree.lock_recoveries() == 1
        assert tree.total() == capacity - 2 + 1e6 + 2.0
        assert_tree_consistent(tree)


@pytest.mark.parametrize("k", KS)
def test_exact_interval_boundaries_follow_the_reference(k):
    # Small integer priorities: every sum is exact in float64, so boundaries must match exactly.
    rng = np.random.default_rng(k)
    capacity = 300
    pr = rng.integers(0, 4, capacity).astype(np.float64)
    pr[:5] = 0.0  # leading zeros: a prefix sum of 0 must skip them
    tree, ref = SumTree.local(capacity, k=k), ReferenceSumTree(capacity)
    tree.update(np.arange(capacity), pr)
    ref.update(np.arange(capacity), pr)
    edges = np.concatenate([[0.0], np.cumsum(pr), [pr.sum() + 1.0, -1.0]])
    found = tree.find(edges)
    np.testing.assert_array_equal(found, ref.find(edges))
    assert np.all(pr[found] > 0)


def test_td_priorities_at_the_edges_of_the_fast_pow():
    # Zero, subnormal, huge and ordinary |td| in one batch (the vectorised pow handles 8 at a time).
    td = np.array([0.0, 1e-310, -1e-300, 3.0, -1e300, 0.5, 1e-5, 7.0, 0.0, 2.0, 1e-320])
    for alpha in (0.0, 0.4, 0.5, 0.6, 1.0):
        tree = SumTree.local(td.size)
        tree.update_from_td(np.arange(td.size), td, alpha, 0.0)
        np.testing.assert_allclose(tree.leaves(), np.abs(td) ** alpha, rtol=1e-12, atol=0)
